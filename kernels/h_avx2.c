/* h_avx2.c - fused fp16 stages of the rotating codecs (AVX2+F16C): Walsh-Hadamard straight
 * from fp16 input (fp32 math, the reference's stage order; the OScaR token norm and the fp16
 * rounding fused in), and the ORIGINAL-frame decoders that dequantize, undo the norm and the
 * rotation in registers and store fp16 (saturating at +-65504 where a bound says a row may pass
 * it). Same IEEE operations in the same order as q2_ref.c, so results are bit-identical;
 * D = 128 keeps a head in 16 registers, other powers of two >= 8 run through a row buffer. */
#include "codec_ops.h"
#include "q2h_int.h"
#include "quant_hd.h"
#include "avx2_int.h"

#include <immintrin.h>
#include <string.h>

#define AINL inline __attribute__((always_inline))
#define ROW_MAX_VEC 128 /* D <= 1024 */

/* Stages h = 1, 2, 4 inside one vector: x[j] + x[j+h] and x[j] - x[j+h] as one fma with +-1
 * (the product by 1 is exact, so each lane is the same single rounding as the add or sub);
 * fmas run on the multiply pipes, leaving the add pipes to the cross-vector stages. */
static AINL __m256 fwht8(__m256 v)
{
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 s2  = _mm256_setr_ps(1.0f, 1.0f, -1.0f, -1.0f, 1.0f, 1.0f, -1.0f, -1.0f);
    __m256 s4  = _mm256_setr_ps(1.0f, 1.0f, 1.0f, 1.0f, -1.0f, -1.0f, -1.0f, -1.0f);

    v = _mm256_fmsubadd_ps(_mm256_permute_ps(v, 0xB1), one, v); /* even: sw + v, odd: sw - v */
    v = _mm256_fmadd_ps(v, s2, _mm256_permute_ps(v, 0x4E));
    return _mm256_fmadd_ps(v, s4, _mm256_permute2f128_ps(v, v, 0x01));
}

/* a, b = a + b, a - b; FM: the sub on an fma pipe */
#define BFM(a, b)                                                          \
    do {                                                                   \
        __m256 t_ = (a);                                                   \
        (a)       = _mm256_add_ps(t_, (b));                                \
        (b)       = _mm256_fnmadd_ps((b), _mm256_set1_ps(1.0f), t_);       \
    } while (0)

/* for (i = 0; i < n; i++) BODY, fully unrolled when n is a compile-time constant (the D = 128
 * and D = 64 rows, which then live in registers), a plain loop otherwise (other D, cold) */
#define ROW_FOR(i, n, ...)                                                                         \
    do {                                                                                           \
        if (__builtin_constant_p(n)) {                                                             \
            _Pragma("GCC unroll 16") for (uint32_t i = 0; i < (n); i++) {                          \
                __VA_ARGS__                                                                        \
            }                                                                                      \
        } else {                                                                                   \
            for (uint32_t i = 0; i < (n); i++) { __VA_ARGS__ }                                     \
        }                                                                                          \
    } while (0)

/* one cross-vector stage: v[j], v[j + h] = sum, difference, j in blocks of 2h (none if h >= nv) */
static AINL void fwht_stage(__m256 *v, uint32_t nv, uint32_t h)
{
    if (h >= nv) {
        return;
    }
    ROW_FOR(b, nv / (2 * h), ROW_FOR(k, h, BFM(v[2 * h * b + k], v[2 * h * b + k + h]);););
}

/* Walsh-Hadamard of a row of 8*nv values in v (nv a power of two <= ROW_MAX_VEC), then * c. With
 * nv a constant (16 for D = 128, 8 for D = 64) every loop unrolls, the row stays in registers. */
static AINL void fwht_v(__m256 *v, uint32_t nv, __m256 c)
{
    ROW_FOR(i, nv, v[i] = fwht8(v[i]););
    fwht_stage(v, nv, 1); /* spelled out: each stage's h a constant */
    fwht_stage(v, nv, 2);
    fwht_stage(v, nv, 4);
    fwht_stage(v, nv, 8);
    fwht_stage(v, nv, 16);
    fwht_stage(v, nv, 32);
    fwht_stage(v, nv, 64); /* ROW_MAX_VEC = 128 */
    ROW_FOR(i, nv, v[i] = _mm256_mul_ps(v[i], c););
}

