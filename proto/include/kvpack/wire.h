/* wire.h - kvpack control messages in plain C structs, and their protobuf encoding.
 * proto/wire.c is the only code that sees the generated Kvp__* types: it packs these structs into
 * protobuf (the UCX active-message header) and unpacks + validates received headers against the
 * length of the AM data that came with them (page lengths must sum to it, counts must match).
 * Any unpack or validation failure is KVP_ERR_PROTOCOL. Bulk bytes never pass through here. */
#ifndef KVPACK_WIRE_H
#define KVPACK_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/page.h"
#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_WIRE_VERSION    1u
#define KVP_WIRE_MAX_PAGES  4096u /* pages per PUT_PAGES / GET_PAGES message */
#define KVP_WIRE_MAX_KEYS   4096u /* keys per GET_PAGES / LOOKUP message */
#define KVP_WIRE_MAX_LAYERS 4096u
#define KVP_WIRE_MSG_MAX    256u  /* bytes of a reply message, NUL included */
#define KVP_WIRE_MAX_LIST   4096u /* sessions per LIST reply (and the largest limit asked) */
/* Packed bytes one LIST entry can take at most (a 127-byte sid, every varint at its widest):
 * a node sends at most (header limit - KVP_WIRE_LIST_SLACK) / KVP_WIRE_LIST_ENTRY_MAX entries. */
#define KVP_WIRE_LIST_ENTRY_MAX 248u /* 224 + version (11) + deleted (2) + damaged (2), rounded up */
#define KVP_WIRE_LIST_SLACK     128u

typedef enum {
    KVP_WIRE_OP_NONE        = 0,
    KVP_WIRE_OP_PUT_PAGES   = 1,
    KVP_WIRE_OP_PUT_SESSION = 2,
    KVP_WIRE_OP_GET_SESSION = 3,
    KVP_WIRE_OP_GET_PAGES   = 4,
    KVP_WIRE_OP_LOOKUP      = 5,
    KVP_WIRE_OP_SPILL       = 6,
    KVP_WIRE_OP_STAT        = 7,
    KVP_WIRE_OP_DELETE      = 8,
    KVP_WIRE_OP_LIST        = 9,
    KVP_WIRE_OP_APPEND      = 10,
    KVP_WIRE_OP_SCRUB       = 11,
    KVP_WIRE_OP_MAX         = 12
} kvp_wire_op_t;

#define KVP_WIRE_MAX_APPEND_TOKENS (1u << 20) /* new tokens per APPEND */

/* APPEND: tokens' K/V for a session's tail (AppendReq in kvpack.proto); data = K then V, each
 * layers * ntok * heads * head_dim values of dtype (KVP_DTYPE_F16 or F32). */
typedef struct {
    uint32_t  codec;       /* kvp_codec_id_t of sealed pages */
    uint64_t  fingerprint; /* chained into chunk keys */
    uint32_t  layers, heads, head_dim, page_tokens;
    uint32_t  dtype;       /* kvp_dtype_t */
    uint32_t  ntok;
    uint32_t  n_ids;       /* the current tail's ids, then the ntok new ones */
    uint32_t *ids;
    uint64_t  version;     /* optional: the record's new version (0: absent: the node's clock) */
    uint32_t  chunks;      /* with has_chunks: the session must exist with this many chunks */
    uint8_t   has_chunks;
    uint8_t   has_first_pos;
    uint64_t  first_pos;   /* with has_first_pos: the tokens the session holds before it */
    uint64_t  base;        /* with has_base: the version the session's record must be at (0 too) */
    uint8_t   has_base;
} kvp_wire_append_t;

/* A request. Arrays are borrowed when packing; after unpack they are owned by the struct and
 * freed by kvp_wire_req_clear. Fields not used by op are zero. */
typedef struct {
    kvp_wire_op_t op;
    uint64_t      req_id;
    uint32_t      deadline_ms;        /* time budget left when sent */
    uint64_t      ns;                 /* all ops but STAT; LIST: cursor namespace */
    char          sid[KVP_SID_MAX];   /* PUT_SESSION, GET_SESSION, SPILL, DELETE; LIST: cursor
                                       * session id, "" = no cursor (list from the start) */
    uint32_t      n_pages;            /* PUT_PAGES: page count and lengths (sum = data bytes);
                                       * PUT_SESSION: pages sent ahead of the record (may be 0) */
    uint32_t     *page_lens;
    uint32_t      record_len;         /* PUT_SESSION: record bytes (data = pages, then record) */
    uint32_t      n_keys;             /* GET_PAGES, LOOKUP */
    kvp_key128_t *keys;
    uint32_t      layers;             /* GET_PAGES, LOOKUP */
    uint32_t      start;              /* GET_PAGES: first item (key index * layers + layer) */
    uint32_t      max_bytes;          /* GET_PAGES: reply data budget; GET_SESSION: page bytes to
                                       * send after the record (0: none) */
    uint32_t      limit;              /* LIST: sessions wanted, 1..KVP_WIRE_MAX_LIST */
    uint64_t      version;            /* PUT_SESSION, DELETE: the write's version; 0 = absent
                                       * (the node uses its own clock) */
    uint32_t      deleted;            /* LIST: also list tombstones */
    uint32_t      inclusive;          /* LIST: start at the cursor's own session (needs one) */
    uint32_t      drop;               /* DELETE: drop a replica (version = the newest it may
                                       * have), no tombstone */
    kvp_wire_append_t append;         /* APPEND (with ns, sid) */
} kvp_wire_req_t;

