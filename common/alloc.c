/* alloc.c - tagged allocation wrappers with a failure-injection hook, the monotonic clock, and the
 * process's storage writes (/proc/self/io). */
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic uint64_t fail_countdown;
static _Atomic int64_t  live_count;

static int should_fail(const char *tag)
{
    uint64_t n = atomic_load(&fail_countdown);

    while (n != 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &n, n - 1)) {
            if (n == 1) {
                KVP_LOG_DEBUG("alloc", "injected allocation failure for %s", tag);
                return 1;
            }
            return 0;
        }
    }
    return 0;
}

void *kvp_malloc(size_t size, const char *tag)
{
    void *p;

    if (should_fail(tag)) {
        return NULL;
    }
    p = malloc(size == 0 ? 1 : size);
    if (p != NULL) {
        atomic_fetch_add(&live_count, 1);
    }
    return p;
}

void *kvp_calloc(size_t n, size_t size, const char *tag)
{
    void *p;

    if (should_fail(tag)) {
        return NULL;
    }
    p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p != NULL) {
        atomic_fetch_add(&live_count, 1);
    }
    return p;
}

void *kvp_realloc(void *ptr, size_t size, const char *tag)
{
    void *p;

    if (ptr == NULL) {
        return kvp_malloc(size, tag);
    }
    if (should_fail(tag)) {
        return NULL;
    }
    p = realloc(ptr, size == 0 ? 1 : size);
    return p;
}

void *kvp_array_room(void *arr, size_t *cap, size_t n, size_t elem, size_t first,
                     const char *tag)
{
    size_t nc;
    void  *p;

    if (n < *cap) {
        return arr;
    }
    if (*cap > SIZE_MAX / 2) { /* the capacity would wrap */
        return NULL;
    }
    nc = *cap ? *cap * 2 : first;
    if (nc <= n || (elem != 0 && nc > SIZE_MAX / elem)) { /* first too small, or bytes wrap */
        return NULL;
    }
    p = kvp_realloc(arr, nc * elem, tag);
    if (p != NULL) {
        *cap = nc;
    }
    return p;
}

void *kvp_aligned_alloc(size_t align, size_t size, const char *tag)
{
    void *p = NULL;

    if (should_fail(tag)) {
        return NULL;
    }
    if (posix_memalign(&p, align, size == 0 ? align : size) != 0) {
        return NULL;
    }
    atomic_fetch_add(&live_count, 1);
    return p;
}

char *kvp_strdup(const char *s, const char *tag)
{
    size_t n = strlen(s) + 1;
    char  *p = kvp_malloc(n, tag);

    if (p != NULL) {
        memcpy(p, s, n);
    }
    return p;
}

void kvp_free(void *ptr)
{
    if (ptr != NULL) {
        atomic_fetch_sub(&live_count, 1);
        free(ptr);
    }
}

void kvp_alloc_fail_at(uint64_t n)
{
    atomic_store(&fail_countdown, n);
}

int kvp_alloc_fail_armed(void) { return atomic_load(&fail_countdown) != 0; }

int64_t kvp_alloc_live_count(void)
{
    return atomic_load(&live_count);
}

uint64_t kvp_time_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double kvp_time_s(void)
{
    return (double)kvp_time_ns() * 1e-9;
}

int64_t kvp_proc_write_bytes(void)
{
    FILE              *f = fopen("/proc/self/io", "r");
    char               line[128];
    unsigned long long wb;
    int64_t            out = -1;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "write_bytes: %llu", &wb) == 1) {
            out = (int64_t)wb;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return out;
}
