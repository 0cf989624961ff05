/* cmd_bench_codec.c - "kvpack bench codec": encode and decode throughput per codec and
 * implementation, in GB/s of fp16 KV (K and V, 2 bytes per element), over a working set larger
 * than the last-level cache, against memcpy of the same buffers in the same run. fp16 in for
 * encode, fp16 out for decode (original frame; rotated frame too for the rotating codecs).
 * Paired rounds: each round copies the whole working set once (one memcpy call, so glibc takes
 * its large-copy path) and then runs the codec for a window of about the same length from the
 * first page (cold: the copy has streamed 256 MiB through the cache since); the round's ratio is
 * codec GB/s over that memcpy's. Reported: the medians over --rounds rounds of each rate and of
 * the ratios, with the ratios' range, so load that comes and goes on a shared machine hits both
 * sides of a pair alike. --threads N splits the pages (and memcpy's bytes) into N contiguous
 * ranges, one thread each, timed from start to the last thread's end: N = 1 (default) is the
 * codec's per-core speed, more threads compare a node's cores against the memory bandwidth
 * memcpy reaches with as many. Prints JSON with --json; never asserts speed. */
#include "cli.h"
#include "kvpack/alloc.h"
#include "kvpack/codec.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KVP_BENCH_MAX_THREADS 64

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack bench codec [options]\n"
            "  --codec NAME       fp16|kivi|kivi128|oscar|kvarn|naive2|all (default all)\n"
            "  --impl NAME        only this implementation (ref|avx2; default every one)\n"
            "  --heads N --head-dim N --page-tokens N   geometry (8 128 128)\n"
            "  --mib N            fp16 KV working set in MiB (default 256, > LLC)\n"
            "  --rounds N         paired memcpy + codec rounds, medians kept (default 9)\n"
            "  --window-s S       codec time per round in seconds (default 0.04; at least\n"
            "                     one page per thread)\n"
            "  --threads N        codec calls and memcpy on N threads, pages split (default 1)\n"
            "  --json             machine-readable output\n");
}

typedef struct {
    uint32_t  heads, dim, P, npages;
    uint32_t  threads;
    size_t    page_elems, page_cap;
    uint16_t *in;   /* npages x (K, V) fp16 */
    uint16_t *out;  /* same shape, decode target */
    uint8_t  *pages;
    size_t   *lens;  /* 0: the page slot holds no page of the codec under test (decode stops) */
    double    window_s;
} bench_t;

/* one thread's share of a pass: pages [lo, hi) */
typedef struct {
    bench_t                 *b;
    const kvp_page_params_t *pp;
    int                      dir;
    kvp_frame_t              fr;
    uint32_t                 lo, hi, done;
    double                   t0;
    int                      err;
} worker_t;

static void *pass_range(void *arg)
{
    worker_t *w = arg;
    bench_t  *b = w->b;

    for (uint32_t i = w->lo; i < w->hi; i++) {
        uint16_t    *kin = b->in + 2 * i * b->page_elems;
        uint8_t     *pg  = b->pages + i * b->page_cap;
        kvp_status_t st;

        if (w->dir == 0) {
            b->lens[i] = 0;
            st = kvp_page_encode(w->pp, KVP_DTYPE_F16, kin, kin + b->page_elems, b->P, pg,
                                 b->page_cap, &b->lens[i]);
        } else if (b->lens[i] == 0) {
            break; /* past the pages the encode windows reached */
        } else {
            uint16_t *kout = b->out + 2 * i * b->page_elems;

            st = kvp_page_decode(pg, b->lens[i], KVP_DTYPE_F16, w->fr, kout,
                                 kout + b->page_elems, NULL);
        }
        if (st != KVP_OK) {
            fprintf(stderr, "kvpack bench codec: %s page %u: %s\n", w->dir ? "decode" : "encode",
                    i, kvp_status_str(st));
            w->err = 1;
            return NULL;
        }
        w->done++;
        if (kvp_time_s() - w->t0 > b->window_s) {
            break;
        }
    }
    return NULL;
}

