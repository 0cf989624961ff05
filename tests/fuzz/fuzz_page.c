/* fuzz_page.c - pages (kernels/page.c and every codec's decode) on arbitrary bytes. The input is
 * taken as a page whose payload_len is set to what follows the 64-byte header and whose CRC is
 * then made valid, so the mutations reach the header checks and the decoders instead of all
 * stopping at the CRC. Properties: never a crash; a page that parses decodes in both frames or
 * is refused with a status (never touching memory past its geometry: the outputs are sized
 * exactly by ASan-visible heap buffers), what it decodes to in fp32 is finite (a forged oscar
 * norm of 1e34 once decoded to Inf and NaN), and its token norms are finite. */
#include "fuzz.h"
#include "sealed_page.h"
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/codec.h"

#include <math.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvp_page_info_t info;
    uint8_t        *page;
    float          *k, *v, *norms;
    size_t          n;

    page = fuzz_page_sealed(data, size, &info);
    if (page == NULL) {
        return 0;
    }
    n     = (size_t)info.valid * info.heads * info.head_dim;
    k     = kvp_malloc(n * sizeof(float), "fuzz k");
    v     = kvp_malloc(n * sizeof(float), "fuzz v");
    norms = kvp_malloc(info.valid * sizeof(float), "fuzz norms");
    if (k != NULL && v != NULL && norms != NULL) {
        if (kvp_page_decode(page, size, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, k, v, NULL) == KVP_OK) {
            for (size_t i = 0; i < n; i++) {
                if (!isfinite(k[i]) || !isfinite(v[i])) {
                    FUZZ_FAIL("value %zu of a %s page decodes to K %g V %g", i,
                              kvp_codec_name((kvp_codec_id_t)info.codec), (double)k[i],
                              (double)v[i]);
                }
            }
        }
        (void)kvp_page_decode(page, size, KVP_DTYPE_F16, KVP_FRAME_ROTATED, k, v, NULL);
        if (kvp_page_token_norms(page, size, norms) == KVP_OK) {
            for (uint32_t t = 0; t < info.valid; t++) {
                if (!isfinite(norms[t])) {
                    FUZZ_FAIL("token %u of a %s page has norm %g", t,
                              kvp_codec_name((kvp_codec_id_t)info.codec), (double)norms[t]);
                }
            }
        }
    }
    kvp_free(norms);
    kvp_free(v);
    kvp_free(k);
    kvp_free(page);
    return 0;
}
