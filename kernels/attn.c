/* attn.c - decode attention over packed pages (kvpack/attn.h): checks each page (kvp_page_parse,
 * then its codec and geometry against the first codec page) right before it is used, computes the
 * scores of its tokens from the codes and fp16 scales in place, updates an online softmax per
 * query head and accumulates V, all in fp32. The math per codec is in the comments of run_q2
 * and run_kvarn; the primitives come from attn_ref.c or attn_avx2.c (attn_int.h).
 * Nothing is written to out before every page has passed. kvp_attn_validate (attn_int.h) runs the
 * same checks without computing, for the GPU twin (attn_cuda.cu). */
#include "kvpack/attn.h"

#include "attn_int.h"
#include "codec_ops.h"
#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"
#include "quant_hd.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SLICE     128u /* fp16 tokens per step */
#define ROT_FLAGS (KVP_PAGE_F_K_ROTATED | KVP_PAGE_F_V_ROTATED | KVP_PAGE_F_V_PREROT)

/* ---- implementation choice ---- */

static const kvp_attn_kern_t *impl;
static pthread_once_t         impl_once = PTHREAD_ONCE_INIT;

static void impl_init(void)
{
    const char *env = getenv("KVPACK_CODEC_IMPL");
    int         ref = env != NULL && strcmp(env, "ref") == 0;

    impl = kvp_cpu_has_avx2() && !ref ? &kvp_attn_avx2 : &kvp_attn_ref;
}

static const kvp_attn_kern_t *kern(void)
{
    pthread_once(&impl_once, impl_init);
    return impl;
}

const char *kvp_attn_impl_name(void) { return kern()->impl; }

kvp_status_t kvp_attn_set_impl(const char *name)
{
    kern();
    if (name != NULL && strcmp(name, "ref") == 0) {
        impl = &kvp_attn_ref;
    } else if (name != NULL && strcmp(name, "avx2") == 0 && kvp_cpu_has_avx2()) {
        impl = &kvp_attn_avx2;
    } else {
        return KVP_ERR_UNSUPPORTED;
    }
    return KVP_OK;
}

/* ---- scratch: one block of floats, each part 64-byte aligned ---- */

typedef struct {
    float *q, *qr;       /* [Hq][D] q * scale; its Hadamard (rotated pages) */
    float *acc_o, *acc_r;/* [Hq][D] sum p*V of original-frame / rotated-frame pages */
    float *m, *l;        /* [Hq] running max and sum of the softmax */
    float *sc;           /* [NH][scp] scores, then probabilities, of one page for NH heads */
    float *kf, *vf;      /* the page's K and V fp16 parameters as floats */
    float *coef, *bias;  /* [P][NH][ng], [NH][ng] V weights p*scale and sums p*min */
    float *tmp, *w, *b;  /* [NH][D], [NH][D], [NH] */
    float *fac;          /* [P] per-token score factor (oscar norms) */
} attn_buf_t;

static size_t rnd16(size_t n) { return (n + 15) & ~(size_t)15; }
static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

static size_t buf_layout(uint32_t Hq, uint32_t H, uint32_t D, uint32_t P, float *base,
                         attn_buf_t *o)
{
    size_t scp = rnd16(zmax(P, SLICE)) + 16, ng = D >= 32 ? D / 32 : 1, ngk = (P + 31) / 32;
    size_t hd = (size_t)Hq * D, nh = KVP_ATTN_NH, off = 0;
    struct {
        float **p;
        size_t  n;
    } part[] = {
        {&o->q, hd}, {&o->qr, hd}, {&o->acc_o, hd}, {&o->acc_r, hd}, {&o->m, Hq}, {&o->l, Hq},
        {&o->sc, nh * scp}, {&o->kf, zmax(2 * (size_t)H * ngk * D, 2 * (size_t)D + P)},
        {&o->vf, zmax(2 * (size_t)P * H * ng, 2 * (size_t)P + D)}, {&o->coef, P * nh * ng},
        {&o->bias, nh * ng}, {&o->tmp, nh * D}, {&o->w, nh * D}, {&o->b, nh}, {&o->fac, P},
    };

    for (size_t i = 0; i < sizeof(part) / sizeof(part[0]); i++) {
        if (base != NULL) {
            *part[i].p = base + off;
        }
        off += rnd16(part[i].n);
    }
    return off * sizeof(float);
}

