/* test_disk_races.c - what is on disk stays what was acknowledged when the store's state changes
 * behind a step that dropped its lock, or behind a put that was not written.
 * load_race: a page read back from disk (its lock dropped for the read) while its session is
 *   deleted, its segment file removed, and the same page put again under a new write-through
 *   session: the read's "missing" verdict is about the copy that went, so it must not delete the
 *   new copy's locator. The reader gets the page (from DRAM) and the new session reopens whole.
 * load_race_emfile: the same race, but the read fails for want of fds (a transient ERR_IO): the
 *   page is in DRAM again by then, so the get is OK all the same.
 * spill_reput: --durability spill; a spilled session put again with one chunk changed, then the
 *   process is SIGKILLed. The new put was only in DRAM and may be lost, but the version whose spill
 *   returned must reopen whole (the update must not delete the pages its record names). The
 *   chunk only the old version names leaves the disk once the update is spilled, or with a
 *   delete of the session, also after an update of the update.
 * open_oom: each allocation of an open failing in turn loses no session.
 * evict_oom: loose pages evicted to disk while allocations fail: every acknowledged page reads
 *   back.
 * bad_locator: a page locator whose length, segment id (to 0, the inline pages' id) or offset
 *   (off the 4 KiB grid) went bad on disk, or that was cut short or emptied (an empty value once
 *   asked the pool for a 0-byte slot: SIGFPE), is a corrupt page (ERR_CORRUPT), never a crash,
 *   and a scrub finds it; the other sessions still read back.
 * lost_segment: the highest segment file goes missing between runs; its id is given to a new file
 *   after the restart, and reading the damaged session must not take that file (another
 *   session's pages, acked under sync) with it.
 * stray_segs: files in seg/ kvpack did not write (upper-case hex, an id that would wrap) neither
 *   stop the open nor get removed, and new segments are numbered as before.
 * fd_limit: out of file descriptors (RLIMIT_NOFILE lowered so opening a segment fails EMFILE), a
 *   get of a spilled session fails with a transient error, not ERR_CORRUPT or NOT_FOUND, and drops
 *   nothing: with the limit back the same get is byte-identical, and so after a reopen.
 * fd_idle: out of fds while idle segment read fds are cached: the open (or dup) that hit EMFILE
 *   gives them back and tries again, so the get is served (it failed ERR_IO while they sat).
 * fd_cap: more segment files than the cap of cached read fds (64 KiB files, one page each, cap 4):
 *   every session reads back byte-identical, twice, while the process's open fds stay within the
 *   cap (plus slack) of what it had before; a session spread over 3 files read under a cap of 2
 *   (the plan's first file's cached fd closed while the plan holds its duplicate) reads whole.
 * drop_log: a session of 6 pages whose segment files are removed while the store is open: its get
 *   is ERR_CORRUPT and the log says so in one "missing" line naming the count and the first page,
 *   and one "cannot open segment" line, not one line per page (a log flood, soak audit F4). */
#include "store_int.h"
#include "tier_int.h"
#include "store_test_util.h"

#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS 0xD15Cu

/* fp16 pages of 65,600 bytes (a 69,632-byte span) in 64 KiB segment files: each page commit fills
 * a file, so the next one rolls and a file dies with its only page */
static const tgeom_t GB = {1, 8, 128, 16};
/* small pages, 8,256 bytes */
static const tgeom_t GS = {1, 2, 64, 16};

static kvp_store_h open_st(const char *dir, kvp_durability_t dur, uint64_t segment_bytes)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                   KVP_STORE_PARAM_DURABILITY | KVP_STORE_PARAM_COMPACT |
                   KVP_STORE_PARAM_SEGMENT_BYTES;
    p.dram_budget        = 64u << 20;
    p.db_path            = dir;
    p.durability         = dur;
    p.compact_dead_ratio = 0; /* no compaction: nothing moves on its own */
    p.segment_bytes      = segment_bytes;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

typedef struct {
    kvp_store_h               st;
    int                       fired;
    const kvp_session_desc_t *z;
    kvp_status_t              del, put, sput;
    int                       emfile; /* then: no fd left for the reader's open (EMFILE) */
    struct rlimit             was;
} race_t;

