/* replay.c - the main of a harness built without libFuzzer: fuzz_<h> PATH... runs the harness on
 * each file (a directory: each file in it), then on mutations of each made here, the same every
 * run: up to 256 prefixes, the file with a trailing byte, and 512 copies with 1-4 bytes replaced
 * by random or boundary values (0, 0xFF, 0x7F, 0x80), from a fixed seed. A property failure
 * aborts (the harness's FUZZ_FAIL); a crash is a crash; exit 0 means every input was handled.
 * This is what CI runs on every build (tests/fuzz/CMakeLists.txt); coverage-guided runs use the
 * same harness under libFuzzer (KVP_FUZZ=ON). */
#include "fuzz.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static size_t   runs;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void run(const uint8_t *d, size_t n)
{
    LLVMFuzzerTestOneInput(d, n);
    runs++;
}

static void replay_one(const uint8_t *d, size_t n)
{
    static const uint8_t edge[] = {0x00, 0xFF, 0x7F, 0x80};
    uint8_t             *m      = malloc(n + 1);
    size_t               step   = n / 256 + 1;

    if (m == NULL) {
        fprintf(stderr, "replay: no memory for a %zu-byte input\n", n);
        exit(1);
    }
    run(d, n);
    for (size_t l = 0; l < n; l += step) { /* prefixes, each in a buffer of its exact size */
        uint8_t *p = malloc(l ? l : 1);

        memcpy(p, d, l);
        run(p, l);
        free(p);
    }
    memcpy(m, d, n);
    m[n] = 0;
    run(m, n + 1);
    for (int i = 0; i < 512 && n > 0; i++) {
        int k = 1 + (int)(next() % 4);

        memcpy(m, d, n);
        while (k-- > 0) {
            size_t  at = (size_t)(next() % n);
            uint8_t b  = (next() & 1) ? edge[next() % 4] : (uint8_t)next();

            m[at] = b;
        }
        run(m, n);
    }
    free(m);
}

static void replay_file(const char *path)
{
    FILE    *f = fopen(path, "rb");
    uint8_t *d;
    long     n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        exit(1);
    }
    d = malloc(n ? (size_t)n : 1);
    if (d == NULL || fread(d, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    replay_one(d, (size_t)n);
    free(d);
}

int main(int argc, char **argv)
{
    size_t files = 0;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: %s FILE|DIR...\n  runs this fuzz harness on each input and on fixed "
               "mutations of it (prefixes, a trailing byte, 512 byte edits)\n", argv[0]);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;

        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            struct dirent **ents;
            int             n = scandir(argv[i], &ents, NULL, alphasort);

            for (int j = 0; j < n; j++) {
                char path[4096];

                if (ents[j]->d_name[0] != '.') {
                    snprintf(path, sizeof(path), "%s/%s", argv[i], ents[j]->d_name);
                    replay_file(path);
                    files++;
                }
                free(ents[j]);
            }
            free(ents);
        } else {
            replay_file(argv[i]);
            files++;
        }
    }
    if (files == 0) {
        fprintf(stderr, "replay: no inputs found (run fuzz_seeds first)\n");
        return 1;
    }
    printf("%s: %zu inputs, %zu runs, no failure\n", argv[0], files, runs);
    return 0;
}
