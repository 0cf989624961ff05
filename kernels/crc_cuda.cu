/* crc_cuda.cu - CRC32C of device ranges and the page check behind crc_cuda.h. One kernel: a block
 * per range, KVP_CUDA_CRC_THREADS threads; the byte table and the x^(2^k) table are built in
 * shared memory, each thread CRCs its slice (crc32c_hd.h) and shifts it past the bytes after it,
 * a tree of xors in shared memory combines them, and thread 0 finishes the CRC (and for pages
 * compares it with the stored one). Slices are contiguous per thread: simple, not coalesced;
 * the check is a small part of a transfer's time.
 * Host flow: scratch (offsets, lengths, results) -> copy in -> kernel -> copy out. The check
 * object (kvp_cuda_check_*) makes its scratch once (device, and pinned host so the copies are
 * asynchronous) and ends each check with an event its caller polls: no allocation, free or
 * synchronisation per batch (a cudaMalloc/cudaFree between another library's kernels
 * synchronises the device; NCCL's in-flight collectives can hang on it). */
#include "kvpack/crc_cuda.h"
#include "kvpack/alloc.h"
#include "kvpack/page.h"
#include "crc32c_hd.h"
#include "cuda_int.h"

#define PAGE_CRC_AT 56u /* page.h: the crc32c field */

