/* etcd_watch.c - the members under a prefix, kept current by a background thread (kvpack/etcd.h,
 * kvp_etcd_watch_*): a range read, then etcd's streaming POST /v3/watch from the range's revision
 * + 1 over a libcurl multi handle (so stop can wake it at once), each PUT / DELETE applied to the
 * thread's own sorted list, which is copied to the published one (mutex + generation) on change.
 * Keys under the prefix that are not members are remembered, so each is warned about once.
 * Main flow: watch_main -> watch_range -> watch_stream (on_chunk -> on_msg -> apply) -> backoff. */
#include "kvpack/alloc.h"
#include "kvpack/etcd.h"
#include "kvpack/log.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD            "etcd"
#define BACKOFF_MIN_MS 100u
#define BACKOFF_MAX_MS 2000u
#define RANGE_TMO_MS   2000u
#define STREAM_MAX     (4u << 20) /* one watch message past this is refused */
/* A stream that brought no byte for this long is ended and the range read again (through the
 * next endpoint when this one does not answer): a hung etcd member keeps its TCP connection up
 * but says nothing, while the others move on. The cost: one range read per idle period. */
#define STREAM_IDLE_MS KVP_ETCD_WATCH_IDLE_MS

typedef struct {
    char *key;
    int   seen;  /* by the range read in progress */
} bad_key_t;

struct kvp_etcd_watch {
    char                *prefix;
    kvp_etcd_h           etcd;      /* range reads: start, then the thread only */
    CURLM               *multi;     /* the stream; stop only wakes it */
    pthread_t            thread;
    pthread_mutex_t      mu;        /* guards pub, n_pub */
    atomic_int           stopping;  /* set by stop, which then wakes multi */
    kvp_etcd_member_t   *pub;       /* the published list */
    uint32_t             n_pub;
    atomic_uint_fast64_t gen;
    /* the thread's own */
    kvp_etcd_member_t   *cur;
    uint32_t             n_cur;
    size_t               cap_cur;
    int64_t              rev;       /* the range's revision: the stream starts at rev + 1 */
    kvp_etcd_stream_t    st;
    int                  changed;   /* cur differs from pub */
    int                  compacted; /* the stream was canceled: read the range again */
    int                  live;      /* the stream said "created" */
    uint64_t             last_ns;   /* the stream's last byte (or its start) */
    bad_key_t           *bad;       /* keys that are not members, warned about: sorted */
    uint32_t             n_bad;
    size_t               cap_bad;
};

/* ---- the thread's list ---- */

static kvp_etcd_member_t *cur_find(kvp_etcd_watch_h w, const char *addr)
{
    kvp_etcd_member_t key;

    if (w->n_cur == 0) { /* w->cur may still be NULL: bsearch's base must not be */
        return NULL;
    }
    snprintf(key.addr, sizeof(key.addr), "%s", addr);
    return bsearch(&key, w->cur, w->n_cur, sizeof(*w->cur), kvp_etcd_member_cmp);
}

static void cur_del(kvp_etcd_watch_h w, const char *addr)
{
    kvp_etcd_member_t *m = cur_find(w, addr);

    if (m != NULL) {
        size_t at = (size_t)(m - w->cur);

        memmove(m, m + 1, (w->n_cur - at - 1) * sizeof(*m));
        w->n_cur--;
        w->changed = 1;
        KVP_LOG_INFO(MOD, "node %s left; %u nodes", addr, w->n_cur);
    }
}

