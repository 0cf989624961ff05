/* compact.c - segment compaction: a segment file keeps its dead bytes (pages deleted or rewritten)
 * until its last live page goes, so a file that is mostly dead is emptied by copying its live
 * pages to the active segment (the tier rewrites their locators, fsync'd, only where they still
 * name the old place) and removed once nothing names it. Runs on a ticker thread every 2 s when
 * compact_dead_ratio > 0, or on request (kvp_store_compact); never holds the store lock over I/O.
 * Main flow: kvp_store_compact -> kvp_tier_compact_victims -> kvp_tier_pages_in_segs ->
 * per run of up to 8 MiB: kvp_tier_pages_read -> kvp_tier_pages_move. */
#include "store_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <inttypes.h>
#include <string.h>

#define MOD          "store"
#define MAX_VICTIMS  4u            /* segments per compaction */
#define RUN_BYTES    (8ull << 20)  /* page bytes read and moved per tier commit */
#define PERIOD_NS    2000000000ull /* background check */

/* a page read back is whole: its CRC and header check, and it names the key it is stored under */
static bool page_ok(const void *page, const kvp_tier_loc_t *l)
{
    kvp_page_info_t info;

    return kvp_page_parse(page, l->len, &info) == KVP_OK && info.layer == l->pk.layer &&
           info.chunk_key.hi == l->pk.key.hi && info.chunk_key.lo == l->pk.key.lo;
}

void kvp_store_read_checked(kvp_store_h st, kvp_tier_loc_t *locs, size_t n, uint8_t *buf,
                            void **dst, uint64_t *unread_p, uint64_t *bad_p)
{
    size_t off = 0;

    for (size_t i = 0; i < n; i++) {
        dst[i] = buf + off;
        off += kvp_tier_span(locs[i].len);
    }
    kvp_tier_pages_read(st->tier, n, locs, dst);
    for (size_t i = 0; i < n; i++) {
        if (locs[i].status != KVP_OK) { /* deleted meanwhile, or unreadable: left where it is */
            dst[i] = NULL;
            *unread_p += 1;
        } else if (!page_ok(dst[i], &locs[i])) {
            dst[i] = NULL;
            *bad_p += kvp_store_disk_copy_bad(st, &locs[i]) != KVP_ERR_STALE;
        }
    }
}

/* Move pages [0, n) of locs (one run, spans fitting buf); a page that failed its check is not
 * copied (kvp_store_read_checked dropped it). */
static kvp_status_t move_run(kvp_store_h st, kvp_tier_loc_t *locs, size_t n, uint8_t *buf,
                             void **dst, kvp_tier_moved_t *moved, uint64_t *unread_p,
                             uint64_t *bad_p)
{
    kvp_store_read_checked(st, locs, n, buf, dst, unread_p, bad_p);
    return kvp_tier_pages_move(st->tier, n, locs, dst, moved);
}

/* One compaction of the victims (st->compact_mu held, store lock not held); stops between runs
 * once *stop is set (the store is closing: what moved is committed, the rest stays). */
static kvp_status_t compact_segs(kvp_store_h st, const uint64_t *ids, size_t nids,
                                 const bool *stop, kvp_tier_moved_t *moved)
{
    kvp_tier_loc_t *locs = NULL;
    size_t          n = 0, big = RUN_BYTES;
    uint8_t        *buf = NULL;
    void          **dst = NULL;
    uint64_t        unread = 0, bad = 0, t0 = kvp_time_ns();
    kvp_status_t    status = kvp_tier_pages_in_segs(st->tier, ids, nids, &locs, &n);

    KVP_LOG_DEBUG(MOD, "compaction: %zu live pages in %zu segments (locator walk %.1f ms)", n,
                  nids, (double)(kvp_time_ns() - t0) / 1e6);
    if (status == KVP_OK) {
        (void)kvp_tier_victims_unnamed(st->tier, ids, nids, locs, n); /* such files go at the
                                                                        * sync after this */
    }
    for (size_t i = 0; status == KVP_OK && i < n; i++) {
        big = kvp_tier_span(locs[i].len) > big ? kvp_tier_span(locs[i].len) : big;
    }
    if (status == KVP_OK && n > 0) {
        buf = kvp_aligned_alloc(4096, big, "compaction buffer");
        dst = kvp_malloc(n * sizeof(*dst), "compaction buffers");
        status = buf != NULL && dst != NULL ? KVP_OK : KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; status == KVP_OK && i < n && !__atomic_load_n(stop, __ATOMIC_RELAXED);) {
        size_t j = i, bytes = 0; /* a run of at most big bytes */

        while (j < n && (j == i || bytes + kvp_tier_span(locs[j].len) <= big)) {
            bytes += kvp_tier_span(locs[j++].len);
        }
        status = move_run(st, locs + i, j - i, buf, dst, moved, &unread, &bad);
        i = j;
    }
    if (bad > 0) {
        KVP_LOG_ERROR(MOD, "compaction: %" PRIu64 " pages failed their check (CRC, header or key) "
                      "and were not moved", bad);
    }
    if (unread > 0) {
        KVP_LOG_WARN(MOD, "compaction: %" PRIu64 " pages could not be read (deleted meanwhile, "
                     "or unreadable): left where they were", unread);
    }
    kvp_tier_locs_clear(locs, n);
    kvp_free(locs);
    kvp_free(dst);
    kvp_free(buf);
    return status;
}

