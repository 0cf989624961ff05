/* cmd_bench_transfer.c - "kvpack bench transfer": ship one session of 2-bit pages client -> node
 * over UCX and report GB/s and fp16-equivalent GB/s, against shipping the same KV as fp16 pages
 * and against ucx_perftest (ucp_am_bw, same message size, both error-handling modes) run on
 * loopback in the same run; ratios use the perftest of the mode kvpack ran in (--err-mode).
 * CPU seconds per byte of client and node are reported too: on a shared machine they move far
 * less than wall-clock GB/s. Never asserts on speed.
 * Flow: encode pages -> fork a node (kvp_node_main, same code as kvpackd) -> put kivi / fp16 pages
 * per repetition (fresh namespace each) -> get the session back -> ucx_perftest pair (each the
 * median of 3 runs) -> JSON. */
#include "cli.h"
#include "proc.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/kvpack.h"
#include "kvpack/node.h"

#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    kvp_opt_kv_t kv;
    uint64_t     batch, inflight;
    const char  *err_mode;
    bool         json, perftest;
} bt_opts_t;

typedef struct {
    uint32_t           n;
    uint8_t          **pages;
    size_t            *lens;
    uint64_t           bytes;
    kvp_session_desc_t desc;
} bt_set_t;

static uint64_t bt_rng = 0x2545F4914F6CDD1Dull;

static float bt_gauss(void)
{
    double u1, u2;

    bt_rng ^= bt_rng << 13, bt_rng ^= bt_rng >> 7, bt_rng ^= bt_rng << 17;
    u1 = ((double)(bt_rng >> 11) + 1.0) / 9007199254740993.0;
    bt_rng ^= bt_rng << 13, bt_rng ^= bt_rng >> 7, bt_rng ^= bt_rng << 17;
    u2 = (double)(bt_rng >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack bench transfer [options]\n"
            "Ship a session of 2-bit pages to a local node over UCX; compare with fp16 pages and\n"
            "with ucx_perftest ucp_am_bw at the same message size (median of 3 runs). Prints JSON\n"
            "with --json.\n\n"
            "  --codec NAME        2-bit codec to ship (default kivi)\n"
            "  --layers N          (default 8)     --heads N       (default 8)\n"
            "  --head-dim N        (default 128)   --tokens N      (default 4096)\n"
            "  --page-tokens N     (default 128)   --reps N        (default 3)\n"
            "  --batch-bytes N     bytes per PUT_PAGES message (default 4194304)\n"
            "  --inflight N        messages in flight (default 4)\n"
            "  --err-mode MODE     UCX error handling, peer (tcp only) or none (shm allowed);\n"
            "                      default $KVP_UCX_ERR_MODE, else peer\n"
            "  --no-perftest       skip the ucx_perftest baseline\n"
            "  --json              one JSON object on stdout\n");
}