/* runs fn over b->threads workers, page ranges split evenly; returns the wall time */
static double run_workers(bench_t *b, worker_t *w, void *(*fn)(void *))
{
    pthread_t tid[KVP_BENCH_MAX_THREADS];
    uint32_t  n = b->threads, started = 1;
    double    t0 = kvp_time_s();

    for (uint32_t t = 0; t < n; t++) {
        w[t].t0 = t0;
    }
    for (uint32_t t = 1; t < n; t++, started++) {
        if (pthread_create(&tid[t], NULL, fn, &w[t]) != 0) {
            fprintf(stderr, "kvpack bench codec: cannot start thread %u of %u\n", t + 1, n);
            w[t].err = 1;
            break;
        }
    }
    fn(&w[0]);
    for (uint32_t t = 1; t < started; t++) {
        pthread_join(tid[t], NULL);
    }
    return kvp_time_s() - t0;
}

/* One window of encode (dir 0) or decode (dir 1, frame fr), each thread from the start of its
 * range; returns GB/s of fp16 KV. */
static double pass(bench_t *b, kvp_page_params_t *pp, int dir, kvp_frame_t fr, int *err)
{
    worker_t w[KVP_BENCH_MAX_THREADS];
    uint64_t done = 0;
    double   dt;

    for (uint32_t t = 0; t < b->threads; t++) {
        w[t] = (worker_t){.b = b, .pp = pp, .dir = dir, .fr = fr,
                          .lo = (uint32_t)((uint64_t)b->npages * t / b->threads),
                          .hi = (uint32_t)((uint64_t)b->npages * (t + 1) / b->threads)};
    }
    dt = run_workers(b, w, pass_range);
    for (uint32_t t = 0; t < b->threads; t++) {
        done += w[t].done;
        *err |= w[t].err;
    }
    return *err ? 0.0 : (double)done * b->page_elems * 2 * 2 / dt / 1e9;
}

typedef struct {
    bench_t *b;
    size_t   off, len;
} copy_part_t;

static void *copy_part(void *arg)
{
    copy_part_t *c = arg;

    memcpy((char *)c->b->out + c->off, (const char *)c->b->in + c->off, c->len);
    return NULL;
}

/* one memcpy of the whole input, its bytes split over b->threads threads (4 KiB aligned parts);
 * returns GB/s */
static double memcpy_gbs(bench_t *b)
{
    size_t      bytes = (size_t)b->npages * b->page_elems * 2 * 2;
    copy_part_t c[KVP_BENCH_MAX_THREADS];
    pthread_t   tid[KVP_BENCH_MAX_THREADS];
    uint32_t    started = 1;
    double      t0;

    for (uint32_t t = 0; t < b->threads; t++) {
        size_t lo = (bytes * t / b->threads) & ~(size_t)4095;
        size_t hi = t + 1 == b->threads ? bytes : (bytes * (t + 1) / b->threads) & ~(size_t)4095;

        c[t] = (copy_part_t){.b = b, .off = lo, .len = hi - lo};
    }
    t0 = kvp_time_s();
    for (uint32_t t = 1; t < b->threads; t++, started++) {
        if (pthread_create(&tid[t], NULL, copy_part, &c[t]) != 0) {
            break;
        }
    }
    for (uint32_t t = started; t < b->threads; t++) {
        copy_part(&c[t]); /* a thread that did not start: its part on this one */
    }
    copy_part(&c[0]);
    for (uint32_t t = 1; t < started; t++) {
        pthread_join(tid[t], NULL);
    }
    return (double)bytes / (kvp_time_s() - t0) / 1e9;
}

/* medians over the rounds of one direction: codec GB/s, memcpy GB/s, and codec/memcpy per
 * round (median, min, max) */
typedef struct {
    double gbs, memcpy_gbs, ratio, ratio_lo, ratio_hi;
} paired_t;

