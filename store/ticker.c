/* ticker.c - a store's periodic background thread: runs tick(st) with the store lock held every
 * period_ns until stopped (and, when asked, once more on the way out). The interval syncer
 * (syncer.c) and the segment compactor (compact.c) are tickers.
 * Main flow: kvp_ticker_start -> ticker_main (timed wait, tick) -> kvp_ticker_stop (join). */
#include "store_int.h"
#include "kvpack/log.h"

#include <errno.h>
#include <time.h>

#define MOD "store"

static void *ticker_main(void *arg)
{
    kvp_ticker_t *tk = arg;
    kvp_store_h   st = tk->st;

    pthread_mutex_lock(&st->lock);
    while (!__atomic_load_n(&tk->stop, __ATOMIC_RELAXED)) {
        struct timespec dl;

        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += (time_t)(tk->period_ns / 1000000000u);
        dl.tv_nsec += (long)(tk->period_ns % 1000000000u);
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        while (!__atomic_load_n(&tk->stop, __ATOMIC_RELAXED) &&
               pthread_cond_timedwait(&tk->wake, &st->lock, &dl) != ETIMEDOUT) {
        }
        if (!__atomic_load_n(&tk->stop, __ATOMIC_RELAXED) || tk->final_tick) {
            tk->tick(st);
        }
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

kvp_status_t kvp_ticker_start(kvp_ticker_t *tk, kvp_store_h st, const char *name,
                              uint64_t period_ns, bool final_tick, void (*tick)(kvp_store_h st))
{
    pthread_condattr_t ca;
    int                rc;

    *tk = (kvp_ticker_t){.st = st, .period_ns = period_ns, .final_tick = final_tick, .tick = tick};
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&tk->wake, &ca);
    pthread_condattr_destroy(&ca);
    tk->on = true;
    rc     = pthread_create(&tk->thread, NULL, ticker_main, tk);
    if (rc != 0) {
        tk->on = false;
        pthread_cond_destroy(&tk->wake);
        KVP_LOG_ERROR(MOD, "cannot start the %s thread: error %d", name, rc);
        return KVP_ERR_NO_MEMORY;
    }
    return KVP_OK;
}

void kvp_ticker_stop(kvp_ticker_t *tk)
{
    if (!tk->on) {
        return;
    }
    pthread_mutex_lock(&tk->st->lock);
    __atomic_store_n(&tk->stop, true, __ATOMIC_RELAXED); /* a tick may poll it unlocked */
    pthread_cond_signal(&tk->wake);
    pthread_mutex_unlock(&tk->st->lock);
    pthread_join(tk->thread, NULL);
    pthread_cond_destroy(&tk->wake);
    tk->on = false;
}
