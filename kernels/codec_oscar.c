/* codec_oscar.c - the "oscar" codec (CODECS.md 1): K rotated per head by the normalized
 * Walsh-Hadamard transform (fp32), one L2 norm per token over ALL the page's heads (fp32, zero or
 * NaN -> 1), K'' = f16(f16(K')/norm) as in the reference's fp16 model path, then per-channel
 * 2-bit groups of 32 tokens with the OScaR integer zero point (quant_hd.h kvp_hd_oscar_*).
 * V: Hadamard (skipped under KVP_PAGE_F_V_PREROT: the engine folded it into W_v/W_o), rounded to
 * fp16, then per-token groups of gv = min(32, D) channels, same rule. D: power of two >= 8.
 * Our choices where the reference is GPU-specific: a plain layout instead of the MMA fragment
 * order, groups over the page's valid tokens (the reference only packs 256-token tiles).
 *
 * Payload (T = valid, rt = ceil(T/4), ngk = ceil(T/32), rd = D/4, ngv = D/gv):
 *   section   size             layout
 *   norms     4*T              fp32 [t], little-endian
 *   K codes   H*D*rt           [h][d] runs along tokens
 *   K scale   2*H*ngk*D        fp16 [h][group][d]
 *   K zd      2*H*ngk*D        fp16 [h][group][d]; dequant = q*scale + zd
 *   V codes   T*H*rd           [t][h] runs along channels
 *   V scale   2*T*H*ngv        fp16 [t][h][group]
 *   V zd      2*T*H*ngv        fp16 [t][h][group] */
#include "codec_ops.h"
#include "kvpack/log.h"
#include "q2h_int.h"
#include "quant_hd.h"

#include <string.h>

#define OSCAR_G 32u

/* The page's offsets (quant_hd.h, shared with the CUDA twin and attention); norms at 0. */
static kvp_hd_q2_layout_t oscar_layout(const kvp_codec_geom_t *g)
{
    uint32_t gv = g->head_dim < OSCAR_G ? g->head_dim : OSCAR_G;

    return kvp_hd_q2_layout(1, g->valid, g->heads, g->head_dim, OSCAR_G, gv);
}

static kvp_status_t oscar_check(const kvp_codec_geom_t *g)
{
    if (g->head_dim < 8 || (g->head_dim & (g->head_dim - 1)) != 0) {
        return KVP_ERR_UNSUPPORTED;
    }
    return KVP_OK;
}

static int oscar_params_ok(const kvp_codec_geom_t *g, const uint8_t *payload)
{
    kvp_hd_q2_layout_t l = oscar_layout(g);

    return kvp_q2_params_ok(payload, &l, (size_t)g->heads * g->head_dim);
}

static size_t oscar_bytes(const kvp_codec_geom_t *g)
{
    kvp_hd_q2_layout_t l = oscar_layout(g);
    return l.total;
}

/* Common end of both encoders: |zd| = zq*s can exceed the V range by s/2, and beyond 65504 it is
 * not storable in fp16; then the header fields. */
