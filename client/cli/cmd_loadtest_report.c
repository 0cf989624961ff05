/* cmd_loadtest_report.c - what `kvpack loadtest` prints: totals, latency percentiles, node tier
 * traffic (stat deltas) and per-window hit ratio and latency, as one JSON object or as text, and
 * a chart of the windows as hand-written SVG (or HTML with the SVG inline). */
#include "cli.h"
#include "cmd_loadtest.h"

#include "kvpack/alloc.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t n;
    double   p50, p90, p99, max;
} lt_pct_t;

typedef struct {
    uint32_t reqs;
    uint64_t blocks, hit_blocks, ref_hit, chunks, hit_chunks, pages_put;
    lt_pct_t lookup, put, get, resume;
} lt_sum_t;

/* Nearest-rank percentiles of one latency field over the requests in [first, end) that finished,
 * NaNs skipped. */
static lt_pct_t pct(const kvp_lt_result_t *res, uint32_t first, uint32_t end, size_t field)
{
    lt_pct_t r = {0, NAN, NAN, NAN, NAN};
    double  *v = kvp_malloc((end > first ? end - first : 1) * sizeof(*v), "loadtest pct");

    if (v == NULL) {
        return r;
    }
    for (uint32_t i = first; i < end; i++) {
        double x = *(const double *)((const char *)&res->samples[i] + field);

        if (res->samples[i].done && !isnan(x)) {
            v[r.n++] = x;
        }
    }
    if (r.n > 0) {
        kvp_sort_f64(v, r.n);
        r.p50 = kvp_quantile_sorted(v, r.n, 0.50);
        r.p90 = kvp_quantile_sorted(v, r.n, 0.90);
        r.p99 = kvp_quantile_sorted(v, r.n, 0.99);
        r.max = v[r.n - 1];
    }
    kvp_free(v);
    return r;
}

/* Totals over the requests in [first, end) that finished (all of them unless the run failed or
 * was interrupted; with --clients > 1 those need not be a prefix). */
static void sum(const kvp_lt_workload_t *w, const kvp_lt_result_t *res, uint32_t first,
                uint32_t end, lt_sum_t *s)
{
    memset(s, 0, sizeof(*s));
    for (uint32_t i = first; i < end; i++) {
        const kvp_lt_sample_t *x = &res->samples[i];

        if (!x->done) {
            continue;
        }
        s->reqs++;
        s->blocks += x->blocks;
        s->hit_blocks += x->hit_blocks;
        s->ref_hit += w->reqs[i].ref_hit_blocks;
        s->chunks += x->chunks;
        s->hit_chunks += x->hit_chunks;
        s->pages_put += x->pages_put;
    }
    s->lookup = pct(res, first, end, offsetof(kvp_lt_sample_t, lookup_ms));
    s->put    = pct(res, first, end, offsetof(kvp_lt_sample_t, put_ms));
    s->get    = pct(res, first, end, offsetof(kvp_lt_sample_t, get_ms));
    s->resume = pct(res, first, end, offsetof(kvp_lt_sample_t, resume_ms));
}

static double ratio(uint64_t a, uint64_t b)
{
    return b > 0 ? (double)a / (double)b : NAN;
}

/* a / b as "12.34 %" in buf, or "n/a" when b is 0 (the text report; JSON says null) */
static const char *pct_text(char buf[32], uint64_t a, uint64_t b)
{
    if (b == 0) {
        return "n/a";
    }
    snprintf(buf, 32, "%.2f %%", 100 * ratio(a, b));
    return buf;
}

/* Node statistics when window k began. */
static const kvp_node_stat_t *win_begin(const kvp_lt_result_t *res, uint32_t k)
{
    return k > 0 ? &res->windows[k - 1].stat_end : &res->stat_begin;
}

/* A node counter's change over window k; -1 when the window's end was never taken (the run failed
 * or was interrupted first). */
static int64_t win_delta(const kvp_lt_result_t *res, uint32_t k, size_t field)
{
    if (k >= res->windows_done) {
        return -1;
    }
    return (int64_t)(*(const uint64_t *)((const char *)&res->windows[k].stat_end + field) -
                     *(const uint64_t *)((const char *)win_begin(res, k) + field));
}

/* The first column of window k: its index over a trace; the round of a synthetic run, or its
 * rounds "a-b" when more than KVP_LT_MAX_WINDOWS rounds share the windows (round-major). */
