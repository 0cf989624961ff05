/* cmd_loadtest.c - `kvpack loadtest`: replay a conversation trace (or users x rounds of synthetic
 * multi-turn sessions) against a real kvpackd and report hit ratio, latency percentiles, tier
 * traffic and per-window figures. This file holds the options, finds the trace, starts local
 * nodes (--local-nodes, default 1) with temporary data directories unless --node / --etcd is
 * given (whose run's sessions the replay deletes at its end unless --keep-sessions), and runs
 * workload -> replay -> report (cmd_loadtest_trace.c, cmd_loadtest_run.c,
 * cmd_loadtest_report.c). */
#include "cli.h"
#include "cmd_loadtest.h"
#include "proc.h"

#include "kvpack/alloc.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LT_TRACE_REL "traces/conversation_trace.jsonl"
#define LT_N(t) (sizeof(t) / sizeof((t)[0]))
#define LT_SYNTHETIC_TOKENS_MAX (1ull << 32) /* 64 MiB of block ids, 8 bytes per 512 tokens */

typedef struct {
    const char     *trace, *node, *etcd, *report, *kvpackd;
    uint64_t        local_nodes, replicas;
    uint64_t        max_requests, windows, users, rounds, turn_tokens;
    uint64_t        layers, heads, head_dim, page_tokens, dram_budget, timeout_ms, clients;
    uint64_t        node_workers; /* --workers of local nodes */
    double          time_scale;
    kvp_codec_id_t  codec;
    bool            json, keep_dir, keep_sessions;
    uint32_t        scoped; /* bit k: lt_scoped[k] was given */
    bool            synthetic; /* --users, --rounds or --turn-tokens was given (also as 0) */
} lt_opts_t;

