/* append.c - tail append and sealing (kvp_store_session_append): decode the session's fp16 tail,
 * add the new tokens, encode every full P-token chunk with the namespace's codec into pages under
 * chained chunk keys, re-encode the rest as the new fp16 tail, and put the new record. Built on
 * the public store calls (session_get/page_put/session_put), so durability and eviction are theirs.
 * Main flow: check -> current record -> per layer: tail + new tokens -> sealed pages + new tail
 * page -> kvp_store_session_put_expect (at the session's version: an append does not change it,
 * unless it brings one: a replicated append, kvp_cluster_append, checks the chunk count and the
 * version it was based on and moves every copy to its writer's version, so repair can tell a copy
 * that missed it; and only if the record is still the one read, so a put or delete landing
 * while the append encodes is never overwritten by a record computed from the older one). */
#include "store_int.h"
#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"

#include <string.h>

#define MOD "store"

typedef struct {
    uint16_t *k, *v;      /* [total][H][D] fp16 of one layer */
    uint8_t  *page;       /* encode output */
    size_t    page_cap;
    uint8_t  *tail;       /* new tail pages, back to back */
    size_t    tail_len, tail_cap;
} work_t;

static kvp_status_t append_check(const char *sid, const kvp_store_append_t *a)
{
    kvp_page_params_t pp = {a->codec, a->heads, a->head_dim, a->page_tokens, 0, 0, {0, 0}, 0, 0};
    size_t            n;

    if (a->layers == 0 || a->layers > KVP_LAYERS_MAX || a->page_tokens == 0 ||
        a->page_tokens > KVP_PAGE_MAX_TOKENS || a->ntok == 0 || a->k == NULL || a->v == NULL ||
        a->ids == NULL || (a->dtype != KVP_DTYPE_F32 && a->dtype != KVP_DTYPE_F16)) {
        KVP_LOG_ERROR(MOD, "append to session %s: bad arguments (layers %u P %u ntok %u)", sid,
                      a->layers, a->page_tokens, a->ntok);
        return KVP_ERR_INVALID;
    }
    if (kvp_codec_check(&pp) != KVP_OK) {
        return KVP_ERR_INVALID; /* logged by the codec layer */
    }
    pp.codec = KVP_CODEC_FP16;
    if (kvp_codec_check(&pp) != KVP_OK) {
        return KVP_ERR_INVALID;
    }
    /* all of it before any page is sealed: a bad value met in a later layer would otherwise
     * leave the earlier layers' chunks stored with no record naming them */
    n = (size_t)a->layers * a->ntok * a->heads * a->head_dim;
    if (kvp_values_check(a->dtype, a->k, n) != KVP_OK ||
        kvp_values_check(a->dtype, a->v, n) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "append to session %s: %s", sid,
                      kvp_status_str(KVP_ERR_BAD_INPUT_DATA));
        return KVP_ERR_BAD_INPUT_DATA;
    }
    return KVP_OK;
}

