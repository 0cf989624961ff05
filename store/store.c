/* store.c - the node store API (kvpack/store.h): open/close with warm restart, page put/get and
 * references, session put/get/spill/delete, prefix lookup, stats. One mutex guards the state.
 * Page entries live while a session names them, a reader pins them, or they hold bytes (DRAM or
 * disk); the page-state helpers at the top keep the idle list and counters consistent.
 * Spills, restores and page loads drop the mutex for their disk I/O (the session is busy, its
 * pages pinned), so DRAM hits of other sessions are not stalled by them.
 * Main flow: kvp_store_page_put -> pool -> index; kvp_store_session_put -> record (+ WriteBatch
 * under write-through/sync) -> evict.c when past the high watermark -> spiller.c. */
#include "store_int.h"
#include "seg.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define MOD "store"

#define DEFAULT_BUDGET (1ull << 30)
#define DEFAULT_TOMB_TTL_S (7u * 24u * 3600u)
#define DEFAULT_SPILL_GROUP 64u
#define DEFAULT_PUT_GRACE_MS 60000u /* kvp_store_params_t.put_grace_ms */
#define DEFAULT_SYNC_INTERVAL_MS 100u  /* KVP_DURABILITY_INTERVAL */
#define MAX_SYNC_INTERVAL_MS     60000u
#define DEFAULT_COMPACT_RATIO    0.5
#define DEFAULT_SEGMENT_BYTES    (256ull << 20)
#define MIN_SEGMENT_BYTES        (64ull << 10)
#define MAX_SEGMENT_BYTES        (16ull << 30)

/* ---- page state ---- */

/* A client put p: one more put for a record to match (kvp_store_page_garbage). */
static void page_put_counted(kvp_page_t *p)
{
    p->put_pending += p->put_pending < UINT16_MAX;
    p->put_ns = kvp_time_ns();
}

static void page_idle_update(kvp_store_h st, kvp_page_t *p)
{
    bool want = p->slot.ptr != NULL && p->pins == 0;

    if (want && !kvp_list_linked(&p->idle)) {
        kvp_list_push_tail(&st->idle_pages, &p->idle);
    } else if (!want && kvp_list_linked(&p->idle)) {
        kvp_list_del(&p->idle);
    }
}

static kvp_page_t *page_new(kvp_store_h st, uint64_t ns, kvp_key128_t key, uint32_t layer)
{
    kvp_page_t *p = kvp_calloc(1, sizeof(*p), "page entry");

    if (p == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for a page entry");
        return NULL;
    }
    p->store = st;
    p->ns    = ns;
    p->key   = key;
    p->layer = layer;
    kvp_index_page_insert(&st->pages, p);
    return p;
}

void kvp_store_page_drop_dram(kvp_store_h st, kvp_page_t *p)
{
    if (p->slot.ptr != NULL) {
        kvp_pool_free(&st->pool, &p->slot);
        p->slot.ptr = NULL;
        st->stats.dram_pages--;
    }
    page_idle_update(st, p);
}

/* Free the entry if nothing needs it any more: no pin, no session, no bytes anywhere. */
static void page_maybe_free(kvp_store_h st, kvp_page_t *p)
{
    if (p->pins == 0 && p->nsess == 0 && p->slot.ptr == NULL && !p->on_disk) {
        if (p->indexed) {
            kvp_index_page_remove(&st->pages, p);
        }
        if (kvp_list_linked(&p->unnamed)) {
            kvp_list_del(&p->unnamed);
        }
        kvp_free(p);
    }
}

/* Drop a page everywhere in memory (its disk copy, if any, was deleted by the caller). */
void kvp_store_page_forget(kvp_store_h st, kvp_page_t *p)
{
    p->on_disk = false;
    if (p->pins == 0) {
        kvp_store_page_drop_dram(st, p);
    }
    page_maybe_free(st, p);
}

void kvp_store_page_pin(kvp_store_h st, kvp_page_t *p)
{
    p->pins++;
    page_idle_update(st, p);
}

void kvp_store_page_unpin(kvp_store_h st, kvp_page_t *p)
{
    p->pins--;
    if (p->pins == 0 && p->slot.ptr != NULL && p->on_disk && p->nsess > 0) {
        /* a cold session's page: its copy on disk is the one to keep */
        kvp_store_page_drop_dram(st, p);
    } else if (p->pins == 0 && !p->on_disk && kvp_store_page_garbage(st, p, kvp_time_ns())) {
        kvp_store_page_drop_dram(st, p); /* nobody can name it again: not a loose page to keep */
    }
    page_idle_update(st, p);
    page_maybe_free(st, p);
}

static bool page_present(const kvp_page_t *p)
{
    return p->slot.ptr != NULL || p->on_disk;
}

/* A pool slot for a page of len bytes, evicting if needed. Slots of pages over 4 KiB are 4 KiB
 * aligned with kvp_tier_span(len) bytes, so the tier reads and writes them with O_DIRECT. */
static kvp_status_t page_slot_alloc(kvp_store_h st, size_t len, const kvp_sess_t *keep,
                                    kvp_pool_slot_t *slot)
{
    kvp_status_t status = kvp_pool_alloc(&st->pool, len, slot);

    if (status == KVP_ERR_NO_SPACE) {
        status = kvp_store_make_room(st, kvp_pool_slot_size(len), keep);
        if (status == KVP_OK) {
            status = kvp_pool_alloc(&st->pool, len, slot);
        }
        if (status == KVP_ERR_NO_SPACE) {
            KVP_LOG_ERROR(MOD, "dram budget %zu bytes exhausted (%zu in use, nothing evictable) "
                          "for a %zu-byte page", st->pool.budget, st->pool.used, len);
        }
    }
    if (status != KVP_OK) {
        slot->ptr = NULL;
    }
    return status;
}

/* Install bytes already in slot as the page's DRAM copy. */
static void page_install(kvp_store_h st, kvp_page_t *p, const kvp_pool_slot_t *slot, size_t len)
{
    size_t cap = kvp_pool_slot_size(len);

    if (cap > len) { /* the padding a segment write carries: zeros, not stale bytes */
        memset((uint8_t *)slot->ptr + len, 0, cap - len);
    }
    p->slot = *slot;
    p->len  = (uint32_t)len;
    st->stats.dram_pages++;
    page_idle_update(st, p);
}

/* Copy validated page bytes into a pool slot, evicting if needed. */
static kvp_status_t page_fill(kvp_store_h st, kvp_page_t *p, const void *data, size_t len,
                              const kvp_sess_t *keep)
{
    kvp_pool_slot_t slot;
    kvp_status_t    status = page_slot_alloc(st, len, keep, &slot);

    if (status != KVP_OK) {
        p->slot.ptr = NULL;
        return status;
    }
    memcpy(slot.ptr, data, len);
    page_install(st, p, &slot, len);
    return KVP_OK;
}

/* A page whose disk copy failed its check or is missing: dropped on disk and in memory. */
static void page_drop_bad(kvp_store_h st, kvp_page_t *p, kvp_status_t why)
{
    kvp_tier_batch_t *b  = kvp_tier_batch_create();
    kvp_tier_pkey_t   pk = {p->ns, p->key, p->layer};

    if (why == KVP_ERR_CORRUPT) {
        st->stats.crc_failures++;
    }
    if (b != NULL) {
        kvp_tier_batch_del_page(st->tier, b, &pk);
        if (kvp_store_commit(st, b, KVP_TIER_WAL) != KVP_OK) {
            st->stats.disk_errors++;
        }
        kvp_tier_batch_destroy(b);
    }
    p->on_disk = false;
}

/* Whether the copy read (a locator taken before the read) is still the page's current one: its
 * segment extent, or for an inline page its bytes. A copy the key no longer names (the page was
 * dropped and put again since) is nobody's: judging the page by it would drop a good copy. On
 * no memory or a failed look-up: true (the copy is judged, as before); likewise when the key's
 * entry is the same damaged value (no locator, too short for a page) the copy was read from. */
static bool disk_copy_current(kvp_store_h st, const kvp_tier_loc_t *read)
{
    kvp_tier_loc_t now;
    bool           same;

    if (kvp_tier_pages_locate(st->tier, 1, &read->pk, &now) != KVP_OK) {
        return true;
    }
    if (now.status == KVP_ERR_CORRUPT && read->seg == 0 && now.len == read->len) {
        return true; /* the key still holds the damaged entry read as an inline page: this copy */
    }
    same = now.status == KVP_OK && now.len == read->len &&
           (read->seg != 0 ? now.seg == read->seg && now.off == read->off
                           : now.seg == 0 && now.inline_buf != NULL && read->inline_buf != NULL &&
                                 memcmp(now.inline_buf, read->inline_buf, read->len) == 0);
    kvp_tier_locs_clear(&now, 1);
    return same;
}

