/* etcd_json.c - the etcd v3 gateway's JSON as kvpack reads and writes it (kvpack/etcd.h): base64
 * keys and values, int64 fields sent as strings, {"error","code"} bodies, the lease, range and
 * watch replies, the watch stream cut into messages, and a member's registration value. Pure
 * functions over buffers (jansson), so tests/cluster/test_etcd_json.c and test_etcd_stream.c
 * check them on canned bodies and chunks without an etcd. */
#include "kvpack/etcd.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD "etcd"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* ---- base64 ---- */

size_t kvp_etcd_b64_encode(const void *in, size_t len, char *out)
{
    const uint8_t *p = in;
    size_t         o = 0;

    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;

        v |= (i + 1 < len) ? (uint32_t)p[i + 1] << 8 : 0;
        v |= (i + 2 < len) ? (uint32_t)p[i + 2] : 0;
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = (i + 1 < len) ? b64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = (i + 2 < len) ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c)
{
    const char *at = (c != '\0') ? strchr(b64_alphabet, c) : NULL;

    return at ? (int)(at - b64_alphabet) : -1;
}

kvp_status_t kvp_etcd_b64_decode(const char *in, size_t len, void *out, size_t *out_len_p)
{
    uint8_t *o = out;
    size_t   n = 0;

    if (len % 4 != 0) {
        return KVP_ERR_PROTOCOL;
    }
    for (size_t i = 0; i < len; i += 4) {
        int  v[4];
        bool last = i + 4 == len;
        int  pad  = 0;

        for (int k = 0; k < 4; k++) {
            if (in[i + k] == '=' && last && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad > 0 || (v[k] = b64_value(in[i + k])) < 0) {
                return KVP_ERR_PROTOCOL; /* a bad character, or data after padding */
            }
        }
        o[n++] = (uint8_t)((v[0] << 2) | (v[1] >> 4));
        if (pad < 2) {
            o[n++] = (uint8_t)((v[1] << 4) | (v[2] >> 2));
        }
        if (pad < 1) {
            o[n++] = (uint8_t)((v[2] << 6) | v[3]);
        }
    }
    *out_len_p = n;
    return KVP_OK;
}

/* ---- gateway replies ---- */

static json_t *body_load(const char *body, size_t len)
{
    json_error_t err;
    json_t      *root = json_loadb(body, len, 0, &err);

    if (root == NULL || !json_is_object(root)) {
        KVP_LOG_WARN(MOD, "reply is not a JSON object: %s", root ? "other JSON" : err.text);
        json_decref(root);
        return NULL;
    }
    return root;
}

/* An int64 field: a JSON string of digits (the gateway's way) or a number; absent is 0. */
static kvp_status_t field_i64(const json_t *obj, const char *key, int64_t *v_p)
{
    const json_t *f = json_object_get(obj, key);
    char         *end;

    *v_p = 0;
    if (f == NULL) {
        return KVP_OK;
    }
    if (json_is_integer(f)) {
        *v_p = (int64_t)json_integer_value(f);
        return KVP_OK;
    }
    if (!json_is_string(f) || json_string_length(f) == 0) {
        return KVP_ERR_PROTOCOL;
    }
    *v_p = (int64_t)strtoll(json_string_value(f), &end, 10);
    return *end == '\0' ? KVP_OK : KVP_ERR_PROTOCOL;
}

/* An error body's status (the message to msg) and its gRPC code (0 when none); KVP_OK without
 * "error", KVP_ERR_PROTOCOL when not JSON. */
