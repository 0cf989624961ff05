/* q2_avx2.c - AVX2+F16C twin of the 2-bit fp32 primitives (kvp_q2_avx2), built with
 * ${KVP_AVX2_FLAGS} -ffp-contract=off, picked at run time (codec_dispatch.c). Bit-exact with
 * q2_ref.c (same operations in the same order, the first of equal min/max values) except KVarN's
 * VarN and RTN (kvarn_avx2.c, documented tolerance). Shapes it does not vectorise (D % 8 != 0)
 * use the reference. */
#include "codec_ops.h"
#include "quant_hd.h"
#include "q2_int.h"
#include "avx2_int.h"

#include <immintrin.h>
#include <string.h>

/* ---- helpers ---- */

static inline __m256 ld_h8(const uint8_t *p) /* 8 fp16 at an unaligned byte address */
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

static inline void st_h8(uint8_t *p, __m256 v)
{
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

static inline __m256 clamp03(__m256 x)
{
    return _mm256_min_ps(_mm256_max_ps(x, _mm256_setzero_ps()), _mm256_set1_ps(KVP_Q2_MAX));
}

/* 8 codes (int32 lanes, values 0..3) along a run -> 2 bytes at out. */
static inline void pack8(__m256i q, uint8_t *out)
{
    __m256i s = _mm256_sllv_epi32(q, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));

    s = _mm256_hadd_epi32(s, s);
    s = _mm256_hadd_epi32(s, s);
    out[0] = (uint8_t)_mm256_extract_epi32(s, 0);
    out[1] = (uint8_t)_mm256_extract_epi32(s, 4);
}

/* 32 codes (4 x 8 int32 lanes, values 0..3, consecutive along the run) -> 8 bytes at out. */
static inline void pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3, uint8_t *out)
{
    /* bytes per 128-bit lane: q0[0..3] q1[0..3] q2[0..3] q3[0..3] | q0[4..7] q1[4..7] ... */
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(q0, q1), _mm256_packus_epi32(q2, q3));
    __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(b, _mm256_set1_epi32(0x40100401)),
                                  _mm256_set1_epi16(1)); /* c0 + 4c1 + 16c2 + 64c3 per dword */
    __m256i y = _mm256_packus_epi16(_mm256_packus_epi32(w, w), _mm256_setzero_si256());
    __m128i lo = _mm256_castsi256_si128(y), hi = _mm256_extracti128_si256(y, 1);

    /* lo holds bytes 0, 2, 4, 6 of the run, hi bytes 1, 3, 5, 7 */
    _mm_storel_epi64((__m128i *)(void *)out, _mm_unpacklo_epi8(lo, hi));
}

/* 2 bytes of a run (8 codes) -> 8 floats. */
static inline __m256 unpack8(const uint8_t *in)
{
    __m256i w = _mm256_set1_epi32(in[0] | (in[1] << 8));

    w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    return _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(3)));
}

static inline __m256i codes8(kvp_q2_rule_t rule, const kvp_q2_par8_t *p, __m256 x)
{
    __m256 t;

    if (rule == KVP_Q2_RULE_KIVI) {
        t = kvp_rint8(clamp03(_mm256_div_ps(_mm256_sub_ps(x, p->mn), p->s)));
        t = _mm256_andnot_ps(p->zero_mask, t);
    } else {
        t = clamp03(kvp_rint8(_mm256_add_ps(_mm256_mul_ps(x, p->inv), p->zq)));
    }
    return _mm256_cvttps_epi32(t);
}

/* ---- per-channel groups along tokens, 8 channels per vector ---- */

#define CHAN_MAX_VEC 128 /* D <= 1024 */

