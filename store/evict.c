/* evict.c - session life on and off DRAM: writing a session to the SSD tier (one WriteBatch with
 * its record and every page not yet on disk), spilling (write, then unpin its pages and free its
 * tail), restoring (record + batched MultiGet of missing pages, CRC-checked), removing, the idle
 * TTL, and eviction: clean cached pages first, then least-recently-used sessions, then loose pages
 * (put but named by no session). Pages pinned by a hot session or a reader are never freed.
 * Main flow: kvp_store_evict_if_needed -> spiller.c (background) | kvp_store_make_room (budget). */
#include "store_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <stdint.h>
#include <string.h>

#define MOD "store"

size_t kvp_store_sess_page_count(const kvp_sess_t *s)
{
    return (size_t)s->desc.n_chunks * s->desc.layers;
}

static kvp_tier_mode_t write_mode(kvp_store_h st, bool sync)
{
    return sync || st->durability == KVP_DURABILITY_SYNC ? KVP_TIER_SYNC : KVP_TIER_WAL;
}

/* Add a session to a WriteBatch: its record, every page of it not on disk yet and not in the
 * batch already (segment pages are referenced, not copied: they stay pinned by the hot session
 * until the commit returns) and its namespace profile unless already saved (*gen_p, for
 * sess_written). Pages added are marked batched: sess_batch_unmark before the lock is dropped;
 * and they get the batch's seq (batch_seq_next), by which sess_written knows them. */
static kvp_status_t sess_batch_add(kvp_store_h st, kvp_sess_t *s, kvp_tier_batch_t *b,
                                   uint32_t seq, uint32_t *gen_p)
{
    uint8_t     *blob;
    size_t       blen, n = kvp_store_sess_page_count(s);
    kvp_status_t status;

    status = kvp_store_record_pack(&s->desc, s->version, s->key.ns, s->key.sid, &blob,
                                   &blen);
    if (status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "session %s: cannot pack its record: %s", s->key.sid,
                      kvp_status_str(status));
        return status;
    }
    for (size_t i = 0; i < n; i++) {
        kvp_page_t *p = s->pages[i];

        if (!p->on_disk && p->slot.ptr != NULL && !p->batched) {
            kvp_tier_pkey_t pk = {p->ns, p->key, p->layer};

            kvp_tier_batch_put_page(st->tier, b, &pk, p->slot.ptr, p->len);
            p->batched = true;
        }
        if (p->batched) {
            p->batch_seq = seq;
        }
    }
    kvp_tier_batch_put_session(st->tier, b, s->key.ns, s->key.sid, blob, blen);
    if (s->tomb_on_disk) { /* with the record that superseded it, never before (store_int.h) */
        kvp_store_tomb_batch_del(st, b, s->key.ns, s->key.sid);
    }
    kvp_store_ns_batch_add(st, s->key.ns, b, gen_p);
    kvp_free(blob);
    return KVP_OK;
}

/* The seq of a session write batch about to be built: never 0, which no page carries yet */
static uint32_t batch_seq_next(kvp_store_h st)
{
    if (++st->batch_seq == 0) {
        st->batch_seq = 1;
    }
    return st->batch_seq;
}

static void sess_batch_unmark(kvp_sess_t *s)
{
    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        s->pages[i]->batched = false;
    }
}

/* The session's own WriteBatch (sess_batch_add). */
static kvp_status_t sess_batch_build(kvp_store_h st, kvp_sess_t *s, kvp_tier_batch_t **b_p,
                                     uint32_t *seq_p, uint32_t *gen_p)
{
    kvp_tier_batch_t *b = kvp_tier_batch_create();
    kvp_status_t      status;

    if (b == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for the write batch of session %s", s->key.sid);
        return KVP_ERR_NO_MEMORY;
    }
    *seq_p = batch_seq_next(st);
    status = sess_batch_add(st, s, b, *seq_p, gen_p);
    sess_batch_unmark(s);
    if (status != KVP_OK) {
        kvp_tier_batch_destroy(b);
        return status;
    }
    *b_p = b;
    return KVP_OK;
}

kvp_status_t kvp_store_commit(kvp_store_h st, kvp_tier_batch_t *b, kvp_tier_mode_t mode)
{
    kvp_status_t status = kvp_tier_batch_commit(st->tier, b, mode);

    st->write_gen += status == KVP_OK && mode == KVP_TIER_WAL && !kvp_tier_batch_empty(b);
    return status;
}

void kvp_store_sess_synced(kvp_store_h st, kvp_sess_t *s)
{
    (void)st;
    s->unsynced = false;
    if (kvp_list_linked(&s->unsynced_link)) {
        kvp_list_del(&s->unsynced_link);
    }
}

/* Its write just went through kvp_store_commit without an fsync: newest on store->unsynced. */
static void sess_unsynced(kvp_store_h st, kvp_sess_t *s)
{
    kvp_store_sess_synced(st, s);
    s->unsynced  = true;
    s->write_gen = st->write_gen;
    kvp_list_push_tail(&st->unsynced, &s->unsynced_link);
}

