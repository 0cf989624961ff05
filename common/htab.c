/* htab.c - the intrusive chained hash table (see kvpack/htab.h): growth by doubling, rehashing
 * from the hash each link keeps; insert, remove and a walk that survives removing its entry. */
#include "kvpack/htab.h"
#include "kvpack/alloc.h"

#include <string.h>

void kvp_htab_init(kvp_htab_t *t, size_t first, const char *tag)
{
    memset(t, 0, sizeof(*t));
    t->first = first;
    t->tag   = tag;
}

void kvp_htab_cleanup(kvp_htab_t *t)
{
    kvp_free(t->buckets);
    memset(t, 0, sizeof(*t));
}

kvp_status_t kvp_htab_grow(kvp_htab_t *t)
{
    size_t        n = t->nbuckets != 0 ? t->nbuckets * 2 : t->first;
    kvp_hlink_t **b;

    if (n <= t->nbuckets || (n & (n - 1)) != 0) { /* would wrap, or first is no power of two */
        return KVP_ERR_NO_MEMORY;
    }
    b = kvp_calloc(n, sizeof(*b), t->tag);
    if (b == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < t->nbuckets; i++) {
        kvp_hlink_t *e = t->buckets[i];

        while (e != NULL) {
            kvp_hlink_t *next = e->next;
            size_t       h    = e->hash & (n - 1);

            e->next = b[h];
            b[h]    = e;
            e       = next;
        }
    }
    kvp_free(t->buckets);
    t->buckets  = b;
    t->nbuckets = n;
    return KVP_OK;
}

kvp_status_t kvp_htab_insert(kvp_htab_t *t, kvp_hlink_t *e, uint64_t hash)
{
    kvp_hlink_t **head;

    if (t->count >= t->nbuckets && kvp_htab_grow(t) != KVP_OK && t->nbuckets == 0) {
        return KVP_ERR_NO_MEMORY; /* a failed doubling only makes chains longer */
    }
    head    = &t->buckets[hash & (t->nbuckets - 1)];
    e->hash = hash;
    e->next = *head;
    *head   = e;
    t->count++;
    return KVP_OK;
}

void kvp_htab_remove(kvp_htab_t *t, kvp_hlink_t *e)
{
    kvp_hlink_t **pp;

    if (t->nbuckets == 0) {
        return;
    }
    for (pp = &t->buckets[e->hash & (t->nbuckets - 1)]; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp     = e->next;
            e->next = NULL;
            t->count--;
            return;
        }
    }
}

kvp_hlink_t *kvp_htab_next(const kvp_htab_t *t, kvp_htab_iter_t *it)
{
    kvp_hlink_t *e;

    while (it->next == NULL) {
        if (it->bucket >= t->nbuckets) {
            return NULL;
        }
        it->next = t->buckets[it->bucket++];
    }
    e        = it->next;
    it->next = e->next;
    return e;
}
