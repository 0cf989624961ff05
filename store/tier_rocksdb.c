/* tier_rocksdb.c - the SSD tier over the RocksDB C API (with tier_move.c, tier_salvage.c and
 * tier_meta.c, the only files that see rocksdb_* types; tier_int.h). Opens every existing column
 * family plus `pages`, `sessions`, `meta`. Page bytes larger than 4 KiB go to segment files
 * (seg.c, O_DIRECT, no copy) and the pages column family keeps a 24-byte locator; smaller pages
 * are stored inline, uncompressed. The page CRC is what judges a page read back (the store
 * re-parses every one). RocksDB error strings are logged, freed with rocksdb_free and mapped to
 * kvp_status_t here. Every operation holds the db shared (dbl); rebuilding a damaged index
 * (tier_salvage.c) holds it exclusively, so batches keep their records by column family index
 * and become a WriteBatch only at commit.
 * Main flow: kvp_tier_open (index check, rebuild if damaged, meta check: tier_meta.c) ->
 * batch_put_* -> batch_commit
 * (segments, then one WriteBatch; a write RocksDB refused after a compaction met a damaged block
 * rebuilds the index and is written again) -> kvp_tier_pages_locate (MultiGet) +
 * kvp_tier_pages_read (coalesced preadv) / session_scan; walks of the pages and compaction's
 * moves are in tier_move.c. */
#include "tier_int.h"
#include "kvpack/bytes.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MOD TIER_MOD

static const char *const required_cfs[CF_NREQ] = {"default", "pages", "sessions", "meta"};

typedef struct {
    kvp_tier_pkey_t pk;
    kvp_seg_ext_t   ext;
} seg_put_t;

/* A record put or deleted, kept until commit: the column family by index, so a batch made before
 * an index rebuild (which makes the column families again) still names the right one. */
typedef struct {
    uint8_t cf, del;
    size_t  off, klen, vlen; /* key then value at data + off */
} batch_op_t;

struct kvp_tier_batch {
    batch_op_t           *ops;
    size_t                nops, cap_ops;
    uint8_t              *data;  /* keys and values of ops */
    size_t                dlen, cap_data;
    bool                  nomem; /* an op could not be kept: commit refuses the batch */
    size_t                bytes;
    seg_put_t            *puts;  /* pages for segment files, written at commit */
    size_t                nputs, cap_puts;
    kvp_tier_pkey_t      *dels;  /* deleted pages: their old locators die at commit */
    size_t                ndels, cap_dels;
};

/* ---- private ---- */

void tier_unlock(kvp_tier_t *t)
{
    char      **dead;
    size_t      ndead = t->segs != NULL ? kvp_segs_take_dead(t->segs, &dead) : 0;
    uint64_t    id;
    const char *dir;
    int         dirfd;
    bool        spare = t->segs != NULL && kvp_segs_spare_want(t->segs, &id, &dir, &dirfd);

    pthread_mutex_unlock(&t->mu);
    if (ndead > 0) {
        kvp_segs_unlink_dead(dead, ndead);
    }
    if (spare) {
        int fd = kvp_segs_spare_create(dir, dirfd, id);

        pthread_mutex_lock(&t->mu);
        kvp_segs_spare_set(t->segs, id, fd);
        pthread_mutex_unlock(&t->mu);
    }
}

kvp_status_t tier_map_err(const char *what, char **err)
{
    kvp_status_t status = KVP_ERR_IO;

    if (*err == NULL) {
        return KVP_OK;
    }
    if (strncmp(*err, "Corruption", 10) == 0) {
        status = KVP_ERR_CORRUPT;
    } else if (strstr(*err, "No space") != NULL || strstr(*err, "NoSpace") != NULL) {
        status = KVP_ERR_NO_SPACE;
    } else if (strncmp(*err, "NotFound", 8) == 0) {
        status = KVP_ERR_NOT_FOUND;
    }
    KVP_LOG_ERROR(MOD, "rocksdb %s failed: %s", what, *err);
    rocksdb_free(*err);
    *err = NULL;
    return status;
}

kvp_status_t tier_iter_end(kvp_tier_t *t, rocksdb_iterator_t *it, kvp_status_t status,
                           const char *what)
{
    char *err = NULL;

    rocksdb_iter_get_error(it, &err);
    if (err != NULL && status == KVP_OK) {
        status = tier_map_err(what, &err);
    }
    rocksdb_free(err);
    rocksdb_iter_destroy(it);
    tier_db_release(t);
    return status;
}

void tier_page_key(const kvp_tier_pkey_t *pk, uint8_t *k)
{
    kvp_st_be64(k, pk->ns);
    kvp_st_be64(k + 8, pk->key.hi);
    kvp_st_be64(k + 16, pk->key.lo);
    kvp_st_be32(k + 24, pk->layer);
}

static size_t sess_key(uint64_t ns, const char *sid, uint8_t *k)
{
    size_t n = strlen(sid);

    kvp_st_be64(k, ns);
    memcpy(k + 8, sid, n);
    return 8 + n;
}

/* the memtable size a column family flushes at */
static size_t cf_flush_size(const kvp_tier_t *t, const char *name)
{
    return strcmp(name, "pages") == 0 ? t->write_buffer : (4u << 20);
}

static rocksdb_options_t *cf_options(kvp_tier_t *t, const char *name, bool compactions)
{
    rocksdb_options_t *o     = rocksdb_options_create();
    size_t             flush = cf_flush_size(t, name);

    rocksdb_options_set_compression(o, rocksdb_no_compression);
    rocksdb_options_set_disable_auto_compactions(o, !compactions);
    /* own_flushes: RocksDB's own limit is 8x the flush size, which tier_memtables_turn never lets
     * a memtable reach (it switches at the flush size, so memory and the disk reserve's
     * arithmetic, tier_space.c, see a memtable of at most the flush size plus one batch, as
     * before); the arena blocks stay the size the flush size gives */
    rocksdb_options_set_write_buffer_size(o, t->own_flushes ? 8 * flush : flush);
    if (t->own_flushes) {
        rocksdb_options_set_arena_block_size(o, flush / 8 < (1u << 20) ? flush / 8 : (1u << 20));
    }
    if (strcmp(name, "pages") == 0) {
        rocksdb_options_set_max_write_buffer_number(o, 2);
        rocksdb_options_set_level0_file_num_compaction_trigger(o, 8);
        rocksdb_options_set_target_file_size_base(o, 64ull << 20);
        rocksdb_options_set_max_bytes_for_level_base(o, 512ull << 20);
        rocksdb_options_set_block_based_table_factory(o, t->bbt);
        /* values are locators or small inline pages: large page bytes live in segment files
         * (a version-1 db's blob files stay readable without enable_blob_files) */
    }
    return o;
}

/* Every column family but default holds this key, written and flushed into a table file at its
 * first open: RocksDB's RepairDB (tier_db_open) learns column families from table files only, and
 * without one drops the WAL's records of that family, i.e. everything written since the last
 * flush (seen: 0 of 20 records back after a damaged MANIFEST, 20 of 20 with the marker). Scans
 * skip it: it is not a page key's length, not under a meta prefix, and session_scan names it. */
#define CF_MARKER     "\xff\xffkvpack column family"
#define CF_MARKER_LEN (sizeof(CF_MARKER) - 1)

static kvp_status_t cf_markers(kvp_tier_t *t)
{
    char *err = NULL;

    for (size_t i = 1; i < t->ncfs && err == NULL; i++) {
        size_t len;
        char  *v = rocksdb_get_cf(t->db, t->ro, t->cfs[i], CF_MARKER, CF_MARKER_LEN, &len, &err);

        if (v != NULL || err != NULL) {
            rocksdb_free(v);
            continue;
        }
        rocksdb_put_cf(t->db, t->wo_sync, t->cfs[i], CF_MARKER, CF_MARKER_LEN, "1", 1, &err);
        if (err == NULL) {
            rocksdb_flush_cf(t->db, t->fo, t->cfs[i], &err);
        }
    }
    return tier_map_err("column family marker", &err);
}

