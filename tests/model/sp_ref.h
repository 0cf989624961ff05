/* sp_ref.h - llama2.c's encoder written out as llama2.c has it, for the tests to hold the
 * tokenizer's (client/model/tokenizer.c + tok_merge.c) against: dummy prefix " ", one id per
 * UTF-8 code point (bytes + 3 as fallback), then scan every adjacent pair for the best score
 * (leftmost on ties; a score at or below -1e10, or NaN, never merges: llama2.c's best_score),
 * merge, memmove, repeat.
 * Pieces are looked up by a linear search for the first id with those bytes, independent of the
 * tokenizer's hash map. O(n^2 + n * vocab): for short texts (test_tok_merge, fuzz_tok). */
#ifndef KVPACK_TEST_SP_REF_H
#define KVPACK_TEST_SP_REF_H

#include "tokenizer.h" /* client/model: the vocabulary's pieces and scores */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int sp_ref_lookup(const kvp_tok_t *tok, const char *s, size_t len, uint32_t *id_p)
{
    for (uint32_t i = 0; i < tok->n; i++) {
        if (tok->piece_len[i] == len && memcmp(tok->piece[i], s, len) == 0) {
            *id_p = i;
            return 1;
        }
    }
    return 0;
}

/* score of the piece ids a, b make together, -1e30 when there is none; buf: 2 * 4096 bytes */
static inline float sp_ref_pair(const kvp_tok_t *tok, uint32_t a, uint32_t b, char *buf,
                                uint32_t *merged_p)
{
    memcpy(buf, tok->piece[a], tok->piece_len[a]);
    memcpy(buf + tok->piece_len[a], tok->piece[b], tok->piece_len[b]);
    return sp_ref_lookup(tok, buf, tok->piece_len[a] + tok->piece_len[b], merged_p)
               ? tok->score[*merged_p]
               : -1e30f;
}

/* The ids of text without BOS into ids (len + 1 slots); returns their count, or 0 with ids
 * untouched when out of memory (only for len > 0). */
static inline size_t sp_ref_encode(const kvp_tok_t *tok, const char *text, size_t len,
                                   uint32_t *ids)
{
    float    *sc  = malloc((len + 1) * sizeof(*sc));
    uint32_t *mg  = malloc((len + 1) * sizeof(*mg)), id;
    char     *buf = malloc(2 * 4096); /* pieces are at most 4096 bytes (the loader's bound) */
    size_t    n   = 0;

    if (sc == NULL || mg == NULL || buf == NULL) {
        free(sc);
        free(mg);
        free(buf);
        return 0;
    }
    if (len > 0 && sp_ref_lookup(tok, " ", 1, &id)) {
        ids[n++] = id;
    }
    for (size_t i = 0, cl; i < len; i += cl) {
        cl = 1;
        if (((uint8_t)text[i] & 0xC0) == 0xC0) {
            while (i + cl < len && cl < 4 && ((uint8_t)text[i + cl] & 0xC0) == 0x80) {
                cl++;
            }
        }
        if (sp_ref_lookup(tok, text + i, cl, &id)) {
            ids[n++] = id;
        } else {
            for (size_t b = 0; b < cl; b++) {
                ids[n++] = (uint8_t)text[i + b] + 3u;
            }
        }
    }
    for (size_t i = 0; i + 1 < n; i++) {
        sc[i] = sp_ref_pair(tok, ids[i], ids[i + 1], buf, &mg[i]);
    }
    for (;;) {
        size_t best = SIZE_MAX;
        float  bs   = -1e10f; /* llama2.c: float best_score = -1e10 */

        for (size_t i = 0; i + 1 < n; i++) {
            if (sc[i] > bs) {
                bs   = sc[i];
                best = i;
            }
        }
        if (best == SIZE_MAX) {
            break;
        }
        ids[best] = mg[best];
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(*ids));
        memmove(sc + best + 1, sc + best + 2, (n - best - 2) * sizeof(*sc));
        memmove(mg + best + 1, mg + best + 2, (n - best - 2) * sizeof(*mg));
        n--;
        if (best > 0) {
            sc[best - 1] = sp_ref_pair(tok, ids[best - 1], ids[best], buf, &mg[best - 1]);
        }
        if (best + 1 < n) {
            sc[best] = sp_ref_pair(tok, ids[best], ids[best + 1], buf, &mg[best]);
        }
    }
    free(sc);
    free(mg);
    free(buf);
    return n;
}

#endif