/* Fill w->k/v rows [0, told) from the layer's tail page and [told, told + ntok) from the input. */
static kvp_status_t layer_gather(const char *sid, const kvp_session_desc_t *cur, size_t *tail_off,
                                 const kvp_store_append_t *a, uint32_t l, work_t *w)
{
    size_t row = (size_t)a->heads * a->head_dim, n = (size_t)a->ntok * row;

    if (cur->tail_tokens > 0) {
        const uint8_t  *p = cur->tail + *tail_off;
        kvp_page_info_t info;
        size_t          len = kvp_page_len_at(p, cur->tail_len - *tail_off); /* back to back */
        kvp_status_t    status = len > 0 ? kvp_page_parse(p, len, &info) : KVP_ERR_BAD_PAGE;

        if (status != KVP_OK) {
            KVP_LOG_ERROR(MOD, "session %s tail page %u is unreadable: %s", sid, l,
                          kvp_status_str(status));
            return status;
        }
        len = KVP_PAGE_HDR_BYTES + info.payload_len;
        if (info.heads != a->heads || info.head_dim != a->head_dim || info.layer != l ||
            info.valid != cur->tail_tokens) {
            KVP_LOG_ERROR(MOD, "append to session %s: its tail is %u x %u (layer %u, %u tokens), "
                          "the append says %u x %u", sid, info.heads, info.head_dim, info.layer,
                          info.valid, a->heads, a->head_dim);
            return KVP_ERR_INVALID;
        }
        status = kvp_page_decode(p, len, KVP_DTYPE_F16, KVP_FRAME_ORIGINAL, w->k, w->v, NULL);
        if (status != KVP_OK) {
            return status;
        }
        *tail_off += len;
    }
    if (a->dtype == KVP_DTYPE_F16) {
        memcpy(w->k + (size_t)cur->tail_tokens * row, (const uint16_t *)a->k + l * n, n * 2);
        memcpy(w->v + (size_t)cur->tail_tokens * row, (const uint16_t *)a->v + l * n, n * 2);
    } else {
        const float *k = (const float *)a->k + l * n, *v = (const float *)a->v + l * n;

        for (size_t i = 0; i < n; i++) {
            w->k[(size_t)cur->tail_tokens * row + i] = kvp_f32_to_f16(k[i]);
            w->v[(size_t)cur->tail_tokens * row + i] = kvp_f32_to_f16(v[i]);
        }
    }
    return KVP_OK;
}

