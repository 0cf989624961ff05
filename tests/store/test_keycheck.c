/* test_keycheck.c - records whose key went bad on disk (store/tomb.c, store/tier_meta.c). An index
 * rebuild (tier_salvage.c) copies the records of a damaged block as they are, so a byte gone bad
 * in a key reaches the index; the record's own CRC32C does not cover its key.
 *   record_key: one byte of the id user-7-chat-1 changed to user-7-chat-0 in the sessions SST:
 *     the open rebuilds the index, the record now under user-7-chat-0 is refused (logged,
 *     crc_failures) and never served or listed under that id, at this open and the next; -2 and
 *     -3 are whole, -1 is gone (its key with it). Before: user-7-chat-0 served -1's KV.
 *   record_key_up: the same with user-7-chat-9: refused likewise. -2 and -3 are not checked: a
 *     key made larger than the keys after it in its block hides them from the rebuild's walk
 *     (RocksDB's iterator skips keys not above the last it returned), a loss of its own.
 *   tomb_key: chat-X deleted at version 300, its tombstone's key changed to chat-Y in the meta
 *     SST: the tombstone is refused (crc_failures), so chat-Y, never deleted, takes a put at
 *     version 200, and chat-X stays deleted (no record). What is lost with the damaged tombstone
 *     is only chat-X's refusal of older copies (as with any damaged tombstone). Before: chat-Y
 *     was refused ERR_STALE.
 *   meta_value: format_version's value "2" changed to "3" in the meta SST: the open rebuilds,
 *     finds the text damaged against its checked copy, writes it again and opens; the session
 *     is whole and later opens need no rebuild. Before: every open failed ERR_UNSUPPORTED.
 *   meta_check: the meta records written directly, each in a fresh db: a checked copy naming
 *     format 3 (a newer db) is refused even with format_version "2"; format_version "3" with a
 *     checked copy of 2 opens and is written again; no checked copy (a db of an older build)
 *     opens on "2" and gets one, and is refused on "3"; a damaged checked copy beside "2" is
 *     written again; a damaged node_id is written again from the copy.
 *   key_moved: a record read under one id and written under another, and a tombstone value
 *     likewise: both refused at open, the rest (the original record and tombstone) as they were.
 *   legacy: records and a tombstone as builds before key checks wrote them (a record without
 *     envelope, one with an envelope without the key flag, a 20-byte tombstone) still load.
 *   damaged_record: a's record with one bit of its checksum flipped: not served, and its six
 *     pages stay on disk (the open's sweep took them for pages no session names, and deleted
 *     them: one bad bit lost all of a's KV); b is whole; deleting a removes the record (OK), and
 *     the next open lets the pages go. */
#define _GNU_SOURCE /* memmem */
#include "store_test_util.h"
#include "store_int.h"

#include "kvpack/bytes.h"
#include "kvpack/log.h"

#include <sys/stat.h>

static const tgeom_t S = {2, 1, 16, 16}; /* 1,088-byte pages: inline in RocksDB */
#define NS 0x6B63u

static kvp_store_h open_wt(const char *dir)
{
    return t_open_store(dir, 64u << 20, KVP_DURABILITY_WRITE_THROUGH, 0, 0);
}

static kvp_status_t open_st(const char *dir, kvp_store_h *st_p)
{
    kvp_store_params_t p = {0};

    p.field_mask = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY;
    p.db_path    = dir;
    p.durability = KVP_DURABILITY_WRITE_THROUGH;
    return kvp_store_open(&p, st_p);
}

/* sessions i put under sids[i] */
static void put_all(kvp_store_h st, const char *const *sids, int n, kvp_session_desc_t *d)
{
    for (int i = 0; i < n; i++) {
        t_session(&S, 500 + (uint64_t)i, 0, 500 + (uint64_t)i, 3, 0, &d[i]);
        CHECK_OK(t_put_session(st, NS, sids[i], &S, &d[i]));
    }
}

/* closed, opened and closed again: what the WAL held is in SSTs (the open replays it into one) */
static void settle(kvp_store_h st, const char *dir)
{
    kvp_store_close(st);
    kvp_store_close(open_wt(dir));
}

/* In the first SST of dir holding the pn bytes pat: the byte at off past the match, which must be
 * was, becomes now (one byte gone bad, placed where the test wants it). */
static void sst_edit(const char *dir, const void *pat, size_t pn, size_t off, uint8_t was,
                     uint8_t now)
{
    t_edit_bytes(dir, "", ".sst", pat, pn, off, was, now);
}

