/* model_load.c - build a kvp_model_t from a llama2.c .bin (7-int header, fp32 tensors in a fixed
 * order, optional legacy RoPE block and classifier) or from GGUF v3 ("llama" architecture;
 * tensors dequantized to fp32 at load, shapes checked against the metadata; Q4_0/Q4_1/Q8_0
 * matrices also keep a kvp_qmat_t into the file image for the matmul). All fp32 weights live in
 * one allocation. Main flow: kvp_model_load -> load_llama2c | load_gguf -> model_alloc. */
#include "model.h"

#include "kvpack/alloc.h"
#include "kvpack/file.h"
#include "kvpack/log.h"
#include "kvpack/page.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Carve every weight out of one fp32 block; tied classifiers share tok_emb. */
static kvp_status_t model_alloc(kvp_model_t *m, int tied)
{
    const kvp_model_config_t *c  = &m->cfg;
    size_t                    qd = (size_t)c->heads * c->head_dim;
    size_t                    kd = (size_t)c->kv_heads * c->head_dim;
    size_t per = 2 * (size_t)c->dim + 2 * qd * c->dim + 2 * kd * c->dim + 3 * (size_t)c->hidden * c->dim;
    size_t total = (size_t)c->vocab * c->dim * (tied ? 1 : 2) + c->dim + per * c->layers;
    float *p;

    m->layer = kvp_calloc(c->layers, sizeof(*m->layer), "model layers");
    m->mem   = kvp_malloc(total * sizeof(float), "model weights");
    if (m->layer == NULL || m->mem == NULL) {
        KVP_LOG_ERROR("model", "cannot allocate %zu MB of weights", total * 4 >> 20);
        return KVP_ERR_NO_MEMORY;
    }
    m->n_params = total;
    p           = m->mem;
    m->tok_emb  = p, p += (size_t)c->vocab * c->dim;
    m->cls      = tied ? m->tok_emb : p;
    p += tied ? 0 : (size_t)c->vocab * c->dim;
    m->final_norm = p, p += c->dim;
    for (uint32_t l = 0; l < c->layers; l++) {
        kvp_model_layer_t *w = &m->layer[l];

        w->att_norm = p, p += c->dim;
        w->ffn_norm = p, p += c->dim;
        w->wq       = p, p += qd * c->dim;
        w->wo       = p, p += qd * c->dim;
        w->wk       = p, p += kd * c->dim;
        w->wv       = p, p += kd * c->dim;
        w->w1       = p, p += (size_t)c->hidden * c->dim;
        w->w2       = p, p += (size_t)c->hidden * c->dim;
        w->w3       = p, p += (size_t)c->hidden * c->dim;
    }
    return KVP_OK;
}

static kvp_status_t check_config(const kvp_model_config_t *c, const char *path)
{
    if (c->dim == 0 || c->hidden == 0 || c->layers == 0 || c->heads == 0 || c->kv_heads == 0 ||
        c->vocab == 0 || c->dim > 65536 || c->hidden > 262144 || c->layers > 1024 ||
        c->vocab > (1u << 22) || c->heads > 1024 || c->heads % c->kv_heads != 0 ||
        c->head_dim == 0 || c->head_dim % 2 != 0 || c->head_dim > 1024) {
        KVP_LOG_ERROR("model", "%s: implausible model shape (dim %u hidden %u layers %u heads %u "
                      "kv_heads %u head_dim %u vocab %u)", path, c->dim, c->hidden, c->layers,
                      c->heads, c->kv_heads, c->head_dim, c->vocab);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

/* ---- llama2.c ---- */

/* Every value finite, else the tensor and the first bad element named: a NaN weight (or a NaN
 * block scale, dequantized) would run as a model with ppl nan, blamed on nothing. */
static kvp_status_t weights_finite(const float *w, size_t n, const char *name, const char *path)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(w[i])) {
            KVP_LOG_ERROR("model", "%s: malformed model: %s element %zu is %g", path, name, i,
                          (double)w[i]);
            return KVP_ERR_INVALID;
        }
    }
    return KVP_OK;
}

