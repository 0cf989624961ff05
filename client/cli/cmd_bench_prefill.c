/* cmd_bench_prefill.c - "kvpack bench prefill": a prefill's encode-and-ship of one session to a
 * local node, serial (encode every layer, then put the session) against streamed (each layer's
 * pages pushed on a kvp_put_stream while the next layer encodes, the last with the record), in
 * the same run, alternated, medians of --reps. Encode alone and ship alone are timed too: a
 * perfect overlap would take max(encode, ship) instead of their sum. Every page is encoded from
 * one fp32 chunk of synthetic KV (the codecs' cost does not depend on the values). The warm-up's
 * streamed session is fetched back and compared page by page. Never asserts on speed. Flow: fork a node -> reps x (serial, streamed, encode only, ship only) -> JSON. */
#include "cli.h"
#include "proc.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/kvpack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REPS 32

typedef struct {
    uint64_t    layers, heads, head_dim, tokens, page_tokens, reps;
    const char *codec;
    bool        json;
} bp_opts_t;

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
} bp_set_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack bench prefill [options]\n"
            "A prefill's encode and put of one session to a local node: serial (encode all,\n"
            "then put) against streamed (kvp_put_stream: layer l ships while layer l+1\n"
            "encodes), same run, alternated, medians. Prints JSON with --json.\n\n"
            "  --codec NAME        codec of the pages (default kivi)\n"
            "  --layers N          (default 16)    --heads N       (default 8)\n"
            "  --head-dim N        (default 128)   --tokens N      (default 4096)\n"
            "  --page-tokens N     (default 128)   --reps N        (default 5, at most 32)\n"
            "  --json              one JSON object on stdout\n");
}

static kvp_status_t bp_make(const bp_opts_t *o, kvp_codec_id_t codec, bp_set_t *s)
{
    size_t   n = (size_t)o->page_tokens * o->heads * o->head_dim;
    uint32_t tokens[4096];
    uint64_t x = 0x9E3779B97F4A7C15ull;

    memset(s, 0, sizeof(*s));
    s->layers         = (uint32_t)o->layers;
    s->ns             = 0x9f11;
    s->chunks         = (uint32_t)(o->tokens / o->page_tokens);
    s->pp.codec       = codec;
    s->pp.heads       = (uint32_t)o->heads;
    s->pp.head_dim    = (uint32_t)o->head_dim;
    s->pp.page_tokens = (uint32_t)o->page_tokens;
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
                  ((i % o->head_dim) % 37 == 3 ? 8.0f : 1.0f);
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

static void bp_free(bp_set_t *s)
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
static kvp_status_t bp_encode_layer(bp_set_t *s, uint32_t l)
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
static kvp_status_t bp_verify(const bp_set_t *s, kvp_client_h c, const char *sid)
{
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         st = kvp_client_get_session(c, s->ns, sid, &sp);

    for (uint32_t ch = 0; st == KVP_OK && ch < s->chunks; ch++) {
        for (uint32_t l = 0; st == KVP_OK && l < s->layers; l++) {
            size_t i = (size_t)l * s->chunks + ch, j = (size_t)ch * s->layers + l;

            if (sp->page_lens[j] != s->lens[i] || memcmp(sp->pages[j], s->pages[i], s->lens[i])) {
                fprintf(stderr, "kvpack bench prefill: the node's page of chunk %u layer %u "
                                "differs from what was pushed\n", ch, l);
                st = KVP_ERR_CORRUPT;
            }
        }
    }
    kvp_session_pages_free(sp);
    return st;
}

/* mode 0: serial (encode all, one put); 1: streamed; 2: encode only; 3: ship only (pages already
 * encoded). Returns seconds, or a negative number on an error (*st_p says which). Run 1 (the
 * warm-up's streamed put) is checked against the node by bp_verify. */
static double bp_run(bp_set_t *s, int mode, kvp_client_h c, kvp_put_stream_h ps, uint64_t run,
                     kvp_status_t *st_p)
{
    const void *const *pages = (const void *const *)s->pages;
    size_t             per   = s->chunks, last = (size_t)(s->layers - 1) * per;
    double             t0    = kvp_time_s();
    kvp_status_t       st    = KVP_OK;
    char               sid[32];

    snprintf(sid, sizeof(sid), "prefill-%llu", (unsigned long long)run);
    for (uint32_t l = 0; l < s->layers && st == KVP_OK && mode != 3; l++) {
        st = bp_encode_layer(s, l);
        if (st == KVP_OK && mode == 1 && l + 1 < s->layers) {
            st = kvp_put_stream_push(ps, pages + (size_t)l * per, s->lens + (size_t)l * per, per);
        }
    }
    if (st == KVP_OK && (mode == 0 || mode == 3)) {
        st = kvp_client_put_session_pages(c, s->ns, sid, &s->desc, pages, s->lens,
                                          (size_t)s->layers * per, kvp_version_now());
    } else if (st == KVP_OK && mode == 1) {
        st = kvp_put_stream_finish(ps, sid, &s->desc, pages + last, s->lens + last, per,
                                   kvp_version_now());
    }
    t0 = kvp_time_s() - t0;
    if (st == KVP_OK && run == 1) {
        st = bp_verify(s, c, sid);
    }
    if (st == KVP_OK && mode != 2) { /* not timed: the next run stores every page afresh */
        st = kvp_client_delete_session(c, s->ns, sid);
    }
    *st_p = st;
    return st == KVP_OK ? t0 : -1.0;
}

static double median(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        for (size_t j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j]     = v[j - 1];
            v[j - 1] = x;
        }
    }
    return v[n / 2];
}

