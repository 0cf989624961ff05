/* cmd_plan.c - "kvpack plan": the capacity calculator. For a model geometry and a workload it
 * gives, per codec, the exact bytes a session stores (page sizes from the codec layer, 64-byte
 * headers, fp16 sink and tail pages, the session record), sessions per node in DRAM and on SSD,
 * nodes needed, and the time to ship one session on a link next to fp16. Nothing is measured or
 * estimated: every figure is arithmetic on kvp_codec_payload_bytes and kvp_session_desc_pack.
 * Main flow: kvp_cmd_plan -> plan_parse -> plan_trace (optional) -> plan_row per codec -> report. */
#include "cli.h"
#include "cmd_loadtest.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_GB        1e9   /* --dram/--ssd are decimal GB */
#define PLAN_MAX_LAYER 1024u
#define PLAN_MAX_TOK   (1ull << 32)

/* Presets from each model's public config.json on Hugging Face (num_hidden_layers,
 * num_key_value_heads, head_dim or hidden_size / num_attention_heads):
 *   meta-llama/Llama-3.1-8B          32 layers, 8 KV heads, head_dim 128 (4096 / 32)
 *   Qwen/Qwen3-8B                     36 layers, 8 KV heads, head_dim 128
 *   HuggingFaceTB/SmolLM2-135M        30 layers, 3 KV heads, head_dim 64 (576 / 9) */
static const struct {
    const char *name;
    uint32_t    layers, heads, head_dim;
} plan_models[] = {
    {"llama-3.1-8b", 32, 8, 128},
    {"qwen3-8b", 36, 8, 128},
    {"smollm2-135m", 30, 3, 64},
};

static const kvp_codec_id_t plan_all[] = {KVP_CODEC_FP16, KVP_CODEC_KIVI, KVP_CODEC_KIVI128,
                                          KVP_CODEC_OSCAR, KVP_CODEC_KVARN};

typedef struct {
    const char    *model, *trace;
    uint64_t       layers, heads, head_dim, page_tokens, sink_tokens, tokens, sessions;
    double         rate, ttl, dram_gb, ssd_gb, fill, link_gbps;
    kvp_codec_id_t codecs[KVP_CODEC_MAX];
    int            n_codecs;
    bool           json;
} plan_opts_t;

/* What one codec costs for the workload. Bytes are exact; sessions and nodes are whole numbers
 * (UINT64_MAX: the workload cannot be placed, e.g. a session larger than a node's DRAM). */
typedef struct {
    kvp_codec_id_t codec;
    uint64_t       full_page, page_bytes, record_bytes, session_bytes, fp16_raw;
    uint64_t       per_node_dram, per_node_ssd, nodes_dram, nodes_spill;
    uint64_t       trace_bytes, trace_unique;   /* --trace only */
    double         ship_s;
} plan_row_t;

/* Trace workload: each request is a session of input_len tokens; full chunks are shared between
 * requests whose 512-token block ids match at the same position (Mooncake hash ids are chained). */
typedef struct {
    kvp_lt_workload_t w;
    uint64_t          tokens_sum, tokens_max;
    uint64_t          chunks_total, chunks_unique, chunks_unique_sink;
    uint64_t         *tails;   /* per request: T mod P */
} plan_trace_t;

static void usage(FILE *out)
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
        "  --link-gbps G       link speed in Gbit/s for the ship time (default 100)\n"
        "  --json              one JSON object\n"
        "fields (per codec):\n"
        "  full_page_bytes     one full page of P tokens x 1 layer x H heads, K and V, header in\n"
        "  page_bytes          all pages of one T-token session: L x (floor(T/P) full pages, the\n"
        "                      first S/P of them fp16 sink pages, + one fp16 tail page of T mod P)\n"
        "  record_bytes        the session record without its tail pages (chunk keys, CRC)\n"
        "  session_bytes       page_bytes + record_bytes: what the node stores and ships\n"
        "  bytes_per_token     session_bytes / T (all layers)\n"
        "  bits_per_elem       session_bytes x 8 / (2 x L x T x H x D)\n"
        "  fp16_raw_bytes      raw fp16 K+V of the session, no headers: 4 x L x T x H x D\n"
        "  ratio_vs_fp16       fp16_raw_bytes / session_bytes\n"
        "  sessions_per_node_dram / _ssd   floor(GB x 1e9 x F / session_bytes)\n"
        "  nodes_dram          nodes to keep every live session in DRAM\n"
        "  nodes_spill         nodes when sessions spill to SSD (DRAM + SSD per node); a session\n"
        "                      is served from DRAM, so it must also fit one node's DRAM\n"
        "  ship_ms, fp16_ship_ms, speedup_vs_fp16   session_bytes x 8 / link, vs the fp16 codec\n"
        "  trace_bytes, trace_unique_bytes  --trace: all sessions, and after prefix sharing\n"
        "Not counted: the node's allocation rounding (DRAM slots of 64 B, or 4 KiB above 4 KiB;\n"
        "4 KiB-aligned SSD extents) and index memory.\n");
}