static void lt_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack loadtest [options]\n\n"
            "Replays a conversation trace (Mooncake FAST'25 JSONL: timestamp, input_length,\n"
            "hash_ids of 512-token prefix blocks) or users x rounds of synthetic multi-turn\n"
            "sessions against a real kvpackd. Per request: fetch the previous turn's session when\n"
            "the request continues one, look up the prompt's chunk keys, encode and put only the\n"
            "missing pages and the session record (fp16 tail), then fetch the session as a decode\n"
            "node would and check it. Reports block hit ratio (next to an unbounded cache's),\n"
            "put/get/resume latency percentiles, bytes, node spills/restores, and per-window\n"
            "figures. Latencies count the operations that succeeded; a request's put is its\n"
            "--replicas puts, one node after another, summed (a re-put after a miss included).\n\n"
            "workload (--max-requests, --time-scale and --windows apply to a trace only):\n"
            "  --trace FILE        JSONL trace (default ../shared/" LT_TRACE_REL " beside the\n"
            "                      repository, or $KVP_SHARED_DIR/" LT_TRACE_REL ")\n"
            "  --max-requests N    first N requests of the trace, 0 = all (default 300)\n"
            "  --time-scale S      replay trace time compressed S times; 0 = closed loop (default 0)\n"
            "  --windows N         report windows over the trace, by request index (default 10)\n"
            "  --clients N         N concurrent clients, 1..%u, each a thread with its own\n"
            "                      connection; all turns of a conversation stay on one client, in\n"
            "                      order; --time-scale paces each client (default 1)\n"
            "  --users U --rounds R --turn-tokens T\n"
            "                      synthetic instead: U sessions, each growing by T tokens a round\n"
            "                      (round r's prompt = the previous context + T); one window a\n"
            "                      round, at most 64 (then a window holds consecutive rounds,\n"
            "                      labelled by their range); U x (1+...+R) x T <= 2^32 tokens\n"
            "nodes:\n"
            "  --node HOST:PORT[,HOST:PORT...]\n"
            "                      existing node(s) (default: start local kvpackd on free ports\n"
            "                      with temporary data directories, removed afterwards)\n"
            "  --etcd URL[,URL...] the nodes registered in etcd (kvpackd --etcd) instead, followed\n"
            "                      during the run (a node that joins takes its share of the\n"
            "                      sessions; the report counts membership_changes)\n"
            "  --local-nodes N     start N local kvpackd, 1..%u (default 1)\n"
            "  --keep-sessions     --node / --etcd: leave the run's sessions on the nodes (default:\n"
            "                      deleted when the run ends, also after a failure or an\n"
            "                      interrupt; the report names their namespace and run_salt)\n"
            "  --replicas R        put each session on the first R live nodes of its rendezvous\n"
            "                      rank (lookup and missing pages on each); get and resume from\n"
            "                      the first that has it; 1..nodes (default 1). A node found\n"
            "                      unreachable is counted and skipped for the rest of the run; a\n"
            "                      resume no live node holds (its only copy was there) is counted\n"
            "                      in resumes_lost, a get whose put's nodes all died right after\n"
            "                      it in fetches_lost, and the request goes on\n"
            "  (--dram-budget, --node-workers, --kvpackd and --keep-dir: local nodes only)\n"
            "  --dram-budget BYTES each local node's DRAM budget, K/M/G suffixes (default 64M;\n"
            "                      small budgets force spills to and restores from the SSD tier)\n"
            "  --node-workers N    each local node's request worker threads (kvpackd --workers),\n"
            "                      1..64 (default 4; 1: another client's request waits behind\n"
            "                      one that is on the disk)\n"
            "  --kvpackd PATH      node binary (default: kvpackd next to this binary)\n"
            "  --keep-dir          keep the local node's directory (data, log)\n"
            "  --timeout-ms MS     per-request deadline (default 10000)\n"
            "geometry:\n"
            "  --codec NAME        fp16|kivi|kivi128|oscar|kvarn|naive2 (default kivi)\n"
            "  --layers N --heads N --head-dim N --page-tokens P\n"
            "                      (default 2, 2, 64, 128; P must divide 512)\n"
            "output:\n"
            "  --json              one JSON object on stdout\n"
            "  --report FILE       chart of hit ratio and get latency per window (.svg or .html)\n"
            "  -h, --help          this help\n"
            "several nodes: the report adds each node's sessions (all it holds, other\n"
            "namespaces' too on --node / --etcd; and how many of the run's its rank gives it),\n"
            "DRAM and failures, and two hit references: one big never-evicting\n"
            "node (single_cache) and one never-evicting cache per node fed only the sessions\n"
            "its rank places on it (placed: what these nodes would hit with every node alive;\n"
            "hits equal it when nothing is evicted and no node fails); a node that died counts\n"
            "in the node figures with its last statistics.\n"
            "Each run puts its sessions under a namespace of its own (run_salt in the report), so\n"
            "pages an earlier run left on a --node are never hit, and deletes them from --node /\n"
            "--etcd nodes when it ends (a progress line, then how many were deleted and how many\n"
            "could not be; an interrupt while it runs stops it). A run that fails or is interrupted\n"
            "still reports the requests that finished (\"ok\": false).\n"
            "exit status: 0 all requests done; 3 all done but some node failed (its replicas\n"
            "served); 1 a request failed; 130 interrupted; 2 bad options\n",
            KVP_LT_MAX_CLIENTS, KVP_LT_MAX_NODES);
}

/* The node options together: one source of nodes, and replicas within their count (a peer
 * list's count is known now; etcd's when it is read). 0 or 2. */
static int lt_parse_nodes(const lt_opts_t *o, bool local_given)
{
    uint64_t n = o->local_nodes;

    if ((o->node != NULL) + (o->etcd != NULL) + local_given > 1) {
        return kvp_cli_usage_error("loadtest", "give one of --node, --etcd and --local-nodes");
    }
    if (o->node != NULL) { /* at most KVP_CLUSTER_MAX_NODES (= KVP_LT_MAX_NODES) items */
        if (kvp_cli_node_list_check("loadtest", o->node) != 0) {
            return 2;
        }
        n = kvp_cli_list_len(o->node);
    }
    if (!kvp_cli_range("loadtest", "--local-nodes", o->local_nodes, 1, KVP_LT_MAX_NODES) ||
        !kvp_cli_range("loadtest", "--replicas", o->replicas, 1, UINT64_MAX)) {
        return 2;
    }
    if (o->etcd == NULL && o->replicas > n) {
        return kvp_cli_usage_error("loadtest", "--replicas %llu needs at least %llu nodes; %s %llu",
                                   (unsigned long long)o->replicas,
                                   (unsigned long long)o->replicas,
                                   o->node != NULL ? "--node lists" : "--local-nodes is",
                                   (unsigned long long)n);
    }
    if (o->keep_sessions && o->node == NULL && o->etcd == NULL) {
        return kvp_cli_usage_error("loadtest", "--keep-sessions applies to --node / --etcd only "
                                   "(local nodes' data directories are removed; --keep-dir keeps "
                                   "them)");
    }
    return 0;
}

