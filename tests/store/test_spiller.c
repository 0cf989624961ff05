/* test_spiller.c - the background spiller: a put that crosses the high watermark writes nothing
 * to disk on the caller's thread (the spiller does, kvp_store_quiesce waits for it); threads
 * putting, reading, holding page refs and deleting under a budget a quarter of their data never
 * see it passed, lose or duplicate nothing; close with spills in flight keeps every spilled
 * session. Group commit: many small sessions go to disk with a few syncs (one per session with
 * spill_group_max 1), and a group whose write fails stays in DRAM whole, one disk error, retried.
 * Run one case: test_spiller <case>; ctest registers each as store.spiller_<case>. */
#include "store_test_util.h"

#include "kvpack/log.h"

#include <pthread.h>
#include <unistd.h>

static const tgeom_t G = {4, 2, 64, 16}; /* 8 KiB pages (12 KiB slots) */
#define NS 0x5117u

static kvp_store_h open_wm(const char *dir, size_t budget, double high, double low)
{
    return t_open_store(dir, budget, KVP_DURABILITY_SPILL, high, low);
}

/* n sessions of one chunk (4 pages, 48 KiB of slots), from seed on. */
static void sessions_make(kvp_session_desc_t *d, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        t_session(&G, seed + (uint64_t)i, 0, seed + (uint64_t)i, 1, 0, &d[i]);
    }
}

static void sessions_put(kvp_store_h st, kvp_session_desc_t *d, int n, const char *fmt)
{
    char sid[32];

    for (int i = 0; i < n; i++) {
        snprintf(sid, sizeof(sid), fmt, i);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
    }
}

