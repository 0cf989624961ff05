/* xfer.h - kvpack's message transport: one UCX context + worker per kvp_xfer_h, a listener,
 * connections, and messages = (small header, bulk data) sent as UCX active messages (eager for
 * small data, rendezvous for large). Nothing above this header sees a ucp_* type.
 * Error mode: endpoints use UCX peer-failure handling (UCP_ERR_HANDLING_MODE_PEER) by default so
 * a dead peer becomes an error on the connection instead of a hang or abort; in UCX 1.13 that
 * disables shared-memory transports (traffic goes over tcp). KVP_XFER_PARAM_PEER_ERRORS = 0, or
 * KVP_UCX_ERR_MODE=none in the environment when the param is not set, selects
 * UCP_ERR_HANDLING_MODE_NONE: shm (sysv/posix/cma) on one host, dead peers still reported through
 * the connection manager, but UCX 1.13 was seen to segfault when a peer died mid-connect and
 * leaks the requests of sends to a dead peer - a trusted single host only.
 * Bulk data: several iov pieces are copied into one contiguous staging buffer (UCX 1.13 has no
 * zero-copy rendezvous for iov data); staging and rendezvous receive buffers are reused.
 * Threading: one thread per kvp_xfer_h; callbacks run inside kvp_xfer_progress/kvp_xfer_wait.
 * The one call any thread may make is kvp_xfer_wake (work done elsewhere is ready to send). */
#ifndef KVPACK_XFER_H
#define KVPACK_XFER_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_xfer      *kvp_xfer_h;
typedef struct kvp_xfer_conn *kvp_xfer_conn_h;
typedef struct kvp_xfer_msg  *kvp_xfer_msg_h;

typedef struct {
    const void *buf;
    size_t      len;
} kvp_xfer_iov_t;

/* A message arrived (header and data complete, or status != KVP_OK when its data could not be
 * received). The callee owns msg and must kvp_xfer_msg_release it, now or later. */
typedef void (*kvp_xfer_recv_cb_t)(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg);
/* A connection failed (peer gone, unreachable). Server-side connections are closed by the
 * transport right after this returns; client connections stay until kvp_xfer_conn_close. */
typedef void (*kvp_xfer_conn_cb_t)(void *arg, kvp_xfer_conn_h conn, kvp_status_t status);
/* A send finished; status is KVP_OK or why it failed (peer gone, canceled by close). */
typedef void (*kvp_xfer_send_cb_t)(void *arg, kvp_status_t status);

enum kvp_xfer_params_field {
    KVP_XFER_PARAM_MAX_MSG     = KVP_BIT(0),
    KVP_XFER_PARAM_RECV_CB     = KVP_BIT(1),
    KVP_XFER_PARAM_CONN_CB     = KVP_BIT(2),
    KVP_XFER_PARAM_CB_ARG      = KVP_BIT(3),
    KVP_XFER_PARAM_PEER_ERRORS = KVP_BIT(4),
    KVP_XFER_PARAM_RECV_TIMEOUT = KVP_BIT(5),
    KVP_XFER_PARAM_CONN_MSGS_MAX = KVP_BIT(6),
    KVP_XFER_PARAM_SEND_TIMEOUT = KVP_BIT(7),
    KVP_XFER_PARAM_MAX_CONNS    = KVP_BIT(8),
    KVP_XFER_PARAM_CONN_UNSENT_MAX = KVP_BIT(9),
};

