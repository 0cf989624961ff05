/* kvarn_avx2.c - AVX2 KVarN: VarN with one fused pass per iteration (exp-domain scales, std from
 * sums and sums of squares: a row block's stds set its new row scales, and the same rows, still
 * in L1, add their terms to the column sums), the per-row RTN with reciprocal products, and the
 * fp16 tile builders. Differs from q2_ref.c by rounding only (documented tolerance); the
 * selection rule (best imbalance, later ties win) and every clamp are the reference's. A std
 * from sums loses its bits where the mean dwarfs the spread (s2 - s1^2/n cancels: a row or
 * column of 1000 + 0.01·noise got a std of 0 and 2-bit errors of 16 where the reference's
 * two-pass std gives 0.03), so such a tile is handed to the reference whole (ill8). */
#include "codec_ops.h"
#include "q2_int.h"
#include "q2h_int.h"
#include "quant_hd.h"
#include "avx2_int.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* sums of 4 vectors each -> one vector of the 4 sums */
static inline __m128 hsum4x(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));

    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* unbiased std from sums, 8 or 4 lanes: sqrt(max(0, (s2 - s1^2/n) / (n-1))), n < 2 -> 0 */
static inline __m256 std8(__m256 s1, __m256 s2, uint32_t n)
{
    __m256 v;

    if (n < 2) {
        return _mm256_setzero_ps();
    }
    v = _mm256_div_ps(_mm256_sub_ps(s2, _mm256_div_ps(_mm256_mul_ps(s1, s1), _mm256_set1_ps((float)n))),
                      _mm256_set1_ps((float)(n - 1)));
    return _mm256_sqrt_ps(_mm256_max_ps(v, _mm256_setzero_ps()));
}

/* lanes whose sums s1, s2 of n values leave (n-1)·var under 2^-14 of s2 (a mean over ~128
 * stds): past that, fp32's s2 - s1^2/n keeps fewer than ~7 good bits of the variance (its
 * error is about sqrt(n)·eps·s2); 0 when none. VarN itself can drive a row there (one offset
 * row over quiet data: the column scales flatten it to mean/std ~ 60, which stays here). */
static inline int ill8(__m256 s1, __m256 s2, __m256 inv_n)
{
    __m256 d = _mm256_sub_ps(s2, _mm256_mul_ps(_mm256_mul_ps(s1, s1), inv_n));

    return _mm256_movemask_ps(_mm256_cmp_ps(d, _mm256_mul_ps(s2, _mm256_set1_ps(0x1p-14f)),
                                            _CMP_LT_OQ));
}

static inline __m256 estep8(__m256 e, __m256 sd, float e_lo, float e_hi)
{
    sd = _mm256_min_ps(_mm256_max_ps(sd, _mm256_set1_ps(KVP_VARN_STD_LO)), _mm256_set1_ps(KVP_VARN_STD_HI));
    return _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(e, sd), _mm256_set1_ps(e_lo)), _mm256_set1_ps(e_hi));
}

#define KVP_AI static inline __attribute__((always_inline))

/* The caller's next rows (kvp_next_rows_t) as a cursor: each row block of a pass pulls a few
 * whole rows into L2, so the next tile's DRAM reads overlap VarN's arithmetic instead of
 * stalling the next rotation (or a burst of prefetches stalling this VarN). */
typedef struct {
    const char *p;
    size_t      stride, rows;
    uint32_t    lines, per_step; /* 64-byte lines per row, rows per step */
} next_cursor_t;

static void next_cursor_init(next_cursor_t *nc, const kvp_next_rows_t *next, uint32_t steps)
{
    memset(nc, 0, sizeof(*nc));
    if (next != NULL && next->base != NULL && next->rows > 0) {
        nc->p        = next->base;
        nc->stride   = next->stride;
        nc->rows     = next->rows;
        nc->lines    = (uint32_t)((next->row_bytes + 63) / 64);
        nc->per_step = (uint32_t)((next->rows + steps - 1) / steps);
    }
}

KVP_AI void next_cursor_step(next_cursor_t *nc)
{
    for (uint32_t n = nc->per_step; n > 0 && nc->rows > 0; n--, nc->rows--) {
        for (uint32_t l = 0; l < nc->lines; l++) {
            _mm_prefetch(nc->p + 64 * (size_t)l, _MM_HINT_T1);
        }
        nc->p += nc->stride;
    }
}

/* Row j of a block: xa[j] (a pointer list, for a partial block whose missing rows repeat its
 * first) or xb + j * ld (xa NULL: a full block, constant offsets when ld is a constant) */
#define KVP_ROW(j) (xa != NULL ? xa[j] : xb + (size_t)(j) * ld)

