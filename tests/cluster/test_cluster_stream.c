/* test_cluster_stream.c - the streamed put over a cluster (kvp_cluster_stream_*, client/
 * cluster_stream.c) against three real kvpackd nodes X, Y, Z (r = 2) and a fourth, D, standing
 * for the decode node's kvpackd (the "also" destination, outside the placement):
 *   - layer-by-layer pushes land on the first two of the rank and on D, byte-identical, one
 *     version everywhere; the third node holds nothing;
 *   - an also node nobody listens on: the put still succeeds, also_status says why; a malformed
 *     also list or a missing session id is refused at open;
 *   - a corrupt page: no node (and not D) ends with a record;
 *   - a node out of memory first in the rank (a stub answering ERR_NO_MEMORY), r = 1: the next
 *     node takes its place at finish; the same for one refusing the message as over its own
 *     --max-msg (ERR_TOO_LARGE);
 *   - a ranked node killed mid-stream: finish puts the whole session on the next node of the
 *     rank ("replacement"), so r copies exist; the report names the dead node;
 *   - kvp_cluster_get_session_cb with that node dead: served by the next, every item handed
 *     over once, in runs from item 0;
 *   - opened afterwards with that node dead: it is passed over at open;
 *   - the rank's first node restarted on its address: the stream kept to it is stale, and the
 *     session still lands there (reconnected at finish), not on the third node;
 *   - the handle keeps each node's put stream between sessions: a session in another namespace
 *     lands in its own, and a stream closed without finish leaves no record and the next
 *     session is whole;
 *   - the connection of a plain kvp_put_stream dropped mid-session, its node untouched (this
 *     process shuts its own sockets down: no root needed): the session is still written;
 *   - a node restarted mid-stream, after layer 0 landed on it: a plain kvp_put_stream puts the
 *     pages shipped before again on its new connection and the session is written there (not
 *     ERR_NOT_FOUND after shipping the rest, nor ERR_PEER_GONE), and a cluster stream over two
 *     nodes with r = 2 leaves the session on both, the restarted one by its own stream; when a
 *     newer write of that session reached the restarted node meanwhile, finish answers
 *     ERR_STALE, not ERR_PEER_GONE. */
#include "node_harness.h"

#include "kvpack/cluster.h"
#include "kvpack/log.h"

#include <dirent.h>
#include <sys/socket.h>

#define NS  0x1234ull
#define NS2 0x5678ull

/* The session as node addr holds it in NS (NULL: it has none); the caller frees it. */
static kvp_session_pages_t *node_get_ns(const char *addr, uint64_t ns, const char *sid)
{
    kvp_client_h         c = test_client(addr, 3000);
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         s = kvp_client_get_session(c, ns, sid, &sp);

    CHECK(s == KVP_OK || s == KVP_ERR_NOT_FOUND);
    kvp_client_destroy(c);
    return s == KVP_OK ? sp : NULL;
}

static kvp_session_pages_t *node_get(const char *addr, const char *sid)
{
    return node_get_ns(addr, NS, sid);
}

/* Node addr holds sid byte-identical to ts at version (0: any); returns that version. */
static uint64_t node_holds(const char *addr, const char *sid, const test_session_t *ts,
                           uint64_t version)
{
    kvp_session_pages_t *sp = node_get(addr, sid);
    uint64_t             v;

    CHECK(sp != NULL);
    if (sp == NULL) {
        return 0;
    }
    test_session_check(ts, sp);
    v = sp->version;
    CHECK(version == 0 || v == version);
    kvp_session_pages_free(sp);
    return v;
}

static int node_lacks(const char *addr, const char *sid)
{
    kvp_session_pages_t *sp = node_get(addr, sid);

    kvp_session_pages_free(sp);
    return sp == NULL;
}

/* The pages of ts layer-major (a prefill produces layer l of every chunk, then l + 1). */
typedef struct {
    const void **pp;
    size_t      *ll;
} layers_t;