static kvp_status_t cur_put(kvp_etcd_watch_h w, const kvp_etcd_member_t *m)
{
    kvp_etcd_member_t *at = cur_find(w, m->addr), *grown;

    if (at != NULL) { /* a re-registration: same address, new lease or pid */
        if (at->pid != m->pid || at->since != m->since) {
            /* another process: a node restarted before its old lease ran out (its key never went
             * away). It may have missed writes and deletes while it was down, so this is a change
             * (a repair agent runs a pass for it) like a leave and a join. */
            w->changed = 1;
            KVP_LOG_INFO(MOD, "node %s restarted (pid %lld); %u nodes", m->addr,
                         (long long)m->pid, w->n_cur);
        }
        *at = *m;
        return KVP_OK;
    }
    grown = kvp_array_room(w->cur, &w->cap_cur, w->n_cur, sizeof(*grown), 16, "etcd.watch");
    if (grown == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    w->cur = grown; /* entries past n_cur are never read */
    w->cur[w->n_cur++] = *m;
    qsort(w->cur, w->n_cur, sizeof(*w->cur), kvp_etcd_member_cmp);
    w->changed = 1;
    if (atomic_load(&w->gen) > 0) { /* not for the first list */
        KVP_LOG_INFO(MOD, "node %s joined; %u nodes", m->addr, w->n_cur);
    }
    return KVP_OK;
}

/* ---- keys that are not members: a warning each, once ---- */

static int bad_cmp(const void *a, const void *b)
{
    return strcmp(((const bad_key_t *)a)->key, ((const bad_key_t *)b)->key);
}

static bad_key_t *bad_find(kvp_etcd_watch_h w, const char *key)
{
    bad_key_t k = {(char *)key, 0};

    return w->n_bad ? bsearch(&k, w->bad, w->n_bad, sizeof(k), bad_cmp) : NULL;
}

/* key is not a member (kvp_etcd_skip_cb_t): 1 (warn) when it was not in the list, which it is now.
 * Out of memory: 1, and not remembered. */
static int bad_note(void *arg, const char *key)
{
    kvp_etcd_watch_h w = arg;
    bad_key_t       *b = bad_find(w, key), *grown;
    char            *copy;

    if (b != NULL) {
        b->seen = 1;
        return 0;
    }
    grown = kvp_array_room(w->bad, &w->cap_bad, w->n_bad, sizeof(*grown), 8, "etcd.watch");
    if (grown == NULL || (copy = kvp_strdup(key, "etcd.watch")) == NULL) {
        w->bad = grown ? grown : w->bad;
        return 1;
    }
    w->bad = grown;
    w->bad[w->n_bad++] = (bad_key_t){copy, 1};
    qsort(w->bad, w->n_bad, sizeof(*w->bad), bad_cmp);
    return 1;
}

/* key is a member now, or gone: a bad value later is warned about again. */
static void bad_forget(kvp_etcd_watch_h w, const char *key)
{
    bad_key_t *b = bad_find(w, key);

    if (b != NULL) {
        kvp_free(b->key);
        memmove(b, b + 1, (w->n_bad - (size_t)(b - w->bad) - 1) * sizeof(*b));
        w->n_bad--;
    }
}

/* After a range read: forget the keys it did not skip (they were fixed or deleted meanwhile). */
static void bad_sweep(kvp_etcd_watch_h w)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < w->n_bad; i++) {
        if (w->bad[i].seen) {
            w->bad[n++] = w->bad[i];
        } else {
            kvp_free(w->bad[i].key);
        }
    }
    w->n_bad = n;
}