/* column sums of the 8 rows of a block with weights w (0 for rows past R; unit: all 1, no
 * multiplies): per column vector z_j = x_j w_j, a += z_j, b += z_j^2 in two chains of 4 rows
 * (the first seeded with S1/S2), so the 8 products need not be live at once and each chain is
 * 4 deep; the empty asm after each step keeps GCC from hoisting all 8 multiplies (which spilled
 * two of the 8 weights) */
static inline __attribute__((always_inline)) void col_part(const float *const *xa, const float *xb,
                                                           size_t ld, __m256 w, uint32_t C,
                                                           float *S1, float *S2, int unit)
{
    const float *x0 = KVP_ROW(0), *x1 = KVP_ROW(1), *x2 = KVP_ROW(2), *x3 = KVP_ROW(3);
    const float *x4 = KVP_ROW(4), *x5 = KVP_ROW(5), *x6 = KVP_ROW(6), *x7 = KVP_ROW(7);
    __m256 w0 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(0));
    __m256 w1 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(1));
    __m256 w2 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(2));
    __m256 w3 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(3));
    __m256 w4 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(4));
    __m256 w5 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(5));
    __m256 w6 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(6));
    __m256 w7 = _mm256_permutevar8x32_ps(w, _mm256_set1_epi32(7));

    for (uint32_t c = 0; c < C; c += 8) {
        __m256 z = unit ? _mm256_loadu_ps(x0 + c) : _mm256_mul_ps(_mm256_loadu_ps(x0 + c), w0);
        __m256 u = unit ? _mm256_loadu_ps(x4 + c) : _mm256_mul_ps(_mm256_loadu_ps(x4 + c), w4);
        __m256 a = _mm256_add_ps(_mm256_loadu_ps(S1 + c), z), a1 = u;
        __m256 b = _mm256_fmadd_ps(z, z, _mm256_loadu_ps(S2 + c)), b1 = _mm256_mul_ps(u, u);

#define COLT(xj, wj, a, b) \
        z = unit ? _mm256_loadu_ps(xj + c) : _mm256_mul_ps(_mm256_loadu_ps(xj + c), wj); \
        a = _mm256_add_ps(a, z); \
        b = _mm256_fmadd_ps(z, z, b); \
        __asm__("" : "+x"(a), "+x"(b));
        COLT(x1, w1, a, b)
        COLT(x5, w5, a1, b1)
        COLT(x2, w2, a, b)
        COLT(x6, w6, a1, b1)
        COLT(x3, w3, a, b)
        COLT(x7, w7, a1, b1)
#undef COLT
        a = _mm256_add_ps(a, a1);
        b = _mm256_add_ps(b, b1);
        _mm256_storeu_ps(S1 + c, a);
        _mm256_storeu_ps(S2 + c, b);
    }
}

/* sums and sums of squares of 4 rows of x . k -> lanes of s, q (unit: k = 1, no multiplies) */
static inline __attribute__((always_inline)) void row_dots4(const float *const *xa, const float *xb,
                                                            size_t ld, const float *k, uint32_t C,
                                                            __m128 *s, __m128 *q, int unit)
{
    const float *x[4] = {KVP_ROW(0), KVP_ROW(1), KVP_ROW(2), KVP_ROW(3)};
    __m256       s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    __m256       q0 = s0, q1 = s0, q2 = s0, q3 = s0;

    for (uint32_t c = 0; c < C; c += 8) {
        __m256 kk = unit ? _mm256_setzero_ps() : _mm256_loadu_ps(k + c);
        __m256 y0 = unit ? _mm256_loadu_ps(x[0] + c) : _mm256_mul_ps(_mm256_loadu_ps(x[0] + c), kk);
        __m256 y1 = unit ? _mm256_loadu_ps(x[1] + c) : _mm256_mul_ps(_mm256_loadu_ps(x[1] + c), kk);
        __m256 y2 = unit ? _mm256_loadu_ps(x[2] + c) : _mm256_mul_ps(_mm256_loadu_ps(x[2] + c), kk);
        __m256 y3 = unit ? _mm256_loadu_ps(x[3] + c) : _mm256_mul_ps(_mm256_loadu_ps(x[3] + c), kk);

        s0 = _mm256_add_ps(s0, y0);
        s1 = _mm256_add_ps(s1, y1);
        s2 = _mm256_add_ps(s2, y2);
        s3 = _mm256_add_ps(s3, y3);
        q0 = _mm256_fmadd_ps(y0, y0, q0);
        q1 = _mm256_fmadd_ps(y1, y1, q1);
        q2 = _mm256_fmadd_ps(y2, y2, q2);
        q3 = _mm256_fmadd_ps(y3, y3, q3);
    }
    *s = hsum4x(s0, s1, s2, s3);
    *q = hsum4x(q0, q1, q2, q3);
}