kvp_status_t kvp_store_disk_copy_bad(kvp_store_h st, const kvp_tier_loc_t *read)
{
    const kvp_tier_pkey_t *pk = &read->pk;
    kvp_page_t            *p;
    kvp_status_t           status = KVP_OK;

    pthread_mutex_lock(&st->lock);
    p = kvp_index_page_find(&st->pages, pk->ns, pk->key, pk->layer);
    if (p != NULL && p->on_disk && !disk_copy_current(st, read)) {
        KVP_LOG_INFO(MOD, "page %016llx%016llx layer %u: a stale copy failed its check when read "
                     "back in the background; the page's current copy is elsewhere, kept",
                     (unsigned long long)p->key.hi, (unsigned long long)p->key.lo, p->layer);
        status = KVP_ERR_STALE;
    } else if (p != NULL && p->on_disk && p->slot.ptr == NULL && p->pins == 0) {
        KVP_LOG_ERROR(MOD, "page %016llx%016llx layer %u failed its check when read back in the "
                      "background (compaction or scrub); dropped", (unsigned long long)p->key.hi,
                      (unsigned long long)p->key.lo, p->layer);
        page_drop_bad(st, p, KVP_ERR_CORRUPT);
    } else if (p != NULL && p->on_disk && p->slot.ptr != NULL) {
        /* the DRAM copy was checked when it came in: write it again over the bad disk copy */
        kvp_tier_batch_t *b = kvp_tier_batch_create();

        st->stats.crc_failures++;
        status = b != NULL ? KVP_OK : KVP_ERR_NO_MEMORY;
        if (b != NULL) {
            kvp_tier_batch_put_page(st->tier, b, pk, p->slot.ptr, p->len);
            status = kvp_store_commit(st, b, KVP_TIER_SYNC);
            kvp_tier_batch_destroy(b);
        }
        st->stats.disk_errors += status != KVP_OK;
        KVP_LOG_ERROR(MOD, "page %016llx%016llx layer %u failed its check when read back in the "
                      "background (compaction or scrub); %s", (unsigned long long)p->key.hi,
                      (unsigned long long)p->key.lo, p->layer,
                      status == KVP_OK ? "written again from its DRAM copy"
                                       : "its DRAM copy could not be written again");
    } else {
        status = KVP_ERR_BUSY;
    }
    pthread_mutex_unlock(&st->lock);
    return status;
}

/* Pages one read dropped for one reason: how many, and the first one. A read logs one line per
 * reason, not one per page (a lost segment file used to log thousands of lines in seconds). */
typedef struct {
    size_t       n;
    kvp_key128_t key;
    uint32_t     layer, len;
    kvp_status_t why; /* the first one's check status (a failed check) */
} drop_note_t;

static void drop_note(drop_note_t *d, const kvp_page_t *p, uint32_t len, kvp_status_t why)
{
    if (d->n++ == 0) {
        d->key   = p->key;
        d->layer = p->layer;
        d->len   = len;
        d->why   = why;
    }
}

/* The lines for a read's dropped pages: [0] missing on disk, [1] failed their check, [2] had a
 * damaged index entry. */
static void drop_notes_log(const drop_note_t *d)
{
    if (d[0].n > 0) {
        KVP_LOG_ERROR(MOD, "%zu pages indexed on disk but missing (segment file gone or cut "
                      "short; first: page %016llx%016llx layer %u); dropped", d[0].n,
                      (unsigned long long)d[0].key.hi, (unsigned long long)d[0].key.lo,
                      d[0].layer);
    }
    if (d[1].n > 0) {
        KVP_LOG_ERROR(MOD, "%zu pages read from disk failed their check (first: page "
                      "%016llx%016llx layer %u, %s); dropped", d[1].n,
                      (unsigned long long)d[1].key.hi, (unsigned long long)d[1].key.lo,
                      d[1].layer, kvp_status_str(d[1].why));
    }
    if (d[2].n > 0) {
        KVP_LOG_ERROR(MOD, "%zu pages have a damaged index entry (no locator, too short for a "
                      "page; first: page %016llx%016llx layer %u, %u bytes); dropped", d[2].n,
                      (unsigned long long)d[2].key.hi, (unsigned long long)d[2].key.lo,
                      d[2].layer, d[2].len);
    }
}

/* Read n disk-only pages back: one MultiGet of their locators, pool slots for all of them, then
 * coalesced O_DIRECT reads straight into the slots; every page is CRC- and key-checked. The store
 * lock is dropped for the MultiGet and the reads (the entries are pinned). Entries stay valid: a
 * dropped page just loses its bytes. KVP_ERR_CORRUPT if a page failed its check or its index
 * entry is damaged, KVP_ERR_NOT_FOUND if one was missing on disk (both are dropped); a read that
 * failed otherwise (KVP_ERR_IO: a segment that could not be opened for want of fds, an I/O
 * error) drops nothing: the locator stays and a later read retries. Dropped pages are logged
 * as one line per reason (count and first page). */
kvp_status_t kvp_store_pages_load(kvp_store_h st, kvp_page_t **pages, size_t n,
                                  const kvp_sess_t *keep, uint64_t *bytes_p)
{
    kvp_tier_pkey_t *pks   = kvp_malloc((n ? n : 1) * sizeof(*pks), "page load keys");
    kvp_tier_loc_t  *locs  = kvp_calloc(n ? n : 1, sizeof(*locs), "page load locs");
    kvp_pool_slot_t *slots = kvp_calloc(n ? n : 1, sizeof(*slots), "page load slots");
    void           **dst   = kvp_calloc(n ? n : 1, sizeof(*dst), "page load dst");
    kvp_status_t     status = KVP_OK, first = KVP_OK;
    size_t           need   = 0;
    uint64_t         bytes  = 0;
    drop_note_t      drops[3] = {{0}, {0}, {0}};

    if (n == 0) { /* nothing to read: keep the lock */
        goto out;
    }
    if (pks == NULL || locs == NULL || slots == NULL || dst == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to load %zu pages", n);
        status = KVP_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        pks[i] = (kvp_tier_pkey_t){pages[i]->ns, pages[i]->key, pages[i]->layer};
        kvp_store_page_pin(st, pages[i]); /* not evicted by the room we make for the others */
    }
    pthread_mutex_unlock(&st->lock); /* the entries are pinned; other calls go on meanwhile */
    status = kvp_tier_pages_locate(st->tier, n, pks, locs);
    pthread_mutex_lock(&st->lock);
    if (status != KVP_OK) {
        st->stats.disk_errors++;
        goto unpin;
    }
    for (size_t i = 0; i < n; i++) {
        need += locs[i].status == KVP_OK ? kvp_pool_slot_size(locs[i].len) : 0;
    }
    (void)kvp_store_room_wait(st, need); /* the entries are pinned: nothing assumed across it */
    if (st->pool.used + need > st->pool.budget) {
        kvp_store_make_room(st, need, keep); /* best effort; the per-page allocation retries */
    }
    for (size_t i = 0; i < n; i++) {
        if (locs[i].status != KVP_OK || pages[i]->slot.ptr != NULL) {
            continue;
        }
        locs[i].status = page_slot_alloc(st, locs[i].len, keep, &slots[i]);
        dst[i]         = slots[i].ptr;
    }
    pthread_mutex_unlock(&st->lock); /* slots are ours until installed below */
    kvp_tier_pages_read(st->tier, n, locs, dst);
    pthread_mutex_lock(&st->lock);
    for (size_t i = 0; i < n; i++) {
        kvp_page_t     *p = pages[i];
        kvp_page_info_t info;
        kvp_status_t    ps = locs[i].status;
        bool            parsed = false, stale;

        if (ps == KVP_OK && dst[i] != NULL) {
            ps = kvp_page_parse(dst[i], locs[i].len, &info);
            if (ps == KVP_OK && (info.layer != p->layer || info.chunk_key.lo != p->key.lo ||
                                 info.chunk_key.hi != p->key.hi)) {
                ps = KVP_ERR_CORRUPT;
            }
            parsed = true;
        }
        /* A bad, missing or unreadable copy (an I/O error, out of fds), but the page changed
         * while the lock was dropped: deleted on disk, and maybe put again (a DRAM copy, checked
         * at its put) and written anew since. This read was of a copy that is gone: dropping
         * "it" would delete the new locator, and failing the get would ignore the DRAM copy. */
        stale = ((parsed && ps != KVP_OK) || ps == KVP_ERR_CORRUPT || ps == KVP_ERR_NOT_FOUND ||
                 ps == KVP_ERR_IO) &&
                (p->slot.ptr != NULL || !p->on_disk);
        if (stale) {
            ps = p->slot.ptr != NULL ? KVP_OK : KVP_ERR_NOT_FOUND;
        } else if (parsed) {
            if (ps == KVP_OK) {
                ps = kvp_store_ns_page_loaded(st, p, &info); /* kept on disk, never served */
            }
            if (ps == KVP_ERR_WRONG_CODEC) {
                /* logged by the check */
            } else if (ps != KVP_OK) {
                drop_note(&drops[1], p, locs[i].len, ps);
                ps = KVP_ERR_CORRUPT;
            } else if (p->slot.ptr == NULL) {
                page_install(st, p, &slots[i], locs[i].len);
                slots[i].ptr = NULL;
                bytes += locs[i].len;
            }
        } else if (ps == KVP_ERR_NOT_FOUND) {
            drop_note(&drops[0], p, locs[i].len, ps);
        } else if (ps == KVP_ERR_CORRUPT) {
            drop_note(&drops[2], p, locs[i].len, ps);
        } else if (ps != KVP_OK) {
            st->stats.disk_errors += ps != KVP_ERR_NO_SPACE;
        }
        if (slots[i].ptr != NULL) {
            kvp_pool_free(&st->pool, &slots[i]);
        }
        if (!stale && (ps == KVP_ERR_CORRUPT || ps == KVP_ERR_NOT_FOUND)) {
            page_drop_bad(st, p, ps);
        }
        if (ps != KVP_OK && first == KVP_OK) {
            first = ps;
        }
    }
    drop_notes_log(drops);
    status = first;
unpin:
    for (size_t i = 0; i < n; i++) {
        kvp_store_page_unpin_keep(st, pages[i]);
    }
out:
    if (locs != NULL) {
        kvp_tier_locs_clear(locs, n);
    }
    kvp_free(dst);
    kvp_free(slots);
    kvp_free(locs);
    kvp_free(pks);
    if (bytes_p != NULL) {
        *bytes_p = bytes;
    }
    return status;
}

