/* test_gguf.c - the GGUF reader, block dequantization and the byte-level BPE tokenizer on files
 * crafted here: a tiny valid "llama" model (tokenizer included) loads and runs; every block type
 * dequantizes to values derived independently in this file; the matmul reading quantized rows
 * directly equals the fp32 copy bit for bit; a text read in part gives exactly the first tokens
 * of the whole text (kvp_run_text_tokens); malformed files (bad magic, bad
 * version, truncation at every byte, a string or tensor past the end, too many dims, an
 * unsupported tensor type, a shape mismatch, a rope theta <= 0 or an rms epsilon < 0 or NaN; an
 * optional key of a wrong type, a NaN weight, a tensor name or metadata key twice, overlapping or
 * misaligned tensor data) fail with a clear status and never crash; what llama.cpp's llama arch
 * computes and this runner does not (a bias tensor, linear RoPE scaling, experts, another value
 * length) is refused as unsupported. */
#include "model/gguf.h"
#include "model/model.h"
#include "model/run.h"
#include "model/tokenizer.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"
#include "check.h"
#include "tiny_gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static const char *write_tmp(const buf_t *b, const char *tag)
{
    static char path[8][256];
    static int  slot;
    char       *p = path[slot++ % 8];
    FILE       *f;

    snprintf(p, 256, "/tmp/kvp_test_gguf_%d_%s.gguf", (int)getpid(), tag);
    f = fopen(p, "wb");
    fwrite(b->p, 1, b->n, f);
    fclose(f);
    return p;
}

/* ---- tests ---- */

static void test_dequant_blocks(void)
{
    uint8_t blk[210];
    float   y[256];
    float   want;
    uint8_t v6[256];

    /* Q8_0: d = 0.5, q_j = j - 16 */
    uint16_t d = kvp_f32_to_f16(0.5f), m = kvp_f32_to_f16(-1.0f);

    memcpy(blk, &d, 2);
    for (int j = 0; j < 32; j++) {
        blk[2 + j] = (uint8_t)(int8_t)(j - 16);
    }
    EXPECT(kvp_ggml_dequant(KVP_GGML_Q8_0, blk, y, 32) == KVP_OK, "q8_0");
    for (int j = 0; j < 32; j++) {
        EXPECT(y[j] == 0.5f * (float)(j - 16), "q8_0 elem %d %g", j, y[j]);
    }
    /* Q4_0 / Q4_1: element j < 16 is the low nibble of byte j, element j + 16 the high nibble;
     * choose q_j = j % 16 (low) and 15 - j % 16 (high) */
    for (int type = 0; type < 2; type++) {
        int off = type == 0 ? 2 : 4;

        memcpy(blk, &d, 2);
        memcpy(blk + 2, &m, 2);
        for (int j = 0; j < 16; j++) {
            blk[off + j] = (uint8_t)((j & 15) | ((15 - j) << 4));
        }
        EXPECT(kvp_ggml_dequant(type == 0 ? KVP_GGML_Q4_0 : KVP_GGML_Q4_1, blk, y, 32) == KVP_OK,
              "q4");
        for (int j = 0; j < 32; j++) {
            int q = j < 16 ? j : 15 - (j - 16);

            want = type == 0 ? 0.5f * (float)(q - 8) : 0.5f * (float)q - 1.0f;
            EXPECT(y[j] == want, "q4_%d elem %d: %g want %g", type, j, y[j], want);
        }
    }
    /* Q6_K: 256 6-bit values v_j, scales s_k (one per 16 values), d; pack them as the format
     * defines (two halves of 128: ql low nibbles for j%128 < 64 at ql[j%64], high nibbles for
     * >= 64; the top 2 bits in qh[j%32] at shift 2*((j%128)/32)). */
    memset(blk, 0, sizeof(blk));
    for (int j = 0; j < 256; j++) {
        int h = j / 128, r = j % 128, l = r % 32, quarter = r / 32;
        int qlidx = h * 64 + (quarter & 1) * 32 + l;

        v6[j] = (uint8_t)((j * 37 + 11) % 64);
        if (quarter < 2) {
            blk[qlidx] |= v6[j] & 0xF;
        } else {
            blk[qlidx] |= (uint8_t)((v6[j] & 0xF) << 4);
        }
        blk[128 + h * 32 + l] |= (uint8_t)((v6[j] >> 4) << (2 * quarter));
    }
    for (int k = 0; k < 16; k++) {
        blk[192 + k] = (uint8_t)(int8_t)(k - 5);
    }
    d = kvp_f32_to_f16(0.25f);
    memcpy(blk + 208, &d, 2);
    EXPECT(kvp_ggml_dequant(KVP_GGML_Q6_K, blk, y, 256) == KVP_OK, "q6_k");
    for (int j = 0; j < 256; j++) {
        want = 0.25f * (float)((j / 16) - 5) * (float)((int)v6[j] - 32);
        EXPECT(y[j] == want, "q6_k elem %d: %g want %g", j, y[j], want);
    }
    /* unsupported type and a partial block */
    EXPECT(kvp_ggml_dequant(12 /* q4_k */, blk, y, 256) == KVP_ERR_UNSUPPORTED, "q4_k");
    EXPECT(kvp_ggml_dequant(KVP_GGML_Q8_0, blk, y, 31) == KVP_ERR_INVALID, "partial block");
}

