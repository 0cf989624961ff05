/* codec_cuda.h - GPU twins of the kivi, kivi128, oscar and kvarn codecs (kernels/codec_cuda.cu,
 * built only when nvcc is present: KVP_HAVE_CUDA). The payload is computed on the device with the
 * same scalar math as the C reference (kernels/quant_hd.h); the page header and CRC are written
 * on the host, so pages are interchangeable with kvp_page_encode / kvp_page_decode.
 * Pointers are host memory (copied in and out per call); inputs fp32 [ntok][H][D]. */
#ifndef KVPACK_CODEC_CUDA_H
#define KVPACK_CODEC_CUDA_H

#include "kvpack/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA device can be used (any runtime error, e.g. "insufficient driver", means no). */
int kvp_cuda_available(void);

/* As kvp_page_encode (fp32 input) for kivi, kivi128, oscar and kvarn; KVP_ERR_UNSUPPORTED for
 * other codecs, KVP_ERR_DEVICE on a CUDA error (logged once). */
kvp_status_t kvp_cuda_page_encode(const kvp_page_params_t *params, const float *k, const float *v,
                                  uint32_t ntok, void *out, size_t out_cap, size_t *len_p);

/* As kvp_page_decode (fp32 output); the page is verified on the host first. */
kvp_status_t kvp_cuda_page_decode(const void *page, size_t len, kvp_frame_t frame, float *k_out,
                                  float *v_out);

#ifdef __cplusplus
}
#endif
#endif