typedef struct {
    uint64_t dram_bytes, dram_pages, dram_budget;
    uint64_t sessions, sessions_on_disk;
    uint64_t spills, restores, crc_failures, disk_errors;
    uint64_t uptime_ms, requests, bad_requests;
    uint64_t disk_bytes, disk_live_bytes; /* optional on the wire: 0 from an older node */
    uint64_t index_rebuilds, wal_dropped_bytes; /* optional likewise */
    uint64_t disk_free_bytes, disk_full_refusals; /* optional likewise */
    uint64_t connections, connections_max, connections_rejected; /* optional likewise */
} kvp_wire_stat_t;

/* One LIST entry (SessionInfo in kvpack.proto). */
#define KVP_WIRE_WHERE_DRAM 1u
#define KVP_WIRE_WHERE_DISK 2u
typedef struct {
    uint64_t ns;
    char     sid[KVP_SID_MAX];
    uint32_t layers, page_tokens, n_chunks, tail_tokens;
    uint32_t codec, heads, head_dim; /* the namespace profile's; 0 while it has none */
    uint32_t where;                  /* KVP_WIRE_WHERE_* */
    uint64_t bytes;                  /* page bytes the session names + its tail */
    uint64_t version;                /* record or tombstone version (0: before versions) */
    uint32_t deleted;                /* a tombstone (every count above is 0) */
    uint32_t damaged;                /* names a page the node lost (not served until put again) */
} kvp_wire_session_t;

/* A reply. Same ownership rules as kvp_wire_req_t. */
typedef struct {
    kvp_wire_op_t   op;
    uint64_t        req_id;
    kvp_status_t    status;
    char            message[KVP_WIRE_MSG_MAX];
    uint32_t        accepted;       /* PUT_PAGES */
    uint32_t        first_bad;      /* PUT_PAGES */
    uint32_t        record_len;     /* GET_SESSION (data = record, then n_pages pages) */
    uint64_t        version;        /* GET_SESSION: the record's version; with KVP_ERR_NOT_FOUND
                                     * its delete tombstone's (0: none; deleted_version) */
    uint32_t        disk_pages;     /* GET_SESSION: pages the node read from its SSD tier */
    uint64_t        disk_bytes;     /* GET_SESSION: their bytes (+ the tail's from disk) */
    uint32_t        n_pages;        /* GET_PAGES (sum of lengths = data bytes); GET_SESSION: the
                                     * record's first pages, after it in the data (may be 0) */
    uint32_t       *page_lens;
    uint32_t        hit_chunks;     /* LOOKUP */
    kvp_wire_stat_t stat;           /* STAT */
    uint32_t            n_sessions; /* LIST */
    kvp_wire_session_t *sessions;
    uint32_t            more;       /* LIST: sessions after the last one remain */
    uint32_t            sealed;     /* APPEND: chunks sealed */
    struct {
        uint64_t bytes, bad_pages, elapsed_ms;
        uint32_t index_rebuilt;
    } scrub;                        /* SCRUB */
} kvp_wire_rep_t;

const char *kvp_wire_op_name(kvp_wire_op_t op); /* never NULL */

/* Pack into a fresh kvp_malloc'd buffer (*buf_p, transferred to the caller). Reply bodies are
 * packed only for status KVP_OK. KVP_ERR_INVALID for a struct that would not validate. */
kvp_status_t kvp_wire_req_pack(const kvp_wire_req_t *req, uint8_t **buf_p, size_t *len_p);
kvp_status_t kvp_wire_rep_pack(const kvp_wire_rep_t *rep, uint8_t **buf_p, size_t *len_p);

/* Unpack len bytes of header that arrived with data_len bytes of AM data, and validate.
 * KVP_ERR_PROTOCOL for anything malformed; req_id is filled in whenever the protobuf itself
 * decoded, so an error reply can still be matched. Clear the struct even after a failure. */
