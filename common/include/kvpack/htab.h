/* htab.h - the one intrusive chained hash table: an entry embeds a kvp_hlink_t (its chain link and
 * its hash, so growing never calls back to hash again); the table links entries, never allocates
 * or frees them. Power-of-two buckets, doubled at load factor 1. Lookups walk kvp_htab_chain(t,
 * hash) and compare keys at the call site (no callback on the hot path). Not thread-safe: the
 * owner locks. */
#ifndef KVPACK_HTAB_H
#define KVPACK_HTAB_H

#include "kvpack/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The entry of type _type whose member _member is at _ptr. */
#define KVP_CONTAINER_OF(_ptr, _type, _member) \
    ((_type *)(void *)((char *)(_ptr) - offsetof(_type, _member)))

typedef struct kvp_hlink {
    struct kvp_hlink *next; /* chain; NULL at its end */
    uint64_t          hash; /* set by kvp_htab_insert */
} kvp_hlink_t;

typedef struct {
    kvp_hlink_t **buckets;  /* NULL until the first array is allocated */
    size_t        nbuckets; /* power of two; 0 while buckets is NULL */
    size_t        count;    /* entries linked */
    size_t        first;    /* nbuckets of the first array */
    const char   *tag;      /* allocation tag of the bucket arrays */
} kvp_htab_t;

/* A walk's place: start from KVP_HTAB_ITER_INIT. */
typedef struct {
    size_t       bucket; /* next bucket to open */
    kvp_hlink_t *next;   /* next entry to return */
} kvp_htab_iter_t;

#define KVP_HTAB_ITER_INIT {0, NULL}

/* An empty table that gets `first` buckets (a power of two) at kvp_htab_grow or its first insert.
 * Allocates nothing. */
void         kvp_htab_init(kvp_htab_t *t, size_t first, const char *tag);
/* Frees the bucket array (not the entries) and leaves the table zeroed. */
void         kvp_htab_cleanup(kvp_htab_t *t);
/* Get the first bucket array, or double the one there. KVP_ERR_NO_MEMORY (not logged: out of
 * memory, first 0 or no power of two, or the size would wrap) leaves the table as it was. */
kvp_status_t kvp_htab_grow(kvp_htab_t *t);
/* Link e under hash, growing first at load factor 1. A failed grow keeps the array there and
 * links e anyway (chains get longer); KVP_ERR_NO_MEMORY (not logged, e not linked) only when the
 * table has no buckets and cannot get its first array. */
kvp_status_t kvp_htab_insert(kvp_htab_t *t, kvp_hlink_t *e, uint64_t hash);
/* Unlink e (a no-op when it is not linked in t). */
void         kvp_htab_remove(kvp_htab_t *t, kvp_hlink_t *e);
/* Every entry once, in no particular order; NULL at the end. The entry just returned may be
 * removed (and freed) before the next call; nothing else may be inserted or removed meanwhile. */
kvp_hlink_t *kvp_htab_next(const kvp_htab_t *t, kvp_htab_iter_t *it);

/* The chain holding every entry of this hash (and others): follow ->next, compare hash and key. */
static inline kvp_hlink_t *kvp_htab_chain(const kvp_htab_t *t, uint64_t hash)
{
    return t->nbuckets != 0 ? t->buckets[hash & (t->nbuckets - 1)] : NULL;
}

#ifdef __cplusplus
}
#endif
#endif
