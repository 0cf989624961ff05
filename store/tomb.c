/* tomb.c - session versions, delete tombstones (last writer wins, no consensus) and the key
 * checks of both. A record on disk is the kvp_session_desc_pack blob behind this envelope:
 *   offset size field
 *      0    4  magic "KVSV" = 0x5653564B
 *      4    4  flags: bit 0 (REC_F_KEY_CRC) bytes 20..24 hold the key's crc32c
 *      8    8  version (ns since the epoch, the writer's clock; 0: unversioned)
 *     16    4  crc32c of bytes [0, 16)
 *     20    4  crc32c of the record's key in the sessions column family: ns (8 B big-endian) then
 *              the session id's bytes (kvp_store_sess_key_crc)
 * Builds before key checks wrote flags 0 and 0 at 20, and no envelope at all for version 0: both
 * still load, unchecked. The desc blob's own crc32c does not cover the key, so without the key
 * check a record whose key an index rebuild copied out of a damaged block (tier_salvage.c) was
 * served under that other id; now it is refused. A tombstone (ns, sid, version) lives in a small
 * hash table and in the meta column family under "tomb/<16 hex ns>/<sid>" ->
 *      0    8  version
 *      8    8  recorded at (node CLOCK_REALTIME ns)
 *     16    4  crc32c of the meta key (all of "tomb/...")
 *     20    4  crc32c of bytes [0, 20)
 * (24 bytes; a 20-byte value is one of a build before key checks: version, recorded at, crc32c
 * of those 16, read unchecked). The length tells the two apart; a build before key checks reads
 * a 24-byte one as unreadable and leaves it on disk. It expires tombstone_ttl after it was
 * recorded (swept at open and at most once a second after). In DRAM a tombstone is one
 * allocation holding only its id's own bytes: 112 B with a 21-byte id, plus 8-16 B of the
 * table's buckets (kvp_store_tomb_bytes). */
#include "store_int.h"
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/log.h"
#include "kvpack/num.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MOD            "store"
#define REC_MAGIC      0x5653564Bu
#define REC_HDR        24u
#define REC_F_KEY_CRC  0x1u /* flags: bytes 20..24 hold the key's crc32c */
#define TOMB_PREFIX    "tomb/"
#define TOMB_VAL_V1    20u  /* version, at, crc32c: before key checks */
#define TOMB_VAL_BYTES 24u  /* version, at, key crc32c, crc32c */

uint64_t kvp_store_wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- record envelope ---- */

uint32_t kvp_store_sess_key_crc(uint64_t ns, const char *sid)
{
    uint8_t k[8];

    kvp_st_be64(k, ns);
    return kvp_crc32c(kvp_crc32c(0, k, sizeof(k)), sid, strlen(sid));
}

kvp_status_t kvp_store_record_pack(const kvp_session_desc_t *desc, uint64_t version, uint64_t ns,
                                   const char *sid, uint8_t **blob_p, size_t *len_p)
{
    uint8_t     *inner, *b;
    size_t       ilen;
    kvp_status_t status = kvp_session_desc_pack(desc, &inner, &ilen);

    if (status != KVP_OK) {
        return status;
    }
    /* always the envelope (version 0 too): the key check lives in it */
    b = kvp_calloc(1, REC_HDR + ilen, "session record");
    if (b == NULL) {
        kvp_free(inner);
        return KVP_ERR_NO_MEMORY;
    }
    kvp_st32(b, REC_MAGIC);
    kvp_st32(b + 4, REC_F_KEY_CRC);
    kvp_st64(b + 8, version);
    kvp_st32(b + 16, kvp_crc32c(0, b, 16));
    kvp_st32(b + 20, kvp_store_sess_key_crc(ns, sid));
    memcpy(b + REC_HDR, inner, ilen);
    kvp_free(inner);
    *blob_p = b;
    *len_p  = REC_HDR + ilen;
    return KVP_OK;
}