/* runs inside the reader's disk read, with the store lock dropped */
static void race_hook(void *arg)
{
    race_t *r = arg;

    if (r->fired++) {
        return;
    }
    r->del  = kvp_store_session_delete(r->st, NS, "X"); /* page P leaves the disk, its file dies */
    r->put  = t_put_pages(r->st, NS, &GB, r->z);        /* the same prefix page put again ... */
    r->sput = kvp_store_session_put(r->st, NS, "Z", r->z); /* ... and written with session Z */
    if (r->emfile) { /* the reader's open of the segment file (still there) fails EMFILE */
        int           fd  = dup(0);
        struct rlimit low = r->was;

        close(fd);
        low.rlim_cur = (rlim_t)fd;
        CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    }
}

/* emfile: the read of the old copy fails for want of fds instead (segments of 4 MiB: the file
 * stays, so the open fails EMFILE, a transient ERR_IO), with the same outcome: the page is in
 * DRAM, so the get is OK (it answered ERR_IO). */
static void load_race(const char *dir, int emfile)
{
    kvp_session_desc_t x, f, z;
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_WRITE_THROUGH, emfile ? 4u << 20 : 64u << 10);
    race_t             r  = {st, 0, NULL, KVP_ERR_IO, KVP_ERR_IO, KVP_ERR_IO, emfile, {0, 0}};
    kvp_page_ref_h     ref = NULL;
    kvp_status_t       s;
    size_t             len = 0;

    t_session(&GB, 7, 0, 7, 1, 0, &x); /* one chunk: page P */
    t_session(&GB, 8, 0, 8, 1, 0, &f); /* a filler: P's file is no longer the active one */
    t_session(&GB, 7, 1, 9, 1, 0, &z); /* Z shares X's chunk */
    CHECK(memcmp(&x.chunk_keys[0], &z.chunk_keys[0], sizeof(kvp_key128_t)) == 0);
    CHECK_OK(t_put_session(st, NS, "X", &GB, &x));
    CHECK_OK(t_put_session(st, NS, "F", &GB, &f));
    CHECK_OK(kvp_store_session_spill(st, NS, "X")); /* P only on disk */
    r.z = &z;
    CHECK(getrlimit(RLIMIT_NOFILE, &r.was) == 0);
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_READ, race_hook, &r);
    s = kvp_store_page_get(st, NS, x.chunk_keys[0], 0, &ref); /* a GET_PAGES of the prefix */
    CHECK(setrlimit(RLIMIT_NOFILE, &r.was) == 0);
    kvp_tier_set_hook(st->tier, KVP_TIER_HOOK_READ, NULL, NULL);
    CHECK(r.fired == 1 && r.del == KVP_OK && r.put == KVP_OK && r.sput == KVP_OK);
    EXPECT(s == KVP_OK, "page get during the race: %s (the page is in DRAM)", kvp_status_name(s));
    if (s == KVP_OK) {
        EXPECT(kvp_page_ref_data(ref, &len) != NULL && len == 65600, "page bytes %zu", len);
        kvp_page_ref_release(ref);
    }
    EXPECT(t_stats(st).crc_failures == 0, "nothing was corrupt");
    CHECK_OK(t_check_session(st, NS, "Z", &GB, &z));
    kvp_store_close(st);

    st = open_st(dir, KVP_DURABILITY_WRITE_THROUGH, 64u << 10); /* Z was acknowledged on disk */
    s  = t_check_session(st, NS, "Z", &GB, &z);
    EXPECT(s == KVP_OK, "Z after reopen: %s", kvp_status_name(s));
    kvp_store_close(st);
    kvp_session_desc_clear(&x);
    kvp_session_desc_clear(&f);
    kvp_session_desc_clear(&z);
}

static void case_load_race(const char *dir) { load_race(dir, 0); }

static void case_load_race_emfile(const char *dir) { load_race(dir, 1); }

