/* test_faithful.c - faithfulness: an independent plain-C re-implementation of the CODECS.md
 * formulas (Hadamard as an explicit +-1/sqrt(D) matrix product, not a butterfly; KIVI 3; OScaR
 * 1.1/1.3 with the integer zero point of 0.2; KVarN 2.1/2.2 VarN with two-pass unbiased std,
 * clamps, later-ties-win; stored scales rounded to fp16) compared with the library. Frames are
 * compared where codes live (ROTATED for oscar/kvarn, so a flipped code stays one element):
 * at most 0.1% of elements may differ (codes flipped at rounding ties: the matrix Hadamard
 * rounds differently from the butterfly), every other element within 1e-3 of the tensor RMS.
 * With argv[1] = path of the kvpack binary it also runs `kvpack eval --input X.kvd --codec C
 * --dequant-out Y.kvd` and checks Y (original frame) against the same formulas. */
#include "tk.h"

#include <unistd.h>

static float h16(float x) { return kvp_f16_to_f32(kvp_f32_to_f16(x)); }

static void hadamard(const float *x, float *y, uint32_t D) /* y = H x, H symmetric */
{
    for (uint32_t i = 0; i < D; i++) {
        float s = 0.0f;

        for (uint32_t j = 0; j < D; j++) {
            s += (__builtin_popcount(i & j) & 1) ? -x[j] : x[j];
        }
        y[i] = s / sqrtf((float)D);
    }
}

/* one group, rule: 0 KIVI, 1 OScaR, 2 KVarN; x[i*st]; writes dequant into y[i*st] */
static void rtn(const float *x, float *y, uint32_t n, size_t st, int rule)
{
    float mn = x[0], mx = x[0];

    for (uint32_t i = 1; i < n; i++) {
        mn = fminf(mn, x[i * st]);
        mx = fmaxf(mx, x[i * st]);
    }
    if (rule == 0) {
        float s = (mx - mn) / 3.0f;
        for (uint32_t i = 0; i < n; i++) {
            float q = s == 0.0f ? 0.0f : rintf(fminf(fmaxf((x[i * st] - mn) / s, 0.0f), 3.0f));
            y[i * st] = q * h16(s) + h16(mn);
        }
    } else if (rule == 1) {
        float s, inv, zq;

        if (mn == mx && mn != 0.0f) {
            for (uint32_t i = 0; i < n; i++) {
                y[i * st] = h16(mn);
            }
            return;
        }
        if (mn == mx) {
            mn = -1.0f, mx = 1.0f;
        }
        s = (mx - mn) / 3.0f, inv = 3.0f / (mx - mn), zq = rintf(-mn / s);
        for (uint32_t i = 0; i < n; i++) {
            float t = x[i * st] * inv;
            float q = fminf(fmaxf(rintf(t + zq), 0.0f), 3.0f);
            y[i * st] = q * h16(s) + h16(-zq * s);
        }
    }
}

/* ---- VarN (CODECS.md 2.2) and KVarN RTN on X[R][C]; writes Xhat (rotated frame) ---- */
static float sd(const float *x, uint32_t n, size_t st)
{
    float m = 0, v = 0;

    if (n < 2) return 0.0f;
    for (uint32_t i = 0; i < n; i++) m += x[i * st];
    m /= (float)n;
    for (uint32_t i = 0; i < n; i++) v += (x[i * st] - m) * (x[i * st] - m);
    return sqrtf(v / (float)(n - 1));
}

static float imb(const float *cur, uint32_t R, uint32_t C)
{
    float cmx = 0, cmn = INFINITY, rmx = 0, rmn = INFINITY;

    for (uint32_t c = 0; c < C; c++) { float s = sd(cur + c, R, C); cmx = fmaxf(cmx, s); cmn = fminf(cmn, s); }
    for (uint32_t r = 0; r < R; r++) { float s = sd(cur + (size_t)r * C, C, 1); rmx = fmaxf(rmx, s); rmn = fminf(rmn, s); }
    return cmx / fmaxf(cmn, 1e-8f) + rmx / fmaxf(rmn, 1e-8f);
}

