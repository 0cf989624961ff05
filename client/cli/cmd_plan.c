/* cmd_plan.c - "kvpack plan": the capacity calculator. For a model geometry and a workload it
 * gives, per codec, the exact bytes a session stores (page sizes from the codec layer, 64-byte
 * headers, fp16 sink and tail pages, the session record), what it takes in a node's DRAM pool and
 * on its SSD (the store's slot and extent rounding), sessions per node in DRAM and on SSD, nodes
 * needed, and the time to ship one session on a link next to fp16. Nothing is measured or
 * estimated: every figure is arithmetic on kvp_codec_payload_bytes, kvp_session_desc_pack and
 * kvp_store_page_dram_bytes / _ssd_bytes.
 * Main flow: kvp_cmd_plan -> plan_parse -> plan_trace (optional) -> plan_row per codec -> report. */
#include "cmd_plan.h"

#include "kvpack/alloc.h"
#include "kvpack/placement.h"
#include "kvpack/store.h"

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

static int plan_codecs(kvp_plan_opts_t *o, const char *arg)
{
    if (strcmp(arg, "all") == 0) {
        o->n_codecs = (int)(sizeof(plan_all) / sizeof(plan_all[0]));
        memcpy(o->codecs, plan_all, sizeof(plan_all));
        return 0;
    }
    o->n_codecs = 1;
    if (!kvp_cli_codec("plan", arg, "all", &o->codecs[0])) {
        return 2;
    }
    return 0;
}

static int plan_model(kvp_plan_opts_t *o)
{
    for (size_t i = 0; i < sizeof(plan_models) / sizeof(plan_models[0]); i++) {
        if (strcmp(o->model, plan_models[i].name) == 0) {
            o->layers   = o->layers ? o->layers : plan_models[i].layers;
            o->heads    = o->heads ? o->heads : plan_models[i].heads;
            o->head_dim = o->head_dim ? o->head_dim : plan_models[i].head_dim;
            return 0;
        }
    }
    return kvp_cli_usage_error("plan", "unknown model '%s' (llama-3.1-8b|qwen3-8b|smollm2-135m)",
                               o->model);
}