/* A commit naming the session returned OK: its record and the pages batch seq carried are on
 * disk. Not every page with bytes now: one with none when the batch was built (its copy found
 * bad) may have been put again while a group's commit ran without the lock; marked on disk, its
 * only copy would have been dropped as the session went cold. Such a page leaves the session
 * dirty (and hot: sess_spilled), for the next spill to write. */
static void sess_written(kvp_store_h st, kvp_sess_t *s, kvp_tier_mode_t mode, uint32_t seq,
                         uint32_t gen)
{
    bool left = false;

    kvp_store_ns_batch_done(st, s->key.ns, gen);
    if (mode == KVP_TIER_SYNC) {
        kvp_store_sess_synced(st, s);
    } else {
        sess_unsynced(st, s);
    }
    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        kvp_page_t *p = s->pages[i];

        p->on_disk = p->on_disk || (p->slot.ptr != NULL && p->batch_seq == seq);
        left       = left || (p->slot.ptr != NULL && !p->on_disk);
    }
    s->on_disk      = true;
    s->dirty        = left;
    s->tomb_on_disk = false; /* the batch removed it (sess_batch_add) */
    kvp_store_sess_orphans_let_go(st, s); /* the older record they belonged to is replaced */
}

static void sess_write_done(kvp_store_h st, kvp_sess_t *s, kvp_tier_batch_t *b,
                            kvp_tier_mode_t mode, uint32_t seq, uint32_t gen, kvp_status_t status)
{
    if (status == KVP_OK) {
        sess_written(st, s, mode, seq, gen);
        st->stats.spill_bytes += kvp_tier_batch_bytes(b);
    } else {
        st->stats.disk_errors++;
    }
    kvp_tier_batch_destroy(b);
}

kvp_status_t kvp_store_sess_write(kvp_store_h st, kvp_sess_t *s, bool sync)
{
    kvp_tier_batch_t *b;
    uint32_t          gen, seq;
    kvp_tier_mode_t   mode   = write_mode(st, sync);
    kvp_status_t      status = sess_batch_build(st, s, &b, &seq, &gen);

    if (status != KVP_OK) {
        return status;
    }
    status = kvp_store_commit(st, b, mode);
    sess_write_done(st, s, b, mode, seq, gen, status);
    return status;
}

static void sess_make_cold(kvp_store_h st, kvp_sess_t *s)
{
    kvp_pool_free(&st->pool, &s->tail_slot);
    s->tail_slot.ptr = NULL;
    s->desc.tail     = NULL;
    s->hot           = false;
    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        kvp_store_page_unpin(st, s->pages[i]);
    }
    kvp_list_del(&s->lru);
    kvp_store_sess_cold_link(st, s); /* at its last use, not at the end: spills come in any order */
}

/* After the WAL sync that makes an unsynced session durable: clear the mark or count the error. */
static void sess_synced(kvp_store_h st, kvp_sess_t *s, kvp_status_t status)
{
    if (status == KVP_OK) {
        kvp_store_sess_synced(st, s);
    } else {
        st->stats.disk_errors++;
    }
}

/* A counted spill or restore that began at t0 (kvp_time_ns): into its sum and histogram slot. */
static void time_record(uint64_t *sum_ns, uint64_t *hist, uint64_t t0)
{
    uint64_t d = kvp_time_ns() - t0;

    *sum_ns += d;
    hist[kvp_hist_bucket(d)]++;
}

/* The end of both spills (begun at t0): on success the session goes cold, unless sess_written
 * left it dirty (a page of it put again during the commit: the next spill writes it). */
static kvp_status_t sess_spilled(kvp_store_h st, kvp_sess_t *s, kvp_status_t status, uint64_t t0)
{
    if (status != KVP_OK || s->dirty) {
        return status;
    }
    st->stats.spills++;
    time_record(&st->stats.spill_ns, st->stats.spill_hist, t0);
    sess_make_cold(st, s);
    return KVP_OK;
}

kvp_status_t kvp_store_sess_spill(kvp_store_h st, kvp_sess_t *s)
{
    uint64_t     t0     = kvp_time_ns();
    kvp_status_t status = KVP_OK;

    if (!s->hot) {
        return KVP_OK;
    }
    if (!kvp_store_sess_on_disk_now(s)) { /* durable when the spill returns */
        status = kvp_store_sess_write(st, s, true);
    } else if (s->unsynced) {        /* written through the WAL without an fsync */
        status = kvp_tier_sync(st->tier);
        sess_synced(st, s, status);
    } else {
        return sess_spilled(st, s, status, t0);
    }
    st->stats.spill_syncs += status == KVP_OK;
    return sess_spilled(st, s, status, t0);
}

void kvp_store_sess_idle(kvp_store_h st, kvp_sess_t *s)
{
    s->busy = false;
    pthread_cond_broadcast(&st->io_done);
}

