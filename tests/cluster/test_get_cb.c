/* test_get_cb.c - a get's page callback (kvp_client_get_session_cb) against a real kvpackd.
 * slow: a callback that takes 0.4 s a run under a 1 s client deadline, four GET_PAGES of one page
 *   in flight (the fourth reply waits through three callbacks): the caller's time is not charged
 *   to the node, the get returns every page byte-identical (it used to fail ERR_TIMEOUT and reset
 *   the connection, the node having answered in microseconds).
 * nested: a callback that calls the client itself (a STAT while the get holds all eight call
 *   slots) hears ERR_BUSY or an answer, and the get still returns every page (the nested call used
 *   to release a stale call pointer: a crash).
 * tiny: batch_bytes 3 over 4 requests in flight, under a byte each: the get still returns every
 *   page, one per GET_PAGES (it used to ask for 0 bytes, refused as a malformed request). */
#include "node_harness.h"

#include "kvpack/log.h"

#include <time.h>

#define NS 0x6E7C6Bu

typedef struct {
    kvp_client_h c;
    int          mode; /* 0 slow, 1 nested */
    uint32_t     runs, pages;
    int          busy, ok;
} cb_state_t;

static void on_pages(void *arg, uint32_t first, uint32_t n, const void *const *pages,
                     const size_t *lens)
{
    cb_state_t *st = arg;

    (void)first, (void)pages, (void)lens;
    st->runs++;
    st->pages += n;
    if (st->mode == 0) {
        nanosleep(&(struct timespec){0, 400000000L}, NULL);
    } else {
        kvp_node_stat_t stat;
        kvp_status_t    s = kvp_client_stat(st->c, &stat);

        st->busy += s == KVP_ERR_BUSY;
        st->ok += s == KVP_OK;
    }
}

static kvp_client_h client(const char *addr, uint32_t timeout_ms, size_t batch,
                           uint32_t inflight)
{
    kvp_client_params_t p;
    kvp_client_h        c;

    memset(&p, 0, sizeof(p));
    p.field_mask   = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS |
                     KVP_CLIENT_PARAM_BATCH | KVP_CLIENT_PARAM_INFLIGHT;
    p.server       = addr;
    p.timeout_ms   = timeout_ms;
    p.batch_bytes  = batch;
    p.max_inflight = inflight;
    CHECK_OK(kvp_client_create(&p, &c));
    return c;
}

int main(void)
{
    test_node_t          node;
    test_session_t       ts;
    kvp_session_pages_t *sp = NULL;
    kvp_client_h         c;
    cb_state_t           st;
    kvp_status_t         s;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    test_node_mkdir(&node);
    test_node_start(&node, "--durability=spill");
    test_session_make(&ts, 1, 10, 0, 7); /* 10 pages, no tail */
    c = test_client(node.addr, 5000);
    CHECK_OK(test_session_put(c, NS, "cb", &ts));
    kvp_client_destroy(c);

    c = client(node.addr, 1000, ts.lens[0] * 4, 4); /* one page per GET_PAGES */
    memset(&st, 0, sizeof(st));
    st.c = c;
    s    = kvp_client_get_session_cb(c, NS, "cb", NULL, on_pages, &st, &sp);
    printf("slow callback: %s, %u runs, %u pages\n", kvp_status_name(s), st.runs, st.pages);
    EXPECT(s == KVP_OK && st.pages == ts.n_pages, "get with a slow callback: %s",
           kvp_status_name(s));
    if (s == KVP_OK) {
        test_session_check(&ts, sp);
    }
    kvp_session_pages_free(sp);
    sp = NULL;
    kvp_client_destroy(c);

    c = client(node.addr, 5000, ts.lens[0] * 8, 8);
    memset(&st, 0, sizeof(st));
    st.c    = c;
    st.mode = 1;
    s       = kvp_client_get_session_cb(c, NS, "cb", NULL, on_pages, &st, &sp);
    printf("nested calls: %s, %u runs, %d busy, %d answered\n", kvp_status_name(s), st.runs,
           st.busy, st.ok);
    EXPECT(s == KVP_OK && st.pages == ts.n_pages && st.busy + st.ok == (int)st.runs,
           "get with calls from its callback: %s", kvp_status_name(s));
    if (s == KVP_OK) {
        test_session_check(&ts, sp);
    }
    kvp_session_pages_free(sp);
    sp = NULL;
    kvp_client_destroy(c);

    c = client(node.addr, 5000, 3, 4); /* under a byte per request: one page each */
    s = kvp_client_get_session(c, NS, "cb", &sp);
    EXPECT(s == KVP_OK, "get with batch_bytes 3 over 4 requests: %s", kvp_status_name(s));
    if (s == KVP_OK) {
        test_session_check(&ts, sp);
    }
    kvp_session_pages_free(sp);
    kvp_client_destroy(c);

    test_session_free(&ts);
    EXPECT(test_node_stop(&node, SIGTERM) == 0, "node exit");
    test_node_rmdir(&node);
    return kvp_test_result("test_get_cb");
}
