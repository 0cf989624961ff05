/* devmem.h - device memory for the tests of code that takes device pointers (the GPU page
 * verifier, the NCCL link): cudaMalloc'd on a GPU; with KVP_CUDA_EMU (the CPU stand-ins of
 * tests/kernels/cuda_emu and tests/transfer/nccl_emu, whose device memory is host memory)
 * plain malloc. All calls CHECK that they succeeded. Header-only. */
#ifndef KVPACK_TEST_DEVMEM_H
#define KVPACK_TEST_DEVMEM_H

#include <stdlib.h>
#include <string.h>

#include "check.h"

#ifdef KVP_CUDA_EMU
static inline void *dev_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    CHECK(p != NULL);
    return p;
}
static inline void dev_put(void *dev, const void *host, size_t n) { memcpy(dev, host, n); }
static inline void dev_get(void *host, const void *dev, size_t n) { memcpy(host, dev, n); }
static inline void dev_free(void *dev) { free(dev); }
#else
#include <cuda_runtime.h>

static inline void *dev_alloc(size_t n)
{
    void *p = NULL;

    CHECK(cudaMalloc(&p, n ? n : 1) == cudaSuccess);
    return p;
}
static inline void dev_put(void *dev, const void *host, size_t n)
{
    CHECK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice) == cudaSuccess);
}
static inline void dev_get(void *host, const void *dev, size_t n)
{
    CHECK(cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost) == cudaSuccess);
}
static inline void dev_free(void *dev) { cudaFree(dev); }
#endif

#endif
