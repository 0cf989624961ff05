/* cmd_plan.h - the pieces of `kvpack plan` (capacity calculator): options, one result row per
 * codec, the trace workload; cmd_plan.c parses and computes, cmd_plan_report.c prints --help, the
 * text table and the JSON object. */
#ifndef KVPACK_CLI_PLAN_H
#define KVPACK_CLI_PLAN_H

#include "cli.h"
#include "cmd_loadtest.h"

#include "kvpack/codec.h"

typedef struct {
    const char    *model, *trace;
    uint64_t       layers, heads, head_dim, page_tokens, sink_tokens, tokens, sessions;
    double         rate, ttl, dram_gb, ssd_gb, fill, link_gbps;
    double         compact_ratio; /* --compact-ratio: SSD headroom for dead bytes */
    kvp_codec_id_t codecs[KVP_CODEC_MAX];
    int            n_codecs;
    bool           json;
} kvp_plan_opts_t;

/* A node count, or why there is none: */
#define KVP_PLAN_NO_FIT   UINT64_MAX       /* a session is larger than a node's DRAM */
#define KVP_PLAN_OVER     (UINT64_MAX - 1) /* more than a cluster takes (KVP_PLAN_MAX_NODES) */
#define KVP_PLAN_UNPLACED (UINT64_MAX - 2) /* more live sessions than the plan places one by one */
#define KVP_PLAN_MAX_NODES   KVP_CLUSTER_MAX_NODES
#define KVP_PLAN_MAX_PLACED  250000u /* sessions placed one by one, at most (~1 s) */

/* What one codec costs for the workload. Bytes are exact; sessions and nodes are whole numbers.
 * nodes_*: the fewest nodes whose fullest node holds its share when every session is placed by
 * the cluster's rendezvous rank; nodes_*_lb: the lower bound of perfect balance (and, with a
 * trace, of each unique chunk stored once in the whole cluster), which placement cannot reach. */
typedef struct {
    kvp_codec_id_t codec;
    uint64_t       full_page, page_bytes, record_bytes, session_bytes, fp16_raw;
    uint64_t       dram_bytes, ssd_bytes;       /* one session in a node's DRAM pool, on its SSD */
    uint64_t       per_node_dram, per_node_ssd, nodes_dram, nodes_spill;
    uint64_t       nodes_dram_lb, nodes_spill_lb;
    uint64_t       trace_bytes, trace_unique;   /* --trace only */
    uint64_t       trace_unique_dram, trace_unique_ssd;
    double         ship_s;
} kvp_plan_row_t;

/* One full chunk of a trace request: the hash of its request's block ids up to its 512-token
 * block (kvp_lt_prefix_next: the same tokens before it, as its key chains over), its index in
 * the request. */
typedef struct {
    uint64_t id;
    uint32_t pos, req;
} kvp_plan_chunk_t;

/* Trace workload: each request is a session of input_len tokens; full chunks are shared between
 * requests whose 512-token block ids match at the same position (Mooncake hash ids are chained). */
typedef struct {
    kvp_lt_workload_t w;
    uint64_t          tokens_sum, tokens_max;
    uint64_t          chunks_total, chunks_unique, chunks_unique_sink;
    kvp_plan_chunk_t *chunks;            /* chunks_total, equal (id, pos) next to each other */
    uint64_t         *own_dram, *own_ssd; /* per request: its tail pages and record in a node */
} kvp_plan_trace_t;

void kvp_plan_usage(FILE *out);
/* live: live sessions (0 when none given); t NULL without --trace; fp16 is the fp16 row. */
void kvp_plan_report_json(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live,
                          const kvp_plan_row_t *rows, const kvp_plan_row_t *fp16);
void kvp_plan_report_text(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live,
                          const kvp_plan_row_t *rows, const kvp_plan_row_t *fp16);

#endif
