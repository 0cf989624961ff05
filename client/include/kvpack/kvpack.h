/* kvpack.h - libkvpack, the client API an inference engine uses to talk to kvpackd nodes.
 *
 * A client holds one UCX worker and endpoints to nodes. Pages are produced by kvp_page_encode
 * (codec.h) and shipped as-is: quantized codes with their scales and CRC, end to end. Every call
 * has a deadline (params timeout_ms); a dead or silent peer yields KVP_ERR_TIMEOUT /
 * KVP_ERR_PEER_GONE / KVP_ERR_PEER_UNREACHABLE, never a hang. A call that failed for its
 * connection drops it, so the next call connects afresh; a read (get_session, lookup, list,
 * stat) whose connection had died with a node restart is sent once more on a new one, so it
 * does not fail; a write is not (it may have reached the node). Statuses from the node (unknown
 * session, bad CRC, malformed message) come back as the node's kvp_status_t.
 * Thread-safety: one client per thread. */
#ifndef KVPACK_KVPACK_H
#define KVPACK_KVPACK_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/codec.h"
#include "kvpack/page.h"
#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_client *kvp_client_h;

enum kvp_client_params_field {
    KVP_CLIENT_PARAM_SERVER     = KVP_BIT(0),
    KVP_CLIENT_PARAM_TIMEOUT_MS = KVP_BIT(1),
    KVP_CLIENT_PARAM_BATCH      = KVP_BIT(2),
    KVP_CLIENT_PARAM_INFLIGHT   = KVP_BIT(3),
};

typedef struct kvp_client_params {
    uint64_t    field_mask;   /* MUST be first */
    const char *server;       /* "host:port" of the node (borrowed) */
    uint32_t    timeout_ms;   /* per-request deadline; default 10000 */
    size_t      batch_bytes;  /* page bytes per PUT_PAGES message, and in flight per get
                               * (max_inflight GET_PAGES of batch_bytes / max_inflight each);
                               * default 4 MiB */
    uint32_t    max_inflight; /* PUT_PAGES / GET_PAGES messages in flight at once, 1..8;
                               * default 4 */
} kvp_client_params_t;

/* Node statistics as reported by STAT. */
typedef struct {
    uint64_t dram_bytes, dram_pages, dram_budget;
    uint64_t sessions, sessions_on_disk;
    uint64_t spills, restores, crc_failures, disk_errors;
    uint64_t uptime_ms;
    uint64_t disk_bytes, disk_live_bytes; /* segment files' size and the part still in use (0:
                                           * DRAM only, or an older node) */
    uint64_t requests, bad_requests;      /* received since start (this STAT included), and
                                           * the malformed or refused ones among them */
    uint64_t index_rebuilds;    /* the node's RocksDB index rebuilt after damage, since start */
    uint64_t wal_dropped_bytes; /* damaged WAL bytes its start dropped (the writes are lost) */
    uint64_t disk_free_bytes;   /* free space of its data dir's filesystem (0: DRAM only, or an
                                 * older node) */
    uint64_t disk_full_refusals; /* puts and spills refused at its disk reserve, since start */
    uint64_t connections;       /* client connections open (0 from an older node) */
    uint64_t connections_max;   /* its --max-conns (0: no limit, or an older node) */
    uint64_t connections_rejected; /* connection requests refused at it, since start */
} kvp_node_stat_t;

/* A fetched session: record plus every page, in order page[chunk * layers + layer]. */
typedef struct {
    kvp_session_desc_t desc;
    uint32_t           n_pages;
    uint8_t          **pages;     /* each CRC-verified by the client before return; they point
                                   * into blocks owned by this struct (read-only, 16-byte aligned) */
    size_t            *page_lens;
    uint64_t           wire_bytes; /* bytes received for this session */
    uint64_t           version;    /* the record's version (0: written before versions) */
    uint32_t           disk_pages; /* pages the serving node read back from its SSD tier for this
                                    * get (0: all were in its DRAM; also from an older node) */
    uint64_t           disk_bytes; /* their bytes, plus the fp16 tail's when read from disk */
} kvp_session_pages_t;

