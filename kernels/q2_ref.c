/* q2_ref.c - portable C reference of the 2-bit primitives (kvp_q2_ref): per-channel and
 * per-token group quantization under the KIVI and OScaR rules, the Walsh-Hadamard rows, the
 * OScaR token norm, VarN and the KVarN row RTN. Plain loops over the quant_hd.h scalar math;
 * built with -ffp-contract=off. This is the definition the AVX2 and CUDA twins are tested
 * against. */
#include "codec_ops.h"
#include "quant_hd.h"

#include <string.h>

#include "q2_int.h"

static void put_params(kvp_q2_rule_t rule, float mn, float mx, uint8_t *s_out, uint8_t *z_out,
                       kvp_hd_oscar_t *op, float *ks)
{
    if (rule == KVP_Q2_RULE_KIVI) {
        *ks = kvp_hd_kivi_scale(mn, mx);
        kvp_hd_sth(s_out, *ks);
        kvp_hd_sth(z_out, mn);
    } else {
        *op = kvp_hd_oscar_params(mn, mx);
        kvp_hd_sth(s_out, op->s);
        kvp_hd_sth(z_out, op->zd);
    }
}

static uint32_t rule_code(kvp_q2_rule_t rule, float x, float mn, float ks,
                          const kvp_hd_oscar_t *op)
{
    return rule == KVP_Q2_RULE_KIVI ? kvp_hd_kivi_code(x, mn, ks) : kvp_hd_oscar_code(x, op);
}

void kvp_q2_ref_chan_encode(const float *src, size_t stride, uint32_t T, uint32_t D, uint32_t G,
                            kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    uint32_t run = kvp_hd_run_bytes(T);
    uint32_t ng  = (T + G - 1) / G;

    memset(codes, 0, (size_t)D * run);
    for (uint32_t g = 0; g < ng; g++) {
        uint32_t t0 = g * G, t1 = t0 + G < T ? t0 + G : T;

        for (uint32_t d = 0; d < D; d++) {
            float          mn = src[(size_t)t0 * stride + d], mx = mn, ks = 0.0f;
            kvp_hd_oscar_t op;

            for (uint32_t t = t0 + 1; t < t1; t++) {
                float x = src[(size_t)t * stride + d];

                mn = x < mn ? x : mn;
                mx = x > mx ? x : mx;
            }
            put_params(rule, mn, mx, scale + 2 * ((size_t)g * D + d),
                       zero + 2 * ((size_t)g * D + d), &op, &ks);
            for (uint32_t t = t0; t < t1; t++) {
                kvp_hd_code_put(codes + (size_t)d * run, t,
                                rule_code(rule, src[(size_t)t * stride + d], mn, ks, &op));
            }
        }
    }
}

void kvp_q2_ref_chan_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                            uint32_t T, uint32_t D, uint32_t G, float *dst, size_t stride)
{
    uint32_t run = kvp_hd_run_bytes(T);

    for (uint32_t d = 0; d < D; d++) {
        for (uint32_t t = 0; t < T; t++) {
            size_t p = 2 * ((size_t)(t / G) * D + d);

            dst[(size_t)t * stride + d] = kvp_hd_dequant(
                kvp_hd_code_get(codes + (size_t)d * run, t), kvp_hd_ldh(scale + p),
                kvp_hd_ldh(zero + p));
        }
    }
}

void kvp_q2_ref_tok_encode(const float *src, size_t rows, uint32_t D, uint32_t G,
                           kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    uint32_t run = kvp_hd_run_bytes(D);
    uint32_t ng  = D / G;

    memset(codes, 0, rows * run);
    for (size_t r = 0; r < rows; r++) {
        const float *x = src + r * D;

        for (uint32_t g = 0; g < ng; g++) {
            float          mn = x[g * G], mx = mn, ks = 0.0f;
            kvp_hd_oscar_t op;

            for (uint32_t i = g * G + 1; i < (g + 1) * G; i++) {
                mn = x[i] < mn ? x[i] : mn;
                mx = x[i] > mx ? x[i] : mx;
            }
            put_params(rule, mn, mx, scale + 2 * (r * ng + g), zero + 2 * (r * ng + g), &op,
                       &ks);
            for (uint32_t i = g * G; i < (g + 1) * G; i++) {
                kvp_hd_code_put(codes + r * run, i, rule_code(rule, x[i], mn, ks, &op));
            }
        }
    }
}

