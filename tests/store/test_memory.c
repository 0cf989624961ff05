/* test_memory.c - bounded memory (VmRSS, relative to a baseline taken after the store opened).
 * 3x_budget: a workload of 3x the DRAM budget (sessions of 4 MiB, spill durability, RocksDB
 *   tier) must keep resident memory under budget + 10%, and every session must stay retrievable
 *   and byte-identical from DRAM or SSD. Prints the peak RSS and the spill/restore counts.
 * classes: a DRAM-only store whose page size changes over time (phases of one geometry each,
 *   filling 80% of the budget, then deleting 23 sessions in 24, so one live slot stays in most
 *   slabs of each size class): what the pool holds resident after each phase must stay under
 *   1.5x the budget (it used to grow by most of a budget per phase, 2.9x after eight). */
#include "store_test_util.h"

#include "kvpack/log.h"

static const tgeom_t G = {8, 4, 128, 32}; /* 64 KiB pages, 8 chunks x 8 layers = 4 MiB sessions */
#define NS     0x99u
#define BUDGET (48u << 20)
#define CLASSES_BUDGET (32u << 20)
#define CLASSES_PHASES 8

static void case_3x_budget(const char *dir)
{
    char               sid[32];
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    kvp_store_stats_t  s;
    size_t             base, peak = 0, total = 0;
    int                n = 0;

    p.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH;
    p.dram_budget = BUDGET;
    p.db_path     = dir;
    CHECK_OK(kvp_store_open(&p, &st));
    { /* warm the test's own page generator before the baseline */
        kvp_session_desc_t d;

        t_session(&G, 1, 0, 1, 1, 3, &d);
        kvp_session_desc_clear(&d);
    }
    base = t_rss_bytes();
    for (; total < 3ull * BUDGET; n++) {
        kvp_session_desc_t d;
        size_t             r;

        snprintf(sid, sizeof(sid), "m%d", n);
        t_session(&G, 100 + n, 0, 100 + n, 8, 5, &d);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d));
        total += (size_t)8 * G.layers * (64 + 2u * 32 * 4 * 128 * 2) + d.tail_len;
        kvp_session_desc_clear(&d);
        r    = t_rss_bytes();
        peak = r > peak ? r : peak;
    }
    for (int i = 0; i < n; i++) { /* every one retrievable, oldest (on SSD) first */
        kvp_session_desc_t d;
        size_t             r;

        snprintf(sid, sizeof(sid), "m%d", i);
        t_session(&G, 100 + i, 0, 100 + i, 8, 5, &d);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d));
        kvp_session_desc_clear(&d);
        r    = t_rss_bytes();
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
}

/* Phase ph: sessions of 4 chunks x 2 layers whose pages grow by 4 KiB a phase (8,256 bytes to
 * 36,928: a new pool class each), put until DRAM holds 80% of the budget, then all but every
 * 24th deleted. */
static void case_classes(const char *dir)
{
    kvp_store_h       st = t_open_store(NULL, CLASSES_BUDGET, KVP_DURABILITY_SPILL, 0, 0);
    kvp_store_stats_t s;
    size_t            base, r;
    char              sid[32];

    (void)dir;
    { /* warm the test's own page generator before the baseline */
        kvp_session_desc_t d;
        tgeom_t            g = {2, 2, 64, 16};

        t_session(&g, 1, 0, 1, 1, 0, &d);
        kvp_session_desc_clear(&d);
    }
    base = t_rss_bytes();
    for (int ph = 0; ph < CLASSES_PHASES; ph++) {
        tgeom_t  g  = {2, 2, (uint32_t)(64 + 32 * ph), 16};
        uint64_t ns = 0x100u + (uint64_t)ph;
        int      n  = 0;

        do {
            kvp_session_desc_t d;

            snprintf(sid, sizeof(sid), "p%d-%d", ph, n);
            t_session(&g, 1000u * ph + n, 0, 1000u * ph + n, 4, 0, &d);
            CHECK_OK(t_put_session(st, ns, sid, &g, &d));
            kvp_session_desc_clear(&d);
            n++;
            s = t_stats(st);
        } while (s.dram_bytes <= CLASSES_BUDGET * 0.8);
        CHECK(s.dropped == 0);
        for (int i = 0; i < n; i++) {
            if (i % 24 != 0) {
                snprintf(sid, sizeof(sid), "p%d-%d", ph, i);
                CHECK_OK(kvp_store_session_delete(st, ns, sid));
            }
        }
        s = t_stats(st);
        r = t_rss_bytes();
        fprintf(stderr, "phase %d: %d sessions put, 23 in 24 deleted: dram %.1f MiB, rss above "
                "baseline %.1f MiB (limit %.1f)\n", ph, n, s.dram_bytes / 1048576.0,
                (double)(r - base) / 1048576.0, CLASSES_BUDGET * 1.5 / 1048576.0);
        EXPECT(r - base <= (size_t)(CLASSES_BUDGET * 1.5),
               "phase %d: %.1f MiB resident for a %u MiB budget (%.1f MiB in use)", ph,
               (double)(r - base) / 1048576.0, CLASSES_BUDGET >> 20, s.dram_bytes / 1048576.0);
    }
    for (int ph = 0; ph < CLASSES_PHASES; ph++) { /* the survivors are whole */
        tgeom_t g = {2, 2, (uint32_t)(64 + 32 * ph), 16};

        for (int i = 0; i <= 48; i += 24) { /* every phase put 59 or more */
            kvp_session_desc_t d;

            snprintf(sid, sizeof(sid), "p%d-%d", ph, i);
            t_session(&g, 1000u * ph + i, 0, 1000u * ph + i, 4, 0, &d);
            CHECK_OK(t_check_session(st, 0x100u + (uint64_t)ph, sid, &g, &d));
            kvp_session_desc_clear(&d);
        }
    }
    kvp_store_close(st);
}

int main(int argc, char **argv)
{
    static const t_case_t cases[] = {
        {"3x_budget", case_3x_budget},
        {"classes", case_classes},
        {NULL, NULL},
    };

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    fprintf(stderr, "skipped: resident memory under a sanitizer measures its quarantine and "
                    "shadow memory, not the store\n");
    return 77;
#endif
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    return t_run_case(argc, argv, cases, "mem") != 0 || kvp_test_result("test_memory");
}
