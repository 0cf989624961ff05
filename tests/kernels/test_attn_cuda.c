/* test_attn_cuda.c - kvp_cuda_attn_compute (the GPU twin of attention over packed pages) against
 * kvp_attn_compute's C reference on the same pages: every codec (fp16, kivi, kivi128, oscar and
 * kvarn, with and without V_PREROT), fp16 sink and tail pages, GQA, a partial last page, fixed
 * and random geometries (D 8-256): worst relative error of an output vector < 1e-4 (fp32 sums in
 * another order). Then the error paths with out untouched: a flipped byte (CORRUPT), mixed codecs
 * (WRONG_CODEC), a bad GQA shape (INVALID), naive2 (UNSUPPORTED). Exits 77 without a usable GPU;
 * kernels.test_attn_cuda_emu runs the same on the CPU (cuda_emu/cuda_runtime.h). */
#include "attn_tk.h"
#include "kvpack/attn_cuda.h"
#include "kvpack/codec_cuda.h"

#define CUDA_TOL 1e-4

static double worst; /* over every case, printed */

static const struct {
    kvp_codec_id_t codec;
    uint32_t       flags;
} codecs[] = {
    {KVP_CODEC_FP16, 0},  {KVP_CODEC_KIVI, 0},  {KVP_CODEC_KIVI128, 0},
    {KVP_CODEC_OSCAR, 0}, {KVP_CODEC_OSCAR, KVP_PAGE_F_V_PREROT},
    {KVP_CODEC_KVARN, 0}, {KVP_CODEC_KVARN, KVP_PAGE_F_V_PREROT},
};

/* K with outlier channels and a low-norm first token, V with a few; q with logits of std ~3 */
static void gen(tk_rng_t *r, uint32_t T, uint32_t H, uint32_t D, uint32_t Hq, float *k, float *v,
                float *q)
{
    for (size_t x = 0; x < (size_t)T * H * D; x++) {
        uint32_t d = (uint32_t)(x % D);

        k[x] = tk_gauss(r) * (x < (size_t)H * D ? 0.2f : 1.0f) * (d % 17 == 3 ? 6.0f : 1.0f);
        v[x] = tk_gauss(r) * (d % 23 == 7 ? 4.0f : 1.0f);
    }
    for (size_t x = 0; x < (size_t)Hq * D; x++) {
        q[x] = tk_gauss(r) * 3.0f / sqrtf((float)D) * 2.0f;
    }
}

static void one(tk_rng_t *r, int c, uint32_t H, uint32_t D, uint32_t g, uint32_t P, uint32_t T,
                uint32_t tail, uint32_t sink)
{
    uint32_t   Hq = H * g;
    size_t     n = (size_t)T * H * D;
    float     *k = malloc(n * 4), *v = malloc(n * 4), *q = malloc((size_t)Hq * D * 4);
    float     *want = malloc((size_t)Hq * D * 4), *got = malloc((size_t)Hq * D * 4);
    at_pages_t a;
    double     err;

    CHECK(k && v && q && want && got);
    gen(r, T, H, D, Hq, k, v, q);
    at_build(&a, codecs[c].codec, codecs[c].flags, H, D, P, k, v, T, tail, sink);
    CHECK_OK(kvp_attn_compute(NULL, a.ap, a.n, tail ? &a.tp : NULL, q, Hq, want));
    CHECK_OK(kvp_cuda_attn_compute(NULL, a.ap, a.n, tail ? &a.tp : NULL, q, Hq, got));
    err   = at_worst(got, want, Hq, D);
    worst = err > worst ? err : worst;
    EXPECT(err < CUDA_TOL, "%s flags 0x%x H %u D %u g %u P %u T %u tail %u sink %u: err %.3g",
           kvp_codec_name(codecs[c].codec), codecs[c].flags, H, D, g, P, T, tail, sink, err);
    at_free(&a);
    free(k), free(v), free(q), free(want), free(got);
}

#define EXPECT_FAIL(call, want) AT_EXPECT_FAIL(call, want, out, nout)

/* scores past float range (a huge scale): refused; a page whose every score overflowed to -inf
 * weighs 0 wherever it comes (it came out NaN when first). k, v: 2 x 16 tokens x 1 head x 64 */
