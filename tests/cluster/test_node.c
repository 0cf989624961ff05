/* test_node.c - libkvpack against a real kvpackd child on a loopback port 0: put/get round trip
 * (byte-identical, CRC-verified), pages put with the record (one request each way when they fit
 * a batch; a corrupt one leaves the record unwritten), a streamed put (pushed layer by layer, a
 * corrupt page failing the finish), lookup, unknown session -> NOT_FOUND, a bad-CRC page ->
 * CORRUPT from the node, malformed and truncated requests -> PROTOCOL while the node keeps
 * serving, a client killed mid-put, a stopped node -> TIMEOUT at the deadline (also for a request
 * still being sent), a node killed while the client waits -> PEER_GONE before the deadline, and
 * a client with the largest timeout: served, and told at once when a put's node dies mid-send. */
#include "node_harness.h"

#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#define NS 0x5eed5eed5eed5eedull

/* ---- raw transport: hand-made (bad) requests ---- */

static void test_malformed(const test_node_t *n)
{
    test_raw_t        r;
    kvp_wire_req_t    req;
    uint8_t           garbage[200], *hdr, data[300];
    size_t            hl;
    uint32_t          lens[2] = {128, 128};

    test_raw_open(&r, n->port);

    /* garbage header: PROTOCOL, req_id unknown (0) */
    for (size_t i = 0; i < sizeof(garbage); i++) {
        garbage[i] = (uint8_t)(i * 37 + 11);
    }
    test_raw_call(&r, garbage, sizeof(garbage), NULL, 0);
    CHECK_ST(r.unpack, KVP_OK);
    CHECK_ST(r.rep.status, KVP_ERR_PROTOCOL);

    /* truncated: the header describes 256 bytes of pages, 100 arrive */
    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_PUT_PAGES;
    req.req_id    = 77;
    req.ns        = NS;
    req.n_pages   = 2;
    req.page_lens = lens;
    CHECK_ST(kvp_wire_req_pack(&req, &hdr, &hl), KVP_OK);
    memset(data, 0xA5, sizeof(data));
    test_raw_call(&r, hdr, hl, data, 100);
    CHECK_ST(r.unpack, KVP_OK);
    CHECK(r.rep.req_id == 77);
    CHECK_ST(r.rep.status, KVP_ERR_PROTOCOL);
    /* the header cut short by one byte */
    test_raw_call(&r, hdr, hl - 1, data, 256);
    CHECK_ST(r.rep.status, KVP_ERR_PROTOCOL);
    /* lengths right, but the bytes are not pages */
    test_raw_call(&r, hdr, hl, data, 256);
    CHECK(r.rep.req_id == 77);
    CHECK(r.rep.status == KVP_ERR_BAD_PAGE || r.rep.status == KVP_ERR_CORRUPT);
    kvp_free(hdr);
    test_raw_close(&r);
}

/* The node's request count (STAT counts itself). */
static uint64_t node_requests(kvp_client_h c)
{
    kvp_node_stat_t st;

    CHECK_ST(kvp_client_stat(c, &st), KVP_OK);
    return st.requests;
}

/* kvp_client_get_session_cb's runs: every item once, pages that are the session's */
typedef struct {
    uint32_t           seen[64], runs;
    const void        *page[64];
} cb_log_t;

static void cb_record(void *arg, uint32_t first, uint32_t n, const void *const *pages,
                      const size_t *lens)
{
    cb_log_t *l = arg;

    CHECK(n > 0 && first + n <= 64);
    for (uint32_t i = 0; i < n; i++) {
        CHECK(lens[i] > 0);
        l->seen[first + i]++;
        l->page[first + i] = pages[i];
    }
    l->runs++;
}

/* Pages with the record: a session that fits one batch is one PUT_SESSION and comes back in one
 * GET_SESSION; one larger than a batch (a client with 3-page batches) goes as PUT_PAGES + the
 * last batch with the record, and comes back as GET_SESSION + GET_PAGES for the rest. A corrupt
 * page among them: CORRUPT, and the record is not written (a new session stays absent, an
 * existing one keeps its old version); a forged one (bits_k 2 on an fp16 page, CRC made valid):
 * BAD_PAGE, nothing written. */
