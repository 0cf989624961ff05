/* cmd_get.c - "kvpack get": fetch a session (record + every page; libkvpack checks each page's
 * CRC, key, layer and that all share one codec and geometry), decode the sealed pages and the
 * fp16 tail in the original frame, and write the KV as a .kvd of the shape that was put:
 * layers x (chunks * P + tail) tokens x H x D. The file is written under a temporary name and
 * renamed, so a failed get leaves no partial file and never clobbers an existing one. */
#include "cli.h"

#include "eval/eval.h"
#include "kvpack/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    kvp_cli_sess_opts_t o;
    const char         *out, *model_id;
    const char         *out_file; /* where out is written: out, or stdout's kept descriptor */
    kvp_codec_id_t      codec; /* 0: any */
    bool                latest; /* --latest: kvp_cluster_get_session_latest */
} get_opts_t;

static void get_usage(FILE *out)
{
    fprintf(out,
            "usage: kvpack get (--node LIST | --etcd URL) --session SID --out FILE.kvd [--ns HEX]\n"
            "                  [--model-id ID] [--codec NAME] [--latest] [--json] [--timeout-ms MS]\n"
            "Fetch a session, decode every page and the fp16 tail, write the KV as .kvd. With\n"
            "several nodes they are tried in the session's rank order; the first that has it\n"
            "serves it (a node that does not answer or lacks it: the next).\n"
            KVP_CLI_NODES_HELP
            "  --ns HEX        the session's namespace; without it the session id must name one\n"
            "                  session on the nodes (--model-id / --codec narrow the search)\n"
            "  --model-id ID   the model id the put named (put --model-id): only that namespace\n"
            "  --codec NAME    refuse (exit 1, nothing written) a session of another codec (one\n"
            "                  shorter than a page holds fp16 tail pages only: nothing to check)\n"
            "  --latest        ask every node for its version first and fetch the newest copy of\n"
            "                  those that answer (one that does not is named): without it, a\n"
            "                  node first in rank that missed the latest put (it was down)\n"
            "                  serves its older copy until kvpack repair replaces it\n"
            "  --json          the report as one JSON object on stdout\n");
}

/* Bytes of the page at p (header + payload_len), if it fits in rem; 0 otherwise. */
/* Decode one page into kv at token first of its layer; it must hold want tokens of layer l. */
static kvp_status_t get_decode(const uint8_t *page, size_t len, kvp_kv_t *kv, uint32_t l,
                               uint32_t first, uint32_t want, kvp_page_info_t *info)
{
    size_t       off = ((size_t)l * kv->tokens + first) * kv->heads * kv->head_dim;
    kvp_status_t s;

    if (len == 0) {
        return KVP_ERR_BAD_PAGE;
    }
    s = kvp_page_parse(page, len, info); /* the header first: decode only what fits */
    if (s == KVP_OK && (info->layer != l || info->valid != want || info->heads != kv->heads ||
                        info->head_dim != kv->head_dim)) {
        return KVP_ERR_BAD_PAGE;
    }
    return s == KVP_OK ? kvp_page_decode(page, len, KVP_DTYPE_F32, KVP_FRAME_ORIGINAL,
                                         kv->k + off, kv->v + off, NULL)
                       : s;
}

/* The session's geometry (from its first page, sealed or tail) into an allocated kv. */
static kvp_status_t get_shape(const kvp_session_pages_t *sp, kvp_kv_t *kv)
{
    const kvp_session_desc_t *d = &sp->desc;
    const uint8_t            *p = sp->n_pages ? sp->pages[0] : d->tail;
    size_t n = sp->n_pages ? sp->page_lens[0] : kvp_page_len_at(d->tail, d->tail_len);
    uint64_t                  T = (uint64_t)d->n_chunks * d->page_tokens + d->tail_tokens;
    kvp_page_info_t           info;
    kvp_status_t              s;

    if (p == NULL || T == 0 || T > UINT32_MAX) {
        return KVP_ERR_BAD_PAGE;
    }
    s = kvp_page_parse(p, n, &info);
    return s == KVP_OK ? kvp_kv_alloc(kv, d->layers, (uint32_t)T, info.heads, info.head_dim) : s;
}