kvp_status_t kvp_client_create(const kvp_client_params_t *params, kvp_client_h *client_p);
void         kvp_client_destroy(kvp_client_h client); /* NULL is a no-op */
/* The reason the node gave when it last refused a request of the latest call on this client
 * ("session a names chunk 0 layer 0, which is not in the store"), or "" if it refused none (a
 * local or transport error); owned by the client, valid until its next call. */
const char  *kvp_client_node_message(kvp_client_h client);

/* Ship n pages (borrowed) to the node in batches; returns the first error the node reported. */
kvp_status_t kvp_client_put_pages(kvp_client_h client, uint64_t ns, const void *const *pages,
                                  const size_t *lens, size_t n);
/* Set (create or replace) a session record; its pages must have been put. The record's version
 * is kvp_version_now(). */
kvp_status_t kvp_client_put_session(kvp_client_h client, uint64_t ns, const char *sid,
                                    const kvp_session_desc_t *desc);

/* Versions (last writer wins): every record carries the version its writer chose, ns since the
 * epoch from the writer's wall clock. A node refuses a put older than the record or delete
 * tombstone it holds for (ns, sid) with KVP_ERR_STALE (nothing changes); an equal one replaces
 * the record (an idempotent retry), except against a tombstone: deletes win ties. */
uint64_t     kvp_version_now(void); /* CLOCK_REALTIME ns, strictly increasing in this process */
/* As kvp_client_put_session with the caller's version (0: the node's clock). */
kvp_status_t kvp_client_put_session_version(kvp_client_h client, uint64_t ns, const char *sid,
                                            const kvp_session_desc_t *desc, uint64_t version);
/* A whole session in one call: its pages (borrowed; n may be 0 when the node holds them all) and
 * its record at version (0: the node's clock). The pages that fit one message travel with the
 * record in one PUT_SESSION (a session of up to batch_bytes is one round trip); any before them
 * go first as pipelined PUT_PAGES and must all land. The node writes the record only when it took
 * every page that came with it, so on an error the session is as it was (pages already stored
 * stay, unnamed, as after a failed kvp_client_put_pages). */
kvp_status_t kvp_client_put_session_pages(kvp_client_h client, uint64_t ns, const char *sid,
                                          const kvp_session_desc_t *desc,
                                          const void *const *pages, const size_t *lens, size_t n,
                                          uint64_t version);
/* Streamed put: layer l ships while the caller encodes layer l + 1. A stream has its own
 * connection to params->server and a shipping thread; push queues a list of pages (borrowed
 * until finish or close returns: keep them unchanged) and returns at once, the thread sends the
 * lists in order as kvp_client_put_pages would. finish waits until every pushed page landed, then
 * writes the record with the n pages given to it (as kvp_client_put_session_pages: one request
 * when they fit a batch); the first error of any push or of the record is returned and the
 * record is then not written. The record needs every page of the session on the node it lands
 * on: when the stream's client has to connect anew mid-session (its node restarted and lost the
 * pages shipped before with the old process, or only the connection dropped) the stream puts
 * every list shipped so far again on the new connection, then the rest (the node takes a page
 * put twice). A list whose put fails KVP_ERR_PEER_GONE (the connection died under it) goes the
 * same way, 3 tries in all, then the session fails. A record refused after connecting anew under
 * it is KVP_ERR_PEER_GONE.
 * After an error push returns it at once (nothing more is queued) until finish reports it (push
 * of n = 0 pages only asks for it); the stream can then carry the next session. close drops
 * lists not yet shipped (waiting for the one in flight). One thread per stream (push and
 * finish). */
typedef struct kvp_put_stream *kvp_put_stream_h;
kvp_status_t kvp_put_stream_open(const kvp_client_params_t *params, uint64_t ns,
                                 kvp_put_stream_h *stream_p);
