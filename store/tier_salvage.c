/* tier_salvage.c - rebuilding the tier's RocksDB index when one of its files is damaged. A byte
 * gone bad in an SST makes RocksDB refuse the block holding it when read with checksums, and once
 * a compaction meets that block, every write until the db is opened again (and again at the next
 * such compaction). Pages and records around the damage are fine, so the index is rebuilt from
 * every record that still reads:
 *   1. copy out: each column family but `default` is walked with block checksums off (a damaged
 *      inline page is copied as it is, for its own CRC to find) into a side db, salvage.db/ in the
 *      tier's directory, flushed to its SSTs;
 *   2. the file SALVAGE marks the side db complete (fsync'd, and the directory);
 *   3. copy back: each of those column families is dropped (RocksDB deletes its files, the
 *      damaged one among them), made again with the same options and filled from the side db,
 *      then flushed;
 *   4. SALVAGE is removed, then the side db.
 * A stop before 2 leaves the index as it was (the next open removes the side db); after 2, the
 * next open runs 3 and 4 again (tier_salvage_resume), and fails, keeping the mark and the side
 * db, while the side db does not open (the stopped run may have dropped the index already).
 * The records of a damaged block are copied as they are, not dropped: the block is 16 KiB and
 * one bad byte in it would cost every record around it, while every record that is used checks
 * itself on the way out, its key included, since a bad byte may as well be in a key: a page
 * (inline or a locator's) its CRC32C and the key and layer in its header, a session record and
 * a tombstone their own CRC32C and that of the key they were written for (tomb.c), the format
 * version and node id their checked copy (tier_meta.c). A record that fails is refused, logged
 * and counted where it is read; none is served under another key. Not covered: the records and
 * tombstones of builds before the key checks (none in them), and a namespace profile's key (its
 * CRC32C covers only its value: moved to another namespace it can refuse that namespace's pages,
 * KVP_ERR_WRONG_CODEC, never serve wrong bytes).
 * Damage to a block's structure can stop even an unchecked walk: the walk goes on from the first
 * key of the next SST file of that column family, and the records between are lost (counted in
 * rebuild_lost, logged).
 * Main flow: kvp_tier_open / tier_reopen_rebuild (tier_rocksdb.c) -> tier_index_check -> tier_index_rebuild
 * (copy_out, mark, copy_back). */
#include "tier_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MOD         TIER_MOD
#define SIDE_DIR    "salvage.db"
#define MARK_FILE   "SALVAGE"
#define BATCH_BYTES (4u << 20)
#define PROGRESS_NS (2000000000ull) /* a progress line every 2 s of a long rebuild */

/* dir/name into buf (PATH_MAX-sized) */
static const char *join(char *buf, size_t cap, const char *dir, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

static int key_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);

    return c != 0 ? c : (al > bl) - (al < bl);
}

/* The smallest first key of an SST file of column family cf above after (kvp_malloc'd, NULL:
 * none): where a walk stopped by a damaged block goes on. */
static char *next_file_start(rocksdb_t *db, const char *cf, const char *after, size_t alen,
                             size_t *len_p)
{
    const rocksdb_livefiles_t *lf   = rocksdb_livefiles(db);
    const char                *best = NULL;
    size_t                     blen = 0;
    char                      *out  = NULL;

    for (int i = 0; lf != NULL && i < rocksdb_livefiles_count(lf); i++) {
        size_t      sl;
        const char *sk = rocksdb_livefiles_smallestkey(lf, i, &sl);

        if (strcmp(rocksdb_livefiles_column_family_name(lf, i), cf) == 0 &&
            key_cmp(sk, sl, after, alen) > 0 && (best == NULL || key_cmp(sk, sl, best, blen) < 0)) {
            best = sk;
            blen = sl;
        }
    }
    if (best != NULL && (out = kvp_malloc(blen ? blen : 1, "salvage key")) != NULL) {
        memcpy(out, best, blen);
        *len_p = blen;
    }
    if (lf != NULL) {
        rocksdb_livefiles_destroy(lf);
    }
    return out;
}

