/* client.c - libkvpack: the engine-side client of one kvpackd node (kvpack.h).
 * Requests are protobuf headers (proto/wire) with pages or records as bulk data, sent over the
 * transfer layer; replies are matched by request id. Every call has a deadline: when it passes,
 * the connection is force-closed (cancelling whatever is in flight) and the call returns
 * KVP_ERR_TIMEOUT; the next call reconnects. PUT_PAGES is batched and pipelined (bounded bytes
 * per message and messages in flight); so is GET_PAGES, each reply copied once into one block its
 * pages point into. get_session verifies every page (CRC, key, layer, one codec and geometry
 * matching the record and, with _expect, the caller) before returning.
 * Main flow: kvp_client_get_session -> GET_SESSION (the record and its first pages) ->
 * verify_tail -> take_inline -> get_pages for the rest (get_issue / get_take, up to max_inflight
 * in flight) -> take_pages -> check_shape per page. A session that fits one reply (batch_bytes /
 * max_inflight) is one round trip; so is a put of one that fits batch_bytes (its pages ride with
 * the record in PUT_SESSION). */
#include "kvpack/kvpack.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MOD            "client"
#define MAX_INFLIGHT   8
#define HDR_SLACK      160u /* header bytes besides per-page / per-key arrays */

typedef struct {
    int             used;
    int             done;      /* reply (or failure) recorded */
    int             sending;   /* our send still pinned in the transport */
    uint64_t        req_id;
    kvp_wire_op_t   op;
    kvp_status_t    status;
    uint64_t        deadline_ns;
    kvp_wire_rep_t  rep;
    kvp_xfer_msg_h  msg;       /* reply data, held until call_release */
    kvp_xfer_iov_t *iov;       /* owned iov array for PUT_PAGES */
    uint32_t        first;     /* PUT_PAGES: index of the batch's first page */
} call_t;

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
    call_t          calls[MAX_INFLIGHT];
};

/* ---- private: transport callbacks ---- */

static call_t *call_find(kvp_client_h c, uint64_t req_id)
{
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (c->calls[i].used && !c->calls[i].done && c->calls[i].req_id == req_id) {
            return &c->calls[i];
        }
    }
    return NULL;
}

static void on_reply(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    kvp_client_h   c = arg;
    kvp_wire_rep_t rep;
    size_t         hl, dl;
    const void    *h = kvp_xfer_msg_hdr(msg, &hl);
    kvp_status_t   s = kvp_xfer_msg_status(msg);
    call_t        *call;

    (void)conn;
    kvp_xfer_msg_data(msg, &dl);
    c->rx_bytes += hl + dl;
    c->conn_heard = 1;
    if (s == KVP_OK) {
        s = kvp_wire_rep_unpack(h, hl, dl, &rep);
    } else {
        kvp_wire_rep_unpack(h, hl, 0, &rep); /* only for the req_id */
    }
    call = call_find(c, rep.req_id);
    if (call == NULL) {
        KVP_LOG_DEBUG(MOD, "reply %llu matches no request (late or malformed): dropped",
                      (unsigned long long)rep.req_id);
        kvp_wire_rep_clear(&rep);
        kvp_xfer_msg_release(msg);
        return;
    }
    if (s == KVP_OK && rep.op != call->op && rep.op != KVP_WIRE_OP_NONE) {
        KVP_LOG_WARN(MOD, "reply %llu is for %s, not %s", (unsigned long long)rep.req_id,
                     kvp_wire_op_name(rep.op), kvp_wire_op_name(call->op));
        s = KVP_ERR_PROTOCOL;
    }
    call->done   = 1;
    call->status = (s == KVP_OK) ? rep.status : s;
    if (s == KVP_OK) {
        call->rep = rep;
        call->msg = msg;
        if (rep.status != KVP_OK) {
            KVP_LOG_DEBUG(MOD, "%s %llu: node says %s (%s)", kvp_wire_op_name(call->op),
                          (unsigned long long)rep.req_id, kvp_status_name(rep.status),
                          rep.message);
        }
        return;
    }
    kvp_wire_rep_clear(&rep);
    kvp_xfer_msg_release(msg);
}

static void on_conn_failed(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    kvp_client_h c = arg;

    if (conn != c->conn) {
        return;
    }
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (c->calls[i].used && !c->calls[i].done) {
            c->calls[i].done   = 1;
            c->calls[i].status = status;
        }
    }
}

static void on_sent(void *arg, kvp_status_t status)
{
    call_t *call = arg;

    call->sending = 0;
    if (status != KVP_OK && !call->done) {
        call->done   = 1;
        call->status = status;
    }
}

/* ---- private: calls ---- */

static void call_release(call_t *call)
{
    kvp_wire_rep_clear(&call->rep);
    kvp_xfer_msg_release(call->msg);
    kvp_free(call->iov);
    memset(call, 0, sizeof(*call));
}

/* Drop the connection: in-flight sends are cancelled (their buffers unpinned) before this
 * returns, and every unfinished call ends with status. */
static void conn_reset(kvp_client_h c, kvp_status_t status)
{
    kvp_xfer_conn_h conn = c->conn;

    if (conn == NULL) {
        return;
    }
    c->conn = NULL;
    kvp_xfer_conn_close(conn);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (c->calls[i].used) {
            c->calls[i].sending = 0;
            if (!c->calls[i].done) {
                c->calls[i].done   = 1;
                c->calls[i].status = status;
            }
        }
    }
}

/* A usable connection. On one that has answered before and has no call in flight the
 * transport is progressed first, so a connection whose node went away since the last call (a
 * restart: the old process closed it) is seen dead here and replaced, instead of failing the
 * request about to be sent on it (PEER_GONE, not knowing whether it arrived). Not on a connection
 * still being set up: UCX 1.13 without peer error handling crashed when progress ran between its
 * connect and its first send (an assertion in ucp_wireup_replay_pending_requests: 6 runs of 8 of
 * integ.node_err_none). */
static kvp_status_t conn_ensure(kvp_client_h c)
{
    int settled = c->conn != NULL && c->conn_heard; /* answered before, nothing in flight */

    for (int i = 0; i < MAX_INFLIGHT && settled; i++) {
        settled = !c->calls[i].used;
    }
    if (settled) {
        kvp_xfer_progress(c->x);
    }
    if (c->conn != NULL && kvp_xfer_conn_status(c->conn) != KVP_OK) {
        conn_reset(c, kvp_xfer_conn_status(c->conn));
    }
    if (c->conn == NULL) {
        c->conn_heard = 0;
        return kvp_xfer_connect(c->x, c->host, c->port, &c->conn);
    }
    return KVP_OK;
}

/* Send req (+ iov data, pinned until the call finishes); the call slot is returned in *call_p
 * even when sending failed (its status says why). */
