/* test_cluster.c - the multi-node layer (client/cluster.c, kvpack/cluster.h) against two real
 * kvpackd children and the address of a killed third: peer-list validation (spaces around items
 * dropped, ports digits only); put goes to the first r live nodes of the rank (the dead one
 * skipped), get is served by the first live one and byte-identical; unknown session: NOT_FOUND
 * when every node answered, an unreachable status when one did not; list merges (each session
 * once, its holders); delete everywhere, and a dead first-r replica makes it say so; a bad record
 * stops a put at once; a node out of memory first in the rank does not (the next one takes it). */
#include "node_harness.h"

#include "kvpack/cluster.h"
#include "kvpack/log.h"

#define NS 0x1234ull

static void test_validation(const char *a)
{
    char          many[64 * 24 + 32], dup[160];
    size_t        len = 0;
    kvp_cluster_h cl;

    test_cluster_open("", 1, KVP_ERR_INVALID);
    test_cluster_open("nohostport", 1, KVP_ERR_INVALID);
    snprintf(dup, sizeof(dup), "%s,,%s", a, a);
    test_cluster_open(dup, 1, KVP_ERR_INVALID);
    snprintf(dup, sizeof(dup), "%s,%s", a, a);
    test_cluster_open(dup, 1, KVP_ERR_INVALID); /* listed twice */
    snprintf(dup, sizeof(dup), "%s,127.0.0.1:1", a);
    test_cluster_open(dup, 3, KVP_ERR_INVALID); /* 3 replicas of 2 nodes */
    for (int i = 0; i < 65; i++) {
        len += (size_t)snprintf(many + len, sizeof(many) - len, "%s10.0.0.1:%d", i ? "," : "",
                                1000 + i);
    }
    test_cluster_open(many, 1, KVP_ERR_INVALID);
    cl = test_cluster_open(dup, 2, KVP_OK);
    CHECK(kvp_cluster_size(cl) == 2 && kvp_cluster_replicas(cl) == 2);
    CHECK(strcmp(kvp_cluster_peer(cl, 1), "127.0.0.1:1") == 0 && kvp_cluster_peer(cl, 2) == NULL);
    kvp_cluster_destroy(cl);
    /* spaces around items are dropped ("a, b" as typed), so the peers and their rank are those
     * of "a,b"; a port is digits only (strtoul took "+1") */
    snprintf(dup, sizeof(dup), " %s ,\t127.0.0.1:1 ", a);
    cl = test_cluster_open(dup, 2, KVP_OK);
    CHECK(strcmp(kvp_cluster_peer(cl, 0), a) == 0 &&
          strcmp(kvp_cluster_peer(cl, 1), "127.0.0.1:1") == 0);
    kvp_cluster_destroy(cl);
    test_cluster_open("127.0.0.1:+1", 1, KVP_ERR_INVALID);
    test_cluster_open("127.0.0.1: 1", 1, KVP_ERR_INVALID);
    kvp_cluster_destroy(NULL);
}

/* Does node addr itself hold (NS, sid)? */
static int node_has(const char *addr, const char *sid)
{
    kvp_client_h         c = test_client(addr, 3000);
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         s = kvp_client_get_session(c, NS, sid, &sp);

    CHECK(s == KVP_OK || s == KVP_ERR_NOT_FOUND);
    kvp_session_pages_free(sp);
    kvp_client_destroy(c);
    return s == KVP_OK;
}

