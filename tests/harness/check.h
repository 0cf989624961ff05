/* check.h - the one set of test assertions every C test in tests/ uses.
 *   CHECK(cond)            fatal: print file:line and the condition, exit 1
 *   CHECK_ST(expr, want)   fatal: expr must return the kvp_status_t want (names printed)
 *   CHECK_OK(expr)         fatal: expr must return KVP_OK
 *   EXPECT(cond[, "fmt", ...]) non-fatal: print and count; kvp_test_result() turns the count into an
 *                          exit status at the end of main
 *   kvp_test_child_of(parent)  in a forked child that serves the test (a node, a server): it is
 *                          killed when the test process dies
 *   kvp_test_no_gpu(name, why) the exit status of a GPU test that found no usable GPU
 * Header-only (static state per test binary), C11 with GNU variadic comma elision. */
#ifndef KVPACK_TEST_CHECK_H
#define KVPACK_TEST_CHECK_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvpack/child.h"
#include "kvpack/status.h"

static int kvp_test_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);          \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define CHECK_ST(expr, want)                                                         \
    do {                                                                             \
        kvp_status_t _st = (expr);                                                   \
        if (_st != (want)) {                                                         \
            fprintf(stderr, "FAIL %s:%d: %s = %s, want %s\n", __FILE__, __LINE__,     \
                    #expr, kvp_status_name(_st), kvp_status_name(want));             \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define CHECK_OK(expr) CHECK_ST(expr, KVP_OK)

#define EXPECT(cond, ...)                                                            \
    do {                                                                             \
        if (!(cond)) {                                                               \
            kvp_test_failures++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s:", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, " " __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                                   \
        }                                                                            \
    } while (0)

/* A failed CHECK exits the test process; a child it forked (a kvpackd, a server) would live on
 * holding ctest's output pipe, and the run then waited for the test's TIMEOUT. parent: the
 * test's pid, taken before fork (if it is gone already, the child leaves at once). */
static inline void kvp_test_child_of(pid_t parent)
{
    if (kvp_child_end_with_parent(parent, SIGKILL) != 0) {
        _exit(1);
    }
}

/* Exit status of a GPU test that found no usable GPU: 77 (ctest: skipped), or 1 when
 * KVP_REQUIRE_GPU=1 (the device check: there a skip would hide a driver too old for the toolkit,
 * which cudaGetDeviceCount reports as no device); 1 too when an EXPECT before it failed. */
static inline int kvp_test_no_gpu(const char *name, const char *why)
{
    const char *req = getenv("KVP_REQUIRE_GPU");

    if (req != NULL && req[0] == '1') {
        fprintf(stderr, "FAIL %s: %s, and KVP_REQUIRE_GPU=1\n", name, why);
        return 1;
    }
    printf("%s: %s: skipped\n", name, why);
    return kvp_test_failures ? 1 : 77;
}

/* Exit status for main: 0 when no EXPECT failed; prints a one-line summary either way. */
static inline int kvp_test_result(const char *name)
{
    if (kvp_test_failures != 0) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, kvp_test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