static int listed(kvp_store_h st, const char *sid)
{
    kvp_store_session_info_t info[16];
    uint32_t                 n;

    CHECK_OK(kvp_store_session_list_ex(st, 0, NULL, 0, info, 16, &n, NULL));
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(info[i].sid, sid) == 0) {
            return 1;
        }
    }
    return 0;
}

static void clear_all(kvp_session_desc_t *d, int n)
{
    for (int i = 0; i < n; i++) {
        kvp_session_desc_clear(&d[i]);
    }
}

/* user-7-chat-1's last byte made `to` in the sessions SST, then two opens */
static void record_key(const char *dir, char to)
{
    static const char *const sids[] = {"user-7-chat-1", "user-7-chat-2", "user-7-chat-3"};
    kvp_session_desc_t       d[3], got;
    kvp_store_h              st = open_wt(dir);
    char                     moved[16];

    snprintf(moved, sizeof(moved), "user-7-chat-%c", to);
    put_all(st, sids, 3, d);
    settle(st, dir);
    sst_edit(dir, sids[0], strlen(sids[0]), strlen(sids[0]) - 1, '1', (uint8_t)to);
    for (int round = 0; round < 2; round++) {
        st = open_wt(dir);
        printf("open %d: %llu rebuilds, %llu crc failures, %llu sessions\n", round,
               (unsigned long long)t_stats(st).index_rebuilds,
               (unsigned long long)t_stats(st).crc_failures,
               (unsigned long long)t_stats(st).sessions);
        CHECK_ST(kvp_store_session_get(st, NS, moved, &got), KVP_ERR_NOT_FOUND);
        CHECK(t_stats(st).index_rebuilds == (round == 0 ? 1u : 0u));
        CHECK(t_stats(st).crc_failures == 1);
        CHECK_ST(kvp_store_session_get(st, NS, sids[0], &got), KVP_ERR_NOT_FOUND);
        CHECK(!listed(st, moved) && !listed(st, sids[0]));
        if (to < '2') { /* below the keys after it: the rebuild's walk reaches them */
            CHECK(t_stats(st).sessions == 2);
            CHECK_OK(t_check_session(st, NS, sids[1], &S, &d[1]));
            CHECK_OK(t_check_session(st, NS, sids[2], &S, &d[2]));
        }
        kvp_store_close(st);
    }
    clear_all(d, 3);
}

static void case_record_key(const char *dir) { record_key(dir, '0'); }

static void case_record_key_up(const char *dir) { record_key(dir, '9'); }

static void case_tomb_key(const char *dir)
{
    kvp_session_desc_t d, got;
    kvp_store_h        st = open_wt(dir);

    t_session(&S, 7, 0, 7, 3, 0, &d);
    CHECK_OK(t_put_pages(st, NS, &S, &d));
    CHECK_OK(kvp_store_session_put_version(st, NS, "chat-X", &d, 100));
    CHECK_OK(kvp_store_session_delete_version(st, NS, "chat-X", 300));
    settle(st, dir);
    sst_edit(dir, "/chat-X", 7, 6, 'X', 'Y');
    st = open_wt(dir);
    CHECK_OK(t_put_pages(st, NS, &S, &d));
    CHECK_OK(kvp_store_session_put_version(st, NS, "chat-Y", &d, 200)); /* not STALE */
    CHECK(t_stats(st).index_rebuilds == 1);
    CHECK(t_stats(st).crc_failures == 1 && t_stats(st).tombstones == 0);
    CHECK_ST(kvp_store_session_get(st, NS, "chat-X", &got), KVP_ERR_NOT_FOUND); /* deleted */
    CHECK_OK(t_check_session(st, NS, "chat-Y", &S, &d));
    CHECK(t_stats(st).stale_refused == 0);
    kvp_store_close(st);
    kvp_session_desc_clear(&d);
}

/* The value of meta key key (NULL: none), NUL-terminated, into buf. */
static kvp_status_t meta_cb(void *arg, const char *key, size_t klen, const uint8_t *val,
                            size_t vlen)
{
    char **a = arg;

    if (klen == strlen(a[0]) && memcmp(key, a[0], klen) == 0) {
        CHECK(vlen < 64);
        memcpy(a[1], val, vlen);
        a[1][vlen] = 0;
        a[2]       = a[1];
    }
    return KVP_OK;
}

static const char *meta_of(kvp_store_h st, const char *key, char *buf)
{
    char *a[3] = {(char *)key, buf, NULL};

    CHECK_OK(kvp_tier_meta_scan(st->tier, key, meta_cb, a));
    return a[2];
}

