/* q2h_avx2.c - fp16-domain AVX2 twins of the 2-bit group quantizers (kvp_q2h_*): encoders read
 * fp16 input directly and decoders write fp16 output, with results bit-identical to the fp32
 * primitives on the widened input (then rounded to fp16). Encoding works on 16-bit order keys:
 * min/max are integer ops (NaN/Inf show up as out-of-range keys), and since each code is a
 * monotone function of x, three per-group key thresholds found by an exact search replace the
 * per-element division. Decoding looks the group's four fp16 values up (pshufb or blends). */
#include "codec_ops.h"
#include "q2h_int.h"
#include "quant_hd.h"
#include "avx2_int.h"

#include <immintrin.h>
#include <string.h>

#define AINL inline __attribute__((always_inline))

/* ---- keys: signed 16-bit integers in the order of the fp16 values (-0 just below +0) ---- */

static inline __m256i key16(__m256i h)
{
    return _mm256_xor_si256(h, _mm256_and_si256(_mm256_srai_epi16(h, 15), _mm256_set1_epi16(0x7FFF)));
}

static inline int key_of(uint16_t h) { return (int16_t)(h ^ ((h & 0x8000u) ? 0x7FFFu : 0u)); }

#define KEY_MAX_FINITE 0x7BFF   /* +65504 */
#define KEY_MIN_FINITE (-31744) /* key of -65504 (0xFBFF) */

/* 8 int32 keys of finite fp16 -> the 8 fp32 values, in integer ops: the 15 magnitude bits
 * shifted into an fp32 exponent/mantissa and scaled by 2^112 (exact, subnormals included) */
static inline __m256 keyf(__m256i k)
{
    __m256i sg  = _mm256_srai_epi32(k, 31);
    __m256i mag = _mm256_slli_epi32(_mm256_and_si256(_mm256_xor_si256(k, sg), _mm256_set1_epi32(0x7FFF)), 13);
    __m256  v   = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p112f));

    return _mm256_or_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(sg, 31)));
}

/* 8 fp32 (finite or not) -> int32 keys of their fp16 rounding */
static inline __m256i fkey(__m256 x)
{
    __m256i h = _mm256_cvtepi16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));

    return _mm256_xor_si256(h, _mm256_and_si256(_mm256_srai_epi32(h, 31), _mm256_set1_epi32(0x7FFF)));
}

/* ---- group parameters (same operations as q2_ref.c put_params) ---- */

/* code(x) >= k as an int32 mask, k = 1, 2, 3. OScaR: rint(clamp(y)) >= k is y > 0.5, y >= 1.5,
 * y > 2.5 (half to even), y = x * inv + zq. KIVI: q = fl(d / s), d = fl(x - mn), and
 * fl(q) > 0.5, >= 1.5, > 2.5 are q > 0.5 + 2^-25, q >= 1.5 - 2^-24, q > 2.5 + 2^-23 (the
 * rounding midpoints), i.e. d - m*s against +-s*2^-n, where one fma gives d - m*s exactly near
 * the boundary (d and m*s within a factor 2, m*s on a grid of ulp(s)/2). fp16 input keeps d and
 * s normal (d = 0 or >= 2^-24, s >= 2^-24/3). s == 0 gives code 0. */
static AINL __m256i pred8(kvp_q2_rule_t rule, const kvp_q2_par8_t *p, __m256 x, int k)
{
    __m256 c;

    if (rule == KVP_Q2_RULE_KIVI) {
        __m256 d = _mm256_sub_ps(x, p->mn);

        if (k == 1) {
            c = _mm256_cmp_ps(_mm256_fmadd_ps(_mm256_set1_ps(-0.5f), p->s, d),
                              _mm256_mul_ps(p->s, _mm256_set1_ps(0x1p-25f)), _CMP_GT_OQ);
        } else if (k == 2) {
            c = _mm256_cmp_ps(_mm256_fmadd_ps(_mm256_set1_ps(-1.5f), p->s, d),
                              _mm256_mul_ps(p->s, _mm256_set1_ps(-0x1p-24f)), _CMP_GE_OQ);
        } else {
            c = _mm256_cmp_ps(_mm256_fmadd_ps(_mm256_set1_ps(-2.5f), p->s, d),
                              _mm256_mul_ps(p->s, _mm256_set1_ps(0x1p-23f)), _CMP_GT_OQ);
        }
        c = _mm256_andnot_ps(p->zero_mask, c);
    } else {
        __m256 y = _mm256_add_ps(_mm256_mul_ps(x, p->inv), p->zq);

        if (k == 2) {
            c = _mm256_cmp_ps(y, _mm256_set1_ps(1.5f), _CMP_GE_OQ);
        } else {
            c = _mm256_cmp_ps(y, _mm256_set1_ps(k == 1 ? 0.5f : 2.5f), _CMP_GT_OQ);
        }
    }
    return _mm256_castps_si256(c);
}

/* pred8 extended by the sentinels: true at keys >= hi1, false below klo */
static AINL __m256i predx(kvp_q2_rule_t rule, const kvp_q2_par8_t *p, __m256i e, __m256i klo,
                            __m256i hi1, int k)
{
    __m256i above = _mm256_cmpgt_epi32(e, _mm256_sub_epi32(hi1, _mm256_set1_epi32(1)));
    __m256i below = _mm256_cmpgt_epi32(klo, e);

    return _mm256_andnot_si256(below, _mm256_or_si256(above, pred8(rule, p, keyf(e), k)));
}

