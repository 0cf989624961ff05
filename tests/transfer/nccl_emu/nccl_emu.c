/* nccl_emu.c - the CPU stand-in behind nccl.h and cuda_runtime.h of this folder (test-only):
 * pairs of ranks met by unique id, each rank's posted sends and receives in FIFO queues, a send
 * and the peer's receive matched in order and copied when both exist (a size mismatch is an
 * async ncclInvalidUsage on both), streams counting their unfinished operations. One mutex
 * guards it all: the two ranks are two threads of the test. An aborted rank's operations are
 * dropped; its peer's stay pending forever, as a real peer's would until its own deadline.
 * This checks kvpack's logic, not NCCL. */
#include "nccl.h"
#include "kvpack/alloc.h" /* kvp_time_s */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kvp_emu_stream {
    int pending; /* operations posted on it, not yet copied */
    int ordered; /* it waited for an event recorded on the default stream */
};

struct kvp_emu_event {
    int on_default; /* last recorded on cudaStreamLegacy */
};

static int unordered; /* NCCL operations posted on a stream not ordered after the default one */
static __thread struct kvp_emu_stream *group_stream; /* the stream of this thread's group */

typedef struct op {
    int                    send;
    uint8_t               *buf;
    size_t                 n;
    struct kvp_emu_stream *stream;
    struct op             *next;
} op_t;

typedef struct pair {
    char         id[NCCL_UNIQUE_ID_BYTES];
    int          joined;    /* bit per rank */
    int          refs;
    op_t        *q[2][2];   /* [rank][send?] FIFO heads */
    ncclResult_t error;     /* async error of both ranks */
    double       up_at;     /* when the second rank joined (kvp_time_s) */
    struct pair *next;
} pair_t;

struct kvp_emu_comm {
    pair_t *pair;
    int     rank;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pair_t         *pairs;
static int             gpus = 2, version = NCCL_VERSION_CODE, stalled, live;
static long            corrupt_skip = -1;
static size_t          corrupt_byte;
static unsigned        init_lag_ms[2];
static unsigned        id_seq;

/* ---- test controls ---- */

void kvp_nccl_emu_gpus(int n) { gpus = n; }
void kvp_nccl_emu_version(int code) { version = code; }
void kvp_nccl_emu_stall(int on) { pthread_mutex_lock(&mu), stalled = on, pthread_mutex_unlock(&mu); }
void kvp_nccl_emu_corrupt(unsigned skip, size_t byte)
{
    pthread_mutex_lock(&mu);
    corrupt_skip = skip;
    corrupt_byte = byte;
    pthread_mutex_unlock(&mu);
}
int kvp_nccl_emu_live(void) { return live; }
void kvp_nccl_emu_init_lag(int rank, unsigned ms)
{
    pthread_mutex_lock(&mu);
    init_lag_ms[rank & 1] = ms;
    pthread_mutex_unlock(&mu);
}

/* ---- CUDA runtime ---- */

cudaError_t cudaGetDeviceCount(int *n)
{
    if (gpus < 0) {
        return cudaErrorInsufficientDriver; /* *n left alone, as the real one does */
    }
    *n = gpus;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device < 0 || device >= gpus) {
        return cudaErrorInvalidDevice;
    }
    snprintf(prop->name, sizeof(prop->name), "emulated gpu %d", device);
    prop->major = 9;
    prop->minor = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device >= 0 && device < gpus ? cudaSuccess : cudaErrorInvalidDevice;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:                 return "no error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient (emulated)";
    case cudaErrorNotReady:           return "device not ready";
    default:                          return "invalid device ordinal";
    }
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = calloc(1, sizeof(**s));
    return *s != NULL ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    int pending;

    pthread_mutex_lock(&mu);
    pending = s->pending;
    pthread_mutex_unlock(&mu);
    return pending == 0 ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof(**e));
    return *e != NULL ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    e->on_default = s == cudaStreamLegacy;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&mu);
    s->ordered = s->ordered || e->on_default;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