static void test_put_with_pages(const test_node_t *n, kvp_client_h c, const test_session_t *alpha)
{
    test_session_t       ts;
    kvp_session_pages_t *sp = NULL;
    kvp_client_params_t  p;
    kvp_client_h         small;
    uint64_t             r0;
    uint8_t             *bad;
    const void         **pp;

    test_session_make(&ts, 3, 4, 9, 21); /* 12 pages of ~16 KB + a tail */
    r0 = node_requests(c);
    CHECK_ST(kvp_client_put_session_pages(c, NS, "beta", &ts.desc, (const void *const *)ts.pages,
                                          ts.lens, ts.n_pages, kvp_version_now()), KVP_OK);
    CHECK(node_requests(c) == r0 + 2); /* the put, then this STAT */
    CHECK_ST(kvp_client_get_session(c, NS, "beta", &sp), KVP_OK);
    CHECK(node_requests(c) == r0 + 4);
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    sp = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask   = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS |
                     KVP_CLIENT_PARAM_BATCH | KVP_CLIENT_PARAM_INFLIGHT;
    p.server       = n->addr;
    p.timeout_ms   = 10000;
    p.batch_bytes  = 3 * ts.lens[0] + 100; /* one get reply: 3 pages with the record, 3 per */
    p.max_inflight = 1;                    /* GET_PAGES after it */
    CHECK_ST(kvp_client_create(&p, &small), KVP_OK);
    r0 = node_requests(small);
    CHECK_ST(kvp_client_put_session_pages(small, NS, "gamma", &ts.desc,
                                          (const void *const *)ts.pages, ts.lens, ts.n_pages, 0),
             KVP_OK);
    CHECK(node_requests(small) == r0 + 2 + 3); /* 3 PUT_PAGES went ahead of the record */
    CHECK_ST(kvp_client_get_session(small, NS, "gamma", &sp), KVP_OK);
    CHECK(node_requests(small) == r0 + 5 + 1 + 3 + 1); /* GET_SESSION (3 pages), 3 GET_PAGES */
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    sp = NULL;
    { /* the same get with a callback: 4 runs (the record's 3 pages, then 3 GET_PAGES) */
        cb_log_t log;

        memset(&log, 0, sizeof(log));
        CHECK_ST(kvp_client_get_session_cb(small, NS, "gamma", NULL, cb_record, &log, &sp),
                 KVP_OK);
        test_session_check(&ts, sp);
        CHECK(log.runs == 4);
        for (uint32_t i = 0; i < ts.n_pages; i++) {
            CHECK(log.seen[i] == 1 && log.page[i] == sp->pages[i]);
        }
        kvp_session_pages_free(sp);
        sp = NULL;
    }
    kvp_client_destroy(small);

    /* a corrupt page in the record's message */
    pp  = kvp_calloc(alpha->n_pages, sizeof(*pp), "t");
    bad = kvp_malloc(alpha->lens[1], "t");
    memcpy(bad, alpha->pages[1], alpha->lens[1]);
    bad[alpha->lens[1] - 3] ^= 0x10;
    for (uint32_t i = 0; i < alpha->n_pages; i++) {
        pp[i] = i == 1 ? bad : alpha->pages[i];
    }
    CHECK_ST(kvp_client_put_session_pages(c, NS, "delta", &alpha->desc, pp, alpha->lens,
                                          alpha->n_pages, 0), KVP_ERR_CORRUPT);
    CHECK_ST(kvp_client_get_session(c, NS, "delta", &sp), KVP_ERR_NOT_FOUND);
    CHECK_ST(kvp_client_put_session_pages(c, NS, "beta", &alpha->desc, pp, alpha->lens,
                                          alpha->n_pages, 0), KVP_ERR_CORRUPT);
    CHECK_ST(kvp_client_get_session(c, NS, "beta", &sp), KVP_OK);
    test_session_check(&ts, sp); /* still the old record */
    kvp_session_pages_free(sp);
    sp = NULL;
    /* a forged page: a codec-owned field no fp16 page has (8 bits per K value), CRC made to
     * match, as a client can: refused by the node's parse, nothing written */
    memcpy(bad, alpha->pages[1], alpha->lens[1]);
    bad[8] = 2;
    kvp_page_seal(bad);
    CHECK_ST(kvp_client_put_session_pages(c, NS, "delta", &alpha->desc, pp, alpha->lens,
                                          alpha->n_pages, 0), KVP_ERR_BAD_PAGE);
    CHECK_ST(kvp_client_get_session(c, NS, "delta", &sp), KVP_ERR_NOT_FOUND);
    /* a forged fp16 page holding +Inf (a valid header, CRC made to match): parse does not read
     * an fp16 payload, the store does; refused at the put, not at somebody's decode */
    memcpy(bad, alpha->pages[1], alpha->lens[1]);
    bad[KVP_PAGE_HDR_BYTES + 6] = 0x00;
    bad[KVP_PAGE_HDR_BYTES + 7] = 0x7C;
    kvp_page_seal(bad);
    CHECK_OK(kvp_page_parse(bad, alpha->lens[1], NULL));
    CHECK_ST(kvp_client_put_session_pages(c, NS, "delta", &alpha->desc, pp, alpha->lens,
                                          alpha->n_pages, 0), KVP_ERR_BAD_PAGE);
    CHECK_ST(kvp_client_get_session(c, NS, "delta", &sp), KVP_ERR_NOT_FOUND);
    kvp_free(bad);
    kvp_free(pp);
    test_session_free(&ts);
}