static kvp_status_t call_start(kvp_client_h c, kvp_wire_req_t *req, kvp_xfer_iov_t *iov,
                               int iovcnt, call_t **call_p)
{
    call_t      *call = NULL;
    uint8_t     *hdr;
    size_t       len;
    kvp_status_t s;

    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (!c->calls[i].used) {
            call = &c->calls[i];
            break;
        }
    }
    if (call == NULL) {
        kvp_free(iov);
        return KVP_ERR_BUSY; /* internal misuse: callers bound their in-flight calls */
    }
    s = conn_ensure(c); /* before the slot is taken: a dead connection fails the calls on it */
    memset(call, 0, sizeof(*call));
    call->used        = 1;
    call->op          = req->op;
    call->iov         = iov;
    call->req_id      = ++c->next_id;
    call->deadline_ns = kvp_time_ns() + (uint64_t)c->timeout_ms * 1000000u;
    req->req_id       = call->req_id;
    req->deadline_ms  = c->timeout_ms;
    *call_p           = call;
    if (s == KVP_OK) {
        s = kvp_wire_req_pack(req, &hdr, &len);
    }
    if (s == KVP_OK) {
        s = kvp_xfer_send(c->conn, hdr, len, iov, iovcnt, on_sent, call);
        kvp_free(hdr);
    }
    if (s == KVP_INPROGRESS) {
        call->sending = 1;
    } else if (s != KVP_OK) {
        call->done   = 1;
        call->status = s;
    }
    return KVP_OK;
}

/* Wait until the call has its reply and its send is finished, or its deadline passes. */
static kvp_status_t call_wait(kvp_client_h c, call_t *call)
{
    while (!call->done || call->sending) {
        uint64_t now = kvp_time_ns();

        if (now >= call->deadline_ns) {
            KVP_LOG_WARN(MOD, "%s to %s:%u: no reply within %u ms", kvp_wire_op_name(call->op),
                         c->host, c->port, c->timeout_ms);
            conn_reset(c, KVP_ERR_TIMEOUT);
            break;
        }
        kvp_xfer_wait(c->x, (int)((call->deadline_ns - now) / 1000000u) + 1 > 100
                                ? 100
                                : (int)((call->deadline_ns - now) / 1000000u) + 1);
    }
    if (call->status == KVP_ERR_PEER_GONE || call->status == KVP_ERR_PEER_UNREACHABLE) {
        conn_reset(c, call->status); /* the next call connects afresh (a restarted node's old
                                      * connection would otherwise fail it too) */
    }
    return call->status;
}

/* One request without bulk data, waited for. The caller releases *call_p. */
static kvp_status_t call_simple(kvp_client_h c, kvp_wire_req_t *req, call_t **call_p)
{
    kvp_status_t s = call_start(c, req, NULL, 0, call_p);

    s = (s == KVP_OK) ? call_wait(c, *call_p) : s;
    if (s == KVP_ERR_PEER_GONE && *call_p != NULL &&
        (req->op == KVP_WIRE_OP_GET_SESSION || req->op == KVP_WIRE_OP_LOOKUP ||
         req->op == KVP_WIRE_OP_LIST || req->op == KVP_WIRE_OP_STAT)) {
        /* a read on a connection whose node restarted since the last call: once more on a fresh
         * one (a dead node then answers unreachable); a write may have reached the node, so its
         * failure is the caller's to judge */
        call_release(*call_p);
        *call_p = NULL;
        s       = call_start(c, req, NULL, 0, call_p);
        s       = (s == KVP_OK) ? call_wait(c, *call_p) : s;
    }
    return s;
}

