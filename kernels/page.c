/* page.c - page header v1: write, seal (CRC32C) and parse/validate. Chunk keys and namespace
 * fingerprints (XXH3). The codec payloads are the codec layer's business (codec.c); this file
 * only asks it how many payload bytes a geometry needs. */
#include "kvpack/bytes.h"
#include "kvpack/page.h"
#include "kvpack/log.h"

#include <isa-l/crc.h>
#include <string.h>
#include <xxhash.h>

/* ---- little-endian field access ---- */


enum {
    OFF_MAGIC = 0, OFF_VERSION = 4, OFF_CODEC = 6, OFF_FLAGS = 7, OFF_BITS_K = 8, OFF_BITS_V = 9,
    OFF_GROUP_K = 10, OFF_GROUP_V = 12, OFF_VALID = 14, OFF_CAPACITY = 16, OFF_HEADS = 18,
    OFF_HEAD_DIM = 20, OFF_LAYER = 22, OFF_FIRST_POS = 24, OFF_KEY_LO = 32, OFF_KEY_HI = 40,
    OFF_PAYLOAD_LEN = 48, OFF_AUX = 52, OFF_CRC = 56, OFF_RESERVED = 60
};

uint32_t kvp_crc32c(uint32_t crc, const void *buf, size_t len)
{
    /* ISA-L's crc32_iscsi takes and returns the un-inverted register. */
    return ~crc32_iscsi((unsigned char *)buf, (int)len, ~crc);
}

void kvp_page_hdr_write(const kvp_page_info_t *info, void *out)
{
    uint8_t *p = out;

    memset(p, 0, KVP_PAGE_HDR_BYTES);
    kvp_st32(p + OFF_MAGIC, KVP_PAGE_MAGIC);
    kvp_st16(p + OFF_VERSION, KVP_PAGE_VERSION);
    p[OFF_CODEC]  = (uint8_t)info->codec;
    p[OFF_FLAGS]  = (uint8_t)info->flags;
    p[OFF_BITS_K] = (uint8_t)info->bits_k;
    p[OFF_BITS_V] = (uint8_t)info->bits_v;
    kvp_st16(p + OFF_GROUP_K, info->group_k);
    kvp_st16(p + OFF_GROUP_V, info->group_v);
    kvp_st16(p + OFF_VALID, info->valid);
    kvp_st16(p + OFF_CAPACITY, info->capacity);
    kvp_st16(p + OFF_HEADS, info->heads);
    kvp_st16(p + OFF_HEAD_DIM, info->head_dim);
    kvp_st16(p + OFF_LAYER, info->layer);
    kvp_st64(p + OFF_FIRST_POS, info->first_pos);
    kvp_st64(p + OFF_KEY_LO, info->chunk_key.lo);
    kvp_st64(p + OFF_KEY_HI, info->chunk_key.hi);
    kvp_st32(p + OFF_PAYLOAD_LEN, info->payload_len);
    kvp_st32(p + OFF_AUX, info->aux);
}

static uint32_t page_crc(const uint8_t *p, size_t payload_len)
{
    static const uint8_t zero[4];
    uint32_t crc;

    crc = kvp_crc32c(0, p, OFF_CRC);
    crc = kvp_crc32c(crc, zero, 4);
    crc = kvp_crc32c(crc, p + OFF_RESERVED, KVP_PAGE_HDR_BYTES - OFF_RESERVED + payload_len);
    return crc;
}

void kvp_page_seal(void *page)
{
    uint8_t *p = page;

    kvp_st32(p + OFF_CRC, page_crc(p, kvp_ld32(p + OFF_PAYLOAD_LEN)));
}

#define PAGE_BAD(...)                                  \
    do {                                               \
        KVP_LOG_DEBUG("page", __VA_ARGS__);            \
        return KVP_ERR_BAD_PAGE;                       \
    } while (0)

size_t kvp_page_len_at(const void *p, size_t rem)
{
    size_t len;

    if (p == NULL || rem < KVP_PAGE_HDR_BYTES) {
        return 0;
    }
    len = KVP_PAGE_HDR_BYTES + (size_t)kvp_ld32((const uint8_t *)p + OFF_PAYLOAD_LEN);
    return len <= rem ? len : 0;
}

