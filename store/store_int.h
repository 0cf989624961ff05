/* store_int.h - internals shared by the store's files: the page entry (also the kvp_page_ref_h
 * handed to readers), the session entry, the slab pool, the entries of the store's hash tables
 * (kvpack/htab.h: pages, sessions, namespace profiles, tombstones), the (ns, sid) order of
 * sessions and tombstones (kvpack/otree.h) and the store object.
 * Locking: everything below runs under kvp_store.lock unless it says otherwise. Unlocked spills
 * (the background spiller's and explicit ones), restores and page loads drop it for their disk
 * I/O with the session busy and its pages pinned; whatever would release or replace a busy
 * session waits on io_done first. */
#ifndef KVPACK_STORE_INT_H
#define KVPACK_STORE_INT_H

#include "kvpack/htab.h"
#include "kvpack/list.h"
#include "kvpack/otree.h"
#include "kvpack/store.h"
#include "tier.h"

#include <pthread.h>
#include <stdbool.h>

/* ---- slab pool (pool.c) ---- */
typedef struct kvp_slab kvp_slab_t;

typedef struct {
    size_t      slot_bytes;   /* size class */
    uint32_t    slots;        /* slots per slab */
    kvp_slab_t *partial;      /* slabs with at least one free slot */
    kvp_slab_t *empty;        /* fully free slabs kept resident while mapped <= budget */
} kvp_pool_class_t;

typedef struct {
    size_t            budget;     /* bytes of slots that may be in use */
    size_t            used;       /* bytes of slots in use */
    size_t            mapped;     /* bytes of slabs mapped */
    size_t            retain;     /* empty slabs stay resident while mapped <= this */
    uint64_t          nslots;     /* slots in use */
    kvp_pool_class_t *classes;
    uint32_t          nclasses;
    size_t            cap_classes;
} kvp_pool_t;

typedef struct {
    void       *ptr;
    kvp_slab_t *slab;
} kvp_pool_slot_t;

void         kvp_pool_init(kvp_pool_t *pool, size_t budget);
void         kvp_pool_cleanup(kvp_pool_t *pool);
size_t       kvp_pool_slot_size(size_t len); /* the class a len falls in */
/* KVP_ERR_NO_SPACE when used + class size would pass the budget; no malloc once a class has a slab */
kvp_status_t kvp_pool_alloc(kvp_pool_t *pool, size_t len, kvp_pool_slot_t *slot_p);
void         kvp_pool_free(kvp_pool_t *pool, const kvp_pool_slot_t *slot);

/* ---- entries ---- */
struct kvp_store;

/* A page known to the store: in DRAM (data != NULL), on disk (on_disk), or both. Handed to
 * readers as kvp_page_ref_h: a reader holds one pin. */
typedef struct kvp_page_ref {
    kvp_hlink_t          hlink;    /* page-table chain */
    struct kvp_store    *store;
    uint64_t             ns;
    kvp_key128_t         key;
    uint32_t             layer;
    uint32_t             len;      /* page bytes */
    kvp_pool_slot_t      slot;     /* slot.ptr = page bytes when in DRAM, NULL otherwise */
    uint32_t             pins;     /* readers + hot sessions naming it: never freed while > 0 */
    uint32_t             nsess;    /* sessions (hot or cold) naming it */
    bool                 on_disk;  /* a copy is in the pages column family */
    bool                 indexed;  /* in the page table (false once deleted while pinned) */
    bool                 deleting; /* in a delete batch being built (evict.c) */
    bool                 batched;  /* in a write batch being built (evict.c; cleared before the
                                    * lock is dropped): a group writes a shared page once */
    uint32_t             batch_seq; /* the last write batch built with its bytes (evict.c): a
                                     * commit marks it on disk only if it carried them */
    bool                 swept;    /* seen on disk by the open-time sweep */
    uint16_t             put_pending; /* page puts no record has named it for yet (saturating):
                                       * while > 0 and the last put is within the grace, it
                                       * outlives its last name, for the record on the way */
    uint64_t             put_ns;   /* when a client last put it */
    bool                 named;    /* a record has named it (else a loose page: never garbage) */
    kvp_list_t           unnamed;  /* on store->unnamed while it waits out that grace */
    bool                 marked;   /* scratch of one locked step (evict.c: a session's orphans) */
    bool                 tail;     /* header has KVP_PAGE_F_TAIL (valid while codec != 0) */
    bool                 sink;     /* header has KVP_PAGE_F_SINK (valid while codec != 0) */
    uint8_t              codec;    /* header codec; 0 = not read yet (disk-only since open) */
    kvp_list_t           idle;     /* on store->idle_pages while in DRAM with pins == 0 */
} kvp_page_t;

