/* codec_cuda.cu - CUDA twins of the kivi/kivi128, oscar and kvarn codecs behind codec_cuda.h.
 * Kernels reuse the KVP_HD scalar math of quant_hd.h and mirror the loop structure of q2_ref.c:
 * one thread per channel (per-channel groups), per (row, group) (per-token groups), per row
 * (Hadamard, OScaR norm); one block per (head, tensor) tile for VarN, whose statistics are
 * taken in the reference's order (one thread per row/column). Built with --fmad=false so the
 * group quantizers, Hadamard and norm match the reference bit for bit; VarN's expf/logf are
 * the device's (a few ulps from glibc), so kvarn scales may differ like the AVX2 twin's.
 * Layouts: see the header comments of codec_kivi.c, codec_oscar.c, codec_kvarn.c.
 * Host flow: check -> cudaMalloc scratch -> copy in -> kernels -> copy payload out -> header + CRC. */
#include "kvpack/codec_cuda.h"
#include "cuda_int.h"
#include "quant_hd.h"

#include <string.h>

enum { RULE_KIVI = 0, RULE_OSCAR = 1 };

/* ---- group quantizers ---- */

__device__ static void put_params(int rule, float mn, float mx, uint8_t *s_out, uint8_t *z_out,
                                  kvp_hd_oscar_t *op, float *ks)
{
    if (rule == RULE_KIVI) {
        *ks = kvp_hd_kivi_scale(mn, mx);
        kvp_hd_sth(s_out, *ks);
        kvp_hd_sth(z_out, mn);
    } else {
        *op = kvp_hd_oscar_params(mn, mx);
        kvp_hd_sth(s_out, op->s);
        kvp_hd_sth(z_out, op->zd);
    }
}

__device__ static uint32_t rule_code(int rule, float x, float mn, float ks, const kvp_hd_oscar_t *op)
{
    return rule == RULE_KIVI ? kvp_hd_kivi_code(x, mn, ks) : kvp_hd_oscar_code(x, op);
}

/* grid (ngroups, H), block D: thread d quantizes channel d of one token group of head h */
__global__ void k_chan_encode(const float *src, uint32_t T, uint32_t H, uint32_t D, uint32_t G,
                              int rule, uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    uint32_t g = blockIdx.x, h = blockIdx.y, run = kvp_hd_run_bytes(T), ng = (T + G - 1) / G;
    size_t   st = (size_t)H * D;

    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
        const float   *x  = src + (size_t)h * D + d;
        uint8_t       *cr = codes + ((size_t)h * D + d) * run;
        uint32_t       t0 = g * G, t1 = t0 + G < T ? t0 + G : T;
        float          mn = x[t0 * st], mx = mn, ks = 0.0f;
        kvp_hd_oscar_t op;

        for (uint32_t t = t0 + 1; t < t1; t++) { /* the reference's compares, not fminf/fmaxf:
                                                  * with +0 and -0 the first seen stays, so the
                                                  * stored min's sign bit is the reference's */
            float xt = x[t * st];

            mn = xt < mn ? xt : mn;
            mx = xt > mx ? xt : mx;
        }
        put_params(rule, mn, mx, scale + 2 * (((size_t)h * ng + g) * D + d),
                   zero + 2 * (((size_t)h * ng + g) * D + d), &op, &ks);
        for (uint32_t t = t0; t < t1; t += 4) {
            uint32_t b = 0;

            for (uint32_t j = 0; j < 4 && t + j < t1; j++) {
                b |= rule_code(rule, x[(t + j) * st], mn, ks, &op) << (2 * j);
            }
            cr[t / 4] = (uint8_t)b;
        }
    }
}

