/* attn_ref.c - portable C reference of the packed-page attention primitives (kvp_attn_ref):
 * dot products of float weights with 2-bit codes, code-weighted accumulation, the fp16
 * equivalents, softmax exponentials. Plain loops over quant_hd.h, built with -ffp-contract=off;
 * this is the definition attn_avx2.c is tested against. */
#include "attn_int.h"
#include "quant_hd.h"

#include <math.h>

static void ref_chan_scores(const uint8_t *codes, size_t run, uint32_t D, uint32_t nt,
                            const float *w, const float *b, const float *fac, uint32_t nh,
                            float *sc, size_t ss)
{
    for (uint32_t j = 0; j < nh; j++) {
        for (uint32_t t = 0; t < nt; t++) {
            float s = 0.0f;

            for (uint32_t d = 0; d < D; d++) {
                s = s + w[(size_t)j * D + d] * (float)kvp_hd_code_get(codes + (size_t)d * run, t);
            }
            s              = b[j] + s;
            sc[j * ss + t] = fac != NULL ? s * fac[t] : s;
        }
    }
}

static void ref_vcoef(const float *p, size_t ps, const float *s, const float *m, size_t ts,
                      uint32_t nt, uint32_t ng, uint32_t nh, float *coef, float *bias)
{
    for (uint32_t t = 0; t < nt; t++) {
        for (uint32_t j = 0; j < nh; j++) {
            float pj = p[j * ps + t];

            for (uint32_t g = 0; g < ng; g++) {
                coef[((size_t)t * nh + j) * ng + g] = pj * s[t * ts + g];
                bias[j * ng + g] = bias[j * ng + g] + pj * m[t * ts + g];
            }
        }
    }
}

static void ref_tok_mix(const uint8_t *codes, size_t rs, uint32_t nt, uint32_t D, uint32_t gv,
                        const float *coef, uint32_t nh, float *acc)
{
    uint32_t ng = D / gv;

    for (uint32_t t = 0; t < nt; t++) {
        const uint8_t *run = codes + (size_t)t * rs;

        for (uint32_t j = 0; j < nh; j++) {
            const float *c = coef + ((size_t)t * nh + j) * ng;

            for (uint32_t d = 0; d < D; d++) {
                acc[(size_t)j * D + d] =
                    acc[(size_t)j * D + d] + c[d / gv] * (float)kvp_hd_code_get(run, d);
            }
        }
    }
}

static void ref_f16_scores(const uint16_t *k, size_t ks, uint32_t nt, uint32_t D, const float *q,
                           uint32_t nh, float *sc, size_t ss)
{
    for (uint32_t j = 0; j < nh; j++) {
        for (uint32_t t = 0; t < nt; t++) {
            float s = 0.0f;

            for (uint32_t d = 0; d < D; d++) {
                s = s + q[(size_t)j * D + d] * kvp_hd_f32(k[t * ks + d]);
            }
            sc[j * ss + t] = s;
        }
    }
}

static void ref_f16_mix(const uint16_t *v, size_t vs, uint32_t nt, uint32_t D, const float *p,
                        size_t ps, uint32_t nh, float *acc)
{
    for (uint32_t t = 0; t < nt; t++) {
        for (uint32_t j = 0; j < nh; j++) {
            float pj = p[j * ps + t];

            for (uint32_t d = 0; d < D; d++) {
                acc[(size_t)j * D + d] = acc[(size_t)j * D + d] + pj * kvp_hd_f32(v[t * vs + d]);
            }
        }
    }
}

static void ref_prep(const float *q, const float *s, const float *m, uint32_t D, uint32_t nh,
                     float *w, float *b)
{
    for (uint32_t j = 0; j < nh; j++) {
        float bj = 0.0f;

        for (uint32_t d = 0; d < D; d++) {
            w[(size_t)j * D + d] = q[(size_t)j * D + d] * s[d];
            bj = bj + q[(size_t)j * D + d] * m[d];
        }
        b[j] = bj;
    }
}

static float ref_exp_sum(float *x, uint32_t n, float mx)
{
    float sum = 0.0f;

    for (uint32_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum  = sum + x[i];
    }
    return sum;
}

static float ref_max(const float *x, uint32_t n)
{
    float m = x[0];

    for (uint32_t i = 1; i < n; i++) {
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

static void ref_h2f(const uint8_t *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = kvp_hd_ldh(src + 2 * i);
    }
}

const kvp_attn_kern_t kvp_attn_ref = {
    .impl        = "ref",
    .chan_scores = ref_chan_scores,
    .vcoef       = ref_vcoef,
    .tok_mix     = ref_tok_mix,
    .f16_scores  = ref_f16_scores,
    .f16_mix     = ref_f16_mix,
    .prep        = ref_prep,
    .exp_sum     = ref_exp_sum,
    .max         = ref_max,
    .h2f         = ref_h2f,
};
