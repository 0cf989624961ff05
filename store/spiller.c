/* spiller.c - the background spiller: one thread per store with an SSD tier that spills
 * least-recently-used sessions from the high watermark down to the low one, so the request that
 * crosses the watermark does not wait for the disk. Requests wait for it only at the budget
 * itself (kvp_store_room_wait, backpressure); kvp_store_quiesce waits for it to go idle. Victims
 * go in groups (group commit): one WriteBatch and one sync for up to spill_group_max sessions.
 * Main flow: evict_if_needed -> kvp_store_spiller_kick -> spiller_main -> spill_round ->
 * group_pick -> kvp_store_sess_spill_group (evict.c). A closing store spills every session only
 * in DRAM the same way (kvp_store_spill_at_close). */
#include "store_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#define MOD "store"

#define GROUP_BYTES (8u << 20) /* DRAM a group frees at most (past its first member) */

/* The next group: up to max least recently used hot sessions that no spill or restore holds,
 * while the DRAM they free stays short of excess and of GROUP_BYTES (at least one). */
static size_t group_pick(kvp_store_h st, kvp_sess_t **v, size_t max, size_t excess)
{
    size_t n = 0, gain = 0;

    for (kvp_list_t *e = st->hot_lru.next; e != &st->hot_lru && n < max; e = e->next) {
        kvp_sess_t *s = KVP_CONTAINER_OF(e, kvp_sess_t, lru);

        if (s->busy) {
            continue;
        }
        v[n++] = s;
        gain += kvp_store_sess_spill_gain(s);
        if (gain >= excess || gain >= GROUP_BYTES) {
            break;
        }
    }
    return n;
}

/* Where a round stops: the low watermark, or lower while a waiting call needs more room. */
static size_t round_target(const kvp_store_h st)
{
    size_t room = st->pool.budget - st->spill_need; /* a waiter's need is <= budget */

    return room < st->low_bytes ? room : st->low_bytes;
}

/* One round, store lock held: cached copies first, then groups of LRU sessions spilled with the
 * lock dropped for their disk writes and their one sync (other calls go on meanwhile; each group
 * broadcasts io_done, so a request waiting for room re-checks after every one) down to
 * round_target; what is still above the high watermark (loose pages) goes the synchronous way,
 * as before. */
static void spill_round(kvp_store_h st)
{
    kvp_status_t status = KVP_OK;
    kvp_sess_t  *one, **v = kvp_malloc(st->spill_group_max * sizeof(*v), "spill group");
    size_t       max      = v != NULL ? st->spill_group_max : 1;

    v = v != NULL ? v : &one; /* without memory for the list: one session per sync */
    kvp_store_drop_cached(st, round_target(st));
    while (status == KVP_OK && !st->spill_stop && st->pool.used > round_target(st)) {
        size_t n = group_pick(st, v, max, st->pool.used - round_target(st));

        if (n == 0) {
            break;
        }
        status = kvp_store_sess_spill_group(st, v, n); /* errors logged and counted there */
    }
    if (v != &one) {
        kvp_free(v);
    }
    if (status == KVP_OK && !st->spill_stop && st->pool.used > st->high_bytes) {
        (void)kvp_store_make_room(st, 0, NULL);
    }
}

