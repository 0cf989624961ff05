/* list.c - kvp_store_session_list: the sessions a store knows (hot or cold), in (ns, sid) order,
 * one page at a time after a key cursor, each with its shape, where it lives and its bytes.
 * A page costs one pass over the session table that keeps the max smallest keys past the cursor
 * in a bounded max-heap (O(n log max), no allocation of n), then a sort of those max, all under
 * the store lock (no disk I/O: cold sessions' records and page entries stay in memory).
 * Tombstones (tomb.c) join the same order when asked for. */
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

/* One listed entry: a session or a tombstone (never both for one key: a put newer than a
 * tombstone clears it, a delete removes the record). */
typedef struct {
    uint64_t          ns;
    const char       *sid;
    const kvp_sess_t *sess;
    const kvp_tomb_t *tomb;
} list_item_t;

static int item_order(const void *a, const void *b)
{
    const list_item_t *x = a;
    const list_item_t *y = b;

    return key_cmp(x->ns, x->sid, y->ns, y->sid);
}

/* The session's page bytes + tail; pages whose length is not known yet (on disk, not read since
 * the store opened) count as the namespace's full sealed page. *lost_p: pages it names that this
 * store lost (neither in DRAM nor on disk: dropped after a failed check, or missing). */
static uint64_t sess_bytes(const kvp_sess_t *s, const kvp_nsprof_t *prof, uint32_t *lost_p)
{
    size_t   n     = kvp_store_sess_page_count(s);
    uint64_t bytes = s->desc.tail_len;
    uint64_t guess = 0;

    if (prof != NULL) {
        guess = KVP_PAGE_HDR_BYTES + kvp_codec_payload_bytes((kvp_codec_id_t)prof->codec,
                                                             prof->heads, prof->head_dim,
                                                             prof->capacity, prof->capacity);
    }
    *lost_p = 0;
    for (size_t i = 0; i < n; i++) {
        bytes += s->pages[i]->len != 0 ? s->pages[i]->len : guess;
        *lost_p += s->pages[i]->slot.ptr == NULL && !s->pages[i]->on_disk;
    }
    return bytes;
}

static void sess_info(const kvp_store_h st, const kvp_sess_t *s, kvp_store_session_info_t *o)
{
    const kvp_nsprof_t *prof = kvp_nsprof_find(&st->profiles, s->ns);
    uint32_t            lost;

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
    o->bytes   = sess_bytes(s, prof, &lost);
    o->damaged = lost > 0;
    o->version = s->version;
}

/* Bounded max-heap of the smallest keys seen: h[0] is the largest kept. */
static void heap_sift_down(list_item_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;

        if (l < n && item_order(&h[l], &h[m]) > 0) {
            m = l;
        }
        if (r < n && item_order(&h[r], &h[m]) > 0) {
            m = r;
        }
        if (m == i) {
            return;
        }
        list_item_t t = h[i];

        h[i] = h[m];
        h[m] = t;
        i    = m;
    }
}

static void heap_push(list_item_t *h, size_t n, list_item_t s) /* h holds n, room for n + 1 */
{
    size_t i = n;

    h[i] = s;
    while (i > 0 && item_order(&h[(i - 1) / 2], &h[i]) < 0) {
        list_item_t t = h[i];

        h[i]           = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i              = (i - 1) / 2;
    }
}

/* Offer one entry to the bounded heap of the max smallest keys past the cursor. */
static void list_offer(list_item_t *keep, size_t *kept, size_t *n, uint32_t max, uint64_t after_ns,
                       const char *after_sid, list_item_t it)
{
    if (after_sid != NULL && key_cmp(it.ns, it.sid, after_ns, after_sid) <= 0) {
        return;
    }
    (*n)++;
    if (*kept < max) {
        heap_push(keep, (*kept)++, it);
    } else if (max > 0 && item_order(&it, &keep[0]) < 0) {
        keep[0] = it;
        heap_sift_down(keep, *kept, 0);
    }
}

kvp_status_t kvp_store_session_list(kvp_store_h st, uint64_t after_ns, const char *after_sid,
                                    kvp_store_session_info_t *out, uint32_t max, uint32_t *n_p,
                                    int *more_p)
{
    return kvp_store_session_list_ex(st, after_ns, after_sid, 0, out, max, n_p, more_p);
}

kvp_status_t kvp_store_session_list_ex(kvp_store_h st, uint64_t after_ns, const char *after_sid,
                                       uint64_t flags, kvp_store_session_info_t *out, uint32_t max,
                                       uint32_t *n_p, int *more_p)
{
    list_item_t    *keep;
    size_t          n = 0, kept = 0;
    kvp_htab_iter_t it = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;

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
    while ((l = kvp_htab_next(&st->sessions, &it)) != NULL) {
        const kvp_sess_t *s = KVP_CONTAINER_OF(l, kvp_sess_t, hlink);

        list_offer(keep, &kept, &n, max, after_ns, after_sid,
                   (list_item_t){s->ns, s->sid, s, NULL});
    }
    it = (kvp_htab_iter_t)KVP_HTAB_ITER_INIT;
    while ((flags & KVP_STORE_LIST_DELETED) && (l = kvp_htab_next(&st->tombs, &it)) != NULL) {
        const kvp_tomb_t *t = KVP_CONTAINER_OF(l, kvp_tomb_t, hlink);

        list_offer(keep, &kept, &n, max, after_ns, after_sid,
                   (list_item_t){t->ns, t->sid, NULL, t});
    }
    qsort(keep, kept, sizeof(*keep), item_order);
    for (size_t i = 0; i < kept; i++) {
        if (keep[i].sess != NULL) {
            sess_info(st, keep[i].sess, &out[i]);
        } else {
            memset(&out[i], 0, sizeof(out[i]));
            out[i].ns = keep[i].ns;
            memcpy(out[i].sid, keep[i].tomb->sid, sizeof(out[i].sid));
            out[i].version = keep[i].tomb->version;
            out[i].deleted = 1;
        }
    }
    pthread_mutex_unlock(&st->lock);
    kvp_free(keep);
    *n_p = (uint32_t)kept;
    if (more_p != NULL) {
        *more_p = n > kept;
    }
    return KVP_OK;
}
