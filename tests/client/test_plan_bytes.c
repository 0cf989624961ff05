/* test_plan_bytes.c - `kvpack plan` bytes against real pages and a real store: for every codec,
 * several geometries, T < P, T = k*P and T = k*P + r, with and without fp16 sink pages, this
 * encodes every page of the session with kvp_page_encode (sink, codec and fp16 tail pages, each
 * layer), packs the session record with kvp_session_desc_pack, and checks that plan's page_bytes
 * and session_bytes (from `kvpack plan --json`, argv[1]) equal the summed lengths exactly. Then
 * it puts the session into a store (write-through to its own RocksDB and segment files) and checks
 * plan's session_dram_bytes against what the store's DRAM budget counts for it (dram_bytes) and
 * plan's session_ssd_bytes against the segment-file bytes the store keeps live for it plus the
 * pages it keeps inline and the record, each recomputed here from the real lengths. */
#define _GNU_SOURCE /* mkdtemp */
#include "tk.h" /* tests/kernels: RNG, page params, check.h */

#include "kvpack/alloc.h"
#include "kvpack/store.h"
#include "../../store/store_int.h" /* kvp_store_record_pack: the record as the store writes it */

#include <stdlib.h>
#include <unistd.h>

#include <inttypes.h>
#include <stdbool.h>

typedef struct {
    uint32_t L, H, D, P;
} geom_t;

static tk_rng_t rng = {1};

/* Encode one page of ntok random tokens; returns its length. */
static size_t encode(const geom_t *g, kvp_codec_id_t codec, uint32_t flags, uint32_t layer,
                     uint32_t chunk, uint32_t ntok, uint8_t *out, size_t cap)
{
    size_t            n = (size_t)ntok * g->H * g->D, len = 0;
    float            *k = kvp_malloc(n * sizeof(float), "test k");
    float            *v = kvp_malloc(n * sizeof(float), "test v");
    kvp_page_params_t p = tk_params(codec, g->H, g->D, g->P);

    CHECK(k != NULL && v != NULL);
    for (size_t i = 0; i < n; i++) {
        k[i] = tk_gauss(&rng);
        v[i] = tk_gauss(&rng);
    }
    p.layer        = layer;
    p.flags        = flags;
    p.first_pos    = (uint64_t)chunk * g->P;
    p.chunk_key.lo = chunk + 1; /* the session's chunk keys are 1, 2, ... */
    p.chunk_key.hi = 0;
    CHECK_OK(kvp_page_encode(&p, KVP_DTYPE_F32, k, v, ntok, out, cap, &len));
    CHECK_OK(kvp_page_parse(out, len, NULL));
    kvp_free(k);
    kvp_free(v);
    return len;
}

/* What a node holds of one session, measured: DRAM the budget counts, segment-file bytes kept
 * live, and (recomputed from the lengths) the SSD bytes kept in the index: inline pages and the
 * record with its tail. */
typedef struct {
    uint64_t dram, seg_live, ssd_index;
} node_bytes_t;

static kvp_store_h   store;
static uint64_t      next_ns = 1;

/* The session as `kvpack put` (and the model runner's sink) stores it: page bytes of all pages,
 * and session bytes = non-tail pages + the packed record that carries the tail pages; then put
 * into the store under a namespace of its own, *node_p what that took. */
static void real_session(const geom_t *g, kvp_codec_id_t codec, uint32_t T, uint32_t S,
                         uint64_t *pages_p, uint64_t *session_p, node_bytes_t *node_p)
{
    kvp_page_params_t  fp = tk_params(KVP_CODEC_FP16, g->H, g->D, g->P);
    size_t             cap = kvp_page_max_bytes(&fp) * 2, len;
    uint8_t           *buf = kvp_malloc(cap, "test page"), *blob;
    uint32_t           full = T / g->P, r = T % g->P;
    uint64_t           pages = 0, sealed = 0, ns = next_ns++;
    kvp_session_desc_t d = {0};
    kvp_store_stats_t  before, after;
    char               sid[32];

    CHECK(buf != NULL);
    d.layers      = g->L;
    d.page_tokens = g->P;
    d.n_chunks    = full;
    d.chunk_keys  = kvp_calloc(full + 1, sizeof(kvp_key128_t), "test keys");
    d.tail_tokens = r;
    d.n_tail      = r ? g->L : 0;
    d.tail        = kvp_malloc(cap * g->L, "test tail");
    CHECK(d.chunk_keys != NULL && d.tail != NULL);
    kvp_store_stats(store, &before);
    node_p->ssd_index = 0;
    for (uint32_t c = 0; c < full; c++) {
        d.chunk_keys[c].lo = c + 1;
    }
    for (uint32_t l = 0; l < g->L; l++) {
        for (uint32_t c = 0; c < full; c++) {
            bool sink = c < S / g->P;

            len = encode(g, sink ? KVP_CODEC_FP16 : codec, sink ? KVP_PAGE_F_SINK : 0, l, c, g->P,
                         buf, cap);
            sealed += len;
            node_p->ssd_index += len <= 4096 ? len : 0; /* kept inline in the index */
            CHECK_OK(kvp_store_page_put(store, ns, buf, len));
        }
        if (r != 0) {
            len = encode(g, KVP_CODEC_FP16, KVP_PAGE_F_TAIL, l, full, r, d.tail + d.tail_len, cap);
            d.tail_len += len;
        }
    }
    pages = sealed + d.tail_len;
    CHECK_OK(kvp_session_desc_pack(&d, &blob, &len));
    *pages_p   = pages;
    *session_p = sealed + len;
    kvp_free(blob);
    /* the record, tail included, as a node writes it: in its envelope (version, key check) */
    snprintf(sid, sizeof(sid), "plan-%" PRIu64, ns);
    CHECK_OK(kvp_store_record_pack(&d, 1, ns, sid, &blob, &len));
    node_p->ssd_index += len;
    CHECK_OK(kvp_store_session_put_version(store, ns, sid, &d, 1));
    kvp_store_stats(store, &after);
    node_p->dram     = after.dram_bytes - before.dram_bytes;
    node_p->seg_live = after.disk_live_bytes - before.disk_live_bytes;
    kvp_free(blob);
    kvp_free(d.chunk_keys);
    kvp_free(d.tail);
    kvp_free(buf);
}

