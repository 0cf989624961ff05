/* cmd_session.c - "kvpack ls" (the sessions a node holds, DRAM and disk, listed page by page)
 * and "kvpack rm" (delete one session), plus what put/get/ls/rm share: their common options,
 * connecting to the node, and finding the namespace of a session id when --ns is not given. */
#include "cli.h"

#include "kvpack/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- shared by put / get / ls / rm ---- */

bool kvp_cli_sess_opt(int argc, char **argv, int *i, kvp_cli_sess_opts_t *o)
{
    if (kvp_opt_str(argc, argv, i, "--node", &o->node) ||
        kvp_opt_str(argc, argv, i, "--session", &o->session) ||
        kvp_opt_str(argc, argv, i, "--ns", &o->ns_hex) ||
        kvp_opt_u64(argc, argv, i, "--timeout-ms", &o->timeout_ms)) {
        return true;
    }
    if (kvp_opt_flag(argv, *i, "--json")) {
        o->json = true;
        return true;
    }
    return false;
}

int kvp_cli_sess_fail(const char *cmd, const kvp_cli_sess_opts_t *o, const char *what,
                      kvp_status_t s)
{
    fprintf(stderr, "kvpack %s: %s%s%s: %s (%s)\n", cmd, o->node ? o->node : "",
            o->node ? ": " : "", what, kvp_status_str(s), kvp_status_name(s));
    return 1;
}

kvp_status_t kvp_cli_connect(const kvp_cli_sess_opts_t *o, kvp_client_h *c_p)
{
    kvp_client_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    p.server     = o->node;
    p.timeout_ms = o->timeout_ms ? (uint32_t)o->timeout_ms : 10000u;
    return kvp_client_create(&p, c_p);
}

const char *kvp_cli_ns_hex(uint64_t ns, char *buf)
{
    snprintf(buf, KVP_CLI_NS_HEX, "%016llx", (unsigned long long)ns);
    return buf;
}

void kvp_cli_json_head(kvp_json_t *j, const kvp_cli_sess_opts_t *o, uint64_t ns)
{
    char hex[KVP_CLI_NS_HEX];

    kvp_json_begin(j, stdout);
    kvp_json_str(j, "node", o->node);
    if (o->session != NULL) {
        kvp_json_str(j, "session", o->session);
    }
    kvp_json_str(j, "ns", kvp_cli_ns_hex(ns, hex));
}

void kvp_cli_json_shape(kvp_json_t *j, const char *codec, uint32_t P, uint32_t L, uint32_t T,
                        uint32_t H, uint32_t D)
{
    kvp_json_str(j, "codec", codec);
    kvp_json_int(j, "page_tokens", P);
    kvp_json_int(j, "layers", L);
    kvp_json_int(j, "tokens", T);
    kvp_json_int(j, "heads", H);
    kvp_json_int(j, "head_dim", D);
}

/* Parse a namespace given as hex (an optional 0x, up to 16 digits). */
static bool ns_parse(const char *hex, uint64_t *ns_p)
{
    char *end;

    if (hex == NULL || hex[0] == '\0' || hex[0] == '-' || strlen(hex) > 18) {
        return false;
    }
    *ns_p = strtoull(hex, &end, 16);
    return *end == '\0';
}