static void avx2_chan_encode(const float *src, size_t stride, uint32_t T, uint32_t D, uint32_t G,
                             kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    uint32_t  run = kvp_hd_run_bytes(T), nv = D / 8;
    __m256    mn[CHAN_MAX_VEC], mx[CHAN_MAX_VEC];
    kvp_q2_par8_t p[CHAN_MAX_VEC];

    if (D % 8 != 0 || G % 4 != 0 || nv > CHAN_MAX_VEC) {
        kvp_q2_ref_chan_encode(src, stride, T, D, G, rule, codes, scale, zero);
        return;
    }
    /* token-major loops: rows of the page are read in order (a channel-major walk would
     * stride H*D floats, 4 KiB at H*D = 1024, and thrash one L1 set) */
    for (uint32_t t0 = 0, g = 0; t0 < T; t0 += G, g++) {
        uint32_t t1 = t0 + G < T ? t0 + G : T;

        for (uint32_t c = 0; c < nv; c++) {
            mn[c] = mx[c] = _mm256_loadu_ps(src + (size_t)t0 * stride + 8 * c);
        }
        for (uint32_t t = t0 + 1; t < t1; t++) {
            const float *row = src + (size_t)t * stride;

            for (uint32_t c = 0; c < nv; c++) {
                __m256 x = _mm256_loadu_ps(row + 8 * c);

                mn[c] = _mm256_min_ps(x, mn[c]); /* x < mn ? x : mn, as the reference */
                mx[c] = _mm256_max_ps(x, mx[c]);
            }
        }
        for (uint32_t c = 0; c < nv; c++) {
            p[c] = kvp_q2_par8(rule, mn[c], mx[c]);
            st_h8(scale + 2 * ((size_t)g * D + 8 * c), p[c].s);
            st_h8(zero + 2 * ((size_t)g * D + 8 * c), p[c].z);
        }
        for (uint32_t t = t0; t < t1; t += 4) {
            uint32_t nj = t1 - t < 4 ? t1 - t : 4;

            for (uint32_t c = 0; c < nv; c++) {
                __m256i byte = codes8(rule, &p[c], _mm256_loadu_ps(src + (size_t)t * stride + 8 * c));
                uint8_t b[32];

                for (uint32_t j = 1; j < nj; j++) {
                    __m256i q = codes8(rule, &p[c], _mm256_loadu_ps(src + (size_t)(t + j) * stride + 8 * c));

                    byte = _mm256_or_si256(byte, _mm256_sllv_epi32(q, _mm256_set1_epi32((int)(2 * j))));
                }
                _mm256_storeu_si256((__m256i *)(void *)b, byte);
                for (uint32_t i = 0; i < 8; i++) {
                    codes[(size_t)(8 * c + i) * run + t / 4] = b[4 * i];
                }
            }
        }
    }
}

/* 8 rows' code byte at column byte cb -> 8 int32 lanes. */
static inline __m256i gather_bytes(const uint8_t *codes, size_t run, size_t cb)
{
    return _mm256_setr_epi32(codes[cb], codes[run + cb], codes[2 * run + cb], codes[3 * run + cb],
                             codes[4 * run + cb], codes[5 * run + cb], codes[6 * run + cb],
                             codes[7 * run + cb]);
}

static void avx2_chan_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                             uint32_t T, uint32_t D, uint32_t G, float *dst, size_t stride)
{
    uint32_t run = kvp_hd_run_bytes(T), nv = D / 8;
    __m256i  m3  = _mm256_set1_epi32(3);
    __m256   s[CHAN_MAX_VEC], z[CHAN_MAX_VEC];

    if (D % 8 != 0 || G % 4 != 0 || nv > CHAN_MAX_VEC) {
        kvp_q2_ref_chan_decode(codes, scale, zero, T, D, G, dst, stride);
        return;
    }
    for (uint32_t t0 = 0, g = 0; t0 < T; t0 += G, g++) {
        uint32_t t1 = t0 + G < T ? t0 + G : T;

        for (uint32_t c = 0; c < nv; c++) {
            s[c] = ld_h8(scale + 2 * ((size_t)g * D + 8 * c));
            z[c] = ld_h8(zero + 2 * ((size_t)g * D + 8 * c));
        }
        for (uint32_t t = t0; t < t1; t += 4) {
            uint32_t nj = t1 - t < 4 ? t1 - t : 4;

            for (uint32_t c = 0; c < nv; c++) {
                __m256i b = gather_bytes(codes + (size_t)8 * c * run, run, t / 4);

                for (uint32_t j = 0; j < nj; j++) {
                    __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(
                        _mm256_srlv_epi32(b, _mm256_set1_epi32((int)(2 * j))), m3));

                    _mm256_storeu_ps(dst + (size_t)(t + j) * stride + 8 * c,
                                     _mm256_add_ps(_mm256_mul_ps(q, s[c]), z[c]));
                }
            }
        }
    }
}