/* The matmul reading Q4_0/Q4_1/Q8_0 rows directly gives bit-identical results to the fp32 copy
 * made by kvp_ggml_dequant (random codes, random finite fp16 scales and mins of both signs). */
static void test_mm_quant(void)
{
    const uint32_t types[3] = {KVP_GGML_Q4_0, KVP_GGML_Q4_1, KVP_GGML_Q8_0};
    const uint32_t bsize[3] = {18, 20, 34};
    uint32_t       rows = 300, n = 96, nb = 3, seed = 777;

    for (int t = 0; t < 3; t++) {
        size_t     rb = n / 32 * bsize[t];
        uint8_t   *q  = malloc(rows * rb);
        float     *w  = malloc((size_t)rows * n * sizeof(float));
        float     *z  = calloc((size_t)rows * n, sizeof(float));
        float     *x  = malloc((size_t)nb * n * sizeof(float));
        float     *y1 = malloc((size_t)nb * rows * sizeof(float));
        float     *y2 = malloc((size_t)nb * rows * sizeof(float));
        kvp_qmat_t qm = {q, types[t], rb};

        for (size_t i = 0; i < rows * rb; i++) {
            seed = seed * 1103515245u + 12345u;
            q[i] = (uint8_t)(seed >> 16);
        }
        for (size_t blk = 0; blk < rows * n / 32; blk++) {
            for (int h = 0; h < (types[t] == KVP_GGML_Q4_1 ? 2 : 1); h++) {
                uint16_t f;

                seed = seed * 1103515245u + 12345u;
                f    = kvp_f32_to_f16(((float)((seed >> 16) % 2001) - 1000.0f) / 3000.0f);
                memcpy(q + blk * bsize[t] + 2 * h, &f, 2);
            }
        }
        for (size_t i = 0; i < (size_t)nb * n; i++) {
            seed = seed * 1103515245u + 12345u;
            x[i] = ((float)((seed >> 16) % 2001) - 1000.0f) / 700.0f;
        }
        EXPECT(kvp_ggml_dequant(types[t], q, w, (uint64_t)rows * n) == KVP_OK, "dequant");
        kvp_mm(y1, x, w, rows, n, nb);
        kvp_mm_set_quant(1);
        /* the fp32 argument is all zeros: only the quantized rows can give y1 */
        kvp_mm_q(y2, x, strcmp(kvp_mm_impl(), "avx2") == 0 ? z : w, &qm, rows, n, nb);
        EXPECT(memcmp(y1, y2, (size_t)nb * rows * sizeof(float)) == 0,
              "%s rows read directly differ from the fp32 copy", kvp_ggml_type_name(types[t]));
        kvp_mm_set_quant(0);
        kvp_mm_q(y2, x, w, &qm, rows, n, nb);
        EXPECT(memcmp(y1, y2, (size_t)nb * rows * sizeof(float)) == 0, "KVP_MM_QUANT=0 path");
        /* a lane's sums do not depend on how many lanes share the call (lanes go in pairs);
         * n - 4 leaves a vector tail and a scalar tail */
        kvp_mm(y1, x, w, rows, n - 4, nb);
        for (uint32_t b = 0; b < nb; b++) {
            kvp_mm(y2 + (size_t)b * rows, x + (size_t)b * (n - 4), w, rows, n - 4, 1);
        }
        EXPECT(memcmp(y1, y2, (size_t)nb * rows * sizeof(float)) == 0, "lanes one at a time");
        kvp_mm_set_quant(1);
        free(q);
        free(w);
        free(z);
        free(x);
        free(y1);
        free(y2);
    }
}

