/* kvarn_codes.h - the 2-bit codes two kvarn pages of T tokens x H heads x D disagree on (K codes
 * along tokens per channel, V codes along channels per token; layout from quant_hd.h): how the
 * twin tests bound a kvarn twin whose VarN (expf/logf, summation order) moves the stored fp16
 * scales by an ulp or a few, which changes most scale bytes but few codes. */
#ifndef KVPACK_TEST_KVARN_CODES_H
#define KVPACK_TEST_KVARN_CODES_H

#include "kvpack/page.h"
#include "quant_hd.h"

static inline size_t kvarn_codes_differ(const uint8_t *p1, const uint8_t *p2, uint32_t H,
                                        uint32_t D, uint32_t T)
{
    kvp_hd_kvarn_layout_t l = kvp_hd_kvarn_layout(T, D);
    size_t                diff = 0;

    for (uint32_t h = 0; h < H; h++) {
        const uint8_t *r1 = p1 + KVP_PAGE_HDR_BYTES + (size_t)h * l.rec;
        const uint8_t *r2 = p2 + KVP_PAGE_HDR_BYTES + (size_t)h * l.rec;

        for (uint32_t d = 0; d < D; d++) {
            for (uint32_t t = 0; t < T; t++) {
                diff += kvp_hd_code_get(r1 + (size_t)d * l.rt, t) !=
                        kvp_hd_code_get(r2 + (size_t)d * l.rt, t);
                diff += kvp_hd_code_get(r1 + l.v_codes + (size_t)t * l.rd, d) !=
                        kvp_hd_code_get(r2 + l.v_codes + (size_t)t * l.rd, d);
            }
        }
    }
    return diff;
}

#endif