/* Keep a copy of key k as *last (the walk's position). */
static bool keep_key(char **last, size_t *last_len, size_t *cap, const char *k, size_t kl)
{
    if (kl > *cap) {
        char *g = kvp_realloc(*last, kl, "salvage key");

        if (g == NULL) {
            return false;
        }
        *last = g;
        *cap  = kl;
    }
    memcpy(*last, k, kl);
    *last_len = kl;
    return true;
}

typedef struct {
    rocksdb_t                      *db;
    rocksdb_column_family_handle_t *cf;
} cf_ref_t;

/* Every record of from into to, written in batches without the WAL (the caller flushes). With
 * past_damage, an error of the walk (with ro's checksums off: a block whose structure is gone)
 * is logged and counted in *lost_p, and the walk goes on at the next SST file; else it fails the
 * copy. */
static kvp_status_t copy_cf(cf_ref_t from, const rocksdb_readoptions_t *ro, cf_ref_t to,
                            const rocksdb_writeoptions_t *wo, const char *name, bool past_damage,
                            uint64_t *copied_p, uint64_t *lost_p)
{
    rocksdb_iterator_t   *it   = rocksdb_create_iterator_cf(from.db, ro, from.cf);
    rocksdb_writebatch_t *wb   = rocksdb_writebatch_create();
    char                 *last = NULL, *err = NULL;
    size_t                last_len = 0, last_cap = 0, wbytes = 0;
    uint64_t              since = 1; /* records copied since the walk last stopped (1: start) */
    uint64_t              shown = kvp_time_ns();
    kvp_status_t          status = KVP_OK;

    rocksdb_iter_seek_to_first(it);
    for (;;) {
        for (; rocksdb_iter_valid(it) && status == KVP_OK; rocksdb_iter_next(it)) {
            size_t      kl, vl;
            const char *k = rocksdb_iter_key(it, &kl);
            const char *v = rocksdb_iter_value(it, &vl);

            rocksdb_writebatch_put_cf(wb, to.cf, k, kl, v, vl);
            (*copied_p)++;
            since++;
            wbytes += kl + vl;
            if (!keep_key(&last, &last_len, &last_cap, k, kl)) {
                status = KVP_ERR_NO_MEMORY;
            }
            if (wbytes >= BATCH_BYTES) {
                rocksdb_write(to.db, wo, wb, &err);
                rocksdb_writebatch_clear(wb);
                wbytes = 0;
                status = status != KVP_OK ? status : tier_map_err("salvage write", &err);
                if (kvp_time_ns() - shown >= PROGRESS_NS) { /* a long rebuild says where it is */
                    shown = kvp_time_ns();
                    KVP_LOG_WARN(MOD, "index rebuild: column family %s, %llu records copied %s", name,
                                 (unsigned long long)*copied_p, past_damage ? "out" : "back");
                }
            }
        }
        rocksdb_iter_get_error(it, &err);
        if (err == NULL || status != KVP_OK || !past_damage) {
            status = status != KVP_OK ? status : tier_map_err("salvage walk", &err);
            break;
        }
        {
            size_t nl   = 0;
            char  *next = next_file_start(from.db, name, last != NULL ? last : "", last_len, &nl);

            KVP_LOG_ERROR(MOD, "salvage: column family %s unreadable after %llu records (%s); "
                          "the records up to the next file's first key are lost", name,
                          (unsigned long long)*copied_p, err);
            rocksdb_free(err);
            err = NULL;
            *lost_p += since > 0; /* one run: stopping again at once is the same damage */
            since = 0;
            if (next == NULL) {
                break;
            }
            /* from here on: a walk stopped again before any key goes past this one */
            if (!keep_key(&last, &last_len, &last_cap, next, nl)) {
                kvp_free(next);
                status = KVP_ERR_NO_MEMORY;
                break;
            }
            rocksdb_iter_destroy(it);
            it = rocksdb_create_iterator_cf(from.db, ro, from.cf);
            rocksdb_iter_seek(it, next, nl);
            kvp_free(next);
        }
    }
    if (status == KVP_OK && wbytes > 0) {
        rocksdb_write(to.db, wo, wb, &err);
        status = tier_map_err("salvage write", &err);
    }
    kvp_free(last);
    rocksdb_writebatch_destroy(wb);
    rocksdb_iter_destroy(it);
    return status;
}

