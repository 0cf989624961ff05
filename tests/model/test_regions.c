/* test_regions.c - cache regions of the model runner on stories260K (../shared/realdata): the
 * reference defaults per codec, the sealing schedule of eviction batches, residual windows and
 * sinks token by token, which rows attention reads in fp16 (sink, V window, residual) and which
 * are quantized, a sink covering everything equals the fp16 lane, effective bits against an
 * independent count, and bare-only operations refusing other regions.
 * Usage: test_regions REALDATA_DIR (exit 77 if absent). */
#include "model/model.h"
#include "model/run.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/log.h"
#include "check.h"
#include "stories_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#define P   32u
#define N   300u

enum { L_FP16, L_KIVI_REF, L_OSCAR_REF, L_KIVI_R100, L_KIVI_S2, L_KIVI_SALL, L_KIVI_BARE, NL };

static void test_defaults(void)
{
    kvp_kvc_regions_t r, bad = {.evict = 48};

    r = kvp_kvc_regions_ref(KVP_CODEC_KIVI, 128);
    EXPECT(r.sink_pages == 0 && r.residual == 0 && r.evict == 128 && r.v_residual == 128,
          "kivi reference: K flushed per 128, V window 128");
    r = kvp_kvc_regions_ref(KVP_CODEC_KIVI128, 64);
    EXPECT(r.evict == 128 && r.v_residual == 128, "kivi128 at P=64: evict %u", r.evict);
    r = kvp_kvc_regions_ref(KVP_CODEC_KIVI, 256);
    EXPECT(r.evict == 256, "evict rounds up to a multiple of P (%u)", r.evict);
    r = kvp_kvc_regions_ref(KVP_CODEC_OSCAR, 128);
    EXPECT(r.evict == 256 && r.sink_pages == 0 && r.v_residual == 0, "oscar evicts at 256");
    r = kvp_kvc_regions_ref(KVP_CODEC_KVARN, 32);
    EXPECT(r.sink_pages == 4 && r.evict == 0 && r.residual == 0, "kvarn sink is 128 tokens");
    r = kvp_kvc_regions_ref(KVP_CODEC_NAIVE2, 128);
    EXPECT(r.sink_pages == 0 && r.residual == 0 && r.evict == 0 && r.v_residual == 0,
          "naive2 is bare");
    EXPECT(kvp_kvc_regions_check(&bad, P) == KVP_ERR_INVALID, "evict 48 at P=32 is refused");
}

/* Sealed tokens after n commits, derived from the region rules independently of kvcache.c. */
static uint32_t want_sealed(uint32_t lane, uint32_t n)
{
    switch (lane) {
    case L_KIVI_REF:
        return n / 128 * 128;
    case L_OSCAR_REF:
        return n / 256 * 256;
    case L_KIVI_R100:
        return n >= 100 ? (n - 100) / P * P : 0;
    default:
        return n / P * P;
    }
}

static kvp_run_t *g_run;
static uint32_t   g_bad;

/* Per-step progress hook: every lane sealed exactly what the rules say after `done` commits. */
static void check_schedule(uint64_t done, uint64_t total)
{
    (void)total;
    for (uint32_t l = 1; l < NL; l++) {
        g_bad += g_run->cache[l]->sealed != want_sealed(l, (uint32_t)done);
    }
}

static uint32_t count_diff(const float *a, const float *b, size_t n)
{
    uint32_t d = 0;

    for (size_t i = 0; i < n; i++) {
        d += a[i] != b[i];
    }
    return d;
}

