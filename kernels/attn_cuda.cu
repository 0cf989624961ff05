/* attn_cuda.cu - the GPU twin of kvp_attn_compute (attn_cuda.h): one block per query head, its
 * threads over a page's tokens for the scores and over channels for the V sum, an online softmax
 * (running max and sum in shared memory) across the pages in order. Every K and V value is
 * formed in registers from the page's 2-bit code and its fp16 scale, zero or norm with the
 * KVP_HD math of quant_hd.h, in the frame the page stores (the formulas are attn.c's run_q2 and
 * run_kvarn, summed in another order: within 1e-4 relative of the reference). q is scaled, and
 * rotated once (Walsh-Hadamard) for pages whose K is rotated; V of V-rotated pages is summed
 * apart and rotated back once at the end.
 * Host flow: kvp_attn_validate (every page checked before any device work) -> the pages'
 * payloads into one device buffer + a page table -> k_attn -> out copied back. */
#include "kvpack/attn_cuda.h"
#include "attn_int.h"
#include "cuda_int.h"
#include "kvpack/alloc.h"
#include "quant_hd.h"

#include <string.h>

#define ATTN_THREADS 128u
#define ALIGN        16u

/* one page as the kernel reads it */
typedef struct {
    size_t   off;        /* payload offset in the device buffer */
    uint32_t codec, valid, flags, group_k, group_v;
} dpage_t;

__device__ static float ld_f32(const uint8_t *p) /* little-endian fp32 at an unaligned address */
{
    return kvp_hd_bits_f32((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                           ((uint32_t)p[3] << 24));
}

/* q . k_t of head h on page pg (payload pl), q in the page's K frame */
__device__ static float score_at(const dpage_t *pg, const uint8_t *pl, uint32_t t, uint32_t h,
                                 uint32_t H, uint32_t D, const float *q)
{
    uint32_t T = pg->valid;
    float    s = 0.0f;

    if (pg->codec == KVP_CODEC_FP16) { /* K [T][H][D] fp16 */
        const uint8_t *k = pl + 2 * ((size_t)t * H + h) * D;

        for (uint32_t d = 0; d < D; d++) {
            s = s + q[d] * kvp_hd_ldh(k + 2 * (size_t)d);
        }
        return s;
    }
    if (pg->codec == KVP_CODEC_KVARN) { /* head record: K[d][t] = (c A_d + Z_d) B_t */
        kvp_hd_kvarn_layout_t l = kvp_hd_kvarn_layout(T, D);
        const uint8_t        *r = pl + (size_t)h * l.rec;

        for (uint32_t d = 0; d < D; d++) {
            s = s + q[d] * kvp_hd_dequant(kvp_hd_code_get(r + (size_t)d * l.rt, t),
                                          kvp_hd_ldh(r + l.k_a + 2 * (size_t)d),
                                          kvp_hd_ldh(r + l.k_a + 2 * ((size_t)D + d)));
        }
        return s * kvp_hd_ldh(r + l.k_a + 4 * (size_t)D + 2 * (size_t)t);
    }
    { /* kivi, kivi128, oscar: K codes [h][d] along tokens, scale / zero [h][group][d] */
        int                oscar = pg->codec == KVP_CODEC_OSCAR;
        kvp_hd_q2_layout_t l  = kvp_hd_q2_layout(oscar, T, H, D, pg->group_k, pg->group_v);
        size_t             po = ((size_t)h * l.ngk + t / pg->group_k) * D;

        for (uint32_t d = 0; d < D; d++) {
            const uint8_t *run = pl + l.k_codes + ((size_t)h * D + d) * l.rt;

            s = s + q[d] * kvp_hd_dequant(kvp_hd_code_get(run, t),
                                          kvp_hd_ldh(pl + l.k_scale + 2 * (po + d)),
                                          kvp_hd_ldh(pl + l.k_zero + 2 * (po + d)));
        }
        return oscar ? s * ld_f32(pl + 4 * (size_t)t) : s;
    }
}

/* V[t][d] of head h on page pg, in the page's V frame */
__device__ static float v_at(const dpage_t *pg, const uint8_t *pl, uint32_t t, uint32_t d,
                             uint32_t h, uint32_t H, uint32_t D)
{
    uint32_t T = pg->valid;

    if (pg->codec == KVP_CODEC_FP16) { /* V [T][H][D] after K */
        return kvp_hd_ldh(pl + 2 * ((size_t)T * H * D + ((size_t)t * H + h) * D + d));
    }
    if (pg->codec == KVP_CODEC_KVARN) { /* V[t][d] = (c A_t + Z_t) B_d */
        kvp_hd_kvarn_layout_t l = kvp_hd_kvarn_layout(T, D);
        const uint8_t        *r = pl + (size_t)h * l.rec;

        return kvp_hd_dequant(kvp_hd_code_get(r + l.v_codes + (size_t)t * l.rd, d),
                              kvp_hd_ldh(r + l.v_a + 2 * (size_t)t),
                              kvp_hd_ldh(r + l.v_a + 2 * ((size_t)T + t))) *
               kvp_hd_ldh(r + l.v_a + 4 * (size_t)T + 2 * (size_t)d);
    }
    { /* V codes [t][h] along channels, scale / zero [t][h][group] */
        kvp_hd_q2_layout_t l = kvp_hd_q2_layout(pg->codec == KVP_CODEC_OSCAR, T, H, D, pg->group_k,
                                                pg->group_v);
        size_t             pv = ((size_t)t * H + h) * l.ng + d / pg->group_v;

        return kvp_hd_dequant(kvp_hd_code_get(pl + l.v_codes + ((size_t)t * H + h) * l.rd, d),
                              kvp_hd_ldh(pl + l.v_scale + 2 * pv),
                              kvp_hd_ldh(pl + l.v_zero + 2 * pv));
    }
}

/* Block-wide max (is_max) or sum of each thread's x; every thread gets it. */
__device__ static float block_reduce(float x, int is_max, float *red)
{
    red[threadIdx.x] = x;
    __syncthreads();
    for (uint32_t w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            float o = red[threadIdx.x + w];

            red[threadIdx.x] = is_max ? (o > red[threadIdx.x] ? o : red[threadIdx.x])
                                      : red[threadIdx.x] + o;
        }
        __syncthreads();
    }
    x = red[0];
    __syncthreads();
    return x;
}