__device__ static uint32_t ld32_dev(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* grid n, block KVP_CUDA_CRC_THREADS. pages: read [56, 60) as 0 and write a verdict. */
__global__ void k_crc32c(const uint8_t *buf, const uint64_t *off, const uint32_t *len, int pages,
                         uint32_t *crc_out, int32_t *verdict)
{
    __shared__ uint32_t table[256];
    __shared__ uint32_t x2n[KVP_CRC_X2N_BITS];
    __shared__ uint32_t part[KVP_CUDA_CRC_THREADS];
    const uint8_t      *p = buf + off[blockIdx.x];
    uint64_t            L = len[blockIdx.x], from, to;
    uint32_t            t = threadIdx.x;

    for (uint32_t i = t; i < 256; i += KVP_CUDA_CRC_THREADS) {
        table[i] = kvp_hd_crc32c_entry(i);
    }
    if (t == 0) {
        kvp_hd_crc_x2n_init(x2n);
    }
    __syncthreads();
    kvp_hd_crc_slice(L, t, KVP_CUDA_CRC_THREADS, &from, &to);
    part[t] = kvp_hd_crc_shift(kvp_hd_crc32c_raw(p, from, to, pages ? PAGE_CRC_AT : L, table),
                               L - to, x2n);
    __syncthreads();
    for (uint32_t s = KVP_CUDA_CRC_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) {
            part[t] ^= part[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        uint32_t crc = kvp_hd_crc32c_finish(part[0], L, x2n);

        crc_out[blockIdx.x] = crc;
        if (pages) {
            int32_t v = KVP_OK;

            if (L < KVP_PAGE_HDR_BYTES || ld32_dev(p) != KVP_PAGE_MAGIC ||
                ld32_dev(p + 48) != L - KVP_PAGE_HDR_BYTES) {
                v = KVP_ERR_BAD_PAGE;
            } else if (ld32_dev(p + PAGE_CRC_AT) != crc) {
                v = KVP_ERR_CORRUPT;
            }
            verdict[blockIdx.x] = v;
        }
    }
}

/* Queue on s: the offsets and lengths (host) copied into the device scratch, then the kernel
 * over n ranges; dcrc/dver get its results. */
static kvp_status_t crc_enqueue(const void *dev, const uint64_t *hoff, const uint32_t *hlen,
                                uint32_t n, int pages, cudaStream_t s, uint64_t *doff,
                                uint32_t *dlen, uint32_t *dcrc, int32_t *dver)
{
    kvp_status_t status = KVP_OK;

    CUDA_TRY(cudaMemcpyAsync(doff, hoff, (size_t)n * sizeof(uint64_t), cudaMemcpyHostToDevice, s));
    CUDA_TRY(cudaMemcpyAsync(dlen, hlen, (size_t)n * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
    KVP_LAUNCH_STREAM(k_crc32c, n, KVP_CUDA_CRC_THREADS, s, (const uint8_t *)dev, doff, dlen, pages,
                      dcrc, dver);
    CUDA_TRY(cudaGetLastError());
out:
    return status;
}

/* Run the kernel over n ranges; off NULL: back to back from 0. crc_out and/or verdict (host) may
 * be NULL when not wanted. */
static kvp_status_t crc_run(const void *dev, const uint64_t *off, const uint32_t *len, uint32_t n,
                            int pages, void *stream, uint32_t *crc_out, int32_t *verdict)
{
    cudaStream_t s       = (cudaStream_t)stream;
    kvp_status_t status  = KVP_OK;
    size_t       bytes   = (size_t)n * (sizeof(uint64_t) + 2 * sizeof(uint32_t) + sizeof(int32_t));
    uint64_t    *hoff    = NULL, at = 0;
    uint8_t     *scratch = NULL;
    uint64_t    *doff;
    uint32_t    *dlen, *dcrc;
    int32_t     *dver;

    if (n == 0) {
        return KVP_OK;
    }
    hoff = (uint64_t *)kvp_malloc((size_t)n * sizeof(uint64_t), "crc offsets");
    if (hoff == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) { /* off NULL: back to back (64-bit: past 4 GiB too) */
        hoff[i] = off != NULL ? off[i] : at;
        at += len[i];
    }
    CUDA_TRY(cudaMalloc((void **)&scratch, bytes));
    doff = (uint64_t *)scratch;
    dlen = (uint32_t *)(doff + n);
    dcrc = dlen + n;
    dver = (int32_t *)(dcrc + n);
    status = crc_enqueue(dev, hoff, len, n, pages, s, doff, dlen, dcrc, dver);
    if (status != KVP_OK) {
        goto out;
    }
    if (crc_out != NULL) {
        CUDA_TRY(cudaMemcpyAsync(crc_out, dcrc, (size_t)n * sizeof(uint32_t),
                                 cudaMemcpyDeviceToHost, s));
    }
    if (verdict != NULL) {
        CUDA_TRY(cudaMemcpyAsync(verdict, dver, (size_t)n * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, s));
    }
    CUDA_TRY(cudaStreamSynchronize(s));
out:
    cudaFree(scratch); /* synchronizes: nothing of ours is queued past it */
    kvp_free(hoff);
    return status;
}

/* ---- the page check with its scratch made once, polled ---- */

struct kvp_cuda_check {
    uint32_t    cap;        /* pages per check */
    uint8_t    *scratch;    /* device: offsets, lengths, crcs, verdicts (cap each) */
    uint8_t    *pinned;     /* host, page-locked: offsets, lengths in; verdicts out */
    uint64_t   *hoff;
    uint32_t   *hlen;
    int32_t    *hver;
    cudaEvent_t done;       /* recorded after the verdicts' copy */
    int         have_event;
    int         state;      /* 0 idle, 1 queued, 2 done (results in hver) */
    uint32_t    n;          /* pages of the last check */
};

extern "C" kvp_status_t kvp_cuda_check_create(uint32_t max_pages, kvp_cuda_check_h *check_p)
{
    kvp_status_t     status = KVP_OK;
    kvp_cuda_check_h c;
    size_t           cap;

    if (check_p == NULL || max_pages == 0) {
        return KVP_ERR_INVALID;
    }
    c = (kvp_cuda_check_h)kvp_calloc(1, sizeof(*c), "cuda check");
    if (c == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    c->cap = max_pages;
    cap    = max_pages;
    /* the kernel loaded now (CUDA loads kernels lazily, on first launch, by default since 12.2):
     * a first launch from the link's first receive would load it under the context lock and
     * wait for the device to drain, behind another communicator's NCCL kernel in flight */
    {
        cudaFuncAttributes fa;

        CUDA_TRY(cudaFuncGetAttributes(&fa, k_crc32c));
    }
    CUDA_TRY(cudaMalloc((void **)&c->scratch,
                        cap * (sizeof(uint64_t) + 2 * sizeof(uint32_t) + sizeof(int32_t))));
    CUDA_TRY(cudaMallocHost((void **)&c->pinned,
                            cap * (sizeof(uint64_t) + sizeof(uint32_t) + sizeof(int32_t))));
    c->hoff = (uint64_t *)c->pinned;
    c->hlen = (uint32_t *)(c->hoff + cap);
    c->hver = (int32_t *)(c->hlen + cap);
    CUDA_TRY(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    c->have_event = 1;
out:
    if (status != KVP_OK) {
        kvp_cuda_check_destroy(c);
        return status;
    }
    *check_p = c;
    return KVP_OK;
}

extern "C" void kvp_cuda_check_destroy(kvp_cuda_check_h c)
{
    if (c == NULL) {
        return;
    }
    if (c->state == 1) {
        (void)cudaEventSynchronize(c->done); /* the copies into pinned must be done first */
        (void)cudaGetLastError();
    }
    if (c->have_event) {
        cudaEventDestroy(c->done);
    }
    cudaFreeHost(c->pinned);
    cudaFree(c->scratch);
    kvp_free(c);
}

extern "C" kvp_status_t kvp_cuda_check_start(kvp_cuda_check_h c, const void *dev,
                                             const uint32_t *lens, uint32_t n, void *stream)
{
    cudaStream_t s      = (cudaStream_t)stream;
    kvp_status_t status = KVP_OK;
    uint64_t    *doff;
    uint32_t    *dlen, *dcrc;
    int32_t     *dver;
    uint64_t     at = 0;

    if (c == NULL || n > c->cap || (n > 0 && (dev == NULL || lens == NULL))) {
        return KVP_ERR_INVALID;
    }
    if (c->state == 1) {
        return KVP_ERR_BUSY;
    }
    c->state = 0;
    c->n     = n;
    for (uint32_t i = 0; i < n; i++) { /* pinned: the copies below are truly asynchronous */
        c->hoff[i] = at;
        c->hlen[i] = lens[i];
        at += lens[i];
    }
    doff = (uint64_t *)c->scratch;
    dlen = (uint32_t *)(doff + c->cap);
    dcrc = dlen + c->cap;
    dver = (int32_t *)(dcrc + c->cap);
    if (n > 0) {
        status = crc_enqueue(dev, c->hoff, c->hlen, n, 1, s, doff, dlen, dcrc, dver);
        if (status != KVP_OK) {
            goto out;
        }
        CUDA_TRY(cudaMemcpyAsync(c->hver, dver, (size_t)n * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, s));
    }
    CUDA_TRY(cudaEventRecord(c->done, s));
    c->state = 1;
out:
    if (status != KVP_OK && n > 0) {
        /* a step failed after earlier ones were queued on s (copies from the pinned hoff/hlen
         * among them): waited for here, as no event tracks them, so a retried start cannot
         * overwrite what they still read and destroy cannot free it under them */
        (void)cudaStreamSynchronize(s);
        (void)cudaGetLastError();
    }
    return status;
}

extern "C" kvp_status_t kvp_cuda_check_poll(kvp_cuda_check_h c, kvp_status_t *page_status,
                                            uint32_t *n_bad_p)
{
    kvp_status_t status = KVP_OK;
    uint32_t     bad    = 0;

    if (c == NULL || c->state == 0) {
        return KVP_ERR_INVALID;
    }
    if (c->state == 1) {
        cudaError_t e = cudaEventQuery(c->done);

        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* "not ready" is left as the last error: not ours to keep */
            return KVP_INPROGRESS;
        }
        c->state = 0;
        CUDA_TRY(e);
        c->state = 2;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        bad += c->hver[i] != KVP_OK;
        if (page_status != NULL) {
            page_status[i] = (kvp_status_t)c->hver[i];
        }
    }
    if (n_bad_p != NULL) {
        *n_bad_p = bad;
    }
    status = bad > 0 ? KVP_ERR_CORRUPT : KVP_OK;
out:
    return status;
}

extern "C" kvp_status_t kvp_cuda_crc32c(const void *dev, const uint64_t *off, const uint32_t *len,
                                        uint32_t n, void *stream, uint32_t *crc_out)
{
    if (n > 0 && (dev == NULL || off == NULL || len == NULL || crc_out == NULL)) {
        return KVP_ERR_INVALID;
    }
    return crc_run(dev, off, len, n, 0, stream, crc_out, NULL);
}

extern "C" kvp_status_t kvp_cuda_pages_verify(const void *dev, const uint32_t *lens, uint32_t n,
                                              void *stream, kvp_status_t *page_status,
                                              uint32_t *n_bad_p)
{
    kvp_cuda_check_h c = NULL;
    kvp_status_t     status;
    uint32_t         bad = 0;

    if (n > 0 && (dev == NULL || lens == NULL)) {
        return KVP_ERR_INVALID;
    }
    if (n > 0) {
        status = kvp_cuda_check_create(n, &c);
        if (status == KVP_OK) {
            status = kvp_cuda_check_start(c, dev, lens, n, stream);
        }
        if (status == KVP_OK) {
            cudaError_t e = cudaEventSynchronize(c->done);

            if (e != cudaSuccess) {
                KVP_LOG_ERROR("cuda", "cudaEventSynchronize: %s", cudaGetErrorString(e));
                (void)cudaGetLastError();
                status = KVP_ERR_DEVICE;
            } else {
                status = kvp_cuda_check_poll(c, page_status, &bad);
            }
        }
        kvp_cuda_check_destroy(c);
    } else {
        status = KVP_OK;
    }
    if (n_bad_p != NULL) {
        *n_bad_p = status == KVP_OK || status == KVP_ERR_CORRUPT ? bad : 0;
    }
    if (status == KVP_ERR_CORRUPT) {
        KVP_LOG_WARN("cuda", "%u of %u pages failed their check on the gpu", bad, n);
    }
    return status;
}