/* raw row stds of 8 rows from sums s, q (the caller keeps them: a later iteration whose column
 * scales did not move reuses them instead of a row part) */
static inline __m256 row_raw(__m256 s, __m256 q, __m256 inv_n, __m256 inv_n1)
{
    __m256 var = _mm256_mul_ps(_mm256_sub_ps(q, _mm256_mul_ps(_mm256_mul_ps(s, s), inv_n)), inv_n1);

    return _mm256_sqrt_ps(_mm256_max_ps(var, _mm256_setzero_ps()));
}

/* from the raw stds of rows r0..r0+7: (upd) new Er/ir/rowstd, and in *moved a bit for each valid
 * row whose scale changed; returns the column weights (ir, 0 for rows past R) */
/* lanes of the rows r0..r0+7 that are below R */
static inline __m256 row_valid(uint32_t r0, uint32_t R)
{
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)R - (int)r0),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

static inline __attribute__((always_inline)) __m256 row_scale(__m256 raw, float *Er, float *ir,
    float *rowstd, uint32_t r0, uint32_t R, int upd, float e_lo, float e_hi, int *moved)
{
    __m256 w     = _mm256_loadu_ps(ir + r0);
    __m256 valid = row_valid(r0, R);

    if (upd) { /* std of the current rows = raw * ir (old); then the new row scale */
        __m256 e0 = _mm256_loadu_ps(Er + r0);
        __m256 e  = estep8(e0, _mm256_mul_ps(raw, w), e_lo, e_hi);

        *moved |= _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(e, e0, _CMP_NEQ_UQ), valid));
        w = _mm256_div_ps(_mm256_set1_ps(1.0f), e);
        _mm256_storeu_ps(Er + r0, e);
        _mm256_storeu_ps(ir + r0, w);
        _mm256_storeu_ps(rowstd + r0, _mm256_mul_ps(raw, w));
    } else {
        _mm256_storeu_ps(rowstd + r0, raw);
    }
    return _mm256_and_ps(w, valid); /* rows past R add nothing */
}

/* the row parts of a 16-row block (4 x row_dots4; xb is not offset when the rows come from xa,
 * a partial block, so no pointer leaves X); unit when !upd (the first pass: ic = 1) */
KVP_AI void row4x4(const float *const *xa, const float *xb, size_t ld, const float *ic, uint32_t C,
                   __m128 *s0, __m128 *q0, __m128 *s1, __m128 *q1, __m128 *s2, __m128 *q2,
                   __m128 *s3, __m128 *q3, int upd)
{
    if (upd) {
        row_dots4(xa, xb, ld, ic, C, s0, q0, 0);
        row_dots4(xa ? xa + 4 : NULL, xa ? xb : xb + 4 * ld, ld, ic, C, s1, q1, 0);
        row_dots4(xa ? xa + 8 : NULL, xa ? xb : xb + 8 * ld, ld, ic, C, s2, q2, 0);
        row_dots4(xa ? xa + 12 : NULL, xa ? xb : xb + 12 * ld, ld, ic, C, s3, q3, 0);
    } else {
        row_dots4(xa, xb, ld, ic, C, s0, q0, 1);
        row_dots4(xa ? xa + 4 : NULL, xa ? xb : xb + 4 * ld, ld, ic, C, s1, q1, 1);
        row_dots4(xa ? xa + 8 : NULL, xa ? xb : xb + 8 * ld, ld, ic, C, s2, q2, 1);
        row_dots4(xa ? xa + 12 : NULL, xa ? xb : xb + 12 * ld, ld, ic, C, s3, q3, 1);
    }
}

/* The scratch of one VarN: per row (padded to Rp) its scale, reciprocal, std and raw std (of X
 * times the column reciprocals), per column the sums S1/S2 of the last column part */
typedef struct {
    float *Er, *ir, *rowstd, *raw, *S1, *S2;
    int   *ill; /* set when a row's std lost its bits to cancellation (ill8) */
} varn_rows_t;

/* One pass over X's rows in 16-row blocks: the row part (raw std of X_rc * ic_c per row, kept in
 * v->raw; then, upd, the row's new scale), and, when cols, the column part (S1/S2[c] collect
 * X_rc * ir_r with the new ir, and its square). A block's column part runs after the next
 * block's row part, so the std -> scale latency of one block overlaps the other's arithmetic (and
 * 16 rows give two independent chains per block). Returns whether any row scale moved. */