static void test_tiny_model(void)
{
    buf_t        b = {0};
    kvp_model_t *m = NULL;
    kvp_status_t st;
    uint32_t    *ids;
    size_t       n;
    const char  *path;

    tiny_gguf(&b, 0, 32);
    path = write_tmp(&b, "ok");
    st   = kvp_model_load(path, NULL, &m);
    EXPECT(st == KVP_OK, "tiny model load: %s", kvp_status_str(st));
    if (st == KVP_OK) {
        const char *text = "abc abc<|im_start|>lo lo\xFF";
        kvp_codec_id_t codec = KVP_KVC_FP32;
        kvp_run_t     *run;
        uint32_t       out[4];
        const uint32_t want[] = {257, 258, 259, 260, 261};

        EXPECT(m->cfg.dim == 32 && m->cfg.heads == 2 && m->cfg.kv_heads == 1 &&
              m->cfg.head_dim == 16 && m->cfg.vocab == TV && m->cls == m->tok_emb,
              "tiny config");
        /* the q8_0 attn_q: row r, element j of block blk: 0.01 * (((blk*7 + j*5) % 41) - 20) */
        EXPECT(fabsf(m->layer[0].wq[0] - kvp_f16_to_f32(kvp_f32_to_f16(0.01f)) * -20.0f) < 1e-6f,
              "wq[0] = %g", m->layer[0].wq[0]);
        st = kvp_tok_encode(m->tok, text, strlen(text), 0, &ids, &n);
        EXPECT(st == KVP_OK && n == 6, "bpe encode: %zu tokens", n);
        for (size_t i = 0; st == KVP_OK && i < 5 && i < n; i++) {
            EXPECT(ids[i] == want[i], "bpe token %zu is %u, want %u", i, ids[i], want[i]);
        }
        if (st == KVP_OK && n == 6) {
            size_t      len;
            const char *s = kvp_tok_decode(m->tok, 0, ids[5], &len);

            /* invalid UTF-8 byte 0xFF: its own pre-token, the byte-level token of 0xFF */
            EXPECT(len == 1 && (uint8_t)s[0] == 0xFF, "byte 0xff decodes to itself");
            kvp_free(ids);
        }
        st = kvp_run_create(m, &codec, 1, 1, 16, 0, &run);
        EXPECT(st == KVP_OK, "run create");
        if (st == KVP_OK) {
            uint32_t prompt[2] = {257, 258};

            st = kvp_run_generate(run, prompt, 2, 4, out);
            EXPECT(st == KVP_OK, "tiny generate: %s", kvp_status_str(st));
            for (uint32_t i = 0; i < 4 && st == KVP_OK; i++) {
                EXPECT(out[i] < TV, "generated id %u", out[i]);
            }
            kvp_run_destroy(run);
        }
        kvp_model_free(m);
    }
    unlink(path);
    free(b.p);
}

/* kvp_run_text_tokens reads a prefix of the file: its ids must be the first ids of the whole
 * text's tokenization for every n. The text averages > 8 bytes per token (specials of 12 bytes),
 * so the first read (8n + 256 bytes) ends inside the first n tokens: a special cut by the buffer
 * end used to be kept as its byte tokens. */
