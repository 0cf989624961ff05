/* cli.h - shared pieces of the kvpack CLI: the subcommand table entry points, option parsing
 * helpers, a tiny JSON writer, and a progress line. Every subcommand lives in its own cmd_*.c,
 * prints --help, and returns a process exit status (0 ok, 1 failed check, 2 usage error). */
#ifndef KVPACK_CLI_H
#define KVPACK_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvpack/cluster.h"
#include "kvpack/kvpack.h"
#include "kvpack/rand.h"
#include "kvpack/status.h"

/* ---- subcommands (one cmd_*.c each) ---- */
int kvp_cmd_demo(int argc, char **argv);
int kvp_cmd_serve(int argc, char **argv);
int kvp_cmd_eval(int argc, char **argv);
int kvp_cmd_model(int argc, char **argv);
int kvp_cmd_bench_codec(int argc, char **argv);
int kvp_cmd_bench_store(int argc, char **argv);
int kvp_cmd_bench_node(int argc, char **argv);
int kvp_cmd_bench_transfer(int argc, char **argv);
int kvp_cmd_bench_stream(int argc, char **argv);
int kvp_cmd_bench_attn(int argc, char **argv);
int kvp_cmd_stat(int argc, char **argv);
int kvp_cmd_scrub(int argc, char **argv);
int kvp_cmd_put(int argc, char **argv);
int kvp_cmd_get(int argc, char **argv);
int kvp_cmd_ls(int argc, char **argv);
int kvp_cmd_rm(int argc, char **argv);
int kvp_cmd_repair(int argc, char **argv);
int kvp_cmd_loadtest(int argc, char **argv);
int kvp_cmd_plan(int argc, char **argv);
int kvp_cmd_nodes(int argc, char **argv);

/* ---- option helpers: "--name value" or "--name=value" ---- */
/* The command the option helpers name in their usage errors (kvpack.c sets it before running
 * one: "put", "bench codec"). */
void kvp_cli_set_cmd(const char *cmd);
/* If argv[*i] is --name, store its value (advancing *i) and return true. Missing value: exits 2. */
bool kvp_opt_str(int argc, char **argv, int *i, const char *name, const char **val_p);
bool kvp_opt_u64(int argc, char **argv, int *i, const char *name, uint64_t *val_p);
/* kvp_opt_u64 for a count that 0 would make meaningless (--replicas, --timeout-ms, ...): 0 exits 2
 * with a message, rather than quietly meaning "the default" or "no limit". */
bool kvp_opt_count(int argc, char **argv, int *i, const char *name, uint64_t *val_p);
bool kvp_opt_f64(int argc, char **argv, int *i, const char *name, double *val_p);
bool kvp_opt_flag(char **argv, int i, const char *name); /* exact match, no value */
bool kvp_opt_help(int argc, char **argv);               /* any -h/--help present */
/* The KV session options the benches that build sessions share (bench stream, bench transfer):
 * --codec --layers --heads --head-dim --tokens --page-tokens --reps, consumed as kvp_opt_str/u64
 * consume theirs; the caller sets the defaults and checks the ranges. */
typedef struct {
    const char *codec;
    uint64_t    layers, heads, head_dim, tokens, page_tokens, reps;
} kvp_opt_kv_t;
bool kvp_opt_kv(int argc, char **argv, int *i, kvp_opt_kv_t *kv);
/* A usage error: "kvpack CMD: WHAT (see kvpack CMD --help)", one line on stderr; returns 2, the
 * exit status of every usage error. Say what is wrong (the option missing, in conflict or out of
 * range), never the whole usage text. A number out of range goes through kvp_cli_range; a
 * fractional one (no helper: its bounds may be open) says "OPT wants above LO and at most HI,
 * got V" in the same words. */
int  kvp_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Whole-number option opt of command cmd, as typed (64-bit, before any narrowing cast): true when
 * lo <= v <= hi; else the usage error "OPT wants LO..HI, got V" ("OPT wants LO or more, got V"
 * when hi is UINT64_MAX) and false: the caller exits 2. */
bool kvp_cli_range(const char *cmd, const char *opt, uint64_t v, uint64_t lo, uint64_t hi);
/* A program path given as option opt (NULL: not given): true when it is there and may be run;
 * else the usage error "OPT 'PATH': why" and false, before anything was started. */