/* Smallest key e in [klo, khi + 1] with code(e) >= k (khi + 1: no value of the group reaches
 * k); the code is monotone in the key. The fp16 rounding e0 of the estimate is the answer or
 * one below it: code(e0) picks the neighbour that confirms it, else bisection. */
static AINL __m256i thr8(kvp_q2_rule_t rule, const kvp_q2_par8_t *p, __m256i klo, __m256i khi, int k)
{
    __m256i one = _mm256_set1_epi32(1), hi1 = _mm256_add_epi32(khi, one), e, lo, hi, p0, pn, ok;
    __m256  kk  = _mm256_set1_ps((float)k - 0.5f);
    __m256  est = rule == KVP_Q2_RULE_KIVI ? _mm256_add_ps(p->mn, _mm256_mul_ps(kk, p->s))
                                           : _mm256_mul_ps(_mm256_sub_ps(kk, p->zq), p->s);

    e  = _mm256_max_epi32(_mm256_min_epi32(fkey(est), hi1), klo);
    p0 = predx(rule, p, e, klo, hi1, k);
    /* p0: e0 is it when code(e0 - 1) < k; else e0 + 1 is it when code(e0 + 1) >= k */
    pn = predx(rule, p, _mm256_add_epi32(e, _mm256_or_si256(p0, one)), klo, hi1, k);
    ok = _mm256_xor_si256(p0, pn);
    if (_mm256_movemask_epi8(ok) == -1) {
        return _mm256_add_epi32(e, _mm256_andnot_si256(p0, one));
    }
    lo = klo;
    hi = hi1;
    for (;;) { /* invariant: code(hi) >= k (or hi = khi + 1), code(lo - 1) < k */
        __m256i open = _mm256_cmpgt_epi32(hi, lo), mid, pmid;

        if (_mm256_testz_si256(open, open)) {
            return lo;
        }
        mid  = _mm256_srai_epi32(_mm256_add_epi32(lo, hi), 1);
        pmid = pred8(rule, p, keyf(mid), k);
        hi   = _mm256_blendv_epi8(hi, mid, _mm256_and_si256(open, pmid));
        lo   = _mm256_blendv_epi8(lo, _mm256_add_epi32(mid, one), _mm256_andnot_si256(pmid, open));
    }
}

static inline void st_h8(uint8_t *p, __m256 v)
{
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* Thresholds minus one (for cmpgt) of 16 groups from their min/max keys; stores the fp16 scale
 * and zero of group i at sc[i*sstep], zr[i*sstep] (sstep in fp16 slots; 1 = contiguous). */
typedef struct {
    __m256i t[3];
} thr16_t;

static inline __m256i half32(__m256i v, int half)
{
    return _mm256_cvtepi16_epi32(half ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v));
}

/* kmn/kmx: the reference's min/max (zero signs fixed); rmn/rmx: min/max of the keys, the range
 * the thresholds live in (a +0 element above a -0 max has the same code) */
