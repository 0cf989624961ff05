/* scrub.c - scrubbing: every page on disk is read back and checked (CRC32C, header, the key it is
 * stored under) at a bounded rate, so a damaged copy is found before a get needs it: written again
 * from the page's DRAM copy when there is one, else dropped as a failed read drops it
 * (crc_failures), its sessions then listed as damaged for kvpack repair to put back from a
 * replica. A ticker thread runs once a second with scrub_bytes_per_s of budget;
 * a cursor walks the segment files in id order (a file's page list is taken once, when the
 * cursor enters it) and starts over after the last one (scrub_passes). kvp_store_scrub runs one
 * whole pass at once (tests, operators). Reads are O_DIRECT runs of up to 8 MiB, the store lock
 * is never held over them. After the last segment file a pass walks the pages kept inline in
 * RocksDB (4 KiB or less: read with its block checksums off, so only their own CRC finds a
 * damaged one) in key order, a run of pages at a time, then reads every block of the RocksDB
 * index with its checksum (kvp_tier_index_verify: a damaged one rebuilds the index) and starts
 * over.
 * Main flow: scrub_tick -> scrub_run (budget) -> kvp_tier_segment_after / kvp_tier_pages_in_segs
 * (then kvp_tier_pages_inline) -> kvp_store_read_checked. */
#include "store_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <inttypes.h>
#include <string.h>

#define MOD       "store"
#define RUN_BYTES (8ull << 20)
#define PERIOD_NS 1000000000ull

typedef struct kvp_scrub_cursor {
    uint64_t        seg;  /* segment being scrubbed; 0: before the first */
    kvp_tier_loc_t *locs; /* its pages, by offset (inline: a run of them, by key) */
    size_t          n, next;
    bool            inl;      /* past the last segment: the inline pages */
    bool            inl_more; /* a key was scanned (inl_key): the next run starts after it */
    kvp_tier_pkey_t inl_key;
    uint8_t        *buf;  /* RUN_BYTES (or the largest page span), 4 KiB-aligned */
    size_t          cap;
    void          **dst;
    size_t          dst_cap;
    bool            index_rebuilt; /* the last pass's index walk rebuilt the index */
} scrub_cursor_t;

static void cursor_drop_list(scrub_cursor_t *c)
{
    kvp_tier_locs_clear(c->locs, c->n);
    kvp_free(c->locs);
    c->locs = NULL;
    c->n = c->next = 0;
}

/* Back to the first segment (a pass ended, or failed). */
static void cursor_restart(scrub_cursor_t *c)
{
    cursor_drop_list(c);
    c->seg      = 0;
    c->inl      = false;
    c->inl_more = false;
}

/* The next list of pages to check: the next segment file's, or past the last one the next run
 * of inline pages (at most run_pages); *passed when none is left (the cursor starts over). */
static kvp_status_t cursor_next_list(kvp_store_h st, scrub_cursor_t *c, size_t run_pages,
                                     bool *passed)
{
    bool         end = false;
    kvp_status_t status;

    cursor_drop_list(c);
    if (!c->inl) {
        c->seg = kvp_tier_segment_after(st->tier, c->seg);
        if (c->seg != 0) {
            return kvp_tier_pages_in_segs(st->tier, &c->seg, 1, &c->locs, &c->n);
        }
        c->inl = true;
    }
    /* the inline pages, from the first or after the last key scanned */
    status = kvp_tier_pages_inline(st->tier, c->inl_more ? &c->inl_key : NULL, run_pages,
                                   &c->locs, &c->n, &c->inl_key, &end);
    if (status != KVP_OK) {
        return status;
    }
    c->inl_more = true;
    if (c->n == 0 && end) {
        cursor_restart(c);
        *passed = true; /* the next call starts over */
        /* last, the index's own blocks (a damaged one rebuilds it, logged by the tier) */
        return kvp_tier_index_verify(st->tier, &c->index_rebuilt);
    }
    return KVP_OK;
}

static void cursor_free(scrub_cursor_t *c)
{
    cursor_drop_list(c);
    kvp_free(c->buf);
    kvp_free(c->dst);
    memset(c, 0, sizeof(*c));
}

/* Room for a run of up to need bytes in pages and n page pointers. */
static kvp_status_t cursor_room(scrub_cursor_t *c, size_t need, size_t n)
{
    if (need > c->cap) {
        kvp_free(c->buf);
        c->buf = kvp_aligned_alloc(4096, need, "scrub buffer");
        c->cap = c->buf != NULL ? need : 0;
    }
    if (n > c->dst_cap) {
        kvp_free(c->dst);
        c->dst     = kvp_malloc(n * sizeof(*c->dst), "scrub buffers");
        c->dst_cap = c->dst != NULL ? n : 0;
    }
    return c->buf != NULL && c->dst != NULL ? KVP_OK : KVP_ERR_NO_MEMORY;
}