bool kvp_cli_exe_ok(const char *cmd, const char *opt, const char *path);
/* The heads, head_dim and tokens of a page, each named by the option the command takes for it
 * (--heads or --kv-heads, --head-dim, --page-tokens or --tokens): kvp_cli_range of each against
 * the page format's limits 1..KVP_PAGE_MAX_HEADS, 1..KVP_PAGE_MAX_DIM, 1..KVP_PAGE_MAX_TOKENS, in
 * that order. Checked as typed: a cast to the 32-bit fields of kvp_page_params_t would wrap
 * 2^32 + 8 heads to 8. */
bool kvp_cli_geometry(const char *cmd, const char *heads_opt, uint64_t heads,
                      const char *head_dim_opt, uint64_t head_dim, const char *page_tokens_opt,
                      uint64_t page_tokens);
/* Whether codec takes pages of heads x head_dim x page_tokens (kvp_codec_check), silently. */
bool kvp_cli_codec_takes(kvp_codec_id_t codec, uint64_t heads, uint64_t head_dim,
                         uint64_t page_tokens);
/* codec takes pages of heads x head_dim x page_tokens (already within kvp_cli_geometry's ranges:
 * kvp_codec_check): true; else the usage error "CODEC does not take pages of heads H, head_dim D,
 * P tokens: it takes RULE" (kvp_codec_geometry_rule) and false: the caller exits 2, before
 * any work (a demo used to fail in its prefill child, a bench after its set-up). */
bool kvp_cli_codec_fits(const char *cmd, kvp_codec_id_t codec, uint64_t heads, uint64_t head_dim,
                        uint64_t page_tokens);
/* Report an unknown option (kvp_cli_usage_error) and return exit status 2. */
int  kvp_opt_unknown(const char *cmd, const char *arg);
/* The codec named name into *codec_p and true; else the usage error "kvpack CMD: unknown codec
 * 'NAME' (fp16|kivi|kivi128|oscar|kvarn|naive2)" (with "|ALSO" when also, the other words the
 * option takes, e.g. "all", is not NULL) and false: the caller exits 2. */
bool kvp_cli_codec(const char *cmd, const char *name, const char *also, kvp_codec_id_t *codec_p);
/* A --node list as given: every comma-separated item HOST:PORT (port 1..65535; [v6]:PORT), at
 * most KVP_CLUSTER_MAX_NODES, none twice. 0, or the usage error naming the bad item and 2. */
int  kvp_cli_node_list_check(const char *cmd, const char *list);
/* An output file named by option opt can be written, checked before the work that fills it: not
 * a directory, in a directory this process can write, and (suffixes, e.g. ".svg|.html"; NULL: any)
 * ending in one of the suffixes. 0, or the usage error "cannot write OPT PATH: why" and 2. */
int  kvp_cli_out_path_check(const char *cmd, const char *opt, const char *path,
                            const char *suffixes);
/* The path to write an output file named path to (after kvp_cli_out_path_check). Where it is this
 * process's stdout (--out /dev/stdout into a pipe), the file gets that stream alone: what the
 * command prints on stdout goes to stderr from here on, and the file is written through a kept
 * descriptor (the returned "/dev/fd/N"). Else path itself. */
const char *kvp_cli_out_claim_stdout(const char *path);

/* ---- JSON writer (one object tree to a FILE, commas handled) ---- */
typedef struct {
    FILE *out;
    int   depth;
    bool  need_comma[16];
    char  closer[16];
} kvp_json_t;

void kvp_json_begin(kvp_json_t *j, FILE *out);   /* starts the top-level object */
void kvp_json_end(kvp_json_t *j);                /* closes it and writes a newline */
void kvp_json_obj(kvp_json_t *j, const char *key);   /* nested object; key NULL inside arrays */
void kvp_json_arr(kvp_json_t *j, const char *key);
void kvp_json_close(kvp_json_t *j);              /* closes the innermost object or array */
void kvp_json_num(kvp_json_t *j, const char *key, double v); /* non-finite -> null */
void kvp_json_int(kvp_json_t *j, const char *key, int64_t v);
void kvp_json_u64(kvp_json_t *j, const char *key, uint64_t v); /* counts past 2^63 too */
void kvp_json_str(kvp_json_t *j, const char *key, const char *v);
void kvp_json_bool(kvp_json_t *j, const char *key, bool v);

/* ---- put / get / ls / rm / repair: shared options and node helpers (cmd_session.c) ---- */
#define KVP_CLI_TIMEOUT_MS 10000 /* --timeout-ms when not given: each request's deadline */
#define KVP_CLI_STR_(x) #x
#define KVP_CLI_STR(x)  KVP_CLI_STR_(x)

