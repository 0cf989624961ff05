/* store.h - a node's page store: DRAM page pool with a byte budget and watermarks, the
 * (namespace, chunk key, layer) page index, session records, and the RocksDB SSD tier.
 *
 * Pages are opaque bytes to the store except for their header: every page put is verified with
 * kvp_page_parse (CRC included) and indexed under (ns, header chunk key, header layer). Pages read
 * back from disk are CRC-checked again; a corrupt page is reported and dropped, never served.
 *
 * Main flow: kvp_store_page_put -> pool -> index; kvp_store_session_put -> record (+ WriteBatch
 * under write-through/sync); eviction spills least-recently-used sessions to RocksDB; a get of a
 * cold session restores it (MultiGet). kvp_store_open on an existing directory is a warm restart.
 * Thread-safety: every call may be made from any thread (one internal lock). With a db_path a
 * background spiller thread spills least-recently-used sessions once DRAM use passes the high
 * watermark, down to the low one; a call waits for it only when its own allocation would pass the
 * budget (backpressure). Spills and restores drop the lock for their disk I/O, with the session
 * held busy, so DRAM hits of other sessions go on; a call on that same session waits. The
 * spiller writes up to spill_group_max sessions per round as one group (group commit): all their
 * pages in one segment append, all their locators and records in one WriteBatch, one segment
 * fdatasync and one WAL fsync; only then does any of them leave DRAM, and a failed write leaves
 * all of them in DRAM (one disk error, retried by a later round). Disk writes
 * of write-through/sync puts, of evictions forced by a failed allocation, and the synced rewrite
 * (or the drop) of a disk copy scrubbing or compaction found damaged run under the lock.
 * Under KVP_DURABILITY_INTERVAL a syncer thread makes every write older than its tick durable
 * (one segment fdatasync + WAL fsync, the store lock dropped) every sync_interval_ms, and only
 * when something was written since the last one.
 * Memory: with a db_path, kvp_store_open fixes glibc's mmap threshold at 128 KiB (mallopt) so the
 * tier's large transient buffers go back to the kernel and resident memory tracks the budget. */
#ifndef KVPACK_STORE_H
#define KVPACK_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/codec.h"
#include "kvpack/hist.h"
#include "kvpack/page.h"
#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_store    *kvp_store_h;
typedef struct kvp_page_ref *kvp_page_ref_h;

typedef enum {
    KVP_DURABILITY_SPILL         = 0, /* only evicted (or explicitly spilled) sessions reach disk,
                                       * and at kvp_store_close every session only in DRAM */
    KVP_DURABILITY_WRITE_THROUGH = 1, /* every session put also reaches disk (WAL, no fsync) */
    KVP_DURABILITY_SYNC          = 2, /* write-through with an fsync'd WAL before the ack */
    KVP_DURABILITY_INTERVAL      = 3  /* write-through, plus a background segment fdatasync + WAL
                                       * fsync every sync_interval_ms when anything was written
                                       * since the last one: a put is durable at most about that
                                       * long (plus the sync's own time) after its ack */
} kvp_durability_t;

enum kvp_store_params_field {
    KVP_STORE_PARAM_DRAM_BUDGET = KVP_BIT(0),
    KVP_STORE_PARAM_HIGH_WM     = KVP_BIT(1),
    KVP_STORE_PARAM_LOW_WM      = KVP_BIT(2),
    KVP_STORE_PARAM_DB_PATH     = KVP_BIT(3),
    KVP_STORE_PARAM_DURABILITY  = KVP_BIT(4),
    KVP_STORE_PARAM_IDLE_TTL    = KVP_BIT(5),
    KVP_STORE_PARAM_NODE_ID     = KVP_BIT(6),
    KVP_STORE_PARAM_TOMB_TTL    = KVP_BIT(7),
    KVP_STORE_PARAM_SPILL_GROUP = KVP_BIT(8),
    KVP_STORE_PARAM_SYNC_INTERVAL = KVP_BIT(9),
    KVP_STORE_PARAM_COMPACT       = KVP_BIT(10),
    KVP_STORE_PARAM_SEGMENT_BYTES = KVP_BIT(11),
    KVP_STORE_PARAM_SCRUB         = KVP_BIT(12),
    KVP_STORE_PARAM_DISK_RESERVE  = KVP_BIT(13),
    KVP_STORE_PARAM_PUT_GRACE     = KVP_BIT(14),
};