static kvp_status_t check_sid(const char *sid)
{
    if (sid == NULL || sid[0] == '\0' || strlen(sid) >= KVP_SID_MAX) {
        KVP_LOG_ERROR(MOD, "session id must be 1..%d bytes", KVP_SID_MAX - 1);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

/* ---- API ---- */

kvp_status_t kvp_client_create(const kvp_client_params_t *params, kvp_client_h *client_p)
{
    kvp_xfer_params_t xp;
    kvp_client_h      c;
    kvp_status_t      s;
    uint64_t          fm = (params != NULL) ? params->field_mask : 0;
    size_t            hdr;

    if (!(fm & KVP_CLIENT_PARAM_SERVER) || params->server == NULL) {
        KVP_LOG_ERROR(MOD, "client needs a server address");
        return KVP_ERR_INVALID;
    }
    c = kvp_calloc(1, sizeof(*c), "client");
    if (c == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    s = kvp_xfer_parse_addr(params->server, c->host, sizeof(c->host), &c->port);
    if (s != KVP_OK) {
        goto err_free;
    }
    c->timeout_ms   = (fm & KVP_CLIENT_PARAM_TIMEOUT_MS) && params->timeout_ms ? params->timeout_ms
                                                                               : 10000;
    c->batch_bytes  = (fm & KVP_CLIENT_PARAM_BATCH) && params->batch_bytes ? params->batch_bytes
                                                                           : (4u << 20);
    c->max_inflight = (fm & KVP_CLIENT_PARAM_INFLIGHT) ? params->max_inflight : 4;
    if (c->batch_bytes > (64u << 20)) {
        c->batch_bytes = 64u << 20; /* the node's message limit is larger; keep replies sane */
    }
    if (c->max_inflight < 1 || c->max_inflight > MAX_INFLIGHT) {
        KVP_LOG_ERROR(MOD, "max_inflight %u outside 1..%d", c->max_inflight, MAX_INFLIGHT);
        s = KVP_ERR_INVALID;
        goto err_free;
    }
    memset(&xp, 0, sizeof(xp));
    xp.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG;
    xp.recv_cb    = on_reply;
    xp.conn_cb    = on_conn_failed;
    xp.cb_arg     = c;
    s = kvp_xfer_create(&xp, &c->x);
    if (s != KVP_OK) {
        goto err_free;
    }
    hdr          = kvp_xfer_max_hdr(c->x);
    c->max_pages = (hdr > HDR_SLACK) ? (uint32_t)((hdr - HDR_SLACK) / 5) : 1;
    c->max_keys  = (hdr > HDR_SLACK) ? (uint32_t)((hdr - HDR_SLACK) / 16) : 1;
    if (c->max_pages > KVP_WIRE_MAX_PAGES) {
        c->max_pages = KVP_WIRE_MAX_PAGES;
    }
    if (c->max_keys > KVP_WIRE_MAX_KEYS) {
        c->max_keys = KVP_WIRE_MAX_KEYS;
    }
    s = kvp_xfer_connect(c->x, c->host, c->port, &c->conn);
    if (s != KVP_OK) {
        goto err_xfer;
    }
    *client_p = c;
    return KVP_OK;

err_xfer:
    kvp_xfer_destroy(c->x);
err_free:
    kvp_free(c);
    return s;
}

void kvp_client_destroy(kvp_client_h client)
{
    if (client == NULL) {
        return;
    }
    conn_reset(client, KVP_ERR_CANCELED);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (client->calls[i].used) {
            call_release(&client->calls[i]);
        }
    }
    kvp_xfer_destroy(client->x);
    kvp_free(client);
}

/* Finish the oldest in-flight PUT_PAGES call; keep the first error. */
static void put_finish(kvp_client_h c, call_t *call, kvp_status_t *first_p)
{
    kvp_status_t s = call_wait(c, call);

    if (s != KVP_OK && *first_p == KVP_OK) {
        *first_p = s;
        if (call->rep.status != KVP_OK && call->rep.first_bad < call->rep.accepted + 4096u) {
            KVP_LOG_INFO(MOD, "put_pages: page %u rejected: %s", call->first + call->rep.first_bad,
                         kvp_status_str(s));
        }
    }
    call_release(call);
}

/* Every page given, of a length a page can have. */
static int pages_ok(const void *const *pages, const size_t *lens, size_t n, const char *what)
{
    if (n > 0 && (pages == NULL || lens == NULL)) {
        KVP_LOG_ERROR(MOD, "%s: %zu pages without page or length arrays", what, n);
        return 0;
    }
    for (size_t k = 0; k < n; k++) {
        if (pages[k] == NULL || lens[k] < KVP_PAGE_HDR_BYTES ||
            lens[k] > KVP_PAGE_HDR_BYTES + (size_t)KVP_PAGE_MAX_PAYLOAD) {
            KVP_LOG_ERROR(MOD, "%s: page %zu has an impossible length %zu", what, k, lens[k]);
            return 0;
        }
    }
    return 1;
}

kvp_status_t kvp_client_put_pages(kvp_client_h client, uint64_t ns, const void *const *pages,
                                  const size_t *lens, size_t n)
{
    call_t      *ring[MAX_INFLIGHT];
    uint32_t     head = 0, count = 0;
    kvp_status_t first = KVP_OK;
    size_t       i     = 0;

    if (!pages_ok(pages, lens, n, "put_pages")) {
        return KVP_ERR_INVALID;
    }
    while (i < n || count > 0) {
        while (first == KVP_OK && i < n && count < client->max_inflight) {
            kvp_wire_req_t  req;
            kvp_xfer_iov_t *iov;
            uint32_t        cnt   = 0;
            size_t          bytes = 0;
            uint32_t       *plens;
            call_t         *call;

            while (i + cnt < n && cnt < client->max_pages &&
                   (cnt == 0 || bytes + lens[i + cnt] <= client->batch_bytes)) {
                bytes += lens[i + cnt];
                cnt++;
            }
            iov   = kvp_malloc(cnt * (sizeof(*iov) + sizeof(uint32_t)), "client put iov");
            if (iov == NULL) {
                first = KVP_ERR_NO_MEMORY;
                break;
            }
            plens = (uint32_t *)(iov + cnt);
            for (uint32_t k = 0; k < cnt; k++) {
                iov[k].buf = pages[i + k];
                iov[k].len = lens[i + k];
                plens[k]   = (uint32_t)lens[i + k];
            }
            memset(&req, 0, sizeof(req));
            req.op        = KVP_WIRE_OP_PUT_PAGES;
            req.ns        = ns;
            req.n_pages   = cnt;
            req.page_lens = plens;
            if (call_start(client, &req, iov, (int)cnt, &call) != KVP_OK) {
                first = KVP_ERR_BUSY;
                break;
            }
            call->first = (uint32_t)i;
            ring[(head + count) % MAX_INFLIGHT] = call;
            count++;
            i += cnt;
        }
        if (count == 0) {
            break;
        }
        put_finish(client, ring[head], &first);
        head = (head + 1) % MAX_INFLIGHT;
        count--;
    }
    return first;
}

uint64_t kvp_version_now(void)
{
    static _Atomic uint64_t last;
    struct timespec         ts;
    uint64_t                now, prev;

    clock_gettime(CLOCK_REALTIME, &ts);
    now  = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    prev = atomic_load(&last);
    do { /* two writes in one nanosecond still get distinct, ordered versions */
        if (now <= prev) {
            now = prev + 1;
        }
    } while (!atomic_compare_exchange_weak(&last, &prev, now));
    return now;
}

kvp_status_t kvp_client_put_session(kvp_client_h client, uint64_t ns, const char *sid,
                                    const kvp_session_desc_t *desc)
{
    return kvp_client_put_session_pages(client, ns, sid, desc, NULL, NULL, 0, kvp_version_now());
}

kvp_status_t kvp_client_put_session_version(kvp_client_h client, uint64_t ns, const char *sid,
                                            const kvp_session_desc_t *desc, uint64_t version)
{
    return kvp_client_put_session_pages(client, ns, sid, desc, NULL, NULL, 0, version);
}

/* The pages that fit one PUT_SESSION with the record: as many trailing pages as batch_bytes and
 * the header allow (the record's header fields take room of their own). */
static size_t put_tail_count(kvp_client_h c, const size_t *lens, size_t n)
{
    uint32_t max_pages = c->max_pages > HDR_SLACK / 5 ? c->max_pages - HDR_SLACK / 5 : 0;
    size_t   cnt = 0, bytes = 0;

    while (cnt < n && cnt < max_pages && bytes + lens[n - 1 - cnt] <= c->batch_bytes) {
        bytes += lens[n - 1 - cnt];
        cnt++;
    }
    return cnt;
}

kvp_status_t kvp_client_put_session_pages(kvp_client_h client, uint64_t ns, const char *sid,
                                          const kvp_session_desc_t *desc,
                                          const void *const *pages, const size_t *lens, size_t n,
                                          uint64_t version)
{
    kvp_wire_req_t  req;
    kvp_xfer_iov_t *iov;
    uint32_t       *plens;
    uint8_t        *blob;
    size_t          len, tail, head;
    call_t         *call;
    kvp_status_t    s = check_sid(sid);

    if (s != KVP_OK) {
        return s;
    }
    if (!pages_ok(pages, lens, n, "put_session")) {
        return KVP_ERR_INVALID;
    }
    tail = client->pages_apart ? 0 : put_tail_count(client, lens, n);
    head = n - tail;
    if (head > 0) { /* the pages beyond one message go ahead, pipelined; all must land first */
        s = kvp_client_put_pages(client, ns, pages, lens, head);
        if (s != KVP_OK) {
            return s;
        }
    }
    s = kvp_session_desc_pack(desc, &blob, &len);
    if (s != KVP_OK) {
        return s;
    }
    iov = kvp_malloc((tail + 1) * (sizeof(*iov) + sizeof(uint32_t)), "client put iov");
    if (iov == NULL || len > UINT32_MAX) {
        kvp_free(iov);
        kvp_free(blob);
        return (iov == NULL) ? KVP_ERR_NO_MEMORY : KVP_ERR_TOO_LARGE;
    }
    plens = (uint32_t *)(iov + tail + 1);
    for (size_t k = 0; k < tail; k++) {
        iov[k].buf = pages[head + k];
        iov[k].len = lens[head + k];
        plens[k]   = (uint32_t)lens[head + k];
    }
    iov[tail].buf = blob;
    iov[tail].len = len;
    memset(&req, 0, sizeof(req));
    req.op         = KVP_WIRE_OP_PUT_SESSION;
    req.ns         = ns;
    req.record_len = (uint32_t)len;
    req.version    = version;
    req.n_pages    = (uint32_t)tail;
    req.page_lens  = tail > 0 ? plens : NULL;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = call_start(client, &req, iov, (int)tail + 1, &call);
    if (s == KVP_OK) {
        s = call_wait(client, call);
        if (s != KVP_OK && tail > 0 && call->rep.message[0] != '\0') {
            KVP_LOG_INFO(MOD, "put_session %s: %s", sid, call->rep.message);
        }
        call_release(call);
    }
    kvp_free(blob);
    if (s == KVP_ERR_PROTOCOL && tail > 0 && !client->pages_apart) {
        /* a node older than pages with the record refuses the message whole (it stored
         * nothing): send them apart from now on, to this node */
        KVP_LOG_INFO(MOD, "node %s:%u takes no pages with a session record: sending them apart",
                     client->host, client->port);
        client->pages_apart = 1;
        return kvp_client_put_session_pages(client, ns, sid, desc, pages, lens, n, version);
    }
    return s;
}

/* ---- get: the record, then pipelined GET_PAGES ---- */

#define GET_ROT   (KVP_PAGE_F_K_ROTATED | KVP_PAGE_F_V_ROTATED | KVP_PAGE_F_V_PREROT)
#define GET_ALIGN 64u /* pages start at this alignment inside a reply block */

/* A fetched session: the public struct plus the blocks (one per reply) its pages point into. */
typedef struct {
    kvp_session_pages_t pub;
    uint8_t           **blocks;
    uint32_t            nblocks, cap_blocks;
} sp_impl_t;

/* One GET_PAGES in flight: items [first, end) (item = chunk * layers + layer). */
typedef struct {
    call_t  *call;
    uint32_t first, end;
} get_req_t;

typedef struct {
    kvp_client_h             c;
    uint64_t                 ns;
    const char              *sid;
    sp_impl_t               *sp;
    const kvp_page_params_t *expect;   /* may be NULL */
    kvp_page_info_t          ref;      /* the first codec page: every other one must match */
    int                      have_ref;
    uint32_t                 sink_end;   /* 1 + the last chunk seen holding an fp16 sink page */
    uint32_t                 codec_min;  /* the first chunk seen holding a codec page */
    uint32_t                 tail_heads, tail_dim; /* of the fp16 tail; 0 when none */
    size_t                   page_len; /* sizes the requests; 0 until known */
    size_t                   req_bytes; /* page bytes per GET_PAGES */
    uint32_t                 taken;     /* leading pages that came with the record */
    kvp_client_pages_cb_t    cb;        /* each verified run of pages as it lands (may be NULL) */
    void                    *cb_arg;
} get_ctx_t;

static const char *codec_str(uint32_t codec)
{
    return codec > 0 && codec < KVP_CODEC_MAX ? kvp_codec_name((kvp_codec_id_t)codec) : "?";
}

/* A tail blob is n_tail valid fp16 pages back to back, of one geometry, with the record's P
 * (and the caller's expectation, if any). */
static kvp_status_t verify_tail(get_ctx_t *g)
{
    const kvp_session_desc_t *d   = &g->sp->pub.desc;
    size_t                    off = 0;

    for (uint32_t i = 0; i < d->n_tail; i++) {
        const uint8_t  *p = d->tail + off;
        kvp_page_info_t info;
        size_t          len;
        kvp_status_t    s;

        len = kvp_page_len_at(p, d->tail_len - off);
        if (len == 0) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u truncated or overruns the tail", g->sid, i);
            return KVP_ERR_BAD_PAGE;
        }
        s = kvp_page_parse(p, len, &info);
        if (s != KVP_OK) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u: %s", g->sid, i, kvp_status_str(s));
            return s;
        }
        if (i == 0) {
            g->tail_heads = info.heads;
            g->tail_dim   = info.head_dim;
        }
        if (info.codec != KVP_CODEC_FP16 || info.capacity != d->page_tokens ||
            info.heads != g->tail_heads || info.head_dim != g->tail_dim ||
            (g->expect != NULL &&
             (info.heads != g->expect->heads || info.head_dim != g->expect->head_dim))) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u is %s %u x %u with P %u; wanted fp16 "
                          "%u x %u with P %u", g->sid, i, codec_str(info.codec), info.heads,
                          info.head_dim, info.capacity,
                          g->expect ? g->expect->heads : g->tail_heads,
                          g->expect ? g->expect->head_dim : g->tail_dim, d->page_tokens);
            return KVP_ERR_WRONG_CODEC;
        }
        off += len;
    }
    if (off != d->tail_len) {
        KVP_LOG_ERROR(MOD, "session %s tail has %zu stray bytes", g->sid, d->tail_len - off);
        return KVP_ERR_BAD_PAGE;
    }
    return KVP_OK;
}