static kvp_status_t oscar_finish(const kvp_codec_geom_t *g, kvp_page_info_t *info, const uint8_t *p,
                                 const kvp_hd_q2_layout_t *l)
{
    if (!kvp_hd_f16_all_finite(p + l->v_zero, (size_t)g->valid * g->heads * (g->head_dim / l->gv))) {
        KVP_LOG_DEBUG("codec", "oscar: V zero point overflows fp16 (layer %u)", info->layer);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    info->flags |= KVP_PAGE_F_K_ROTATED;
    info->bits_k  = 2;
    info->bits_v  = 2;
    info->group_k = OSCAR_G;
    info->group_v = l->gv;
    return KVP_OK;
}

static kvp_status_t oscar_encode_k(const kvp_codec_geom_t *g, const float *k, const float *v,
                                   kvp_page_info_t *info, uint8_t *p, const kvp_q2_kern_t *kk)
{
    kvp_hd_q2_layout_t  l = oscar_layout(g);
    uint32_t            H = g->heads, D = g->head_dim, T = g->valid;
    size_t              n = (size_t)T * H * D, rt = l.rt;
    float              *kr = kvp_codec_scratch(2, n * sizeof(float));
    float              *norms = kvp_codec_scratch(4, T * sizeof(float));
    const float        *vr = v;

    if (kr == NULL || norms == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    if (!kk->rot_rows(k, kr, (size_t)T * H, D, 0)) {
        /* every input value may be within +-65504 and a rotated one not (up to sqrt(D) x) */
        KVP_LOG_ERROR("codec", "oscar: layer %u: K after the Hadamard rotation passes the fp16 "
                      "range (|x| > 65504; inputs above 65504/sqrt(D) can)", info->layer);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    kk->oscar_norm(kr, T, H * D, norms);
    memcpy(p, norms, 4 * (size_t)T);
    for (uint32_t h = 0; h < H; h++) {
        kk->chan_encode(kr + (size_t)h * D, (size_t)H * D, T, D, OSCAR_G, KVP_Q2_RULE_OSCAR,
                        p + l.k_codes + (size_t)h * D * rt, p + l.k_scale + 2 * (size_t)h * l.ngk * D,
                        p + l.k_zero + 2 * (size_t)h * l.ngk * D);
    }
    if (!(info->flags & KVP_PAGE_F_V_PREROT)) {
        float *vs = kvp_codec_scratch(3, n * sizeof(float));

        if (vs == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        if (!kk->rot_rows(v, vs, (size_t)T * H, D, 1)) {
            /* every input value may be within +-65504 and a rotated one not (up to sqrt(D) x) */
        KVP_LOG_ERROR("codec", "oscar: layer %u: V after the Hadamard rotation passes the fp16 "
                      "range (|x| > 65504; inputs above 65504/sqrt(D) can)", info->layer);
            return KVP_ERR_BAD_INPUT_DATA;
        }
        vr = vs;
        info->flags |= KVP_PAGE_F_V_ROTATED;
    }
    kk->tok_encode(vr, (size_t)T * H, D, l.gv, KVP_Q2_RULE_OSCAR, p + l.v_codes, p + l.v_scale,
                   p + l.v_zero);
    return oscar_finish(g, info, p, &l);
}

static kvp_status_t oscar_decode_k(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                                   const uint8_t *p, kvp_frame_t frame, float *k_out,
                                   float *v_out, const kvp_q2_kern_t *kk)
{
    kvp_hd_q2_layout_t l = oscar_layout(g);
    uint32_t           H = g->heads, D = g->head_dim, T = g->valid;
    size_t             rt = l.rt;

    if (k_out != NULL) {
        for (uint32_t h = 0; h < H; h++) {
            kk->chan_decode(p + l.k_codes + (size_t)h * D * rt,
                            p + l.k_scale + 2 * (size_t)h * l.ngk * D,
                            p + l.k_zero + 2 * (size_t)h * l.ngk * D, T, D, OSCAR_G,
                            k_out + (size_t)h * D, (size_t)H * D);
        }
        if (frame == KVP_FRAME_ORIGINAL) {
            float *norms = kvp_codec_scratch(4, T * sizeof(float));

            if (norms == NULL) {
                return KVP_ERR_NO_MEMORY;
            }
            memcpy(norms, p, 4 * (size_t)T);
            kk->scale_rows(k_out, T, H * D, norms);
            kk->rot_rows(k_out, k_out, (size_t)T * H, D, 0);
        }
    }
    if (v_out != NULL) {
        kk->tok_decode(p + l.v_codes, p + l.v_scale, p + l.v_zero, (size_t)T * H, D, l.gv, v_out);
        if (frame == KVP_FRAME_ORIGINAL && (info->flags & KVP_PAGE_F_V_ROTATED)) {
            kk->rot_rows(v_out, v_out, (size_t)T * H, D, 0);
        }
    }
    return KVP_OK;
}

/* ---- fp16 in/out (AVX2 only): rotation, norm and fp16 rounding fused, no fp32 copies ---- */

static int oscar_h_ok(const kvp_codec_geom_t *g)
{
    uint32_t D = g->head_dim;

    return kvp_cpu_has_avx2() && kvp_q2h_rot_ok(D) && kvp_q2h_chan_ok(D, OSCAR_G) &&
           kvp_q2h_tok_ok(D, D < OSCAR_G ? D : OSCAR_G);
}

/* which input was bad: NaN/Inf in it, or its rotation overflows fp16 */
static void oscar_h_log(const uint16_t *x, size_t n, const char *what, uint32_t layer)
{
    for (size_t i = 0; i < n; i++) {
        if ((x[i] & 0x7C00u) == 0x7C00u) {
            KVP_LOG_DEBUG("codec", "encode: input has NaN, Inf or |x| > 65504 (layer %u)", layer);
            return;
        }
    }
    KVP_LOG_DEBUG("codec", "oscar: rotated %s exceeds the fp16 range (layer %u)", what, layer);
}

static kvp_status_t oscar_encode_h(const kvp_codec_geom_t *g, const uint16_t *k,
                                   const uint16_t *v, kvp_page_info_t *info, uint8_t *p)
{
    kvp_hd_q2_layout_t  l = oscar_layout(g);
    uint32_t            H = g->heads, D = g->head_dim, T = g->valid;
    size_t              n = (size_t)T * H * D, rt = l.rt;
    uint16_t           *kr, *vs;
    float              *norms, *row;
    const uint16_t     *vr = v;

    if (!oscar_h_ok(g)) {
        return KVP_ERR_UNSUPPORTED;
    }
    kr    = kvp_codec_scratch(2, n * sizeof(uint16_t));
    vs    = kvp_codec_scratch(3, 16384 * sizeof(uint16_t));
    norms = kvp_codec_scratch(4, T * sizeof(float));
    row   = kvp_codec_scratch(5, (size_t)H * D * sizeof(float)); /* two tokens of f16 */
    if (kr == NULL || vs == NULL || norms == NULL || row == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    if (!kvp_q2h_oscar_rot_norm(k, T, H, D, row, kr, norms)) {
        oscar_h_log(k, n, "K", info->layer);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    memcpy(p, norms, 4 * (size_t)T);
    (void)rt; /* all heads at once; finite by now */
    kvp_q2h_chan_encode(kr, (size_t)H * D, T, H * D, D, OSCAR_G, KVP_Q2_RULE_OSCAR,
                        p + l.k_codes, p + l.k_scale, p + l.k_zero, v, n * sizeof(uint16_t));
    if (!(info->flags & KVP_PAGE_F_V_PREROT)) {
        size_t rows = (size_t)T * H, chunk = 16384 / D; /* rotated rows staged in 32 KiB */

        for (size_t r0 = 0; r0 < rows; r0 += chunk) {
            size_t nr = rows - r0 < chunk ? rows - r0 : chunk, ng = D / l.gv;

            kvp_q2h_rot16(v + r0 * D, nr, D, vs);
            if (!kvp_q2h_tok_encode(vs, nr, D, l.gv, KVP_Q2_RULE_OSCAR,
                                    p + l.v_codes + r0 * (D / 4), p + l.v_scale + 2 * r0 * ng,
                                    p + l.v_zero + 2 * r0 * ng)) { /* Inf/NaN keys */
                oscar_h_log(v, n, "V", info->layer);
                return KVP_ERR_BAD_INPUT_DATA;
            }
        }
        info->flags |= KVP_PAGE_F_V_ROTATED;
    } else if (!kvp_q2h_tok_encode(vr, (size_t)T * H, D, l.gv, KVP_Q2_RULE_OSCAR,
                                   p + l.v_codes, p + l.v_scale, p + l.v_zero)) {
        KVP_LOG_DEBUG("codec", "encode: input has NaN, Inf or |x| > 65504 (layer %u)", info->layer);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    return oscar_finish(g, info, p, &l);
}

static kvp_status_t oscar_decode_h(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                                   const uint8_t *p, kvp_frame_t frame, uint16_t *k_out,
                                   uint16_t *v_out)
{
    kvp_hd_q2_layout_t l = oscar_layout(g);
    uint32_t           H = g->heads, D = g->head_dim, T = g->valid;
    size_t             rt = l.rt;

    if (!oscar_h_ok(g)) {
        return KVP_ERR_UNSUPPORTED;
    }
    if (k_out != NULL && frame == KVP_FRAME_ORIGINAL) {
        float *norms = kvp_codec_scratch(4, T * sizeof(float));
        float *tile  = kvp_codec_scratch(5, 32 * (size_t)D * sizeof(float));

        if (norms == NULL || tile == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(norms, p, 4 * (size_t)T);
        for (uint32_t h = 0; h < H; h++) {
            kvp_q2h_chan_decode_rot(p + l.k_codes + (size_t)h * D * rt,
                                    p + l.k_scale + 2 * (size_t)h * l.ngk * D,
                                    p + l.k_zero + 2 * (size_t)h * l.ngk * D, T, D, OSCAR_G, norms,
                                    tile, k_out + (size_t)h * D, (size_t)H * D);
        }
    } else if (k_out != NULL) {
        uint32_t hb = (uint32_t)H * D <= 1024 ? H : 1; /* heads per call */

        for (uint32_t h = 0; h < H; h += hb) {
            kvp_q2h_chan_decode(p + l.k_codes + (size_t)h * D * rt,
                                p + l.k_scale + 2 * (size_t)h * l.ngk * D,
                                p + l.k_zero + 2 * (size_t)h * l.ngk * D, T, hb * D, D, OSCAR_G,
                                k_out + (size_t)h * D, (size_t)H * D);
        }
    }
    if (v_out != NULL) {
        if (frame == KVP_FRAME_ORIGINAL && (info->flags & KVP_PAGE_F_V_ROTATED)) {
            kvp_q2h_tok_decode_rot(p + l.v_codes, p + l.v_scale, p + l.v_zero, (size_t)T * H, D,
                                   l.gv, v_out);
        } else {
            kvp_q2h_tok_decode(p + l.v_codes, p + l.v_scale, p + l.v_zero, (size_t)T * H, D, l.gv,
                               v_out);
        }
    }
    return KVP_OK;
}

#define OSCAR_OPS(_impl, _kern, _ench, _dech)                                                                  \
    static kvp_status_t oscar_encode_##_impl(const kvp_codec_geom_t *g, const float *k,         \
                                             const float *v, kvp_page_info_t *info, uint8_t *p)  \
    {                                                                                            \
        return oscar_encode_k(g, k, v, info, p, &(_kern));                                       \
    }                                                                                            \
    static kvp_status_t oscar_decode_##_impl(const kvp_codec_geom_t *g,                         \
                                             const kvp_page_info_t *info, const uint8_t *p,      \
                                             kvp_frame_t frame, float *k_out, float *v_out)      \
    {                                                                                            \
        return oscar_decode_k(g, info, p, frame, k_out, v_out, &(_kern));                        \
    }                                                                                            \
    const kvp_codec_ops_t kvp_codec_oscar_##_impl = {                                           \
        .name = "oscar", .impl = #_impl, .check = oscar_check, .payload_bytes = oscar_bytes,     \
        .params_ok = oscar_params_ok, .encode = oscar_encode_##_impl,                            \
        .decode = oscar_decode_##_impl, .encode_h = _ench, .decode_h = _dech,                    \
    };

OSCAR_OPS(ref, kvp_q2_ref, NULL, NULL)
OSCAR_OPS(avx2, kvp_q2_avx2, oscar_encode_h, oscar_decode_h)
