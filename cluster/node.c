/* node.c - a kvpack node: serves one store over the transfer layer. Every request is unpacked and
 * validated by proto/wire, executed against the store, and answered with a reply that carries a
 * kvp_status_t (and page or record bytes as AM data). A malformed request gets KVP_ERR_PROTOCOL
 * and the node keeps serving; a client that dies only loses its own connection.
 * Deadlines are enforced by the client. Threads: the transport thread receives and sends; the
 * requests run on a pool of workers (node_work.c), so one that waits on the disk holds up only
 * later requests of its own connection (each connection's requests run one at a time, in
 * arrival order: a strand); with --http another thread serves /health and /metrics.
 * Main flow: kvp_node_run -> kvp_xfer_wait -> node_recv -> strand -> worker: job_run ->
 *            handle_<op> -> reply_set -> transport thread: job_finish -> kvp_xfer_send. */
#include "kvpack/node.h"
#include "http.h"
#include "node_etcd.h"
#include "kvpack/etcd.h"
#include "node_obs.h"
#include "node_work.h"
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/log.h"
#include "kvpack/page.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MOD "node"

/* Requests of one connection held at once (the one running, those queued behind it, and those the
 * transport still holds behind a large one of its that waits for the receive budget): the
 * transport's conn_msgs_max, so it counts them all. More are answered KVP_ERR_BUSY at once (a
 * large one's send fails KVP_ERR_BUSY). libkvpack keeps at most 8 in flight per connection. */
#define NODE_CONN_QUEUE_MAX 256u
/* Replies a connection has not taken yet (its sends in flight, each counted 1 KiB more for its
 * bookkeeping: a client that stops reading, or reads slowly): past this its next request waits
 * (its strand is parked) until they drain, so a client cannot make the node hold unbounded reply
 * memory with small requests (nor with refusals: NODE_CONN_UNSENT_CLOSE). 8 GET_PAGES of the
 * client's default 4 MiB batches stay well under it. */
#define NODE_CONN_UNSENT_MAX (64u << 20)
#define NODE_SEND_TIMEOUT_S  30u /* --send-timeout default */
#define NODE_STOP_DRAIN_MS   5000u /* a stop waits this long for replies not taken yet */
/* The most page bytes one reply carries whatever the request asks (at least one page): the
 * client asks again for the rest, as for any short reply. */
#define NODE_REPLY_MAX (64u << 20)
/* Replies not taken past which a connection sent a refusal (past NODE_CONN_QUEUE_MAX) is closed
 * instead (the transport's conn_unsent_max): its strand parks at NODE_CONN_UNSENT_MAX, and the
 * reply running then adds at most NODE_REPLY_MAX, so past those only the refusals' answers pile
 * up behind the rest, 2 MiB of them at most (each counted 1 KiB more: ~2,000 answers). A client
 * that takes its replies, even slowly, stays under it; a libkvpack client (8 in flight) is never
 * refused at all. */
#define NODE_CONN_UNSENT_CLOSE ((size_t)NODE_CONN_UNSENT_MAX + NODE_REPLY_MAX + (2u << 20))

typedef struct {
    kvp_xfer_h  x;
    kvp_store_h store;
    uint64_t    start_ns;
    atomic_uint_fast64_t requests;     /* counted on the transport thread, read by STAT */
    atomic_uint_fast64_t bad_requests;
    atomic_flag          scrubbing;    /* a SCRUB pass is running (one at a time) */
    kvp_node_work_h work;
    uint64_t    outstanding;  /* jobs received and not yet finished (transport thread) */
    int         stopping;     /* shutting down: new requests are answered KVP_ERR_SHUTTING_DOWN
                               * at once, so clients fail over now */
    uint32_t    max_reply_pages; /* bounded by the transport's header limit */
    uint32_t    max_list;        /* LIST entries per reply, bounded the same way */
    kvp_node_obs_t obs;          /* state and counters for /health and /metrics */
    struct node_strand *parked;  /* strands waiting for their replies to drain */
} node_t;

/* Everything a reply pins until its send completes. */
typedef struct {
    uint8_t        *hdr;
    uint8_t        *blob;       /* GET_SESSION record */
    kvp_page_ref_h *refs;       /* GET_PAGES pages */
    uint32_t        n_refs;
    kvp_xfer_iov_t *iov;
} reply_ctx_t;

/* One request from its receipt to its reply: made on the transport thread, run by a worker (or
 * there when it cannot run: job_inline), answered on the transport thread. */
typedef struct node_job {
    kvp_node_job_t   link;        /* MUST be first: the worker pool's link */
    struct node_job *next;        /* its strand's queue */
    kvp_xfer_conn_h  conn;        /* alive while msg is held */
    kvp_xfer_msg_h   msg;         /* released when the job finishes */
    kvp_wire_req_t   req;
    kvp_status_t     bad;         /* KVP_OK, or why the request cannot run (answered as such) */
    uint64_t         wire_bytes;  /* header + data received */
    uint64_t         busy_ns;     /* in its handler (job_run) */
    int              ran;         /* job_run ran it (else its connection had failed) */
    reply_ctx_t     *rc;          /* the reply, header packed; NULL: nothing to send */
    size_t           hdr_len;
    int              iovcnt;
    uint32_t         op;          /* of the reply (the request's, or 0 if it did not decode) */
    kvp_status_t     status;      /* of the reply */
} node_job_t;

/* A connection's unanswered requests in arrival order (kvp_xfer_conn_user): the head runs, the
 * rest wait. Freed when it empties; touched on the transport thread only. */
typedef struct node_strand {
    node_job_t         *head, *tail;
    int                 warned;    /* its wait for replies to drain was logged (once per strand) */
    struct node_strand *park_next; /* in node_t.parked while it waits for its replies to drain */
} node_strand_t;

/* ---- private: replies ---- */

/* A version for a write that came without one (an older client): the node's wall clock. */
static uint64_t kvp_node_wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void reply_ctx_free(reply_ctx_t *rc)
{
    for (uint32_t i = 0; i < rc->n_refs; i++) {
        kvp_page_ref_release(rc->refs[i]);
    }
    kvp_free(rc->refs);
    kvp_free(rc->iov);
    kvp_free(rc->blob);
    kvp_free(rc->hdr);
    kvp_free(rc);
}

static void reply_done(void *arg, kvp_status_t status)
{
    if (status != KVP_OK) {
        KVP_LOG_DEBUG(MOD, "reply not delivered: %s", kvp_status_str(status));
    }
    reply_ctx_free(arg);
}

/* The job's reply: rep packed into rc->hdr, with the data in rc (iov); sent by job_finish. */
static void reply_set(node_job_t *job, const kvp_wire_rep_t *rep, reply_ctx_t *rc, int iovcnt)
{
    kvp_status_t s = kvp_wire_rep_pack(rep, &rc->hdr, &job->hdr_len);

    job->op     = rep->op;
    job->status = rep->status;
    if (s != KVP_OK) {
        KVP_LOG_INFO(MOD, "reply %s to %s failed: %s", kvp_wire_op_name(rep->op),
                     kvp_xfer_conn_peer(job->conn), kvp_status_str(s));
        reply_ctx_free(rc);
        return;
    }
    job->rc     = rc;
    job->iovcnt = iovcnt;
}