/* n floats; -1 on a short read, 1 when one is not finite (a malformed model: NaN logits) */
static int read_f32(FILE *f, float *dst, size_t n)
{
    if (fread(dst, sizeof(float), n, f) != n) {
        return -1;
    }
    return weights_finite(dst, n, "a weight", "llama2.c model") == KVP_OK ? 0 : 1;
}

static kvp_status_t load_llama2c(kvp_model_t *m, const char *path, FILE *f, long fsize)
{
    kvp_model_config_t *c = &m->cfg;
    int32_t             h[7];
    int                 tied, rr = 0;
    size_t              qd, kd, need;
    kvp_status_t        status;

    if (fread(h, 4, 7, f) != 7) {
        KVP_LOG_ERROR("model", "%s: truncated llama2.c header", path);
        return KVP_ERR_INVALID;
    }
    for (int i = 0; i < 7; i++) {
        if (h[i] == 0 || (i != 5 && h[i] < 0)) {
            KVP_LOG_ERROR("model", "%s: not a GGUF file, and not a llama2.c model either "
                          "(header field %d is %d)", path, i, h[i]);
            return KVP_ERR_INVALID;
        }
    }
    tied         = h[5] > 0;
    c->dim       = (uint32_t)h[0];
    c->hidden    = (uint32_t)h[1];
    c->layers    = (uint32_t)h[2];
    c->heads     = (uint32_t)h[3];
    c->kv_heads  = (uint32_t)h[4];
    c->vocab     = h[5] > 0 ? (uint32_t)h[5] : 0u - (uint32_t)h[5]; /* -INT32_MIN overflows */
    c->seq_len   = (uint32_t)h[6];
    c->head_dim  = c->heads ? c->dim / c->heads : 0;
    c->rope_theta = 10000.0f;
    c->norm_eps  = 1e-5f;
    if (c->heads == 0 || c->dim % c->heads != 0 || c->seq_len > (1u << 20)) {
        KVP_LOG_ERROR("model", "%s: not a GGUF file, and not a llama2.c model either (dim %u, "
                      "heads %u, seq_len %u)", path, c->dim, c->heads, c->seq_len);
        return KVP_ERR_INVALID;
    }
    status = check_config(c, path);
    if (status != KVP_OK) {
        return status;
    }
    qd   = (size_t)c->heads * c->head_dim;
    kd   = (size_t)c->kv_heads * c->head_dim;
    need = 28 + 4 * ((size_t)c->vocab * c->dim * (tied ? 1 : 2) + (size_t)c->seq_len * c->head_dim +
                     c->dim + c->layers * (2 * (size_t)c->dim + 2 * qd * c->dim + 2 * kd * c->dim +
                                           3 * (size_t)c->hidden * c->dim));
    if ((size_t)fsize != need) {
        KVP_LOG_ERROR("model", "%s: %ld bytes, but the header implies %zu", path, fsize, need);
        return KVP_ERR_INVALID;
    }
    status = model_alloc(m, tied);
    if (status != KVP_OK) {
        return status;
    }
    /* file order: emb, rms_att[L], wq[L], wk[L], wv[L], wo[L], rms_ffn[L], w1[L], w2[L], w3[L],
     * rms_final, legacy rope block, classifier */
#define RD(field, n)                                                  \
    for (uint32_t l = 0; l < c->layers; l++) {                        \
        if ((rr = read_f32(f, m->layer[l].field, (n))) != 0) {        \
            goto short_read;                                          \
        }                                                             \
    }
    if ((rr = read_f32(f, m->tok_emb, (size_t)c->vocab * c->dim)) != 0) {
        goto short_read;
    }
    RD(att_norm, c->dim)
    RD(wq, qd * c->dim)
    RD(wk, kd * c->dim)
    RD(wv, kd * c->dim)
    RD(wo, qd * c->dim)
    RD(ffn_norm, c->dim)
    RD(w1, (size_t)c->hidden * c->dim)
    RD(w2, (size_t)c->hidden * c->dim)
    RD(w3, (size_t)c->hidden * c->dim)
#undef RD
    if ((rr = read_f32(f, m->final_norm, c->dim)) != 0 ||
        (rr = -(fseek(f, (long)c->seq_len * c->head_dim * 4, SEEK_CUR) != 0)) != 0 ||
        (!tied && (rr = read_f32(f, m->cls, (size_t)c->vocab * c->dim)) != 0)) {
        goto short_read;
    }
    m->format = "llama2c";
    return KVP_OK;
short_read:
    if (rr > 0) {
        return KVP_ERR_INVALID; /* a value that is not finite: said by read_f32 */
    }
    KVP_LOG_ERROR("model", "%s: short read", path);
    return KVP_ERR_IO;
}