int main(void)
{
    test_node_t          n[3], oom;
    char                 peers[256], live[160], sid[16];
    kvp_cluster_report_t rep;
    kvp_cluster_list_t  *l;
    kvp_session_pages_t *sp = NULL;
    kvp_cluster_h        cl;
    test_session_t       ts;
    uint32_t             order[3], want[2], k = 0;
    kvp_status_t         s;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    for (int i = 0; i < 3; i++) {
        test_node_mkdir(&n[i]);
        test_node_start(&n[i], "--durability=spill");
    }
    CHECK(test_node_stop(&n[2], SIGKILL) == 128 + SIGKILL); /* its port: nobody listens */
    snprintf(peers, sizeof(peers), "%s,%s,%s", n[0].addr, n[1].addr, n[2].addr);
    snprintf(live, sizeof(live), "%s,%s", n[0].addr, n[1].addr);
    test_validation(n[0].addr);
    test_session_make(&ts, 2, 3, 5, 7);

    /* put r = 2 over A, B, dead: the two live nodes, in rank order */
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_OK(kvp_cluster_rank(cl, NS, "s", order));
    for (int i = 0; i < 3; i++) {
        if (order[i] != 2 && k < 2) {
            want[k++] = order[i];
        }
    }
    CHECK_OK(kvp_cluster_put_session(cl, NS, "s", (const void *const *)ts.pages, ts.lens,
                                     ts.n_pages, &ts.desc, &rep));
    CHECK(rep.n_ok == 2);
    CHECK(node_has(n[0].addr, "s") && node_has(n[1].addr, "s"));
    for (uint32_t i = 0, ok = 0; i < rep.n_tried; i++) {
        if (rep.tried[i].status == KVP_OK) {
            CHECK(rep.tried[i].node == want[ok++]);
        } else {
            CHECK(rep.tried[i].node == 2 && kvp_cluster_status_unreachable(rep.tried[i].status));
        }
    }
    /* get: the first live node in rank order, byte-identical */
    CHECK_OK(kvp_cluster_get_session(cl, NS, "s", NULL, &sp, &rep));
    CHECK(rep.served_by == want[0]);
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    /* unknown session: a node did not answer, so not a plain NOT_FOUND */
    s = kvp_cluster_get_session(cl, NS, "nope", NULL, &sp, &rep);
    CHECK(kvp_cluster_status_unreachable(s) && rep.n_tried == 3 && rep.n_ok == 0);
    /* a record that is not whole chunks of its layers: stopped before any node */
    ts.desc.layers = 4;
    CHECK_ST(kvp_cluster_put_session(cl, NS, "bad", (const void *const *)ts.pages, ts.lens,
                                     ts.n_pages, &ts.desc, &rep), KVP_ERR_INVALID);
    CHECK(rep.n_tried == 0);
    ts.desc.layers = 2;
    kvp_cluster_destroy(cl);

    /* r = 1 over the live nodes: one copy on the rank's first; list merges */
    cl = test_cluster_open(live, 1, KVP_OK);
    CHECK_OK(kvp_cluster_put_session(cl, NS, "t", (const void *const *)ts.pages, ts.lens,
                                     ts.n_pages, &ts.desc, &rep));
    CHECK_OK(kvp_cluster_rank(cl, NS, "t", order));
    CHECK(rep.n_ok == 1 && node_has(n[order[0]].addr, "t") && !node_has(n[order[1]].addr, "t"));
    CHECK_ST(kvp_cluster_get_session(cl, NS, "nope", NULL, &sp, &rep), KVP_ERR_NOT_FOUND);
    CHECK_OK(kvp_cluster_list_sessions(cl, 0, 0, &l, &rep));
    CHECK(l->n == 2 && rep.n_ok == 2 && strcmp(l->sessions[0].sid, "s") == 0 &&
          l->holders[0] == 3 && strcmp(l->sessions[1].sid, "t") == 0 &&
          l->holders[1] == 1ull << order[0] && l->sessions[1].n_chunks == 3);
    kvp_cluster_list_free(l);
    CHECK_OK(kvp_cluster_list_sessions(cl, 0, 1, &l, &rep));
    CHECK(l->n == 1 && l->truncated);
    kvp_cluster_list_free(l);
    kvp_cluster_destroy(cl);

    /* list and delete with the dead node in the list */
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_OK(kvp_cluster_list_sessions(cl, 0, 0, &l, &rep));
    CHECK(l->n == 2 && rep.n_ok == 2 && rep.n_tried == 3);
    kvp_cluster_list_free(l);
    CHECK_OK(kvp_cluster_rank(cl, NS, "s", order));
    s = kvp_cluster_delete_session(cl, NS, "s", &rep);
    CHECK(rep.n_ok == 2);
    CHECK(order[2] == 2 ? s == KVP_OK : kvp_cluster_status_unreachable(s)); /* dead in first 2? */
    CHECK(!node_has(n[0].addr, "s") && !node_has(n[1].addr, "s"));
    kvp_cluster_destroy(cl);
    cl = test_cluster_open(live, 2, KVP_OK);
    CHECK_ST(kvp_cluster_delete_session(cl, NS, "s", &rep), KVP_ERR_NOT_FOUND);
    kvp_cluster_destroy(cl);

    /* r = 1, a node that answers ERR_NO_MEMORY (its store full), then one that answers
     * ERR_TOO_LARGE (a message over its own --max-msg), first in the rank: that node failed, the
     * next takes the session (it stopped there, as if every node would refuse it) */
    for (int t = 0; t < 2; t++) {
        kvp_status_t want_st = t == 0 ? KVP_ERR_NO_MEMORY : KVP_ERR_TOO_LARGE;

        test_stub_start(&oom, want_st);
        snprintf(live, sizeof(live), "%s,%s", oom.addr, n[0].addr);
        cl = test_cluster_open(live, 1, KVP_OK);
        k = 0;
        do { /* a session the stub ranks first for */
            CHECK(k < 64);
            snprintf(sid, sizeof(sid), "oom%d.%u", t, k++);
            CHECK_OK(kvp_cluster_rank(cl, NS, sid, order));
        } while (order[0] != 0);
        CHECK_OK(kvp_cluster_put_session(cl, NS, sid, (const void *const *)ts.pages, ts.lens,
                                         ts.n_pages, &ts.desc, &rep));
        CHECK(rep.n_ok == 1 && rep.n_tried == 2 && rep.tried[0].node == 0 &&
              rep.tried[0].status == want_st && rep.tried[1].node == 1 &&
              rep.tried[1].status == KVP_OK);
        CHECK(node_has(n[0].addr, sid));
        kvp_cluster_destroy(cl);
        CHECK(test_node_stop(&oom, SIGKILL) == 128 + SIGKILL);
    }

    test_session_free(&ts);
    for (int i = 0; i < 3; i++) {
        if (i < 2) {
            CHECK(test_node_stop(&n[i], SIGTERM) == 0);
        }
        test_node_rmdir(&n[i]);
    }
    printf("test_cluster: all checks passed\n");
    return 0;
}
