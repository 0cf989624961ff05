/* avx2_int.h - internal, for the *_avx2.c files only: building blocks the AVX2 twins share.
 * kvp_q2_par8: the 2-bit group parameters of 8 lanes at once (scale, zero and what coding needs)
 * under the KIVI or OScaR rule, the same operations as q2_ref.c put_params, used by the fp32
 * (q2_avx2.c) and fp16 (q2h_avx2.c) twins so both stay bit-identical to the reference.
 * kvp_tr8x8_store: transpose 8 rows of 8 floats into 8 columns of a row-major tile.
 * kvp_reduce8: lane i of the result is the min (or max) over the 8 lanes of v[i].
 * kvp_f16x8_sat: 8 decoded values to fp16, saturating at +-65504 (kvp_hd_f16_sat's twin). */
#ifndef KVPACK_AVX2_INT_H
#define KVPACK_AVX2_INT_H

#include <immintrin.h>
#include <stddef.h>

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

/* min/max return their second operand when one is NaN, so NaN lanes pass through unchanged */
static inline __m128i kvp_f16x8_sat(__m256 x)
{
    const __m256 big = _mm256_set1_ps(65504.0f), nbig = _mm256_set1_ps(-65504.0f);

    x = _mm256_max_ps(nbig, _mm256_min_ps(big, x));
    return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
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
        __m256 lo  = _mm256_blendv_ps(mn, _mm256_set1_ps(-1.0f), z0);
        __m256 hi  = _mm256_blendv_ps(mx, _mm256_set1_ps(1.0f), z0);
        __m256 rg  = _mm256_sub_ps(hi, lo);
        __m256 s   = _mm256_div_ps(rg, three);
        __m256 inv = _mm256_div_ps(three, rg);
        /* constant, or a range whose 3/range overflows (kvp_hd_oscar_params) */
        __m256 cst = _mm256_or_ps(_mm256_andnot_ps(z0, eq),
                                  _mm256_cmp_ps(inv, _mm256_set1_ps(3.40282347e38f), _CMP_GT_OQ));
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

/* r[i] holds row i (8 floats); writes column j of that 8x8 block to dst[j * ld .. + 7]. */
static inline void kvp_tr8x8_store(const __m256 r[8], float *dst, size_t ld)
{
    __m256 a[8], b[8];

    for (int i = 0; i < 8; i += 2) {
        a[i]     = _mm256_unpacklo_ps(r[i], r[i + 1]);
        a[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    b[0] = _mm256_shuffle_ps(a[0], a[2], 0x44);
    b[1] = _mm256_shuffle_ps(a[0], a[2], 0xEE);
    b[2] = _mm256_shuffle_ps(a[1], a[3], 0x44);
    b[3] = _mm256_shuffle_ps(a[1], a[3], 0xEE);
    b[4] = _mm256_shuffle_ps(a[4], a[6], 0x44);
    b[5] = _mm256_shuffle_ps(a[4], a[6], 0xEE);
    b[6] = _mm256_shuffle_ps(a[5], a[7], 0x44);
    b[7] = _mm256_shuffle_ps(a[5], a[7], 0xEE);
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + (size_t)i * ld, _mm256_permute2f128_ps(b[i], b[i + 4], 0x20));
        _mm256_storeu_ps(dst + (size_t)(4 + i) * ld, _mm256_permute2f128_ps(b[i], b[i + 4], 0x31));
    }
}

static inline __m256 kvp_reduce8(const __m256 *v, int is_max)
{
#define RED(a, b) (is_max ? _mm256_max_ps((a), (b)) : _mm256_min_ps((a), (b)))
    __m256 s01 = RED(_mm256_unpacklo_ps(v[0], v[1]), _mm256_unpackhi_ps(v[0], v[1]));
    __m256 s23 = RED(_mm256_unpacklo_ps(v[2], v[3]), _mm256_unpackhi_ps(v[2], v[3]));
    __m256 s45 = RED(_mm256_unpacklo_ps(v[4], v[5]), _mm256_unpackhi_ps(v[4], v[5]));
    __m256 s67 = RED(_mm256_unpacklo_ps(v[6], v[7]), _mm256_unpackhi_ps(v[6], v[7]));
    __m256 a   = RED(_mm256_shuffle_ps(s01, s23, 0x44), _mm256_shuffle_ps(s01, s23, 0xEE));
    __m256 b   = RED(_mm256_shuffle_ps(s45, s67, 0x44), _mm256_shuffle_ps(s45, s67, 0xEE));

    return RED(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
#undef RED
}

#endif