kvp_status_t kvp_store_sess_spill_unlocked(kvp_store_h st, kvp_sess_t *s)
{
    return kvp_store_sess_spill_group(st, &s, 1);
}

size_t kvp_store_sess_spill_gain(const kvp_sess_t *s)
{
    size_t gain = s->tail_slot.ptr != NULL ? kvp_pool_slot_size(s->desc.tail_len) : 0;

    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        const kvp_page_t *p = s->pages[i];

        gain += p->pins == 1 && p->slot.ptr != NULL ? kvp_pool_slot_size(p->len) : 0;
    }
    return gain;
}

/* The members of a group whose batch was built: whether each writes, and the namespace profile
 * generation its batch part saved. */
typedef struct {
    bool     write;
    uint32_t gen;
} group_member_t;

/* Build the group's one WriteBatch (*b_p, NULL when no member writes; its seq *seq_p) from the
 * hot, idle ones of v[0..n), compacted to the front; returns how many. A member whose part
 * cannot be built ends the group before it (a later round meets it first); *status_p is its
 * error if it was first. */
static size_t group_build(kvp_store_h st, kvp_sess_t **v, size_t n, group_member_t *g,
                          kvp_tier_batch_t **b_p, uint32_t *seq_p, kvp_status_t *status_p)
{
    size_t       m      = 0;
    kvp_status_t status = KVP_OK;

    *b_p   = NULL;
    *seq_p = batch_seq_next(st);
    for (size_t i = 0; i < n && status == KVP_OK; i++) {
        kvp_sess_t *s = v[i];

        if (!s->hot || s->busy) {
            continue;
        }
        g[m].write = !kvp_store_sess_on_disk_now(s);
        g[m].gen   = 0;
        if (g[m].write && *b_p == NULL && (*b_p = kvp_tier_batch_create()) == NULL) {
            KVP_LOG_ERROR(MOD, "no memory for the write batch of session %s", s->key.sid);
            status = KVP_ERR_NO_MEMORY;
        } else if (g[m].write) {
            status = sess_batch_add(st, s, *b_p, *seq_p, &g[m].gen);
        }
        if (status == KVP_OK) {
            v[m++] = s;
        }
    }
    for (size_t i = 0; i < m; i++) {
        sess_batch_unmark(v[i]);
    }
    *status_p = m == 0 ? status : KVP_OK;
    return m;
}

kvp_status_t kvp_store_sess_spill_group(kvp_store_h st, kvp_sess_t **v, size_t n)
{
    kvp_tier_batch_t *b = NULL;
    group_member_t   *g = kvp_malloc((n ? n : 1) * sizeof(*g), "spill group");
    uint64_t          t0 = kvp_time_ns();
    kvp_status_t      status;
    bool              io = false;
    uint32_t          seq;
    size_t            m;

    if (g == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to spill %zu sessions", n);
        return KVP_ERR_NO_MEMORY;
    }
    m = group_build(st, v, n, g, &b, &seq, &status);
    for (size_t i = 0; i < m; i++) {
        io = io || g[i].write || v[i]->unsynced;
    }
    if (io) {
        for (size_t i = 0; i < m; i++) {
            v[i]->busy = true; /* pinned: nobody releases, replaces or evicts it meanwhile */
        }
        pthread_mutex_unlock(&st->lock);
        /* one segment fdatasync + one WAL fsync for all: the sync also covers members that were
         * only written through before (their bytes are older than this commit's) */
        status = b != NULL ? kvp_tier_batch_commit(st->tier, b, KVP_TIER_SYNC)
                           : kvp_tier_sync(st->tier);
        pthread_mutex_lock(&st->lock);
        for (size_t i = 0; i < m; i++) {
            v[i]->busy = false;
            if (status == KVP_OK && g[i].write) {
                sess_written(st, v[i], KVP_TIER_SYNC, seq, g[i].gen);
            } else if (status == KVP_OK) {
                kvp_store_sess_synced(st, v[i]);
            }
        }
        pthread_cond_broadcast(&st->io_done);
        if (status == KVP_OK) {
            st->stats.spill_syncs++;
            st->stats.spill_bytes += b != NULL ? kvp_tier_batch_bytes(b) : 0;
        } else {
            st->stats.disk_errors++; /* once for the group: the members it had to write stay hot */
        }
    }
    kvp_tier_batch_destroy(b);
    for (size_t i = 0; i < m; i++) {
        /* cold only now, after the sync; a member whose version is on disk and synced needs none,
         * so it goes cold even when the commit failed: its DRAM goes with no write, and a full
         * disk still leaves room for reads */
        bool none = kvp_store_sess_on_disk_now(v[i]) && !v[i]->unsynced;

        (void)sess_spilled(st, v[i], none ? KVP_OK : status, t0);
    }
    kvp_free(g);
    return status;
}

