/* xfer_ucx.c - the UCX wrapper behind xfer.h; the only file that sees ucp_* types.
 * One UCP context + worker (single-threaded, wakeup fd) per kvp_xfer_h; AM id 1 carries every
 * message. The AM callback copies the (unaligned) header and keeps the data descriptor
 * (UCS_INPROGRESS); rendezvous data is received with ucp_am_recv_data_nbx from the progress loop,
 * and finished messages are handed to recv_cb from there too, never from inside UCX callbacks.
 * Backpressure: a rendezvous message whose data would pass the receive budget (max_rx) is not
 * refused; it waits, descriptor held, in x->pending and its receive starts when the budget
 * allows, in arrival order (the sender's request simply stays in flight, under its own deadline).
 * Eager messages over 1 MiB (kvpack's senders send such as rendezvous) hold at most max_rx of
 * data at once, counted apart; more are refused with KVP_ERR_BUSY.
 * Each connection's messages reach recv_cb in their arrival order (conn->rx_order). What one
 * connection holds (received, not released) is bounded by conn_msgs_max: past it an eager message
 * is handed over at once with KVP_ERR_BUSY and no data, a rendezvous one is refused to its sender.
 * A message over max_msg (or XFER_HDR_LIMIT) is refused the same way, with KVP_ERR_TOO_LARGE.
 * Fairness: one connection cannot hold the progress thread. A kvp_xfer_progress takes at most
 * XFER_PROGRESS_CALLS rounds of ucp_worker_progress, and hands recv_cb each connection's ready
 * messages in turns of at most XFER_CONN_TURN_MSGS, connections in turn (the rest wait for the
 * next call): a connection that floods is answered at the pace of its turns while another's
 * message is handed over in its first turn.
 * Main flow: kvp_xfer_progress -> ucp_worker_progress (am_recv_cb, ep_err_cb, send_done_cb)
 *            -> accept_pending -> rndv_start -> deliver_ready. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/htab.h"
#include "kvpack/list.h"
#include "kvpack/log.h"

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define MOD            "xfer"
#define XFER_AM_ID     1
#define XFER_HDR_LIMIT (64u << 10)
#define CLOSE_WAIT_NS  (3ull * 1000000000ull)
#define BUF_MIN        (64u << 10) /* smallest cached bulk buffer (power-of-two classes) */
#define BUF_KEEP       16          /* free bulk buffers kept for reuse ... */
#define BUF_KEEP_BYTES (64u << 20) /* ... holding at most this many bytes */
/* ucp_worker_progress rounds one kvp_xfer_progress takes at most: over tcp one takes in up to a
 * thousand small messages of a flooding peer, and the drain went on for seconds while it sent */
#define XFER_PROGRESS_CALLS 4
/* messages one connection hands recv_cb in a turn, before the next connection's turn */
#define XFER_CONN_TURN_MSGS 32

/* ---- types ---- */

typedef enum {
    MSG_NEED_RECV, /* rendezvous: descriptor held, waiting in x->pending for the budget */
    MSG_RECVING,   /* ucp_am_recv_data_nbx in flight */
    MSG_DONE,      /* complete (or failed), waiting for its connection's earlier messages */
    MSG_READY      /* queued for recv_cb */
} msg_state_t;

struct kvp_xfer_msg {
    struct kvp_xfer_msg *next;
    kvp_xfer_h           x;
    kvp_xfer_conn_h      conn;       /* ref held */
    uint8_t             *hdr;        /* copy of the AM header */
    size_t               hdr_len;
    void                *data;
    size_t               data_len;
    void                *desc;       /* UCX descriptor to release (eager) or receive (rndv) */
    int                  own_data;   /* data was kvp_malloc'd (buf_cap 0) or is a bulk buffer */
    size_t               buf_cap;    /* capacity of a bulk buffer from buf_get */
    size_t               reserved;   /* its buffer's capacity, counted in x->rx_reserved (from its
                                      * receive's start) */
    size_t               eager_bytes; /* eager data over 1 MiB, counted in x->eager_held */
    msg_state_t          state;
    kvp_status_t         status;
    uint64_t             deadline_ns; /* MSG_RECVING: its connection fails past this */
    kvp_list_t           queue;       /* in x->pending (MSG_NEED_RECV), then in x->recving while
                                       * its data is being received */
    kvp_list_t           order;       /* in conn->rx_order until handed to recv_cb */
};

struct kvp_xfer_conn {
    struct kvp_xfer_conn *next;      /* in x->conns while open */
    kvp_xfer_h            x;
    ucp_ep_h              ep;        /* NULL once closed */
    int                   refs;      /* owner + messages */
    int                   server;    /* accepted by our listener */
    int                   dead_queued;
    int                   ep_failed; /* UCX reported its endpoint failed (ep_err_cb) */
    kvp_status_t          status;
    char                  peer[64];
    struct kvp_xfer_conn *dead_next;
    void                 *user;      /* kvp_xfer_conn_set_user */
    size_t                unsent;    /* bytes of its sends UCX has not completed, each counted
                                      * XFER_SEND_COST more (kvp_xfer_conn_unsent) */
    uint64_t              sends_moved_ns; /* its last send completion, or a send made while
                                           * none was in flight: send_deadlines' clock */
    kvp_list_t            rx_order;  /* its messages not handed to recv_cb yet, arrival order */
    struct kvp_xfer_msg  *ready_head, *ready_tail; /* for recv_cb, in its next turns */
    kvp_list_t            turn;      /* in x->turns while it has ready messages */
    unsigned              held;      /* its messages received and not released */
    int                   busy_warned; /* a refusal past x->conn_msgs_max was logged */
};

/* a kind of event logged at most once per 10 s, with the count (count_logged) */
typedef struct {
    uint64_t log_ns; /* none logged before this */
    unsigned n;      /* not logged yet */
    uint64_t total;  /* since kvp_xfer_create */
} reject_log_t;

struct kvp_xfer {
    ucp_context_h         ctx;
    ucp_worker_h          worker;
    ucp_listener_h        listener;
    int                   efd;
    int                   wake_fd;   /* eventfd of kvp_xfer_wake */
    atomic_int            woken;     /* set by kvp_xfer_wake, taken by kvp_xfer_wait */
    size_t                max_msg;
    size_t                max_rx;    /* bytes of the buffers of rendezvous data being received or
                                      * received and not released yet, at most (more waits in
                                      * pending) */
    size_t                rx_reserved;
    size_t                eager_held; /* data of eager messages over 1 MiB held (not released):
                                       * at most max_rx, apart from rx_reserved so that such a
                                       * message held behind a waiting one never keeps it waiting */
    size_t                max_hdr;
    size_t                eager_max; /* payloads below this go eager (KVP_XFER_RNDV_THRESH; 0
                                      * when UCX_RNDV_THRESH is set: not known here) */
    int                   peer_errors;
    kvp_xfer_recv_cb_t    recv_cb;
    kvp_xfer_conn_cb_t    conn_cb;
    void                 *cb_arg;
    struct kvp_xfer_conn *conns;
    struct kvp_xfer_conn *dead;      /* failed connections to report */
    kvp_list_t            pending;   /* MSG_NEED_RECV, oldest first */
    kvp_list_t            recving;   /* MSG_RECVING with a UCX request, oldest first */
    uint64_t              recv_timeout_ns;
    uint64_t              recv_check_ns; /* next look at the deadlines */
    uint64_t              send_timeout_ns; /* 0: sends wait as long as their connection lives */
    uint64_t              send_check_ns;   /* next look at the sends' deadlines */
    unsigned              conn_msgs_max; /* conn->held at most (0: no limit); more are refused */
    size_t                conn_unsent_max; /* refused while this much is unsent: closed */
    struct send_req      *sends;     /* sends UCX has not completed yet */
    kvp_list_t            turns;     /* connections with ready messages, next turn first */
    ucp_conn_request_h   *accept_q;  /* conn requests to accept, grown as a burst needs */
    size_t                accept_cap;
    size_t                n_accept;
    reject_log_t          rej_oom;       /* connection requests rejected out of memory */
    reject_log_t          rej_capped;    /* ... past max_conns */
    reject_log_t          rej_stray;     /* messages from unknown or failed endpoints dropped */
    reject_log_t          rej_eager;     /* eager messages over 1 MiB refused, the budget full */
    unsigned              max_conns;     /* server connections at most (0: no limit) */
    unsigned              n_server;      /* server connections open (in conns) */
    unsigned              n_server_failed; /* ... of them failed, until report_dead unlinks them */
    int                   delivering;
    unsigned              flushing;  /* kvp_xfer_drain's endpoint flushes not completed yet */
    kvp_list_t            closing;   /* error mode none: ep_flush_t of closed connections'
                                      * endpoints, flush under way (ep_close) ... */
    unsigned              closes_out; /* ... then close under way (close_flushed) */
    uint64_t              close_end_ns; /* kvp_xfer_destroy waits for those until then */
    void                 *buf_free[BUF_KEEP]; /* bulk buffers kept for reuse, see buf_get */
    size_t                buf_free_cap[BUF_KEEP];
    unsigned              n_buf_free;
    size_t                buf_free_bytes;
};

typedef struct send_req {
    struct send_req   *prev, *next; /* in x->sends until its completion */
    kvp_xfer_h         x;
    kvp_xfer_conn_h    conn;
    kvp_xfer_send_cb_t cb;
    void              *arg;
    uint8_t           *hdr;
    void              *stage;     /* contiguous copy of a multi-iov payload (bulk buffer) */
    size_t             stage_cap;
    ucp_dt_iov_t      *iov;       /* an eager multi-iov payload, packed by UCX from its pieces */
    size_t             bytes;     /* header, payload and XFER_SEND_COST: in conn->unsent */
    uint64_t           made_ns;   /* when it was made (send_deadlines) */
} send_req_t;

