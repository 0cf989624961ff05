/* cmd_stat.c - "kvpack stat --node HOST:PORT [--json]": ask a node for its statistics (STAT) and
 * print them as text or one JSON object. */
#include "cli.h"

#include "kvpack/kvpack.h"

#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: kvpack stat --node HOST:PORT [--json] [--timeout-ms MS]\n"
                 "Print a node's statistics: DRAM use, sessions, spills and restores, errors.\n");
}

int kvp_cmd_stat(int argc, char **argv)
{
    kvp_client_params_t p;
    kvp_client_h        c;
    kvp_node_stat_t     st;
    const char         *node = NULL;
    uint64_t            timeout = 5000;
    bool                json = false;
    kvp_status_t        s;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--node", &node) ||
            kvp_opt_u64(argc, argv, &i, "--timeout-ms", &timeout)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            json = true;
            continue;
        }
        return kvp_opt_unknown("stat", argv[i]);
    }
    if (node == NULL) {
        usage(stderr);
        return 2;
    }
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    p.server     = node;
    p.timeout_ms = (uint32_t)timeout;
    s = kvp_client_create(&p, &c);
    if (s == KVP_OK) {
        s = kvp_client_stat(c, &st);
        kvp_client_destroy(c);
    }
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack stat: %s: %s\n", node, kvp_status_str(s));
        return 1;
    }
    if (json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "node", node);
        kvp_json_int(&j, "uptime_ms", (int64_t)st.uptime_ms);
        kvp_json_int(&j, "dram_bytes", (int64_t)st.dram_bytes);
        kvp_json_int(&j, "dram_pages", (int64_t)st.dram_pages);
        kvp_json_int(&j, "dram_budget", (int64_t)st.dram_budget);
        kvp_json_int(&j, "sessions", (int64_t)st.sessions);
        kvp_json_int(&j, "sessions_on_disk", (int64_t)st.sessions_on_disk);
        kvp_json_int(&j, "spills", (int64_t)st.spills);
        kvp_json_int(&j, "restores", (int64_t)st.restores);
        kvp_json_int(&j, "crc_failures", (int64_t)st.crc_failures);
        kvp_json_int(&j, "disk_errors", (int64_t)st.disk_errors);
        kvp_json_end(&j);
        return 0;
    }
    printf("node              %s\n", node);
    printf("uptime            %.1f s\n", (double)st.uptime_ms / 1000.0);
    printf("dram              %llu / %llu bytes in %llu pages\n",
           (unsigned long long)st.dram_bytes, (unsigned long long)st.dram_budget,
           (unsigned long long)st.dram_pages);
    printf("sessions          %llu (%llu on disk)\n", (unsigned long long)st.sessions,
           (unsigned long long)st.sessions_on_disk);
    printf("spills/restores   %llu / %llu\n", (unsigned long long)st.spills,
           (unsigned long long)st.restores);
    printf("crc failures      %llu\n", (unsigned long long)st.crc_failures);
    printf("disk errors       %llu\n", (unsigned long long)st.disk_errors);
    return 0;
}
