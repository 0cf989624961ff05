/* test_workers.c - kvpackd's request workers end to end: two clients' gets of cold sessions are
 * inside their disk reads at once (restores held at the segment read by gate_preload.so until the
 * test opens the gate: the tier's lock is not held over the I/O), and meanwhile a third client's
 * gets, put and stat are answered; the held gets then return their sessions byte-identical. With
 * --workers=1 one restore is held and the third client's get cannot be answered until the gate
 * opens (its deadline passes), which shows the first half would fail on a node that serializes.
 * Order per connection: on one raw connection a GET_SESSION held at the gate and a STAT sent after
 * it are answered in that order, and the STAT not before the gate opens, while a STAT on a second
 * connection is answered meanwhile; a connection holds at most 256 requests, more are refused at
 * once with ERR_BUSY and the queued ones still answered in order.
 * Appends: one held in its restore (an append to a cold session reads it first) does not hold up
 * another session's append on another connection.
 * No timing is asserted: a held restore cannot finish before the test opens the gate. */
#include "node_harness.h"

#include <dirent.h>
#include <pthread.h>

#define NS 5u

static pid_t node_pid; /* killed if a CHECK fails: a node held at the gate would never exit */

static void kill_node(void)
{
    if (node_pid > 0) {
        kill(node_pid, SIGKILL);
    }
}

typedef struct {
    const char          *addr;
    const char          *sid;
    const test_session_t *ts;
    kvp_status_t         status;
    int                  done;
} cold_get_t;

