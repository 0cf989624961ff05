/* syncer.c - durability "interval": puts are written through (WAL + segment, no fsync) and one
 * thread per store makes them durable every sync_interval_ms with one segment fdatasync + WAL
 * fsync, only when something was written since the last sync (no idle fsyncs). Write
 * generations say which sessions a sync covered: each commit without an fsync bumps
 * store->write_gen, an unsynced session remembers its write's generation, and a tick clears the
 * marks up to the generation it took before its sync started.
 * Main flow: kvp_store_open -> kvp_store_syncer_start (a ticker.c thread) -> kvp_store_sync_tick. */
#include "store_int.h"
#include "kvpack/log.h"


#define MOD "store"

kvp_status_t kvp_store_sync_tick(kvp_store_h st, void (*during)(void *arg), void *arg)
{
    uint64_t     gen = st->write_gen; /* every commit up to gen has returned: the sync covers it */
    kvp_status_t status;

    if (gen == st->synced_gen) {
        return KVP_OK;
    }
    pthread_mutex_unlock(&st->lock);
    if (during != NULL) {
        during(arg);
    }
    status = kvp_tier_sync(st->tier);
    pthread_mutex_lock(&st->lock);
    if (status != KVP_OK) {
        st->stats.disk_errors++;
        KVP_LOG_ERROR(MOD, "interval sync failed: %s (%llu writes wait for the next one)",
                      kvp_status_str(status), (unsigned long long)(gen - st->synced_gen));
        return status;
    }
    st->stats.interval_syncs++;
    st->synced_gen = gen > st->synced_gen ? gen : st->synced_gen;
    while (!kvp_list_empty(&st->unsynced)) {
        kvp_sess_t *s = KVP_CONTAINER_OF(st->unsynced.next, kvp_sess_t, unsynced_link);

        if (s->write_gen > gen) {
            break; /* written while the sync ran: the next tick covers it */
        }
        kvp_store_sess_synced(st, s);
    }
    return KVP_OK;
}

static void syncer_tick(kvp_store_h st)
{
    (void)kvp_store_sync_tick(st, NULL, NULL);
}

kvp_status_t kvp_store_syncer_start(kvp_store_h st)
{
    return kvp_ticker_start(&st->syncer, st, "interval syncer", st->sync_interval_ns, true,
                            syncer_tick); /* a last tick on the way out */
}

void kvp_store_syncer_stop(kvp_store_h st)
{
    kvp_ticker_stop(&st->syncer); /* its last tick syncs what the interval had not yet */
}
