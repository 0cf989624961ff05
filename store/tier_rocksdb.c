/* tier_rocksdb.c - the SSD tier over the RocksDB C API (the only file that sees rocksdb_* types).
 * Opens every existing column family plus `pages`, `sessions`, `meta`; pages are stored
 * uncompressed (2-bit codes do not compress) and read with RocksDB's block checksums off, so the
 * page CRC is what judges them (the store re-parses every page read). RocksDB error strings are
 * logged, freed with rocksdb_free and mapped to kvp_status_t here.
 * Main flow: kvp_tier_open -> batch_put_* -> batch_commit (WAL | SYNC | NOWAL_FLUSH) ->
 * kvp_tier_pages_get (batched MultiGet) / kvp_tier_session_scan (warm restart). */
#include "tier.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <rocksdb/c.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD "store"

enum { CF_DEFAULT = 0, CF_PAGES, CF_SESSIONS, CF_META, CF_NREQ };
static const char *const required_cfs[CF_NREQ] = {"default", "pages", "sessions", "meta"};

struct kvp_tier {
    rocksdb_t                       *db;
    rocksdb_options_t               *db_opts;
    rocksdb_options_t              **cf_opts;    /* one per opened column family */
    rocksdb_block_based_table_options_t *bbt;
    rocksdb_column_family_handle_t **cfs;        /* all opened column families */
    size_t                           ncfs;
    rocksdb_column_family_handle_t  *cf[CF_NREQ];
    rocksdb_writeoptions_t          *wo_wal;
    rocksdb_writeoptions_t          *wo_sync;
    rocksdb_writeoptions_t          *wo_nowal;
    rocksdb_readoptions_t           *ro_pages;   /* no block checksum, no cache fill */
    rocksdb_readoptions_t           *ro;
    rocksdb_flushoptions_t          *fo;
    char                            *path;
    uint32_t                         fail_n;     /* test hook */
    kvp_status_t                     fail_status;
};

struct kvp_tier_batch {
    rocksdb_writebatch_t *wb;
    size_t                bytes;
};

/* ---- private ---- */

static kvp_status_t map_err(const char *what, char **err)
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

static void be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (56 - 8 * i));
    }
}

static uint64_t ld_be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

#define PKEY_BYTES 28
static void page_key(const kvp_tier_pkey_t *pk, uint8_t *k)
{
    be64(k, pk->ns);
    be64(k + 8, pk->key.hi);
    be64(k + 16, pk->key.lo);
    k[24] = (uint8_t)(pk->layer >> 24);
    k[25] = (uint8_t)(pk->layer >> 16);
    k[26] = (uint8_t)(pk->layer >> 8);
    k[27] = (uint8_t)pk->layer;
}

static size_t sess_key(uint64_t ns, const char *sid, uint8_t *k)
{
    size_t n = strlen(sid);

    be64(k, ns);
    memcpy(k + 8, sid, n);
    return 8 + n;
}

static rocksdb_options_t *cf_options(kvp_tier_t *t, const char *name, size_t write_buffer)
{
    rocksdb_options_t *o = rocksdb_options_create();

    rocksdb_options_set_compression(o, rocksdb_no_compression);
    if (strcmp(name, "pages") == 0) {
        rocksdb_options_set_write_buffer_size(o, write_buffer);
        rocksdb_options_set_max_write_buffer_number(o, 2);
        rocksdb_options_set_level0_file_num_compaction_trigger(o, 8);
        rocksdb_options_set_target_file_size_base(o, 64ull << 20);
        rocksdb_options_set_max_bytes_for_level_base(o, 512ull << 20);
        rocksdb_options_set_block_based_table_factory(o, t->bbt);
        /* page bytes go to blob files, written once at flush in key order: compaction moves
         * only keys, and a spilled session's pages sit together in one file */
        rocksdb_options_set_enable_blob_files(o, 1);
        rocksdb_options_set_min_blob_size(o, 1024);
        rocksdb_options_set_blob_file_size(o, 256ull << 20);
        rocksdb_options_set_enable_blob_gc(o, 1);
    } else {
        rocksdb_options_set_write_buffer_size(o, 4u << 20);
    }
    return o;
}