/* fsync a directory (a file made or removed in it lasts) */
static kvp_status_t sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int rc = fd >= 0 ? fsync(fd) : -1;

    if (fd >= 0) {
        close(fd);
    }
    if (rc != 0) {
        KVP_LOG_ERROR(MOD, "fsync of directory %s failed: %m", dir);
        return KVP_ERR_IO;
    }
    return KVP_OK;
}

static void side_remove(kvp_tier_t *t)
{
    char               side[4096];
    char              *err = NULL;
    rocksdb_options_t *o   = rocksdb_options_create();

    join(side, sizeof(side), t->path, SIDE_DIR);
    rocksdb_destroy_db(o, side, &err);
    rocksdb_free(err); /* none there: nothing to remove */
    rocksdb_options_destroy(o);
    if (rmdir(side) != 0 && errno != ENOENT) {
        KVP_LOG_WARN(MOD, "salvage: cannot remove %s: %m", side);
    }
}

/* The side db with the tier's column families (made when missing); handles into cfs[t->ncfs]. */
static rocksdb_t *side_open(kvp_tier_t *t, rocksdb_column_family_handle_t **cfs, bool create)
{
    char               side[4096];
    char              *err = NULL;
    rocksdb_options_t *o   = rocksdb_options_create();
    rocksdb_t         *db;

    rocksdb_options_set_create_if_missing(o, create);
    rocksdb_options_set_create_missing_column_families(o, create);
    rocksdb_options_set_compression(o, rocksdb_no_compression);
    rocksdb_options_set_disable_auto_compactions(o, 1);
    {
        const rocksdb_options_t *cfo[t->ncfs];

        for (size_t i = 0; i < t->ncfs; i++) {
            cfo[i] = o;
        }
        db = rocksdb_open_column_families(o, join(side, sizeof(side), t->path, SIDE_DIR),
                                          (int)t->ncfs, (const char *const *)t->cf_names, cfo,
                                          cfs, &err);
    }
    rocksdb_options_destroy(o);
    if (err != NULL) {
        tier_map_err("open salvage db", &err);
        return NULL;
    }
    return db;
}

static void side_close(rocksdb_t *db, rocksdb_column_family_handle_t **cfs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rocksdb_column_family_handle_destroy(cfs[i]);
    }
    rocksdb_close(db);
}

/* Every column family but default of db flushed to its SSTs. */
static kvp_status_t flush_all(rocksdb_t *db, rocksdb_column_family_handle_t **cfs, size_t n)
{
    rocksdb_flushoptions_t *fo  = rocksdb_flushoptions_create();
    char                   *err = NULL;

    rocksdb_flushoptions_set_wait(fo, 1);
    for (size_t i = 1; i < n && err == NULL; i++) {
        rocksdb_flush_cf(db, fo, cfs[i], &err);
    }
    rocksdb_flushoptions_destroy(fo);
    return tier_map_err("salvage flush", &err);
}

/* Steps 3 and 4: the side db (complete) back into freshly made column families of t. Once a
 * column family was dropped, a failure leaves the index partial: at open the open fails (the mark
 * stays, the next open tries again); in a running process, which must not serve from it nor take
 * writes a later copy back would drop, the process stops. */
