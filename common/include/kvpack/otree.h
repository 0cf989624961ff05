/* otree.h - the one intrusive ordered tree (AVL): an entry embeds a kvp_tnode_t, the tree links
 * entries in the order of a compare callback fixed at init and never allocates or frees them.
 * Insert and remove are O(log n); an iterator walks in order from the first entry past a key
 * (the store lists sessions this way, a page at a time, without visiting the rest). Keys must be
 * unique. Not thread-safe: the owner locks. */
#ifndef KVPACK_OTREE_H
#define KVPACK_OTREE_H

#include "kvpack/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_tnode {
    struct kvp_tnode *left, *right;
    int               height; /* of the subtree rooted here; 1 for a leaf */
} kvp_tnode_t;

/* <0, 0, >0 as a orders before, equal to or after b */
typedef int (*kvp_tnode_cmp_fn)(const kvp_tnode_t *a, const kvp_tnode_t *b);
/* the same for a key (whatever the owner seeks by) against an entry */
typedef int (*kvp_tkey_cmp_fn)(const void *key, const kvp_tnode_t *n);

typedef struct {
    kvp_tnode_t     *root;
    size_t           count;
    kvp_tnode_cmp_fn cmp;
} kvp_otree_t;

/* An AVL tree of n entries is at most 1.44 log2(n + 2) high: 96 levels hold any tree that fits
 * in memory. */
#define KVP_OTREE_MAX_DEPTH 96

typedef struct {
    const kvp_tnode_t *stack[KVP_OTREE_MAX_DEPTH]; /* the path still to visit */
    int                depth;
} kvp_otree_iter_t;

void         kvp_otree_init(kvp_otree_t *t, kvp_tnode_cmp_fn cmp);
/* Link n. KVP_ERR_INVALID (n not linked) when an equal entry is there already. */
kvp_status_t kvp_otree_insert(kvp_otree_t *t, kvp_tnode_t *n);
/* Unlink n, which must be linked in t. */
void         kvp_otree_remove(kvp_otree_t *t, kvp_tnode_t *n);
/* Start a walk at the first entry ordered after key (cmp(key, entry) < 0), or at the first entry
 * of all when key is NULL. */
void         kvp_otree_seek(const kvp_otree_t *t, kvp_otree_iter_t *it, const void *key,
                            kvp_tkey_cmp_fn cmp);
/* The walk's next entry in order, NULL at the end. The tree must not change during a walk. */
kvp_tnode_t *kvp_otree_next(kvp_otree_iter_t *it);

#ifdef __cplusplus
}
#endif
#endif
