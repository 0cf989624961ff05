/* run.c - measurement loops over a kvp_fwd_t: lanes in lockstep, teacher-forced perplexity with
 * KL(ref || lane) and top-1 agreement, greedy generation, self-sampling, and the .kvd dump.
 * Main flow: kvp_run_create -> kvp_run_ppl (step, score_lanes) -> kvp_run_finish. */
#include "run.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/file.h"
#include "kvpack/log.h"
#include "eval/eval.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

uint64_t kvp_run_ns(const kvp_model_t *m, kvp_codec_id_t codec, uint32_t page_tokens)
{
    return kvp_ns_fingerprint(m->id, m->cfg.layers, m->cfg.kv_heads, m->cfg.head_dim,
                              page_tokens, codec);
}

kvp_status_t kvp_run_create(const kvp_model_t *m, const kvp_codec_id_t *codecs, uint32_t lanes,
                            uint32_t page_tokens, uint32_t max_tokens, int keep_pages,
                            kvp_run_t **run_p)
{
    kvp_run_t   *run;
    kvp_status_t status;

    if (lanes == 0 || lanes > KVP_RUN_MAX_LANES) {
        KVP_LOG_ERROR("model", "%u lanes (1..%u)", lanes, KVP_RUN_MAX_LANES);
        return KVP_ERR_INVALID;
    }
    run = kvp_calloc(1, sizeof(*run), "run");
    if (run == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    run->m           = m;
    run->lanes       = lanes;
    run->page_tokens = page_tokens;
    run->max_tokens  = max_tokens;
    run->logits      = kvp_malloc((size_t)lanes * m->cfg.vocab * sizeof(float), "run logits");
    run->lp_ref      = kvp_malloc((size_t)m->cfg.vocab * sizeof(float), "run ref");
    if (run->logits == NULL || run->lp_ref == NULL) {
        status = KVP_ERR_NO_MEMORY;
        goto err;
    }
    for (uint32_t l = 0; l < lanes; l++) {
        kvp_kvc_params_t p = {
            .codec       = codecs[l],
            .layers      = m->cfg.layers,
            .heads       = m->cfg.kv_heads,
            .head_dim    = m->cfg.head_dim,
            .page_tokens = page_tokens,
            .max_tokens  = max_tokens,
            .ns          = kvp_run_ns(m, codecs[l], page_tokens),
            .keep_pages  = keep_pages,
        };

        run->stat[l].codec = codecs[l];
        run->stat[l].name  = codecs[l] == KVP_KVC_FP32 ? "fp32" : kvp_codec_name(codecs[l]);
        status             = kvp_kvc_create(&p, &run->cache[l]);
        if (status != KVP_OK) {
            goto err;
        }
    }
    status = kvp_fwd_create(m, lanes, max_tokens, &run->fwd);
    if (status != KVP_OK) {
        goto err;
    }
    *run_p = run;
    return KVP_OK;
err:
    kvp_run_destroy(run);
    return status;
}

kvp_status_t kvp_run_set_regions(kvp_run_t *run, uint32_t lane, const kvp_kvc_regions_t *r,
                                 const char *label)
{
    kvp_kvc_t       *c;
    kvp_kvc_params_t p;
    kvp_status_t     status;

    if (lane >= run->lanes || run->steps != 0) {
        KVP_LOG_ERROR("model", "regions of lane %u can only be set before the first step", lane);
        return KVP_ERR_INVALID;
    }
    p         = run->cache[lane]->p;
    p.regions = *r;
    status    = kvp_kvc_create(&p, &c);
    if (status != KVP_OK) {
        return status;
    }
    kvp_kvc_destroy(run->cache[lane]);
    run->cache[lane]         = c;
    run->stat[lane].regions  = c->p.regions;
    if (label != NULL) {
        snprintf(run->stat[lane].label, sizeof(run->stat[lane].label), "%s", label);
        run->stat[lane].name = run->stat[lane].label;
    }
    return KVP_OK;
}

void kvp_run_destroy(kvp_run_t *run)
{
    if (run == NULL) {
        return;
    }
    for (uint32_t l = 0; l < run->lanes; l++) {
        kvp_kvc_destroy(run->cache[l]);
    }
    kvp_fwd_destroy(run->fwd);
    kvp_free(run->logits);
    kvp_free(run->lp_ref);
    kvp_free(run);
}

static kvp_status_t run_step(kvp_run_t *run, const uint32_t *tokens)
{
    double       t0     = kvp_time_s();
    kvp_status_t status = kvp_fwd_step(run->fwd, run->cache, tokens, run->logits);

    run->wall_s += kvp_time_s() - t0;
    run->steps++;
    return status;
}

/* log-softmax of logits into lp; returns the argmax. */
static uint32_t log_softmax(const float *logits, float *lp, uint32_t n)
{
    float    mx  = logits[0];
    uint32_t arg = 0;
    double   sum = 0.0;
    float    lse;

    for (uint32_t i = 1; i < n; i++) {
        if (logits[i] > mx) {
            mx  = logits[i];
            arg = i;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        sum += exp((double)(logits[i] - mx));
    }
    lse = mx + (float)log(sum);
    for (uint32_t i = 0; i < n; i++) {
        lp[i] = logits[i] - lse;
    }
    return arg;
}

static void score_lanes(kvp_run_t *run, uint32_t next)
{
    uint32_t V = run->m->cfg.vocab;
    float   *lp;
    uint32_t ref_arg;

    ref_arg = log_softmax(run->logits, run->lp_ref, V);
    for (uint32_t l = 0; l < run->lanes; l++) {
        kvp_lane_stat_t *s   = &run->stat[l];
        float           *lg  = run->logits + (size_t)l * V;
        uint32_t         arg = ref_arg;
        double           kl  = 0.0;

        lp = run->lp_ref;
        if (l > 0) {
            arg = log_softmax(lg, lg, V); /* in place: lg now holds log-probs */
            lp  = lg;
            for (uint32_t i = 0; i < V; i++) {
                kl += exp((double)run->lp_ref[i]) * ((double)run->lp_ref[i] - (double)lp[i]);
            }
        }
        s->nll_sum -= lp[next];
        s->kl_sum += kl > 0.0 ? kl : 0.0;
        s->top1_same += arg == ref_arg;
        s->n++;
    }
}

/* Feed ids[0..n-1] to every lane; with score, each prediction of ids[t+1] is scored. */
static kvp_status_t feed(kvp_run_t *run, const uint32_t *ids, uint32_t n, int score)
{
    uint32_t     tok[KVP_RUN_MAX_LANES];
    kvp_status_t status;

    for (uint32_t t = 0; t < n; t++) {
        for (uint32_t l = 0; l < run->lanes; l++) {
            tok[l] = ids[t];
        }
        status = run_step(run, tok);
        if (status != KVP_OK) {
            return status;
        }
        if (score && t + 1 < n) {
            score_lanes(run, ids[t + 1]);
        }
        if (score && run->progress != NULL) {
            run->progress(t + 1, n);
        }
    }
    return KVP_OK;
}

kvp_status_t kvp_run_ppl(kvp_run_t *run, const uint32_t *ids, uint32_t n)
{
    return feed(run, ids, n, 1);
}

kvp_status_t kvp_run_feed(kvp_run_t *run, const uint32_t *ids, uint32_t n)
{
    return feed(run, ids, n, 0);
}

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t a = 0;

    for (uint32_t i = 1; i < n; i++) {
        a = x[i] > x[a] ? i : a;
    }
    return a;
}

kvp_status_t kvp_run_generate(kvp_run_t *run, const uint32_t *prompt, uint32_t np,
                              uint32_t steps, uint32_t *out)
{
    uint32_t     V = run->m->cfg.vocab;
    uint32_t     tok[KVP_RUN_MAX_LANES];
    kvp_status_t status;

    if (np == 0) {
        KVP_LOG_ERROR("model", "generation needs a non-empty prompt");
        return KVP_ERR_INVALID;
    }
    status = kvp_run_feed(run, prompt, np);
    for (uint32_t i = 0; i < steps && status == KVP_OK; i++) {
        for (uint32_t l = 0; l < run->lanes; l++) {
            tok[l]                = argmax(run->logits + (size_t)l * V, V);
            out[l * steps + i]    = tok[l];
        }
        if (i + 1 < steps) {
            status = run_step(run, tok);
        }
    }
    return status;
}

void kvp_run_finish(kvp_run_t *run)
{
    double shared = kvp_fwd_shared_s(run->fwd);

    for (uint32_t l = 0; l < run->lanes; l++) {
        kvp_lane_stat_t *s = &run->stat[l];
        kvp_kvc_t       *c = run->cache[l];
        double           t = shared / run->lanes + kvp_fwd_lane_s(run->fwd, l);

        s->ppl           = s->n ? exp(s->nll_sum / (double)s->n) : NAN;
        s->kl_mean       = s->n ? s->kl_sum / (double)s->n : NAN;
        s->top1_agree    = s->n ? (double)s->top1_same / (double)s->n : NAN;
        s->bits_page     = c->page_elems ? 8.0 * (double)c->page_bytes / (double)c->page_elems
                                         : (s->codec == KVP_KVC_FP32 ? 32.0 : NAN);
        s->bits_payload  = c->page_elems ? 8.0 * (double)c->payload_bytes / (double)c->page_elems
                                         : s->bits_page;
        s->bits_per_elem = s->codec == KVP_KVC_FP32 ? 32.0 : kvp_kvc_bits_effective(c);
        s->tokens_per_s  = t > 0.0 ? (double)run->steps / t : 0.0;
        s->codec_s       = c->codec_s;
    }
}

/* ---- prompts and printing ---- */

/* Prompt ids: BOS (when the model uses it, or when the prompt is empty) + the prompt's tokens. */
kvp_status_t kvp_run_prompt(const kvp_model_t *m, const char *prompt, uint32_t **ids_p,
                                  uint32_t *n_p)
{
    size_t       n;
    kvp_status_t status;
    int          bos = kvp_tok_add_bos(m->tok) || prompt[0] == '\0';

    status = kvp_tok_encode(m->tok, prompt, strlen(prompt), bos, ids_p, &n);
    if (status == KVP_OK) {
        *n_p = (uint32_t)n;
    }
    return status;
}

kvp_status_t kvp_run_text_tokens(const kvp_model_t *m, const char *path, uint64_t offset,
                                 uint32_t n, uint32_t **ids_p, uint32_t *n_p)
{
    FILE        *f    = kvp_file_open(path, "rb");
    size_t       want = (size_t)n * 8 + 256, got, use;
    char        *buf;
    uint32_t    *ids;
    size_t       nids;
    int          eof;
    kvp_status_t status;

    if (f == NULL) {
        KVP_LOG_ERROR("model", "cannot open %s: %m", path);
        return KVP_ERR_IO;
    }
    for (;;) {
        buf = kvp_malloc(want, "text");
        if (buf == NULL) {
            fclose(f);
            return KVP_ERR_NO_MEMORY;
        }
        if (fseeko(f, (off_t)offset, SEEK_SET) != 0) {
            KVP_LOG_ERROR("model", "cannot seek %s to %llu", path, (unsigned long long)offset);
            kvp_free(buf);
            fclose(f);
            return KVP_ERR_IO;
        }
        got = fread(buf, 1, want, f);
        if (ferror(f)) {
            KVP_LOG_ERROR("model", "cannot read %s: %m", path);
            kvp_free(buf);
            fclose(f);
            return KVP_ERR_IO;
        }
        /* a word cut by the end of the buffer may encode to other tokens than in the whole text,
         * and so may the words before it (a merge or a pre-split that would have reached past
         * the cut): encode only up to the last word end; none in the buffer -> read more */
        eof = got < want;
        use = eof ? got : kvp_tok_prefix_cut(buf, got);
        if (use == 0 && !eof) {
            kvp_free(buf);
            want *= 2;
            continue;
        }
        status = kvp_tok_encode(m->tok, buf, use, kvp_tok_add_bos(m->tok), &ids, &nids);
        kvp_free(buf);
        if (status != KVP_OK) {
            fclose(f);
            return status;
        }
        if (nids >= n || eof) {
            break;
        }
        kvp_free(ids);
        want *= 2;
    }
    fclose(f);
    *n_p   = nids > n ? n : (uint32_t)nids;
    *ids_p = ids;
    return KVP_OK;
}

/* Print generated ids as text, stopping at EOS (and at BOS for llama2.c story models). */
void kvp_run_print(FILE *out, const kvp_model_t *m, uint32_t prev, const uint32_t *ids,
                         uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        size_t      len;
        const char *s;

        if (ids[i] == kvp_tok_eos(m->tok) ||
            (kvp_tok_kind(m->tok) == KVP_TOK_SP && ids[i] == kvp_tok_bos(m->tok))) {
            break;
        }
        s = kvp_tok_decode(m->tok, prev, ids[i], &len);
        fwrite(s, 1, len, out);
        prev = ids[i];
    }
}