void kvp_q2_ref_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                           size_t rows, uint32_t D, uint32_t G, float *dst)
{
    uint32_t run = kvp_hd_run_bytes(D);
    uint32_t ng  = D / G;

    for (size_t r = 0; r < rows; r++) {
        for (uint32_t i = 0; i < D; i++) {
            size_t p = 2 * (r * ng + i / G);

            dst[r * D + i] = kvp_hd_dequant(kvp_hd_code_get(codes + r * run, i),
                                            kvp_hd_ldh(scale + p), kvp_hd_ldh(zero + p));
        }
    }
}

int kvp_q2_ref_rot_rows(const float *src, float *dst, size_t rows, uint32_t D, int round16)
{
    int ok = 1;

    for (size_t r = 0; r < rows; r++) {
        float *x = dst + r * D;

        if (src != dst) {
            memcpy(x, src + r * D, D * sizeof(float));
        }
        kvp_hd_fwht(x, D);
        for (uint32_t i = 0; i < D; i++) {
            if (round16) {
                x[i] = kvp_hd_h(x[i]);
            }
            ok &= fabsf(x[i]) <= 65504.0f;
        }
    }
    return ok;
}

void kvp_q2_ref_oscar_norm(float *x, uint32_t T, uint32_t HD, float *norms)
{
    for (uint32_t t = 0; t < T; t++) {
        float *row = x + (size_t)t * HD;
        float  n   = kvp_hd_oscar_norm(kvp_hd_sumsq8(row, HD));

        norms[t] = n;
        for (uint32_t i = 0; i < HD; i++) {
            row[i] = kvp_hd_h(kvp_hd_h(row[i]) / n);
        }
    }
}

void kvp_q2_ref_scale_rows(float *x, uint32_t T, uint32_t HD, const float *norms)
{
    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t i = 0; i < HD; i++) {
            x[(size_t)t * HD + i] = x[(size_t)t * HD + i] * norms[t];
        }
    }
}

/* ---- VarN, literally CODECS.md 2.2 ---- */

/* cur = X / exp(Lc)[None, :] / exp(Lr)[:, None] */
static void varn_apply(const float *X, uint32_t R, uint32_t C, const float *ec, const float *er,
                       float *cur)
{
    for (uint32_t r = 0; r < R; r++) {
        for (uint32_t c = 0; c < C; c++) {
            cur[(size_t)r * C + c] = X[(size_t)r * C + c] / ec[c] / er[r];
        }
    }
}

static void varn_stds(const float *cur, uint32_t R, uint32_t C, float *colstd, float *rowstd)
{
    for (uint32_t c = 0; c < C; c++) {
        colstd[c] = kvp_hd_std(cur + c, R, C);
    }
    for (uint32_t r = 0; r < R; r++) {
        rowstd[r] = kvp_hd_std(cur + (size_t)r * C, C, 1);
    }
}

