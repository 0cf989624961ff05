/* test_restart.c - warm restart through real processes: a session put to a kvpackd and spilled
 * to its RocksDB directory survives a SIGTERM shutdown and is served byte-identical by a new
 * kvpackd on the same --data-dir; one never spilled survives a SIGHUP (a closed terminal: the
 * same clean shutdown, which spills; it used to kill the node, losing what was only in DRAM);
 * under --durability write-through a session survives even a SIGKILL of the node without any
 * spill request. */
#include "../cluster/node_harness.h"

#include "kvpack/log.h"

#define NS 0xC0FFEE00C0FFEE00ull

static void run(const char *durability, int sig, int spill)
{
    test_node_t          n;
    test_session_t       ts;
    kvp_session_pages_t *sp = NULL;
    kvp_node_stat_t      st;
    kvp_client_h         c;
    uint32_t             hits;
    int                  rc;

    test_node_mkdir(&n);
    test_node_start(&n, durability);
    c = test_client(n.addr, 10000);
    test_session_make(&ts, 4, 6, 9, 3);
    CHECK_ST(test_session_put(c, NS, "resume-me", &ts), KVP_OK);
    if (spill) {
        CHECK_ST(kvp_client_spill(c, NS, "resume-me"), KVP_OK);
        CHECK_ST(kvp_client_stat(c, &st), KVP_OK);
        CHECK(st.spills >= 1 && st.sessions_on_disk >= 1);
    }
    CHECK_ST(kvp_client_spill(c, NS, "never-put"), KVP_ERR_NOT_FOUND);
    kvp_client_destroy(c);
    rc = test_node_stop(&n, sig);
    CHECK(rc == (sig == SIGTERM || sig == SIGHUP ? 0 : 128 + sig)); /* a clean shutdown */

    test_node_start(&n, durability);
    c = test_client(n.addr, 10000);
    CHECK_ST(kvp_client_lookup(c, NS, ts.desc.chunk_keys, ts.n_chunks, ts.layers, &hits), KVP_OK);
    CHECK(hits == ts.n_chunks);
    CHECK_ST(kvp_client_get_session(c, NS, "resume-me", &sp), KVP_OK);
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    CHECK_ST(kvp_client_get_session(c, NS, "never-put", &sp), KVP_ERR_NOT_FOUND);
    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_session_free(&ts);
    test_node_rmdir(&n);
    fprintf(stderr, "restart %s after signal %d%s: resumed byte-identical\n", durability, sig,
            spill ? " (spilled)" : "");
}

int main(void)
{
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    run("--durability=spill", SIGTERM, 1);
    run("--durability=spill", SIGHUP, 0);
    run("--durability=write-through", SIGKILL, 0);
    printf("test_restart: ok\n");
    return 0;
}