static void *cold_get_main(void *arg)
{
    cold_get_t          *g = arg;
    kvp_client_h         c = test_client(g->addr, 60000);
    kvp_session_pages_t *sp = NULL;

    g->status = kvp_client_get_session(c, NS, g->sid, &sp);
    if (g->status == KVP_OK) {
        test_session_check(g->ts, sp);
    }
    kvp_session_pages_free(sp);
    kvp_client_destroy(c);
    __atomic_store_n(&g->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Wait (up to 60 s) until n reads wait at the gate (files dir/gate.waiting.<tid>); x, when
 * given, is progressed meanwhile (its sends keep moving). */
static void wait_for_waiters(const char *dir, int n, kvp_xfer_h x)
{
    double end = kvp_time_s() + 60;

    for (;;) {
        DIR           *d = opendir(dir);
        struct dirent *e;
        int            got = 0;

        CHECK(d != NULL);
        while ((e = readdir(d)) != NULL) {
            got += strncmp(e->d_name, "gate.waiting.", 13) == 0;
        }
        closedir(d);
        if (got >= n) {
            CHECK(got == n);
            return;
        }
        CHECK(kvp_time_s() < end);
        if (x != NULL) {
            kvp_xfer_progress(x);
        }
        usleep(5000);
    }
}

static void touch(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY, 0600);

    CHECK(fd >= 0);
    close(fd);
}

/* One node with --workers=<workers>: cold gets held at the gate, then the hot client acts. */
static void run(unsigned workers)
{
    test_node_t         n;
    test_session_t      cold[2], hot, more;
    char                gate[300], arg[32];
    kvp_client_h        c;
    kvp_session_pages_t *sp = NULL;
    cold_get_t          g[2];
    pthread_t           tid[2];
    kvp_node_stat_t     st;
    int                 held = workers > 1 ? 2 : 1;

    memset(&n, 0, sizeof(n));
    test_node_mkdir(&n);
    snprintf(gate, sizeof(gate), "%s/gate", n.dir);
    snprintf(arg, sizeof(arg), "--workers=%u", workers);
    CHECK(setenv("LD_PRELOAD", GATE_PRELOAD_PATH, 1) == 0);
    CHECK(setenv("KVP_TEST_GATE", gate, 1) == 0);
    test_node_start(&n, arg);
    node_pid = n.pid;
    CHECK(unsetenv("LD_PRELOAD") == 0); /* only the node is shimmed */

    test_session_make(&cold[0], 3, 4, 0, 11);
    test_session_make(&cold[1], 3, 3, 7, 14);
    test_session_make(&hot, 3, 4, 5, 12);
    test_session_make(&more, 3, 2, 0, 13);
    c = test_client(n.addr, 60000);
    CHECK_ST(test_session_put(c, NS, "cold0", &cold[0]), KVP_OK);
    CHECK_ST(test_session_put(c, NS, "cold1", &cold[1]), KVP_OK);
    CHECK_ST(kvp_client_spill(c, NS, "cold0"), KVP_OK); /* their pages now live only on disk */
    CHECK_ST(kvp_client_spill(c, NS, "cold1"), KVP_OK);
    CHECK_ST(test_session_put(c, NS, "hot", &hot), KVP_OK);
    kvp_client_destroy(c);
    wait_for_waiters(n.dir, 0, NULL); /* nothing has read a segment yet */

    memset(g, 0, sizeof(g));
    for (int i = 0; i < held; i++) {
        g[i].addr = n.addr;
        g[i].sid  = i == 0 ? "cold0" : "cold1";
        g[i].ts   = &cold[i];
        CHECK(pthread_create(&tid[i], NULL, cold_get_main, &g[i]) == 0);
    }
    wait_for_waiters(n.dir, held, NULL); /* the cold gets are inside the node's restores, held */

    if (workers > 1) {
        c = test_client(n.addr, 60000);
        CHECK_ST(kvp_client_get_session(c, NS, "hot", &sp), KVP_OK);
        test_session_check(&hot, sp);
        kvp_session_pages_free(sp);
        CHECK_ST(test_session_put(c, NS, "more", &more), KVP_OK);
        CHECK_ST(kvp_client_get_session(c, NS, "more", &sp), KVP_OK);
        test_session_check(&more, sp);
        kvp_session_pages_free(sp);
        CHECK_ST(kvp_client_stat(c, &st), KVP_OK);
        CHECK(st.restores == 0); /* neither held restore has finished */
        CHECK(!__atomic_load_n(&g[0].done, __ATOMIC_ACQUIRE));
        CHECK(!__atomic_load_n(&g[1].done, __ATOMIC_ACQUIRE));
        printf("workers=%u: 2 restores held in their disk reads at once; hot get, put, get and "
               "stat answered meanwhile\n", workers);
    } else {
        c = test_client(n.addr, 1500);
        CHECK_ST(kvp_client_get_session(c, NS, "hot", &sp), KVP_ERR_TIMEOUT);
        CHECK(!__atomic_load_n(&g[0].done, __ATOMIC_ACQUIRE));
        printf("workers=1: the hot get waited behind the held restore (deadline passed)\n");
    }
    touch(gate);
    for (int i = 0; i < held; i++) {
        CHECK(pthread_join(tid[i], NULL) == 0);
        CHECK_ST(g[i].status, KVP_OK); /* and byte-identical (checked in the thread) */
    }
    CHECK_ST(kvp_client_get_session(c, NS, "hot", &sp), KVP_OK); /* after any stale reply */
    test_session_check(&hot, sp);
    kvp_session_pages_free(sp);
    CHECK_ST(kvp_client_stat(c, &st), KVP_OK);
    CHECK(st.restores == (uint64_t)held && st.spills == 2);
    kvp_client_destroy(c);

    CHECK(unsetenv("KVP_TEST_GATE") == 0);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    node_pid = 0;
    for (int i = 0; i < 2; i++) {
        test_session_free(&cold[i]);
    }
    test_session_free(&hot);
    test_session_free(&more);
    test_node_rmdir(&n);
}

/* ---- order on one connection: raw requests, replies recorded as they arrive ---- */

#define ORDER_MAX 300 /* replies recorded per connection */
#define QUEUE_MAX 256 /* the node's NODE_CONN_QUEUE_MAX */

typedef struct {
    kvp_xfer_conn_h conn[2];
    uint64_t        ids[2][ORDER_MAX];
    kvp_status_t    st[2][ORDER_MAX];
    int             n[2];
} order_t;

static void order_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    order_t       *o = arg;
    int            c = conn == o->conn[1];
    size_t         hl, dl;
    const void    *h = kvp_xfer_msg_hdr(msg, &hl);
    kvp_wire_rep_t rep;

    kvp_xfer_msg_data(msg, &dl);
    CHECK_ST(kvp_wire_rep_unpack(h, hl, dl, &rep), KVP_OK);
    CHECK(o->n[c] < ORDER_MAX);
    o->ids[c][o->n[c]] = rep.req_id;
    o->st[c][o->n[c]]  = rep.status;
    o->n[c]++;
    kvp_wire_rep_clear(&rep);
    kvp_xfer_msg_release(msg);
}

