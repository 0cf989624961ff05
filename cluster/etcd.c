/* etcd.c - kvpack's etcd client (kvpack/etcd.h): POSTs to the v3 HTTP JSON gateway over one
 * libcurl easy handle (keep-alive), moving to the next endpoint when one cannot be reached or
 * cannot serve (5xx, not JSON, no quorum: kvp_etcd_reply_check); lease grant / keepalive /
 * revoke, a put only while the key is absent or holds a given value (a txn), prefix range, and
 * the member list built from a range. kvp_etcd_cancel (any thread) ends a call in progress
 * through curl's progress callback, which curl runs while it waits.
 * Main flow: a call -> etcd_post (body in, reply body out, error body -> status) -> etcd_json.c. */
#include "kvpack/etcd.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/num.h"
#include "kvpack/xfer.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD            "etcd"
#define MAX_ENDPOINTS  8u
#define MAX_REPLY      (16u << 20) /* a reply past this is refused */

struct kvp_etcd {
    CURL     *curl;
    char     *buf;                      /* the endpoint list, split in place */
    char     *ep[MAX_ENDPOINTS];        /* into buf, or "http://" + it in own */
    char      own[MAX_ENDPOINTS][320];
    uint32_t  n_ep, cur;
    uint32_t  timeout_ms;
    uint32_t  budget_ms;                /* a call's total over its endpoints; 0: none */
    char     *reply;                    /* the last reply's body (grown as needed) */
    size_t    reply_len, reply_cap;
    int       overflow;
    int       quiet;                    /* transport failures at debug */
    atomic_int canceled;                /* kvp_etcd_cancel: every call ends at once */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- private ---- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    kvp_etcd_h e = arg;
    size_t     n = size * nmemb;

    if (e->reply_len + n + 1 > e->reply_cap) {
        size_t cap = e->reply_cap ? e->reply_cap : 4096;
        char  *grown;

        while (cap < e->reply_len + n + 1) {
            cap *= 2;
        }
        grown = (cap <= MAX_REPLY) ? kvp_malloc(cap, "etcd.reply") : NULL;
        if (grown == NULL) {
            e->overflow = 1;
            return 0; /* curl stops with CURLE_WRITE_ERROR */
        }
        if (e->reply_len > 0) {
            memcpy(grown, e->reply, e->reply_len);
        }
        kvp_free(e->reply);
        e->reply     = grown;
        e->reply_cap = cap;
    }
    memcpy(e->reply + e->reply_len, data, n);
    e->reply_len += n;
    e->reply[e->reply_len] = '\0';
    return n;
}

/* curl's progress callback, also run while a request waits on a silent server (about once a
 * second): non-zero aborts the request (CURLE_ABORTED_BY_CALLBACK). */
static int on_progress(void *arg, curl_off_t dl_total, curl_off_t dl_now, curl_off_t ul_total,
                       curl_off_t ul_now)
{
    kvp_etcd_h e = arg;

    (void)dl_total, (void)dl_now, (void)ul_total, (void)ul_now;
    return atomic_load(&e->canceled);
}

/* One POST to one endpoint within tmo_ms: KVP_OK with the body in e->reply and the HTTP status
 * in *http_p, or a transport status. */
static kvp_status_t post_one(kvp_etcd_h e, const char *url, const char *json, uint32_t tmo_ms,
                             long *http_p)
{
    CURLcode rc;

    e->reply_len = 0;
    e->overflow  = 0;
    curl_easy_setopt(e->curl, CURLOPT_URL, url);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)tmo_ms);
    curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)tmo_ms);
    rc = curl_easy_perform(e->curl);
    if (rc == CURLE_OK) {
        *http_p = 0;
        curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, http_p);
        return KVP_OK;
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK) { /* kvp_etcd_cancel: the caller knows */
        return KVP_ERR_CANCELED;
    }
    if (e->quiet && !e->overflow) {
        KVP_LOG_DEBUG(MOD, "%s: %s", url, curl_easy_strerror(rc));
    } else {
        KVP_LOG_WARN(MOD, "%s: %s", url, e->overflow ? "reply too large" : curl_easy_strerror(rc));
    }
    return rc == CURLE_OPERATION_TIMEDOUT ? KVP_ERR_TIMEOUT
           : e->overflow                  ? KVP_ERR_TOO_LARGE
                                          : KVP_ERR_PEER_UNREACHABLE;
}

/* The time left for one request of a call that must end by end_ns (0: no end): e->timeout_ms, or
 * less; 0 when the time is up. */