static void win_label(const kvp_lt_workload_t *w, const kvp_lt_result_t *res, uint32_t k,
                      char *out, size_t len)
{
    uint64_t a, b;

    if (!w->synthetic) { /* a trace has no users (0): no division */
        snprintf(out, len, "%u", k);
        return;
    }
    a = res->windows[k].first / w->users;
    b = (res->windows[k].end - 1) / w->users;
    if (a == b) {
        snprintf(out, len, "%llu", (unsigned long long)a);
    } else {
        snprintf(out, len, "%llu-%llu", (unsigned long long)a, (unsigned long long)b);
    }
}

/* The name of that column. */
static const char *win_axis(const kvp_lt_workload_t *w)
{
    return !w->synthetic ? "window" : w->rounds > KVP_LT_MAX_WINDOWS ? "rounds" : "round";
}

/* What the hit count says next to the unbounded (id-level, one never-evicting cache) count: why
 * they differ, or that they do not. With several nodes the placed reference (one never-evicting
 * cache per node, fed the sessions placed on it) is the count to compare with: the gap between it
 * and the single-cache count is placement, not the cache. */
static const char *hit_note(const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                            const kvp_lt_result_t *res, const lt_sum_t *t)
{
    if (t->hit_blocks > t->ref_hit) {
        return "above the unbounded-cache count: these hits are not all this run's own (the "
               "run's namespace is salted, so the nodes should not have held any of its pages "
               "before it began); do not read them as a capacity figure";
    }
    if (res->n_nodes > 1 && t->hit_blocks == res->ref_placed &&
        res->ref_placed < res->ref_single) {
        return res->ref_single < t->ref_hit
                   ? "below the unbounded-cache count because of placement: each node caches only "
                     "the sessions placed on it (the first --replicas of each session's rank), so "
                     "a prefix another node holds is a miss; the hits equal "
                     "reference.placed_hit_blocks (one never-evicting cache per node), while one "
                     "node holding every session would hit reference.single_cache_hit_blocks; the "
                     "rest of the gap to the unbounded count is repeated partial last blocks "
                     "(tokens past the last full P-token chunk travel as the fp16 tail)"
                   : "below the unbounded-cache count because of placement: each node caches only "
                     "the sessions placed on it (the first --replicas of each session's rank), so "
                     "a prefix another node holds is a miss; the hits equal "
                     "reference.placed_hit_blocks (one never-evicting cache per node), while one "
                     "node holding every session would hit reference.single_cache_hit_blocks, the "
                     "unbounded count";
    }
    if (res->n_nodes > 1 && t->hit_blocks < res->ref_placed) {
        return "below reference.placed_hit_blocks, what never-evicting nodes would hit with the "
               "sessions placed as in this run: pages were not there when asked for (evicted "
               "with no SSD tier to restore them from, or on a node that failed), or, with "
               "--clients > 1, two requests in flight sharing a prefix both missed it";
    }
    if (res->n_nodes > 1 && t->hit_blocks > res->ref_placed) {
        /* the placed reference ranks every session over the members at the end, as if none had
         * failed or changed: a session whose node failed went on to the next of its rank */
        return "above reference.placed_hit_blocks and below the single-cache count: the placed "
               "reference ranks the sessions over the members at the end as if none had failed "
               "or changed, while in this run a node failed or membership changed (see nodes and "
               "membership_changes), so sessions moved to the next node of their rank and their "
               "hits with them; neither reference is this run's placement";
    }
    if (w->synthetic && t->hit_blocks < t->ref_hit && w->turn_tokens % KVP_LT_BLOCK_TOKENS != 0) {
        /* a round of T tokens ends inside a 512-token block (whatever P: at T = P the block holds
         * one chunk in a round and two in the next) */
        return "a block hits when all its sealed P-token chunks are found; a round's partial last "
               "block was sealed only up to its last full chunk, so it misses the next round, "
               "where an id-level (unbounded) count says hit";
    }
    if (t->reqs == 0) {
        return "no request finished: nothing to compare";
    }
    if (t->hit_blocks == t->ref_hit) {
        return w->synthetic ? "equal to what an unbounded cache hits over these requests: nothing "
                              "was lost to eviction"
                            : "equal to what an unbounded cache hits over these requests: nothing "
                              "was lost to eviction (the trace README's 36.6 % is over all "
                              "12,031 requests)";
    }
    if (w->synthetic) { /* users share nothing, and a user's turns stay on one client */
        return "below the unbounded-cache count: pages were not there when asked for (evicted "
               "with no SSD tier to restore them from, or on a node that failed)";
    }
    if (info->params->clients > 1) {
        return "below the unbounded-cache count because of concurrency: two requests sharing a "
               "prefix that are in flight on different clients can both miss it (a --clients 1 "
               "run loses only repeated partial last blocks, whose tokens past the last full "
               "P-token chunk travel as the fp16 tail); the trace README's 36.6 % is over all "
               "12,031 requests";
    }
    return "below the unbounded-cache count only where a partial last block (tokens past its last "
           "full P-token chunk travel as the fp16 tail, not as cached pages) is repeated; the "
           "trace README's 36.6 % is over all 12,031 requests";
}