static kvp_status_t parse_error_code(const char *body, size_t len, char *msg, size_t cap,
                                     int64_t *code_p)
{
    json_t      *root = body_load(body, len);
    json_t      *err;
    int64_t      code = 0;
    kvp_status_t s    = KVP_OK;

    *code_p = 0;
    if (cap > 0) {
        msg[0] = '\0';
    }
    if (root == NULL) {
        snprintf(msg, cap, "reply is not JSON");
        return KVP_ERR_PROTOCOL;
    }
    err = json_object_get(root, "error");
    if (json_is_object(err)) { /* a stream's error: {"error":{"grpc_code","message",...}} */
        json_t *m = json_object_get(err, "message");

        snprintf(msg, cap, "%s", json_is_string(m) ? json_string_value(m) : "error");
        field_i64(err, "grpc_code", &code);
    } else if (err != NULL) {
        snprintf(msg, cap, "%s", json_is_string(err) ? json_string_value(err) : "error");
        field_i64(root, "code", &code);
    }
    if (err != NULL) {
        s = code == 5    ? KVP_ERR_NOT_FOUND
            : code == 3  ? KVP_ERR_INVALID
            : code == 14 ? KVP_ERR_PEER_UNREACHABLE
            : code == 4  ? KVP_ERR_TIMEOUT
                         : KVP_ERR_IO;
        *code_p = code;
    }
    json_decref(root);
    return s;
}

kvp_status_t kvp_etcd_parse_error(const char *body, size_t len, char *msg, size_t cap)
{
    int64_t code;

    return parse_error_code(body, len, msg, cap, &code);
}

kvp_status_t kvp_etcd_reply_check(long http, const char *body, size_t len, char *msg, size_t cap,
                                  int *next_p)
{
    int64_t      code;
    kvp_status_t s = parse_error_code(body, len, msg, cap, &code);

    /* a member that cannot serve now (no quorum: 14 Unavailable, 4 DeadlineExceeded, 2 Unknown
     * "context deadline exceeded"), a proxy in front of a dead one (5xx), not a gateway at all */
    *next_p = http >= 500 || s == KVP_ERR_PROTOCOL || code == 14 || code == 4 || code == 2;
    if (http >= 500 && (s == KVP_OK || s == KVP_ERR_PROTOCOL)) {
        snprintf(msg, cap, "HTTP %ld%s", http, s == KVP_OK ? "" : ", not a gateway reply");
        s = KVP_ERR_PEER_UNREACHABLE;
    }
    return s;
}

kvp_status_t kvp_etcd_parse_lease(const char *body, size_t len, int64_t *lease_p, int64_t *ttl_p)
{
    json_t      *root = body_load(body, len);
    json_t      *r;
    int64_t      id, ttl;
    kvp_status_t s;

    if (root == NULL) {
        return KVP_ERR_PROTOCOL;
    }
    r = json_object_get(root, "result"); /* keepalive is a stream: each reply is a "result" */
    r = json_is_object(r) ? r : root;
    s = field_i64(r, "ID", &id);
    if (s == KVP_OK) {
        s = field_i64(r, "TTL", &ttl);
    }
    if (s == KVP_OK && id == 0) {
        s = KVP_ERR_PROTOCOL;
    }
    json_decref(root);
    if (s == KVP_OK) {
        *lease_p = id;
        *ttl_p   = ttl;
    }
    return s;
}

void kvp_etcd_kvs_free(kvp_etcd_kvs_t *kvs)
{
    if (kvs == NULL) {
        return;
    }
    for (uint32_t i = 0; i < kvs->n; i++) {
        kvp_free(kvs->kv[i].key);
        kvp_free(kvs->kv[i].value);
    }
    kvp_free(kvs->kv);
    kvp_free(kvs);
}