/* Error mode none: the endpoint of a closed connection while its flush is under way (ep_close):
 * the flush's request points here until it completes, then closes_step closes the endpoint. */
typedef struct ep_flush {
    kvp_list_t link;      /* in x->closing */
    ucp_ep_h   ep;
    int        flushed;   /* the flush completed: closes_step closes ep */
    int        failed;    /* ... with an error (the peer failed meanwhile) */
    char       peer[64];
} ep_flush_t;

/* What a send in flight holds besides its header and payload (this record, the header copy,
 * UCX's request, the user's reply context: ~300-600 B measured), counted in conn->unsent with
 * them, so a peer that takes none of many tiny replies reaches the same limits (the user's,
 * conn_unsent_max) as one that leaves large ones, before their memory does. */
#define XFER_SEND_COST 1024u

/* ---- private: bulk buffers ----
 * Rendezvous receive buffers and send staging buffers are reused instead of malloc'd per
 * message: a fresh multi-MiB malloc is an mmap whose first touch page-faults every 4 KiB (and
 * kvp_store_open fixes the mmap threshold at 128 KiB), which cost the node more CPU per byte
 * than the copy itself. Power-of-two classes from BUF_MIN; at most BUF_KEEP / BUF_KEEP_BYTES
 * are kept free. */

static size_t buf_class(size_t len)
{
    size_t cap = BUF_MIN;

    while (cap < len && cap < ((size_t)1 << 62)) {
        cap <<= 1;
    }
    return cap;
}

static void *buf_get(kvp_xfer_h x, size_t len, size_t *cap_p)
{
    size_t cap = buf_class(len);

    for (unsigned i = 0; i < x->n_buf_free; i++) {
        if (x->buf_free_cap[i] == cap) {
            void *p = x->buf_free[i];

            x->n_buf_free--;
            x->buf_free[i]     = x->buf_free[x->n_buf_free];
            x->buf_free_cap[i] = x->buf_free_cap[x->n_buf_free];
            x->buf_free_bytes -= cap;
            *cap_p = cap;
            return p;
        }
    }
    *cap_p = cap;
    return kvp_malloc(cap, "xfer bulk buffer");
}

static void buf_put(kvp_xfer_h x, void *p, size_t cap)
{
    if (p == NULL) {
        return;
    }
    if (x->n_buf_free == BUF_KEEP || x->buf_free_bytes + cap > BUF_KEEP_BYTES) {
        kvp_free(p);
        return;
    }
    x->buf_free[x->n_buf_free]     = p;
    x->buf_free_cap[x->n_buf_free] = cap;
    x->n_buf_free++;
    x->buf_free_bytes += cap;
}

/* ---- private: status mapping and small helpers ---- */

static kvp_status_t status_from_ucs(ucs_status_t st)
{
    switch (st) {
    case UCS_OK:                   return KVP_OK;
    case UCS_INPROGRESS:           return KVP_INPROGRESS;
    case UCS_ERR_NO_MEMORY:        return KVP_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM:    return KVP_ERR_INVALID;
    case UCS_ERR_CANCELED:         return KVP_ERR_CANCELED;
    case UCS_ERR_TIMED_OUT:        return KVP_ERR_TIMEOUT;
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_MESSAGE_TRUNCATED:return KVP_ERR_TOO_LARGE;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:    return KVP_ERR_PEER_UNREACHABLE;
    case UCS_ERR_BUSY:             return KVP_ERR_BUSY;
    case UCS_ERR_UNSUPPORTED:      return KVP_ERR_UNSUPPORTED;
    default:                       return KVP_ERR_PEER_GONE;
    }
}

static void conn_unref(kvp_xfer_conn_h conn)
{
    if (--conn->refs == 0) {
        kvp_free(conn);
    }
}

static kvp_xfer_conn_h conn_find(kvp_xfer_h x, ucp_ep_h ep)
{
    for (kvp_xfer_conn_h c = x->conns; c != NULL; c = c->next) {
        if (c->ep == ep) {
            return c;
        }
    }
    return NULL;
}

/* the one way a connection leaves x->conns (kvp_xfer_destroy aside): counts server ones out */
static void conn_unlink(kvp_xfer_conn_h conn)
{
    kvp_xfer_conn_h *pp = &conn->x->conns;

    while (*pp != NULL && *pp != conn) {
        pp = &(*pp)->next;
    }
    if (*pp == conn) {
        *pp = conn->next;
        conn->x->n_server -= conn->server != 0;
        conn->x->n_server_failed -= conn->server != 0 && conn->status != KVP_OK;
    }
}

/* m goes to recv_cb in one of its connection's turns (deliver_ready), after the connection's
 * ready ones; a connection that had none takes the last place in the turn order. */
static void ready_push(kvp_xfer_h x, struct kvp_xfer_msg *m)
{
    kvp_xfer_conn_h conn = m->conn;

    m->state = MSG_READY;
    m->next  = NULL;
    if (conn->ready_tail != NULL) {
        conn->ready_tail->next = m;
    } else {
        conn->ready_head = m;
    }
    conn->ready_tail = m;
    if (!kvp_list_linked(&conn->turn)) {
        kvp_list_push_tail(&x->turns, &conn->turn);
    }
}

/* The connection's oldest messages that are done go to recv_cb, in arrival order: a message
 * whose data comes later (or waits for the budget) holds back the ones after it. */
static void order_flush(kvp_xfer_conn_h conn)
{
    while (!kvp_list_empty(&conn->rx_order)) {
        struct kvp_xfer_msg *m = KVP_CONTAINER_OF(conn->rx_order.next, struct kvp_xfer_msg,
                                                  order);

        if (m->state != MSG_DONE) {
            return;
        }
        kvp_list_del(&m->order);
        ready_push(conn->x, m);
    }
}

/* m is complete, or failed (m->status). */
static void msg_done(struct kvp_xfer_msg *m)
{
    m->state = MSG_DONE;
    order_flush(m->conn);
}

static void sockaddr_str(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int  port = 0;

    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    snprintf(out, cap, "%s:%d", host, port);
}

/* Blocking progress until a request completes, or the time limit passes: then UCS_ERR_TIMED_OUT,
 * and the request is freed all the same (UCX releases it once it completes; ucp_request_cancel
 * cancels only tag receives, so it did not end an endpoint close, and the wait went on without
 * bound, holding up every connection of the thread). The caller must not touch what the request
 * was for afterwards. */
static ucs_status_t wait_request(kvp_xfer_h x, void *req, uint64_t limit_ns)
{
    uint64_t     end = kvp_time_ns() + limit_ns;
    ucs_status_t st;

    if (req == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS && kvp_time_ns() < end) {
        ucp_worker_progress(x->worker);
    }
    ucp_request_free(req);
    return st == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : st;
}

static int close_status_benign(ucs_status_t st)
{
    return st == UCS_OK || st == UCS_ERR_CANCELED || st == UCS_ERR_CONNECTION_RESET ||
           st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_NOT_CONNECTED;
}

/* error mode none: an endpoint close completed (the peer answered its disconnect, or failed) */
static void close_done_cb(void *request, ucs_status_t st, void *user_data)
{
    kvp_xfer_h x = user_data;

    if (!close_status_benign(st)) {
        KVP_LOG_DEBUG(MOD, "close: %s", ucs_status_string(st));
    }
    x->closes_out--;
    ucp_request_free(request);
}

/* error mode none: a closed connection's endpoint has nothing queued any more */
static void close_flush_cb(void *request, ucs_status_t st, void *user_data)
{
    ep_flush_t *f = user_data;

    f->flushed = 1;
    f->failed  = st != UCS_OK; /* the endpoint is dead: its close completes at once */
    ucp_request_free(request);
}

/* A close (no force) of an endpoint with nothing queued (or failed): UCX tells the peer at once
 * (its connection fails, CONNECTION_RESET) and completes the close when the peer answers,
 * counted in x->closes_out until then. */
static void close_flushed(kvp_xfer_h x, const char *peer, ucp_ep_h ep)
{
    ucp_request_param_t prm;
    void               *req;

    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send      = close_done_cb;
    prm.user_data    = x;
    req = ucp_ep_close_nbx(ep, &prm);
    if (UCS_PTR_IS_PTR(req)) {
        x->closes_out++;
    } else if (!close_status_benign(UCS_PTR_STATUS(req))) {
        KVP_LOG_DEBUG(MOD, "close of %s: %s", peer, ucs_status_string(UCS_PTR_STATUS(req)));
    }
}

/* Error mode none: an endpoint UCX reported failed goes with a close all the same (left open,
 * each held ~330 B until kvp_xfer_destroy: 3,000 clients closing added 1.6 MB to a node, against
 * 0.7 MB closed), and that close's flush of its failed lanes logs "error during flush" once per
 * lane at UCX's ERROR level (3-6 lines on the node's stdout per client that left). Those lines,
 * and only while this thread closes such an endpoint, are dropped: a log handler installed once
 * (UCX's handler stack is not thread-safe to push and pop) that looks at a thread-local flag. */
static _Thread_local int closing_failed_ep;

