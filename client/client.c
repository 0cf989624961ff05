/* client.c - libkvpack: the engine-side client of one kvpackd node (kvpack.h): the connection,
 * calls, puts and the control operations; fetching a session is client_get.c (client_int.h).
 * Requests are protobuf headers (proto/wire) with pages or records as bulk data, sent over the
 * transfer layer; replies are matched by request id. Every call has a deadline: when it passes,
 * the connection is closed (in error mode peer a force close, cancelling whatever is in flight)
 * and the call returns KVP_ERR_TIMEOUT; the next call reconnects. PUT_PAGES is batched and pipelined (bounded bytes
 * per message and messages in flight). A put of a session that fits batch_bytes is one round
 * trip (its pages ride with the record in PUT_SESSION).
 * Main flow: kvp_client_put_session_pages -> PUT_SESSION, or kvp_client_put_pages (PUT_PAGES
 * batches, up to max_inflight in flight) then the record; each call: kvp_client_call_start ->
 * on_reply / on_sent -> kvp_client_call_wait. */
#include "client_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MOD       "client"
#define HDR_SLACK 160u /* header bytes besides per-page / per-key arrays */

/* ---- private: transport callbacks ---- */

static kvp_client_call_t *call_find(kvp_client_h c, uint64_t req_id)
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
    kvp_client_h       c = arg;
    kvp_wire_rep_t     rep;
    size_t             hl, dl;
    const void        *h = kvp_xfer_msg_hdr(msg, &hl);
    kvp_status_t       s = kvp_xfer_msg_status(msg);
    kvp_client_call_t *call;

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
            snprintf(c->node_message, sizeof(c->node_message), "%s", rep.message);
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

/* What a send's callback gets: its call and the call's request id. */
typedef struct {
    kvp_client_call_t *call;
    uint64_t           req_id;
} send_ticket_t;

/* A send completed. One that the close of a timed-out connection did not end (UCX 1.13: a
 * rendezvous send to a stopped peer; in error mode none any send still queued) completes later, when its call slot may hold another call:
 * only the call it was sent for is touched (the slot is part of the client, which outlives the
 * transport). */
static void on_sent(void *arg, kvp_status_t status)
{
    send_ticket_t     *t    = arg;
    kvp_client_call_t *call = t->call;

    if (call->used && call->req_id == t->req_id) {
        call->sending = 0;
        if (status != KVP_OK && !call->done) {
            call->done   = 1;
            call->status = status;
        }
    }
    kvp_free(t);
}

/* ---- private: calls ---- */

void kvp_client_call_release(kvp_client_call_t *call)
{
    if (call == NULL) {
        return;
    }
    kvp_wire_rep_clear(&call->rep);
    kvp_xfer_msg_release(call->msg);
    kvp_free(call->iov);
    memset(call, 0, sizeof(*call));
}

/* Drop the connection: in-flight sends are cancelled before this returns (UCX 1.13 may keep a
 * rendezvous send to a stopped peer and complete it later, and in error mode none the close
 * sends what is queued first: on_sent ignores those), and every unfinished call ends with
 * status. The calls are ended before the close: it cancels their sends, and on_sent would otherwise end a call still being sent (a deadline passed on a stopped
 * peer that never took the request) with KVP_ERR_CANCELED, not status. */
static void conn_reset(kvp_client_h c, kvp_status_t status)
{
    kvp_xfer_conn_h conn = c->conn;

    if (conn == NULL) {
        return;
    }
    c->conn = NULL;
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (c->calls[i].used && !c->calls[i].done) {
            c->calls[i].done   = 1;
            c->calls[i].status = status;
        }
    }
    kvp_xfer_conn_close(conn);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        c->calls[i].sending = 0; /* a send the close did not end is on_sent's to ignore */
    }
}

/* A usable connection (client_int.h). On one that has answered before and has no call in flight
 * the transport is progressed first, so a connection whose node went away since the last call (a
 * restart: the old process closed it) is seen dead here and replaced, instead of failing the
 * request about to be sent on it (PEER_GONE, not knowing whether it arrived). Not on a
 * connection still being set up: UCX 1.13 without peer error handling crashed when progress ran
 * between its connect and its first send (an assertion in ucp_wireup_replay_pending_requests: 6
 * runs of 8 of integ.node_err_none). */