/* ---- API ---- */

/* tier_db_open, once */
static kvp_status_t db_open_once(kvp_tier_t *t, bool compactions)
{
    char       **existing  = NULL;
    size_t       nexisting = 0, n = 0;
    char        *err       = NULL;
    kvp_status_t status    = KVP_ERR_NO_MEMORY;

    existing = rocksdb_list_column_families(t->db_opts, t->path, &nexisting, &err);
    if (err != NULL) { /* a new directory: no CURRENT file yet */
        rocksdb_free(err);
        rocksdb_free(existing); /* 7.8 returns an empty malloc'd array even on error */
        err       = NULL;
        existing  = NULL;
        nexisting = 0;
    }
    t->cf_names = kvp_calloc(nexisting + CF_NREQ, sizeof(*t->cf_names), "tier cf names");
    t->cfs      = kvp_calloc(nexisting + CF_NREQ, sizeof(*t->cfs), "tier cfs");
    t->cf_opts  = kvp_calloc(nexisting + CF_NREQ, sizeof(*t->cf_opts), "tier cf opts");
    if (t->cf_names == NULL || t->cfs == NULL || t->cf_opts == NULL) {
        goto out;
    }
    for (int r = 0; r < CF_NREQ; r++) {
        t->cf_names[n++] = kvp_strdup(required_cfs[r], "tier cf name");
    }
    for (size_t i = 0; i < nexisting; i++) {
        bool req = false;

        for (int r = 0; r < CF_NREQ; r++) {
            req = req || strcmp(existing[i], required_cfs[r]) == 0;
        }
        if (!req) {
            KVP_LOG_INFO(MOD, "db %s: opening extra column family %s", t->path, existing[i]);
            t->cf_names[n++] = kvp_strdup(existing[i], "tier cf name");
        }
    }
    t->ncfs = n;
    for (size_t i = 0; i < n; i++) {
        if (t->cf_names[i] == NULL) {
            goto out;
        }
        t->cf_opts[i] = cf_options(t, t->cf_names[i], compactions);
    }
    t->db = rocksdb_open_column_families(t->db_opts, t->path, (int)n,
                                         (const char *const *)t->cf_names,
                                         (const rocksdb_options_t *const *)t->cf_opts, t->cfs,
                                         &err);
    if (err != NULL) {
        t->db = NULL;
        status = tier_map_err("open", &err);
        goto out;
    }
    for (int r = 0; r < CF_NREQ; r++) {
        t->cf[r] = t->cfs[r];
    }
    status = KVP_OK;
out:
    if (existing != NULL) {
        rocksdb_list_column_families_destroy(existing, nexisting);
    }
    return status;
}

/* WAL bytes the open just dropped as damaged (kSkipAnyCorruptedRecords): RocksDB 7.8's C API has
 * no other channel for it than its own LOG file, which every open starts afresh, in lines like
 * "(ignoring error) <wal>: dropping 30743 bytes; Corruption: checksum mismatch". Logged here
 * and counted; a LOG in another format counts nothing. */
static uint64_t wal_dropped(const kvp_tier_t *t)
{
    char     path[4096], line[1024];
    FILE    *f;
    uint64_t bytes = 0;

    snprintf(path, sizeof(path), "%s/LOG", t->path);
    if ((f = fopen(path, "r")) == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *d = strstr(line, ": dropping ");

        if (d != NULL && strstr(d, " bytes; Corruption") != NULL) {
            bytes += strtoull(d + 11, NULL, 10);
        }
    }
    fclose(f);
    return bytes;
}

/* A db that does not open for damage (its manifest, or a table file it names gone) is repaired
 * with RocksDB's RepairDB, which writes a new manifest from the table and log files found (one it
 * cannot read moves to lost/, named in the log), and opened again. */
kvp_status_t tier_db_open(kvp_tier_t *t, bool compactions)
{
    kvp_status_t status = db_open_once(t, compactions);
    char        *err    = NULL;
    uint64_t     lost;

    if (status == KVP_OK && (lost = wal_dropped(t)) > 0) {
        KVP_LOG_ERROR(MOD, "db %s: %llu bytes of damaged write-ahead log records were dropped at "
                      "recovery: the writes in them are lost (RocksDB's LOG names them)", t->path,
                      (unsigned long long)lost);
        __atomic_add_fetch(&t->wal_dropped, lost, __ATOMIC_RELAXED);
    }
    if (status != KVP_ERR_CORRUPT) {
        return status;
    }
    KVP_LOG_WARN(MOD, "db %s does not open: repairing it (RocksDB RepairDB: a new manifest from the "
                 "table files; a table that does not read moves to lost/)", t->path);
    tier_db_close(t);
    rocksdb_repair_db(t->db_opts, t->path, &err);
    status = tier_map_err("repair", &err);
    if (status == KVP_OK) {
        status = db_open_once(t, compactions);
    }
    if (status == KVP_OK) {
        char           lost[4096];
        DIR           *d;
        struct dirent *e;
        int            n = 0;

        snprintf(lost, sizeof(lost), "%s/lost", t->path);
        if ((d = opendir(lost)) != NULL) {
            while ((e = readdir(d)) != NULL) {
                n += e->d_name[0] != '.';
            }
            closedir(d);
        }
        KVP_LOG_WARN(MOD, "db %s repaired and open%s", t->path,
                     n > 0 ? "; files it could not read are kept in lost/ (their records are "
                             "gone from the index)" : "");
        __atomic_add_fetch(&t->rebuilds, 1, __ATOMIC_RELAXED);
    }
    return status;
}

void tier_db_close(kvp_tier_t *t)
{
    if (t->db != NULL) {
        for (size_t i = 0; i < t->ncfs; i++) {
            if (t->cfs[i] != NULL) { /* NULL: one a failed rebuild could not make again */
                rocksdb_column_family_handle_destroy(t->cfs[i]);
            }
        }
        rocksdb_close(t->db);
        t->db = NULL;
    }
    for (size_t i = 0; i < t->ncfs; i++) {
        if (t->cf_opts != NULL && t->cf_opts[i] != NULL) {
            rocksdb_options_destroy(t->cf_opts[i]);
        }
        if (t->cf_names != NULL) {
            kvp_free(t->cf_names[i]);
        }
    }
    kvp_free(t->cf_opts);
    kvp_free(t->cfs);
    kvp_free(t->cf_names);
    t->cf_opts  = NULL;
    t->cfs      = NULL;
    t->cf_names = NULL;
    t->ncfs     = 0;
    memset(t->cf, 0, sizeof(t->cf));
}

kvp_status_t tier_db_compactions(kvp_tier_t *t, bool on)
{
    const char *key = "disable_auto_compactions", *val = on ? "false" : "true";
    char       *err = NULL;

    for (size_t i = 0; i < t->ncfs && err == NULL; i++) {
        rocksdb_set_options_cf(t->db, t->cfs[i], 1, &key, &val, &err);
    }
    return tier_map_err("set compactions", &err);
}

/* bytes of the index's table files, every column family (dbl held, or at open) */
static uint64_t index_table_bytes(kvp_tier_t *t)
{
    uint64_t total = 0, v;

    for (size_t i = 0; i < t->ncfs; i++) {
        if (t->cfs[i] != NULL && /* NULL: one a failed rebuild could not make again */
            rocksdb_property_int_cf(t->db, t->cfs[i], "rocksdb.total-sst-files-size", &v) == 0) {
            total += v;
        }
    }
    return total;
}

/* An operation that began at reopen count gen met a db RocksDB stopped: writes refused after a
 * compaction met a damaged block (rebuild: the index is then rebuilt, tier_salvage.c, with
 * compactions off meanwhile) or after a flush met a full disk (room was made since). Opening the
 * db again clears the stop. Nothing is done when a reopen ran since gen. No tier lock held by
 * the caller. */
