/* cli_util.c - option parsing, JSON writer and progress line shared by all subcommands. */
#include "cli.h"
#include "kvpack/etcd.h"
#include "kvpack/file.h"
#include "kvpack/num.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- options ---- */

/* The command being run ("put", "bench codec"), for the option helpers' usage errors: they exit
 * from deep in a command's option loop, which would otherwise have to pass its name to each. */
static char cli_cmd[64] = "?";

void kvp_cli_set_cmd(const char *cmd)
{
    snprintf(cli_cmd, sizeof(cli_cmd), "%s", cmd);
}

static const char *opt_match(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t      n = strlen(name);

    if (strncmp(a, name, n) != 0) {
        return NULL;
    }
    if (a[n] == '=') {
        return a + n + 1;
    }
    if (a[n] != '\0') {
        return NULL;
    }
    if (*i + 1 >= argc) {
        exit(kvp_cli_usage_error(cli_cmd, "%s needs a value", name));
    }
    (*i)++;
    return argv[*i];
}

bool kvp_opt_str(int argc, char **argv, int *i, const char *name, const char **val_p)
{
    const char *v = opt_match(argc, argv, i, name);

    if (v == NULL) {
        return false;
    }
    *val_p = v;
    return true;
}

bool kvp_opt_u64(int argc, char **argv, int *i, const char *name, uint64_t *val_p)
{
    const char *v = opt_match(argc, argv, i, name);

    if (v == NULL) {
        return false;
    }
    if (kvp_num_parse_u64(v, val_p) != 0) {
        exit(kvp_cli_usage_error(cli_cmd, "%s expects a whole number (decimal or 0x hex, no "
                                 "sign; k/M/G suffixes allowed), got '%s'", name, v));
    }
    return true;
}

bool kvp_opt_count(int argc, char **argv, int *i, const char *name, uint64_t *val_p)
{
    if (!kvp_opt_u64(argc, argv, i, name, val_p)) {
        return false;
    }
    if (*val_p == 0) {
        exit(kvp_cli_usage_error(cli_cmd, "%s wants 1 or more, got 0", name));
    }
    return true;
}

int kvp_cli_out_path_check(const char *cmd, const char *opt, const char *path,
                           const char *suffixes)
{
    const char *slash;
    size_t      n = strlen(path);
    char        dir[PATH_MAX], want[128];
    size_t      want_len = 0;
    struct stat st;
    int         suffix_ok = suffixes == NULL;

    for (const char *s = suffixes; s != NULL && *s != '\0' && !suffix_ok;) {
        size_t k = strcspn(s, "|");

        suffix_ok = n > k && strncmp(path + n - k, s, k) == 0;
        s += k + (s[k] == '|');
    }
    if (!suffix_ok) { /* "SUF1 or SUF2": the message is one line, so the list is built first */
        for (const char *s = suffixes; *s != '\0' && want_len < sizeof(want);) {
            size_t k = strcspn(s, "|");

            want_len += (size_t)snprintf(want + want_len, sizeof(want) - want_len, "%s%.*s",
                                         s == suffixes ? "" : " or ", (int)k, s);
            s += k + (s[k] == '|');
        }
        return kvp_cli_usage_error(cmd, "cannot write %s %s: the file name must end in %s", opt,
                                   path, want);
    }
    if (n == 0) {
        return kvp_cli_usage_error(cmd, "%s wants a file name", opt);
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        return kvp_cli_usage_error(cmd, "cannot write %s %s: it is a directory", opt, path);
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* /dev/stdout, a FIFO: written in place */
        return access(path, W_OK) == 0 ? 0
                                       : kvp_cli_usage_error(cmd, "cannot write %s %s: %s", opt,
                                                             path, strerror(errno));
    }
    { /* the new file goes beside the file itself: through a symlink, beside its target */
        char       *real   = kvp_file_link_target(path); /* NULL: no memory, a link loop */
        const char *target = real != NULL ? real : path;

        slash = strrchr(target, '/');
        if (slash == NULL) {
            snprintf(dir, sizeof(dir), ".");
        } else { /* "/x.svg": the root */
            snprintf(dir, sizeof(dir), "%.*s", slash == target ? 1 : (int)(slash - target),
                     target);
        }
        free(real);
    }
    if (access(dir, W_OK) != 0) {
        return kvp_cli_usage_error(cmd, "cannot write %s %s: %s: %s", opt, path, dir,
                                   strerror(errno));
    }
    return 0;
}