static void case_meta_value(const char *dir)
{
    static const char *const sids[] = {"a"};
    kvp_session_desc_t       d[1];
    kvp_store_h              st = open_wt(dir);
    char                     buf[64];

    put_all(st, sids, 1, d);
    settle(st, dir);
    /* the value follows the key and its 8-byte sequence and type */
    sst_edit(dir, "format_version", 14, 14 + 8, '2', '3');
    CHECK_OK(open_st(dir, &st));
    CHECK(t_stats(st).index_rebuilds == 1);
    CHECK(strcmp(meta_of(st, "format_version", buf), "2") == 0);
    CHECK_OK(t_check_session(st, NS, "a", &S, &d[0]));
    kvp_store_close(st);
    CHECK_OK(open_st(dir, &st));
    CHECK(t_stats(st).index_rebuilds == 0);
    CHECK_OK(t_check_session(st, NS, "a", &S, &d[0]));
    kvp_store_close(st);
    clear_all(d, 1);
}

/* meta_check's value: version, crc32c of the node id, crc32c of those 8 */
static void check_val(uint32_t version, const char *node, uint8_t *val)
{
    kvp_st32(val, version);
    kvp_st32(val + 4, kvp_crc32c(0, node, strlen(node)));
    kvp_st32(val + 8, kvp_crc32c(0, val, 8));
}

/* A fresh db in dir/sub with session "a", its meta records then changed: key -> val (vlen 0:
 * deleted), for up to two keys; then opened: want. On KVP_OK the session is whole. */
static void meta_try(const char *dir, const char *sub, const char *k1, const void *v1, size_t l1,
                     const char *k2, const void *v2, size_t l2, kvp_status_t want)
{
    static const char *const sids[] = {"a"};
    char                     path[600];
    kvp_session_desc_t       d[1];
    kvp_store_h              st;
    kvp_tier_batch_t        *b = kvp_tier_batch_create();

    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    st = open_wt(path);
    put_all(st, sids, 1, d);
    CHECK(b != NULL);
    for (int i = 0; i < 2; i++) {
        const char *k = i ? k2 : k1;
        const void *v = i ? v2 : v1;
        size_t      l = i ? l2 : l1;

        if (k != NULL && l > 0) {
            kvp_tier_batch_put_meta(st->tier, b, k, v, l);
        } else if (k != NULL) {
            kvp_tier_batch_del_meta(st->tier, b, k);
        }
    }
    CHECK_OK(kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC));
    kvp_tier_batch_destroy(b);
    kvp_store_close(st);
    CHECK_ST(open_st(path, &st), want);
    if (want == KVP_OK) {
        CHECK_OK(t_check_session(st, NS, "a", &S, &d[0]));
        kvp_store_close(st);
    }
    printf("meta %s: %s\n", sub, kvp_status_name(want));
    clear_all(d, 1);
}

static void case_meta_check(const char *dir)
{
    uint8_t     v2[12], v3[12], bad[12];
    char        buf[64];
    kvp_store_h st;
    char        path[600];

    check_val(2, "kvpackd", v2);
    check_val(3, "kvpackd", v3);
    memcpy(bad, v2, sizeof(bad));
    bad[0] ^= 1; /* its crc32c no longer holds */
    meta_try(dir, "newer", "meta_check", v3, 12, NULL, NULL, 0, KVP_ERR_UNSUPPORTED);
    meta_try(dir, "text", "format_version", "3", 1, NULL, NULL, 0, KVP_OK);
    meta_try(dir, "older", "meta_check", NULL, 0, NULL, NULL, 0, KVP_OK);
    meta_try(dir, "older3", "meta_check", NULL, 0, "format_version", "3", 1, KVP_ERR_UNSUPPORTED);
    meta_try(dir, "older_bad", "meta_check", NULL, 0, "format_version", "2x", 2,
             KVP_ERR_UNSUPPORTED);
    meta_try(dir, "check_bad", "meta_check", bad, 12, NULL, NULL, 0, KVP_OK);
    meta_try(dir, "both_bad", "meta_check", bad, 12, "format_version", "3", 1,
             KVP_ERR_UNSUPPORTED);
    meta_try(dir, "node", "node_id", "kvpackD", 7, NULL, NULL, 0, KVP_OK);
    /* what the opens wrote again reads back */
    snprintf(path, sizeof(path), "%s/%s", dir, "text");
    st = open_wt(path);
    CHECK(strcmp(meta_of(st, "format_version", buf), "2") == 0);
    kvp_store_close(st);
    snprintf(path, sizeof(path), "%s/%s", dir, "older");
    st = open_wt(path);
    CHECK(meta_of(st, "meta_check", buf) != NULL && memcmp(buf, v2, 12) == 0);
    kvp_store_close(st);
    snprintf(path, sizeof(path), "%s/%s", dir, "check_bad");
    st = open_wt(path);
    CHECK(meta_of(st, "meta_check", buf) != NULL && memcmp(buf, v2, 12) == 0);
    kvp_store_close(st);
    snprintf(path, sizeof(path), "%s/%s", dir, "node");
    st = open_wt(path);
    CHECK(strcmp(meta_of(st, "node_id", buf), "kvpackd") == 0);
    kvp_store_close(st);
}

