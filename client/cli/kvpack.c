/* kvpack.c - the kvpack command line: a table of subcommands, each in its own cmd_*.c.
 * main() is last. */
#include "cli.h"
#include "kvpack/page.h"
#include "kvpack/version.h"
#include "kvpack/wire.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
} cli_cmd_t;

static const cli_cmd_t commands[] = {
    {"demo",  "run a local prefill -> node -> decode round trip, restart the node, resume", kvp_cmd_demo},
    {"serve", "run a node (same as kvpackd)", kvp_cmd_serve},
    {"stat",  "print a node's statistics", kvp_cmd_stat},
    {"put",   "store a .kvd KV dump on a node as one session", kvp_cmd_put},
    {"get",   "fetch a session from a node and write it back as .kvd", kvp_cmd_get},
    {"ls",    "list the sessions a node holds (DRAM and disk)", kvp_cmd_ls},
    {"rm",    "delete a session from a node", kvp_cmd_rm},
    {"repair", "bring every session back to its r copies after a node was lost or added", kvp_cmd_repair},
    {"scrub", "read back and check every page and index block on each node's disk now", kvp_cmd_scrub},
    {"nodes", "list the nodes registered in etcd and whether they answer", kvp_cmd_nodes},
    {"eval",  "measure codec quality on synthetic or .kvd KV", kvp_cmd_eval},
    {"model", "run a real Llama-family model with its KV through the cache", kvp_cmd_model},
    {"loadtest", "replay a conversation trace or users x rounds against a real node", kvp_cmd_loadtest},
    {"plan",  "capacity calculator: exact bytes per session, sessions and nodes, link time", kvp_cmd_plan},
    {"bench", "benchmarks: codec | store | node | transfer | stream | attn (JSON, with same-run baselines)", NULL},
};

static const cli_cmd_t bench_commands[] = {
    {"codec",    "encode/decode GB/s per codec and twin vs memcpy", kvp_cmd_bench_codec},
    {"store",    "spill/restore GB/s vs raw disk, index ops/s", kvp_cmd_bench_store},
    {"node",     "session put/get through a node vs Redis SET/GET of the same bytes", kvp_cmd_bench_node},
    {"transfer", "page shipping GB/s vs ucx_perftest-style raw UCX and fp16 shipping", kvp_cmd_bench_transfer},
    {"stream",   "encode + put and get + decode of a session, serial vs streamed (overlapped)", kvp_cmd_bench_stream},
    {"attn",     "decode attention over packed pages vs decode-then-attend and fp16", kvp_cmd_bench_attn},
};

#define NCMD(t) (sizeof(t) / sizeof((t)[0]))

static void usage(FILE *out)
{
    fprintf(out, "usage: kvpack <command> [options]   (kvpack <command> --help for details;\n"
                 "       kvpack --version)\n\ncommands:\n");
    for (size_t i = 0; i < NCMD(commands); i++) {
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    }
    for (size_t i = 0; i < NCMD(bench_commands); i++) {
        fprintf(out, "  bench %-8s %s\n", bench_commands[i].name, bench_commands[i].summary);
    }
}

static void bench_usage(FILE *out)
{
    fprintf(out, "usage: kvpack bench <benchmark> [options]   (kvpack bench <benchmark> --help for "
                 "details)\nEach prints JSON with a baseline measured in the same run.\n\n"
                 "benchmarks:\n");
    for (size_t i = 0; i < NCMD(bench_commands); i++) {
        fprintf(out, "  %-8s %s\n", bench_commands[i].name, bench_commands[i].summary);
    }
}

/* "a|b|c": the names of table (buf of cap bytes). */
static const char *table_names(const cli_cmd_t *table, size_t n, char *buf, size_t cap)
{
    size_t len = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && len < cap; i++) {
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? "|" : "", table[i].name);
    }
    return buf;
}

/* Run argv[0] of table; what names the kind of thing the table holds, prog the words before it
 * in an error ("kvpack", "kvpack bench"). An unknown or missing name is a one-line usage error. */
static int run_table(const cli_cmd_t *table, size_t n, const char *prog, const char *what,
                     int argc, char **argv)
{
    char names[256];

    for (size_t i = 0; argc > 0 && i < n; i++) {
        if (strcmp(argv[0], table[i].name) == 0) {
            const char *group = strchr(prog, ' '); /* "kvpack bench": " bench" */
            char        cmd[64];

            snprintf(cmd, sizeof(cmd), "%s%s%s", group ? group + 1 : "", group ? " " : "",
                     table[i].name);
            kvp_cli_set_cmd(cmd);
            return table[i].main(argc, argv);
        }
    }
    table_names(table, n, names, sizeof(names));
    if (argc == 0) {
        fprintf(stderr, "%s: which %s? (%s)\n", prog, what, names);
    } else {
        fprintf(stderr, "%s: unknown %s '%s' (%s)\n", prog, what, argv[0], names);
    }
    return 2;
}

/* A command's status, or 1 when its output could not be written (a full disk under a redirect,
 * a closed pipe): a cut-off or empty --json file must not come with exit 0. */
static int output_checked(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kvpack: writing the output failed: %s\n", strerror(errno));
        return rc != 0 ? rc : 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("kvpack %s (page format v%u, wire v%u)\n", kvp_version(), KVP_PAGE_VERSION,
               KVP_WIRE_VERSION);
        return 0;
    }
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "bench") == 0) {
        if (argc >= 3 && (strcmp(argv[2], "-h") == 0 || strcmp(argv[2], "--help") == 0)) {
            bench_usage(stdout);
            return 0;
        }
        return output_checked(run_table(bench_commands, NCMD(bench_commands), "kvpack bench",
                                        "benchmark", argc - 2, argv + 2));
    }
    return output_checked(run_table(commands, NCMD(commands), "kvpack", "command", argc - 1,
                                    argv + 1)); /* "bench" (no main) was taken above */
}
