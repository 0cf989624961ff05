/* seg.h - append-only segment files holding page bytes for the SSD tier (<db>/seg/NNNNNNNN.seg).
 * Pages are written and read with O_DIRECT straight from and into the caller's 4 KiB-aligned
 * buffers (pool slots), each page at a 4 KiB-aligned offset, so a spill or restore is one
 * large pwritev/preadv per run, like a raw sequential write or read. RocksDB keeps only the
 * locators (pages column family); this file keeps per-segment live bytes, unlinks a segment
 * once nothing on disk names it, and names the mostly dead ones a compaction should empty. Not
 * thread-safe: the tier serialises calls with its mutex, except kvp_segs_read_run,
 * kvp_segs_resv_write and the fdatasync between kvp_segs_sync_begin and _end, which need no lock
 * (so restores read, a background sync runs and other commits go on while a commit writes). */
#ifndef KVPACK_STORE_SEG_H
#define KVPACK_STORE_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#define KVP_SEG_ALIGN 4096u

/* Segment read fds cached open by default under the open files limit now: a quarter of it, 256
 * at least, 65536 at most. */
size_t kvp_segs_rfd_default(void);

typedef struct kvp_segs kvp_segs_t;

static inline size_t kvp_seg_span(size_t len)
{
    return (len + KVP_SEG_ALIGN - 1) & ~(size_t)(KVP_SEG_ALIGN - 1);
}

/* One extent: a page's bytes (kvp_seg_span(len) readable/writable at buf) and its place. */
typedef struct {
    void    *buf;
    uint32_t len;
    uint64_t seg; /* filled by append, given to read */
    uint64_t off;
    kvp_status_t status; /* read result per extent */
} kvp_seg_ext_t;

/* roll_bytes: the active segment's size that starts a new one (0: 256 MiB) */
kvp_status_t kvp_segs_open(const char *db_path, uint64_t roll_bytes, kvp_segs_t **segs_p);
void         kvp_segs_close(kvp_segs_t *segs); /* NULL is a no-op */

/* Appends in three steps, so the page bytes are written without the tier's lock: reserve
 * (locked) places n extents back to back (each at a 4 KiB-aligned offset) in the active segment,
 * rolling to a new one when it is full, fills ext[i].seg/off and takes a write fd of that file;
 * resv_write (no lock) writes them there, then fdatasyncs them when sync; resv_end (locked) ends
 * the reservation: written bytes of the active file count as appended (a later kvp_segs_sync
 * covers them) unless synced, and a file rolled away meanwhile is fdatasynced here; an unwritten
 * reservation that is its file's last gives its room back. A file with a reservation open is
 * never unlinked nor named a compaction victim; after a written one the caller must name its
 * bytes (kvp_segs_live_add) in the same lock hold. Several reservations may be open at once. */
typedef struct {
    uint64_t seg, off, bytes; /* seg 0: nothing reserved (n == 0) */
    int      fd;              /* owned until resv_end */
} kvp_seg_resv_t;
kvp_status_t kvp_segs_reserve(kvp_segs_t *segs, kvp_seg_ext_t *ext, size_t n, kvp_seg_resv_t *r);
kvp_status_t kvp_segs_resv_write(const kvp_seg_resv_t *r, const kvp_seg_ext_t *ext, size_t n,
                                 bool sync);
kvp_status_t kvp_segs_resv_end(kvp_segs_t *segs, kvp_seg_resv_t *r, bool written, bool synced);
/* The three at once, for a caller holding the lock throughout; sync = kvp_segs_sync after. */
kvp_status_t kvp_segs_append(kvp_segs_t *segs, kvp_seg_ext_t *ext, size_t n, bool sync);
/* Read n extents (any order; sorted and coalesced into large preadv runs) in two steps: the plan,
 * under the tier's lock, sorts them and takes its own read fd of each segment; the run, with no
 * lock, does the I/O and frees the plan. Sets ext[i].status: KVP_OK, KVP_ERR_NOT_FOUND (segment
 * gone: not in the table or its file not there (ENOENT), or short), KVP_ERR_IO (any other failure
 * to open or read it, out of fds included: transient, the page is kept), or KVP_ERR_NO_MEMORY
 * (and NULL from the plan: nothing to run). */
typedef struct kvp_seg_read kvp_seg_read_t;
kvp_seg_read_t *kvp_segs_read_plan(kvp_segs_t *segs, kvp_seg_ext_t *ext, size_t n);
void            kvp_segs_read_run(kvp_seg_read_t *plan);
/* Read fds are cached per segment file, at most max of them (0: the default, 256): opening one
 * more closes the least recently used (a plan in flight reads through its own duplicate). Tests
 * set a small cap; the ones over it are closed at once. */
void kvp_segs_set_rfd_max(kvp_segs_t *segs, size_t max);
/* fdatasync the active segment if anything was appended since its last one (a roll syncs the
 * segment it leaves, so this covers every byte appended so far). */
kvp_status_t kvp_segs_sync(kvp_segs_t *segs);
/* fsync every segment file in db_path/seg (none there: OK), before RocksDB opens: replaying its
 * WAL flushes the records into a synced table, so a process killed before its interval sync
 * would otherwise leave locators durable ahead of the bytes they name (those files are not
 * open yet: kvp_segs_open comes after the db's). One that cannot be synced is logged and left
 * (the open does not fail for it: its pages fail their checks later if its bytes are bad). */
