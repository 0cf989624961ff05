/* wire.c - the only code that sees protobuf-c's generated Kvp__* types: packs kvp_wire_req_t /
 * kvp_wire_rep_t into protobuf and unpacks + validates received headers against the AM data
 * length that came with them. Unpacked protobuf is copied into our structs and freed here.
 * Main flow: kvp_wire_req_unpack -> kvp__request__unpack -> req_from_pb (validates) -> free.
 * LIST replies carry their entries in the header (bounded by KVP_WIRE_LIST_ENTRY_MAX each).
 * The NCCL link's messages (LinkMsg: hello, accept, batch, ready, ack, close) are at the end. */
#include "kvpack/wire.h"
#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"

#include "kvpack.pb-c.h"

#include <string.h>

#define MOD "wire"

/* ---- allocator: protobuf-c allocations go through kvp_malloc too ---- */

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return kvp_malloc(size == 0 ? 1 : size, "protobuf");
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    kvp_free(ptr);
}

static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

static const char *const op_names[KVP_WIRE_OP_MAX] = {
    "none", "put_pages", "put_session", "get_session", "get_pages", "lookup", "spill", "stat",
    "delete", "list", "append", "scrub",
};

const char *kvp_wire_op_name(kvp_wire_op_t op)
{
    return ((unsigned)op < KVP_WIRE_OP_MAX) ? op_names[op] : "unknown";
}

/* ---- shared checks ---- */

static int sid_ok(const char *sid)
{
    size_t n;

    if (sid == NULL) {
        return 0;
    }
    n = strnlen(sid, KVP_SID_MAX);
    return n > 0 && n < KVP_SID_MAX;
}

/* Page lengths: 1..KVP_WIRE_MAX_PAGES entries, each a plausible page, summing to data_len. */
/* n page lengths, each a possible page, summing to data_len; at least min_n of them (1 for the
 * page ops; 0 for the session ops, whose pages ride along with the record) */
static int page_lens_ok(const uint32_t *lens, size_t n, size_t min_n, uint64_t data_len)
{
    uint64_t sum = 0;

    if (n < min_n || n > KVP_WIRE_MAX_PAGES) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (lens[i] < KVP_PAGE_HDR_BYTES || lens[i] > KVP_PAGE_HDR_BYTES + KVP_PAGE_MAX_PAYLOAD) {
            return 0;
        }
        sum += lens[i];
    }
    return sum == data_len;
}

static int keys_ok(size_t n_lo, size_t n_hi, uint32_t layers)
{
    return n_lo == n_hi && n_lo > 0 && n_lo <= KVP_WIRE_MAX_KEYS && layers > 0 &&
           layers <= KVP_WIRE_MAX_LAYERS;
}

static kvp_status_t keys_copy(const uint64_t *lo, const uint64_t *hi, size_t n,
                              kvp_key128_t **keys_p)
{
    kvp_key128_t *k = kvp_malloc(n * sizeof(*k), "wire keys");

    if (k == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        k[i].lo = lo[i];
        k[i].hi = hi[i];
    }
    *keys_p = k;
    return KVP_OK;
}

