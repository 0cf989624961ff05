/* test_power_memtable: durability interval under the power model (power_shim.c) when a memtable
 * fills. RocksDB makes records durable on its own around a memtable switch (with several column
 * families it syncs the closed WAL before the flush, then syncs the table file and MANIFEST); the
 * store must have synced the segment bytes those records name first. The crash tests never fill
 * a memtable, so they never saw this (before kvpack switched memtables itself, right after a
 * segment sync: 381 of 400 sessions visible but not whole here).
 * The child (this program with "put DIR", LD_PRELOAD=power_shim.so) puts NPUT sessions with a
 * 5-token fp16 tail (~33 KiB session records: a 4 MiB memtable fills every ~120) under interval
 * 60 s, so the syncer never runs, waits for background flushes and SIGKILLs itself: every write
 * no fsync covered is lost. The parent then opens the store (no shim) and checks each session:
 * absent is fine (the last window may go), whole is fine, anything else names bytes never
 * synced. At least one session must be whole: a memtable switch made something durable.
 * usage: test_power_memtable <power_shim.so> */
#include "store_test_util.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static const tgeom_t G = {4, 2, 64, 16};
#define NS   0x77ull
#define NPUT 400

static kvp_store_h open_st(const char *dir)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY |
                   KVP_STORE_PARAM_SYNC_INTERVAL | KVP_STORE_PARAM_DRAM_BUDGET;
    p.db_path          = dir;
    p.durability       = KVP_DURABILITY_INTERVAL;
    p.sync_interval_ms = 60000;
    p.dram_budget      = 1ull << 30;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static void put_and_die(const char *dir)
{
    kvp_store_h        st = open_st(dir);
    kvp_session_desc_t d;
    char               sid[32];

    for (int i = 0; i < NPUT; i++) {
        t_session(&G, (uint64_t)i + 1, 0, (uint64_t)i + 1, 2, 5, &d);
        snprintf(sid, sizeof(sid), "s%d", i);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d));
        kvp_session_desc_clear(&d);
    }
    printf("child: put %d sessions, interval_syncs %llu\n", NPUT,
           (unsigned long long)t_stats(st).interval_syncs);
    fflush(stdout);
    usleep(1000 * 1000); /* the node goes on a moment: background flushes finish */
    raise(SIGKILL);
}

int main(int argc, char **argv)
{
    char               dir[512];
    pid_t              pid;
    int                wst, whole = 0, absent = 0, bad = 0;
    kvp_store_h        st;
    kvp_session_desc_t d;
    char               sid[32], mark[600];

    if (argc == 3 && strcmp(argv[1], "put") == 0) {
        put_and_die(argv[2]);
        return 1;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: test_power_memtable <power_shim.so>\n");
        return 2;
    }
    t_tmpdir(dir, sizeof(dir), "powermem");
    snprintf(mark, sizeof(mark), "%s.power_mark", dir);
    unlink(mark);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (setenv("LD_PRELOAD", argv[1], 1) == 0 && setenv("KVP_POWER_MARK", mark, 1) == 0) {
            execl("/proc/self/exe", argv[0], "put", dir, (char *)NULL);
        }
        _exit(127);
    }
    CHECK(waitpid(pid, &wst, 0) == pid);
    CHECK(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
    st = open_st(dir);
    for (int i = 0; i < NPUT; i++) {
        kvp_status_t s;

        t_session(&G, (uint64_t)i + 1, 0, (uint64_t)i + 1, 2, 5, &d);
        snprintf(sid, sizeof(sid), "s%d", i);
        s = t_check_session(st, NS, sid, &G, &d);
        if (s == KVP_OK) {
            whole++;
        } else if (s == KVP_ERR_NOT_FOUND) {
            absent++;
        } else {
            if (bad < 3) {
                printf("  %s: %s\n", sid, kvp_status_str(s));
            }
            bad++;
        }
        kvp_session_desc_clear(&d);
    }
    kvp_store_close(st);
    printf("after the power loss: %d whole, %d absent, %d visible but not whole\n", whole, absent,
           bad);
    CHECK(bad == 0);
    CHECK(whole > 0);
    CHECK(access(mark, F_OK) == 0); /* the shim held writes back: the model was in effect */
    unlink(mark);
    t_rmrf(dir);
    printf("PASS\n");
    return 0;
}
