/* forward.c - one decoding step of a Llama-family model for several lanes in lockstep:
 * embedding -> per layer [RMSNorm, Q/K/V, RoPE on adjacent pairs, K/V into the lane's paged cache,
 * grouped-query attention over the cache rows, output projection, RMSNorm, SwiGLU] -> final
 * RMSNorm -> classifier. Weight matmuls are batched over lanes (kvp_mm); attention runs per lane
 * with its heads shared out by par.c. Main flow: kvp_fwd_step -> fwd_layer -> fwd_attention. */
#include "model.h"
#include "par.h"

#include "kvpack/alloc.h"
#include "kvpack/attn.h"
#include "kvpack/log.h"

#include <math.h>
#include <string.h>

struct kvp_fwd {
    const kvp_model_t *m;
    uint32_t           lanes;
    uint32_t           max_tokens;
    float             *x, *xb, *xb2;  /* [lanes][dim] */
    float             *q, *att_out;   /* [lanes][heads*head_dim] */
    float             *k, *v;         /* [lanes][kv_heads*head_dim] */
    float             *hb, *hb2;      /* [lanes][hidden] */
    float             *att;           /* [heads][max_tokens] scores of one lane */
    kvp_fwd_kv_cb_t    cb;
    void              *cb_arg;
    double             shared_s;
    double            *lane_s;
    int                fused;         /* kvp_fwd_set_attn_fused */
    kvp_attn_page_t   *ap;            /* [max_tokens] one layer's sealed pages */
    uint8_t           *tail;          /* the open rows as an fp16 page */
    size_t             tail_cap;
    kvp_status_t       err;           /* first failure of a fused attention call */
};

