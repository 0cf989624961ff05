/* cmd_model.c - `kvpack model`: run a real Llama-family model (llama2.c .bin or GGUF) with every
 * layer's KV going through kvpack pages, and report what the codecs cost in model quality:
 * teacher-forced perplexity, KL and top-1 agreement against the fp16 reference, bits/element and
 * speed (--text or --sample), greedy text (--generate), the fp32 KV as .kvd (--dump-kv), and the
 * prefill -> node -> decode round trip through a kvpackd (--node, model_node.c). Each lane is a
 * codec plus its cache regions (NAME@SPEC; default: the codec's reference regions).
 * Main flow: kvp_cmd_model -> parse -> kvp_model_load -> cmd_ppl | cmd_generate | node mode. */
#include "cli.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"
#include "model/model_node.h"
#include "model/run.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char    *model, *tokenizer, *codec, *ref, *text, *prompt, *dump, *node, *session;
    const char    *dump_file; /* where dump is written (kvp_cli_out_claim_stdout) */
    const char    *regions;       /* default region spec for lanes without @SPEC */
    const char    *attn;          /* --attn decode|fused */
    int            fused;
    uint64_t       tokens, offset, page_tokens, steps, sample, seed;
    double         temp;
    int            json, keep_session;
    kvp_codec_id_t lanes[KVP_RUN_MAX_LANES];
    char           spec[KVP_RUN_MAX_LANES][24]; /* region spec per lane ("" = reference lane) */
    uint32_t       n_lanes;
    const char    *argv0;
} opts_t;

static void usage(FILE *out)
{
    fprintf(out,
        "usage: kvpack model --model FILE [--tokenizer FILE] [--codec LIST|all] [options]\n"
        "  --model FILE        llama2.c .bin or GGUF v3 (F32/F16/Q4_0/Q4_1/Q8_0/Q6_K tensors)\n"
        "  --tokenizer FILE    llama2.c tokenizer.bin (GGUF carries its own)\n"
        "  --codec LIST        comma-separated codecs (fp16 kivi kivi128 oscar kvarn naive2 fp32)\n"
        "                      and/or 'all' (every codec the geometry allows); default all.\n"
        "                      NAME@SPEC gives that lane its own cache regions\n"
        "  --regions SPEC      cache regions of lanes without @SPEC (default ref):\n"
        "                      ref = each codec's reference (kivi: K flushed per 128, V last 128\n"
        "                      fp16; oscar: residual evicted at 256; kvarn: first 128 tokens sink),\n"
        "                      bare = only the open tail of < P tokens is fp16, a codec name = that\n"
        "                      codec's reference regions, or any of sN (first N pages fp16), rR\n"
        "                      (last R tokens fp16), eE (seal in batches of E tokens), vR (V of the\n"
        "                      last R tokens fp16), e.g. s1r128\n"
        "  --ref fp16|fp32     reference lane for KL/top-1 (default fp16)\n"
        "  --page-tokens P     tokens per page (default 128)\n"
        "  --attn decode|fused attention over the decoded rows (default) or straight over the\n"
        "                      sealed pages plus the open rows as an fp16 tail (kvp_attn_compute);\n"
        "                      fused reads every codec but naive2 (--codec all leaves it out), on\n"
        "                      lanes without a V window (kivi's ref regions have one) and with\n"
        "                      residual + eviction batch <= 4096 tokens\n"
        "  --text FILE         teacher-forced perplexity over the text's first --tokens tokens\n"
        "                      (--text, --sample and --generate exclude each other)\n"
        "  --offset BYTES      start reading the text at this byte (default 0)\n"
        "  --sample N          instead of --text: N >= 2 tokens sampled from the model (fp32 KV)\n"
        "  --seed S --temp T   sampling seed (default 42) and temperature (default 1.0,\n"
        "                      at least FLT_MIN = 1.2e-38)\n"
        "  --tokens N          tokens scored, BOS included where the model uses one (default 512)\n"
        "  --generate PROMPT   greedy text per codec ('' = from BOS); --steps N tokens (default 64)\n"
        "  --dump-kv FILE.kvd  with --text or --sample: write the fp32 post-RoPE K/V of every\n"
        "                      layer for the scored tokens\n"
        "  --node HOST:PORT    with --generate: prefill here, put the pages to a kvpackd node, decode\n"
        "                      in a second kvpack process that fetches them (one codec; regions bare\n"
        "                      or an fp16 sink sN, e.g. --codec oscar@s1); the session is\n"
        "                      deleted from the node afterwards unless --keep-session\n"
        "  --json              machine-readable output\n");
}

