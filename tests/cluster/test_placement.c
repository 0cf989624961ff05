/* test_placement.c - rendezvous placement (cluster/placement.c): deterministic and independent of
 * the order peers are listed in; 20,000 sessions over 4 nodes give each 25 % +- 2 % as primary;
 * removing a node moves exactly the sessions it was primary for (to their second choice) and keeps
 * every other node's relative order; adding a fifth takes ~1/5 of the primaries, all to itself. */
#include "kvpack/placement.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

#define NSID 20000u
#define NS   0x5eed0f00dull

static const char *peers[5] = {"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070",
                               "10.0.0.4:7070", "10.0.0.5:7070"};

static void sid_of(uint32_t i, char *buf, size_t cap)
{
    snprintf(buf, cap, "chat-%u", i);
}

/* The peer string ranked r-th for sid among nodes[0..n). */
static const char *ranked(const char *const *nodes, uint32_t n, const char *sid, uint32_t r)
{
    uint32_t order[8];

    CHECK_OK(kvp_placement_rank(nodes, n, NS, sid, order));
    return nodes[order[r]];
}

static void test_deterministic(void)
{
    const char *shuffled[4] = {peers[2], peers[0], peers[3], peers[1]};
    uint32_t    a[4], b[4], c[4];
    char        sid[32];

    for (uint32_t i = 0; i < 2000; i++) {
        sid_of(i, sid, sizeof(sid));
        CHECK_OK(kvp_placement_rank(peers, 4, NS, sid, a));
        CHECK_OK(kvp_placement_rank(peers, 4, NS, sid, b));
        CHECK_OK(kvp_placement_rank(shuffled, 4, NS, sid, c));
        for (int r = 0; r < 4; r++) {
            CHECK(a[r] == b[r]);
            CHECK(strcmp(peers[a[r]], shuffled[c[r]]) == 0); /* same peer, whatever the listing */
        }
        CHECK(a[0] != a[1] && a[0] != a[2] && a[0] != a[3] && a[1] != a[2] && a[1] != a[3] &&
              a[2] != a[3]);
    }
    /* the namespace is part of the key: another ns ranks some sessions differently */
    {
        uint32_t moved = 0;

        for (uint32_t i = 0; i < 1000; i++) {
            sid_of(i, sid, sizeof(sid));
            CHECK_OK(kvp_placement_rank(peers, 4, NS, sid, a));
            CHECK_OK(kvp_placement_rank(peers, 4, NS + 1, sid, b));
            moved += a[0] != b[0];
        }
        EXPECT(moved > 600 && moved < 900, "ns change moved %u of 1000 primaries", moved);
    }
}

static void test_balance(void)
{
    uint32_t count[4] = {0}, second[4] = {0}, order[4];
    char     sid[32];

    for (uint32_t i = 0; i < NSID; i++) {
        sid_of(i, sid, sizeof(sid));
        CHECK_OK(kvp_placement_rank(peers, 4, NS, sid, order));
        count[order[0]]++;
        second[order[1]]++;
    }
    for (int k = 0; k < 4; k++) {
        double share = (double)count[k] / NSID;

        printf("node %d: %.2f %% primary, %.2f %% second\n", k, 100 * share,
               100.0 * second[k] / NSID);
        EXPECT(share >= 0.23 && share <= 0.27, "node %d primary share %.4f", k, share);
        EXPECT(second[k] >= NSID * 23 / 100 && second[k] <= NSID * 27 / 100,
               "node %d second-choice count %u", k, second[k]);
    }
}

static void test_remove(void)
{
    char sid[32];

    for (uint32_t gone = 0; gone < 4; gone++) {
        const char *rest[3];
        uint32_t    n = 0, moved = 0, was_primary = 0;

        for (uint32_t k = 0; k < 4; k++) {
            if (k != gone) {
                rest[n++] = peers[k];
            }
        }
        for (uint32_t i = 0; i < NSID; i++) {
            const char *p0, *p1;

            sid_of(i, sid, sizeof(sid));
            p0 = ranked(peers, 4, sid, 0);
            p1 = ranked(peers, 4, sid, 1);
            was_primary += p0 == peers[gone];
            moved += ranked(rest, 3, sid, 0) != p0;
            /* exact: only the removed node's sessions move, each to its second choice */
            CHECK(ranked(rest, 3, sid, 0) == (p0 == peers[gone] ? p1 : p0));
            /* the survivors keep their relative order (a replica set shifts up by one) */
            for (uint32_t r = 0, q = 0; r < 4; r++) {
                const char *p = ranked(peers, 4, sid, r);

                if (p != peers[gone]) {
                    CHECK(ranked(rest, 3, sid, q++) == p);
                }
            }
        }
        printf("remove node %u: %u of %u sessions moved (it was primary for %u)\n", gone, moved,
               NSID, was_primary);
        CHECK(moved == was_primary);
    }
}

static void test_add(void)
{
    uint32_t moved = 0;
    char     sid[32];

    for (uint32_t i = 0; i < NSID; i++) {
        const char *before, *after;

        sid_of(i, sid, sizeof(sid));
        before = ranked(peers, 4, sid, 0);
        after  = ranked(peers, 5, sid, 0);
        if (after != before) {
            CHECK(after == peers[4]); /* all to the new node, none between the old ones */
            moved++;
        }
    }
    printf("add a 5th node: %u of %u primaries moved to it (%.2f %%)\n", moved, NSID,
           100.0 * moved / NSID);
    EXPECT(moved >= NSID * 18 / 100 && moved <= NSID * 22 / 100, "moved %u", moved);
}

static void test_invalid(void)
{
    const char *two[2] = {peers[0], NULL};
    uint32_t    order[2];

    CHECK_ST(kvp_placement_rank(peers, 0, NS, "s", order), KVP_ERR_INVALID);
    CHECK_ST(kvp_placement_rank(peers, 65, NS, "s", order), KVP_ERR_INVALID);
    CHECK_ST(kvp_placement_rank(two, 2, NS, "s", order), KVP_ERR_INVALID);
    CHECK_ST(kvp_placement_rank(peers, 2, NS, NULL, order), KVP_ERR_INVALID);
    /* equal peer strings score equally: ties go by index */
    two[1] = peers[0];
    CHECK_OK(kvp_placement_rank(two, 2, NS, "s", order));
    CHECK(order[0] == 0 && order[1] == 1);
}

int main(void)
{
    test_deterministic();
    test_balance();
    test_remove();
    test_add();
    test_invalid();
    return kvp_test_result("test_placement");
}
