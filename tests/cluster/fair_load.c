/* fair_load.c - a measuring driver, not a ctest (it asserts nothing about time): one kvpackd, one
 * flooding client that keeps --depth raw requests (STAT or GET_PAGES of one stored page) in
 * flight on a single connection from a child process, and a well-behaved client on another
 * connection that makes --calls single calls of the same op one after another. Prints the
 * victim's latency percentiles (--victim-op: another op than the flooder's) without the flooder and then with it, and how many requests the
 * node received meanwhile (its STAT counter).
 *   fair_load [--op stat|get] [--depth 8] [--calls 200] [--page-tokens 128] [--keys 1]
 *             [--fresh 0] [--workers 4]  (--fresh 1: the victim connects anew for each call;
 *             --keys: a GET_PAGES names the one stored page that many times)
 *             [--hold-s 0]  (hold-s > 0: print the node's pid and keep flooding that long with
 *                            no victim, for `perf record -p PID`)
 * Main flow: main -> node start -> page put -> victim_run (quiet) -> flood_start -> victim_run. */
#include "node_harness.h"

#include "kvpack/log.h"

#include <stdint.h>

#define NS 0xFA1Au

typedef struct {
    const char *op;
    const char *victim_op;    /* the victim's op (default: the flooder's) */
    unsigned    depth, calls, page_tokens, hold_s;
    unsigned    fresh;        /* the victim connects anew for each call (as `kvpack stat` does) */
    unsigned    keys;         /* GET_PAGES: the stored page named this many times (reply size) */
    const char *workers;
    kvp_key128_t key;
} load_opts_t;

/* One request of the chosen op, packed; kvp_free the header. */
static uint8_t *request_pack(const char *op, const load_opts_t *o, uint64_t req_id, size_t *hl)
{
    kvp_wire_req_t req;
    kvp_key128_t   keys[KVP_WIRE_MAX_KEYS];
    uint8_t       *hdr;

    if (strcmp(op, "get") == 0) {
        for (unsigned i = 0; i < o->keys; i++) {
            keys[i] = o->key;
        }
        test_get_req(&req, req_id, NS, keys, o->keys, 64u << 20);
    } else {
        memset(&req, 0, sizeof(req));
        req.req_id = req_id;
        req.op     = KVP_WIRE_OP_STAT;
    }
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, hl));
    return hdr;
}

