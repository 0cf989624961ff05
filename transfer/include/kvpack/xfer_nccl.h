/* xfer_nccl.h - the NCCL link: pages moved GPU to GPU between a prefill process and a decode
 * process by ncclSend/ncclRecv, set up and steered over kvpack's UCX transport (xfer.h; the link
 * holds its own kvp_xfer_h). Built with transfer/xfer_nccl.c when CUDA and NCCL are found
 * (KVP_HAVE_NCCL); otherwise every call returns KVP_ERR_UNSUPPORTED and says why.
 * Set-up: the decode side listens and accepts; the prefill side connects, makes the NCCL unique
 * id and sends it in a hello (with its NCCL version and device); the decode side refuses another
 * link version, another NCCL major version or a side without a usable GPU (both calls return
 * KVP_ERR_UNSUPPORTED, the reason logged on both), else both init a 2-rank communicator (rank 0
 * prefill, 1 decode) under the deadline.
 * A batch: the sender names the pages' lengths, the receiver posts its receives (or refuses a
 * batch that does not fit its buffer: KVP_ERR_TOO_LARGE on both sides, nothing moved), the
 * bytes go by ncclSend/ncclRecv on the link's stream (ordered after the work queued on the legacy
 * default stream before the call, so a caller's cudaMemcpy or kernel there is done with the pages
 * first; work on the caller's own other streams must be finished or ordered by the caller), the
 * receiver checks every page's CRC32C
 * on its GPU (kvpack/crc_cuda.h) and acks each page's status: a page that failed is
 * KVP_ERR_CORRUPT on both sides, never returned as good. Either side may send and receive, one
 * batch at a time (both sending at once is KVP_ERR_PROTOCOL).
 * Failures: a dead peer (its control connection failed) is KVP_ERR_PEER_GONE, a deadline
 * KVP_ERR_TIMEOUT, a malformed control message KVP_ERR_PROTOCOL, a CUDA or NCCL error
 * KVP_ERR_DEVICE; each aborts the communicator, tells the peer (a close message: it returns
 * PEER_GONE at once), closes the control connection and leaves the link unusable: later calls
 * return the same status. A batch runs under one deadline from its first message to its ack,
 * so the receiver must be in kvp_nccl_link_recv within the sender's timeout: the BATCH carries
 * the sender's budget, and the receiver finishes (its GPU check included, polled) within the
 * shorter of its own timeout and that budget less a margin (an eighth, at most 1 s) for the
 * ack's way back, so it gives up before the sender does; a receiver that finds the sender's
 * close queued before it acks fails the batch too (PEER_GONE). The two sides then agree on a
 * batch's outcome, except for an ack slower on the wire than that margin.
 * Either side may send its first batch as soon as its own set-up returned: the peer's set-up
 * may finish later, and the batch waits queued for its kvp_nccl_link_recv.
 * A refused batch or one with corrupt pages leaves it usable.
 * Threading: one thread per link; calls block until done or their deadline. Memory: pages and
 * buffers are device memory of the link's device; every other array is host memory. */
#ifndef KVPACK_XFER_NCCL_H
#define KVPACK_XFER_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_NCCL_ID_BYTES 128u /* NCCL_UNIQUE_ID_BYTES */

typedef struct kvp_nccl_link *kvp_nccl_link_h;

enum kvp_nccl_params_field {
    KVP_NCCL_PARAM_DEVICE     = KVP_BIT(0),
    KVP_NCCL_PARAM_TIMEOUT_MS = KVP_BIT(1),
};

typedef struct kvp_nccl_params {
    uint64_t field_mask; /* MUST be first */
    int      device;     /* this side's CUDA device; default 0 */
    uint32_t timeout_ms; /* deadline of the set-up, and of each batch from its first message to
                            its ack (a receiver: or the sender's, when shorter); default 30000 */
} kvp_nccl_params_t;

kvp_status_t kvp_nccl_link_create(const kvp_nccl_params_t *params, kvp_nccl_link_h *link_p);
/* Tears the communicator down (aborted if the link is broken) and the transport. NULL: no-op. */
void         kvp_nccl_link_destroy(kvp_nccl_link_h link);

/* Decode side: listen on host:port (0 picks one, *port_p gets it; port_p may be NULL), then
 * accept: wait for one prefill's hello (the link's deadline), answer it, init the communicator.
 * A connection that fails before a hello was taken from it (a port probe, a prefill gone) is
 * ignored: accept waits on for another until its deadline (KVP_ERR_TIMEOUT). */
kvp_status_t kvp_nccl_link_listen(kvp_nccl_link_h link, const char *host, uint16_t port,
                                  uint16_t *port_p);
kvp_status_t kvp_nccl_link_accept(kvp_nccl_link_h link);
/* Prefill side: connect, send the hello, wait for the answer, init the communicator. */
kvp_status_t kvp_nccl_link_connect(kvp_nccl_link_h link, const char *host, uint16_t port);

/* Send n pages (pages[i]: lens[i] bytes of device memory; borrowed) to the peer: n from 1 to
 * KVP_WIRE_MAX_PAGES (4096), each lens[i] a possible page (64 bytes to 64 + 256 MiB), summing to
 * at most KVP_WIRE_LINK_MAX_BATCH_BYTES (16 GiB); else KVP_ERR_INVALID, nothing sent, the link
 * usable. (The lengths need not fit a UCX header: a control message too large for one goes as
 * message data.) KVP_OK once the peer checked them all; KVP_ERR_CORRUPT when it found any that
 * failed (logged by number); the peer's KVP_ERR_TOO_LARGE when they do not fit its buffer. */
kvp_status_t kvp_nccl_link_send(kvp_nccl_link_h link, const void *const *pages,
                                const uint32_t *lens, uint32_t n);
/* Receive one batch into buf (cap bytes of device memory), pages back to back: waits up to
 * wait_ms for the batch to start (KVP_ERR_TIMEOUT then, the link still usable), then the link's
 * deadline. *n_p gets the page count and lens[0..n) their lengths (lens_cap entries at most);
 * page_status (lens_cap entries, may be NULL) each page's check. KVP_OK when every page passed,
 * KVP_ERR_CORRUPT when any failed (they are named in the log and in page_status: their bytes are
 * in buf but must not be used), KVP_ERR_TOO_LARGE (refused: more than cap bytes or lens_cap
 * pages; nothing received). After a recv that failed on the link (TIMEOUT, PEER_GONE, DEVICE:
 * the link is then broken) the GPU may still be writing or checking buf: free or reuse it only
 * after kvp_nccl_link_destroy returns, which aborts the transfer and waits for the check. */
kvp_status_t kvp_nccl_link_recv(kvp_nccl_link_h link, void *buf, size_t cap, uint32_t *lens,
                                uint32_t lens_cap, uint32_t wait_ms, uint32_t *n_p,
                                kvp_status_t *page_status);

/* KVP_OK while usable (set up, not broken); before set-up KVP_ERR_NOT_FOUND. */
kvp_status_t kvp_nccl_link_status(kvp_nccl_link_h link);
/* The communicator's unique id, once made (prefill) or received (decode); zeros before. */
void         kvp_nccl_link_unique_id(kvp_nccl_link_h link, uint8_t id[KVP_NCCL_ID_BYTES]);
/* CUDA devices this process can use (0 on any CUDA error, or in a build without NCCL). */
int          kvp_nccl_gpus(void);

#ifdef __cplusplus
}
#endif
#endif