typedef struct kvp_store_params {
    uint64_t         field_mask;     /* MUST be first; unset fields take defaults */
    size_t           dram_budget;    /* bytes of page data in DRAM; default 1 GiB */
    double           high_watermark; /* fraction of budget that starts eviction; default 0.90 */
    double           low_watermark;  /* eviction stops below this fraction; default 0.70 */
    const char      *db_path;        /* RocksDB directory (borrowed); NULL = DRAM only */
    kvp_durability_t durability;     /* default KVP_DURABILITY_SPILL */
    uint32_t         idle_ttl_s;     /* sessions idle this long expire entirely; 0 = never */
    const char      *node_id;        /* stored in the meta column family; default "kvpackd" */
    uint32_t         tomb_ttl_s;     /* delete tombstones are kept this long; default 7 days */
    uint32_t         spill_group_max; /* sessions the background spiller writes per sync (group
                                       * commit, up to 8 MiB of pages); default 64, 1 = one
                                       * segment fdatasync + WAL fsync per session */
    uint32_t         sync_interval_ms; /* KVP_DURABILITY_INTERVAL: ms between background syncs,
                                        * 1..60000 (else KVP_ERR_INVALID); default 100; ignored
                                        * by the other policies */
    double           compact_dead_ratio; /* segment compaction: a background thread empties
                                          * segment files whose dead bytes reach this fraction
                                          * of their size (0 < r <= 1); 0 = off; default 0.5 */
    uint64_t         segment_bytes;  /* a segment file this large starts the next one;
                                      * 64 KiB..16 GiB, default 256 MiB */
    uint64_t         scrub_bytes_per_s; /* scrubbing: a background thread reads every page on
                                         * disk back and checks it, this many bytes a second, over
                                         * and over; 0 = off (default) */
    uint64_t         disk_reserve;   /* bytes of the db's filesystem kept free: a put or spill that
                                      * would leave less is refused with KVP_ERR_NO_SPACE (deletes
                                      * are not), and a file this large is held for when the disk
                                      * fills anyway (removed then, so deletes have room); 0 = off;
                                      * default 4x the index memtable (16-256 MiB: dram_budget / 2
                                      * clamped), at least 3 memtables */
    uint32_t         put_grace_ms;   /* a page a client put and no record of its has named yet
                                      * outlives its last name (another session's, deleted or
                                      * replaced) this long, for that record; default 60000 */
} kvp_store_params_t;

