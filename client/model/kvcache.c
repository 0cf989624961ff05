/* kvcache.c - the runner's paged KV cache: fp16-rounded rows, sealing full chunks through
 * kvp_page_encode/kvp_page_decode (pseudo-decode) when the cache regions (sink, residual window,
 * batched eviction, V window) allow, chunk keys, page and held-bytes accounting, and the
 * tail-pack / restore pair used to move a session through a node.
 * Main flow: kvp_kvc_put -> kvp_kvc_commit -> kvc_seal (encode, decode into the rows). */
#include "kvcache.h"

#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <string.h>

static kvp_page_params_t page_params(const kvp_kvc_t *c, kvp_codec_id_t codec, uint32_t layer,
                                     uint64_t first_pos)
{
    kvp_page_params_t pp;

    memset(&pp, 0, sizeof(pp));
    pp.codec       = codec;
    pp.heads       = c->p.heads;
    pp.head_dim    = c->p.head_dim;
    pp.page_tokens = c->p.page_tokens;
    pp.layer       = layer;
    pp.first_pos   = first_pos;
    return pp;
}

static uint32_t round_up(uint32_t x, uint32_t m)
{
    return (x + m - 1) / m * m;
}

kvp_kvc_regions_t kvp_kvc_regions_ref(kvp_codec_id_t codec, uint32_t page_tokens)
{
    kvp_kvc_regions_t r;

    memset(&r, 0, sizeof(r));
    if (page_tokens == 0) {
        return r;
    }
    switch (codec) {
    case KVP_CODEC_KIVI:
    case KVP_CODEC_KIVI128: /* KIVI R=128: K flushed per R-block, V keeps the last R */
        r.evict      = round_up(128, page_tokens);
        r.v_residual = 128;
        break;
    case KVP_CODEC_OSCAR: /* residual buffer packed when it reaches 256 tokens */
        r.evict = round_up(256, page_tokens);
        break;
    case KVP_CODEC_KVARN: /* the request's first 128-token block is never quantized */
        r.sink_pages = round_up(128, page_tokens) / page_tokens;
        break;
    default:
        break;
    }
    return r;
}