static int plan_bad(const char *msg, const char *arg)
{
    fprintf(stderr, "kvpack plan: %s%s%s\n", msg, arg != NULL ? " " : "", arg != NULL ? arg : "");
    return 2;
}

static int plan_codecs(plan_opts_t *o, const char *arg)
{
    if (strcmp(arg, "all") == 0) {
        o->n_codecs = (int)(sizeof(plan_all) / sizeof(plan_all[0]));
        memcpy(o->codecs, plan_all, sizeof(plan_all));
        return 0;
    }
    o->n_codecs = 1;
    if (kvp_codec_from_name(arg, &o->codecs[0]) != KVP_OK) {
        return plan_bad("unknown codec", arg);
    }
    return 0;
}

static int plan_model(plan_opts_t *o)
{
    for (size_t i = 0; i < sizeof(plan_models) / sizeof(plan_models[0]); i++) {
        if (strcmp(o->model, plan_models[i].name) == 0) {
            o->layers   = o->layers ? o->layers : plan_models[i].layers;
            o->heads    = o->heads ? o->heads : plan_models[i].heads;
            o->head_dim = o->head_dim ? o->head_dim : plan_models[i].head_dim;
            return 0;
        }
    }
    return plan_bad("unknown model (llama-3.1-8b, qwen3-8b, smollm2-135m):", o->model);
}

/* Ranges and cross-checks of the options; the codecs' own geometry checks come in plan_check. */
static int plan_validate(plan_opts_t *o)
{
    if (o->model != NULL && plan_model(o) != 0) {
        return 2;
    }
    if (o->layers == 0 || o->heads == 0 || o->head_dim == 0) {
        return plan_bad("give --model or --layers, --kv-heads and --head-dim (all > 0)", NULL);
    }
    if (o->layers > PLAN_MAX_LAYER) {
        return plan_bad("--layers is at most 1024", NULL);
    }
    if (o->page_tokens == 0 || o->page_tokens > KVP_PAGE_MAX_TOKENS) {
        return plan_bad("--page-tokens must be 1..4096", NULL);
    }
    if (o->sink_tokens % o->page_tokens != 0) {
        return plan_bad("--sink-tokens must be a multiple of --page-tokens", NULL);
    }
    if (o->trace == NULL && (o->tokens == 0 || o->tokens >= PLAN_MAX_TOK)) {
        return plan_bad("give --tokens T (1..2^32-1) or --trace FILE", NULL);
    }
    if (o->tokens >= PLAN_MAX_TOK) {
        return plan_bad("--tokens must be below 2^32", NULL);
    }
    if (o->sessions != 0 && (o->rate > 0 || o->ttl > 0)) {
        return plan_bad("give --sessions or --rate with --ttl, not both", NULL);
    }
    if ((o->rate > 0) != (o->ttl > 0) || o->rate < 0 || o->ttl < 0 || o->rate * o->ttl > 1e15) {
        return plan_bad("--rate and --ttl go together, each > 0 (and R x S <= 1e15)", NULL);
    }
    if (!(o->dram_gb > 0 && o->dram_gb < 1e9) || !(o->ssd_gb >= 0 && o->ssd_gb < 1e9)) {
        return plan_bad("--dram must be > 0 and --ssd >= 0 GB (below 1e9)", NULL);
    }
    if (!(o->fill > 0 && o->fill <= 1) || !(o->link_gbps > 0 && o->link_gbps < 1e9)) {
        return plan_bad("--fill must be in (0, 1] and --link-gbps > 0", NULL);
    }
    if (o->trace != NULL && (o->sessions != 0 || o->rate > 0)) {
        return plan_bad("--trace is the workload: no --sessions or --rate with it", NULL);
    }
    if (o->trace != NULL && KVP_LT_BLOCK_TOKENS % o->page_tokens != 0) {
        return plan_bad("--trace needs --page-tokens dividing 512 (chunks inside blocks)", NULL);
    }
    return 0;
}