static layers_t layer_major(const test_session_t *ts)
{
    layers_t lm = {kvp_calloc(ts->n_pages, sizeof(void *), "t"),
                   kvp_calloc(ts->n_pages, sizeof(size_t), "t")};

    for (size_t l = 0, k = 0; l < ts->layers; l++) {
        for (size_t ch = 0; ch < ts->n_chunks; ch++, k++) {
            lm.pp[k] = ts->pages[ch * ts->layers + l];
            lm.ll[k] = ts->lens[ch * ts->layers + l];
        }
    }
    return lm;
}

/* Push layers [0, upto) of lm, one list each. */
static void push_layers(kvp_cluster_stream_h st, const test_session_t *ts, const layers_t *lm,
                        size_t from, size_t upto, kvp_status_t want)
{
    for (size_t l = from; l < upto; l++) {
        CHECK_ST(kvp_cluster_stream_push(st, lm->pp + l * ts->n_chunks, lm->ll + l * ts->n_chunks,
                                         ts->n_chunks), want);
    }
}

/* kvp_cluster_get_session_cb's callback: counts each item handed over */
typedef struct {
    uint32_t seen[64], runs, first0;
} runs_t;

static void on_run(void *arg, uint32_t first, uint32_t n, const void *const *pages,
                   const size_t *lens)
{
    runs_t *r = arg;

    (void)pages;
    (void)lens;
    r->first0 += r->runs++ == 0 && first == 0;
    for (uint32_t i = first; i < first + n && i < 64; i++) {
        r->seen[i]++;
    }
}

static kvp_status_t finish_last(kvp_cluster_stream_h st, const test_session_t *ts,
                                const layers_t *lm, kvp_cluster_report_t *rep,
                                kvp_status_t *also_status)
{
    size_t L = ts->layers;

    return kvp_cluster_stream_finish(st, &ts->desc, lm->pp + (L - 1) * ts->n_chunks,
                                     lm->ll + (L - 1) * ts->n_chunks, ts->n_chunks, rep,
                                     also_status);
}

/* r = 1 over stub, a node that answers every request with status (ERR_NO_MEMORY: its store is
 * full; ERR_TOO_LARGE: a message over its own --max-msg), and x, the stub first in the rank: that
 * is the stub's failure, not one every node would give, so finish puts the session on x in its
 * place (it stopped the stream, and the session landed nowhere). */
static void oom_first(const char *stub, kvp_status_t status, const char *x,
                      const test_session_t *ts, const layers_t *lm)
{
    char                 peers[160], sid[16];
    kvp_cluster_h        cl;
    kvp_cluster_stream_h st;
    kvp_cluster_report_t rep;
    uint32_t             order[2], k = 0;

    snprintf(peers, sizeof(peers), "%s,%s", stub, x);
    cl = test_cluster_open(peers, 1, KVP_OK);
    do { /* a session the stub ranks first for */
        CHECK(k < 64);
        snprintf(sid, sizeof(sid), "oom%u", k++);
        CHECK_OK(kvp_cluster_rank(cl, NS, sid, order));
    } while (order[0] != 0);
    CHECK_OK(kvp_cluster_stream_open(cl, NS, sid, NULL, &st));
    push_layers(st, ts, lm, 0, ts->layers - 1, KVP_OK);
    CHECK_OK(finish_last(st, ts, lm, &rep, NULL));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 1 && rep.n_tried == 2 && rep.tried[0].node == 0 &&
          rep.tried[0].status == status && rep.tried[1].node == 1 &&
          rep.tried[1].status == KVP_OK && strcmp(rep.tried[1].stage, "replacement") == 0);
    node_holds(x, sid, ts, 0);
    kvp_cluster_destroy(cl);
}

/* Stop the node with SIGTERM and start it again on its port and data dir. */
static void node_restart(test_node_t *n)
{
    uint16_t port = n->port;

    CHECK(test_node_stop(n, SIGTERM) == 0);
    test_node_start_at(n, port, "--durability=spill");
    CHECK(n->port == port);
}

