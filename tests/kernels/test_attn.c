/* test_attn.c - kvp_attn_compute (attention straight over packed pages) against attention over
 * kvp_page_decode's fp32 output (original frame), for every codec (fp16, kivi, kivi128, oscar and
 * kvarn with and without V_PREROT), synthetic K/V with outlier channels, norm jumps and a
 * low-norm sink token, several geometries (D 8/64/128, H 1..8, GQA g 1..6, T not a multiple of P,
 * fp16 sink and tail pages), both twins. Bound: worst relative error of an output vector
 * < ATTN_TOL (fp32 sums in another order than the decoded path; measured ~1e-6). Then the error
 * paths: a flipped byte (CORRUPT), a NaN in an fp16 tail with its CRC made to match (BAD_PAGE),
 * a scale whose scores pass float range (BAD_INPUT_DATA), mixed codecs/frames/geometry
 * (WRONG_CODEC), bad arguments
 * (INVALID), naive2 (UNSUPPORTED), each with out untouched; caller scratch; the fp16 baseline. */
#include "attn_tk.h"
#include "kvpack/alloc.h"

#define ATTN_TOL 2e-5 /* relative, per output vector */

typedef struct {
    uint32_t D, H, g, P, T, tail, sink;
} geom_t;

static const geom_t geoms[] = {
    {64, 1, 4, 64, 2 * 64 + 40 + 17, 17, 0}, {128, 8, 1, 128, 2 * 128 + 77 + 5, 5, 1},
    {128, 2, 4, 128, 128 + 37, 0, 0},        {64, 3, 6, 32, 100, 9, 1},
    {8, 4, 2, 32, 90, 10, 0},
};

static const struct {
    kvp_codec_id_t codec;
    uint32_t       flags;
    const char    *name;
} codecs[] = {
    {KVP_CODEC_FP16, 0, "fp16"},   {KVP_CODEC_KIVI, 0, "kivi"},
    {KVP_CODEC_KIVI128, 0, "kivi128"}, {KVP_CODEC_OSCAR, 0, "oscar"},
    {KVP_CODEC_OSCAR, KVP_PAGE_F_V_PREROT, "oscar+prerot"}, {KVP_CODEC_KVARN, 0, "kvarn"},
    {KVP_CODEC_KVARN, KVP_PAGE_F_V_PREROT, "kvarn+prerot"},
};

/* K with outlier channels, norm jumps and a low-norm first token; V with a few outliers */
static void gen_kv(tk_rng_t *r, const geom_t *g, float *k, float *v)
{
    for (uint32_t t = 0; t < g->T; t++) {
        float tn = t == 0 ? 0.2f : (t % 37 == 5 ? 3.0f : 1.0f);

        for (uint32_t i = 0; i < g->H * g->D; i++) {
            uint32_t d = i % g->D;
            size_t   x = (size_t)t * g->H * g->D + i;

            k[x] = tk_gauss(r) * tn * (d % 17 == 3 ? 6.0f : 1.0f) + (d % 5 == 1 ? 0.7f : 0.0f);
            v[x] = tk_gauss(r) * (d % 23 == 7 ? 4.0f : 1.0f);
        }
    }
}

/* logits of std ~3; odd query heads point at one key, its logit ~8 (a peaked softmax) */
static void gen_q(tk_rng_t *r, const geom_t *g, const float *k, float *q)
{
    uint32_t Hq = g->H * g->g;
    double   ss = 0, ms;

    for (size_t i = 0; i < (size_t)g->T * g->H * g->D; i++) {
        ss += (double)k[i] * k[i];
    }
    ms = ss / ((double)g->T * g->H * g->D);
    for (uint32_t i = 0; i < Hq; i++) {
        uint32_t t = tk_range(r, 0, g->T - 1), h = i / g->g;
        float    c = (float)(3.0 / sqrt(ms)), a = (float)(8.0 / (sqrt(g->D) * ms));

        for (uint32_t d = 0; d < g->D; d++) {
            q[(size_t)i * g->D + d] =
                i % 2 ? k[((size_t)t * g->H + h) * g->D + d] * a : tk_gauss(r) * c;
        }
    }
}

