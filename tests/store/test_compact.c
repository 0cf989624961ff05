/* test_compact.c - segment compaction (store/compact.c, the tier's move): mostly dead segment
 * files are emptied and removed while every live session stays byte-identical, also across a
 * restart; a restore that located its pages just before they moved still reads them; a session
 * deleted while its pages are being moved stays deleted and the rest moves; a full disk during a
 * move loses nothing; the background thread compacts on its own; restores on other threads
 * during puts, deletes and compactions read every byte back; a commit's page write holds no
 * lock a restore needs; a segment whose bytes count live with no page in it (a leak) goes.
 * Layout used by every case: 8 KiB test pages (12 KiB on disk), sessions of 4 chunks x 4 layers
 * (192 KiB), 512 KiB segments, so each segment file holds three sessions. */
#include "store_int.h"
#include "store_test_util.h"
#include "tier_int.h" /* a leaked live count, made by hand */

#include "kvpack/alloc.h"

#include <pthread.h>
#include <unistd.h>

static const tgeom_t G = {4, 2, 64, 16};
#define NS       0xC0u
#define SEG      (512u << 10)
#define SESS     24
#define SESS_ON_DISK (4ull * 4 * 12288)

static kvp_store_h open_compact_scrub(const char *dir, double ratio, uint64_t scrub)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                    KVP_STORE_PARAM_COMPACT | KVP_STORE_PARAM_SEGMENT_BYTES | KVP_STORE_PARAM_SCRUB;
    p.dram_budget = 64u << 20;
    p.db_path     = dir;
    p.compact_dead_ratio = ratio;
    p.segment_bytes      = SEG;
    p.scrub_bytes_per_s  = scrub;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static kvp_store_h open_compact(const char *dir, double ratio)
{
    return open_compact_scrub(dir, ratio, 0);
}

static void sid_of(int i, char *sid)
{
    snprintf(sid, 16, "s%02d", i);
}

/* n sessions, each put and spilled on its own (one segment append each, in order) */
static void put_spilled(kvp_store_h st, kvp_session_desc_t *d, int n)
{
    for (int i = 0; i < n; i++) {
        char sid[16];

        sid_of(i, sid);
        t_session(&G, 500 + (uint64_t)i, 0, 500 + (uint64_t)i, 4, 0, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &G, &d[i]));
        CHECK_OK(kvp_store_session_spill(st, NS, sid));
    }
}

/* delete every session but those with i % 3 == 0: two thirds of each full segment die */
static void delete_most(kvp_store_h st, int n)
{
    for (int i = 0; i < n; i++) {
        char sid[16];

        sid_of(i, sid);
        if (i % 3 != 0) {
            CHECK_OK(kvp_store_session_delete(st, NS, sid));
        }
    }
}

static void check_kept(kvp_store_h st, const kvp_session_desc_t *d, int n, int skip)
{
    for (int i = 0; i < n; i += 3) {
        char sid[16];

        sid_of(i, sid);
        if (i == skip) {
            CHECK_ST(t_check_session(st, NS, sid, &G, &d[i]), KVP_ERR_NOT_FOUND);
        } else {
            CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
            CHECK_OK(kvp_store_session_spill(st, NS, sid)); /* cold again: next reads hit disk */
        }
    }
}

static size_t victims(kvp_store_h st)
{
    uint64_t ids[8];

    return kvp_tier_compact_victims(st->tier, 0.5, ids, 8);
}

