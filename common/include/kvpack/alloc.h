/* alloc.h - allocation wrappers with an accounting tag, plus a monotonic clock.
 * All library allocation goes through kvp_malloc/kvp_calloc/kvp_free so tests can count live
 * bytes and inject a failure at the N-th allocation (kvp_alloc_fail_at). */
#ifndef KVPACK_ALLOC_H
#define KVPACK_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void *kvp_malloc(size_t size, const char *tag);
void *kvp_calloc(size_t n, size_t size, const char *tag);
void *kvp_realloc(void *ptr, size_t size, const char *tag);
void *kvp_aligned_alloc(size_t align, size_t size, const char *tag); /* free with kvp_free */
char *kvp_strdup(const char *s, const char *tag);
/* Room for element n of a growable array of elem-byte elements: arr itself while n < *cap, else
 * arr reallocated to twice *cap (first when *cap is 0) and *cap updated. NULL (arr and *cap
 * unchanged, still owned by the caller) when out of memory, when the new capacity would not hold
 * n, or when it or its size in bytes would overflow size_t (refused before any allocation). */
void *kvp_array_room(void *arr, size_t *cap, size_t n, size_t elem, size_t first,
                     const char *tag);
void  kvp_free(void *ptr);                                            /* NULL is a no-op */

/* Test hook: the n-th allocation from now (1-based) returns NULL; 0 disables. */
void     kvp_alloc_fail_at(uint64_t n);
/* 1 while a failure set by kvp_alloc_fail_at has not happened yet (fewer allocations since). */
int      kvp_alloc_fail_armed(void);
/* Number of successful allocations minus frees since start (leak checks in tests). */
int64_t  kvp_alloc_live_count(void);

/* Monotonic clock. */
uint64_t kvp_time_ns(void);
double   kvp_time_s(void);

/* Bytes this process has sent to storage (/proc/self/io write_bytes), or -1 where the kernel does
 * not account task I/O. */
int64_t  kvp_proc_write_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
