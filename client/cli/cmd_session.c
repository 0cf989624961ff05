/* cmd_session.c - "kvpack ls" (the sessions the nodes hold, DRAM and disk, listed page by page)
 * and "kvpack rm" (delete one session), plus what put/get/ls/rm share: their common options,
 * opening the node list (kvpack/cluster.h), per-node error lines, and finding the namespace of a
 * session id when --ns is not given, and --etcd in place of --node (the peer list read from etcd).
 * With one --node everything prints as for a single node. */
#include "cli.h"

#include "kvpack/alloc.h"
#include "kvpack/etcd.h"
#include "kvpack/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- shared by put / get / ls / rm / repair (and stat / scrub) ---- */

bool kvp_cli_sess_opt(int argc, char **argv, int *i, unsigned takes, kvp_cli_sess_opts_t *o)
{
    if (kvp_opt_str(argc, argv, i, "--node", &o->node) ||
        ((takes & KVP_CLI_TAKES_SESSION) && kvp_opt_str(argc, argv, i, "--session", &o->session)) ||
        ((takes & KVP_CLI_TAKES_NS) && kvp_opt_str(argc, argv, i, "--ns", &o->ns_hex)) ||
        kvp_opt_count(argc, argv, i, "--timeout-ms", &o->timeout_ms) ||
        ((takes & KVP_CLI_TAKES_REPLICAS) &&
         kvp_opt_count(argc, argv, i, "--replicas", &o->replicas)) ||
        kvp_opt_str(argc, argv, i, "--etcd", &o->etcd) ||
        kvp_opt_str(argc, argv, i, "--etcd-prefix", &o->etcd_prefix)) {
        return true;
    }
    if (kvp_opt_flag(argv, *i, "--json")) {
        o->json = true;
        return true;
    }
    return false;
}

/* Parse a namespace given as hex (an optional 0x, then 1..16 hex digits, nothing else: strtoull
 * alone takes a blank, a sign and 17 or more digits, wrapped). */
static bool ns_parse(const char *hex, uint64_t *ns_p)
{
    size_t digits;

    if (hex == NULL) {
        return false;
    }
    hex += (hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) ? 2 : 0;
    digits = strspn(hex, "0123456789abcdefABCDEF");
    if (digits == 0 || digits > 16 || hex[digits] != '\0') {
        return false;
    }
    *ns_p = strtoull(hex, NULL, 16);
    return true;
}

int kvp_cli_sess_check(const char *cmd, const kvp_cli_sess_opts_t *o)
{
    uint64_t ns;

    if (o->node != NULL && o->etcd != NULL) {
        return kvp_cli_usage_error(cmd, "give --node LIST or --etcd URL, not both");
    }
    if (o->etcd_prefix != NULL && o->etcd == NULL) {
        return kvp_cli_usage_error(cmd, "--etcd-prefix needs --etcd URL");
    }
    if (o->session != NULL && (o->session[0] == '\0' || strlen(o->session) >= KVP_SID_MAX)) {
        return kvp_cli_usage_error(cmd, "--session wants 1..%d bytes, got %zu", KVP_SID_MAX - 1,
                                   strlen(o->session));
    }
    if (o->ns_hex != NULL && !ns_parse(o->ns_hex, &ns)) { /* checked before any node is asked */
        return kvp_cli_usage_error(cmd, "--ns wants a hex namespace (as kvpack ls prints it), "
                                        "got '%s'", o->ns_hex);
    }
    if (o->node == NULL && o->etcd == NULL) {
        return kvp_cli_usage_error(cmd, "which nodes? give --node HOST:PORT[,HOST:PORT...] or "
                                        "--etcd URL");
    }
    /* the client's deadline is 32 bits: never wrap it (0: not given, the default) */
    if (o->timeout_ms != 0 && !kvp_cli_range(cmd, "--timeout-ms", o->timeout_ms, 1, UINT32_MAX)) {
        return 2;
    }
    return o->node != NULL ? kvp_cli_node_list_check(cmd, o->node) : 0;
}