static void case_spill_reput(const char *dir)
{
    kvp_session_desc_t       a, b, c;
    kvp_store_session_info_t info;
    uint64_t                 live_a;
    uint32_t                 n = 0;
    pid_t                    pid;
    int                      wst;
    kvp_store_h              st;
    kvp_status_t             s;

    t_session(&GS, 11, 0, 11, 2, 0, &a); /* chunks c0 c1 */
    t_session(&GS, 11, 1, 12, 2, 0, &b); /* c0 c1': the update changes the last chunk */
    t_session(&GS, 11, 1, 13, 2, 0, &c); /* c0 c1'' */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        st = open_st(dir, KVP_DURABILITY_SPILL, 256u << 20);
        CHECK_OK(t_put_session(st, NS, "S", &GS, &a));
        CHECK_OK(kvp_store_session_spill(st, NS, "S")); /* version a is durable */
        CHECK_OK(t_put_session(st, NS, "S", &GS, &b));  /* the update: DRAM only */
        kill(getpid(), SIGKILL);
        _exit(3);
    }
    CHECK(waitpid(pid, &wst, 0) == pid && WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
    st = open_st(dir, KVP_DURABILITY_SPILL, 256u << 20);
    s  = t_check_session(st, NS, "S", &GS, &a);
    EXPECT(s == KVP_OK, "S after the kill: %s (want the version whose spill returned)",
           kvp_status_name(s));
    CHECK_OK(kvp_store_session_list(st, 0, NULL, &info, 1, &n, NULL));
    EXPECT(n == 1 && info.damaged == 0, "listed %u, damaged %u", n, n ? info.damaged : 0);
    /* an update of an update, then a delete before either was written: nothing left on disk */
    CHECK_OK(t_put_session(st, NS, "S", &GS, &b));
    CHECK_OK(t_put_session(st, NS, "S", &GS, &c));
    CHECK(t_stats(st).disk_live_bytes > 0); /* version a, still whole */
    CHECK_OK(kvp_store_session_delete(st, NS, "S"));
    EXPECT(t_stats(st).disk_live_bytes == 0, "disk bytes after the delete: %llu",
           (unsigned long long)t_stats(st).disk_live_bytes);
    /* put a, spill, update: the spill of the update frees the chunk only a named */
    CHECK_OK(t_put_session(st, NS, "S", &GS, &a));
    CHECK_OK(kvp_store_session_spill(st, NS, "S"));
    live_a = t_stats(st).disk_live_bytes;
    CHECK_OK(t_put_session(st, NS, "S", &GS, &b));
    CHECK(t_stats(st).disk_live_bytes == live_a);
    CHECK_OK(kvp_store_session_spill(st, NS, "S"));
    EXPECT(t_stats(st).disk_live_bytes == live_a, "after the update's spill: %llu, want %llu "
           "(c1 gone, c1' written)", (unsigned long long)t_stats(st).disk_live_bytes,
           (unsigned long long)live_a);
    /* the update again, then a graceful close (spills it): the new version reopens */
    CHECK_OK(t_put_session(st, NS, "S", &GS, &b));
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SPILL, 256u << 20);
    CHECK_OK(t_check_session(st, NS, "S", &GS, &b));
    { /* c1, named by no record now, is gone */
        kvp_page_ref_h ref = NULL;

        s = kvp_store_page_get(st, NS, a.chunk_keys[1], 0, &ref);
        EXPECT(s == KVP_ERR_NOT_FOUND, "the old chunk after the reopen: %s", kvp_status_name(s));
        kvp_page_ref_release(ref);
    }
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
    kvp_session_desc_clear(&b);
    kvp_session_desc_clear(&c);
}

/* Out of memory at every allocation of an open in turn: the open succeeds or fails with an
 * error, and the next open finds every session whole (a record that could not be read for want of
 * memory must not be taken as unreadable: the sweep would delete its pages). */
