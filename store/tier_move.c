/* tier_move.c - the SSD tier's walks of the `pages` column family and compaction's moves (with
 * tier_rocksdb.c, whose helpers it shares through tier_int.h): the open-time sweep of pages no
 * session holds (kvp_tier_pages_sweep), the scrubber's batches of inline pages
 * (kvp_tier_pages_inline), and compaction: the segments worth compacting
 * (kvp_tier_compact_victims), the pages they hold (kvp_tier_pages_in_segs; a victim holding none
 * whose bytes still count live is counted dead, kvp_tier_victims_unnamed), and the move of those
 * still current into the active segment (kvp_tier_pages_move, in three short holds of the tier
 * lock). Every walk holds the db shared, as every tier operation does.
 * Main flow: kvp_tier_compact_victims -> kvp_tier_pages_in_segs -> (the store reads and checks
 * them, kvp_tier_pages_read) -> kvp_tier_pages_move. */
#include "tier_int.h"
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/log.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MOD TIER_MOD

/* the key of a pages-CF entry back into its parts */
static void page_key_decode(const uint8_t *k, kvp_tier_pkey_t *pk)
{
    pk->ns     = kvp_ld_be64(k);
    pk->key.hi = kvp_ld_be64(k + 8);
    pk->key.lo = kvp_ld_be64(k + 16);
    pk->layer  = kvp_ld_be32(k + 24);
}

/* The walk reads without RocksDB's block checksums (ro_pages), as page reads do: a byte gone bad
 * in an SST holding inline pages is the page CRC's to find (a get, the scrub), and must not stop
 * the node from opening with every other session. */
kvp_status_t kvp_tier_pages_sweep(kvp_tier_t *t, kvp_tier_keep_cb_t keep, void *arg,
                                  uint64_t *dropped_p)
{
    rocksdb_iterator_t   *it;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    kvp_status_t          status;
    char                 *err = NULL;
    uint64_t              dropped = 0, lost = 0;

    tier_db_hold(t);
    it = rocksdb_create_iterator_cf(t->db, t->ro_pages, t->cf[CF_PAGES]);
    pthread_mutex_lock(&t->mu);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t          kl, vl;
        const uint8_t  *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const char     *v;
        kvp_tier_pkey_t pk;
        uint64_t        seg, off;
        uint32_t        len;

        if (kl != PKEY_BYTES) {
            continue;
        }
        page_key_decode(k, &pk);
        v = rocksdb_iter_value(it, &vl);
        if (tier_loc_decode(v, vl, &seg, &off, &len) && !kvp_segs_holds(t->segs, seg, off, len)) {
            /* its bytes are not on disk (segment file lost or cut short): the locator goes
             * before a new segment can take that id, and a session naming the page is not
             * resumable (not kept: the store finds it missing) */
            rocksdb_writebatch_delete_cf(wb, t->cf[CF_PAGES], (const char *)k, kl);
            lost++;
            continue;
        }
        if (!keep(arg, &pk)) {
            rocksdb_writebatch_delete_cf(wb, t->cf[CF_PAGES], (const char *)k, kl);
            dropped++;
            continue;
        }
        if (tier_loc_decode(v, vl, &seg, &off, &len)) {
            kvp_segs_live_add(t->segs, seg, (int64_t)kvp_seg_span(len));
        }
    }
    rocksdb_iter_get_error(it, &err);
    status = tier_map_err("sweep pages", &err);
    if (status == KVP_OK && lost > 0) {
        KVP_LOG_ERROR(MOD, "%llu pages on disk name segment bytes that are not there (a segment "
                      "file missing or cut short): dropped", (unsigned long long)lost);
    }
    if (status == KVP_OK && dropped + lost > 0) {
        rocksdb_write(t->db, t->wo_sync, wb, &err);
        status = tier_map_err("sweep write", &err);
    }
    if (status == KVP_OK) { /* only a complete walk may unlink segments */
        kvp_segs_reap(t->segs);
    }
    tier_unlock(t);
    rocksdb_writebatch_destroy(wb);
    rocksdb_iter_destroy(it);
    tier_db_release(t);
    *dropped_p = dropped;
    return status;
}

uint64_t kvp_tier_segment_after(kvp_tier_t *t, uint64_t after)
{
    uint64_t id;

    pthread_mutex_lock(&t->mu);
    id = kvp_segs_next(t->segs, after);
    tier_unlock(t);
    return id;
}

size_t kvp_tier_compact_victims(kvp_tier_t *t, double dead_ratio, uint64_t *ids, size_t max)
{
    size_t n;

    pthread_mutex_lock(&t->mu);
    n = kvp_segs_victims(t->segs, dead_ratio, ids, max);
    tier_unlock(t);
    return n;
}