/* A sealed page must match the caller's expectation, the record (P, not a tail), the tail's
 * geometry and the session's first codec page (codec, rotation flags, H, D). fp16 sink pages
 * (KVP_PAGE_F_SINK) are exempt from the codec checks but must all come before the codec chunks. */
static kvp_status_t check_shape(get_ctx_t *g, const kvp_page_info_t *info, uint32_t item)
{
    const kvp_page_params_t *e     = g->expect;
    const kvp_page_info_t   *r     = &g->ref;
    uint32_t                 P     = g->sp->pub.desc.page_tokens;
    uint32_t                 chunk = item / g->sp->pub.desc.layers;
    const char              *why   = NULL;

    if ((info->flags & KVP_PAGE_F_SINK) != 0) {
        g->sink_end = chunk + 1 > g->sink_end ? chunk + 1 : g->sink_end;
        if (info->capacity != P || (e != NULL && (info->heads != e->heads ||
                                                  info->head_dim != e->head_dim)) ||
            (g->tail_heads != 0 && (info->heads != g->tail_heads || info->head_dim != g->tail_dim))) {
            why = "is an fp16 sink page of another geometry";
        } else if (g->sink_end > g->codec_min) {
            why = "is an fp16 sink page after a codec chunk";
        }
        if (why != NULL) {
            KVP_LOG_ERROR(MOD, "session %s chunk %u layer %u %s (%u x %u, P %u; record P %u)", g->sid,
                          chunk, info->layer, why, info->heads, info->head_dim, info->capacity, P);
            return KVP_ERR_WRONG_CODEC;
        }
        return KVP_OK;
    }
    g->codec_min = chunk < g->codec_min ? chunk : g->codec_min;
    if (g->sink_end > g->codec_min) {
        KVP_LOG_ERROR(MOD, "session %s chunk %u layer %u is a codec page before an fp16 sink chunk",
                      g->sid, chunk, info->layer);
        return KVP_ERR_WRONG_CODEC;
    }
    if (e != NULL && (info->codec != (uint32_t)e->codec || info->heads != e->heads ||
                      info->head_dim != e->head_dim || info->capacity != e->page_tokens ||
                      (info->flags & KVP_PAGE_F_V_PREROT) != (e->flags & KVP_PAGE_F_V_PREROT))) {
        KVP_LOG_ERROR(MOD, "session %s chunk %u layer %u is %s %u x %u, P %u, flags 0x%x; the "
                      "caller expects %s %u x %u, P %u, flags 0x%x", g->sid,
                      item / g->sp->pub.desc.layers, info->layer, codec_str(info->codec),
                      info->heads, info->head_dim, info->capacity, info->flags & GET_ROT,
                      codec_str(e->codec), e->heads, e->head_dim, e->page_tokens,
                      e->flags & KVP_PAGE_F_V_PREROT);
        return KVP_ERR_WRONG_CODEC;
    }
    if ((info->flags & KVP_PAGE_F_TAIL) != 0) {
        why = "is a tail page";
    } else if (info->capacity != P) {
        why = "has another P than the record";
    } else if (g->tail_heads != 0 &&
               (info->heads != g->tail_heads || info->head_dim != g->tail_dim)) {
        why = "has another geometry than the tail";
    } else if (g->have_ref &&
               (info->codec != r->codec || (info->flags & GET_ROT) != (r->flags & GET_ROT) ||
                info->heads != r->heads || info->head_dim != r->head_dim)) {
        why = "has another codec or geometry than chunk 0";
    }
    if (why != NULL) {
        KVP_LOG_ERROR(MOD, "session %s chunk %u layer %u %s (%s %u x %u, P %u; record P %u)",
                      g->sid, item / g->sp->pub.desc.layers, info->layer, why,
                      codec_str(info->codec), info->heads, info->head_dim, info->capacity, P);
        return KVP_ERR_WRONG_CODEC;
    }
    if (!g->have_ref) {
        g->ref      = *info;
        g->have_ref = 1;
    }
    return KVP_OK;
}