/* ---- per-row groups of G channels ---- */

static inline float hmin8(__m256 v)
{
    float a[8], m;

    _mm256_storeu_ps(a, v);
    m = a[0];
    for (int i = 1; i < 8; i++) {
        m = a[i] < m ? a[i] : m;
    }
    return m;
}

static inline float hmax8(__m256 v)
{
    float a[8], m;

    _mm256_storeu_ps(a, v);
    m = a[0];
    for (int i = 1; i < 8; i++) {
        m = a[i] > m ? a[i] : m;
    }
    return m;
}

/* The reference keeps the first of equal values, so a zero min (max) has the sign of the
 * group's first zero; lane j of m is the group of n values at x + j*step. */
static __m256 fix_zeros(__m256 m, const float *x, size_t step, uint32_t n, int is_max)
{
    int   z = _mm256_movemask_ps(_mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_EQ_OQ));
    float a[8];

    if (z == 0) {
        return m;
    }
    _mm256_storeu_ps(a, m);
    for (int j = 0; j < 8; j++) {
        if (z & (1 << j)) {
            float r = x[(size_t)j * step];

            for (uint32_t i = 1; i < n; i++) {
                float y = x[(size_t)j * step + i];

                r = is_max ? (y > r ? y : r) : (y < r ? y : r);
            }
            a[j] = r;
        }
    }
    return _mm256_loadu_ps(a);
}

static inline __m256 lane(__m256 v, int j) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j)); }

static inline kvp_q2_par8_t params_lane(const kvp_q2_par8_t *p, int j)
{
    kvp_q2_par8_t q;

    q.s = lane(p->s, j), q.z = lane(p->z, j), q.inv = lane(p->inv, j), q.zq = lane(p->zq, j);
    q.mn = lane(p->mn, j), q.zero_mask = lane(p->zero_mask, j);
    return q;
}

/* One group of G channels at x (scalar params path, for tails). */
static void tok_group(const float *x, uint32_t G, kvp_q2_rule_t rule, uint8_t *codes,
                      uint8_t *scale, uint8_t *zero)
{
    __m256    vmn = _mm256_loadu_ps(x), vmx = vmn;
    float     sv[8], zv[8];
    kvp_q2_par8_t p;

    for (uint32_t i = 8; i < G; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);

        vmn = _mm256_min_ps(vmn, v);
        vmx = _mm256_max_ps(vmx, v);
    }
    p = kvp_q2_par8(rule, fix_zeros(_mm256_set1_ps(hmin8(vmn)), x, 0, G, 0),
                fix_zeros(_mm256_set1_ps(hmax8(vmx)), x, 0, G, 1));
    _mm256_storeu_ps(sv, p.s);
    _mm256_storeu_ps(zv, p.z);
    kvp_hd_sth(scale, sv[0]);
    kvp_hd_sth(zero, zv[0]);
    for (uint32_t i = 0; i < G; i += 8) {
        pack8(codes8(rule, &p, _mm256_loadu_ps(x + i)), codes + i / 4);
    }
}

/* Groups are numbered gi = row * (D/G) + g; with D % 8 == 0 group gi's values start at
 * src + gi*G, its codes at codes + gi*G/4 and its params at slot gi: 8 groups per batch. */
