/* sealed_page.h - the page harnesses' (fuzz_page.c, fuzz_attn.c) way of turning fuzz input into
 * a page that gets past the CRC. */
#ifndef KVPACK_FUZZ_SEALED_PAGE_H
#define KVPACK_FUZZ_SEALED_PAGE_H

#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/page.h"

#include <string.h>

/* The input as a page (a private heap copy, kvp_free it) with payload_len set to what follows
 * the header and the CRC made valid, so mutations reach the header checks and the decoders
 * instead of stopping at the CRC; NULL when it is too short or long, or kvp_page_parse refuses
 * it (*info then untouched). */
static inline uint8_t *fuzz_page_sealed(const uint8_t *data, size_t size, kvp_page_info_t *info)
{
    uint8_t *page;

    if (size < KVP_PAGE_HDR_BYTES || size > KVP_PAGE_HDR_BYTES + (4u << 20) ||
        (page = kvp_malloc(size, "fuzz page")) == NULL) {
        return NULL;
    }
    memcpy(page, data, size);
    kvp_st32(page + 48, (uint32_t)(size - KVP_PAGE_HDR_BYTES));
    kvp_page_seal(page);
    if (kvp_page_parse(page, size, info) != KVP_OK) {
        kvp_free(page);
        return NULL;
    }
    return page;
}

#endif