typedef struct {
    uint64_t dram_bytes;      /* page bytes resident in DRAM */
    uint64_t dram_pages;
    uint64_t dram_budget;
    uint64_t sessions;        /* known sessions (DRAM or disk) */
    uint64_t sessions_on_disk;
    uint64_t spills;          /* sessions written to disk by eviction or request */
    uint64_t restores;        /* sessions read back from disk */
    uint64_t spill_bytes;
    uint64_t restore_bytes;
    uint64_t crc_failures;    /* pages dropped because they failed their CRC on read, and
                               * index records refused at open as damaged (session records,
                               * tombstones, namespace profiles: a bad CRC, or another key's) */
    uint64_t disk_errors;     /* I/O or disk-full errors from the SSD tier */
    uint64_t expired;         /* sessions removed by the idle TTL */
    uint64_t dropped;         /* sessions evicted without an SSD tier (gone, not spilled) */
    uint64_t disk_files;      /* segment files holding page bytes */
    uint64_t disk_bytes;      /* their size */
    uint64_t disk_live_bytes; /* bytes of those that pages on disk still name (rest: garbage) */
    uint64_t disk_logical_bytes; /* since open: page and record bytes the store committed to the
                                  * SSD tier (spills, write-through puts), each once */
    uint64_t disk_segment_write_bytes; /* since open: bytes appended to segment files (pages in
                                        * 4 KiB-aligned spans, compaction's copies included);
                                        * over disk_logical_bytes: the segment write
                                        * amplification (RocksDB's own writes not counted) */
    uint64_t swept_pages;     /* pages no session named, removed from disk at open */
    uint64_t spill_waits;     /* calls that waited for the background spiller at the budget */
    uint64_t sessions_in_dram; /* hot sessions: pages and tail in the DRAM pool */
    uint64_t tombstones;      /* delete tombstones held */
    uint64_t tombstones_expired; /* dropped after the tombstone ttl */
    uint64_t tombstone_bytes; /* DRAM those held take (outside the DRAM budget): each its
                               * allocation as malloc holds it (about 90 B + its id's
                               * length) and 8-16 B of hash buckets */
    uint64_t stale_refused;   /* puts and deletes refused as older than what the store holds */
    /* Time of each counted spill (record + page write and its fdatasync, or the WAL sync; for a
     * session the background spiller wrote in a group, the whole group's I/O, one sample per
     * session) and restore (record and page reads, CRC checks): ns summed, and one count per kvpack/hist.h
     * slot (not cumulative; last slot +Inf), so each histogram's counts add up to spills or
     * restores in the same snapshot. */
    uint64_t spill_ns;
    uint64_t spill_hist[KVP_HIST_BUCKETS + 1];
    uint64_t restore_ns;
    uint64_t restore_hist[KVP_HIST_BUCKETS + 1];
    uint64_t spill_syncs;     /* segment fdatasync + WAL fsync pairs issued by spills: one per
                               * background spiller group, one per other spill that wrote */
    uint64_t interval_syncs;  /* segment fdatasync + WAL fsync pairs the interval syncer
                               * (KVP_DURABILITY_INTERVAL) issued: one per tick that found
                               * something written since the last one (none while idle); a
                               * failed one counts in disk_errors instead and is retried */
    uint64_t sessions_unsynced; /* sessions whose last disk write has not been fsync'd yet
                                 * (write-through/interval, until a sync or spill covers it) */
    uint64_t compact_segments;    /* segment files compaction emptied and removed */
    uint64_t compact_moved_bytes; /* live page bytes compaction copied to move them */
    uint64_t compact_freed_bytes; /* file bytes given back by the segments it removed */
    uint64_t compact_lock_max_ns; /* longest hold of the SSD tier's lock by one compaction step */
    uint64_t scrub_bytes;         /* page bytes scrubbing read back and checked */
    uint64_t scrub_passes;        /* complete passes over every page on disk */
    uint64_t index_rebuilds;      /* the SSD tier's RocksDB index rebuilt from every record that
                                   * read after one of its blocks was found damaged (at open, by a
                                   * write RocksDB refused, by scrubbing); since open */
    uint64_t index_lost;          /* runs of index records those rebuilds lost to damage no read
                                   * got past (0 when only values were damaged) */
    uint64_t wal_dropped_bytes;   /* bytes of damaged write-ahead log records the open's recovery
                                   * dropped (the writes in them, and the rest of their 32 KiB log
                                   * block, are lost); 0 after a clean stop or crash */
    uint64_t disk_tier;           /* 1 with an SSD tier (a db_path), 0 DRAM only */
    uint64_t disk_free_bytes;     /* free space of the SSD tier's filesystem now; UINT64_MAX when
                                   * unknown (no SSD tier, or the query failed) */
    uint64_t disk_reserve_bytes;  /* bytes held in its reserve file now (disk_reserve, or 0 while
                                   * released) */
    uint64_t disk_full_refusals;  /* disk writes refused: they would have left less than the
                                   * reserve free (the puts or spills get KVP_ERR_NO_SPACE) */
    uint64_t disk_reserve_releases; /* the reserve file removed: a write failed for space */
} kvp_store_stats_t;

kvp_status_t kvp_store_open(const kvp_store_params_t *params, kvp_store_h *store_p);
/* Makes the store durable ahead of kvp_store_close, for a process that has more teardown to do
 * before it (kvpackd: the transport, which can crash): stops the background threads and, under
 * KVP_DURABILITY_SPILL, spills every session only in DRAM (as kvp_store_close does), then the
 * interval syncer's last sync. Reads still work afterwards; a later write is kept only in DRAM
 * until kvp_store_close spills it. kvp_store_close repeats none of the work done (it tries again
 * only what is still only in DRAM: written since, or left by a failed spill). KVP_OK, or the
 * failed spill's status when sessions only in DRAM could not be saved (logged with their count:
 * they are lost at close), so a process can say so in its exit status. Not concurrently with
 * itself or kvp_store_close. NULL: no-op (KVP_OK). */