size_t kvp_attn_scratch_bytes(uint32_t q_heads, uint32_t heads, uint32_t head_dim,
                              uint32_t page_tokens)
{
    attn_buf_t b;

    if (q_heads == 0 || heads == 0 || head_dim == 0 || page_tokens == 0 || q_heads % heads != 0 ||
        heads > KVP_PAGE_MAX_HEADS || head_dim > KVP_PAGE_MAX_DIM ||
        page_tokens > KVP_PAGE_MAX_TOKENS || q_heads / heads > 1024) {
        return 0;
    }
    return buf_layout(q_heads, heads, head_dim, page_tokens, NULL, &b) + 64;
}

/* ---- state of one call ---- */

typedef struct {
    const kvp_attn_kern_t *kk;
    attn_buf_t             b;
    uint32_t               H, D, Hq, g, scp;
    int                    have_qr, used_r; /* qr filled; acc_r holds a rotated-frame sum */
    uint32_t               touched; /* sink of touch() */
    int                    have_codec; /* first codec page seen: codec, capacity, flags below */
    uint32_t               codec, capacity, rot, layer;
} attn_st_t;

static uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* q heads of KV head h come in chunks of up to NH: [qh0, qh0 + nh) */
#define FOR_QCHUNK(s, h, qh0, nh)                                                                \
    for (uint32_t qh0 = (h) * (s)->g, nh = umin(KVP_ATTN_NH, (s)->g); qh0 < ((h) + 1) * (s)->g; \
         qh0 += nh, nh = umin(KVP_ATTN_NH, ((h) + 1) * (s)->g - qh0))

/* Online softmax: the scores sc[j][0..nt) of heads qh0.. become exp(score - new max); the sums so
 * far are rescaled when the max grows. */
static void soft_update(attn_st_t *s, uint32_t qh0, uint32_t nh, uint32_t nt)
{
    for (uint32_t j = 0; j < nh; j++) {
        float   *x  = s->b.sc + (size_t)j * s->scp;
        uint32_t qh = qh0 + j;
        float    mx = s->kk->max(x, nt), mo = s->b.m[qh];

        if (mx == -INFINITY) { /* every score -inf (past float range): weight 0 each; or a NaN,
                                * which max() passes over: kept, so the result is refused */
            for (uint32_t i = 0; i < nt; i++) {
                x[i] = x[i] == -INFINITY ? 0.0f : x[i];
            }
            continue;
        }
        if (mx > mo) {
            float  a  = expf(mo - mx); /* 0 on the first page (mo = -inf) */
            float *ao = s->b.acc_o + (size_t)qh * s->D, *ar = s->b.acc_r + (size_t)qh * s->D;

            for (uint32_t d = 0; d < s->D; d++) {
                ao[d] = ao[d] * a;
                ar[d] = ar[d] * a;
            }
            s->b.l[qh] = s->b.l[qh] * a;
            s->b.m[qh] = mx;
        }
        s->b.l[qh] = s->b.l[qh] + s->kk->exp_sum(x, nt, s->b.m[qh]);
    }
}

/* Read one byte per cache line of [p, p + len), in order. The head-by-head passes below read
 * rows at a stride of H*D elements, which the hardware prefetchers follow poorly; after one
 * sequential pass (for a page, its CRC check is that pass) they hit the cache: 2x faster. */
