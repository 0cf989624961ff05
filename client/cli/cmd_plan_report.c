/* cmd_plan_report.c - what `kvpack plan` prints: --help (every field explained), the text table
 * and the --json object. The figures come computed in kvp_plan_row_t (cmd_plan.c). */
#include "cmd_plan.h"

#include <inttypes.h>
#include <math.h>

#define PLAN_PLACEMENT "one replica by rendezvous rank (kvp_placement_rank) of sessions lt-0, " \
                       "lt-1, ... over nodes node0..node<N-1>, namespace " \
                       "kvp_ns_fingerprint(model, geometry, codec); a cluster's own addresses " \
                       "and namespace place them otherwise: a few nodes more or fewer"

void kvp_plan_usage(FILE *out)
{
    fprintf(out,
        "usage: kvpack plan (--model NAME | --layers L --kv-heads H --head-dim D)\n"
        "                   (--tokens T | --trace FILE) [options]\n"
        "Capacity calculator: exact bytes per session and per token for each codec, and what\n"
        "that means for a node's DRAM and SSD, the node count and the link. Nothing is measured.\n"
        "geometry:\n"
        "  --model NAME        llama-3.1-8b (32 x 8 x 128) | qwen3-8b (36 x 8 x 128) |\n"
        "                      smollm2-135m (30 x 3 x 64); explicit options override it\n"
        "  --layers L --kv-heads H --head-dim D   the KV geometry of one node's shard\n"
        "  --page-tokens P     tokens per page (default 128)\n"
        "  --codec NAME|all    fp16|kivi|kivi128|oscar|kvarn|naive2, or all = the first five (all)\n"
        "  --sink-tokens S     the first S tokens stay fp16 sink pages (a multiple of P; default 0)\n"
        "workload:\n"
        "  --tokens T          tokens per session (with --trace: default the trace's mean length)\n"
        "  --trace FILE        Mooncake JSONL (input_length, hash_ids of 512-token blocks): every\n"
        "                      request is a session; full pages shared by block id are kept once\n"
        "  --sessions N        live sessions to hold, or\n"
        "  --rate R --ttl S    requests/s kept S seconds: live sessions = ceil(R x S)\n"
        "node and link:\n"
        "  --dram GB --ssd GB  per node, decimal GB (defaults 256 and 2000)\n"
        "  --fill F            fraction of DRAM and SSD used for pages (default 0.9: the store's\n"
        "                      high watermark, where the spiller starts evicting)\n"
        "  --compact-ratio R   the nodes' kvpackd --compact-ratio (default 0.5): a segment file\n"
        "                      may hold up to R dead bytes before compaction empties it, so\n"
        "                      live pages are sure of only 1 - R of the SSD\n"
        "  --link-gbps G       link speed in Gbit/s for the ship time (default 100)\n"
        "  --json              one JSON object\n"
        "fields (per codec):\n"
        "  full_page_bytes     one full page of P tokens x 1 layer x H heads, K and V, header in\n"
        "  page_bytes          all pages of one T-token session: L x (floor(T/P) full pages, the\n"
        "                      first S/P of them fp16 sink pages, + one fp16 tail page of T mod P)\n"
        "  record_bytes        the session record without its tail pages (chunk keys, CRC)\n"
        "  session_bytes       page_bytes + record_bytes: what the node stores and ships\n"
        "  session_dram_bytes  what the session takes of a node's DRAM budget: each page's pool\n"
        "                      slot (rounded up to 64 B, or to 4 KiB above 4 KiB), the tail pages\n"
        "                      in one slot; the record is not in the pool\n"
        "  session_ssd_bytes   what it takes on SSD: each page above 4 KiB a 4 KiB-aligned extent\n"
        "                      (smaller ones inline in the index), plus the record with the tail\n"
        "                      in its 24-byte versioned envelope\n"
        "  bytes_per_token     session_bytes / T (all layers)\n"
        "  bits_per_elem       session_bytes x 8 / (2 x L x T x H x D)\n"
        "  fp16_raw_bytes      raw fp16 K+V of the session, no headers: 4 x L x T x H x D\n"
        "  ratio_vs_fp16       fp16_raw_bytes / session_bytes\n"
        "  sessions_per_node_dram / _ssd   floor(GB x 1e9 x F / session_dram_bytes); SSD:\n"
        "                      GB x 1e9 x F x (1 - R) (compaction headroom) / session_ssd_bytes\n"
        "  nodes_dram          nodes to keep every live session in DRAM: the fewest, from the\n"
        "                      lower bound up, from which every count up to 64 has its fullest\n"
        "                      node hold its share (one more node can rank more sessions first\n"
        "                      on a full one), each session placed as the cluster places it\n"
        "                      (one replica, rendezvous\n"
        "                      rank; sessions lt-0, lt-1, ... as loadtest names them, over nodes\n"
        "                      node0..node<N-1>, namespace of the model, geometry and codec: a\n"
        "                      cluster's own addresses and namespace move it by a few nodes).\n"
        "                      --trace: a node holds every full chunk its sessions name, so a\n"
        "                      prefix shared by sessions on several nodes is stored on each.\n"
        "                      At most 64 (a cluster's peers): more is null (text: >64); over\n"
        "                      250000 sessions (live, or trace requests) are not placed one by\n"
        "                      one (null; text: unplaced)\n"
        "  nodes_spill         the same when sessions live on SSD with DRAM as their cache (a\n"
        "                      session read back keeps its disk copy; under write-through every\n"
        "                      put has one): each node's share fits its SSD or its DRAM; a\n"
        "                      session is served from DRAM, so it must also fit one node's DRAM\n"
        "  nodes_dram_lower_bound / nodes_spill_lower_bound   (text: lb) the same as if every\n"
        "                      node held an equal share: live / sessions per node in DRAM, or in\n"
        "                      the larger of DRAM and SSD (--trace: unique DRAM / DRAM, and the\n"
        "                      fewer of that and unique SSD / SSD, as if each unique chunk were\n"
        "                      stored once in the cluster): placing by session seldom reaches it\n"
        "  max_nodes, placement   the most nodes counted, and how sessions are placed\n"
        "  ship_ms, fp16_ship_ms, speedup_vs_fp16   session_bytes x 8 / link, vs the fp16 codec\n"
        "  trace_bytes, trace_unique_bytes  --trace: all sessions, and after prefix sharing\n"
        "  trace_unique_dram_bytes / _ssd_bytes  the shared bytes as the node holds them\n"
        "Not counted: index memory (the node's tables of pages and sessions).\n");
}

