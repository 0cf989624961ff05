/* model_node.c - disaggregated prefill/decode of a real model through a kvpackd node.
 * Prefill role: run prompt[0..n-2] with one codec (bare cache regions, or an fp16 sink whose
 * pages carry KVP_PAGE_F_SINK), pushing each step's sealed pages on a put stream (they ship
 * while the next chunk computes), then the session record (chunk keys + fp16 tail pages), start a second kvpack process (decode role) that
 * fetches the session, rebuilds its cache from the pages, feeds prompt[n-1] and decodes greedily;
 * then delete the session from the node (unless keep_session), decode in-process with the same
 * codec and compare the two texts.
 * Main flow: kvp_model_node_run -> node_prefill -> node_spawn_decode | node_decode. */
#include "model_node.h"

#include "kvpack/alloc.h"
#include "kvpack/child.h"
#include "kvpack/kvpack.h"
#include "kvpack/log.h"

#include "run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static kvp_status_t node_connect(const char *node, kvp_client_h *cl_p)
{
    kvp_client_params_t cp = {.field_mask = KVP_CLIENT_PARAM_SERVER, .server = node};
    kvp_status_t        status = kvp_client_create(&cp, cl_p);

    if (status != KVP_OK) {
        KVP_LOG_ERROR("model", "cannot reach node %s: %s", node, kvp_status_str(status));
    }
    return status;
}

/* One lane of p->codec with p's cache regions (bare, or an fp16 sink of p->sink_pages chunks). */
static kvp_status_t node_run_create(const kvp_model_t *m, const kvp_model_node_params_t *p,
                                    uint32_t max_tokens, int keep_pages, kvp_run_t **run_p)
{
    kvp_kvc_regions_t r = {.sink_pages = p->sink_pages};
    kvp_status_t      status;

    status = kvp_run_create(m, &p->codec, 1, p->page_tokens, max_tokens, keep_pages, run_p);
    if (status == KVP_OK && p->sink_pages > 0) {
        status = kvp_run_set_regions(*run_p, 0, &r, NULL);
    }
    return status;
}

