/* test_backlog.c - a client that asks for far more than it takes, against a real kvpackd: small
 * GET_PAGES requests naming one stored 512 KiB page hundreds of times with the largest byte
 * budget, sent without reading the replies. The node caps each reply (64 MiB of pages) and holds
 * the connection's next request back while 64 MiB of its replies are not taken, so its memory
 * stays bounded (it grew by ~250 MiB per request before); another client is served meanwhile;
 * once the first one reads, every request is answered. And a client that starts large puts and
 * stops sending their data: the node closes its connection after --recv-timeout, so the receive
 * budget it held serves the other clients again (whose large puts waited for it meanwhile). And a
 * client that, besides not reading, floods small requests past the 256 the node holds for it: the
 * node closes its connection rather than queue an ERR_BUSY answer for each behind the replies it
 * does not take (before, every one was answered: memory without bound), also when those are only
 * the flood's own small STAT replies. */
#include "node_harness.h"

/* Resident memory under a sanitizer (the node is built the same way) measures its quarantine and
 * shadow, not kvpackd: the RSS bounds are checked only without one. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVP_TEST_SANITIZED 1 /* clang */
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(KVP_TEST_SANITIZED)
#define RSS_CHECKED 0
#else
#define RSS_CHECKED 1
#endif

#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#define NS      0xBAC1u
#define NREQ    4
#define PAGE_T  128u
#define QUEUE_MAX 256 /* the node's NODE_CONN_QUEUE_MAX */

/* One raw PUT_PAGES of n bytes (garbage: a rendezvous message the node takes, then refuses as a
 * bad page), without waiting for anything */
static void raw_put(test_raw_t *r, uint64_t req_id, const uint8_t *data, uint32_t n,
                    kvp_status_t *sent)
{
    kvp_wire_req_t req;
    uint32_t       plen[1] = {n};

    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_PUT_PAGES;
    req.req_id    = req_id;
    req.ns        = NS;
    req.n_pages   = 1;
    req.page_lens = plen;
    test_raw_send(r, &req, data, n, sent);
}

/* Send GET_PAGES asking for nkeys copies of key with the largest byte budget, reply not waited */
static void raw_get_big(test_raw_t *r, uint64_t req_id, kvp_key128_t *keys, uint32_t nkeys)
{
    kvp_wire_req_t req;

    test_get_req(&req, req_id, NS, keys, nkeys, UINT32_MAX);
    test_raw_send(r, &req, NULL, 0, NULL);
}

/* A raw client floods STATs without reading; with big, it first leaves NREQ big replies untaken
 * (the node parks its strand at once at 64 MiB of them), else the STATs' own small replies (each
 * counted 1 KiB more for its bookkeeping) fill those 64 MiB. Then 256 requests are held, the
 * next ones are answered ERR_BUSY until 130 MiB wait for the client, and the next refusal closes
 * the connection, dropping what was queued for it. The client's sends then fail,
 * and when it reads, its connection has failed; the node serves others all along, and its memory
 * at the peak stays bounded. Before, every refusal was answered ERR_BUSY behind the untaken
 * replies and the connection stayed (155 -> 737 MiB over 2M STATs); with the close at 130 MiB
 * and tiny replies counted by their bytes alone, a STAT flood queued ~1M sends first. */
