/* fuzz_tok.c - the llama2.c tokenizer reader and its encoder (client/model/tokenizer.c) on
 * arbitrary bytes: `kvpack model --tokenizer FILE` loads the file it is pointed at, sized by the
 * checkpoint's vocabulary, then encodes the user's prompt. Input: u16 vocabulary size (1 + v %
 * 1024), u8 text length, the text, then the tokenizer file. Properties: never a crash, a leak or
 * an out-of-bounds read (a vocabulary too small for llama2.c's byte fallback used to hand out ids
 * past it); a tokenizer that loads encodes any text into ids inside its vocabulary, BOS first,
 * every id decodes to bytes of its stated length, and the ids are llama2.c's: those of its plain
 * loop (sp_ref.h: scan for the best pair, leftmost on ties, memmove), which the heap of
 * tok_merge.c must reproduce, ties and unmergeable scores included. */
#define _GNU_SOURCE /* fuzz_as_file */
#include "tok_ids.h"
#include "sp_ref.h" /* tests/model */

#include "kvpack/alloc.h"

#include <string.h>

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
        uint32_t want[257];
        size_t   nw = sp_ref_encode(tok, text, tlen, want);

        fuzz_tok_ids_check(tok, ids, n, "prompt");
        if (nw != n - 1 || memcmp(want, ids + 1, nw * sizeof(*want)) != 0) {
            FUZZ_FAIL("%zu ids where llama2.c's loop gives %zu (or they differ)", n - 1, nw);
        }
        kvp_free(ids);
    }
    kvp_tok_free(tok);
    return 0;
}
