/* xfer_nccl.c - the NCCL link behind xfer_nccl.h: a kvp_xfer_h carries the control messages
 * (proto/wire.c: hello, accept, batch, ready, ack), NCCL moves the page bytes GPU to GPU, and
 * kernels/crc_cuda.cu checks them where they land. Every wait polls: the communicator's async
 * state (non-blocking init config), the stream, the page check's event (its scratch made once
 * per link), the control connection and the deadline, so a dead peer, a stuck transfer or
 * check is an error and never a hang (the communicator is then aborted). While polling, only
 * the peer's CLOSE is fatal; its other messages wait for the step that expects them.
 * Main flows: connect -> hello -> accept -> comm_init; send: batch (with the sender's budget)
 * -> ready -> ncclSend -> ack; recv: batch -> ncclRecv -> ready -> stream -> check -> ack
 * (none when the sender closed the link first: the batch failed on both sides).
 * tests/transfer/nccl_emu stands in for NCCL and the CUDA runtime to run this file on a CPU. */
#include "kvpack/xfer_nccl.h"
#include "kvpack/alloc.h"
#include "kvpack/crc_cuda.h"
#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MOD       "nccl"
#define LINK_QMAX 8u /* control messages held; the protocol has at most two in flight */
#define LINK_BYE_MS 200u /* how long a failing link waits for its close message to go out */
#define LINK_ACK_MARGIN_MS 1000u /* at most this much of the sender's budget the receiver leaves
                                  * for its ack's way back (an eighth of it, when less) */

enum { POLL_COMM, POLL_STREAM, POLL_CHECK }; /* what link_poll waits for */

_Static_assert(KVP_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "nccl unique id size");
_Static_assert(KVP_WIRE_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "wire unique id size");

struct kvp_nccl_link {
    kvp_xfer_h      x;
    kvp_xfer_conn_h conn;       /* the peer's control connection; NULL before it, after a break */
    kvp_status_t    gone;       /* the peer's connection failed (accepting: not one that failed
                                   before its hello was taken, on_conn) */
    kvp_status_t    broken;     /* KVP_OK while usable */
    int             listening;  /* decode side */
    int             rank;       /* 0 prefill, 1 decode; -1 until set up */
    int             device;
    uint32_t        timeout_ms;
    uint32_t        limit_ms;   /* the length of the deadline link_poll runs under (logs) */
    struct {
        kvp_xfer_conn_h conn;
        kvp_xfer_msg_h  msg;
        uint64_t        at_ns;  /* when it arrived */
    } q[LINK_QMAX];             /* received control messages, oldest at q_head */
    unsigned        q_head, q_n, q_dropped;
    unsigned        q_seen;     /* queued messages link_closed has looked at (from q_head) */
    uint64_t        last_at_ns; /* arrival of the message link_next returned last */
    uint8_t         id[KVP_NCCL_ID_BYTES];
    ncclComm_t      comm;
    cudaStream_t    stream;
    int             have_stream;
    cudaEvent_t     after_default; /* orders the link's stream after the default stream */
    int             have_event;
    kvp_cuda_check_h check;     /* the receiver's GPU page check: scratch made at set-up */
    uint64_t        batch_id;   /* the last batch this side sent */
    kvp_status_t    said;       /* the last control message's send: INPROGRESS until done */
    uint64_t        say_seq;    /* the last control message's number (say_t) */
};

/* ---- private: failure, time ---- */

static uint64_t deadline_in(uint32_t ms)
{
    return kvp_time_ns() + (uint64_t)ms * 1000000u;
}

static kvp_status_t link_say(kvp_nccl_link_h link, kvp_xfer_conn_h conn, const kvp_wire_link_t *m,
                             uint64_t deadline);

/* The link cannot go on: log why, abort the communicator, tell a peer still there (a close
 * message, so it need not wait for its own deadline: UCX 1.13 does not report a closed idle
 * connection to the other side) and close the control connection. Returns status. */
static kvp_status_t link_fail(kvp_nccl_link_h link, kvp_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kvp_status_t link_fail(kvp_nccl_link_h link, kvp_status_t status, const char *fmt, ...)
{
    kvp_xfer_conn_h conn = link->conn;
    kvp_wire_link_t bye;
    va_list         ap;

    memset(&bye, 0, sizeof(bye));
    va_start(ap, fmt);
    vsnprintf(bye.message, sizeof(bye.message), fmt, ap);
    va_end(ap);
    KVP_LOG_ERROR(MOD, "link rank %d: %s (%s): link closed", link->rank, bye.message,
                  kvp_status_str(status));
    if (link->broken == KVP_OK) {
        link->broken = status;
    }
    if (link->comm != NULL) {
        ncclCommAbort(link->comm);
        link->comm = NULL;
    }
    if (conn != NULL && link->gone == KVP_OK) {
        bye.kind   = KVP_WIRE_LINK_CLOSE;
        bye.status = status;
        (void)link_say(link, conn, &bye, deadline_in(LINK_BYE_MS));
    }
    link->conn = NULL;
    kvp_xfer_conn_close(conn);
    return status;
}

/* ---- private: control messages ---- */

static void on_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    kvp_nccl_link_h link = arg;

    if ((link->conn != NULL && conn != link->conn) || link->q_n == LINK_QMAX) {
        link->q_dropped += link->q_n == LINK_QMAX; /* a stranger's: ignored; ours: lost */
        kvp_xfer_msg_release(msg);
        return;
    }
    link->q[(link->q_head + link->q_n) % LINK_QMAX].conn  = conn;
    link->q[(link->q_head + link->q_n) % LINK_QMAX].msg   = msg;
    link->q[(link->q_head + link->q_n) % LINK_QMAX].at_ns = kvp_time_ns();
    link->q_n++;
}

