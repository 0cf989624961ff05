/* tier.h - the SSD tier as the store sees it: column families `pages` (ns | chunk key | layer ->
 * 24-byte locator into a segment file, seg.h, or the bytes inline for pages <= 4 KiB), `sessions`
 * (ns | sid -> packed record) and `meta`. Implemented in tier_rocksdb.c, tier_move.c,
 * tier_salvage.c and tier_meta.c (tier_int.h), the only files that see rocksdb_* types. Errors
 * are logged where detected and mapped to kvp_status_t (Corruption -> KVP_ERR_CORRUPT, NoSpace ->
 * KVP_ERR_NO_SPACE, IOError -> KVP_ERR_IO). Thread-safe: commits and segment I/O are serialised
 * by the tier's own mutex, so the store may call it unlocked. */
#ifndef KVPACK_STORE_TIER_H
#define KVPACK_STORE_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpack/page.h"
#include "kvpack/status.h"

typedef struct kvp_tier       kvp_tier_t;
typedef struct kvp_tier_batch kvp_tier_batch_t;

#define KVP_TIER_FORMAT_VERSION 2u /* 1: page bytes inline (still read); 2: segment locators */

typedef struct {
    const char *path;          /* directory, created if missing */
    const char *node_id;       /* written to meta on first open; a mismatch is logged */
    size_t      write_buffer;  /* memtable bytes per column family */
    uint64_t    segment_bytes; /* a segment file this large starts the next one; 0 = 256 MiB */
    uint64_t    reserve_bytes; /* disk reserve (tier_space.c): writes that add bytes stop while
                                * less is free, and a file this large is held for when the disk
                                * fills anyway; 0 = off; raised to 3 x write_buffer */
    bool        own_flushes;   /* durability interval: kvpack, not RocksDB, switches memtables,
                                * and only right after a segment sync + WAL fsync (tier_rocksdb.c
                                * tier_memtables_turn) */
} kvp_tier_params_t;

typedef enum {
    KVP_TIER_WAL  = 0, /* segment data written (O_DIRECT), WAL on, no fsync: survives a process
                        * crash */
    KVP_TIER_SYNC = 1  /* segment data fdatasync'd, then the batch with an fsync'd WAL: durable
                        * when commit returns */
} kvp_tier_mode_t;

/* Key of one page in the pages column family. */
typedef struct {
    uint64_t     ns;
    kvp_key128_t key;
    uint32_t     layer;
} kvp_tier_pkey_t;

kvp_status_t kvp_tier_open(const kvp_tier_params_t *params, kvp_tier_t **tier_p);
void         kvp_tier_close(kvp_tier_t *tier); /* NULL is a no-op */

kvp_tier_batch_t *kvp_tier_batch_create(void); /* NULL on allocation failure */
void              kvp_tier_batch_destroy(kvp_tier_batch_t *batch);
/* A page longer than 4 KiB at a 4 KiB-aligned address (a pool slot, with kvp_tier_span(len)
 * readable bytes) is written to a segment file at commit straight from page, which must stay
 * valid and unchanged until the commit returns; other pages are copied into the batch inline. */
void kvp_tier_batch_put_page(kvp_tier_t *tier, kvp_tier_batch_t *batch, const kvp_tier_pkey_t *pk,
                             const void *page, size_t len);
void kvp_tier_batch_del_page(kvp_tier_t *tier, kvp_tier_batch_t *batch, const kvp_tier_pkey_t *pk);
void kvp_tier_batch_put_session(kvp_tier_t *tier, kvp_tier_batch_t *batch, uint64_t ns,
                                const char *sid, const void *blob, size_t len);
void kvp_tier_batch_del_session(kvp_tier_t *tier, kvp_tier_batch_t *batch, uint64_t ns,
                                const char *sid);
/* A small record in the meta column family (namespace codec profiles: key "ns/<16 hex>"). */
void kvp_tier_batch_put_meta(kvp_tier_t *tier, kvp_tier_batch_t *batch, const char *key,
                             const void *val, size_t len);
