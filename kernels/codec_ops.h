/* codec_ops.h - internal: the per-codec operations table behind codec.c, the 2-bit primitives
 * each table is built from, per-thread scratch and the dtype converters.
 * Each codec file (codec_kivi.c, codec_oscar.c, codec_kvarn.c) defines one kvp_codec_ops_t per
 * implementation ("ref", "avx2"); the two differ only in the kvp_q2_kern_t primitives they call
 * (q2_ref.c vs q2_avx2.c). codec_dispatch.c picks one per codec once at start-up.
 * Inputs to encode are finite fp32 [valid][H][D] with |x| <= 65504. */
#ifndef KVPACK_CODEC_OPS_H
#define KVPACK_CODEC_OPS_H

#include "kvpack/codec.h"
#include "quant_hd.h"

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
    /* Write the payload; may set info->flags (rotation bits), bits_k/v, group_k/v, aux.
     * k and v may be modified (they are the caller's scratch copies or the front door's). */
    kvp_status_t (*encode)(const kvp_codec_geom_t *g, const float *k, const float *v,
                           kvp_page_info_t *info, uint8_t *payload);
    /* 1 when the stored parameters are usable (finite fp16 scales and zeros; oscar: norms finite
     * and > 0); kvp_page_parse calls it after the CRC. NULL: nothing beyond the CRC (fp16,
     * whose values decode checks as it converts them). */
    int (*params_ok)(const kvp_codec_geom_t *g, const uint8_t *payload);
    /* k_out / v_out may be NULL. */
    kvp_status_t (*decode)(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                           const uint8_t *payload, kvp_frame_t frame, float *k_out, float *v_out);
    /* Optional fp16 twins (NULL: the front door converts through fp32 scratch): encode from
     * fp16 input (NaN/Inf: KVP_ERR_BAD_INPUT_DATA, logged by the codec) and decode to fp16,
     * with the bytes and values of the fp32 path. KVP_ERR_UNSUPPORTED before touching anything
     * when the geometry is not one they take: the front door then uses the fp32 path. */
    kvp_status_t (*encode_h)(const kvp_codec_geom_t *g, const uint16_t *k, const uint16_t *v,
                             kvp_page_info_t *info, uint8_t *payload);
    kvp_status_t (*decode_h)(const kvp_codec_geom_t *g, const kvp_page_info_t *info,
                             const uint8_t *payload, kvp_frame_t frame, uint16_t *k_out,
                             uint16_t *v_out);
} kvp_codec_ops_t;

/* Table indexed by kvp_codec_id_t, chosen once (CPU features, KVPACK_CODEC_IMPL=ref). */
const kvp_codec_ops_t *const *kvp_codec_ops_table(void);
/* A specific implementation of a codec ("ref" always exists; "avx2" only on a capable CPU). */
const kvp_codec_ops_t *kvp_codec_ops_find(kvp_codec_id_t codec, const char *impl);

/* The stored parameters of a 2-bit page of layout l (kivi, kivi128, naive2, oscar; hd = heads x
 * head_dim) are usable: the fp16 K and V scales and zeros finite and, for oscar (l->k_codes > 0:
 * its fp32 norms come first), every norm > 0 and within what hd values can have
 * (kvp_hd_norms_ok). The codecs' params_ok (codec.c). */
int kvp_q2_params_ok(const uint8_t *p, const kvp_hd_q2_layout_t *l, size_t hd);

/* Per-thread scratch: slot 0..5, 64-byte aligned, at least bytes; valid until the next call
 * for the same slot on the same thread; freed at thread exit. Slots 0/1 belong to codec.c
 * (converted K/V), 2..5 to the codecs. NULL when out of memory. */
void *kvp_codec_scratch(unsigned slot, size_t bytes);

/* ---- 2-bit primitives (q2_ref.c, q2_avx2.c) ---- */
typedef enum {
    KVP_Q2_RULE_KIVI  = 0, /* float zero = min, code = rint((x-min)/s) */
    KVP_Q2_RULE_OSCAR = 1  /* integer zero point, code = rint(x*inv + zq), zero = -zq*s */
} kvp_q2_rule_t;

/* A strided set of rows a codec reads next (the next tile's input, still in DRAM). */
typedef struct {
    const void *base;
    size_t      stride, rows, row_bytes; /* bytes between rows, row count, bytes per row */
} kvp_next_rows_t;