/* A base64 string field into a new NUL-terminated buffer. */
static kvp_status_t field_b64(const json_t *obj, const char *key, char **out_p, size_t *len_p)
{
    const json_t *f = json_object_get(obj, key);
    size_t        elen, n;
    char         *buf;

    if (f == NULL) { /* proto3 JSON leaves out empty fields */
        *out_p = kvp_strdup("", "etcd.b64");
        *len_p = 0;
        return *out_p ? KVP_OK : KVP_ERR_NO_MEMORY;
    }
    if (!json_is_string(f)) {
        return KVP_ERR_PROTOCOL;
    }
    elen = json_string_length(f);
    buf  = kvp_malloc(elen / 4 * 3 + 1, "etcd.b64");
    if (buf == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    if (kvp_etcd_b64_decode(json_string_value(f), elen, buf, &n) != KVP_OK) {
        kvp_free(buf);
        return KVP_ERR_PROTOCOL;
    }
    buf[n] = '\0';
    *out_p = buf;
    *len_p = n;
    return KVP_OK;
}

/* The keys of a range reply object (a whole reply, or a txn's response_range). */
static kvp_status_t range_obj(const json_t *root, kvp_etcd_kvs_t **kvs_p)
{
    json_t         *arr;
    kvp_etcd_kvs_t *kvs;
    kvp_status_t    s = KVP_OK;

    if (!json_is_object(root)) {
        return KVP_ERR_PROTOCOL;
    }
    arr = json_object_get(root, "kvs");
    kvs = kvp_calloc(1, sizeof(*kvs), "etcd.kvs");
    if (kvs == NULL || (arr != NULL && !json_is_array(arr))) {
        s = kvs ? KVP_ERR_PROTOCOL : KVP_ERR_NO_MEMORY;
        goto out;
    }
    s = field_i64(json_object_get(root, "header"), "revision", &kvs->revision);
    if (arr != NULL && json_array_size(arr) > 0) {
        kvs->kv = kvp_calloc(json_array_size(arr), sizeof(*kvs->kv), "etcd.kvs");
        if (kvs->kv == NULL) {
            s = KVP_ERR_NO_MEMORY;
            goto out;
        }
    }
    for (size_t i = 0; arr != NULL && i < json_array_size(arr) && s == KVP_OK; i++) {
        const json_t  *e = json_array_get(arr, i);
        kvp_etcd_kv_t *kv = &kvs->kv[kvs->n];
        size_t         klen;

        if (!json_is_object(e)) {
            s = KVP_ERR_PROTOCOL;
            break;
        }
        s = field_b64(e, "key", &kv->key, &klen);
        if (s == KVP_OK) {
            kvs->n++; /* owns key from here, freed with the list */
            s = field_b64(e, "value", &kv->value, &kv->value_len);
        }
        if (s == KVP_OK) {
            s = field_i64(e, "lease", &kv->lease);
        }
    }
out:
    if (s != KVP_OK) {
        kvp_etcd_kvs_free(kvs);
        return s;
    }
    *kvs_p = kvs;
    return KVP_OK;
}

kvp_status_t kvp_etcd_parse_range(const char *body, size_t len, kvp_etcd_kvs_t **kvs_p)
{
    json_t      *root = body_load(body, len);
    kvp_status_t s    = root ? range_obj(root, kvs_p) : KVP_ERR_PROTOCOL;

    json_decref(root);
    return s;
}

kvp_status_t kvp_etcd_parse_txn(const char *body, size_t len, int *succeeded_p,
                                kvp_etcd_kvs_t **kvs_p)
{
    json_t      *root = body_load(body, len);
    json_t      *ok, *resp;
    kvp_status_t s = KVP_OK;

    *kvs_p = NULL;
    if (root == NULL) {
        return KVP_ERR_PROTOCOL;
    }
    ok = json_object_get(root, "succeeded"); /* proto3 JSON leaves out false */
    if (ok != NULL && !json_is_boolean(ok)) {
        s = KVP_ERR_PROTOCOL;
    }
    *succeeded_p = json_is_true(ok);
    if (s == KVP_OK && !*succeeded_p) {
        resp = json_object_get(root, "responses");
        resp = json_is_array(resp) ? json_array_get(resp, 0) : NULL;
        s    = range_obj(json_object_get(resp, "response_range"), kvs_p);
    }
    json_decref(root);
    return s;
}

/* ---- a member's value ---- */

kvp_status_t kvp_etcd_member_json(const kvp_etcd_member_t *m, char *buf, size_t cap)
{
    json_t *o = json_pack("{s:s, s:I, s:I, s:s, s:s, s:s}", "addr", m->addr, "pid",
                          (json_int_t)m->pid, "since", (json_int_t)m->since, "data_dir",
                          m->data_dir, "host", m->host, "pid_ns", m->pid_ns);
    char   *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    size_t  len = txt ? strlen(txt) : 0;

    json_decref(o);
    if (txt == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    if (len + 1 > cap) {
        free(txt);
        return KVP_ERR_TOO_LARGE;
    }
    memcpy(buf, txt, len + 1);
    free(txt); /* jansson's allocator */
    return KVP_OK;
}

kvp_status_t kvp_etcd_member_parse(const char *addr, const char *value, size_t len,
                                   kvp_etcd_member_t *m)
{
    json_error_t err;
    json_t      *o = json_loadb(value, len, 0, &err);
    const char  *a = NULL, *dir = "", *host = "", *pid_ns = "";
    json_int_t   pid = 0, since = 0;
    int          bad;

    bad = o == NULL || json_unpack(o, "{s:s, s?I, s?I, s?s, s?s, s?s}", "addr", &a, "pid", &pid,
                                   "since", &since, "data_dir", &dir, "host", &host, "pid_ns",
                                   &pid_ns) != 0;
    bad = bad || strcmp(a, addr) != 0 || strlen(a) >= sizeof(m->addr) || pid < 0 || since < 0;
    if (!bad) {
        memset(m, 0, sizeof(*m));
        snprintf(m->addr, sizeof(m->addr), "%s", a);
        snprintf(m->data_dir, sizeof(m->data_dir), "%s", dir);
        snprintf(m->host, sizeof(m->host), "%s", host);
        snprintf(m->pid_ns, sizeof(m->pid_ns), "%s", pid_ns);
        m->pid   = pid;
        m->since = since;
    }
    json_decref(o);
    return bad ? KVP_ERR_PROTOCOL : KVP_OK;
}

/* ---- the watch stream ---- */

void kvp_etcd_stream_init(kvp_etcd_stream_t *st, size_t max)
{
    memset(st, 0, sizeof(*st));
    st->max = max;
}

void kvp_etcd_stream_reset(kvp_etcd_stream_t *st)
{
    st->len   = 0;
    st->depth = st->in_str = st->esc = 0;
}

void kvp_etcd_stream_free(kvp_etcd_stream_t *st)
{
    kvp_free(st->buf);
    kvp_etcd_stream_init(st, st->max);
}

size_t kvp_etcd_stream_pending(const kvp_etcd_stream_t *st)
{
    return st->len;
}

static kvp_status_t stream_put(kvp_etcd_stream_t *st, char c)
{
    char *grown;

    if (st->len + 1 >= st->max) {
        return KVP_ERR_TOO_LARGE;
    }
    /* room for c and, after it, the '\0' the message callback gets */
    grown = kvp_array_room(st->buf, &st->cap, st->len + 1, 1, 4096, "etcd.stream");
    if (grown == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    st->buf            = grown;
    st->buf[st->len++] = c;
    return KVP_OK;
}

kvp_status_t kvp_etcd_stream_feed(kvp_etcd_stream_t *st, const char *data, size_t len,
                                  kvp_etcd_msg_cb_t msg_cb, void *arg)
{
    for (size_t i = 0; i < len; i++) {
        char         c = data[i];
        kvp_status_t s;

        if (st->depth == 0) { /* between messages: whitespace, or the next '{' */
            if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                continue;
            }
            if (c != '{') {
                return KVP_ERR_PROTOCOL;
            }
        }
        s = stream_put(st, c);
        if (s != KVP_OK) {
            return s;
        }
        if (st->in_str) { /* only an unescaped quote ends a string */
            if (st->esc) {
                st->esc = 0;
            } else if (c == '\\') {
                st->esc = 1;
            } else if (c == '"') {
                st->in_str = 0;
            }
            continue;
        }
        st->in_str = c == '"';
        st->depth += (c == '{' || c == '[') - (c == '}' || c == ']');
        if (st->depth == 0) {
            st->buf[st->len] = '\0'; /* stream_put keeps a byte free */
            s                = msg_cb(arg, st->buf, st->len);
            st->len          = 0;
            if (s != KVP_OK) {
                return s;
            }
        }
    }
    return KVP_OK;
}

void kvp_etcd_watch_msg_clear(kvp_etcd_watch_msg_t *msg)
{
    for (uint32_t i = 0; msg->ev != NULL && i < msg->n; i++) {
        kvp_free(msg->ev[i].key);
        kvp_free(msg->ev[i].value);
    }
    kvp_free(msg->ev);
    memset(msg, 0, sizeof(*msg));
}

/* One element of "events": {"type":"DELETE"?, "kv":{"key","value","mod_revision",...}}; a PUT
 * leaves "type" out (proto3 JSON omits the default). */
static kvp_status_t watch_event(const json_t *e, kvp_etcd_event_t *ev)
{
    const json_t *type = json_object_get(e, "type");
    const json_t *kv   = json_object_get(e, "kv");
    size_t        klen;
    kvp_status_t  s;

    if (!json_is_object(kv) || (type != NULL && !json_is_string(type))) {
        return KVP_ERR_PROTOCOL;
    }
    if (type != NULL && strcmp(json_string_value(type), "PUT") != 0 &&
        strcmp(json_string_value(type), "DELETE") != 0) {
        return KVP_ERR_PROTOCOL;
    }
    ev->del = type != NULL && strcmp(json_string_value(type), "DELETE") == 0;
    s       = field_b64(kv, "key", &ev->key, &klen);
    if (s == KVP_OK && klen == 0) {
        s = KVP_ERR_PROTOCOL;
    }
    if (s == KVP_OK) {
        s = field_b64(kv, "value", &ev->value, &ev->value_len);
    }
    return s == KVP_OK ? field_i64(kv, "mod_revision", &ev->mod_revision) : s;
}

kvp_status_t kvp_etcd_parse_watch(const char *body, size_t len, kvp_etcd_watch_msg_t *msg)
{
    json_t       *root = body_load(body, len);
    const json_t *r, *arr, *reason;
    kvp_status_t  s;

    memset(msg, 0, sizeof(*msg));
    if (root == NULL) {
        return KVP_ERR_PROTOCOL;
    }
    if (json_object_get(root, "error") != NULL) {
        json_decref(root);
        return kvp_etcd_parse_error(body, len, msg->reason, sizeof(msg->reason));
    }
    r   = json_object_get(root, "result");
    arr = json_is_object(r) ? json_object_get(r, "events") : NULL;
    s   = json_is_object(r) && (arr == NULL || json_is_array(arr)) ? KVP_OK : KVP_ERR_PROTOCOL;
    if (s == KVP_OK) {
        s = field_i64(json_object_get(r, "header"), "revision", &msg->revision);
    }
    if (s == KVP_OK) {
        s = field_i64(r, "compact_revision", &msg->compact_revision);
    }
    if (s == KVP_OK) {
        msg->created  = json_is_true(json_object_get(r, "created"));
        msg->canceled = json_is_true(json_object_get(r, "canceled"));
        reason        = json_object_get(r, "cancel_reason");
        snprintf(msg->reason, sizeof(msg->reason), "%s",
                 json_is_string(reason) ? json_string_value(reason) : "");
    }
    if (s == KVP_OK && arr != NULL && json_array_size(arr) > 0) {
        msg->ev = kvp_calloc(json_array_size(arr), sizeof(*msg->ev), "etcd.events");
        s       = msg->ev ? KVP_OK : KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; s == KVP_OK && arr != NULL && i < json_array_size(arr); i++) {
        s = watch_event(json_array_get(arr, i), &msg->ev[msg->n]);
        msg->n++; /* owns what watch_event set, freed by clear */
    }
    json_decref(root);
    if (s != KVP_OK) {
        kvp_etcd_watch_msg_clear(msg);
    }
    return s;
}
