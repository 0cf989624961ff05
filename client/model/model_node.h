/* model_node.h - `kvpack model --node`: prefill a prompt here, ship its sealed pages and fp16 tail
 * to a kvpackd node (libkvpack), decode in a second kvpack process that fetches the session, and
 * check the fetched decode against an in-process run with the same codec. */
#ifndef KVPACK_MODEL_NODE_H
#define KVPACK_MODEL_NODE_H

#include <stdint.h>

#include "kvpack/page.h"

#include "model.h"

typedef struct {
    const char    *model, *tokenizer; /* paths, passed on to the decode process */
    const char    *node;              /* "host:port" */
    const char    *session;           /* set in the decode process: the session to fetch */
    const char    *prompt;
    kvp_codec_id_t codec;
    uint32_t       page_tokens;
    uint32_t       sink_pages;        /* first chunks kept as fp16 sink pages (0 = bare) */
    uint32_t       steps;
    int            json;
    int            keep_session;      /* leave the session on the node after the round trip */
    const char    *self_exe;          /* the kvpack binary to run for the decode process */
} kvp_model_node_params_t;

/* Prefill role (session == NULL) or decode role (session set). Returns a process exit status:
 * 0 ok, 1 failure (including fetched text != in-process text). */
int kvp_model_node_run(const kvp_model_t *m, const kvp_model_node_params_t *p);

#endif
