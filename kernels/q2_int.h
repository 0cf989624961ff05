/* q2_int.h - internal: the reference 2-bit primitives by name, so a twin may fall back to them
 * for pieces it does not vectorise. Signatures are those of kvp_q2_kern_t (codec_ops.h). */
#ifndef KVPACK_Q2_INT_H
#define KVPACK_Q2_INT_H

#include "codec_ops.h"

void kvp_q2_ref_chan_encode(const float *src, size_t stride, uint32_t T, uint32_t D, uint32_t G,
                            kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero);
void kvp_q2_ref_chan_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                            uint32_t T, uint32_t D, uint32_t G, float *dst, size_t stride);
void kvp_q2_ref_tok_encode(const float *src, size_t rows, uint32_t D, uint32_t G,
                           kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero);
void kvp_q2_ref_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                           size_t rows, uint32_t D, uint32_t G, float *dst);
int  kvp_q2_ref_rot_rows(const float *src, float *dst, size_t rows, uint32_t D, int round16);
void kvp_q2_ref_oscar_norm(float *x, uint32_t T, uint32_t HD, float *norms);
void kvp_q2_ref_scale_rows(float *x, uint32_t T, uint32_t HD, const float *norms);
void kvp_q2_ref_varn(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                     float *Sr, float *work, const kvp_next_rows_t *next);
void kvp_q2_ref_kvarn_rtn(const float *X, uint32_t R, uint32_t C, const float *Sc,
                          const float *Sr, uint8_t *codes, uint8_t *A, uint8_t *Z, uint8_t *B);
void kvp_q2_ref_kvarn_deq(const uint8_t *codes, const uint8_t *A, const uint8_t *Z,
                          const uint8_t *B, uint32_t R, uint32_t C, float *dst, size_t rs,
                          size_t cs);

/* kvarn_avx2.c (AVX2 only) */
void kvp_q2_avx2_varn(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                      float *Sr, float *work, const kvp_next_rows_t *next);
/* the same with the skipping of unchanged parts on (skip 1) or off, counting what it did (for
 * test_twins: on or off, the same scales) */
typedef struct {
    uint32_t rows_kept;      /* iterations that reused the row part's raw stds */
    uint32_t cols_kept;      /* iterations that kept the column sums */
    uint32_t cols_after_raw; /* column passes after reused raw stds moved a row scale */
    uint32_t cols_after_row; /* column passes after a row part alone moved one */
    uint64_t state;          /* FNV-1a of the final scales, stds and column sums (not only the
                              * selected scales, which an earlier iteration may have set) */
} kvp_varn_parts_t;
void kvp_q2_avx2_varn_parts(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                            float *Sr, float *work, int skip, kvp_varn_parts_t *parts);
void kvp_q2_avx2_kvarn_rtn(const float *X, uint32_t R, uint32_t C, const float *Sc,
                           const float *Sr, uint8_t *codes, uint8_t *A, uint8_t *Z, uint8_t *B);

#endif
