/* etcd.h - a small client of etcd's v3 HTTP JSON gateway (POST /v3/..., keys and values in
 * base64, int64 fields as JSON strings) over libcurl + jansson, and the node membership kept in
 * it (DESIGN.md §8): each kvpackd puts PREFIX<HOST:PORT> -> {"addr","pid","since","data_dir"}
 * under a lease it keeps alive; a client lists the prefix for the live peers, or watches it
 * (kvp_etcd_watch_*: a background thread on the streaming POST /v3/watch).
 * Thread-safety: one handle per thread (a handle is one keep-alive HTTP connection); only
 * kvp_etcd_cancel may come from another thread. */
#ifndef KVPACK_ETCD_H
#define KVPACK_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_ETCD_DEFAULT_PREFIX "/kvpack/nodes/"
#define KVP_ETCD_ADDR_MAX       264u /* HOST:PORT with a 255-byte host, and the NUL */

typedef struct kvp_etcd *kvp_etcd_h;

/* One key and its value as a range returned them (decoded from base64, NUL-terminated). */
typedef struct {
    char    *key;
    char    *value;
    size_t   value_len;
    int64_t  lease;
} kvp_etcd_kv_t;

typedef struct {
    uint32_t       n;
    kvp_etcd_kv_t *kv;
    int64_t        revision; /* the reply header's: the store's revision the range saw */
} kvp_etcd_kvs_t;

/* A registered node, as its value under the prefix says. */
typedef struct {
    char    addr[KVP_ETCD_ADDR_MAX]; /* HOST:PORT, the key's suffix */
    int64_t pid;
    int64_t since;                   /* unix seconds the node registered */
    char    data_dir[256];           /* "" for a DRAM-only node */
    char    host[256];               /* the node's hostname ("" from a node before it was kept) */
    char    pid_ns[96];              /* "BOOT_ID/PIDNS_INODE": the boot and PID namespace its pid
                                      * is in ("" unknown); a pid means a process only in it */
} kvp_etcd_member_t;

/* ---- gateway client ---- */
/* endpoints: "http://HOST:PORT[,http://HOST:PORT...]" (a bare HOST:PORT gets http://; spaces and
 * tabs around an item are dropped); a call that cannot reach one moves to the next. timeout_ms bounds each HTTP request (0: 3000). Connects to
 * nothing yet. KVP_ERR_INVALID (logged) for an empty or over-long list. */
kvp_status_t kvp_etcd_create(const char *endpoints, uint32_t timeout_ms, kvp_etcd_h *etcd_p);
void         kvp_etcd_destroy(kvp_etcd_h etcd); /* NULL is a no-op */
/* quiet 1: an endpoint that cannot be reached is logged at debug, not warn (for a caller that
 * retries and says so once itself). */
void         kvp_etcd_set_quiet(kvp_etcd_h etcd, int quiet);
/* Each later call ends within total_ms, over all the endpoints it tries (each request still
 * within timeout_ms; KVP_ERR_TIMEOUT when the time is up); 0: no total (the default). For a
 * call that must not hold up a shutdown. */
void         kvp_etcd_set_budget(kvp_etcd_h etcd, uint32_t total_ms);
/* From any thread: the call in progress on etcd ends within about 1 s, and every later call at
 * once, with KVP_ERR_CANCELED (not logged). For a shutdown that must not wait for another
 * thread's call to try every endpoint of a hung etcd. */
void         kvp_etcd_cancel(kvp_etcd_h etcd);
const char  *kvp_etcd_endpoint(kvp_etcd_h etcd); /* the one the last call used */

/* Every call: an unreachable endpoint gives KVP_ERR_PEER_UNREACHABLE (KVP_ERR_TIMEOUT when it
 * did not answer in time), an error body the gateway's code (5 -> KVP_ERR_NOT_FOUND, 3 ->
 * KVP_ERR_INVALID, 14 -> KVP_ERR_PEER_UNREACHABLE, 4 -> KVP_ERR_TIMEOUT, else KVP_ERR_IO), a body
 * that is not the JSON expected KVP_ERR_PROTOCOL; each logged once with the endpoint. The next
 * endpoint is tried after a transport failure, an HTTP 5xx, a body that is not JSON or gRPC code
 * 14, 4 or 2 (kvp_etcd_reply_check); when none serves, the last one's status. */
kvp_status_t kvp_etcd_lease_grant(kvp_etcd_h etcd, int64_t ttl_s, int64_t *lease_p);
/* Refresh the lease; *ttl_p is what is left (s). A lease that expired or was revoked:
 * KVP_ERR_NOT_FOUND. */
