/* node_obs.h - what a node tells operators (cluster-internal): its life-cycle state, request
 * counters by op and result, bytes in and out, a handling-time histogram per op, and the HTTP
 * routes /health and /metrics (Prometheus text format 0.0.4, with the store's spill and restore
 * time histograms) that kvp_node_run serves with --http.
 * Threads: the transport thread counts (relaxed atomics, no lock); the HTTP thread reads the
 * counters and takes a store snapshot (kvp_store_stats, the store's own lock) under store_mu,
 * which only kvp_node_obs_set_store also takes, so a store being closed is never read. */
#ifndef KVPACK_CLUSTER_NODE_OBS_H
#define KVPACK_CLUSTER_NODE_OBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "http.h"
#include "kvpack/hist.h"
#include "kvpack/status.h"
#include "kvpack/store.h"
#include "kvpack/wire.h"

#define KVP_NODE_OBS_OPS     KVP_WIRE_OP_MAX /* slot 0: an op the node could not decode */
#define KVP_NODE_OBS_RESULTS 101u            /* slot -status for 0..-99, slot 100 anything else */
#define KVP_NODE_OBS_BUCKETS KVP_HIST_BUCKETS /* finite bounds 50 us .. 10 s (kvpack/hist.h) */
/* A serving node whose main loop (it wakes at least every 100 ms) has not run for longer than
 * this is stuck: /health answers 503 "stalled: ...", so its probe takes it out of service. */
#define KVP_NODE_STALL_MS    5000u

typedef enum {
    KVP_NODE_STARTING = 0, /* opening the store, not yet listening over UCX */
    KVP_NODE_SERVING  = 1, /* store open and UCX listener up: /health says ok */
    KVP_NODE_STOPPING = 2  /* a signal arrived: closing the listener and the store */
} kvp_node_state_t;

typedef struct {
    atomic_int       state;                                         /* kvp_node_state_t */
    uint64_t         start_ns;                                      /* set before any reader */
    atomic_uint_fast64_t loop_ns;    /* kvp_time_ns of the main loop's last wake-up */
    pthread_mutex_t  store_mu;                                      /* guards store (see above) */
    kvp_store_h      store;                                         /* NULL: not open / closing */
    atomic_uint_fast64_t answered[KVP_NODE_OBS_OPS][KVP_NODE_OBS_RESULTS]; /* replies sent */
    atomic_uint_fast64_t req_bytes[KVP_NODE_OBS_OPS];              /* header + data received */
    atomic_uint_fast64_t rep_bytes[KVP_NODE_OBS_OPS];              /* header + data sent */
    atomic_uint_fast64_t busy_ns[KVP_NODE_OBS_OPS];                /* time in the handler */
    /* requests counted under the first bound >= their busy_ns, not cumulative; last slot: +Inf */
    atomic_uint_fast64_t busy_hist[KVP_NODE_OBS_OPS][KVP_NODE_OBS_BUCKETS + 1];
    atomic_int       etcd_registered; /* -1: no --etcd; else 1 while the etcd key is alive */
    atomic_uint_fast64_t reply_waits; /* a connection's request held back: replies not taken */
    atomic_uint_fast64_t conns;       /* client connections open */
    atomic_uint_fast64_t conns_rejected; /* connection requests rejected at --max-conns */
    atomic_uint_fast64_t max_conns;   /* --max-conns (0: no limit) */
} kvp_node_obs_t;

void kvp_node_obs_init(kvp_node_obs_t *obs);
void kvp_node_obs_cleanup(kvp_node_obs_t *obs);
/* KVP_NODE_SERVING also counts as the main loop's first wake-up. */
void kvp_node_obs_set_state(kvp_node_obs_t *obs, kvp_node_state_t state);
/* Transport thread: the main loop woke up (each turn; /health's stall check). */
void kvp_node_obs_loop(kvp_node_obs_t *obs);
/* Publish the open store (or NULL before closing it); waits for a scrape that is reading it. */
void kvp_node_obs_set_store(kvp_node_obs_t *obs, kvp_store_h store);

/* Transport thread: a request of op (any value; out-of-range ones count as unknown) took bytes on
 * the wire and busy_ns in its handler (added to busy_ns and to the op's histogram); a reply with
 * status and bytes (header + data) was sent. */
void kvp_node_obs_request(kvp_node_obs_t *obs, uint32_t op, uint64_t bytes, uint64_t busy_ns);
void kvp_node_obs_reply(kvp_node_obs_t *obs, uint32_t op, kvp_status_t status, uint64_t bytes);

/* Transport thread: a connection's next request waits for its replies to be taken. */
void kvp_node_obs_parked(kvp_node_obs_t *obs);
/* Transport thread: client connections open now, requests rejected at the cap since start. */
void kvp_node_obs_conns(kvp_node_obs_t *obs, uint64_t open, uint64_t rejected);

/* kvp_http_route_cb_t with arg = the kvp_node_obs_t: GET /health (200 "ok"; 503 "starting",
 * "shutting down", or "stalled: ..." past KVP_NODE_STALL_MS), GET /metrics, else 404. */
void kvp_node_obs_route(void *obs, const char *path, kvp_http_reply_t *reply);

#endif