/* Send GET_PAGES for items [first, end) (end is cut so the keys fit one request). */
static kvp_status_t get_issue(get_ctx_t *g, uint32_t first, uint32_t end, get_req_t *r)
{
    const kvp_session_desc_t *d  = &g->sp->pub.desc;
    uint32_t                  c0 = first / d->layers, c1 = (end - 1) / d->layers + 1;
    kvp_wire_req_t            req;
    uint64_t                  want;

    if (c1 - c0 > g->c->max_keys) {
        c1  = c0 + g->c->max_keys;
        end = c1 * d->layers;
    }
    want = g->page_len ? (uint64_t)(end - first) * g->page_len : g->req_bytes;
    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_GET_PAGES;
    req.ns        = g->ns;
    req.n_keys    = c1 - c0;
    req.keys      = d->chunk_keys + c0;
    req.layers    = d->layers;
    req.start     = first - c0 * d->layers;
    req.max_bytes = want > UINT32_MAX ? UINT32_MAX : (uint32_t)want;
    r->first      = first;
    r->end        = end;
    return call_start(g->c, &req, NULL, 0, &r->call);
}

/* Copy k pages (lens, back to back at data) for items first.. into one block, verify each (CRC,
 * key, layer, shape) and point the session's page slots at them. *took_p = pages taken. */
