/* test_stories.c - the model runner end to end on stories260K (../shared/realdata): greedy
 * decoding from BOS reproduces the published opening; the llama2.c tokenizer round-trips; a
 * teacher-forced run over Emma gives finite figures, exact bits/element, and every 2-bit codec
 * beats naive2 on perplexity and KL; sealed pages are what attention reads (pseudo-decode); a
 * session packed into pages and restored elsewhere decodes identically; corrupt pages are refused;
 * the .kvd dump holds exactly the fp32 cache. Usage: test_stories REALDATA_DIR (exit 77 if absent). */
#include "model/model.h"
#include "model/run.h"

#include "eval/eval.h"
#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"
#include "check.h"
#include "stories_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static const char *published =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball.";

static char *gen_text(const kvp_model_t *m, const uint32_t *ids, uint32_t n)
{
    char  *txt = NULL;
    size_t len;
    FILE  *ms = open_memstream(&txt, &len);

    kvp_run_print(ms, m, kvp_tok_bos(m->tok), ids, n);
    fclose(ms);
    return txt;
}

static void test_greedy(const kvp_model_t *m)
{
    kvp_codec_id_t lanes[2] = {KVP_KVC_FP32, KVP_CODEC_FP16};
    uint32_t       bos      = kvp_tok_bos(m->tok), out[2 * 48];
    kvp_run_t     *run;
    kvp_status_t   st = kvp_run_create(m, lanes, 2, 128, 64, 0, &run);

    EXPECT(st == KVP_OK, "run create");
    if (st != KVP_OK) {
        return;
    }
    st = kvp_run_generate(run, &bos, 1, 48, out);
    EXPECT(st == KVP_OK, "generate: %s", kvp_status_str(st));
    for (int l = 0; l < 2 && st == KVP_OK; l++) {
        char *txt = gen_text(m, out + l * 48, 48);

        EXPECT(strncmp(txt, published, strlen(published)) == 0, "%s lane wrote \"%s\"",
              l ? "fp16" : "fp32", txt);
        free(txt);
    }
    kvp_run_destroy(run);
}

static void test_tokenizer(const kvp_model_t *m, const char *emma)
{
    const char *cases[] = {"Once upon a time", " leading space", "two  spaces\nand\n\nlines",
                           "na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 ok", "", emma};

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint32_t    *ids;
        size_t       n;
        kvp_status_t st = kvp_tok_encode(m->tok, cases[c], strlen(cases[c]), 1, &ids, &n);
        char        *txt;

        EXPECT(st == KVP_OK && n >= 1 && ids[0] == kvp_tok_bos(m->tok), "encode case %zu", c);
        if (st != KVP_OK) {
            continue;
        }
        if (c == 0) {
            EXPECT(n < strlen(cases[c]), "merges happened: %zu tokens for %zu bytes", n,
                  strlen(cases[c]));
        }
        txt = gen_text(m, ids + 1, (uint32_t)n - 1);
        EXPECT(strcmp(txt, cases[c]) == 0, "round trip of case %zu: \"%.60s\"", c, txt);
        free(txt);
        kvp_free(ids);
    }
}

