/* attn_avx2.c - AVX2+FMA+F16C twin of attn_ref.c (kvp_attn_avx2). A 32-bit word of codes holds
 * 16 codes; one broadcast and two variable shifts unpack them as the even and odd lanes, which
 * are FMA'd into up to 4 query heads' accumulators and put back in order once per block. exp is
 * a degree-6 polynomial after range reduction (relative error < 2e-7). Sums run in another
 * order than the reference: results agree to ~1e-6 relative. Shapes it does not cover
 * (D % 16 != 0, V groups of fewer than 16 channels) go to the reference. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn_int.h"
#include "quant_hd.h"

#define UNROLL _Pragma("GCC unroll 4")

/* fn(args..., nh) with nh a constant 1..4, so the loops over query heads unroll into registers */
#define NH_CALL(nh, fn, ...)                                                                     \
    do {                                                                                         \
        switch (nh) {                                                                            \
        case 1: fn(__VA_ARGS__, 1); break;                                                       \
        case 2: fn(__VA_ARGS__, 2); break;                                                       \
        case 3: fn(__VA_ARGS__, 3); break;                                                       \
        default: fn(__VA_ARGS__, 4); break;                                                      \
        }                                                                                        \
    } while (0)

static inline uint32_t load_word(const uint8_t *p, uint32_t nb)
{
    uint32_t w = 0;

    memcpy(&w, p, nb);
    return w;
}

/* codes 0,2,..,14 and 1,3,..,15 of a word as floats */
static inline void unpack16(uint32_t word, __m256 *ev, __m256 *od)
{
    const __m256i sh_e  = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i sh_o  = _mm256_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30);
    const __m256i three = _mm256_set1_epi32(3);
    __m256i       v     = _mm256_set1_epi32((int)word);

    *ev = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, sh_e), three));
    *od = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, sh_o), three));
}

/* even/odd lanes back to order: lo = elements 0..7, hi = 8..15 */
static inline void interleave(__m256 ev, __m256 od, __m256 *lo, __m256 *hi)
{
    __m256 a = _mm256_unpacklo_ps(ev, od), b = _mm256_unpackhi_ps(ev, od);

    *lo = _mm256_permute2f128_ps(a, b, 0x20);
    *hi = _mm256_permute2f128_ps(a, b, 0x31);
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) void
chan_scores_n(const uint8_t *codes, size_t run, uint32_t D, uint32_t nt, const float *w,
              const float *b, const float *fac, float *sc, size_t ss, const uint32_t nh)
{
    for (uint32_t t0 = 0; t0 < nt; t0 += 16) {
        uint32_t n = nt - t0 < 16 ? nt - t0 : 16, nb = (n + 3) / 4;
        __m256   ae[KVP_ATTN_NH], ao[KVP_ATTN_NH];

        UNROLL for (uint32_t j = 0; j < nh; j++) {
            ae[j] = ao[j] = _mm256_setzero_ps();
        }
        for (uint32_t d = 0; d < D; d++) {
            const uint8_t *c = codes + (size_t)d * run + t0 / 4;
            __m256         ce, co;

            unpack16(nb == 4 ? load_word(c, 4) : load_word(c, nb), &ce, &co);
            UNROLL for (uint32_t j = 0; j < nh; j++) {
                __m256 wj = _mm256_broadcast_ss(w + (size_t)j * D + d);

                ae[j] = _mm256_fmadd_ps(wj, ce, ae[j]);
                ao[j] = _mm256_fmadd_ps(wj, co, ao[j]);
            }
        }
        UNROLL for (uint32_t j = 0; j < nh; j++) {
            __m256 lo, hi;
            float  tmp[16];

            interleave(ae[j], ao[j], &lo, &hi);
            lo = _mm256_add_ps(lo, _mm256_set1_ps(b[j]));
            hi = _mm256_add_ps(hi, _mm256_set1_ps(b[j]));
            if (fac != NULL && n == 16) {
                lo = _mm256_mul_ps(lo, _mm256_loadu_ps(fac + t0));
                hi = _mm256_mul_ps(hi, _mm256_loadu_ps(fac + t0 + 8));
            } else if (fac != NULL) {
                _mm256_storeu_ps(tmp, lo);
                _mm256_storeu_ps(tmp + 8, hi);
                for (uint32_t i = 0; i < n; i++) {
                    tmp[i] = tmp[i] * fac[t0 + i];
                }
                lo = _mm256_loadu_ps(tmp);
                hi = _mm256_loadu_ps(tmp + 8);
            }
            if (n == 16) {
                _mm256_storeu_ps(sc + j * ss + t0, lo);
                _mm256_storeu_ps(sc + j * ss + t0 + 8, hi);
            } else {
                _mm256_storeu_ps(tmp, lo);
                _mm256_storeu_ps(tmp + 8, hi);
                memcpy(sc + j * ss + t0, tmp, n * sizeof(float));
            }
        }
    }
}