/* Like unpin, but never drops the bytes of an on-disk page (the caller pins it right after). */
void kvp_store_page_unpin_keep(kvp_store_h st, kvp_page_t *p)
{
    p->pins--;
    page_idle_update(st, p);
}

/* ---- open / close / warm restart ---- */

static kvp_status_t sess_alloc(uint64_t ns, const char *sid, kvp_sess_t **sess_p)
{
    kvp_sess_t *s = kvp_calloc(1, sizeof(*s), "session");

    if (s == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for session %s", sid);
        return KVP_ERR_NO_MEMORY;
    }
    s->key.ns  = ns;
    s->key.sid = strcpy(s->sid, sid);
    *sess_p = s;
    return KVP_OK;
}

/* KVP_ERR_NOT_FOUND (logged) unless every (chunk, layer) page s names is in the store. */
static kvp_status_t sess_pages_present(kvp_store_h st, const kvp_sess_t *s)
{
    for (uint32_t c = 0; c < s->desc.n_chunks; c++) {
        for (uint32_t l = 0; l < s->desc.layers; l++) {
            kvp_page_t *p = kvp_index_page_find(&st->pages, s->key.ns, s->desc.chunk_keys[c], l);

            if (p == NULL || !page_present(p)) {
                KVP_LOG_ERROR(MOD, "session %s names chunk %u layer %u, which is not in the "
                              "store", s->key.sid, c, l);
                return KVP_ERR_NOT_FOUND;
            }
        }
    }
    return KVP_OK;
}

/* Point a session at its (chunk, layer) page entries; create == true makes disk-only entries for
 * missing ones (warm restart), false fails with KVP_ERR_NOT_FOUND. Each entry gains one nsess.
 * Without create the pages are looked for before the list is allocated: its size is the record's
 * chunks x layers, which a client's record may put at 2^32 (34 GB) while naming nothing held. */
static kvp_status_t sess_bind_pages(kvp_store_h st, kvp_sess_t *s, bool create)
{
    size_t       n = kvp_store_sess_page_count(s);
    kvp_status_t status;

    if (!create && (status = sess_pages_present(st, s)) != KVP_OK) {
        return status;
    }
    s->pages = kvp_calloc(n ? n : 1, sizeof(*s->pages), "session pages");
    if (s->pages == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for the page list of session %s", s->key.sid);
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t c = 0; c < s->desc.n_chunks; c++) {
        for (uint32_t l = 0; l < s->desc.layers; l++) {
            kvp_page_t *p = kvp_index_page_find(&st->pages, s->key.ns, s->desc.chunk_keys[c], l);

            if (p == NULL && create) {
                p = page_new(st, s->key.ns, s->desc.chunk_keys[c], l);
                if (p != NULL) {
                    p->on_disk = true;
                }
            }
            if (p != NULL && create) {
                p->named = true; /* a record on disk names it */
            }
            if (p == NULL || !page_present(p)) {
                for (size_t i = 0; i < (size_t)c * s->desc.layers + l; i++) {
                    s->pages[i]->nsess--;
                    page_maybe_free(st, s->pages[i]);
                }
                kvp_free(s->pages);
                s->pages = NULL;
                return p == NULL && create ? KVP_ERR_NO_MEMORY : KVP_ERR_NOT_FOUND;
            }
            p->nsess++;
            s->pages[(size_t)c * s->desc.layers + l] = p;
        }
    }
    return KVP_OK;
}

static kvp_status_t restart_cb(void *arg, uint64_t ns, const char *sid, const uint8_t *blob,
                               size_t len)
{
    kvp_store_h        st = arg;
    kvp_session_desc_t desc;
    kvp_sess_t        *s;
    uint64_t           version;
    kvp_status_t       status;

    status = kvp_store_record_unpack(blob, len, ns, sid, &desc, &version);
    if (status == KVP_ERR_NO_MEMORY) { /* not the record's fault: skipping it would let the
                                        * sweep after the scan delete the pages it names */
        KVP_LOG_ERROR(MOD, "no memory to read the record of session %s at open", sid);
        return status;
    }
    if (status != KVP_OK) {
        kvp_damaged_rec_t *d = kvp_array_room(st->damaged, &st->damaged_cap, st->n_damaged,
                                              sizeof(*d), 4, "damaged records");

        KVP_LOG_ERROR(MOD, "session %s record on disk is unreadable (%s): not served, kept on "
                      "disk as it is with the pages no readable record names (deleting the "
                      "session removes it)", sid, kvp_status_str(status));
        st->stats.crc_failures += status == KVP_ERR_CORRUPT;
        st->unreadable_records++;
        if (d != NULL) {
            st->damaged = d;
            d[st->n_damaged].ns = ns;
            snprintf(d[st->n_damaged].sid, sizeof(d->sid), "%s", sid);
            st->n_damaged++;
        }
        return KVP_OK;
    }
    kvp_free(desc.tail); /* cold: the tail stays on disk until the session is used */
    desc.tail = NULL;
    status    = sess_alloc(ns, sid, &s);
    if (status != KVP_OK) {
        kvp_session_desc_clear(&desc);
        return status;
    }
    s->desc    = desc;
    s->version = version;
    status     = sess_bind_pages(st, s, true);
    if (status != KVP_OK) {
        kvp_session_desc_clear(&s->desc);
        kvp_free(s);
        return status;
    }
    s->on_disk = true;
    s->last_ns = kvp_time_ns();
    kvp_index_sess_insert(&st->sessions, s);
    kvp_store_sess_cold_link(st, s);
    return KVP_OK;
}

/* Open-time sweep: a page on disk survives only if a session record names it, or while a record
 * did not read (it may name the page: kept on disk, out of the index, until that record is
 * deleted and an open finds every record readable). */
static bool sweep_keep(void *arg, const kvp_tier_pkey_t *pk)
{
    kvp_store_h st = arg;
    kvp_page_t *p  = kvp_index_page_find(&st->pages, pk->ns, pk->key, pk->layer);

    if (p != NULL) {
        p->swept = true;
    } else if (st->unreadable_records > 0) {
        st->unnamed_kept++;
        return true;
    }
    return p != NULL;
}

/* A delete of a session whose record did not read at open: the record leaves the disk
 * (KVP_ERR_NOT_FOUND: none such). Store lock held. */