/* ---- entries keyed by (ns, sid): sessions and tombstones (index.c) ---- */
/* The key and links a session or tombstone starts with. sid points into the entry itself
 * (kvp_sess_t.sid, kvp_tomb_t.sid): a tombstone holds only its id's own bytes. */
typedef struct {
    kvp_hlink_t hlink; /* hash-table chain */
    kvp_tnode_t onode; /* (ns, sid) order */
    uint64_t    ns;
    const char *sid;   /* NUL-terminated, under KVP_SID_MAX bytes with it */
} kvp_sid_key_t;

/* A hash table for lookups and a tree in (ns, sid) order, so a LIST page visits its own entries
 * only; both link the same entries, which the owner allocates and frees. */
typedef struct {
    kvp_htab_t  by_key;
    kvp_otree_t in_order;
} kvp_sid_index_t;

/* (ns, sid) order: namespace first, then the session id's bytes */
int            kvp_sid_cmp(uint64_t ns_a, const char *sid_a, uint64_t ns_b, const char *sid_b);
/* Empty; the hash table gets `first` buckets at kvp_htab_grow or its first insert. */
void           kvp_sid_index_init(kvp_sid_index_t *ix, size_t first, const char *tag);
void           kvp_sid_index_cleanup(kvp_sid_index_t *ix); /* unlinks all, frees no entry */
kvp_sid_key_t *kvp_sid_index_find(const kvp_sid_index_t *ix, uint64_t ns, const char *sid);
/* Link k, whose (ns, sid) must not be there (the caller found none). KVP_ERR_NO_MEMORY (not
 * logged, k not linked) only when the hash table has no buckets and cannot get them. */
kvp_status_t   kvp_sid_index_insert(kvp_sid_index_t *ix, kvp_sid_key_t *k);
void           kvp_sid_index_remove(kvp_sid_index_t *ix, kvp_sid_key_t *k);
/* A walk in (ns, sid) order from the first entry after (ns, sid) (inclusive: at or after it),
 * or from the first of all when sid is NULL; kvp_sid_index_next gives its entries, NULL at the
 * end. */
void           kvp_sid_index_seek(const kvp_sid_index_t *ix, kvp_otree_iter_t *it, int inclusive,
                                  uint64_t ns, const char *sid);
kvp_sid_key_t *kvp_sid_index_next(kvp_otree_iter_t *it);

/* A session (ns, sid). chunk keys and page pointers are always in memory; the tail is in a pool
 * slot while hot and only on disk while cold. */
typedef struct kvp_sess {
    kvp_sid_key_t       key;       /* (ns, sid) and its links in store->sessions */
    kvp_session_desc_t  desc;      /* desc.tail points into tail_slot while hot, NULL when cold */
    kvp_pool_slot_t     tail_slot;
    kvp_page_t        **pages;     /* n_chunks * layers, chunk-major; each holds one nsess */
    kvp_page_t        **orphans;   /* pages only the older record on disk names (an update put
                                    * under spill durability, not written yet): each holds one
                                    * nsess, so that version stays whole on disk until this
                                    * record replaces it (evict.c) */
    size_t              n_orphans;
    bool                hot;       /* pins its pages, tail in DRAM */
    bool                on_disk;   /* a record is in the sessions column family */
    bool                dirty;     /* DRAM copy is newer than the disk record */
    bool                unsynced;  /* disk record written without an fsync (write-through):
                                    * set and cleared only by the helpers in evict.c */
    uint64_t            write_gen; /* store write_gen of that write (while unsynced) */
    kvp_list_t          unsynced_link; /* on store->unsynced while unsynced, by write_gen */
    bool                busy;      /* a spill or restore has the store lock dropped for its disk
                                    * I/O: not released, replaced or evicted until it clears */
    uint64_t            version;   /* the writer's version (0: written before versions) */
    bool                tomb_on_disk; /* an older tombstone of (ns, sid) may still be on disk
                                       * (cleared in DRAM only: a put under spill durability, or
                                       * a failed disk clear): its next record write or removal
                                       * deletes it in the same batch (tomb.c) */
    uint64_t            last_ns;   /* last access; fixed while in store->cold_by_use (its key) */
    kvp_list_t          lru;       /* on store->hot_lru while hot, oldest first */
    kvp_tnode_t         cold_node; /* in store->cold_by_use while cold */
    char                sid[KVP_SID_MAX]; /* key.sid */
} kvp_sess_t;