static int plan_parse(int argc, char **argv, plan_opts_t *o)
{
    const char *codec = "all";

    memset(o, 0, sizeof(*o));
    o->page_tokens = 128;
    o->dram_gb     = 256;
    o->ssd_gb      = 2000;
    o->fill        = 0.9;
    o->link_gbps   = 100;
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--model", &o->model) ||
            kvp_opt_str(argc, argv, &i, "--trace", &o->trace) ||
            kvp_opt_str(argc, argv, &i, "--codec", &codec) ||
            kvp_opt_u64(argc, argv, &i, "--layers", &o->layers) ||
            kvp_opt_u64(argc, argv, &i, "--kv-heads", &o->heads) ||
            kvp_opt_u64(argc, argv, &i, "--head-dim", &o->head_dim) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &o->page_tokens) ||
            kvp_opt_u64(argc, argv, &i, "--sink-tokens", &o->sink_tokens) ||
            kvp_opt_u64(argc, argv, &i, "--tokens", &o->tokens) ||
            kvp_opt_u64(argc, argv, &i, "--sessions", &o->sessions) ||
            kvp_opt_f64(argc, argv, &i, "--rate", &o->rate) ||
            kvp_opt_f64(argc, argv, &i, "--ttl", &o->ttl) ||
            kvp_opt_f64(argc, argv, &i, "--dram", &o->dram_gb) ||
            kvp_opt_f64(argc, argv, &i, "--ssd", &o->ssd_gb) ||
            kvp_opt_f64(argc, argv, &i, "--fill", &o->fill) ||
            kvp_opt_f64(argc, argv, &i, "--link-gbps", &o->link_gbps)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            o->json = true;
            continue;
        }
        return kvp_opt_unknown("plan", argv[i]);
    }
    if (plan_codecs(o, codec) != 0) {
        return 2;
    }
    return plan_validate(o);
}

/* ---- exact sizes ---- */

static kvp_page_params_t plan_params(const plan_opts_t *o, kvp_codec_id_t codec)
{
    kvp_page_params_t p = {0};

    p.codec       = codec;
    p.heads       = (uint32_t)o->heads;
    p.head_dim    = (uint32_t)o->head_dim;
    p.page_tokens = (uint32_t)o->page_tokens;
    return p;
}

/* One page of `valid` tokens of a codec, header included. */
static uint64_t plan_page(const plan_opts_t *o, kvp_codec_id_t codec, uint64_t valid)
{
    return KVP_PAGE_HDR_BYTES + kvp_codec_payload_bytes(codec, (uint32_t)o->heads,
                                                        (uint32_t)o->head_dim,
                                                        (uint32_t)o->page_tokens,
                                                        (uint32_t)valid);
}

/* The codec (and fp16, for sink and tail pages) must take this geometry; exit status or 0. */
static int plan_check(const plan_opts_t *o, kvp_codec_id_t codec)
{
    kvp_page_params_t p = plan_params(o, codec);
    kvp_status_t      s = kvp_codec_check(&p);

    if (s == KVP_OK && kvp_page_max_bytes(&p) - KVP_PAGE_HDR_BYTES > KVP_PAGE_MAX_PAYLOAD) {
        s = KVP_ERR_INVALID;
    }
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack plan: codec %s cannot take %" PRIu64 " KV heads x head_dim %" PRIu64
                " with %" PRIu64 "-token pages (%s)\n", kvp_codec_name(codec), o->heads,
                o->head_dim, o->page_tokens, kvp_status_str(s));
        return 2;
    }
    return 0;
}

/* Serialized session record of n_chunks chunk keys, without tail pages: the fixed part comes from
 * packing an empty record, each chunk key adds one kvp_key128_t. */
static uint64_t plan_record(uint64_t n_chunks)
{
    kvp_session_desc_t d = {0};
    uint8_t           *blob;
    size_t             len = 0;

    if (kvp_session_desc_pack(&d, &blob, &len) != KVP_OK) {
        return 0;
    }
    kvp_free(blob);
    return len + n_chunks * sizeof(kvp_key128_t);
}