kvp_status_t kvp_store_sess_adopt_orphans(kvp_sess_t *s, kvp_sess_t *old)
{
    size_t       n_old = kvp_store_sess_page_count(old), n_new = kvp_store_sess_page_count(s);
    size_t       cap = old->n_orphans + n_old, n = 0;
    kvp_page_t **v = kvp_malloc((cap ? cap : 1) * sizeof(*v), "session orphans");

    if (v == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to keep the older version of session %s whole on disk; "
                      "its unnamed pages stay until the next open's sweep", s->key.sid);
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n_new; i++) {
        s->pages[i]->marked = true; /* named by s: no orphan */
    }
    for (size_t i = 0; i < old->n_orphans; i++) { /* an update of an update: they move to s */
        kvp_page_t *p = old->orphans[i];

        if (p->marked) {
            p->nsess--; /* s names it again (and holds it through its pages) */
        } else {
            p->marked = true;
            v[n++]    = p;
        }
    }
    for (size_t i = 0; i < n_old; i++) {
        kvp_page_t *p = old->pages[i];

        if (!p->marked) {
            p->marked = true;
            p->nsess++; /* old's own name goes with its release */
            v[n++] = p;
        }
    }
    for (size_t i = 0; i < n_new; i++) {
        s->pages[i]->marked = false;
    }
    for (size_t i = 0; i < n; i++) {
        v[i]->marked = false;
    }
    kvp_free(old->orphans);
    old->orphans   = NULL;
    old->n_orphans = 0;
    s->orphans     = v;
    s->n_orphans   = n;
    return KVP_OK;
}

void kvp_store_sess_orphans_let_go(kvp_store_h st, kvp_sess_t *s)
{
    size_t n = s->n_orphans;

    if (n == 0) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        kvp_store_page_pin(st, s->orphans[i]); /* alive until pages_let_go unpins it */
        s->orphans[i]->nsess--;
    }
    kvp_store_pages_let_go(st, s->orphans, n);
    kvp_free(s->orphans);
    s->orphans   = NULL;
    s->n_orphans = 0;
}

/* A session lets go of its name on p (pinned: a hot session's page, unpinned too); an entry
 * nothing needs any more goes. */
static void page_unname(kvp_store_h st, kvp_page_t *p, bool pinned)
{
    p->nsess--;
    if (pinned) {
        kvp_store_page_unpin(st, p);
    } else if (p->pins == 0 && p->slot.ptr == NULL && !p->on_disk) {
        kvp_store_page_forget(st, p);
    }
}

/* The in-memory part of removing a session: page refs (its orphans' too: their disk copies, if
 * any, are the caller's), tail, lists, table. */
void kvp_store_sess_release(kvp_store_h st, kvp_sess_t *s)
{
    size_t n = kvp_store_sess_page_count(s);

    for (size_t i = 0; i < s->n_orphans; i++) {
        page_unname(st, s->orphans[i], false);
    }
    kvp_free(s->orphans);

    kvp_index_sess_remove(&st->sessions, s);
    if (s->hot) {
        kvp_list_del(&s->lru);
    } else {
        kvp_otree_remove(&st->cold_by_use, &s->cold_node);
    }
    kvp_store_sess_synced(st, s); /* off store->unsynced */
    kvp_pool_free(&st->pool, &s->tail_slot);
    for (size_t i = 0; i < n; i++) {
        page_unname(st, s->pages[i], s->hot);
    }
    kvp_free(s->pages);
    kvp_free(s->desc.chunk_keys);
    kvp_free(s);
}