static void avx2_tok_encode(const float *src, size_t rows, uint32_t D, uint32_t G,
                            kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    size_t ngr = rows * (D / G), gi = 0;

    if (G % 8 != 0) {
        kvp_q2_ref_tok_encode(src, rows, D, G, rule, codes, scale, zero);
        return;
    }
    for (; gi + 8 <= ngr; gi += 8) {
        __m256    mn[8], mx[8];
        kvp_q2_par8_t p;

        for (int j = 0; j < 8; j++) {
            const float *x = src + (gi + j) * G;

            mn[j] = mx[j] = _mm256_loadu_ps(x);
            for (uint32_t i = 8; i < G; i += 8) {
                __m256 v = _mm256_loadu_ps(x + i);

                mn[j] = _mm256_min_ps(mn[j], v);
                mx[j] = _mm256_max_ps(mx[j], v);
            }
        }
        p = kvp_q2_par8(rule, fix_zeros(kvp_reduce8(mn, 0), src + gi * G, G, G, 0),
                    fix_zeros(kvp_reduce8(mx, 1), src + gi * G, G, G, 1));
        st_h8(scale + 2 * gi, p.s);
        st_h8(zero + 2 * gi, p.z);
        for (int j = 0; j < 8; j++) {
            kvp_q2_par8_t    q = params_lane(&p, j);
            const float *x = src + (gi + j) * G;
            uint8_t     *c = codes + (gi + j) * G / 4;

            uint32_t     i = 0;

            for (; i + 32 <= G; i += 32) {
                pack32(codes8(rule, &q, _mm256_loadu_ps(x + i)), codes8(rule, &q, _mm256_loadu_ps(x + i + 8)),
                       codes8(rule, &q, _mm256_loadu_ps(x + i + 16)),
                       codes8(rule, &q, _mm256_loadu_ps(x + i + 24)), c + i / 4);
            }
            for (; i < G; i += 8) {
                pack8(codes8(rule, &q, _mm256_loadu_ps(x + i)), c + i / 4);
            }
        }
    }
    for (; gi < ngr; gi++) {
        tok_group(src + gi * G, G, rule, codes + gi * G / 4, scale + 2 * gi, zero + 2 * gi);
    }
}

static void avx2_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                            size_t rows, uint32_t D, uint32_t G, float *dst)
{
    size_t ngr = rows * (D / G), gi = 0;

    if (G % 8 != 0) {
        kvp_q2_ref_tok_decode(codes, scale, zero, rows, D, G, dst);
        return;
    }
    for (; gi < ngr; gi += 8) {
        float sv[8], zv[8];
        int   nb = ngr - gi >= 8 ? 8 : (int)(ngr - gi);

        if (nb == 8) {
            _mm256_storeu_ps(sv, ld_h8(scale + 2 * gi));
            _mm256_storeu_ps(zv, ld_h8(zero + 2 * gi));
        } else {
            for (int j = 0; j < nb; j++) {
                sv[j] = kvp_hd_ldh(scale + 2 * (gi + j));
                zv[j] = kvp_hd_ldh(zero + 2 * (gi + j));
            }
        }
        for (int j = 0; j < nb; j++) {
            __m256         s = _mm256_set1_ps(sv[j]), z = _mm256_set1_ps(zv[j]);
            const uint8_t *c = codes + (gi + j) * G / 4;
            float         *o = dst + (gi + j) * G;

            for (uint32_t i = 0; i < G; i += 8) {
                _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_mul_ps(unpack8(c + i / 4), s), z));
            }
        }
    }
}

/* ---- Walsh-Hadamard rows (D a power of two >= 8), same stage order as kvp_hd_fwht ---- */

static inline __m256 fwht8(__m256 v)
{
    __m256 sw;

    sw = _mm256_permute_ps(v, 0xB1); /* h = 1 */
    v  = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xAA);
    sw = _mm256_permute_ps(v, 0x4E); /* h = 2 */
    v  = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xCC);
    sw = _mm256_permute2f128_ps(v, v, 0x01); /* h = 4 */
    return _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xF0);
}

