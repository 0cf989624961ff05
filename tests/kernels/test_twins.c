/* test_twins.c - every SIMD twin against the portable reference (skips with 77 when the CPU has
 * no AVX2). Decode: the same page decoded by both must give bit-identical floats (both frames).
 * Encode: kivi, kivi128, naive2 and oscar pages must be byte-identical (the twin performs the
 * same IEEE operations in the same order). kvarn's VarN twin uses reciprocal scales and one-pass
 * statistics (documented in q2_avx2.c), so its pages may differ: its dequantized output must stay
 * within 2% (relative) of the reference's and at most 2% of the codes may differ.
 * fp16 in/out (the twins' own fp16 paths): same rules, on Gaussian data and on adversarial fp16
 * (signed zeros, constant groups, subnormals, values on the code thresholds, +-65504), and
 * NaN/Inf fp16 input is rejected by both; OScaR K and V rows rotated to just under, just over
 * (still 65504 in fp16) and past the fp16 limit get the reference's status.
 * VarN's skipping of parts whose inputs did not change (kvarn_avx2.c) against the same twin with
 * every part run: bit-identical scales on tiles of every shape, and some parts skipped on tiles
 * whose rows or columns sit at a clamp (else the comparison would prove nothing).
 * kvarn on V rows whose mean dwarfs their spread (pre-rotated fp32 V = 1000 + 0.01 N(0,1)): the
 * twin's error against the input stays the reference's (a std from sums cancelled there, and the
 * twin's error was ~600x the reference's while the pages differed by under 2%). */
#include "tk.h"
#include "kvarn_codes.h"
#include "quant_hd.h"
#include "q2_int.h"

static size_t encode_with(kvp_codec_id_t c, const char *impl, const kvp_page_params_t *p,
                          const float *k, const float *v, uint32_t T, uint8_t *page, size_t cap)
{
    size_t len = 0;

    kvp_codec_set_impl(c, impl);
    EXPECT(kvp_page_encode(p, KVP_DTYPE_F32, k, v, T, page, cap, &len) == KVP_OK, "%s encode",
          impl);
    return len;
}

/* kvarn twin pages against the reference's: codes and dequantized values within tolerance.
 * a, b: 2*T*H*D floats of scratch each. */
static void kvarn_compare(const uint8_t *p1, size_t l1, const uint8_t *p2, size_t l2, uint32_t H,
                          uint32_t D, uint32_t T, float *a, float *b)
{
    size_t n = (size_t)T * H * D, codes = 2 * n, cdiff = kvarn_codes_differ(p1, p2, H, D, T);

    kvp_codec_set_impl(KVP_CODEC_KVARN, "ref");
    EXPECT(kvp_page_decode(p1, l1, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, a, a + n, NULL) == KVP_OK, "kvarn decode");
    EXPECT(kvp_page_decode(p2, l2, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, b, b + n, NULL) == KVP_OK, "kvarn decode");
    EXPECT(tk_rel(b, a, 2 * n) < 0.02, "kvarn twin dequant differs by %.4f", tk_rel(b, a, 2 * n));
    EXPECT(cdiff * 50 <= codes, "kvarn twin: %zu of %zu codes differ", cdiff, codes);
    printf("kvarn H %u D %u T %u: %zu/%zu codes differ, dequant rel diff %.2e\n", H, D, T, cdiff,
           codes, tk_rel(b, a, 2 * n));
}

