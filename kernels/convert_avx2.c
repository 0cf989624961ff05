/* convert_avx2.c - F16C/AVX2 twin of the front-door conversions (convert.c): 8 values per step
 * with vcvtph2ps / vcvtps2ph (round to nearest even, identical to kvp_hd_f16), scalar tails. */
#include "codec_ops.h"
#include "quant_hd.h"
#include "avx2_int.h"

#include <immintrin.h>

static kvp_status_t avx2_load_f16(const uint16_t *in, size_t n, float *out)
{
    __m128i bad = _mm_setzero_si128(), expm = _mm_set1_epi16(0x7C00);
    size_t  i   = 0;

    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(in + i));

        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, expm), expm));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) {
        if ((in[i] & 0x7C00u) == 0x7C00u) {
            return KVP_ERR_BAD_INPUT_DATA;
        }
        out[i] = kvp_hd_f32(in[i]);
    }
    return _mm_testz_si128(bad, bad) ? KVP_OK : KVP_ERR_BAD_INPUT_DATA;
}

static kvp_status_t avx2_check_f32(const float *in, size_t n)
{
    __m256 lim = _mm256_set1_ps(65504.0f), absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 ok  = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    size_t i   = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(in + i), absm);

        ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, lim, _CMP_LE_OQ)); /* NaN compares false */
    }
    for (; i < n; i++) {
        if (!(in[i] <= 65504.0f && in[i] >= -65504.0f)) {
            return KVP_ERR_BAD_INPUT_DATA;
        }
    }
    return _mm256_movemask_ps(ok) == 0xFF ? KVP_OK : KVP_ERR_BAD_INPUT_DATA;
}

static void avx2_store_f16(const float *in, size_t n, uint16_t *out)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128((__m128i *)(void *)(out + i), kvp_f16x8_sat(_mm256_loadu_ps(in + i)));
    }
    for (; i < n; i++) {
        out[i] = kvp_hd_f16_sat(in[i]);
    }
}

/* 16 halves a step: a lane whose exponent bits are all set is Inf/NaN. */
static int avx2_f16_finite(const uint8_t *p, size_t n)
{
    __m256i bad = _mm256_setzero_si256(), expm = _mm256_set1_epi16(0x7C00);
    size_t  i   = 0;

    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(p + 2 * i));

        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi16(_mm256_and_si256(h, expm), expm));
    }
    return _mm256_testz_si256(bad, bad) && kvp_hd_f16_all_finite(p + 2 * i, n - i);
}

const kvp_cvt_ops_t kvp_cvt_avx2 = {avx2_load_f16, avx2_check_f32, avx2_store_f16,
                                    avx2_f16_finite};
