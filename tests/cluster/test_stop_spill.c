/* test_stop_spill.c - clients of a node that is stopping are told so at once. Under --durability
 * spill a SIGTERMed node first writes its DRAM-only sessions to disk (seconds per GB); the
 * spill is held on the disk here (gate_preload.so, KVP_TEST_WRITE_GATE: segment writes wait for
 * a file). Meanwhile a connected client's call and a new client's call must both end
 * KVP_ERR_SHUTTING_DOWN well before their 20 s deadline (a cluster client then goes to a replica),
 * and a cluster handle over this node and a live one must get the session from the live one; a
 * cluster put stream (2 copies over 3 nodes) that began before the stop finishes on the other two
 * without shipping the session to the stopping node again.
 * Before, the transport stood still for the spill and every such call waited for its deadline
 * (KVP_ERR_TIMEOUT). Once the gate opens the node exits 0, and restarted it serves the session
 * byte-identical. Last, a reply the node sent but its client had not taken yet when the node was
 * asked to stop (a 4 MiB GET_PAGES reply, rendezvous: it waits for the client to pull it) still
 * reaches that client: the stop waits for it a while (it was dropped by the close). */
#include "node_harness.h"

#include "kvpack/log.h"

#include <glob.h>

#define NS       0x7e57c4a5000000bbull
#define DEADLINE 20000u /* ms: the calls below must end well before it */

/* 1 once a thread of the node waits at the gate (its "<gate>.waiting.<tid>" mark) */
static int gate_reached(const char *gate)
{
    char   pat[512];
    glob_t g;
    int    hit;

    snprintf(pat, sizeof(pat), "%s.waiting.*", gate);
    hit = glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return hit;
}

/* st = the call's status; fails unless it is PEER_GONE well within the deadline */
static void expect_fast_gone(const char *what, kvp_status_t st, double t0)
{
    double took = kvp_time_s() - t0;

    fprintf(stderr, "%s during the stop-time spill: %s after %.2f s\n", what,
            kvp_status_name(st), took);
    EXPECT(st == KVP_ERR_SHUTTING_DOWN, "%s got %s, want ERR_SHUTTING_DOWN", what, kvp_status_name(st));
    EXPECT(took < DEADLINE / 2000.0, "%s took %.1f s: it waited for its deadline", what, took);
}

/* a cluster handle over peers (2 copies), calls under the DEADLINE */
static kvp_cluster_h cluster_open(const char *peers)
{
    kvp_client_params_t  cp;
    kvp_cluster_params_t p;
    kvp_cluster_h        cl = NULL;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask = KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.timeout_ms = DEADLINE;
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLUSTER_PARAM_PEERS | KVP_CLUSTER_PARAM_REPLICAS | KVP_CLUSTER_PARAM_CLIENT;
    p.peers      = peers;
    p.replicas   = 2;
    p.client     = &cp;
    CHECK_OK(kvp_cluster_create(&p, &cl));
    return cl;
}

/* a reply in flight at the stop: a raw client asks for 8 copies of a 512 KiB page and takes
 * nothing until the node was asked to stop */
