/* quant_hd.h - scalar math shared by the C reference, the AVX2 twins and the CUDA kernels:
 * fp16 bits <-> float, 2-bit code packing, the three asymmetric round-to-nearest rules of
 * CODECS.md 0.2 (KIVI, OScaR-CUDA, KVarN), the normalized Walsh-Hadamard butterfly and the
 * striped sum of squares that fixes the OScaR norm's summation order. Compiled by cc (C11) and by
 * nvcc (C++), so it stays in their common subset. Every function is KVP_HD (static inline,
 * __host__ __device__ under nvcc). Build users with -ffp-contract=off / --fmad=false: the
 * twins are bit-exact only when a*b+c is not fused. */
#ifndef KVPACK_QUANT_HD_H
#define KVPACK_QUANT_HD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define KVP_HD static inline __host__ __device__
#else
#define KVP_HD static inline
#endif

#define KVP_Q2_MAX 3.0f /* qmax for 2-bit codes */

/* ---- bits ---- */

KVP_HD uint32_t kvp_hd_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
#endif
}

KVP_HD float kvp_hd_bits_f32(uint32_t x)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(x);
#else
    float f;
    memcpy(&f, &x, 4);
    return f;
#endif
}

/* IEEE binary16, round to nearest even; overflow gives Inf, NaN stays NaN. */
KVP_HD uint16_t kvp_hd_f16(float f)
{
    uint32_t x    = kvp_hd_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp  = (x >> 23) & 0xFFu;
    uint32_t mant = x & 0x7FFFFFu;
    int      e;

    if (exp == 0xFFu) {
        return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u));
    }
    e = (int)exp - 127 + 15;
    if (e >= 31) {
        return (uint16_t)(sign | 0x7C00u);
    }
    if (e <= 0) {
        uint32_t shift, half, rem, mid;

        if (e < -10) {
            return (uint16_t)sign;
        }
        mant |= 0x800000u;
        shift = (uint32_t)(14 - e);
        half  = mant >> shift;
        rem   = mant & ((1u << shift) - 1u);
        mid   = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) {
            half++;
        }
        return (uint16_t)(sign | half);
    }
    {
        uint32_t half = ((uint32_t)e << 10) | (mant >> 13);
        uint32_t rem  = mant & 0x1FFFu;

        if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) {
            half++; /* a carry into the exponent is the correct rounding */
        }
        return (uint16_t)(sign | half);
    }
}

KVP_HD float kvp_hd_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp  = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t x;

    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else {
            exp = 127 - 15 + 1;
            while ((mant & 0x400u) == 0) {
                mant <<= 1;
                exp--;
            }
            x = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7F800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    return kvp_hd_bits_f32(x);
}

/* fp16 of a decoded value: the 2-bit grid can put a value part of a step past the input's range,
 * so one past +-65504 saturates there instead of rounding to Inf (NaN stays NaN). Every decoder's
 * fp16 output goes through this or its AVX2 twin kvp_f16x8_sat (avx2_int.h); h_avx2.c skips the
 * clamp on rows that a bound shows cannot pass 65504. */
KVP_HD uint16_t kvp_hd_f16_sat(float f)
{
    return kvp_hd_f16(f > 65504.0f ? 65504.0f : f < -65504.0f ? -65504.0f : f);
}

/* Round a float through fp16 (the model dtype of the references). */
KVP_HD float kvp_hd_h(float f) { return kvp_hd_f32(kvp_hd_f16(f)); }

/* Unaligned little-endian fp16 slots inside a payload. */
KVP_HD uint16_t kvp_hd_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
KVP_HD void kvp_hd_st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
KVP_HD float kvp_hd_ldh(const uint8_t *p) { return kvp_hd_f32(kvp_hd_ld16(p)); }
KVP_HD void  kvp_hd_sth(uint8_t *p, float f) { kvp_hd_st16(p, kvp_hd_f16(f)); }

/* 1 when none of n fp16 slots at p is Inf/NaN (a stored scale or zero that overflowed). */
KVP_HD int kvp_hd_f16_all_finite(const uint8_t *p, size_t n)
{
    /* four halves a step (kvp_page_parse runs this over every scale and zero of a page): v has
     * a zero 16-bit lane where a half's exponent is all ones, and (v - 1s) & ~v & 0x8000s is
     * non-zero exactly when some lane of v is zero (a borrow can mark a lane above a zero lane
     * too, never one without a zero below it). Lanes are little-endian halves, as stored. */
    const uint64_t m = 0x7C007C007C007C00ull, ones = 0x0001000100010001ull;
    uint64_t       bad = 0;
    size_t         i   = 0;

    for (; i + 4 <= n; i += 4) {
        uint64_t x, v;

        memcpy(&x, p + 2 * i, 8);
        v = (x & m) ^ m;
        bad |= (v - ones) & ~v & 0x8000800080008000ull;
    }
    for (; i < n; i++) {
        bad |= (uint64_t)((kvp_hd_ld16(p + 2 * i) & 0x7C00u) == 0x7C00u);
    }
    return bad == 0;
}

