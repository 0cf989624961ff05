/* test_kvd.c - the .kvd reader (client/eval/kv.c) against good and bad files: a synthetic cache
 * round-trips bit for bit; a wrong magic or version, a short header, a zero or out-of-bound
 * dimension, a file one float short or one byte long are KVP_ERR_BAD_PAGE with nothing
 * allocated; and so are headers whose element count wraps 64 bits (each dimension within its
 * bound, the wrapped count matching the file: a sparse file of 32 GiB + 24 bytes), which the
 * reader once accepted and sized its buffers by the wrapped count; 65536 layers (no page can name
 * the last) are refused up front. Each refusal comes with its reason (the file named, what is wrong
 * with it: the line put and eval print), a missing file or a directory too. A write that fails
 * part-way leaves the old file as it was. */
#include "check.h"
#include "eval.h"
#include "kvpack/bytes.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static char dir[] = "/tmp/kvp-kvd-XXXXXX";

/* A file of a 24-byte header (magic, version, then dims) truncated or extended to size. */
static void write_hdr(const char *path, uint32_t magic, uint32_t version, const uint32_t dims[4],
                      uint64_t size)
{
    uint8_t hdr[24];
    int     fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    CHECK(fd >= 0);
    kvp_st32(hdr, magic);
    kvp_st32(hdr + 4, version);
    for (int i = 0; i < 4; i++) {
        kvp_st32(hdr + 8 + 4 * i, dims[i]);
    }
    CHECK(write(fd, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr));
    CHECK(ftruncate(fd, (off_t)size) == 0); /* sparse beyond the header */
    close(fd);
}

/* path is refused with status want, nothing allocated, and a reason that names the file and
 * says what is wrong (holds because); nothing is printed (the caller prints the reason). */
static void expect_refused(const char *path, kvp_status_t want, const char *because,
                           const char *what)
{
    kvp_kv_t kv;
    char     why[KVP_KVD_WHY_MAX] = "";

    EXPECT(kvp_kvd_read(path, &kv, why, sizeof(why)) == want, "%s: not refused as it should be",
           what);
    EXPECT(kv.k == NULL && kv.v == NULL && kv.layers == 0, "%s: something was allocated", what);
    EXPECT(strstr(why, path) != NULL && strstr(why, because) != NULL,
           "%s: the reason \"%s\" does not name %s and say \"%s\"", what, why, path, because);
    kvp_kv_free(&kv);
}

static void expect_bad(const char *path, const char *because, const char *what)
{
    expect_refused(path, KVP_ERR_BAD_PAGE, because, what);
}