static kvp_status_t run(const at_pages_t *a, const float *q, uint32_t Hq, float *out)
{
    return kvp_attn_compute(NULL, a->ap, a->n, a->tail ? &a->tp : NULL, q, Hq, out);
}

static void check_codecs(void)
{
    const char *impls[2] = {"ref", "avx2"};
    double      worst[2] = {0, 0}, twin = 0;
    tk_rng_t    r = {42};

    for (size_t gi = 0; gi < sizeof(geoms) / sizeof(geoms[0]); gi++) {
        const geom_t *g  = &geoms[gi];
        uint32_t      Hq = g->H * g->g;
        size_t        n  = (size_t)g->T * g->H * g->D;
        float *k = malloc(n * 4), *v = malloc(n * 4), *q = malloc((size_t)Hq * g->D * 4);
        float *want = malloc((size_t)Hq * g->D * 4), *got[2];

        got[0] = malloc((size_t)Hq * g->D * 4);
        got[1] = malloc((size_t)Hq * g->D * 4);
        CHECK(k && v && q && want && got[0] && got[1]);
        gen_kv(&r, g, k, v);
        gen_q(&r, g, k, q);
        for (size_t ci = 0; ci < sizeof(codecs) / sizeof(codecs[0]); ci++) {
            at_pages_t a;

            at_build(&a, codecs[ci].codec, codecs[ci].flags, g->H, g->D, g->P, k, v, g->T,
                     g->tail, g->sink);
            at_attend(a.kd, a.vd, g->T, g->H, g->D, q, Hq, 1.0 / sqrt(g->D), want);
            for (int im = 0; im < 2; im++) {
                double e;

                if (kvp_attn_set_impl(impls[im]) != KVP_OK) {
                    continue;
                }
                CHECK_OK(run(&a, q, Hq, got[im]));
                e = at_worst(got[im], want, Hq, g->D);
                worst[im] = e > worst[im] ? e : worst[im];
                EXPECT(e < ATTN_TOL, "%s %s D %u H %u g %u P %u T %u: rel err %.3g", impls[im],
                       codecs[ci].name, g->D, g->H, g->g, g->P, g->T, e);
            }
            if (kvp_attn_set_impl("avx2") == KVP_OK) {
                double e = at_worst(got[1], got[0], Hq, g->D);

                twin = e > twin ? e : twin;
            }
            at_free(&a);
        }
        free(k), free(v), free(q), free(want), free(got[0]), free(got[1]);
    }
    printf("fused vs decoded: worst rel err ref %.3g avx2 %.3g; avx2 vs ref %.3g (bound %g)\n",
           worst[0], worst[1], twin, ATTN_TOL);
    EXPECT(twin < ATTN_TOL, "twins differ by %.3g", twin);
    kvp_attn_set_impl("ref");
    if (kvp_attn_set_impl("avx2") != KVP_OK) {
        printf("no AVX2 on this CPU: the reference only\n");
    }
}

#define EXPECT_FAIL(call, want) AT_EXPECT_FAIL(call, want, out, nout)