void kvp_q2_ref_varn(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                     float *Sr, float *work, const kvp_next_rows_t *next)
{
    float *cur = work;                  /* R*C */
    float *Lc = work + (size_t)R * C;   /* C */
    float *Lr = Lc + C;                 /* R */
    float *ec = Lr + R, *er = ec + C;   /* exp(Lc), exp(Lr) */
    float *colstd = er + R, *rowstd = colstd + C;
    float  best;

    (void)next; /* the reference never prefetches */
    for (uint32_t c = 0; c < C; c++) {
        Lc[c] = 0.0f;
        ec[c] = 1.0f;
        Sc[c] = 1.0f;
    }
    for (uint32_t r = 0; r < R; r++) {
        Lr[r] = 0.0f;
        er[r] = 1.0f;
        Sr[r] = 1.0f;
    }
    varn_stds(X, R, C, colstd, rowstd);
    best = kvp_hd_varn_imb(colstd, C, rowstd, R);
    memcpy(cur, X, (size_t)R * C * sizeof(float));
    for (uint32_t it = 0; it < iters; it++) {
        float imb;

        for (uint32_t c = 0; c < C; c++) {
            colstd[c] = kvp_hd_std(cur + c, R, C);
            Lc[c]     = kvp_hd_varn_step(Lc[c], colstd[c]);
            ec[c]     = expf(Lc[c]);
        }
        varn_apply(X, R, C, ec, er, cur);
        for (uint32_t r = 0; r < R; r++) {
            rowstd[r] = kvp_hd_std(cur + (size_t)r * C, C, 1);
            Lr[r]     = kvp_hd_varn_step(Lr[r], rowstd[r]);
            er[r]     = expf(Lr[r]);
        }
        varn_apply(X, R, C, ec, er, cur);
        varn_stds(cur, R, C, colstd, rowstd);
        imb = kvp_hd_varn_imb(colstd, C, rowstd, R);
        if (imb <= best) { /* later ties win */
            best = imb;
            memcpy(Sc, ec, C * sizeof(float));
            memcpy(Sr, er, R * sizeof(float));
        }
    }
}

void kvp_q2_ref_kvarn_rtn(const float *X, uint32_t R, uint32_t C, const float *Sc,
                          const float *Sr, uint8_t *codes, uint8_t *A, uint8_t *Z, uint8_t *B)
{
    uint32_t run = kvp_hd_run_bytes(C);

    memset(codes, 0, (size_t)R * run);
    for (uint32_t r = 0; r < R; r++) {
        float lo = X[(size_t)r * C] / Sc[0] / Sr[r], hi = lo, s;

        for (uint32_t c = 1; c < C; c++) {
            float b = X[(size_t)r * C + c] / Sc[c] / Sr[r];

            lo = b < lo ? b : lo;
            hi = b > hi ? b : hi;
        }
        s = kvp_hd_kvarn_scale(lo, hi);
        for (uint32_t c = 0; c < C; c++) {
            float b = X[(size_t)r * C + c] / Sc[c] / Sr[r];

            kvp_hd_code_put(codes + (size_t)r * run, c, kvp_hd_kvarn_code(b, lo, s));
        }
        kvp_hd_sth(A + 2 * (size_t)r, Sr[r] * s);
        kvp_hd_sth(Z + 2 * (size_t)r, Sr[r] * lo);
    }
    for (uint32_t c = 0; c < C; c++) {
        kvp_hd_sth(B + 2 * (size_t)c, Sc[c]);
    }
}

void kvp_q2_ref_kvarn_deq(const uint8_t *codes, const uint8_t *A, const uint8_t *Z,
                          const uint8_t *B, uint32_t R, uint32_t C, float *dst, size_t rs,
                          size_t cs)
{
    uint32_t run = kvp_hd_run_bytes(C);

    for (uint32_t r = 0; r < R; r++) {
        float a = kvp_hd_ldh(A + 2 * (size_t)r), z = kvp_hd_ldh(Z + 2 * (size_t)r);

        for (uint32_t c = 0; c < C; c++) {
            dst[r * rs + c * cs] =
                kvp_hd_dequant(kvp_hd_code_get(codes + (size_t)r * run, c), a, z) *
                kvp_hd_ldh(B + 2 * (size_t)c);
        }
    }
}

const kvp_q2_kern_t kvp_q2_ref = {
    .impl        = "ref",
    .chan_encode = kvp_q2_ref_chan_encode,
    .chan_decode = kvp_q2_ref_chan_decode,
    .tok_encode  = kvp_q2_ref_tok_encode,
    .tok_decode  = kvp_q2_ref_tok_decode,
    .rot_rows    = kvp_q2_ref_rot_rows,
    .oscar_norm  = kvp_q2_ref_oscar_norm,
    .scale_rows  = kvp_q2_ref_scale_rows,
    .varn        = kvp_q2_ref_varn,
    .kvarn_rtn   = kvp_q2_ref_kvarn_rtn,
    .kvarn_deq   = kvp_q2_ref_kvarn_deq,
};
