/* codec.c - the codec front door: names, geometry checks, payload sizes, and kvp_page_encode /
 * kvp_page_decode, which validate, convert dtype and hand each codec's payload to its ops table
 * entry (codec_ops.h). The math of each codec lives in its own file (codec_fp16.c, ...). */
#include "kvpack/codec.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "codec_ops.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static const char *const codec_names[KVP_CODEC_MAX] = {
    [KVP_CODEC_FP16] = "fp16",   [KVP_CODEC_KIVI] = "kivi",   [KVP_CODEC_KIVI128] = "kivi128",
    [KVP_CODEC_OSCAR] = "oscar", [KVP_CODEC_KVARN] = "kvarn", [KVP_CODEC_NAIVE2] = "naive2",
};

const char *kvp_codec_name(kvp_codec_id_t codec)
{
    if ((unsigned)codec < KVP_CODEC_MAX && codec_names[codec] != NULL) {
        return codec_names[codec];
    }
    return "unknown";
}

kvp_status_t kvp_codec_from_name(const char *name, kvp_codec_id_t *codec_p)
{
    for (int c = 1; c < KVP_CODEC_MAX; c++) {
        if (codec_names[c] != NULL && strcmp(codec_names[c], name) == 0) {
            *codec_p = (kvp_codec_id_t)c;
            return KVP_OK;
        }
    }
    return KVP_ERR_INVALID;
}

static const kvp_codec_ops_t *codec_ops(kvp_codec_id_t codec)
{
    if ((unsigned)codec >= KVP_CODEC_MAX) {
        return NULL;
    }
    return kvp_codec_ops_table()[codec];
}

const char *kvp_codec_impl_name(kvp_codec_id_t codec)
{
    const kvp_codec_ops_t *ops = codec_ops(codec);

    return ops != NULL ? ops->impl : "none";
}

/* The page format's limits, which every codec's own check assumes (kivi divides by head_dim). */
static bool geom_in_limits(uint32_t heads, uint32_t head_dim, uint32_t capacity)
{
    return heads != 0 && heads <= KVP_PAGE_MAX_HEADS && head_dim != 0 &&
           head_dim <= KVP_PAGE_MAX_DIM && capacity != 0 && capacity <= KVP_PAGE_MAX_TOKENS;
}

size_t kvp_codec_payload_bytes(kvp_codec_id_t codec, uint32_t heads, uint32_t head_dim,
                               uint32_t capacity, uint32_t valid)
{
    const kvp_codec_ops_t *ops = codec_ops(codec);
    kvp_codec_geom_t       g   = {heads, head_dim, capacity, valid};

    if (ops == NULL || !geom_in_limits(heads, head_dim, capacity) || valid > capacity ||
        ops->check(&g) != KVP_OK) {
        return 0;
    }
    return ops->payload_bytes(&g);
}

kvp_status_t kvp_codec_check(const kvp_page_params_t *params)
{
    const kvp_codec_ops_t *ops = codec_ops(params->codec);
    kvp_codec_geom_t g = {params->heads, params->head_dim, params->page_tokens, params->page_tokens};
    kvp_status_t     status;

    if (ops == NULL) {
        return KVP_ERR_UNSUPPORTED;
    }
    if (!geom_in_limits(params->heads, params->head_dim, params->page_tokens)) {
        return KVP_ERR_INVALID;
    }
    status = ops->check(&g);
    if (status != KVP_OK) {
        return status;
    }
    /* a full page within the format's payload limit: kvp_page_parse (every node) refuses a
     * larger one, and past 4 GiB the header's 32-bit payload_len would wrap */
    return ops->payload_bytes(&g) <= KVP_PAGE_MAX_PAYLOAD ? KVP_OK : KVP_ERR_TOO_LARGE;
}

_Static_assert(KVP_PAGE_MAX_HEADS == 256 && KVP_PAGE_MAX_DIM == 1024 && KVP_PAGE_MAX_TOKENS == 4096 &&
                   KVP_PAGE_MAX_PAYLOAD == 256u << 20,
               "kvp_codec_geometry_rule states these limits");