static kvp_status_t damaged_record_remove(kvp_store_h st, uint64_t ns, const char *sid)
{
    kvp_tier_batch_t *b;
    kvp_status_t      status;
    size_t            i = 0;

    while (i < st->n_damaged && (st->damaged[i].ns != ns || strcmp(st->damaged[i].sid, sid))) {
        i++;
    }
    if (i == st->n_damaged) {
        return KVP_ERR_NOT_FOUND;
    }
    b = kvp_tier_batch_create();
    if (b == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    kvp_tier_batch_del_session(st->tier, b, ns, sid);
    status = kvp_store_commit(st, b, KVP_TIER_SYNC);
    kvp_tier_batch_destroy(b);
    if (status != KVP_OK) {
        st->stats.disk_errors++;
        return status;
    }
    KVP_LOG_INFO(MOD, "session %s: its unreadable record removed from disk%s", sid,
                 st->n_damaged == 1 ? "; the pages kept for it go at the next open" : "");
    st->damaged[i] = st->damaged[--st->n_damaged];
    return KVP_OK;
}

/* After the sweep: pages records name but the disk does not have are not present, so lookup
 * stops before them and their sessions fail with KVP_ERR_CORRUPT instead of resuming partly. */
static void sweep_missing(kvp_store_h st)
{
    size_t          missing = 0;
    kvp_htab_iter_t it      = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;

    while ((l = kvp_htab_next(&st->pages, &it)) != NULL) {
        kvp_page_t *p = KVP_CONTAINER_OF(l, kvp_page_t, hlink);

        if (p->on_disk && !p->swept) {
            p->on_disk = false;
            missing++;
        }
    }
    if (missing > 0) {
        KVP_LOG_ERROR(MOD, "%zu pages named by sessions on disk are missing (dropped after a "
                      "failed check, or lost); those sessions are not resumable", missing);
    }
}

static void store_sweep(kvp_store_h st);

kvp_status_t kvp_store_open(const kvp_store_params_t *params, kvp_store_h *store_p)
{
    kvp_store_h  st;
    kvp_status_t status;
    uint64_t     m      = params != NULL ? params->field_mask : 0;
    size_t       budget = (m & KVP_STORE_PARAM_DRAM_BUDGET) ? params->dram_budget : DEFAULT_BUDGET;
    double       high   = (m & KVP_STORE_PARAM_HIGH_WM) ? params->high_watermark : 0.90;
    double       low    = (m & KVP_STORE_PARAM_LOW_WM) ? params->low_watermark : 0.70;
    const char  *path   = (m & KVP_STORE_PARAM_DB_PATH) ? params->db_path : NULL;
    const char  *node   = (m & KVP_STORE_PARAM_NODE_ID) && params->node_id ? params->node_id
                                                                           : "kvpackd";
    kvp_durability_t dur = (m & KVP_STORE_PARAM_DURABILITY) ? params->durability
                                                            : KVP_DURABILITY_SPILL;
    uint32_t     sync_ms = (m & KVP_STORE_PARAM_SYNC_INTERVAL) ? params->sync_interval_ms
                                                               : DEFAULT_SYNC_INTERVAL_MS;
    double       compact = (m & KVP_STORE_PARAM_COMPACT) ? params->compact_dead_ratio
                                                         : DEFAULT_COMPACT_RATIO;
    uint64_t     seg_bytes = (m & KVP_STORE_PARAM_SEGMENT_BYTES) ? params->segment_bytes
                                                                 : DEFAULT_SEGMENT_BYTES;
    uint64_t     scrub = (m & KVP_STORE_PARAM_SCRUB) ? params->scrub_bytes_per_s : 0;

    if (store_p == NULL || budget < 4096 || !(low > 0.0 && low <= high && high <= 1.0) ||
        (unsigned)dur > KVP_DURABILITY_INTERVAL) {
        KVP_LOG_ERROR(MOD, "invalid store params: budget %zu watermarks %.2f/%.2f durability %d",
                      budget, low, high, (int)dur);
        return KVP_ERR_INVALID;
    }
    if (dur == KVP_DURABILITY_INTERVAL && (sync_ms < 1 || sync_ms > MAX_SYNC_INTERVAL_MS)) {
        KVP_LOG_ERROR(MOD, "invalid store params: sync interval %u ms (1..%u)", sync_ms,
                      MAX_SYNC_INTERVAL_MS);
        return KVP_ERR_INVALID;
    }
    if (!(compact >= 0.0 && compact <= 1.0) || seg_bytes < MIN_SEGMENT_BYTES ||
        seg_bytes > MAX_SEGMENT_BYTES) {
        KVP_LOG_ERROR(MOD, "invalid store params: compact dead ratio %g (0..1), segment bytes "
                      "%llu (%llu..%llu)", compact, (unsigned long long)seg_bytes,
                      MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES);
        return KVP_ERR_INVALID;
    }
    if (dur != KVP_DURABILITY_SPILL && path == NULL) {
        KVP_LOG_ERROR(MOD, "durability %d needs a db_path", (int)dur);
        return KVP_ERR_INVALID;
    }
    st = kvp_calloc(1, sizeof(*st), "store");
    if (st == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for the store");
        return KVP_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->io_done, NULL);
    pthread_cond_init(&st->spill_wake, NULL);
    pthread_mutex_init(&st->compact_mu, NULL);
    st->compact_ratio = compact;
    st->scrub_rate    = scrub;
    kvp_pool_init(&st->pool, budget);
    kvp_list_init(&st->hot_lru);
    kvp_otree_init(&st->cold_by_use, kvp_store_sess_use_cmp);
    kvp_list_init(&st->idle_pages);
    kvp_list_init(&st->unnamed);
    kvp_list_init(&st->unsynced);
    st->put_grace_ns = ((m & KVP_STORE_PARAM_PUT_GRACE) ? params->put_grace_ms
                                                        : DEFAULT_PUT_GRACE_MS) * 1000000ull;
    st->durability  = dur;
    st->sync_interval_ns = sync_ms * 1000000ull;
    st->high_bytes  = (size_t)(high * (double)budget);
    st->low_bytes   = (size_t)(low * (double)budget);
    st->pool.retain = st->high_bytes;
    st->ttl_ns      = (m & KVP_STORE_PARAM_IDLE_TTL) ? params->idle_ttl_s * 1000000000ull : 0;
    st->tomb_ttl_ns = ((m & KVP_STORE_PARAM_TOMB_TTL) ? params->tomb_ttl_s : DEFAULT_TOMB_TTL_S) *
                      1000000000ull;
    st->spill_group_max = (m & KVP_STORE_PARAM_SPILL_GROUP) && params->spill_group_max > 0
                              ? params->spill_group_max : DEFAULT_SPILL_GROUP;
    st->stats.dram_budget = budget;
    kvp_nsprof_init(&st->profiles);
    kvp_tomb_init(&st->tombs);
    status = kvp_index_init(&st->pages, &st->sessions);
    if (status != KVP_OK) {
        goto err_free;
    }
    if (path != NULL) {
        size_t            wb = budget / 8;
        kvp_tier_params_t tp = {path, node, wb < (4u << 20) ? (4u << 20)
                                            : (wb > (64u << 20) ? (64u << 20) : wb), seg_bytes, 0,
                                dur == KVP_DURABILITY_INTERVAL};

        tp.reserve_bytes = (m & KVP_STORE_PARAM_DISK_RESERVE) ? params->disk_reserve
                                                               : 4 * (uint64_t)tp.write_buffer;

        /* RocksDB's write batches, memtables and read buffers for spills are large and short
         * lived; glibc's adaptive mmap threshold would otherwise move them onto the heap after
         * the first free and keep them resident. A fixed threshold returns them to the kernel. */
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        status = kvp_tier_open(&tp, &st->tier);
        if (status != KVP_OK) {
            goto err_index;
        }
        status = kvp_store_ns_load(st);
        if (status == KVP_OK) {
            status = kvp_tier_session_scan(st->tier, restart_cb, st);
        }
        if (status == KVP_OK) {
            status = kvp_store_tomb_load(st);
        }
        if (status == KVP_OK) {
            status = kvp_tier_pages_sweep(st->tier, sweep_keep, st, &st->stats.swept_pages);
        }
        if (status == KVP_OK) {
            sweep_missing(st);
            status = kvp_store_tomb_drop_older(st);
        }
        if (status != KVP_OK) {
            goto err_close;
        }
        if (st->unnamed_kept > 0) {
            KVP_LOG_ERROR(MOD, "db %s: %zu session records did not read; the %llu pages no "
                          "readable record names stay on disk until those sessions are deleted",
                          path, st->unreadable_records, (unsigned long long)st->unnamed_kept);
        }
        if (st->stats.swept_pages > 0) {
            KVP_LOG_INFO(MOD, "db %s: removed %llu pages no session names", path,
                         (unsigned long long)st->stats.swept_pages);
        }
        if (st->sessions.by_key.count > 0) {
            KVP_LOG_INFO(MOD, "warm restart from %s: %zu sessions, %zu pages on disk", path,
                         st->sessions.by_key.count, st->pages.count);
        }
        status = kvp_store_spiller_start(st);
        if (status == KVP_OK && dur == KVP_DURABILITY_INTERVAL) {
            status = kvp_store_syncer_start(st);
        }
        if (status == KVP_OK) { /* also with compaction off: its tick syncs the WAL when a
                                 * file emptied by deletes waits for it (tier_dead_defer) */
            status = kvp_store_compactor_start(st);
        }
        if (status == KVP_OK && scrub > 0) {
            status = kvp_store_scrubber_start(st);
        }
        if (status != KVP_OK) {
            goto err_close;
        }
    }
    st->last_sweep_ns = kvp_time_ns();
    status = kvp_ticker_start(&st->sweeper, st, "expiry sweeper", 1000000000ull, false,
                              store_sweep);
    if (status != KVP_OK) {
        goto err_close;
    }
    *store_p = st;
    return KVP_OK;

err_close:
    kvp_store_close(st);
    return status;
err_index:
    kvp_index_cleanup(&st->pages, &st->sessions);
err_free:
    pthread_mutex_destroy(&st->compact_mu);
    pthread_cond_destroy(&st->spill_wake);
    pthread_cond_destroy(&st->io_done);
    pthread_mutex_destroy(&st->lock);
    kvp_free(st);
    return status;
}

kvp_status_t kvp_store_shutdown(kvp_store_h st)
{
    kvp_status_t status;

    if (st == NULL) {
        return KVP_OK;
    }
    /* each step is a no-op the second time: the threads are gone, and the spill finds only what
     * was written since (nothing, for kvpackd: it drops requests from here on) or what a failed
     * spill left, which it tries once more */
    kvp_ticker_stop(&st->sweeper); /* nothing expires under the stop-time spill */
    kvp_store_scrubber_stop(st);  /* finishes its tick */
    kvp_store_compactor_stop(st); /* stops between moves: what moved is committed */
    kvp_store_spiller_stop(st); /* before anything it could touch goes */
    status = kvp_store_spill_at_close(st); /* what lives only in DRAM, so a restart finds it */
    kvp_store_syncer_stop(st);  /* then one last sync of what the spill left written through */
    return status;
}

void kvp_store_close(kvp_store_h st)
{
    kvp_htab_iter_t it = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;

    if (st == NULL) {
        return;
    }
    (void)kvp_store_shutdown(st); /* shut down already: nothing is left to do (a failed spill's
                                   * sessions are tried once more, and logged again if lost) */
    while ((l = kvp_htab_next(&st->sessions.by_key, &it)) != NULL) {
        kvp_sess_t *s = KVP_CONTAINER_OF(l, kvp_sess_t, key.hlink);

        kvp_index_sess_remove(&st->sessions, s);
        for (size_t k = 0; s->hot && k < kvp_store_sess_page_count(s); k++) {
            s->pages[k]->pins--; /* the session's own pins, not a reader's */
        }
        kvp_pool_free(&st->pool, &s->tail_slot);
        kvp_free(s->desc.chunk_keys);
        kvp_free(s->pages);
        kvp_free(s->orphans);
        kvp_free(s);
    }
    it = (kvp_htab_iter_t)KVP_HTAB_ITER_INIT;
    while ((l = kvp_htab_next(&st->pages, &it)) != NULL) {
        kvp_page_t *p = KVP_CONTAINER_OF(l, kvp_page_t, hlink);

        if (p->pins > 0) {
            KVP_LOG_WARN(MOD, "closing the store with page layer %u still referenced", p->layer);
        }
        kvp_index_page_remove(&st->pages, p);
        kvp_pool_free(&st->pool, &p->slot);
        kvp_free(p);
    }
    kvp_tier_close(st->tier);
    kvp_free(st->damaged);
    kvp_nsprof_cleanup(&st->profiles);
    kvp_tomb_cleanup(&st->tombs);
    kvp_index_cleanup(&st->pages, &st->sessions);
    kvp_pool_cleanup(&st->pool);
    pthread_mutex_destroy(&st->compact_mu);
    pthread_cond_destroy(&st->spill_wake);
    pthread_cond_destroy(&st->io_done);
    pthread_mutex_destroy(&st->lock);
    kvp_free(st);
}

/* ---- pages ---- */

/* The sweeps of what outlived its time (idle sessions, tombstones, loose pages): each at most once
 * a millisecond or second, run as requests arrive and by the sweeper thread once a second, so a
 * node nobody asks anything still lets them go. Store lock held. */
static void store_sweep(kvp_store_h st)
{
    if (st->ttl_ns != 0) {
        kvp_store_expire_idle(st);
    }
    if (st->tombs.by_key.count != 0) {
        kvp_store_tomb_expire(st);
    }
    if (!kvp_list_empty(&st->unnamed)) {
        kvp_store_unnamed_expire(st);
    }
}

static void store_enter(kvp_store_h st)
{
    pthread_mutex_lock(&st->lock);
    store_sweep(st);
}

static void store_leave(kvp_store_h st)
{
    pthread_mutex_unlock(&st->lock);
}

/* The session (ns, sid) once no spill or restore holds it busy; NULL if there is none. */
static kvp_sess_t *sess_find_idle(kvp_store_h st, uint64_t ns, const char *sid)
{
    kvp_sess_t *s;

    while ((s = kvp_index_sess_find(&st->sessions, ns, sid)) != NULL && s->busy) {
        pthread_cond_wait(&st->io_done, &st->lock);
    }
    return s;
}

/* kvp_page_parse checks a 2-bit page's stored scales, zeros and norms but not an fp16 page's
 * values (a second pass over every page it parses, decodes included), so the store checks the
 * fp16 pages it takes: one holding Inf/NaN (a forged CRC) is refused here, not at a decode. */
static kvp_status_t page_values_ok(const uint8_t *page, const kvp_page_info_t *info)
{
    if (info->codec != KVP_CODEC_FP16 ||
        kvp_values_check(KVP_DTYPE_F16, page + KVP_PAGE_HDR_BYTES, info->payload_len / 2) ==
            KVP_OK) {
        return KVP_OK;
    }
    return KVP_ERR_BAD_PAGE;
}

kvp_status_t kvp_store_page_put(kvp_store_h st, uint64_t ns, const void *page, size_t len)
{
    kvp_page_info_t info;
    kvp_page_t     *p;
    kvp_nsprof_t   *prof;
    kvp_status_t    status;

    if (st == NULL || page == NULL) {
        KVP_LOG_ERROR(MOD, "page put with a NULL %s", st == NULL ? "store" : "page");
        return KVP_ERR_INVALID;
    }
    status = kvp_page_parse(page, len, &info);
    if (status == KVP_OK && page_values_ok(page, &info) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "page put rejected: an fp16 page (layer %u) holds Inf/NaN", info.layer);
        return KVP_ERR_BAD_PAGE;
    }
    if (status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "page put of %zu bytes rejected: %s", len, kvp_status_str(status));
        return status;
    }
    store_enter(st);
    for (bool waited = false;; waited = true) { /* again once after waiting for the spiller */
        prof   = kvp_nsprof_find(&st->profiles, ns);
        status = kvp_nsprof_check_page(prof, &info, "page put");
        if (status != KVP_OK) {
            store_leave(st);
            return status;
        }
        p = kvp_index_page_find(&st->pages, ns, info.chunk_key, info.layer);
        if (p != NULL && page_present(p)) {
            page_put_counted(p); /* a record naming it may be on the way: kept for it */
            if (p->nsess == 0 && p->named) {
                kvp_store_page_unnamed(st, p); /* its grace runs from now (a reader kept it) */
            }
            if (kvp_list_linked(&p->idle)) { /* refresh its idle age */
                kvp_list_del(&p->idle);
                kvp_list_push_tail(&st->idle_pages, &p->idle);
            }
            store_leave(st);
            return KVP_OK;
        }
        if (waited || !kvp_store_room_wait(st, kvp_pool_slot_size(len))) {
            break; /* room, or make_room's turn; the lock was not dropped since the checks */
        }
    }
    if (p == NULL) {
        p = page_new(st, ns, info.chunk_key, info.layer);
        if (p == NULL) {
            store_leave(st);
            return KVP_ERR_NO_MEMORY;
        }
    }
    /* pinned across the fill: making room can spill a session whose orphans' let-go drops the
     * last reference to this entry (one such names it while it has no bytes anywhere: its disk
     * copy found bad), which freed it under us */
    p->pins++;
    status = page_fill(st, p, page, len, NULL);
    p->pins--;
    page_idle_update(st, p);
    if (status == KVP_OK) {
        page_put_counted(p);
        p->codec = (uint8_t)info.codec;
        p->tail  = (info.flags & KVP_PAGE_F_TAIL) != 0;
        p->sink  = (info.flags & KVP_PAGE_F_SINK) != 0;
        if (prof == NULL && !p->tail && !p->sink) { /* the first codec page fixes the profile */
            status = kvp_nsprof_create(&st->profiles, ns, &info, &prof);
            if (status != KVP_OK) {
                kvp_store_page_drop_dram(st, p);
            }
        }
    }
    if (status != KVP_OK) {
        page_maybe_free(st, p); /* new, or no longer named while it waited for room */
        store_leave(st);
        return status;
    }
    kvp_store_evict_if_needed(st);
    store_leave(st);
    return KVP_OK;
}

