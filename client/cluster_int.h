/* cluster_int.h - internal to client/: the cluster handle's layout and the routing helpers that
 * cluster.c (the routed calls) and cluster_stream.c (the streamed put) share. */
#ifndef KVPACK_CLUSTER_INT_H
#define KVPACK_CLUSTER_INT_H

#include "kvpack/cluster.h"
#include "kvpack/etcd.h"

/* One node of the adopted list. */
typedef struct {
    char         addr[KVP_ETCD_ADDR_MAX]; /* HOST:PORT */
    kvp_client_h client;                  /* NULL until first use */
    uint64_t     down_until;              /* skipped until then (kvp_time_ns) */
    kvp_status_t down_status;
    kvp_put_stream_h stream;              /* a streamed put's, kept between sessions (NULL: none
                                           * or in use: cluster_stream.c takes and returns it) */
    uint64_t         stream_ns;           /* the namespace it puts into */
} kvp_cluster_node_t;

/* A put stream to an also node (outside the list), kept between sessions. */
typedef struct {
    char             addr[KVP_ETCD_ADDR_MAX];
    kvp_put_stream_h stream;
    uint64_t         stream_ns;
} kvp_cluster_kept_t;

struct kvp_cluster {
    uint32_t                  n, replicas;
    kvp_cluster_node_t        node[KVP_CLUSTER_MAX_NODES];
    const char               *peer[KVP_CLUSTER_MAX_NODES]; /* node[i].addr, for placement */
    kvp_client_params_t       cp;
    kvp_cluster_progress_cb_t progress_cb;
    void                     *progress_arg;
    kvp_etcd_watch_h          watch;                       /* NULL: a static list */
    uint64_t                  gen;                         /* of the adopted list */
    char                      where[512];                  /* "PREFIX at etcd URL" */
    kvp_cluster_kept_t        also[KVP_CLUSTER_STREAM_ALSO_MAX];
};

/* One routed call: its report (the caller's, or local), the rank order and the failures seen. */
typedef struct {
    kvp_cluster_report_t *r, local;
    uint32_t              order[KVP_CLUSTER_MAX_NODES];
    kvp_status_t          unreach, other; /* first unreachable / first other (not NOT_FOUND) */
} kvp_cluster_route_t;

/* 1 when addr is HOST:PORT short enough for a node entry; else logged ("<what> '<addr>' is not
 * HOST:PORT") and 0. */
int kvp_cluster_addr_ok(const char *addr, const char *what);
/* Clear the report, adopt etcd's newest members (routed calls) and rank the nodes for (ns, sid);
 * sid NULL: no ranking (list). */
kvp_status_t kvp_cluster_route_begin(kvp_cluster_h c, int routed, uint64_t ns, const char *sid,
                                     kvp_cluster_report_t *report, kvp_cluster_route_t *rt);
/* Record what node answered at stage in r; an unreachable answer (several peers) makes the
 * handle skip the node for 5 s. */
void kvp_cluster_report_add(kvp_cluster_h c, kvp_cluster_report_t *r, uint32_t node,
                            kvp_status_t s, const char *stage);
/* The status a node failed with within the last 5 s (several peers only), else KVP_OK: such a
 * node is skipped. */
kvp_status_t kvp_cluster_node_down(kvp_cluster_h c, uint32_t node);
/* The node's client, created on first use. A node that failed recently (several peers only) is
 * not tried: its status comes back as "skipped". Failures are recorded in r. */
kvp_status_t kvp_cluster_node_open(kvp_cluster_h c, uint32_t node, kvp_cluster_report_t *r,
                                   kvp_client_h *client_p);
/* Statuses every node would give for the same put: no point trying the next. */
int kvp_cluster_put_stops(kvp_status_t s);
/* After a put at version landed on some node: each node in r that answered but refused it for a
 * reason of its own (full, out of memory, a message over its --max-msg, pages evicted) may
 * still hold an older copy, which a get ranking that node first would serve in place of the
 * put; it is dropped (no tombstone; a newer one is kept). Entries of an append's probe and
 * skipped nodes are not asked. Best effort: one that fails is left for kvpack repair. */
void kvp_cluster_drop_older(kvp_cluster_h c, const kvp_cluster_report_t *r, uint64_t ns,
                            const char *sid, uint64_t version);
/* The whole session to one node: one chunk (layers pages) per put_pages, then the last chunk
 * with the record (one PUT_SESSION when it fits a batch); *stage_p names the step that failed,
 * and the reason the node gave for refusing it is logged as a warning. */
kvp_status_t kvp_cluster_put_one(kvp_cluster_h c, kvp_client_h cl, uint32_t node, uint64_t ns,
                                 const char *sid, const void *const *pages, const size_t *lens,
                                 size_t n, const kvp_session_desc_t *desc, uint64_t version,
                                 const char **stage_p);

#endif