static void overflow(float *k, float *v, float *q, float *out)
{
    enum { D = 64, P = 16 };
    kvp_attn_params_t prm = {.field_mask = KVP_ATTN_PARAM_SCALE, .scale = 1e37f};
    at_pages_t        a;
    kvp_attn_page_t   rev[2];
    float             o1[D], o2[D];
    size_t            nout = D;

    for (uint32_t i = 0; i < 2 * P * D; i++) {
        k[i] = i < P * D ? -10.0f : 0.01f * (float)((i * 2654435761u) % 201) - 1.0f;
        q[i % D] = 1.0f;
    }
    at_build(&a, KVP_CODEC_FP16, 0, 1, D, P, k, v, 2 * P, 0, 0);
    rev[0] = a.ap[1];
    rev[1] = a.ap[0];
    EXPECT(kvp_cuda_attn_compute(&prm, a.ap, 2, NULL, q, 1, o1) == KVP_OK &&
               kvp_cuda_attn_compute(&prm, rev, 2, NULL, q, 1, o2) == KVP_OK &&
               memcmp(o1, o2, sizeof(o1)) == 0,
           "a page of -inf scores fails or changes the result by its place");
    at_free(&a);
    memcpy(q, k + (2 * P - 1) * D, D * sizeof(float)); /* its own key: a score past float range */
    for (uint32_t d = 0; d < D; d++) {
        q[d] = q[d] * 1e3f;
    }
    at_build(&a, KVP_CODEC_FP16, 0, 1, D, P, k + P * D, v, P, 0, 0);
    EXPECT_FAIL(kvp_cuda_attn_compute(&prm, a.ap, 1, NULL, q, 1, out), KVP_ERR_BAD_INPUT_DATA);
    at_free(&a);
    /* a NaN score (+inf + -inf) among -inf ones on the first page, finite ones on the second:
     * refused, not dropped with the -inf ones */
    for (uint32_t i = 0; i < 2 * P * D; i++) {
        uint32_t t = i / D;

        k[i] = t >= P ? 0.0f : (t == 1 && (i & 1) ? 65504.0f : -65504.0f);
        q[i % D] = 1e36f;
    }
    prm.scale = 1.0f;
    at_build(&a, KVP_CODEC_FP16, 0, 1, D, P, k, v, 2 * P, 0, 0);
    EXPECT_FAIL(kvp_cuda_attn_compute(&prm, a.ap, 2, NULL, q, 1, out), KVP_ERR_BAD_INPUT_DATA);
    at_free(&a);
}

static void errors(tk_rng_t *r)
{
    uint32_t        H = 2, D = 64, P = 64, T = 64 * 3 + 20, Hq = 8;
    size_t          n = (size_t)T * H * D, nout = (size_t)Hq * D;
    float          *k = malloc(n * 4), *v = malloc(n * 4), q[8 * 64], out[8 * 64];
    at_pages_t      a, b;
    kvp_attn_page_t mix[8];

    CHECK(k && v);
    gen(r, T, H, D, Hq, k, v, q);
    at_build(&a, KVP_CODEC_KIVI, 0, H, D, P, k, v, T, 10, 0);
    at_build(&b, KVP_CODEC_OSCAR, 0, H, D, P, k, v, T, 10, 0);
    memcpy(mix, a.ap, a.n * sizeof(*mix));
    mix[1] = at_flipped(&a.ap[1], KVP_PAGE_HDR_BYTES + 100);
    EXPECT_FAIL(kvp_cuda_attn_compute(NULL, mix, a.n, &a.tp, q, Hq, out), KVP_ERR_CORRUPT);
    free((void *)mix[1].data);
    memcpy(mix, a.ap, a.n * sizeof(*mix));
    mix[2] = b.ap[2];
    EXPECT_FAIL(kvp_cuda_attn_compute(NULL, mix, a.n, &a.tp, q, Hq, out), KVP_ERR_WRONG_CODEC);
    EXPECT_FAIL(kvp_cuda_attn_compute(NULL, a.ap, a.n, &a.tp, q, 3, out), KVP_ERR_INVALID);
    at_free(&a), at_free(&b);
    at_build(&a, KVP_CODEC_NAIVE2, 0, H, D, P, k, v, T, 0, 0);
    EXPECT_FAIL(kvp_cuda_attn_compute(NULL, a.ap, a.n, NULL, q, Hq, out), KVP_ERR_UNSUPPORTED);
    at_free(&a);
    overflow(k, v, q, out);
    free(k), free(v);
}

int main(void)
{
    tk_rng_t r = {41};

    if (!kvp_cuda_available()) {
        return kvp_test_no_gpu("test_attn_cuda", "no usable CUDA device");
    }
    CHECK_OK(kvp_attn_set_impl("ref"));
    for (int c = 0; c < (int)(sizeof(codecs) / sizeof(codecs[0])); c++) {
        one(&r, c, 2, 128, 4, 128, 2 * 128 + 77 + 5, 5, 1); /* sink, partial last page, tail */
        one(&r, c, 3, 64, 2, 32, 100, 9, 0);
        one(&r, c, 4, 8, 2, 32, 90, 10, 0);
    }
    for (int it = 0; it < 12; it++) { /* random geometries */
        int      c = (int)tk_range(&r, 0, (uint32_t)(sizeof(codecs) / sizeof(codecs[0])) - 1);
        uint32_t D = 1u << tk_range(&r, 3, 8), P = tk_range(&r, 8, 160);
        uint32_t T = tk_range(&r, 1, 3 * P), tail = tk_range(&r, 0, T - 1 < P - 1 ? T - 1 : P - 1);

        one(&r, c, tk_range(&r, 1, 4), D, tk_range(&r, 1, 3), P, T, tail,
            T - tail > P && (tk_next(&r) & 1));
    }
    printf("worst relative error against the reference: %.3g (bound %g)\n", worst, CUDA_TOL);
    errors(&r);
    return kvp_test_result("test_attn_cuda");
}