/* Regions from a spec: ref (the lane codec's own), bare, a codec name, or sN rR eE vR items. */
static int parse_regions(const char *spec, kvp_codec_id_t codec, uint32_t P,
                         kvp_kvc_regions_t *r)
{
    kvp_codec_id_t other;
    const char    *p = spec;

    memset(r, 0, sizeof(*r));
    if (strcmp(spec, "ref") == 0) {
        *r = kvp_kvc_regions_ref(codec, P);
        return 0;
    }
    if (strcmp(spec, "bare") == 0) {
        return 0;
    }
    if (kvp_codec_from_name(spec, &other) == KVP_OK) {
        *r = kvp_kvc_regions_ref(other, P);
        return 0;
    }
    while (*p != '\0') {
        char              kind = *p++;
        char             *end;
        unsigned long     v = strtoul(p, &end, 10);
        uint32_t         *f = kind == 's' ? &r->sink_pages : kind == 'r' ? &r->residual
                            : kind == 'e' ? &r->evict : kind == 'v' ? &r->v_residual : NULL;

        if (f == NULL || end == p || v > (1ul << 20)) {
            kvp_cli_usage_error("model", "bad region spec '%s' (ref, bare, a codec name, or sN rR "
                                "eE vR items such as s1r128)", spec);
            return -1;
        }
        *f = (uint32_t)v;
        p  = end;
    }
    /* kvp_kvc_regions_check's rule, said here as a usage error (the cache checks it again) */
    if (r->evict % P != 0) {
        kvp_cli_usage_error("model", "region spec '%s': e%u is not a multiple of --page-tokens %u",
                            spec, r->evict, P);
        return -1;
    }
    return 0;
}

/* Add a lane unless that codec with that region spec already has one. */
static int add_lane(opts_t *o, kvp_codec_id_t c, const char *spec)
{
    if (c == KVP_KVC_FP32 || c == KVP_CODEC_FP16) {
        spec = ""; /* nothing is quantized: one lane whatever the regions */
    }
    for (uint32_t l = 0; l < o->n_lanes; l++) {
        if (o->lanes[l] == c && strcmp(o->spec[l], spec) == 0) {
            return 0;
        }
    }
    if (o->n_lanes == KVP_RUN_MAX_LANES) {
        kvp_cli_usage_error("model", "--codec names more codecs than the %u lanes of a run "
                            "(the --ref lane is one of them)", (unsigned)KVP_RUN_MAX_LANES);
        return -1;
    }
    if (strlen(spec) >= sizeof(o->spec[0])) {
        kvp_cli_usage_error("model", "region spec '%s' is longer than %zu characters", spec,
                            sizeof(o->spec[0]) - 1);
        return -1;
    }
    snprintf(o->spec[o->n_lanes], sizeof(o->spec[0]), "%s", spec);
    o->lanes[o->n_lanes++] = c;
    return 0;
}

/* --node: the lane's regions may only be bare or an fp16 sink (sN); "ref" (the default) means
 * bare there, since a stored session carries one tail page per layer. */
static int node_regions(const opts_t *o, uint32_t *sink_pages_p)
{
    const char       *spec = o->spec[o->n_lanes - 1];
    kvp_kvc_regions_t r;

    *sink_pages_p = 0;
    if (strcmp(spec, "ref") == 0 || spec[0] == '\0') {
        return 0;
    }
    if (parse_regions(spec, o->lanes[o->n_lanes - 1], (uint32_t)o->page_tokens, &r) != 0) {
        return 2;
    }
    if (r.residual || r.v_residual || (r.evict && r.evict != o->page_tokens)) {
        return kvp_cli_usage_error("model", "--node takes bare regions or a sink only (e.g. s1), "
                                   "not '%s'", spec);
    }
    *sink_pages_p = r.sink_pages;
    return 0;
}

