/* test_rx_budget.c - concurrent well-behaved put streams to one kvpackd whose receive budget
 * (4x --max-msg) they overrun: each kvp_put_stream (default client: 4 PUT_PAGES of 4 MiB in
 * flight) pins up to 16 MiB of it with requests received and queued behind its connection's
 * running one. 16 streams against --max-msg 32M (128 MiB) and 3 against --max-msg 8M (32 MiB):
 * every session is written and reads back byte-identical. Before, the node refused the message
 * past the budget ERR_BUSY, no library retried, and most sessions failed; now it waits. */
#include "node_harness.h"

#include "kvpack/log.h"

#include <pthread.h>

#define NS      0xB0D6u
#define LAYERS  8
#define CHUNKS  512 /* 4096 pages of ~16 KiB: a 64 MiB session */
#define MAX_K   16

static test_session_t ts;
static const void   **lp; /* layer-major: the order a model produces them */
static size_t        *ll;

typedef struct {
    const char  *addr;
    int          id;
    kvp_status_t push, fin;
} stream_job_t;

static void *stream_run(void *arg)
{
    stream_job_t       *j = arg;
    kvp_client_params_t p;
    kvp_put_stream_h    st;
    char                sid[32];
    size_t              C = ts.n_chunks;

    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    p.server     = j->addr;
    p.timeout_ms = 30000;
    snprintf(sid, sizeof(sid), "s%d", j->id);
    CHECK_OK(kvp_put_stream_open(&p, NS, &st));
    j->push = KVP_OK;
    for (size_t l = 0; l + 1 < ts.layers; l++) {
        kvp_status_t s = kvp_put_stream_push(st, lp + l * C, ll + l * C, C);

        j->push = (j->push == KVP_OK) ? s : j->push;
    }
    j->fin = kvp_put_stream_finish(st, sid, &ts.desc, lp + (ts.layers - 1) * C,
                                   ll + (ts.layers - 1) * C, C, 0);
    kvp_put_stream_close(st);
    return NULL;
}

/* k streams at once to a node with --max-msg max_msg; each session then read back. */
static void streams(int k, const char *max_msg)
{
    test_node_t         node;
    pthread_t           th[MAX_K];
    stream_job_t        jobs[MAX_K];
    char                opt[64];
    int                 busy = 0, bad = 0;
    kvp_client_h        c;

    test_node_mkdir(&node);
    snprintf(opt, sizeof(opt), "--max-msg=%s", max_msg);
    test_node_start_args(&node, 0, opt, "--dram-budget=2G");
    for (int i = 0; i < k; i++) {
        jobs[i].addr = node.addr;
        jobs[i].id   = i;
        CHECK(pthread_create(&th[i], NULL, stream_run, &jobs[i]) == 0);
    }
    for (int i = 0; i < k; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        busy += jobs[i].push == KVP_ERR_BUSY || jobs[i].fin == KVP_ERR_BUSY;
        bad += jobs[i].push != KVP_OK || jobs[i].fin != KVP_OK;
        if (jobs[i].fin != KVP_OK) {
            printf("  stream %d: push %s, finish %s\n", i, kvp_status_name(jobs[i].push),
                   kvp_status_name(jobs[i].fin));
        }
    }
    printf("%d streams, %s: %d sessions failed (%d ERR_BUSY)\n", k, opt, bad, busy);
    EXPECT(bad == 0, "%d of %d sessions not written (%d refused ERR_BUSY)", bad, k, busy);
    c = test_client(node.addr, 30000);
    for (int i = 0; i < k; i++) {
        kvp_session_pages_t *sp = NULL;
        char                 sid[32];
        kvp_status_t         s;

        snprintf(sid, sizeof(sid), "s%d", i);
        s = kvp_client_get_session(c, NS, sid, &sp);
        EXPECT(s == KVP_OK || jobs[i].fin != KVP_OK, "get %s: %s", sid, kvp_status_name(s));
        if (s == KVP_OK) {
            test_session_check(&ts, sp);
        }
        kvp_session_pages_free(sp);
    }
    kvp_client_destroy(c);
    EXPECT(test_node_stop(&node, SIGTERM) == 0, "node exit");
    test_node_rmdir(&node);
}

int main(void)
{
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    test_session_make(&ts, LAYERS, CHUNKS, 0, 3);
    lp = kvp_calloc(ts.n_pages, sizeof(*lp), "lp");
    ll = kvp_calloc(ts.n_pages, sizeof(*ll), "ll");
    CHECK(lp != NULL && ll != NULL);
    for (size_t l = 0, i = 0; l < ts.layers; l++) {
        for (size_t ch = 0; ch < ts.n_chunks; ch++, i++) {
            lp[i] = ts.pages[ch * ts.layers + l];
            ll[i] = ts.lens[ch * ts.layers + l];
        }
    }
    streams(3, "8M");   /* 3 x 16 MiB queued against 32 MiB */
    streams(16, "32M"); /* 16 x 16 MiB against 128 MiB */
    kvp_free(lp);
    kvp_free(ll);
    test_session_free(&ts);
    return kvp_test_result("test_rx_budget");
}