kvp_status_t kvp_client_conn_ensure(kvp_client_h c)
{
    int          settled = c->conn != NULL && c->conn_heard; /* answered before, none in flight */
    kvp_status_t s;

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
        s             = kvp_xfer_connect(c->x, c->host, c->port, &c->conn);
        c->conn_gen += s == KVP_OK;
        return s;
    }
    return KVP_OK;
}

kvp_status_t kvp_client_call_start(kvp_client_h c, kvp_wire_req_t *req, kvp_xfer_iov_t *iov,
                                   int iovcnt, kvp_client_call_t **call_p)
{
    kvp_client_call_t *call = NULL;
    send_ticket_t     *ticket = NULL;
    uint8_t           *hdr;
    size_t             len;
    kvp_status_t       s;

    *call_p = NULL; /* callers release it whatever the status: never a stale pointer */
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
    s = kvp_client_conn_ensure(c); /* before the slot is taken: a dead connection fails the
                                    * calls on it */
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
        ticket = kvp_malloc(sizeof(*ticket), "send ticket");
        s      = ticket != NULL ? kvp_wire_req_pack(req, &hdr, &len) : KVP_ERR_NO_MEMORY;
    }
    if (s == KVP_OK) {
        ticket->call   = call;
        ticket->req_id = call->req_id;
        s = kvp_xfer_send(c->conn, hdr, len, iov, iovcnt, on_sent, ticket);
        kvp_free(hdr);
    }
    if (s == KVP_INPROGRESS) {
        call->sending = 1; /* on_sent frees the ticket */
        return KVP_OK;
    }
    kvp_free(ticket); /* the callback is not called */
    if (s != KVP_OK) {
        call->done   = 1;
        call->status = s;
    }
    return KVP_OK;
}

void kvp_client_calls_defer(kvp_client_h c, uint64_t ns)
{
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (c->calls[i].used && (!c->calls[i].done || c->calls[i].sending)) {
            c->calls[i].deadline_ns += ns;
        }
    }
}

kvp_status_t kvp_client_call_wait(kvp_client_h c, kvp_client_call_t *call)
{
    while (!call->done || call->sending) {
        uint64_t now = kvp_time_ns();
        uint64_t left_ms;

        if (call->done && c->conn != NULL && kvp_xfer_conn_status(c->conn) != KVP_OK) {
            /* its connection failed: a send to the dead peer may never complete (UCX 1.13 in
             * error mode none), so it is closed now, as at the deadline, instead of waiting the
             * deadline out. The close ends the sends, except one UCX keeps queued in error
             * mode none or one a close not done in 3 s had not ended (kvp_xfer_conn_close):
             * that one may still read the caller's data (README, Limits) */
            conn_reset(c, kvp_xfer_conn_status(c->conn));
            break;
        }
        if (now >= call->deadline_ns) {
            /* a reply that is here already is not late: progress until the transport is idle
             * (one progress is only a few UCX rounds; bounded, a flood would not end) */
            for (int i = 0; i < 1000 && !(call->done && !call->sending); i++) {
                if (kvp_xfer_progress(c->x) == 0) {
                    break;
                }
            }
            if (call->done && !call->sending) {
                break;
            }
            KVP_LOG_WARN(MOD, "%s to %s:%u: no reply within %u ms", kvp_wire_op_name(call->op),
                         c->host, c->port, c->timeout_ms);
            conn_reset(c, KVP_ERR_TIMEOUT);
            break;
        }
        left_ms = (call->deadline_ns - now) / 1000000u + 1; /* up to 2^32 ms: no int */
        kvp_xfer_wait(c->x, (int)(left_ms < 100 ? left_ms : 100));
    }
    if (call->status == KVP_ERR_PEER_GONE || call->status == KVP_ERR_PEER_UNREACHABLE ||
        call->status == KVP_ERR_SHUTTING_DOWN) {
        conn_reset(c, call->status); /* the next call connects afresh (a restarted node's old
                                      * connection would otherwise fail it too) */
    }
    return call->status;
}

kvp_status_t kvp_client_call_simple(kvp_client_h c, kvp_wire_req_t *req,
                                    kvp_client_call_t **call_p)
{
    kvp_status_t s = kvp_client_call_start(c, req, NULL, 0, call_p);

    s = (s == KVP_OK) ? kvp_client_call_wait(c, *call_p) : s;
    if (s == KVP_ERR_PEER_GONE && *call_p != NULL &&
        (req->op == KVP_WIRE_OP_GET_SESSION || req->op == KVP_WIRE_OP_LOOKUP ||
         req->op == KVP_WIRE_OP_LIST || req->op == KVP_WIRE_OP_STAT)) {
        /* a read on a connection whose node restarted since the last call: once more on a fresh
         * one (a dead node then answers unreachable); a write may have reached the node, so its
         * failure is the caller's to judge */
        kvp_client_call_release(*call_p);
        *call_p = NULL;
        s       = kvp_client_call_start(c, req, NULL, 0, call_p);
        s       = (s == KVP_OK) ? kvp_client_call_wait(c, *call_p) : s;
    }
    return s;
}

