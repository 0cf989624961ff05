/* tier.h - the SSD tier as the store sees it: column families `pages` (ns | chunk key | layer ->
 * page bytes), `sessions` (ns | sid -> packed session record) and `meta` (format version, node id).
 * Implemented over the RocksDB C API in tier_rocksdb.c, the only file that sees rocksdb_* types.
 * Errors are logged where they are detected and mapped to kvp_status_t (Corruption ->
 * KVP_ERR_CORRUPT, NoSpace -> KVP_ERR_NO_SPACE, IOError -> KVP_ERR_IO). Not thread-safe: the
 * store calls it under its lock. */
#ifndef KVPACK_STORE_TIER_H
#define KVPACK_STORE_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpack/page.h"
#include "kvpack/status.h"

typedef struct kvp_tier       kvp_tier_t;
typedef struct kvp_tier_batch kvp_tier_batch_t;

#define KVP_TIER_FORMAT_VERSION 1u

typedef struct {
    const char *path;          /* directory, created if missing */
    const char *node_id;       /* written to meta on first open; a mismatch is logged */
    size_t      write_buffer;  /* memtable bytes per column family */
} kvp_tier_params_t;

typedef enum {
    KVP_TIER_WAL       = 0, /* WAL on, no fsync: survives a process crash */
    KVP_TIER_SYNC      = 1, /* WAL on and fsync'd before commit returns */
    KVP_TIER_NOWAL_FLUSH = 2 /* no WAL; the pages, then the sessions memtables are flushed to
                              * fsync'd SST files before commit returns (each byte written once) */
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
void kvp_tier_batch_put_page(kvp_tier_t *tier, kvp_tier_batch_t *batch, const kvp_tier_pkey_t *pk,
                             const void *page, size_t len);
void kvp_tier_batch_del_page(kvp_tier_t *tier, kvp_tier_batch_t *batch, const kvp_tier_pkey_t *pk);
void kvp_tier_batch_put_session(kvp_tier_t *tier, kvp_tier_batch_t *batch, uint64_t ns,
                                const char *sid, const void *blob, size_t len);
void kvp_tier_batch_del_session(kvp_tier_t *tier, kvp_tier_batch_t *batch, uint64_t ns,
                                const char *sid);
size_t       kvp_tier_batch_bytes(const kvp_tier_batch_t *batch);
/* Atomic: every operation of the batch becomes visible, or none. */
kvp_status_t kvp_tier_batch_commit(kvp_tier_t *tier, kvp_tier_batch_t *batch, kvp_tier_mode_t mode);

/* Read n pages. cb gets each result (status KVP_OK with the bytes, borrowed for the call;
 * KVP_ERR_NOT_FOUND; or an error). Returns the first error that is not per key. */
typedef void (*kvp_tier_page_cb_t)(void *arg, size_t i, kvp_status_t status, const void *data,
                                   size_t len);
kvp_status_t kvp_tier_pages_get(kvp_tier_t *tier, size_t n, const kvp_tier_pkey_t *pks,
                                kvp_tier_page_cb_t cb, void *arg);

/* Session record: *blob_p is kvp_malloc'd (kvp_free). */
kvp_status_t kvp_tier_session_get(kvp_tier_t *tier, uint64_t ns, const char *sid, uint8_t **blob_p,
                                  size_t *len_p);
/* Walk the sessions column family in key order. cb returns non-OK to stop (that status is returned). */
typedef kvp_status_t (*kvp_tier_session_cb_t)(void *arg, uint64_t ns, const char *sid,
                                              const uint8_t *blob, size_t len);
kvp_status_t kvp_tier_session_scan(kvp_tier_t *tier, kvp_tier_session_cb_t cb, void *arg);

/* Test hook: the next n commits fail with status (KVP_ERR_NO_SPACE or KVP_ERR_IO) without writing. */
void kvp_tier_inject_fail(kvp_tier_t *tier, uint32_t n, kvp_status_t status);

#endif
