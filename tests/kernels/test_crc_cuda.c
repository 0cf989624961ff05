/* test_crc_cuda.c - the GPU CRC32C and page check (kernels/crc_cuda.cu) against the host CRC
 * (kvp_crc32c, ISA-L): first the shared scalar steps of crc32c_hd.h on the host, sliced into
 * 1..1000 slices and combined by shifting, for every length 0..300 and a few large ones; then on
 * the device: ranges of every length 0..64 and assorted ones up to ~100 KB at odd offsets; real
 * pages back to back pass, and one changed byte (payload, header, the stored crc itself) makes
 * exactly that page KVP_ERR_CORRUPT, a bad magic or a length that disagrees with the header
 * KVP_ERR_BAD_PAGE; the polled check (kvp_cuda_check_*) gives the same verdicts batch after batch
 * from one scratch and refuses misuse. Exits 77 when no GPU is usable. Also built as kernels.test_crc_cuda_emu
 * against crc_cuda.cu run on the CPU (cuda_emu/cuda_runtime.h, KVP_CUDA_EMU). */
#include "kvpack/crc_cuda.h"
#include "kvpack/log.h"
#include "kvpack/page.h"
#include "crc32c_hd.h"

#include "check.h"
#include "devmem.h"
#include "pages.h"

#include <stdio.h>

#ifndef KVP_CUDA_EMU
#include "kvpack/codec_cuda.h"
#endif

static tk_rng_t rng = {42};

static void fill(uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = (uint8_t)tk_next(&rng);
    }
}

/* The kernel's algorithm on the host: nslices slices, each shifted past the bytes after it. */
static uint32_t host_sliced(const uint8_t *b, uint64_t len, uint32_t nslices)
{
    uint32_t table[256], x2n[KVP_CRC_X2N_BITS], raw = 0;

    for (uint32_t i = 0; i < 256; i++) {
        table[i] = kvp_hd_crc32c_entry(i);
    }
    kvp_hd_crc_x2n_init(x2n);
    for (uint32_t t = 0; t < nslices; t++) {
        uint64_t from, to;

        kvp_hd_crc_slice(len, t, nslices, &from, &to);
        raw ^= kvp_hd_crc_shift(kvp_hd_crc32c_raw(b, from, to, len, table), len - to, x2n);
    }
    return kvp_hd_crc32c_finish(raw, len, x2n);
}

static void host_twin(void)
{
    static const uint32_t slices[] = {1, 3, 128, 1000};
    size_t                big = 300000;
    uint8_t              *b   = malloc(big);

    CHECK(b != NULL);
    fill(b, big);
    CHECK(host_sliced((const uint8_t *)"123456789", 9, 1) == 0xE3069283u);
    CHECK(host_sliced((const uint8_t *)"123456789", 9, 128) == 0xE3069283u);
    for (size_t len = 0; len <= 300; len++) {
        for (size_t s = 0; s < sizeof(slices) / sizeof(slices[0]); s++) {
            EXPECT(host_sliced(b + (len % 7), len, slices[s]) == kvp_crc32c(0, b + (len % 7), len),
                   "len %zu slices %u", len, slices[s]);
        }
    }
    for (size_t len = 65521; len < big; len += 77777) {
        EXPECT(host_sliced(b, len, 128) == kvp_crc32c(0, b, len), "len %zu", len);
    }
    free(b);
}

static void device_ranges(void)
{
    enum { N = 65 + 10 };
    static const uint32_t more[10] = {100, 127, 128, 129, 255, 1000, 4095, 4097, 65537, 100003};
    uint64_t              off[N], at = 0;
    uint32_t              len[N], crc[N];
    uint8_t              *h, *d;

    for (uint32_t i = 0; i < N; i++) {
        len[i] = i < 65 ? i : more[i - 65];
        off[i] = at + (i % 5); /* odd offsets too */
        at     = off[i] + len[i];
    }
    h = malloc(at);
    CHECK(h != NULL);
    fill(h, at);
    d = dev_alloc(at);
    dev_put(d, h, at);
    CHECK_OK(kvp_cuda_crc32c(d, off, len, N, NULL, crc));
    for (uint32_t i = 0; i < N; i++) {
        EXPECT(crc[i] == kvp_crc32c(0, h + off[i], len[i]), "range %u of %u bytes", i, len[i]);
    }
    CHECK_ST(kvp_cuda_crc32c(d, NULL, len, N, NULL, crc), KVP_ERR_INVALID);
    CHECK_OK(kvp_cuda_crc32c(d, off, len, 0, NULL, crc));
    dev_free(d);
    free(h);
}

/* Verify the batch h (copied to the device) and expect page `bad` (or none: n) to fail with want. */
static void verify_expect(const uint8_t *h, size_t total, const uint32_t *lens, uint32_t n,
                          uint32_t bad, kvp_status_t want, const char *what)
{
    kvp_status_t st[16], ret;
    uint32_t     n_bad = 99;
    uint8_t     *d     = dev_alloc(total);

    dev_put(d, h, total);
    ret = kvp_cuda_pages_verify(d, lens, n, NULL, st, &n_bad);
    EXPECT(ret == (bad < n ? KVP_ERR_CORRUPT : KVP_OK), "%s: verify %s", what, kvp_status_name(ret));
    EXPECT(n_bad == (bad < n ? 1u : 0u), "%s: %u bad pages", what, n_bad);
    for (uint32_t i = 0; i < n; i++) {
        EXPECT(st[i] == (i == bad ? want : KVP_OK), "%s: page %u %s", what, i, kvp_status_name(st[i]));
    }
    dev_free(d);
}

