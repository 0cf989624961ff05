/* test_otree.c - unit tests of the intrusive ordered tree (kvpack/otree.h) against a plain
 * array of the keys it should hold: random inserts and removes (ascending and descending runs
 * too, the cases that rotate most), after each batch the AVL invariants (every height right,
 * children differ by at most one, in-order keys strictly increasing, the count) and walks from
 * random keys (present, absent, before the first, after the last, NULL for all) that must give
 * exactly the array's keys past that key, in order; an equal key is refused and not linked. */
#include "kvpack/htab.h" /* KVP_CONTAINER_OF */
#include "kvpack/otree.h"

#include "check.h"

#include <stdlib.h>
#include <string.h>

#define N 3000

typedef struct {
    int         seen;
    kvp_tnode_t node; /* not first: entries go through KVP_CONTAINER_OF */
    long        key;
} item_t;

static long key_of(const kvp_tnode_t *n) { return KVP_CONTAINER_OF(n, item_t, node)->key; }

static int item_cmp(const kvp_tnode_t *a, const kvp_tnode_t *b)
{
    return key_of(a) < key_of(b) ? -1 : key_of(a) > key_of(b);
}

static int key_cmp(const void *key, const kvp_tnode_t *n)
{
    long k = *(const long *)key;

    return k < key_of(n) ? -1 : k > key_of(n);
}

/* height of n's subtree as it really is; *ok cleared on a wrong height, an imbalance or keys out
 * of (lo, hi) */
static int check_node(const kvp_tnode_t *n, long lo, long hi, size_t *count, int *ok)
{
    int l, r;

    if (n == NULL) {
        return 0;
    }
    if (key_of(n) <= lo || key_of(n) >= hi) {
        *ok = 0;
    }
    (*count)++;
    l = check_node(n->left, lo, key_of(n), count, ok);
    r = check_node(n->right, key_of(n), hi, count, ok);
    if (n->height != 1 + (l > r ? l : r) || l - r > 1 || r - l > 1) {
        *ok = 0;
    }
    return 1 + (l > r ? l : r);
}

static void check_tree(const kvp_otree_t *t, const item_t *items, size_t nkeys, unsigned *rng)
{
    size_t count = 0;
    int    ok    = 1;
    long   want[N], k;
    size_t nw = 0;

    check_node(t->root, -1, 1L << 40, &count, &ok);
    EXPECT(ok, "AVL invariants broken");
    EXPECT(count == t->count && count == nkeys, "count %zu, tree says %zu, want %zu", count,
           t->count, nkeys);
    for (size_t i = 0; i < N; i++) {
        if (items[i].seen) {
            want[nw++] = items[i].key; /* keys are 10 * i: the array is in order */
        }
    }
    for (int probe = 0; probe < 8; probe++) {
        kvp_otree_iter_t it;
        kvp_tnode_t     *n;
        size_t           at = 0, got = 0;
        int              all = probe == 0;

        k = probe == 1 ? -5 : probe == 2 ? 10L * N : (long)(rand_r(rng) % (10 * N + 10)) - 5;
        kvp_otree_seek(t, &it, all ? NULL : &k, key_cmp);
        while (!all && at < nw && want[at] <= k) {
            at++;
        }
        while ((n = kvp_otree_next(&it)) != NULL) {
            if (at + got >= nw || key_of(n) != want[at + got]) {
                EXPECT(0, "walk after %ld: entry %zu is %ld", all ? -1L : k, got, key_of(n));
                break;
            }
            got++;
        }
        EXPECT(at + got == nw, "walk after %ld: %zu entries, want %zu", all ? -1L : k, got,
               nw - at);
    }
}

int main(void)
{
    static item_t items[N], twin;
    kvp_otree_t   t;
    unsigned      rng = 7;
    size_t        nkeys = 0;

    kvp_otree_init(&t, item_cmp);
    for (size_t i = 0; i < N; i++) {
        items[i].key = 10 * (long)i;
    }
    check_tree(&t, items, 0, &rng);
    for (int round = 0; round < 60; round++) {
        for (int op = 0; op < 200; op++) {
            size_t i = round % 3 == 0 ? (size_t)(round * 200 + op) % N /* ascending runs */
                       : round % 3 == 1 ? N - 1 - (size_t)(round * 200 + op) % N /* descending */
                                        : (size_t)rand_r(&rng) % N;

            if (!items[i].seen) {
                CHECK_OK(kvp_otree_insert(&t, &items[i].node));
                items[i].seen = 1;
                nkeys++;
            } else if (rand_r(&rng) % 3 != 0) {
                kvp_otree_remove(&t, &items[i].node);
                items[i].seen = 0;
                nkeys--;
            }
        }
        check_tree(&t, items, nkeys, &rng);
    }
    for (size_t i = 0; i < N; i++) { /* an equal key is refused, the tree unchanged */
        if (items[i].seen) {
            twin.key = items[i].key;
            EXPECT(kvp_otree_insert(&t, &twin.node) == KVP_ERR_INVALID, "equal key linked");
            break;
        }
    }
    check_tree(&t, items, nkeys, &rng);
    for (size_t i = 0; i < N; i++) { /* empty it */
        if (items[i].seen) {
            kvp_otree_remove(&t, &items[i].node);
            items[i].seen = 0;
            nkeys--;
        }
    }
    check_tree(&t, items, 0, &rng);
    EXPECT(t.root == NULL, "empty tree has a root");
    return kvp_test_result("test_otree");
}