/* ---- GGUF ---- */

/* Tensor name, of shape ne0 x ne1, as f32 into dst (NULL: its presence and shape only). */
static kvp_status_t gguf_tensor(const kvp_gguf_t *g, const char *name, uint64_t ne0, uint64_t ne1,
                                float *dst)
{
    kvp_status_t s;

    const kvp_gguf_tensor_t *t = kvp_gguf_find(g, name);

    if (t == NULL) {
        KVP_LOG_ERROR("model", "gguf lacks tensor %s", name);
        return KVP_ERR_INVALID;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        KVP_LOG_ERROR("model", "gguf tensor %s has shape %llux%llu, expected %llux%llu", name,
                      (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                      (unsigned long long)ne0, (unsigned long long)ne1);
        return KVP_ERR_INVALID;
    }
    if (dst == NULL) {
        return KVP_OK;
    }
    s = kvp_gguf_tensor_f32(t, dst, ne0 * ne1);
    return s == KVP_OK ? weights_finite(dst, ne0 * ne1, name, "gguf") : s;
}

/* What this runner does not do, refused rather than run wrongly (a model that loaded and
 * reported perplexities of another computation): RoPE scaling (llama.rope.scaling.*, the older
 * llama.rope.scale_linear other than 1, the rope_freqs.weight frequency factors of Llama 3.1),
 * a key or value length other than dim / heads, mixture of experts (llama.expert_count), and a
 * pre-tokenizer other than SmolLM's (tokenizer.ggml.pre; absent: taken as this one). Tensors it
 * does not read (attention biases, say) are refused by gguf_tensors_known. */
static kvp_status_t gguf_unsupported(const kvp_gguf_t *g, const char *path, uint32_t head_dim)
{
    const char *v;
    size_t      len;
    uint32_t    key_len = head_dim, val_len = head_dim, experts = 0;
    float       rope_lin = 1.0f;

    if (kvp_gguf_get_str(g, "llama.rope.scaling.type", &v, &len) == KVP_OK &&
        !(len == 4 && memcmp(v, "none", 4) == 0)) {
        KVP_LOG_ERROR("model", "%s: RoPE scaling \"%.*s\" is not supported", path, (int)len, v);
        return KVP_ERR_UNSUPPORTED;
    }
    if (kvp_gguf_find(g, "rope_freqs.weight") != NULL) {
        KVP_LOG_ERROR("model", "%s: RoPE frequency factors (rope_freqs.weight) are not supported",
                      path);
        return KVP_ERR_UNSUPPORTED;
    }
    if (kvp_gguf_opt_u32(g, "llama.attention.key_length", head_dim, &key_len) != KVP_OK ||
        key_len != head_dim) {
        KVP_LOG_ERROR("model", "%s: llama.attention.key_length %u is not dim / heads (%u): not "
                      "supported", path, key_len, head_dim);
        return KVP_ERR_UNSUPPORTED;
    }
    if (kvp_gguf_opt_u32(g, "llama.attention.value_length", head_dim, &val_len) != KVP_OK ||
        val_len != head_dim) {
        KVP_LOG_ERROR("model", "%s: llama.attention.value_length %u is not dim / heads (%u): not "
                      "supported", path, val_len, head_dim);
        return KVP_ERR_UNSUPPORTED;
    }
    if (kvp_gguf_opt_f32(g, "llama.rope.scale_linear", 1.0f, &rope_lin) != KVP_OK ||
        rope_lin != 1.0f) {
        KVP_LOG_ERROR("model", "%s: linear RoPE scaling (llama.rope.scale_linear %g) is not "
                      "supported", path, (double)rope_lin);
        return KVP_ERR_UNSUPPORTED;
    }
    if (kvp_gguf_opt_u32(g, "llama.expert_count", 0, &experts) != KVP_OK || experts != 0) {
        KVP_LOG_ERROR("model", "%s: mixture of experts (llama.expert_count %u) is not supported",
                      path, experts);
        return KVP_ERR_UNSUPPORTED;
    }
    if (kvp_gguf_get_str(g, "tokenizer.ggml.pre", &v, &len) == KVP_OK &&
        !(len == 6 && memcmp(v, "smollm", 6) == 0)) {
        KVP_LOG_ERROR("model", "%s: pre-tokenizer \"%.*s\" is not supported (only SmolLM's: "
                      "its digits, word and space rules)", path, (int)len, v);
        return KVP_ERR_UNSUPPORTED;
    }
    return KVP_OK;
}

static kvp_status_t gguf_config(kvp_model_config_t *c, const kvp_gguf_t *g, const char *path)
{
    const char *arch;
    size_t      alen;
    uint32_t    rope_dims = 0;

    if (kvp_gguf_get_str(g, "general.architecture", &arch, &alen) != KVP_OK || alen != 5 ||
        memcmp(arch, "llama", 5) != 0) {
        KVP_LOG_ERROR("model", "%s: only general.architecture \"llama\" is supported", path);
        return KVP_ERR_UNSUPPORTED;
    }
    if (kvp_gguf_get_u32(g, "llama.embedding_length", &c->dim) != KVP_OK ||
        kvp_gguf_get_u32(g, "llama.feed_forward_length", &c->hidden) != KVP_OK ||
        kvp_gguf_get_u32(g, "llama.block_count", &c->layers) != KVP_OK ||
        kvp_gguf_get_u32(g, "llama.attention.head_count", &c->heads) != KVP_OK) {
        KVP_LOG_ERROR("model", "%s: missing llama.* shape metadata", path);
        return KVP_ERR_INVALID;
    }
    /* optional keys: absent, the default; present but malformed, refused (not run with the
     * default: that was a model that computed something else, exit 0) */
    if (kvp_gguf_opt_u32(g, "llama.attention.head_count_kv", c->heads, &c->kv_heads) != KVP_OK ||
        kvp_gguf_opt_u32(g, "llama.context_length", 2048, &c->seq_len) != KVP_OK ||
        kvp_gguf_opt_f32(g, "llama.rope.freq_base", 10000.0f, &c->rope_theta) != KVP_OK ||
        kvp_gguf_opt_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f, &c->norm_eps) !=
            KVP_OK ||
        kvp_gguf_opt_u32(g, "llama.rope.dimension_count", 0, &rope_dims) != KVP_OK) {
        KVP_LOG_ERROR("model", "%s: malformed gguf: optional llama.* metadata of a wrong type",
                      path);
        return KVP_ERR_INVALID;
    }
    /* RoPE takes theta^(-2i/D) and RMSNorm 1/sqrt(mean + eps): a theta <= 0 or an eps < 0 (or
     * either NaN/Inf) turns every logit into NaN, which would pass as a run with ppl nan or be
     * blamed on the codec ("input has NaN") */
    if (!isfinite(c->rope_theta) || c->rope_theta <= 0.0f) {
        KVP_LOG_ERROR("model", "%s: malformed gguf: llama.rope.freq_base %g is not a finite "
                      "positive number", path, (double)c->rope_theta);
        return KVP_ERR_INVALID;
    }
    if (!isfinite(c->norm_eps) || c->norm_eps < 0.0f) {
        KVP_LOG_ERROR("model", "%s: malformed gguf: llama.attention.layer_norm_rms_epsilon %g is "
                      "not a finite number >= 0", path, (double)c->norm_eps);
        return KVP_ERR_INVALID;
    }
    c->head_dim = c->heads ? c->dim / c->heads : 0;
    if (c->heads == 0 || c->dim % c->heads != 0) {
        KVP_LOG_ERROR("model", "%s: embedding %u is not a multiple of heads %u", path, c->dim,
                      c->heads);
        return KVP_ERR_INVALID;
    }
    if (rope_dims != 0 && rope_dims != c->head_dim) {
        KVP_LOG_ERROR("model", "%s: partial rope (%u of %u dims) is not supported", path,
                      rope_dims, c->head_dim);
        return KVP_ERR_UNSUPPORTED;
    }
    return gguf_unsupported(g, path, c->head_dim);
}