static void run(kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t P, uint32_t T, uint32_t flags,
                tk_rng_t *rng)
{
    kvp_page_params_t p = tk_params(c, H, D, P);
    size_t            n = (size_t)T * H * D, cap, l1, l2, diff = 0;
    float            *k = malloc(n * 4), *v = malloc(n * 4);
    float            *a = malloc(4 * n * 4), *b = a + 2 * n;
    uint8_t          *p1, *p2;

    p.flags = flags;
    cap     = kvp_page_max_bytes(&p);
    p1      = malloc(cap);
    p2      = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        k[i] = tk_gauss(rng) * (i % 13 == 0 ? 8.0f : 1.0f) + (i % 29 == 0 ? 3.0f : 0.0f);
        v[i] = tk_gauss(rng) * (float)(1 + (i / (H * D)) % 5);
    }
    l1 = encode_with(c, "ref", &p, k, v, T, p1, cap);
    l2 = encode_with(c, "avx2", &p, k, v, T, p2, cap);
    EXPECT(l1 == l2, "lengths %zu %zu", l1, l2);
    for (size_t i = 0; i < l1; i++) {
        diff += p1[i] != p2[i];
    }
    for (int fr = 0; fr < 2; fr++) { /* decode the ref page with both */
        kvp_codec_set_impl(c, "ref");
        EXPECT(kvp_page_decode(p1, l1, KVP_DTYPE_F32, (kvp_frame_t)fr, a, a + n, NULL) == KVP_OK, "dec");
        kvp_codec_set_impl(c, "avx2");
        EXPECT(kvp_page_decode(p1, l1, KVP_DTYPE_F32, (kvp_frame_t)fr, b, b + n, NULL) == KVP_OK, "dec");
        EXPECT(memcmp(a, b, 2 * n * 4) == 0, "%s H %u D %u T %u frame %d: twin decode differs",
              kvp_codec_name(c), H, D, T, fr);
    }
    if (c != KVP_CODEC_KVARN) {
        EXPECT(diff == 0, "%s H %u D %u T %u: %zu page bytes differ", kvp_codec_name(c), H, D, T, diff);
    } else {
        kvarn_compare(p1, l1, p2, l2, H, D, T, a, b);
    }
    free(k); free(v); free(a); free(p1); free(p2);
}

/* fp16 data: mode 0 Gaussian with outliers, mode 1 adversarial */
static void gen_h(tk_rng_t *rng, uint16_t *x, size_t n, uint32_t D, int mode)
{
    static const float pick[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1.5f, 2.5f, 3.0f, 0.25f, 0.75f,
                                 -2.0f, 6e-8f, -6e-8f, 1e-5f, 65504.0f, -65504.0f};

    for (size_t i = 0; i < n; i++) {
        float f = tk_gauss(rng) * (i % D == 5 ? 9.0f : 1.0f);

        if (mode == 1) {
            uint32_t r = tk_range(rng, 0, 99), blk = (uint32_t)((i / D / 7) % 4);

            if (blk == 0) {
                f = (r & 1) ? 0.0f : -0.0f; /* zero rows, both signs */
            } else if (blk == 1) {
                f = pick[r % 16] * (r < 50 ? 1.0f : 1e-3f);
            } else if (blk == 2) {
                f = (float)(r % 4) * 0.125f - 0.5f; /* few distinct values: ties */
            } else if (r < 10) {
                f = pick[r];
            }
        }
        x[i] = kvp_hd_f16(f);
    }
}