/* Check pages from the cursor on until budget bytes are read (0: no limit) or the pass ends
 * (*passed set; the cursor starts over). Adds to *bytes_p and *bad_p. */
static kvp_status_t scrub_run(kvp_store_h st, scrub_cursor_t *c, uint64_t budget, bool *passed,
                              uint64_t *bytes_p, uint64_t *bad_p)
{
    uint64_t     done = 0, unread = 0;
    uint64_t     run = budget != 0 && budget < RUN_BYTES ? budget : RUN_BYTES; /* bytes per read */
    kvp_status_t status = KVP_OK;

    *passed = false;
    while (status == KVP_OK && (budget == 0 || done < budget) && !*passed) {
        size_t j, bytes = 0;

        if (__atomic_load_n(&st->scrub_cancel, __ATOMIC_RELAXED)) {
            status = KVP_ERR_SHUTTING_DOWN; /* the process stops: the pass must not hold it */
            break;
        }

        if (c->next == c->n) { /* on to the next segment file, or run of inline pages */
            status = cursor_next_list(st, c, run / 4096 > 0 ? run / 4096 : 1, passed);
            continue;
        }
        for (j = c->next; j < c->n && (j == c->next || bytes + kvp_tier_span(c->locs[j].len) <=
                                                           run); j++) {
            bytes += kvp_tier_span(c->locs[j].len);
        }
        status = cursor_room(c, bytes > run ? bytes : run, j - c->next);
        if (status == KVP_OK) {
            kvp_store_read_checked(st, c->locs + c->next, j - c->next, c->buf, c->dst, &unread,
                                   bad_p);
            for (size_t i = c->next; i < j; i++) {
                *bytes_p += c->locs[i].status == KVP_OK ? c->locs[i].len : 0;
            }
            done += bytes;
            c->next = j;
        }
    }
    return status;
}

static void scrub_count(kvp_store_h st, uint64_t bytes, uint64_t bad, bool passed)
{
    pthread_mutex_lock(&st->lock);
    st->stats.scrub_bytes += bytes;
    st->stats.scrub_passes += passed;
    pthread_mutex_unlock(&st->lock);
    if (bad > 0) {
        KVP_LOG_ERROR(MOD, "scrub: %" PRIu64 " pages on disk failed their check (written again from "
                      "DRAM where a copy is there, else dropped: their sessions are damaged here "
                      "until kvpack repair copies them back)", bad);
    }
}

kvp_status_t kvp_store_scrub(kvp_store_h st, kvp_store_scrub_t *out)
{
    scrub_cursor_t c;
    uint64_t       bytes = 0, bad = 0;
    bool           passed;
    kvp_status_t   status;

    if (st == NULL) {
        return KVP_ERR_INVALID;
    }
    if (st->tier == NULL) {
        return KVP_ERR_UNSUPPORTED;
    }
    memset(&c, 0, sizeof(c));
    status = scrub_run(st, &c, 0, &passed, &bytes, &bad);
    if (out != NULL) {
        *out = (kvp_store_scrub_t){bytes, bad, c.index_rebuilt ? 1u : 0u};
    }
    cursor_free(&c);
    scrub_count(st, bytes, bad, status == KVP_OK && passed);
    return status;
}

void kvp_store_scrub_cancel(kvp_store_h st)
{
    if (st != NULL) {
        __atomic_store_n(&st->scrub_cancel, true, __ATOMIC_RELAXED);
    }
}

static void scrub_tick(kvp_store_h st)
{
    uint64_t     bytes = 0, bad = 0;
    bool         passed;
    kvp_status_t status;

    pthread_mutex_unlock(&st->lock);
    status = scrub_run(st, st->scrub_cursor, st->scrub_rate, &passed, &bytes, &bad);
    if (status != KVP_OK) {
        if (status != KVP_ERR_SHUTTING_DOWN) {
            KVP_LOG_WARN(MOD, "scrub: %s; it starts over at the next tick", kvp_status_str(status));
        }
        cursor_restart(st->scrub_cursor);
    }
    scrub_count(st, bytes, bad, passed);
    pthread_mutex_lock(&st->lock);
}

kvp_status_t kvp_store_scrubber_start(kvp_store_h st)
{
    st->scrub_cursor = kvp_calloc(1, sizeof(*st->scrub_cursor), "scrub cursor");
    if (st->scrub_cursor == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    return kvp_ticker_start(&st->scrubber, st, "scrubber", PERIOD_NS, false, scrub_tick);
}

void kvp_store_scrubber_stop(kvp_store_h st)
{
    kvp_ticker_stop(&st->scrubber);
    if (st->scrub_cursor != NULL) {
        cursor_free(st->scrub_cursor);
        kvp_free(st->scrub_cursor);
        st->scrub_cursor = NULL;
    }
}