/* The session's current version is on disk: a record there, and none newer in DRAM only. */
static inline bool kvp_store_sess_on_disk_now(const kvp_sess_t *s)
{
    return s->on_disk && !s->dirty;
}

/* ---- page and session tables (index.c; kvpack/htab.h tables of kvp_page_t / kvp_sess_t) ---- */
/* Both tables get their first bucket arrays here (KVP_ERR_NO_MEMORY, logged), so an insert into
 * them cannot fail. */
kvp_status_t kvp_index_init(kvp_htab_t *pt, kvp_sid_index_t *st);
void         kvp_index_cleanup(kvp_htab_t *pt, kvp_sid_index_t *st);
kvp_page_t  *kvp_index_page_find(const kvp_htab_t *pt, uint64_t ns, kvp_key128_t key,
                                 uint32_t layer);
void         kvp_index_page_insert(kvp_htab_t *pt, kvp_page_t *page);
void         kvp_index_page_remove(kvp_htab_t *pt, kvp_page_t *page);
kvp_sess_t  *kvp_index_sess_find(const kvp_sid_index_t *st, uint64_t ns, const char *sid);
void         kvp_index_sess_insert(kvp_sid_index_t *st, kvp_sess_t *sess);
void         kvp_index_sess_remove(kvp_sid_index_t *st, kvp_sess_t *sess);

/* ---- namespace codec profiles (nsprof.c) ---- */
typedef struct kvp_nsprof {
    kvp_hlink_t        hlink;     /* profile-table chain */
    uint64_t           ns;
    uint8_t            codec;     /* of sealed pages */
    uint8_t            rot;       /* K_ROTATED | V_ROTATED | V_PREROT of sealed pages */
    uint16_t           heads, head_dim, capacity;
    uint32_t           layers;    /* fixed by the first session record; 0 until then */
    uint32_t           gen;       /* bumped on every change */
    uint32_t           saved_gen; /* gen of the copy in the meta column family (0: none) */
} kvp_nsprof_t;

#define KVP_NSPROF_KEY_MAX   24 /* "ns/" + 16 hex + NUL */
#define KVP_NSPROF_VAL_BYTES 24

/* The profile table (a kvpack/htab.h table owning its kvp_nsprof_t): init allocates nothing,
 * cleanup frees the profiles too. */
void          kvp_nsprof_init(kvp_htab_t *t);
void          kvp_nsprof_cleanup(kvp_htab_t *t);
kvp_nsprof_t *kvp_nsprof_find(const kvp_htab_t *t, uint64_t ns);
/* A profile from a sealed page's header (layers 0, not saved). */
kvp_status_t  kvp_nsprof_create(kvp_htab_t *t, uint64_t ns, const kvp_page_info_t *info,
                                kvp_nsprof_t **prof_p);
/* KVP_ERR_WRONG_CODEC (logged, naming `what`) when the page does not fit prof (NULL: only the
 * rule that tail pages are fp16 applies): sealed pages must match codec, rotation flags and
 * geometry; tail pages are fp16 of the same H, D, P; layer < layers once fixed. */
kvp_status_t  kvp_nsprof_check_page(const kvp_nsprof_t *prof, const kvp_page_info_t *info,
                                    const char *what);
void          kvp_nsprof_key(uint64_t ns, char *key); /* KVP_NSPROF_KEY_MAX bytes */
void          kvp_nsprof_pack(const kvp_nsprof_t *prof, uint8_t *val); /* KVP_NSPROF_VAL_BYTES */
/* Insert a profile read from the meta column family; KVP_ERR_CORRUPT (logged) if unreadable. */
kvp_status_t  kvp_nsprof_load(kvp_htab_t *t, const char *key, size_t klen,
                              const uint8_t *val, size_t vlen);

/* ---- versions and tombstones (tomb.c) ---- */
/* One allocation of sizeof(kvp_tomb_t) + strlen(sid) + 1 bytes (a fixed 128-byte id made a
 * tombstone about 230 B of RSS; kvpack_tombstone_bytes counts what they take now). */
typedef struct kvp_tomb {
    kvp_sid_key_t    key;     /* (ns, sid) and its links in store->tombs; key.sid = sid */
    uint64_t         version; /* the delete's version */
    uint64_t         at_ns;   /* when this node recorded it (CLOCK_REALTIME): the ttl counts from it */
    char             sid[];   /* the session id and its NUL */
} kvp_tomb_t;

#define KVP_TOMB_KEY_MAX (5 + 16 + 1 + KVP_SID_MAX) /* "tomb/" hex "/" sid NUL */

