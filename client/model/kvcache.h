/* kvcache.h - the model runner's KV cache for one sequence, routed through kvpack pages.
 * Per layer it holds what attention reads: K and V rows [token][kv_heads*head_dim] in fp32.
 * Rows of the open tail (< P tokens) are fp16-rounded copies of the computed K/V; when the tail
 * reaches P tokens it is sealed: encoded with the codec by kvp_page_encode and the page DECODED
 * back into the same rows, so attention from then on reads the codec's reconstruction and errors
 * accumulate as in real decoding (pseudo-decode). Codec 0 means fp32: no rounding, no pages.
 * Main flow: kvp_kvc_put (per layer) -> kvp_kvc_commit (per token; seals) -> rows read by attention. */
#ifndef KVPACK_MODEL_KVCACHE_H
#define KVPACK_MODEL_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/codec.h"
#include "kvpack/page.h"
#include "kvpack/status.h"

#define KVP_KVC_FP32 ((kvp_codec_id_t)0) /* pseudo codec: exact fp32 cache, no pages */

typedef struct {
    kvp_codec_id_t codec;
    uint32_t       layers, heads, head_dim;
    uint32_t       page_tokens;  /* P */
    uint32_t       max_tokens;
    uint64_t       ns;           /* namespace fingerprint for chunk keys */
    int            keep_pages;   /* keep every sealed page's bytes (node mode) */
} kvp_kvc_params_t;

typedef struct {
    kvp_kvc_params_t p;
    uint32_t         row;        /* heads * head_dim */
    float           *k, *v;      /* [layers][max_tokens][row] */
    uint32_t        *tokens;     /* ids, for chunk keys */
    uint32_t         ntok;       /* committed tokens */
    uint32_t         sealed;     /* tokens in sealed pages (multiple of P) */
    kvp_key128_t    *keys;       /* chunk keys of sealed chunks */
    uint8_t        **pages;      /* keep_pages: [chunk * layers + layer] */
    size_t          *page_lens;
    uint8_t         *scratch;    /* one page */
    size_t           page_cap;
    uint64_t         page_bytes; /* all sealed pages, headers included */
    uint64_t         payload_bytes;
    uint64_t         page_elems; /* K and V elements in sealed pages */
    double           codec_s;    /* time in encode + decode */
} kvp_kvc_t;

/* KVP_ERR_UNSUPPORTED (one log line) when the codec rejects the geometry. */
kvp_status_t kvp_kvc_create(const kvp_kvc_params_t *params, kvp_kvc_t **c_p);
void         kvp_kvc_destroy(kvp_kvc_t *c); /* NULL is a no-op */

static inline float *kvp_kvc_k(const kvp_kvc_t *c, uint32_t layer)
{
    return c->k + (size_t)layer * c->p.max_tokens * c->row;
}

static inline float *kvp_kvc_v(const kvp_kvc_t *c, uint32_t layer)
{
    return c->v + (size_t)layer * c->p.max_tokens * c->row;
}

/* Store the new token's K/V rows of one layer (at position ntok). */
void kvp_kvc_put(kvp_kvc_t *c, uint32_t layer, const float *k, const float *v);
/* After every layer was put: the token becomes visible; seals a page when the tail reaches P. */
kvp_status_t kvp_kvc_commit(kvp_kvc_t *c, uint32_t token);

/* Encode the open tail of each layer as an fp16 page flagged KVP_PAGE_F_TAIL, back to back into
 * a kvp_malloc'ed blob (*blob_p, *len_p); *n_p = layers, or 0 pages when the tail is empty. */
kvp_status_t kvp_kvc_tail_pack(const kvp_kvc_t *c, uint8_t **blob_p, size_t *len_p,
                               uint32_t *n_p);
/* Rebuild an empty cache from fetched pages (page[chunk*layers + layer]) and tail pages, checking
 * each page's codec, geometry, layer, position and chunk key (recomputed from tokens). */
kvp_status_t kvp_kvc_restore(kvp_kvc_t *c, const uint32_t *tokens, uint32_t ntok,
                             const uint8_t *const *pages, const size_t *lens, uint32_t n_pages,
                             const uint8_t *tail, size_t tail_len, uint32_t n_tail);

#endif