static void check_errors(void)
{
    geom_t            g = {64, 2, 4, 64, 64 * 3 + 20, 10, 0};
    uint32_t          Hq = 8, D = g.D;
    size_t            n = (size_t)g.T * g.H * D, nout = (size_t)Hq * D;
    float            *k = malloc(n * 4), *v = malloc(n * 4), q[8 * 64], out[8 * 64], ref[8 * 64];
    tk_rng_t          r = {7};
    at_pages_t        a, b, c;
    kvp_attn_page_t   mix[4], bad;
    kvp_attn_params_t prm = {0};
    size_t            need;
    void             *scratch;

    CHECK(k && v);
    gen_kv(&r, &g, k, v);
    gen_q(&r, &g, k, q);
    at_build(&a, KVP_CODEC_KIVI, 0, g.H, D, g.P, k, v, g.T, g.tail, 0);
    at_build(&b, KVP_CODEC_OSCAR, 0, g.H, D, g.P, k, v, g.T, g.tail, 0);
    at_build(&c, KVP_CODEC_OSCAR, KVP_PAGE_F_V_PREROT, g.H, D, g.P, k, v, g.T, g.tail, 0);
    CHECK_OK(run(&a, q, Hq, ref));

    /* one flipped payload byte in the second page, then in the tail */
    memcpy(mix, a.ap, a.n * sizeof(*mix));
    mix[1] = at_flipped(&a.ap[1], KVP_PAGE_HDR_BYTES + 100);
    EXPECT_FAIL(kvp_attn_compute(NULL, mix, a.n, &a.tp, q, Hq, out), KVP_ERR_CORRUPT);
    free((void *)mix[1].data);
    bad = at_flipped(&a.tp, a.tp.len - 3);
    EXPECT_FAIL(kvp_attn_compute(NULL, a.ap, a.n, &bad, q, Hq, out), KVP_ERR_CORRUPT);
    free((void *)bad.data);
    /* a NaN K value in the fp16 tail, CRC made to match: parse does not read fp16 values, the
     * result is not finite and is refused */
    {
        uint8_t *t = malloc(a.tp.len);

        CHECK(t != NULL);
        memcpy(t, a.tp.data, a.tp.len);
        t[KVP_PAGE_HDR_BYTES + 10] = 0x00;
        t[KVP_PAGE_HDR_BYTES + 11] = 0x7E;
        kvp_page_seal(t);
        bad = (kvp_attn_page_t){t, a.tp.len};
        EXPECT_FAIL(kvp_attn_compute(NULL, a.ap, a.n, &bad, q, Hq, out), KVP_ERR_BAD_PAGE);
        free(t);
    }
    /* a finite scale so large that the scores pass float range: refused, not NaN */
    prm.field_mask = KVP_ATTN_PARAM_SCALE;
    prm.scale      = 1e37f;
    EXPECT_FAIL(kvp_attn_compute(&prm, a.ap, a.n, &a.tp, q, Hq, out), KVP_ERR_BAD_INPUT_DATA);

    /* mixed codecs, V frames, a 2-bit tail */
    memcpy(mix, a.ap, a.n * sizeof(*mix));
    mix[2] = b.ap[2];
    EXPECT_FAIL(kvp_attn_compute(NULL, mix, a.n, &a.tp, q, Hq, out), KVP_ERR_WRONG_CODEC);
    memcpy(mix, b.ap, b.n * sizeof(*mix));
    mix[1] = c.ap[1];
    EXPECT_FAIL(kvp_attn_compute(NULL, mix, b.n, &b.tp, q, Hq, out), KVP_ERR_WRONG_CODEC);
    EXPECT_FAIL(kvp_attn_compute(NULL, a.ap, a.n - 1, &a.ap[a.n - 1], q, Hq, out),
                KVP_ERR_WRONG_CODEC);

    /* bad arguments: GQA shape, scale, NULLs, a partial page before the last, small scratch */
    EXPECT_FAIL(kvp_attn_compute(NULL, a.ap, a.n, &a.tp, q, 3, out), KVP_ERR_INVALID);
    prm.field_mask = KVP_ATTN_PARAM_SCALE;
    prm.scale      = -1.0f;
    EXPECT_FAIL(kvp_attn_compute(&prm, a.ap, a.n, &a.tp, q, Hq, out), KVP_ERR_INVALID);
    EXPECT_FAIL(kvp_attn_compute(NULL, a.ap, a.n, &a.tp, NULL, Hq, out), KVP_ERR_INVALID);
    EXPECT_FAIL(kvp_attn_compute(NULL, NULL, 0, NULL, q, Hq, out), KVP_ERR_INVALID);
    memcpy(mix, a.ap, a.n * sizeof(*mix));
    mix[1] = a.ap[a.n - 1];
    EXPECT_FAIL(kvp_attn_compute(NULL, mix, a.n, &a.tp, q, Hq, out), KVP_ERR_INVALID);
    need = kvp_attn_scratch_bytes(Hq, g.H, D, g.P);
    CHECK(need > 0 && kvp_attn_scratch_bytes(3, g.H, D, g.P) == 0);
    scratch        = malloc(need);
    prm.field_mask = KVP_ATTN_PARAM_SCRATCH;
    prm.scratch    = scratch;
    prm.scratch_bytes = need - 1;
    EXPECT_FAIL(kvp_attn_compute(&prm, a.ap, a.n, &a.tp, q, Hq, out), KVP_ERR_INVALID);

    /* caller scratch gives the same bits; an explicit default scale too */
    prm.scratch_bytes = need;
    CHECK_OK(kvp_attn_compute(&prm, a.ap, a.n, &a.tp, q, Hq, out));
    EXPECT(memcmp(out, ref, sizeof(ref)) == 0, "caller scratch changes the result");
    prm.field_mask = KVP_ATTN_PARAM_SCALE;
    prm.scale      = 1.0f / sqrtf((float)D);
    CHECK_OK(kvp_attn_compute(&prm, a.ap, a.n, &a.tp, q, Hq, out));
    EXPECT(at_worst(out, ref, Hq, D) < 1e-6, "explicit 1/sqrt(D) differs from the default");
    free(scratch);
    at_free(&a), at_free(&b), at_free(&c);

    /* naive2 has no fused path */
    at_build(&a, KVP_CODEC_NAIVE2, 0, g.H, D, g.P, k, v, g.T, 0, 0);
    EXPECT_FAIL(run(&a, q, Hq, out), KVP_ERR_UNSUPPORTED);
    at_free(&a);
    free(k), free(v);
}