kvp_status_t kvp_client_sid_check(const char *sid)
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

const char *kvp_client_node_message(kvp_client_h client)
{
    return client != NULL ? client->node_message : "";
}

void kvp_client_destroy(kvp_client_h client)
{
    if (client == NULL) {
        return;
    }
    conn_reset(client, KVP_ERR_CANCELED);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (client->calls[i].used) {
            kvp_client_call_release(&client->calls[i]);
        }
    }
    kvp_xfer_destroy(client->x);
    kvp_free(client);
}

/* Finish the oldest in-flight PUT_PAGES call; keep the first error. */
static void put_finish(kvp_client_h c, kvp_client_call_t *call, kvp_status_t *first_p)
{
    kvp_status_t s = kvp_client_call_wait(c, call);

    if (s != KVP_OK && *first_p == KVP_OK) {
        *first_p = s;
        if (call->rep.status != KVP_OK && call->rep.first_bad < call->rep.accepted + 4096u) {
            KVP_LOG_INFO(MOD, "put_pages: page %u rejected: %s", call->first + call->rep.first_bad,
                         kvp_status_str(s));
        }
    }
    kvp_client_call_release(call);
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
    kvp_client_call_t *ring[MAX_INFLIGHT];
    uint32_t           head = 0, count = 0;
    kvp_status_t       first = KVP_OK;
    size_t             i     = 0;

    kvp_client_call_begin(client);
    if (!pages_ok(pages, lens, n, "put_pages")) {
        return KVP_ERR_INVALID;
    }
    while (i < n || count > 0) {
        while (first == KVP_OK && i < n && count < client->max_inflight) {
            kvp_wire_req_t     req;
            kvp_xfer_iov_t    *iov;
            uint32_t           cnt   = 0;
            size_t             bytes = 0;
            uint32_t          *plens;
            kvp_client_call_t *call;

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
            if (kvp_client_call_start(client, &req, iov, (int)cnt, &call) != KVP_OK) {
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
    kvp_wire_req_t     req;
    kvp_xfer_iov_t    *iov;
    uint32_t          *plens;
    uint8_t           *blob;
    size_t             len, tail, head;
    kvp_client_call_t *call;
    int                node_refused = 0;
    kvp_status_t       s = kvp_client_sid_check(sid);

    kvp_client_call_begin(client);
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
    s = kvp_client_call_start(client, &req, iov, (int)tail + 1, &call);
    if (s == KVP_OK) {
        s = kvp_client_call_wait(client, call);
        if (s != KVP_OK && tail > 0 && call->rep.message[0] != '\0') {
            KVP_LOG_INFO(MOD, "put_session %s: %s", sid, call->rep.message);
        }
        node_refused = call->rep.status == KVP_ERR_PROTOCOL; /* not a reply this side misread */
        kvp_client_call_release(call);
    }
    kvp_free(blob);
    if (node_refused && tail > 0 && !client->pages_apart) {
        /* a node older than pages with the record refuses the message whole (it stored
         * nothing): send them apart from now on, to this node */
        KVP_LOG_INFO(MOD, "node %s:%u takes no pages with a session record: sending them apart",
                     client->host, client->port);
        client->pages_apart = 1;
        return kvp_client_put_session_pages(client, ns, sid, desc, pages, lens, n, version);
    }
    return s;
}


kvp_status_t kvp_client_lookup(kvp_client_h client, uint64_t ns, const kvp_key128_t *keys,
                               uint32_t n, uint32_t layers, uint32_t *hit_chunks_p)
{
    uint32_t     hits = 0;
    kvp_status_t s    = KVP_OK;

    kvp_client_call_begin(client);
    if ((n > 0 && keys == NULL) || layers == 0 || hit_chunks_p == NULL) {
        KVP_LOG_ERROR(MOD, "lookup needs keys and layers > 0");
        return KVP_ERR_INVALID;
    }
    /* leading-prefix semantics: continue with the next group only while every key hit */
    for (uint32_t k = 0; k < n; k += client->max_keys) {
        kvp_wire_req_t     req;
        kvp_client_call_t *call;
        uint32_t           nk = (n - k > client->max_keys) ? client->max_keys : n - k;

        memset(&req, 0, sizeof(req));
        req.op     = KVP_WIRE_OP_LOOKUP;
        req.ns     = ns;
        req.n_keys = nk;
        req.keys   = (kvp_key128_t *)(keys + k);
        req.layers = layers;
        s = kvp_client_call_simple(client, &req, &call);
        if (s == KVP_OK && call->rep.hit_chunks > nk) {
            s = KVP_ERR_PROTOCOL;
        }
        if (s == KVP_OK) {
            hits += call->rep.hit_chunks;
        }
        kvp_client_call_release(call);
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
    kvp_wire_req_t     req;
    kvp_client_call_t *call;
    kvp_status_t       s = kvp_client_sid_check(sid);

    kvp_client_call_begin(client);
    if (s != KVP_OK) {
        return s;
    }
    memset(&req, 0, sizeof(req));
    req.op      = op;
    req.ns      = ns;
    req.version = version;
    req.drop    = drop;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = kvp_client_call_simple(client, &req, &call);
    kvp_client_call_release(call);
    return s;
}

/* APPEND; with has_chunks the session must exist holding chunks chunks (a replica's append),
 * else it must hold a->first_pos tokens; version 0: the node's clock, above the record's;
 * base NULL: not checked */
static kvp_status_t append_call(kvp_client_h client, uint64_t ns, const char *sid,
                                const kvp_append_t *a, int has_chunks, uint32_t chunks,
                                uint64_t version, const uint64_t *base, uint32_t *sealed_p)
{
    kvp_wire_req_t     req;
    kvp_xfer_iov_t    *iov;
    kvp_client_call_t *call = NULL;
    size_t             esize, bytes;
    kvp_status_t       s = kvp_client_sid_check(sid);

    kvp_client_call_begin(client);
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
                                     (uint8_t)(has_chunks != 0), (uint8_t)(has_chunks == 0),
                                     a->first_pos, base != NULL ? *base : 0,
                                     (uint8_t)(base != NULL)};
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = kvp_client_call_start(client, &req, iov, 2, &call);
    s = s == KVP_OK ? kvp_client_call_wait(client, call) : s;
    if (s == KVP_OK && sealed_p != NULL) {
        *sealed_p = call->rep.sealed;
    }
    if (call != NULL) { /* NULL: no call slot was free (start freed iov) */
        kvp_client_call_release(call);
    }
    return s;
}

kvp_status_t kvp_client_append(kvp_client_h client, uint64_t ns, const char *sid,
                               const kvp_append_t *a, uint32_t *sealed_p)
{
    return append_call(client, ns, sid, a, 0, 0, 0, NULL, sealed_p);
}

kvp_status_t kvp_client_append_at(kvp_client_h client, uint64_t ns, const char *sid,
                                  const kvp_append_t *a, uint32_t chunks, uint64_t version,
                                  const uint64_t *base, uint32_t *sealed_p)
{
    return append_call(client, ns, sid, a, 1, chunks, version, base, sealed_p);
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

static void session_info_from_wire(const kvp_wire_session_t *w, kvp_session_info_t *e)
{
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

/* Append one LIST reply's entries; each must come strictly after the previous one. */
static kvp_status_t list_take(kvp_session_list_t *l, size_t *cap, const kvp_wire_rep_t *rep)
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
        session_info_from_wire(w, &l->sessions[l->n++]);
    }
    return KVP_OK;
}

/* A LIST at (ns, sid) itself, one entry, tombstones included: the probe of one session. */
static void session_info_req(kvp_wire_req_t *req, uint64_t ns, const char *sid)
{
    memset(req, 0, sizeof(*req));
    req->op        = KVP_WIRE_OP_LIST;
    req->ns        = ns;
    req->deleted   = 1;
    req->inclusive = 1;
    req->limit     = 1;
    snprintf(req->sid, sizeof(req->sid), "%s", sid);
}

kvp_status_t kvp_client_session_info_start(kvp_client_h c, uint64_t ns, const char *sid,
                                           kvp_client_call_t **call_p)
{
    kvp_wire_req_t req;
    kvp_status_t   s = kvp_client_sid_check(sid);

    kvp_client_call_begin(c);
    *call_p = NULL;
    if (s != KVP_OK) {
        return s;
    }
    session_info_req(&req, ns, sid);
    return kvp_client_call_start(c, &req, NULL, 0, call_p);
}

kvp_status_t kvp_client_session_info_finish(kvp_client_h c, kvp_client_call_t *call,
                                            kvp_status_t started, uint64_t ns, const char *sid,
                                            kvp_session_info_t *out)
{
    kvp_status_t s = started == KVP_OK ? kvp_client_call_wait(c, call) : started;

    if (s == KVP_ERR_PEER_GONE && call != NULL) { /* the node restarted: once more, as reads are */
        kvp_wire_req_t req;

        kvp_client_call_release(call);
        session_info_req(&req, ns, sid);
        s = kvp_client_call_simple(c, &req, &call);
    }
    if (s == KVP_OK && call->rep.n_sessions > 1) {
        KVP_LOG_ERROR(MOD, "session info reply with %u sessions for 1 asked",
                      call->rep.n_sessions);
        s = KVP_ERR_PROTOCOL;
    }
    if (s == KVP_OK) { /* the first session at or after (ns, sid): it, or the node has none */
        const kvp_wire_session_t *w = call->rep.n_sessions ? &call->rep.sessions[0] : NULL;

        s = (w != NULL && w->ns == ns && strcmp(w->sid, sid) == 0) ? KVP_OK : KVP_ERR_NOT_FOUND;
        if (s == KVP_OK) {
            session_info_from_wire(w, out);
        }
    }
    kvp_client_call_release(call);
    return s;
}

kvp_status_t kvp_client_session_info(kvp_client_h client, uint64_t ns, const char *sid,
                                     kvp_session_info_t *out)
{
    kvp_client_call_t *call;
    kvp_status_t       s;

    if (out == NULL) {
        KVP_LOG_ERROR(MOD, "session info without an output pointer");
        return KVP_ERR_INVALID;
    }
    s = kvp_client_session_info_start(client, ns, sid, &call);
    return kvp_client_session_info_finish(client, call, s, ns, sid, out);
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
    size_t              cap = 0;
    int                 more = 1;
    kvp_status_t        s    = (l == NULL) ? KVP_ERR_NO_MEMORY : KVP_OK;

    kvp_client_call_begin(client);
    if (out_p == NULL || page_size > KVP_WIRE_MAX_LIST) {
        KVP_LOG_ERROR(MOD, "list: page size %u over %u, or no output pointer", page_size,
                      KVP_WIRE_MAX_LIST);
        kvp_free(l);
        return KVP_ERR_INVALID;
    }
    while (s == KVP_OK && more && (max == 0 || l->n < max)) {
        kvp_wire_req_t     req;
        kvp_client_call_t *call;
        uint32_t           want = page_size ? page_size : KVP_WIRE_MAX_LIST;

        memset(&req, 0, sizeof(req));
        req.op      = KVP_WIRE_OP_LIST;
        req.deleted = (flags & KVP_LIST_DELETED) != 0;
        req.limit = (max != 0 && max - l->n < want) ? max - l->n : want;
        if (l->n > 0) { /* the cursor: the last session received */
            req.ns = l->sessions[l->n - 1].ns;
            memcpy(req.sid, l->sessions[l->n - 1].sid, sizeof(req.sid));
        }
        s = kvp_client_call_simple(client, &req, &call);
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
        kvp_client_call_release(call);
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
    kvp_wire_req_t     req;
    kvp_client_call_t *call;
    kvp_status_t       s;

    kvp_client_call_begin(client);
    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_STAT;
    s = kvp_client_call_simple(client, &req, &call);
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
        stat_p->connections          = w->connections;
        stat_p->connections_max      = w->connections_max;
        stat_p->connections_rejected = w->connections_rejected;
    }
    kvp_client_call_release(call);
    return s;
}

kvp_status_t kvp_client_scrub(kvp_client_h client, kvp_scrub_result_t *out)
{
    kvp_wire_req_t     req;
    kvp_client_call_t *call;
    kvp_status_t       s;

    kvp_client_call_begin(client);
    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_SCRUB;
    s = kvp_client_call_simple(client, &req, &call);
    if (s == KVP_OK) {
        out->bytes         = call->rep.scrub.bytes;
        out->bad_pages     = call->rep.scrub.bad_pages;
        out->elapsed_ms    = call->rep.scrub.elapsed_ms;
        out->index_rebuilt = call->rep.scrub.index_rebuilt;
    }
    kvp_client_call_release(call);
    return s;
}
