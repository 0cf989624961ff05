/* eval.h - codec evaluation kit: KV tensors, a documented synthetic generator, the .kvd dump
 * format, error metrics (Frobenius, error decomposition, static and pseudo-decode attention
 * output error) and a driver that runs one codec over a whole KV dump page by page.
 * Used by `kvpack eval`, `kvpack demo` and the model runner.
 *
 * .kvd format (little-endian; fp32 values):
 *   offset size  field
 *      0     4   magic     "KVD1" (bytes 4B 56 44 31)
 *      4     4   version   1
 *      8     4   layers    L
 *     12     4   tokens    T
 *     16     4   kv_heads  H
 *     20     4   head_dim  D
 *     24  4LTHD  K         [layer][token][head][dim]
 *      .  4LTHD  V         [layer][token][head][dim]
 * The file is exactly 24 + 8*L*T*H*D bytes; anything else is rejected.
 *
 * Synthetic generator (kvp_kv_synthetic), per layer and head, deterministic for a seed:
 *   K[t][d] = n_t * (mu_d + sigma_d * z),  V[t][d] = m_t * (nu_d + tau_d * z),  z ~ N(0,1)
 *   sigma_d, tau_d = exp(0.5 * N(0,1)) (log-normal channel scales), mu_d = 0.3*sigma_d*N(0,1),
 *   nu_d = 0.2*tau_d*N(0,1); max(1, D/32) outlier K channels per head whose magnitude is
 *   f ~ U[10, 50] times the channel scale (mu_d = +-f sigma_d, one sign per channel, as the
 *   massive channels of real keys) and unchanged noise sigma_d;
 *   token scales n_t, m_t = exp(0.2 * N(0,1)); the first max(1, T/256) tokens are low-norm sinks
 *   (n_t, m_t *= 0.1); from token floor(0.55 T) + 3 on, a norm jump (n_t *= 2.5, m_t *= 1.5). */
#ifndef KVPACK_EVAL_H
#define KVPACK_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/codec.h"
#include "kvpack/status.h"

typedef struct {
    uint32_t layers, tokens, heads, head_dim;
    float   *k, *v; /* [layer][token][head][dim] fp32 */
} kvp_kv_t;

kvp_status_t kvp_kv_alloc(kvp_kv_t *kv, uint32_t layers, uint32_t tokens, uint32_t heads,
                          uint32_t head_dim);
void         kvp_kv_free(kvp_kv_t *kv); /* zeroes the struct; NULL arrays are fine */
kvp_status_t kvp_kv_synthetic(kvp_kv_t *kv, uint32_t layers, uint32_t tokens, uint32_t heads,
                              uint32_t head_dim, uint64_t seed);
/* Read a .kvd into kv (allocated; freed by kvp_kv_free). Prints nothing: on failure why (when
 * not NULL; why_cap bytes, KVP_KVD_WHY_MAX is enough) says what is wrong in one phrase that names
 * the file ("cannot open PATH: No such file or directory", "PATH: shorter than the 24-byte kvd
 * header", ...), for the caller's own error line. KVP_ERR_IO: it cannot be opened or read;
 * KVP_ERR_BAD_PAGE: not a regular file, or not a well-formed .kvd v1 (header or size); else an
 * allocation's status. */
#define KVP_KVD_WHY_MAX 1024
kvp_status_t kvp_kvd_read(const char *path, kvp_kv_t *kv, char *why, size_t why_cap);
/* Written through a new file beside path (path.XXXXXX by mkstemp: a file the user has there is
 * never overwritten), synced, then renamed over path: a failed write leaves path as it was and no
 * partial file. A symlink's target is what is replaced (the link stays); a path that is not a
 * regular file (/dev/stdout, a FIFO) is written in place, never replaced. */
kvp_status_t kvp_kvd_write(const char *path, const kvp_kv_t *kv);
/* Find the first element no codec can store (NaN, Inf or |x| > 65504: every codec keeps fp16
 * values or fp16 scales), K before V; 1 with "K[layer l][token t][head h][dim d] = x" in where,
 * else 0. A .kvd may hold such values (it is fp32); put and eval name the place before encoding,
 * where the codec could only say that a page failed. */
int kvp_kv_find_unstorable(const kvp_kv_t *kv, char *where, size_t cap);

/* Frobenius ||x_hat - x|| / ||x|| (||x_hat - x|| when x is all zero). */
double kvp_rel_err(const float *x_hat, const float *x, size_t n);

/* Error decomposition (KVarN Eq. 3) over rows of dim: ||X - Xh||^2 = sum (|x| - |xh|)^2
 * (magnitude) + sum 2|x||xh|(1 - cos) (direction). Both returned relative to ||X||, so
 * mag^2 + dir^2 = rel_err^2. */
void kvp_err_decomp(const float *x_hat, const float *x, size_t rows, uint32_t dim, double *mag_p,
                    double *dir_p);

/* Static attention-output relative error of one layer ([token][head][dim] arrays): the whole
 * context quantized once. Per head, n_queries queries: even ones random directions, odd ones
 * the original key at a random position; each scaled so that its logits q.k/sqrt(D) over the
 * original keys have standard deviation 3. Softmax over all tokens (no mask). Returns
 * sqrt(sum ||o_hat - o||^2 / sum ||o||^2) over all queries and heads. */
double kvp_attn_rel_err(const float *k, const float *v, const float *k_hat, const float *v_hat,
                        uint32_t tokens, uint32_t heads, uint32_t head_dim, uint32_t n_queries,
                        uint64_t seed);

/* Pseudo-decode (CODECS.md 2.7): the context grows page by page. Queries sit at random
 * positions pos inside each page p (n_queries spread over the pages, at least one per page),
 * attend causally to [0, pos]; tokens of sealed pages (< p*P) come from k_hat/v_hat, the open
 * page's tokens stay fp16 (the original rounded to fp16). Queries and scaling as above, over
 * the causal context. */
double kvp_attn_rel_err_accum(const float *k, const float *v, const float *k_hat,
                              const float *v_hat, uint32_t tokens, uint32_t heads,
                              uint32_t head_dim, uint32_t page_tokens, uint32_t n_queries,
                              uint64_t seed);

/* ---- one codec over a whole KV ---- */
typedef struct {
    uint64_t bytes;             /* every stored byte: page headers + payloads */
    uint64_t pages;
    double   bits_per_elem;     /* 8 * bytes / (2 * L*T*H*D) */
    double   k_rel_err, v_rel_err;
    double   k_err_mag, k_err_dir, v_err_mag, v_err_dir;
    double   attn_rel_err;      /* mean over layers */
    double   attn_rel_err_accum;
    double   encode_s, decode_s;
} kvp_eval_result_t;

typedef struct {
    kvp_codec_id_t codec;
    uint32_t       page_tokens;  /* P */
    uint32_t       page_flags;   /* e.g. KVP_PAGE_F_V_PREROT */
    uint32_t       kvarn_iters;  /* 0 = default */
    uint32_t       n_queries;    /* per layer and head; 0 = 64 */
    uint64_t       seed;
} kvp_eval_params_t;

/* Encode every (layer, page) of kv, decode it in the original frame into hat (allocated here,
 * same shape; caller frees with kvp_kv_free), and fill the metrics. */
kvp_status_t kvp_eval_codec(const kvp_kv_t *kv, const kvp_eval_params_t *params, kvp_kv_t *hat,
                            kvp_eval_result_t *res);

#endif
