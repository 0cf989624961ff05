/* test_nofile.c - kvpackd raises its soft open files limit (RLIMIT_NOFILE) to the hard one at
 * start: each client connection costs about 2 descriptors and the store's files share the budget,
 * so a soft limit below the hard one would refuse clients the hard limit allows. The node is
 * started under a soft limit of 256 (inherited from this test) and its /proc/PID/limits read.
 * Skipped (77) where the hard limit leaves no room below it. */
#include "node_harness.h"

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

int main(void)
{
    test_node_t        n;
    struct rlimit      mine, low;
    unsigned long long soft, hard;
    kvp_client_h       c;
    kvp_node_stat_t    st;

    CHECK(getrlimit(RLIMIT_NOFILE, &mine) == 0);
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
    return 0;
}
