/* test_interval.c - durability "interval" (write-through + a background sync every N ms).
 * ticks: with 20 ms, puts are synced by the syncer thread (interval_syncs rises, every unsynced
 *   mark clears, within a generous 10 s) and reopen byte-identical; write-through alone keeps the
 *   marks and syncs nothing.
 * idle: no write since the last sync -> no sync over 10 intervals (reads do not count).
 * fail: intervals 0 and 60001 ms are refused; an injected sync failure keeps every mark, counts one disk error and no sync; the next
 *   tick syncs and clears them; a tick with nothing new does nothing.
 * during: a session written while a sync runs (test hook inside the tick) stays unsynced until
 *   the next tick; those written before are cleared.
 * The last two drive kvp_store_sync_tick directly (interval 60 s, so the thread stays out). */
#include "store_test_util.h"
#include "store_int.h"

#include "kvpack/log.h"

#include <time.h>

static const tgeom_t G = {2, 2, 32, 16}; /* layers, heads, head_dim, P */
#define NS 0x1A7ull

static kvp_store_params_t params(const char *dir, kvp_durability_t dur, uint32_t ms)
{
    kvp_store_params_t p = {0};

    p.field_mask       = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY |
                         KVP_STORE_PARAM_SYNC_INTERVAL;
    p.db_path          = dir;
    p.durability       = dur;
    p.sync_interval_ms = ms;
    return p;
}