static void on_conn(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    kvp_nccl_link_h link = arg;

    if (conn != link->conn && link->conn != NULL) {
        return; /* a stranger's connection */
    }
    if (link->listening && link->conn == NULL) {
        /* accepting, no hello taken yet: a connection that failed before (a port probe, a
         * prefill gone) is no reason to stop listening; its queued messages go with it (the
         * handle is freed once this returns) and accept waits on for another */
        unsigned kept = 0;

        for (unsigned i = 0; i < link->q_n; i++) {
            unsigned at = (link->q_head + i) % LINK_QMAX;

            if (link->q[at].conn == conn) {
                kvp_xfer_msg_release(link->q[at].msg);
            } else {
                link->q[(link->q_head + kept++) % LINK_QMAX] = link->q[at];
            }
        }
        link->q_n    = kept;
        link->q_seen = 0;
        KVP_LOG_INFO(MOD, "accepting: a connection failed before its hello (%s): ignored",
                     kvp_status_str(status));
        return;
    }
    link->gone = status == KVP_ERR_PEER_UNREACHABLE ? status : KVP_ERR_PEER_GONE;
    if (link->listening) {
        link->conn = NULL; /* a server connection is freed once this returns */
    }
}

/* Unpack a received control message into m (the caller clears it): the header, or for an empty
 * header the data (a message too large for a header, link_say). */
static kvp_status_t msg_unpack(kvp_xfer_msg_h msg, kvp_wire_link_t *m)
{
    size_t      hl, dl;
    const void *h = kvp_xfer_msg_hdr(msg, &hl);
    const void *d = kvp_xfer_msg_data(msg, &dl);

    memset(m, 0, sizeof(*m));
    if (kvp_xfer_msg_status(msg) != KVP_OK) {
        return KVP_ERR_PROTOCOL;
    }
    return hl == 0 && dl > 0 ? kvp_wire_link_unpack(d, dl, 0, m)
                             : kvp_wire_link_unpack(h, hl, dl, m);
}

static void peer_closed(kvp_nccl_link_h link, const kvp_wire_link_t *m)
{
    KVP_LOG_ERROR(MOD, "link rank %d: the peer closed the link: %s (%s)", link->rank, m->message,
                  kvp_status_str(m->status));
    link->gone = KVP_ERR_PEER_GONE;
}

/* Take the oldest queued control message, unpacked into m (the caller clears it) and released;
 * its connection in *conn_p (may be NULL). Returns msg_unpack's status. */
static kvp_status_t queue_pop(kvp_nccl_link_h link, kvp_wire_link_t *m, kvp_xfer_conn_h *conn_p)
{
    kvp_xfer_msg_h msg = link->q[link->q_head].msg;
    kvp_status_t   st;

    if (conn_p != NULL) {
        *conn_p = link->q[link->q_head].conn;
    }
    link->last_at_ns = link->q[link->q_head].at_ns;
    link->q_head     = (link->q_head + 1) % LINK_QMAX;
    link->q_n--;
    link->q_seen -= link->q_seen > 0;
    st = m != NULL ? msg_unpack(msg, m) : KVP_OK;
    kvp_xfer_msg_release(msg);
    return st;
}

/* Wait for the next control message until deadline: unpacked into m (the caller clears it),
 * its connection in *conn_p (may be NULL; valid while the peer's connection lives). */
static kvp_status_t link_next(kvp_nccl_link_h link, uint64_t deadline, kvp_wire_link_t *m,
                              kvp_xfer_conn_h *conn_p)
{
    memset(m, 0, sizeof(*m));
    for (;;) {
        kvp_xfer_progress(link->x);
        if (link->q_n > 0) {
            kvp_status_t st = queue_pop(link, m, conn_p);

            if (st == KVP_OK && m->kind == KVP_WIRE_LINK_CLOSE) {
                peer_closed(link, m);
                st = KVP_ERR_PEER_GONE;
            }
            return st;
        }
        if (link->q_dropped > 0) {
            return KVP_ERR_PROTOCOL;
        }
        if (link->gone != KVP_OK) {
            return link->gone;
        }
        if (kvp_time_ns() >= deadline) {
            return KVP_ERR_TIMEOUT;
        }
        kvp_xfer_wait(link->x, 2);
    }
}

/* Whether the peer closed the link: a CLOSE among the queued control messages (each looked at
 * once). Every other message stays queued, in order, for the next link_expect, which refuses
 * one out of step: a BATCH may rightly arrive while this side still polls its communicator's
 * init (real NCCL finishes the two ranks' inits at different moments), an ACK while the
 * sender's stream has not reported drained yet. */
static int link_closed(kvp_nccl_link_h link)
{
    for (; link->q_seen < link->q_n; link->q_seen++) {
        kvp_wire_link_t m;
        kvp_status_t    st = msg_unpack(link->q[(link->q_head + link->q_seen) % LINK_QMAX].msg, &m);
        int             closed = st == KVP_OK && m.kind == KVP_WIRE_LINK_CLOSE;

        if (closed) {
            peer_closed(link, &m);
        }
        kvp_wire_link_clear(&m);
        if (closed) {
            return 1;
        }
    }
    return 0;
}

