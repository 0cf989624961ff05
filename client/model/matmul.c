/* matmul.c - the runner's only heavy kernel: W[rows][n] times up to KVP_MM_MAXB vectors at once,
 * so each weight row is loaded once per step for every lane. Written with GCC vector types; an
 * AVX2+FMA build of the same kernel (function target attribute) is chosen once at run time by
 * cpuid, else 4-wide SSE. Row blocks are shared out by par.c; each row's sum is computed by one
 * thread in a fixed order, so results do not depend on the thread count. Quantized GGUF weights
 * (kvp_mm_q) are dequantized a row at a time into a per-thread L1 buffer (AVX2 for Q4_0/Q4_1/
 * Q8_0) and then go through the same row kernel: same values, same sums, fewer bytes read. */
#include "model.h"
#include "par.h"

#include "gguf.h"
#include "kvpack/codec.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

#define MM_ROWS_PER_TASK 32

#define LD(VT, p) ({ VT v_; memcpy(&v_, (p), sizeof(v_)); v_; })

/* One row against nb vectors: y[b * ystride] = w . x[b * n]. Each lane's sum runs over the row
 * in the same order whatever nb is; the row stays in L1 after the first lane. */
#define MM_ROW_KERNEL(NAME, ATTR, VT, VW)                                                    \
    ATTR static void NAME(float *y, size_t ystride, const float *x, const float *w,          \
                          uint32_t n, uint32_t nb)                                           \
    {                                                                                        \
        uint32_t n4 = n / (4 * VW) * (4 * VW), n1 = n / VW * VW;                             \
                                                                                             \
        for (uint32_t b = 0; b < nb; b++) {                                                  \
            const float *xb = x + (size_t)b * n;                                             \
            VT           a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                             \
            float        s  = 0.0f;                                                          \
            uint32_t     i;                                                                  \
                                                                                             \
            for (i = 0; i < n4; i += 4 * VW) {                                               \
                a0 += LD(VT, w + i) * LD(VT, xb + i);                                        \
                a1 += LD(VT, w + i + VW) * LD(VT, xb + i + VW);                              \
                a2 += LD(VT, w + i + 2 * VW) * LD(VT, xb + i + 2 * VW);                      \
                a3 += LD(VT, w + i + 3 * VW) * LD(VT, xb + i + 3 * VW);                      \
            }                                                                                \
            for (; i < n1; i += VW) {                                                        \
                a0 += LD(VT, w + i) * LD(VT, xb + i);                                        \
            }                                                                                \
            a0 = (a0 + a1) + (a2 + a3);                                                      \
            for (uint32_t j = 0; j < VW; j++) {                                              \
                s += a0[j];                                                                  \
            }                                                                                \
            for (; i < n; i++) {                                                             \
                s += w[i] * xb[i];                                                           \
            }                                                                                \
            y[b * ystride] = s;                                                              \
        }                                                                                    \
    }

/* Attention over nt cache rows (row stride `stride` floats, head slice of hd floats):
 * scores: out[t] = q . k[t]; mix: out[:] += a[t] * v[t][:] for all t. */
#define ATTN_KERNELS(SCORES, MIX, ATTR, VT, VW)                                              \
    ATTR static void SCORES(const float *q, const float *k, size_t stride, uint32_t hd,      \
                            uint32_t nt, float *out)                                         \
    {                                                                                        \
        uint32_t nv = hd / VW * VW;                                                          \
                                                                                             \
        for (uint32_t t = 0; t < nt; t++) {                                                  \
            const float *kt = k + (size_t)t * stride;                                        \
            VT           a  = {0};                                                           \
            float        s  = 0.0f;                                                          \
            uint32_t     i;                                                                  \
                                                                                             \
            for (i = 0; i < nv; i += VW) {                                                   \
                a += LD(VT, q + i) * LD(VT, kt + i);                                         \
            }                                                                                \
            for (uint32_t j = 0; j < VW; j++) {                                              \
                s += a[j];                                                                   \
            }                                                                                \
            for (; i < hd; i++) {                                                            \
                s += q[i] * kt[i];                                                           \
            }                                                                                \
            out[t] = s;                                                                      \
        }                                                                                    \
    }                                                                                        \
    ATTR static void MIX(const float *a, const float *v, size_t stride, uint32_t hd,         \
                         uint32_t nt, float *out)                                            \
    {                                                                                        \
        uint32_t nv = hd / VW * VW;                                                          \
                                                                                             \
        for (uint32_t t = 0; t < nt; t++) {                                                  \
            const float *vt = v + (size_t)t * stride;                                        \
            VT           at = {0};                                                           \
            uint32_t     i;                                                                  \
                                                                                             \
            at += a[t];                                                                      \
            for (i = 0; i < nv; i += VW) {                                                   \
                VT o = LD(VT, out + i);                                                      \
                                                                                             \
                o += at * LD(VT, vt + i);                                                    \
                memcpy(out + i, &o, sizeof(o));                                              \
            }                                                                                \
            for (; i < hd; i++) {                                                            \
                out[i] += a[t] * vt[i];                                                      \
            }                                                                                \
        }                                                                                    \
    }

