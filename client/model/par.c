/* par.c - a tiny work-sharing pool for the runner's loops (matmul rows, attention heads). The
 * caller and N-1 sleeping workers claim tasks from one atomic counter tagged with a job
 * generation, so a worker that is slow to wake (2 shared cores) never delays the caller: the
 * caller simply runs the remaining tasks itself and only waits for tasks already claimed.
 * Chosen over OpenMP because spinning OpenMP barriers lose badly on an oversubscribed machine.
 * Threads: KVP_THREADS, else the online CPUs (at most 16). Main flow: kvp_par_for -> run_tasks. */
#include "par.h"
#include "kvpack/log.h"
#include "kvpack/num.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define PAR_MAX_THREADS 16

static struct {
    pthread_once_t    once;
    pthread_mutex_t   mu;
    pthread_cond_t    cv;
    uint32_t          nthreads;
    uint32_t          gen;        /* job generation, under mu */
    _Atomic uint64_t  claim;      /* gen << 32 | next task */
    _Atomic uint32_t  done;       /* tasks finished in this generation */
    _Atomic uint32_t  ntasks;     /* read by a worker late from the last job as it is set */
    kvp_par_fn_t      fn;
    void             *arg;
} par = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER,
         .cv = PTHREAD_COND_INITIALIZER};

/* Claim and run tasks of generation gen until none is left. */
static void run_tasks(uint32_t gen)
{
    for (;;) {
        uint64_t c = atomic_load(&par.claim);
        uint32_t t = (uint32_t)c, n = atomic_load_explicit(&par.ntasks, memory_order_relaxed);

        if ((uint32_t)(c >> 32) != gen || t >= n) { /* n of a newer job: the CAS below fails */
            return;
        }
        if (atomic_compare_exchange_weak(&par.claim, &c, c + 1)) {
            par.fn(par.arg, t);
            atomic_fetch_add(&par.done, 1);
        }
    }
}

static void *worker(void *unused)
{
    uint32_t seen = 0;

    (void)unused;
    for (;;) {
        uint32_t gen;

        pthread_mutex_lock(&par.mu);
        while (par.gen == seen) {
            pthread_cond_wait(&par.cv, &par.mu);
        }
        gen = seen = par.gen;
        pthread_mutex_unlock(&par.mu);
        run_tasks(gen);
    }
    return NULL;
}

static void par_init(void)
{
    const char *env = getenv("KVP_THREADS");
    uint64_t    t   = 0;
    long        n   = sysconf(_SC_NPROCESSORS_ONLN);

    if (env != NULL && kvp_num_parse_u64(env, &t) == 0 && t > 0) {
        n = t > PAR_MAX_THREADS ? PAR_MAX_THREADS : (long)t;
    } else if (env != NULL) {
        KVP_LOG_WARN("model", "KVP_THREADS='%s' is not a thread count: using %ld", env, n);
    }

    par.nthreads = n < 1 ? 1 : (n > PAR_MAX_THREADS ? PAR_MAX_THREADS : (uint32_t)n);
    for (uint32_t i = 1; i < par.nthreads; i++) {
        pthread_t th;

        if (pthread_create(&th, NULL, worker, NULL) != 0) {
            par.nthreads = i;
            break;
        }
        pthread_detach(th);
    }
}

uint32_t kvp_par_threads(void)
{
    pthread_once(&par.once, par_init);
    return par.nthreads;
}

void kvp_par_for(uint32_t ntasks, kvp_par_fn_t fn, void *arg)
{
    uint32_t gen;

    if (ntasks == 0) {
        return;
    }
    if (ntasks == 1 || kvp_par_threads() == 1) {
        for (uint32_t t = 0; t < ntasks; t++) {
            fn(arg, t);
        }
        return;
    }
    pthread_mutex_lock(&par.mu);
    gen = ++par.gen;
    /* close the claim word first: a worker still looking at the previous job must not match
     * its leftover counter against this job's parameters */
    atomic_store(&par.claim, ((uint64_t)gen << 32) | UINT32_MAX);
    par.fn     = fn;
    par.arg    = arg;
    atomic_store_explicit(&par.ntasks, ntasks, memory_order_relaxed);
    atomic_store(&par.done, 0);
    atomic_store(&par.claim, (uint64_t)gen << 32);
    pthread_cond_broadcast(&par.cv);
    pthread_mutex_unlock(&par.mu);
    run_tasks(gen);
    while (atomic_load(&par.done) != ntasks) {
        sched_yield();
    }
}