typedef struct {
    const char *node;       /* --node HOST:PORT[,HOST:PORT...]: the static peer list */
    const char *session;    /* --session SID */
    const char *ns_hex;     /* --ns HEX */
    uint64_t    timeout_ms; /* --timeout-ms; 0 = KVP_CLI_TIMEOUT_MS */
    uint64_t    replicas;   /* --replicas N; 0 = 1 */
    bool        json;       /* --json */
    const char *etcd;       /* --etcd URL[,URL...]: the peer list is read from etcd instead */
    const char *etcd_prefix;/* --etcd-prefix P; NULL = /kvpack/nodes/ */
} kvp_cli_sess_opts_t;

/* Which of the session options a command takes besides --node, --etcd, --etcd-prefix,
 * --timeout-ms and --json, which all of them take: an option not taken is an unknown option. */
enum {
    KVP_CLI_TAKES_SESSION  = 1u << 0, /* --session SID */
    KVP_CLI_TAKES_NS       = 1u << 1, /* --ns HEX */
    KVP_CLI_TAKES_REPLICAS = 1u << 2, /* --replicas N */
};

/* The --node / --etcd / --etcd-prefix / --timeout-ms lines of put/get/ls/rm --help. */
#define KVP_CLI_NODES_HELP                                                                    \
    "  --node LIST     HOST:PORT, or a comma-separated static peer list: each session lives\n"  \
    "                  on the first nodes of its rendezvous rank over the list (put --replicas)\n" \
    "  --etcd URL[,URL] in place of --node: the nodes registered in etcd (kvpackd --etcd),\n" \
    "                  read once when the command starts\n"                                  \
    "  --etcd-prefix P their key prefix (default /kvpack/nodes/)\n"                          \
    KVP_CLI_TIMEOUT_HELP
/* The --timeout-ms line of put/get/ls/rm/repair --help. */
#define KVP_CLI_TIMEOUT_HELP \
    "  --timeout-ms MS per-node request deadline (default " KVP_CLI_STR(KVP_CLI_TIMEOUT_MS) ")\n"
/* The --replicas line of put/rm --help. */
#define KVP_CLI_REPLICAS_HELP \
    "  --replicas N    copies a put makes (default 1; at most the number of nodes)\n"

/* If argv[*i] is one of the options above that the command takes (takes: KVP_CLI_TAKES_*), store
 * it (advancing *i) and return true. */
bool         kvp_cli_sess_opt(int argc, char **argv, int *i, unsigned takes,
                              kvp_cli_sess_opts_t *o);
/* After parsing, the usage checks: --node or --etcd, one of them, not both; --etcd-prefix only
 * with --etcd; every item of --node HOST:PORT (kvp_cli_node_list_check). The one-line usage error
 * and 2, or 0. */
int          kvp_cli_sess_check(const char *cmd, const kvp_cli_sess_opts_t *o);
/* kvp_cli_sess_check, then with --etcd o->node becomes the live peer list read from etcd once
 * (kvp_cluster_peers_etcd; static storage, kept for the process). Prints a one-line error and
 * returns 2 (the usage errors above) or 1 (etcd unreachable, no node registered); else 0 with
 * o->node set. */
int          kvp_cli_sess_peers(const char *cmd, kvp_cli_sess_opts_t *o);
/* Open o's node list (nothing is connected yet). Prints a one-line error and returns the exit
 * status (2: --replicas over the number of nodes; 1: a bad list), or 0 with *cl_p set.
 * progress_cb may be NULL. */
int          kvp_cli_open(const char *cmd, const kvp_cli_sess_opts_t *o,
                          kvp_cluster_progress_cb_t progress_cb, kvp_cluster_h *cl_p);
/* The commands that ask each node something (stat, scrub): --help (usage to stdout), --node |
 * --etcd [--etcd-prefix], --timeout-ms (default timeout_ms), --json into *o, then the node list
 * opened into *cl_p. Returns -1 when the command is to go on with *cl_p, else the exit status to
 * end with (0 after --help; 2 a usage error, one line; 1 no etcd or bad list). */
int          kvp_cli_per_node_open(const char *cmd, int argc, char **argv, uint64_t timeout_ms,
                                   void (*usage)(FILE *), kvp_cli_sess_opts_t *o,
                                   kvp_cluster_h *cl_p);
/* In a --json "nodes" array of such a command: open node k's object with "node" and "ok" (s ==
 * KVP_OK), and "error" (the status text) when not; returns whether it answered. The caller adds
 * its figures when it did, then closes the object. */