uint64_t kvp_store_record_ssd_bytes(uint64_t len)
{
    return len + REC_HDR;
}

kvp_status_t kvp_store_record_unpack(const uint8_t *blob, size_t len, uint64_t ns,
                                     const char *sid, kvp_session_desc_t *desc,
                                     uint64_t *version_p)
{
    uint64_t version = 0;

    if (blob != NULL && len >= REC_HDR && kvp_ld32(blob) == REC_MAGIC) {
        if (kvp_ld32(blob + 16) != kvp_crc32c(0, blob, 16)) {
            return KVP_ERR_CORRUPT;
        }
        if ((kvp_ld32(blob + 4) & REC_F_KEY_CRC) &&
            kvp_ld32(blob + 20) != kvp_store_sess_key_crc(ns, sid)) {
            KVP_LOG_ERROR(MOD, "the record stored under session %s (namespace %016llx) was "
                          "written for another key (a byte of its key gone bad): damaged, never "
                          "served under this id", sid, (unsigned long long)ns);
            return KVP_ERR_CORRUPT;
        }
        version = kvp_ld64(blob + 8);
        blob += REC_HDR;
        len -= REC_HDR;
    }
    *version_p = version;
    return kvp_session_desc_unpack(blob, len, desc);
}

/* ---- tombstone table ---- */

void kvp_tomb_init(kvp_sid_index_t *t)
{
    kvp_sid_index_init(t, 64, "tombstone table");
}

kvp_tomb_t *kvp_tomb_find(const kvp_sid_index_t *t, uint64_t ns, const char *sid)
{
    kvp_sid_key_t *k = kvp_sid_index_find(t, ns, sid);

    return k != NULL ? KVP_CONTAINER_OF(k, kvp_tomb_t, key) : NULL;
}

/* The bytes malloc holds for a tombstone of an id of sid_len bytes: the request with an 8-byte
 * header, in 16-byte steps (glibc's chunks; close for other allocators). */
static uint64_t tomb_chunk_bytes(size_t sid_len)
{
    return (sizeof(kvp_tomb_t) + sid_len + 1 + 8 + 15) & ~(uint64_t)15;
}

/* Set (ns, sid)'s tombstone to version (a new entry, or a newer version of one). */
static kvp_status_t tomb_set(kvp_store_h st, uint64_t ns, const char *sid, uint64_t version,
                             uint64_t at_ns)
{
    kvp_tomb_t *e = kvp_tomb_find(&st->tombs, ns, sid);
    size_t      len;

    if (e == NULL) {
        len = strnlen(sid, KVP_SID_MAX - 1);
        e   = kvp_calloc(1, sizeof(*e) + len + 1, "tombstone");
        if (e != NULL) {
            e->key.ns  = ns;
            e->key.sid = e->sid;
            memcpy(e->sid, sid, len); /* NUL from calloc */
        }
        if (e == NULL || kvp_sid_index_insert(&st->tombs, &e->key) != KVP_OK) {
            KVP_LOG_ERROR(MOD, "no memory for the tombstone of session %s", sid);
            kvp_free(e);
            return KVP_ERR_NO_MEMORY;
        }
        st->tomb_alloc_bytes += tomb_chunk_bytes(len);
    }
    e->version = version;
    e->at_ns   = at_ns;
    return KVP_OK;
}

uint64_t kvp_store_tomb_bytes(const struct kvp_store *st)
{
    return st->tomb_alloc_bytes + st->tombs.by_key.nbuckets * sizeof(kvp_hlink_t *);
}

void kvp_tomb_cleanup(kvp_sid_index_t *t)
{
    kvp_htab_iter_t it = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;

    while ((l = kvp_htab_next(&t->by_key, &it)) != NULL) {
        kvp_free(KVP_CONTAINER_OF(l, kvp_tomb_t, key.hlink));
    }
    kvp_sid_index_cleanup(t);
}

/* ---- persistence (meta column family) ---- */

