/* test_kivi.c - kivi / kivi128 round trips against per-element error bounds derived independently
 * from each group's min/max: random, constant, huge-range and outlier groups, partial pages,
 * D < G, fp16 in/out; NaN, Inf and out-of-fp16-range input are rejected; unsupported D is refused.
 * Runs every available implementation (ref, avx2). */
#include "tk.h"

/* |x - xhat| <= s/2 + 3|s - fp16(s)| + |mn - fp16(mn)| + slack, with s = (mx - mn)/3. */
static double kivi_bound(float mn, float mx)
{
    double s = ((double)mx - mn) / 3.0;

    /* fp16 rounding of s and mn: 2^-11 relative, 2^-25 absolute in the subnormal range */
    return 0.5 * s + 3.0 * (s * 0x1p-11 + 0x1p-25) + fabs((double)mn) * 0x1p-11 + 0x1p-25 +
           1e-6 * (fabs(mn) + fabs(mx));
}

static void check_bounds(const char *what, uint32_t G, uint32_t H, uint32_t D, uint32_t T,
                         const float *k, const float *v, const float *kh, const float *vh)
{
    uint32_t gv = D < G ? D : G;
    int      bad = 0;

    for (uint32_t h = 0; h < H; h++) {
        for (uint32_t d = 0; d < D; d++) {
            for (uint32_t t0 = 0; t0 < T; t0 += G) {
                uint32_t t1 = t0 + G < T ? t0 + G : T;
                float    mn = INFINITY, mx = -INFINITY;

                for (uint32_t t = t0; t < t1; t++) {
                    float x = k[((size_t)t * H + h) * D + d];
                    mn = fminf(mn, x);
                    mx = fmaxf(mx, x);
                }
                for (uint32_t t = t0; t < t1; t++) {
                    size_t i = ((size_t)t * H + h) * D + d;
                    if (!(fabs((double)kh[i] - k[i]) <= kivi_bound(mn, mx)) && bad++ < 5) {
                        EXPECT(0, "%s K t %u h %u d %u: %g vs %g (range %g..%g)", what, t, h, d,
                              kh[i], k[i], mn, mx);
                    }
                }
            }
        }
    }
    for (size_t r = 0; r < (size_t)T * H; r++) {
        for (uint32_t g0 = 0; g0 < D; g0 += gv) {
            float mn = INFINITY, mx = -INFINITY;

            for (uint32_t i = g0; i < g0 + gv; i++) {
                mn = fminf(mn, v[r * D + i]);
                mx = fmaxf(mx, v[r * D + i]);
            }
            for (uint32_t i = g0; i < g0 + gv; i++) {
                if (!(fabs((double)vh[r * D + i] - v[r * D + i]) <= kivi_bound(mn, mx)) &&
                    bad++ < 5) {
                    EXPECT(0, "%s V row %zu ch %u: %g vs %g", what, r, i, vh[r * D + i],
                          v[r * D + i]);
                }
            }
        }
    }
}

static void run_case(const char *what, kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t P,
                     uint32_t T, tk_rng_t *rng, int kind)
{
    size_t            n = (size_t)T * H * D;
    float            *k = malloc(n * 4), *v = malloc(n * 4), *kh = malloc(n * 4), *vh = malloc(n * 4);
    kvp_page_params_t p = tk_params(c, H, D, P);
    kvp_status_t      st;
    uint32_t          G = c == KVP_CODEC_KIVI ? 32 : 128;

    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: k[i] = tk_gauss(rng) * 2.0f + 0.5f; v[i] = tk_gauss(rng); break;
        case 1: k[i] = 3.25f; v[i] = -7.0f; break;                               /* constant */
        case 2: k[i] = (tk_next(rng) & 1) ? 60000.0f : -60000.0f;                 /* huge range */
                v[i] = (float)(tk_unif(rng) * 131000.0 - 65500.0); break;
        case 3: k[i] = tk_gauss(rng) * 0.01f; v[i] = tk_gauss(rng) * 0.01f;         /* outliers */
                if (i % 97 == 0) { k[i] = 300.0f; v[i] = -300.0f; } break;
        default: k[i] = (float)(i % 7) * 1e-6f; v[i] = 0.0f; break;               /* tiny / zero */
        }
    }
    st = tk_roundtrip(&p, k, v, T, KVP_FRAME_ORIGINAL, kh, vh, NULL, NULL);
    EXPECT(st == KVP_OK, "%s: round trip status %s", what, kvp_status_name(st));
    if (st == KVP_OK) {
        check_bounds(what, G, H, D, T, k, v, kh, vh);
        if (kind == 1) {
            EXPECT(kh[0] == 3.25f && vh[n - 1] == -7.0f, "%s: constant group not exact", what);
        }
    }
    free(k); free(v); free(kh); free(vh);
}

