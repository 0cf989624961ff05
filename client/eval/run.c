/* run.c - kvp_eval_codec: one codec over a whole KV dump. Every (layer, page of P tokens) is
 * encoded with kvp_page_encode (the last page may be partial), its bytes counted (headers
 * included), decoded in the original frame, and the metrics of eval.h computed on the result. */
#include "eval.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <string.h>

kvp_status_t kvp_eval_codec(const kvp_kv_t *kv, const kvp_eval_params_t *params, kvp_kv_t *hat,
                            kvp_eval_result_t *res)
{
    kvp_page_params_t pp;
    kvp_status_t      st;
    uint32_t          L = kv->layers, T = kv->tokens, H = kv->heads, D = kv->head_dim;
    uint32_t          P = params->page_tokens;
    size_t            cap, row = (size_t)H * D, lsz = (size_t)T * row;
    uint8_t          *page;
    double            attn = 0.0, accum = 0.0;

    memset(res, 0, sizeof(*res));
    memset(&pp, 0, sizeof(pp));
    pp.codec       = params->codec;
    pp.heads       = H;
    pp.head_dim    = D;
    pp.page_tokens = P;
    pp.flags       = params->page_flags;
    pp.kvarn_iters = params->kvarn_iters;
    cap = kvp_page_max_bytes(&pp);
    if (cap == 0) {
        KVP_LOG_ERROR("eval", "codec %s does not support heads %u head_dim %u page_tokens %u: it "
                      "takes %s", kvp_codec_name(params->codec), H, D, P,
                      kvp_codec_geometry_rule(params->codec));
        return KVP_ERR_UNSUPPORTED;
    }
    st = kvp_kv_alloc(hat, L, T, H, D);
    if (st != KVP_OK) {
        return st;
    }
    page = kvp_malloc(cap, "eval page");
    if (page == NULL) {
        kvp_kv_free(hat);
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t l = 0; l < L && st == KVP_OK; l++) {
        for (uint32_t t0 = 0; t0 < T && st == KVP_OK; t0 += P) {
            uint32_t n   = T - t0 < P ? T - t0 : P;
            size_t   off = l * lsz + t0 * row, len = 0;
            double   t1;

            pp.layer     = l;
            pp.first_pos = t0;
            t1 = kvp_time_s();
            st = kvp_page_encode(&pp, KVP_DTYPE_F32, kv->k + off, kv->v + off, n, page, cap, &len);
            res->encode_s += kvp_time_s() - t1;
            if (st != KVP_OK) {
                KVP_LOG_ERROR("eval", "encode layer %u tokens %u..%u: %s", l, t0, t0 + n,
                              kvp_status_str(st));
                break;
            }
            res->bytes += len;
            res->pages++;
            t1 = kvp_time_s();
            st = kvp_page_decode(page, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, hat->k + off,
                                 hat->v + off, NULL);
            res->decode_s += kvp_time_s() - t1;
            if (st != KVP_OK) {
                KVP_LOG_ERROR("eval", "decode layer %u tokens %u..%u: %s", l, t0, t0 + n,
                              kvp_status_str(st));
            }
        }
    }
    kvp_free(page);
    if (st != KVP_OK) {
        kvp_kv_free(hat);
        return st;
    }
    res->bits_per_elem = 8.0 * (double)res->bytes / (2.0 * (double)L * lsz);
    res->k_rel_err     = kvp_rel_err(hat->k, kv->k, L * lsz);
    res->v_rel_err     = kvp_rel_err(hat->v, kv->v, L * lsz);
    kvp_err_decomp(hat->k, kv->k, (size_t)L * T * H, D, &res->k_err_mag, &res->k_err_dir);
    kvp_err_decomp(hat->v, kv->v, (size_t)L * T * H, D, &res->v_err_mag, &res->v_err_dir);
    for (uint32_t l = 0; l < L; l++) {
        const float *k = kv->k + l * lsz, *v = kv->v + l * lsz;

        attn += kvp_attn_rel_err(k, v, hat->k + l * lsz, hat->v + l * lsz, T, H, D,
                                 params->n_queries, params->seed + l);
        accum += kvp_attn_rel_err_accum(k, v, hat->k + l * lsz, hat->v + l * lsz, T, H, D, P,
                                        params->n_queries, params->seed + l);
    }
    res->attn_rel_err       = attn / L;
    res->attn_rel_err_accum = accum / L;
    return KVP_OK;
}