int kvp_cli_sess_peers(const char *cmd, kvp_cli_sess_opts_t *o)
{
    static char  peers[KVP_CLUSTER_MAX_NODES * KVP_ETCD_ADDR_MAX];
    char        *got;
    kvp_status_t s;
    int          rc = kvp_cli_sess_check(cmd, o);

    if (rc != 0 || o->etcd == NULL) {
        return rc;
    }
    s = kvp_cluster_peers_etcd(o->etcd, o->etcd_prefix, &got, NULL);
    if (s != KVP_OK) {
        fprintf(stderr, "kvpack %s: etcd %s: %s: %s (%s)\n", cmd, o->etcd,
                s == KVP_ERR_NOT_FOUND ? "no kvpack node registered" : "cannot read the members",
                kvp_status_str(s), kvp_status_name(s));
        return 1;
    }
    snprintf(peers, sizeof(peers), "%s", got);
    kvp_free(got);
    o->node = peers;
    return 0;
}

int kvp_cli_sess_fail(const char *cmd, const kvp_cli_sess_opts_t *o, const char *what,
                      kvp_status_t s)
{
    fprintf(stderr, "kvpack %s: %s%s%s: %s (%s)\n", cmd, o->node ? o->node : "",
            o->node ? ": " : "", what, kvp_status_str(s), kvp_status_name(s));
    return 1;
}

int kvp_cli_open(const char *cmd, const kvp_cli_sess_opts_t *o,
                 kvp_cluster_progress_cb_t progress_cb, kvp_cluster_h *cl_p)
{
    kvp_client_params_t  cp;
    kvp_cluster_params_t p;
    uint32_t             nodes = kvp_cli_list_len(o->node);
    kvp_status_t         s;

    if (o->replicas > nodes) {
        return kvp_cli_usage_error(cmd, "--replicas %llu needs at least %llu nodes; %s %u",
                                   (unsigned long long)o->replicas,
                                   (unsigned long long)o->replicas,
                                   o->etcd ? "etcd lists" : "--node lists", nodes);
    }
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.timeout_ms = o->timeout_ms ? (uint32_t)o->timeout_ms : KVP_CLI_TIMEOUT_MS;
    memset(&p, 0, sizeof(p));
    p.field_mask  = KVP_CLUSTER_PARAM_PEERS | KVP_CLUSTER_PARAM_REPLICAS |
                    KVP_CLUSTER_PARAM_CLIENT | KVP_CLUSTER_PARAM_PROGRESS;
    p.peers       = o->node;
    p.replicas    = o->replicas ? (uint32_t)o->replicas : 1u;
    p.client      = &cp;
    p.progress_cb = progress_cb;
    s = kvp_cluster_create(&p, cl_p);
    return s == KVP_OK ? 0 : kvp_cli_sess_fail(cmd, o, nodes > 1 ? "peer list" : "connect", s);
}

int kvp_cli_per_node_open(const char *cmd, int argc, char **argv, uint64_t timeout_ms,
                          void (*usage)(FILE *), kvp_cli_sess_opts_t *o, kvp_cluster_h *cl_p)
{
    int rc;

    if (kvp_opt_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    memset(o, 0, sizeof(*o));
    o->timeout_ms = timeout_ms;
    for (int i = 1; i < argc; i++) {
        if (!kvp_cli_sess_opt(argc, argv, &i, 0, o)) {
            return kvp_opt_unknown(cmd, argv[i]);
        }
    }
    if ((rc = kvp_cli_sess_peers(cmd, o)) != 0) {
        return rc;
    }
    return (rc = kvp_cli_open(cmd, o, NULL, cl_p)) != 0 ? rc : -1;
}

bool kvp_cli_json_node(kvp_json_t *j, kvp_cluster_h cl, uint32_t k, kvp_status_t s)
{
    kvp_json_obj(j, NULL);
    kvp_json_str(j, "node", kvp_cluster_peer(cl, k));
    kvp_json_bool(j, "ok", s == KVP_OK);
    if (s != KVP_OK) {
        kvp_json_str(j, "error", kvp_status_str(s));
    }
    return s == KVP_OK;
}

void kvp_cli_report_fail(const char *cmd, kvp_cluster_h cl, const kvp_cluster_report_t *r,
                         const char *op, const char *what)
{
    for (uint32_t i = 0; i < r->n_tried; i++) {
        const kvp_cluster_try_t *t = &r->tried[i];

        bool skipped = strcmp(t->stage, "skipped") == 0;

        if (t->status != KVP_OK) {
            fprintf(stderr, "kvpack %s: %s: %s%s: %s (%s)\n", cmd, kvp_cluster_peer(cl, t->node),
                    skipped || strcmp(t->stage, op) == 0 ? what : t->stage,
                    skipped ? " (not tried again, it failed just before)" : "",
                    kvp_status_str(t->status), kvp_status_name(t->status));
        }
    }
}

uint32_t kvp_cli_list_len(const char *list)
{
    uint32_t n = 1;

    for (const char *c = list; *c != '\0'; c++) {
        n += *c == ',';
    }
    return n;
}

const char *kvp_cli_nodes_str(kvp_cluster_h cl, uint64_t mask, char *buf, size_t cap)
{
    uint32_t n   = kvp_cluster_size(cl);
    size_t   len = 0;

    buf[0] = '\0';
    for (uint32_t k = 0; k < n && len < cap; k++) {
        if (mask & (1ull << k)) {
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? "," : "",
                                    kvp_cluster_peer(cl, k));
        }
    }
    return buf;
}