/* --attn fused: every lane's attention through kvp_attn_compute (lanes keep their pages;
 * check_fused refused what it cannot read before any work). */
static kvp_status_t apply_attn(const opts_t *o, kvp_run_t *run)
{
    return kvp_fwd_set_attn_fused(run->fwd, o->fused);
}

/* A lane's display name: the codec, with @SPEC unless it runs the codec's reference regions. */
static void lane_label(const opts_t *o, uint32_t l, char *buf, size_t cap)
{
    const char *name = o->lanes[l] == KVP_KVC_FP32 ? "fp32" : kvp_codec_name(o->lanes[l]);

    if (o->spec[l][0] == '\0' || strcmp(o->spec[l], "ref") == 0) {
        snprintf(buf, cap, "%s", name);
    } else {
        snprintf(buf, cap, "%s@%s", name, o->spec[l]);
    }
}

/* --attn fused: refuse, before the model runs, a lane it cannot run (they used to fail at the
 * first step that needed them, after all the work before it): a codec kvp_attn_compute does not
 * read (naive2), a V window (its sealed V is read in fp16, which the pages do not hold), or open
 * rows that outgrow the one fp16 tail page they go in as (residual + eviction batch > 4096). */
static int check_fused(const opts_t *o)
{
    for (uint32_t l = 0; l < o->n_lanes; l++) {
        kvp_kvc_regions_t r;
        uint32_t          P = (uint32_t)o->page_tokens, open;
        char              label[48];

        if (o->lanes[l] == KVP_KVC_FP32) {
            continue; /* no pages: attends over its rows as with --attn decode */
        }
        lane_label(o, l, label, sizeof(label));
        if (!kvp_fwd_fused_codec_ok(o->lanes[l])) {
            return kvp_cli_usage_error("model", "--attn fused: lane %s has no fused attention "
                                       "(kvp_attn_compute does not read %s pages); drop it or use "
                                       "--attn decode", label, kvp_codec_name(o->lanes[l]));
        }
        memset(&r, 0, sizeof(r));
        if (o->lanes[l] != KVP_CODEC_FP16 && o->spec[l][0] != '\0' &&
            parse_regions(o->spec[l], o->lanes[l], P, &r) != 0) {
            return 2;
        }
        if (r.v_residual != 0) {
            return kvp_cli_usage_error("model", "--attn fused: lane %s keeps a V window (regions "
                                       "vR); use NAME@bare or a spec without vR", label);
        }
        open = kvp_kvc_open_max(&r, P);
        if (open > KVP_PAGE_MAX_TOKENS) {
            return kvp_cli_usage_error("model", "--attn fused: lane %s holds up to %u open rows "
                                       "(residual %u + eviction batch %u), more than the fp16 tail "
                                       "page they are read from takes (%u)", label, open,
                                       r.residual, r.evict ? r.evict : P, KVP_PAGE_MAX_TOKENS);
        }
    }
    return 0;
}

static kvp_status_t apply_regions(const opts_t *o, kvp_run_t *run)
{
    for (uint32_t l = 1; l < o->n_lanes; l++) {
        kvp_kvc_regions_t r;
        char              label[48];
        kvp_status_t      status;

        if (o->lanes[l] == KVP_KVC_FP32 || o->lanes[l] == KVP_CODEC_FP16) {
            continue; /* nothing is quantized: regions change nothing */
        }
        if (parse_regions(o->spec[l], o->lanes[l], (uint32_t)o->page_tokens, &r) != 0) {
            return KVP_ERR_INVALID;
        }
        snprintf(label, sizeof(label), "%s@%s", kvp_codec_name(o->lanes[l]), o->spec[l]);
        status = kvp_run_set_regions(run, l, &r, strcmp(o->spec[l], "ref") ? label : NULL);
        if (status != KVP_OK) {
            return status;
        }
    }
    return KVP_OK;
}

