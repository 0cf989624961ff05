/* test_backlog.c - a client that asks for far more than it takes, against a real kvpackd: small
 * GET_PAGES requests naming one stored 512 KiB page hundreds of times with the largest byte
 * budget, sent without reading the replies. The node caps each reply (64 MiB of pages) and holds
 * the connection's next request back while 64 MiB of its replies are not taken, so its memory
 * stays bounded (it grew by ~250 MiB per request before); another client is served meanwhile;
 * once the first one reads, every request is answered. */
#include "node_harness.h"

#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#define NS      0xBAC1u
#define NREQ    4
#define PAGE_T  128u

static long rss_mib(pid_t pid)
{
    char  path[64], line[256];
    long  kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL && sscanf(line, "VmRSS: %ld", &kb) != 1) {
    }
    fclose(f);
    CHECK(kb >= 0);
    return kb / 1024;
}

int main(void)
{
    test_node_t       node;
    test_raw_t        raw;
    kvp_page_params_t pp;
    kvp_wire_req_t    req;
    kvp_client_h      c;
    kvp_key128_t      key = {0x1234, 0x5678}, *keys;
    size_t            n = (size_t)PAGE_T * 8 * 128, cap, len, hl;
    float            *k = kvp_malloc(n * sizeof(float), "k"), *v = kvp_malloc(n * sizeof(float), "v");
    uint8_t          *page, *hdr;
    const void       *pages[1];
    uint32_t          nkeys;
    long              rss0, rss1;
    double            end;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    CHECK(k != NULL && v != NULL);
    for (size_t i = 0; i < n; i++) {
        k[i] = (float)(i % 7) - 3.0f;
        v[i] = (float)(i % 5) - 2.0f;
    }
    memset(&pp, 0, sizeof(pp));
    pp.codec       = KVP_CODEC_FP16;
    pp.heads       = 8;
    pp.head_dim    = 128;
    pp.page_tokens = PAGE_T;
    pp.chunk_key   = key;
    cap            = kvp_page_max_bytes(&pp);
    page           = kvp_malloc(cap, "page");
    CHECK(page != NULL);
    CHECK_OK(kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, PAGE_T, page, cap, &len));
    CHECK(len > 512 * 1024);

    test_node_mkdir(&node);
    test_node_start(&node, "--workers=1");
    c        = test_client(node.addr, 20000);
    pages[0] = page;
    CHECK_OK(kvp_client_put_pages(c, NS, pages, &len, 1));

    test_raw_open(&raw, node.port);
    memset(&req, 0, sizeof(req));
    req.op     = KVP_WIRE_OP_STAT;
    req.req_id = 1;
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
    test_raw_call(&raw, hdr, hl, NULL, 0); /* connected */
    kvp_free(hdr);
    rss0  = rss_mib(node.pid);
    nkeys = (uint32_t)((kvp_xfer_max_hdr(raw.x) - 64) / 16); /* as many as a header holds */
    keys  = kvp_malloc(nkeys * sizeof(*keys), "keys");
    CHECK(keys != NULL);
    for (uint32_t i = 0; i < nkeys; i++) {
        keys[i] = key;
    }
    raw.got = 0;
    for (int r = 0; r < NREQ; r++) {
        kvp_status_t s;

        memset(&req, 0, sizeof(req));
        req.op        = KVP_WIRE_OP_GET_PAGES;
        req.req_id    = 100 + (uint64_t)r;
        req.ns        = NS;
        req.n_keys    = nkeys;
        req.keys      = keys;
        req.layers    = 1;
        req.max_bytes = UINT32_MAX;
        CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
        s = kvp_xfer_send(raw.conn, hdr, hl, NULL, 0, NULL, NULL);
        CHECK(s == KVP_OK || s == KVP_INPROGRESS);
        kvp_free(hdr);
    }
    /* the raw client does not progress now: its replies are not taken. Another client is
     * served meanwhile (the requests above have been handled or held back by now). */
    CHECK_OK(kvp_client_put_pages(c, NS, pages, &len, 1));
    rss1 = rss_mib(node.pid);
    printf("node rss %ld -> %ld MiB with %d requests of %u x %zu-byte pages not taken\n", rss0,
           rss1, NREQ, nkeys, len);
    EXPECT(rss1 - rss0 < 200, "the node held %ld MiB for replies nobody takes", rss1 - rss0);

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
    test_node_stop(&node, SIGTERM);
    test_node_rmdir(&node);
    kvp_free(keys);
    kvp_free(page);
    kvp_free(k);
    kvp_free(v);
    return kvp_test_result("test_backlog");
}
