/* node_etcd.h - a node's registration in etcd (cluster-internal): grant a lease of ttl_s, put
 * PREFIX<advertise> -> the member value under it, and keep it alive on a thread of its own
 * (every ttl/3; a failed keepalive is logged and retried, a lost lease re-granted and the key
 * put again). The key is written only while absent or holding this process's own value: one
 * another process holds (a second kvpackd advertising the same address) is never taken over.
 * Stop revokes the lease, so the node leaves the list at once. */
#ifndef KVPACK_CLUSTER_NODE_ETCD_H
#define KVPACK_CLUSTER_NODE_ETCD_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvpack/status.h"

typedef struct kvp_node_etcd *kvp_node_etcd_h;

/* Register once (grant + put) before returning: any failure is logged and returned, and nothing
 * keeps running; KVP_ERR_EXISTS when another process holds the key (logged with its pid).
 * *registered (may be NULL) is 1 while the key is known to be in etcd with this node's value,
 * else 0. */
kvp_status_t kvp_node_etcd_start(const char *endpoints, const char *prefix, const char *advertise,
                                 uint32_t ttl_s, const char *data_dir, atomic_int *registered,
                                 kvp_node_etcd_h *reg_p);
/* Stop the keepalive thread and revoke the lease (logged when etcd cannot be reached: the key
 * then expires after the TTL). NULL is a no-op. */
void         kvp_node_etcd_stop(kvp_node_etcd_h reg);

#endif
