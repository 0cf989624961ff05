/* cmd_bench_stream.c - "kvpack bench stream": both roles of a disaggregated session against a
 * local node, serial against streamed, in the same run, alternated, medians of --reps.
 * Prefill: encode every layer then put the session, against each layer's pages pushed on a
 * kvp_put_stream while the next layer encodes (the last with the record). Decode: get the session
 * then decode every page to fp16, against kvp_client_get_session_cb handing each run of pages, as
 * it lands, to a decode thread while the get goes on receiving the rest. Each half's parts alone (encode, ship; get, decode) are
 * timed too: a perfect overlap would take the larger instead of their sum. Every page is encoded
 * from one fp32 chunk of synthetic KV (the codecs' cost does not depend on the values). Checked,
 * not timed: the warm-up's streamed session is read back page-identical, and both decodes give
 * the same fp16 bytes. Never asserts on speed.
 * --replicas R: the prefill half against R nodes (each gets a copy) and, with --decode-node, a
 * decode node's kvpackd too: serial is kvp_cluster_put_session (replica after replica) then a put
 * to the decode node, streamed is one kvp_cluster_stream to all of them (a shipping thread per
 * node); every copy is checked after the warm-up; the decode half then reads the decode node's
 * copy (else the first node's).
 * Flow: fork the nodes -> reps x (prefill: serial, streamed, encode, ship) -> put one session ->
 * reps x (decode: serial, streamed, get, decode) -> JSON. */
#include "cli.h"
#include "proc.h"

#include "kvpack/alloc.h"
#include "kvpack/cluster.h"
#include "kvpack/codec.h"
#include "kvpack/kvpack.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REPS  32
#define MAX_NODES 5 /* --replicas up to 4, and the decode node */

typedef struct {
    kvp_opt_kv_t kv;
    uint64_t     replicas;
    bool         json, decode_node;
} bs_opts_t;

/* Where the prefill half puts: one node (c and its put stream ps), or a cluster of replicas
 * nodes (cl) and maybe a decode node (c, at also). */
typedef struct {
    kvp_client_h     c;
    kvp_put_stream_h ps;
    kvp_cluster_h    cl;
    uint32_t         replicas;
    const char      *also;
    const void     **cm_pages; /* the pages chunk-major, for kvp_cluster_put_session */
    size_t          *cm_lens;
} bs_dst_t;

/* One session's worth of pages, layer-major (page [l][c] at l * chunks + c) so a layer's pages
 * are one contiguous list, and its record. */
typedef struct {
    uint32_t           layers, chunks;
    uint64_t           ns; /* the stream's namespace, every run's */
    kvp_page_params_t  pp;
    float             *k, *v;  /* one chunk of fp32 KV: [token][head][dim] */
    uint8_t          **pages;
    size_t            *lens, cap;
    kvp_session_desc_t desc;
} bs_set_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack bench stream [options]\n"
            "Both roles of a session against a local node, serial against streamed, same run,\n"
            "alternated, medians. Prefill: encode all then put, against kvp_put_stream (layer l\n"
            "ships while layer l+1 encodes). Decode: get then decode every page to fp16, against\n"
            "kvp_client_get_session_cb (each run of pages handed to a decode thread as it lands).\n"
            "Prints JSON with --json.\n\n"
            "  --codec NAME        codec of the pages (default kivi)\n"
            "  --layers N          (default 16)    --heads N       (default 8)\n"
            "  --head-dim N        (default 128)   --tokens N      (default 4096)\n"
            "  --page-tokens N     (default 128)   --reps N        (default 5, at most 32)\n"
            "  --replicas R        prefill to R local nodes, each a copy (1..4; serial:\n"
            "                      kvp_cluster_put_session, streamed: kvp_cluster_stream)\n"
            "  --decode-node       with --replicas: also to a decode node's kvpackd (serial: one\n"
            "                      more put after the cluster's; streamed: the stream's also\n"
            "                      node); the decode half reads that copy\n"
            "  --json              one JSON object on stdout\n");
}

