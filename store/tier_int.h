/* tier_int.h - internal to the SSD tier: its struct and the calls shared by tier_rocksdb.c (the
 * tier's opening, batches, commits and reads), tier_move.c (walks of the pages column family and
 * compaction's moves), tier_salvage.c (rebuilding a damaged index), tier_meta.c (the db's format
 * version and node id; these four are the only files that see rocksdb_* types) and tier_space.c
 * (the disk reserve). */
#ifndef KVPACK_STORE_TIER_INT_H
#define KVPACK_STORE_TIER_INT_H

#include "tier.h"
#include "seg.h"

#include <rocksdb/c.h>

#include <pthread.h>

#define TIER_MOD "store"

enum { CF_DEFAULT = 0, CF_PAGES, CF_SESSIONS, CF_META, CF_NREQ };

struct kvp_tier {
    rocksdb_t                       *db;
    rocksdb_options_t               *db_opts;
    rocksdb_options_t              **cf_opts;    /* one per opened column family */
    rocksdb_block_based_table_options_t *bbt;
    rocksdb_column_family_handle_t **cfs;        /* all opened column families, default first */
    char                           **cf_names;   /* their names (kvp_strdup) */
    size_t                           ncfs;
    rocksdb_column_family_handle_t  *cf[CF_NREQ];
    size_t                           write_buffer; /* memtable bytes of `pages` */
    bool                             own_flushes;  /* kvp_tier_params_t.own_flushes */
    rocksdb_flushoptions_t          *fo_nowait;    /* a flush requested, not waited for */
    rocksdb_writeoptions_t          *wo_wal;
    rocksdb_writeoptions_t          *wo_sync;
    rocksdb_writeoptions_t          *wo_nowal;
    rocksdb_readoptions_t           *ro_pages;   /* no block checksum, no cache fill */
    rocksdb_readoptions_t           *ro;
    rocksdb_flushoptions_t          *fo;
    kvp_segs_t                      *segs;       /* segment files (seg.c) */
    pthread_rwlock_t                 dbl;        /* db, cfs, cf: every operation holds it shared,
                                                  * an index rebuild (which drops and makes again
                                                  * the column families) exclusive */
    uint64_t                         gen;        /* db reopens (index rebuilds, a full disk's
                                                  * stop cleared) tried since open (under dbl):
                                                  * an operation that met one reopens only when
                                                  * none was tried since it began */
    uint64_t                         rebuilds;   /* index rebuilds finished (atomic: read by
                                                  * kvp_tier_disk_stats without dbl) */
    uint64_t                         rebuild_lost; /* runs of records no read could get past
                                                    * (atomic, as rebuilds) */
    uint64_t                         wal_dropped;  /* WAL bytes recovery dropped as damaged
                                                    * (atomic, as rebuilds) */
    bool                             opened;     /* kvp_tier_open returned: a rebuild that fails
                                                  * half way back stops the process (the index
                                                  * is partial; the next open finishes it) */
    pthread_mutex_t                  mu;         /* commits, the segment table, accounting (reads and
                                                  * kvp_tier_sync do their I/O outside it) */
    uint64_t                         reserve;    /* disk reserve bytes, 0 = off (tier_space.c) */
    bool                             reserve_held; /* the reserve file is in place (under mu) */
    bool                             full;       /* growth refused for space, logged (under mu) */
    bool                             reopen_noroom; /* a reopen put off for space, logged (dbl) */
    bool                             closing;    /* kvp_tier_last_writes: commits may use the
                                                  * reserve (under mu) */
    bool                             reclaim;    /* deletes committed while full: their index
                                                  * space comes back with a compaction (under mu) */
    uint64_t                         reserve_file; /* bytes of it held, 0 or reserve (atomic:
                                                    * read by kvp_tier_disk_stats) */
    uint64_t                         free_bytes; /* filesystem free space, last seen (atomic) */
    uint64_t                         full_refusals;    /* commits refused for space (atomic) */
    uint64_t                         reserve_releases; /* reserve file removed (atomic) */
    uint64_t                         moves;      /* compaction moves committed (written under mu) */
    uint64_t                         logical;    /* bytes of committed batches (kvp_tier_disk_t) */
    struct {
        void (*fn)(void *arg);
        void *arg;
    } hooks[KVP_TIER_HOOKS];                                 /* test hooks (kvp_tier_set_hook) */
    char                            *path;
    uint32_t                         fail_n;     /* test hook */
    kvp_status_t                     fail_status;
};

