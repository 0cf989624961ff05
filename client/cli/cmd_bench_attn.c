/* cmd_bench_attn.c - "kvpack bench attn": one decode step (Hq queries of one layer) over a long
 * context, per codec: attention straight over the packed pages (kvp_attn_compute) against two
 * baselines in the same run: (a) decode-then-attend, every page kvp_page_decode'd to fp16 into a
 * [T][H][D] buffer, then the same fp32 attention over it (kvp_attn_compute_f16), and (b) that
 * attention over fp16 K/V already in memory (an fp16 cache). Before each timed call the caches
 * are flushed by reading a 64 MiB buffer, so every method starts from DRAM as a decode step
 * does when other layers ran in between. Rounds alternate the three; medians are reported,
 * with the output error of the fused call against (a) (fp16 rounding of the decoded values) and
 * (b) (the codec's attention error on this KV). Never asserts speed. */
#include "cli.h"
#include "kvpack/alloc.h"
#include "kvpack/attn.h"
#include "kvpack/codec.h"
#include "eval/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EVICT_BYTES ((size_t)64 << 20)
#define MAX_ROUNDS  64

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack bench attn [options]\n"
            "  --codec NAME       fp16|kivi|kivi128|oscar|kvarn|all (default all)\n"
            "  --tokens T         context length (default 32768)\n"
            "  --heads H          KV heads (default 8)\n"
            "  --q-heads Hq       query heads, a multiple of H (default 32)\n"
            "  --head-dim D       (default 128)\n"
            "  --page-tokens P    tokens per page (default 128); T %% P tokens form the fp16 tail\n"
            "  --rounds N         rounds of the three methods, medians kept (default 3)\n"
            "  --impl NAME        ref|avx2 (default: the one chosen at start-up)\n"
            "  --json             machine-readable output\n");
}

typedef struct {
    uint32_t         T, H, Hq, D, P, rounds;
    size_t           row;              /* H*D */
    uint16_t        *k16, *v16;        /* the context as fp16 [T][H][D] */
    uint16_t        *kd, *vd;          /* decode target of baseline (a) */
    float           *q, *out_f, *out_d, *out_h;
    uint8_t         *evict;
    void            *scratch;
    kvp_attn_params_t prm;
} bench_t;

/* The context: one layer of kvpack eval's synthetic KV (outlier channels, sinks, a norm jump;
 * client/eval/eval.h) as fp16. Query head j (KV head j / g) points along the difference of two
 * keys, scaled so its logits over the first 4,096 tokens have std 3 (eval's recipe: attention
 * neither uniform nor one-hot). */