kvp_status_t kvp_store_page_get(kvp_store_h st, uint64_t ns, kvp_key128_t key, uint32_t layer,
                                kvp_page_ref_h *ref_p)
{
    kvp_page_t  *p;
    kvp_status_t status = KVP_OK;

    if (st == NULL || ref_p == NULL) {
        KVP_LOG_ERROR(MOD, "page get with a NULL argument");
        return KVP_ERR_INVALID;
    }
    store_enter(st);
    p = kvp_index_page_find(&st->pages, ns, key, layer);
    if (p == NULL || !page_present(p)) {
        store_leave(st);
        return KVP_ERR_NOT_FOUND;
    }
    if (p->slot.ptr == NULL) {
        kvp_page_t *pp = p;

        status = kvp_store_pages_load(st, &pp, 1, NULL, NULL);
        if (status == KVP_OK && p->slot.ptr == NULL) {
            status = KVP_ERR_NOT_FOUND;
        }
    }
    if (status == KVP_OK) {
        kvp_store_page_pin(st, p);
        *ref_p = p;
    } else {
        page_maybe_free(st, p);
    }
    store_leave(st);
    return status;
}

const void *kvp_page_ref_data(kvp_page_ref_h ref, size_t *len_p)
{
    if (ref == NULL) {
        return NULL;
    }
    if (len_p != NULL) {
        *len_p = ref->len;
    }
    return ref->slot.ptr;
}

