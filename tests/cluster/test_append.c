/* test_append.c - APPEND end to end (kvp_client_append -> kvpackd -> kvp_store_session_append):
 * a decode's tokens appended to a session in pieces; every P tokens become a kivi page under
 * kvp_chunk_key(previous, fingerprint, ids), byte-identical to the page this process encodes
 * from the same tokens, and the rest stay the fp16 tail; lookup finds the sealed chunks; each
 * append stamps a newer record version; fp16 input gives the same pages and tail; after a restart the session
 * comes back from disk and takes further appends, the first one sent by the same client (whose
 * connection died with the node: it must see that before sending, since a write is never sent
 * twice), and reads back through it. Bad input changes nothing: another codec (WRONG_CODEC), NaN in a
 * chunk to seal or 1e30 in the last layer (BAD_INPUT_DATA, no page stored), a wrong id count (INVALID: the node counts the tail), and hand-made
 * requests whose K/V bytes do not match the geometry or whose ids are too many (PROTOCOL). Two
 * clients appending to one session at once: the node serialises them, so the second finds a
 * longer tail than its ids name and is refused (INVALID) instead of overwriting the first.
 * kvp_cluster_append over 3 nodes, r = 2 (cluster_case): both copies grow alike at one new
 * version; a copy that missed an append, a put or an rm is left alone (older) and kvpack repair
 * then makes it whole or removes it. */
#include "node_harness.h"

#include "kvpack/log.h"

#include <pthread.h>

#define L   2u
#define H   2u
#define D   64u
#define P   32u
#define MAX   136u /* tokens in the test */
#define FIRST 96u  /* appended before the restart */

static uint64_t fp;  /* the namespace: kivi, L x H x D, P */

/* K/V of token t, layer l, head h, dim d: exact in fp16 */
static float kv(int v, uint32_t l, uint32_t t, uint32_t h, uint32_t d)
{
    return (float)((int)((t * 7 + l * 13 + h * 5 + d * 3 + (uint32_t)v * 11) % 61) - 30) / 8.0f;
}

/* tokens [t0, t0 + n) as the append's [layers][n][heads][dim] fp32 K or V */
static float *tokens(int v, uint32_t t0, uint32_t n)
{
    float *x = kvp_malloc((size_t)L * n * H * D * sizeof(float), "t");

    for (uint32_t l = 0; l < L; l++) {
        for (uint32_t t = 0; t < n; t++) {
            for (uint32_t h = 0; h < H; h++) {
                for (uint32_t d = 0; d < D; d++) {
                    x[(((size_t)l * n + t) * H + h) * D + d] = kv(v, l, t0 + t, h, d);
                }
            }
        }
    }
    return x;
}

static uint32_t ids[MAX];

/* Append tokens [t0, t0 + n) to a session whose tail holds tokens [tail0, t0). */
static kvp_status_t append(kvp_client_h c, const char *sid, uint32_t tail0, uint32_t t0,
                           uint32_t n, kvp_codec_id_t codec, uint32_t *sealed)
{
    float       *k = tokens(0, t0, n), *v = tokens(1, t0, n);
    kvp_append_t a = {codec, fp, L, H, D, P, KVP_DTYPE_F32, k, v, n, ids + tail0, t0 - tail0 + n,
                      t0};
    kvp_status_t s = kvp_client_append(c, fp, sid, &a, sealed);

    kvp_free(k);
    kvp_free(v);
    return s;
}

/* The same tokens as fp16 (exact: the values are multiples of 1/8 within +-4) to session sid
 * in one append of n tokens from 0; *sealed_p gets the chunks sealed. */
static kvp_status_t append_f16(kvp_client_h c, const char *sid, uint32_t n, uint32_t *sealed_p)
{
    float       *k = tokens(0, 0, n), *v = tokens(1, 0, n);
    size_t       m = (size_t)L * n * H * D;
    uint16_t    *k16 = kvp_malloc(m * sizeof(uint16_t), "t"), *v16 = kvp_malloc(m * 2, "t");
    kvp_append_t a = {KVP_CODEC_KIVI, fp, L, H, D, P, KVP_DTYPE_F16, k16, v16, n, ids, n, 0};
    kvp_status_t s;

    for (size_t i = 0; i < m; i++) {
        k16[i] = kvp_f32_to_f16(k[i]);
        v16[i] = kvp_f32_to_f16(v[i]);
    }
    s = kvp_client_append(c, fp, sid, &a, sealed_p);
    kvp_free(k);
    kvp_free(v);
    kvp_free(k16);
    kvp_free(v16);
    return s;
}