static int fill(bench_t *b)
{
    kvp_kv_t kv;
    uint32_t g = b->Hq / b->H, nl = b->T < 4096 ? b->T : 4096;

    if (kvp_kv_synthetic(&kv, 1, b->T, b->H, b->D, 1) != KVP_OK) {
        fprintf(stderr, "kvpack bench attn: out of memory for the synthetic KV\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)b->T * b->row; i++) {
        b->k16[i] = kvp_f32_to_f16(kv.k[i]);
        b->v16[i] = kvp_f32_to_f16(kv.v[i]);
    }
    for (uint32_t j = 0; j < b->Hq; j++) {
        const float *ka = kv.k + ((size_t)((j * 7919u + 1) % b->T) * b->H + j / g) * b->D;
        const float *kb = kv.k + ((size_t)((j * 104729u + 7) % b->T) * b->H + j / g) * b->D;
        float       *q  = b->q + (size_t)j * b->D;
        double       s = 0, s2 = 0, sd;

        for (uint32_t d = 0; d < b->D; d++) {
            q[d] = ka[d] - kb[d];
        }
        for (uint32_t t = 0; t < nl; t++) {
            const float *kt = kv.k + ((size_t)t * b->H + j / g) * b->D;
            double       l  = 0;

            for (uint32_t d = 0; d < b->D; d++) {
                l += (double)q[d] * kt[d];
            }
            l /= sqrt((double)b->D);
            s += l;
            s2 += l * l;
        }
        sd = sqrt(fmax(s2 / nl - (s / nl) * (s / nl), 0.0));
        for (uint32_t d = 0; d < b->D; d++) {
            q[d] = (float)(q[d] * (sd > 1e-12 ? 3.0 / sd : 1.0));
        }
    }
    kvp_kv_free(&kv);
    return 0;
}

static float evict_caches(const bench_t *b)
{
    uint64_t acc = 0;

    for (size_t i = 0; i < EVICT_BYTES; i += 64) {
        acc += b->evict[i];
    }
    return (float)acc;
}

typedef struct {
    uint8_t        **pg;
    kvp_attn_page_t *ap, tail;
    size_t           n, bytes;
    int              has_tail;
} pages_t;

static void pages_free(pages_t *p)
{
    for (size_t i = 0; p->pg != NULL && i <= p->n; i++) {
        kvp_free(p->pg[i]);
    }
    kvp_free(p->pg);
    kvp_free(p->ap);
    memset(p, 0, sizeof(*p));
}

/* full pages of P tokens in the codec, the rest as the fp16 tail */
static kvp_status_t pages_make(const bench_t *b, kvp_codec_id_t codec, pages_t *p)
{
    uint32_t          nfull = b->T / b->P, rest = b->T % b->P;
    kvp_page_params_t pp = {.codec = codec, .heads = b->H, .head_dim = b->D, .page_tokens = b->P};
    kvp_status_t      st = KVP_OK;

    memset(p, 0, sizeof(*p));
    p->pg = kvp_calloc(nfull + 1, sizeof(*p->pg), "bench attn");
    p->ap = kvp_calloc(nfull + 1, sizeof(*p->ap), "bench attn");
    if (p->pg == NULL || p->ap == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i <= nfull && st == KVP_OK; i++) {
        uint32_t t0 = i * b->P, nt = i < nfull ? b->P : rest;
        size_t   cap, len = 0;

        if (nt == 0) {
            break;
        }
        if (i == nfull) {
            pp.codec = KVP_CODEC_FP16;
            pp.flags = KVP_PAGE_F_TAIL;
        }
        pp.first_pos = t0;
        cap          = kvp_page_max_bytes(&pp);
        p->pg[i]     = kvp_malloc(cap, "bench attn page");
        if (p->pg[i] == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        st = kvp_page_encode(&pp, KVP_DTYPE_F16, b->k16 + t0 * b->row, b->v16 + t0 * b->row, nt,
                             p->pg[i], cap, &len);
        if (i < nfull) {
            p->ap[i] = (kvp_attn_page_t){p->pg[i], len};
            p->n++;
        } else {
            p->tail     = (kvp_attn_page_t){p->pg[i], len};
            p->has_tail = 1;
        }
        p->bytes += len;
        kvp_progress("encode pages", i + 1, nfull + (rest > 0));
    }
    kvp_progress_done();
    return st;
}

static kvp_status_t run_fused(bench_t *b, const pages_t *p)
{
    return kvp_attn_compute(&b->prm, p->ap, p->n, p->has_tail ? &p->tail : NULL, b->q, b->Hq,
                            b->out_f);
}

static kvp_status_t run_decode(bench_t *b, const pages_t *p)
{
    kvp_status_t st = KVP_OK;

    for (size_t i = 0; i <= p->n && st == KVP_OK; i++) {
        const kvp_attn_page_t *pg = i < p->n ? &p->ap[i] : &p->tail;
        size_t                 off = i * b->P * b->row;

        if (i == p->n && !p->has_tail) {
            break;
        }
        st = kvp_page_decode(pg->data, pg->len, KVP_DTYPE_F16, KVP_FRAME_ORIGINAL, b->kd + off,
                             b->vd + off, NULL);
    }
    if (st == KVP_OK) {
        st = kvp_attn_compute_f16(&b->prm, b->kd, b->vd, b->T, b->H, b->D, b->q, b->Hq, b->out_d);
    }
    return st;
}

static kvp_status_t run_fp16(bench_t *b)
{
    return kvp_attn_compute_f16(&b->prm, b->k16, b->v16, b->T, b->H, b->D, b->q, b->Hq, b->out_h);
}

typedef struct {
    double fused, decode, fp16; /* medians, seconds */
    double err_d, err_h;
    size_t bytes;
} result_t;

static int bench_codec(bench_t *b, kvp_codec_id_t codec, result_t *r)
{
    double       t[3][MAX_ROUNDS];
    pages_t      p;
    kvp_status_t st = pages_make(b, codec, &p);
    volatile float sink = 0;

    for (uint32_t rd = 0; rd < b->rounds && st == KVP_OK; rd++) {
        for (int m = 0; m < 3 && st == KVP_OK; m++) {
            int    which = (m + (int)rd) % 3; /* rotate the order from round to round */
            double t0;

            sink += evict_caches(b);
            t0 = kvp_time_s();
            st = which == 0 ? run_fused(b, &p) : which == 1 ? run_decode(b, &p) : run_fp16(b);
            t[which][rd] = kvp_time_s() - t0;
        }
        kvp_progress(kvp_codec_name(codec), rd + 1, b->rounds);
    }
    kvp_progress_done();
    (void)sink;
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack bench attn: %s: %s\n", kvp_codec_name(codec), kvp_status_str(st));
        pages_free(&p);
        return 1;
    }
    for (int m = 0; m < 3; m++) {
        kvp_sort_f64(t[m], b->rounds);
    }
    r->fused  = kvp_median_sorted(t[0], b->rounds);
    r->decode = kvp_median_sorted(t[1], b->rounds);
    r->fp16   = kvp_median_sorted(t[2], b->rounds);
    r->err_d  = kvp_rel_err(b->out_f, b->out_d, (size_t)b->Hq * b->D);
    r->err_h  = kvp_rel_err(b->out_f, b->out_h, (size_t)b->Hq * b->D);
    r->bytes  = p.bytes;
    pages_free(&p);
    return 0;
}

static int setup(bench_t *b)
{
    size_t n = (size_t)b->T * b->row, need = kvp_attn_scratch_bytes(b->Hq, b->H, b->D, b->P);

    b->k16     = kvp_malloc(n * 2, "bench attn");
    b->v16     = kvp_malloc(n * 2, "bench attn");
    b->kd      = kvp_malloc(n * 2, "bench attn");
    b->vd      = kvp_malloc(n * 2, "bench attn");
    b->q       = kvp_malloc((size_t)b->Hq * b->D * 4, "bench attn");
    b->out_f   = kvp_calloc((size_t)b->Hq * b->D, 4 * 3, "bench attn");
    b->evict   = kvp_calloc(EVICT_BYTES, 1, "bench attn");
    b->scratch = need > 0 ? kvp_malloc(need, "bench attn") : NULL;
    if (b->k16 == NULL || b->v16 == NULL || b->kd == NULL || b->vd == NULL || b->q == NULL ||
        b->out_f == NULL || b->evict == NULL || b->scratch == NULL) {
        fprintf(stderr, "kvpack bench attn: out of memory for %u tokens\n", b->T);
        return 1;
    }
    /* written once, untimed: calloc'd memory never written maps every page to the kernel's one
     * zero page, so reading it flushed nothing (a review measured a hot 8 MiB set as hot after
     * it); and the decode buffers' first-touch page faults out of round 0's decode-then-attend
     * (it was 3x the later rounds, so --rounds 1 or 2 inflated fused_vs_decode) */
    memset(b->evict, 0x5a, EVICT_BYTES);
    memset(b->kd, 0, n * 2);
    memset(b->vd, 0, n * 2);
    b->out_d             = b->out_f + (size_t)b->Hq * b->D;
    b->out_h             = b->out_d + (size_t)b->Hq * b->D;
    b->prm.field_mask    = KVP_ATTN_PARAM_SCRATCH;
    b->prm.scratch       = b->scratch;
    b->prm.scratch_bytes = need;
    return fill(b);
}

static void teardown(bench_t *b)
{
    kvp_free(b->k16), kvp_free(b->v16), kvp_free(b->kd), kvp_free(b->vd);
    kvp_free(b->q), kvp_free(b->out_f), kvp_free(b->evict), kvp_free(b->scratch);
}

static void report(const bench_t *b, const char *codec, const result_t *r, int json, kvp_json_t *j)
{
    double fp16_bytes = 4.0 * b->T * b->row, bits = 8.0 * r->bytes / (2.0 * b->T * b->row);

    if (!json) {
        printf("%-8s %6.2f %9.0f %7.2f %9.2f %9.2f %8.2f %8.2f %9.2g %9.2g\n", codec, bits,
               b->T / r->fused, r->bytes / r->fused / 1e9, r->decode * 1e3, r->fp16 * 1e3,
               r->decode / r->fused, r->fp16 / r->fused, r->err_d, r->err_h);
        return;
    }
    kvp_json_obj(j, NULL);
    kvp_json_str(j, "codec", codec);
    kvp_json_int(j, "page_bytes", (int64_t)r->bytes);
    kvp_json_num(j, "bits_per_elem", bits);
    kvp_json_num(j, "fused_s", r->fused);
    kvp_json_num(j, "fused_tokens_per_s", b->T / r->fused);
    kvp_json_num(j, "fused_gbps", r->bytes / r->fused / 1e9);
    kvp_json_num(j, "decode_attend_s", r->decode);
    kvp_json_num(j, "decode_attend_tokens_per_s", b->T / r->decode);
    kvp_json_num(j, "fp16_attend_s", r->fp16);
    kvp_json_num(j, "fp16_attend_tokens_per_s", b->T / r->fp16);
    kvp_json_num(j, "fp16_gbps", fp16_bytes / r->fp16 / 1e9);
    kvp_json_num(j, "fused_vs_decode", r->decode / r->fused);
    kvp_json_num(j, "fused_vs_fp16", r->fp16 / r->fused);
    kvp_json_num(j, "rel_err_vs_decode", r->err_d);
    kvp_json_num(j, "rel_err_vs_fp16", r->err_h);
    kvp_json_close(j);
}

/* NULL when codec takes b's geometry, else the rule of the geometries it takes */
static const char *geometry_refused(const bench_t *b, kvp_codec_id_t codec)
{
    kvp_page_params_t pp = {.codec = codec, .heads = b->H, .head_dim = b->D, .page_tokens = b->P};

    return kvp_codec_check(&pp) == KVP_OK ? NULL : kvp_codec_geometry_rule(codec);
}

int kvp_cmd_bench_attn(int argc, char **argv)
{
    static const kvp_codec_id_t all[] = {KVP_CODEC_FP16, KVP_CODEC_KIVI, KVP_CODEC_KIVI128,
                                         KVP_CODEC_OSCAR, KVP_CODEC_KVARN};
    const char *codec = "all", *impl = NULL, *rule;
    uint64_t    T = 32768, H = 8, Hq = 32, D = 128, P = 128, rounds = 3;
    bench_t     b;
    kvp_json_t  j;
    int         json = 0, rc = 0;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--codec", &codec) ||
            kvp_opt_u64(argc, argv, &i, "--tokens", &T) ||
            kvp_opt_u64(argc, argv, &i, "--heads", &H) ||
            kvp_opt_u64(argc, argv, &i, "--q-heads", &Hq) ||
            kvp_opt_u64(argc, argv, &i, "--head-dim", &D) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &P) ||
            kvp_opt_u64(argc, argv, &i, "--rounds", &rounds) ||
            kvp_opt_str(argc, argv, &i, "--impl", &impl)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            json = 1;
            continue;
        }
        return kvp_opt_unknown("bench attn", argv[i]);
    }
    if (!kvp_cli_range("bench attn", "--tokens", T, 1, 1u << 24) ||
        !kvp_cli_geometry("bench attn", "--heads", H, "--head-dim", D, "--page-tokens", P) ||
        !kvp_cli_range("bench attn", "--q-heads", Hq, 1, 1u << 16)) {
        return 2;
    }
    if (Hq % H != 0) {
        return kvp_cli_usage_error("bench attn", "--q-heads %llu is not a multiple of --heads %llu",
                                   (unsigned long long)Hq, (unsigned long long)H);
    }
    if (Hq / H > 1024) {
        return kvp_cli_usage_error("bench attn", "--q-heads %llu over --heads %llu is %llu query "
                                   "heads a KV head, at most 1024", (unsigned long long)Hq,
                                   (unsigned long long)H, (unsigned long long)(Hq / H));
    }
    if (!kvp_cli_range("bench attn", "--rounds", rounds, 1, MAX_ROUNDS)) {
        return 2;
    }
    /* the kernel's own rule, should it ever take less than the checks above let through */
    if (kvp_attn_scratch_bytes((uint32_t)Hq, (uint32_t)H, (uint32_t)D, (uint32_t)P) == 0) {
        return kvp_cli_usage_error("bench attn", "the attention kernel does not take --q-heads "
                                   "%llu over --heads %llu x --head-dim %llu",
                                   (unsigned long long)Hq, (unsigned long long)H,
                                   (unsigned long long)D);
    }
    if (P > T) {
        return kvp_cli_usage_error("bench attn", "--page-tokens %llu is more than --tokens %llu: "
                                   "every token would be in the fp16 tail, no codec page measured",
                                   (unsigned long long)P, (unsigned long long)T);
    }
    if (impl != NULL && kvp_attn_set_impl(impl) != KVP_OK) {
        return kvp_cli_usage_error("bench attn", "--impl %s is not available here", impl);
    }
    memset(&b, 0, sizeof(b));
    b = (bench_t){.T = (uint32_t)T, .H = (uint32_t)H, .Hq = (uint32_t)Hq, .D = (uint32_t)D,
                  .P = (uint32_t)P, .rounds = (uint32_t)rounds, .row = (size_t)H * D};
    if (strcmp(codec, "all") != 0) {
        kvp_codec_id_t c;

        if (!kvp_cli_codec("bench attn", codec, "all", &c)) {
            return 2;
        }
        if (c == KVP_CODEC_NAIVE2) {
            return kvp_cli_usage_error("bench attn", "codec naive2 has no attention kernel "
                                                     "(fp16|kivi|kivi128|oscar|kvarn|all)");
        }
        rule = geometry_refused(&b, c);
        if (rule != NULL) {
            return kvp_cli_usage_error("bench attn", "%s does not support this geometry (it takes "
                                       "%s)", kvp_codec_name(c), rule);
        }
    }
    if (setup(&b) != 0) {
        teardown(&b);
        return 1;
    }
    if (json) {
        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "bench", "attn");
        kvp_json_str(&j, "impl", kvp_attn_impl_name());
        kvp_json_int(&j, "tokens", (int64_t)T);
        kvp_json_int(&j, "heads", (int64_t)H);
        kvp_json_int(&j, "q_heads", (int64_t)Hq);
        kvp_json_int(&j, "head_dim", (int64_t)D);
        kvp_json_int(&j, "page_tokens", (int64_t)P);
        kvp_json_int(&j, "rounds", (int64_t)rounds);
        kvp_json_int(&j, "fp16_bytes", (int64_t)(4 * T * H * D));
        kvp_json_arr(&j, "codecs");
    } else {
        printf("attn, impl %s: %llu tokens x %llu KV heads x %llu, %llu query heads, P %llu "
               "(medians of %llu, caches flushed before each call)\n",
               kvp_attn_impl_name(), (unsigned long long)T, (unsigned long long)H,
               (unsigned long long)D, (unsigned long long)Hq, (unsigned long long)P,
               (unsigned long long)rounds);
        printf("%-8s %6s %9s %7s %9s %9s %8s %8s %9s %9s\n", "codec", "bits", "fused_t/s",
               "GB/s", "dec+at_ms", "fp16_ms", "vs_dec", "vs_fp16", "err_dec", "err_fp16");
    }
    for (size_t c = 0; c < sizeof(all) / sizeof(all[0]) && rc == 0; c++) {
        result_t r;

        if (strcmp(codec, "all") != 0 && strcmp(codec, kvp_codec_name(all[c])) != 0) {
            continue;
        }
        rule = geometry_refused(&b, all[c]);
        if (rule != NULL) { /* as bench codec: the others go on */
            fprintf(stderr, "kvpack bench attn: %s does not support this geometry (it takes %s), "
                    "skipped\n", kvp_codec_name(all[c]), rule);
            continue;
        }
        rc = bench_codec(&b, all[c], &r);
        if (rc == 0) {
            report(&b, kvp_codec_name(all[c]), &r, json, &j);
        }
    }
    if (json) {
        kvp_json_close(&j);
        kvp_json_end(&j);
    }
    teardown(&b);
    return rc;
}
