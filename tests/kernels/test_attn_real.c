/* test_attn_real.c - fused attention over packed pages on real KV: stories260K (and SmolLM2-135M
 * when client/model/fetch_smollm2.sh finds it) dump their post-RoPE K/V of Jane Austen's Emma
 * with `kvpack model --dump-kv`; each layer is laid out as pages of every 2-bit codec with an
 * fp16 tail. Per layer and KV head, queries as kvpack eval builds them (even: random direction,
 * odd: the key at a random position; scaled to logits of std 3 over the original keys).
 * Checked: the fused output equals attention over kvp_page_decode's output (< ATTN_TOL, as in
 * test_attn), and its error against exact fp32 attention matches eval's attn_rel_err
 * (kvp_attn_rel_err, its own random queries) within 25 % + 0.005. Exit 77 without the data.
 * usage: test_attn_real KVPACK_BIN REALDATA_DIR [FETCH_SMOLLM2_SH] */
#include "attn_tk.h"
#include "eval/eval.h"

#include <stdlib.h>
#include <unistd.h>

#define ATTN_TOL 2e-5
#define NQ       32 /* queries per KV head */

typedef struct {
    double fused, eval, agree; /* sums over layers of the two errors; worst fused vs decoded */
} acc_t;

static void make_queries(tk_rng_t *r, const float *k, uint32_t T, uint32_t H, uint32_t D, float *q)
{
    for (uint32_t h = 0; h < H; h++) {
        for (uint32_t i = 0; i < NQ; i++) {
            float   *qi = q + ((size_t)h * NQ + i) * D;
            uint32_t pos = tk_range(r, 0, T - 1);
            double   nrm = 0, s = 0, s2 = 0, sd;

            for (uint32_t d = 0; d < D; d++) {
                qi[d] = i % 2 ? k[((size_t)pos * H + h) * D + d] : tk_gauss(r);
                nrm += (double)qi[d] * qi[d];
            }
            for (uint32_t t = 0; t < T; t++) {
                double l = 0;

                for (uint32_t d = 0; d < D; d++) {
                    l += qi[d] / sqrt(nrm) * k[((size_t)t * H + h) * D + d];
                }
                l /= sqrt((double)D);
                s += l;
                s2 += l * l;
            }
            sd = sqrt(fmax(s2 / T - (s / T) * (s / T), 0.0));
            for (uint32_t d = 0; d < D; d++) {
                qi[d] = (float)(qi[d] / sqrt(nrm) * (sd > 1e-12 ? 3.0 / sd : 1.0));
            }
        }
    }
}

static void one_layer(const float *k, const float *v, uint32_t T, uint32_t H, uint32_t D,
                      uint32_t P, uint32_t tail, kvp_codec_id_t codec, uint32_t layer, acc_t *a)
{
    uint32_t   Hq = H * NQ;
    size_t     n  = (size_t)Hq * D;
    float     *q = malloc(n * 4), *exact = malloc(n * 4), *dec = malloc(n * 4), *fused = malloc(n * 4);
    tk_rng_t   r = {1000 + layer};
    at_pages_t pg;
    double     agree;

    CHECK(q && exact && dec && fused);
    make_queries(&r, k, T, H, D, q);
    at_build(&pg, codec, 0, H, D, P, k, v, T, tail, 0);
    at_attend(k, v, T, H, D, q, Hq, 1.0 / sqrt(D), exact);
    at_attend(pg.kd, pg.vd, T, H, D, q, Hq, 1.0 / sqrt(D), dec);
    CHECK_OK(kvp_attn_compute(NULL, pg.ap, pg.n, &pg.tp, q, Hq, fused));
    agree    = at_worst(fused, dec, Hq, D);
    a->agree = agree > a->agree ? agree : a->agree;
    a->fused += tk_rel(fused, exact, n);
    a->eval += kvp_attn_rel_err(k, v, pg.kd, pg.vd, T, H, D, 2 * NQ, 7 + layer);
    at_free(&pg);
    free(q), free(exact), free(dec), free(fused);
}

