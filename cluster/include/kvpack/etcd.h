/* etcd.h - a small client of etcd's v3 HTTP JSON gateway (POST /v3/..., keys and values in
 * base64, int64 fields as JSON strings) over libcurl + jansson, and the node membership kept in
 * it (DESIGN.md §8): each kvpackd puts PREFIX<HOST:PORT> -> {"addr","pid","since","data_dir"}
 * under a lease it keeps alive; a client lists the prefix for the live peers.
 * Thread-safety: one handle per thread (a handle is one keep-alive HTTP connection). */
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
} kvp_etcd_kvs_t;

/* A registered node, as its value under the prefix says. */
typedef struct {
    char    addr[KVP_ETCD_ADDR_MAX]; /* HOST:PORT, the key's suffix */
    int64_t pid;
    int64_t since;                   /* unix seconds the node registered */
    char    data_dir[256];           /* "" for a DRAM-only node */
} kvp_etcd_member_t;

/* ---- gateway client ---- */
/* endpoints: "http://HOST:PORT[,http://HOST:PORT...]" (a bare HOST:PORT gets http://); a call that
 * cannot reach one moves to the next. timeout_ms bounds each HTTP request (0: 3000). Connects to
 * nothing yet. KVP_ERR_INVALID (logged) for an empty or over-long list. */
kvp_status_t kvp_etcd_create(const char *endpoints, uint32_t timeout_ms, kvp_etcd_h *etcd_p);
void         kvp_etcd_destroy(kvp_etcd_h etcd); /* NULL is a no-op */
const char  *kvp_etcd_endpoint(kvp_etcd_h etcd); /* the one the last call used */

/* Every call: an unreachable endpoint gives KVP_ERR_PEER_UNREACHABLE (KVP_ERR_TIMEOUT when it
 * did not answer in time), an error body the gateway's code (5 -> KVP_ERR_NOT_FOUND, 3 ->
 * KVP_ERR_INVALID, else KVP_ERR_IO), a body that is not the JSON expected KVP_ERR_PROTOCOL; each
 * logged once with the endpoint. */
kvp_status_t kvp_etcd_lease_grant(kvp_etcd_h etcd, int64_t ttl_s, int64_t *lease_p);
/* Refresh the lease; *ttl_p is what is left (s). A lease that expired or was revoked:
 * KVP_ERR_NOT_FOUND. */
kvp_status_t kvp_etcd_lease_keepalive(kvp_etcd_h etcd, int64_t lease, int64_t *ttl_p);
kvp_status_t kvp_etcd_lease_revoke(kvp_etcd_h etcd, int64_t lease);
/* key -> value (strings), attached to lease (0: none). */
kvp_status_t kvp_etcd_put(kvp_etcd_h etcd, const char *key, const char *value, int64_t lease);
/* Every key that starts with prefix, in key order. Free with kvp_etcd_kvs_free. */
kvp_status_t kvp_etcd_range_prefix(kvp_etcd_h etcd, const char *prefix, kvp_etcd_kvs_t **kvs_p);
void         kvp_etcd_kvs_free(kvp_etcd_kvs_t *kvs); /* NULL is a no-op */

/* ---- membership ---- */
/* The live members under prefix, sorted by address; a key whose suffix is not HOST:PORT or whose
 * value is not a member object naming that address is skipped with a warning. *n_p may be 0.
 * Free *members_p with kvp_free. */
kvp_status_t kvp_etcd_members(kvp_etcd_h etcd, const char *prefix, kvp_etcd_member_t **members_p,
                              uint32_t *n_p);
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
/* KVP_OK for a body without "error"; else the status above (message copied to msg, cap bytes). */
kvp_status_t kvp_etcd_parse_error(const char *body, size_t len, char *msg, size_t cap);
/* Standard base64 with padding. encode: out holds 4 * ceil(len / 3) + 1 bytes, returns the
 * length written. decode: out holds len * 3 / 4 bytes; KVP_ERR_PROTOCOL on bad input. */
size_t       kvp_etcd_b64_encode(const void *in, size_t len, char *out);
kvp_status_t kvp_etcd_b64_decode(const char *in, size_t len, void *out, size_t *out_len_p);

#ifdef __cplusplus
}
#endif
#endif