/* Why status happened, in words: what this request's store call logged as an error (the request
 * runs on this worker thread, which job_handle cleared), else the status's text. */
static const char *status_reason(kvp_status_t status)
{
    return *kvp_log_last_error() != '\0' ? kvp_log_last_error() : kvp_status_str(status);
}

/* A reply of status alone; its message (not OK) is "what: reason", or what as it is when
 * verbatim (a reason the caller took when the status happened). */
static void reply_status_msg(node_job_t *job, kvp_wire_rep_t *rep, kvp_status_t status,
                             const char *what, bool verbatim)
{
    reply_ctx_t *rc = kvp_calloc(1, sizeof(*rc), "node reply");

    if (rc == NULL) {
        return;
    }
    rep->status = status;
    if (status != KVP_OK && verbatim) {
        snprintf(rep->message, sizeof(rep->message), "%s", what);
    } else if (status != KVP_OK) {
        snprintf(rep->message, sizeof(rep->message), "%s: %s", what != NULL ? what : "request",
                 status_reason(status));
    }
    reply_set(job, rep, rc, 0);
}

static void reply_status(node_job_t *job, kvp_wire_rep_t *rep, kvp_status_t status,
                         const char *what)
{
    reply_status_msg(job, rep, status, what, false);
}

/* ---- private: one handler per op ---- */

/* Store the request's pages (data: back to back, lengths in req->page_lens): every one is tried;
 * rep->accepted / first_bad count them. On a rejection the error reply is set and that status
 * returned; *off_p = the bytes the pages took. */
static kvp_status_t pages_store(node_t *n, node_job_t *job, const kvp_wire_req_t *req,
                                const uint8_t *data, kvp_wire_rep_t *rep, size_t *off_p)
{
    kvp_status_t first = KVP_OK;
    size_t       off   = 0;
    char         why[KVP_WIRE_MSG_MAX]; /* the first bad page's reason, taken as it happened */

    rep->first_bad = req->n_pages;
    for (uint32_t i = 0; i < req->n_pages; i++) {
        kvp_status_t s = kvp_store_page_put(n->store, req->ns, data + off, req->page_lens[i]);

        off += req->page_lens[i];
        if (s == KVP_OK) {
            rep->accepted++;
        } else if (first == KVP_OK) {
            first          = s;
            rep->first_bad = i;
            snprintf(why, sizeof(why), "page %u of %u: %s", i, req->n_pages, status_reason(s));
        }
    }
    *off_p = off;
    if (first != KVP_OK) {
        reply_status_msg(job, rep, first, why, true);
    }
    return first;
}

static void handle_put_pages(node_t *n, node_job_t *job, const kvp_wire_req_t *req,
                             const uint8_t *data, kvp_wire_rep_t *rep)
{
    size_t off;

    if (pages_store(n, job, req, data, rep, &off) == KVP_OK) {
        reply_status(job, rep, KVP_OK, NULL);
    }
}

/* The record, after the pages that came with it (if any): a rejected page leaves the record
 * unwritten (the session stays as it was). */
static void handle_put_session(node_t *n, node_job_t *job, const kvp_wire_req_t *req,
                               const uint8_t *data, kvp_wire_rep_t *rep)
{
    kvp_session_desc_t desc;
    size_t             off = 0;
    kvp_status_t       s;

    if (req->n_pages > 0 && pages_store(n, job, req, data, rep, &off) != KVP_OK) {
        KVP_LOG_INFO(MOD, "session %s from %s not written: page %u of its %u rejected", req->sid,
                     kvp_xfer_conn_peer(job->conn), rep->first_bad, req->n_pages);
        return;
    }
    s = kvp_session_desc_unpack(data + off, req->record_len, &desc);
    if (s != KVP_OK) {
        KVP_LOG_WARN(MOD, "session %s record from %s rejected: %s", req->sid,
                     kvp_xfer_conn_peer(job->conn), kvp_status_str(s));
        reply_status(job, rep, s, "session record");
        return;
    }
    s = kvp_store_session_put_version(n->store, req->ns, req->sid, &desc,
                                      req->version != 0 ? req->version : kvp_node_wall_ns());
    kvp_session_desc_clear(&desc);
    reply_status(job, rep, s, s == KVP_ERR_STALE ? req->sid : "session put");
}

/* Pin pages of keys[0..n_keys) x layers from item start on, at most max_bytes of them (at least
 * one when min_one) and max_reply_pages, into rc (refs; iov from rc->iov[iov0]) and rep->page_lens
 * (both sized for max_reply_pages by the caller). Stops at the first page the store cannot give:
 * that status is returned, with the pages before it still pinned. */
static kvp_status_t pages_gather(node_t *n, uint64_t ns, const kvp_key128_t *keys, uint32_t n_keys,
                                 uint32_t layers, uint32_t start, uint64_t max_bytes, int min_one,
                                 reply_ctx_t *rc, uint32_t iov0, kvp_wire_rep_t *rep)
{
    uint64_t room  = (uint64_t)n_keys * layers - start; /* start < n_keys * layers */
    uint64_t bytes = 0;

    if (room > n->max_reply_pages) {
        room = n->max_reply_pages;
    }
    if (max_bytes > NODE_REPLY_MAX) {
        max_bytes = NODE_REPLY_MAX;
    }
    for (uint32_t i = 0; i < room; i++) {
        uint64_t       item = start + (uint64_t)i;
        kvp_key128_t   key  = keys[item / layers];
        kvp_page_ref_h ref;
        const void    *p;
        size_t         len;
        kvp_status_t   s = kvp_store_page_get(n->store, ns, key, (uint32_t)(item % layers), &ref);

        if (s != KVP_OK) {
            KVP_LOG_INFO(MOD, "page %016llx%016llx layer %u: %s", (unsigned long long)key.hi,
                         (unsigned long long)key.lo, (uint32_t)(item % layers),
                         kvp_status_str(s));
            return s;
        }
        p = kvp_page_ref_data(ref, &len);
        if ((i > 0 || !min_one) && bytes + len > max_bytes) {
            kvp_page_ref_release(ref);
            break;
        }
        rc->refs[rc->n_refs]           = ref;
        rc->iov[iov0 + rc->n_refs]     = (kvp_xfer_iov_t){p, len};
        rep->page_lens[rc->n_refs]     = (uint32_t)len;
        rc->n_refs++;
        bytes += len;
    }
    return KVP_OK;
}

/* A reply context with room for the record (iov0 = 1) or not (0) and up to `pages` pages. */
static reply_ctx_t *reply_ctx_pages(uint32_t iov0, uint32_t pages, kvp_wire_rep_t *rep)
{
    reply_ctx_t *rc = kvp_calloc(1, sizeof(*rc), "node reply");

    if (rc == NULL || (rc->iov = kvp_calloc(iov0 + pages, sizeof(*rc->iov), "node iov")) == NULL ||
        (pages > 0 && ((rc->refs = kvp_calloc(pages, sizeof(*rc->refs), "node refs")) == NULL ||
                       (rep->page_lens = kvp_calloc(pages, sizeof(uint32_t), "node lens")) == NULL))) {
        if (rc != NULL) {
            reply_ctx_free(rc);
        }
        return NULL;
    }
    return rc;
}

