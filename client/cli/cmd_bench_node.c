/* cmd_bench_node.c - "kvpack bench node": whole sessions stored in and fetched from a local node
 * (kvpackd's code, DRAM only) against a local Redis (redis-server, no persistence) holding the same
 * bytes under one key per session, at the same concurrency in the same run: --clients threads,
 * each with its own connection and one operation in flight, first every put, then every get.
 * kvpack: put = PUT_PAGES of the session's pages + PUT_SESSION; get = kvp_client_get_session
 * (record, pages, every page CRC-checked). Redis: put = SET sid <pages back to back>; get = GET
 * sid, its bytes checked (CRC32C against what was SET). Pages are fp16 pages of 8 heads x 128,
 * --page-tokens tokens each (default 24: 98,368 bytes, the size of a kivi page of 128 tokens);
 * each session's pages have their own keys (no prefix sharing). Reported per side: sessions/s,
 * GB/s, p50/p99 ms; and kvpack over Redis. Without redis-server the baseline is skipped (said in
 * the JSON). Never asserts on speed.
 * Flow: node (fork) + redis-server (spawn) -> puts (all clients) -> gets -> stop both -> JSON. */
#include "cli.h"
#include "proc.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/kvpack.h"
#include "kvpack/page.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define NS          0xbe4c0de5u
#define MAX_CLIENTS 64

typedef struct {
    uint64_t    clients, sessions, pages, page_tokens;
    const char *redis;
    bool        json;
} bn_opts_t;

/* one side's results: per phase (0 put, 1 get) wall seconds, latencies, errors */
typedef struct {
    double   secs[2];
    double  *lat[2];   /* ms, clients * sessions each */
    uint64_t errors[2];
    bool     ran;
} bn_side_t;

typedef struct bn_run bn_run_t;

/* one client thread */
typedef struct {
    bn_run_t *run;
    uint32_t  id;
    int       fd;           /* Redis connection */
    kvp_client_h cl;        /* node connection */
} bn_worker_t;

struct bn_run {
    const bn_opts_t  *o;
    int               redis; /* 1: the Redis side runs */
    int               phase;
    char              node[64];
    int               redis_port;
    size_t            page_len, sess_bytes;
    uint8_t          *tmpl;  /* one page (payload reused, header re-keyed per session) */
    bn_side_t        *side;
    pthread_barrier_t start;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack bench node [options]\n"
            "  whole sessions put into and fetched from a local node (kvpackd's code, DRAM only)\n"
            "  against a local Redis holding the same bytes under one key per session, at the same\n"
            "  concurrency in the same run: sessions/s, GB/s, p50/p99 latency, kvpack over Redis.\n"
            "options:\n"
            "  --clients N       client threads, one connection and one operation in flight each\n"
            "                    (default 4)\n"
            "  --sessions N      sessions each client puts, then gets back (default 100)\n"
            "  --pages N         pages per session (default 4)\n"
            "  --page-tokens T   tokens per fp16 page of 8 heads x 128 (4,096 bytes a token;\n"
            "                    default 24: 98,368-byte pages, a kivi page of 128 tokens)\n"
            "  --redis-server P  the redis-server binary (default: redis-server from PATH); not\n"
            "                    found: the Redis side is skipped and the JSON says so\n"
            "  --json            machine-readable output\n");
}

static kvp_key128_t key_of(uint32_t client, uint64_t sess, uint32_t page)
{
    uint64_t     s = ((uint64_t)client << 40) ^ (sess << 8) ^ page ^ 0x5eedull;
    kvp_key128_t k;

    k.lo = kvp_splitmix64(&s);
    k.hi = kvp_splitmix64(&s);
    return k;
}

/* page i of session s of client c: the template re-keyed and sealed, into out */
static void make_page(const bn_run_t *r, uint32_t c, uint64_t s, uint32_t i, uint8_t *out)
{
    kvp_page_info_t info;

    memcpy(out, r->tmpl, r->page_len);
    kvp_page_parse(out, r->page_len, &info);
    info.chunk_key = key_of(c, s, i);
    info.layer     = 0;
    kvp_page_hdr_write(&info, out);
    kvp_page_seal(out);
}

/* ---- a minimal RESP client: SET and GET of one binary value, one at a time ---- */

static int resp_write(int fd, struct iovec *v, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, v, n);

        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return -1;
        }
        while (n > 0 && (size_t)w >= v->iov_len) {
            w -= (ssize_t)v->iov_len;
            v++;
            n--;
        }
        if (n > 0) {
            v->iov_base = (char *)v->iov_base + w;
            v->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);

        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

