/* matmul.c - the runner's only heavy kernel: W[rows][n] times up to KVP_MM_MAXB vectors at once,
 * so each weight row is loaded once per step for every lane. Written with GCC vector types; an
 * AVX2+FMA build of the same kernel (function target attribute) is chosen once at run time by
 * cpuid, else 4-wide SSE. Row blocks are shared out by par.c; each row's sum is computed by one
 * thread in a fixed order, so results do not depend on the thread count. */
#include "model.h"
#include "par.h"

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
        __builtin_cpu_init();
        fn = (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? row_avx2
                                                                               : row_generic;
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

typedef struct {
    row_fn_t     fn;
    float       *y;
    const float *x, *w;
    uint32_t     rows, n, nb;
} mm_job_t;

static void mm_task(void *arg, uint32_t t)
{
    const mm_job_t *j  = arg;
    uint32_t        r0 = t * MM_ROWS_PER_TASK;
    uint32_t        r1 = r0 + MM_ROWS_PER_TASK < j->rows ? r0 + MM_ROWS_PER_TASK : j->rows;

    for (uint32_t r = r0; r < r1; r++) {
        j->fn(j->y + r, j->rows, j->x, j->w + (size_t)r * j->n, j->n, j->nb);
    }
}

void kvp_mm(float *y, const float *x, const float *w, uint32_t rows, uint32_t n, uint32_t nb)
{
    mm_job_t j      = {mm_row(), y, x, w, rows, n, nb};
    uint32_t ntasks = (rows + MM_ROWS_PER_TASK - 1) / MM_ROWS_PER_TASK;

    if ((size_t)rows * n * nb < ((size_t)1 << 16)) {
        for (uint32_t t = 0; t < ntasks; t++) {
            mm_task(&j, t);
        }
        return;
    }
    kvp_par_for(ntasks, mm_task, &j);
}