/* Options that shape one kind of run only: a local node's settings (the first LT_LOCAL_ONLY,
 * refused with --node / --etcd), then a trace's (refused with the synthetic workload). */
static const char *const lt_scoped[] = {"--dram-budget", "--node-workers", "--keep-dir",
                                        "--kvpackd", "--max-requests", "--windows", "--time-scale"};
#define LT_LOCAL_ONLY 4u

/* The scoped options given (o->scoped) against the kind of run, whatever their order: one line
 * naming the first that does not apply. 0 or 2. */
static int lt_parse_scope(const lt_opts_t *o)
{
    bool synthetic = o->users || o->rounds || o->turn_tokens;

    for (uint32_t k = 0; k < LT_N(lt_scoped); k++) {
        if (!(o->scoped >> k & 1)) {
            continue;
        }
        if (k < LT_LOCAL_ONLY && (o->node != NULL || o->etcd != NULL)) {
            return kvp_cli_usage_error("loadtest", "%s applies to local nodes only, not with %s",
                                       lt_scoped[k], o->node != NULL ? "--node" : "--etcd");
        }
        if (k >= LT_LOCAL_ONLY && synthetic) {
            return kvp_cli_usage_error("loadtest", "%s applies to a trace only, not with --users/"
                                       "--rounds/--turn-tokens (one window per round, no "
                                       "timestamps)", lt_scoped[k]);
        }
    }
    return 0;
}

/* Prompt tokens over all synthetic requests: users x (1 + 2 + ... + rounds) x turn (the parser
 * has bounded users x rounds and rounds x turn by 2^24 each, so this cannot wrap). */
static uint64_t lt_synthetic_tokens(const lt_opts_t *o)
{
    return o->users * o->rounds * ((o->rounds + 1) * o->turn_tokens) / 2;
}

/* The synthetic workload's options together: all three or none, not with --trace, and within
 * 2^24 requests (users x rounds), 2^24 tokens a session (rounds x turn) and 2^32 prompt tokens
 * over all requests. 0 or 2. */
static int lt_parse_synthetic(const lt_opts_t *o)
{
    const struct { const char *name; uint64_t v; } need[] = {
        {"--users", o->users}, {"--rounds", o->rounds}, {"--turn-tokens", o->turn_tokens}};

    if (!o->synthetic) {
        return 0; /* a trace (a given 0 is refused below: it replayed the trace, exit 0) */
    }
    if (o->trace != NULL) {
        return kvp_cli_usage_error("loadtest", "--trace and --users/--rounds/--turn-tokens "
                                   "exclude each other: give one workload");
    }
    for (size_t k = 0; k < LT_N(need); k++) {
        if (need[k].v == 0) {
            return kvp_cli_usage_error("loadtest", "synthetic mode needs --users, --rounds and "
                                       "--turn-tokens, each above 0: %s is missing or 0",
                                       need[k].name);
        }
    }
    if (o->users > (1u << 24) / o->rounds) {
        return kvp_cli_usage_error("loadtest", "--users %llu x --rounds %llu is over 2^24 "
                                   "requests", (unsigned long long)o->users,
                                   (unsigned long long)o->rounds);
    }
    if (o->turn_tokens > (1u << 24) / o->rounds) {
        return kvp_cli_usage_error("loadtest", "--rounds %llu x --turn-tokens %llu is over 2^24 "
                                   "tokens a session", (unsigned long long)o->rounds,
                                   (unsigned long long)o->turn_tokens);
    }
    if (lt_synthetic_tokens(o) > LT_SYNTHETIC_TOKENS_MAX) {
        return kvp_cli_usage_error("loadtest", "--users x --rounds x --turn-tokens: %llu prompt "
                                   "tokens over all requests, at most 2^32 (each request holds "
                                   "its block ids)", (unsigned long long)lt_synthetic_tokens(o));
    }
    return 0;
}