void kvp_page_ref_release(kvp_page_ref_h ref)
{
    kvp_store_h st;

    if (ref == NULL) {
        return;
    }
    st = ref->store;
    pthread_mutex_lock(&st->lock);
    kvp_store_page_unpin(st, ref);
    pthread_mutex_unlock(&st->lock);
}

/* ---- sessions ---- */

static int key_order(const void *a, const void *b)
{
    const kvp_key128_t *x = a, *y = b;

    if (x->hi != y->hi) {
        return x->hi < y->hi ? -1 : 1;
    }
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* KVP_ERR_INVALID when the record names one chunk key twice: chunk keys chain the whole prefix,
 * so no real session does, and a page named twice by one record would outlive its delete. */
static kvp_status_t desc_keys_unique(const char *sid, const kvp_session_desc_t *d)
{
    kvp_key128_t *k;
    kvp_status_t  status = KVP_OK;

    if (d->n_chunks < 2) {
        return KVP_OK;
    }
    k = kvp_malloc(d->n_chunks * sizeof(*k), "record key check");
    if (k == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to check the %u chunk keys of session %s", d->n_chunks, sid);
        return KVP_ERR_NO_MEMORY;
    }
    memcpy(k, d->chunk_keys, d->n_chunks * sizeof(*k));
    qsort(k, d->n_chunks, sizeof(*k), key_order);
    for (uint32_t i = 1; i < d->n_chunks && status == KVP_OK; i++) {
        if (key_order(&k[i - 1], &k[i]) == 0) {
            KVP_LOG_ERROR(MOD, "session %s record names chunk key %016llx%016llx more than once",
                          sid, (unsigned long long)k[i].hi, (unsigned long long)k[i].lo);
            status = KVP_ERR_INVALID;
        }
    }
    kvp_free(k);
    return status;
}

/* Validate a record; *tail_p gets the header of its first tail page (heads 0 when none). Tail
 * pages are fp16 of one geometry with capacity P (else KVP_ERR_WRONG_CODEC). */
static kvp_status_t desc_check(const char *sid, const kvp_session_desc_t *d, kvp_page_info_t *tail_p)
{
    size_t       off = 0;
    kvp_status_t status0;

    if (d->layers == 0 || d->layers > KVP_LAYERS_MAX || d->page_tokens == 0 ||
        d->page_tokens > KVP_PAGE_MAX_TOKENS || d->tail_tokens >= d->page_tokens ||
        (d->n_chunks > 0 && d->chunk_keys == NULL) ||
        (d->n_tail != 0 && d->n_tail != d->layers) || ((d->n_tail == 0) != (d->tail_len == 0)) ||
        (d->tail_len > 0 && d->tail == NULL) || ((d->tail_tokens == 0) != (d->n_tail == 0))) {
        KVP_LOG_ERROR(MOD, "session %s record is inconsistent (layers %u P %u chunks %u tail %u "
                      "tokens, %u pages, %zu bytes)", sid, d->layers, d->page_tokens, d->n_chunks,
                      d->tail_tokens, d->n_tail, d->tail_len);
        return KVP_ERR_INVALID;
    }
    status0 = desc_keys_unique(sid, d);
    if (status0 != KVP_OK) {
        return status0;
    }
    memset(tail_p, 0, sizeof(*tail_p));
    for (uint32_t l = 0; l < d->n_tail; l++) {
        kvp_page_info_t info;
        size_t          len;
        kvp_status_t    status;

        len = kvp_page_len_at(d->tail + off, d->tail_len - off);
        if (len == 0) {
            KVP_LOG_ERROR(MOD, "session %s tail is truncated at layer %u", sid, l);
            return KVP_ERR_BAD_PAGE;
        }
        status = kvp_page_parse(d->tail + off, len, &info);
        if (status == KVP_OK && (info.layer != l || info.valid != d->tail_tokens)) {
            status = KVP_ERR_BAD_PAGE;
        }
        if (status == KVP_OK && page_values_ok(d->tail + off, &info) != KVP_OK) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u holds Inf/NaN", sid, l);
            return KVP_ERR_BAD_PAGE;
        }
        if (status == KVP_OK &&
            (info.codec != KVP_CODEC_FP16 || info.capacity != d->page_tokens ||
             (l > 0 && (info.heads != tail_p->heads || info.head_dim != tail_p->head_dim)))) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u is %s %u x %u with P %u; tails are fp16 "
                          "of one geometry with the record's P %u", sid, l,
                          kvp_codec_name((kvp_codec_id_t)info.codec), info.heads, info.head_dim,
                          info.capacity, d->page_tokens);
            return KVP_ERR_WRONG_CODEC;
        }
        if (status != KVP_OK) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u rejected: %s", sid, l,
                          kvp_status_str(status));
            return status;
        }
        if (l == 0) {
            *tail_p = info;
        }
        off += len;
    }
    if (off != d->tail_len) {
        KVP_LOG_ERROR(MOD, "session %s tail has %zu trailing bytes", sid, d->tail_len - off);
        return KVP_ERR_BAD_PAGE;
    }
    return KVP_OK;
}