static int cmp_loc(const void *a, const void *b)
{
    const kvp_tier_loc_t *x = a, *y = b;

    if (x->seg != y->seg) {
        return x->seg < y->seg ? -1 : 1;
    }
    return x->off < y->off ? -1 : x->off > y->off;
}

kvp_status_t kvp_tier_pages_inline(kvp_tier_t *t, const kvp_tier_pkey_t *after, size_t max_pages,
                                   kvp_tier_loc_t **locs_p, size_t *n_p, kvp_tier_pkey_t *last_p,
                                   bool *end_p)
{
    rocksdb_iterator_t *it;
    kvp_tier_loc_t     *locs  = NULL;
    size_t              n     = 0, cap = 0;
    uint64_t            moves = __atomic_load_n(&t->moves, __ATOMIC_ACQUIRE);
    uint8_t             from[PKEY_BYTES];
    kvp_status_t        status = KVP_OK;

    tier_db_hold(t);
    it = rocksdb_create_iterator_cf(t->db, t->ro_pages, t->cf[CF_PAGES]);
    if (after != NULL) {
        tier_page_key(after, from);
        rocksdb_iter_seek(it, (const char *)from, PKEY_BYTES);
    } else {
        rocksdb_iter_seek_to_first(it);
    }
    *end_p = false;
    for (; rocksdb_iter_valid(it) && status == KVP_OK && (max_pages == 0 || n < max_pages);
         rocksdb_iter_next(it)) {
        size_t          kl, vl;
        const uint8_t  *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const char     *v = rocksdb_iter_value(it, &vl);
        uint64_t        seg, off;
        uint32_t        len;
        kvp_tier_loc_t *g;

        if (kl != PKEY_BYTES || (after != NULL && memcmp(k, from, PKEY_BYTES) == 0)) {
            continue;
        }
        page_key_decode(k, last_p);
        if (tier_loc_decode(v, vl, &seg, &off, &len) || vl > UINT32_MAX) {
            continue; /* in a segment file: the segment walk checks it */
        }
        g = kvp_array_room(locs, &cap, n, sizeof(*g), 64, "scrub inline pages");
        if (g == NULL) {
            status = KVP_ERR_NO_MEMORY;
            break;
        }
        locs    = g;
        locs[n] = (kvp_tier_loc_t){.status = KVP_OK, .len = (uint32_t)vl, .pk = *last_p,
                                   .moves = moves, .inline_buf = kvp_malloc(vl ? vl : 1,
                                                                            "tier inline page")};
        if (locs[n].inline_buf == NULL) {
            status = KVP_ERR_NO_MEMORY;
            break;
        }
        memcpy(locs[n].inline_buf, v, vl);
        n++;
    }
    *end_p = status == KVP_OK && !rocksdb_iter_valid(it);
    status = tier_iter_end(t, it, status, "scan pages for scrubbing");
    if (status != KVP_OK) {
        kvp_tier_locs_clear(locs, n);
        kvp_free(locs);
        return status;
    }
    *locs_p = locs;
    *n_p    = n;
    return KVP_OK;
}

kvp_status_t kvp_tier_pages_in_segs(kvp_tier_t *t, const uint64_t *ids, size_t nids,
                                    kvp_tier_loc_t **locs_p, size_t *n_p)
{
    rocksdb_iterator_t *it;
    kvp_tier_loc_t     *locs  = NULL;
    size_t              n     = 0, cap = 0;
    uint64_t            moves = __atomic_load_n(&t->moves, __ATOMIC_ACQUIRE);
    kvp_status_t        status;

    tier_db_hold(t);
    it = rocksdb_create_iterator_cf(t->db, t->ro_pages, t->cf[CF_PAGES]);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t          kl, vl;
        const uint8_t  *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const char     *v = rocksdb_iter_value(it, &vl);
        uint64_t        seg, off;
        uint32_t        len;
        size_t          j = 0;
        kvp_tier_loc_t *g;

        if (kl != PKEY_BYTES || !tier_loc_decode(v, vl, &seg, &off, &len)) {
            continue;
        }
        while (j < nids && ids[j] != seg) {
            j++;
        }
        if (j == nids) {
            continue;
        }
        g = kvp_array_room(locs, &cap, n, sizeof(*g), 256, "compaction pages");
        if (g == NULL) {
            kvp_free(locs);
            return tier_iter_end(t, it, KVP_ERR_NO_MEMORY, "scan pages for compaction");
        }
        locs    = g;
        locs[n] = (kvp_tier_loc_t){.status = KVP_OK, .len = len, .seg = seg, .off = off,
                                   .moves = moves};
        page_key_decode(k, &locs[n].pk);
        n++;
    }
    status = tier_iter_end(t, it, KVP_OK, "scan pages for compaction");
    if (status != KVP_OK) {
        kvp_free(locs);
        return status;
    }
    if (n > 1) {
        qsort(locs, n, sizeof(*locs), cmp_loc);
    }
    *locs_p = locs;
    *n_p    = n;
    return KVP_OK;
}

