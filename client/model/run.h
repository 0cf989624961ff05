/* run.h - what `kvpack model` measures: a set of lanes (lane 0 = the reference, fp16 KV by
 * default; the others one codec each) fed the same tokens in lockstep; teacher-forced perplexity
 * with KL(ref || lane) and top-1 agreement per step, greedy generation, self-sampled text, and the
 * .kvd dump of the reference lane's fp32 post-RoPE KV.
 * Main flow: kvp_run_create -> kvp_run_ppl | kvp_run_generate -> kvp_run_finish -> kvp_run_destroy. */
#ifndef KVPACK_MODEL_RUN_H
#define KVPACK_MODEL_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "kvpack/status.h"

#include "kvcache.h"
#include "model.h"

#define KVP_RUN_MAX_LANES 16

typedef struct {
    kvp_codec_id_t codec;         /* KVP_KVC_FP32 or a kvpack codec */
    const char    *name;          /* "fp32", "fp16", "kivi", ... or label (kvp_run_set_regions) */
    char           label[48];
    kvp_kvc_regions_t regions;    /* which tokens stay fp16 (zero = bare codec) */
    double         nll_sum;       /* -log p(next) summed over predictions */
    double         kl_sum;        /* KL(ref || lane) summed */
    uint64_t       top1_same;     /* argmax equal to the reference's */
    uint64_t       n;             /* predictions */
    /* filled by kvp_run_finish */
    double         ppl, kl_mean, top1_agree;
    double         bits_per_elem;  /* effective: 8 * every byte the cache held (codec pages,
                                    * fp16 sink pages, fp16 rows of the residual/tail, V window
                                    * copies; headers included) / K+V elements held, summed over
                                    * the commits of the run */
    double         bits_page;      /* 8 * codec page bytes (headers included) / their elements */
    double         bits_payload;   /* same without the 64-byte headers */
    double         tokens_per_s;   /* steps / (shared matmul time / lanes + own time) */
    double         codec_s;        /* encode + decode seconds */
} kvp_lane_stat_t;

typedef struct {
    const kvp_model_t *m;
    uint32_t           page_tokens;
    uint32_t           max_tokens;
    uint32_t           lanes;
    uint64_t           steps;
    kvp_lane_stat_t    stat[KVP_RUN_MAX_LANES];
    kvp_kvc_t         *cache[KVP_RUN_MAX_LANES];
    kvp_fwd_t         *fwd;
    float             *logits;    /* [lanes][vocab] */
    float             *lp_ref;    /* reference log-probs */
    double             wall_s;
    void             (*progress)(uint64_t done, uint64_t total); /* optional, per step */
} kvp_run_t;

/* Namespace fingerprint of a model + codec + P (for chunk keys and node sessions). */
uint64_t kvp_run_ns(const kvp_model_t *m, kvp_codec_id_t codec, uint32_t page_tokens);

/* codecs[0] is the reference lane. Fails (one log line) if a codec rejects the geometry. */
kvp_status_t kvp_run_create(const kvp_model_t *m, const kvp_codec_id_t *codecs, uint32_t lanes,
                            uint32_t page_tokens, uint32_t max_tokens, int keep_pages,
                            kvp_run_t **run_p);
void         kvp_run_destroy(kvp_run_t *run); /* NULL is a no-op */
/* Give lane its cache regions (before the first step; the lane's cache is rebuilt) and, when
 * label is not NULL, a display name such as "kivi@oscar". */
kvp_status_t kvp_run_set_regions(kvp_run_t *run, uint32_t lane, const kvp_kvc_regions_t *r,
                                 const char *label);

/* Teacher-forced: feed ids[0..n-1], scoring predictions of ids[1..n-1]. */
kvp_status_t kvp_run_ppl(kvp_run_t *run, const uint32_t *ids, uint32_t n);
/* Feed the same tokens to every lane without scoring (prefill). */
kvp_status_t kvp_run_feed(kvp_run_t *run, const uint32_t *ids, uint32_t n);
/* Feed prompt[0..np) (continuing after what the caches hold), then greedy-decode steps tokens
 * per lane into out[lane*steps + i]. */
kvp_status_t kvp_run_generate(kvp_run_t *run, const uint32_t *prompt, uint32_t np,
                              uint32_t steps, uint32_t *out);
/* Compute ppl, kl_mean, top1_agree, bits and speed from the sums. */
void kvp_run_finish(kvp_run_t *run);

/* Prompt ids: BOS (when the model uses one, or when the prompt is empty) + the prompt's tokens. */
kvp_status_t kvp_run_prompt(const kvp_model_t *m, const char *prompt, uint32_t **ids_p,
                            uint32_t *n_p);
/* The first tokens of a text file from byte offset on (BOS first where the model uses one): at
 * most n, fewer only when the file ends first. Reads a prefix, cut back to a word end
 * (kvp_tok_prefix_cut) unless it reached the end of the file, so the ids are exactly the first
 * ids of the whole text's tokenization; a longer prefix is read while it yields fewer than n.
 * *ids_p is kvp_malloc'ed (it may hold more than *n_p ids). */
kvp_status_t kvp_run_text_tokens(const kvp_model_t *m, const char *path, uint64_t offset,
                                 uint32_t n, uint32_t **ids_p, uint32_t *n_p);
/* Print generated ids as text, stopping at EOS (and at BOS for llama2.c story models). */
void kvp_run_print(FILE *out, const kvp_model_t *m, uint32_t prev, const uint32_t *ids,
                   uint32_t n);

/* Sample n tokens (BOS first) from the model with fp32 KV at temperature temp (xorshift64*
 * generator seeded with seed). *ids_p is kvp_malloc'ed. */
kvp_status_t kvp_run_sample(const kvp_model_t *m, uint32_t n, uint64_t seed, float temp,
                            uint32_t **ids_p);

/* Teacher-forced fp32 run of ids that writes every layer's fp32 post-RoPE K and V to a .kvd file
 * (format in eval/eval.h: "KVD1", version, layers, tokens, kv_heads, head_dim, K[l][t][h][d], V). */
kvp_status_t kvp_run_dump_kvd(const kvp_model_t *m, const uint32_t *ids, uint32_t n,
                              const char *path);

#endif