/* The flooder (a child process): depth requests in flight on one connection, forever. */
static void flood_main(const load_opts_t *o, uint16_t port)
{
    test_raw_t r;
    size_t     hl;
    uint8_t   *hdr;
    uint64_t   sent = 0;

    test_raw_open_up(&r, port);
    hdr    = request_pack(o->op, o, 7, &hl);
    r.got  = 0;
    for (;;) {
        while (sent - (uint64_t)r.got < o->depth) {
            kvp_xfer_iov_t none = {NULL, 0};
            kvp_status_t   s    = kvp_xfer_send(r.conn, hdr, hl, &none, 0, NULL, NULL);

            CHECK(s == KVP_OK || s == KVP_INPROGRESS);
            sent++;
        }
        kvp_xfer_wait(r.x, 10);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* calls single requests on a fresh connection, one after another; prints their percentiles */
static void victim_run(const load_opts_t *o, uint16_t port, const char *label)
{
    test_raw_t r;
    uint64_t  *lat = kvp_calloc(o->calls, sizeof(*lat), "lat");
    size_t     hl;
    uint8_t   *hdr;
    int        failed = 0;

    CHECK(lat != NULL);
    test_raw_open_up(&r, port);
    hdr = request_pack(o->victim_op != NULL ? o->victim_op : o->op, o, 99, &hl);
    for (unsigned i = 0; i < o->calls; i++) {
        uint64_t t0 = kvp_time_ns();

        if (o->fresh) { /* connect, then the call */
            test_raw_close(&r);
            test_raw_open(&r, port);
        }
        test_raw_call(&r, hdr, hl, NULL, 0);
        lat[i] = kvp_time_ns() - t0;
        failed += r.unpack != KVP_OK || r.rep.status != KVP_OK;
    }
    qsort(lat, o->calls, sizeof(*lat), cmp_u64);
    printf("%-12s op %s calls %u: p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms  "
           "(%d not OK)\n", label, o->victim_op != NULL ? o->victim_op : o->op, o->calls, lat[o->calls / 2] / 1e6,
           lat[o->calls * 9 / 10] / 1e6, lat[o->calls * 99 / 100] / 1e6,
           lat[o->calls - 1] / 1e6, failed);
    fflush(stdout);
    kvp_free(hdr);
    kvp_free(lat);
    test_raw_close(&r);
}

static uint64_t node_requests(const char *addr)
{
    kvp_client_h    c = test_client(addr, 20000);
    kvp_node_stat_t st;

    CHECK_OK(kvp_client_stat(c, &st));
    kvp_client_destroy(c);
    return st.requests;
}

int main(int argc, char **argv)
{
    load_opts_t  o = {"stat", NULL, 8, 200, 128, 0, 0, 1, "--workers=4", {0, 0}};
    char         workers[32];
    test_node_t  node;
    kvp_client_h c;
    uint8_t     *page;
    size_t       len;
    const void  *pages[1];
    pid_t        flooder, parent = getpid();
    uint64_t     r0, t0;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--op") == 0) {
            o.op = argv[i + 1];
        } else if (strcmp(argv[i], "--depth") == 0) {
            o.depth = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--calls") == 0) {
            o.calls = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--page-tokens") == 0) {
            o.page_tokens = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--workers") == 0) {
            snprintf(workers, sizeof(workers), "--workers=%s", argv[i + 1]);
            o.workers = workers;
        } else if (strcmp(argv[i], "--victim-op") == 0) {
            o.victim_op = argv[i + 1];
        } else if (strcmp(argv[i], "--fresh") == 0) {
            o.fresh = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--keys") == 0) {
            o.keys = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--hold-s") == 0) {
            o.hold_s = (unsigned)atoi(argv[i + 1]);
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    CHECK(o.calls > 0 && o.depth > 0 && o.keys > 0 && o.keys <= KVP_WIRE_MAX_KEYS);
    kvp_log_set_level(KVP_LOG_LVL_WARN);
    test_node_mkdir(&node);
    test_node_start(&node, o.workers);
    o.key.lo = 0xF00D;
    o.key.hi = 0xFA1A;
    page     = test_big_page(o.page_tokens, o.key, 1, &len);
    pages[0] = page;
    c        = test_client(node.addr, 20000);
    CHECK_OK(kvp_client_put_pages(c, NS, pages, &len, 1));
    kvp_client_destroy(c);
    printf("node pid %d, %s, page %zu bytes, flooder depth %u\n", (int)node.pid, o.workers, len,
           o.depth);
    fflush(stdout);
    if (o.hold_s == 0) {
        victim_run(&o, node.port, "no flood");
    }
    flooder = fork();
    CHECK(flooder >= 0);
    if (flooder == 0) {
        kvp_test_child_of(parent);
        flood_main(&o, node.port);
        _exit(0);
    }
    sleep(1); /* the flood under way */
    r0 = node_requests(node.addr);
    t0 = kvp_time_ns();
    if (o.hold_s > 0) {
        sleep(o.hold_s);
    } else {
        victim_run(&o, node.port, "with flood");
    }
    printf("node received %.0f requests/s meanwhile\n",
           (double)(node_requests(node.addr) - r0) / ((kvp_time_ns() - t0) / 1e9));
    kill(flooder, SIGKILL);
    waitpid(flooder, NULL, 0);
    CHECK(test_node_stop(&node, SIGTERM) == 0);
    test_node_rmdir(&node);
    kvp_free(page);
    return 0;
}