static void json_count(kvp_json_t *j, const char *key, uint64_t v, bool have)
{
    if (!have || v >= KVP_PLAN_UNPLACED) { /* null: no workload given, or no count (no fit, over
                                            * a cluster's nodes, not placed) */
        kvp_json_num(j, key, NAN);
    } else {
        kvp_json_u64(j, key, v);
    }
}

void kvp_plan_report_json(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live,
                          const kvp_plan_row_t *rows, const kvp_plan_row_t *fp16)
{
    kvp_json_t j;
    bool       have = live != 0 || t != NULL;
    double     elems = 2.0 * (double)o->layers * (double)o->tokens * (double)o->heads *
                       (double)o->head_dim;

    kvp_json_begin(&j, stdout);
    kvp_json_str(&j, "model", o->model != NULL ? o->model : "custom");
    kvp_json_int(&j, "layers", (int64_t)o->layers);
    kvp_json_int(&j, "kv_heads", (int64_t)o->heads);
    kvp_json_int(&j, "head_dim", (int64_t)o->head_dim);
    kvp_json_int(&j, "page_tokens", (int64_t)o->page_tokens);
    kvp_json_int(&j, "sink_tokens", (int64_t)o->sink_tokens);
    kvp_json_int(&j, "tokens", (int64_t)o->tokens);
    json_count(&j, "live_sessions", live, live != 0);
    kvp_json_num(&j, "dram_gb", o->dram_gb);
    kvp_json_num(&j, "ssd_gb", o->ssd_gb);
    kvp_json_num(&j, "fill", o->fill);
    kvp_json_num(&j, "compact_ratio", o->compact_ratio);
    kvp_json_num(&j, "link_gbps", o->link_gbps);
    kvp_json_int(&j, "max_nodes", KVP_PLAN_MAX_NODES);
    kvp_json_str(&j, "placement", PLAN_PLACEMENT);
    if (t != NULL) {
        kvp_json_obj(&j, "trace");
        kvp_json_str(&j, "path", o->trace);
        kvp_json_int(&j, "requests", t->w.n);
        kvp_json_int(&j, "tokens", (int64_t)t->tokens_sum);
        kvp_json_int(&j, "chunks", (int64_t)t->chunks_total);
        kvp_json_int(&j, "unique_chunks", (int64_t)t->chunks_unique);
        kvp_json_close(&j);
    }
    kvp_json_arr(&j, "codecs");
    for (int i = 0; i < o->n_codecs; i++) {
        const kvp_plan_row_t *r = &rows[i];

        kvp_json_obj(&j, NULL);
        kvp_json_str(&j, "codec", kvp_codec_name(r->codec));
        kvp_json_int(&j, "full_page_bytes", (int64_t)r->full_page);
        kvp_json_int(&j, "page_bytes", (int64_t)r->page_bytes);
        kvp_json_int(&j, "record_bytes", (int64_t)r->record_bytes);
        kvp_json_int(&j, "session_bytes", (int64_t)r->session_bytes);
        kvp_json_int(&j, "session_dram_bytes", (int64_t)r->dram_bytes);
        kvp_json_int(&j, "session_ssd_bytes", (int64_t)r->ssd_bytes);
        kvp_json_int(&j, "fp16_raw_bytes", (int64_t)r->fp16_raw);
        kvp_json_num(&j, "bytes_per_token", (double)r->session_bytes / (double)o->tokens);
        kvp_json_num(&j, "bits_per_elem", (double)r->session_bytes * 8.0 / elems);
        kvp_json_num(&j, "ratio_vs_fp16", (double)r->fp16_raw / (double)r->session_bytes);
        kvp_json_int(&j, "sessions_per_node_dram", (int64_t)r->per_node_dram);
        kvp_json_int(&j, "sessions_per_node_ssd", (int64_t)r->per_node_ssd);
        json_count(&j, "nodes_dram", r->nodes_dram, have);
        json_count(&j, "nodes_spill", r->nodes_spill, have);
        json_count(&j, "nodes_dram_lower_bound", r->nodes_dram_lb, have);
        json_count(&j, "nodes_spill_lower_bound", r->nodes_spill_lb, have);
        kvp_json_num(&j, "ship_ms", r->ship_s * 1e3);
        kvp_json_num(&j, "fp16_ship_ms", fp16->ship_s * 1e3);
        kvp_json_num(&j, "speedup_vs_fp16", fp16->ship_s / r->ship_s);
        if (t != NULL) {
            kvp_json_int(&j, "trace_bytes", (int64_t)r->trace_bytes);
            kvp_json_int(&j, "trace_unique_bytes", (int64_t)r->trace_unique);
            kvp_json_int(&j, "trace_unique_dram_bytes", (int64_t)r->trace_unique_dram);
            kvp_json_int(&j, "trace_unique_ssd_bytes", (int64_t)r->trace_unique_ssd);
        }
        kvp_json_close(&j);
    }
    kvp_json_close(&j);
    kvp_json_end(&j);
}

