/* test_common.c - unit tests of the common base: status table ranges and strings, allocation
 * accounting and failure injection, growable arrays, the monotonic clock, the duration histogram
 * buckets, the command-line number parser (signs, octal, overflow before and after a suffix), the
 * store keys' hex parser, a forked child's end with its parent (child.h); plus CRC32C known
 * vectors (kernels). */
#include "kvpack/alloc.h"
#include "kvpack/child.h"
#include "kvpack/hist.h"
#include "kvpack/num.h"
#include "kvpack/page.h"
#include "kvpack/status.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>


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
        EXPECT(all[i].msg[0] != '\0');
        EXPECT(strcmp(kvp_status_str((kvp_status_t)all[i].value), all[i].msg) == 0);
        EXPECT(strcmp(kvp_status_name((kvp_status_t)all[i].value), all[i].name) == 0);
        if (strncmp(all[i].name, "ERR_PEER", 8) == 0) {
            EXPECT(all[i].value <= -40 && all[i].value >= -59);
        } else if (strncmp(all[i].name, "ERR_NODE", 8) == 0) {
            EXPECT(all[i].value <= -60 && all[i].value >= -79);
        } else if (strcmp(all[i].name, "ERR_CORRUPT") == 0 || strcmp(all[i].name, "ERR_BAD_PAGE") == 0 ||
                   strcmp(all[i].name, "ERR_WRONG_CODEC") == 0 ||
                   strcmp(all[i].name, "ERR_BAD_INPUT_DATA") == 0) {
            EXPECT(all[i].value <= -80 && all[i].value >= -99);
        }
        for (size_t j = 0; j < i; j++) {
            EXPECT(all[i].value != all[j].value);
        }
    }
    EXPECT(strcmp(kvp_status_str((kvp_status_t)-1234), "unknown status") == 0);
}

static void test_alloc_injection(void)
{
    int64_t live = kvp_alloc_live_count();
    void   *a, *b, *c;

    kvp_alloc_fail_at(2);
    a = kvp_malloc(16, "test a");
    b = kvp_malloc(16, "test b"); /* the injected failure */
    c = kvp_calloc(4, 4, "test c");
    EXPECT(a != NULL);
    EXPECT(b == NULL);
    EXPECT(c != NULL);
    EXPECT(kvp_alloc_live_count() == live + 2);
    kvp_free(a);
    kvp_free(c);
    kvp_free(NULL);
    EXPECT(kvp_alloc_live_count() == live);
}

/* kvp_array_room: the same array while there is room, doubling from `first`, contents kept; an
 * allocation failure, or a capacity whose size in bytes would overflow size_t, leaves the array
 * and its capacity as they were. */
static void test_array_room(void)
{
    uint32_t *a = NULL, *g;
    size_t    cap = 0, huge;
    uint64_t *b;
    void     *p;

    for (uint32_t n = 0; n < 100; n++) {
        g = kvp_array_room(a, &cap, n, sizeof(*a), 4, "test array");
        EXPECT(g != NULL);
        EXPECT(n < cap);
        EXPECT((cap & (cap - 1)) == 0 && cap >= 4);  /* 4, 8, 16, ... */
        EXPECT(cap == 4 || cap / 2 <= n);             /* doubled only when full */
        a    = g;
        a[n] = n * 7;
    }
    EXPECT(cap == 128);
    for (uint32_t n = 0; n < 100; n++) {
        EXPECT(a[n] == n * 7);
    }
    EXPECT(kvp_array_room(a, &cap, 99, sizeof(*a), 4, "test array") == a); /* room: no realloc */
    kvp_alloc_fail_at(1);
    EXPECT(kvp_array_room(a, &cap, 128, sizeof(*a), 4, "test array") == NULL);
    EXPECT(cap == 128 && a[99] == 99 * 7);
    kvp_free(a);

    /* doubling SIZE_MAX / 8 + 1 eight-byte elements needs more than SIZE_MAX bytes, and doubling
     * SIZE_MAX / 2 + 1 wraps the capacity itself: both refused before any allocation (the armed
     * failure is still pending afterwards) */
    b = kvp_malloc(4 * sizeof(*b), "test array");
    EXPECT(b != NULL);
    b[3] = 42;
    huge = SIZE_MAX / 8 + 1;
    cap  = huge;
    kvp_alloc_fail_at(1);
    EXPECT(kvp_array_room(b, &cap, huge, sizeof(*b), 4, "test array") == NULL);
    EXPECT(cap == huge && b[3] == 42);
    cap = SIZE_MAX / 2 + 1;
    EXPECT(kvp_array_room(b, &cap, cap, 1, 4, "test array") == NULL);
    EXPECT(cap == SIZE_MAX / 2 + 1 && b[3] == 42);
    p = kvp_malloc(1, "test array"); /* takes the injected failure the calls above left */
    EXPECT(p == NULL);
    kvp_alloc_fail_at(0);
    kvp_free(p);
    kvp_free(b);
}

static void test_clock(void)
{
    uint64_t t0 = kvp_time_ns(), t1 = kvp_time_ns();

    EXPECT(t1 >= t0);
}

static void test_crc32c(void)
{
    const char *v = "123456789";
    uint8_t     zeros[32] = {0};
    uint32_t    part;

    EXPECT(kvp_crc32c(0, v, 9) == 0xE3069283u);        /* RFC 3720 check value */
    EXPECT(kvp_crc32c(0, zeros, 32) == 0x8A9136AAu);   /* RFC 3720 B.4: 32 bytes of zeros */
    part = kvp_crc32c(0, v, 4);
    EXPECT(kvp_crc32c(part, v + 4, 5) == 0xE3069283u); /* running CRC */
}