/* 16 keys -> fp16 bits -> the two halves as fp32 */
static AINL void key16f(__m256i k, __m256 *lo, __m256 *hi)
{
    __m256i h = _mm256_xor_si256(k, _mm256_and_si256(_mm256_srai_epi16(k, 15), _mm256_set1_epi16(0x7FFF)));

    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/* two 8-lane int32 masks -> one 16-lane int16 mask in lane order */
static AINL __m256i mask16(__m256i lo, __m256i hi)
{
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
}

/* code(e) >= k for 16 keys, with the sentinels: true at keys > khi, false below klo */
static AINL __m256i pred16(kvp_q2_rule_t rule, const kvp_q2_par8_t *p, __m256i e, __m256i klo,
                           __m256i khi, int k)
{
    __m256 xl, xh;
    __m256i m;

    key16f(e, &xl, &xh);
    m = mask16(pred8(rule, &p[0], xl, k), pred8(rule, &p[1], xh, k));
    return _mm256_andnot_si256(_mm256_cmpgt_epi16(klo, e), _mm256_or_si256(m, _mm256_cmpgt_epi16(e, khi)));
}

/* Thresholds of 16 groups for one k, in 16-bit lanes, from v0, the fp16 rounding of the
 * estimate est. The real threshold t (where code(x) >= k starts, through the reference's
 * roundings) lies within B = (|est| + s) 2^-20 of est: worst case |est| 2^-22 + s 2^-23 for OScaR
 * and |est| 2^-24 + 7 s 2^-24 for KIVI (the ulp-level errors of s, inv and est and of each
 * rounding the code takes at its half-integer boundaries). When 2B is below half the gap from
 * v0 to its fp16 neighbours, which B < |v0| 2^-13 ensures (s > 0), every other fp16 value is on
 * the same side of t as of v0, so the answer is v0 when code(v0) >= k, else the value above v0:
 * one code evaluation. Lanes where that does not hold (v0 = 0, s = 0: constant groups, est near
 * 0 against s) send the 16 groups to the search: v0 is the answer or one below it, code(v0)
 * picks the neighbour that confirms it, and thr8 (the 8-lane search with bisection) takes the
 * rare lanes where that fails. */
static AINL __m256i thr16(kvp_q2_rule_t rule, const kvp_q2_par8_t *p, __m256i rmn, __m256i rmx, int k)
{
    __m256  kk = _mm256_set1_ps((float)k - 0.5f);
    __m256  nosign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256i one = _mm256_set1_epi16(1), e, p0, pn;
    __m256i pv[2], ok[2];
    __m128i h16[2];

    for (int h = 0; h < 2; h++) {
        __m256 est, v0, b;

        est    = rule == KVP_Q2_RULE_KIVI ? _mm256_add_ps(p[h].mn, _mm256_mul_ps(kk, p[h].s))
                                          : _mm256_mul_ps(_mm256_sub_ps(kk, p[h].zq), p[h].s);
        h16[h] = _mm256_cvtps_ph(est, _MM_FROUND_TO_NEAREST_INT);
        v0     = _mm256_cvtph_ps(h16[h]);
        b      = _mm256_mul_ps(_mm256_add_ps(_mm256_and_ps(est, nosign), p[h].s), _mm256_set1_ps(0x1p-7f));
        b      = _mm256_cmp_ps(b, _mm256_and_ps(v0, nosign), _CMP_LT_OQ); /* B < |v0| 2^-13 */
        if (rule == KVP_Q2_RULE_KIVI) { /* OScaR: s = 0 only with est = v0 = 0 */
            b = _mm256_and_ps(b, _mm256_cmp_ps(p[h].s, _mm256_setzero_ps(), _CMP_GT_OQ));
        }
        ok[h] = _mm256_castps_si256(b);
        pv[h] = pred8(rule, &p[h], v0, k);
    }
    e = key16(_mm256_set_m128i(h16[1], h16[0]));
    if (_mm256_movemask_epi8(_mm256_and_si256(ok[0], ok[1])) == -1) {
        e = _mm256_add_epi16(_mm256_add_epi16(e, one), mask16(pv[0], pv[1])); /* +1 where not */
        return _mm256_max_epi16(_mm256_min_epi16(e, _mm256_add_epi16(rmx, one)), rmn);
    }
    e  = _mm256_max_epi16(_mm256_min_epi16(e, _mm256_add_epi16(rmx, one)), rmn);
    p0 = pred16(rule, p, e, rmn, rmx, k);
    pn = pred16(rule, p, _mm256_add_epi16(e, _mm256_or_si256(p0, one)), rmn, rmx, k);
    if (_mm256_movemask_epi8(_mm256_xor_si256(p0, pn)) == -1) {
        return _mm256_add_epi16(e, _mm256_andnot_si256(p0, one));
    }
    return mask16(thr8(rule, &p[0], half32(rmn, 0), half32(rmx, 0), k),
                  thr8(rule, &p[1], half32(rmn, 1), half32(rmx, 1), k));
}

static AINL void params16(kvp_q2_rule_t rule, __m256i kmn, __m256i kmx, __m256i rmn, __m256i rmx,
                          uint8_t *sc, uint8_t *zr, thr16_t *th)
{
    __m256 ml, mh, xl, xh;
    kvp_q2_par8_t p[2];

    key16f(kmn, &ml, &mh);
    key16f(kmx, &xl, &xh);
    p[0] = kvp_q2_par8(rule, ml, xl);
    p[1] = kvp_q2_par8(rule, mh, xh);
    st_h8(sc, p[0].s);
    st_h8(zr, p[0].z);
    st_h8(sc + 16, p[1].s);
    st_h8(zr + 16, p[1].z);
    th->t[0] = _mm256_sub_epi16(thr16(rule, p, rmn, rmx, 1), _mm256_set1_epi16(1));
    th->t[1] = _mm256_sub_epi16(thr16(rule, p, rmn, rmx, 2), _mm256_set1_epi16(1));
    th->t[2] = _mm256_sub_epi16(thr16(rule, p, rmn, rmx, 3), _mm256_set1_epi16(1));
}

/* -code of 16 keys (sum of the three threshold masks) */
static inline __m256i ncode16(__m256i key, const thr16_t *th)
{
    return _mm256_add_epi16(_mm256_add_epi16(_mm256_cmpgt_epi16(key, th->t[0]),
                                             _mm256_cmpgt_epi16(key, th->t[1])),
                            _mm256_cmpgt_epi16(key, th->t[2]));
}

/* The reference takes the first of equal values: with both zeros in a group the min (max) is
 * the first zero. Keys order -0 below +0, so only a -0 min or a +0 max can be wrong. */
static int first_zero_key(const uint16_t *x, size_t n, size_t step)
{
    for (size_t i = 0; i < n; i++) {
        if ((x[i * step] & 0x7FFFu) == 0) {
            return key_of(x[i * step]);
        }
    }
    return 0;
}

static inline int bad16(__m256i kmn, __m256i kmx)
{
    __m256i b = _mm256_or_si256(_mm256_cmpgt_epi16(kmx, _mm256_set1_epi16(KEY_MAX_FINITE)),
                                _mm256_cmpgt_epi16(_mm256_set1_epi16(KEY_MIN_FINITE), kmn));

    return !_mm256_testz_si256(b, b);
}

/* ---- per-channel groups along tokens ---- */

int kvp_q2h_chan_ok(uint32_t D, uint32_t G) { return D % 16 == 0 && G % 32 == 0; }

/* Store up to 8 code bytes per channel for 16 channels from 8 quad vectors (16-bit lanes, low
 * byte = the packed byte of that channel's 4 tokens): channel c's bytes go to out + c*run. */
static void store_quads(const __m256i q[8], uint8_t *out, size_t run, uint32_t nb)
{
    __m256i idx = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
                                   0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    __m256i p[4], a[4], r[4];
    uint8_t tmp[16][8];

    for (int i = 0; i < 4; i++) { /* lane 0: [q2i c0..7 | q2i+1 c0..7], lane 1 channels 8..15 */
        p[i] = _mm256_shuffle_epi8(_mm256_packus_epi16(q[2 * i], q[2 * i + 1]), idx);
    }
    a[0] = _mm256_unpacklo_epi16(p[0], p[1]); /* c0..3: q0 q1 q2 q3 */
    a[1] = _mm256_unpackhi_epi16(p[0], p[1]); /* c4..7 */
    a[2] = _mm256_unpacklo_epi16(p[2], p[3]); /* c0..3: q4..q7 */
    a[3] = _mm256_unpackhi_epi16(p[2], p[3]);
    r[0] = _mm256_unpacklo_epi32(a[0], a[2]); /* c0, c1 (lane 1: c8, c9) */
    r[1] = _mm256_unpackhi_epi32(a[0], a[2]); /* c2, c3 */
    r[2] = _mm256_unpacklo_epi32(a[1], a[3]); /* c4, c5 */
    r[3] = _mm256_unpackhi_epi32(a[1], a[3]); /* c6, c7 */
    if (nb == 8) {
        for (int i = 0; i < 4; i++) {
            __m128i lo = _mm256_castsi256_si128(r[i]), hi = _mm256_extracti128_si256(r[i], 1);

            _mm_storel_epi64((__m128i *)(void *)(out + (size_t)(2 * i) * run), lo);
            _mm_storel_epi64((__m128i *)(void *)(out + (size_t)(2 * i + 1) * run), _mm_unpackhi_epi64(lo, lo));
            _mm_storel_epi64((__m128i *)(void *)(out + (size_t)(2 * i + 8) * run), hi);
            _mm_storel_epi64((__m128i *)(void *)(out + (size_t)(2 * i + 9) * run), _mm_unpackhi_epi64(hi, hi));
        }
        return;
    }
    for (int i = 0; i < 4; i++) {
        __m128i lo = _mm256_castsi256_si128(r[i]), hi = _mm256_extracti128_si256(r[i], 1);

        _mm_storel_epi64((__m128i *)(void *)tmp[2 * i], lo);
        _mm_storel_epi64((__m128i *)(void *)tmp[2 * i + 1], _mm_unpackhi_epi64(lo, lo));
        _mm_storel_epi64((__m128i *)(void *)tmp[2 * i + 8], hi);
        _mm_storel_epi64((__m128i *)(void *)tmp[2 * i + 9], _mm_unpackhi_epi64(hi, hi));
    }
    for (int c = 0; c < 16; c++) {
        memcpy(out + (size_t)c * run, tmp[c], nb);
    }
}

/* Keys of the group's block of tokens x 16-channel columns are staged in an L1 buffer: the
 * source rows are H*D apart, and walking a column of them would hit only a few cache sets. */
#define CHE_BUF_KEYS 8192 /* 16 KiB */

/* fp16 slot of channel c's parameters in group g: [head][group][channel of the head] */
static inline size_t pslot(uint32_t c, uint32_t g, uint32_t hd, uint32_t ngk)
{
    return ((size_t)(c / hd) * ngk + g) * hd + c % hd;
}

static AINL int chan_enc(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, uint32_t hd,
                         uint32_t G, kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale,
                         uint8_t *zero, const char *pf, size_t pf_bytes)
{
    size_t   pf_off = 0;
    uint32_t run = kvp_hd_run_bytes(T), gl = G < T ? G : T, ngk = (T + G - 1) / G;
    uint32_t cw  = CHE_BUF_KEYS / gl / 64 * 64; /* channels per chunk, multiple of 64 */
    __m256i  buf[CHE_BUF_KEYS / 16];
    int      bad = 0;

    if (cw == 0) {
        cw = 16;
    }
    for (uint32_t t0 = 0, g = 0; t0 < T; t0 += G, g++) {
        uint32_t t1 = t0 + G < T ? t0 + G : T, n = t1 - t0;

        for (uint32_t c0 = 0; c0 < D; c0 += cw) {
            uint32_t nb = (D - c0 < cw ? D - c0 : cw) / 16;

            for (uint32_t b = 0; b < nb; b += 2) { /* one 64-byte line of each row at a time */
                uint32_t        two = b + 1 < nb;
                const uint16_t *col = src + (size_t)t0 * stride + c0 + 16 * b;
                __m256i        *kb  = buf + (size_t)b * n;
                __m256i         mn0, mx0, mn1, mx1, rmn, rmx, fix;

                mn0 = mn1 = _mm256_set1_epi16(0x7FFF);
                mx0 = mx1 = _mm256_set1_epi16(-0x8000);
                for (uint32_t t = 0; t < n; t++) {
                    const uint16_t *x = col + (size_t)t * stride;
                    __m256i         k0 = key16(_mm256_loadu_si256((const __m256i *)(const void *)x));

                    if (t0 + G + t < T) { /* the same line of the next group */
                        _mm_prefetch((const char *)(x + (size_t)G * stride), _MM_HINT_T0);
                    }
                    if (pf_off < pf_bytes) { /* what the caller reads next, a line a row */
                        _mm_prefetch(pf + pf_off, _MM_HINT_T1);
                        pf_off += 64;
                    }

                    kb[t] = k0;
                    mn0   = _mm256_min_epi16(mn0, k0);
                    mx0   = _mm256_max_epi16(mx0, k0);
                    if (two) {
                        __m256i k1 = key16(_mm256_loadu_si256((const __m256i *)(const void *)(x + 16)));

                        kb[n + t] = k1;
                        mn1       = _mm256_min_epi16(mn1, k1);
                        mx1       = _mm256_max_epi16(mx1, k1);
                    }
                }
                for (uint32_t j = 0; j <= two; j++) {
                    __m256i kmn = j ? mn1 : mn0, kmx = j ? mx1 : mx0;
                    size_t  pp  = 2 * pslot(c0 + 16 * (b + j), g, hd, ngk);
                    thr16_t th;

                    bad |= bad16(kmn, kmx);
                    rmn = kmn;
                    rmx = kmx;
                    fix = _mm256_or_si256(_mm256_cmpeq_epi16(kmn, _mm256_set1_epi16(-1)),
                                          _mm256_cmpeq_epi16(kmx, _mm256_setzero_si256()));
                    if (!_mm256_testz_si256(fix, fix)) {
                        int16_t m0[16], m1[16];

                        _mm256_storeu_si256((__m256i *)(void *)m0, kmn);
                        _mm256_storeu_si256((__m256i *)(void *)m1, kmx);
                        for (int i = 0; i < 16; i++) {
                            const uint16_t *x = col + 16 * j + i;

                            if (m0[i] == -1) {
                                m0[i] = (int16_t)first_zero_key(x, n, stride);
                            }
                            if (m1[i] == 0) {
                                m1[i] = (int16_t)first_zero_key(x, n, stride);
                            }
                        }
                        kmn = _mm256_loadu_si256((const __m256i *)(const void *)m0);
                        kmx = _mm256_loadu_si256((const __m256i *)(const void *)m1);
                    }
                    params16(rule, kmn, kmx, rmn, rmx, scale + pp, zero + pp, &th);
                    for (uint32_t s0 = 0; s0 < n; s0 += 32) { /* 8 code bytes per channel */
                        uint32_t       s1 = s0 + 32 < n ? s0 + 32 : n, nq = (s1 - s0 + 3) / 4;
                        const __m256i *kt = kb + (size_t)j * n;
                        __m256i        q[8];

                        for (uint32_t qi = 0; qi < 8; qi++) {
                            uint32_t t = s0 + 4 * qi;
                            __m256i  acc;

                            if (qi >= nq) {
                                q[qi] = _mm256_setzero_si256();
                                continue;
                            }
                            acc = ncode16(kt[t], &th);
                            if (t + 4 <= s1) {
                                acc = _mm256_add_epi16(acc, _mm256_slli_epi16(ncode16(kt[t + 1], &th), 2));
                                acc = _mm256_add_epi16(acc, _mm256_slli_epi16(ncode16(kt[t + 2], &th), 4));
                                acc = _mm256_add_epi16(acc, _mm256_slli_epi16(ncode16(kt[t + 3], &th), 6));
                            } else {
                                for (uint32_t jj = 1; t + jj < s1; jj++) {
                                    acc = _mm256_add_epi16(acc, _mm256_sll_epi16(ncode16(kt[t + jj], &th),
                                                                                 _mm_cvtsi32_si128((int)(2 * jj))));
                                }
                            }
                            q[qi] = _mm256_sub_epi16(_mm256_setzero_si256(), acc);
                        }
                        store_quads(q, codes + (size_t)(c0 + 16 * (b + j)) * run + (t0 + s0) / 4, run, nq);
                    }
                }
            }
        }
    }
    return !bad;
}

int kvp_q2h_chan_encode(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, uint32_t hd,
                        uint32_t G, kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale,
                        uint8_t *zero, const void *pf, size_t pf_bytes)
{
    if (rule == KVP_Q2_RULE_KIVI) {
        return chan_enc(src, stride, T, D, hd, G, KVP_Q2_RULE_KIVI, codes, scale, zero, pf, pf_bytes);
    }
    return chan_enc(src, stride, T, D, hd, G, KVP_Q2_RULE_OSCAR, codes, scale, zero, pf, pf_bytes);
}

/* ---- per-row groups of G channels (G % 32 == 0) ---- */

int kvp_q2h_tok_ok(uint32_t D, uint32_t G) { return G % 32 == 0 && D % G == 0; }

/* 32 codes as -code in two 16-lane vectors -> 8 bytes */
static inline void pack_row32(__m256i n0, __m256i n1, uint8_t *out)
{
    __m256i m4 = _mm256_set1_epi32((int)0xFFFCFFFFu); /* (-1, -4) */
    __m256i a  = _mm256_madd_epi16(n0, m4), b = _mm256_madd_epi16(n1, m4);
    __m256i w  = _mm256_madd_epi16(_mm256_packs_epi32(a, b), _mm256_set1_epi32(0x00100001));
    __m256i y;

    /* w: lane 0 = bytes 0, 1, 4, 5; lane 1 = bytes 2, 3, 6, 7 */
    w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
    y = _mm256_shuffle_epi8(w, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    y = _mm256_permutevar8x32_epi32(y, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64((__m128i *)(void *)out, _mm256_castsi256_si128(y));
}

/* out lane j = min (max) over the 16 lanes of v[j], j < 16: a transpose-reduce */
static AINL __m256i hred16(const __m256i *v, int is_max)
{
#define R16(a, b) (is_max ? _mm256_max_epi16((a), (b)) : _mm256_min_epi16((a), (b)))
    __m256i t[8], u[4], w[2];

    for (int i = 0; i < 8; i++) {
        t[i] = R16(_mm256_unpacklo_epi16(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_epi16(v[2 * i], v[2 * i + 1]));
    }
    for (int i = 0; i < 4; i++) {
        u[i] = R16(_mm256_unpacklo_epi32(t[2 * i], t[2 * i + 1]), _mm256_unpackhi_epi32(t[2 * i], t[2 * i + 1]));
    }
    for (int i = 0; i < 2; i++) {
        w[i] = R16(_mm256_unpacklo_epi64(u[2 * i], u[2 * i + 1]), _mm256_unpackhi_epi64(u[2 * i], u[2 * i + 1]));
    }
    return R16(_mm256_permute2x128_si256(w[0], w[1], 0x20), _mm256_permute2x128_si256(w[0], w[1], 0x31));
#undef R16
}

#define TOK_KEYS 2048 /* keys of 16 groups staged for the code pass: G <= 128 */

static AINL int tok_enc(const uint16_t *src, size_t rows, uint32_t D, uint32_t G,
                        kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero,
                        const char *pf, size_t pf_bytes)
{
    size_t  ngr = rows * (D / G), pf_off = 0;
    int     bad = 0, stage = G <= TOK_KEYS / 16;
    int16_t th[3][16];
    __m256i keys[TOK_KEYS / 16];

    for (size_t g0 = 0; g0 < ngr; g0 += 16) {
        size_t  nb = ngr - g0 < 16 ? ngr - g0 : 16;
        __m256i vmn[16], vmx[16], kmn, kmx, rmn, rmx, fix;
        thr16_t t16;
        uint8_t sc[32], zr[32];

        for (size_t j = 0; j < 16; j++) {
            const uint16_t *x = src + (g0 + (j < nb ? j : 0)) * G;
            __m256i         k = key16(_mm256_loadu_si256((const __m256i *)(const void *)x));
            __m256i         mn = k, mx = k;

            for (uint32_t i = 0; i < G && pf_off < pf_bytes; i += 32) { /* a line a line read */
                _mm_prefetch(pf + pf_off, _MM_HINT_T1);
                pf_off += 64;
            }

            if (stage) {
                keys[j * (G / 16)] = k;
            }
            for (uint32_t i = 16; i < G; i += 16) {
                k  = key16(_mm256_loadu_si256((const __m256i *)(const void *)(x + i)));
                mn = _mm256_min_epi16(mn, k);
                mx = _mm256_max_epi16(mx, k);
                if (stage) {
                    keys[j * (G / 16) + i / 16] = k;
                }
            }
            vmn[j] = mn;
            vmx[j] = mx;
        }
        rmn = kmn = hred16(vmn, 0);
        rmx = kmx = hred16(vmx, 1);
        bad |= bad16(rmn, rmx);
        fix = _mm256_or_si256(_mm256_cmpeq_epi16(kmn, _mm256_set1_epi16(-1)),
                              _mm256_cmpeq_epi16(kmx, _mm256_setzero_si256()));
        if (!_mm256_testz_si256(fix, fix)) { /* zero min/max: the sign of the first zero */
            int16_t m0[16], m1[16];

            _mm256_storeu_si256((__m256i *)(void *)m0, kmn);
            _mm256_storeu_si256((__m256i *)(void *)m1, kmx);
            for (size_t j = 0; j < 16; j++) {
                const uint16_t *x = src + (g0 + (j < nb ? j : 0)) * G;

                if (m0[j] == -1 || m1[j] == 0) {
                    int z = first_zero_key(x, G, 1);

                    m0[j] = m0[j] == -1 ? (int16_t)z : m0[j];
                    m1[j] = m1[j] == 0 ? (int16_t)z : m1[j];
                }
            }
            kmn = _mm256_loadu_si256((const __m256i *)(const void *)m0);
            kmx = _mm256_loadu_si256((const __m256i *)(const void *)m1);
        }
        params16(rule, kmn, kmx, rmn, rmx, sc, zr, &t16);
        memcpy(scale + 2 * g0, sc, 2 * nb);
        memcpy(zero + 2 * g0, zr, 2 * nb);
        for (int k = 0; k < 3; k++) {
            _mm256_storeu_si256((__m256i *)(void *)th[k], t16.t[k]);
        }
        for (size_t j = 0; j < nb; j++) {
            const uint16_t *x = src + (g0 + j) * G;
            uint8_t        *c = codes + (g0 + j) * G / 4;
            thr16_t         tj;

            tj.t[0] = _mm256_set1_epi16(th[0][j]);
            tj.t[1] = _mm256_set1_epi16(th[1][j]);
            tj.t[2] = _mm256_set1_epi16(th[2][j]);
            for (uint32_t i = 0; i < G; i += 32) {
                __m256i k0, k1;

                if (stage) {
                    k0 = keys[j * (G / 16) + i / 16];
                    k1 = keys[j * (G / 16) + i / 16 + 1];
                } else {
                    k0 = key16(_mm256_loadu_si256((const __m256i *)(const void *)(x + i)));
                    k1 = key16(_mm256_loadu_si256((const __m256i *)(const void *)(x + i + 16)));
                }
                pack_row32(ncode16(k0, &tj), ncode16(k1, &tj), c + i / 4);
            }
        }
    }
    return !bad;
}

int kvp_q2h_tok_encode_pf(const uint16_t *src, size_t rows, uint32_t D, uint32_t G,
                          kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero,
                          const void *pf, size_t pf_bytes)
{
    if (rule == KVP_Q2_RULE_KIVI) {
        return tok_enc(src, rows, D, G, KVP_Q2_RULE_KIVI, codes, scale, zero, pf, pf_bytes);
    }
    return tok_enc(src, rows, D, G, KVP_Q2_RULE_OSCAR, codes, scale, zero, pf, pf_bytes);
}

int kvp_q2h_tok_encode(const uint16_t *src, size_t rows, uint32_t D, uint32_t G,
                       kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    return kvp_q2h_tok_encode_pf(src, rows, D, G, rule, codes, scale, zero, NULL, 0);
}

/* ---- decoders to fp16 ---- */

/* fp16 of q*s + z, q = 0..3, for 8 groups: v[q] holds 8 fp16 */
static inline void values8(const uint8_t *sc, const uint8_t *zr, __m128i v[4])
{
    __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)sc));
    __m256 z = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)zr));

    for (int q = 0; q < 4; q++) {
        __m256 x = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps((float)q), s), z);

        v[q] = kvp_f16x8_sat(x);
    }
}