/* The record, and (req->max_bytes > 0) its first pages up to that many bytes: a session that
 * fits costs one round trip. A page the store cannot give ends the pages early without an error
 * (the client's GET_PAGES for the rest then reports it). */
static void handle_get_session(node_t *n, node_job_t *job, const kvp_wire_req_t *req,
                               kvp_wire_rep_t *rep)
{
    kvp_session_desc_t   desc;
    reply_ctx_t         *rc;
    size_t               len;
    kvp_store_get_info_t got = {0, 0, 0};
    uint64_t             items;
    uint32_t             want = 0;
    kvp_status_t         s = kvp_store_session_get_info(n->store, req->ns, req->sid, &desc, &got);

    if (s != KVP_OK) {
        rep->version = s == KVP_ERR_NOT_FOUND ? got.version : 0; /* a delete's version, if any */
        reply_status(job, rep, s, req->sid);
        return;
    }
    items = (uint64_t)desc.n_chunks * desc.layers;
    if (req->max_bytes > 0 && items > 0) {
        want = items < n->max_reply_pages ? (uint32_t)items : n->max_reply_pages;
    }
    rc = reply_ctx_pages(1, want, rep);
    if (rc == NULL) {
        kvp_session_desc_clear(&desc);
        reply_status(job, rep, KVP_ERR_NO_MEMORY, "get session");
        return;
    }
    if (want > 0) {
        (void)pages_gather(n, req->ns, desc.chunk_keys, desc.n_chunks, desc.layers, 0,
                           req->max_bytes, 0, rc, 1, rep);
    }
    s = kvp_session_desc_pack(&desc, &rc->blob, &len);
    kvp_session_desc_clear(&desc);
    if (s != KVP_OK || len > UINT32_MAX) {
        reply_ctx_free(rc);
        kvp_free(rep->page_lens);
        rep->page_lens = NULL;
        reply_status(job, rep, (s != KVP_OK) ? s : KVP_ERR_TOO_LARGE, "session record");
        return;
    }
    rc->iov[0].buf  = rc->blob;
    rc->iov[0].len  = len;
    rep->record_len = (uint32_t)len;
    rep->version    = got.version;
    rep->disk_pages = got.disk_pages;
    rep->disk_bytes = got.disk_bytes;
    rep->n_pages    = rc->n_refs;
    rep->status     = KVP_OK;
    reply_set(job, rep, rc, 1 + (int)rc->n_refs);
    kvp_free(rep->page_lens);
    rep->page_lens = NULL;
}

static void handle_get_pages(node_t *n, node_job_t *job, const kvp_wire_req_t *req,
                             kvp_wire_rep_t *rep)
{
    uint64_t     room = (uint64_t)req->n_keys * req->layers - req->start;
    reply_ctx_t *rc   = reply_ctx_pages(0, room < n->max_reply_pages ? (uint32_t)room
                                                                    : n->max_reply_pages, rep);
    kvp_status_t s;

    if (rc == NULL) {
        reply_status(job, rep, KVP_ERR_NO_MEMORY, "get pages");
        return;
    }
    s = pages_gather(n, req->ns, req->keys, req->n_keys, req->layers, req->start, req->max_bytes,
                     1, rc, 0, rep);
    if (s != KVP_OK) {
        reply_ctx_free(rc);
        kvp_free(rep->page_lens);
        rep->page_lens = NULL;
        reply_status(job, rep, s, "page");
        return;
    }
    rep->n_pages = rc->n_refs;
    rep->status  = KVP_OK;
    reply_set(job, rep, rc, (int)rc->n_refs);
    kvp_free(rep->page_lens);
    rep->page_lens = NULL;
}

static void handle_stat(node_t *n, node_job_t *job, kvp_wire_rep_t *rep)
{
    kvp_store_stats_t st;

    memset(&st, 0, sizeof(st));
    kvp_store_stats(n->store, &st);
    rep->stat.dram_bytes       = st.dram_bytes;
    rep->stat.dram_pages       = st.dram_pages;
    rep->stat.dram_budget      = st.dram_budget;
    rep->stat.sessions         = st.sessions;
    rep->stat.sessions_on_disk = st.sessions_on_disk;
    rep->stat.spills           = st.spills;
    rep->stat.restores         = st.restores;
    rep->stat.crc_failures     = st.crc_failures;
    rep->stat.disk_errors      = st.disk_errors;
    rep->stat.uptime_ms        = (kvp_time_ns() - n->start_ns) / 1000000u;
    rep->stat.requests         = atomic_load_explicit(&n->requests, memory_order_relaxed);
    rep->stat.bad_requests     = atomic_load_explicit(&n->bad_requests, memory_order_relaxed);
    rep->stat.disk_bytes       = st.disk_bytes;
    rep->stat.disk_live_bytes  = st.disk_live_bytes;
    rep->stat.index_rebuilds    = st.index_rebuilds;
    rep->stat.wal_dropped_bytes = st.wal_dropped_bytes;
    rep->stat.disk_free_bytes    = st.disk_free_bytes == UINT64_MAX ? 0 : st.disk_free_bytes;
    rep->stat.disk_full_refusals = st.disk_full_refusals;
    rep->stat.connections          = atomic_load(&n->obs.conns);
    rep->stat.connections_max      = atomic_load(&n->obs.max_conns);
    rep->stat.connections_rejected = atomic_load(&n->obs.conns_rejected);
    reply_status(job, rep, KVP_OK, NULL);
}

/* One whole scrubbing pass now (a worker; as long as the disk takes): every page on disk read back
 * and checked, then the index. One at a time: a second is refused KVP_ERR_BUSY. */
static void handle_scrub(node_t *n, node_job_t *job, kvp_wire_rep_t *rep)
{
    kvp_store_scrub_t r;
    uint64_t          t0 = kvp_time_ns();
    kvp_status_t      s;

    if (atomic_flag_test_and_set(&n->scrubbing)) {
        reply_status(job, rep, KVP_ERR_BUSY, "a scrubbing pass is already running");
        return;
    }
    KVP_LOG_INFO(MOD, "scrub requested by %s: one whole pass", kvp_xfer_conn_peer(job->conn));
    memset(&r, 0, sizeof(r));
    s = kvp_store_scrub(n->store, &r);
    atomic_flag_clear(&n->scrubbing);
    rep->scrub.bytes         = r.bytes;
    rep->scrub.bad_pages     = r.bad_pages;
    rep->scrub.index_rebuilt = r.index_rebuilt;
    rep->scrub.elapsed_ms    = (kvp_time_ns() - t0) / 1000000u;
    KVP_LOG_INFO(MOD, "scrub: %llu page bytes checked, %llu bad, index %s, %s",
                 (unsigned long long)r.bytes, (unsigned long long)r.bad_pages,
                 r.index_rebuilt ? "rebuilt" : "sound", kvp_status_str(s));
    reply_status(job, rep, s, s == KVP_ERR_UNSUPPORTED ? "the node has no data dir" : "scrub");
}

