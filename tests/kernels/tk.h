/* tk.h - tiny helpers shared by the kernels tests (assertions come from tests/harness/check.h):
 * a deterministic RNG (splitmix64) with uniform and Gaussian draws, and page encode/decode
 * wrappers that allocate. Header-only; each test is its own program. */
#ifndef KVP_TK_H
#define KVP_TK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpack/codec.h"
#include "kvpack/rand.h"

#include "check.h"


typedef struct {
    uint64_t s;
} tk_rng_t;

static inline uint64_t tk_next(tk_rng_t *r) { return kvp_splitmix64(&r->s); }

static inline double tk_unif(tk_rng_t *r) { return (double)(tk_next(r) >> 11) / 9007199254740992.0; }

static inline float tk_gauss(tk_rng_t *r)
{
    double u = tk_unif(r), v = tk_unif(r);

    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

static inline uint32_t tk_range(tk_rng_t *r, uint32_t lo, uint32_t hi) /* inclusive */
{
    return lo + (uint32_t)(tk_next(r) % (uint64_t)(hi - lo + 1));
}

static inline kvp_page_params_t tk_params(kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t P)
{
    kvp_page_params_t p;

    memset(&p, 0, sizeof(p));
    p.codec       = c;
    p.heads       = H;
    p.head_dim    = D;
    p.page_tokens = P;
    p.layer       = 3;
    p.first_pos   = 1024;
    p.chunk_key.lo = 0x1234;
    p.chunk_key.hi = 0x5678;
    return p;
}

/* Encode then decode (fp32); returns status, page in *page_p (malloc) of *len_p bytes. */
static inline kvp_status_t tk_roundtrip(const kvp_page_params_t *p, const float *k, const float *v,
                                        uint32_t ntok, kvp_frame_t frame, float *k_out,
                                        float *v_out, uint8_t **page_p, size_t *len_p)
{
    size_t       cap = kvp_page_max_bytes(p), len = 0;
    uint8_t     *page = malloc(cap ? cap : 1);
    kvp_status_t st = kvp_page_encode(p, KVP_DTYPE_F32, k, v, ntok, page, cap, &len);

    if (st == KVP_OK) {
        st = kvp_page_decode(page, len, KVP_DTYPE_F32, frame, k_out, v_out, NULL);
    }
    if (page_p != NULL && st == KVP_OK) {
        *page_p = page;
        *len_p  = len;
    } else {
        free(page);
    }
    return st;
}

static inline double tk_rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;

    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