KVP_AI int pass_impl(const float *X, uint32_t R, uint32_t C, const float *ic, const varn_rows_t *v,
                     int upd, int cols, float e_lo, float e_hi, next_cursor_t *nc)
{
    const float *xl[16]; /* rows of a partial last block */
    const float *xq = NULL;
    __m256       wp0 = _mm256_setzero_ps(), wp1 = wp0;
    __m256       inv_n = _mm256_set1_ps(1.0f / (float)C);
    __m256       inv_n1 = _mm256_set1_ps(C > 1 ? 1.0f / (float)(C - 1) : 0.0f);
    float       *S1 = v->S1, *S2 = v->S2;
    int          moved = 0;

    for (uint32_t c = 0; cols && c < C; c += 8) { /* not memset: rep stos starts slowly (the */
        _mm256_storeu_ps(S1 + c, _mm256_setzero_ps()); /* asm keeps GCC from making this loop */
        _mm256_storeu_ps(S2 + c, _mm256_setzero_ps()); /* one) */
        __asm__("" : "+r"(c));
    }
    for (uint32_t r0 = 0; r0 < R; r0 += 16) {
        const float  *xb = X + (size_t)r0 * C;
        const float **xa = NULL;
        __m128        s0, q0, s1, q1, s2, q2, s3, q3;
        __m256        raw0, raw1;

        next_cursor_step(nc);

        if (r0 + 16 > R) {
            for (uint32_t j = 0; j < 16; j++) {
                xl[j] = X + (size_t)(r0 + j < R ? r0 + j : r0) * C;
            }
            xa = xl;
        }
        if (xa == NULL) { /* full block: xa is a known NULL in these calls */
            row4x4(NULL, xb, C, ic, C, &s0, &q0, &s1, &q1, &s2, &q2, &s3, &q3, upd);
        } else {
            row4x4(xa, xb, C, ic, C, &s0, &q0, &s1, &q1, &s2, &q2, &s3, &q3, upd);
        }
        /* the previous (full) block's column part before this block's std -> scale chains
         * (sqrt, div): the chains then overlap the next row part instead of stalling retirement */
        if (cols && xq != NULL && upd) {
            col_part(NULL, xq, C, wp0, C, S1, S2, 0);
            col_part(NULL, xq + 8 * (size_t)C, C, wp1, C, S1, S2, 0);
        } else if (cols && xq != NULL) { /* first pass: the weights of a full block are 1 */
            col_part(NULL, xq, C, wp0, C, S1, S2, 1);
            col_part(NULL, xq + 8 * (size_t)C, C, wp1, C, S1, S2, 1);
        }
        raw0 = row_raw(_mm256_set_m128(s1, s0), _mm256_set_m128(q1, q0), inv_n, inv_n1);
        raw1 = row_raw(_mm256_set_m128(s3, s2), _mm256_set_m128(q3, q2), inv_n, inv_n1);
        *v->ill |= (ill8(_mm256_set_m128(s1, s0), _mm256_set_m128(q1, q0), inv_n) |
                    ill8(_mm256_set_m128(s3, s2), _mm256_set_m128(q3, q2), inv_n) << 8) &
                   (R - r0 >= 16 ? 0xffff : (1 << (R - r0)) - 1); /* rows past R repeat one */
        _mm256_storeu_ps(v->raw + r0, raw0);
        _mm256_storeu_ps(v->raw + r0 + 8, raw1);
        wp0 = row_scale(raw0, v->Er, v->ir, v->rowstd, r0, R, upd, e_lo, e_hi, &moved);
        wp1 = row_scale(raw1, v->Er, v->ir, v->rowstd, r0 + 8, R, upd, e_lo, e_hi, &moved);
        xq  = xb;
        if (!cols || r0 + 16 < R) {
            continue;
        }
        if (xa == NULL && upd) {
            col_part(NULL, xb, C, wp0, C, S1, S2, 0);
            col_part(NULL, xb + 8 * (size_t)C, C, wp1, C, S1, S2, 0);
        } else if (xa == NULL) {
            col_part(NULL, xb, C, wp0, C, S1, S2, 1);
            col_part(NULL, xb + 8 * (size_t)C, C, wp1, C, S1, S2, 1);
        } else { /* partial: weights of the missing rows are 0 */
            col_part(xa, xb, C, wp0, C, S1, S2, 0);
            col_part(xa + 8, xb, C, wp1, C, S1, S2, 0);
        }
    }
    return moved;
}

/* the column part alone, with the current row scales (the same sums, in the same order, as the
 * column part of a fused pass with these scales) */