/* One page of the session listing: at most min(limit, max_list) entries after the cursor (at or
 * after it, inclusive). */
static void handle_list(node_t *n, node_job_t *job, const kvp_wire_req_t *req,
                        kvp_wire_rep_t *rep)
{
    uint32_t                  max = req->limit < n->max_list ? req->limit : n->max_list, got = 0;
    kvp_store_session_info_t *info = kvp_calloc(max, sizeof(*info), "node list");
    int                       more = 0;
    kvp_status_t              s    = KVP_ERR_NO_MEMORY;

    rep->sessions = kvp_calloc(max, sizeof(*rep->sessions), "node list reply");
    if (info != NULL && rep->sessions != NULL) {
        s = kvp_store_session_list_ex(n->store, req->ns, req->sid[0] ? req->sid : NULL,
                                      (req->deleted ? KVP_STORE_LIST_DELETED : 0) |
                                          (req->inclusive ? KVP_STORE_LIST_INCLUSIVE : 0),
                                      info, max, &got, &more);
    }
    for (uint32_t i = 0; s == KVP_OK && i < got; i++) {
        kvp_wire_session_t *w = &rep->sessions[i];

        w->ns = info[i].ns;
        memcpy(w->sid, info[i].sid, sizeof(w->sid));
        w->layers      = info[i].layers;
        w->page_tokens = info[i].page_tokens;
        w->n_chunks    = info[i].n_chunks;
        w->tail_tokens = info[i].tail_tokens;
        w->codec       = info[i].codec;
        w->heads       = info[i].heads;
        w->head_dim    = info[i].head_dim;
        w->where       = ((info[i].where & KVP_STORE_IN_DRAM) ? KVP_WIRE_WHERE_DRAM : 0u) |
                         ((info[i].where & KVP_STORE_ON_DISK) ? KVP_WIRE_WHERE_DISK : 0u);
        w->bytes       = info[i].bytes;
        w->version     = info[i].version;
        w->deleted     = info[i].deleted;
        w->damaged     = info[i].damaged;
    }
    rep->n_sessions = got;
    rep->more       = (uint32_t)more;
    kvp_free(info);
    reply_status(job, rep, s, "list");
    kvp_free(rep->sessions);
    rep->sessions = NULL;
}

/* One of APPEND_LOCKS locks per (ns, session id): appends to one session run one at a time,
 * appends to others (but one in APPEND_LOCKS) at once, so a large append holds up neither the
 * other sessions' appends nor, through the worker threads they would occupy, other clients. */
#define APPEND_LOCKS 64u
static pthread_mutex_t append_mu[APPEND_LOCKS];
static pthread_once_t  append_once = PTHREAD_ONCE_INIT;

static void append_mu_init(void)
{
    for (uint32_t i = 0; i < APPEND_LOCKS; i++) {
        pthread_mutex_init(&append_mu[i], NULL);
    }
}

static pthread_mutex_t *append_lock_of(uint64_t ns, const char *sid)
{
    uint8_t b[8];

    (void)pthread_once(&append_once, append_mu_init);
    kvp_st64(b, ns);
    return &append_mu[kvp_crc32c(kvp_crc32c(0, b, 8), sid, strlen(sid)) % APPEND_LOCKS];
}

/* Tokens' K/V onto a session's tail (kvp_store_session_append: full chunks sealed with the
 * given codec). An append reads the record, then writes the new one, so appends to one session
 * are serialised here (two clients appending to one session at once would otherwise have one
 * refused). The data is K then V; copied to an aligned buffer when the transport's is not
 * aligned for the dtype. */
static void handle_append(node_t *n, node_job_t *job, const kvp_wire_req_t *req,
                          const uint8_t *data, size_t dl, kvp_wire_rep_t *rep)
{
    pthread_mutex_t         *mu  = append_lock_of(req->ns, req->sid);
    const kvp_wire_append_t *a   = &req->append;
    kvp_store_append_t       ap  = {0};
    void                    *own = NULL;
    kvp_status_t             s   = KVP_OK;

    if (((uintptr_t)data & 3u) != 0) {
        own = kvp_malloc(dl, "node append");
        if (own != NULL) {
            memcpy(own, data, dl);
        }
        data = own;
        s    = own != NULL ? KVP_OK : KVP_ERR_NO_MEMORY;
    }
    if (s == KVP_OK) {
        ap.codec          = (kvp_codec_id_t)a->codec;
        ap.ns_fingerprint = a->fingerprint;
        ap.layers         = a->layers;
        ap.heads          = a->heads;
        ap.head_dim       = a->head_dim;
        ap.page_tokens    = a->page_tokens;
        ap.dtype          = (kvp_dtype_t)a->dtype;
        ap.k              = data;
        ap.v              = data + dl / 2; /* the wire checked dl = 2 x one tensor */
        ap.ntok           = a->ntok;
        ap.ids            = a->ids;
        ap.n_ids          = a->n_ids;
        ap.version        = a->version;
        ap.chunks         = a->chunks;
        ap.first_pos      = a->first_pos;
        ap.base           = a->base;
        ap.field_mask     = (a->version != 0 ? KVP_STORE_APPEND_VERSION : 0) |
                        (a->has_chunks ? KVP_STORE_APPEND_CHUNKS : 0) |
                        (a->has_first_pos ? KVP_STORE_APPEND_FIRST_POS : 0) |
                        (a->has_base ? KVP_STORE_APPEND_BASE : 0);
        pthread_mutex_lock(mu);
        s = kvp_store_session_append(n->store, req->ns, req->sid, &ap, &rep->sealed);
        pthread_mutex_unlock(mu);
    }
    kvp_free(own);
    reply_status(job, rep, s, req->sid);
}