/* Encode the synthetic KV of every layer into pages of codec; chunk-major order. */
static kvp_status_t bt_encode(const bt_opts_t *o, kvp_codec_id_t codec, bt_set_t *set)
{
    uint32_t          P = (uint32_t)o->kv.page_tokens, chunks = (uint32_t)(o->kv.tokens / P);
    size_t            row = (size_t)o->kv.heads * o->kv.head_dim, n = (size_t)P * row;
    float            *k = kvp_malloc(n * sizeof(float), "bench k");
    float            *v = kvp_malloc(n * sizeof(float), "bench v");
    kvp_page_params_t pp;
    kvp_status_t      s = KVP_OK;
    uint32_t          tokens[4096];

    memset(set, 0, sizeof(*set));
    memset(&pp, 0, sizeof(pp));
    pp.codec       = codec;
    pp.heads       = (uint32_t)o->kv.heads;
    pp.head_dim    = (uint32_t)o->kv.head_dim;
    pp.page_tokens = P;
    set->n         = chunks * (uint32_t)o->kv.layers;
    set->pages     = kvp_calloc(set->n, sizeof(*set->pages), "bench pages");
    set->lens      = kvp_calloc(set->n, sizeof(*set->lens), "bench lens");
    set->desc.layers      = (uint32_t)o->kv.layers;
    set->desc.page_tokens = P;
    set->desc.n_chunks    = chunks;
    set->desc.chunk_keys  = kvp_calloc(chunks, sizeof(kvp_key128_t), "bench keys");
    if (k == NULL || v == NULL || set->pages == NULL || set->lens == NULL ||
        set->desc.chunk_keys == NULL) {
        s = KVP_ERR_NO_MEMORY;
    }
    bt_rng = 0x2545F4914F6CDD1Dull; /* the same KV for every codec */
    for (uint32_t c = 0; s == KVP_OK && c < chunks; c++) {
        for (uint32_t t = 0; t < P; t++) {
            tokens[t] = c * P + t;
        }
        set->desc.chunk_keys[c] = kvp_chunk_key(c ? &set->desc.chunk_keys[c - 1] : NULL,
                                                (uint64_t)codec, tokens, P);
        pp.chunk_key = set->desc.chunk_keys[c];
        pp.first_pos = (uint64_t)c * P;
        for (uint32_t l = 0; s == KVP_OK && l < o->kv.layers; l++) {
            size_t cap = kvp_page_max_bytes(&pp);
            size_t idx = (size_t)c * o->kv.layers + l;

            for (size_t i = 0; i < n; i++) { /* a few outlier K channels, like real models */
                size_t ch = i % o->kv.head_dim;
                k[i] = bt_gauss() * ((ch % 37 == 3) ? 8.0f : 1.0f) + ((ch % 53 == 5) ? 4.0f : 0.f);
                v[i] = bt_gauss();
            }
            pp.layer        = l;
            set->pages[idx] = kvp_malloc(cap ? cap : 1, "bench page");
            if (cap == 0 || set->pages[idx] == NULL) {
                s = (cap == 0) ? KVP_ERR_UNSUPPORTED : KVP_ERR_NO_MEMORY;
                break;
            }
            s = kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, P, set->pages[idx], cap,
                                &set->lens[idx]);
            set->bytes += set->lens[idx];
        }
    }
    kvp_free(k);
    kvp_free(v);
    return s;
}

static void bt_free(bt_set_t *set)
{
    for (uint32_t i = 0; set->pages != NULL && i < set->n; i++) {
        kvp_free(set->pages[i]);
    }
    kvp_free(set->pages);
    kvp_free(set->lens);
    kvp_session_desc_clear(&set->desc);
}

#define BT_PERFTEST_RUNS 3

/* ucx_perftest ucp_am_bw server + client on loopback; returns GB/s (1e9 B/s) or NaN. */
static double bt_perftest(size_t msg, unsigned iters, bool err_mode)
{
    char   cmd[512], line[512];
    double mbs = NAN;
    int    port = kvp_proc_free_port();
    pid_t  srv, parent = getpid();
    FILE  *p;

    if (port <= 0) {
        return NAN;
    }
    srv = fork();
    if (srv < 0) {
        return NAN;
    }
    if (srv == 0) {
        char portstr[16];
        int  fd = open("/dev/null", O_WRONLY);

        kvp_proc_child_init(parent);
        snprintf(portstr, sizeof(portstr), "%d", port);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execlp("ucx_perftest", "ucx_perftest", "-p", portstr, (char *)NULL);
        _exit(127);
    }
    snprintf(cmd, sizeof(cmd),
             "timeout 120 ucx_perftest 127.0.0.1 -p %d -t ucp_am_bw -s %zu -n %u -w %u %s -f "
             "2>/dev/null",
             port, msg, iters, iters / 10 + 1, err_mode ? "-e" : "");
    /* the server has no ready signal: a client that found it not listening yet (a loaded host)
     * tries once more a second later rather than report no baseline */
    for (int attempt = 0; attempt < 2 && isnan(mbs); attempt++) {
        usleep(attempt == 0 ? 300000 : 1000000);
        p = popen(cmd, "r");
        while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
            double it, l50, lavg, lall, bwavg, bwall;

            /* "Final:" style row: iters, 3 latencies, bw avg, bw overall, 2 message rates */
            if (sscanf(line, " %lf %lf %lf %lf %lf %lf", &it, &l50, &lavg, &lall, &bwavg,
                       &bwall) == 6 && it == iters) {
                mbs = bwall;
            }
        }
        if (p != NULL) {
            pclose(p);
        }
    }
    kill(srv, SIGTERM);
    waitpid(srv, NULL, 0);
    return mbs * 1048576.0 / 1e9; /* perftest's MB is 2^20 bytes */
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The median of BT_PERFTEST_RUNS runs (each into runs[], NaN where one gave no result): one short
 * run moved 3x between runs on a shared host, more than the bench it is the baseline of. */
