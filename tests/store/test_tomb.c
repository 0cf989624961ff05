/* test_tomb.c - session versions and delete tombstones in the store (last writer wins).
 * versions: a record's version survives close/reopen; an older put is KVP_ERR_STALE and changes
 *   nothing, an equal one is accepted, a newer one replaces; a record written without a version
 *   (unversioned) opens as version 0 and a versioned put replaces it.
 * tombstones: a versioned delete keeps a tombstone that survives reopen, refuses older (and
 *   equal) puts, is cleared by a newer put, is recorded for an unknown session too (still
 *   KVP_ERR_NOT_FOUND), is listed only with KVP_STORE_LIST_DELETED; an older delete is refused.
 * failed_delete: a delete whose commit failed leaves no tombstone (newer puts still go in) and
 *   its retry writes the tombstone to disk (after a reopen it still refuses an older copy).
 * ttl: a tombstone past tomb_ttl_s is dropped, in process and at open.
 * bytes: tombstone_bytes (kvpack_tombstone_bytes) counts what tombstones take: 100k of 21-byte
 *   ids (a DRAM-only store) at most 128 B each, one cleared takes its share off, the count is the
 *   same after a reopen; not under a sanitizer, the resident memory they add stays within 160 B
 *   each and within the gauge + 25 % (a fixed 128-byte id made them about 230 B each).
 * append: an append to a versioned session stamps a newer version (an older put is then STALE).
 * append_base: a replicated append refuses a copy at another version than the one it names; the
 *   inclusive listing that probes one session sees its record or tombstone, never the next one.
 * spill_lost_put: under spill durability a put that supersedes a tombstone and is lost with a
 *   failed stop-time spill leaves the tombstone standing after the restart.
 * damaged: a tombstone whose value fails its crc32c is not used, and stays on disk as it is.
 * older_record: a record no newer than its tombstone at open (an index rebuilt from older files)
 *   is removed then, not served; a newer one stays.
 * older_record_shared: that removal, of a record whose pages share a segment file with another
 *   session's, leaves the other session whole (it ran before the sweep counted the segments'
 *   live bytes, and unlinked the file under it).
 * spill_unversioned: under spill durability, a versioned delete, a newer put, an unversioned
 *   delete and an unversioned put leave the last put standing after a restart (the first
 *   tombstone stayed on disk and the open removed the put as older than it). */
#include "store_test_util.h"
#include "../../store/store_int.h" /* kvp_store_session_put_expect */

#include "kvpack/log.h"

#include <stdio.h>
#include <unistd.h>

static const tgeom_t G = {2, 2, 32, 16}; /* layers, heads, head_dim, P */
#define NS 0x70B5ull

static kvp_store_h open_ttl(const char *dir, uint32_t ttl_s)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask  = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY |
                    (ttl_s ? KVP_STORE_PARAM_TOMB_TTL : 0);
    p.db_path     = dir;
    p.durability  = KVP_DURABILITY_WRITE_THROUGH;
    p.tomb_ttl_s  = ttl_s;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static kvp_status_t put_v(kvp_store_h st, const char *sid, const kvp_session_desc_t *d,
                          uint64_t version)
{
    kvp_status_t s = t_put_pages(st, NS, &G, d);

    return s != KVP_OK ? s : kvp_store_session_put_version(st, NS, sid, d, version);
}

static uint64_t version_of(kvp_store_h st, const char *sid)
{
    kvp_session_desc_t d;
    kvp_store_get_info_t got = {12345, 0, 0};

    CHECK_OK(kvp_store_session_get_info(st, NS, sid, &d, &got));
    kvp_session_desc_clear(&d);
    return got.version;
}

/* The listed entry for sid (with tombstones when deleted_too): 1 found (into *out), 0 not. */
static int listed(kvp_store_h st, const char *sid, int deleted_too, kvp_store_session_info_t *out)
{
    kvp_store_session_info_t info[16];
    uint32_t                 n;

    CHECK_OK(kvp_store_session_list_ex(st, 0, NULL, deleted_too ? KVP_STORE_LIST_DELETED : 0, info,
                                       16, &n, NULL));
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(info[i].sid, sid) == 0) {
            *out = info[i];
            return 1;
        }
    }
    return 0;
}

