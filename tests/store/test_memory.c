/* test_memory.c - bounded memory: a workload of 3x the DRAM budget (sessions of 4 MiB, spill
 * durability, RocksDB tier) must keep resident memory (VmRSS, relative to a baseline taken after
 * the store opened) under budget + 10%, and every session must stay retrievable and
 * byte-identical from DRAM or SSD. Prints the peak RSS and the spill/restore counts. */
#include "store_test_util.h"

#include "kvpack/log.h"

static const tgeom_t G = {8, 4, 128, 32}; /* 64 KiB pages, 8 chunks x 8 layers = 4 MiB sessions */
#define NS     0x99u
#define BUDGET (48u << 20)

static size_t rss_bytes(void)
{
    FILE  *f = fopen("/proc/self/status", "r");
    char   line[256];
    size_t kb = 0;

    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    fprintf(stderr, "skipped: resident memory under a sanitizer measures its quarantine and "
                    "shadow memory, not the store\n");
    return 77;
#endif
    char               dir[256], sid[32];
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    kvp_store_stats_t  s;
    size_t             base, peak = 0, total = 0;
    int                n = 0;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    t_tmpdir(dir, sizeof(dir), "mem");
    p.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH;
    p.dram_budget = BUDGET;
    p.db_path     = dir;
    CHECK_OK(kvp_store_open(&p, &st));
    { /* warm the test's own page generator before the baseline */
        kvp_session_desc_t d;

        t_session(&G, 1, 0, 1, 1, 3, &d);
        kvp_session_desc_clear(&d);
    }
    base = rss_bytes();
    for (; total < 3ull * BUDGET; n++) {
        kvp_session_desc_t d;
        size_t             r;

        snprintf(sid, sizeof(sid), "m%d", n);
        t_session(&G, 100 + n, 0, 100 + n, 8, 5, &d);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d));
        total += (size_t)8 * G.layers * (64 + 2u * 32 * 4 * 128 * 2) + d.tail_len;
        kvp_session_desc_clear(&d);
        r    = rss_bytes();
        peak = r > peak ? r : peak;
    }
    for (int i = 0; i < n; i++) { /* every one retrievable, oldest (on SSD) first */
        kvp_session_desc_t d;
        size_t             r;

        snprintf(sid, sizeof(sid), "m%d", i);
        t_session(&G, 100 + i, 0, 100 + i, 8, 5, &d);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d));
        kvp_session_desc_clear(&d);
        r    = rss_bytes();
        peak = r > peak ? r : peak;
    }
    kvp_store_stats(st, &s);
    fprintf(stderr, "memory: budget %u MiB, workload %zu MiB in %d sessions, rss baseline %zu "
            "MiB, peak above baseline %.1f MiB (limit %.1f), spills %llu (%llu MiB), restores "
            "%llu (%llu MiB), dram now %llu MiB\n", BUDGET >> 20, total >> 20, n, base >> 20,
            (double)(peak - base) / 1048576.0, BUDGET * 1.1 / 1048576.0,
            (unsigned long long)s.spills, (unsigned long long)(s.spill_bytes >> 20),
            (unsigned long long)s.restores, (unsigned long long)(s.restore_bytes >> 20),
            (unsigned long long)(s.dram_bytes >> 20));
    CHECK(s.spills > 0 && s.restores > 0);
    CHECK(s.dram_bytes <= BUDGET);
    CHECK(peak - base <= (size_t)(BUDGET * 1.1));
    kvp_store_close(st);
    t_rmrf(dir);
    return 0;
}