/* One request's store call and packed reply. */
static void job_handle(node_t *n, node_job_t *job)
{
    kvp_wire_req_t *req = &job->req;
    kvp_wire_rep_t rep;
    size_t         dl;
    const uint8_t *data = kvp_xfer_msg_data(job->msg, &dl);
    kvp_status_t   s;

    memset(&rep, 0, sizeof(rep));
    rep.req_id = req->req_id;
    rep.op     = req->op;
    kvp_log_error_clear(); /* what the store logs as an error from here on is this request's */
    if (job->bad == KVP_ERR_SHUTTING_DOWN) {
        reply_status_msg(job, &rep, job->bad, "node is shutting down: ask another replica", true);
        return;
    }
    if (job->bad != KVP_OK) {
        reply_status(job, &rep, job->bad,
                     job->bad == KVP_ERR_BUSY
                         ? "requests queued on this connection, or eager data over this node's "
                           "budget"
                     : job->bad == KVP_ERR_TOO_LARGE
                         ? "request over this node's --max-msg (lower the client's batch_bytes), "
                           "or a header over 64 KiB"
                     : kvp_xfer_msg_status(job->msg) != KVP_OK ? "request data"
                                                               : "malformed request");
        return;
    }
    KVP_LOG_DEBUG(MOD, "%s %llu from %s, %zu data bytes", kvp_wire_op_name(req->op),
                  (unsigned long long)req->req_id, kvp_xfer_conn_peer(job->conn), dl);
    switch (req->op) {
    case KVP_WIRE_OP_PUT_PAGES:
        handle_put_pages(n, job, req, data, &rep);
        break;
    case KVP_WIRE_OP_PUT_SESSION:
        handle_put_session(n, job, req, data, &rep);
        break;
    case KVP_WIRE_OP_GET_SESSION:
        handle_get_session(n, job, req, &rep);
        break;
    case KVP_WIRE_OP_GET_PAGES:
        handle_get_pages(n, job, req, &rep);
        break;
    case KVP_WIRE_OP_LOOKUP:
        s = kvp_store_lookup(n->store, req->ns, req->keys, req->n_keys, req->layers,
                             &rep.hit_chunks);
        reply_status(job, &rep, s, "lookup");
        break;
    case KVP_WIRE_OP_SPILL:
        s = kvp_store_session_spill(n->store, req->ns, req->sid);
        reply_status(job, &rep, s, req->sid);
        break;
    case KVP_WIRE_OP_STAT:
        handle_stat(n, job, &rep);
        break;
    case KVP_WIRE_OP_DELETE:
        s = req->drop ? kvp_store_session_drop(n->store, req->ns, req->sid, req->version)
                      : kvp_store_session_delete_version(n->store, req->ns, req->sid,
                                                         req->version != 0 ? req->version
                                                                           : kvp_node_wall_ns());
        reply_status(job, &rep, s, req->sid);
        break;
    case KVP_WIRE_OP_LIST:
        handle_list(n, job, req, &rep);
        break;
    case KVP_WIRE_OP_APPEND:
        handle_append(n, job, req, data, dl, &rep);
        break;
    case KVP_WIRE_OP_SCRUB:
        handle_scrub(n, job, &rep);
        break;
    default:
        reply_status(job, &rep, KVP_ERR_PROTOCOL, "op");
        break;
    }
}

/* Run one request (a worker thread; the transport thread for job_inline ones), timed for the
 * request histograms (the handler only, not the wait for a worker or behind its connection). */
static void job_run(void *arg, kvp_node_job_t *link)
{
    node_job_t *job = (node_job_t *)link;
    uint64_t    t0  = kvp_time_ns();

    job_handle(arg, job);
    job->busy_ns = kvp_time_ns() - t0;
    job->ran     = 1;
}

/* A request that cannot run (it did not decode, its data did not arrive) is answered from the
 * transport thread; every other one may wait on the store (even STAT: the tier's disk figures
 * share a lock with segment reads), so it goes to a worker. */
static int job_inline(const node_job_t *job)
{
    return job->bad != KVP_OK;
}

/* Transport thread: send the job's reply, count it, free it (and its hold on the connection). */
static void job_done(node_t *n, node_job_t *job)
{
    reply_ctx_t *rc = job->rc;

    if (job->ran) { /* counted as replies are: before the send, with 0 bytes if none was packed */
        uint64_t bytes = (rc != NULL) ? job->hdr_len : 0;

        for (int i = 0; rc != NULL && i < job->iovcnt; i++) {
            bytes += rc->iov[i].len;
        }
        /* answered before its histogram: a scrape reads them the other way round, so the
         * histogram's _count never leads kvpack_requests_total */
        kvp_node_obs_reply(&n->obs, job->op, job->status, bytes);
        kvp_node_obs_request(&n->obs, job->op, job->wire_bytes, job->busy_ns);
    }
    if (rc != NULL) {
        kvp_status_t s = kvp_xfer_send(job->conn, rc->hdr, job->hdr_len, rc->iov, job->iovcnt,
                                       reply_done, rc);

        if (s != KVP_INPROGRESS) {
            if (s != KVP_OK) {
                KVP_LOG_INFO(MOD, "reply %s to %s failed: %s", kvp_wire_op_name(job->op),
                             kvp_xfer_conn_peer(job->conn), kvp_status_str(s));
            }
            reply_ctx_free(rc);
        }
    }
    kvp_wire_req_clear(&job->req);
    kvp_xfer_msg_release(job->msg); /* last: it may hold the connection's last reference */
    kvp_free(job);
    n->outstanding--;
}

/* Transport thread: finish the head of its connection's strand; returns the next job (now the
 * head) or NULL when the strand is empty (and freed). */
static node_job_t *job_finish(node_t *n, node_job_t *job)
{
    node_strand_t *st   = kvp_xfer_conn_user(job->conn);
    node_job_t    *next = job->next;

    st->head = next;
    if (next == NULL) {
        kvp_xfer_conn_set_user(job->conn, NULL);
        kvp_free(st);
    }
    job_done(n, job);
    return next;
}

/* A strand whose connection holds NODE_CONN_UNSENT_MAX of replies not taken yet (unless the
 * node is stopping: then everything is answered, and the transport cancels what is not taken). */
static int strand_must_wait(const node_t *n, const node_job_t *job)
{
    return !n->stopping && kvp_xfer_conn_unsent(job->conn) >= NODE_CONN_UNSENT_MAX;
}

/* Transport thread: run a connection's strand from job on. job_inline ones are answered here;
 * the first other one goes to a worker and its completion continues the strand, unless the
 * connection's replies are not being taken: then the strand is parked until they drain
 * (node_resume_parked). Jobs of a connection that failed meanwhile are not run (no one would get
 * the reply). */
/* A job not started while the node stops is answered KVP_ERR_SHUTTING_DOWN (inline, at once):
 * its client counts the node unreachable and tries a replica. */
static void job_refuse_if_stopping(const node_t *n, node_job_t *job)
{
    if (n->stopping && job->bad == KVP_OK) {
        job->bad = KVP_ERR_SHUTTING_DOWN;
    }
}

static void strand_run(node_t *n, node_job_t *job)
{
    while (job != NULL) {
        int alive = kvp_xfer_conn_status(job->conn) == KVP_OK;

        job_refuse_if_stopping(n, job); /* not started yet: refused like a new one, so the
                                         * stop waits only for the running jobs */
        if (alive && !job_inline(job) && strand_must_wait(n, job)) {
            node_strand_t *st = kvp_xfer_conn_user(job->conn);

            if (!st->warned) {
                KVP_LOG_WARN(MOD, "%s has %zu bytes of replies not taken yet: its next requests "
                             "wait", kvp_xfer_conn_peer(job->conn),
                             kvp_xfer_conn_unsent(job->conn));
                st->warned = 1;
            }
            st->park_next = n->parked;
            n->parked     = st;
            kvp_node_obs_parked(&n->obs);
            return;
        }
        if (alive && !job_inline(job)) {
            kvp_node_work_submit(n->work, &job->link);
            return;
        }
        if (alive) {
            job_run(n, &job->link);
        }
        job = job_finish(n, job);
    }
}