/* A row's vectors: 16 or 8 for D = 128 or 64, constants, so the inlined row code unrolls and
 * keeps the row in registers; any other D through CALL_ANY (a not-inlined instance of the same
 * row code, so its variable-count copy stays out of the hot loops). */
#define ROW_NV_DISPATCH(D, CALL, CALL_ANY)                                                         \
    do {                                                                                           \
        if ((D) == 128) {                                                                          \
            CALL(16);                                                                              \
        } else if ((D) == 64) {                                                                    \
            CALL(8);                                                                               \
        } else {                                                                                   \
            CALL_ANY((D) / 8);                                                                     \
        }                                                                                          \
    } while (0)
#define KVP_COLD static __attribute__((noinline, cold))

static AINL __m256 ldh(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* one fp16 at an unaligned address (F16C) */
static AINL float ldh1(const uint8_t *p)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(p[0] | (p[1] << 8))));
}

static AINL __m128i f16x8(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }

static AINL void sth(uint16_t *p, __m256 v)
{
    _mm_storeu_si128((__m128i *)(void *)p, f16x8(v));
}

/* A decoder's output row of nv vectors: saturating at +-65504 (kvp_f16x8_sat) when sat is set.
 * The caller sets it from a bound (row_may_pass), keeping the clamp off the rows of ordinary KV,
 * which cannot reach the fp16 limit: clamping every row cost ~10% of OScaR's fp16 decode
 * (bench codec decode_vs_memcpy 0.41 -> 0.37; with the bound 0.415 against 0.415). */
static AINL void st_row(uint16_t *dst, const __m256 *v, uint32_t nv, int sat)
{
    if (sat) {
        ROW_FOR(i, nv, {
            _mm_storeu_si128((__m128i *)(void *)(dst + 8 * i), kvp_f16x8_sat(v[i]));
        });
    } else {
        ROW_FOR(i, nv, {
            sth(dst + 8 * i, v[i]);
        });
    }
}

/* 1 when a row of values within +-amax, rotated back (c = 1/sqrt(D)), may pass +-65504: each
 * output of the orthonormal Hadamard is at most sqrt(D) max|x| (1e-3 of slack for fp32 sums). */
static AINL int row_may_pass(float amax, __m256 c)
{
    return amax * 1.001f >= 65504.0f * _mm256_cvtss_f32(c);
}

/* max over lanes of |z| + 3|s|: a bound on |q*s + z|, q = 0..3 */
static AINL __m256 qz_bound(__m256 s, __m256 z)
{
    __m256 nosign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));

    return _mm256_fmadd_ps(_mm256_and_ps(s, nosign), _mm256_set1_ps(3.0f), _mm256_and_ps(z, nosign));
}

static AINL float hmax8(__m256 x)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));

    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

/* the qz_bound of n groups' fp16 scales and zeros */
static float qz_max(const uint8_t *scale, const uint8_t *zero, size_t n)
{
    __m256 am = _mm256_setzero_ps();
    size_t i  = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(scale + 2 * i)));
        __m256 z = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(zero + 2 * i)));

        am = _mm256_max_ps(am, qz_bound(s, z));
    }
    for (; i < n; i++) {
        am = _mm256_max_ps(am, qz_bound(_mm256_set1_ps(ldh1(scale + 2 * i)),
                                        _mm256_set1_ps(ldh1(zero + 2 * i))));
    }
    return hmax8(am);
}

int kvp_q2h_rot_ok(uint32_t D) { return D >= 8 && D <= 8 * ROW_MAX_VEC && (D & (D - 1)) == 0; }

/* ---- encode side ---- */

/* one head x of a token rotated and rounded to fp16 into row; squares (fp32) into *acc and,
 * when chk, the largest |x| bits (fp32 as int32: NaN and Inf above every finite value) into
 * *amax */
