/* crc32c_hd.h - CRC32C (Castagnoli, reflected polynomial 0x82F63B78) as scalar KVP_HD steps
 * shared by the GPU page verifier (crc_cuda.cu) and its host checks (tests/kernels/test_crc_cuda.c),
 * which compare them with kvp_crc32c (ISA-L's crc32_iscsi, init and final xor 0xFFFFFFFF).
 * The GPU splits a range into slices, one per thread: each slice's "raw" CRC (register starting
 * at 0, no final xor) is linear over GF(2), so the range's CRC is the xor of every slice's raw
 * CRC shifted past the bytes after it (times x^(8n) mod P), plus the init's 0xFFFFFFFF shifted
 * past the whole range, then inverted. Polynomials are in the reflected order: bit 31 is x^0.
 * Compiled by cc (C11) and nvcc (C++): their common subset only. */
#ifndef KVPACK_CRC32C_HD_H
#define KVPACK_CRC32C_HD_H

#include <stddef.h>
#include <stdint.h>

#ifndef KVP_HD
#if defined(__CUDACC__)
#define KVP_HD static inline __host__ __device__
#else
#define KVP_HD static inline
#endif
#endif

#define KVP_CRC32C_POLY  0x82F63B78u /* reflected 0x1EDC6F41 */
#define KVP_CRC_X2N_BITS 64          /* x^(2^k) mod P for k < 64: shifts of up to 2^61 bytes */

/* Table entry i: the register after shifting byte i through 8 bit steps. */
KVP_HD uint32_t kvp_hd_crc32c_entry(uint32_t i)
{
    uint32_t c = i;

    for (int k = 0; k < 8; k++) {
        c = (c & 1u) ? (c >> 1) ^ KVP_CRC32C_POLY : c >> 1;
    }
    return c;
}

/* One byte through the register (table: 256 kvp_hd_crc32c_entry values). */
KVP_HD uint32_t kvp_hd_crc32c_byte(uint32_t crc, uint8_t b, const uint32_t *table)
{
    return table[(crc ^ b) & 0xFFu] ^ (crc >> 8);
}

/* a(x) * b(x) mod P. */
KVP_HD uint32_t kvp_hd_crc_mulmod(uint32_t a, uint32_t b)
{
    uint32_t p = 0;

    for (uint32_t m = 0x80000000u; m != 0 && a != 0; m >>= 1) {
        if (a & m) {
            p ^= b;
            a ^= m;
        }
        b = (b & 1u) ? (b >> 1) ^ KVP_CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x2n[k] = x^(2^k) mod P for k < KVP_CRC_X2N_BITS (x^1 is 0x40000000). */
KVP_HD void kvp_hd_crc_x2n_init(uint32_t *x2n)
{
    x2n[0] = 0x40000000u;
    for (int k = 1; k < KVP_CRC_X2N_BITS; k++) {
        x2n[k] = kvp_hd_crc_mulmod(x2n[k - 1], x2n[k - 1]);
    }
}

/* crc * x^(8n) mod P: a raw CRC moved past n more bytes of zeros. */
KVP_HD uint32_t kvp_hd_crc_shift(uint32_t crc, uint64_t n, const uint32_t *x2n)
{
    for (int k = 3; n != 0 && k < KVP_CRC_X2N_BITS; k++, n >>= 1) {
        if (n & 1u) {
            crc = kvp_hd_crc_mulmod(x2n[k], crc);
        }
    }
    return crc;
}

/* Raw CRC (register from 0, no final xor) of buf[from, to); the bytes at [zero_at, zero_at + 4)
 * are read as 0 (a page's own crc field; pass a position past `to` for none). */
KVP_HD uint32_t kvp_hd_crc32c_raw(const uint8_t *buf, uint64_t from, uint64_t to, uint64_t zero_at,
                                  const uint32_t *table)
{
    uint32_t crc = 0;

    for (uint64_t i = from; i < to; i++) {
        uint8_t b = (i >= zero_at && i < zero_at + 4) ? (uint8_t)0 : buf[i];

        crc = kvp_hd_crc32c_byte(crc, b, table);
    }
    return crc;
}

/* The finished CRC32C of a len-byte range whose slices' shifted raw CRCs xor to raw. */
KVP_HD uint32_t kvp_hd_crc32c_finish(uint32_t raw, uint64_t len, const uint32_t *x2n)
{
    return ~(raw ^ kvp_hd_crc_shift(0xFFFFFFFFu, len, x2n));
}

/* Bytes [from, to) of slice t of nslices over len bytes (even split; empty slices when len is
 * shorter than nslices). */
KVP_HD void kvp_hd_crc_slice(uint64_t len, uint32_t t, uint32_t nslices, uint64_t *from,
                             uint64_t *to)
{
    *from = len * t / nslices;
    *to   = len * (t + 1) / nslices;
}

#endif
