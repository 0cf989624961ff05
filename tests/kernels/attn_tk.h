/* attn_tk.h - helpers shared by the attention tests (test_attn.c, test_attn_real.c): K/V laid
 * out as a session's pages of one layer (optional fp16 sink pages, codec pages of P tokens with
 * the last one partial, an fp16 tail), those pages decoded back with kvp_page_decode in the
 * original frame, and attention computed from the decoded values in double. Header-only. */
#ifndef KVP_ATTN_TK_H
#define KVP_ATTN_TK_H

#include "kvpack/attn.h"
#include "tk.h"

typedef struct {
    uint8_t        **pg;   /* sealed pages (sink, then codec) */
    kvp_attn_page_t *ap;   /* the same as kvp_attn_page_t */
    size_t           n;
    uint8_t         *tail; /* fp16 tail page or NULL */
    kvp_attn_page_t  tp;
    float           *kd, *vd; /* every page decoded, original frame, [T][H][D] */
    uint32_t         T;
} at_pages_t;

static inline void at_free(at_pages_t *a)
{
    for (size_t i = 0; i < a->n; i++) {
        free(a->pg[i]);
    }
    free(a->pg);
    free(a->ap);
    free(a->tail);
    free(a->kd);
    free(a->vd);
    memset(a, 0, sizeof(*a));
}

static inline uint8_t *at_page(const kvp_page_params_t *p, const float *k, const float *v,
                               uint32_t nt, size_t *len_p)
{
    size_t   cap  = kvp_page_max_bytes(p);
    uint8_t *page = malloc(cap);

    CHECK(page != NULL);
    CHECK_OK(kvp_page_encode(p, KVP_DTYPE_F32, k, v, nt, page, cap, len_p));
    return page;
}

/* K/V [T][H][D]: the first sink*P tokens as fp16 sink pages, then codec pages of P (the last
 * may be partial) up to T - tail, then the last tail tokens as an fp16 tail page. */
static inline void at_build(at_pages_t *a, kvp_codec_id_t codec, uint32_t flags, uint32_t H,
                            uint32_t D, uint32_t P, const float *k, const float *v, uint32_t T,
                            uint32_t tail, uint32_t sink)
{
    size_t   row = (size_t)H * D, len;
    uint32_t sealed = T - tail, np = (sealed + P - 1) / P;

    memset(a, 0, sizeof(*a));
    a->T  = T;
    a->pg = calloc(np + 1, sizeof(*a->pg));
    a->ap = calloc(np + 1, sizeof(*a->ap));
    a->kd = malloc(T * row * sizeof(float));
    a->vd = malloc(T * row * sizeof(float));
    CHECK(a->pg != NULL && a->ap != NULL && a->kd != NULL && a->vd != NULL);
    for (uint32_t t0 = 0; t0 < sealed; t0 += P) {
        uint32_t          nt = sealed - t0 < P ? sealed - t0 : P;
        int               is_sink = t0 / P < sink;
        kvp_page_params_t p = tk_params(is_sink ? KVP_CODEC_FP16 : codec, H, D, P);

        p.flags     = is_sink ? KVP_PAGE_F_SINK : flags;
        p.first_pos = t0;
        a->pg[a->n] = at_page(&p, k + t0 * row, v + t0 * row, nt, &len);
        a->ap[a->n] = (kvp_attn_page_t){a->pg[a->n], len};
        CHECK_OK(kvp_page_decode(a->pg[a->n], len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL,
                                 a->kd + t0 * row, a->vd + t0 * row, NULL));
        a->n++;
    }
    if (tail > 0) {
        kvp_page_params_t p = tk_params(KVP_CODEC_FP16, H, D, P);

        p.flags   = KVP_PAGE_F_TAIL;
        a->tail   = at_page(&p, k + sealed * row, v + sealed * row, tail, &len);
        a->tp     = (kvp_attn_page_t){a->tail, len};
        CHECK_OK(kvp_page_decode(a->tail, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL,
                                 a->kd + sealed * row, a->vd + sealed * row, NULL));
    }
}

/* out[Hq][D] = softmax(scale q.k) v over T tokens of k, v [T][H][D], in double */
static inline void at_attend(const float *k, const float *v, uint32_t T, uint32_t H, uint32_t D,
                             const float *q, uint32_t Hq, double scale, float *out)
{
    double *s = malloc(T * sizeof(double)), o[1024];

    CHECK(s != NULL && D <= 1024);
    for (uint32_t i = 0; i < Hq; i++) {
        uint32_t h  = i / (Hq / H);
        double   mx = -INFINITY, sum = 0;

        for (uint32_t t = 0; t < T; t++) {
            double acc = 0;

            for (uint32_t d = 0; d < D; d++) {
                acc += (double)q[(size_t)i * D + d] * k[((size_t)t * H + h) * D + d];
            }
            s[t] = acc * scale;
            mx   = s[t] > mx ? s[t] : mx;
        }
        memset(o, 0, sizeof(o));
        for (uint32_t t = 0; t < T; t++) {
            double p = exp(s[t] - mx);

            sum += p;
            for (uint32_t d = 0; d < D; d++) {
                o[d] += p * v[((size_t)t * H + h) * D + d];
            }
        }
        for (uint32_t d = 0; d < D; d++) {
            out[(size_t)i * D + d] = (float)(o[d] / sum);
        }
    }
    free(s);
}

/* out must keep its sentinel after a failed call */
static inline int at_untouched(const float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (out[i] != 1234.5f) {
            return 0;
        }
    }
    return 1;
}

/* call fails with want and leaves out[0..nout) as it was */
#define AT_EXPECT_FAIL(call, want, out, nout)                                                     \
    do {                                                                                          \
        for (size_t _i = 0; _i < (nout); _i++) {                                                  \
            (out)[_i] = 1234.5f;                                                                  \
        }                                                                                         \
        kvp_status_t _s = (call);                                                                 \
        EXPECT(_s == (want), "%s = %s, want %s", #call, kvp_status_name(_s),                     \
               kvp_status_name(want));                                                            \
        EXPECT(at_untouched((out), (nout)), "%s wrote out", #call);                               \
    } while (0)

/* a malloc'd copy of page pg with bit 0x10 of byte at flipped */
static inline kvp_attn_page_t at_flipped(const kvp_attn_page_t *pg, size_t at)
{
    uint8_t *copy = malloc(pg->len);

    CHECK(copy != NULL && at < pg->len);
    memcpy(copy, pg->data, pg->len);
    copy[at] ^= 0x10;
    return (kvp_attn_page_t){copy, pg->len};
}

/* worst relative error over the Hq output vectors */
static inline double at_worst(const float *a, const float *b, uint32_t Hq, uint32_t D)
{
    double w = 0;

    for (uint32_t i = 0; i < Hq; i++) {
        double e = tk_rel(a + (size_t)i * D, b + (size_t)i * D, D);

        w = e > w ? e : w;
    }
    return w;
}

#endif