static void clear_all(kvp_session_desc_t *d, int n)
{
    for (int i = 0; i < n; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* Dead bytes go: 24 sessions in 8 full segments, two thirds deleted; a compaction leaves no
 * victim, the files hold the live bytes plus at most the active segment's slack, every kept
 * session reads back byte for byte, also after a reopen. */
static void case_reclaim(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_stats_t  s0, s1;
    kvp_store_h        st = open_compact(dir, 0);

    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    s0 = t_stats(st);
    CHECK(s0.disk_live_bytes == SESS / 3 * SESS_ON_DISK);
    CHECK(s0.disk_bytes >= 2 * s0.disk_live_bytes); /* nothing emptied a whole segment */
    CHECK(victims(st) >= 7);
    CHECK_OK(kvp_store_compact(st, 0.5));
    s1 = t_stats(st);
    printf("before: %llu files, %llu bytes (%llu live); after: %llu files, %llu bytes; moved %llu, "
           "removed %llu files (%llu bytes)\n", (unsigned long long)s0.disk_files,
           (unsigned long long)s0.disk_bytes, (unsigned long long)s0.disk_live_bytes,
           (unsigned long long)s1.disk_files, (unsigned long long)s1.disk_bytes,
           (unsigned long long)s1.compact_moved_bytes, (unsigned long long)s1.compact_segments,
           (unsigned long long)s1.compact_freed_bytes);
    CHECK(victims(st) == 0);
    CHECK(s1.disk_live_bytes == s0.disk_live_bytes);
    CHECK(s1.compact_segments >= 7 && s1.disk_files < s0.disk_files);
    CHECK(s1.compact_freed_bytes >= 7ull * SEG && s1.compact_moved_bytes > 0);
    CHECK(s1.disk_bytes <= s1.disk_live_bytes + SEG + SESS_ON_DISK);
    CHECK(s1.disk_errors == 0 && s1.crc_failures == 0);
    /* bytes written: every spilled page's 4 KiB span, then the moved ones again; the logical
     * bytes (what the store asked to persist) do not grow with compaction */
    CHECK(s0.disk_segment_write_bytes == SESS * SESS_ON_DISK);
    CHECK(s1.disk_segment_write_bytes == s0.disk_segment_write_bytes + SESS / 3 * SESS_ON_DISK);
    CHECK(s0.disk_logical_bytes >= SESS * 16ull * 8256 && s1.disk_logical_bytes == s0.disk_logical_bytes);
    check_kept(st, d, SESS, -1);
    CHECK_OK(kvp_store_compact(st, 0.5)); /* nothing left to do */
    CHECK(t_stats(st).compact_segments == s1.compact_segments);
    kvp_store_close(st);

    st = open_compact(dir, 0);
    s0 = t_stats(st);
    CHECK(s0.sessions == SESS / 3 && s0.swept_pages == 0 && s0.disk_live_bytes == s1.disk_live_bytes);
    CHECK(s0.disk_files == s1.disk_files);
    check_kept(st, d, SESS, -1);
    kvp_store_close(st);
    clear_all(d, SESS);
}

/* What a tier hook does, once: delete a session (del), restore s00 from disk and check it (want),
 * or else compact */
typedef struct {
    kvp_store_h               st;
    int                       fired;
    kvp_status_t              status;
    const char               *del;
    const kvp_session_desc_t *want;
} hook_t;

static void hook_fn(void *arg)
{
    hook_t *h = arg;

    if (h->fired++) {
        return; /* once; the compaction's own reads come here too */
    }
    h->status = h->del != NULL    ? kvp_store_session_delete(h->st, NS, h->del)
                : h->want != NULL ? t_check_session(h->st, NS, "s00", &G, h->want)
                                  : kvp_store_compact(h->st, 0.5);
}

/* A restore located its pages in a segment that a compaction then empties and removes before the
 * restore reads: the restore finds the pages at their new place (without that it reads a missing
 * segment and reports the session corrupt). */
static void case_race(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0);
    hook_t             h  = {st, 0, KVP_ERR_IO, NULL, NULL};

    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_READ, hook_fn, &h);
    CHECK_OK(t_check_session(st, NS, "s00", &G, &d[0])); /* its restore runs the compaction */
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_READ, NULL, NULL);
    CHECK(h.fired >= 1 && h.status == KVP_OK);
    CHECK(t_stats(st).compact_segments >= 7 && victims(st) == 0);
    CHECK(t_stats(st).crc_failures == 0);
    check_kept(st, d, SESS, -1);
    kvp_store_close(st);
    clear_all(d, SESS);
}

/* A session deleted while the compaction moves its pages (before they are read, or after their
 * copies were appended and synced but before the locators are written): its pages are not moved
 * back to life (the live bytes are exactly the others', a reopen sweeps nothing), the other pages
 * move, every victim segment goes. */