/* The session holds chunks [0, chunks) sealed as this process encodes them and tokens
 * [chunks * P, total) in its tail. */
static void check_session(kvp_client_h c, const char *sid, uint32_t chunks, uint32_t total)
{
    kvp_session_pages_t *sp = NULL;
    kvp_key128_t         key = {0, 0};
    uint32_t             hit = 0;

    CHECK_OK(kvp_client_get_session(c, fp, sid, &sp));
    if (sp == NULL) {
        return;
    }
    CHECK(sp->desc.n_chunks == chunks && sp->desc.tail_tokens == total - chunks * P &&
          sp->desc.layers == L && sp->desc.page_tokens == P);
    for (uint32_t ch = 0; ch < chunks && ch < sp->desc.n_chunks; ch++) {
        kvp_page_params_t pp = {0};
        float            *k = tokens(0, ch * P, P), *v = tokens(1, ch * P, P);

        key = kvp_chunk_key(ch ? &key : NULL, fp, ids + ch * P, P);
        CHECK(sp->desc.chunk_keys[ch].lo == key.lo && sp->desc.chunk_keys[ch].hi == key.hi);
        for (uint32_t l = 0; l < L; l++) {
            size_t   cap, len, i = (size_t)ch * L + l;
            uint8_t *page;

            pp.codec = KVP_CODEC_KIVI, pp.heads = H, pp.head_dim = D, pp.page_tokens = P;
            pp.layer = l, pp.first_pos = (uint64_t)ch * P, pp.chunk_key = key;
            cap  = kvp_page_max_bytes(&pp);
            page = kvp_malloc(cap, "t");
            CHECK_OK(kvp_page_encode(&pp, KVP_DTYPE_F32, k + (size_t)l * P * H * D,
                                     v + (size_t)l * P * H * D, P, page, cap, &len));
            CHECK(sp->page_lens[i] == len && memcmp(sp->pages[i], page, len) == 0);
            kvp_free(page);
        }
        kvp_free(k);
        kvp_free(v);
    }
    if (total > chunks * P) { /* the tail: fp16 pages of the rest, exact */
        size_t          off = 0;
        uint32_t        rest = total - chunks * P;
        float          *k = tokens(0, chunks * P, rest), *v = tokens(1, chunks * P, rest);
        float          *dk = kvp_malloc((size_t)P * H * D * sizeof(float), "t");
        float          *dv = kvp_malloc((size_t)P * H * D * sizeof(float), "t");
        kvp_page_info_t info;

        for (uint32_t l = 0; l < L; l++) {
            size_t len = kvp_page_len_at(sp->desc.tail + off, sp->desc.tail_len - off);

            CHECK_OK(kvp_page_parse(sp->desc.tail + off, len, &info));
            CHECK_OK(kvp_page_decode(sp->desc.tail + off, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL,
                                     dk, dv, NULL));
            CHECK(info.valid == rest && info.layer == l &&
                  memcmp(dk, k + (size_t)l * rest * H * D, (size_t)rest * H * D * 4) == 0 &&
                  memcmp(dv, v + (size_t)l * rest * H * D, (size_t)rest * H * D * 4) == 0);
            off += len;
        }
        kvp_free(k);
        kvp_free(v);
        kvp_free(dk);
        kvp_free(dv);
    }
    CHECK_OK(kvp_client_lookup(c, fp, sp->desc.chunk_keys, sp->desc.n_chunks, L, &hit));
    CHECK(hit == chunks);
    kvp_session_pages_free(sp);
}

static uint64_t version_of(kvp_client_h c, const char *sid)
{
    kvp_session_pages_t *sp = NULL;
    uint64_t             v  = 0;

    CHECK_OK(kvp_client_get_session(c, fp, sid, &sp));
    v = sp != NULL ? sp->version : 0;
    kvp_session_pages_free(sp);
    return v;
}