/* Streamed put: a session's pages pushed layer by layer (each layer's pages over all chunks, the
 * way a prefill produces them), the last layer with the record: the node holds exactly what a
 * plain put gives. A corrupt page pushed: finish reports CORRUPT, no record, later pushes
 * refused until then; the stream then carries the next session. Close with pushes pending. */
static void test_put_stream(const test_node_t *n, kvp_client_h c)
{
    test_session_t       ts;
    kvp_session_pages_t *sp = NULL;
    kvp_client_params_t  p;
    kvp_put_stream_h     st;
    const void         **pp;
    size_t              *ll, L;
    uint8_t             *bad;

    test_session_make(&ts, 3, 5, 11, 31); /* NS holds 3 layers */
    L  = ts.layers;
    pp = kvp_calloc(ts.n_pages, sizeof(*pp), "t");
    ll = kvp_calloc(ts.n_pages, sizeof(*ll), "t");
    for (size_t l = 0, k = 0; l < L; l++) { /* layer-major: layer l of every chunk */
        for (size_t ch = 0; ch < ts.n_chunks; ch++, k++) {
            pp[k] = ts.pages[ch * L + l];
            ll[k] = ts.lens[ch * L + l];
        }
    }
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    p.server     = n->addr;
    p.timeout_ms = 10000;
    CHECK_ST(kvp_put_stream_open(&p, NS, &st), KVP_OK);
    for (size_t l = 0; l + 1 < L; l++) {
        CHECK_ST(kvp_put_stream_push(st, pp + l * ts.n_chunks, ll + l * ts.n_chunks, ts.n_chunks),
                 KVP_OK);
    }
    CHECK_ST(kvp_put_stream_finish(st, "streamed", &ts.desc, pp + (L - 1) * ts.n_chunks,
                                   ll + (L - 1) * ts.n_chunks, ts.n_chunks, 0), KVP_OK);
    CHECK_ST(kvp_client_get_session(c, NS, "streamed", &sp), KVP_OK);
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    sp = NULL;

    /* a corrupt page in the second push */
    bad = kvp_malloc(ll[ts.n_chunks + 1], "t");
    memcpy(bad, pp[ts.n_chunks + 1], ll[ts.n_chunks + 1]);
    bad[100] ^= 0x01;
    pp[ts.n_chunks + 1] = bad;
    CHECK_ST(kvp_put_stream_push(st, pp, ll, ts.n_chunks), KVP_OK);
    CHECK_ST(kvp_put_stream_push(st, pp + ts.n_chunks, ll + ts.n_chunks, ts.n_chunks), KVP_OK);
    for (int i = 0; i < 200 && kvp_put_stream_push(st, NULL, NULL, 0) == KVP_OK; i++) {
        usleep(10000); /* until the shipper has met the bad page */
    }
    CHECK_ST(kvp_put_stream_push(st, pp, ll, ts.n_chunks), KVP_ERR_CORRUPT); /* refused */
    CHECK_ST(kvp_put_stream_finish(st, "streamed-bad", &ts.desc, NULL, NULL, 0, 0),
             KVP_ERR_CORRUPT);
    CHECK_ST(kvp_client_get_session(c, NS, "streamed-bad", &sp), KVP_ERR_NOT_FOUND);
    pp[ts.n_chunks + 1] = ts.pages[1 * L + 1];
    kvp_free(bad);
    /* the same stream, the next session: whole again */
    CHECK_ST(kvp_put_stream_push(st, pp, ll, ts.n_pages), KVP_OK);
    CHECK_ST(kvp_put_stream_finish(st, "streamed-2", &ts.desc, NULL, NULL, 0, 0), KVP_OK);
    CHECK_ST(kvp_client_get_session(c, NS, "streamed-2", &sp), KVP_OK);
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    /* closed with lists queued and no finish: nothing is left waiting, no record */
    for (size_t l = 0; l < L; l++) {
        CHECK_ST(kvp_put_stream_push(st, pp + l * ts.n_chunks, ll + l * ts.n_chunks, ts.n_chunks),
                 KVP_OK);
    }
    kvp_put_stream_close(st);
    kvp_put_stream_close(NULL);
    kvp_free(pp);
    kvp_free(ll);
    test_session_free(&ts);
}