static AINL void rot_norm_head(const uint16_t *x, uint32_t nv, __m256 c, uint16_t *row, __m256 *acc,
                               int chk, __m256i *amax)
{
    __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
    __m256  v[ROW_MAX_VEC], a = *acc; /* locals: no store-load chain through *acc */
    __m256i m = *amax;

    ROW_FOR(i, nv, {
        v[i] = ldh(x + 8 * i);
    });
    fwht_v(v, nv, c);
    ROW_FOR(i, nv, { /* striped sumsq */
        if (chk) {
            m = _mm256_max_epi32(m, _mm256_and_si256(_mm256_castps_si256(v[i]), absm));
        }
        a = _mm256_add_ps(a, _mm256_mul_ps(v[i], v[i]));
        sth(row + 8 * i, v[i]); /* f16(x): the norm pass divides it */
    });
    *acc  = a;
    *amax = m;
}

KVP_COLD void rot_norm_head_any(const uint16_t *x, uint32_t nv, __m256 c, uint16_t *row, __m256 *acc)
{
    __m256i unused = _mm256_setzero_si256();

    rot_norm_head(x, nv, c, row, acc, 0, &unused);
}

/* Every rotated value of a token within +-65504 (fp32), the reference's check. The norm pass
 * needs it only for a token whose sum of squares ss is not below KVP_ROT_SS_SURE: ss >= v^2
 * (1 - 2^-9) for each value v of the token (positive terms, fewer than 2^15 fp32 roundings in a
 * lane at H*D <= 2^18), so ss < 4.2e9 < 65504^2 (1 - 2^-9) proves every |v| <= 65504, and NaN
 * or Inf fail the compare.
 * Cold: real KV has ss near 1 (checking each value cost 2 of the row's ~20 ops per vector). The
 * token is rotated again; row gets the same f16(x) it already holds. */
#define KVP_ROT_SS_SURE 4.2e9f
KVP_COLD int rot_token_in_range(const uint16_t *x, uint32_t H, uint32_t D, __m256 c, uint16_t *row)
{
    __m256i amax = _mm256_setzero_si256();
    __m256  acc  = _mm256_setzero_ps();

    for (uint32_t h = 0; h < H; h++) {
        rot_norm_head(x + (size_t)h * D, D / 8, c, row + (size_t)h * D, &acc, 1, &amax);
    }
    return _mm256_testz_si256(_mm256_cmpgt_epi32(amax, _mm256_set1_epi32(0x477FE000)), /* 65504 */
                              _mm256_set1_epi32(-1));
}

/* tokens ahead whose K row is prefetched into L1: the hardware prefetcher alone left the
 * page's first read of K waiting on DRAM (147.5 -> 130 us per cold H8 D128 P128 page on Zen 5;
 * 2 to 8 ahead measured alike, 2 best) */
#define KVP_ROT_NORM_PF 2u
/* f16(f16(x) / n) of nv vectors: the division of the norm pass. vdivps is the one slow op here
 * (~2.5 cycles per vector, its own unit): dividing token t - 1 head by head while token t is
 * rotated keeps the divider busy beside the rotation, instead of a divider-bound pass after each
 * token (in-cache H8 D128 P128 page on Zen 5: rot_norm 38.7 -> 34.0 us; the rounded f16(x) kept
 * instead of the fp32 row saves a conversion; cold pages 120 -> 115.5 us) */
static AINL void div_norm(const uint16_t *row16, uint32_t nv, __m256 vn, uint16_t *out)
{
    for (uint32_t i = 0; i < nv; i++) {
        sth(out + 8 * i, _mm256_div_ps(ldh(row16 + 8 * i), vn));
    }
}

