/* codec_ops.h - internal: the per-codec operations table behind codec.c.
 * Each codec file defines one kvp_codec_ops_t per implementation (ref, avx2); codec_dispatch.c
 * picks one per codec once at start-up. Inputs to encode are finite fp32 [valid][H][D]. */
#ifndef KVPACK_CODEC_OPS_H
#define KVPACK_CODEC_OPS_H

#include "kvpack/codec.h"

typedef struct {
    uint32_t heads;
    uint32_t head_dim;
    uint32_t capacity; /* P */
    uint32_t valid;    /* tokens present, 1..P */
} kvp_codec_geom_t;

typedef struct {
    const char *name; /* codec name */
    const char *impl; /* "ref", "avx2", ... */
    /* KVP_OK when the codec supports this geometry. */
    kvp_status_t (*check)(const kvp_codec_geom_t *g);
    size_t (*payload_bytes)(const kvp_codec_geom_t *g);
    /* Write the payload; may set info->flags (rotation bits), bits_k/v, group_k/v, aux. */
    kvp_status_t (*encode)(const kvp_codec_geom_t *g, const float *k, const float *v,
                           kvp_page_info_t *info, uint8_t *payload);
    /* k_out / v_out may be NULL. */
    kvp_status_t (*decode)(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                           const uint8_t *payload, kvp_frame_t frame, float *k_out, float *v_out);
} kvp_codec_ops_t;

/* Table indexed by kvp_codec_id_t, chosen once (CPU features, KVPACK_CODEC_IMPL=ref). */
const kvp_codec_ops_t *const *kvp_codec_ops_table(void);

#endif