kvp_status_t kvp_cli_session_ns(const char *cmd, kvp_client_h c, const kvp_cli_sess_opts_t *o,
                                const char *model_id, kvp_codec_id_t codec, uint64_t *ns_p)
{
    kvp_session_list_t *l;
    kvp_status_t        s;
    uint32_t            found = 0;
    uint64_t            second = 0;

    if (o->ns_hex != NULL) {
        if (!ns_parse(o->ns_hex, ns_p)) {
            fprintf(stderr, "kvpack %s: --ns wants a hex namespace (as kvpack ls prints it), "
                            "not '%s'\n", cmd, o->ns_hex);
            return KVP_ERR_INVALID;
        }
        return KVP_OK;
    }
    s = kvp_client_list_sessions(c, 0, 0, &l);
    if (s != KVP_OK) {
        kvp_cli_sess_fail(cmd, o, "listing sessions", s);
        return s;
    }
    for (uint32_t i = 0; i < l->n; i++) {
        const kvp_session_info_t *e = &l->sessions[i];
        kvp_codec_id_t            cc = codec ? codec : e->codec;

        if (strcmp(e->sid, o->session) != 0 ||
            (model_id != NULL && (cc == 0 || e->ns != kvp_ns_fingerprint(model_id, e->layers,
                                                                         e->heads, e->head_dim,
                                                                         e->page_tokens, cc)))) {
            continue;
        }
        *(found++ == 0 ? ns_p : &second) = e->ns;
    }
    kvp_session_list_free(l);
    if (found == 0) {
        fprintf(stderr, "kvpack %s: %s: no session '%s'%s\n", cmd, o->node, o->session,
                model_id != NULL ? " under that model id / codec" : "");
        return KVP_ERR_NOT_FOUND;
    }
    if (found > 1) {
        fprintf(stderr, "kvpack %s: session '%s' is in %u namespaces (%016llx, %016llx%s); pass "
                        "--ns\n", cmd, o->session, found, (unsigned long long)*ns_p,
                (unsigned long long)second, found > 2 ? ", ..." : "");
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

/* ---- kvpack ls ---- */

static void ls_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack ls --node HOST:PORT [--json] [--page N] [--max N] [--timeout-ms MS]\n"
            "List the sessions a node holds, in DRAM and on disk: namespace (hex), session id,\n"
            "tokens (chunks x P + tail), layers, codec, where it lives and its bytes.\n"
            "  --page N   sessions per LIST request (default: as many as fit one reply)\n"
            "  --max N    stop after N sessions; the output then says truncated\n");
}

static void ls_print_json(const char *node, const kvp_session_list_t *l)
{
    kvp_json_t j;
    char       ns[KVP_CLI_NS_HEX];

    kvp_json_begin(&j, stdout);
    kvp_json_str(&j, "node", node);
    kvp_json_int(&j, "count", l->n);
    kvp_json_bool(&j, "truncated", l->truncated != 0);
    kvp_json_int(&j, "requests", l->requests);
    kvp_json_arr(&j, "sessions");
    for (uint32_t i = 0; i < l->n; i++) {
        const kvp_session_info_t *e = &l->sessions[i];

        kvp_json_obj(&j, NULL);
        kvp_json_str(&j, "ns", kvp_cli_ns_hex(e->ns, ns));
        kvp_json_str(&j, "session", e->sid);
        kvp_json_int(&j, "tokens", (int64_t)e->n_chunks * e->page_tokens + e->tail_tokens);
        kvp_json_int(&j, "layers", e->layers);
        kvp_json_int(&j, "page_tokens", e->page_tokens);
        kvp_json_int(&j, "chunks", e->n_chunks);
        kvp_json_int(&j, "tail_tokens", e->tail_tokens);
        kvp_json_str(&j, "codec", e->codec ? kvp_codec_name(e->codec) : "");
        kvp_json_int(&j, "heads", e->heads);
        kvp_json_int(&j, "head_dim", e->head_dim);
        kvp_json_bool(&j, "in_dram", (e->where & KVP_SESSION_IN_DRAM) != 0);
        kvp_json_bool(&j, "on_disk", (e->where & KVP_SESSION_ON_DISK) != 0);
        kvp_json_int(&j, "bytes", (int64_t)e->bytes);
        kvp_json_close(&j);
    }
    kvp_json_close(&j);
    kvp_json_end(&j);
}