/* The pages node addr holds in DRAM. */
static uint64_t node_pages(const char *addr)
{
    kvp_client_h    c = test_client(addr, 3000);
    kvp_node_stat_t ns;

    memset(&ns, 0, sizeof(ns));
    CHECK_OK(kvp_client_stat(c, &ns));
    kvp_client_destroy(c);
    return ns.dram_pages;
}

/* Wait until node addr holds want pages in DRAM (a pushed list landed; polled, at most 1000x). */
static void node_pages_reach(const char *addr, uint64_t want)
{
    int k = 0;

    while (node_pages(addr) < want && k++ < 1000) {
        usleep(10000);
    }
    CHECK(k <= 1000);
}

/* Shut down every TCP connection of this process (a network blip as its client sees it; the
 * node only sees the connection close): the caller's put stream must be the only client
 * connected. Returns how many sockets were shut. */
static int drop_my_connections(void)
{
    DIR           *d = opendir("/proc/self/fd");
    struct dirent *e;
    int            n = 0;

    CHECK(d != NULL);
    while (d != NULL && (e = readdir(d)) != NULL) {
        struct sockaddr_storage peer;
        socklen_t               pl = sizeof(peer), tl = sizeof(int);
        int                     fd = atoi(e->d_name), type = 0;

        if (e->d_name[0] == '.' || fd == dirfd(d) ||
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
            getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 ||
            (peer.ss_family != AF_INET && peer.ss_family != AF_INET6)) {
            continue;
        }
        n += shutdown(fd, SHUT_RDWR) == 0;
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

/* Session sid to node a on a new plain put stream, layer by layer: mid(a) runs once layer 0
 * landed there; the last layer goes with the record. finish's status. */
static kvp_status_t plain_stream_across(test_node_t *a, const test_session_t *ts,
                                        const layers_t *lm, const char *sid,
                                        void (*mid)(test_node_t *))
{
    kvp_client_params_t p;
    kvp_put_stream_h    ps;
    kvp_status_t        s;
    size_t              C = ts->n_chunks, L = ts->layers;
    uint64_t            v = node_pages(a->addr);

    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    p.server     = a->addr;
    p.timeout_ms = 3000;
    CHECK_OK(kvp_put_stream_open(&p, NS, &ps));
    CHECK_OK(kvp_put_stream_push(ps, lm->pp, lm->ll, C));
    node_pages_reach(a->addr, v + C);
    mid(a);
    for (size_t l = 1; l + 1 < L; l++) {
        CHECK_OK(kvp_put_stream_push(ps, lm->pp + l * C, lm->ll + l * C, C));
    }
    s = kvp_put_stream_finish(ps, sid, &ts->desc, lm->pp + (L - 1) * C, lm->ll + (L - 1) * C, C,
                              0);
    kvp_put_stream_close(ps);
    return s;
}

/* node_pages_reach's clients are gone: the stream's connection is this process's only one */
static void conn_drop(test_node_t *a)
{
    pid_t pid = a->pid;

    CHECK(drop_my_connections() > 0);
    CHECK(a->pid == pid && kill(pid, 0) == 0); /* the node lives on, with layer 0's pages */
}

/* The node restarted, then another writer puts "newer" at a version far ahead of any clock */
static void restart_then_newer(test_node_t *a)
{
    test_session_t ts;
    kvp_client_h   c;

    node_restart(a);
    test_session_make(&ts, 4, 1, 0, 23); /* the namespace's geometry */
    c = test_client(a->addr, 3000);
    CHECK_OK(kvp_client_put_pages(c, NS, (const void *const *)ts.pages, ts.lens, ts.n_pages));
    CHECK_OK(kvp_client_put_session_version(c, NS, "newer", &ts.desc, UINT64_MAX / 2));
    kvp_client_destroy(c);
    test_session_free(&ts);
}

/* A plain stream's connection dropped mid-session while its node lives on: the stream connects
 * anew, puts the pages shipped before again, and the session is written (it failed
 * ERR_PEER_GONE when every new connection was taken for a restart). */
static void drop_mid_stream(test_node_t *a)
{
    test_session_t ts;
    layers_t       lm;

    test_session_make(&ts, 4, 3, 5, 17); /* pages no node holds yet */
    lm = layer_major(&ts);
    CHECK_OK(plain_stream_across(a, &ts, &lm, "blip", conn_drop));
    node_holds(a->addr, "blip", &ts, 0);
    test_session_free(&ts);
    kvp_free(lm.pp);
    kvp_free(lm.ll);
}

/* Node a restarted mid-session, after layer 0 of it landed there (those loose pages go with the
 * old process): a plain stream's client reconnects and puts them again, so the session is written
 * whole on the restarted node (it used to fail: ERR_NOT_FOUND, then ERR_PEER_GONE). Then a
 * cluster stream over {a, b} with r = 2 and kept streams, the rank's first node restarted the
 * same way: its own stream re-ships (stage "stream"), so both hold the session (there is no third
 * node to replace it; it used to end with one copy). */
static void restart_mid_stream(test_node_t *a, test_node_t *b)
{
    kvp_cluster_h        cl;
    kvp_cluster_stream_h st;
    kvp_cluster_report_t rep;
    test_session_t       ts;
    layers_t             lm;
    uint32_t             order[2];
    test_node_t         *first;
    char                 peers[160];
    size_t               C, L;
    uint64_t             v;

    test_session_make(&ts, 4, 3, 5, 11); /* pages no node holds yet */
    lm = layer_major(&ts);
    C  = ts.n_chunks;
    L  = ts.layers;
    CHECK_OK(plain_stream_across(a, &ts, &lm, "mid", node_restart));
    node_holds(a->addr, "mid", &ts, 0);
    /* the same (pages no node holds yet), but the record loses to a newer write: ERR_STALE, the
     * node's own answer (it was reported as ERR_PEER_GONE once the stream had reconnected: a
     * retry that cannot succeed) */
    {
        test_session_t ts2;
        layers_t       lm2;

        test_session_make(&ts2, 4, 3, 5, 19);
        lm2 = layer_major(&ts2);
        CHECK_ST(plain_stream_across(a, &ts2, &lm2, "newer", restart_then_newer), KVP_ERR_STALE);
        test_session_free(&ts2);
        kvp_free(lm2.pp);
        kvp_free(lm2.ll);
    }

    snprintf(peers, sizeof(peers), "%s,%s", a->addr, b->addr);
    cl = test_cluster_open(peers, 2, KVP_OK);
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "warm", NULL, &st)); /* keeps a stream to each */
    push_layers(st, &ts, &lm, 0, L - 1, KVP_OK);
    CHECK_OK(finish_last(st, &ts, &lm, &rep, NULL));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 2);
    test_session_free(&ts);
    kvp_free(lm.pp);
    kvp_free(lm.ll);
    test_session_make(&ts, 4, 3, 5, 13); /* again pages no node holds */
    lm = layer_major(&ts);
    CHECK_OK(kvp_cluster_rank(cl, NS, "mid3", order));
    first = order[0] == 0 ? a : b;
    v     = node_pages(first->addr);
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "mid3", NULL, &st));
    push_layers(st, &ts, &lm, 0, 1, KVP_OK);
    node_pages_reach(first->addr, v + C);
    node_restart(first);
    push_layers(st, &ts, &lm, 1, L - 1, KVP_OK);
    CHECK_OK(finish_last(st, &ts, &lm, &rep, NULL));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 2 && rep.n_tried == 2);
    for (uint32_t i = 0; i < rep.n_tried; i++) {
        CHECK(rep.tried[i].status == KVP_OK && strcmp(rep.tried[i].stage, "stream") == 0);
    }
    v = node_holds(a->addr, "mid3", &ts, 0);
    node_holds(b->addr, "mid3", &ts, v);
    kvp_cluster_destroy(cl);
    test_session_free(&ts);
    kvp_free(lm.pp);
    kvp_free(lm.ll);
}