/* the tombstone of (NS, sid): its meta key into key, value into val (20 or 24 bytes) */
typedef struct {
    const char *sid;
    char        key[KVP_TOMB_KEY_MAX];
    uint8_t     val[32];
    size_t      vlen;
} tomb_found_t;

static kvp_status_t tomb_cb(void *arg, const char *key, size_t klen, const uint8_t *val,
                            size_t vlen)
{
    tomb_found_t *t = arg;
    size_t        sl = strlen(t->sid);

    if (klen > sl && key[klen - sl - 1] == '/' && memcmp(key + klen - sl, t->sid, sl) == 0 &&
        vlen <= sizeof(t->val)) {
        memcpy(t->key, key, klen);
        t->key[klen] = 0;
        memcpy(t->val, val, vlen);
        t->vlen = vlen;
    }
    return KVP_OK;
}

static void case_key_moved(const char *dir)
{
    static const char *const sids[] = {"a", "b"};
    kvp_session_desc_t       d[2], got;
    kvp_store_h              st = open_wt(dir);
    kvp_tier_batch_t        *b  = kvp_tier_batch_create();
    tomb_found_t             t  = {.sid = "gone"};
    uint8_t                 *blob;
    size_t                   len;
    char                     key[KVP_TOMB_KEY_MAX];

    put_all(st, sids, 2, d);
    /* a tombstone with no record (NOT_FOUND, the tombstone is kept all the same) */
    CHECK_ST(kvp_store_session_delete_version(st, NS, "gone", 300), KVP_ERR_NOT_FOUND);
    CHECK_OK(kvp_tier_session_get(st->tier, NS, "a", &blob, &len));
    CHECK_OK(kvp_tier_meta_scan(st->tier, "tomb/", tomb_cb, &t));
    CHECK(t.vlen > 0 && b != NULL);
    kvp_tier_batch_put_session(st->tier, b, NS, "c", blob, len); /* a's record under c */
    snprintf(key, sizeof(key), "%.*sgonf", (int)(strlen(t.key) - 4), t.key);
    kvp_tier_batch_put_meta(st->tier, b, key, t.val, t.vlen);    /* gone's tombstone as gonf's */
    CHECK_OK(kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC));
    kvp_tier_batch_destroy(b);
    kvp_free(blob);
    kvp_store_close(st);

    st = open_wt(dir);
    CHECK_ST(kvp_store_session_get(st, NS, "c", &got), KVP_ERR_NOT_FOUND);
    CHECK(!listed(st, "c"));
    CHECK_OK(t_put_pages(st, NS, &S, &d[0]));
    CHECK_OK(kvp_store_session_put_version(st, NS, "gonf", &d[0], 200));
    CHECK_ST(kvp_store_session_put_version(st, NS, "gone", &d[0], 200), KVP_ERR_STALE);
    CHECK(t_stats(st).crc_failures == 2 && t_stats(st).tombstones == 1);
    CHECK_OK(t_check_session(st, NS, "a", &S, &d[0]));
    CHECK_OK(t_check_session(st, NS, "b", &S, &d[1]));
    kvp_store_close(st);
    clear_all(d, 2);
}

/* A record as builds before key checks wrote it: the bare desc blob (version 0), or behind the
 * envelope with flags 0 and nothing at 20..24. */
static void legacy_record(const kvp_session_desc_t *d, uint64_t version, uint8_t **blob_p,
                          size_t *len_p)
{
    uint8_t *inner, *b;
    size_t   ilen;

    CHECK_OK(kvp_session_desc_pack(d, &inner, &ilen));
    if (version == 0) {
        *blob_p = inner;
        *len_p  = ilen;
        return;
    }
    b = kvp_calloc(1, 24 + ilen, "legacy record");
    CHECK(b != NULL);
    kvp_st32(b, 0x5653564Bu); /* "KVSV" */
    kvp_st64(b + 8, version);
    kvp_st32(b + 16, kvp_crc32c(0, b, 16));
    memcpy(b + 24, inner, ilen);
    kvp_free(inner);
    *blob_p = b;
    *len_p  = 24 + ilen;
}