static void case_versions(const char *dir)
{
    kvp_session_desc_t d1, d2, d0;
    kvp_store_h        st = open_ttl(dir, 0);

    t_session(&G, 1, 0, 1, 2, 5, &d1);
    t_session(&G, 2, 0, 2, 3, 0, &d2);
    t_session(&G, 3, 0, 3, 1, 3, &d0);
    CHECK_OK(put_v(st, "a", &d1, 100));
    CHECK_OK(t_put_session(st, NS, "old", &G, &d0)); /* version 0 (older formats: keycheck_*) */
    kvp_store_close(st);

    st = open_ttl(dir, 0);
    CHECK(version_of(st, "a") == 100);
    CHECK(version_of(st, "old") == 0);
    CHECK_OK(t_check_session(st, NS, "old", &G, &d0));
    CHECK(put_v(st, "a", &d2, 99) == KVP_ERR_STALE);  /* older: refused, nothing changes */
    CHECK_OK(t_check_session(st, NS, "a", &G, &d1));
    CHECK(version_of(st, "a") == 100);
    CHECK(t_stats(st).stale_refused == 1);
    CHECK_OK(put_v(st, "a", &d1, 100));                /* equal: an idempotent retry */
    CHECK_OK(put_v(st, "a", &d2, 200));                /* newer: replaces */
    CHECK_OK(put_v(st, "old", &d2, 50));               /* anything beats version 0 */
    kvp_store_close(st);

    st = open_ttl(dir, 0);
    CHECK(version_of(st, "a") == 200);
    CHECK_OK(t_check_session(st, NS, "a", &G, &d2));
    CHECK(version_of(st, "old") == 50);
    CHECK_OK(t_check_session(st, NS, "old", &G, &d2));
    kvp_store_close(st);
    kvp_session_desc_clear(&d0);
    kvp_session_desc_clear(&d1);
    kvp_session_desc_clear(&d2);
}

static void case_tombstones(const char *dir)
{
    kvp_session_desc_t       d1, d2;
    kvp_store_session_info_t e;
    kvp_store_h              st = open_ttl(dir, 0);

    t_session(&G, 4, 0, 4, 2, 1, &d1);
    t_session(&G, 5, 0, 5, 1, 0, &d2);
    CHECK_OK(put_v(st, "a", &d1, 100));
    CHECK_OK(put_v(st, "keep", &d2, 100));
    CHECK(kvp_store_session_delete_version(st, NS, "keep", 50) == KVP_ERR_STALE); /* older */
    CHECK_OK(t_check_session(st, NS, "keep", &G, &d2));
    CHECK_OK(kvp_store_session_delete_version(st, NS, "a", 300));
    CHECK(kvp_store_session_get(st, NS, "a", &d2) == KVP_ERR_NOT_FOUND);
    CHECK(kvp_store_session_delete_version(st, NS, "ghost", 400) == KVP_ERR_NOT_FOUND);
    CHECK(!listed(st, "a", 0, &e) && !listed(st, "ghost", 0, &e));
    CHECK(listed(st, "a", 1, &e) && e.deleted == 1 && e.version == 300 && e.n_chunks == 0);
    CHECK(listed(st, "ghost", 1, &e) && e.deleted == 1 && e.version == 400);
    CHECK(listed(st, "keep", 1, &e) && e.deleted == 0 && e.version == 100);
    CHECK(t_stats(st).tombstones == 2);
    kvp_store_close(st);

    st = open_ttl(dir, 0);                               /* tombstones survive a reopen */
    CHECK(t_stats(st).tombstones == 2);
    CHECK(put_v(st, "a", &d1, 250) == KVP_ERR_STALE);    /* a late copy older than the delete */
    CHECK(put_v(st, "a", &d1, 300) == KVP_ERR_STALE);    /* deletes win ties */
    CHECK(put_v(st, "ghost", &d1, 399) == KVP_ERR_STALE);
    CHECK(kvp_store_session_get(st, NS, "a", &d2) == KVP_ERR_NOT_FOUND);
    CHECK_OK(put_v(st, "a", &d1, 350));                  /* newer: the tombstone goes */
    CHECK(listed(st, "a", 1, &e) && e.deleted == 0 && e.version == 350);
    CHECK(t_stats(st).tombstones == 1);
    kvp_store_close(st);

    st = open_ttl(dir, 0);
    CHECK(version_of(st, "a") == 350);
    CHECK_OK(t_check_session(st, NS, "a", &G, &d1));
    CHECK(t_stats(st).tombstones == 1);
    CHECK(listed(st, "ghost", 1, &e) && e.deleted == 1);
    kvp_store_close(st);
    kvp_session_desc_clear(&d1);
    kvp_session_desc_clear(&d2);
}