void kvp_tier_batch_del_meta(kvp_tier_t *tier, kvp_tier_batch_t *batch, const char *key);
size_t       kvp_tier_batch_bytes(const kvp_tier_batch_t *batch);
bool         kvp_tier_batch_empty(const kvp_tier_batch_t *batch); /* no operation in it */
/* Atomic: every operation of the batch becomes visible, or none. Segment data is written (and
 * under KVP_TIER_SYNC fdatasync'd) before the batch naming it, so a crash never leaves a
 * locator without its bytes; segment bytes no locator names are garbage reclaimed by the sweep.
 * KVP_TIER_SYNC also makes everything committed before durable (as kvp_tier_sync), also when
 * the batch has no segment page of its own. */
kvp_status_t kvp_tier_batch_commit(kvp_tier_t *tier, kvp_tier_batch_t *batch, kvp_tier_mode_t mode);
/* Make everything committed so far durable (segment fdatasync + WAL fsync). */
kvp_status_t kvp_tier_sync(kvp_tier_t *tier);
/* kvp_tier_sync when a commit's old places wait for a WAL fsync to die (their files to go):
 * under write-through or spill no commit syncs the WAL, so the compactor's tick does this. */
kvp_status_t kvp_tier_sync_if_dead(kvp_tier_t *tier);

/* Bytes a buffer must hold to receive a page of len bytes from kvp_tier_pages_read. */
static inline size_t kvp_tier_span(size_t len)
{
    return (len + 4095) & ~(size_t)4095;
}

/* Pages of at most this many bytes are kept inline in RocksDB, longer ones in segment files. */
#define KVP_TIER_INLINE_MAX 4096u

/* What a page of len bytes takes on disk: its extent in a segment file, or its inline bytes. */
static inline uint64_t kvp_tier_disk_bytes(size_t len)
{
    return len > KVP_TIER_INLINE_MAX ? kvp_tier_span(len) : len;
}

/* Where a page is on disk: found by kvp_tier_pages_locate, read by kvp_tier_pages_read. */
typedef struct {
    kvp_status_t    status;     /* KVP_OK, KVP_ERR_NOT_FOUND, KVP_ERR_CORRUPT (an index value
                                 * neither a locator nor long enough for a page), or the error
                                 * of this key */
    uint32_t        len;        /* page bytes */
    uint64_t        seg, off;   /* segment locator (seg != 0) */
    uint8_t        *inline_buf; /* the bytes when stored inline (seg == 0); kvp_tier_locs_clear */
    kvp_tier_pkey_t pk;         /* the key located */
    uint64_t        moves;      /* compaction moves committed before it was located */
} kvp_tier_loc_t;

/* One batched MultiGet of n locators (small values: no page bytes move yet). Returns the first
 * error that is not per key. */
kvp_status_t kvp_tier_pages_locate(kvp_tier_t *tier, size_t n, const kvp_tier_pkey_t *pks,
                                   kvp_tier_loc_t *locs);
/* Read the located pages (locs[i].status == KVP_OK and dst[i] != NULL) into dst[i], which holds
 * kvp_tier_span(len) bytes and is 4 KiB-aligned (else it is read through a bounce buffer):
 * sorted and coalesced into large O_DIRECT reads. Sets locs[i].status per page. A page a
 * compaction moved after it was located (its old segment gone) is located again and read from
 * its new place (same length, else KVP_ERR_NOT_FOUND). */
void kvp_tier_pages_read(kvp_tier_t *tier, size_t n, kvp_tier_loc_t *locs, void *const *dst);
void kvp_tier_locs_clear(kvp_tier_loc_t *locs, size_t n);

/* ---- segment compaction (store/compact.c drives it) ----
 * A segment file is append-only and its bytes never change while it exists, so a page is moved
 * by copying it to the active segment and rewriting its locator; the old file goes once no
 * locator names it. */

/* The smallest segment id above after (0: none): a walk over every segment file (scrubbing). */
uint64_t kvp_tier_segment_after(kvp_tier_t *tier, uint64_t after);
/* Up to max ids of segments (not the active one) whose dead bytes are at least dead_ratio of
 * their size, the deadest first. */
size_t kvp_tier_compact_victims(kvp_tier_t *tier, double dead_ratio, uint64_t *ids, size_t max);
/* Every page whose locator names one of the nids segments (one walk of the pages column family),
 * as located pages (status KVP_OK), sorted by segment and offset; *locs_p is kvp_malloc'd (NULL
 * when none). */