/* Point q at a tensor's blocks when the matmul can read them directly (shape already checked). */
static void qmat_set(kvp_qmat_t *q, const kvp_gguf_tensor_t *t)
{
    if (t == NULL || t->ne[0] % 32 != 0 || (t->type != KVP_GGML_Q4_0 &&
        t->type != KVP_GGML_Q4_1 && t->type != KVP_GGML_Q8_0)) {
        return;
    }
    q->data      = t->data;
    q->type      = t->type;
    q->row_bytes = (size_t)(t->nbytes / t->ne[1]);
}

/* A layer's weight tensors, "blk.<layer>.<name>.weight", in the order gguf_weights reads them. */
static const char *const layer_tensor[] = {"attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v",
                                           "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
#define LAYER_TENSORS (sizeof(layer_tensor) / sizeof(layer_tensor[0]))

/* Whether the runner reads the tensor of this name. */
static int gguf_tensor_read(const char *name, uint32_t layers, int has_out)
{
    char         *end;
    unsigned long l;

    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "output_norm.weight") == 0 ||
        (has_out && strcmp(name, "output.weight") == 0)) {
        return 1;
    }
    if (strncmp(name, "blk.", 4) != 0 || name[4] < '0' || name[4] > '9') {
        return 0;
    }
    l = strtoul(name + 4, &end, 10);
    if (l >= layers || *end != '.') {
        return 0;
    }
    for (size_t i = 0; i < LAYER_TENSORS; i++) {
        size_t n = strlen(layer_tensor[i]);

        if (strncmp(end + 1, layer_tensor[i], n) == 0 && strcmp(end + 1 + n, ".weight") == 0) {
            return 1;
        }
    }
    return 0;
}

