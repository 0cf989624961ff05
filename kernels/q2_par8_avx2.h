/* q2_par8_avx2.h - internal, AVX2 files only: the 2-bit group parameters of 8 lanes at once
 * (scale, zero and what coding needs) under the KIVI or OScaR rule, the same operations as
 * q2_ref.c put_params. Shared by the fp32 twin (q2_avx2.c) and the fp16 twin (q2h_avx2.c) so
 * both stay bit-identical to the reference through one piece of code. */
#ifndef KVPACK_Q2_PAR8_AVX2_H
#define KVPACK_Q2_PAR8_AVX2_H

#include <immintrin.h>

#include "codec_ops.h"
#include "quant_hd.h"

/* s, z: scale and zero as stored before fp16 rounding; inv, zq: OScaR's coding terms; mn: the
 * group min (KIVI codes from it); zero_mask: lanes whose KIVI scale is 0 (constant groups). */
typedef struct {
    __m256 s, z, inv, zq, mn, zero_mask;
} kvp_q2_par8_t;

static inline __m256 kvp_rint8(__m256 x)
{
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline kvp_q2_par8_t kvp_q2_par8(kvp_q2_rule_t rule, __m256 mn, __m256 mx)
{
    kvp_q2_par8_t p;
    __m256        three = _mm256_set1_ps(KVP_Q2_MAX), zero = _mm256_setzero_ps();

    if (rule == KVP_Q2_RULE_KIVI) {
        p.s         = _mm256_div_ps(_mm256_sub_ps(mx, mn), three);
        p.z         = mn;
        p.mn        = mn;
        p.zero_mask = _mm256_cmp_ps(p.s, zero, _CMP_EQ_OQ);
        p.inv = p.zq = zero;
    } else {
        __m256 eq  = _mm256_cmp_ps(mn, mx, _CMP_EQ_OQ);
        __m256 z0  = _mm256_and_ps(eq, _mm256_cmp_ps(mn, zero, _CMP_EQ_OQ));
        __m256 cst = _mm256_andnot_ps(z0, eq);
        __m256 lo  = _mm256_blendv_ps(mn, _mm256_set1_ps(-1.0f), z0);
        __m256 hi  = _mm256_blendv_ps(mx, _mm256_set1_ps(1.0f), z0);
        __m256 rg  = _mm256_sub_ps(hi, lo);
        __m256 s   = _mm256_div_ps(rg, three);
        __m256 inv = _mm256_div_ps(three, rg);
        __m256 neg = _mm256_set1_ps(-0.0f); /* unary minus as in C: flip the sign bit */
        __m256 zq  = kvp_rint8(_mm256_div_ps(_mm256_xor_ps(lo, neg), s));
        __m256 zd  = _mm256_mul_ps(_mm256_xor_ps(zq, neg), s);

        p.s         = _mm256_blendv_ps(s, zero, cst);
        p.inv       = _mm256_blendv_ps(inv, zero, cst);
        p.zq        = _mm256_blendv_ps(zq, zero, cst);
        p.z         = _mm256_blendv_ps(zd, mn, cst);
        p.mn        = mn;
        p.zero_mask = zero; /* codes of a constant group come out 0 from inv = zq = 0 */
    }
    return p;
}

#endif