static void avx_chan_scores(const uint8_t *codes, size_t run, uint32_t D, uint32_t nt,
                            const float *w, const float *b, const float *fac, uint32_t nh,
                            float *sc, size_t ss)
{
    NH_CALL(nh, chan_scores_n, codes, run, D, nt, w, b, fac, sc, ss);
}

/* groups of 4 (D = 128 at 32) or 8 channels per token: one SSE/AVX multiply per head and token;
 * one group (kvarn): 8 tokens at a time */
static void avx_vcoef(const float *p, size_t ps, const float *s, const float *m, size_t ts,
                      uint32_t nt, uint32_t ng, uint32_t nh, float *coef, float *bias)
{
    if (ng == 4) {
        __m128 bs[KVP_ATTN_NH];

        for (uint32_t j = 0; j < nh; j++) {
            bs[j] = _mm_loadu_ps(bias + j * 4);
        }
        for (uint32_t t = 0; t < nt; t++) {
            __m128 sv = _mm_loadu_ps(s + t * ts), mv = _mm_loadu_ps(m + t * ts);

            for (uint32_t j = 0; j < nh; j++) {
                __m128 pv = _mm_set1_ps(p[j * ps + t]);

                _mm_storeu_ps(coef + ((size_t)t * nh + j) * 4, _mm_mul_ps(pv, sv));
                bs[j] = _mm_fmadd_ps(pv, mv, bs[j]);
            }
        }
        for (uint32_t j = 0; j < nh; j++) {
            _mm_storeu_ps(bias + j * 4, bs[j]);
        }
    } else if (ng == 1 && ts == 1) {
        for (uint32_t j = 0; j < nh; j++) {
            __m256   acc = _mm256_setzero_ps();
            uint32_t t   = 0;
            float    lane[8];

            for (; t + 8 <= nt; t += 8) {
                __m256 pv = _mm256_loadu_ps(p + j * ps + t);

                _mm256_storeu_ps(lane, _mm256_mul_ps(pv, _mm256_loadu_ps(s + t)));
                acc = _mm256_fmadd_ps(pv, _mm256_loadu_ps(m + t), acc);
                for (uint32_t i = 0; i < 8; i++) {
                    coef[(size_t)(t + i) * nh + j] = lane[i];
                }
            }
            bias[j] += hsum8(acc);
            for (; t < nt; t++) {
                coef[(size_t)t * nh + j] = p[j * ps + t] * s[t];
                bias[j] += p[j * ps + t] * m[t];
            }
        }
    } else {
        kvp_attn_ref.vcoef(p, ps, s, m, ts, nt, ng, nh, coef, bias);
    }
}