static kvp_store_h open_dur(const char *dir, kvp_durability_t dur, uint32_t ms)
{
    kvp_store_params_t p = params(dir, dur, ms);
    kvp_store_h        st;

    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Poll (5 ms steps, 10 s at most) until no session is unsynced and at least min syncs ran. */
static kvp_store_stats_t wait_synced(kvp_store_h st, uint64_t min_syncs)
{
    kvp_store_stats_t s = t_stats(st);

    for (int i = 0; i < 2000 && (s.sessions_unsynced != 0 || s.interval_syncs < min_syncs); i++) {
        sleep_ms(5);
        s = t_stats(st);
    }
    CHECK(s.sessions_unsynced == 0);
    CHECK(s.interval_syncs >= min_syncs);
    return s;
}

static void put_n(kvp_store_h st, const char *prefix, int n, uint64_t seed,
                  kvp_session_desc_t *d)
{
    char sid[32];

    for (int i = 0; i < n; i++) {
        snprintf(sid, sizeof(sid), "%s%d", prefix, i);
        t_session(&G, seed + (uint64_t)i, 0, seed + (uint64_t)i, 2, 5, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
    }
}

static void check_n(kvp_store_h st, const char *prefix, int n, kvp_session_desc_t *d)
{
    char sid[32];

    for (int i = 0; i < n; i++) {
        snprintf(sid, sizeof(sid), "%s%d", prefix, i);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
    }
}

static void clear_n(kvp_session_desc_t *d, int n)
{
    for (int i = 0; i < n; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

static void case_ticks(const char *dir)
{
    kvp_session_desc_t d[12];
    kvp_store_stats_t  s;
    kvp_store_h        st = open_dur(dir, KVP_DURABILITY_WRITE_THROUGH, 20);

    put_n(st, "w", 6, 100, d); /* write-through: marked, never synced by a timer */
    sleep_ms(100);
    s = t_stats(st);
    CHECK(s.sessions_unsynced == 6 && s.interval_syncs == 0);
    kvp_store_close(st);
    clear_n(d, 6);

    st = open_dur(dir, KVP_DURABILITY_INTERVAL, 20);
    put_n(st, "a", 6, 200, d);
    s = wait_synced(st, 1);
    CHECK(s.interval_syncs <= 6); /* at most one sync per write */
    put_n(st, "b", 6, 300, d + 6);
    s = wait_synced(st, s.interval_syncs + 1);
    CHECK(s.interval_syncs <= 12 && s.disk_errors == 0);
    fprintf(stderr, "ticks: 12 puts, %llu interval syncs\n",
            (unsigned long long)s.interval_syncs);
    kvp_store_close(st);
    st = open_dur(dir, KVP_DURABILITY_SPILL, 0);
    check_n(st, "a", 6, d);
    check_n(st, "b", 6, d + 6);
    kvp_store_close(st);
    clear_n(d, 12);
}

static void case_idle(const char *dir)
{
    kvp_session_desc_t d[2];
    kvp_store_stats_t  s;
    kvp_store_h        st = open_dur(dir, KVP_DURABILITY_INTERVAL, 20);

    sleep_ms(200); /* nothing written yet */
    CHECK(t_stats(st).interval_syncs == 0);
    put_n(st, "i", 2, 400, d);
    s = wait_synced(st, 1);
    for (int i = 0; i < 10; i++) { /* 10 intervals of reads only */
        check_n(st, "i", 2, d);
        sleep_ms(20);
    }
    CHECK(t_stats(st).interval_syncs == s.interval_syncs);
    fprintf(stderr, "idle: %llu syncs before and after 200 ms of reads\n",
            (unsigned long long)s.interval_syncs);
    kvp_store_close(st);
    clear_n(d, 2);
}

static kvp_status_t tick(kvp_store_h st, void (*during)(void *), void *arg)
{
    kvp_status_t status;

    pthread_mutex_lock(&st->lock);
    status = kvp_store_sync_tick(st, during, arg);
    pthread_mutex_unlock(&st->lock);
    return status;
}

static void case_fail(const char *dir)
{
    kvp_session_desc_t d[3];
    kvp_store_stats_t  s;
    kvp_store_h        st;

    for (int i = 0; i < 2; i++) { /* 1..60000 ms */
        kvp_store_params_t p = params(dir, KVP_DURABILITY_INTERVAL, i == 0 ? 0 : 60001);

        CHECK_ST(kvp_store_open(&p, &st), KVP_ERR_INVALID);
    }
    st = open_dur(dir, KVP_DURABILITY_INTERVAL, 60000);
    put_n(st, "f", 3, 500, d);
    s = t_stats(st);
    CHECK(s.sessions_unsynced == 3 && s.interval_syncs == 0 && s.disk_errors == 0);
    kvp_store_inject_disk_fail(st, 1, KVP_ERR_IO);
    CHECK_ST(tick(st, NULL, NULL), KVP_ERR_IO);
    s = t_stats(st);
    CHECK(s.sessions_unsynced == 3 && s.interval_syncs == 0 && s.disk_errors == 1);
    CHECK_OK(tick(st, NULL, NULL)); /* the retry */
    s = t_stats(st);
    CHECK(s.sessions_unsynced == 0 && s.interval_syncs == 1 && s.disk_errors == 1);
    CHECK_OK(tick(st, NULL, NULL)); /* nothing new: no sync */
    CHECK(t_stats(st).interval_syncs == 1);
    check_n(st, "f", 3, d);
    kvp_store_close(st);
    clear_n(d, 3);
}

typedef struct {
    kvp_store_h         st;
    kvp_session_desc_t *d;
} during_t;

static void put_during(void *arg) /* runs inside the tick, store lock dropped */
{
    during_t *a = arg;

    CHECK_OK(t_put_session(a->st, NS, "x0", &G, &a->d[0])); /* re-put: a newer write */
    t_session(&G, 700, 0, 700, 1, 3, &a->d[2]);
    CHECK_OK(t_put_session(a->st, NS, "late", &G, &a->d[2]));
}

static bool unsynced(kvp_store_h st, const char *sid)
{
    kvp_sess_t *s;
    bool        u;

    pthread_mutex_lock(&st->lock);
    s = kvp_index_sess_find(&st->sessions, NS, sid);
    CHECK(s != NULL);
    u = s->unsynced;
    pthread_mutex_unlock(&st->lock);
    return u;
}

static void case_during(const char *dir)
{
    kvp_session_desc_t d[3];
    kvp_store_stats_t  s;
    kvp_store_h        st = open_dur(dir, KVP_DURABILITY_INTERVAL, 60000);
    during_t           a  = {st, d};

    put_n(st, "x", 2, 600, d);
    CHECK(unsynced(st, "x0") && unsynced(st, "x1"));
    CHECK_OK(tick(st, put_during, &a));
    s = t_stats(st);
    CHECK(s.interval_syncs == 1 && s.sessions_unsynced == 2);
    CHECK(unsynced(st, "x0") && !unsynced(st, "x1") && unsynced(st, "late"));
    CHECK_OK(tick(st, NULL, NULL));
    s = t_stats(st);
    CHECK(s.interval_syncs == 2 && s.sessions_unsynced == 0);
    CHECK(!unsynced(st, "x0") && !unsynced(st, "late"));
    kvp_store_close(st);
    clear_n(d, 3);
}

int main(int argc, char **argv)
{
    static const t_case_t cases[] = {{"ticks", case_ticks}, {"idle", case_idle},
                                     {"fail", case_fail}, {"during", case_during}, {NULL, NULL}};

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    return t_run_case(argc, argv, cases, "interval");
}
