/* test_http.c - the --http server and the node's /health and /metrics routes in one process, no
 * UCX: /health follows the life-cycle (503 "starting", 200 "ok", 503 "shutting down") and
 * /metrics leaves out store figures while no store is open; counters bumped by a thread during
 * scrapes add up exactly (run it under -fsanitize=thread for the races); requests split over
 * several writes, HTTP/1.0, bare-LF lines and empty lines before the request line; 431 for
 * headers past 8 KiB; 500 for reply headers past their buffer; the idle deadline (408); a full
 * table of silent connections with a far deadline does not keep /health waiting (the oldest gets
 * 408), nor one of answered connections that stay (the oldest is closed), nor one that floods
 * after its reply (cut after 64 KiB); /health says "stalled" when the main loop has not run for KVP_NODE_STALL_MS; the
 * kvpack_disk_* families only with an SSD tier, kvpack_disk_free_bytes left out when the
 * filesystem cannot be asked; the kvpack_request_duration_seconds histogram of known handling
 * times (cumulative buckets that hold exactly the times <= their le, +Inf = _count, _sum = the
 * recorded sum); the store's spill and restore histograms are whole families while a store is
 * open; no leaks. */
#include "http.h"
#include "node_obs.h"

#include "kvpack/alloc.h"
#include "kvpack/store.h"
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUMPS 200000u
#define HIST  "kvpack_request_duration_seconds"

