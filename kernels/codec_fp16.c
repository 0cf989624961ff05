/* codec_fp16.c - the "fp16" codec: K then V as raw IEEE half, [valid][H][D] each.
 * Payload: offset 0, 2*valid*H*D bytes K; then 2*valid*H*D bytes V. Used for session tails
 * and as the uncompressed baseline. Conversions go through the front door's (F16C) converters. */
#include "codec_ops.h"
#include "kvpack/log.h"

static kvp_status_t fp16_check(const kvp_codec_geom_t *g)
{
    (void)g;
    return KVP_OK;
}

static size_t fp16_payload_bytes(const kvp_codec_geom_t *g)
{
    return (size_t)2 * 2 * g->valid * g->heads * g->head_dim;
}

static kvp_status_t fp16_encode(const kvp_codec_geom_t *g, const float *k, const float *v,
                                kvp_page_info_t *info, uint8_t *payload)
{
    size_t    n = (size_t)g->valid * g->heads * g->head_dim;
    uint16_t *h = (uint16_t *)(void *)payload;

    info->bits_k = info->bits_v = 16;
    kvp_cvt_ops()->store_f16(k, n, h);
    kvp_cvt_ops()->store_f16(v, n, h + n);
    return KVP_OK;
}

static kvp_status_t fp16_decode(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                                const uint8_t *payload, kvp_frame_t frame, float *k_out,
                                float *v_out)
{
    size_t          n = (size_t)g->valid * g->heads * g->head_dim;
    const uint16_t *h = (const uint16_t *)(const void *)payload;

    (void)info;
    (void)frame;
    /* the encoder stores finite halves only: Inf/NaN here is a page no codec wrote (its CRC
     * made to match), refused as it is converted rather than in kvp_page_parse (a second pass
     * over the whole payload on every parse) */
    if ((k_out != NULL && kvp_cvt_ops()->load_f16(h, n, k_out) != KVP_OK) ||
        (v_out != NULL && kvp_cvt_ops()->load_f16(h + n, n, v_out) != KVP_OK)) {
        KVP_LOG_DEBUG("codec", "fp16 page holds Inf/NaN");
        return KVP_ERR_BAD_PAGE;
    }
    return KVP_OK;
}

const kvp_codec_ops_t kvp_codec_fp16_ref = {
    .name = "fp16", .impl = "ref", .check = fp16_check, .payload_bytes = fp16_payload_bytes,
    .encode = fp16_encode, .decode = fp16_decode,
};