static void touch(attn_st_t *s, const void *p, size_t len)
{
    const volatile uint8_t *b = p;
    uint32_t                acc = 0;

    for (size_t o = 0; o < len; o += 64) {
        acc += b[o];
    }
    s->touched += acc;
}

static const float *q_rotated(attn_st_t *s)
{
    if (!s->have_qr) {
        memcpy(s->b.qr, s->b.q, (size_t)s->Hq * s->D * sizeof(float));
        for (uint32_t i = 0; i < s->Hq; i++) {
            kvp_hd_fwht(s->b.qr + (size_t)i * s->D, s->D);
        }
        s->have_qr = 1;
    }
    return s->b.qr;
}

/* fp16 rows [T][H][D] (fp16 pages, sink, tail, or a caller's buffer: pass_first), in the
 * original frame. */
static void run_f16(attn_st_t *s, const uint16_t *K, const uint16_t *V, uint32_t T, int pass_first)
{
    size_t HD = (size_t)s->H * s->D;

    for (uint32_t t0 = 0; t0 < T; t0 += SLICE) {
        uint32_t nt = umin(SLICE, T - t0);

        if (pass_first) {
            touch(s, K + t0 * HD, nt * HD * 2);
            touch(s, V + t0 * HD, nt * HD * 2);
        }
        for (uint32_t h = 0; h < s->H; h++) {
            FOR_QCHUNK(s, h, qh0, nh) {
                s->kk->f16_scores(K + t0 * HD + (size_t)h * s->D, HD, nt, s->D,
                                  s->b.q + (size_t)qh0 * s->D, nh, s->b.sc, s->scp);
                soft_update(s, qh0, nh, nt);
                s->kk->f16_mix(V + t0 * HD + (size_t)h * s->D, HD, nt, s->D, s->b.sc, s->scp, nh,
                               s->b.acc_o + (size_t)qh0 * s->D);
            }
        }
    }
}

/* kivi, kivi128, oscar (payload tables: codec_kivi.c, codec_oscar.c). K codes c, scale s, min m
 * per channel d and token group: q.k_t = sum_d (q_d s_d) c_td + sum_d q_d m_d, so per group w =
 * q*s and the bias b = q.m, then one dot of floats with codes per token (oscar: times norm_t,
 * with q rotated). V per token t and channel group: sum_t p_t (c s + m) = sum_t (p_t s) c +
 * sum_t p_t m, the second a constant per channel group. */
static void run_q2(attn_st_t *s, const kvp_page_info_t *in, const uint8_t *pl)
{
    const kvp_attn_kern_t *kk = s->kk;
    uint32_t  T = in->valid, H = s->H, D = s->D, G = in->group_k, gv = in->group_v;
    int       oscar = in->codec == KVP_CODEC_OSCAR;
    kvp_hd_q2_layout_t lo = kvp_hd_q2_layout(oscar, T, H, D, G, gv);
    uint32_t  ng = lo.ng, ngk = lo.ngk, scp = s->scp;
    size_t    rt = lo.rt, rd = lo.rd, k_codes = lo.k_codes, v_codes = lo.v_codes;
    const float *qx  = (in->flags & KVP_PAGE_F_K_ROTATED) ? q_rotated(s) : s->b.q;
    float       *acc = (in->flags & KVP_PAGE_F_V_ROTATED) ? s->b.acc_r : s->b.acc_o;
    const float *ks = s->b.kf, *km = ks + (size_t)H * ngk * D;
    const float *vs = s->b.vf, *vm = vs + (size_t)T * H * ng;

    kk->h2f(pl + lo.k_scale, 2 * (size_t)H * ngk * D, s->b.kf); /* scales, then zeros */
    kk->h2f(pl + lo.v_scale, 2 * (size_t)T * H * ng, s->b.vf);
    if (oscar) {
        memcpy(s->b.fac, pl, 4 * (size_t)T);
    }
    for (uint32_t h = 0; h < H; h++) {
        FOR_QCHUNK(s, h, qh0, nh) {
            for (uint32_t gi = 0; gi < ngk; gi++) {
                uint32_t t0 = gi * G, nt = umin(G, T - t0);
                size_t   po = ((size_t)h * ngk + gi) * D;

                kk->prep(qx + (size_t)qh0 * D, ks + po, km + po, D, nh, s->b.w, s->b.b);
                kk->chan_scores(pl + k_codes + (size_t)h * D * rt + t0 / 4, rt, D, nt, s->b.w,
                                s->b.b, oscar ? s->b.fac + t0 : NULL, nh, s->b.sc + t0, scp);
            }
            soft_update(s, qh0, nh, T);
            memset(s->b.bias, 0, (size_t)nh * ng * sizeof(float));
            kk->vcoef(s->b.sc, scp, vs + (size_t)h * ng, vm + (size_t)h * ng, (size_t)H * ng, T,
                      ng, nh, s->b.coef, s->b.bias);
            kk->tok_mix(pl + v_codes + (size_t)h * rd, (size_t)H * rd, T, D, gv, s->b.coef, nh,
                        acc + (size_t)qh0 * D);
            for (uint32_t j = 0; j < nh; j++) {
                float *a = acc + (size_t)(qh0 + j) * D;

                for (uint32_t d = 0; d < D; d++) {
                    a[d] = a[d] + s->b.bias[j * ng + d / gv];
                }
            }
        }
    }
}

