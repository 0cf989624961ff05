/* cmd_nodes.c - "kvpack nodes --etcd URL": the kvpackd nodes registered in etcd (kvpackd --etcd),
 * read once: address, since when, pid, data dir, and whether each answers a UCX STAT (then its
 * sessions and uptime). Text table or one JSON object. */
#include "cli.h"

#include "kvpack/alloc.h"
#include "kvpack/etcd.h"

#include <string.h>
#include <time.h>

typedef struct {
    kvp_status_t    status; /* of the STAT */
    kvp_node_stat_t st;
} node_probe_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack nodes --etcd URL[,URL] [--etcd-prefix P] [--json] [--timeout-ms MS]\n"
            "List the kvpackd nodes registered in etcd under the prefix (kvpackd --etcd): address,\n"
            "registered since (UTC), pid, data dir, and whether the node answers a UCX STAT\n"
            "(sessions, uptime) within --timeout-ms (default 2000). A node killed without SIGTERM\n"
            "stays listed until its lease TTL runs out; its STAT column then says down, and its\n"
            "line ends with \"stat: \" and the error's name (--json: up false, stat the name).\n"
            "Every registered node is listed, however many (the other --etcd commands take\n"
            "the first 64 by address, with a warning).\n"
            "  --etcd URL[,URL] the etcd endpoints (http://HOST:PORT), tried in order\n"
            "  --etcd-prefix P  the nodes' key prefix (default /kvpack/nodes/)\n"
            "  --json           one JSON object: the nodes, each with up/stat\n"
            "  --timeout-ms MS  each node's STAT deadline (default 2000)\n"
            "Exit 1 when etcd cannot be read.\n");
}

/* STAT every member over a client of its own (not a cluster: a node listed twice under two
 * names, its old key not yet expired, is shown twice, which is what an operator looks for here). */
static void probe_all(const kvp_etcd_member_t *m, uint32_t n, uint32_t timeout_ms,
                      node_probe_t *pr)
{
    for (uint32_t i = 0; i < n; i++) {
        kvp_client_params_t cp;
        kvp_client_h        c;

        kvp_progress("stat", i, n);
        memset(&cp, 0, sizeof(cp));
        cp.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
        cp.server     = m[i].addr;
        cp.timeout_ms = timeout_ms;
        pr[i].status  = kvp_client_create(&cp, &c);
        if (pr[i].status == KVP_OK) {
            pr[i].status = kvp_client_stat(c, &pr[i].st);
            kvp_client_destroy(c);
        }
    }
    kvp_progress_done();
}

static void print_json(const char *etcd, const char *prefix, const kvp_etcd_member_t *m,
                       const node_probe_t *pr, uint32_t n)
{
    kvp_json_t j;
    uint32_t   up = 0;

    kvp_json_begin(&j, stdout);
    kvp_json_str(&j, "etcd", etcd);
    kvp_json_str(&j, "prefix", prefix);
    kvp_json_arr(&j, "nodes");
    for (uint32_t i = 0; i < n; i++) {
        kvp_json_obj(&j, NULL);
        kvp_json_str(&j, "addr", m[i].addr);
        kvp_json_int(&j, "since", m[i].since);
        kvp_json_int(&j, "pid", m[i].pid);
        kvp_json_str(&j, "data_dir", m[i].data_dir);
        kvp_json_bool(&j, "up", pr[i].status == KVP_OK);
        kvp_json_str(&j, "stat", pr[i].status == KVP_OK ? "ok" : kvp_status_name(pr[i].status));
        if (pr[i].status == KVP_OK) {
            kvp_json_int(&j, "sessions", (int64_t)pr[i].st.sessions);
            kvp_json_int(&j, "uptime_ms", (int64_t)pr[i].st.uptime_ms);
            up++;
        }
        kvp_json_close(&j);
    }
    kvp_json_close(&j);
    kvp_json_int(&j, "registered", n);
    kvp_json_int(&j, "up", up);
    kvp_json_end(&j);
}

static void print_text(const kvp_etcd_member_t *m, const node_probe_t *pr, uint32_t n)
{
    printf("%-24s %-20s %8s %-8s %9s  %s\n", "ADDRESS", "SINCE (UTC)", "PID", "STAT", "SESSIONS",
           "DATA DIR");
    for (uint32_t i = 0; i < n; i++) {
        time_t    t = (time_t)m[i].since;
        struct tm tm;
        char      since[32] = "-";

        if (gmtime_r(&t, &tm) != NULL) {
            strftime(since, sizeof(since), "%Y-%m-%d %H:%M:%S", &tm);
        }
        printf("%-24s %-20s %8lld %-8s ", m[i].addr, since, (long long)m[i].pid,
               pr[i].status == KVP_OK ? "ok" : "down");
        if (pr[i].status == KVP_OK) {
            printf("%9llu", (unsigned long long)pr[i].st.sessions);
        } else {
            printf("%9s", "-");
        }
        printf("  %s%s%s\n", m[i].data_dir[0] ? m[i].data_dir : "(dram only)",
               pr[i].status == KVP_OK ? "" : "  stat: ",
               pr[i].status == KVP_OK ? "" : kvp_status_name(pr[i].status));
    }
    printf("%u node%s registered\n", n, n == 1 ? "" : "s");
}

int kvp_cmd_nodes(int argc, char **argv)
{
    const char        *etcd = NULL, *prefix = KVP_ETCD_DEFAULT_PREFIX;
    uint64_t           timeout = 2000;
    bool               json = false;
    kvp_etcd_h         e;
    kvp_etcd_member_t *m = NULL;
    node_probe_t      *pr;
    uint32_t           n = 0;
    kvp_status_t       s;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--etcd", &etcd) ||
            kvp_opt_str(argc, argv, &i, "--etcd-prefix", &prefix) ||
            kvp_opt_u64(argc, argv, &i, "--timeout-ms", &timeout)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            json = true;
            continue;
        }
        return kvp_opt_unknown("nodes", argv[i]);
    }
    if (etcd == NULL) {
        return kvp_cli_usage_error("nodes", "--etcd URL is required");
    }
    if (!kvp_cli_range("nodes", "--timeout-ms", timeout, 1, 600000)) {
        return 2;
    }
    s = kvp_etcd_create(etcd, 0, &e);
    if (s == KVP_OK) {
        s = kvp_etcd_members(e, prefix, &m, &n);
        kvp_etcd_destroy(e);
    }
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack nodes: etcd %s: cannot list %s: %s (%s)\n", etcd, prefix,
                kvp_status_str(s), kvp_status_name(s));
        return 1;
    }
    pr = kvp_calloc(n ? n : 1, sizeof(*pr), "cli.nodes");
    if (pr == NULL) {
        kvp_free(m);
        fprintf(stderr, "kvpack nodes: out of memory\n");
        return 1;
    }
    probe_all(m, n, (uint32_t)timeout, pr);
    if (json) {
        print_json(etcd, prefix, m, pr, n);
    } else {
        print_text(m, pr, n);
    }
    kvp_free(pr);
    kvp_free(m);
    return 0;
}
