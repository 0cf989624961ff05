/* cluster.h - libkvpack over several kvpackd nodes (DESIGN.md §8): a static peer list or the
 * nodes registered in etcd (kept current by a watch), sessions placed by rendezvous hashing of
 * (namespace, session id) (kvpack/placement.h), replication factor r. One kvp_client per node,
 * connected on first use; the client routes directly, no master. With one peer every call is the
 * single-node kvp_client call (same requests, same statuses). A node that failed with a peer/link
 * status or a timeout is skipped by this handle for 5 s. Thread-safety: one handle per thread
 * (an etcd handle's watch thread only publishes a list; the calls adopt it, see
 * kvp_cluster_sync). */
#ifndef KVPACK_CLUSTER_H
#define KVPACK_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/kvpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_CLUSTER_MAX_NODES 64u

typedef struct kvp_cluster *kvp_cluster_h;

/* Called as a put ships a session to one node: done of total chunks (then the record). */
typedef void (*kvp_cluster_progress_cb_t)(void *arg, const char *node, uint64_t done,
                                          uint64_t total);

enum kvp_cluster_params_field {
    KVP_CLUSTER_PARAM_PEERS    = KVP_BIT(0),
    KVP_CLUSTER_PARAM_REPLICAS = KVP_BIT(1),
    KVP_CLUSTER_PARAM_CLIENT   = KVP_BIT(2),
    KVP_CLUSTER_PARAM_PROGRESS = KVP_BIT(3),
    KVP_CLUSTER_PARAM_ETCD     = KVP_BIT(4),
};

typedef struct kvp_cluster_params {
    uint64_t                   field_mask;   /* MUST be first */
    const char                *peers;        /* "host:port[,host:port...]", distinct, at most
                                              * KVP_CLUSTER_MAX_NODES (borrowed; copied) */
    uint32_t                   replicas;     /* r: copies a put makes, 1..peers; default 1 */
    const kvp_client_params_t *client;       /* every node's client params; server is ignored
                                              * (borrowed for create) */
    kvp_cluster_progress_cb_t  progress_cb;
    void                      *progress_arg;
    const char                *etcd;         /* in place of peers: "URL[,URL...]"; the members
                                              * follow etcd (see kvp_cluster_sync) (borrowed) */
    const char                *etcd_prefix;  /* NULL: "/kvpack/nodes/" (borrowed) */
} kvp_cluster_params_t;

/* One node a call tried, in the order it tried them. */
typedef struct {
    uint32_t     node;   /* index in the peer list */
    kvp_status_t status;
    const char  *stage;  /* static: "connect", "pages", "session record", "get", "delete",
                          * "list", or "skipped" (failed within the last 5 s, not tried again) */
} kvp_cluster_try_t;

/* What a call did on each node: put: n_ok replicas took the whole session; get: served_by
 * answered; delete: n_ok nodes deleted it; list: n_ok nodes were listed. */
typedef struct {
    uint32_t          n_tried;
    kvp_cluster_try_t tried[KVP_CLUSTER_MAX_NODES];
    uint32_t          n_ok;
    uint32_t          served_by;
} kvp_cluster_report_t;

/* The union of the nodes' session lists: each (ns, sid) once, in (ns, sid) order; the info is the
 * lowest-indexed holder's, holders[i] has bit k set when node k listed sessions[i], damaged[i]
 * when node k's copy is damaged (kvp_session_info_t.damaged; also in holders), on_disk[i] when
 * node k's current record of it is on its disk (KVP_SESSION_ON_DISK; also in holders). */