MM_ROW_KERNEL(row_generic, , v4f, 4)
MM_ROW_KERNEL(row_avx2, __attribute__((target("avx2,fma"))), v8f, 8)
ATTN_KERNELS(scores_generic, mix_generic, , v4f, 4)
ATTN_KERNELS(scores_avx2, mix_avx2, __attribute__((target("avx2,fma"))), v8f, 8)

typedef void (*row_fn_t)(float *, size_t, const float *, const float *, uint32_t, uint32_t);

static row_fn_t mm_row(void)
{
    static row_fn_t fn;

    if (fn == NULL) {
        fn = kvp_cpu_has_avx2() ? row_avx2 : row_generic; /* the codecs' test: AVX2, FMA, F16C */
    }
    return fn;
}

const char *kvp_mm_impl(void)
{
    return mm_row() == row_avx2 ? "avx2" : "generic";
}

void kvp_attn_scores(const float *q, const float *k, size_t stride, uint32_t hd, uint32_t nt,
                     float *out)
{
    (mm_row() == row_avx2 ? scores_avx2 : scores_generic)(q, k, stride, hd, nt, out);
}

void kvp_attn_mix(const float *a, const float *v, size_t stride, uint32_t hd, uint32_t nt,
                  float *out)
{
    (mm_row() == row_avx2 ? mix_avx2 : mix_generic)(a, v, stride, hd, nt, out);
}

/* ---- quantized rows: dequantize into an L1 buffer, values exactly as kvp_ggml_dequant ---- */

#define MM_QROW_MAX 16384 /* longest row dequantized on the fly (floats per thread) */

static _Thread_local float qrow_buf[MM_QROW_MAX];

typedef void (*dq_fn_t)(const uint8_t *src, float *dst, uint32_t n);

/* fp16 -> fp32 by F16C (exact, as kvp_f16_to_f32) */
__attribute__((target("f16c"))) static inline __attribute__((always_inline)) float h2f(const uint8_t *p)
{
    uint16_t h;

    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* q*d is exact for 4- and 8-bit q and an fp16 d, so fma(q, d, m) equals the scalar q*d + m. */
#define DQ_AVX2 __attribute__((target("avx2,fma,f16c")))

/* 8 codes (low bytes of c) - off, times d plus m, to y[0..7] */
DQ_AVX2 static inline __attribute__((always_inline)) void dq8(__m128i c, int off, __m256 d,
                                                             __m256 m, float *y)
{
    __m256i q = _mm256_cvtepu8_epi32(c);

    if (off != 0) {
        q = _mm256_sub_epi32(q, _mm256_set1_epi32(off));
    }
    _mm256_storeu_ps(y, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, m));
}

DQ_AVX2 static inline __attribute__((always_inline)) void dq_q4_avx2(const uint8_t *b, float *y,
                                                                    int has_min)
{
    __m256  d   = _mm256_set1_ps(h2f(b));
    __m256  m   = _mm256_set1_ps(has_min ? h2f(b + 2) : 0.0f);
    __m128i v   = _mm_loadu_si128((const __m128i *)(b + (has_min ? 4 : 2)));
    __m128i lo  = _mm_and_si128(v, _mm_set1_epi8(0x0F));
    __m128i hi  = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
    int     off = has_min ? 0 : 8;

    dq8(lo, off, d, m, y);
    dq8(_mm_srli_si128(lo, 8), off, d, m, y + 8);
    dq8(hi, off, d, m, y + 16);
    dq8(_mm_srli_si128(hi, 8), off, d, m, y + 24);
}

