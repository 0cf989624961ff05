/* test_cuda.c - the CUDA twins against the C reference (exits 77 when no GPU is usable, e.g.
 * cudaGetDeviceCount fails with "insufficient driver"). kivi, kivi128 and oscar pages must be
 * byte-identical to the reference's (same scalar math, --fmad=false); kvarn's VarN uses the
 * device expf/logf (1-2 ulp), so its pages may differ: dequant within 2% and at most 2% of the
 * 2-bit codes (an ulp in VarN moves the stored fp16 scales by an ulp or a few, and with them most
 * bytes of those sections, so bytes are not counted; on the CPU stand-in, with the host's
 * expf/logf, the page must be byte-identical). Decoding a reference page on the GPU must match
 * the CPU decode to 1e-6 (both frames), and GPU pages must decode on the CPU. Bad arguments get
 * kvp_page_encode's statuses (a layer past 65534 used to be written as layer % 65536, OK), and a
 * rotated value past fp16 is refused as on the CPU. The same checks also build as
 * kernels.test_cuda_emu against codec_cuda.cu run on the CPU (cuda_emu/cuda_runtime.h). */
#include "tk.h"
#include "kvpack/codec_cuda.h"
#include "kvarn_codes.h"

static void run(kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t P, uint32_t T, uint32_t flags,
                uint32_t kvarn_iters, tk_rng_t *rng)
{
    kvp_page_params_t p = tk_params(c, H, D, P);
    size_t            n = (size_t)T * H * D, cap, l1 = 0, l2 = 0, diff = 0;
    float            *k = malloc(n * 4), *v = malloc(n * 4), *a = malloc(2 * n * 4), *b = malloc(2 * n * 4);
    uint8_t          *p1, *p2;
    kvp_status_t      st;

    p.flags       = flags;
    p.kvarn_iters = kvarn_iters;
    cap = kvp_page_max_bytes(&p);
    p1 = malloc(cap), p2 = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        k[i] = tk_gauss(rng) * (i % 11 == 0 ? 6.0f : 1.0f);
        v[i] = tk_gauss(rng);
    }
    kvp_codec_set_impl(c, "ref");
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, T, p1, cap, &l1) == KVP_OK, "cpu encode");
    st = kvp_cuda_page_encode(&p, k, v, T, p2, cap, &l2);
    EXPECT(st == KVP_OK && l1 == l2, "%s: cuda encode %s", kvp_codec_name(c), kvp_status_name(st));
    for (size_t i = 0; i < l1 && st == KVP_OK; i++) {
        diff += p1[i] != p2[i];
    }
#ifdef KVP_CUDA_EMU
    const int exact = 1; /* the host's expf/logf: kvarn byte-identical too */
#else
    const int exact = c != KVP_CODEC_KVARN;
#endif
    if (exact) {
        EXPECT(diff == 0, "%s H %u D %u T %u: %zu bytes differ", kvp_codec_name(c), H, D, T, diff);
    } else if (st == KVP_OK) {
        size_t cd = kvarn_codes_differ(p1, p2, H, D, T), codes = 2 * n;

        /* the device's expf/logf (2 ulp) move stored scales, not codes: moving the host's by
         * 1-2 ulp changed no code over 200 tiles, so 0.5 % is a wide margin */
        EXPECT(cd * 200 <= codes, "kvarn: %zu of %zu codes differ (%zu bytes)", cd, codes, diff);
    }
    for (int fr = 0; fr < 2; fr++) {
        EXPECT(kvp_page_decode(p1, l1, KVP_DTYPE_F32, (kvp_frame_t)fr, a, a + n, NULL) == KVP_OK, "cpu decode");
        EXPECT(kvp_cuda_page_decode(p1, l1, (kvp_frame_t)fr, b, b + n) == KVP_OK, "cuda decode");
        EXPECT(tk_rel(b, a, 2 * n) < 1e-6, "%s frame %d: cuda decode differs %g", kvp_codec_name(c), fr,
              tk_rel(b, a, 2 * n));
    }
    EXPECT(kvp_page_decode(p2, l2, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, b, b + n, NULL) == KVP_OK,
          "gpu page does not decode on the cpu");
    kvp_page_decode(p1, l1, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, a, a + n, NULL);
    EXPECT(tk_rel(b, a, 2 * n) < 0.005, "%s: gpu page dequant differs %g", kvp_codec_name(c), tk_rel(b, a, 2 * n));
    free(k); free(v); free(a); free(b); free(p1); free(p2);
}

/* kvp_cuda_page_encode's statuses for bad arguments are kvp_page_encode's, and a rotated value
 * past fp16 (oscar's fp32 K in (65504, 65520) included) is refused as the CPU refuses it. */