static kvp_status_t db_reopen(kvp_tier_t *t, uint64_t gen, const char *why, bool rebuild)
{
    kvp_status_t status = KVP_OK;

    pthread_rwlock_wrlock(&t->dbl);
    if (t->gen == gen) { /* room first: an open that fails for space would leave no db at all */
        const char *what = rebuild ? "the damaged index is not rebuilt on this full disk (the "
                                     "open and a copy of the index need room); writes stay "
                                     "refused until there is room"
                                   : "not opened again on this full disk; writes stay refused "
                                     "until there is room";

        pthread_mutex_lock(&t->mu);
        status = tier_space_room(t, tier_space_open_need(t) +
                                        (rebuild ? index_table_bytes(t) : 0),
                                 t->reopen_noroom ? NULL : what); /* once per spell */
        pthread_mutex_unlock(&t->mu);
        t->reopen_noroom = status != KVP_OK;
    }
    if (t->gen == gen && status == KVP_OK) {
        KVP_LOG_WARN(MOD, "db %s: %s: %s", t->path, why,
                     rebuild ? "rebuilding the index from every record that reads"
                             : "opening it again");
        /* the bytes first: the open replays the WAL into a synced table (and a rebuild copies
         * the records back), making durable, under interval, locators whose bytes no sync has
         * covered yet. Failed: logged; the reopen goes on (writes are stopped until it does) */
        pthread_mutex_lock(&t->mu);
        (void)kvp_segs_sync(t->segs);
        pthread_mutex_unlock(&t->mu);
        tier_db_close(t);
        status = tier_db_open(t, !rebuild);
        if (t->db == NULL) { /* it was open a moment ago: nothing sensible is left to do */
            KVP_LOG_ERROR(MOD, "db %s cannot be opened again (%s); stopping: a restart %s", t->path,
                          kvp_status_str(status),
                          rebuild ? "finishes the rebuild" : "opens it once space is free");
            abort();
        }
        if (status == KVP_OK && rebuild) {
            status = tier_index_rebuild(t); /* failed: the index as it was (or the process
                                             * stopped, see tier_salvage.c) */
        }
        if (rebuild) { /* compactions on either way: after a failed rebuild the next one to meet
                        * the damage stops writes again, and the next commit tries again */
            kvp_status_t on = tier_db_compactions(t, true);

            status = status != KVP_OK ? status : on;
        }
        t->gen++;
    }
    pthread_rwlock_unlock(&t->dbl);
    return status;
}

kvp_status_t tier_reopen_rebuild(kvp_tier_t *t, uint64_t gen, const char *why)
{
    return db_reopen(t, gen, why, true);
}

kvp_status_t tier_full_disk(kvp_tier_t *t, uint64_t gen, bool stopped)
{
    pthread_mutex_lock(&t->mu);
    tier_space_release(t);
    tier_unlock(t);
    return stopped ? db_reopen(t, gen, "writes stopped by a full disk", false) : KVP_ERR_NO_SPACE;
}

uint64_t tier_db_hold(kvp_tier_t *t)
{
    pthread_rwlock_rdlock(&t->dbl);
    return t->gen;
}

void tier_db_release(kvp_tier_t *t) { pthread_rwlock_unlock(&t->dbl); }

/* ---- API ---- */

kvp_status_t kvp_tier_open(const kvp_tier_params_t *params, kvp_tier_t **tier_p)
{
    kvp_tier_t         *t;
    kvp_status_t        status;
    bool                damaged = false;
    pthread_rwlockattr_t ra;

    t = kvp_calloc(1, sizeof(*t), "tier");
    if (t == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_rwlockattr_init(&ra); /* a rebuild waiting must not starve behind a stream of reads */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&t->dbl, &ra);
    pthread_rwlockattr_destroy(&ra);
    t->path         = kvp_strdup(params->path, "tier path");
    t->write_buffer = params->write_buffer;
    t->own_flushes  = params->own_flushes;
    status          = KVP_OK;
    if (t->path != NULL && mkdir(t->path, 0755) != 0 && errno != EEXIST) {
        KVP_LOG_ERROR(MOD, "cannot create %s: %m", t->path);
        status = KVP_ERR_IO; /* after the options exist: kvp_tier_close frees them */
    }
    t->db_opts      = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(t->db_opts, 1);
    rocksdb_options_set_create_missing_column_families(t->db_opts, 1);
    rocksdb_options_increase_parallelism(t->db_opts, 2);
    rocksdb_options_set_max_background_jobs(t->db_opts, 2);
    rocksdb_options_set_keep_log_file_num(t->db_opts, 2);
    rocksdb_options_set_max_log_file_size(t->db_opts, 4u << 20);
    rocksdb_options_set_info_log_level(t->db_opts, 2); /* warn */
    rocksdb_options_set_compression(t->db_opts, rocksdb_no_compression);
    /* a damaged record in the WAL costs that write only: RocksDB's default (point in time) would
     * drop it and every later write, acknowledged ones included, without an error */
    rocksdb_options_set_wal_recovery_mode(t->db_opts, 3 /* kSkipAnyCorruptedRecords */);
    t->bbt = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_filter_policy(t->bbt, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_no_block_cache(t->bbt, 1);
    rocksdb_block_based_options_set_block_size(t->bbt, 16u << 10);
    t->wo_wal   = rocksdb_writeoptions_create();
    t->wo_sync  = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(t->wo_sync, 1);
    t->wo_nowal = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(t->wo_nowal, 1);
    t->ro       = rocksdb_readoptions_create();
    t->ro_pages = rocksdb_readoptions_create();
    rocksdb_readoptions_set_verify_checksums(t->ro_pages, 0);
    rocksdb_readoptions_set_fill_cache(t->ro_pages, 0);
    t->fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(t->fo, 1);
    t->fo_nowait = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(t->fo_nowait, 0);
    /* own_flushes: nothing else may switch a memtable. max_total_wal_size stays 0 (4x the
     * memtables' limits, never reached: every switch flushes every non-empty memtable, so the
     * live WALs hold about one flush size per column family); db_write_buffer_size stays 0 (no
     * write buffer manager); a write stall delays writes but switches nothing. */
    if (t->path == NULL || status != KVP_OK) {
        status = t->path == NULL ? KVP_ERR_NO_MEMORY : status;
        kvp_tier_close(t);
        return status;
    }

    tier_space_open(t, params->reserve_bytes);
    /* compactions start only once every block is known to read: one that met a damaged block
     * would stop every write */
    status = tier_space_room(t, tier_space_open_need(t),
                             "cannot be opened on this full disk (a new write-ahead log, and the old "
                             "one replayed into a table file); free some space and start again");
    if (status == KVP_OK) {
        kvp_segs_sync_files(params->path);
        status = tier_db_open(t, false);
    }
    if (status == KVP_OK) {
        status = tier_salvage_resume(t);
    }
    if (status == KVP_OK) {
        status = tier_index_check(t, &damaged);
    }
    if (status == KVP_OK && damaged) {
        KVP_LOG_WARN(MOD, "db %s: a block of the index is damaged: rebuilding the index from "
                     "every record that reads", t->path);
        status = tier_space_room(t, index_table_bytes(t) + (1u << 20),
                                 "the damaged index cannot be rebuilt on this full disk (a copy of "
                                 "it is made first); free some space and start again");
        status = status == KVP_OK ? tier_index_rebuild(t) : status;
    }
    if (status == KVP_OK) {
        status = tier_db_compactions(t, true);
    }
    if (status == KVP_OK) {
        status = cf_markers(t);
    }
    if (status == KVP_OK) {
        status = tier_meta_check(t, params->node_id);
    }
    if (status == KVP_OK) {
        status = kvp_segs_open(params->path, params->segment_bytes, &t->segs);
    }
    if (status != KVP_OK) {
        kvp_tier_close(t);
        return status;
    }
    t->opened = true;
    *tier_p   = t;
    return KVP_OK;
}

void kvp_tier_close(kvp_tier_t *t)
{
    if (t == NULL) {
        return;
    }
    tier_db_close(t);
    if (t->wo_wal != NULL) {
        rocksdb_writeoptions_destroy(t->wo_wal);
        rocksdb_writeoptions_destroy(t->wo_sync);
        rocksdb_writeoptions_destroy(t->wo_nowal);
        rocksdb_readoptions_destroy(t->ro);
        rocksdb_readoptions_destroy(t->ro_pages);
        rocksdb_flushoptions_destroy(t->fo);
    }
    if (t->fo_nowait != NULL) {
        rocksdb_flushoptions_destroy(t->fo_nowait);
    }
    rocksdb_block_based_options_destroy(t->bbt);
    rocksdb_options_destroy(t->db_opts);
    kvp_segs_close(t->segs);
    pthread_mutex_destroy(&t->mu);
    pthread_rwlock_destroy(&t->dbl);
    kvp_free(t->path);
    kvp_free(t);
}

kvp_tier_batch_t *kvp_tier_batch_create(void)
{
    return kvp_calloc(1, sizeof(kvp_tier_batch_t), "tier batch");
}

void kvp_tier_batch_destroy(kvp_tier_batch_t *b)
{
    if (b != NULL) {
        kvp_free(b->ops);
        kvp_free(b->data);
        kvp_free(b->puts);
        kvp_free(b->dels);
        kvp_free(b);
    }
}

/* Keep one put (val != NULL) or delete of column family cf for commit. */
static void batch_op(const kvp_tier_t *t, kvp_tier_batch_t *b, int cf, const void *key,
                     size_t klen, const void *val, size_t vlen)
{
    size_t      need = klen + (val != NULL ? vlen : 0);
    batch_op_t *o;

    (void)t; /* the batch is the tier's, its column family handles are taken at commit */
    o = kvp_array_room(b->ops, &b->cap_ops, b->nops, sizeof(*o), 16, "tier batch ops");
    if (o == NULL) {
        b->nomem = true;
        return;
    }
    b->ops = o;
    if (b->dlen + need > b->cap_data) {
        size_t   cap = b->cap_data ? 2 * b->cap_data : 4096;
        uint8_t *d;

        while (cap < b->dlen + need) {
            cap *= 2;
        }
        if ((d = kvp_realloc(b->data, cap, "tier batch data")) == NULL) {
            b->nomem = true;
            return;
        }
        b->data     = d;
        b->cap_data = cap;
    }
    memcpy(b->data + b->dlen, key, klen);
    if (val != NULL) {
        memcpy(b->data + b->dlen + klen, val, vlen);
    }
    b->ops[b->nops++] = (batch_op_t){(uint8_t)cf, val == NULL, b->dlen, klen,
                                     val != NULL ? vlen : 0};
    b->dlen += need;
}

/* The batch's records as a RocksDB write batch on the column families open now (dbl held). */
static rocksdb_writebatch_t *batch_build(kvp_tier_t *t, const kvp_tier_batch_t *b)
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();

    for (size_t i = 0; i < b->nops; i++) {
        const batch_op_t *o = &b->ops[i];
        const char       *k = (const char *)b->data + o->off;

        if (o->del) {
            rocksdb_writebatch_delete_cf(wb, t->cf[o->cf], k, o->klen);
        } else {
            rocksdb_writebatch_put_cf(wb, t->cf[o->cf], k, o->klen, k + o->klen, o->vlen);
        }
    }
    return wb;
}