static kvp_status_t take_pages(get_ctx_t *g, uint32_t first, uint32_t k, const uint32_t *lens,
                               const uint8_t *data, uint32_t *took_p)
{
    sp_impl_t   *sp     = g->sp;
    uint32_t     layers = sp->pub.desc.layers, took = 0;
    size_t       off = 0, boff = 0, need = 0;
    uint8_t     *block;
    kvp_status_t s = KVP_OK;

    *took_p = 0;
    for (uint32_t i = 0; i < k; i++) {
        need += ((size_t)lens[i] + GET_ALIGN - 1) & ~(size_t)(GET_ALIGN - 1);
    }
    if (sp->nblocks == sp->cap_blocks) {
        uint32_t  cap = sp->cap_blocks ? sp->cap_blocks * 2 : 16;
        uint8_t **b   = kvp_realloc(sp->blocks, cap * sizeof(*b), "session blocks");

        if (b == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        sp->blocks     = b;
        sp->cap_blocks = cap;
    }
    block = kvp_aligned_alloc(GET_ALIGN, need, "session pages");
    if (block == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for %zu bytes of session %s pages", need, g->sid);
        return KVP_ERR_NO_MEMORY;
    }
    sp->blocks[sp->nblocks++] = block;
    for (; took < k && s == KVP_OK; took++) {
        uint32_t        item = first + took, len = lens[took];
        kvp_key128_t    key  = sp->pub.desc.chunk_keys[item / layers];
        kvp_page_info_t info;
        uint8_t        *p    = block + boff;

        memcpy(p, data + off, len); /* verified below: what is returned is what was checked */
        s = kvp_page_parse(p, len, &info);
        if (s == KVP_OK && (info.chunk_key.lo != key.lo || info.chunk_key.hi != key.hi ||
                            info.layer != item % layers)) {
            KVP_LOG_ERROR(MOD, "node sent the wrong page for chunk %u layer %u", item / layers,
                          item % layers);
            s = KVP_ERR_PROTOCOL;
        } else if (s != KVP_OK) {
            KVP_LOG_ERROR(MOD, "page for chunk %u layer %u failed verification: %s",
                          item / layers, item % layers, kvp_status_str(s));
        }
        if (s == KVP_OK) {
            s = check_shape(g, &info, item);
        }
        if (s == KVP_OK) {
            sp->pub.pages[item]     = p;
            sp->pub.page_lens[item] = len;
            if (g->page_len == 0) {
                g->page_len = len;
            }
        }
        off += len;
        boff += ((size_t)len + GET_ALIGN - 1) & ~(size_t)(GET_ALIGN - 1);
    }
    *took_p = took;
    if (s == KVP_OK && took > 0 && g->cb != NULL) { /* the caller works on them meanwhile */
        g->cb(g->cb_arg, first, took, (const void *const *)&sp->pub.pages[first],
              &sp->pub.page_lens[first]);
    }
    return s;
}

/* Wait for r's reply and take its pages (at most r->end - r->first). */
static kvp_status_t get_take(get_ctx_t *g, get_req_t *r, uint32_t *took_p)
{
    uint32_t     layers = g->sp->pub.desc.layers, k;
    kvp_status_t s      = call_wait(g->c, r->call);
    call_t      *call   = r->call;
    size_t       dl;

    *took_p = 0;
    if (s == KVP_OK && (call->rep.n_pages == 0 || call->rep.n_pages > r->end - r->first + layers)) {
        KVP_LOG_ERROR(MOD, "get_pages reply with %u pages for %u wanted", call->rep.n_pages,
                      r->end - r->first);
        s = KVP_ERR_PROTOCOL;
    }
    if (s == KVP_OK) {
        k = call->rep.n_pages < r->end - r->first ? call->rep.n_pages : r->end - r->first;
        s = take_pages(g, r->first, k, call->rep.page_lens, kvp_xfer_msg_data(call->msg, &dl),
                       took_p);
    }
    call_release(call);
    return s;
}

/* Fetch every page of the record with up to max_inflight GET_PAGES of batch_bytes/max_inflight
 * page bytes each in flight. Until the page size is known (no expectation given) one chunk is
 * fetched alone to learn it. Short replies (node header or byte limits) are asked again for the
 * rest of their range. */
static kvp_status_t get_pages(get_ctx_t *g)
{
    kvp_client_h c     = g->c;
    uint32_t     total = g->sp->pub.n_pages, next = g->taken, head = 0, count = 0, nrem = 0;
    uint32_t     rem_first[2 * MAX_INFLIGHT], rem_end[2 * MAX_INFLIGHT];
    get_req_t    q[MAX_INFLIGHT];
    kvp_status_t s = KVP_OK;

    while (s == KVP_OK && (next < total || nrem > 0 || count > 0)) {
        uint32_t room = g->page_len ? c->max_inflight : 1;
        uint32_t per  = g->page_len ? (uint32_t)(g->req_bytes / g->page_len)
                                    : g->sp->pub.desc.layers;

        per = per < 1 ? 1 : (per > c->max_pages ? c->max_pages : per);
        while (s == KVP_OK && count < room && (nrem > 0 || next < total)) {
            get_req_t *r = &q[(head + count) % MAX_INFLIGHT];
            uint32_t   f, e;

            if (nrem > 0) {
                nrem--;
                f = rem_first[nrem];
                e = rem_end[nrem];
            } else {
                f    = next;
                e    = total - next > per ? next + per : total;
                next = e;
            }
            s = get_issue(g, f, e, r);
            if (s != KVP_OK) {
                break;
            }
            count++;
            if (r->end < e) { /* cut to the key limit: the rest goes next */
                rem_first[nrem] = r->end;
                rem_end[nrem++] = e;
            }
        }
        if (count == 0 || s != KVP_OK) {
            break;
        }
        {
            get_req_t *r = &q[head];
            uint32_t   took;

            head = (head + 1) % MAX_INFLIGHT;
            count--;
            s = get_take(g, r, &took);
            if (s == KVP_OK && r->first + took < r->end) { /* a short reply: ask for the rest */
                rem_first[nrem] = r->first + took;
                rem_end[nrem++] = r->end;
            }
        }
    }
    while (count > 0) { /* after an error: let the calls in flight finish, drop their replies */
        call_wait(c, q[head].call);
        call_release(q[head].call);
        head = (head + 1) % MAX_INFLIGHT;
        count--;
    }
    return s;
}

/* Take the pages that came with the record (GET_SESSION reply data after it). A reply with more
 * pages than the record names is a protocol error. */
static kvp_status_t take_inline(get_ctx_t *g, const call_t *call, const uint8_t *data)
{
    uint32_t k = call->rep.n_pages;

    if (k == 0) {
        return KVP_OK;
    }
    if (k > g->sp->pub.n_pages) {
        KVP_LOG_ERROR(MOD, "get_session reply with %u pages for a record of %u", k,
                      g->sp->pub.n_pages);
        return KVP_ERR_PROTOCOL;
    }
    return take_pages(g, 0, k, call->rep.page_lens, data + call->rep.record_len, &g->taken);
}

static kvp_status_t get_session(kvp_client_h client, uint64_t ns, const char *sid,
                                const kvp_page_params_t *expect, kvp_client_pages_cb_t cb,
                                void *cb_arg, kvp_session_pages_t **out_p)
{
    kvp_wire_req_t req;
    get_ctx_t      g;
    sp_impl_t     *sp;
    call_t        *call;
    const uint8_t *data;
    size_t         dl;
    uint64_t       rx0 = client->rx_bytes;
    uint64_t       n_pages;
    kvp_status_t   s   = check_sid(sid);

    if (s != KVP_OK) {
        return s;
    }
    if (out_p == NULL || (expect != NULL && kvp_codec_check(expect) != KVP_OK)) {
        KVP_LOG_ERROR(MOD, "get of session %s: %s", sid,
                      out_p == NULL ? "no output pointer" : "the expected codec params are invalid");
        return KVP_ERR_INVALID;
    }
    memset(&g, 0, sizeof(g));
    g.c        = client;
    g.ns       = ns;
    g.sid      = sid;
    g.expect    = expect;
    g.page_len  = expect != NULL ? kvp_page_max_bytes(expect) : 0;
    g.codec_min = UINT32_MAX;
    g.cb        = cb;
    g.cb_arg    = cb_arg;
    /* batch_bytes in flight, split over max_inflight requests: the same footprint as one batch
     * (measured: 4 x 1 MiB beats 4 x 4 MiB on the shared VM, cache-bound), latency hidden */
    g.req_bytes = client->batch_bytes / client->max_inflight;
    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_GET_SESSION;
    req.ns        = ns;
    req.max_bytes = (uint32_t)g.req_bytes; /* the first pages come with the record */
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = call_simple(client, &req, &call);
    if (s != KVP_OK) {
        call_release(call);
        return s;
    }
    sp = kvp_calloc(1, sizeof(*sp), "session pages");
    if (sp == NULL) {
        call_release(call);
        return KVP_ERR_NO_MEMORY;
    }
    g.sp = sp;
    data = kvp_xfer_msg_data(call->msg, &dl);
    s    = kvp_session_desc_unpack(data, call->rep.record_len, &sp->pub.desc);
    sp->pub.version    = call->rep.version;
    sp->pub.disk_pages = call->rep.disk_pages;
    sp->pub.disk_bytes = call->rep.disk_bytes;
    if (s != KVP_OK) {
        KVP_LOG_ERROR(MOD, "session %s record from the node: %s", sid, kvp_status_str(s));
        call_release(call);
        kvp_free(sp);
        return s;
    }
    if (expect != NULL && sp->pub.desc.page_tokens != expect->page_tokens) {
        KVP_LOG_ERROR(MOD, "session %s has P %u; the caller expects %u", sid,
                      sp->pub.desc.page_tokens, expect->page_tokens);
        s = KVP_ERR_WRONG_CODEC;
    }
    if (s == KVP_OK) {
        s = verify_tail(&g);
    }
    n_pages = (uint64_t)sp->pub.desc.n_chunks * sp->pub.desc.layers;
    if (s == KVP_OK && n_pages > UINT32_MAX / 2) {
        s = KVP_ERR_TOO_LARGE;
    }
    if (s == KVP_OK && n_pages > 0) {
        sp->pub.n_pages   = (uint32_t)n_pages;
        sp->pub.pages     = kvp_calloc(n_pages, sizeof(*sp->pub.pages), "session page ptrs");
        sp->pub.page_lens = kvp_calloc(n_pages, sizeof(*sp->pub.page_lens), "session page lens");
        if (sp->pub.pages == NULL || sp->pub.page_lens == NULL) {
            s = KVP_ERR_NO_MEMORY;
        }
    }
    if (s == KVP_OK) {
        s = take_inline(&g, call, data);
    }
    call_release(call);
    if (s == KVP_OK && g.taken < n_pages) {
        s = get_pages(&g);
    }
    sp->pub.wire_bytes = client->rx_bytes - rx0;
    if (s != KVP_OK) {
        kvp_session_pages_free(&sp->pub);
        return s;
    }
    *out_p = &sp->pub;
    return KVP_OK;
}

kvp_status_t kvp_client_get_session(kvp_client_h client, uint64_t ns, const char *sid,
                                    kvp_session_pages_t **out_p)
{
    return get_session(client, ns, sid, NULL, NULL, NULL, out_p);
}

kvp_status_t kvp_client_get_session_cb(kvp_client_h client, uint64_t ns, const char *sid,
                                       const kvp_page_params_t *expect, kvp_client_pages_cb_t cb,
                                       void *cb_arg, kvp_session_pages_t **out_p)
{
    if (expect != NULL && kvp_codec_check(expect) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "get of session %s: the expected codec params are invalid",
                      sid ? sid : "(null)");
        return KVP_ERR_INVALID;
    }
    return get_session(client, ns, sid, expect, cb, cb_arg, out_p);
}