static void tomb_key(uint64_t ns, const char *sid, char *key) /* KVP_TOMB_KEY_MAX bytes */
{
    snprintf(key, KVP_TOMB_KEY_MAX, TOMB_PREFIX "%016llx/%s", (unsigned long long)ns, sid);
}

static kvp_status_t tomb_commit(kvp_store_h st, kvp_tier_batch_t *b)
{
    kvp_status_t status = kvp_store_commit(st, b, st->durability == KVP_DURABILITY_SYNC
                                                      ? KVP_TIER_SYNC : KVP_TIER_WAL);

    st->stats.disk_errors += status != KVP_OK;
    return status;
}

void kvp_store_tomb_batch_put(kvp_store_h st, kvp_tier_batch_t *b, uint64_t ns, const char *sid,
                              uint64_t version, uint64_t at_ns)
{
    char    key[KVP_TOMB_KEY_MAX];
    uint8_t val[TOMB_VAL_BYTES];

    tomb_key(ns, sid, key);
    kvp_st64(val, version);
    kvp_st64(val + 8, at_ns);
    kvp_st32(val + 16, kvp_crc32c(0, key, strlen(key)));
    kvp_st32(val + 20, kvp_crc32c(0, val, 20));
    kvp_tier_batch_put_meta(st->tier, b, key, val, sizeof(val));
}

void kvp_store_tomb_stage(kvp_store_h st, kvp_tier_batch_t *b, uint64_t ns, const char *sid,
                          uint64_t version, kvp_tomb_pending_t *pend)
{
    kvp_tomb_t *e = kvp_tomb_find(&st->tombs, ns, sid);

    pend->ns      = ns;
    pend->sid     = sid;
    pend->version = version;
    pend->at_ns   = kvp_store_wall_ns();
    pend->staged  = version != 0 && (e == NULL || e->version < version);
    if (pend->staged && b != NULL) {
        kvp_store_tomb_batch_put(st, b, ns, sid, version, pend->at_ns);
    }
}

kvp_status_t kvp_store_tomb_staged_done(kvp_store_h st, const kvp_tomb_pending_t *pend)
{
    return pend->staged ? tomb_set(st, pend->ns, pend->sid, pend->version, pend->at_ns)
                        : KVP_OK;
}