static inline __attribute__((always_inline)) void
tok_mix_n(const uint8_t *codes, size_t rs, uint32_t nt, uint32_t D, uint32_t gv,
          const float *coef, float *acc, const uint32_t nh)
{
    uint32_t ng = D / gv;

    for (uint32_t cb = 0; cb < D; cb += 16) {
        const float *cf = coef + cb / gv;
        __m256       ae[KVP_ATTN_NH], ao[KVP_ATTN_NH];

        UNROLL for (uint32_t j = 0; j < nh; j++) {
            ae[j] = ao[j] = _mm256_setzero_ps();
        }
        for (uint32_t t = 0; t < nt; t++) {
            __m256 ce, co;

            unpack16(load_word(codes + (size_t)t * rs + cb / 4, 4), &ce, &co);
            UNROLL for (uint32_t j = 0; j < nh; j++) {
                __m256 a = _mm256_broadcast_ss(cf + ((size_t)t * nh + j) * ng);

                ae[j] = _mm256_fmadd_ps(a, ce, ae[j]);
                ao[j] = _mm256_fmadd_ps(a, co, ao[j]);
            }
        }
        UNROLL for (uint32_t j = 0; j < nh; j++) {
            float *a = acc + (size_t)j * D + cb;
            __m256 lo, hi;

            interleave(ae[j], ao[j], &lo, &hi);
            _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), lo));
            _mm256_storeu_ps(a + 8, _mm256_add_ps(_mm256_loadu_ps(a + 8), hi));
        }
    }
}

static void avx_tok_mix(const uint8_t *codes, size_t rs, uint32_t nt, uint32_t D, uint32_t gv,
                        const float *coef, uint32_t nh, float *acc)
{
    if (D % 16 != 0 || gv % 16 != 0) {
        kvp_attn_ref.tok_mix(codes, rs, nt, D, gv, coef, nh, acc);
        return;
    }
    NH_CALL(nh, tok_mix_n, codes, rs, nt, D, gv, coef, acc);
}

static inline __m256 ld_h8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

static inline __attribute__((always_inline)) void
f16_scores_n(const uint16_t *k, size_t ks, uint32_t nt, uint32_t D, const float *q,
             float *sc, size_t ss, const uint32_t nh)
{
    for (uint32_t t = 0; t < nt; t++) {
        const uint16_t *kt = k + t * ks;
        __m256          a[KVP_ATTN_NH], b[KVP_ATTN_NH];

        UNROLL for (uint32_t j = 0; j < nh; j++) {
            a[j] = b[j] = _mm256_setzero_ps();
        }
        for (uint32_t d = 0; d < D; d += 16) {
            __m256 k0 = ld_h8(kt + d), k1 = ld_h8(kt + d + 8);

            UNROLL for (uint32_t j = 0; j < nh; j++) {
                a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)j * D + d), k0, a[j]);
                b[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)j * D + d + 8), k1, b[j]);
            }
        }
        UNROLL for (uint32_t j = 0; j < nh; j++) {
            sc[j * ss + t] = hsum8(_mm256_add_ps(a[j], b[j]));
        }
    }
}

static void avx_f16_scores(const uint16_t *k, size_t ks, uint32_t nt, uint32_t D, const float *q,
                           uint32_t nh, float *sc, size_t ss)
{
    if (D % 16 != 0) {
        kvp_attn_ref.f16_scores(k, ks, nt, D, q, nh, sc, ss);
        return;
    }
    NH_CALL(nh, f16_scores_n, k, ks, nt, D, q, sc, ss);
}

static inline __attribute__((always_inline)) void
f16_mix_n(const uint16_t *v, size_t vs, uint32_t nt, uint32_t D, const float *p, size_t ps,
          float *acc, const uint32_t nh)
{
    for (uint32_t cb = 0; cb < D; cb += 16) {
        __m256 a[KVP_ATTN_NH], b[KVP_ATTN_NH];

        UNROLL for (uint32_t j = 0; j < nh; j++) {
            a[j] = _mm256_loadu_ps(acc + (size_t)j * D + cb);
            b[j] = _mm256_loadu_ps(acc + (size_t)j * D + cb + 8);
        }
        for (uint32_t t = 0; t < nt; t++) {
            __m256 v0 = ld_h8(v + t * vs + cb), v1 = ld_h8(v + t * vs + cb + 8);

            UNROLL for (uint32_t j = 0; j < nh; j++) {
                __m256 pj = _mm256_broadcast_ss(p + j * ps + t);

                a[j] = _mm256_fmadd_ps(pj, v0, a[j]);
                b[j] = _mm256_fmadd_ps(pj, v1, b[j]);
            }
        }
        UNROLL for (uint32_t j = 0; j < nh; j++) {
            _mm256_storeu_ps(acc + (size_t)j * D + cb, a[j]);
            _mm256_storeu_ps(acc + (size_t)j * D + cb + 8, b[j]);
        }
    }
}