/* Several nodes: the two hit references, replicas, and each node at the end. */
static void json_nodes(kvp_json_t *j, const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                       const kvp_lt_result_t *res, uint64_t blocks)
{
    kvp_json_int(j, "replicas", info->params->replicas);
    kvp_json_int(j, "membership_changes", (int64_t)res->membership_changes);
    kvp_json_obj(j, "reference");
    kvp_json_int(j, "single_cache_hit_blocks", (int64_t)res->ref_single);
    kvp_json_num(j, "single_cache_block_hit_ratio", ratio(res->ref_single, blocks));
    kvp_json_int(j, "placed_hit_blocks", (int64_t)res->ref_placed);
    kvp_json_num(j, "placed_block_hit_ratio", ratio(res->ref_placed, blocks));
    kvp_json_str(j, "note", "single_cache: one never-evicting node holding every session; "
                            "placed: one never-evicting cache per node, fed only the sessions its "
                            "rank puts there (first r); the request looks up on its primary. "
                            "The gap is the prefix reuse lost to spreading sessions over nodes");
    kvp_json_close(j);
    kvp_json_arr(j, "nodes");
    for (uint32_t k = 0; k < res->n_nodes; k++) {
        const kvp_lt_node_t *n = &res->nodes[k];

        kvp_json_obj(j, NULL);
        kvp_json_str(j, "node", n->addr);
        kvp_json_bool(j, "reachable_at_end", n->stat_ok);
        kvp_json_int(j, "failures", n->failures);
        kvp_json_int(j, "expected_sessions", n->expected_sessions);
        kvp_json_int(j, "sessions", n->stat_ok ? (int64_t)n->stat_end.sessions : -1);
        kvp_json_int(j, "sessions_on_disk", n->stat_ok ? (int64_t)n->stat_end.sessions_on_disk : -1);
        kvp_json_int(j, "dram_bytes", n->stat_ok ? (int64_t)n->stat_end.dram_bytes : -1);
        kvp_json_int(j, "dram_budget", n->stat_ok ? (int64_t)n->stat_end.dram_budget : -1);
        kvp_json_close(j);
    }
    kvp_json_close(j);
    (void)w;
}

static void json_pct(kvp_json_t *j, const char *key, const lt_pct_t *p)
{
    kvp_json_obj(j, key);
    kvp_json_int(j, "n", p->n);
    kvp_json_num(j, "p50", p->p50);
    kvp_json_num(j, "p90", p->p90);
    kvp_json_num(j, "p99", p->p99);
    kvp_json_num(j, "max", p->max);
    kvp_json_close(j);
}

/* A node's DRAM budget: --dram-budget for local nodes, else what the nodes report when they
 * all report one (-1: they differ, or none answered at the end; each is in "nodes"). The node
 * statistics, "dram_budget_total" among them, are summed over the nodes. */
static int64_t dram_budget_per_node(const kvp_lt_info_t *info, const kvp_lt_result_t *res)
{
    int64_t b = -1;

    if (info->local_node || res->n_nodes <= 1) {
        return info->local_node ? (int64_t)info->dram_budget : (int64_t)res->stat_end.dram_budget;
    }
    for (uint32_t k = 0; k < res->n_nodes; k++) {
        int64_t x = (int64_t)res->nodes[k].stat_end.dram_budget;

        if (res->nodes[k].stat_ok && b != -1 && x != b) {
            return -1;
        }
        b = res->nodes[k].stat_ok ? x : b;
    }
    return b;
}

/* What became of the run's sessions: "delete" (existing nodes: deleted when it ended; left: those
 * that could not be), "keep" (--keep-sessions: all left, under namespace/run_salt) or "local"
 * (local nodes: their data directories go with them). */
static const char *cleanup_mode(const kvp_lt_info_t *info)
{
    return info->local_node ? "local" : info->params->delete_sessions ? "delete" : "keep";
}