/* Refuse a file with a tensor the runner would not read: llama.cpp's llama arch applies some
 * (attention biases, expert tensors), so running without them was another model, exit 0. */
static kvp_status_t gguf_tensors_known(const kvp_gguf_t *g, const char *path, uint32_t layers,
                                       int has_out)
{
    for (size_t i = 0; i < kvp_gguf_n_tensors(g); i++) {
        const char *name = kvp_gguf_tensor(g, i)->name;

        if (!gguf_tensor_read(name, layers, has_out)) {
            KVP_LOG_ERROR("model", "%s: tensor %s is not one this runner computes with (a llama "
                          "model without biases, experts or extra tensors): not supported",
                          path, name);
            return KVP_ERR_UNSUPPORTED;
        }
    }
    return KVP_OK;
}

/* Every weight tensor of the model (the classifier when has_out): with check_only, its presence
 * and shape (before anything is allocated for it); else loaded as f32 into m's weights, checked
 * finite, and the quantized twins pointed at their blocks. */
static kvp_status_t gguf_weights(kvp_model_t *m, const kvp_gguf_t *g, int has_out, int check_only)
{
    const kvp_model_config_t *c  = &m->cfg;
    size_t                    qd = (size_t)c->heads * c->head_dim;
    size_t                    kd = (size_t)c->kv_heads * c->head_dim;
    char                      name[96];
    kvp_status_t              status;

    status = gguf_tensor(g, "token_embd.weight", c->dim, c->vocab, check_only ? NULL : m->tok_emb);
    if (status == KVP_OK && has_out) {
        status = gguf_tensor(g, "output.weight", c->dim, c->vocab, check_only ? NULL : m->cls);
    }
    if (status == KVP_OK) {
        status = gguf_tensor(g, "output_norm.weight", c->dim, 1,
                             check_only ? NULL : m->final_norm);
    }
    for (uint32_t l = 0; l < c->layers && status == KVP_OK; l++) {
        kvp_model_layer_t *w = check_only ? NULL : &m->layer[l];
        struct { /* in layer_tensor's order */
            uint64_t    ne0, ne1;
            float      *dst;
            kvp_qmat_t *q;
        } t[LAYER_TENSORS] = {
            {c->dim, 1, w ? w->att_norm : NULL, NULL},
            {c->dim, 1, w ? w->ffn_norm : NULL, NULL},
            {c->dim, qd, w ? w->wq : NULL, w ? &w->qwq : NULL},
            {c->dim, kd, w ? w->wk : NULL, w ? &w->qwk : NULL},
            {c->dim, kd, w ? w->wv : NULL, w ? &w->qwv : NULL},
            {qd, c->dim, w ? w->wo : NULL, w ? &w->qwo : NULL},
            {c->dim, c->hidden, w ? w->w1 : NULL, w ? &w->qw1 : NULL},
            {c->dim, c->hidden, w ? w->w3 : NULL, w ? &w->qw3 : NULL},
            {c->hidden, c->dim, w ? w->w2 : NULL, w ? &w->qw2 : NULL},
        };

        for (size_t i = 0; i < LAYER_TENSORS && status == KVP_OK; i++) {
            snprintf(name, sizeof(name), "blk.%u.%s.weight", l, layer_tensor[i]);
            status = gguf_tensor(g, name, t[i].ne0, t[i].ne1, t[i].dst);
            if (status == KVP_OK && t[i].q != NULL) {
                qmat_set(t[i].q, kvp_gguf_find(g, name));
            }
        }
    }
    return status;
}

