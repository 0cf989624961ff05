/* rand.h - the one pseudo-random generator of kvpack's tools and tests: splitmix64 (Steele, Lea
 * and Flood, 2014; the constants of its public description), a 64-bit state stepped by the golden
 * ratio and mixed. Deterministic for a seed, fast, not for secrets. */
#ifndef KVPACK_RAND_H
#define KVPACK_RAND_H

#include <stdint.h>

/* The next 64 random bits of the stream whose state *s is (advanced). */
static inline uint64_t kvp_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