const char *kvp_cli_report_ok(kvp_cluster_h cl, const kvp_cluster_report_t *r, char *buf,
                              size_t cap)
{
    size_t len = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < r->n_tried && len < cap; i++) {
        if (r->tried[i].status == KVP_OK) {
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? "," : "",
                                    kvp_cluster_peer(cl, r->tried[i].node));
        }
    }
    return buf;
}

const char *kvp_cli_ns_hex(uint64_t ns, char *buf)
{
    snprintf(buf, KVP_CLI_NS_HEX, "%016llx", (unsigned long long)ns);
    return buf;
}

const char *kvp_cli_id_text(const char *sid, char *buf)
{
    size_t n = 0;

    for (const unsigned char *c = (const unsigned char *)sid; *c != 0; c++) {
        if (n + 5 > KVP_CLI_ID_TEXT) { /* an id longer than the protocol's 127 bytes */
            break;
        }
        if (*c < 0x20 || *c == 0x7f) {
            n += (size_t)snprintf(buf + n, KVP_CLI_ID_TEXT - n, "\\x%02x", *c);
        } else if (*c == '\\') {
            buf[n++] = '\\';
            buf[n++] = '\\';
        } else {
            buf[n++] = (char)*c;
        }
    }
    buf[n] = 0;
    return buf;
}

