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
void kvp_q2_avx2_kvarn_rtn(const float *X, uint32_t R, uint32_t C, const float *Sc,
                           const float *Sr, uint8_t *codes, uint8_t *A, uint8_t *Z, uint8_t *B);

#endif