int kvp_cmd_bench_prefill(int argc, char **argv)
{
    bp_opts_t           o = {16, 8, 128, 4096, 128, 5, "kivi", false};
    static const char  *names[4] = {"serial", "streamed", "encode", "ship"};
    double              t[4][MAX_REPS], med[4];
    kvp_client_params_t cp;
    kvp_client_h        c  = NULL;
    kvp_put_stream_h    ps = NULL;
    kvp_codec_id_t      codec;
    bp_set_t            s;
    char                dir[] = "/tmp/kvp_bench_prefill_XXXXXX", addr[64];
    uint64_t            bytes = 0;
    pid_t               node  = -1;
    uint16_t            port;
    kvp_status_t        st;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--codec", &o.codec) ||
            kvp_opt_u64(argc, argv, &i, "--layers", &o.layers) ||
            kvp_opt_u64(argc, argv, &i, "--heads", &o.heads) ||
            kvp_opt_u64(argc, argv, &i, "--head-dim", &o.head_dim) ||
            kvp_opt_u64(argc, argv, &i, "--tokens", &o.tokens) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &o.page_tokens) ||
            kvp_opt_u64(argc, argv, &i, "--reps", &o.reps)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            o.json = true;
        } else {
            return kvp_opt_unknown("bench prefill", argv[i]);
        }
    }
    if (kvp_codec_from_name(o.codec, &codec) != KVP_OK || o.reps < 1 || o.reps > MAX_REPS ||
        o.page_tokens < 1 || o.page_tokens > 4096 || o.tokens < o.page_tokens ||
        o.layers < 2 || o.layers > 1024 || o.heads < 1 || o.heads > 256 || o.head_dim < 1 ||
        o.head_dim > 1024) {
        fprintf(stderr, "kvpack bench prefill: bad options (see --help)\n");
        return 2;
    }
    st = bp_make(&o, codec, &s);
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack bench prefill: %s pages of this geometry: %s\n", o.codec,
                kvp_status_str(st));
        bp_free(&s);
        return 1;
    }
    if (mkdtemp(dir) == NULL || (port = kvp_proc_node_start(dir, "8G", &node)) == 0) {
        fprintf(stderr, "kvpack bench prefill: could not start a node\n");
        bp_free(&s);
        return 1;
    }
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.server     = addr;
    cp.timeout_ms = 60000;
    st = kvp_client_create(&cp, &c);
    if (st == KVP_OK) {
        st = kvp_put_stream_open(&cp, s.ns, &ps);
    }
    /* warm-up: connections, the node's pool first touch, the codec's scratch */
    if (st == KVP_OK && bp_run(&s, 0, c, ps, 0, &st) >= 0) {
        (void)bp_run(&s, 1, c, ps, 1, &st);
    }
    for (uint64_t r = 0; r < o.reps && st == KVP_OK; r++) {
        for (int m = 0; m < 4 && st == KVP_OK; m++) {
            int mode = (r % 2 == 1 && m < 2) ? 1 - m : m; /* serial and streamed alternate first */

            t[mode][r] = bp_run(&s, mode, c, ps, 2 + r * 4 + (uint64_t)mode, &st);
        }
        kvp_progress("bench prefill", r + 1, o.reps);
    }
    kvp_progress_done();
    for (size_t i = 0; i < (size_t)s.layers * s.chunks; i++) {
        bytes += s.lens[i];
    }
    kvp_put_stream_close(ps);
    kvp_client_destroy(c);
    kill(node, SIGTERM);
    waitpid(node, NULL, 0);
    rmdir(dir);
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack bench prefill: %s\n", kvp_status_str(st));
        bp_free(&s);
        return 1;
    }
    for (int m = 0; m < 4; m++) {
        med[m] = median(t[m], o.reps);
    }
    if (o.json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "bench", "prefill");
        kvp_json_str(&j, "codec", o.codec);
        kvp_json_int(&j, "layers", (int64_t)s.layers);
        kvp_json_int(&j, "heads", (int64_t)o.heads);
        kvp_json_int(&j, "head_dim", (int64_t)o.head_dim);
        kvp_json_int(&j, "tokens", (int64_t)s.chunks * s.pp.page_tokens);
        kvp_json_int(&j, "page_tokens", (int64_t)s.pp.page_tokens);
        kvp_json_int(&j, "pages", (int64_t)s.layers * s.chunks);
        kvp_json_int(&j, "session_bytes", (int64_t)bytes);
        kvp_json_int(&j, "reps", (int64_t)o.reps);
        for (int m = 0; m < 4; m++) {
            char key[32];

            snprintf(key, sizeof(key), "%s_s", names[m]);
            kvp_json_num(&j, key, med[m]);
        }
        kvp_json_num(&j, "streamed_vs_serial", med[0] / med[1]);
        kvp_json_num(&j, "perfect_overlap_vs_serial",
                     med[0] / (med[2] > med[3] ? med[2] : med[3]));
        kvp_json_end(&j);
    } else {
        printf("%s session: %u layers x %u chunks, %u pages, %.1f MB\n", o.codec, s.layers,
               s.chunks, s.layers * s.chunks, bytes / 1e6);
        for (int m = 0; m < 4; m++) {
            printf("%-9s %8.1f ms (median of %llu)\n", names[m], med[m] * 1e3,
                   (unsigned long long)o.reps);
        }
        printf("streamed is %.2fx serial (a perfect overlap, max(encode, ship): %.2fx)\n",
               med[0] / med[1], med[0] / (med[2] > med[3] ? med[2] : med[3]));
    }
    bp_free(&s);
    return 0;
}