kvp_status_t kvp_store_sess_remove(kvp_store_h st, kvp_sess_t *s, uint64_t tomb_version)
{
    size_t        n     = kvp_store_sess_page_count(s);
    kvp_page_t  **gone  = kvp_malloc((n ? n : 1) * sizeof(*gone), "session remove");
    size_t        ngone = 0, nwait = 0; /* gone[0, ngone), waiting: gone[n - nwait, n) */
    kvp_status_t  status = KVP_OK;
    kvp_tomb_pending_t tomb;
    uint64_t      now = kvp_time_ns();

    if (gone == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to remove session %s", s->key.sid);
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) { /* pages only this session names: they go, or wait (a put) */
        if (s->pages[i]->nsess == 1 && !kvp_store_page_waiting(st, s->pages[i], now)) {
            gone[ngone++] = s->pages[i];
        } else if (s->pages[i]->nsess == 1) {
            gone[n - ++nwait] = s->pages[i];
        }
    }
    if (st->tier != NULL) {
        kvp_tier_batch_t *b = kvp_tier_batch_create();
        bool              any = s->on_disk;

        if (b == NULL) {
            kvp_free(gone);
            KVP_LOG_ERROR(MOD, "no memory to remove session %s", s->key.sid);
            return KVP_ERR_NO_MEMORY;
        }
        if (s->on_disk) {
            kvp_tier_batch_del_session(st->tier, b, s->key.ns, s->key.sid);
        }
        kvp_store_tomb_stage(st, b, s->key.ns, s->key.sid, tomb_version, &tomb);
        if (s->tomb_on_disk && !tomb.staged) { /* an older one the record never replaced: it
                                                * would refuse, or at open remove, a later put */
            kvp_store_tomb_batch_del(st, b, s->key.ns, s->key.sid);
        }
        any = any || tomb.staged || s->tomb_on_disk;
        for (size_t i = 0; i < ngone; i++) {
            if (gone[i]->on_disk) {
                kvp_tier_pkey_t pk = {gone[i]->ns, gone[i]->key, gone[i]->layer};

                kvp_tier_batch_del_page(st->tier, b, &pk);
                any = true;
            }
        }
        if (any) {
            status = kvp_store_commit(st, b, st->durability == KVP_DURABILITY_SYNC
                                                            ? KVP_TIER_SYNC : KVP_TIER_WAL);
        }
        kvp_tier_batch_destroy(b);
        if (status != KVP_OK) { /* nothing changed: no tombstone, the session stays */
            st->stats.disk_errors++;
            kvp_free(gone);
            return status;
        }
    } else { /* DRAM only: the tombstone lives as long as the process */
        kvp_store_tomb_stage(st, NULL, s->key.ns, s->key.sid, tomb_version, &tomb);
    }
    kvp_store_sess_orphans_let_go(st, s); /* the record that named them is deleted */
    /* on disk now (or no disk): into memory; without memory for it the delete still happened and
     * the caller hears NO_MEMORY (a retry finds no session and records the tombstone again) */
    status = kvp_store_tomb_staged_done(st, &tomb);
    for (size_t i = 0; i < ngone; i++) {
        gone[i]->on_disk = false;
    }
    for (size_t i = 0; i < ngone; i++) {
        gone[i]->pins++; /* keep the entries alive across the release */
    }
    for (size_t i = n - nwait; i < n; i++) {
        gone[i]->pins++;
    }
    kvp_store_sess_release(st, s);
    for (size_t i = 0; i < ngone; i++) {
        gone[i]->pins--;
        if (gone[i]->nsess == 0 && gone[i]->pins == 0) {
            kvp_store_page_forget(st, gone[i]);
        }
    }
    for (size_t i = n - nwait; i < n; i++) { /* their grace runs out later */
        if (gone[i]->nsess == 0) {
            kvp_store_page_unnamed(st, gone[i]);
        }
        kvp_store_page_unpin(st, gone[i]);
    }
    kvp_free(gone);
    return status;
}

void kvp_store_pages_let_go(kvp_store_h st, kvp_page_t **pages, size_t n)
{
    kvp_tier_batch_t *b = st->tier != NULL ? kvp_tier_batch_create() : NULL;
    size_t            ndel = 0;
    kvp_status_t      status = KVP_OK;
    uint64_t          now = kvp_time_ns();

    for (size_t i = 0; b != NULL && i < n; i++) {
        kvp_page_t *p = pages[i];

        if (kvp_store_page_garbage(st, p, now) && p->on_disk && !p->deleting) {
            kvp_tier_pkey_t pk = {p->ns, p->key, p->layer};

            kvp_tier_batch_del_page(st->tier, b, &pk);
            p->deleting = true;
            ndel++;
        }
    }
    if (ndel > 0) {
        status = kvp_store_commit(st, b, st->durability == KVP_DURABILITY_SYNC ? KVP_TIER_SYNC
                                                                               : KVP_TIER_WAL);
        st->stats.disk_errors += status != KVP_OK;
    }
    kvp_tier_batch_destroy(b); /* NULL (no tier, or no memory): the open-time sweep does it */
    for (size_t i = 0; i < n; i++) {
        kvp_page_t *p = pages[i];

        if (p->deleting) {
            p->deleting = false;
            p->on_disk  = status != KVP_OK;
        }
        if (p->nsess == 0 && p->named && kvp_store_page_waiting(st, p, now)) {
            kvp_store_page_unnamed(st, p); /* a put's record may still come: later */
        }
        kvp_store_page_unpin(st, p); /* garbage off disk: its DRAM copy and entry go too */
    }
}

void kvp_store_page_unnamed(kvp_store_h st, kvp_page_t *p)
{
    if (!kvp_list_linked(&p->unnamed)) {
        kvp_list_push_tail(&st->unnamed, &p->unnamed);
    }
}