/* Pages of one session of T tokens, all layers: sink, codec, and fp16 tail pages. */
static uint64_t plan_pages(const plan_opts_t *o, kvp_codec_id_t codec, uint64_t T)
{
    uint64_t P = o->page_tokens, full = T / P, sink = o->sink_tokens / P;
    uint64_t per_layer;

    sink      = sink < full ? sink : full;
    per_layer = sink * plan_page(o, KVP_CODEC_FP16, P) + (full - sink) * plan_page(o, codec, P);
    per_layer += T % P ? plan_page(o, KVP_CODEC_FP16, T % P) : 0;
    return o->layers * per_layer;
}

/* ---- trace ---- */

typedef struct {
    uint64_t id;  /* hash id of the chunk's 512-token block */
    uint64_t pos; /* chunk index in the sequence */
} plan_chunk_t;

static int chunk_cmp(const void *a, const void *b)
{
    const plan_chunk_t *x = a, *y = b;

    if (x->id != y->id) {
        return x->id < y->id ? -1 : 1;
    }
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int plan_trace(const plan_opts_t *o, plan_trace_t *t)
{
    uint64_t      per_block = KVP_LT_BLOCK_TOKENS / o->page_tokens, n = 0;
    plan_chunk_t *c;

    FILE         *f = fopen(o->trace, "r");

    memset(t, 0, sizeof(*t));
    if (f == NULL) {
        fprintf(stderr, "kvpack plan: cannot read trace %s: %m\n", o->trace);
        return 1;
    }
    fclose(f);
    if (kvp_lt_trace_load(o->trace, 0, 1, &t->w) != 0) {
        return 1; /* the loader named the file, line and what is wrong */
    }
    for (uint32_t i = 0; i < t->w.n; i++) {
        t->tokens_sum += t->w.reqs[i].input_len;
        t->tokens_max = t->tokens_max > t->w.reqs[i].input_len ? t->tokens_max
                                                                 : t->w.reqs[i].input_len;
        t->chunks_total += t->w.reqs[i].input_len / o->page_tokens;
    }
    c        = kvp_calloc(t->chunks_total + 1, sizeof(*c), "plan chunks");
    t->tails = kvp_calloc(t->w.n, sizeof(*t->tails), "plan tails");
    if (c == NULL || t->tails == NULL) {
        kvp_free(c);
        fprintf(stderr, "kvpack plan: out of memory for the trace's chunks\n");
        return 1;
    }
    for (uint32_t i = 0; i < t->w.n; i++) {
        const kvp_lt_req_t *r = &t->w.reqs[i];

        for (uint64_t j = 0; j < r->input_len / o->page_tokens; j++) {
            c[n].id  = r->ids[j / per_block];
            c[n].pos = j;
            n++;
        }
        t->tails[i] = r->input_len % o->page_tokens;
    }
    qsort(c, n, sizeof(*c), chunk_cmp);
    for (uint64_t k = 0; k < n; k++) {
        if (k == 0 || chunk_cmp(&c[k], &c[k - 1]) != 0) {
            t->chunks_unique++;
            t->chunks_unique_sink += c[k].pos < o->sink_tokens / o->page_tokens;
        }
    }
    kvp_free(c);
    return 0;
}

static void plan_trace_free(plan_trace_t *t)
{
    kvp_free(t->tails);
    kvp_lt_workload_free(&t->w);
}

/* Every request's own bytes (a session each) and the bytes after chunk sharing. */
static void plan_trace_bytes(const plan_opts_t *o, const plan_trace_t *t, plan_row_t *r)
{
    uint64_t P = o->page_tokens, own = 0;

    r->trace_bytes = 0;
    for (uint32_t i = 0; i < t->w.n; i++) {
        uint64_t T = t->w.reqs[i].input_len;

        r->trace_bytes += plan_pages(o, r->codec, T) + plan_record(T / P);
        own += plan_record(T / P) + (t->tails[i] ? o->layers * plan_page(o, KVP_CODEC_FP16,
                                                                           t->tails[i]) : 0);
    }
    r->trace_unique = own + o->layers * (t->chunks_unique_sink * plan_page(o, KVP_CODEC_FP16, P) +
                                         (t->chunks_unique - t->chunks_unique_sink) *
                                             plan_page(o, r->codec, P));
}

/* ---- arithmetic ---- */

static uint64_t div_up(uint64_t a, uint64_t b)
{
    return b == 0 ? UINT64_MAX : a / b + (a % b != 0);
}

/* Nodes for `need` units when one node holds `per` of them (UINT64_MAX: never fits). */
static uint64_t plan_nodes(uint64_t need, uint64_t per, uint64_t dram_per)
{
    return dram_per == 0 ? UINT64_MAX : div_up(need, per);
}

static void plan_row(const plan_opts_t *o, const plan_trace_t *t, uint64_t live, plan_row_t *r)
{
    uint64_t T    = o->tokens;
    double   dram = floor(o->dram_gb * PLAN_GB * o->fill);
    double   ssd  = floor(o->ssd_gb * PLAN_GB * o->fill);

    r->full_page     = plan_page(o, r->codec, o->page_tokens);
    r->page_bytes    = plan_pages(o, r->codec, T);
    r->record_bytes  = plan_record(T / o->page_tokens);
    r->session_bytes = r->page_bytes + r->record_bytes;
    r->fp16_raw      = 4 * o->layers * T * o->heads * o->head_dim;
    r->per_node_dram = (uint64_t)floor(dram / (double)r->session_bytes);
    r->per_node_ssd  = (uint64_t)floor(ssd / (double)r->session_bytes);
    r->ship_s        = (double)r->session_bytes * 8.0 / (o->link_gbps * 1e9);
    if (t != NULL) {
        /* the longest request must fit one node's DRAM, where sessions are served from */
        bool fits = plan_pages(o, r->codec, t->tokens_max) +
                        plan_record(t->tokens_max / o->page_tokens) <= (uint64_t)dram;

        plan_trace_bytes(o, t, r);
        r->nodes_dram  = fits ? div_up(r->trace_unique, (uint64_t)dram) : UINT64_MAX;
        r->nodes_spill = fits ? div_up(r->trace_unique, (uint64_t)(dram + ssd)) : UINT64_MAX;
    } else {
        r->nodes_dram  = plan_nodes(live, r->per_node_dram, r->per_node_dram);
        r->nodes_spill = plan_nodes(live, r->per_node_dram + r->per_node_ssd, r->per_node_dram);
    }
}

/* ---- report ---- */

static void json_count(kvp_json_t *j, const char *key, uint64_t v, bool have)
{
    if (!have || v == UINT64_MAX) {
        kvp_json_num(j, key, NAN); /* null: no workload given, or it cannot be placed */
    } else {
        kvp_json_int(j, key, (int64_t)v);
    }
}

static void plan_json(const plan_opts_t *o, const plan_trace_t *t, uint64_t live,
                      const plan_row_t *rows, const plan_row_t *fp16)
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
    kvp_json_num(&j, "link_gbps", o->link_gbps);
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
        const plan_row_t *r = &rows[i];

        kvp_json_obj(&j, NULL);
        kvp_json_str(&j, "codec", kvp_codec_name(r->codec));
        kvp_json_int(&j, "full_page_bytes", (int64_t)r->full_page);
        kvp_json_int(&j, "page_bytes", (int64_t)r->page_bytes);
        kvp_json_int(&j, "record_bytes", (int64_t)r->record_bytes);
        kvp_json_int(&j, "session_bytes", (int64_t)r->session_bytes);
        kvp_json_int(&j, "fp16_raw_bytes", (int64_t)r->fp16_raw);
        kvp_json_num(&j, "bytes_per_token", (double)r->session_bytes / (double)o->tokens);
        kvp_json_num(&j, "bits_per_elem", (double)r->session_bytes * 8.0 / elems);
        kvp_json_num(&j, "ratio_vs_fp16", (double)r->fp16_raw / (double)r->session_bytes);
        kvp_json_int(&j, "sessions_per_node_dram", (int64_t)r->per_node_dram);
        kvp_json_int(&j, "sessions_per_node_ssd", (int64_t)r->per_node_ssd);
        json_count(&j, "nodes_dram", r->nodes_dram, have);
        json_count(&j, "nodes_spill", r->nodes_spill, have);
        kvp_json_num(&j, "ship_ms", r->ship_s * 1e3);
        kvp_json_num(&j, "fp16_ship_ms", fp16->ship_s * 1e3);
        kvp_json_num(&j, "speedup_vs_fp16", fp16->ship_s / r->ship_s);
        if (t != NULL) {
            kvp_json_int(&j, "trace_bytes", (int64_t)r->trace_bytes);
            kvp_json_int(&j, "trace_unique_bytes", (int64_t)r->trace_unique);
        }
        kvp_json_close(&j);
    }
    kvp_json_close(&j);
    kvp_json_end(&j);
}

