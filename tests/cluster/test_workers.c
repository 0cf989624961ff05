/* test_workers.c - kvpackd's request workers end to end: while one client's get waits on the disk
 * (a cold session's restore, held at the segment read by gate_preload.so until the test opens the
 * gate), another client's gets and puts are answered; the held get then returns its session
 * byte-identical. With --workers=1 the same second client's get cannot be answered until the gate
 * opens (its deadline passes), which shows the first half would fail on a node that serializes.
 * No timing is asserted: the held restore cannot finish before the test opens the gate. */
#include "node_harness.h"

#include <pthread.h>

#define NS 5u

typedef struct {
    const char          *addr;
    const test_session_t *ts;
    kvp_status_t         status;
    int                  done;
} cold_get_t;

static void *cold_get_main(void *arg)
{
    cold_get_t          *g = arg;
    kvp_client_h         c = test_client(g->addr, 60000);
    kvp_session_pages_t *sp = NULL;

    g->status = kvp_client_get_session(c, NS, "cold", &sp);
    if (g->status == KVP_OK) {
        test_session_check(g->ts, sp);
    }
    kvp_session_pages_free(sp);
    kvp_client_destroy(c);
    __atomic_store_n(&g->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Wait (up to 60 s) until a path exists; the held restore creates it. */
static void wait_for(const char *path)
{
    double end = kvp_time_s() + 60;

    while (access(path, F_OK) != 0) {
        CHECK(kvp_time_s() < end);
        usleep(10000);
    }
}

static void touch(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY, 0600);

    CHECK(fd >= 0);
    close(fd);
}

/* One node with --workers=<workers>: the cold get is held at the gate, then the hot client acts. */
static void run(unsigned workers)
{
    test_node_t         n;
    test_session_t      cold, hot, more;
    char                gate[300], waiting[320], arg[32];
    kvp_client_h        c;
    kvp_session_pages_t *sp = NULL;
    cold_get_t          g;
    kvp_node_stat_t     st;
    pthread_t           tid;

    memset(&n, 0, sizeof(n));
    test_node_mkdir(&n);
    snprintf(gate, sizeof(gate), "%s/gate", n.dir);
    snprintf(waiting, sizeof(waiting), "%s/gate.waiting", n.dir);
    snprintf(arg, sizeof(arg), "--workers=%u", workers);
    CHECK(setenv("LD_PRELOAD", GATE_PRELOAD_PATH, 1) == 0);
    CHECK(setenv("KVP_TEST_GATE", gate, 1) == 0);
    test_node_start(&n, arg);
    CHECK(unsetenv("LD_PRELOAD") == 0); /* only the node is shimmed */

    test_session_make(&cold, 3, 4, 0, 11);
    test_session_make(&hot, 3, 4, 5, 12);
    test_session_make(&more, 3, 2, 0, 13);
    c = test_client(n.addr, 60000);
    CHECK_ST(test_session_put(c, NS, "cold", &cold), KVP_OK);
    CHECK_ST(kvp_client_spill(c, NS, "cold"), KVP_OK); /* its pages now live only on disk */
    CHECK_ST(test_session_put(c, NS, "hot", &hot), KVP_OK);
    kvp_client_destroy(c);
    CHECK(access(waiting, F_OK) != 0); /* nothing has read a segment yet */

    memset(&g, 0, sizeof(g));
    g.addr = n.addr;
    g.ts   = &cold;
    CHECK(pthread_create(&tid, NULL, cold_get_main, &g) == 0);
    wait_for(waiting); /* the cold get is inside the node's restore, held */

    if (workers > 1) {
        c = test_client(n.addr, 60000);
        CHECK_ST(kvp_client_get_session(c, NS, "hot", &sp), KVP_OK);
        test_session_check(&hot, sp);
        kvp_session_pages_free(sp);
        CHECK_ST(test_session_put(c, NS, "more", &more), KVP_OK);
        CHECK_ST(kvp_client_get_session(c, NS, "more", &sp), KVP_OK);
        test_session_check(&more, sp);
        kvp_session_pages_free(sp);
        CHECK(!__atomic_load_n(&g.done, __ATOMIC_ACQUIRE)); /* still held: served meanwhile */
        printf("workers=%u: hot get, put and get answered while a restore was held\n",
               workers);
    } else {
        c = test_client(n.addr, 1500);
        CHECK_ST(kvp_client_get_session(c, NS, "hot", &sp), KVP_ERR_TIMEOUT);
        CHECK(!__atomic_load_n(&g.done, __ATOMIC_ACQUIRE));
        printf("workers=1: the hot get waited behind the held restore (deadline passed)\n");
    }
    touch(gate);
    CHECK(pthread_join(tid, NULL) == 0);
    CHECK_ST(g.status, KVP_OK); /* and byte-identical (checked in the thread) */
    CHECK_ST(kvp_client_get_session(c, NS, "hot", &sp), KVP_OK); /* after the stale reply */
    test_session_check(&hot, sp);
    kvp_session_pages_free(sp);
    CHECK_ST(kvp_client_stat(c, &st), KVP_OK);
    CHECK(st.restores == 1 && st.spills == 1);
    kvp_client_destroy(c);

    CHECK(unsetenv("KVP_TEST_GATE") == 0);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_session_free(&cold);
    test_session_free(&hot);
    test_session_free(&more);
    test_node_rmdir(&n);
}

int main(void)
{
    run(4);
    run(1);
    printf("ok\n");
    return 0;
}
