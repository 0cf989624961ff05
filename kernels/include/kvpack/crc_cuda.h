/* crc_cuda.h - CRC32C on the GPU, and the page check a receiver runs before it uses pages that
 * arrived in device memory (kernels/crc_cuda.cu, built when nvcc is present: KVP_HAVE_CUDA; the
 * NCCL link, transfer/xfer_nccl.c, verifies every batch with it). One block per range, each
 * thread a slice, the slices combined by shifting (kernels/crc32c_hd.h); the result is
 * kvp_crc32c's. Pointers named dev are device memory; every other array is host memory.
 * stream: a cudaStream_t (NULL: the default stream); calls return once their work is done,
 * except kvp_cuda_check_start (polled). */
#ifndef KVPACK_CRC_CUDA_H
#define KVPACK_CRC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_CUDA_CRC_THREADS 128u /* threads (slices) per range */

/* crc_out[i] = kvp_crc32c(0, dev + off[i], len[i]) for i < n. KVP_ERR_DEVICE on a CUDA error
 * (logged), KVP_ERR_INVALID for NULL arrays with n > 0. */
kvp_status_t kvp_cuda_crc32c(const void *dev, const uint64_t *off, const uint32_t *len,
                             uint32_t n, void *stream, uint32_t *crc_out);

/* Check n pages stored back to back from dev, lens[i] bytes each: the page format v1 magic, the
 * header's payload_len against the length, and the CRC32C (its crc field read as 0) against the
 * stored one. page_status (may be NULL) gets one status per page: KVP_OK, KVP_ERR_BAD_PAGE
 * (shorter than a header, bad magic or length) or KVP_ERR_CORRUPT (CRC mismatch). Returns
 * KVP_OK when every page passed, KVP_ERR_CORRUPT when any failed (*n_bad_p, may be NULL, says
 * how many), KVP_ERR_DEVICE on a CUDA error. The codec-level checks of kvp_page_parse are not
 * run here: a consumer that reads a page's fields on the host still parses it. */
kvp_status_t kvp_cuda_pages_verify(const void *dev, const uint32_t *lens, uint32_t n, void *stream,
                                   kvp_status_t *page_status, uint32_t *n_bad_p);

/* The same page check for a caller that checks batch after batch and must not block (the NCCL
 * link, under its deadline): the scratch (device, and page-locked host) is made once by create
 * for up to max_pages pages; start queues one check on stream and returns at once; poll says
 * KVP_INPROGRESS until it is done (a cudaEventQuery: never blocks), then what
 * kvp_cuda_pages_verify returns (page_status, n_bad_p as there; results stay until the next
 * start). start: KVP_ERR_INVALID for n > max_pages, KVP_ERR_BUSY while one is still queued.
 * destroy waits for a check still queued (a finite kernel) and frees the scratch; NULL: no-op.
 * One thread at a time per check; the pages must stay until poll says done. */
typedef struct kvp_cuda_check *kvp_cuda_check_h;

kvp_status_t kvp_cuda_check_create(uint32_t max_pages, kvp_cuda_check_h *check_p);
void         kvp_cuda_check_destroy(kvp_cuda_check_h check);
kvp_status_t kvp_cuda_check_start(kvp_cuda_check_h check, const void *dev, const uint32_t *lens,
                                  uint32_t n, void *stream);
kvp_status_t kvp_cuda_check_poll(kvp_cuda_check_h check, kvp_status_t *page_status,
                                 uint32_t *n_bad_p);

#ifdef __cplusplus
}
#endif
#endif