static void test_run(const kvp_model_t *m, const uint32_t *ids)
{
    kvp_codec_id_t    lanes[NL] = {KVP_CODEC_FP16, KVP_CODEC_KIVI, KVP_CODEC_OSCAR,
                                   KVP_CODEC_KIVI, KVP_CODEC_KIVI, KVP_CODEC_KIVI,
                                   KVP_CODEC_KIVI};
    kvp_kvc_regions_t r100 = {.residual = 100}, s2 = {.sink_pages = 2}, sall = {.sink_pages = 100};
    kvp_kvc_regions_t rk   = kvp_kvc_regions_ref(KVP_CODEC_KIVI, P);
    kvp_kvc_regions_t ro   = kvp_kvc_regions_ref(KVP_CODEC_OSCAR, P);
    kvp_run_t        *run;
    kvp_status_t      st;
    size_t            row;

    for (uint32_t l = 1; l < NL; l++) {
        kvp_page_params_t pp = {.codec = lanes[l], .heads = m->cfg.kv_heads,
                                .head_dim = m->cfg.head_dim, .page_tokens = P};

        if (kvp_codec_check(&pp) != KVP_OK) {
            EXPECT(0, "%s accepts stories260K at P=%u", kvp_codec_name(lanes[l]), P);
            return;
        }
    }
    st = kvp_run_create(m, lanes, NL, P, N, 0, &run);
    EXPECT(st == KVP_OK, "run create: %s", kvp_status_str(st));
    if (st != KVP_OK) {
        return;
    }
    st = kvp_run_set_regions(run, L_KIVI_REF, &rk, NULL);
    if (st == KVP_OK) {
        st = kvp_run_set_regions(run, L_OSCAR_REF, &ro, NULL);
    }
    if (st == KVP_OK) {
        st = kvp_run_set_regions(run, L_KIVI_R100, &r100, "kivi@r100");
    }
    if (st == KVP_OK) {
        st = kvp_run_set_regions(run, L_KIVI_S2, &s2, "kivi@s2");
    }
    if (st == KVP_OK) {
        st = kvp_run_set_regions(run, L_KIVI_SALL, &sall, "kivi@s100");
    }
    EXPECT(st == KVP_OK, "set regions: %s", kvp_status_str(st));
    EXPECT(strcmp(run->stat[L_KIVI_S2].name, "kivi@s2") == 0 &&
          strcmp(run->stat[L_KIVI_REF].name, "kivi") == 0, "lane labels");
    g_run         = run;
    run->progress = check_schedule;
    if (st == KVP_OK) {
        st = kvp_run_ppl(run, ids, N);
    }
    EXPECT(st == KVP_OK, "ppl: %s", kvp_status_str(st));
    EXPECT(g_bad == 0, "%u lane-steps sealed a different number of tokens than the rules say",
          g_bad);
    st = kvp_run_set_regions(run, L_KIVI_S2, &s2, NULL);
    EXPECT(st == KVP_ERR_INVALID, "regions cannot change after the first step");
    row = run->cache[0]->row;

    /* layer 0 K/V depend only on token and position: compare lanes with the fp16 lane */
    {
        const kvp_kvc_t *f = run->cache[L_FP16], *s = run->cache[L_KIVI_S2];
        const kvp_kvc_t *k = run->cache[L_KIVI_REF], *o = run->cache[L_OSCAR_REF];
        const kvp_kvc_t *w = run->cache[L_KIVI_R100];
        size_t           sink = 2 * P * row, quant = (N / P * P - 2 * P) * row;

        EXPECT(memcmp(kvp_kvc_k(s, 0), kvp_kvc_k(f, 0), sink * sizeof(float)) == 0 &&
              memcmp(kvp_kvc_v(s, 0), kvp_kvc_v(f, 0), sink * sizeof(float)) == 0,
              "sink rows are fp16");
        EXPECT(count_diff(kvp_kvc_k(s, 0) + sink, kvp_kvc_k(f, 0) + sink, quant) > quant / 2,
              "rows after the sink are quantized");
        EXPECT(s->sink_bytes > 0 && s->page_elems == 2ull * (N / P - 2) * P * row * s->p.layers,
              "sink pages are not counted as codec pages");
        /* kivi reference: V of the last 128 tokens fp16 although 256 tokens are sealed */
        EXPECT(k->sealed == 256 && k->v_swapped == N - 128, "kivi sealed %u, V swapped %u",
              k->sealed, k->v_swapped);
        EXPECT(memcmp(kvp_kvc_v(k, 0) + (N - 128) * row, kvp_kvc_v(f, 0) + (N - 128) * row,
                     128 * row * sizeof(float)) == 0, "V window rows are fp16");
        EXPECT(count_diff(kvp_kvc_v(k, 0), kvp_kvc_v(f, 0), (N - 128) * row) > (N - 128) * row / 2,
              "V rows older than the window are quantized");
        EXPECT(count_diff(kvp_kvc_k(k, 0) + (N - 128) * row, kvp_kvc_k(f, 0) + (N - 128) * row,
                         (256 - (N - 128)) * row) > (256 - (N - 128)) * row / 2,
              "sealed K rows inside the V window are quantized");
        /* oscar evicted once: tokens 256.. are residual fp16 */
        EXPECT(memcmp(kvp_kvc_k(o, 0) + 256 * row, kvp_kvc_k(f, 0) + 256 * row,
                     (N - 256) * row * sizeof(float)) == 0, "oscar residual rows are fp16");
        /* residual window 100: the last 100 tokens are fp16 */
        EXPECT(memcmp(kvp_kvc_k(w, 0) + (N - 100) * row, kvp_kvc_k(f, 0) + (N - 100) * row,
                     100 * row * sizeof(float)) == 0, "residual window rows are fp16");
    }
    kvp_run_finish(run);

    /* a sink covering the whole context is the fp16 lane */
    EXPECT(run->stat[L_KIVI_SALL].kl_sum == 0.0 && run->stat[L_KIVI_SALL].top1_agree == 1.0 &&
          run->stat[L_KIVI_SALL].nll_sum == run->stat[L_FP16].nll_sum,
          "all-sink lane equals fp16 (kl %g)", run->stat[L_KIVI_SALL].kl_sum);
    EXPECT(run->stat[L_KIVI_SALL].bits_per_elem == run->stat[L_FP16].bits_per_elem,
          "all-sink bits %.6f, fp16 %.6f", run->stat[L_KIVI_SALL].bits_per_elem,
          run->stat[L_FP16].bits_per_elem);

    /* effective bits of the bare lane: codec pages + fp16 tail pages, summed over commits */
    {
        kvp_page_params_t pq = {.codec = KVP_CODEC_KIVI, .heads = m->cfg.kv_heads,
                                .head_dim = m->cfg.head_dim, .page_tokens = P};
        double            page = (double)kvp_page_max_bytes(&pq), held = 0.0, elems = 0.0, want;
        double            got  = run->stat[L_KIVI_BARE].bits_per_elem;

        for (uint32_t n = 1; n <= N; n++) {
            uint32_t u = n % P;

            held += m->cfg.layers * ((n / P) * page + (u ? KVP_PAGE_HDR_BYTES : 0) +
                                     2.0 * 2.0 * u * row);
            elems += 2.0 * n * row * m->cfg.layers;
        }
        want = 8.0 * held / elems;
        EXPECT(fabs(got - want) < 1e-9, "bare effective bits %.9f, counted %.9f", got, want);
        EXPECT(fabs(run->stat[L_KIVI_BARE].bits_page - 8.0 * page / (2.0 * P * row)) < 1e-9,
              "bare page bits %.6f", run->stat[L_KIVI_BARE].bits_page);
        EXPECT(run->stat[L_KIVI_REF].bits_per_elem > got &&
              run->stat[L_KIVI_REF].bits_page == run->stat[L_KIVI_BARE].bits_page,
              "the V window costs effective bits, not page bits");
    }
    for (uint32_t l = 0; l < NL; l++) {
        const kvp_lane_stat_t *s = &run->stat[l];

        printf("  %-12s ppl %8.3f kl %.4f top1 %.3f bits %.3f (page %.3f)\n", s->name, s->ppl,
               s->kl_mean, s->top1_agree, s->bits_per_elem, s->bits_page);
    }

    /* one-tail-page packing is for bare caches, a sink allowed (its chunks are sealed pages) */
    {
        uint8_t        *blob = NULL;
        size_t          len;
        uint32_t        nt;
        kvp_page_info_t info;

        EXPECT(kvp_kvc_tail_pack(run->cache[L_KIVI_REF], &blob, &len, &nt) ==
                  KVP_ERR_UNSUPPORTED, "tail pack of a V-window cache is refused");
        EXPECT(kvp_kvc_tail_pack(run->cache[L_KIVI_S2], &blob, &len, &nt) == KVP_OK &&
                  (nt == 0 || nt == m->cfg.layers), "tail pack of a sink cache");
        if (nt > 0) { /* the first tail page parses on its own length */
            EXPECT(kvp_page_parse(blob, kvp_page_len_at(blob, len), &info) == KVP_OK &&
                      info.codec == KVP_CODEC_FP16 && (info.flags & KVP_PAGE_F_TAIL) &&
                      !(info.flags & KVP_PAGE_F_SINK), "sink cache tail page is an fp16 tail");
        }
        kvp_free(blob);
    }
    kvp_run_destroy(run);
}

int main(int argc, char **argv)
{
    kvp_model_t *m;
    char        *emma;
    size_t       elen, n;
    uint32_t    *ids;
    int          rc = kvp_test_stories_load(argc, argv, "test_regions", 4000, &m, &emma, &elen);

    if (rc >= 0) {
        return rc;
    }
    test_defaults();
    if (kvp_tok_encode(m->tok, emma, elen, 1, &ids, &n) == KVP_OK && n >= N) {
        test_run(m, ids);
        kvp_free(ids);
    } else {
        EXPECT(0, "emma excerpt tokenizes to >= %u tokens", N);
    }
    free(emma);
    kvp_model_free(m);
    return kvp_test_result("test_regions");
}