static void case_open_oom(const char *dir)
{
    kvp_session_desc_t d[3];
    const char        *sid[3] = {"o0", "o1", "o2"};
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_WRITE_THROUGH, 256u << 20);
    kvp_store_params_t p  = {0};
    int                fired = 1, failed = 0;

    for (int i = 0; i < 3; i++) {
        t_session(&GS, 50, i > 0, 51 + (uint64_t)i, 3, 5, &d[i]); /* o1, o2 share a chunk */
        CHECK_OK(t_put_session(st, NS, sid[i], &GS, &d[i]));
    }
    kvp_store_close(st);
    p.field_mask = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY | KVP_STORE_PARAM_COMPACT;
    p.db_path    = dir;
    p.durability = KVP_DURABILITY_WRITE_THROUGH;
    for (uint64_t n = 1; fired; n++) {
        kvp_status_t s;

        kvp_alloc_fail_at(n);
        s     = kvp_store_open(&p, &st);
        fired = !kvp_alloc_fail_armed(); /* else the open needed fewer than n: done */
        kvp_alloc_fail_at(0);
        if (s == KVP_OK) {
            kvp_store_close(st);
        } else {
            failed++;
        }
        st = open_st(dir, KVP_DURABILITY_WRITE_THROUGH, 256u << 20);
        for (int i = 0; i < 3; i++) {
            kvp_status_t c = t_check_session(st, NS, sid[i], &GS, &d[i]);

            if (c != KVP_OK) {
                fprintf(stderr, "FAIL: allocation %llu of the open failed (open: %s): %s -> %s\n",
                        (unsigned long long)n, kvp_status_name(s), sid[i], kvp_status_name(c));
                exit(1);
            }
        }
        kvp_store_close(st);
    }
    printf("%d opens failed for want of memory, none lost a session\n", failed);
    CHECK(failed > 0);
    for (int i = 0; i < 3; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* Eviction of loose pages (put, named by no session: written to disk, their DRAM copies
 * dropped) with each of its allocations failing in turn: every page still reads back (no page may
 * count as written out when its batch could not even be made). */
static void case_evict_oom(const char *dir)
{
    kvp_session_desc_t d;
    kvp_store_params_t p = {0};
    kvp_store_h        st;
    int                fired = 1, failed = 0;

    p.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DB_PATH |
                    KVP_STORE_PARAM_DURABILITY | KVP_STORE_PARAM_COMPACT;
    p.dram_budget = 4u << 20;
    p.db_path     = dir;
    p.durability  = KVP_DURABILITY_SPILL;
    CHECK_OK(kvp_store_open(&p, &st));
    t_session(&GS, 60, 0, 60, 40, 0, &d);
    CHECK_OK(t_put_pages(st, NS, &GS, &d)); /* 40 loose pages, ~480 KiB of slots */
    for (uint64_t n = 1; fired; n++) {
        kvp_status_t s;

        pthread_mutex_lock(&st->lock);
        kvp_alloc_fail_at(n);
        s     = kvp_store_make_room(st, (size_t)st->pool.budget - 64 * 1024, NULL); /* all out */
        fired = !kvp_alloc_fail_armed(); /* else it needed fewer than n: done */
        kvp_alloc_fail_at(0);
        pthread_mutex_unlock(&st->lock);
        failed += s != KVP_OK;
        for (uint32_t c = 0; c < d.n_chunks; c++) {
            kvp_page_ref_h ref = NULL;
            kvp_status_t   g   = kvp_store_page_get(st, NS, d.chunk_keys[c], 0, &ref);

            if (g != KVP_OK) {
                fprintf(stderr, "FAIL: allocation %llu of the eviction failed (%s): page %u -> "
                        "%s\n", (unsigned long long)n, kvp_status_name(s), c,
                        kvp_status_name(g));
                exit(1);
            }
            kvp_page_ref_release(ref);
        }
    }
    printf("%d evictions failed for want of memory, every page read back\n", failed);
    CHECK(failed > 0 && t_stats(st).disk_live_bytes > 0); /* they went to disk in the end */
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

/* A page locator whose length went bad in the index (block checksums are off for the pages
 * column family: a page's own CRC guards its bytes): the page is corrupt, ERR_CORRUPT and
 * dropped, not a request for gigabytes of DRAM (ERR_NO_SPACE) retried on every read. Likewise a
 * value cut to 16 bytes or to none: neither a locator nor a page. A scrub pass finds each first
 * (it judged such an entry a stale copy of nothing and kept it, listed healthy). */
static void case_bad_locator(const char *dir)
{
    static const char *what[] = {"length", "segment id", "offset", "value cut short",
                                 "value emptied"};
    static const size_t vlen_w[] = {LOC_BYTES, LOC_BYTES, LOC_BYTES, 16, 0};
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_WRITE_THROUGH, 256u << 20);
    kvp_session_desc_t ok;

    t_session(&GB, 60, 0, 60, 2, 0, &ok); /* a healthy session: still served at the end */
    CHECK_OK(t_put_session(st, NS, "ok", &GB, &ok));
    CHECK_OK(kvp_store_session_spill(st, NS, "ok"));
    for (int bad = 0; bad < 5; bad++) {
        kvp_session_desc_t d;
        kvp_tier_pkey_t    pk;
        uint8_t            k[PKEY_BYTES], v[LOC_BYTES];
        uint64_t           seg, off;
        uint32_t           len;
        char              *val, *err = NULL, sid[8];
        size_t             vlen;
        kvp_status_t       s;
        kvp_store_scrub_t  sc;

        snprintf(sid, sizeof(sid), "L%d", bad);
        t_session(&GB, 70 + 10 * bad, 0, 70 + 10 * bad, 2, 0, &d);
        CHECK_OK(t_put_session(st, NS, sid, &GB, &d));
        CHECK_OK(kvp_store_session_spill(st, NS, sid)); /* its pages on disk only */
        pk = (kvp_tier_pkey_t){NS, d.chunk_keys[1], 0};
        tier_page_key(&pk, k);
        val = rocksdb_get_cf(st->tier->db, st->tier->ro, st->tier->cf[CF_PAGES], (const char *)k,
                             sizeof(k), &vlen, &err);
        CHECK(err == NULL && val != NULL && tier_loc_decode(val, vlen, &seg, &off, &len));
        rocksdb_free(val);
        /* one flipped bit: a 2 GiB length; segment 0 (it names inline pages: a NULL copy
         * crashed the node); an offset off the grid */
        tier_loc_encode(bad == 1 ? 0 : seg, bad == 2 ? off | 1 : off,
                        bad == 0 ? len | 0x80000000u : len, v);
        rocksdb_put_cf(st->tier->db, st->tier->wo_sync, st->tier->cf[CF_PAGES], (const char *)k,
                       sizeof(k), (const char *)v, vlen_w[bad], &err);
        CHECK(err == NULL);
        CHECK_OK(kvp_store_scrub(st, &sc)); /* the scrubber finds it first: counted, dropped */
        EXPECT(sc.bad_pages == 1, "scrub of a bad locator %s: %llu bad pages", what[bad],
               (unsigned long long)sc.bad_pages);
        s = t_check_session(st, NS, sid, &GB, &d);
        EXPECT(s == KVP_ERR_CORRUPT, "session with a bad locator %s: %s", what[bad],
               kvp_status_name(s));
        EXPECT(t_stats(st).crc_failures == (uint64_t)bad + 1, "bad %s counted as a bad page: %llu",
               what[bad], (unsigned long long)t_stats(st).crc_failures);
        kvp_session_desc_clear(&d);
    }
    CHECK_OK(t_check_session(st, NS, "ok", &GB, &ok));
    kvp_session_desc_clear(&ok);
    kvp_store_close(st);
}

static void seg_file(const char *dir, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/seg/%s", dir, name);
}

/* the id of the highest segment file in dir/seg that holds bytes (0: none) */
static uint64_t highest_segment(const char *dir)
{
    char           path[600];
    DIR           *dp;
    struct dirent *e;
    uint64_t       high = 0;

    snprintf(path, sizeof(path), "%s/seg", dir);
    dp = opendir(path);
    CHECK(dp != NULL);
    while ((e = readdir(dp)) != NULL) {
        struct stat sb;
        uint64_t    id = strtoull(e->d_name, NULL, 16);

        seg_file(dir, e->d_name, path, sizeof(path));
        if (strlen(e->d_name) == 20 && stat(path, &sb) == 0 && sb.st_size > 0 && id > high) {
            high = id;
        }
    }
    closedir(dp);
    return high;
}

static void case_lost_segment(const char *dir)
{
    kvp_session_desc_t a, b, c, d;
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    char               path[600];
    uint64_t           high;

    t_session(&GB, 1, 0, 11, 2, 0, &a);
    t_session(&GB, 2, 0, 22, 2, 0, &b);
    t_session(&GB, 3, 0, 33, 2, 0, &c);
    t_session(&GB, 4, 0, 44, 2, 0, &d);
    CHECK_OK(t_put_session(st, NS, "A", &GB, &a));
    CHECK_OK(t_put_session(st, NS, "B", &GB, &b)); /* B's second page: the highest file */
    kvp_store_close(st);
    high = highest_segment(dir);
    CHECK(high > 1);
    snprintf(path, sizeof(path), "%s/seg/%016llx.seg", dir, (unsigned long long)high);
    CHECK(unlink(path) == 0);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    CHECK_OK(t_put_session(st, NS, "C", &GB, &c)); /* a new file takes the lost one's id */
    CHECK_OK(t_put_session(st, NS, "D", &GB, &d));
    EXPECT(t_check_session(st, NS, "B", &GB, &b) == KVP_ERR_CORRUPT, "B lost a file");
    CHECK_OK(t_check_session(st, NS, "C", &GB, &c));
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    EXPECT(t_check_session(st, NS, "C", &GB, &c) == KVP_OK, "C lost with B's file");
    CHECK_OK(t_check_session(st, NS, "A", &GB, &a));
    CHECK_OK(t_check_session(st, NS, "D", &GB, &d));
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
    kvp_session_desc_clear(&b);
    kvp_session_desc_clear(&c);
    kvp_session_desc_clear(&d);
}

static void case_stray_segs(const char *dir)
{
    static const char *stray[] = {"ffffffffffffffff.seg", "00000000000000AB.seg",
                                  "000000000000001.seg"};
    kvp_session_desc_t a;
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    char               path[600];
    struct stat        sb;

    kvp_store_close(st); /* seg/ exists */
    for (size_t i = 0; i < sizeof(stray) / sizeof(stray[0]); i++) {
        int fd;

        seg_file(dir, stray[i], path, sizeof(path));
        fd = open(path, O_CREAT | O_WRONLY, 0600);
        CHECK(fd >= 0);
        close(fd);
    }
    t_session(&GB, 5, 0, 55, 2, 0, &a);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10); /* upper-case hex stopped the open */
    CHECK_OK(t_put_session(st, NS, "A", &GB, &a));
    seg_file(dir, "0000000000000001.seg", path, sizeof(path));
    EXPECT(stat(path, &sb) == 0, "the first segment is not numbered 1");
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    EXPECT(t_check_session(st, NS, "A", &GB, &a) == KVP_OK, "A lost after a restart");
    kvp_store_close(st);
    for (size_t i = 0; i < sizeof(stray) / sizeof(stray[0]); i++) {
        seg_file(dir, stray[i], path, sizeof(path));
        EXPECT(stat(path, &sb) == 0, "stray file %s removed", stray[i]);
    }
    kvp_session_desc_clear(&a);
}