/* Copy cur to the published list when it changed; the generation moves last. */
static kvp_status_t publish(kvp_etcd_watch_h w)
{
    kvp_etcd_member_t *copy;

    if (!w->changed) {
        return KVP_OK;
    }
    copy = kvp_calloc(w->n_cur ? w->n_cur : 1, sizeof(*copy), "etcd.watch");
    if (copy == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    if (w->n_cur != 0) { /* an empty list may have no array yet */
        memcpy(copy, w->cur, w->n_cur * sizeof(*copy));
    }
    pthread_mutex_lock(&w->mu);
    kvp_free(w->pub);
    w->pub   = copy;
    w->n_pub = w->n_cur;
    atomic_fetch_add(&w->gen, 1);
    pthread_mutex_unlock(&w->mu);
    w->changed = 0;
    return KVP_OK;
}

/* Read the range into cur (joins and leaves since the last list logged) and its revision; a key
 * that is not a member is warned about only when it is not in the bad list already. */
static kvp_status_t watch_range(kvp_etcd_watch_h w)
{
    kvp_etcd_member_t *m;
    uint32_t           n;
    kvp_status_t       s;

    for (uint32_t i = 0; i < w->n_bad; i++) {
        w->bad[i].seen = 0;
    }
    s = kvp_etcd_members_at(w->etcd, w->prefix, &m, &n, &w->rev, bad_note, w);
    if (s != KVP_OK) {
        return s;
    }
    bad_sweep(w);
    for (uint32_t i = w->n_cur; i-- > 0;) {
        kvp_etcd_member_t key = w->cur[i];

        if (bsearch(&key, m, n, sizeof(*m), kvp_etcd_member_cmp) == NULL) {
            cur_del(w, key.addr);
        }
    }
    for (uint32_t i = 0; s == KVP_OK && i < n; i++) {
        s = cur_put(w, &m[i]);
    }
    kvp_free(m);
    return s == KVP_OK ? publish(w) : s;
}

/* ---- the stream ---- */

/* One watch message: apply its events; a cancel (compaction) or an error ends the stream. */
static kvp_status_t on_msg(void *arg, const char *body, size_t len)
{
    kvp_etcd_watch_h     w = arg;
    kvp_etcd_watch_msg_t msg;
    size_t               plen = strlen(w->prefix);
    kvp_status_t         s = kvp_etcd_parse_watch(body, len, &msg);

    if (s != KVP_OK) {
        KVP_LOG_WARN(MOD, "watch of %s: %s%s%s", w->prefix, kvp_status_str(s),
                     msg.reason[0] ? ": " : "", msg.reason);
        return s;
    }
    w->live |= msg.created;
    if (msg.canceled) {
        KVP_LOG_INFO(MOD, "watch of %s canceled (%s%s%s); reading the members again", w->prefix,
                     msg.compact_revision > 0 ? "revision compacted" : "by etcd",
                     msg.reason[0] ? ": " : "", msg.reason);
        w->compacted = 1;
        s            = KVP_ERR_CANCELED;
    }
    for (uint32_t i = 0; s == KVP_OK && i < msg.n; i++) {
        const kvp_etcd_event_t *ev = &msg.ev[i];
        kvp_etcd_member_t       m;

        if (strncmp(ev->key, w->prefix, plen) != 0) {
            continue;
        }
        if (ev->del) {
            bad_forget(w, ev->key);
            cur_del(w, ev->key + plen);
        } else if (kvp_etcd_member_from_kv(w->prefix, ev->key, ev->value, ev->value_len, &m) ==
                   KVP_OK) {
            bad_forget(w, ev->key);
            s = cur_put(w, &m);
        } else {
            if (bad_note(w, ev->key)) {
                KVP_LOG_WARN(MOD, "skipping %s: not a kvpack member", ev->key);
            }
            cur_del(w, ev->key + plen);
        }
    }
    kvp_etcd_watch_msg_clear(&msg);
    return s == KVP_OK ? publish(w) : s;
}

static size_t on_chunk(char *data, size_t size, size_t nmemb, void *arg)
{
    kvp_etcd_watch_h w = arg;
    size_t           n = size * nmemb;

    w->last_ns = kvp_time_ns();
    if (atomic_load(&w->stopping) ||
        kvp_etcd_stream_feed(&w->st, data, n, on_msg, w) != KVP_OK) {
        return 0; /* CURLE_WRITE_ERROR ends the transfer */
    }
    return n;
}

/* Watch from rev + 1 until the stream ends, is canceled, says nothing for STREAM_IDLE_MS, or
 * stop. */
static void watch_stream(kvp_etcd_watch_h w)
{
    char        url[512], *body = NULL;
    CURL       *h = curl_easy_init();
    CURLMsg    *done;
    int         running = 1, left;
    CURLcode    rc = CURLE_OK;

    if (h == NULL || kvp_etcd_prefix_body(w->prefix, w->rev + 1, &body) != KVP_OK) {
        curl_easy_cleanup(h);
        return;
    }
    snprintf(url, sizeof(url), "%s/v3/watch", kvp_etcd_endpoint(w->etcd));
    kvp_etcd_stream_reset(&w->st);
    w->live = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_chunk);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)RANGE_TMO_MS);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L); /* a silent, vanished etcd host */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 2L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_multi_add_handle(w->multi, h);
    w->last_ns = kvp_time_ns();
    while (running && !atomic_load(&w->stopping)) {
        if (curl_multi_perform(w->multi, &running) != CURLM_OK) {
            break;
        }
        if (kvp_time_ns() - w->last_ns > (uint64_t)STREAM_IDLE_MS * 1000000u) {
            KVP_LOG_DEBUG(MOD, "watch stream %s: nothing for %u ms; reading the range again", url,
                          STREAM_IDLE_MS);
            break;
        }
        if (running) {
            curl_multi_poll(w->multi, NULL, 0, 1000, NULL);
        }
    }
    while ((done = curl_multi_info_read(w->multi, &left)) != NULL) {
        rc = done->msg == CURLMSG_DONE ? done->data.result : rc;
    }
    if (!atomic_load(&w->stopping) && !w->compacted) {
        KVP_LOG_DEBUG(MOD, "watch stream %s ended: %s (%zu bytes of a cut message)", url,
                      curl_easy_strerror(rc), kvp_etcd_stream_pending(&w->st));
    }
    curl_multi_remove_handle(w->multi, h);
    curl_easy_cleanup(h);
    kvp_free(body);
}

/* Sleep ms, or less when stop comes: curl_multi_poll with nothing to watch just waits, and
 * kvp_etcd_watch_stop's curl_multi_wakeup ends the wait (also one that has not begun yet). */
static void backoff_wait(kvp_etcd_watch_h w, uint32_t ms)
{
    uint64_t end = kvp_time_ns() + (uint64_t)ms * 1000000ull;
    uint64_t now;

    while (!atomic_load(&w->stopping) && (now = kvp_time_ns()) < end) {
        curl_multi_poll(w->multi, NULL, 0, (int)((end - now) / 1000000ull) + 1, NULL);
    }
}

