/* node_work.h - the node's request workers (cluster-internal): a fixed pool of threads that run
 * request jobs off the transport thread, so a request that waits on the disk (a cold session's
 * restore, a write-through put, backpressure at the DRAM budget) holds up its own connection's
 * later requests but not other clients. Jobs go in with kvp_node_work_submit from any thread,
 * run in submission order on the first free worker, and come back, in completion order, through
 * kvp_node_work_take after the wake callback said so. Ordering per connection is node.c's job.
 * Main flow: kvp_node_work_submit -> worker_main -> run(ctx, job) -> done list -> wake(arg). */
#ifndef KVPACK_CLUSTER_NODE_WORK_H
#define KVPACK_CLUSTER_NODE_WORK_H

#include "kvpack/status.h"

#define KVP_NODE_WORKERS_DEFAULT 4u
#define KVP_NODE_WORKERS_MAX     64u

/* Embedded first in the caller's job struct; the pool links jobs through it. */
typedef struct kvp_node_job {
    struct kvp_node_job *next;
} kvp_node_job_t;

typedef struct kvp_node_work *kvp_node_work_h;

typedef struct {
    unsigned threads;                               /* 1..KVP_NODE_WORKERS_MAX */
    void   (*run)(void *ctx, kvp_node_job_t *job);  /* on a worker thread */
    void    *ctx;
    void   (*wake)(void *arg);                      /* on a worker thread, after a job is done */
    void    *wake_arg;
} kvp_node_work_params_t;

kvp_status_t    kvp_node_work_start(const kvp_node_work_params_t *params, kvp_node_work_h *w_p);
/* Finish every submitted job, then join the threads; the done list is dropped with the pool,
 * so take it first. NULL is a no-op. */
void            kvp_node_work_stop(kvp_node_work_h w);
void            kvp_node_work_submit(kvp_node_work_h w, kvp_node_job_t *job);
/* The jobs finished since the last call, oldest first (linked through next); NULL if none. */
kvp_node_job_t *kvp_node_work_take(kvp_node_work_h w);

#endif