static ucs_log_func_rc_t close_log_filter(const char *file, unsigned line, const char *function,
                                          ucs_log_level_t level,
                                          const ucs_log_component_config_t *comp_conf,
                                          const char *message, va_list ap)
{
    (void)file;
    (void)line;
    (void)function;
    (void)comp_conf;
    (void)ap;
    if (closing_failed_ep && level == UCS_LOG_LEVEL_ERROR &&
        strstr(message, "error during flush") != NULL) {
        return UCS_LOG_FUNC_RC_STOP;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

static void close_log_filter_install(void)
{
    ucs_log_push_handler(close_log_filter);
}

/* Close the endpoints whose flush completed; the number closed. */
static unsigned closes_step(kvp_xfer_h x)
{
    unsigned n = 0;

    for (kvp_list_t *e = x->closing.next, *next; e != &x->closing; e = next) {
        ep_flush_t *f = KVP_CONTAINER_OF(e, ep_flush_t, link);

        next = e->next;
        if (f->flushed) {
            kvp_list_del(&f->link);
            closing_failed_ep = f->failed;
            close_flushed(x, f->peer, f->ep);
            closing_failed_ep = 0;
            kvp_free(f);
            n++;
        }
    }
    return n;
}

/* The endpoint goes; the connection's ep is NULL from here, whatever UCX still does with it.
 * Error mode peer: a force close, which UCX finishes at once (a close not done within
 * CLOSE_WAIT_NS is left to UCX: timed out). It completes the endpoint's sends with
 * UCS_ERR_CANCELED.
 * Error mode none: UCX 1.13 refuses a force close there (UCS_ERR_INVALID_PARAM: it requires
 * UCP_ERR_HANDLING_MODE_PEER on both sides) and closed nothing: the peer never saw the connection
 * go (a node's --max-conns filled up with connections its clients had closed), and a send still
 * queued on the endpoint made ucp_worker_destroy abort ("pending request ... should have been
 * flushed"). So the endpoint is flushed (its queued sends go first and complete as sent), then
 * closed without force (close_flushed: the peer is told). The flush is not waited for here: to a
 * live peer it takes a moment, to one that takes nothing (a hung node at a client's deadline, a
 * client past a node's send timeout) it never ends, and the thread would be held. It is counted
 * in x->closing until it completes in a later progress; kvp_xfer_destroy waits for it up to
 * CLOSE_WAIT_NS after the last close (closes_wait). The flush and the close are two steps so
 * that destroy can tell a close only waiting for the peer's answer (safe to destroy) from an
 * endpoint that still queues something (UCX aborts destroying it). */
static void ep_close(kvp_xfer_conn_h conn)
{
    kvp_xfer_h          x = conn->x;
    ucp_request_param_t prm;
    ucs_status_t        st;
    ep_flush_t         *f;
    void               *req;

    if (conn->ep == NULL) {
        return;
    }
    memset(&prm, 0, sizeof(prm));
    if (x->peer_errors) {
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        prm.flags        = UCP_EP_CLOSE_FLAG_FORCE;
        req = ucp_ep_close_nbx(conn->ep, &prm);
        st  = wait_request(x, req, CLOSE_WAIT_NS);
        if (!close_status_benign(st)) {
            KVP_LOG_DEBUG(MOD, "close of %s: %s", conn->peer, ucs_status_string(st));
        }
        conn->ep = NULL; /* UCX's from here, also a close not done within CLOSE_WAIT_NS */
        return;
    }
    x->close_end_ns = kvp_time_ns() + CLOSE_WAIT_NS;
    if (conn->ep_failed) { /* its lanes failed: the close's own flush ends at once */
        closing_failed_ep = 1;
        close_flushed(x, conn->peer, conn->ep);
        closing_failed_ep = 0;
        conn->ep = NULL;
        return;
    }
    f = kvp_calloc(1, sizeof(*f), "xfer closing endpoint");
    req = NULL;
    if (f != NULL) {
        f->ep = conn->ep;
        snprintf(f->peer, sizeof(f->peer), "%s", conn->peer);
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        prm.cb.send      = close_flush_cb;
        prm.user_data    = f;
        req = ucp_ep_flush_nbx(conn->ep, &prm);
    }
    if (UCS_PTR_IS_PTR(req)) {
        kvp_list_push_tail(&x->closing, &f->link);
    } else { /* flushed already (or dead, or no memory for the record: closed as it is) */
        kvp_free(f);
        close_flushed(x, conn->peer, conn->ep);
    }
    conn->ep = NULL; /* UCX's from here */
}

/* ---- UCX callbacks (run inside ucp_worker_progress) ---- */

/* The connection failed (status, unless it had failed already): queued for report_dead, which
 * tells the user and closes a server connection. */
static void conn_fail(kvp_xfer_conn_h conn, kvp_status_t status)
{
    if (conn->status == KVP_OK) {
        conn->status = status;
        conn->x->n_server_failed += conn->server != 0; /* still linked: only linked ones fail */
    }
    if (!conn->dead_queued) {
        conn->dead_queued = 1;
        conn->refs++;
        conn->dead_next = conn->x->dead;
        conn->x->dead   = conn;
    }
}

/* arg is the xfer, not the connection: UCX 1.13 may still report an error for an endpoint we
 * already closed (and freed the connection of; in error mode none its close may still be under
 * way, see ep_close), so the connection is looked up among the open ones and a report for a
 * closed one is ignored. */
static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    kvp_xfer_conn_h conn = conn_find(arg, ep);
    kvp_status_t    status = status_from_ucs(st);

    if (conn == NULL) {
        KVP_LOG_DEBUG(MOD, "error on a closed endpoint ignored: %s", ucs_status_string(st));
        return;
    }
    if (conn->status == KVP_OK) {
        KVP_LOG_INFO(MOD, "connection %s failed: %s", conn->peer, ucs_status_string(st));
    }
    if (status == KVP_OK || status == KVP_INPROGRESS || status == KVP_ERR_CANCELED) {
        status = KVP_ERR_PEER_GONE;
    }
    conn->ep_failed = 1;
    conn_fail(conn, status);
}

/* A connection request is rejected: its client's connection fails KVP_ERR_PEER_UNREACHABLE and
 * the descriptor UCX accepted for it is closed at once. Why: out of memory, or past max_conns
 * (open server connections plus those queued to be accepted), which keeps clients past the cap
 * from running the process out of descriptors (UCX then retries accept() in a tight loop,
 * logging each failure). Logged at most once per 10 s per reason, with the count. */
static void count_logged(reject_log_t *rl, const char *why, const char *noun, const char *verb)
{
    uint64_t now = kvp_time_ns();

    rl->n++;
    rl->total++;
    if (now >= rl->log_ns) {
        KVP_LOG_WARN(MOD, "%s: %u %s%s %s since the last report", why, rl->n, noun,
                     rl->n == 1 ? "" : "s", verb);
        rl->n      = 0;
        rl->log_ns = now + 10000000000ull;
    }
}

static void conn_reject(kvp_xfer_h x, ucp_conn_request_h req, reject_log_t *rl, const char *why)
{
    ucp_listener_reject(x->listener, req);
    count_logged(rl, why, "connection request", "rejected");
}

/* Queued for accept_pending, which runs once ucp_worker_progress is drained: a burst of
 * connects all lands here first, so the queue grows (a fixed 64 slots rejected the rest). */
static void conn_request_cb(ucp_conn_request_h req, void *arg)
{
    kvp_xfer_h          x = arg;
    ucp_conn_request_h *q;

    /* the failed ones do not count: a peer that left in this same ucp_worker_progress drain is
     * still linked until report_dead, and must not keep a newcomer out */
    if (x->max_conns != 0 && x->n_server - x->n_server_failed + x->n_accept >= x->max_conns) {
        char why[64];

        snprintf(why, sizeof(why), "at the connection limit (%u)", x->max_conns);
        conn_reject(x, req, &x->rej_capped, why);
        return;
    }
    q = kvp_array_room(x->accept_q, &x->accept_cap, x->n_accept, sizeof(*q), 64,
                       "xfer accept queue");
    if (q == NULL) {
        conn_reject(x, req, &x->rej_oom, "out of memory for a connection");
        return;
    }
    x->accept_q                = q;
    x->accept_q[x->n_accept++] = req;
}

/* A message of conn's, header copied, counted in conn->held; NULL when out of memory. */
static struct kvp_xfer_msg *msg_new(kvp_xfer_conn_h conn, const void *header,
                                    size_t header_length, size_t length)
{
    struct kvp_xfer_msg *m = kvp_calloc(1, sizeof(*m) + header_length + 1, "xfer msg");

    if (m == NULL) {
        return NULL;
    }
    m->x        = conn->x;
    m->conn     = conn;
    m->hdr      = (uint8_t *)(m + 1);
    m->hdr_len  = header_length;
    m->data_len = length;
    m->status   = KVP_OK;
    if (header_length > 0) {
        memcpy(m->hdr, header, header_length); /* the header pointer is not aligned */
    }
    conn->refs++;
    conn->held++;
    return m;
}

/* An eager message refused (status): UCX has taken its data already, so the data is dropped and
 * the header handed to recv_cb at once with that status and no data, ahead of the connection's
 * waiting messages, so the user can answer it (its sender's send has completed OK: without an
 * answer it would wait out its deadline). */
static ucs_status_t eager_refuse(kvp_xfer_conn_h conn, const void *header, size_t header_length,
                                 size_t length, kvp_status_t status)
{
    struct kvp_xfer_msg *m = msg_new(conn, header, header_length, length);

    if (m != NULL) {
        m->status = status;
        ready_push(conn->x, m);
    }
    return UCS_OK;
}

/* conn already holds conn_msgs_max messages: this one is refused. A rendezvous one is not
 * received (its sender's send fails KVP_ERR_BUSY); an eager one goes to eager_refuse with
 * KVP_ERR_BUSY. A peer that leaves conn_unsent_max of what it is sent untaken is closed instead:
 * each answer would wait behind those, so a flood it never reads would hold memory (refused
 * messages held until answered, and the answers) without bound. */
static ucs_status_t msg_refuse(kvp_xfer_conn_h conn, const void *header, size_t header_length,
                               size_t length, int rndv)
{
    if (conn->x->conn_unsent_max != 0 && conn->unsent >= conn->x->conn_unsent_max) {
        KVP_LOG_WARN(MOD, "%s sends past the %u messages it may hold while it takes none of the "
                     "answers (%u held, %zu bytes sent to it not taken): connection closed",
                     conn->peer, conn->x->conn_msgs_max, conn->held, conn->unsent);
        conn_fail(conn, KVP_ERR_BUSY);
        return rndv ? UCS_ERR_BUSY : UCS_OK;
    }
    if (!conn->busy_warned) {
        KVP_LOG_WARN(MOD, "%s holds %u messages not handled yet: more are refused (ERR_BUSY)",
                     conn->peer, conn->held);
        conn->busy_warned = 1;
    }
    if (rndv) {
        return UCS_ERR_BUSY;
    }
    return eager_refuse(conn, header, header_length, length, KVP_ERR_BUSY);
}

#define KVP_XFER_EAGER_MAX (1u << 20) /* kvpack's own senders: larger payloads go rendezvous */

/* An eager message's data held: one over KVP_XFER_EAGER_MAX counts in x->eager_held until
 * kvp_xfer_msg_release */
static void eager_count(struct kvp_xfer_msg *m, size_t length)
{
    if (length > KVP_XFER_EAGER_MAX) {
        m->eager_bytes = length;
        m->x->eager_held += length;
    }
}

static ucs_status_t am_recv_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    kvp_xfer_h           x    = arg;
    kvp_xfer_conn_h      conn = NULL;
    struct kvp_xfer_msg *m;
    int                  rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;

    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        conn = conn_find(x, param->reply_ep);
    }
    if (conn == NULL || conn->status != KVP_OK) {
        /* a peer that keeps sending after its connection failed: one line per 10 s, not one
         * per message (thousands a second under a flood) */
        count_logged(&x->rej_stray, "from unknown or failed endpoints", "message", "dropped");
        return rndv ? UCS_ERR_NOT_CONNECTED : UCS_OK;
    }
    /* Past its held messages first, so that no refusal (also of a message over a limit, below)
     * escapes the cap and msg_refuse's close */
    if (x->conn_msgs_max != 0 && conn->held >= x->conn_msgs_max) {
        return msg_refuse(conn, header, header_length, length, rndv);
    }
    /* Over a limit: a rendezvous message's send fails KVP_ERR_TOO_LARGE; an eager one (also a
     * large one sent before its connection's wireup completed) is answered the same way through
     * recv_cb, as its sender's send has already completed. */
    if (header_length > XFER_HDR_LIMIT) {
        KVP_LOG_WARN(MOD, "header of %zu bytes from %s over the %u limit: rejected",
                     header_length, conn->peer, XFER_HDR_LIMIT);
        return rndv ? UCS_ERR_EXCEEDS_LIMIT
                    : eager_refuse(conn, header, header_length, length, KVP_ERR_TOO_LARGE);
    }
    if (length > x->max_msg) {
        KVP_LOG_WARN(MOD, "message of %zu data bytes from %s over the %zu limit: rejected",
                     length, conn->peer, x->max_msg);
        return rndv ? UCS_ERR_EXCEEDS_LIMIT
                    : eager_refuse(conn, header, header_length, length, KVP_ERR_TOO_LARGE);
    }
    /* Eager messages past kvpack's own eager size (from a sender with UCX_RNDV_THRESH raised)
     * hold at most max_rx of data at once, more are refused ERR_BUSY, so 256 such messages a
     * connection cannot hold 256 x --max-msg. Counted apart from the rendezvous budget: one held
     * behind its connection's waiting rendezvous message must not keep that one waiting. (UCX
     * has assembled each one in memory before this sees it: that much is outside kvpack.) */
    if (!rndv && length > KVP_XFER_EAGER_MAX && x->eager_held + length > x->max_rx) {
        count_logged(&x->rej_eager, "eager messages over 1 MiB past the receive budget",
                     "message", "refused ERR_BUSY");
        return eager_refuse(conn, header, header_length, length, KVP_ERR_BUSY);
    }
    m = msg_new(conn, header, header_length, length);
    if (m == NULL) {
        return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
    }
    kvp_list_push_tail(&conn->rx_order, &m->order);
    if (rndv) { /* its receive starts in rndv_start, once the budget allows */
        m->desc  = data;
        m->state = MSG_NEED_RECV;
        kvp_list_push_tail(&x->pending, &m->queue);
        return UCS_INPROGRESS;
    }
    if (length > 0 && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)) {
        m->desc = data;
        m->data = data;
        eager_count(m, length);
        msg_done(m);
        return UCS_INPROGRESS;
    }
    if (length > 0) {
        m->data = kvp_malloc(length, "xfer msg data");
        if (m->data == NULL) {
            m->status = KVP_ERR_NO_MEMORY;
        } else {
            memcpy(m->data, data, length);
            m->own_data = 1;
            eager_count(m, length);
        }
    }
    msg_done(m);
    return UCS_OK;
}

