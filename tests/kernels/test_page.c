/* test_page.c - page header validation: a good page parses and decodes; every truncation, a
 * trailing byte and every single-bit flip anywhere in the page is an error (never a decode or a
 * crash); each header field set to a bad value and re-sealed with a valid CRC, the codec-owned
 * ones (bits, groups, rotation flags, aux) included, is rejected by kvp_page_parse, and so is a
 * stored scale, zero or norm no encoder writes (params_bad); random garbage never decodes. The session record's blob, too: truncations,
 * flips and byte counts that wrap (session_records). */
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "tk.h"

#include <math.h>

#define PAD 4096

static uint8_t *good_page(kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t P, uint32_t T,
                          size_t *len_p)
{
    kvp_page_params_t p = tk_params(c, H, D, P);
    size_t            n = (size_t)T * H * D, cap = kvp_page_max_bytes(&p);
    float            *k = malloc(n * 4), *v = malloc(n * 4);
    uint8_t          *page = calloc(1, cap + PAD);
    tk_rng_t          rng = {5};

    for (size_t i = 0; i < n; i++) {
        k[i] = tk_gauss(&rng);
        v[i] = tk_gauss(&rng);
    }
    EXPECT(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, T, page, cap, len_p) == KVP_OK, "encode");
    free(k);
    free(v);
    return page;
}

static int decodes(const uint8_t *page, size_t len, float *buf)
{
    return kvp_page_decode(page, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, buf, buf, NULL) == KVP_OK;
}


typedef struct {
    const char *what;
    int         off, size;
    uint32_t    val;
} mut_t;

static void mutations(kvp_codec_id_t c, uint32_t H, uint32_t D, uint32_t P, uint32_t T,
                      const mut_t *m, size_t nm)
{
    size_t   len;
    uint8_t *good = good_page(c, H, D, P, T, &len);
    uint8_t *page = malloc(len + PAD);
    float   *buf  = malloc((size_t)P * H * D * 4 + 64);

    EXPECT(kvp_page_parse(good, len, NULL) == KVP_OK, "good page rejected");
    EXPECT(decodes(good, len, buf), "good page does not decode");
    for (size_t i = 0; i < nm; i++) {
        kvp_status_t st;

        memcpy(page, good, len + PAD);
        if (m[i].size == 1) {
            page[m[i].off] = (uint8_t)m[i].val;
        } else if (m[i].size == 2) {
            kvp_st16(page + m[i].off, m[i].val);
        } else {
            kvp_st32(page + m[i].off, m[i].val);
        }
        if ((uint32_t)(page[48] | page[49] << 8 | page[50] << 16 | (uint32_t)page[51] << 24) <=
            len - 64 + PAD) {
            kvp_page_seal(page); /* a valid CRC: the field check itself must catch it */
        }
        st = kvp_page_parse(page, len, NULL);
        EXPECT(st == KVP_ERR_BAD_PAGE, "%s/%s: parse gave %s", kvp_codec_name(c), m[i].what,
               kvp_status_name(st));
        EXPECT(!decodes(page, len, buf), "%s/%s: bad page decoded", kvp_codec_name(c), m[i].what);
    }
    free(good);
    free(page);
    free(buf);
}

static void truncations_and_flips(kvp_codec_id_t c)
{
    size_t   len;
    uint8_t *good = good_page(c, 2, 32, 32, 20, &len);
    uint8_t *page = malloc(len + 1);
    float   *buf  = malloc(32 * 2 * 32 * 4);

    for (size_t l = 0; l < len; l++) {
        EXPECT(kvp_page_parse(good, l, NULL) == KVP_ERR_BAD_PAGE, "truncated to %zu accepted", l);
        EXPECT(!decodes(good, l, buf), "truncated page decoded");
    }
    memcpy(page, good, len);
    page[len] = 0;
    EXPECT(kvp_page_parse(page, len + 1, NULL) == KVP_ERR_BAD_PAGE, "trailing byte accepted");
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            kvp_status_t st;

            memcpy(page, good, len);
            page[i] ^= (uint8_t)(1u << bit);
            st = kvp_page_parse(page, len, NULL);
            if (st == KVP_OK || decodes(page, len, buf)) {
                EXPECT(0, "%s: flip byte %zu bit %d accepted", kvp_codec_name(c), i, bit);
                i = len;
                break;
            }
        }
    }
    EXPECT(kvp_page_parse(NULL, 64, NULL) == KVP_ERR_BAD_PAGE, "NULL page");
    free(good);
    free(page);
    free(buf);
}

