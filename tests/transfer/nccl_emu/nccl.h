/* nccl.h (test stand-in, C) - the NCCL calls transfer/xfer_nccl.c makes, for transfer.nccl_emu:
 * two ranks in one process meet by unique id; ncclSend/ncclRecv between them are matched in
 * order and copied with memcpy when both are posted (nccl_emu.c). A non-blocking init stays "in
 * progress" until both ranks joined (and a rank's lag, a test control, has passed). Test controls stall sends or change a byte in transit.
 * Names map to kvp_emu_*. This checks kvpack's logic, not NCCL (nor its transports, its
 * ordering across streams, or anything a GPU does). */
#ifndef KVP_NCCL_EMU_NCCL_H
#define KVP_NCCL_EMU_NCCL_H

#include <limits.h>
#include <stddef.h>

#include "cuda_runtime.h"

#define NCCL_MAJOR           2
#define NCCL_MINOR           28
#define NCCL_PATCH           9
#define NCCL_VERSION_CODE    22809
#define NCCL_UNIQUE_ID_BYTES 128

typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct kvp_emu_comm *ncclComm_t;
typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclInt8 = 0, ncclUint8 = 1 } ncclDataType_t;
typedef struct {
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {INT_MIN}

#define ncclGetVersion          kvp_emu_ncclGetVersion
#define ncclGetUniqueId         kvp_emu_ncclGetUniqueId
#define ncclCommInitRankConfig  kvp_emu_ncclCommInitRankConfig
#define ncclCommGetAsyncError   kvp_emu_ncclCommGetAsyncError
#define ncclCommAbort           kvp_emu_ncclCommAbort
#define ncclCommDestroy         kvp_emu_ncclCommDestroy
#define ncclGroupStart          kvp_emu_ncclGroupStart
#define ncclGroupEnd            kvp_emu_ncclGroupEnd
#define ncclSend                kvp_emu_ncclSend
#define ncclRecv                kvp_emu_ncclRecv
#define ncclGetErrorString      kvp_emu_ncclGetErrorString
#define ncclGetLastError        kvp_emu_ncclGetLastError

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream);
const char  *ncclGetErrorString(ncclResult_t r);
const char  *ncclGetLastError(ncclComm_t comm);

/* test controls */
void kvp_nccl_emu_version(int code);              /* what ncclGetVersion says (default 22809) */
void kvp_nccl_emu_stall(int on);                  /* 1: posted sends never move */
void kvp_nccl_emu_corrupt(unsigned skip, size_t byte); /* after skip more transfers, the next one
                                                        * arrives with byte (clamped) flipped */
int  kvp_nccl_emu_live(void);                     /* communicators not yet destroyed/aborted */
int  kvp_nccl_emu_unordered(void);  /* NCCL operations posted on a stream that did not wait for
                                     * the default stream (cudaStreamWaitEvent on an event
                                     * recorded on cudaStreamLegacy) since its last group */
void kvp_nccl_emu_init_lag(int rank, unsigned ms); /* rank's non-blocking init stays in progress
                                                    * ms after both ranks joined (default 0) */

#endif