#define N_FLOOD 2000000
static void flooding_reader(int big, kvp_key128_t *keys, uint32_t nkeys, const void **pages,
                            size_t *len)
{
    test_node_t    node;
    test_raw_t     raw;
    kvp_wire_req_t req;
    kvp_client_h   c;
    uint8_t       *hdr;
    size_t         hl;
    int            sent = 0, nreq = big ? NREQ : 0;
    long           rss0, rss1, peak;
    double         end;

    test_node_mkdir(&node);
    test_node_start(&node, "--workers=1");
    c = test_client(node.addr, 20000);
    CHECK_OK(kvp_client_put_pages(c, NS, pages, len, 1));
    test_raw_open_up(&raw, node.port);
    for (int r = 0; r < nreq; r++) {
        raw_get_big(&raw, 100 + (uint64_t)r, keys, nkeys);
    }
    usleep(500000); /* the node packs its replies and parks the strand */
    rss0 = test_node_rss_mib(node.pid);
    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_STAT;
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
    for (; sent < N_FLOOD; sent++) { /* a send fails once the transport saw the close */
        kvp_xfer_iov_t none = {NULL, 0};
        kvp_status_t   s    = kvp_xfer_send(raw.conn, hdr, hl, &none, 0, NULL, NULL);

        if (s != KVP_OK && s != KVP_INPROGRESS) {
            break;
        }
    }
    kvp_free(hdr);
    usleep(500000);
    rss1 = test_node_rss_mib(node.pid);
    peak = test_node_mem_mib(node.pid, "VmHWM");
    CHECK_OK(kvp_client_put_pages(c, NS, pages, len, 1)); /* others are served */
    end = kvp_time_s() + 60;
    while (kvp_xfer_conn_status(raw.conn) == KVP_OK && raw.got < 1 + nreq + sent &&
           kvp_time_s() < end) {
        kvp_xfer_wait(raw.x, 50);
    }
    printf("flooding reader (%s): connection %s, %d replies (%d ERR_BUSY) after %d STATs sent; "
           "node RSS %ld MiB before the flood, %ld after, %ld at the peak\n",
           big ? "big replies untaken first" : "STATs only",
           kvp_status_name(kvp_xfer_conn_status(raw.conn)), raw.got, raw.n_busy, sent, rss0, rss1,
           peak);
    EXPECT(kvp_xfer_conn_status(raw.conn) != KVP_OK, "a client flooding without reading kept "
           "its connection (%d replies)", raw.got);
    EXPECT(raw.n_busy < sent - QUEUE_MAX, "every refusal answered (%d)", raw.n_busy);
    /* the big replies' buffers go with the connection (the small sends' heap is kept by malloc,
     * so RSS only shows their peak) */
    EXPECT(!RSS_CHECKED || !big || rss1 < rss0 + 64, "node RSS %ld MiB after the flood, %ld "
           "before", rss1, rss0);
    EXPECT(!RSS_CHECKED || peak < rss0 + 160, "node RSS %ld MiB at the peak, %ld before the flood",
           peak, rss0);
    test_raw_close(&raw);
    CHECK_OK(kvp_client_put_pages(c, NS, pages, len, 1));
    kvp_client_destroy(c);
    EXPECT(test_node_stop(&node, SIGTERM) == 0, "node exit");
    test_node_rmdir(&node);
}

/* A client process that starts four rendezvous puts of 7.5 MiB (the whole receive budget of a
 * node with --max-msg 8M) and is then stopped (SIGSTOP: a paused process's TCP still answers):
 * the node gives up on them after --recv-timeout (1 s, +0.75 s for the size) and closes that
 * connection, so another client's 4 MiB message, which waited for the budget meanwhile, is taken
 * and answered. It is never refused: before, such messages were refused ERR_BUSY until the
 * stopped one's connection closed (and, earlier still, for as long as the stopped process
 * lived). */
static void stalled_sender(void)
{
    test_node_t    node;
    test_raw_t     other;
    kvp_wire_req_t req;
    uint8_t       *data, *hdr;
    size_t         hl;
    kvp_status_t   sent = KVP_INPROGRESS;
    int            busy = 0, st;
    pid_t          child, parent = getpid();
    double         end;

    test_node_mkdir(&node);
    test_node_start_args(&node, 0, "--max-msg=8M", "--recv-timeout=1");
    data = kvp_calloc(1, 8u << 20, "stalled data");
    CHECK(data != NULL);
    memset(&req, 0, sizeof(req));
    req.op     = KVP_WIRE_OP_STAT;
    req.req_id = 1;
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        test_raw_t raw;
        kvp_status_t ignored;

        kvp_test_child_of(parent);
        test_raw_open(&raw, node.port);
        test_raw_call(&raw, hdr, hl, NULL, 0); /* connected */
        for (int r = 0; r < 4; r++) {
            raw_put(&raw, 10 + (uint64_t)r, data, (7u << 20) + (512u << 10), &ignored);
        }
        raise(SIGSTOP); /* paused before the node pulls the data */
        _exit(0);
    }
    CHECK(waitpid(child, &st, WUNTRACED) == child && WIFSTOPPED(st));
    test_raw_open(&other, node.port);
    test_raw_call(&other, hdr, hl, NULL, 0);
    end = kvp_time_s() + 20; /* the node gives up on the stopped one after 1.75 s */
    for (;;) {
        double wait_end = kvp_time_s() + 10;

        other.got = 0;
        raw_put(&other, 100 + (uint64_t)busy, data, 4u << 20, &sent);
        while (sent != KVP_ERR_BUSY && !other.got && kvp_time_s() < wait_end) {
            kvp_xfer_wait(other.x, 20);
        }
        if (sent != KVP_ERR_BUSY || kvp_time_s() > end) {
            break;
        }
        busy++;
        usleep(200000);
    }
    printf("stalled sender: another client's 4 MiB put answered %s after %d refusals (busy)\n",
           other.got ? kvp_status_name(other.rep.status) : "(no reply)", busy);
    EXPECT(other.got && sent != KVP_ERR_BUSY, "refused while a sender is stopped: %s",
           kvp_status_name(sent));
    EXPECT(busy == 0, "refused ERR_BUSY %d times instead of waiting for the budget", busy);
    test_raw_close(&other);
    kill(child, SIGKILL);
    CHECK(waitpid(child, &st, 0) == child);
    EXPECT(test_node_stop(&node, SIGTERM) == 0, "node exit");
    test_node_rmdir(&node);
    kvp_free(hdr);
    kvp_free(data);
}