/* --ref: lane 0, checked before the model loads (a typo costs no load) */
static int parse_ref(opts_t *o)
{
    if (strcmp(o->ref, "fp32") == 0) {
        o->lanes[0] = KVP_KVC_FP32;
    } else if (strcmp(o->ref, "fp16") == 0) {
        o->lanes[0] = KVP_CODEC_FP16;
    } else {
        return kvp_cli_usage_error("model", "--ref wants fp16 or fp32, got '%s'", o->ref);
    }
    return 0;
}

/* A run longer than the model's trained context (seq_len) is run, with a warning: positions past
 * it measure extrapolation, and a 2-bit lane's ppl can then come out below the reference's. */
static void context_warn(const kvp_model_t *m, uint64_t tokens)
{
    if (m->cfg.seq_len != 0 && tokens > m->cfg.seq_len) {
        fprintf(stderr, "kvpack model: warning: %llu tokens run past %s's trained context of %u; "
                        "figures past position %u measure extrapolation\n",
                (unsigned long long)tokens, m->name, m->cfg.seq_len, m->cfg.seq_len);
    }
}

/* The lanes after parse_ref's: --codec's list (its geometry checks need the model's) */
static int parse_codecs(opts_t *o, const kvp_model_t *m)
{
    char buf[1024], *save = NULL, *tok;

    o->spec[0][0] = '\0';
    o->n_lanes    = 1;
    if (strlen(o->codec) >= sizeof(buf)) { /* it was cut at 255, inside a lane's regions */
        return kvp_cli_usage_error("model", "--codec list of %zu characters (at most %zu)",
                                   strlen(o->codec), sizeof(buf) - 1);
    }
    snprintf(buf, sizeof(buf), "%s", o->codec);
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        kvp_codec_id_t    c;
        kvp_kvc_regions_t r;
        char             *at   = strchr(tok, '@');
        const char       *spec = o->regions;

        if (at != NULL) {
            *at  = '\0';
            spec = at + 1;
        }
        if (parse_regions(spec, KVP_CODEC_FP16, (uint32_t)o->page_tokens, &r) != 0) {
            return 2;
        }
        if (strcmp(tok, "all") == 0) {
            for (int a = 1; a < KVP_CODEC_MAX; a++) {
                kvp_page_params_t pp = {.codec = (kvp_codec_id_t)a, .heads = m->cfg.kv_heads,
                                        .head_dim = m->cfg.head_dim,
                                        .page_tokens = (uint32_t)o->page_tokens};

                if (kvp_codec_check(&pp) != KVP_OK) {
                    continue;
                }
                /* 'all' means every codec this run can take: under --attn fused, not the ones
                 * without fused attention (named, so the table's gap is explained) */
                if (o->fused && !kvp_fwd_fused_codec_ok((kvp_codec_id_t)a)) {
                    fprintf(stderr, "kvpack model: --codec all with --attn fused leaves out %s "
                            "(no fused attention)\n", kvp_codec_name((kvp_codec_id_t)a));
                    continue;
                }
                if (add_lane(o, (kvp_codec_id_t)a, spec) != 0) {
                    return 2;
                }
            }
            continue;
        }
        if (strcmp(tok, "fp32") == 0) {
            c = KVP_KVC_FP32;
        } else if (!kvp_cli_codec("model", tok, "fp32|all", &c)) {
            return 2;
        }
        if (add_lane(o, c, spec) != 0) {
            return 2;
        }
    }
    return 0;
}

/* What the matmul reads: the GGUF blocks (dequantized a row at a time) or the fp32 copies. */
static const char *weights_kind(const kvp_model_t *m)
{
    return kvp_mm_quant_enabled() && m->layer[0].qwq.data != NULL ? "gguf-blocks" : "fp32";
}