static void text_count(uint64_t v, bool have)
{
    if (!have) {
        printf(" %9s", "-");
    } else if (v == UINT64_MAX) {
        printf(" %9s", "no fit");
    } else {
        printf(" %9" PRIu64, v);
    }
}

static void plan_text(const plan_opts_t *o, const plan_trace_t *t, uint64_t live,
                      const plan_row_t *rows, const plan_row_t *fp16)
{
    bool have = live != 0 || t != NULL;

    printf("%s: %" PRIu64 " layers x %" PRIu64 " KV heads x %" PRIu64 ", P = %" PRIu64
           ", sink %" PRIu64 ", %" PRIu64 " tokens/session; node %.0f GB DRAM + %.0f GB SSD "
           "(fill %.2f), link %.0f Gbit/s", o->model != NULL ? o->model : "custom", o->layers,
           o->heads, o->head_dim, o->page_tokens, o->sink_tokens, o->tokens, o->dram_gb,
           o->ssd_gb, o->fill, o->link_gbps);
    if (live != 0) {
        printf(", %" PRIu64 " live sessions", live);
    }
    if (t != NULL) {
        printf("\ntrace %s: %u requests, %" PRIu64 " tokens, %" PRIu64 " of %" PRIu64
               " full chunks unique", o->trace, t->w.n, t->tokens_sum, t->chunks_unique,
               t->chunks_total);
    }
    printf("\n%-8s %12s %10s %9s %7s %9s %9s %9s %9s %10s %8s",
           "codec", "session B", "B/token", "bits/el", "x fp16", "DRAM ses", "SSD ses",
           "nodes mem", "nodes ssd", "ship ms", "vs fp16");
    printf(t != NULL ? " %14s %14s\n" : "\n", "trace B", "unique B");
    for (int i = 0; i < o->n_codecs; i++) {
        const plan_row_t *r = &rows[i];

        printf("%-8s %12" PRIu64 " %10.1f %9.3f %7.2f %9" PRIu64 " %9" PRIu64,
               kvp_codec_name(r->codec), r->session_bytes,
               (double)r->session_bytes / (double)o->tokens,
               (double)r->session_bytes * 8.0 / (double)(r->fp16_raw / 2),
               (double)r->fp16_raw / (double)r->session_bytes, r->per_node_dram, r->per_node_ssd);
        text_count(r->nodes_dram, have);
        text_count(r->nodes_spill, have);
        printf(" %10.3f %7.2fx", r->ship_s * 1e3, fp16->ship_s / r->ship_s);
        if (t != NULL) {
            printf(" %14" PRIu64 " %14" PRIu64, r->trace_bytes, r->trace_unique);
        }
        printf("\n");
    }
}