/* An append that went through but whose caller retries it (a timeout after the node applied it;
 * the node does not drop late requests): the retry names the old position, so it is refused and
 * nothing is sealed twice, also when the tokens are a multiple of P (the ids count alone cannot
 * tell then). A session an append creates gets the node's clock as its version (not 0, which any
 * put or delete would beat), and an append may create again a session deleted before. */
static void retried(kvp_client_h c)
{
    uint32_t sealed = 99;
    uint64_t v;

    CHECK_OK(append(c, "r", 0, 0, 5, KVP_CODEC_KIVI, &sealed)); /* a tail of 5 */
    v = version_of(c, "r");
    CHECK(v > 1000000000ull * 1000000000ull / 1000); /* a wall clock in ns, not 0 */
    CHECK_OK(append(c, "r", 0, 5, P, KVP_CODEC_KIVI, &sealed)); /* tail 5 + P: seals one */
    CHECK(sealed == 1);
    check_session(c, "r", 1, 5 + P);
    CHECK_ST(append(c, "r", 0, 5, P, KVP_CODEC_KIVI, &sealed), KVP_ERR_INVALID); /* the retry */
    check_session(c, "r", 1, 5 + P);
    CHECK_ST(append(c, "r", 5 + P, 5 + P + 1, 3, KVP_CODEC_KIVI, &sealed), KVP_ERR_INVALID);
    CHECK_OK(kvp_client_delete_session(c, fp, "r")); /* a tombstone at the client's clock */
    CHECK_ST(append(c, "r", 0, 3, 4, KVP_CODEC_KIVI, &sealed), KVP_ERR_NOT_FOUND); /* gone */
    CHECK_OK(append(c, "r", 0, 0, 2 * P, KVP_CODEC_KIVI, &sealed)); /* created again, empty tail */
    CHECK(sealed == 2 && version_of(c, "r") > v);
    CHECK_ST(append(c, "r", 0, 0, 2 * P, KVP_CODEC_KIVI, &sealed), KVP_ERR_INVALID); /* retry */
    check_session(c, "r", 2, 2 * P);
    CHECK_OK(kvp_client_delete_session(c, fp, "r"));
}

/* Hand-made APPEND requests the node must refuse as PROTOCOL, the session untouched. */
static void raw_bad(const test_node_t *n, kvp_client_h c)
{
    test_raw_t     r;
    kvp_wire_req_t req;
    uint8_t       *hdr, *data;
    size_t         hl, one = (size_t)L * 4 * H * D * 2; /* 4 fp16 tokens, K or V */

    data = kvp_calloc(2, one + 64, "t");
    test_raw_open(&r, n->port);
    memset(&req, 0, sizeof(req));
    req.op     = KVP_WIRE_OP_APPEND;
    req.req_id = 91;
    req.ns     = fp;
    snprintf(req.sid, sizeof(req.sid), "s");
    req.append = (kvp_wire_append_t){KVP_CODEC_KIVI, fp, L, H, D, P, KVP_DTYPE_F16, 4, 4 + 2 * P,
                                     ids, 0, 0, 0, 0, 0, 0, 0};
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl)); /* ids: more than the tail can hold */
    test_raw_call(&r, hdr, hl, data, 2 * one);
    CHECK(r.rep.req_id == 91 && r.rep.status == KVP_ERR_PROTOCOL);
    kvp_free(hdr);
    req.append.n_ids = 4 + (MAX % P);
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
    test_raw_call(&r, hdr, hl, data, 2 * one - 2); /* K/V cut short */
    CHECK(r.rep.status == KVP_ERR_PROTOCOL);
    test_raw_call(&r, hdr, hl, data, 2 * one + 64); /* and too long */
    CHECK(r.rep.status == KVP_ERR_PROTOCOL);
    kvp_free(hdr);
    test_raw_close(&r);
    kvp_free(data);
    (void)c;
}

/* Two clients race to append 10 tokens each to a new session (both name an empty tail). */
typedef struct {
    const char  *addr, *sid;
    kvp_status_t status;
} racer_t;

static void *racer_main(void *arg)
{
    racer_t     *r = arg;
    kvp_client_h c = test_client(r->addr, 5000);

    r->status = append(c, r->sid, 0, 0, 10, KVP_CODEC_KIVI, NULL);
    kvp_client_destroy(c);
    return NULL;
}

