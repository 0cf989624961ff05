/* attn.h - decode attention straight over packed pages: one query step of one layer of one
 * session, reading the 2-bit codes, scales and norms where they lie (no dequantized copy).
 * Softmax is online (flash-decoding style) over the pages in order, so each page is read once,
 * right after its CRC check; the portable C reference (attn_ref.c) and an AVX2+FMA twin
 * (attn_avx2.c) are chosen once at start-up (KVPACK_CODEC_IMPL=ref forces the reference); a GPU
 * twin, kvp_cuda_attn_compute, is in attn_cuda.h (built with nvcc).
 * Main flow: kvp_attn_compute -> per page kvp_page_parse -> per KV head: scores, softmax
 * update, V mix (attn.c) -> inverse Hadamard of the rotated-frame sum -> out. */
#ifndef KVPACK_ATTN_H
#define KVPACK_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/page.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kvp_attn_params_field {
    KVP_ATTN_PARAM_SCALE   = KVP_BIT(0), /* never renumber, never reuse */
    KVP_ATTN_PARAM_SCRATCH = KVP_BIT(1),
};

typedef struct {
    uint64_t field_mask;    /* MUST be first; unset fields take their defaults */
    float    scale;         /* softmax scale; default 1/sqrt(D); finite and > 0 */
    void    *scratch;       /* caller scratch, borrowed; default: kvp_malloc'd and freed per call */
    size_t   scratch_bytes; /* >= kvp_attn_scratch_bytes() of the geometry, else KVP_ERR_INVALID */
} kvp_attn_params_t;

/* One page as it came from the store (borrowed; at least 2-byte aligned: fp16 payloads are read
 * in place, as kvp_page_decode does). */
typedef struct {
    const void *data;
    size_t      len;
} kvp_attn_page_t;

/* Scratch bytes a call needs for Hq query heads over pages of H KV heads x D, capacity P
 * (any codec; fp16 pages and the tail of any capacity are read in slices). 0 when the
 * shape is out of range (Hq % H != 0, a zero, more than 1024 query heads per KV head, or beyond
 * the page format's limits). */
size_t kvp_attn_scratch_bytes(uint32_t q_heads, uint32_t heads, uint32_t head_dim,
                              uint32_t page_tokens);

/* out[Hq][D] = softmax(scale * q . K^T) V over every token of pages[0..n_pages) and the tail,
 * in the ORIGINAL frame: q [Hq][D] as the model produced it (query head i attends with KV head
 * i / (Hq / H), GQA), out as attention over kvp_page_decode(..., KVP_FRAME_ORIGINAL) would give
 * (rotating codecs: q is rotated once per head, V summed in the stored frame and rotated back
 * once; not under KVP_PAGE_F_V_PREROT, whose V was given rotated).
 * pages: token order; fp16 sink pages (KVP_PAGE_F_SINK) first if any, then sealed pages of one
 * codec (fp16, kivi, kivi128, oscar, kvarn) and one geometry (H, D, P, groups, rotation flags)
 * of one layer, all full but the last. tail (may be NULL): one fp16 page of the same H and D.
 * Errors, with out untouched: a page that fails kvp_page_parse -> its status (KVP_ERR_CORRUPT,
 * KVP_ERR_BAD_PAGE), and so does an fp16 page holding Inf/NaN (its CRC made to match); a result
 * that is not finite (scores beyond float range: a huge scale) -> KVP_ERR_BAD_INPUT_DATA; a page
 * of another codec or geometry than the first codec page (or a tail that is not fp16 of the
 * same H, D) -> KVP_ERR_WRONG_CODEC; naive2 -> KVP_ERR_UNSUPPORTED;
 * bad arguments, a partial page before the last, another layer, a sink after a codec page ->
 * KVP_ERR_INVALID; scratch allocation -> KVP_ERR_NO_MEMORY. Thread-safe for distinct scratch. */
kvp_status_t kvp_attn_compute(const kvp_attn_params_t *params, const kvp_attn_page_t *pages,
                              size_t n_pages, const kvp_attn_page_t *tail, const float *q,
                              uint32_t q_heads, float *out);

/* The same attention over plain fp16 K/V [tokens][heads][head_dim] already in memory (what an
 * fp16 cache does; no pages, no CRC): the baseline kvp_attn_compute is measured against.
 * Scratch: kvp_attn_scratch_bytes(q_heads, heads, head_dim, 1) (or any page_tokens). A result
 * that is not finite (Inf/NaN in K/V, or a huge scale) -> KVP_ERR_BAD_INPUT_DATA, out untouched. */
kvp_status_t kvp_attn_compute_f16(const kvp_attn_params_t *params, const uint16_t *k,
                                  const uint16_t *v, uint32_t tokens, uint32_t heads,
                                  uint32_t head_dim, const float *q, uint32_t q_heads,
                                  float *out);

/* Implementation in use ("ref" or "avx2"); switch it (tests, benchmarks; not while other
 * threads compute): KVP_ERR_UNSUPPORTED when that one is not available on this CPU. */
const char  *kvp_attn_impl_name(void);
kvp_status_t kvp_attn_set_impl(const char *impl);

#ifdef __cplusplus
}
#endif
#endif