static void run_h(kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t P, uint32_t T, uint32_t flags,
                  int mode, tk_rng_t *rng)
{
    kvp_page_params_t p = tk_params(c, H, D, P);
    size_t            n = (size_t)T * H * D, cap, l1 = 0, l2 = 0, diff = 0;
    uint16_t         *k = malloc(n * 2), *v = malloc(n * 2), *a = malloc(4 * n * 2), *b = a + 2 * n;
    uint8_t          *p1, *p2;
    kvp_status_t      s1, s2;

    p.flags = flags;
    cap     = kvp_page_max_bytes(&p);
    p1      = malloc(cap);
    p2      = malloc(cap);
    gen_h(rng, k, n, D, mode);
    gen_h(rng, v, n, D, mode);
    kvp_codec_set_impl(c, "ref");
    s1 = kvp_page_encode(&p, KVP_DTYPE_F16, k, v, T, p1, cap, &l1);
    kvp_codec_set_impl(c, "avx2");
    s2 = kvp_page_encode(&p, KVP_DTYPE_F16, k, v, T, p2, cap, &l2);
    EXPECT(s1 == s2, "%s mode %d: ref %s avx2 %s", kvp_codec_name(c), mode, kvp_status_name(s1),
          kvp_status_name(s2));
    if (s1 == KVP_OK && s2 == KVP_OK) {
        EXPECT(l1 == l2, "lengths %zu %zu", l1, l2);
        for (size_t i = 0; i < l1 && l1 == l2; i++) {
            diff += p1[i] != p2[i];
        }
        if (c != KVP_CODEC_KVARN) {
            EXPECT(diff == 0, "%s H %u D %u T %u mode %d fp16 in: %zu page bytes differ",
                  kvp_codec_name(c), H, D, T, mode, diff);
        } else if (mode == 0) { /* adversarial data has near-ties everywhere: only Gaussian */
            float *fa = malloc(4 * n * sizeof(float));

            kvarn_compare(p1, l1, p2, l2, H, D, T, fa, fa + 2 * n);
            free(fa);
        }
        for (int fr = 0; fr < 2; fr++) {
            kvp_codec_set_impl(c, "ref");
            EXPECT(kvp_page_decode(p1, l1, KVP_DTYPE_F16, (kvp_frame_t)fr, a, a + n, NULL) == KVP_OK, "dec");
            kvp_codec_set_impl(c, "avx2");
            EXPECT(kvp_page_decode(p1, l1, KVP_DTYPE_F16, (kvp_frame_t)fr, b, b + n, NULL) == KVP_OK, "dec");
            EXPECT(memcmp(a, b, 2 * n * 2) == 0, "%s H %u D %u T %u mode %d frame %d: fp16 decode differs",
                  kvp_codec_name(c), H, D, T, mode, fr);
            EXPECT(kvp_page_decode(p1, l1, KVP_DTYPE_F16, (kvp_frame_t)fr, NULL, b + n, NULL) == KVP_OK, "dec V only");
            EXPECT(memcmp(a + n, b + n, n * 2) == 0, "%s V-only decode differs", kvp_codec_name(c));
        }
    }
    for (int bad = 0; bad < 2; bad++) { /* NaN / Inf fp16 input */
        size_t at = tk_range(rng, 0, (uint32_t)n - 1);

        (bad ? v : k)[at] = bad ? 0xFC00 : 0x7E01;
        for (int im = 0; im < 2; im++) {
            size_t len = 0;

            kvp_codec_set_impl(c, im ? "avx2" : "ref");
            EXPECT(kvp_page_encode(&p, KVP_DTYPE_F16, k, v, T, p2, cap, &len) == KVP_ERR_BAD_INPUT_DATA,
                  "%s %s: fp16 %s accepted", kvp_codec_name(c), im ? "avx2" : "ref", bad ? "-Inf" : "NaN");
        }
        (bad ? v : k)[at] = 0;
    }
    free(k); free(v); free(a); free(p1); free(p2);
}

/* OScaR fp16 pages whose one K or V row rotates to just under 65504, into (65504, 65520) (over
 * the limit in fp32, 65504 once rounded to fp16) or past 65520: 127 values 5792 and one last
 * value, the row's first rotated value (sum / sqrt(128)) 65495, 65512.6 or 65529. Statuses and
 * bytes must equal the reference's; the AVX2 K pass checks each value only for tokens whose
 * sum of squares comes near 65504^2 (h_avx2.c), which these rows reach. */
static void oscar_range_edges(tk_rng_t *rng)
{
    static const float last[] = {5400.0f, 5600.0f, 5792.0f};
    uint32_t           H = 8, D = 128, T = 128;
    kvp_page_params_t  p = tk_params(KVP_CODEC_OSCAR, H, D, T);
    size_t             n = (size_t)T * H * D, cap = kvp_page_max_bytes(&p);
    uint16_t          *kv = malloc(2 * n * 2);
    uint8_t           *p1 = malloc(cap), *p2 = malloc(cap);

    for (int which = 0; which < 2; which++) {
        for (int e = 0; e < 3; e++) {
            uint16_t    *row = kv + (which ? n : 0) + (size_t)tk_range(rng, 0, T * H - 1) * D;
            size_t       l1 = 0, l2 = 0;
            kvp_status_t s1, s2;

            for (size_t i = 0; i < 2 * n; i++) {
                kv[i] = kvp_hd_f16(tk_gauss(rng));
            }
            for (uint32_t d = 0; d < D; d++) {
                row[d] = kvp_hd_f16(d + 1 < D ? 5792.0f : last[e]);
            }
            kvp_codec_set_impl(KVP_CODEC_OSCAR, "ref");
            s1 = kvp_page_encode(&p, KVP_DTYPE_F16, kv, kv + n, T, p1, cap, &l1);
            kvp_codec_set_impl(KVP_CODEC_OSCAR, "avx2");
            s2 = kvp_page_encode(&p, KVP_DTYPE_F16, kv, kv + n, T, p2, cap, &l2);
            EXPECT(s1 == s2, "oscar %s row to %.0f: ref %s avx2 %s", which ? "V" : "K",
                   (127.0f * 5792.0f + last[e]) / sqrtf(128.0f), kvp_status_name(s1), kvp_status_name(s2));
            EXPECT(s1 != KVP_OK || (l1 == l2 && memcmp(p1, p2, l1) == 0), "oscar %s edge page differs",
                   which ? "V" : "K");
            EXPECT((s1 == KVP_OK) == (e == 0 || (which && e == 1)), "oscar %s edge %d: ref says %s",
                   which ? "V" : "K", e, kvp_status_name(s1));
        }
    }
    free(kv); free(p1); free(p2);
}

