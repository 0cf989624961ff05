/* attn_int.h - internal: the primitives behind kvp_attn_compute (attn.c), one table per
 * implementation: attn_ref.c (portable C, -ffp-contract=off, the definition) and attn_avx2.c
 * (AVX2+FMA+F16C twin, sums in another order: within 1e-5 relative of the reference on the
 * tested shapes, D <= 128 and a few hundred tokens; a flat softmax over thousands of tokens makes
 * the output a small average of large rows, and fp32 rounding then shows more: 4.4e-5 measured at
 * D = 1024, 2,517 tokens).
 * "codes" are the pages' 2-bit runs: code i of a run at bits [2i, 2i+1] of byte i/4.
 * nh (query heads handled together, so each code byte is unpacked once for all) is 1..4. */
#ifndef KVPACK_ATTN_INT_H
#define KVPACK_ATTN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/attn.h"

#define KVP_ATTN_NH 4u /* query heads per primitive call */

typedef struct {
    const char *impl;
    /* Channel-major runs along tokens (K of kivi, oscar, kvarn): for t < nt, j < nh
     * sc[j*ss + t] = (b[j] + sum_d w[j*D + d] * code(codes + d*run, t)) * fac[t]
     * (fac NULL: no factor). */
    void (*chan_scores)(const uint8_t *codes, size_t run, uint32_t D, uint32_t nt,
                        const float *w, const float *b, const float *fac, uint32_t nh,
                        float *sc, size_t ss);
    /* V weights per token t < nt, head j < nh, group g < ng from the probabilities p[j*ps + t]
     * and the token's scales s[t*ts + g] and mins m[t*ts + g]:
     * coef[(t*nh + j)*ng + g] = p*s; bias[j*ng + g] += p*m. */
    void (*vcoef)(const float *p, size_t ps, const float *s, const float *m, size_t ts,
                  uint32_t nt, uint32_t ng, uint32_t nh, float *coef, float *bias);
    /* Token-major runs along channels (V): for t < nt, d < D, j < nh
     * acc[j*D + d] += coef[(t*nh + j)*(D/gv) + d/gv] * code(codes + t*rs, d). */
    void (*tok_mix)(const uint8_t *codes, size_t rs, uint32_t nt, uint32_t D, uint32_t gv,
                    const float *coef, uint32_t nh, float *acc);
    /* fp16 rows: sc[j*ss + t] = sum_d q[j*D + d] * k[t*ks + d]. */
    void (*f16_scores)(const uint16_t *k, size_t ks, uint32_t nt, uint32_t D, const float *q,
                       uint32_t nh, float *sc, size_t ss);
    /* fp16 rows: acc[j*D + d] += p[j*ps + t] * v[t*vs + d]. */
    void (*f16_mix)(const uint16_t *v, size_t vs, uint32_t nt, uint32_t D, const float *p,
                    size_t ps, uint32_t nh, float *acc);
    /* Per group: w[j*D + d] = q[j*D + d] * s[d]; b[j] = sum_d q[j*D + d] * m[d]. */
    void (*prep)(const float *q, const float *s, const float *m, uint32_t D, uint32_t nh,
                 float *w, float *b);
    /* x[i] = exp(x[i] - mx) for i < n; returns their sum. */
    float (*exp_sum)(float *x, uint32_t n, float mx);
    /* max of x[0..n), n >= 1 */
    float (*max)(const float *x, uint32_t n);
    /* dst[i] = fp16 (little-endian, unaligned) at src + 2i, as float */
    void (*h2f)(const uint8_t *src, size_t n, float *dst);
} kvp_attn_kern_t;

/* The checks of kvp_attn_compute (arguments, shape, scale, a finite query, every page parsed and
 * matched to the first codec page) without computing, for a twin that computes elsewhere (the
 * GPU): with KVP_OK, infos[i] holds pages[i]'s header (the tail's at n_pages) and *scale_p the
 * softmax scale; else kvp_attn_compute's status and log. */
#ifdef __cplusplus
extern "C" { /* attn_cuda.cu calls it */
#endif
kvp_status_t kvp_attn_validate(const kvp_attn_params_t *params, const kvp_attn_page_t *pages,
                               size_t n_pages, const kvp_attn_page_t *tail, const float *q,
                               uint32_t q_heads, const float *out, kvp_page_info_t *infos,
                               float *scale_p);
/* Copy the n finished results to out when every one is finite (1); else 0, out untouched. Over
 * pages that parsed and whose fp16 values were checked, only scores beyond float range (a huge
 * softmax scale) make one non-finite: the callers' KVP_ERR_BAD_INPUT_DATA. */
int kvp_attn_out_copy(const float *res, size_t n, float *out);
#ifdef __cplusplus
}
#endif

extern const kvp_attn_kern_t kvp_attn_ref;
extern const kvp_attn_kern_t kvp_attn_avx2; /* only when kvp_cpu_has_avx2() */

#endif