int kvp_cmd_plan(int argc, char **argv)
{
    plan_opts_t  o;
    plan_trace_t trace;
    plan_row_t   rows[KVP_CODEC_MAX], fp16 = {0};
    uint64_t     live;
    int          rc;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    rc = plan_parse(argc, argv, &o);
    for (int i = 0; rc == 0 && i <= o.n_codecs; i++) {
        rc = plan_check(&o, i < o.n_codecs ? o.codecs[i] : KVP_CODEC_FP16);
    }
    if (rc != 0) {
        return rc;
    }
    if (o.trace != NULL) {
        rc = plan_trace(&o, &trace);
        if (rc != 0) {
            return rc;
        }
        o.tokens = o.tokens ? o.tokens : trace.tokens_sum / trace.w.n;
        o.tokens = o.tokens ? o.tokens : 1;
    }
    live = o.sessions ? o.sessions : (uint64_t)ceil(o.rate * o.ttl);
    fp16.codec = KVP_CODEC_FP16;
    plan_row(&o, o.trace != NULL ? &trace : NULL, live, &fp16);
    for (int i = 0; i < o.n_codecs; i++) {
        rows[i].codec = o.codecs[i];
        plan_row(&o, o.trace != NULL ? &trace : NULL, live, &rows[i]);
    }
    if (o.json) {
        plan_json(&o, o.trace != NULL ? &trace : NULL, live, rows, &fp16);
    } else {
        plan_text(&o, o.trace != NULL ? &trace : NULL, live, rows, &fp16);
    }
    if (o.trace != NULL) {
        plan_trace_free(&trace);
    }
    return 0;
}
