/* cmd_stat.c - "kvpack stat --node LIST | --etcd URL [--json]": ask each node for its statistics
 * (STAT) and print them as text or JSON. One node: its figures (one JSON object, as always).
 * Several: a row per node, then the totals over the nodes that answered; a node that does not
 * answer is named (exit 1) and the others are still reported. */
#include "cli.h"

#include "kvpack/cluster.h"
#include "kvpack/kvpack.h"

#include <stddef.h>
#include <string.h>

/* The figures, in the order they are printed; all but the uptime add up into the totals. */
static const struct {
    const char *key;
    size_t      off;
    bool        sum;
} stat_fields[] = {
    {"uptime_ms", offsetof(kvp_node_stat_t, uptime_ms), false},
    {"dram_bytes", offsetof(kvp_node_stat_t, dram_bytes), true},
    {"dram_pages", offsetof(kvp_node_stat_t, dram_pages), true},
    {"dram_budget", offsetof(kvp_node_stat_t, dram_budget), true},
    {"sessions", offsetof(kvp_node_stat_t, sessions), true},
    {"sessions_on_disk", offsetof(kvp_node_stat_t, sessions_on_disk), true},
    {"spills", offsetof(kvp_node_stat_t, spills), true},
    {"restores", offsetof(kvp_node_stat_t, restores), true},
    {"crc_failures", offsetof(kvp_node_stat_t, crc_failures), true},
    {"disk_errors", offsetof(kvp_node_stat_t, disk_errors), true},
    {"disk_bytes", offsetof(kvp_node_stat_t, disk_bytes), true},
    {"disk_live_bytes", offsetof(kvp_node_stat_t, disk_live_bytes), true},
    {"requests", offsetof(kvp_node_stat_t, requests), true},
    {"bad_requests", offsetof(kvp_node_stat_t, bad_requests), true},
    {"index_rebuilds", offsetof(kvp_node_stat_t, index_rebuilds), true},
    {"wal_dropped_bytes", offsetof(kvp_node_stat_t, wal_dropped_bytes), true},
    {"disk_free_bytes", offsetof(kvp_node_stat_t, disk_free_bytes), true},
    {"disk_full_refusals", offsetof(kvp_node_stat_t, disk_full_refusals), true},
    {"connections", offsetof(kvp_node_stat_t, connections), true},
    {"connections_max", offsetof(kvp_node_stat_t, connections_max), true},
    {"connections_rejected", offsetof(kvp_node_stat_t, connections_rejected), true},
};
#define N_FIELDS (sizeof(stat_fields) / sizeof(stat_fields[0]))

static uint64_t field(const kvp_node_stat_t *st, size_t f)
{
    return *(const uint64_t *)(const void *)((const char *)st + stat_fields[f].off);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack stat (--node LIST | --etcd URL[,URL] [--etcd-prefix P]) [--json]\n"
            "                   [--timeout-ms MS]\n"
            "Print each node's statistics: DRAM use, sessions, spills and restores, errors, disk\n"
            "use (segment files and the part still live), the data dir's free space and the\n"
            "writes refused at its reserve, requests received (bad ones); with\n"
            "several nodes a row per node and the totals over those that answered. A node that\n"
            "does not answer is named on stderr and the others are still reported (exit 1).\n"
            "  --node LIST     HOST:PORT, or a comma-separated list of nodes\n"
            "  --etcd URL[,URL] in place of --node: the nodes registered in etcd (kvpackd --etcd)\n"
            "  --etcd-prefix P their key prefix (default /kvpack/nodes/)\n"
            "  --json          one JSON object: one node's figures, or with several nodes\n"
            "                  {nodes: [{node, ok, error | figures}], answered, unreachable, total}\n"
            "  --timeout-ms MS per-node deadline (default 5000)\n");
}

/* total: only the figures that add up */
static void json_fields(kvp_json_t *j, const kvp_node_stat_t *st, bool total)
{
    for (size_t f = 0; f < N_FIELDS; f++) {
        if (stat_fields[f].sum || !total) {
            kvp_json_int(j, stat_fields[f].key, (int64_t)field(st, f));
        }
    }
}

