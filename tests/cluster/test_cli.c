/* test_cli.c - the node-facing CLI: `kvpack stat --node ADDR --json` against a real kvpackd
 * reports the session that was put; `kvpack serve --help` and a bad option behave (numbers with a
 * sign, past 2^64 or past it after a suffix are refused, "010" is ten); a smoke run of
 * `kvpack bench transfer --json` (tiny geometry) exits 0 with finite figures. */
#include "node_harness.h"

#include "kvpack/log.h"

#define NS 0xFEEDull

/* Run a command, capture stdout into buf; returns the exit status. */
static int run(const char *cmd, char *buf, size_t cap)
{
    FILE  *p = popen(cmd, "r");
    size_t n = 0;
    int    st;

    CHECK(p != NULL);
    while (n + 1 < cap && fgets(buf + n, (int)(cap - n), p) != NULL) {
        n += strlen(buf + n);
    }
    buf[n] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Value of "key":<number> in a flat JSON text; NaN when absent. */
static double json_num(const char *json, const char *key)
{
    char        pat[128];
    const char *at;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    at = strstr(json, pat);
    return at ? strtod(at + strlen(pat), NULL) : NAN;
}

int main(void)
{
    test_node_t    n;
    test_session_t ts;
    kvp_client_h   c;
    char           cmd[512], out[8192];

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    test_node_mkdir(&n);
    test_node_start(&n, "--durability=spill");
    c = test_client(n.addr, 10000);
    test_session_make(&ts, 2, 3, 0, 5);
    CHECK_ST(test_session_put(c, NS, "cli", &ts), KVP_OK);
    kvp_client_destroy(c);

    snprintf(cmd, sizeof(cmd), "%s stat --node %s --json", KVPACK_PATH, n.addr);
    CHECK(run(cmd, out, sizeof(out)) == 0);
    fprintf(stderr, "%s", out);
    CHECK(json_num(out, "sessions") == 1);
    CHECK(json_num(out, "dram_pages") == ts.n_pages);
    snprintf(cmd, sizeof(cmd), "%s stat --node %s", KVPACK_PATH, n.addr);
    CHECK(run(cmd, out, sizeof(out)) == 0 && strstr(out, "sessions") != NULL);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    /* the node is gone: stat fails with a message, not a hang */
    snprintf(cmd, sizeof(cmd), "%s stat --node %s --timeout-ms 2000 2>/dev/null", KVPACK_PATH,
             n.addr);
    CHECK(run(cmd, out, sizeof(out)) == 1);
    snprintf(cmd, sizeof(cmd), "%s stat 2>/dev/null", KVPACK_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s serve --help", KVPACK_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 0 && strstr(out, "--data-dir") != NULL);
    snprintf(cmd, sizeof(cmd), "%s serve --bogus 2>/dev/null", KVPACK_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s --durability never 2>/dev/null", KVPACKD_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s --help", KVPACKD_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 0 && strstr(out, "--tombstone-ttl") != NULL);
    for (const char *const *bad = (const char *const[]){"0", "3x", "", NULL}; *bad; bad++) {
        snprintf(cmd, sizeof(cmd), "%s --tombstone-ttl '%s' 2>/dev/null", KVPACKD_PATH, *bad);
        CHECK(run(cmd, out, sizeof(out)) == 2);
    }
    /* numbers that used to wrap or flip sign silently (strtoull): a clear error, exit 2 */
    for (const char *const *bad = (const char *const[]){"-5M", "99999999999999999999G",
                                                         "17179869184G", "1.5G", NULL};
         *bad; bad++) {
        snprintf(cmd, sizeof(cmd), "%s --dram-budget '%s' 2>&1", KVPACKD_PATH, *bad);
        CHECK(run(cmd, out, sizeof(out)) == 2 && strstr(out, "--dram-budget wants bytes") != NULL &&
              strstr(out, *bad) != NULL);
    }
    for (const char *const *bad = (const char *const[]){"-1", "99999999999999999999", NULL};
         *bad; bad++) {
        snprintf(cmd, sizeof(cmd), "%s plan --model llama-3.1-8b --tokens 8192 --page-tokens "
                 "'%s' 2>&1", KVPACK_PATH, *bad);
        CHECK(run(cmd, out, sizeof(out)) == 2 && strstr(out, "expects a whole number") != NULL);
    }
    /* a count of 0 used to mean "the default" (--replicas 1, --timeout-ms 10 s, eval's 64
     * queries, kvarn's 8 iterations) or "no limit" */
    for (const char *const *bad = (const char *const[]){"ls --max 0", "ls --page 0",
                                                         "stat --timeout-ms 0",
                                                         "rm --session x --replicas 0",
                                                         "eval --synthetic --queries 0",
                                                         "eval --synthetic --kvarn-iters 0",
                                                         NULL};
         *bad; bad++) {
        snprintf(cmd, sizeof(cmd), "%s %s --node 127.0.0.1:1 2>&1", KVPACK_PATH, *bad);
        CHECK(run(cmd, out, sizeof(out)) == 2 && strstr(out, "wants 1 or more") != NULL);
    }
    /* 2^32 + 8 heads used to reach the page parameters' 32-bit fields as 8 (or run out of
     * memory): a usage error */
    for (const char *const *bad = (const char *const[]){
             "bench attn --heads 4294967304", "bench transfer --heads 4294967304",
             "demo --heads 4294967304", "bench store --sessions 4294967297",
             "plan --layers 2 --kv-heads 4294967304 --head-dim 128 --tokens 100", NULL};
         *bad; bad++) {
        snprintf(cmd, sizeof(cmd), "%s %s > /dev/null 2>&1", KVPACK_PATH, *bad);
        CHECK(run(cmd, out, sizeof(out)) == 2);
    }
    snprintf(cmd, sizeof(cmd), "%s plan --model llama-3.1-8b --tokens 8192 --fill nan 2>&1",
             KVPACK_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 2 && strstr(out, "expects a finite number") != NULL);
    snprintf(cmd, sizeof(cmd), "%s plan --model llama-3.1-8b --tokens 8192 --page-tokens 010 "
             "--codec kivi --json", KVPACK_PATH); /* ten, not octal eight */
    CHECK(run(cmd, out, sizeof(out)) == 0 && json_num(out, "page_tokens") == 10);
    snprintf(cmd, sizeof(cmd), "%s --help", KVPACKD_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 0 && strstr(out, "--workers N") != NULL);
    for (const char *const *bad = (const char *const[]){"0", "65", "2x", "", NULL}; *bad; bad++) {
        snprintf(cmd, sizeof(cmd), "%s --workers '%s' 2>&1", KVPACKD_PATH, *bad);
        CHECK(run(cmd, out, sizeof(out)) == 2 && strstr(out, "--workers wants 1..64") != NULL);
    }

    snprintf(cmd, sizeof(cmd),
             "%s bench transfer --json --layers 2 --tokens 512 --reps 2 --batch-bytes 65536",
             KVPACK_PATH);
    CHECK(run(cmd, out, sizeof(out)) == 0);
    fprintf(stderr, "%s", out);
    CHECK(json_num(out, "pages") == 8);
    CHECK(json_num(out, "compression_ratio") > 1.0);
    CHECK(isfinite(json_num(out, "put_gbps")) && json_num(out, "put_gbps") > 0);
    CHECK(isfinite(json_num(out, "put_fp16_pages_gbps")));
    CHECK(isfinite(json_num(out, "fp16_equiv_vs_fp16_shipping")));
    CHECK(strstr(out, "\"perftest\"") != NULL);

    test_session_free(&ts);
    test_node_rmdir(&n);
    printf("test_cli: ok\n");
    return 0;
}
