/* tier_meta.c - the db's own meta records: its format version and the node it belongs to, in the
 * meta column family, checked at every open (after any index rebuild, tier_salvage.c).
 *   key              value
 *   format_version   decimal text, "2" (a "1" db is still read): what every build reads
 *   node_id          the node id's bytes (a mismatch is only logged)
 *   meta_check       12 bytes, the checked copy of both (builds before it wrote none):
 *                      offset size field
 *                         0    4  format version (u32 LE, the number format_version says)
 *                         4    4  crc32c of node_id's value
 *                         8    4  crc32c of bytes [0, 8)
 * Why the copy: an index rebuild copies the records of a damaged block as they are, so one byte
 * gone bad in format_version ("2" -> "3") used to stop every later open as an unsupported
 * format. A copy that reads is believed: a format_version or node_id that differs from it is
 * damaged, logged and written again; a version this build does not read is refused (a newer
 * db's damaged text must not pass for this format). A copy that does not read leaves
 * format_version to decide as before, and is written again when that names a version this
 * build reads. A db last opened by a build before the copy has none: its format_version decides
 * (a damaged one still stops the open: it cannot be told from a newer format), and the copy is
 * written at this open.
 * Main flow: kvp_tier_open -> tier_meta_check. */
#include "tier_int.h"
#include "kvpack/bytes.h"
#include "kvpack/log.h"
#include "kvpack/page.h" /* kvp_crc32c */

#include <stdio.h>
#include <string.h>

#define MOD         TIER_MOD
#define KEY_FORMAT  "format_version"
#define KEY_NODE    "node_id"
#define KEY_CHECK   "meta_check"
#define CHECK_BYTES 12u

typedef struct {
    char  *v; /* rocksdb_malloc'd, NULL when absent */
    size_t len;
} meta_val_t;

static kvp_status_t meta_get(kvp_tier_t *t, const char *key, meta_val_t *out)
{
    char *err = NULL;

    out->len = 0;
    out->v   = rocksdb_get_cf(t->db, t->ro, t->cf[CF_META], key, strlen(key), &out->len, &err);
    return tier_map_err("get meta", &err);
}

static kvp_status_t meta_put(kvp_tier_t *t, const char *key, const void *val, size_t len)
{
    char *err = NULL;

    rocksdb_put_cf(t->db, t->wo_sync, t->cf[CF_META], key, strlen(key), val, len, &err);
    return tier_map_err("put meta", &err);
}

/* The version format_version's text says: 1..9 decimal digits and nothing else (what every build
 * wrote); 0 when it is not that. */
static uint32_t format_parse(const meta_val_t *m)
{
    uint32_t n = 0;

    if (m->v == NULL || m->len == 0 || m->len > 9) {
        return 0;
    }
    for (size_t i = 0; i < m->len; i++) {
        if (m->v[i] < '0' || m->v[i] > '9') {
            return 0;
        }
        n = n * 10 + (uint32_t)(m->v[i] - '0');
    }
    return n;
}

static kvp_status_t format_put(kvp_tier_t *t, uint32_t version)
{
    char buf[16];

    snprintf(buf, sizeof(buf), "%u", version);
    return meta_put(t, KEY_FORMAT, buf, strlen(buf));
}

static kvp_status_t check_put(kvp_tier_t *t, uint32_t version, const void *node, size_t nlen)
{
    uint8_t val[CHECK_BYTES];

    kvp_st32(val, version);
    kvp_st32(val + 4, kvp_crc32c(0, node, nlen));
    kvp_st32(val + 8, kvp_crc32c(0, val, 8));
    return meta_put(t, KEY_CHECK, val, sizeof(val));
}

/* A new db's three records in one synced batch: a stop between them left a format_version
 * without its checked copy. Whatever changes the format later must write format_version and
 * meta_check together the same way, or a build that believes the copy would take the newer db
 * for a damaged text of its own format. */
static kvp_status_t meta_new(kvp_tier_t *t, const char *node_id)
{
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    char                  fv[16], *err = NULL;
    uint8_t               chk[CHECK_BYTES];
    size_t                ol = strlen(node_id);

    snprintf(fv, sizeof(fv), "%u", (unsigned)KVP_TIER_FORMAT_VERSION);
    kvp_st32(chk, KVP_TIER_FORMAT_VERSION);
    kvp_st32(chk + 4, kvp_crc32c(0, node_id, ol));
    kvp_st32(chk + 8, kvp_crc32c(0, chk, 8));
    rocksdb_writebatch_put_cf(b, t->cf[CF_META], KEY_FORMAT, strlen(KEY_FORMAT), fv, strlen(fv));
    rocksdb_writebatch_put_cf(b, t->cf[CF_META], KEY_NODE, strlen(KEY_NODE), node_id, ol);
    rocksdb_writebatch_put_cf(b, t->cf[CF_META], KEY_CHECK, strlen(KEY_CHECK), (char *)chk,
                              sizeof(chk));
    rocksdb_write(t->db, t->wo_sync, b, &err);
    rocksdb_writebatch_destroy(b);
    return tier_map_err("put meta", &err);
}

