/* plan_rank.c - the cluster's rendezvous rank of `kvpack plan`'s sessions, for check_plan.py:
 * `plan_rank MODEL L H D P CODEC N` prints, for sessions lt-0..lt-<N-1> in the namespace
 * kvp_ns_fingerprint(MODEL, L, H, D, P, CODEC), one line each: kvp_placement_rank's order of
 * nodes node0..node63. A session's node among the first n is the first index below n in its
 * line (scores do not depend on the other nodes). */
#include "kvpack/codec.h"
#include "kvpack/page.h"
#include "kvpack/placement.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    char           name[KVP_PLACEMENT_MAX_NODES][16], sid[32];
    const char    *nodes[KVP_PLACEMENT_MAX_NODES];
    uint32_t       order[KVP_PLACEMENT_MAX_NODES];
    kvp_codec_id_t codec;
    uint64_t       ns, n;

    if (argc != 8 || kvp_codec_from_name(argv[6], &codec) != KVP_OK) {
        fprintf(stderr, "usage: plan_rank MODEL L H D P CODEC N\n");
        return 2;
    }
    ns = kvp_ns_fingerprint(argv[1], (uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[3]),
                            (uint32_t)atoi(argv[4]), (uint32_t)atoi(argv[5]), codec);
    n  = strtoull(argv[7], NULL, 10);
    for (uint32_t k = 0; k < KVP_PLACEMENT_MAX_NODES; k++) {
        snprintf(name[k], sizeof(name[k]), "node%u", k);
        nodes[k] = name[k];
    }
    for (uint64_t s = 0; s < n; s++) {
        snprintf(sid, sizeof(sid), "lt-%llu", (unsigned long long)s);
        if (kvp_placement_rank(nodes, KVP_PLACEMENT_MAX_NODES, ns, sid, order) != KVP_OK) {
            return 1;
        }
        for (uint32_t k = 0; k < KVP_PLACEMENT_MAX_NODES; k++) {
            printf(k ? " %u" : "%u", order[k]);
        }
        printf("\n");
    }
    return 0;
}
