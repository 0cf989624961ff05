/* tokenizer.h - the two tokenizers the model runner needs: llama2.c's score-greedy merges
 * (tok512.bin: a sentencepiece-style vocabulary with byte fallback <0xNN>) and GPT-2 byte-level
 * BPE with ranked merges (GGUF tokenizer.ggml.model = "gpt2", as in SmolLM2). One handle type;
 * encode gives token ids, decode gives the bytes of one token for printing. */
#ifndef KVPACK_MODEL_TOKENIZER_H
#define KVPACK_MODEL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#include "gguf.h"

typedef enum {
    KVP_TOK_SP  = 1, /* llama2.c: best-score pair merges, dummy-prefix space, byte fallback */
    KVP_TOK_BPE = 2  /* GPT-2 byte-level BPE: regex pre-split, ranked merges */
} kvp_tok_kind_t;

typedef struct kvp_tok kvp_tok_t;

/* llama2.c tokenizer.bin: int32 max_token_length, then vocab_size x {f32 score, i32 len, bytes}. */
kvp_status_t kvp_tok_load_llama2c(const char *path, uint32_t vocab_size, kvp_tok_t **tok_p);
/* From GGUF metadata (tokenizer.ggml.*); only model "gpt2" (byte-level BPE) is supported. */
kvp_status_t kvp_tok_load_gguf(const kvp_gguf_t *g, kvp_tok_t **tok_p);
void         kvp_tok_free(kvp_tok_t *tok); /* NULL is a no-op */

kvp_tok_kind_t kvp_tok_kind(const kvp_tok_t *tok);
uint32_t       kvp_tok_vocab(const kvp_tok_t *tok);
uint32_t       kvp_tok_bos(const kvp_tok_t *tok);
uint32_t       kvp_tok_eos(const kvp_tok_t *tok);
int            kvp_tok_add_bos(const kvp_tok_t *tok); /* whether texts start with BOS */

/* Encode len bytes of UTF-8 text; BOS first when add_bos. *ids_p is kvp_malloc'ed (caller frees
 * with kvp_free). Special tokens written literally (e.g. "<|im_start|>") are recognised for BPE. */
kvp_status_t kvp_tok_encode(const kvp_tok_t *tok, const char *text, size_t len, int add_bos,
                            uint32_t **ids_p, size_t *n_p);

/* Where to cut a text read in part so that its tokens are the first tokens of the whole text:
 * the last point in text[0..len) where a char that is not whitespace is followed by an ASCII
 * whitespace byte (0 when there is none). Neither tokenizer joins a piece across that point: the
 * BPE pre-split ends every word before whitespace and a whitespace run that starts there belongs
 * to what follows, and llama2.c pieces carry whitespace only in front (no merge makes "x " or
 * "x\n"), so the merges left of it never see what lies beyond. */
size_t kvp_tok_prefix_cut(const char *text, size_t len);

/* Bytes token id prints as, given the previous token (llama2.c drops the leading space of the
 * first piece after BOS). Borrowed; *len_p bytes, not NUL-terminated. Unknown id: "" (len 0). */
const char *kvp_tok_decode(const kvp_tok_t *tok, uint32_t prev, uint32_t id, size_t *len_p);

/* ---- internal, shared by tokenizer.c and tok_bpe.c ---- */
typedef struct {
    uint32_t *slot; /* id + 1, 0 = empty */
    uint32_t  mask;
} kvp_tok_map_t;

struct kvp_tok {
    kvp_tok_kind_t kind;
    uint32_t       n;        /* vocabulary size */
    char         **piece;    /* vocabulary strings as stored (NUL-terminated) */
    uint32_t      *piece_len;
    float         *score;    /* SP: merge scores */
    char         **out;      /* bytes each token prints as */
    uint32_t      *out_len;
    kvp_tok_map_t  map;      /* piece -> id */
    uint32_t       bos, eos;
    int            add_bos;  /* prepend BOS to a text (llama2.c: yes; GGUF: add_bos_token) */
    /* BPE only */
    uint64_t      *pair_key; /* (left id << 32 | right id) + 1, open addressing; 0 = empty */
    uint32_t      *pair_rank;
    uint32_t      *pair_out; /* merged id */
    uint32_t       pair_mask;
    uint32_t       byte_id[256]; /* id of each byte's single-char token */
    uint32_t      *special;      /* control / user-defined token ids, matched literally */
    uint32_t       n_special;
};

kvp_status_t kvp_tok_alloc(kvp_tok_t *tok, uint32_t n);
kvp_status_t kvp_tok_map_build(kvp_tok_t *tok);
int          kvp_tok_map_get(const kvp_tok_t *tok, const char *s, size_t len, uint32_t *id_p);
kvp_status_t kvp_tok_bpe_init(kvp_tok_t *tok, const kvp_gguf_t *g);

/* tok_merge.c: merge adjacent pairs, highest priority first and the leftmost on ties, until no
 * pair merges. pair() says whether ids a, b merge, into which id and at what priority. */
typedef int (*kvp_tok_pair_fn)(const void *ctx, uint32_t a, uint32_t b, double *prio,
                               uint32_t *merged);
typedef struct {
    uint32_t *next, *prev, *ver;
    void     *heap;
    size_t    cap; /* most symbols one merge takes */
} kvp_tok_merger_t;
/* Scratch for runs of up to max_symbols (< 2^32 - 1, else KVP_ERR_TOO_LARGE). */
kvp_status_t kvp_tok_merger_init(kvp_tok_merger_t *m, size_t max_symbols);
void         kvp_tok_merger_free(kvp_tok_merger_t *m);
/* Merges ids[0..n) in place (n <= the init's max_symbols); returns the new count. */
size_t kvp_tok_merge(kvp_tok_merger_t *m, uint32_t *ids, size_t n, kvp_tok_pair_fn pair,
                     const void *ctx);
kvp_status_t kvp_tok_bpe_encode(const kvp_tok_t *tok, const char *text, size_t len,
                                uint32_t *ids, size_t *n_p);

#endif