void tier_loc_encode(uint64_t seg, uint64_t off, uint32_t len, uint8_t *v)
{
    memcpy(v, "KVSL", 4);
    kvp_st_be64(v + 4, seg);
    kvp_st_be64(v + 12, off);
    kvp_st_be32(v + 20, len);
}

bool tier_loc_decode(const void *val, size_t vlen, uint64_t *seg, uint64_t *off, uint32_t *len)
{
    const uint8_t *v = val;

    uint32_t       n;

    if (vlen != LOC_BYTES || memcmp(v, "KVSL", 4) != 0) {
        return false;
    }
    /* A length no segment page can have (the pages column family is read without block
     * checksums): not a locator, so the caller takes the 24 bytes for an inline page, which is
     * too short for one: a corrupt page, rather than a request for gigabytes of DRAM. */
    n = kvp_ld_be32(v + 20);
    if (n <= KVP_TIER_INLINE_MAX || n > KVP_PAGE_HDR_BYTES + KVP_PAGE_MAX_PAYLOAD) {
        return false;
    }
    /* likewise a segment id of 0 (it names inline pages) or an offset off the 4 KiB grid */
    if (kvp_ld_be64(v + 4) == 0 || kvp_ld_be64(v + 12) % KVP_SEG_ALIGN != 0) {
        return false;
    }
    *seg = kvp_ld_be64(v + 4);
    *off = kvp_ld_be64(v + 12);
    *len = n;
    return true;
}

void kvp_tier_batch_put_page(kvp_tier_t *t, kvp_tier_batch_t *b, const kvp_tier_pkey_t *pk,
                             const void *page, size_t len)
{
    uint8_t k[PKEY_BYTES];

    b->bytes += len;
    if (len > KVP_TIER_INLINE_MAX && len <= UINT32_MAX && ((uintptr_t)page & 4095) == 0) {
        seg_put_t *p = kvp_array_room(b->puts, &b->cap_puts, b->nputs, sizeof(*p), 64,
                                      "tier batch pages");

        if (p != NULL) { /* else the list stays as it was, full */
            b->puts = p;
        }
        if (b->nputs < b->cap_puts) {
            b->puts[b->nputs].pk  = *pk;
            b->puts[b->nputs].ext = (kvp_seg_ext_t){(void *)page, (uint32_t)len, 0, 0, KVP_OK};
            b->nputs++;
            return;
        }
        /* no memory for the list: fall back to storing it inline */
    }
    tier_page_key(pk, k);
    batch_op(t, b, CF_PAGES, k, sizeof(k), page, len);
}

void kvp_tier_batch_del_page(kvp_tier_t *t, kvp_tier_batch_t *b, const kvp_tier_pkey_t *pk)
{
    uint8_t          k[PKEY_BYTES];
    kvp_tier_pkey_t *d = kvp_array_room(b->dels, &b->cap_dels, b->ndels, sizeof(*d), 16,
                                        "tier batch dels");

    if (d != NULL) { /* else the list stays as it was, full */
        b->dels = d;
    }
    if (b->ndels < b->cap_dels) { /* else its segment bytes stay counted live: a leak, not a loss */
        b->dels[b->ndels++] = *pk;
    }
    tier_page_key(pk, k);
    batch_op(t, b, CF_PAGES, k, sizeof(k), NULL, 0);
}

void kvp_tier_batch_put_session(kvp_tier_t *t, kvp_tier_batch_t *b, uint64_t ns, const char *sid,
                                const void *blob, size_t len)
{
    uint8_t k[8 + KVP_SID_MAX];
    size_t  kl = sess_key(ns, sid, k);

    batch_op(t, b, CF_SESSIONS, k, kl, blob, len);
    b->bytes += len;
}

void kvp_tier_batch_del_session(kvp_tier_t *t, kvp_tier_batch_t *b, uint64_t ns, const char *sid)
{
    uint8_t k[8 + KVP_SID_MAX];
    size_t  kl = sess_key(ns, sid, k);

    batch_op(t, b, CF_SESSIONS, k, kl, NULL, 0);
}

void kvp_tier_batch_put_meta(kvp_tier_t *t, kvp_tier_batch_t *b, const char *key, const void *val,
                             size_t len)
{
    batch_op(t, b, CF_META, key, strlen(key), val, len);
}

void kvp_tier_batch_del_meta(kvp_tier_t *t, kvp_tier_batch_t *b, const char *key)
{
    batch_op(t, b, CF_META, key, strlen(key), NULL, 0);
}

size_t kvp_tier_batch_bytes(const kvp_tier_batch_t *b)
{
    return b->bytes;
}

bool kvp_tier_batch_empty(const kvp_tier_batch_t *b)
{
    return b->nputs == 0 && b->nops == 0 && !b->nomem;
}

/* One batched MultiGet of the n page keys *pks[i] in the pages column family: vals[i] (NULL when
 * absent; the caller destroys it) and errs[i] (rocksdb_free) per key. KVP_ERR_NO_MEMORY and
 * nothing read when its buffers cannot be had. */