static void kvarn_tile(const float *X, float *out, uint32_t R, uint32_t C, uint32_t iters)
{
    float *cur = malloc((size_t)R * C * 4), *Lc = calloc(C, 4), *Lr = calloc(R, 4);
    float *Sc = malloc(C * 4), *Sr = malloc(R * 4), best;

    for (uint32_t c = 0; c < C; c++) Sc[c] = 1.0f;
    for (uint32_t r = 0; r < R; r++) Sr[r] = 1.0f;
    memcpy(cur, X, (size_t)R * C * 4);
    best = imb(X, R, C);
    for (uint32_t it = 0; it < iters; it++) {
        float I;
        for (uint32_t c = 0; c < C; c++)
            Lc[c] = fminf(fmaxf(Lc[c] + logf(fminf(fmaxf(sd(cur + c, R, C), 1e-3f), 1e3f)), -0.3f), 10.0f);
        for (size_t i = 0; i < (size_t)R * C; i++) cur[i] = X[i] / expf(Lc[i % C]) / expf(Lr[i / C]);
        for (uint32_t r = 0; r < R; r++)
            Lr[r] = fminf(fmaxf(Lr[r] + logf(fminf(fmaxf(sd(cur + (size_t)r * C, C, 1), 1e-3f), 1e3f)), -0.3f), 10.0f);
        for (size_t i = 0; i < (size_t)R * C; i++) cur[i] = X[i] / expf(Lc[i % C]) / expf(Lr[i / C]);
        I = imb(cur, R, C);
        if (I <= best) {
            best = I;
            for (uint32_t c = 0; c < C; c++) Sc[c] = expf(Lc[c]);
            for (uint32_t r = 0; r < R; r++) Sr[r] = expf(Lr[r]);
        }
    }
    for (uint32_t r = 0; r < R; r++) {
        float lo = INFINITY, hi = -INFINITY, s;
        for (uint32_t c = 0; c < C; c++) { float b = X[(size_t)r * C + c] / Sc[c] / Sr[r]; lo = fminf(lo, b); hi = fmaxf(hi, b); }
        s = fmaxf((hi - lo) / 3.0f, 1e-10f);
        for (uint32_t c = 0; c < C; c++) {
            float b = X[(size_t)r * C + c] / Sc[c] / Sr[r];
            float q = fminf(fmaxf(rintf((b - lo) / s), 0.0f), 3.0f);
            out[(size_t)r * C + c] = (q * h16(Sr[r] * s) + h16(Sr[r] * lo)) * h16(Sc[c]);
        }
    }
    free(cur); free(Lc); free(Lr); free(Sc); free(Sr);
}

/* Independent dequant of one page [T][H][D] in the frame the codec stores (rotated for oscar K:
 * normalised) when frame_rot, else the original frame. */
