/* codec_kvarn.c - the "kvarn" codec (CODECS.md 2): one tile per (page x head) over the valid
 * tokens. K and V are rotated by the normalized Walsh-Hadamard transform and rounded to fp16
 * (the reference's fp16 GEMM; V skipped under KVP_PAGE_F_V_PREROT). VarN (2.2) balances each
 * tile X [R][C] (K: rows = channels, cols = tokens; V: rows = tokens, cols = channels), then
 * per-row 2-bit RTN on X/Sc/Sr with the RTN parameters absorbed into the scales:
 *   Xhat[r][c] = (q[r][c] * A[r] + Z[r]) * B[c],  A = Sr*s, Z = Sr*lo, B = Sc  (all fp16).
 * VarN iterations: header aux (default 8). D: power of two >= 8.
 *
 * Payload: H tile records back to back, record h (T = valid, rt = ceil(T/4), rd = D/4):
 *   offset                     size    field
 *   0                          D*rt    K codes, row d (channel) runs along tokens
 *   D*rt                       2*D     K A = s_col_K [d]  (absorbed per-channel scale)
 *   D*rt + 2D                  2*D     K Z = zp_K [d]
 *   D*rt + 4D                  2*T     K B = s_row_K [t]  (per-token VarN scale)
 *   kv = D*rt + 4D + 2T        T*rd    V codes, row t (token) runs along channels
 *   kv + T*rd                  2*T     V A = s_row_V [t]  (absorbed per-token scale)
 *   kv + T*rd + 2T             2*T     V Z = zp_V [t]
 *   kv + T*rd + 4T             2*D     V B = s_col_V [d]  (per-channel VarN scale)
 * record size = D*rt + T*rd + 6D + 6T bytes (9728 at D = T = 128: 2.375 bits/elem). */
#include "codec_ops.h"
#include "kvpack/log.h"
#include "q2h_int.h"
#include "quant_hd.h"

#include <string.h>

/* One head's record (quant_hd.h, shared with the CUDA twin and attention); K codes at 0. */
static void kvarn_layout(const kvp_codec_geom_t *g, kvp_hd_kvarn_layout_t *l)
{
    *l = kvp_hd_kvarn_layout(g->valid, g->head_dim);
}

static kvp_status_t kvarn_check(const kvp_codec_geom_t *g)
{
    if (g->head_dim < 8 || (g->head_dim & (g->head_dim - 1)) != 0) {
        return KVP_ERR_UNSUPPORTED;
    }
    return KVP_OK;
}

static size_t kvarn_bytes(const kvp_codec_geom_t *g)
{
    kvp_hd_kvarn_layout_t l;

    kvarn_layout(g, &l);
    return l.rec * g->heads;
}

static int kvarn_params_ok(const kvp_codec_geom_t *g, const uint8_t *payload)
{
    kvp_hd_kvarn_layout_t l;

    kvarn_layout(g, &l);
    return kvp_hd_kvarn_params_finite(payload, g->heads, &l);
}

/* Common end of both encoders: the absorbed scales Sr*s, Sr*lo can exceed the data range
 * (Sc >= e^-0.3) and must stay fp16; then the header fields. */