typedef struct {
    uint32_t            n;
    kvp_session_info_t *sessions;
    uint64_t           *holders;
    uint64_t           *damaged;
    int                 truncated; /* max reached while some node held more */
    uint32_t            requests;  /* LIST round trips, all nodes */
    /* with KVP_LIST_DELETED (kvp_cluster_list_sessions_ex), else NULL / 0: */
    uint32_t            stride;    /* nodes per row of versions */
    uint64_t           *versions;  /* versions[i * stride + k]: node k's record or tombstone
                                    * version of sessions[i] (0: none, or before versions) */
    uint64_t           *deleted;   /* bit k: node k holds a tombstone of sessions[i] (then not
                                    * in holders[i]); sessions[i] is a tombstone entry
                                    * (deleted = 1) only when no node holds a record */
    uint64_t           *on_disk;   /* (with or without the flag) bit k: node k holds its current
                                    * record on disk (KVP_SESSION_ON_DISK; also in holders[i]) */
} kvp_cluster_list_t;

/* Exactly one of PEERS and ETCD. KVP_ERR_INVALID (logged) for an empty, malformed, duplicate or
 * too long peer list, or replicas outside 1..peers (etcd: replicas >= 1; a put while fewer
 * nodes are registered makes fewer copies). Connects to no node.
 * ETCD: reads the members under etcd_prefix (etcd unreachable: KVP_ERR_PEER_UNREACHABLE /
 * KVP_ERR_TIMEOUT; nobody registered: KVP_ERR_NOT_FOUND; each logged), then a background thread
 * watches the prefix and publishes every change (reconnecting with backoff while etcd is down,
 * keeping the last members meanwhile). More than KVP_CLUSTER_MAX_NODES registered: the first 64
 * by address, with a warning. */
kvp_status_t kvp_cluster_create(const kvp_cluster_params_t *params, kvp_cluster_h *cluster_p);
/* 1 when two of the HOST:PORT items addrs[0..n) name one node, *i_p < *j_p the first such pair:
 * the same text, or the same port and an address their hosts both resolve to (127.0.0.1:7070
 * and localhost:7070; each host resolved once; one that does not resolve matches only its own
 * text, and its connect reports it). A static list naming one node twice is refused
 * (kvp_cluster_create: KVP_ERR_INVALID): it would count as two copies, and repair would drop
 * one as surplus. */
int kvp_cluster_addr_dup(const char *const *addrs, uint32_t n, uint32_t *i_p, uint32_t *j_p);
/* Stops the watch (promptly, also while etcd is down) and closes every client. NULL: no-op. */
void         kvp_cluster_destroy(kvp_cluster_h cluster);

/* The members, etcd handles: the routed calls (rank, put_session, get_session, delete_session,
 * list_sessions) and kvp_cluster_sync first adopt the newest published list (a cheap generation
 * check): the clients of nodes still present are kept (keyed by address), removed nodes' are
 * closed, new nodes are added unconnected. The node indices of size, peer, client, put_node,
 * stat and of a report refer to the list adopted last, so they stay valid until the next routed
 * call or sync. With no node registered a routed call fails with KVP_ERR_PEER_UNREACHABLE (logged:
 * no nodes registered under PREFIX) until one registers. Static lists never change (generation
 * 0). Adopt now; *generation_p (may be NULL): the adopted list's generation, 1 for the first list
 * and +1 for each change the watch saw. KVP_OK (also with no node registered). */
kvp_status_t kvp_cluster_sync(kvp_cluster_h cluster, uint64_t *generation_p);

uint32_t     kvp_cluster_size(kvp_cluster_h cluster);
uint32_t     kvp_cluster_replicas(kvp_cluster_h cluster);
const char  *kvp_cluster_peer(kvp_cluster_h cluster, uint32_t node); /* NULL past the end */
/* Node indices by preference for (ns, sid): order[0] is the primary (kvp_placement_rank); the
 * first kvp_cluster_size entries are set. An etcd handle's list may grow as rank adopts it, so
 * there order must hold KVP_CLUSTER_MAX_NODES entries. */
kvp_status_t kvp_cluster_rank(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                              uint32_t *order);
/* The node's client, connected on first use (for calls this layer does not route). */
kvp_status_t kvp_cluster_client(kvp_cluster_h cluster, uint32_t node, kvp_client_h *client_p);

