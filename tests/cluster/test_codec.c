/* test_codec.c - "wrong codec" end to end through a real kvpackd child: a client puts a kivi
 * session; an oscar page (and a kivi page of another geometry) in that namespace comes back as
 * KVP_ERR_WRONG_CODEC over the wire; a get expecting oscar of the kivi session is
 * KVP_ERR_WRONG_CODEC; a get expecting kivi returns it byte-identical; all of it again after the
 * node restarts on its data dir (the namespace profile is persisted). A session whose fp16 sink
 * pages have another geometry than its codec pages is refused by the get. */
#include "node_harness.h"

#include "kvpack/log.h"

#define NS     0xC0DEC0DE5EEDull
#define LAYERS 3
#define CHUNKS 5
#define H      2
#define D      64
#define P      32

/* A page of codec (fp16 with flags: a sink page) with deterministic K/V, for (key, layer). */
static uint8_t *page_flags(kvp_codec_id_t codec, uint32_t heads, kvp_key128_t key, uint32_t layer,
                           uint32_t flags, size_t *len_p)
{
    kvp_page_params_t pp = {codec, heads, D, P, layer, 0, key, flags, 0};
    size_t            n  = (size_t)P * heads * D, cap = kvp_page_max_bytes(&pp);
    float            *k  = kvp_malloc(n * sizeof(float), "t k"), *v = kvp_malloc(n * 4, "t v");
    uint8_t          *out = kvp_malloc(cap, "t page");

    CHECK(k != NULL && v != NULL && out != NULL && cap > 0);
    for (size_t i = 0; i < n; i++) {
        k[i] = (float)((i * 7 + layer * 131 + key.lo % 97) % 97) / 13.0f - 3.0f;
        v[i] = (float)((i * 11 + layer * 37 + key.hi % 89) % 89) / 11.0f - 4.0f;
    }
    CHECK_ST(kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, P, out, cap, len_p), KVP_OK);
    kvp_free(k);
    kvp_free(v);
    return out;
}

static uint8_t *codec_page(kvp_codec_id_t codec, uint32_t heads, kvp_key128_t key, uint32_t layer,
                           size_t *len_p)
{
    return page_flags(codec, heads, key, layer, 0, len_p);
}

/* A session whose fp16 sink chunk has another geometry than its kivi chunk, put into a fresh
 * namespace (the node checks a namespace's pages only from its first codec page on, so the
 * sinks put before it went in): the get refuses it, WRONG_CODEC (it used to return the pages). */
static void mixed_sinks(kvp_client_h c)
{
    test_session_t       ts;
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         s;

    test_session_make(&ts, LAYERS, 2, 0, 9);
    for (uint32_t i = 0; i < ts.n_pages; i++) {
        kvp_free(ts.pages[i]);
        ts.pages[i] = i < LAYERS ? page_flags(KVP_CODEC_FP16, 1, ts.desc.chunk_keys[0], i,
                                              KVP_PAGE_F_SINK, &ts.lens[i])
                                 : codec_page(KVP_CODEC_KIVI, H, ts.desc.chunk_keys[1],
                                              i - LAYERS, &ts.lens[i]);
    }
    s = test_session_put(c, NS + 1, "mixed", &ts);
    CHECK(s == KVP_OK || s == KVP_ERR_WRONG_CODEC); /* refusing it at the put would do too */
    if (s == KVP_OK) {
        CHECK_ST(kvp_client_get_session(c, NS + 1, "mixed", &sp), KVP_ERR_WRONG_CODEC);
        CHECK(sp == NULL);
    }
    test_session_free(&ts);
}

static void expect_params(kvp_page_params_t *e, kvp_codec_id_t codec)
{
    memset(e, 0, sizeof(*e));
    e->codec       = codec;
    e->heads       = H;
    e->head_dim    = D;
    e->page_tokens = P;
}

/* Gets of the kivi session: expecting oscar (or another geometry) -> WRONG_CODEC and nothing
 * returned; expecting kivi, or nothing -> the session, byte-identical. */
static void check_gets(kvp_client_h c, const test_session_t *ts)
{
    kvp_session_pages_t *sp = NULL;
    kvp_page_params_t    e;

    expect_params(&e, KVP_CODEC_OSCAR);
    CHECK_ST(kvp_client_get_session_expect(c, NS, "kivi", &e, &sp), KVP_ERR_WRONG_CODEC);
    CHECK(sp == NULL);
    expect_params(&e, KVP_CODEC_KIVI);
    e.heads = H * 2;
    CHECK_ST(kvp_client_get_session_expect(c, NS, "kivi", &e, &sp), KVP_ERR_WRONG_CODEC);
    e.heads       = H;
    e.page_tokens = P * 2;
    CHECK_ST(kvp_client_get_session_expect(c, NS, "kivi", &e, &sp), KVP_ERR_WRONG_CODEC);
    e.page_tokens = P;
    e.flags       = KVP_PAGE_F_V_PREROT;
    CHECK_ST(kvp_client_get_session_expect(c, NS, "kivi", &e, &sp), KVP_ERR_WRONG_CODEC);
    CHECK(sp == NULL);
    e.flags = 0;
    CHECK_ST(kvp_client_get_session_expect(c, NS, "kivi", NULL, &sp), KVP_ERR_INVALID);
    e.codec = KVP_CODEC_MAX;
    CHECK_ST(kvp_client_get_session_expect(c, NS, "kivi", &e, &sp), KVP_ERR_INVALID);
    e.codec = KVP_CODEC_KIVI;
    CHECK_ST(kvp_client_get_session_expect(c, NS, "kivi", &e, &sp), KVP_OK);
    test_session_check(ts, sp);
    kvp_session_pages_free(sp);
    sp = NULL;
    CHECK_ST(kvp_client_get_session(c, NS, "kivi", &sp), KVP_OK);
    test_session_check(ts, sp);
    kvp_session_pages_free(sp);
}

