/* test_power_delete: a delete whose WAL record is not synced yet, then a power failure (the
 * power model, power_shim.c). A delete commits without a WAL fsync under interval and
 * write-through; the segment file whose last live bytes it killed used to be unlinked at once, so
 * after the power loss the delete was gone (allowed: it was not synced) but so were the bytes
 * its older record names: the session came back ERR_CORRUPT. Now the file stays until a WAL
 * fsync makes the delete durable. The child (this program with "child DIR MODE",
 * LD_PRELOAD=power_shim.so) puts and spills s0 (in its own small segment file) and s1 (the
 * next), deletes s0 and exits at once: every write no fsync covered is lost. The parent opens the
 * store (no shim): s0 is whole or absent, never damaged, and s1 is whole.
 * usage: test_power_delete <power_shim.so> */
#include "store_test_util.h"
#include <sys/wait.h>
#include <unistd.h>

static const tgeom_t G = {4, 2, 64, 16};
#define NS 0xC0ull

static kvp_store_h open_st(const char *dir, kvp_durability_t mode)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                   KVP_STORE_PARAM_DURABILITY | KVP_STORE_PARAM_SYNC_INTERVAL |
                   KVP_STORE_PARAM_COMPACT | KVP_STORE_PARAM_SEGMENT_BYTES;
    p.dram_budget        = 64u << 20;
    p.db_path            = dir;
    p.durability         = mode;
    p.sync_interval_ms   = 60000; /* no interval sync in the window */
    p.compact_dead_ratio = 0;     /* no compaction: its WAL sync would close the window */
    p.segment_bytes      = 64u << 10;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static void child(const char *dir, kvp_durability_t mode)
{
    kvp_session_desc_t d0, d1;
    kvp_store_h        st = open_st(dir, mode);

    t_session(&G, 500, 0, 500, 4, 0, &d0);
    t_session(&G, 501, 0, 501, 4, 0, &d1);
    CHECK_OK(t_put_session(st, NS, "s0", &G, &d0));
    CHECK_OK(kvp_store_session_spill(st, NS, "s0")); /* durable (a spill syncs) */
    CHECK_OK(t_put_session(st, NS, "s1", &G, &d1));
    CHECK_OK(kvp_store_session_spill(st, NS, "s1")); /* durable, in the next file */
    CHECK_OK(kvp_store_session_delete(st, NS, "s0")); /* acknowledged, in the WAL only */
    printf("child: %llu segment files after the delete\n",
           (unsigned long long)t_stats(st).disk_files);
    fflush(stdout);
    _exit(0); /* the power fails: the shim's held writes go with the process */
}

int main(int argc, char **argv)
{
    static const struct {
        const char      *name;
        kvp_durability_t mode;
    } modes[] = {{"interval", KVP_DURABILITY_INTERVAL},
                 {"write-through", KVP_DURABILITY_WRITE_THROUGH}};

    if (argc == 4 && strcmp(argv[1], "child") == 0) {
        child(argv[2], (kvp_durability_t)atoi(argv[3]));
        return 1;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: test_power_delete <power_shim.so>\n");
        return 2;
    }
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        char               dir[512], mode_s[8], mark[600];
        pid_t              pid;
        int                wst;
        kvp_store_h        st;
        kvp_session_desc_t d0, d1;
        kvp_status_t       r0, r1;

        t_tmpdir(dir, sizeof(dir), "powerdel");
        snprintf(mode_s, sizeof(mode_s), "%d", (int)modes[m].mode);
        snprintf(mark, sizeof(mark), "%s.power_mark", dir);
        unlink(mark);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            if (setenv("LD_PRELOAD", argv[1], 1) == 0 && setenv("KVP_POWER_MARK", mark, 1) == 0) {
                execl("/proc/self/exe", argv[0], "child", dir, mode_s, (char *)NULL);
            }
            _exit(127);
        }
        CHECK(waitpid(pid, &wst, 0) == pid);
        CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
        CHECK(access(mark, F_OK) == 0); /* the shim held writes back: the model was in effect */
        unlink(mark);
        st = open_st(dir, modes[m].mode);
        t_session(&G, 500, 0, 500, 4, 0, &d0);
        t_session(&G, 501, 0, 501, 4, 0, &d1);
        r0 = t_check_session(st, NS, "s0", &G, &d0);
        r1 = t_check_session(st, NS, "s1", &G, &d1);
        printf("%s, after the power loss: s0 %s (OK or NOT_FOUND), s1 %s\n", modes[m].name,
               kvp_status_name(r0), kvp_status_name(r1));
        CHECK(r0 == KVP_OK || r0 == KVP_ERR_NOT_FOUND);
        CHECK(r1 == KVP_OK);
        kvp_store_close(st);
        kvp_session_desc_clear(&d0);
        kvp_session_desc_clear(&d1);
        t_rmrf(dir);
    }
    printf("PASS\n");
    return 0;
}