uint64_t     kvp_store_wall_ns(void); /* CLOCK_REALTIME ns */
/* crc32c of (ns, sid)'s key in the sessions column family: ns (8 B big-endian), the id's bytes */
uint32_t     kvp_store_sess_key_crc(uint64_t ns, const char *sid);
/* The sessions column family value of (ns, sid): the desc blob behind a header holding the
 * version and the key's crc32c (tomb.c). */
kvp_status_t kvp_store_record_pack(const kvp_session_desc_t *desc, uint64_t version, uint64_t ns,
                                   const char *sid, uint8_t **blob_p, size_t *len_p);
/* A record read under (ns, sid): KVP_ERR_CORRUPT when it fails a check, its key's among them
 * (that one logged here: a record written for another key is never used under this one). A
 * record of a build before key checks has none and is taken as it is. */
kvp_status_t kvp_store_record_unpack(const uint8_t *blob, size_t len, uint64_t ns,
                                     const char *sid, kvp_session_desc_t *desc,
                                     uint64_t *version_p);
/* The tombstone index (owning its kvp_tomb_t): init allocates nothing, cleanup frees the
 * tombstones too. */
void         kvp_tomb_init(kvp_sid_index_t *t);
void         kvp_tomb_cleanup(kvp_sid_index_t *t);
kvp_tomb_t  *kvp_tomb_find(const kvp_sid_index_t *t, uint64_t ns, const char *sid);
/* A tombstone on its way: staged into a caller's batch, in memory only once that batch is on
 * disk (a delete whose commit failed must leave no tombstone behind: it would refuse newer puts,
 * and a retried delete would find it and write none). */
typedef struct {
    uint64_t    ns, version, at_ns;
    const char *sid;    /* the caller's, alive until staged_done */
    bool        staged; /* version != 0 and newer than the tombstone in memory */
} kvp_tomb_pending_t;
/* Stage (ns, sid, version) into b (NULL: no tier) unless a tombstone as new exists; then, after
 * the caller committed b, kvp_store_tomb_staged_done puts it into memory. */
void         kvp_store_tomb_stage(struct kvp_store *st, kvp_tier_batch_t *b, uint64_t ns,
                                  const char *sid, uint64_t version, kvp_tomb_pending_t *pend);
kvp_status_t kvp_store_tomb_staged_done(struct kvp_store *st, const kvp_tomb_pending_t *pend);
/* Stage, commit and put into memory a tombstone in one call (a delete with no record to drop). */
kvp_status_t kvp_store_tomb_record(struct kvp_store *st, uint64_t ns, const char *sid,
                                   uint64_t version);
void         kvp_store_tomb_batch_put(struct kvp_store *st, kvp_tier_batch_t *b, uint64_t ns,
                                      const char *sid, uint64_t version, uint64_t at_ns);
/* Stage the removal of (ns, sid)'s tombstone on disk into b */
void         kvp_store_tomb_batch_del(struct kvp_store *st, kvp_tier_batch_t *b, uint64_t ns,
                                      const char *sid);
/* Off the table, and first off the disk when disk (a put that supersedes it: not under spill
 * durability, where that put is not on disk yet; the put's session carries tomb_on_disk, so
 * the batch that writes its record, or removes it, removes the tombstone too; a kill before
 * keeps it, still refusing older copies) */
kvp_status_t kvp_store_tomb_clear(struct kvp_store *st, kvp_tomb_t *e, bool disk);
/* Open, after the sessions: tombstones into the table, stray ones off the disk */
kvp_status_t kvp_store_tomb_load(struct kvp_store *st);
/* Open, after the page sweep counted the segments' live bytes: records no newer than their
 * tombstone are removed (before the sweep, their pages were subtracted from counts still at 0,
 * and a segment other sessions use could be unlinked) */
kvp_status_t kvp_store_tomb_drop_older(struct kvp_store *st);
void         kvp_store_tomb_expire(struct kvp_store *st); /* at most once a second */
/* DRAM the tombstones take (kvpack_tombstone_bytes): their allocations, each counted as a
 * 16-byte-aligned malloc chunk with its 8-byte header, and the table's bucket array. */
uint64_t     kvp_store_tomb_bytes(const struct kvp_store *st);

/* ---- periodic store threads (ticker.c) ---- */
typedef struct kvp_ticker {
    struct kvp_store *st;
    pthread_t         thread;
    pthread_cond_t    wake;       /* signalled to stop */
    bool              on, stop;
    bool              final_tick; /* tick once more when stopped */
    uint64_t          period_ns;
    void            (*tick)(struct kvp_store *st); /* with st->lock held (it may drop it) */
} kvp_ticker_t;