/* Transport thread: the replies of the jobs the workers finished. */
static void node_take_done(node_t *n)
{
    kvp_node_job_t *link = kvp_node_work_take(n->work);

    while (link != NULL) {
        kvp_node_job_t *next = link->next;

        strand_run(n, job_finish(n, (node_job_t *)link));
        link = next;
    }
}

/* Transport thread: parked strands whose replies drained (or whose connection failed: its jobs
 * are then finished unanswered) run again. */
static void node_resume_parked(node_t *n)
{
    node_strand_t *st = n->parked;

    n->parked = NULL;
    while (st != NULL) {
        node_strand_t *next = st->park_next;
        node_job_t    *head = st->head;

        st->park_next = NULL;
        if (kvp_xfer_conn_status(head->conn) == KVP_OK && strand_must_wait(n, head)) {
            st->park_next = n->parked; /* still waiting */
            n->parked     = st;
        } else {
            strand_run(n, head);
        }
        st = next;
    }
}

static void node_wake(void *arg)
{
    kvp_xfer_wake(arg);
}

/* Transport thread: the connection counts into /metrics and STAT (each request and each loop) */
static void node_conns_publish(node_t *n)
{
    unsigned conns;
    uint64_t rejected;

    kvp_xfer_conn_counts(n->x, &conns, &rejected);
    kvp_node_obs_conns(&n->obs, conns, rejected);
}

static void node_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    node_t        *n = arg;
    node_job_t    *job;
    node_strand_t *st;
    size_t         hl, dl;
    const void    *h = kvp_xfer_msg_hdr(msg, &hl);

    node_conns_publish(n); /* a STAT it asks for counts this connection */

    (void)kvp_xfer_msg_data(msg, &dl);
    atomic_fetch_add_explicit(&n->requests, 1, memory_order_relaxed);
    if ((job = kvp_calloc(1, sizeof(*job), "node job")) == NULL) {
        kvp_xfer_msg_release(msg); /* unanswered: the client's deadline reports it */
        return;
    }
    job->conn       = conn;
    job->msg        = msg;
    job->wire_bytes = hl + dl;
    job->bad        = kvp_xfer_msg_status(msg);
    if (job->bad != KVP_OK) { /* refused, or its data never arrived whole: answer its req_id */
        kvp_wire_req_unpack(h, hl, kvp_xfer_msg_sent_len(msg), &job->req);
    } else if ((job->bad = kvp_wire_req_unpack(h, hl, dl, &job->req)) != KVP_OK) {
        KVP_LOG_WARN(MOD, "malformed request from %s (%zu header, %zu data bytes)",
                     kvp_xfer_conn_peer(conn), hl, dl);
    }
    job->op = job->req.op;
    n->outstanding++;
    if (job->bad != KVP_OK && kvp_xfer_msg_status(msg) != KVP_ERR_BUSY) {
        atomic_fetch_add_explicit(&n->bad_requests, 1, memory_order_relaxed);
    }
    job_refuse_if_stopping(n, job);
    /* refused by the transport with no data to wait for: past NODE_CONN_QUEUE_MAX (a flood), or
     * over --max-msg (eager), or the node is stopping: answered at once, ahead of the
     * connection's queued ones, so a stream of them holds no job behind the connection's strand */
    if (kvp_xfer_msg_status(msg) == KVP_ERR_BUSY || kvp_xfer_msg_status(msg) == KVP_ERR_TOO_LARGE ||
        job->bad == KVP_ERR_SHUTTING_DOWN) {
        job_run(n, &job->link);
        job_done(n, job);
        return;
    }
    st = kvp_xfer_conn_user(conn);
    if (st != NULL) { /* busy: wait behind the connection's earlier requests */
        st->tail->next = job;
        st->tail       = job;
        return;
    }
    st = kvp_calloc(1, sizeof(*st), "node strand");
    if (st == NULL) {
        n->outstanding--;
        kvp_wire_req_clear(&job->req);
        kvp_xfer_msg_release(msg);
        kvp_free(job);
        return;
    }
    st->head = st->tail = job;
    kvp_xfer_conn_set_user(conn, st);
    strand_run(n, job);
}

static void node_conn_failed(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    (void)arg;
    KVP_LOG_INFO(MOD, "client %s gone: %s", kvp_xfer_conn_peer(conn), kvp_status_str(status));
}

static kvp_status_t write_ready_file(const char *path, uint16_t port)
{
    char  tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        KVP_LOG_ERROR(MOD, "cannot write ready file %s: %s", tmp, strerror(errno));
        return KVP_ERR_IO;
    }
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        KVP_LOG_ERROR(MOD, "cannot write ready file %s: %s", path, strerror(errno));
        return KVP_ERR_IO;
    }
    return KVP_OK;
}

/* A ready file names a port only while this process listens on it: removed at start (one a
 * killed run left) and as its listener stops. NULL: none asked for. */
static void ready_file_remove(const char *path)
{
    if (path != NULL && unlink(path) != 0 && errno != ENOENT) {
        KVP_LOG_WARN(MOD, "cannot remove ready file %s: %s", path, strerror(errno));
    }
}

/* Start the HTTP thread of --http and write its ready file; *http_p stays NULL without --http. */
static kvp_status_t http_start(const kvp_node_params_t *params, kvp_node_obs_t *obs,
                               kvp_http_h *http_p)
{
    kvp_http_params_t hp;
    uint16_t          bound;
    kvp_status_t      s;

    *http_p = NULL;
    if (!(params->field_mask & KVP_NODE_PARAM_HTTP)) {
        return KVP_OK;
    }
    memset(&hp, 0, sizeof(hp));
    hp.host  = params->http_host ? params->http_host : "127.0.0.1";
    hp.port  = params->http_port;
    hp.route = kvp_node_obs_route;
    hp.arg   = obs;
    s        = kvp_http_start(&hp, http_p, &bound);
    if (s != KVP_OK) {
        return s;
    }
    printf("kvpackd http on %s:%u (/health, /metrics)\n", hp.host, bound);
    fflush(stdout);
    if ((params->field_mask & KVP_NODE_PARAM_HTTP_READY_FILE) && params->http_ready_file != NULL) {
        s = write_ready_file(params->http_ready_file, bound);
    }
    if (s != KVP_OK) {
        kvp_http_stop(*http_p);
        *http_p = NULL;
    }
    return s;
}

/* --etcd: register host:bound (or --advertise) under the prefix; *reg_p stays NULL without it. */
static kvp_status_t etcd_start(const kvp_node_params_t *params, const char *host, uint16_t bound,
                               kvp_node_obs_t *obs, kvp_node_etcd_h *reg_p)
{
    char adv[300];

    *reg_p = NULL;
    if (!(params->field_mask & KVP_NODE_PARAM_ETCD) || params->etcd == NULL) {
        return KVP_OK;
    }
    if (params->advertise != NULL) {
        snprintf(adv, sizeof(adv), "%s", params->advertise);
    } else if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
        KVP_LOG_ERROR(MOD, "listening on %s: --etcd needs --advertise HOST:PORT", host);
        return KVP_ERR_INVALID;
    } else {
        snprintf(adv, sizeof(adv), "%s:%u", host, bound);
    }
    atomic_store(&obs->etcd_registered, 0);
    return kvp_node_etcd_start(params->etcd,
                               params->etcd_prefix ? params->etcd_prefix : KVP_ETCD_DEFAULT_PREFIX,
                               adv, params->etcd_ttl_s ? params->etcd_ttl_s : 10u,
                               params->data_dir, &obs->etcd_registered, reg_p);
}