int kvp_q2h_oscar_rot_norm(const uint16_t *k, uint32_t T, uint32_t H, uint32_t D, float *row,
                           uint16_t *out, float *norms)
{
    __m256    c  = _mm256_set1_ps(kvp_hd_fwht_norm(D));
    __m256i   unused = _mm256_setzero_si256();
    int       ok = 1;
    __m256    vp = _mm256_set1_ps(1.0f); /* token t - 1's norm */
    uint32_t  HD = H * D;
    uint16_t *r16[2] = {(uint16_t *)(void *)row, (uint16_t *)(void *)row + HD}; /* f16(x) */

    for (uint32_t t = 0; t < T; t++) {
        const uint16_t *x   = k + (size_t)t * HD;
        uint16_t       *cur = r16[t & 1], *prv = r16[(t & 1) ^ 1];
        __m256          acc = _mm256_setzero_ps();
        float           a[8], ss, n;

        if (t + KVP_ROT_NORM_PF < T) { /* a later token's row on its way from DRAM */
            const char *nx = (const char *)(x + (size_t)KVP_ROT_NORM_PF * HD);

            for (uint32_t o = 0; o < 2 * HD; o += 64) {
                _mm_prefetch(nx + o, _MM_HINT_T0);
            }
        }

        for (uint32_t h = 0; h < H; h++) {
#define ROT_NORM_HEAD(nv)                                                                          \
    rot_norm_head(x + (size_t)h * D, (nv), c, cur + (size_t)h * D, &acc, 0, &unused)
#define ROT_NORM_ANY(nv) rot_norm_head_any(x + (size_t)h * D, (nv), c, cur + (size_t)h * D, &acc)
            ROW_NV_DISPATCH(D, ROT_NORM_HEAD, ROT_NORM_ANY);
#undef ROT_NORM_HEAD
#undef ROT_NORM_ANY
            if (t > 0) { /* the divider works on token t - 1 beside this token's rotation */
                div_norm(prv + (size_t)h * D, D / 8, vp, out + ((size_t)t - 1) * HD + (size_t)h * D);
            }
        }
        _mm256_storeu_ps(a, acc);
        ss = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        if (!(ss < KVP_ROT_SS_SURE)) {
            ok &= rot_token_in_range(x, H, D, c, cur);
        }
        n        = kvp_hd_oscar_norm(ss);
        norms[t] = n;
        vp       = _mm256_set1_ps(n);
    }
    if (T > 0) {
        div_norm(r16[(T - 1) & 1], HD / 8, vp, out + (size_t)(T - 1) * HD);
    }
    return ok;
}

/* one row x (fp16) rotated and rounded to fp16, stored at out as fp16 or, f32 set, as fp32 (the
 * KVarN tiles, whose Inf/NaN lanes, out of fp16 range, go into *bad). fp16 out is not checked:
 * its one reader, the OScaR V quantizer, sees Inf/NaN as keys out of range at no cost (checking
 * here was 3 of the row's ~19 ops per vector) */
static AINL void rot_row16(const uint16_t *x, uint32_t nv, __m256 c, void *out, int f32,
                           __m128i *bad)
{
    __m128i em = _mm_set1_epi16(0x7C00);
    __m256  v[ROW_MAX_VEC];

    ROW_FOR(i, nv, {
        v[i] = ldh(x + 8 * i);
    });
    fwht_v(v, nv, c);
    ROW_FOR(i, nv, {
        __m128i h = f16x8(v[i]);

        if (f32) {
            *bad = _mm_or_si128(*bad, _mm_cmpeq_epi16(_mm_and_si128(h, em), em));
            _mm256_storeu_ps((float *)out + 8 * i, _mm256_cvtph_ps(h));
        } else {
            _mm_storeu_si128((__m128i *)out + i, h);
        }
    });
}

KVP_COLD void rot_row16_any(const uint16_t *x, uint32_t nv, __m256 c, void *out, int f32,
                            __m128i *bad)
{
    rot_row16(x, nv, c, out, f32, bad);
}

/* rows of D fp16 into L1 (the strided rows of a head defeat the hardware prefetchers) */
static AINL void pf_rows(const uint16_t *p, size_t stride, uint32_t rows, uint32_t D)
{
    for (uint32_t i = 0; i < rows; i++) {
        for (uint32_t o = 0; o < D; o += 32) {
            _mm_prefetch((const char *)(p + i * stride + o), _MM_HINT_T0);
        }
    }
}

/* rows of D fp16 (stride apart) rotated and rounded to fp16 into out (rows of D, fp16 or, f32
 * set, fp32), each row prefetched 8 ahead when pf is set; f32: 0 when a value overflows (or
 * NaN) */
