/* cmd_scrub.c - "kvpack scrub --node LIST | --etcd URL [--json]": ask each node for one whole
 * scrubbing pass now (SCRUB): every page on its disk read back and checked, then every block of
 * its RocksDB index. Nodes are done one after another (a progress line names the one running);
 * per node: bytes checked, bad pages found, whether the index was rebuilt, how long it took, and
 * the sessions it lists as damaged now (found by this pass or before it: the background scrubber,
 * a get). Exit 0 when every node answered, found nothing and lists nothing damaged; 3 when a node
 * found damage or lists damaged sessions (until `kvpack repair` copies them back); 1 when a node
 * did not answer or failed. */
#include "cli.h"

#include "kvpack/cluster.h"
#include "kvpack/kvpack.h"

#include <string.h>

#define SCRUB_TIMEOUT_MS 3600000u /* a pass reads the whole disk */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack scrub (--node LIST | --etcd URL[,URL] [--etcd-prefix P]) [--json]\n"
            "                    [--timeout-ms MS]\n"
            "Run one whole scrubbing pass on each node now, one node after another: every page\n"
            "on its disk is read back and checked (CRC, header, key), then every block of its\n"
            "RocksDB index. A bad page is written again from the node's DRAM copy, else dropped:\n"
            "its sessions then list as damaged until `kvpack repair` copies them back from a\n"
            "replica. A damaged index block makes the node rebuild its index. The background\n"
            "scrubber (kvpackd --scrub-mib-s) does the same slowly; this is the pass at once.\n"
            "Each node's line also counts the sessions it lists as damaged now, found by this\n"
            "pass or earlier (the background scrubber, a get): a page is found bad once.\n"
            "Exit 0: every node answered, found nothing and lists nothing damaged; 3: damage\n"
            "found or listed (dealt with as above); 1: a node did not answer or failed (named\n"
            "on stderr).\n"
            "  --node LIST     HOST:PORT, or a comma-separated list of nodes\n"
            "  --etcd URL[,URL] in place of --node: the nodes registered in etcd (kvpackd --etcd)\n"
            "  --etcd-prefix P their key prefix (default /kvpack/nodes/)\n"
            "  --json          one JSON object: {nodes: [{node, ok, error | bytes, bad_pages,\n"
            "                  index_rebuilt, elapsed_ms, damaged_sessions}], bad_pages,\n"
            "                  index_rebuilds, damaged_sessions, failed}; a node whose session\n"
            "                  list did not come after its pass has no damaged_sessions and\n"
            "                  counts in failed (exit 1)\n"
            "  --timeout-ms MS per-node deadline (default %u: a pass reads the whole disk)\n",
            SCRUB_TIMEOUT_MS);
}

/* dmg[k]: the sessions node k lists as damaged now (-1: its list did not come, or its pass
 * failed: such a node is not asked again, it may be stopping). A pass reports a bad page once; one
 * the background scrubber or a get found earlier is only in this list. */
static void damaged_sessions(kvp_cluster_h cl, uint32_t n, const kvp_status_t *s, int64_t *dmg)
{
    for (uint32_t k = 0; k < n; k++) {
        kvp_client_h        c;
        kvp_session_list_t *l = NULL;

        dmg[k] = -1;
        if (s[k] != KVP_OK || kvp_cluster_client(cl, k, &c) != KVP_OK ||
            kvp_client_list_sessions(c, 0, 0, &l) != KVP_OK) {
            continue;
        }
        dmg[k] = 0;
        for (uint32_t i = 0; i < l->n; i++) {
            dmg[k] += l->sessions[i].damaged != 0;
        }
        kvp_session_list_free(l);
    }
}

