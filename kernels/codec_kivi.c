/* codec_kivi.c - the "kivi" (G = 32), "kivi128" (G = 128) and "naive2" codecs (CODECS.md 3).
 * K per channel in groups of G tokens, V per token in groups of gv = min(G, D) channels (D must
 * be a multiple of gv); fp16 scale and min; a constant group (scale 0) stores code 0 and decodes
 * to min (KIVI itself would divide 0/0). naive2 quantizes K and V per token with one group of D
 * channels (the naive baseline of realdata/README.md). No rotation: both frames are the same.
 *
 * Payload (T = valid tokens, rt = ceil(T/4), ngk = ceil(T/G), rd = ceil(D/4), ngv = D/gv):
 *   section   size             layout
 *   K codes   H*D*rt           [h][d] runs along tokens, code t at bits 2(t%4) of byte t/4
 *   K scale   2*H*ngk*D        fp16 [h][group][d], (max - min) / 3
 *   K min     2*H*ngk*D        fp16 [h][group][d]
 *   V codes   T*H*rd           [t][h] runs along channels
 *   V scale   2*T*H*ngv        fp16 [t][h][group]
 *   V min     2*T*H*ngv        fp16 [t][h][group]
 * naive2: K uses the V layout (codes [t][h] runs of D, scale/min [t][h]), then V the same. */
#include "codec_ops.h"
#include "kvpack/log.h"
#include "q2h_int.h"
#include "quant_hd.h"

#include <string.h>

static uint32_t kivi_gv(uint32_t G, uint32_t D) { return G == 0 || D < G ? D : G; }

/* The page's offsets: kivi and kivi128 have oscar's layout without its norms (quant_hd.h, shared
 * with the CUDA twin and attention); naive2 has K in the V layout (one group per token row). */
static void kivi_layout(const kvp_codec_geom_t *g, uint32_t G, kvp_hd_q2_layout_t *l)
{
    size_t rows = (size_t)g->valid * g->heads;

    if (G != 0) {
        *l = kvp_hd_q2_layout(0, g->valid, g->heads, g->head_dim, G, kivi_gv(G, g->head_dim));
        return;
    }
    memset(l, 0, sizeof(*l));
    l->gv      = g->head_dim;
    l->ng      = 1;
    l->rd      = kvp_hd_run_bytes(g->head_dim);
    l->k_scale = rows * l->rd;
    l->k_zero  = l->k_scale + 2 * rows;
    l->v_codes = l->k_zero + 2 * rows;
    l->v_scale = l->v_codes + rows * l->rd;
    l->v_zero  = l->v_scale + 2 * rows;
    l->total   = l->v_zero + 2 * rows;
}

static int kivi_params_ok(const kvp_codec_geom_t *g, const uint8_t *payload, uint32_t G)
{
    kvp_hd_q2_layout_t l;

    kivi_layout(g, G, &l);
    return kvp_q2_params_ok(payload, &l, (size_t)g->heads * g->head_dim);
}

static kvp_status_t kivi_check_g(const kvp_codec_geom_t *g, uint32_t G)
{
    if (g->head_dim % kivi_gv(G, g->head_dim) != 0) {
        return KVP_ERR_UNSUPPORTED;
    }
    return KVP_OK;
}

/* Layout of a page at group G and the header fields that describe it (both encoders). */
static void kivi_header(const kvp_codec_geom_t *g, uint32_t G, kvp_page_info_t *info,
                        kvp_hd_q2_layout_t *l)
{
    kivi_layout(g, G, l);
    info->bits_k  = 2;
    info->bits_v  = 2;
    info->group_k = G == 0 ? g->head_dim : G;
    info->group_v = l->gv;
}

static kvp_status_t kivi_encode_g(const kvp_codec_geom_t *g, const float *k, const float *v,
                                  kvp_page_info_t *info, uint8_t *p, uint32_t G,
                                  const kvp_q2_kern_t *kk)
{
    kvp_hd_q2_layout_t l;
    size_t             rows = (size_t)g->valid * g->heads;
    uint32_t           D = g->head_dim, H = g->heads;

    kivi_header(g, G, info, &l);
    if (G == 0) {
        kk->tok_encode(k, rows, D, D, KVP_Q2_RULE_KIVI, p + l.k_codes, p + l.k_scale,
                       p + l.k_zero);
    } else {
        uint32_t ngk = (g->valid + G - 1) / G;
        size_t   rt  = kvp_hd_run_bytes(g->valid);

        for (uint32_t h = 0; h < H; h++) {
            kk->chan_encode(k + (size_t)h * D, (size_t)H * D, g->valid, D, G, KVP_Q2_RULE_KIVI,
                            p + l.k_codes + (size_t)h * D * rt,
                            p + l.k_scale + 2 * (size_t)h * ngk * D,
                            p + l.k_zero + 2 * (size_t)h * ngk * D);
        }
    }
    kk->tok_encode(v, rows, D, l.gv, KVP_Q2_RULE_KIVI, p + l.v_codes, p + l.v_scale,
                   p + l.v_zero);
    return KVP_OK;
}