static kvp_status_t bs_make(const bs_opts_t *o, kvp_codec_id_t codec, bs_set_t *s)
{
    size_t   n = (size_t)o->kv.page_tokens * o->kv.heads * o->kv.head_dim;
    uint32_t tokens[4096];
    uint64_t x = 0x9E3779B97F4A7C15ull;

    memset(s, 0, sizeof(*s));
    s->layers         = (uint32_t)o->kv.layers;
    s->ns             = 0x9f11;
    s->chunks         = (uint32_t)(o->kv.tokens / o->kv.page_tokens);
    s->pp.codec       = codec;
    s->pp.heads       = (uint32_t)o->kv.heads;
    s->pp.head_dim    = (uint32_t)o->kv.head_dim;
    s->pp.page_tokens = (uint32_t)o->kv.page_tokens;
    s->cap            = kvp_page_max_bytes(&s->pp);
    s->k              = kvp_malloc(n * sizeof(float), "prefill k");
    s->v              = kvp_malloc(n * sizeof(float), "prefill v");
    s->pages          = kvp_calloc((size_t)s->layers * s->chunks, sizeof(*s->pages), "pages");
    s->lens           = kvp_calloc((size_t)s->layers * s->chunks, sizeof(*s->lens), "lens");
    s->desc.layers      = s->layers;
    s->desc.page_tokens = s->pp.page_tokens;
    s->desc.n_chunks    = s->chunks;
    s->desc.chunk_keys  = kvp_calloc(s->chunks, sizeof(kvp_key128_t), "prefill keys");
    if (s->cap == 0) {
        return KVP_ERR_UNSUPPORTED;
    }
    if (s->k == NULL || s->v == NULL || s->pages == NULL || s->lens == NULL ||
        s->desc.chunk_keys == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) { /* uniform in [-2, 2), a few outlier K channels */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        s->k[i] = ((float)(x >> 40) / 16777216.0f * 4.0f - 2.0f) *
                  ((i % o->kv.head_dim) % 37 == 3 ? 8.0f : 1.0f);
        s->v[i] = (float)(x & 0xFFFFFF) / 16777216.0f * 4.0f - 2.0f;
    }
    for (uint32_t c = 0; c < s->chunks; c++) {
        for (uint32_t t = 0; t < s->pp.page_tokens; t++) {
            tokens[t] = c * s->pp.page_tokens + t;
        }
        s->desc.chunk_keys[c] = kvp_chunk_key(c ? &s->desc.chunk_keys[c - 1] : NULL, s->ns,
                                              tokens, s->pp.page_tokens);
    }
    for (size_t i = 0; i < (size_t)s->layers * s->chunks; i++) {
        s->pages[i] = kvp_malloc(s->cap, "prefill page");
        if (s->pages[i] == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
    }
    return KVP_OK;
}

static void bs_free(bs_set_t *s)
{
    for (size_t i = 0; s->pages != NULL && i < (size_t)s->layers * s->chunks; i++) {
        kvp_free(s->pages[i]);
    }
    kvp_free(s->pages);
    kvp_free(s->lens);
    kvp_free(s->desc.chunk_keys);
    kvp_free(s->k);
    kvp_free(s->v);
}

/* Encode layer l's page of every chunk. */
static kvp_status_t bs_encode_layer(bs_set_t *s, uint32_t l)
{
    kvp_status_t st = KVP_OK;

    for (uint32_t c = 0; c < s->chunks && st == KVP_OK; c++) {
        size_t i = (size_t)l * s->chunks + c;

        s->pp.layer     = l;
        s->pp.chunk_key = s->desc.chunk_keys[c];
        s->pp.first_pos = (uint64_t)c * s->pp.page_tokens;
        st = kvp_page_encode(&s->pp, KVP_DTYPE_F32, s->k, s->v, s->pp.page_tokens, s->pages[i],
                             s->cap, &s->lens[i]);
    }
    return st;
}

/* The stored session must be what was encoded: every page byte-identical (checked once, after
 * the warm-up's streamed put; not timed). */
static kvp_status_t bs_verify(const bs_set_t *s, kvp_client_h c, const char *sid)
{
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         st = kvp_client_get_session(c, s->ns, sid, &sp);

    for (uint32_t ch = 0; st == KVP_OK && ch < s->chunks; ch++) {
        for (uint32_t l = 0; st == KVP_OK && l < s->layers; l++) {
            size_t i = (size_t)l * s->chunks + ch, j = (size_t)ch * s->layers + l;

            if (sp->page_lens[j] != s->lens[i] || memcmp(sp->pages[j], s->pages[i], s->lens[i])) {
                fprintf(stderr, "kvpack bench stream: the node's page of chunk %u layer %u "
                                "differs from what was pushed\n", ch, l);
                st = KVP_ERR_CORRUPT;
            }
        }
    }
    kvp_session_pages_free(sp);
    return st;
}

/* Every copy of sid the prefill half made must be what was encoded. */
static kvp_status_t bs_verify_all(const bs_set_t *s, const bs_dst_t *d, const char *sid)
{
    kvp_status_t st = d->c != NULL ? bs_verify(s, d->c, sid) : KVP_OK;

    for (uint32_t k = 0; d->cl != NULL && st == KVP_OK && k < d->replicas; k++) {
        kvp_client_h nc;

        st = kvp_cluster_client(d->cl, k, &nc);
        st = st == KVP_OK ? bs_verify(s, nc, sid) : st;
    }
    return st;
}

/* The encoded session to every destination, not streamed: one put to the node, or the cluster's
 * put_session (replica after replica) and then the decode node's. */
static kvp_status_t bs_ship(bs_set_t *s, const bs_dst_t *d, const char *sid)
{
    const void *const   *pages = (const void *const *)s->pages;
    size_t               n = (size_t)s->layers * s->chunks;
    kvp_cluster_report_t rep;
    kvp_status_t         st;

    if (d->cl == NULL) {
        return kvp_client_put_session_pages(d->c, s->ns, sid, &s->desc, pages, s->lens, n,
                                            kvp_version_now());
    }
    for (uint32_t ch = 0; ch < s->chunks; ch++) {
        for (uint32_t l = 0; l < s->layers; l++) {
            d->cm_pages[(size_t)ch * s->layers + l] = s->pages[(size_t)l * s->chunks + ch];
            d->cm_lens[(size_t)ch * s->layers + l]  = s->lens[(size_t)l * s->chunks + ch];
        }
    }
    st = kvp_cluster_put_session(d->cl, s->ns, sid, d->cm_pages, d->cm_lens, n, &s->desc, &rep);
    st = st == KVP_OK && rep.n_ok != d->replicas ? KVP_ERR_PEER_UNREACHABLE : st;
    if (st == KVP_OK && d->c != NULL) {
        st = kvp_client_put_session_pages(d->c, s->ns, sid, &s->desc, pages, s->lens, n,
                                          kvp_version_now());
    }
    return st;
}

/* mode 0: serial (encode all, then bs_ship); 1: streamed (each layer pushed as it is encoded);
 * 2: encode only; 3: ship only (pages already encoded). Returns seconds, or a negative number on
 * an error (*st_p says which). Run 1 (the warm-up's streamed put) is checked by bs_verify_all. */
static double bs_run(bs_set_t *s, int mode, const bs_dst_t *d, uint64_t run, kvp_status_t *st_p)
{
    const void *const   *pages = (const void *const *)s->pages;
    size_t               per = s->chunks, last = (size_t)(s->layers - 1) * per;
    double               t0 = kvp_time_s();
    kvp_status_t         st = KVP_OK, also_st = KVP_OK;
    kvp_cluster_stream_h cs = NULL;
    kvp_cluster_report_t rep;
    char                 sid[32];

    snprintf(sid, sizeof(sid), "stream-%llu", (unsigned long long)run);
    if (mode == 1 && d->cl != NULL) {
        st = kvp_cluster_stream_open(d->cl, s->ns, sid, d->also, &cs);
    }
    for (uint32_t l = 0; l < s->layers && st == KVP_OK && mode != 3; l++) {
        st = bs_encode_layer(s, l);
        if (st == KVP_OK && mode == 1 && l + 1 < s->layers) {
            st = cs != NULL ? kvp_cluster_stream_push(cs, pages + (size_t)l * per,
                                                      s->lens + (size_t)l * per, per)
                            : kvp_put_stream_push(d->ps, pages + (size_t)l * per,
                                                  s->lens + (size_t)l * per, per);
        }
    }
    if (st == KVP_OK && (mode == 0 || mode == 3)) {
        st = bs_ship(s, d, sid);
    } else if (st == KVP_OK && mode == 1 && cs != NULL) {
        st = kvp_cluster_stream_finish(cs, &s->desc, pages + last, s->lens + last, per, &rep,
                                       &also_st);
        st = st == KVP_OK && (rep.n_ok != d->replicas || also_st != KVP_OK)
                 ? (also_st != KVP_OK ? also_st : KVP_ERR_PEER_UNREACHABLE) : st;
    } else if (st == KVP_OK && mode == 1) {
        st = kvp_put_stream_finish(d->ps, sid, &s->desc, pages + last, s->lens + last, per,
                                   kvp_version_now());
    }
    kvp_cluster_stream_close(cs);
    t0 = kvp_time_s() - t0;
    if (st == KVP_OK && run == 1) {
        st = bs_verify_all(s, d, sid);
    }
    if (st == KVP_OK && mode != 2) { /* not timed: the next run stores every page afresh */
        st = d->cl != NULL ? kvp_cluster_delete_session(d->cl, s->ns, sid, NULL) : KVP_OK;
        st = st == KVP_OK && d->c != NULL ? kvp_client_delete_session(d->c, s->ns, sid) : st;
    }
    *st_p = st;
    return st == KVP_OK ? t0 : -1.0;
}

/* ---- decode half: pages decoded to fp16 (one reused page buffer, as into an engine's cache) ---- */

typedef struct {
    uint16_t    *k, *v;   /* one page of fp16 K and V */
    uint64_t     sum;     /* of every decoded K/V word, item-weighted: both decodes must agree */
    uint32_t     pages;   /* decoded */
    kvp_status_t status;  /* the first decode error */
    size_t       words;   /* per K (and V) page */
} bs_dec_t;

static void bs_decode_run(void *arg, uint32_t first, uint32_t n, const void *const *pages,
                          const size_t *lens)
{
    bs_dec_t *d = arg;

    for (uint32_t i = 0; i < n && d->status == KVP_OK; i++) {
        d->status = kvp_page_decode(pages[i], lens[i], KVP_DTYPE_F16, KVP_FRAME_ORIGINAL, d->k, d->v,
                                    NULL);
        for (size_t w = 0; w < d->words && d->status == KVP_OK; w += 61) { /* a sample suffices */
            d->sum += (uint64_t)(first + i + 1) * (d->k[w] + 3u * d->v[w]);
        }
        d->pages++;
    }
}

/* The streamed decode's worker: runs handed over by the get's callback are decoded here while the
 * get goes on receiving (an engine's decode thread; the callback itself only queues). */
typedef struct bs_job {
    struct bs_job     *next;
    uint32_t           first, n;
    const void *const *pages;
    const size_t      *lens;
} bs_job_t;

typedef struct {
    bs_dec_t       *d;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    bs_job_t       *head, *tail;
    int             done; /* no more runs will come */
} bs_worker_t;

static void bs_queue_run(void *arg, uint32_t first, uint32_t n, const void *const *pages,
                         const size_t *lens)
{
    bs_worker_t *w = arg;
    bs_job_t    *j = kvp_malloc(sizeof(*j), "stream decode job");

    if (j == NULL) { /* decode it here instead */
        bs_decode_run(w->d, first, n, pages, lens);
        return;
    }
    *j = (bs_job_t){NULL, first, n, pages, lens};
    pthread_mutex_lock(&w->mu);
    if (w->tail != NULL) {
        w->tail->next = j;
    } else {
        w->head = j;
    }
    w->tail = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void *bs_worker_main(void *arg)
{
    bs_worker_t *w = arg;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        bs_job_t *j;

        while (w->head == NULL && !w->done) {
            pthread_cond_wait(&w->cv, &w->mu);
        }
        if (w->head == NULL) {
            break;
        }
        j       = w->head;
        w->head = j->next;
        w->tail = w->head == NULL ? NULL : w->tail;
        pthread_mutex_unlock(&w->mu);
        bs_decode_run(w->d, j->first, j->n, j->pages, j->lens);
        kvp_free(j);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* mode 0: get then decode; 1: each run decoded by a worker as it lands (get_session_cb); 2: get
 * only; 3: decode only (of a session fetched untimed). Returns seconds or a negative number. */
static double bs_get_run(int mode, kvp_client_h c, uint64_t ns, bs_dec_t *d, kvp_status_t *st_p)
{
    kvp_session_pages_t *sp = NULL;
    double               t0, t;
    kvp_status_t         st = KVP_OK;

    d->sum    = 0;
    d->pages  = 0;
    d->status = KVP_OK;
    if (mode == 3) {
        st = kvp_client_get_session(c, ns, "stream-get", &sp);
    }
    t0 = kvp_time_s();
    if (mode == 1) {
        bs_worker_t w = {.d = d};
        pthread_t   th;

        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        if (pthread_create(&th, NULL, bs_worker_main, &w) != 0) {
            st = KVP_ERR_NO_MEMORY;
        } else {
            st = kvp_client_get_session_cb(c, ns, "stream-get", NULL, bs_queue_run, &w, &sp);
            pthread_mutex_lock(&w.mu);
            w.done = 1;
            pthread_cond_signal(&w.cv);
            pthread_mutex_unlock(&w.mu);
            pthread_join(th, NULL); /* it drains what was queued, then stops */
        }
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
    } else if (mode != 3) {
        st = kvp_client_get_session(c, ns, "stream-get", &sp);
    }
    if (st == KVP_OK && (mode == 0 || mode == 3)) {
        bs_decode_run(d, 0, sp->n_pages, (const void *const *)sp->pages, sp->page_lens);
    }
    t  = kvp_time_s() - t0;
    st = st != KVP_OK ? st : d->status;
    if (st == KVP_OK && mode != 2 && d->pages != sp->n_pages) {
        fprintf(stderr, "kvpack bench stream: %u of %u pages decoded\n", d->pages, sp->n_pages);
        st = KVP_ERR_PROTOCOL;
    }
    kvp_session_pages_free(sp);
    *st_p = st;
    return st == KVP_OK ? t : -1.0;
}

/* One half's JSON object (or text lines): the medians, streamed over serial, the bound. */
static void bs_report(kvp_json_t *j, const char *half, const char *const *names, const double *med)
{
    double bound = med[0] / (med[2] > med[3] ? med[2] : med[3]);

    if (j != NULL) {
        kvp_json_obj(j, half);
        for (int m = 0; m < 4; m++) {
            char key[32];

            snprintf(key, sizeof(key), "%s_s", names[m]);
            kvp_json_num(j, key, med[m]);
        }
        kvp_json_num(j, "streamed_vs_serial", med[0] / med[1]);
        kvp_json_num(j, "perfect_overlap_vs_serial", bound);
        kvp_json_close(j);
        return;
    }
    printf("%s:", half);
    for (int m = 0; m < 4; m++) {
        printf("  %s %.1f ms", names[m], med[m] * 1e3);
    }
    printf("\n  streamed is %.2fx serial (a perfect overlap, max(%s, %s): %.2fx)\n",
           med[0] / med[1], names[2], names[3], bound);
}

int kvp_cmd_bench_stream(int argc, char **argv)
{
    bs_opts_t           o = {{"kivi", 16, 8, 128, 4096, 128, 5}, 0, false, false};
    static const char  *names[2][4] = {{"serial", "streamed", "encode", "ship"},
                                       {"serial", "streamed", "get", "decode"}};
    double              t[2][4][MAX_REPS], med[2][4];
    kvp_client_params_t cp;
    bs_dst_t            dst;
    kvp_client_h        c = NULL; /* the decode half's node */
    kvp_codec_id_t      codec;
    bs_set_t            s;
    bs_dec_t            d;
    uint64_t            sums[4] = {0};
    char                dir[MAX_NODES][32], addr[MAX_NODES][64], peers[MAX_NODES * 64];
    uint64_t            bytes = 0;
    pid_t               node[MAX_NODES];
    uint32_t            n_nodes, started = 0;
    kvp_status_t        st;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_kv(argc, argv, &i, &o.kv) ||
            kvp_opt_u64(argc, argv, &i, "--replicas", &o.replicas)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            o.json = true;
        } else if (kvp_opt_flag(argv, i, "--decode-node")) {
            o.decode_node = true;
        } else {
            return kvp_opt_unknown("bench stream", argv[i]);
        }
    }
    if (!kvp_cli_codec("bench stream", o.kv.codec, NULL, &codec)) {
        return 2;
    }
    if (!kvp_cli_range("bench stream", "--reps", o.kv.reps, 1, MAX_REPS) ||
        !kvp_cli_geometry("bench stream", "--heads", o.kv.heads, "--head-dim", o.kv.head_dim,
                          "--page-tokens", o.kv.page_tokens) ||
        !kvp_cli_codec_fits("bench stream", codec, o.kv.heads, o.kv.head_dim, o.kv.page_tokens) ||
        !kvp_cli_range("bench stream", "--tokens", o.kv.tokens, o.kv.page_tokens, 1u << 24) ||
        !kvp_cli_range("bench stream", "--layers", o.kv.layers, 2, 1024) ||
        (o.replicas != 0 && /* 0, as when not given: one node, no replicas */
         !kvp_cli_range("bench stream", "--replicas", o.replicas, 1, MAX_NODES - 1))) {
        return 2;
    }
    if (o.decode_node && o.replicas == 0) {
        return kvp_cli_usage_error("bench stream", "--decode-node needs --replicas R");
    }
    n_nodes = o.replicas == 0 ? 1 : (uint32_t)o.replicas + o.decode_node;
    memset(&s, 0, sizeof(s));
    memset(&d, 0, sizeof(d));
    d.words = (size_t)o.kv.page_tokens * o.kv.heads * o.kv.head_dim;
    d.k     = kvp_malloc(d.words * sizeof(uint16_t), "stream decode k");
    d.v     = kvp_malloc(d.words * sizeof(uint16_t), "stream decode v");
    st      = (d.k == NULL || d.v == NULL) ? KVP_ERR_NO_MEMORY : bs_make(&o, codec, &s);
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack bench stream: %s pages of this geometry: %s\n", o.kv.codec,
                kvp_status_str(st));
        goto out_mem;
    }
    memset(&dst, 0, sizeof(dst));
    memset(dir, 0, sizeof(dir));
    for (uint32_t k = 0; k < MAX_NODES; k++) {
        node[k] = -1;
    }
    for (; started < n_nodes; started++) {
        uint16_t port;

        snprintf(dir[started], sizeof(dir[0]), "/tmp/kvp_bench_stream_XXXXXX");
        if (mkdtemp(dir[started]) == NULL ||
            (port = kvp_proc_node_start(dir[started], "8G", &node[started])) == 0) {
            fprintf(stderr, "kvpack bench stream: could not start node %u\n", started + 1);
            st = KVP_ERR_IO;
            goto out_nodes;
        }
        snprintf(addr[started], sizeof(addr[0]), "127.0.0.1:%u", port);
    }
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.timeout_ms = 60000;
    if (o.replicas == 0) { /* one node: a client and a put stream */
        cp.server = addr[0];
        st        = kvp_client_create(&cp, &dst.c);
        st        = st == KVP_OK ? kvp_put_stream_open(&cp, s.ns, &dst.ps) : st;
        c         = dst.c;
    } else {
        kvp_cluster_params_t clp;
        size_t               off = 0;

        for (uint32_t k = 0; k < o.replicas; k++) {
            off += (size_t)snprintf(peers + off, sizeof(peers) - off, "%s%s", k ? "," : "",
                                    addr[k]);
        }
        memset(&clp, 0, sizeof(clp));
        clp.field_mask = KVP_CLUSTER_PARAM_PEERS | KVP_CLUSTER_PARAM_REPLICAS |
                         KVP_CLUSTER_PARAM_CLIENT;
        clp.peers    = peers;
        clp.replicas = dst.replicas = (uint32_t)o.replicas;
        clp.client   = &cp;
        dst.cm_pages = kvp_calloc((size_t)s.layers * s.chunks, sizeof(*dst.cm_pages), "pages");
        dst.cm_lens  = kvp_calloc((size_t)s.layers * s.chunks, sizeof(*dst.cm_lens), "lens");
        st = dst.cm_pages == NULL || dst.cm_lens == NULL ? KVP_ERR_NO_MEMORY
                                                         : kvp_cluster_create(&clp, &dst.cl);
        if (st == KVP_OK && o.decode_node) {
            dst.also  = addr[o.replicas];
            cp.server = dst.also;
            st        = kvp_client_create(&cp, &dst.c);
        }
        c = dst.c;
        if (st == KVP_OK && c == NULL) { /* the decode half reads the first node's copy */
            st = kvp_cluster_client(dst.cl, 0, &c);
        }
    }
    /* prefill; warm-up first: connections, the node's pool first touch, the codec's scratch */
    if (st == KVP_OK && bs_run(&s, 0, &dst, 0, &st) >= 0) {
        (void)bs_run(&s, 1, &dst, 1, &st);
    }
    for (uint64_t r = 0; r < o.kv.reps && st == KVP_OK; r++) {
        for (int m = 0; m < 4 && st == KVP_OK; m++) {
            int mode = (r % 2 == 1 && m < 2) ? 1 - m : m; /* serial and streamed alternate first */

            t[0][mode][r] = bs_run(&s, mode, &dst, 2 + r * 4 + (uint64_t)mode, &st);
        }
        kvp_progress("bench stream: prefill", r + 1, o.kv.reps);
    }
    /* decode, of one session the node holds (untimed put) */
    if (st == KVP_OK) {
        st = kvp_client_put_session_pages(c, s.ns, "stream-get", &s.desc,
                                          (const void *const *)s.pages, s.lens,
                                          (size_t)s.layers * s.chunks, kvp_version_now());
    }
    for (int m = 0; m < 2 && st == KVP_OK; m++) { /* warm-up */
        (void)bs_get_run(m, c, s.ns, &d, &st);
    }
    for (uint64_t r = 0; r < o.kv.reps && st == KVP_OK; r++) {
        for (int m = 0; m < 4 && st == KVP_OK; m++) {
            int mode = (r % 2 == 1 && m < 2) ? 1 - m : m;

            t[1][mode][r] = bs_get_run(mode, c, s.ns, &d, &st);
            sums[mode]    = d.sum;
        }
        if (st == KVP_OK && (sums[1] != sums[0] || sums[3] != sums[0])) {
            fprintf(stderr, "kvpack bench stream: the streamed decode differs from the serial "
                            "one\n");
            st = KVP_ERR_CORRUPT;
        }
        kvp_progress("bench stream: decode", r + 1, o.kv.reps);
    }
    kvp_progress_done();
    for (size_t i = 0; i < (size_t)s.layers * s.chunks; i++) {
        bytes += s.lens[i];
    }
