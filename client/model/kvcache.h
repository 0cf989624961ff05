/* kvcache.h - the model runner's KV cache for one sequence, routed through kvpack pages.
 * Per layer it holds what attention reads: K and V rows [token][kv_heads*head_dim] in fp32.
 * Unsealed rows are fp16-rounded copies of the computed K/V; a full chunk of P tokens is sealed:
 * encoded with the codec by kvp_page_encode and the page DECODED back into the same rows, so
 * attention from then on reads the codec's reconstruction and errors accumulate as in real
 * decoding (pseudo-decode). Cache regions (kvp_kvc_regions_t) say which tokens stay fp16: a sink
 * (first chunks sealed as fp16 pages), a residual window, batched eviction, a V-only window.
 * Codec 0 means fp32: no rounding, no pages.
 * Main flow: kvp_kvc_put (per layer) -> kvp_kvc_commit (per token; seals) -> rows read by attention. */
#ifndef KVPACK_MODEL_KVCACHE_H
#define KVPACK_MODEL_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/codec.h"
#include "kvpack/page.h"
#include "kvpack/status.h"

#define KVP_KVC_FP32 ((kvp_codec_id_t)0) /* pseudo codec: exact fp32 cache, no pages */

/* Which tokens stay in fp16 (all zero = the bare codec: only the open tail of < P tokens).
 * After token n is committed, chunks are sealed while at least `evict` tokens that lie outside
 * the last `residual` tokens are still unsealed, `evict / P` chunks at a time. */
typedef struct {
    uint32_t sink_pages; /* the first N chunks are sealed as fp16 pages, never quantized */
    uint32_t residual;   /* the last R tokens are always fp16 (a chunk seals once all its tokens
                          * are older) */
    uint32_t evict;      /* seal in batches of E tokens (a multiple of P; 0 = P) */
    uint32_t v_residual; /* V rows of the last Rv tokens are read in fp16 even once sealed */
} kvp_kvc_regions_t;

typedef struct {
    kvp_codec_id_t codec;
    uint32_t       layers, heads, head_dim;
    uint32_t       page_tokens;  /* P */
    uint32_t       max_tokens;
    uint64_t       ns;           /* namespace fingerprint for chunk keys */
    int            keep_pages;   /* keep every sealed page's bytes (node mode) */
    kvp_kvc_regions_t regions;   /* zero = bare codec */
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
    float           *v_stash;    /* v_residual: decoded V rows kept until they leave the window */
    uint32_t         v_swapped;  /* v_residual: leading tokens whose V rows hold decoded values */
    uint64_t         page_bytes; /* codec pages (sink pages excluded), headers included */
    uint64_t         payload_bytes;
    uint64_t         page_elems; /* K and V elements in those pages */
    uint64_t         sink_bytes; /* fp16 sink pages, headers included */
    double           held_bytes_sum; /* per commit: every byte the cache holds (pages, sink, */
    double           held_elems_sum; /* fp16 rows, V window copies) and the K+V elements */
    double           codec_s;    /* time in encode + decode */
} kvp_kvc_t;

/* The reference implementation's own regions for a codec at page size P (CODECS.md 1.4, 2.3, 3):
 * kivi/kivi128 R=128 (K flushed in 128-token blocks, V always the last 128), oscar evicts its
 * residual at 256 (1..256 recent tokens fp16), kvarn keeps the first 128-token block as a sink;
 * other codecs: bare. Evict sizes are rounded up to a multiple of P. */
kvp_kvc_regions_t kvp_kvc_regions_ref(kvp_codec_id_t codec, uint32_t page_tokens);
/* Checks regions against P (KVP_ERR_INVALID and one log line when evict is not a multiple of P). */
kvp_status_t kvp_kvc_regions_check(const kvp_kvc_regions_t *r, uint32_t page_tokens);
/* The most unsealed rows attention reads in one step (the new token's included): a chunk seals
 * once evict tokens outside the residual window are open, so R + E (E = P when 0). */
uint32_t kvp_kvc_open_max(const kvp_kvc_regions_t *r, uint32_t page_tokens);
/* Bits per K/V element averaged over commits of everything the cache held (0 if none yet). */
double kvp_kvc_bits_effective(const kvp_kvc_t *c);

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
/* After every layer was put: the token becomes visible; seals chunks as the regions allow. */
kvp_status_t kvp_kvc_commit(kvp_kvc_t *c, uint32_t token);

/* Encode the open tail of each layer as an fp16 page flagged KVP_PAGE_F_TAIL, back to back into
 * a kvp_malloc'ed blob (*blob_p, *len_p); *n_p = layers, or 0 pages when the tail is empty. */
kvp_status_t kvp_kvc_tail_pack(const kvp_kvc_t *c, uint8_t **blob_p, size_t *len_p,
                               uint32_t *n_p);
/* Pack and restore handle bare regions plus a sink (one tail page of < P tokens per layer; sink
 * chunks are fp16 pages flagged KVP_PAGE_F_SINK). */
/* Rebuild an empty cache from fetched pages (page[chunk*layers + layer]) and tail pages, checking
 * each page's codec, geometry, layer, position and chunk key (recomputed from tokens). */
kvp_status_t kvp_kvc_restore(kvp_kvc_t *c, const uint32_t *tokens, uint32_t ntok,
                             const uint8_t *const *pages, const size_t *lens, uint32_t n_pages,
                             const uint8_t *tail, size_t tail_len, uint32_t n_tail);

#endif