static void text_count(int width, uint64_t v, bool have)
{
    char over[16];

    snprintf(over, sizeof(over), ">%u", KVP_PLAN_MAX_NODES);
    if (!have) {
        printf(" %*s", width, "-");
    } else if (v >= KVP_PLAN_UNPLACED) {
        printf(" %*s", width, v == KVP_PLAN_NO_FIT ? "no fit" : v == KVP_PLAN_OVER ? over
                                                                                  : "unplaced");
    } else {
        printf(" %*" PRIu64, width, v);
    }
}

void kvp_plan_report_text(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live,
                          const kvp_plan_row_t *rows, const kvp_plan_row_t *fp16)
{
    bool have = live != 0 || t != NULL;

    printf("%s: %" PRIu64 " layers x %" PRIu64 " KV heads x %" PRIu64 ", P = %" PRIu64
           ", sink %" PRIu64 ", %" PRIu64 " tokens/session; node %g GB DRAM + %g GB SSD "
           "(fill %.2f, compact ratio %.2f), link %g Gbit/s",
           o->model != NULL ? o->model : "custom", o->layers, o->heads, o->head_dim,
           o->page_tokens, o->sink_tokens, o->tokens, o->dram_gb, o->ssd_gb, o->fill,
           o->compact_ratio, o->link_gbps);
    if (live != 0) {
        printf(", %" PRIu64 " live sessions", live);
    }
    if (t != NULL) {
        printf("\ntrace %s: %u requests, %" PRIu64 " tokens, %" PRIu64 " of %" PRIu64
               " full chunks unique", o->trace, t->w.n, t->tokens_sum, t->chunks_unique,
               t->chunks_total);
    }
    printf("\n%-8s %12s %12s %10s %9s %7s %9s %9s %9s %9s %6s %6s %10s %8s",
           "codec", "session B", "in DRAM B", "B/token", "bits/el", "x fp16", "DRAM ses",
           "SSD ses", "nodes mem", "nodes ssd", "lb mem", "lb ssd", "ship ms", "vs fp16");
    printf(t != NULL ? " %14s %14s\n" : "\n", "trace B", "unique B");
    for (int i = 0; i < o->n_codecs; i++) {
        const kvp_plan_row_t *r = &rows[i];

        printf("%-8s %12" PRIu64 " %12" PRIu64 " %10.1f %9.3f %7.2f %9" PRIu64 " %9" PRIu64,
               kvp_codec_name(r->codec), r->session_bytes, r->dram_bytes,
               (double)r->session_bytes / (double)o->tokens,
               (double)r->session_bytes * 8.0 / (double)(r->fp16_raw / 2),
               (double)r->fp16_raw / (double)r->session_bytes, r->per_node_dram, r->per_node_ssd);
        text_count(9, r->nodes_dram, have);
        text_count(9, r->nodes_spill, have);
        text_count(6, r->nodes_dram_lb, have);
        text_count(6, r->nodes_spill_lb, have);
        printf(" %10.3f %7.2fx", r->ship_s * 1e3, fp16->ship_s / r->ship_s);
        if (t != NULL) {
            printf(" %14" PRIu64 " %14" PRIu64, r->trace_bytes, r->trace_unique);
        }
        printf("\n");
    }
    if (have) {
        printf("nodes: the fewest from which every count up to 64 has its fullest node hold its "
               "share, each session placed\nby rendezvous rank over node0..node<N-1> (a cluster's "
               "own addresses move it by a few nodes); lb: as if every node held an equal share%s\n",
               t != NULL ? " and each unique chunk were stored once" : "");
    }
    for (int i = 0; have && i < o->n_codecs; i++) {
        if (rows[i].nodes_dram == KVP_PLAN_OVER || rows[i].nodes_spill == KVP_PLAN_OVER) {
            printf(">%u: more nodes than a cluster takes\n", KVP_PLAN_MAX_NODES);
            break;
        }
    }
    for (int i = 0; have && i < o->n_codecs; i++) {
        if (rows[i].nodes_dram == KVP_PLAN_UNPLACED || rows[i].nodes_spill == KVP_PLAN_UNPLACED) {
            printf("unplaced: over %u sessions are not placed one by one; see lb\n",
                   KVP_PLAN_MAX_PLACED);
            break;
        }
    }
}