static kvp_status_t lens_copy(const uint32_t *src, size_t n, uint32_t **lens_p)
{
    uint32_t *l;

    if (n == 0) { /* a session op without pages */
        *lens_p = NULL;
        return KVP_OK;
    }
    l = kvp_malloc(n * sizeof(*l), "wire lens");
    if (l == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    memcpy(l, src, n * sizeof(*l));
    *lens_p = l;
    return KVP_OK;
}

/* Key arrays for packing: split kvp_key128_t into the lo/hi packed fields. */
static kvp_status_t keys_split(const kvp_key128_t *keys, uint32_t n, uint64_t **lo_p,
                               uint64_t **hi_p)
{
    uint64_t *lo = kvp_malloc((size_t)n * 2 * sizeof(uint64_t), "wire key split");

    if (lo == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        lo[i]     = keys[i].lo;
        lo[n + i] = keys[i].hi;
    }
    *lo_p = lo;
    *hi_p = lo + n;
    return KVP_OK;
}

static kvp_status_t pack_msg(const ProtobufCMessage *m, uint8_t **buf_p, size_t *len_p)
{
    size_t   len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = kvp_malloc(len == 0 ? 1 : len, "wire pack");

    if (buf == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    protobuf_c_message_pack(m, buf);
    *buf_p = buf;
    *len_p = len;
    return KVP_OK;
}

/* ---- requests ---- */

kvp_status_t kvp_wire_req_pack(const kvp_wire_req_t *req, uint8_t **buf_p, size_t *len_p)
{
    Kvp__Request       r   = KVP__REQUEST__INIT;
    Kvp__PutPagesReq   pp  = KVP__PUT_PAGES_REQ__INIT;
    Kvp__PutSessionReq ps  = KVP__PUT_SESSION_REQ__INIT;
    Kvp__SessionReq    sr  = KVP__SESSION_REQ__INIT;
    Kvp__GetPagesReq   gp  = KVP__GET_PAGES_REQ__INIT;
    Kvp__LookupReq     lk  = KVP__LOOKUP_REQ__INIT;
    Kvp__StatReq       st  = KVP__STAT_REQ__INIT;
    Kvp__ScrubReq      sc  = KVP__SCRUB_REQ__INIT;
    Kvp__ListReq       ls  = KVP__LIST_REQ__INIT;
    Kvp__AppendReq     ap  = KVP__APPEND_REQ__INIT;
    uint64_t          *lo  = NULL, *hi = NULL;
    kvp_status_t       status;

    r.version     = KVP_WIRE_VERSION;
    r.req_id      = req->req_id;
    r.deadline_ms = req->deadline_ms;
    switch (req->op) {
    case KVP_WIRE_OP_PUT_PAGES:
        pp.ns         = req->ns;
        pp.n_page_len = req->n_pages;
        pp.page_len   = req->page_lens;
        r.body_case   = KVP__REQUEST__BODY_PUT_PAGES;
        r.put_pages   = &pp;
        break;
    case KVP_WIRE_OP_PUT_SESSION:
        ps.ns          = req->ns;
        ps.sid         = (char *)req->sid;
        ps.record_len  = req->record_len;
        ps.has_version = req->version != 0;
        ps.version     = req->version;
        ps.n_page_len  = req->n_pages;
        ps.page_len    = req->page_lens;
        r.body_case    = KVP__REQUEST__BODY_PUT_SESSION;
        r.put_session  = &ps;
        break;
    case KVP_WIRE_OP_GET_SESSION:
    case KVP_WIRE_OP_SPILL:
    case KVP_WIRE_OP_DELETE:
        sr.ns          = req->ns;
        sr.sid         = (char *)req->sid;
        sr.has_version = req->op == KVP_WIRE_OP_DELETE && req->version != 0;
        sr.version     = req->version;
        sr.has_drop    = req->op == KVP_WIRE_OP_DELETE && req->drop != 0;
        sr.drop        = req->drop != 0;
        sr.has_pages_max_bytes = req->op == KVP_WIRE_OP_GET_SESSION && req->max_bytes != 0;
        sr.pages_max_bytes     = req->max_bytes;
        if (req->op == KVP_WIRE_OP_SPILL) {
            r.body_case = KVP__REQUEST__BODY_SPILL;
            r.spill     = &sr;
        } else if (req->op == KVP_WIRE_OP_DELETE) {
            r.body_case   = KVP__REQUEST__BODY_DEL_SESSION;
            r.del_session = &sr;
        } else {
            r.body_case   = KVP__REQUEST__BODY_GET_SESSION;
            r.get_session = &sr;
        }
        break;
    case KVP_WIRE_OP_LIST:
        if (req->sid[0] != '\0') { /* a cursor: the last session of the previous page */
            ls.has_after_ns = 1;
            ls.after_ns     = req->ns;
            ls.after_sid    = (char *)req->sid;
        }
        ls.limit       = req->limit;
        ls.has_deleted   = req->deleted != 0;
        ls.deleted       = req->deleted != 0;
        ls.has_inclusive = req->inclusive != 0;
        ls.inclusive     = req->inclusive != 0;
        r.body_case = KVP__REQUEST__BODY_LIST;
        r.list      = &ls;
        break;
    case KVP_WIRE_OP_GET_PAGES:
    case KVP_WIRE_OP_LOOKUP:
        if (req->n_keys == 0 || req->n_keys > KVP_WIRE_MAX_KEYS) {
            KVP_LOG_ERROR(MOD, "%s with %u keys (1..%u allowed)", kvp_wire_op_name(req->op),
                          req->n_keys, KVP_WIRE_MAX_KEYS);
            return KVP_ERR_INVALID;
        }
        status = keys_split(req->keys, req->n_keys, &lo, &hi);
        if (status != KVP_OK) {
            return status;
        }
        if (req->op == KVP_WIRE_OP_GET_PAGES) {
            gp.ns        = req->ns;
            gp.n_key_lo  = gp.n_key_hi = req->n_keys;
            gp.key_lo    = lo;
            gp.key_hi    = hi;
            gp.layers    = req->layers;
            gp.start     = req->start;
            gp.max_bytes = req->max_bytes;
            r.body_case  = KVP__REQUEST__BODY_GET_PAGES;
            r.get_pages  = &gp;
        } else {
            lk.ns       = req->ns;
            lk.n_key_lo = lk.n_key_hi = req->n_keys;
            lk.key_lo   = lo;
            lk.key_hi   = hi;
            lk.layers   = req->layers;
            r.body_case = KVP__REQUEST__BODY_LOOKUP;
            r.lookup    = &lk;
        }
        break;
    case KVP_WIRE_OP_STAT:
        r.body_case = KVP__REQUEST__BODY_STAT;
        r.stat      = &st;
        break;
    case KVP_WIRE_OP_SCRUB:
        r.body_case = KVP__REQUEST__BODY_SCRUB;
        r.scrub     = &sc;
        break;
    case KVP_WIRE_OP_APPEND:
        ap.ns          = req->ns;
        ap.sid         = (char *)req->sid;
        ap.codec       = req->append.codec;
        ap.fingerprint = req->append.fingerprint;
        ap.layers      = req->append.layers;
        ap.heads       = req->append.heads;
        ap.head_dim    = req->append.head_dim;
        ap.page_tokens = req->append.page_tokens;
        ap.dtype       = req->append.dtype;
        ap.ntok        = req->append.ntok;
        ap.n_ids       = req->append.n_ids;
        ap.ids         = req->append.ids;
        ap.has_version = req->append.version != 0;
        ap.version     = req->append.version;
        ap.has_chunks  = req->append.has_chunks;
        ap.chunks      = req->append.chunks;
        ap.has_first_pos = req->append.has_first_pos;
        ap.first_pos     = req->append.first_pos;
        ap.has_base_version = req->append.has_base;
        ap.base_version     = req->append.base;
        r.body_case    = KVP__REQUEST__BODY_APPEND;
        r.append       = &ap;
        break;
    default:
        KVP_LOG_ERROR(MOD, "cannot pack request op %d", (int)req->op);
        return KVP_ERR_INVALID;
    }
    status = pack_msg(&r.base, buf_p, len_p);
    kvp_free(lo);
    return status;
}

static kvp_status_t req_bad(kvp_wire_req_t *req, const char *why)
{
    KVP_LOG_WARN(MOD, "malformed %s request %llu: %s", kvp_wire_op_name(req->op),
                 (unsigned long long)req->req_id, why);
    return KVP_ERR_PROTOCOL;
}

/* APPEND: a geometry in range, ids for at least the new tokens and at most a full tail more,
 * and K and V of exactly that many values in the data. */
static kvp_status_t append_from_pb(const Kvp__AppendReq *a, uint64_t data_len,
                                   kvp_wire_req_t *req)
{
    uint64_t esize = a->dtype == KVP_DTYPE_F16 ? 2 : 4, vals;

    req->op = KVP_WIRE_OP_APPEND;
    req->ns = a->ns;
    if (!sid_ok(a->sid)) {
        return req_bad(req, "bad session id");
    }
    if (a->layers == 0 || a->layers > KVP_WIRE_MAX_LAYERS || a->heads == 0 || a->heads > 1024 ||
        a->head_dim == 0 || a->head_dim > 4096 || a->page_tokens == 0 ||
        a->page_tokens > 65536 || (a->dtype != KVP_DTYPE_F16 && a->dtype != KVP_DTYPE_F32) ||
        a->ntok == 0 || a->ntok > KVP_WIRE_MAX_APPEND_TOKENS || a->n_ids < a->ntok ||
        a->n_ids - a->ntok >= a->page_tokens) {
        return req_bad(req, "bad geometry, dtype, token count or ids");
    }
    vals = (uint64_t)a->layers * a->ntok * a->heads * a->head_dim;
    if (data_len != 2 * vals * esize) {
        return req_bad(req, "K/V bytes do not match the geometry");
    }
    strcpy(req->sid, a->sid);
    req->append = (kvp_wire_append_t){a->codec, a->fingerprint, a->layers, a->heads, a->head_dim,
                                      a->page_tokens, a->dtype, a->ntok, (uint32_t)a->n_ids,
                                      NULL, a->has_version ? a->version : 0, a->chunks,
                                      (uint8_t)(a->has_chunks != 0),
                                      (uint8_t)(a->has_first_pos != 0), a->first_pos,
                                      a->has_base_version ? a->base_version : 0,
                                      (uint8_t)(a->has_base_version != 0)};
    return lens_copy(a->ids, req->append.n_ids, &req->append.ids);
}

static kvp_status_t req_from_pb(const Kvp__Request *r, uint64_t data_len, kvp_wire_req_t *req)
{
    req->req_id      = r->req_id;
    req->deadline_ms = r->deadline_ms;
    if (r->version != KVP_WIRE_VERSION) {
        return req_bad(req, "unsupported wire version");
    }
    switch (r->body_case) {
    case KVP__REQUEST__BODY_PUT_PAGES:
        req->op = KVP_WIRE_OP_PUT_PAGES;
        req->ns = r->put_pages->ns;
        if (!page_lens_ok(r->put_pages->page_len, r->put_pages->n_page_len, 1, data_len)) {
            return req_bad(req, "page lengths do not match the data");
        }
        req->n_pages = (uint32_t)r->put_pages->n_page_len;
        return lens_copy(r->put_pages->page_len, req->n_pages, &req->page_lens);
    case KVP__REQUEST__BODY_PUT_SESSION:
        req->op = KVP_WIRE_OP_PUT_SESSION;
        req->ns = r->put_session->ns;
        if (!sid_ok(r->put_session->sid)) {
            return req_bad(req, "bad session id");
        }
        if (r->put_session->record_len == 0 || r->put_session->record_len > data_len ||
            !page_lens_ok(r->put_session->page_len, r->put_session->n_page_len, 0,
                          data_len - r->put_session->record_len)) {
            return req_bad(req, "record and page lengths do not match the data");
        }
        strcpy(req->sid, r->put_session->sid);
        req->record_len = r->put_session->record_len;
        req->version    = r->put_session->has_version ? r->put_session->version : 0;
        req->n_pages    = (uint32_t)r->put_session->n_page_len;
        return lens_copy(r->put_session->page_len, req->n_pages, &req->page_lens);
    case KVP__REQUEST__BODY_GET_SESSION:
    case KVP__REQUEST__BODY_SPILL:
    case KVP__REQUEST__BODY_DEL_SESSION: {
        const Kvp__SessionReq *s = r->get_session;

        req->op = KVP_WIRE_OP_GET_SESSION;
        if (r->body_case == KVP__REQUEST__BODY_SPILL) {
            s       = r->spill;
            req->op = KVP_WIRE_OP_SPILL;
        } else if (r->body_case == KVP__REQUEST__BODY_DEL_SESSION) {
            s       = r->del_session;
            req->op = KVP_WIRE_OP_DELETE;
        }
        req->ns = s->ns;
        if (!sid_ok(s->sid)) {
            return req_bad(req, "bad session id");
        }
        if (data_len != 0) {
            return req_bad(req, "unexpected data");
        }
        strcpy(req->sid, s->sid);
        req->version = req->op == KVP_WIRE_OP_DELETE && s->has_version ? s->version : 0;
        req->drop    = req->op == KVP_WIRE_OP_DELETE && s->has_drop && s->drop;
        req->max_bytes = req->op == KVP_WIRE_OP_GET_SESSION && s->has_pages_max_bytes
                             ? s->pages_max_bytes : 0;
        return KVP_OK;
    }
    case KVP__REQUEST__BODY_GET_PAGES: {
        const Kvp__GetPagesReq *g = r->get_pages;

        req->op = KVP_WIRE_OP_GET_PAGES;
        req->ns = g->ns;
        if (!keys_ok(g->n_key_lo, g->n_key_hi, g->layers) || data_len != 0 ||
            (uint64_t)g->start >= (uint64_t)g->n_key_lo * g->layers || g->max_bytes == 0) {
            return req_bad(req, "bad keys, layers, start or data");
        }
        req->n_keys    = (uint32_t)g->n_key_lo;
        req->layers    = g->layers;
        req->start     = g->start;
        req->max_bytes = g->max_bytes;
        return keys_copy(g->key_lo, g->key_hi, req->n_keys, &req->keys);
    }
    case KVP__REQUEST__BODY_LOOKUP: {
        const Kvp__LookupReq *l = r->lookup;

        req->op = KVP_WIRE_OP_LOOKUP;
        req->ns = l->ns;
        if (!keys_ok(l->n_key_lo, l->n_key_hi, l->layers) || data_len != 0) {
            return req_bad(req, "bad keys, layers or data");
        }
        req->n_keys = (uint32_t)l->n_key_lo;
        req->layers = l->layers;
        return keys_copy(l->key_lo, l->key_hi, req->n_keys, &req->keys);
    }
    case KVP__REQUEST__BODY_STAT:
    case KVP__REQUEST__BODY_SCRUB:
        req->op = r->body_case == KVP__REQUEST__BODY_STAT ? KVP_WIRE_OP_STAT : KVP_WIRE_OP_SCRUB;
        if (data_len != 0) {
            return req_bad(req, "unexpected data");
        }
        return KVP_OK;
    case KVP__REQUEST__BODY_LIST: {
        const Kvp__ListReq *l = r->list;

        req->op = KVP_WIRE_OP_LIST;
        if (data_len != 0 || l->limit == 0 || l->limit > KVP_WIRE_MAX_LIST) {
            return req_bad(req, "bad limit or data");
        }
        if ((l->after_sid != NULL) != (l->has_after_ns != 0) ||
            (l->after_sid != NULL && !sid_ok(l->after_sid)) ||
            (l->has_inclusive && l->inclusive && l->after_sid == NULL)) {
            return req_bad(req, "bad cursor");
        }
        if (l->after_sid != NULL) {
            req->ns = l->after_ns;
            strcpy(req->sid, l->after_sid);
        }
        req->limit   = l->limit;
        req->deleted   = l->has_deleted && l->deleted;
        req->inclusive = l->has_inclusive && l->inclusive;
        return KVP_OK;
    }
    case KVP__REQUEST__BODY_APPEND:
        return append_from_pb(r->append, data_len, req);
    default:
        return req_bad(req, "no body");
    }
}

kvp_status_t kvp_wire_req_unpack(const void *buf, size_t len, uint64_t data_len,
                                 kvp_wire_req_t *req)
{
    Kvp__Request *r;
    kvp_status_t  status;

    memset(req, 0, sizeof(*req));
    r = kvp__request__unpack(&pb_allocator, len, buf);
    if (r == NULL) {
        KVP_LOG_WARN(MOD, "undecodable request header of %zu bytes", len);
        return KVP_ERR_PROTOCOL;
    }
    status = req_from_pb(r, data_len, req);
    kvp__request__free_unpacked(r, &pb_allocator);
    return status;
}

void kvp_wire_req_clear(kvp_wire_req_t *req)
{
    if (req != NULL) {
        kvp_free(req->page_lens);
        kvp_free(req->keys);
        kvp_free(req->append.ids);
        memset(req, 0, sizeof(*req));
    }
}

/* ---- replies ---- */

/* LIST body: SessionInfo messages for the entries, and the pointer array protobuf-c wants, in
 * one allocation (*mem_p, freed by the caller after packing). */
static kvp_status_t list_to_pb(const kvp_wire_rep_t *rep, Kvp__ListRep *lr, void **mem_p)
{
    uint32_t           n = rep->n_sessions;
    Kvp__SessionInfo  *info;
    Kvp__SessionInfo **ptrs;

    if (n > KVP_WIRE_MAX_LIST || (n > 0 && rep->sessions == NULL)) {
        KVP_LOG_ERROR(MOD, "cannot pack a list of %u sessions", n);
        return KVP_ERR_INVALID;
    }
    *mem_p = kvp_malloc((n ? n : 1) * (sizeof(*info) + sizeof(*ptrs)), "wire list");
    if (*mem_p == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    info = *mem_p;
    ptrs = (Kvp__SessionInfo **)(info + n);
    for (uint32_t i = 0; i < n; i++) {
        const kvp_wire_session_t *e = &rep->sessions[i];

        kvp__session_info__init(&info[i]);
        info[i].ns          = e->ns;
        info[i].sid         = (char *)e->sid;
        info[i].layers      = e->layers;
        info[i].page_tokens = e->page_tokens;
        info[i].n_chunks    = e->n_chunks;
        info[i].tail_tokens = e->tail_tokens;
        info[i].codec       = e->codec;
        info[i].heads       = e->heads;
        info[i].head_dim    = e->head_dim;
        info[i].where       = e->where;
        info[i].bytes       = e->bytes;
        info[i].has_version = e->version != 0;
        info[i].version     = e->version;
        info[i].has_deleted = e->deleted != 0;
        info[i].deleted     = e->deleted != 0;
        info[i].has_damaged = e->damaged != 0;
        info[i].damaged     = e->damaged != 0;
        ptrs[i]             = &info[i];
    }
    lr->n_sessions = n;
    lr->sessions   = ptrs;
    lr->more       = rep->more != 0;
    return KVP_OK;
}

kvp_status_t kvp_wire_rep_pack(const kvp_wire_rep_t *rep, uint8_t **buf_p, size_t *len_p)
{
    Kvp__Reply         r  = KVP__REPLY__INIT;
    Kvp__PutPagesRep   pp = KVP__PUT_PAGES_REP__INIT;
    Kvp__GetSessionRep gs = KVP__GET_SESSION_REP__INIT;
    Kvp__GetPagesRep   gp = KVP__GET_PAGES_REP__INIT;
    Kvp__LookupRep     lk = KVP__LOOKUP_REP__INIT;
    Kvp__StatRep       st = KVP__STAT_REP__INIT;
    Kvp__ScrubRep      sc = KVP__SCRUB_REP__INIT;
    Kvp__ListRep       ls = KVP__LIST_REP__INIT;
    Kvp__AppendRep     ap = KVP__APPEND_REP__INIT;
    void              *mem = NULL;
    kvp_status_t       status;

    r.version = KVP_WIRE_VERSION;
    r.req_id  = rep->req_id;
    r.op      = (uint32_t)rep->op;
    r.status  = (int32_t)rep->status;
    if (rep->message[0] != '\0') {
        r.message = (char *)rep->message;
    }
    if (rep->status == KVP_ERR_NOT_FOUND && rep->op == KVP_WIRE_OP_GET_SESSION &&
        rep->version != 0) {
        r.has_deleted_version = 1;
        r.deleted_version     = rep->version;
    }
    if (rep->status == KVP_OK) {
        switch (rep->op) {
        case KVP_WIRE_OP_PUT_PAGES:
            pp.accepted  = rep->accepted;
            pp.first_bad = rep->first_bad;
            r.body_case  = KVP__REPLY__BODY_PUT_PAGES;
            r.put_pages  = &pp;
            break;
        case KVP_WIRE_OP_GET_SESSION:
            gs.record_len  = rep->record_len;
            gs.has_version = rep->version != 0;
            gs.version     = rep->version;
            gs.has_disk_pages = rep->disk_pages != 0;
            gs.disk_pages     = rep->disk_pages;
            gs.has_disk_bytes = rep->disk_bytes != 0;
            gs.disk_bytes     = rep->disk_bytes;
            gs.n_page_len     = rep->n_pages;
            gs.page_len       = rep->page_lens;
            r.body_case   = KVP__REPLY__BODY_GET_SESSION;
            r.get_session = &gs;
            break;
        case KVP_WIRE_OP_GET_PAGES:
            gp.n_page_len = rep->n_pages;
            gp.page_len   = rep->page_lens;
            r.body_case   = KVP__REPLY__BODY_GET_PAGES;
            r.get_pages   = &gp;
            break;
        case KVP_WIRE_OP_LOOKUP:
            lk.hit_chunks = rep->hit_chunks;
            r.body_case   = KVP__REPLY__BODY_LOOKUP;
            r.lookup      = &lk;
            break;
        case KVP_WIRE_OP_APPEND:
            ap.sealed   = rep->sealed;
            r.body_case = KVP__REPLY__BODY_APPEND;
            r.append    = &ap;
            break;
        case KVP_WIRE_OP_SCRUB:
            sc.bytes         = rep->scrub.bytes;
            sc.bad_pages     = rep->scrub.bad_pages;
            sc.index_rebuilt = rep->scrub.index_rebuilt != 0;
            sc.elapsed_ms    = rep->scrub.elapsed_ms;
            r.body_case      = KVP__REPLY__BODY_SCRUB;
            r.scrub          = &sc;
            break;
        case KVP_WIRE_OP_STAT:
            st.dram_bytes       = rep->stat.dram_bytes;
            st.dram_pages       = rep->stat.dram_pages;
            st.dram_budget      = rep->stat.dram_budget;
            st.sessions         = rep->stat.sessions;
            st.sessions_on_disk = rep->stat.sessions_on_disk;
            st.spills           = rep->stat.spills;
            st.restores         = rep->stat.restores;
            st.crc_failures     = rep->stat.crc_failures;
            st.disk_errors      = rep->stat.disk_errors;
            st.uptime_ms        = rep->stat.uptime_ms;
            st.requests         = rep->stat.requests;
            st.bad_requests     = rep->stat.bad_requests;
            st.has_disk_bytes      = rep->stat.disk_bytes != 0;
            st.disk_bytes          = rep->stat.disk_bytes;
            st.has_disk_live_bytes = rep->stat.disk_live_bytes != 0;
            st.disk_live_bytes     = rep->stat.disk_live_bytes;
            st.has_index_rebuilds    = rep->stat.index_rebuilds != 0;
            st.index_rebuilds        = rep->stat.index_rebuilds;
            st.has_wal_dropped_bytes = rep->stat.wal_dropped_bytes != 0;
            st.wal_dropped_bytes     = rep->stat.wal_dropped_bytes;
            st.has_disk_free_bytes    = rep->stat.disk_free_bytes != 0;
            st.disk_free_bytes        = rep->stat.disk_free_bytes;
            st.has_disk_full_refusals = rep->stat.disk_full_refusals != 0;
            st.disk_full_refusals     = rep->stat.disk_full_refusals;
            st.has_connections          = rep->stat.connections != 0;
            st.connections              = rep->stat.connections;
            st.has_connections_max      = rep->stat.connections_max != 0;
            st.connections_max          = rep->stat.connections_max;
            st.has_connections_rejected = rep->stat.connections_rejected != 0;
            st.connections_rejected     = rep->stat.connections_rejected;
            r.body_case         = KVP__REPLY__BODY_STAT;
            r.stat              = &st;
            break;
        case KVP_WIRE_OP_LIST:
            status = list_to_pb(rep, &ls, &mem);
            if (status != KVP_OK) {
                return status;
            }
            r.body_case = KVP__REPLY__BODY_LIST;
            r.list      = &ls;
            break;
        case KVP_WIRE_OP_PUT_SESSION:
        case KVP_WIRE_OP_SPILL:
        case KVP_WIRE_OP_DELETE:
            break;
        default:
            KVP_LOG_ERROR(MOD, "cannot pack reply op %d", (int)rep->op);
            return KVP_ERR_INVALID;
        }
    }
    status = pack_msg(&r.base, buf_p, len_p);
    kvp_free(mem);
    return status;
}

static kvp_status_t rep_bad(kvp_wire_rep_t *rep, const char *why)
{
    KVP_LOG_WARN(MOD, "malformed %s reply %llu: %s", kvp_wire_op_name(rep->op),
                 (unsigned long long)rep->req_id, why);
    return KVP_ERR_PROTOCOL;
}

/* LIST body received: every entry must name a session (sid, codec, where bits in range). */
static kvp_status_t list_from_pb(const Kvp__ListRep *lr, kvp_wire_rep_t *rep)
{
    size_t n = lr->n_sessions;

    if (n > KVP_WIRE_MAX_LIST) {
        return rep_bad(rep, "too many sessions");
    }
    rep->sessions = kvp_calloc(n ? n : 1, sizeof(*rep->sessions), "wire list");
    if (rep->sessions == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        const Kvp__SessionInfo *in = lr->sessions[i];
        kvp_wire_session_t     *e  = &rep->sessions[i];

        if (!sid_ok(in->sid) || in->codec >= KVP_CODEC_MAX || in->where > 3u ||
            in->layers > KVP_WIRE_MAX_LAYERS) {
            return rep_bad(rep, "bad session entry");
        }
        e->ns = in->ns;
        strcpy(e->sid, in->sid);
        e->layers      = in->layers;
        e->page_tokens = in->page_tokens;
        e->n_chunks    = in->n_chunks;
        e->tail_tokens = in->tail_tokens;
        e->codec       = in->codec;
        e->heads       = in->heads;
        e->head_dim    = in->head_dim;
        e->where       = in->where;
        e->bytes       = in->bytes;
        e->version     = in->has_version ? in->version : 0;
        e->deleted     = in->has_deleted && in->deleted;
        e->damaged     = in->has_damaged && in->damaged;
    }
    rep->n_sessions = (uint32_t)n;
    rep->more       = lr->more != 0;
    return KVP_OK;
}

static int status_known(int32_t s)
{
    return s <= 0 && strcmp(kvp_status_name((kvp_status_t)s), "UNKNOWN") != 0;
}

/* Which body case an OK reply to op must carry. */
static Kvp__Reply__BodyCase rep_body_for(kvp_wire_op_t op)
{
    switch (op) {
    case KVP_WIRE_OP_PUT_PAGES:   return KVP__REPLY__BODY_PUT_PAGES;
    case KVP_WIRE_OP_GET_SESSION: return KVP__REPLY__BODY_GET_SESSION;
    case KVP_WIRE_OP_GET_PAGES:   return KVP__REPLY__BODY_GET_PAGES;
    case KVP_WIRE_OP_LOOKUP:      return KVP__REPLY__BODY_LOOKUP;
    case KVP_WIRE_OP_STAT:        return KVP__REPLY__BODY_STAT;
    case KVP_WIRE_OP_LIST:        return KVP__REPLY__BODY_LIST;
    case KVP_WIRE_OP_APPEND:      return KVP__REPLY__BODY_APPEND;
    case KVP_WIRE_OP_SCRUB:       return KVP__REPLY__BODY_SCRUB;
    default:                      return KVP__REPLY__BODY__NOT_SET;
    }
}

static kvp_status_t rep_from_pb(const Kvp__Reply *r, uint64_t data_len, kvp_wire_rep_t *rep)
{
    rep->req_id = r->req_id;
    if (r->version != KVP_WIRE_VERSION) {
        return rep_bad(rep, "unsupported wire version");
    }
    if (r->op >= KVP_WIRE_OP_MAX) {
        return rep_bad(rep, "unknown op");
    }
    rep->op = (kvp_wire_op_t)r->op;
    if (!status_known(r->status)) {
        return rep_bad(rep, "unknown status code");
    }
    if (rep->op == KVP_WIRE_OP_NONE && r->status == KVP_OK) {
        return rep_bad(rep, "success reply without an op"); /* op NONE: answer to garbage */
    }
    rep->status = (kvp_status_t)r->status;
    if (r->message != NULL) {
        strncpy(rep->message, r->message, sizeof(rep->message) - 1);
    }
    if (rep->status != KVP_OK) {
        if (r->body_case != KVP__REPLY__BODY__NOT_SET || data_len != 0) {
            return rep_bad(rep, "error reply with a body or data");
        }
        rep->version = r->has_deleted_version ? r->deleted_version : 0;
        return KVP_OK;
    }
    if (r->body_case != rep_body_for(rep->op)) {
        return rep_bad(rep, "body does not match op");
    }
    switch (r->body_case) {
    case KVP__REPLY__BODY_PUT_PAGES:
        rep->accepted  = r->put_pages->accepted;
        rep->first_bad = r->put_pages->first_bad;
        return (data_len == 0) ? KVP_OK : rep_bad(rep, "unexpected data");
    case KVP__REPLY__BODY_GET_SESSION:
        if (r->get_session->record_len == 0 || r->get_session->record_len > data_len ||
            !page_lens_ok(r->get_session->page_len, r->get_session->n_page_len, 0,
                          data_len - r->get_session->record_len)) {
            return rep_bad(rep, "record and page lengths do not match the data");
        }
        rep->record_len = r->get_session->record_len;
        rep->version    = r->get_session->has_version ? r->get_session->version : 0;
        rep->disk_pages = r->get_session->has_disk_pages ? r->get_session->disk_pages : 0;
        rep->disk_bytes = r->get_session->has_disk_bytes ? r->get_session->disk_bytes : 0;
        rep->n_pages    = (uint32_t)r->get_session->n_page_len;
        return lens_copy(r->get_session->page_len, rep->n_pages, &rep->page_lens);
    case KVP__REPLY__BODY_GET_PAGES:
        if (!page_lens_ok(r->get_pages->page_len, r->get_pages->n_page_len, 1, data_len)) {
            return rep_bad(rep, "page lengths do not match the data");
        }
        rep->n_pages = (uint32_t)r->get_pages->n_page_len;
        return lens_copy(r->get_pages->page_len, rep->n_pages, &rep->page_lens);
    case KVP__REPLY__BODY_APPEND:
        rep->sealed = r->append->sealed;
        return (data_len == 0) ? KVP_OK : rep_bad(rep, "unexpected data");
    case KVP__REPLY__BODY_SCRUB:
        rep->scrub.bytes         = r->scrub->bytes;
        rep->scrub.bad_pages     = r->scrub->bad_pages;
        rep->scrub.index_rebuilt = r->scrub->index_rebuilt ? 1u : 0u;
        rep->scrub.elapsed_ms    = r->scrub->elapsed_ms;
        return (data_len == 0) ? KVP_OK : rep_bad(rep, "unexpected data");
    case KVP__REPLY__BODY_LOOKUP:
        rep->hit_chunks = r->lookup->hit_chunks;
        return (data_len == 0) ? KVP_OK : rep_bad(rep, "unexpected data");
    case KVP__REPLY__BODY_STAT:
        rep->stat.dram_bytes       = r->stat->dram_bytes;
        rep->stat.dram_pages       = r->stat->dram_pages;
        rep->stat.dram_budget      = r->stat->dram_budget;
        rep->stat.sessions         = r->stat->sessions;
        rep->stat.sessions_on_disk = r->stat->sessions_on_disk;
        rep->stat.spills           = r->stat->spills;
        rep->stat.restores         = r->stat->restores;
        rep->stat.crc_failures     = r->stat->crc_failures;
        rep->stat.disk_errors      = r->stat->disk_errors;
        rep->stat.uptime_ms        = r->stat->uptime_ms;
        rep->stat.requests         = r->stat->requests;
        rep->stat.bad_requests     = r->stat->bad_requests;
        rep->stat.disk_bytes       = r->stat->has_disk_bytes ? r->stat->disk_bytes : 0;
        rep->stat.disk_live_bytes  = r->stat->has_disk_live_bytes ? r->stat->disk_live_bytes : 0;
        rep->stat.index_rebuilds   = r->stat->has_index_rebuilds ? r->stat->index_rebuilds : 0;
        rep->stat.wal_dropped_bytes =
            r->stat->has_wal_dropped_bytes ? r->stat->wal_dropped_bytes : 0;
        rep->stat.disk_free_bytes = r->stat->has_disk_free_bytes ? r->stat->disk_free_bytes : 0;
        rep->stat.disk_full_refusals =
            r->stat->has_disk_full_refusals ? r->stat->disk_full_refusals : 0;
        rep->stat.connections = r->stat->has_connections ? r->stat->connections : 0;
        rep->stat.connections_max = r->stat->has_connections_max ? r->stat->connections_max : 0;
        rep->stat.connections_rejected =
            r->stat->has_connections_rejected ? r->stat->connections_rejected : 0;
        return (data_len == 0) ? KVP_OK : rep_bad(rep, "unexpected data");
    case KVP__REPLY__BODY_LIST:
        return (data_len == 0) ? list_from_pb(r->list, rep) : rep_bad(rep, "unexpected data");
    default:
        return (data_len == 0) ? KVP_OK : rep_bad(rep, "unexpected data");
    }
}

kvp_status_t kvp_wire_rep_unpack(const void *buf, size_t len, uint64_t data_len,
                                 kvp_wire_rep_t *rep)
{
    Kvp__Reply  *r;
    kvp_status_t status;

    memset(rep, 0, sizeof(*rep));
    r = kvp__reply__unpack(&pb_allocator, len, buf);
    if (r == NULL) {
        KVP_LOG_WARN(MOD, "undecodable reply header of %zu bytes", len);
        return KVP_ERR_PROTOCOL;
    }
    status = rep_from_pb(r, data_len, rep);
    kvp__reply__free_unpacked(r, &pb_allocator);
    return status;
}

void kvp_wire_rep_clear(kvp_wire_rep_t *rep)
{
    if (rep != NULL) {
        kvp_free(rep->page_lens);
        kvp_free(rep->sessions);
        memset(rep, 0, sizeof(*rep));
    }
}

/* ---- NCCL link messages ---- */

static const char *const link_kind_names[] = {"none",  "hello", "accept", "batch",
                                               "ready", "ack",   "close"};

const char *kvp_wire_link_kind_name(kvp_wire_link_kind_t kind)
{
    return ((unsigned)kind <= KVP_WIRE_LINK_CLOSE) ? link_kind_names[kind] : "unknown";
}

static void link_dev_to_pb(const kvp_wire_link_dev_t *d, Kvp__LinkDevice *pb)
{
    pb->index = d->index;
    pb->name  = d->name[0] != '\0' ? (char *)d->name : NULL;
    pb->has_cc = d->cc != 0;
    pb->cc     = d->cc;
    pb->why    = d->why[0] != '\0' ? (char *)d->why : NULL;
}

/* Copy a peer's string into cap bytes (truncated: it is only ever logged). */
static void str_in(char *dst, size_t cap, const char *src)
{
    if (src != NULL) {
        strncpy(dst, src, cap - 1);
        dst[cap - 1] = '\0';
    }
}

static int link_dev_from_pb(const Kvp__LinkDevice *pb, kvp_wire_link_dev_t *d)
{
    if (pb->index < -1) {
        return 0;
    }
    d->index = pb->index;
    d->cc    = pb->has_cc ? pb->cc : 0;
    str_in(d->name, sizeof(d->name), pb->name);
    str_in(d->why, sizeof(d->why), pb->why);
    return 1;
}

/* BATCH lengths: 1..KVP_WIRE_MAX_PAGES possible pages, at most KVP_WIRE_LINK_MAX_BATCH_BYTES. */
static int link_lens_ok(const uint32_t *lens, size_t n)
{
    uint64_t sum = 0;

    if (n == 0 || n > KVP_WIRE_MAX_PAGES || lens == NULL) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (lens[i] < KVP_PAGE_HDR_BYTES || lens[i] > KVP_PAGE_HDR_BYTES + KVP_PAGE_MAX_PAYLOAD) {
            return 0;
        }
        sum += lens[i];
    }
    return sum <= KVP_WIRE_LINK_MAX_BATCH_BYTES;
}

kvp_status_t kvp_wire_link_pack(const kvp_wire_link_t *m, uint8_t **buf_p, size_t *len_p)
{
    Kvp__LinkMsg     r  = KVP__LINK_MSG__INIT;
    Kvp__LinkHello   he = KVP__LINK_HELLO__INIT;
    Kvp__LinkAccept  ac = KVP__LINK_ACCEPT__INIT;
    Kvp__LinkBatch   ba = KVP__LINK_BATCH__INIT;
    Kvp__LinkReady   rd = KVP__LINK_READY__INIT;
    Kvp__LinkAck     ak = KVP__LINK_ACK__INIT;
    Kvp__LinkClose   cl = KVP__LINK_CLOSE__INIT;
    Kvp__LinkDevice  dv = KVP__LINK_DEVICE__INIT;
    int32_t         *st = NULL;
    kvp_status_t     status;

    r.version = m->version != 0 ? m->version : KVP_WIRE_LINK_VERSION;
    switch (m->kind) {
    case KVP_WIRE_LINK_HELLO:
        link_dev_to_pb(&m->device, &dv);
        he.nccl_version   = m->nccl_version;
        he.unique_id.len  = KVP_WIRE_NCCL_ID_BYTES;
        he.unique_id.data = (uint8_t *)m->unique_id;
        he.device         = &dv;
        r.body_case       = KVP__LINK_MSG__BODY_HELLO;
        r.hello           = &he;
        break;
    case KVP_WIRE_LINK_ACCEPT:
        link_dev_to_pb(&m->device, &dv);
        ac.status       = (int32_t)m->status;
        ac.message      = m->message[0] != '\0' ? (char *)m->message : NULL;
        ac.nccl_version = m->nccl_version;
        ac.device       = &dv;
        r.body_case     = KVP__LINK_MSG__BODY_ACCEPT;
        r.accept        = &ac;
        break;
    case KVP_WIRE_LINK_BATCH:
        if (!link_lens_ok(m->page_lens, m->n_pages)) {
            KVP_LOG_ERROR(MOD, "cannot pack a link batch of %u pages (1..%u possible pages, at "
                          "most %llu bytes)", m->n_pages, KVP_WIRE_MAX_PAGES,
                          (unsigned long long)KVP_WIRE_LINK_MAX_BATCH_BYTES);
            return KVP_ERR_INVALID;
        }
        ba.batch_id      = m->batch_id;
        ba.has_budget_ms = m->budget_ms != 0;
        ba.budget_ms     = m->budget_ms;
        ba.n_page_len = m->n_pages;
        ba.page_len   = m->page_lens;
        r.body_case   = KVP__LINK_MSG__BODY_BATCH;
        r.batch       = &ba;
        break;
    case KVP_WIRE_LINK_READY:
        rd.batch_id = m->batch_id;
        rd.status   = (int32_t)m->status;
        rd.message  = m->message[0] != '\0' ? (char *)m->message : NULL;
        r.body_case = KVP__LINK_MSG__BODY_READY;
        r.ready     = &rd;
        break;
    case KVP_WIRE_LINK_ACK:
        if (m->n_pages > KVP_WIRE_MAX_PAGES || (m->n_pages > 0 && m->page_status == NULL)) {
            KVP_LOG_ERROR(MOD, "cannot pack a link ack of %u page statuses", m->n_pages);
            return KVP_ERR_INVALID;
        }
        st = kvp_malloc((m->n_pages ? m->n_pages : 1) * sizeof(*st), "wire link ack");
        if (st == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        for (uint32_t i = 0; i < m->n_pages; i++) {
            st[i] = (int32_t)m->page_status[i];
        }
        ak.batch_id      = m->batch_id;
        ak.status        = (int32_t)m->status;
        ak.message       = m->message[0] != '\0' ? (char *)m->message : NULL;
        ak.n_page_status = m->n_pages;
        ak.page_status   = st;
        r.body_case      = KVP__LINK_MSG__BODY_ACK;
        r.ack            = &ak;
        break;
    case KVP_WIRE_LINK_CLOSE:
        cl.status   = (int32_t)m->status;
        cl.message  = m->message[0] != '\0' ? (char *)m->message : NULL;
        r.body_case = KVP__LINK_MSG__BODY_CLOSE;
        r.close     = &cl;
        break;
    default:
        KVP_LOG_ERROR(MOD, "cannot pack link message kind %d", (int)m->kind);
        return KVP_ERR_INVALID;
    }
    status = pack_msg(&r.base, buf_p, len_p);
    kvp_free(st);
    return status;
}

static kvp_status_t link_bad(const kvp_wire_link_t *m, const char *why)
{
    KVP_LOG_WARN(MOD, "malformed link %s message: %s", kvp_wire_link_kind_name(m->kind), why);
    return KVP_ERR_PROTOCOL;
}

static kvp_status_t link_from_pb(const Kvp__LinkMsg *r, uint64_t data_len, kvp_wire_link_t *m)
{
    m->version = r->version;
    switch (r->body_case) {
    case KVP__LINK_MSG__BODY_HELLO:  m->kind = KVP_WIRE_LINK_HELLO; break;
    case KVP__LINK_MSG__BODY_ACCEPT: m->kind = KVP_WIRE_LINK_ACCEPT; break;
    case KVP__LINK_MSG__BODY_BATCH:  m->kind = KVP_WIRE_LINK_BATCH; break;
    case KVP__LINK_MSG__BODY_READY:  m->kind = KVP_WIRE_LINK_READY; break;
    case KVP__LINK_MSG__BODY_ACK:    m->kind = KVP_WIRE_LINK_ACK; break;
    case KVP__LINK_MSG__BODY_CLOSE:  m->kind = KVP_WIRE_LINK_CLOSE; break;
    default:                         break;
    }
    if (r->version != KVP_WIRE_LINK_VERSION) {
        KVP_LOG_WARN(MOD, "link %s message of link version %u, this side speaks %u",
                     kvp_wire_link_kind_name(m->kind), r->version, KVP_WIRE_LINK_VERSION);
        return KVP_ERR_UNSUPPORTED;
    }
    if (m->kind == KVP_WIRE_LINK_NONE) {
        return link_bad(m, "no body");
    }
    if (data_len != 0) {
        return link_bad(m, "unexpected data");
    }
    switch (m->kind) {
    case KVP_WIRE_LINK_HELLO:
        if (r->hello->unique_id.len != KVP_WIRE_NCCL_ID_BYTES || r->hello->nccl_version == 0 ||
            !link_dev_from_pb(r->hello->device, &m->device)) {
            return link_bad(m, "bad unique id length, nccl version or device");
        }
        m->nccl_version = r->hello->nccl_version;
        memcpy(m->unique_id, r->hello->unique_id.data, KVP_WIRE_NCCL_ID_BYTES);
        return KVP_OK;
    case KVP_WIRE_LINK_ACCEPT:
        if (!status_known(r->accept->status) || r->accept->nccl_version == 0 ||
            !link_dev_from_pb(r->accept->device, &m->device)) {
            return link_bad(m, "bad status, nccl version or device");
        }
        m->status       = (kvp_status_t)r->accept->status;
        m->nccl_version = r->accept->nccl_version;
        str_in(m->message, sizeof(m->message), r->accept->message);
        return KVP_OK;
    case KVP_WIRE_LINK_BATCH:
        if (!link_lens_ok(r->batch->page_len, r->batch->n_page_len)) {
            return link_bad(m, "page count or lengths out of range");
        }
        m->batch_id  = r->batch->batch_id;
        m->budget_ms = r->batch->has_budget_ms ? r->batch->budget_ms : 0;
        m->n_pages  = (uint32_t)r->batch->n_page_len;
        return lens_copy(r->batch->page_len, m->n_pages, &m->page_lens);
    case KVP_WIRE_LINK_READY:
        if (!status_known(r->ready->status)) {
            return link_bad(m, "unknown status");
        }
        m->batch_id = r->ready->batch_id;
        m->status   = (kvp_status_t)r->ready->status;
        str_in(m->message, sizeof(m->message), r->ready->message);
        return KVP_OK;
    case KVP_WIRE_LINK_CLOSE:
        if (!status_known(r->close->status)) {
            return link_bad(m, "unknown status");
        }
        m->status = (kvp_status_t)r->close->status;
        str_in(m->message, sizeof(m->message), r->close->message);
        return KVP_OK;
    default: /* ACK */
        if (!status_known(r->ack->status) || r->ack->n_page_status > KVP_WIRE_MAX_PAGES) {
            return link_bad(m, "unknown status or too many page statuses");
        }
        for (size_t i = 0; i < r->ack->n_page_status; i++) {
            if (!status_known(r->ack->page_status[i])) {
                return link_bad(m, "unknown page status");
            }
        }
        m->batch_id = r->ack->batch_id;
        m->status   = (kvp_status_t)r->ack->status;
        str_in(m->message, sizeof(m->message), r->ack->message);
        m->page_status = kvp_malloc((r->ack->n_page_status ? r->ack->n_page_status : 1) *
                                        sizeof(*m->page_status), "wire link ack");
        if (m->page_status == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        m->n_pages = (uint32_t)r->ack->n_page_status;
        for (uint32_t i = 0; i < m->n_pages; i++) {
            m->page_status[i] = (kvp_status_t)r->ack->page_status[i];
        }
        return KVP_OK;
    }
}

kvp_status_t kvp_wire_link_unpack(const void *buf, size_t len, uint64_t data_len,
                                  kvp_wire_link_t *m)
{
    Kvp__LinkMsg *r;
    kvp_status_t  status;

    memset(m, 0, sizeof(*m));
    r = kvp__link_msg__unpack(&pb_allocator, len, buf);
    if (r == NULL) {
        KVP_LOG_WARN(MOD, "undecodable link message of %zu bytes", len);
        return KVP_ERR_PROTOCOL;
    }
    status = link_from_pb(r, data_len, m);
    kvp__link_msg__free_unpacked(r, &pb_allocator);
    return status;
}

void kvp_wire_link_clear(kvp_wire_link_t *m)
{
    if (m != NULL) {
        kvp_free(m->page_lens);
        kvp_free(m->page_status);
        memset(m, 0, sizeof(*m));
    }
}