__global__ void k_chan_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                              uint32_t T, uint32_t H, uint32_t D, uint32_t G, float *dst)
{
    uint32_t g = blockIdx.x, h = blockIdx.y, run = kvp_hd_run_bytes(T), ng = (T + G - 1) / G;

    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
        size_t   p  = 2 * (((size_t)h * ng + g) * D + d);
        float    s  = kvp_hd_ldh(scale + p), z = kvp_hd_ldh(zero + p);
        uint32_t t1 = (g + 1) * G < T ? (g + 1) * G : T;

        for (uint32_t t = g * G; t < t1; t++) {
            dst[((size_t)t * H + h) * D + d] =
                kvp_hd_dequant(kvp_hd_code_get(codes + ((size_t)h * D + d) * run, t), s, z);
        }
    }
}

/* thread per (row, group) */
__global__ void k_tok_encode(const float *src, size_t rows, uint32_t D, uint32_t G, int rule,
                             uint8_t *codes, uint8_t *scale, uint8_t *zero)
{
    uint32_t ng = D / G, run = kvp_hd_run_bytes(D);
    size_t   i  = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (i < rows * ng) {
        size_t         r = i / ng;
        uint32_t       g = (uint32_t)(i % ng);
        const float   *x = src + r * D;
        float          mn = x[g * G], mx = mn, ks = 0.0f;
        kvp_hd_oscar_t op;

        for (uint32_t c = g * G + 1; c < (g + 1) * G; c++) { /* as k_chan_encode */
            mn = x[c] < mn ? x[c] : mn;
            mx = x[c] > mx ? x[c] : mx;
        }
        put_params(rule, mn, mx, scale + 2 * i, zero + 2 * i, &op, &ks);
        for (uint32_t c = g * G; c < (g + 1) * G; c += 4) {
            uint32_t b = 0;

            for (uint32_t j = 0; j < 4 && c + j < (g + 1) * G; j++) {
                b |= rule_code(rule, x[c + j], mn, ks, &op) << (2 * j);
            }
            codes[r * run + c / 4] = (uint8_t)b;
        }
    }
}

__global__ void k_tok_decode(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                             size_t rows, uint32_t D, uint32_t G, float *dst)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (i < rows * D) {
        size_t   r = i / D;
        uint32_t c = (uint32_t)(i % D);
        size_t   p = 2 * (r * (D / G) + c / G);

        dst[i] = kvp_hd_dequant(kvp_hd_code_get(codes + r * kvp_hd_run_bytes(D), c),
                                kvp_hd_ldh(scale + p), kvp_hd_ldh(zero + p));
    }
}

/* ---- rotation and norms ---- */

/* Rotate each row; *past = 1 when a rotated value (fp16-rounded first with round16) is past
 * +-65504, as the reference's rot_rows refuses it (oscar's fp32 K in (65504, 65520) included,
 * which the fp16 rounding later would have hidden). past NULL: no check (decode's rotation). */
__global__ void k_rot_rows(float *x, size_t rows, uint32_t D, int round16, int *past)
{
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (r < rows) {
        kvp_hd_fwht(x + r * D, D);
        for (uint32_t i = 0; i < D; i++) {
            if (round16) {
                x[r * D + i] = kvp_hd_h(x[r * D + i]);
            }
            if (past != NULL && !(fabsf(x[r * D + i]) <= 65504.0f)) {
                *past = 1; /* any writer: they all write 1 */
            }
        }
    }
}

__global__ void k_oscar_norm(float *x, uint32_t T, uint32_t HD, float *norms)
{
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;

    if (t < T) {
        float *row = x + (size_t)t * HD;
        float  n   = kvp_hd_oscar_norm(kvp_hd_sumsq8(row, HD));

        norms[t] = n;
        for (uint32_t i = 0; i < HD; i++) {
            row[i] = kvp_hd_h(kvp_hd_h(row[i]) / n);
        }
    }
}

__global__ void k_scale_rows(float *x, uint32_t T, uint32_t HD, const float *norms)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (i < (size_t)T * HD) {
        x[i] = x[i] * norms[i / HD];
    }
}

/* ---- KVarN: one block per (head, tensor) tile ---- */