kvp_status_t kvp_page_parse(const void *page, size_t len, kvp_page_info_t *info_p)
{
    const uint8_t  *p = page;
    kvp_page_info_t in;
    size_t          want;

    if (page == NULL || len < KVP_PAGE_HDR_BYTES) {
        PAGE_BAD("page of %zu bytes is shorter than its header", len);
    }
    if (kvp_ld32(p + OFF_MAGIC) != KVP_PAGE_MAGIC) {
        PAGE_BAD("bad magic 0x%08x", kvp_ld32(p + OFF_MAGIC));
    }
    memset(&in, 0, sizeof(in));
    in.version     = kvp_ld16(p + OFF_VERSION);
    in.codec       = p[OFF_CODEC];
    in.flags       = p[OFF_FLAGS];
    in.bits_k      = p[OFF_BITS_K];
    in.bits_v      = p[OFF_BITS_V];
    in.group_k     = kvp_ld16(p + OFF_GROUP_K);
    in.group_v     = kvp_ld16(p + OFF_GROUP_V);
    in.valid       = kvp_ld16(p + OFF_VALID);
    in.capacity    = kvp_ld16(p + OFF_CAPACITY);
    in.heads       = kvp_ld16(p + OFF_HEADS);
    in.head_dim    = kvp_ld16(p + OFF_HEAD_DIM);
    in.layer       = kvp_ld16(p + OFF_LAYER);
    in.first_pos   = kvp_ld64(p + OFF_FIRST_POS);
    in.chunk_key.lo = kvp_ld64(p + OFF_KEY_LO);
    in.chunk_key.hi = kvp_ld64(p + OFF_KEY_HI);
    in.payload_len = kvp_ld32(p + OFF_PAYLOAD_LEN);
    in.aux         = kvp_ld32(p + OFF_AUX);
    in.crc         = kvp_ld32(p + OFF_CRC);

    if (in.version != KVP_PAGE_VERSION) {
        PAGE_BAD("unsupported page version %u", in.version);
    }
    if (in.codec == 0 || in.codec >= KVP_CODEC_MAX) {
        PAGE_BAD("unknown codec %u", in.codec);
    }
    if ((in.flags & ~KVP_PAGE_F_ALL) != 0) {
        PAGE_BAD("unknown flags 0x%x", in.flags);
    }
    if ((in.flags & KVP_PAGE_F_SINK) != 0 &&
        (in.codec != KVP_CODEC_FP16 || (in.flags & (KVP_PAGE_F_TAIL | KVP_PAGE_F_PARTIAL)) != 0)) {
        PAGE_BAD("sink flag on a page that is not a full sealed fp16 page (codec %u flags 0x%x)",
                 in.codec, in.flags);
    }
    if (kvp_ld32(p + OFF_RESERVED) != 0) {
        PAGE_BAD("reserved field is not zero");
    }
    if (in.capacity == 0 || in.capacity > KVP_PAGE_MAX_TOKENS || in.valid == 0 ||
        in.valid > in.capacity) {
        PAGE_BAD("bad token counts valid %u capacity %u", in.valid, in.capacity);
    }
    if (((in.flags & KVP_PAGE_F_PARTIAL) != 0) != (in.valid < in.capacity)) {
        PAGE_BAD("partial flag disagrees with valid %u capacity %u", in.valid, in.capacity);
    }
    if (in.heads == 0 || in.heads > KVP_PAGE_MAX_HEADS || in.head_dim == 0 ||
        in.head_dim > KVP_PAGE_MAX_DIM) {
        PAGE_BAD("bad geometry heads %u head_dim %u", in.heads, in.head_dim);
    }
    if (in.payload_len > KVP_PAGE_MAX_PAYLOAD) {
        PAGE_BAD("payload length %u too large", in.payload_len);
    }
    want = kvp_codec_payload_bytes((kvp_codec_id_t)in.codec, in.heads, in.head_dim, in.capacity,
                                   in.valid);
    if (want == 0 || want != in.payload_len) {
        PAGE_BAD("payload length %u does not match codec %u geometry (want %zu)", in.payload_len,
                 in.codec, want);
    }
    if (len < (size_t)KVP_PAGE_HDR_BYTES + in.payload_len) {
        PAGE_BAD("page truncated: %zu of %zu bytes", len, (size_t)KVP_PAGE_HDR_BYTES + in.payload_len);
    }
    if (len != (size_t)KVP_PAGE_HDR_BYTES + in.payload_len) {
        PAGE_BAD("page has %zu trailing bytes", len - KVP_PAGE_HDR_BYTES - in.payload_len);
    }
    if (page_crc(p, in.payload_len) != in.crc) {
        KVP_LOG_DEBUG("page", "crc mismatch layer %u first_pos %llu", in.layer,
                      (unsigned long long)in.first_pos);
        return KVP_ERR_CORRUPT;
    }
    if (kvp_codec_page_check(&in, p + KVP_PAGE_HDR_BYTES) != KVP_OK) {
        return KVP_ERR_BAD_PAGE; /* logged by the codec layer */
    }
    if (info_p != NULL) {
        *info_p = in;
    }
    return KVP_OK;
}

kvp_key128_t kvp_chunk_key(const kvp_key128_t *prev, uint64_t ns_fingerprint,
                           const uint32_t *tokens, size_t ntokens)
{
    uint8_t       buf[24 + 4 * 512];
    XXH128_hash_t h;
    kvp_key128_t  key;
    size_t        off = 24;

    /* Chain in slices of 512 tokens so the stack buffer stays small: each slice's hash seeds
     * the next, which keeps the key a pure function of (prev, fingerprint, tokens). */
    memset(buf, 0, 24);
    if (prev != NULL) {
        kvp_st64(buf, prev->lo);
        kvp_st64(buf + 8, prev->hi);
    }
    kvp_st64(buf + 16, ns_fingerprint);
    do {
        size_t n = ntokens < 512 ? ntokens : 512;

        for (size_t i = 0; i < n; i++) {
            kvp_st32(buf + off + 4 * i, tokens[i]);
        }
        h = XXH3_128bits(buf, off + 4 * n);
        kvp_st64(buf, h.low64);
        kvp_st64(buf + 8, h.high64);
        tokens += n;
        ntokens -= n;
    } while (ntokens > 0);
    key.lo = h.low64;
    key.hi = h.high64;
    return key;
}

uint64_t kvp_ns_fingerprint(const char *model_id, uint32_t layers, uint32_t heads,
                            uint32_t head_dim, uint32_t page_tokens, kvp_codec_id_t codec)
{
    uint8_t  buf[20];
    uint64_t seed;

    kvp_st32(buf, layers);
    kvp_st32(buf + 4, heads);
    kvp_st32(buf + 8, head_dim);
    kvp_st32(buf + 12, page_tokens);
    kvp_st32(buf + 16, (uint32_t)codec);
    seed = XXH3_64bits(model_id, strlen(model_id));
    return XXH3_64bits_withSeed(buf, sizeof(buf), seed);
}