static uint32_t request_ms(kvp_etcd_h e, uint64_t end_ns)
{
    uint64_t now = kvp_time_ns(), left;

    if (end_ns == 0) {
        return e->timeout_ms;
    }
    left = now < end_ns ? (end_ns - now + 999999u) / 1000000u : 0;
    return left < e->timeout_ms ? (uint32_t)left : e->timeout_ms;
}

/* POST json to path on the current endpoint, then the others while one cannot be reached or cannot
 * serve (kvp_etcd_reply_check). An error body becomes its status; canceled: KVP_ERR_CANCELED. */
static kvp_status_t etcd_post(kvp_etcd_h e, const char *path, const char *json)
{
    char         url[512], msg[256];
    uint64_t     end = e->budget_ms ? kvp_time_ns() + (uint64_t)e->budget_ms * 1000000u : 0;
    kvp_status_t s   = KVP_ERR_PEER_UNREACHABLE;

    for (uint32_t k = 0; k < e->n_ep; k++) {
        uint32_t i = (e->cur + k) % e->n_ep, tmo = request_ms(e, end);
        long     http;
        int      next;

        if (atomic_load(&e->canceled)) {
            return KVP_ERR_CANCELED;
        }
        if (tmo == 0) {
            return KVP_ERR_TIMEOUT;
        }
        snprintf(url, sizeof(url), "%s%s", e->ep[i], path);
        s = post_one(e, url, json, tmo, &http);
        if (s != KVP_OK) {
            if (s != KVP_ERR_PEER_UNREACHABLE && s != KVP_ERR_TIMEOUT) {
                return s;
            }
            continue;
        }
        s = kvp_etcd_reply_check(http, e->reply, e->reply_len, msg, sizeof(msg), &next);
        if (next) { /* it answered, but cannot serve: another member may */
            if (e->quiet) {
                KVP_LOG_DEBUG(MOD, "%s: %s", url, msg);
            } else {
                KVP_LOG_WARN(MOD, "%s: %s", url, msg);
            }
            continue;
        }
        e->cur = i;
        if (s != KVP_OK && s != KVP_ERR_NOT_FOUND) {
            KVP_LOG_WARN(MOD, "%s: %s", url, msg);
        }
        return s;
    }
    return s;
}

/* {"key": b64(key)[, "range_end": b64(end)]...}: the base64 of a string into a new buffer. */
static char *b64_dup(const char *s, size_t len)
{
    char *out = kvp_malloc((len + 2) / 3 * 4 + 1, "etcd.b64");

    if (out != NULL) {
        kvp_etcd_b64_encode(s, len, out);
    }
    return out;
}

/* ---- API ---- */

kvp_status_t kvp_etcd_create(const char *endpoints, uint32_t timeout_ms, kvp_etcd_h *etcd_p)
{
    kvp_etcd_h e;
    char      *p;

    if (endpoints == NULL || *endpoints == '\0') {
        KVP_LOG_ERROR(MOD, "no etcd endpoint given");
        return KVP_ERR_INVALID;
    }
    pthread_once(&curl_once, curl_init_once);
    e = kvp_calloc(1, sizeof(*e), "etcd");
    if (e == NULL || (e->buf = kvp_strdup(endpoints, "etcd")) == NULL ||
        (e->curl = curl_easy_init()) == NULL) {
        kvp_etcd_destroy(e);
        return KVP_ERR_NO_MEMORY;
    }
    for (char *list = e->buf; (p = kvp_list_item_next(&list)) != NULL;) {
        if (*p == '\0' || e->n_ep == MAX_ENDPOINTS || strlen(p) > 300) {
            KVP_LOG_ERROR(MOD, "bad etcd endpoint list '%s' (at most %u URLs, none empty)",
                          endpoints, MAX_ENDPOINTS);
            kvp_etcd_destroy(e);
            return KVP_ERR_INVALID;
        }
        if (strstr(p, "://") == NULL) {
            snprintf(e->own[e->n_ep], sizeof(e->own[0]), "http://%s", p);
            p = e->own[e->n_ep];
        }
        e->ep[e->n_ep++] = p;
    }
    for (uint32_t i = 0; i < e->n_ep; i++) { /* "http://h:p/" -> "http://h:p" */
        size_t n = strlen(e->ep[i]);

        if (n > 0 && e->ep[i][n - 1] == '/') {
            e->ep[i][n - 1] = '\0';
        }
    }
    e->timeout_ms = timeout_ms ? timeout_ms : 3000u;
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(e->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e->curl, CURLOPT_XFERINFODATA, e);
    curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    *etcd_p = e;
    return KVP_OK;
}