static kvp_status_t mget_pages(kvp_tier_t *t, const rocksdb_readoptions_t *ro, size_t n,
                               const kvp_tier_pkey_t *const *pks, rocksdb_pinnableslice_t **vals,
                               char **errs)
{
    uint8_t     *kbuf  = kvp_malloc(n * PKEY_BYTES, "tier mget keys");
    const char **keys  = kvp_malloc(n * sizeof(*keys), "tier mget keys");
    size_t      *klens = kvp_malloc(n * sizeof(*klens), "tier mget keys");
    kvp_status_t status = KVP_ERR_NO_MEMORY;

    if (kbuf != NULL && keys != NULL && klens != NULL) {
        for (size_t i = 0; i < n; i++) {
            tier_page_key(pks[i], kbuf + i * PKEY_BYTES);
            keys[i]  = (const char *)kbuf + i * PKEY_BYTES;
            klens[i] = PKEY_BYTES;
        }
        rocksdb_batched_multi_get_cf(t->db, ro, t->cf[CF_PAGES], n, keys, klens, vals, errs,
                                     false);
        status = KVP_OK;
    }
    kvp_free(klens);
    kvp_free(keys);
    kvp_free(kbuf);
    return status;
}

bool tier_cur_locs(kvp_tier_t *t, size_t n, const kvp_tier_pkey_t *const *pks,
                   tier_cur_loc_t *cur)
{
    rocksdb_pinnableslice_t **vals = kvp_calloc(n ? n : 1, sizeof(*vals), "tier mget vals");
    char                    **errs = kvp_calloc(n ? n : 1, sizeof(*errs), "tier mget errs");
    bool                      ok   = vals != NULL && errs != NULL &&
                                     mget_pages(t, t->ro, n, pks, vals, errs) == KVP_OK;

    for (size_t i = 0; i < n; i++) {
        cur[i].found = false;
        if (ok && errs[i] == NULL && vals[i] != NULL) {
            size_t      vlen;
            const char *v = rocksdb_pinnableslice_value(vals[i], &vlen);

            cur[i].found = tier_loc_decode(v, vlen, &cur[i].seg, &cur[i].off, &cur[i].len);
        }
        if (ok) {
            rocksdb_free(errs[i]);
            if (vals[i] != NULL) {
                rocksdb_pinnableslice_destroy(vals[i]);
            }
        }
    }
    kvp_free(errs);
    kvp_free(vals);
    return ok;
}

bool tier_inject_take(kvp_tier_t *t, const char *what, size_t bytes, kvp_status_t *status_p)
{
    if (t->fail_n == 0) {
        return false;
    }
    *status_p = t->fail_status;
    t->fail_n--;
    tier_unlock(t);
    KVP_LOG_ERROR(MOD, "db %s %s of %zu bytes failed: %s (injected)", t->path, what, bytes,
                  kvp_status_str(*status_p));
    return true;
}

/* Steps 2 and 3 of a commit (t->mu held): the locators the batch replaces or deletes, then one
 * WriteBatch of its records and segment locators; the live-byte accounting when it is written. */
static kvp_status_t commit_records(kvp_tier_t *t, kvp_tier_batch_t *b, kvp_tier_mode_t mode)
{
    size_t                nold = b->nputs + b->ndels;
    tier_cur_loc_t       *old  = NULL;
    rocksdb_writebatch_t *wb;
    char                 *err = NULL;
    kvp_status_t          status;

    /* 2. locators this batch replaces or deletes: their segment bytes die with the commit */
    if (nold > 0) {
        const kvp_tier_pkey_t **pks = kvp_malloc(nold * sizeof(*pks), "tier commit old");

        old = kvp_malloc(nold * sizeof(*old), "tier commit old");
        for (size_t i = 0; pks != NULL && i < nold; i++) {
            pks[i] = i < b->nputs ? &b->puts[i].pk : &b->dels[i - b->nputs];
        }
        if (pks == NULL || old == NULL || !tier_cur_locs(t, nold, pks, old)) {
            nold = 0; /* their segment bytes stay counted live: a leak, not a loss */
        }
        kvp_free(pks);
    }
    /* 3. one WriteBatch: records, inline pages, locators */
    wb = batch_build(t, b);
    for (size_t i = 0; i < b->nputs; i++) {
        uint8_t k[PKEY_BYTES], v[LOC_BYTES];

        tier_page_key(&b->puts[i].pk, k);
        tier_loc_encode(b->puts[i].ext.seg, b->puts[i].ext.off, b->puts[i].ext.len, v);
        rocksdb_writebatch_put_cf(wb, t->cf[CF_PAGES], (const char *)k, sizeof(k),
                                  (const char *)v, sizeof(v));
    }
    rocksdb_write(t->db, mode == KVP_TIER_SYNC ? t->wo_sync : t->wo_wal, wb, &err);
    rocksdb_writebatch_destroy(wb);
    status = tier_map_err("write", &err);
    if (status == KVP_OK) {
        t->logical += b->bytes;
        for (size_t i = 0; i < b->nputs; i++) {
            kvp_segs_live_add(t->segs, b->puts[i].ext.seg,
                              (int64_t)kvp_seg_span(b->puts[i].ext.len));
        }
        for (size_t i = 0; i < nold; i++) { /* the old places die once this record is durable */
            if (old[i].found) {
                tier_dead_defer(t, old[i].seg, old[i].len);
            }
        }
        if (mode == KVP_TIER_SYNC) { /* it is: the WAL was fsynced with it */
            tier_wal_synced(t, NULL, NULL);
        }
    }
    kvp_free(old);
    return status;
}

/* The segment half of a commit (step 1), t->mu held on entry and on return: page bytes to the
 * active segment, durable before any locator names them; placed under the lock, written (and
 * fdatasynced when SYNC) without it, so restores' read plans and other commits do not wait for
 * this one's disk writes. b->puts[i].ext get their places. */
static kvp_status_t commit_segments(kvp_tier_t *t, kvp_tier_batch_t *b, kvp_tier_mode_t mode)
{
    kvp_seg_ext_t *ext;
    kvp_seg_resv_t resv;
    kvp_status_t   status, end;

    if (b->nputs == 0) { /* no page of its own: bytes written through before (a record-only
                          * rewrite, a spill group) become durable with it */
        return mode == KVP_TIER_SYNC ? kvp_segs_sync(t->segs) : KVP_OK;
    }
    if ((ext = kvp_malloc(b->nputs * sizeof(*ext), "tier commit extents")) == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to write %zu pages", b->nputs);
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < b->nputs; i++) {
        ext[i] = b->puts[i].ext;
    }
    status = kvp_segs_reserve(t->segs, ext, b->nputs, &resv);
    if (status != KVP_OK) {
        kvp_free(ext);
        return status;
    }
    tier_unlock(t);
    tier_hook_run(t, KVP_TIER_HOOK_WRITE);
    status = kvp_segs_resv_write(&resv, ext, b->nputs, mode == KVP_TIER_SYNC);
    pthread_mutex_lock(&t->mu);
    end    = kvp_segs_resv_end(t->segs, &resv, status == KVP_OK, mode == KVP_TIER_SYNC);
    status = status != KVP_OK ? status : end;
    if (status == KVP_OK && mode == KVP_TIER_SYNC) { /* other commits' unsynced bytes in the
                                                      * active file (usually none): the WAL sync
                                                      * makes their locators durable too */
        status = kvp_segs_sync(t->segs);
    }
    for (size_t i = 0; i < b->nputs && status == KVP_OK; i++) {
        b->puts[i].ext = ext[i];
    }
    kvp_free(ext);
    return status;
}

/* A hold (+1) on, or its release (-1) from, the segment files of the batch's written pages
 * (kvp_segs_hold), t->mu held. */
static void commit_hold(kvp_tier_t *t, const kvp_tier_batch_t *b, int delta)
{
    for (size_t i = 0; i < b->nputs; i++) {
        (void)kvp_segs_hold(t->segs, b->puts[i].ext.seg, delta);
    }
}

