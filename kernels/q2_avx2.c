/* q2_avx2.c - AVX2+F16C twin of the 2-bit primitives (kvp_q2_avx2), compiled with
 * ${KVP_AVX2_FLAGS} and -ffp-contract=off, selected at run time (codec_dispatch.c).
 * Bit-exact with q2_ref.c for the group quantizers, Hadamard rows, OScaR norm and the KVarN RTN
 * (same operations in the same order: mul then add, IEEE div, round-half-even). VarN is the one
 * deliberate difference: it multiplies by reciprocal scales and takes row/column statistics in
 * one shifted pass, deriving the post-update row std analytically, so its fp32 scales differ
 * from the reference by a few ulps (and a near-tie in the best-iteration choice may pick a
 * neighbouring iteration); tests bound the effect on codes and values.
 * Shapes the twin does not vectorise (D % 8 != 0) fall back to the reference. */
#include "codec_ops.h"
#include "quant_hd.h"
#include "q2_int.h"

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

static inline __m256 rint8(__m256 x)
{
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
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

/* 2 bytes of a run (8 codes) -> 8 floats. */
static inline __m256 unpack8(const uint8_t *in)
{
    __m256i w = _mm256_set1_epi32(in[0] | (in[1] << 8));

    w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    return _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(3)));
}

/* Group parameters of 8 lanes (mn, mx) under a rule: scale s, zero z (both as stored before fp16
 * rounding) and what the code needs (a = inv or 1/ks path, b = zq or mn). */
typedef struct {
    __m256 s, z, inv, zq, mn, zero_mask;
} params8_t;

static inline params8_t params8(kvp_q2_rule_t rule, __m256 mn, __m256 mx)
{
    params8_t p;
    __m256    three = _mm256_set1_ps(KVP_Q2_MAX), zero = _mm256_setzero_ps();

    if (rule == KVP_Q2_RULE_KIVI) {
        p.s         = _mm256_div_ps(_mm256_sub_ps(mx, mn), three);
        p.z         = mn;
        p.mn        = mn;
        p.zero_mask = _mm256_cmp_ps(p.s, zero, _CMP_EQ_OQ);
        p.inv = p.zq = zero;
    } else {
        __m256 eq = _mm256_cmp_ps(mn, mx, _CMP_EQ_OQ);
        __m256 z0 = _mm256_and_ps(eq, _mm256_cmp_ps(mn, zero, _CMP_EQ_OQ));
        __m256 cst = _mm256_andnot_ps(z0, eq);
        __m256 lo = _mm256_blendv_ps(mn, _mm256_set1_ps(-1.0f), z0);
        __m256 hi = _mm256_blendv_ps(mx, _mm256_set1_ps(1.0f), z0);
        __m256 rg = _mm256_sub_ps(hi, lo);
        __m256 s = _mm256_div_ps(rg, three);
        __m256 inv = _mm256_div_ps(three, rg);
        __m256 neg = _mm256_set1_ps(-0.0f); /* unary minus as in C: flip the sign bit */
        __m256 zq = rint8(_mm256_div_ps(_mm256_xor_ps(lo, neg), s));
        __m256 zd = _mm256_mul_ps(_mm256_xor_ps(zq, neg), s);

        p.s   = _mm256_blendv_ps(s, zero, cst);
        p.inv = _mm256_blendv_ps(inv, zero, cst);
        p.zq  = _mm256_blendv_ps(zq, zero, cst);
        p.z   = _mm256_blendv_ps(zd, mn, cst);
        p.mn  = mn;
        p.zero_mask = zero; /* codes of a constant group come out 0 from inv = zq = 0 */
    }
    return p;
}

static inline __m256i codes8(kvp_q2_rule_t rule, const params8_t *p, __m256 x)
{
    __m256 t;

    if (rule == KVP_Q2_RULE_KIVI) {
        t = rint8(clamp03(_mm256_div_ps(_mm256_sub_ps(x, p->mn), p->s)));
        t = _mm256_andnot_ps(p->zero_mask, t);
    } else {
        t = clamp03(rint8(_mm256_add_ps(_mm256_mul_ps(x, p->inv), p->zq)));
    }
    return _mm256_cvttps_epi32(t);
}

/* ---- per-channel groups along tokens, 8 channels per vector ---- */

