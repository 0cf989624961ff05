/* seeds.c - fuzz_seeds DIR: writes a seed corpus for each harness under DIR/<harness>/, made
 * here from kvpack's own encoders (nothing is committed): packed requests and replies of every
 * op and an NCCL link message of each kind (wire), a page of every codec in full and partial geometries (page), session records with
 * and without keys and tails (record), gateway bodies of each kind the etcd client reads (etcd),
 * the tiny GGUF model of tests/model/tiny_gguf.h (gguf), Mooncake-format trace lines (trace)
 * llama2.c tokenizer files with a prompt (tok), HTTP requests to kvpackd --http (http) and .kvd
 * dumps (kvd). The replay test and a libFuzzer run both start from these. */
#include "fuzz.h"
#include "http.h"      /* cluster */
#include "tiny_gguf.h" /* tests/model */
#include "tk.h"        /* tests/kernels: page params, RNG */

#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/wire.h"

#include <errno.h>
#include <sys/stat.h>

static char root[512];
static int  nseeds;

static void seed(const char *harness, uint8_t prefix0, int with_len, uint64_t data_len,
                 const void *body, size_t len)
{
    char  path[700];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, harness);
    CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
    snprintf(path, sizeof(path), "%s/%s/seed%03d", root, harness, nseeds++);
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (prefix0 != 0xFF) {
        fputc(prefix0, f);
    }
    if (with_len) {
        uint8_t l[4];

        kvp_st32(l, (uint32_t)data_len);
        CHECK(fwrite(l, 1, 4, f) == 4);
    }
    CHECK(len == 0 || fwrite(body, 1, len, f) == len);
    CHECK(fclose(f) == 0);
}

static void wire_seeds(void)
{
    uint32_t       lens[3] = {1088, 1088, 2112};
    kvp_key128_t   keys[2] = {{1, 2}, {3, 4}};
    uint32_t       ids[4]  = {5, 6, 7, 8};
    kvp_wire_req_t r[11];
    kvp_wire_rep_t p[6];
    kvp_wire_session_t sess = {.ns = 7, .sid = "s1", .layers = 2, .page_tokens = 32,
                               .n_chunks = 1, .codec = 2, .heads = 2, .head_dim = 32,
                               .where = KVP_WIRE_WHERE_DRAM, .bytes = 4096, .version = 9};
    uint8_t       *buf;
    size_t         len;

    memset(r, 0, sizeof(r));
    for (int i = 0; i < 11; i++) {
        r[i].op     = (kvp_wire_op_t)(i + 1);
        r[i].req_id = 100 + (uint64_t)i;
        r[i].ns     = 7;
        snprintf(r[i].sid, sizeof(r[i].sid), "session-%d", i);
    }
    r[0].n_pages = 3, r[0].page_lens = lens;                           /* PUT_PAGES */
    r[1].n_pages = 2, r[1].page_lens = lens, r[1].record_len = 84;     /* PUT_SESSION */
    r[1].version = 12;
    r[2].max_bytes = 1 << 20;                                          /* GET_SESSION */
    r[3].n_keys = 2, r[3].keys = keys, r[3].layers = 2, r[3].max_bytes = 1 << 20; /* GET_PAGES */
    r[4].n_keys = 2, r[4].keys = keys, r[4].layers = 2;                /* LOOKUP */
    r[6].sid[0] = '\0', r[6].ns = 0;                                  /* STAT */
    r[7].version = 3;                                                  /* DELETE */
    r[8].limit = 100, r[8].deleted = 1;                                /* LIST */
    r[9].append = (kvp_wire_append_t){.codec = 2, .fingerprint = 99, .layers = 2, .heads = 2,
                                      .head_dim = 32, .page_tokens = 32, .dtype = 1, .ntok = 2,
                                      .n_ids = 4, .ids = ids};         /* APPEND */
    for (int i = 0; i < 11; i++) {
        uint64_t data = i == 0 ? 1088 + 1088 + 2112 : i == 1 ? 1088 + 1088 + 84
                      : i == 9 ? 2ull * 2 * 2 * 2 * 32 * 2 : 0;

        if (kvp_wire_req_pack(&r[i], &buf, &len) == KVP_OK) {
            seed("wire", 0, 1, data, buf, len);
            kvp_free(buf);
        } else {
            fprintf(stderr, "fuzz_seeds: %s request does not pack\n", kvp_wire_op_name(r[i].op));
            exit(1);
        }
    }
    memset(p, 0, sizeof(p));
    p[0].op = KVP_WIRE_OP_PUT_PAGES, p[0].accepted = 3;
    p[1].op = KVP_WIRE_OP_GET_SESSION, p[1].record_len = 84, p[1].n_pages = 2,
    p[1].page_lens = lens, p[1].version = 12;
    p[2].op = KVP_WIRE_OP_GET_PAGES, p[2].n_pages = 3, p[2].page_lens = lens;
    p[3].op = KVP_WIRE_OP_STAT, p[3].stat.dram_bytes = 1 << 20, p[3].stat.sessions = 4;
    p[4].op = KVP_WIRE_OP_LIST, p[4].n_sessions = 1, p[4].sessions = &sess, p[4].more = 1;
    p[5].op = KVP_WIRE_OP_LOOKUP, p[5].status = KVP_ERR_NOT_FOUND;
    snprintf(p[5].message, sizeof(p[5].message), "no such session");
    for (int i = 0; i < 6; i++) {
        uint64_t data = i == 1 ? 84 + 1088 + 1088 : i == 2 ? 1088 + 1088 + 2112 : 0;

        p[i].req_id = 200 + (uint64_t)i;
        if (kvp_wire_rep_pack(&p[i], &buf, &len) == KVP_OK) {
            seed("wire", 1, 1, data, buf, len);
            kvp_free(buf);
        } else {
            fprintf(stderr, "fuzz_seeds: %s reply does not pack\n", kvp_wire_op_name(p[i].op));
            exit(1);
        }
    }
}