static void case_legacy(const char *dir)
{
    static const char *const sids[] = {"old0", "old1"};
    kvp_session_desc_t       d[2];
    kvp_store_h              st = open_wt(dir);
    kvp_tier_batch_t        *b  = kvp_tier_batch_create();
    uint8_t                  tv[20];
    char                     key[KVP_TOMB_KEY_MAX];
    kvp_store_get_info_t     info;
    kvp_session_desc_t       got;

    put_all(st, sids, 2, d);
    CHECK(b != NULL);
    for (int i = 0; i < 2; i++) {
        uint8_t *blob;
        size_t   len;

        legacy_record(&d[i], i == 0 ? 0 : 123, &blob, &len);
        kvp_tier_batch_put_session(st->tier, b, NS, sids[i], blob, len);
        kvp_free(blob);
    }
    kvp_st64(tv, 500);
    kvp_st64(tv + 8, kvp_store_wall_ns());
    kvp_st32(tv + 16, kvp_crc32c(0, tv, 16));
    snprintf(key, sizeof(key), "tomb/%016llx/gone", (unsigned long long)NS);
    kvp_tier_batch_put_meta(st->tier, b, key, tv, sizeof(tv));
    CHECK_OK(kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC));
    kvp_tier_batch_destroy(b);
    kvp_store_close(st);

    st = open_wt(dir);
    CHECK(t_stats(st).crc_failures == 0 && t_stats(st).sessions == 2);
    CHECK(t_stats(st).tombstones == 1);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(t_check_session(st, NS, sids[i], &S, &d[i]));
        CHECK_OK(kvp_store_session_get_info(st, NS, sids[i], &got, &info));
        CHECK(info.version == (i == 0 ? 0u : 123u));
        kvp_session_desc_clear(&got);
    }
    CHECK_OK(t_put_pages(st, NS, &S, &d[0]));
    CHECK_ST(kvp_store_session_put_version(st, NS, "gone", &d[0], 400), KVP_ERR_STALE);
    kvp_store_close(st);
    clear_all(d, 2);
}

static void case_damaged_record(const char *dir)
{
    static const char *const sids[] = {"a", "b"};
    kvp_session_desc_t       d[2], got;
    kvp_store_h              st = open_wt(dir);
    kvp_tier_batch_t        *b  = kvp_tier_batch_create();
    uint8_t                 *blob;
    size_t                   len;

    put_all(st, sids, 2, d); /* 3 chunks x 2 layers each */
    CHECK_OK(kvp_tier_session_get(st->tier, NS, "a", &blob, &len));
    CHECK(b != NULL && len > 8);
    blob[len - 2] ^= 0x10; /* in the record's crc32c trailer */
    kvp_tier_batch_put_session(st->tier, b, NS, "a", blob, len);
    CHECK_OK(kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC));
    kvp_tier_batch_destroy(b);
    kvp_free(blob);
    kvp_store_close(st);

    for (int round = 0; round < 2; round++) {
        st = open_wt(dir);
        CHECK_ST(kvp_store_session_get(st, NS, "a", &got), KVP_ERR_NOT_FOUND);
        EXPECT(t_stats(st).swept_pages == 0, "round %d: the open deleted %llu pages of the "
               "session whose record did not read", round,
               (unsigned long long)t_stats(st).swept_pages);
        CHECK(t_stats(st).crc_failures == 1);
        CHECK_OK(t_check_session(st, NS, "b", &S, &d[1]));
        kvp_store_close(st);
    }
    st = open_wt(dir);
    CHECK_OK(kvp_store_session_delete(st, NS, "a")); /* the damaged record goes */
    CHECK_ST(kvp_store_session_delete(st, NS, "a"), KVP_ERR_NOT_FOUND);
    kvp_store_close(st);
    st = open_wt(dir);
    CHECK(t_stats(st).swept_pages == 6 && t_stats(st).crc_failures == 0);
    CHECK_OK(t_check_session(st, NS, "b", &S, &d[1]));
    kvp_store_close(st);
    clear_all(d, 2);
}

int main(int argc, char **argv)
{
    static const t_case_t cases[] = {{"record_key", case_record_key},
                                     {"record_key_up", case_record_key_up},
                                     {"tomb_key", case_tomb_key},
                                     {"meta_value", case_meta_value},
                                     {"meta_check", case_meta_check},
                                     {"key_moved", case_key_moved}, {"legacy", case_legacy},
                                     {"damaged_record", case_damaged_record}, {NULL, NULL}};

    return t_run_case(argc, argv, cases, "keycheck");
}
