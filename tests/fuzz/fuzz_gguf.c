/* fuzz_gguf.c - the GGUF reader (client/model/gguf.c) on arbitrary bytes: kvpack model opens
 * files it is pointed at. Properties: never a crash or a leak; a file that parses has tensors
 * whose data lies inside the image (those of a type it cannot read have none), and each small one
 * dequantizes or is refused with a status; a tokenizer it describes encodes any text into ids
 * inside its vocabulary. */
#include "fuzz.h"
#include "gguf.h"
#include "tok_ids.h"
#include "kvpack/alloc.h"

#include <stddef.h>
#include <string.h>

/* The byte-level BPE tokenizer the file describes, if it loads: fixed prompts and the input's
 * last 64 bytes (tensor data, so mutations there vary the text) encode into ids inside the
 * vocabulary, each decoding to bytes that can be read. */
static void tok_check(const kvp_gguf_t *g, const uint8_t *data, size_t size)
{
    static const char *texts[] = {"<|im_start|>user\nHello 2024, it's   a\t\n  test<|im_end|>",
                                  "\xff\xfe\xc3 \xe2\x80\x83x\xf0\x9f\x98\x80'll", ""};
    kvp_tok_t         *tok;

    if (kvp_tok_load_gguf(g, &tok) != KVP_OK) {
        return;
    }
    for (int t = 0; t < 4; t++) {
        const char *text = t < 3 ? texts[t] : (const char *)data + (size > 64 ? size - 64 : 0);
        size_t      len  = t < 3 ? strlen(text) : (size > 64 ? 64 : size), n;
        uint32_t   *ids;

        if (kvp_tok_encode(tok, text, len, 1, &ids, &n) != KVP_OK) {
            continue;
        }
        fuzz_tok_ids_check(tok, ids, n, t < 3 ? "fixed prompt" : "file bytes");
        kvp_free(ids);
    }
    kvp_tok_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t    *img = kvp_malloc(size ? size : 1, "fuzz gguf");
    kvp_gguf_t *g;

    if (img == NULL) {
        return 0;
    }
    memcpy(img, data, size);
    if (kvp_gguf_parse(img, size, &g) != KVP_OK) { /* img is the parser's now, freed on error */
        return 0;
    }
    for (size_t i = 0; i < kvp_gguf_n_tensors(g); i++) {
        const kvp_gguf_tensor_t *t = kvp_gguf_tensor(g, i);
        uint32_t                 u;
        float                   *out;

        if (kvp_gguf_find(g, t->name) == NULL) {
            FUZZ_FAIL("tensor %zu (%s) not found by its name", i, t->name);
        }
        if (t->data != NULL && /* NULL: a type the reader lists but cannot read */
            (t->data < img || t->nbytes > size ||
             t->data - img > (ptrdiff_t)(size - t->nbytes))) {
            FUZZ_FAIL("tensor %zu (%s): %llu bytes not inside the %zu-byte image", i, t->name,
                      (unsigned long long)t->nbytes, size);
        }
        if (t->nelems == 0 || t->nelems > (1u << 16)) {
            continue;
        }
        out = kvp_malloc(t->nelems * sizeof(float), "fuzz tensor");
        if (out != NULL) {
            (void)kvp_gguf_tensor_f32(t, out, t->nelems);
        }
        kvp_free(out);
        (void)kvp_gguf_get_u32(g, t->name, &u);
    }
    {
        const char    *s;
        size_t         n;
        uint32_t       type;
        uint64_t       count;
        const uint8_t *arr;

        (void)kvp_gguf_get_str(g, "general.architecture", &s, &n);
        if (kvp_gguf_get_arr(g, "tokenizer.ggml.tokens", &type, &count, &arr) == KVP_OK &&
            type == 8) { /* GGUF string array */
            for (uint64_t i = 0; i < count && i < 1000; i++) {
                (void)kvp_gguf_str_next(&arr, &n);
            }
        }
    }
    tok_check(g, data, size);
    kvp_gguf_close(g);
    return 0;
}