kvp_status_t kvp_store_shutdown(kvp_store_h store);
/* Stops the background threads; under KVP_DURABILITY_SPILL spills every session only in DRAM
 * first (progress lines; a failed spill stops that and logs how many are lost); all of this is
 * kvp_store_shutdown, skipped where it was done. NULL: no-op. */
void         kvp_store_close(kvp_store_h store);

/* Namespace profiles: a namespace's first sealed (non-tail) page fixes its codec, rotation flags,
 * heads, head_dim and P, and its first session record fixes its layer count; they are persisted
 * (meta column family, with the first session write) and survive restarts. Pages, records and
 * appends that disagree are refused with KVP_ERR_WRONG_CODEC and change nothing; tail pages must
 * be fp16 of the namespace's H, D, P. */

/* Pages. page is borrowed (copied into the pool). KVP_ERR_CORRUPT / KVP_ERR_BAD_PAGE on a bad
 * page; KVP_ERR_WRONG_CODEC when it does not fit the namespace's profile; KVP_ERR_NO_SPACE when
 * the budget cannot be met even after eviction. Re-putting an identical key is a no-op (prefix
 * sharing). */
kvp_status_t kvp_store_page_put(kvp_store_h store, uint64_t ns, const void *page, size_t len);
/* Reference a page (DRAM, or restored from disk). The bytes stay valid until the ref is released. */
kvp_status_t kvp_store_page_get(kvp_store_h store, uint64_t ns, kvp_key128_t key, uint32_t layer,
                                kvp_page_ref_h *ref_p);
const void  *kvp_page_ref_data(kvp_page_ref_h ref, size_t *len_p);
void         kvp_page_ref_release(kvp_page_ref_h ref); /* NULL is a no-op */

/* Sessions. desc is borrowed. Every (chunk key, layer) page the record names must already be in
 * the store (else KVP_ERR_NOT_FOUND), be a sealed page of the namespace's codec, and the record's
 * P, layers and fp16 tail must fit the profile (else KVP_ERR_WRONG_CODEC; an existing session of
 * that id is left as it was). A session whose pages and tail take more pool bytes than the DRAM
 * budget is refused with KVP_ERR_NO_SPACE (a get restores a session whole, so it could never be
 * read back). Under write-through/sync/interval the record and its pages reach disk in one
 * WriteBatch before this returns. */
kvp_status_t kvp_store_session_put(kvp_store_h store, uint64_t ns, const char *sid,
                                   const kvp_session_desc_t *desc);
/* Deep copy of the record into *desc (kvp_session_desc_clear frees it); restores a spilled
 * session's pages into DRAM first. */
kvp_status_t kvp_store_session_get(kvp_store_h store, uint64_t ns, const char *sid,
                                   kvp_session_desc_t *desc);
/* Write the session (record + its pages) to disk in one WriteBatch and drop unshared pages from
 * DRAM. KVP_ERR_UNSUPPORTED without a db_path. */
kvp_status_t kvp_store_session_spill(kvp_store_h store, uint64_t ns, const char *sid);
kvp_status_t kvp_store_session_delete(kvp_store_h store, uint64_t ns, const char *sid);

/* ---- versions and tombstones (last writer wins) ----
 * Every record carries the version its writer chose (ns since the epoch; 0 for records written
 * before versions and for the calls above, which are version 0). A put older than the record or
 * the tombstone held for (ns, sid) is refused with KVP_ERR_STALE and changes nothing (a put equal
 * to the record's version replaces it: an idempotent retry; one equal to a tombstone's is stale:
 * deletes win ties); a newer put clears the tombstone. A delete with version != 0 removes a
 * record that is not newer (else KVP_ERR_STALE) and keeps a tombstone (ns, sid, version) on disk
 * for tomb_ttl_s, also when there was no record (then it still returns KVP_ERR_NOT_FOUND). */
kvp_status_t kvp_store_session_put_version(kvp_store_h store, uint64_t ns, const char *sid,
                                           const kvp_session_desc_t *desc, uint64_t version);