static double bt_perftest_median(size_t msg, unsigned iters, bool err_mode, double *runs)
{
    double ok[BT_PERFTEST_RUNS];
    int    n = 0;

    for (int i = 0; i < BT_PERFTEST_RUNS; i++) {
        runs[i] = bt_perftest(msg, iters, err_mode);
        if (!isnan(runs[i])) {
            ok[n++] = runs[i];
        }
    }
    qsort(ok, (size_t)n, sizeof(ok[0]), dbl_cmp);
    return n == 0 ? NAN : ok[(n - 1) / 2];
}

/* CPU seconds (user + system) used so far by this process, or by process pid (from /proc). */
static double bt_cpu_s(pid_t pid)
{
    char               path[64];
    unsigned long long ut = 0, st = 0;
    long               hz = sysconf(_SC_CLK_TCK);
    FILE              *f;
    struct rusage      ru;

    if (pid == 0) {
        getrusage(RUSAGE_SELF, &ru);
        return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return NAN;
    }
    /* fields 14 and 15 (utime, stime) follow the ")" that closes the command name */
    if (fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
               &st) != 2) {
        ut = st = 0;
    }
    fclose(f);
    return (hz > 0) ? (double)(ut + st) / (double)hz : NAN;
}

/* Ship set into reps fresh namespaces; returns the median seconds per repetition. */
static kvp_status_t bt_ship(kvp_client_h c, const bt_set_t *set, uint64_t ns0, uint64_t reps,
                            double *sec_p)
{
    double t[64];

    for (uint64_t r = 0; r < reps; r++) {
        double       t0 = kvp_time_s();
        kvp_status_t s  = kvp_client_put_pages(c, ns0 + r, (const void *const *)set->pages,
                                               set->lens, set->n);

        if (s != KVP_OK) {
            return s;
        }
        t[r] = kvp_time_s() - t0;
        kvp_progress("bench transfer", r + 1, reps);
    }
    kvp_sort_f64(t, reps);
    *sec_p = kvp_median_sorted(t, reps);
    return KVP_OK;
}