static void rndv_done_cb(void *request, ucs_status_t st, size_t length, void *user_data)
{
    struct kvp_xfer_msg *m = user_data;

    if (kvp_list_linked(&m->queue)) {
        kvp_list_del(&m->queue);
    }
    if (st != UCS_OK) {
        m->status = status_from_ucs(st);
    } else if (length != m->data_len) {
        m->status = KVP_ERR_PROTOCOL;
    }
    msg_done(m);
    ucp_request_free(request);
}

/* A send is over: the user hears its status once, and what it pinned is let go. */
static void send_finish(send_req_t *s, kvp_status_t status)
{
    kvp_xfer_h x = s->x;

    if (s->prev != NULL) {
        s->prev->next = s->next;
    } else {
        x->sends = s->next;
    }
    if (s->next != NULL) {
        s->next->prev = s->prev;
    }
    s->conn->unsent -= s->bytes;
    s->conn->sends_moved_ns = kvp_time_ns(); /* the peer takes what it was sent */
    if (s->cb != NULL) {
        s->cb(s->arg, status);
    }
    conn_unref(s->conn);
    buf_put(x, s->stage, s->stage_cap);
    kvp_free(s->iov);
    kvp_free(s->hdr);
    kvp_free(s);
}

static void send_done_cb(void *request, ucs_status_t st, void *user_data)
{
    send_finish(user_data, status_from_ucs(st));
    ucp_request_free(request);
}

#define KVP_XFER_RNDV_THRESH "1m"

/* UCX settings kvpack needs, set in the environment (UCX reads them there) unless already set,
 * so every kvpack process agrees with its peers:
 * - UCX_TCP_CM_REUSEADDR=y: a restarted node must rebind its port while old sockets sit in
 *   TIME_WAIT.
 * - UCX_ZCOPY_THRESH=inf, UCX_TCP_TX_SEG_SIZE=64k: eager messages (up to the rendezvous
 *   threshold) go as copies in 64 KiB segments, never zero-copy. UCX 1.13 aborts the process
 *   (uct_iface.h "Assertion `comp->count > 0' failed", status ENDPOINT_TIMEOUT) when a peer dies
 *   while eager zero-copy fragments to it are in flight: a node died with a client that was
 *   killed mid-GET (cluster.fair's flooder: 3 of 146 runs on 2 busy cores; 0 of 596 with eager
 *   copies). Copies in UCX's default 8 KiB segments halved `kvpack bench node` gets (~1,500 ->
 *   ~900 sessions/s); in 64 KiB segments (the receive side's default already, so a peer's
 *   segments fit) they are on par (3 alternated runs each: 1,507 zero-copy, 1,506 copy
 *   sessions/s). Rendezvous (larger messages) keeps zero-copy. */
static void env_defaults(void)
{
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    setenv("UCX_ZCOPY_THRESH", "inf", 0);
    setenv("UCX_TCP_TX_SEG_SIZE", "64k", 0);
}

/* Error mode when the caller did not choose: KVP_UCX_ERR_MODE=peer|none, else peer. */
static kvp_status_t peer_errors_default(int *peer_errors_p)
{
    const char *v = getenv("KVP_UCX_ERR_MODE");

    *peer_errors_p = 1;
    if (v == NULL || v[0] == '\0' || strcmp(v, "peer") == 0) {
        return KVP_OK;
    }
    if (strcmp(v, "none") == 0) {
        *peer_errors_p = 0;
        return KVP_OK;
    }
    KVP_LOG_ERROR(MOD, "KVP_UCX_ERR_MODE must be peer or none, not '%s'", v);
    return KVP_ERR_INVALID;
}

/* ---- private: progress steps ---- */

static kvp_status_t ep_create(kvp_xfer_h x, kvp_xfer_conn_h conn, ucp_ep_params_t *ep_params)
{
    ucs_status_t st;

    ep_params->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params->err_mode       = x->peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                               : UCP_ERR_HANDLING_MODE_NONE;
    ep_params->err_handler.cb  = ep_err_cb;
    ep_params->err_handler.arg = x;
    st = ucp_ep_create(x->worker, ep_params, &conn->ep);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "endpoint to %s: %s", conn->peer, ucs_status_string(st));
        conn->ep = NULL;
        return status_from_ucs(st);
    }
    return KVP_OK;
}

