/* cuda_runtime.h (test shim) - runs the kernels/ .cu files on the CPU so their kernels' logic is
 * checked on every machine, GPU or not: each stand-in test compiles one as C++ with this
 * directory first on the include path, so its `#include <cuda_runtime.h>` lands here.
 * What it stands in for: the __global__/__device__/__shared__ qualifiers, threadIdx/blockIdx/
 * blockDim/gridDim, __syncthreads, the launch (KVP_LAUNCH: blocks one after the other, a block's
 * threads as host threads, so its __shared__ variables, emulated as statics, belong to one block
 * at a time and __syncthreads is a barrier of them), and the runtime calls the file makes (device
 * memory is host memory; copies are memcpy; streams are in order by construction: every call
 * is done when it returns, so an event is done once recorded).
 * What it does not check: device numerics (nvcc's --fmad=false, the device expf/logf), memory
 * limits, occupancy, or anything an sm_90 GPU does differently; kernels.test_cuda does that. */
#ifndef KVP_CUDA_EMU_RUNTIME_H
#define KVP_CUDA_EMU_RUNTIME_H

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
inline pthread_barrier_t kvp_emu_barrier; /* the block's threads, for __syncthreads */
inline unsigned          kvp_emu_syncs;   /* __syncthreads calls in this launch (atomic) */

static inline void __syncthreads(void)
{
    __atomic_add_fetch(&kvp_emu_syncs, 1, __ATOMIC_RELAXED);
    pthread_barrier_wait(&kvp_emu_barrier);
}

/* one block, one host thread per thread of the block (the kernels here are one-dimensional in
 * their blocks) */
template <class F> static void kvp_emu_block_threads(dim3 grid, dim3 block, dim3 b, F kernel)
{
    std::vector<std::thread> threads;

    pthread_barrier_init(&kvp_emu_barrier, NULL, block.x);
    for (unsigned t = 0; t < block.x; t++) {
        threads.emplace_back([=] {
            threadIdx = dim3(t, 0, 0), blockIdx = b, blockDim = block, gridDim = grid;
            kernel();
        });
    }
    for (auto &th : threads) {
        th.join();
    }
    pthread_barrier_destroy(&kvp_emu_barrier);
}

/* A launch, blocks in order. The first block runs on threads; a kernel that did not call
 * __syncthreads in it runs the rest thread after thread on this one (a valid schedule for a
 * kernel without barriers, and 100x fewer context switches). */
template <class F> static void kvp_emu_launch(dim3 grid, dim3 block, F kernel)
{
    bool threaded = true;

    kvp_emu_syncs = 0;
    for (unsigned z = 0; z < grid.z; z++) {
        for (unsigned y = 0; y < grid.y; y++) {
            for (unsigned x = 0; x < grid.x; x++) {
                if (threaded) {
                    kvp_emu_block_threads(grid, block, dim3(x, y, z), kernel);
                    threaded = kvp_emu_syncs != 0;
                    continue;
                }
                for (unsigned t = 0; t < block.x; t++) {
                    threadIdx = dim3(t, 0, 0), blockIdx = dim3(x, y, z);
                    blockDim = block, gridDim = grid;
                    kernel();
                }
            }
        }
    }
}

#define KVP_LAUNCH(kern, grid, block, ...) kvp_emu_launch((grid), (block), [&] { kern(__VA_ARGS__); })
/* streams: every call runs to completion when made, so one order serves them all */
#define KVP_LAUNCH_STREAM(kern, grid, block, stream, ...)                                        \
    ((void)(stream), kvp_emu_launch((grid), (block), [&] { kern(__VA_ARGS__); }))

typedef enum {
    cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600
} cudaError_t;
typedef enum {
    cudaMemcpyHostToDevice   = 1,
    cudaMemcpyDeviceToHost   = 2,
    cudaMemcpyDeviceToDevice = 3
} cudaMemcpyKind;

static inline const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : e == cudaErrorNotReady ? "device not ready"
                                                                  : "out of memory (emulated device)";
}
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}
struct cudaFuncAttributes {
    int numRegs;
};
template <typename F> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F)
{
    a->numRegs = 0; /* the host runs every kernel */
    return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = malloc(bytes);
    return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    (void)kind;
    memcpy(dst, src, n);
    return cudaSuccess;
}
typedef struct kvp_emu_stream *cudaStream_t;
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                                          cudaMemcpyKind kind, cudaStream_t s)
{
    (void)s;
    return cudaMemcpy(dst, src, n, kind);
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}
static inline cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaMalloc(p, bytes); }
static inline cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }

/* events: the work before a record is done when it is recorded, so a query says done, unless a
 * test holds every query at "not ready" (kvp_cuda_emu_event_stall, crc_cuda_emu.cpp: a check
 * that takes too long) */
inline int kvp_emu_event_stalled;
typedef struct kvp_emu_event *cudaEvent_t;
#define cudaEventDisableTiming 2u
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = (cudaEvent_t)malloc(1);
    return *e != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e, (void)s;
    return cudaSuccess;
}
static inline cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    return __atomic_load_n(&kvp_emu_event_stalled, __ATOMIC_RELAXED) ? cudaErrorNotReady
                                                                      : cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}

#endif