static void avx_f16_mix(const uint16_t *v, size_t vs, uint32_t nt, uint32_t D, const float *p,
                        size_t ps, uint32_t nh, float *acc)
{
    if (D % 16 != 0) {
        kvp_attn_ref.f16_mix(v, vs, nt, D, p, ps, nh, acc);
        return;
    }
    NH_CALL(nh, f16_mix_n, v, vs, nt, D, p, ps, acc);
}

static void avx_prep(const float *q, const float *s, const float *m, uint32_t D, uint32_t nh,
                     float *w, float *b)
{
    if (D % 8 != 0) {
        kvp_attn_ref.prep(q, s, m, D, nh, w, b);
        return;
    }
    for (uint32_t j = 0; j < nh; j++) {
        const float *qj = q + (size_t)j * D;
        __m256       acc = _mm256_setzero_ps();

        for (uint32_t d = 0; d < D; d += 8) {
            __m256 qv = _mm256_loadu_ps(qj + d);

            _mm256_storeu_ps(w + (size_t)j * D + d, _mm256_mul_ps(qv, _mm256_loadu_ps(s + d)));
            acc = _mm256_fmadd_ps(qv, _mm256_loadu_ps(m + d), acc);
        }
        b[j] = hsum8(acc);
    }
}

/* exp(x) for x in [-87, 88]: x = n ln2 + r, |r| <= ln2/2, e^r by its Taylor polynomial to r^6 */
static inline __m256 exp8(__m256 x)
{
    const __m256 c2 = _mm256_set1_ps(1.0f / 2), c3 = _mm256_set1_ps(1.0f / 6);
    const __m256 c4 = _mm256_set1_ps(1.0f / 24), c5 = _mm256_set1_ps(1.0f / 120);
    const __m256 c6 = _mm256_set1_ps(1.0f / 720), one = _mm256_set1_ps(1.0f);
    __m256       n, r, p;
    __m256i      e;

    /* operands in this order keep a NaN (max/min return the second operand when either is
     * NaN): a score past float range must reach the result as NaN, as expf's does. Below -87
     * the weight is ~1.6e-38, not the reference's 0 (-inf included): negligible beside the
     * running max's weight of 1, and documented as a twin difference */
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    p = _mm256_fmadd_ps(c6, r, c5);
    p = _mm256_fmadd_ps(p, r, c4);
    p = _mm256_fmadd_ps(p, r, c3);
    p = _mm256_fmadd_ps(p, r, c2);
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_fmadd_ps(p, r, one);
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static float avx_exp_sum(float *x, uint32_t n, float mx)
{
    __m256   acc = _mm256_setzero_ps(), m = _mm256_set1_ps(mx);
    uint32_t i   = 0;
    float    sum;

    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));

        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    sum = hsum8(acc);
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    return sum;
}

static float avx_max(const float *x, uint32_t n)
{
    uint32_t i = 0;
    float    m = x[0];

    if (n >= 8) {
        __m256 v = _mm256_loadu_ps(x);
        __m128 s;

        for (i = 8; i + 8 <= n; i += 8) {
            v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
        }
        s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        s = _mm_max_ss(s, _mm_movehdup_ps(s));
        m = _mm_cvtss_f32(s);
    }
    for (; i < n; i++) {
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

static void avx_h2f(const uint8_t *src, size_t n, float *dst)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i))));
    }
    for (; i < n; i++) {
        dst[i] = kvp_hd_ldh(src + 2 * i);
    }
}

const kvp_attn_kern_t kvp_attn_avx2 = {
    .impl        = "avx2",
    .chan_scores = avx_chan_scores,
    .vcoef       = avx_vcoef,
    .tok_mix     = avx_tok_mix,
    .f16_scores  = avx_f16_scores,
    .f16_mix     = avx_f16_mix,
    .prep        = avx_prep,
    .exp_sum     = avx_exp_sum,
    .max         = avx_max,
    .h2f         = avx_h2f,
};
