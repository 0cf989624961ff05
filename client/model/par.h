/* par.h - work sharing for the model runner: run tasks 0..n-1 of a function on the caller and a
 * few sleeping worker threads (KVP_THREADS, default the online CPUs). One job at a time: callers
 * are the single runner thread; fn must not call kvp_par_for itself. */
#ifndef KVPACK_MODEL_PAR_H
#define KVPACK_MODEL_PAR_H

#include <stdint.h>

typedef void (*kvp_par_fn_t)(void *arg, uint32_t task);

void     kvp_par_for(uint32_t ntasks, kvp_par_fn_t fn, void *arg);
uint32_t kvp_par_threads(void);

#endif