kvp_status_t kvp_etcd_lease_keepalive(kvp_etcd_h etcd, int64_t lease, int64_t *ttl_p);
kvp_status_t kvp_etcd_lease_revoke(kvp_etcd_h etcd, int64_t lease);
/* key -> value (strings), attached to lease (0: none), only if key is absent (if_value NULL: its
 * create_revision is 0) or holds if_value: one txn (POST /v3/kv/txn), which otherwise reads the
 * key. *put_p: 1 when written; else 0 and *held_p (may be NULL) what key holds (NULL when it is
 * absent; kvp_free it). */
kvp_status_t kvp_etcd_put_if(kvp_etcd_h etcd, const char *key, const char *value, int64_t lease,
                             const char *if_value, int *put_p, char **held_p);
/* Every key that starts with prefix, in key order. Free with kvp_etcd_kvs_free. */
kvp_status_t kvp_etcd_range_prefix(kvp_etcd_h etcd, const char *prefix, kvp_etcd_kvs_t **kvs_p);
void         kvp_etcd_kvs_free(kvp_etcd_kvs_t *kvs); /* NULL is a no-op */
/* The JSON body for every key under prefix: a range request, or with watch_from > 0 a watch
 * create_request from that revision (*body_p: kvp_free it). KVP_ERR_INVALID (logged) for an
 * empty prefix or one ending in 0xff. */
kvp_status_t kvp_etcd_prefix_body(const char *prefix, int64_t watch_from, char **body_p);

/* ---- membership ---- */
/* The live members under prefix, sorted by address; a key whose suffix is not HOST:PORT or whose
 * value is not a member object naming that address is skipped with a warning. *n_p may be 0.
 * Free *members_p with kvp_free. */
kvp_status_t kvp_etcd_members(kvp_etcd_h etcd, const char *prefix, kvp_etcd_member_t **members_p,
                              uint32_t *n_p);
/* Called with each key skipped as not a member; returns whether to log it (0: the caller
 * already warned about that key). */
typedef int (*kvp_etcd_skip_cb_t)(void *arg, const char *key);
/* The same, and the revision the range saw (a watch from revision + 1 misses nothing); a skipped
 * key is logged only when skip(arg, key) says so (skip NULL: always). */
kvp_status_t kvp_etcd_members_at(kvp_etcd_h etcd, const char *prefix,
                                 kvp_etcd_member_t **members_p, uint32_t *n_p,
                                 int64_t *revision_p, kvp_etcd_skip_cb_t skip, void *arg);
/* The member a key + value under prefix names, or KVP_ERR_PROTOCOL (not logged) when the key's
 * suffix is not HOST:PORT or the value not a member object naming that address. */
kvp_status_t kvp_etcd_member_from_kv(const char *prefix, const char *key, const char *value,
                                     size_t len, kvp_etcd_member_t *m);

/* ---- membership watch ---- */
/* A background thread that keeps the members under prefix current: it reads the range, then
 * watches the prefix from the range's revision + 1 (POST /v3/watch, a stream of JSON objects) and
 * applies each PUT / DELETE. A broken stream, an etcd restart or a compacted revision: reconnect
 * with backoff (100 ms doubling to 2 s), read the range again, watch again; while etcd is out of
 * reach the last members stay (one warning; info when back). Each change is logged at info.
 * A stream silent for KVP_ETCD_WATCH_IDLE_MS is ended the same way, so a hung member (its TCP
 * connection still up) is left for another endpoint within about that time + 2 s. A key under
 * the prefix that is not a member is warned about once, however many range reads see it (again
 * only after it was a member or gone). */
#define KVP_ETCD_WATCH_IDLE_MS 10000u
typedef struct kvp_etcd_watch *kvp_etcd_watch_h;

/* Reads the members once (etcd unreachable: its status, logged), then starts the thread. */
kvp_status_t kvp_etcd_watch_start(const char *endpoints, const char *prefix,
                                  kvp_etcd_watch_h *watch_p);
/* Stops the thread (promptly, also while etcd is down) and frees. NULL is a no-op. */
void         kvp_etcd_watch_stop(kvp_etcd_watch_h watch);
/* The generation of the published list: 1 at start, +1 for each change. Any thread; cheap. */
uint64_t     kvp_etcd_watch_generation(kvp_etcd_watch_h watch);
/* A copy of the published list, sorted by address (*members_p: kvp_free it; *n_p may be 0), and
 * its generation. Any thread. */
kvp_status_t kvp_etcd_watch_members(kvp_etcd_watch_h watch, kvp_etcd_member_t **members_p,
                                    uint32_t *n_p, uint64_t *generation_p);
/* qsort order of members: by address. */
int          kvp_etcd_member_cmp(const void *a, const void *b);
/* The JSON value a node registers (buf of cap bytes); KVP_ERR_TOO_LARGE when it does not fit. */
kvp_status_t kvp_etcd_member_json(const kvp_etcd_member_t *m, char *buf, size_t cap);
/* Parse a member's value stored under PREFIX<addr>; KVP_ERR_PROTOCOL when it is not one. */
kvp_status_t kvp_etcd_member_parse(const char *addr, const char *value, size_t len,
                                   kvp_etcd_member_t *m);

