/* fuzz_record.c - the session record (kvp_session_desc_unpack, kernels/session.c) on arbitrary
 * bytes, with the CRC32C trailer made valid first (a client computes it for whatever it sends).
 * Properties: never a crash; a record that unpacks packs back to a blob that unpacks to the same
 * counts, keys and tail. */
#include "fuzz.h"
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/page.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvp_session_desc_t d, again;
    uint8_t           *blob, *packed;
    size_t             len;

    if (size < 4 || size > (1u << 20)) {
        return 0;
    }
    blob = kvp_malloc(size, "fuzz record");
    if (blob == NULL) {
        return 0;
    }
    memcpy(blob, data, size);
    kvp_st32(blob + size - 4, kvp_crc32c(0, blob, size - 4));
    if (kvp_session_desc_unpack(blob, size, &d) == KVP_OK) {
        if (kvp_session_desc_pack(&d, &packed, &len) != KVP_OK) {
            FUZZ_FAIL("an unpacked record does not pack");
        }
        if (kvp_session_desc_unpack(packed, len, &again) != KVP_OK) {
            FUZZ_FAIL("a repacked record does not unpack");
        }
        if (again.layers != d.layers || again.page_tokens != d.page_tokens ||
            again.n_chunks != d.n_chunks || again.tail_tokens != d.tail_tokens ||
            again.n_tail != d.n_tail || again.tail_len != d.tail_len ||
            (d.n_chunks && memcmp(again.chunk_keys, d.chunk_keys, 16ull * d.n_chunks) != 0) ||
            (d.tail_len && memcmp(again.tail, d.tail, d.tail_len) != 0)) {
            FUZZ_FAIL("a record changed in a pack and unpack round trip");
        }
        kvp_session_desc_clear(&again);
        kvp_free(packed);
        kvp_session_desc_clear(&d);
    }
    kvp_free(blob);
    return 0;
}