static kvp_status_t kvarn_finish(const kvp_codec_geom_t *g, kvp_page_info_t *info, const uint8_t *p,
                                 const kvp_hd_kvarn_layout_t *l, uint32_t iters)
{
    if (!kvp_hd_kvarn_params_finite(p, g->heads, l)) {
        KVP_LOG_DEBUG("codec", "kvarn: absorbed scale overflows fp16 (layer %u)", info->layer);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    info->flags |= KVP_PAGE_F_K_ROTATED;
    info->aux     = iters;
    info->bits_k  = 2;
    info->bits_v  = 2;
    info->group_k = g->valid;
    info->group_v = g->head_dim;
    return KVP_OK;
}

/* The per-tile workspace both encoders share: X (one T x D tile), the VarN scales Sc, Sr and
 * work after it (per-thread scratch slot 4); *iters_p gets the page's VarN iteration count. */
static kvp_status_t kvarn_tile_work(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                                    uint32_t *iters_p, float **X_p, float **Sc_p, float **Sr_p,
                                    float **work_p)
{
    uint32_t T = g->valid, D = g->head_dim;
    size_t   tile = (size_t)T * D;
    float   *X    = kvp_codec_scratch(4, (3 * tile + 6 * (size_t)(T + D)) * sizeof(float));

    if (X == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    *iters_p = info->aux == 0 || info->aux > KVP_VARN_MAX_ITERS ? KVP_VARN_ITERS : info->aux;
    *X_p     = X;
    *Sc_p    = X + tile;
    *Sr_p    = *Sc_p + T + D;
    *work_p  = *Sr_p + T + D;
    return KVP_OK;
}

static kvp_status_t kvarn_encode_k(const kvp_codec_geom_t *g, const float *k, const float *v,
                                   kvp_page_info_t *info, uint8_t *p, const kvp_q2_kern_t *kk)
{
    kvp_hd_kvarn_layout_t l;
    uint32_t              H = g->heads, D = g->head_dim, T = g->valid, iters;
    size_t                n = (size_t)T * H * D;
    float                *kr = kvp_codec_scratch(2, n * sizeof(float));
    float                *X, *Sc, *Sr, *work;
    const float          *vr = v;
    kvp_next_rows_t       next;

    if (kr == NULL || kvarn_tile_work(g, info, &iters, &X, &Sc, &Sr, &work) != KVP_OK) {
        return KVP_ERR_NO_MEMORY;
    }
    kvarn_layout(g, &l);
    if (!kk->rot_rows(k, kr, (size_t)T * H, D, 1)) {
        /* every input value may be within +-65504 and a rotated one not (up to sqrt(D) x) */
        KVP_LOG_ERROR("codec", "kvarn: layer %u: K after the Hadamard rotation passes the fp16 "
                      "range (|x| > 65504; inputs above 65504/sqrt(D) can)", info->layer);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    if (!(info->flags & KVP_PAGE_F_V_PREROT)) {
        float *vs = kvp_codec_scratch(3, n * sizeof(float));

        if (vs == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        if (!kk->rot_rows(v, vs, (size_t)T * H, D, 1)) {
            /* every input value may be within +-65504 and a rotated one not (up to sqrt(D) x) */
        KVP_LOG_ERROR("codec", "kvarn: layer %u: V after the Hadamard rotation passes the fp16 "
                      "range (|x| > 65504; inputs above 65504/sqrt(D) can)", info->layer);
            return KVP_ERR_BAD_INPUT_DATA;
        }
        vr = vs;
        info->flags |= KVP_PAGE_F_V_ROTATED;
    }
    for (uint32_t h = 0; h < H; h++) {
        uint8_t *rec = p + (size_t)h * l.rec;

        /* K tile [D][T] */
        for (uint32_t t = 0; t < T; t++) {
            const float *src = kr + ((size_t)t * H + h) * D;

            for (uint32_t d = 0; d < D; d++) {
                X[(size_t)d * T + t] = src[d];
            }
        }
        /* the rows read next (the rotated fp32 copies: stride H*D floats) arrive during VarN */
        next = (kvp_next_rows_t){vr + (size_t)h * D, 4 * (size_t)H * D, T, 4 * (size_t)D};
        kk->varn(X, D, T, iters, Sc, Sr, work, &next);
        kk->kvarn_rtn(X, D, T, Sc, Sr, rec, rec + l.k_a, rec + l.k_z, rec + l.k_b);
        /* V tile [T][D] */
        for (uint32_t t = 0; t < T; t++) {
            memcpy(X + (size_t)t * D, vr + ((size_t)t * H + h) * D, D * sizeof(float));
        }
        next = (kvp_next_rows_t){kr + (size_t)(h + 1) * D, 4 * (size_t)H * D, h + 1 < H ? T : 0,
                                 4 * (size_t)D};
        kk->varn(X, T, D, iters, Sc, Sr, work, &next);
        kk->kvarn_rtn(X, T, D, Sc, Sr, rec + l.v_codes, rec + l.v_a, rec + l.v_z, rec + l.v_b);
    }
    return kvarn_finish(g, info, p, &l, iters);
}

static kvp_status_t kvarn_decode_k(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                                   const uint8_t *p, kvp_frame_t frame, float *k_out,
                                   float *v_out, const kvp_q2_kern_t *kk)
{
    kvp_hd_kvarn_layout_t l;
    uint32_t              H = g->heads, D = g->head_dim, T = g->valid;
    size_t                HD = (size_t)H * D;

    kvarn_layout(g, &l);
    for (uint32_t h = 0; h < H; h++) {
        const uint8_t *rec = p + (size_t)h * l.rec;

        if (k_out != NULL) {
            kk->kvarn_deq(rec, rec + l.k_a, rec + l.k_z, rec + l.k_b, D, T,
                          k_out + (size_t)h * D, 1, HD);
        }
        if (v_out != NULL) {
            kk->kvarn_deq(rec + l.v_codes, rec + l.v_a, rec + l.v_z, rec + l.v_b, T, D,
                          v_out + (size_t)h * D, HD, 1);
        }
    }
    if (frame == KVP_FRAME_ORIGINAL) {
        if (k_out != NULL) {
            kk->rot_rows(k_out, k_out, (size_t)T * H, D, 0);
        }
        if (v_out != NULL && (info->flags & KVP_PAGE_F_V_ROTATED)) {
            kk->rot_rows(v_out, v_out, (size_t)T * H, D, 0);
        }
    }
    return KVP_OK;
}

/* ---- fp16 in (AVX2 only): rotation from fp16 and vector tile builders around the same VarN
 * and RTN primitives (T % 8 == 0 and D >= 16 for the transposed K tile; else the fp32 path) ---- */

static kvp_status_t kvarn_encode_h(const kvp_codec_geom_t *g, const uint16_t *k,
                                   const uint16_t *v, kvp_page_info_t *info, uint8_t *p)
{
    const kvp_q2_kern_t  *kk = &kvp_q2_avx2;
    kvp_hd_kvarn_layout_t l;
    uint32_t              H = g->heads, D = g->head_dim, T = g->valid, iters;
    float                *buf, *X, *Sc, *Sr, *work;
    kvp_next_rows_t       next;

    if (!kvp_cpu_has_avx2() || !kvp_q2h_rot_ok(D) || D < 16 || T % 8 != 0) {
        return KVP_ERR_UNSUPPORTED; /* the fp32 path */
    }
    buf = kvp_codec_scratch(3, 16 * (size_t)D * sizeof(float));
    if (buf == NULL || kvarn_tile_work(g, info, &iters, &X, &Sc, &Sr, &work) != KVP_OK) {
        return KVP_ERR_NO_MEMORY;
    }
    kvarn_layout(g, &l);
    for (uint32_t h = 0; h < H; h++) {
        uint8_t *rec = p + (size_t)h * l.rec;
        int      ok;

        /* K tile [D][T]: rotated rows transposed (NaN/Inf input shows up as overflow) */
        if (!kvp_q2h_rot_tile_t(k + (size_t)h * D, (size_t)H * D, T, D, buf, X)) {
            KVP_LOG_DEBUG("codec", "kvarn: K has NaN/Inf or its rotation exceeds the fp16 range (layer %u)",
                          info->layer);
            return KVP_ERR_BAD_INPUT_DATA;
        }
        /* the rows read next (this head's V, then the next head's K) arrive during VarN, a
         * few per row block: a burst of prefetches here stalled the VarN that followed */
        next = (kvp_next_rows_t){v + (size_t)h * D, 2 * (size_t)H * D, T, 2 * (size_t)D};
        kk->varn(X, D, T, iters, Sc, Sr, work, &next);
        kk->kvarn_rtn(X, D, T, Sc, Sr, rec, rec + l.k_a, rec + l.k_z, rec + l.k_b);
        /* V tile [T][D] */
        if (info->flags & KVP_PAGE_F_V_PREROT) {
            ok = kvp_q2h_tile(v + (size_t)h * D, (size_t)H * D, T, D, X);
        } else {
            ok = kvp_q2h_rot_tile(v + (size_t)h * D, (size_t)H * D, T, D, X);
        }
        if (!ok) {
            KVP_LOG_DEBUG("codec", "kvarn: V has NaN/Inf or its rotation exceeds the fp16 range (layer %u)",
                          info->layer);
            return KVP_ERR_BAD_INPUT_DATA;
        }
        next = (kvp_next_rows_t){k + (size_t)(h + 1) * D, 2 * (size_t)H * D, h + 1 < H ? T : 0,
                                 2 * (size_t)D};
        kk->varn(X, T, D, iters, Sc, Sr, work, &next);
        kk->kvarn_rtn(X, T, D, Sc, Sr, rec + l.v_codes, rec + l.v_a, rec + l.v_z, rec + l.v_b);
    }
    if (!(info->flags & KVP_PAGE_F_V_PREROT)) {
        info->flags |= KVP_PAGE_F_V_ROTATED;
    }
    return kvarn_finish(g, info, p, &l, iters);
}

#define KVARN_OPS(_impl, _kern, _ench)                                                                  \
    static kvp_status_t kvarn_encode_##_impl(const kvp_codec_geom_t *g, const float *k,         \
                                             const float *v, kvp_page_info_t *info, uint8_t *p)  \
    {                                                                                            \
        return kvarn_encode_k(g, k, v, info, p, &(_kern));                                       \
    }                                                                                            \
    static kvp_status_t kvarn_decode_##_impl(const kvp_codec_geom_t *g,                         \
                                             const kvp_page_info_t *info, const uint8_t *p,      \
                                             kvp_frame_t frame, float *k_out, float *v_out)      \
    {                                                                                            \
        return kvarn_decode_k(g, info, p, frame, k_out, v_out, &(_kern));                        \
    }                                                                                            \
    const kvp_codec_ops_t kvp_codec_kvarn_##_impl = {                                           \
        .name = "kvarn", .impl = #_impl, .check = kvarn_check, .payload_bytes = kvarn_bytes,     \
        .params_ok = kvarn_params_ok, .encode = kvarn_encode_##_impl,                            \
        .decode = kvarn_decode_##_impl, .encode_h = _ench,                                       \
    };

KVARN_OPS(ref, kvp_q2_ref, NULL)
KVARN_OPS(avx2, kvp_q2_avx2, kvarn_encode_h)
