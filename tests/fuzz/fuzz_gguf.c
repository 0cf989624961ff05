/* fuzz_gguf.c - the GGUF reader (client/model/gguf.c) on arbitrary bytes: kvpack model opens
 * files it is pointed at. Properties: never a crash or a leak; a file that parses has tensors
 * whose data lies inside the image (those of a type it cannot read have none), and each small one
 * dequantizes or is refused with a status. */
#include "fuzz.h"
#include "gguf.h"
#include "kvpack/alloc.h"

#include <stddef.h>
#include <string.h>

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
    kvp_gguf_close(g);
    return 0;
}