static void *watch_main(void *arg)
{
    kvp_etcd_watch_h w       = arg;
    uint32_t         backoff = BACKOFF_MIN_MS;
    int              down = 0, need_range = 0;

    while (!atomic_load(&w->stopping)) {
        kvp_status_t s = need_range ? watch_range(w) : KVP_OK;

        if (s != KVP_OK) {
            if (!down) {
                KVP_LOG_WARN(MOD, "etcd %s unreachable (%s): keeping the last %u members of "
                             "%s, retrying", kvp_etcd_endpoint(w->etcd), kvp_status_str(s),
                             w->n_cur, w->prefix);
            }
            down = 1;
            backoff_wait(w, backoff);
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            continue;
        }
        if (down) {
            KVP_LOG_INFO(MOD, "etcd %s is back; %u nodes under %s", kvp_etcd_endpoint(w->etcd),
                         w->n_cur, w->prefix);
            down = 0;
        }
        w->compacted = 0;
        watch_stream(w);
        need_range = 1;
        if (w->live || w->compacted) {
            backoff = BACKOFF_MIN_MS; /* it worked: the next failure starts from the bottom */
        }
        if (!w->compacted) {
            backoff_wait(w, backoff);
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
    }
    return NULL;
}

/* ---- API ---- */

kvp_status_t kvp_etcd_watch_start(const char *endpoints, const char *prefix,
                                  kvp_etcd_watch_h *watch_p)
{
    kvp_etcd_watch_h w = kvp_calloc(1, sizeof(*w), "etcd.watch");
    kvp_status_t     s;

    if (w == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&w->mu, NULL);
    kvp_etcd_stream_init(&w->st, STREAM_MAX);
    w->prefix = kvp_strdup(prefix ? prefix : KVP_ETCD_DEFAULT_PREFIX, "etcd.watch");
    s         = w->prefix ? kvp_etcd_create(endpoints, RANGE_TMO_MS, &w->etcd) : KVP_ERR_NO_MEMORY;
    if (s == KVP_OK && (w->multi = curl_multi_init()) == NULL) {
        s = KVP_ERR_NO_MEMORY;
    }
    if (s == KVP_OK) {
        w->changed = 1; /* publish even an empty first list */
        s          = watch_range(w);
        if (s != KVP_OK) {
            KVP_LOG_ERROR(MOD, "cannot list %s at etcd %s: %s", w->prefix, endpoints,
                          kvp_status_str(s));
        }
    }
    if (s == KVP_OK && pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        KVP_LOG_ERROR(MOD, "cannot start the etcd watch thread");
        s = KVP_ERR_NO_MEMORY;
    }
    if (s != KVP_OK) {
        if (w->multi != NULL) {
            curl_multi_cleanup(w->multi);
        }
        kvp_etcd_destroy(w->etcd);
        w->etcd = NULL;
        kvp_etcd_watch_stop(w);
        return s;
    }
    kvp_etcd_set_quiet(w->etcd, 1); /* the thread says "unreachable" once itself */
    *watch_p = w;
    return KVP_OK;
}

void kvp_etcd_watch_stop(kvp_etcd_watch_h w)
{
    if (w == NULL) {
        return;
    }
    if (w->etcd != NULL) { /* the thread runs */
        atomic_store(&w->stopping, 1);
        curl_multi_wakeup(w->multi);
        pthread_join(w->thread, NULL);
        curl_multi_cleanup(w->multi);
        kvp_etcd_destroy(w->etcd);
    }
    kvp_etcd_stream_free(&w->st);
    for (uint32_t i = 0; i < w->n_bad; i++) {
        kvp_free(w->bad[i].key);
    }
    kvp_free(w->bad);
    kvp_free(w->cur);
    kvp_free(w->pub);
    kvp_free(w->prefix);
    pthread_mutex_destroy(&w->mu);
    kvp_free(w);
}

uint64_t kvp_etcd_watch_generation(kvp_etcd_watch_h w)
{
    return (uint64_t)atomic_load(&w->gen);
}

kvp_status_t kvp_etcd_watch_members(kvp_etcd_watch_h w, kvp_etcd_member_t **members_p,
                                    uint32_t *n_p, uint64_t *generation_p)
{
    kvp_etcd_member_t *copy;

    pthread_mutex_lock(&w->mu);
    copy = kvp_calloc(w->n_pub ? w->n_pub : 1, sizeof(*copy), "etcd.watch");
    if (copy != NULL) {
        memcpy(copy, w->pub, w->n_pub * sizeof(*copy));
        *n_p          = w->n_pub;
        *generation_p = (uint64_t)atomic_load(&w->gen);
    }
    pthread_mutex_unlock(&w->mu);
    if (copy == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    *members_p = copy;
    return KVP_OK;
}