static void json_cleanup(kvp_json_t *j, const kvp_lt_info_t *info, const kvp_lt_result_t *res)
{
    bool keep = !info->local_node && !info->params->delete_sessions;

    kvp_json_obj(j, "cleanup");
    kvp_json_str(j, "mode", cleanup_mode(info));
    kvp_json_int(j, "sessions", res->sessions_put);
    kvp_json_int(j, "deleted", res->sessions_deleted);
    kvp_json_int(j, "absent", res->sessions_absent);
    kvp_json_int(j, "left", keep ? res->sessions_put : res->sessions_left);
    kvp_json_int(j, "departed_nodes", res->departed_nodes);
    kvp_json_int(j, "departed_deleted", res->departed_deleted);
    kvp_json_int(j, "departed_unreachable", res->departed_unreachable);
    kvp_json_close(j);
}

static void text_cleanup(const kvp_lt_info_t *info, const kvp_lt_result_t *res)
{
    if (info->local_node) {
        return;
    }
    printf("sessions         %u put, ", res->sessions_put);
    if (!info->params->delete_sessions) {
        printf("kept on the nodes (--keep-sessions) under the namespace above\n");
    } else if (res->sessions_left == 0 && res->departed_unreachable == 0 &&
               res->sessions_absent == 0) {
        printf("deleted from the nodes when the run ended\n");
    } else if (res->sessions_left == 0 && res->departed_unreachable == 0) {
        printf("%u deleted from the nodes when the run ended, %u were on no node (evicted from "
               "a node without an SSD tier, or their put failed)\n", res->sessions_deleted,
               res->sessions_absent);
    } else if (res->sessions_left == 0) {
        printf("deleted when the run ended, but not from %u node(s) that left the cluster and "
               "did not answer: their copies stay\n", res->departed_unreachable);
    } else {
        printf("%u deleted from the nodes when the run ended, %u could not be: they stay under "
               "the namespace above\n", res->sessions_deleted, res->sessions_left);
    }
}

