/* test_wrong_codec.c - the store refuses a page or record under the wrong codec or geometry.
 * A namespace's profile (codec, rotation flags, H, D, P from its first sealed page, layers from
 * its first record) is enforced on page puts, session puts (record, tails, named pages) and
 * appends with KVP_ERR_WRONG_CODEC; a refused put loses and changes nothing; the profile
 * survives a reopen (loaded from meta, no page read) and other namespaces are independent.
 * fp16 sink pages may lead a session in a codec namespace (sinks()). */
#include "store_test_util.h"

#include "kvpack/log.h"

static const tgeom_t G = {4, 2, 64, 16}; /* layers, heads, head_dim, P */
#define NS 0xC0DEC0DEull

/* A page of codec for (key, layer) of geometry (heads, dim, P) with random K/V (seeded by key). */
static uint8_t *enc_page(kvp_codec_id_t codec, uint32_t heads, uint32_t dim, uint32_t P,
                         kvp_key128_t key, uint32_t layer, uint32_t ntok, uint32_t flags,
                         size_t *len_p)
{
    kvp_page_params_t pp   = {codec, heads, dim, P, layer, 0, key, flags, 0};
    size_t            n    = (size_t)ntok * heads * dim, cap = kvp_page_max_bytes(&pp);
    float            *k    = kvp_malloc(n * sizeof(float), "test k");
    float            *v    = kvp_malloc(n * sizeof(float), "test v");
    uint8_t          *out  = kvp_malloc(cap ? cap : 1, "test page");
    uint64_t          seed = key.lo ^ key.hi ^ ((uint64_t)layer << 32);

    CHECK(k != NULL && v != NULL && out != NULL && cap > 0);
    for (size_t i = 0; i < n; i++) {
        k[i] = (float)((int64_t)(kvp_splitmix64(&seed) % 2001) - 1000) / 300.0f;
        v[i] = (float)((int64_t)(kvp_splitmix64(&seed) % 2001) - 1000) / 300.0f;
    }
    CHECK_OK(kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, ntok, out, cap, len_p));
    kvp_free(k);
    kvp_free(v);
    return out;
}

/* A kivi session of G: n_chunks sealed chunks (pages[c * layers + l]) + a 5-token fp16 tail. */
typedef struct {
    kvp_session_desc_t d;
    uint8_t           *pages[8 * 4];
    size_t             lens[8 * 4];
} ksess_t;

static void ksess_make(ksess_t *ks, uint64_t seed, uint32_t n_chunks)
{
    size_t off = 0;

    memset(ks, 0, sizeof(*ks));
    t_session(&G, seed, 0, seed, n_chunks, 0, &ks->d); /* keys only */
    for (uint32_t c = 0; c < n_chunks; c++) {
        for (uint32_t l = 0; l < G.layers; l++) {
            ks->pages[c * G.layers + l] = enc_page(KVP_CODEC_KIVI, G.heads, G.head_dim,
                                                   G.page_tokens, ks->d.chunk_keys[c], l,
                                                   G.page_tokens, 0, &ks->lens[c * G.layers + l]);
        }
    }
    ks->d.tail_tokens = 5;
    ks->d.n_tail      = G.layers;
    for (uint32_t l = 0; l < G.layers; l++) {
        kvp_key128_t tk = {seed, 77};
        size_t       len;
        uint8_t     *p  = enc_page(KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens, tk, l, 5,
                                   KVP_PAGE_F_TAIL, &len);

        ks->d.tail = kvp_realloc(ks->d.tail, off + len, "test tail");
        CHECK(ks->d.tail != NULL);
        memcpy(ks->d.tail + off, p, len);
        off += len;
        kvp_free(p);
    }
    ks->d.tail_len = off;
}

static void ksess_free(ksess_t *ks)
{
    for (uint32_t i = 0; i < ks->d.n_chunks * G.layers; i++) {
        kvp_free(ks->pages[i]);
    }
    kvp_session_desc_clear(&ks->d);
}