static void delete_during(const char *dir, kvp_tier_hook_t at)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0);
    hook_t             h  = {st, 0, KVP_ERR_IO, "s00", NULL};
    kvp_store_stats_t  s;

    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    kvp_tier_set_hook(st->tier, at, hook_fn, &h);
    CHECK_OK(kvp_store_compact(st, 0.5));
    kvp_tier_set_hook(st->tier, at, NULL, NULL);
    CHECK(h.fired >= 1 && h.status == KVP_OK);
    s = t_stats(st);
    CHECK(victims(st) == 0 && s.compact_segments >= 7);
    CHECK(s.disk_live_bytes == (SESS / 3 - 1) * SESS_ON_DISK);
    check_kept(st, d, SESS, 0);
    kvp_store_close(st);
    st = open_compact(dir, 0);
    CHECK(t_stats(st).sessions == SESS / 3 - 1 && t_stats(st).swept_pages == 0);
    CHECK(t_stats(st).disk_live_bytes == (SESS / 3 - 1) * SESS_ON_DISK);
    check_kept(st, d, SESS, 0);
    kvp_store_close(st);
    clear_all(d, SESS);
}

static void case_delete_during(const char *dir)
{
    delete_during(dir, KVP_TIER_HOOK_READ);
}

static void case_delete_after_copy(const char *dir)
{
    delete_during(dir, KVP_TIER_HOOK_MOVE);
}

/* A full disk during the move: the compaction fails with the disk's error, counts one disk error,
 * removes nothing and loses nothing; the next one succeeds. */
static void case_disk_full(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0);
    kvp_store_stats_t  s0, s1;

    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    s0 = t_stats(st);
    kvp_store_inject_disk_fail(st, 1, KVP_ERR_NO_SPACE);
    CHECK_ST(kvp_store_compact(st, 0.5), KVP_ERR_NO_SPACE);
    s1 = t_stats(st);
    CHECK(s1.disk_errors == s0.disk_errors + 1 && s1.compact_segments == 0);
    CHECK(s1.disk_files == s0.disk_files && s1.disk_bytes == s0.disk_bytes);
    CHECK(s1.disk_live_bytes == s0.disk_live_bytes);
    check_kept(st, d, SESS, -1);
    CHECK_OK(kvp_store_compact(st, 0.5));
    CHECK(victims(st) == 0 && t_stats(st).compact_segments >= 7);
    check_kept(st, d, SESS, -1);
    kvp_store_close(st);
    clear_all(d, SESS);
}

/* A page whose disk copy went bad in a victim segment: compaction checks every page it moves, so
 * it is not copied; it is dropped as a failed read drops it (crc_failures 1, its session reports
 * ERR_CORRUPT, never a wrong byte), the others move, the file goes. */
static void case_corrupt(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0);
    uint8_t           *page;
    size_t             len;

    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    kvp_store_close(st);
    page = t_page(&G, d[3].chunk_keys[1], 2, 1 * G.page_tokens, G.page_tokens, 0, &len);
    t_flip_on_disk(dir, page + 64);
    kvp_free(page);
    st = open_compact(dir, 0);
    CHECK_OK(kvp_store_compact(st, 0.5));
    CHECK(t_stats(st).crc_failures == 1 && victims(st) == 0 && t_stats(st).compact_segments >= 7);
    CHECK_ST(t_check_session(st, NS, "s03", &G, &d[3]), KVP_ERR_CORRUPT);
    for (int i = 0; i < SESS; i += 3) {
        char sid[16];

        sid_of(i, sid);
        if (i != 3) {
            CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
        }
    }
    kvp_store_close(st);
    clear_all(d, SESS);
}

/* With compact_dead_ratio set, the store's thread compacts by itself (it looks every 2 s). */
static void case_background(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0.5);
    int                i;

    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    for (i = 0; i < 300 && (victims(st) > 0 || t_stats(st).compact_segments < 7); i++) {
        usleep(50 * 1000);
    }
    CHECK(i < 300); /* 15 s */
    check_kept(st, d, SESS, -1);
    kvp_store_close(st);
    clear_all(d, SESS);
}