void kvp_lt_report_json(const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                        const kvp_lt_result_t *res)
{
    const kvp_lt_params_t *p = info->params;
    lt_sum_t               t;
    kvp_json_t             j;
    char                   ns[24], salt[24];

    sum(w, res, 0, w->n, &t);
    snprintf(ns, sizeof(ns), "%016llx", (unsigned long long)res->ns);
    snprintf(salt, sizeof(salt), "%016llx", (unsigned long long)p->salt);
    kvp_json_begin(&j, stdout);
    kvp_json_str(&j, "mode", w->synthetic ? "synthetic" : "trace");
    kvp_json_str(&j, "source", info->source);
    kvp_json_str(&j, "node", info->node);
    kvp_json_bool(&j, "local_node", info->local_node);
    kvp_json_int(&j, "node_workers", info->local_node ? (int64_t)info->node_workers : -1);
    kvp_json_int(&j, "dram_budget", dram_budget_per_node(info, res));
    kvp_json_int(&j, "dram_budget_total", (int64_t)res->stat_end.dram_budget);
    kvp_json_str(&j, "codec", kvp_codec_name(p->codec));
    kvp_json_str(&j, "codec_impl", kvp_codec_impl_name(p->codec));
    kvp_json_int(&j, "layers", p->layers);
    kvp_json_int(&j, "heads", p->heads);
    kvp_json_int(&j, "head_dim", p->head_dim);
    kvp_json_int(&j, "page_tokens", p->page_tokens);
    kvp_json_num(&j, "time_scale", p->time_scale);
    kvp_json_int(&j, "clients", p->clients);
    kvp_json_arr(&j, "requests_per_client");
    for (uint32_t c = 0; c < p->clients; c++) {
        kvp_json_int(&j, NULL, res->client_requests[c]);
    }
    kvp_json_close(&j);
    kvp_json_str(&j, "namespace", ns);
    kvp_json_str(&j, "run_salt", salt);
    json_cleanup(&j, info, res);
    if (w->synthetic) {
        kvp_json_int(&j, "users", (int64_t)w->users);
        kvp_json_int(&j, "rounds", (int64_t)w->rounds);
        kvp_json_int(&j, "turn_tokens", (int64_t)w->turn_tokens);
    }
    kvp_json_int(&j, "requests", t.reqs);
    kvp_json_int(&j, "blocks", (int64_t)t.blocks);
    kvp_json_int(&j, "hit_blocks", (int64_t)t.hit_blocks);
    kvp_json_num(&j, "block_hit_ratio", ratio(t.hit_blocks, t.blocks));
    kvp_json_int(&j, "chunks", (int64_t)t.chunks);
    kvp_json_int(&j, "hit_chunks", (int64_t)t.hit_chunks);
    kvp_json_num(&j, "chunk_hit_ratio", ratio(t.hit_chunks, t.chunks));
    kvp_json_int(&j, "unbounded_hit_blocks", (int64_t)t.ref_hit);
    kvp_json_num(&j, "unbounded_block_hit_ratio", ratio(t.ref_hit, t.blocks));
    kvp_json_str(&j, "hit_ratio_note", hit_note(info, w, res, &t));
    if (res->n_nodes > 1) {
        json_nodes(&j, info, w, res, t.blocks);
    }
    kvp_json_int(&j, "sessions_fetched", t.get.n);
    kvp_json_int(&j, "resumes", res->resumes);
    kvp_json_int(&j, "resumes_lost", res->resumes_lost);
    kvp_json_int(&j, "fetches_lost", res->fetches_lost);
    kvp_json_int(&j, "pages_put", (int64_t)t.pages_put);
    kvp_json_int(&j, "bytes_put", (int64_t)res->bytes_put);
    kvp_json_int(&j, "bytes_put_fp16_equiv", (int64_t)res->bytes_put_fp16);
    kvp_json_int(&j, "bytes_fetched", (int64_t)res->bytes_fetched);
    kvp_json_int(&j, "bytes_fetched_fp16_equiv", (int64_t)res->bytes_fetched_fp16);
    kvp_json_int(&j, "bytes_resumed", (int64_t)res->bytes_resumed);
    kvp_json_num(&j, "encode_s", res->encode_s);
    kvp_json_num(&j, "wall_s", res->wall_s);
    kvp_json_num(&j, "requests_per_s", t.reqs / res->wall_s);
    kvp_json_num(&j, "behind_max_ms", res->behind_max_ms);
    kvp_json_obj(&j, "latency_ms");
    json_pct(&j, "lookup", &t.lookup);
    json_pct(&j, "put", &t.put);
    json_pct(&j, "get", &t.get);
    json_pct(&j, "resume", &t.resume);
    kvp_json_close(&j);
    kvp_json_obj(&j, "node_stats"); /* counters: deltas over the windows taken; levels: then */
    kvp_json_int(&j, "windows_taken", res->windows_done);
    kvp_json_int(&j, "spills", (int64_t)(res->stat_end.spills - res->stat_begin.spills));
    kvp_json_int(&j, "restores", (int64_t)(res->stat_end.restores - res->stat_begin.restores));
    kvp_json_int(&j, "crc_failures",
                 (int64_t)(res->stat_end.crc_failures - res->stat_begin.crc_failures));
    kvp_json_int(&j, "disk_errors",
                 (int64_t)(res->stat_end.disk_errors - res->stat_begin.disk_errors));
    kvp_json_int(&j, "dram_bytes", (int64_t)res->stat_end.dram_bytes);
    kvp_json_int(&j, "dram_bytes_delta",
                 (int64_t)res->stat_end.dram_bytes - (int64_t)res->stat_begin.dram_bytes);
    kvp_json_int(&j, "sessions", (int64_t)res->stat_end.sessions);
    kvp_json_int(&j, "sessions_on_disk", (int64_t)res->stat_end.sessions_on_disk);
    kvp_json_close(&j);
    kvp_json_arr(&j, "windows");
    for (uint32_t k = 0; k < w->n_windows; k++) {
        const kvp_lt_window_t *win = &res->windows[k];
        lt_sum_t               s;

        sum(w, res, win->first, win->end, &s);
        kvp_json_obj(&j, NULL);
        kvp_json_int(&j, "window", k);
        kvp_json_int(&j, "first_request", win->first);
        if (w->synthetic) {
            kvp_json_int(&j, "first_round", win->first / (int64_t)w->users);
            kvp_json_int(&j, "last_round", (win->end - 1) / (int64_t)w->users);
        }
        kvp_json_int(&j, "requests", s.reqs);
        kvp_json_int(&j, "blocks", (int64_t)s.blocks);
        kvp_json_int(&j, "hit_blocks", (int64_t)s.hit_blocks);
        kvp_json_num(&j, "block_hit_ratio", ratio(s.hit_blocks, s.blocks));
        kvp_json_int(&j, "hit_chunks", (int64_t)s.hit_chunks);
        kvp_json_num(&j, "get_p50_ms", s.get.p50);
        kvp_json_num(&j, "get_p99_ms", s.get.p99);
        kvp_json_num(&j, "put_p50_ms", s.put.p50);
        kvp_json_num(&j, "put_p99_ms", s.put.p99);
        if (k < res->windows_done) {
            kvp_json_int(&j, "spills", win_delta(res, k, offsetof(kvp_node_stat_t, spills)));
            kvp_json_int(&j, "restores", win_delta(res, k, offsetof(kvp_node_stat_t, restores)));
            kvp_json_int(&j, "dram_bytes", (int64_t)win->stat_end.dram_bytes);
            kvp_json_int(&j, "sessions_on_disk", (int64_t)win->stat_end.sessions_on_disk);
        } else { /* never ended: the run failed or was interrupted first */
            kvp_json_num(&j, "spills", NAN);
            kvp_json_num(&j, "restores", NAN);
            kvp_json_num(&j, "dram_bytes", NAN);
            kvp_json_num(&j, "sessions_on_disk", NAN);
        }
        kvp_json_close(&j);
    }
    kvp_json_close(&j);
    kvp_json_bool(&j, "ok", res->ok);
    kvp_json_end(&j);
}

