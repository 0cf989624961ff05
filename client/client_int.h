/* client_int.h - internal to client/: the node client's handle and its calls (one request and
 * its reply in flight), shared by client.c (connection, calls, puts and control operations) and
 * client_get.c (fetching a session). */
#ifndef KVPACK_CLIENT_INT_H
#define KVPACK_CLIENT_INT_H

#include "kvpack/kvpack.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#define MAX_INFLIGHT 8 /* calls in flight per client, the ceiling of max_inflight */

/* One request slot: its reply (or failure) and whether its send still pins its data. */
typedef struct {
    int             used;
    int             done;      /* reply (or failure) recorded */
    int             sending;   /* our send still pinned in the transport */
    uint64_t        req_id;
    kvp_wire_op_t   op;
    kvp_status_t    status;
    uint64_t        deadline_ns;
    kvp_wire_rep_t  rep;
    kvp_xfer_msg_h  msg;       /* reply data, held until kvp_client_call_release */
    kvp_xfer_iov_t *iov;       /* owned iov array for PUT_PAGES */
    uint32_t        first;     /* PUT_PAGES: index of the batch's first page */
} kvp_client_call_t;

struct kvp_client {
    kvp_xfer_h      x;
    kvp_xfer_conn_h conn;
    char            host[256];
    uint16_t        port;
    uint32_t        timeout_ms;
    size_t          batch_bytes;
    uint32_t        max_inflight;
    uint32_t        max_pages;  /* per message, bounded by the transport header limit */
    uint32_t        max_keys;
    int             pages_apart; /* the node refused pages with a record (it predates them) */
    uint64_t        next_id;
    uint64_t        rx_bytes;   /* reply bytes received (headers + data) */
    int             conn_heard; /* a reply came on the connection: its set-up is over */
    uint64_t        conn_gen;   /* connections made so far: bumped by each new one (a node that
                                 * restarted is reached on a new one: kvp_client_conn_ensure) */
    char            node_message[KVP_WIRE_MSG_MAX]; /* kvp_client_node_message */
    kvp_client_call_t          calls[MAX_INFLIGHT];
};

/* The start of an API call on c (NULL: none): the last call's node refusal is over
 * (kvp_client_node_message), whether or not this one reaches the node. */
static inline void kvp_client_call_begin(kvp_client_h c)
{
    if (c != NULL) {
        c->node_message[0] = '\0';
    }
}

/* Release a finished call: its reply, the reply data it held, its iov; the slot is free again.
 * NULL is a no-op. */
void kvp_client_call_release(kvp_client_call_t *call);
/* Send req (+ iov data, pinned until the call finishes; iov is owned by the call); the call slot
 * is returned in *call_p even when sending failed (its status says why). KVP_ERR_BUSY (iov freed,
 * *call_p NULL) when every slot is taken: a call made from inside a get's page callback while
 * the get holds them all. */
kvp_status_t kvp_client_call_start(kvp_client_h c, kvp_wire_req_t *req, kvp_xfer_iov_t *iov,
                                   int iovcnt, kvp_client_call_t **call_p);
/* The connection c's next request goes on: the current one, or a new one when it is gone (its
 * node closed it, e.g. a restart; c->conn_gen then grows), as a call would find it. Only between
 * calls. A connect failure is returned. */
kvp_status_t kvp_client_conn_ensure(kvp_client_h c);
/* Wait until the call has its reply and its send is finished, or its deadline passes (then the
 * connection is reset: KVP_ERR_TIMEOUT). */
kvp_status_t kvp_client_call_wait(kvp_client_h c, kvp_client_call_t *call);
/* The caller spent ns away from the transport (a get's page callback): the deadlines of the calls
 * in flight move by as much, so its time is not charged to the node's reply. Only the calls': the
 * transport's own deadline for a reply whose data is being received (its receive timeout, 30 s
 * from the receive's start plus 1 s per 10 MB) does not move, so a callback that keeps the thread
 * past it fails the connection (KVP_ERR_TIMEOUT). */
void kvp_client_calls_defer(kvp_client_h c, uint64_t ns);
/* kvp_client_session_info in two halves, so that a caller can probe several nodes at once:
 * start sends the LIST (*call_p: its call, or NULL when none could be started), finish takes
 * start's status, waits (a PEER_GONE is asked once more on a fresh connection, as reads are),
 * fills *out and releases the call. */
kvp_status_t kvp_client_session_info_start(kvp_client_h c, uint64_t ns, const char *sid,
                                           kvp_client_call_t **call_p);
kvp_status_t kvp_client_session_info_finish(kvp_client_h c, kvp_client_call_t *call,
                                            kvp_status_t started, uint64_t ns, const char *sid,
                                            kvp_session_info_t *out);
/* One request without bulk data, waited for (a read is tried once more on a fresh connection
 * after PEER_GONE). The caller releases *call_p. */
kvp_status_t kvp_client_call_simple(kvp_client_h c, kvp_wire_req_t *req,
                                    kvp_client_call_t **call_p);
/* kvp_client_get_session_cb (expect and cb may be NULL) of a record newer than newer_than (0:
 * any): an older one is KVP_ERR_NOT_FOUND before any page reaches cb (a delete another node
 * holds is newer). *deleted_p (may be NULL): with KVP_ERR_NOT_FOUND the version of this node's
 * delete tombstone of the session (0: none, or a node older than that reply field), else 0. */
kvp_status_t kvp_client_get_session_newer(kvp_client_h client, uint64_t ns, const char *sid,
                                          const kvp_page_params_t *expect,
                                          kvp_client_pages_cb_t cb, void *cb_arg,
                                          uint64_t newer_than, uint64_t *deleted_p,
                                          kvp_session_pages_t **out_p);
/* KVP_ERR_INVALID (logged) unless sid is 1..KVP_SID_MAX-1 bytes */
kvp_status_t kvp_client_sid_check(const char *sid);

#endif