kvp_status_t kvp_tier_pages_in_segs(kvp_tier_t *tier, const uint64_t *ids, size_t nids,
                                    kvp_tier_loc_t **locs_p, size_t *n_p);
/* After kvp_tier_pages_in_segs of compaction victims (kvp_tier_compact_victims: not the active
 * segment, no reservation): a victim none of locs[0..n) is in holds no live page, so bytes still
 * counted live in it are named by nothing (a commit that could not look up the old place it
 * replaced); they are counted dead and the file goes at the next WAL sync, where it would
 * otherwise be picked again at every compaction, moving nothing. Returns the victims so fixed. */
size_t kvp_tier_victims_unnamed(kvp_tier_t *tier, const uint64_t *ids, size_t nids,
                                const kvp_tier_loc_t *locs, size_t n);
/* Scrubbing the pages kept inline (4 KiB or less, their bytes in RocksDB): the next ones in key
 * order after *after (NULL: from the first), at most max_pages of them (0: no limit), as located
 * pages (status KVP_OK, inline_buf set; *locs_p kvp_malloc'd, kvp_tier_locs_clear then kvp_free).
 * *last_p gets the last key looked at (the next call's after) and *end_p whether the walk
 * reached the end of the column family. */
kvp_status_t kvp_tier_pages_inline(kvp_tier_t *tier, const kvp_tier_pkey_t *after,
                                   size_t max_pages, kvp_tier_loc_t **locs_p, size_t *n_p,
                                   kvp_tier_pkey_t *last_p, bool *end_p);
typedef struct {
    uint64_t pages;       /* locators rewritten */
    uint64_t bytes;       /* page bytes copied */
    uint64_t segments;    /* segment files removed because nothing names them any more */
    uint64_t freed_bytes; /* their size */
    uint64_t lock_max_ns; /* the longest single hold of the tier's lock by these moves */
} kvp_tier_moved_t;
/* Move n pages read from where from[i] says (bytes[i]: kvp_tier_span(len) bytes, 4 KiB-aligned,
 * NULL to skip) to the active segment: under the tier's lock, only pages whose locator still
 * names that place (not deleted or rewritten since) are appended, fdatasync'd, and their new
 * locators written with an fsync'd WAL; then the old places die (live bytes), removing emptied
 * segments. Adds to *moved. A failed write changes nothing on disk that anything names. */
kvp_status_t kvp_tier_pages_move(kvp_tier_t *tier, size_t n, const kvp_tier_loc_t *from,
                                 void *const *bytes, kvp_tier_moved_t *moved);
/* Test hooks: fn(arg) runs (NULL: none) at READ, in kvp_tier_pages_read after the pages were
 * located and before they are read; at MOVE, in kvp_tier_pages_move after the copies were
 * appended and synced and before their locators are written; at WRITE, in kvp_tier_batch_commit
 * after its pages were placed in a segment and before they are written (no lock held at any). */
typedef enum {
    KVP_TIER_HOOK_READ    = 0,
    KVP_TIER_HOOK_MOVE    = 1,
    KVP_TIER_HOOK_WRITE   = 2,
    KVP_TIER_HOOK_REBUILD = 3, /* in an index rebuild, once the `pages` column family is dropped
                                * and made again, before its records are copied back */
    KVP_TIER_HOOKS
} kvp_tier_hook_t;
void kvp_tier_set_hook(kvp_tier_t *tier, kvp_tier_hook_t at, void (*fn)(void *arg), void *arg);
/* Cached segment read fds kept open at most (kvp_segs_set_rfd_max; 0: the default 256). */
void kvp_tier_set_read_fds(kvp_tier_t *tier, size_t max);
/* The store is closing: from now on commits may use the disk reserve (its file given up for
 * them), keeping only the room the next open needs (tier_space.c). */
void kvp_tier_last_writes(kvp_tier_t *tier);

/* Garbage sweep (open time): walk the pages column family, delete every page keep() rejects (no
 * session names it), count the live bytes of every segment and unlink segments nobody names. */