/* A child client starts a large put and is SIGKILLed part-way. */
static void test_client_dies(const test_node_t *n)
{
    pid_t pid = fork();
    int   st;

    CHECK(pid >= 0);
    if (pid == 0) {
        test_session_t ts;
        kvp_client_h   c = test_client(n->addr, 20000);

        test_session_make(&ts, 4, 200, 0, 99);
        for (;;) {
            kvp_client_put_pages(c, NS + 1, (const void *const *)ts.pages, ts.lens, ts.n_pages);
        }
    }
    usleep(400000);
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, &st, 0) == pid);
}

/* A stopped node and requests whose sends cannot complete: a 4 MiB put on a connection that has
 * answered (rendezvous: the node never pulls the pages) and a STAT on a fresh connection (its
 * wireup waits for the node). Both end at the deadline with TIMEOUT, as for a sent request, not
 * with the CANCELED of the send that the deadline's force close cancels; and the put's send,
 * which that close does not end in UCX 1.13, completing later must not end the next call. */
static void test_stopped_sending(test_node_t *n, kvp_client_h quick)
{
    kvp_key128_t    key = {0x51, 0x0b};
    kvp_node_stat_t st;
    kvp_client_h    fresh = test_client(n->addr, 1000);
    uint8_t        *big;
    size_t          len;
    const void     *pp[1];

    big   = test_big_page(1024, key, 1, &len);
    pp[0] = big;
    CHECK(len > 4u << 20);
    CHECK(kill(n->pid, SIGSTOP) == 0);
    CHECK_ST(kvp_client_put_pages(quick, NS, pp, &len, 1), KVP_ERR_TIMEOUT);
    CHECK_ST(kvp_client_stat(fresh, &st), KVP_ERR_TIMEOUT);
    CHECK(kill(n->pid, SIGCONT) == 0);
    CHECK_ST(kvp_client_stat(quick, &st), KVP_OK); /* both reconnect */
    CHECK_ST(kvp_client_stat(fresh, &st), KVP_OK);
    kvp_client_destroy(fresh);
    kvp_free(big);
}

/* A client with the largest timeout (UINT32_MAX ms, as `--timeout-ms` allows; its wait's poll
 * slice once wrapped to 0 ms, a busy spin, or past 2^31 ms to a negative poll) is served; a put
 * whose data is still being sent when its node dies returns the failure, not after 49 days: in
 * error mode none (integ.node_err_none) UCX 1.13 never completes that send, and the call waited
 * for it until its deadline. Restarts n and leaves it killed. */
