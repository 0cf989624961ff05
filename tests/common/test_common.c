/* test_common.c - unit tests of the common base: status table ranges and strings, allocation
 * accounting and failure injection, the monotonic clock; plus CRC32C known vectors (kernels). */
#include "kvpack/alloc.h"
#include "kvpack/page.h"
#include "kvpack/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                         \
        }                                                                       \
    } while (0)

/* Every status lies in the range its name promises and has a distinct, non-empty message. */
static void test_status_ranges(void)
{
    struct { const char *name; int value; const char *msg; } all[] = {
#define ENTRY(_n, _v, _s) {#_n, _v, _s},
        KVP_STATUS_MAP(ENTRY)
#undef ENTRY
    };
    size_t n = sizeof(all) / sizeof(all[0]);

    for (size_t i = 0; i < n; i++) {
        CHECK(all[i].msg[0] != '\0');
        CHECK(strcmp(kvp_status_str((kvp_status_t)all[i].value), all[i].msg) == 0);
        CHECK(strcmp(kvp_status_name((kvp_status_t)all[i].value), all[i].name) == 0);
        if (strncmp(all[i].name, "ERR_PEER", 8) == 0) {
            CHECK(all[i].value <= -40 && all[i].value >= -59);
        } else if (strncmp(all[i].name, "ERR_NODE", 8) == 0) {
            CHECK(all[i].value <= -60 && all[i].value >= -79);
        } else if (strcmp(all[i].name, "ERR_CORRUPT") == 0 || strcmp(all[i].name, "ERR_BAD_PAGE") == 0 ||
                   strcmp(all[i].name, "ERR_WRONG_CODEC") == 0 ||
                   strcmp(all[i].name, "ERR_BAD_INPUT_DATA") == 0) {
            CHECK(all[i].value <= -80 && all[i].value >= -99);
        }
        for (size_t j = 0; j < i; j++) {
            CHECK(all[i].value != all[j].value);
        }
    }
    CHECK(strcmp(kvp_status_str((kvp_status_t)-1234), "unknown status") == 0);
}

static void test_alloc_injection(void)
{
    int64_t live = kvp_alloc_live_count();
    void   *a, *b, *c;

    kvp_alloc_fail_at(2);
    a = kvp_malloc(16, "test a");
    b = kvp_malloc(16, "test b"); /* the injected failure */
    c = kvp_calloc(4, 4, "test c");
    CHECK(a != NULL);
    CHECK(b == NULL);
    CHECK(c != NULL);
    CHECK(kvp_alloc_live_count() == live + 2);
    kvp_free(a);
    kvp_free(c);
    kvp_free(NULL);
    CHECK(kvp_alloc_live_count() == live);
}

static void test_clock(void)
{
    uint64_t t0 = kvp_time_ns(), t1 = kvp_time_ns();

    CHECK(t1 >= t0);
}

static void test_crc32c(void)
{
    const char *v = "123456789";
    uint8_t     zeros[32] = {0};
    uint32_t    part;

    CHECK(kvp_crc32c(0, v, 9) == 0xE3069283u);        /* RFC 3720 check value */
    CHECK(kvp_crc32c(0, zeros, 32) == 0x8A9136AAu);   /* RFC 3720 B.4: 32 bytes of zeros */
    part = kvp_crc32c(0, v, 4);
    CHECK(kvp_crc32c(part, v + 4, 5) == 0xE3069283u); /* running CRC */
}

int main(void)
{
    test_status_ranges();
    test_alloc_injection();
    test_clock();
    test_crc32c();
    if (failures != 0) {
        fprintf(stderr, "test_common: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_common: all checks passed\n");
    return 0;
}
