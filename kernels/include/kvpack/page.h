/* page.h - kvpack page format v1: the contract between every module.
 *
 * A page is one chunk (up to P tokens) x one layer x all H KV heads, K and V, encoded by one codec.
 * It is self-describing and little-endian: a fixed 64-byte header, then the codec's payload.
 * The CRC32C covers the header (with the crc field read as zero) and the whole payload; it is
 * verified by kvp_page_parse before any other use, so a corrupt page is an error, never a decode.
 *
 * Header layout (all integers little-endian):
 *   offset size field
 *      0     4  magic        "KVPG" = 0x4750564B
 *      4     2  version      1
 *      6     1  codec        kvp_codec_id_t
 *      7     1  flags        KVP_PAGE_F_* (K rotated, V rotated, partial, tail, V pre-rotated,
 *                              sink)
 *      8     1  bits_k       bits per K code (2 for the 2-bit codecs, 16 for fp16)
 *      9     1  bits_v       bits per V code
 *     10     2  group_k      K group length in tokens (per-channel groups)
 *     12     2  group_v      V group length in channels (per-token groups)
 *     14     2  valid        valid tokens, 1..capacity
 *     16     2  capacity     page tokens P
 *     18     2  heads        KV heads H (of this shard)
 *     20     2  head_dim     D
 *     22     2  layer        layer index
 *     24     8  first_pos    position of the first token in the sequence
 *     32    16  chunk_key    128-bit chunk key (low 64 bits first)
 *     48     4  payload_len  bytes after the header; must equal the codec's size for this geometry
 *     52     4  aux          codec parameter (kvarn: VarN iterations; others 0)
 *     56     4  crc32c       CRC32C (Castagnoli) of bytes [0, 64 + payload_len) with this field as 0
 *     60     4  reserved     0
 *     64     .  payload      codec sections, see codec.h
 */
#ifndef KVPACK_PAGE_H
#define KVPACK_PAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_PAGE_MAGIC       0x4750564Bu
#define KVP_PAGE_VERSION     1u
#define KVP_PAGE_HDR_BYTES   64u
#define KVP_PAGE_MAX_TOKENS  4096u
#define KVP_PAGE_MAX_HEADS   256u
#define KVP_PAGE_MAX_DIM     1024u
#define KVP_PAGE_MAX_PAYLOAD (256u << 20)

enum kvp_page_flags {
    KVP_PAGE_F_K_ROTATED = KVP_BIT(0), /* K stored in the Hadamard frame */
    KVP_PAGE_F_V_ROTATED = KVP_BIT(1), /* V stored in the Hadamard frame */
    KVP_PAGE_F_PARTIAL   = KVP_BIT(2), /* valid < capacity */
    KVP_PAGE_F_TAIL      = KVP_BIT(3), /* an fp16 session tail, not a sealed page */
    KVP_PAGE_F_V_PREROT  = KVP_BIT(4), /* engine folded the V Hadamard into W_v/W_o: codec skips it */
    KVP_PAGE_F_SINK      = KVP_BIT(5), /* a full fp16 page of a session's first chunks, kept
                                        * unquantized (attention sink) in a codec namespace */
};
#define KVP_PAGE_F_ALL 0x3Fu

typedef enum {
    KVP_CODEC_FP16    = 1,
    KVP_CODEC_KIVI    = 2, /* KIVI, groups of 32 */
    KVP_CODEC_KIVI128 = 3, /* KIVI, groups of 128 */
    KVP_CODEC_OSCAR   = 4,
    KVP_CODEC_KVARN   = 5,
    KVP_CODEC_NAIVE2  = 6, /* naive per-token 2-bit (group = head_dim), a comparison baseline */
    KVP_CODEC_MAX     = 7
} kvp_codec_id_t;

typedef struct {
    uint64_t lo;
    uint64_t hi;
} kvp_key128_t;

/* Parsed, validated header. */
typedef struct {
    uint32_t     version;
    uint32_t     codec;
    uint32_t     flags;
    uint32_t     bits_k, bits_v;
    uint32_t     group_k, group_v;
    uint32_t     valid;
    uint32_t     capacity;
    uint32_t     heads;
    uint32_t     head_dim;
    uint32_t     layer;
    uint64_t     first_pos;
    kvp_key128_t chunk_key;
    uint32_t     payload_len;
    uint32_t     aux;
    uint32_t     crc;
} kvp_page_info_t;

/* CRC32C (Castagnoli, reflected, init and final xor 0xFFFFFFFF); crc32c("123456789") = 0xE3069283.
 * Continue a running CRC by passing the previous result as crc (0 to start). */
uint32_t kvp_crc32c(uint32_t crc, const void *buf, size_t len);

/* Write a header into out[0..64) from info (crc and magic fields of info are ignored). */
void kvp_page_hdr_write(const kvp_page_info_t *info, void *out);
/* Compute and store the CRC of a complete page (header + payload already written). */
void kvp_page_seal(void *page);

