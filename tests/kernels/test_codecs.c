/* test_codecs.c - every codec's round trip through kvp_page_encode/decode, for every available
 * implementation: relative error within each codec's budget on Gaussian KV with outlier
 * channels, full and partial pages, fp16 round trip exact for "fp16", the ROTATED frame equal to
 * the ORIGINAL one after the documented inverse (norm, Hadamard), KVP_PAGE_F_V_PREROT, header
 * fields and flags, the bits per element at H=8, D=128, P=128, that each codec accepts the
 * head_dims its geometry rule (the text of the errors) states, and that a decode to fp16 saturates a
 * value the 2-bit grid puts past the fp16 range at +-65504 instead of rounding it to Inf. */
#include "tk.h"
#include "quant_hd.h"
#include "kvpack/bytes.h"

static void gen(tk_rng_t *rng, float *x, uint32_t T, uint32_t H, uint32_t D, int outliers)
{
    for (uint32_t t = 0; t < T; t++) {
        float tn = 0.5f + (float)tk_unif(rng);
        for (uint32_t h = 0; h < H; h++) {
            for (uint32_t d = 0; d < D; d++) {
                float s = (outliers && d % 17 == 3) ? 12.0f : 1.0f;
                x[((size_t)t * H + h) * D + d] = tn * s * tk_gauss(rng) + (outliers && d % 17 == 3 ? 5.0f : 0.0f);
            }
        }
    }
}

/* Walsh-Hadamard of each head of each token in place (reference butterfly). */
static void rotate_all(float *x, uint32_t T, uint32_t H, uint32_t D)
{
    for (size_t r = 0; r < (size_t)T * H; r++) {
        kvp_hd_fwht(x + r * D, D);
    }
}

static double budget(kvp_codec_id_t c)
{
    switch (c) {
    /* 2-bit RTN of a Gaussian has a relative error near 0.4 (4 levels over ~4 sigma) */
    case KVP_CODEC_FP16: return 1e-3;
    case KVP_CODEC_KIVI: return 0.5;
    case KVP_CODEC_OSCAR: return 0.5;
    case KVP_CODEC_NAIVE2: return 1.5; /* per-token K with outlier channels: bad by design */
    default: return 0.6;               /* kivi128, kvarn: groups of 128 */
    }
}

static void run(kvp_codec_id_t c, const char *impl, uint32_t H, uint32_t D, uint32_t P, uint32_t T,
                uint32_t flags, tk_rng_t *rng)
{
    size_t            n = (size_t)T * H * D, len = 0;
    float            *k = malloc(n * 4), *v = malloc(n * 4), *kh = malloc(n * 4), *vh = malloc(n * 4);
    float            *kr = malloc(n * 4), *vr = malloc(n * 4), *norms = malloc(T * 4);
    kvp_page_params_t p = tk_params(c, H, D, P);
    uint8_t          *page = NULL;
    kvp_page_info_t   info;
    kvp_status_t      st;
    double            ek, ev;
    int               rot = c == KVP_CODEC_OSCAR || c == KVP_CODEC_KVARN;

    p.flags = flags;
    gen(rng, k, T, H, D, 1);
    gen(rng, v, T, H, D, 0);
    st = tk_roundtrip(&p, k, v, T, KVP_FRAME_ORIGINAL, kh, vh, &page, &len);
    EXPECT(st == KVP_OK, "%s/%s H %u D %u P %u T %u: %s", kvp_codec_name(c), impl, H, D, P, T,
          kvp_status_name(st));
    if (st != KVP_OK) {
        goto out;
    }
    ek = tk_rel(kh, k, n);
    ev = tk_rel(vh, v, n);
    EXPECT(ek < budget(c) && ev < budget(c), "%s/%s H %u D %u T %u: rel err K %.4f V %.4f",
          kvp_codec_name(c), impl, H, D, T, ek, ev);
    EXPECT(kvp_page_decode(page, len, KVP_DTYPE_F32, KVP_FRAME_ROTATED, kr, vr, &info) == KVP_OK,
          "rotated decode");
    EXPECT(kvp_page_token_norms(page, len, norms) == KVP_OK, "norms");
    EXPECT(info.valid == T && info.capacity == P && info.heads == H && info.head_dim == D &&
              info.layer == 3 && info.first_pos == 1024 && info.chunk_key.lo == 0x1234 &&
              info.chunk_key.hi == 0x5678, "header fields");
    EXPECT(((info.flags & KVP_PAGE_F_PARTIAL) != 0) == (T < P), "partial flag");
    EXPECT(((info.flags & KVP_PAGE_F_K_ROTATED) != 0) == rot, "K rotated flag");
    EXPECT(((info.flags & KVP_PAGE_F_V_ROTATED) != 0) == (rot && !(flags & KVP_PAGE_F_V_PREROT)),
          "V rotated flag 0x%x", info.flags);
    if (c == KVP_CODEC_OSCAR) {
        for (uint32_t t = 0; t < T; t++) {
            for (size_t i = 0; i < (size_t)H * D; i++) {
                kr[(size_t)t * H * D + i] *= norms[t];
            }
        }
    }
    if (rot) {
        rotate_all(kr, T, H, D);
        if (!(flags & KVP_PAGE_F_V_PREROT)) {
            rotate_all(vr, T, H, D);
        }
    } else {
        for (uint32_t t = 0; t < T; t++) {
            EXPECT(norms[t] == 1.0f, "norm of a non-oscar page");
        }
    }
    EXPECT(tk_rel(kr, kh, n) < 1e-5 && tk_rel(vr, vh, n) < 1e-5,
          "%s: ROTATED frame + inverse != ORIGINAL (K %.3g V %.3g)", kvp_codec_name(c),
          tk_rel(kr, kh, n), tk_rel(vr, vh, n));
    /* a flipped payload byte must fail the CRC */
    page[len - 1] ^= 0x40;
    EXPECT(kvp_page_decode(page, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, kh, vh, NULL) ==
              KVP_ERR_CORRUPT, "corrupt page decoded");
out:
    free(page); free(k); free(v); free(kh); free(vh); free(kr); free(vr); free(norms);
}