/* tile X [R][C] of head h: K (kt = 1): X[d][t] = src[t][h][d]; V: X[t][d] = src[t][h][d] */
__device__ static float tile_at(const float *src, uint32_t H, uint32_t D, uint32_t h, int kt,
                                uint32_t r, uint32_t c)
{
    return kt ? src[((size_t)c * H + h) * D + r] : src[((size_t)r * H + h) * D + c];
}

/* grid (H, 2): y = 0 K tile, 1 V tile. work per block: 2*R*C + 8*(R+C) floats at
 * work + (h*2+y)*wsz. Writes the tile record sections of head h. */
__global__ void k_kvarn(const float *k, const float *v, uint32_t T, uint32_t H, uint32_t D,
                        uint32_t iters, float *work, size_t wsz, uint8_t *payload, size_t rec,
                        size_t off_v)
{
    uint32_t h = blockIdx.x, kt = blockIdx.y == 0;
    uint32_t R = kt ? D : T, C = kt ? T : D, run = kvp_hd_run_bytes(C);
    float   *X = work + ((size_t)h * 2 + blockIdx.y) * wsz, *cur = X + (size_t)R * C;
    float   *Lc = cur + (size_t)R * C, *Lr = Lc + C, *ec = Lr + R, *er = ec + C;
    float   *colstd = er + R, *rowstd = colstd + C, *Sc = rowstd + R, *Sr = Sc + C;
    uint8_t *base = payload + (size_t)h * rec + (kt ? 0 : off_v);
    uint8_t *codes = base, *A = base + (size_t)R * run, *Z = A + 2 * (size_t)R, *B = Z + 2 * (size_t)R;
    __shared__ float best;
    __shared__ int   take;
    const float     *src = kt ? k : v;

    for (size_t i = threadIdx.x; i < (size_t)R * C; i += blockDim.x) {
        X[i] = cur[i] = tile_at(src, H, D, h, kt, (uint32_t)(i / C), (uint32_t)(i % C));
    }
    for (uint32_t c = threadIdx.x; c < C; c += blockDim.x) {
        Lc[c] = 0.0f, ec[c] = 1.0f, Sc[c] = 1.0f;
    }
    for (uint32_t r = threadIdx.x; r < R; r += blockDim.x) {
        Lr[r] = 0.0f, er[r] = 1.0f, Sr[r] = 1.0f;
    }
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < C; c += blockDim.x) {
        colstd[c] = kvp_hd_std(X + c, R, C);
    }
    for (uint32_t r = threadIdx.x; r < R; r += blockDim.x) {
        rowstd[r] = kvp_hd_std(X + (size_t)r * C, C, 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        best = kvp_hd_varn_imb(colstd, C, rowstd, R);
    }
    __syncthreads();
    for (uint32_t it = 0; it < iters; it++) {
        for (uint32_t c = threadIdx.x; c < C; c += blockDim.x) {
            Lc[c] = kvp_hd_varn_step(Lc[c], kvp_hd_std(cur + c, R, C));
            ec[c] = expf(Lc[c]);
        }
        __syncthreads();
        for (size_t i = threadIdx.x; i < (size_t)R * C; i += blockDim.x) {
            cur[i] = X[i] / ec[i % C] / er[i / C];
        }
        __syncthreads();
        for (uint32_t r = threadIdx.x; r < R; r += blockDim.x) {
            Lr[r] = kvp_hd_varn_step(Lr[r], kvp_hd_std(cur + (size_t)r * C, C, 1));
            er[r] = expf(Lr[r]);
        }
        __syncthreads();
        for (size_t i = threadIdx.x; i < (size_t)R * C; i += blockDim.x) {
            cur[i] = X[i] / ec[i % C] / er[i / C];
        }
        __syncthreads();
        for (uint32_t c = threadIdx.x; c < C; c += blockDim.x) {
            colstd[c] = kvp_hd_std(cur + c, R, C);
        }
        for (uint32_t r = threadIdx.x; r < R; r += blockDim.x) {
            rowstd[r] = kvp_hd_std(cur + (size_t)r * C, C, 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float imb = kvp_hd_varn_imb(colstd, C, rowstd, R);

            take = imb <= best;
            if (take) {
                best = imb;
            }
        }
        __syncthreads();
        if (take) {
            for (uint32_t c = threadIdx.x; c < C; c += blockDim.x) {
                Sc[c] = ec[c];
            }
            for (uint32_t r = threadIdx.x; r < R; r += blockDim.x) {
                Sr[r] = er[r];
            }
        }
        __syncthreads();
    }
    for (uint32_t r = threadIdx.x; r < R; r += blockDim.x) {
        const float *x = X + (size_t)r * C;
        float        lo = x[0] / Sc[0] / Sr[r], hi = lo, s;

        for (uint32_t c = 1; c < C; c++) {
            float b = x[c] / Sc[c] / Sr[r];

            lo = b < lo ? b : lo;
            hi = b > hi ? b : hi;
        }
        s = kvp_hd_kvarn_scale(lo, hi);
        for (uint32_t c = 0; c < C; c += 4) {
            uint32_t byte = 0;

            for (uint32_t j = 0; j < 4 && c + j < C; j++) {
                byte |= kvp_hd_kvarn_code(x[c + j] / Sc[c + j] / Sr[r], lo, s) << (2 * j);
            }
            codes[(size_t)r * run + c / 4] = (uint8_t)byte;
        }
        kvp_hd_sth(A + 2 * (size_t)r, Sr[r] * s);
        kvp_hd_sth(Z + 2 * (size_t)r, Sr[r] * lo);
    }
    for (uint32_t c = threadIdx.x; c < C; c += blockDim.x) {
        kvp_hd_sth(B + 2 * (size_t)c, Sc[c]);
    }
}

/* thread per element of head h's tile; dst [T][H][D] */
__global__ void k_kvarn_deq(const uint8_t *payload, size_t rec, size_t off_v, uint32_t T,
                            uint32_t H, uint32_t D, float *kd, float *vd)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)T * H * D;

    if (i < 2 * n) {
        int            kt = i < n;
        size_t         e = kt ? i : i - n;
        uint32_t       t = (uint32_t)(e / ((size_t)H * D)), h = (uint32_t)(e / D % H), d = (uint32_t)(e % D);
        uint32_t       R = kt ? D : T, C = kt ? T : D, r = kt ? d : t, c = kt ? t : d;
        uint32_t       run = kvp_hd_run_bytes(C);
        const uint8_t *base = payload + (size_t)h * rec + (kt ? 0 : off_v);
        const uint8_t *A = base + (size_t)R * run, *Z = A + 2 * (size_t)R, *B = Z + 2 * (size_t)R;
        float          x = kvp_hd_dequant(kvp_hd_code_get(base + (size_t)r * run, c),
                                          kvp_hd_ldh(A + 2 * (size_t)r), kvp_hd_ldh(Z + 2 * (size_t)r)) *
                  kvp_hd_ldh(B + 2 * (size_t)c);

        if (kt && kd != NULL) {
            kd[e] = x;
        } else if (!kt && vd != NULL) {
            vd[e] = x;
        }
    }
}