/* Validate a page of len bytes: every header field, the payload length against the codec's size
 * for that geometry (kvp_codec_payload_bytes), the CRC, then what the codec wrote
 * (kvp_codec_page_check: bits, groups, rotation flags and aux as that codec sets them, its
 * stored scales, zeros and norms usable), so a page whose CRC was made to match is refused
 * before anything sizes a loop by its fields. Reads the payload for the CRC and the codec's
 * parameters (an fp16 page's values are checked by kvp_page_decode as it converts them).
 * Returns KVP_ERR_BAD_PAGE for inconsistent or truncated input, KVP_ERR_CORRUPT for a CRC mismatch.
 * info_p may be NULL. */
kvp_status_t kvp_page_parse(const void *page, size_t len, kvp_page_info_t *info_p);
/* The length of the page starting at p (header + payload_len), read from its header without
 * checking it, when that fits the rem bytes available; 0 when it does not (or rem is shorter than
 * a header). For walking pages stored back to back (a session's fp16 tail); kvp_page_parse then
 * checks each. */
size_t kvp_page_len_at(const void *p, size_t rem);

/* Payload bytes a codec needs for this geometry (valid tokens included, capacity P). 0 when the
 * geometry is not supported by the codec. Implemented by the codec layer (codec.c). */
size_t kvp_codec_payload_bytes(kvp_codec_id_t codec, uint32_t heads, uint32_t head_dim,
                               uint32_t capacity, uint32_t valid);
/* A parsed header's codec-owned fields (bits, groups, rotation flags, aux) are the ones its codec
 * writes for that geometry, and the payload's stored parameters are usable (finite fp16 scales
 * and zeros; oscar norms finite and > 0): KVP_OK, else KVP_ERR_BAD_PAGE. kvp_page_parse calls it
 * once the CRC matches. Implemented by the codec layer (codec.c). */
kvp_status_t kvp_codec_page_check(const kvp_page_info_t *info, const uint8_t *payload);

/* Chunk keys: key[i] = XXH3-128(key[i-1] || ns_fingerprint || token ids of chunk i), each field
 * little-endian (key: low 64 bits first; ids as u32), for a chunk of up to 512 tokens. A longer
 * chunk is hashed in slices of 512 ids, each slice's hash taking key[i-1]'s place for the next:
 * h = XXH3-128(key[i-1] || fp || ids[0, 512)), h = XXH3-128(h || fp || ids[512, 1024)), ...
 * prev may be NULL for the first chunk (16 zero bytes). */
kvp_key128_t kvp_chunk_key(const kvp_key128_t *prev, uint64_t ns_fingerprint,
                           const uint32_t *tokens, size_t ntokens);

/* Page-level fields of a namespace fingerprint: 64-bit hash of (model id, geometry, codec, P). */
uint64_t kvp_ns_fingerprint(const char *model_id, uint32_t layers, uint32_t heads,
                            uint32_t head_dim, uint32_t page_tokens, kvp_codec_id_t codec);

/* ---- session record ----
 * A session (namespace, session id) is an ordered list of chunk keys plus an fp16 tail: one
 * fp16 page with KVP_PAGE_F_TAIL per layer, for the last < P tokens. Every page of the session is
 * stored under (namespace, chunk_keys[i], layer) for layer in [0, layers). */
#define KVP_SID_MAX    128    /* bytes including the terminating NUL */
#define KVP_LAYERS_MAX 65535u /* layers of a session; a page's layer index (16 bits) is below it */

typedef struct {
    uint32_t      layers;
    uint32_t      page_tokens;  /* P */
    uint32_t      n_chunks;
    kvp_key128_t *chunk_keys;   /* n_chunks, in sequence order */
    uint32_t      tail_tokens;  /* 0..P-1 */
    uint32_t      n_tail;       /* number of tail pages: 0 or layers */
    size_t        tail_len;     /* bytes of tail (the n_tail pages back to back) */
    uint8_t      *tail;
} kvp_session_desc_t;

/* Deep copy / free of a descriptor's arrays (the struct itself is caller storage). */
kvp_status_t kvp_session_desc_copy(const kvp_session_desc_t *src, kvp_session_desc_t *dst);
void         kvp_session_desc_clear(kvp_session_desc_t *desc);
/* Serialize to a self-checking blob (little-endian, CRC32C trailer) and back; parse validates
 * every count against the blob length and returns KVP_ERR_CORRUPT on a CRC mismatch. */
kvp_status_t kvp_session_desc_pack(const kvp_session_desc_t *desc, uint8_t **blob_p, size_t *len_p);
kvp_status_t kvp_session_desc_unpack(const uint8_t *blob, size_t len, kvp_session_desc_t *desc);

#ifdef __cplusplus
}
#endif
#endif