/* the fp16-in-memory baseline equals attention over the fp16-rounded K/V */
static void check_f16(void)
{
    geom_t    g = {128, 2, 4, 128, 300, 0, 0};
    uint32_t  Hq = 8;
    size_t    n = (size_t)g.T * g.H * g.D;
    float    *k = malloc(n * 4), *v = malloc(n * 4), q[8 * 128], out[8 * 128], want[8 * 128];
    uint16_t *k16 = malloc(n * 2), *v16 = malloc(n * 2);
    tk_rng_t  r = {9};

    CHECK(k && v && k16 && v16);
    gen_kv(&r, &g, k, v);
    gen_q(&r, &g, k, q);
    for (size_t i = 0; i < n; i++) {
        k16[i] = kvp_f32_to_f16(k[i]);
        v16[i] = kvp_f32_to_f16(v[i]);
        k[i]   = kvp_f16_to_f32(k16[i]);
        v[i]   = kvp_f16_to_f32(v16[i]);
    }
    at_attend(k, v, g.T, g.H, g.D, q, Hq, 1.0 / sqrt(g.D), want);
    CHECK_OK(kvp_attn_compute_f16(NULL, k16, v16, g.T, g.H, g.D, q, Hq, out));
    EXPECT(at_worst(out, want, Hq, g.D) < ATTN_TOL, "fp16 baseline err %.3g",
           at_worst(out, want, Hq, g.D));
    CHECK_ST(kvp_attn_compute_f16(NULL, k16, v16, g.T, g.H, g.D, q, 3, out), KVP_ERR_INVALID);
    v16[77] = 0x7C00; /* Inf */
    CHECK_ST(kvp_attn_compute_f16(NULL, k16, v16, g.T, g.H, g.D, q, Hq, out),
             KVP_ERR_BAD_INPUT_DATA);
    free(k), free(v), free(k16), free(v16);
}

/* Scores past float range and non-finite fp16 K, in both twins: refused, never a quiet result.
 * The AVX2 exp's clamp used to turn a NaN score into a finite one (a page of whole vectors then
 * came out OK as the plain mean of V); an fp16 K of +-Inf whose score was -Inf dropped its token;
 * a page whose every score overflowed to -Inf failed only when it came first. */
