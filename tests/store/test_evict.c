/* test_evict.c - eviction on a full disk and the idle TTL's order.
 * full_reads: --durability spill, the disk refusing every write (injected ERR_NO_SPACE), DRAM
 *   full of dirty sessions (never spilled: the least recently used) and clean ones (spilled, then
 *   read back: their version is on disk): a get of a cold session still succeeds, by letting go
 *   of clean sessions' DRAM with no write (it was ERR_NO_SPACE: eviction stopped at the first
 *   dirty session it could not write). The dirty ones stay in DRAM, byte-identical, and reach the
 *   disk at the close once it takes writes again. The spiller writes one session per group here,
 *   so the synchronous eviction (kvp_store_make_room) is the one that makes the room.
 * full_group: the spiller's group commit failing on a full disk: its member that needed no write
 *   goes cold all the same (it stayed hot, holding DRAM a read needed), the dirty one stays hot.
 * ttl_order: cold sessions expire in the order of their last use, not in the order they went
 *   cold: eight sessions of different ages spilled in a shuffled order, then one expiry pass at a
 *   TTL between their ages removes exactly those idle past it (it stopped at the first cold one
 *   not expired, so one idle past the TTL could stay up to another TTL). Ages are set on the
 *   sessions under the store lock instead of sleeping (no clock in the assertions).
 * Run one case: test_evict <case>; ctest registers each as store.evict_<case>. */
#include "store_int.h"
#include "store_test_util.h"

#include "kvpack/alloc.h"
#include "kvpack/log.h"

static const tgeom_t G = {4, 2, 64, 16}; /* 8 KiB pages (12 KiB slots) */
#define NS 0xE71Cu

#define DIRTY 4  /* sessions only in DRAM, the least recently used */
#define COLD  6  /* sessions only on disk */
#define CLEAN 24 /* at most: spilled, then read back (hot, their version on disk) */

static kvp_sess_t *sess_of(kvp_store_h st, const char *sid)
{
    return kvp_index_sess_find(&st->sessions, NS, sid);
}

/* Put session sid (one chunk, 4 pages), spill it and, hot, read it back: clean. */
static void put_clean(kvp_store_h st, const char *sid, const kvp_session_desc_t *d)
{
    CHECK_OK(t_put_session(st, NS, sid, &G, d));
    CHECK_OK(kvp_store_session_spill(st, NS, sid));
    CHECK_OK(t_check_session(st, NS, sid, &G, d));
}

static void check_all(kvp_store_h st, const kvp_session_desc_t *d, const char *fmt, int n)
{
    char sid[32];

    for (int i = 0; i < n; i++) {
        snprintf(sid, sizeof(sid), fmt, i);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
    }
}