/* Greedy text of steps tokens after prompt, with the cache already holding prompt[0..n-2]. */
static kvp_status_t node_generate(kvp_run_t *run, const kvp_model_t *m, const uint32_t *prompt,
                                  uint32_t np, uint32_t steps, char **text_p)
{
    uint32_t    *out = kvp_malloc(steps * sizeof(*out), "node gen");
    kvp_status_t status;
    size_t       len;
    FILE        *ms;

    if (out == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    status = kvp_run_generate(run, prompt + np - 1, 1, steps, out);
    if (status == KVP_OK) {
        *text_p = NULL;
        ms      = open_memstream(text_p, &len);
        if (ms == NULL) {
            status = KVP_ERR_NO_MEMORY;
        } else {
            kvp_run_print(ms, m, prompt[np - 1], out, steps);
            fclose(ms);
        }
    }
    kvp_free(out);
    return status;
}

/* Decode role: fetch the session, restore the cache, generate, print the text. */
static int node_decode(const kvp_model_t *m, const kvp_model_node_params_t *p)
{
    kvp_client_h         cl   = NULL;
    kvp_session_pages_t *sp   = NULL;
    kvp_run_t           *run  = NULL;
    uint32_t            *ids  = NULL, np = 0;
    char                *text = NULL;
    uint64_t             ns   = kvp_run_ns(m, p->codec, p->page_tokens);
    kvp_status_t         status;
    uint64_t             ntok64;
    uint32_t             ntok;

    status = kvp_run_prompt(m, p->prompt, &ids, &np);
    if (status == KVP_OK) {
        status = node_connect(p->node, &cl);
    }
    if (status == KVP_OK) {
        /* the client checks every sealed page (sink pages aside) and the tail against the
         * geometry this model decodes, on top of kvp_kvc_restore's own checks */
        kvp_page_params_t expect = {.codec = p->codec, .heads = m->cfg.kv_heads,
                                    .head_dim = m->cfg.head_dim, .page_tokens = p->page_tokens};

        status = kvp_client_get_session_expect(cl, ns, p->session, &expect, &sp);
        if (status != KVP_OK) {
            KVP_LOG_ERROR("model", "fetching session %s failed: %s", p->session,
                          kvp_status_str(status));
        }
    }
    if (status != KVP_OK) {
        goto out;
    }
    /* in 64 bits: a record's n_chunks * P + tail_tokens must not wrap into a matching count */
    ntok64 = (uint64_t)sp->desc.n_chunks * sp->desc.page_tokens + sp->desc.tail_tokens;
    ntok   = (uint32_t)ntok64;
    if (sp->desc.layers != m->cfg.layers || sp->desc.page_tokens != p->page_tokens ||
        ntok64 + 1 != np) {
        KVP_LOG_ERROR("model", "session %s holds %llu tokens of %u layers (P %u); the prompt "
                      "needs %u tokens of %u layers (P %u)", p->session,
                      (unsigned long long)ntok64, sp->desc.layers, sp->desc.page_tokens, np - 1,
                      m->cfg.layers, p->page_tokens);
        status = KVP_ERR_INVALID;
        goto out;
    }
    status = node_run_create(m, p, np + p->steps, 0, &run);
    if (status == KVP_OK) {
        status = kvp_kvc_restore(run->cache[0], ids, ntok, (const uint8_t *const *)sp->pages,
                                 sp->page_lens, sp->n_pages, sp->desc.tail, sp->desc.tail_len,
                                 sp->desc.n_tail);
    }
    if (status == KVP_OK) {
        status = node_generate(run, m, ids, np, p->steps, &text);
    }
    if (status == KVP_OK) {
        fprintf(stdout, "%s", text);
        fflush(stdout);
        fprintf(stderr, "kvpack model: decode process fetched %u pages + %u tail pages "
                "(%llu wire bytes) for %u tokens\n", sp->n_pages, sp->desc.n_tail,
                (unsigned long long)sp->wire_bytes, ntok);
    }
out:
    free(text);
    kvp_run_destroy(run);
    kvp_session_pages_free(sp);
    kvp_client_destroy(cl);
    kvp_free(ids);
    if (status != KVP_OK) {
        fprintf(stderr, "kvpack model: decode from node failed: %s\n", kvp_status_str(status));
        return 1;
    }
    return 0;
}

/* Prefill prompt[0..np-2] in a run that keeps its pages, P tokens at a time: the pages each step
 * sealed are pushed on a put stream and ship while the next step computes; then the record with
 * the fp16 tail. */
static kvp_status_t node_prefill(const kvp_model_t *m, const kvp_model_node_params_t *p,
                                 const uint32_t *ids, uint32_t np, const char *sid,
                                 uint64_t *bytes_p)
{
    kvp_client_params_t cp = {.field_mask = KVP_CLIENT_PARAM_SERVER, .server = p->node};
    kvp_run_t          *run = NULL;
    kvp_put_stream_h    ps  = NULL;
    kvp_session_desc_t  d;
    kvp_kvc_t          *c;
    uint64_t            ns = kvp_run_ns(m, p->codec, p->page_tokens);
    kvp_status_t        status;
    uint32_t            pushed = 0;

    memset(&d, 0, sizeof(d));
    status = node_run_create(m, p, np, 1, &run);
    if (status == KVP_OK) {
        status = kvp_put_stream_open(&cp, ns, &ps);
        if (status != KVP_OK) {
            KVP_LOG_ERROR("model", "cannot reach node %s: %s", p->node, kvp_status_str(status));
        }
    }
    if (status != KVP_OK) {
        goto out;
    }
    c = run->cache[0];
    for (uint32_t t = 0; t < np - 1 && status == KVP_OK; t += p->page_tokens) {
        uint32_t n      = np - 1 - t < p->page_tokens ? np - 1 - t : p->page_tokens;
        uint32_t sealed = 0;

        status = kvp_run_feed(run, ids + t, n);
        sealed = c->sealed / p->page_tokens * m->cfg.layers;
        if (status == KVP_OK && sealed > pushed) {
            status = kvp_put_stream_push(ps, (const void *const *)c->pages + pushed,
                                         c->page_lens + pushed, sealed - pushed);
            pushed = sealed;
        }
    }
    if (status == KVP_OK) {
        status = kvp_kvc_tail_pack(c, &d.tail, &d.tail_len, &d.n_tail);
    }
    if (status == KVP_OK) {
        d.layers      = m->cfg.layers;
        d.page_tokens = p->page_tokens;
        d.n_chunks    = c->sealed / p->page_tokens;
        d.chunk_keys  = c->keys;
        d.tail_tokens = c->ntok - c->sealed;
        status        = kvp_put_stream_finish(ps, sid, &d, NULL, NULL, 0, kvp_version_now());
        if (status != KVP_OK) {
            KVP_LOG_ERROR("model", "putting session %s to %s failed: %s", sid, p->node,
                          kvp_status_str(status));
        }
    }
    *bytes_p = c->page_bytes + c->sink_bytes + d.tail_len;
out:
    kvp_free(d.tail);
    kvp_put_stream_close(ps);
    kvp_run_destroy(run);
    return status;
}

/* Run the decode role in a child kvpack process; its stdout (the text) is returned. */
static kvp_status_t node_spawn_decode(const kvp_model_node_params_t *p, const char *sid,
                                      char **text_p)
{
    char   pstr[24], sstr[24], rstr[24];
    char  *argv[24];
    int    a = 0, fds[2], st;
    pid_t  pid, parent = getpid();
    FILE  *in, *ms;
    size_t len;
    char   buf[4096];
    size_t n;

    snprintf(pstr, sizeof(pstr), "%u", p->page_tokens);
    snprintf(sstr, sizeof(sstr), "%u", p->steps);
    argv[a++] = "kvpack";
    argv[a++] = "model";
    argv[a++] = "--model", argv[a++] = (char *)p->model;
    if (p->tokenizer != NULL) {
        argv[a++] = "--tokenizer", argv[a++] = (char *)p->tokenizer;
    }
    argv[a++] = "--codec", argv[a++] = (char *)kvp_codec_name(p->codec);
    argv[a++] = "--page-tokens", argv[a++] = pstr;
    argv[a++] = "--steps", argv[a++] = sstr;
    argv[a++] = "--node", argv[a++] = (char *)p->node;
    argv[a++] = "--decode-session", argv[a++] = (char *)sid;
    if (p->sink_pages > 0) {
        snprintf(rstr, sizeof(rstr), "s%u", p->sink_pages);
        argv[a++] = "--regions", argv[a++] = rstr;
    }
    argv[a++] = "--generate", argv[a++] = (char *)p->prompt;
    argv[a]   = NULL;
    if (pipe(fds) != 0) {
        KVP_LOG_ERROR("model", "pipe: %m");
        return KVP_ERR_IO;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        KVP_LOG_ERROR("model", "fork: %m");
        close(fds[0]);
        close(fds[1]);
        return KVP_ERR_IO;
    }
    if (pid == 0) {
        if (kvp_child_end_with_parent(parent, SIGTERM) != 0) { /* no decode role without us */
            _exit(1);
        }
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(p->self_exe, argv);
        fprintf(stderr, "kvpack model: exec %s failed\n", p->self_exe);
        _exit(127);
    }
    close(fds[1]);
    in = fdopen(fds[0], "r");
    ms = open_memstream(text_p, &len);
    if (in == NULL || ms == NULL) {
        KVP_LOG_ERROR("model", "cannot read the decode process output");
        if (in != NULL) {
            fclose(in);
        } else {
            close(fds[0]);
        }
        if (ms != NULL) {
            fclose(ms);
        }
        waitpid(pid, &st, 0);
        return KVP_ERR_IO;
    }
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) {
        fwrite(buf, 1, n, ms);
    }
    fclose(in);
    fclose(ms);
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        KVP_LOG_ERROR("model", "decode process failed (status %d)", st);
        return KVP_ERR_IO;
    }
    return KVP_OK;
}

