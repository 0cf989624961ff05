/* fuzz_attn.c - attention straight over a page (kvp_attn_compute, kernels/attn.c) on arbitrary
 * bytes: a decode node runs it over pages that came from the store, which checked only what
 * kvp_page_parse checks. The input is one page with its payload_len and CRC made valid (as in
 * fuzz_page.c); a fixed query of g query heads per KV head (GQA, g = 1..4 from the input's size)
 * attends over 1..3 copies of it (a sealed page; one call, as a session's pages are) or over it
 * as the tail.
 * Properties: never a crash and no read or write outside the page and the scratch (ASan): every
 * geometry the attention reads comes from a header kvp_page_parse accepted. */
#include "fuzz.h"
#include "sealed_page.h"
#include "kvpack/alloc.h"
#include "kvpack/attn.h"
#include "kvpack/bytes.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvp_page_info_t   info;
    kvp_attn_params_t p;
    kvp_attn_page_t   pg[3];
    uint8_t          *page;
    float            *q, *out;
    size_t            n;
    uint32_t          g = 1 + (uint32_t)(size % 4), copies = 1 + (uint32_t)(size / 4 % 3);

    page = fuzz_page_sealed(data, size, &info);
    if (page == NULL) {
        return 0;
    }
    n   = (size_t)g * info.heads * info.head_dim;
    q   = kvp_malloc(n * sizeof(float), "fuzz q");
    out = kvp_malloc(n * sizeof(float), "fuzz out");
    if (q != NULL && out != NULL) {
        for (size_t i = 0; i < n; i++) {
            q[i] = (float)((int)(i % 7) - 3) * 0.25f;
        }
        memset(&p, 0, sizeof(p));
        for (uint32_t c = 0; c < copies; c++) {
            pg[c] = (kvp_attn_page_t){page, size};
        }
        if (info.flags & KVP_PAGE_F_TAIL) {
            (void)kvp_attn_compute(&p, NULL, 0, &pg[0], q, g * info.heads, out);
        } else {
            (void)kvp_attn_compute(&p, pg, copies, NULL, q, g * info.heads, out);
        }
    }
    kvp_free(out);
    kvp_free(q);
    kvp_free(page);
    return 0;
}