static void col_pass(const float *X, uint32_t R, uint32_t C, const varn_rows_t *v,
                     next_cursor_t *nc)
{
    const float *xl[16];

    for (uint32_t c = 0; c < C; c += 8) {
        _mm256_storeu_ps(v->S1 + c, _mm256_setzero_ps());
        _mm256_storeu_ps(v->S2 + c, _mm256_setzero_ps());
    }
    for (uint32_t r0 = 0; r0 < R; r0 += 16) {
        const float *xb = X + (size_t)r0 * C;
        __m256       w0, w1;

        next_cursor_step(nc);
        w0 = _mm256_and_ps(_mm256_loadu_ps(v->ir + r0), row_valid(r0, R));
        w1 = _mm256_and_ps(_mm256_loadu_ps(v->ir + r0 + 8), row_valid(r0 + 8, R));

        if (r0 + 16 <= R) {
            col_part(NULL, xb, C, w0, C, v->S1, v->S2, 0);
            col_part(NULL, xb + 8 * (size_t)C, C, w1, C, v->S1, v->S2, 0);
            continue;
        }
        for (uint32_t j = 0; j < 16; j++) {
            xl[j] = X + (size_t)(r0 + j < R ? r0 + j : r0) * C;
        }
        col_part(xl, xb, C, w0, C, v->S1, v->S2, 0);
        col_part(xl + 8, xb, C, w1, C, v->S1, v->S2, 0);
    }
}

static int fused_pass(const float *X, uint32_t R, uint32_t C, const float *ic, const varn_rows_t *v,
                      int upd, int cols, float e_lo, float e_hi, next_cursor_t *nc)
{
    if (C == 128 && cols) { /* the page shape: rows at constant offsets */
        return pass_impl(X, R, 128, ic, v, upd, 1, e_lo, e_hi, nc);
    } else if (C == 128) {
        return pass_impl(X, R, 128, ic, v, upd, 0, e_lo, e_hi, nc);
    } else if (cols) {
        return pass_impl(X, R, C, ic, v, upd, 1, e_lo, e_hi, nc);
    }
    return pass_impl(X, R, C, ic, v, upd, 0, e_lo, e_hi, nc);
}

/* the row scales from the kept raw stds (the column scales did not move, so a row part would
 * compute the same ones), in the row part's 16-row blocks so that pad rows too end as they would */
static int rows_from_raw(uint32_t R, const varn_rows_t *v, float e_lo, float e_hi)
{
    int moved = 0;

    for (uint32_t r0 = 0; r0 < R; r0 += 16) {
        (void)row_scale(_mm256_loadu_ps(v->raw + r0), v->Er, v->ir, v->rowstd, r0, R, 1, e_lo,
                        e_hi, &moved);
        (void)row_scale(_mm256_loadu_ps(v->raw + r0 + 8), v->Er, v->ir, v->rowstd, r0 + 8, R, 1,
                        e_lo, e_hi, &moved);
    }
    return moved;
}

/* max/min of n floats (n % 8 == 0) */
static inline void minmax(const float *v, uint32_t n, float *mn, float *mx)
{
    __m256 a = _mm256_loadu_ps(v), b = a;
    float  t[8], u[8];

    for (uint32_t i = 8; i < n; i += 8) {
        a = _mm256_min_ps(a, _mm256_loadu_ps(v + i));
        b = _mm256_max_ps(b, _mm256_loadu_ps(v + i));
    }
    _mm256_storeu_ps(t, a);
    _mm256_storeu_ps(u, b);
    *mn = t[0];
    *mx = u[0];
    for (int i = 1; i < 8; i++) {
        *mn = t[i] < *mn ? t[i] : *mn;
        *mx = u[i] > *mx ? u[i] : *mx;
    }
}

static float imb_v(const float *colstd, uint32_t C, const float *rowstd, uint32_t R)
{
    float cmn, cmx, rmn, rmx;

    minmax(colstd, C, &cmn, &cmx);
    if (R % 8 == 0) {
        minmax(rowstd, R, &rmn, &rmx);
    } else {
        rmn = rmx = rowstd[0];
        for (uint32_t r = 1; r < R; r++) {
            rmx = rowstd[r] > rmx ? rowstd[r] : rmx;
            rmn = rowstd[r] < rmn ? rowstd[r] : rmn;
        }
    }
    return kvp_hd_ratio(cmx, cmn) + kvp_hd_ratio(rmx, rmn);
}

/* the column stds from the column sums S1/S2 of R rows (times ic, the column reciprocals, when
 * not NULL) into colstd; returns the ill8 lanes (0 for one row: no column spread to lose) */
static int col_stds(const varn_rows_t *v, uint32_t R, uint32_t C, const float *ic, float *colstd)
{
    __m256 inv_r = _mm256_set1_ps(1.0f / (float)R);
    int    ill   = 0;

    for (uint32_t c = 0; c < C; c += 8) {
        __m256 s1 = _mm256_loadu_ps(v->S1 + c), s2 = _mm256_loadu_ps(v->S2 + c);
        __m256 sd = std8(s1, s2, R);

        ill |= R > 1 ? ill8(s1, s2, inv_r) : 0;
        _mm256_storeu_ps(colstd + c, ic != NULL ? _mm256_mul_ps(sd, _mm256_loadu_ps(ic + c)) : sd);
    }
    return ill;
}

