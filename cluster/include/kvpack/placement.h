/* placement.h - where a session lives among a static list of nodes: rendezvous (highest random
 * weight) hashing of (namespace, session id) over the peers (DESIGN.md §8). Each node scores a
 * session with a 64-bit XXH3 hash of its peer string and the session; the nodes in descending
 * score order are the session's preference list (primary first, then replicas). Removing a node
 * moves only the sessions it was first for; a new node takes about 1/(n+1) of them. */
#ifndef KVPACK_PLACEMENT_H
#define KVPACK_PLACEMENT_H

#include <stdint.h>

#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_PLACEMENT_MAX_NODES 64u

/* The score of one node (its peer string, e.g. "10.0.0.7:7070") for session (ns, sid). Depends
 * only on the three values, never on the other peers or their order. */
uint64_t kvp_placement_score(const char *node, uint64_t ns, const char *sid);

/* Rank n nodes (borrowed peer strings) for (ns, sid): order[0..n) receives node indices by
 * descending score, equal scores by ascending index. KVP_ERR_INVALID when n is 0 or over
 * KVP_PLACEMENT_MAX_NODES, or a pointer is NULL. */
kvp_status_t kvp_placement_rank(const char *const *nodes, uint32_t n, uint64_t ns,
                                const char *sid, uint32_t *order);

#ifdef __cplusplus
}
#endif
#endif
