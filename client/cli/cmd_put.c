/* cmd_put.c - "kvpack put": store a .kvd KV dump as one session on the first --replicas nodes of
 * its rendezvous rank. Each layer's full chunks of P tokens are encoded with the codec
 * (kvp_page_encode), the last < P tokens become one fp16 tail page per layer; then
 * kvp_cluster_put_session ships the pages chunk by chunk (all layers of a chunk per PUT_PAGES
 * batch) and the record to each node. Chunk keys chain over the token ids of --tokens (uint32 LE,
 * one per token of the dump), or else over ids derived from the dump's KV: a key names what its
 * page holds (the store keeps the first page put under a key), so two dumps share a prefix page
 * exactly when their KV agrees up to that chunk's end. Namespace: kvp_ns_fingerprint(model id,
 * L, H, D, P, codec). */
#include "cli.h"

#include "eval/eval.h"
#include "kvpack/alloc.h"
#include "kvpack/file.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

typedef struct {
    kvp_cli_sess_opts_t o;
    const char         *kvd, *tokens, *model_id;
    kvp_codec_id_t      codec;
    uint64_t            P;
} put_opts_t;

typedef struct {
    uint64_t     ns;
    uint32_t     n_chunks, tail_tokens, pages;
    uint64_t     bytes, tail_bytes;
    kvp_key128_t *keys;
    uint8_t      *buf;   /* the encoded chunk pages, page i at buf + i * cap */
    const void  **ptr;   /* n_chunks * layers page pointers and lengths */
    size_t       *len;
} put_state_t;

static void put_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack put (--node LIST | --etcd URL) --session SID --kvd FILE.kvd\n"
            "                  [--codec NAME] [--page-tokens P] [--model-id ID] [--tokens FILE] [--replicas N]\n"
            "                  [--json] [--timeout-ms MS]\n"
            "Store a .kvd KV dump as one session: every layer's full chunks of P tokens become\n"
            "codec pages, the last < P tokens the session's fp16 tail. It goes to the first\n"
            "--replicas nodes of the session's rank that take it (a node that fails is skipped\n"
            "and the next takes its place); fewer than --replicas is a warning, none an error.\n"
            KVP_CLI_NODES_HELP
            KVP_CLI_REPLICAS_HELP
            "  --codec NAME       fp16, kivi (default), kivi128, oscar, kvarn or naive2\n"
            "  --page-tokens P    tokens per page (default 128)\n"
            "  --model-id ID      model id of the namespace fingerprint (default \"kvd\")\n"
            "  --tokens FILE      token ids (uint32 little-endian, one per token of the dump) the\n"
            "                     chunk keys chain over; without it ids are hashes of each\n"
            "                     token's K and V, so dumps share prefix pages only where\n"
            "                     their KV agrees, and a session put again with other KV\n"
            "                     gets pages of its own\n"
            "Prints pages, bytes, fp16 bytes, the compression ratio and the namespace (hex).\n");
}

/* Without --tokens, token t's id is XXH3-64 of its K and V rows over every layer (the bits as
 * stored: the pages are a function of them), cut to 32 bits: a chunk key chains over P such ids
 * and every key before it, so keys match only where the KV up to the chunk's end does (a 32-bit
 * id alone may collide; 128 of them and the chain do not). The session id played this part
 * before, and a session put again with other KV named its new pages with the old keys: the store
 * kept the old pages and served them with the new tail, no error. */
static kvp_status_t put_kv_ids(const kvp_kv_t *kv, uint32_t *ids)
{
    XXH3_state_t *h   = XXH3_createState();
    size_t        row = (size_t)kv->heads * kv->head_dim;

    if (h == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t t = 0; t < kv->tokens; t++) {
        (void)XXH3_64bits_reset(h);
        for (uint32_t l = 0; l < kv->layers; l++) {
            size_t off = ((size_t)l * kv->tokens + t) * row;

            (void)XXH3_64bits_update(h, kv->k + off, row * sizeof(float));
            (void)XXH3_64bits_update(h, kv->v + off, row * sizeof(float));
        }
        ids[t] = (uint32_t)XXH3_64bits_digest(h);
    }
    XXH3_freeState(h);
    return KVP_OK;
}