/* ---- 2-bit codes: code i of a run at bits [2i, 2i+1] of byte i/4 ---- */

KVP_HD uint32_t kvp_hd_run_bytes(uint32_t n) { return (n + 3u) / 4u; }

/* Payload offsets of a kivi / kivi128 / oscar page (tables: codec_kivi.c, codec_oscar.c) of T
 * tokens, H heads x D, K groups of G tokens, V groups of gv channels; each zero section follows
 * its scale section (fp16); total = payload bytes. The one description of these pages that the
 * codecs (codec_*.c, codec_cuda.cu) and the attention paths (attn.c, attn_cuda.cu) all use. */
typedef struct {
    size_t   k_codes, k_scale, k_zero, v_codes, v_scale, v_zero, total;
    uint32_t rt, rd, ngk, ng, gv; /* code run bytes along tokens / channels, K / V groups, V group */
} kvp_hd_q2_layout_t;

KVP_HD kvp_hd_q2_layout_t kvp_hd_q2_layout(int oscar, uint32_t T, uint32_t H, uint32_t D,
                                           uint32_t G, uint32_t gv)
{
    kvp_hd_q2_layout_t l;

    l.rt      = kvp_hd_run_bytes(T);
    l.rd      = kvp_hd_run_bytes(D);
    l.ngk     = (T + G - 1) / G;
    l.ng      = D / gv;
    l.k_codes = oscar ? 4 * (size_t)T : 0; /* oscar: the fp32 norms first */
    l.k_scale = l.k_codes + (size_t)H * D * l.rt;
    l.k_zero  = l.k_scale + 2 * (size_t)H * l.ngk * D;
    l.v_codes = l.k_zero + 2 * (size_t)H * l.ngk * D;
    l.v_scale = l.v_codes + (size_t)T * H * l.rd;
    l.v_zero  = l.v_scale + 2 * (size_t)T * H * l.ng;
    l.total   = l.v_zero + 2 * (size_t)T * H * l.ng;
    l.gv      = gv;
    return l;
}

/* 1 when each of the n little-endian fp32 OScaR norms at p is > 0 and at most max_norm. The
 * encoder stores a zero or NaN norm as 1, and a token's norm over hd values within +-65504 is at
 * most 65504 * sqrt(hd) (the rotation keeps it), so no page it wrote holds another; a larger
 * finite norm (a forged page) would decode K to Inf and, through the rotation, NaN. */
KVP_HD int kvp_hd_norms_ok(const uint8_t *p, size_t n, float max_norm)
{
    for (size_t t = 0; t < n; t++) {
        uint32_t x = (uint32_t)p[4 * t] | (uint32_t)p[4 * t + 1] << 8 |
                     (uint32_t)p[4 * t + 2] << 16 | (uint32_t)p[4 * t + 3] << 24;

        if ((x & 0x80000000u) != 0 || x == 0 || !(kvp_hd_bits_f32(x) <= max_norm)) {
            return 0; /* negative, -0, 0, NaN, Inf or past the bound */
        }
    }
    return 1;
}

/* Offsets inside one head's record of a kvarn page (table: codec_kvarn.c) of T tokens x D: K
 * codes [D][rt] at 0, then fp16 A, Z [D] and B [T]; V codes [T][rd], then fp16 A, Z [T] and
 * B [D]; rec bytes per head. */
typedef struct {
    size_t   k_a, k_z, k_b, v_codes, v_a, v_z, v_b, rec;
    uint32_t rt, rd;
} kvp_hd_kvarn_layout_t;

