/* list.c - kvp_store_session_list: the sessions a store knows (hot or cold), in (ns, sid) order,
 * one page at a time after a key cursor, each with its shape, where it lives and its bytes.
 * A page costs one pass over the session table and a sort of the sessions past the cursor, all
 * under the store lock (no disk I/O: cold sessions' records and page entries stay in memory). */
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

kvp_status_t kvp_store_session_list(kvp_store_h st, uint64_t after_ns, const char *after_sid,
                                    kvp_store_session_info_t *out, uint32_t max, uint32_t *n_p,
                                    int *more_p)
{
    kvp_sess_t **after;
    size_t       n = 0;
    uint32_t     take;

    if (st == NULL || n_p == NULL || (out == NULL && max > 0) ||
        (after_sid != NULL && strnlen(after_sid, KVP_SID_MAX) == KVP_SID_MAX)) {
        KVP_LOG_ERROR(MOD, "session list with an invalid argument");
        return KVP_ERR_INVALID;
    }
    pthread_mutex_lock(&st->lock);
    after = kvp_malloc((st->sessions.count ? st->sessions.count : 1) * sizeof(*after),
                       "session list");
    if (after == NULL) {
        pthread_mutex_unlock(&st->lock);
        KVP_LOG_ERROR(MOD, "no memory to list %zu sessions", st->sessions.count);
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t b = 0; b < st->sessions.nbuckets; b++) {
        for (kvp_sess_t *s = st->sessions.buckets[b]; s != NULL; s = s->hnext) {
            if (after_sid == NULL || key_cmp(s->ns, s->sid, after_ns, after_sid) > 0) {
                after[n++] = s;
            }
        }
    }
    qsort(after, n, sizeof(*after), sess_order);
    take = n < max ? (uint32_t)n : max;
    for (uint32_t i = 0; i < take; i++) {
        sess_info(st, after[i], &out[i]);
    }
    pthread_mutex_unlock(&st->lock);
    kvp_free(after);
    *n_p = take;
    if (more_p != NULL) {
        *more_p = n > take;
    }
    return KVP_OK;
}