/* tile kinds: 0 Gaussian, 1 outlier columns, 2 one offset column over low-std data (its rows end
 * at the lower clamp), 3 one offset row over low-std data (its columns do), 4 row-and-column
 * scaled, 5 smoothly varying column scales, 6 random column scales; amp scales the whole tile */
static float varn_elem(tk_rng_t *rng, int kind, uint32_t r, uint32_t c, float amp, const float *cs)
{
    float x = tk_gauss(rng);

    switch (kind) {
    case 1: return c % 17 == 3 ? 30.0f * x : x;
    case 2: return c == 5 ? 20.0f + 4.0f * x : 0.5f * x;
    case 3: return r == 7 ? 20.0f + 4.0f * x : 0.5f * x;
    case 4: return x * (float)(1 + r % 5) * (float)(1 + c % 3);
    case 5: return x * amp * (1.0f + 0.3f * sinf((float)c));
    case 6: return x * amp * cs[c];
    default: return x;
    }
}

/* one tile through VarN with the skipping off and on: the same scales; adds up what it skipped */
static void varn_skip_tile(tk_rng_t *rng, int kind, uint32_t R, uint32_t C, uint32_t iters,
                           kvp_varn_parts_t *sum)
{
    size_t           wn = (size_t)R * C + 4 * (size_t)(R + C);
    float           *X = malloc((size_t)R * C * sizeof(float)), *w = malloc(wn * sizeof(float));
    float           *sc = malloc(2 * (size_t)(R + C) * sizeof(float)), *sr = sc + C;
    float           *sc0 = sr + R, *sr0 = sc0 + C, cs[256];
    float            amp = expf(tk_gauss(rng));
    kvp_varn_parts_t none = {0}, got = {0};

    for (uint32_t c = 0; c < C; c++) {
        cs[c] = expf(0.5f * tk_gauss(rng));
    }
    for (uint32_t i = 0; i < R * C; i++) {
        X[i] = varn_elem(rng, kind, i / C, i % C, amp, cs);
    }
    kvp_q2_avx2_varn_parts(X, R, C, iters, sc0, sr0, w, 0, &none);
    kvp_q2_avx2_varn_parts(X, R, C, iters, sc, sr, w, 1, &got);
    EXPECT(none.rows_kept + none.cols_kept == 0, "skip off still skipped parts");
    EXPECT(memcmp(sc, sc0, C * sizeof(float)) == 0 && memcmp(sr, sr0, R * sizeof(float)) == 0 &&
           got.state == none.state,
           "varn R %u C %u iters %u kind %d: skipping parts changed the %s", R, C, iters, kind,
           got.state == none.state ? "scales" : "final state");
    sum->rows_kept += got.rows_kept;
    sum->cols_kept += got.cols_kept;
    sum->cols_after_raw += got.cols_after_raw;
    sum->cols_after_row += got.cols_after_row;
    free(X);
    free(w);
    free(sc);
}

/* every shape and kind; then 128 x 128 tiles of the kinds where the rarer branches happen (a row
 * scale moving again after an iteration that left them all still turns on last-bit changes, about
 * one tile in a few hundred) until each branch ran, so every branch is compared */
static void varn_skip_cases(tk_rng_t *rng)
{
    kvp_varn_parts_t sum = {0};
    uint32_t         t;

    for (t = 0; t < 280; t++) {
        uint32_t R = t < 140 ? 128 : tk_range(rng, 1, 256), C = t < 140 ? 128 : 8 * tk_range(rng, 1, 32);

        varn_skip_tile(rng, (int)(t % 7), R, C, t < 70 ? KVP_VARN_ITERS : tk_range(rng, 1, 16), &sum);
    }
    for (t = 0; t < 20000 && (sum.cols_after_raw == 0 || sum.cols_after_row == 0); t++) {
        varn_skip_tile(rng, 5 + (int)(t % 2), 128, 128, KVP_VARN_ITERS, &sum);
    }
    printf("varn parts: rows kept %u, columns kept %u, column passes after kept rows %u, after a "
           "row part alone %u (%u extra tiles)\n", sum.rows_kept, sum.cols_kept, sum.cols_after_raw,
           sum.cols_after_row, t);
    EXPECT(sum.rows_kept > 0 && sum.cols_kept > 0 && sum.cols_after_raw > 0 && sum.cols_after_row > 0,
           "a VarN branch never ran: the comparison proves nothing for it");
}