kvp_status_t kvp_store_tomb_record(kvp_store_h st, uint64_t ns, const char *sid, uint64_t version)
{
    kvp_tomb_pending_t pend;
    kvp_tier_batch_t  *b = NULL;
    kvp_status_t       status = KVP_OK;

    if (st->tier != NULL && (b = kvp_tier_batch_create()) == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    kvp_store_tomb_stage(st, b, ns, sid, version, &pend);
    if (pend.staged && b != NULL) {
        status = tomb_commit(st, b);
    }
    kvp_tier_batch_destroy(b);
    return status == KVP_OK ? kvp_store_tomb_staged_done(st, &pend) : status;
}

void kvp_store_tomb_batch_del(kvp_store_h st, kvp_tier_batch_t *b, uint64_t ns, const char *sid)
{
    char key[KVP_TOMB_KEY_MAX];

    tomb_key(ns, sid, key);
    kvp_tier_batch_del_meta(st->tier, b, key);
}

kvp_status_t kvp_store_tomb_clear(kvp_store_h st, kvp_tomb_t *e, bool disk)
{
    if (st->tier != NULL && disk) {
        kvp_tier_batch_t *b = kvp_tier_batch_create();
        kvp_status_t      status;

        if (b == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        kvp_store_tomb_batch_del(st, b, e->key.ns, e->key.sid);
        status = tomb_commit(st, b);
        kvp_tier_batch_destroy(b);
        if (status != KVP_OK) {
            return status;
        }
    }
    kvp_sid_index_remove(&st->tombs, &e->key);
    st->tomb_alloc_bytes -= tomb_chunk_bytes(strlen(e->sid));
    kvp_free(e);
    return KVP_OK;
}

typedef enum {
    TOMB_READS,      /* key and value read (and the key is the one the value was written for) */
    TOMB_UNREADABLE, /* a key or value of another shape, or a value failing its crc32c */
    TOMB_OTHER_KEY,  /* a value that reads, stored under another key than it was written for */
} tomb_verdict_t;

typedef struct {
    uint64_t ns, version, at_ns;
    char     sid[KVP_SID_MAX];
} tomb_disk_t;

/* A tombstone of the meta column family: its key parsed, its value checked. Its own crc32c says
 * the value is whole, and (24-byte values) the key's says it is still under the key it was
 * written for: an index rebuild copies the records of a damaged block as they are, and a byte
 * gone bad in a key would otherwise move the delete to another session (which then refused its
 * puts ERR_STALE, while the deleted one took an older copy back). */
static tomb_verdict_t tomb_parse(const char *key, size_t klen, const uint8_t *val, size_t vlen,
                                 tomb_disk_t *t)
{
    size_t             pre = sizeof(TOMB_PREFIX) - 1;
    uint64_t           ns;
    bool v1 = vlen == TOMB_VAL_V1 && kvp_ld32(val + 16) == kvp_crc32c(0, val, 16);
    bool v2 = vlen == TOMB_VAL_BYTES && kvp_ld32(val + 20) == kvp_crc32c(0, val, 20);

    if (klen <= pre + 17 || klen - pre - 17 >= KVP_SID_MAX || !(v1 || v2) ||
        kvp_hex16_parse(key + pre, &ns) != 0 || key[pre + 16] != '/') {
        return TOMB_UNREADABLE;
    }
    t->ns      = ns;
    t->version = kvp_ld64(val);
    t->at_ns   = kvp_ld64(val + 8);
    memcpy(t->sid, key + pre + 17, klen - pre - 17);
    t->sid[klen - pre - 17] = 0;
    return v2 && kvp_ld32(val + 16) != kvp_crc32c(0, key, klen) ? TOMB_OTHER_KEY : TOMB_READS;
}

static kvp_status_t load_cb(void *arg, const char *key, size_t klen, const uint8_t *val,
                            size_t vlen)
{
    kvp_store_h    st = arg;
    tomb_disk_t    t;
    tomb_verdict_t v  = tomb_parse(key, klen, val, vlen, &t);
    kvp_sess_t    *s;
    int            shown = (int)(klen < 200 ? klen : 200);

    if (v == TOMB_UNREADABLE) {
        KVP_LOG_ERROR(MOD, "unreadable tombstone %.*s in the meta column family: not used, kept "
                      "on disk as it is", shown, key);
        st->stats.crc_failures++;
        return KVP_OK;
    }
    if (v == TOMB_OTHER_KEY) { /* the session it deleted is not known: nothing can be refused */
        KVP_LOG_ERROR(MOD, "tombstone %.*s (version %llu) was written for another key (a byte "
                      "of its key gone bad): damaged, not used, kept on disk as it is; the "
                      "session it deleted no longer refuses older copies", shown, key,
                      (unsigned long long)t.version);
        st->stats.crc_failures++;
        return KVP_OK;
    }
    s = kvp_index_sess_find(&st->sessions, t.ns, t.sid);
    if (s != NULL && s->version > t.version) {
        return KVP_OK; /* a newer put landed before its tombstone was cleared: swept below */
    }                  /* (an older record: kvp_store_tomb_drop_older removes it) */
    return tomb_set(st, t.ns, t.sid, t.version, t.at_ns);
}

/* Tombstones a put cleared on disk too late (a crash between): the meta keys the table lacks,
 * of those that read (a damaged one is left as it is, not taken for a cleared one). */
static kvp_status_t stray_cb(void *arg, const char *key, size_t klen, const uint8_t *val,
                             size_t vlen)
{
    void             **a  = arg;
    kvp_store_h        st = a[0];
    kvp_tier_batch_t  *b  = a[1];
    tomb_disk_t        t;

    if (tomb_parse(key, klen, val, vlen, &t) == TOMB_READS &&
        kvp_tomb_find(&st->tombs, t.ns, t.sid) == NULL) {
        kvp_store_tomb_batch_del(st, b, t.ns, t.sid);
    }
    return KVP_OK;
}

/* Records no newer than their session's tombstone (deletes win ties), found at open: a delete
 * removes the record and writes the tombstone in one batch, so only a damaged index rebuilt from
 * older files (tier_salvage.c) or a store rolled back under its meta brings the two together.
 * The record was served as if never deleted; now it is removed as the delete removed it. */
kvp_status_t kvp_store_tomb_drop_older(kvp_store_h st)
{
    kvp_htab_iter_t it   = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;
    kvp_sess_t    **drop = NULL;
    size_t          n = 0, cap = 0;
    kvp_status_t    status = KVP_OK;

    while ((l = kvp_htab_next(&st->tombs.by_key, &it)) != NULL) {
        const kvp_tomb_t *t = KVP_CONTAINER_OF(l, kvp_tomb_t, key.hlink);
        kvp_sess_t       *s = kvp_index_sess_find(&st->sessions, t->key.ns, t->sid);

        if (s == NULL || s->version > t->version) {
            continue;
        }
        /* collected first: a remove changes the tables being walked */
        kvp_sess_t **g = kvp_array_room(drop, &cap, n, sizeof(*g), 8, "tomb drop");

        if (g == NULL) {
            kvp_free(drop);
            return KVP_ERR_NO_MEMORY;
        }
        drop      = g;
        drop[n++] = s;
    }
    for (size_t i = 0; i < n && status == KVP_OK; i++) {
        kvp_sess_t       *s = drop[i];
        const kvp_tomb_t *t = kvp_tomb_find(&st->tombs, s->key.ns, s->key.sid);

        KVP_LOG_WARN(MOD, "session %s: its record at version %llu is no newer than its delete at "
                     "%llu (an index rebuilt from older files): removed, not served", s->key.sid,
                     (unsigned long long)s->version, (unsigned long long)t->version);
        status = kvp_store_sess_remove(st, s, t->version);
    }
    kvp_free(drop);
    return status;
}

kvp_status_t kvp_store_tomb_load(kvp_store_h st)
{
    kvp_tier_batch_t *b;
    void             *arg[2];
    kvp_status_t      status = kvp_tier_meta_scan(st->tier, TOMB_PREFIX, load_cb, st);

    if (status != KVP_OK) {
        return status;
    }
    b = kvp_tier_batch_create();
    if (b == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    arg[0] = st;
    arg[1] = b;
    status = kvp_tier_meta_scan(st->tier, TOMB_PREFIX, stray_cb, arg);
    if (status == KVP_OK) {
        status = tomb_commit(st, b);
    }
    kvp_tier_batch_destroy(b);
    st->last_tomb_sweep_ns = 0;
    kvp_store_tomb_expire(st);
    return status;
}

void kvp_store_tomb_expire(kvp_store_h st)
{
    uint64_t        now = kvp_store_wall_ns();
    kvp_htab_iter_t it  = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;

    if (st->tombs.by_key.count == 0 || now - st->last_tomb_sweep_ns < 1000000000ull) {
        return; /* at most once a second */
    }
    st->last_tomb_sweep_ns = now;
    while ((l = kvp_htab_next(&st->tombs.by_key, &it)) != NULL) { /* clearing e removes only e */
        kvp_tomb_t *e = KVP_CONTAINER_OF(l, kvp_tomb_t, key.hlink);

        if (now > e->at_ns && now - e->at_ns >= st->tomb_ttl_ns) {
            KVP_LOG_DEBUG(MOD, "tombstone of session %s past its ttl; dropped", e->key.sid);
            if (kvp_store_tomb_clear(st, e, true) != KVP_OK) {
                return;
            }
            st->stats.tombstones_expired++;
        }
    }
}