static AINL int rot_rows(const uint16_t *src, size_t stride, size_t rows, uint32_t D, void *out,
                         int f32, int pf)
{
    __m256  c   = _mm256_set1_ps(kvp_hd_fwht_norm(D));
    __m128i bad = _mm_setzero_si128();

#define ROT_ROWS(row_fn, nv)                                                                       \
    for (size_t r = 0; r < rows; r++) {                                                            \
        if (pf && r + 8 < rows) {                                                                  \
            pf_rows(src + (r + 8) * stride, stride, 1, D);                                         \
        }                                                                                          \
        row_fn(src + r * stride, (nv), c,                                                          \
               f32 ? (void *)((float *)out + r * D) : (void *)((uint16_t *)out + r * D), f32,      \
               &bad);                                                                              \
    }
#define ROT_ROWS_FAST(nv) ROT_ROWS(rot_row16, nv)
#define ROT_ROWS_ANY(nv)  ROT_ROWS(rot_row16_any, nv)
    ROW_NV_DISPATCH(D, ROT_ROWS_FAST, ROT_ROWS_ANY);
#undef ROT_ROWS
#undef ROT_ROWS_FAST
#undef ROT_ROWS_ANY
    return _mm_testz_si128(bad, bad);
}

void kvp_q2h_rot16(const uint16_t *in, size_t rows, uint32_t D, uint16_t *out)
{
    (void)rot_rows(in, D, rows, D, out, 0, 1);
}

/* ---- decode side: dequantize, (norm), inverse rotation, fp16 ---- */

/* one dequantized row x (fp32), times n when scaled, rotated back, fp16 into dst (saturating
 * when sat) */
static AINL void deq_rot_row(const float *x, uint32_t nv, int scaled, __m256 n, __m256 c,
                             int sat, uint16_t *dst)
{
    __m256 v[ROW_MAX_VEC];

    ROW_FOR(i, nv, {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        if (scaled) {
            v[i] = _mm256_mul_ps(v[i], n);
        }
    });
    fwht_v(v, nv, c);
    st_row(dst, v, nv, sat);
}

KVP_COLD void deq_rot_row_any(const float *x, uint32_t nv, int scaled, __m256 n, __m256 c,
                             int sat, uint16_t *dst)
{
    deq_rot_row(x, nv, scaled, n, c, sat, dst);
}

/* One head of per-channel groups along tokens; row t of the head at dst + t*stride. norms NULL:
 * no scaling. The fp32 dequant of a group of 32 tokens is staged in tile (32*D floats). */
void kvp_q2h_chan_decode_rot(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                             uint32_t T, uint32_t D, uint32_t G, const float *norms, float *tile,
                             uint16_t *dst, size_t stride)
{
    uint32_t run = kvp_hd_run_bytes(T);
    __m256   c   = _mm256_set1_ps(kvp_hd_fwht_norm(D));
    __m256i  m3  = _mm256_set1_epi32(3);

    for (uint32_t t0 = 0, g = 0; t0 < T; t0 += G, g++) {
        uint32_t t1 = t0 + G < T ? t0 + G : T;

        for (uint32_t s0 = t0; s0 < t1; s0 += 32) {
            uint32_t s1 = s0 + 32 < t1 ? s0 + 32 : t1, nb = (s1 - s0 + 3) / 4;
            __m256   am = _mm256_setzero_ps();
            float    gmax;

            for (uint32_t b = 0; b < D / 16; b++) { /* dequant 16 channels x up to 32 tokens */
                __m256i q[8];
                size_t  p  = 2 * ((size_t)g * D + 16 * b);
                __m256  sl = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(scale + p)));
                __m256  sh = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(scale + p + 16)));
                __m256  zl = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(zero + p)));
                __m256  zh = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(zero + p + 16)));

                am = _mm256_max_ps(am, _mm256_max_ps(qz_bound(sl, zl), qz_bound(sh, zh)));
                kvp_q2h_load_quads(codes + (size_t)16 * b * run + s0 / 4, run, nb, q);
                for (uint32_t t = s0; t < s1; t++) {
                    __m256i cq = q[(t - s0) / 4];
                    __m128i sh2 = _mm_cvtsi32_si128((int)(2 * ((t - s0) % 4)));
                    __m256i lo = _mm256_and_si256(_mm256_srl_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(cq)), sh2), m3);
                    __m256i hi = _mm256_and_si256(_mm256_srl_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(cq, 1)), sh2), m3);
                    float  *o  = tile + (size_t)(t - s0) * D + 16 * b;

                    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(lo), sl), zl));
                    _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hi), sh), zh));
                }
            }
            gmax = hmax8(am);
            for (uint32_t t = s0; t < s1; t++) {
                const float *x   = tile + (size_t)(t - s0) * D;
                float        nt  = norms != NULL ? norms[t] : 1.0f;
                __m256       n   = _mm256_set1_ps(nt);
                int          sat = row_may_pass(gmax * nt, c);

                if (t + 4 < T) { /* own the output lines before they are written */
                    for (uint32_t i = 0; i < D; i += 32) {
                        __builtin_prefetch(dst + (size_t)(t + 4) * stride + i, 1, 3);
                    }
                }

#define DEQ_ROT_ROW(nv) deq_rot_row(x, (nv), norms != NULL, n, c, sat, dst + (size_t)t * stride)
#define DEQ_ROT_ANY(nv) deq_rot_row_any(x, (nv), norms != NULL, n, c, sat, dst + (size_t)t * stride)
                ROW_NV_DISPATCH(D, DEQ_ROT_ROW, DEQ_ROT_ANY);
#undef DEQ_ROT_ROW
#undef DEQ_ROT_ANY
            }
        }
    }
}