static int lt_parse(int argc, char **argv, lt_opts_t *o)
{
    const char *codec = "kivi";
    bool        local_given = false;

    *o = (lt_opts_t){.max_requests = 300, .windows = 10, .layers = 2, .heads = 2, .head_dim = 64,
                     .page_tokens = 128, .dram_budget = 64ull << 20, .timeout_ms = 10000,
                     .clients = 1, .local_nodes = 1, .replicas = 1, .node_workers = 4};
    {
        const struct { const char *name; const char **val; } strs[] = {
            {"--trace", &o->trace}, {"--node", &o->node}, {"--etcd", &o->etcd}, {"--report", &o->report},
            {"--kvpackd", &o->kvpackd}, {"--codec", &codec}};
        const struct { const char *name; uint64_t *val; } nums[] = {
            {"--max-requests", &o->max_requests}, {"--windows", &o->windows},
            {"--users", &o->users}, {"--rounds", &o->rounds}, {"--turn-tokens", &o->turn_tokens},
            {"--layers", &o->layers}, {"--heads", &o->heads}, {"--head-dim", &o->head_dim},
            {"--page-tokens", &o->page_tokens}, {"--dram-budget", &o->dram_budget},
            {"--timeout-ms", &o->timeout_ms}, {"--clients", &o->clients},
            {"--local-nodes", &o->local_nodes}, {"--replicas", &o->replicas},
            {"--node-workers", &o->node_workers}};
        const struct { const char *name; bool *val; } flags[] = {
            {"--json", &o->json}, {"--keep-dir", &o->keep_dir},
            {"--keep-sessions", &o->keep_sessions}};

        for (int i = 1; i < argc; i++) {
            const char *name = "--time-scale";
            bool        known;

            local_given |= strcmp(argv[i], "--local-nodes") == 0;
            o->synthetic |= strcmp(argv[i], "--users") == 0 || strcmp(argv[i], "--rounds") == 0 ||
                            strcmp(argv[i], "--turn-tokens") == 0;
            known = kvp_opt_f64(argc, argv, &i, name, &o->time_scale);
            for (size_t k = 0; k < LT_N(strs) && !known; k++) {
                known = kvp_opt_str(argc, argv, &i, name = strs[k].name, strs[k].val);
            }
            for (size_t k = 0; k < LT_N(nums) && !known; k++) {
                known = kvp_opt_u64(argc, argv, &i, name = nums[k].name, nums[k].val);
            }
            for (size_t k = 0; k < LT_N(flags) && !known; k++) {
                known = kvp_opt_flag(argv, i, name = flags[k].name);
                *flags[k].val |= known;
            }
            if (!known) {
                return kvp_opt_unknown("loadtest", argv[i]);
            }
            for (uint32_t k = 0; k < LT_N(lt_scoped); k++) {
                o->scoped |= (uint32_t)(strcmp(name, lt_scoped[k]) == 0) << k;
            }
        }
    }
    if (lt_parse_scope(o) != 0) {
        return 2;
    }
    if (!kvp_cli_codec("loadtest", codec, NULL, &o->codec)) {
        return 2;
    }
    if (!kvp_cli_range("loadtest", "--layers", o->layers, 1, 1024) ||
        !kvp_cli_geometry("loadtest", "--heads", o->heads, "--head-dim", o->head_dim,
                          "--page-tokens", o->page_tokens) ||
        !kvp_cli_codec_fits("loadtest", o->codec, o->heads, o->head_dim, o->page_tokens)) {
        return 2;
    }
    if (KVP_LT_BLOCK_TOKENS % o->page_tokens != 0) { /* a trace block is whole pages */
        return kvp_cli_usage_error("loadtest", "--page-tokens %llu does not divide %u, the tokens "
                                   "of a trace block", (unsigned long long)o->page_tokens,
                                   KVP_LT_BLOCK_TOKENS);
    }
    if (lt_parse_synthetic(o) != 0) {
        return 2;
    }
    if (!kvp_cli_range("loadtest", "--windows", o->windows, 1, KVP_LT_MAX_WINDOWS)) {
        return 2;
    }
    if (o->time_scale < 0) {
        return kvp_cli_usage_error("loadtest", "--time-scale wants 0 or more, got %g",
                                   o->time_scale);
    }
    if (!kvp_cli_range("loadtest", "--max-requests", o->max_requests, 0, UINT32_MAX) ||
        !kvp_cli_range("loadtest", "--timeout-ms", o->timeout_ms, 1, UINT32_MAX) ||
        !kvp_cli_range("loadtest", "--clients", o->clients, 1, KVP_LT_MAX_CLIENTS) ||
        !kvp_cli_range("loadtest", "--node-workers", o->node_workers, 1, 64) ||
        !kvp_cli_range("loadtest", "--dram-budget", o->dram_budget, 1, UINT64_MAX)) {
        return 2;
    }
    if (!kvp_cli_exe_ok("loadtest", "--kvpackd", o->kvpackd)) { /* before a node is started */
        return 2;
    }
    if (o->report != NULL &&
        kvp_cli_out_path_check("loadtest", "--report", o->report, ".svg|.html") != 0) {
        return 2; /* before the run, not after it */
    }
    return lt_parse_nodes(o, local_given);
}