kvp_status_t kvp_put_stream_push(kvp_put_stream_h stream, const void *const *pages,
                                 const size_t *lens, size_t n);
kvp_status_t kvp_put_stream_finish(kvp_put_stream_h stream, const char *sid,
                                   const kvp_session_desc_t *desc, const void *const *pages,
                                   const size_t *lens, size_t n, uint64_t version);
void         kvp_put_stream_close(kvp_put_stream_h stream); /* NULL is a no-op */
/* Fetch a session and all its pages; free with kvp_session_pages_free. Every sealed page is
 * checked (CRC, chunk key, layer) and all must share one codec, rotation flags and geometry that
 * agree with the record (P) and its fp16 tail, else KVP_ERR_WRONG_CODEC (KVP_ERR_CORRUPT for a
 * bad CRC). Pages are fetched with up to max_inflight GET_PAGES in flight. */
kvp_status_t kvp_client_get_session(kvp_client_h client, uint64_t ns, const char *sid,
                                    kvp_session_pages_t **out_p);
/* As kvp_client_get_session, and the caller states what it can decode: expect->codec, heads,
 * head_dim, page_tokens and (flags & KVP_PAGE_F_V_PREROT) must match every sealed page (the
 * tail: fp16 of that H, D, P), else KVP_ERR_WRONG_CODEC and nothing is returned. Other fields
 * of expect are ignored. KVP_ERR_INVALID when expect is NULL or not a valid codec geometry. */
kvp_status_t kvp_client_get_session_expect(kvp_client_h client, uint64_t ns, const char *sid,
                                           const kvp_page_params_t *expect,
                                           kvp_session_pages_t **out_p);
/* As kvp_client_get_session (_expect when expect is not NULL), and cb(cb_arg, first, n, pages,
 * lens) is called in this thread for each run of pages as soon as they are verified (items first
 * .. first + n - 1, item = chunk * layers + layer; runs come in item order except when a short
 * reply is asked again), while the later GET_PAGES are in flight: the decode of the first layers
 * overlaps the arrival of the rest. The pages are those of *out_p (valid until it is freed); if
 * the call fails they are void (nothing is returned). Mapping an item to its layer needs only the
 * model's layer count. The transport does not move while cb runs: a cb that keeps this thread
 * longer than the node's --send-timeout (default 30 s) lets the node take the client for hung
 * and close the connection (the call fails, the pages so far are void), and one that keeps it
 * past 30 s (plus 1 s per 10 MB) from the start of a large reply's receive fails that receive
 * (KVP_ERR_TIMEOUT). The time cb takes does not count against the client's timeout. */
typedef void (*kvp_client_pages_cb_t)(void *cb_arg, uint32_t first, uint32_t n,
                                      const void *const *pages, const size_t *lens);
kvp_status_t kvp_client_get_session_cb(kvp_client_h client, uint64_t ns, const char *sid,
                                       const kvp_page_params_t *expect, kvp_client_pages_cb_t cb,
                                       void *cb_arg, kvp_session_pages_t **out_p);
void         kvp_session_pages_free(kvp_session_pages_t *sp); /* NULL is a no-op */
/* Append tokens to a session's fp16 tail on the node (the decode->store return path, DESIGN 4:
 * the decode adds the turn's tokens, and the next turn's prefill finds the sealed chunks with
 * lookup). Every time the tail reaches page_tokens tokens the node seals them into pages of codec
 * (the namespace's) under the next chunk key, kvp_chunk_key(previous key, ns_fingerprint, their
 * ids). k, v: [layers][ntok][heads][head_dim] of dtype; ids: the ids of the session's current
 * tail tokens, then the ntok new ones (n_ids = tail_tokens + ntok); first_pos: the position of
 * the first new token, i.e. the tokens the session holds before it (sealed + tail; 0 for the
 * first append, which creates the session). The record is stamped with the node's clock as a
 * put without a version is, above its previous version (a copy elsewhere without the append is
 * then older, and repair replaces it). *sealed_p (may be NULL): chunks sealed.
 * KVP_ERR_INVALID for a geometry that differs from the session's, a wrong ids count, or a session
 * that holds another number of tokens than first_pos (an append retried after it went through,
 * or another writer's that came first: nothing is sealed twice), KVP_ERR_NOT_FOUND when
 * first_pos > 0 and the session is gone, KVP_ERR_WRONG_CODEC for another codec than the
 * namespace's, KVP_ERR_BAD_INPUT_DATA for NaN/Inf; on an error the session is as it was. A put of
 * the same session at the same time is not ordered against an append. One node: over a cluster's
 * replicas use kvp_cluster_append. */