kvp_status_t kvp_ticker_start(kvp_ticker_t *tk, struct kvp_store *st, const char *name,
                              uint64_t period_ns, bool final_tick, void (*tick)(struct kvp_store *st));
void         kvp_ticker_stop(kvp_ticker_t *tk); /* no-op when not started; joins */

/* A session record that did not read at open (store.c): kept on disk as it is, and while any is
 * there the open keeps the pages no readable record names (they may be its pages) */
typedef struct {
    uint64_t ns;
    char     sid[KVP_SID_MAX];
} kvp_damaged_rec_t;

/* ---- the store ---- */
struct kvp_store {
    pthread_mutex_t    lock;
    pthread_cond_t     io_done;     /* broadcast when a session stops being busy or a spiller
                                     * round ends */
    pthread_cond_t     spill_wake;  /* signalled to start a spiller round (spiller.c) */
    pthread_t          spiller;     /* background eviction thread; only with a tier */
    bool               spiller_on;  /* the thread runs (set before it starts, cleared at join) */
    bool               spill_stop;  /* close asks it to finish its current spill and exit */
    bool               spill_wanted; /* a round was asked for and has not started */
    bool               spill_running; /* a round is in progress */
    size_t             spill_need;  /* largest room a call waits for: the round frees that too */
    uint32_t           spill_group_max; /* victims per spiller group commit (1: one per sync) */
    kvp_ticker_t       syncer;      /* interval syncer (syncer.c); only under KVP_DURABILITY_INTERVAL */
    uint64_t           sync_interval_ns;
    kvp_ticker_t       compactor;   /* segment compaction (compact.c); with a tier and ratio > 0 */
    pthread_mutex_t    compact_mu;  /* one compaction at a time */
    double             compact_ratio; /* dead fraction that makes a segment a victim; 0 = off */
    kvp_ticker_t       scrubber;    /* scrubbing (scrub.c); with a tier and scrub_rate > 0 */
    uint64_t           scrub_rate;  /* bytes a second; 0 = off */
    struct kvp_scrub_cursor *scrub_cursor; /* the scrubber thread's place */
    bool               scrub_cancel; /* kvp_store_scrub_cancel: passes end (atomic access) */
    kvp_ticker_t       sweeper;     /* idle sessions, tombstones, loose pages: once a second */
    uint64_t           write_gen;   /* bumped by every commit without an fsync that succeeded */
    uint32_t           batch_seq;   /* the last session write batch built (evict.c), never 0 */
    uint64_t           synced_gen;  /* write_gen the last interval sync covered */
    kvp_list_t         unsynced;    /* unsynced sessions, oldest write_gen first */
    kvp_pool_t         pool;
    kvp_htab_t         pages;       /* kvp_page_t (index.c) */
    kvp_sid_index_t    sessions;    /* kvp_sess_t (index.c) */
    kvp_htab_t         profiles;    /* kvp_nsprof_t: namespace codec profiles (nsprof.c) */
    kvp_sid_index_t    tombs;       /* kvp_tomb_t: delete tombstones (tomb.c) */
    uint64_t           tomb_ttl_ns;
    uint64_t           last_tomb_sweep_ns;
    uint64_t           tomb_alloc_bytes; /* the tombstones' allocations, as malloc holds them */
    kvp_list_t         hot_lru;     /* hot sessions, least recently used first */
    kvp_otree_t        cold_by_use; /* sessions only on disk, by last_ns (kvp_store_sess_use_cmp):
                                     * the idle TTL takes the least recently used first, whenever
                                     * and in whatever order they went cold */
    kvp_list_t         idle_pages;  /* DRAM pages with no pin, oldest first */
    kvp_list_t         unnamed;     /* pages that lost their last name within their put grace */
    uint64_t           put_grace_ns; /* kvp_store_params_t.put_grace_ms */
    uint64_t           last_unnamed_ns; /* the last kvp_store_unnamed_expire pass */
    kvp_tier_t        *tier;        /* NULL = DRAM only */
    kvp_damaged_rec_t *damaged;     /* records unreadable at open, until deleted (store.c) */
    size_t             n_damaged, damaged_cap;
    size_t             unreadable_records; /* at this open (damaged may lack some: no memory) */
    uint64_t           unnamed_kept; /* pages the open kept although no readable record names them */
    kvp_durability_t   durability;
    size_t             high_bytes;  /* eviction starts above this */
    size_t             low_bytes;   /* and stops at or below this */
    uint64_t           ttl_ns;      /* 0 = never expire */
    uint64_t           last_sweep_ns;
    kvp_store_stats_t  stats;
};