#define BF(a, b)                          \
    do {                                  \
        __m256 t_ = (a);                  \
        (a)       = _mm256_add_ps(t_, (b)); \
        (b)       = _mm256_sub_ps(t_, (b)); \
    } while (0)

/* D = 128 with the row in 16 registers; same pairs and stage order as the generic path. */
static inline __m256 fwht128(const float *in, float *out, __m256 c, int round16)
{
    __m256 v[16], mx = _mm256_setzero_ps(), absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));

    for (int i = 0; i < 16; i++) {
        v[i] = fwht8(_mm256_loadu_ps(in + 8 * i));
    }
    for (int i = 0; i < 16; i += 2) { /* h = 8 */
        BF(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* h = 16 */
        BF(v[i], v[i + 2]);
        BF(v[i + 1], v[i + 3]);
    }
    for (int i = 0; i < 16; i += 8) { /* h = 32 */
        BF(v[i], v[i + 4]);
        BF(v[i + 1], v[i + 5]);
        BF(v[i + 2], v[i + 6]);
        BF(v[i + 3], v[i + 7]);
    }
    for (int i = 0; i < 8; i++) { /* h = 64 */
        BF(v[i], v[i + 8]);
    }
    for (int i = 0; i < 16; i++) {
        __m256 x = _mm256_mul_ps(v[i], c);

        if (round16) {
            x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        }
        mx = _mm256_max_ps(mx, _mm256_and_ps(x, absm));
        _mm256_storeu_ps(out + 8 * i, x);
    }
    return mx;
}

static int avx2_rot_rows(const float *src, float *dst, size_t rows, uint32_t D, int round16)
{
    __m256 c = _mm256_set1_ps(kvp_hd_fwht_norm(D)), mx = _mm256_setzero_ps();
    __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));

    if (D < 8 || (D & (D - 1)) != 0) {
        return kvp_q2_ref_rot_rows(src, dst, rows, D, round16);
    }
    if (D == 128) {
        for (size_t r = 0; r < rows; r++) {
            mx = _mm256_max_ps(mx, fwht128(src + r * D, dst + r * D, c, round16));
        }
        return _mm256_movemask_ps(_mm256_cmp_ps(mx, _mm256_set1_ps(65504.0f), _CMP_LE_OQ)) == 0xFF;
    }
    for (size_t r = 0; r < rows; r++) {
        float *row = dst + r * D;

        for (uint32_t i = 0; i < D; i += 8) {
            _mm256_storeu_ps(row + i, fwht8(_mm256_loadu_ps(src + r * D + i)));
        }
        for (uint32_t h = 8; h < D; h <<= 1) {
            for (uint32_t i = 0; i < D; i += 2 * h) {
                for (uint32_t j = i; j < i + h; j += 8) {
                    __m256 a = _mm256_loadu_ps(row + j), b = _mm256_loadu_ps(row + j + h);

                    _mm256_storeu_ps(row + j, _mm256_add_ps(a, b));
                    _mm256_storeu_ps(row + j + h, _mm256_sub_ps(a, b));
                }
            }
        }
        for (uint32_t i = 0; i < D; i += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + i), c);

            if (round16) {
                v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            }
            mx = _mm256_max_ps(mx, _mm256_and_ps(v, absm));
            _mm256_storeu_ps(row + i, v);
        }
    }
    return _mm256_movemask_ps(_mm256_cmp_ps(mx, _mm256_set1_ps(65504.0f), _CMP_LE_OQ)) == 0xFF;
}