typedef struct {
    kvp_store_h               st;
    const kvp_session_desc_t *d;
    int                       first; /* sessions first, first + 3, ... below SESS */
    const int                *stop; /* atomic */
    int                       rounds;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;

    while (!__atomic_load_n(r->stop, __ATOMIC_ACQUIRE)) {
        for (int i = r->first; i < SESS; i += 6) {
            char sid[16];

            sid_of(i, sid);
            CHECK_OK(t_check_session(r->st, NS, sid, &G, &r->d[i]));
            CHECK_OK(kvp_store_session_spill(r->st, NS, sid));
        }
        r->rounds++;
    }
    return NULL;
}

/* Two threads restore (get, check every byte, spill again) the kept sessions over and over
 * while the main thread puts, spills and deletes other sessions and compacts, and the scrubber
 * reads everything back at 64 MiB/s: every read stays byte-identical, nothing fails, the scrub
 * finds nothing bad (run under TSan too). */
static void case_concurrent(const char *dir)
{
    kvp_session_desc_t d[SESS], e;
    kvp_store_h        st = open_compact_scrub(dir, 0, 64u << 20);
    int                stop = 0;
    reader_t           r[2];
    pthread_t          th[2];
    uint64_t           t_end;
    int                n = 0;

    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    for (int k = 0; k < 2; k++) {
        r[k] = (reader_t){st, d, 3 * k, &stop, 0};
        CHECK(pthread_create(&th[k], NULL, reader_main, &r[k]) == 0);
    }
    t_end = kvp_time_ns() + 2000000000ull;
    while (kvp_time_ns() < t_end || n < 4) {
        char sid[16];

        snprintf(sid, sizeof(sid), "x%d", n);
        t_session(&G, 900 + (uint64_t)n, 0, 900 + (uint64_t)n, 4, 0, &e);
        CHECK_OK(t_put_session(st, NS, sid, &G, &e));
        CHECK_OK(kvp_store_session_spill(st, NS, sid));
        kvp_session_desc_clear(&e);
        if (n % 3 == 2) { /* two of every three written die: files keep turning mostly dead */
            CHECK_OK(kvp_store_session_delete(st, NS, sid));
            snprintf(sid, sizeof(sid), "x%d", n - 1);
            CHECK_OK(kvp_store_session_delete(st, NS, sid));
        }
        CHECK_OK(kvp_store_compact(st, 0.5));
        n++;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int k = 0; k < 2; k++) {
        CHECK(pthread_join(th[k], NULL) == 0);
    }
    printf("%d writer rounds, reader rounds %d + %d, %llu files removed by compaction, %llu bytes "
           "scrubbed\n", n, r[0].rounds, r[1].rounds,
           (unsigned long long)t_stats(st).compact_segments,
           (unsigned long long)t_stats(st).scrub_bytes);
    CHECK(r[0].rounds > 0 && r[1].rounds > 0 && t_stats(st).compact_segments >= 7);
    CHECK(t_stats(st).scrub_bytes > 0);
    CHECK(t_stats(st).crc_failures == 0 && t_stats(st).disk_errors == 0);
    check_kept(st, d, SESS, -1);
    for (int i = 0; i + 2 < n; i += 3) { /* the writer's survivors */
        char sid[16];

        snprintf(sid, sizeof(sid), "x%d", i);
        t_session(&G, 900 + (uint64_t)i, 0, 900 + (uint64_t)i, 4, 0, &e);
        CHECK_OK(t_check_session(st, NS, sid, &G, &e));
        kvp_session_desc_clear(&e);
    }
    kvp_store_close(st);
    clear_all(d, SESS);
}

/* A commit writes its pages without the tier's lock: from inside a spill's segment write (the
 * WRITE hook, on the spilling thread) a restore of another session on disk runs to its end and
 * reads it byte-identical (with the lock held there, it would wait for itself forever); both
 * sessions read back, also after a reopen. */