static void test_text_tokens(void)
{
    buf_t        b = {0};
    kvp_model_t *m = NULL;
    const char  *path;
    char        *text;
    size_t       len = 0, nfull = 0;
    uint32_t    *full = NULL, rng = 12345, bad = 0;
    FILE        *f;

    /* the cut rule itself: after a char that is not whitespace, before ASCII whitespace */
    EXPECT(kvp_tok_prefix_cut("abc def", 7) == 3, "cut 'abc def'");
    EXPECT(kvp_tok_prefix_cut("abc  \n", 6) == 3, "cut at the start of a whitespace run");
    EXPECT(kvp_tok_prefix_cut(" abc", 4) == 0 && kvp_tok_prefix_cut("abc", 3) == 0,
           "no word end before whitespace");
    EXPECT(kvp_tok_prefix_cut("a\xC3\xA9 x", 5) == 3, "after a 2-byte letter");
    EXPECT(kvp_tok_prefix_cut("ab\xC2\xA0 c", 6) == 0, "not after a no-break space");

    tiny_gguf(&b, 0, 32);
    path = write_tmp(&b, "tt");
    CHECK(kvp_model_load(path, NULL, &m) == KVP_OK);
    unlink(path);
    text = malloc(1 << 16);
    CHECK(text != NULL);
    while (len < 20000) {
        static const char *sep[] = {" ", " abc", "\n", " lo lo "};
        uint32_t           k     = 3 + (rng >> 7) % 4;

        for (uint32_t i = 0; i < k; i++) {
            memcpy(text + len, "<|im_start|>", 12);
            len += 12;
        }
        memcpy(text + len, sep[(rng >> 3) % 4], strlen(sep[(rng >> 3) % 4]));
        len += strlen(sep[(rng >> 3) % 4]);
        rng = rng * 1103515245u + 12345u;
    }
    f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(text, 1, len, f) == len && fclose(f) == 0);
    CHECK(kvp_tok_encode(m->tok, text, len, kvp_tok_add_bos(m->tok), &full, &nfull) == KVP_OK);
    EXPECT((double)len / (double)nfull > 8.0, "%.2f bytes per token", (double)len / nfull);
    for (uint32_t n = 2; n < 600 && n <= nfull; n++) {
        uint32_t *ids = NULL, k = 0;

        CHECK(kvp_run_text_tokens(m, path, 0, n, &ids, &k) == KVP_OK);
        if (k != n || memcmp(ids, full, (size_t)n * sizeof(*ids)) != 0) {
            if (bad++ < 3) {
                fprintf(stderr, "--tokens %u: %u ids, not the first %u of the whole text\n", n,
                        k, n);
            }
        }
        kvp_free(ids);
    }
    EXPECT(bad == 0, "%u of 598 --tokens values are not a prefix of the whole text", bad);
    {
        uint32_t *ids = NULL, k = 0;

        /* past the end: the whole text, fewer than asked */
        CHECK(kvp_run_text_tokens(m, path, 0, (uint32_t)nfull + 50, &ids, &k) == KVP_OK);
        EXPECT(k == nfull && memcmp(ids, full, nfull * sizeof(*ids)) == 0, "whole text: %u", k);
        kvp_free(ids);
    }
    unlink(path);
    kvp_free(full);
    free(text);
    kvp_model_free(m);
    free(b.p);
}

static void expect_fail(const buf_t *b, const char *tag, kvp_status_t want)
{
    kvp_model_t *m    = NULL;
    const char  *path = write_tmp(b, tag);
    kvp_status_t st   = kvp_model_load(path, NULL, &m);

    EXPECT(st == want, "%s: got %s, want %s", tag, kvp_status_name(st), kvp_status_name(want));
    kvp_model_free(m);
    unlink(path);
}

/* Offset of the first s in the image at or after from (the test fails when there is none). */
static size_t find_at(const buf_t *b, const char *s, size_t from)
{
    size_t n = strlen(s);

    for (size_t at = from; at + n <= b->n; at++) {
        if (memcmp(b->p + at, s, n) == 0) {
            return at;
        }
    }
    CHECK(!"pattern in the image");
    return 0;
}

/* Files that parse but are not what they say: loaded, they used to run another model, exit 0
 * (review findings): an optional key of a wrong type (the default was used), a NaN weight
 * (ppl nan), a tensor name twice (the second ignored), two tensors on the same bytes, a
 * misaligned tensor, a metadata key twice (the first won). Each is INVALID at load now. And
 * models this runner would compute wrongly: another pre-tokenizer, RoPE frequency factors
 * (UNSUPPORTED). */
