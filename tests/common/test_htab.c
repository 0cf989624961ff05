/* test_htab.c - unit tests of the intrusive hash table (kvpack/htab.h): insert, find and remove
 * of many entries whose hashes collide (same bucket, and the very same hash), growth by doubling
 * at load 1, a walk that visits each entry once and survives removing (and freeing) the entry it
 * stands on, a failed doubling that keeps the table usable with the insert done, and a failed
 * first bucket array, the one insert that fails. */
#include "kvpack/alloc.h"
#include "kvpack/htab.h"

#include "check.h"

#include <string.h>

#define N 2000

typedef struct {
    uint64_t    key;
    int         seen;
    kvp_hlink_t link; /* not first: lookups go through KVP_CONTAINER_OF */
} item_t;

/* Few distinct hashes: items i and i + 8 share a hash, and items with the same i % 8 but a
 * different i % 64 share every low bit while their high bits differ. */
static uint64_t item_hash(uint64_t key)
{
    return (key % 8) | ((key % 64) / 8) << 40;
}

static item_t *find(const kvp_htab_t *t, uint64_t key)
{
    uint64_t h = item_hash(key);

    for (kvp_hlink_t *l = kvp_htab_chain(t, h); l != NULL; l = l->next) {
        item_t *it = KVP_CONTAINER_OF(l, item_t, link);

        if (l->hash == h && it->key == key) {
            return it;
        }
    }
    return NULL;
}

/* Walk the table: no item of items[0, nitems) is seen twice; returns how many were visited. */
static size_t walk_count(const kvp_htab_t *t, item_t *items, size_t nitems)
{
    kvp_htab_iter_t it = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;
    size_t          n  = 0;

    for (size_t i = 0; i < nitems; i++) {
        items[i].seen = 0;
    }
    while ((l = kvp_htab_next(t, &it)) != NULL) {
        KVP_CONTAINER_OF(l, item_t, link)->seen++;
        n++;
    }
    for (size_t i = 0; i < nitems; i++) {
        EXPECT(items[i].seen <= 1, "item %zu seen %d times", i, items[i].seen);
    }
    return n;
}

static void test_collisions_and_growth(void)
{
    static item_t items[N];
    kvp_htab_t    t;
    int64_t       live = kvp_alloc_live_count();
    size_t        n;

    kvp_htab_init(&t, 8, "test htab");
    EXPECT(t.nbuckets == 0 && t.count == 0 && kvp_htab_chain(&t, 5) == NULL);
    EXPECT(find(&t, 5) == NULL);
    for (size_t i = 0; i < N; i++) {
        items[i].key = i;
        CHECK_OK(kvp_htab_insert(&t, &items[i].link, item_hash(i)));
        EXPECT(t.count == i + 1);
        EXPECT((t.nbuckets & (t.nbuckets - 1)) == 0 && t.nbuckets >= 8);
        EXPECT(t.nbuckets >= t.count && (t.nbuckets == 8 || t.nbuckets / 2 < t.count),
               "%zu buckets for %zu entries: doubled only at load 1", t.nbuckets, t.count);
    }
    EXPECT(t.nbuckets == 2048);
    for (size_t i = 0; i < N; i++) {
        EXPECT(find(&t, i) == &items[i], "key %zu", i);
    }
    EXPECT(find(&t, N) == NULL && find(&t, N + 8) == NULL);
    EXPECT(walk_count(&t, items, N) == N);

    for (size_t i = 0; i < N; i += 2) { /* every other one out */
        kvp_htab_remove(&t, &items[i].link);
    }
    EXPECT(t.count == N / 2);
    kvp_htab_remove(&t, &items[0].link); /* not linked any more: a no-op */
    EXPECT(t.count == N / 2);
    for (size_t i = 0; i < N; i++) {
        EXPECT(find(&t, i) == (i % 2 ? &items[i] : NULL), "key %zu", i);
    }
    n = walk_count(&t, items, N);
    EXPECT(n == N / 2);
    for (size_t i = 0; i < N; i++) {
        EXPECT(items[i].seen == (int)(i % 2), "key %zu", i);
    }
    for (size_t i = 0; i < N; i += 2) { /* back in: the table does not shrink, no grow needed */
        CHECK_OK(kvp_htab_insert(&t, &items[i].link, item_hash(i)));
    }
    EXPECT(t.count == N && t.nbuckets == 2048);
    for (size_t i = 0; i < N; i++) {
        EXPECT(find(&t, i) == &items[i], "key %zu", i);
    }
    kvp_htab_cleanup(&t);
    EXPECT(t.buckets == NULL && t.nbuckets == 0 && t.count == 0);
    EXPECT(kvp_alloc_live_count() == live);
}