/* Whether session sid is listed as damaged (it must be listed). */
static bool listed_damaged(kvp_store_h st, const char *sid)
{
    kvp_store_session_info_t info[8];
    uint32_t                 n = 0;

    CHECK_OK(kvp_store_session_list(st, 0, NULL, info, 8, &n, NULL));
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(info[i].sid, sid) == 0) {
            return info[i].damaged != 0;
        }
    }
    CHECK(!"session listed");
    return true;
}

static void case_fd_limit(const char *dir)
{
    kvp_session_desc_t a, b;
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    struct rlimit      was, low;
    kvp_status_t       s;
    int                fd;

    t_session(&GB, 6, 0, 66, 3, 0, &a); /* 3 pages, one segment file each */
    t_session(&GB, 7, 0, 77, 1, 0, &b);
    CHECK_OK(t_put_session(st, NS, "A", &GB, &a));
    CHECK_OK(t_put_session(st, NS, "B", &GB, &b));
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10); /* cold, no segment opened for reading */
    /* no fd left: the lowest free one becomes the limit, so any new one fails with EMFILE */
    fd = dup(0);
    CHECK(fd >= 0 && close(fd) == 0);
    CHECK(getrlimit(RLIMIT_NOFILE, &was) == 0 && (rlim_t)fd < was.rlim_cur);
    low          = was;
    low.rlim_cur = (rlim_t)fd;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    s = t_check_session(st, NS, "A", &GB, &a);
    CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
    EXPECT(s != KVP_OK && s != KVP_ERR_CORRUPT && s != KVP_ERR_NOT_FOUND,
           "get out of fds: %s (want a transient error)", kvp_status_name(s));
    EXPECT(!listed_damaged(st, "A"), "A listed damaged after a get out of fds");
    EXPECT(t_check_session(st, NS, "A", &GB, &a) == KVP_OK, "A lost to a get out of fds");
    CHECK_OK(t_check_session(st, NS, "B", &GB, &b));
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    EXPECT(!listed_damaged(st, "A"), "A listed damaged after a reopen");
    EXPECT(t_check_session(st, NS, "A", &GB, &a) == KVP_OK, "A lost after a reopen");
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
    kvp_session_desc_clear(&b);
}