/* link_next for a message of kind (of batch batch_id and n_pages pages where those are not 0 and
 * UINT32_MAX): another one is KVP_ERR_PROTOCOL; on any error *m is cleared. */
static kvp_status_t link_expect(kvp_nccl_link_h link, uint64_t deadline, kvp_wire_link_kind_t kind,
                                uint64_t batch_id, uint32_t n_pages, kvp_wire_link_t *m)
{
    kvp_status_t st = link_next(link, deadline, m, NULL);

    if (st == KVP_OK && (m->kind != kind || (batch_id != 0 && m->batch_id != batch_id) ||
                         (n_pages != UINT32_MAX && m->n_pages != n_pages))) {
        st = KVP_ERR_PROTOCOL;
    }
    if (st != KVP_OK) {
        kvp_wire_link_clear(m);
    }
    return st;
}

/* One control message's send: its completion lands in link->said only while it is the link's
 * latest (an older one, left in flight by a timed-out wait, completes when its connection
 * closes); buf (a message sent as data) is held until then. */
typedef struct {
    kvp_nccl_link_h link;
    uint64_t        seq;
    uint8_t        *buf;
} say_t;

static void said(void *arg, kvp_status_t status)
{
    say_t *s = arg;

    if (s->seq == s->link->say_seq) {
        s->link->said = status;
    }
    kvp_free(s->buf);
    kvp_free(s);
}

/* Send m to conn and wait (until deadline, or the peer's connection failing) for the send to
 * complete, so a refusal is out before anything is closed. A message larger than the transport's
 * largest header (a BATCH of thousands of lengths: 3 bytes each from 16 KiB, 4 from 2 MiB, and
 * UCX's header limit is about 8 KB on TCP) goes as the data of a message with an empty header
 * (msg_unpack takes either). A send left in flight completes when its connection closes
 * (link_fail or destroy). */
static kvp_status_t link_say(kvp_nccl_link_h link, kvp_xfer_conn_h conn, const kvp_wire_link_t *m,
                             uint64_t deadline)
{
    static const uint8_t none = 0;
    kvp_xfer_iov_t       iov;
    kvp_status_t         st;
    uint8_t             *buf;
    size_t               len;
    say_t               *s;

    if (conn == NULL) {
        return link->gone != KVP_OK ? link->gone : KVP_ERR_PEER_GONE;
    }
    st = kvp_wire_link_pack(m, &buf, &len);
    if (st != KVP_OK) {
        return st;
    }
    s = kvp_calloc(1, sizeof(*s), "nccl say");
    if (s == NULL) {
        kvp_free(buf);
        return KVP_ERR_NO_MEMORY;
    }
    s->link    = link;
    s->seq     = ++link->say_seq;
    link->said = KVP_INPROGRESS;
    if (len <= kvp_xfer_max_hdr(link->x)) {
        st = kvp_xfer_send(conn, buf, len, NULL, 0, said, s);
        kvp_free(buf); /* the header is copied */
    } else {
        iov.buf = buf;
        iov.len = len;
        s->buf  = buf;
        st = kvp_xfer_send(conn, &none, 0, &iov, 1, said, s);
    }
    if (st != KVP_INPROGRESS) {
        kvp_free(s->buf); /* said is not called */
        kvp_free(s);
        return st;
    }
    while (link->said == KVP_INPROGRESS && link->gone == KVP_OK && kvp_time_ns() < deadline) {
        kvp_xfer_wait(link->x, 2);
    }
    if (link->said == KVP_INPROGRESS) {
        return link->gone != KVP_OK ? link->gone : KVP_ERR_TIMEOUT;
    }
    return link->said;
}

/* ---- private: device, communicator ---- */

static int nccl_major(uint32_t code)
{
    return (int)(code >= 10000 ? code / 10000 : code / 1000); /* 2.9+: X*10000+Y*100+Z */
}