static void print_table(const opts_t *o, const kvp_model_t *m, const kvp_run_t *run, uint32_t n,
                        const char *src)
{
    const kvp_lane_stat_t *ref = &run->stat[0];

    if (o->json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "model", m->name);
        kvp_json_str(&j, "format", m->format);
        kvp_json_int(&j, "layers", m->cfg.layers);
        kvp_json_int(&j, "kv_heads", m->cfg.kv_heads);
        kvp_json_int(&j, "head_dim", m->cfg.head_dim);
        kvp_json_str(&j, "text", src);
        kvp_json_int(&j, "tokens", n);
        kvp_json_int(&j, "page_tokens", (int64_t)o->page_tokens);
        kvp_json_str(&j, "reference", ref->name);
        kvp_json_num(&j, "ppl_ref", ref->ppl);
        if (strcmp(ref->name, "fp16") == 0) { /* the older name, true only for an fp16 ref */
            kvp_json_num(&j, "ppl_fp16", ref->ppl);
        }
        kvp_json_str(&j, "matmul", kvp_mm_impl());
        kvp_json_str(&j, "attn", o->attn);
        kvp_json_str(&j, "weights", weights_kind(m));
        kvp_json_num(&j, "wall_s", run->wall_s);
        kvp_json_arr(&j, "codecs");
        for (uint32_t l = 0; l < run->lanes; l++) {
            const kvp_lane_stat_t *s = &run->stat[l];

            kvp_json_obj(&j, NULL);
            kvp_json_str(&j, "codec", s->name);
            kvp_json_num(&j, "ppl", s->ppl);
            kvp_json_num(&j, "ppl_ref", ref->ppl);
            if (strcmp(ref->name, "fp16") == 0) {
                kvp_json_num(&j, "ppl_fp16", ref->ppl);
            }
            kvp_json_num(&j, "kl_mean", s->kl_mean);
            kvp_json_num(&j, "top1_agree", s->top1_agree);
            kvp_json_num(&j, "bits_per_elem", s->bits_per_elem);
            kvp_json_num(&j, "bits_page", s->bits_page);
            kvp_json_num(&j, "bits_page_payload", s->bits_payload);
            kvp_json_obj(&j, "regions");
            kvp_json_int(&j, "sink_pages", s->regions.sink_pages);
            kvp_json_int(&j, "residual", s->regions.residual);
            kvp_json_int(&j, "evict", s->regions.evict ? s->regions.evict
                                                        : (int64_t)o->page_tokens);
            kvp_json_int(&j, "v_residual", s->regions.v_residual);
            kvp_json_close(&j);
            kvp_json_num(&j, "tokens_per_s", s->tokens_per_s);
            kvp_json_num(&j, "codec_s", s->codec_s);
            kvp_json_close(&j);
        }
        kvp_json_close(&j);
        kvp_json_end(&j);
        return;
    }
    printf("model %s (%s, %u layers, %u kv heads x %u, vocab %u), %u tokens of %s, P=%llu, "
           "matmul %s on %s weights, %.1f s\n", m->name, m->format, m->cfg.layers,
           m->cfg.kv_heads, m->cfg.head_dim, m->cfg.vocab, n, src,
           (unsigned long long)o->page_tokens, kvp_mm_impl(), weights_kind(m), run->wall_s);
    printf("%-16s %10s %10s %9s %7s %10s %10s %-18s %9s\n", "codec", "ppl", "ppl_ref",
           "kl_mean", "top1", "bits/elem", "bits_page", "regions", "tok/s");
    for (uint32_t l = 0; l < run->lanes; l++) {
        const kvp_lane_stat_t *s = &run->stat[l];
        char                   reg[64];

        snprintf(reg, sizeof(reg), "s%u r%u e%u v%u", s->regions.sink_pages,
                 s->regions.residual,
                 s->regions.evict ? s->regions.evict : (uint32_t)o->page_tokens,
                 s->regions.v_residual);
        printf("%-16s %10.3f %10.3f %9.4f %7.3f %10.3f %10.3f %-18s %9.1f\n", s->name, s->ppl,
               ref->ppl, s->kl_mean, s->top1_agree, s->bits_per_elem, s->bits_page, reg,
               s->tokens_per_s);
    }
}