#define IDLE_SESS 4

static void case_fd_idle(const char *dir)
{
    kvp_session_desc_t d[IDLE_SESS];
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    struct rlimit      was, low;
    kvp_status_t       s;
    char               sid[8];
    int                fd;

    for (int i = 0; i < IDLE_SESS; i++) { /* one page each: a segment file each */
        snprintf(sid, sizeof(sid), "I%d", i);
        t_session(&GB, 200 + (uint64_t)i, 0, 200 + (uint64_t)i, 1, 0, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &GB, &d[i]));
    }
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10); /* cold */
    for (int i = 0; i < IDLE_SESS - 1; i++) { /* their files' read fds cached, then idle */
        snprintf(sid, sizeof(sid), "I%d", i);
        CHECK_OK(t_check_session(st, NS, sid, &GB, &d[i]));
    }
    fd = dup(0); /* no fd left: the lowest free one becomes the limit */
    CHECK(fd >= 0 && close(fd) == 0);
    CHECK(getrlimit(RLIMIT_NOFILE, &was) == 0 && (rlim_t)fd < was.rlim_cur);
    low          = was;
    low.rlim_cur = (rlim_t)fd;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    snprintf(sid, sizeof(sid), "I%d", IDLE_SESS - 1);
    s = t_check_session(st, NS, sid, &GB, &d[IDLE_SESS - 1]);
    CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
    EXPECT(s == KVP_OK, "get out of fds with idle cached read fds: %s", kvp_status_name(s));
    kvp_store_close(st);
    for (int i = 0; i < IDLE_SESS; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* The process's open file descriptors (the directory's own included). */