static void case_write_unlocked(const char *dir)
{
    kvp_session_desc_t d[2];
    kvp_store_h        st = open_compact(dir, 0);
    hook_t             h  = {st, 0, KVP_ERR_IO, NULL, NULL};

    put_spilled(st, d, 1); /* s00 on disk */
    h.want = &d[0];
    t_session(&G, 777, 0, 777, 4, 0, &d[1]);
    CHECK_OK(t_put_session(st, NS, "s01", &G, &d[1]));
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_WRITE, hook_fn, &h);
    CHECK_OK(kvp_store_session_spill(st, NS, "s01"));
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_WRITE, NULL, NULL);
    CHECK(h.fired >= 1);
    CHECK_OK(h.status);
    CHECK_OK(kvp_store_session_spill(st, NS, "s00"));
    kvp_store_close(st);
    st = open_compact(dir, 0);
    CHECK_OK(t_check_session(st, NS, "s00", &G, &d[0]));
    CHECK_OK(t_check_session(st, NS, "s01", &G, &d[1]));
    CHECK(t_stats(st).crc_failures == 0);
    kvp_store_close(st);
    clear_all(d, 2);
}

/* The compaction's copies are written to the active file A; before their locators are, every page
 * being moved is deleted, so are the other sessions in A, and new sessions roll the active file
 * to another. Nothing names A now and it is not active: it goes at once (it used to stay, a
 * victim with no page in it that every compaction walked the index for, until the next open). */
typedef struct {
    kvp_store_h        st;
    int                fired, n_new;
    kvp_session_desc_t d[8];
} roll_hook_t;

static uint64_t active_seg(kvp_store_h st)
{
    uint64_t id = 0, next;

    while ((next = kvp_tier_segment_after(st->tier, id)) != 0) {
        id = next;
    }
    return id;
}

static void *delete_and_roll_main(void *arg)
{
    roll_hook_t *h = arg;
    uint64_t     a;
    char         sid[16];

    a = active_seg(h->st);
    while (h->n_new < 8 && active_seg(h->st) == a) { /* until a spill rolls the active file */
        snprintf(sid, sizeof(sid), "new%d", h->n_new);
        t_session(&G, 900 + (uint64_t)h->n_new, 0, 900 + (uint64_t)h->n_new, 4, 0,
                  &h->d[h->n_new]);
        CHECK_OK(t_put_session(h->st, NS, sid, &G, &h->d[h->n_new]));
        CHECK_OK(kvp_store_session_spill(h->st, NS, sid));
        h->n_new++;
    }
    for (int i = 0; i < SESS; i += 3) { /* every page being moved */
        sid_of(i, sid);
        CHECK_OK(kvp_store_session_delete(h->st, NS, sid));
    }
    for (int i = 0; i + 1 < h->n_new; i++) { /* the others in A (the last one rolled to B) */
        snprintf(sid, sizeof(sid), "new%d", i);
        CHECK_OK(kvp_store_session_delete(h->st, NS, sid));
    }
    return NULL;
}

/* The hook runs inside the move's hold of the index: the store calls go on a thread of their
 * own, as a client's would (on the hook's thread they would take the store lock inside that hold,
 * the reverse of the store's order). */
static void delete_and_roll(void *arg)
{
    roll_hook_t *h = arg;
    pthread_t    th;

    if (h->fired++ > 0) {
        return;
    }
    CHECK(pthread_create(&th, NULL, delete_and_roll_main, h) == 0);
    CHECK(pthread_join(th, NULL) == 0);
}

static void case_all_gone(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0);
    roll_hook_t        h;
    kvp_store_stats_t  s;

    memset(&h, 0, sizeof(h));
    h.st = st;
    put_spilled(st, d, SESS);
    delete_most(st, SESS);
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_MOVE, delete_and_roll, &h);
    CHECK_OK(kvp_store_compact(st, 0.5));
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_MOVE, NULL, NULL);
    CHECK(h.fired >= 1 && h.n_new >= 1);
    s = t_stats(st);
    CHECK(victims(st) == 0);
    printf("after: %llu files, %llu bytes, %llu live; %d new sessions\n",
           (unsigned long long)s.disk_files, (unsigned long long)s.disk_bytes,
           (unsigned long long)s.disk_live_bytes, h.n_new);
    /* only the last new session is left, alone in the file it rolled to */
    CHECK(s.disk_live_bytes == SESS_ON_DISK && s.disk_bytes == SESS_ON_DISK && s.disk_files == 1);
    kvp_store_close(st);
    clear_all(d, SESS);
    clear_all(h.d, h.n_new);
}