static void text_pct(const char *name, const lt_pct_t *p)
{
    if (p->n == 0) {
        printf("%-8s ms     (none)\n", name);
        return;
    }
    printf("%-8s ms     p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  (%u)\n", name, p->p50, p->p90,
           p->p99, p->max, p->n);
}

void kvp_lt_report_text(const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                        const kvp_lt_result_t *res)
{
    const kvp_node_stat_t *b = &res->stat_begin, *e = &res->stat_end;
    lt_sum_t               t;
    char                   p1[32], p2[32];

    sum(w, res, 0, w->n, &t);
    if (!res->ok) {
        printf("INCOMPLETE: %u of %u requests finished before the run failed or was interrupted; "
               "the figures below are over those (node counters over %u of %u windows)\n",
               t.reqs, w->n, res->windows_done, w->n_windows);
    }
    printf("kvpack loadtest: %s against %s (%s), codec %s, %u layers x %u heads x %u, P %u\n",
           info->source, info->node,
           info->local_node ? (info->node_workers == 1 ? "local kvpackd, 1 worker" : "local kvpackd")
                            : "existing node",
           kvp_codec_name(info->params->codec), info->params->layers, info->params->heads,
           info->params->head_dim, info->params->page_tokens);
    printf("namespace        %016llx (run salt %016llx: no earlier run's pages are hit)\n",
           (unsigned long long)res->ns, (unsigned long long)info->params->salt);
    text_cleanup(info, res);
    printf("requests         %u in %.2f s (%.1f/s), %u resumed a previous turn", t.reqs,
           res->wall_s, t.reqs / res->wall_s, res->resumes);
    if (res->resumes_lost > 0) {
        printf(", %u resumes lost (no node holding the previous turn answered)", res->resumes_lost);
    }
    if (res->fetches_lost > 0) {
        printf(", %u gets lost (the nodes that took the put died before the get)",
               res->fetches_lost);
    }
    printf("\n");
    if (info->params->clients > 1) {
        printf("clients          %u concurrent, requests", info->params->clients);
        for (uint32_t c = 0; c < info->params->clients; c++) {
            printf("%s%u", c ? " / " : " ", res->client_requests[c]);
        }
        printf(", latencies merged over all\n");
    }
    printf("block hits       %llu / %llu = %s (unbounded cache: %llu = %s)\n",
           (unsigned long long)t.hit_blocks, (unsigned long long)t.blocks,
           pct_text(p1, t.hit_blocks, t.blocks), (unsigned long long)t.ref_hit,
           pct_text(p2, t.ref_hit, t.blocks));
    printf("                 %s\n", hit_note(info, w, res, &t));
    if (res->n_nodes > 1) {
        printf("placement        %u nodes, %u replicas; never-evicting references: one big node "
               "%s, these nodes (sessions placed by rank) %s\n",
               res->n_nodes, info->params->replicas, pct_text(p1, res->ref_single, t.blocks),
               pct_text(p2, res->ref_placed, t.blocks));
        for (uint32_t k = 0; k < res->n_nodes; k++) {
            const kvp_lt_node_t *n = &res->nodes[k];

            if (!n->stat_ok) { /* no figures: JSON says -1 */
                printf("  node %-15s unreachable at the end (rank says %u sessions), %u "
                       "failures\n", n->addr, n->expected_sessions, n->failures);
                continue;
            }
            printf("  node %-15s %llu sessions held, every namespace (the run's by rank: %u), "
                   "dram %llu bytes, %u failures\n",
                   n->addr, (unsigned long long)n->stat_end.sessions, n->expected_sessions,
                   (unsigned long long)n->stat_end.dram_bytes, n->failures);
        }
    }
    printf("chunk hits       %llu / %llu = %s\n", (unsigned long long)t.hit_chunks,
           (unsigned long long)t.chunks, pct_text(p1, t.hit_chunks, t.chunks));
    printf("put              %llu pages, %llu bytes (%llu fp16-equivalent)\n",
           (unsigned long long)t.pages_put, (unsigned long long)res->bytes_put,
           (unsigned long long)res->bytes_put_fp16);
    printf("fetched          %u sessions, %llu bytes (%llu fp16-equivalent), resumes %llu bytes\n",
           t.get.n, (unsigned long long)res->bytes_fetched,
           (unsigned long long)res->bytes_fetched_fp16, (unsigned long long)res->bytes_resumed);
    text_pct("lookup", &t.lookup);
    text_pct("put", &t.put);
    text_pct("get", &t.get);
    text_pct("resume", &t.resume);
    printf("node%s spills %llu, restores %llu, crc failures %llu, dram %llu / %llu bytes, "
           "%llu sessions (%llu on disk)\n", res->n_nodes > 1 ? "s (summed)  " : "            ",
           (unsigned long long)(e->spills - b->spills),
           (unsigned long long)(e->restores - b->restores),
           (unsigned long long)(e->crc_failures - b->crc_failures),
           (unsigned long long)e->dram_bytes, (unsigned long long)e->dram_budget,
           (unsigned long long)e->sessions, (unsigned long long)e->sessions_on_disk);
    printf("%-7s %9s %9s %8s %9s %9s %7s %8s\n", win_axis(w), "requests", "blocks", "hit %",
           "get p50", "get p99", "spills", "restores");
    for (uint32_t k = 0; k < w->n_windows; k++) {
        const kvp_lt_window_t *win = &res->windows[k];
        lt_sum_t               s;
        char                   label[48];

        sum(w, res, win->first, win->end, &s);
        win_label(w, res, k, label, sizeof(label));
        printf("%-7s %9u %9llu %8.2f %9.3f %9.3f", label, s.reqs, (unsigned long long)s.blocks,
               100 * ratio(s.hit_blocks, s.blocks), s.get.p50, s.get.p99);
        if (k < res->windows_done) {
            printf(" %7lld %8lld\n",
                   (long long)win_delta(res, k, offsetof(kvp_node_stat_t, spills)),
                   (long long)win_delta(res, k, offsetof(kvp_node_stat_t, restores)));
        } else {
            printf(" %7s %8s\n", "-", "-");
        }
    }
}

