/* cuda_int.h - internal: what the CUDA twins (codec_cuda.cu, attn_cuda.cu) share: a runtime call
 * checked (logged, KVP_ERR_DEVICE, goto out) and a kernel launch, on the default stream or a given
 * one (tests/kernels/cuda_emu defines both launch macros itself to run the kernels on the CPU). */
#ifndef KVPACK_CUDA_INT_H
#define KVPACK_CUDA_INT_H

#include "kvpack/log.h"

#include <cuda_runtime.h>

#define CUDA_TRY(call)                                                                           \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            KVP_LOG_ERROR("cuda", "%s: %s", #call, cudaGetErrorString(e_));                      \
            (void)cudaGetLastError(); /* reset: a failed call stays "last" until read, and the  \
                                       * next call's check after its launches would fail too */ \
            status = KVP_ERR_DEVICE;                                                             \
            goto out;                                                                            \
        }                                                                                        \
    } while (0)

/* A launch first drops a stale non-sticky error, so the CUDA_TRY(cudaGetLastError()) after it
 * reads the launch's own: cudaStreamQuery/cudaEventQuery leave cudaErrorNotReady as the thread's
 * last error (xfer_nccl.c polls NCCL's stream, crc_cuda.cu its check's event, an engine its own),
 * which would fail a good launch; the calls before it were checked by their returns, and a sticky
 * error comes back from the next call anyway. */
#ifndef KVP_LAUNCH
#define KVP_LAUNCH(kern, grid, block, ...)                                                       \
    ((void)cudaGetLastError(), kern<<<(grid), (block)>>>(__VA_ARGS__))
#define KVP_LAUNCH_STREAM(kern, grid, block, stream, ...)                                        \
    ((void)cudaGetLastError(), kern<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__))
#endif
/* A launch and its check, one statement: launch errors are not sticky, so a check after several
 * launches sees only the last one's (a failed earlier launch left its output as cudaMalloc gave
 * it, and the page was sealed anyway). */
#define KVP_LAUNCH_TRY(kern, grid, block, ...)                                                   \
    do {                                                                                         \
        KVP_LAUNCH(kern, grid, block, __VA_ARGS__);                                              \
        CUDA_TRY(cudaGetLastError());                                                            \
    } while (0)

#endif
