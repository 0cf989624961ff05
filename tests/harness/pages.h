/* pages.h - real kvpack pages for the tests that move or check them in bulk (GPU page verifier,
 * NCCL link): n kivi pages of assorted sizes (a few hundred bytes to about 140 KB) encoded from
 * random values and stored back to back, as a batch travels. Header-only; links kvp_kernels and
 * needs tests/kernels on the include path (tk.h: the RNG). */
#ifndef KVPACK_TEST_PAGES_H
#define KVPACK_TEST_PAGES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvpack/codec.h"

#include "check.h"
#include "tk.h"

/* n pages (seeded by seed) back to back in *buf_p (malloc'd, the caller frees), their lengths in
 * lens[0..n); returns the total bytes. Page i has 2..8 heads of head_dim 64 or 128 and 16..256
 * tokens (page 0 the smallest, every 4th the largest). */
static inline size_t test_pages_make(uint64_t seed, uint32_t n, uint8_t **buf_p, uint32_t *lens)
{
    size_t   total = 0, cap = 0;
    uint8_t *buf   = NULL;
    tk_rng_t rng   = {seed};

    for (uint32_t i = 0; i < n; i++) {
        kvp_page_params_t p;
        uint32_t          T;
        size_t            vals, len = 0, need;
        float            *kv;

        memset(&p, 0, sizeof(p));
        p.codec       = KVP_CODEC_KIVI;
        p.heads       = i == 0 ? 2 : (i % 4 == 3 ? 8 : 2 + (uint32_t)(tk_next(&rng) % 7));
        p.head_dim    = (i % 4 == 3 || tk_next(&rng) % 2) ? 128 : 64;
        p.page_tokens = i == 0 ? 16 : (i % 4 == 3 ? 256 : 32 * (1 + (uint32_t)(tk_next(&rng) % 8)));
        p.layer       = i;
        p.first_pos   = (uint64_t)i * 256;
        p.chunk_key.lo = seed;
        p.chunk_key.hi = i;
        T    = p.page_tokens;
        vals = (size_t)T * p.heads * p.head_dim;
        kv   = malloc(2 * vals * sizeof(float));
        CHECK(kv != NULL);
        for (size_t j = 0; j < 2 * vals; j++) {
            kv[j] = (float)((int64_t)(tk_next(&rng) % 2001) - 1000) / 250.0f;
        }
        need = kvp_page_max_bytes(&p);
        if (total + need > cap) {
            cap = 2 * (total + need);
            buf = realloc(buf, cap);
            CHECK(buf != NULL);
        }
        CHECK_OK(kvp_page_encode(&p, KVP_DTYPE_F32, kv, kv + vals, T, buf + total, need, &len));
        lens[i] = (uint32_t)len;
        total += len;
        free(kv);
    }
    *buf_p = buf;
    return total;
}

#endif