static void device_pages(void)
{
    enum { N = 9 };
    uint32_t lens[N], at[N];
    uint8_t *h;
    size_t   total = test_pages_make(7, N, &h, lens);

    for (uint32_t i = 0, a = 0; i < N; a += lens[i], i++) {
        at[i] = a;
        CHECK_OK(kvp_page_parse(h + a, lens[i], NULL));
    }
    CHECK(lens[3] > 100000); /* one ~100 KB page at least */
    verify_expect(h, total, lens, N, N, KVP_OK, "intact");
    h[at[3] + lens[3] / 2] ^= 0x10;
    verify_expect(h, total, lens, N, 3, KVP_ERR_CORRUPT, "payload byte");
    h[at[3] + lens[3] / 2] ^= 0x10;
    h[at[5] + 20] ^= 0x01; /* head_dim: the CRC covers the header */
    verify_expect(h, total, lens, N, 5, KVP_ERR_CORRUPT, "header byte");
    h[at[5] + 20] ^= 0x01;
    h[at[0] + 57] ^= 0x80; /* the stored crc */
    verify_expect(h, total, lens, N, 0, KVP_ERR_CORRUPT, "crc field");
    h[at[0] + 57] ^= 0x80;
    h[at[8] + lens[8] - 1] ^= 0xFF; /* the last byte of the batch */
    verify_expect(h, total, lens, N, 8, KVP_ERR_CORRUPT, "last byte");
    h[at[8] + lens[8] - 1] ^= 0xFF;
    h[at[2]] ^= 1;
    verify_expect(h, total, lens, N, 2, KVP_ERR_BAD_PAGE, "magic");
    h[at[2]] ^= 1;
    lens[N - 1] -= 1; /* truncated last page: its header says one byte more */
    verify_expect(h, total - 1, lens, N, N - 1, KVP_ERR_BAD_PAGE, "truncated");
    lens[N - 1] += 1;
    verify_expect(h, total, lens, N, N, KVP_OK, "restored");
    free(h);
}

#ifdef KVP_CUDA_EMU
void kvp_cuda_emu_event_stall(int on); /* cuda_emu/crc_cuda_emu.cpp */
#endif

/* Poll a started check until it is done. */
static kvp_status_t check_wait(kvp_cuda_check_h c, kvp_status_t *st, uint32_t *n_bad)
{
    kvp_status_t ret;

    while ((ret = kvp_cuda_check_poll(c, st, n_bad)) == KVP_INPROGRESS) {
    }
    return ret;
}

/* The polled check (kvp_cuda_check_*): one scratch for batch after batch, results as
 * kvp_cuda_pages_verify's, and its misuse refused. */
static void device_check(void)
{
    enum { N = 9 };
    kvp_cuda_check_h c;
    kvp_status_t     st[N];
    uint32_t         lens[N], at[N], n_bad = 99;
    uint8_t         *h, *d;
    size_t           total = test_pages_make(8, N, &h, lens);

    for (uint32_t i = 0, a = 0; i < N; a += lens[i], i++) {
        at[i] = a;
    }
    d = dev_alloc(total);
    CHECK_ST(kvp_cuda_check_create(0, &c), KVP_ERR_INVALID);
    CHECK_OK(kvp_cuda_check_create(N, &c));
    CHECK_ST(kvp_cuda_check_poll(c, st, &n_bad), KVP_ERR_INVALID); /* nothing started */
    for (int round = 0; round < 3; round++) {
        h[at[6] + 100] ^= (uint8_t)(round == 1); /* round 1: page 6 changed */
        dev_put(d, h, total);
        CHECK_OK(kvp_cuda_check_start(c, d, lens, N, NULL));
        CHECK_ST(kvp_cuda_check_start(c, d, lens, N, NULL), KVP_ERR_BUSY);
        CHECK_ST(check_wait(c, st, &n_bad), round == 1 ? KVP_ERR_CORRUPT : KVP_OK);
        EXPECT(n_bad == (round == 1 ? 1u : 0u), "round %d: %u bad", round, n_bad);
        for (uint32_t i = 0; i < N; i++) {
            EXPECT(st[i] == (round == 1 && i == 6 ? KVP_ERR_CORRUPT : KVP_OK), "round %d page %u %s",
                   round, i, kvp_status_name(st[i]));
        }
        CHECK_ST(kvp_cuda_check_poll(c, NULL, NULL), round == 1 ? KVP_ERR_CORRUPT : KVP_OK);
        h[at[6] + 100] ^= (uint8_t)(round == 1);
    }
    CHECK_OK(kvp_cuda_check_start(c, d, lens, 3, NULL)); /* fewer pages than made for */
    CHECK_OK(check_wait(c, st, &n_bad));
    CHECK_ST(kvp_cuda_check_start(c, d, lens, N + 1, NULL), KVP_ERR_INVALID);
#ifdef KVP_CUDA_EMU
    kvp_cuda_emu_event_stall(1);
    CHECK_OK(kvp_cuda_check_start(c, d, lens, N, NULL));
    CHECK_ST(kvp_cuda_check_poll(c, st, &n_bad), KVP_INPROGRESS);
    kvp_cuda_emu_event_stall(0);
#else
    CHECK_OK(kvp_cuda_check_start(c, d, lens, N, NULL));
#endif
    kvp_cuda_check_destroy(c); /* one still queued: waited for */
    kvp_cuda_check_destroy(NULL);
    dev_free(d);
    free(h);
}

int main(void)
{
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    host_twin();
#ifndef KVP_CUDA_EMU
    if (!kvp_cuda_available()) {
        return kvp_test_no_gpu("test_crc_cuda", "no usable GPU (the host twin checks ran)");
    }
#endif
    device_ranges();
    device_pages();
    device_check();
    return kvp_test_result("test_crc_cuda");
}
