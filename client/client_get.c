/* client_get.c - fetching a session from a node (kvp_client_get_session and its _cb / _expect
 * forms): the record and its first pages in one GET_SESSION reply, the rest by pipelined
 * GET_PAGES, each reply copied once into one block its pages point into. Every page is verified
 * (CRC, key, layer, one codec and geometry matching the record and, with _expect, the caller)
 * before it is handed out. A session that fits one reply (batch_bytes / max_inflight) is one
 * round trip.
 * Main flow: kvp_client_get_session -> GET_SESSION -> verify_tail -> take_inline -> get_pages
 * for the rest (get_issue / get_take, up to max_inflight in flight) -> take_pages -> check_shape
 * per page. */
#include "client_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <stdio.h>
#include <string.h>

#define MOD "client"

#define GET_ROT   (KVP_PAGE_F_K_ROTATED | KVP_PAGE_F_V_ROTATED | KVP_PAGE_F_V_PREROT)
#define GET_ALIGN 64u /* pages start at this alignment inside a reply block */

/* A fetched session: the public struct plus the blocks (one per reply) its pages point into. */
typedef struct {
    kvp_session_pages_t pub;
    uint8_t           **blocks;
    uint32_t            nblocks;
    size_t              cap_blocks;
} sp_impl_t;

/* One GET_PAGES in flight: items [first, end) (item = chunk * layers + layer). */
typedef struct {
    kvp_client_call_t *call;
    uint32_t           first, end;
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
    uint32_t                 sink_heads, sink_dim; /* of the first fp16 sink page; 0 when none */
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

/* A tail blob is n_tail valid fp16 pages back to back, page i of layer i holding the record's
 * tail_tokens, of one geometry, with the record's P (and the caller's expectation, if any). */
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
        memset(&info, 0, sizeof(info));
        s = kvp_page_parse(p, len, &info);
        if (s == KVP_OK && (info.layer != i || info.valid != d->tail_tokens)) {
            s = KVP_ERR_BAD_PAGE; /* as the store checks it at put: a reader sizes rows by it */
        }
        if (s != KVP_OK) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u (layer %u, %u tokens; the record says %u): "
                          "%s", g->sid, i, info.layer, info.valid, d->tail_tokens,
                          kvp_status_str(s));
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
            (g->tail_heads != 0 && (info->heads != g->tail_heads || info->head_dim != g->tail_dim)) ||
            (g->sink_heads != 0 && (info->heads != g->sink_heads || info->head_dim != g->sink_dim)) ||
            (g->have_ref && (info->heads != g->ref.heads || info->head_dim != g->ref.head_dim))) {
            why = "is an fp16 sink page of another geometry";
        } else if (g->sink_end > g->codec_min) {
            why = "is an fp16 sink page after a codec chunk";
        }
        if (why != NULL) {
            KVP_LOG_ERROR(MOD, "session %s chunk %u layer %u %s (%u x %u, P %u; record P %u)", g->sid,
                          chunk, info->layer, why, info->heads, info->head_dim, info->capacity, P);
            return KVP_ERR_WRONG_CODEC;
        }
        if (g->sink_heads == 0) {
            g->sink_heads = info->heads;
            g->sink_dim   = info->head_dim;
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
    } else if (g->sink_heads != 0 &&
               (info->heads != g->sink_heads || info->head_dim != g->sink_dim)) {
        why = "has another geometry than the fp16 sink pages";
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
    return kvp_client_call_start(g->c, &req, NULL, 0, &r->call);
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
    {
        uint8_t **b = kvp_array_room(sp->blocks, &sp->cap_blocks, sp->nblocks, sizeof(*b), 16,
                                     "session blocks");

        if (b == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        sp->blocks = b;
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
        uint64_t t0 = kvp_time_ns();

        g->cb(g->cb_arg, first, took, (const void *const *)&sp->pub.pages[first],
              &sp->pub.page_lens[first]);
        kvp_client_calls_defer(g->c, kvp_time_ns() - t0); /* the calls' deadlines only */
    }
    return s;
}

/* Wait for r's reply and take its pages (at most r->end - r->first). */
static kvp_status_t get_take(get_ctx_t *g, get_req_t *r, uint32_t *took_p)
{
    uint32_t           layers = g->sp->pub.desc.layers, k;
    kvp_status_t       s      = kvp_client_call_wait(g->c, r->call);
    kvp_client_call_t *call   = r->call;
    size_t             dl;

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
    kvp_client_call_release(call);
    return s;
}

/* Push [first, end) on get_pages' stack of ranges to ask again (2 * MAX_INFLIGHT entries: each
 * request in flight leaves at most its cut and its short reply's rest); a full one is refused,
 * not written past, should replies ever come shorter than that bound allows. */
static kvp_status_t rem_push(uint32_t *rem_first, uint32_t *rem_end, uint32_t *nrem,
                             uint32_t first, uint32_t end)
{
    if (*nrem >= 2 * MAX_INFLIGHT) {
        KVP_LOG_ERROR(MOD, "get: more than %u page ranges left to ask again (replies shorter "
                      "than any node sends): refused", 2 * MAX_INFLIGHT);
        return KVP_ERR_PROTOCOL;
    }
    rem_first[*nrem] = first;
    rem_end[(*nrem)++] = end;
    return KVP_OK;
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
                s = rem_push(rem_first, rem_end, &nrem, r->end, e);
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
                s = rem_push(rem_first, rem_end, &nrem, r->first + took, r->end);
            }
        }
    }
    while (count > 0) { /* after an error: let the calls in flight finish, drop their replies */
        kvp_client_call_wait(c, q[head].call);
        kvp_client_call_release(q[head].call);
        head = (head + 1) % MAX_INFLIGHT;
        count--;
    }
    return s;
}