/* ---- the gateway's JSON, for tests: bodies as the gateway sends them ---- */
/* A lease grant or keepalive reply (plain or wrapped in "result"): ID and TTL (0 when absent). */
kvp_status_t kvp_etcd_parse_lease(const char *body, size_t len, int64_t *lease_p, int64_t *ttl_p);
/* A range reply; "kvs" absent is an empty list. */
kvp_status_t kvp_etcd_parse_range(const char *body, size_t len, kvp_etcd_kvs_t **kvs_p);
/* A txn reply whose failure branch is one range: *succeeded_p ("succeeded", absent when false);
 * when it failed, *kvs_p the range's keys (free with kvp_etcd_kvs_free), else NULL. */
kvp_status_t kvp_etcd_parse_txn(const char *body, size_t len, int *succeeded_p,
                                kvp_etcd_kvs_t **kvs_p);
/* KVP_OK for a body without "error"; else the status above (message copied to msg, cap bytes). */
kvp_status_t kvp_etcd_parse_error(const char *body, size_t len, char *msg, size_t cap);
/* A whole reply (HTTP status http, body): its status as kvp_etcd_parse_error's, a 5xx without an
 * error body KVP_ERR_PEER_UNREACHABLE; *next_p 1 when another endpoint may serve what this one
 * did not (HTTP 5xx, a body that is not JSON, gRPC codes 14, 4 and 2), 0 for an answer (success,
 * NOT_FOUND, INVALID, ...). */
kvp_status_t kvp_etcd_reply_check(long http, const char *body, size_t len, char *msg, size_t cap,
                                  int *next_p);
/* The watch stream: a sequence of JSON objects (newline-separated by etcd 3.4, split here by
 * brace depth outside strings, so no separator is needed), cut into chunks anywhere. */
typedef struct {
    char   *buf;                /* the message in progress */
    size_t  len, cap, max;      /* max: a longer message is refused */
    int     depth, in_str, esc;
} kvp_etcd_stream_t;
typedef kvp_status_t (*kvp_etcd_msg_cb_t)(void *arg, const char *msg, size_t len);

void         kvp_etcd_stream_init(kvp_etcd_stream_t *st, size_t max);
/* Feed one chunk: msg_cb gets each complete top-level object (borrowed for the call); a non-OK
 * return from it stops and is returned. Bytes outside an object other than whitespace:
 * KVP_ERR_PROTOCOL; a message over max: KVP_ERR_TOO_LARGE. */
kvp_status_t kvp_etcd_stream_feed(kvp_etcd_stream_t *st, const char *data, size_t len,
                                  kvp_etcd_msg_cb_t msg_cb, void *arg);
size_t       kvp_etcd_stream_pending(const kvp_etcd_stream_t *st); /* bytes of a cut message */
void         kvp_etcd_stream_reset(kvp_etcd_stream_t *st);         /* drop a cut message */
void         kvp_etcd_stream_free(kvp_etcd_stream_t *st);

/* One watch event: a PUT (value set) or a DELETE of key (decoded from base64). */
typedef struct {
    int      del;
    char    *key;
    char    *value;
    size_t   value_len;
    int64_t  mod_revision;
} kvp_etcd_event_t;

/* One message of the watch stream ("result" unwrapped). */
typedef struct {
    int64_t           revision;          /* header revision (0 when absent) */
    int               created, canceled;
    int64_t           compact_revision;  /* > 0: the start revision was compacted away */
    char              reason[128];       /* cancel_reason, or the error text */
    uint32_t          n;
    kvp_etcd_event_t *ev;
} kvp_etcd_watch_msg_t;

/* Parse one message; an {"error":...} message gives its status (reason holds the text), a body
 * that is not a watch response KVP_ERR_PROTOCOL. Clear msg with kvp_etcd_watch_msg_clear. */
kvp_status_t kvp_etcd_parse_watch(const char *body, size_t len, kvp_etcd_watch_msg_t *msg);
void         kvp_etcd_watch_msg_clear(kvp_etcd_watch_msg_t *msg);

/* Standard base64 with padding. encode: out holds 4 * ceil(len / 3) + 1 bytes, returns the
 * length written. decode: out holds len * 3 / 4 bytes; KVP_ERR_PROTOCOL on bad input. */
size_t       kvp_etcd_b64_encode(const void *in, size_t len, char *out);
kvp_status_t kvp_etcd_b64_decode(const char *in, size_t len, void *out, size_t *out_len_p);

#ifdef __cplusplus
}
#endif
#endif