/* The default trace: $KVP_SHARED_DIR, ../shared from here, then ../shared beside each folder
 * above this binary (build/bin/kvpack -> <repo>/../shared). 0 when found. */
static int trace_find(char *out, size_t len)
{
    const char *env = getenv("KVP_SHARED_DIR");
    char        dir[PATH_MAX];

    if (env != NULL && (size_t)snprintf(out, len, "%s/" LT_TRACE_REL, env) < len &&
        access(out, R_OK) == 0) {
        return 0;
    }
    snprintf(out, len, "../shared/" LT_TRACE_REL);
    if (access(out, R_OK) == 0) {
        return 0;
    }
    if (kvp_proc_sibling("kvpack", dir, sizeof(dir)) != 0) {
        return -1;
    }
    for (char *slash = strrchr(dir, '/'); slash != NULL && slash != dir;
         slash = strrchr(dir, '/')) {
        *slash = '\0';
        if ((size_t)snprintf(out, len, "%s/../shared/" LT_TRACE_REL, dir) < len &&
            access(out, R_OK) == 0) {
            return 0;
        }
    }
    return -1;
}

/* ---- a local node ---- */

typedef struct {
    char  dir[PATH_MAX];
    char  addr[64];
    pid_t pid;
} lt_node_t;

static int node_up(const lt_opts_t *o, lt_node_t *n)
{
    char bin[PATH_MAX], data[PATH_MAX + 8], ready[PATH_MAX + 8], log[PATH_MAX + 16];
    char budget[32], port[32], workers[32];
    const char *tmp = getenv("TMPDIR");

    n->pid = -1;
    if (o->kvpackd != NULL) {
        snprintf(bin, sizeof(bin), "%s", o->kvpackd);
    } else if (kvp_proc_sibling("kvpackd", bin, sizeof(bin)) != 0) {
        fprintf(stderr, "kvpack loadtest: kvpackd not found next to kvpack; pass --kvpackd PATH "
                        "or --node HOST:PORT\n");
        return -1;
    }
    snprintf(n->dir, sizeof(n->dir), "%s/kvpack-loadtest-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(n->dir) == NULL) {
        n->dir[0] = '\0'; /* glibc fills the template in even when it fails: nothing to keep */
        fprintf(stderr, "kvpack loadtest: cannot make a temporary directory in %s: %m\n",
                tmp != NULL ? tmp : "/tmp");
        return -1;
    }
    snprintf(data, sizeof(data), "%s/data", n->dir);
    snprintf(ready, sizeof(ready), "%s/ready", n->dir);
    snprintf(log, sizeof(log), "%s/kvpackd.log", n->dir);
    snprintf(budget, sizeof(budget), "%llu", (unsigned long long)o->dram_budget);
    snprintf(workers, sizeof(workers), "--workers=%llu", (unsigned long long)o->node_workers);
    {
        char *argv[] = {bin, "--listen", "127.0.0.1:0", "--data-dir", data, "--dram-budget",
                        budget, "--ready-file", ready, workers, NULL};

        n->pid = kvp_proc_spawn(argv, log);
    }
    if (n->pid < 0 || kvp_proc_wait_file(ready, n->pid, 30000, port, sizeof(port)) != 0) {
        fprintf(stderr, "kvpack loadtest: local kvpackd did not start (log: %s)\n", log);
        return -1;
    }
    snprintf(n->addr, sizeof(n->addr), "127.0.0.1:%d", atoi(port));
    return 0;
}