/* This side's device, or index -1 and why not. */
static int gpu_probe(int device, kvp_wire_link_dev_t *d)
{
    struct cudaDeviceProp prop;
    int                   n = 0; /* cudaGetDeviceCount leaves it alone when it fails */
    cudaError_t           e = cudaGetDeviceCount(&n);

    memset(d, 0, sizeof(*d));
    d->index = -1;
    if (e != cudaSuccess) {
        snprintf(d->why, sizeof(d->why), "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    if (device < 0 || device >= n) {
        snprintf(d->why, sizeof(d->why), "device %d asked for, %d present", device, n);
        return 0;
    }
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        snprintf(d->why, sizeof(d->why), "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    d->index = device;
    d->cc    = (uint32_t)(prop.major * 10 + prop.minor);
    snprintf(d->name, sizeof(d->name), "%.63s", prop.name);
    return 1;
}

/* Poll until what is done: the communicator's work (POLL_COMM), the link's stream drained
 * (POLL_STREAM) or the page check (POLL_CHECK, an event query): an NCCL, CUDA or check error, the
 * peer closing the link or its control connection failing, or the deadline fail the link; the
 * peer's other messages stay queued (link_closed). */
static kvp_status_t link_poll(kvp_nccl_link_h link, uint64_t deadline, int what_kind,
                              const char *what)
{
    for (;;) {
        ncclResult_t a = ncclInProgress, r = ncclCommGetAsyncError(link->comm, &a);

        if (r != ncclSuccess) {
            a = r;
        }
        if (a != ncclSuccess && a != ncclInProgress) {
            return link_fail(link, KVP_ERR_DEVICE, "%s: nccl %s (%s)", what,
                             ncclGetErrorString(a), ncclGetLastError(link->comm));
        }
        if (what_kind == POLL_CHECK) {
            kvp_status_t c = kvp_cuda_check_poll(link->check, NULL, NULL);

            if (c == KVP_OK || c == KVP_ERR_CORRUPT) {
                return KVP_OK;
            }
            if (c != KVP_INPROGRESS) {
                return link_fail(link, c, "%s: the check failed", what);
            }
        } else if (what_kind == POLL_STREAM && a == ncclSuccess) {
            cudaError_t e = cudaStreamQuery(link->stream);

            if (e == cudaSuccess) {
                return KVP_OK;
            }
            (void)cudaGetLastError(); /* "not ready" too is left as the last error (cuda_int.h) */
            if (e != cudaErrorNotReady) {
                return link_fail(link, KVP_ERR_DEVICE, "%s: cuda %s", what, cudaGetErrorString(e));
            }
        } else if (a == ncclSuccess) {
            return KVP_OK;
        }
        kvp_xfer_progress(link->x);
        if (link_closed(link)) {
            return link_fail(link, KVP_ERR_PEER_GONE, "%s: close from the peer", what);
        }
        if (link->q_dropped > 0) {
            return link_fail(link, KVP_ERR_PROTOCOL, "%s: control messages lost (too many from "
                             "the peer)", what);
        }
        if (link->gone != KVP_OK) {
            return link_fail(link, link->gone, "%s: the peer's control connection failed", what);
        }
        if (kvp_time_ns() >= deadline) {
            return link_fail(link, KVP_ERR_TIMEOUT, "%s: not done within %u ms", what,
                             link->limit_ms);
        }
        kvp_xfer_wait(link->x, 1);
    }
}

/* The link's stream is non-blocking: it would not wait for the legacy default stream, where a
 * caller's cudaMemcpy from pageable memory may not have landed yet when it returns, or a kernel
 * of its may still write (send) or read (recv) the pages. So each batch's NCCL calls wait for
 * what was queued there before them (on the GPU; the host does not block). */
static kvp_status_t after_default_stream(kvp_nccl_link_h link, const char *what)
{
    cudaError_t e = cudaEventRecord(link->after_default, cudaStreamLegacy);

    if (e == cudaSuccess) {
        e = cudaStreamWaitEvent(link->stream, link->after_default, 0);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return link_fail(link, KVP_ERR_DEVICE, "%s: ordering after the default stream: %s", what,
                         cudaGetErrorString(e));
    }
    return KVP_OK;
}

static kvp_status_t comm_init(kvp_nccl_link_h link, int rank, uint64_t deadline)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId uid;
    ncclResult_t r;
    cudaError_t  e;
    kvp_status_t st;

    link->rank = rank;
    e = cudaSetDevice(link->device);
    if (e == cudaSuccess) {
        e = cudaStreamCreateWithFlags(&link->stream, cudaStreamNonBlocking);
        link->have_stream = e == cudaSuccess;
    }
    if (e == cudaSuccess) {
        e = cudaEventCreateWithFlags(&link->after_default, cudaEventDisableTiming);
        link->have_event = e == cudaSuccess;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return link_fail(link, KVP_ERR_DEVICE, "device %d: %s", link->device,
                         cudaGetErrorString(e));
    }
    cfg.blocking = 0; /* init and every call return at once; link_poll waits with a deadline */
    memcpy(uid.internal, link->id, sizeof(uid.internal));
    r = ncclCommInitRankConfig(&link->comm, 2, uid, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        return link_fail(link, KVP_ERR_DEVICE, "ncclCommInitRankConfig rank %d: %s (%s)", rank,
                         ncclGetErrorString(r), ncclGetLastError(link->comm));
    }
    st = kvp_cuda_check_create(KVP_WIRE_MAX_PAGES, &link->check);
    if (st != KVP_OK) {
        return link_fail(link, st, "device %d: the page check's scratch", link->device);
    }
    if (link_poll(link, deadline, POLL_COMM, "communicator set-up") != KVP_OK) {
        return link->broken;
    }
    KVP_LOG_INFO(MOD, "link up: rank %d on device %d", rank, link->device);
    return KVP_OK;
}

/* ---- API: set-up ---- */

kvp_status_t kvp_nccl_link_create(const kvp_nccl_params_t *params, kvp_nccl_link_h *link_p)
{
    uint64_t          fm = params != NULL ? params->field_mask : 0;
    kvp_xfer_params_t xp = {0};
    kvp_nccl_link_h   link;
    kvp_status_t      st;

    link = kvp_calloc(1, sizeof(*link), "nccl link");
    if (link == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    link->rank       = -1;
    link->device     = (fm & KVP_NCCL_PARAM_DEVICE) ? params->device : 0;
    link->timeout_ms = (fm & KVP_NCCL_PARAM_TIMEOUT_MS) ? params->timeout_ms : 30000;
    link->limit_ms   = link->timeout_ms;
    xp.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG |
                    KVP_XFER_PARAM_MAX_MSG;
    xp.recv_cb       = on_recv;
    xp.conn_cb       = on_conn;
    xp.cb_arg        = link;
    xp.max_msg_bytes = 1u << 20; /* control messages only: no data */
    st = kvp_xfer_create(&xp, &link->x);
    if (st != KVP_OK) {
        kvp_free(link);
        return st;
    }
    *link_p = link;
    return KVP_OK;
}

void kvp_nccl_link_destroy(kvp_nccl_link_h link)
{
    if (link == NULL) {
        return;
    }
    if (link->rank >= 0) {
        (void)cudaSetDevice(link->device); /* the caller's thread may be on another device */
    }
    if (link->comm != NULL) {
        ncclCommDestroy(link->comm);
    }
    kvp_cuda_check_destroy(link->check); /* a check still queued: waited for (a finite kernel) */
    if (link->have_event) {
        cudaEventDestroy(link->after_default);
    }
    if (link->have_stream) {
        cudaStreamDestroy(link->stream);
    }
    while (link->q_n > 0) {
        (void)queue_pop(link, NULL, NULL);
    }
    kvp_xfer_destroy(link->x);
    kvp_free(link);
}

kvp_status_t kvp_nccl_link_listen(kvp_nccl_link_h link, const char *host, uint16_t port,
                                  uint16_t *port_p)
{
    uint16_t     bound = 0;
    kvp_status_t st;

    if (link == NULL || host == NULL || link->listening || link->rank >= 0) {
        return KVP_ERR_INVALID;
    }
    st = kvp_xfer_listen(link->x, host, port, &bound);
    if (st == KVP_OK) {
        link->listening = 1;
        if (port_p != NULL) {
            *port_p = bound;
        }
    }
    return st;
}

/* The decode side's verdict on a hello (0 = taken), its reason in why. */
static kvp_status_t hello_check(const kvp_wire_link_t *h, int own_nccl, int have_gpu,
                                const kvp_wire_link_dev_t *own, char *why, size_t cap)
{
    if (nccl_major(h->nccl_version) != nccl_major((uint32_t)own_nccl)) {
        snprintf(why, cap, "prefill runs nccl %u, this decode side %d: major versions differ",
                 h->nccl_version, own_nccl);
    } else if (h->device.index < 0) {
        snprintf(why, cap, "prefill has no usable gpu (%.200s)", h->device.why);
    } else if (!have_gpu) {
        snprintf(why, cap, "decode side has no usable gpu (%.200s)", own->why);
    } else {
        return KVP_OK;
    }
    return KVP_ERR_UNSUPPORTED;
}

/* Accepting: the next hello (or a message of another link version, to be refused) by deadline.
 * Anything else that comes first (a stranger's junk, a stray READY or CLOSE) is dropped and
 * logged, as a connection that fails before its hello is ignored (on_conn): no stranger can end
 * the accept. Once a hello is taken, what other connections queued is released, so none of it
 * can pass for the prefill's later. */
static kvp_status_t accept_hello(kvp_nccl_link_h link, uint64_t deadline, kvp_wire_link_t *h,
                                 kvp_xfer_conn_h *conn_p)
{
    for (;;) {
        kvp_xfer_progress(link->x);
        while (link->q_n > 0) {
            kvp_status_t st   = queue_pop(link, h, conn_p);
            unsigned     kept = 0;

            if (!((st == KVP_OK || st == KVP_ERR_UNSUPPORTED) && h->kind == KVP_WIRE_LINK_HELLO)) {
                KVP_LOG_INFO(MOD, "accepting: a message that is no hello (%s, kind %d) from %s: "
                             "dropped", kvp_status_str(st), (int)h->kind,
                             kvp_xfer_conn_peer(*conn_p));
                kvp_wire_link_clear(h);
                continue;
            }
            for (unsigned i = 0; i < link->q_n; i++) { /* the rest: the hello's connection's only */
                unsigned at = (link->q_head + i) % LINK_QMAX;

                if (link->q[at].conn == *conn_p) {
                    link->q[(link->q_head + kept++) % LINK_QMAX] = link->q[at];
                } else {
                    kvp_xfer_msg_release(link->q[at].msg);
                }
            }
            link->q_n       = kept;
            link->q_seen    = 0;
            link->q_dropped = 0;
            return st;
        }
        link->q_dropped = 0; /* strangers' messages past the queue: nothing of the prefill's yet */
        if (link->gone != KVP_OK) {
            return link->gone;
        }
        if (kvp_time_ns() >= deadline) {
            return KVP_ERR_TIMEOUT;
        }
        kvp_xfer_wait(link->x, 2);
    }
}

kvp_status_t kvp_nccl_link_accept(kvp_nccl_link_h link)
{
    uint64_t        deadline;
    kvp_wire_link_t h, a;
    kvp_xfer_conn_h conn = NULL;
    kvp_status_t    st;
    int             have, version = 0;

    if (link == NULL || !link->listening || link->rank >= 0 || link->broken != KVP_OK) {
        return link == NULL || link->broken == KVP_OK ? KVP_ERR_INVALID : link->broken;
    }
    deadline = deadline_in(link->timeout_ms);
    st       = accept_hello(link, deadline, &h, &conn);
    memset(&a, 0, sizeof(a));
    a.kind = KVP_WIRE_LINK_ACCEPT;
    ncclGetVersion(&version);
    a.nccl_version = (uint32_t)version;
    have = gpu_probe(link->device, &a.device);
    if (st == KVP_ERR_UNSUPPORTED && link->gone == KVP_OK) { /* another link version: say so */
        a.status = KVP_ERR_UNSUPPORTED;
        snprintf(a.message, sizeof(a.message), "link version %u refused: this side speaks %u",
                 h.version, KVP_WIRE_LINK_VERSION);
    } else if (st == KVP_OK && link->gone == KVP_OK) {
        link->conn = conn; /* alive: its failure would have been reported before its message */
        memcpy(link->id, h.unique_id, sizeof(link->id));
        a.status = hello_check(&h, version, have, &a.device, a.message, sizeof(a.message));
    }
    kvp_wire_link_clear(&h);
    if (link->gone != KVP_OK || (st != KVP_OK && a.status == KVP_OK)) {
        st = link->gone != KVP_OK ? link->gone : st;
        return link_fail(link, st, "no hello from a prefill");
    }
    if (link->conn == NULL) { /* answered on the connection the hello came by */
        link->conn = conn;
    }
    st = link_say(link, link->conn, &a, deadline);
    if (a.status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "refused a prefill: %s", a.message);
        link->broken = a.status; /* the refusal is out; the peer closes */
        return a.status;
    }
    if (st != KVP_OK) {
        return link_fail(link, st, "answering the hello");
    }
    return comm_init(link, 1, deadline);
}

kvp_status_t kvp_nccl_link_connect(kvp_nccl_link_h link, const char *host, uint16_t port)
{
    uint64_t        deadline;
    kvp_wire_link_t h, a;
    ncclUniqueId    uid;
    ncclResult_t    r;
    kvp_status_t    st;
    int             version = 0;

    if (link == NULL || host == NULL || link->listening || link->rank >= 0 || link->conn != NULL ||
        link->broken != KVP_OK) {
        return KVP_ERR_INVALID;
    }
    deadline = deadline_in(link->timeout_ms);
    st       = kvp_xfer_connect(link->x, host, port, &link->conn);
    if (st != KVP_OK) {
        return st;
    }
    r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess) {
        return link_fail(link, KVP_ERR_DEVICE, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    memcpy(link->id, uid.internal, sizeof(link->id));
    memset(&h, 0, sizeof(h));
    h.kind = KVP_WIRE_LINK_HELLO;
    ncclGetVersion(&version);
    h.nccl_version = (uint32_t)version;
    memcpy(h.unique_id, link->id, sizeof(h.unique_id));
    (void)gpu_probe(link->device, &h.device); /* the decode side judges it */
    st = link_say(link, link->conn, &h, deadline);
    if (st != KVP_OK) {
        return link_fail(link, st, "sending the hello to %s:%u", host, port);
    }
    st = link_next(link, deadline, &a, NULL);
    if (st == KVP_ERR_UNSUPPORTED) {
        uint32_t v = a.version;

        kvp_wire_link_clear(&a);
        return link_fail(link, st, "decode side speaks link version %u, this side %u", v,
                         KVP_WIRE_LINK_VERSION);
    }
    if (st == KVP_OK && a.kind != KVP_WIRE_LINK_ACCEPT) {
        st = KVP_ERR_PROTOCOL;
    }
    if (st != KVP_OK) {
        kvp_wire_link_clear(&a);
        return link_fail(link, st, "no answer to the hello from %s:%u", host, port);
    }
    if (a.status == KVP_OK && nccl_major(a.nccl_version) != nccl_major((uint32_t)version)) {
        a.status = KVP_ERR_UNSUPPORTED; /* an older decode side that did not check */
        snprintf(a.message, sizeof(a.message), "decode runs nccl %u, this side %d",
                 a.nccl_version, version);
    }
    st = a.status;
    if (st != KVP_OK) {
        KVP_LOG_ERROR(MOD, "decode side %s:%u refused the link: %s (%s)", host, port, a.message,
                      kvp_status_str(st));
        link->broken = st;
        return st;
    }
    KVP_LOG_INFO(MOD, "decode side %s:%u took the link (device %d %s)", host, port,
                 a.device.index, a.device.name);
    return comm_init(link, 0, deadline);
}

/* ---- API: batches ---- */

static kvp_status_t link_usable(kvp_nccl_link_h link)
{
    if (link->broken != KVP_OK) {
        return link->broken;
    }
    return link->rank < 0 || link->comm == NULL ? KVP_ERR_NOT_FOUND : KVP_OK;
}

/* A batch may run on another thread than the set-up did: the CUDA device is per thread (the
 * stream and the check kernel must be on the link's). */
static kvp_status_t link_enter(kvp_nccl_link_h link)
{
    kvp_status_t st = link_usable(link);
    cudaError_t  e;

    if (st != KVP_OK) {
        return st;
    }
    link->limit_ms = link->timeout_ms;
    e = cudaSetDevice(link->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return link_fail(link, KVP_ERR_DEVICE, "device %d: %s", link->device,
                         cudaGetErrorString(e));
    }
    return KVP_OK;
}

/* "pages 3, 7 (of 9)" into out: the failed ones, as many as fit. */
static void name_bad(const kvp_status_t *st, uint32_t n, char *out, size_t cap)
{
    size_t at = (size_t)snprintf(out, cap, "pages");

    for (uint32_t i = 0; i < n && at + 16 < cap; i++) {
        if (st[i] != KVP_OK) {
            at += (size_t)snprintf(out + at, cap - at, "%s %u", at > 5 ? "," : "", i);
        }
    }
    snprintf(out + at, cap - at, " (of %u) failed their check", n);
}

kvp_status_t kvp_nccl_link_send(kvp_nccl_link_h link, const void *const *pages,
                                const uint32_t *lens, uint32_t n)
{
    kvp_wire_link_t b, m;
    uint64_t        deadline;
    kvp_status_t    st;
    ncclResult_t    r;
    char            bad[KVP_WIRE_MSG_MAX];

    if (link == NULL || pages == NULL || lens == NULL || n == 0 || n > KVP_WIRE_MAX_PAGES) {
        return KVP_ERR_INVALID;
    }
    st = link_enter(link);
    if (st != KVP_OK) {
        return st;
    }
    deadline = deadline_in(link->timeout_ms);
    memset(&b, 0, sizeof(b));
    b.kind      = KVP_WIRE_LINK_BATCH;
    b.batch_id  = ++link->batch_id;
    b.n_pages   = n;
    b.page_lens = (uint32_t *)lens;
    b.budget_ms = link->timeout_ms;
    st = link_say(link, link->conn, &b, deadline);
    if (st == KVP_ERR_INVALID) {
        return st; /* lengths the wire refuses (logged): nothing sent */
    }
    if (st != KVP_OK) {
        return link_fail(link, st, "sending batch %llu", (unsigned long long)b.batch_id);
    }
    st = link_expect(link, deadline, KVP_WIRE_LINK_READY, b.batch_id, UINT32_MAX, &m);
    if (st != KVP_OK) {
        return link_fail(link, st, "waiting for the receiver of batch %llu",
                         (unsigned long long)b.batch_id);
    }
    st = m.status;
    if (st != KVP_OK) {
        KVP_LOG_ERROR(MOD, "batch %llu refused by the receiver: %s (%s)",
                      (unsigned long long)b.batch_id, m.message, kvp_status_str(st));
    }
    kvp_wire_link_clear(&m);
    if (st != KVP_OK) {
        return st; /* nothing moved: the link goes on */
    }
    if (after_default_stream(link, "sending pages") != KVP_OK) {
        return link->broken;
    }
    ncclGroupStart();
    for (uint32_t i = 0; i < n; i++) {
        r = ncclSend(pages[i], lens[i], ncclUint8, 1 - link->rank, link->comm, link->stream);
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            return link_fail(link, KVP_ERR_DEVICE, "ncclSend page %u: %s", i,
                             ncclGetErrorString(r));
        }
    }
    r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) {
        return link_fail(link, KVP_ERR_DEVICE, "ncclGroupEnd: %s", ncclGetErrorString(r));
    }
    if (link_poll(link, deadline, POLL_STREAM, "sending pages") != KVP_OK) {
        return link->broken;
    }
    st = link_expect(link, deadline, KVP_WIRE_LINK_ACK, b.batch_id, n, &m);
    if (st != KVP_OK) {
        return link_fail(link, st, "waiting for the ack of batch %llu",
                         (unsigned long long)b.batch_id);
    }
    st = m.status;
    if (st != KVP_OK) {
        name_bad(m.page_status, n, bad, sizeof(bad));
        KVP_LOG_ERROR(MOD, "batch %llu: %s at the receiver (%s)", (unsigned long long)b.batch_id,
                      bad, kvp_status_str(st));
    }
    kvp_wire_link_clear(&m);
    return st;
}