static int open_fds(void)
{
    DIR *dp = opendir("/proc/self/fd");
    int  n  = 0;

    CHECK(dp != NULL);
    while (readdir(dp) != NULL) {
        n++;
    }
    closedir(dp);
    return n - 2; /* . and .. */
}

#define CAP_SESS 24
#define CAP_FDS  4
#define CAP_SLACK 3 /* RocksDB may open a file of its own meanwhile */

static void case_fd_cap(const char *dir)
{
    kvp_session_desc_t d[CAP_SESS], m[3];
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    kvp_tier_disk_t    disk;
    char               sid[16];
    int                base, most = 0;

    for (int i = 0; i < CAP_SESS; i++) { /* one page each: a segment file each */
        snprintf(sid, sizeof(sid), "s%d", i);
        t_session(&GB, 100 + (uint64_t)i, 0, 100 + (uint64_t)i, 1, 0, &d[i]);
        CHECK_OK(t_put_session(st, NS, sid, &GB, &d[i]));
    }
    for (uint32_t c = 0; c < 3; c++) { /* M2's 3 pages in 3 files: M0 and M1 put its prefix */
        snprintf(sid, sizeof(sid), "M%u", c);
        t_session(&GB, 9, c + 1, 90 + c, c + 1, 0, &m[c]);
        CHECK_OK(t_put_session(st, NS, sid, &GB, &m[c]));
    }
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10); /* every session cold, on disk only */
    kvp_tier_disk_stats(st->tier, &disk);
    CHECK(disk.files >= CAP_SESS + 3);
    kvp_tier_set_read_fds(st->tier, CAP_FDS);
    base = open_fds();
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < CAP_SESS; k++) {
            int i = round == 0 ? k : CAP_SESS - 1 - k, now;

            snprintf(sid, sizeof(sid), "s%d", i);
            EXPECT(t_check_session(st, NS, sid, &GB, &d[i]) == KVP_OK, "%s read back", sid);
            CHECK_OK(kvp_store_session_spill(st, NS, sid)); /* read from disk again next round */
            now  = open_fds();
            most = now > most ? now : most;
        }
    }
    EXPECT(most <= base + CAP_FDS + CAP_SLACK, "%d fds open reading %llu segment files (%d before, "
           "cap %d)", most, (unsigned long long)disk.files, base, CAP_FDS);
    kvp_tier_set_read_fds(st->tier, 2);
    EXPECT(t_check_session(st, NS, "M2", &GB, &m[2]) == KVP_OK, "M2 read under a cap of 2");
    EXPECT(open_fds() <= base + 2 + CAP_SLACK, "%d fds open under a cap of 2", open_fds());
    kvp_store_close(st);
    for (int i = 0; i < CAP_SESS; i++) {
        kvp_session_desc_clear(&d[i]);
    }
    for (int c = 0; c < 3; c++) {
        kvp_session_desc_clear(&m[c]);
    }
}