void kvp_etcd_destroy(kvp_etcd_h e)
{
    if (e == NULL) {
        return;
    }
    if (e->curl != NULL) {
        curl_easy_cleanup(e->curl);
    }
    kvp_free(e->reply);
    kvp_free(e->buf);
    kvp_free(e);
}

void kvp_etcd_set_quiet(kvp_etcd_h e, int quiet)
{
    e->quiet = quiet;
}

void kvp_etcd_set_budget(kvp_etcd_h e, uint32_t total_ms)
{
    e->budget_ms = total_ms;
}

void kvp_etcd_cancel(kvp_etcd_h e)
{
    atomic_store(&e->canceled, 1);
}

const char *kvp_etcd_endpoint(kvp_etcd_h e)
{
    return e->ep[e->cur];
}

kvp_status_t kvp_etcd_lease_grant(kvp_etcd_h e, int64_t ttl_s, int64_t *lease_p)
{
    char         body[64];
    int64_t      ttl;
    kvp_status_t s;

    snprintf(body, sizeof(body), "{\"TTL\":\"%lld\"}", (long long)ttl_s);
    s = etcd_post(e, "/v3/lease/grant", body);
    return s == KVP_OK ? kvp_etcd_parse_lease(e->reply, e->reply_len, lease_p, &ttl) : s;
}

/* POST {"ID": lease} to path. */
static kvp_status_t lease_post(kvp_etcd_h e, const char *path, int64_t lease)
{
    char body[64];

    snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)lease);
    return etcd_post(e, path, body);
}

kvp_status_t kvp_etcd_lease_keepalive(kvp_etcd_h e, int64_t lease, int64_t *ttl_p)
{
    int64_t      id;
    kvp_status_t s = lease_post(e, "/v3/lease/keepalive", lease);

    if (s == KVP_OK) {
        s = kvp_etcd_parse_lease(e->reply, e->reply_len, &id, ttl_p);
    }
    /* an expired or revoked lease answers with its ID and no TTL */
    return (s == KVP_OK && *ttl_p <= 0) ? KVP_ERR_NOT_FOUND : s;
}

kvp_status_t kvp_etcd_lease_revoke(kvp_etcd_h e, int64_t lease)
{
    return lease_post(e, "/v3/lease/revoke", lease);
}

kvp_status_t kvp_etcd_put_if(kvp_etcd_h e, const char *key, const char *value, int64_t lease,
                             const char *if_value, int *put_p, char **held_p)
{
    char           *k = b64_dup(key, strlen(key)), *v = b64_dup(value, strlen(value));
    char           *c = if_value ? b64_dup(if_value, strlen(if_value)) : NULL;
    char           *cmp = NULL, *body = NULL;
    size_t          cap;
    kvp_etcd_kvs_t *kvs = NULL;
    kvp_status_t    s = KVP_ERR_NO_MEMORY;

    *put_p = 0;
    if (held_p != NULL) {
        *held_p = NULL;
    }
    if (k != NULL && v != NULL && (if_value == NULL || c != NULL)) {
        cap  = 3 * strlen(k) + strlen(v) + (c ? strlen(c) : 0) + 256;
        cmp  = kvp_malloc(cap, "etcd.txn");
        body = kvp_malloc(cap, "etcd.txn");
    }
    if (cmp != NULL && body != NULL) {
        if (c != NULL) {
            snprintf(cmp, cap, "\"target\":\"VALUE\",\"value\":\"%s\"", c);
        } else {
            snprintf(cmp, cap, "\"target\":\"CREATE\",\"create_revision\":\"0\"");
        }
        snprintf(body, cap,
                 "{\"compare\":[{\"key\":\"%s\",\"result\":\"EQUAL\",%s}],"
                 "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
                 "\"lease\":\"%lld\"}}],"
                 "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
                 k, cmp, k, v, (long long)lease, k);
        s = etcd_post(e, "/v3/kv/txn", body);
    }
    if (s == KVP_OK) {
        s = kvp_etcd_parse_txn(e->reply, e->reply_len, put_p, &kvs);
    }
    if (s == KVP_OK && kvs != NULL && kvs->n > 0 && held_p != NULL) {
        *held_p = kvp_strdup(kvs->kv[0].value, "etcd.held");
        s       = *held_p ? KVP_OK : KVP_ERR_NO_MEMORY;
    }
    kvp_etcd_kvs_free(kvs);
    kvp_free(body);
    kvp_free(cmp);
    kvp_free(c);
    kvp_free(k);
    kvp_free(v);
    return s;
}