static void test_not_what_they_say(const buf_t *good)
{
    buf_t    b  = {malloc(good->n), good->n, good->n};
    uint32_t u4 = 4, f6 = 6; /* gguf types u32 and f32 */
    /* a tensor's info: name (u64 length + bytes), n_dims u32, 2 x u64 ne, type u32, offset u64 */
    size_t   k_name = find_at(good, "blk.0.attn_k.weight", 0);
    size_t   v_name = find_at(good, "blk.0.attn_v.weight", 0);
    size_t   k_off = k_name + 19 + 4 + 16 + 4, v_off = v_name + 19 + 4 + 16 + 4;

    memcpy(b.p, good->p, good->n); /* rope theta as u32 (its type follows the key) */
    memcpy(b.p + find_at(good, "llama.rope.freq_base", 0) + 20, &u4, 4);
    expect_fail(&b, "opt_type_f", KVP_ERR_INVALID);
    memcpy(b.p, good->p, good->n); /* context length as f32 */
    memcpy(b.p + find_at(good, "llama.context_length", 0) + 20, &f6, 4);
    expect_fail(&b, "opt_type_u", KVP_ERR_INVALID);

    memcpy(b.p, good->p, good->n); /* a NaN in blk.0.attn_k.weight (f16) */
    {
        uint8_t    *img = kvp_malloc(good->n, "t");
        kvp_gguf_t *g   = NULL;
        uint16_t    nan16 = 0x7E00;

        memcpy(img, good->p, good->n);
        CHECK_OK(kvp_gguf_parse(img, good->n, &g));
        memcpy(b.p + (kvp_gguf_find(g, "blk.0.attn_k.weight")->data - img) + 10, &nan16, 2);
        kvp_gguf_close(g);
    }
    expect_fail(&b, "nan_weight", KVP_ERR_INVALID);

    memcpy(b.p, good->p, good->n); /* attn_v renamed attn_k: one name twice */
    memcpy(b.p + v_name, "blk.0.attn_k.weight", 19);
    expect_fail(&b, "name_twice", KVP_ERR_INVALID);
    memcpy(b.p, good->p, good->n); /* attn_v on attn_k's bytes */
    memcpy(b.p + v_off, good->p + k_off, 8);
    expect_fail(&b, "overlap", KVP_ERR_INVALID);
    memcpy(b.p, good->p, good->n); /* attn_v one byte off its alignment */
    b.p[v_off] += 1;
    expect_fail(&b, "misaligned", KVP_ERR_INVALID);
    memcpy(b.p, good->p, good->n); /* tokenizer.ggml.model renamed llama.context_length */
    memcpy(b.p + find_at(good, "tokenizer.ggml.model", 0), "llama.context_length", 20);
    expect_fail(&b, "key_twice", KVP_ERR_INVALID);

    /* what the runner does not compute, refused (they loaded and ran with SmolLM's rules) */
    memcpy(b.p, good->p, good->n); /* another pre-tokenizer */
    memcpy(b.p + find_at(good, "smollm", 0), "falcon", 6);
    expect_fail(&b, "pre_falcon", KVP_ERR_UNSUPPORTED);
    memcpy(b.p, good->p, good->n); /* Llama 3.1's RoPE frequency factors */
    memcpy(b.p + find_at(good, "token_embd.weight", 0), "rope_freqs.weight", 17);
    expect_fail(&b, "rope_freqs", KVP_ERR_UNSUPPORTED);
    free(b.p);
}

/* What llama.cpp's llama arch computes and this runner did not, yet loaded and ran as if absent
 * (review finding: same ppl with a 100.0 attn_q bias, exit 0): a tensor it does not read, linear
 * RoPE scaling, experts, a value length other than dim / heads. Each is UNSUPPORTED; a
 * scale_linear of 1 (no scaling) still loads. */
static void test_llama_features_refused(void)
{
    static const struct {
        uint32_t    extra;
        const char *tag;
    } cases[] = {
        {TINY_EXTRA_Q_BIAS, "q_bias"},
        {TINY_EXTRA_ROPE_LIN, "rope_scale_linear"},
        {TINY_EXTRA_EXPERTS, "expert_count"},
        {TINY_EXTRA_VALUE_LEN, "value_length"},
    };
    kvp_model_t *m = NULL;
    buf_t        b = {0};
    const char  *path;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        b.n = 0;
        tiny_gguf_ex(&b, 0, 32, cases[i].extra);
        expect_fail(&b, cases[i].tag, KVP_ERR_UNSUPPORTED);
    }
    b.n = 0;
    tiny_gguf_ex(&b, 0, 32, TINY_EXTRA_ROPE_LIN1);
    path = write_tmp(&b, "rope_scale_1");
    CHECK_OK(kvp_model_load(path, NULL, &m));
    kvp_model_free(m);
    unlink(path);
    free(b.p);
}