typedef struct kvp_xfer_params {
    uint64_t           field_mask;    /* MUST be first */
    size_t             max_msg_bytes; /* data bytes accepted per message; default 256 MiB.
                                         A message over it is refused: a rendezvous one's
                                         send fails KVP_ERR_TOO_LARGE, an eager one (its
                                         send completed) reaches recv_cb at once with status
                                         KVP_ERR_TOO_LARGE and no data, to be answered.
                                         Rendezvous data received or held (unreleased) takes
                                         at most 4x this much memory at once (at least 64 KiB),
                                         counted as its receive buffers: each the next power
                                         of two of its length, from 64 KiB, so a message just
                                         past one counts nearly twice its length. A message
                                         past that waits, its sender's send in flight, until
                                         released ones make room (oldest first; never refused
                                         BUSY).
                                         Eager messages (under 1 MiB) are not counted: UCX
                                         has them before the callback runs; conn_msgs_max
                                         bounds them per connection. One connection's
                                         messages reach recv_cb in the order they arrived
                                         (an eager one waits behind its connection's
                                         earlier rendezvous ones), except those refused
                                         past conn_msgs_max. */
    kvp_xfer_recv_cb_t recv_cb;       /* default: drop messages */
    kvp_xfer_conn_cb_t conn_cb;       /* default: none */
    void              *cb_arg;
    int                peer_errors;   /* default 1 (UCP_ERR_HANDLING_MODE_PEER), or 0 when
                                         KVP_UCX_ERR_MODE=none; KVP_UCX_ERR_MODE other than
                                         peer|none makes kvp_xfer_create fail (INVALID) */
    uint32_t           recv_timeout_ms; /* a rendezvous message whose data has not all arrived
                                         this long after its receive began (plus 1 s per 10 MB
                                         of it; a wait for the budget before is no stall of
                                         its sender's) fails its connection with
                                         KVP_ERR_TIMEOUT: a sender
                                         that stalls mid-message (a paused process, a hostile
                                         one) cannot hold the receive budget; default 30000 */
    uint32_t           conn_msgs_max;  /* messages one connection may hold at once, received
                                         and not released (waiting for its earlier ones or
                                         for the budget, or held by the user); a message past
                                         it is refused: an eager one reaches recv_cb at once,
                                         ahead of the waiting ones, with status KVP_ERR_BUSY
                                         and no data (so the user can answer it), a
                                         rendezvous one is not received and its sender's
                                         send fails KVP_ERR_BUSY. Default 0: no limit */
    uint32_t           send_timeout_ms; /* a connection with sends in flight that completes
                                         none of them for this long (plus 1 s per 10 MB of all
                                         its sends in flight; the clock restarts at each completion,
                                         so a slow but live peer is not cut) fails with
                                         KVP_ERR_TIMEOUT, which completes its sends with an
                                         error: a peer that stops taking what it asked for (a
                                         paused or hung process, whose TCP still answers)
                                         cannot keep the sender's buffers pinned. For servers;
                                         a client's request may rightly wait for the receiver's
                                         budget. Default 0: no limit */
    uint32_t           max_conns;      /* connections the listener holds at once (accepted and
                                         not closed, or waiting to be accepted); a request past
                                         it is rejected at once, its descriptor closed (its
                                         client's connection fails KVP_ERR_PEER_UNREACHABLE),
                                         logged once per 10 s with the count: clients past it
                                         cannot run the process out of file descriptors.
                                         Default 0: no limit */
    size_t             conn_unsent_max; /* a connection that sends a message past
                                         conn_msgs_max while this many bytes of sends to it are
                                         in flight (it does not take what it is sent) is closed
                                         (KVP_ERR_BUSY, reported to conn_cb) instead of being
                                         answered: each refusal's answer would wait behind the
                                         others, so a peer that floods and never reads could
                                         make the process hold answers without bound. Default
                                         0: no limit */
} kvp_xfer_params_t;

kvp_status_t kvp_xfer_create(const kvp_xfer_params_t *params, kvp_xfer_h *x_p);
/* The UCX error mode its endpoints use: 1 peer, 0 none (the param, else KVP_UCX_ERR_MODE). */
int          kvp_xfer_peer_errors(kvp_xfer_h x);
/* Closes every connection (as kvp_xfer_conn_close) and releases everything; every send not
 * completed yet completes (its callback runs) before this returns. In error mode none it first
 * waits, up to 3 s after the last close began, for the closes to finish; if a closed connection
 * still has a send queued then (a peer that takes nothing), UCX's worker is not destroyed (UCX
 * 1.13 would abort the process) but left, with what it holds, until the process exits (a
 * warning says so). NULL is a no-op. */
void         kvp_xfer_destroy(kvp_xfer_h x);

/* Listen on host:port (port 0 picks a free one); *port_p gets the bound port. One per xfer. */
kvp_status_t kvp_xfer_listen(kvp_xfer_h x, const char *host, uint16_t port, uint16_t *port_p);
/* Start connecting to host:port. Returns at once; sends queue until the connection is up, and a
 * failure to connect surfaces as a connection error (KVP_ERR_PEER_UNREACHABLE). */
kvp_status_t kvp_xfer_connect(kvp_xfer_h x, const char *host, uint16_t port,
                              kvp_xfer_conn_h *conn_p);
/* Close a connection; the peer sees it fail. Error mode peer: a force close, outstanding sends
 * complete with KVP_ERR_CANCELED before this returns; a close UCX has not finished within 3 s
 * is left to it and this returns: a send it had not ended may still read its buffer until it
 * completes (at the latest at kvp_xfer_destroy). Error mode none (UCX 1.13 refuses a force
 * close there): returns at once; in later progress the queued sends still go (they complete
 * as sent) and then the peer is told. A send to a peer that takes nothing stays queued, reading
 * its buffer, until kvp_xfer_destroy completes it KVP_ERR_CANCELED. NULL is a no-op. */
