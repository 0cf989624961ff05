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

/* What one codec costs for the workload. Bytes are exact; sessions and nodes are whole numbers
 * (UINT64_MAX: the workload cannot be placed, e.g. a session larger than a node's DRAM). */
typedef struct {
    kvp_codec_id_t codec;
    uint64_t       full_page, page_bytes, record_bytes, session_bytes, fp16_raw;
    uint64_t       dram_bytes, ssd_bytes;       /* one session in a node's DRAM pool, on its SSD */
    uint64_t       per_node_dram, per_node_ssd, nodes_dram, nodes_spill;
    uint64_t       trace_bytes, trace_unique;   /* --trace only */
    uint64_t       trace_unique_dram, trace_unique_ssd;
    double         ship_s;
} kvp_plan_row_t;

/* Trace workload: each request is a session of input_len tokens; full chunks are shared between
 * requests whose 512-token block ids match at the same position (Mooncake hash ids are chained). */
typedef struct {
    kvp_lt_workload_t w;
    uint64_t          tokens_sum, tokens_max;
    uint64_t          chunks_total, chunks_unique, chunks_unique_sink;
    uint64_t         *tails;   /* per request: T mod P */
} kvp_plan_trace_t;

void kvp_plan_usage(FILE *out);
/* live: live sessions (0 when none given); t NULL without --trace; fp16 is the fp16 row. */
void kvp_plan_report_json(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live,
                          const kvp_plan_row_t *rows, const kvp_plan_row_t *fp16);
void kvp_plan_report_text(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live,
                          const kvp_plan_row_t *rows, const kvp_plan_row_t *fp16);

#endif