static kvp_status_t load_gguf(kvp_model_t *m, const char *path)
{
    kvp_model_config_t      *c = &m->cfg;
    kvp_gguf_t              *g;
    const kvp_gguf_tensor_t *emb, *out;
    kvp_status_t             status;

    status = kvp_gguf_open(path, &g);
    if (status != KVP_OK) {
        return status;
    }
    status = gguf_config(c, g, path);
    if (status != KVP_OK) {
        goto out;
    }
    emb = kvp_gguf_find(g, "token_embd.weight");
    if (emb == NULL || emb->ne[0] != c->dim || emb->ne[1] == 0 || emb->ne[1] > (1u << 22)) {
        KVP_LOG_ERROR("model", "%s: token_embd.weight is missing or not [vocab x %u]", path, c->dim);
        status = KVP_ERR_INVALID;
        goto out;
    }
    c->vocab = (uint32_t)emb->ne[1];
    status   = check_config(c, path);
    if (status != KVP_OK) {
        goto out;
    }
    status = kvp_tok_load_gguf(g, &m->tok);
    if (status != KVP_OK) {
        goto out;
    }
    if (kvp_tok_vocab(m->tok) != c->vocab) {
        KVP_LOG_ERROR("model", "%s: tokenizer has %u tokens, embedding %u", path,
                      kvp_tok_vocab(m->tok), c->vocab);
        status = KVP_ERR_INVALID;
        goto out;
    }
    out    = kvp_gguf_find(g, "output.weight");
    status = gguf_tensors_known(g, path, c->layers, out != NULL);
    if (status == KVP_OK) { /* every tensor there, of its shape, first: the shape metadata */
        status = gguf_weights(m, g, out != NULL, 1); /* sizes the allocation */
    }
    if (status == KVP_OK) {
        status = model_alloc(m, out == NULL);
    }
    if (status == KVP_OK) {
        status = gguf_weights(m, g, out != NULL, 0);
    }
    if (status == KVP_OK) {
        qmat_set(&m->qcls, out != NULL ? out : emb);
        m->format = "gguf";
        m->gguf   = g; /* the quantized twins point into its image */
        return KVP_OK;
    }
out:
    kvp_gguf_close(g);
    return status;
}