static void sessions_clear(kvp_session_desc_t *d, int n)
{
    for (int i = 0; i < n; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* After a reopen: want of the sessions are byte-identical (all of them: the close spilled those
 * only in DRAM), the others absent. */
static void check_reopened(const char *dir, size_t budget, kvp_session_desc_t *d, int n,
                           const char *fmt, uint64_t want)
{
    kvp_store_h st = open_wm(dir, budget, 0.9, 0.7);
    char        sid[32];
    uint64_t    found = 0;

    for (int i = 0; i < n; i++) {
        kvp_status_t r;

        snprintf(sid, sizeof(sid), fmt, i);
        r = t_check_session(st, NS, sid, &G, &d[i]);
        CHECK(r == KVP_OK || r == KVP_ERR_NOT_FOUND);
        found += r == KVP_OK;
    }
    CHECK(found == want);
    kvp_store_close(st);
}

static uint64_t hist_total(const uint64_t *hist)
{
    uint64_t n = 0;

    for (unsigned i = 0; i <= KVP_HIST_BUCKETS; i++) {
        n += hist[i];
    }
    return n;
}

/* Bytes this thread has passed to write(2)-family calls (pwritev included); 0 if unknown. */
static uint64_t thread_wchar(int *known)
{
    FILE              *f = fopen("/proc/thread-self/io", "r");
    char               line[128];
    unsigned long long v = 0;

    *known = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "wchar: %llu", &v) == 1) {
            *known = 1;
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return v;
}

/* 8 sessions of 768 KiB into 8 MiB, high watermark 50 %: puts cross it but never the budget. */
static int case_background(void)
{
    char               dir[256], sid[32];
    kvp_session_desc_t d[8];
    kvp_store_stats_t  s;
    kvp_store_h        st;
    uint64_t           w0, w1;
    int                known;
    size_t             budget = 8u << 20;

    thread_wchar(&known);
    if (!known) {
        fprintf(stderr, "skipped: /proc/thread-self/io has no wchar (no task I/O accounting)\n");
        return 77;
    }
    t_tmpdir(dir, sizeof(dir), "spbg");
    st = open_wm(dir, budget, 0.5, 0.25);
    for (int i = 0; i < 8; i++) {
        t_session(&G, 300 + i, 0, 300 + i, 16, 3, &d[i]);
    }
    w0 = thread_wchar(&known);
    for (int i = 0; i < 8; i++) {
        snprintf(sid, sizeof(sid), "b%d", i);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
    }
    w1 = thread_wchar(&known);
    CHECK_OK(kvp_store_quiesce(st));
    s = t_stats(st);
    fprintf(stderr, "background: caller wrote %llu bytes, spiller %llu bytes in %llu spills; "
            "dram %llu of %zu; waits %llu\n", (unsigned long long)(w1 - w0),
            (unsigned long long)s.spill_bytes, (unsigned long long)s.spills,
            (unsigned long long)s.dram_bytes, budget, (unsigned long long)s.spill_waits);
    CHECK(s.spills >= 3 && s.spill_bytes > 0);
    CHECK(s.dram_bytes <= budget / 2);    /* quiesce: at or below the high watermark */
    CHECK(s.spill_waits == 0);            /* the budget itself was never reached */
    CHECK(w1 - w0 < s.spill_bytes / 2);   /* the spills were not written by the caller */
    for (int i = 0; i < 8; i++) {
        snprintf(sid, sizeof(sid), "b%d", i);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
        kvp_session_desc_clear(&d[i]);
    }
    kvp_store_close(st);
    t_rmrf(dir);
    return 0;
}

/* ---- race: workers under a budget of a quarter of their data, a watcher of the budget ---- */
#define RACE_THREADS 3
#define RACE_SLOTS   4
#define RACE_ITERS   16
#define RACE_BUDGET  (1u << 20)

typedef struct {
    kvp_store_h        st;
    int                id, fails;
    kvp_session_desc_t d[RACE_SLOTS];
    int                live[RACE_SLOTS];
} race_t;

static int race_finished; /* workers done (atomic) */

static void race_fail(race_t *a, const char *what, int it, kvp_status_t s)
{
    fprintf(stderr, "thread %d iteration %d: %s: %s\n", a->id, it, what, kvp_status_name(s));
    a->fails++;
}

/* Put a session (its first 2 chunks shared by every thread), hold a ref on one of its own pages
 * while reading back the previous one (often restored from disk, so the spiller may spill this
 * one meanwhile), check the ref's bytes, delete now and then. */
static void *race_worker(void *argp)
{
    race_t *a = argp;
    char    sid[32], prev[32] = "";

    for (int it = 0; it < RACE_ITERS && a->fails == 0; it++) {
        int                k = it % RACE_SLOTS, pk = (it + RACE_SLOTS - 1) % RACE_SLOTS;
        kvp_session_desc_t *d = &a->d[k];
        kvp_page_ref_h      ref;
        kvp_status_t        s;
        size_t              len, glen;
        uint8_t            *want;

        snprintf(sid, sizeof(sid), "r%d-%d", a->id, k);
        kvp_session_desc_clear(d);
        t_session(&G, 900, 2, 1000 + (uint64_t)a->id * 100 + (uint64_t)it, 6, it % 2 ? 5 : 0, d);
        if ((s = t_put_session(a->st, NS, sid, &G, d)) != KVP_OK) {
            race_fail(a, "put", it, s);
            break;
        }
        a->live[k] = 1;
        if ((s = kvp_store_page_get(a->st, NS, d->chunk_keys[3], 1, &ref)) != KVP_OK) {
            race_fail(a, "page ref", it, s);
            break;
        }
        if (prev[0] != 0 && a->live[pk] &&
            (s = t_check_session(a->st, NS, prev, &G, &a->d[pk])) != KVP_OK) {
            race_fail(a, "read back", it, s);
        }
        want = t_page(&G, d->chunk_keys[3], 1, 3 * G.page_tokens, G.page_tokens, 0, &len);
        if (memcmp(kvp_page_ref_data(ref, &glen), want, len) != 0 || glen != len) {
            race_fail(a, "held page ref changed", it, KVP_ERR_CORRUPT);
        }
        kvp_free(want);
        kvp_page_ref_release(ref);
        if (it % 5 == 4) {
            if ((s = kvp_store_session_delete(a->st, NS, sid)) != KVP_OK) {
                race_fail(a, "delete", it, s);
            }
            a->live[k] = 0;
        }
        snprintf(prev, sizeof(prev), "%s", sid);
    }
    __atomic_add_fetch(&race_finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int case_race(void)
{
    char              dir[256], sid[32];
    pthread_t         th[RACE_THREADS];
    race_t            a[RACE_THREADS];
    kvp_store_stats_t s;
    kvp_store_h       st;
    uint64_t          max_dram = 0, nlive = 0;

    t_tmpdir(dir, sizeof(dir), "sprace");
    st        = open_wm(dir, RACE_BUDGET, 0.9, 0.7);
    race_finished = 0;
    for (int t = 0; t < RACE_THREADS; t++) {
        memset(&a[t], 0, sizeof(a[t]));
        a[t].st = st;
        a[t].id = t;
        CHECK(pthread_create(&th[t], NULL, race_worker, &a[t]) == 0);
    }
    while (__atomic_load_n(&race_finished, __ATOMIC_ACQUIRE) < RACE_THREADS) {
        s        = t_stats(st); /* the budget, seen from outside while they run */
        max_dram = s.dram_bytes > max_dram ? s.dram_bytes : max_dram;
        usleep(200);
    }
    for (int t = 0; t < RACE_THREADS; t++) {
        CHECK(pthread_join(th[t], NULL) == 0);
    }
    CHECK(kvp_store_quiesce(st) == KVP_OK);
    for (int t = 0; t < RACE_THREADS; t++) {
        CHECK(a[t].fails == 0);
        for (int k = 0; k < RACE_SLOTS; k++) {
            snprintf(sid, sizeof(sid), "r%d-%d", t, k);
            if (a[t].live[k]) {
                CHECK_OK(t_check_session(st, NS, sid, &G, &a[t].d[k]));
                nlive++;
            } else {
                CHECK_ST(t_check_session(st, NS, sid, &G, &a[t].d[k]), KVP_ERR_NOT_FOUND);
            }
            kvp_session_desc_clear(&a[t].d[k]);
        }
    }
    s = t_stats(st);
    fprintf(stderr, "race: %llu live sessions, spills %llu restores %llu waits %llu, dram peak "
            "%llu of %u\n", (unsigned long long)nlive, (unsigned long long)s.spills,
            (unsigned long long)s.restores, (unsigned long long)s.spill_waits,
            (unsigned long long)max_dram, RACE_BUDGET);
    CHECK(s.sessions == nlive);                     /* none lost, none twice */
    CHECK(max_dram <= RACE_BUDGET);
    CHECK(s.spills > 0 && s.restores > 0);
    kvp_store_close(st);
    t_rmrf(dir);
    return 0;
}

/* Close right after puts that keep the spiller busy: it finishes the spill in flight, and
 * every session spilled before close is on disk, whole, after a reopen. */
static int case_close(void)
{
    char               dir[256], sid[32];
    kvp_session_desc_t d[10];
    kvp_store_stats_t  s;
    kvp_store_h        st;

    for (int i = 0; i < 10; i++) {
        t_session(&G, 700 + i, 0, 700 + i, 6, 2, &d[i]); /* 288 KiB each */
    }
    for (int round = 0; round < 4; round++) {
        uint64_t found = 0;

        t_tmpdir(dir, sizeof(dir), "spclose");
        st = open_wm(dir, RACE_BUDGET, 0.6, 0.3);
        for (int i = 0; i < 10; i++) {
            snprintf(sid, sizeof(sid), "c%d", i);
            CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
        }
        s = t_stats(st);
        kvp_store_close(st);
        CHECK(s.spills >= 6); /* 3 sessions fit the budget: the rest had to be spilled by now */
        st = open_wm(dir, RACE_BUDGET, 0.6, 0.3);
        for (int i = 0; i < 10; i++) {
            kvp_status_t r;

            snprintf(sid, sizeof(sid), "c%d", i);
            r = t_check_session(st, NS, sid, &G, &d[i]);
            CHECK(r == KVP_OK || r == KVP_ERR_NOT_FOUND);
            found += r == KVP_OK;
        }
        CHECK(found >= s.spills && found == t_stats(st).sessions);
        if (round == 0) {
            fprintf(stderr, "close: %llu spilled before close, %llu on disk after reopen\n",
                    (unsigned long long)s.spills, (unsigned long long)found);
        }
        kvp_store_close(st);
        t_rmrf(dir);
    }
    for (int i = 0; i < 10; i++) {
        kvp_session_desc_clear(&d[i]);
    }
    return 0;
}

/* 40 sessions of 48 KiB into 1 MiB (high 50 %, low 5 %): with spill_group_max 1 each spill is
 * its own sync; by default a round writes all its victims with one. Either way every session on
 * disk at close reopens byte-identical and the spill histogram has one sample per session. */
#define GROUP_SESSIONS 40
static int case_group(void)
{
    char               dir[256];
    kvp_session_desc_t d[GROUP_SESSIONS];
    kvp_store_stats_t  s;
    kvp_store_h        st;

    sessions_make(d, GROUP_SESSIONS, 900);
    for (uint32_t group = 1; group != 0; group = group == 1 ? 64 : 0) {
        t_tmpdir(dir, sizeof(dir), "spgroup");
        st = t_open_store_group(dir, 1u << 20, KVP_DURABILITY_SPILL, 0.5, 0.05, group);
        sessions_put(st, d, GROUP_SESSIONS, "g%d");
        CHECK_OK(kvp_store_quiesce(st));
        s = t_stats(st);
        fprintf(stderr, "group %u: %llu spills with %llu syncs, %llu on disk, %llu disk errors\n",
                group, (unsigned long long)s.spills, (unsigned long long)s.spill_syncs,
                (unsigned long long)s.sessions_on_disk, (unsigned long long)s.disk_errors);
        CHECK(s.spills >= GROUP_SESSIONS / 2 && s.disk_errors == 0);
        CHECK(hist_total(s.spill_hist) == s.spills); /* one sample per session, also in a group */
        if (group == 1) {
            CHECK(s.spill_syncs == s.spills);
        } else {
            CHECK(s.spill_syncs * 4 <= s.spills); /* a round's victims share a sync */
        }
        kvp_store_close(st);
        check_reopened(dir, 1u << 20, d, GROUP_SESSIONS, "g%d", GROUP_SESSIONS);
        t_rmrf(dir);
    }
    sessions_clear(d, GROUP_SESSIONS);
    return 0;
}

/* A group whose commit fails (injected disk full): every member stays in DRAM, readable, the
 * failure counts once; the next round writes them and they reopen byte-identical. */
#define FAIL_SESSIONS 12
static int case_group_fail(void)
{
    char               dir[256], sid[32];
    kvp_session_desc_t d[FAIL_SESSIONS];
    kvp_store_stats_t  s;
    kvp_store_h        st;
    kvp_key128_t       loose = {0x1005e, 0x1005e};
    uint8_t           *page;
    size_t             len, budget = 1u << 20;

    sessions_make(d, FAIL_SESSIONS, 950);
    t_tmpdir(dir, sizeof(dir), "spgfail");
    st = open_wm(dir, budget, 0.57, 0.05); /* 12 sessions stay below, one more page not */
    sessions_put(st, d, FAIL_SESSIONS, "f%d");
    s = t_stats(st);
    CHECK(s.spills == 0 && s.dram_bytes <= (size_t)(0.57 * (double)budget));
    kvp_store_inject_disk_fail(st, 1, KVP_ERR_NO_SPACE);
    page = t_page(&G, loose, 0, 0, G.page_tokens, 0, &len);
    CHECK_OK(kvp_store_page_put(st, NS, page, len)); /* crosses: one round, no later call */
    kvp_free(page);
    for (int wait = 0; wait < 20000 && t_stats(st).disk_errors == 0; wait++) {
        usleep(1000); /* a hang guard, not a time limit on the spiller */
    }
    s = t_stats(st);
    fprintf(stderr, "failed group: %llu disk errors, %llu spills, %llu in dram\n",
            (unsigned long long)s.disk_errors, (unsigned long long)s.spills,
            (unsigned long long)s.sessions_in_dram);
    CHECK(s.disk_errors == 1 && s.spills == 0 && s.spill_syncs == 0);
    CHECK(s.sessions_in_dram == FAIL_SESSIONS && s.sessions_on_disk == 0);
    for (int i = 0; i < FAIL_SESSIONS; i++) { /* from DRAM: nothing was lost */
        snprintf(sid, sizeof(sid), "f%d", i);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
    }
    CHECK_OK(kvp_store_quiesce(st)); /* a later round retries */
    s = t_stats(st);
    fprintf(stderr, "retried: %llu spills with %llu syncs, %llu on disk\n",
            (unsigned long long)s.spills, (unsigned long long)s.spill_syncs,
            (unsigned long long)s.sessions_on_disk);
    CHECK(s.disk_errors == 1 && s.spills >= 1 && s.spill_syncs >= 1);
    kvp_store_close(st);
    check_reopened(dir, budget, d, FAIL_SESSIONS, "f%d", FAIL_SESSIONS);
    t_rmrf(dir);
    sessions_clear(d, FAIL_SESSIONS);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"background", case_background}, {"race", case_race}, {"close", case_close},
                 {"group", case_group}, {"group_fail", case_group_fail}};
    int64_t live;

    if (getenv("KVP_LOG_LEVEL") == NULL) {
        kvp_log_set_level(KVP_LOG_LVL_ERROR);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (argc == 2 && strcmp(argv[1], cases[i].name) == 0) {
            int rc;

            live = kvp_alloc_live_count();
            rc   = cases[i].fn();
            if (rc == 0 && kvp_alloc_live_count() != live) {
                fprintf(stderr, "%s: %lld allocations leaked\n", cases[i].name,
                        (long long)(kvp_alloc_live_count() - live));
                return 1;
            }
            return rc;
        }
    }
    fprintf(stderr, "usage: test_spiller background|race|close|group|group_fail\n");
    return 2;
}