static void case_full_reads(void)
{
    char               dir[256], sid[32];
    kvp_session_desc_t dd[DIRTY], dc[COLD], dk[CLEAN];
    kvp_store_stats_t  s;
    kvp_store_h        st;
    size_t             budget = 1u << 20, one;
    int                nk = 0;

    t_tmpdir(dir, sizeof(dir), "evfull");
    /* the spiller stays idle below the 0.99 high watermark; one session per group */
    st = t_open_store_group(dir, budget, KVP_DURABILITY_SPILL, 0.99, 0.5, 1);
    for (int i = 0; i < COLD; i++) {
        snprintf(sid, sizeof(sid), "c%d", i);
        t_session(&G, 300 + i, 0, 300 + i, 1, 0, &dc[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &dc[i]));
        CHECK_OK(kvp_store_session_spill(st, NS, sid));
    }
    CHECK(t_stats(st).dram_bytes == 0);
    for (int i = 0; i < DIRTY; i++) {
        snprintf(sid, sizeof(sid), "d%d", i);
        t_session(&G, 100 + i, 0, 100 + i, 1, 0, &dd[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &dd[i]));
    }
    one = t_stats(st).dram_bytes / DIRTY; /* DRAM one session takes */
    /* clean sessions until one more session would pass the budget */
    while (t_stats(st).dram_bytes + one <= budget) {
        CHECK(nk < CLEAN);
        snprintf(sid, sizeof(sid), "k%d", nk);
        t_session(&G, 200 + nk, 0, 200 + nk, 1, 0, &dk[nk]);
        put_clean(st, sid, &dk[nk]);
        nk++;
    }
    s = t_stats(st);
    CHECK(s.sessions_in_dram == (uint64_t)(DIRTY + nk) && s.disk_errors == 0);
    CHECK(s.dram_bytes <= (size_t)(0.99 * (double)budget)); /* no round ran: nothing evicted */

    kvp_store_inject_disk_fail(st, 1000000, KVP_ERR_NO_SPACE); /* the disk is full */
    check_all(st, dc, "c%d", COLD); /* each read needs room: clean sessions make it */
    s = t_stats(st);
    fprintf(stderr, "full disk: %llu disk errors, %llu in dram, %llu spills\n",
            (unsigned long long)s.disk_errors, (unsigned long long)s.sessions_in_dram,
            (unsigned long long)s.spills);
    CHECK(s.disk_errors > 0 && s.dram_bytes <= budget);
    pthread_mutex_lock(&st->lock);
    for (int i = 0; i < DIRTY; i++) { /* never let go of: only their DRAM copy holds them */
        kvp_sess_t *d;

        snprintf(sid, sizeof(sid), "d%d", i);
        d = sess_of(st, sid);
        CHECK(d != NULL && d->hot && !kvp_store_sess_on_disk_now(d));
    }
    pthread_mutex_unlock(&st->lock);
    check_all(st, dd, "d%d", DIRTY);
    check_all(st, dk, "k%d", nk); /* read back from disk in turn */

    kvp_store_inject_disk_fail(st, 0, KVP_OK); /* room on the disk again: the close spills */
    kvp_store_close(st);
    st = t_open_store(dir, budget, KVP_DURABILITY_SPILL, 0.99, 0.5);
    check_all(st, dd, "d%d", DIRTY);
    check_all(st, dc, "c%d", COLD);
    check_all(st, dk, "k%d", nk);
    kvp_store_close(st);
    t_rmrf(dir);
    for (int i = 0; i < DIRTY; i++) {
        kvp_session_desc_clear(&dd[i]);
    }
    for (int i = 0; i < COLD; i++) {
        kvp_session_desc_clear(&dc[i]);
    }
    for (int i = 0; i < nk; i++) {
        kvp_session_desc_clear(&dk[i]);
    }
}

static void case_full_group(void)
{
    char               dir[256];
    kvp_session_desc_t d, k;
    kvp_sess_t        *v[2];
    kvp_store_h        st;

    t_tmpdir(dir, sizeof(dir), "evgroup");
    st = t_open_store(dir, 8u << 20, KVP_DURABILITY_SPILL, 0.9, 0.7);
    t_session(&G, 11, 0, 11, 2, 3, &d);
    t_session(&G, 12, 0, 12, 2, 3, &k);
    CHECK_OK(t_put_session(st, NS, "dirty", &G, &d));
    put_clean(st, "clean", &k);
    kvp_store_inject_disk_fail(st, 1000000, KVP_ERR_NO_SPACE);
    pthread_mutex_lock(&st->lock);
    v[0] = sess_of(st, "dirty");
    v[1] = sess_of(st, "clean");
    CHECK(v[0] != NULL && v[1] != NULL && v[0]->hot && v[1]->hot);
    CHECK(!kvp_store_sess_on_disk_now(v[0]) && kvp_store_sess_on_disk_now(v[1]));
    CHECK(kvp_store_sess_spill_group(st, v, 2) == KVP_ERR_NO_SPACE);
    v[0] = sess_of(st, "dirty");
    v[1] = sess_of(st, "clean");
    CHECK(v[0] != NULL && v[0]->hot && !kvp_store_sess_on_disk_now(v[0])); /* kept */
    CHECK(v[1] != NULL && !v[1]->hot && v[1]->on_disk); /* its DRAM went with no write */
    pthread_mutex_unlock(&st->lock);
    CHECK(t_stats(st).disk_errors == 1);
    CHECK_OK(t_check_session(st, NS, "dirty", &G, &d));
    CHECK_OK(t_check_session(st, NS, "clean", &G, &k)); /* a read: no write needed */
    kvp_store_inject_disk_fail(st, 0, KVP_OK);
    kvp_store_close(st);
    st = t_open_store(dir, 8u << 20, KVP_DURABILITY_SPILL, 0.9, 0.7);
    CHECK_OK(t_check_session(st, NS, "dirty", &G, &d));
    CHECK_OK(t_check_session(st, NS, "clean", &G, &k));
    kvp_store_close(st);
    t_rmrf(dir);
    kvp_session_desc_clear(&d);
    kvp_session_desc_clear(&k);
}