/* Store a whole session on the first r nodes, in rank order, that take it: pages[0..n) (borrowed;
 * chunk-major, desc->layers per chunk) go one chunk per kvp_client_put_pages, then the record,
 * every replica at the same version (kvp_version_now() once per call; a node holding a newer
 * record or tombstone answers KVP_ERR_STALE, which stops the put: a newer write won).
 * A node that fails (also out of memory) is skipped and the next in rank takes its place; a
 * data error every node
 * would give (bad page, wrong codec, bad argument, too large) stops at once. KVP_OK when at least
 * one node took it (report->n_ok says how many) and none answered KVP_ERR_STALE (that status
 * then: the next repair replaces this write with the newer one); else the first node's status.
 * Once it landed, a node that answered but refused it for a reason of its own (full, out of
 * memory, over its message limit) has its older copy dropped (kvp_client_drop_session at
 * version - 1), so a get ranking that node first does not serve what this put replaced. */
kvp_status_t kvp_cluster_put_session(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                     const void *const *pages, const size_t *lens, size_t n,
                                     const kvp_session_desc_t *desc,
                                     kvp_cluster_report_t *report);
/* Append tokens to a session on every copy of it at the newest version, all at one new version
 * (the writer's clock), so a copy that missed it is older and repair replaces it. The session's
 * nodes are probed in rank order (kvp_client_session_info) until r copies at the newest version
 * seen answered, or every node; each of those gets kvp_client_append_at naming that version (a
 * copy that moved meanwhile refuses). Older copies are left alone (KVP_ERR_INVALID in the report,
 * nothing sent); a tombstone at least as new as every copy (an rm) means KVP_ERR_NOT_FOUND.
 * chunks: the sealed chunks the session holds as the caller knows it (its record's n_chunks): a
 * copy that holds another count refuses (KVP_ERR_INVALID) instead of sealing tokens at the wrong
 * place. The session must exist (put it first: the prefill's put); KVP_OK when at least one copy
 * took it (report->n_ok copies; *sealed_p from the first) and none answered KVP_ERR_STALE (a
 * newer write there: that status), else the first refusal (NOT_FOUND when no node holds it); a
 * copy that refused it for a reason of its own is dropped, as for a put. Invalid input every node would refuse stops at the first. The report
 * lists nodes as their outcome is known: the probe's misses first, then the appends. */
kvp_status_t kvp_cluster_append(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                const kvp_append_t *append, uint32_t chunks, uint32_t *sealed_p,
                                kvp_cluster_report_t *report);
/* Store a whole session on one node, whatever its rank (pages and record as put_session does;
 * repair uses it to bring a session back to its r copies), at version (repair: the source
 * copy's, unchanged; 0: the node's clock, as kvp_client_put_session_version). The node's status;
 * KVP_ERR_INVALID for a node past the list or pages that are not whole chunks. */
kvp_status_t kvp_cluster_put_node(kvp_cluster_h cluster, uint32_t node, uint64_t ns,
                                  const char *sid, const void *const *pages, const size_t *lens,
                                  size_t n, const kvp_session_desc_t *desc, uint64_t version,
                                  kvp_cluster_report_t *report);