/* kvarn (payload table: codec_kvarn.c), per head record, in the Hadamard frame:
 * K[d][t] = (c A_d + Z_d) B_t, so q.k_t = B_t (sum_d (q_d A_d) c_dt + q.Z);
 * V[t][d] = (c A_t + Z_t) B_d, so sum_t p_t V[t][d] = B_d (sum_t (p_t A_t) c_td + sum_t p_t Z_t). */
static void run_kvarn(attn_st_t *s, const kvp_page_info_t *in, const uint8_t *pl)
{
    const kvp_attn_kern_t *kk = s->kk;
    uint32_t     T = in->valid, H = s->H, D = s->D, scp = s->scp;
    kvp_hd_kvarn_layout_t lo = kvp_hd_kvarn_layout(T, D);
    size_t       rt = lo.rt, rd = lo.rd, k_a = lo.k_a, v_codes = lo.v_codes, v_a = lo.v_a;
    size_t       rec = lo.rec;
    const float *qx  = q_rotated(s);
    float       *acc = (in->flags & KVP_PAGE_F_V_ROTATED) ? s->b.acc_r : s->b.acc_o;
    const float *kA = s->b.kf, *kZ = kA + D, *kB = kZ + D;
    const float *vA = s->b.vf, *vZ = vA + T, *vB = vZ + T;

    for (uint32_t h = 0; h < H; h++) {
        const uint8_t *r = pl + (size_t)h * rec;

        kk->h2f(r + k_a, 2 * (size_t)D + T, s->b.kf);
        kk->h2f(r + v_a, 2 * (size_t)T + D, s->b.vf);
        FOR_QCHUNK(s, h, qh0, nh) {
            kk->prep(qx + (size_t)qh0 * D, kA, kZ, D, nh, s->b.w, s->b.b);
            kk->chan_scores(r, rt, D, T, s->b.w, s->b.b, kB, nh, s->b.sc, scp);
            soft_update(s, qh0, nh, T);
            memset(s->b.b, 0, (size_t)nh * sizeof(float));
            kk->vcoef(s->b.sc, scp, vA, vZ, 1, T, 1, nh, s->b.coef, s->b.b);
            memset(s->b.tmp, 0, (size_t)nh * D * sizeof(float));
            kk->tok_mix(r + v_codes, rd, T, D, D, s->b.coef, nh, s->b.tmp);
            for (uint32_t j = 0; j < nh; j++) {
                float *a = acc + (size_t)(qh0 + j) * D;

                for (uint32_t d = 0; d < D; d++) {
                    a[d] = a[d] + vB[d] * (s->b.tmp[(size_t)j * D + d] + s->b.b[j]);
                }
            }
        }
    }
}