/* rounds x (memcpy of the whole working set, then a codec window); v holds 3 * rounds doubles */
static paired_t paired(bench_t *b, kvp_page_params_t *pp, int dir, kvp_frame_t fr, uint32_t rounds,
                       double *v, int *err)
{
    double  *g = v, *m = v + rounds, *r = v + 2 * (size_t)rounds;
    paired_t p = {0};

    for (uint32_t i = 0; i < rounds && !*err; i++) {
        m[i] = memcpy_gbs(b);
        g[i] = pass(b, pp, dir, fr, err);
        r[i] = g[i] / m[i];
    }
    if (*err) {
        return p;
    }
    kvp_sort_f64(g, rounds);
    kvp_sort_f64(m, rounds);
    kvp_sort_f64(r, rounds);
    p = (paired_t){.gbs = kvp_median_sorted(g, rounds), .memcpy_gbs = kvp_median_sorted(m, rounds),
                   .ratio = kvp_median_sorted(r, rounds), .ratio_lo = r[0], .ratio_hi = r[rounds - 1]};
    return p;
}

static void fill(bench_t *b)
{
    uint64_t s = 12345;
    size_t   n = (size_t)b->npages * b->page_elems * 2;

    for (size_t i = 0; i < n; i++) {
        float x;

        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x = ((float)(s & 0xFFFF) + (float)((s >> 16) & 0xFFFF) + (float)((s >> 32) & 0xFFFF) -
             98302.5f) / 32768.0f; /* roughly N(0, 0.5) */
        if (i % b->dim == 5) {
            x = x * 4.0f + 20.0f; /* an outlier channel */
        }
        b->in[i] = kvp_f32_to_f16(x);
    }
}