static void bits(void)
{
    const struct { kvp_codec_id_t c; double want; } w[] = {
        {KVP_CODEC_FP16, 16.0}, {KVP_CODEC_KIVI, 3.0}, {KVP_CODEC_KIVI128, 2.25},
        {KVP_CODEC_OSCAR, 3.0 + 32.0 / (2 * 8 * 128)}, {KVP_CODEC_KVARN, 2.375},
        {KVP_CODEC_NAIVE2, 2.25},
    };

    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        kvp_page_params_t p = tk_params(w[i].c, 8, 128, 128);
        double            b = (double)(kvp_page_max_bytes(&p) - KVP_PAGE_HDR_BYTES) * 8 /
                              (2.0 * 8 * 128 * 128);

        EXPECT(fabs(b - w[i].want) < 1e-9, "%s bits %.4f want %.4f", kvp_codec_name(w[i].c), b,
              w[i].want);
    }
}

/* kvp_codec_check accepts exactly the head_dims kvp_codec_geometry_rule states in words. */
static void geometry_rules(void)
{
    for (int c = KVP_CODEC_FP16; c < KVP_CODEC_MAX; c++) {
        const char *rule = kvp_codec_geometry_rule((kvp_codec_id_t)c);

        for (uint32_t D = 1; D <= KVP_PAGE_MAX_DIM + 1; D++) {
            kvp_page_params_t p    = tk_params((kvp_codec_id_t)c, 2, D, 64);
            int               pow2 = (D & (D - 1)) == 0;
            int               want = D <= KVP_PAGE_MAX_DIM;

            if (strstr(rule, "power of two, at least 8") != NULL) {
                want = want && pow2 && D >= 8;
            } else if (strstr(rule, "below 32 or a multiple of 32") != NULL) {
                want = want && (D < 32 || D % 32 == 0);
            } else if (strstr(rule, "below 128 or a multiple of 128") != NULL) {
                want = want && (D < 128 || D % 128 == 0);
            }
            EXPECT((kvp_codec_check(&p) == KVP_OK) == want, "%s D %u: check %s, rule \"%s\"",
                   kvp_codec_name((kvp_codec_id_t)c), D,
                   kvp_status_name(kvp_codec_check(&p)), rule);
        }
        /* the payload limit the rule names: a page of every geometry it accepts fits it (parse
         * refuses more, and at 4 GiB the header's length wraps) */
        EXPECT(strstr(rule, "at most 256 MiB") != NULL, "%s rule \"%s\" omits the payload limit",
               kvp_codec_name((kvp_codec_id_t)c), rule);
        for (uint32_t H = 1; H <= KVP_PAGE_MAX_HEADS; H *= 4) {
            for (uint32_t D = 8; D <= KVP_PAGE_MAX_DIM; D *= 2) {
                kvp_page_params_t p = tk_params((kvp_codec_id_t)c, H, D, KVP_PAGE_MAX_TOKENS);
                size_t            payload =
                    kvp_codec_payload_bytes((kvp_codec_id_t)c, H, D, KVP_PAGE_MAX_TOKENS,
                                            KVP_PAGE_MAX_TOKENS);
                kvp_status_t      want = payload <= KVP_PAGE_MAX_PAYLOAD ? KVP_OK
                                                                         : KVP_ERR_TOO_LARGE;

                if (D % 128 != 0 && c == KVP_CODEC_KIVI128) {
                    continue; /* refused for its V groups */
                }
                EXPECT(kvp_codec_check(&p) == want, "%s %u x %u x 4096 (payload %zu): %s",
                       kvp_codec_name((kvp_codec_id_t)c), H, D, payload,
                       kvp_status_name(kvp_codec_check(&p)));
            }
        }
    }
    {
        kvp_page_params_t p = tk_params(KVP_CODEC_FP16, 128, 256, KVP_PAGE_MAX_TOKENS);

        EXPECT(kvp_codec_check(&p) == KVP_ERR_TOO_LARGE && kvp_page_max_bytes(&p) == 0,
               "fp16 128 x 256 x 4096 (a 512 MiB payload) accepted");
    }
}