/* one NCCL link message of each kind (prefix 2) */
static void link_seeds(void)
{
    uint32_t        lens[3] = {1088, 64, 2112};
    kvp_status_t    st[3]   = {KVP_OK, KVP_ERR_CORRUPT, KVP_ERR_BAD_PAGE};
    kvp_wire_link_t m;
    uint8_t        *buf;
    size_t          len;

    for (int k = KVP_WIRE_LINK_HELLO; k <= KVP_WIRE_LINK_CLOSE; k++) {
        memset(&m, 0, sizeof(m));
        m.kind         = (kvp_wire_link_kind_t)k;
        m.nccl_version = 22809;
        m.batch_id     = 9;
        memset(m.unique_id, 0x33, sizeof(m.unique_id));
        m.device.index = k == KVP_WIRE_LINK_HELLO ? 0 : -1;
        snprintf(m.device.name, sizeof(m.device.name), "gpu");
        snprintf(m.device.why, sizeof(m.device.why), "%s", k == KVP_WIRE_LINK_HELLO ? "" : "none");
        m.status = k == KVP_WIRE_LINK_ACK     ? KVP_ERR_CORRUPT
                   : k == KVP_WIRE_LINK_CLOSE ? KVP_ERR_TIMEOUT
                                              : KVP_OK;
        snprintf(m.message, sizeof(m.message), "why");
        if (k == KVP_WIRE_LINK_BATCH || k == KVP_WIRE_LINK_ACK) {
            m.n_pages     = 3;
            m.page_lens   = lens;
            m.page_status = st;
        }
        if (kvp_wire_link_pack(&m, &buf, &len) != KVP_OK) {
            fprintf(stderr, "fuzz_seeds: link %s does not pack\n", kvp_wire_link_kind_name(m.kind));
            exit(1);
        }
        seed("wire", 2, 1, 0, buf, len);
        kvp_free(buf);
    }
}