/* The checked copy, when it is there and reads. */
static bool check_reads(const meta_val_t *c)
{
    return c->v != NULL && c->len == CHECK_BYTES &&
           kvp_ld32((const uint8_t *)c->v + 8) == kvp_crc32c(0, c->v, 8);
}

/* The format version the db is at: the checked copy's when it reads, else format_version's
 * text; KVP_ERR_UNSUPPORTED (logged) when this build does not read it. format_version or the
 * copy found damaged is written again. */
static kvp_status_t format_settle(kvp_tier_t *t, const meta_val_t *fv, const meta_val_t *chk,
                                  const meta_val_t *node, uint32_t *version_p)
{
    bool     checked = check_reads(chk);
    uint32_t text    = format_parse(fv);
    uint32_t version = checked ? kvp_ld32((const uint8_t *)chk->v) : text;
    int      shown   = (int)(fv->len < 16 ? fv->len : 16);

    if ((version < 1 || version > KVP_TIER_FORMAT_VERSION) && checked) {
        KVP_LOG_ERROR(MOD, "db %s has format version %u (its checked copy; format_version "
                      "\"%.*s\"), this build reads %u", t->path, version, shown,
                      fv->v != NULL ? fv->v : "", KVP_TIER_FORMAT_VERSION);
        return KVP_ERR_UNSUPPORTED;
    }
    if (version < 1 || version > KVP_TIER_FORMAT_VERSION) {
        KVP_LOG_ERROR(MOD, "db %s has format version \"%.*s\"%s, this build reads %u", t->path,
                      shown, fv->v != NULL ? fv->v : "", chk->v != NULL
                      ? " and a damaged checked copy" : " and no checked copy",
                      KVP_TIER_FORMAT_VERSION);
        return KVP_ERR_UNSUPPORTED;
    }
    *version_p = version;
    if (checked && text != version) {
        KVP_LOG_ERROR(MOD, "db %s: its format_version \"%.*s\" is damaged (its checked copy says "
                      "%u; a damaged index block copied as it was?): written again", t->path,
                      shown, fv->v != NULL ? fv->v : "", version);
        return format_put(t, version);
    }
    if (checked) {
        return KVP_OK;
    }
    if (chk->v != NULL) {
        KVP_LOG_ERROR(MOD, "db %s: the checked copy of its format version is damaged: written "
                      "again from format_version %u", t->path, version);
    } else {
        KVP_LOG_INFO(MOD, "db %s: adding the checked copy of its format version (%u)", t->path,
                     version);
    }
    return node->v != NULL ? check_put(t, version, node->v, node->len) : KVP_OK;
}

/* node_id against the checked copy (a damaged one is written again when ours is the one the
 * copy names) and against ours (a mismatch is only logged). */
static kvp_status_t node_settle(kvp_tier_t *t, uint32_t version, const meta_val_t *node,
                                const meta_val_t *chk, const char *node_id)
{
    size_t   ol = strlen(node_id);
    uint32_t want;

    if (node->v == NULL) { /* never written (a stop inside the first open), or its key damaged */
        kvp_status_t status = meta_put(t, KEY_NODE, node_id, ol);

        return status == KVP_OK ? check_put(t, version, node_id, ol) : status;
    }
    want = check_reads(chk) ? kvp_ld32((const uint8_t *)chk->v + 4)
                            : kvp_crc32c(0, node->v, node->len); /* written just now from it */
    if (kvp_crc32c(0, node->v, node->len) != want && kvp_crc32c(0, node_id, ol) == want) {
        KVP_LOG_ERROR(MOD, "db %s: its node_id \"%.*s\" is damaged (its checked copy names %s): "
                      "written again", t->path, (int)(node->len < 128 ? node->len : 128),
                      node->v, node_id);
        return meta_put(t, KEY_NODE, node_id, ol);
    }
    if (node->len != ol || memcmp(node->v, node_id, ol) != 0) {
        KVP_LOG_WARN(MOD, "db %s belongs to node %.*s%s, opened as %s", t->path,
                     (int)(node->len < 128 ? node->len : 128), node->v,
                     kvp_crc32c(0, node->v, node->len) != want ? " (a damaged value: it "
                     "differs from its checked copy)" : "", node_id);
    }
    return KVP_OK;
}

kvp_status_t tier_meta_check(kvp_tier_t *t, const char *node_id)
{
    meta_val_t   fv = {0}, node = {0}, chk = {0};
    uint32_t     version = 0;
    kvp_status_t status  = meta_get(t, KEY_FORMAT, &fv);

    status = status == KVP_OK ? meta_get(t, KEY_NODE, &node) : status;
    status = status == KVP_OK ? meta_get(t, KEY_CHECK, &chk) : status;
    if (status == KVP_OK && fv.v == NULL && chk.v == NULL) { /* a new db */
        status = meta_new(t, node_id);
    } else if (status == KVP_OK) {
        status = format_settle(t, &fv, &chk, &node, &version);
        status = status == KVP_OK ? node_settle(t, version, &node, &chk, node_id) : status;
    }
    rocksdb_free(fv.v);
    rocksdb_free(node.v);
    rocksdb_free(chk.v);
    return status;
}