static kvp_status_t meta_check(kvp_tier_t *t, const char *node_id)
{
    char   *err = NULL;
    size_t  len = 0;
    char   *v;
    char    buf[16];

    v = rocksdb_get_cf(t->db, t->ro, t->cf[CF_META], "format_version", 14, &len, &err);
    if (err != NULL) {
        return map_err("get meta", &err);
    }
    if (v == NULL) {
        snprintf(buf, sizeof(buf), "%u", KVP_TIER_FORMAT_VERSION);
        rocksdb_put_cf(t->db, t->wo_sync, t->cf[CF_META], "format_version", 14, buf, strlen(buf),
                       &err);
        if (err == NULL) {
            rocksdb_put_cf(t->db, t->wo_sync, t->cf[CF_META], "node_id", 7, node_id,
                           strlen(node_id), &err);
        }
        return map_err("put meta", &err);
    }
    if (len >= sizeof(buf) || (memcpy(buf, v, len), buf[len] = 0, (unsigned)atoi(buf)) !=
                                   KVP_TIER_FORMAT_VERSION) {
        KVP_LOG_ERROR(MOD, "db %s has format version %.*s, this build reads %u", t->path,
                      (int)(len < 16 ? len : 16), v, KVP_TIER_FORMAT_VERSION);
        rocksdb_free(v);
        return KVP_ERR_UNSUPPORTED;
    }
    rocksdb_free(v);
    v = rocksdb_get_cf(t->db, t->ro, t->cf[CF_META], "node_id", 7, &len, &err);
    if (err != NULL) {
        return map_err("get meta", &err);
    }
    if (v != NULL && (len != strlen(node_id) || memcmp(v, node_id, len) != 0)) {
        KVP_LOG_WARN(MOD, "db %s belongs to node %.*s, opened as %s", t->path, (int)len, v, node_id);
    }
    rocksdb_free(v);
    return KVP_OK;
}

/* ---- API ---- */