kvp_status_t kvp_etcd_prefix_body(const char *prefix, int64_t watch_from, char **body_p)
{
    size_t       len = strlen(prefix);
    char        *end = kvp_strdup(prefix, "etcd.range");
    char        *k = b64_dup(prefix, len), *ke = NULL, *body = NULL;
    size_t       cap;
    kvp_status_t s = KVP_ERR_NO_MEMORY;

    if (len == 0 || (uint8_t)prefix[len - 1] == 0xff) {
        KVP_LOG_ERROR(MOD, "prefix '%s' is empty or ends in 0xff", prefix);
        s = KVP_ERR_INVALID;
        goto out;
    }
    if (end == NULL || k == NULL) {
        goto out;
    }
    end[len - 1]++; /* range_end: the prefix with its last byte + 1 = every key under it */
    ke   = b64_dup(end, len);
    cap  = ke ? strlen(k) + strlen(ke) + 128 : 0;
    body = ke ? kvp_malloc(cap, "etcd.range") : NULL;
    if (body != NULL && watch_from > 0) {
        snprintf(body, cap, "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\","
                 "\"start_revision\":\"%lld\"}}", k, ke, (long long)watch_from);
    } else if (body != NULL) {
        snprintf(body, cap, "{\"key\":\"%s\",\"range_end\":\"%s\"}", k, ke);
    }
    s = body ? KVP_OK : KVP_ERR_NO_MEMORY;
out:
    kvp_free(ke);
    kvp_free(k);
    kvp_free(end);
    *body_p = body;
    return s;
}

kvp_status_t kvp_etcd_range_prefix(kvp_etcd_h e, const char *prefix, kvp_etcd_kvs_t **kvs_p)
{
    char        *body;
    kvp_status_t s = kvp_etcd_prefix_body(prefix, 0, &body);

    if (s == KVP_OK) {
        s = etcd_post(e, "/v3/kv/range", body);
    }
    if (s == KVP_OK) {
        s = kvp_etcd_parse_range(e->reply, e->reply_len, kvs_p);
    }
    kvp_free(body);
    return s;
}

int kvp_etcd_member_cmp(const void *a, const void *b)
{
    return strcmp(((const kvp_etcd_member_t *)a)->addr, ((const kvp_etcd_member_t *)b)->addr);
}

kvp_status_t kvp_etcd_member_from_kv(const char *prefix, const char *key, const char *value,
                                     size_t len, kvp_etcd_member_t *m)
{
    size_t   plen = strlen(prefix);
    char     host[256];
    uint16_t port;

    if (strncmp(key, prefix, plen) != 0 ||
        kvp_xfer_split_addr(key + plen, host, sizeof(host), &port) != KVP_OK || port == 0) {
        return KVP_ERR_PROTOCOL;
    }
    return kvp_etcd_member_parse(key + plen, value, len, m);
}

kvp_status_t kvp_etcd_members_at(kvp_etcd_h e, const char *prefix, kvp_etcd_member_t **members_p,
                                 uint32_t *n_p, int64_t *revision_p, kvp_etcd_skip_cb_t skip,
                                 void *arg)
{
    kvp_etcd_kvs_t    *kvs;
    kvp_etcd_member_t *m;
    uint32_t           n = 0;
    kvp_status_t       s = kvp_etcd_range_prefix(e, prefix, &kvs);

    if (s != KVP_OK) {
        return s;
    }
    m = kvp_calloc(kvs->n ? kvs->n : 1, sizeof(*m), "etcd.members");
    if (m == NULL) {
        kvp_etcd_kvs_free(kvs);
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < kvs->n; i++) {
        if (kvp_etcd_member_from_kv(prefix, kvs->kv[i].key, kvs->kv[i].value,
                                    kvs->kv[i].value_len, &m[n]) != KVP_OK) {
            if (skip != NULL && !skip(arg, kvs->kv[i].key)) {
                continue;
            }
            KVP_LOG_WARN(MOD, "skipping %s: not a kvpack member (want key PREFIX<HOST:PORT>, "
                         "value {\"addr\":\"HOST:PORT\",...})", kvs->kv[i].key);
            continue;
        }
        n++;
    }
    if (revision_p != NULL) {
        *revision_p = kvs->revision;
    }
    kvp_etcd_kvs_free(kvs);
    qsort(m, n, sizeof(*m), kvp_etcd_member_cmp);
    *members_p = m;
    *n_p       = n;
    return KVP_OK;
}

kvp_status_t kvp_etcd_members(kvp_etcd_h e, const char *prefix, kvp_etcd_member_t **members_p,
                              uint32_t *n_p)
{
    return kvp_etcd_members_at(e, prefix, members_p, n_p, NULL, NULL, NULL);
}