void kvp_store_unnamed_expire(kvp_store_h st)
{
    uint64_t     now = kvp_time_ns();
    size_t       n = 0, cap = 0;
    kvp_page_t **v = NULL;

    if (now - st->last_unnamed_ns < 100000000ull) { /* at most every 100 ms */
        return;
    }
    st->last_unnamed_ns = now;
    for (kvp_list_t *e = st->unnamed.next, *next; e != &st->unnamed; e = next) {
        kvp_page_t *p = KVP_CONTAINER_OF(e, kvp_page_t, unnamed);

        next = e->next;
        if (p->nsess > 0) {
            kvp_list_del(&p->unnamed); /* named again */
        } else if (!kvp_store_page_waiting(st, p, now)) {
            if (n == cap) {
                kvp_page_t **g = kvp_realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v),
                                             "unnamed pages");

                if (g == NULL) {
                    break; /* the rest next time */
                }
                v = g;
            }
            kvp_list_del(&p->unnamed);
            kvp_store_page_pin(st, p); /* kvp_store_pages_let_go unpins it */
            v[n++] = p;
        }
    }
    if (n > 0) {
        kvp_store_pages_let_go(st, v, n);
    }
    kvp_free(v);
}

void kvp_store_sess_touch(kvp_store_h st, kvp_sess_t *s)
{
    if (s->hot) {
        s->last_ns = kvp_time_ns();
        kvp_list_del(&s->lru);
        kvp_list_push_tail(&st->hot_lru, &s->lru);
    } else { /* last_ns is its key in the tree */
        kvp_otree_remove(&st->cold_by_use, &s->cold_node);
        s->last_ns = kvp_time_ns();
        kvp_store_sess_cold_link(st, s);
    }
}

int kvp_store_sess_use_cmp(const kvp_tnode_t *a, const kvp_tnode_t *b)
{
    const kvp_sess_t *x = KVP_CONTAINER_OF(a, kvp_sess_t, cold_node);
    const kvp_sess_t *y = KVP_CONTAINER_OF(b, kvp_sess_t, cold_node);

    if (x->last_ns != y->last_ns) {
        return x->last_ns < y->last_ns ? -1 : 1;
    }
    return (uintptr_t)x < (uintptr_t)y ? -1 : (uintptr_t)x > (uintptr_t)y;
}

void kvp_store_sess_cold_link(kvp_store_h st, kvp_sess_t *s)
{
    (void)kvp_otree_insert(&st->cold_by_use, &s->cold_node); /* unique: the address decides ties */
}

/* The least recently used cold session, NULL when there is none. */
static kvp_sess_t *cold_oldest(const kvp_store_h st)
{
    kvp_otree_iter_t it;
    kvp_tnode_t     *n;

    kvp_otree_seek(&st->cold_by_use, &it, NULL, NULL);
    n = kvp_otree_next(&it);
    return n != NULL ? KVP_CONTAINER_OF(n, kvp_sess_t, cold_node) : NULL;
}

/* The cold session's tail, from its record on disk (read with the store lock dropped). */
static kvp_status_t sess_tail_load(kvp_store_h st, kvp_sess_t *s, uint64_t *bytes)
{
    uint8_t           *blob;
    size_t             blen;
    kvp_session_desc_t d;
    uint64_t           version;
    kvp_status_t       status;

    pthread_mutex_unlock(&st->lock);
    status = kvp_tier_session_get(st->tier, s->key.ns, s->key.sid, &blob, &blen);
    pthread_mutex_lock(&st->lock);
    if (status != KVP_OK) {
        st->stats.disk_errors += status != KVP_ERR_NOT_FOUND;
        KVP_LOG_ERROR(MOD, "session %s record could not be read: %s", s->key.sid,
                      kvp_status_str(status));
        return status;
    }
    status = kvp_store_record_unpack(blob, blen, s->key.ns, s->key.sid, &d, &version);
    kvp_free(blob);
    if (status == KVP_OK && (d.n_chunks != s->desc.n_chunks || d.tail_len != s->desc.tail_len ||
                             (d.n_chunks > 0 && /* a tail-only record has no key array */
                              memcmp(d.chunk_keys, s->desc.chunk_keys,
                                     d.n_chunks * sizeof(kvp_key128_t)) != 0))) {
        kvp_session_desc_clear(&d);
        status = KVP_ERR_CORRUPT;
    }
    if (status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "session %s record on disk is unusable: %s", s->key.sid,
                      kvp_status_str(status));
        st->stats.crc_failures += status == KVP_ERR_CORRUPT;
        return status;
    }
    (void)kvp_store_room_wait(st, kvp_pool_slot_size(d.tail_len)); /* s is busy: safe */
    status = kvp_pool_alloc(&st->pool, d.tail_len, &s->tail_slot);
    if (status == KVP_ERR_NO_SPACE) {
        status = kvp_store_make_room(st, kvp_pool_slot_size(d.tail_len), s);
        if (status == KVP_OK) {
            status = kvp_pool_alloc(&st->pool, d.tail_len, &s->tail_slot);
        }
    }
    if (status == KVP_OK) {
        memcpy(s->tail_slot.ptr, d.tail, d.tail_len);
        s->desc.tail = s->tail_slot.ptr;
        *bytes += d.tail_len;
    } else {
        s->tail_slot.ptr = NULL;
        KVP_LOG_ERROR(MOD, "no room for the tail of session %s", s->key.sid);
    }
    kvp_session_desc_clear(&d);
    return status;
}