typedef struct {
    kvp_codec_id_t  codec;          /* of sealed pages */
    uint64_t        ns_fingerprint; /* chained into chunk keys */
    uint32_t        layers, heads, head_dim, page_tokens;
    kvp_dtype_t     dtype;          /* of k and v */
    const void     *k, *v;          /* [layers][ntok][heads][head_dim] */
    uint32_t        ntok;
    const uint32_t *ids;            /* tail_tokens + ntok ids */
    uint32_t        n_ids;
    uint64_t        first_pos;      /* tokens the session holds before this append (checked;
                                     * kvp_cluster_append checks its chunks instead) */
} kvp_append_t;
kvp_status_t kvp_client_append(kvp_client_h client, uint64_t ns, const char *sid,
                               const kvp_append_t *append, uint32_t *sealed_p);
/* One copy's part of a replicated append (kvp_cluster_append): as kvp_client_append, but the
 * session must exist (KVP_ERR_NOT_FOUND) holding exactly chunks sealed chunks and, unless base is
 * NULL, its record must be at version *base (KVP_ERR_INVALID: this copy missed a write, or has
 * one the caller has not seen), and its record takes version (above its own, else
 * KVP_ERR_STALE; 0: the node's clock, above its own), so repair can tell a copy that missed it. */
kvp_status_t kvp_client_append_at(kvp_client_h client, uint64_t ns, const char *sid,
                                  const kvp_append_t *append, uint32_t chunks, uint64_t version,
                                  const uint64_t *base, uint32_t *sealed_p);
/* How many leading chunks of keys[0..n) the node holds on all layers. */
kvp_status_t kvp_client_lookup(kvp_client_h client, uint64_t ns, const kvp_key128_t *keys,
                               uint32_t n, uint32_t layers, uint32_t *hit_chunks_p);
/* Ask the node to spill a session to its SSD tier now (operators, demo, tests). */
kvp_status_t kvp_client_spill(kvp_client_h client, uint64_t ns, const char *sid);
kvp_status_t kvp_client_stat(kvp_client_h client, kvp_node_stat_t *stat_p);

/* One scrubbing pass as the node reports it (kvp_client_scrub). */
typedef struct {
    uint64_t bytes;         /* page bytes read back from disk and checked */
    uint64_t bad_pages;     /* pages that failed their check: written again from DRAM, or dropped
                             * (their sessions then list as damaged, for kvpack repair) */
    uint64_t elapsed_ms;    /* how long the pass took on the node */
    uint32_t index_rebuilt; /* 1: a block of the node's RocksDB index failed its checksum and the
                             * index was rebuilt */
} kvp_scrub_result_t;

/* One whole scrubbing pass on the node now (SCRUB): every page on its disk read back and checked,
 * then every block of its index. It takes as long as the disk does (the client's timeout_ms
 * bounds the wait); KVP_ERR_BUSY while another SCRUB runs there, KVP_ERR_UNSUPPORTED on a node
 * without a data dir. */
kvp_status_t kvp_client_scrub(kvp_client_h client, kvp_scrub_result_t *out);

/* Delete a session: its record and every page no other session names, in DRAM and on the
 * node's disk (a restart does not bring it back). Pages shared with other sessions stay.
 * KVP_ERR_NOT_FOUND when the node has no such session. The node keeps a tombstone at version
 * kvp_version_now() (also when it had no such session), so an older copy put later is refused. */