/* work: 5*C + 4*Rp floats, Rp = R rounded up to 16 (the kernel contract gives R*C + 4*(R+C);
 * tiles too small for that take the reference).
 * Skipped parts (exact, not an early stop): every iteration runs, but a part whose inputs did not
 * change since it last ran is not run again. When step 1 leaves every column scale as it was
 * (bitwise; e.g. all columns at a clamp), the row part would see the same ic and compute the
 * same raw stds, so the kept ones are used; when step 2 leaves every row scale as it was, the
 * column part would compute the same S1/S2, so they are kept. The column part is fused with the
 * row part while the row scales keep moving; once an iteration left them still, the next runs its
 * row part alone and a column pass follows only if a row scale moved after all. The scales, the
 * stds, each imbalance and so the selection are bit for bit those of running every part. */
/* returns 0 when the tile took the reference (too small a work area for this layout) */
static int varn_tile(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                     float *Sr, float *work, const kvp_next_rows_t *next, int skip,
                     kvp_varn_parts_t *parts)
{
    uint32_t    Rp = (R + 15) & ~15u;
    float      *Ec = work, *ic = Ec + C, *colstd = ic + C;
    varn_rows_t v;
    float       best, e_lo = expf(KVP_VARN_LOG_LO), e_hi = expf(KVP_VARN_LOG_HI);
    int         rows_moved = 1, ill = 0;
    next_cursor_t nc;

    if (C % 8 != 0 || (size_t)R * C + 4 * (size_t)(R + C) < 5 * (size_t)C + 4 * (size_t)Rp) {
        kvp_q2_ref_varn(X, R, C, iters, Sc, Sr, work, next);
        return 0;
    }
    v.S1 = colstd + C, v.S2 = v.S1 + C, v.Er = v.S2 + C, v.ir = v.Er + Rp;
    v.rowstd = v.ir + Rp, v.raw = v.rowstd + Rp, v.ill = &ill;
    next_cursor_init(&nc, next, (iters + 1) * (Rp / 16)); /* one step per row block */
    for (uint32_t c = 0; c < C; c += 8) { /* C % 8 == 0, Rp % 16 == 0 */
        _mm256_storeu_ps(Ec + c, _mm256_set1_ps(1.0f));
        _mm256_storeu_ps(ic + c, _mm256_set1_ps(1.0f));
        _mm256_storeu_ps(Sc + c, _mm256_set1_ps(1.0f));
    }
    for (uint32_t r = 0; r < Rp; r += 8) {
        _mm256_storeu_ps(v.Er + r, _mm256_set1_ps(1.0f));
        _mm256_storeu_ps(v.ir + r, _mm256_set1_ps(1.0f));
    }
    for (uint32_t r = 0; r < R; r++) {
        Sr[r] = 1.0f;
    }
    (void)fused_pass(X, R, C, ic, &v, 0, 1, e_lo, e_hi, &nc);
    ill |= col_stds(&v, R, C, NULL, colstd);
    if (ill) {
        kvp_q2_ref_varn(X, R, C, iters, Sc, Sr, work, next);
        return 0;
    }
    best = imb_v(colstd, C, v.rowstd, R);
    for (uint32_t it = 0; it < iters; it++) {
        __m256 cm = _mm256_setzero_ps();
        float  imb;
        int    moved;

        for (uint32_t c = 0; c < C; c += 8) {
            __m256 e0 = _mm256_loadu_ps(Ec + c);
            __m256 e  = estep8(e0, _mm256_loadu_ps(colstd + c), e_lo, e_hi);

            cm = _mm256_or_ps(cm, _mm256_cmp_ps(e, e0, _CMP_NEQ_UQ));
            _mm256_storeu_ps(Ec + c, e);
            _mm256_storeu_ps(ic + c, _mm256_div_ps(_mm256_set1_ps(1.0f), e));
        }
        if (skip && _mm256_movemask_ps(cm) == 0 && it > 0) { /* same ic as the last row part */
            moved = rows_from_raw(R, &v, e_lo, e_hi);
            parts->rows_kept++;
            if (moved) {
                col_pass(X, R, C, &v, &nc);
                parts->cols_after_raw++;
            } else {
                parts->cols_kept++;
            }
            for (uint32_t r0 = 0; !moved && r0 < R; r0 += 16) { /* keep the prefetch pace */
                next_cursor_step(&nc);
            }
        } else if (rows_moved || !skip) {
            moved = fused_pass(X, R, C, ic, &v, 1, 1, e_lo, e_hi, &nc);
        } else {
            moved = fused_pass(X, R, C, ic, &v, 1, 0, e_lo, e_hi, &nc);
            if (moved) { /* its prefetch steps run ahead of plan: the cursor stops at the end */
                col_pass(X, R, C, &v, &nc);
                parts->cols_after_row++;
            } else {
                parts->cols_kept++;
            }
        }
        rows_moved = moved;
        ill |= col_stds(&v, R, C, ic, colstd);
        if (ill) { /* the scales so far came from bad stds: the reference from the start */
            kvp_q2_ref_varn(X, R, C, iters, Sc, Sr, work, next);
            return 0;
        }
        imb = imb_v(colstd, C, v.rowstd, R);
        if (imb <= best) { /* later ties win */
            best = imb;
            memcpy(Sc, Ec, C * sizeof(float));
            memcpy(Sr, v.Er, R * sizeof(float));
        }
    }
    return 1;
}