/* Token ids: --tokens, or derived from the dump's KV (put_kv_ids). */
static kvp_status_t put_token_ids(const put_opts_t *p, const kvp_kv_t *kv, uint32_t **ids_p)
{
    uint32_t  T   = kv->tokens;
    uint32_t *ids = kvp_malloc((size_t)T * sizeof(*ids) + 1, "put ids");
    FILE     *f;
    long      size;

    if (ids == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    *ids_p = ids;
    if (p->tokens == NULL) {
        return put_kv_ids(kv, ids);
    }
    f = kvp_file_open(p->tokens, "rb");
    if (f == NULL) {
        fprintf(stderr, "kvpack put: cannot open %s: %s\n", p->tokens, strerror(errno));
        return KVP_ERR_IO;
    }
    /* read, not seek: a pipe (--tokens /dev/stdin) has no size to ask for; one byte past T ids
     * tells a longer file */
    size = (long)fread(ids, 1, (size_t)T * 4 + 1, f);
    if (ferror(f)) {
        fprintf(stderr, "kvpack put: cannot read %s: %s\n", p->tokens, strerror(errno));
        fclose(f);
        return KVP_ERR_IO;
    }
    if (size != (long)T * 4) {
        fprintf(stderr, "kvpack put: %s holds %s%ld bytes; the dump has %u tokens, so it must "
                        "hold %u uint32 ids (%llu bytes)\n", p->tokens,
                size > (long)T * 4 ? "more than " : "", size > (long)T * 4 ? (long)T * 4 : size,
                T, T, (unsigned long long)T * 4);
        fclose(f);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    fclose(f);
    for (uint32_t t = 0; t < T; t++) { /* the file is little-endian whatever this host is */
        const uint8_t *b = (const uint8_t *)&ids[t];

        ids[t] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    }
    return KVP_OK;
}

/* Page params for this dump: codec and flags, the dump's H and D, P. */
static kvp_page_params_t put_params(const put_opts_t *p, const kvp_kv_t *kv, kvp_codec_id_t codec,
                                    uint32_t flags)
{
    kvp_page_params_t pp;

    memset(&pp, 0, sizeof(pp));
    pp.codec       = codec;
    pp.heads       = kv->heads;
    pp.head_dim    = kv->head_dim;
    pp.page_tokens = (uint32_t)p->P;
    pp.flags       = flags;
    return pp;
}

/* Encode ntok tokens of kv from token first, on pp->layer, into out. */
static kvp_status_t put_encode(const kvp_kv_t *kv, kvp_page_params_t *pp, uint32_t first,
                               uint32_t ntok, uint8_t *out, size_t cap, size_t *len_p)
{
    size_t off = ((size_t)pp->layer * kv->tokens + first) * kv->heads * kv->head_dim;

    pp->first_pos = first;
    return kvp_page_encode(pp, KVP_DTYPE_F32, kv->k + off, kv->v + off, ntok, out, cap, len_p);
}

/* Encode every full chunk, all layers of a chunk back to back. */
static kvp_status_t put_chunks(const put_opts_t *p, const kvp_kv_t *kv, const uint32_t *ids,
                               put_state_t *st)
{
    kvp_page_params_t pp  = put_params(p, kv, p->codec, 0);
    size_t            cap = kvp_page_max_bytes(&pp);
    size_t            n   = (size_t)st->n_chunks * kv->layers;
    kvp_status_t      s;

    st->buf = kvp_malloc(cap * n + 1, "put chunks");
    st->ptr = kvp_calloc(n + 1, sizeof(*st->ptr), "put ptrs");
    st->len = kvp_calloc(n + 1, sizeof(*st->len), "put lens");
    s       = (st->buf && st->ptr && st->len) ? KVP_OK : KVP_ERR_NO_MEMORY;
    for (uint32_t ch = 0; s == KVP_OK && ch < st->n_chunks; ch++) {
        st->keys[ch] = kvp_chunk_key(ch ? &st->keys[ch - 1] : NULL, st->ns, ids + (size_t)ch * p->P,
                                     p->P);
        pp.chunk_key = st->keys[ch];
        for (uint32_t l = 0; s == KVP_OK && l < kv->layers; l++) {
            size_t i = (size_t)ch * kv->layers + l;

            pp.layer   = l;
            st->ptr[i] = st->buf + i * cap;
            s = put_encode(kv, &pp, ch * (uint32_t)p->P, (uint32_t)p->P, st->buf + i * cap, cap,
                           &st->len[i]);
            st->bytes += (s == KVP_OK) ? st->len[i] : 0;
            if (s != KVP_OK) {
                fprintf(stderr, "kvpack put: encoding chunk %u layer %u with %s: %s\n", ch, l,
                        kvp_codec_name(p->codec), kvp_status_str(s));
            }
        }
        kvp_progress("put encode", ch + 1, st->n_chunks);
    }
    kvp_progress_done();
    return s;
}

static void put_progress(void *arg, const char *node, uint64_t done, uint64_t total)
{
    (void)arg;
    (void)node;
    kvp_progress("put chunks", done, total);
}

/* The fp16 tail pages back to back, then the session: the pages and record to the nodes. */
static kvp_status_t put_record(const put_opts_t *p, const kvp_kv_t *kv, kvp_cluster_h cl,
                               put_state_t *st, kvp_cluster_report_t *rep)
{
    kvp_page_params_t  tp  = put_params(p, kv, KVP_CODEC_FP16, KVP_PAGE_F_TAIL);
    size_t             cap = kvp_page_max_bytes(&tp);
    kvp_session_desc_t d;
    kvp_status_t       s   = KVP_OK;

    memset(&d, 0, sizeof(d));
    d.layers      = kv->layers;
    d.page_tokens = (uint32_t)p->P;
    d.n_chunks    = st->n_chunks;
    d.chunk_keys  = st->keys;
    d.tail_tokens = st->tail_tokens;
    if (st->tail_tokens > 0) {
        d.n_tail = kv->layers;
        d.tail   = kvp_malloc(cap * kv->layers, "put tail");
        s        = d.tail ? KVP_OK : KVP_ERR_NO_MEMORY;
    }
    for (uint32_t l = 0; s == KVP_OK && l < d.n_tail; l++) {
        size_t len;

        tp.layer = l;
        s = put_encode(kv, &tp, st->n_chunks * (uint32_t)p->P, st->tail_tokens, d.tail + d.tail_len,
                       cap, &len);
        d.tail_len += (s == KVP_OK) ? len : 0;
    }
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack put: encoding the fp16 tail: %s\n", kvp_status_str(s));
    } else {
        s = kvp_cluster_put_session(cl, st->ns, p->o.session, st->ptr, st->len,
                                    (size_t)st->n_chunks * kv->layers, &d, rep);
        kvp_progress_done();
        if (s != KVP_OK || rep->n_ok < kvp_cluster_replicas(cl)) {
            kvp_cli_report_fail("put", cl, rep, "", "");
        }
    }
    st->tail_bytes = d.tail_len;
    st->pages = (s == KVP_OK) ? st->n_chunks * kv->layers + d.n_tail : 0;
    kvp_free(d.tail);
    return s;
}

static void put_report(const put_opts_t *p, const kvp_kv_t *kv, const put_state_t *st,
                       kvp_cluster_h cl, const kvp_cluster_report_t *rep)
{
    bool       many = kvp_cluster_size(cl) > 1;
    char       on[1024];
    uint64_t   fp16  = 4ull * kv->layers * kv->tokens * kv->heads * kv->head_dim;
    uint64_t   bytes = st->bytes + st->tail_bytes;
    double     ratio = bytes ? (double)fp16 / (double)bytes : 0.0;
    char       ns[KVP_CLI_NS_HEX];
    kvp_json_t j;

    kvp_cli_ns_hex(st->ns, ns);
    kvp_cli_report_ok(cl, rep, on, sizeof(on));
    if (rep->n_ok < kvp_cluster_replicas(cl)) {
        fprintf(stderr, "kvpack put: warning: session %s is on %u of %u replicas (%s)\n",
                p->o.session, rep->n_ok, kvp_cluster_replicas(cl), on);
    }
    if (!p->o.json) {
        printf("put session %s on %s: namespace %s (model id %s, %s, P %llu)\n", p->o.session,
               on, ns, p->model_id, kvp_codec_name(p->codec), (unsigned long long)p->P);
        printf("  %u layers x %u tokens (%u chunks + %u tail) x %u heads x %u\n", kv->layers,
               kv->tokens, st->n_chunks, st->tail_tokens, kv->heads, kv->head_dim);
        printf("  %u pages, %llu bytes (%llu in the fp16 tail) for %llu fp16 bytes: ratio %.2f\n",
               st->pages, (unsigned long long)bytes, (unsigned long long)st->tail_bytes,
               (unsigned long long)fp16, ratio);
        return;
    }
    kvp_cli_json_head(&j, &p->o, st->ns);
    if (many) { /* where it went, and the session's rendezvous rank over all nodes */
        uint32_t order[KVP_CLUSTER_MAX_NODES];

        kvp_json_int(&j, "replicas", rep->n_ok);
        kvp_json_arr(&j, "nodes");
        for (uint32_t i = 0; i < rep->n_tried; i++) {
            if (rep->tried[i].status == KVP_OK) {
                kvp_json_str(&j, NULL, kvp_cluster_peer(cl, rep->tried[i].node));
            }
        }
        kvp_json_close(&j);
        kvp_json_arr(&j, "rank");
        for (uint32_t i = 0; kvp_cluster_rank(cl, st->ns, p->o.session, order) == KVP_OK &&
                             i < kvp_cluster_size(cl); i++) {
            kvp_json_str(&j, NULL, kvp_cluster_peer(cl, order[i]));
        }
        kvp_json_close(&j);
    }
    kvp_json_str(&j, "model_id", p->model_id);
    kvp_cli_json_shape(&j, kvp_codec_name(p->codec), (uint32_t)p->P, kv->layers, kv->tokens,
                       kv->heads, kv->head_dim);
    kvp_json_int(&j, "chunks", st->n_chunks);
    kvp_json_int(&j, "tail_tokens", st->tail_tokens);
    kvp_json_str(&j, "token_ids", p->tokens ? "file" : "derived from the KV");
    kvp_json_int(&j, "pages", st->pages);
    kvp_json_int(&j, "bytes", (int64_t)bytes);
    kvp_json_int(&j, "tail_bytes", (int64_t)st->tail_bytes);
    kvp_json_int(&j, "fp16_bytes", (int64_t)fp16);
    kvp_json_num(&j, "ratio", ratio);
    kvp_json_end(&j);
}

/* Check the dump against the codec, encode and ship it; returns the exit status. */
static int put_run(const put_opts_t *p, const kvp_kv_t *kv)
{
    kvp_cluster_report_t rep;
    put_state_t          st;
    uint32_t            *ids = NULL;
    kvp_cluster_h        cl  = NULL;
    kvp_status_t         s;
    int                  rc;

    memset(&st, 0, sizeof(st));
    /* the codec's pages, and fp16 sink and tail pages, of the dump's geometry */
    if (!kvp_cli_codec_fits("put", p->codec, kv->heads, kv->head_dim, p->P) ||
        !kvp_cli_codec_fits("put", KVP_CODEC_FP16, kv->heads, kv->head_dim, p->P)) {
        return 2;
    }
    rc = kvp_cli_open("put", &p->o, put_progress, &cl);
    if (rc != 0) {
        return rc;
    }
    st.ns          = kvp_ns_fingerprint(p->model_id, kv->layers, kv->heads, kv->head_dim,
                                        (uint32_t)p->P, p->codec);
    st.n_chunks    = kv->tokens / (uint32_t)p->P;
    st.tail_tokens = kv->tokens % (uint32_t)p->P;
    st.keys        = kvp_calloc(st.n_chunks + 1u, sizeof(*st.keys), "put keys");
    s = st.keys ? put_token_ids(p, kv, &ids) : KVP_ERR_NO_MEMORY;
    if (s == KVP_OK) {
        s = put_chunks(p, kv, ids, &st);
    }
    if (s == KVP_OK) {
        s = put_record(p, kv, cl, &st, &rep);
    }
    if (s == KVP_OK) {
        put_report(p, kv, &st, cl, &rep);
    }
    kvp_cluster_destroy(cl);
    kvp_free(ids);
    kvp_free(st.keys);
    kvp_free(st.buf);
    kvp_free(st.ptr);
    kvp_free(st.len);
    return s == KVP_OK ? 0 : 1;
}

int kvp_cmd_put(int argc, char **argv)
{
    put_opts_t  p;
    const char *codec = "kivi";
    kvp_kv_t    kv;
    char        bad[160], why[KVP_KVD_WHY_MAX];
    kvp_status_t s;
    int          rc;

    memset(&p, 0, sizeof(p));
    p.model_id = "kvd";
    p.P        = 128;
    if (kvp_opt_help(argc, argv)) {
        put_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_cli_sess_opt(argc, argv, &i, KVP_CLI_TAKES_SESSION | KVP_CLI_TAKES_REPLICAS,
                             &p.o) ||
            kvp_opt_str(argc, argv, &i, "--kvd", &p.kvd) ||
            kvp_opt_str(argc, argv, &i, "--codec", &codec) ||
            kvp_opt_str(argc, argv, &i, "--tokens", &p.tokens) ||
            kvp_opt_str(argc, argv, &i, "--model-id", &p.model_id) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &p.P)) {
            continue;
        }
        return kvp_opt_unknown("put", argv[i]);
    }
    if (p.o.session == NULL) {
        return kvp_cli_usage_error("put", "--session SID is required");
    }
    if (p.kvd == NULL) {
        return kvp_cli_usage_error("put", "--kvd FILE.kvd is required");
    }
    if (!kvp_cli_codec("put", codec, NULL, &p.codec)) {
        return 2;
    }
    if (!kvp_cli_range("put", "--page-tokens", p.P, 1, KVP_PAGE_MAX_TOKENS)) {
        return 2;
    }
    if ((rc = kvp_cli_sess_peers("put", &p.o)) != 0) { /* --etcd: the nodes from etcd */
        return rc;
    }
    s = kvp_kvd_read(p.kvd, &kv, why, sizeof(why));
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack put: %s; nothing was sent\n", why);
        return 1;
    }
    if (kvp_kv_find_unstorable(&kv, bad, sizeof(bad))) {
        fprintf(stderr, "kvpack put: %s: %s: NaN, Inf or past fp16 range (|x| > 65504), which no "
                        "codec stores; nothing was sent\n", p.kvd, bad);
        kvp_kv_free(&kv);
        return 1;
    }
    rc = put_run(&p, &kv);
    kvp_kv_free(&kv);
    return rc;
}