static int missing_lines, open_lines;
static char missing_msg[512];

static void count_log(kvp_log_level_t level, const char *module, const char *msg)
{
    (void)level;
    (void)module;
    if (strstr(msg, "missing") != NULL && strstr(msg, "dropped") != NULL) {
        missing_lines++;
        snprintf(missing_msg, sizeof(missing_msg), "%s", msg);
    }
    open_lines += strstr(msg, "cannot open segment") != NULL;
}

static void case_drop_log(const char *dir)
{
    kvp_session_desc_t a;
    kvp_store_h        st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10);
    char               path[600];
    DIR               *dp;
    struct dirent     *e;
    kvp_status_t       s;

    t_session(&GS, 3, 0, 33, 6, 0, &a); /* 6 pages of 8,256 bytes */
    CHECK_OK(t_put_session(st, NS, "A", &GS, &a));
    kvp_store_close(st);
    st = open_st(dir, KVP_DURABILITY_SYNC, 64u << 10); /* cold; its files are in the table */
    snprintf(path, sizeof(path), "%s/seg", dir);
    dp = opendir(path);
    CHECK(dp != NULL);
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] != '.') {
            seg_file(dir, e->d_name, path, sizeof(path));
            CHECK(unlink(path) == 0);
        }
    }
    closedir(dp);
    kvp_log_set_cb(count_log);
    s = t_check_session(st, NS, "A", &GS, &a);
    kvp_log_set_cb(NULL);
    EXPECT(s == KVP_ERR_CORRUPT, "get of a session whose files are gone: %s", kvp_status_name(s));
    EXPECT(missing_lines == 1, "%d log lines for 6 missing pages (want one)", missing_lines);
    EXPECT(strstr(missing_msg, "6 pages") != NULL && strstr(missing_msg, "first") != NULL,
           "the line names the count and the first page: %s", missing_msg);
    EXPECT(open_lines == 1, "%d \"cannot open segment\" lines for one read", open_lines);
    kvp_store_close(st);
    kvp_session_desc_clear(&a);
}

int main(int argc, char **argv)
{
    static const t_case_t cases[] = {
        {"load_race", case_load_race},
        {"load_race_emfile", case_load_race_emfile},
        {"spill_reput", case_spill_reput},
        {"open_oom", case_open_oom},
        {"evict_oom", case_evict_oom},
        {"bad_locator", case_bad_locator},
        {"lost_segment", case_lost_segment},
        {"stray_segs", case_stray_segs},
        {"fd_limit", case_fd_limit},
        {"fd_idle", case_fd_idle},
        {"fd_cap", case_fd_cap},
        {"drop_log", case_drop_log},
        {NULL, NULL},
    };

    return t_run_case(argc, argv, cases, "disk_races") != 0 || kvp_test_result("test_disk_races");
}