kvp_status_t kvp_store_compact(kvp_store_h st, double dead_ratio)
{
    uint64_t         ids[MAX_VICTIMS];
    size_t           nids, total = 0;
    kvp_tier_moved_t moved = {0, 0, 0, 0, 0};
    kvp_status_t     status = KVP_OK;
    uint64_t         t0 = kvp_time_ns(), before, pages_before;

    if (st == NULL || !(dead_ratio > 0.0 && dead_ratio <= 1.0)) {
        return KVP_ERR_INVALID;
    }
    if (st->tier == NULL) {
        return KVP_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&st->compact_mu);
    /* batches of victims until none is left, or one moved and removed nothing (its pages could
     * not all be moved: it would be picked again; a batch that moved pages counts even when its
     * files went at a WAL sync other than its own, uncounted here) */
    do {
        nids = kvp_tier_compact_victims(st->tier, dead_ratio, ids, MAX_VICTIMS);
        before       = moved.segments;
        pages_before = moved.pages;
        total += nids;
        if (nids > 0) {
            status = compact_segs(st, ids, nids, &st->compactor.stop, &moved);
        }
    } while (status == KVP_OK && nids > 0 &&
             (moved.segments > before || moved.pages > pages_before) &&
             !__atomic_load_n(&st->compactor.stop, __ATOMIC_RELAXED));
    /* files whose last bytes died meanwhile, their deletes not yet synced (every page a move
     * took was deleted: no move synced the WAL), go now rather than at the next tick */
    (void)kvp_tier_sync_if_dead(st->tier);
    pthread_mutex_unlock(&st->compact_mu);
    if (total == 0) {
        return KVP_OK;
    }
    pthread_mutex_lock(&st->lock);
    st->stats.compact_segments += moved.segments;
    st->stats.compact_moved_bytes += moved.bytes;
    st->stats.compact_freed_bytes += moved.freed_bytes;
    st->stats.compact_lock_max_ns = moved.lock_max_ns > st->stats.compact_lock_max_ns
                                        ? moved.lock_max_ns : st->stats.compact_lock_max_ns;
    st->stats.disk_errors += status != KVP_OK;
    pthread_mutex_unlock(&st->lock);
    if (status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "compaction failed: %s (%" PRIu64 " pages moved before; nothing lost, "
                      "the segments stay and a later compaction retries)", kvp_status_str(status),
                      moved.pages);
    } else {
        KVP_LOG_INFO(MOD, "compaction: moved %" PRIu64 " pages (%.1f MiB), removed %" PRIu64
                     " segment files (%.1f MiB) in %.0f ms", moved.pages,
                     (double)moved.bytes / 1048576.0, moved.segments,
                     (double)moved.freed_bytes / 1048576.0, (double)(kvp_time_ns() - t0) / 1e6);
    }
    return status;
}

static void compactor_tick(kvp_store_h st)
{
    pthread_mutex_unlock(&st->lock);
    (void)kvp_tier_sync_if_dead(st->tier); /* deleted pages' files go once their rm is synced
                                            * (also with compaction off) */
    if (st->compact_ratio > 0.0) {
        (void)kvp_store_compact(st, st->compact_ratio);
    }
    (void)kvp_tier_reclaim(st->tier); /* a full disk's deleted index records */
    pthread_mutex_lock(&st->lock);
}

kvp_status_t kvp_store_compactor_start(kvp_store_h st)
{
    return kvp_ticker_start(&st->compactor, st, "segment compactor", PERIOD_NS, false,
                            compactor_tick);
}

void kvp_store_compactor_stop(kvp_store_h st)
{
    kvp_ticker_stop(&st->compactor);
}