static void print_one(const char *node, const kvp_node_stat_t *st)
{
    printf("node              %s\n", node);
    printf("uptime            %.1f s\n", (double)st->uptime_ms / 1000.0);
    printf("dram              %llu / %llu bytes in %llu pages\n",
           (unsigned long long)st->dram_bytes, (unsigned long long)st->dram_budget,
           (unsigned long long)st->dram_pages);
    printf("sessions          %llu (%llu on disk)\n", (unsigned long long)st->sessions,
           (unsigned long long)st->sessions_on_disk);
    printf("spills/restores   %llu / %llu\n", (unsigned long long)st->spills,
           (unsigned long long)st->restores);
    printf("crc failures      %llu\n", (unsigned long long)st->crc_failures);
    printf("disk errors       %llu\n", (unsigned long long)st->disk_errors);
    printf("disk              %llu bytes in segment files, %llu of them live\n",
           (unsigned long long)st->disk_bytes, (unsigned long long)st->disk_live_bytes);
    if (st->disk_free_bytes > 0 || st->disk_full_refusals > 0) { /* a node with a data dir */
        printf("disk free         %llu bytes (%llu writes refused at the reserve)\n",
               (unsigned long long)st->disk_free_bytes,
               (unsigned long long)st->disk_full_refusals);
    }
    printf("requests          %llu (%llu malformed or refused)\n", (unsigned long long)st->requests,
           (unsigned long long)st->bad_requests);
    if (st->connections_max > 0) { /* a node that reports its connections */
        printf("connections       %llu of at most %llu (%llu refused at the cap)\n",
               (unsigned long long)st->connections, (unsigned long long)st->connections_max,
               (unsigned long long)st->connections_rejected);
    }
    if (st->index_rebuilds > 0 || st->wal_dropped_bytes > 0) { /* damage the node recovered from */
        printf("index rebuilds    %llu (damaged RocksDB blocks found since start)\n",
               (unsigned long long)st->index_rebuilds);
        printf("wal dropped       %llu bytes of damaged log records at start (writes lost)\n",
               (unsigned long long)st->wal_dropped_bytes);
    }
}

/* one node's row (uptime already formatted), or (error) why it has none */
static void print_row(const char *node, const kvp_node_stat_t *st, const char *error,
                      const char *uptime)
{
    if (error != NULL) {
        printf("%-22s %s\n", node, error);
        return;
    }
    printf("%-22s %9s %8.1f %8.1f %8llu %9llu %8llu %8llu %8llu %8llu %8llu %9.1f %9.1f\n", node,
           uptime, (double)st->dram_bytes / 1048576.0,
           (double)st->dram_budget / 1048576.0, (unsigned long long)st->dram_pages,
           (unsigned long long)st->sessions, (unsigned long long)st->sessions_on_disk,
           (unsigned long long)st->spills, (unsigned long long)st->restores,
           (unsigned long long)st->crc_failures, (unsigned long long)st->disk_errors,
           (double)st->disk_bytes / 1048576.0, (double)st->disk_live_bytes / 1048576.0);
}

int kvp_cmd_stat(int argc, char **argv)
{
    kvp_cli_sess_opts_t o;
    kvp_cluster_h       cl;
    kvp_node_stat_t     st[KVP_CLUSTER_MAX_NODES], total;
    kvp_status_t        s[KVP_CLUSTER_MAX_NODES];
    uint32_t            n, answered = 0;
    int                 rc;

    if ((rc = kvp_cli_per_node_open("stat", argc, argv, 5000, usage, &o, &cl)) >= 0) {
        return rc;
    }
    n = kvp_cluster_size(cl);
    memset(&total, 0, sizeof(total));
    for (uint32_t k = 0; k < n; k++) {
        s[k] = kvp_cluster_stat(cl, k, &st[k]);
        if (s[k] != KVP_OK) {
            fprintf(stderr, "kvpack stat: %s: %s\n", kvp_cluster_peer(cl, k), kvp_status_str(s[k]));
            continue;
        }
        answered++;
        for (size_t f = 0; f < N_FIELDS; f++) {
            if (stat_fields[f].sum) {
                *(uint64_t *)(void *)((char *)&total + stat_fields[f].off) += field(&st[k], f);
            }
        }
    }
    if (n == 1 && o.json) { /* one node: its object, as before several; also when it failed */
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "node", kvp_cluster_peer(cl, 0));
        kvp_json_bool(&j, "ok", s[0] == KVP_OK);
        if (s[0] == KVP_OK) {
            json_fields(&j, &st[0], false);
        } else {
            kvp_json_str(&j, "error", kvp_status_str(s[0]));
        }
        kvp_json_end(&j);
    } else if (n == 1 && answered == 1) {
        print_one(kvp_cluster_peer(cl, 0), &st[0]);
    } else if (n > 1 && o.json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_arr(&j, "nodes");
        for (uint32_t k = 0; k < n; k++) {
            if (kvp_cli_json_node(&j, cl, k, s[k])) {
                json_fields(&j, &st[k], false);
            }
            kvp_json_close(&j);
        }
        kvp_json_close(&j);
        kvp_json_int(&j, "answered", answered);
        kvp_json_int(&j, "unreachable", n - answered);
        kvp_json_obj(&j, "total");
        json_fields(&j, &total, true);
        kvp_json_close(&j);
        kvp_json_end(&j);
    } else if (n > 1) {
        printf("%-22s %9s %8s %8s %8s %9s %8s %8s %8s %8s %8s %9s %9s\n", "node", "uptime_s",
               "dram_MiB", "budget", "pages", "sessions", "on_disk", "spills", "restores",
               "crc_fail", "disk_err", "disk_MiB", "live_MiB");
        for (uint32_t k = 0; k < n; k++) {
            char up[32];

            snprintf(up, sizeof(up), "%.1f", (double)st[k].uptime_ms / 1000.0);
            print_row(kvp_cluster_peer(cl, k), &st[k], s[k] == KVP_OK ? NULL : kvp_status_str(s[k]),
                      up);
        }
        print_row("total", &total, NULL, "-"); /* uptimes do not add up */
    }
    kvp_cluster_destroy(cl);
    return answered == n ? 0 : 1;
}