/* Stop the node; remove its directory unless kept (kept, and said, after a failure). */
static void node_down(const lt_opts_t *o, lt_node_t *n, bool ok)
{
    if (n->pid > 0) {
        kvp_proc_stop(n->pid, 10000);
    }
    if (n->dir[0] == '\0') {
        return;
    }
    if (ok && !o->keep_dir) {
        kvp_proc_rm_rf(n->dir, 60000);
    } else {
        fprintf(stderr, "kvpack loadtest: node files kept in %s\n", n->dir);
    }
}

/* ---- main flow ---- */

/* The peer list: --node as given, etcd's members, or N local nodes started now (into nodes[],
 * *n_up of them started). 0, 1 (failed, said) or 2 (replicas above etcd's node count). */
static int lt_peers(const lt_opts_t *o, lt_node_t *nodes, uint32_t *n_up, char **peers_p)
{
    uint32_t n = 0;
    size_t   len = 0;

    if (o->node != NULL) {
        *peers_p = kvp_strdup(o->node, "loadtest peers");
        return *peers_p != NULL ? 0 : 1;
    }
    if (o->etcd != NULL) {
        if (kvp_cluster_peers_etcd(o->etcd, NULL, peers_p, &n) != KVP_OK) {
            fprintf(stderr, "kvpack loadtest: no nodes from etcd %s\n", o->etcd);
            return 1;
        }
        if (o->replicas > n) {
            return kvp_cli_usage_error("loadtest", "--replicas %llu needs at least %llu nodes; "
                                       "etcd lists %u", (unsigned long long)o->replicas,
                                       (unsigned long long)o->replicas, n);
        }
        return 0;
    }
    *peers_p = kvp_malloc(o->local_nodes * 64, "loadtest peers");
    for (; *peers_p != NULL && *n_up < o->local_nodes; (*n_up)++) {
        memset(&nodes[*n_up], 0, sizeof(nodes[*n_up]));
        if (node_up(o, &nodes[*n_up]) != 0) {
            (*n_up)++;
            return 1;
        }
        len += (size_t)snprintf(*peers_p + len, 64, "%s%s", *n_up ? "," : "", nodes[*n_up].addr);
    }
    return *peers_p != NULL ? 0 : 1;
}

volatile sig_atomic_t kvp_lt_interrupted;

static void lt_on_signal(int sig)
{
    (void)sig;
    kvp_lt_interrupted = kvp_lt_interrupted + 1; /* only this handler writes it */
}

/* The report: JSON or text on stdout, and the chart. Also after a failure or an interrupt, over
 * the requests that finished ("ok": false). 0 or 1 (the chart could not be written). */
static int lt_report(const lt_opts_t *o, const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                     const kvp_lt_result_t *res)
{
    if (o->json) {
        kvp_lt_report_json(info, w, res);
    } else {
        kvp_lt_report_text(info, w, res);
    }
    fflush(stdout);
    return o->report != NULL && kvp_lt_report_chart(o->report, info, w, res) != 0 ? 1 : 0;
}