typedef bool (*kvp_tier_keep_cb_t)(void *arg, const kvp_tier_pkey_t *pk);
kvp_status_t kvp_tier_pages_sweep(kvp_tier_t *tier, kvp_tier_keep_cb_t keep, void *arg,
                                  uint64_t *dropped_p);
/* What is on disk and what was written since open. */
typedef struct {
    uint64_t files, file_bytes, live_bytes; /* segment files, their size, what locators name */
    uint64_t logical_bytes;       /* bytes of committed batches: pages and records the store asked
                                   * to persist (not compaction's copies) */
    uint64_t segment_write_bytes; /* bytes appended to segment files (4 KiB spans, compaction
                                   * copies included) */
    uint64_t index_rebuilds;      /* RocksDB index rebuilt after a damaged block (since open) */
    uint64_t index_lost;          /* runs of records lost in them: damage no read got past */
    uint64_t wal_dropped;         /* WAL bytes the open's recovery dropped as damaged (writes lost) */
    uint64_t free_bytes;          /* free space of the db's filesystem now (UINT64_MAX: unknown) */
    uint64_t reserve_bytes;       /* bytes held in the reserve file now (0: none) */
    uint64_t full_refusals;       /* commits refused: they would have left less than the reserve */
    uint64_t reserve_releases;    /* the reserve file removed because a write failed for space */
} kvp_tier_disk_t;
void kvp_tier_disk_stats(kvp_tier_t *tier, kvp_tier_disk_t *out);

/* Session record: *blob_p is kvp_malloc'd (kvp_free). */
kvp_status_t kvp_tier_session_get(kvp_tier_t *tier, uint64_t ns, const char *sid, uint8_t **blob_p,
                                  size_t *len_p);
/* Walk the sessions column family in key order. cb returns non-OK to stop (that status is returned). */
typedef kvp_status_t (*kvp_tier_session_cb_t)(void *arg, uint64_t ns, const char *sid,
                                              const uint8_t *blob, size_t len);
kvp_status_t kvp_tier_session_scan(kvp_tier_t *tier, kvp_tier_session_cb_t cb, void *arg);

/* Walk the meta column family's keys that start with prefix, in key order. cb returns non-OK to
 * stop (that status is returned). */
typedef kvp_status_t (*kvp_tier_meta_cb_t)(void *arg, const char *key, size_t klen,
                                           const uint8_t *val, size_t vlen);
kvp_status_t kvp_tier_meta_scan(kvp_tier_t *tier, const char *prefix, kvp_tier_meta_cb_t cb,
                                void *arg);

/* ---- a damaged index ----
 * One byte gone bad in a RocksDB file makes RocksDB refuse the block holding it when read with
 * checksums, and once a compaction meets it, every write until the db is opened again, and again
 * after that. The tier rebuilds the index from every record that still reads (tier_salvage.c):
 * at open when a block fails its checksum (the open walks every block once, automatic compactions
 * start after it), when a commit or a compaction move finds writes stopped (the commit is then
 * written again and succeeds), and from kvp_tier_index_verify. Inline pages are copied as they
 * are, for their CRC to judge. */
/* Walk every block of every column family with its checksum; a failing one rebuilds the index
 * (*rebuilt_p set). The scrubber runs it after each pass. */
kvp_status_t kvp_tier_index_verify(kvp_tier_t *tier, bool *rebuilt_p);
/* Deletes committed while the disk was full (writes refused for the reserve) give their index
 * space back only when RocksDB compacts them away: compact every column family then, once per
 * such run of deletes (the segment compactor's tick calls this); KVP_OK when nothing was due. */
kvp_status_t kvp_tier_reclaim(kvp_tier_t *tier);
/* Compact every column family now (tests, operators). KVP_ERR_CORRUPT when a compaction met a
 * damaged block and RocksDB stopped writes: the next commit rebuilds the index. */
kvp_status_t kvp_tier_index_compact(kvp_tier_t *tier);

/* Test hook: the next n commits or syncs (kvp_tier_sync) fail with status (KVP_ERR_NO_SPACE or
 * KVP_ERR_IO) without writing. */
void kvp_tier_inject_fail(kvp_tier_t *tier, uint32_t n, kvp_status_t status);

#endif