static unsigned accept_pending(kvp_xfer_h x)
{
    size_t n = x->n_accept;

    for (size_t i = 0; i < n; i++) {
        ucp_conn_request_h   req = x->accept_q[i];
        ucp_conn_request_attr_t attr;
        ucp_ep_params_t      ep_params;
        kvp_xfer_conn_h      conn = kvp_calloc(1, sizeof(*conn), "xfer conn");

        if (conn == NULL) {
            conn_reject(x, req, &x->rej_oom, "out of memory for a connection");
            continue;
        }
        conn->x      = x;
        conn->refs   = 1;
        conn->server = 1;
        conn->status = KVP_OK;
        kvp_list_init(&conn->rx_order);
        attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
        if (ucp_conn_request_query(req, &attr) == UCS_OK) {
            sockaddr_str(&attr.client_address, conn->peer, sizeof(conn->peer));
        } else {
            snprintf(conn->peer, sizeof(conn->peer), "client");
        }
        memset(&ep_params, 0, sizeof(ep_params));
        ep_params.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
        ep_params.conn_request = req;
        if (ep_create(x, conn, &ep_params) != KVP_OK) {
            kvp_free(conn);
            continue;
        }
        conn->next = x->conns;
        x->conns   = conn;
        x->n_server++;
        KVP_LOG_DEBUG(MOD, "accepted %s", conn->peer);
    }
    x->n_accept = 0;
    return (unsigned)n;
}

/* Start m's receive (it fits the budget): its buffer's capacity (buf_class of its length: the
 * memory it holds, up to twice the length) counts in x->rx_reserved from now until
 * kvp_xfer_msg_release, and its --recv-timeout clock starts now: the time it waited for the
 * budget was no stall of its sender's. */
static void rndv_recv(kvp_xfer_h x, struct kvp_xfer_msg *m)
{
    ucp_request_param_t prm;
    void               *req;

    m->data         = buf_get(x, m->data_len, &m->buf_cap);
    m->reserved     = m->buf_cap;
    x->rx_reserved += m->reserved;
    if (m->data == NULL) {
        ucp_am_data_release(x->worker, m->desc);
        m->desc   = NULL;
        m->status = KVP_ERR_NO_MEMORY;
        msg_done(m);
        return;
    }
    m->own_data = 1;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.recv_am   = rndv_done_cb;
    prm.user_data    = m;
    m->state         = MSG_RECVING;
    req = ucp_am_recv_data_nbx(x->worker, m->desc, m->data, m->data_len, &prm);
    m->desc = NULL;
    if (req == NULL) {
        msg_done(m);
    } else if (UCS_PTR_IS_ERR(req)) {
        m->status = status_from_ucs(UCS_PTR_STATUS(req));
        msg_done(m);
    } else { /* its data on the way: 100 ns a byte is 10 MB/s */
        m->deadline_ns = kvp_time_ns() + x->recv_timeout_ns + 100 * (uint64_t)m->data_len;
        kvp_list_push_tail(&x->recving, &m->queue);
    }
}

/* A waiting message that will never be received (its connection failed or was closed): its
 * descriptor goes back to UCX, and it is dropped, never delivered. */
static void pending_drop(kvp_xfer_h x, struct kvp_xfer_msg *m)
{
    kvp_list_del(&m->queue);
    ucp_am_data_release(x->worker, m->desc);
    m->desc = NULL;
    kvp_xfer_msg_release(m);
}

/* Waiting rendezvous messages start, oldest first, while the budget allows; none overtakes an
 * older one that does not fit (so a large message is not starved by smaller ones). */
static unsigned rndv_start(kvp_xfer_h x)
{
    unsigned    n    = 0;
    int         full = 0;
    kvp_list_t *e, *next;

    for (e = x->pending.next; e != &x->pending; e = next) {
        struct kvp_xfer_msg *m = KVP_CONTAINER_OF(e, struct kvp_xfer_msg, queue);

        next = e->next;
        if (m->conn->status != KVP_OK) {
            pending_drop(x, m);
            n++;
        } else if (!full && x->rx_reserved + buf_class(m->data_len) <= x->max_rx) {
            kvp_list_del(e);
            rndv_recv(x, m);
            n++;
        } else {
            full = 1;
        }
    }
    return n;
}

/* A sender that stalls mid-message would hold its share of the receive budget (x->rx_reserved)
 * for as long as its connection lives, and a stopped process's TCP still answers keepalives:
 * past its deadline the message's connection fails (KVP_ERR_TIMEOUT); closing it ends the
 * receive with an error, which frees the budget. Looked at every 100 ms. */
static unsigned recv_deadlines(kvp_xfer_h x)
{
    uint64_t now;
    unsigned n = 0;

    if (kvp_list_empty(&x->recving) || (now = kvp_time_ns()) < x->recv_check_ns) {
        return 0;
    }
    x->recv_check_ns = now + 100000000ull;
    for (kvp_list_t *e = x->recving.next; e != &x->recving; e = e->next) {
        struct kvp_xfer_msg *m = KVP_CONTAINER_OF(e, struct kvp_xfer_msg, queue);

        if (now > m->deadline_ns && m->conn->status == KVP_OK) {
            KVP_LOG_WARN(MOD, "the %zu data bytes of a message from %s did not arrive within "
                         "%.1f s: connection closed", m->data_len, m->conn->peer,
                         (double)(x->recv_timeout_ns + 100 * (uint64_t)m->data_len) / 1e9);
            conn_fail(m->conn, KVP_ERR_TIMEOUT);
            n++;
        }
    }
    return n;
}

/* A receiver that stops taking what it was sent (a rendezvous reply it asked for, then paused or
 * hung: its TCP still answers keepalives) would keep the sends, and whatever the sender pinned
 * for them, for as long as the connection lives. The clock is a connection's: it restarts at each
 * of its send completions, so a live receiver behind a long queue or a slow link is never cut,
 * only one that took nothing for send_timeout plus 1 s per 10 MB of all it has queued (a small
 * send behind a large one being taken slowly waits for that one too). Past that its connection
 * fails (KVP_ERR_TIMEOUT); the close completes its sends with an error.
 * Looked at every 100 ms. */
static unsigned send_deadlines(kvp_xfer_h x)
{
    uint64_t now;
    unsigned n = 0;

    if (x->send_timeout_ns == 0 || x->sends == NULL || (now = kvp_time_ns()) < x->send_check_ns) {
        return 0;
    }
    x->send_check_ns = now + 100000000ull;
    for (send_req_t *s = x->sends; s != NULL; s = s->next) {
        uint64_t from  = s->made_ns > s->conn->sends_moved_ns ? s->made_ns : s->conn->sends_moved_ns;
        uint64_t allow = x->send_timeout_ns + 100 * (uint64_t)s->conn->unsent;

        if (now > from + allow && s->conn->status == KVP_OK) {
            KVP_LOG_WARN(MOD, "%s took none of its replies for %.1f s (%zu bytes wait): "
                         "connection closed", s->conn->peer, (double)allow / 1e9, s->conn->unsent);
            conn_fail(s->conn, KVP_ERR_TIMEOUT);
            n++;
        }
    }
    return n;
}

static unsigned report_dead(kvp_xfer_h x)
{
    unsigned n = 0;

    while (x->dead != NULL) {
        kvp_xfer_conn_h conn = x->dead;

        x->dead = conn->dead_next;
        n++;
        if (x->conn_cb != NULL) {
            x->conn_cb(x->cb_arg, conn, conn->status);
        }
        if (conn->server && conn->ep != NULL) {
            conn_unlink(conn);
            ep_close(conn);
            conn_unref(conn); /* the listener's ownership */
        }
        conn_unref(conn);     /* the dead-queue reference */
    }
    return n;
}

/* One turn of each connection that has ready messages now: up to XFER_CONN_TURN_MSGS of them
 * to recv_cb, oldest first; one with more left takes the last place in the turn order, one with
 * none left leaves it. */
static unsigned deliver_ready(kvp_xfer_h x)
{
    unsigned n = 0, conns = 0;

    if (x->delivering) {
        return 0;
    }
    x->delivering = 1;
    for (kvp_list_t *e = x->turns.next; e != &x->turns; e = e->next) {
        conns++;
    }
    while (conns-- > 0 && !kvp_list_empty(&x->turns)) {
        kvp_xfer_conn_h conn = KVP_CONTAINER_OF(x->turns.next, struct kvp_xfer_conn, turn);

        kvp_list_del(&conn->turn);
        conn->refs++; /* its last message may go in this turn */
        for (unsigned i = 0; i < XFER_CONN_TURN_MSGS && conn->ready_head != NULL; i++) {
            struct kvp_xfer_msg *m = conn->ready_head;

            conn->ready_head = m->next;
            if (conn->ready_head == NULL) {
                conn->ready_tail = NULL;
            }
            m->next = NULL;
            n++;
            if (x->recv_cb != NULL) {
                x->recv_cb(x->cb_arg, conn, m);
            } else {
                kvp_xfer_msg_release(m);
            }
        }
        /* A recv_cb that progressed x may have queued (and this turn taken) more of its
         * messages, linking it again: it stays in the turn order only with messages left, or
         * it would outlive its last reference there. */
        if (conn->ready_head == NULL) {
            if (kvp_list_linked(&conn->turn)) {
                kvp_list_del(&conn->turn);
            }
        } else if (!kvp_list_linked(&conn->turn)) {
            kvp_list_push_tail(&x->turns, &conn->turn);
        }
        conn_unref(conn);
    }
    x->delivering = 0;
    return n;
}