kvp_status_t kvp_fwd_create(const kvp_model_t *m, uint32_t lanes, uint32_t max_tokens,
                            kvp_fwd_t **f_p)
{
    const kvp_model_config_t *c = &m->cfg;
    kvp_fwd_t                *f;
    size_t                    qd = (size_t)c->heads * c->head_dim;
    size_t                    kd = (size_t)c->kv_heads * c->head_dim;

    if (lanes == 0 || max_tokens == 0) {
        KVP_LOG_ERROR("model", "forward pass needs at least one lane and one token");
        return KVP_ERR_INVALID;
    }
    f = kvp_calloc(1, sizeof(*f), "fwd");
    if (f == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    f->m          = m;
    f->lanes      = lanes;
    f->max_tokens = max_tokens;
    f->x          = kvp_calloc((size_t)lanes * c->dim, sizeof(float), "fwd x");
    f->xb         = kvp_calloc((size_t)lanes * c->dim, sizeof(float), "fwd xb");
    f->xb2        = kvp_calloc((size_t)lanes * c->dim, sizeof(float), "fwd xb2");
    f->q          = kvp_calloc(lanes * qd, sizeof(float), "fwd q");
    f->att_out    = kvp_calloc(lanes * qd, sizeof(float), "fwd att out");
    f->k          = kvp_calloc(lanes * kd, sizeof(float), "fwd k");
    f->v          = kvp_calloc(lanes * kd, sizeof(float), "fwd v");
    f->hb         = kvp_calloc((size_t)lanes * c->hidden, sizeof(float), "fwd hb");
    f->hb2        = kvp_calloc((size_t)lanes * c->hidden, sizeof(float), "fwd hb2");
    f->att        = kvp_calloc((size_t)c->heads * max_tokens, sizeof(float), "fwd att");
    f->lane_s     = kvp_calloc(lanes, sizeof(double), "fwd lane time");
    if (f->x == NULL || f->xb == NULL || f->xb2 == NULL || f->q == NULL || f->att_out == NULL ||
        f->k == NULL || f->v == NULL || f->hb == NULL || f->hb2 == NULL || f->att == NULL ||
        f->lane_s == NULL) {
        kvp_fwd_destroy(f);
        return KVP_ERR_NO_MEMORY;
    }
    *f_p = f;
    return KVP_OK;
}

void kvp_fwd_destroy(kvp_fwd_t *f)
{
    if (f == NULL) {
        return;
    }
    kvp_free(f->x);
    kvp_free(f->xb);
    kvp_free(f->xb2);
    kvp_free(f->q);
    kvp_free(f->att_out);
    kvp_free(f->k);
    kvp_free(f->v);
    kvp_free(f->hb);
    kvp_free(f->hb2);
    kvp_free(f->att);
    kvp_free(f->lane_s);
    kvp_free(f->ap);
    kvp_free(f->tail);
    kvp_free(f);
}

kvp_status_t kvp_fwd_set_attn_fused(kvp_fwd_t *f, int on)
{
    const kvp_model_config_t *c = &f->m->cfg;

    f->fused = 0;
    if (on && f->ap == NULL) {
        f->tail_cap = KVP_PAGE_HDR_BYTES + 4 * (size_t)f->max_tokens * c->kv_heads * c->head_dim;
        f->ap       = kvp_calloc(f->max_tokens, sizeof(*f->ap), "fwd fused pages");
        f->tail     = kvp_malloc(f->tail_cap, "fwd fused tail");
        if (f->ap == NULL || f->tail == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
    }
    f->fused = on;
    return KVP_OK;
}

int kvp_fwd_fused_codec_ok(kvp_codec_id_t codec)
{
    return codec != KVP_CODEC_NAIVE2;
}

void kvp_fwd_set_kv_cb(kvp_fwd_t *f, kvp_fwd_kv_cb_t cb, void *arg)
{
    f->cb     = cb;
    f->cb_arg = arg;
}

double kvp_fwd_shared_s(const kvp_fwd_t *f)
{
    return f->shared_s;
}

double kvp_fwd_lane_s(const kvp_fwd_t *f, uint32_t lane)
{
    return lane < f->lanes ? f->lane_s[lane] : 0.0;
}

/* ---- pieces ---- */

/* Batched matmul over all lanes (kvp_mm takes at most KVP_MM_MAXB at once). */
static void mm_lanes(const kvp_fwd_t *f, float *y, const float *x, const float *w,
                     const kvp_qmat_t *q, uint32_t rows, uint32_t n)
{
    for (uint32_t b = 0; b < f->lanes; b += KVP_MM_MAXB) {
        uint32_t nb = f->lanes - b < KVP_MM_MAXB ? f->lanes - b : KVP_MM_MAXB;

        kvp_mm_q(y + (size_t)b * rows, x + (size_t)b * n, w, q, rows, n, nb);
    }
}

static void rmsnorm(float *o, const float *x, const float *w, uint32_t n, float eps)
{
    float ss = 0.0f;

    for (uint32_t i = 0; i < n; i++) {
        ss += x[i] * x[i];
    }
    ss = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = 0; i < n; i++) {
        o[i] = w[i] * (ss * x[i]);
    }
}

/* Rotate adjacent pairs (x[2i], x[2i+1]) of every head by pos * theta^(-2i/head_dim). */
static void rope(float *x, uint32_t nheads, uint32_t hd, uint32_t pos, float theta)
{
    for (uint32_t i = 0; i < hd; i += 2) {
        float freq = 1.0f / powf(theta, (float)i / (float)hd);
        float a    = (float)pos * freq;
        float cr = cosf(a), ci = sinf(a);

        for (uint32_t h = 0; h < nheads; h++) {
            float *p  = x + (size_t)h * hd + i;
            float  v0 = p[0], v1 = p[1];

            p[0] = v0 * cr - v1 * ci;
            p[1] = v0 * ci + v1 * cr;
        }
    }
}

/* Attention of one lane at position pos over cache rows [0, pos], one task per query head. */
typedef struct {
    kvp_fwd_t       *f;
    const kvp_kvc_t *c;
    uint32_t         layer, pos;
    const float     *q;
    float           *out;
} attn_job_t;

static void attn_head(void *arg, uint32_t h)
{
    const attn_job_t         *j     = arg;
    const kvp_model_config_t *cfg   = &j->f->m->cfg;
    uint32_t                  hd    = cfg->head_dim, pos = j->pos;
    size_t                    off   = (size_t)(h / (cfg->heads / cfg->kv_heads)) * hd;
    const float              *qh    = j->q + (size_t)h * hd;
    float                    *att   = j->f->att + (size_t)h * j->f->max_tokens;
    float                    *oh    = j->out + (size_t)h * hd;
    float                     scale = 1.0f / sqrtf((float)hd), mx = -INFINITY, sum = 0.0f;

    kvp_attn_scores(qh, kvp_kvc_k(j->c, j->layer) + off, j->c->row, hd, pos + 1, att);
    for (uint32_t t = 0; t <= pos; t++) {
        att[t] *= scale;
        mx = att[t] > mx ? att[t] : mx;
    }
    for (uint32_t t = 0; t <= pos; t++) {
        att[t] = expf(att[t] - mx);
        sum += att[t];
    }
    for (uint32_t t = 0; t <= pos; t++) {
        att[t] /= sum;
    }
    memset(oh, 0, hd * sizeof(float));
    kvp_attn_mix(att, kvp_kvc_v(j->c, j->layer) + off, j->c->row, hd, pos + 1, oh);
}

/* Attention over the sealed pages of this layer and rows [sealed, pos] as an fp16 tail page. */
static kvp_status_t attn_fused(kvp_fwd_t *f, const kvp_kvc_t *c, uint32_t layer, const float *q,
                               float *out, uint32_t pos)
{
    const kvp_model_config_t *cfg = &f->m->cfg;
    uint32_t                  P = c->p.page_tokens, nch = c->sealed / P, ntail = pos + 1 - c->sealed;
    size_t                    off = (size_t)c->sealed * c->row, len = 0;
    kvp_page_params_t         pp = {.codec = KVP_CODEC_FP16, .heads = cfg->kv_heads,
                                    .head_dim = cfg->head_dim, .page_tokens = ntail > P ? ntail : P,
                                    .layer = layer, .first_pos = c->sealed,
                                    .flags = KVP_PAGE_F_TAIL};
    kvp_attn_page_t           tail;
    kvp_status_t              st;

    for (uint32_t ch = 0; ch < nch; ch++) {
        size_t i = (size_t)ch * c->p.layers + layer;

        f->ap[ch] = (kvp_attn_page_t){c->pages[i], c->page_lens[i]};
    }
    st = kvp_page_encode(&pp, KVP_DTYPE_F32, kvp_kvc_k(c, layer) + off, kvp_kvc_v(c, layer) + off,
                         ntail, f->tail, f->tail_cap, &len);
    if (st == KVP_OK) {
        tail = (kvp_attn_page_t){f->tail, len};
        st   = kvp_attn_compute(NULL, f->ap, nch, &tail, q, cfg->heads, out);
    }
    if (st != KVP_OK) {
        KVP_LOG_ERROR("model", "fused attention of layer %u at position %u: %s", layer, pos,
                      kvp_status_str(st));
    }
    return st;
}

static void fwd_attention(kvp_fwd_t *f, const kvp_kvc_t *c, uint32_t layer, const float *q,
                          float *out, uint32_t pos)
{
    attn_job_t j = {f, c, layer, pos, q, out};

    if (f->fused && c->pages != NULL && c->p.codec != KVP_KVC_FP32 &&
        c->p.regions.v_residual == 0) {
        kvp_status_t st = attn_fused(f, c, layer, q, out, pos);

        f->err = f->err != KVP_OK ? f->err : st;
        return;
    }

    if ((size_t)(pos + 1) * f->m->cfg.heads * f->m->cfg.head_dim < ((size_t)1 << 15)) {
        for (uint32_t h = 0; h < f->m->cfg.heads; h++) {
            attn_head(&j, h);
        }
        return;
    }
    kvp_par_for(f->m->cfg.heads, attn_head, &j);
}

static void fwd_layer(kvp_fwd_t *f, kvp_kvc_t *const *caches, uint32_t l)
{
    const kvp_model_t        *m  = f->m;
    const kvp_model_config_t *c  = &m->cfg;
    const kvp_model_layer_t  *w  = &m->layer[l];
    uint32_t                  qd = c->heads * c->head_dim;
    uint32_t                  kd = c->kv_heads * c->head_dim;
    double                    t0 = kvp_time_s(), t1;

    for (uint32_t b = 0; b < f->lanes; b++) {
        rmsnorm(f->xb + (size_t)b * c->dim, f->x + (size_t)b * c->dim, w->att_norm, c->dim,
                c->norm_eps);
    }
    mm_lanes(f, f->q, f->xb, w->wq, &w->qwq, qd, c->dim);
    mm_lanes(f, f->k, f->xb, w->wk, &w->qwk, kd, c->dim);
    mm_lanes(f, f->v, f->xb, w->wv, &w->qwv, kd, c->dim);
    t1 = kvp_time_s();
    f->shared_s += t1 - t0;
    for (uint32_t b = 0; b < f->lanes; b++) {
        kvp_kvc_t *kc  = caches[b];
        uint32_t   pos = kc->ntok;
        float     *q   = f->q + (size_t)b * qd;
        float     *k   = f->k + (size_t)b * kd;
        float     *v   = f->v + (size_t)b * kd;

        rope(q, c->heads, c->head_dim, pos, c->rope_theta);
        rope(k, c->kv_heads, c->head_dim, pos, c->rope_theta);
        if (f->cb != NULL) {
            f->cb(f->cb_arg, b, l, pos, k, v);
        }
        kvp_kvc_put(kc, l, k, v);
        fwd_attention(f, kc, l, q, f->att_out + (size_t)b * qd, pos);
        t0 = kvp_time_s();
        f->lane_s[b] += t0 - t1;
        t1 = t0;
    }
    mm_lanes(f, f->xb2, f->att_out, w->wo, &w->qwo, c->dim, qd);
    for (size_t i = 0; i < (size_t)f->lanes * c->dim; i++) {
        f->x[i] += f->xb2[i];
    }
    for (uint32_t b = 0; b < f->lanes; b++) {
        rmsnorm(f->xb + (size_t)b * c->dim, f->x + (size_t)b * c->dim, w->ffn_norm, c->dim,
                c->norm_eps);
    }
    mm_lanes(f, f->hb, f->xb, w->w1, &w->qw1, c->hidden, c->dim);
    mm_lanes(f, f->hb2, f->xb, w->w3, &w->qw3, c->hidden, c->dim);
    for (size_t i = 0; i < (size_t)f->lanes * c->hidden; i++) {
        float g = f->hb[i];

        f->hb[i] = g / (1.0f + expf(-g)) * f->hb2[i];
    }
    mm_lanes(f, f->xb2, f->hb, w->w2, &w->qw2, c->dim, c->hidden);
    for (size_t i = 0; i < (size_t)f->lanes * c->dim; i++) {
        f->x[i] += f->xb2[i];
    }
    f->shared_s += kvp_time_s() - t1;
}

kvp_status_t kvp_fwd_step(kvp_fwd_t *f, kvp_kvc_t *const *caches, const uint32_t *tokens,
                          float *logits)
{
    const kvp_model_t        *m = f->m;
    const kvp_model_config_t *c = &m->cfg;
    kvp_status_t              status;
    double                    t0;

    for (uint32_t b = 0; b < f->lanes; b++) {
        if (tokens[b] >= c->vocab) {
            KVP_LOG_ERROR("model", "token id %u is outside the vocabulary (%u)", tokens[b],
                          c->vocab);
            return KVP_ERR_INVALID;
        }
        if (caches[b]->ntok >= caches[b]->p.max_tokens || caches[b]->ntok >= f->max_tokens) {
            KVP_LOG_ERROR("model", "lane %u is at its context limit (%u tokens)", b,
                          caches[b]->ntok);
            return KVP_ERR_NO_SPACE;
        }
        memcpy(f->x + (size_t)b * c->dim, m->tok_emb + (size_t)tokens[b] * c->dim,
               c->dim * sizeof(float));
    }
    for (uint32_t l = 0; l < c->layers && f->err == KVP_OK; l++) {
        fwd_layer(f, caches, l);
    }
    if (f->err != KVP_OK) {
        return f->err;
    }
    t0 = kvp_time_s();
    for (uint32_t b = 0; b < f->lanes; b++) {
        rmsnorm(f->xb + (size_t)b * c->dim, f->x + (size_t)b * c->dim, m->final_norm, c->dim,
                c->norm_eps);
    }
    mm_lanes(f, logits, f->xb, m->cls, &m->qcls, c->vocab, c->dim);
    f->shared_s += kvp_time_s() - t0;
    for (uint32_t b = 0; b < f->lanes; b++) {
        t0     = kvp_time_s();
        status = kvp_kvc_commit(caches[b], tokens[b]);
        f->lane_s[b] += kvp_time_s() - t0;
        if (status != KVP_OK) {
            return status;
        }
    }
    return KVP_OK;
}