int kvp_nccl_emu_unordered(void)
{
    int n;

    pthread_mutex_lock(&mu);
    n = unordered;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- NCCL ---- */

ncclResult_t ncclGetVersion(int *v)
{
    *v = version;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    pthread_mutex_lock(&mu);
    snprintf(id->internal, sizeof(id->internal), "emu-%d-%u", (int)getpid(), ++id_seq);
    for (size_t i = strlen(id->internal) + 1; i < sizeof(id->internal); i++) {
        id->internal[i] = (char)(i * 37 + id_seq); /* every byte matters to the pairing */
    }
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

static pair_t *pair_find(const char *id)
{
    for (pair_t *p = pairs; p != NULL; p = p->next) {
        if (memcmp(p->id, id, NCCL_UNIQUE_ID_BYTES) == 0) {
            return p;
        }
    }
    return NULL;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    pair_t      *p;
    ncclResult_t r = ncclInProgress;

    (void)config;
    if (nranks != 2 || rank < 0 || rank > 1) {
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&mu);
    p = pair_find(id.internal);
    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        memcpy(p->id, id.internal, sizeof(p->id));
        p->next = pairs;
        pairs   = p;
    }
    if (p->joined & (1 << rank)) {
        r = ncclInvalidUsage;
    } else {
        p->joined |= 1 << rank;
        p->up_at = kvp_time_s();
        p->refs++;
        *comm = calloc(1, sizeof(**comm));
        (*comm)->pair = p;
        (*comm)->rank = rank;
        live++;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* A rank's init is done once both joined and its lag (kvp_nccl_emu_init_lag) has passed since:
 * real NCCL finishes the two ranks' non-blocking inits at different moments. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
    pair_t *p = comm->pair;

    pthread_mutex_lock(&mu);
    *state = p->error != ncclSuccess ? p->error
             : p->joined == 3 && kvp_time_s() >= p->up_at + init_lag_ms[comm->rank] / 1e3
                 ? ncclSuccess
                 : ncclInProgress;
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

/* Drop every operation rank r posted; free the pair when no rank holds it. */
static void comm_free(ncclComm_t comm)
{
    pair_t *p = comm->pair;

    pthread_mutex_lock(&mu);
    for (int s = 0; s < 2; s++) {
        while (p->q[comm->rank][s] != NULL) {
            op_t *o = p->q[comm->rank][s];

            p->q[comm->rank][s] = o->next;
            free(o);
        }
    }
    if (--p->refs == 0) {
        for (pair_t **pp = &pairs; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == p) {
                *pp = p->next;
                break;
            }
        }
        for (int r = 0; r < 2; r++) {
            for (int s = 0; s < 2; s++) {
                while (p->q[r][s] != NULL) {
                    op_t *o = p->q[r][s];

                    p->q[r][s] = o->next;
                    free(o);
                }
            }
        }
        free(p);
    }
    live--;
    pthread_mutex_unlock(&mu);
    free(comm);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return comm_free(comm), ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return comm_free(comm), ncclSuccess; }
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }

/* a group's stream must wait for the default stream again before the next group's operations */
ncclResult_t ncclGroupEnd(void)
{
    if (group_stream != NULL) {
        pthread_mutex_lock(&mu);
        group_stream->ordered = 0;
        pthread_mutex_unlock(&mu);
        group_stream = NULL;
    }
    return ncclSuccess;
}

/* Copy every send of rank r that its peer has a receive for, in order (under mu). */
static void match(pair_t *p, int r)
{
    while (!stalled && p->q[r][1] != NULL && p->q[1 - r][0] != NULL) {
        op_t *s = p->q[r][1], *v = p->q[1 - r][0];

        if (s->n != v->n) {
            p->error = ncclInvalidUsage;
            return;
        }
        memcpy(v->buf, s->buf, s->n);
        if (corrupt_skip == 0 && s->n > 0) {
            v->buf[corrupt_byte < s->n ? corrupt_byte : s->n - 1] ^= 0x40;
        }
        corrupt_skip -= corrupt_skip >= 0;
        s->stream->pending--;
        v->stream->pending--;
        p->q[r][1]     = s->next;
        p->q[1 - r][0] = v->next;
        free(s);
        free(v);
    }
}

static ncclResult_t post(int send, void *buf, size_t n, ncclDataType_t type, int peer,
                         ncclComm_t comm, cudaStream_t stream)
{
    op_t  *o = calloc(1, sizeof(*o)), **tail;
    pair_t *p = comm->pair;

    if (o == NULL || (type != ncclUint8 && type != ncclInt8) || peer != 1 - comm->rank) {
        free(o);
        return ncclInvalidArgument;
    }
    o->send = send, o->buf = buf, o->n = n, o->stream = stream;
    pthread_mutex_lock(&mu);
    for (tail = &p->q[comm->rank][send]; *tail != NULL; tail = &(*tail)->next) {
    }
    *tail = o;
    stream->pending++;
    unordered += !stream->ordered;
    group_stream = stream;
    match(p, 0);
    match(p, 1);
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return post(1, (void *)buf, count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return post(0, buf, count, type, peer, comm, stream);
}

const char *ncclGetErrorString(ncclResult_t r)
{
    return r == ncclSuccess ? "no error" : r == ncclInProgress ? "in progress" : "emulated error";
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "";
}
