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

static int sess_order(const kvp_tnode_t *a, const kvp_tnode_t *b)
{
    const kvp_sess_t *x = KVP_CONTAINER_OF(a, kvp_sess_t, onode);
    const kvp_sess_t *y = KVP_CONTAINER_OF(b, kvp_sess_t, onode);

    return kvp_sid_cmp(x->ns, x->sid, y->ns, y->sid);
}

static uint64_t sess_hash(uint64_t ns, const char *sid)
{
    uint64_t h = 0xcbf29ce484222325ull ^ ns;

    for (const unsigned char *p = (const unsigned char *)sid; *p != 0; p++) {
        h = (h ^ *p) * 0x100000001b3ull;
    }
    return mix64(h);
}

kvp_status_t kvp_index_init(kvp_htab_t *pt, kvp_sid_index_t *st)
{
    kvp_htab_init(pt, 1024, "page index");
    kvp_htab_init(&st->by_key, 256, "session index");
    kvp_otree_init(&st->in_order, sess_order);
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
    kvp_htab_cleanup(&st->by_key);
    kvp_otree_init(&st->in_order, sess_order); /* its entries are the store's to free */
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
    uint64_t h = sess_hash(ns, sid);

    for (kvp_hlink_t *l = kvp_htab_chain(&st->by_key, h); l != NULL; l = l->next) {
        kvp_sess_t *s = KVP_CONTAINER_OF(l, kvp_sess_t, hlink);

        if (l->hash == h && s->ns == ns && strcmp(s->sid, sid) == 0) {
            return s;
        }
    }
    return NULL;
}

/* The caller found no session of this key (or released it first): the key is new to both */
void kvp_index_sess_insert(kvp_sid_index_t *st, kvp_sess_t *sess)
{
    (void)kvp_htab_insert(&st->by_key, &sess->hlink, sess_hash(sess->ns, sess->sid));
    (void)kvp_otree_insert(&st->in_order, &sess->onode);
}

void kvp_index_sess_remove(kvp_sid_index_t *st, kvp_sess_t *sess)
{
    kvp_htab_remove(&st->by_key, &sess->hlink);
    kvp_otree_remove(&st->in_order, &sess->onode);
}