static void model(kvp_codec_id_t c, const float *k, const float *v, uint32_t T, uint32_t H,
                  uint32_t D, int frame_rot, float *kh, float *vh)
{
    size_t n = (size_t)T * H * D, HD = (size_t)H * D;
    float *kr = malloc(n * 4), *vr = malloc(n * 4), *nrm = malloc(T * 4), *tmp = malloc(D * 4);
    float *X = malloc((size_t)T * D * 4), *Y = malloc((size_t)T * D * 4);

    if (c == KVP_CODEC_KIVI || c == KVP_CODEC_KIVI128 || c == KVP_CODEC_NAIVE2) {
        uint32_t G = c == KVP_CODEC_KIVI ? 32 : 128, gv = D < G ? D : G;
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t d = 0; d < D; d++)
                if (c == KVP_CODEC_NAIVE2) break;
                else for (uint32_t t0 = 0; t0 < T; t0 += G)
                    rtn(k + t0 * HD + h * D + d, kh + t0 * HD + h * D + d, T - t0 < G ? T - t0 : G, HD, 0);
        for (size_t r = 0; r < (size_t)T * H; r++) {
            if (c == KVP_CODEC_NAIVE2) rtn(k + r * D, kh + r * D, D, 1, 0);
            for (uint32_t g = 0; g < D; g += (c == KVP_CODEC_NAIVE2 ? D : gv))
                rtn(v + r * D + g, vh + r * D + g, c == KVP_CODEC_NAIVE2 ? D : gv, 1, 0);
        }
        goto out;
    }
    for (size_t r = 0; r < (size_t)T * H; r++) {
        hadamard(k + r * D, kr + r * D, D);
        hadamard(v + r * D, vr + r * D, D);
        for (uint32_t i = 0; i < D; i++) {
            vr[r * D + i] = h16(vr[r * D + i]);
            if (c == KVP_CODEC_KVARN) kr[r * D + i] = h16(kr[r * D + i]);
        }
    }
    if (c == KVP_CODEC_OSCAR) {
        for (uint32_t t = 0; t < T; t++) {
            float ss = 0;
            for (size_t i = 0; i < HD; i++) ss += kr[t * HD + i] * kr[t * HD + i];
            nrm[t] = sqrtf(ss) > 0 ? sqrtf(ss) : 1.0f;
            for (size_t i = 0; i < HD; i++) kr[t * HD + i] = h16(h16(kr[t * HD + i]) / nrm[t]);
        }
        for (size_t col = 0; col < HD; col++)
            for (uint32_t t0 = 0; t0 < T; t0 += 32)
                rtn(kr + t0 * HD + col, kh + t0 * HD + col, T - t0 < 32 ? T - t0 : 32, HD, 1);
        for (size_t r = 0; r < (size_t)T * H; r++)
            for (uint32_t g = 0; g < D; g += (D < 32 ? D : 32))
                rtn(vr + r * D + g, vh + r * D + g, D < 32 ? D : 32, 1, 1);
        if (!frame_rot)
            for (size_t r = 0; r < (size_t)T * H; r++) {
                for (uint32_t i = 0; i < D; i++) tmp[i] = kh[r * D + i] * nrm[r / H];
                hadamard(tmp, kh + r * D, D);
                memcpy(tmp, vh + r * D, D * 4);
                hadamard(tmp, vh + r * D, D);
            }
        goto out;
    }
    for (uint32_t h = 0; h < H; h++) { /* kvarn */
        for (uint32_t t = 0; t < T; t++) for (uint32_t d = 0; d < D; d++) X[(size_t)d * T + t] = kr[t * HD + h * D + d];
        kvarn_tile(X, Y, D, T, 8);
        for (uint32_t t = 0; t < T; t++) for (uint32_t d = 0; d < D; d++) kh[t * HD + h * D + d] = Y[(size_t)d * T + t];
        for (uint32_t t = 0; t < T; t++) memcpy(X + (size_t)t * D, vr + t * HD + h * D, D * 4);
        kvarn_tile(X, Y, T, D, 8);
        for (uint32_t t = 0; t < T; t++) memcpy(vh + t * HD + h * D, Y + (size_t)t * D, D * 4);
    }
    if (!frame_rot)
        for (size_t r = 0; r < (size_t)T * H; r++) {
            memcpy(tmp, kh + r * D, D * 4); hadamard(tmp, kh + r * D, D);
            memcpy(tmp, vh + r * D, D * 4); hadamard(tmp, vh + r * D, D);
        }
out:
    free(kr); free(vr); free(nrm); free(tmp); free(X); free(Y);
}

/* elements off by more than 1e-3 RMS; returns count, checks the fraction */
static size_t compare(const char *what, const float *a, const float *b, size_t n, double max_frac)
{
    double rms = 0;
    size_t bad = 0;

    for (size_t i = 0; i < n; i++) rms += (double)b[i] * b[i];
    rms = sqrt(rms / n);
    for (size_t i = 0; i < n; i++) bad += fabs((double)a[i] - b[i]) > 1e-3 * rms;
    EXPECT(bad <= max_frac * n, "%s: %zu of %zu elements differ from the formulas", what, bad, n);
    return bad;
}

