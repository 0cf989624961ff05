/* bytes.h - fixed-width loads and stores at any alignment, for every on-disk and wire format
 * (page header, session record, .kvd, namespace profiles, RocksDB keys): little-endian kvp_ldN and kvp_stN,
 * big-endian kvp_ld_beN and kvp_st_beN (sortable keys). Header-only, no alignment assumptions. */
#ifndef KVPACK_BYTES_H
#define KVPACK_BYTES_H

#include <stdint.h>

static inline uint16_t kvp_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t kvp_ld32(const uint8_t *p) { return (uint32_t)kvp_ld16(p) | ((uint32_t)kvp_ld16(p + 2) << 16); }
static inline uint64_t kvp_ld64(const uint8_t *p) { return (uint64_t)kvp_ld32(p) | ((uint64_t)kvp_ld32(p + 4) << 32); }
static inline void kvp_st16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void kvp_st32(uint8_t *p, uint32_t v) { kvp_st16(p, v & 0xFFFFu); kvp_st16(p + 2, v >> 16); }
static inline void kvp_st64(uint8_t *p, uint64_t v) { kvp_st32(p, (uint32_t)v); kvp_st32(p + 4, (uint32_t)(v >> 32)); }

static inline uint32_t kvp_ld_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t kvp_ld_be64(const uint8_t *p) { return (uint64_t)kvp_ld_be32(p) << 32 | kvp_ld_be32(p + 4); }
static inline void kvp_st_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void kvp_st_be64(uint8_t *p, uint64_t v) { kvp_st_be32(p, (uint32_t)(v >> 32)); kvp_st_be32(p + 4, (uint32_t)v); }

#endif