static kvp_status_t sid_check(const char *sid)
{
    if (sid == NULL || sid[0] == 0 || strnlen(sid, KVP_SID_MAX) >= KVP_SID_MAX) {
        KVP_LOG_ERROR(MOD, "session id is empty or longer than %d bytes", KVP_SID_MAX - 1);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

/* KVP_ERR_NO_SPACE (logged) when the bound session s and a tail of tail_len bytes take more pool
 * slot bytes than the DRAM budget: a get restores every page at once, so such a session could be
 * acknowledged but never read back. A page whose length is not known yet (on disk since the last
 * open) counts 0: a session that fits is never refused. */
static kvp_status_t sess_fits_budget(kvp_store_h st, const kvp_sess_t *s, size_t tail_len)
{
    size_t need = tail_len ? kvp_pool_slot_size(tail_len) : 0;

    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        need += s->pages[i]->len ? kvp_pool_slot_size(s->pages[i]->len) : 0;
    }
    if (need > st->pool.budget) {
        KVP_LOG_ERROR(MOD, "session %s of %zu bytes cannot fit the DRAM budget of %zu bytes (a "
                      "get restores all of it)", s->key.sid, need, st->pool.budget);
        return KVP_ERR_NO_SPACE;
    }
    return KVP_OK;
}

kvp_status_t kvp_store_session_put(kvp_store_h st, uint64_t ns, const char *sid,
                                   const kvp_session_desc_t *desc)
{
    return kvp_store_session_put_version(st, ns, sid, desc, 0);
}

/* KVP_ERR_STALE (logged, counted) when version is older than what the store holds for (ns, sid):
 * a record newer than it, or a tombstone as new. */
static kvp_status_t version_check(kvp_store_h st, uint64_t ns, const char *sid, uint64_t version,
                                  bool is_delete)
{
    kvp_tomb_t *t = kvp_tomb_find(&st->tombs, ns, sid);
    kvp_sess_t *s = kvp_index_sess_find(&st->sessions, ns, sid);

    if ((!is_delete && t != NULL && version <= t->version) || (s != NULL && version < s->version)) {
        KVP_LOG_WARN(MOD, "%s of session %s at version %llu refused: the store holds %s version "
                     "%llu", is_delete ? "delete" : "put", sid, (unsigned long long)version,
                     s != NULL && version < s->version ? "a record of" : "a tombstone of",
                     (unsigned long long)(s != NULL && version < s->version ? s->version
                                                                          : t->version));
        st->stats.stale_refused++;
        return KVP_ERR_STALE;
    }
    return KVP_OK;
}

kvp_status_t kvp_store_version_check(kvp_store_h st, uint64_t ns, const char *sid,
                                     uint64_t version)
{
    kvp_status_t status;

    store_enter(st);
    status = version_check(st, ns, sid, version, false);
    store_leave(st);
    return status;
}

/* Under the store lock: the record (ns, sid) is still what the caller read (expect; NULL: no
 * condition), else KVP_ERR_NOT_FOUND (deleted since) or KVP_ERR_INVALID (another write since). */
static kvp_status_t expect_check(kvp_store_h st, uint64_t ns, const char *sid,
                                 const kvp_sess_expect_t *expect)
{
    const kvp_sess_t *cur = expect != NULL ? kvp_index_sess_find(&st->sessions, ns, sid) : NULL;

    if (expect == NULL || (expect->exists ? cur != NULL && cur->version == expect->version
                                          : cur == NULL)) {
        return KVP_OK;
    }
    KVP_LOG_ERROR(MOD, "session %s changed while an append to it ran (%s): the append is refused",
                  sid, cur == NULL ? "deleted" : "another writer's put or append came first");
    return expect->exists && cur == NULL ? KVP_ERR_NOT_FOUND : KVP_ERR_INVALID;
}

kvp_status_t kvp_store_session_put_version(kvp_store_h st, uint64_t ns, const char *sid,
                                           const kvp_session_desc_t *desc, uint64_t version)
{
    return kvp_store_session_put_expect(st, ns, sid, desc, version, NULL);
}

kvp_status_t kvp_store_session_put_expect(kvp_store_h st, uint64_t ns, const char *sid,
                                          const kvp_session_desc_t *desc, uint64_t version,
                                          const kvp_sess_expect_t *expect)
{
    kvp_sess_t     *s, *old;
    kvp_tomb_t     *tomb;
    kvp_nsprof_t   *prof;
    kvp_page_info_t tail;
    bool            fixed_layers = false;
    kvp_status_t    status;

    if (st == NULL || desc == NULL) {
        KVP_LOG_ERROR(MOD, "session put with a NULL argument");
        return KVP_ERR_INVALID;
    }
    status = sid_check(sid);
    if (status == KVP_OK) {
        status = desc_check(sid, desc, &tail);
    }
    if (status != KVP_OK) {
        return status;
    }
    store_enter(st);
    for (bool waited = false;; waited = true) { /* once more after waiting for the spiller */
        (void)sess_find_idle(st, ns, sid); /* an older version's disk write lands before ours */
        if (waited || !kvp_store_room_wait(st, desc->tail_len ? kvp_pool_slot_size(desc->tail_len)
                                                              : 0)) {
            break;
        }
    }
    status = version_check(st, ns, sid, version, false);
    if (status == KVP_OK) {
        status = expect_check(st, ns, sid, expect);
    }
    if (status != KVP_OK) {
        goto out;
    }
    status = sess_alloc(ns, sid, &s);
    if (status != KVP_OK) {
        goto out;
    }
    s->version   = version;
    s->desc      = *desc;
    s->desc.tail = NULL;
    s->desc.chunk_keys = kvp_malloc((desc->n_chunks ? desc->n_chunks : 1) * sizeof(kvp_key128_t),
                                    "session keys");
    if (s->desc.chunk_keys == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for the keys of session %s", sid);
        status = KVP_ERR_NO_MEMORY;
        goto err_sess;
    }
    if (desc->n_chunks != 0) { /* a session of only a tail may pass no keys (NULL) */
        memcpy(s->desc.chunk_keys, desc->chunk_keys, desc->n_chunks * sizeof(kvp_key128_t));
    }
    status = sess_bind_pages(st, s, false);
    if (status != KVP_OK) {
        goto err_keys;
    }
    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        kvp_store_page_pin(st, s->pages[i]);
    }
    s->hot = true;
    status = sess_fits_budget(st, s, desc->tail_len);
    if (status == KVP_OK) {
        status = kvp_store_ns_check_session(st, s, desc->n_tail ? &tail : NULL, &prof);
    }
    if (status != KVP_OK) {
        goto err_pages;
    }
    if (prof != NULL && prof->layers == 0) { /* the namespace's first record fixes its layers */
        prof->layers = desc->layers;
        prof->gen++;
        fixed_layers = true;
    }
    if (desc->tail_len > 0) {
        status = kvp_pool_alloc(&st->pool, desc->tail_len, &s->tail_slot);
        if (status == KVP_ERR_NO_SPACE) {
            status = kvp_store_make_room(st, kvp_pool_slot_size(desc->tail_len), s);
            if (status == KVP_OK) {
                status = kvp_pool_alloc(&st->pool, desc->tail_len, &s->tail_slot);
            }
        }
        if (status != KVP_OK) {
            KVP_LOG_ERROR(MOD, "no room for the %zu-byte tail of session %s: %s", desc->tail_len,
                          sid, kvp_status_str(status));
            goto err_pages;
        }
        memcpy(s->tail_slot.ptr, desc->tail, desc->tail_len);
        s->desc.tail = s->tail_slot.ptr;
    }
    s->dirty = true;
    if (st->durability != KVP_DURABILITY_SPILL) {
        status = kvp_store_sess_write(st, s, st->durability == KVP_DURABILITY_SYNC);
        if (status != KVP_OK) {
            goto err_pages;
        }
    }
    old = kvp_index_sess_find(&st->sessions, ns, sid);
    if (old != NULL) {
        size_t       n     = kvp_store_sess_page_count(old);
        kvp_page_t **named = kvp_malloc((n ? n : 1) * sizeof(*named), "session put old pages");

        s->on_disk      = s->on_disk || old->on_disk;
        s->tomb_on_disk = s->tomb_on_disk || old->tomb_on_disk;
        for (size_t i = 0; named != NULL && i < n; i++) {
            named[i] = old->pages[i];
            kvp_store_page_pin(st, named[i]); /* alive across the release */
        }
        /* Under spill this record was not written: the old one stays on disk and is what a
         * kill must find whole, so the pages it names and this one does not stay there too,
         * held by s until its record replaces the old (kvp_store_sess_adopt_orphans; without
         * memory for that they stay until the next open's sweep). */
        bool keep_disk = old->on_disk && st->durability == KVP_DURABILITY_SPILL;

        if (keep_disk) {
            (void)kvp_store_sess_adopt_orphans(s, old);
        } else {
            kvp_store_sess_orphans_let_go(st, old); /* its record is overwritten by s's */
        }
        kvp_store_sess_release(st, old); /* drops its page refs */
        if (named != NULL && !keep_disk) {
            kvp_store_pages_let_go(st, named, n); /* pages nobody names leave disk and DRAM */
        }
        for (size_t i = 0; named != NULL && keep_disk && i < n; i++) {
            kvp_store_page_unpin(st, named[i]);
        }
        kvp_free(named);
    }
    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) { /* this record's puts matched */
        s->pages[i]->put_pending -= s->pages[i]->put_pending > 0;
        s->pages[i]->named = true;
    }
    kvp_index_sess_insert(&st->sessions, s);
    s->last_ns = kvp_time_ns();
    kvp_list_push_tail(&st->hot_lru, &s->lru);
    tomb = kvp_tomb_find(&st->tombs, ns, sid); /* older than version: this put supersedes it */
    if (tomb != NULL) { /* under spill durability the record is not on disk yet: the batch that
                         * writes it removes the tombstone on disk (tomb_on_disk) */
        bool disk = st->durability != KVP_DURABILITY_SPILL;

        s->tomb_on_disk = st->tier != NULL;
        if (kvp_store_tomb_clear(st, tomb, disk) != KVP_OK) {
            KVP_LOG_WARN(MOD, "session %s: its older tombstone could not be cleared on disk; the "
                         "session's next disk write removes it", sid);
        } else {
            s->tomb_on_disk = s->tomb_on_disk && !disk;
        }
    }
    kvp_store_evict_if_needed(st);
    store_leave(st);
    return KVP_OK;