/* Puts into the kivi namespace that must be refused by the node, with nothing changed. */
static void check_puts(kvp_client_h c, const test_session_t *ts)
{
    kvp_key128_t fresh = {0xABCD, 0x1234};
    size_t       len;
    uint8_t     *p;
    kvp_node_stat_t st0, st1;

    CHECK_ST(kvp_client_stat(c, &st0), KVP_OK);
    p = codec_page(KVP_CODEC_OSCAR, H, fresh, 0, &len);
    CHECK_ST(kvp_client_put_pages(c, NS, (const void *const *)&p, &len, 1), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    /* oscar under the key of a stored kivi page, in a batch after a good page */
    {
        uint8_t    *q  = codec_page(KVP_CODEC_OSCAR, H, ts->desc.chunk_keys[1], 2, &len);
        const void *pp[2] = {ts->pages[0], q};
        size_t      ll[2] = {ts->lens[0], len};

        CHECK_ST(kvp_client_put_pages(c, NS, pp, ll, 2), KVP_ERR_WRONG_CODEC);
        kvp_free(q);
    }
    p = codec_page(KVP_CODEC_KIVI, H * 2, fresh, 0, &len);
    CHECK_ST(kvp_client_put_pages(c, NS, (const void *const *)&p, &len, 1), KVP_ERR_WRONG_CODEC);
    kvp_free(p);
    /* a record with fewer layers than the namespace */
    {
        kvp_session_desc_t d;

        CHECK_ST(kvp_session_desc_copy(&ts->desc, &d), KVP_OK);
        kvp_free(d.tail);
        d.tail = NULL, d.tail_len = 0, d.n_tail = 0, d.tail_tokens = 0;
        d.layers = LAYERS - 1;
        CHECK_ST(kvp_client_put_session(c, NS, "kivi", &d), KVP_ERR_WRONG_CODEC);
        kvp_session_desc_clear(&d);
    }
    CHECK_ST(kvp_client_stat(c, &st1), KVP_OK);
    CHECK(st1.sessions == st0.sessions && st1.dram_pages == st0.dram_pages);
}

static test_node_t *g_node; /* killed at exit, so a failed check leaves no kvpackd behind */

static void kill_node(void)
{
    if (g_node != NULL && g_node->pid > 0) {
        kill(g_node->pid, SIGKILL);
        waitpid(g_node->pid, NULL, 0);
        g_node->pid = 0;
    }
}

int main(void)
{
    test_node_t    n;
    test_session_t ts;
    kvp_client_h   c;
    uint32_t       hits;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    test_node_mkdir(&n);
    g_node = &n;
    atexit(kill_node);
    test_node_start(&n, "--durability=spill");
    c = test_client(n.addr, 10000);

    /* a kivi session: the harness's fp16 pages replaced by kivi ones (same keys, same tail) */
    test_session_make(&ts, LAYERS, CHUNKS, 7, 1);
    for (uint32_t i = 0; i < ts.n_pages; i++) {
        kvp_free(ts.pages[i]);
        ts.pages[i] = codec_page(KVP_CODEC_KIVI, H, ts.desc.chunk_keys[i / LAYERS], i % LAYERS,
                                 &ts.lens[i]);
    }
    CHECK_ST(test_session_put(c, NS, "kivi", &ts), KVP_OK);
    check_puts(c, &ts);
    check_gets(c, &ts);
    mixed_sinks(c);

    /* persisted: spill, restart the node on its data dir, the same answers */
    CHECK_ST(kvp_client_spill(c, NS, "kivi"), KVP_OK);
    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_node_start(&n, "--durability=spill");
    c = test_client(n.addr, 10000);
    CHECK_ST(kvp_client_lookup(c, NS, ts.desc.chunk_keys, CHUNKS, LAYERS, &hits), KVP_OK);
    CHECK(hits == CHUNKS);
    check_puts(c, &ts);
    check_gets(c, &ts);

    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_session_free(&ts);
    test_node_rmdir(&n);
    printf("test_codec: ok\n");
    return 0;
}