static void race(const test_node_t *n, kvp_client_h c)
{
    int both = 0;

    for (int k = 0; k < 20; k++) {
        char                 sid[16];
        racer_t              r[2];
        pthread_t            t[2];
        kvp_session_pages_t *sp = NULL;

        snprintf(sid, sizeof(sid), "race-%d", k);
        for (int i = 0; i < 2; i++) {
            r[i] = (racer_t){n->addr, sid, KVP_ERR_IO};
            CHECK(pthread_create(&t[i], NULL, racer_main, &r[i]) == 0);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(t[i], NULL);
        }
        both += r[0].status == KVP_OK && r[1].status == KVP_OK;
        CHECK((r[0].status == KVP_OK) != (r[1].status == KVP_OK));
        CHECK(r[0].status == KVP_ERR_INVALID || r[1].status == KVP_ERR_INVALID);
        CHECK_OK(kvp_client_get_session(c, fp, sid, &sp));
        CHECK(sp != NULL && sp->desc.tail_tokens == 10 && sp->desc.n_chunks == 0);
        kvp_session_pages_free(sp);
    }
    CHECK(both == 0);
}

/* kvp_cluster_append of tokens [t0, t0 + n) to "c" (tail from tail0, chunks sealed before) */
static kvp_status_t cl_append(kvp_cluster_h cl, uint32_t tail0, uint32_t t0, uint32_t n,
                              uint32_t chunks, uint32_t *sealed, kvp_cluster_report_t *rep)
{
    float       *k = tokens(0, t0, n), *v = tokens(1, t0, n);
    kvp_append_t a = {KVP_CODEC_KIVI, fp, L, H, D, P, KVP_DTYPE_F32, k, v, n, ids + tail0,
                      t0 - tail0 + n, 0}; /* a cluster append checks chunks, not first_pos */
    kvp_status_t s = kvp_cluster_append(cl, fp, "c", &a, chunks, sealed, rep);

    for (uint32_t i = 0; i < rep->n_tried; i++) { /* what each node said, for a failure */
        fprintf(stderr, "append %u+%u: node %u %s: %s\n", t0, n, rep->tried[i].node,
                rep->tried[i].stage, kvp_status_name(rep->tried[i].status));
    }
    kvp_free(k);
    kvp_free(v);
    return s;
}

/* What node said in rep (its last entry), or 1 when it is not there. */
static kvp_status_t tried(const kvp_cluster_report_t *rep, uint32_t node)
{
    kvp_status_t s = (kvp_status_t)1;

    for (uint32_t i = 0; i < rep->n_tried; i++) {
        s = rep->tried[i].node == node ? rep->tried[i].status : s;
    }
    return s;
}

/* kvpack repair over peers, r = 2: every session ends with its newest version on its first two
 * ranked nodes (or, deleted, nowhere). */
static void repair(const char *peers)
{
    char cmd[1024], exe[512];

    snprintf(exe, sizeof(exe), "%s", KVPACKD_PATH);
    exe[strlen(exe) - 1] = '\0'; /* .../kvpackd -> .../kvpack */
    snprintf(cmd, sizeof(cmd), "KVP_PROGRESS=0 %s repair --node %s --replicas 2 > /dev/null",
             exe, peers);
    CHECK(system(cmd) == 0);
}

/* Stop nd (its client c closed), run what, start it again on its port: it missed what. */
#define WHILE_DOWN(nd, c, what)                                                               \
    do {                                                                                      \
        kvp_client_destroy(c);                                                                \
        CHECK(test_node_stop(&(nd), SIGTERM) == 0);                                           \
        what;                                                                                 \
        test_node_start_at(&(nd), (nd).port, "--durability=write-through");                   \
        (c) = test_client((nd).addr, 5000);                                                   \
    } while (0)

/* Replicated appends (kvp_cluster_append) over 3 nodes, r = 2: the session made on its first
 * ranked node by a (single-node) append and copied to the second by kvpack repair; a cluster
 * append seals a chunk on both, which then hold the same pages and tail at one new version.
 * With the second copy's node stopped, an append goes to the first alone (the third, which never
 * held it, answers NOT_FOUND); back, the second copy is behind: the next append leaves it alone
 * (INVALID) and goes to the first, whose version is now above the stale copy's, so kvpack repair
 * replaces the stale one. A copy that missed a put of the same length (its node down; the third
 * node stood in) has the chunk count the append names, but not the newest version: it is left
 * alone and the append goes to the two newest copies (it used to take the append on top of its
 * older bytes, at the same version as the others). A put both first copies missed, taken by the
 * third alone, makes the third the only newest copy: the append goes there only. A copy that
 * outlived an rm (down meanwhile)
 * does not bring the session back: NOT_FOUND, nothing appended, and repair removes it. A
 * session nobody holds is NOT_FOUND; a chunk count no copy has, INVALID. */