/* The receiver's time for a batch: its own timeout, or less when the sender said it has less
 * left (budget_ms), then less a margin for the ack's way back, so the receiver gives up before
 * the sender does and never acks a batch the sender already counted as failed. */
static uint32_t recv_budget(uint32_t own_ms, uint32_t budget_ms)
{
    uint32_t margin = budget_ms / 8 < LINK_ACK_MARGIN_MS ? budget_ms / 8 : LINK_ACK_MARGIN_MS;

    return budget_ms == 0 || budget_ms - margin >= own_ms ? own_ms : budget_ms - margin;
}

/* Answer a batch with status (READY or ACK) and why. */
static kvp_status_t link_answer(kvp_nccl_link_h link, kvp_wire_link_kind_t kind, uint64_t id,
                                kvp_status_t status, const char *why, const kvp_status_t *pst,
                                uint32_t n, uint64_t deadline)
{
    kvp_wire_link_t m;

    memset(&m, 0, sizeof(m));
    m.kind        = kind;
    m.batch_id    = id;
    m.status      = status;
    m.n_pages     = pst != NULL ? n : 0;
    m.page_status = (kvp_status_t *)pst;
    snprintf(m.message, sizeof(m.message), "%s", why);
    return link_say(link, link->conn, &m, deadline);
}