/* ---- chart ---- */

/* Bytes of the well-formed UTF-8 sequence at s (2..4), 0 when it is not one. */
static int utf8_seq(const unsigned char *s)
{
    int n = s[0] > 0xF4 ? 0 : s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;

    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
    }
    return n;
}

/* Text as XML character data: markup escaped, and what XML 1.0 cannot hold (control characters,
 * bytes that are not UTF-8: a trace path may have them) as '?', so the report always parses. */
static void xml_text(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = *p >= 0x80 ? utf8_seq(p) : 1;

        if (*p == '<') {
            fputs("&lt;", f);
        } else if (*p == '>') {
            fputs("&gt;", f);
        } else if (*p == '&') {
            fputs("&amp;", f);
        } else if (n == 0 || (*p < 0x20 && *p != '\t' && *p != '\n')) {
            fputc('?', f);
        } else {
            fwrite(p, 1, (size_t)n, f);
        }
        p += n > 0 ? n : 1;
    }
}

#define CH_W   760.0
#define CH_X0  70.0
#define CH_X1  740.0

/* A panel: frame, y-axis labels and title at top y, height h. */
static void svg_panel(FILE *f, double y, double h, double ymax, const char *unit, const char *title)
{
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
               "stroke=\"#888\"/>\n", CH_X0, y, CH_X1 - CH_X0, h);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"13\">%s</text>\n", CH_X0, y - 8, title);
    for (int g = 0; g <= 4; g++) {
        double gy = y + h - h * g / 4.0;

        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                CH_X0, gy, CH_X1, gy);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.3g%s</text>\n",
                CH_X0 - 6, gy + 4, ymax * g / 4.0, unit);
    }
}

static void svg_line(FILE *f, const double *v, uint32_t n, double y, double h, double ymax,
                     const char *color, const char *label, int slot)
{
    double dx = (CH_X1 - CH_X0) / n;

    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
    for (uint32_t k = 0; k < n; k++) {
        if (isfinite(v[k])) {
            fprintf(f, "%.1f,%.1f ", CH_X0 + dx * (k + 0.5), y + h - h * v[k] / ymax);
        }
    }
    fprintf(f, "\"/>\n<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\" fill=\"%s\">%s</text>\n",
            CH_X1 - 230 + 110 * slot, y - 8, color, label);
}