static void test_patient(test_node_t *n)
{
    kvp_key128_t    key = {0x9a, 0x71};
    kvp_node_stat_t st;
    kvp_client_h    patient;
    uint8_t        *big;
    size_t          len;
    const void     *pp[1];
    pid_t           killer;
    kvp_status_t    s;

    test_node_start(n, "--durability=spill");
    patient = test_client(n->addr, UINT32_MAX);
    CHECK_ST(kvp_client_stat(patient, &st), KVP_OK);
    big   = test_big_page(1024, key, 1, &len);
    pp[0] = big;
    CHECK(len > 4u << 20); /* rendezvous: its data waits for the stopped node to take it */
    CHECK(kill(n->pid, SIGSTOP) == 0);
    killer = fork();
    CHECK(killer >= 0);
    if (killer == 0) {
        usleep(300000);
        kill(n->pid, SIGKILL);
        _exit(0);
    }
    s = kvp_client_put_pages(patient, NS, pp, &len, 1);
    kvp_free(big); /* the call returned: its data is the caller's again */
    CHECK(s == KVP_ERR_PEER_GONE || s == KVP_ERR_PEER_UNREACHABLE);
    CHECK(waitpid(killer, NULL, 0) == killer);
    CHECK(test_node_stop(n, SIGKILL) == 128 + SIGKILL);
    s = kvp_client_stat(patient, &st); /* and a node already gone */
    CHECK(s == KVP_ERR_PEER_GONE || s == KVP_ERR_PEER_UNREACHABLE);
    kvp_client_destroy(patient);
}