/* ---- front door ---- */

/* m->id: the base name and the CRC32C of every byte of the file (read again: the loaders keep
 * only what they converted), so KV put by one model is never served to another of that name. */
static kvp_status_t model_id(kvp_model_t *m, const char *path)
{
    enum { CHUNK = 4 << 20 };
    FILE    *f   = kvp_file_open(path, "rb");
    uint8_t *buf = kvp_malloc(CHUNK, "model id buffer");
    uint32_t crc = 0;
    size_t   n;

    if (f == NULL || buf == NULL) {
        KVP_LOG_ERROR("model", "%s: cannot read it again for its id: %s", path,
                      buf == NULL ? "no memory" : strerror(errno));
        if (f != NULL) {
            fclose(f);
        }
        kvp_free(buf);
        return buf == NULL ? KVP_ERR_NO_MEMORY : KVP_ERR_IO;
    }
    while ((n = fread(buf, 1, CHUNK, f)) > 0) {
        crc = kvp_crc32c(crc, buf, n);
    }
    n = (size_t)ferror(f);
    fclose(f);
    kvp_free(buf);
    if (n != 0) {
        KVP_LOG_ERROR("model", "%s: read error while taking its id", path);
        return KVP_ERR_IO;
    }
    snprintf(m->id, sizeof(m->id), "%s@%08x", m->name, crc);
    return KVP_OK;
}

kvp_status_t kvp_model_load(const char *path, const char *tokenizer_path, kvp_model_t **m_p)
{
    kvp_model_t *m;
    kvp_status_t status;
    FILE        *f;
    uint32_t     magic = 0;
    long         fsize;
    const char  *base = strrchr(path, '/');

    f = kvp_file_open(path, "rb");
    if (f == NULL) {
        KVP_LOG_ERROR("model", "cannot open model %s: %m", path);
        return KVP_ERR_IO;
    }
    m = kvp_calloc(1, sizeof(*m), "model");
    if (m == NULL) {
        fclose(f);
        return KVP_ERR_NO_MEMORY;
    }
    snprintf(m->name, sizeof(m->name), "%s", base != NULL ? base + 1 : path);
    if (fseek(f, 0, SEEK_END) != 0 || (fsize = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        fread(&magic, 4, 1, f) != 1 || fseek(f, 0, SEEK_SET) != 0) {
        KVP_LOG_ERROR("model", "%s: cannot read", path);
        status = KVP_ERR_INVALID;
        fclose(f);
        goto err;
    }
    if (magic == 0x46554747u) {
        fclose(f);
        status = load_gguf(m, path);
    } else {
        status = load_llama2c(m, path, f, fsize);
        fclose(f);
        if (status == KVP_OK) {
            if (tokenizer_path == NULL) {
                KVP_LOG_ERROR("model", "%s is a llama2.c model: it needs --tokenizer", path);
                status = KVP_ERR_INVALID;
            } else {
                status = kvp_tok_load_llama2c(tokenizer_path, m->cfg.vocab, &m->tok);
            }
        }
    }
    if (status == KVP_OK) {
        status = model_id(m, path);
    }
    if (status != KVP_OK) {
        goto err;
    }
    *m_p = m;
    return KVP_OK;
err:
    kvp_model_free(m);
    return status;
}

void kvp_model_free(kvp_model_t *m)
{
    if (m == NULL) {
        return;
    }
    kvp_tok_free(m->tok);
    kvp_gguf_close(m->gguf);
    kvp_free(m->layer);
    kvp_free(m->mem);
    kvp_free(m);
}