/* Streamed put over the cluster (DESIGN 5, "Prefill put": layer by layer to the session's owner
 * nodes and, in P/D mode, straight to the decode node). open ranks (ns, sid) and opens a
 * kvp_put_stream (its own connection and shipping thread) to each of the first r nodes of the
 * rank that accept one (a node skipped for a recent failure or refusing the connection is passed
 * over, as put_session passes it over), and to each node of also ("HOST:PORT[,...]", at most
 * KVP_CLUSTER_STREAM_ALSO_MAX: e.g. the kvpackd beside the decode engine; outside the placement
 * and not one of the r; NULL: none). No ranked node connects: that status (also logged). push
 * hands a list of pages (borrowed until finish or close returns) to every stream and returns at
 * once; it returns an error only when a ranked node refused a page for a reason every node would
 * give (bad page, wrong codec, stale version: put_session's stops), so the producer can stop
 * early. finish writes the record on every stream at one version (kvp_version_now()); a node
 * restarted mid-session or a dropped connection is the stream's own to mend (kvp_put_stream
 * re-ships the session on its new connection); a stream that failed for its connection all the
 * same (its node died, timed out, or was down when the stream connected anew) is opened afresh
 * once to its own node, which gets every pushed page and the record in one go; a ranked stream that still failed (or failed otherwise) is replaced by the
 * next node of the rank, which gets them the same way, until r nodes hold the session or the
 * rank runs out. KVP_OK when at least one ranked node took the session and none answered
 * KVP_ERR_STALE (else that; a refusing node's older copy is dropped, as for a put) (report: what each ranked
 * node did, n_ok copies: stage "stream" for a stream's outcome, "stream (reconnected)" for its
 * fresh one, "replacement" for a node that took a failed stream's place, "connect"/"skipped"
 * from open; a node that left an etcd list meanwhile is reported as index kvp_cluster_size);
 * else the first ranked failure. The also nodes never decide the status: also_status[i] (may be
 * NULL; one per also node) gets each one's (an also node that is also ranked: the ranked
 * stream's). After a push returned such an error, finish writes no record anywhere: it returns
 * that status, the report empty and every also_status that status. One session per stream,
 * used by one thread (the cluster handle's): a push or finish
 * after its finish is KVP_ERR_INVALID. */
#define KVP_CLUSTER_STREAM_ALSO_MAX 8u
typedef struct kvp_cluster_stream *kvp_cluster_stream_h;
kvp_status_t kvp_cluster_stream_open(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                     const char *also, kvp_cluster_stream_h *stream_p);
kvp_status_t kvp_cluster_stream_push(kvp_cluster_stream_h stream, const void *const *pages,
                                     const size_t *lens, size_t n);
kvp_status_t kvp_cluster_stream_finish(kvp_cluster_stream_h stream, const kvp_session_desc_t *desc,
                                       const void *const *pages, const size_t *lens, size_t n,
                                       kvp_cluster_report_t *report, kvp_status_t *also_status);
void         kvp_cluster_stream_close(kvp_cluster_stream_h stream); /* NULL is a no-op */

/* Fetch from the first node in rank order that has it (kvp_client_get_session, or _expect when
 * expect is not NULL); any failure moves to the next. A node without it that holds an rm
 * tombstone says its version: a later node's copy no newer than that is deleted too
 * (KVP_ERR_NOT_FOUND from it, before any page reaches a callback). All failed: a status other than NOT_FOUND
 * or unreachable if one came back (e.g. CORRUPT), else a node's unreachable/timeout status if any
 * node could not be reached, else KVP_ERR_NOT_FOUND. */
kvp_status_t kvp_cluster_get_session(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                     const kvp_page_params_t *expect, kvp_session_pages_t **out_p,
                                     kvp_cluster_report_t *report);
/* As kvp_cluster_get_session, with kvp_client_get_session_cb's callback: each run of verified
 * pages is handed to cb (in this thread) as it lands. A node that fails part-way is left for the
 * next one in rank order, whose runs start again at item 0: pages handed out before are void
 * then, so a caller that decodes as runs arrive starts over when first goes back to 0. */
kvp_status_t kvp_cluster_get_session_cb(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                        const kvp_page_params_t *expect, kvp_client_pages_cb_t cb,
                                        void *cb_arg, kvp_session_pages_t **out_p,
                                        kvp_cluster_report_t *report);