/* grid Hq, block ATTN_THREADS: query head i over KV head i / g; scores: [Hq][pmax] scratch */
__global__ void k_attn(const uint8_t *blob, const dpage_t *tab, uint32_t n, uint32_t H,
                       uint32_t D, uint32_t g, float scale, const float *q, float *scores,
                       uint32_t pmax, float *out)
{
    __shared__ float qs[KVP_PAGE_MAX_DIM], qr[KVP_PAGE_MAX_DIM];
    __shared__ float acc_o[KVP_PAGE_MAX_DIM], acc_r[KVP_PAGE_MAX_DIM];
    __shared__ float red[ATTN_THREADS];
    __shared__ float m, l, a;
    uint32_t         i = blockIdx.x, h = i / g, nt = blockDim.x, used_r = 0;
    float           *sc = scores + (size_t)i * pmax;

    for (uint32_t d = threadIdx.x; d < D; d += nt) {
        qs[d] = qr[d] = q[(size_t)i * D + d] * scale;
        acc_o[d] = acc_r[d] = 0.0f;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if ((D & (D - 1)) == 0) {
            kvp_hd_fwht(qr, D); /* for pages whose K is rotated (those have D a power of two) */
        }
        m = -INFINITY;
        l = 0.0f;
    }
    __syncthreads();
    for (uint32_t p = 0; p < n; p++) {
        const dpage_t *pg = &tab[p];
        const uint8_t *pl = blob + pg->off;
        const float   *qx = (pg->flags & KVP_PAGE_F_K_ROTATED) ? qr : qs;
        float         *acc = (pg->flags & KVP_PAGE_F_V_ROTATED) ? acc_r : acc_o;
        float          mx = -INFINITY, sum = 0.0f;

        used_r |= (pg->flags & KVP_PAGE_F_V_ROTATED) != 0;
        for (uint32_t t = threadIdx.x; t < pg->valid; t += nt) {
            sc[t] = score_at(pg, pl, t, h, H, D, qx);
            mx    = sc[t] > mx ? sc[t] : mx;
        }
        mx = block_reduce(mx, 1, red);
        if (threadIdx.x == 0) { /* online softmax: the sums so far rescaled when the max grows */
            a = mx > m ? expf(m - mx) : 1.0f;
            m = mx > m ? mx : m;
        }
        __syncthreads();
        for (uint32_t d = threadIdx.x; d < D; d += nt) {
            acc_o[d] = acc_o[d] * a;
            acc_r[d] = acc_r[d] * a;
        }
        for (uint32_t t = threadIdx.x; t < pg->valid; t += nt) { /* a page whose every score is
                                                                   * -inf weighs 0, not NaN; a
                                                                   * NaN the max passed over
                                                                   * stays, and is refused */
            sc[t] = mx == -INFINITY ? (sc[t] == -INFINITY ? 0.0f : sc[t]) : expf(sc[t] - m);
            sum   = sum + sc[t];
        }
        sum = block_reduce(sum, 0, red); /* also orders the sc writes before the V pass */
        if (threadIdx.x == 0) {
            l = l * a + sum;
        }
        for (uint32_t d = threadIdx.x; d < D; d += nt) {
            float v = 0.0f;

            for (uint32_t t = 0; t < pg->valid; t++) {
                v = v + sc[t] * v_at(pg, pl, t, d, h, H, D);
            }
            acc[d] = acc[d] + v;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0 && used_r) {
        kvp_hd_fwht(acc_r, D); /* the normalized Hadamard is its own inverse */
    }
    __syncthreads();
    for (uint32_t d = threadIdx.x; d < D; d += nt) {
        out[(size_t)i * D + d] = (acc_o[d] + acc_r[d]) / l;
    }
}

extern "C" kvp_status_t kvp_cuda_attn_compute(const kvp_attn_params_t *params,
                                              const kvp_attn_page_t *pages, size_t n_pages,
                                              const kvp_attn_page_t *tail, const float *q,
                                              uint32_t q_heads, float *out)
{
    size_t           n_all = n_pages + (tail != NULL), bytes = 0;
    kvp_page_info_t *in = (kvp_page_info_t *)kvp_malloc(n_all * sizeof(*in) + 1, "cuda attn");
    dpage_t         *tab = (dpage_t *)kvp_malloc(n_all * sizeof(*tab) + 1, "cuda attn table");
    uint8_t         *dblob = NULL;
    dpage_t         *dtab = NULL;
    float           *dq = NULL, *dsc = NULL, *dout = NULL, *host = NULL, scale = 1.0f;
    uint32_t         H, D, pmax = 1;
    kvp_status_t     status;

    if (in == NULL || tab == NULL) {
        kvp_free(in);
        kvp_free(tab);
        return KVP_ERR_NO_MEMORY;
    }
    status = kvp_attn_validate(params, pages, n_pages, tail, q, q_heads, out, in, &scale);
    if (status != KVP_OK) {
        goto out;
    }
    H = in[0].heads, D = in[0].head_dim;
    for (size_t i = 0; i < n_all; i++) {
        tab[i] = (dpage_t){bytes, in[i].codec, in[i].valid, in[i].flags, in[i].group_k,
                           in[i].group_v};
        bytes += (in[i].payload_len + ALIGN - 1) / ALIGN * ALIGN;
        pmax = in[i].valid > pmax ? in[i].valid : pmax;
    }
    CUDA_TRY(cudaMalloc((void **)&dblob, bytes + ALIGN));
    CUDA_TRY(cudaMalloc((void **)&dtab, n_all * sizeof(*tab)));
    CUDA_TRY(cudaMalloc((void **)&dq, (size_t)q_heads * D * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dsc, (size_t)q_heads * pmax * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dout, (size_t)q_heads * D * sizeof(float)));
    for (size_t i = 0; i < n_all; i++) {
        const uint8_t *pg = (const uint8_t *)(i < n_pages ? pages[i].data : tail->data);

        CUDA_TRY(cudaMemcpy(dblob + tab[i].off, pg + KVP_PAGE_HDR_BYTES, in[i].payload_len,
                            cudaMemcpyHostToDevice));
    }
    CUDA_TRY(cudaMemcpy(dtab, tab, n_all * sizeof(*tab), cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(dq, q, (size_t)q_heads * D * sizeof(float), cudaMemcpyHostToDevice));
    KVP_LAUNCH(k_attn, q_heads, ATTN_THREADS, dblob, dtab, (uint32_t)n_all, H, D, q_heads / H,
               scale, dq, dsc, pmax, dout);
    CUDA_TRY(cudaGetLastError());
    host = (float *)kvp_malloc((size_t)q_heads * D * sizeof(float), "cuda attention out");
    if (host == NULL) {
        status = KVP_ERR_NO_MEMORY;
        goto out;
    }
    CUDA_TRY(cudaMemcpy(host, dout, (size_t)q_heads * D * sizeof(float), cudaMemcpyDeviceToHost));
    if (!kvp_attn_out_copy(host, (size_t)q_heads * D, out)) { /* as kvp_attn_compute */
        KVP_LOG_ERROR("attn", "attention over layer %u is not finite: scores pass float range "
                      "(is the softmax scale too large?)", in[0].layer);
        status = KVP_ERR_BAD_INPUT_DATA;
    }
out:
    kvp_free(host);
    cudaFree(dblob);
    cudaFree(dtab);
    cudaFree(dq);
    cudaFree(dsc);
    cudaFree(dout);
    kvp_free(in);
    kvp_free(tab);
    return status;
}
