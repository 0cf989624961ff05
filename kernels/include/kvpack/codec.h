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

/* What decode returns, per codec (Hd = normalized Walsh-Hadamard of one head, its own inverse):
 *   fp16, kivi, kivi128, naive2: both frames are the same (no rotation).
 *   oscar  ORIGINAL: K = Hd(norm_t * Khat''), V = Hd(Vhat) (V as stored when the page has
 *                    KVP_PAGE_F_V_PREROT: it was given rotated, so that is its original frame).
 *          ROTATED:  K = Khat'', the rotated and normalised K (each token on the unit sphere in
 *                    R^(H*D)); the attention kernel rotates q and multiplies score t by norm_t
 *                    (kvp_page_token_norms). V = Vhat, the rotated V (out = Hd(attn . Vhat)).
 *   kvarn  ORIGINAL: K = Hd(Khat), V = Hd(Vhat) (V as stored under KVP_PAGE_F_V_PREROT).
 *          ROTATED:  K = Khat, V = Vhat in the Hadamard frame, VarN scales already applied
 *                    (Khat[t][d] = (q*s_col_K[d] + zp_K[d]) * s_row_K[t]). */
typedef enum {
    KVP_FRAME_ORIGINAL = 0, /* undo rotation and norm scaling: K/V as they were given */
    KVP_FRAME_ROTATED  = 1  /* leave K/V in the stored (Hadamard, norm-scaled) frame, see above */
} kvp_frame_t;

#define KVP_CODEC_KVARN_ITERS     8u  /* default VarN iterations (kvp_page_params_t.kvarn_iters 0) */
#define KVP_CODEC_KVARN_MAX_ITERS 64u

typedef struct {
    kvp_codec_id_t codec;
    uint32_t       heads;       /* H */
    uint32_t       head_dim;    /* D; power of two for rotating codecs */
    uint32_t       page_tokens; /* P, capacity */
    uint32_t       layer;
    uint64_t       first_pos;
    kvp_key128_t   chunk_key;
    uint32_t       flags;       /* KVP_PAGE_F_V_PREROT, KVP_PAGE_F_TAIL, KVP_PAGE_F_SINK (fp16, full page
                                 * only); the rotation and partial flags are set by the codec */
    uint32_t       kvarn_iters; /* 0 = default (8) */
} kvp_page_params_t;

/* Codec names: "fp16", "kivi", "kivi128", "oscar", "kvarn", "naive2". */
const char  *kvp_codec_name(kvp_codec_id_t codec);
kvp_status_t kvp_codec_from_name(const char *name, kvp_codec_id_t *codec_p);

/* KVP_OK when all n values of dtype at x are ones every codec stores (finite; fp32 also |x| <=
 * 65504), else KVP_ERR_BAD_INPUT_DATA: kvp_page_encode's input check, for a caller that must
 * refuse bad input before it does anything (an append seals and stores chunks layer by layer). */
kvp_status_t kvp_values_check(kvp_dtype_t dtype, const void *x, size_t n);

/* Check a geometry against a codec (power-of-two D for rotating codecs, D % group, limits);
 * KVP_ERR_TOO_LARGE when a full page's payload passes KVP_PAGE_MAX_PAYLOAD (256 MiB). */
kvp_status_t kvp_codec_check(const kvp_page_params_t *params);
/* What kvp_codec_check accepts for this codec, in words, for error messages ("head_dim a power
 * of two, at least 8, ..."); never NULL. */
const char  *kvp_codec_geometry_rule(kvp_codec_id_t codec);

/* Bytes of a full page (header + payload) for these params. 0 if unsupported. */
size_t kvp_page_max_bytes(const kvp_page_params_t *params);

/* Encode ntok (1..P) tokens of K and V into out. NaN/Inf input, or |x| > 65504 (not
 * representable in the fp16 scales every codec stores) -> KVP_ERR_BAD_INPUT_DATA; so does, for
 * oscar and kvarn, a Hadamard-rotated value beyond 65504 (the references round the rotated
 * K/V to fp16; only possible when some |x| > 65504/sqrt(D)), and a page whose stored fp16
 * parameters would overflow (oscar's integer V zero point, kvarn's absorbed scales: only for
 * values within a factor ~1.5 of the fp16 limit).
 * Geometry: kivi needs D % 32 == 0 or D < 32 (kivi128: 128); oscar and kvarn need D a power of
 * two >= 8. Partial pages (ntok < P) quantize over the valid tokens only (groups may be short).
 * No allocation per call: conversions use per-thread scratch (grown on first use).
 * out needs kvp_page_max_bytes(params) bytes; *len_p gets the page length. */
kvp_status_t kvp_page_encode(const kvp_page_params_t *params, kvp_dtype_t dtype, const void *k,
                             const void *v, uint32_t ntok, void *out, size_t out_cap,
                             size_t *len_p);

/* Verify (kvp_page_parse) and decode a page into k_out/v_out ([valid][H][D] of dtype).
 * Either output may be NULL to skip it. info_p (may be NULL) receives the header.
 * fp16 output saturates: a value the 2-bit grid puts past +-65504 (input near the fp16 limit:
 * a group's fp16 scale rounds up, or a rotation spreads a spike's error) is written as +-65504,
 * never Inf; the fp32 output keeps it as decoded. */
kvp_status_t kvp_page_decode(const void *page, size_t len, kvp_dtype_t dtype, kvp_frame_t frame,
                             void *k_out, void *v_out, kvp_page_info_t *info_p);

/* 1 when this CPU and its OS run the AVX2 twins (AVX2, FMA and F16C, AVX state saved by the
 * OS): the one CPU test every SIMD path of kvpack uses (codecs, attention, the model runner). */
int kvp_cpu_has_avx2(void);
/* Name of the implementation in use for a codec ("ref", "avx2", ...). */
const char *kvp_codec_impl_name(kvp_codec_id_t codec);
/* Implementations available on this CPU, "ref" first; returns the count (names filled up to max). */
size_t kvp_codec_impls(kvp_codec_id_t codec, const char **names, size_t max);
/* Switch a codec's implementation (tests, benchmarks). Not safe while other threads encode or
 * decode. KVP_ERR_UNSUPPORTED when that implementation is not available here. */
kvp_status_t kvp_codec_set_impl(kvp_codec_id_t codec, const char *impl);

/* Verify a page and write its per-token norms (valid floats): the OScaR K norms, 1.0 for every
 * other codec. Needed to use KVP_FRAME_ROTATED oscar K (scores are multiplied by norm_t). */
kvp_status_t kvp_page_token_norms(const void *page, size_t len, float *norms);

/* fp16 conversion helpers (round to nearest even, IEEE binary16). */
uint16_t kvp_f32_to_f16(float f);
float    kvp_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