/* Take the pages that came with the record (GET_SESSION reply data after it). A reply with more
 * pages than the record names is a protocol error. */
static kvp_status_t take_inline(get_ctx_t *g, const kvp_client_call_t *call, const uint8_t *data)
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
                                void *cb_arg, uint64_t newer_than, uint64_t *deleted_p,
                                kvp_session_pages_t **out_p)
{
    kvp_wire_req_t     req;
    get_ctx_t          g;
    sp_impl_t         *sp;
    kvp_client_call_t *call;
    const uint8_t     *data;
    size_t             dl;
    uint64_t           rx0 = client->rx_bytes;
    uint64_t           n_pages;
    kvp_status_t       s   = kvp_client_sid_check(sid);

    kvp_client_call_begin(client);
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
    g.req_bytes = g.req_bytes > 0 ? g.req_bytes : 1; /* 0 is malformed; the node sends one page */
    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_GET_SESSION;
    req.ns        = ns;
    req.max_bytes = (uint32_t)g.req_bytes; /* the first pages come with the record */
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    s = kvp_client_call_simple(client, &req, &call);
    if (deleted_p != NULL) {
        *deleted_p = s == KVP_ERR_NOT_FOUND && call != NULL ? call->rep.version : 0;
    }
    if (s == KVP_OK && newer_than != 0 && call->rep.version <= newer_than) {
        KVP_LOG_INFO(MOD, "session %s: this node's copy (version %llu) is not newer than a delete "
                     "another node holds (%llu): deleted", sid,
                     (unsigned long long)call->rep.version, (unsigned long long)newer_than);
        s = KVP_ERR_NOT_FOUND; /* before any page reaches cb */
    }
    if (s != KVP_OK) {
        kvp_client_call_release(call);
        return s;
    }
    sp = kvp_calloc(1, sizeof(*sp), "session pages");
    if (sp == NULL) {
        kvp_client_call_release(call);
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
        kvp_client_call_release(call);
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
        KVP_LOG_ERROR(MOD, "session %s names %u chunks x %u layers: over %u pages", sid,
                      sp->pub.desc.n_chunks, sp->pub.desc.layers, UINT32_MAX / 2);
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
    kvp_client_call_release(call);
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
    return get_session(client, ns, sid, NULL, NULL, NULL, 0, NULL, out_p);
}

kvp_status_t kvp_client_get_session_cb(kvp_client_h client, uint64_t ns, const char *sid,
                                       const kvp_page_params_t *expect, kvp_client_pages_cb_t cb,
                                       void *cb_arg, kvp_session_pages_t **out_p)
{
    return kvp_client_get_session_newer(client, ns, sid, expect, cb, cb_arg, 0, NULL, out_p);
}

kvp_status_t kvp_client_get_session_newer(kvp_client_h client, uint64_t ns, const char *sid,
                                          const kvp_page_params_t *expect,
                                          kvp_client_pages_cb_t cb, void *cb_arg,
                                          uint64_t newer_than, uint64_t *deleted_p,
                                          kvp_session_pages_t **out_p)
{
    kvp_client_call_begin(client);

    if (expect != NULL && kvp_codec_check(expect) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "get of session %s: the expected codec params are invalid",
                      sid ? sid : "(null)");
        return KVP_ERR_INVALID;
    }
    return get_session(client, ns, sid, expect, cb, cb_arg, newer_than, deleted_p, out_p);
}

kvp_status_t kvp_client_get_session_expect(kvp_client_h client, uint64_t ns, const char *sid,
                                           const kvp_page_params_t *expect,
                                           kvp_session_pages_t **out_p)
{
    kvp_client_call_begin(client);

    if (expect == NULL) {
        KVP_LOG_ERROR(MOD, "get of session %s: no expected codec params", sid ? sid : "(null)");
        return KVP_ERR_INVALID;
    }
    return get_session(client, ns, sid, expect, NULL, NULL, 0, NULL, out_p);
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