/* As kvp_cluster_get_session_cb (cb may be NULL), serving only the newest copy the nodes that
 * answer hold: every node is asked first, at once, for its record or tombstone of the session (as
 * a replicated append asks), and the session is fetched from the first node in rank order holding
 * the newest version. A tombstone at least as new: KVP_ERR_NOT_FOUND. kvp_cluster_get_session
 * serves the first copy in rank order, which is an older version when that node missed the
 * latest put (it was down or paused; `kvpack repair` replaces it later); this one does not, at
 * the cost of a round trip to every node before the get, and of a node that does not answer (its
 * deadline, then skipped for 5 s; it is in the report, and a newer copy may be on it). The node
 * holding the newest version failing after it answered: the next at that version, else its
 * status (an older copy is not served instead); none answered: unreachable; else
 * KVP_ERR_NOT_FOUND. */
kvp_status_t kvp_cluster_get_session_latest(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                            const kvp_page_params_t *expect,
                                            kvp_client_pages_cb_t cb, void *cb_arg,
                                            kvp_session_pages_t **out_p,
                                            kvp_cluster_report_t *report);
/* Delete on every node (rank order), one version (kvp_version_now()) for all: each node keeps a
 * tombstone, also one that had no copy, so a copy that comes back later is refused. KVP_OK when some node deleted it and every one of the first
 * r was reached; a first-r node that was unreachable gives its status even when others deleted
 * it (it may still hold a copy: report->n_ok says how many did). Deleted nowhere: unreachable if
 * a node was, else the first other error, else KVP_ERR_NOT_FOUND. */
kvp_status_t kvp_cluster_delete_session(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                        kvp_cluster_report_t *report);
/* List every node (kvp_client_list_sessions with page_size and max each) and merge; at most max
 * sessions (0: all). KVP_OK when at least one node answered; unreachable ones are in report. */
kvp_status_t kvp_cluster_list_sessions(kvp_cluster_h cluster, uint32_t page_size, uint32_t max,
                                       kvp_cluster_list_t **out_p, kvp_cluster_report_t *report);
/* As kvp_cluster_list_sessions, with flags KVP_LIST_DELETED: tombstones too, and the per-node
 * versions (kvp_cluster_list_t.stride, versions, deleted) that repair compares. */
kvp_status_t kvp_cluster_list_sessions_ex(kvp_cluster_h cluster, uint32_t page_size, uint32_t max,
                                          uint64_t flags, kvp_cluster_list_t **out_p,
                                          kvp_cluster_report_t *report);
void         kvp_cluster_list_free(kvp_cluster_list_t *list); /* NULL is a no-op */
kvp_status_t kvp_cluster_stat(kvp_cluster_h cluster, uint32_t node, kvp_node_stat_t *stat_p);
/* kvp_client_scrub on one node of the cluster (the handle's timeout bounds the wait). */
kvp_status_t kvp_cluster_scrub(kvp_cluster_h cluster, uint32_t node, kvp_scrub_result_t *out);

/* Membership from etcd read once (one-shot commands; a long-lived handle uses params.etcd): the
 * nodes registered under prefix (NULL: "/kvpack/nodes/", kvpackd --etcd) at etcd "URL[,URL...]",
 * sorted by address, as "HOST:PORT,HOST:PORT..." for kvp_cluster_params_t.peers (*peers_p:
 * kvp_free it).
 * A malformed entry under the prefix is skipped with a warning (kvpack/etcd.h). etcd
 * unreachable: KVP_ERR_PEER_UNREACHABLE / KVP_ERR_TIMEOUT; nobody registered: KVP_ERR_NOT_FOUND.
 * Each logged. More than KVP_CLUSTER_MAX_NODES: the first ones by address, with a warning (as a
 * handle that follows etcd takes them). n_p may be NULL. */
kvp_status_t kvp_cluster_peers_etcd(const char *etcd, const char *prefix, char **peers_p,
                                    uint32_t *n_p);

/* True for the statuses a dead, partitioned, silent or stopping node gives: ERR_TIMEOUT,
 * ERR_CANCELED, ERR_PEER_UNREACHABLE, ERR_PEER_GONE, ERR_SHUTTING_DOWN (not ERR_PROTOCOL: that
 * node answered). */
int          kvp_cluster_status_unreachable(kvp_status_t s);

#ifdef __cplusplus
}
#endif
#endif