static void cluster_case(void)
{
    test_node_t          nd[3];
    char                 peers[256];
    uint32_t             order[3], sealed = 99;
    uint64_t             v_old, v_new;
    kvp_cluster_h        cl;
    kvp_cluster_report_t rep;
    kvp_client_h         c[3];
    kvp_session_pages_t *sp = NULL;

    for (int i = 0; i < 3; i++) {
        test_node_mkdir(&nd[i]);
        test_node_start(&nd[i], "--durability=write-through");
    }
    snprintf(peers, sizeof(peers), "%s,%s,%s", nd[0].addr, nd[1].addr, nd[2].addr);
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_OK(kvp_cluster_rank(cl, fp, "c", order));
    for (int i = 0; i < 3; i++) {
        c[i] = test_client(nd[order[i]].addr, 5000); /* c[i]: the i-th ranked node */
    }
    CHECK_OK(append(c[0], "c", 0, 0, 20, KVP_CODEC_KIVI, &sealed));
    CHECK(version_of(c[0], "c") > 0); /* a first append stamps the record with the node's clock */
    repair(peers); /* the second copy, at the same version */
    CHECK(version_of(c[1], "c") == version_of(c[0], "c"));

    CHECK_OK(cl_append(cl, 0, 20, 30, 0, &sealed, &rep)); /* 50: one chunk, 18 in the tail */
    CHECK(sealed == 1 && rep.n_ok == 2);
    check_session(c[0], "c", 1, 50);
    check_session(c[1], "c", 1, 50);
    CHECK(version_of(c[0], "c") == version_of(c[1], "c"));

    WHILE_DOWN(nd[order[1]], c[1], { /* the second copy misses the next append */
        CHECK_OK(cl_append(cl, 32, 50, 20, 1, &sealed, &rep)); /* 70: two chunks, 6 in tail */
        CHECK(sealed == 1 && rep.n_ok == 1 && rep.n_tried == 3);
        CHECK(tried(&rep, order[0]) == KVP_OK && tried(&rep, order[2]) == KVP_ERR_NOT_FOUND &&
              tried(&rep, order[1]) != KVP_OK);
    });
    check_session(c[0], "c", 2, 70);
    check_session(c[1], "c", 1, 50); /* behind */
    kvp_cluster_destroy(cl); /* a new handle: the old one skips a node that failed for 5 s */
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_OK(cl_append(cl, 64, 70, 10, 2, &sealed, &rep));
    CHECK(rep.n_ok == 1 && rep.n_tried == 3 && tried(&rep, order[0]) == KVP_OK &&
          tried(&rep, order[1]) == KVP_ERR_INVALID && tried(&rep, order[2]) == KVP_ERR_NOT_FOUND);
    check_session(c[0], "c", 2, 80);
    check_session(c[1], "c", 1, 50); /* left alone */
    CHECK(version_of(c[0], "c") > version_of(c[1], "c"));
    repair(peers); /* the older copy is what repair replaces: both then whole and alike */
    check_session(c[1], "c", 2, 80);
    CHECK(version_of(c[0], "c") == version_of(c[1], "c"));

    CHECK_ST(cl_append(cl, 64, 80, 4, 7, &sealed, &rep), KVP_ERR_INVALID); /* no copy has 7 */
    check_session(c[0], "c", 2, 80);
    {
        float       *k = tokens(0, 0, 4), *v = tokens(1, 0, 4);
        kvp_append_t a = {KVP_CODEC_KIVI, fp, L, H, D, P, KVP_DTYPE_F32, k, v, 4, ids, 4, 0};

        CHECK_ST(kvp_cluster_append(cl, fp, "nobody", &a, 0, &sealed, &rep), KVP_ERR_NOT_FOUND);
        CHECK(rep.n_ok == 0 && rep.n_tried == 3);
        kvp_free(k);
        kvp_free(v);
    }

    /* a put the second copy misses: the third node stands in for it */
    v_old = version_of(c[1], "c");
    CHECK_OK(kvp_client_get_session(c[0], fp, "c", &sp));
    WHILE_DOWN(nd[order[1]], c[1], {
        CHECK_OK(kvp_cluster_put_session(cl, fp, "c", (const void *const *)sp->pages,
                                         sp->page_lens, sp->n_pages, &sp->desc, &rep));
        CHECK(rep.n_ok == 2);
    });
    kvp_session_pages_free(sp);
    CHECK(version_of(c[2], "c") == version_of(c[0], "c") && version_of(c[0], "c") > v_old);
    kvp_cluster_destroy(cl);
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_OK(cl_append(cl, 64, 80, 10, 2, &sealed, &rep)); /* 2 chunks on all three */
    CHECK(rep.n_ok == 2 && tried(&rep, order[0]) == KVP_OK && tried(&rep, order[2]) == KVP_OK &&
          tried(&rep, order[1]) == KVP_ERR_INVALID);
    check_session(c[0], "c", 2, 90);
    check_session(c[2], "c", 2, 90);
    check_session(c[1], "c", 2, 80); /* left alone, at its own version */
    CHECK(version_of(c[1], "c") == v_old && version_of(c[2], "c") == version_of(c[0], "c"));

    /* a put both first copies miss lands on the third alone: its copy is the newest, though the
     * first two ranked nodes answer first (a probe that stopped at r copies missed it) */
    v_new = version_of(c[0], "c");
    CHECK_OK(kvp_client_get_session(c[0], fp, "c", &sp));
    WHILE_DOWN(nd[order[0]], c[0], WHILE_DOWN(nd[order[1]], c[1], {
        CHECK_OK(kvp_cluster_put_session(cl, fp, "c", (const void *const *)sp->pages,
                                         sp->page_lens, sp->n_pages, &sp->desc, &rep));
        CHECK(rep.n_ok == 1);
    }));
    kvp_session_pages_free(sp);
    kvp_cluster_destroy(cl);
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_OK(cl_append(cl, 64, 90, 10, 2, &sealed, &rep)); /* 100: a third chunk */
    CHECK(sealed == 1 && rep.n_ok == 1 && tried(&rep, order[2]) == KVP_OK &&
          tried(&rep, order[0]) == KVP_ERR_INVALID && tried(&rep, order[1]) == KVP_ERR_INVALID);
    check_session(c[2], "c", 3, 100);
    check_session(c[0], "c", 2, 90); /* left alone */
    CHECK(version_of(c[0], "c") == v_new && version_of(c[1], "c") == v_old);

    /* an rm the second copy misses: its copy must not come back through an append */
    WHILE_DOWN(nd[order[1]], c[1], { /* deleted on the others; PEER_UNREACHABLE names the miss */
        CHECK_ST(kvp_cluster_delete_session(cl, fp, "c", &rep), KVP_ERR_PEER_UNREACHABLE);
        CHECK(rep.n_ok == 2);
    });
    kvp_cluster_destroy(cl);
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_ST(cl_append(cl, 64, 80, 10, 2, &sealed, &rep), KVP_ERR_NOT_FOUND);
    CHECK(rep.n_ok == 0);
    { /* what the probe saw, one node at a time (kvp_client_session_info): the stale record on
       * the second, the rm's tombstone on the first, nothing for an unknown session */
        kvp_session_info_t info;

        CHECK_OK(kvp_client_session_info(c[1], fp, "c", &info));
        CHECK(info.deleted == 0 && info.version == v_old && info.n_chunks == 2 &&
              strcmp(info.sid, "c") == 0);
        CHECK_OK(kvp_client_session_info(c[0], fp, "c", &info));
        CHECK(info.deleted == 1 && info.version > v_new);
        CHECK_ST(kvp_client_session_info(c[0], fp, "b", &info), KVP_ERR_NOT_FOUND);
    }
    check_session(c[1], "c", 2, 80); /* untouched */
    CHECK(version_of(c[1], "c") == v_old);
    repair(peers); /* the rm wins */
    CHECK_ST(kvp_client_get_session(c[1], fp, "c", &sp), KVP_ERR_NOT_FOUND);
    for (int i = 0; i < 3; i++) {
        kvp_client_destroy(c[i]);
        CHECK(test_node_stop(&nd[order[i]], SIGTERM) == 0);
        test_node_rmdir(&nd[order[i]]);
    }
    kvp_cluster_destroy(cl);
}