int main(int argc, char **argv)
{
    const kvp_codec_id_t cs[] = {KVP_CODEC_KIVI, KVP_CODEC_KIVI128, KVP_CODEC_NAIVE2,
                                 KVP_CODEC_OSCAR, KVP_CODEC_KVARN};
    uint32_t H = 2, D = 64, T = 256, P = 128;
    size_t   n = (size_t)T * H * D;
    float   *k = malloc(n * 4), *v = malloc(n * 4), *ka = malloc(n * 4), *va = malloc(n * 4);
    float   *km = malloc(n * 4), *vm = malloc(n * 4);
    tk_rng_t rng = {2024};

    for (uint32_t t = 0; t < T; t++)
        for (size_t i = 0; i < (size_t)H * D; i++) {
            float tn = t < 2 ? 0.1f : (t > 150 ? 2.5f : 1.0f);
            k[t * H * D + i] = tn * (tk_gauss(&rng) + (i % 23 == 4 ? 15.0f : 0.0f));
            v[t * H * D + i] = tn * tk_gauss(&rng) * (1.0f + (float)(i % 5));
        }
    for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ci++) {
        kvp_codec_id_t c = cs[ci];
        int            rot = c == KVP_CODEC_OSCAR || c == KVP_CODEC_KVARN;
        char           what[64];

        kvp_codec_set_impl(c, "ref");
        for (uint32_t t0 = 0; t0 < T; t0 += P) { /* pages of P tokens */
            size_t off = (size_t)t0 * H * D, m = (size_t)P * H * D;

            EXPECT(tk_roundtrip(&(kvp_page_params_t){.codec = c, .heads = H, .head_dim = D, .page_tokens = P},
                               k + off, v + off, P, rot ? KVP_FRAME_ROTATED : KVP_FRAME_ORIGINAL,
                               ka + off, va + off, NULL, NULL) == KVP_OK, "encode %s", kvp_codec_name(c));
            model(c, k + off, v + off, P, H, D, rot, km + off, vm + off);
            (void)m;
        }
        snprintf(what, sizeof(what), "%s K", kvp_codec_name(c));
        compare(what, ka, km, n, 1e-3);
        snprintf(what, sizeof(what), "%s V", kvp_codec_name(c));
        compare(what, va, vm, n, 1e-3);
        if (argc > 1) { /* the CLI path: .kvd in, --dequant-out .kvd back, original frame */
            char  dir[] = "/tmp/kvp_faithXXXXXX", cmd[1024], in[256], out[256];
            FILE *f;
            uint32_t hdr[6] = {0x3144564Bu, 1, 1, T, H, D};
            float   *dq = malloc(2 * n * 4 + 24);

            EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
            snprintf(in, sizeof(in), "%s/in.kvd", dir);
            snprintf(out, sizeof(out), "%s/out.kvd", dir);
            f = fopen(in, "wb");
            fwrite(hdr, 4, 6, f); fwrite(k, 4, n, f); fwrite(v, 4, n, f); fclose(f);
            snprintf(cmd, sizeof(cmd), "KVPACK_CODEC_IMPL=ref %s eval --input %s --codec %s --page-tokens %u "
                     "--queries 4 --dequant-out %s > /dev/null", argv[1], in, kvp_codec_name(c), P, out);
            EXPECT(system(cmd) == 0, "%s failed", cmd);
            f = fopen(out, "rb");
            EXPECT(f != NULL && fread(dq, 1, 2 * n * 4 + 24, f) == 2 * n * 4 + 24, "read %s", out);
            if (f) fclose(f);
            for (uint32_t t0 = 0; t0 < T; t0 += P) {
                size_t off = (size_t)t0 * H * D;
                model(c, k + off, v + off, P, H, D, 0, km + off, vm + off);
            }
            snprintf(what, sizeof(what), "dequant-out %s K", kvp_codec_name(c));
            compare(what, dq + 6, km, n, rot ? 0.05 : 1e-3); /* one flipped code spreads over D */
            snprintf(what, sizeof(what), "dequant-out %s V", kvp_codec_name(c));
            compare(what, dq + 6 + n, vm, n, rot ? 0.05 : 1e-3);
            EXPECT(tk_rel(dq + 6, km, n) < 1e-2 && tk_rel(dq + 6 + n, vm, n) < 1e-2,
                  "dequant-out %s far from the formulas", kvp_codec_name(c));
            unlink(in); unlink(out); rmdir(dir);
            free(dq);
        }
    }
    free(k); free(v); free(ka); free(va); free(km); free(vm);
    return kvp_test_result("test_faithful");
}