static void check_overflow(void)
{
    enum { H = 1, D = 64, P = 64, T = 32, NF = 2 * 16 };
    static const char *impls[] = {"ref", "avx2"};
    static const uint16_t nonfinite[] = {0x7C00, 0xFC00, 0x7E00};
    float             k[P * D], v[P * D], q[D], out[D], o1[D], o2[D];
    uint16_t          k16[T * D], v16[T * D];
    tk_rng_t          r = {7};
    kvp_attn_params_t prm = {.field_mask = KVP_ATTN_PARAM_SCALE, .scale = 1e37f};
    at_pages_t        a;
    kvp_attn_page_t   rev[2];

    for (int im = 0; im < 2; im++) {
        if (kvp_attn_set_impl(impls[im]) != KVP_OK) {
            continue;
        }
        for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
            k[i] = tk_gauss(&r);
            v[i] = tk_gauss(&r) + 2.0f;
        }
        for (int c = 0; c < 2; c++) { /* T a multiple of 8: every score through the vector exp */
            at_build(&a, c ? KVP_CODEC_KIVI : KVP_CODEC_FP16, 0, H, D, P, k, v, T, 0, 0);
            memcpy(q, k + 3 * D, sizeof(q)); /* token 3's score tops the others: +inf */
            AT_EXPECT_FAIL(kvp_attn_compute(&prm, a.ap, a.n, NULL, q, 1, out),
                           KVP_ERR_BAD_INPUT_DATA, out, D);
            at_free(&a);
        }
        for (size_t i = 0; i < (size_t)T * D; i++) {
            k16[i] = kvp_f32_to_f16(k[i]);
            v16[i] = kvp_f32_to_f16(v[i]);
        }
        for (size_t b = 0; b < sizeof(nonfinite) / sizeof(nonfinite[0]); b++) {
            for (uint32_t t = 5; t < T; t += 20) {
                uint16_t keep = k16[t * D + 7];

                k16[t * D + 7] = nonfinite[b];
                AT_EXPECT_FAIL(kvp_attn_compute_f16(NULL, k16, v16, T, H, D, k, 1, out),
                               KVP_ERR_BAD_INPUT_DATA, out, D);
                k16[t * D + 7] = keep;
            }
        }
        /* a NaN score (+inf + -inf) among -inf ones, a finite score past them: refused (it
         * used to be dropped with the -inf ones, OK) */
        {
            enum { TN = 129, DN = 16 };
            static uint16_t kn[TN * DN], vn[TN * DN];
            float           qn[DN];

            for (uint32_t i = 0; i < TN * DN; i++) {
                uint32_t t = i / DN;

                kn[i] = t == TN - 1 ? 0 : (t == 1 ? ((i & 1) ? 0xFBFF : 0x7BFF) : 0xFBFF);
                vn[i] = kvp_f32_to_f16(t == 1 ? 100.0f : 1.0f);
            }
            for (uint32_t d = 0; d < DN; d++) {
                qn[d] = 1e36f;
            }
            AT_EXPECT_FAIL(kvp_attn_compute_f16(NULL, kn, vn, TN, H, DN, qn, 1, out),
                           KVP_ERR_BAD_INPUT_DATA, out, DN);
        }
        /* two pages, every score of one -inf (weight 0): the same answer in either order */
        for (size_t i = 0; i < (size_t)NF * D; i++) {
            k[i] = i < (size_t)NF / 2 * D ? -10.0f : 0.01f * tk_gauss(&r);
            q[i % D] = 1.0f;
        }
        at_build(&a, KVP_CODEC_FP16, 0, H, D, NF / 2, k, v, NF, 0, 0);
        rev[0] = a.ap[1];
        rev[1] = a.ap[0];
        EXPECT(kvp_attn_compute(&prm, a.ap, 2, NULL, q, 1, o1) == KVP_OK &&
                   kvp_attn_compute(&prm, rev, 2, NULL, q, 1, o2) == KVP_OK &&
                   memcmp(o1, o2, sizeof(o1)) == 0,
               "%s: a page of -inf scores fails or changes the result by its place", impls[im]);
        at_free(&a);
    }
}

int main(void)
{
    int64_t live = kvp_alloc_live_count();

    check_codecs();
    check_errors();
    check_f16();
    check_overflow();
    EXPECT(kvp_alloc_live_count() == live, "kvp_malloc'd scratch leaked");
    return kvp_test_result("test_attn");
}