/* pages (store.c) */
void kvp_store_page_unpin(struct kvp_store *st, kvp_page_t *page);
void kvp_store_page_pin(struct kvp_store *st, kvp_page_t *page);
void kvp_store_page_drop_dram(struct kvp_store *st, kvp_page_t *page);
void kvp_store_page_forget(struct kvp_store *st, kvp_page_t *page);
void kvp_store_page_unpin_keep(struct kvp_store *st, kvp_page_t *page);
/* Read disk-only pages back (one batched MultiGet, CRC-checked); keep is not evicted meanwhile.
 * KVP_ERR_CORRUPT if any page failed its check (that page is dropped on disk and in memory). */
kvp_status_t kvp_store_pages_load(struct kvp_store *st, kvp_page_t **pages, size_t n,
                                  const struct kvp_sess *keep, uint64_t *bytes_p);

/* Check a page read back from disk against its namespace profile (learning the profile from it
 * when the namespace has none: a db written before profiles existed). */
kvp_status_t kvp_store_ns_page_loaded(struct kvp_store *st, kvp_page_t *page,
                                      const kvp_page_info_t *info);
/* Check an append's codec and geometry against the namespace profile (append.c). */
kvp_status_t kvp_store_ns_check_append(struct kvp_store *st, uint64_t ns, const char *sid,
                                       const kvp_store_append_t *append);

/* Check a bound session (its pages, its record, the geometry of its tail pages: tail may be NULL)
 * against each other and the namespace profile (*prof_p, may be NULL). KVP_ERR_WRONG_CODEC. */
kvp_status_t kvp_store_ns_check_session(struct kvp_store *st, const struct kvp_sess *sess,
                                        const kvp_page_info_t *tail, kvp_nsprof_t **prof_p);
/* Add the namespace profile to a session's WriteBatch unless the meta column family has it;
 * *gen_p = the generation written (0: none). batch_done marks it saved once committed. */
void         kvp_store_ns_batch_add(struct kvp_store *st, uint64_t ns, kvp_tier_batch_t *batch,
                                    uint32_t *gen_p);
void         kvp_store_ns_batch_done(struct kvp_store *st, uint64_t ns, uint32_t gen);
/* Open: load every profile from the meta column family (unreadable ones are skipped, counted in
 * crc_failures). */
kvp_status_t kvp_store_ns_load(struct kvp_store *st);

/* Commit a batch (kvp_tier_batch_commit); a KVP_TIER_WAL commit of a non-empty batch that
 * succeeded bumps write_gen,
 * so the interval syncer knows something awaits a sync. Every store-side commit goes here. */
kvp_status_t kvp_store_commit(struct kvp_store *st, kvp_tier_batch_t *b, kvp_tier_mode_t mode);
/* A sync covered the session's last write: clear its unsynced mark, leave store->unsynced. */
void         kvp_store_sess_synced(struct kvp_store *st, kvp_sess_t *sess);

/* sessions, eviction, spill, restore, expiry (evict.c) */
size_t       kvp_store_sess_page_count(const kvp_sess_t *sess);
kvp_status_t kvp_store_sess_write(struct kvp_store *st, kvp_sess_t *sess, bool force_sync);
kvp_status_t kvp_store_sess_spill(struct kvp_store *st, kvp_sess_t *sess); /* I/O under the lock */
/* Spill with the store lock dropped during the disk write; called and returns with it held. */
kvp_status_t kvp_store_sess_spill_unlocked(struct kvp_store *st, kvp_sess_t *sess);
/* Group commit of n hot, idle sessions (the spiller's): one batch holding all their records and
 * unwritten pages, one segment fdatasync + WAL fsync with the lock dropped and every one busy;
 * each goes cold only after that returned OK. On a failure (one disk error) those that needed
 * no I/O (their version on disk and synced) still go cold, freeing their DRAM with no write, so
 * a full disk leaves room for reads; the others stay hot. */
kvp_status_t kvp_store_sess_spill_group(struct kvp_store *st, kvp_sess_t **sess, size_t n);
/* Bytes a spill of a hot session would free: its tail slot and the slots of pages only it pins. */
size_t       kvp_store_sess_spill_gain(const kvp_sess_t *sess);
void         kvp_store_sess_idle(struct kvp_store *st, kvp_sess_t *sess); /* clear busy, wake */
/* Make a session hot (its tail and missing pages read from disk); *pages_p / *bytes_p get what
 * was read (0 when it was all in DRAM). */