static void order_send(kvp_xfer_conn_h conn, kvp_wire_op_t op, uint64_t id, const char *sid)
{
    kvp_wire_req_t req;
    uint8_t       *hdr = NULL;
    size_t         hl;
    kvp_status_t   s;

    memset(&req, 0, sizeof(req));
    req.op     = op;
    req.req_id = id;
    req.ns     = NS;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    CHECK_ST(kvp_wire_req_pack(&req, &hdr, &hl), KVP_OK);
    s = kvp_xfer_send(conn, hdr, hl, NULL, 0, NULL, NULL);
    CHECK(s == KVP_OK || s == KVP_INPROGRESS);
    kvp_free(hdr);
}

/* A node (4 workers) whose segment reads wait at gate (a file in its dir, made by touch), holding
 * one cold session "cold" (put, then spilled: its pages only on disk). */
static void gated_node_with_cold(test_node_t *n, char *gate, size_t gate_len,
                                 test_session_t *cold)
{
    kvp_client_h c;

    memset(n, 0, sizeof(*n));
    test_node_mkdir(n);
    snprintf(gate, gate_len, "%s/gate", n->dir);
    CHECK(setenv("LD_PRELOAD", GATE_PRELOAD_PATH, 1) == 0);
    CHECK(setenv("KVP_TEST_GATE", gate, 1) == 0);
    test_node_start(n, "--workers=4");
    node_pid = n->pid;
    CHECK(unsetenv("LD_PRELOAD") == 0);
    test_session_make(cold, 3, 4, 0, 21);
    c = test_client(n->addr, 60000);
    CHECK_ST(test_session_put(c, NS, "cold", cold), KVP_OK);
    CHECK_ST(kvp_client_spill(c, NS, "cold"), KVP_OK);
    kvp_client_destroy(c);
}

static void run_order(void)
{
    test_node_t       n;
    test_session_t    cold;
    char              gate[300];
    kvp_xfer_params_t xp;
    kvp_xfer_h        x;
    order_t           o;
    double            end;

    gated_node_with_cold(&n, gate, sizeof(gate), &cold);

    memset(&o, 0, sizeof(o));
    memset(&xp, 0, sizeof(xp));
    xp.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CB_ARG;
    xp.recv_cb    = order_recv;
    xp.cb_arg     = &o;
    CHECK_ST(kvp_xfer_create(&xp, &x), KVP_OK);
    CHECK_ST(kvp_xfer_connect(x, "127.0.0.1", n.port, &o.conn[0]), KVP_OK);
    CHECK_ST(kvp_xfer_connect(x, "127.0.0.1", n.port, &o.conn[1]), KVP_OK);
    order_send(o.conn[0], KVP_WIRE_OP_GET_SESSION, 1, "cold"); /* held at the gate */
    order_send(o.conn[0], KVP_WIRE_OP_STAT, 2, "");           /* behind it */
    wait_for_waiters(n.dir, 1, x); /* the GET is inside its restore, held */
    end = kvp_time_s() + 60;
    order_send(o.conn[1], KVP_WIRE_OP_STAT, 3, ""); /* another connection: answered meanwhile */
    while (o.n[1] == 0) {
        kvp_xfer_wait(x, 20);
        CHECK(kvp_time_s() < end);
    }
    CHECK(o.ids[1][0] == 3 && o.st[1][0] == KVP_OK);
    CHECK(o.n[0] == 0); /* neither the held GET nor the STAT behind it */
    /* a flood behind the held GET: the connection holds QUEUE_MAX requests, the rest are refused
     * at once with ERR_BUSY (requests 100..) */
    for (uint64_t id = 100; id < 100 + QUEUE_MAX; id++) {
        order_send(o.conn[0], KVP_WIRE_OP_STAT, id, "");
    }
    while (o.n[0] < 2) {
        kvp_xfer_wait(x, 20);
        CHECK(kvp_time_s() < end);
    }
    CHECK(o.ids[0][0] == 100 + QUEUE_MAX - 2 && o.st[0][0] == KVP_ERR_BUSY);
    CHECK(o.ids[0][1] == 100 + QUEUE_MAX - 1 && o.st[0][1] == KVP_ERR_BUSY);
    touch(gate);
    while (o.n[0] < QUEUE_MAX + 2) {
        kvp_xfer_wait(x, 20);
        CHECK(kvp_time_s() < end);
    }
    CHECK(o.ids[0][2] == 1 && o.st[0][2] == KVP_OK);
    CHECK(o.ids[0][3] == 2 && o.st[0][3] == KVP_OK);
    for (int k = 4; k < QUEUE_MAX + 2; k++) { /* the queued ones, in order */
        CHECK(o.ids[0][k] == 100 + (uint64_t)k - 4 && o.st[0][k] == KVP_OK);
    }
    printf("order: one connection's held GET_SESSION and the STAT behind it answered in order, "
           "another connection's STAT meanwhile; %u queued, 2 more refused with ERR_BUSY\n",
           QUEUE_MAX);
    kvp_xfer_conn_close(o.conn[0]);
    kvp_xfer_conn_close(o.conn[1]);
    kvp_xfer_destroy(x);

    CHECK(unsetenv("KVP_TEST_GATE") == 0);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    node_pid = 0;
    test_session_free(&cold);
    test_node_rmdir(&n);
}