int kvp_cmd_bench_codec(int argc, char **argv)
{
    const char    *codec_s = "all", *impl_s = NULL;
    uint64_t       heads = 8, dim = 128, P = 128, mib = 256, rounds = 9, threads = 1;
    double         window_s = 0.04, mc, *v = NULL;
    bool           json = false;
    kvp_codec_id_t list[KVP_CODEC_MAX];
    int            nlist = 0, err = 0, done_impls = 0, total_impls = 0;
    bench_t        b;
    kvp_json_t     j;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--codec", &codec_s) ||
            kvp_opt_str(argc, argv, &i, "--impl", &impl_s) ||
            kvp_opt_u64(argc, argv, &i, "--heads", &heads) ||
            kvp_opt_u64(argc, argv, &i, "--head-dim", &dim) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &P) ||
            kvp_opt_u64(argc, argv, &i, "--mib", &mib) ||
            kvp_opt_u64(argc, argv, &i, "--rounds", &rounds) ||
            kvp_opt_u64(argc, argv, &i, "--threads", &threads) ||
            kvp_opt_f64(argc, argv, &i, "--window-s", &window_s)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--json")) {
            json = true;
        } else {
            return kvp_opt_unknown("bench codec", argv[i]);
        }
    }
    if (strcmp(codec_s, "all") == 0) {
        for (int c = KVP_CODEC_FP16; c < KVP_CODEC_MAX; c++) {
            list[nlist++] = (kvp_codec_id_t)c;
        }
    } else if (kvp_cli_codec("bench codec", codec_s, "all", &list[0])) {
        nlist = 1;
    } else {
        return 2;
    }
    if (!kvp_cli_range("bench codec", "--threads", threads, 1, KVP_BENCH_MAX_THREADS) ||
        !kvp_cli_geometry("bench codec", "--heads", heads, "--head-dim", dim, "--page-tokens", P) ||
        !kvp_cli_range("bench codec", "--mib", mib, 1, 16384) ||
        !kvp_cli_range("bench codec", "--rounds", rounds, 1, 1000)) {
        return 2;
    }
    if (!(window_s > 0) || window_s > 60) {
        return kvp_cli_usage_error("bench codec", "--window-s wants above 0 and at most 60, got %g",
                                   window_s);
    }
    memset(&b, 0, sizeof(b));
    b.heads      = (uint32_t)heads;
    b.dim        = (uint32_t)dim;
    b.P          = (uint32_t)P;
    b.window_s   = window_s;
    b.threads    = (uint32_t)threads;
    b.page_elems = (size_t)P * heads * dim;
    b.npages     = (uint32_t)((mib << 20) / (b.page_elems * 4));
    if (b.npages < 8) {
        fprintf(stderr, "kvpack bench codec: --mib %llu holds %u pages of this geometry: 8 are "
                        "used (%llu MiB)\n", (unsigned long long)mib, b.npages,
                (unsigned long long)((8 * b.page_elems * 4) >> 20));
        b.npages = 8;
    }
    for (int c = 0; c < nlist; c++) { /* the largest page of the codecs run: not always fp16's
                                       * (at P 1 or D <= 2 a group's scales weigh more) */
        kvp_page_params_t pp = {.codec = list[c], .heads = b.heads, .head_dim = b.dim,
                                .page_tokens = b.P};
        size_t            cap = kvp_page_max_bytes(&pp); /* 0: geometry refused, skipped below */

        b.page_cap = cap > b.page_cap ? cap : b.page_cap;
    }
    if (b.page_cap == 0) {
        return kvp_cli_usage_error("bench codec", "no codec asked for takes --heads %u x "
                                   "--head-dim %u with --page-tokens %u", b.heads, b.dim, b.P);
    }
    for (int c = 0; c < nlist; c++) { /* implementations to run, for the progress line */
        const char       *impls[4];
        size_t            ni = kvp_codec_impls(list[c], impls, 4);
        kvp_page_params_t pp = {.codec = list[c], .heads = b.heads, .head_dim = b.dim,
                                .page_tokens = b.P};

        for (size_t ii = 0; ii < ni && kvp_codec_check(&pp) == KVP_OK; ii++) {
            total_impls += impl_s == NULL || strcmp(impl_s, impls[ii]) == 0;
        }
    }
    if (total_impls == 0) { /* --impl foo (or avx2 on a CPU without it) ran nothing, exit 0 */
        fprintf(stderr, "kvpack bench codec: no codec asked for has an implementation '%s' on "
                        "this CPU (ref, and avx2 where the CPU has AVX2)\n", impl_s ? impl_s : "any");
        return impl_s != NULL && strcmp(impl_s, "ref") != 0 && strcmp(impl_s, "avx2") != 0 ? 2 : 1;
    }
    b.in    = kvp_malloc((size_t)b.npages * b.page_elems * 4, "bench in");
    b.out   = kvp_malloc((size_t)b.npages * b.page_elems * 4, "bench out");
    b.pages = kvp_malloc((size_t)b.npages * b.page_cap, "bench pages");
    b.lens  = kvp_calloc(b.npages, sizeof(size_t), "bench lens");
    v       = kvp_malloc(3 * rounds * sizeof(double), "bench rounds");
    if (b.in == NULL || b.out == NULL || b.pages == NULL || b.lens == NULL || v == NULL) {
        fprintf(stderr, "kvpack bench codec: out of memory for a %llu MiB working set\n",
                (unsigned long long)mib);
        err = 1;
        goto out;
    }
    fill(&b);
    memset(b.out, 0, (size_t)b.npages * b.page_elems * 4);
    memset(b.pages, 0, (size_t)b.npages * b.page_cap);
    mc = memcpy_gbs(&b); /* warm-up: faults in out's pages */
    mc = memcpy_gbs(&b);
    if (json) {
        kvp_json_begin(&j, stdout);
        kvp_json_int(&j, "heads", b.heads);
        kvp_json_int(&j, "head_dim", b.dim);
        kvp_json_int(&j, "page_tokens", b.P);
        kvp_json_int(&j, "pages", b.npages);
        kvp_json_int(&j, "threads", b.threads);
        kvp_json_int(&j, "rounds", (int64_t)rounds);
        kvp_json_num(&j, "window_s", window_s);
        kvp_json_num(&j, "working_set_mib", (double)b.npages * b.page_elems * 4 / 1048576.0);
        kvp_json_num(&j, "memcpy_gbs", mc);
        kvp_json_arr(&j, "results");
    } else {
        printf("working set %.0f MiB of fp16 KV (%u pages, H %u D %u P %u), %u thread%s; memcpy "
               "%.2f GB/s\n", (double)b.npages * b.page_elems * 4 / 1048576.0, b.npages, b.heads,
               b.dim, b.P, b.threads, b.threads == 1 ? "" : "s", mc);
        printf("%-8s %-5s %10s %10s %11s %10s %19s %19s\n", "codec", "impl", "enc_GB/s",
               "dec_GB/s", "decrot_GB/s", "mcpy_GB/s", "enc/mcpy [range]", "dec/mcpy [range]");
    }
    for (int c = 0; c < nlist && !err; c++) {
        const char       *impls[4];
        size_t            ni = kvp_codec_impls(list[c], impls, 4);
        kvp_page_params_t pp = {.codec = list[c], .heads = b.heads, .head_dim = b.dim,
                                .page_tokens = b.P};

        if (kvp_codec_check(&pp) != KVP_OK) {
            fprintf(stderr, "kvpack bench codec: %s does not support this geometry (it takes %s), "
                    "skipped\n", kvp_codec_name(list[c]), kvp_codec_geometry_rule(list[c]));
            continue;
        }
        for (size_t ii = 0; ii < ni && !err; ii++) {
            paired_t enc, dec, decr;
            size_t   warm_len = 0;

            if (impl_s != NULL && strcmp(impl_s, impls[ii]) != 0) {
                continue;
            }
            kvp_codec_set_impl(list[c], impls[ii]);
            memset(b.lens, 0, b.npages * sizeof(size_t)); /* slots hold no page of this codec */
            if (kvp_page_encode(&pp, KVP_DTYPE_F16, b.in, b.in + b.page_elems, b.P, b.pages,
                                b.page_cap, &warm_len) != KVP_OK) { /* scratch set up untimed */
                fprintf(stderr, "kvpack bench codec: %s/%s cannot encode a page\n",
                        kvp_codec_name(list[c]), impls[ii]);
                err = 1;
                break;
            }
            kvp_progress("bench codec", (uint64_t)done_impls, (uint64_t)total_impls);
            enc  = paired(&b, &pp, 0, KVP_FRAME_ORIGINAL, (uint32_t)rounds, v, &err);
            dec  = paired(&b, &pp, 1, KVP_FRAME_ORIGINAL, (uint32_t)rounds, v, &err);
            decr = paired(&b, &pp, 1, KVP_FRAME_ROTATED, (uint32_t)rounds, v, &err);
            done_impls++;
            if (err) {
                break;
            }
            if (json) {
                kvp_json_obj(&j, NULL);
                kvp_json_str(&j, "codec", kvp_codec_name(list[c]));
                kvp_json_str(&j, "impl", impls[ii]);
                kvp_json_num(&j, "encode_gbs", enc.gbs);
                kvp_json_num(&j, "decode_gbs", dec.gbs);
                kvp_json_num(&j, "decode_rotated_gbs", decr.gbs);
                kvp_json_num(&j, "memcpy_gbs", enc.memcpy_gbs);
                kvp_json_num(&j, "encode_vs_memcpy", enc.ratio);
                kvp_json_num(&j, "encode_vs_memcpy_min", enc.ratio_lo);
                kvp_json_num(&j, "encode_vs_memcpy_max", enc.ratio_hi);
                kvp_json_num(&j, "decode_vs_memcpy", dec.ratio);
                kvp_json_num(&j, "decode_vs_memcpy_min", dec.ratio_lo);
                kvp_json_num(&j, "decode_vs_memcpy_max", dec.ratio_hi);
                kvp_json_num(&j, "decode_rotated_vs_memcpy", decr.ratio);
                kvp_json_close(&j);
            } else {
                printf("%-8s %-5s %10.3f %10.3f %11.3f %10.2f %6.3f [%.3f-%.3f] %6.3f [%.3f-%.3f]\n",
                       kvp_codec_name(list[c]), impls[ii], enc.gbs, dec.gbs, decr.gbs,
                       enc.memcpy_gbs, enc.ratio, enc.ratio_lo, enc.ratio_hi, dec.ratio,
                       dec.ratio_lo, dec.ratio_hi);
            }
        }
    }
    kvp_progress("bench codec", (uint64_t)done_impls, (uint64_t)total_impls);
    kvp_progress_done();
    if (json) {
        kvp_json_close(&j);
        kvp_json_end(&j);
    }
out:
    kvp_free(b.in);
    kvp_free(b.out);
    kvp_free(b.pages);
    kvp_free(b.lens);
    kvp_free(v);
    return err ? 1 : 0;
}