static void page_seeds(void)
{
    static const uint32_t geo[][4] = {{2, 32, 32, 32}, {1, 8, 32, 5}, {2, 128, 128, 130}};
    tk_rng_t              rng      = {3};

    for (int c = KVP_CODEC_FP16; c < KVP_CODEC_MAX; c++) {
        for (size_t g = 0; g < sizeof(geo) / sizeof(geo[0]); g++) {
            kvp_page_params_t pp = tk_params((kvp_codec_id_t)c, geo[g][0], geo[g][1], geo[g][2]);
            uint32_t          ntok = geo[g][3] < geo[g][2] ? geo[g][3] : geo[g][2];
            size_t            n = (size_t)ntok * geo[g][0] * geo[g][1], cap, len;
            float            *k, *v;
            uint8_t          *out;

            if (kvp_codec_check(&pp) != KVP_OK) {
                continue; /* a geometry this codec does not take */
            }
            cap = kvp_page_max_bytes(&pp);
            k   = malloc(n * sizeof(float));
            v   = malloc(n * sizeof(float));
            out = malloc(cap);
            CHECK(k != NULL && v != NULL && out != NULL);
            for (size_t i = 0; i < n; i++) {
                k[i] = tk_gauss(&rng) * (i % 17 == 0 ? 20.0f : 1.0f);
                v[i] = tk_gauss(&rng);
            }
            CHECK_OK(kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, ntok, out, cap, &len));
            seed("page", 0xFF, 0, 0, out, len);
            free(out);
            free(v);
            free(k);
        }
    }
}

static void record_seeds(void)
{
    kvp_key128_t       keys[3] = {{1, 2}, {3, 4}, {5, 6}};
    uint8_t            tail[64];
    kvp_session_desc_t d[3] = {
        {.layers = 2, .page_tokens = 32, .n_chunks = 3, .chunk_keys = keys},
        {.layers = 2, .page_tokens = 32, .n_chunks = 1, .chunk_keys = keys, .tail_tokens = 3,
         .n_tail = 2, .tail_len = sizeof(tail), .tail = tail},
        {.layers = 1, .page_tokens = 128, .tail_tokens = 1, .n_tail = 1, .tail_len = 16,
         .tail = tail},
    };

    memset(tail, 0xA5, sizeof(tail));
    for (int i = 0; i < 3; i++) {
        uint8_t *blob;
        size_t   len;

        CHECK_OK(kvp_session_desc_pack(&d[i], &blob, &len));
        seed("record", 0xFF, 0, 0, blob, len);
        kvp_free(blob);
    }
}

static void etcd_seeds(void)
{
    /* byte 0 picks the parser (fuzz_etcd.c): 0 lease, 1 range, 2 error, 3 watch, 4 member,
     * 5 base64, 6 the stream splitter */
    static const struct {
        uint8_t     which;
        const char *body;
    } s[] = {
        {0, "{\"header\":{\"revision\":\"5\"},\"ID\":\"7668682553041602564\",\"TTL\":\"10\"}"},
        {0, "{\"result\":{\"header\":{},\"ID\":\"42\",\"TTL\":\"3\"}}"},
        {1, "{\"header\":{\"revision\":\"9\"},\"kvs\":[{\"key\":\"L2t2cGFjay9ub2Rlcy9hOjE=\","
            "\"value\":\"eyJ4IjoxfQ==\",\"lease\":\"42\",\"mod_revision\":\"8\"}],\"count\":\"1\"}"},
        {2, "{\"error\":\"etcdserver: requested lease not found\",\"code\":5,"
            "\"message\":\"etcdserver: requested lease not found\"}"},
        {3, "{\"result\":{\"header\":{\"revision\":\"12\"},\"created\":true}}"},
        {3, "{\"result\":{\"header\":{\"revision\":\"13\"},\"events\":[{\"kv\":{\"key\":"
            "\"L2t2cGFjay9ub2Rlcy9hOjE=\",\"value\":\"eyJwaWQiOjF9\",\"mod_revision\":\"13\"}},"
            "{\"type\":\"DELETE\",\"kv\":{\"key\":\"L2t2cGFjay9ub2Rlcy9iOjI=\","
            "\"mod_revision\":\"13\"}}]}}"},
        {3, "{\"result\":{\"header\":{},\"canceled\":true,\"compact_revision\":\"4\","
            "\"cancel_reason\":\"compacted\"}}"},
        {4, "{\"pid\":1234,\"since\":1700000000,\"data_dir\":\"/var/lib/kvpack\"}"},
        {5, "L2t2cGFjay9ub2Rlcy9hOjE="},
        {6, "{\"result\":{\"created\":true}}\n{\"result\":{\"events\":[]}}\n"},
    };

    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
        seed("etcd", s[i].which, 0, 0, s[i].body, strlen(s[i].body));
    }
}

