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

#endif
