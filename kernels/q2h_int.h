/* q2h_int.h - internal: fp16-domain AVX2 twins of the 2-bit group quantizers (q2h_avx2.c) and
 * the fused fp16 stages built on them (h_avx2.c). Only call when kvp_cpu_has_avx2(). Encoders
 * return 0 when the input holds NaN/Inf (their output is then garbage), else 1; every other
 * result equals the fp32 primitive's (kvp_q2_kern_t) on the widened input, rounded to fp16 for
 * the decoders. *_ok says which shapes a twin takes. */
#ifndef KVPACK_Q2H_INT_H
#define KVPACK_Q2H_INT_H

#include "codec_ops.h"

int  kvp_q2h_chan_ok(uint32_t D, uint32_t G);
int  kvp_q2h_chan_encode(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, uint32_t G,
                         kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero);
void kvp_q2h_chan_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                         uint32_t T, uint32_t D, uint32_t G, uint16_t *dst, size_t stride);
int  kvp_q2h_tok_ok(uint32_t D, uint32_t G);
int  kvp_q2h_tok_encode(const uint16_t *src, size_t rows, uint32_t D, uint32_t G,
                        kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero);
void kvp_q2h_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                        size_t rows, uint32_t D, uint32_t G, uint16_t *dst);

#endif