const char *kvp_codec_geometry_rule(kvp_codec_id_t codec)
{
#define KVP_LIMITS                                                                                 \
    "1..256 heads, head_dim up to 1024, 1..4096 tokens a page, a page payload of at most 256 MiB"
    switch (codec) {
    case KVP_CODEC_KIVI:
        return "head_dim below 32 or a multiple of 32 (its V groups); " KVP_LIMITS;
    case KVP_CODEC_KIVI128:
        return "head_dim below 128 or a multiple of 128 (its V groups); " KVP_LIMITS;
    case KVP_CODEC_OSCAR:
    case KVP_CODEC_KVARN:
        return "head_dim a power of two, at least 8 (the Hadamard rotation); " KVP_LIMITS;
    default:
        return KVP_LIMITS;
    }
#undef KVP_LIMITS
}

size_t kvp_page_max_bytes(const kvp_page_params_t *params)
{
    if (kvp_codec_check(params) != KVP_OK) {
        return 0;
    }
    return KVP_PAGE_HDR_BYTES + kvp_codec_payload_bytes(params->codec, params->heads,
                                                        params->head_dim, params->page_tokens,
                                                        params->page_tokens);
}

/* Header fields the codec writes for this geometry: a page whose CRC is fine but whose bits,
 * groups, rotation flags or aux disagree is malformed (it was not written by this codec). */
static kvp_status_t fields_check(const kvp_page_info_t *in)
{
    uint32_t D = in->head_dim, bits = in->codec == KVP_CODEC_FP16 ? 16 : 2;
    uint32_t gk = 0, gv = 0, rot = 0, aux = 0;

    switch (in->codec) {
    case KVP_CODEC_FP16:    gk = 0;   gv = 0; break;
    case KVP_CODEC_KIVI:    gk = 32;  gv = D < 32 ? D : 32; break;
    case KVP_CODEC_KIVI128: gk = 128; gv = D < 128 ? D : 128; break;
    case KVP_CODEC_NAIVE2:  gk = D;   gv = D; break;
    case KVP_CODEC_OSCAR:   gk = 32;  gv = D < 32 ? D : 32; rot = 1; break;
    case KVP_CODEC_KVARN:   gk = in->valid; gv = D; rot = 1; aux = in->aux; break;
    default: break;
    }
    if (in->bits_k != bits || in->bits_v != bits || in->group_k != gk || in->group_v != gv) {
        KVP_LOG_DEBUG("codec", "page bits %u/%u groups %u/%u do not match codec %s", in->bits_k,
                      in->bits_v, in->group_k, in->group_v, kvp_codec_name(in->codec));
        return KVP_ERR_BAD_PAGE;
    }
    if (in->codec == KVP_CODEC_KVARN && (aux == 0 || aux > 64)) {
        KVP_LOG_DEBUG("codec", "kvarn page with %u varn iterations", aux);
        return KVP_ERR_BAD_PAGE;
    }
    if (in->codec != KVP_CODEC_KVARN && in->aux != 0) {
        KVP_LOG_DEBUG("codec", "page aux %u must be 0 for codec %s", in->aux,
                      kvp_codec_name(in->codec));
        return KVP_ERR_BAD_PAGE;
    }
    {
        uint32_t want_k = rot ? KVP_PAGE_F_K_ROTATED : 0;
        uint32_t want_v = rot && !(in->flags & KVP_PAGE_F_V_PREROT) ? KVP_PAGE_F_V_ROTATED : 0;

        if ((in->flags & KVP_PAGE_F_K_ROTATED) != want_k ||
            (in->flags & KVP_PAGE_F_V_ROTATED) != want_v) {
            KVP_LOG_DEBUG("codec", "page rotation flags 0x%x do not match codec %s", in->flags,
                          kvp_codec_name(in->codec));
            return KVP_ERR_BAD_PAGE;
        }
    }
    return KVP_OK;
}