const char *kvp_cli_out_claim_stdout(const char *path)
{
    static char fd_path[32];
    struct stat st, out;
    int         keep;

    if (stat(path, &st) != 0 || S_ISREG(st.st_mode) || fstat(STDOUT_FILENO, &out) != 0 ||
        st.st_dev != out.st_dev || st.st_ino != out.st_ino) {
        return path;
    }
    fflush(stdout);
    keep = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (keep < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        return path; /* no descriptor left: the report stays mixed in, as before */
    }
    snprintf(fd_path, sizeof(fd_path), "/dev/fd/%d", keep);
    return fd_path;
}

bool kvp_cli_range(const char *cmd, const char *opt, uint64_t v, uint64_t lo, uint64_t hi)
{
    if (v >= lo && v <= hi) {
        return true;
    }
    if (hi == UINT64_MAX) {
        kvp_cli_usage_error(cmd, "%s wants %llu or more, got %llu", opt, (unsigned long long)lo,
                            (unsigned long long)v);
    } else {
        kvp_cli_usage_error(cmd, "%s wants %llu..%llu, got %llu", opt, (unsigned long long)lo,
                            (unsigned long long)hi, (unsigned long long)v);
    }
    return false;
}

bool kvp_cli_geometry(const char *cmd, const char *heads_opt, uint64_t heads,
                      const char *head_dim_opt, uint64_t head_dim, const char *page_tokens_opt,
                      uint64_t page_tokens)
{
    return kvp_cli_range(cmd, heads_opt, heads, 1, KVP_PAGE_MAX_HEADS) &&
           kvp_cli_range(cmd, head_dim_opt, head_dim, 1, KVP_PAGE_MAX_DIM) &&
           kvp_cli_range(cmd, page_tokens_opt, page_tokens, 1, KVP_PAGE_MAX_TOKENS);
}

bool kvp_cli_codec_takes(kvp_codec_id_t codec, uint64_t heads, uint64_t head_dim,
                         uint64_t page_tokens)
{
    kvp_page_params_t pp;

    memset(&pp, 0, sizeof(pp));
    pp.codec       = codec;
    pp.heads       = (uint32_t)heads;
    pp.head_dim    = (uint32_t)head_dim;
    pp.page_tokens = (uint32_t)page_tokens;
    return kvp_codec_check(&pp) == KVP_OK;
}

bool kvp_cli_codec_fits(const char *cmd, kvp_codec_id_t codec, uint64_t heads, uint64_t head_dim,
                        uint64_t page_tokens)
{
    if (kvp_cli_codec_takes(codec, heads, head_dim, page_tokens)) {
        return true;
    }
    kvp_cli_usage_error(cmd, "%s does not take pages of heads %llu, head_dim %llu, %llu tokens: "
                        "it takes %s", kvp_codec_name(codec), (unsigned long long)heads,
                        (unsigned long long)head_dim, (unsigned long long)page_tokens,
                        kvp_codec_geometry_rule(codec));
    return false;
}

bool kvp_opt_kv(int argc, char **argv, int *i, kvp_opt_kv_t *kv)
{
    return kvp_opt_str(argc, argv, i, "--codec", &kv->codec) ||
           kvp_opt_u64(argc, argv, i, "--layers", &kv->layers) ||
           kvp_opt_u64(argc, argv, i, "--heads", &kv->heads) ||
           kvp_opt_u64(argc, argv, i, "--head-dim", &kv->head_dim) ||
           kvp_opt_u64(argc, argv, i, "--tokens", &kv->tokens) ||
           kvp_opt_u64(argc, argv, i, "--page-tokens", &kv->page_tokens) ||
           kvp_opt_u64(argc, argv, i, "--reps", &kv->reps);
}

