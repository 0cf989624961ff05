/* session.c - the session record: deep copy, and its self-checking serialized form.
 *   offset   size          field
 *      0       4           magic "KVSS" = 0x5353564B
 *      4       2           version 1
 *      6       2           reserved 0
 *      8       4           layers
 *     12       4           page_tokens
 *     16       4           n_chunks
 *     20       4           tail_tokens
 *     24       4           n_tail (0 or layers)
 *     28       4           reserved 0
 *     32       8           tail_len
 *     40    16*n_chunks    chunk keys (lo, hi)
 *      .     tail_len      tail pages back to back
 *      .       4           CRC32C of all bytes before it */
#include "kvpack/bytes.h"
#include "kvpack/page.h"
#include "kvpack/alloc.h"

#include <string.h>

#define SESSION_MAGIC 0x5353564Bu
#define SESSION_HDR   40u


kvp_status_t kvp_session_desc_copy(const kvp_session_desc_t *src, kvp_session_desc_t *dst)
{
    kvp_session_desc_t d = *src;

    d.chunk_keys = NULL;
    d.tail       = NULL;
    if (src->n_chunks > 0) {
        d.chunk_keys = kvp_malloc(src->n_chunks * sizeof(kvp_key128_t), "session keys");
        if (d.chunk_keys == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(d.chunk_keys, src->chunk_keys, src->n_chunks * sizeof(kvp_key128_t));
    }
    if (src->tail_len > 0) {
        d.tail = kvp_malloc(src->tail_len, "session tail");
        if (d.tail == NULL) {
            kvp_free(d.chunk_keys);
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(d.tail, src->tail, src->tail_len);
    }
    *dst = d;
    return KVP_OK;
}

void kvp_session_desc_clear(kvp_session_desc_t *desc)
{
    if (desc != NULL) {
        kvp_free(desc->chunk_keys);
        kvp_free(desc->tail);
        memset(desc, 0, sizeof(*desc));
    }
}

kvp_status_t kvp_session_desc_pack(const kvp_session_desc_t *desc, uint8_t **blob_p, size_t *len_p)
{
    size_t   len = SESSION_HDR + (size_t)16 * desc->n_chunks + desc->tail_len + 4;
    uint8_t *b   = kvp_calloc(1, len, "session blob");
    uint8_t *p;

    if (b == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    kvp_st32(b, SESSION_MAGIC);
    b[4] = 1;
    kvp_st32(b + 8, desc->layers);
    kvp_st32(b + 12, desc->page_tokens);
    kvp_st32(b + 16, desc->n_chunks);
    kvp_st32(b + 20, desc->tail_tokens);
    kvp_st32(b + 24, desc->n_tail);
    kvp_st64(b + 32, desc->tail_len);
    p = b + SESSION_HDR;
    for (uint32_t i = 0; i < desc->n_chunks; i++, p += 16) {
        kvp_st64(p, desc->chunk_keys[i].lo);
        kvp_st64(p + 8, desc->chunk_keys[i].hi);
    }
    if (desc->tail_len > 0) {
        memcpy(p, desc->tail, desc->tail_len);
        p += desc->tail_len;
    }
    kvp_st32(p, kvp_crc32c(0, b, len - 4));
    *blob_p = b;
    *len_p  = len;
    return KVP_OK;
}

kvp_status_t kvp_session_desc_unpack(const uint8_t *blob, size_t len, kvp_session_desc_t *desc)
{
    kvp_session_desc_t d;
    const uint8_t     *p;
    uint64_t           need;

    memset(&d, 0, sizeof(d));
    if (blob == NULL || len < SESSION_HDR + 4 || kvp_ld32(blob) != SESSION_MAGIC ||
        kvp_ld16(blob + 4) != 1 || kvp_ld16(blob + 6) != 0 || kvp_ld32(blob + 28) != 0) {
        return KVP_ERR_BAD_PAGE; /* not version 1, or a reserved field set */
    }
    d.layers      = kvp_ld32(blob + 8);
    d.page_tokens = kvp_ld32(blob + 12);
    d.n_chunks    = kvp_ld32(blob + 16);
    d.tail_tokens = kvp_ld32(blob + 20);
    d.n_tail      = kvp_ld32(blob + 24);
    d.tail_len    = (size_t)kvp_ld64(blob + 32);
    /* tail_len is checked against len before it is added: a sum taken first could wrap to len
     * (a tail of 2^64 - 12 with one key in 48 bytes), and the keys and tail would be read far
     * past the blob */
    need = kvp_ld64(blob + 32) <= len
               ? (uint64_t)SESSION_HDR + 16ull * d.n_chunks + kvp_ld64(blob + 32) + 4
               : 0;
    if (need != len || d.layers == 0 || d.layers > KVP_LAYERS_MAX || d.page_tokens == 0 ||
        d.page_tokens > KVP_PAGE_MAX_TOKENS || d.tail_tokens >= d.page_tokens ||
        (d.n_tail != 0 && d.n_tail != d.layers) || ((d.n_tail == 0) != (d.tail_len == 0)) ||
        ((d.n_tail == 0) != (d.tail_tokens == 0))) {
        return KVP_ERR_BAD_PAGE;
    }
    if (kvp_crc32c(0, blob, len - 4) != kvp_ld32(blob + len - 4)) {
        return KVP_ERR_CORRUPT;
    }
    p = blob + SESSION_HDR;
    if (d.n_chunks > 0) {
        d.chunk_keys = kvp_malloc(d.n_chunks * sizeof(kvp_key128_t), "session keys");
        if (d.chunk_keys == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        for (uint32_t i = 0; i < d.n_chunks; i++, p += 16) {
            d.chunk_keys[i].lo = kvp_ld64(p);
            d.chunk_keys[i].hi = kvp_ld64(p + 8);
        }
    }
    if (d.tail_len > 0) {
        d.tail = kvp_malloc(d.tail_len, "session tail");
        if (d.tail == NULL) {
            kvp_free(d.chunk_keys);
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(d.tail, p, d.tail_len);
    }
    *desc = d;
    return KVP_OK;
}
