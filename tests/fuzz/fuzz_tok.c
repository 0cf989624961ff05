/* fuzz_tok.c - the llama2.c tokenizer reader and its encoder (client/model/tokenizer.c) on
 * arbitrary bytes: `kvpack model --tokenizer FILE` loads the file it is pointed at, sized by the
 * checkpoint's vocabulary, then encodes the user's prompt. Input: u16 vocabulary size (1 + v %
 * 1024), u8 text length, the text, then the tokenizer file. Properties: never a crash, a leak or
 * an out-of-bounds read (a vocabulary too small for llama2.c's byte fallback used to hand out ids
 * past it); a tokenizer that loads encodes any text into ids inside its vocabulary, BOS first,
 * every id decodes to bytes of its stated length, and the ids are llama2.c's: those of its plain
 * loop (ref_encode below: scan for the best pair, leftmost on ties, memmove), which the heap of
 * tok_merge.c must reproduce, ties and unmergeable scores included. */
#define _GNU_SOURCE /* fuzz_as_file */
#include "tok_ids.h"

#include "kvpack/alloc.h"

#include <string.h>

/* first id whose piece is s[0..len), as the tokenizer's map keeps the first of duplicates */
static int ref_lookup(const kvp_tok_t *tok, const char *s, size_t len, uint32_t *id_p)
{
    for (uint32_t i = 0; i < tok->n; i++) {
        if (tok->piece_len[i] == len && memcmp(tok->piece[i], s, len) == 0) {
            *id_p = i;
            return 1;
        }
    }
    return 0;
}

static float ref_pair(const kvp_tok_t *tok, uint32_t a, uint32_t b, uint32_t *merged_p)
{
    char buf[2 * 4096]; /* pieces are at most 4096 bytes (the loader's bound) */

    memcpy(buf, tok->piece[a], tok->piece_len[a]);
    memcpy(buf + tok->piece_len[a], tok->piece[b], tok->piece_len[b]);
    return ref_lookup(tok, buf, tok->piece_len[a] + tok->piece_len[b], merged_p)
               ? tok->score[*merged_p]
               : -1e30f;
}

/* llama2.c's encode without BOS: dummy prefix, code points or byte fallback, then the scan */
static size_t ref_encode(const kvp_tok_t *tok, const char *text, size_t len, uint32_t *ids)
{
    float    sc[260];
    uint32_t mg[260], id;
    size_t   n = 0;

    if (len > 0 && ref_lookup(tok, " ", 1, &id)) {
        ids[n++] = id;
    }
    for (size_t i = 0, cl; i < len; i += cl) {
        cl = 1;
        if (((uint8_t)text[i] & 0xC0) == 0xC0) {
            while (i + cl < len && cl < 4 && ((uint8_t)text[i + cl] & 0xC0) == 0x80) {
                cl++;
            }
        }
        if (ref_lookup(tok, text + i, cl, &id)) {
            ids[n++] = id;
        } else {
            for (size_t b = 0; b < cl; b++) {
                ids[n++] = (uint8_t)text[i + b] + 3u;
            }
        }
    }
    for (size_t i = 0; i + 1 < n; i++) {
        sc[i] = ref_pair(tok, ids[i], ids[i + 1], &mg[i]);
    }
    for (;;) {
        size_t best = SIZE_MAX;
        float  bs   = -1e29f;

        for (size_t i = 0; i + 1 < n; i++) {
            if (sc[i] > bs) {
                bs   = sc[i];
                best = i;
            }
        }
        if (best == SIZE_MAX) {
            return n;
        }
        ids[best] = mg[best];
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(*ids));
        memmove(sc + best + 1, sc + best + 2, (n - best - 2) * sizeof(*sc));
        memmove(mg + best + 1, mg + best + 2, (n - best - 2) * sizeof(*mg));
        n--;
        if (best > 0) {
            sc[best - 1] = ref_pair(tok, ids[best - 1], ids[best], &mg[best - 1]);
        }
        if (best + 1 < n) {
            sc[best] = ref_pair(tok, ids[best], ids[best + 1], &mg[best]);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvp_tok_t  *tok;
    uint32_t    vocab, *ids = NULL;
    size_t      tlen, n = 0;
    const char *text;

    if (size < 3 || (size_t)data[2] > size - 3) {
        return 0;
    }
    vocab = 1 + (uint32_t)((data[0] | data[1] << 8) % 1024);
    tlen  = data[2];
    text  = (const char *)data + 3;
    if (kvp_tok_load_llama2c(fuzz_as_file(data + 3 + tlen, size - 3 - tlen), vocab, &tok) !=
        KVP_OK) {
        return 0;
    }
    if (kvp_tok_vocab(tok) != vocab) {
        FUZZ_FAIL("loaded %u tokens for a vocabulary of %u", kvp_tok_vocab(tok), vocab);
    }
    if (kvp_tok_encode(tok, text, tlen, 1, &ids, &n) == KVP_OK) {
        if (n == 0 || ids[0] != kvp_tok_bos(tok) || n > tlen + 2) {
            FUZZ_FAIL("%zu ids for %zu bytes (BOS %u, first %u)", n, tlen, kvp_tok_bos(tok),
                      n ? ids[0] : 0);
        }
        uint32_t want[260];
        size_t   nw = ref_encode(tok, text, tlen, want);

        fuzz_tok_ids_check(tok, ids, n, "prompt");
        if (nw != n - 1 || memcmp(want, ids + 1, nw * sizeof(*want)) != 0) {
            FUZZ_FAIL("%zu ids where llama2.c's loop gives %zu (or they differ)", n - 1, nw);
        }
        kvp_free(ids);
    }
    kvp_tok_free(tok);
    return 0;
}