int main(void)
{
    char     path[256], bad[256];
    kvp_kv_t kv, back;
    FILE    *f;
    long     good_size;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/good.kvd", dir);
    snprintf(bad, sizeof(bad), "%s/bad.kvd", dir);

    /* round trip */
    CHECK_OK(kvp_kv_synthetic(&kv, 2, 37, 3, 16, 7));
    CHECK_OK(kvp_kvd_write(path, &kv));
    CHECK_OK(kvp_kvd_read(path, &back, NULL, 0));
    EXPECT(back.layers == 2 && back.tokens == 37 && back.heads == 3 && back.head_dim == 16,
           "geometry %u x %u x %u x %u read back", back.layers, back.tokens, back.heads,
           back.head_dim);
    EXPECT(memcmp(back.k, kv.k, 2 * 37 * 3 * 16 * sizeof(float)) == 0 &&
               memcmp(back.v, kv.v, 2 * 37 * 3 * 16 * sizeof(float)) == 0,
           "values differ after a round trip");
    kvp_kv_free(&back);
    kvp_kv_free(&kv);
    f = fopen(path, "rb");
    CHECK(f != NULL && fseek(f, 0, SEEK_END) == 0);
    good_size = ftell(f);
    fclose(f);
    CHECK(good_size == 24 + 8 * 2 * 37 * 3 * 16);

    /* a write that fails part-way (the file size limit) leaves the file that was there as it was,
     * and nothing beside it (it used to truncate it and leave half a .kvd) */
    {
        struct rlimit lim, small;
        kvp_kv_t      big;
        DIR          *d;
        struct dirent *e;
        int           files = 0;

        CHECK(getrlimit(RLIMIT_FSIZE, &lim) == 0);
        small = (struct rlimit){4096, lim.rlim_max}; /* the soft limit only: it goes back up */
        signal(SIGXFSZ, SIG_IGN); /* write() fails with EFBIG instead */
        CHECK_OK(kvp_kv_synthetic(&big, 2, 64, 3, 16, 9));
        CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
        EXPECT(kvp_kvd_write(path, &big) == KVP_ERR_IO, "a write past the size limit succeeded");
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        kvp_kv_free(&big);
        CHECK_OK(kvp_kvd_read(path, &back, NULL, 0));
        EXPECT(back.tokens == 37, "the file a failed write replaced holds %u tokens", back.tokens);
        kvp_kv_free(&back);
        d = opendir(dir);
        CHECK(d != NULL);
        while ((e = readdir(d)) != NULL) {
            files += e->d_name[0] != '.';
        }
        closedir(d);
        EXPECT(files == 1, "%d files beside the .kvd after a failed write", files);
    }

    {
        const uint32_t ok[4] = {2, 37, 3, 16};
        const uint32_t zero[4] = {2, 0, 3, 16};
        const uint32_t big_heads[4] = {1, 1, 4097, 1};
        /* each within its bound; the product wraps to 2^32 (= the element cap) and to 0 */
        const uint32_t wrap32[4] = {10256, 6700417, 4096, 65536};
        const uint32_t wrap0[4]  = {4096, 1u << 24, 4096, 65536};
        const uint32_t layers[4] = {65536, 1, 1, 1}; /* a page's layer index stops at 65534 */

        write_hdr(bad, 0x3144564Bu ^ 1, 1, ok, (uint64_t)good_size);
        expect_bad(bad, "not a .kvd v1 file (magic 0x3144564a", "wrong magic");
        write_hdr(bad, 0x3144564Bu, 2, ok, (uint64_t)good_size);
        expect_bad(bad, "version 2", "wrong version");
        write_hdr(bad, 0x3144564Bu, 1, ok, 20);
        expect_bad(bad, "shorter than the 24-byte kvd header", "short header");
        write_hdr(bad, 0x3144564Bu, 1, ok, (uint64_t)good_size - 4);
        expect_bad(bad, "the file has", "one float short");
        write_hdr(bad, 0x3144564Bu, 1, ok, (uint64_t)good_size + 1);
        expect_bad(bad, "the file has", "one byte long");
        write_hdr(bad, 0x3144564Bu, 1, zero, 24);
        expect_bad(bad, "out of bounds", "a zero dimension");
        write_hdr(bad, 0x3144564Bu, 1, big_heads, 24 + 8 * 4097);
        expect_bad(bad, "out of bounds", "4097 heads");
        write_hdr(bad, 0x3144564Bu, 1, wrap32, 24 + 8 * (1ull << 32));
        expect_bad(bad, "out of bounds", "an element count that wraps to 2^32");
        write_hdr(bad, 0x3144564Bu, 1, wrap0, 24);
        expect_bad(bad, "out of bounds", "an element count that wraps to 0");
        write_hdr(bad, 0x3144564Bu, 1, layers, 24 + 8 * 65536);
        expect_bad(bad, "out of bounds", "65536 layers");
    }
    /* a file that is not there, and a directory: the reason says so */
    unlink(bad);
    expect_refused(bad, KVP_ERR_IO, "cannot open", "a missing file");
    expect_refused(bad, KVP_ERR_IO, "No such file or directory", "a missing file");
    expect_refused(dir, KVP_ERR_IO, "Is a directory", "a directory");
    unlink(path);
    rmdir(dir);
    return kvp_test_result("test_kvd");
}