kvp_status_t kvp_store_session_delete_version(kvp_store_h store, uint64_t ns, const char *sid,
                                              uint64_t version);
/* Drop this store's copy (repair moving a replica away) when its version is <= version, else
 * KVP_ERR_STALE; no tombstone is kept. KVP_ERR_NOT_FOUND without a record. */
kvp_status_t kvp_store_session_drop(kvp_store_h store, uint64_t ns, const char *sid,
                                    uint64_t version);
/* What a session get found besides the record: its version and what it read from the SSD tier. */
typedef struct {
    uint64_t version;    /* the record's version (0: written before versions); with
                          * KVP_ERR_NOT_FOUND its delete tombstone's (0: none) */
    uint32_t disk_pages; /* pages this get read back from disk (0: every one was in DRAM) */
    uint64_t disk_bytes; /* those pages' bytes, plus the fp16 tail's when it came from disk */
} kvp_store_get_info_t;
/* As kvp_store_session_get, with *info filled (info may be NULL). */
kvp_status_t kvp_store_session_get_info(kvp_store_h store, uint64_t ns, const char *sid,
                                        kvp_session_desc_t *desc, kvp_store_get_info_t *info);

/* ---- listing (list.c) ---- */
enum kvp_store_where {
    KVP_STORE_IN_DRAM = KVP_BIT(0), /* hot: its pages and tail are in the DRAM pool */
    KVP_STORE_ON_DISK = KVP_BIT(1), /* its current record is in the sessions column family (not
                                     * when only an older one is: a put or append under spill
                                     * durability not spilled yet) */
};

typedef struct {
    uint64_t ns;
    char     sid[KVP_SID_MAX];
    uint32_t layers, page_tokens, n_chunks, tail_tokens;
    uint32_t codec, heads, head_dim; /* the namespace profile's; 0 while the namespace has none */
    uint32_t where;                  /* kvp_store_where bits */
    uint64_t bytes;                  /* the pages it names + its tail; a page not read since the
                                      * store opened counts as the profile's full page size */
    uint64_t version;                /* record or tombstone version */
    uint32_t deleted;                /* a tombstone: only ns, sid and version are set */
    uint32_t damaged;                /* it names a page this store lost (failed its check or
                                      * missing on disk): never served here, KVP_ERR_CORRUPT,
                                      * until it is put again (kvpack repair does that) */
} kvp_store_session_info_t;

#define KVP_STORE_LIST_DELETED   KVP_BIT(0) /* kvp_store_session_list_ex: tombstones too */
#define KVP_STORE_LIST_INCLUSIVE KVP_BIT(1) /* start at the cursor's own key, not after it (a
                                             * probe of one session: max 1, then compare sid) */

/* Up to max sessions (hot or cold) that come strictly after (after_ns, after_sid) in (ns, then
 * sid byte) order, or from the first one when after_sid is NULL, into out[0..*n_p). *more_p (may
 * be NULL) says whether sessions after the last one remain. The cursor is a key, not a position:
 * sessions put or deleted between pages never make a page repeat or skip the others. */
kvp_status_t kvp_store_session_list(kvp_store_h store, uint64_t after_ns, const char *after_sid,
                                    kvp_store_session_info_t *out, uint32_t max, uint32_t *n_p,
                                    int *more_p);
/* As kvp_store_session_list; flags KVP_STORE_LIST_DELETED merges tombstones into the order,
 * KVP_STORE_LIST_INCLUSIVE starts at (after_ns, after_sid) itself. */
kvp_status_t kvp_store_session_list_ex(kvp_store_h store, uint64_t after_ns, const char *after_sid,
                                       uint64_t flags, kvp_store_session_info_t *out, uint32_t max,
                                       uint32_t *n_p, int *more_p);

/* Leading chunks (of keys[0..n)) present for all `layers` layers, in DRAM or on disk. */
kvp_status_t kvp_store_lookup(kvp_store_h store, uint64_t ns, const kvp_key128_t *keys, uint32_t n,
                              uint32_t layers, uint32_t *hit_chunks_p);

void kvp_store_stats(kvp_store_h store, kvp_store_stats_t *stats);