static kvp_status_t kivi_decode_g(const kvp_codec_geom_t *g, const uint8_t *p, float *k_out,
                                  float *v_out, uint32_t G, const kvp_q2_kern_t *kk)
{
    kvp_hd_q2_layout_t l;
    size_t             rows = (size_t)g->valid * g->heads;
    uint32_t           D = g->head_dim, H = g->heads;

    kivi_layout(g, G, &l);
    if (k_out != NULL && G == 0) {
        kk->tok_decode(p + l.k_codes, p + l.k_scale, p + l.k_zero, rows, D, D, k_out);
    } else if (k_out != NULL) {
        uint32_t ngk = (g->valid + G - 1) / G;
        size_t   rt  = kvp_hd_run_bytes(g->valid);

        for (uint32_t h = 0; h < H; h++) {
            kk->chan_decode(p + l.k_codes + (size_t)h * D * rt,
                            p + l.k_scale + 2 * (size_t)h * ngk * D,
                            p + l.k_zero + 2 * (size_t)h * ngk * D, g->valid, D, G,
                            k_out + (size_t)h * D, (size_t)H * D);
        }
    }
    if (v_out != NULL) {
        kk->tok_decode(p + l.v_codes, p + l.v_scale, p + l.v_zero, rows, D, l.gv, v_out);
    }
    return KVP_OK;
}

/* ---- fp16 in/out (AVX2 only): the same sections straight from/to fp16 ---- */

static int kivi_h_ok(const kvp_codec_geom_t *g, uint32_t G)
{
    uint32_t D = g->head_dim;

    return kvp_cpu_has_avx2() && kvp_q2h_tok_ok(D, kivi_gv(G, D)) &&
           (G == 0 || kvp_q2h_chan_ok(D, G));
}

static kvp_status_t kivi_enc_h(const kvp_codec_geom_t *g, const uint16_t *k,
                                  const uint16_t *v, kvp_page_info_t *info, uint8_t *p,
                                  uint32_t G)
{
    kvp_hd_q2_layout_t l;
    size_t             rows = (size_t)g->valid * g->heads;
    uint32_t           D = g->head_dim, H = g->heads;
    int                ok = 1;

    if (!kivi_h_ok(g, G)) {
        return KVP_ERR_UNSUPPORTED;
    }
    kivi_header(g, G, info, &l);
    if (G == 0) {
        ok &= kvp_q2h_tok_encode(k, rows, D, D, KVP_Q2_RULE_KIVI, p + l.k_codes, p + l.k_scale,
                                 p + l.k_zero);
        ok &= kvp_q2h_tok_encode(v, rows, D, l.gv, KVP_Q2_RULE_KIVI, p + l.v_codes,
                                 p + l.v_scale, p + l.v_zero);
    } else { /* V first: its rows stream in order (the hardware prefetchers follow) while K,
              * read a column block at a time across rows, is fetched into L2 meanwhile */
        ok &= kvp_q2h_tok_encode_pf(v, rows, D, l.gv, KVP_Q2_RULE_KIVI, p + l.v_codes,
                                    p + l.v_scale, p + l.v_zero, k, rows * D * sizeof(uint16_t));
        ok &= kvp_q2h_chan_encode(k, (size_t)H * D, g->valid, H * D, D, G, KVP_Q2_RULE_KIVI,
                                  p + l.k_codes, p + l.k_scale, p + l.k_zero, NULL, 0); /* all heads */
    }
    if (!ok) {
        KVP_LOG_DEBUG("codec", "encode: input has NaN, Inf or |x| > 65504 (layer %u)", info->layer);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    return KVP_OK;
}

static kvp_status_t kivi_dec_h(const kvp_codec_geom_t *g, const uint8_t *p, uint16_t *k_out,
                                  uint16_t *v_out, uint32_t G)
{
    kvp_hd_q2_layout_t l;
    size_t             rows = (size_t)g->valid * g->heads;
    uint32_t           D = g->head_dim, H = g->heads;

    if (!kivi_h_ok(g, G)) {
        return KVP_ERR_UNSUPPORTED;
    }
    kivi_layout(g, G, &l);
    if (k_out != NULL && G == 0) {
        kvp_q2h_tok_decode(p + l.k_codes, p + l.k_scale, p + l.k_zero, rows, D, D, k_out);
    } else if (k_out != NULL) {
        uint32_t ngk = (g->valid + G - 1) / G;
        size_t   rt  = kvp_hd_run_bytes(g->valid);
        uint32_t hb  = (uint32_t)H * D <= 1024 ? H : 1; /* heads per call */

        for (uint32_t h = 0; h < H; h += hb) {
            kvp_q2h_chan_decode(p + l.k_codes + (size_t)h * D * rt,
                                p + l.k_scale + 2 * (size_t)h * ngk * D,
                                p + l.k_zero + 2 * (size_t)h * ngk * D, g->valid, hb * D, D, G,
                                k_out + (size_t)h * D, (size_t)H * D);
        }
    }
    if (v_out != NULL) {
        kvp_q2h_tok_decode(p + l.v_codes, p + l.v_scale, p + l.v_zero, rows, D, l.gv, v_out);
    }
    return KVP_OK;
}

#define KIVI_H_OPS(_name, _G)                                                                    \
    static kvp_status_t _name##_encode_h(const kvp_codec_geom_t *g, const uint16_t *k,          \
                                         const uint16_t *v, kvp_page_info_t *info,               \
                                         uint8_t *payload)                                       \
    {                                                                                            \
        return kivi_enc_h(g, k, v, info, payload, _G);                                          \
    }                                                                                            \
    static kvp_status_t _name##_decode_h(const kvp_codec_geom_t *g, const kvp_page_info_t *info, \
                                         const uint8_t *payload, kvp_frame_t frame,              \
                                         uint16_t *k_out, uint16_t *v_out)                       \
    {                                                                                            \
        (void)info;                                                                              \
        (void)frame;                                                                             \
        return kivi_dec_h(g, payload, k_out, v_out, _G);                                        \
    }