kvp_status_t kvp_tier_batch_commit(kvp_tier_t *t, kvp_tier_batch_t *b, kvp_tier_mode_t mode)
{
    kvp_status_t status;
    uint64_t     gen;
    bool         admitted, stopped = false; /* stopped: RocksDB refused the write for space */
    bool         written = false, retry;

    if (b->nomem) {
        KVP_LOG_ERROR(MOD, "no memory to keep a batch of %zu bytes", b->bytes);
        return KVP_ERR_NO_MEMORY;
    }
    gen = tier_db_hold(t);
    pthread_mutex_lock(&t->mu);
    if (tier_inject_take(t, "write", b->bytes, &status)) {
        tier_db_release(t);
        return status;
    }
    status   = tier_space_admit(t, b->bytes); /* refused: nothing written, the reserve kept */
    admitted = status == KVP_OK;
    if (admitted) {
        status  = commit_segments(t, b, mode);
        written = status == KVP_OK;
        if (status == KVP_OK) {
            status  = commit_records(t, b, mode);
            stopped = status == KVP_ERR_NO_SPACE;
        }
        if (status == KVP_OK && tier_memtables_turn(t, false, 1, 1) != KVP_OK) {
            /* the syncer did not come round in time, and the sync here failed: the commit
             * stands (its records are written); the next commit or tick tries again */
            KVP_LOG_WARN(MOD, "db %s: the sync before a memtable switch failed", t->path);
        }
    }
    t->reclaim = t->reclaim || (status == KVP_OK && t->full && b->bytes == 0 && b->nops > 0);
    retry      = status == KVP_ERR_CORRUPT || (admitted && status == KVP_ERR_NO_SPACE);
    if (retry && written) { /* its page bytes, named by no locator yet, must outlast the reopen:
                             * another commit could otherwise unlink their file meanwhile */
        commit_hold(t, b, 1);
    }
    tier_unlock(t);
    tier_db_release(t);
    if (status == KVP_ERR_CORRUPT) { /* RocksDB stopped writes: a compaction met a damaged block */
        status = tier_reopen_rebuild(t, gen, "writes stopped by a damaged block");
    } else if (retry) { /* the disk filled anyway */
        status = tier_full_disk(t, gen, stopped);
    } else {
        return status;
    }
    /* the db was opened again: the records once more, a batch that adds bytes only if the
     * reserve's admission lets it now; then the hold goes (the file with it if nothing names
     * its bytes after all) */
    tier_db_hold(t);
    pthread_mutex_lock(&t->mu);
    if (status == KVP_OK) {
        status = b->bytes > 0 ? tier_space_admit(t, b->bytes) : KVP_OK;
        status = status == KVP_OK ? commit_records(t, b, mode) : status;
    }
    if (written) {
        commit_hold(t, b, -1);
    }
    tier_unlock(t);
    tier_db_release(t);
    return status;
}

static bool cf_prop(kvp_tier_t *t, size_t i, const char *prop, uint64_t *v)
{
    return rocksdb_property_int_cf(t->db, t->cfs[i], prop, v) == 0;
}

void tier_dead_defer(kvp_tier_t *t, uint64_t seg, uint32_t len)
{
    kvp_segs_dead_later(t->segs, seg, (int64_t)kvp_seg_span(len));
}

void tier_wal_synced(kvp_tier_t *t, uint64_t *files_p, uint64_t *bytes_p)
{
    uint64_t files = 0, freed = kvp_segs_dead_synced(t->segs, &files);

    if (files_p != NULL) {
        *files_p += files;
    }
    if (bytes_p != NULL) {
        *bytes_p += freed;
    }
    if (files > 0) { /* a reader that located a page in a file gone now (a compaction's old place:
                 * its page lives on elsewhere) must locate it again, not drop it as missing */
        __atomic_store_n(&t->moves, t->moves + 1, __ATOMIC_RELEASE);
    }
}

kvp_status_t tier_memtables_turn(kvp_tier_t *t, bool synced, unsigned num, unsigned den)
{
    char        *err    = NULL;
    kvp_status_t status = KVP_OK;
    bool         due    = false;
    uint64_t     v;

    if (!t->own_flushes) {
        return KVP_OK;
    }
    for (size_t i = 0; i < t->ncfs && !due; i++) {
        due = cf_prop(t, i, "rocksdb.cur-size-active-mem-table", &v) &&
              v >= cf_flush_size(t, t->cf_names[i]) / den * num &&
              cf_prop(t, i, "rocksdb.num-entries-active-mem-table", &v) && v > 0;
    }
    if (!due) {
        return KVP_OK;
    }
    if (!synced) {
        status = kvp_segs_sync(t->segs);
        if (status == KVP_OK) {
            rocksdb_flush_wal(t->db, 1, &err);
            status = tier_map_err("flush wal", &err);
        }
        if (status == KVP_OK) {
            tier_wal_synced(t, NULL, NULL);
        }
    }
    /* every non-empty memtable: none keeps an old WAL alive (that would grow the WALs until
     * max_total_wal_size switched memtables without a sync first) */
    for (size_t i = 0; i < t->ncfs && status == KVP_OK; i++) {
        if (cf_prop(t, i, "rocksdb.num-entries-active-mem-table", &v) && v > 0) {
            rocksdb_flush_cf(t->db, t->fo_nowait, t->cfs[i], &err);
            status = tier_map_err("memtable flush", &err);
        }
    }
    return status;
}

kvp_status_t kvp_tier_sync(kvp_tier_t *t)
{
    char        *err = NULL;
    kvp_status_t status = KVP_OK;
    uint64_t     gen;
    int          fd;

    pthread_mutex_lock(&t->mu);
    if (tier_inject_take(t, "sync", 0, &status)) {
        return status;
    }
    fd = kvp_segs_sync_begin(t->segs, &gen);
    tier_unlock(t); /* commits go on while the bulk of the bytes syncs */
    if (fd == -2) {
        status = KVP_ERR_IO;
    } else if (fd >= 0) {
        status = kvp_segs_sync_run(fd);
    }
    if (status == KVP_OK) {
        /* The WAL sync makes durable the locators of every commit so far, so the bytes they name
         * must be first: a commit that landed after the fdatasync above has its bytes synced
         * here (kvp_segs_sync: nothing to do when none did), and none lands until the WAL is. */
        tier_db_hold(t);
        pthread_mutex_lock(&t->mu);
        if (fd >= 0) {
            kvp_segs_sync_end(t->segs, gen);
        }
        status = kvp_segs_sync(t->segs);
        if (status == KVP_OK) {
            rocksdb_flush_wal(t->db, 1, &err);
            status = tier_map_err("flush wal", &err);
        }
        if (status == KVP_OK) {
            tier_wal_synced(t, NULL, NULL);
        }
        /* every record so far names synced bytes: a memtable past half its flush size switches
         * now (the commit path would at the full size, with a sync of its own). The sync stands
         * if the flush request fails: the next tick or commit asks again. */
        if (status == KVP_OK && tier_memtables_turn(t, true, 1, 2) != KVP_OK) {
            KVP_LOG_WARN(MOD, "db %s: a memtable flush request failed", t->path);
        }
        tier_unlock(t);
        tier_db_release(t);
    }
    return status;
}

kvp_status_t kvp_tier_sync_if_dead(kvp_tier_t *t)
{
    bool waiting;

    pthread_mutex_lock(&t->mu);
    waiting = kvp_segs_dead_waiting(t->segs);
    pthread_mutex_unlock(&t->mu);
    return waiting ? kvp_tier_sync(t) : KVP_OK;
}

