/* otree.c - kvpack/otree.h: an intrusive AVL tree. Insert and remove recurse down the path
 * (depth ~1.44 log2 n) and rebalance on the way back up with single or double rotations; a
 * removed entry with two children is replaced by relinking its successor in its place (entries
 * are never copied: they belong to the owner). The iterator keeps the path still to visit. */
#include "kvpack/otree.h"

static int height(const kvp_tnode_t *n) { return n != NULL ? n->height : 0; }

static void fix_height(kvp_tnode_t *n)
{
    int l = height(n->left), r = height(n->right);

    n->height = 1 + (l > r ? l : r);
}

static kvp_tnode_t *rotate_right(kvp_tnode_t *y)
{
    kvp_tnode_t *x = y->left;

    y->left  = x->right;
    x->right = y;
    fix_height(y);
    fix_height(x);
    return x;
}

static kvp_tnode_t *rotate_left(kvp_tnode_t *x)
{
    kvp_tnode_t *y = x->right;

    x->right = y->left;
    y->left  = x;
    fix_height(x);
    fix_height(y);
    return y;
}

/* n's subtrees are balanced and differ in height by at most 2: rebalance n, return the root */
static kvp_tnode_t *rebalance(kvp_tnode_t *n)
{
    int b = height(n->left) - height(n->right);

    fix_height(n);
    if (b > 1) {
        if (height(n->left->left) < height(n->left->right)) {
            n->left = rotate_left(n->left);
        }
        return rotate_right(n);
    }
    if (b < -1) {
        if (height(n->right->right) < height(n->right->left)) {
            n->right = rotate_right(n->right);
        }
        return rotate_left(n);
    }
    return n;
}

static kvp_tnode_t *insert_at(kvp_otree_t *t, kvp_tnode_t *root, kvp_tnode_t *n, int *dup)
{
    int c;

    if (root == NULL) {
        n->left   = NULL;
        n->right  = NULL;
        n->height = 1;
        return n;
    }
    c = t->cmp(n, root);
    if (c == 0) {
        *dup = 1;
        return root;
    }
    if (c < 0) {
        root->left = insert_at(t, root->left, n, dup);
    } else {
        root->right = insert_at(t, root->right, n, dup);
    }
    return *dup ? root : rebalance(root);
}

/* unlink the smallest entry of root's subtree into *min; returns the subtree's new root */
static kvp_tnode_t *unlink_min(kvp_tnode_t *root, kvp_tnode_t **min)
{
    if (root->left == NULL) {
        *min = root;
        return root->right;
    }
    root->left = unlink_min(root->left, min);
    return rebalance(root);
}

static kvp_tnode_t *remove_at(kvp_otree_t *t, kvp_tnode_t *root, kvp_tnode_t *n)
{
    kvp_tnode_t *succ, *right;

    if (root == NULL) {
        return NULL; /* not linked: nothing to do */
    }
    if (root != n) {
        if (t->cmp(n, root) < 0) {
            root->left = remove_at(t, root->left, n);
        } else {
            root->right = remove_at(t, root->right, n);
        }
        return rebalance(root);
    }
    t->count--;
    if (n->right == NULL) {
        return n->left;
    }
    right       = unlink_min(n->right, &succ);
    succ->left  = n->left;
    succ->right = right;
    return rebalance(succ);
}

void kvp_otree_init(kvp_otree_t *t, kvp_tnode_cmp_fn cmp)
{
    t->root  = NULL;
    t->count = 0;
    t->cmp   = cmp;
}

kvp_status_t kvp_otree_insert(kvp_otree_t *t, kvp_tnode_t *n)
{
    int dup = 0;

    t->root = insert_at(t, t->root, n, &dup);
    if (dup) {
        return KVP_ERR_INVALID;
    }
    t->count++;
    return KVP_OK;
}

void kvp_otree_remove(kvp_otree_t *t, kvp_tnode_t *n)
{
    t->root = remove_at(t, t->root, n);
}

void kvp_otree_seek(const kvp_otree_t *t, kvp_otree_iter_t *it, const void *key,
                    kvp_tkey_cmp_fn cmp)
{
    const kvp_tnode_t *n = t->root;

    it->depth = 0;
    while (n != NULL) {
        if (key == NULL || cmp(key, n) < 0) {
            it->stack[it->depth++] = n; /* n and its right side come after the key */
            n                      = n->left;
        } else {
            n = n->right;
        }
    }
}

kvp_tnode_t *kvp_otree_next(kvp_otree_iter_t *it)
{
    const kvp_tnode_t *n;

    if (it->depth == 0) {
        return NULL;
    }
    n = it->stack[--it->depth];
    for (const kvp_tnode_t *c = n->right; c != NULL; c = c->left) {
        it->stack[it->depth++] = c;
    }
    return (kvp_tnode_t *)n;
}