static uint64_t json_u64(const char *js, const char *key)
{
    char        pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    p = strstr(js, pat);
    CHECK(p != NULL);
    return strtoull(p + strlen(pat), NULL, 10);
}

static void plan_session(const char *kvpack, const geom_t *g, kvp_codec_id_t codec, uint32_t T,
                         uint32_t S, uint64_t *pages_p, uint64_t *session_p, uint64_t *dram_p,
                         uint64_t *ssd_p)
{
    char  cmd[512], out[8192];
    FILE *f;
    size_t n;

    snprintf(cmd, sizeof(cmd),
             "%s plan --layers %u --kv-heads %u --head-dim %u --page-tokens %u --codec %s "
             "--tokens %u --sink-tokens %u --json", kvpack, g->L, g->H, g->D, g->P,
             kvp_codec_name(codec), T, S);
    f = popen(cmd, "r");
    CHECK(f != NULL);
    n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    CHECK(pclose(f) == 0);
    *pages_p   = json_u64(out, "page_bytes");
    *session_p = json_u64(out, "session_bytes");
    *dram_p    = json_u64(out, "session_dram_bytes");
    *ssd_p     = json_u64(out, "session_ssd_bytes");
}

int main(int argc, char **argv)
{
    static const kvp_codec_id_t codecs[] = {KVP_CODEC_FP16, KVP_CODEC_KIVI, KVP_CODEC_KIVI128,
                                            KVP_CODEC_OSCAR, KVP_CODEC_KVARN, KVP_CODEC_NAIVE2};
    static const geom_t geoms[] = {{2, 2, 64, 32}, {1, 8, 128, 128}, {3, 3, 64, 48}};
    int                 checked = 0;
    char                dir[] = "/tmp/kvp_plan_bytes_XXXXXX", cmd[64];
    kvp_store_params_t  sp = {0};

    CHECK(argc == 2);
    CHECK(mkdtemp(dir) != NULL);
    sp.field_mask  = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DURABILITY |
                     KVP_STORE_PARAM_DB_PATH;
    sp.dram_budget = 1ull << 30; /* everything stays in DRAM: nothing is evicted */
    sp.durability  = KVP_DURABILITY_WRITE_THROUGH;
    sp.db_path     = dir;
    CHECK_OK(kvp_store_open(&sp, &store));
    for (size_t gi = 0; gi < sizeof(geoms) / sizeof(geoms[0]); gi++) {
        const geom_t *g = &geoms[gi];
        /* T < P, T = P, T = 3P, T = 3P + r, and with a one-page sink: T < P, 2P + 1 */
        const uint32_t cases[][2] = {{g->P - 5, 0}, {g->P, 0}, {3 * g->P, 0}, {3 * g->P + 7, 0},
                                     {g->P / 2, g->P}, {2 * g->P + 1, g->P}, {3 * g->P, 2 * g->P}};

        for (size_t ci = 0; ci < sizeof(codecs) / sizeof(codecs[0]); ci++) {
            for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                uint64_t     rp, rs, pp, ps, pd, pssd;
                node_bytes_t nb;

                real_session(g, codecs[ci], cases[k][0], cases[k][1], &rp, &rs, &nb);
                plan_session(argv[1], g, codecs[ci], cases[k][0], cases[k][1], &pp, &ps, &pd,
                             &pssd);
                EXPECT(rp == pp && rs == ps,
                       "%s L%u H%u D%u P%u T%u sink %u: encoded pages %" PRIu64 " session %"
                       PRIu64 ", plan %" PRIu64 " / %" PRIu64, kvp_codec_name(codecs[ci]), g->L,
                       g->H, g->D, g->P, cases[k][0], cases[k][1], rp, rs, pp, ps);
                EXPECT(nb.dram == pd && nb.seg_live + nb.ssd_index == pssd,
                       "%s L%u H%u D%u P%u T%u sink %u: the store holds %" PRIu64 " B in DRAM, %"
                       PRIu64 " B in segments + %" PRIu64 " B in its index; plan says %" PRIu64
                       " / %" PRIu64, kvp_codec_name(codecs[ci]), g->L, g->H, g->D, g->P,
                       cases[k][0], cases[k][1], nb.dram, nb.seg_live, nb.ssd_index, pd, pssd);
                checked++;
            }
        }
    }
    kvp_store_close(store);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    printf("test_plan_bytes: %d sessions encoded, stored and compared\n", checked);
    return kvp_test_result("test_plan_bytes");
}
