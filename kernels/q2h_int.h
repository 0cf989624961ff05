/* q2h_int.h - internal: fp16-domain AVX2 twins of the 2-bit group quantizers (q2h_avx2.c) and
 * the fused fp16 stages built on them (h_avx2.c). Only call when kvp_cpu_has_avx2(). Encoders
 * return 0 when the input holds NaN/Inf (their output is then garbage), else 1; every other
 * result equals the fp32 primitive's (kvp_q2_kern_t) on the widened input, rounded to fp16 for
 * the decoders. *_ok says which shapes a twin takes. */
#ifndef KVPACK_Q2H_INT_H
#define KVPACK_Q2H_INT_H

#include "codec_ops.h"

/* chan: D channels (all heads of a row at once when D = H*hd) whose codes runs follow each
 * other; parameters of channel c, group g at fp16 slot ((c/hd)*ngroups + g)*hd + c%hd (the
 * per-head [group][channel] layout; hd = D for one head). hd % 16 == 0. Decode: D <= 1024.
 * pf/pf_bytes (may be NULL/0): memory the caller reads next, prefetched a line per input row
 * read, so it arrives while this runs. */
int  kvp_q2h_chan_ok(uint32_t D, uint32_t G);
int  kvp_q2h_chan_encode(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, uint32_t hd,
                         uint32_t G, kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale,
                         uint8_t *zero, const void *pf, size_t pf_bytes);
void kvp_q2h_chan_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                         uint32_t T, uint32_t D, uint32_t hd, uint32_t G, uint16_t *dst,
                         size_t stride);
int  kvp_q2h_tok_ok(uint32_t D, uint32_t G);
int  kvp_q2h_tok_encode(const uint16_t *src, size_t rows, uint32_t D, uint32_t G,
                        kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero);
/* tok_encode that also prefetches pf/pf_bytes into L2, a line per input line read */
int  kvp_q2h_tok_encode_pf(const uint16_t *src, size_t rows, uint32_t D, uint32_t G,
                           kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero,
                           const void *pf, size_t pf_bytes);
void kvp_q2h_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                        size_t rows, uint32_t D, uint32_t G, uint16_t *dst);

/* h_avx2.c: D a power of two, 8 <= D <= 1024 (kvp_q2h_rot_ok). */
int  kvp_q2h_rot_ok(uint32_t D);
/* OScaR K from fp16: per token, rotate each head (fp32), norm over the row, out = f16(f16(x)/n);
 * row: H*D floats of scratch (two tokens' f16(x)). 0 when a rotated value is beyond 65504 (or NaN). */
int  kvp_q2h_oscar_rot_norm(const uint16_t *k, uint32_t T, uint32_t H, uint32_t D, float *row,
                            uint16_t *out, float *norms);
/* out = f16(Hd(row)) for each row of D; a result beyond fp16 is stored as +-Inf (NaN as NaN),
 * unchecked: kvp_q2h_tok_encode of out rejects it. */
void kvp_q2h_rot16(const uint16_t *in, size_t rows, uint32_t D, uint16_t *out);
/* chan_decode of one head, rows times norms[t] (NULL: 1), rotated back, fp16 out; tile: 32*D
 * floats of scratch. D % 16 == 0. */
void kvp_q2h_chan_decode_rot(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                             uint32_t T, uint32_t D, uint32_t G, const float *norms, float *tile,
                             uint16_t *dst, size_t stride);
/* tok_decode with each row rotated back, fp16 out (G % 8 == 0). */
void kvp_q2h_tok_decode_rot(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                            size_t rows, uint32_t D, uint32_t G, uint16_t *dst);
/* h_avx2.c: one head's rows (fp16, stride apart) rotated and rounded to fp16 as fp32 tiles,
 * X[t][d] or X[d][t] (T % 8 == 0; X[d][t] needs D >= 16, buf: 16*D floats); 0 when a value
 * overflows (or is NaN). */
int  kvp_q2h_rot_tile(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *X);
int  kvp_q2h_rot_tile_t(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *buf,
                        float *X);
/* kvarn_avx2.c: one head's fp16 tile as fp32, X[t][d] (0 on NaN/Inf) or X[d][t] (T % 8 == 0,
 * D % 8 == 0; input already checked) */
int  kvp_q2h_tile(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *X);
void kvp_q2h_tile_t(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *X);
#ifdef __AVX2__
#include <immintrin.h>
/* 8 code bytes per channel of 16 channels (channel c at in + c*run, nb valid) -> q[i] holds byte
 * i of each channel in 16-bit lanes */
void kvp_q2h_load_quads(const uint8_t *in, size_t run, uint32_t nb, __m256i q[8]);
#endif

#endif