kvp_status_t kvp_store_sess_restore(kvp_store_h st, kvp_sess_t *s, uint32_t *pages_p,
                                    uint64_t *bytes_p)
{
    size_t       n = kvp_store_sess_page_count(s), nmiss = 0;
    kvp_page_t **miss;
    kvp_status_t status = KVP_OK;
    uint64_t     bytes  = 0, t0 = kvp_time_ns();

    miss = kvp_malloc((n ? n : 1) * sizeof(*miss), "session restore");
    if (miss == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to restore session %s", s->key.sid);
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        if (s->pages[i]->slot.ptr == NULL) {
            if (!s->pages[i]->on_disk) {
                KVP_LOG_ERROR(MOD, "session %s: chunk %zu layer %zu was lost earlier (it failed "
                              "its check, or its bytes were missing from the disk at open)",
                              s->key.sid, i / s->desc.layers, i % s->desc.layers);
                kvp_free(miss);
                return KVP_ERR_CORRUPT;
            }
            miss[nmiss++] = s->pages[i];
        }
    }
    if (nmiss > 0 && st->tier == NULL) {
        kvp_free(miss);
        return KVP_ERR_NOT_FOUND;
    }
    s->busy = true; /* the disk reads below run with the store lock dropped */
    if (!s->hot && s->desc.n_tail > 0) {
        status = sess_tail_load(st, s, &bytes);
    }
    if (status == KVP_OK) {
        status = kvp_store_pages_load(st, miss, nmiss, s, &bytes);
        if (status == KVP_ERR_NOT_FOUND) { /* the record names a page the disk lost */
            KVP_LOG_ERROR(MOD, "session %s could not be restored: pages it names are missing "
                          "from the disk", s->key.sid);
            status = KVP_ERR_CORRUPT;
        } else if (status != KVP_OK) {
            KVP_LOG_ERROR(MOD, "session %s could not be restored: %s", s->key.sid,
                          kvp_status_str(status));
        }
    }
    kvp_free(miss);
    *pages_p = status == KVP_OK ? (uint32_t)nmiss : 0;
    *bytes_p = status == KVP_OK ? bytes : 0;
    if (status == KVP_OK && !s->hot) {
        for (size_t i = 0; i < n; i++) {
            kvp_store_page_pin(st, s->pages[i]);
        }
        s->hot = true;
        kvp_otree_remove(&st->cold_by_use, &s->cold_node);
        kvp_list_push_tail(&st->hot_lru, &s->lru);
        st->stats.restores++;
        st->stats.restore_bytes += bytes;
        time_record(&st->stats.restore_ns, st->stats.restore_hist, t0);
    } else if (status != KVP_OK && !s->hot) { /* never half restored */
        kvp_pool_free(&st->pool, &s->tail_slot);
        s->tail_slot.ptr = NULL;
        s->desc.tail     = NULL;
    }
    kvp_store_sess_idle(st, s);
    return status;
}

/* ---- eviction ---- */

static bool over(const kvp_store_h st, size_t target)
{
    return st->pool.used > target;
}

void kvp_store_drop_cached(kvp_store_h st, size_t target)
{
    kvp_list_t *e, *next;

    for (e = st->idle_pages.next; e != &st->idle_pages && over(st, target); e = next) {
        kvp_page_t *p = KVP_CONTAINER_OF(e, kvp_page_t, idle);

        next = e->next;
        if (p->on_disk) {
            kvp_store_page_drop_dram(st, p);
        }
    }
}