KIVI_H_OPS(kivi, 32)
KIVI_H_OPS(kivi128, 128)
KIVI_H_OPS(naive2, 0)

/* ---- one ops table per (codec, implementation) ---- */

#define KIVI_OPS(_name, _cname, _G, _impl, _kern, _ench, _dech)                                   \
    static kvp_status_t _name##_##_impl##_check(const kvp_codec_geom_t *g)                      \
    {                                                                                            \
        return kivi_check_g(g, _G);                                                              \
    }                                                                                            \
    static size_t _name##_##_impl##_bytes(const kvp_codec_geom_t *g)                            \
    {                                                                                            \
        kvp_hd_q2_layout_t l;                                                                    \
        kivi_layout(g, _G, &l);                                                                  \
        return l.total;                                                                          \
    }                                                                                            \
    static kvp_status_t _name##_##_impl##_encode(const kvp_codec_geom_t *g, const float *k,     \
                                                 const float *v, kvp_page_info_t *info,          \
                                                 uint8_t *payload)                               \
    {                                                                                            \
        return kivi_encode_g(g, k, v, info, payload, _G, &(_kern));                              \
    }                                                                                            \
    static int _name##_##_impl##_params_ok(const kvp_codec_geom_t *g, const uint8_t *payload)   \
    {                                                                                            \
        return kivi_params_ok(g, payload, _G);                                                   \
    }                                                                                            \
    static kvp_status_t _name##_##_impl##_decode(const kvp_codec_geom_t *g,                     \
                                                 const kvp_page_info_t *info,                    \
                                                 const uint8_t *payload, kvp_frame_t frame,      \
                                                 float *k_out, float *v_out)                     \
    {                                                                                            \
        (void)info;                                                                              \
        (void)frame;                                                                             \
        return kivi_decode_g(g, payload, k_out, v_out, _G, &(_kern));                            \
    }                                                                                            \
    const kvp_codec_ops_t kvp_codec_##_name##_##_impl = {                                       \
        .name = _cname, .impl = #_impl, .check = _name##_##_impl##_check,                        \
        .payload_bytes = _name##_##_impl##_bytes, .encode = _name##_##_impl##_encode,            \
        .params_ok = _name##_##_impl##_params_ok, .decode = _name##_##_impl##_decode,            \
        .encode_h = _ench, .decode_h = _dech,                                                    \
    };

KIVI_OPS(kivi, "kivi", 32, ref, kvp_q2_ref, NULL, NULL)
KIVI_OPS(kivi, "kivi", 32, avx2, kvp_q2_avx2, kivi_encode_h, kivi_decode_h)
KIVI_OPS(kivi128, "kivi128", 128, ref, kvp_q2_ref, NULL, NULL)
KIVI_OPS(kivi128, "kivi128", 128, avx2, kvp_q2_avx2, kivi128_encode_h, kivi128_decode_h)
KIVI_OPS(naive2, "naive2", 0, ref, kvp_q2_ref, NULL, NULL)
KIVI_OPS(naive2, "naive2", 0, avx2, kvp_q2_avx2, naive2_encode_h, naive2_decode_h)