/* Removing, and freeing, the entry the walk just returned: every entry is still visited once. */
static void test_remove_while_walking(void)
{
    kvp_htab_t      t;
    kvp_htab_iter_t it = KVP_HTAB_ITER_INIT;
    kvp_hlink_t    *l;
    int64_t         live = kvp_alloc_live_count();
    static int      visits[N];
    size_t          n = 0;

    kvp_htab_init(&t, 4, "test htab");
    for (size_t i = 0; i < N; i++) {
        item_t *e = kvp_calloc(1, sizeof(*e), "test item");

        CHECK(e != NULL);
        e->key = i;
        CHECK_OK(kvp_htab_insert(&t, &e->link, item_hash(i)));
        visits[i] = 0;
    }
    while ((l = kvp_htab_next(&t, &it)) != NULL) { /* drop the multiples of 3 */
        item_t *e = KVP_CONTAINER_OF(l, item_t, link);

        visits[e->key]++;
        if (e->key % 3 == 0) {
            kvp_htab_remove(&t, l);
            memset(e, 0xA5, sizeof(*e)); /* a walk that read it now would go astray */
            kvp_free(e);
        }
    }
    for (size_t i = 0; i < N; i++) {
        EXPECT(visits[i] == 1, "key %zu visited %d times", i, visits[i]);
        EXPECT((find(&t, i) != NULL) == (i % 3 != 0), "key %zu", i);
    }
    EXPECT(t.count == N - (N + 2) / 3);

    it = (kvp_htab_iter_t)KVP_HTAB_ITER_INIT; /* then drain it: free without removing */
    while ((l = kvp_htab_next(&t, &it)) != NULL) {
        n++;
        kvp_free(KVP_CONTAINER_OF(l, item_t, link));
    }
    EXPECT(n == N - (N + 2) / 3);
    kvp_htab_cleanup(&t);
    EXPECT(kvp_alloc_live_count() == live);
}

/* A doubling that cannot get memory keeps the array and links the entry anyway; the next insert
 * past load 1 doubles. Without any array, the insert fails and leaves nothing linked. */
static void test_failed_grow(void)
{
    static item_t items[16];
    kvp_htab_t    t;
    int64_t       live = kvp_alloc_live_count();

    for (size_t i = 0; i < 16; i++) {
        items[i].key = i;
    }
    kvp_htab_init(&t, 4, "test htab");
    kvp_alloc_fail_at(1); /* the first array */
    CHECK_ST(kvp_htab_insert(&t, &items[0].link, item_hash(0)), KVP_ERR_NO_MEMORY);
    EXPECT(t.count == 0 && t.nbuckets == 0 && find(&t, 0) == NULL);
    kvp_htab_remove(&t, &items[0].link); /* not linked: a no-op on a table without buckets */
    EXPECT(walk_count(&t, items, 16) == 0);
    kvp_alloc_fail_at(1);
    CHECK_ST(kvp_htab_grow(&t), KVP_ERR_NO_MEMORY);
    EXPECT(t.nbuckets == 0 && t.buckets == NULL);

    for (size_t i = 0; i < 4; i++) { /* the first array: 4 buckets, then load 1 */
        CHECK_OK(kvp_htab_insert(&t, &items[i].link, item_hash(i)));
    }
    EXPECT(t.nbuckets == 4 && t.count == 4);
    kvp_alloc_fail_at(1); /* the doubling to 8 */
    CHECK_OK(kvp_htab_insert(&t, &items[4].link, item_hash(4)));
    EXPECT(t.nbuckets == 4 && t.count == 5);
    kvp_alloc_fail_at(1);
    CHECK_OK(kvp_htab_insert(&t, &items[5].link, item_hash(5)));
    EXPECT(t.nbuckets == 4 && t.count == 6);
    for (size_t i = 0; i < 6; i++) {
        EXPECT(find(&t, i) == &items[i], "key %zu", i);
    }
    kvp_htab_remove(&t, &items[2].link);
    EXPECT(find(&t, 2) == NULL && t.count == 5);
    kvp_alloc_fail_at(0);
    CHECK_OK(kvp_htab_insert(&t, &items[2].link, item_hash(2))); /* load past 1: doubles now */
    EXPECT(t.nbuckets == 8 && t.count == 6);
    for (size_t i = 6; i < 16; i++) {
        CHECK_OK(kvp_htab_insert(&t, &items[i].link, item_hash(i)));
    }
    EXPECT(t.nbuckets == 16 && t.count == 16);
    for (size_t i = 0; i < 16; i++) {
        EXPECT(find(&t, i) == &items[i], "key %zu", i);
    }
    EXPECT(walk_count(&t, items, 16) == 16);
    kvp_htab_cleanup(&t);
    EXPECT(kvp_alloc_live_count() == live);
}

int main(void)
{
    test_collisions_and_growth();
    test_remove_while_walking();
    test_failed_grow();
    return kvp_test_result("test_htab");
}