static void check_kvd(const char *name, const char *path, uint32_t P, uint32_t tail,
                      uint32_t layer_step)
{
    static const kvp_codec_id_t codecs[] = {KVP_CODEC_KIVI, KVP_CODEC_KIVI128, KVP_CODEC_OSCAR,
                                            KVP_CODEC_KVARN};
    kvp_kv_t kv;

    CHECK_OK(kvp_kvd_read(path, &kv, NULL, 0));
    printf("%s: %u layers x %u tokens x %u KV heads x %u, P %u, tail %u\n", name, kv.layers,
           kv.tokens, kv.heads, kv.head_dim, P, tail);
    printf("  %-8s %10s %10s %12s\n", "codec", "fused_err", "eval_err", "fused_vs_dec");
    for (size_t c = 0; c < sizeof(codecs) / sizeof(codecs[0]); c++) {
        acc_t    a = {0, 0, 0};
        uint32_t nl = 0;

        for (uint32_t l = 0; l < kv.layers; l += layer_step, nl++) {
            size_t off = (size_t)l * kv.tokens * kv.heads * kv.head_dim;

            one_layer(kv.k + off, kv.v + off, kv.tokens, kv.heads, kv.head_dim, P, tail,
                      codecs[c], l, &a);
        }
        a.fused /= nl;
        a.eval /= nl;
        printf("  %-8s %10.4f %10.4f %12.2g\n", kvp_codec_name(codecs[c]), a.fused, a.eval, a.agree);
        EXPECT(a.agree < ATTN_TOL, "%s %s: fused vs decoded %.3g", name, kvp_codec_name(codecs[c]),
               a.agree);
        EXPECT(fabs(a.fused - a.eval) <= 0.25 * a.eval + 0.005,
               "%s %s: fused attention error %.4f vs eval attn_rel_err %.4f", name,
               kvp_codec_name(codecs[c]), a.fused, a.eval);
    }
    kvp_kv_free(&kv);
}

static int run(const char *cmd)
{
    int rc = system(cmd);

    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/kvp_attn_real_XXXXXX", cmd[4096], path[1024], gguf[1024] = "";
    FILE *f;

    if (argc < 3) {
        fprintf(stderr, "usage: test_attn_real KVPACK_BIN REALDATA_DIR [FETCH_SMOLLM2_SH]\n");
        return 2;
    }
    snprintf(path, sizeof(path), "%s/stories260K.bin", argv[2]);
    if (access(path, R_OK) != 0) {
        printf("skip: real data absent (%s); see ../shared/realdata/README.md\n", path);
        return 77;
    }
    CHECK(mkdtemp(dir) != NULL);
    snprintf(cmd, sizeof(cmd),
             "'%s' model --model '%s/stories260K.bin' --tokenizer '%s/tok512.bin' --text "
             "'%s/emma.txt' --tokens 512 --codec fp16 --dump-kv '%s/s.kvd' > /dev/null",
             argv[1], argv[2], argv[2], argv[2], dir);
    CHECK(run(cmd) == 0);
    snprintf(path, sizeof(path), "%s/s.kvd", dir);
    check_kvd("stories260K", path, 128, 37, 1);
    unlink(path);

    /* SmolLM2-135M (head_dim 64), 160 tokens, every 7th layer: only when already fetchable */
    if (argc > 3) {
        snprintf(cmd, sizeof(cmd), "sh '%s' 2>/dev/null", argv[3]);
        f = popen(cmd, "r");
        if (f != NULL && fgets(gguf, sizeof(gguf), f) == NULL) {
            gguf[0] = 0;
        }
        if (f != NULL && pclose(f) != 0) {
            gguf[0] = 0;
        }
        gguf[strcspn(gguf, "\n")] = 0;
    }
    if (gguf[0] == 0) {
        printf("SmolLM2-135M not available (offline?): stories260K only\n");
    } else {
        snprintf(cmd, sizeof(cmd),
                 "'%s' model --model '%s' --text '%s/emma.txt' --tokens 160 --codec fp16 "
                 "--dump-kv '%s/m.kvd' > /dev/null 2>&1",
                 argv[1], gguf, argv[2], dir);
        CHECK(run(cmd) == 0);
        snprintf(path, sizeof(path), "%s/m.kvd", dir);
        check_kvd("SmolLM2-135M", path, 64, 32, 7);
        unlink(path);
    }
    rmdir(dir);
    return kvp_test_result("test_attn_real");
}