kvp_status_t kvp_client_get_session_expect(kvp_client_h client, uint64_t ns, const char *sid,
                                           const kvp_page_params_t *expect,
                                           kvp_session_pages_t **out_p)
{
    if (expect == NULL) {
        KVP_LOG_ERROR(MOD, "get of session %s: no expected codec params", sid ? sid : "(null)");
        return KVP_ERR_INVALID;
    }
    return get_session(client, ns, sid, expect, NULL, NULL, out_p);
}

void kvp_session_pages_free(kvp_session_pages_t *pub)
{
    sp_impl_t *sp = (sp_impl_t *)(void *)pub; /* pub is the first member */

    if (pub == NULL) {
        return;
    }
    for (uint32_t i = 0; i < sp->nblocks; i++) {
        kvp_free(sp->blocks[i]);
    }
    kvp_free(sp->blocks);
    kvp_free(pub->pages);
    kvp_free(pub->page_lens);
    kvp_session_desc_clear(&pub->desc);
    kvp_free(sp);
}

kvp_status_t kvp_client_lookup(kvp_client_h client, uint64_t ns, const kvp_key128_t *keys,
                               uint32_t n, uint32_t layers, uint32_t *hit_chunks_p)
{
    uint32_t     hits = 0;
    kvp_status_t s    = KVP_OK;

    if ((n > 0 && keys == NULL) || layers == 0 || hit_chunks_p == NULL) {
        KVP_LOG_ERROR(MOD, "lookup needs keys and layers > 0");
        return KVP_ERR_INVALID;
    }
    /* leading-prefix semantics: continue with the next group only while every key hit */
    for (uint32_t k = 0; k < n; k += client->max_keys) {
        kvp_wire_req_t req;
        call_t        *call;
        uint32_t       nk = (n - k > client->max_keys) ? client->max_keys : n - k;

        memset(&req, 0, sizeof(req));
        req.op     = KVP_WIRE_OP_LOOKUP;
        req.ns     = ns;
        req.n_keys = nk;
        req.keys   = (kvp_key128_t *)(keys + k);
        req.layers = layers;
        s = call_simple(client, &req, &call);
        if (s == KVP_OK && call->rep.hit_chunks > nk) {
            s = KVP_ERR_PROTOCOL;
        }
        if (s == KVP_OK) {
            hits += call->rep.hit_chunks;
        }
        call_release(call);
        if (s != KVP_OK || hits < k + nk) {
            break;
        }
    }
    if (s == KVP_OK) {
        *hit_chunks_p = hits;
    }
    return s;
}

/* A request naming one session whose reply carries only a status (SPILL, DELETE). */
static kvp_status_t session_op(kvp_client_h client, kvp_wire_op_t op, uint64_t ns, const char *sid,
                               uint64_t version, uint32_t drop)
{
    kvp_wire_req_t req;
    call_t        *call;
    kvp_status_t   s = check_sid(sid);

    if (s != KVP_OK) {
        return s;
    }
    memset(&req, 0, sizeof(req));
    req.op      = op;
    req.ns      = ns;
    req.version = version;
    req.drop    = drop;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = call_simple(client, &req, &call);
    call_release(call);
    return s;
}