void kvp_cli_json_head(kvp_json_t *j, const kvp_cli_sess_opts_t *o, uint64_t ns)
{
    char hex[KVP_CLI_NS_HEX];

    kvp_json_begin(j, stdout);
    kvp_json_str(j, "node", o->node);
    if (o->etcd != NULL) {
        kvp_json_str(j, "etcd", o->etcd);
    }
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


kvp_status_t kvp_cli_session_ns(const char *cmd, kvp_cluster_h cl, const kvp_cli_sess_opts_t *o,
                                const char *model_id, kvp_codec_id_t codec, uint64_t *ns_p)
{
    kvp_cluster_report_t rep;
    kvp_cluster_list_t  *l;
    kvp_status_t         s, down = KVP_OK;
    uint32_t             found = 0, shapeless = 0, other_codec = 0;
    uint64_t             second = 0;

    if (o->ns_hex != NULL) {
        return ns_parse(o->ns_hex, ns_p) ? KVP_OK : KVP_ERR_INVALID; /* kvp_cli_sess_check */
    }
    s = kvp_cluster_list_sessions(cl, 0, 0, &l, &rep);
    if (s != KVP_OK) {
        kvp_cli_report_fail(cmd, cl, &rep, "list", "listing sessions");
        return s;
    }
    for (uint32_t i = 0; i < l->n; i++) {
        const kvp_session_info_t *e = &l->sessions[i];
        kvp_codec_id_t            cc = codec ? codec : e->codec;

        if (strcmp(e->sid, o->session) != 0) {
            continue;
        }
        if (model_id != NULL && (cc == 0 || e->heads == 0)) {
            shapeless++; /* no sealed page yet: its namespace's codec and shape are not known */
            continue;
        }
        if ((model_id != NULL && e->ns != kvp_ns_fingerprint(model_id, e->layers, e->heads,
                                                             e->head_dim, e->page_tokens, cc)) ||
            (model_id == NULL && codec != 0 && e->codec != 0 && e->codec != (uint32_t)codec)) {
            other_codec = e->codec;
            continue;
        }
        *(found++ == 0 ? ns_p : &second) = e->ns;
    }
    kvp_cluster_list_free(l);
    for (uint32_t i = 0; i < rep.n_tried; i++) {
        down = down ? down : rep.tried[i].status;
    }
    if (found == 0) {
        kvp_cli_report_fail(cmd, cl, &rep, "list", "listing sessions");
        fprintf(stderr, "kvpack %s: %s: no session '%s'%s%s\n", cmd, o->node, o->session,
                model_id != NULL || codec != 0 ? " under that model id / codec" : "",
                down ? " on the nodes that answered" : "");
        if (other_codec != 0 && model_id == NULL) {
            fprintf(stderr, "kvpack %s: session '%s' holds %s pages, not %s; nothing written\n",
                    cmd, o->session, kvp_codec_name((kvp_codec_id_t)other_codec),
                    kvp_codec_name(codec));
        }
        if (shapeless > 0) {
            fprintf(stderr, "kvpack %s: a session '%s' shorter than one page (fp16 tail pages only) "
                            "has no codec or shape to match --model-id against: pass --ns (as "
                            "kvpack ls prints it)\n", cmd, o->session);
        }
        return down ? down : KVP_ERR_NOT_FOUND;
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

#define LS_PAGE_MAX 4096u /* --page: sessions one LIST request asks for */

static void ls_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack ls (--node LIST | --etcd URL) [--json] [--page N] [--max N]\n"
            "                [--deleted] [--timeout-ms MS]\n"
            "List the sessions the nodes hold, in DRAM and on disk: namespace (hex), session id,\n"
            "tokens (chunks x P + tail), layers, codec, where it lives and its bytes. With several\n"
            "nodes: the union (each session once, the first listed node's entry) and the nodes\n"
            "holding it; a node that does not answer is named on stderr and the rest are listed.\n"
            KVP_CLI_NODES_HELP
            "  --page N        sessions per LIST request, at most %u (default: as many as fit\n"
            "                  one reply)\n"
            "  --max N         stop after N sessions; the output then says truncated\n"
            "  --deleted       also list rm tombstones the nodes keep (kvpackd --tombstone-ttl)\n"
            "                  of sessions no node holds: WHERE deleted, JSON deleted: true\n"
            "A copy whose node lost a page of it (the page failed its CRC32C when read, or is\n"
            "missing on disk) is WHERE damaged (JSON damaged: true, damaged_on: its nodes): that\n"
            "node answers ERR_CORRUPT for it until it is put again; kvpack repair does that.\n",
            LS_PAGE_MAX);
}

static void ls_print_json(const char *node, kvp_cluster_h cl, const kvp_cluster_list_t *l,
                          const kvp_cluster_report_t *rep)
{
    bool       many = kvp_cluster_size(cl) > 1;
    kvp_json_t j;
    char       ns[KVP_CLI_NS_HEX];

    kvp_json_begin(&j, stdout);
    kvp_json_str(&j, "node", node);
    kvp_json_int(&j, "count", l->n);
    kvp_json_bool(&j, "truncated", l->truncated != 0);
    kvp_json_int(&j, "requests", l->requests);
    if (many) {
        kvp_json_arr(&j, "unreachable");
        for (uint32_t i = 0; i < rep->n_tried; i++) {
            if (rep->tried[i].status != KVP_OK) {
                kvp_json_str(&j, NULL, kvp_cluster_peer(cl, rep->tried[i].node));
            }
        }
        kvp_json_close(&j);
    }
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
        kvp_json_int(&j, "version", (int64_t)e->version);
        kvp_json_bool(&j, "deleted", l->holders[i] == 0);
        kvp_json_bool(&j, "damaged", l->damaged[i] != 0); /* a node lost a page of its copy */
        if (many) {
            kvp_json_arr(&j, "nodes");
            for (uint32_t k = 0; k < kvp_cluster_size(cl); k++) {
                if ((l->holders[i] ? l->holders[i] : l->deleted[i]) & (1ull << k)) {
                    kvp_json_str(&j, NULL, kvp_cluster_peer(cl, k));
                }
            }
            kvp_json_close(&j);
            kvp_json_arr(&j, "damaged_on");
            for (uint32_t k = 0; k < kvp_cluster_size(cl); k++) {
                if (l->damaged[i] & (1ull << k)) {
                    kvp_json_str(&j, NULL, kvp_cluster_peer(cl, k));
                }
            }
            kvp_json_close(&j);
        }
        kvp_json_close(&j);
    }
    kvp_json_close(&j);
    kvp_json_end(&j);
}