void         kvp_xfer_conn_close(kvp_xfer_conn_h conn);
kvp_status_t kvp_xfer_conn_status(kvp_xfer_conn_h conn); /* KVP_OK while usable */
const char  *kvp_xfer_conn_peer(kvp_xfer_conn_h conn);   /* for logs */

/* Send hdr (copied) plus the data described by iov (pinned until completion: several pieces of a
 * message under 1 MiB, which goes eager, are packed by UCX from where they are; over it they are
 * copied into a staging buffer at once; one piece is sent zero-copy). A message of 1 MiB or more
 * goes rendezvous, also before the connection's wireup completes (UCX 1.13 would send it eager,
 * past the receiver's budget), unless UCX_RNDV_THRESH is set. Returns KVP_OK when
 * the send completed at once (cb is not called), KVP_INPROGRESS when cb will be called from a
 * later progress call, or an error (cb is not called). */
kvp_status_t kvp_xfer_send(kvp_xfer_conn_h conn, const void *hdr, size_t hdr_len,
                           const kvp_xfer_iov_t *iov, int iovcnt, kvp_xfer_send_cb_t cb,
                           void *arg);

/* Received message accessors; pointers are valid until kvp_xfer_msg_release. */
const void  *kvp_xfer_msg_hdr(kvp_xfer_msg_h msg, size_t *len_p);
const void  *kvp_xfer_msg_data(kvp_xfer_msg_h msg, size_t *len_p);
kvp_status_t kvp_xfer_msg_status(kvp_xfer_msg_h msg);
/* Data bytes its sender sent, also when they did not arrive or were refused (status != OK):
 * what its header describes. */
size_t       kvp_xfer_msg_sent_len(kvp_xfer_msg_h msg);
void         kvp_xfer_msg_release(kvp_xfer_msg_h msg); /* NULL is a no-op */

/* Drive communication and run callbacks; returns the number of events handled (0 = idle). One
 * call does a bounded amount of work, shared fairly: a few rounds of UCX progress, then a turn of
 * each connection with received messages, at most 32 of them to recv_cb per turn (the rest wait
 * for its next turn, in the next call): a connection that floods cannot hold up another's. */
unsigned     kvp_xfer_progress(kvp_xfer_h x);
/* Progress, and if idle sleep on the worker's event fd for up to timeout_ms; returns early after
 * a kvp_xfer_wake. */
void         kvp_xfer_wait(kvp_xfer_h x, int timeout_ms);
/* Any thread: make the kvp_xfer_wait in progress, or the next one, return promptly. */
void         kvp_xfer_wake(kvp_xfer_h x);
/* An opaque pointer of the caller's per connection (NULL until set); the transport never reads
 * it. It lives as long as the connection handle, which a received message keeps alive. */
void         kvp_xfer_conn_set_user(kvp_xfer_conn_h conn, void *user);
void        *kvp_xfer_conn_user(kvp_xfer_conn_h conn);
/* Bytes of the connection's sends still in flight (started, not completed), each counted 1 KiB
 * more for what it holds besides its bytes: replies a peer has not taken yet stay here (a
 * rendezvous send until the peer pulls it). */
size_t       kvp_xfer_conn_unsent(kvp_xfer_conn_h conn);
/* Progress (kvp_xfer_wait, callbacks run) until no send is in flight on an open connection and
 * every open connection is flushed (what UCX completed but still holds in its copy buffers is
 * written out), or timeout_ms passed; returns the sends or flushes still under way. For a
 * server's stop: replies its clients have not taken yet (a rendezvous one waits for its receiver
 * to pull it) still reach them before the close. */
size_t       kvp_xfer_drain(kvp_xfer_h x, int timeout_ms);
/* Server connections open now, and connection requests rejected past max_conns since create
 * (either pointer may be NULL). */
void         kvp_xfer_conn_counts(kvp_xfer_h x, unsigned *open_p, uint64_t *capped_p);
/* Largest header kvp_xfer_send accepts. */
size_t       kvp_xfer_max_hdr(kvp_xfer_h x);

/* Split "host:port" (or "[v6]:port") into host (NUL-terminated, at most host_cap bytes) and
 * port: digits only, <= 65535; a host holds no comma or white space. KVP_ERR_INVALID, logged. */
kvp_status_t kvp_xfer_parse_addr(const char *addr, char *host, size_t host_cap, uint16_t *port_p);
/* As kvp_xfer_parse_addr, not logged: for input that is skipped, not refused (etcd keys). */
kvp_status_t kvp_xfer_split_addr(const char *addr, char *host, size_t host_cap, uint16_t *port_p);

#ifdef __cplusplus
}
#endif
#endif