/* Emma, 512 tokens, P = 128: every accepted codec, figures finite, exact bits, 2-bit < naive2. */
static void test_codecs(const kvp_model_t *m, const uint32_t *ids, uint32_t n)
{
    kvp_codec_id_t lanes[KVP_RUN_MAX_LANES] = {KVP_CODEC_FP16};
    uint32_t       nl = 1, P = 128, naive = 0;
    kvp_run_t     *run;
    kvp_status_t   st;

    for (int c = 2; c < KVP_CODEC_MAX; c++) {
        kvp_page_params_t pp = {.codec = (kvp_codec_id_t)c, .heads = m->cfg.kv_heads,
                                .head_dim = m->cfg.head_dim, .page_tokens = P};

        if (kvp_codec_check(&pp) == KVP_OK) {
            naive          = c == KVP_CODEC_NAIVE2 ? nl : naive;
            lanes[nl++]    = (kvp_codec_id_t)c;
        }
    }
    EXPECT(naive != 0, "naive2 is available for stories260K");
    st = kvp_run_create(m, lanes, nl, P, n, 0, &run);
    EXPECT(st == KVP_OK, "run create: %s", kvp_status_str(st));
    if (st != KVP_OK) {
        return;
    }
    st = kvp_run_ppl(run, ids, n);
    EXPECT(st == KVP_OK, "ppl: %s", kvp_status_str(st));
    kvp_run_finish(run);
    for (uint32_t l = 0; l < nl && st == KVP_OK; l++) {
        const kvp_lane_stat_t *s  = &run->stat[l];
        kvp_page_params_t      pp = {.codec = lanes[l], .heads = m->cfg.kv_heads,
                                     .head_dim = m->cfg.head_dim, .page_tokens = P};
        double want_bits = 8.0 * (double)kvp_page_max_bytes(&pp) /
                           (2.0 * P * m->cfg.kv_heads * m->cfg.head_dim);

        printf("  %-8s ppl %8.3f kl %.4f top1 %.3f bits %.3f\n", s->name, s->ppl, s->kl_mean,
               s->top1_agree, s->bits_per_elem);
        EXPECT(isfinite(s->ppl) && s->ppl > 1.0 && isfinite(s->kl_mean) && s->kl_mean >= 0.0 &&
              s->top1_agree >= 0.0 && s->top1_agree <= 1.0, "%s figures", s->name);
        EXPECT(s->n == n - 1, "%s scored %llu predictions", s->name, (unsigned long long)s->n);
        EXPECT(fabs(s->bits_page - want_bits) < 1e-9, "%s bits %.6f, pages say %.6f", s->name,
              s->bits_page, want_bits);
        if (l == 0) {
            EXPECT(s->kl_mean == 0.0 && s->top1_agree == 1.0, "reference lane agrees with itself");
        } else if (l != naive && naive != 0) {
            const kvp_lane_stat_t *nv = &run->stat[naive];

            EXPECT(s->ppl < nv->ppl && s->kl_mean < nv->kl_mean,
                  "%s (ppl %.2f kl %.3f) does not beat naive2 (ppl %.2f kl %.3f)", s->name,
                  s->ppl, s->kl_mean, nv->ppl, nv->kl_mean);
        }
        if (l > 0) {
            EXPECT(s->kl_mean > 0.0, "%s changes the distribution at all", s->name);
        }
    }
    kvp_run_destroy(run);
}

/* Sealed rows hold decode(encode(fp16 rows)); tail rows are fp16; a packed session restored in a
 * fresh cache continues identically; a corrupt page is refused. */
static void test_pages(const kvp_model_t *m, const uint32_t *ids)
{
    kvp_codec_id_t codec = KVP_CODEC_KIVI, ref = KVP_KVC_FP32;
    uint32_t       P = 64, np = 150, steps = 24, outa[24], outb[24];
    kvp_run_t     *a = NULL, *b = NULL, *f = NULL;
    kvp_kvc_t     *ca;
    uint8_t       *tail = NULL;
    size_t         tail_len;
    uint32_t       n_tail;
    kvp_status_t   st;

    st = kvp_run_create(m, &codec, 1, P, np + steps, 1, &a);
    if (st == KVP_OK) {
        st = kvp_run_create(m, &ref, 1, P, np, 0, &f);
    }
    EXPECT(st == KVP_OK, "runs: %s", kvp_status_str(st));
    if (st != KVP_OK) {
        goto out;
    }
    EXPECT(kvp_run_feed(a, ids, np - 1) == KVP_OK && kvp_run_feed(f, ids, np - 1) == KVP_OK,
          "feed");
    ca = a->cache[0];
    EXPECT(ca->sealed == 128 && ca->ntok == np - 1, "sealed %u of %u", ca->sealed, ca->ntok);
    /* page 1 of layer 2 decodes to exactly the rows attention read */
    {
        size_t   row = ca->row, i = 1 * ca->p.layers + 2;
        float   *k   = malloc(P * row * sizeof(float)), *v = malloc(P * row * sizeof(float));
        uint32_t diff = 0;

        EXPECT(kvp_page_decode(ca->pages[i], ca->page_lens[i], KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, k,
                              v, NULL) == KVP_OK, "decode kept page");
        EXPECT(memcmp(k, kvp_kvc_k(ca, 2) + (size_t)P * row, P * row * sizeof(float)) == 0 &&
              memcmp(v, kvp_kvc_v(ca, 2) + (size_t)P * row, P * row * sizeof(float)) == 0,
              "sealed rows are the decoded page");
        /* layer 0 K/V depend only on the token and position, so they can be compared with the
         * fp32 run: sealed rows carry the 2-bit error, tail rows are the fp16 rounding */
        for (size_t j = 0; j < P * row; j++) {
            diff += kvp_kvc_k(ca, 0)[P * row + j] != kvp_kvc_k(f->cache[0], 0)[P * row + j];
        }
        EXPECT(diff > P * row / 2, "sealed rows are quantized (%u of %zu differ)", diff, P * row);
        for (size_t j = 0; j < row; j++) {
            float x = kvp_kvc_v(f->cache[0], 0)[140 * row + j];

            EXPECT(kvp_kvc_v(ca, 0)[140 * row + j] == kvp_f16_to_f32(kvp_f32_to_f16(x)),
                  "tail row %zu is fp16", j);
        }
        free(k);
        free(v);
    }
    /* restore into a fresh run, then both continue */
    st = kvp_kvc_tail_pack(ca, &tail, &tail_len, &n_tail);
    EXPECT(st == KVP_OK && n_tail == m->cfg.layers, "tail pack");
    st = kvp_run_create(m, &codec, 1, P, np + steps, 0, &b);
    if (st == KVP_OK) {
        uint32_t n_pages = ca->sealed / P * ca->p.layers;
        uint8_t  save;

        /* a flipped payload byte: the CRC refuses it */
        save = ca->pages[3][100];
        ca->pages[3][100] ^= 0x10;
        st = kvp_kvc_restore(b->cache[0], ids, np - 1, (const uint8_t *const *)ca->pages,
                             ca->page_lens, n_pages, tail, tail_len, n_tail);
        EXPECT(st == KVP_ERR_CORRUPT, "corrupt page gives %s", kvp_status_name(st));
        ca->pages[3][100] = save;
        kvp_run_destroy(b);
        b  = NULL;
        st = kvp_run_create(m, &codec, 1, P, np + steps, 0, &b);
        if (st == KVP_OK) {
            st = kvp_kvc_restore(b->cache[0], ids, np - 1, (const uint8_t *const *)ca->pages,
                                 ca->page_lens, n_pages, tail, tail_len, n_tail);
        }
        EXPECT(st == KVP_OK, "restore: %s", kvp_status_name(st));
    }
    if (st == KVP_OK) {
        EXPECT(kvp_run_generate(a, ids + np - 1, 1, steps, outa) == KVP_OK &&
              kvp_run_generate(b, ids + np - 1, 1, steps, outb) == KVP_OK, "generate");
        EXPECT(memcmp(outa, outb, sizeof(outa)) == 0, "restored session decodes identically");
    }
out:
    kvp_free(tail);
    kvp_run_destroy(a);
    kvp_run_destroy(b);
    kvp_run_destroy(f);
}

