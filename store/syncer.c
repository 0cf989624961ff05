/* syncer.c - durability "interval": puts are written through (WAL + segment, no fsync) and one
 * thread per store makes them durable every sync_interval_ms with one segment fdatasync + WAL
 * fsync, only when something was written since the last sync (no idle fsyncs). Write
 * generations say which sessions a sync covered: each commit without an fsync bumps
 * store->write_gen, an unsynced session remembers its write's generation, and a tick clears the
 * marks up to the generation it took before its sync started.
 * Main flow: kvp_store_open -> kvp_store_syncer_start -> syncer_main -> kvp_store_sync_tick. */
#include "store_int.h"
#include "kvpack/log.h"

#include <errno.h>
#include <time.h>

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

static void *syncer_main(void *arg)
{
    kvp_store_h st = arg;

    pthread_mutex_lock(&st->lock);
    while (!st->sync_stop) {
        struct timespec dl;

        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += (time_t)(st->sync_interval_ns / 1000000000u);
        dl.tv_nsec += (long)(st->sync_interval_ns % 1000000000u);
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        while (!st->sync_stop &&
               pthread_cond_timedwait(&st->sync_wake, &st->lock, &dl) != ETIMEDOUT) {
        }
        (void)kvp_store_sync_tick(st, NULL, NULL); /* also once more on the way out */
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

kvp_status_t kvp_store_syncer_start(kvp_store_h st)
{
    pthread_condattr_t ca;
    int                rc;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->sync_wake, &ca);
    pthread_condattr_destroy(&ca);
    st->syncer_on = true;
    rc            = pthread_create(&st->syncer, NULL, syncer_main, st);
    if (rc != 0) {
        st->syncer_on = false;
        pthread_cond_destroy(&st->sync_wake);
        KVP_LOG_ERROR(MOD, "cannot start the interval syncer thread: error %d", rc);
        return KVP_ERR_NO_MEMORY;
    }
    return KVP_OK;
}

void kvp_store_syncer_stop(kvp_store_h st)
{
    if (!st->syncer_on) {
        return;
    }
    pthread_mutex_lock(&st->lock);
    st->sync_stop = true;
    pthread_cond_signal(&st->sync_wake);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->syncer, NULL); /* its last tick syncs what the interval had not yet */
    pthread_cond_destroy(&st->sync_wake);
    st->syncer_on = false;
}