/* ---- API ---- */

kvp_status_t kvp_xfer_create(const kvp_xfer_params_t *params, kvp_xfer_h *x_p)
{
    ucp_params_t        cp;
    ucp_worker_params_t wp;
    ucp_worker_attr_t   wa;
    ucp_am_handler_param_t hp;
    ucp_config_t       *cfg;
    ucs_status_t        st;
    kvp_status_t        status;
    kvp_xfer_h          x;
    uint64_t            fm = (params != NULL) ? params->field_mask : 0;

    x = kvp_calloc(1, sizeof(*x), "xfer");
    if (x == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    x->max_msg     = (fm & KVP_XFER_PARAM_MAX_MSG) ? params->max_msg_bytes : (256u << 20);
    x->max_rx      = x->max_msg > SIZE_MAX / 4 ? SIZE_MAX : 4 * x->max_msg; /* never wraps */
    x->max_rx      = x->max_rx < BUF_MIN ? BUF_MIN : x->max_rx; /* a message fits alone */
    kvp_list_init(&x->pending);
    kvp_list_init(&x->recving);
    kvp_list_init(&x->turns);
    kvp_list_init(&x->closing);
    x->recv_timeout_ns = 1000000ull * ((fm & KVP_XFER_PARAM_RECV_TIMEOUT) ? params->recv_timeout_ms
                                                                         : 30000u);
    x->conn_msgs_max = (fm & KVP_XFER_PARAM_CONN_MSGS_MAX) ? params->conn_msgs_max : 0;
    x->conn_unsent_max =
        (fm & KVP_XFER_PARAM_CONN_UNSENT_MAX) ? params->conn_unsent_max : 0;
    x->max_conns     = (fm & KVP_XFER_PARAM_MAX_CONNS) ? params->max_conns : 0;
    x->send_timeout_ns =
        1000000ull * ((fm & KVP_XFER_PARAM_SEND_TIMEOUT) ? params->send_timeout_ms : 0u);
    x->recv_cb     = (fm & KVP_XFER_PARAM_RECV_CB) ? params->recv_cb : NULL;
    x->conn_cb     = (fm & KVP_XFER_PARAM_CONN_CB) ? params->conn_cb : NULL;
    x->cb_arg      = (fm & KVP_XFER_PARAM_CB_ARG) ? params->cb_arg : NULL;
    x->efd         = -1;
    x->wake_fd     = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (x->wake_fd < 0) {
        KVP_LOG_ERROR(MOD, "eventfd: %s", strerror(errno));
        kvp_free(x);
        return KVP_ERR_IO;
    }
    if (fm & KVP_XFER_PARAM_PEER_ERRORS) {
        x->peer_errors = params->peer_errors;
    } else if ((status = peer_errors_default(&x->peer_errors)) != KVP_OK) {
        goto err_free;
    }

    env_defaults();
    if (!x->peer_errors) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;

        (void)pthread_once(&once, close_log_filter_install);
    }
    st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "ucp_config_read: %s", ucs_status_string(st));
        status = KVP_ERR_IO;
        goto err_free;
    }
    /* Messages up to 1 MiB go eager rather than rendezvous (UCX's default switches far lower on
     * tcp): a session's GET_PAGES reply of a few pages then needs no extra round trips
     * (`kvpack bench node`: get 0.44-0.56 -> 0.68-0.71 GB/s, put unchanged); larger batches keep
     * zero-copy rendezvous. UCX_RNDV_THRESH, when set, wins. */
    if (getenv("UCX_RNDV_THRESH") == NULL) {
        if ((st = ucp_config_modify(cfg, "RNDV_THRESH", KVP_XFER_RNDV_THRESH)) != UCS_OK) {
            KVP_LOG_WARN(MOD, "cannot set the rendezvous threshold: %s", ucs_status_string(st));
        } else {
            x->eager_max = KVP_XFER_EAGER_MAX;
        }
    }
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    cp.features   = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    st = ucp_init(&cp, cfg, &x->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "ucp_init: %s", ucs_status_string(st));
        status = KVP_ERR_IO;
        goto err_free;
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(x->ctx, &wp, &x->worker);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "ucp_worker_create: %s", ucs_status_string(st));
        status = KVP_ERR_IO;
        goto err_cleanup;
    }
    wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    x->max_hdr = (ucp_worker_query(x->worker, &wa) == UCS_OK) ? wa.max_am_header : 4096;
    if (x->max_hdr > XFER_HDR_LIMIT) {
        x->max_hdr = XFER_HDR_LIMIT;
    }
    st = ucp_worker_get_efd(x->worker, &x->efd);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "ucp_worker_get_efd: %s", ucs_status_string(st));
        status = KVP_ERR_IO;
        goto err_worker;
    }
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id    = XFER_AM_ID;
    hp.cb    = am_recv_cb;
    hp.arg   = x;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
    st = ucp_worker_set_am_recv_handler(x->worker, &hp);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(st));
        status = KVP_ERR_IO;
        goto err_worker;
    }
    *x_p = x;
    return KVP_OK;

err_worker:
    ucp_worker_destroy(x->worker);
err_cleanup:
    ucp_cleanup(x->ctx);
err_free:
    close(x->wake_fd);
    kvp_free(x);
    return status;
}

int kvp_xfer_peer_errors(kvp_xfer_h x)
{
    return x->peer_errors;
}

/* Error mode none, at kvp_xfer_destroy: progress until every closed connection's endpoint is
 * flushed and closed (closes_step, close_done_cb), until CLOSE_WAIT_NS after the last close
 * began at most, sleeping on the worker's fd in between. Returns how many are still not flushed:
 * each still queues something UCX will never send (to a peer that takes nothing, or to a hung
 * node that never completed the connection), and UCX 1.13 aborts the process when
 * ucp_worker_destroy meets such an endpoint ("pending request ... should have been flushed"),
 * with no way to cancel it in this mode. The worker and its context are then not destroyed but
 * left as they are (a warning says so), holding their memory and descriptors until the process
 * exits. A close that is flushed and only waits for its peer's answer is safe to destroy (UCX
 * warns that its request was not returned); it is waited for all the same, so that the peer gets
 * its answer. (Leaving the worker in that case too made UCX's async thread fail an assertion,
 * async.c "handler->id == id", in 4 of 6 runs of integ.conncap_err_none.) */
static unsigned closes_wait(kvp_xfer_h x)
{
    const char *peer = NULL;
    unsigned    n    = 0;

    for (;;) {
        uint64_t      now = kvp_time_ns();
        struct pollfd pfd;

        closes_step(x);
        if ((kvp_list_empty(&x->closing) && x->closes_out == 0) || now >= x->close_end_ns) {
            break;
        }
        if (ucp_worker_progress(x->worker) != 0 || ucp_worker_arm(x->worker) != UCS_OK) {
            continue; /* UCS_ERR_BUSY: more to progress */
        }
        pfd.fd      = x->efd;
        pfd.events  = POLLIN;
        pfd.revents = 0;
        (void)poll(&pfd, 1, (int)((x->close_end_ns - now) / 1000000u) + 1);
    }
    for (kvp_list_t *e = x->closing.next; e != &x->closing; e = e->next) {
        peer = KVP_CONTAINER_OF(e, ep_flush_t, link)->peer;
        n++;
    }
    if (n > 0) {
        KVP_LOG_WARN(MOD, "%u closed connection%s (to %s%s) still queue%s sends in UCX %.0f s "
                     "on (error mode none: a peer that takes nothing, or a connection never "
                     "completed): the UCX worker is left undestroyed, its memory and descriptors "
                     "held until the process exits (UCX 1.13 aborts destroying such an endpoint)",
                     n, n == 1 ? "" : "s", peer, n == 1 ? "" : ", ...", n == 1 ? "s" : "",
                     (double)CLOSE_WAIT_NS / 1e9);
    }
    return n;
}

void kvp_xfer_destroy(kvp_xfer_h x)
{
    unsigned stuck;

    if (x == NULL) {
        return;
    }
    for (size_t i = 0; i < x->n_accept; i++) {
        ucp_listener_reject(x->listener, x->accept_q[i]);
    }
    x->n_accept = 0;
    kvp_free(x->accept_q);
    x->accept_q = NULL;
    if (x->listener != NULL) {
        ucp_listener_destroy(x->listener);
        x->listener = NULL;
    }
    while (x->conns != NULL) {
        kvp_xfer_conn_h conn = x->conns;

        x->conns = conn->next;
        ep_close(conn);
        conn_unref(conn);
    }
    /* Finish or drop whatever is still in flight; no receive or connection callbacks reach the
     * user any more (sends still complete, with their status). */
    x->recv_cb = NULL;
    x->conn_cb = NULL;
    for (int i = 0; i < 100 && ucp_worker_progress(x->worker) != 0; i++) {
    }
    stuck = closes_wait(x);
    while (!kvp_list_empty(&x->pending)) {
        pending_drop(x, KVP_CONTAINER_OF(x->pending.next, struct kvp_xfer_msg, queue));
    }
    while (deliver_ready(x) != 0) { /* recv_cb is gone: each is released */
    }
    while (x->dead != NULL) {
        kvp_xfer_conn_h conn = x->dead;

        x->dead = conn->dead_next;
        conn_unref(conn);
    }
    if (stuck == 0) {
        ucp_worker_destroy(x->worker);
    }
    /* Sends UCX never completed: in error mode none a close does not cancel them (it flushes),
     * so a send to a peer that takes nothing stays queued. With the worker gone, or left as it
     * is and never progressed again, nothing can touch them any more: each completes
     * KVP_ERR_CANCELED here. */
    while (x->sends != NULL) {
        send_finish(x->sends, KVP_ERR_CANCELED);
    }
    while (!kvp_list_empty(&x->closing)) { /* their flushes never complete now */
        ep_flush_t *f = KVP_CONTAINER_OF(x->closing.next, ep_flush_t, link);

        kvp_list_del(&f->link);
        kvp_free(f);
    }
    if (stuck == 0) {
        ucp_cleanup(x->ctx);
    }
    for (unsigned i = 0; i < x->n_buf_free; i++) {
        kvp_free(x->buf_free[i]);
    }
    close(x->wake_fd);
    kvp_free(x);
}

