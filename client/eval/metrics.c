/* metrics.c - codec quality metrics: Frobenius relative error, the magnitude/direction error
 * decomposition, and the static and pseudo-decode attention-output errors (eval.h). All in
 * double precision; queries are deterministic for a seed. */
#include "eval.h"
#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/rand.h"

#include <math.h>
#include <string.h>

double kvp_rel_err(const float *x_hat, const float *x, size_t n)
{
    double num = 0.0, den = 0.0;

    for (size_t i = 0; i < n; i++) {
        double d = (double)x_hat[i] - x[i];

        num += d * d;
        den += (double)x[i] * x[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

void kvp_err_decomp(const float *x_hat, const float *x, size_t rows, uint32_t dim, double *mag_p,
                    double *dir_p)
{
    double mag = 0.0, dir = 0.0, den = 0.0;

    for (size_t r = 0; r < rows; r++) {
        double nx = 0.0, nh = 0.0, dot = 0.0;

        for (uint32_t i = 0; i < dim; i++) {
            double a = x[r * dim + i], b = x_hat[r * dim + i];

            nx += a * a;
            nh += b * b;
            dot += a * b;
        }
        den += nx;
        nx = sqrt(nx);
        nh = sqrt(nh);
        mag += (nx - nh) * (nx - nh);
        dir += 2.0 * (nx * nh - dot); /* 2|x||xh|(1 - cos) */
    }
    *mag_p = den > 0.0 ? sqrt(mag / den) : 0.0;
    *dir_p = den > 0.0 ? sqrt(fmax(dir, 0.0) / den) : 0.0;
}

/* ---- attention ---- */

typedef struct {
    uint64_t s;
} qrng_t;

static uint64_t q_next(qrng_t *r) { return kvp_splitmix64(&r->s); }

static double q_gauss(qrng_t *r)
{
    double u = ((double)(q_next(r) >> 11) + 0.5) / 9007199254740992.0;
    double v = ((double)(q_next(r) >> 11) + 0.5) / 9007199254740992.0;

    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Build query (index qi) for head h over context [0, ctx): even qi random, odd qi the key at pos. */
static void make_query(qrng_t *r, int odd, const float *k, uint32_t ctx, uint32_t heads,
                       uint32_t h, uint32_t D, uint32_t pos, double *q, double *logit)
{
    double sum = 0.0, sum2 = 0.0, sd, nrm = 0.0;

    for (uint32_t d = 0; d < D; d++) {
        q[d] = odd ? k[((size_t)pos * heads + h) * D + d] : q_gauss(r);
        nrm += q[d] * q[d];
    }
    nrm = nrm > 0.0 ? 1.0 / sqrt(nrm) : 1.0;
    for (uint32_t d = 0; d < D; d++) {
        q[d] *= nrm;
    }
    for (uint32_t t = 0; t < ctx; t++) {
        const float *kt = k + ((size_t)t * heads + h) * D;
        double       l = 0.0;

        for (uint32_t d = 0; d < D; d++) {
            l += q[d] * kt[d];
        }
        l /= sqrt((double)D);
        logit[t] = l;
        sum += l;
        sum2 += l * l;
    }
    sd = ctx > 1 ? sqrt(fmax(sum2 / ctx - (sum / ctx) * (sum / ctx), 0.0)) : 0.0;
    sd = sd > 1e-12 ? 3.0 / sd : 1.0;
    for (uint32_t d = 0; d < D; d++) {
        q[d] *= sd;
    }
}

/* o = softmax(q.K/sqrt(D)) V over [0, ctx); keys/values of t < split from (kh, vh), the rest
 * from (k, v). */
static void attend(const double *q, const float *kh, const float *vh, const float *k,
                   const float *v, uint32_t split, uint32_t ctx, uint32_t heads, uint32_t h,
                   uint32_t D, double *logit, double *o)
{
    double mx = -INFINITY, den = 0.0;

    for (uint32_t t = 0; t < ctx; t++) {
        const float *kt = (t < split ? kh : k) + ((size_t)t * heads + h) * D;
        double       l = 0.0;

        for (uint32_t d = 0; d < D; d++) {
            l += q[d] * kt[d];
        }
        logit[t] = l / sqrt((double)D);
        mx = logit[t] > mx ? logit[t] : mx;
    }
    memset(o, 0, D * sizeof(double));
    for (uint32_t t = 0; t < ctx; t++) {
        const float *vt = (t < split ? vh : v) + ((size_t)t * heads + h) * D;
        double       w = exp(logit[t] - mx);

        den += w;
        for (uint32_t d = 0; d < D; d++) {
            o[d] += w * vt[d];
        }
    }
    for (uint32_t d = 0; d < D; d++) {
        o[d] /= den;
    }
}

static double attn_err(const float *k, const float *v, const float *k_hat, const float *v_hat,
                       uint32_t tokens, uint32_t heads, uint32_t D, uint32_t page_tokens,
                       uint32_t n_queries, uint64_t seed)
{
    qrng_t  r = {seed ^ 0xA5A5A5A5DEADBEEFull};
    size_t  n = (size_t)tokens * heads * D;
    double *buf = kvp_malloc(sizeof(double) * (3 * (size_t)D + tokens), "eval attn");
    float  *k16 = kvp_malloc(2 * n * sizeof(float), "eval attn"), *v16;
    double *q, *o, *oh, *logit, num = 0.0, den = 0.0;
    int     accum = page_tokens != 0;

    if (buf == NULL || k16 == NULL) {
        kvp_free(buf);
        kvp_free(k16);
        return NAN;
    }
    v16 = k16 + n;
    for (size_t i = 0; i < n; i++) { /* the open page (tail) stays fp16 */
        k16[i] = kvp_f16_to_f32(kvp_f32_to_f16(k[i]));
        v16[i] = kvp_f16_to_f32(kvp_f32_to_f16(v[i]));
    }
    q = buf, o = q + D, oh = o + D, logit = oh + D;
    if (n_queries == 0) {
        n_queries = 64;
    }
    for (uint32_t h = 0; h < heads; h++) {
        uint32_t npages = accum ? (tokens + page_tokens - 1) / page_tokens : 1;
        uint32_t per = accum ? (n_queries + npages - 1) / npages : n_queries;
        uint32_t qn  = 0; /* queries so far: even ones random, odd ones real keys, also when a
                           * page gets one query (qi & 1 was then always 0: only random ones) */

        for (uint32_t p = 0; p < npages; p++) {
            for (uint32_t qi = 0; qi < per; qi++, qn++) {
                uint32_t lo = accum ? p * page_tokens : 0;
                uint32_t hi = accum && (p + 1) * page_tokens < tokens ? (p + 1) * page_tokens : tokens;
                uint32_t pos = lo + (uint32_t)(q_next(&r) % (hi - lo));
                uint32_t ctx = accum ? pos + 1 : tokens;

                make_query(&r, qn & 1, k, ctx, heads, h, D, pos, q, logit);
                attend(q, k, v, k, v, 0, ctx, heads, h, D, logit, o);
                attend(q, k_hat, v_hat, k16, v16, accum ? lo : tokens, ctx, heads, h, D, logit, oh);
                for (uint32_t d = 0; d < D; d++) {
                    num += (oh[d] - o[d]) * (oh[d] - o[d]);
                    den += o[d] * o[d];
                }
            }
        }
    }
    kvp_free(buf);
    kvp_free(k16);
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

double kvp_attn_rel_err(const float *k, const float *v, const float *k_hat, const float *v_hat,
                        uint32_t tokens, uint32_t heads, uint32_t head_dim, uint32_t n_queries,
                        uint64_t seed)
{
    return attn_err(k, v, k_hat, v_hat, tokens, heads, head_dim, 0, n_queries, seed);
}

double kvp_attn_rel_err_accum(const float *k, const float *v, const float *k_hat,
                              const float *v_hat, uint32_t tokens, uint32_t heads,
                              uint32_t head_dim, uint32_t page_tokens, uint32_t n_queries,
                              uint64_t seed)
{
    if (page_tokens == 0) {
        page_tokens = tokens;
    }
    return attn_err(k, v, k_hat, v_hat, tokens, heads, head_dim, page_tokens, n_queries, seed);
}