DQ_AVX2 static void dq_row_q4_0_avx2(const uint8_t *src, float *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i += 32, src += 18) {
        dq_q4_avx2(src, dst + i, 0);
    }
}

DQ_AVX2 static void dq_row_q4_1_avx2(const uint8_t *src, float *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i += 32, src += 20) {
        dq_q4_avx2(src, dst + i, 1);
    }
}

DQ_AVX2 static void dq_row_q8_0_avx2(const uint8_t *src, float *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i += 32, src += 34) {
        __m256 d = _mm256_set1_ps(h2f(src));

        for (int k = 0; k < 4; k++) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(src + 2 + 8 * k));

            _mm256_storeu_ps(dst + i + 8 * k,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
        }
    }
}

/* AVX2 row dequantizer for the type; NULL (use the fp32 copy) for other types or CPUs. */
static dq_fn_t dq_row(uint32_t type)
{
    if (mm_row() == row_avx2) {
        switch (type) {
        case KVP_GGML_Q4_0: return dq_row_q4_0_avx2;
        case KVP_GGML_Q4_1: return dq_row_q4_1_avx2;
        case KVP_GGML_Q8_0: return dq_row_q8_0_avx2;
        default:            return NULL;
        }
    }
    return NULL;
}

static int quant_on = -1;

int kvp_mm_quant_enabled(void)
{
    if (quant_on < 0) {
        const char *e = getenv("KVP_MM_QUANT");

        quant_on = !(e != NULL && strcmp(e, "0") == 0);
    }
    return quant_on;
}

void kvp_mm_set_quant(int on)
{
    quant_on = on != 0;
}

typedef struct {
    row_fn_t       fn;
    float         *y;
    const float   *x, *w;
    const uint8_t *q;        /* quantized rows or NULL */
    size_t         q_row;    /* bytes per quantized row */
    dq_fn_t        dq;
    uint32_t       rows, n, nb;
} mm_job_t;

static void mm_task(void *arg, uint32_t t)
{
    const mm_job_t *j  = arg;
    uint32_t        r0 = t * MM_ROWS_PER_TASK;
    uint32_t        r1 = r0 + MM_ROWS_PER_TASK < j->rows ? r0 + MM_ROWS_PER_TASK : j->rows;

    for (uint32_t r = r0; r < r1; r++) {
        const float *w = j->w + (size_t)r * j->n;

        if (j->q != NULL) {
            j->dq(j->q + (size_t)r * j->q_row, qrow_buf, j->n);
            w = qrow_buf;
        }
        j->fn(j->y + r, j->rows, j->x, w, j->n, j->nb);
    }
}

static void mm_run(mm_job_t *j);

void kvp_mm_q(float *y, const float *x, const float *w, const kvp_qmat_t *q, uint32_t rows,
              uint32_t n, uint32_t nb)
{
    mm_job_t j = {mm_row(), y, x, w, NULL, 0, NULL, rows, n, nb};

    if (q != NULL && q->data != NULL && n <= MM_QROW_MAX && kvp_mm_quant_enabled()) {
        j.dq = dq_row(q->type);
        if (j.dq != NULL) {
            j.q     = q->data;
            j.q_row = q->row_bytes;
        }
    }
    mm_run(&j);
}

void kvp_mm(float *y, const float *x, const float *w, uint32_t rows, uint32_t n, uint32_t nb)
{
    mm_job_t j = {mm_row(), y, x, w, NULL, 0, NULL, rows, n, nb};

    mm_run(&j);
}

static void mm_run(mm_job_t *j)
{
    uint32_t ntasks = (j->rows + MM_ROWS_PER_TASK - 1) / MM_ROWS_PER_TASK;

    if ((size_t)j->rows * j->n * j->nb < ((size_t)1 << 16)) {
        for (uint32_t t = 0; t < ntasks; t++) {
            mm_task(j, t);
        }
        return;
    }
    kvp_par_for(ntasks, mm_task, j);
}