static void trace_seeds(void)
{
    /* Mooncake-format lines written here: prefixes shared across requests, unknown keys, a
     * nested value to skip, and a one-line trace */
    static const char *t[] = {
        "{\"timestamp\": 0, \"input_length\": 1200, \"output_length\": 40, "
        "\"hash_ids\": [0, 1, 2]}\n"
        "{\"timestamp\": 15, \"input_length\": 1800, \"output_length\": 12, "
        "\"hash_ids\": [0, 1, 2, 3]}\n"
        "{\"timestamp\": 40.5, \"input_length\": 512, \"hash_ids\": [9]}\n",
        "{\"hash_ids\": [7, 8], \"meta\": {\"a\": [1, \"x\\\"y\", null]}, "
        "\"input_length\": 700, \"timestamp\": 3}\n\n"
        "  {\"timestamp\": 4, \"input_length\": 1, \"hash_ids\": [7], \"flag\": true}\n",
        "{\"timestamp\": 1e3, \"input_length\": 16777216, \"hash_ids\": [5]}\n",
        /* refused: a length no uint32 holds (it used to be converted before the range check:
         * undefined behaviour, UBSan's "outside the range of representable values") */
        "{\"timestamp\": 0, \"input_length\": 1e300, \"hash_ids\": []}\n",
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        seed("trace", 0xFF, 0, 0, t[i], strlen(t[i]));
    }
}

static void gguf_seeds(void)
{
    buf_t b = {0};

    tiny_gguf(&b, 0, 32);
    seed("gguf", 0xFF, 0, 0, b.p, b.n);
    free(b.p);
}

/* A llama2.c tokenizer file (int32 max length, then per token f32 score, i32 length, bytes): the
 * three specials, the 256 byte-fallback tokens <0xNN>, then a few merges; the first vocab of them,
 * behind the harness's prefix (u16 vocabulary size, u8 text length, the text). */
static void tok_seed(uint16_t vocab, const char *text, int bos_nul)
{
    static const char *merges[] = {" t", "he", " the", "a", "b", "ab", " c", "\xc3\xa9"};
    uint8_t           *b = malloc(65536);
    size_t             n = 0, tl = strlen(text);
    int32_t            maxlen = 7;

    CHECK(b != NULL && tl < 256);
    b[n++] = (uint8_t)(vocab - 1), b[n++] = (uint8_t)((vocab - 1) >> 8), b[n++] = (uint8_t)tl;
    memcpy(b + n, text, tl), n += tl;
    memcpy(b + n, &maxlen, 4), n += 4;
    for (uint32_t i = 0; i < vocab; i++) {
        char    piece[16];
        float   score = i < 259 ? 0.0f : -(float)i;
        int32_t len;

        if (i < 3) {
            snprintf(piece, sizeof(piece), "%s", (const char *[]){"<unk>", "\n<s>\n", "\n</s>\n"}[i]);
        } else if (i < 259) {
            snprintf(piece, sizeof(piece), "<0x%02X>", i - 3);
        } else {
            snprintf(piece, sizeof(piece), "%s", merges[(i - 259) % 8]);
        }
        len = (int32_t)strlen(piece);
        if (i == 1 && bos_nul) { /* "\n<\0>\n": printed by its length, not up to the NUL */
            memcpy(piece, "\n<\0>\n", 6), len = 5;
        }
        memcpy(b + n, &score, 4), n += 4;
        memcpy(b + n, &len, 4), n += 4;
        memcpy(b + n, piece, (size_t)len), n += (size_t)len;
    }
    seed("tok", 0xFF, 0, 0, b, n);
    free(b);
}

