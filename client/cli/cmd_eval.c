/* cmd_eval.c - "kvpack eval": codec quality on a .kvd dump or the documented synthetic KV.
 * Per codec: exact bits/element (every stored byte, headers included), K/V relative errors and
 * their magnitude/direction parts, static and pseudo-decode attention-output errors; the
 * matched-bits comparisons oscar vs kivi and kvarn vs kivi128; optionally the dequantized cache
 * back as .kvd (--dequant-out) so other implementations can be compared. */
#include "cli.h"
#include "eval/eval.h"
#include "kvpack/codec.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack eval (--synthetic | --input FILE.kvd) [options]\n"
            "  --codec NAME        fp16|kivi|kivi128|oscar|kvarn|naive2|all (default all)\n"
            "  --input FILE.kvd    real KV dump (format in client/eval/eval.h and the README)\n"
            "  --synthetic         generated KV: Gaussian channels, outlier K channels x10-50,\n"
            "                      low-norm sink tokens, a norm jump mid-sequence (fixed seed)\n"
            "  --layers N --tokens N --heads N --head-dim N   synthetic shape (4 1024 8 128)\n"
            "  --seed N            synthetic and query seed (default 1)\n"
            "  --page-tokens N     page size P (default 128)\n"
            "  --queries N         attention queries per layer and head (default 128)\n"
            "  --kvarn-iters N     VarN iterations (default 8)\n"
            "  --v-prerot          V is given already rotated (KVP_PAGE_F_V_PREROT)\n"
            "  --impl ref|avx2     force one implementation for every codec\n"
            "  --dequant-out FILE  write the dequantized K/V (one codec only) as .kvd\n"
            "  --json              machine-readable output\n");
}

typedef struct {
    kvp_codec_id_t    codec;
    kvp_eval_result_t r;
} row_t;

static const row_t *find(const row_t *rows, int n, kvp_codec_id_t c)
{
    for (int i = 0; i < n; i++) {
        if (rows[i].codec == c) {
            return &rows[i];
        }
    }
    return NULL;
}

static void compare(kvp_json_t *j, FILE *out, const char *name, const row_t *a, const row_t *b)
{
    double r1, r2;

    if (a == NULL || b == NULL) {
        return;
    }
    r1 = a->r.attn_rel_err / b->r.attn_rel_err;
    r2 = a->r.attn_rel_err_accum / b->r.attn_rel_err_accum;
    if (j != NULL) {
        kvp_json_obj(j, name);
        kvp_json_num(j, "bits_delta", a->r.bits_per_elem - b->r.bits_per_elem);
        kvp_json_num(j, "attn_rel_err_ratio", r1);
        kvp_json_num(j, "attn_rel_err_accum_ratio", r2);
        kvp_json_bool(j, "better", r1 < 1.0 && r2 < 1.0);
        kvp_json_close(j);
    } else {
        fprintf(out, "%-18s attn ratio %.3f  accum ratio %.3f  (%s)\n", name, r1, r2,
                r1 < 1.0 && r2 < 1.0 ? "better" : "NOT better");
    }
}