/* 8 bytes per channel for 16 channels (channel c at in + c*run) -> 8 vectors, vector i holds
 * byte i of each channel in 16-bit lanes. Bytes past nb read as 0. */
void kvp_q2h_load_quads(const uint8_t *in, size_t run, uint32_t nb, __m256i q[8])
{
    __m128i r[16];

    for (int c = 0; c < 16; c++) {
        uint64_t w = 0;

        if (nb == 8) {
            memcpy(&w, in + (size_t)c * run, 8);
        } else {
            memcpy(&w, in + (size_t)c * run, nb);
        }
        r[c] = _mm_cvtsi64_si128((long long)w);
    }
    for (int h = 0; h < 2; h++) {
        __m128i *x = r + 8 * h, a[4], b[4], d[4];

        a[0] = _mm_unpacklo_epi8(x[0], x[1]); /* b0: c0 c1, b1: c0 c1, ... */
        a[1] = _mm_unpacklo_epi8(x[2], x[3]);
        a[2] = _mm_unpacklo_epi8(x[4], x[5]);
        a[3] = _mm_unpacklo_epi8(x[6], x[7]);
        b[0] = _mm_unpacklo_epi16(a[0], a[1]); /* b0: c0..3, b1: c0..3, b2, b3 */
        b[1] = _mm_unpackhi_epi16(a[0], a[1]); /* b4..b7 */
        b[2] = _mm_unpacklo_epi16(a[2], a[3]); /* c4..7 */
        b[3] = _mm_unpackhi_epi16(a[2], a[3]);
        d[0] = _mm_unpacklo_epi32(b[0], b[2]); /* b0: c0..7, b1: c0..7 */
        d[1] = _mm_unpackhi_epi32(b[0], b[2]); /* b2, b3 */
        d[2] = _mm_unpacklo_epi32(b[1], b[3]); /* b4, b5 */
        d[3] = _mm_unpackhi_epi32(b[1], b[3]); /* b6, b7 */
        for (int i = 0; i < 4; i++) {
            r[8 * h + 2 * i]     = d[i];
        }
    }
    for (int i = 0; i < 4; i++) {
        __m128i lo = r[2 * i], hi = r[8 + 2 * i]; /* bytes 2i, 2i+1 of c0..7 and c8..15 */

        q[2 * i]     = _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(lo, hi));
        q[2 * i + 1] = _mm256_cvtepu8_epi16(_mm_unpackhi_epi64(lo, hi));
    }
}