/* the test hook at `at`, if one is set (kvp_tier_set_hook) */
static inline void tier_hook_run(kvp_tier_t *t, kvp_tier_hook_t at)
{
    void (*fn)(void *) = __atomic_load_n(&t->hooks[at].fn, __ATOMIC_ACQUIRE);

    if (fn != NULL) {
        fn(__atomic_load_n(&t->hooks[at].arg, __ATOMIC_ACQUIRE));
    }
}

/* A RocksDB error string (freed, *err set to NULL) logged as "rocksdb <what> failed" and mapped:
 * Corruption -> KVP_ERR_CORRUPT, NoSpace -> KVP_ERR_NO_SPACE, NotFound, else KVP_ERR_IO. */
kvp_status_t tier_map_err(const char *what, char **err);
/* The end of a walk over an iterator taken under tier_db_hold: the iterator's error (mapped and
 * logged as tier_map_err's "what", when status is still OK; else dropped), the iterator
 * destroyed, the db released. Returns status, or the iterator's error in its place. */
kvp_status_t tier_iter_end(kvp_tier_t *t, rocksdb_iterator_t *it, kvp_status_t status,
                           const char *what);
/* Open t->path with every existing column family plus the required ones (t->cfs, t->cf),
 * automatic compactions off unless compactions; tier_db_close undoes it (t->db NULL after). */
kvp_status_t tier_db_open(kvp_tier_t *t, bool compactions);
void         tier_db_close(kvp_tier_t *t);
/* Automatic compactions of every column family on or off. */
kvp_status_t tier_db_compactions(kvp_tier_t *t, bool on);

/* Page key in the pages column family: namespace | chunk key hi | lo (8 B BE each) | layer (4 B
 * BE). Locator value of a page in a segment file: "KVSL" | segment id (8 B BE) | offset (8 B BE)
 * | page length (4 B BE). */
#define PKEY_BYTES 28
#define LOC_BYTES  24
void tier_page_key(const kvp_tier_pkey_t *pk, uint8_t *k);
void tier_loc_encode(uint64_t seg, uint64_t off, uint32_t len, uint8_t *v);
/* false when val is not a locator (an inline page) */
bool tier_loc_decode(const void *val, size_t vlen, uint64_t *seg, uint64_t *off, uint32_t *len);

/* Shared hold of the db (dbl) for one operation; returns the reopen count it began at. */
uint64_t tier_db_hold(kvp_tier_t *t);
void     tier_db_release(kvp_tier_t *t);
/* Unlock t->mu; then, with no lock held, unlink the segment files that died under it (a large
 * file's unlink takes tens of ms) and, once the active segment is half full, make the next one
 * (file creation and a directory fsync), so a roll under the lock only switches files. */
void tier_unlock(kvp_tier_t *t);
/* Under t->mu, own_flushes only: when a column family's active memtable has reached num/den of
 * its flush size, makes every write so far durable (segment sync + WAL fsync, skipped when
 * `synced`: the caller just did both) and requests the flush of every non-empty memtable without
 * waiting, so the memtable switch, and with it the closed WAL that RocksDB syncs on its own
 * before the flush, holds no record naming unsynced bytes. */
kvp_status_t tier_memtables_turn(kvp_tier_t *t, bool synced, unsigned num, unsigned den);
/* Under t->mu: the old place (seg, len) of a page whose locator a commit just replaced or deleted
 * in the WAL without a sync. Its bytes count dead at once, but its file stays until
 * tier_wal_synced (kvp_segs_dead_later): a file unlinked before the WAL record that frees it is
 * durable would, after a power loss, leave the older record naming bytes that are gone. */