static void svg_write(FILE *f, const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                      const kvp_lt_result_t *res)
{
    uint32_t n = w->n_windows;
    double   hit[KVP_LT_MAX_WINDOWS], p50[KVP_LT_MAX_WINDOWS], p99[KVP_LT_MAX_WINDOWS];
    double   lmax = 0, hmax = 5, dx = (CH_X1 - CH_X0) / n;
    lt_sum_t t;
    char     title[160];

    for (uint32_t k = 0; k < n; k++) {
        lt_sum_t s;

        sum(w, res, res->windows[k].first, res->windows[k].end, &s);
        hit[k] = 100 * ratio(s.hit_blocks, s.blocks);
        p50[k] = s.get.p50;
        p99[k] = s.get.p99;
        lmax   = isfinite(p99[k]) && p99[k] > lmax ? p99[k] : lmax;
    }
    lmax = lmax > 0 ? lmax * 1.1 : 1;
    for (uint32_t k = 0; k < n; k++) { /* hit axis: the first of 5, 10, 20, 50, 100 % that fits */
        while (isfinite(hit[k]) && hit[k] > hmax && hmax < 100) {
            hmax = hmax == 10 ? 20 : hmax * (hmax == 20 ? 2.5 : 2);
        }
    }
    sum(w, res, 0, w->n, &t);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"500\" "
               "viewBox=\"0 0 %.0f 500\" font-family=\"sans-serif\">\n", CH_W, CH_W);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"20\" "
               "font-size=\"15\">kvpack loadtest: ", CH_X0);
    xml_text(f, info->source);
    fprintf(f, "</text>\n<text x=\"%.0f\" y=\"38\" font-size=\"12\">%u requests, codec %s, "
               "block hit %.2f %% (unbounded cache %.2f %%), get p50 %.3g ms, p99 %.3g ms</text>\n",
            CH_X0, t.reqs, kvp_codec_name(info->params->codec), 100 * ratio(t.hit_blocks, t.blocks),
            100 * ratio(t.ref_hit, t.blocks), t.get.p50, t.get.p99);
    svg_panel(f, 70, 140, hmax, "%", "block hit ratio per window");
    for (uint32_t k = 0; k < n; k++) {
        double bh = isfinite(hit[k]) ? 140 * hit[k] / hmax : 0;

        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4a7bd0\">"
                   "<title>window %u: %.2f %%</title></rect>\n",
                CH_X0 + dx * k + dx * 0.15, 210 - bh, dx * 0.7, bh, k, hit[k]);
    }
    snprintf(title, sizeof(title), "get latency per window (ms)");
    svg_panel(f, 260, 150, lmax, "", title);
    svg_line(f, p50, n, 260, 150, lmax, "#2a9d4b", "get p50", 0);
    svg_line(f, p99, n, 260, 150, lmax, "#d0452a", "get p99", 1);
    for (uint32_t k = 0; k < n; k++) { /* x labels, then the node's spills/restores per window */
        char label[48];

        win_label(w, res, k, label, sizeof(label));
        fprintf(f, "<text x=\"%.1f\" y=\"428\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
                CH_X0 + dx * (k + 0.5), label);
        if (k < res->windows_done) {
            fprintf(f, "<text x=\"%.1f\" y=\"470\" font-size=\"10\" text-anchor=\"middle\">"
                       "%lld/%lld</text>\n", CH_X0 + dx * (k + 0.5),
                    (long long)win_delta(res, k, offsetof(kvp_node_stat_t, spills)),
                    (long long)win_delta(res, k, offsetof(kvp_node_stat_t, restores)));
        }
    }
    fprintf(f, "<text x=\"%.0f\" y=\"446\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n"
               "<text x=\"4\" y=\"470\" font-size=\"10\">spills/restores</text>\n</svg>\n",
            (CH_X0 + CH_X1) / 2, w->synthetic ? win_axis(w) : "window (equal runs of requests, in order)");
}

int kvp_lt_report_chart(const char *path, const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                        const kvp_lt_result_t *res)
{
    size_t n    = strlen(path);
    bool   html = n >= 5 && strcmp(path + n - 5, ".html") == 0;
    FILE  *f    = fopen(path, "w");

    if (f == NULL) {
        fprintf(stderr, "kvpack loadtest: cannot write report %s: %m\n", path);
        return -1;
    }
    if (html) {
        fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kvpack loadtest"
              "</title></head>\n<body>\n", f);
    }
    svg_write(f, info, w, res);
    if (html) {
        fputs("</body></html>\n", f);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "kvpack loadtest: cannot write report %s: %m\n", path);
        return -1;
    }
    return 0;
}