/* What a page of len bytes takes in a node, for capacity planning (kvpack plan): its DRAM pool
 * slot, which the DRAM budget counts (len rounded up to 64 B, or to 4 KiB above 4 KiB), and its
 * SSD footprint (above 4 KiB a segment-file extent rounded up to 4 KiB; at or below, its bytes
 * in the RocksDB index). A session's tail pages take one slot together in DRAM (their bytes back
 * to back) and live in its record on disk. */
uint64_t kvp_store_page_dram_bytes(uint64_t len);
uint64_t kvp_store_page_ssd_bytes(uint64_t len);
/* What a session record of len bytes (kvp_session_desc_pack, its tail pages included) takes in
 * a node's index: a node writes every record with its version, in a 24-byte envelope. */
uint64_t kvp_store_record_ssd_bytes(uint64_t len);

/* File descriptors a store with a db_path may hold at most under the open files limit now: its
 * segment read cache (a quarter of the limit, 256..65536) plus 256 for RocksDB's files, the
 * segment being written and the next one. A node leaves them out of its connection cap. */
size_t kvp_store_fd_budget(void);

/* Wait until the background spiller is idle with no round pending (asking for one first when DRAM
 * use is above the high watermark). KVP_OK when use is then at or below the high watermark,
 * KVP_ERR_NO_SPACE when the rest is pinned or could not be written. For tests, operators and
 * shutdown; without a db_path eviction is inline and this only reports. */
kvp_status_t kvp_store_quiesce(kvp_store_h store);

/* Segment compaction (compact.c), what the background thread does every 2 s when
 * compact_dead_ratio > 0: every segment file (not the one being appended) whose dead bytes are
 * at least dead_ratio of its size has its live pages copied to the active segment (fdatasync,
 * then the new locators with an fsync'd WAL, only for pages not deleted or rewritten meanwhile)
 * and is removed once nothing names it. Sessions stay readable throughout: a restore that
 * located a page before it moved reads it from its new place. One compaction at a time; the
 * store lock is not held. A failed write (full disk) counts one disk error and loses nothing;
 * the old file stays. KVP_ERR_UNSUPPORTED without a db_path. */
kvp_status_t kvp_store_compact(kvp_store_h store, double dead_ratio);

/* What one scrubbing pass did. */
typedef struct {
    uint64_t bytes;          /* page bytes read back and checked */
    uint64_t bad_pages;      /* pages that failed their check (written again or dropped) */
    uint32_t index_rebuilt;  /* 1: a block of the RocksDB index failed its checksum: rebuilt */
} kvp_store_scrub_t;

/* Scrubbing (scrub.c), one whole pass now (the background thread, scrub_bytes_per_s > 0, does the
 * same a little every second): every page on disk is read back and checked (CRC32C, header, the
 * key it is stored under); a bad one (crc_failures) is written again from its DRAM copy when the
 * page is in DRAM, else dropped as a failed read drops it (the sessions naming it list as
 * damaged and answer KVP_ERR_CORRUPT); then every block of the index. Counted in scrub_bytes and
 * scrub_passes; *out (may be NULL) gets this pass's figures. KVP_ERR_UNSUPPORTED without a
 * db_path. */
kvp_status_t kvp_store_scrub(kvp_store_h store, kvp_store_scrub_t *out);
/* A process that is stopping: a kvp_store_scrub running now, or called later, ends after its
 * current run of reads (at most 8 MiB) with KVP_ERR_SHUTTING_DOWN, so it does not hold the stop
 * (and the stop-time spill) for a whole pass over the disk. Any thread; NULL: no-op. */
void         kvp_store_scrub_cancel(kvp_store_h store);

