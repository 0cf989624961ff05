/* fp16.c - IEEE binary16 conversion (round to nearest even) used by every codec. */
#include "kvpack/codec.h"

#include <string.h>

uint16_t kvp_f32_to_f16(float f)
{
    uint32_t x, sign, exp, mant;

    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    exp  = (x >> 23) & 0xFFu;
    mant = x & 0x7FFFFFu;
    if (exp == 0xFFu) { /* Inf / NaN */
        return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0));
    }
    int e = (int)exp - 127 + 15;
    if (e >= 31) {
        return (uint16_t)(sign | 0x7C00u);
    }
    if (e <= 0) { /* subnormal or zero */
        if (e < -10) {
            return (uint16_t)sign;
        }
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half  = mant >> shift;
        uint32_t rem   = mant & ((1u << shift) - 1);
        uint32_t mid   = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) {
            half++;
        }
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem  = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) {
        half++; /* may carry into the exponent, which is the correct rounding */
    }
    return (uint16_t)(sign | half);
}

float kvp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp  = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t x;
    float    f;

    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while ((mant & 0x400u) == 0) {
                mant <<= 1;
                exp--;
            }
            x = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7F800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    memcpy(&f, &x, 4);
    return f;
}