static void garbage(void)
{
    tk_rng_t rng = {77};
    uint8_t *buf = malloc(1 << 16);
    float   *out = malloc(1 << 22);

    for (int it = 0; it < 20000; it++) {
        size_t len = tk_range(&rng, 0, 1 << 12);

        for (size_t i = 0; i < len; i++) {
            buf[i] = (uint8_t)tk_next(&rng);
        }
        if (len >= 8 && (it & 1)) { /* plausible magic and version */
            kvp_st32(buf, KVP_PAGE_MAGIC);
            kvp_st16(buf + 4, 1);
            buf[6] = (uint8_t)tk_range(&rng, 1, 6);
        }
        if (len >= 64 && (it % 4) == 1) {
            kvp_st32(buf + 48, (uint32_t)tk_range(&rng, 0, (uint32_t)(len - 64)));
            kvp_page_seal(buf); /* seal trusts payload_len: keep it inside the buffer */
        }
        EXPECT(kvp_page_decode(buf, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, out, out, NULL) != KVP_OK,
              "garbage of %zu bytes decoded", len);
    }
    free(buf);
    free(out);
}

/* A page with the 2 or 4 bytes at payload offset off replaced by val and its CRC made to match. */
static uint8_t *page_set(kvp_codec_id_t c, size_t off, uint32_t val, int size, size_t *len_p)
{
    uint8_t *p = good_page(c, 2, 32, 32, 20, len_p);
    size_t   at = off == SIZE_MAX ? *len_p - 2 : KVP_PAGE_HDR_BYTES + off; /* MAX: the last fp16 */

    if (size == 2) {
        kvp_st16(p + at, (uint16_t)val);
    } else {
        kvp_st32(p + at, val);
    }
    kvp_page_seal(p);
    return p;
}

/* Stored parameters no encoder writes, with a valid CRC (payload tables: README "Page format";
 * 2 heads x 32, 20 of 32 tokens: K code runs of 5 bytes): an Inf or NaN fp16 scale or zero of
 * the 2-bit codecs, an oscar norm that is not finite and > 0 or past what H x D values within
 * +-65504 can have (a finite 1e38 decoded K to Inf and NaN), are refused by kvp_page_parse (so
 * by decode and attention too), while a norm at that bound parses and decodes finite; an fp16
 * page holding Inf/NaN parses (its values are not read there) and is refused by decode. */
static void params_bad(void)
{
    static const struct {
        kvp_codec_id_t c;
        size_t         off; /* payload offset of a parameter */
        int            size;
        uint32_t       val;
        const char    *what;
    } m[] = {
        {KVP_CODEC_KIVI, 320, 2, 0x7C00, "kivi first K scale Inf"},
        {KVP_CODEC_KIVI, SIZE_MAX, 2, 0x7E00, "kivi last V min NaN"},
        {KVP_CODEC_KIVI128, 320, 2, 0xFC00, "kivi128 first K scale -Inf"},
        {KVP_CODEC_NAIVE2, SIZE_MAX, 2, 0x7E00, "naive2 last V min NaN"},
        {KVP_CODEC_OSCAR, 0, 4, 0, "oscar norm 0"},
        {KVP_CODEC_OSCAR, 4, 4, 0xBF800000u, "oscar norm -1"},
        {KVP_CODEC_OSCAR, 76, 4, 0x7FC00000u, "oscar last norm NaN"},
        {KVP_CODEC_OSCAR, 8, 4, 0x7F800000u, "oscar norm Inf"},
        {KVP_CODEC_OSCAR, 12, 4, 0x7E967699u, "oscar norm 1e38 (decoded K Inf, then NaN)"},
        {KVP_CODEC_OSCAR, 16, 4, 0x49F42400u, "oscar norm 2e6 (past 2 x 65504 x sqrt(64))"},
        {KVP_CODEC_OSCAR, 400, 2, 0x7C00, "oscar first K scale Inf"},
        {KVP_CODEC_OSCAR, SIZE_MAX, 2, 0x7E00, "oscar last V zero NaN"},
        {KVP_CODEC_KVARN, 160, 2, 0x7C00, "kvarn first K scale Inf"},
        {KVP_CODEC_KVARN, SIZE_MAX, 2, 0x7E00, "kvarn last V B NaN"},
    };
    float   *buf = malloc((size_t)32 * 2 * 32 * 4);
    size_t   len;
    uint8_t *p;

    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        p = page_set(m[i].c, m[i].off, m[i].val, m[i].size, &len);
        EXPECT(kvp_page_parse(p, len, NULL) == KVP_ERR_BAD_PAGE, "%s: parse accepted", m[i].what);
        EXPECT(!decodes(p, len, buf), "%s: decoded", m[i].what);
        free(p);
    }
    p = page_set(KVP_CODEC_OSCAR, 12, 0x48FFE000u, 4, &len); /* 524032 = 65504 x sqrt(2 x 32) */
    EXPECT(kvp_page_parse(p, len, NULL) == KVP_OK, "oscar norm at the bound: parse refused");
    {
        float *k = malloc((size_t)2 * 20 * 2 * 32 * 4), *v = k + 20 * 2 * 32;

        CHECK(k != NULL);
        EXPECT(kvp_page_decode(p, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, k, v, NULL) == KVP_OK,
               "oscar norm at the bound: decode refused");
        for (size_t i = 0; i < (size_t)20 * 2 * 32; i++) {
            EXPECT(isfinite(k[i]), "oscar norm at the bound: K[%zu] = %g", i, (double)k[i]);
        }
        free(k);
    }
    free(p);
    p = page_set(KVP_CODEC_FP16, 2 * 100, 0x7E00, 2, &len); /* K value 100 NaN */
    EXPECT(kvp_page_parse(p, len, NULL) == KVP_OK, "fp16 NaN page: parse refused");
    EXPECT(kvp_page_decode(p, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL, buf, buf, NULL) ==
               KVP_ERR_BAD_PAGE,
           "fp16 NaN page: decode not refused");
    free(p);
    free(buf);
}