/* Per-row groups of G channels (G % 8 == 0), each row rotated back. */
void kvp_q2h_tok_decode_rot(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                            size_t rows, uint32_t D, uint32_t G, uint16_t *dst)
{
    uint32_t nv = D / 8, ng = D / G;
    __m256   c  = _mm256_set1_ps(kvp_hd_fwht_norm(D));
    __m256i  m3 = _mm256_set1_epi32(3), sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    int      sat = row_may_pass(qz_max(scale, zero, rows * ng), c); /* one bound for all rows */

    if (D == 128 && G == 32) { /* in registers; the 4 values of a group looked up by code */
        __m256 qv = _mm256_setr_ps(0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f);

        for (size_t r = 0; r < rows; r++) {
            const uint8_t *cr = codes + r * 32;
            __m256         v[16];
            __m128         s4, z4;
            uint64_t       w8;

            if (r + 8 < rows) { /* own the output lines before they are written */
                for (int i = 0; i < 4; i++) {
                    __builtin_prefetch(dst + (r + 8) * D + 32 * i, 1, 3);
                }
            }

            memcpy(&w8, scale + 8 * r, 8);
            s4 = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)w8));
            memcpy(&w8, zero + 8 * r, 8);
            z4 = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)w8));
            _Pragma("GCC unroll 4") for (int gi = 0; gi < 4; gi++) {
                __m256  s   = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(s4), _mm256_set1_epi32(gi));
                __m256  z   = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(z4), _mm256_set1_epi32(gi));
                __m256  tbl = _mm256_add_ps(_mm256_mul_ps(qv, s), z); /* q*s + z, q = lane % 4 */
                __m256i cw;
                uint64_t c8;

                memcpy(&c8, cr + 8 * gi, 8);
                cw = _mm256_set1_epi64x((long long)c8);
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) { /* bytes 2i, 2i+1 -> 8 codes */
                    __m256i b = _mm256_shuffle_epi8(cw, _mm256_set1_epi32((int)(0x80800000u | (uint32_t)(2 * i) |
                                                                                (uint32_t)(2 * i + 1) << 8)));

                    /* the index uses 3 bits: bit 2 is the next code's, the table repeats */
                    v[4 * gi + i] = _mm256_permutevar8x32_ps(tbl, _mm256_srlv_epi32(b, sh));
                }
            }
            fwht_v(v, 16, c);
            st_row(dst + r * D, v, 16, sat);
        }
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *cr = codes + r * (D / 4);
        __m256         v[ROW_MAX_VEC];

        for (uint32_t gi = 0; gi < ng; gi++) {
            __m256 s = _mm256_set1_ps(ldh1(scale + 2 * (r * ng + gi)));
            __m256 z = _mm256_set1_ps(ldh1(zero + 2 * (r * ng + gi)));

            for (uint32_t i = gi * G / 8; i < (gi + 1) * G / 8; i++) {
                __m256i w = _mm256_set1_epi32(cr[2 * i] | (cr[2 * i + 1] << 8));
                __m256  q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(w, sh), m3));

                v[i] = _mm256_add_ps(_mm256_mul_ps(q, s), z);
            }
        }
        fwht_v(v, nv, c);
        st_row(dst + r * D, v, nv, sat);
    }
}