kvp_status_t kvp_tier_open(const kvp_tier_params_t *params, kvp_tier_t **tier_p)
{
    kvp_tier_t  *t;
    char        *err      = NULL;
    char       **existing = NULL;
    size_t       nexisting = 0;
    const char **names    = NULL;
    kvp_status_t status;
    size_t       n = 0;

    t = kvp_calloc(1, sizeof(*t), "tier");
    if (t == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    t->path    = kvp_strdup(params->path, "tier path");
    t->db_opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(t->db_opts, 1);
    rocksdb_options_set_create_missing_column_families(t->db_opts, 1);
    rocksdb_options_increase_parallelism(t->db_opts, 2);
    rocksdb_options_set_max_background_jobs(t->db_opts, 2);
    rocksdb_options_set_keep_log_file_num(t->db_opts, 2);
    rocksdb_options_set_max_log_file_size(t->db_opts, 4u << 20);
    rocksdb_options_set_info_log_level(t->db_opts, 2); /* warn */
    rocksdb_options_set_compression(t->db_opts, rocksdb_no_compression);
    rocksdb_options_set_advise_random_on_open(t->db_opts, 0); /* let restores read ahead */
    t->bbt = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_filter_policy(t->bbt, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_no_block_cache(t->bbt, 1);
    rocksdb_block_based_options_set_block_size(t->bbt, 64u << 10);

    existing = rocksdb_list_column_families(t->db_opts, params->path, &nexisting, &err);
    if (err != NULL) { /* a new directory: no CURRENT file yet */
        rocksdb_free(err);
        rocksdb_free(existing); /* 7.8 returns an empty malloc'd array even on error */
        err       = NULL;
        existing  = NULL;
        nexisting = 0;
    }
    names      = kvp_calloc(nexisting + CF_NREQ, sizeof(*names), "tier cf names");
    t->cfs     = kvp_calloc(nexisting + CF_NREQ, sizeof(*t->cfs), "tier cfs");
    t->cf_opts = kvp_calloc(nexisting + CF_NREQ, sizeof(*t->cf_opts), "tier cf opts");
    if (t->path == NULL || names == NULL || t->cfs == NULL || t->cf_opts == NULL) {
        status = KVP_ERR_NO_MEMORY;
        goto err_close;
    }
    for (int r = 0; r < CF_NREQ; r++) {
        names[n++] = required_cfs[r];
    }
    for (size_t i = 0; i < nexisting; i++) {
        bool req = false;

        for (int r = 0; r < CF_NREQ; r++) {
            req = req || strcmp(existing[i], required_cfs[r]) == 0;
        }
        if (!req) {
            KVP_LOG_INFO(MOD, "db %s: opening extra column family %s", params->path, existing[i]);
            names[n++] = existing[i];
        }
    }
    for (size_t i = 0; i < n; i++) {
        t->cf_opts[i] = cf_options(t, names[i], params->write_buffer);
    }
    t->ncfs = n;
    t->db   = rocksdb_open_column_families(t->db_opts, params->path, (int)n, names,
                                           (const rocksdb_options_t *const *)t->cf_opts, t->cfs,
                                           &err);
    if (err != NULL) {
        status = map_err("open", &err);
        t->db  = NULL;
        goto err_close;
    }
    for (int r = 0; r < CF_NREQ; r++) {
        t->cf[r] = t->cfs[r];
    }
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

    status = meta_check(t, params->node_id);
    if (status != KVP_OK) {
        goto err_close;
    }
    if (existing != NULL) {
        rocksdb_list_column_families_destroy(existing, nexisting);
    }
    kvp_free(names);
    *tier_p = t;
    return KVP_OK;

err_close:
    if (existing != NULL) {
        rocksdb_list_column_families_destroy(existing, nexisting);
    }
    kvp_free(names);
    kvp_tier_close(t);
    return status;
}

void kvp_tier_close(kvp_tier_t *t)
{
    if (t == NULL) {
        return;
    }
    if (t->db != NULL) {
        for (size_t i = 0; i < t->ncfs; i++) {
            rocksdb_column_family_handle_destroy(t->cfs[i]);
        }
        rocksdb_close(t->db);
    }
    for (size_t i = 0; t->cf_opts != NULL && i < t->ncfs; i++) {
        rocksdb_options_destroy(t->cf_opts[i]);
    }
    if (t->wo_wal != NULL) {
        rocksdb_writeoptions_destroy(t->wo_wal);
        rocksdb_writeoptions_destroy(t->wo_sync);
        rocksdb_writeoptions_destroy(t->wo_nowal);
        rocksdb_readoptions_destroy(t->ro);
        rocksdb_readoptions_destroy(t->ro_pages);
        rocksdb_flushoptions_destroy(t->fo);
    }
    rocksdb_block_based_options_destroy(t->bbt);
    rocksdb_options_destroy(t->db_opts);
    kvp_free(t->cf_opts);
    kvp_free(t->cfs);
    kvp_free(t->path);
    kvp_free(t);
}

kvp_tier_batch_t *kvp_tier_batch_create(void)
{
    kvp_tier_batch_t *b = kvp_calloc(1, sizeof(*b), "tier batch");

    if (b != NULL) {
        b->wb = rocksdb_writebatch_create();
    }
    return b;
}

void kvp_tier_batch_destroy(kvp_tier_batch_t *b)
{
    if (b != NULL) {
        rocksdb_writebatch_destroy(b->wb);
        kvp_free(b);
    }
}

void kvp_tier_batch_put_page(kvp_tier_t *t, kvp_tier_batch_t *b, const kvp_tier_pkey_t *pk,
                             const void *page, size_t len)
{
    uint8_t k[PKEY_BYTES];

    page_key(pk, k);
    rocksdb_writebatch_put_cf(b->wb, t->cf[CF_PAGES], (const char *)k, sizeof(k), page, len);
    b->bytes += len;
}

void kvp_tier_batch_del_page(kvp_tier_t *t, kvp_tier_batch_t *b, const kvp_tier_pkey_t *pk)
{
    uint8_t k[PKEY_BYTES];

    page_key(pk, k);
    rocksdb_writebatch_delete_cf(b->wb, t->cf[CF_PAGES], (const char *)k, sizeof(k));
}

void kvp_tier_batch_put_session(kvp_tier_t *t, kvp_tier_batch_t *b, uint64_t ns, const char *sid,
                                const void *blob, size_t len)
{
    uint8_t k[8 + KVP_SID_MAX];
    size_t  kl = sess_key(ns, sid, k);

    rocksdb_writebatch_put_cf(b->wb, t->cf[CF_SESSIONS], (const char *)k, kl, blob, len);
    b->bytes += len;
}

void kvp_tier_batch_del_session(kvp_tier_t *t, kvp_tier_batch_t *b, uint64_t ns, const char *sid)
{
    uint8_t k[8 + KVP_SID_MAX];
    size_t  kl = sess_key(ns, sid, k);

    rocksdb_writebatch_delete_cf(b->wb, t->cf[CF_SESSIONS], (const char *)k, kl);
}

size_t kvp_tier_batch_bytes(const kvp_tier_batch_t *b)
{
    return b->bytes;
}

kvp_status_t kvp_tier_batch_commit(kvp_tier_t *t, kvp_tier_batch_t *b, kvp_tier_mode_t mode)
{
    char                         *err = NULL;
    const rocksdb_writeoptions_t *wo;

    if (t->fail_n > 0) {
        t->fail_n--;
        KVP_LOG_ERROR(MOD, "db %s write of %zu bytes failed: %s (injected)", t->path, b->bytes,
                      kvp_status_str(t->fail_status));
        return t->fail_status;
    }
    wo = mode == KVP_TIER_SYNC ? t->wo_sync : (mode == KVP_TIER_WAL ? t->wo_wal : t->wo_nowal);
    rocksdb_write(t->db, wo, b->wb, &err);
    if (err != NULL) {
        return map_err("write", &err);
    }
    if (mode == KVP_TIER_NOWAL_FLUSH) {
        /* pages first: a crash between the two flushes leaves pages without a record (invisible),
         * never a record without its pages */
        rocksdb_flush_cf(t->db, t->fo, t->cf[CF_PAGES], &err);
        if (err == NULL) {
            rocksdb_flush_cf(t->db, t->fo, t->cf[CF_SESSIONS], &err);
        }
        if (err != NULL) {
            return map_err("flush", &err);
        }
    }
    return KVP_OK;
}

kvp_status_t kvp_tier_pages_get(kvp_tier_t *t, size_t n, const kvp_tier_pkey_t *pks,
                                kvp_tier_page_cb_t cb, void *arg)
{
    uint8_t                  *kbuf;
    const char              **keys;
    size_t                   *klens;
    rocksdb_pinnableslice_t **vals;
    char                    **errs;
    kvp_status_t              status = KVP_OK;

    if (n == 0) {
        return KVP_OK;
    }
    kbuf  = kvp_malloc(n * PKEY_BYTES, "tier mget keys");
    keys  = kvp_malloc(n * sizeof(*keys), "tier mget keys");
    klens = kvp_malloc(n * sizeof(*klens), "tier mget keys");
    vals  = kvp_calloc(n, sizeof(*vals), "tier mget vals");
    errs  = kvp_calloc(n, sizeof(*errs), "tier mget errs");
    if (kbuf == NULL || keys == NULL || klens == NULL || vals == NULL || errs == NULL) {
        status = KVP_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        page_key(&pks[i], kbuf + i * PKEY_BYTES);
        keys[i]  = (const char *)kbuf + i * PKEY_BYTES;
        klens[i] = PKEY_BYTES;
    }
    rocksdb_batched_multi_get_cf(t->db, t->ro_pages, t->cf[CF_PAGES], n, keys, klens, vals, errs,
                                 false);
    for (size_t i = 0; i < n; i++) {
        if (errs[i] != NULL) {
            kvp_status_t s = map_err("multiget page", &errs[i]);

            cb(arg, i, s, NULL, 0);
        } else if (vals[i] == NULL) {
            cb(arg, i, KVP_ERR_NOT_FOUND, NULL, 0);
        } else {
            size_t      len;
            const char *v = rocksdb_pinnableslice_value(vals[i], &len);

            cb(arg, i, KVP_OK, v, len);
        }
        if (vals[i] != NULL) {
            rocksdb_pinnableslice_destroy(vals[i]);
        }
    }
out:
    kvp_free(errs);
    kvp_free(vals);
    kvp_free(klens);
    kvp_free(keys);
    kvp_free(kbuf);
    return status;
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

    v = rocksdb_get_cf(t->db, t->ro, t->cf[CF_SESSIONS], (const char *)k, kl, &len, &err);
    if (err != NULL) {
        return map_err("get session", &err);
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
    rocksdb_iterator_t *it  = rocksdb_create_iterator_cf(t->db, t->ro, t->cf[CF_SESSIONS]);
    kvp_status_t        status = KVP_OK;
    char               *err = NULL;
    char                sid[KVP_SID_MAX];

    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t         kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);

        if (kl <= 8 || kl - 8 >= KVP_SID_MAX) {
            KVP_LOG_WARN(MOD, "db %s: skipping session key of %zu bytes", t->path, kl);
            continue;
        }
        memcpy(sid, k + 8, kl - 8);
        sid[kl - 8] = 0;
        status = cb(arg, ld_be64(k), sid, v, vl);
        if (status != KVP_OK) {
            break;
        }
    }
    rocksdb_iter_get_error(it, &err);
    if (err != NULL && status == KVP_OK) {
        status = map_err("scan sessions", &err);
    }
    rocksdb_free(err);
    rocksdb_iter_destroy(it);
    return status;
}

void kvp_tier_inject_fail(kvp_tier_t *t, uint32_t n, kvp_status_t status)
{
    t->fail_n      = n;
    t->fail_status = status;
}