/* A record blob re-sealed (CRC32C trailer over the rest) after a field was changed. */
static void record_reseal(uint8_t *b, size_t len)
{
    kvp_st32(b + len - 4, kvp_crc32c(0, b, len - 4));
}

/* The session record (kvp_session_desc_unpack): a good one round-trips; every truncation, a
 * trailing byte and every bit flip is an error; and counts whose byte total wraps 64 bits to the
 * blob's length, re-sealed with a valid CRC (as a client could send), are refused before the keys
 * or tail are read (a tail of 2^64 - 12 beside one key in a 48-byte blob once passed the length
 * check and read the key past the blob's end). */
static void session_records(void)
{
    kvp_key128_t       keys[3] = {{1, 2}, {3, 4}, {5, 6}};
    uint8_t            tail[10] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
    kvp_session_desc_t d = {.layers = 2, .page_tokens = 32, .n_chunks = 3, .chunk_keys = keys,
                            .tail_tokens = 5, .n_tail = 2, .tail_len = sizeof(tail), .tail = tail};
    kvp_session_desc_t back;
    uint8_t           *blob, *b;
    size_t             len;

    CHECK_OK(kvp_session_desc_pack(&d, &blob, &len));
    CHECK_OK(kvp_session_desc_unpack(blob, len, &back));
    EXPECT(back.n_chunks == 3 && back.chunk_keys[2].hi == 6 && back.tail_len == sizeof(tail) &&
               memcmp(back.tail, tail, sizeof(tail)) == 0 && back.n_tail == 2,
           "record does not round-trip");
    kvp_session_desc_clear(&back);
    b = malloc(len + 1);
    CHECK(b != NULL);
    for (size_t l = 0; l <= len + 1; l++) {
        if (l == len) {
            continue;
        }
        memcpy(b, blob, len < l ? len : l);
        if (l > len) {
            b[len] = 0;
        }
        EXPECT(kvp_session_desc_unpack(b, l, &back) != KVP_OK, "record of %zu bytes accepted", l);
    }
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(b, blob, len);
            b[i] ^= (uint8_t)(1u << bit);
            EXPECT(kvp_session_desc_unpack(b, len, &back) != KVP_OK,
                   "record with byte %zu bit %d flipped accepted", i, bit);
        }
    }
    /* re-sealed (a valid CRC): version 257 (only its low byte used to be read), a reserved field
     * set, tail tokens without tail pages */
    {
        static const struct {
            size_t      at;
            int         size;
            uint32_t    val;
            const char *what;
        } bad[] = {{4, 2, 0x0101, "version 257"}, {6, 2, 1, "reserved at 6"},
                   {28, 4, 1, "reserved at 28"}, {20, 4, 0, "n_tail 2 with tail_tokens 0"}};

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            memcpy(b, blob, len);
            if (bad[i].size == 2) {
                kvp_st16(b + bad[i].at, (uint16_t)bad[i].val);
            } else {
                kvp_st32(b + bad[i].at, bad[i].val);
            }
            record_reseal(b, len);
            EXPECT(kvp_session_desc_unpack(b, len, &back) == KVP_ERR_BAD_PAGE,
                   "record with %s accepted", bad[i].what);
        }
    }
    free(b);
    kvp_free(blob);
    {
        /* header (40 bytes) + 8 bytes + CRC: one key cannot fit, tail_len wraps the sum to 48 */
        static const struct {
            uint32_t n_chunks;
            uint64_t tail_len;
        } wraps[] = {{1, UINT64_MAX - 11}, {1u << 28, (uint64_t)0 - (1ull << 32) + 4},
                     {0xFFFFFFFFu, (uint64_t)0 - 16ull * 0xFFFFFFFFu + 4}};
        uint8_t w[48];

        for (size_t i = 0; i < sizeof(wraps) / sizeof(wraps[0]); i++) {
            memset(w, 0, sizeof(w));
            kvp_st32(w, 0x5353564Bu); /* "KVSS" */
            w[4] = 1;
            kvp_st32(w + 8, 2);
            kvp_st32(w + 12, 32);
            kvp_st32(w + 16, wraps[i].n_chunks);
            kvp_st32(w + 24, 2);
            kvp_st64(w + 32, wraps[i].tail_len);
            record_reseal(w, sizeof(w));
            EXPECT(kvp_session_desc_unpack(w, sizeof(w), &back) == KVP_ERR_BAD_PAGE,
                   "record of %u keys and a %llu-byte tail in 48 bytes not refused",
                   wraps[i].n_chunks, (unsigned long long)wraps[i].tail_len);
        }
    }
}