static void ppl_progress(uint64_t done, uint64_t total)
{
    kvp_progress("tokens", done, total);
}

static int cmd_ppl(const opts_t *o, const kvp_model_t *m)
{
    uint32_t    *ids = NULL, n = 0;
    kvp_run_t   *run = NULL;
    kvp_status_t status;
    char         src[160];

    if (o->sample) {
        status = kvp_run_sample(m, (uint32_t)o->sample, o->seed, (float)o->temp, &ids);
        n      = (uint32_t)o->sample;
        snprintf(src, sizeof(src), "self-sampled text (seed %llu, temp %.2f)",
                 (unsigned long long)o->seed, o->temp);
    } else {
        const char *b = strrchr(o->text, '/');

        status = kvp_run_text_tokens(m, o->text, o->offset, (uint32_t)o->tokens, &ids, &n);
        snprintf(src, sizeof(src), "%s", b ? b + 1 : o->text);
    }
    if (status != KVP_OK) {
        goto out;
    }
    if (n < 2) {
        fprintf(stderr, "kvpack model: the text gives fewer than 2 tokens\n");
        status = KVP_ERR_INVALID;
        goto out;
    }
    if (o->dump != NULL) {
        status = kvp_run_dump_kvd(m, ids, n, o->dump_file);
        if (status != KVP_OK) {
            goto out;
        }
        fprintf(stderr, "kvpack model: wrote %u tokens of fp32 KV to %s\n", n, o->dump);
    }
    context_warn(m, n);
    status = kvp_run_create(m, o->lanes, o->n_lanes, (uint32_t)o->page_tokens, n, o->fused,
                            &run);
    if (status == KVP_OK) {
        status = apply_regions(o, run);
    }
    if (status == KVP_OK) {
        status = apply_attn(o, run);
    }
    if (status == KVP_OK) {
        run->progress = ppl_progress;
        status        = kvp_run_ppl(run, ids, n);
        kvp_progress_done();
    }
    if (status == KVP_OK) {
        kvp_run_finish(run);
        print_table(o, m, run, n, src);
    }
out:
    kvp_run_destroy(run);
    kvp_free(ids);
    if (status != KVP_OK) {
        fprintf(stderr, "kvpack model: %s\n", kvp_status_str(status));
        return 1;
    }
    return 0;
}

static int cmd_generate(const opts_t *o, const kvp_model_t *m)
{
    uint32_t    *prompt = NULL, np = 0, *out = NULL, steps = (uint32_t)o->steps;
    kvp_run_t   *run = NULL;
    kvp_status_t status;

    status = kvp_run_prompt(m, o->prompt, &prompt, &np);
    if (status != KVP_OK) {
        goto done;
    }
    out = kvp_malloc((size_t)o->n_lanes * steps * sizeof(*out), "gen out");
    if (out == NULL) {
        status = KVP_ERR_NO_MEMORY;
        goto done;
    }
    context_warn(m, (uint64_t)np + steps);
    status = kvp_run_create(m, o->lanes, o->n_lanes, (uint32_t)o->page_tokens, np + steps,
                            o->fused, &run);
    if (status == KVP_OK) {
        status = apply_regions(o, run);
    }
    if (status == KVP_OK) {
        status = apply_attn(o, run);
    }
    if (status == KVP_OK) {
        status = kvp_run_generate(run, prompt, np, steps, out);
    }
    if (status != KVP_OK) {
        goto done;
    }
    kvp_run_finish(run);
    if (o->json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "model", m->name);
        kvp_json_str(&j, "prompt", o->prompt);
        kvp_json_int(&j, "prompt_tokens", np);
        kvp_json_int(&j, "steps", steps);
        kvp_json_arr(&j, "codecs");
        for (uint32_t l = 0; l < run->lanes; l++) {
            char  *txt = NULL;
            size_t tl  = 0;
            FILE  *ms  = open_memstream(&txt, &tl);
            uint32_t same = 0;

            while (same < steps && out[l * steps + same] == out[same]) {
                same++;
            }
            if (ms != NULL) {
                kvp_run_print(ms, m, prompt[np - 1], out + (size_t)l * steps, steps);
                fclose(ms);
            }
            kvp_json_obj(&j, NULL);
            kvp_json_str(&j, "codec", run->stat[l].name);
            kvp_json_str(&j, "text", txt != NULL ? txt : "");
            kvp_json_int(&j, "tokens_same_as_ref", same);
            kvp_json_num(&j, "tokens_per_s", run->stat[l].tokens_per_s);
            kvp_json_close(&j);
            free(txt);
        }
        kvp_json_close(&j);
        kvp_json_end(&j);
    } else {
        for (uint32_t l = 0; l < run->lanes; l++) {
            printf("[%s] %s", run->stat[l].name, o->prompt);
            kvp_run_print(stdout, m, prompt[np - 1], out + (size_t)l * steps, steps);
            printf("\n");
        }
    }
