/* attn_cuda.h - the GPU twin of kvp_attn_compute (kernels/attn_cuda.cu, built only when nvcc is
 * present: KVP_HAVE_CUDA): decode attention of one query step over one layer's packed pages, the
 * scores and the V sum computed on the device from the 2-bit codes, scales and norms where they
 * lie in the pages (no dequantized copy). Same contract, statuses and output frame as
 * kvp_attn_compute (kvpack/attn.h); the pages are checked on the host first with its checks
 * (kvp_attn_validate), so a bad page costs no device work. Pointers are host memory: the pages'
 * payloads and q are copied in, out copied back, per call. */
#ifndef KVPACK_ATTN_CUDA_H
#define KVPACK_ATTN_CUDA_H

#include "kvpack/attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* As kvp_attn_compute; KVP_ERR_DEVICE on a CUDA error (logged). params->scratch is not used. */
kvp_status_t kvp_cuda_attn_compute(const kvp_attn_params_t *params, const kvp_attn_page_t *pages,
                                   size_t n_pages, const kvp_attn_page_t *tail, const float *q,
                                   uint32_t q_heads, float *out);

#ifdef __cplusplus
}
#endif
#endif