/* ---- API ---- */

typedef struct {
    kvp_store_h  store;
    kvp_xfer_h   x;
    atomic_int   done;
    kvp_status_t status; /* kvp_store_shutdown's: not OK when sessions only in DRAM are lost */
} store_stop_t;

static void *store_stop_run(void *arg)
{
    store_stop_t *ss = arg;

    ss->status = kvp_store_shutdown(ss->store);
    atomic_store(&ss->done, 1);
    kvp_xfer_wake(ss->x);
    return NULL;
}

/* kvp_store_shutdown (the stop-time spill under --durability spill: seconds per GB only in DRAM)
 * on a thread of its own while this one keeps the transport moving, so requests that arrive
 * meanwhile are answered KVP_ERR_SHUTTING_DOWN at once and their clients go to a replica (the
 * transport stood still for the spill, and they waited for their deadlines). all: the signal
 * mask for new threads. Returns its status: not OK when sessions only in DRAM were lost. */
static kvp_status_t node_store_shutdown(node_t *n, const sigset_t *all)
{
    store_stop_t ss = {.store = n->store, .x = n->x};
    sigset_t     old_mask;
    pthread_t    t;
    int          rc;

    atomic_init(&ss.done, 0);
    pthread_sigmask(SIG_SETMASK, all, &old_mask);
    rc = pthread_create(&t, NULL, store_stop_run, &ss);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (rc != 0) {
        KVP_LOG_WARN(MOD, "no thread for the store's shutdown (%s): requests wait for it",
                     strerror(rc));
        return kvp_store_shutdown(n->store);
    }
    while (!atomic_load(&ss.done)) {
        kvp_xfer_wait(n->x, 100);
    }
    pthread_join(t, NULL);
    return ss.status;
}

uint32_t kvp_node_max_conns_default(void)
{
    struct rlimit rl;
    uint64_t      lim, store = kvp_store_fd_budget(), n;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        return 0; /* nothing to protect, or nothing known */
    }
    lim = rl.rlim_cur;
    n   = lim >= store + 128 + 32 ? (lim - store - 128) / 2 : 16; /* 128: HTTP, etcd, UCX's own */
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

