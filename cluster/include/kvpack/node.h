/* node.h - the kvpack node: one store (DRAM pool + RocksDB directory) served over the transfer
 * layer. kvpackd and `kvpack serve` both call kvp_node_main, so there is one way to run a node.
 * Main flow: kvp_node_main (options, signals) -> kvp_node_run -> kvp_xfer_wait loop -> node_recv
 *            -> kvp_wire_req_unpack -> a worker thread: store call -> reply (transport thread). */
#ifndef KVPACK_NODE_H
#define KVPACK_NODE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"
#include "kvpack/store.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kvp_node_params_field {
    KVP_NODE_PARAM_HOST        = KVP_BIT(0),
    KVP_NODE_PARAM_PORT        = KVP_BIT(1),
    KVP_NODE_PARAM_DATA_DIR    = KVP_BIT(2),
    KVP_NODE_PARAM_DRAM_BUDGET = KVP_BIT(3),
    KVP_NODE_PARAM_DURABILITY  = KVP_BIT(4),
    KVP_NODE_PARAM_READY_FILE  = KVP_BIT(5),
    KVP_NODE_PARAM_MAX_MSG     = KVP_BIT(6),
    KVP_NODE_PARAM_HTTP        = KVP_BIT(7), /* http_host + http_port */
    KVP_NODE_PARAM_HTTP_READY_FILE = KVP_BIT(8),
    KVP_NODE_PARAM_ETCD        = KVP_BIT(9), /* etcd + etcd_prefix + advertise + etcd_ttl_s */
    KVP_NODE_PARAM_TOMB_TTL    = KVP_BIT(10),
    KVP_NODE_PARAM_WORKERS     = KVP_BIT(11),
    KVP_NODE_PARAM_IDLE_TTL    = KVP_BIT(12),
    KVP_NODE_PARAM_SYNC_INTERVAL = KVP_BIT(13),
    KVP_NODE_PARAM_COMPACT       = KVP_BIT(14),
    KVP_NODE_PARAM_SEGMENT_MIB   = KVP_BIT(15),
    KVP_NODE_PARAM_SCRUB_MIB     = KVP_BIT(16),
    KVP_NODE_PARAM_DISK_RESERVE  = KVP_BIT(17),
    KVP_NODE_PARAM_RECV_TIMEOUT  = KVP_BIT(18),
    KVP_NODE_PARAM_PUT_GRACE     = KVP_BIT(19),
    KVP_NODE_PARAM_SEND_TIMEOUT  = KVP_BIT(20),
    KVP_NODE_PARAM_MAX_CONNS     = KVP_BIT(21),
};

#define KVP_NODE_SCRUB_MIB_S 4u /* default scrubbing rate of a node with a data dir */

typedef struct kvp_node_params {
    uint64_t         field_mask;    /* MUST be first */
    const char      *host;          /* listen address; default "127.0.0.1" */
    uint16_t         port;          /* 0 = pick a free port (default) */
    const char      *data_dir;      /* RocksDB directory; NULL = DRAM only */
    size_t           dram_budget;   /* default: the store's default */
    kvp_durability_t durability;    /* default KVP_DURABILITY_SPILL */
    const char      *ready_file;    /* the bound port is written here once listening */
    size_t           max_msg_bytes; /* largest request data accepted; default 256 MiB */
    const char      *http_host;     /* with KVP_NODE_PARAM_HTTP: serve /health and /metrics here */
    uint16_t         http_port;     /* 0 = pick a free port */
    const char      *http_ready_file; /* the bound HTTP port is written here once listening */
    const char      *etcd;          /* with KVP_NODE_PARAM_ETCD: "URL[,URL...]" to register in */
    const char      *etcd_prefix;   /* NULL: KVP_ETCD_DEFAULT_PREFIX */
    const char      *advertise;     /* HOST:PORT clients use; NULL: host and the bound port */
    uint32_t         etcd_ttl_s;    /* lease TTL; 0: 10 */
    uint32_t         tomb_ttl_s;    /* delete tombstones kept this long; default 7 days */
    uint32_t         workers;       /* request worker threads, 1..64; default 4 */
    uint32_t         idle_ttl_s;    /* sessions not put or fetched this long are removed (DRAM
                                     * and disk, no tombstone); default 0 = never */
    uint32_t         sync_interval_ms; /* KVP_DURABILITY_INTERVAL: ms between background
                                        * syncs, 1..60000; default 100 */
    double           compact_dead_ratio; /* segment compaction threshold, 0..1 (0: off);
                                          * default 0.5 (kvp_store_params_t) */
    uint32_t         segment_mib;   /* segment file size, 1..16384 MiB; default 256 */
    uint32_t         scrub_mib_s;   /* scrubbing rate in MiB/s, 0 = off; default 4 */
    uint32_t         disk_reserve_mib; /* disk reserve (kvp_store_params_t disk_reserve), 0 =
                                        * off; default the store's */
    uint32_t         recv_timeout_s; /* a request whose data has not all arrived this long after
                                      * its receive began (+1 s per 10 MB) closes its connection
                                      * (kvp_xfer_params_t recv_timeout_ms); default 30 */
    uint32_t         send_timeout_s; /* a client that takes none of its replies this long (+1 s
                                      * per 10 MB of all waiting) is closed, releasing the
                                      * pages they pinned (kvp_xfer_params_t send_timeout_ms);
                                      * default 30 */
    uint32_t         put_grace_s;   /* a page put with no record naming it yet outlives its last
                                     * name this long (kvp_store_params_t put_grace_ms); default 60 */
    uint32_t         max_conns;     /* client connections held at once, more rejected at once
                                     * (kvp_xfer_params_t max_conns); 0 = no limit; default from
                                     * the open files limit (kvp_node_max_conns_default) */
} kvp_node_params_t;

/* Serve until *stop becomes non-zero (a signal handler sets it). Prints the bound address on
 * stdout and writes the port to ready_file once listening. With KVP_NODE_PARAM_HTTP an HTTP
 * thread answers GET /health (200 "ok" while serving, 503 while starting or shutting down) and
 * GET /metrics (Prometheus text) from before the store opens until after it is closed.
 * With KVP_NODE_PARAM_ETCD the node registers in etcd once listening (KVP_ERR_* and no serving
 * when it cannot), keeps its lease alive while it serves and revokes it on the way out. */
kvp_status_t kvp_node_run(const kvp_node_params_t *params, volatile sig_atomic_t *stop);

/* The default --max-conns under the soft open files limit L now (0, no limit, when it is
 * unlimited): each client connection costs the node 2 descriptors, the store may hold
 * kvp_store_fd_budget() (L/4 within 256..65536, plus 256), and HTTP, etcd and UCX itself about
 * 128: (L - min(max(L / 4, 256), 65536) - 384) / 2, at least 16 (192 for L = 1024, 491328 for
 * L = 1048576). */
uint32_t kvp_node_max_conns_default(void);

/* The node command line (kvpackd and `kvpack serve`): parses options, installs SIGTERM/SIGINT
 * handlers for a clean shutdown, runs the node. prog names the command in messages. Returns a
 * process exit status (0 clean shutdown, 1 failure, 2 usage). */
int kvp_node_main(const char *prog, int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