/* Whether another socket already listens on addr: bind a socket of our own there first, with
 * SO_REUSEADDR as UCX's listener has it (kvp_xfer_create sets UCX_TCP_CM_REUSEADDR). UCX reports
 * that case as a bare UCS_ERR_BUSY ("Device is busy") after logging its own line to stdout; this
 * way the user reads the real reason and kvpackd's stdout stays its own. 0 when free (or when
 * the check itself cannot run: UCX then has the last word). */
static int listen_addr_in_use(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1, err = 0;

    if (fd < 0) {
        return 0;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE) {
        err = EADDRINUSE;
    }
    close(fd);
    return err;
}

kvp_status_t kvp_xfer_listen(kvp_xfer_h x, const char *host, uint16_t port, uint16_t *port_p)
{
    ucp_listener_params_t lp;
    ucp_listener_attr_t   la;
    struct addrinfo       hints, *ai = NULL;
    char                  portstr[16];
    ucs_status_t          st;
    int                   rc;

    if (x->listener != NULL) {
        KVP_LOG_ERROR(MOD, "already listening");
        return KVP_ERR_EXISTS;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(portstr, sizeof(portstr), "%u", port);
    rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc != 0 || ai == NULL) {
        KVP_LOG_ERROR(MOD, "cannot resolve listen address %s: %s", host ? host : "*",
                      gai_strerror(rc));
        return KVP_ERR_INVALID;
    }
    if (port != 0 && listen_addr_in_use(ai)) {
        KVP_LOG_ERROR(MOD, "listen on %s:%u: address already in use (a socket holds that port, "
                      "usually another process listening there; pick another port)",
                      host ? host : "*", port);
        freeaddrinfo(ai);
        return KVP_ERR_BUSY;
    }
    memset(&lp, 0, sizeof(lp));
    lp.field_mask         = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                            UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr      = ai->ai_addr;
    lp.sockaddr.addrlen   = ai->ai_addrlen;
    lp.conn_handler.cb    = conn_request_cb;
    lp.conn_handler.arg   = x;
    st = ucp_listener_create(x->worker, &lp, &x->listener);
    freeaddrinfo(ai);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "listen on %s:%u: %s", host ? host : "*", port,
                      st == UCS_ERR_BUSY ? "address already in use" : ucs_status_string(st));
        x->listener = NULL;
        return (st == UCS_ERR_BUSY) ? KVP_ERR_BUSY : KVP_ERR_IO;
    }
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    st = ucp_listener_query(x->listener, &la);
    if (st != UCS_OK) {
        KVP_LOG_ERROR(MOD, "ucp_listener_query: %s", ucs_status_string(st));
        ucp_listener_destroy(x->listener);
        x->listener = NULL;
        return KVP_ERR_IO;
    }
    if (port_p != NULL) {
        *port_p = (la.sockaddr.ss_family == AF_INET6)
                      ? ntohs(((struct sockaddr_in6 *)&la.sockaddr)->sin6_port)
                      : ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
    }
    return KVP_OK;
}

kvp_status_t kvp_xfer_connect(kvp_xfer_h x, const char *host, uint16_t port,
                              kvp_xfer_conn_h *conn_p)
{
    ucp_ep_params_t  ep_params;
    struct addrinfo  hints, *ai = NULL;
    char             portstr[16];
    kvp_xfer_conn_h  conn;
    kvp_status_t     status;
    int              rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = AI_NUMERICSERV;
    snprintf(portstr, sizeof(portstr), "%u", port);
    rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc != 0 || ai == NULL) {
        KVP_LOG_ERROR(MOD, "cannot resolve %s: %s", host, gai_strerror(rc));
        return KVP_ERR_PEER_UNREACHABLE;
    }
    conn = kvp_calloc(1, sizeof(*conn), "xfer conn");
    if (conn == NULL) {
        freeaddrinfo(ai);
        return KVP_ERR_NO_MEMORY;
    }
    conn->x      = x;
    conn->refs   = 1;
    conn->status = KVP_OK;
    kvp_list_init(&conn->rx_order);
    snprintf(conn->peer, sizeof(conn->peer), "%s:%u", host, port);
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask       = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep_params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr    = ai->ai_addr;
    ep_params.sockaddr.addrlen = ai->ai_addrlen;
    status = ep_create(x, conn, &ep_params);
    freeaddrinfo(ai);
    if (status != KVP_OK) {
        kvp_free(conn);
        return KVP_ERR_PEER_UNREACHABLE;
    }
    conn->next = x->conns;
    x->conns   = conn;
    *conn_p    = conn;
    return KVP_OK;
}

void kvp_xfer_conn_close(kvp_xfer_conn_h conn)
{
    if (conn == NULL) {
        return;
    }
    conn_unlink(conn);
    ep_close(conn);
    if (conn->status == KVP_OK) {
        conn->status = KVP_ERR_CANCELED;
    }
    conn_unref(conn);
}

kvp_status_t kvp_xfer_conn_status(kvp_xfer_conn_h conn)
{
    return conn->status;
}

const char *kvp_xfer_conn_peer(kvp_xfer_conn_h conn)
{
    return conn->peer;
}

kvp_status_t kvp_xfer_send(kvp_xfer_conn_h conn, const void *hdr, size_t hdr_len,
                           const kvp_xfer_iov_t *iov, int iovcnt, kvp_xfer_send_cb_t cb,
                           void *arg)
{
    kvp_xfer_h          x = conn->x;
    ucp_request_param_t prm;
    send_req_t         *s;
    void               *req;
    const void         *buf   = NULL;
    size_t              count = 0, total = 0;

    if (conn->status != KVP_OK || conn->ep == NULL) {
        return (conn->status != KVP_OK) ? conn->status : KVP_ERR_PEER_GONE;
    }
    if (hdr_len > x->max_hdr || iovcnt < 0) {
        KVP_LOG_ERROR(MOD, "header of %zu bytes over the %zu limit", hdr_len, x->max_hdr);
        return KVP_ERR_TOO_LARGE;
    }
    s = kvp_malloc(sizeof(*s), "xfer send");
    if (s == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    s->hdr = kvp_malloc(hdr_len ? hdr_len : 1, "xfer send hdr");
    if (s->hdr == NULL) {
        kvp_free(s);
        return KVP_ERR_NO_MEMORY;
    }
    memcpy(s->hdr, hdr, hdr_len);
    s->x         = x;
    s->conn      = conn;
    s->cb        = cb;
    s->arg       = arg;
    s->stage     = NULL;
    s->stage_cap = 0;
    s->iov       = NULL;
    for (int i = 0; i < iovcnt; i++) {
        total += iov[i].len;
    }
    /* An eager message is packed into fragments by UCX anyway: from the pieces where they are
     * (`kvpack bench node`, 8 alternated runs each: get +9 % over tcp, +30 % over shm with
     * KVP_UCX_ERR_MODE=none, put unchanged; the staging copy was ~5 % of the CPU profile) */
    if (iovcnt > 1 && total + hdr_len < x->eager_max) {
        s->iov = kvp_malloc((size_t)iovcnt * sizeof(*s->iov), "xfer send iov");
        if (s->iov == NULL) {
            kvp_free(s->hdr);
            kvp_free(s);
            return KVP_ERR_NO_MEMORY;
        }
        for (int i = 0; i < iovcnt; i++) {
            s->iov[i].buffer = (void *)iov[i].buf;
            s->iov[i].length = iov[i].len;
        }
    }
    /* UCX 1.13 (protocol v1) has no zero-copy rendezvous for an iov datatype: it falls back to
     * AM fragments, which on shm means a wake-up per fragment (measured 0.1 GB/s for 42 x 100 KB
     * against 0.8 GB/s contiguous, tcp 0.33 against 0.68). One copy into a contiguous
     * staging buffer is far cheaper, so several pieces go out as one contiguous buffer. */
    if (iovcnt > 1 && total > 0 && s->iov == NULL) {
        uint8_t *p = buf_get(x, total, &s->stage_cap);

        if (p == NULL) {
            kvp_free(s->hdr);
            kvp_free(s);
            return KVP_ERR_NO_MEMORY;
        }
        for (int i = 0; i < iovcnt; i++) {
            if (iov[i].len > 0) {
                memcpy(p, iov[i].buf, iov[i].len);
                p += iov[i].len;
            }
        }
        s->stage = p - total;
    }
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS;
    prm.cb.send      = send_done_cb;
    prm.user_data    = s;
    prm.flags        = UCP_AM_SEND_FLAG_REPLY;
    /* Over the eager size, rendezvous always: until the connection's wireup completes UCX 1.13
     * sends any size eager, which the receiver gets whole before it can check max_msg or its
     * receive budget (ten cold 3 MB messages were all held against a 16 MB budget). */
    if (x->eager_max != 0 && total > 0 && total + hdr_len >= x->eager_max) {
        prm.flags |= UCP_AM_SEND_FLAG_RNDV;
    }
    if (s->iov != NULL) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype      = ucp_dt_make_iov();
        buf               = s->iov;
        count             = (size_t)iovcnt;
    } else if (s->stage != NULL) {
        buf   = s->stage;
        count = total;
    } else if (iovcnt == 1) {
        buf   = iov[0].buf;
        count = iov[0].len;
    }
    conn->refs++;
    req = ucp_am_send_nbx(conn->ep, XFER_AM_ID, s->hdr, hdr_len, buf, count, &prm);
    if (req == NULL || UCS_PTR_IS_ERR(req)) {
        kvp_status_t status = (req == NULL) ? KVP_OK : status_from_ucs(UCS_PTR_STATUS(req));

        conn->refs--;
        buf_put(x, s->stage, s->stage_cap);
        kvp_free(s->iov);
        kvp_free(s->hdr);
        kvp_free(s);
        if (status != KVP_OK) {
            KVP_LOG_INFO(MOD, "send to %s: %s", conn->peer, kvp_status_str(status));
        }
        return status;
    }
    s->bytes   = hdr_len + total + XFER_SEND_COST;
    s->made_ns = kvp_time_ns();
    if (conn->unsent == 0) {
        conn->sends_moved_ns = s->made_ns; /* nothing was waiting for the peer before */
    }
    conn->unsent += s->bytes;
    s->prev = NULL; /* UCX calls send_done_cb from a later progress, never from the send */
    s->next = x->sends;
    if (x->sends != NULL) {
        x->sends->prev = s;
    }
    x->sends = s;
    return KVP_INPROGRESS;
}