kvp_status_t kvp_nccl_link_recv(kvp_nccl_link_h link, void *buf, size_t cap, uint32_t *lens,
                                uint32_t lens_cap, uint32_t wait_ms, uint32_t *n_p,
                                kvp_status_t *page_status)
{
    kvp_wire_link_t b;
    kvp_status_t   *pst = NULL, st;
    uint64_t        deadline, total = 0;
    uint32_t        n_bad = 0;
    ncclResult_t    r;
    char            why[KVP_WIRE_MSG_MAX];

    if (link == NULL || buf == NULL || lens == NULL || lens_cap == 0 || n_p == NULL) {
        return KVP_ERR_INVALID;
    }
    st = link_enter(link);
    if (st != KVP_OK) {
        return st;
    }
    st = link_expect(link, deadline_in(wait_ms), KVP_WIRE_LINK_BATCH, 0, UINT32_MAX, &b);
    if (st == KVP_ERR_TIMEOUT) {
        return st; /* no batch began: nothing to undo */
    }
    if (st != KVP_OK) {
        return link_fail(link, st, "waiting for a batch");
    }
    link->limit_ms = recv_budget(link->timeout_ms, b.budget_ms);
    deadline       = link->last_at_ns + (uint64_t)link->limit_ms * 1000000u; /* from when this
                  * side saw it arrive (only while the link is progressed: after an idle wait,
                  * the recv call itself) */
    for (uint32_t i = 0; i < b.n_pages; i++) {
        total += b.page_lens[i];
    }
    if (b.n_pages > lens_cap || total > cap) {
        snprintf(why, sizeof(why), "batch %llu of %u pages, %llu bytes, does not fit the "
                 "receive buffer (%zu bytes, %u pages)", (unsigned long long)b.batch_id,
                 b.n_pages, (unsigned long long)total, cap, lens_cap);
        KVP_LOG_ERROR(MOD, "%s: refused", why);
        st = link_answer(link, KVP_WIRE_LINK_READY, b.batch_id, KVP_ERR_TOO_LARGE, why, NULL, 0,
                         deadline);
        kvp_wire_link_clear(&b);
        return st == KVP_OK ? KVP_ERR_TOO_LARGE : link_fail(link, st, "refusing a batch");
    }
    pst = page_status != NULL ? page_status : kvp_malloc(b.n_pages * sizeof(*pst), "nccl recv");
    if (pst == NULL) {
        kvp_wire_link_clear(&b);
        return link_fail(link, KVP_ERR_NO_MEMORY, "receiving a batch");
    }
    if (after_default_stream(link, "receiving pages") != KVP_OK) {
        if (pst != page_status) {
            kvp_free(pst);
        }
        kvp_wire_link_clear(&b);
        return link->broken;
    }
    ncclGroupStart();
    r = ncclSuccess;
    for (uint64_t i = 0, at = 0; i < b.n_pages && (r == ncclSuccess || r == ncclInProgress); i++) {
        r = ncclRecv((uint8_t *)buf + at, b.page_lens[i], ncclUint8, 1 - link->rank, link->comm,
                     link->stream);
        at += b.page_lens[i];
    }
    if (r == ncclSuccess || r == ncclInProgress) {
        r = ncclGroupEnd();
    } else {
        ncclGroupEnd();
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        st = link_fail(link, KVP_ERR_DEVICE, "posting the receives: %s", ncclGetErrorString(r));
    } else if ((st = link_answer(link, KVP_WIRE_LINK_READY, b.batch_id, KVP_OK, "", NULL, 0,
                                 deadline)) != KVP_OK) {
        st = link_fail(link, st, "answering batch %llu", (unsigned long long)b.batch_id);
    } else if (link_poll(link, deadline, POLL_STREAM, "receiving pages") != KVP_OK) {
        st = link->broken;
    } else if ((st = kvp_cuda_check_start(link->check, buf, b.page_lens, b.n_pages,
                                          (void *)link->stream)) != KVP_OK) {
        st = link_fail(link, st, "checking batch %llu on the gpu", (unsigned long long)b.batch_id);
    } else if (link_poll(link, deadline, POLL_CHECK, "checking pages") != KVP_OK) {
        st = link->broken;
    } else {
        kvp_xfer_progress(link->x);
        st = kvp_cuda_check_poll(link->check, pst, &n_bad);
        if (link_closed(link)) { /* the sender gave up before the ack: the batch failed */
            st = link_fail(link, KVP_ERR_PEER_GONE, "batch %llu: closed by the sender before "
                           "the ack", (unsigned long long)b.batch_id);
        } else {
            name_bad(pst, b.n_pages, why, sizeof(why));
            if (st != KVP_OK) {
                KVP_LOG_ERROR(MOD, "batch %llu: %s on the gpu", (unsigned long long)b.batch_id,
                              why);
            }
            kvp_status_t a = link_answer(link, KVP_WIRE_LINK_ACK, b.batch_id, st,
                                         st == KVP_OK ? "" : why, pst, b.n_pages, deadline);
            if (a != KVP_OK) {
                st = link_fail(link, a, "acking batch %llu", (unsigned long long)b.batch_id);
            } else {
                memcpy(lens, b.page_lens, b.n_pages * sizeof(*lens));
                *n_p = b.n_pages;
            }
        }
    }
    if (pst != page_status) {
        kvp_free(pst);
    }
    kvp_wire_link_clear(&b);
    return st;
}

/* ---- API: state ---- */

kvp_status_t kvp_nccl_link_status(kvp_nccl_link_h link)
{
    return link == NULL ? KVP_ERR_INVALID : link_usable(link);
}

void kvp_nccl_link_unique_id(kvp_nccl_link_h link, uint8_t id[KVP_NCCL_ID_BYTES])
{
    memcpy(id, link->id, KVP_NCCL_ID_BYTES);
}

int kvp_nccl_gpus(void)
{
    int n = 0;

    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}