static kvp_status_t ksess_put(kvp_store_h st, uint64_t ns, const char *sid, const ksess_t *ks)
{
    for (uint32_t i = 0; i < ks->d.n_chunks * G.layers; i++) {
        kvp_status_t s = kvp_store_page_put(st, ns, ks->pages[i], ks->lens[i]);

        if (s != KVP_OK) {
            return s;
        }
    }
    return kvp_store_session_put(st, ns, sid, &ks->d);
}

/* The session is there, byte-identical (record, tail, every page), and fully looked up. */
static void ksess_check(kvp_store_h st, uint64_t ns, const char *sid, const ksess_t *ks)
{
    kvp_session_desc_t got;
    uint32_t           hit;

    CHECK_OK(kvp_store_session_get(st, ns, sid, &got));
    CHECK(got.layers == ks->d.layers && got.n_chunks == ks->d.n_chunks);
    CHECK(got.page_tokens == ks->d.page_tokens && got.tail_len == ks->d.tail_len);
    CHECK(memcmp(got.chunk_keys, ks->d.chunk_keys, ks->d.n_chunks * sizeof(kvp_key128_t)) == 0);
    CHECK(memcmp(got.tail, ks->d.tail, ks->d.tail_len) == 0);
    kvp_session_desc_clear(&got);
    for (uint32_t i = 0; i < ks->d.n_chunks * G.layers; i++) {
        kvp_page_ref_h ref;
        size_t         len;
        const void    *data;

        CHECK_OK(kvp_store_page_get(st, ns, ks->d.chunk_keys[i / G.layers], i % G.layers, &ref));
        data = kvp_page_ref_data(ref, &len);
        CHECK(len == ks->lens[i] && memcmp(data, ks->pages[i], len) == 0);
        kvp_page_ref_release(ref);
    }
    CHECK_OK(kvp_store_lookup(st, ns, ks->d.chunk_keys, ks->d.n_chunks, G.layers, &hit));
    CHECK(hit == ks->d.n_chunks);
}

static kvp_store_h open_store(const char *dir)
{
    return t_open_store(dir, 16u << 20, KVP_DURABILITY_WRITE_THROUGH, 0, 0);
}