kvp_status_t kvp_wire_req_unpack(const void *buf, size_t len, uint64_t data_len,
                                 kvp_wire_req_t *req);
kvp_status_t kvp_wire_rep_unpack(const void *buf, size_t len, uint64_t data_len,
                                 kvp_wire_rep_t *rep);
void         kvp_wire_req_clear(kvp_wire_req_t *req);
void         kvp_wire_rep_clear(kvp_wire_rep_t *rep);

/* ---- NCCL link messages (transfer/xfer_nccl.c; LinkMsg in kvpack.proto) ----
 * Each is the header of a UCX message without data, or, when larger than the transport's largest
 * header (a BATCH of thousands of lengths), the data of one with an empty header (xfer_nccl.c
 * unpacks that data with data_len 0). Version checked first: one of another link version
 * unpacks as KVP_ERR_UNSUPPORTED with kind and version filled in (the link then refuses the peer
 * by name), anything malformed as KVP_ERR_PROTOCOL. */
#define KVP_WIRE_LINK_VERSION         1u
#define KVP_WIRE_NCCL_ID_BYTES        128u          /* NCCL_UNIQUE_ID_BYTES (xfer_nccl.c asserts) */
#define KVP_WIRE_LINK_NAME_MAX        64u           /* a device name's bytes, NUL included */
#define KVP_WIRE_LINK_MAX_BATCH_BYTES (16ull << 30) /* page bytes of one batch */

typedef enum {
    KVP_WIRE_LINK_NONE   = 0,
    KVP_WIRE_LINK_HELLO  = 1, /* prefill -> decode: NCCL version, unique id, device */
    KVP_WIRE_LINK_ACCEPT = 2, /* decode -> prefill: status (refusal: why), NCCL version, device */
    KVP_WIRE_LINK_BATCH  = 3, /* sender -> receiver: page lengths of the batch that follows */
    KVP_WIRE_LINK_READY  = 4, /* receiver -> sender: its receives are posted, or refused */
    KVP_WIRE_LINK_ACK    = 5, /* receiver -> sender: the GPU check, one status per page */
    KVP_WIRE_LINK_CLOSE  = 6  /* either side, last: it closed the link; status and why */
} kvp_wire_link_kind_t;

typedef struct {
    int32_t  index;                        /* CUDA device; -1: none usable */
    uint32_t cc;                           /* compute capability major * 10 + minor */
    char     name[KVP_WIRE_LINK_NAME_MAX]; /* truncated to fit */
    char     why[KVP_WIRE_MSG_MAX];        /* index -1: the reason (truncated to fit) */
} kvp_wire_link_dev_t;

/* Same ownership rules as kvp_wire_req_t; fields not used by kind are zero. */
typedef struct {
    kvp_wire_link_kind_t kind;
    uint32_t             version;        /* packed as given, 0 = KVP_WIRE_LINK_VERSION (tests
                                          * pack others); unpacked: the sender's */
    uint32_t             nccl_version;   /* HELLO, ACCEPT: ncclGetVersion's code */
    uint8_t              unique_id[KVP_WIRE_NCCL_ID_BYTES]; /* HELLO */
    kvp_wire_link_dev_t  device;         /* HELLO, ACCEPT: the sender's */
    kvp_status_t         status;         /* ACCEPT, READY, ACK, CLOSE */
    char                 message[KVP_WIRE_MSG_MAX]; /* ACCEPT, READY, ACK, CLOSE: why
                                          * (truncated) */
    uint64_t             batch_id;       /* BATCH, READY, ACK */
    uint32_t             n_pages;        /* BATCH: 1..KVP_WIRE_MAX_PAGES lengths; ACK: statuses
                                          * (0..KVP_WIRE_MAX_PAGES) */
    uint32_t            *page_lens;      /* BATCH: each a possible page, summing to at most
                                          * KVP_WIRE_LINK_MAX_BATCH_BYTES */
    uint32_t             budget_ms;      /* BATCH: the sender's time left for it; 0: not said */
    kvp_status_t        *page_status;    /* ACK: known statuses, none INPROGRESS */
} kvp_wire_link_t;

const char  *kvp_wire_link_kind_name(kvp_wire_link_kind_t kind); /* never NULL */
kvp_status_t kvp_wire_link_pack(const kvp_wire_link_t *m, uint8_t **buf_p, size_t *len_p);
/* data_len: the AM data bytes that came with the header (link messages carry none). */
kvp_status_t kvp_wire_link_unpack(const void *buf, size_t len, uint64_t data_len,
                                  kvp_wire_link_t *m);
void         kvp_wire_link_clear(kvp_wire_link_t *m);

#ifdef __cplusplus
}
#endif
#endif