/* one reply line ("+OK", "$123", "-ERR ...") without its CRLF */
static int read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;

    while (n + 1 < cap) {
        if (read_full(fd, buf + n, 1) != 0) {
            return -1;
        }
        if (buf[n] == '\n') {
            buf[n > 0 && buf[n - 1] == '\r' ? n - 1 : n] = '\0';
            return 0;
        }
        n++;
    }
    return -1;
}

static int redis_set(int fd, const char *key, const void *val, size_t len)
{
    char         head[128], line[128];
    int          hl = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n",
                               strlen(key), key, len);
    struct iovec v[3] = {{head, (size_t)hl}, {(void *)val, len}, {"\r\n", 2}};

    if (resp_write(fd, v, 3) != 0 || read_line(fd, line, sizeof(line)) != 0) {
        return -1;
    }
    return strcmp(line, "+OK") == 0 ? 0 : -1;
}

/* GET key into buf (cap bytes); returns the length, -1 on error or a missing key */
static long redis_get(int fd, const char *key, void *buf, size_t cap)
{
    char         head[128], line[64], crlf[2];
    int          hl = snprintf(head, sizeof(head), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key),
                               key);
    struct iovec v[1] = {{head, (size_t)hl}};
    long         len;

    if (resp_write(fd, v, 1) != 0 || read_line(fd, line, sizeof(line)) != 0 || line[0] != '$') {
        return -1;
    }
    len = strtol(line + 1, NULL, 10);
    if (len < 0 || (size_t)len > cap || read_full(fd, buf, (size_t)len) != 0 ||
        read_full(fd, crlf, 2) != 0) {
        return -1;
    }
    return len;
}