/* Ranges and cross-checks of the options; the codecs' own geometry checks come in plan_check. */
static int plan_validate(kvp_plan_opts_t *o)
{
    if (o->model != NULL && plan_model(o) != 0) {
        return 2;
    }
    if (o->layers == 0 || o->heads == 0 || o->head_dim == 0) { /* 0: not given, no preset */
        return kvp_cli_usage_error("plan", "give --model NAME or all of --layers, --kv-heads and "
                                   "--head-dim (each above 0)");
    }
    if (!kvp_cli_range("plan", "--layers", o->layers, 1, PLAN_MAX_LAYER) ||
        !kvp_cli_geometry("plan", "--kv-heads", o->heads, "--head-dim", o->head_dim,
                          "--page-tokens", o->page_tokens)) {
        return 2;
    }
    if (o->sink_tokens % o->page_tokens != 0) {
        return kvp_cli_usage_error("plan", "--sink-tokens %llu is not a multiple of --page-tokens "
                                   "%llu", (unsigned long long)o->sink_tokens,
                                   (unsigned long long)o->page_tokens);
    }
    if (o->trace == NULL && o->tokens == 0) {
        return kvp_cli_usage_error("plan", "give --tokens T or --trace FILE");
    }
    if (o->tokens != 0 && !kvp_cli_range("plan", "--tokens", o->tokens, 1, PLAN_MAX_TOK - 1)) {
        return 2;
    }
    if (o->sessions > 1000000000000000ull) { /* the cap --rate x --ttl has; UINT64_MAX is "none" */
        return kvp_cli_usage_error("plan", "--sessions wants at most 1e15, got %llu",
                                   (unsigned long long)o->sessions);
    }
    if (o->sessions != 0 && (o->rate > 0 || o->ttl > 0)) {
        return kvp_cli_usage_error("plan", "give --sessions or --rate with --ttl, not both");
    }
    if (o->rate < 0) {
        return kvp_cli_usage_error("plan", "--rate wants above 0, got %g", o->rate);
    }
    if (o->ttl < 0) {
        return kvp_cli_usage_error("plan", "--ttl wants above 0, got %g", o->ttl);
    }
    if ((o->rate > 0) != (o->ttl > 0)) {
        return kvp_cli_usage_error("plan", "%s needs %s: --rate and --ttl go together",
                                   o->rate > 0 ? "--rate" : "--ttl",
                                   o->rate > 0 ? "--ttl" : "--rate");
    }
    if (o->rate * o->ttl > 1e15) {
        return kvp_cli_usage_error("plan", "--rate x --ttl is %g live sessions, at most 1e15",
                                   o->rate * o->ttl);
    }
    if (!(o->dram_gb > 0 && o->dram_gb < 1e9)) {
        return kvp_cli_usage_error("plan", "--dram wants above 0 and below 1e9 GB, got %g",
                                   o->dram_gb);
    }
    if (!(o->ssd_gb >= 0 && o->ssd_gb < 1e9)) {
        return kvp_cli_usage_error("plan", "--ssd wants 0 or more and below 1e9 GB, got %g",
                                   o->ssd_gb);
    }
    if (!(o->fill > 0 && o->fill <= 1)) {
        return kvp_cli_usage_error("plan", "--fill wants above 0 and at most 1, got %g", o->fill);
    }
    if (!(o->link_gbps >= 1e-3 && o->link_gbps < 1e9)) {
        return kvp_cli_usage_error("plan", "--link-gbps wants 0.001 or more and below 1e9, got %g",
                                   o->link_gbps);
    }
    if (!(o->compact_ratio > 0 && o->compact_ratio < 1)) {
        return kvp_cli_usage_error("plan", "--compact-ratio wants above 0 and below 1, got %g",
                                   o->compact_ratio);
    }
    if (o->trace != NULL && (o->sessions != 0 || o->rate > 0)) {
        return kvp_cli_usage_error("plan", "--trace is the workload: no --sessions or --rate with "
                                   "it");
    }
    if (o->trace != NULL && KVP_LT_BLOCK_TOKENS % o->page_tokens != 0) {
        return kvp_cli_usage_error("plan", "--trace needs --page-tokens dividing %u (chunks inside "
                                   "blocks), got %llu", KVP_LT_BLOCK_TOKENS,
                                   (unsigned long long)o->page_tokens);
    }
    return 0;
}