static kvp_status_t copy_back(kvp_tier_t *t, bool resuming)
{
    rocksdb_column_family_handle_t *scf[t->ncfs];
    rocksdb_t                      *side = side_open(t, scf, false);
    rocksdb_readoptions_t          *ro;
    uint64_t                        copied = 0, lost = 0;
    kvp_status_t                    status = KVP_OK;
    bool                            dropped = false;
    char                            buf[4096], *err = NULL;

    if (side == NULL && resuming) {
        /* resuming at open: the stopped run may have dropped the column families already, so
         * the copy is the only whole index. Going on without it would lose every session and,
         * at the sweep, every segment file; the open fails, keeping both, and the next tries
         * again (another process holding the copy's LOCK, no fds or space for the moment) */
        KVP_LOG_ERROR(MOD, "db %s: an index rebuild a stop interrupted cannot finish: its copy "
                      "%s/%s does not open (why: above). Nothing was removed; start again once "
                      "that is fixed. Only if that copy is lost for good: remove %s/%s and %s/%s "
                      "to start with the index as it is (sessions it lacks are reported missing, "
                      "their segment files removed)", t->path, t->path, SIDE_DIR, t->path,
                      MARK_FILE, t->path, SIDE_DIR);
        return KVP_ERR_IO;
    }
    if (side == NULL) { /* a rebuild of this process (at open or running), nothing dropped yet:
                         * the index stays as it is, the mark must go (a later open would
                         * otherwise drop whatever is written after this) */
        KVP_LOG_ERROR(MOD, "db %s: the index rebuild's copy does not open: the index is used as "
                      "it is", t->path);
        if (unlink(join(buf, sizeof(buf), t->path, MARK_FILE)) != 0 || sync_dir(t->path) != KVP_OK) {
            KVP_LOG_ERROR(MOD, "salvage: cannot remove %s: %m; stopping", buf);
            abort();
        }
        side_remove(t);
        return t->opened ? KVP_ERR_IO : KVP_OK; /* at open: go on with the index as it is */
    }
    ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_fill_cache(ro, 0);
    for (size_t i = 1; i < t->ncfs && status == KVP_OK; i++) {
        rocksdb_drop_column_family(t->db, t->cfs[i], &err);
        status = tier_map_err("salvage drop column family", &err);
        if (status != KVP_OK) {
            break;
        }
        dropped = true;
        rocksdb_column_family_handle_destroy(t->cfs[i]);
        t->cfs[i] = rocksdb_create_column_family(t->db, t->cf_opts[i], t->cf_names[i], &err);
        status    = tier_map_err("salvage make column family", &err);
        if (status != KVP_OK) {
            t->cfs[i] = NULL;
            break;
        }
        if (i == CF_PAGES) {
            tier_hook_run(t, KVP_TIER_HOOK_REBUILD);
        }
        status = copy_cf((cf_ref_t){side, scf[i]}, ro, (cf_ref_t){t->db, t->cfs[i]}, t->wo_nowal,
                         t->cf_names[i], false, &copied, &lost);
    }
    for (int r = 0; r < CF_NREQ; r++) {
        t->cf[r] = t->cfs[r];
    }
    rocksdb_readoptions_destroy(ro);
    side_close(side, scf, t->ncfs);
    if (status == KVP_OK) { /* written without the WAL: in the table files before the mark goes */
        status = flush_all(t->db, t->cfs, t->ncfs);
    }
    if (status == KVP_OK && unlink(join(buf, sizeof(buf), t->path, MARK_FILE)) != 0) {
        KVP_LOG_ERROR(MOD, "salvage: cannot remove %s: %m", buf);
        status = KVP_ERR_IO;
    }
    if (status == KVP_OK) {
        status = sync_dir(t->path);
    }
    if (status != KVP_OK && dropped && t->opened) {
        KVP_LOG_ERROR(MOD, "db %s: the index rebuild failed half way (%s); stopping: the next "
                      "start finishes it", t->path, kvp_status_str(status));
        abort();
    }
    if (status == KVP_OK) {
        side_remove(t);
        __atomic_add_fetch(&t->rebuilds, 1, __ATOMIC_RELAXED);
        KVP_LOG_WARN(MOD, "db %s: index rebuilt: %llu records", t->path,
                     (unsigned long long)copied);
    }
    return status;
}