kvp_status_t kvp_store_sess_restore(struct kvp_store *st, kvp_sess_t *sess, uint32_t *pages_p,
                                    uint64_t *bytes_p);
/* An update of old (spill durability: s is not written yet, old's record stays on disk): s takes
 * old's orphans and adds old's pages it does not name. KVP_ERR_NO_MEMORY changes nothing. */
kvp_status_t kvp_store_sess_adopt_orphans(kvp_sess_t *s, kvp_sess_t *old);
/* The record that named s's orphans is gone from disk (replaced or deleted): their nsess drop and
 * those nobody names leave the disk and memory (kvp_store_pages_let_go). */
void         kvp_store_sess_orphans_let_go(struct kvp_store *st, kvp_sess_t *s);
/* Remove a session from DRAM and disk; tomb_version != 0 also records that tombstone in the same
 * WriteBatch. */
kvp_status_t kvp_store_sess_remove(struct kvp_store *st, kvp_sess_t *sess, uint64_t tomb_version);
void         kvp_store_sess_release(struct kvp_store *st, kvp_sess_t *sess);
void         kvp_store_sess_touch(struct kvp_store *st, kvp_sess_t *sess);
/* The order of store->cold_by_use: last_ns, then the entry's address (a session is there once). */
int          kvp_store_sess_use_cmp(const kvp_tnode_t *a, const kvp_tnode_t *b);
/* A cold session (hot false) into store->cold_by_use, at its last_ns: O(log n). */
void         kvp_store_sess_cold_link(struct kvp_store *st, kvp_sess_t *sess);
/* A page no session names any more goes, unless it is waiting: a client put it for a record
 * that has not come yet (puts not matched by a record naming it), within the put grace, and
 * that record would be refused without it. A page never named is loose, not garbage (kept
 * until a record names it, or swept at the next open). */
static inline bool kvp_store_page_waiting(const struct kvp_store *st, const kvp_page_t *p,
                                          uint64_t now)
{
    return p->put_pending > 0 && now - p->put_ns < st->put_grace_ns;
}
static inline bool kvp_store_page_garbage(const struct kvp_store *st, const kvp_page_t *p,
                                          uint64_t now)
{
    return p->nsess == 0 && p->named && !kvp_store_page_waiting(st, p, now);
}
/* p lost its last name but is not garbage yet (a put within the grace): onto store->unnamed,
 * for kvp_store_unnamed_expire. */
void kvp_store_page_unnamed(struct kvp_store *st, kvp_page_t *p);
/* Let go of the pages on store->unnamed whose grace is over (at most every 100 ms; store lock
 * held, called as requests arrive); ones named again leave the list. */
void kvp_store_unnamed_expire(struct kvp_store *st);
/* Pages the caller pinned that just lost a session's name (a put replaced it, its orphans were let
 * go, their grace ran out): the garbage ones (kvp_store_page_garbage) are deleted on disk and
 * dropped in memory, as a delete drops them, so an update leaves no unreachable page behind; ones
 * in their put grace wait on store->unnamed; then every one is unpinned. A failed disk delete
 * leaves those on disk (the next open's sweep). */
void         kvp_store_pages_let_go(struct kvp_store *st, kvp_page_t **pages, size_t n);
/* What an append read of its session, for kvp_store_session_put_expect: its record at version,
 * or (exists false) no record. */
typedef struct {
    bool     exists;
    uint64_t version;
} kvp_sess_expect_t;

/* KVP_ERR_STALE (logged, counted) when a put of (ns, sid) at version would be refused now: the
 * store holds a newer record or a tombstone as new. An append checks it before it seals pages,
 * which a record refused at the end would leave loose (named by nothing, kept until the next
 * open). Takes the store lock. */
kvp_status_t kvp_store_version_check(struct kvp_store *st, uint64_t ns, const char *sid,
                                     uint64_t version);
/* kvp_store_session_put_version, on the condition (checked under the store lock with the
 * version, expect NULL: none) that the record is still what the caller read: else
 * KVP_ERR_NOT_FOUND (deleted since) or KVP_ERR_INVALID (put or appended since), nothing
 * changed. An append computes its record from what it read, so a write landing in between
 * must not be overwritten by it. */
kvp_status_t kvp_store_session_put_expect(struct kvp_store *st, uint64_t ns, const char *sid,
                                          const kvp_session_desc_t *desc, uint64_t version,
                                          const kvp_sess_expect_t *expect);