void kvp_q2_avx2_varn(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                      float *Sr, float *work, const kvp_next_rows_t *next)
{
    kvp_varn_parts_t parts = {0};

    (void)varn_tile(X, R, C, iters, Sc, Sr, work, next, 1, &parts);
}

void kvp_q2_avx2_varn_parts(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc,
                            float *Sr, float *work, int skip, kvp_varn_parts_t *parts)
{
    const uint8_t *b = (const uint8_t *)work; /* Ec ic colstd S1 S2 [C], Er ir rowstd raw [Rp] */
    size_t         n = (5 * (size_t)C + 4 * (size_t)((R + 15) & ~15u)) * sizeof(float);

    if (!varn_tile(X, R, C, iters, Sc, Sr, work, NULL, skip, parts)) {
        b = (const uint8_t *)Sc, n = C * sizeof(float); /* the test compares Sr itself */
    }
    parts->state = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        parts->state = (parts->state ^ b[i]) * 1099511628211ull;
    }
}

static inline void st_h8(uint8_t *p, __m256 v)
{
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* 32 codes (4 x 8 int32 lanes, consecutive) -> 8 bytes, each lane clamped to [0, 3] (the packs
 * saturate negatives to 0, the byte min takes the rest to 3) */
static inline void pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3, uint8_t *out)
{
    __m256i b = _mm256_min_epu8(_mm256_packus_epi16(_mm256_packus_epi32(q0, q1), _mm256_packus_epi32(q2, q3)),
                                _mm256_set1_epi8(3));
    __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(b, _mm256_set1_epi32(0x40100401)),
                                  _mm256_set1_epi16(1));
    __m256i y = _mm256_packus_epi16(_mm256_packus_epi32(w, w), _mm256_setzero_si256());

    _mm_storel_epi64((__m128i *)(void *)out,
                     _mm_unpacklo_epi8(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1)));
}

/* rint(y * m + o) as int32 lanes (clampf: clamped to [0, 3] in float first) */
static inline __attribute__((always_inline)) __m256i code8(const float *y, __m256 m, __m256 o,
                                                           int clampf)
{
    __m256 t = _mm256_fmadd_ps(_mm256_load_ps(y), m, o);

    if (clampf) {
        t = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), _mm256_set1_ps(KVP_Q2_MAX));
    }
    return _mm256_cvtps_epi32(t); /* round to nearest even (MXCSR default) */
}

/* codes of one row, clamped to [0, 3] by pack32 */
static inline __attribute__((always_inline)) void code_row(const float *y, uint32_t C, __m256 m,
                                                           __m256 o, uint8_t *out, int clampf)
{
    for (uint32_t c = 0; c < C; c += 32) {
        pack32(code8(y + c, m, o, clampf), code8(y + c + 8, m, o, clampf),
               code8(y + c + 16, m, o, clampf), code8(y + c + 24, m, o, clampf), out + c / 4);
    }
}

/* Per-row RTN of X/Sc/Sr as reciprocal products, 8 rows at a time (C % 32 == 0 here; else the
 * reference): y = X * (1/Sc), kept in an L1 buffer for the code pass; row min/max of y times
 * 1/Sr are lo/hi (scaling by a positive number keeps the order); code = rint(clamp(t)), t =
 * y * (1/(Sr*s)) - lo/s. When every |t| of the 8 rows is below 2^30 (|t| <= 2 max(|lo|, |hi|) / s)
 * the clamp is done on the integers by pack32: the same codes, since the bounds are integers;
 * otherwise (huge lo/s, NaN) t is clamped in float first, as before. */
