/* tok_ids.h - the property both tokenizer harnesses (fuzz_tok.c: llama2.c files; fuzz_gguf.c:
 * the BPE tokenizer a GGUF describes) check of what an encode returned: every id inside the
 * vocabulary, and each decoding to the bytes it claims, all of them readable (ASan). */
#ifndef KVPACK_FUZZ_TOK_IDS_H
#define KVPACK_FUZZ_TOK_IDS_H

#include "fuzz.h"
#include "tokenizer.h" /* client/model */

static volatile unsigned fuzz_tok_sink; /* the decoded bytes are summed here: read, not dropped */

static inline void fuzz_tok_ids_check(const kvp_tok_t *tok, const uint32_t *ids, size_t n,
                                      const char *what)
{
    for (size_t i = 0; i < n; i++) {
        size_t      len;
        const char *s;

        if (ids[i] >= kvp_tok_vocab(tok)) {
            FUZZ_FAIL("%s: id %u at %zu is outside the vocabulary of %u", what, ids[i], i,
                      kvp_tok_vocab(tok));
        }
        s = kvp_tok_decode(tok, i ? ids[i - 1] : 0, ids[i], &len);
        if (s == NULL) {
            FUZZ_FAIL("%s: id %u decodes to NULL", what, ids[i]);
        }
        for (size_t b = 0; b < len; b++) {
            fuzz_tok_sink += (uint8_t)s[b];
        }
    }
}

#endif