/* ---- appends: one held does not hold up another session's ---- */

typedef struct {
    const char  *addr, *sid;
    uint64_t     ns;
    kvp_status_t status;
} append_job_t;

/* An append of 4 fp16 tokens (2 heads x 64, P 16, kivi) to sid, the session's first */
static kvp_status_t append4(const char *addr, uint64_t ns, const char *sid, uint32_t timeout_ms)
{
    static uint16_t k[4 * 2 * 64], v[4 * 2 * 64];
    static uint32_t ids[4] = {1, 2, 3, 4};
    kvp_append_t    a;
    kvp_client_h    c = test_client(addr, timeout_ms);
    kvp_status_t    s;

    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        k[i] = v[i] = 0x3C00; /* 1.0 */
    }
    memset(&a, 0, sizeof(a));
    a.codec       = KVP_CODEC_KIVI;
    a.layers      = 1;
    a.heads       = 2;
    a.head_dim    = 64;
    a.page_tokens = 16;
    a.dtype       = KVP_DTYPE_F16;
    a.k           = k;
    a.v           = v;
    a.ntok        = 4;
    a.ids         = ids;
    a.n_ids       = 4;
    s             = kvp_client_append(c, ns, sid, &a, NULL);
    kvp_client_destroy(c);
    return s;
}

static void *append_main(void *arg)
{
    append_job_t *j = arg;

    j->status = append4(j->addr, j->ns, j->sid, 60000);
    return NULL;
}

/* An append to a cold session is held in its restore (the append reads the session first) at
 * the gate; an append to another session on another connection is answered meanwhile (a node-wide
 * append lock held it until the gate opened: its deadline passed). */
static void run_append(void)
{
    test_node_t    n;
    test_session_t cold;
    char           gate[300];
    append_job_t   held = {0};
    pthread_t      tid;

    gated_node_with_cold(&n, gate, sizeof(gate), &cold);

    held.addr = n.addr;
    held.sid  = "cold";
    held.ns   = NS;
    CHECK(pthread_create(&tid, NULL, append_main, &held) == 0);
    wait_for_waiters(n.dir, 1, NULL); /* inside its restore, held */
    CHECK_ST(append4(n.addr, NS + 1, "other", 20000), KVP_OK);
    printf("append: one held in its restore, another session's append answered meanwhile\n");
    touch(gate);
    CHECK(pthread_join(tid, NULL) == 0);
    CHECK(held.status != KVP_ERR_TIMEOUT); /* answered (the geometry is not cold's: refused) */
    CHECK(unsetenv("KVP_TEST_GATE") == 0);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    node_pid = 0;
    test_session_free(&cold);
    test_node_rmdir(&n);
}

int main(void)
{
    atexit(kill_node);
    run(4);
    run(1);
    run_order();
    run_append();
    printf("ok\n");
    return 0;
}
