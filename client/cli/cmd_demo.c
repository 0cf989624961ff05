/* cmd_demo.c - `kvpack demo`: one honest end-to-end run on this machine.
 *
 * The parent starts a real kvpackd on a free loopback port with a fresh data directory, then runs
 * two separate client processes (this same binary with a hidden --role):
 *   prefill: synthetic KV with realistic pathologies -> kvp_page_encode (codec) -> put pages and
 *            the session record to the node over UCX;
 *   decode:  get the session, verify every page CRC, decode, measure K/V and attention error
 *            against the original, and re-encode the original to check the bytes are identical.
 * Then it spills the session to RocksDB, restarts the node on the same directory, and runs decode
 * again: the resumed session must be byte-identical. Exit 0 only if every check passed. A SIGINT
 * or SIGTERM stops the node and the client process, removes the directory (unless --keep-dir)
 * and exits 128 + the signal.
 * Main flow: kvp_cmd_demo -> demo_orchestrate -> role_prefill / role_decode (child processes). */
#include "cli.h"
#include "proc.h"

#include "eval/eval.h"
#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/kvpack.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEMO_SID      "demo-session-1"
#define DEMO_MODEL_ID "kvpack-demo/synthetic"

typedef struct {
    kvp_codec_id_t codec;
    uint64_t       layers, heads, head_dim, tokens, page_tokens, seed;
    const char    *node;        /* roles: host:port */
    const char    *result_file; /* roles: where to write "key value" lines */
    const char    *role;
    const char    *kvpackd;     /* path override */
    bool           json;
    bool           keep_dir;
} demo_opts_t;

static void demo_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack demo [options]\n\n"
            "Starts a kvpackd on a free loopback port with a temporary data directory, runs a prefill\n"
            "client process (synthetic KV -> codec pages -> node) and a decode client process (fetch,\n"
            "verify CRCs, decode, measure error), spills the session to RocksDB, restarts the node and\n"
            "resumes the session from disk. Exit status 0 only if every check passed.\n\n"
            "options:\n"
            "  --codec NAME        fp16|kivi|kivi128|oscar|kvarn|naive2 (default kivi)\n"
            "  --layers N          layers (default 4)\n"
            "  --heads N           KV heads (default 8)\n"
            "  --head-dim N        head dimension (default 128)\n"
            "  --tokens N          context tokens (default 2048)\n"
            "  --page-tokens N     tokens per page P (default 128)\n"
            "  --seed N            synthetic data seed (default 1)\n"
            "  --kvpackd PATH      node binary (default: kvpackd next to this binary)\n"
            "  --keep-dir          keep the temporary directory (node data, logs)\n"
            "  --json              print the figures as one JSON object\n"
            "  -h, --help          this help\n");
}

static int demo_parse(int argc, char **argv, demo_opts_t *o)
{
    const char *codec = "kivi";

    memset(o, 0, sizeof(*o));
    o->layers = 4;
    o->heads = 8;
    o->head_dim = 128;
    o->tokens = 2048;
    o->page_tokens = 128;
    o->seed = 1;
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--codec", &codec) ||
            kvp_opt_u64(argc, argv, &i, "--layers", &o->layers) ||
            kvp_opt_u64(argc, argv, &i, "--heads", &o->heads) ||
            kvp_opt_u64(argc, argv, &i, "--head-dim", &o->head_dim) ||
            kvp_opt_u64(argc, argv, &i, "--tokens", &o->tokens) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &o->page_tokens) ||
            kvp_opt_u64(argc, argv, &i, "--seed", &o->seed) ||
            kvp_opt_str(argc, argv, &i, "--node", &o->node) ||
            kvp_opt_str(argc, argv, &i, "--result-file", &o->result_file) ||
            kvp_opt_str(argc, argv, &i, "--role", &o->role) ||
            kvp_opt_str(argc, argv, &i, "--kvpackd", &o->kvpackd)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            o->json = true;
        } else if (kvp_opt_flag(argv, i, "--keep-dir")) {
            o->keep_dir = true;
        } else {
            return kvp_opt_unknown("demo", argv[i]);
        }
    }
    if (!kvp_cli_codec("demo", codec, NULL, &o->codec)) {
        return 2;
    }
    if (!kvp_cli_range("demo", "--layers", o->layers, 1, 1024) ||
        !kvp_cli_range("demo", "--tokens", o->tokens, 1, 1u << 22) ||
        !kvp_cli_geometry("demo", "--heads", o->heads, "--head-dim", o->head_dim,
                          "--page-tokens", o->page_tokens) ||
        !kvp_cli_codec_fits("demo", o->codec, o->heads, o->head_dim, o->page_tokens) ||
        (o->tokens % o->page_tokens != 0 &&
         !kvp_cli_codec_fits("demo", KVP_CODEC_FP16, o->heads, o->head_dim, o->page_tokens))) {
        return 2; /* the tail pages (tokens % P) are fp16: refused before a node starts */
    }
    if (!kvp_cli_exe_ok("demo", "--kvpackd", o->kvpackd)) {
        return 2; /* before a node is started (it failed late, its directory left behind) */
    }
    if (o->role == NULL && (o->node != NULL || o->result_file != NULL)) {
        return kvp_cli_usage_error("demo", "--node and --result-file go with --role only (the "
                                           "demo starts its own node)");
    }
    return 0;
}