int kvp_cmd_scrub(int argc, char **argv)
{
    kvp_cli_sess_opts_t o;
    kvp_cluster_h       cl;
    kvp_scrub_result_t  r[KVP_CLUSTER_MAX_NODES];
    kvp_status_t        s[KVP_CLUSTER_MAX_NODES];
    int64_t             dmg[KVP_CLUSTER_MAX_NODES];
    uint64_t            bad = 0, rebuilt = 0, damaged = 0;
    uint32_t            n, failed = 0;
    int                 rc;

    if ((rc = kvp_cli_per_node_open("scrub", argc, argv, SCRUB_TIMEOUT_MS, usage, &o, &cl)) >= 0) {
        return rc;
    }
    n = kvp_cluster_size(cl);
    memset(r, 0, sizeof(r));
    for (uint32_t k = 0; k < n; k++) {
        kvp_progress("scrub", k, n); /* a pass is silent until it ends: say which node runs */
        s[k] = kvp_cluster_scrub(cl, k, &r[k]);
        if (s[k] != KVP_OK) {
            fprintf(stderr, "kvpack scrub: %s: %s (%s)%s\n", kvp_cluster_peer(cl, k),
                    kvp_status_str(s[k]), kvp_status_name(s[k]),
                    s[k] == KVP_ERR_UNSUPPORTED ? ": the node has no data dir (DRAM only)"
                    : s[k] == KVP_ERR_BUSY      ? ": a pass is already running there"
                                                : "");
            failed++;
            continue;
        }
        bad += r[k].bad_pages;
        rebuilt += r[k].index_rebuilt;
    }
    kvp_progress_done();
    damaged_sessions(cl, n, s, dmg);
    for (uint32_t k = 0; k < n; k++) {
        damaged += dmg[k] > 0 ? (uint64_t)dmg[k] : 0;
        if (s[k] == KVP_OK && dmg[k] < 0) { /* its damage uncounted: not clean */
            fprintf(stderr, "kvpack scrub: %s: its session list did not come, so its damaged "
                    "sessions are not counted\n", kvp_cluster_peer(cl, k));
            failed++;
        }
    }
    if (o.json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_arr(&j, "nodes");
        for (uint32_t k = 0; k < n; k++) {
            if (kvp_cli_json_node(&j, cl, k, s[k])) {
                kvp_json_int(&j, "bytes", (int64_t)r[k].bytes);
                kvp_json_int(&j, "bad_pages", (int64_t)r[k].bad_pages);
                kvp_json_bool(&j, "index_rebuilt", r[k].index_rebuilt != 0);
                kvp_json_int(&j, "elapsed_ms", (int64_t)r[k].elapsed_ms);
                if (dmg[k] >= 0) { /* else left out: the list did not come (counted failed) */
                    kvp_json_int(&j, "damaged_sessions", dmg[k]);
                }
            }
            kvp_json_close(&j);
        }
        kvp_json_close(&j);
        kvp_json_int(&j, "bad_pages", (int64_t)bad);
        kvp_json_int(&j, "index_rebuilds", (int64_t)rebuilt);
        kvp_json_int(&j, "damaged_sessions", (int64_t)damaged);
        kvp_json_int(&j, "failed", failed);
        kvp_json_end(&j);
    } else {
        for (uint32_t k = 0; k < n; k++) {
            if (s[k] == KVP_OK) {
                char size[32], now[96] = "";

                kvp_cli_fmt_bytes(r[k].bytes, size, sizeof(size));
                if (dmg[k] > 0) {
                    snprintf(now, sizeof(now), "; %lld session%s listed damaged (kvpack repair)",
                             (long long)dmg[k], dmg[k] == 1 ? "" : "s");
                } else if (dmg[k] < 0) {
                    snprintf(now, sizeof(now), "; damaged sessions not counted (no list)");
                }
                printf("%-22s %s of pages checked in %.1f s: %llu bad%s%s\n",
                       kvp_cluster_peer(cl, k), size, (double)r[k].elapsed_ms / 1000.0,
                       (unsigned long long)r[k].bad_pages,
                       r[k].index_rebuilt ? "; a damaged index block: index rebuilt" : "", now);
            }
        }
    }
    kvp_cluster_destroy(cl);
    return failed > 0 ? 1 : (bad > 0 || rebuilt > 0 || damaged > 0) ? 3 : 0;
}