int main(void)
{
    const mut_t common[] = {
        {"magic", 0, 4, 0x4750564C},     {"version 0", 4, 2, 0},
        {"version 2", 4, 2, 2},          {"codec 0", 6, 1, 0},
        {"codec 7", 6, 1, 7},            {"codec 255", 6, 1, 255},
        {"flags unknown", 7, 1, 0x20},   {"flags not partial", 7, 1, 0x00},
        {"valid 0", 14, 2, 0},           {"valid > capacity", 16, 2, 19},
        {"capacity 0", 16, 2, 0},        {"capacity > max", 16, 2, 5000},
        {"heads 0", 18, 2, 0},           {"heads > max", 18, 2, 300},
        {"heads other", 18, 2, 3},       {"head_dim 0", 20, 2, 0},
        {"head_dim > max", 20, 2, 2048}, {"head_dim other", 20, 2, 64},
        {"payload_len +1", 48, 4, 0},    {"payload_len huge", 48, 4, 0x7FFFFFFF},
        {"reserved", 60, 4, 1},          {"bits_k", 8, 1, 4},
        {"bits_v", 9, 1, 16},            {"group_k", 10, 2, 64},
        {"group_v", 12, 2, 8},           {"aux", 52, 4, 3},
        {"k rotated flag", 7, 1, 0x05},  {"v rotated flag", 7, 1, 0x06},
        {"group_k 0", 10, 2, 0},         {"group_v 0", 12, 2, 0},
        {"group_k 1", 10, 2, 1},         {"group_v 1", 12, 2, 1},
    };
    mut_t m[sizeof(common) / sizeof(common[0])];
    size_t len;
    uint8_t *p = good_page(KVP_CODEC_KIVI, 2, 32, 32, 20, &len);

    memcpy(m, common, sizeof(common));
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        if (strcmp(m[i].what, "payload_len +1") == 0) {
            m[i].val = (uint32_t)(len - 64 + 1);
        }
    }
    free(p);
    mutations(KVP_CODEC_KIVI, 2, 32, 32, 20, m, sizeof(m) / sizeof(m[0]));
    {
        const mut_t rot[] = {
            {"oscar no k rotated", 7, 1, 0x06}, {"oscar no v rotated", 7, 1, 0x05},
            {"oscar group_k", 10, 2, 128},      {"oscar aux", 52, 4, 8},
        };
        const mut_t kv[] = {
            {"kvarn aux 0", 52, 4, 0},          {"kvarn aux 65", 52, 4, 65},
            {"kvarn group_k", 10, 2, 32},       {"kvarn no k rotated", 7, 1, 0x06},
        };

        mutations(KVP_CODEC_OSCAR, 2, 32, 32, 20, rot, 4);
        mutations(KVP_CODEC_KVARN, 2, 32, 32, 20, kv, 4);
    }
    for (int c = KVP_CODEC_FP16; c < KVP_CODEC_MAX; c++) {
        truncations_and_flips((kvp_codec_id_t)c);
    }
    garbage();
    params_bad();
    session_records();
    return kvp_test_result("test_page");
}