/* Bounds ascend; a duration goes to the first bound >= it (le is inclusive), past the last to +Inf;
 * each le label is that bound in seconds. */
static void test_hist_buckets(void)
{
    EXPECT(kvp_hist_bucket(0) == 0);
    EXPECT(kvp_hist_bucket(kvp_hist_bounds[KVP_HIST_BUCKETS - 1].ns + 1) == KVP_HIST_BUCKETS);
    for (uint32_t b = 0; b < KVP_HIST_BUCKETS; b++) {
        EXPECT(b == 0 || kvp_hist_bounds[b].ns > kvp_hist_bounds[b - 1].ns);
        EXPECT(kvp_hist_bucket(kvp_hist_bounds[b].ns) == b);
        EXPECT(kvp_hist_bucket(kvp_hist_bounds[b].ns + 1) == b + 1);
        EXPECT((uint64_t)(strtod(kvp_hist_bounds[b].le, NULL) * 1e9 + 0.5) ==
               kvp_hist_bounds[b].ns);
    }
}

static void test_num_parse(void)
{
    static const struct {
        const char *s;
        uint64_t    v;
    } ok[] = {{"0", 0}, {"42", 42}, {"010", 10}, {"0x1f", 31}, {"0X10M", 16ull << 20},
              {"64M", 64ull << 20}, {"64MiB", 64ull << 20}, {"64MB", 64ull << 20},
              {"3k", 3072}, {"2G", 2ull << 30}, {"5B", 5}, {"18446744073709551615", UINT64_MAX},
              {"17179869183G", 17179869183ull << 30},
              /* in hex a bare B is a digit, the bytes suffix only after k/M/G (num.h) */
              {"0x10", 16}, {"0x1000B", 65547}, {"0x10B", 267}, {"0x4KB", 4096},
              {"16K", 16384}};
    static const char *bad[] = {"", "-5", "+5", " 5", "5 ", "1e3", "1.5G", "0x", "x10",
                                "18446744073709551616", "99999999999999999999G", "17179869184G",
                                "4T", "5iB", "5Mi", "5MiBB", "010z", "0xg"};
    uint64_t v;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        v = 7;
        CHECK(kvp_num_parse_u64(ok[i].s, &v) == 0 && v == ok[i].v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 7;
        if (kvp_num_parse_u64(bad[i], &v) != -1 || v != 7) {
            fprintf(stderr, "'%s' parsed as %llu\n", bad[i], (unsigned long long)v);
            CHECK(0);
        }
    }
    CHECK(kvp_num_parse_u64(NULL, &v) == -1);
    /* the store's hex namespaces in keys: exactly 16 lowercase digits, nothing read past them
     * (sscanf skipped the spaces of a damaged key and read on past its end) */
    CHECK(kvp_hex16_parse("00000000000070b5/x", &v) == 0 && v == 0x70b5);
    CHECK(kvp_hex16_parse("ffffffffffffffff", &v) == 0 && v == UINT64_MAX);
    {
        static const char *const hbad[] = {"                ", " 00000000000070b", "+000000000000070",
                                           "0x00000000000070", "00000000000070B5", "000000000000070/"};
        for (size_t i = 0; i < sizeof(hbad) / sizeof(hbad[0]); i++) {
            v = 7;
            CHECK(kvp_hex16_parse(hbad[i], &v) == -1 && v == 7);
        }
    }
}

/* A grandchild tied to its parent (the middle process) gets the signal when the middle process
 * is killed; this process is the subreaper, so it reaps the grandchild and sees the signal. A
 * grandchild whose parent is gone before the call is told so (-1). */
static void test_child_end_with_parent(void)
{
    for (int late = 0; late < 2; late++) {
        int   fds[2], st = 0;
        pid_t mid, grand = -1, got;

        CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 && pipe(fds) == 0);
        mid = fork();
        CHECK(mid >= 0);
        if (mid == 0) {
            pid_t me = getpid(), g = fork();

            if (g == 0) {
                if (late) { /* the middle process is gone before the request */
                    while (getppid() == me) {
                        usleep(1000);
                    }
                    _exit(kvp_child_end_with_parent(me, SIGKILL) == -1 ? 3 : 4);
                }
                if (kvp_child_end_with_parent(me, SIGKILL) != 0) {
                    _exit(2);
                }
                CHECK(write(fds[1], "r", 1) == 1);
                pause(); /* only the parent's death ends this */
                _exit(5);
            }
            if (!late) {
                char c;

                CHECK(read(fds[0], &c, 1) == 1); /* the grandchild has asked */
            }
            _exit(g > 0 ? 0 : 1);
        }
        CHECK(waitpid(mid, &st, 0) == mid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        alarm(30); /* a grandchild that did not get the signal would hang the test: fail loudly */
        got = wait(&st);
        alarm(0);
        grand = got;
        EXPECT(grand > 0 && grand != mid, "grandchild reaped");
        if (late) {
            EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 3, "late request reported (status %#x)", st);
        } else {
            EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "grandchild killed with its parent (status %#x)", st);
        }
        close(fds[0]);
        close(fds[1]);
        CHECK(prctl(PR_SET_CHILD_SUBREAPER, 0) == 0);
    }
}

int main(void)
{
    test_status_ranges();
    test_alloc_injection();
    test_array_room();
    test_clock();
    test_crc32c();
    test_hist_buckets();
    test_num_parse();
    test_child_end_with_parent();
    return kvp_test_result("test_common");
}