/* kvp_tier_pages_locate with the db held */
static kvp_status_t locate(kvp_tier_t *t, size_t n, const kvp_tier_pkey_t *pks,
                           kvp_tier_loc_t *locs)
{
    const kvp_tier_pkey_t   **pp;
    rocksdb_pinnableslice_t **vals;
    char                    **errs;
    kvp_status_t              status = KVP_ERR_NO_MEMORY;
    uint64_t                  moves;

    if (n == 0) {
        return KVP_OK;
    }
    memset(locs, 0, n * sizeof(*locs));
    moves = __atomic_load_n(&t->moves, __ATOMIC_ACQUIRE); /* before the MultiGet reads */
    pp    = kvp_malloc(n * sizeof(*pp), "tier mget keys");
    vals  = kvp_calloc(n, sizeof(*vals), "tier mget vals");
    errs  = kvp_calloc(n, sizeof(*errs), "tier mget errs");
    for (size_t i = 0; pp != NULL && i < n; i++) {
        locs[i].pk    = pks[i];
        locs[i].moves = moves;
        pp[i]         = &pks[i];
    }
    if (pp != NULL && vals != NULL && errs != NULL) {
        status = mget_pages(t, t->ro_pages, n, pp, vals, errs);
    }
    if (status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "no memory to locate %zu pages", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (errs[i] != NULL) {
            locs[i].status = tier_map_err("multiget page", &errs[i]);
        } else if (vals[i] == NULL) {
            locs[i].status = KVP_ERR_NOT_FOUND;
        } else {
            size_t      len;
            const char *v = rocksdb_pinnableslice_value(vals[i], &len);
            bool        in_seg = tier_loc_decode(v, len, &locs[i].seg, &locs[i].off, &locs[i].len);

            if (!in_seg && len < KVP_PAGE_HDR_BYTES) {
                /* not a locator and too short to be a page (an empty or cut value: the
                 * column family is read without block checksums): a damaged entry */
                locs[i].status = KVP_ERR_CORRUPT;
                locs[i].len    = (uint32_t)len;
            } else if (!in_seg) {
                locs[i].inline_buf = kvp_malloc(len, "tier inline page");
                locs[i].status     = locs[i].inline_buf != NULL ? KVP_OK : KVP_ERR_NO_MEMORY;
                locs[i].len        = (uint32_t)len;
                if (locs[i].inline_buf != NULL) {
                    memcpy(locs[i].inline_buf, v, len);
                }
            }
        }
        if (vals[i] != NULL) {
            rocksdb_pinnableslice_destroy(vals[i]);
        }
    }
out:
    kvp_free(errs);
    kvp_free(vals);
    kvp_free(pp);
    return status;
}

kvp_status_t kvp_tier_pages_locate(kvp_tier_t *t, size_t n, const kvp_tier_pkey_t *pks,
                                   kvp_tier_loc_t *locs)
{
    kvp_status_t status;

    tier_db_hold(t);
    status = locate(t, n, pks, locs);
    tier_db_release(t);
    return status;
}

/* Read the pages idx[0..m) of locs into dst: inline ones copied, segment ones planned under the
 * lock and read without it. Returns the compaction moves the plan saw (a page located before
 * that count and missing now may have moved). */
static uint64_t read_once(kvp_tier_t *t, const size_t *idx, size_t m, kvp_tier_loc_t *locs,
                          void *const *dst, kvp_seg_ext_t *ext)
{
    size_t          ne = 0;
    uint64_t        moves;
    kvp_seg_read_t *plan;

    for (size_t j = 0; j < m; j++) {
        kvp_tier_loc_t *l = &locs[idx[j]];

        if (l->seg == 0) {
            memcpy(dst[idx[j]], l->inline_buf, l->len);
        } else {
            ext[ne++] = (kvp_seg_ext_t){dst[idx[j]], l->len, l->seg, l->off, KVP_OK};
        }
    }
    pthread_mutex_lock(&t->mu); /* the segment table and fds; the I/O runs without it */
    plan  = ne > 0 ? kvp_segs_read_plan(t->segs, ext, ne) : NULL;
    moves = t->moves;
    tier_unlock(t);
    if (plan != NULL) {
        kvp_segs_read_run(plan);
    }
    ne = 0;
    for (size_t j = 0; j < m; j++) {
        if (locs[idx[j]].seg != 0) {
            locs[idx[j]].status = ext[ne++].status;
        }
    }
    return moves;
}

/* Locate again the pages idx[0..m) (they were missing after a compaction moved pages): a page
 * found at the same length is to be read again (status KVP_OK). */
static void relocate(kvp_tier_t *t, const size_t *idx, size_t m, kvp_tier_loc_t *locs)
{
    kvp_tier_pkey_t *pks = kvp_malloc(m * sizeof(*pks), "tier relocate keys");
    kvp_tier_loc_t  *now = kvp_malloc(m * sizeof(*now), "tier relocate locs");

    if (pks != NULL && now != NULL) {
        for (size_t j = 0; j < m; j++) {
            pks[j] = locs[idx[j]].pk;
        }
        if (locate(t, m, pks, now) == KVP_OK) {
            for (size_t j = 0; j < m; j++) {
                kvp_tier_loc_t *l = &locs[idx[j]];

                if (now[j].status == KVP_OK && now[j].len == l->len) {
                    kvp_free(l->inline_buf);
                    *l             = now[j];
                    now[j].inline_buf = NULL;
                }
            }
        }
        kvp_tier_locs_clear(now, m);
    }
    kvp_free(now);
    kvp_free(pks);
}

void kvp_tier_pages_read(kvp_tier_t *t, size_t n, kvp_tier_loc_t *locs, void *const *dst)
{
    kvp_seg_ext_t *ext = kvp_malloc((n ? n : 1) * sizeof(*ext), "tier read extents");
    size_t        *idx = kvp_malloc((n ? n : 1) * sizeof(*idx), "tier read extents");
    size_t         m   = 0;

    if (ext == NULL || idx == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to read %zu pages", n);
        for (size_t i = 0; i < n; i++) {
            locs[i].status = locs[i].status == KVP_OK ? KVP_ERR_NO_MEMORY : locs[i].status;
        }
        kvp_free(ext);
        kvp_free(idx);
        return;
    }
    tier_hook_run(t, KVP_TIER_HOOK_READ);
    for (size_t i = 0; i < n; i++) {
        if (locs[i].status == KVP_OK && dst[i] != NULL) {
            idx[m++] = i;
        }
    }
    /* a few rounds: each is needed only when a compaction moved a page in the meantime */
    for (int round = 0; m > 0; round++) {
        uint64_t moves = read_once(t, idx, m, locs, dst, ext);
        size_t   again = 0;

        for (size_t j = 0; j < m; j++) {
            if (locs[idx[j]].status == KVP_ERR_NOT_FOUND && locs[idx[j]].moves != moves) {
                idx[again++] = idx[j];
            }
        }
        if (again == 0 || round == 3) {
            break;
        }
        KVP_LOG_DEBUG(MOD, "%zu pages moved by a compaction while being read: located again",
                      again);
        tier_db_hold(t);
        relocate(t, idx, again, locs);
        tier_db_release(t);
        m = 0;
        for (size_t j = 0; j < again; j++) {
            if (locs[idx[j]].status == KVP_OK) {
                idx[m++] = idx[j];
            }
        }
    }
    kvp_free(ext);
    kvp_free(idx);
}

void kvp_tier_locs_clear(kvp_tier_loc_t *locs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        kvp_free(locs[i].inline_buf);
        locs[i].inline_buf = NULL;
    }
}


void kvp_tier_last_writes(kvp_tier_t *t)
{
    pthread_mutex_lock(&t->mu);
    t->closing = true;
    pthread_mutex_unlock(&t->mu);
}

void kvp_tier_set_hook(kvp_tier_t *t, kvp_tier_hook_t at, void (*fn)(void *arg), void *arg)
{
    __atomic_store_n(&t->hooks[at].arg, arg, __ATOMIC_RELEASE);
    __atomic_store_n(&t->hooks[at].fn, fn, __ATOMIC_RELEASE);
}

void kvp_tier_set_read_fds(kvp_tier_t *t, size_t max)
{
    pthread_mutex_lock(&t->mu);
    kvp_segs_set_rfd_max(t->segs, max);
    tier_unlock(t);
}

