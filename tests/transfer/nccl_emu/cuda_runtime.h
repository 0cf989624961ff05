/* cuda_runtime.h (test stand-in, C) - the few CUDA runtime calls transfer/xfer_nccl.c makes, so
 * transfer.nccl_emu can run that file on a CPU: a device count the test sets (or "no driver"),
 * device properties, streams that know how many NCCL operations (nccl_emu.c) they still
 * wait for, and events that only record whether a stream was ordered after the default
 * stream. Device memory is host memory. Every name is mapped to kvp_emu_* so nothing here can
 * meet the real runtime at link time. This checks kvpack's logic, not CUDA. */
#ifndef KVP_NCCL_EMU_CUDA_RUNTIME_H
#define KVP_NCCL_EMU_CUDA_RUNTIME_H

typedef enum {
    cudaSuccess                = 0,
    cudaErrorInvalidDevice     = 101,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNotReady          = 600
} cudaError_t;

struct cudaDeviceProp {
    char name[256];
    int  major, minor;
};

typedef struct kvp_emu_stream *cudaStream_t;
#define cudaStreamNonBlocking 1u
#define cudaStreamLegacy      ((cudaStream_t)0x1) /* the legacy default stream */
typedef struct kvp_emu_event *cudaEvent_t;
#define cudaEventDisableTiming 2u

#define cudaGetDeviceCount        kvp_emu_cudaGetDeviceCount
#define cudaGetDeviceProperties   kvp_emu_cudaGetDeviceProperties
#define cudaSetDevice             kvp_emu_cudaSetDevice
#define cudaGetErrorString        kvp_emu_cudaGetErrorString
#define cudaGetLastError          kvp_emu_cudaGetLastError
#define cudaStreamCreateWithFlags kvp_emu_cudaStreamCreateWithFlags
#define cudaStreamQuery           kvp_emu_cudaStreamQuery
#define cudaStreamDestroy         kvp_emu_cudaStreamDestroy
#define cudaEventCreateWithFlags  kvp_emu_cudaEventCreateWithFlags
#define cudaEventRecord           kvp_emu_cudaEventRecord
#define cudaEventDestroy          kvp_emu_cudaEventDestroy
#define cudaStreamWaitEvent       kvp_emu_cudaStreamWaitEvent

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaSetDevice(int device);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamQuery(cudaStream_t s);   /* cudaErrorNotReady while an op waits */
cudaError_t cudaStreamDestroy(cudaStream_t s);
/* events only order: a stream that waited for one recorded on cudaStreamLegacy is marked so */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);

/* test controls: devices this process sees (default 2; negative: cudaGetDeviceCount fails as
 * with an old driver) */
void kvp_nccl_emu_gpus(int n);

#endif