bool kvp_opt_f64(int argc, char **argv, int *i, const char *name, double *val_p)
{
    const char *v = opt_match(argc, argv, i, name);
    char       *end;

    if (v == NULL) {
        return false;
    }
    *val_p = strtod(v, &end);
    if (end == v || *end != '\0' || !isfinite(*val_p)) {
        exit(kvp_cli_usage_error(cli_cmd, "%s expects a finite number, got '%s'", name, v));
    }
    return true;
}

bool kvp_opt_flag(char **argv, int i, const char *name)
{
    return strcmp(argv[i], name) == 0;
}

bool kvp_opt_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            return true;
        }
    }
    return false;
}

int kvp_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "kvpack %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see kvpack %s --help)\n", cmd);
    return 2;
}

bool kvp_cli_exe_ok(const char *cmd, const char *opt, const char *path)
{
    if (path == NULL || access(path, X_OK) == 0) {
        return true;
    }
    kvp_cli_usage_error(cmd, "%s '%s': %s", opt, path, strerror(errno));
    return false;
}

int kvp_opt_unknown(const char *cmd, const char *arg)
{
    return kvp_cli_usage_error(cmd, "unknown option '%s'", arg);
}

bool kvp_cli_codec(const char *cmd, const char *name, const char *also, kvp_codec_id_t *codec_p)
{
    char   names[128];
    size_t len = 0;

    if (kvp_codec_from_name(name, codec_p) == KVP_OK) {
        return true;
    }
    for (int c = 1; c < KVP_CODEC_MAX && len < sizeof(names); c++) { /* the codec table's names */
        const char *n = kvp_codec_name((kvp_codec_id_t)c);

        if (strcmp(n, "unknown") != 0) {
            len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s", len ? "|" : "", n);
        }
    }
    kvp_cli_usage_error(cmd, "unknown codec '%s' (%s%s%s)", name, names, also != NULL ? "|" : "",
                        also != NULL ? also : "");
    return false;
}

/* NULL when item is HOST:PORT as the client takes it (kvp_xfer_parse_addr: a host, "[v6]" or
 * not, before the last ':'), with a port of digits only in 1..65535; else what is wrong with it. */
static const char *node_item_problem(const char *item)
{
    const char *colon = strrchr(item, ':');
    uint64_t    port  = 0;

    if (strlen(item) >= KVP_ETCD_ADDR_MAX) {
        return "longer than an address can be";
    }
    if (colon == NULL) {
        return "it has no :PORT";
    }
    if (colon == item || strncmp(item, "[]:", 3) == 0) {
        return "it has no HOST";
    }
    for (const char *c = colon + 1; *c != '\0' && port <= 65535; c++) {
        port = *c >= '0' && *c <= '9' ? port * 10 + (uint64_t)(*c - '0') : 65536;
    }
    return colon[1] == '\0' || port == 0 || port > 65535 ? "the port is not a number in 1..65535"
                                                          : NULL;
}

int kvp_cli_node_list_check(const char *cmd, const char *list)
{
    char        copy[KVP_CLUSTER_MAX_NODES * KVP_ETCD_ADDR_MAX];
    char       *rest = copy, *item;
    const char *seen[KVP_CLUSTER_MAX_NODES];
    uint32_t    n = 0, i, j;

    if (strlen(list) >= sizeof(copy)) {
        return kvp_cli_usage_error(cmd, "--node: more than %u nodes", KVP_CLUSTER_MAX_NODES);
    }
    snprintf(copy, sizeof(copy), "%s", list);
    while ((item = kvp_list_item_next(&rest)) != NULL) {
        const char *why = node_item_problem(item);

        if (*item == '\0') {
            return kvp_cli_usage_error(cmd, "--node '%s' has an empty item", list);
        }
        if (why != NULL) {
            return kvp_cli_usage_error(cmd, "--node '%s' is not HOST:PORT: %s", item, why);
        }
        if (n == KVP_CLUSTER_MAX_NODES) {
            return kvp_cli_usage_error(cmd, "--node: more than %u nodes", KVP_CLUSTER_MAX_NODES);
        }
        seen[n++] = item;
    }
    if (!kvp_cluster_addr_dup(seen, n, &i, &j)) {
        return 0;
    }
    if (strcmp(seen[i], seen[j]) == 0) {
        return kvp_cli_usage_error(cmd, "--node lists %s twice", seen[i]);
    }
    return kvp_cli_usage_error(cmd, "--node lists %s and %s: one node (the same port and address) "
                               "twice", seen[i], seen[j]);
}