/* ---- KVarN tiles: one head's rows rotated, rounded to fp16, kept as fp32 ---- */

int kvp_q2h_rot_tile(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *X)
{
    return rot_rows(src, stride, T, D, X, 1, 1);
}

/* Transposed tile, 8 tokens at a time: 8x8 fp16 blocks are transposed first, so the vector of
 * channel d holds 8 tokens and every FWHT stage h adds/subtracts whole vectors d and d + h (the
 * reference's stage order, so the same single rounding per value as the row path, bit for bit):
 * stages h = 1..8 on 16 channels in registers into buf, the rest on groups of 8 at a stride,
 * rounded to fp16 and stored straight into X[d][t .. t + 7]. */

/* butterflies of stages h = 1 .. n/2 over v[0 .. n-1] (n a power of two <= 16) */
static AINL void vstages(__m256 *v, int n)
{
    _Pragma("GCC unroll 4") for (int h = 1; h < n; h <<= 1) {
        _Pragma("GCC unroll 16") for (int i = 0; i < n; i += 2 * h) {
            _Pragma("GCC unroll 16") for (int j = i; j < i + h; j++) {
                __m256 a = v[j];

                v[j]     = _mm256_add_ps(a, v[j + h]);
                v[j + h] = _mm256_sub_ps(a, v[j + h]);
            }
        }
    }
}

/* 8 rows of 16 fp16 (row i at p + i*stride) -> the 16 columns as fp32 vectors of 8 rows */
static AINL void ld_tr16(const uint16_t *p, size_t stride, __m256 v[16])
{
    __m256i r[8], a[8], b[8];

    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        r[i] = _mm256_loadu_si256((const __m256i *)(const void *)(p + (size_t)i * stride));
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 8; i += 2) { /* per 128-bit lane: two 8x8 blocks */
        a[i]     = _mm256_unpacklo_epi16(r[i], r[i + 1]);
        a[i + 1] = _mm256_unpackhi_epi16(r[i], r[i + 1]);
    }
    _Pragma("GCC unroll 2") for (int i = 0; i < 8; i += 4) {
        b[i]     = _mm256_unpacklo_epi32(a[i], a[i + 2]);
        b[i + 1] = _mm256_unpackhi_epi32(a[i], a[i + 2]);
        b[i + 2] = _mm256_unpacklo_epi32(a[i + 1], a[i + 3]);
        b[i + 3] = _mm256_unpackhi_epi32(a[i + 1], a[i + 3]);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) { /* column 2i, 2i+1 of both blocks */
        __m256i lo = _mm256_unpacklo_epi64(b[i], b[i + 4]), hi = _mm256_unpackhi_epi64(b[i], b[i + 4]);

        v[2 * i]         = _mm256_cvtph_ps(_mm256_castsi256_si128(lo));
        v[2 * i + 1]     = _mm256_cvtph_ps(_mm256_castsi256_si128(hi));
        v[8 + 2 * i]     = _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1));
        v[8 + 2 * i + 1] = _mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1));
    }
}

/* x * c rounded to fp16, kept as fp32 */
static AINL __m256 fin16(__m256 x, __m256 c) { return _mm256_cvtph_ps(f16x8(_mm256_mul_ps(x, c))); }

/* n results -> *chk turns NaN for good once one is Inf/NaN (r * 0 is NaN exactly then); two
 * short chains per group so the check is off the critical path */
static AINL void chk_n(const __m256 *r, int n, __m256 *chk)
{
    __m256 z = _mm256_setzero_ps(), a = _mm256_mul_ps(r[0], z), b = n > 1 ? _mm256_mul_ps(r[1], z) : z;

    _Pragma("GCC unroll 8") for (int i = 2; i < n; i += 2) {
        a = _mm256_fmadd_ps(r[i], z, a);
        b = _mm256_fmadd_ps(r[i + 1], z, b);
    }
    *chk = _mm256_or_ps(*chk, _mm256_add_ps(a, b));
}