static void ls_print_text(kvp_cluster_h cl, const kvp_cluster_list_t *l)
{
    bool     many  = kvp_cluster_size(cl) > 1;
    uint32_t tombs = 0;

    printf("%-16s  %-24s %9s %6s %-8s %-9s %12s%s\n", "NAMESPACE", "SESSION", "TOKENS", "LAYERS",
           "CODEC", "WHERE", "BYTES", many ? "  NODES" : "");
    for (uint32_t i = 0; i < l->n; i++) {
        const kvp_session_info_t *e = &l->sessions[i];
        char        idt[KVP_CLI_ID_TEXT];
        const char *where = l->holders[i] == 0 ? "deleted"
                            : l->damaged[i] != 0 ? "damaged"
                            : (e->where & KVP_SESSION_IN_DRAM)
                                ? ((e->where & KVP_SESSION_ON_DISK) ? "dram+disk" : "dram")
                                : ((e->where & KVP_SESSION_ON_DISK) ? "disk" : "-");

        printf("%016llx  %-24s %9llu %6u %-8s %-9s %12llu", (unsigned long long)e->ns,
               kvp_cli_id_text(e->sid, idt),
               (unsigned long long)e->n_chunks * e->page_tokens + e->tail_tokens, e->layers,
               e->codec ? kvp_codec_name(e->codec) : "-", where, (unsigned long long)e->bytes);
        for (uint32_t k = 0, first = 1; many && k < kvp_cluster_size(cl); k++) {
            if ((l->holders[i] ? l->holders[i] : l->deleted[i]) & (1ull << k)) {
                printf("%s%s", first ? "  " : ",", kvp_cluster_peer(cl, k));
                first = 0;
            }
        }
        printf("\n");
    }
    for (uint32_t i = 0; i < l->n; i++) {
        tombs += l->holders[i] == 0; /* --deleted: a tombstone no node holds a record of */
    }
    printf("%u session%s", l->n - tombs, l->n - tombs == 1 ? "" : "s");
    if (tombs != 0) {
        printf(", %u tombstone%s", tombs, tombs == 1 ? "" : "s");
    }
    printf("%s\n", l->truncated ? " (truncated: --max reached, the node holds more)" : "");
}

int kvp_cmd_ls(int argc, char **argv)
{
    kvp_cli_sess_opts_t  o = {0};
    kvp_cluster_list_t  *l = NULL;
    kvp_cluster_report_t rep;
    kvp_cluster_h        cl;
    uint64_t             page = 0, max = 0;
    bool                 deleted = false;
    kvp_status_t         s;
    int                  rc;

    if (kvp_opt_help(argc, argv)) {
        ls_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_cli_sess_opt(argc, argv, &i, 0, &o) ||
            kvp_opt_count(argc, argv, &i, "--page", &page) ||
            kvp_opt_count(argc, argv, &i, "--max", &max)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--deleted")) {
            deleted = true;
            continue;
        }
        return kvp_opt_unknown("ls", argv[i]);
    }
    /* 0: not given (kvp_opt_count refuses a 0 typed) */
    if ((page != 0 && !kvp_cli_range("ls", "--page", page, 1, LS_PAGE_MAX)) ||
        (max != 0 && !kvp_cli_range("ls", "--max", max, 1, UINT32_MAX))) {
        return 2;
    }
    if ((rc = kvp_cli_sess_peers("ls", &o)) != 0) { /* --etcd: the nodes from etcd */
        return rc;
    }
    rc = kvp_cli_open("ls", &o, NULL, &cl);
    if (rc != 0) {
        return rc;
    }
    /* tombstones always come with versions, so holders == 0 marks a tombstone-only entry */
    s = kvp_cluster_list_sessions_ex(cl, (uint32_t)page, (uint32_t)max,
                                     deleted ? KVP_LIST_DELETED : 0, &l, &rep);
    kvp_cli_report_fail("ls", cl, &rep, "list", "list"); /* the nodes that did not answer */
    if (s == KVP_OK) {
        if (o.json) {
            ls_print_json(o.node, cl, l, &rep);
        } else {
            ls_print_text(cl, l);
        }
    }
    kvp_cluster_list_free(l);
    kvp_cluster_destroy(cl);
    return s == KVP_OK ? 0 : 1;
}