/* The fp32 path: check or convert the input (per-thread scratch), then the codec's encode. */
static kvp_status_t encode_f32(const kvp_codec_ops_t *ops, const kvp_codec_geom_t *g,
                               kvp_dtype_t dtype, const void *k, const void *v, size_t n,
                               kvp_page_info_t *info, uint8_t *payload)
{
    const kvp_cvt_ops_t *cvt = kvp_cvt_ops();
    const float         *kf, *vf;
    kvp_status_t         status;
    if (dtype == KVP_DTYPE_F32) {
        kf     = k;
        vf     = v;
        status = cvt->check_f32(kf, n);
        if (status == KVP_OK) {
            status = cvt->check_f32(vf, n);
        }
    } else {
        float *ks = kvp_codec_scratch(0, n * sizeof(float));
        float *vs = kvp_codec_scratch(1, n * sizeof(float));

        if (ks == NULL || vs == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        status = cvt->load_f16(k, n, ks);
        if (status == KVP_OK) {
            status = cvt->load_f16(v, n, vs);
        }
        kf = ks;
        vf = vs;
    }
    if (status != KVP_OK) {
        KVP_LOG_DEBUG("codec", "encode: input has NaN, Inf or |x| > 65504 (layer %u)",
                      info->layer);
        return status;
    }

    return ops->encode(g, kf, vf, info, payload);
}

kvp_status_t kvp_page_encode(const kvp_page_params_t *params, kvp_dtype_t dtype, const void *k,
                             const void *v, uint32_t ntok, void *out, size_t out_cap,
                             size_t *len_p)
{
    const kvp_codec_ops_t *ops;
    kvp_codec_geom_t       g;
    kvp_page_info_t        info;
    kvp_status_t           status;
    size_t                 n, payload;

    if (params == NULL) {
        return KVP_ERR_INVALID;
    }
    status = kvp_codec_check(params);
    if (status != KVP_OK) {
        KVP_LOG_DEBUG("codec", "codec %s rejects heads %u head_dim %u page_tokens %u",
                      kvp_codec_name(params->codec), params->heads, params->head_dim,
                      params->page_tokens);
        return status;
    }
    if (ntok == 0 || ntok > params->page_tokens || k == NULL || v == NULL || out == NULL ||
        len_p == NULL || (dtype != KVP_DTYPE_F32 && dtype != KVP_DTYPE_F16) ||
        (params->flags & ~(uint32_t)(KVP_PAGE_F_V_PREROT | KVP_PAGE_F_TAIL | KVP_PAGE_F_SINK)) != 0 ||
        ((params->flags & KVP_PAGE_F_SINK) != 0 &&
         (params->codec != KVP_CODEC_FP16 || ntok != params->page_tokens ||
          (params->flags & KVP_PAGE_F_TAIL) != 0)) ||
        params->kvarn_iters > KVP_CODEC_KVARN_MAX_ITERS || params->layer >= KVP_LAYERS_MAX) {
        KVP_LOG_DEBUG("codec", "encode: bad arguments (ntok %u of %u, flags 0x%x, layer %u)",
                      ntok, params->page_tokens, params->flags, params->layer);
        return KVP_ERR_INVALID;
    }
    ops     = codec_ops(params->codec);
    g       = (kvp_codec_geom_t){params->heads, params->head_dim, params->page_tokens, ntok};
    payload = ops->payload_bytes(&g);
    if (out_cap < KVP_PAGE_HDR_BYTES + payload) {
        KVP_LOG_DEBUG("codec", "encode: output of %zu bytes, page needs %zu", out_cap,
                      KVP_PAGE_HDR_BYTES + payload);
        return KVP_ERR_TOO_LARGE;
    }
    memset(&info, 0, sizeof(info));
    info.codec       = params->codec;
    info.flags       = params->flags & (KVP_PAGE_F_V_PREROT | KVP_PAGE_F_TAIL | KVP_PAGE_F_SINK);
    info.valid       = ntok;
    info.capacity    = params->page_tokens;
    info.heads       = params->heads;
    info.head_dim    = params->head_dim;
    info.layer       = params->layer;
    info.first_pos   = params->first_pos;
    info.chunk_key   = params->chunk_key;
    info.payload_len = (uint32_t)payload;
    if (params->codec == KVP_CODEC_KVARN) {
        info.aux = params->kvarn_iters != 0 ? params->kvarn_iters : KVP_CODEC_KVARN_ITERS;
    }
    if (ntok < params->page_tokens) {
        info.flags |= KVP_PAGE_F_PARTIAL;
    }
    n      = (size_t)ntok * params->heads * params->head_dim;
    status = KVP_ERR_UNSUPPORTED;
    if (dtype == KVP_DTYPE_F16 && ops->encode_h != NULL) {
        status = ops->encode_h(&g, k, v, &info, (uint8_t *)out + KVP_PAGE_HDR_BYTES);
    }
    if (status == KVP_ERR_UNSUPPORTED) {
        status = encode_f32(ops, &g, dtype, k, v, n, &info, (uint8_t *)out + KVP_PAGE_HDR_BYTES);
    }
    if (status != KVP_OK) {
        return status;
    }
    kvp_page_hdr_write(&info, out);
    kvp_page_seal(out);
    *len_p = KVP_PAGE_HDR_BYTES + payload;
    return KVP_OK;
}

int kvp_q2_params_ok(const uint8_t *p, const kvp_hd_q2_layout_t *l, size_t hd)
{
    const kvp_cvt_ops_t *cv = kvp_cvt_ops();

    /* twice the encoder's bound (kvp_hd_norms_ok): room for its fp32 sum of squares */
    return kvp_hd_norms_ok(p, l->k_codes / 4, 2.0f * 65504.0f * sqrtf((float)hd)) &&
           cv->f16_finite(p + l->k_scale, (l->v_codes - l->k_scale) / 2) &&
           cv->f16_finite(p + l->v_scale, (l->total - l->v_scale) / 2);
}

kvp_status_t kvp_codec_page_check(const kvp_page_info_t *info, const uint8_t *payload)
{
    const kvp_codec_ops_t *ops = codec_ops((kvp_codec_id_t)info->codec);
    kvp_codec_geom_t       g   = {info->heads, info->head_dim, info->capacity, info->valid};
    kvp_status_t           status = fields_check(info);

    if (status == KVP_OK && ops->params_ok != NULL && !ops->params_ok(&g, payload)) {
        KVP_LOG_DEBUG("codec", "%s page (layer %u) holds a non-finite scale or zero, or a norm "
                      "that is not finite and > 0", kvp_codec_name(info->codec), info->layer);
        status = KVP_ERR_BAD_PAGE;
    }
    return status;
}

kvp_status_t kvp_page_decode(const void *page, size_t len, kvp_dtype_t dtype, kvp_frame_t frame,
                             void *k_out, void *v_out, kvp_page_info_t *info_p)
{
    const kvp_codec_ops_t *ops;
    kvp_page_info_t        info;
    kvp_codec_geom_t       g;
    kvp_status_t           status;
    size_t                 n;
    float                 *kf, *vf;

    if ((dtype != KVP_DTYPE_F32 && dtype != KVP_DTYPE_F16) ||
        (frame != KVP_FRAME_ORIGINAL && frame != KVP_FRAME_ROTATED)) {
        return KVP_ERR_INVALID;
    }
    status = kvp_page_parse(page, len, &info);
    if (status != KVP_OK) {
        return status;
    }
    ops = codec_ops((kvp_codec_id_t)info.codec);
    g   = (kvp_codec_geom_t){info.heads, info.head_dim, info.capacity, info.valid};
    if (ops->check(&g) != KVP_OK) {
        return KVP_ERR_BAD_PAGE; /* payload_bytes already returned 0 in parse; defensive */
    }
    n = (size_t)info.valid * info.heads * info.head_dim;
    if (dtype == KVP_DTYPE_F16 && ops->decode_h != NULL) {
        status = ops->decode_h(&g, &info, (const uint8_t *)page + KVP_PAGE_HDR_BYTES, frame,
                               k_out, v_out);
        if (status != KVP_ERR_UNSUPPORTED) {
            if (status == KVP_OK && info_p != NULL) {
                *info_p = info;
            }
            return status;
        }
    }
    if (dtype == KVP_DTYPE_F32) {
        kf = k_out;
        vf = v_out;
    } else {
        kf = k_out != NULL ? kvp_codec_scratch(0, n * sizeof(float)) : NULL;
        vf = v_out != NULL ? kvp_codec_scratch(1, n * sizeof(float)) : NULL;
        if ((k_out != NULL && kf == NULL) || (v_out != NULL && vf == NULL)) {
            return KVP_ERR_NO_MEMORY;
        }
    }
    status = ops->decode(&g, &info, (const uint8_t *)page + KVP_PAGE_HDR_BYTES, frame, kf, vf);
    if (status == KVP_OK && dtype == KVP_DTYPE_F16) {
        if (k_out != NULL) {
            kvp_cvt_ops()->store_f16(kf, n, k_out);
        }
        if (v_out != NULL) {
            kvp_cvt_ops()->store_f16(vf, n, v_out);
        }
    }
    if (status == KVP_OK && info_p != NULL) {
        *info_p = info;
    }
    return status;
}

kvp_status_t kvp_page_token_norms(const void *page, size_t len, float *norms)
{
    kvp_page_info_t info;
    kvp_status_t    status = kvp_page_parse(page, len, &info);

    if (status != KVP_OK) {
        return status;
    }
    for (uint32_t t = 0; t < info.valid; t++) {
        norms[t] = 1.0f;
        if (info.codec == KVP_CODEC_OSCAR) {
            memcpy(&norms[t], (const uint8_t *)page + KVP_PAGE_HDR_BYTES + 4 * (size_t)t, 4);
        }
    }
    return KVP_OK;
}
