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
            "Exit 1 when etcd cannot be read.\n");
}

/* STAT members [0, n) (at most KVP_CLUSTER_MAX_NODES) over one kvp_cluster of their addresses;
 * a node that fails is recorded. done and total count the progress over all batches. */
static kvp_status_t probe_batch(const kvp_etcd_member_t *m, uint32_t n, uint32_t timeout_ms,
                                node_probe_t *pr, uint32_t done, uint32_t total)
{
    kvp_client_params_t  cp;
    kvp_cluster_params_t p;
    kvp_cluster_h        cl;
    char                *peers = kvp_malloc((size_t)n * KVP_ETCD_ADDR_MAX, "cli.nodes");
    size_t               len = 0;
    kvp_status_t         s;

    if (peers == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        len += (size_t)sprintf(peers + len, "%s%s", i ? "," : "", m[i].addr);
    }
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.timeout_ms = timeout_ms;
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLUSTER_PARAM_PEERS | KVP_CLUSTER_PARAM_CLIENT;
    p.peers      = peers;
    p.client     = &cp;
    s            = kvp_cluster_create(&p, &cl);
    kvp_free(peers);
    for (uint32_t i = 0; s == KVP_OK && i < n; i++) {
        kvp_progress("stat", done + i, total);
        pr[i].status = kvp_cluster_stat(cl, i, &pr[i].st);
    }
    if (s == KVP_OK) {
        kvp_cluster_destroy(cl);
    }
    return s;
}

/* STAT every member, KVP_CLUSTER_MAX_NODES at a time (one cluster handle holds no more). */
static kvp_status_t probe_all(const kvp_etcd_member_t *m, uint32_t n, uint32_t timeout_ms,
                              node_probe_t *pr)
{
    kvp_status_t s = KVP_OK;

    for (uint32_t i = 0; s == KVP_OK && i < n; i += KVP_CLUSTER_MAX_NODES) {
        uint32_t k = n - i < KVP_CLUSTER_MAX_NODES ? n - i : KVP_CLUSTER_MAX_NODES;

        s = probe_batch(m + i, k, timeout_ms, pr + i, i, n);
    }
    kvp_progress_done();
    return s;
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
    s = (n > 0) ? probe_all(m, n, (uint32_t)timeout, pr) : KVP_OK;
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack nodes: %s (%s)\n", kvp_status_str(s), kvp_status_name(s));
        kvp_free(pr);
        kvp_free(m);
        return 1;
    }
    if (json) {
        print_json(etcd, prefix, m, pr, n);
    } else {
        print_text(m, pr, n);
    }
    kvp_free(pr);
    kvp_free(m);
    return 0;
}