kvp_status_t kvp_node_run(const kvp_node_params_t *params, volatile sig_atomic_t *stop)
{
    uint64_t           fm = params->field_mask;
    kvp_store_params_t sp;
    kvp_xfer_params_t  xp;
    kvp_node_work_params_t wp;
    sigset_t           all, old_mask;
    size_t             left;
    kvp_status_t       lost;
    node_t             n;
    kvp_http_h         http;
    kvp_node_etcd_h    reg = NULL;
    const char        *host = (fm & KVP_NODE_PARAM_HOST) ? params->host : "127.0.0.1";
    const char        *ready = (fm & KVP_NODE_PARAM_READY_FILE) ? params->ready_file : NULL;
    const char        *http_ready =
        (fm & KVP_NODE_PARAM_HTTP_READY_FILE) ? params->http_ready_file : NULL;
    uint16_t           port = (fm & KVP_NODE_PARAM_PORT) ? params->port : 0;
    uint16_t           bound;
    kvp_status_t       s;
    size_t             hdr;

    memset(&n, 0, sizeof(n));
    atomic_flag_clear(&n.scrubbing);
    memset(&sp, 0, sizeof(sp));
    kvp_node_obs_init(&n.obs); /* /health says "starting" until the listener is up */
    n.start_ns = n.obs.start_ns;
    ready_file_remove(ready);
    ready_file_remove(http_ready);
    s          = http_start(params, &n.obs, &http);
    if (s != KVP_OK) {
        goto err_obs;
    }
    if ((fm & KVP_NODE_PARAM_DATA_DIR) && params->data_dir != NULL) {
        sp.field_mask |= KVP_STORE_PARAM_DB_PATH;
        sp.db_path     = params->data_dir;
    }
    if (fm & KVP_NODE_PARAM_DRAM_BUDGET) {
        sp.field_mask |= KVP_STORE_PARAM_DRAM_BUDGET;
        sp.dram_budget = params->dram_budget;
    }
    if (fm & KVP_NODE_PARAM_DURABILITY) {
        sp.field_mask |= KVP_STORE_PARAM_DURABILITY;
        sp.durability  = params->durability;
    }
    if (fm & KVP_NODE_PARAM_IDLE_TTL) {
        sp.field_mask |= KVP_STORE_PARAM_IDLE_TTL;
        sp.idle_ttl_s  = params->idle_ttl_s;
    }
    if (fm & KVP_NODE_PARAM_SYNC_INTERVAL) {
        sp.field_mask      |= KVP_STORE_PARAM_SYNC_INTERVAL;
        sp.sync_interval_ms = params->sync_interval_ms;
    }
    if (fm & KVP_NODE_PARAM_COMPACT) {
        sp.field_mask        |= KVP_STORE_PARAM_COMPACT;
        sp.compact_dead_ratio = params->compact_dead_ratio;
    }
    sp.field_mask       |= KVP_STORE_PARAM_SCRUB;
    sp.scrub_bytes_per_s = (uint64_t)((fm & KVP_NODE_PARAM_SCRUB_MIB) ? params->scrub_mib_s
                                                                       : KVP_NODE_SCRUB_MIB_S) << 20;
    if (fm & KVP_NODE_PARAM_SEGMENT_MIB) {
        sp.field_mask   |= KVP_STORE_PARAM_SEGMENT_BYTES;
        sp.segment_bytes = (uint64_t)params->segment_mib << 20;
    }
    if (fm & KVP_NODE_PARAM_DISK_RESERVE) {
        sp.field_mask  |= KVP_STORE_PARAM_DISK_RESERVE;
        sp.disk_reserve = (uint64_t)params->disk_reserve_mib << 20;
    }
    if (fm & KVP_NODE_PARAM_PUT_GRACE) {
        sp.field_mask  |= KVP_STORE_PARAM_PUT_GRACE;
        sp.put_grace_ms = params->put_grace_s * 1000u;
    }
    if (fm & KVP_NODE_PARAM_TOMB_TTL) {
        sp.field_mask |= KVP_STORE_PARAM_TOMB_TTL;
        sp.tomb_ttl_s  = params->tomb_ttl_s;
    }
    sigfillset(&all); /* threads started from here on (store, RocksDB, workers) leave SIGTERM and
                       * SIGINT to this one, whose poll they interrupt (kvp_node_main) */
    pthread_sigmask(SIG_SETMASK, &all, &old_mask);
    s = kvp_store_open(&sp, &n.store);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (s != KVP_OK) {
        KVP_LOG_ERROR(MOD, "cannot open store %s: %s", sp.db_path ? sp.db_path : "(dram)",
                      kvp_status_str(s));
        goto err_http;
    }
    if (*stop) { /* asked during the open (signals wait for it): never listen, register or ready */
        KVP_LOG_INFO(MOD, "stop asked while the store opened: closing it without serving");
        goto err_store;
    }
    kvp_node_obs_set_store(&n.obs, n.store);
    memset(&xp, 0, sizeof(xp));
    xp.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG |
                    KVP_XFER_PARAM_CONN_MSGS_MAX | KVP_XFER_PARAM_CONN_UNSENT_MAX;
    xp.recv_cb    = node_recv;
    xp.conn_msgs_max   = NODE_CONN_QUEUE_MAX;
    xp.conn_unsent_max = NODE_CONN_UNSENT_CLOSE;
    xp.conn_cb    = node_conn_failed;
    xp.cb_arg     = &n;
    if (fm & KVP_NODE_PARAM_MAX_MSG) {
        xp.field_mask   |= KVP_XFER_PARAM_MAX_MSG;
        xp.max_msg_bytes = params->max_msg_bytes;
    }
    if (fm & KVP_NODE_PARAM_RECV_TIMEOUT) {
        xp.field_mask     |= KVP_XFER_PARAM_RECV_TIMEOUT;
        xp.recv_timeout_ms = params->recv_timeout_s * 1000u;
    }
    xp.field_mask |= KVP_XFER_PARAM_MAX_CONNS;
    xp.max_conns   = (fm & KVP_NODE_PARAM_MAX_CONNS) ? params->max_conns
                                                     : kvp_node_max_conns_default();
    atomic_store(&n.obs.max_conns, xp.max_conns);
    KVP_LOG_INFO(MOD, "client connections: at most %u%s", xp.max_conns,
                 xp.max_conns == 0 ? " (no limit)" : "");
    xp.field_mask     |= KVP_XFER_PARAM_SEND_TIMEOUT;
    xp.send_timeout_ms = 1000u * ((fm & KVP_NODE_PARAM_SEND_TIMEOUT) ? params->send_timeout_s
                                                                       : NODE_SEND_TIMEOUT_S);
    s = kvp_xfer_create(&xp, &n.x);
    if (s != KVP_OK) {
        goto err_store;
    }
    memset(&wp, 0, sizeof(wp));
    wp.threads  = (fm & KVP_NODE_PARAM_WORKERS) ? params->workers : KVP_NODE_WORKERS_DEFAULT;
    wp.run      = job_run;
    wp.ctx      = &n;
    wp.wake     = node_wake;
    wp.wake_arg = n.x;
    pthread_sigmask(SIG_SETMASK, &all, &old_mask);
    s = kvp_node_work_start(&wp, &n.work);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (s != KVP_OK) {
        goto err_xfer;
    }
    /* a page length is at most 5 bytes of packed varint; leave room for the rest */
    hdr               = kvp_xfer_max_hdr(n.x);
    n.max_reply_pages = (hdr > 128) ? (uint32_t)((hdr - 128) / 5) : 1;
    if (n.max_reply_pages > KVP_WIRE_MAX_PAGES) {
        n.max_reply_pages = KVP_WIRE_MAX_PAGES;
    }
    n.max_list = (hdr > KVP_WIRE_LIST_SLACK + KVP_WIRE_LIST_ENTRY_MAX)
                     ? (uint32_t)((hdr - KVP_WIRE_LIST_SLACK) / KVP_WIRE_LIST_ENTRY_MAX) : 1;
    if (n.max_list > KVP_WIRE_MAX_LIST) {
        n.max_list = KVP_WIRE_MAX_LIST;
    }
    s = kvp_xfer_listen(n.x, host, port, &bound);
    if (s != KVP_OK) {
        goto err_xfer;
    }
    s = *stop ? KVP_OK : etcd_start(params, host, bound, &n.obs, &reg); /* serving registered */
    if (s != KVP_OK || *stop) {
        goto err_xfer;
    }
    /* only now: a supervisor waiting for this line must not see it from a node that then fails
     * to register in etcd and exits */
    printf("kvpackd listening on %s:%u\n", host, bound);
    fflush(stdout);
    KVP_LOG_INFO(MOD, "serving %s on %s:%u", sp.db_path ? sp.db_path : "(dram only)", host, bound);
    kvp_node_obs_set_state(&n.obs, KVP_NODE_SERVING); /* before the ready file: it implies ok */
    if (ready != NULL) {
        s = write_ready_file(ready, bound);
        if (s != KVP_OK) {
            goto err_xfer;
        }
    }
    while (!*stop) {
        kvp_xfer_wait(n.x, n.parked != NULL ? 10 : 100); /* parked: see their replies drain */
        kvp_node_obs_loop(&n.obs);                       /* /health: not stalled */
        node_take_done(&n);
        node_resume_parked(&n);
        node_conns_publish(&n);
    }
    KVP_LOG_INFO(MOD, "shutting down after %llu requests",
                 (unsigned long long)atomic_load(&n.requests));
    s = KVP_OK;
err_xfer:
    ready_file_remove(ready);
    kvp_node_obs_set_state(&n.obs, KVP_NODE_STOPPING);
    kvp_node_etcd_stop(reg); /* revoke first: clients stop picking this node at once */
    n.stopping = 1;          /* running requests are answered, the others refused at once */
    kvp_store_scrub_cancel(n.store); /* a SCRUB's whole pass would hold the stop for minutes */
    while (n.work != NULL && n.outstanding > 0) {
        kvp_xfer_wait(n.x, 10);
        node_take_done(&n);
        node_resume_parked(&n); /* stopping: parked strands run now */
    }
    kvp_node_work_stop(n.work);
    /* the store durable before the transport goes: UCX 1.13 can crash inside the listener's
     * teardown when a client connects meanwhile (openucx/ucx#11087), and the sessions only in
     * DRAM (--durability spill) must not depend on that */
    lost = node_store_shutdown(&n, &all);
    if (lost != KVP_OK && s == KVP_OK) { /* acked sessions gone: a supervisor must see it */
        KVP_LOG_ERROR(MOD, "stopping: sessions only in DRAM could not be saved (%s): the node "
                      "exits with an error", kvp_status_str(lost));
        s = lost;
    }
    left = kvp_xfer_drain(n.x, NODE_STOP_DRAIN_MS); /* replies not taken yet still reach them */
    if (left > 0) {
        KVP_LOG_WARN(MOD, "%zu replies (or connections' last bytes) not taken by their clients "
                     "within %u ms of the stop: dropped", left, NODE_STOP_DRAIN_MS);
    }
    kvp_xfer_destroy(n.x);
err_store:
    kvp_node_obs_set_store(&n.obs, NULL); /* no scrape reads it from here on */
    kvp_store_close(n.store);
err_http:
    ready_file_remove(http_ready);
    kvp_http_stop(http);
err_obs:
    kvp_node_obs_cleanup(&n.obs);
    return s;
}
