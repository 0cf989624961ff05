/* test_kvd.c - the .kvd reader (client/eval/kv.c) against good and bad files: a synthetic cache
 * round-trips bit for bit; a wrong magic or version, a short header, a zero or out-of-bound
 * dimension, a file one float short or one byte long are KVP_ERR_BAD_PAGE with nothing
 * allocated; and so are headers whose element count wraps 64 bits (each dimension within its
 * bound, the wrapped count matching the file: a sparse file of 32 GiB + 24 bytes), which the
 * reader once accepted and sized its buffers by the wrapped count. */
#include "check.h"
#include "eval.h"
#include "kvpack/bytes.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void expect_bad(const char *path, const char *what)
{
    kvp_kv_t kv;

    EXPECT(kvp_kvd_read(path, &kv) == KVP_ERR_BAD_PAGE, "%s: not refused as a bad file", what);
    EXPECT(kv.k == NULL && kv.v == NULL && kv.layers == 0, "%s: something was allocated", what);
    kvp_kv_free(&kv);
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
    CHECK_OK(kvp_kvd_read(path, &back));
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

    {
        const uint32_t ok[4] = {2, 37, 3, 16};
        const uint32_t zero[4] = {2, 0, 3, 16};
        const uint32_t big_heads[4] = {1, 1, 4097, 1};
        /* each within its bound; the product wraps to 2^32 (= the element cap) and to 0 */
        const uint32_t wrap32[4] = {10256, 6700417, 4096, 65536};
        const uint32_t wrap0[4]  = {65536, 1u << 24, 4096, 4096};

        write_hdr(bad, 0x3144564Bu ^ 1, 1, ok, (uint64_t)good_size);
        expect_bad(bad, "wrong magic");
        write_hdr(bad, 0x3144564Bu, 2, ok, (uint64_t)good_size);
        expect_bad(bad, "wrong version");
        write_hdr(bad, 0x3144564Bu, 1, ok, 20);
        expect_bad(bad, "short header");
        write_hdr(bad, 0x3144564Bu, 1, ok, (uint64_t)good_size - 4);
        expect_bad(bad, "one float short");
        write_hdr(bad, 0x3144564Bu, 1, ok, (uint64_t)good_size + 1);
        expect_bad(bad, "one byte long");
        write_hdr(bad, 0x3144564Bu, 1, zero, 24);
        expect_bad(bad, "a zero dimension");
        write_hdr(bad, 0x3144564Bu, 1, big_heads, 24 + 8 * 4097);
        expect_bad(bad, "4097 heads");
        write_hdr(bad, 0x3144564Bu, 1, wrap32, 24 + 8 * (1ull << 32));
        expect_bad(bad, "an element count that wraps to 2^32");
        write_hdr(bad, 0x3144564Bu, 1, wrap0, 24);
        expect_bad(bad, "an element count that wraps to 0");
    }
    unlink(bad);
    unlink(path);
    rmdir(dir);
    return kvp_test_result("test_kvd");
}