kvp_status_t kvp_store_session_append(kvp_store_h st, uint64_t ns, const char *sid,
                                      const kvp_store_append_t *a, uint32_t *sealed_p)
{
    kvp_session_desc_t cur, nd;
    kvp_status_t       status;
    work_t             w = {0};
    uint32_t           total, nseal, rem, P;
    size_t             row, tail_off = 0;
    kvp_key128_t       tail_key = {0, 0};
    kvp_store_get_info_t got     = {0, 0, 0}; /* got.version: the session's */
    uint64_t             version, wall;          /* the new record's; the node's clock */
    bool                 exists  = true;

    if (st == NULL || sid == NULL || a == NULL) {
        KVP_LOG_ERROR(MOD, "session append with a NULL argument");
        return KVP_ERR_INVALID;
    }
    status = append_check(sid, a);
    if (status != KVP_OK) {
        return status;
    }
    P      = a->page_tokens;
    row    = (size_t)a->heads * a->head_dim;
    status = kvp_store_session_get_info(st, ns, sid, &cur, &got);
    if (status == KVP_ERR_NOT_FOUND &&
        (a->field_mask & (KVP_STORE_APPEND_CHUNKS | KVP_STORE_APPEND_BASE))) {
        return status; /* a replicated append goes only to copies that exist */
    }
    if (status == KVP_ERR_NOT_FOUND) {
        memset(&cur, 0, sizeof(cur));
        cur.layers      = a->layers;
        cur.page_tokens = P;
        status          = KVP_OK;
        exists          = false;
    } else if (status != KVP_OK) {
        return status;
    } else if (cur.layers != a->layers || cur.page_tokens != P) {
        KVP_LOG_ERROR(MOD, "append to session %s: it has %u layers, P %u; the append says %u, %u",
                      sid, cur.layers, cur.page_tokens, a->layers, P);
        kvp_session_desc_clear(&cur);
        return KVP_ERR_INVALID;
    }
    if ((a->field_mask & KVP_STORE_APPEND_FIRST_POS) &&
        (uint64_t)cur.n_chunks * P + cur.tail_tokens != a->first_pos) {
        KVP_LOG_ERROR(MOD, "append to session %s at token %llu: it holds %llu tokens (%s)", sid,
                      (unsigned long long)a->first_pos,
                      (unsigned long long)cur.n_chunks * P + cur.tail_tokens,
                      !exists ? "it does not exist"
                              : "an append retried after it went through, or another writer's "
                                "came first");
        kvp_session_desc_clear(&cur);
        return exists ? KVP_ERR_INVALID : KVP_ERR_NOT_FOUND;
    }
    if ((a->field_mask & KVP_STORE_APPEND_CHUNKS) && cur.n_chunks != a->chunks) {
        KVP_LOG_ERROR(MOD, "append to session %s: it holds %u chunks, the append expects %u (this "
                      "copy is behind or ahead of the others)", sid, cur.n_chunks, a->chunks);
        kvp_session_desc_clear(&cur);
        return KVP_ERR_INVALID;
    }
    if ((a->field_mask & KVP_STORE_APPEND_BASE) && got.version != a->base) {
        KVP_LOG_ERROR(MOD, "append to session %s on version %llu: this copy is at %llu (it missed "
                      "a write, or another writer's came first)", sid,
                      (unsigned long long)a->base, (unsigned long long)got.version);
        kvp_session_desc_clear(&cur);
        return KVP_ERR_INVALID;
    }
    if ((a->field_mask & KVP_STORE_APPEND_VERSION) && a->version <= got.version) {
        KVP_LOG_ERROR(MOD, "append to session %s at version %llu: it is at %llu already", sid,
                      (unsigned long long)a->version, (unsigned long long)got.version);
        kvp_session_desc_clear(&cur);
        return KVP_ERR_STALE;
    }
    status = kvp_store_ns_check_append(st, ns, sid, a);
    if (status != KVP_OK) {
        kvp_session_desc_clear(&cur);
        return status;
    }
    /* an append without a version stamps the record with the node's clock, as a put without one
     * does (version 0 would lose to any put or delete, and could not follow a tombstone), and
     * above the version it appends to: it is a write, and a copy elsewhere without it must not
     * look the same to repair (it kept the version, and repair dropped the longer copy as a
     * duplicate of the shorter one). Checked now: a tombstone as new refuses the record, and
     * the chunks sealed for it would be left loose. */
    wall    = kvp_store_wall_ns();
    version = (a->field_mask & KVP_STORE_APPEND_VERSION) ? a->version
              : exists && got.version >= wall           ? got.version + 1
                                                        : wall;
    status  = kvp_store_version_check(st, ns, sid, version);
    if (status != KVP_OK) {
        kvp_session_desc_clear(&cur);
        return status;
    }
    total = cur.tail_tokens + a->ntok;
    if (a->n_ids != total || total < a->ntok) {
        KVP_LOG_ERROR(MOD, "append to session %s needs %u token ids (tail %u + new %u), got %u%s",
                      sid, cur.tail_tokens + a->ntok, cur.tail_tokens, a->ntok, a->n_ids,
                      a->n_ids >= a->ntok ? ": the caller's tail is not this copy's (an append "
                                            "retried after it went through, or another "
                                            "writer's came first)"
                                          : "");
        kvp_session_desc_clear(&cur);
        return KVP_ERR_INVALID;
    }
    nseal = total / P;
    rem   = total % P;
    memset(&nd, 0, sizeof(nd));
    nd.layers      = a->layers;
    nd.page_tokens = P;
    nd.n_chunks    = cur.n_chunks + nseal;
    nd.chunk_keys  = kvp_malloc((nd.n_chunks ? nd.n_chunks : 1) * sizeof(kvp_key128_t),
                                "append keys");
    {
        kvp_page_params_t pp = {a->codec, a->heads, a->head_dim, P, 0, 0, {0, 0}, 0, 0};
        kvp_page_params_t pf = {KVP_CODEC_FP16, a->heads, a->head_dim, P, 0, 0, {0, 0}, 0, 0};
        size_t            c1 = kvp_page_max_bytes(&pp), c2 = kvp_page_max_bytes(&pf);

        w.page_cap = c1 > c2 ? c1 : c2;
        w.tail_cap = rem ? (size_t)a->layers * c2 : 0;
    }
    w.k    = kvp_malloc((size_t)total * row * 2, "append k");
    w.v    = kvp_malloc((size_t)total * row * 2, "append v");
    w.page = kvp_malloc(w.page_cap, "append page");
    w.tail = kvp_malloc(w.tail_cap ? w.tail_cap : 1, "append tail");
    if (nd.chunk_keys == NULL || w.k == NULL || w.v == NULL || w.page == NULL || w.tail == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to append %u tokens to session %s", a->ntok, sid);
        status = KVP_ERR_NO_MEMORY;
        goto out;
    }
    if (cur.n_chunks > 0) {
        memcpy(nd.chunk_keys, cur.chunk_keys, cur.n_chunks * sizeof(kvp_key128_t));
    }
    for (uint32_t c = 0; c < nseal; c++) {
        uint32_t i = cur.n_chunks + c;

        nd.chunk_keys[i] = kvp_chunk_key(i ? &nd.chunk_keys[i - 1] : NULL, a->ns_fingerprint,
                                         a->ids + (size_t)c * P, P);
    }
    if (rem > 0) { /* the tail page's key names the partial chunk, as a put of it would */
        tail_key = kvp_chunk_key(nd.n_chunks ? &nd.chunk_keys[nd.n_chunks - 1] : NULL,
                                 a->ns_fingerprint, a->ids + (size_t)nseal * P, rem);
    }
    for (uint32_t l = 0; l < a->layers && status == KVP_OK; l++) {
        status = layer_gather(sid, &cur, &tail_off, a, l, &w);
        for (uint32_t c = 0; c < nseal && status == KVP_OK; c++) {
            uint32_t          i  = cur.n_chunks + c;
            kvp_page_params_t pp = {a->codec, a->heads, a->head_dim, P, l, (uint64_t)i * P,
                                    nd.chunk_keys[i], 0, 0};
            size_t            len;

            status = kvp_page_encode(&pp, KVP_DTYPE_F16, w.k + (size_t)c * P * row,
                                     w.v + (size_t)c * P * row, P, w.page, w.page_cap, &len);
            if (status == KVP_OK) {
                status = kvp_store_page_put(st, ns, w.page, len);
            }
        }
        if (status == KVP_OK && rem > 0) {
            kvp_page_params_t pf = {KVP_CODEC_FP16, a->heads, a->head_dim, P, l,
                                    (uint64_t)nd.n_chunks * P, tail_key, KVP_PAGE_F_TAIL, 0};
            size_t            len;

            status = kvp_page_encode(&pf, KVP_DTYPE_F16, w.k + (size_t)nseal * P * row,
                                     w.v + (size_t)nseal * P * row, rem, w.tail + w.tail_len,
                                     w.tail_cap - w.tail_len, &len);
            w.tail_len += status == KVP_OK ? len : 0;
        }
    }
    if (status == KVP_OK) {
        nd.tail_tokens = rem;
        nd.n_tail      = rem ? a->layers : 0;
        nd.tail_len    = rem ? w.tail_len : 0;
        nd.tail        = rem ? w.tail : NULL;
        /* on what was read: a put, delete or append that landed since is not overwritten */
        kvp_sess_expect_t read = {exists, got.version};

        status = kvp_store_session_put_expect(st, ns, sid, &nd, version, &read);
    }
    if (status != KVP_OK) {
        KVP_LOG_ERROR(MOD, "append of %u tokens to session %s failed: %s", a->ntok, sid,
                      kvp_status_str(status));
    } else if (sealed_p != NULL) {
        *sealed_p = nseal;
    }
out:
    kvp_free(w.k);
    kvp_free(w.v);
    kvp_free(w.page);
    kvp_free(w.tail);
    kvp_free(nd.chunk_keys);
    kvp_session_desc_clear(&cur);
    return status;
}