/* ---- tail append and sealing (append.c) ----
 * A session's last < P tokens live in its fp16 tail (one KVP_PAGE_F_TAIL page per layer). An
 * append adds tokens' K/V to the tail; every time the tail reaches P tokens, those P tokens are
 * sealed: encoded per layer with the codec given here into a page stored under the next chunk key,
 * kvp_chunk_key(previous key, ns_fingerprint, the chunk's P token ids), and appended to the
 * session's chunk list, so lookup grows and other sessions with the same tokens share the pages.
 * The codec comes with each append: pass the namespace's codec, the one its fingerprint was made
 * with (once the namespace has a profile, another one is refused with KVP_ERR_WRONG_CODEC). The store keeps K/V, not token ids, so ids holds
 * the ids of the session's current tail tokens followed by the ntok new ones. The first append
 * creates the session. Tail tokens are held as fp16 (f32 input is rounded once, on append).
 * An append writes its record only if the session's record is still the one it read (checked
 * under the store lock): a put, delete or other append of the session that lands while it encodes
 * makes it fail (KVP_ERR_INVALID; KVP_ERR_NOT_FOUND when deleted) and change nothing, so callers
 * need not serialise appends against puts (kvpackd serialises appends among themselves, so they
 * queue instead of failing). */
enum kvp_store_append_field {
    KVP_STORE_APPEND_VERSION = KVP_BIT(0), /* the record takes version */
    KVP_STORE_APPEND_CHUNKS  = KVP_BIT(1), /* the session must exist and hold chunks chunks */
    KVP_STORE_APPEND_FIRST_POS = KVP_BIT(2), /* the session must hold first_pos tokens */
    KVP_STORE_APPEND_BASE    = KVP_BIT(3), /* the session's record must be at base */
};

typedef struct kvp_store_append {
    uint64_t        field_mask;     /* MUST be first; KVP_STORE_APPEND_* for the optional ones */
    kvp_codec_id_t  codec;          /* codec of sealed pages (the namespace's) */
    uint64_t        ns_fingerprint; /* chained into chunk keys */
    uint32_t        layers;         /* geometry: must match an existing session */
    uint32_t        heads;
    uint32_t        head_dim;
    uint32_t        page_tokens;    /* P */
    kvp_dtype_t     dtype;          /* of k and v */
    const void     *k;              /* [layers][ntok][heads][head_dim] */
    const void     *v;
    uint32_t        ntok;           /* >= 1 */
    const uint32_t *ids;            /* tail_tokens + ntok token ids (see above) */
    uint32_t        n_ids;
    uint64_t        version;        /* VERSION: the new record's version, above the session's (else
                                     * KVP_ERR_STALE); without it the node's clock, above the
                                     * session's version (an append is a write: a copy without it
                                     * must be older) */
    uint32_t        chunks;         /* CHUNKS: a replicated append's condition: the session exists
                                     * (else KVP_ERR_NOT_FOUND) holding exactly this many chunks
                                     * (else KVP_ERR_INVALID: this copy is behind or ahead) */
    uint64_t        first_pos;      /* FIRST_POS: the tokens (sealed and tail) the session holds
                                     * before this append, 0 for a new one: another count is
                                     * KVP_ERR_INVALID (a retried append that went through, or
                                     * another writer's first), or KVP_ERR_NOT_FOUND when it is
                                     * gone; a retry can then never seal tokens twice */
    uint64_t        base;           /* BASE: a replicated append's other condition: the record is
                                     * at exactly this version, the one every copy taking the
                                     * append holds (else KVP_ERR_INVALID: this copy missed a put,
                                     * an append or an rm, or another writer's came first), so the
                                     * copies that take it hold the same bytes after it */
} kvp_store_append_t;

/* Append (and seal full chunks). *sealed_p (may be NULL) gets the number of chunks sealed.
 * KVP_ERR_INVALID for a geometry mismatch with the session or a wrong number of ids,
 * KVP_ERR_WRONG_CODEC when codec or geometry differ from the namespace's; codec errors pass through
 * (KVP_ERR_BAD_INPUT_DATA for NaN/Inf input). On error the session is unchanged (sealed pages
 * may remain in the store as loose pages). */
kvp_status_t kvp_store_session_append(kvp_store_h store, uint64_t ns, const char *sid,
                                      const kvp_store_append_t *append, uint32_t *sealed_p);

/* Test hook: the next n writes to the SSD tier (commits, compaction moves, and syncs of
 * written-through data such as the interval syncer's) fail with status (KVP_ERR_NO_SPACE or KVP_ERR_IO) as a full or
 * failing disk would; nothing is written. No-op without a db_path. */
void kvp_store_inject_disk_fail(kvp_store_h store, uint32_t n, kvp_status_t status);

#ifdef __cplusplus
}
#endif
#endif