kvp_status_t kvp_store_make_room(kvp_store_h st, size_t need, const kvp_sess_t *keep)
{
    size_t       target;
    kvp_list_t  *e, *next;
    kvp_status_t status = KVP_OK, failed = KVP_OK; /* failed: the first spill that failed */

    if (need > st->pool.budget) {
        KVP_LOG_ERROR(MOD, "an object of %zu bytes cannot fit a dram budget of %zu", need,
                      st->pool.budget);
        return KVP_ERR_NO_SPACE;
    }
    target = st->pool.budget - need < st->low_bytes ? st->pool.budget - need : st->low_bytes;

    kvp_store_drop_cached(st, target); /* 1. cached copies of on-disk pages */
    /* 2. least-recently-used sessions, in one walk: a spill or drop unlinks only its own session
     * (and pages), so the next one is still linked; going back to the head would meet the ones
     * passed over again, at every step */
    for (e = st->hot_lru.next; e != &st->hot_lru && over(st, target); e = next) {
        kvp_sess_t *s = KVP_CONTAINER_OF(e, kvp_sess_t, lru);

        next = e->next;
        if (s == keep || s->busy) {
            continue;
        }
        if (st->tier != NULL) {
            /* after a failed spill (a full disk) write nothing more: only sessions whose version
             * is on disk and synced go, their DRAM let go with no write; the others keep theirs */
            if (failed != KVP_OK && (!kvp_store_sess_on_disk_now(s) || s->unsynced)) {
                continue;
            }
            status = kvp_store_sess_spill(st, s);
            if (status != KVP_OK) {
                KVP_LOG_WARN(MOD, "eviction: session %s could not be spilled (%s); evicting only "
                             "sessions already on disk", s->key.sid, kvp_status_str(status));
                failed = status;
                status = KVP_OK;
            }
        } else {
            KVP_LOG_DEBUG(MOD, "no ssd tier: dropping session %s", s->key.sid);
            status = kvp_store_sess_remove(st, s, 0);
            if (status != KVP_OK) { /* still at the head: retrying now would spin on it */
                KVP_LOG_ERROR(MOD, "eviction stopped: session %s could not be dropped (%s)",
                              s->key.sid, kvp_status_str(status));
                return status;
            }
            st->stats.dropped++;
        }
    }
    if (failed != KVP_OK) { /* 3. would write: no; room is what the walk found */
        return st->pool.used + need <= st->pool.budget ? KVP_OK : failed;
    }
    /* 3. loose pages (named by no session): to disk when there is one, else dropped */
    if (over(st, target)) {
        kvp_tier_batch_t *b = st->tier != NULL ? kvp_tier_batch_create() : NULL;
        size_t            freed = 0, excess = st->pool.used - target;

        if (st->tier != NULL && b == NULL) { /* the pages would be marked written, and dropped */
            KVP_LOG_ERROR(MOD, "no memory for the batch that writes loose pages out");
            return KVP_ERR_NO_MEMORY;
        }

        for (e = st->idle_pages.next; e != &st->idle_pages && freed < excess; e = e->next) {
            kvp_page_t     *p  = KVP_CONTAINER_OF(e, kvp_page_t, idle);
            kvp_tier_pkey_t pk = {p->ns, p->key, p->layer};

            if (b != NULL && !p->on_disk) {
                kvp_tier_batch_put_page(st->tier, b, &pk, p->slot.ptr, p->len);
            }
            freed += kvp_pool_slot_size(p->len);
        }
        if (b != NULL) {
            status = kvp_store_commit(st, b, KVP_TIER_WAL);
            if (status != KVP_OK) {
                st->stats.disk_errors++;
            } else {
                st->stats.spill_bytes += kvp_tier_batch_bytes(b);
            }
            kvp_tier_batch_destroy(b);
        }
        freed = 0;
        for (e = st->idle_pages.next; e != &st->idle_pages && freed < excess && status == KVP_OK;
             e = next) {
            kvp_page_t *p = KVP_CONTAINER_OF(e, kvp_page_t, idle);

            next = e->next;
            freed += kvp_pool_slot_size(p->len);
            if (st->tier != NULL) {
                p->on_disk = true;
                kvp_store_page_drop_dram(st, p);
            } else {
                KVP_LOG_DEBUG(MOD, "no ssd tier: dropping a loose page of layer %u", p->layer);
                kvp_store_page_forget(st, p);
            }
        }
    }
    if (status != KVP_OK) {
        return status;
    }
    return st->pool.used + need <= st->pool.budget ? KVP_OK : KVP_ERR_NO_SPACE;
}

/* Past the high watermark at the end of a call: dropping cached copies of on-disk pages is cheap
 * and stays here; spilling sessions is the background spiller's (spiller.c), so the request that
 * crossed the watermark does not wait for it. Without a tier victims are dropped, no disk I/O. */
void kvp_store_evict_if_needed(kvp_store_h st)
{
    if (st->pool.used <= st->high_bytes) {
        return;
    }
    if (st->tier == NULL) {
        (void)kvp_store_make_room(st, 0, NULL);
        return;
    }
    kvp_store_drop_cached(st, st->low_bytes);
    if (st->pool.used > st->high_bytes) {
        kvp_store_spiller_kick(st);
    }
}

void kvp_store_expire_idle(kvp_store_h st)
{
    uint64_t now = kvp_time_ns();

    if (now - st->last_sweep_ns < 1000000ull) { /* at most once a millisecond */
        return;
    }
    st->last_sweep_ns = now;
    /* both in last-use order, least recent first: the hot list as touches append to it, the
     * cold tree by its key, so the first one not expired ends each */
    for (int which = 0; which < 2; which++) {
        for (;;) {
            kvp_sess_t *s = which == 1 ? cold_oldest(st)
                            : kvp_list_empty(&st->hot_lru)
                                ? NULL
                                : KVP_CONTAINER_OF(st->hot_lru.next, kvp_sess_t, lru);

            if (s == NULL || now - s->last_ns < st->ttl_ns || s->busy) {
                break;
            }
            KVP_LOG_DEBUG(MOD, "session %s idle past its ttl; expired", s->key.sid);
            if (kvp_store_sess_remove(st, s, 0) != KVP_OK) {
                break;
            }
            st->stats.expired++;
        }
    }
}