/* stages 1 .. D/16 of 8 tokens (rows at p) into buf (D vectors of 8), D >= 16 */
static AINL void rot_t_first(const uint16_t *p, size_t stride, uint32_t D, float *buf)
{
    for (uint32_t d = 0; d < D; d += 16) { /* stages 1 .. 8 in registers */
        __m256 v[16];

        ld_tr16(p + d, stride, v);
        vstages(v, 16);
        _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) {
            _mm256_storeu_ps(buf + 8 * ((size_t)d + i), v[i]);
        }
    }
    for (uint32_t h = 16; h < D / 8; h <<= 1) { /* D >= 256: in memory until 3 stages are left */
        for (uint32_t i = 0; i < D; i += 2 * h) {
            for (uint32_t j = i; j < i + h; j++) {
                __m256 a = _mm256_loadu_ps(buf + 8 * (size_t)j), b = _mm256_loadu_ps(buf + 8 * ((size_t)j + h));

                _mm256_storeu_ps(buf + 8 * (size_t)j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(buf + 8 * ((size_t)j + h), _mm256_sub_ps(a, b));
            }
        }
    }
}

/* the last stages on groups of n vectors (stride s = D/n) of nb blocks of 8 tokens (buf, the
 * next block 8*D floats on), rounded into X[d][t ..]; the blocks of one group go out back to
 * back, so each line of X is whole while it is in L1 (X's rows are a power of two apart and
 * share few L1 sets) */
static AINL void rot_t_last(const float *buf, uint32_t D, int n, int nb, size_t T, __m256 c,
                            float *Xt, __m256 *chk)
{
    uint32_t s = D / (uint32_t)n;

    for (uint32_t j = 0; j < s; j++) {
        _Pragma("GCC unroll 2") for (int b = 0; b < nb; b++) {
            const float *bb = buf + (size_t)b * 8 * D;
            __m256       v[8];

            _Pragma("GCC unroll 8") for (int i = 0; i < n; i++) {
                v[i] = _mm256_loadu_ps(bb + 8 * (j + (size_t)i * s));
            }
            vstages(v, n);
            _Pragma("GCC unroll 8") for (int i = 0; i < n; i++) {
                v[i] = fin16(v[i], c);
                _mm256_storeu_ps(Xt + (j + (size_t)i * s) * T + 8 * b, v[i]);
            }
            chk_n(v, n, chk);
        }
    }
}

static AINL void rot_t_lastd(const float *buf, uint32_t D, int nb, size_t T, __m256 c, float *Xt,
                             __m256 *chk)
{
    switch (D) {
    case 16: rot_t_last(buf, D, 1, nb, T, c, Xt, chk); break;
    case 32: rot_t_last(buf, D, 2, nb, T, c, Xt, chk); break;
    case 64: rot_t_last(buf, D, 4, nb, T, c, Xt, chk); break;
    default: rot_t_last(buf, D, 8, nb, T, c, Xt, chk); break;
    }
}

int kvp_q2h_rot_tile_t(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *buf,
                       float *X)
{
    __m256   c = _mm256_set1_ps(kvp_hd_fwht_norm(D)), chk = _mm256_setzero_ps();
    uint32_t t = 0;

    for (; t + 16 <= T; t += 16) { /* 16 tokens: whole 64-byte lines of X */
        if (t + 32 <= T) { /* the next 16 rows arrive while these run */
            pf_rows(src + (size_t)(t + 16) * stride, stride, 16, D);
        }
        rot_t_first(src + (size_t)t * stride, stride, D, buf);
        rot_t_first(src + (size_t)(t + 8) * stride, stride, D, buf + 8 * (size_t)D);
        rot_t_lastd(buf, D, 2, T, c, X + t, &chk);
    }
    if (t < T) {
        rot_t_first(src + (size_t)t * stride, stride, D, buf);
        rot_t_lastd(buf, D, 1, T, c, X + t, &chk);
    }
    return _mm256_movemask_ps(_mm256_cmp_ps(chk, chk, _CMP_UNORD_Q)) == 0;
}