kvp_status_t kvp_kvc_regions_check(const kvp_kvc_regions_t *r, uint32_t page_tokens)
{
    if (page_tokens == 0 || r->evict % page_tokens != 0) {
        KVP_LOG_ERROR("model", "evict size %u is not a multiple of the page size %u", r->evict,
                      page_tokens);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

uint32_t kvp_kvc_open_max(const kvp_kvc_regions_t *r, uint32_t page_tokens)
{
    uint64_t n = (uint64_t)r->residual + (r->evict ? r->evict : page_tokens);

    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

double kvp_kvc_bits_effective(const kvp_kvc_t *c)
{
    return c->held_elems_sum > 0.0 ? 8.0 * c->held_bytes_sum / c->held_elems_sum : 0.0;
}

kvp_status_t kvp_kvc_create(const kvp_kvc_params_t *params, kvp_kvc_t **c_p)
{
    kvp_kvc_t        *c;
    size_t            n;
    uint32_t          chunks;
    kvp_page_params_t pp;
    kvp_status_t      status;

    if (params->layers == 0 || params->heads == 0 || params->head_dim == 0 ||
        params->max_tokens == 0 || params->page_tokens == 0) {
        KVP_LOG_ERROR("model", "kv cache geometry must be non-zero");
        return KVP_ERR_INVALID;
    }
    if (kvp_kvc_regions_check(&params->regions, params->page_tokens) != KVP_OK) {
        return KVP_ERR_INVALID;
    }
    c = kvp_calloc(1, sizeof(*c), "kvc");
    if (c == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    c->p   = *params;
    c->row = params->heads * params->head_dim;
    if (params->codec != KVP_KVC_FP32) {
        pp     = page_params(c, params->codec, 0, 0);
        status = kvp_codec_check(&pp);
        if (status != KVP_OK) {
            KVP_LOG_ERROR("model", "codec %s does not support heads %u head_dim %u page tokens %u: "
                          "it takes %s", kvp_codec_name(params->codec), params->heads,
                          params->head_dim, params->page_tokens,
                          kvp_codec_geometry_rule(params->codec));
            kvp_free(c);
            return KVP_ERR_UNSUPPORTED;
        }
        c->page_cap = kvp_page_max_bytes(&pp);
        pp.codec    = KVP_CODEC_FP16;
        if (kvp_page_max_bytes(&pp) > c->page_cap) {
            c->page_cap = kvp_page_max_bytes(&pp);
        }
    }
    n      = (size_t)params->layers * params->max_tokens * c->row;
    chunks = params->max_tokens / params->page_tokens + 1;
    c->k       = kvp_calloc(n, sizeof(float), "kvc k");
    c->v       = kvp_calloc(n, sizeof(float), "kvc v");
    c->tokens  = kvp_calloc(params->max_tokens, sizeof(uint32_t), "kvc tokens");
    c->keys    = kvp_calloc(chunks, sizeof(kvp_key128_t), "kvc keys");
    c->scratch = kvp_malloc(c->page_cap + 1, "kvc scratch");
    if (params->codec == KVP_KVC_FP32) {
        memset(&c->p.regions, 0, sizeof(c->p.regions));
    } else if (params->regions.v_residual > 0) {
        c->v_stash = kvp_calloc(n, sizeof(float), "kvc v stash");
        if (c->v_stash == NULL) {
            kvp_kvc_destroy(c);
            return KVP_ERR_NO_MEMORY;
        }
    }
    if (params->keep_pages) {
        c->pages     = kvp_calloc((size_t)chunks * params->layers, sizeof(uint8_t *), "kvc pages");
        c->page_lens = kvp_calloc((size_t)chunks * params->layers, sizeof(size_t), "kvc lens");
    }
    if (c->k == NULL || c->v == NULL || c->tokens == NULL || c->keys == NULL ||
        c->scratch == NULL || (params->keep_pages && (c->pages == NULL || c->page_lens == NULL))) {
        kvp_kvc_destroy(c);
        return KVP_ERR_NO_MEMORY;
    }
    *c_p = c;
    return KVP_OK;
}

void kvp_kvc_destroy(kvp_kvc_t *c)
{
    if (c == NULL) {
        return;
    }
    if (c->pages != NULL) {
        for (size_t i = 0; i < (size_t)(c->p.max_tokens / c->p.page_tokens + 1) * c->p.layers;
             i++) {
            kvp_free(c->pages[i]);
        }
    }
    kvp_free(c->pages);
    kvp_free(c->page_lens);
    kvp_free(c->k);
    kvp_free(c->v);
    kvp_free(c->tokens);
    kvp_free(c->keys);
    kvp_free(c->scratch);
    kvp_free(c->v_stash);
    kvp_free(c);
}

static float round_f16(float x)
{
    return kvp_f16_to_f32(kvp_f32_to_f16(x));
}

void kvp_kvc_put(kvp_kvc_t *c, uint32_t layer, const float *k, const float *v)
{
    float *kr = kvp_kvc_k(c, layer) + (size_t)c->ntok * c->row;
    float *vr = kvp_kvc_v(c, layer) + (size_t)c->ntok * c->row;

    if (c->p.codec == KVP_KVC_FP32) {
        memcpy(kr, k, c->row * sizeof(float));
        memcpy(vr, v, c->row * sizeof(float));
        return;
    }
    for (uint32_t i = 0; i < c->row; i++) {
        kr[i] = round_f16(k[i]);
        vr[i] = round_f16(v[i]);
    }
}

/* Encode rows [sealed, sealed+P) of every layer and replace them with the decoded page (sink
 * chunks as fp16 pages; with a V window the decoded V goes to the stash, see v_window_move). */
static kvp_status_t kvc_seal(kvp_kvc_t *c)
{
    uint32_t       P     = c->p.page_tokens;
    uint32_t       chunk = c->sealed / P;
    int            sink  = chunk < c->p.regions.sink_pages;
    kvp_codec_id_t codec = sink ? KVP_CODEC_FP16 : c->p.codec;
    double         t0    = kvp_time_s();
    kvp_status_t   status;

    c->keys[chunk] = kvp_chunk_key(chunk > 0 ? &c->keys[chunk - 1] : NULL, c->p.ns,
                                   c->tokens + c->sealed, P);
    for (uint32_t l = 0; l < c->p.layers; l++) {
        kvp_page_params_t pp  = page_params(c, codec, l, c->sealed);
        size_t            off = ((size_t)l * c->p.max_tokens + c->sealed) * c->row;
        float            *kr  = c->k + off;
        float            *vr  = c->v + off;
        float            *vd  = (c->v_stash != NULL ? c->v_stash : c->v) + off;
        size_t            len;

        pp.chunk_key = c->keys[chunk];
        pp.flags |= sink ? KVP_PAGE_F_SINK : 0;
        status = kvp_page_encode(&pp, KVP_DTYPE_F32, kr, vr, P, c->scratch, c->page_cap, &len);
        if (status != KVP_OK) {
            KVP_LOG_ERROR("model", "encoding layer %u chunk %u with %s failed: %s", l, chunk,
                          kvp_codec_name(codec), kvp_status_str(status));
            return status;
        }
        status = kvp_page_decode(c->scratch, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, kr, vd, NULL);
        if (status != KVP_OK) {
            KVP_LOG_ERROR("model", "decoding layer %u chunk %u with %s failed: %s", l, chunk,
                          kvp_codec_name(codec), kvp_status_str(status));
            return status;
        }
        if (sink) {
            c->sink_bytes += len;
        } else {
            c->page_bytes += len;
            c->payload_bytes += len - KVP_PAGE_HDR_BYTES;
            c->page_elems += 2ull * P * c->row;
        }
        if (c->pages != NULL) {
            size_t i = (size_t)chunk * c->p.layers + l;

            c->pages[i] = kvp_malloc(len, "kvc page");
            if (c->pages[i] == NULL) {
                return KVP_ERR_NO_MEMORY;
            }
            memcpy(c->pages[i], c->scratch, len);
            c->page_lens[i] = len;
        }
    }
    c->sealed += P;
    c->codec_s += kvp_time_s() - t0;
    return KVP_OK;
}

/* V window: sealed tokens that left the last v_residual tokens get their decoded V rows. */
static void v_window_move(kvp_kvc_t *c)
{
    uint32_t rv     = c->p.regions.v_residual;
    uint32_t target = c->ntok > rv ? c->ntok - rv : 0;

    target = target < c->sealed ? target : c->sealed;
    if (c->v_stash == NULL || target <= c->v_swapped) {
        return;
    }
    for (uint32_t l = 0; l < c->p.layers; l++) {
        size_t off = ((size_t)l * c->p.max_tokens + c->v_swapped) * c->row;

        memcpy(c->v + off, c->v_stash + off, (size_t)(target - c->v_swapped) * c->row *
               sizeof(float));
    }
    c->v_swapped = target;
}

/* Bytes the cache holds now: codec and sink pages, fp16 rows not yet sealed (as tail pages with
 * headers) and the fp16 copies of sealed V rows still inside the V window. */
static void account_held(kvp_kvc_t *c)
{
    uint32_t P     = c->p.page_tokens;
    uint32_t open  = c->ntok - c->sealed;
    uint32_t sinkt = c->p.regions.sink_pages * P;
    uint32_t vfrom = c->v_swapped > sinkt ? c->v_swapped : sinkt;
    uint64_t vdup  = c->v_stash != NULL && c->sealed > vfrom ? c->sealed - vfrom : 0;
    uint64_t per_layer;

    per_layer = (uint64_t)(open + P - 1) / P * KVP_PAGE_HDR_BYTES + (uint64_t)open * c->row * 4 +
                vdup * c->row * 2;
    c->held_bytes_sum += (double)(c->page_bytes + c->sink_bytes + per_layer * c->p.layers);
    c->held_elems_sum += 2.0 * c->ntok * c->row * c->p.layers;
}

kvp_status_t kvp_kvc_commit(kvp_kvc_t *c, uint32_t token)
{
    const kvp_kvc_regions_t *r = &c->p.regions;
    uint32_t                 P = c->p.page_tokens;
    uint32_t                 evict = r->evict ? r->evict : P, outside;
    kvp_status_t             status;

    if (c->ntok >= c->p.max_tokens) {
        KVP_LOG_ERROR("model", "kv cache is full (%u tokens)", c->p.max_tokens);
        return KVP_ERR_NO_SPACE;
    }
    c->tokens[c->ntok++] = token;
    if (c->p.codec == KVP_KVC_FP32) {
        return KVP_OK;
    }
    outside = c->ntok > r->residual ? c->ntok - r->residual : 0;
    while (outside >= c->sealed + evict) {
        for (uint32_t i = 0; i < evict / P; i++) {
            status = kvc_seal(c);
            if (status != KVP_OK) {
                return status;
            }
        }
    }
    v_window_move(c);
    account_held(c);
    return KVP_OK;
}

kvp_status_t kvp_kvc_tail_pack(const kvp_kvc_t *c, uint8_t **blob_p, size_t *len_p,
                               uint32_t *n_p)
{
    uint32_t     nt = c->ntok - c->sealed;
    size_t       cap, off = 0;
    uint8_t     *blob;
    kvp_status_t status;

    *blob_p = NULL;
    *len_p  = 0;
    *n_p    = 0;
    if (c->p.regions.v_residual || nt > c->p.page_tokens) {
        KVP_LOG_ERROR("model", "only a bare-region cache (a sink allowed) packs into one tail page "
                      "per layer");
        return KVP_ERR_UNSUPPORTED;
    }
    if (nt == 0) {
        return KVP_OK;
    }
    cap  = (size_t)c->p.layers * c->page_cap;
    blob = kvp_malloc(cap, "kvc tail");
    if (blob == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t l = 0; l < c->p.layers; l++) {
        kvp_page_params_t pp = page_params(c, KVP_CODEC_FP16, l, c->sealed);
        size_t            len;

        pp.flags = KVP_PAGE_F_TAIL;
        status   = kvp_page_encode(&pp, KVP_DTYPE_F32, kvp_kvc_k(c, l) + (size_t)c->sealed * c->row,
                                   kvp_kvc_v(c, l) + (size_t)c->sealed * c->row, nt, blob + off,
                                   cap - off, &len);
        if (status != KVP_OK) {
            KVP_LOG_ERROR("model", "encoding the tail of layer %u failed: %s", l,
                          kvp_status_str(status));
            kvp_free(blob);
            return status;
        }
        off += len;
    }
    *blob_p = blob;
    *len_p  = off;
    *n_p    = c->p.layers;
    return KVP_OK;
}

/* One fetched page into rows [first, first + ntok) of a layer. The page comes from another
 * process, so its header is parsed and checked against the session and this cache first (codec,
 * geometry, layer, position, row count, flags, chunk key): only a page that fits exactly is
 * decoded, since the decode writes info.valid rows of info.heads x info.head_dim (the rows must
 * lie inside the cache: kvp_kvc_restore checked first + ntok <= max_tokens). A V_PREROT page
 * would decode to rotated V: the runner never writes one, so it is refused too. */
static kvp_status_t restore_page(kvp_kvc_t *c, const uint8_t *page, size_t len, uint32_t codec,
                                 uint32_t layer, uint32_t first, uint32_t ntok, int tail)
{
    kvp_page_info_t info;
    kvp_status_t    status;
    int             sink = !tail && first / c->p.page_tokens < c->p.regions.sink_pages;

    status = kvp_page_parse(page, len, &info);
    if (status != KVP_OK) {
        KVP_LOG_ERROR("model", "fetched page layer %u pos %u does not parse: %s", layer, first,
                      kvp_status_str(status));
        return status;
    }
    if (info.codec != codec || info.layer != layer || info.first_pos != first ||
        info.valid != ntok || info.heads != c->p.heads || info.head_dim != c->p.head_dim ||
        info.capacity != c->p.page_tokens || (info.flags & KVP_PAGE_F_V_PREROT) != 0 ||
        ((info.flags & KVP_PAGE_F_TAIL) != 0) != (tail != 0) ||
        ((info.flags & KVP_PAGE_F_SINK) != 0) != sink ||
        (!tail && info.chunk_key.lo != c->keys[first / c->p.page_tokens].lo) ||
        (!tail && info.chunk_key.hi != c->keys[first / c->p.page_tokens].hi)) {
        KVP_LOG_ERROR("model", "fetched page layer %u pos %u does not match the session "
                      "(codec %u layer %u pos %llu valid %u, %u x %u, P %u)", layer, first,
                      info.codec, info.layer, (unsigned long long)info.first_pos, info.valid,
                      info.heads, info.head_dim, info.capacity);
        return KVP_ERR_WRONG_CODEC;
    }
    status = kvp_page_decode(page, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL,
                             kvp_kvc_k(c, layer) + (size_t)first * c->row,
                             kvp_kvc_v(c, layer) + (size_t)first * c->row, NULL);
    if (status != KVP_OK) {
        KVP_LOG_ERROR("model", "fetched page layer %u pos %u does not decode: %s", layer, first,
                      kvp_status_str(status));
    }
    return status;
}

kvp_status_t kvp_kvc_restore(kvp_kvc_t *c, const uint32_t *tokens, uint32_t ntok,
                             const uint8_t *const *pages, const size_t *lens, uint32_t n_pages,
                             const uint8_t *tail, size_t tail_len, uint32_t n_tail)
{
    uint32_t     P      = c->p.page_tokens;
    uint32_t     chunks = ntok / P, nt = ntok % P;
    size_t       off    = 0;
    kvp_status_t status;

    if (c->ntok != 0 || ntok > c->p.max_tokens || c->p.codec == KVP_KVC_FP32 ||
        c->p.regions.residual || c->p.regions.v_residual ||
        (c->p.regions.evict && c->p.regions.evict != P) ||
        n_pages != chunks * c->p.layers || n_tail != (nt ? c->p.layers : 0)) {
        KVP_LOG_ERROR("model", "session does not fit this cache: %u tokens, %u pages, %u tail "
                      "pages", ntok, n_pages, n_tail);
        return KVP_ERR_INVALID;
    }
    memcpy(c->tokens, tokens, ntok * sizeof(*tokens));
    for (uint32_t ch = 0; ch < chunks; ch++) {
        c->keys[ch] = kvp_chunk_key(ch > 0 ? &c->keys[ch - 1] : NULL, c->p.ns, tokens + ch * P, P);
        for (uint32_t l = 0; l < c->p.layers; l++) {
            size_t i = (size_t)ch * c->p.layers + l;

            int sink = ch < c->p.regions.sink_pages;

            status = restore_page(c, pages[i], lens[i], sink ? KVP_CODEC_FP16 : c->p.codec, l,
                                  ch * P, P, 0);
            if (status != KVP_OK) {
                return status;
            }
            if (sink) {
                c->sink_bytes += lens[i];
                continue;
            }
            c->page_bytes += lens[i];
            c->payload_bytes += lens[i] - KVP_PAGE_HDR_BYTES;
            c->page_elems += 2ull * P * c->row;
        }
    }
    for (uint32_t l = 0; l < n_tail; l++) {
        size_t len = kvp_page_len_at(tail + off, tail_len - off);

        if (len == 0) {
            KVP_LOG_ERROR("model", "tail page of layer %u is truncated", l);
            return KVP_ERR_BAD_PAGE;
        }
        status = restore_page(c, tail + off, len, KVP_CODEC_FP16, l, chunks * P, nt, 1);
        if (status != KVP_OK) {
            return status;
        }
        off += len;
    }
    c->ntok   = ntok;
    c->sealed = chunks * P;
    return KVP_OK;
}
