/* node_work.c - the node's request worker pool (node_work.h): one mutex, a FIFO of jobs to run
 * with a condition variable for idle workers, and a FIFO of finished jobs that the transport
 * thread takes after a wake. Main flow: kvp_node_work_submit -> worker_main -> run -> done. */
#include "node_work.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <pthread.h>

#define MOD "node"

typedef struct {
    kvp_node_job_t *head, *tail;
} job_fifo_t;

struct kvp_node_work {
    kvp_node_work_params_t p;
    pthread_mutex_t        mu;
    pthread_cond_t         cv;      /* a job to run, or stop */
    job_fifo_t             todo;
    job_fifo_t             done;
    int                    stop;
    unsigned               started;
    pthread_t              tid[KVP_NODE_WORKERS_MAX];
};

static void fifo_push(job_fifo_t *f, kvp_node_job_t *job)
{
    job->next = NULL;
    if (f->tail != NULL) {
        f->tail->next = job;
    } else {
        f->head = job;
    }
    f->tail = job;
}

static void *worker_main(void *arg)
{
    kvp_node_work_h w = arg;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        kvp_node_job_t *job = w->todo.head;

        if (job == NULL) {
            if (w->stop) {
                break;
            }
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        w->todo.head = job->next;
        if (w->todo.head == NULL) {
            w->todo.tail = NULL;
        }
        pthread_mutex_unlock(&w->mu);
        w->p.run(w->p.ctx, job);
        pthread_mutex_lock(&w->mu);
        fifo_push(&w->done, job);
        pthread_mutex_unlock(&w->mu);
        w->p.wake(w->p.wake_arg); /* outside the lock: it may write to a file descriptor */
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

kvp_status_t kvp_node_work_start(const kvp_node_work_params_t *params, kvp_node_work_h *w_p)
{
    kvp_node_work_h w;

    *w_p = NULL;
    if (params->threads == 0 || params->threads > KVP_NODE_WORKERS_MAX || params->run == NULL ||
        params->wake == NULL) {
        KVP_LOG_ERROR(MOD, "request workers: %u threads (1..%u) and both callbacks needed",
                      params->threads, KVP_NODE_WORKERS_MAX);
        return KVP_ERR_INVALID;
    }
    w = kvp_calloc(1, sizeof(*w), "node workers");
    if (w == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    w->p = *params;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (; w->started < params->threads; w->started++) {
        if (pthread_create(&w->tid[w->started], NULL, worker_main, w) != 0) {
            KVP_LOG_ERROR(MOD, "cannot start request worker %u", w->started);
            kvp_node_work_stop(w);
            return KVP_ERR_NO_MEMORY;
        }
    }
    *w_p = w;
    return KVP_OK;
}

void kvp_node_work_stop(kvp_node_work_h w)
{
    if (w == NULL) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (unsigned i = 0; i < w->started; i++) {
        pthread_join(w->tid[i], NULL);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    kvp_free(w);
}

void kvp_node_work_submit(kvp_node_work_h w, kvp_node_job_t *job)
{
    pthread_mutex_lock(&w->mu);
    fifo_push(&w->todo, job);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

kvp_node_job_t *kvp_node_work_take(kvp_node_work_h w)
{
    kvp_node_job_t *jobs;

    pthread_mutex_lock(&w->mu);
    jobs         = w->done.head;
    w->done.head = w->done.tail = NULL;
    pthread_mutex_unlock(&w->mu);
    return jobs;
}
