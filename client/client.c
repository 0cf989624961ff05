/* client.c - libkvpack: the engine-side client of one kvpackd node (kvpack.h).
 * Requests are protobuf headers (proto/wire) with pages or records as bulk data, sent over the
 * transfer layer; replies are matched by request id. Every call has a deadline: when it passes,
 * the connection is force-closed (cancelling whatever is in flight) and the call returns
 * KVP_ERR_TIMEOUT; the next call reconnects. PUT_PAGES is batched and pipelined (bounded bytes
 * per message and messages in flight). get_session verifies every page's CRC before returning.
 * Main flow: kvp_client_get_session -> call_start(GET_SESSION) -> call_wait -> get_pages_range. */
#include "kvpack/kvpack.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#include <stdio.h>
#include <string.h>

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
    uint64_t        next_id;
    uint64_t        rx_bytes;   /* reply bytes received (headers + data) */
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

static kvp_status_t conn_ensure(kvp_client_h c)
{
    if (c->conn != NULL && kvp_xfer_conn_status(c->conn) != KVP_OK) {
        conn_reset(c, kvp_xfer_conn_status(c->conn));
    }
    if (c->conn == NULL) {
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
    memset(call, 0, sizeof(*call));
    call->used        = 1;
    call->op          = req->op;
    call->iov         = iov;
    call->req_id      = ++c->next_id;
    call->deadline_ns = kvp_time_ns() + (uint64_t)c->timeout_ms * 1000000u;
    req->req_id       = call->req_id;
    req->deadline_ms  = c->timeout_ms;
    *call_p           = call;
    s = conn_ensure(c);
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
    return call->status;
}

/* One request without bulk data, waited for. The caller releases *call_p. */
static kvp_status_t call_simple(kvp_client_h c, kvp_wire_req_t *req, call_t **call_p)
{
    kvp_status_t s = call_start(c, req, NULL, 0, call_p);

    return (s == KVP_OK) ? call_wait(c, *call_p) : s;
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

kvp_status_t kvp_client_put_pages(kvp_client_h client, uint64_t ns, const void *const *pages,
                                  const size_t *lens, size_t n)
{
    call_t      *ring[MAX_INFLIGHT];
    uint32_t     head = 0, count = 0;
    kvp_status_t first = KVP_OK;
    size_t       i     = 0;

    if (n > 0 && (pages == NULL || lens == NULL)) {
        return KVP_ERR_INVALID;
    }
    for (size_t k = 0; k < n; k++) {
        if (pages[k] == NULL || lens[k] < KVP_PAGE_HDR_BYTES ||
            lens[k] > KVP_PAGE_HDR_BYTES + (size_t)KVP_PAGE_MAX_PAYLOAD) {
            KVP_LOG_ERROR(MOD, "put_pages: page %zu has an impossible length %zu", k, lens[k]);
            return KVP_ERR_INVALID;
        }
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

kvp_status_t kvp_client_put_session(kvp_client_h client, uint64_t ns, const char *sid,
                                    const kvp_session_desc_t *desc)
{
    kvp_wire_req_t  req;
    kvp_xfer_iov_t *iov;
    uint8_t        *blob;
    size_t          len;
    call_t         *call;
    kvp_status_t    s = check_sid(sid);

    if (s != KVP_OK) {
        return s;
    }
    s = kvp_session_desc_pack(desc, &blob, &len);
    if (s != KVP_OK) {
        return s;
    }
    iov = kvp_malloc(sizeof(*iov), "client iov");
    if (iov == NULL || len > UINT32_MAX) {
        kvp_free(iov);
        kvp_free(blob);
        return (iov == NULL) ? KVP_ERR_NO_MEMORY : KVP_ERR_TOO_LARGE;
    }
    iov->buf = blob;
    iov->len = len;
    memset(&req, 0, sizeof(req));
    req.op         = KVP_WIRE_OP_PUT_SESSION;
    req.ns         = ns;
    req.record_len = (uint32_t)len;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = call_start(client, &req, iov, 1, &call);
    if (s == KVP_OK) {
        s = call_wait(client, call);
        call_release(call);
    }
    kvp_free(blob);
    return s;
}

/* Check that a tail blob is n_tail valid pages back to back. */
static kvp_status_t verify_tail(const kvp_session_desc_t *d)
{
    size_t off = 0;

    for (uint32_t i = 0; i < d->n_tail; i++) {
        const uint8_t *p = d->tail + off;
        size_t         len;
        kvp_status_t   s;

        if (d->tail_len - off < KVP_PAGE_HDR_BYTES) {
            KVP_LOG_ERROR(MOD, "session tail truncated at page %u", i);
            return KVP_ERR_BAD_PAGE;
        }
        len = KVP_PAGE_HDR_BYTES + ((size_t)p[48] | (size_t)p[49] << 8 | (size_t)p[50] << 16 |
                                    (size_t)p[51] << 24);
        if (len > d->tail_len - off) {
            KVP_LOG_ERROR(MOD, "session tail page %u overruns the tail", i);
            return KVP_ERR_BAD_PAGE;
        }
        s = kvp_page_parse(p, len, NULL);
        if (s != KVP_OK) {
            KVP_LOG_ERROR(MOD, "session tail page %u: %s", i, kvp_status_str(s));
            return s;
        }
        off += len;
    }
    if (off != d->tail_len) {
        KVP_LOG_ERROR(MOD, "session tail has %zu stray bytes", d->tail_len - off);
        return KVP_ERR_BAD_PAGE;
    }
    return KVP_OK;
}

/* Fetch pages for keys[0..nk) x layers into sp->pages[base ...], verifying each. */
static kvp_status_t get_pages_range(kvp_client_h c, uint64_t ns, const kvp_key128_t *keys,
                                    uint32_t nk, uint32_t layers, kvp_session_pages_t *sp,
                                    uint32_t base)
{
    uint32_t total = nk * layers, start = 0;

    while (start < total) {
        kvp_wire_req_t req;
        call_t        *call;
        const uint8_t *data;
        size_t         dl, off = 0;
        kvp_status_t   s;

        memset(&req, 0, sizeof(req));
        req.op        = KVP_WIRE_OP_GET_PAGES;
        req.ns        = ns;
        req.n_keys    = nk;
        req.keys      = (kvp_key128_t *)keys;
        req.layers    = layers;
        req.start     = start;
        req.max_bytes = (uint32_t)c->batch_bytes;
        s = call_simple(c, &req, &call);
        if (s == KVP_OK && (call->rep.n_pages == 0 || call->rep.n_pages > total - start)) {
            KVP_LOG_ERROR(MOD, "get_pages reply with %u pages for %u wanted", call->rep.n_pages,
                          total - start);
            s = KVP_ERR_PROTOCOL;
        }
        if (s != KVP_OK) {
            call_release(call);
            return s;
        }
        data = kvp_xfer_msg_data(call->msg, &dl);
        for (uint32_t k = 0; k < call->rep.n_pages && s == KVP_OK; k++) {
            uint32_t        item = start + k, len = call->rep.page_lens[k];
            kvp_page_info_t info;
            uint8_t        *p;

            s = kvp_page_parse(data + off, len, &info);
            if (s == KVP_OK && (info.chunk_key.lo != keys[item / layers].lo ||
                                info.chunk_key.hi != keys[item / layers].hi ||
                                info.layer != item % layers)) {
                KVP_LOG_ERROR(MOD, "node sent the wrong page for item %u", item);
                s = KVP_ERR_PROTOCOL;
            }
            if (s == KVP_OK && (p = kvp_malloc(len, "session page")) == NULL) {
                s = KVP_ERR_NO_MEMORY;
            }
            if (s == KVP_OK) {
                memcpy(p, data + off, len);
                sp->pages[base + item]     = p;
                sp->page_lens[base + item] = len;
            } else {
                KVP_LOG_ERROR(MOD, "page for chunk %u layer %u failed verification: %s",
                              (base + item) / layers, item % layers, kvp_status_str(s));
            }
            off += len;
        }
        start += call->rep.n_pages;
        call_release(call);
        if (s != KVP_OK) {
            return s;
        }
    }
    return KVP_OK;
}

kvp_status_t kvp_client_get_session(kvp_client_h client, uint64_t ns, const char *sid,
                                    kvp_session_pages_t **out_p)
{
    kvp_wire_req_t       req;
    kvp_session_pages_t *sp;
    call_t              *call;
    const uint8_t       *data;
    size_t               dl;
    uint64_t             rx0 = client->rx_bytes;
    uint64_t             n_pages;
    kvp_status_t         s   = check_sid(sid);

    if (s != KVP_OK) {
        return s;
    }
    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_GET_SESSION;
    req.ns = ns;
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
    data = kvp_xfer_msg_data(call->msg, &dl);
    s    = kvp_session_desc_unpack(data, dl, &sp->desc);
    call_release(call);
    if (s != KVP_OK) {
        KVP_LOG_ERROR(MOD, "session %s record from the node: %s", sid, kvp_status_str(s));
        kvp_free(sp);
        return s;
    }
    s = verify_tail(&sp->desc);
    n_pages = (uint64_t)sp->desc.n_chunks * sp->desc.layers;
    if (s == KVP_OK && n_pages > UINT32_MAX / 2) {
        s = KVP_ERR_TOO_LARGE;
    }
    if (s == KVP_OK && n_pages > 0) {
        sp->n_pages   = (uint32_t)n_pages;
        sp->pages     = kvp_calloc(n_pages, sizeof(*sp->pages), "session page ptrs");
        sp->page_lens = kvp_calloc(n_pages, sizeof(*sp->page_lens), "session page lens");
        if (sp->pages == NULL || sp->page_lens == NULL) {
            s = KVP_ERR_NO_MEMORY;
        }
    }
    /* keys in groups the request header can hold; pages come back in chunk-major order */
    for (uint32_t k = 0; s == KVP_OK && k < sp->desc.n_chunks; k += client->max_keys) {
        uint32_t nk = sp->desc.n_chunks - k;

        if (nk > client->max_keys) {
            nk = client->max_keys;
        }
        s = get_pages_range(client, ns, sp->desc.chunk_keys + k, nk, sp->desc.layers, sp,
                            k * sp->desc.layers);
    }
    sp->wire_bytes = client->rx_bytes - rx0;
    if (s != KVP_OK) {
        kvp_session_pages_free(sp);
        return s;
    }
    *out_p = sp;
    return KVP_OK;
}

void kvp_session_pages_free(kvp_session_pages_t *sp)
{
    if (sp == NULL) {
        return;
    }
    for (uint32_t i = 0; sp->pages != NULL && i < sp->n_pages; i++) {
        kvp_free(sp->pages[i]);
    }
    kvp_free(sp->pages);
    kvp_free(sp->page_lens);
    kvp_session_desc_clear(&sp->desc);
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

kvp_status_t kvp_client_spill(kvp_client_h client, uint64_t ns, const char *sid)
{
    kvp_wire_req_t req;
    call_t        *call;
    kvp_status_t   s = check_sid(sid);

    if (s != KVP_OK) {
        return s;
    }
    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_SPILL;
    req.ns = ns;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = call_simple(client, &req, &call);
    call_release(call);
    return s;
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
    }
    call_release(call);
    return s;
}
