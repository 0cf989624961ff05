/* placement.c - rendezvous (HRW) placement of sessions over a static peer list: a node's score
 * for a session is XXH3-64 of (ns little-endian, sid) seeded with XXH3-64 of its peer string;
 * nodes are ranked by descending score (ties by index), so each session's order depends only on
 * the set of peers, not on the order they were listed in. */
#include "kvpack/placement.h"

#include <string.h>
#include <xxhash.h>

#define SID_BYTES_MAX 1024u /* longer ids are hashed on their first bytes (ids are < 128) */

uint64_t kvp_placement_score(const char *node, uint64_t ns, const char *sid)
{
    uint8_t  key[8 + SID_BYTES_MAX];
    size_t   len = strlen(sid);
    uint64_t seed = XXH3_64bits(node, strlen(node));

    if (len > SID_BYTES_MAX) {
        len = SID_BYTES_MAX;
    }
    for (int i = 0; i < 8; i++) {
        key[i] = (uint8_t)(ns >> (8 * i));
    }
    memcpy(key + 8, sid, len);
    return XXH3_64bits_withSeed(key, 8 + len, seed);
}

kvp_status_t kvp_placement_rank(const char *const *nodes, uint32_t n, uint64_t ns,
                                const char *sid, uint32_t *order)
{
    uint64_t score[KVP_PLACEMENT_MAX_NODES];

    if (nodes == NULL || n == 0 || n > KVP_PLACEMENT_MAX_NODES || sid == NULL || order == NULL) {
        return KVP_ERR_INVALID;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (nodes[i] == NULL) {
            return KVP_ERR_INVALID;
        }
    }
    /* insertion sort by (score desc, index asc): a later index moves up only past lower scores */
    for (uint32_t i = 0; i < n; i++) {
        uint64_t s = kvp_placement_score(nodes[i], ns, sid);
        uint32_t j = i;

        for (; j > 0 && score[j - 1] < s; j--) {
            score[j] = score[j - 1];
            order[j] = order[j - 1];
        }
        order[j] = i;
        score[j] = s;
    }
    return KVP_OK;
}