static int lt_replay(const lt_opts_t *o, const kvp_lt_workload_t *w, const char *source)
{
    kvp_lt_params_t p = {kvp_lt_mix64(kvp_time_ns() ^ (uint64_t)getpid() << 40), o->codec,
                         (uint32_t)o->layers, (uint32_t)o->heads, (uint32_t)o->head_dim,
                         (uint32_t)o->page_tokens, o->time_scale, (uint32_t)o->clients,
                         (uint32_t)o->replicas, o->etcd,
                         (o->node != NULL || o->etcd != NULL) && !o->keep_sessions};
    kvp_lt_info_t   info = {source, NULL, o->node == NULL && o->etcd == NULL, o->dram_budget,
                            o->node_workers, &p};
    kvp_lt_result_t res;
    lt_node_t       nodes[KVP_LT_MAX_NODES];
    uint32_t        n_up = 0, failures = 0;
    char           *peers = NULL;
    int             rc, run, chart = 0;

    memset(&res, 0, sizeof(res));
    rc        = lt_peers(o, nodes, &n_up, &peers);
    info.node = peers;
    run       = rc == 0 ? kvp_lt_run(peers, (uint32_t)o->timeout_ms, &p, w, &res) : -1;
    if (rc == 0 && res.ran) {
        chart = lt_report(o, &info, w, &res);
    }
    for (uint32_t k = 0; k < res.n_nodes; k++) {
        failures += res.nodes[k].failures;
    }
    if (rc == 0 && run == 0 && chart != 0) {
        rc = 1;
    } else if (rc == 0 && run == 0 && failures > 0 && !kvp_lt_interrupted) {
        fprintf(stderr, "kvpack loadtest: every request done, but %u calls found a node "
                        "unreachable (per node in the report); exit 3\n", failures);
        rc = 3;
    } else if (rc == 0 && kvp_lt_interrupted) { /* during the run, or the delete after it */
        if (run != 0) {
            fprintf(stderr, "kvpack loadtest: interrupted after %u of %u requests; stopping\n",
                    res.done, w->n);
        }
        rc = 130;
    } else if (rc == 0 && run != 0) {
        fprintf(stderr, "kvpack loadtest: FAILED after %u of %u requests\n", res.done, w->n);
        rc = 1;
    }
    kvp_lt_result_free(&res);
    for (uint32_t k = 0; k < n_up; k++) { /* interrupted: nothing to look at, removed too */
        node_down(o, &nodes[k], rc == 0 || rc == 130);
    }
    kvp_free(peers);
    return rc;
}

int kvp_cmd_loadtest(int argc, char **argv)
{
    lt_opts_t         o;
    kvp_lt_workload_t w;
    char              trace[PATH_MAX + 64];
    int               rc;

    if (kvp_opt_help(argc, argv)) {
        lt_usage(stdout);
        return 0;
    }
    rc = lt_parse(argc, argv, &o);
    if (rc != 0) {
        return rc;
    }
    if (o.users > 0) {
        rc = kvp_lt_synthetic_make(o.users, o.rounds, o.turn_tokens, &w);
    } else {
        if (o.trace == NULL && trace_find(trace, sizeof(trace)) != 0) {
            fprintf(stderr, "kvpack loadtest: no trace: ../shared/" LT_TRACE_REL " is not beside "
                            "the repository (nor in $KVP_SHARED_DIR); pass --trace FILE or use "
                            "--users/--rounds/--turn-tokens\n");
            return 1;
        }
        rc = kvp_lt_trace_load("loadtest", o.trace != NULL ? o.trace : trace,
                               (uint32_t)o.max_requests, (uint32_t)o.windows, &w);
    }
    if (rc != 0) {
        return 1;
    }
    {
        struct sigaction sa;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = lt_on_signal; /* its sessions, local nodes and their files go on the way
                                       * out; one signal at a time (the handler counts them) */
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGINT);
        sigaddset(&sa.sa_mask, SIGTERM);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    rc = lt_replay(&o, &w, w.synthetic ? "synthetic" : (o.trace != NULL ? o.trace : trace));
    kvp_lt_workload_free(&w);
    return rc;
}