size_t kvp_tier_victims_unnamed(kvp_tier_t *t, const uint64_t *ids, size_t nids,
                                const kvp_tier_loc_t *locs, size_t n)
{
    size_t   fixed = 0;
    uint64_t named = 0; /* bit j: a page names ids[j] (ids past 64 are left as they are) */

    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < nids && j < 64; j++) {
            named |= (uint64_t)(locs[i].seg == ids[j]) << j;
        }
    }
    for (size_t j = 0; j < nids && j < 64; j++) {
        int64_t bytes = 0;

        if (named & (1ull << j)) {
            continue;
        }
        pthread_mutex_lock(&t->mu);
        bytes = kvp_segs_unnamed_dead(t->segs, ids[j]);
        tier_unlock(t);
        if (bytes > 0) {
            KVP_LOG_WARN(MOD, "db %s: segment %016" PRIx64 ": %" PRId64 " bytes counted live but "
                         "no page names them (an earlier commit short of memory); counted dead, "
                         "the file goes", t->path, ids[j], bytes);
            fixed++;
        }
    }
    return fixed;
}

/* which[j] for j < m: the pages (of from) whose locator still names where they were read from
 * (t->mu held); the others are dropped from the list, and from ext[] alongside it when not NULL.
 * Returns false on no memory. */
static bool still_current(kvp_tier_t *t, const kvp_tier_loc_t *from, size_t *which, size_t *m,
                          kvp_seg_ext_t *ext, const kvp_tier_pkey_t **pks, tier_cur_loc_t *cur)
{
    size_t keep = 0;

    for (size_t j = 0; j < *m; j++) {
        pks[j] = &from[which[j]].pk;
    }
    if (!tier_cur_locs(t, *m, pks, cur)) {
        return false;
    }
    for (size_t j = 0; j < *m; j++) {
        const kvp_tier_loc_t *f = &from[which[j]];

        if (cur[j].found && cur[j].seg == f->seg && cur[j].off == f->off && cur[j].len == f->len) {
            if (ext != NULL) {
                ext[keep] = ext[j];
            }
            which[keep++] = which[j];
        }
    }
    *m = keep;
    return true;
}

/* A move in three short holds of t->mu, its fsyncs outside them: (1) the pages still where they
 * were read from are appended to the active segment, (2) after their fdatasync, the locators of
 * those still current are written (WAL, no fsync; a copy whose page went meanwhile is dead bytes),
 * (3) after the WAL fsync the old places die and emptied segments go. A crash before (3) leaves
 * the old file, so whichever locator the WAL kept names durable bytes. */
/* A compaction move's lock hold that started at t0: its length, kept as the maximum in moved. */
static uint64_t lock_hold(kvp_tier_moved_t *moved, uint64_t t0)
{
    uint64_t ns = kvp_time_ns() - t0;

    moved->lock_max_ns = ns > moved->lock_max_ns ? ns : moved->lock_max_ns;
    return ns;
}