kvp_status_t kvp_client_delete_session(kvp_client_h client, uint64_t ns, const char *sid);
/* As kvp_client_delete_session at the caller's version; KVP_ERR_STALE when the node's record
 * is newer (it stays). */
kvp_status_t kvp_client_delete_session_version(kvp_client_h client, uint64_t ns, const char *sid,
                                               uint64_t version);
/* Repair moving a replica away: remove the node's copy if its version is <= version (else
 * KVP_ERR_STALE: a newer put landed), keeping no tombstone. */
kvp_status_t kvp_client_drop_session(kvp_client_h client, uint64_t ns, const char *sid,
                                     uint64_t version);

/* One session a node holds (DRAM or disk), as listed by kvp_client_list_sessions. */
enum kvp_session_where {
    KVP_SESSION_IN_DRAM = KVP_BIT(0), /* hot: pages and tail in the node's DRAM pool */
    KVP_SESSION_ON_DISK = KVP_BIT(1)  /* its current record is in the node's SSD tier (not when
                                       * only an older one is: a put under spill not spilled yet) */
};

typedef struct {
    uint64_t       ns;
    char           sid[KVP_SID_MAX];
    uint32_t       layers;
    uint32_t       page_tokens;      /* P; tokens = n_chunks * P + tail_tokens */
    uint32_t       n_chunks;
    uint32_t       tail_tokens;
    kvp_codec_id_t codec;            /* the namespace's codec, heads and head_dim: 0 while the */
    uint32_t       heads, head_dim;  /* namespace holds no sealed page (a tail-only session) */
    uint32_t       where;            /* kvp_session_where bits */
    uint64_t       bytes;            /* page bytes the session names (shared prefix pages count
                                      * in every session naming them) + its fp16 tail */
    uint64_t       version;          /* record (or tombstone) version; 0: before versions */
    uint32_t       deleted;          /* a delete tombstone (KVP_LIST_DELETED): only ns, sid and
                                      * version are set */
    uint32_t       damaged;          /* the node lost a page it names (failed its CRC on read, or
                                      * missing on disk): it answers KVP_ERR_CORRUPT for it until
                                      * the session is put again (kvpack repair copies it back) */
} kvp_session_info_t;

typedef struct {
    uint32_t            n;
    kvp_session_info_t *sessions;  /* n entries in (ns, sid) order */
    int                 truncated; /* stopped at max while the node holds more */
    uint32_t            requests;  /* LIST round trips it took */
} kvp_session_list_t;

/* List the node's sessions, page by page: each LIST asks for page_size sessions after the last
 * one received (0: as many as the node will send; it caps a reply to fit one message header),
 * until the node has no more or max sessions were received (0: no limit). Sessions put or
 * deleted meanwhile may or may not appear; none is listed twice. Free with
 * kvp_session_list_free. */
kvp_status_t kvp_client_list_sessions(kvp_client_h client, uint32_t page_size, uint32_t max,
                                      kvp_session_list_t **out_p);
void         kvp_session_list_free(kvp_session_list_t *list); /* NULL is a no-op */

#define KVP_LIST_DELETED KVP_BIT(0) /* also list delete tombstones (deleted = 1) */
/* The node's entry for one session (one LIST at the session itself): its record, or its delete
 * tombstone (deleted = 1, only ns, sid and version set); KVP_ERR_NOT_FOUND when it has neither.
 * A node older than this call ignores the request's inclusive flag and lists the session after
 * it, so every session looks absent there. */
kvp_status_t kvp_client_session_info(kvp_client_h client, uint64_t ns, const char *sid,
                                     kvp_session_info_t *out);
/* As kvp_client_list_sessions, with flags (KVP_LIST_DELETED). */
kvp_status_t kvp_client_list_sessions_ex(kvp_client_h client, uint32_t page_size, uint32_t max,
                                         uint64_t flags, kvp_session_list_t **out_p);

#ifdef __cplusplus
}
#endif
#endif
