/* fuzz.h - what every harness in tests/fuzz/ shares. A harness is one libFuzzer entry point,
 * LLVMFuzzerTestOneInput, over one parser of untrusted bytes; it returns 0 for any input and
 * calls FUZZ_FAIL (abort, so libFuzzer and the replay driver both report it) when a property the
 * parser promises does not hold. Built twice: with clang's -fsanitize=fuzzer for coverage-guided
 * runs (KVP_FUZZ=ON), and always with replay.c, which runs it over a seed corpus (seeds.c) and
 * deterministic mutations of each seed, so CI exercises every harness on every build. */
#ifndef KVPACK_FUZZ_H
#define KVPACK_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_FAIL(...)                                                                        \
    do {                                                                                      \
        fprintf(stderr, "fuzz property failed at %s:%d: ", __FILE__, __LINE__);               \
        fprintf(stderr, __VA_ARGS__);                                                         \
        fprintf(stderr, "\n");                                                                \
        abort();                                                                              \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The path of a file holding data[0..size), for parsers that take a path (a memory file, one per
 * process, rewritten on every call; the harness defines _GNU_SOURCE before any include). */
#ifdef _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>

static inline const char *fuzz_as_file(const uint8_t *data, size_t size)
{
    static int  fd = -1;
    static char path[64];

    if (fd < 0 && (fd = memfd_create("fuzz-input", 0)) < 0) {
        FUZZ_FAIL("memfd_create: %m");
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) {
        FUZZ_FAIL("writing the input file: %m");
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return path;
}
#endif

#endif