static void reply_in_flight(void)
{
    test_node_t    n;
    test_raw_t     raw;
    kvp_wire_req_t req;
    kvp_key128_t   key = {0x51, 0x52}, keys[8];
    kvp_client_h   c;
    uint8_t       *page;
    const void    *pages[1];
    size_t         len;
    double         end;

    memset(&n, 0, sizeof(n));
    test_node_mkdir(&n);
    test_node_start(&n, NULL);
    page     = test_big_page(128, key, 1, &len);
    pages[0] = page;
    c        = test_client(n.addr, DEADLINE);
    CHECK_OK(kvp_client_put_pages(c, NS, pages, &len, 1));
    kvp_client_destroy(c);

    test_raw_open_up(&raw, n.port);
    for (int i = 0; i < 8; i++) {
        keys[i] = key;
    }
    test_get_req(&req, 2, NS, keys, 8, UINT32_MAX);
    raw.got = 0;
    test_raw_send(&raw, &req, NULL, 0, NULL); /* not progressed: the reply is not taken */
    usleep(300000);                           /* the node answered (not a check) */
    CHECK(kill(n.pid, SIGTERM) == 0);
    usleep(300000); /* the node is stopping meanwhile (it used to be gone by now) */
    end = kvp_time_s() + 20; /* a bound for a hang, not a timing check */
    while (!raw.got && kvp_time_s() < end && kvp_xfer_conn_status(raw.conn) == KVP_OK) {
        kvp_xfer_wait(raw.x, 50);
    }
    fprintf(stderr, "a 4 MiB reply not taken when the node was asked to stop: %s, %zu bytes\n",
            raw.got ? kvp_status_name(raw.rep.status) : kvp_status_name(kvp_xfer_conn_status(raw.conn)),
            raw.data);
    EXPECT(raw.got && raw.rep.status == KVP_OK && raw.rep.n_pages == 8 && raw.data == 8 * len,
           "the reply in flight at the stop did not arrive whole");
    test_raw_close(&raw);
    CHECK(test_node_stop(&n, 0) == 0);
    kvp_free(page);
    test_node_rmdir(&n);
}