static void avx2_oscar_norm(float *x, uint32_t T, uint32_t HD, float *norms)
{
    if (HD % 8 != 0) {
        kvp_q2_ref_oscar_norm(x, T, HD, norms);
        return;
    }
    for (uint32_t t = 0; t < T; t++) {
        float *row = x + (size_t)t * HD;
        __m256 acc = _mm256_setzero_ps(), vn;
        float  a[8], n;

        for (uint32_t i = 0; i < HD; i += 8) {
            __m256 v = _mm256_loadu_ps(row + i);

            acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
        }
        _mm256_storeu_ps(a, acc);
        n        = kvp_hd_oscar_norm(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
        norms[t] = n;
        vn       = _mm256_set1_ps(n);
        for (uint32_t i = 0; i < HD; i += 8) {
            __m256 v = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(row + i), _MM_FROUND_TO_NEAREST_INT));

            v = _mm256_div_ps(v, vn);
            _mm256_storeu_ps(row + i, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
        }
    }
}

static void avx2_scale_rows(float *x, uint32_t T, uint32_t HD, const float *norms)
{
    for (uint32_t t = 0; t < T; t++) {
        float   *row = x + (size_t)t * HD;
        __m256   n   = _mm256_set1_ps(norms[t]);
        uint32_t i   = 0;

        for (; i + 8 <= HD; i += 8) {
            _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), n));
        }
        for (; i < HD; i++) {
            row[i] = row[i] * norms[t];
        }
    }
}

/* ---- KVarN: VarN and the row RTN live in kvarn_avx2.c; the dequant is here ---- */

static void avx2_kvarn_deq(const uint8_t *codes, const uint8_t *A, const uint8_t *Z,
                           const uint8_t *B, uint32_t R, uint32_t C, float *dst, size_t rs,
                           size_t cs)
{
    uint32_t run = kvp_hd_run_bytes(C);
    __m256i  m3  = _mm256_set1_epi32(3);

    if (cs == 1 && C % 8 == 0) { /* rows contiguous in dst (V) */
        for (uint32_t r = 0; r < R; r++) {
            __m256 a = _mm256_set1_ps(kvp_hd_ldh(A + 2 * (size_t)r));
            __m256 z = _mm256_set1_ps(kvp_hd_ldh(Z + 2 * (size_t)r));

            for (uint32_t c = 0; c < C; c += 8) {
                __m256 v = _mm256_add_ps(_mm256_mul_ps(unpack8(codes + (size_t)r * run + c / 4), a), z);

                _mm256_storeu_ps(dst + r * rs + c, _mm256_mul_ps(v, ld_h8(B + 2 * (size_t)c)));
            }
        }
        return;
    }
    if (rs == 1 && R % 8 == 0) { /* columns contiguous in dst (K): 8 rows per vector */
        for (uint32_t r = 0; r < R; r += 8) {
            __m256 a = ld_h8(A + 2 * (size_t)r), z = ld_h8(Z + 2 * (size_t)r);

            for (uint32_t c = 0; c < C; c += 4) {
                __m256i b = gather_bytes(codes + (size_t)r * run, run, c / 4);

                for (uint32_t j = 0; j < 4 && c + j < C; j++) {
                    __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b, (int)(2 * j)), m3));
                    __m256 v = _mm256_add_ps(_mm256_mul_ps(q, a), z);

                    _mm256_storeu_ps(dst + (size_t)(c + j) * cs + r,
                                     _mm256_mul_ps(v, _mm256_set1_ps(kvp_hd_ldh(B + 2 * (size_t)(c + j)))));
                }
            }
        }
        return;
    }
    kvp_q2_ref_kvarn_deq(codes, A, Z, B, R, C, dst, rs, cs);
}

const kvp_q2_kern_t kvp_q2_avx2 = {
    .impl        = "avx2",
    .chan_encode = avx2_chan_encode,
    .chan_decode = avx2_chan_decode,
    .tok_encode  = avx2_tok_encode,
    .tok_decode  = avx2_tok_decode,
    .rot_rows    = avx2_rot_rows,
    .oscar_norm  = avx2_oscar_norm,
    .scale_rows  = avx2_scale_rows,
    .varn        = kvp_q2_avx2_varn,
    .kvarn_rtn   = kvp_q2_avx2_kvarn_rtn,
    .kvarn_deq   = avx2_kvarn_deq,
};
