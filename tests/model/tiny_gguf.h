/* tiny_gguf.h - a tiny valid GGUF "llama" model written in memory, for the tests that need
 * one without a download: model.gguf (test_gguf.c: loads, runs, and its malformed variants) and
 * the fuzz seed corpus (tests/fuzz/seeds.c). dim 32, 2 heads (head_dim 16), 1 KV head, hidden
 * 32, 1 layer, a 262-token byte-level BPE tokenizer; about 40 KB. Header-only (static). */
#ifndef KVPACK_TEST_TINY_GGUF_H
#define KVPACK_TEST_TINY_GGUF_H

#include "model/gguf.h"
#include "kvpack/codec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- a growable byte buffer to write GGUF files ---- */

typedef struct {
    uint8_t *p;
    size_t   n, cap;
} buf_t;

static inline void put(buf_t *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p   = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static inline void put_u32(buf_t *b, uint32_t v) { put(b, &v, 4); }
static inline void put_u64(buf_t *b, uint64_t v) { put(b, &v, 8); }
static inline void put_f32(buf_t *b, float v) { put(b, &v, 4); }
static inline void put_str(buf_t *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }

static inline void kv_u32(buf_t *b, const char *k, uint32_t v)
{
    put_str(b, k);
    put_u32(b, 4);
    put_u32(b, v);
}
static inline void kv_f32(buf_t *b, const char *k, float v)
{
    put_str(b, k);
    put_u32(b, 6);
    put_f32(b, v);
}
static inline void kv_str(buf_t *b, const char *k, const char *v)
{
    put_str(b, k);
    put_u32(b, 8);
    put_str(b, v);
}

static inline void kv_strs(buf_t *b, const char *k, char **v, uint32_t n)
{
    put_str(b, k);
    put_u32(b, 9);
    put_u32(b, 8);
    put_u64(b, n);
    for (uint32_t i = 0; i < n; i++) {
        put_str(b, v[i]);
    }
}

static inline void kv_i32s(buf_t *b, const char *k, const int32_t *v, uint32_t n)
{
    put_str(b, k);
    put_u32(b, 9);
    put_u32(b, 5);
    put_u64(b, n);
    put(b, v, 4 * (size_t)n);
}

/* ---- tiny model: dim 32, 2 heads (head_dim 16), 1 kv head, hidden 32, 1 layer ---- */

#define TV 262 /* 256 byte tokens + "ab", "abc", "Ġabc", "<|im_start|>", "lo", "Ġlo" */

typedef struct {
    const char *name;
    uint64_t    ne0, ne1;
    uint32_t    type;
} tdesc_t;

static inline size_t utf8_of(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* GPT-2 byte-level alphabet, derived from its definition. */
static inline uint32_t byte_cp(uint32_t b)
{
    uint32_t n = 0;

    for (uint32_t x = 0; x < 256; x++) {
        int keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;

        if (x == b) {
            return keep ? x : 256 + n;
        }
        n += !keep;
    }
    return 0;
}

/* tiny_gguf_ex's extras: what llama.cpp's llama arch would compute and this runner does not */
#define TINY_EXTRA_Q_BIAS     0x1u /* a blk.0.attn_q.bias tensor */
#define TINY_EXTRA_ROPE_LIN   0x2u /* llama.rope.scale_linear = 4 */
#define TINY_EXTRA_EXPERTS    0x4u /* llama.expert_count = 8 */
#define TINY_EXTRA_VALUE_LEN  0x8u /* llama.attention.value_length = 8 (head_dim is 16) */
#define TINY_EXTRA_ROPE_LIN1 0x10u /* llama.rope.scale_linear = 1: no scaling, accepted */

/* Build a tiny GGUF; `bad_type` replaces the type of blk.0.attn_q (0 = keep q8_0); `extra`: the
 * TINY_EXTRA_* added. */
static inline void tiny_gguf_ex(buf_t *b, uint32_t bad_type, uint64_t q_rows, uint32_t extra)
{
    static char    tokbuf[TV][16];
    char          *toks[TV];
    int32_t        types[TV];
    char          *merges[] = {"a b", "ab c", "Ġ abc", "l o", "Ġ lo"};
    const tdesc_t  t[] = {
        {"token_embd.weight", 32, TV, KVP_GGML_F32}, {"output_norm.weight", 32, 1, KVP_GGML_F32},
        {"blk.0.attn_norm.weight", 32, 1, KVP_GGML_F32},
        {"blk.0.ffn_norm.weight", 32, 1, KVP_GGML_F32},
        {"blk.0.attn_q.weight", 32, q_rows, KVP_GGML_Q8_0},
        {"blk.0.attn_k.weight", 32, 16, KVP_GGML_F16}, {"blk.0.attn_v.weight", 32, 16, KVP_GGML_F16},
        {"blk.0.attn_output.weight", 32, 32, KVP_GGML_F32},
        {"blk.0.ffn_gate.weight", 32, 32, KVP_GGML_F32}, {"blk.0.ffn_up.weight", 32, 32, KVP_GGML_F32},
        {"blk.0.ffn_down.weight", 32, 32, KVP_GGML_F32},
        {"blk.0.attn_q.bias", 32, 1, KVP_GGML_F32}, /* last: only with TINY_EXTRA_Q_BIAS */
    };
    size_t nt = sizeof(t) / sizeof(t[0]) - !(extra & TINY_EXTRA_Q_BIAS), off = 0, data_start;
    uint64_t nkv = 15 + !!(extra & TINY_EXTRA_ROPE_LIN) + !!(extra & TINY_EXTRA_EXPERTS) +
                   !!(extra & TINY_EXTRA_VALUE_LEN) + !!(extra & TINY_EXTRA_ROPE_LIN1);
    uint32_t seed = 12345;

    for (uint32_t i = 0; i < 256; i++) {
        size_t l = utf8_of(byte_cp(i), tokbuf[i]);

        tokbuf[i][l] = '\0';
    }
    strcpy(tokbuf[256], "ab");
    strcpy(tokbuf[257], "abc");
    strcpy(tokbuf[258], "\xC4\xA0" "abc"); /* "Ġabc" */
    strcpy(tokbuf[259], "<|im_start|>");
    strcpy(tokbuf[260], "lo");
    strcpy(tokbuf[261], "\xC4\xA0" "lo");
    for (uint32_t i = 0; i < TV; i++) {
        toks[i]  = tokbuf[i];
        types[i] = i == 259 ? 3 : 1;
    }
    put_u32(b, 0x46554747u);
    put_u32(b, 3);
    put_u64(b, nt);
    put_u64(b, nkv);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "llama.embedding_length", 32);
    kv_u32(b, "llama.feed_forward_length", 32);
    kv_u32(b, "llama.block_count", 1);
    kv_u32(b, "llama.attention.head_count", 2);
    kv_u32(b, "llama.attention.head_count_kv", 1);
    kv_u32(b, "llama.context_length", 64);
    kv_f32(b, "llama.rope.freq_base", 10000.0f);
    kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_str(b, "tokenizer.ggml.pre", "smollm");
    kv_strs(b, "tokenizer.ggml.tokens", toks, TV);
    kv_i32s(b, "tokenizer.ggml.token_type", types, TV);
    kv_strs(b, "tokenizer.ggml.merges", merges, 5);
    kv_u32(b, "tokenizer.ggml.bos_token_id", 259);
    if (extra & (TINY_EXTRA_ROPE_LIN | TINY_EXTRA_ROPE_LIN1)) {
        kv_f32(b, "llama.rope.scale_linear", extra & TINY_EXTRA_ROPE_LIN ? 4.0f : 1.0f);
    }
    if (extra & TINY_EXTRA_EXPERTS) {
        kv_u32(b, "llama.expert_count", 8);
    }
    if (extra & TINY_EXTRA_VALUE_LEN) {
        kv_u32(b, "llama.attention.value_length", 8);
    }
    for (size_t i = 0; i < nt; i++) {
        uint32_t type = (i == 4 && bad_type) ? bad_type : t[i].type;
        size_t   bytes = type == KVP_GGML_F32 ? 4 * t[i].ne0 * t[i].ne1
                       : type == KVP_GGML_F16 ? 2 * t[i].ne0 * t[i].ne1
                                              : t[i].ne0 / 32 * 34 * t[i].ne1;

        put_str(b, t[i].name);
        put_u32(b, t[i].ne1 > 1 ? 2 : 1);
        put_u64(b, t[i].ne0);
        if (t[i].ne1 > 1) {
            put_u64(b, t[i].ne1);
        }
        put_u32(b, type);
        put_u64(b, off);
        off += (bytes + 31) / 32 * 32;
    }
    while (b->n % 32) {
        put(b, "", 1);
    }
    data_start = b->n;
    for (size_t i = 0; i < nt; i++) {
        size_t n = t[i].ne0 * t[i].ne1;

        while (b->n < data_start + (b->n - data_start + 31) / 32 * 32) {
            put(b, "", 1);
        }
        if (t[i].type == KVP_GGML_F32) {
            for (size_t j = 0; j < n; j++) {
                seed = seed * 1103515245u + 12345u;
                put_f32(b, strstr(t[i].name, "norm") ? 1.0f
                                                     : ((float)((seed >> 16) % 200) - 100.0f) / 200.0f);
            }
        } else if (t[i].type == KVP_GGML_F16) {
            for (size_t j = 0; j < n; j++) {
                uint16_t h = kvp_f32_to_f16((float)((int)(j % 7) - 3) * 0.125f);

                put(b, &h, 2);
            }
        } else {
            for (size_t blk = 0; blk < n / 32; blk++) {
                uint16_t d = kvp_f32_to_f16(0.01f);

                put(b, &d, 2);
                for (int j = 0; j < 32; j++) {
                    int8_t q = (int8_t)((int)((blk * 7 + (size_t)j * 5) % 41) - 20);

                    put(b, &q, 1);
                }
            }
        }
    }
    while (b->n % 32) {
        put(b, "", 1);
    }
}

static inline void tiny_gguf(buf_t *b, uint32_t bad_type, uint64_t q_rows)
{
    tiny_gguf_ex(b, bad_type, q_rows, 0);
}

#endif