void         tier_dead_defer(kvp_tier_t *t, uint64_t seg, uint32_t len);
/* Under t->mu, right after a WAL fsync succeeded: the deferred old places die; the files that go
 * with them are added to *files_p and their bytes to *bytes_p (either may be NULL). */
void         tier_wal_synced(kvp_tier_t *t, uint64_t *files_p, uint64_t *bytes_p);

/* A segment extent a page key names now (live-byte accounting, moves). */
typedef struct {
    bool     found;
    uint32_t len;
    uint64_t seg, off;
} tier_cur_loc_t;
/* cur[i] for the n keys *pks[i], one MultiGet; false (nothing found) when its memory cannot be
 * had */
bool tier_cur_locs(kvp_tier_t *t, size_t n, const kvp_tier_pkey_t *const *pks,
                   tier_cur_loc_t *cur);

/* The test hook (kvp_tier_inject_fail), t->mu held: true when this write or sync is to fail
 * (*status_p); then t->mu is released. */
bool tier_inject_take(kvp_tier_t *t, const char *what, size_t bytes, kvp_status_t *status_p);

/* After a write RocksDB refused for a damaged block (no lock held; gen: tier_db_hold's): the db
 * opened again with its index rebuilt (tier_salvage.c), unless a reopen was tried since gen. */
kvp_status_t tier_reopen_rebuild(kvp_tier_t *t, uint64_t gen, const char *why);
/* A write met the full disk (KVP_ERR_NO_SPACE past the reserve's admission; no tier lock held by
 * the caller): the reserve file goes, so RocksDB and deletes have room; when RocksDB stopped
 * writes for it (stopped), which it lifts by itself only once a memtable fits, the db is opened
 * again if there is room now, which clears the stop at once. KVP_OK when reopened. */
kvp_status_t tier_full_disk(kvp_tier_t *t, uint64_t gen, bool stopped);

/* ---- tier_salvage.c (dbl held exclusively, or at open; automatic compactions off) ---- */
/* Open time: finish a rebuild a stop interrupted after its records were safe in the side db, or
 * remove a side db left before that point. */
kvp_status_t tier_salvage_resume(kvp_tier_t *t);
/* Every block of every column family read with its checksum: *damaged_p when one fails. */
kvp_status_t tier_index_check(kvp_tier_t *t, bool *damaged_p);
/* Rebuild the index from every record that reads (see tier_salvage.c). */
kvp_status_t tier_index_rebuild(kvp_tier_t *t);

/* ---- tier_meta.c (at open, after any rebuild) ---- */
/* The db's format version (KVP_ERR_UNSUPPORTED, logged, when this build does not read it) and
 * node id, against their checked copy: written at a new db's open, damaged ones written again. */
kvp_status_t tier_meta_check(kvp_tier_t *t, const char *node_id);

/* ---- tier_space.c: the disk reserve (t->mu held, or at open) ---- */
/* At open, before the db: the reserve (0 = off; raised to three memtables), its file found or
 * made. */
void         tier_space_open(kvp_tier_t *t, uint64_t reserve);
/* Free bytes of the db's filesystem now (UINT64_MAX when statvfs fails). */
uint64_t     tier_space_free(kvp_tier_t *t);
/* Every commit (bytes: what it adds): KVP_ERR_NO_SPACE when it would leave less than the reserve
 * free (twice that while the reserve file is given up; it is made again here first). The
 * reserve file goes when less is free than a memtable's flush needs. */
kvp_status_t tier_space_admit(kvp_tier_t *t, uint64_t bytes);
/* Free bytes RocksDB needs to open the db: its write-ahead logs (replayed into a table file) and
 * a memtable's worth (the new log), plus 1 MiB. */
uint64_t     tier_space_open_need(const kvp_tier_t *t);
/* Before an open (need: tier_space_open_need, plus the index's tables for a rebuild): that much
 * free, the reserve file given up for it if need be; else KVP_ERR_NO_SPACE, logged as
 * "db P: what: ..." (what NULL: not logged). */
kvp_status_t tier_space_room(kvp_tier_t *t, uint64_t need, const char *what);
/* A write failed for space: the reserve file removed; false when there was none. */
bool         tier_space_release(kvp_tier_t *t);

#endif