void kvp_tier_disk_stats(kvp_tier_t *t, kvp_tier_disk_t *out)
{
    pthread_mutex_lock(&t->mu);
    kvp_segs_stats(t->segs, &out->files, &out->file_bytes, &out->live_bytes,
                   &out->segment_write_bytes);
    out->logical_bytes = t->logical;
    tier_unlock(t);
    /* not under dbl: a stats call (the store holds its lock) must not wait out a rebuild */
    out->index_rebuilds = __atomic_load_n(&t->rebuilds, __ATOMIC_RELAXED);
    out->index_lost     = __atomic_load_n(&t->rebuild_lost, __ATOMIC_RELAXED);
    out->wal_dropped    = __atomic_load_n(&t->wal_dropped, __ATOMIC_RELAXED);
    out->free_bytes       = tier_space_free(t);
    out->reserve_bytes    = __atomic_load_n(&t->reserve_file, __ATOMIC_RELAXED);
    out->full_refusals    = __atomic_load_n(&t->full_refusals, __ATOMIC_RELAXED);
    out->reserve_releases = __atomic_load_n(&t->reserve_releases, __ATOMIC_RELAXED);
}

kvp_status_t kvp_tier_session_get(kvp_tier_t *t, uint64_t ns, const char *sid, uint8_t **blob_p,
                                  size_t *len_p)
{
    uint8_t  k[8 + KVP_SID_MAX];
    size_t   kl  = sess_key(ns, sid, k);
    char    *err = NULL;
    size_t   len = 0;
    char    *v;
    uint8_t *blob;

    tier_db_hold(t);
    v = rocksdb_get_cf(t->db, t->ro, t->cf[CF_SESSIONS], (const char *)k, kl, &len, &err);
    tier_db_release(t);
    if (err != NULL) {
        return tier_map_err("get session", &err);
    }
    if (v == NULL) {
        return KVP_ERR_NOT_FOUND;
    }
    blob = kvp_malloc(len, "session blob");
    if (blob == NULL) {
        rocksdb_free(v);
        return KVP_ERR_NO_MEMORY;
    }
    memcpy(blob, v, len);
    rocksdb_free(v);
    *blob_p = blob;
    *len_p  = len;
    return KVP_OK;
}

kvp_status_t kvp_tier_session_scan(kvp_tier_t *t, kvp_tier_session_cb_t cb, void *arg)
{
    rocksdb_iterator_t *it;
    kvp_status_t        status = KVP_OK;
    char                sid[KVP_SID_MAX];

    tier_db_hold(t);
    it = rocksdb_create_iterator_cf(t->db, t->ro, t->cf[CF_SESSIONS]);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t         kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);

        if (kl == CF_MARKER_LEN && memcmp(k, CF_MARKER, kl) == 0) {
            continue;
        }
        if (kl <= 8 || kl - 8 >= KVP_SID_MAX) {
            KVP_LOG_WARN(MOD, "db %s: skipping session key of %zu bytes", t->path, kl);
            continue;
        }
        memcpy(sid, k + 8, kl - 8);
        sid[kl - 8] = 0;
        status = cb(arg, kvp_ld_be64(k), sid, v, vl);
        if (status != KVP_OK) {
            break;
        }
    }
    return tier_iter_end(t, it, status, "scan sessions");
}

kvp_status_t kvp_tier_meta_scan(kvp_tier_t *t, const char *prefix, kvp_tier_meta_cb_t cb,
                                void *arg)
{
    rocksdb_iterator_t *it;
    size_t              plen   = strlen(prefix);
    kvp_status_t        status = KVP_OK;

    tier_db_hold(t);
    it = rocksdb_create_iterator_cf(t->db, t->ro, t->cf[CF_META]);
    for (rocksdb_iter_seek(it, prefix, plen); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t         kl, vl;
        const char    *k = rocksdb_iter_key(it, &kl);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);

        if (kl < plen || memcmp(k, prefix, plen) != 0) {
            break;
        }
        status = cb(arg, k, kl, v, vl);
        if (status != KVP_OK) {
            break;
        }
    }
    return tier_iter_end(t, it, status, "scan meta");
}

kvp_status_t kvp_tier_index_verify(kvp_tier_t *t, bool *rebuilt_p)
{
    bool         damaged = false;
    uint64_t     gen     = tier_db_hold(t);
    kvp_status_t status  = tier_index_check(t, &damaged);

    tier_db_release(t);
    *rebuilt_p = false;
    if (status == KVP_OK && damaged) {
        status     = tier_reopen_rebuild(t, gen, "a block of the index is damaged");
        *rebuilt_p = status == KVP_OK;
    }
    return status;
}

kvp_status_t kvp_tier_reclaim(kvp_tier_t *t)
{
    bool         want;
    uint64_t     gen, need, free_b, t0;
    kvp_status_t status;

    pthread_mutex_lock(&t->mu);
    want       = t->reclaim;
    t->reclaim = false;
    pthread_mutex_unlock(&t->mu);
    if (!want) {
        return KVP_OK;
    }
    gen  = tier_db_hold(t);
    need = index_table_bytes(t) + (1u << 20); /* a compaction's output: at most its input */
    tier_db_release(t);
    if (tier_space_free(t) < need) { /* the reserve file may make up the difference */
        pthread_mutex_lock(&t->mu);
        if (t->reserve_held && tier_space_free(t) + t->reserve >= need) {
            tier_space_release(t);
        }
        tier_unlock(t);
    }
    if ((free_b = tier_space_free(t)) < need) {
        KVP_LOG_WARN(MOD, "db %s: disk full: %llu MiB free, too little to compact the index (%llu "
                     "MiB of tables) for the space of the records deleted since", t->path,
                     (unsigned long long)(free_b >> 20), (unsigned long long)(need >> 20));
        return KVP_ERR_NO_SPACE;
    }
    KVP_LOG_WARN(MOD, "db %s: disk full: compacting the index (%llu MiB of tables) to give back "
                 "the space of the records deleted since", t->path,
                 (unsigned long long)((need - (1u << 20)) >> 20));
    t0     = kvp_time_ns();
    status = kvp_tier_index_compact(t);
    if (status == KVP_OK) {
        KVP_LOG_WARN(MOD, "db %s: index compacted in %.1f s, %llu MiB free now", t->path,
                     (double)(kvp_time_ns() - t0) / 1e9,
                     (unsigned long long)(tier_space_free(t) >> 20));
    }
    if (status == KVP_ERR_NO_SPACE) { /* its flush or output met the full disk: RocksDB stopped */
        status = tier_full_disk(t, gen, true);
    }
    return status;
}

kvp_status_t kvp_tier_index_compact(kvp_tier_t *t)
{
    static const char probe[] = "kvpack.probe";
    char             *err = NULL;
    kvp_status_t      status;

    tier_db_hold(t);
    pthread_mutex_lock(&t->mu); /* CompactRange flushes the memtables first */
    status = tier_memtables_turn(t, false, 0, 1);
    tier_unlock(t);
    if (status != KVP_OK) {
        tier_db_release(t);
        return status;
    }
    for (size_t i = 0; i < t->ncfs; i++) {
        rocksdb_compact_range_cf(t->db, t->cfs[i], NULL, 0, NULL, 0);
    }
    /* CompactRange reports nothing in the C API; a write (unlogged, of nothing) gets the error
     * RocksDB stopped writes for, if it did */
    rocksdb_delete_cf(t->db, t->wo_nowal, t->cf[CF_META], probe, sizeof(probe) - 1, &err);
    tier_db_release(t);
    status = tier_map_err("write after a compaction", &err);
    if (status == KVP_ERR_CORRUPT) {
        KVP_LOG_ERROR(MOD, "db %s: a compaction met a damaged block: RocksDB refuses writes until "
                      "the index is rebuilt (the next commit does it)", t->path);
    }
    return status;
}

void kvp_tier_inject_fail(kvp_tier_t *t, uint32_t n, kvp_status_t status)
{
    pthread_mutex_lock(&t->mu);
    t->fail_n      = n;
    t->fail_status = status;
    tier_unlock(t);
}
