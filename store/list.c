/* list.c - kvp_store_session_list: the sessions a store knows (hot or cold), in (ns, sid) order,
 * one page at a time after a key cursor, each with its shape, where it lives and its bytes.
 * A page costs one pass over the session table that keeps the max smallest keys past the cursor
 * in a bounded max-heap (O(n log max), no allocation of n), then a sort of those max, all under
 * the store lock (no disk I/O: cold sessions' records and page entries stay in memory). */
#include "store_int.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"

#include <stdlib.h>
#include <string.h>

#define MOD "store"

static int key_cmp(uint64_t ns_a, const char *sid_a, uint64_t ns_b, const char *sid_b)
{
    if (ns_a != ns_b) {
        return ns_a < ns_b ? -1 : 1;
    }
    return strcmp(sid_a, sid_b);
}

static int sess_order(const void *a, const void *b)
{
    const kvp_sess_t *x = *(kvp_sess_t *const *)a;
    const kvp_sess_t *y = *(kvp_sess_t *const *)b;

    return key_cmp(x->ns, x->sid, y->ns, y->sid);
}

/* The session's page bytes + tail; pages whose length is not known yet (on disk, not read since
 * the store opened) count as the namespace's full sealed page. */
static uint64_t sess_bytes(const kvp_sess_t *s, const kvp_nsprof_t *prof)
{
    size_t   n     = kvp_store_sess_page_count(s);
    uint64_t bytes = s->desc.tail_len;
    uint64_t guess = 0;

    if (prof != NULL) {
        guess = KVP_PAGE_HDR_BYTES + kvp_codec_payload_bytes((kvp_codec_id_t)prof->codec,
                                                             prof->heads, prof->head_dim,
                                                             prof->capacity, prof->capacity);
    }
    for (size_t i = 0; i < n; i++) {
        bytes += s->pages[i]->len != 0 ? s->pages[i]->len : guess;
    }
    return bytes;
}

static void sess_info(const kvp_store_h st, const kvp_sess_t *s, kvp_store_session_info_t *o)
{
    const kvp_nsprof_t *prof = kvp_nsprof_find(&st->profiles, s->ns);

    memset(o, 0, sizeof(*o));
    o->ns = s->ns;
    memcpy(o->sid, s->sid, sizeof(o->sid));
    o->layers      = s->desc.layers;
    o->page_tokens = s->desc.page_tokens;
    o->n_chunks    = s->desc.n_chunks;
    o->tail_tokens = s->desc.tail_tokens;
    if (prof != NULL) {
        o->codec    = prof->codec;
        o->heads    = prof->heads;
        o->head_dim = prof->head_dim;
    }
    o->where = (s->hot ? KVP_STORE_IN_DRAM : 0u) | (s->on_disk ? KVP_STORE_ON_DISK : 0u);
    o->bytes = sess_bytes(s, prof);
}

/* Bounded max-heap of the smallest keys seen: h[0] is the largest kept. */
static void heap_sift_down(kvp_sess_t **h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;

        if (l < n && sess_order(&h[l], &h[m]) > 0) {
            m = l;
        }
        if (r < n && sess_order(&h[r], &h[m]) > 0) {
            m = r;
        }
        if (m == i) {
            return;
        }
        kvp_sess_t *t = h[i];

        h[i] = h[m];
        h[m] = t;
        i    = m;
    }
}

static void heap_push(kvp_sess_t **h, size_t n, kvp_sess_t *s) /* h holds n, room for n + 1 */
{
    size_t i = n;

    h[i] = s;
    while (i > 0 && sess_order(&h[(i - 1) / 2], &h[i]) < 0) {
        kvp_sess_t *t = h[i];

        h[i]           = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i              = (i - 1) / 2;
    }
}

kvp_status_t kvp_store_session_list(kvp_store_h st, uint64_t after_ns, const char *after_sid,
                                    kvp_store_session_info_t *out, uint32_t max, uint32_t *n_p,
                                    int *more_p)
{
    kvp_sess_t **keep;
    size_t       n = 0, kept = 0;

    if (st == NULL || n_p == NULL || (out == NULL && max > 0) ||
        (after_sid != NULL && strnlen(after_sid, KVP_SID_MAX) == KVP_SID_MAX)) {
        KVP_LOG_ERROR(MOD, "session list with an invalid argument");
        return KVP_ERR_INVALID;
    }
    keep = kvp_malloc((max ? max : 1) * sizeof(*keep), "session list");
    if (keep == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to list %u sessions", max);
        return KVP_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&st->lock);
    for (size_t b = 0; b < st->sessions.nbuckets; b++) {
        for (kvp_sess_t *s = st->sessions.buckets[b]; s != NULL; s = s->hnext) {
            if (after_sid != NULL && key_cmp(s->ns, s->sid, after_ns, after_sid) <= 0) {
                continue;
            }
            n++;
            if (kept < max) {
                heap_push(keep, kept++, s);
            } else if (max > 0 && sess_order(&s, &keep[0]) < 0) {
                keep[0] = s;
                heap_sift_down(keep, kept, 0);
            }
        }
    }
    qsort(keep, kept, sizeof(*keep), sess_order);
    for (size_t i = 0; i < kept; i++) {
        sess_info(st, keep[i], &out[i]);
    }
    pthread_mutex_unlock(&st->lock);
    kvp_free(keep);
    *n_p = (uint32_t)kept;
    if (more_p != NULL) {
        *more_p = n > kept;
    }
    return KVP_OK;
}