/* kvarn, pre-rotated fp32 V of mean m and spread sd per element: both impls' V error (RMS
 * against the input) agree within 10% */
static void kvarn_mean_dominated(tk_rng_t *rng, float m, float sd)
{
    const uint32_t    H = 2, D = 128, T = 128;
    kvp_page_params_t p = tk_params(KVP_CODEC_KVARN, H, D, T);
    size_t            n = (size_t)T * H * D, cap;
    float            *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(2 * n * 4);
    double            err[2];
    uint8_t          *pg;

    p.flags = KVP_PAGE_F_V_PREROT;
    cap     = kvp_page_max_bytes(&p);
    pg      = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        k[i] = tk_gauss(rng);
        v[i] = m + sd * tk_gauss(rng);
    }
    for (int im = 0; im < 2; im++) {
        size_t len = encode_with(KVP_CODEC_KVARN, im ? "avx2" : "ref", &p, k, v, T, pg, cap);
        double e   = 0;

        kvp_codec_set_impl(KVP_CODEC_KVARN, "ref");
        EXPECT(kvp_page_decode(pg, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, o, o + n, NULL) ==
               KVP_OK, "kvarn decode");
        for (size_t i = 0; i < n; i++) {
            e += ((double)o[n + i] - v[i]) * ((double)o[n + i] - v[i]);
        }
        err[im] = sqrt(e / (double)n);
    }
    EXPECT(err[1] <= 1.1 * err[0] + 1e-6 && err[0] <= 1.1 * err[1] + 1e-6,
           "kvarn V = %g + %g N(0,1): V error ref %.4g, avx2 %.4g", m, sd, err[0], err[1]);
    printf("kvarn V = %g + %g N(0,1): V error ref %.4g avx2 %.4g\n", m, sd, err[0], err[1]);
    free(k); free(v); free(o); free(pg);
}

int main(void)
{
    tk_rng_t rng = {99};
    const char *names[4];

    if (kvp_codec_impls(KVP_CODEC_KIVI, names, 4) < 2) {
        printf("no AVX2 twin on this CPU\n");
        return 77;
    }
    varn_skip_cases(&rng);
    oscar_range_edges(&rng);
    kvarn_mean_dominated(&rng, 1000.0f, 0.01f);
    kvarn_mean_dominated(&rng, 30.0f, 0.01f);
    for (int c = KVP_CODEC_KIVI; c < KVP_CODEC_MAX; c++) {
        run((kvp_codec_id_t)c, 8, 128, 128, 128, 0, &rng);
        run((kvp_codec_id_t)c, 4, 64, 128, 93, 0, &rng);
        run((kvp_codec_id_t)c, 2, 256, 64, 64, KVP_PAGE_F_V_PREROT, &rng);
        run((kvp_codec_id_t)c, 3, 32, 32, 5, 0, &rng);
        run((kvp_codec_id_t)c, 1, 8, 16, 13, 0, &rng);
        for (int mode = 0; mode < 2; mode++) {
            run_h((kvp_codec_id_t)c, 8, 128, 128, 128, 0, mode, &rng);
            run_h((kvp_codec_id_t)c, 4, 64, 128, 93, 0, mode, &rng);
            run_h((kvp_codec_id_t)c, 2, 256, 256, 250, KVP_PAGE_F_V_PREROT, mode, &rng);
            run_h((kvp_codec_id_t)c, 3, 32, 32, 5, 0, mode, &rng);
            run_h((kvp_codec_id_t)c, 1, 16, 64, 37, 0, mode, &rng);
            run_h((kvp_codec_id_t)c, 1, 8, 16, 13, 0, mode, &rng);
            /* the wide rows (generic row code) and one-token pages (OScaR's norm pass divides
             * token t - 1 while t is rotated: the last token, or the only one, after the loop) */
            run_h((kvp_codec_id_t)c, 2, 512, 32, 1, 0, mode, &rng);
            run_h((kvp_codec_id_t)c, 1, 1024, 16, 7, 0, mode, &rng);
        }
    }
    return kvp_test_result("test_twins");
}