int main(void)
{
    test_node_t  n;
    kvp_client_h c;
    uint32_t     sealed = 99;
    uint64_t     v;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    for (uint32_t i = 0; i < MAX; i++) {
        ids[i] = 1000u + i * 7u;
    }
    fp = kvp_ns_fingerprint("append-test", L, H, D, P, KVP_CODEC_KIVI);
    test_node_mkdir(&n);
    test_node_start(&n, "--durability=write-through");
    c = test_client(n.addr, 5000);

    /* 20 tokens: a tail only; then 30 more: one chunk sealed, 18 in the tail */
    CHECK_OK(append(c, "s", 0, 0, 20, KVP_CODEC_KIVI, &sealed));
    CHECK(sealed == 0);
    check_session(c, "s", 0, 20);
    v = version_of(c, "s");
    CHECK_OK(append(c, "s", 0, 20, 30, KVP_CODEC_KIVI, &sealed));
    CHECK(sealed == 1);
    check_session(c, "s", 1, 50);
    CHECK(version_of(c, "s") > v); /* an append is a write: a new version, above the old */
    CHECK_OK(append_f16(c, "s16", 50, &sealed)); /* fp16 input: the same pages and tail */
    CHECK(sealed == 1);
    check_session(c, "s16", 1, 50);

    /* bad input: nothing changes */
    CHECK_ST(append(c, "s", 32, 50, 20, KVP_CODEC_FP16, NULL), KVP_ERR_WRONG_CODEC);
    {
        float       *k = tokens(0, 50, 20), *vv = tokens(1, 50, 20);
        kvp_append_t a = {KVP_CODEC_KIVI, fp, L, H, D, P, KVP_DTYPE_F32, k, vv, 20, ids + 32, 38,
                          50};

        kvp_node_stat_t before, after;

        CHECK_OK(kvp_client_stat(c, &before));
        k[5] = NAN; /* token 50 seals with the tail's 18 */
        CHECK_ST(kvp_client_append(c, fp, "s", &a, NULL), KVP_ERR_BAD_INPUT_DATA);
        k[5] = 0.5f;
        /* in the last layer, where the first layers' chunks used to be sealed and stored before
         * it was met (pages nobody's record names), and past fp16 rather than NaN */
        k[(size_t)(L - 1) * 20 * H * D + 7] = 1e30f;
        CHECK_ST(kvp_client_append(c, fp, "s", &a, NULL), KVP_ERR_BAD_INPUT_DATA);
        k[(size_t)(L - 1) * 20 * H * D + 7] = 0.5f;
        CHECK_OK(kvp_client_stat(c, &after));
        CHECK(after.dram_pages == before.dram_pages && after.dram_bytes == before.dram_bytes);
        a.n_ids = 20; /* must be the tail's 18 ids + the 20 new ones: the node refuses it */
        CHECK_ST(kvp_client_append(c, fp, "s", &a, NULL), KVP_ERR_INVALID);
        kvp_free(k);
        kvp_free(vv);
    }
    raw_bad(&n, c);
    check_session(c, "s", 1, 50);
    race(&n, c);
    retried(c);

    /* up to FIRST in one append (two more chunks sealed), then after a restart from disk, and
     * appended to there: the session read back from the SSD tier grows a fourth chunk */
    CHECK_OK(append(c, "s", 32, 50, FIRST - 50, KVP_CODEC_KIVI, &sealed));
    CHECK(sealed == 2);
    check_session(c, "s", 3, FIRST);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_node_start_at(&n, n.port, "--durability=write-through");
    /* the same client: its connection died with the node, and the first call is a write. The
     * client progresses the transport before a request, sees the connection dead and sends on a
     * fresh one (before, the append went out on the dead one and failed PEER_GONE; writes are
     * not sent again, so it stayed failed) */
    CHECK_OK(append(c, "s", FIRST, FIRST, MAX - FIRST, KVP_CODEC_KIVI, &sealed));
    CHECK(sealed == 1);
    check_session(c, "s", 4, MAX);
    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_node_rmdir(&n);
    cluster_case();
    printf("test_append: all checks passed\n");
    return 0;
}