/* ---- checks ---- */

/* Where a page sits: sealed (sink or codec) and whether it is the last sealed one, or the tail. */
typedef enum { POS_SEALED, POS_LAST, POS_TAIL } page_pos_t;

static kvp_status_t page_check(attn_st_t *s, const kvp_page_info_t *in, page_pos_t pos,
                               uint32_t P)
{
    int sink = in->codec == KVP_CODEC_FP16 && (in->flags & KVP_PAGE_F_SINK);

    if (in->layer != s->layer) {
        KVP_LOG_ERROR("attn", "page of layer %u among pages of layer %u", in->layer, s->layer);
        return KVP_ERR_INVALID;
    }
    if (in->heads != s->H || in->head_dim != s->D) {
        KVP_LOG_ERROR("attn", "page of %u heads x %u, expected %u x %u", in->heads, in->head_dim,
                      s->H, s->D);
        return KVP_ERR_WRONG_CODEC;
    }
    if (pos == POS_TAIL) {
        if (in->codec != KVP_CODEC_FP16) {
            KVP_LOG_ERROR("attn", "tail page of codec %s, expected fp16", kvp_codec_name(in->codec));
            return KVP_ERR_WRONG_CODEC;
        }
        return KVP_OK;
    }
    if (in->flags & KVP_PAGE_F_TAIL) {
        KVP_LOG_ERROR("attn", "a tail page among the sealed pages");
        return KVP_ERR_INVALID;
    }
    if (pos == POS_SEALED && in->valid != in->capacity) {
        KVP_LOG_ERROR("attn", "partial page (%u of %u tokens) before the last", in->valid,
                      in->capacity);
        return KVP_ERR_INVALID;
    }
    if (sink && s->have_codec) {
        KVP_LOG_ERROR("attn", "an fp16 sink page after codec pages");
        return KVP_ERR_INVALID;
    }
    if (sink || !s->have_codec) {
        if (in->capacity != P) {
            KVP_LOG_ERROR("attn", "page of %u tokens, expected %u", in->capacity, P);
            return KVP_ERR_WRONG_CODEC;
        }
        if (!sink) {
            if (in->codec == KVP_CODEC_NAIVE2) {
                KVP_LOG_ERROR("attn", "codec naive2 has no fused attention");
                return KVP_ERR_UNSUPPORTED;
            }
            s->have_codec = 1;
            s->codec      = in->codec;
            s->capacity   = in->capacity;
            s->rot        = in->flags & ROT_FLAGS;
        }
        return KVP_OK;
    }
    if (in->codec != s->codec || in->capacity != s->capacity || (in->flags & ROT_FLAGS) != s->rot) {
        KVP_LOG_ERROR("attn", "page of codec %s (%u tokens, flags 0x%x) among %s pages (%u, 0x%x)",
                      kvp_codec_name(in->codec), in->capacity, in->flags & ROT_FLAGS,
                      kvp_codec_name(s->codec), s->capacity, s->rot);
        return KVP_ERR_WRONG_CODEC;
    }
    return KVP_OK;
}

static void run_page(attn_st_t *s, const kvp_page_info_t *in, const uint8_t *page)
{
    const uint8_t *pl = page + KVP_PAGE_HDR_BYTES;

    s->used_r |= (in->flags & KVP_PAGE_F_V_ROTATED) != 0;
    if (in->codec == KVP_CODEC_KVARN) {
        run_kvarn(s, in, pl);
    } else if (in->codec == KVP_CODEC_FP16) {
        const uint16_t *k = (const uint16_t *)(const void *)pl;

        run_f16(s, k, k + (size_t)in->valid * s->H * s->D, in->valid, 0);
    } else {
        run_q2(s, in, pl);
    }
}