/* One +-65504 spike per token (a different channel each token), over zeros or over Gaussian
 * values: the 2-bit grid puts some decoded values past fp16's largest finite 65504 in every codec
 * (a group's fp16 scale rounds up: 65504/3 is stored as 21840, so the top code is 65520; a
 * rotating codec spreads the spike over the head and rounds each part). The fp16 decode must give
 * +-65504 there (never Inf) and f16(x) elsewhere, x the fp32 decode; and some value must pass
 * 65504 over the two backgrounds, or the check would prove nothing. */
static size_t f16_out_check(kvp_codec_id_t c, const char *impl, uint32_t D, float background)
{
    tk_rng_t          rng = {11};
    const uint32_t    H = 2, T = 32;
    kvp_page_params_t p = tk_params(c, H, D, T);
    size_t            n = (size_t)T * H * D, cap = kvp_page_max_bytes(&p), len = 0, past = 0;
    float            *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    float            *f = malloc(2 * n * sizeof(float));
    uint16_t         *h = malloc(2 * n * sizeof(uint16_t));
    uint8_t          *page = malloc(cap);

    for (size_t i = 0; i < n; i++) {
        size_t t = i / ((size_t)H * D), d = i % D;
        float  spike = (t & 1) ? 65504.0f : -65504.0f;

        k[i] = d == (t * 7) % D ? spike : tk_gauss(&rng) * background;
        v[i] = d == (t * 5) % D ? -spike : tk_gauss(&rng) * background;
    }
    CHECK_OK(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, T, page, cap, &len));
    for (int fr = 0; fr < 2; fr++) {
        CHECK_OK(kvp_page_decode(page, len, KVP_DTYPE_F32, (kvp_frame_t)fr, f, f + n, NULL));
        CHECK_OK(kvp_page_decode(page, len, KVP_DTYPE_F16, (kvp_frame_t)fr, h, h + n, NULL));
        for (size_t i = 0; i < 2 * n; i++) {
            float    x    = f[i] > 65504.0f ? 65504.0f : f[i] < -65504.0f ? -65504.0f : f[i];
            uint16_t want = kvp_hd_f16(x);

            past += fabsf(f[i]) > 65504.0f;
            if (h[i] != want) {
                EXPECT(0, "%s %s D %u frame %d background %g: fp16 decode of %.1f is 0x%04x, want 0x%04x",
                       kvp_codec_name(c), impl, D, fr, (double)background, (double)f[i], h[i], want);
                break;
            }
        }
    }
    free(k); free(v); free(f); free(h); free(page);
    return past;
}