int kvp_cmd_bench_transfer(int argc, char **argv)
{
    bt_opts_t            o = {{"kivi", 8, 8, 128, 4096, 128, 3}, 4u << 20, 4, NULL, false, true};
    kvp_client_params_t  cp;
    kvp_client_h         c = NULL;
    kvp_codec_id_t       codec;
    bt_set_t             q, f;
    kvp_session_pages_t *sp = NULL;
    char                 dir[] = "/tmp/kvp_bench_xfer_XXXXXX", addr[64];
    double               t_q = 0, t_f = 0, t_get = 0, pt = NAN, pt_shm = NAN, fp16_equiv;
    double               cpu_c = NAN, cpu_n = NAN, pt_same;
    double               pt_runs[BT_PERFTEST_RUNS], pt_shm_runs[BT_PERFTEST_RUNS];
    bool                 none;
    const char          *err_from = "--err-mode";
    pid_t                node = -1;
    uint16_t             port;
    kvp_status_t         s;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_kv(argc, argv, &i, &o.kv) ||
            kvp_opt_str(argc, argv, &i, "--err-mode", &o.err_mode) ||
            kvp_opt_u64(argc, argv, &i, "--batch-bytes", &o.batch) ||
            kvp_opt_u64(argc, argv, &i, "--inflight", &o.inflight)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            o.json = true;
        } else if (kvp_opt_flag(argv, i, "--no-perftest")) {
            o.perftest = false;
        } else {
            return kvp_opt_unknown("bench transfer", argv[i]);
        }
    }
    if (!kvp_cli_codec("bench transfer", o.kv.codec, NULL, &codec)) {
        return 2;
    }
    if (!kvp_cli_range("bench transfer", "--reps", o.kv.reps, 1, 64) ||
        !kvp_cli_geometry("bench transfer", "--heads", o.kv.heads, "--head-dim", o.kv.head_dim,
                          "--page-tokens", o.kv.page_tokens) ||
        !kvp_cli_codec_fits("bench transfer", codec, o.kv.heads, o.kv.head_dim,
                            o.kv.page_tokens) ||
        !kvp_cli_range("bench transfer", "--tokens", o.kv.tokens, o.kv.page_tokens, 1u << 24) ||
        !kvp_cli_range("bench transfer", "--layers", o.kv.layers, 1, 1024) ||
        !kvp_cli_range("bench transfer", "--inflight", o.inflight, 1, 8) ||
        !kvp_cli_range("bench transfer", "--batch-bytes", o.batch, 4096, UINT64_MAX)) {
        return 2;
    }
    if (o.err_mode == NULL) {
        const char *env = getenv("KVP_UCX_ERR_MODE");

        err_from = "KVP_UCX_ERR_MODE"; /* the error names where the bad value came from */
        o.err_mode = (env != NULL && env[0] != '\0') ? env : "peer";
    }
    if (strcmp(o.err_mode, "peer") != 0 && strcmp(o.err_mode, "none") != 0) {
        return kvp_cli_usage_error("bench transfer", "%s wants peer or none, got '%s'", err_from,
                                   o.err_mode);
    }
    none = strcmp(o.err_mode, "none") == 0;
    setenv("KVP_UCX_ERR_MODE", o.err_mode, 1); /* the node child and the client both read it */
    s = bt_encode(&o, codec, &q);
    if (s == KVP_OK) {
        s = bt_encode(&o, KVP_CODEC_FP16, &f);
    }
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack bench transfer: encoding failed: %s\n", kvp_status_str(s));
        return 1;
    }
    fp16_equiv = (double)o.kv.layers * (double)(o.kv.tokens / o.kv.page_tokens) * o.kv.page_tokens *
                 (double)o.kv.heads * (double)o.kv.head_dim * 2.0 /* K,V */ * 2.0 /* bytes */;
    if (mkdtemp(dir) == NULL || (port = kvp_proc_node_start(dir, "8G", &node)) == 0) {
        fprintf(stderr, "kvpack bench transfer: could not start a node\n");
        s = KVP_ERR_IO;
        goto out;
    }
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    memset(&cp, 0, sizeof(cp));
    cp.field_mask   = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS |
                      KVP_CLIENT_PARAM_BATCH | KVP_CLIENT_PARAM_INFLIGHT;
    cp.server       = addr;
    cp.timeout_ms   = 60000;
    cp.batch_bytes  = o.batch;
    cp.max_inflight = (uint32_t)o.inflight;
    s = kvp_client_create(&cp, &c);
    /* warm-up: connection set-up and first-touch of the node's pool */
    if (s == KVP_OK) {
        s = kvp_client_put_pages(c, 1, (const void *const *)q.pages, q.lens, q.n);
    }
    if (s == KVP_OK) {
        double c0 = bt_cpu_s(0), n0 = bt_cpu_s(node);

        s     = bt_ship(c, &q, 1000, o.kv.reps, &t_q);
        cpu_c = (bt_cpu_s(0) - c0) / ((double)q.bytes * o.kv.reps) * 1e9;
        cpu_n = (bt_cpu_s(node) - n0) / ((double)q.bytes * o.kv.reps) * 1e9;
    }
    if (s == KVP_OK) {
        s = bt_ship(c, &f, 2000, o.kv.reps, &t_f);
    }
    if (s == KVP_OK) { /* the get as the puts: one warm-up, then the median of --reps (it was
                        * one sample: 0.21 and 0.76 GB/s in two runs) */
        double tg[64];

        s = kvp_client_put_session(c, 1000, "bench", &q.desc);
        for (uint64_t r = 0; s == KVP_OK && r <= o.kv.reps; r++) {
            double t0 = kvp_time_s();

            sp = NULL;
            s  = kvp_client_get_session(c, 1000, "bench", &sp);
            if (r > 0) {
                tg[r - 1] = kvp_time_s() - t0;
            }
            kvp_session_pages_free(sp);
        }
        if (s == KVP_OK) {
            kvp_sort_f64(tg, o.kv.reps);
            t_get = kvp_median_sorted(tg, o.kv.reps);
        }
    }
    kvp_progress_done();
    kvp_client_destroy(c);
    kill(node, SIGTERM);
    waitpid(node, NULL, 0);
    node = -1;
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack bench transfer: %s\n", kvp_status_str(s));
        goto out;
    }
    if (o.perftest) {
        unsigned iters = (unsigned)(q.bytes * o.kv.reps / o.batch) + 50;

        pt     = bt_perftest_median(o.batch, iters, true, pt_runs); /* peer errors: tcp only */
        pt_shm = bt_perftest_median(o.batch, iters, false, pt_shm_runs); /* shm allowed */
    }
    pt_same = none ? pt_shm : pt;
    if (o.json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "bench", "transfer");
        kvp_json_str(&j, "codec", o.kv.codec);
        kvp_json_obj(&j, "geometry");
        kvp_json_int(&j, "layers", (int64_t)o.kv.layers);
        kvp_json_int(&j, "heads", (int64_t)o.kv.heads);
        kvp_json_int(&j, "head_dim", (int64_t)o.kv.head_dim);
        kvp_json_int(&j, "tokens", (int64_t)(o.kv.tokens / o.kv.page_tokens * o.kv.page_tokens));
        kvp_json_int(&j, "page_tokens", (int64_t)o.kv.page_tokens);
        kvp_json_close(&j);
        kvp_json_int(&j, "pages", q.n);
        kvp_json_int(&j, "batch_bytes", (int64_t)o.batch);
        kvp_json_int(&j, "inflight", (int64_t)o.inflight);
        kvp_json_int(&j, "reps", (int64_t)o.kv.reps);
        kvp_json_str(&j, "err_mode", o.err_mode);
        kvp_json_int(&j, "codec_bytes", (int64_t)q.bytes);
        kvp_json_int(&j, "fp16_page_bytes", (int64_t)f.bytes);
        kvp_json_u64(&j, "fp16_equiv_bytes", (uint64_t)fp16_equiv); /* exact: %.6g lost digits */
        kvp_json_num(&j, "compression_ratio", (double)f.bytes / (double)q.bytes);
        kvp_json_num(&j, "put_gbps", q.bytes / t_q / 1e9);
        kvp_json_num(&j, "put_fp16_equiv_gbps", fp16_equiv / t_q / 1e9);
        kvp_json_num(&j, "put_fp16_pages_gbps", f.bytes / t_f / 1e9);
        kvp_json_num(&j, "get_gbps", q.bytes / t_get / 1e9);
        kvp_json_num(&j, "get_fp16_equiv_gbps", fp16_equiv / t_get / 1e9);
        kvp_json_num(&j, "put_client_cpu_ns_per_byte", cpu_c);
        kvp_json_num(&j, "put_node_cpu_ns_per_byte", cpu_n);
        kvp_json_obj(&j, "perftest");
        kvp_json_str(&j, "test", "ucp_am_bw");
        kvp_json_int(&j, "msg_bytes", (int64_t)o.batch);
        kvp_json_num(&j, "gbps_peer_err", pt); /* medians of the runs below */
        kvp_json_num(&j, "gbps_no_err", pt_shm);
        kvp_json_arr(&j, "gbps_peer_err_runs");
        for (int i = 0; o.perftest && i < BT_PERFTEST_RUNS; i++) {
            kvp_json_num(&j, NULL, pt_runs[i]);
        }
        kvp_json_close(&j);
        kvp_json_arr(&j, "gbps_no_err_runs");
        for (int i = 0; o.perftest && i < BT_PERFTEST_RUNS; i++) {
            kvp_json_num(&j, NULL, pt_shm_runs[i]);
        }
        kvp_json_close(&j);
        if (!o.perftest || isnan(pt) || isnan(pt_shm)) { /* a null baseline says why */
            kvp_json_str(&j, "skipped", !o.perftest ? "--no-perftest"
                                        : "ucx_perftest not found, or its run gave no result");
        }
        kvp_json_close(&j);
        kvp_json_obj(&j, "ratios");
        kvp_json_num(&j, "fp16_equiv_vs_fp16_shipping", (fp16_equiv / t_q) / (f.bytes / t_f));
        kvp_json_num(&j, "put_vs_perftest", (q.bytes / t_q / 1e9) / pt_same);
        kvp_json_num(&j, "fp16_pages_vs_perftest", (f.bytes / t_f / 1e9) / pt_same);
        kvp_json_num(&j, "fp16_equiv_vs_perftest", (fp16_equiv / t_q / 1e9) / pt_same);
        kvp_json_num(&j, "put_vs_perftest_no_err", (q.bytes / t_q / 1e9) / pt_shm);
        kvp_json_close(&j);
        kvp_json_str(&j, "transport",
                     none ? "UCX AM, err_mode none: shm (sysv/posix/cma) on one host; ratios "
                            "against perftest without -e"
                          : "UCX AM, err_mode peer: tcp only (peer error handling disables shm "
                            "in UCX 1.13); ratios against perftest with -e");
        kvp_json_end(&j);
    } else {
        printf("%s pages: %u pages, %.1f MB (fp16 pages %.1f MB, ratio %.2f)\n", o.kv.codec, q.n,
               q.bytes / 1e6, f.bytes / 1e6, (double)f.bytes / q.bytes);
        printf("put %s:        %.2f GB/s  (fp16-equivalent %.2f GB/s)\n", o.kv.codec,
               q.bytes / t_q / 1e9, fp16_equiv / t_q / 1e9);
        printf("put fp16 pages:  %.2f GB/s\n", f.bytes / t_f / 1e9);
        printf("get %s:        %.2f GB/s  (fp16-equivalent %.2f GB/s)\n", o.kv.codec,
               q.bytes / t_get / 1e9, fp16_equiv / t_get / 1e9);
        printf("put cpu:         %.2f ns/B client, %.2f ns/B node (err_mode %s)\n", cpu_c,
               cpu_n, o.err_mode);
        printf("ucx_perftest ucp_am_bw %llu B: %.2f GB/s with -e, %.2f GB/s without (medians "
               "of %d runs)\n",
               (unsigned long long)o.batch, pt, pt_shm, BT_PERFTEST_RUNS);
    }
out:
    if (node > 0) {
        kill(node, SIGTERM);
        waitpid(node, NULL, 0);
    }
    rmdir(dir);
    bt_free(&q);
    bt_free(&f);
    return (s == KVP_OK) ? 0 : 1;
}