/* ---- shared by both roles: the session's deterministic pages ---- */

typedef struct {
    kvp_kv_t      kv;
    uint64_t      ns;
    uint32_t      n_chunks, tail_tokens;
    kvp_key128_t *keys;
    uint8_t     **pages; /* [chunk * layers + layer], then layers tail pages */
    size_t       *lens;
    uint32_t      n_pages;
    double        encode_s;
} demo_session_t;

static void session_free(demo_session_t *s)
{
    for (uint32_t i = 0; i < s->n_pages; i++) {
        kvp_free(s->pages[i]);
    }
    kvp_free(s->pages);
    kvp_free(s->lens);
    kvp_free(s->keys);
    kvp_kv_free(&s->kv);
    memset(s, 0, sizeof(*s));
}

/* Synthetic token ids: the chunk keys are chained over them, as an engine would. */
static uint32_t demo_token(uint64_t seed, uint64_t pos)
{
    uint64_t z = (seed + 1) * 0x9E3779B97F4A7C15ull + pos * 0xBF58476D1CE4E5B9ull;

    z ^= z >> 31;
    z *= 0x94D049BB133111EBull;
    return (uint32_t)((z >> 33) % 32000);
}

static kvp_status_t encode_one(const demo_opts_t *o, demo_session_t *s, kvp_codec_id_t codec,
                               uint32_t layer, uint32_t first, uint32_t ntok, kvp_key128_t key,
                               uint32_t flags, uint32_t idx)
{
    kvp_page_params_t p = {0};
    size_t            cap, off;

    p.codec       = codec;
    p.heads       = (uint32_t)o->heads;
    p.head_dim    = (uint32_t)o->head_dim;
    p.page_tokens = (uint32_t)o->page_tokens;
    p.layer       = layer;
    p.first_pos   = first;
    p.chunk_key   = key;
    p.flags       = flags;
    cap = kvp_page_max_bytes(&p);
    if (cap == 0) {
        fprintf(stderr, "kvpack demo: codec %s does not support heads %u head_dim %u P %u: it "
                "takes %s\n", kvp_codec_name(codec), p.heads, p.head_dim, p.page_tokens,
                kvp_codec_geometry_rule(codec));
        return KVP_ERR_UNSUPPORTED;
    }
    s->pages[idx] = kvp_malloc(cap, "demo page");
    if (s->pages[idx] == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    off = ((size_t)layer * s->kv.tokens + first) * s->kv.heads * s->kv.head_dim;
    return kvp_page_encode(&p, KVP_DTYPE_F32, s->kv.k + off, s->kv.v + off, ntok, s->pages[idx],
                           cap, &s->lens[idx]);
}

/* Generate the synthetic KV and encode every page (deterministic for the options). */
static kvp_status_t session_build(const demo_opts_t *o, demo_session_t *s)
{
    uint32_t     L = (uint32_t)o->layers, P = (uint32_t)o->page_tokens;
    uint32_t    *tok;
    kvp_status_t st;
    double       t0;

    memset(s, 0, sizeof(*s));
    st = kvp_kv_synthetic(&s->kv, L, (uint32_t)o->tokens, (uint32_t)o->heads,
                          (uint32_t)o->head_dim, o->seed);
    if (st != KVP_OK) {
        return st;
    }
    s->ns          = kvp_ns_fingerprint(DEMO_MODEL_ID, L, (uint32_t)o->heads,
                                        (uint32_t)o->head_dim, P, o->codec);
    s->n_chunks    = (uint32_t)(o->tokens / P);
    s->tail_tokens = (uint32_t)(o->tokens % P);
    s->n_pages     = s->n_chunks * L + (s->tail_tokens ? L : 0);
    s->keys  = kvp_calloc(s->n_chunks + 1, sizeof(kvp_key128_t), "demo keys");
    s->pages = kvp_calloc(s->n_pages, sizeof(uint8_t *), "demo pages");
    s->lens  = kvp_calloc(s->n_pages, sizeof(size_t), "demo lens");
    tok      = kvp_malloc(P * sizeof(uint32_t), "demo tokens");
    if (s->keys == NULL || s->pages == NULL || s->lens == NULL || tok == NULL) {
        kvp_free(tok);
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t c = 0; c < s->n_chunks; c++) {
        for (uint32_t i = 0; i < P; i++) {
            tok[i] = demo_token(o->seed, (uint64_t)c * P + i);
        }
        s->keys[c] = kvp_chunk_key(c ? &s->keys[c - 1] : NULL, s->ns, tok, P);
    }
    kvp_free(tok);

    t0 = kvp_time_s();
    for (uint32_t c = 0; c < s->n_chunks; c++) {
        for (uint32_t l = 0; l < L; l++) {
            st = encode_one(o, s, o->codec, l, c * P, P, s->keys[c], 0, c * L + l);
            if (st != KVP_OK) {
                return st;
            }
        }
    }
    for (uint32_t l = 0; l < L && s->tail_tokens; l++) { /* the fp16 tail, one page per layer */
        kvp_key128_t none = {0, 0};

        st = encode_one(o, s, KVP_CODEC_FP16, l, s->n_chunks * P, s->tail_tokens, none,
                        KVP_PAGE_F_TAIL, s->n_chunks * L + l);
        if (st != KVP_OK) {
            return st;
        }
    }
    s->encode_s = kvp_time_s() - t0;
    return KVP_OK;
}

static kvp_status_t demo_connect(const demo_opts_t *o, kvp_client_h *client_p)
{
    kvp_client_params_t cp = {0};

    cp.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.server     = o->node;
    cp.timeout_ms = 30000;
    return kvp_client_create(&cp, client_p);
}

static int role_fail(const char *what, kvp_status_t st)
{
    fprintf(stderr, "kvpack demo: %s failed: %s (%s)\n", what, kvp_status_str(st),
            kvp_status_name(st));
    return 1;
}

/* ---- role prefill ---- */

static int role_prefill(const demo_opts_t *o)
{
    demo_session_t     s;
    kvp_session_desc_t desc = {0};
    kvp_client_h       client = NULL;
    kvp_status_t       st;
    uint64_t           shipped = 0;
    double             t0, put_s;
    FILE              *rf;
    uint32_t           L = (uint32_t)o->layers, tail_len = 0;
    uint8_t           *tail = NULL;

    st = session_build(o, &s);
    if (st != KVP_OK) {
        session_free(&s);
        return role_fail("encode", st);
    }
    st = demo_connect(o, &client);
    if (st != KVP_OK) {
        session_free(&s);
        return role_fail("connect", st);
    }
    t0 = kvp_time_s();
    /* Chunk by chunk after the whole encode, so encode and put are timed apart (an engine that
     * ships each layer while the next computes pushes on a kvp_put_stream: bench stream). */
    for (uint32_t c = 0; c < s.n_chunks && st == KVP_OK; c++) {
        st = kvp_client_put_pages(client, s.ns, (const void *const *)&s.pages[c * L], &s.lens[c * L], L);
        kvp_progress("prefill put", c + 1, s.n_chunks);
    }
    kvp_progress_done();
    if (st == KVP_OK && s.tail_tokens) {
        for (uint32_t l = 0; l < L; l++) {
            tail_len += (uint32_t)s.lens[s.n_chunks * L + l];
        }
        tail = kvp_malloc(tail_len, "demo tail");
        st   = tail == NULL ? KVP_ERR_NO_MEMORY : KVP_OK;
        for (uint32_t l = 0, off = 0; st == KVP_OK && l < L; l++) {
            memcpy(tail + off, s.pages[s.n_chunks * L + l], s.lens[s.n_chunks * L + l]);
            off += (uint32_t)s.lens[s.n_chunks * L + l];
        }
    }
    if (st == KVP_OK) {
        desc.layers      = L;
        desc.page_tokens = (uint32_t)o->page_tokens;
        desc.n_chunks    = s.n_chunks;
        desc.chunk_keys  = s.keys;
        desc.tail_tokens = s.tail_tokens;
        desc.n_tail      = s.tail_tokens ? L : 0;
        desc.tail_len    = tail_len;
        desc.tail        = tail;
        st = kvp_client_put_session(client, s.ns, DEMO_SID, &desc);
    }
    put_s = kvp_time_s() - t0;
    kvp_free(tail);
    kvp_client_destroy(client);
    if (st != KVP_OK) {
        session_free(&s);
        return role_fail("put", st);
    }
    for (uint32_t i = 0; i < s.n_pages; i++) {
        shipped += s.lens[i];
    }
    rf = fopen(o->result_file, "w");
    if (rf == NULL) {
        session_free(&s);
        return 1;
    }
    fprintf(rf, "pages %u\nshipped_bytes %llu\nencode_s %.6f\nput_s %.6f\nok 1\n", s.n_pages,
            (unsigned long long)shipped, s.encode_s, put_s);
    fclose(rf);
    session_free(&s);
    return 0;
}

/* ---- role decode ---- */

typedef struct {
    double   k_rel, v_rel, attn_rel, get_s, decode_s;
    uint64_t wire_bytes;
    uint32_t pages, crc_ok, identical;
    uint32_t digest;
} decode_result_t;

static kvp_status_t decode_pages(const demo_opts_t *o, const demo_session_t *ref,
                                 const kvp_session_pages_t *sp, kvp_kv_t *out, decode_result_t *r)
{
    uint32_t     L = (uint32_t)o->layers, P = (uint32_t)o->page_tokens;
    size_t       tok_elems = (size_t)o->heads * o->head_dim;
    kvp_status_t st;
    double       t0 = kvp_time_s();
    size_t       tail_off = 0;

    if (sp->desc.n_chunks != ref->n_chunks || sp->desc.layers != L ||
        sp->desc.tail_tokens != ref->tail_tokens || sp->n_pages != ref->n_chunks * L) {
        fprintf(stderr, "kvpack demo: session shape differs from what prefill put\n");
        return KVP_ERR_BAD_PAGE;
    }
    for (uint32_t i = 0; i < ref->n_chunks * L; i++) {
        uint32_t        c = i / L, l = i % L;
        size_t          off = ((size_t)l * out->tokens + (size_t)c * P) * tok_elems;
        kvp_page_info_t info;

        st = kvp_page_decode(sp->pages[i], sp->page_lens[i], KVP_DTYPE_F32, KVP_FRAME_ORIGINAL,
                             out->k + off, out->v + off, &info);
        if (st != KVP_OK) {
            return st;
        }
        if (info.layer != l || info.chunk_key.lo != ref->keys[c].lo ||
            info.chunk_key.hi != ref->keys[c].hi) {
            return KVP_ERR_WRONG_CODEC;
        }
        r->crc_ok++;
        r->identical += sp->page_lens[i] == ref->lens[i] &&
                        memcmp(sp->pages[i], ref->pages[i], ref->lens[i]) == 0;
        r->digest = kvp_crc32c(r->digest, sp->pages[i], sp->page_lens[i]);
    }
    for (uint32_t l = 0; l < sp->desc.n_tail; l++) { /* tail pages, back to back */
        const uint8_t  *pg  = sp->desc.tail + tail_off;
        size_t          rem = sp->desc.tail_len - tail_off, off;
        kvp_page_info_t info;

        st = kvp_page_parse(pg, rem < ref->lens[ref->n_chunks * L + l] ? rem
                                                                        : ref->lens[ref->n_chunks * L + l],
                            &info);
        if (st != KVP_OK) {
            return st;
        }
        off = ((size_t)l * out->tokens + (size_t)ref->n_chunks * P) * tok_elems;
        st  = kvp_page_decode(pg, KVP_PAGE_HDR_BYTES + info.payload_len, KVP_DTYPE_F32,
                              KVP_FRAME_ORIGINAL, out->k + off, out->v + off, NULL);
        if (st != KVP_OK) {
            return st;
        }
        r->crc_ok++;
        r->identical += memcmp(pg, ref->pages[ref->n_chunks * L + l],
                               ref->lens[ref->n_chunks * L + l]) == 0;
        r->digest = kvp_crc32c(r->digest, pg, KVP_PAGE_HDR_BYTES + info.payload_len);
        tail_off += KVP_PAGE_HDR_BYTES + info.payload_len;
    }
    r->pages    = ref->n_pages;
    r->decode_s = kvp_time_s() - t0;
    return KVP_OK;
}

static int role_decode(const demo_opts_t *o)
{
    demo_session_t       ref;
    kvp_session_pages_t *sp = NULL;
    kvp_client_h         client = NULL;
    kvp_kv_t             out = {0};
    decode_result_t      r = {0};
    kvp_status_t         st;
    double               t0;
    FILE                *rf;
    uint32_t             L = (uint32_t)o->layers;
    size_t               n;

    st = session_build(o, &ref); /* the original KV and the pages prefill must have put */
    if (st != KVP_OK) {
        session_free(&ref);
        return role_fail("rebuild", st);
    }
    st = demo_connect(o, &client);
    if (st == KVP_OK) {
        t0 = kvp_time_s();
        st = kvp_client_get_session(client, ref.ns, DEMO_SID, &sp);
        r.get_s = kvp_time_s() - t0;
    }
    kvp_client_destroy(client);
    if (st != KVP_OK) {
        session_free(&ref);
        return role_fail("get session", st);
    }
    r.wire_bytes = sp->wire_bytes;
    st = kvp_kv_alloc(&out, L, (uint32_t)o->tokens, (uint32_t)o->heads, (uint32_t)o->head_dim);
    if (st == KVP_OK) {
        st = decode_pages(o, &ref, sp, &out, &r);
    }
    kvp_session_pages_free(sp);
    if (st != KVP_OK) {
        kvp_kv_free(&out);
        session_free(&ref);
        return role_fail("decode", st);
    }
    n       = (size_t)L * o->tokens * o->heads * o->head_dim;
    r.k_rel = kvp_rel_err(out.k, ref.kv.k, n);
    r.v_rel = kvp_rel_err(out.v, ref.kv.v, n);
    for (uint32_t l = 0; l < L; l++) {
        size_t off = (size_t)l * o->tokens * o->heads * o->head_dim;

        r.attn_rel += kvp_attn_rel_err(ref.kv.k + off, ref.kv.v + off, out.k + off, out.v + off,
                                       (uint32_t)o->tokens, (uint32_t)o->heads,
                                       (uint32_t)o->head_dim, 16, o->seed + l) / L;
    }
    rf = fopen(o->result_file, "w");
    if (rf != NULL) {
        fprintf(rf,
                "pages %u\ncrc_ok %u\nidentical %u\ndigest %08x\nwire_bytes %llu\nget_s %.6f\n"
                "decode_s %.6f\nk_rel_err %.6g\nv_rel_err %.6g\nattn_rel_err %.6g\nok 1\n",
                r.pages, r.crc_ok, r.identical, r.digest, (unsigned long long)r.wire_bytes, r.get_s,
                r.decode_s, r.k_rel, r.v_rel, r.attn_rel);
        fclose(rf);
    }
    kvp_kv_free(&out);
    session_free(&ref);
    return rf != NULL ? 0 : 1;
}

/* ---- orchestration (parent) ---- */

typedef struct {
    char  dir[PATH_MAX];
    char  data[PATH_MAX + 16];
    char  kvpackd[PATH_MAX];
    char  self[PATH_MAX];
    char  node[64];
    pid_t node_pid;
} demo_env_t;

/* The processes a SIGINT/SIGTERM stops at once (the waits below then fail), and the signal. */
static volatile sig_atomic_t demo_node_pid, demo_role_pid, demo_signal;

static void demo_on_signal(int sig)
{
    int saved = errno;

    demo_signal = sig;
    if (demo_role_pid > 0) {
        kill((pid_t)demo_role_pid, SIGTERM);
    }
    if (demo_node_pid > 0) {
        kill((pid_t)demo_node_pid, SIGTERM);
    }
    errno = saved;
}

static int node_start(demo_env_t *e, int round)
{
    char  ready[PATH_MAX + 32], log[PATH_MAX + 32], buf[64];
    char *argv[16];
    int   a = 0;

    snprintf(ready, sizeof(ready), "%s/ready.%d", e->dir, round);
    snprintf(log, sizeof(log), "%s/kvpackd.%d.log", e->dir, round);
    argv[a++] = e->kvpackd;
    argv[a++] = "--listen";
    argv[a++] = "127.0.0.1:0";
    argv[a++] = "--data-dir";
    argv[a++] = e->data;
    argv[a++] = "--ready-file";
    argv[a++] = ready;
    /* no reserve file (at least 3 index memtables, 192 MiB): the demo writes a few MiB into a
     * temporary directory that goes when it ends */
    argv[a++] = "--disk-reserve-mib";
    argv[a++] = "0";
    argv[a]   = NULL;
    e->node_pid = kvp_proc_spawn(argv, log);
    if (e->node_pid < 0) {
        return -1;
    }
    demo_node_pid = e->node_pid;
    if (demo_signal != 0) { /* came before the pid was known */
        kill(e->node_pid, SIGTERM);
    }
    if (kvp_proc_wait_file(ready, e->node_pid, 30000, buf, sizeof(buf)) != 0) {
        fprintf(stderr, "kvpack demo: kvpackd did not become ready (log: %s)\n", log);
        demo_node_pid = 0; /* it may be reaped already: its pid is not ours to signal */
        kvp_proc_stop(e->node_pid, 2000);
        e->node_pid = -1;
        return -1;
    }
    snprintf(e->node, sizeof(e->node), "127.0.0.1:%d", atoi(buf));
    return 0;
}

static int run_role(demo_env_t *e, const demo_opts_t *o, const char *role, const char *result)
{
    char  codec[32], sL[24], sH[24], sD[24], sT[24], sP[24], sS[24];
    char *argv[32];
    int   a = 0, rc;
    pid_t pid;

    snprintf(codec, sizeof(codec), "%s", kvp_codec_name(o->codec));
    snprintf(sL, sizeof(sL), "%llu", (unsigned long long)o->layers);
    snprintf(sH, sizeof(sH), "%llu", (unsigned long long)o->heads);
    snprintf(sD, sizeof(sD), "%llu", (unsigned long long)o->head_dim);
    snprintf(sT, sizeof(sT), "%llu", (unsigned long long)o->tokens);
    snprintf(sP, sizeof(sP), "%llu", (unsigned long long)o->page_tokens);
    snprintf(sS, sizeof(sS), "%llu", (unsigned long long)o->seed);
    argv[a++] = e->self;
    argv[a++] = "demo";
    argv[a++] = "--role";
    argv[a++] = (char *)role;
    argv[a++] = "--node";
    argv[a++] = e->node;
    argv[a++] = "--result-file";
    argv[a++] = (char *)result;
    argv[a++] = "--codec";
    argv[a++] = codec;
    argv[a++] = "--layers";
    argv[a++] = sL;
    argv[a++] = "--heads";
    argv[a++] = sH;
    argv[a++] = "--head-dim";
    argv[a++] = sD;
    argv[a++] = "--tokens";
    argv[a++] = sT;
    argv[a++] = "--page-tokens";
    argv[a++] = sP;
    argv[a++] = "--seed";
    argv[a++] = sS;
    argv[a]   = NULL;
    pid = kvp_proc_spawn(argv, NULL);
    if (pid < 0) {
        return -1;
    }
    demo_role_pid = pid;
    if (demo_signal != 0) {
        kill(pid, SIGTERM);
    }
    rc            = kvp_proc_wait(pid, 300000);
    demo_role_pid = 0;
    if (rc != 0) {
        fprintf(stderr, "kvpack demo: %s process failed (status %d)\n", role, rc);
        if (rc == -2) {
            kvp_proc_stop(pid, 1000);
        }
        return -1;
    }
    return 0;
}

static int spill_session(demo_env_t *e, const demo_opts_t *o)
{
    kvp_client_params_t cp = {0};
    kvp_client_h        client;
    kvp_status_t        st;
    uint64_t            ns = kvp_ns_fingerprint(DEMO_MODEL_ID, (uint32_t)o->layers,
                                                (uint32_t)o->heads, (uint32_t)o->head_dim,
                                                (uint32_t)o->page_tokens, o->codec);

    cp.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.server     = e->node;
    cp.timeout_ms = 30000;
    st = kvp_client_create(&cp, &client);
    if (st == KVP_OK) {
        st = kvp_client_spill(client, ns, DEMO_SID);
        kvp_client_destroy(client);
    }
    if (st != KVP_OK) {
        role_fail("spill", st);
        return -1;
    }
    return 0;
}

static void say(const demo_opts_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const demo_opts_t *o, const char *fmt, ...)
{
    va_list ap;

    if (o->json) {
        return;
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static int demo_orchestrate(const demo_opts_t *o)
{
    demo_env_t e;
    char       r_put[PATH_MAX + 16], r_get[PATH_MAX + 16], r_resume[PATH_MAX + 16];
    char       d1[32] = "", d2[32] = "";
    double     fp16_bytes, shipped, ratio, put_s, get_s, enc_s;
    bool       ok = true, resume_identical;
    double     pages, crc1, crc2, ident1, ident2;
    kvp_json_t j;

    memset(&e, 0, sizeof(e));
    e.node_pid = -1;
    if (o->kvpackd != NULL) {
        snprintf(e.kvpackd, sizeof(e.kvpackd), "%s", o->kvpackd);
    } else if (kvp_proc_sibling("kvpackd", e.kvpackd, sizeof(e.kvpackd)) != 0) {
        fprintf(stderr, "kvpack demo: kvpackd not found next to kvpack; pass --kvpackd PATH\n");
        return 1;
    }
    if (kvp_proc_sibling("kvpack", e.self, sizeof(e.self)) != 0) {
        fprintf(stderr, "kvpack demo: cannot locate the kvpack binary\n");
        return 1;
    }
    snprintf(e.dir, sizeof(e.dir), "%s/kvpack-demo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(e.dir) == NULL) {
        perror("kvpack demo: mkdtemp");
        return 1;
    }
    {
        struct sigaction sa;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = demo_on_signal;
        sa.sa_flags   = SA_RESTART; /* a say() to a pipe is not cut short */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    snprintf(e.data, sizeof(e.data), "%s/data", e.dir);
    snprintf(r_put, sizeof(r_put), "%s/prefill.txt", e.dir);
    snprintf(r_get, sizeof(r_get), "%s/decode.txt", e.dir);
    snprintf(r_resume, sizeof(r_resume), "%s/resume.txt", e.dir);

    say(o, "kvpack demo: %llu layers x %llu tokens x %llu KV heads x head_dim %llu, codec %s (%s), P=%llu\n",
        (unsigned long long)o->layers, (unsigned long long)o->tokens, (unsigned long long)o->heads,
        (unsigned long long)o->head_dim, kvp_codec_name(o->codec), kvp_codec_impl_name(o->codec),
        (unsigned long long)o->page_tokens);
    if (node_start(&e, 1) != 0) {
        ok = false;
        goto out;
    }
    say(o, "[1/5] node up at %s (data %s)\n", e.node, e.data);
    if (run_role(&e, o, "prefill", r_put) != 0) {
        ok = false;
        goto out;
    }
    say(o, "[2/5] prefill process: encoded and put %.0f pages\n", kvp_kv_file_num(r_put, "pages"));
    if (run_role(&e, o, "decode", r_get) != 0) {
        ok = false;
        goto out;
    }
    say(o, "[3/5] decode process: fetched, verified and decoded the session\n");
    if (spill_session(&e, o) != 0) {
        ok = false;
        goto out;
    }
    kvp_proc_stop(e.node_pid, 10000);
    e.node_pid    = -1;
    demo_node_pid = 0;
    say(o, "[4/5] session spilled to RocksDB, node stopped\n");
    if (node_start(&e, 2) != 0 || run_role(&e, o, "decode", r_resume) != 0) {
        ok = false;
        goto out;
    }
    say(o, "[5/5] node restarted at %s, session resumed from disk\n", e.node);

out:
    if (e.node_pid > 0) {
        kvp_proc_stop(e.node_pid, 10000);
    }
    demo_node_pid = 0;
    signal(SIGINT, SIG_DFL); /* from here a signal ends the demo as it would any program */
    signal(SIGTERM, SIG_DFL);
    if (demo_signal != 0) {
        if (o->keep_dir) {
            fprintf(stderr, "kvpack demo: interrupted (files kept in %s)\n", e.dir);
        } else {
            kvp_proc_rm_rf(e.dir, 30000);
            fprintf(stderr, "kvpack demo: interrupted; removed %s\n", e.dir);
        }
        return 128 + demo_signal;
    }
    if (!ok) {
        fprintf(stderr, "kvpack demo: FAILED (files kept in %s)\n", e.dir);
        return 1;
    }
    fp16_bytes = 2.0 * 2.0 * (double)o->layers * (double)o->tokens * (double)o->heads * (double)o->head_dim;
    shipped    = kvp_kv_file_num(r_put, "shipped_bytes");
    ratio      = fp16_bytes / shipped;
    pages      = kvp_kv_file_num(r_put, "pages");
    enc_s      = kvp_kv_file_num(r_put, "encode_s");
    put_s      = kvp_kv_file_num(r_put, "put_s");
    get_s      = kvp_kv_file_num(r_get, "get_s");
    crc1       = kvp_kv_file_num(r_get, "crc_ok");
    crc2       = kvp_kv_file_num(r_resume, "crc_ok");
    ident1     = kvp_kv_file_num(r_get, "identical");
    ident2     = kvp_kv_file_num(r_resume, "identical");
    kvp_kv_file_get(r_get, "digest", d1, sizeof(d1));
    kvp_kv_file_get(r_resume, "digest", d2, sizeof(d2));
    resume_identical = d1[0] != '\0' && strcmp(d1, d2) == 0 && ident2 == pages && crc2 == pages;
    ok = crc1 == pages && ident1 == pages && resume_identical &&
         isfinite(kvp_kv_file_num(r_get, "attn_rel_err"));

    if (o->json) {
        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "codec", kvp_codec_name(o->codec));
        kvp_json_str(&j, "codec_impl", kvp_codec_impl_name(o->codec));
        kvp_json_int(&j, "layers", (int64_t)o->layers);
        kvp_json_int(&j, "tokens", (int64_t)o->tokens);
        kvp_json_int(&j, "kv_heads", (int64_t)o->heads);
        kvp_json_int(&j, "head_dim", (int64_t)o->head_dim);
        kvp_json_int(&j, "page_tokens", (int64_t)o->page_tokens);
        kvp_json_int(&j, "pages", (int64_t)pages);
        kvp_json_int(&j, "fp16_bytes", (int64_t)fp16_bytes);
        kvp_json_int(&j, "shipped_bytes", (int64_t)shipped);
        kvp_json_num(&j, "compression_ratio", ratio);
        kvp_json_num(&j, "bits_per_elem", 8.0 * shipped / (fp16_bytes / 2.0));
        kvp_json_num(&j, "k_rel_err", kvp_kv_file_num(r_get, "k_rel_err"));
        kvp_json_num(&j, "v_rel_err", kvp_kv_file_num(r_get, "v_rel_err"));
        kvp_json_num(&j, "attn_rel_err", kvp_kv_file_num(r_get, "attn_rel_err"));
        kvp_json_int(&j, "pages_crc_verified", (int64_t)crc1);
        kvp_json_bool(&j, "pages_identical_to_prefill", ident1 == pages);
        kvp_json_num(&j, "encode_gbps_fp16_equiv", fp16_bytes / enc_s / 1e9);
        kvp_json_num(&j, "put_gbps_wire", shipped / put_s / 1e9);
        kvp_json_num(&j, "get_gbps_wire", kvp_kv_file_num(r_get, "wire_bytes") / get_s / 1e9);
        kvp_json_num(&j, "get_gbps_fp16_equiv", fp16_bytes / get_s / 1e9);
        kvp_json_num(&j, "resume_get_s", kvp_kv_file_num(r_resume, "get_s"));
        kvp_json_bool(&j, "resume_identical", resume_identical);
        kvp_json_bool(&j, "ok", ok);
        kvp_json_end(&j);
    } else {
        printf("\npages            %.0f (%u layers x %.0f chunks%s)\n", pages, (unsigned)o->layers,
               (double)(o->tokens / o->page_tokens), o->tokens % o->page_tokens ? " + fp16 tail" : "");
        printf("fp16 bytes       %.0f\nshipped bytes    %.0f\ncompression      %.2fx (%.3f bits/elem)\n",
               fp16_bytes, shipped, ratio, 8.0 * shipped / (fp16_bytes / 2.0));
        printf("K rel err        %.4f\nV rel err        %.4f\nattn rel err     %.4f\n",
               kvp_kv_file_num(r_get, "k_rel_err"), kvp_kv_file_num(r_get, "v_rel_err"),
               kvp_kv_file_num(r_get, "attn_rel_err"));
        printf("CRC verified     %.0f/%.0f pages, identical to prefill: %s\n", crc1, pages,
               ident1 == pages ? "yes" : "NO");
        printf("encode           %.2f GB/s (fp16-equivalent)\n", fp16_bytes / enc_s / 1e9);
        printf("put / get        %.2f / %.2f GB/s on the wire (%.2f GB/s fp16-equivalent get)\n",
               shipped / put_s / 1e9, kvp_kv_file_num(r_get, "wire_bytes") / get_s / 1e9,
               fp16_bytes / get_s / 1e9);
        printf("resume after restart: %s\n", resume_identical ? "byte-identical" : "MISMATCH");
        printf("%s\n", ok ? "demo: all checks passed" : "demo: CHECKS FAILED");
    }
    if (ok && !o->keep_dir) {
        kvp_proc_rm_rf(e.dir, 30000);
    } else {
        fprintf(stderr, "kvpack demo: files kept in %s\n", e.dir);
    }
    return ok ? 0 : 1;
}

int kvp_cmd_demo(int argc, char **argv)
{
    demo_opts_t o;
    int         rc;

    if (kvp_opt_help(argc, argv)) {
        demo_usage(stdout);
        return 0;
    }
    rc = demo_parse(argc, argv, &o);
    if (rc != 0) {
        return rc;
    }
    if (o.role != NULL) {
        if (o.node == NULL || o.result_file == NULL) {
            return kvp_cli_usage_error("demo", "--role needs --node and --result-file");
        }
        if (strcmp(o.role, "prefill") == 0) {
            return role_prefill(&o);
        }
        if (strcmp(o.role, "decode") == 0) {
            return role_decode(&o);
        }
        return kvp_cli_usage_error("demo", "--role wants prefill or decode, got '%s'", o.role);
    }
    return demo_orchestrate(&o);
}