void kvp_segs_sync_files(const char *db_path);
/* The same fdatasync without the tier's lock: begin (locked) returns a duplicate of the active
 * segment's fd and in *gen_p the appends it will cover, or -1 when nothing needs a sync (-2: no
 * fd; an error is logged); run (unlocked) fdatasyncs and closes that fd; end (locked, after run
 * returned KVP_OK) records the appends as synced. An in-lock kvp_segs_sync meanwhile still syncs
 * itself: appends count as synced only once a sync of them has returned. */
int          kvp_segs_sync_begin(kvp_segs_t *segs, uint64_t *gen_p);
kvp_status_t kvp_segs_sync_run(int fd);
void         kvp_segs_sync_end(kvp_segs_t *segs, uint64_t gen);

/* Live-byte accounting: +span when a locator naming (seg, len) becomes durable, -span when it is
 * deleted. A segment that is not the active one and reaches zero is unlinked; returns the file
 * bytes that gave back (0 when none). */
uint64_t kvp_segs_live_add(kvp_segs_t *segs, uint64_t seg, int64_t bytes);
/* -bytes now (accounting, compaction's choice), but the file stays until kvp_segs_dead_synced:
 * the WAL record of the delete or replace that kills those bytes is not durable yet, and a file
 * unlinked before it is would leave, after a power loss, the older locator naming bytes that are
 * gone. dead_waiting: some file waits so. dead_synced (right after a WAL fsync): every such
 * death is durable now; the files nothing names any more go (counted into *files_p, may be
 * NULL); returns the file bytes that gave back, as live_add. */
void     kvp_segs_dead_later(kvp_segs_t *segs, uint64_t seg, int64_t bytes);
bool     kvp_segs_dead_waiting(const kvp_segs_t *segs);
uint64_t kvp_segs_dead_synced(kvp_segs_t *segs, uint64_t *files_p);
/* A compaction victim's bytes still counted live when a walk of every locator found none naming
 * it (an old place a commit could not look up for want of memory: a leak that kept the file a
 * victim forever): counted dead as dead_later does, the file going at the next WAL sync. Only a
 * segment that is not the active one and has no reservation or hold, so no locator can name it
 * later than the walk; returns the bytes (0: none, or not such a segment). */
int64_t kvp_segs_unnamed_dead(kvp_segs_t *segs, uint64_t seg);
/* Whether segment seg is in the table and its file holds bytes [off, off + len): a locator that
 * fails this names bytes that are not there (its file lost or cut short). */
bool kvp_segs_holds(kvp_segs_t *segs, uint64_t seg, uint64_t off, uint32_t len);
/* A hold on a file whose written bytes are not named yet, across a step that drops the lock (a
 * commit whose records are retried after the db is opened again): +1 keeps it as an open
 * reservation does (no unlink, no compaction); -1 lets it go, unlinked then if nothing in it is
 * live and it is not the active one (file bytes given back returned, as live_add). */
uint64_t kvp_segs_hold(kvp_segs_t *segs, uint64_t seg, int delta);
/* The next segment made ahead, so a roll under the tier's lock only switches files: want (locked)
 * says whether one should be made now (the active file is half full and there is none) and hands
 * out its id and the directory; create (no lock) makes the file durable and returns its fd (-1:
 * failed, logged); set (locked) keeps it for the next roll (fd -1: none, a roll creates its own).
 * A spare never used is removed at close, or is an empty segment the next open reaps. */
bool kvp_segs_spare_want(kvp_segs_t *segs, uint64_t *id_p, const char **dir_p, int *dirfd_p);
int  kvp_segs_spare_create(const char *dir, int dirfd, uint64_t id);
void kvp_segs_spare_set(kvp_segs_t *segs, uint64_t id, int fd);
/* Segments that died (live bytes at zero) leave the table at once but their files are unlinked
 * by the caller after the tier's lock: take (locked) hands over the queued paths, unlink_dead (no
 * lock) removes and frees them. kvp_segs_close unlinks what is still queued. */
size_t kvp_segs_take_dead(kvp_segs_t *segs, char ***paths_p);
void   kvp_segs_unlink_dead(char **paths, size_t n);
/* The smallest segment id above after (0: none), for walks over every segment file. */
uint64_t kvp_segs_next(kvp_segs_t *segs, uint64_t after);
/* Compaction victims: up to max ids of segments other than the active one whose dead bytes (size
 * minus live) are at least dead_ratio of their size (and not 0), the deadest first. */
size_t kvp_segs_victims(kvp_segs_t *segs, double dead_ratio, uint64_t *ids, size_t max);
/* After the open-time sweep: unlink every non-active segment with no live bytes. */
void kvp_segs_reap(kvp_segs_t *segs);
/* Segment files, their bytes, the bytes durable locators name, and the bytes appended since
 * open (every page's 4 KiB-aligned span, compaction copies included). */
void kvp_segs_stats(kvp_segs_t *segs, uint64_t *files_p, uint64_t *file_bytes_p,
                    uint64_t *live_bytes_p, uint64_t *written_p);

#endif