/* Evict until the pool has room for need more bytes at or below the low watermark: the
 * synchronous path (spills under the lock), one walk over the hot sessions from the least
 * recently used. Once a spill failed (a full disk) the walk goes on with the sessions already on
 * disk and synced only (no write: their DRAM is let go), and the loose pages are not written; then
 * KVP_OK if need fits the budget, else that spill's status. Never drops the lock. */
kvp_status_t kvp_store_make_room(struct kvp_store *st, size_t need, const kvp_sess_t *keep);
/* Drop DRAM copies of on-disk pages nobody pins, oldest first, until used <= target (no I/O). */
void         kvp_store_drop_cached(struct kvp_store *st, size_t target);
/* At the end of a call past the high watermark: drop cached copies, then wake the spiller (with
 * a tier) or drop victims inline (without one: no disk I/O). Never drops the lock. */
void         kvp_store_evict_if_needed(struct kvp_store *st);
void         kvp_store_expire_idle(struct kvp_store *st);

/* interval syncer (syncer.c, KVP_DURABILITY_INTERVAL) */
kvp_status_t kvp_store_syncer_start(struct kvp_store *st); /* open, once the tier is up */
void         kvp_store_syncer_stop(struct kvp_store *st);  /* close: one last tick, then join */
/* One tick, store lock held (dropped for the sync): when write_gen moved since the last sync,
 * take gen = write_gen, sync the tier, then clear the marks of the sessions written at or before
 * gen (a session written during the sync keeps its mark). during (may be NULL; a test hook) runs
 * with the lock dropped just before the sync. A failure counts one disk error and keeps every
 * mark (the next tick retries). KVP_OK also when there was nothing to sync. */
kvp_status_t kvp_store_sync_tick(struct kvp_store *st, void (*during)(void *arg), void *arg);

/* A page's disk copy (read: where it was read from) failed its check on a background read
 * (compaction, scrub; store lock not held), counted in crc_failures: with a DRAM copy (checked
 * when it came in) that copy is written again in its place (a synced commit); with none and nobody
 * reading it, it is dropped as a failed read drops it (locator deleted, the sessions naming it
 * report KVP_ERR_CORRUPT); else KVP_ERR_BUSY and the copy stays where it is (not moved). A copy
 * the key no longer names (dropped and put again since it was listed) is nobody's and is left
 * alone: KVP_ERR_STALE, not counted. */
kvp_status_t kvp_store_disk_copy_bad(struct kvp_store *st, const kvp_tier_loc_t *read);

/* Read pages [0, n) of locs into buf (their spans back to back, 4 KiB-aligned) and check each
 * (CRC, header, the key it is stored under): dst[i] gets its bytes, or NULL when it could not be
 * read (deleted meanwhile, I/O error: *unread_p) or failed its check (then dropped through
 * kvp_store_disk_copy_bad: *bad_p). Store lock not held. Compaction and scrubbing read this way. */
void kvp_store_read_checked(struct kvp_store *st, kvp_tier_loc_t *locs, size_t n, uint8_t *buf,
                            void **dst, uint64_t *unread_p, uint64_t *bad_p);

/* scrubbing thread (scrub.c) */
kvp_status_t kvp_store_scrubber_start(struct kvp_store *st); /* open, once the tier is up */
void         kvp_store_scrubber_stop(struct kvp_store *st);  /* close: finishes its tick */

/* segment compaction thread (compact.c) */
kvp_status_t kvp_store_compactor_start(struct kvp_store *st); /* open, once the tier is up */
void         kvp_store_compactor_stop(struct kvp_store *st);  /* close: finishes a move in flight */

/* background spiller (spiller.c) */
kvp_status_t kvp_store_spiller_start(struct kvp_store *st); /* open, once the tier is up */
void         kvp_store_spiller_stop(struct kvp_store *st);  /* close: waits for a spill in flight */
void         kvp_store_spiller_kick(struct kvp_store *st);  /* ask for a round */
/* Close, spill durability: every session only in DRAM (or changed since its spill) spilled in
 * groups, with progress lines; stops at a failed group (logged with the count left): that
 * group's status, else KVP_OK. Takes the store lock. */
kvp_status_t kvp_store_spill_at_close(struct kvp_store *st);
/* Backpressure: while used + need would pass the budget and the spiller is (or, asked now, will
 * be) working, wait for it with the lock dropped. Returns true if it waited, i.e. the caller
 * must re-read any state it looked at before; call it only where nothing is assumed across it. */
bool         kvp_store_room_wait(struct kvp_store *st, size_t need);

#endif