kvp_status_t kvp_tier_pages_move(kvp_tier_t *t, size_t n, const kvp_tier_loc_t *from,
                                 void *const *bytes, kvp_tier_moved_t *moved)
{
    kvp_seg_ext_t        *ext   = kvp_malloc((n ? n : 1) * sizeof(*ext), "compaction extents");
    size_t               *which = kvp_malloc((n ? n : 1) * sizeof(*which), "compaction extents");
    const kvp_tier_pkey_t **pks = kvp_malloc((n ? n : 1) * sizeof(*pks), "compaction keys");
    tier_cur_loc_t       *cur   = kvp_malloc((n ? n : 1) * sizeof(*cur), "compaction locators");
    rocksdb_writebatch_t *wb    = rocksdb_writebatch_create();
    kvp_status_t          status = KVP_OK;
    size_t                m      = 0, total = 0;
    char                 *err    = NULL;
    uint64_t              held = 0, t0;
    kvp_seg_resv_t        resv;
    kvp_status_t          end;
    uint64_t              gen = tier_db_hold(t);

    if (ext == NULL || which == NULL || pks == NULL || cur == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to move %zu pages", n);
        status = KVP_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        total += bytes[i] != NULL ? from[i].len : 0;
        if (bytes[i] != NULL && from[i].seg != 0) {
            which[m++] = i;
        }
    }
    /* (1) append */
    pthread_mutex_lock(&t->mu);
    t0 = kvp_time_ns();
    if (tier_inject_take(t, "compaction write", total, &status)) {
        goto out; /* unlocked by tier_inject_take */
    }
    if (!still_current(t, from, which, &m, NULL, pks, cur)) {
        status = KVP_ERR_NO_MEMORY;
    }
    for (size_t j = 0; j < m && status == KVP_OK; j++) {
        ext[j] = (kvp_seg_ext_t){bytes[which[j]], from[which[j]].len, 0, 0, KVP_OK};
    }
    if (m > 0 && status == KVP_OK) { /* placed here, written and synced without the lock */
        status = kvp_segs_reserve(t->segs, ext, m, &resv);
    }
    held += lock_hold(moved, t0);
    tier_unlock(t);
    if (m == 0 || status != KVP_OK) {
        goto out;
    }
    /* the copies durable before any locator names them */
    status = kvp_segs_resv_write(&resv, ext, m, true);
    if (status == KVP_OK) {
        tier_hook_run(t, KVP_TIER_HOOK_MOVE);
    }
    /* (2) the locators of the pages still current */
    pthread_mutex_lock(&t->mu);
    t0  = kvp_time_ns();
    end = kvp_segs_resv_end(t->segs, &resv, status == KVP_OK, true);
    status = status != KVP_OK ? status : end;
    if (status != KVP_OK) {
        tier_unlock(t);
        goto out;
    }
    if (!still_current(t, from, which, &m, ext, pks, cur)) { /* ext[j] stays with which[j] */
        status = KVP_ERR_NO_MEMORY;
    }
    for (size_t j = 0; j < m && status == KVP_OK; j++) {
        uint8_t k[PKEY_BYTES], v[LOC_BYTES];

        tier_page_key(&from[which[j]].pk, k);
        tier_loc_encode(ext[j].seg, ext[j].off, ext[j].len, v);
        rocksdb_writebatch_put_cf(wb, t->cf[CF_PAGES], (const char *)k, sizeof(k), (const char *)v,
                                  sizeof(v));
    }
    if (m > 0 && status == KVP_OK) {
        rocksdb_write(t->db, t->wo_wal, wb, &err);
        status = tier_map_err("compaction write", &err);
        /* the locators are written: the new places live now, the old ones die with the WAL's
         * next fsync (step 3's, or any later one: whatever fails below, neither the new file is
         * left uncounted, to be unlinked under them, nor the old ones counted live forever) */
        for (size_t j = 0; j < m && status == KVP_OK; j++) {
            kvp_segs_live_add(t->segs, ext[j].seg, (int64_t)kvp_seg_span(ext[j].len));
            tier_dead_defer(t, from[which[j]].seg, from[which[j]].len);
            moved->bytes += ext[j].len;
        }
        if (status == KVP_OK) { /* these copies are synced; earlier commits' bytes may not be */
            status = tier_memtables_turn(t, false, 1, 1);
        }
    }
    /* when no copy got named (every page went meanwhile, or the write failed) and the file they
     * were written to is no longer the active one, nothing names that file: it goes now, not at
     * the next open (a compaction would find no page in it to move) */
    (void)kvp_segs_live_add(t->segs, resv.seg, 0);
    held += lock_hold(moved, t0);
    tier_unlock(t);
    if (m == 0 || status != KVP_OK) {
        goto out;
    }
    /* (3) the new locators durable before an old file can go, and the bytes every locator the
     * WAL sync makes durable names before them (other commits' writes to the active file since
     * its last sync); then the old places die (a failed sync leaves them waiting for the next
     * WAL fsync: tier_dead_defer) */
    pthread_mutex_lock(&t->mu);
    t0     = kvp_time_ns();
    status = kvp_segs_sync(t->segs);
    if (status == KVP_OK) {
        rocksdb_flush_wal(t->db, 1, &err);
        status = tier_map_err("compaction wal sync", &err);
    }
    if (status == KVP_OK) {
        /* a reader that located a page before this and finds its segment gone locates again */
        __atomic_store_n(&t->moves, t->moves + 1, __ATOMIC_RELEASE);
        /* these moves' old places (and any other commit's waiting for a WAL fsync) die now */
        tier_wal_synced(t, &moved->segments, &moved->freed_bytes);
        moved->pages += m;
    }
    held += lock_hold(moved, t0);
    tier_unlock(t);
    KVP_LOG_DEBUG(MOD, "compaction move of %zu pages: tier lock held %.1f ms", m,
                  (double)held / 1e6);
out:
    tier_db_release(t);
    rocksdb_writebatch_destroy(wb);
    kvp_free(cur);
    kvp_free(pks);
    kvp_free(which);
    kvp_free(ext);
    if (status == KVP_ERR_CORRUPT) { /* a later compaction moves them again */
        kvp_status_t rebuilt = tier_reopen_rebuild(t, gen, "writes stopped by a damaged block");

        status = rebuilt != KVP_OK ? rebuilt : status;
    } else if (status == KVP_ERR_NO_SPACE) { /* room for the next try (and for deletes) */
        (void)tier_full_disk(t, gen, false);
    }
    return status;
}