/* ---- kvpack rm ---- */

static void rm_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack rm (--node LIST | --etcd URL) --session SID [--ns HEX] [--replicas N]\n"
            "                 [--json] [--timeout-ms MS]\n"
            "Delete a session from every node that holds it, in DRAM and on disk (a node restart\n"
            "does not bring it back). Pages other sessions share stay. Without --ns the session id\n"
            "must name one session on the nodes (kvpack ls shows the namespaces). Unknown session,\n"
            "or one of the session's first --replicas nodes unreachable (it may keep a copy): exit 1.\n"
            KVP_CLI_NODES_HELP
            KVP_CLI_REPLICAS_HELP);
}

int kvp_cmd_rm(int argc, char **argv)
{
    kvp_cli_sess_opts_t  o = {0};
    kvp_cluster_report_t rep;
    kvp_cluster_h        cl;
    uint64_t             ns = 0;
    kvp_status_t         s;
    char                 done[1024];
    int                  rc;
    bool                 many;

    if (kvp_opt_help(argc, argv)) {
        rm_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!kvp_cli_sess_opt(argc, argv, &i,
                              KVP_CLI_TAKES_SESSION | KVP_CLI_TAKES_NS | KVP_CLI_TAKES_REPLICAS,
                              &o)) {
            return kvp_opt_unknown("rm", argv[i]);
        }
    }
    if (o.session == NULL) {
        return kvp_cli_usage_error("rm", "--session SID is required");
    }
    if ((rc = kvp_cli_sess_peers("rm", &o)) != 0) { /* --etcd: the nodes from etcd */
        return rc;
    }
    rc = kvp_cli_open("rm", &o, NULL, &cl);
    if (rc != 0) {
        return rc;
    }
    many = kvp_cluster_size(cl) > 1;
    s = kvp_cli_session_ns("rm", cl, &o, NULL, (kvp_codec_id_t)0, &ns);
    if (s == KVP_OK) {
        s = kvp_cluster_delete_session(cl, ns, o.session, &rep);
        kvp_cli_report_ok(cl, &rep, done, sizeof(done));
        if (s != KVP_OK) {
            /* with several nodes, a node that never held it is not worth a line */
            for (uint32_t i = 0; many && i < rep.n_tried; i++) {
                rep.tried[i].status = rep.tried[i].status == KVP_ERR_NOT_FOUND && rep.n_ok
                                          ? KVP_OK : rep.tried[i].status;
            }
            kvp_cli_report_fail("rm", cl, &rep, "delete", o.session);
            if (rep.n_ok > 0) {
                fprintf(stderr, "kvpack rm: deleted session %s from %s only; the nodes above may "
                                "still hold it\n", o.session, done);
            }
        }
    }
    kvp_cluster_destroy(cl);
    if (s != KVP_OK) {
        return 1;
    }
    if (o.json) {
        kvp_json_t j;

        kvp_cli_json_head(&j, &o, ns);
        kvp_json_bool(&j, "deleted", true);
        if (many) {
            kvp_json_int(&j, "nodes_deleted", rep.n_ok);
        }
        kvp_json_end(&j);
    } else {
        printf("deleted session %s (namespace %016llx) from %s\n", o.session,
               (unsigned long long)ns, done);
    }
    return 0;
}