static void test_kvd(const kvp_model_t *m, const uint32_t *ids)
{
    char           path[128];
    kvp_kv_t       kv;
    kvp_codec_id_t ref = KVP_KVC_FP32;
    kvp_run_t     *f;
    uint32_t       n = 40;

    snprintf(path, sizeof(path), "/tmp/kvp_test_stories_%d.kvd", (int)getpid());
    memset(&kv, 0, sizeof(kv));
    EXPECT(kvp_run_dump_kvd(m, ids, n, path) == KVP_OK, "dump");
    EXPECT(kvp_kvd_read(path, &kv, NULL, 0) == KVP_OK, "read back");
    EXPECT(kv.layers == m->cfg.layers && kv.tokens == n && kv.heads == m->cfg.kv_heads &&
          kv.head_dim == m->cfg.head_dim, "kvd header");
    if (kv.k != NULL && kvp_run_create(m, &ref, 1, 1, n, 0, &f) == KVP_OK) {
        size_t per = (size_t)n * kv.heads * kv.head_dim;

        kvp_run_feed(f, ids, n);
        for (uint32_t l = 0; l < kv.layers; l++) {
            EXPECT(memcmp(kv.k + l * per, kvp_kvc_k(f->cache[0], l), per * sizeof(float)) == 0 &&
                  memcmp(kv.v + l * per, kvp_kvc_v(f->cache[0], l), per * sizeof(float)) == 0,
                  "layer %u of the dump equals the fp32 cache", l);
        }
        kvp_run_destroy(f);
    }
    kvp_kv_free(&kv);
    unlink(path);
}

int main(int argc, char **argv)
{
    kvp_model_t *m;
    char        *emma;
    size_t       elen, n;
    uint32_t    *ids;
    int          rc = kvp_test_stories_load(argc, argv, "test_stories", 6000, &m, &emma, &elen);

    if (rc >= 0) {
        return rc;
    }
    test_greedy(m);
    test_tokenizer(m, emma);
    if (kvp_tok_encode(m->tok, emma, elen, 1, &ids, &n) == KVP_OK && n >= 512) {
        test_codecs(m, ids, 512);
        test_pages(m, ids);
        test_kvd(m, ids);
        kvp_free(ids);
    } else {
        EXPECT(0, "emma excerpt tokenizes to >= 512 tokens");
    }
    free(emma);
    kvp_model_free(m);
    return kvp_test_result("test_stories");
}