err_pages:
    if (fixed_layers) {
        prof->layers = 0;
        prof->gen++;
    }
    kvp_pool_free(&st->pool, &s->tail_slot);
    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        s->pages[i]->nsess--;
        kvp_store_page_unpin(st, s->pages[i]);
    }
    kvp_free(s->pages);
err_keys:
    kvp_free(s->desc.chunk_keys);
err_sess:
    kvp_free(s);
out:
    store_leave(st);
    return status;
}

kvp_status_t kvp_store_session_get(kvp_store_h st, uint64_t ns, const char *sid,
                                   kvp_session_desc_t *desc)
{
    return kvp_store_session_get_info(st, ns, sid, desc, NULL);
}

kvp_status_t kvp_store_session_get_info(kvp_store_h st, uint64_t ns, const char *sid,
                                        kvp_session_desc_t *desc, kvp_store_get_info_t *info)
{
    kvp_sess_t  *s;
    kvp_status_t status;
    uint32_t     disk_pages = 0;
    uint64_t     disk_bytes = 0;

    if (st == NULL || desc == NULL || sid_check(sid) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "session get with an invalid argument");
        return KVP_ERR_INVALID;
    }
    store_enter(st);
    s = sess_find_idle(st, ns, sid);
    if (s == NULL) {
        const kvp_tomb_t *t = kvp_tomb_find(&st->tombs, ns, sid);

        if (info != NULL) { /* a delete's version: a copy elsewhere as old is deleted too */
            *info = (kvp_store_get_info_t){t != NULL ? t->version : 0, 0, 0};
        }
        store_leave(st);
        return KVP_ERR_NOT_FOUND;
    }
    status = kvp_store_sess_restore(st, s, &disk_pages, &disk_bytes);
    if (status == KVP_OK) {
        status = kvp_session_desc_copy(&s->desc, desc);
        if (status != KVP_OK) {
            KVP_LOG_ERROR(MOD, "no memory to copy session %s", sid);
        } else if (info != NULL) {
            *info = (kvp_store_get_info_t){s->version, disk_pages, disk_bytes};
        }
        kvp_store_sess_touch(st, s);
        kvp_store_evict_if_needed(st);
    }
    store_leave(st);
    return status;
}

kvp_status_t kvp_store_session_spill(kvp_store_h st, uint64_t ns, const char *sid)
{
    kvp_sess_t  *s;
    kvp_status_t status;

    if (st == NULL || sid_check(sid) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "session spill with an invalid argument");
        return KVP_ERR_INVALID;
    }
    if (st->tier == NULL) {
        KVP_LOG_ERROR(MOD, "session %s spill: the store has no db_path", sid);
        return KVP_ERR_UNSUPPORTED;
    }
    store_enter(st);
    s      = sess_find_idle(st, ns, sid);
    status = s == NULL ? KVP_ERR_NOT_FOUND : kvp_store_sess_spill_unlocked(st, s);
    store_leave(st);
    return status;
}

kvp_status_t kvp_store_session_delete(kvp_store_h st, uint64_t ns, const char *sid)
{
    return kvp_store_session_delete_version(st, ns, sid, 0);
}

/* Delete (tomb: keep a tombstone at version unless it is 0) or drop (no tombstone) a session;
 * a record newer than version is refused (not for an unversioned delete). */
static kvp_status_t session_remove(kvp_store_h st, uint64_t ns, const char *sid, uint64_t version,
                                   bool tomb)
{
    kvp_sess_t  *s;
    kvp_status_t status;

    if (st == NULL || sid_check(sid) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "session %s with an invalid argument", tomb ? "delete" : "drop");
        return KVP_ERR_INVALID;
    }
    store_enter(st);
    s      = sess_find_idle(st, ns, sid);
    status = version != 0 || !tomb ? version_check(st, ns, sid, version, true) : KVP_OK;
    if (status == KVP_OK && s != NULL) {
        status = kvp_store_sess_remove(st, s, tomb ? version : 0);
    } else if (status == KVP_OK) { /* no record: the tombstone still stops a late copy */
        kvp_status_t gone = st->n_damaged > 0 ? damaged_record_remove(st, ns, sid)
                                              : KVP_ERR_NOT_FOUND;

        status = tomb && version != 0 ? kvp_store_tomb_record(st, ns, sid, version) : KVP_OK;
        status = status == KVP_OK ? gone : status;
    }
    store_leave(st);
    return status;
}

kvp_status_t kvp_store_session_delete_version(kvp_store_h st, uint64_t ns, const char *sid,
                                              uint64_t version)
{
    return session_remove(st, ns, sid, version, true);
}

kvp_status_t kvp_store_session_drop(kvp_store_h st, uint64_t ns, const char *sid,
                                    uint64_t version)
{
    return session_remove(st, ns, sid, version, false);
}

kvp_status_t kvp_store_lookup(kvp_store_h st, uint64_t ns, const kvp_key128_t *keys, uint32_t n,
                              uint32_t layers, uint32_t *hit_chunks_p)
{
    uint32_t hit = 0;

    if (st == NULL || hit_chunks_p == NULL || (keys == NULL && n > 0) || layers == 0) {
        KVP_LOG_ERROR(MOD, "lookup with an invalid argument");
        return KVP_ERR_INVALID;
    }
    store_enter(st);
    for (; hit < n; hit++) {
        uint32_t l = 0;

        for (; l < layers; l++) {
            kvp_page_t *p = kvp_index_page_find(&st->pages, ns, keys[hit], l);

            if (p == NULL || !page_present(p)) {
                break;
            }
        }
        if (l < layers) {
            break;
        }
    }
    store_leave(st);
    *hit_chunks_p = hit;
    return KVP_OK;
}

uint64_t kvp_store_page_dram_bytes(uint64_t len) { return kvp_pool_slot_size((size_t)len); }
uint64_t kvp_store_page_ssd_bytes(uint64_t len) { return kvp_tier_disk_bytes((size_t)len); }

size_t kvp_store_fd_budget(void) { return kvp_segs_rfd_default() + 256; }

void kvp_store_stats(kvp_store_h st, kvp_store_stats_t *stats)
{
    uint64_t        on_disk = 0, hot = 0, unsynced = 0;
    kvp_htab_iter_t it      = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;

    if (st == NULL || stats == NULL) {
        return;
    }
    pthread_mutex_lock(&st->lock);
    while ((l = kvp_htab_next(&st->sessions.by_key, &it)) != NULL) {
        const kvp_sess_t *s = KVP_CONTAINER_OF(l, kvp_sess_t, key.hlink);

        on_disk += kvp_store_sess_on_disk_now(s); /* as listed */
        hot += s->hot;
        unsynced += s->unsynced;
    }
    *stats                  = st->stats;
    stats->disk_free_bytes  = UINT64_MAX;
    if (st->tier != NULL) {
        kvp_tier_disk_t d;

        kvp_tier_disk_stats(st->tier, &d);
        stats->disk_files               = d.files;
        stats->disk_bytes               = d.file_bytes;
        stats->disk_live_bytes          = d.live_bytes;
        stats->disk_logical_bytes       = d.logical_bytes;
        stats->disk_segment_write_bytes = d.segment_write_bytes;
        stats->index_rebuilds           = d.index_rebuilds;
        stats->index_lost               = d.index_lost;
        stats->wal_dropped_bytes        = d.wal_dropped;
        stats->disk_tier                = 1;
        stats->disk_free_bytes          = d.free_bytes; /* UINT64_MAX: unknown */
        stats->disk_reserve_bytes       = d.reserve_bytes;
        stats->disk_full_refusals       = d.full_refusals;
        stats->disk_reserve_releases    = d.reserve_releases;
    }
    stats->dram_bytes       = st->pool.used;
    stats->sessions         = st->sessions.by_key.count;
    stats->sessions_on_disk = on_disk;
    stats->sessions_in_dram = hot;
    stats->sessions_unsynced = unsynced;
    stats->tombstones       = st->tombs.by_key.count;
    stats->tombstone_bytes  = kvp_store_tomb_bytes(st);
    pthread_mutex_unlock(&st->lock);
}

void kvp_store_inject_disk_fail(kvp_store_h st, uint32_t n, kvp_status_t status)
{
    if (st != NULL && st->tier != NULL) {
        pthread_mutex_lock(&st->lock);
        kvp_tier_inject_fail(st->tier, n, status);
        pthread_mutex_unlock(&st->lock);
    }
}