/* Compaction off: files emptied by deletes still go, once the compactor's tick has synced the
 * WAL those deletes are in (their unlink waits for that: a power loss must not find the older
 * records naming bytes that are gone); their bytes count dead at once. The ticker used to run
 * only with compaction on, so such files stayed until a restart. */
static void case_off_unlink(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0);
    kvp_store_stats_t  s;
    int                waited = 0;

    put_spilled(st, d, SESS);
    CHECK(t_stats(st).disk_files > 2);
    for (int i = 0; i < SESS; i++) {
        char sid[16];

        sid_of(i, sid);
        CHECK_OK(kvp_store_session_delete(st, NS, sid));
    }
    CHECK(t_stats(st).disk_live_bytes == 0);
    for (s = t_stats(st); s.disk_files > 1 && waited < 100; s = t_stats(st), waited++) {
        usleep(100 * 1000); /* the tick is every 2 s */
    }
    printf("off_unlink: %llu files, %llu bytes after %d ms\n",
           (unsigned long long)s.disk_files, (unsigned long long)s.disk_bytes, waited * 100);
    CHECK(s.disk_files <= 1 && s.disk_live_bytes == 0);
    kvp_store_close(st);
    clear_all(d, SESS);
}

/* A segment whose bytes stay counted live with no page in it (a commit short of memory could not
 * look up the old place it replaced: "a leak, not a loss"): its sessions deleted, the compaction
 * finds no page to move and counts the bytes dead, and the file goes. It used to stay, picked as
 * a victim at every compaction (a walk of every locator each 2 s) and never removed. */
static void case_unnamed(const char *dir)
{
    kvp_session_desc_t d[SESS];
    kvp_store_h        st = open_compact(dir, 0);
    kvp_store_stats_t  s0, s1;
    uint64_t           first;

    put_spilled(st, d, SESS);
    first = kvp_tier_segment_after(st->tier, 0); /* s00..s02 */
    CHECK(first != 0);
    pthread_mutex_lock(&st->tier->mu);
    (void)kvp_segs_live_add(st->tier->segs, first, 12288); /* the leaked count */
    pthread_mutex_unlock(&st->tier->mu);
    for (int i = 0; i < 3; i++) {
        char sid[16];

        sid_of(i, sid);
        CHECK_OK(kvp_store_session_delete(st, NS, sid));
    }
    s0 = t_stats(st);
    CHECK(victims(st) == 1);
    CHECK_OK(kvp_store_compact(st, 0.5));
    s1 = t_stats(st);
    printf("unnamed: %llu -> %llu files, %llu -> %llu live bytes\n",
           (unsigned long long)s0.disk_files, (unsigned long long)s1.disk_files,
           (unsigned long long)s0.disk_live_bytes, (unsigned long long)s1.disk_live_bytes);
    CHECK(victims(st) == 0 && s1.disk_files == s0.disk_files - 1);
    CHECK(s1.disk_live_bytes == s0.disk_live_bytes - 12288);
    for (int i = 3; i < SESS; i++) { /* the rest untouched */
        char sid[16];

        sid_of(i, sid);
        CHECK_OK(t_check_session(st, NS, sid, &G, &d[i]));
    }
    kvp_store_close(st);
    clear_all(d, SESS);
}

int main(int argc, char **argv)
{
    static const t_case_t cases[] = {{"reclaim", case_reclaim},
                                     {"race", case_race},
                                     {"delete_during", case_delete_during},
                                     {"delete_after_copy", case_delete_after_copy},
                                     {"disk_full", case_disk_full},
                                     {"background", case_background},
                                     {"concurrent", case_concurrent},
                                     {"corrupt", case_corrupt},
                                     {"write_unlocked", case_write_unlocked},
                                     {"all_gone", case_all_gone},
                                     {"off_unlink", case_off_unlink},
                                     {"unnamed", case_unnamed},
                                     {NULL, NULL}};

    return t_run_case(argc, argv, cases, "compact");
}