#define AGED 8

static void case_ttl_order(void)
{
    static const int order[AGED] = {3, 7, 0, 5, 1, 6, 2, 4}; /* of the spills */
    const uint64_t   sec = 1000000000ull, ttl = 30 * sec;
    char             dir[256], sid[32];
    kvp_session_desc_t d[AGED];
    kvp_store_h        st;

    CHECK(kvp_time_ns() > 100 * sec); /* the ages below are behind the monotonic clock */
    t_tmpdir(dir, sizeof(dir), "evttl");
    st = t_open_store(dir, 8u << 20, KVP_DURABILITY_SPILL, 0.9, 0.7); /* no ttl yet */
    /* session i last used 75 - 10 i s ago: put oldest first, so the hot list is in that order */
    for (int i = 0; i < AGED; i++) {
        kvp_sess_t *s;

        snprintf(sid, sizeof(sid), "a%d", i);
        t_session(&G, 400 + i, 0, 400 + i, 1, 2, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
        pthread_mutex_lock(&st->lock);
        s = sess_of(st, sid);
        CHECK(s != NULL && s->hot);
        s->last_ns = kvp_time_ns() - (uint64_t)(75 - 10 * i) * sec;
        pthread_mutex_unlock(&st->lock);
    }
    for (int i = 0; i < AGED; i++) { /* cold in another order than their last use */
        snprintf(sid, sizeof(sid), "a%d", order[i]);
        CHECK_OK(kvp_store_session_spill(st, NS, sid));
    }
    CHECK(t_stats(st).sessions_in_dram == 0);
    pthread_mutex_lock(&st->lock);
    st->ttl_ns        = ttl; /* idle past 30 s: a0..a4 (75..35 s), not a5..a7 (25..5 s) */
    st->last_sweep_ns = 0;
    kvp_store_expire_idle(st);
    pthread_mutex_unlock(&st->lock);
    fprintf(stderr, "expired %llu of %d\n", (unsigned long long)t_stats(st).expired, AGED);
    CHECK(t_stats(st).expired == 5 && t_stats(st).sessions == 3);
    for (int i = 0; i < AGED; i++) {
        snprintf(sid, sizeof(sid), "a%d", i);
        CHECK_ST(t_check_session(st, NS, sid, &G, &d[i]), i < 5 ? KVP_ERR_NOT_FOUND : KVP_OK);
    }
    kvp_store_close(st);
    t_rmrf(dir);
    for (int i = 0; i < AGED; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"full_reads", case_full_reads}, {"full_group", case_full_group},
                 {"ttl_order", case_ttl_order}};

    if (getenv("KVP_LOG_LEVEL") == NULL) {
        kvp_log_set_level(KVP_LOG_LVL_ERROR);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (argc == 2 && strcmp(argv[1], cases[i].name) == 0) {
            int64_t live = kvp_alloc_live_count();

            cases[i].fn();
            if (kvp_alloc_live_count() != live) {
                fprintf(stderr, "%s: %lld allocations leaked\n", cases[i].name,
                        (long long)(kvp_alloc_live_count() - live));
                return 1;
            }
            return 0;
        }
    }
    fprintf(stderr, "usage: test_evict full_reads|full_group|ttl_order\n");
    return 2;
}