/* Every kind of wrong page, record and append in NS (a kivi namespace); expects each refused. */
static void refuse_all(kvp_store_h st, const ksess_t *a, int reopened)
{
    kvp_key128_t       fresh = {0xF00D, 0xBEEF}, k0 = a->d.chunk_keys[0];
    kvp_session_desc_t bad;
    uint8_t           *p;
    size_t             len;
    kvp_store_stats_t  before, after;

    kvp_store_stats(st, &before);
    /* another codec: a fresh key, and the key of an existing kivi page */
    p = enc_page(KVP_CODEC_OSCAR, G.heads, G.head_dim, G.page_tokens, fresh, 0, G.page_tokens, 0,
                 &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    p = enc_page(KVP_CODEC_OSCAR, G.heads, G.head_dim, G.page_tokens, k0, 1, G.page_tokens, 0,
                 &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    p = enc_page(KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens, fresh, 0, G.page_tokens, 0,
                 &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC); /* sealed fp16 */
    kvp_free(p);
    /* the same codec with another rotation flag, geometry, P, or a layer past the record's */
    p = enc_page(KVP_CODEC_KIVI, G.heads, G.head_dim, G.page_tokens, fresh, 0, G.page_tokens,
                 KVP_PAGE_F_V_PREROT, &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    p = enc_page(KVP_CODEC_KIVI, G.heads * 2, G.head_dim, G.page_tokens, fresh, 0, G.page_tokens,
                 0, &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    p = enc_page(KVP_CODEC_KIVI, G.heads, G.head_dim / 2, G.page_tokens, fresh, 0, G.page_tokens,
                 0, &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    p = enc_page(KVP_CODEC_KIVI, G.heads, G.head_dim, G.page_tokens * 2, fresh, 0, G.page_tokens,
                 0, &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    p = enc_page(KVP_CODEC_KIVI, G.heads, G.head_dim, G.page_tokens, fresh, G.layers,
                 G.page_tokens, 0, &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    /* tail pages: fp16 of the namespace's geometry only */
    p = enc_page(KVP_CODEC_KIVI, G.heads, G.head_dim, G.page_tokens, fresh, 0, 5, KVP_PAGE_F_TAIL,
                 &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    p = enc_page(KVP_CODEC_FP16, G.heads, G.head_dim * 2, G.page_tokens, fresh, 0, 5,
                 KVP_PAGE_F_TAIL, &len);
    CHECK_ST(kvp_store_page_put(st, NS, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);

    /* records: fewer layers than the namespace (its pages exist for those layers) */
    CHECK_OK(kvp_session_desc_copy(&a->d, &bad));
    kvp_free(bad.tail);
    bad.tail = NULL, bad.tail_len = 0, bad.n_tail = 0, bad.tail_tokens = 0;
    bad.layers = G.layers - 1;
    CHECK_ST(kvp_store_session_put(st, NS, "a", &bad), KVP_ERR_WRONG_CODEC);
    CHECK_ST(kvp_store_session_put(st, NS, "new", &bad), KVP_ERR_WRONG_CODEC);
    kvp_session_desc_clear(&bad);
    /* a tail of another geometry (consistent within itself), and one whose P is not the record's */
    {
        kvp_session_desc_t tb;
        size_t             off = 0;

        CHECK_OK(kvp_session_desc_copy(&a->d, &tb));
        kvp_free(tb.tail);
        tb.tail = NULL;
        for (uint32_t l = 0; l < G.layers; l++) {
            kvp_key128_t tk = {1, 2};

            p = enc_page(KVP_CODEC_FP16, G.heads * 2, G.head_dim, G.page_tokens, tk, l, 5,
                         KVP_PAGE_F_TAIL, &len);
            tb.tail = kvp_realloc(tb.tail, off + len, "test tail");
            memcpy(tb.tail + off, p, len);
            off += len;
            kvp_free(p);
        }
        tb.tail_len = off;
        CHECK_ST(kvp_store_session_put(st, NS, "a", &tb), KVP_ERR_WRONG_CODEC);
        tb.page_tokens = G.page_tokens * 2; /* the tail's capacity no longer matches the record */
        CHECK_ST(kvp_store_session_put(st, NS, "a", &tb), KVP_ERR_WRONG_CODEC);
        kvp_session_desc_clear(&tb);
    }
    /* a record whose chunk is made of tail pages put on their own */
    if (!reopened) {
        kvp_session_desc_t tc = {0};
        kvp_key128_t       tk = {0x7A11, 0x7A11};

        for (uint32_t l = 0; l < G.layers; l++) {
            p = enc_page(KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens, tk, l, 5,
                         KVP_PAGE_F_TAIL, &len);
            CHECK_OK(kvp_store_page_put(st, NS, p, len)); /* a tail page alone is fine */
            kvp_free(p);
        }
        tc.layers      = G.layers;
        tc.page_tokens = G.page_tokens;
        tc.n_chunks    = 1;
        tc.chunk_keys  = &tk;
        CHECK_ST(kvp_store_session_put(st, NS, "tails", &tc), KVP_ERR_WRONG_CODEC);
    }
    /* appends under another codec or geometry */
    {
        size_t             n  = (size_t)G.layers * 3 * G.heads * G.head_dim;
        float             *kv = kvp_calloc(n, sizeof(float), "test kv");
        uint32_t           ids[3] = {1, 2, 3};
        kvp_store_append_t ap = {0};

        ap.codec = KVP_CODEC_OSCAR, ap.layers = G.layers, ap.heads = G.heads;
        ap.head_dim = G.head_dim, ap.page_tokens = G.page_tokens, ap.dtype = KVP_DTYPE_F32;
        ap.k = kv, ap.v = kv, ap.ntok = 3, ap.ids = ids, ap.n_ids = 3;
        CHECK_ST(kvp_store_session_append(st, NS, "app", &ap, NULL), KVP_ERR_WRONG_CODEC);
        ap.codec = KVP_CODEC_KIVI, ap.heads = 1;
        CHECK_ST(kvp_store_session_append(st, NS, "app", &ap, NULL), KVP_ERR_WRONG_CODEC);
        ap.heads = G.heads, ap.layers = G.layers + 1;
        kvp_free(kv);
        kv = kvp_calloc(n / G.layers * (G.layers + 1), sizeof(float), "test kv");
        ap.k = kv, ap.v = kv;
        CHECK_ST(kvp_store_session_append(st, NS, "app", &ap, NULL), KVP_ERR_WRONG_CODEC);
        kvp_free(kv);
    }
    kvp_store_stats(st, &after);
    CHECK(after.sessions == before.sessions);
}

/* fp16 sink pages (KVP_PAGE_F_SINK) in a codec namespace: accepted before the codec chunks, and
 * never fixing the profile; a plain fp16 sealed page, a sink after a codec chunk, and a sink flag
 * on a codec or partial page are refused; the session survives a reopen byte for byte. */
static void sinks(const char *dir)
{
    const uint64_t ns = NS + 3;
    ksess_t        s, bad;
    kvp_store_h    st;
    uint8_t       *p;
    size_t         len;

    ksess_make(&s, 21, 3);
    for (uint32_t l = 0; l < G.layers; l++) { /* chunk 0 becomes the sink */
        kvp_free(s.pages[l]);
        s.pages[l] = enc_page(KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens,
                              s.d.chunk_keys[0], l, G.page_tokens, KVP_PAGE_F_SINK, &s.lens[l]);
    }
    st = open_store(dir);
    CHECK_OK(kvp_store_page_put(st, ns, s.pages[0], s.lens[0])); /* first page: sink, no profile */
    CHECK_OK(ksess_put(st, ns, "sink", &s));                       /* profile: kivi */
    ksess_check(st, ns, "sink", &s);
    /* a plain fp16 sealed page is still another codec there */
    p = enc_page(KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens, s.d.chunk_keys[2], 0,
                 G.page_tokens, 0, &len);
    CHECK_ST(kvp_store_page_put(st, ns, p, len), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    /* a session whose sink chunk comes after a codec chunk */
    ksess_make(&bad, 22, 2);
    for (uint32_t l = 0; l < G.layers; l++) {
        kvp_free(bad.pages[G.layers + l]);
        bad.pages[G.layers + l] = enc_page(KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens,
                                           bad.d.chunk_keys[1], l, G.page_tokens,
                                           KVP_PAGE_F_SINK, &bad.lens[G.layers + l]);
    }
    CHECK_ST(ksess_put(st, ns, "late-sink", &bad), KVP_ERR_WRONG_CODEC);
    {
        kvp_session_desc_t got;

        CHECK_ST(kvp_store_session_get(st, ns, "late-sink", &got), KVP_ERR_NOT_FOUND);
    }
    /* the sink flag only goes on full fp16 pages (encode refuses it elsewhere) */
    {
        kvp_page_params_t kp = {KVP_CODEC_KIVI, G.heads, G.head_dim, G.page_tokens, 0, 0,
                                s.d.chunk_keys[0], KVP_PAGE_F_SINK, 0};
        kvp_page_params_t hp = {KVP_CODEC_FP16, G.heads, G.head_dim, G.page_tokens, 0, 0,
                                s.d.chunk_keys[0], KVP_PAGE_F_SINK, 0};
        float             z[2 * 64 * 16] = {0};
        uint8_t           buf[16384];

        CHECK_ST(kvp_page_encode(&kp, KVP_DTYPE_F32, z, z, G.page_tokens, buf, sizeof(buf), &len),
                 KVP_ERR_INVALID);
        CHECK_ST(kvp_page_encode(&hp, KVP_DTYPE_F32, z, z, 5, buf, sizeof(buf), &len),
                 KVP_ERR_INVALID);
    }
    /* and parse refuses a sink-flagged codec page (header flag set by hand, CRC resealed) */
    {
        kvp_page_info_t info;
        uint8_t        *q = kvp_malloc(s.lens[G.layers], "test page");

        CHECK(q != NULL);
        memcpy(q, s.pages[G.layers], s.lens[G.layers]);
        CHECK_OK(kvp_page_parse(q, s.lens[G.layers], &info));
        info.flags |= KVP_PAGE_F_SINK;
        kvp_page_hdr_write(&info, q);
        kvp_page_seal(q);
        CHECK_ST(kvp_page_parse(q, s.lens[G.layers], &info), KVP_ERR_BAD_PAGE);
        CHECK_ST(kvp_store_page_put(st, ns, q, s.lens[G.layers]), KVP_ERR_BAD_PAGE);
        kvp_free(q);
    }
    kvp_store_close(st);
    st = open_store(dir); /* the sink chunk and the profile come back from disk */
    ksess_check(st, ns, "sink", &s);
    CHECK_ST(kvp_store_page_put(st, ns, bad.pages[0], bad.lens[0]), KVP_OK); /* kivi: fine */
    kvp_store_close(st);
    ksess_free(&s);
    ksess_free(&bad);
}

int main(void)
{
    char              dir[256];
    ksess_t           a, b, o;
    kvp_store_h       st;
    kvp_store_stats_t s;
    kvp_key128_t      fresh = {0xF00D, 0xBEEF};
    uint8_t          *p;
    size_t            len;

    if (getenv("KVP_LOG_LEVEL") == NULL) {
        kvp_log_set_level(KVP_LOG_LVL_ERROR);
    }
    t_tmpdir(dir, sizeof(dir), "wcodec");
    ksess_make(&a, 11, 3);
    ksess_make(&b, 12, 2);
    st = open_store(dir);
    CHECK_OK(ksess_put(st, NS, "a", &a)); /* fixes NS: kivi, 2 x 64, P 16, 4 layers */
    refuse_all(st, &a, 0);
    ksess_check(st, NS, "a", &a); /* nothing lost or changed */
    CHECK_OK(ksess_put(st, NS, "b", &b)); /* the right codec still goes in */
    ksess_check(st, NS, "b", &b);

    /* another namespace is independent: oscar goes in there, and kivi is then refused there */
    memset(&o, 0, sizeof(o));
    p = enc_page(KVP_CODEC_OSCAR, G.heads, G.head_dim, G.page_tokens, fresh, 0, G.page_tokens, 0,
                 &len);
    CHECK_OK(kvp_store_page_put(st, NS + 1, p, len));
    kvp_free(p);
    CHECK_ST(kvp_store_page_put(st, NS + 1, a.pages[0], a.lens[0]), KVP_ERR_WRONG_CODEC);
    /* a namespace's first record may not name fewer layers than its chunks' pages have */
    {
        kvp_session_desc_t few;

        for (uint32_t i = 0; i < b.d.n_chunks * G.layers; i++) {
            CHECK_OK(kvp_store_page_put(st, NS + 2, b.pages[i], b.lens[i]));
        }
        CHECK_OK(kvp_session_desc_copy(&b.d, &few));
        kvp_free(few.tail);
        few.tail = NULL, few.tail_len = 0, few.n_tail = 0, few.tail_tokens = 0;
        few.layers = G.layers - 1;
        CHECK_ST(kvp_store_session_put(st, NS + 2, "few", &few), KVP_ERR_WRONG_CODEC);
        few.layers = G.layers;
        CHECK_OK(kvp_store_session_put(st, NS + 2, "few", &few));
        kvp_session_desc_clear(&few);
    }
    kvp_store_close(st);

    /* reopen: the profile comes back from meta without reading a page */
    st = open_store(dir);
    kvp_store_stats(st, &s);
    CHECK(s.sessions == 3 && s.dram_pages == 0 && s.restores == 0 && s.crc_failures == 0);
    refuse_all(st, &a, 1);
    kvp_store_stats(st, &s);
    CHECK(s.dram_pages == 0 && s.restores == 0); /* refusing read no page */
    ksess_check(st, NS, "a", &a);
    ksess_check(st, NS, "b", &b);
    kvp_store_close(st);

    sinks(dir);
    ksess_free(&a);
    ksess_free(&b);
    t_rmrf(dir);
    fprintf(stderr, "test_wrong_codec: ok\n");
    return 0;
}