typedef struct {
    const char *impl;
    /* Per-channel groups along tokens for one head: x(t,d) = src[t*stride + d], t < T, d < D,
     * groups of G tokens (last one short). codes [D][ceil(T/4)] (callee zeroes them),
     * scale/zero fp16 [ceil(T/G)][D]. */
    void (*chan_encode)(const float *src, size_t stride, uint32_t T, uint32_t D, uint32_t G,
                        kvp_q2_rule_t rule, uint8_t *codes, uint8_t *scale, uint8_t *zero);
    void (*chan_decode)(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                        uint32_t T, uint32_t D, uint32_t G, float *dst, size_t stride);
    /* Per-row groups of G channels over rows rows of D contiguous floats: codes
     * [rows][ceil(D/4)], scale/zero fp16 [rows][D/G]. G divides D. */
    void (*tok_encode)(const float *src, size_t rows, uint32_t D, uint32_t G, kvp_q2_rule_t rule,
                       uint8_t *codes, uint8_t *scale, uint8_t *zero);
    void (*tok_decode)(const uint8_t *codes, const uint8_t *scale, const uint8_t *zero,
                       size_t rows, uint32_t D, uint32_t G, float *dst);
    /* dst = normalized Walsh-Hadamard of each row of D of src (power of two >= 8; dst may be
     * src); round16: round the results through fp16 (the model dtype of the references).
     * Returns 1 when every result is within the fp16 range (|x| <= 65504), else 0. */
    int (*rot_rows)(const float *src, float *dst, size_t rows, uint32_t D, int round16);
    /* OScaR K scaling of rotated fp32 K [T][H*D]: norm_t over the row (8-lane striped sum),
     * then x = f16(f16(x) / norm_t). */
    void (*oscar_norm)(float *x, uint32_t T, uint32_t HD, float *norms);
    /* x[t][*] *= norms[t] over T rows of HD. */
    void (*scale_rows)(float *x, uint32_t T, uint32_t HD, const float *norms);
    /* VarN on X [R][C] (CODECS.md 2.2): Sc [C], Sr [R] best scales (fp32). work: R*C + 4*(R+C)
     * floats. next (may be NULL): rows the caller reads after this tile, pulled into L2 a few
     * lines per row block while VarN computes (the twin may ignore it). */
    void (*varn)(const float *X, uint32_t R, uint32_t C, uint32_t iters, float *Sc, float *Sr,
                 float *work, const kvp_next_rows_t *next);
    /* KVarN per-row RTN of X / Sc / Sr with absorption: codes [R][ceil(C/4)] (zeroed by the
     * callee), A [R] = Sr*s, Z [R] = Sr*lo, B [C] = Sc, fp16. */
    void (*kvarn_rtn)(const float *X, uint32_t R, uint32_t C, const float *Sc, const float *Sr,
                      uint8_t *codes, uint8_t *A, uint8_t *Z, uint8_t *B);
    /* Xhat[r][c] = (q*A[r] + Z[r]) * B[c] written to dst[r*rs + c*cs]. */
    void (*kvarn_deq)(const uint8_t *codes, const uint8_t *A, const uint8_t *Z, const uint8_t *B,
                      uint32_t R, uint32_t C, float *dst, size_t rs, size_t cs);
} kvp_q2_kern_t;

extern const kvp_q2_kern_t kvp_q2_ref;
extern const kvp_q2_kern_t kvp_q2_avx2; /* only call when kvp_cpu_has_avx2() */

/* ---- dtype conversion for the front door (convert.c, convert_avx2.c) ---- */
typedef struct {
    /* fp16 -> fp32; KVP_OK, or KVP_ERR_BAD_INPUT_DATA on NaN/Inf. */
    kvp_status_t (*load_f16)(const uint16_t *in, size_t n, float *out);
    /* KVP_ERR_BAD_INPUT_DATA when any value is NaN/Inf or |x| > 65504. */
    kvp_status_t (*check_f32)(const float *in, size_t n);
    void (*store_f16)(const float *in, size_t n, uint16_t *out);
    /* 1 when none of the n little-endian fp16 slots at p (any alignment) is Inf/NaN. */
    int (*f16_finite)(const uint8_t *p, size_t n);
} kvp_cvt_ops_t;

extern const kvp_cvt_ops_t kvp_cvt_ref;
extern const kvp_cvt_ops_t kvp_cvt_avx2;
const kvp_cvt_ops_t       *kvp_cvt_ops(void);

/* Codec ops tables (codec_*.c). */
extern const kvp_codec_ops_t kvp_codec_fp16_ref;
extern const kvp_codec_ops_t kvp_codec_kivi_ref, kvp_codec_kivi_avx2;
extern const kvp_codec_ops_t kvp_codec_kivi128_ref, kvp_codec_kivi128_avx2;
extern const kvp_codec_ops_t kvp_codec_naive2_ref, kvp_codec_naive2_avx2;
extern const kvp_codec_ops_t kvp_codec_oscar_ref, kvp_codec_oscar_avx2;
extern const kvp_codec_ops_t kvp_codec_kvarn_ref, kvp_codec_kvarn_avx2;

#endif