kvp_status_t tier_index_rebuild(kvp_tier_t *t)
{
    rocksdb_column_family_handle_t *scf[t->ncfs];
    rocksdb_t                      *side;
    uint64_t                        copied = 0, lost = 0;
    kvp_status_t                    status = KVP_OK;
    char                            mark[4096];
    int                             fd;

    side_remove(t);
    if ((side = side_open(t, scf, true)) == NULL) {
        return KVP_ERR_IO;
    }
    /* 1. copy out, checksums off */
    for (size_t i = 1; i < t->ncfs && status == KVP_OK; i++) {
        status = copy_cf((cf_ref_t){t->db, t->cfs[i]}, t->ro_pages, (cf_ref_t){side, scf[i]},
                         t->wo_nowal, t->cf_names[i], true, &copied, &lost);
    }
    if (status == KVP_OK) {
        status = flush_all(side, scf, t->ncfs);
    }
    side_close(side, scf, t->ncfs);
    __atomic_add_fetch(&t->rebuild_lost, lost, __ATOMIC_RELAXED);
    if (status != KVP_OK) {
        side_remove(t);
        return status;
    }
    KVP_LOG_WARN(MOD, "db %s: %llu records copied out%s", t->path, (unsigned long long)copied,
                 lost > 0 ? "; some lost to damage no read got past (logged above)" : "");
    /* 2. the mark: from here on the side db is what the index is rebuilt from */
    fd = open(join(mark, sizeof(mark), t->path, MARK_FILE), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || fsync(fd) != 0) {
        KVP_LOG_ERROR(MOD, "salvage: cannot make %s: %m", mark);
        if (fd >= 0) {
            close(fd);
        }
        side_remove(t);
        return KVP_ERR_IO;
    }
    close(fd);
    status = sync_dir(t->path);
    /* 3 and 4 */
    return status == KVP_OK ? copy_back(t, false) : status;
}

kvp_status_t tier_salvage_resume(kvp_tier_t *t)
{
    char        buf[4096];
    struct stat sb;

    if (stat(join(buf, sizeof(buf), t->path, MARK_FILE), &sb) == 0) {
        KVP_LOG_WARN(MOD, "db %s: finishing an index rebuild a stop interrupted", t->path);
        if (stat(join(buf, sizeof(buf), t->path, SIDE_DIR), &sb) != 0 && errno == ENOENT) {
            KVP_LOG_ERROR(MOD, "db %s: the rebuild's copy %s is gone: the index is used as it is "
                          "(sessions it lacks are reported missing)", t->path, buf);
            join(buf, sizeof(buf), t->path, MARK_FILE);
            return unlink(buf) == 0 ? sync_dir(t->path) : KVP_ERR_IO;
        }
        return copy_back(t, true); /* a copy there that does not open fails the open */
    }
    if (stat(join(buf, sizeof(buf), t->path, SIDE_DIR), &sb) == 0) {
        KVP_LOG_INFO(MOD, "db %s: removing an index rebuild's copy a stop left unfinished (the "
                     "index was not touched)", t->path);
        side_remove(t);
    }
    return KVP_OK;
}

kvp_status_t tier_index_check(kvp_tier_t *t, bool *damaged_p)
{
    rocksdb_readoptions_t *ro     = rocksdb_readoptions_create();
    kvp_status_t           status = KVP_OK;

    rocksdb_readoptions_set_verify_checksums(ro, 1);
    rocksdb_readoptions_set_fill_cache(ro, 0);
    *damaged_p = false;
    for (size_t i = 0; i < t->ncfs && status == KVP_OK && !*damaged_p; i++) {
        rocksdb_iterator_t *it  = rocksdb_create_iterator_cf(t->db, ro, t->cfs[i]);
        char               *err = NULL;

        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        }
        rocksdb_iter_get_error(it, &err);
        if (err != NULL && strncmp(err, "Corruption", 10) == 0) {
            KVP_LOG_WARN(MOD, "db %s: column family %s: %s", t->path, t->cf_names[i], err);
            rocksdb_free(err);
            *damaged_p = true;
        } else {
            status = tier_map_err("index check", &err);
        }
        rocksdb_iter_destroy(it);
    }
    rocksdb_readoptions_destroy(ro);
    return status;
}