static void test_malformed(void)
{
    buf_t    good = {0}, b;
    uint64_t huge = (uint64_t)1 << 40;
    int      crashes_would_abort = 0;

    tiny_gguf(&good, 0, 32);
    b = (buf_t){malloc(good.n), good.n, good.n};

    memcpy(b.p, good.p, good.n);
    memcpy(b.p, "GGUX", 4);
    expect_fail(&b, "magic", KVP_ERR_INVALID);

    memcpy(b.p, good.p, good.n);
    b.p[4] = 9;
    expect_fail(&b, "version", KVP_ERR_UNSUPPORTED);

    /* first key's string length points past the end */
    memcpy(b.p, good.p, good.n);
    memcpy(b.p + 24, &huge, 8);
    expect_fail(&b, "string", KVP_ERR_INVALID);

    /* tensor count larger than the file */
    memcpy(b.p, good.p, good.n);
    memcpy(b.p + 8, &huge, 8);
    expect_fail(&b, "count", KVP_ERR_INVALID);

    /* truncated tensor data: the last tensor's data is past the end */
    memcpy(b.p, good.p, good.n);
    b.n = good.n - 64;
    expect_fail(&b, "data_eof", KVP_ERR_INVALID);
    b.n = good.n;

    /* an unsupported tensor type (q4_k = 12) -> unsupported, a shape mismatch -> invalid */
    {
        buf_t t = {0};

        tiny_gguf(&t, 12, 32);
        expect_fail(&t, "type", KVP_ERR_UNSUPPORTED);
        free(t.p);
        t = (buf_t){0};
        tiny_gguf(&t, 0, 33);
        expect_fail(&t, "shape", KVP_ERR_INVALID);
        free(t.p);
    }
    /* hyper-parameters that make every logit NaN are refused at load (they used to load and
     * give ppl nan with exit 0): rope theta <= 0 or NaN, rms epsilon < 0 or NaN */
    {
        static const struct {
            const char *key;
            float       v;
        } bad[] = {
            {"llama.rope.freq_base", 0.0f},
            {"llama.rope.freq_base", -5.0f},
            {"llama.rope.freq_base", NAN},
            {"llama.rope.freq_base", INFINITY},
            {"llama.attention.layer_norm_rms_epsilon", -1.0f},
            {"llama.attention.layer_norm_rms_epsilon", NAN},
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            size_t klen = strlen(bad[i].key), at = 0;
            char   tag[64];

            while (at + klen <= good.n && memcmp(good.p + at, bad[i].key, klen) != 0) {
                at++;
            }
            CHECK(at + klen + 8 <= good.n);
            memcpy(b.p, good.p, good.n);
            /* the value follows the key and its 4-byte type (6 = f32) */
            memcpy(b.p + at + klen + 4, &bad[i].v, 4);
            snprintf(tag, sizeof(tag), "hparam%zu", i);
            expect_fail(&b, tag, KVP_ERR_INVALID);
        }
    }
    test_not_what_they_say(&good);
    test_llama_features_refused();
    /* every truncation of the header and tables fails cleanly through the parser */
    kvp_log_level_current = -1; /* thousands of expected error lines: silence them */
    for (size_t cut = 0; cut < good.n; cut += (cut < 8192 ? 1 : 97)) {
        uint8_t    *img = kvp_malloc(cut + 1, "t");
        kvp_gguf_t *g   = NULL;
        kvp_status_t st;

        memcpy(img, good.p, cut);
        st = kvp_gguf_parse(img, cut, &g);
        if (st == KVP_OK) {
            /* a cut inside tensor data beyond the last tensor can still parse; nothing else */
            EXPECT(cut >= good.n - 32, "truncated at %zu parsed", cut);
            kvp_gguf_close(g);
        }
        crashes_would_abort++;
    }
    kvp_log_level_current = KVP_LOG_LVL_ERROR;
    EXPECT(crashes_would_abort > 100, "truncation loop ran");
    free(b.p);
    free(good.p);
}

int main(void)
{
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    test_dequant_blocks();
    test_mm_quant();
    test_tiny_model();
    test_text_tokens();
    test_malformed();
    return kvp_test_result("test_gguf");
}