/* ---- JSON ---- */

static void json_key(kvp_json_t *j, const char *key)
{
    if (j->need_comma[j->depth]) {
        fputc(',', j->out);
    }
    j->need_comma[j->depth] = true;
    if (key != NULL) {
        fprintf(j->out, "\"%s\":", key);
    }
}

/* Length of the well-formed UTF-8 sequence at s (no overlong forms, no surrogates, at most
 * U+10FFFF), 0 when the bytes there are not one. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0], n, cp;

    if (c < 0x80) {
        return 1;
    }
    n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c <= 0xEF ? 3 : 0) : c >= 0xC2 ? 2 : 0;
    if (n == 0) {
        return 0;
    }
    cp = c & (0x7Fu >> n);
    for (unsigned i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) { /* also stops at the NUL */
            return 0;
        }
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
        return 0;
    }
    return n;
}

/* A JSON string: quotes, backslashes and control bytes escaped; UTF-8 as it is; a byte that is
 * not part of well-formed UTF-8 (a session id may be any bytes) as \u00XX, so the output is
 * always valid JSON text (it used to be copied raw, and one such id made every ls --json of the
 * node unreadable). */
static void json_escaped(FILE *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    fputc('"', out);
    while (*p != '\0') {
        size_t n = utf8_len(p);

        if (*p == '"' || *p == '\\') {
            fprintf(out, "\\%c", *p);
        } else if (*p < 0x20 || n == 0) {
            fprintf(out, "\\u%04x", *p);
        } else {
            fwrite(p, 1, n, out);
            p += n;
            continue;
        }
        p++;
    }
    fputc('"', out);
}

void kvp_json_begin(kvp_json_t *j, FILE *out)
{
    memset(j, 0, sizeof(*j));
    j->out = out;
    fputc('{', out);
}

void kvp_json_end(kvp_json_t *j)
{
    while (j->depth > 0) {
        kvp_json_close(j);
    }
    fputs("}\n", j->out);
    fflush(j->out);
}

static void json_open(kvp_json_t *j, const char *key, char open, char close)
{
    json_key(j, key);
    fputc(open, j->out);
    if (j->depth < 15) {
        j->depth++;
    }
    j->need_comma[j->depth] = false;
    j->closer[j->depth]     = close;
}

void kvp_json_obj(kvp_json_t *j, const char *key) { json_open(j, key, '{', '}'); }
void kvp_json_arr(kvp_json_t *j, const char *key) { json_open(j, key, '[', ']'); }

void kvp_json_close(kvp_json_t *j)
{
    if (j->depth > 0) {
        fputc(j->closer[j->depth], j->out);
        j->depth--;
    }
}

void kvp_json_num(kvp_json_t *j, const char *key, double v)
{
    json_key(j, key);
    if (isfinite(v)) {
        fprintf(j->out, "%.6g", v);
    } else {
        fputs("null", j->out);
    }
}

void kvp_json_int(kvp_json_t *j, const char *key, int64_t v)
{
    json_key(j, key);
    fprintf(j->out, "%lld", (long long)v);
}

void kvp_json_u64(kvp_json_t *j, const char *key, uint64_t v)
{
    json_key(j, key);
    fprintf(j->out, "%llu", (unsigned long long)v);
}

void kvp_json_str(kvp_json_t *j, const char *key, const char *v)
{
    json_key(j, key);
    json_escaped(j->out, v);
}