static void ls_print_text(const kvp_session_list_t *l)
{
    printf("%-16s  %-24s %9s %6s %-8s %-9s %12s\n", "NAMESPACE", "SESSION", "TOKENS", "LAYERS",
           "CODEC", "WHERE", "BYTES");
    for (uint32_t i = 0; i < l->n; i++) {
        const kvp_session_info_t *e = &l->sessions[i];
        const char *where = (e->where & KVP_SESSION_IN_DRAM)
                                ? ((e->where & KVP_SESSION_ON_DISK) ? "dram+disk" : "dram")
                                : ((e->where & KVP_SESSION_ON_DISK) ? "disk" : "-");

        printf("%016llx  %-24s %9llu %6u %-8s %-9s %12llu\n", (unsigned long long)e->ns, e->sid,
               (unsigned long long)e->n_chunks * e->page_tokens + e->tail_tokens, e->layers,
               e->codec ? kvp_codec_name(e->codec) : "-", where, (unsigned long long)e->bytes);
    }
    printf("%u session%s%s\n", l->n, l->n == 1 ? "" : "s",
           l->truncated ? " (truncated: --max reached, the node holds more)" : "");
}

int kvp_cmd_ls(int argc, char **argv)
{
    kvp_cli_sess_opts_t o = {0};
    kvp_session_list_t *l = NULL;
    kvp_client_h        c;
    uint64_t            page = 0, max = 0;
    kvp_status_t        s;

    if (kvp_opt_help(argc, argv)) {
        ls_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_cli_sess_opt(argc, argv, &i, &o) || kvp_opt_u64(argc, argv, &i, "--page", &page) ||
            kvp_opt_u64(argc, argv, &i, "--max", &max)) {
            continue;
        }
        return kvp_opt_unknown("ls", argv[i]);
    }
    if (o.node == NULL || o.session != NULL || o.ns_hex != NULL || page > 4096 ||
        max > UINT32_MAX) {
        ls_usage(stderr);
        return 2;
    }
    s = kvp_cli_connect(&o, &c);
    if (s == KVP_OK) {
        s = kvp_client_list_sessions(c, (uint32_t)page, (uint32_t)max, &l);
        kvp_client_destroy(c);
    }
    if (s != KVP_OK) {
        return kvp_cli_sess_fail("ls", &o, "list", s);
    }
    if (o.json) {
        ls_print_json(o.node, l);
    } else {
        ls_print_text(l);
    }
    kvp_session_list_free(l);
    return 0;
}

/* ---- kvpack rm ---- */

static void rm_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack rm --node HOST:PORT --session SID [--ns HEX] [--json]\n"
            "                 [--timeout-ms MS]\n"
            "Delete a session from a node, in DRAM and on disk (a node restart does not bring it\n"
            "back). Pages other sessions share stay. Without --ns the session id must name one\n"
            "session on the node (kvpack ls shows the namespaces). Unknown session: exit 1.\n");
}

int kvp_cmd_rm(int argc, char **argv)
{
    kvp_cli_sess_opts_t o = {0};
    kvp_client_h        c;
    uint64_t            ns = 0;
    kvp_status_t        s;

    if (kvp_opt_help(argc, argv)) {
        rm_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!kvp_cli_sess_opt(argc, argv, &i, &o)) {
            return kvp_opt_unknown("rm", argv[i]);
        }
    }
    if (o.node == NULL || o.session == NULL) {
        rm_usage(stderr);
        return 2;
    }
    s = kvp_cli_connect(&o, &c);
    if (s != KVP_OK) {
        return kvp_cli_sess_fail("rm", &o, "connect", s);
    }
    s = kvp_cli_session_ns("rm", c, &o, NULL, (kvp_codec_id_t)0, &ns);
    if (s == KVP_OK) {
        s = kvp_client_delete_session(c, ns, o.session);
        if (s != KVP_OK) {
            kvp_cli_sess_fail("rm", &o, o.session, s);
        }
    }
    kvp_client_destroy(c);
    if (s != KVP_OK) {
        return 1;
    }
    if (o.json) {
        kvp_json_t j;

        kvp_cli_json_head(&j, &o, ns);
        kvp_json_bool(&j, "deleted", true);
        kvp_json_end(&j);
    } else {
        printf("deleted session %s (namespace %016llx) from %s\n", o.session,
               (unsigned long long)ns, o.node);
    }
    return 0;
}