int main(void)
{
    test_node_t       node;
    test_raw_t        raw;
    kvp_client_h      c;
    kvp_key128_t      key = {0x1234, 0x5678}, *keys;
    size_t            len;
    uint8_t          *page;
    const void       *pages[1];
    uint32_t          nkeys;
    long              rss0, rss1;
    double            end;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    page = test_big_page(PAGE_T, key, 1, &len);
    CHECK(len > 512 * 1024);

    test_node_mkdir(&node);
    test_node_start(&node, "--workers=1");
    c        = test_client(node.addr, 20000);
    pages[0] = page;
    CHECK_OK(kvp_client_put_pages(c, NS, pages, &len, 1));

    test_raw_open_up(&raw, node.port);
    rss0  = test_node_rss_mib(node.pid);
    nkeys = (uint32_t)((kvp_xfer_max_hdr(raw.x) - 64) / 16); /* as many as a header holds */
    keys  = kvp_malloc(nkeys * sizeof(*keys), "keys");
    CHECK(keys != NULL);
    for (uint32_t i = 0; i < nkeys; i++) {
        keys[i] = key;
    }
    raw.got = 0;
    for (int r = 0; r < NREQ; r++) {
        raw_get_big(&raw, 100 + (uint64_t)r, keys, nkeys);
    }
    /* the raw client does not progress now: its replies are not taken. Another client is
     * served meanwhile (the requests above have been handled or held back by now). */
    CHECK_OK(kvp_client_put_pages(c, NS, pages, &len, 1));
    rss1 = test_node_rss_mib(node.pid);
    printf("node rss %ld -> %ld MiB with %d requests of %u x %zu-byte pages not taken\n", rss0,
           rss1, NREQ, nkeys, len);
#if defined(__SANITIZE_THREAD__)
    (void)rss0; /* TSan's shadow memory multiplies the node's resident memory: not a measure */
#else
    EXPECT(rss1 - rss0 < 200, "the node held %ld MiB for replies nobody takes", rss1 - rss0);
#endif

    /* now the client reads: every request is answered, each reply at most 64 MiB of pages */
    end = kvp_time_s() + 60;
    while (raw.got < NREQ && kvp_time_s() < end) {
        kvp_xfer_wait(raw.x, 50);
    }
    EXPECT(raw.got == NREQ && raw.n_ok == NREQ + 1, "replies %d, ok %d", raw.got, raw.n_ok);
    EXPECT(raw.pages == (uint64_t)NREQ * ((64u << 20) / len), "pages %llu",
           (unsigned long long)raw.pages);
    EXPECT(raw.data <= (size_t)NREQ * (64u << 20), "data %zu", raw.data);
    test_raw_close(&raw);
    kvp_client_destroy(c);
    EXPECT(test_node_stop(&node, SIGTERM) == 0, "node exit");
    test_node_rmdir(&node);
    stalled_sender();
    flooding_reader(1, keys, nkeys, pages, &len);
    flooding_reader(0, keys, nkeys, pages, &len);
    kvp_free(keys);
    kvp_free(page);
    return kvp_test_result("test_backlog");
}