static void case_failed_delete(const char *dir)
{
    kvp_session_desc_t       d;
    kvp_store_session_info_t e;
    kvp_store_h              st = open_ttl(dir, 0);

    t_session(&G, 6, 0, 6, 1, 0, &d);
    CHECK_OK(put_v(st, "t", &d, 100));
    kvp_store_inject_disk_fail(st, 1, KVP_ERR_IO);
    CHECK(kvp_store_session_delete_version(st, NS, "t", 200) == KVP_ERR_IO);
    CHECK(listed(st, "t", 1, &e) && e.deleted == 0 && e.version == 100); /* as it was */
    CHECK(t_stats(st).tombstones == 0);
    CHECK_OK(put_v(st, "t", &d, 150)); /* newer than the record: the failed delete stops nothing */
    CHECK_OK(kvp_store_session_delete_version(st, NS, "t", 200)); /* the client's retry */
    CHECK(listed(st, "t", 1, &e) && e.deleted == 1 && e.version == 200);
    kvp_store_close(st);

    st = open_ttl(dir, 0); /* the retry's tombstone is on disk */
    CHECK(listed(st, "t", 1, &e) && e.deleted == 1 && e.version == 200);
    CHECK(put_v(st, "t", &d, 120) == KVP_ERR_STALE); /* a stale replica's copy stays out */
    CHECK(kvp_store_session_get(st, NS, "t", &d) == KVP_ERR_NOT_FOUND);
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

/* Under spill durability a put that supersedes a tombstone is in DRAM only until it spills: a
 * stop whose spill fails loses it, and the tombstone must still stand after the restart (it was
 * cleared on disk at the put: a stale copy older than the delete then went in). A put that
 * spilled replaces it for good. */
static void case_spill_lost_put(const char *dir)
{
    kvp_session_desc_t       d;
    kvp_store_session_info_t e;
    kvp_store_params_t       p = {0};
    kvp_store_h              st;

    p.field_mask = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY;
    p.db_path    = dir;
    p.durability = KVP_DURABILITY_SPILL;
    t_session(&G, 8, 0, 8, 1, 0, &d);
    CHECK_OK(kvp_store_open(&p, &st));
    CHECK_OK(put_v(st, "t", &d, 100));
    CHECK_OK(kvp_store_session_spill(st, NS, "t"));
    CHECK_OK(kvp_store_session_delete_version(st, NS, "t", 200)); /* tombstone on disk */
    CHECK_OK(put_v(st, "t", &d, 300));                            /* DRAM only */
    CHECK(t_stats(st).tombstones == 0);
    kvp_store_inject_disk_fail(st, 1000, KVP_ERR_IO); /* the stop's spill fails: 300 is lost */
    kvp_store_close(st);

    CHECK_OK(kvp_store_open(&p, &st));
    CHECK(listed(st, "t", 1, &e) && e.deleted == 1 && e.version == 200);
    CHECK(put_v(st, "t", &d, 150) == KVP_ERR_STALE); /* a stale replica's copy stays out */
    CHECK_OK(put_v(st, "t", &d, 400));
    kvp_store_close(st); /* spilled at the stop */

    CHECK_OK(kvp_store_open(&p, &st));
    CHECK(listed(st, "t", 1, &e) && e.deleted == 0 && e.version == 400);
    CHECK(t_stats(st).tombstones == 0); /* the older tombstone was swept at the open */
    CHECK(put_v(st, "t", &d, 350) == KVP_ERR_STALE);
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

static void case_ttl(const char *dir)
{
    kvp_session_desc_t       d;
    kvp_store_session_info_t e;
    kvp_store_h              st = open_ttl(dir, 1);

    t_session(&G, 6, 0, 6, 1, 0, &d);
    CHECK_OK(put_v(st, "x", &d, 10));
    CHECK_OK(kvp_store_session_delete_version(st, NS, "x", 20));
    CHECK(kvp_store_session_delete_version(st, NS, "y", 20) == KVP_ERR_NOT_FOUND);
    CHECK(t_stats(st).tombstones == 2);
    usleep(2100 * 1000);
    CHECK(kvp_store_session_get(st, NS, "x", &d) == KVP_ERR_NOT_FOUND); /* a call sweeps */
    CHECK(t_stats(st).tombstones == 0 && t_stats(st).tombstones_expired == 2);
    CHECK(!listed(st, "x", 1, &e));
    CHECK(kvp_store_session_delete_version(st, NS, "x", 30) == KVP_ERR_NOT_FOUND); /* recorded */
    kvp_store_close(st);

    st = open_ttl(dir, 0);                 /* the default ttl keeps it */
    CHECK(t_stats(st).tombstones == 1);
    kvp_store_close(st);
    usleep(1100 * 1000);
    st = open_ttl(dir, 1);                 /* past a 1 s ttl: swept at open */
    CHECK(t_stats(st).tombstones == 0);
    CHECK_OK(put_v(st, "x", &d, 5));       /* nothing blocks an old version any more */
    kvp_store_close(st);
    st = open_ttl(dir, 1);
    CHECK(version_of(st, "x") == 5);
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

#define TOMB_N       100000u
#define TOMB_MAX_B   128u /* gauge bytes per tombstone of a 21-byte id, buckets included */
#define TOMB_RSS_MAX 160u /* resident bytes per tombstone (the allocator's slack included) */

static void case_bytes(const char *dir)
{
    kvp_session_desc_t d;
    kvp_store_h        st = t_open_store(NULL, 16u << 20, KVP_DURABILITY_SPILL, 0, 0);
    uint64_t           b0, b1, b2, b3;
    size_t             rss0, rss1;
    char               sid[32];

    b0   = t_stats(st).tombstone_bytes;
    rss0 = t_rss_bytes();
    for (uint32_t i = 0; i < TOMB_N; i++) { /* deletes of sessions never put: one tombstone each */
        snprintf(sid, sizeof(sid), "conversation-%08u", i);
        CHECK(kvp_store_session_delete_version(st, NS, sid, 1000 + i) == KVP_ERR_NOT_FOUND);
    }
    rss1 = t_rss_bytes();
    b1   = t_stats(st).tombstone_bytes;
    CHECK(t_stats(st).tombstones == TOMB_N);
    printf("%u tombstones: gauge %.1f B each, RSS %+.1f B each\n", TOMB_N,
           (double)(b1 - b0) / TOMB_N, ((double)rss1 - (double)rss0) / TOMB_N);
    CHECK(b1 > b0 + 64ull * TOMB_N && b1 - b0 <= (uint64_t)TOMB_MAX_B * TOMB_N);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* a sanitizer's RSS measures its quarantine and shadow memory, not the store */
    CHECK(rss1 <= rss0 + (size_t)TOMB_RSS_MAX * TOMB_N);
    CHECK(rss1 <= rss0 + (b1 - b0) + (b1 - b0) / 4);
#endif
    t_session(&G, 7, 0, 7, 1, 0, &d);
    CHECK_OK(put_v(st, "conversation-00000007", &d, 5000)); /* newer: its tombstone goes */
    b2 = t_stats(st).tombstone_bytes;
    CHECK(t_stats(st).tombstones == TOMB_N - 1 && b2 < b1 && b1 - b2 <= TOMB_MAX_B);
    kvp_store_close(st);

    st = open_ttl(dir, 0); /* on disk: counted again as the open loads them */
    CHECK(kvp_store_session_delete_version(st, NS, "a", 10) == KVP_ERR_NOT_FOUND);
    CHECK(kvp_store_session_delete_version(st, NS, "a-much-longer-session-id-of-a-conversation",
                                           10) == KVP_ERR_NOT_FOUND);
    b3 = t_stats(st).tombstone_bytes;
    CHECK(b3 > 0);
    kvp_store_close(st);
    st = open_ttl(dir, 0);
    CHECK(t_stats(st).tombstones == 2 && t_stats(st).tombstone_bytes == b3);
    CHECK_OK(put_v(st, "a", &d, 20));
    CHECK(t_stats(st).tombstones == 1 && t_stats(st).tombstone_bytes < b3);
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

/* Append tokens [from, from + n) (fp16, values from the token index) to sid in namespace ns. */
static kvp_status_t append_on(kvp_store_h st, uint64_t ns, const char *sid, const uint32_t *ids,
                              uint32_t tail, uint32_t from, uint32_t n, uint64_t base)
{
    size_t             cnt = (size_t)G.layers * n * G.heads * G.head_dim;
    float             *k   = kvp_malloc(cnt * sizeof(float), "test k");
    kvp_status_t       s;

    CHECK(k != NULL);
    for (size_t i = 0; i < cnt; i++) {
        k[i] = (float)((from * 31 + i) % 97) / 16.0f;
    }
    s = t_append_f32_on(st, ns, sid, &G, KVP_CODEC_FP16, k, k, n, ids + from - tail, tail + n,
                        base, NULL);
    kvp_free(k);
    return s;
}

static kvp_status_t append_n(kvp_store_h st, uint64_t ns, const char *sid, const uint32_t *ids,
                             uint32_t tail, uint32_t from, uint32_t n)
{
    return append_on(st, ns, sid, ids, tail, from, n, 0);
}

/* An append to a session put at a version of its own stamps a newer one: a put older than the
 * append is refused STALE. */
static void case_append(const char *dir)
{
    uint32_t           ids[64];
    kvp_session_desc_t d;
    kvp_store_h        st = open_ttl(dir, 0);
    uint64_t           ns = NS + 1;
    kvp_store_get_info_t got = {0, 0, 0};

    for (uint32_t i = 0; i < 64; i++) {
        ids[i] = 1000 + i * 7;
    }
    CHECK_OK(append_n(st, ns, "ap", ids, 0, 0, 5)); /* creates it at the store's clock */
    CHECK_OK(kvp_store_session_get_info(st, ns, "ap", &d, &got));
    CHECK(got.version > 0);
    CHECK_OK(kvp_store_session_put_version(st, ns, "ap", &d, got.version + 500));
    kvp_session_desc_clear(&d);
    CHECK_OK(append_n(st, ns, "ap", ids, 5, 5, 20));          /* seals a chunk: 25 = 16 + 9 */
    CHECK_OK(kvp_store_session_get_info(st, ns, "ap", &d, &got));
    CHECK(d.n_chunks == 1 && d.tail_tokens == 9);
    CHECK(kvp_store_session_put_version(st, ns, "ap", &d, got.version - 1) == KVP_ERR_STALE);
    kvp_session_desc_clear(&d);
    kvp_store_close(st);
}

/* The entry a probe of one session gets (KVP_STORE_LIST_INCLUSIVE, tombstones too, max 1):
 * 1 when it is sid's own (into *out), 0 when the first at or after it is another or none. */
static int probed(kvp_store_h st, uint64_t ns, const char *sid, kvp_store_session_info_t *out)
{
    uint32_t n = 9;

    CHECK_OK(kvp_store_session_list_ex(st, ns, sid,
                                       KVP_STORE_LIST_DELETED | KVP_STORE_LIST_INCLUSIVE, out, 1,
                                       &n, NULL));
    CHECK(n <= 1);
    return n == 1 && out->ns == ns && strcmp(out->sid, sid) == 0;
}

/* A replicated append names the version every copy taking it holds (KVP_STORE_APPEND_BASE): a
 * copy at another version refuses it (INVALID) and is unchanged, one at it takes it; a missing
 * session is NOT_FOUND (not created). The probe that finds that version sees a record, a
 * tombstone (an rm) or neither, and never the next session in order. */
static void case_append_base(const char *dir)
{
    uint32_t                 ids[64];
    kvp_store_session_info_t e;
    kvp_store_h              st = open_ttl(dir, 0);
    uint64_t                 ns = NS + 2, v;

    for (uint32_t i = 0; i < 64; i++) {
        ids[i] = 2000 + i * 3;
    }
    CHECK_OK(append_n(st, ns, "b", ids, 0, 0, 5)); /* b: 5 tokens at the store's clock, v */
    CHECK_OK(append_n(st, ns, "c", ids, 0, 0, 3));
    CHECK(probed(st, ns, "b", &e) && e.deleted == 0 && e.tail_tokens == 5 && e.version > 0);
    v = e.version;
    CHECK(!probed(st, ns, "a", &e) && strcmp(e.sid, "b") == 0); /* the next one is not a */
    CHECK(!probed(st, ns, "bb", &e) && strcmp(e.sid, "c") == 0);

    CHECK(append_on(st, ns, "b", ids, 5, 5, 4, v - 1) == KVP_ERR_INVALID); /* behind */
    CHECK(append_on(st, ns, "b", ids, 5, 5, 4, v + 1) == KVP_ERR_INVALID); /* ahead */
    CHECK(probed(st, ns, "b", &e) && e.version == v && e.tail_tokens == 5); /* unchanged */
    CHECK_OK(append_on(st, ns, "b", ids, 5, 5, 4, v));
    CHECK(probed(st, ns, "b", &e) && e.version > v && e.tail_tokens == 9); /* stamped anew */
    v = e.version;
    CHECK(append_on(st, ns, "nope", ids, 0, 0, 4, v) == KVP_ERR_NOT_FOUND);
    CHECK(!probed(st, ns, "nope", &e));

    { /* the append's write: only on the record it read (a put or rm meanwhile wins) */
        kvp_session_desc_t d;
        kvp_sess_expect_t  read = {true, v}, older = {true, v - 1}, none = {false, 0};

        CHECK_OK(kvp_store_session_get(st, ns, "b", &d));
        CHECK(kvp_store_session_put_expect(st, ns, "b", &d, v + 5, &older) == KVP_ERR_INVALID);
        CHECK(kvp_store_session_put_expect(st, ns, "b", &d, v + 5, &none) == KVP_ERR_INVALID);
        CHECK(probed(st, ns, "b", &e) && e.version == v); /* unchanged */
        CHECK(kvp_store_session_put_expect(st, ns, "nope", &d, v + 5, &read) ==
              KVP_ERR_NOT_FOUND);
        CHECK(!probed(st, ns, "nope", &e));
        CHECK_OK(kvp_store_session_put_expect(st, ns, "b", &d, v, &read));
        kvp_session_desc_clear(&d);
    }
    CHECK_OK(kvp_store_session_delete_version(st, ns, "b", v + 1000));
    CHECK(probed(st, ns, "b", &e) && e.deleted == 1 && e.version == v + 1000);
    CHECK(append_on(st, ns, "b", ids, 0, 0, 4, v) == KVP_ERR_NOT_FOUND);
    kvp_store_close(st);
    st = open_ttl(dir, 0); /* the same after a reopen */
    CHECK(probed(st, ns, "b", &e) && e.deleted == 1 && e.version == v + 1000);
    CHECK(probed(st, ns, "c", &e) && e.deleted == 0 && e.tail_tokens == 3);
    kvp_store_close(st);
}

/* meta scan: the first tombstone key into arg (char[256]), counting them in its byte 255 */
static kvp_status_t tomb_key_cb(void *arg, const char *key, size_t klen, const uint8_t *val,
                                size_t vlen)
{
    char *out = arg;

    (void)val;
    (void)vlen;
    if (out[255]++ == 0) {
        snprintf(out, 255, "%.*s", (int)klen, key);
    }
    return KVP_OK;
}

/* A tombstone whose value no longer reads (its crc32c): not used, and kept on disk as it is at
 * every open (it used to be logged "skipped", then deleted as a stray). */
static void case_damaged(const char *dir)
{
    kvp_session_desc_t d;
    kvp_store_h        st = open_ttl(dir, 0);
    kvp_tier_batch_t  *b;
    char               key[256] = {0};
    uint8_t            bad[20]  = {1, 2, 3};

    t_session(&G, 4, 0, 4, 2, 1, &d);
    CHECK_OK(put_v(st, "x", &d, 100));
    CHECK_OK(kvp_store_session_delete_version(st, NS, "x", 300));
    CHECK_OK(kvp_tier_meta_scan(st->tier, "tomb/", tomb_key_cb, key));
    CHECK(key[255] == 1 && strstr(key, "/x") != NULL);
    b = kvp_tier_batch_create();
    CHECK(b != NULL);
    kvp_tier_batch_put_meta(st->tier, b, key, bad, sizeof(bad)); /* its crc32c is wrong */
    CHECK_OK(kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC));
    kvp_tier_batch_destroy(b);
    kvp_store_close(st);
    for (int i = 0; i < 2; i++) {
        st = open_ttl(dir, 0);
        CHECK(t_stats(st).tombstones == 0 && t_stats(st).crc_failures == 1);
        memset(key, 0, sizeof(key));
        CHECK_OK(kvp_tier_meta_scan(st->tier, "tomb/", tomb_key_cb, key));
        CHECK(key[255] == 1 && strstr(key, "/x") != NULL);
        kvp_store_close(st);
    }
    kvp_session_desc_clear(&d);
}

/* A record no newer than its tombstone at open (an index rebuilt from older files can bring
 * them together; a delete removes the record in the batch that writes the tombstone): removed
 * then, not served (it was served as if never deleted). Ties go to the delete; a record newer
 * than its tombstone stays and the tombstone goes. */
static void case_older_record(const char *dir)
{
    static const struct {
        const char *sid;
        uint64_t    rec, tomb;
        int         kept;
    } c[] = {{"x", 100, 300, 0}, {"y", 200, 200, 0}, {"z", 500, 400, 1}};
    kvp_session_desc_t d;
    kvp_store_h        st = open_ttl(dir, 0);
    kvp_tier_batch_t  *b  = kvp_tier_batch_create();
    kvp_session_desc_t got;

    CHECK(b != NULL);
    t_session(&G, 4, 0, 4, 2, 1, &d);
    for (size_t i = 0; i < 3; i++) {
        CHECK_OK(put_v(st, c[i].sid, &d, c[i].rec));
        kvp_store_tomb_batch_put(st, b, NS, c[i].sid, c[i].tomb, kvp_store_wall_ns());
    }
    CHECK_OK(kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC)); /* behind the store's back */
    kvp_tier_batch_destroy(b);
    kvp_store_close(st);
    for (int round = 0; round < 2; round++) {
        st = open_ttl(dir, 0);
        EXPECT(t_stats(st).sessions == 1 && t_stats(st).tombstones == 2,
               "round %d: %llu sessions, %llu tombstones (want 1, 2)", round,
               (unsigned long long)t_stats(st).sessions,
               (unsigned long long)t_stats(st).tombstones);
        for (size_t i = 0; i < 3; i++) {
            kvp_status_t gs = kvp_store_session_get(st, NS, c[i].sid, &got);

            EXPECT(gs == (c[i].kept ? KVP_OK : KVP_ERR_NOT_FOUND), "round %d: %s (record %llu, "
                   "tombstone %llu): get %s", round, c[i].sid, (unsigned long long)c[i].rec,
                   (unsigned long long)c[i].tomb, kvp_status_name(gs));
            if (gs == KVP_OK) {
                kvp_session_desc_clear(&got);
            }
        }
        CHECK(version_of(st, "z") == 500);
        CHECK_ST(put_v(st, "x", &d, 250), KVP_ERR_STALE); /* the tombstone still stands */
        kvp_store_close(st);
    }
    st = open_ttl(dir, 0);
    CHECK_OK(put_v(st, "x", &d, 350)); /* newer than the delete: in */
    kvp_store_close(st);
    st = open_ttl(dir, 0);
    CHECK(version_of(st, "x") == 350 && t_stats(st).sessions == 2);
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

static kvp_store_h open_dur(const char *dir, kvp_durability_t dur)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY;
    p.db_path    = dir;
    p.durability = dur;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static const tgeom_t G_SEG = {4, 2, 64, 16}; /* 8 KiB pages: written to segment files */

static void case_older_record_shared(const char *dir)
{
    kvp_session_desc_t x, y;
    kvp_store_h        st = open_dur(dir, KVP_DURABILITY_SYNC);
    kvp_tier_batch_t  *b  = kvp_tier_batch_create();

    CHECK(b != NULL);
    t_session(&G_SEG, 11, 0, 11, 4, 0, &x);
    t_session(&G_SEG, 22, 0, 22, 1, 0, &y);
    CHECK_OK(t_put_pages(st, NS, &G_SEG, &x));
    CHECK_OK(kvp_store_session_put_version(st, NS, "x", &x, 100));
    CHECK_OK(t_put_session(st, NS, "y", &G_SEG, &y)); /* the same segment file as x's pages */
    kvp_store_tomb_batch_put(st, b, NS, "x", 300, kvp_store_wall_ns());
    CHECK_OK(kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC)); /* behind the store's back */
    kvp_tier_batch_destroy(b);
    CHECK(t_stats(st).disk_files >= 1);
    kvp_store_close(st);
    for (int round = 0; round < 2; round++) {
        st = open_dur(dir, KVP_DURABILITY_SYNC);
        CHECK_ST(kvp_store_session_get(st, NS, "x", &x), KVP_ERR_NOT_FOUND);
        EXPECT(t_stats(st).disk_files >= 1 && t_stats(st).disk_live_bytes > 0,
               "round %d: %llu segment files, %llu live bytes left for session y", round,
               (unsigned long long)t_stats(st).disk_files,
               (unsigned long long)t_stats(st).disk_live_bytes);
        CHECK_OK(t_check_session(st, NS, "y", &G_SEG, &y));
        kvp_store_close(st);
    }
    kvp_session_desc_clear(&x);
    kvp_session_desc_clear(&y);
}

static void case_spill_unversioned(const char *dir)
{
    kvp_session_desc_t x, y;
    kvp_store_h        st = open_dur(dir, KVP_DURABILITY_SPILL);

    t_session(&G_SEG, 11, 0, 11, 4, 0, &x);
    t_session(&G_SEG, 22, 0, 22, 1, 0, &y);
    CHECK_OK(t_put_pages(st, NS, &G_SEG, &x));
    CHECK_OK(kvp_store_session_put_version(st, NS, "x", &x, 100));
    CHECK_OK(kvp_store_session_spill(st, NS, "x"));
    CHECK_OK(kvp_store_session_delete_version(st, NS, "x", 300)); /* a tombstone on disk */
    CHECK_OK(t_put_pages(st, NS, &G_SEG, &x));
    CHECK_OK(kvp_store_session_put_version(st, NS, "x", &x, 400)); /* DRAM only */
    CHECK_OK(kvp_store_session_delete(st, NS, "x"));                /* unversioned */
    CHECK_OK(t_put_session(st, NS, "x", &G_SEG, &x));              /* unversioned: version 0 */
    CHECK_OK(kvp_store_session_spill(st, NS, "x"));
    CHECK_OK(t_put_session(st, NS, "y", &G_SEG, &y));
    CHECK_OK(kvp_store_session_spill(st, NS, "y"));
    kvp_store_close(st);
    for (int round = 0; round < 2; round++) {
        st = open_dur(dir, KVP_DURABILITY_SPILL);
        EXPECT(t_stats(st).sessions == 2 && t_stats(st).tombstones == 0, "round %d: %llu "
               "sessions, %llu tombstones (want 2, 0)", round,
               (unsigned long long)t_stats(st).sessions,
               (unsigned long long)t_stats(st).tombstones);
        CHECK_OK(t_check_session(st, NS, "x", &G_SEG, &x));
        CHECK_OK(t_check_session(st, NS, "y", &G_SEG, &y));
        kvp_store_close(st);
    }
    kvp_session_desc_clear(&x);
    kvp_session_desc_clear(&y);
}

int main(int argc, char **argv)
{
    static const t_case_t cases[] = {{"versions", case_versions}, {"tombstones", case_tombstones},
                                     {"failed_delete", case_failed_delete}, {"ttl", case_ttl},
                                     {"append", case_append}, {"append_base", case_append_base},
                                     {"bytes", case_bytes},
                                     {"spill_lost_put", case_spill_lost_put},
                                     {"damaged", case_damaged},
                                     {"older_record", case_older_record},
                                     {"older_record_shared", case_older_record_shared},
                                     {"spill_unversioned", case_spill_unversioned}, {NULL, NULL}};

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    return t_run_case(argc, argv, cases, "tomb");
}