static void avx2_chan_encode(const float *src, size_t stride, uint32_t T, uint32_t D, uint32_t G,
                             kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    uint32_t run = kvp_hd_run_bytes(T);

    if (D % 8 != 0 || G % 4 != 0) {
        kvp_q2_ref_chan_encode(src, stride, T, D, G, rule, codes, scale, zero);
        return;
    }
    for (uint32_t t0 = 0, g = 0; t0 < T; t0 += G, g++) {
        uint32_t t1 = t0 + G < T ? t0 + G : T;

        for (uint32_t d = 0; d < D; d += 8) {
            __m256    mn = _mm256_loadu_ps(src + (size_t)t0 * stride + d), mx = mn;
            params8_t p;

            for (uint32_t t = t0 + 1; t < t1; t++) {
                __m256 x = _mm256_loadu_ps(src + (size_t)t * stride + d);

                mn = _mm256_min_ps(mn, x);
                mx = _mm256_max_ps(mx, x);
            }
            p = params8(rule, mn, mx);
            st_h8(scale + 2 * ((size_t)g * D + d), p.s);
            st_h8(zero + 2 * ((size_t)g * D + d), p.z);
            for (uint32_t t = t0; t < t1; t += 4) {
                __m256i byte = _mm256_setzero_si256();
                uint8_t b[32];

                for (uint32_t j = 0; j < 4 && t + j < t1; j++) {
                    __m256i q = codes8(rule, &p, _mm256_loadu_ps(src + (size_t)(t + j) * stride + d));

                    byte = _mm256_or_si256(byte, _mm256_slli_epi32(q, (int)(2 * j)));
                }
                _mm256_storeu_si256((__m256i *)(void *)b, byte);
                for (uint32_t i = 0; i < 8; i++) {
                    codes[(size_t)(d + i) * run + t / 4] = b[4 * i];
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
    uint32_t run = kvp_hd_run_bytes(T);
    __m256i  m3  = _mm256_set1_epi32(3);

    if (D % 8 != 0 || G % 4 != 0) {
        kvp_q2_ref_chan_decode(codes, scale, zero, T, D, G, dst, stride);
        return;
    }
    for (uint32_t d = 0; d < D; d += 8) {
        const uint8_t *c8 = codes + (size_t)d * run;

        for (uint32_t t0 = 0, g = 0; t0 < T; t0 += G, g++) {
            uint32_t t1 = t0 + G < T ? t0 + G : T;
            __m256   s  = ld_h8(scale + 2 * ((size_t)g * D + d));
            __m256   z  = ld_h8(zero + 2 * ((size_t)g * D + d));

            for (uint32_t t = t0; t < t1; t += 4) {
                __m256i b = gather_bytes(c8, run, t / 4);

                for (uint32_t j = 0; j < 4 && t + j < t1; j++) {
                    __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b, (int)(2 * j)), m3));

                    _mm256_storeu_ps(dst + (size_t)(t + j) * stride + d,
                                     _mm256_add_ps(_mm256_mul_ps(q, s), z));
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

static void avx2_tok_encode(const float *src, size_t rows, uint32_t D, uint32_t G,
                            kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    uint32_t run = kvp_hd_run_bytes(D), ng = D / G;

    if (G % 8 != 0) {
        kvp_q2_ref_tok_encode(src, rows, D, G, rule, codes, scale, zero);
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        const float *x = src + r * D;

        for (uint32_t g = 0; g < ng; g++) {
            __m256    vmn = _mm256_loadu_ps(x + g * G), vmx = vmn;
            float     mn, mx, sv[8], zv[8];
            params8_t p;

            for (uint32_t i = g * G + 8; i < (g + 1) * G; i += 8) {
                __m256 v = _mm256_loadu_ps(x + i);

                vmn = _mm256_min_ps(vmn, v);
                vmx = _mm256_max_ps(vmx, v);
            }
            mn = hmin8(vmn);
            mx = hmax8(vmx);
            p  = params8(rule, _mm256_set1_ps(mn), _mm256_set1_ps(mx));
            _mm256_storeu_ps(sv, p.s);
            _mm256_storeu_ps(zv, p.z);
            kvp_hd_sth(scale + 2 * (r * ng + g), sv[0]);
            kvp_hd_sth(zero + 2 * (r * ng + g), zv[0]);
            for (uint32_t i = g * G; i < (g + 1) * G; i += 8) {
                pack8(codes8(rule, &p, _mm256_loadu_ps(x + i)), codes + r * run + i / 4);
            }
        }
    }
}

static void avx2_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                            size_t rows, uint32_t D, uint32_t G, float *dst)
{
    uint32_t run = kvp_hd_run_bytes(D), ng = D / G;

    if (G % 8 != 0) {
        kvp_q2_ref_tok_decode(codes, scale, zero, rows, D, G, dst);
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        for (uint32_t g = 0; g < ng; g++) {
            __m256 s = _mm256_set1_ps(kvp_hd_ldh(scale + 2 * (r * ng + g)));
            __m256 z = _mm256_set1_ps(kvp_hd_ldh(zero + 2 * (r * ng + g)));

            for (uint32_t i = g * G; i < (g + 1) * G; i += 8) {
                _mm256_storeu_ps(dst + r * D + i,
                                 _mm256_add_ps(_mm256_mul_ps(unpack8(codes + r * run + i / 4), s), z));
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

static void avx2_rot_rows(float *x, size_t rows, uint32_t D, int round16)
{
    __m256 c = _mm256_set1_ps(kvp_hd_fwht_norm(D));

    if (D < 8 || (D & (D - 1)) != 0) {
        kvp_q2_ref_rot_rows(x, rows, D, round16);
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        float *row = x + r * D;

        for (uint32_t i = 0; i < D; i += 8) {
            _mm256_storeu_ps(row + i, fwht8(_mm256_loadu_ps(row + i)));
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
            _mm256_storeu_ps(row + i, v);
        }
    }
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

/* ---- VarN: one shifted pass per axis, reciprocal scales ---- */

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float shifted_std(float sum, float sq, uint32_t n)
{
    float var;

    if (n < 2) {
        return 0.0f;
    }
    var = (sq - sum * sum / (float)n) / (float)(n - 1);
    return sqrtf(var > 0.0f ? var : 0.0f);
}

/* out[r] = std over c of X[r][c] * ic[c] */
static void row_pass(const float *X, uint32_t R, uint32_t C, const float *ic, float *out)
{
    for (uint32_t r = 0; r < R; r++) {
        const float *x = X + (size_t)r * C;
        float        k = x[0] * ic[0], sum, sq;
        __m256       vk = _mm256_set1_ps(k), vs = _mm256_setzero_ps(), vq = vs;
        uint32_t     c = 0;

        for (; c + 8 <= C; c += 8) {
            __m256 d = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(ic + c)), vk);

            vs = _mm256_add_ps(vs, d);
            vq = _mm256_add_ps(vq, _mm256_mul_ps(d, d));
        }
        sum = hsum8(vs);
        sq  = hsum8(vq);
        for (; c < C; c++) {
            float d = x[c] * ic[c] - k;

            sum += d;
            sq += d * d;
        }
        out[r] = shifted_std(sum, sq, C);
    }
}

/* out[c] = std over r of X[r][c] * ir[r] */
static void col_pass(const float *X, uint32_t R, uint32_t C, const float *ir, float *out)
{
    uint32_t c = 0;

    for (; c + 16 <= C; c += 16) {
        __m256 k0 = _mm256_mul_ps(_mm256_loadu_ps(X + c), _mm256_set1_ps(ir[0]));
        __m256 k1 = _mm256_mul_ps(_mm256_loadu_ps(X + c + 8), _mm256_set1_ps(ir[0]));
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, q0 = s0, q1 = s0;
        float  a[8], b[8], e[8], f[8];

        for (uint32_t r = 0; r < R; r++) {
            __m256 w  = _mm256_set1_ps(ir[r]);
            __m256 d0 = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(X + (size_t)r * C + c), w), k0);
            __m256 d1 = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(X + (size_t)r * C + c + 8), w), k1);

            s0 = _mm256_add_ps(s0, d0);
            s1 = _mm256_add_ps(s1, d1);
            q0 = _mm256_add_ps(q0, _mm256_mul_ps(d0, d0));
            q1 = _mm256_add_ps(q1, _mm256_mul_ps(d1, d1));
        }
        _mm256_storeu_ps(a, s0);
        _mm256_storeu_ps(b, s1);
        _mm256_storeu_ps(e, q0);
        _mm256_storeu_ps(f, q1);
        for (int i = 0; i < 8; i++) {
            out[c + i]     = shifted_std(a[i], e[i], R);
            out[c + 8 + i] = shifted_std(b[i], f[i], R);
        }
    }
    for (; c < C; c++) {
        float k = X[c] * ir[0], sum = 0.0f, sq = 0.0f;

        for (uint32_t r = 0; r < R; r++) {
            float d = X[(size_t)r * C + c] * ir[r] - k;

            sum += d;
            sq += d * d;
        }
        out[c] = shifted_std(sum, sq, R);
    }
}

static float imb_of(const float *colstd, uint32_t C, const float *rowstd, uint32_t R)
{
    float cmx = colstd[0], cmn = colstd[0], rmx = rowstd[0], rmn = rowstd[0];

    for (uint32_t c = 1; c < C; c++) {
        cmx = colstd[c] > cmx ? colstd[c] : cmx;
        cmn = colstd[c] < cmn ? colstd[c] : cmn;
    }
    for (uint32_t r = 1; r < R; r++) {
        rmx = rowstd[r] > rmx ? rowstd[r] : rmx;
        rmn = rowstd[r] < rmn ? rowstd[r] : rmn;
    }
    return kvp_hd_ratio(cmx, cmn) + kvp_hd_ratio(rmx, rmn);
}

static void avx2_varn(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                      float *Sr, float *work)
{
    float *Lc = work, *Lr = Lc + C, *ic = Lr + R, *ir = ic + C;
    float *colstd = ir + R, *rowstd = colstd + C, *raw = rowstd + R, *rawc = raw + R;
    float  best;

    for (uint32_t c = 0; c < C; c++) {
        Lc[c] = 0.0f;
        ic[c] = 1.0f;
        Sc[c] = 1.0f;
    }
    for (uint32_t r = 0; r < R; r++) {
        Lr[r] = 0.0f;
        ir[r] = 1.0f;
        Sr[r] = 1.0f;
    }
    col_pass(X, R, C, ir, colstd);
    row_pass(X, R, C, ic, rowstd);
    best = imb_of(colstd, C, rowstd, R);
    for (uint32_t it = 0; it < iters; it++) {
        float imb;

        for (uint32_t c = 0; c < C; c++) {
            Lc[c] = kvp_hd_varn_step(Lc[c], colstd[c]);
            ic[c] = expf(-Lc[c]);
        }
        row_pass(X, R, C, ic, raw); /* std of X*ic per row; times ir = std of cur */
        for (uint32_t r = 0; r < R; r++) {
            Lr[r] = kvp_hd_varn_step(Lr[r], raw[r] * ir[r]);
            ir[r] = expf(-Lr[r]);
            rowstd[r] = raw[r] * ir[r];
        }
        col_pass(X, R, C, ir, rawc);
        for (uint32_t c = 0; c < C; c++) {
            colstd[c] = rawc[c] * ic[c];
        }
        imb = imb_of(colstd, C, rowstd, R);
        if (imb <= best) {
            best = imb;
            for (uint32_t c = 0; c < C; c++) {
                Sc[c] = expf(Lc[c]);
            }
            for (uint32_t r = 0; r < R; r++) {
                Sr[r] = expf(Lr[r]);
            }
        }
    }
}

/* ---- KVarN RTN and dequant ---- */

static void avx2_kvarn_rtn(const float *X, uint32_t R, uint32_t C, const float *Sc,
                           const float *Sr, uint8_t *codes, uint8_t *A, uint8_t *Z, uint8_t *B)
{
    uint32_t run = kvp_hd_run_bytes(C);

    if (C % 8 != 0) {
        kvp_q2_ref_kvarn_rtn(X, R, C, Sc, Sr, codes, A, Z, B);
        return;
    }
    for (uint32_t r = 0; r < R; r++) {
        const float *x = X + (size_t)r * C;
        __m256       sr = _mm256_set1_ps(Sr[r]), vmn, vmx, vlo, vs;
        float        lo, hi, s;

        vmn = vmx = _mm256_div_ps(_mm256_div_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(Sc)), sr);
        for (uint32_t c = 8; c < C; c += 8) {
            __m256 b = _mm256_div_ps(_mm256_div_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(Sc + c)), sr);

            vmn = _mm256_min_ps(vmn, b);
            vmx = _mm256_max_ps(vmx, b);
        }
        lo  = hmin8(vmn);
        hi  = hmax8(vmx);
        s   = kvp_hd_kvarn_scale(lo, hi);
        vlo = _mm256_set1_ps(lo);
        vs  = _mm256_set1_ps(s);
        for (uint32_t c = 0; c < C; c += 8) {
            __m256 b = _mm256_div_ps(_mm256_div_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(Sc + c)), sr);
            __m256 q = clamp03(rint8(_mm256_div_ps(_mm256_sub_ps(b, vlo), vs)));

            pack8(_mm256_cvttps_epi32(q), codes + (size_t)r * run + c / 4);
        }
        kvp_hd_sth(A + 2 * (size_t)r, Sr[r] * s);
        kvp_hd_sth(Z + 2 * (size_t)r, Sr[r] * lo);
    }
    for (uint32_t c = 0; c < C; c += 8) {
        st_h8(B + 2 * (size_t)c, _mm256_loadu_ps(Sc + c));
    }
}

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
    .varn        = avx2_varn,
    .kvarn_rtn   = avx2_kvarn_rtn,
    .kvarn_deq   = avx2_kvarn_deq,
};