KVP_HD kvp_hd_kvarn_layout_t kvp_hd_kvarn_layout(uint32_t T, uint32_t D)
{
    kvp_hd_kvarn_layout_t l;

    l.rt      = kvp_hd_run_bytes(T);
    l.rd      = kvp_hd_run_bytes(D);
    l.k_a     = (size_t)D * l.rt;
    l.k_z     = l.k_a + 2 * (size_t)D;
    l.k_b     = l.k_z + 2 * (size_t)D;
    l.v_codes = l.k_b + 2 * (size_t)T;
    l.v_a     = l.v_codes + (size_t)T * l.rd;
    l.v_z     = l.v_a + 2 * (size_t)T;
    l.v_b     = l.v_z + 2 * (size_t)T;
    l.rec     = l.v_b + 2 * (size_t)D;
    return l;
}

/* Every stored fp16 parameter (A, Z, B of K and V) of a kvarn page of H records is finite. */
KVP_HD int kvp_hd_kvarn_params_finite(const uint8_t *p, uint32_t H,
                                      const kvp_hd_kvarn_layout_t *l)
{
    for (uint32_t h = 0; h < H; h++) {
        const uint8_t *rec = p + (size_t)h * l->rec;

        if (!kvp_hd_f16_all_finite(rec + l->k_a, (l->v_codes - l->k_a) / 2) ||
            !kvp_hd_f16_all_finite(rec + l->v_a, (l->rec - l->v_a) / 2)) {
            return 0;
        }
    }
    return 1;
}

KVP_HD uint32_t kvp_hd_code_get(const uint8_t *run, uint32_t i)
{
    return (uint32_t)(run[i >> 2] >> ((i & 3u) * 2u)) & 3u;
}

/* The run must start zeroed. */
KVP_HD void kvp_hd_code_put(uint8_t *run, uint32_t i, uint32_t q)
{
    run[i >> 2] = (uint8_t)(run[i >> 2] | (q << ((i & 3u) * 2u)));
}

