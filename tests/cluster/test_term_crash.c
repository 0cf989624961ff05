/* test_term_crash.c - a kvpackd that crashes inside its transport teardown on SIGTERM has made its
 * store durable first: a session put under --durability spill (only in DRAM until evicted or the
 * store closes) is on disk before the crash. The crash is listener_crash_preload.so, an LD_PRELOAD
 * shim that raises SIGSEGV in ucp_listener_destroy, where UCX 1.13's listener race
 * (openucx/ucx#11087) crashed nodes that clients connected to while they shut down. The node is
 * restarted on its data dir without the shim: the session is listed and read back byte-identical. */
#include "node_harness.h"

#include "kvpack/log.h"

#define NS 0x7e57c4a5000000aaull

int main(void)
{
    test_node_t          n;
    test_session_t       ts;
    kvp_client_h         c;
    kvp_session_list_t  *l = NULL;
    kvp_session_pages_t *sp = NULL;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    memset(&n, 0, sizeof(n));
    test_node_mkdir(&n);
    CHECK(setenv("LD_PRELOAD", LISTENER_CRASH_PRELOAD_PATH, 1) == 0);
    CHECK(setenv("KVP_TEST_LISTENER_CRASH", "1", 1) == 0);
    test_node_start(&n, "--durability=spill");
    CHECK(unsetenv("LD_PRELOAD") == 0); /* only that node is shimmed */
    CHECK(unsetenv("KVP_TEST_LISTENER_CRASH") == 0);

    test_session_make(&ts, 3, 4, 5, 21);
    c = test_client(n.addr, 10000);
    CHECK_OK(test_session_put(c, NS, "keep", &ts));
    CHECK_OK(kvp_client_list_sessions(c, 0, 0, &l));
    CHECK(l->n == 1 && l->sessions[0].where == KVP_SESSION_IN_DRAM); /* not on disk yet */
    kvp_session_list_free(l);
    l = NULL;
    kvp_client_destroy(c);

    /* SIGTERM: the shim crashes the node in its transport teardown */
    CHECK(test_node_stop(&n, SIGTERM) == 128 + SIGSEGV);

    test_node_start(&n, "--durability=spill");
    c = test_client(n.addr, 10000);
    CHECK_OK(kvp_client_list_sessions(c, 0, 0, &l));
    fprintf(stderr, "after the crash: %u sessions listed\n", l->n);
    CHECK(l->n == 1 && l->sessions[0].ns == NS && strcmp(l->sessions[0].sid, "keep") == 0);
    CHECK(l->sessions[0].where & KVP_SESSION_ON_DISK);
    kvp_session_list_free(l);
    CHECK_OK(kvp_client_get_session(c, NS, "keep", &sp));
    test_session_check(&ts, sp);
    kvp_session_pages_free(sp);
    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_session_free(&ts);
    test_node_rmdir(&n);
    return 0;
}