static inline __m256i sel16(__m256i c, int j, const __m256i v[4])
{
    __m256i m0, m1;

    switch (j) { /* shift counts must be immediates */
    case 0:
        m0 = _mm256_srai_epi16(_mm256_slli_epi16(c, 15), 15);
        m1 = _mm256_srai_epi16(_mm256_slli_epi16(c, 14), 15);
        break;
    case 1:
        m0 = _mm256_srai_epi16(_mm256_slli_epi16(c, 13), 15);
        m1 = _mm256_srai_epi16(_mm256_slli_epi16(c, 12), 15);
        break;
    case 2:
        m0 = _mm256_srai_epi16(_mm256_slli_epi16(c, 11), 15);
        m1 = _mm256_srai_epi16(_mm256_slli_epi16(c, 10), 15);
        break;
    default:
        m0 = _mm256_srai_epi16(_mm256_slli_epi16(c, 9), 15);
        m1 = _mm256_srai_epi16(_mm256_slli_epi16(c, 8), 15);
        break;
    }
    return _mm256_blendv_epi8(_mm256_blendv_epi8(v[0], v[1], m0), _mm256_blendv_epi8(v[2], v[3], m0), m1);
}

#define CHD_MAX_BLK 64 /* D <= 1024 */

void kvp_q2h_chan_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                         uint32_t T, uint32_t D, uint32_t hd, uint32_t G, uint16_t *dst,
                         size_t stride)
{
    uint32_t run = kvp_hd_run_bytes(T), nblk = D / 16, ngk = (T + G - 1) / G;
    __m256i  val[CHD_MAX_BLK][4], cq[CHD_MAX_BLK][8];

    for (uint32_t t0 = 0, g = 0; t0 < T; t0 += G, g++) {
        uint32_t t1 = t0 + G < T ? t0 + G : T;

        for (uint32_t b = 0; b < nblk; b++) {
            __m128i lo[4], hi[4];
            size_t  p = 2 * pslot(16 * b, g, hd, ngk);

            values8(scale + p, zero + p, lo);
            values8(scale + p + 16, zero + p + 16, hi);
            for (int q = 0; q < 4; q++) {
                val[b][q] = _mm256_set_m128i(hi[q], lo[q]);
            }
        }
        for (uint32_t s0 = t0; s0 < t1; s0 += 32) {
            uint32_t s1 = s0 + 32 < t1 ? s0 + 32 : t1, nb = (s1 - s0 + 3) / 4;

            for (uint32_t b = 0; b < nblk; b++) {
                kvp_q2h_load_quads(codes + (size_t)16 * b * run + s0 / 4, run, nb, cq[b]);
            }
            for (uint32_t t = s0; t < s1; t++) {
                uint16_t *row = dst + (size_t)t * stride;
                uint32_t  qi = (t - s0) / 4, j = (t - s0) % 4;

                if (t + 4 < T) { /* own the output lines before they are written */
                    for (uint32_t i = 0; i < D; i += 32) {
                        __builtin_prefetch(row + 4 * stride + i, 1, 3);
                    }
                }

                for (uint32_t b = 0; b < nblk; b++) {
                    _mm256_storeu_si256((__m256i *)(void *)(row + 16 * b), sel16(cq[b][qi], (int)j, val[b]));
                }
            }
        }
    }
}