static void *spiller_main(void *arg)
{
    kvp_store_h st = arg;

    pthread_mutex_lock(&st->lock);
    while (!st->spill_stop) {
        if (!st->spill_wanted) {
            pthread_cond_wait(&st->spill_wake, &st->lock);
            continue;
        }
        st->spill_wanted  = false;
        st->spill_running = true;
        spill_round(st);
        st->spill_running = false;
        st->spill_need    = 0; /* its waiters have room now or fall back to make_room */
        pthread_cond_broadcast(&st->io_done); /* room_wait and quiesce re-check */
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

kvp_status_t kvp_store_spiller_start(kvp_store_h st)
{
    int rc;

    st->spiller_on = true;
    rc             = pthread_create(&st->spiller, NULL, spiller_main, st);
    if (rc != 0) {
        st->spiller_on = false;
        KVP_LOG_ERROR(MOD, "cannot start the spiller thread: error %d", rc);
        return KVP_ERR_NO_MEMORY;
    }
    return KVP_OK;
}

void kvp_store_spiller_stop(kvp_store_h st)
{
    if (!st->spiller_on) {
        return;
    }
    pthread_mutex_lock(&st->lock);
    st->spill_stop = true;
    pthread_cond_signal(&st->spill_wake);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->spiller, NULL); /* a spill in flight completes first */
    st->spiller_on = false;
}

void kvp_store_spiller_kick(kvp_store_h st)
{
    if (st->spiller_on && !st->spill_wanted) {
        st->spill_wanted = true;
        pthread_cond_signal(&st->spill_wake);
    }
}

bool kvp_store_room_wait(kvp_store_h st, size_t need)
{
    bool waited = false;

    if (need > st->pool.budget) {
        return false; /* make_room reports it */
    }
    while (st->spiller_on && !st->spill_stop && st->pool.used + need > st->pool.budget) {
        st->spill_need = need > st->spill_need ? need : st->spill_need;
        if (!st->spill_wanted && !st->spill_running) {
            if (waited) {
                break; /* its round ended short of room: make_room takes it from here */
            }
            kvp_store_spiller_kick(st);
        }
        if (!waited) {
            st->stats.spill_waits++;
        }
        waited = true;
        pthread_cond_wait(&st->io_done, &st->lock);
    }
    return waited;
}

kvp_status_t kvp_store_quiesce(kvp_store_h st)
{
    kvp_status_t status;

    if (st == NULL) {
        KVP_LOG_ERROR(MOD, "quiesce with a NULL store");
        return KVP_ERR_INVALID;
    }
    pthread_mutex_lock(&st->lock);
    if (st->pool.used > st->high_bytes) {
        kvp_store_spiller_kick(st);
    }
    while (st->spiller_on && (st->spill_wanted || st->spill_running)) {
        pthread_cond_wait(&st->io_done, &st->lock);
    }
    status = st->pool.used <= st->high_bytes ? KVP_OK : KVP_ERR_NO_SPACE;
    if (status != KVP_OK) {
        KVP_LOG_DEBUG(MOD, "quiesced above the high watermark: %zu of %zu bytes in use, the rest "
                      "pinned or unwritable", st->pool.used, st->pool.budget);
    }
    pthread_mutex_unlock(&st->lock);
    return status;
}

/* Bytes of a session's pages (what a spill of it writes, the tail aside). */
static uint64_t sess_page_bytes(const kvp_sess_t *s)
{
    uint64_t b = 0;

    for (size_t i = 0; i < kvp_store_sess_page_count(s); i++) {
        b += s->pages[i]->len;
    }
    return b;
}

/* Sessions whose DRAM copy is not on disk (never spilled, or changed since), from the least
 * recently used: up to max of them into v while their page bytes stay short of GROUP_BYTES
 * past the first (*bytes_p: theirs), or, v NULL, all of them counted (*bytes_p: all bytes). */
static size_t unsaved_pick(kvp_store_h st, kvp_sess_t **v, size_t max, uint64_t *bytes_p)
{
    size_t   n     = 0;
    uint64_t bytes = 0;

    for (kvp_list_t *e = st->hot_lru.next; e != &st->hot_lru && (v == NULL || n < max);
         e = e->next) {
        kvp_sess_t *s = KVP_CONTAINER_OF(e, kvp_sess_t, lru);
        uint64_t    b;

        if (s->busy || kvp_store_sess_on_disk_now(s)) {
            continue;
        }
        b = sess_page_bytes(s);
        if (v != NULL && n > 0 && bytes + b > GROUP_BYTES) {
            break;
        }
        if (v != NULL) {
            v[n] = s;
        }
        n++;
        bytes += b;
    }
    *bytes_p = bytes;
    return n;
}

kvp_status_t kvp_store_spill_at_close(kvp_store_h st)
{
    kvp_status_t status = KVP_OK;
    kvp_sess_t  *one, **v = kvp_malloc(st->spill_group_max * sizeof(*v), "spill group");
    size_t       max = v != NULL ? st->spill_group_max : 1, left, done = 0;
    uint64_t     t0 = kvp_time_ns(), shown = t0, bytes, group;

    if (st->tier == NULL || st->durability != KVP_DURABILITY_SPILL) {
        kvp_free(v);
        return KVP_OK; /* nothing only in DRAM: written through (synced by the syncer's stop) */
    }
    v = v != NULL ? v : &one;
    kvp_tier_last_writes(st->tier); /* what the stop saves may use the disk reserve */
    pthread_mutex_lock(&st->lock);
    left = unsaved_pick(st, NULL, 0, &bytes);
    if (left > 0) {
        KVP_LOG_WARN(MOD, "stopping: spilling %zu sessions (%.1f MiB of pages) that are only in "
                     "DRAM, so a restart finds them", left, (double)bytes / 1048576.0);
    }
    while (status == KVP_OK) {
        size_t n = unsaved_pick(st, v, max, &group);

        if (n == 0) {
            break;
        }
        if (kvp_time_ns() - shown >= 2000000000ull) {
            shown = kvp_time_ns();
            KVP_LOG_WARN(MOD, "stopping: %zu sessions spilled, about %zu to go (%.1f MiB)", done,
                         left > done ? left - done : 0, (double)bytes / 1048576.0);
        }
        status = kvp_store_sess_spill_group(st, v, n); /* errors logged and counted there */
        if (status == KVP_OK) {
            done += n;
            bytes = group < bytes ? bytes - group : 0;
        }
    }
    if (status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "stopping: %zu sessions only in DRAM are lost: a spill failed (%s)",
                      unsaved_pick(st, NULL, 0, &bytes), kvp_status_str(status));
    } else if (done > 0) {
        KVP_LOG_WARN(MOD, "stopping: %zu sessions spilled in %.2f s", done,
                     (double)(kvp_time_ns() - t0) / 1e9);
    }
    pthread_mutex_unlock(&st->lock);
    if (v != &one) {
        kvp_free(v);
    }
    return status;
}