int main(void)
{
    test_node_t          n;
    test_session_t       ts, other;
    kvp_session_pages_t *sp = NULL;
    kvp_node_stat_t      st;
    kvp_client_h         c;
    kvp_key128_t         keys[6];
    uint32_t             hits;
    uint8_t             *bad;
    double               t0;
    pid_t                killer;
    kvp_put_stream_h     dying;
    kvp_status_t         s;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    test_node_mkdir(&n);
    test_node_start(&n, "--durability=spill");
    c = test_client(n.addr, 10000);

    /* put + get: byte-identical, every page CRC-verified by the client */
    test_session_make(&ts, 3, 7, 5, 1);
    CHECK_ST(test_session_put(c, NS, "alpha", &ts), KVP_OK);
    CHECK_ST(kvp_client_get_session(c, NS, "alpha", &sp), KVP_OK);
    test_session_check(&ts, sp);
    CHECK(sp->wire_bytes > 0);
    kvp_session_pages_free(sp);
    sp = NULL;
    test_put_with_pages(&n, c, &ts);
    test_put_stream(&n, c);

    /* lookup: full prefix, then a prefix broken at chunk 3 */
    memcpy(keys, ts.desc.chunk_keys, 6 * sizeof(keys[0]));
    CHECK_ST(kvp_client_lookup(c, NS, keys, 6, 3, &hits), KVP_OK);
    CHECK(hits == 6);
    keys[3].lo ^= 1;
    CHECK_ST(kvp_client_lookup(c, NS, keys, 6, 3, &hits), KVP_OK);
    CHECK(hits == 3);
    CHECK_ST(kvp_client_lookup(c, NS + 7, ts.desc.chunk_keys, 6, 3, &hits), KVP_OK);
    CHECK(hits == 0); /* other namespace */

    /* unknown session */
    CHECK_ST(kvp_client_get_session(c, NS, "no-such-session", &sp), KVP_ERR_NOT_FOUND);
    CHECK(sp == NULL);
    /* a session naming pages that were never put */
    test_session_make(&other, 2, 3, 0, 2);
    CHECK_ST(kvp_client_put_session(c, NS, "dangling", &other.desc), KVP_ERR_NOT_FOUND);
    /* a page with a flipped payload byte: the node rejects it with CORRUPT */
    bad = kvp_malloc(other.lens[0], "t");
    memcpy(bad, other.pages[0], other.lens[0]);
    bad[other.lens[0] / 2] ^= 0x40;
    {
        const void *pp[2] = {other.pages[1], bad};
        size_t      ll[2] = {other.lens[1], other.lens[0]};
        CHECK_ST(kvp_client_put_pages(c, NS, pp, ll, 2), KVP_ERR_CORRUPT);
    }
    kvp_free(bad);

    /* malformed / truncated requests: PROTOCOL, and the node keeps serving */
    test_malformed(&n);
    CHECK_ST(kvp_client_get_session(c, NS, "alpha", &sp), KVP_OK);
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    sp = NULL;

    /* a client dies mid-put; the node keeps serving */
    test_client_dies(&n);
    CHECK_ST(kvp_client_stat(c, &st), KVP_OK);
    CHECK(st.sessions >= 1 && st.dram_pages >= ts.n_pages);

    /* a stopped node: the request ends at its deadline with TIMEOUT, not a hang */
    {
        kvp_client_h quick = test_client(n.addr, 1000);

        CHECK_ST(kvp_client_stat(quick, &st), KVP_OK);
        CHECK(kill(n.pid, SIGSTOP) == 0);
        t0 = kvp_time_s();
        s  = kvp_client_get_session(quick, NS, "alpha", &sp);
        fprintf(stderr, "stopped node: %s after %.2f s (deadline 1 s)\n", kvp_status_name(s),
                kvp_time_s() - t0);
        CHECK_ST(s, KVP_ERR_TIMEOUT);
        CHECK(kvp_time_s() - t0 < 30);
        CHECK(kill(n.pid, SIGCONT) == 0);
        /* the client reconnects on its next call */
        CHECK_ST(kvp_client_stat(quick, &st), KVP_OK);
        test_stopped_sending(&n, quick);
        kvp_client_destroy(quick);
    }

    /* the node dies while the client waits (deadline 20 s): PEER_GONE well before it; a put
     * stream (connected before) whose pages were pushed meanwhile reports it from finish */
    {
        kvp_client_params_t p = {.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS,
                                 .server = n.addr, .timeout_ms = 20000};

        CHECK_ST(kvp_put_stream_open(&p, NS, &dying), KVP_OK);
    }
    CHECK(kill(n.pid, SIGSTOP) == 0);
    killer = fork();
    CHECK(killer >= 0);
    if (killer == 0) {
        usleep(300000);
        kill(n.pid, SIGKILL);
        _exit(0);
    }
    {
        kvp_client_h slow = test_client(n.addr, 20000);

        t0 = kvp_time_s();
        s  = kvp_client_get_session(slow, NS, "alpha", &sp);
        fprintf(stderr, "killed node: %s after %.2f s (deadline 20 s)\n", kvp_status_name(s),
                kvp_time_s() - t0);
        CHECK(s == KVP_ERR_PEER_GONE || s == KVP_ERR_PEER_UNREACHABLE);
        CHECK(kvp_time_s() - t0 < 15);
        kvp_client_destroy(slow);
    }
    t0 = kvp_time_s();
    CHECK_ST(kvp_put_stream_push(dying, (const void *const *)ts.pages, ts.lens, ts.n_pages),
             KVP_OK); /* queued at once, whatever the node */
    s = kvp_put_stream_finish(dying, "never", &ts.desc, NULL, NULL, 0, 0);
    fprintf(stderr, "killed node, streamed put: %s after %.2f s\n", kvp_status_name(s),
            kvp_time_s() - t0);
    CHECK(s == KVP_ERR_PEER_GONE || s == KVP_ERR_PEER_UNREACHABLE);
    CHECK(kvp_time_s() - t0 < 15);
    kvp_put_stream_close(dying);
    CHECK(waitpid(killer, NULL, 0) == killer);
    CHECK(test_node_stop(&n, SIGKILL) == 128 + SIGKILL);
    /* and a call to a node that is not there at all */
    CHECK(kvp_client_stat(c, &st) != KVP_OK);
    test_patient(&n);

    kvp_client_destroy(c);
    test_session_free(&ts);
    test_session_free(&other);
    test_node_rmdir(&n);
    printf("test_node: ok\n");
    return 0;
}