/* ---- host ---- */

/* A page's offsets, from the same quant_hd.h helpers as the C codecs and attention. */
typedef struct {
    uint32_t              G;     /* K group, tokens (kivi/oscar) */
    size_t                total; /* payload bytes */
    kvp_hd_q2_layout_t    q;     /* kivi, kivi128, oscar (oscar's norms at 0) */
    kvp_hd_kvarn_layout_t kv;    /* kvarn: one head's record */
} layout_t;

static int layout_of(kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t T, layout_t *l)
{
    memset(l, 0, sizeof(*l));
    if (c == KVP_CODEC_KVARN) {
        l->kv    = kvp_hd_kvarn_layout(T, D);
        l->total = l->kv.rec * H;
        return 1;
    }
    if (c != KVP_CODEC_KIVI && c != KVP_CODEC_KIVI128 && c != KVP_CODEC_OSCAR) {
        return 0;
    }
    l->G     = c == KVP_CODEC_KIVI128 ? 128 : 32;
    l->q     = kvp_hd_q2_layout(c == KVP_CODEC_OSCAR, T, H, D, l->G, D < l->G ? D : l->G);
    l->total = l->q.total;
    return 1;
}

static int params_finite(const uint8_t *p, kvp_codec_id_t c, uint32_t H, const layout_t *l)
{
    if (c != KVP_CODEC_KVARN) {
        return kvp_hd_f16_all_finite(p + l->q.k_scale, (l->q.v_codes - l->q.k_scale) / 2) &&
               kvp_hd_f16_all_finite(p + l->q.v_scale, (l->total - l->q.v_scale) / 2);
    }
    return kvp_hd_kvarn_params_finite(p, H, &l->kv);
}

