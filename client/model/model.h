/* model.h - a Llama-family model in fp32: configuration, weights, loaders (llama2.c .bin and GGUF
 * v3) and the one-token forward pass (RMSNorm, adjacent-pair RoPE, grouped-query attention over a
 * kvp_kvc_t cache, SwiGLU, tied or separate classifier). The forward pass runs several "lanes" in
 * lockstep - independent sequences, each with its own KV cache (one per codec) - so the weights
 * are read once per step for all of them. Not thread-safe per handle; worker threads inside (par.c).
 * Main flow: kvp_model_load -> kvp_fwd_create -> kvp_fwd_step (per token) -> kvp_fwd_destroy. */
#ifndef KVPACK_MODEL_MODEL_H
#define KVPACK_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#include "kvcache.h"
#include "tokenizer.h"

typedef struct {
    uint32_t dim;        /* residual width */
    uint32_t hidden;     /* SwiGLU width */
    uint32_t layers;
    uint32_t heads;      /* query heads */
    uint32_t kv_heads;
    uint32_t head_dim;
    uint32_t vocab;
    uint32_t seq_len;    /* trained context */
    float    rope_theta;
    float    norm_eps;
} kvp_model_config_t;

/* A weight matrix as stored in the GGUF file (Q4_0/Q4_1/Q8_0 blocks, row-major), used by the
 * matmul instead of the fp32 copy when data is set: each row is dequantized into an L1 buffer
 * right before its dot products (the same values as the fp32 copy, so the same results), which
 * cuts the weight bytes read per step ~6x. KVP_MM_QUANT=0 uses the fp32 copies. */
typedef struct {
    const uint8_t *data;      /* NULL: use the fp32 matrix */
    uint32_t       type;      /* KVP_GGML_Q4_0, _Q4_1 or _Q8_0 */
    size_t         row_bytes;
} kvp_qmat_t;

typedef struct {
    float *att_norm;     /* [dim] */
    float *wq;           /* [heads*head_dim][dim] */
    float *wk, *wv;      /* [kv_heads*head_dim][dim] */
    float *wo;           /* [dim][heads*head_dim] */
    float *ffn_norm;     /* [dim] */
    float *w1, *w3;      /* gate, up: [hidden][dim] */
    float *w2;           /* down: [dim][hidden] */
    kvp_qmat_t qwq, qwk, qwv, qwo, qw1, qw2, qw3; /* quantized twins (GGUF only) */
} kvp_model_layer_t;

typedef struct {
    kvp_model_config_t cfg;
    char               name[64];   /* the file's base name, as reports show it */
    char               id[96];     /* namespace fingerprints: name@CRC32C of the whole file, so
                                    * another model under the same file name (a fine-tune, another
                                    * quantization) never shares a namespace, chunk keys or pages */
    const char        *format;     /* "llama2c" or "gguf" */
    float             *tok_emb;    /* [vocab][dim] */
    float             *cls;        /* [vocab][dim]; == tok_emb when tied */
    float             *final_norm; /* [dim] */
    kvp_model_layer_t *layer;
    float             *mem;        /* owns every weight */
    size_t             n_params;
    kvp_tok_t         *tok;        /* owned */
    kvp_qmat_t         qcls;       /* quantized twin of cls (GGUF only) */
    struct kvp_gguf   *gguf;       /* owned; the file image the kvp_qmat_t point into */
} kvp_model_t;

/* Load a model: GGUF (by magic; carries its tokenizer) or llama2.c .bin (tokenizer_path needed).
 * Malformed files and unsupported tensor types give KVP_ERR_INVALID / KVP_ERR_UNSUPPORTED. */
kvp_status_t kvp_model_load(const char *path, const char *tokenizer_path, kvp_model_t **m_p);
void         kvp_model_free(kvp_model_t *m); /* NULL is a no-op */

/* ---- forward pass over lanes ---- */

/* Called with each lane's fp32 post-RoPE K and V ([kv_heads*head_dim]) before they enter the
 * cache (for --dump-kv). */
typedef void (*kvp_fwd_kv_cb_t)(void *arg, uint32_t lane, uint32_t layer, uint32_t pos,
                                const float *k, const float *v);

typedef struct kvp_fwd kvp_fwd_t;

kvp_status_t kvp_fwd_create(const kvp_model_t *m, uint32_t lanes, uint32_t max_tokens,
                            kvp_fwd_t **f_p);
void         kvp_fwd_destroy(kvp_fwd_t *f); /* NULL is a no-op */
void         kvp_fwd_set_kv_cb(kvp_fwd_t *f, kvp_fwd_kv_cb_t cb, void *arg);
/* Attention of lanes whose cache keeps its pages (keep_pages) and has no V window runs straight
 * over the sealed pages plus the open rows as an fp16 tail page (kvp_attn_compute) instead of
 * over the decoded rows; other lanes (fp32, V window) are unchanged. Call before the first step. */
kvp_status_t kvp_fwd_set_attn_fused(kvp_fwd_t *f, int on);
/* Whether fused attention can read a lane of this codec: kvp_attn_compute takes every page codec
 * but naive2 (attn.h); fp32 lanes have no pages and attend over their rows as always. The lane's
 * open rows must also fit one fp16 tail page: kvp_kvc_open_max <= KVP_PAGE_MAX_TOKENS. */
int kvp_fwd_fused_codec_ok(kvp_codec_id_t codec);

/* One token per lane: tokens[l] at position caches[l]->ntok; appends its K/V to caches[l]
 * (sealing pages as they fill) and writes logits[l*vocab ..]. Caches are borrowed. */
kvp_status_t kvp_fwd_step(kvp_fwd_t *f, kvp_kvc_t *const *caches, const uint32_t *tokens,
                          float *logits);

/* Seconds spent in lane-shared work (matmuls) and in each lane's own work (attention, cache). */
double kvp_fwd_shared_s(const kvp_fwd_t *f);
double kvp_fwd_lane_s(const kvp_fwd_t *f, uint32_t lane);

/* y[b][r] = W[r][:] . x[b][:] for b < nb (nb <= KVP_MM_MAXB); W is [rows][n] row-major. */
#define KVP_MM_MAXB 8
void        kvp_mm(float *y, const float *x, const float *w, uint32_t rows, uint32_t n,
                   uint32_t nb);
/* The same product reading q's blocks when q->data is set (and KVP_MM_QUANT is not 0). */
void        kvp_mm_q(float *y, const float *x, const float *w, const kvp_qmat_t *q,
                     uint32_t rows, uint32_t n, uint32_t nb);
const char *kvp_mm_impl(void); /* "avx2" or "generic" */
int         kvp_mm_quant_enabled(void); /* KVP_MM_QUANT unset or not "0" */
void        kvp_mm_set_quant(int on);   /* override KVP_MM_QUANT (tests; before any step) */
/* Attention helpers over nt cache rows of stride floats (head slice of hd floats):
 * scores out[t] = q . k[t]; mix out[:] += a[t] * v[t][:]. */
void kvp_attn_scores(const float *q, const float *k, size_t stride, uint32_t hd, uint32_t nt,
                     float *out);
void kvp_attn_mix(const float *a, const float *v, size_t stride, uint32_t hd, uint32_t nt,
                  float *out);

#endif