static void f16_out_saturates(kvp_codec_id_t c, const char *impl)
{
    size_t past = 0;

    for (uint32_t D = 64; D <= 256; D *= 2) { /* the twins' paths for D = 64, 128 and any other */
        past += f16_out_check(c, impl, D, 0.0f) + f16_out_check(c, impl, D, 1000.0f);
    }

    EXPECT(past > 0 || c == KVP_CODEC_FP16, "%s %s: no value past 65504, the check proves nothing",
           kvp_codec_name(c), impl);
    printf("%s %s: %zu decoded values past 65504 saturate in fp16\n", kvp_codec_name(c), impl, past);
}

/* VarN's "later ties win" (CODECS.md 2.2), bit for bit, where ties are exact: on an all-zero
 * tile every std is 0, clamped to 1e-3, so each step's log-scale sits at the -0.3 clamp and every
 * iteration has the same imbalance (0) as the start. The later iteration wins each tie, so the
 * stored column scales B are fp16(exp(-0.3)), not the start's 1 (a strict "<" would keep 1: the
 * faithfulness tests did not notice that change). Both twins, K and V tiles, a partial page. */
static void varn_later_ties(const char *impl)
{
    const uint32_t        H = 2, D = 64, P = 32, T = 20;
    kvp_page_params_t     p = tk_params(KVP_CODEC_KVARN, H, D, P);
    kvp_hd_kvarn_layout_t l = kvp_hd_kvarn_layout(T, D);
    float                *zero = calloc((size_t)T * H * D, sizeof(float));
    size_t                cap = kvp_page_max_bytes(&p), len = 0;
    uint8_t              *page = malloc(cap);
    uint16_t              want = kvp_f32_to_f16(expf(-0.3f));

    CHECK(zero != NULL && page != NULL);
    CHECK_OK(kvp_page_encode(&p, KVP_DTYPE_F32, zero, zero, T, page, cap, &len));
    for (uint32_t h = 0; h < H; h++) {
        const uint8_t *rec = page + KVP_PAGE_HDR_BYTES + (size_t)h * l.rec;

        for (uint32_t i = 0; i < T; i++) {
            EXPECT(kvp_ld16(rec + l.k_b + 2 * i) == want, "kvarn/%s head %u K B[%u] = 0x%04x, "
                   "want the later tie's 0x%04x", impl, h, i, kvp_ld16(rec + l.k_b + 2 * i), want);
        }
        for (uint32_t i = 0; i < D; i++) {
            EXPECT(kvp_ld16(rec + l.v_b + 2 * i) == want, "kvarn/%s head %u V B[%u] = 0x%04x, "
                   "want the later tie's 0x%04x", impl, h, i, kvp_ld16(rec + l.v_b + 2 * i), want);
        }
    }
    free(page);
    free(zero);
}

int main(void)
{
    tk_rng_t rng = {7};

    bits();
    geometry_rules();
    for (int c = KVP_CODEC_FP16; c < KVP_CODEC_MAX; c++) {
        const char *impls[4];
        size_t      ni = kvp_codec_impls((kvp_codec_id_t)c, impls, 4);

        for (size_t ii = 0; ii < ni; ii++) {
            kvp_codec_set_impl((kvp_codec_id_t)c, impls[ii]);
            run((kvp_codec_id_t)c, impls[ii], 8, 128, 128, 128, 0, &rng);
            run((kvp_codec_id_t)c, impls[ii], 4, 64, 128, 77, 0, &rng);
            run((kvp_codec_id_t)c, impls[ii], 2, 32, 64, 1, 0, &rng);
            run((kvp_codec_id_t)c, impls[ii], 3, 256, 32, 32, KVP_PAGE_F_V_PREROT, &rng);
            run((kvp_codec_id_t)c, impls[ii], 1, 16, 16, 5, 0, &rng);
            f16_out_saturates((kvp_codec_id_t)c, impls[ii]);
            if (c == KVP_CODEC_KVARN) {
                varn_later_ties(impls[ii]);
            }
        }
    }
    return kvp_test_result("test_codecs");
}