static unsigned nblk(size_t n, unsigned b) { return (unsigned)((n + b - 1) / b); }

extern "C" int kvp_cuda_available(void)
{
    int                 count = 0;
    cudaFuncAttributes  fa;

    /* a device, and code for it in this build: a GPU older than the architectures built for
     * (CMAKE_CUDA_ARCHITECTURES, 90 by default) has none, and every launch would fail. Asking
     * for every kernel's attributes also loads them now, not lazily at a first launch that could
     * wait behind another library's kernels (NCCL's) for the context */
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
        cudaFuncGetAttributes(&fa, k_rot_rows) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_chan_encode) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_chan_decode) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_tok_encode) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_tok_decode) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_oscar_norm) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_scale_rows) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_kvarn) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_kvarn_deq) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

extern "C" kvp_status_t kvp_cuda_page_encode(const kvp_page_params_t *params, const float *k,
                                             const float *v, uint32_t ntok, void *out,
                                             size_t out_cap, size_t *len_p)
{
    /* the statuses kvp_page_encode gives: its checks, then UNSUPPORTED only for a codec with no
     * GPU twin (fp16, naive2), which a caller may then run on the CPU; NULLs before any field is
     * read (C++: the declarations may follow) */
    if (params == NULL || k == NULL || v == NULL || out == NULL || len_p == NULL) {
        return KVP_ERR_INVALID;
    }
    kvp_status_t    status = KVP_OK;
    kvp_page_info_t info;
    layout_t        l;
    uint32_t        H = params->heads, D = params->head_dim, T = ntok;
    size_t          n = (size_t)T * H * D, wsz = 0;
    float          *dk = NULL, *dv = NULL, *dn = NULL, *dw = NULL;
    uint8_t        *dp = NULL;
    int            *dpast = NULL, past = 0;
    int             rot = params->codec == KVP_CODEC_OSCAR || params->codec == KVP_CODEC_KVARN;
    int             vrot = rot && !(params->flags & KVP_PAGE_F_V_PREROT);
    uint32_t        iters = params->kvarn_iters ? params->kvarn_iters : KVP_CODEC_KVARN_ITERS;

    status = kvp_codec_check(params);
    if (status != KVP_OK) {
        return status;
    }
    if (!layout_of(params->codec, H, D, T, &l)) {
        return KVP_ERR_UNSUPPORTED; /* before the flags: an fp16 sink page goes to the CPU too */
    }
    if (ntok == 0 || ntok > params->page_tokens || iters > KVP_CODEC_KVARN_MAX_ITERS ||
        params->layer >= KVP_LAYERS_MAX ||
        (params->flags & ~(uint32_t)(KVP_PAGE_F_V_PREROT | KVP_PAGE_F_TAIL)) != 0) {
        return KVP_ERR_INVALID;
    }
    if (out_cap < KVP_PAGE_HDR_BYTES + l.total) {
        return KVP_ERR_TOO_LARGE;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(k[i]) <= 65504.0f) || !(fabsf(v[i]) <= 65504.0f)) {
            return KVP_ERR_BAD_INPUT_DATA;
        }
    }
    if (params->codec == KVP_CODEC_KVARN) {
        wsz = 2 * (size_t)T * D + 8 * (size_t)(T + D);
    }
    CUDA_TRY(cudaMalloc((void **)&dk, n * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dv, n * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dn, (T + 1) * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dp, l.total));
    if (wsz != 0) {
        CUDA_TRY(cudaMalloc((void **)&dw, 2 * H * wsz * sizeof(float)));
    }
    CUDA_TRY(cudaMemcpy(dk, k, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(dv, v, n * sizeof(float), cudaMemcpyHostToDevice));
    if (rot) {
        CUDA_TRY(cudaMalloc((void **)&dpast, sizeof(int)));
        CUDA_TRY(cudaMemcpy(dpast, &past, sizeof(int), cudaMemcpyHostToDevice));
        KVP_LAUNCH_TRY(k_rot_rows, nblk((size_t)T * H, 128), 128, dk, (size_t)T * H, D,
                       params->codec == KVP_CODEC_KVARN, dpast);
        if (vrot) {
            KVP_LAUNCH_TRY(k_rot_rows, nblk((size_t)T * H, 128), 128, dv, (size_t)T * H, D, 1,
                           dpast);
        }
        CUDA_TRY(cudaMemcpy(&past, dpast, sizeof(int), cudaMemcpyDeviceToHost));
        if (past) {
            KVP_LOG_ERROR("codec", "%s: layer %u: K or V after the Hadamard rotation passes the "
                          "fp16 range (|x| > 65504; inputs above 65504/sqrt(D) can)",
                          kvp_codec_name(params->codec), params->layer);
            status = KVP_ERR_BAD_INPUT_DATA;
            goto out;
        }
    }
    if (params->codec == KVP_CODEC_KVARN) {
        KVP_LAUNCH_TRY(k_kvarn, dim3(H, 2), 256, dk, dv, T, H, D, iters, dw, wsz, dp, l.kv.rec,
                       l.kv.v_codes);
    } else {
        int rule = params->codec == KVP_CODEC_OSCAR ? RULE_OSCAR : RULE_KIVI;

        if (params->codec == KVP_CODEC_OSCAR) {
            KVP_LAUNCH_TRY(k_oscar_norm, nblk(T, 128), 128, dk, T, H * D, dn);
            CUDA_TRY(cudaMemcpy(dp, dn, 4 * (size_t)T, cudaMemcpyDeviceToDevice));
        }
        KVP_LAUNCH_TRY(k_chan_encode, dim3(l.q.ngk, H), D < 256 ? D : 256, dk, T, H, D, l.G,
                       rule, dp + l.q.k_codes, dp + l.q.k_scale, dp + l.q.k_zero);
        KVP_LAUNCH_TRY(k_tok_encode, nblk((size_t)T * H * (D / l.q.gv), 128), 128, dv,
                       (size_t)T * H, D, l.q.gv, rule, dp + l.q.v_codes, dp + l.q.v_scale,
                       dp + l.q.v_zero);
    }
    CUDA_TRY(cudaMemcpy((uint8_t *)out + KVP_PAGE_HDR_BYTES, dp, l.total, cudaMemcpyDeviceToHost));
    /* as the CPU codecs: a stored fp16 parameter that overflowed rejects the page, before the
     * header is written (out never holds a sealed page the status refused) */
    if (!params_finite((const uint8_t *)out + KVP_PAGE_HDR_BYTES, params->codec, H, &l)) {
        KVP_LOG_DEBUG("cuda", "%s: a stored fp16 parameter overflowed", kvp_codec_name(params->codec));
        status = KVP_ERR_BAD_INPUT_DATA;
        goto out;
    }
    memset(&info, 0, sizeof(info));
    info.codec       = params->codec;
    info.flags       = (params->flags & (KVP_PAGE_F_V_PREROT | KVP_PAGE_F_TAIL)) |
                 (T < params->page_tokens ? KVP_PAGE_F_PARTIAL : 0) |
                 (rot ? KVP_PAGE_F_K_ROTATED : 0) | (vrot ? KVP_PAGE_F_V_ROTATED : 0);
    info.bits_k      = 2;
    info.bits_v      = 2;
    info.group_k     = params->codec == KVP_CODEC_KVARN ? T : l.G;
    info.group_v     = params->codec == KVP_CODEC_KVARN ? D : l.q.gv;
    info.valid       = T;
    info.capacity    = params->page_tokens;
    info.heads       = H;
    info.head_dim    = D;
    info.layer       = params->layer;
    info.first_pos   = params->first_pos;
    info.chunk_key   = params->chunk_key;
    info.payload_len = (uint32_t)l.total;
    info.aux         = params->codec == KVP_CODEC_KVARN ? iters : 0;
    kvp_page_hdr_write(&info, out);
    kvp_page_seal(out);
    *len_p = KVP_PAGE_HDR_BYTES + l.total;
out:
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dn);
    cudaFree(dp);
    cudaFree(dw);
    cudaFree(dpast);
    return status;
}