static void run_reject(kvp_codec_id_t c)
{
    uint32_t          H = 2, D = 32, T = 32;
    size_t            n = (size_t)T * H * D, len = 0;
    float            *k = calloc(n, 4), *v = calloc(n, 4);
    kvp_page_params_t p = tk_params(c, H, D, T);
    size_t            cap = kvp_page_max_bytes(&p);
    uint8_t          *page = malloc(cap);
    const float       bad[] = {NAN, INFINITY, -INFINITY, 1e5f, -65520.0f};
    uint16_t         *h16 = calloc(n, 2);

    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        k[n / 2] = bad[b];
        EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, T, page, cap, &len) ==
                  KVP_ERR_BAD_INPUT_DATA, "value %g in K accepted", bad[b]);
        k[n / 2] = 0;
        v[n - 1] = bad[b];
        EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, T, page, cap, &len) ==
                  KVP_ERR_BAD_INPUT_DATA, "value %g in V accepted", bad[b]);
        v[n - 1] = 0;
    }
    h16[5] = 0x7E00; /* fp16 NaN */
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F16, h16, h16 + 0, T, page, cap, &len) ==
              KVP_ERR_BAD_INPUT_DATA, "fp16 NaN accepted");
    h16[5] = 0x7C00; /* fp16 Inf */
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F16, h16, h16, T, page, cap, &len) ==
              KVP_ERR_BAD_INPUT_DATA, "fp16 Inf accepted");
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, 0, page, cap, &len) == KVP_ERR_INVALID,
          "ntok 0 accepted");
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, T + 1, page, cap, &len) == KVP_ERR_INVALID,
          "ntok > P accepted");
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, T, page, cap - 1, &len) == KVP_ERR_TOO_LARGE,
          "short output accepted");
    p.head_dim = c == KVP_CODEC_KIVI ? 48 : 192; /* not a multiple of the group */
    EXPECT(kvp_codec_check(&p) == KVP_ERR_UNSUPPORTED, "D %u accepted", p.head_dim);
    EXPECT(kvp_page_max_bytes(&p) == 0, "D %u has a size", p.head_dim);
    free(k); free(v); free(page); free(h16);
}

static void run_f16(kvp_codec_id_t c, tk_rng_t *rng)
{
    uint32_t          H = 4, D = 64, T = 70, P = 128;
    size_t            n = (size_t)T * H * D, cap, len = 0;
    uint16_t         *k16 = malloc(n * 2), *v16 = malloc(n * 2), *ko = malloc(n * 2), *vo = malloc(n * 2);
    float            *k = malloc(n * 4), *v = malloc(n * 4), *kh = malloc(n * 4), *vh = malloc(n * 4);
    kvp_page_params_t p = tk_params(c, H, D, P);
    uint8_t          *page;
    kvp_page_info_t   info;

    for (size_t i = 0; i < n; i++) {
        k16[i] = kvp_f32_to_f16(tk_gauss(rng));
        v16[i] = kvp_f32_to_f16(tk_gauss(rng) * 3.0f);
        k[i]   = kvp_f16_to_f32(k16[i]);
        v[i]   = kvp_f16_to_f32(v16[i]);
    }
    cap  = kvp_page_max_bytes(&p);
    page = malloc(cap);
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F16, k16, v16, T, page, cap, &len) == KVP_OK, "f16 encode");
    EXPECT(kvp_page_decode(page, len, KVP_DTYPE_F16, KVP_FRAME_ORIGINAL, ko, vo, &info) == KVP_OK,
          "f16 decode");
    EXPECT(info.valid == T && info.capacity == P && (info.flags & KVP_PAGE_F_PARTIAL), "info");
    EXPECT(kvp_page_decode(page, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, kh, vh, NULL) == KVP_OK,
          "f32 decode");
    for (size_t i = 0; i < n; i++) {
        if (ko[i] != kvp_f32_to_f16(kh[i]) || vo[i] != kvp_f32_to_f16(vh[i])) {
            EXPECT(0, "fp16 output %zu differs from rounded fp32 output", i);
            break;
        }
    }
    check_bounds("f16", c == KVP_CODEC_KIVI ? 32 : 128, H, D, T, k, v, kh, vh);
    free(k16); free(v16); free(ko); free(vo); free(k); free(v); free(kh); free(vh); free(page);
}

int main(void)
{
    const kvp_codec_id_t codecs[] = {KVP_CODEC_KIVI, KVP_CODEC_KIVI128};

    for (size_t ci = 0; ci < 2; ci++) {
        kvp_codec_id_t c = codecs[ci];
        const char    *impls[4];
        size_t         ni = kvp_codec_impls(c, impls, 4);

        for (size_t ii = 0; ii < ni; ii++) {
            tk_rng_t rng = {42 + ci};
            char     what[64];

            EXPECT(kvp_codec_set_impl(c, impls[ii]) == KVP_OK, "set impl %s", impls[ii]);
            for (int kind = 0; kind < 5; kind++) {
                snprintf(what, sizeof(what), "%s/%s kind %d", kvp_codec_name(c), impls[ii], kind);
                run_case(what, c, 8, 128, 128, 128, &rng, kind);
                run_case(what, c, 3, 64, 128, 45, &rng, kind);   /* partial page */
                run_case(what, c, 2, 16, 64, 7, &rng, kind);     /* D < G, tiny page */
                run_case(what, c, 1, 256, 256, 200, &rng, kind);
            }
            run_reject(c);
            run_f16(c, &rng);
        }
    }
    return kvp_test_result("test_kivi");
}
