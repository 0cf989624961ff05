/* codec.c - the codec front door: names, geometry checks, payload sizes, and kvp_page_encode /
 * kvp_page_decode, which validate, convert dtype and hand each codec's payload to its ops table
 * entry (codec_ops.h). The math of each codec lives in its own file (codec_fp16.c, ...). */
#include "kvpack/codec.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "codec_ops.h"

#include <math.h>
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

size_t kvp_codec_payload_bytes(kvp_codec_id_t codec, uint32_t heads, uint32_t head_dim,
                               uint32_t capacity, uint32_t valid)
{
    const kvp_codec_ops_t *ops = codec_ops(codec);
    kvp_codec_geom_t       g   = {heads, head_dim, capacity, valid};

    if (ops == NULL || ops->check(&g) != KVP_OK) {
        return 0;
    }
    return ops->payload_bytes(&g);
}

kvp_status_t kvp_codec_check(const kvp_page_params_t *params)
{
    const kvp_codec_ops_t *ops = codec_ops(params->codec);
    kvp_codec_geom_t g = {params->heads, params->head_dim, params->page_tokens, params->page_tokens};

    if (ops == NULL) {
        return KVP_ERR_UNSUPPORTED;
    }
    if (params->heads == 0 || params->heads > KVP_PAGE_MAX_HEADS || params->head_dim == 0 ||
        params->head_dim > KVP_PAGE_MAX_DIM || params->page_tokens == 0 ||
        params->page_tokens > KVP_PAGE_MAX_TOKENS) {
        return KVP_ERR_INVALID;
    }
    return ops->check(&g);
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

/* Convert input to fp32 scratch and reject NaN/Inf. */
static kvp_status_t load_f32(kvp_dtype_t dtype, const void *in, size_t n, float *out)
{
    if (dtype == KVP_DTYPE_F32) {
        memcpy(out, in, n * sizeof(float));
    } else {
        const uint16_t *h = in;

        for (size_t i = 0; i < n; i++) {
            out[i] = kvp_f16_to_f32(h[i]);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) {
            return KVP_ERR_BAD_INPUT_DATA;
        }
    }
    return KVP_OK;
}

static void store_out(kvp_dtype_t dtype, const float *in, size_t n, void *out)
{
    if (dtype == KVP_DTYPE_F32) {
        memcpy(out, in, n * sizeof(float));
    } else {
        uint16_t *h = out;

        for (size_t i = 0; i < n; i++) {
            h[i] = kvp_f32_to_f16(in[i]);
        }
    }
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
    float                 *kf, *vf;

    status = kvp_codec_check(params);
    if (status != KVP_OK) {
        KVP_LOG_DEBUG("codec", "codec %s rejects heads %u head_dim %u page_tokens %u",
                      kvp_codec_name(params->codec), params->heads, params->head_dim,
                      params->page_tokens);
        return status;
    }
    if (ntok == 0 || ntok > params->page_tokens || k == NULL || v == NULL || out == NULL ||
        (params->flags & ~(uint32_t)(KVP_PAGE_F_V_PREROT | KVP_PAGE_F_TAIL)) != 0) {
        return KVP_ERR_INVALID;
    }
    ops     = codec_ops(params->codec);
    g       = (kvp_codec_geom_t){params->heads, params->head_dim, params->page_tokens, ntok};
    payload = ops->payload_bytes(&g);
    if (out_cap < KVP_PAGE_HDR_BYTES + payload) {
        return KVP_ERR_TOO_LARGE;
    }
    n  = (size_t)ntok * params->heads * params->head_dim;
    kf = kvp_malloc(2 * n * sizeof(float), "codec input");
    if (kf == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    vf     = kf + n;
    status = load_f32(dtype, k, n, kf);
    if (status == KVP_OK) {
        status = load_f32(dtype, v, n, vf);
    }
    if (status != KVP_OK) {
        goto out;
    }

    memset(&info, 0, sizeof(info));
    info.codec     = params->codec;
    info.flags     = params->flags & (KVP_PAGE_F_V_PREROT | KVP_PAGE_F_TAIL);
    info.valid     = ntok;
    info.capacity  = params->page_tokens;
    info.heads     = params->heads;
    info.head_dim  = params->head_dim;
    info.layer     = params->layer;
    info.first_pos = params->first_pos;
    info.chunk_key = params->chunk_key;
    info.payload_len = (uint32_t)payload;
    info.aux       = params->kvarn_iters;
    if (ntok < params->page_tokens) {
        info.flags |= KVP_PAGE_F_PARTIAL;
    }
    status = ops->encode(&g, kf, vf, &info, (uint8_t *)out + KVP_PAGE_HDR_BYTES);
    if (status != KVP_OK) {
        goto out;
    }
    kvp_page_hdr_write(&info, out);
    kvp_page_seal(out);
    *len_p = KVP_PAGE_HDR_BYTES + payload;
out:
    kvp_free(kf);
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

    status = kvp_page_parse(page, len, &info);
    if (status != KVP_OK) {
        return status;
    }
    ops = codec_ops((kvp_codec_id_t)info.codec);
    g   = (kvp_codec_geom_t){info.heads, info.head_dim, info.capacity, info.valid};
    n   = (size_t)info.valid * info.heads * info.head_dim;
    if (dtype == KVP_DTYPE_F32) {
        kf = k_out;
        vf = v_out;
    } else {
        kf = kvp_malloc(2 * n * sizeof(float), "codec output");
        if (kf == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        vf = kf + n;
    }
    status = ops->decode(&g, &info, (const uint8_t *)page + KVP_PAGE_HDR_BYTES, frame,
                         k_out != NULL ? kf : NULL, v_out != NULL ? vf : NULL);
    if (dtype != KVP_DTYPE_F32) {
        if (status == KVP_OK && k_out != NULL) {
            store_out(dtype, kf, n, k_out);
        }
        if (status == KVP_OK && v_out != NULL) {
            store_out(dtype, vf, n, v_out);
        }
        kvp_free(kf);
    }
    if (status == KVP_OK && info_p != NULL) {
        *info_p = info;
    }
    return status;
}