/* APPEND; with has_chunks the session must exist holding chunks chunks; version 0: kept */
static kvp_status_t append_call(kvp_client_h client, uint64_t ns, const char *sid,
                                const kvp_append_t *a, int has_chunks, uint32_t chunks,
                                uint64_t version, uint32_t *sealed_p)
{
    kvp_wire_req_t  req;
    kvp_xfer_iov_t *iov;
    call_t         *call = NULL;
    size_t          esize, bytes;
    kvp_status_t    s = check_sid(sid);

    if (s != KVP_OK) {
        return s;
    }
    if (a == NULL || a->k == NULL || a->v == NULL || a->ntok == 0 ||
        a->ntok > KVP_WIRE_MAX_APPEND_TOKENS || a->layers == 0 || a->heads == 0 ||
        a->head_dim == 0 || a->page_tokens == 0 || a->ids == NULL || a->n_ids < a->ntok ||
        a->n_ids - a->ntok >= a->page_tokens ||
        (a->dtype != KVP_DTYPE_F16 && a->dtype != KVP_DTYPE_F32)) {
        KVP_LOG_ERROR(MOD, "append to %s: needs K/V, 1..%u tokens, a geometry, fp16 or fp32, and "
                      "the tail's ids then the new ones (fewer than page_tokens before them)",
                      sid, KVP_WIRE_MAX_APPEND_TOKENS);
        return KVP_ERR_INVALID;
    }
    esize = a->dtype == KVP_DTYPE_F16 ? 2 : 4;
    bytes = (size_t)a->layers * a->ntok * a->heads * a->head_dim * esize;
    iov   = kvp_malloc(2 * sizeof(*iov), "client append iov");
    if (iov == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    iov[0] = (kvp_xfer_iov_t){a->k, bytes};
    iov[1] = (kvp_xfer_iov_t){a->v, bytes};
    memset(&req, 0, sizeof(req));
    req.op     = KVP_WIRE_OP_APPEND;
    req.ns     = ns;
    req.append = (kvp_wire_append_t){(uint32_t)a->codec, a->ns_fingerprint, a->layers, a->heads,
                                     a->head_dim, a->page_tokens, (uint32_t)a->dtype, a->ntok,
                                     a->n_ids, (uint32_t *)a->ids, version, chunks,
                                     (uint8_t)(has_chunks != 0)};
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = call_start(client, &req, iov, 2, &call);
    s = s == KVP_OK ? call_wait(client, call) : s;
    if (s == KVP_OK && sealed_p != NULL) {
        *sealed_p = call->rep.sealed;
    }
    if (call != NULL) { /* NULL: no call slot was free (start freed iov) */
        call_release(call);
    }
    return s;
}

kvp_status_t kvp_client_append(kvp_client_h client, uint64_t ns, const char *sid,
                               const kvp_append_t *a, uint32_t *sealed_p)
{
    return append_call(client, ns, sid, a, 0, 0, 0, sealed_p);
}

kvp_status_t kvp_client_append_at(kvp_client_h client, uint64_t ns, const char *sid,
                                  const kvp_append_t *a, uint32_t chunks, uint64_t version,
                                  uint32_t *sealed_p)
{
    return append_call(client, ns, sid, a, 1, chunks, version, sealed_p);
}

kvp_status_t kvp_client_spill(kvp_client_h client, uint64_t ns, const char *sid)
{
    return session_op(client, KVP_WIRE_OP_SPILL, ns, sid, 0, 0);
}

kvp_status_t kvp_client_delete_session(kvp_client_h client, uint64_t ns, const char *sid)
{
    return session_op(client, KVP_WIRE_OP_DELETE, ns, sid, kvp_version_now(), 0);
}

kvp_status_t kvp_client_delete_session_version(kvp_client_h client, uint64_t ns, const char *sid,
                                               uint64_t version)
{
    return session_op(client, KVP_WIRE_OP_DELETE, ns, sid, version, 0);
}

kvp_status_t kvp_client_drop_session(kvp_client_h client, uint64_t ns, const char *sid,
                                     uint64_t version)
{
    return session_op(client, KVP_WIRE_OP_DELETE, ns, sid, version, 1);
}

/* ---- list: LIST pages after a (ns, sid) cursor ---- */

/* Append one LIST reply's entries; each must come strictly after the previous one. */
static kvp_status_t list_take(kvp_session_list_t *l, uint32_t *cap, const kvp_wire_rep_t *rep)
{
    for (uint32_t i = 0; i < rep->n_sessions; i++) {
        const kvp_wire_session_t *w    = &rep->sessions[i];
        const kvp_session_info_t *prev = l->n ? &l->sessions[l->n - 1] : NULL;
        kvp_session_info_t       *e;

        if (prev != NULL &&
            (w->ns < prev->ns || (w->ns == prev->ns && strcmp(w->sid, prev->sid) <= 0))) {
            KVP_LOG_ERROR(MOD, "list reply out of order at session %s", w->sid);
            return KVP_ERR_PROTOCOL;
        }
        e = kvp_array_room(l->sessions, cap, l->n, sizeof(*e), 64, "session list");
        if (e == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        l->sessions = e;
        e           = &l->sessions[l->n++];
        memset(e, 0, sizeof(*e));
        e->ns = w->ns;
        memcpy(e->sid, w->sid, sizeof(e->sid));
        e->layers      = w->layers;
        e->page_tokens = w->page_tokens;
        e->n_chunks    = w->n_chunks;
        e->tail_tokens = w->tail_tokens;
        e->codec       = (kvp_codec_id_t)w->codec;
        e->heads       = w->heads;
        e->head_dim    = w->head_dim;
        e->where       = ((w->where & KVP_WIRE_WHERE_DRAM) ? KVP_SESSION_IN_DRAM : 0u) |
                         ((w->where & KVP_WIRE_WHERE_DISK) ? KVP_SESSION_ON_DISK : 0u);
        e->bytes       = w->bytes;
        e->version     = w->version;
        e->deleted     = w->deleted;
        e->damaged     = w->damaged;
    }
    return KVP_OK;
}

kvp_status_t kvp_client_list_sessions(kvp_client_h client, uint32_t page_size, uint32_t max,
                                      kvp_session_list_t **out_p)
{
    return kvp_client_list_sessions_ex(client, page_size, max, 0, out_p);
}

kvp_status_t kvp_client_list_sessions_ex(kvp_client_h client, uint32_t page_size, uint32_t max,
                                         uint64_t flags, kvp_session_list_t **out_p)
{
    kvp_session_list_t *l   = kvp_calloc(1, sizeof(*l), "session list");
    uint32_t            cap = 0;
    int                 more = 1;
    kvp_status_t        s    = (l == NULL) ? KVP_ERR_NO_MEMORY : KVP_OK;

    if (out_p == NULL || page_size > KVP_WIRE_MAX_LIST) {
        KVP_LOG_ERROR(MOD, "list: page size %u over %u, or no output pointer", page_size,
                      KVP_WIRE_MAX_LIST);
        kvp_free(l);
        return KVP_ERR_INVALID;
    }
    while (s == KVP_OK && more && (max == 0 || l->n < max)) {
        kvp_wire_req_t req;
        call_t        *call;
        uint32_t       want = page_size ? page_size : KVP_WIRE_MAX_LIST;

        memset(&req, 0, sizeof(req));
        req.op      = KVP_WIRE_OP_LIST;
        req.deleted = (flags & KVP_LIST_DELETED) != 0;
        req.limit = (max != 0 && max - l->n < want) ? max - l->n : want;
        if (l->n > 0) { /* the cursor: the last session received */
            req.ns = l->sessions[l->n - 1].ns;
            memcpy(req.sid, l->sessions[l->n - 1].sid, sizeof(req.sid));
        }
        s = call_simple(client, &req, &call);
        l->requests++;
        if (s == KVP_OK && (call->rep.n_sessions > req.limit ||
                            (call->rep.n_sessions == 0 && call->rep.more))) {
            KVP_LOG_ERROR(MOD, "list reply with %u sessions for %u asked (more %u)",
                          call->rep.n_sessions, req.limit, call->rep.more);
            s = KVP_ERR_PROTOCOL;
        }
        if (s == KVP_OK) {
            s    = list_take(l, &cap, &call->rep);
            more = (int)call->rep.more;
        }
        call_release(call);
    }
    if (s != KVP_OK) {
        kvp_session_list_free(l);
        return s;
    }
    l->truncated = more;
    *out_p       = l;
    return KVP_OK;
}

void kvp_session_list_free(kvp_session_list_t *list)
{
    if (list != NULL) {
        kvp_free(list->sessions);
        kvp_free(list);
    }
}

kvp_status_t kvp_client_stat(kvp_client_h client, kvp_node_stat_t *stat_p)
{
    kvp_wire_req_t req;
    call_t        *call;
    kvp_status_t   s;

    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_STAT;
    s = call_simple(client, &req, &call);
    if (s == KVP_OK) {
        const kvp_wire_stat_t *w = &call->rep.stat;

        memset(stat_p, 0, sizeof(*stat_p));
        stat_p->dram_bytes       = w->dram_bytes;
        stat_p->dram_pages       = w->dram_pages;
        stat_p->dram_budget      = w->dram_budget;
        stat_p->sessions         = w->sessions;
        stat_p->sessions_on_disk = w->sessions_on_disk;
        stat_p->spills           = w->spills;
        stat_p->restores         = w->restores;
        stat_p->crc_failures     = w->crc_failures;
        stat_p->disk_errors      = w->disk_errors;
        stat_p->uptime_ms        = w->uptime_ms;
        stat_p->disk_bytes       = w->disk_bytes;
        stat_p->disk_live_bytes  = w->disk_live_bytes;
        stat_p->requests         = w->requests;
        stat_p->bad_requests     = w->bad_requests;
        stat_p->index_rebuilds    = w->index_rebuilds;
        stat_p->wal_dropped_bytes = w->wal_dropped_bytes;
        stat_p->disk_free_bytes    = w->disk_free_bytes;
        stat_p->disk_full_refusals = w->disk_full_refusals;
    }
    call_release(call);
    return s;
}

kvp_status_t kvp_client_scrub(kvp_client_h client, kvp_scrub_result_t *out)
{
    kvp_wire_req_t req;
    call_t        *call;
    kvp_status_t   s;

    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_SCRUB;
    s = call_simple(client, &req, &call);
    if (s == KVP_OK) {
        out->bytes         = call->rep.scrub.bytes;
        out->bad_pages     = call->rep.scrub.bad_pages;
        out->elapsed_ms    = call->rep.scrub.elapsed_ms;
        out->index_rebuilt = call->rep.scrub.index_rebuilt;
    }
    call_release(call);
    return s;
}