int main(void)
{
    test_node_t          n, live, spare;
    test_session_t       ts;
    kvp_client_h         c, fresh;
    kvp_node_stat_t      st;
    kvp_session_pages_t *sp = NULL;
    kvp_cluster_h        cl;
    char                 gate[300], peers[160], peers3[240], sid[32], sid3[32];
    kvp_cluster_h        cl3;
    kvp_cluster_stream_h cs;
    uint32_t             order[2], order3[3];
    kvp_cluster_report_t rep;
    double               t0, end;
    kvp_status_t         s;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    memset(&n, 0, sizeof(n));
    memset(&live, 0, sizeof(live));
    memset(&spare, 0, sizeof(spare));
    test_node_mkdir(&n);
    test_node_mkdir(&live);
    test_node_mkdir(&spare);
    snprintf(gate, sizeof(gate), "%s/wgate", n.dir);
    CHECK(setenv("LD_PRELOAD", GATE_PRELOAD_PATH, 1) == 0);
    CHECK(setenv("KVP_TEST_WRITE_GATE", gate, 1) == 0);
    test_node_start(&n, "--durability=spill");
    CHECK(unsetenv("LD_PRELOAD") == 0); /* only that node is shimmed */
    CHECK(unsetenv("KVP_TEST_WRITE_GATE") == 0);
    test_node_start(&live, "--durability=spill");
    test_node_start(&spare, "--durability=spill");

    /* a session id whose rank over the two puts the node that will stop first, a copy on each */
    snprintf(peers, sizeof(peers), "%s,%s", n.addr, live.addr);
    cl = cluster_open(peers);
    for (int i = 0;; i++) {
        CHECK(i < 64);
        snprintf(sid, sizeof(sid), "keep%d", i);
        CHECK_OK(kvp_cluster_rank(cl, NS, sid, order));
        if (order[0] == 0) {
            break;
        }
    }
    test_session_make(&ts, 3, 4, 5, 22);
    c = test_client(n.addr, DEADLINE);
    CHECK_OK(test_session_put(c, NS, sid, &ts));
    fresh = test_client(live.addr, DEADLINE);
    CHECK_OK(test_session_put(fresh, NS, sid, &ts)); /* the replica */
    kvp_client_destroy(fresh);

    /* a cluster put stream ranked to the node first, all but its last pages shipped before the stop */
    snprintf(peers3, sizeof(peers3), "%s,%s,%s", n.addr, live.addr, spare.addr);
    cl3 = cluster_open(peers3);
    for (int i = 0;; i++) {
        CHECK(i < 256);
        snprintf(sid3, sizeof(sid3), "stream%d", i);
        CHECK_OK(kvp_cluster_rank(cl3, NS, sid3, order3));
        if (order3[0] == 0) {
            break;
        }
    }
    CHECK(ts.n_pages > 4);
    CHECK_OK(kvp_cluster_stream_open(cl3, NS, sid3, NULL, &cs));
    CHECK_OK(kvp_cluster_stream_push(cs, (const void *const *)ts.pages, ts.lens, ts.n_pages - 4));

    /* SIGTERM: the node's stop-time spill waits at the gate (the cluster handle has no connection
     * to the stopping node yet: its get connects during the spill) */
    CHECK(kill(n.pid, SIGTERM) == 0);
    end = kvp_time_s() + 30; /* a bound for a hang, not a timing check */
    while (!gate_reached(gate)) {
        CHECK(kvp_time_s() < end);
        usleep(20000);
    }

    t0 = kvp_time_s();
    s  = kvp_client_stat(c, &st);
    expect_fast_gone("a connected client's STAT", s, t0);
    t0    = kvp_time_s();
    fresh = test_client(n.addr, DEADLINE);
    s     = kvp_client_get_session(fresh, NS, sid, &sp);
    expect_fast_gone("a new client's GET_SESSION", s, t0);
    kvp_client_destroy(fresh);

    t0 = kvp_time_s();
    s  = kvp_cluster_get_session(cl, NS, sid, NULL, &sp, &rep);
    fprintf(stderr, "cluster get over the stopping node and a live one: %s after %.2f s, "
            "served by node %u, node 0 answered %s\n", kvp_status_name(s), kvp_time_s() - t0,
            rep.served_by, rep.n_tried > 0 ? kvp_status_name(rep.tried[0].status) : "-");
    EXPECT(s == KVP_OK && rep.served_by == 1, "cluster get got %s", kvp_status_name(s));
    EXPECT(rep.n_tried >= 1 && rep.tried[0].node == 0 &&
           rep.tried[0].status == KVP_ERR_SHUTTING_DOWN, "the stopping node was not asked first");
    EXPECT(kvp_time_s() - t0 < DEADLINE / 2000.0, "the cluster get waited for a deadline");
    if (s == KVP_OK) {
        test_session_check(&ts, sp);
        kvp_session_pages_free(sp);
        sp = NULL;
    }
    kvp_cluster_destroy(cl);
    kvp_client_destroy(c);

    /* the stream's record: refused by the stopping node, not shipped to it again, two copies */
    s = kvp_cluster_stream_finish(cs, &ts.desc, (const void *const *)(ts.pages + ts.n_pages - 4),
                                  ts.lens + ts.n_pages - 4, 4, &rep, NULL);
    fprintf(stderr, "cluster stream finished during the stop: %s, %u copies\n",
            kvp_status_name(s), rep.n_ok);
    EXPECT(s == KVP_OK && rep.n_ok == 2, "cluster stream: %s with %u copies", kvp_status_name(s),
           rep.n_ok);
    for (uint32_t k = 0; k < rep.n_tried; k++) {
        fprintf(stderr, "  node %u: %s (%s)\n", rep.tried[k].node,
                kvp_status_name(rep.tried[k].status), rep.tried[k].stage);
        EXPECT(rep.tried[k].node != 0 || (rep.tried[k].status == KVP_ERR_SHUTTING_DOWN &&
                                          strcmp(rep.tried[k].stage, "stream") == 0),
               "the stopping node was tried as %s (%s)", kvp_status_name(rep.tried[k].status),
               rep.tried[k].stage);
    }
    kvp_cluster_stream_close(cs);
    kvp_cluster_destroy(cl3);

    /* the gate opens: the spill ends, the node exits cleanly and kept the session */
    close(open(gate, O_CREAT | O_WRONLY, 0600));
    CHECK(test_node_stop(&n, 0) == 0); /* signal 0: already asked to stop, just wait */
    test_node_start(&n, "--durability=spill");
    c = test_client(n.addr, DEADLINE);
    CHECK_OK(kvp_client_get_session(c, NS, sid, &sp));
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    CHECK(test_node_stop(&live, SIGTERM) == 0);
    CHECK(test_node_stop(&spare, SIGTERM) == 0);
    test_session_free(&ts);
    test_node_rmdir(&n);
    test_node_rmdir(&live);
    test_node_rmdir(&spare);
    reply_in_flight();
    return kvp_test_result("test_stop_spill");
}