static void arguments(void)
{
    kvp_page_params_t p = tk_params(KVP_CODEC_OSCAR, 2, 64, 16);
    size_t            n = (size_t)16 * 2 * 64, cap = kvp_page_max_bytes(&p), len;
    float            *k = calloc(n, 4), *v = calloc(n, 4);
    uint8_t          *out = malloc(cap);
    struct {
        uint32_t    layer, flags, iters, heads, ntok;
        const char *what;
    } bad[] = {{65535, 0, 0, 2, 16, "layer 65535"},  {70000, 0, 0, 2, 16, "layer 70000"},
               {0, 0x80, 0, 2, 16, "unknown flag"}, {0, 0, 65, 2, 16, "kvarn_iters 65"},
               {0, 0, 0, 0, 16, "heads 0"},         {0, 0, 0, 2, 0, "ntok 0"},
               {0, 0, 0, 2, 17, "ntok > P"}};

    CHECK(k != NULL && v != NULL && out != NULL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kvp_page_params_t q = p;
        kvp_status_t      cpu, gpu;

        q.layer = bad[i].layer, q.flags = bad[i].flags, q.kvarn_iters = bad[i].iters;
        q.heads = bad[i].heads;
        cpu = kvp_page_encode(&q, KVP_DTYPE_F32, k, v, bad[i].ntok, out, cap, &len);
        gpu = kvp_cuda_page_encode(&q, k, v, bad[i].ntok, out, cap, &len);
        EXPECT(cpu == KVP_ERR_INVALID && gpu == cpu, "%s: cpu %s, cuda %s", bad[i].what,
               kvp_status_name(cpu), kvp_status_name(gpu));
    }
    EXPECT(kvp_cuda_page_encode(&p, NULL, v, 16, out, cap, &len) == KVP_ERR_INVALID, "NULL k");
    {   /* an fp16 sink page: the CPU encodes it; the GPU has no fp16 twin, so UNSUPPORTED (the
         * caller's cue to run the CPU codec), not INVALID as a flag it does not take */
        kvp_page_params_t q = tk_params(KVP_CODEC_FP16, 2, 64, 16);
        size_t            qcap = kvp_page_max_bytes(&q);
        uint8_t          *qout = malloc(qcap);
        kvp_status_t      cpu, gpu;

        q.flags = KVP_PAGE_F_SINK;
        cpu = kvp_page_encode(&q, KVP_DTYPE_F32, k, v, 16, qout, qcap, &len);
        gpu = kvp_cuda_page_encode(&q, k, v, 16, qout, qcap, &len);
        EXPECT(cpu == KVP_OK && gpu == KVP_ERR_UNSUPPORTED, "fp16 sink page: cpu %s, cuda %s",
               kvp_status_name(cpu), kvp_status_name(gpu));
        free(qout);
    }
    {
        kvp_page_params_t q = tk_params(KVP_CODEC_FP16, 128, 256, 4096); /* a 512 MiB payload */

        EXPECT(kvp_cuda_page_encode(&q, k, v, 1, out, cap, &len) == KVP_ERR_TOO_LARGE,
               "a page past the payload limit");
    }
    for (uint32_t i = 0; i < 64; i++) {
        k[i] = 8189.4f; /* one K row, constant: rotated, its first value is 8 x 8189.4 = 65515.2 */
    }
    kvp_codec_set_impl(KVP_CODEC_OSCAR, "ref");
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, 16, out, cap, &len) == KVP_ERR_BAD_INPUT_DATA &&
               kvp_cuda_page_encode(&p, k, v, 16, out, cap, &len) == KVP_ERR_BAD_INPUT_DATA,
           "oscar K rotated to 65514.9: not refused by both");
    free(out);
    free(v);
    free(k);
}

int main(void)
{
    const kvp_codec_id_t cs[] = {KVP_CODEC_KIVI, KVP_CODEC_KIVI128, KVP_CODEC_OSCAR, KVP_CODEC_KVARN};
    tk_rng_t             rng = {31};

    if (!kvp_cuda_available()) {
        return kvp_test_no_gpu("test_cuda", "no usable CUDA device");
    }
    arguments();
    for (size_t i = 0; i < 4; i++) {
        run(cs[i], 8, 128, 128, 128, 0, 0, &rng);
        run(cs[i], 4, 64, 128, 77, 0, 0, &rng);
        run(cs[i], 2, 256, 64, 64, KVP_PAGE_F_V_PREROT, 0, &rng);
        run(cs[i], 3, 16, 32, 5, 0, 0, &rng);
    }
    for (int it = 0; it < 16; it++) { /* random geometries: D 8..256, partial pages, flags */
        kvp_codec_id_t    c = cs[tk_range(&rng, 0, 3)];
        uint32_t          H = tk_range(&rng, 1, 8), D = 1u << tk_range(&rng, 3, 8);
        uint32_t          P = tk_range(&rng, 1, 256), T = tk_range(&rng, 1, P);
        kvp_page_params_t p = tk_params(c, H, D, P);

        if (kvp_codec_check(&p) == KVP_OK) {
            run(c, H, D, P, T, (tk_next(&rng) & 1) ? KVP_PAGE_F_V_PREROT : 0, tk_range(&rng, 0, 12),
                &rng);
        }
    }
    return kvp_test_result("test_cuda");
}