static int redis_connect(int port)
{
    struct sockaddr_in a;
    int                fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_port        = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* ---- the workers ---- */

/* one operation of client w on session s: returns 0 when it did what it should (want: the CRC32C
 * of the session's bytes, taken before the clock starts, for a Redis get to check its copy
 * against as kvpack's client checks every page's own) */
static int one_op(bn_worker_t *w, uint64_t s, uint8_t *pages, uint8_t *got, uint32_t want)
{
    bn_run_t *r = w->run;
    uint32_t  n = (uint32_t)r->o->pages;
    char      sid[64];

    snprintf(sid, sizeof(sid), "bench-%u-%llu", w->id, (unsigned long long)s);
    if (r->redis && r->phase == 0) {
        return redis_set(w->fd, sid, pages, r->sess_bytes);
    }
    if (r->redis) {
        long len = redis_get(w->fd, sid, got, r->sess_bytes);

        return len == (long)r->sess_bytes && kvp_crc32c(0, got, (size_t)len) == want ? 0 : -1;
    }
    if (r->phase == 0) {
        const void        *pp[256];
        size_t             lens[256];
        kvp_key128_t       keys[256];
        kvp_session_desc_t d;

        memset(&d, 0, sizeof(d));
        for (uint32_t i = 0; i < n; i++) {
            pp[i]   = pages + (size_t)i * r->page_len;
            lens[i] = r->page_len;
            keys[i] = key_of(w->id, s, i);
        }
        d.layers      = 1;
        d.page_tokens = (uint32_t)r->o->page_tokens;
        d.n_chunks    = n;
        d.chunk_keys  = keys;
        return kvp_client_put_session_pages(w->cl, NS, sid, &d, pp, lens, n, kvp_version_now()) ==
                       KVP_OK ? 0 : -1;
    }
    {
        kvp_session_pages_t *sp = NULL;
        int                  ok = kvp_client_get_session(w->cl, NS, sid, &sp) == KVP_OK &&
                                  sp->n_pages == n;

        kvp_session_pages_free(sp);
        return ok ? 0 : -1;
    }
}

static void *worker_main(void *arg)
{
    bn_worker_t *w = arg;
    bn_run_t    *r = w->run;
    bn_side_t   *sd = r->side;
    uint64_t     S = r->o->sessions;
    uint8_t     *pages = kvp_malloc(r->sess_bytes, "bench node pages");
    uint8_t     *got   = kvp_malloc(r->sess_bytes, "bench node get");
    double      *lat   = sd->lat[r->phase] + (size_t)w->id * S;
    uint64_t     errors = 0;

    pthread_barrier_wait(&r->start);
    for (uint64_t k = 0; k < S; k++) {
        uint64_t s = r->phase == 0 ? k : (k * 7919 + w->id) % S; /* gets in another order */
        double   t0;
        uint32_t want = 0;

        for (uint32_t i = 0; pages != NULL && i < r->o->pages; i++) { /* not timed */
            make_page(r, w->id, s, i, pages + (size_t)i * r->page_len);
        }
        if (pages != NULL && r->redis && r->phase == 1) { /* not timed either (it was) */
            want = kvp_crc32c(0, pages, r->sess_bytes);
        }
        t0     = kvp_time_s();
        errors += pages == NULL || got == NULL || one_op(w, s, pages, got, want) != 0;
        lat[k] = (kvp_time_s() - t0) * 1e3;
    }
    __atomic_add_fetch(&sd->errors[r->phase], errors, __ATOMIC_RELAXED);
    kvp_free(pages);
    kvp_free(got);
    return NULL;
}

/* every client through one phase of one side; the phase's wall time */
static int run_phase(bn_run_t *r, bn_worker_t *w, uint32_t n, int phase)
{
    pthread_t tid[MAX_CLIENTS];
    double    t0;

    r->phase = phase;
    pthread_barrier_init(&r->start, NULL, n + 1);
    for (uint32_t i = 0; i < n; i++) {
        if (pthread_create(&tid[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "kvpack bench node: cannot start client thread %u\n", i);
            exit(1); /* the barrier would never open */
        }
    }
    t0 = kvp_time_s();
    pthread_barrier_wait(&r->start);
    for (uint32_t i = 0; i < n; i++) {
        pthread_join(tid[i], NULL);
    }
    r->side->secs[phase] = kvp_time_s() - t0;
    pthread_barrier_destroy(&r->start);
    return 0;
}

/* one side (kvpack: redis 0, or Redis) with its connections */
static int run_side(bn_run_t *r, int redis, bn_side_t *sd)
{
    uint32_t    n = (uint32_t)r->o->clients;
    bn_worker_t w[MAX_CLIENTS];
    int         rc = 0;

    r->redis = redis;
    r->side  = sd;
    for (uint32_t i = 0; i < n; i++) {
        kvp_client_params_t p = {0};

        w[i] = (bn_worker_t){r, i, -1, NULL};
        p.field_mask = KVP_CLIENT_PARAM_SERVER;
        p.server     = r->node;
        if (redis ? (w[i].fd = redis_connect(r->redis_port)) < 0
                  : kvp_client_create(&p, &w[i].cl) != KVP_OK) {
            fprintf(stderr, "kvpack bench node: client %u cannot connect to %s\n", i,
                    redis ? "redis-server" : r->node);
            rc = -1;
        }
    }
    for (int phase = 0; rc == 0 && phase < 2; phase++) {
        rc = run_phase(r, w, n, phase);
        kvp_progress(redis ? "redis" : "kvpack", (uint64_t)phase + 1, 2);
    }
    for (uint32_t i = 0; i < n; i++) {
        if (w[i].fd >= 0) {
            close(w[i].fd);
        }
        kvp_client_destroy(w[i].cl);
    }
    sd->ran = rc == 0;
    return rc;
}

/* redis-server on a free loopback port, no persistence; its pid, or -1 (*why says why) */
static pid_t redis_start(const char *bin, int *port_p, const char **why)
{
    char  port[16];
    pid_t pid;
    int   fd = -1, rc;

    *port_p = kvp_proc_free_port();
    snprintf(port, sizeof(port), "%d", *port_p);
    {
        char *argv[] = {(char *)bin, "--port", port, "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--protected-mode", "no", NULL};

        pid = *port_p > 0 ? kvp_proc_spawn(argv, "/dev/null") : -1;
    }
    for (int i = 0; pid > 0 && i < 500 && (fd = redis_connect(*port_p)) < 0; i++) {
        if ((rc = kvp_proc_wait(pid, 10)) >= 0) {
            *why = rc == 127 ? "redis-server not found (apt-get install redis-server, or "
                               "--redis-server PATH)"
                             : "redis-server exited at start";
            return -1;
        }
    }
    if (fd < 0) {
        *why = pid > 0 ? "redis-server did not listen within 5 s" : "cannot start redis-server";
        if (pid > 0) {
            kvp_proc_stop(pid, 2000);
        }
        return -1;
    }
    close(fd);
    return pid;
}

/* the q quantile of n latencies (sorted in place) */
static double pct(double *v, size_t n, double q)
{
    kvp_sort_f64(v, n);
    return kvp_quantile_sorted(v, n, q);
}

/* A phase's figures: per second of its wall time, and its latency quantiles; NAN (JSON null,
 * "failed" in text) when any of its operations failed, since a failed op's time is not a
 * session moved */
static double side_per_s(const bn_side_t *sd, int ph, double amount)
{
    return sd->errors[ph] > 0 ? NAN : amount / sd->secs[ph];
}

static double side_pct(const bn_side_t *sd, int ph, uint64_t n, double q)
{
    return sd->errors[ph] > 0 ? NAN : pct(sd->lat[ph], n, q);
}

/* kvpack's speed-up over Redis in a phase (Redis time / kvpack time); NAN if either failed */
static double side_ratio(const bn_side_t *kv, const bn_side_t *rd, int ph)
{
    return kv->errors[ph] + rd->errors[ph] > 0 ? NAN : rd->secs[ph] / kv->secs[ph];
}

static void side_json(kvp_json_t *j, const char *key, const bn_side_t *sd, const bn_run_t *r)
{
    uint64_t n = r->o->clients * r->o->sessions;

    kvp_json_obj(j, key);
    for (int ph = 0; ph < 2; ph++) {
        kvp_json_obj(j, ph == 0 ? "put" : "get");
        kvp_json_num(j, "seconds", sd->secs[ph]);
        kvp_json_num(j, "sessions_per_s", side_per_s(sd, ph, (double)n));
        kvp_json_num(j, "gbs", side_per_s(sd, ph, (double)n * (double)r->sess_bytes / 1e9));
        kvp_json_num(j, "p50_ms", side_pct(sd, ph, n, 0.5));
        kvp_json_num(j, "p99_ms", side_pct(sd, ph, n, 0.99));
        kvp_json_int(j, "errors", (int64_t)sd->errors[ph]);
        kvp_json_close(j);
    }
    kvp_json_close(j);
}

/* one side's phase in the text report */
static void side_text(const char *name, const bn_side_t *sd, int ph, const bn_run_t *r)
{
    uint64_t n = r->o->clients * r->o->sessions;

    if (sd->errors[ph] > 0) {
        printf("%s failed: %llu of %llu operations", name, (unsigned long long)sd->errors[ph],
               (unsigned long long)n);
        return;
    }
    printf("%s %8.0f sessions/s %.3f GB/s p50 %.3f p99 %.3f ms", name,
           side_per_s(sd, ph, (double)n), side_per_s(sd, ph, (double)n * (double)r->sess_bytes / 1e9),
           side_pct(sd, ph, n, 0.5), side_pct(sd, ph, n, 0.99));
}

int kvp_cmd_bench_node(int argc, char **argv)
{
    bn_opts_t   o = {4, 100, 4, 24, NULL, false};
    bn_run_t    r;
    bn_side_t   kv, rd;
    char        dir[256];
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", *why = NULL;
    pid_t       node = -1, redis = -1;
    size_t      payload;
    uint64_t    n, budget_mib;
    char        budget[32];
    int         rc = 0;

    memset(&r, 0, sizeof(r));
    memset(&kv, 0, sizeof(kv));
    memset(&rd, 0, sizeof(rd));
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_flag(argv, i, "--help") || kvp_opt_flag(argv, i, "-h")) {
            usage(stdout);
            return 0;
        } else if (kvp_opt_flag(argv, i, "--json")) {
            o.json = true;
        } else if (kvp_opt_u64(argc, argv, &i, "--clients", &o.clients) ||
                   kvp_opt_u64(argc, argv, &i, "--sessions", &o.sessions) ||
                   kvp_opt_u64(argc, argv, &i, "--pages", &o.pages) ||
                   kvp_opt_u64(argc, argv, &i, "--page-tokens", &o.page_tokens) ||
                   kvp_opt_str(argc, argv, &i, "--redis-server", &o.redis)) {
            continue;
        } else {
            return kvp_opt_unknown("bench node", argv[i]);
        }
    }
    if (!kvp_cli_range("bench node", "--clients", o.clients, 1, MAX_CLIENTS) ||
        !kvp_cli_range("bench node", "--sessions", o.sessions, 1, 1000000) ||
        !kvp_cli_range("bench node", "--pages", o.pages, 1, 256) ||
        !kvp_cli_range("bench node", "--page-tokens", o.page_tokens, 1, 1024)) {
        return 2;
    }
    payload = kvp_codec_payload_bytes(KVP_CODEC_FP16, 8, 128, (uint32_t)o.page_tokens,
                                      (uint32_t)o.page_tokens);
    if (payload == 0) {
        return kvp_cli_usage_error("bench node", "fp16 does not take 8 heads x 128 dims with "
                                   "--page-tokens %llu (it takes %s)",
                                   (unsigned long long)o.page_tokens,
                                   kvp_codec_geometry_rule(KVP_CODEC_FP16));
    }
    r.o          = &o;
    r.page_len   = KVP_PAGE_HDR_BYTES + payload;
    r.sess_bytes = r.page_len * o.pages;
    n            = o.clients * o.sessions;
    r.tmpl       = kvp_malloc(r.page_len, "bench node page");
    kv.lat[0] = kvp_calloc(n, sizeof(double), "bench lat");
    kv.lat[1] = kvp_calloc(n, sizeof(double), "bench lat");
    rd.lat[0] = kvp_calloc(n, sizeof(double), "bench lat");
    rd.lat[1] = kvp_calloc(n, sizeof(double), "bench lat");
    if (r.tmpl == NULL || !kv.lat[0] || !kv.lat[1] || !rd.lat[0] || !rd.lat[1]) {
        return 1;
    }
    kvp_cli_fp16_page(8, 128, (uint32_t)o.page_tokens, key_of(0, 0, 0), 0, 99, r.tmpl);
    snprintf(dir, sizeof(dir), "%s/kvp-bench-node-XXXXXX", base);
    budget_mib = (uint64_t)((double)n * (double)(r.sess_bytes + 4096 * o.pages) * 1.5 / 1048576.0) + 64;
    snprintf(budget, sizeof(budget), "%lluM", (unsigned long long)budget_mib);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "kvpack bench node: cannot create a directory under %s\n", base);
        return 1;
    }
    {
        unsigned short port = kvp_proc_node_start(dir, budget, &node);

        if (port == 0) {
            fprintf(stderr, "kvpack bench node: the node did not start\n");
            rmdir(dir);
            return 1;
        }
        snprintf(r.node, sizeof(r.node), "127.0.0.1:%u", port);
    }
    rc = run_side(&r, 0, &kv);
    kvp_proc_stop(node, 10000);
    redis = redis_start(o.redis ? o.redis : "redis-server", &r.redis_port, &why);
    if (rc == 0 && redis > 0) {
        rc = run_side(&r, 1, &rd);
    }
    if (redis > 0) {
        kvp_proc_stop(redis, 10000);
    }
    kvp_progress_done();
    rmdir(dir);
    if (o.json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "bench", "node");
        kvp_json_int(&j, "clients", (int64_t)o.clients);
        kvp_json_int(&j, "sessions_per_client", (int64_t)o.sessions);
        kvp_json_int(&j, "pages_per_session", (int64_t)o.pages);
        kvp_json_int(&j, "page_bytes", (int64_t)r.page_len);
        kvp_json_int(&j, "session_bytes", (int64_t)r.sess_bytes);
        side_json(&j, "kvpack", &kv, &r);
        if (rd.ran) {
            side_json(&j, "redis", &rd, &r);
            kvp_json_num(&j, "put_vs_redis", side_ratio(&kv, &rd, 0));
            kvp_json_num(&j, "get_vs_redis", side_ratio(&kv, &rd, 1));
        } else {
            kvp_json_str(&j, "redis_skipped", why ? why : "the Redis side failed");
        }
        kvp_json_end(&j);
    } else {
        const char *ph[2] = {"put", "get"};

        printf("node bench: %llu clients x %llu sessions of %llu x %zu-byte pages (%zu bytes)\n",
               (unsigned long long)o.clients, (unsigned long long)o.sessions,
               (unsigned long long)o.pages, r.page_len, r.sess_bytes);
        for (int p = 0; p < 2; p++) {
            printf("  %s  ", ph[p]);
            side_text("kvpack", &kv, p, &r);
            if (rd.ran) {
                printf(" | ");
                side_text("redis", &rd, p, &r);
                if (!isnan(side_ratio(&kv, &rd, p))) {
                    printf(" | %.2fx", side_ratio(&kv, &rd, p));
                }
            }
            printf("\n");
        }
        if (!rd.ran) {
            printf("  redis baseline skipped: %s\n", why ? why : "the Redis side failed");
        }
    }
    if (kv.errors[0] + kv.errors[1] + rd.errors[0] + rd.errors[1] > 0) {
        fprintf(stderr, "kvpack bench node: %llu failed operations\n",
                (unsigned long long)(kv.errors[0] + kv.errors[1] + rd.errors[0] + rd.errors[1]));
        rc = -1;
    }
    for (int p = 0; p < 2; p++) {
        kvp_free(kv.lat[p]);
        kvp_free(rd.lat[p]);
    }
    kvp_free(r.tmpl);
    return rc == 0 ? 0 : 1;
}