/* lookup tables of one group: byte n of lo/hi = low/high byte of the value of code c(n), where
 * n = c (n < 4) or 4c (n = 4, 8, 12) */
static inline void group_lut(uint64_t vals, __m256i *lo, __m256i *hi)
{
    __m256i v = _mm256_set1_epi64x((long long)vals);

    *lo = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 2, 4, 6, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0,
                                                  0, 2, 4, 6, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0));
    *hi = _mm256_shuffle_epi8(v, _mm256_setr_epi8(1, 3, 5, 7, 3, 1, 1, 1, 5, 1, 1, 1, 7, 1, 1, 1,
                                                  1, 3, 5, 7, 3, 1, 1, 1, 5, 1, 1, 1, 7, 1, 1, 1));
}

/* 8 code bytes (32 codes along the row) -> 32 fp16 at out */
static inline void lut_row32(const uint8_t *c, __m256i lo, __m256i hi, uint16_t *out)
{
    uint64_t w;
    __m256i  x, y, idx, a, b;

    memcpy(&w, c, 8);
    x   = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)w),
                              _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                               4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7));
    y   = _mm256_srli_epi16(x, 4);
    idx = _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(0x00000C03)),
                          _mm256_and_si256(y, _mm256_set1_epi32(0x0C030000)));
    a   = _mm256_shuffle_epi8(lo, idx);
    b   = _mm256_shuffle_epi8(hi, idx);
    x   = _mm256_unpacklo_epi8(a, b); /* codes 0..7 | 16..23 */
    y   = _mm256_unpackhi_epi8(a, b); /* codes 8..15 | 24..31 */
    _mm256_storeu_si256((__m256i *)(void *)out, _mm256_permute2x128_si256(x, y, 0x20));
    _mm256_storeu_si256((__m256i *)(void *)(out + 16), _mm256_permute2x128_si256(x, y, 0x31));
}

