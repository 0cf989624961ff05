/* list.c - kvp_store_session_list: the sessions a store knows (hot or cold), in (ns, sid) order,
 * one page at a time after a key cursor, each with its shape, where it lives and its bytes.
 * A page walks the sessions' order tree (and, when asked, the tombstones', merged into the same
 * order) from the cursor for its max entries: O(log n + max) under the store lock, whatever the
 * number of sessions (no disk I/O: cold sessions' records and page entries stay in memory). */
#include "store_int.h"

#include "kvpack/codec.h"
#include "kvpack/log.h"

#include <string.h>

#define MOD "store"

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
    const kvp_nsprof_t *prof = kvp_nsprof_find(&st->profiles, s->key.ns);
    uint32_t            lost;

    memset(o, 0, sizeof(*o));
    o->ns = s->key.ns;
    strcpy(o->sid, s->key.sid); /* under KVP_SID_MAX bytes */
    o->layers      = s->desc.layers;
    o->page_tokens = s->desc.page_tokens;
    o->n_chunks    = s->desc.n_chunks;
    o->tail_tokens = s->desc.tail_tokens;
    if (prof != NULL) {
        o->codec    = prof->codec;
        o->heads    = prof->heads;
        o->head_dim = prof->head_dim;
    }
    o->where = (s->hot ? KVP_STORE_IN_DRAM : 0u) |
               (kvp_store_sess_on_disk_now(s) ? KVP_STORE_ON_DISK : 0u);
    o->bytes   = sess_bytes(s, prof, &lost);
    o->damaged = lost > 0;
    o->version = s->version;
}

kvp_status_t kvp_store_session_list(kvp_store_h st, uint64_t after_ns, const char *after_sid,
                                    kvp_store_session_info_t *out, uint32_t max, uint32_t *n_p,
                                    int *more_p)
{
    return kvp_store_session_list_ex(st, after_ns, after_sid, 0, out, max, n_p, more_p);
}

static void tomb_info(const kvp_tomb_t *t, kvp_store_session_info_t *o)
{
    memset(o, 0, sizeof(*o));
    o->ns = t->key.ns;
    strcpy(o->sid, t->key.sid); /* only its own bytes are there */
    o->version = t->version;
    o->deleted = 1;
}

kvp_status_t kvp_store_session_list_ex(kvp_store_h st, uint64_t after_ns, const char *after_sid,
                                       uint64_t flags, kvp_store_session_info_t *out, uint32_t max,
                                       uint32_t *n_p, int *more_p)
{
    kvp_otree_iter_t     si, ti;
    const kvp_sid_key_t *sk, *tk;
    uint32_t             kept = 0;

    if (st == NULL || n_p == NULL || (out == NULL && max > 0) ||
        (after_sid != NULL && strnlen(after_sid, KVP_SID_MAX) == KVP_SID_MAX)) {
        KVP_LOG_ERROR(MOD, "session list with an invalid argument");
        return KVP_ERR_INVALID;
    }
    pthread_mutex_lock(&st->lock);
    kvp_sid_index_seek(&st->sessions, &si, (flags & KVP_STORE_LIST_INCLUSIVE) != 0, after_ns,
                       after_sid);
    sk = kvp_sid_index_next(&si);
    tk = NULL;
    if (flags & KVP_STORE_LIST_DELETED) { /* tombstones join the same order */
        kvp_sid_index_seek(&st->tombs, &ti, (flags & KVP_STORE_LIST_INCLUSIVE) != 0, after_ns,
                           after_sid);
        tk = kvp_sid_index_next(&ti);
    }
    for (; kept < max && (sk != NULL || tk != NULL); kept++) { /* merge the two orders */
        int c = (sk != NULL && tk != NULL) ? kvp_sid_cmp(sk->ns, sk->sid, tk->ns, tk->sid) : 0;

        /* a put newer than a tombstone clears it, a delete the record; both are there only when
         * that clear failed on disk, and then the record is the newer: it is listed, not both */
        if (sk != NULL && tk != NULL && c == 0) {
            tk = kvp_sid_index_next(&ti);
        }
        if (tk == NULL || (sk != NULL && c <= 0)) {
            sess_info(st, KVP_CONTAINER_OF(sk, kvp_sess_t, key), &out[kept]);
            sk = kvp_sid_index_next(&si);
        } else {
            tomb_info(KVP_CONTAINER_OF(tk, kvp_tomb_t, key), &out[kept]);
            tk = kvp_sid_index_next(&ti);
        }
    }
    pthread_mutex_unlock(&st->lock);
    *n_p = kept;
    if (more_p != NULL) {
        *more_p = sk != NULL || tk != NULL;
    }
    return KVP_OK;
}