int kvp_cmd_eval(int argc, char **argv)
{
    const char       *codec_s = "all", *input = NULL, *dq_out = NULL, *impl = NULL;
    const char       *dq_file = NULL; /* where dq_out is written (kvp_cli_out_claim_stdout) */
    uint64_t          layers = 4, tokens = 1024, heads = 8, head_dim = 128, seed = 1, P = 128;
    uint64_t          queries = 128, iters = 0;
    bool              synthetic = false, json = false, prerot = false;
    kvp_codec_id_t    list[KVP_CODEC_MAX];
    int               nlist = 0, rc = 0;
    row_t             rows[KVP_CODEC_MAX];
    int               nrows = 0;
    kvp_kv_t          kv;
    char              bad[160], why[KVP_KVD_WHY_MAX];
    kvp_status_t      st;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_opt_str(argc, argv, &i, "--codec", &codec_s) ||
            kvp_opt_str(argc, argv, &i, "--input", &input) ||
            kvp_opt_str(argc, argv, &i, "--dequant-out", &dq_out) ||
            kvp_opt_str(argc, argv, &i, "--impl", &impl) ||
            kvp_opt_u64(argc, argv, &i, "--layers", &layers) ||
            kvp_opt_u64(argc, argv, &i, "--tokens", &tokens) ||
            kvp_opt_u64(argc, argv, &i, "--heads", &heads) ||
            kvp_opt_u64(argc, argv, &i, "--head-dim", &head_dim) ||
            kvp_opt_u64(argc, argv, &i, "--seed", &seed) ||
            kvp_opt_u64(argc, argv, &i, "--page-tokens", &P) ||
            kvp_opt_count(argc, argv, &i, "--queries", &queries) ||
            kvp_opt_count(argc, argv, &i, "--kvarn-iters", &iters)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--synthetic")) {
            synthetic = true;
        } else if (kvp_opt_flag(argv, i, "--json")) {
            json = true;
        } else if (kvp_opt_flag(argv, i, "--v-prerot")) {
            prerot = true;
        } else {
            return kvp_opt_unknown("eval", argv[i]);
        }
    }
    if (synthetic == (input != NULL)) {
        return kvp_cli_usage_error("eval", "give exactly one of --synthetic or --input FILE.kvd");
    }
    if (impl != NULL && strcmp(impl, "ref") != 0 && strcmp(impl, "avx2") != 0) {
        return kvp_cli_usage_error("eval", "--impl wants ref or avx2, got '%s'", impl);
    }
    if (strcmp(codec_s, "all") == 0) {
        const kvp_codec_id_t all[] = {KVP_CODEC_FP16,  KVP_CODEC_KIVI,  KVP_CODEC_KIVI128,
                                      KVP_CODEC_OSCAR, KVP_CODEC_KVARN, KVP_CODEC_NAIVE2};

        memcpy(list, all, sizeof(all));
        nlist = 6;
    } else if (kvp_cli_codec("eval", codec_s, "all", &list[0])) {
        nlist = 1;
    } else {
        return 2;
    }
    if (dq_out != NULL && kvp_cli_out_path_check("eval", "--dequant-out", dq_out, NULL) != 0) {
        return 2;
    }
    if (dq_out != NULL && nlist != 1) {
        return kvp_cli_usage_error("eval", "--dequant-out needs a single --codec");
    }
    if (!kvp_cli_geometry("eval", "--heads", heads, "--head-dim", head_dim, "--page-tokens", P) ||
        (iters != 0 && /* 0, as when not given: the codec's default */
         !kvp_cli_range("eval", "--kvarn-iters", iters, 1, KVP_CODEC_KVARN_MAX_ITERS)) ||
        !kvp_cli_range("eval", "--queries", queries, 1, 1u << 20) ||
        !kvp_cli_range("eval", "--layers", layers, 1, 4096) ||
        !kvp_cli_range("eval", "--tokens", tokens, 1, 1u << 22)) {
        return 2;
    }
    if (dq_out != NULL) {
        dq_file = kvp_cli_out_claim_stdout(dq_out);
    }
    st = synthetic ? kvp_kv_synthetic(&kv, (uint32_t)layers, (uint32_t)tokens, (uint32_t)heads,
                                      (uint32_t)head_dim, seed)
                   : kvp_kvd_read(input, &kv, why, sizeof(why));
    if (st != KVP_OK) {
        if (synthetic) {
            fprintf(stderr, "kvpack eval: cannot generate the synthetic KV: %s\n",
                    kvp_status_str(st));
        } else {
            fprintf(stderr, "kvpack eval: %s\n", why);
        }
        return 1;
    }
    if (kvp_kv_find_unstorable(&kv, bad, sizeof(bad))) {
        fprintf(stderr, "kvpack eval: %s: %s: NaN, Inf or past fp16 range (|x| > 65504), which "
                        "no codec stores\n", synthetic ? "the generator" : input, bad);
        kvp_kv_free(&kv);
        return 1;
    }
    /* one codec named that cannot take this geometry (of the options or of the file): its error
     * alone; 'all' skips each codec that cannot take it, saying so (exit 0: the report is of
     * every codec that applies; it used to exit 1 after a full report), and goes on */
    if (nlist == 1 && !kvp_cli_codec_fits("eval", list[0], kv.heads, kv.head_dim, P)) {
        kvp_kv_free(&kv);
        return 2;
    }
    for (int c = 0; c < nlist; c++) {
        kvp_eval_params_t ep = {list[c], (uint32_t)P, prerot ? KVP_PAGE_F_V_PREROT : 0,
                                (uint32_t)iters, (uint32_t)queries, seed};
        kvp_kv_t          hat;

        if (impl != NULL && kvp_codec_set_impl(list[c], impl) != KVP_OK) {
            fprintf(stderr, "kvpack eval: no '%s' implementation of %s on this machine\n", impl,
                    kvp_codec_name(list[c]));
            rc = 1;
            continue;
        }
        if (nlist > 1 && !kvp_cli_codec_takes(list[c], kv.heads, kv.head_dim, (uint64_t)P)) {
            fprintf(stderr, "kvpack eval: %s skipped: it does not take pages of heads %u, "
                    "head_dim %u, %llu tokens\n", kvp_codec_name(list[c]), kv.heads, kv.head_dim,
                    (unsigned long long)P);
            continue;
        }
        if (!json) {
            kvp_progress(kvp_codec_name(list[c]), (uint64_t)c, (uint64_t)nlist);
        }
        st = kvp_eval_codec(&kv, &ep, &hat, &rows[nrows].r);
        if (st != KVP_OK) {
            fprintf(stderr, "kvpack eval: codec %s failed: %s\n", kvp_codec_name(list[c]),
                    kvp_status_str(st));
            rc = 1;
            continue;
        }
        rows[nrows++].codec = list[c];
        if (dq_out != NULL && kvp_kvd_write(dq_file, &hat) != KVP_OK) {
            fprintf(stderr, "kvpack eval: cannot write %s\n", dq_out);
            rc = 1;
        }
        kvp_kv_free(&hat);
    }
    if (!json) {
        kvp_progress_done();
    }
    if (json) {
        kvp_json_t j;

        kvp_json_begin(&j, stdout);
        kvp_json_str(&j, "input", synthetic ? "synthetic" : input);
        kvp_json_int(&j, "layers", kv.layers);
        kvp_json_int(&j, "tokens", kv.tokens);
        kvp_json_int(&j, "heads", kv.heads);
        kvp_json_int(&j, "head_dim", kv.head_dim);
        kvp_json_int(&j, "page_tokens", (int64_t)P);
        kvp_json_int(&j, "seed", (int64_t)seed);
        kvp_json_int(&j, "queries", (int64_t)queries);
        kvp_json_arr(&j, "codecs");
        for (int i = 0; i < nrows; i++) {
            const kvp_eval_result_t *r = &rows[i].r;

            kvp_json_obj(&j, NULL);
            kvp_json_str(&j, "codec", kvp_codec_name(rows[i].codec));
            kvp_json_str(&j, "impl", kvp_codec_impl_name(rows[i].codec));
            kvp_json_num(&j, "bits_per_elem", r->bits_per_elem);
            kvp_json_int(&j, "bytes", (int64_t)r->bytes);
            kvp_json_int(&j, "pages", (int64_t)r->pages);
            kvp_json_num(&j, "k_rel_err", r->k_rel_err);
            kvp_json_num(&j, "v_rel_err", r->v_rel_err);
            kvp_json_num(&j, "attn_rel_err", r->attn_rel_err);
            kvp_json_num(&j, "attn_rel_err_accum", r->attn_rel_err_accum);
            kvp_json_num(&j, "k_err_magnitude", r->k_err_mag);
            kvp_json_num(&j, "k_err_direction", r->k_err_dir);
            kvp_json_num(&j, "v_err_magnitude", r->v_err_mag);
            kvp_json_num(&j, "v_err_direction", r->v_err_dir);
            kvp_json_num(&j, "encode_s", r->encode_s);
            kvp_json_num(&j, "decode_s", r->decode_s);
            kvp_json_close(&j);
        }
        kvp_json_close(&j);
        kvp_json_obj(&j, "matched_bits");
        compare(&j, NULL, "oscar_vs_kivi", find(rows, nrows, KVP_CODEC_OSCAR),
                find(rows, nrows, KVP_CODEC_KIVI));
        compare(&j, NULL, "kvarn_vs_kivi128", find(rows, nrows, KVP_CODEC_KVARN),
                find(rows, nrows, KVP_CODEC_KIVI128));
        kvp_json_close(&j);
        kvp_json_end(&j);
    } else {
        printf("%s: %u layers x %u tokens x %u heads x %u dims, P %llu\n",
               synthetic ? "synthetic" : input, kv.layers, kv.tokens, kv.heads, kv.head_dim,
               (unsigned long long)P);
        printf("%-8s %-5s %6s %8s %8s %9s %9s %8s %8s %8s %8s\n", "codec", "impl", "bits",
               "k_err", "v_err", "attn_err", "attn_acc", "k_mag", "k_dir", "v_mag", "v_dir");
        for (int i = 0; i < nrows; i++) {
            const kvp_eval_result_t *r = &rows[i].r;

            printf("%-8s %-5s %6.3f %8.4f %8.4f %9.4f %9.4f %8.4f %8.4f %8.4f %8.4f\n",
                   kvp_codec_name(rows[i].codec), kvp_codec_impl_name(rows[i].codec),
                   r->bits_per_elem, r->k_rel_err, r->v_rel_err, r->attn_rel_err,
                   r->attn_rel_err_accum, r->k_err_mag, r->k_err_dir, r->v_err_mag, r->v_err_dir);
        }
        compare(NULL, stdout, "oscar vs kivi", find(rows, nrows, KVP_CODEC_OSCAR),
                find(rows, nrows, KVP_CODEC_KIVI));
        compare(NULL, stdout, "kvarn vs kivi128", find(rows, nrows, KVP_CODEC_KVARN),
                find(rows, nrows, KVP_CODEC_KIVI128));
    }
    kvp_kv_free(&kv);
    return rc;
}