void kvp_q2h_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                        size_t rows, uint32_t D, uint32_t G, uint16_t *dst)
{
    size_t ngr = rows * (D / G);

    for (size_t g0 = 0; g0 < ngr; g0 += 8) {
        size_t   nb = ngr - g0 < 8 ? ngr - g0 : 8;
        uint8_t  sc[16], zr[16];
        __m128i  v[4];
        uint16_t vals[4][8];

        memset(sc, 0, sizeof(sc));
        memset(zr, 0, sizeof(zr));
        memcpy(sc, scale + 2 * g0, 2 * nb);
        memcpy(zr, zero + 2 * g0, 2 * nb);
        values8(sc, zr, v);
        for (int q = 0; q < 4; q++) {
            _mm_storeu_si128((__m128i *)(void *)vals[q], v[q]);
        }
        for (size_t j = 0; j < nb; j++) {
            uint64_t w = (uint64_t)vals[0][j] | (uint64_t)vals[1][j] << 16 |
                         (uint64_t)vals[2][j] << 32 | (uint64_t)vals[3][j] << 48;
            __m256i  lo, hi;

            group_lut(w, &lo, &hi);
            if (g0 + 16 + j < ngr) { /* own the output lines before they are written */
                for (uint32_t i = 0; i < G; i += 32) {
                    __builtin_prefetch(dst + (g0 + 16 + j) * G + i, 1, 3);
                }
            }
            for (uint32_t i = 0; i < G; i += 32) {
                lut_row32(codes + (g0 + j) * G / 4 + i / 4, lo, hi, dst + (g0 + j) * G + i);
            }
        }
    }
}