void kvp_json_bool(kvp_json_t *j, const char *key, bool v)
{
    json_key(j, key);
    fputs(v ? "true" : "false", j->out);
}

/* ---- progress ----
 * On a terminal: one line rewritten in place. Otherwise (logs, CI): a plain line at most every
 * 5 s and at the end, so long runs still show they are alive without flooding the log.
 * KVP_PROGRESS=0 silences it, KVP_PROGRESS=1 forces the terminal style. */

static int progress_mode(void)
{
    static int mode = -1; /* 0 off, 1 terminal, 2 plain lines */

    if (mode < 0) {
        const char *e = getenv("KVP_PROGRESS");

        if (e != NULL) {
            mode = strcmp(e, "0") == 0 ? 0 : 1;
        } else {
            mode = isatty(2) ? 1 : 2;
        }
    }
    return mode;
}

static uint64_t progress_last_ns;
static int      progress_open;

void kvp_progress(const char *what, uint64_t done, uint64_t total)
{
    int             mode = progress_mode();
    struct timespec ts;
    uint64_t        now;

    if (mode == 0) {
        return;
    }
    if (mode == 2) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        if (progress_last_ns == 0) {
            progress_last_ns = now; /* first call: start the clock, print nothing yet */
        }
        if (now - progress_last_ns < 5000000000ull && !(total > 0 && done == total &&
                                                        progress_open)) {
            return;
        }
        progress_last_ns = now;
        progress_open    = 1;
    }
    if (total > 0) {
        fprintf(stderr, "%s%s: %llu/%llu (%.0f%%)%s", mode == 1 ? "\r" : "", what,
                (unsigned long long)done, (unsigned long long)total,
                100.0 * (double)done / (double)total, mode == 1 ? "   " : "\n");
    } else {
        fprintf(stderr, "%s%s: %llu%s", mode == 1 ? "\r" : "", what, (unsigned long long)done,
                mode == 1 ? "   " : "\n");
    }
    progress_open = 1;
    fflush(stderr);
}

void kvp_progress_done(void)
{
    if (progress_mode() == 1 && progress_open) {
        fputc('\n', stderr);
    }
    progress_open    = 0;
    progress_last_ns = 0;
}

/* ---- small statistics ---- */

static int cmp_f64(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

void kvp_sort_f64(double *v, size_t n) { qsort(v, n, sizeof(*v), cmp_f64); }

size_t kvp_cli_fp16_page(uint32_t heads, uint32_t head_dim, uint32_t tokens, kvp_key128_t key,
                         uint32_t layer, uint64_t seed, uint8_t *out)
{
    kvp_page_info_t info;
    size_t          payload = kvp_codec_payload_bytes(KVP_CODEC_FP16, heads, head_dim, tokens,
                                                      tokens);

    if (payload == 0) {
        return 0;
    }
    memset(&info, 0, sizeof(info));
    info.codec = KVP_CODEC_FP16;
    info.bits_k = info.bits_v = 16;
    info.valid = info.capacity = tokens;
    info.heads       = heads;
    info.head_dim    = head_dim;
    info.layer       = layer;
    info.chunk_key   = key;
    info.payload_len = (uint32_t)payload;
    for (size_t i = 0; i + 8 <= payload; i += 8) {
        uint64_t r = kvp_splitmix64(&seed) & 0x3bff3bff3bff3bffull; /* finite halves */

        memcpy(out + KVP_PAGE_HDR_BYTES + i, &r, 8);
    }
    kvp_page_hdr_write(&info, out);
    kvp_page_seal(out);
    return KVP_PAGE_HDR_BYTES + payload;
}

double kvp_quantile_sorted(const double *v, size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);

    return n == 0 ? NAN : v[k == 0 ? 0 : (k > n ? n : k) - 1];
}

double kvp_median_sorted(const double *v, size_t n)
{
    return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void kvp_cli_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
    double                   v      = (double)n;
    int                      u      = -1;

    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    if (u < 0) {
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
    } else {
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
    }
}
