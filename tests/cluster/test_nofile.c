/* test_nofile.c - kvpackd and file descriptors. (1) It raises its soft open files limit
 * (RLIMIT_NOFILE) to the hard one at start: each client connection costs about 2 descriptors and
 * the store's files share the budget, so a soft limit below the hard one would refuse clients the
 * hard limit allows. The node is started under a soft limit of 256 (inherited from this test) and
 * its /proc/PID/limits read; skipped (77) where the hard limit leaves no room below it. (2) Its
 * connection cap (--max-conns): with 2, a third client's call fails ERR_PEER_UNREACHABLE at once
 * (rejected, not hanging to its deadline) while the two are served, and once one of them leaves
 * a new client is served; the default cap follows the limit (192 for 1024). Without a cap every
 * connection was accepted until the descriptors ran out, and UCX then logged every failed
 * accept() in a tight loop (32 GB in 7 minutes in a soak). */
#include "node_harness.h"
#include "kvpack/node.h"

#include <sys/resource.h>

/* The soft and hard "Max open files" of process pid, from /proc/PID/limits. */
static void proc_nofile(pid_t pid, unsigned long long *soft_p, unsigned long long *hard_p)
{
    char  path[64], line[256];
    int   found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    f = fopen(path, "r");
    CHECK(f != NULL);
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        found = sscanf(line, "Max open files %llu %llu", soft_p, hard_p) == 2;
    }
    fclose(f);
    CHECK(found);
}

/* (2): the cap of a node started with --max-conns 2 */
static void conn_cap(void)
{
    test_node_t     n;
    kvp_client_h    c[4];
    kvp_node_stat_t st;
    kvp_status_t    s = KVP_OK;
    double          t0, end;

    memset(&n, 0, sizeof(n));
    test_node_mkdir(&n);
    test_node_start_args(&n, 0, "--max-conns", "2");
    for (int i = 0; i < 3; i++) {
        c[i] = test_client(n.addr, 20000);
    }
    CHECK_OK(kvp_client_stat(c[0], &st));
    CHECK_OK(kvp_client_stat(c[1], &st));
    t0 = kvp_time_s();
    s  = kvp_client_stat(c[2], &st);
    fprintf(stderr, "third client past --max-conns 2: %s after %.2f s\n", kvp_status_name(s),
            kvp_time_s() - t0);
    EXPECT(s == KVP_ERR_PEER_UNREACHABLE, "third client got %s, want ERR_PEER_UNREACHABLE",
           kvp_status_name(s));
    EXPECT(kvp_time_s() - t0 < 15, "the refusal took %.1f s: it waited for the deadline",
           kvp_time_s() - t0); /* a bound for a hang (20 s deadline), not a timing check */
    CHECK_OK(kvp_client_stat(c[0], &st)); /* the two in are still served */
    CHECK_OK(kvp_client_stat(c[1], &st));
    fprintf(stderr, "STAT: %llu connections of at most %llu, %llu refused\n",
            (unsigned long long)st.connections, (unsigned long long)st.connections_max,
            (unsigned long long)st.connections_rejected);
    EXPECT(st.connections == 2 && st.connections_max == 2 && st.connections_rejected == 1,
           "STAT says %llu connections of %llu, %llu refused; want 2 of 2, 1",
           (unsigned long long)st.connections, (unsigned long long)st.connections_max,
           (unsigned long long)st.connections_rejected);
    kvp_client_destroy(c[2]);

    /* one leaves: a new client gets in once the node saw it go */
    kvp_client_destroy(c[0]);
    end = kvp_time_s() + 20; /* a bound for a hang, not a timing check */
    do {
        c[3] = test_client(n.addr, 20000);
        s    = kvp_client_stat(c[3], &st);
        if (s != KVP_OK) {
            kvp_client_destroy(c[3]);
            usleep(100000);
        }
    } while (s != KVP_OK && kvp_time_s() < end);
    EXPECT(s == KVP_OK, "a client under the cap again got %s", kvp_status_name(s));
    if (s == KVP_OK) {
        kvp_client_destroy(c[3]);
    }
    kvp_client_destroy(c[1]);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_node_rmdir(&n);
}

/* (2): the default cap under a few limits, as documented in node.h and --help */
static void default_cap(const struct rlimit *mine)
{
    static const struct { rlim_t lim; uint32_t cap; } want[] = {
        {1024, 192}, {4096, 1344}, {65536, 24384}, {300, 16}};

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct rlimit r = {want[i].lim, mine->rlim_max};

        if (want[i].lim > mine->rlim_max) {
            continue;
        }
        CHECK(setrlimit(RLIMIT_NOFILE, &r) == 0);
        EXPECT(kvp_node_max_conns_default() == want[i].cap,
               "default --max-conns under a limit of %llu: %u, want %u",
               (unsigned long long)want[i].lim, kvp_node_max_conns_default(), want[i].cap);
    }
    CHECK(setrlimit(RLIMIT_NOFILE, mine) == 0);
}

int main(void)
{
    test_node_t        n;
    struct rlimit      mine, low;
    unsigned long long soft, hard;
    kvp_client_h       c;
    kvp_node_stat_t    st;

    CHECK(getrlimit(RLIMIT_NOFILE, &mine) == 0);
    conn_cap();
    default_cap(&mine);
    if (mine.rlim_max <= 256) {
        fprintf(stderr, "hard open files limit %llu: no room for a lower soft one, skipped\n",
                (unsigned long long)mine.rlim_max);
        return 77;
    }
    memset(&n, 0, sizeof(n));
    test_node_mkdir(&n);
    low.rlim_cur = 256;
    low.rlim_max = mine.rlim_max;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    test_node_start(&n, NULL); /* inherits the soft 256 */
    CHECK(setrlimit(RLIMIT_NOFILE, &mine) == 0);

    proc_nofile(n.pid, &soft, &hard);
    fprintf(stderr, "kvpackd open files limit: soft %llu, hard %llu\n", soft, hard);
    CHECK(hard == (unsigned long long)mine.rlim_max);
    CHECK(soft == hard);
    c = test_client(n.addr, 10000);
    CHECK_OK(kvp_client_stat(c, &st)); /* and it serves */
    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_node_rmdir(&n);
    return kvp_test_result("test_nofile");
}