done:
    kvp_run_destroy(run);
    kvp_free(prompt);
    kvp_free(out);
    if (status != KVP_OK) {
        fprintf(stderr, "kvpack model: %s\n", kvp_status_str(status));
        return 1;
    }
    return 0;
}

int kvp_cmd_model(int argc, char **argv)
{
    opts_t       o = {.codec = "all", .ref = "fp16", .regions = "ref", .attn = "decode", .tokens = 512,
                      .page_tokens = 128,
                      .steps = 64, .seed = 42, .temp = 1.0, .argv0 = argv[0]};
    kvp_model_t *m = NULL;
    kvp_status_t status;
    int          rc;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--model", &o.model) ||
            kvp_opt_str(argc, argv, &i, "--tokenizer", &o.tokenizer) ||
            kvp_opt_str(argc, argv, &i, "--codec", &o.codec) ||
            kvp_opt_str(argc, argv, &i, "--ref", &o.ref) ||
            kvp_opt_str(argc, argv, &i, "--regions", &o.regions) ||
            kvp_opt_str(argc, argv, &i, "--attn", &o.attn) ||
            kvp_opt_str(argc, argv, &i, "--text", &o.text) ||
            kvp_opt_str(argc, argv, &i, "--generate", &o.prompt) ||
            kvp_opt_str(argc, argv, &i, "--dump-kv", &o.dump) ||
            kvp_opt_str(argc, argv, &i, "--node", &o.node) ||
            kvp_opt_str(argc, argv, &i, "--decode-session", &o.session) ||
            kvp_opt_u64(argc, argv, &i, "--tokens", &o.tokens) ||
            kvp_opt_u64(argc, argv, &i, "--offset", &o.offset) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &o.page_tokens) ||
            kvp_opt_u64(argc, argv, &i, "--steps", &o.steps) ||
            kvp_opt_u64(argc, argv, &i, "--sample", &o.sample) ||
            kvp_opt_u64(argc, argv, &i, "--seed", &o.seed) ||
            kvp_opt_f64(argc, argv, &i, "--temp", &o.temp)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            o.json = 1;
            continue;
        }
        if (kvp_opt_flag(argv, i, "--keep-session")) {
            o.keep_session = 1;
            continue;
        }
        return kvp_opt_unknown("model", argv[i]);
    }
    if (o.model == NULL || (o.text == NULL && o.prompt == NULL && o.sample == 0)) {
        return kvp_cli_usage_error("model", "needs --model and one of --text, --sample, "
                                            "--generate");
    }
    /* one mode per run: cmd_ppl and cmd_generate would each silently ignore the others */
    if ((o.text != NULL) + (o.prompt != NULL) + (o.sample != 0) > 1) {
        return kvp_cli_usage_error("model", "--text, --sample and --generate exclude each other: "
                                   "give one");
    }
    /* one node: the prefill side puts to it and the decode side fetches from it, no placement */
    if (o.node != NULL && strchr(o.node, ',') != NULL) {
        return kvp_cli_usage_error("model", "--node takes one HOST:PORT, not the list '%s'",
                                   o.node);
    }
    if (o.node != NULL && kvp_cli_node_list_check("model", o.node) != 0) {
        return 2;
    }
    if (o.session != NULL && o.node == NULL) {
        return kvp_cli_usage_error("model", "--decode-session needs --node HOST:PORT (it is the "
                                   "decode role of a --node round trip)");
    }
    if (o.keep_session && (o.node == NULL || o.session != NULL)) {
        return kvp_cli_usage_error("model", "--keep-session needs --node (the prefill side of "
                                   "the round trip)");
    }
    if (o.node != NULL && o.prompt == NULL) {
        return kvp_cli_usage_error("model", "--node needs --generate PROMPT");
    }
    /* only the scored text's KV is dumped (cmd_ppl); the generate and node paths never wrote it */
    if (o.dump != NULL && o.prompt != NULL) {
        return kvp_cli_usage_error("model", "--dump-kv needs --text or --sample (it dumps the "
                                   "scored tokens' KV), not --generate or --node");
    }
    /* --sample: 0 is "not given"; else BOS and at least one sampled token to score */
    if (!kvp_cli_range("model", "--page-tokens", o.page_tokens, 1, KVP_PAGE_MAX_TOKENS) ||
        !kvp_cli_range("model", "--tokens", o.tokens, 2, 1u << 20) ||
        !kvp_cli_range("model", "--steps", o.steps, 1, 1u << 20) ||
        (o.sample != 0 && !kvp_cli_range("model", "--sample", o.sample, 2, 1u << 20))) {
        return 2;
    }
    /* sampling divides by the temperature as a float: below FLT_MIN it is 0 (or a denormal that
     * overflows the logits) and every pick becomes the last vocabulary id */
    if (!(o.temp >= FLT_MIN && o.temp <= FLT_MAX)) {
        return kvp_cli_usage_error("model", "--temp wants %g..%g, got %g", (double)FLT_MIN,
                                   (double)FLT_MAX, o.temp);
    }
    o.fused = strcmp(o.attn, "fused") == 0;
    if (!o.fused && strcmp(o.attn, "decode") != 0) {
        return kvp_cli_usage_error("model", "--attn wants decode or fused, got '%s'", o.attn);
    }
    if (o.fused && (o.node != NULL || o.session != NULL)) {
        return kvp_cli_usage_error("model", "--attn fused is not available with --node");
    }
    if (o.dump != NULL && kvp_cli_out_path_check("model", "--dump-kv", o.dump, NULL) != 0) {
        return 2;
    }
    if ((o.node != NULL || o.session != NULL) &&
        (strchr(o.codec, ',') != NULL || strcmp(o.codec, "all") == 0)) {
        return kvp_cli_usage_error("model", "--node takes one codec (--codec NAME)");
    }
    if (parse_ref(&o) != 0) {
        return 2;
    }
    if (o.dump != NULL) {
        o.dump_file = kvp_cli_out_claim_stdout(o.dump);
    }
    status = kvp_model_load(o.model, o.tokenizer, &m);
    if (status != KVP_OK) {
        fprintf(stderr, "kvpack model: cannot load %s: %s\n", o.model, kvp_status_str(status));
        return 1;
    }
    rc = parse_codecs(&o, m);
    if (rc == 0 && o.fused) {
        rc = check_fused(&o);
    }
    if (rc == 0) {
        if (o.node != NULL || o.session != NULL) {
            kvp_model_node_params_t np = {
                .model = o.model, .tokenizer = o.tokenizer, .node = o.node,
                .session = o.session, .prompt = o.prompt, .codec = o.lanes[o.n_lanes - 1],
                .page_tokens = (uint32_t)o.page_tokens, .steps = (uint32_t)o.steps,
                .json = o.json, .keep_session = o.keep_session, .self_exe = "/proc/self/exe",
            };

            rc = node_regions(&o, &np.sink_pages);
            if (rc == 0) {
                rc = kvp_model_node_run(m, &np);
            }
        } else if (o.prompt != NULL) {
            rc = cmd_generate(&o, m);
        } else {
            rc = cmd_ppl(&o, m);
        }
    }
    kvp_model_free(m);
    return rc;
}