out_nodes:
    kvp_put_stream_close(dst.ps);
    kvp_client_destroy(dst.c);
    kvp_cluster_destroy(dst.cl); /* c, when it is the first node's, goes with it */
    kvp_free(dst.cm_pages);
    kvp_free(dst.cm_lens);
    for (uint32_t k = 0; k < n_nodes; k++) {
        if (node[k] > 0) { /* also one that forked but never got ready */
            kill(node[k], SIGTERM);
            waitpid(node[k], NULL, 0);
        }
        if (dir[k][0] != '\0') {
            rmdir(dir[k]);
        }
    }
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack bench stream: %s\n", kvp_status_str(st));
        goto out_mem;
    }
    for (int h = 0; h < 2; h++) {
        for (int m = 0; m < 4; m++) {
            kvp_sort_f64(t[h][m], o.kv.reps);
            med[h][m] = kvp_median_sorted(t[h][m], o.kv.reps);
        }
    }
    if (o.json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "bench", "stream");
        kvp_json_str(&j, "codec", o.kv.codec);
        kvp_json_int(&j, "layers", (int64_t)s.layers);
        kvp_json_int(&j, "heads", (int64_t)o.kv.heads);
        kvp_json_int(&j, "head_dim", (int64_t)o.kv.head_dim);
        kvp_json_int(&j, "tokens", (int64_t)s.chunks * s.pp.page_tokens);
        kvp_json_int(&j, "page_tokens", (int64_t)s.pp.page_tokens);
        kvp_json_int(&j, "pages", (int64_t)s.layers * s.chunks);
        kvp_json_int(&j, "session_bytes", (int64_t)bytes);
        kvp_json_int(&j, "reps", (int64_t)o.kv.reps);
        kvp_json_int(&j, "replicas", (int64_t)o.replicas); /* 0: one node, kvp_put_stream */
        kvp_json_bool(&j, "decode_node", o.decode_node);
        bs_report(&j, "prefill", names[0], med[0]);
        bs_report(&j, "decode", names[1], med[1]);
        kvp_json_end(&j);
    } else {
        printf("%s session: %u layers x %u chunks, %u pages, %.1f MB; medians of %llu; prefill to "
               "%s%s\n", o.kv.codec, s.layers, s.chunks, s.layers * s.chunks, bytes / 1e6,
               (unsigned long long)o.kv.reps, o.replicas ? "a cluster (replicas)" : "one node",
               o.decode_node ? " and a decode node" : "");
        bs_report(NULL, "prefill", names[0], med[0]);
        bs_report(NULL, "decode", names[1], med[1]);
    }
out_mem:
    bs_free(&s);
    kvp_free(d.k);
    kvp_free(d.v);
    return st == KVP_OK ? 0 : 1;
}
