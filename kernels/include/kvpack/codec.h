/* codec.h - encode K/V into kvpack pages and decode them back.
 *
 * Input and output tensors are [tokens][heads][head_dim], fp32 or fp16 (IEEE half bits).
 * A page holds up to P = page_tokens tokens; fewer is a partial page. The codec is chosen per
 * namespace; each codec has a portable C reference and SIMD/CUDA twins selected once at start-up
 * (KVPACK_CODEC_IMPL=ref forces the reference). Payload sections of each codec are documented in
 * the codec's own source file and in the README ("Page format").
 *
 * Main flow: kvp_page_encode -> codec ops table -> kvp_page_hdr_write + kvp_page_seal;
 *            kvp_page_decode -> kvp_page_parse (CRC first) -> codec decode. */
#ifndef KVPACK_CODEC_H
#define KVPACK_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/page.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KVP_DTYPE_F32 = 0,
    KVP_DTYPE_F16 = 1
} kvp_dtype_t;

typedef enum {
    KVP_FRAME_ORIGINAL = 0, /* undo rotation and norm scaling: K/V as they were given */
    KVP_FRAME_ROTATED  = 1  /* leave K/V in the stored (Hadamard, norm-scaled) frame */
} kvp_frame_t;

typedef struct {
    kvp_codec_id_t codec;
    uint32_t       heads;       /* H */
    uint32_t       head_dim;    /* D; power of two for rotating codecs */
    uint32_t       page_tokens; /* P, capacity */
    uint32_t       layer;
    uint64_t       first_pos;
    kvp_key128_t   chunk_key;
    uint32_t       flags;       /* KVP_PAGE_F_V_PREROT and/or KVP_PAGE_F_TAIL; others are set by the codec */
    uint32_t       kvarn_iters; /* 0 = default (8) */
} kvp_page_params_t;

/* Codec names: "fp16", "kivi", "kivi128", "oscar", "kvarn", "naive2". */
const char  *kvp_codec_name(kvp_codec_id_t codec);
kvp_status_t kvp_codec_from_name(const char *name, kvp_codec_id_t *codec_p);

/* Check a geometry against a codec (power-of-two D for rotating codecs, D % group, limits). */
kvp_status_t kvp_codec_check(const kvp_page_params_t *params);

/* Bytes of a full page (header + payload) for these params. 0 if unsupported. */
size_t kvp_page_max_bytes(const kvp_page_params_t *params);

/* Encode ntok (1..P) tokens of K and V into out. NaN/Inf input -> KVP_ERR_BAD_INPUT_DATA.
 * out needs kvp_page_max_bytes(params) bytes; *len_p gets the page length. */
kvp_status_t kvp_page_encode(const kvp_page_params_t *params, kvp_dtype_t dtype, const void *k,
                             const void *v, uint32_t ntok, void *out, size_t out_cap,
                             size_t *len_p);

/* Verify (kvp_page_parse) and decode a page into k_out/v_out ([valid][H][D] of dtype).
 * Either output may be NULL to skip it. info_p (may be NULL) receives the header. */
kvp_status_t kvp_page_decode(const void *page, size_t len, kvp_dtype_t dtype, kvp_frame_t frame,
                             void *k_out, void *v_out, kvp_page_info_t *info_p);

/* Name of the implementation in use for a codec ("ref", "avx2", ...). */
const char *kvp_codec_impl_name(kvp_codec_id_t codec);

/* fp16 conversion helpers (round to nearest even, IEEE binary16). */
uint16_t kvp_f32_to_f16(float f);
float    kvp_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