static int connect_to(uint16_t port)
{
    struct sockaddr_in sa;
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    CHECK(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_port        = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    { /* a reply that never comes fails the test, not ctest's timeout */
        struct timeval tv = {30, 0};

        CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
    }
    return fd;
}

/* Read the whole reply from fd (until the server closes), close fd; returns the status code and
 * leaves the body, NUL-terminated, in body (truncated to cap). */
static int read_reply(int fd, char *body, size_t cap)
{
    static char buf[1 << 20];
    size_t      len = 0;
    ssize_t     n;
    const char *sep;
    int         code = 0;

    while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0) {
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    CHECK(sscanf(buf, "HTTP/1.1 %d", &code) == 1);
    sep = strstr(buf, "\r\n\r\n");
    CHECK(sep != NULL);
    snprintf(body, cap, "%s", sep + 4);
    return code;
}

static int request(uint16_t port, const char *raw, char *body, size_t cap)
{
    int fd = connect_to(port);

    CHECK(write(fd, raw, strlen(raw)) == (ssize_t)strlen(raw));
    return read_reply(fd, body, cap);
}

static int get(uint16_t port, const char *path, char *body, size_t cap)
{
    char raw[256];

    snprintf(raw, sizeof(raw), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    return request(port, raw, body, cap);
}

/* A fresh obs served by an HTTP server on a free loopback port; 0: the server's default. */
static kvp_http_h obs_serve_ex(kvp_node_obs_t *obs, uint16_t *port_p, uint32_t idle_ms,
                               uint32_t linger_ms, uint32_t max_conns)
{
    kvp_http_params_t hp;
    kvp_http_h        h;

    kvp_node_obs_init(obs);
    memset(&hp, 0, sizeof(hp));
    hp.host      = "127.0.0.1";
    hp.route     = kvp_node_obs_route;
    hp.arg       = obs;
    hp.idle_ms   = idle_ms;
    hp.linger_ms = linger_ms;
    hp.max_conns = max_conns;
    CHECK_OK(kvp_http_start(&hp, &h, port_p));
    return h;
}

static kvp_http_h obs_serve(kvp_node_obs_t *obs, uint16_t *port_p)
{
    return obs_serve_ex(obs, port_p, 0, 0, 0);
}

/* Check op's HIST series in a /metrics body against the n handling times recorded for it: le
 * ascending to a last +Inf, each bucket the count of times <= its le, _count = +Inf = n, _sum =
 * the sum of the times = kvpack_request_handling_seconds_total. */
static void check_histogram(const char *body, const char *op, const uint64_t *ns, size_t n)
{
    char               pre[128], le[32];
    const char        *p = body;
    unsigned long long c, prev = 0;
    uint64_t           sum = 0, le_ns, prev_le = 0;
    int                buckets = 0, inf = 0;
    double             sec;

    for (size_t i = 0; i < n; i++) {
        sum += ns[i];
    }
    snprintf(pre, sizeof(pre), "\n" HIST "_bucket{op=\"%s\",le=\"", op);
    while ((p = strstr(p, pre)) != NULL) {
        size_t want = 0;

        p += strlen(pre);
        CHECK(!inf && sscanf(p, "%31[^\"]\"} %llu\n", le, &c) == 2); /* nothing after +Inf */
        inf   = strcmp(le, "+Inf") == 0;
        le_ns = inf ? UINT64_MAX : (uint64_t)(strtod(le, NULL) * 1e9 + 0.5);
        CHECK(le_ns > prev_le && c >= prev);
        for (size_t i = 0; i < n; i++) {
            want += ns[i] <= le_ns;
        }
        CHECK(c == want);
        prev_le = le_ns;
        prev    = c;
        buckets++;
    }
    CHECK(inf && buckets >= 10);
    snprintf(pre, sizeof(pre), "\n" HIST "_count{op=\"%s\"} ", op);
    CHECK((p = strstr(body, pre)) != NULL && sscanf(p + strlen(pre), "%llu", &c) == 1);
    CHECK(c == prev && c == n);
    snprintf(pre, sizeof(pre), "\n" HIST "_sum{op=\"%s\"} ", op);
    CHECK((p = strstr(body, pre)) != NULL && sscanf(p + strlen(pre), "%lf", &sec) == 1);
    CHECK((uint64_t)(sec * 1e9 + 0.5) == sum);
    snprintf(pre, sizeof(pre), "\nkvpack_request_handling_seconds_total{op=\"%s\"} ", op);
    CHECK((p = strstr(body, pre)) != NULL && sscanf(p + strlen(pre), "%lf", &sec) == 1);
    CHECK((uint64_t)(sec * 1e9 + 0.5) == sum);
}

/* name is one histogram family: HELP and TYPE histogram once, then all its samples in one
 * block. */
static void check_histogram_family(const char *body, const char *name)
{
    char        type_line[128], help[128], sample[128];
    const char *type, *p;
    int         block = 0, all = 0;

    snprintf(type_line, sizeof(type_line), "\n# TYPE %s histogram\n", name);
    snprintf(help, sizeof(help), "# HELP %s ", name);
    snprintf(sample, sizeof(sample), "\n%s_", name);
    type = strstr(body, type_line);
    CHECK(type != NULL && strstr(body, help) != NULL);
    CHECK(strstr(type + 2, type_line + 1) == NULL); /* only once */
    for (p = strchr(type + 1, '\n'); strncmp(p, sample, strlen(sample)) == 0;
         p = strchr(p + 1, '\n')) {
        block++;
    }
    for (p = body; (p = strstr(p, sample)) != NULL; p++) {
        all++;
    }
    CHECK(block > 0 && block == all);
}

static void test_histogram(void)
{
    static char           body[1 << 20];
    static const uint64_t get_ns[] = {1,           49999,        50000,       50001,
                                      999999,      1000000,      7000000,     123456789,
                                      999999999,   4000000000u,  10000000000u, 10000000001u,
                                      60000000000u}; /* on, under and over bounds; past 10 s */
    static const uint64_t lookup_ns[]  = {20000, 20000, 300000, 2500000};
    static const uint64_t unknown_ns[] = {70000};
    kvp_node_obs_t        obs;
    kvp_http_h            h;
    uint16_t              port;

    h = obs_serve(&obs, &port);
    for (size_t i = 0; i < sizeof(get_ns) / sizeof(get_ns[0]); i++) {
        kvp_node_obs_request(&obs, KVP_WIRE_OP_GET_SESSION, 10, get_ns[i]);
    }
    for (size_t i = 0; i < sizeof(lookup_ns) / sizeof(lookup_ns[0]); i++) {
        kvp_node_obs_request(&obs, KVP_WIRE_OP_LOOKUP, 10, lookup_ns[i]);
    }
    kvp_node_obs_request(&obs, 999, 10, unknown_ns[0]);

    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    check_histogram_family(body, HIST);
    check_histogram(body, "get_session", get_ns, sizeof(get_ns) / sizeof(get_ns[0]));
    check_histogram(body, "lookup", lookup_ns, sizeof(lookup_ns) / sizeof(lookup_ns[0]));
    check_histogram(body, "unknown", unknown_ns, 1);
    check_histogram(body, "stat", NULL, 0);
    kvp_http_stop(h);
    kvp_node_obs_cleanup(&obs);
}

static void *bumper(void *arg)
{
    kvp_node_obs_t *obs = arg;

    for (uint32_t i = 0; i < BUMPS; i++) { /* in the node's order (job_done) */
        kvp_node_obs_reply(obs, KVP_WIRE_OP_PUT_PAGES, (i % 4) ? KVP_OK : KVP_ERR_CORRUPT, 10);
        kvp_node_obs_request(obs, KVP_WIRE_OP_PUT_PAGES, 100, 10);
    }
    kvp_node_obs_reply(obs, 999, KVP_ERR_PROTOCOL, 5); /* an op the node could not decode */
    /* two statuses without a name: one "other" series, not "unknown" twice (a repeated series
     * makes Prometheus refuse the whole scrape) */
    kvp_node_obs_reply(obs, KVP_WIRE_OP_GET_PAGES, (kvp_status_t)-20, 0);
    kvp_node_obs_reply(obs, KVP_WIRE_OP_GET_PAGES, (kvp_status_t)-21, 0);
    return NULL;
}

/* The value of the series that starts with name in a /metrics body (0 when it is not there). */
static uint64_t series_value(const char *body, const char *name)
{
    const char *at = strstr(body, name);

    return at != NULL ? strtoull(at + strlen(name), NULL, 10) : 0;
}

static void test_life_cycle(void)
{
    static char        body[1 << 20];
    kvp_node_obs_t     obs;
    kvp_http_h         h;
    kvp_store_h        store;
    kvp_store_params_t sp;
    pthread_t          th;
    uint16_t           port;
    char               want[128];

    h = obs_serve(&obs, &port);

    CHECK(get(port, "/health", body, sizeof(body)) == 503 && strcmp(body, "starting\n") == 0);
    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    CHECK(strstr(body, "\nkvpack_serving 0\n") != NULL);
    CHECK(strstr(body, "kvpack_dram_bytes") == NULL); /* no store yet */

    memset(&sp, 0, sizeof(sp));
    sp.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET;
    sp.dram_budget = 1 << 20;
    CHECK_OK(kvp_store_open(&sp, &store));
    kvp_node_obs_set_store(&obs, store);
    kvp_node_obs_set_state(&obs, KVP_NODE_SERVING);
    CHECK(get(port, "/health", body, sizeof(body)) == 200 && strcmp(body, "ok\n") == 0);
    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    CHECK(strstr(body, "\nkvpack_dram_bytes ") != NULL);
    CHECK(strstr(body, "kvpack_disk_") == NULL); /* DRAM only: no disk to alert on */

    CHECK(pthread_create(&th, NULL, bumper, &obs) == 0);
    for (int i = 0; i < 20; i++) {
        uint64_t answered, count;

        CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
        CHECK(strstr(body, "\nkvpack_dram_budget_bytes 1048576\n") != NULL);
        /* requests finishing during the scrape: _count may trail, never lead (it led when the
         * scrape read answered[] before the histograms) */
#define REQS "\nkvpack_requests_total{op=\"put_pages\",result="
        answered = series_value(body, REQS "\"ok\"} ") + series_value(body, REQS "\"err_corrupt\"} ");
#undef REQS
        count    = series_value(body, "\n" HIST "_count{op=\"put_pages\"} ");
        CHECK(count <= answered);
    }
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    /* the store's spill and restore histograms: one unlabelled series each, empty so far */
    check_histogram_family(body, "kvpack_spill_duration_seconds");
    check_histogram_family(body, "kvpack_restore_duration_seconds");
    CHECK(strstr(body, "\nkvpack_spill_duration_seconds_bucket{le=\"0.00005\"} 0\n"));
    CHECK(strstr(body, "\nkvpack_spill_duration_seconds_bucket{le=\"+Inf\"} 0\n"));
    CHECK(strstr(body, "\nkvpack_spill_duration_seconds_sum 0.000000000\n"));
    CHECK(strstr(body, "\nkvpack_restore_duration_seconds_count 0\n"));
    snprintf(want, sizeof(want), "kvpack_requests_total{op=\"put_pages\",result=\"ok\"} %u\n",
             BUMPS / 4 * 3);
    CHECK(strstr(body, want) != NULL);
    snprintf(want, sizeof(want),
             "kvpack_requests_total{op=\"put_pages\",result=\"err_corrupt\"} %u\n", BUMPS / 4);
    CHECK(strstr(body, want) != NULL);
    CHECK(strstr(body, "kvpack_requests_total{op=\"unknown\",result=\"err_protocol\"} 1\n"));
    CHECK(strstr(body, "kvpack_requests_total{op=\"get_pages\",result=\"other\"} 2\n"));
    CHECK(strstr(body, "result=\"unknown\"") == NULL);
    snprintf(want, sizeof(want), "kvpack_request_bytes_total{op=\"put_pages\"} %u\n", BUMPS * 100);
    CHECK(strstr(body, want) != NULL);
    snprintf(want, sizeof(want), "kvpack_reply_bytes_total{op=\"unknown\"} 5\n");
    CHECK(strstr(body, want) != NULL);
    snprintf(want, sizeof(want), HIST "_count{op=\"put_pages\"} %u\n", BUMPS); /* each 10 ns */
    CHECK(strstr(body, want) != NULL);
    snprintf(want, sizeof(want), HIST "_bucket{op=\"put_pages\",le=\"0.00005\"} %u\n", BUMPS);
    CHECK(strstr(body, want) != NULL);

    kvp_node_obs_set_state(&obs, KVP_NODE_STOPPING);
    kvp_node_obs_set_store(&obs, NULL);
    kvp_store_close(store);
    CHECK(get(port, "/health", body, sizeof(body)) == 503 && strcmp(body, "shutting down\n") == 0);
    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    CHECK(strstr(body, "kvpack_dram_bytes") == NULL && strstr(body, "\nkvpack_serving 0\n"));
    CHECK(strstr(body, "kvpack_spill_duration_seconds") == NULL);
    kvp_http_stop(h);
    kvp_node_obs_cleanup(&obs);
}

/* A route that echoes the path it was given; /long-type answers with a content type too long
 * for the reply's header buffer. */
static void echo_route(void *arg, const char *path, kvp_http_reply_t *r)
{
    static char long_type[300];

    (void)arg;
    if (strcmp(path, "/long-type") == 0) {
        memset(long_type, 'x', sizeof(long_type) - 1);
        r->content_type = long_type;
    }
    kvp_http_reply_printf(r, "%s", path);
}

static void test_requests(void)
{
    static char       big[KVP_HTTP_MAX_REQ + 64];
    char              body[256];
    kvp_http_params_t hp;
    kvp_http_h        h;
    uint16_t          port;
    int               quiet[2], fd;

    memset(&hp, 0, sizeof(hp));
    hp.host      = "127.0.0.1";
    hp.route     = echo_route;
    hp.idle_ms   = 300;
    hp.max_conns = 2;
    CHECK_OK(kvp_http_start(&hp, &h, &port));

    /* a request in pieces, HTTP/1.0, bare LF, a query string */
    fd = connect_to(port);
    CHECK(write(fd, "GET /a/b", 8) == 8);
    usleep(50000);
    CHECK(write(fd, "?x=1 HTTP/1.1\r\nHost: t\r\n", 24) == 24);
    usleep(50000);
    CHECK(write(fd, "\r\n", 2) == 2);
    CHECK(read_reply(fd, body, sizeof(body)) == 200 && strcmp(body, "/a/b") == 0);
    CHECK(request(port, "GET /z HTTP/1.0\n\n", body, sizeof(body)) == 200);
    CHECK(strcmp(body, "/z") == 0);
    CHECK(request(port, "GET /z\r\n\r\n", body, sizeof(body)) == 400);     /* HTTP/0.9 */
    CHECK(request(port, "GET  /z HTTP/1.1\r\n\r\n", body, sizeof(body)) == 400);
    CHECK(request(port, "GET z HTTP/1.1\r\n\r\n", body, sizeof(body)) == 400);
    CHECK(request(port, "DELETE /z HTTP/1.1\r\n\r\n", body, sizeof(body)) == 405);
    /* empty lines before the request line are skipped (RFC 9112 section 2.2) */
    CHECK(request(port, "\r\n\r\nGET /crlf HTTP/1.1\r\n\r\n", body, sizeof(body)) == 200);
    CHECK(strcmp(body, "/crlf") == 0);
    CHECK(request(port, "\nGET /lf HTTP/1.0\n\n", body, sizeof(body)) == 200);
    CHECK(strcmp(body, "/lf") == 0);
    /* reply headers that do not fit their buffer: 500, not bytes past it */
    CHECK(request(port, "GET /long-type HTTP/1.1\r\n\r\n", body, sizeof(body)) == 500);
    CHECK(strcmp(body, "Internal Server Error\n") == 0);

    /* headers past the limit */
    snprintf(big, sizeof(big), "GET /z HTTP/1.1\r\nX: ");
    memset(big + strlen(big), 'a', KVP_HTTP_MAX_REQ);
    big[sizeof(big) - 1] = '\0';
    CHECK(request(port, big, body, sizeof(body)) == 431);
    snprintf(big, sizeof(big), "HEAD /z HTTP/1.1\r\nX: ");
    memset(big + strlen(big), 'a', KVP_HTTP_MAX_REQ);
    big[sizeof(big) - 1] = '\0';
    CHECK(request(port, big, body, sizeof(body)) == 431 && body[0] == '\0'); /* HEAD: no body */

    /* two silent clients fill the table; a third takes the older one's slot (408 to it) and is
     * served; the other gets 408 at the idle deadline */
    quiet[0] = connect_to(port);
    quiet[1] = connect_to(port);
    usleep(50000); /* both accepted */
    CHECK(get(port, "/late", body, sizeof(body)) == 200 && strcmp(body, "/late") == 0);
    CHECK(read_reply(quiet[0], body, sizeof(body)) == 408);
    CHECK(read_reply(quiet[1], body, sizeof(body)) == 408);
    kvp_http_stop(h);
}

/* The parser on empty lines alone: it waits for the request line, and a buffer full of them is
 * 400 (not a wait that never ends). */
static void test_blank_lines(void)
{
    static const char req[] = "HEAD /h HTTP/1.1\r\n\r\n";
    static char       buf[KVP_HTTP_MAX_REQ];
    char              path[KVP_HTTP_MAX_LINE];
    int               head = -1;

    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (i % 2) ? '\n' : '\r';
    }
    CHECK(kvp_http_request_parse(buf, 64, sizeof(buf), &head, path, sizeof(path)) == 0);
    CHECK(kvp_http_request_parse(buf, sizeof(buf), sizeof(buf), &head, path, sizeof(path)) == 400);
    memcpy(buf + 64, req, sizeof(req) - 1);
    CHECK(kvp_http_request_parse(buf, 64 + sizeof(req) - 1, sizeof(buf), &head, path,
                                 sizeof(path)) == 200);
    CHECK(head == 1 && strcmp(path, "/h") == 0);
}

/* Every slot taken by a silent client whose deadline is far past the test's timeout: /health is
 * answered all the same (it used to wait for a deadline), the oldest silent client gets 408 for
 * its slot, the newest is still open. */
static void test_full_table(void)
{
    char              body[256];
    int               quiet[64];
    kvp_node_obs_t    obs;
    uint16_t          port;
    kvp_http_h        h = obs_serve_ex(&obs, &port, 600000, 0, 0); /* the default table of 64 */

    kvp_node_obs_set_state(&obs, KVP_NODE_SERVING);
    for (int i = 0; i < 64; i++) {
        quiet[i] = connect_to(port);
    }
    CHECK(get(port, "/health", body, sizeof(body)) == 200 && strcmp(body, "ok\n") == 0);
    CHECK(read_reply(quiet[0], body, sizeof(body)) == 408);
    CHECK(recv(quiet[63], body, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN);
    for (int i = 1; i < 64; i++) { /* read_reply closed quiet[0] */
        close(quiet[i]);
    }
    kvp_http_stop(h);
    kvp_node_obs_cleanup(&obs);
}

/* A server whose answered connections may linger 10 minutes, table of 4 (review findings). */
static kvp_http_h linger_serve(kvp_node_obs_t *obs, uint16_t *port_p)
{
    kvp_http_h h = obs_serve_ex(obs, port_p, 600000, 600000, 4);

    kvp_node_obs_set_state(obs, KVP_NODE_SERVING);
    return h;
}

/* Every slot taken by a client that got its reply and stays connected: /health is answered all
 * the same (it waited for their linger, here 10 minutes), the oldest one is closed for it (a
 * byte it sends is answered with a reset), the newest still lingers. */
static void test_full_table_answered(void)
{
    static const char req[] = "GET /health HTTP/1.1\r\n\r\n";
    char              body[256], buf[512];
    int               held[4];
    kvp_node_obs_t    obs;
    uint16_t          port;
    kvp_http_h        h = linger_serve(&obs, &port);
    ssize_t           n;

    for (int i = 0; i < 4; i++) {
        held[i] = connect_to(port);
        CHECK(write(held[i], req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1);
        while ((n = read(held[i], buf, sizeof(buf))) > 0) { /* the reply, to the server's EOF */
        }
        CHECK(n == 0);
    }
    CHECK(get(port, "/health", body, sizeof(body)) == 200 && strcmp(body, "ok\n") == 0);
    CHECK(send(held[0], "x", 1, MSG_NOSIGNAL) == 1); /* closed: a reset answers it (no events
                                                      * asked: poll waits for error or hang-up) */
    EXPECT(poll(&(struct pollfd){.fd = held[0], .events = 0}, 1, 20000) == 1,
           "the oldest answered connection was not closed for the new one");
    CHECK(send(held[3], "x", 1, MSG_NOSIGNAL) == 1); /* the newest lingers: read and dropped */
    EXPECT(recv(held[3], buf, 1, MSG_DONTWAIT) == 0, "the newest one's EOF");
    for (int i = 0; i < 4; i++) {
        close(held[i]);
    }
    kvp_http_stop(h);
    kvp_node_obs_cleanup(&obs);
}

/* A client that keeps sending after its reply: closed once it has sent more than a request's
 * trailing bytes (it held the server thread in a read loop for as long as it sent: /health
 * waited 8 s behind one), and /health is answered after. */
static void test_linger_flood(void)
{
    static const char req[] = "GET /health HTTP/1.1\r\n\r\n";
    static char       chunk[65536];
    char              body[256], buf[512];
    kvp_node_obs_t    obs;
    uint16_t          port;
    kvp_http_h        h  = linger_serve(&obs, &port);
    int               fd = connect_to(port);
    size_t            sent = 0;
    ssize_t           n;

    CHECK(write(fd, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1);
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
    }
    CHECK(n == 0);
    while (sent < (256u << 20) && (n = send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL)) > 0) {
        sent += (size_t)n;
    }
    EXPECT(sent < (256u << 20), "256 MiB sent after the reply, all read and dropped: never cut");
    close(fd);
    CHECK(get(port, "/health", body, sizeof(body)) == 200 && strcmp(body, "ok\n") == 0);
    kvp_http_stop(h);
    kvp_node_obs_cleanup(&obs);
}

/* A main loop that has not run for more than KVP_NODE_STALL_MS (its last wake-up set back, as if
 * it had stopped then): /health 503 "stalled", kvpack_serving 0; ok again once it runs. */
static void test_stall(void)
{
    static char    body[1 << 20];
    kvp_node_obs_t obs;
    kvp_http_h     h;
    uint16_t       port;

    h = obs_serve(&obs, &port);
    kvp_node_obs_set_state(&obs, KVP_NODE_SERVING);
    CHECK(get(port, "/health", body, sizeof(body)) == 200 && strcmp(body, "ok\n") == 0);
    atomic_store(&obs.loop_ns, kvp_time_ns() - (KVP_NODE_STALL_MS + 1000ull) * 1000000ull);
    CHECK(get(port, "/health", body, sizeof(body)) == 503);
    CHECK(strncmp(body, "stalled: main loop last ran ", 28) == 0);
    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    CHECK(strstr(body, "\nkvpack_serving 0\n") != NULL);
    kvp_node_obs_loop(&obs);
    CHECK(get(port, "/health", body, sizeof(body)) == 200 && strcmp(body, "ok\n") == 0);
    kvp_http_stop(h);
    kvp_node_obs_cleanup(&obs);
}

/* A store with an SSD tier: the kvpack_disk_* families are there, the free space > 0; with its
 * directory moved away (the free space cannot be asked) kvpack_disk_free_bytes is left out, not
 * 0, and the other disk families stay. */
static void test_disk_families(void)
{
    static char        body[1 << 20];
    char               dir[] = "/tmp/kvp_http_XXXXXX", moved[64], cmd[96];
    kvp_node_obs_t     obs;
    kvp_http_h         h;
    kvp_store_h        store;
    kvp_store_params_t sp;
    uint16_t           port;
    const char        *free_at;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(moved, sizeof(moved), "%s.moved", dir);
    memset(&sp, 0, sizeof(sp));
    sp.field_mask   = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                      KVP_STORE_PARAM_DISK_RESERVE;
    sp.dram_budget  = 1 << 20;
    sp.db_path      = dir;
    sp.disk_reserve = 0;
    CHECK_OK(kvp_store_open(&sp, &store));
    h = obs_serve(&obs, &port);
    kvp_node_obs_set_store(&obs, store);
    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    free_at = strstr(body, "\nkvpack_disk_free_bytes ");
    CHECK(free_at != NULL && strtoull(free_at + 24, NULL, 10) > 0);
    CHECK(strstr(body, "\nkvpack_disk_errors_total 0\n") != NULL);
    CHECK(rename(dir, moved) == 0);
    CHECK(get(port, "/metrics", body, sizeof(body)) == 200);
    CHECK(rename(moved, dir) == 0);
    CHECK(strstr(body, "kvpack_disk_free_bytes") == NULL);
    CHECK(strstr(body, "\nkvpack_disk_bytes ") != NULL);
    kvp_node_obs_set_store(&obs, NULL);
    kvp_store_close(store);
    kvp_http_stop(h);
    kvp_node_obs_cleanup(&obs);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    int64_t live = kvp_alloc_live_count();

    test_life_cycle();
    test_requests();
    test_blank_lines();
    test_full_table();
    test_full_table_answered();
    test_linger_flood();
    test_stall();
    test_disk_families();
    test_histogram();
    CHECK(kvp_alloc_live_count() == live);
    return kvp_test_result("http");
}