/* The round trip is over (the decode process exited): remove its session from the node, record
 * and pages, unless asked to keep it. Best effort: a failure is a warning naming the session. */
static void node_drop_session(const kvp_model_t *m, const kvp_model_node_params_t *p,
                              const char *sid)
{
    kvp_client_h cl = NULL;
    kvp_status_t status;

    if (p->keep_session) {
        return;
    }
    status = node_connect(p->node, &cl);
    if (status == KVP_OK) {
        status = kvp_client_delete_session(cl, kvp_run_ns(m, p->codec, p->page_tokens), sid);
    }
    if (status != KVP_OK) {
        KVP_LOG_WARN("model", "session %s stays on node %s: deleting it failed: %s", sid,
                     p->node, kvp_status_str(status));
    }
    kvp_client_destroy(cl);
}

static int node_prefill_role(const kvp_model_t *m, const kvp_model_node_params_t *p)
{
    uint32_t    *ids = NULL, np = 0;
    char         sid[64];
    char        *remote = NULL, *local = NULL;
    kvp_run_t   *run    = NULL;
    uint64_t     bytes  = 0;
    kvp_status_t status;
    int          same = 0;

    snprintf(sid, sizeof(sid), "model-%ld-%llu", (long)getpid(),
             (unsigned long long)kvp_time_ns());
    status = kvp_run_prompt(m, p->prompt, &ids, &np);
    if (status == KVP_OK && np < 2) {
        KVP_LOG_ERROR("model", "--node needs a prompt of at least 2 tokens");
        status = KVP_ERR_INVALID;
    }
    if (status == KVP_OK) {
        status = node_prefill(m, p, ids, np, sid, &bytes);
    }
    if (status == KVP_OK) {
        status = node_spawn_decode(p, sid, &remote);
        node_drop_session(m, p, sid);
    }
    if (status == KVP_OK) {
        status = node_run_create(m, p, np + p->steps, 0, &run);
    }
    if (status == KVP_OK) {
        status = kvp_run_feed(run, ids, np - 1);
    }
    if (status == KVP_OK) {
        status = node_generate(run, m, ids, np, p->steps, &local);
    }
    if (status == KVP_OK) {
        same = strcmp(remote, local) == 0;
        if (p->json) {
            printf("{\"codec\": \"%s\", \"session\": \"%s\", \"session_kept\": %s, "
                   "\"prompt_tokens\": %u, \"bytes_put\": %llu, \"identical\": %s}\n",
                   kvp_codec_name(p->codec), sid, p->keep_session ? "true" : "false", np,
                   (unsigned long long)bytes, same ? "true" : "false");
        } else {
            printf("[%s via node %s] %s%s\n", kvp_codec_name(p->codec), p->node, p->prompt,
                   remote);
            printf("[%s in-process] %s%s\n", kvp_codec_name(p->codec), p->prompt, local);
            printf("identical: %s (%llu page bytes put for %u prompt tokens)\n",
                   same ? "yes" : "NO", (unsigned long long)bytes, np - 1);
            printf("session %s %s\n", sid, p->keep_session ? "kept on the node"
                                                             : "deleted from the node");
        }
    }
    free(remote);
    free(local);
    kvp_run_destroy(run);
    kvp_free(ids);
    if (status != KVP_OK) {
        fprintf(stderr, "kvpack model: node round trip failed: %s\n", kvp_status_str(status));
        return 1;
    }
    return same ? 0 : 1;
}

int kvp_model_node_run(const kvp_model_t *m, const kvp_model_node_params_t *p)
{
    if (p->node == NULL) {
        fprintf(stderr, "kvpack model: --decode-session needs --node HOST:PORT\n");
        return 2;
    }
    if (p->prompt == NULL) {
        fprintf(stderr, "kvpack model: --node needs --generate PROMPT\n");
        return 2;
    }
    if (p->codec == KVP_KVC_FP32) {
        fprintf(stderr, "kvpack model: --node needs a page codec (not fp32)\n");
        return 2;
    }
    return p->session != NULL ? node_decode(m, p) : node_prefill_role(m, p);
}
