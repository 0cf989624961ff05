/* index.c - the store's page table, by (namespace, chunk key, layer), and session index, by
 * (namespace, session id): their hashes and key compares over kvpack/htab.h, and the sessions'
 * (ns, sid) order over kvpack/otree.h for LIST. The tables do not own their entries (the store
 * allocates and frees them); they only link them. */
#include "store_int.h"
#include "kvpack/log.h"

#include <string.h>

#define MOD "store"

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t page_hash(uint64_t ns, kvp_key128_t key, uint32_t layer)
{
    return mix64(key.lo ^ mix64(ns ^ ((uint64_t)layer << 48) ^ key.hi));
}

int kvp_sid_cmp(uint64_t ns_a, const char *sid_a, uint64_t ns_b, const char *sid_b)
{
    if (ns_a != ns_b) {
        return ns_a < ns_b ? -1 : 1;
    }
    return strcmp(sid_a, sid_b);
}

/* ---- (ns, sid) index: sessions and tombstones ---- */

static int sid_order(const kvp_tnode_t *a, const kvp_tnode_t *b)
{
    const kvp_sid_key_t *x = KVP_CONTAINER_OF(a, kvp_sid_key_t, onode);
    const kvp_sid_key_t *y = KVP_CONTAINER_OF(b, kvp_sid_key_t, onode);

    return kvp_sid_cmp(x->ns, x->sid, y->ns, y->sid);
}

static uint64_t sid_hash(uint64_t ns, const char *sid)
{
    uint64_t h = 0xcbf29ce484222325ull ^ ns;

    for (const unsigned char *p = (const unsigned char *)sid; *p != 0; p++) {
        h = (h ^ *p) * 0x100000001b3ull;
    }
    return mix64(h);
}

void kvp_sid_index_init(kvp_sid_index_t *ix, size_t first, const char *tag)
{
    kvp_htab_init(&ix->by_key, first, tag);
    kvp_otree_init(&ix->in_order, sid_order);
}

void kvp_sid_index_cleanup(kvp_sid_index_t *ix)
{
    kvp_htab_cleanup(&ix->by_key);
    kvp_otree_init(&ix->in_order, sid_order);
}

kvp_sid_key_t *kvp_sid_index_find(const kvp_sid_index_t *ix, uint64_t ns, const char *sid)
{
    uint64_t h = sid_hash(ns, sid);

    for (kvp_hlink_t *l = kvp_htab_chain(&ix->by_key, h); l != NULL; l = l->next) {
        kvp_sid_key_t *k = KVP_CONTAINER_OF(l, kvp_sid_key_t, hlink);

        if (l->hash == h && k->ns == ns && strcmp(k->sid, sid) == 0) {
            return k;
        }
    }
    return NULL;
}

kvp_status_t kvp_sid_index_insert(kvp_sid_index_t *ix, kvp_sid_key_t *k)
{
    kvp_status_t status = kvp_htab_insert(&ix->by_key, &k->hlink, sid_hash(k->ns, k->sid));

    if (status == KVP_OK) {
        (void)kvp_otree_insert(&ix->in_order, &k->onode); /* a new key: cannot be there */
    }
    return status;
}

void kvp_sid_index_remove(kvp_sid_index_t *ix, kvp_sid_key_t *k)
{
    kvp_htab_remove(&ix->by_key, &k->hlink);
    kvp_otree_remove(&ix->in_order, &k->onode);
}

typedef struct {
    uint64_t    ns;
    const char *sid;
} sid_probe_t;

static int sid_after(const void *key, const kvp_tnode_t *n)
{
    const sid_probe_t   *p = key;
    const kvp_sid_key_t *k = KVP_CONTAINER_OF(n, kvp_sid_key_t, onode);

    return kvp_sid_cmp(p->ns, p->sid, k->ns, k->sid);
}

static int sid_at_or_after(const void *key, const kvp_tnode_t *n)
{
    return sid_after(key, n) <= 0 ? -1 : 1; /* the key's own entry counts as after it */
}

void kvp_sid_index_seek(const kvp_sid_index_t *ix, kvp_otree_iter_t *it, int inclusive,
                        uint64_t ns, const char *sid)
{
    sid_probe_t p = {ns, sid};

    kvp_otree_seek(&ix->in_order, it, sid != NULL ? &p : NULL,
                   inclusive ? sid_at_or_after : sid_after);
}

kvp_sid_key_t *kvp_sid_index_next(kvp_otree_iter_t *it)
{
    kvp_tnode_t *n = kvp_otree_next(it);

    return n != NULL ? KVP_CONTAINER_OF(n, kvp_sid_key_t, onode) : NULL;
}

/* ---- the store's tables ---- */

kvp_status_t kvp_index_init(kvp_htab_t *pt, kvp_sid_index_t *st)
{
    kvp_htab_init(pt, 1024, "page index");
    kvp_sid_index_init(st, 256, "session index");
    if (kvp_htab_grow(pt) != KVP_OK || kvp_htab_grow(&st->by_key) != KVP_OK) {
        kvp_index_cleanup(pt, st);
        KVP_LOG_ERROR(MOD, "no memory for the store index");
        return KVP_ERR_NO_MEMORY;
    }
    return KVP_OK;
}

void kvp_index_cleanup(kvp_htab_t *pt, kvp_sid_index_t *st)
{
    kvp_htab_cleanup(pt);
    kvp_sid_index_cleanup(st);
}

kvp_page_t *kvp_index_page_find(const kvp_htab_t *pt, uint64_t ns, kvp_key128_t key, uint32_t layer)
{
    uint64_t h = page_hash(ns, key, layer);

    for (kvp_hlink_t *l = kvp_htab_chain(pt, h); l != NULL; l = l->next) {
        kvp_page_t *p = KVP_CONTAINER_OF(l, kvp_page_t, hlink);

        if (l->hash == h && p->ns == ns && p->layer == layer && p->key.lo == key.lo &&
            p->key.hi == key.hi) {
            return p;
        }
    }
    return NULL;
}

void kvp_index_page_insert(kvp_htab_t *pt, kvp_page_t *page)
{
    (void)kvp_htab_insert(pt, &page->hlink, page_hash(page->ns, page->key, page->layer));
    page->indexed = true; /* the table has buckets since kvp_index_init: the insert cannot fail */
}

void kvp_index_page_remove(kvp_htab_t *pt, kvp_page_t *page)
{
    kvp_htab_remove(pt, &page->hlink);
    page->indexed = false;
}

kvp_sess_t *kvp_index_sess_find(const kvp_sid_index_t *st, uint64_t ns, const char *sid)
{
    kvp_sid_key_t *k = kvp_sid_index_find(st, ns, sid);

    return k != NULL ? KVP_CONTAINER_OF(k, kvp_sess_t, key) : NULL;
}

/* The caller found no session of this key (or released it first) */
void kvp_index_sess_insert(kvp_sid_index_t *st, kvp_sess_t *sess)
{
    (void)kvp_sid_index_insert(st, &sess->key); /* has buckets since kvp_index_init: cannot fail */
}

void kvp_index_sess_remove(kvp_sid_index_t *st, kvp_sess_t *sess)
{
    kvp_sid_index_remove(st, &sess->key);
}