extern "C" kvp_status_t kvp_cuda_page_decode(const void *page, size_t len, kvp_frame_t frame,
                                             float *k_out, float *v_out)
{
    kvp_status_t    status;
    kvp_page_info_t info;
    layout_t        l;
    uint32_t        H, D, T;
    size_t          n;
    float          *dk = NULL, *dv = NULL, *dn = NULL;
    uint8_t        *dp = NULL;

    status = kvp_page_decode(page, len, KVP_DTYPE_F32, frame, NULL, NULL, &info); /* verify only */
    if (status != KVP_OK) {
        return status;
    }
    H = info.heads, D = info.head_dim, T = info.valid, n = (size_t)T * H * D;
    if (!layout_of((kvp_codec_id_t)info.codec, H, D, T, &l)) {
        return KVP_ERR_UNSUPPORTED;
    }
    CUDA_TRY(cudaMalloc((void **)&dk, n * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dv, n * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dn, (T + 1) * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&dp, l.total));
    CUDA_TRY(cudaMemcpy(dp, (const uint8_t *)page + KVP_PAGE_HDR_BYTES, l.total,
                        cudaMemcpyHostToDevice));
    if (info.codec == KVP_CODEC_KVARN) {
        KVP_LAUNCH_TRY(k_kvarn_deq, nblk(2 * n, 256), 256, dp, l.kv.rec, l.kv.v_codes, T, H, D,
                       dk, dv);
    } else {
        KVP_LAUNCH_TRY(k_chan_decode, dim3(l.q.ngk, H), D < 256 ? D : 256, dp + l.q.k_codes,
                       dp + l.q.k_scale, dp + l.q.k_zero, T, H, D, l.G, dk);
        KVP_LAUNCH_TRY(k_tok_decode, nblk(n, 256), 256, dp + l.q.v_codes, dp + l.q.v_scale,
                       dp + l.q.v_zero, (size_t)T * H, D, l.q.gv, dv);
        if (info.codec == KVP_CODEC_OSCAR && frame == KVP_FRAME_ORIGINAL) {
            CUDA_TRY(cudaMemcpy(dn, dp, 4 * (size_t)T, cudaMemcpyDeviceToDevice));
            KVP_LAUNCH_TRY(k_scale_rows, nblk(n, 256), 256, dk, T, H * D, dn);
        }
    }
    if (frame == KVP_FRAME_ORIGINAL && (info.flags & KVP_PAGE_F_K_ROTATED)) {
        KVP_LAUNCH_TRY(k_rot_rows, nblk((size_t)T * H, 128), 128, dk, (size_t)T * H, D, 0,
                       (int *)NULL);
    }
    if (frame == KVP_FRAME_ORIGINAL && (info.flags & KVP_PAGE_F_V_ROTATED)) {
        KVP_LAUNCH_TRY(k_rot_rows, nblk((size_t)T * H, 128), 128, dv, (size_t)T * H, D, 0,
                       (int *)NULL);
    }
    if (k_out != NULL) {
        CUDA_TRY(cudaMemcpy(k_out, dk, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (v_out != NULL) {
        CUDA_TRY(cudaMemcpy(v_out, dv, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
out:
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dn);
    cudaFree(dp);
    return status;
}