KVP_HD float kvp_hd_clamp(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* Round half to even (rintf in the default rounding mode, as torch.round and CUDA rint). */
KVP_HD float kvp_hd_rint(float x) { return rintf(x); }

KVP_HD float kvp_hd_dequant(uint32_t q, float scale, float zero) { return (float)q * scale + zero; }

/* ---- KIVI (KI:quant/new_pack.py): s = (mx-mn)/qmax, float zero mn, code = round((x-mn)/s).
 * ours: s == 0 (constant group) gives code 0 and dequant = mn (KIVI itself divides 0/0). ---- */

KVP_HD float kvp_hd_kivi_scale(float mn, float mx) { return (mx - mn) / KVP_Q2_MAX; }

KVP_HD uint32_t kvp_hd_kivi_code(float x, float mn, float s)
{
    if (s == 0.0f) {
        return 0;
    }
    return (uint32_t)kvp_hd_rint(kvp_hd_clamp((x - mn) / s, 0.0f, KVP_Q2_MAX));
}

/* ---- OScaR CUDA (OS:qpack.h compute_affine_asym_params): s = (mx-mn)/qmax, inv = qmax/(mx-mn),
 * integer zero zq = rint(-mn/s), code = clamp(rint(x*inv + zq)), stored zd = -zq*s.
 * mn == mx == 0 -> range [-1, 1]; mn == mx != 0 -> inv = 0, zq = 0, s = 0, zd = mn (exact). ---- */

typedef struct {
    float s;   /* scale stored (fp16) */
    float inv; /* qmax / range, used for the codes */
    float zq;  /* integer zero point (as float) */
    float zd;  /* stored zero offset: dequant = q*s + zd */
} kvp_hd_oscar_t;

KVP_HD kvp_hd_oscar_t kvp_hd_oscar_params(float mn, float mx)
{
    kvp_hd_oscar_t p;

    /* a range so small (subnormal, under ~8.8e-39) that 3/range overflows is a constant group
     * too: x * Inf would be NaN for x = 0, and NaN to an integer is undefined */
    if ((mn == mx && mn != 0.0f) || (mn != mx && KVP_Q2_MAX / (mx - mn) > 3.40282347e38f)) {
        p.s   = 0.0f;
        p.inv = 0.0f;
        p.zq  = 0.0f;
        p.zd  = mn;
        return p;
    }
    if (mn == mx) {
        mn = -1.0f;
        mx = 1.0f;
    }
    p.s   = (mx - mn) / KVP_Q2_MAX;
    p.inv = KVP_Q2_MAX / (mx - mn);
    p.zq  = kvp_hd_rint(-mn / p.s);
    p.zd  = -p.zq * p.s;
    return p;
}

KVP_HD uint32_t kvp_hd_oscar_code(float x, const kvp_hd_oscar_t *p)
{
    float t = x * p->inv;

    return (uint32_t)kvp_hd_clamp(kvp_hd_rint(t + p->zq), 0.0f, KVP_Q2_MAX);
}

/* ---- KVarN (KV:kvarn_store.py): s = max((hi-lo)/qmax, 1e-10), float zero lo,
 * code = clamp(round((x-lo)/s)). ---- */

KVP_HD float kvp_hd_kvarn_scale(float lo, float hi)
{
    float s = (hi - lo) / KVP_Q2_MAX;

    return s > 1e-10f ? s : 1e-10f;
}

KVP_HD uint32_t kvp_hd_kvarn_code(float x, float lo, float s)
{
    return (uint32_t)kvp_hd_clamp(kvp_hd_rint((x - lo) / s), 0.0f, KVP_Q2_MAX);
}

/* ---- Walsh-Hadamard: normalized Sylvester order, H[i][j] = (-1)^popcount(i&j) / sqrt(n).
 * In place, stages h = 1, 2, 4, ... then one multiply by 1/sqrt(n); n a power of two. The
 * twins use the same stage order, so every output is the same sequence of adds. ---- */

KVP_HD float kvp_hd_fwht_norm(uint32_t n) { return 1.0f / sqrtf((float)n); }

KVP_HD void kvp_hd_fwht(float *x, uint32_t n)
{
    float c = kvp_hd_fwht_norm(n);

    for (uint32_t h = 1; h < n; h <<= 1) {
        for (uint32_t i = 0; i < n; i += 2 * h) {
            for (uint32_t j = i; j < i + h; j++) {
                float a = x[j];
                float b = x[j + h];

                x[j]     = a + b;
                x[j + h] = a - b;
            }
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        x[i] = x[i] * c;
    }
}

/* Sum of squares in 8 striped lanes (lane = i % 8), reduced ((0+1)+(2+3))+((4+5)+(6+7)):
 * the order an 8-wide SIMD accumulator gives, so the OScaR norm is bit-exact across twins. */
KVP_HD float kvp_hd_sumsq8(const float *x, uint32_t n)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};

    for (uint32_t i = 0; i < n; i++) {
        a[i & 7u] = a[i & 7u] + x[i] * x[i];
    }
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* OScaR token norm: !(n > 0) (zero or NaN) -> 1. */
KVP_HD float kvp_hd_oscar_norm(float sumsq)
{
    float n = sqrtf(sumsq);

    return (n > 0.0f) ? n : 1.0f;
}

/* ---- VarN statistics (KV:sinkhorn.py): unbiased sample std, two-pass (mean first), over n
 * values at stride; n < 2 gives 0 (torch would give NaN; the clamp then maps it to 1e-3). ---- */

KVP_HD float kvp_hd_std(const float *x, uint32_t n, uint32_t stride)
{
    float sum = 0.0f, mean, ss = 0.0f;

    if (n < 2) {
        return 0.0f;
    }
    for (uint32_t i = 0; i < n; i++) {
        sum = sum + x[(size_t)i * stride];
    }
    mean = sum / (float)n;
    for (uint32_t i = 0; i < n; i++) {
        float d = x[(size_t)i * stride] - mean;

        ss = ss + d * d;
    }
    return sqrtf(ss / (float)(n - 1));
}

#define KVP_VARN_STD_LO  1e-3f
#define KVP_VARN_STD_HI  1e3f
#define KVP_VARN_LOG_LO  -0.3f
#define KVP_VARN_LOG_HI  10.0f
#define KVP_VARN_IMB_EPS 1e-8f
#define KVP_VARN_ITERS   8u
#define KVP_VARN_MAX_ITERS 64u

/* Lc + ln(clamp(std)) clamped to the log-scale range. */
KVP_HD float kvp_hd_varn_step(float l, float sd)
{
    return kvp_hd_clamp(l + logf(kvp_hd_clamp(sd, KVP_VARN_STD_LO, KVP_VARN_STD_HI)),
                        KVP_VARN_LOG_LO, KVP_VARN_LOG_HI);
}

/* max(v) / max(min(v), 1e-8) */
KVP_HD float kvp_hd_ratio(float mx, float mn)
{
    return mx / (mn > KVP_VARN_IMB_EPS ? mn : KVP_VARN_IMB_EPS);
}

/* VarN imbalance (CODECS.md 2.2, the code's std form):
 * max(colstd)/max(min(colstd),1e-8) + max(rowstd)/max(min(rowstd),1e-8). */
KVP_HD float kvp_hd_varn_imb(const float *colstd, uint32_t C, const float *rowstd, uint32_t R)
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

#endif