/* ---- API ---- */

/* The softmax scale (default 1/sqrt(D)) and a finite query of Hq x D. */
static kvp_status_t q_check(const kvp_attn_params_t *params, const float *q, uint32_t Hq,
                            uint32_t D, float *scale_p)
{
    float scale = 1.0f / sqrtf((float)D);

    if (params != NULL && (params->field_mask & KVP_ATTN_PARAM_SCALE)) {
        scale = params->scale;
        if (!(scale > 0.0f) || !isfinite(scale)) {
            KVP_LOG_ERROR("attn", "softmax scale %g must be finite and > 0", (double)scale);
            return KVP_ERR_INVALID;
        }
    }
    for (size_t i = 0; i < (size_t)Hq * D; i++) {
        if (!isfinite(q[i])) {
            KVP_LOG_ERROR("attn", "query has NaN or Inf");
            return KVP_ERR_INVALID;
        }
    }
    *scale_p = scale;
    return KVP_OK;
}

/* Hq query heads over H KV heads x D at page capacity P: a shape there is scratch for. */
static kvp_status_t shape_check(uint32_t Hq, uint32_t H, uint32_t D, uint32_t P)
{
    if (kvp_attn_scratch_bytes(Hq, H, D, P) == 0) {
        KVP_LOG_ERROR("attn", "%u query heads over %u KV heads x %u: bad shape", Hq, H, D);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

/* Scratch (caller's or allocated), state, q * scale. *owned_p: what to kvp_free. */
static kvp_status_t st_init(attn_st_t *s, const kvp_attn_params_t *params, uint32_t H, uint32_t D,
                            uint32_t P, const float *q, uint32_t Hq, void **owned_p)
{
    size_t       need = kvp_attn_scratch_bytes(Hq, H, D, P);
    float        scale;
    void        *mem;
    kvp_status_t st;

    *owned_p = NULL;
    st       = shape_check(Hq, H, D, P);
    st       = st == KVP_OK ? q_check(params, q, Hq, D, &scale) : st;
    if (st != KVP_OK) {
        return st;
    }
    if (params != NULL && (params->field_mask & KVP_ATTN_PARAM_SCRATCH)) {
        mem = params->scratch;
        if (mem == NULL || params->scratch_bytes < need || ((uintptr_t)mem & 3u) != 0) {
            KVP_LOG_ERROR("attn", "scratch of %zu bytes, %zu needed (4-byte aligned)",
                          params->scratch_bytes, need);
            return KVP_ERR_INVALID;
        }
    } else {
        mem = *owned_p = kvp_malloc(need, "attn scratch");
        if (mem == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
    }
    mem = (void *)(((uintptr_t)mem + 63u) & ~(uintptr_t)63u);
    memset(s, 0, sizeof(*s));
    buf_layout(Hq, H, D, P, mem, &s->b);
    s->kk  = kern();
    s->H   = H;
    s->D   = D;
    s->Hq  = Hq;
    s->g   = Hq / H;
    s->scp = (uint32_t)(rnd16(zmax(P, SLICE)) + 16);
    for (size_t i = 0; i < (size_t)Hq * D; i++) {
        s->b.q[i] = q[i] * scale;
    }
    memset(s->b.acc_o, 0, (size_t)Hq * D * sizeof(float));
    memset(s->b.acc_r, 0, (size_t)Hq * D * sizeof(float));
    for (uint32_t i = 0; i < Hq; i++) {
        s->b.m[i] = -INFINITY;
        s->b.l[i] = 0.0f;
    }
    return KVP_OK;
}

int kvp_attn_out_copy(const float *res, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(res[i])) {
            return 0;
        }
    }
    memcpy(out, res, n * sizeof(float));
    return 1;
}

/* The result in the original frame, normalized, into out[Hq][D] (built in acc_r first): 0, out
 * untouched, when it is not finite (kvp_attn_out_copy). */
static int st_finish(attn_st_t *s, float *out)
{
    for (uint32_t i = 0; i < s->Hq; i++) {
        float *ar = s->b.acc_r + (size_t)i * s->D, *ao = s->b.acc_o + (size_t)i * s->D;
        float  inv = 1.0f / s->b.l[i];

        if (s->used_r) {
            kvp_hd_fwht(ar, s->D); /* Hd is its own inverse */
        }
        for (uint32_t d = 0; d < s->D; d++) {
            ar[d] = (ao[d] + ar[d]) * inv;
        }
    }
    return kvp_attn_out_copy(s->b.acc_r, (size_t)s->Hq * s->D, out);
}

/* The arguments and the first page (pages[0], else the tail) of a call. */
static kvp_status_t call_first(const kvp_attn_page_t *pages, size_t n_pages,
                               const kvp_attn_page_t *tail, const float *q, uint32_t q_heads,
                               const float *out, kvp_page_info_t *first)
{
    size_t       n_all = n_pages + (tail != NULL);
    kvp_status_t st;

    if ((pages == NULL && n_pages > 0) || n_all == 0 || q == NULL || out == NULL) {
        KVP_LOG_ERROR("attn", "no pages, query or output");
        return KVP_ERR_INVALID;
    }
    for (size_t i = 0; i < n_all; i++) {
        if ((i < n_pages ? pages[i].data : tail->data) == NULL) {
            KVP_LOG_ERROR("attn", "page %zu has no data", i);
            return KVP_ERR_INVALID;
        }
    }
    st = n_pages > 0 ? kvp_page_parse(pages[0].data, pages[0].len, first)
                     : kvp_page_parse(tail->data, tail->len, first);
    if (st != KVP_OK) {
        KVP_LOG_ERROR("attn", "page 0: %s", kvp_status_str(st));
        return st;
    }
    if (first->head_dim > KVP_PAGE_MAX_DIM || first->heads == 0 || q_heads % first->heads != 0) {
        KVP_LOG_ERROR("attn", "%u query heads is not a multiple of %u KV heads", q_heads,
                      first->heads);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

/* Every page in order, each parsed and checked right before it is used (run: attention over it;
 * else its header into infos[i]). */
static kvp_status_t walk(attn_st_t *s, const kvp_attn_page_t *pages, size_t n_pages,
                         const kvp_attn_page_t *tail, const kvp_page_info_t *first, int run,
                         kvp_page_info_t *infos)
{
    kvp_page_info_t in;
    kvp_status_t    st = KVP_OK;
    size_t          n_all = n_pages + (tail != NULL);

    for (size_t i = 0; i < n_all && st == KVP_OK; i++) {
        const kvp_attn_page_t *pg  = i < n_pages ? &pages[i] : tail;
        page_pos_t             pos = i >= n_pages ? POS_TAIL : i + 1 == n_pages ? POS_LAST : POS_SEALED;

        if (i > 0) {
            st = kvp_page_parse(pg->data, pg->len, &in);
            if (st != KVP_OK) {
                KVP_LOG_ERROR("attn", "page %zu: %s", i, kvp_status_str(st));
                break;
            }
        } else {
            in = *first;
        }
        st = page_check(s, &in, pos, first->capacity);
        if (st == KVP_OK && in.codec == KVP_CODEC_FP16 &&
            kvp_values_check(KVP_DTYPE_F16, (const uint8_t *)pg->data + KVP_PAGE_HDR_BYTES,
                             in.payload_len / 2) != KVP_OK) {
            /* parse does not read an fp16 page's values (decode checks them as it converts);
             * a NaN K would drop its token from the softmax without a word */
            KVP_LOG_ERROR("attn", "page %zu: fp16 values hold Inf/NaN", i);
            st = KVP_ERR_BAD_PAGE;
        }
        if (st == KVP_OK && run) {
            run_page(s, &in, pg->data);
        } else if (st == KVP_OK) {
            infos[i] = in;
        }
    }
    return st;
}

kvp_status_t kvp_attn_compute(const kvp_attn_params_t *params, const kvp_attn_page_t *pages,
                              size_t n_pages, const kvp_attn_page_t *tail, const float *q,
                              uint32_t q_heads, float *out)
{
    kvp_page_info_t first;
    attn_st_t       s;
    void           *owned;
    kvp_status_t    st = call_first(pages, n_pages, tail, q, q_heads, out, &first);

    if (st != KVP_OK) {
        return st;
    }
    st = st_init(&s, params, first.heads, first.head_dim, n_pages > 0 ? first.capacity : 1, q,
                 q_heads, &owned); /* a tail alone needs no page-wide parameters */
    if (st != KVP_OK) {
        return st;
    }
    s.layer = first.layer;
    st      = walk(&s, pages, n_pages, tail, &first, 1, NULL);
    if (st == KVP_OK && !st_finish(&s, out)) {
        KVP_LOG_ERROR("attn", "attention over layer %u is not finite: scores pass float range "
                      "(is the softmax scale too large?)", first.layer);
        st = KVP_ERR_BAD_INPUT_DATA;
    }
    kvp_free(owned);
    return st;
}

kvp_status_t kvp_attn_validate(const kvp_attn_params_t *params, const kvp_attn_page_t *pages,
                               size_t n_pages, const kvp_attn_page_t *tail, const float *q,
                               uint32_t q_heads, const float *out, kvp_page_info_t *infos,
                               float *scale_p)
{
    kvp_page_info_t first;
    attn_st_t       s;
    kvp_status_t    st = call_first(pages, n_pages, tail, q, q_heads, out, &first);

    st = st == KVP_OK ? shape_check(q_heads, first.heads, first.head_dim,
                                    n_pages > 0 ? first.capacity : 1)
                      : st;
    st = st == KVP_OK ? q_check(params, q, q_heads, first.head_dim, scale_p) : st;
    if (st != KVP_OK) {
        return st;
    }
    memset(&s, 0, sizeof(s));
    s.H     = first.heads;
    s.D     = first.head_dim;
    s.layer = first.layer;
    return walk(&s, pages, n_pages, tail, &first, 0, infos);
}

kvp_status_t kvp_attn_compute_f16(const kvp_attn_params_t *params, const uint16_t *k,
                                  const uint16_t *v, uint32_t tokens, uint32_t heads,
                                  uint32_t head_dim, const float *q, uint32_t q_heads,
                                  float *out)
{
    attn_st_t    s;
    void        *owned;
    kvp_status_t st;

    if (k == NULL || v == NULL || tokens == 0 || q == NULL || out == NULL) {
        KVP_LOG_ERROR("attn", "no K/V, tokens, query or output");
        return KVP_ERR_INVALID;
    }
    st = st_init(&s, params, heads, head_dim, 1, q, q_heads, &owned);
    if (st != KVP_OK) {
        return st;
    }
    if (kvp_values_check(KVP_DTYPE_F16, k, (size_t)tokens * heads * head_dim) != KVP_OK ||
        kvp_values_check(KVP_DTYPE_F16, v, (size_t)tokens * heads * head_dim) != KVP_OK) {
        /* checked first: an Inf K whose score is -Inf would drop its token without a word */
        KVP_LOG_ERROR("attn", "fp16 K/V hold Inf or NaN: refused");
        kvp_free(owned);
        return KVP_ERR_BAD_INPUT_DATA;
    }
    run_f16(&s, k, v, tokens, 1);
    st = st_finish(&s, out) ? KVP_OK : KVP_ERR_BAD_INPUT_DATA;
    if (st != KVP_OK) {
        KVP_LOG_ERROR("attn", "attention over fp16 K/V is not finite: scores pass float range "
                      "(is the softmax scale too large?)");
    }
    kvp_free(owned);
    return st;
}