void kvp_q2_avx2_kvarn_rtn(const float *X, uint32_t R, uint32_t C, const float *Sc,
                           const float *Sr, uint8_t *codes, uint8_t *A, uint8_t *Z, uint8_t *B)
{
    uint32_t run = kvp_hd_run_bytes(C);
    float   *rc  = kvp_codec_scratch(5, 9 * (size_t)C * sizeof(float));
    float   *yb  = rc + C;
    __m256   three = _mm256_set1_ps(KVP_Q2_MAX);

    if (C % 32 != 0 || rc == NULL) {
        kvp_q2_ref_kvarn_rtn(X, R, C, Sc, Sr, codes, A, Z, B);
        return;
    }
    for (uint32_t c = 0; c < C; c += 8) {
        _mm256_storeu_ps(rc + c, _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_loadu_ps(Sc + c)));
        st_h8(B + 2 * (size_t)c, _mm256_loadu_ps(Sc + c));
    }
    for (uint32_t r0 = 0; r0 < R; r0 += 8) {
        uint32_t nr = R - r0 < 8 ? R - r0 : 8;
        __m256   vmn[8], vmx[8], lo, hi, s, sr, rr, mul, off, big;
        float    srv[8], av[8], zv[8];
        int      fast;

        for (uint32_t j = 0; j < 8; j++) {
            const float *x  = X + (size_t)(r0 + (j < nr ? j : 0)) * C;
            float       *y  = yb + (size_t)j * C;
            __m256       t  = _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(rc));
            __m256       mn = t, mx = t;

            srv[j] = Sr[r0 + (j < nr ? j : 0)];
            _mm256_store_ps(y, t);
            for (uint32_t c = 8; c < C; c += 8) {
                t  = _mm256_mul_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(rc + c));
                mn = _mm256_min_ps(mn, t);
                mx = _mm256_max_ps(mx, t);
                _mm256_store_ps(y + c, t);
            }
            vmn[j] = mn;
            vmx[j] = mx;
        }
        sr  = _mm256_loadu_ps(srv);
        rr  = _mm256_div_ps(_mm256_set1_ps(1.0f), sr);
        lo  = _mm256_mul_ps(kvp_reduce8(vmn, 0), rr);
        hi  = _mm256_mul_ps(kvp_reduce8(vmx, 1), rr);
        s   = _mm256_div_ps(_mm256_sub_ps(hi, lo), three);
        s   = _mm256_max_ps(s, _mm256_set1_ps(1e-10f)); /* kvp_hd_kvarn_scale */
        mul = _mm256_div_ps(rr, s);                     /* code = y * rr / s - lo / s */
        off = _mm256_xor_ps(_mm256_div_ps(lo, s), _mm256_set1_ps(-0.0f));
        big = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), lo), _mm256_andnot_ps(_mm256_set1_ps(-0.0f), hi));
        fast = _mm256_movemask_ps(_mm256_cmp_ps(big, _mm256_mul_ps(s, _mm256_set1_ps(0x1p29f)), _CMP_LT_OQ)) == 0xFF;
        for (uint32_t j = 0; j < nr; j++) {
            __m256   m   = _mm256_permutevar8x32_ps(mul, _mm256_set1_epi32((int)j));
            __m256   o   = _mm256_permutevar8x32_ps(off, _mm256_set1_epi32((int)j));
            uint8_t *out = codes + (size_t)(r0 + j) * run;

            if (fast) {
                code_row(yb + (size_t)j * C, C, m, o, out, 0);
            } else {
                code_row(yb + (size_t)j * C, C, m, o, out, 1);
            }
        }
        if (nr == 8) {
            st_h8(A + 2 * (size_t)r0, _mm256_mul_ps(sr, s));
            st_h8(Z + 2 * (size_t)r0, _mm256_mul_ps(sr, lo));
        } else {
            _mm256_storeu_ps(av, _mm256_mul_ps(sr, s));
            _mm256_storeu_ps(zv, _mm256_mul_ps(sr, lo));
            for (uint32_t j = 0; j < nr; j++) {
                kvp_hd_sth(A + 2 * (size_t)(r0 + j), av[j]);
                kvp_hd_sth(Z + 2 * (size_t)(r0 + j), zv[j]);
            }
        }
    }
}

/* ---- fp16 tiles of one head: X[t][d] (rows of D) or its transpose X[d][t] ---- */

int kvp_q2h_tile(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *X)
{
    __m128i bad = _mm_setzero_si128(), em = _mm_set1_epi16(0x7C00);

    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t d = 0; d < D; d += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)t * stride + d));

            bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, em), em));
            _mm256_storeu_ps(X + (size_t)t * D + d, _mm256_cvtph_ps(h));
        }
    }
    return _mm_testz_si128(bad, bad);
}

/* T % 8 == 0, D % 8 == 0; 8x8 blocks through registers */
void kvp_q2h_tile_t(const uint16_t *src, size_t stride, uint32_t T, uint32_t D, float *X)
{
    for (uint32_t t = 0; t < T; t += 8) {
        for (uint32_t d = 0; d < D; d += 8) {
            __m256 r[8];

            for (int i = 0; i < 8; i++) {
                r[i] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)(t + i) * stride + d)));
            }
            kvp_tr8x8_store(r, X + (size_t)d * T + t, T);
        }
    }
}