static int plan_parse(int argc, char **argv, kvp_plan_opts_t *o)
{
    const char *codec = "all";

    memset(o, 0, sizeof(*o));
    o->page_tokens = 128;
    o->dram_gb     = 256;
    o->ssd_gb      = 2000;
    o->fill        = 0.9;
    o->link_gbps   = 100;
    o->compact_ratio = 0.5;
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
            kvp_opt_count(argc, argv, &i, "--sessions", &o->sessions) ||
            kvp_opt_f64(argc, argv, &i, "--rate", &o->rate) ||
            kvp_opt_f64(argc, argv, &i, "--ttl", &o->ttl) ||
            kvp_opt_f64(argc, argv, &i, "--dram", &o->dram_gb) ||
            kvp_opt_f64(argc, argv, &i, "--ssd", &o->ssd_gb) ||
            kvp_opt_f64(argc, argv, &i, "--fill", &o->fill) ||
            kvp_opt_f64(argc, argv, &i, "--compact-ratio", &o->compact_ratio) ||
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

static kvp_page_params_t plan_params(const kvp_plan_opts_t *o, kvp_codec_id_t codec)
{
    kvp_page_params_t p = {0};

    p.codec       = codec;
    p.heads       = (uint32_t)o->heads;
    p.head_dim    = (uint32_t)o->head_dim;
    p.page_tokens = (uint32_t)o->page_tokens;
    return p;
}

/* One page of `valid` tokens of a codec, header included. */
static uint64_t plan_page(const kvp_plan_opts_t *o, kvp_codec_id_t codec, uint64_t valid)
{
    return KVP_PAGE_HDR_BYTES + kvp_codec_payload_bytes(codec, (uint32_t)o->heads,
                                                        (uint32_t)o->head_dim,
                                                        (uint32_t)o->page_tokens,
                                                        (uint32_t)valid);
}

/* The codec (and fp16, for sink and tail pages) must take this geometry; exit status or 0. */
static int plan_check(const kvp_plan_opts_t *o, kvp_codec_id_t codec)
{
    kvp_page_params_t p = plan_params(o, codec);
    kvp_status_t      s = kvp_codec_check(&p);

    if (s != KVP_OK) {
        return kvp_cli_usage_error("plan", "codec %s cannot take %" PRIu64 " KV heads x head_dim "
                                   "%" PRIu64 " with %" PRIu64 "-token pages (%s): it takes %s",
                                   kvp_codec_name(codec), o->heads, o->head_dim, o->page_tokens,
                                   kvp_status_str(s), kvp_codec_geometry_rule(codec));
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

/* Where bytes are counted: as stored and shipped, in a node's DRAM pool, on its SSD. */
typedef enum { PLAN_BYTES, PLAN_DRAM, PLAN_SSD } plan_space_t;

/* What a sealed page of len bytes takes in space sp: its DRAM slot or its SSD extent. */
static uint64_t plan_in(plan_space_t sp, uint64_t len)
{
    return sp == PLAN_DRAM ? kvp_store_page_dram_bytes(len)
           : sp == PLAN_SSD ? kvp_store_page_ssd_bytes(len)
                            : len;
}

/* The fp16 tail pages of one session (one per layer, T mod P tokens) in space sp: in DRAM one
 * slot holds them back to back; on SSD they are bytes of the session record. */
static uint64_t plan_tail(const kvp_plan_opts_t *o, uint64_t T, plan_space_t sp)
{
    uint64_t bytes = T % o->page_tokens ? o->layers * plan_page(o, KVP_CODEC_FP16,
                                                                 T % o->page_tokens) : 0;

    return sp == PLAN_DRAM && bytes != 0 ? kvp_store_page_dram_bytes(bytes) : bytes;
}

/* The sealed pages of one session of T tokens, all layers, in space sp: sink and codec pages. */
static uint64_t plan_sealed(const kvp_plan_opts_t *o, kvp_codec_id_t codec, uint64_t T,
                            plan_space_t sp)
{
    uint64_t P = o->page_tokens, full = T / P, sink = o->sink_tokens / P;

    sink = sink < full ? sink : full;
    return o->layers * (sink * plan_in(sp, plan_page(o, KVP_CODEC_FP16, P)) +
                        (full - sink) * plan_in(sp, plan_page(o, codec, P)));
}

/* What a session of T tokens holds of its own (no prefix shares it), in space sp: its tail pages
 * and its record (not in DRAM: the pool holds pages only, and the DRAM budget counts the pool;
 * on SSD in the versioned envelope a node writes). */
static uint64_t plan_own(const kvp_plan_opts_t *o, uint64_t T, plan_space_t sp)
{
    uint64_t rec = plan_record(T / o->page_tokens);

    return plan_tail(o, T, sp) + (sp == PLAN_DRAM ? 0
                                  : sp == PLAN_SSD ? kvp_store_record_ssd_bytes(rec)
                                                   : rec);
}

/* One session in space sp. */
static uint64_t plan_session(const kvp_plan_opts_t *o, kvp_codec_id_t codec, uint64_t T,
                             plan_space_t sp)
{
    return plan_sealed(o, codec, T, sp) + plan_own(o, T, sp);
}

/* ---- trace ---- */

static int chunk_cmp(const void *a, const void *b)
{
    const kvp_plan_chunk_t *x = a, *y = b;

    if (x->id != y->id) {
        return x->id < y->id ? -1 : 1;
    }
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static void plan_trace_free(kvp_plan_trace_t *t)
{
    kvp_free(t->chunks);
    kvp_free(t->own_dram);
    kvp_free(t->own_ssd);
    kvp_lt_workload_free(&t->w);
}

static int plan_trace(const kvp_plan_opts_t *o, kvp_plan_trace_t *t)
{
    uint64_t          per_block = KVP_LT_BLOCK_TOKENS / o->page_tokens, n = 0;
    kvp_plan_chunk_t *c;

    memset(t, 0, sizeof(*t));
    if (kvp_lt_trace_load("plan", o->trace, 0, 1, &t->w) != 0) {
        return 1; /* the loader named the file (and line) and what is wrong */
    }
    for (uint32_t i = 0; i < t->w.n; i++) {
        t->tokens_sum += t->w.reqs[i].input_len;
        t->tokens_max = t->tokens_max > t->w.reqs[i].input_len ? t->tokens_max
                                                                 : t->w.reqs[i].input_len;
        t->chunks_total += t->w.reqs[i].input_len / o->page_tokens;
    }
    c           = kvp_calloc(t->chunks_total + 1, sizeof(*c), "plan chunks");
    t->own_dram = kvp_calloc(t->w.n, sizeof(*t->own_dram), "plan requests");
    t->own_ssd  = kvp_calloc(t->w.n, sizeof(*t->own_ssd), "plan requests");
    t->chunks   = c;
    if (c == NULL || t->own_dram == NULL || t->own_ssd == NULL) {
        fprintf(stderr, "kvpack plan: out of memory for the trace's chunks\n");
        plan_trace_free(t);
        return 1;
    }
    for (uint32_t i = 0; i < t->w.n; i++) {
        const kvp_lt_req_t *r = &t->w.reqs[i];
        uint64_t            prefix = 0; /* the hash of r's block ids up to chunk j's block */

        for (uint32_t j = 0; j < r->input_len / o->page_tokens; j++) {
            if (j % per_block == 0) { /* a chunk's key chains over every token before it, so
                                       * its block's id alone is not its identity */
                prefix = kvp_lt_prefix_next(prefix, (uint32_t)(j / per_block),
                                            r->ids[j / per_block]);
            }
            c[n].id  = prefix;
            c[n].pos = j;
            c[n].req = i;
            n++;
        }
        t->own_dram[i] = plan_own(o, r->input_len, PLAN_DRAM);
        t->own_ssd[i]  = plan_own(o, r->input_len, PLAN_SSD);
    }
    qsort(c, n, sizeof(*c), chunk_cmp);
    for (uint64_t k = 0; k < n; k++) {
        if (k == 0 || chunk_cmp(&c[k], &c[k - 1]) != 0) {
            t->chunks_unique++;
            t->chunks_unique_sink += c[k].pos < o->sink_tokens / o->page_tokens;
        }
    }
    return 0;
}

/* The trace's bytes in space sp after chunk sharing: every request's own record and tail, and
 * each unique full chunk once. */
static uint64_t plan_trace_unique(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t,
                                  kvp_codec_id_t codec, plan_space_t sp)
{
    uint64_t P = o->page_tokens, own = 0;

    for (uint32_t i = 0; i < t->w.n; i++) {
        own += plan_own(o, t->w.reqs[i].input_len, sp);
    }
    return own + o->layers * (t->chunks_unique_sink * plan_in(sp, plan_page(o, KVP_CODEC_FP16, P)) +
                              (t->chunks_unique - t->chunks_unique_sink) *
                                  plan_in(sp, plan_page(o, codec, P)));
}

/* Every request's own bytes (a session each) and the bytes after chunk sharing. */
static void plan_trace_bytes(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, kvp_plan_row_t *r)
{
    r->trace_bytes = 0;
    for (uint32_t i = 0; i < t->w.n; i++) {
        r->trace_bytes += plan_session(o, r->codec, t->w.reqs[i].input_len, PLAN_BYTES);
    }
    r->trace_unique      = plan_trace_unique(o, t, r->codec, PLAN_BYTES);
    r->trace_unique_dram = plan_trace_unique(o, t, r->codec, PLAN_DRAM);
    r->trace_unique_ssd  = plan_trace_unique(o, t, r->codec, PLAN_SSD);
}

/* ---- arithmetic ---- */

static uint64_t div_up(uint64_t a, uint64_t b)
{
    return b == 0 ? UINT64_MAX : a / b + (a % b != 0);
}

/* Nodes for `need` units when one node holds `per` of them (KVP_PLAN_NO_FIT: never fits). */
static uint64_t plan_nodes(uint64_t need, uint64_t per, uint64_t dram_per)
{
    return dram_per == 0 ? KVP_PLAN_NO_FIT : div_up(need, per);
}

/* ---- placement ----
 * Sessions are placed as the cluster places them with one replica (kvpack/placement.h): session
 * s, named "lt-<s>" as loadtest names its sessions (a trace's request index; or the s-th of the
 * live sessions), goes to the node of the highest kvp_placement_score, ties to the lower index:
 * kvp_placement_rank's first. The nodes are node0..node<N-1> and the namespace is
 * kvp_ns_fingerprint(--model or "custom", the geometry, the codec); a cluster's own addresses and
 * namespace place the sessions otherwise, which moves the figure by a few nodes (fp16 for 10,000
 * 8K-token Llama sessions: 54 to 60 over six other address sets, 56 here). Each node
 * holds its sessions' own bytes and, with a trace, each full chunk its sessions name once. */

typedef struct {
    const kvp_plan_opts_t  *o;
    const kvp_plan_trace_t *t;    /* NULL: live sessions of one size */
    const kvp_plan_row_t   *r;
    uint64_t                ns, n_sess;
    char                  (*sid)[24]; /* session s's id */
    uint64_t               *best; /* session s's highest score over the nodes so far */
    uint8_t                *node; /* the node that gave it: the first of s's rank */
} plan_place_t;

/* Node k joins nodes 0..k-1: it takes the sessions it scores highest (a tie stays with the lower
 * index, as kvp_placement_rank orders them). */
static void plan_add_node(plan_place_t *pl, uint32_t k)
{
    char name[16];

    snprintf(name, sizeof(name), "node%u", k);
    for (uint64_t s = 0; s < pl->n_sess; s++) {
        uint64_t score = kvp_placement_score(name, pl->ns, pl->sid[s]);

        if (k == 0 || score > pl->best[s]) {
            pl->best[s] = score;
            pl->node[s] = (uint8_t)k;
        }
    }
}

/* The fullest node's bytes in DRAM and on SSD with the sessions placed over n nodes. */
static void plan_fullest(const plan_place_t *pl, uint32_t n, uint64_t *dram_p, uint64_t *ssd_p)
{
    const kvp_plan_opts_t  *o = pl->o;
    const kvp_plan_trace_t *t = pl->t;
    uint64_t dram[KVP_PLAN_MAX_NODES] = {0}, ssd[KVP_PLAN_MAX_NODES] = {0};
    uint64_t seen[KVP_PLAN_MAX_NODES] = {0}, g = 0, P = o->page_tokens;
    uint64_t fp16 = plan_page(o, KVP_CODEC_FP16, P), page = plan_page(o, pl->r->codec, P);
    uint64_t in_dram[2] = {o->layers * plan_in(PLAN_DRAM, page),
                           o->layers * plan_in(PLAN_DRAM, fp16)}; /* [1]: a sink page */
    uint64_t on_ssd[2]  = {o->layers * plan_in(PLAN_SSD, page), o->layers * plan_in(PLAN_SSD, fp16)};

    for (uint64_t s = 0; s < pl->n_sess; s++) { /* each session's own bytes (live: all of it) */
        dram[pl->node[s]] += t != NULL ? t->own_dram[s] : pl->r->dram_bytes;
        ssd[pl->node[s]] += t != NULL ? t->own_ssd[s] : pl->r->ssd_bytes;
    }
    for (uint64_t c = 0; t != NULL && c < t->chunks_total; c++) { /* a chunk once a node */
        const kvp_plan_chunk_t *x = &t->chunks[c];
        uint8_t                 k = pl->node[x->req];
        int                     sink = x->pos < o->sink_tokens / P; /* an fp16 sink page */

        g += c == 0 || chunk_cmp(x, x - 1) != 0;
        if (seen[k] != g) {
            seen[k] = g;
            dram[k] += in_dram[sink];
            ssd[k] += on_ssd[sink];
        }
    }
    *dram_p = *ssd_p = 0;
    for (uint32_t k = 0; k < n; k++) {
        *dram_p = dram[k] > *dram_p ? dram[k] : *dram_p;
        *ssd_p  = ssd[k] > *ssd_p ? ssd[k] : *ssd_p;
    }
}

/* r's nodes_dram and nodes_spill from its lower bounds up: the fewest nodes from which every
 * larger count (up to KVP_PLAN_MAX_NODES) has its fullest node hold its share in DRAM, and in
 * DRAM or on SSD (KVP_PLAN_OVER when KVP_PLAN_MAX_NODES does not, KVP_PLAN_UNPLACED for more
 * sessions than KVP_PLAN_MAX_PLACED). */
static void plan_place(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live,
                       uint64_t dram, uint64_t ssd, kvp_plan_row_t *r)
{
    plan_place_t pl = {o, t, r, 0, t != NULL ? t->w.n : live, NULL, NULL, NULL};
    bool         want_d, want_s;
    uint32_t     fail_d, fail_s;

    r->nodes_dram  = r->nodes_dram_lb == KVP_PLAN_NO_FIT ? KVP_PLAN_NO_FIT : KVP_PLAN_OVER;
    r->nodes_spill = r->nodes_spill_lb == KVP_PLAN_NO_FIT ? KVP_PLAN_NO_FIT : KVP_PLAN_OVER;
    if (r->nodes_spill_lb > KVP_PLAN_MAX_NODES) { /* nodes_dram_lb is no less */
        return;
    }
    if (pl.n_sess > KVP_PLAN_MAX_PLACED) {
        r->nodes_dram  = r->nodes_dram_lb <= KVP_PLAN_MAX_NODES ? KVP_PLAN_UNPLACED : r->nodes_dram;
        r->nodes_spill = KVP_PLAN_UNPLACED;
        return;
    }
    pl.ns   = kvp_ns_fingerprint(o->model != NULL ? o->model : "custom", (uint32_t)o->layers,
                                 (uint32_t)o->heads, (uint32_t)o->head_dim,
                                 (uint32_t)o->page_tokens, r->codec);
    pl.sid  = kvp_malloc(pl.n_sess * sizeof(*pl.sid), "plan placement");
    pl.best = kvp_malloc(pl.n_sess * sizeof(*pl.best), "plan placement");
    pl.node = kvp_malloc(pl.n_sess, "plan placement");
    if (pl.sid == NULL || pl.best == NULL || pl.node == NULL) {
        fprintf(stderr, "kvpack plan: out of memory for the placement: nodes not counted\n");
        r->nodes_dram = r->nodes_spill = KVP_PLAN_UNPLACED;
        pl.n_sess     = 0;
    }
    for (uint64_t s = 0; s < pl.n_sess; s++) {
        snprintf(pl.sid[s], sizeof(pl.sid[s]), "lt-%" PRIu64, s);
    }
    /* nodes join one by one (a session's node among n is the first of its rank); the count is
     * the smallest n from which every count up to KVP_PLAN_MAX_NODES fits (its fullest node
     * holds its share): the first n that fits is not it, since one more node can rank more
     * sessions first on an already full node (45 fitting, 46-50 not, in a review's run) */
    want_d = r->nodes_dram_lb <= KVP_PLAN_MAX_NODES && pl.n_sess > 0;
    want_s = r->nodes_spill == KVP_PLAN_OVER && pl.n_sess > 0;
    fail_d = r->nodes_dram_lb > 0 ? r->nodes_dram_lb - 1 : 0; /* the largest n that does not fit */
    fail_s = r->nodes_spill_lb > 0 ? r->nodes_spill_lb - 1 : 0;
    for (uint32_t n = 1; n <= KVP_PLAN_MAX_NODES && (want_d || want_s); n++) {
        uint64_t fd, fs;

        plan_add_node(&pl, n - 1);
        if (n < r->nodes_spill_lb) { /* below the bound no node count fits */
            continue;
        }
        plan_fullest(&pl, n, &fd, &fs);
        if (n >= r->nodes_dram_lb && fd > dram) {
            fail_d = n;
        }
        if (fs > ssd && fd > dram) { /* sessions on SSD with DRAM their cache, or all in DRAM */
            fail_s = n;
        }
    }
    if (want_d && fail_d < KVP_PLAN_MAX_NODES) {
        r->nodes_dram = fail_d + 1;
    }
    if (want_s && fail_s < KVP_PLAN_MAX_NODES) {
        r->nodes_spill = fail_s + 1;
    }
    kvp_free(pl.sid);
    kvp_free(pl.best);
    kvp_free(pl.node);
}

static void plan_row(const kvp_plan_opts_t *o, const kvp_plan_trace_t *t, uint64_t live, kvp_plan_row_t *r)
{
    uint64_t T    = o->tokens;
    double   dram = floor(o->dram_gb * PLAN_GB * o->fill);
    /* a segment file is compacted once compact_ratio of it is dead: live pages are guaranteed
     * only 1 - compact_ratio of the SSD */
    double   ssd  = floor(o->ssd_gb * PLAN_GB * o->fill * (1.0 - o->compact_ratio));

    r->full_page     = plan_page(o, r->codec, o->page_tokens);
    r->page_bytes    = plan_sealed(o, r->codec, T, PLAN_BYTES) + plan_tail(o, T, PLAN_BYTES);
    r->record_bytes  = plan_record(T / o->page_tokens);
    r->session_bytes = r->page_bytes + r->record_bytes;
    r->dram_bytes    = plan_session(o, r->codec, T, PLAN_DRAM);
    r->ssd_bytes     = plan_session(o, r->codec, T, PLAN_SSD);
    r->fp16_raw      = 4 * o->layers * T * o->heads * o->head_dim;
    r->per_node_dram = (uint64_t)floor(dram / (double)r->dram_bytes);
    r->per_node_ssd  = (uint64_t)floor(ssd / (double)r->ssd_bytes);
    r->ship_s        = (double)r->session_bytes * 8.0 / (o->link_gbps * 1e9);
    if (t != NULL) {
        /* the longest request must fit one node's DRAM, where sessions are served from */
        bool fits = plan_session(o, r->codec, t->tokens_max, PLAN_DRAM) <= (uint64_t)dram;

        plan_trace_bytes(o, t, r);
        /* with SSD spill the workload lives on SSD and DRAM caches it: a session read back
         * keeps its disk copy, and under write-through every put has one (it used to add the
         * two, promising more than fits) */
        uint64_t on_ssd = div_up(r->trace_unique_ssd, (uint64_t)ssd);

        r->nodes_dram_lb  = fits ? div_up(r->trace_unique_dram, (uint64_t)dram) : KVP_PLAN_NO_FIT;
        r->nodes_spill_lb = fits ? (on_ssd < r->nodes_dram_lb ? on_ssd : r->nodes_dram_lb)
                                 : KVP_PLAN_NO_FIT;
    } else {
        uint64_t per = r->per_node_ssd > r->per_node_dram ? r->per_node_ssd : r->per_node_dram;

        r->nodes_dram_lb  = plan_nodes(live, r->per_node_dram, r->per_node_dram);
        r->nodes_spill_lb = plan_nodes(live, per, r->per_node_dram);
    }
    r->nodes_dram  = r->nodes_dram_lb; /* no workload: 0, not shown */
    r->nodes_spill = r->nodes_spill_lb;
    if (t != NULL || live != 0) {
        plan_place(o, t, live, (uint64_t)dram, (uint64_t)ssd, r);
    }
}

int kvp_cmd_plan(int argc, char **argv)
{
    kvp_plan_opts_t  o;
    kvp_plan_trace_t trace;
    kvp_plan_row_t   rows[KVP_CODEC_MAX], fp16 = {0};
    uint64_t     live;
    int          rc;

    if (kvp_opt_help(argc, argv)) {
        kvp_plan_usage(stdout);
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
        if ((long double)trace.tokens_sum * o.layers * o.heads * o.head_dim * 4.0L > 9.0e18L) {
            plan_trace_free(&trace);
            return kvp_cli_usage_error("plan", "the trace's %llu tokens at this geometry are past "
                                       "9e18 bytes of fp16 KV: more than the plan counts",
                                       (unsigned long long)trace.tokens_sum);
        }
        o.tokens = o.tokens ? o.tokens : trace.tokens_sum / trace.w.n;
        o.tokens = o.tokens ? o.tokens : 1;
    }
    if (o.sessions != 0) {
        live = o.sessions;
    } else { /* 0.07 x 100 is 7.000000000000001: not 8 sessions */
        double x = o.rate * o.ttl, r = nearbyint(x);

        live = (uint64_t)(fabs(x - r) <= 1e-9 * x ? r : ceil(x));
    }
    fp16.codec = KVP_CODEC_FP16;
    plan_row(&o, o.trace != NULL ? &trace : NULL, live, &fp16);
    for (int i = 0; i < o.n_codecs; i++) {
        rows[i].codec = o.codecs[i];
        plan_row(&o, o.trace != NULL ? &trace : NULL, live, &rows[i]);
    }
    if (o.json) {
        kvp_plan_report_json(&o, o.trace != NULL ? &trace : NULL, live, rows, &fp16);
    } else {
        kvp_plan_report_text(&o, o.trace != NULL ? &trace : NULL, live, rows, &fp16);
    }
    if (o.trace != NULL) {
        plan_trace_free(&trace);
    }
    return 0;
}
