/* index.c - the store's two hash tables: pages by (namespace, chunk key, layer) and sessions by
 * (namespace, session id). Chained, power-of-two buckets, doubled at load factor 1. The tables do
 * not own their entries (the store allocates and frees them); they only link them. */
#include "store_int.h"
#include "kvpack/alloc.h"
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

static uint64_t sess_hash(uint64_t ns, const char *sid)
{
    uint64_t h = 0xcbf29ce484222325ull ^ ns;

    for (const unsigned char *p = (const unsigned char *)sid; *p != 0; p++) {
        h = (h ^ *p) * 0x100000001b3ull;
    }
    return mix64(h);
}

kvp_status_t kvp_index_init(kvp_page_table_t *pt, kvp_sess_table_t *st)
{
    memset(pt, 0, sizeof(*pt));
    memset(st, 0, sizeof(*st));
    pt->nbuckets = 1024;
    st->nbuckets = 256;
    pt->buckets  = kvp_calloc(pt->nbuckets, sizeof(*pt->buckets), "page index");
    st->buckets  = kvp_calloc(st->nbuckets, sizeof(*st->buckets), "session index");
    if (pt->buckets == NULL || st->buckets == NULL) {
        kvp_free(pt->buckets);
        kvp_free(st->buckets);
        KVP_LOG_ERROR(MOD, "no memory for the store index");
        return KVP_ERR_NO_MEMORY;
    }
    return KVP_OK;
}

void kvp_index_cleanup(kvp_page_table_t *pt, kvp_sess_table_t *st)
{
    kvp_free(pt->buckets);
    kvp_free(st->buckets);
    memset(pt, 0, sizeof(*pt));
    memset(st, 0, sizeof(*st));
}

kvp_page_t *kvp_index_page_find(kvp_page_table_t *pt, uint64_t ns, kvp_key128_t key, uint32_t layer)
{
    kvp_page_t *p = pt->buckets[page_hash(ns, key, layer) & (pt->nbuckets - 1)];

    for (; p != NULL; p = p->hnext) {
        if (p->ns == ns && p->layer == layer && p->key.lo == key.lo && p->key.hi == key.hi) {
            return p;
        }
    }
    return NULL;
}

static void page_grow(kvp_page_table_t *pt)
{
    size_t       n = pt->nbuckets * 2;
    kvp_page_t **b = kvp_calloc(n, sizeof(*b), "page index");

    if (b == NULL) {
        return; /* longer chains, still correct */
    }
    for (size_t i = 0; i < pt->nbuckets; i++) {
        kvp_page_t *p = pt->buckets[i];

        while (p != NULL) {
            kvp_page_t *next = p->hnext;
            size_t      h    = page_hash(p->ns, p->key, p->layer) & (n - 1);

            p->hnext = b[h];
            b[h]     = p;
            p        = next;
        }
    }
    kvp_free(pt->buckets);
    pt->buckets  = b;
    pt->nbuckets = n;
}

kvp_status_t kvp_index_page_insert(kvp_page_table_t *pt, kvp_page_t *page)
{
    size_t h;

    if (pt->count >= pt->nbuckets) {
        page_grow(pt);
    }
    h                = page_hash(page->ns, page->key, page->layer) & (pt->nbuckets - 1);
    page->hnext      = pt->buckets[h];
    pt->buckets[h]   = page;
    page->indexed    = true;
    pt->count++;
    return KVP_OK;
}

void kvp_index_page_remove(kvp_page_table_t *pt, kvp_page_t *page)
{
    kvp_page_t **pp = &pt->buckets[page_hash(page->ns, page->key, page->layer) & (pt->nbuckets - 1)];

    for (; *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == page) {
            *pp           = page->hnext;
            page->hnext   = NULL;
            page->indexed = false;
            pt->count--;
            return;
        }
    }
}

kvp_sess_t *kvp_index_sess_find(kvp_sess_table_t *st, uint64_t ns, const char *sid)
{
    kvp_sess_t *s = st->buckets[sess_hash(ns, sid) & (st->nbuckets - 1)];

    for (; s != NULL; s = s->hnext) {
        if (s->ns == ns && strcmp(s->sid, sid) == 0) {
            return s;
        }
    }
    return NULL;
}

static void sess_grow(kvp_sess_table_t *st)
{
    size_t       n = st->nbuckets * 2;
    kvp_sess_t **b = kvp_calloc(n, sizeof(*b), "session index");

    if (b == NULL) {
        return;
    }
    for (size_t i = 0; i < st->nbuckets; i++) {
        kvp_sess_t *s = st->buckets[i];

        while (s != NULL) {
            kvp_sess_t *next = s->hnext;
            size_t      h    = sess_hash(s->ns, s->sid) & (n - 1);

            s->hnext = b[h];
            b[h]     = s;
            s        = next;
        }
    }
    kvp_free(st->buckets);
    st->buckets  = b;
    st->nbuckets = n;
}

kvp_status_t kvp_index_sess_insert(kvp_sess_table_t *st, kvp_sess_t *sess)
{
    size_t h;

    if (st->count >= st->nbuckets) {
        sess_grow(st);
    }
    h              = sess_hash(sess->ns, sess->sid) & (st->nbuckets - 1);
    sess->hnext    = st->buckets[h];
    st->buckets[h] = sess;
    st->count++;
    return KVP_OK;
}

void kvp_index_sess_remove(kvp_sess_table_t *st, kvp_sess_t *sess)
{
    kvp_sess_t **pp = &st->buckets[sess_hash(sess->ns, sess->sid) & (st->nbuckets - 1)];

    for (; *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == sess) {
            *pp         = sess->hnext;
            sess->hnext = NULL;
            st->count--;
            return;
        }
    }
}