/* ---- self-sampling ---- */

static uint64_t xorshift64s(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

kvp_status_t kvp_run_sample(const kvp_model_t *m, uint32_t n, uint64_t seed, float temp,
                            uint32_t **ids_p)
{
    kvp_codec_id_t codec = KVP_KVC_FP32;
    kvp_run_t     *run;
    uint32_t      *ids;
    uint64_t       rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    kvp_status_t   status;
    uint32_t       V = m->cfg.vocab;

    if (n == 0) {
        return KVP_ERR_INVALID;
    }
    ids = kvp_malloc(n * sizeof(*ids), "sample ids");
    if (ids == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    status = kvp_run_create(m, &codec, 1, 1, n, 0, &run);
    if (status != KVP_OK) {
        kvp_free(ids);
        return status;
    }
    ids[0] = kvp_tok_bos(m->tok);
    for (uint32_t t = 0; t + 1 < n && status == KVP_OK; t++) {
        status = run_step(run, &ids[t]);
        if (status == KVP_OK) {
            float  *lg = run->logits;
            float   mx = lg[argmax(lg, V)];
            double  sum = 0.0, r, acc = 0.0;
            uint32_t pick = V - 1;

            for (uint32_t i = 0; i < V; i++) {
                sum += exp((double)(lg[i] - mx) / temp);
            }
            r = (double)(xorshift64s(&rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
            for (uint32_t i = 0; i < V; i++) {
                acc += exp((double)(lg[i] - mx) / temp);
                if (acc > r) {
                    pick = i;
                    break;
                }
            }
            ids[t + 1] = pick;
        }
    }
    kvp_run_destroy(run);
    if (status != KVP_OK) {
        kvp_free(ids);
        return status;
    }
    *ids_p = ids;
    return KVP_OK;
}

/* ---- .kvd dump (format and writer: eval/eval.h) ---- */

static void dump_cb(void *arg, uint32_t lane, uint32_t layer, uint32_t pos, const float *k,
                    const float *v)
{
    kvp_kv_t *kv  = arg;
    size_t    row = (size_t)kv->heads * kv->head_dim;
    size_t    off = ((size_t)layer * kv->tokens + pos) * row;

    if (lane == 0 && pos < kv->tokens) {
        memcpy(kv->k + off, k, row * sizeof(float));
        memcpy(kv->v + off, v, row * sizeof(float));
    }
}

kvp_status_t kvp_run_dump_kvd(const kvp_model_t *m, const uint32_t *ids, uint32_t n,
                              const char *path)
{
    kvp_codec_id_t codec = KVP_KVC_FP32;
    kvp_run_t     *run   = NULL;
    kvp_kv_t       kv;
    kvp_status_t   status;

    memset(&kv, 0, sizeof(kv));
    status = kvp_kv_alloc(&kv, m->cfg.layers, n, m->cfg.kv_heads, m->cfg.head_dim);
    if (status == KVP_OK) {
        status = kvp_run_create(m, &codec, 1, 1, n, 0, &run);
    }
    if (status == KVP_OK) {
        kvp_fwd_set_kv_cb(run->fwd, dump_cb, &kv);
        status = kvp_run_feed(run, ids, n);
    }
    if (status == KVP_OK) {
        status = kvp_kvd_write(path, &kv);
    }
    kvp_run_destroy(run);
    kvp_kv_free(&kv);
    return status;
}