/* Decode every sealed page and tail page of sp into kv; *codec_p gets the codec of the sealed
 * pages (0 for a tail-only session; fp16 sink pages do not count). */
static kvp_status_t get_decode_all(const get_opts_t *g, const kvp_session_pages_t *sp,
                                   kvp_kv_t *kv, uint32_t *codec_p)
{
    const kvp_session_desc_t *d = &sp->desc;
    uint32_t                  P = d->page_tokens;
    kvp_page_info_t           info;
    kvp_status_t              s = KVP_OK;
    size_t                    off = 0;

    *codec_p = 0;
    for (uint32_t i = 0; s == KVP_OK && i < sp->n_pages; i++) {
        s = get_decode(sp->pages[i], sp->page_lens[i], kv, i % d->layers, i / d->layers * P, P,
                       &info);
        if (s == KVP_OK && !(info.flags & KVP_PAGE_F_SINK)) {
            *codec_p = info.codec;
            if (g->codec != 0 && info.codec != (uint32_t)g->codec) {
                fprintf(stderr, "kvpack get: session %s holds %s pages, not %s; nothing written\n",
                        g->o.session, kvp_codec_name((kvp_codec_id_t)info.codec),
                        kvp_codec_name(g->codec));
                return KVP_ERR_WRONG_CODEC;
            }
        }
        if (s != KVP_OK) {
            fprintf(stderr, "kvpack get: page %u (chunk %u layer %u): %s\n", i, i / d->layers,
                    i % d->layers, kvp_status_str(s));
        }
        kvp_progress("get decode", i + 1, sp->n_pages);
    }
    kvp_progress_done();
    for (uint32_t l = 0; s == KVP_OK && l < d->n_tail; l++) {
        size_t len = kvp_page_len_at(d->tail + off, d->tail_len - off);

        s = get_decode(d->tail + off, len, kv, l, d->n_chunks * P, d->tail_tokens, &info);
        if (s != KVP_OK) {
            fprintf(stderr, "kvpack get: tail page of layer %u: %s\n", l, kvp_status_str(s));
        }
        off += len;
    }
    return s;
}

static void get_report(const get_opts_t *g, uint64_t ns, const kvp_session_pages_t *sp,
                       const kvp_kv_t *kv, uint32_t codec, const char *from, bool many)
{
    const char *cname = codec ? kvp_codec_name((kvp_codec_id_t)codec) : "fp16 tail only";
    kvp_json_t  j;
    char        nsh[KVP_CLI_NS_HEX], where[96];

    kvp_cli_ns_hex(ns, nsh);
    if (sp->disk_bytes > 0) {
        snprintf(where, sizeof(where), "the node read %u pages, %llu bytes back from its SSD tier",
                 sp->disk_pages, (unsigned long long)sp->disk_bytes);
    } else {
        snprintf(where, sizeof(where), "all in the node's DRAM");
    }
    if (!g->o.json) {
        printf("got session %s (namespace %s, %s, P %u) from %s: %u layers x %u tokens x %u "
               "heads x %u, %u pages + %u tail pages, %llu bytes received (%s) -> %s\n",
               g->o.session, nsh, cname, sp->desc.page_tokens, from, kv->layers, kv->tokens,
               kv->heads, kv->head_dim, sp->n_pages, sp->desc.n_tail,
               (unsigned long long)sp->wire_bytes,
               where, g->out);
        return;
    }
    kvp_cli_json_head(&j, &g->o, ns);
    if (many) {
        kvp_json_str(&j, "from", from);
    }
    kvp_cli_json_shape(&j, codec ? cname : "", sp->desc.page_tokens, kv->layers, kv->tokens,
                       kv->heads, kv->head_dim);
    kvp_json_int(&j, "pages", sp->n_pages);
    kvp_json_int(&j, "tail_pages", sp->desc.n_tail);
    kvp_json_int(&j, "wire_bytes", (int64_t)sp->wire_bytes);
    kvp_json_int(&j, "version", (int64_t)sp->version); /* the record's: ns since the epoch */
    kvp_json_int(&j, "disk_pages", sp->disk_pages);    /* read from the node's SSD tier */
    kvp_json_int(&j, "disk_bytes", (int64_t)sp->disk_bytes);
    kvp_json_str(&j, "out", g->out);
    kvp_json_end(&j);
}