bool         kvp_cli_json_node(kvp_json_t *j, kvp_cluster_h cl, uint32_t k, kvp_status_t s);
/* Print "kvpack CMD: NODE: WHAT: status (NAME)" on stderr; returns exit status 1. */
int          kvp_cli_sess_fail(const char *cmd, const kvp_cli_sess_opts_t *o, const char *what,
                               kvp_status_t s);
/* The same line for every node that failed in r, WHAT being its stage, or what for stage op. */
void         kvp_cli_report_fail(const char *cmd, kvp_cluster_h cl,
                                 const kvp_cluster_report_t *r, const char *op, const char *what);
/* "A,B" for the nodes k (in list order) whose bit k is set in mask (UINT64_MAX: all of them), as
 * cl adopted them last (buf of cap bytes). */
const char  *kvp_cli_nodes_str(kvp_cluster_h cl, uint64_t mask, char *buf, size_t cap);
/* Nodes of a --node list as given: 1 + its commas. */
uint32_t     kvp_cli_list_len(const char *list);
/* "A,B" for the nodes in r that succeeded, in the order they were tried (buf of cap bytes). */
const char  *kvp_cli_report_ok(kvp_cluster_h cl, const kvp_cluster_report_t *r, char *buf,
                               size_t cap);
/* A namespace as put/get/ls/rm print it: 16 hex digits (buf holds KVP_CLI_NS_HEX bytes). */
#define KVP_CLI_NS_HEX 24
const char  *kvp_cli_ns_hex(uint64_t ns, char *buf);
/* A session id as text output prints it (ls, repair): a control byte or backslash as \xNN or
 * \\, so an id a node holds cannot fake a row or reach the terminal as an escape sequence (buf
 * holds KVP_CLI_ID_TEXT bytes; JSON output escapes ids itself). */
#define KVP_CLI_ID_TEXT (4 * 127 + 1)
const char  *kvp_cli_id_text(const char *sid, char *buf);
/* n bytes for a person: "512 B", "48.3 KiB", "1.5 MiB", "2.0 GiB" (the largest unit it reaches) */
void         kvp_cli_fmt_bytes(uint64_t n, char *buf, size_t cap);
/* Begin a JSON report with "node", "session" (when set) and "ns". */
void         kvp_cli_json_head(kvp_json_t *j, const kvp_cli_sess_opts_t *o, uint64_t ns);
/* The session's shape as put and get report it: codec, page_tokens, layers, tokens, heads,
 * head_dim. */
void         kvp_cli_json_shape(kvp_json_t *j, const char *codec, uint32_t P, uint32_t L,
                                uint32_t T, uint32_t H, uint32_t D);
/* The namespace of session o->session: --ns when given, else the only namespace in which the
 * nodes hold that id (found by listing them all; with model_id, only namespaces whose fingerprint
 * matches model_id, the listed geometry and codec, or the listed codec when codec is 0). Prints a
 * one-line error (unknown session, several namespaces, bad --ns) and returns non-OK: an
 * unreachable node's status when the session is on none of the nodes that answered. */
kvp_status_t kvp_cli_session_ns(const char *cmd, kvp_cluster_h cl, const kvp_cli_sess_opts_t *o,
                                const char *model_id, kvp_codec_id_t codec, uint64_t *ns_p);

/* ---- progress line on stderr (only when stderr is a terminal or KVP_PROGRESS=1) ---- */
void kvp_progress(const char *what, uint64_t done, uint64_t total);
void kvp_progress_done(void);

/* ---- benchmark data ---- */
/* A sealed fp16 page (passes kvp_page_parse) of heads x head_dim x tokens (full) under key and
 * layer, its payload finite random halves from seed; out holds KVP_PAGE_HDR_BYTES + payload
 * bytes. Returns its length (0: not an fp16 geometry). */
size_t   kvp_cli_fp16_page(uint32_t heads, uint32_t head_dim, uint32_t tokens, kvp_key128_t key,
                           uint32_t layer, uint64_t seed, uint8_t *out);

/* ---- small statistics ---- */
void   kvp_sort_f64(double *v, size_t n);              /* ascending */
double kvp_median_sorted(const double *v, size_t n);   /* NaN when n == 0 */
/* nearest rank: v[ceil(q n) - 1] (0 < q <= 1), NaN when n == 0 */
double kvp_quantile_sorted(const double *v, size_t n, double q);

#endif