const void *kvp_xfer_msg_hdr(kvp_xfer_msg_h msg, size_t *len_p)
{
    *len_p = msg->hdr_len;
    return msg->hdr;
}

const void *kvp_xfer_msg_data(kvp_xfer_msg_h msg, size_t *len_p)
{
    *len_p = (msg->status == KVP_OK) ? msg->data_len : 0;
    return (msg->status == KVP_OK) ? msg->data : NULL;
}

kvp_status_t kvp_xfer_msg_status(kvp_xfer_msg_h msg)
{
    return msg->status;
}

size_t kvp_xfer_msg_sent_len(kvp_xfer_msg_h msg)
{
    return msg->data_len;
}

void kvp_xfer_msg_release(kvp_xfer_msg_h msg)
{
    if (msg == NULL) {
        return;
    }
    if (msg->desc != NULL) {
        ucp_am_data_release(msg->x->worker, msg->desc);
    }
    if (msg->own_data && msg->buf_cap > 0) {
        buf_put(msg->x, msg->data, msg->buf_cap);
    } else if (msg->own_data) {
        kvp_free(msg->data);
    }
    msg->x->rx_reserved -= msg->reserved;
    msg->x->eager_held -= msg->eager_bytes;
    msg->conn->held--;
    if (kvp_list_linked(&msg->order)) { /* dropped undelivered: the ones after it may go */
        kvp_list_del(&msg->order);
        order_flush(msg->conn);
    }
    conn_unref(msg->conn);
    kvp_free(msg);
}

unsigned kvp_xfer_progress(kvp_xfer_h x)
{
    unsigned n = 0, k;

    for (int i = 0; i < XFER_PROGRESS_CALLS && (k = ucp_worker_progress(x->worker)) != 0; i++) {
        n += k;
    }
    n += accept_pending(x);
    n += rndv_start(x);
    n += recv_deadlines(x);
    n += send_deadlines(x);
    n += report_dead(x);
    n += deliver_ready(x);
    if (!kvp_list_empty(&x->closing)) {
        n += closes_step(x);
    }
    return n;
}

static void wake_drain(kvp_xfer_h x)
{
    uint64_t v;

    while (read(x->wake_fd, &v, sizeof(v)) > 0) {
    }
}

/* Take a kvp_xfer_wake: clear the flag and the eventfd; 1 if there was one. */
static int wake_take(kvp_xfer_h x)
{
    if (!atomic_exchange_explicit(&x->woken, 0, memory_order_acq_rel)) {
        return 0;
    }
    wake_drain(x);
    return 1;
}

void kvp_xfer_wait(kvp_xfer_h x, int timeout_ms)
{
    struct pollfd pfd[2];
    uint64_t      spin_end = kvp_time_ns() + 20000; /* spin 20 us before sleeping */
    ucs_status_t  st;

    do {
        if (kvp_xfer_progress(x) != 0 || wake_take(x)) {
            return;
        }
    } while (kvp_time_ns() < spin_end);
    st = ucp_worker_arm(x->worker);
    if (st == UCS_ERR_BUSY) {
        kvp_xfer_progress(x);
        return;
    }
    pfd[0].fd      = x->efd;
    pfd[0].events  = POLLIN;
    pfd[0].revents = 0;
    pfd[1].fd      = x->wake_fd;
    pfd[1].events  = POLLIN;
    pfd[1].revents = 0;
    (void)poll(pfd, 2, timeout_ms);
    if (pfd[1].revents & POLLIN) {
        /* also a wake's write that landed after wake_take had cleared its flag and drained:
         * left there, every poll would return at once and this thread spin while idle */
        wake_drain(x);
    }
    (void)wake_take(x);
    kvp_xfer_progress(x);
}

void kvp_xfer_wake(kvp_xfer_h x)
{
    uint64_t one = 1;

    if (!atomic_exchange_explicit(&x->woken, 1, memory_order_acq_rel)) {
        (void)!write(x->wake_fd, &one, sizeof(one)); /* a full counter is still readable */
    }
}

void kvp_xfer_conn_set_user(kvp_xfer_conn_h conn, void *user)
{
    conn->user = user;
}

size_t kvp_xfer_conn_unsent(kvp_xfer_conn_h conn) { return conn->unsent; }

void *kvp_xfer_conn_user(kvp_xfer_conn_h conn)
{
    return conn->user;
}

/* sends in flight on connections still open (one to a closed or failed connection may never
 * complete in error mode none: nobody waits for it) */
static size_t sends_live(kvp_xfer_h x)
{
    size_t n = 0;

    for (send_req_t *s = x->sends; s != NULL; s = s->next) {
        n += s->conn->status == KVP_OK && s->conn->ep != NULL;
    }
    return n;
}

static void flush_done_cb(void *request, ucs_status_t st, void *user_data)
{
    kvp_xfer_h x = user_data;

    (void)st;
    x->flushing--;
    ucp_request_free(request);
}

/* Flush every open connection (x->flushing counts those under way; one still under way when the
 * connection is closed completes then): a send UCX completed may still sit in its copy buffers,
 * not yet written to the socket, and a force close (error mode peer) drops it. */
static void flush_open(kvp_xfer_h x)
{
    ucp_request_param_t prm;

    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send      = flush_done_cb;
    prm.user_data    = x;
    for (kvp_xfer_conn_h c = x->conns; c != NULL; c = c->next) {
        if (c->status == KVP_OK && c->ep != NULL) {
            void *req = ucp_ep_flush_nbx(c->ep, &prm);

            x->flushing += UCS_PTR_IS_PTR(req);
        }
    }
}

size_t kvp_xfer_drain(kvp_xfer_h x, int timeout_ms)
{
    uint64_t end = kvp_time_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
    size_t   n;

    while ((n = sends_live(x)) > 0 && kvp_time_ns() < end) {
        kvp_xfer_wait(x, 10);
    }
    if (n == 0) { /* completed sends: now out of UCX's buffers too */
        flush_open(x);
        while (x->flushing > 0 && kvp_time_ns() < end) {
            kvp_xfer_wait(x, 10);
        }
        n = x->flushing;
    }
    return n;
}

void kvp_xfer_conn_counts(kvp_xfer_h x, unsigned *open_p, uint64_t *capped_p)
{
    if (open_p != NULL) {
        *open_p = x->n_server;
    }
    if (capped_p != NULL) {
        *capped_p = x->rej_capped.total;
    }
}

size_t kvp_xfer_max_hdr(kvp_xfer_h x)
{
    return x->max_hdr;
}

kvp_status_t kvp_xfer_split_addr(const char *addr, char *host, size_t host_cap, uint16_t *port_p)
{
    const char   *colon;
    char         *end;
    unsigned long port;
    size_t        hlen;

    if (addr == NULL || (colon = strrchr(addr, ':')) == NULL) {
        return KVP_ERR_INVALID;
    }
    hlen = (size_t)(colon - addr);
    if (hlen > 1 && addr[0] == '[' && addr[hlen - 1] == ']') { /* [v6]:port */
        addr++;
        hlen -= 2;
    }
    port = strtoul(colon + 1, &end, 10);
    if (hlen == 0 || hlen >= host_cap || *end != '\0' || colon[1] < '0' || colon[1] > '9' ||
        port > 65535) { /* digits only: strtoul would take " 80", "+80" and "-0" */
        return KVP_ERR_INVALID;
    }
    for (size_t i = 0; i < hlen; i++) { /* a list separator or a blank: never part of a name */
        if (addr[i] == ',' || isspace((unsigned char)addr[i])) {
            return KVP_ERR_INVALID;
        }
    }
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    *port_p    = (uint16_t)port;
    return KVP_OK;
}

kvp_status_t kvp_xfer_parse_addr(const char *addr, char *host, size_t host_cap, uint16_t *port_p)
{
    kvp_status_t s = kvp_xfer_split_addr(addr, host, host_cap, port_p);

    if (s != KVP_OK) {
        KVP_LOG_ERROR(MOD, "address '%s' is not host:port", addr ? addr : "(null)");
    }
    return s;
}