int main(void)
{
    test_node_t          n[4], oom, big; /* X, Y, Z: the cluster; n[3]: D, the decode node */
    char                 peers[256], also[160];
    kvp_cluster_h        cl;
    kvp_cluster_stream_h st;
    kvp_cluster_report_t rep;
    kvp_status_t         as[2];
    test_session_t       ts;
    layers_t             lm;
    uint32_t             order[3];
    uint64_t             v;
    uint8_t             *bad;
    const char          *D;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    for (int i = 0; i < 4; i++) {
        test_node_mkdir(&n[i]);
        test_node_start(&n[i], "--durability=spill");
    }
    test_stub_start(&oom, KVP_ERR_NO_MEMORY);
    test_stub_start(&big, KVP_ERR_TOO_LARGE);
    D = n[3].addr;
    snprintf(peers, sizeof(peers), "%s,%s,%s", n[0].addr, n[1].addr, n[2].addr);
    test_session_make(&ts, 4, 3, 5, 7);
    lm = layer_major(&ts);
    cl = test_cluster_open(peers, 2, KVP_OK);

    /* open refuses bad arguments */
    CHECK_ST(kvp_cluster_stream_open(cl, NS, NULL, NULL, &st), KVP_ERR_INVALID);
    CHECK_ST(kvp_cluster_stream_open(cl, NS, "", NULL, &st), KVP_ERR_INVALID);
    CHECK_ST(kvp_cluster_stream_open(cl, NS, "s", "nohostport", &st), KVP_ERR_INVALID);

    /* every layer to the first two of the rank and to D */
    CHECK_OK(kvp_cluster_rank(cl, NS, "s1", order));
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "s1", D, &st));
    push_layers(st, &ts, &lm, 0, ts.layers - 1, KVP_OK);
    as[0] = KVP_ERR_IO; /* a value finish must overwrite */
    CHECK_OK(finish_last(st, &ts, &lm, &rep, as));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 2 && rep.n_tried == 2 && as[0] == KVP_OK);
    for (uint32_t i = 0; i < rep.n_tried; i++) {
        CHECK(rep.tried[i].node == order[i] && rep.tried[i].status == KVP_OK &&
              strcmp(rep.tried[i].stage, "stream") == 0);
    }
    v = node_holds(n[order[0]].addr, "s1", &ts, 0);
    CHECK(v != 0);
    node_holds(n[order[1]].addr, "s1", &ts, v); /* one version for every copy */
    node_holds(D, "s1", &ts, v);
    CHECK(node_lacks(n[order[2]].addr, "s1"));

    /* the rank's first node restarts on its address: the stream the handle kept to it is stale;
     * s1 put again still lands there (reconnected), not on the third node */
    {
        node_restart(&n[order[0]]);
        CHECK_OK(kvp_cluster_stream_open(cl, NS, "s1", D, &st));
        push_layers(st, &ts, &lm, 0, ts.layers - 1, KVP_OK);
        CHECK_OK(finish_last(st, &ts, &lm, &rep, as));
        kvp_cluster_stream_close(st);
        CHECK(rep.n_ok == 2 && rep.n_tried == 2 && as[0] == KVP_OK);
        CHECK(rep.n_tried >= 1 && rep.tried[0].node == order[0] &&
              rep.tried[0].status == KVP_OK);
        printf("after a restart: %s %s\n", n[order[0]].addr, rep.tried[0].stage);
        node_holds(n[order[0]].addr, "s1", &ts, 0);
        CHECK(node_lacks(n[order[2]].addr, "s1"));
    }

    /* an also node nobody listens on (D's twin) and D itself: the put is fine, also_status says */
    snprintf(also, sizeof(also), "%s,127.0.0.1:1", D);
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "s2", also, &st));
    push_layers(st, &ts, &lm, 0, ts.layers - 1, KVP_OK);
    CHECK_OK(finish_last(st, &ts, &lm, &rep, as));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 2 && as[0] == KVP_OK && kvp_cluster_status_unreachable(as[1]));
    node_holds(D, "s2", &ts, 0);

    /* a corrupt page: nobody ends with a record (the next of the rank refuses it too) */
    bad = kvp_malloc(lm.ll[1], "t");
    memcpy(bad, lm.pp[1], lm.ll[1]);
    bad[100] ^= 0x01;
    lm.pp[1] = bad;
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "bad", D, &st));
    push_layers(st, &ts, &lm, 0, 1, KVP_OK);
    CHECK_ST(finish_last(st, &ts, &lm, &rep, as), KVP_ERR_CORRUPT);
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 0 && as[0] == KVP_ERR_CORRUPT);
    for (int i = 0; i < 4; i++) {
        CHECK(node_lacks(n[i].addr, "bad"));
    }
    lm.pp[1] = ts.pages[1 * ts.layers + 0];
    kvp_free(bad);

    /* a page cut short: a refusal every node shares (BAD_PAGE) stops the stream once a push sees
     * it; finish then writes the record nowhere and says so for the also node too */
    {
        size_t       keep = lm.ll[1];
        kvp_status_t ps   = KVP_OK;

        lm.ll[1] = keep - 8; /* the node, not the client, finds it short */
        CHECK_OK(kvp_cluster_stream_open(cl, NS, "cut", D, &st));
        push_layers(st, &ts, &lm, 0, 1, KVP_OK);
        for (int k = 0; k < 2000 && ps == KVP_OK; k++) { /* the refusal comes back on its own */
            ps = kvp_cluster_stream_push(st, NULL, NULL, 0);
            if (ps == KVP_OK) {
                usleep(5000);
            }
        }
        CHECK_ST(ps, KVP_ERR_BAD_PAGE);
        CHECK_ST(kvp_cluster_stream_push(st, lm.pp, lm.ll, 1), KVP_ERR_BAD_PAGE); /* stays */
        as[0] = KVP_OK;
        CHECK_ST(finish_last(st, &ts, &lm, &rep, as), KVP_ERR_BAD_PAGE);
        CHECK(rep.n_ok == 0 && rep.n_tried == 0 && as[0] == KVP_ERR_BAD_PAGE);
        CHECK_ST(finish_last(st, &ts, &lm, &rep, as), KVP_ERR_INVALID); /* one finish only */
        kvp_cluster_stream_close(st);
        for (int i = 0; i < 4; i++) {
            CHECK(node_lacks(n[i].addr, "cut"));
        }
        lm.ll[1] = keep;
    }
    oom_first(oom.addr, KVP_ERR_NO_MEMORY, D, &ts, &lm);
    oom_first(big.addr, KVP_ERR_TOO_LARGE, D, &ts, &lm);
    CHECK(test_node_stop(&oom, SIGKILL) == 128 + SIGKILL);
    CHECK(test_node_stop(&big, SIGKILL) == 128 + SIGKILL);

    /* the kept streams: another namespace gets streams of its own; an abandoned session (closed
     * without finish) leaves no record, and the next one through the same handle is whole */
    CHECK_OK(kvp_cluster_rank(cl, NS2, "ns2", order));
    CHECK_OK(kvp_cluster_stream_open(cl, NS2, "ns2", D, &st));
    push_layers(st, &ts, &lm, 0, ts.layers - 1, KVP_OK);
    CHECK_OK(finish_last(st, &ts, &lm, &rep, as));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 2 && as[0] == KVP_OK);
    for (int i = 0; i < 2; i++) {
        kvp_session_pages_t *sp = node_get_ns(n[order[i]].addr, NS2, "ns2");

        CHECK(sp != NULL && node_lacks(n[order[i]].addr, "ns2"));
        if (sp != NULL) {
            test_session_check(&ts, sp);
        }
        kvp_session_pages_free(sp);
    }
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "abandoned", D, &st));
    push_layers(st, &ts, &lm, 0, ts.layers - 1, KVP_OK);
    kvp_cluster_stream_close(st);
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "after", D, &st));
    push_layers(st, &ts, &lm, 0, ts.layers - 1, KVP_OK);
    CHECK_OK(finish_last(st, &ts, &lm, &rep, as));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 2 && as[0] == KVP_OK);
    node_holds(D, "after", &ts, 0);
    for (int i = 0; i < 4; i++) {
        CHECK(node_lacks(n[i].addr, "abandoned"));
    }

    /* the rank's first node killed mid-stream: the third takes its place at finish */
    CHECK_OK(kvp_cluster_rank(cl, NS, "s3", order));
    CHECK_OK(kvp_cluster_stream_open(cl, NS, "s3", D, &st));
    push_layers(st, &ts, &lm, 0, 1, KVP_OK);
    CHECK(test_node_stop(&n[order[0]], SIGKILL) == 128 + SIGKILL);
    push_layers(st, &ts, &lm, 1, ts.layers - 1, KVP_OK); /* not a data error: no early stop */
    CHECK_OK(finish_last(st, &ts, &lm, &rep, as));
    kvp_cluster_stream_close(st);
    CHECK(rep.n_ok == 2 && as[0] == KVP_OK && rep.n_tried == 3);
    CHECK(rep.tried[0].node == order[0] && kvp_cluster_status_unreachable(rep.tried[0].status) &&
          strncmp(rep.tried[0].stage, "stream", 6) == 0); /* a kept stream also tried again */
    CHECK(rep.tried[1].node == order[1] && rep.tried[1].status == KVP_OK);
    CHECK(rep.tried[2].node == order[2] && rep.tried[2].status == KVP_OK &&
          strcmp(rep.tried[2].stage, "replacement") == 0);
    v = node_holds(n[order[1]].addr, "s3", &ts, 0);
    node_holds(n[order[2]].addr, "s3", &ts, v);
    node_holds(D, "s3", &ts, v);
    { /* a streamed get over the cluster, its first node dead */
        runs_t               r;
        kvp_session_pages_t *sp = NULL;

        memset(&r, 0, sizeof(r));
        CHECK_OK(kvp_cluster_get_session_cb(cl, NS, "s3", NULL, on_run, &r, &sp, &rep));
        CHECK(rep.served_by == order[1] && r.first0 == 1 && r.runs >= 1);
        for (uint32_t i = 0; i < ts.n_pages; i++) {
            CHECK(r.seen[i] == 1);
        }
        if (sp != NULL) {
            test_session_check(&ts, sp);
        }
        kvp_session_pages_free(sp);
    }
    kvp_cluster_destroy(cl);

    /* a new handle, the dead node still listed: each session still gets two copies, and the
     * dead node shows up in the reports of those it was ranked for (passed over at open, or its
     * stream failed and was replaced) */
    cl = test_cluster_open(peers, 2, KVP_OK);
    for (int k = 0, dead_seen = 0; k < 8 || !dead_seen; k++) {
        char sid[16];

        snprintf(sid, sizeof(sid), "s4-%d", k);
        CHECK_OK(kvp_cluster_stream_open(cl, NS, sid, NULL, &st));
        push_layers(st, &ts, &lm, 0, ts.layers - 1, KVP_OK);
        CHECK_OK(finish_last(st, &ts, &lm, &rep, NULL));
        kvp_cluster_stream_close(st);
        CHECK(rep.n_ok == 2);
        for (uint32_t i = 0; i < rep.n_tried; i++) {
            dead_seen |= rep.tried[i].node == order[0] &&
                         kvp_cluster_status_unreachable(rep.tried[i].status);
        }
        CHECK(k < 64);
        if (k >= 64) {
            break;
        }
        for (uint32_t i = 0; i < 3; i++) {
            if (&n[i] != &n[order[0]]) {
                node_holds(n[i].addr, sid, &ts, 0);
            }
        }
    }
    kvp_cluster_destroy(cl);
    kvp_cluster_stream_close(NULL);
    drop_mid_stream(&n[order[1]]);
    restart_mid_stream(&n[order[1]], &n[order[2]]); /* the two cluster nodes still up */

    kvp_free(lm.pp);
    kvp_free(lm.ll);
    test_session_free(&ts);
    for (int i = 0; i < 4; i++) {
        if (i != (int)order[0]) {
            CHECK(test_node_stop(&n[i], SIGTERM) == 0);
        }
        test_node_rmdir(&n[i]);
    }
    printf("test_cluster_stream: all checks passed\n");
    return 0;
}