static void tok_seeds(void)
{
    tok_seed(267, "the cab \xc3\xa9\xff!", 0);
    tok_seed(259, "", 0);
    /* refused: a vocabulary without llama2.c's 256 byte tokens at ids 3..258 (its byte fallback
     * used to hand out id byte + 3 past the vocabulary) */
    tok_seed(5, "the", 0);
    /* BOS holds a NUL: its printed bytes used to be copied up to the NUL, then read to its length */
    tok_seed(262, "ab", 1);
}

static void http_seeds(void)
{
    static const char *req[] = {
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9100\r\nUser-Agent: prom\r\n\r\n",
        "HEAD /health?verbose=1 HTTP/1.0\n\n",
        "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", /* 405 */
        "GET /a b HTTP/1.1\r\n\r\n",                              /* 400 */
        "GET /health HTTP/1.1\r\nHost: x\r\n",                    /* waits for the blank line */
        "\r\n\r\nGET /health HTTP/1.1\r\n\r\n",                      /* empty lines first: 200 */
    };
    char *b = malloc(KVP_HTTP_MAX_REQ + 1);
    size_t n;

    CHECK(b != NULL);
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
        seed("http", 0xFF, 0, 0, req[i], strlen(req[i]));
    }
    /* a request line of the longest accepted length, its "\r\n" arriving after it */
    n = (size_t)snprintf(b, KVP_HTTP_MAX_REQ, "GET /");
    memset(b + n, 'x', KVP_HTTP_MAX_LINE - 9 - n), n = KVP_HTTP_MAX_LINE - 9;
    n += (size_t)snprintf(b + n, 64, " HTTP/1.1\r\n\r\n");
    seed("http", 0xFF, 0, 0, b, n);
    /* headers that fill the buffer without a blank line (431) */
    n = (size_t)snprintf(b, KVP_HTTP_MAX_REQ, "GET / HTTP/1.1\r\n");
    while (n + 16 < KVP_HTTP_MAX_REQ) {
        n += (size_t)snprintf(b + n, 17, "X-Pad: 0123456\r\n");
    }
    seed("http", 0xFF, 0, 0, b, KVP_HTTP_MAX_REQ);
    free(b);
}

/* .kvd dumps: a small one, one holding a NaN and a value past fp16, one shorter than its header
 * promises, and a header alone. */
static void kvd_seeds(void)
{
    uint8_t b[24 + 8 * 24];
    float   x[48];

    kvp_st32(b, 0x3144564Bu), kvp_st32(b + 4, 1);
    kvp_st32(b + 8, 1), kvp_st32(b + 12, 3), kvp_st32(b + 16, 2), kvp_st32(b + 20, 4);
    for (int i = 0; i < 48; i++) {
        x[i] = (float)(i - 24) / 8.0f;
    }
    memcpy(b + 24, x, sizeof(x));
    seed("kvd", 0xFF, 0, 0, b, sizeof(b));
    x[5] = NAN, x[30] = 1e30f;
    memcpy(b + 24, x, sizeof(x));
    seed("kvd", 0xFF, 0, 0, b, sizeof(b));
    seed("kvd", 0xFF, 0, 0, b, sizeof(b) - 4);
    seed("kvd", 0xFF, 0, 0, b, 24);
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: fuzz_seeds DIR\n  writes a seed corpus per harness under DIR/<harness>/ "
               "(wire, page, record, etcd, gguf, trace, tok, http, kvd)\n");
        return argc == 2 ? 0 : 2;
    }
    snprintf(root, sizeof(root), "%s", argv[1]);
    CHECK(mkdir(root, 0755) == 0 || errno == EEXIST);
    wire_seeds();
    link_seeds();
    page_seeds();
    record_seeds();
    etcd_seeds();
    gguf_seeds();
    trace_seeds();
    tok_seeds();
    http_seeds();
    kvd_seeds();
    printf("fuzz_seeds: %d seeds under %s\n", nseeds, root);
    return 0;
}