static int get_run(const get_opts_t *g)
{
    kvp_session_pages_t *sp = NULL;
    kvp_cluster_report_t rep;
    kvp_cluster_h        cl;
    kvp_kv_t             kv = {0};
    uint64_t             ns = 0;
    uint32_t             codec = 0;
    char                 from[256] = "";
    bool                 many;
    kvp_status_t         s;
    int                  rc = kvp_cli_open("get", &g->o, NULL, &cl);

    if (rc != 0) {
        return rc;
    }
    many = kvp_cluster_size(cl) > 1;
    s    = kvp_cli_session_ns("get", cl, &g->o, g->model_id, g->codec, &ns);
    if (s == KVP_OK) {
        s = g->latest ? kvp_cluster_get_session_latest(cl, ns, g->o.session, NULL, NULL, NULL,
                                                       &sp, &rep)
                      : kvp_cluster_get_session(cl, ns, g->o.session, NULL, &sp, &rep);
        if (s != KVP_OK) {
            kvp_cli_report_fail("get", cl, &rep, "get", g->o.session);
        } else {
            snprintf(from, sizeof(from), "%s", kvp_cluster_peer(cl, rep.served_by));
        }
        for (uint32_t i = 0; s == KVP_OK && g->latest && i < rep.n_tried; i++) {
            if (kvp_cluster_status_unreachable(rep.tried[i].status)) { /* newest of the rest */
                fprintf(stderr, "kvpack get: %s did not answer (%s): the newest copy of the "
                        "nodes that did was served; a newer one may be there\n",
                        kvp_cluster_peer(cl, rep.tried[i].node),
                        kvp_status_name(rep.tried[i].status));
            }
        }
    }
    kvp_cluster_destroy(cl);
    if (s == KVP_OK) {
        s = get_shape(sp, &kv);
        if (s != KVP_OK) {
            fprintf(stderr, "kvpack get: session %s has no readable shape: %s\n", g->o.session,
                    kvp_status_str(s));
        }
    }
    if (s == KVP_OK) {
        s = get_decode_all(g, sp, &kv, &codec);
    }
    if (s == KVP_OK) {
        s = kvp_kvd_write(g->out_file, &kv); /* beside it, then renamed: nothing half-written */
        if (s != KVP_OK) {
            fprintf(stderr, "kvpack get: cannot write %s: %s\n", g->out, kvp_status_str(s));
        }
    }
    if (s == KVP_OK) {
        get_report(g, ns, sp, &kv, codec, from, many);
    }
    kvp_kv_free(&kv);
    kvp_session_pages_free(sp);
    return s == KVP_OK ? 0 : 1;
}

int kvp_cmd_get(int argc, char **argv)
{
    get_opts_t  g;
    const char *codec = NULL;
    int         rc;

    memset(&g, 0, sizeof(g));
    if (kvp_opt_help(argc, argv)) {
        get_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (kvp_cli_sess_opt(argc, argv, &i, KVP_CLI_TAKES_SESSION | KVP_CLI_TAKES_NS, &g.o) ||
            kvp_opt_str(argc, argv, &i, "--out", &g.out) ||
            kvp_opt_str(argc, argv, &i, "--codec", &codec) ||
            kvp_opt_str(argc, argv, &i, "--model-id", &g.model_id)) {
            continue;
        }
        if (kvp_opt_flag(argv, i, "--latest")) {
            g.latest = true;
            continue;
        }
        return kvp_opt_unknown("get", argv[i]);
    }
    if (g.o.session == NULL) {
        return kvp_cli_usage_error("get", "--session SID is required");
    }
    if (g.out == NULL) {
        return kvp_cli_usage_error("get", "--out FILE.kvd is required");
    }
    if (codec != NULL && !kvp_cli_codec("get", codec, NULL, &g.codec)) {
        return 2;
    }
    if (kvp_cli_out_path_check("get", "--out", g.out, NULL) != 0) {
        return 2;
    }
    if ((rc = kvp_cli_sess_peers("get", &g.o)) != 0) { /* --etcd: the nodes from etcd */
        return rc;
    }
    g.out_file = kvp_cli_out_claim_stdout(g.out);
    return get_run(&g);
}
