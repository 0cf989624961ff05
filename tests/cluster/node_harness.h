/* node_harness.h - test helpers shared by tests/cluster and tests/integ: start a real kvpackd
 * child on a loopback port 0 with a temp data dir (waiting on its --ready-file), stop it, and
 * build small fp16 pages + session records with known contents, and talk to it over a raw
 * transport connection (hand-made requests). Header-only (static inline). */
#ifndef KVP_TEST_NODE_HARNESS_H
#define KVP_TEST_NODE_HARNESS_H

#include "kvpack/alloc.h"
#include "kvpack/cluster.h"
#include "kvpack/codec.h"
#include "kvpack/kvpack.h"
#include "kvpack/page.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    pid_t    pid;
    uint16_t port;
    char     addr[64];
    char     dir[256];   /* temp dir: data/ and the ready file live here */
} test_node_t;

/* A fresh temp directory for one node (kept across restarts). */
static inline void test_node_mkdir(test_node_t *n)
{
    snprintf(n->dir, sizeof(n->dir), "/tmp/kvp_node_XXXXXX");
    CHECK(mkdtemp(n->dir) != NULL);
}

/* Start kvpackd on 127.0.0.1:port (0: any free one) with data in n->dir/data and up to two more
 * arguments (NULL: none); waits up to 30 s for its ready file. On a fixed port a node that exits
 * at once is started again for up to 10 s: another test's client (tests run two at a time) may
 * hold that port as the local end of a connection meanwhile ('address already in use'). */
static inline void test_node_start_args(test_node_t *n, uint16_t port, const char *extra_arg,
                                        const char *extra_arg2)
{
    char   ready[300], data[300], listen[32];
    double end, retry_end = kvp_time_s() + (port != 0 ? 10 : 0);
    FILE  *f;
    pid_t  parent;

    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    snprintf(ready, sizeof(ready), "%s/ready", n->dir);
    snprintf(data, sizeof(data), "%s/data", n->dir);
    parent = getpid();
    for (;;) {
        int st, died = 0;

        unlink(ready);
        n->pid = fork();
        CHECK(n->pid >= 0);
        if (n->pid == 0) {
            int fd = open("/dev/null", O_WRONLY);

            kvp_test_child_of(parent); /* a failed CHECK in the test must not leave kvpackd
                                        * running */
            if (fd >= 0) {
                dup2(fd, 1); /* the "listening on" line */
            }
            execl(KVPACKD_PATH, "kvpackd", "--listen", listen, "--data-dir", data,
                  "--ready-file", ready, "--dram-budget", "256M", extra_arg, extra_arg2,
                  (char *)NULL);
            _exit(127);
        }
        end = kvp_time_s() + 30;
        while ((f = fopen(ready, "r")) == NULL && !died) {
            died = waitpid(n->pid, &st, WNOHANG) != 0;
            CHECK(kvp_time_s() < end);
            usleep(20000);
        }
        if (f != NULL) {
            break;
        }
        CHECK(kvp_time_s() < retry_end); /* kvpackd died during start-up */
        fprintf(stderr, "kvpackd exited at start on port %u: started again\n", port);
        usleep(500000);
    }
    CHECK(fscanf(f, "%hu", &n->port) == 1);
    fclose(f);
    CHECK(n->port != 0);
    snprintf(n->addr, sizeof(n->addr), "127.0.0.1:%u", n->port);
}

static inline void test_node_start_at(test_node_t *n, uint16_t port, const char *extra_arg)
{
    test_node_start_args(n, port, extra_arg, NULL);
}

static inline void test_node_start(test_node_t *n, const char *extra_arg)
{
    test_node_start_args(n, 0, extra_arg, NULL);
}

/* SIGTERM and wait; returns the exit status (or 128 + signal). */
static inline int test_node_stop(test_node_t *n, int sig)
{
    int st = 0;

    if (n->pid <= 0) {
        return -1;
    }
    kill(n->pid, SIGCONT);
    kill(n->pid, sig);
    CHECK(waitpid(n->pid, &st, 0) == n->pid);
    n->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A malloc'd fp16 page of ntok tokens x 8 heads x 128 (ntok 128: just over 512 KiB, sent eager
 * below UCX's 1 MiB threshold) in slot 0 of `copies` slots of *len_p bytes, copies of it in the
 * others (a multi-page put of one page's bytes); kvp_free it. */
static inline uint8_t *test_big_page(uint32_t ntok, kvp_key128_t key, uint32_t copies,
                                     size_t *len_p)
{
    kvp_page_params_t pp;
    size_t            n = (size_t)ntok * 8 * 128, cap;
    float            *k = kvp_malloc(n * sizeof(float), "k"), *v = kvp_malloc(n * sizeof(float), "v");
    uint8_t          *page;

    CHECK(k != NULL && v != NULL && copies > 0);
    for (size_t i = 0; i < n; i++) {
        k[i] = (float)(i % 7) - 3.0f;
        v[i] = (float)(i % 5) - 2.0f;
    }
    memset(&pp, 0, sizeof(pp));
    pp.codec       = KVP_CODEC_FP16;
    pp.heads       = 8;
    pp.head_dim    = 128;
    pp.page_tokens = ntok;
    pp.chunk_key   = key;
    cap            = kvp_page_max_bytes(&pp);
    page           = kvp_malloc(cap * copies, "page");
    CHECK(page != NULL);
    CHECK_OK(kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, ntok, page, cap, len_p));
    for (uint32_t i = 1; i < copies; i++) {
        memcpy(page + (size_t)i * *len_p, page, *len_p);
    }
    kvp_free(k);
    kvp_free(v);
    return page;
}

/* A memory figure of process pid in MiB: field is "VmRSS" (resident now) or "VmHWM" (the most
 * it was resident), from /proc/PID/status */
static inline long test_node_mem_mib(pid_t pid, const char *field)
{
    char   path[64], line[256];
    long   kb = -1;
    size_t fl = strlen(field);
    FILE  *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, fl) == 0 && line[fl] == ':' && sscanf(line + fl + 1, "%ld", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    CHECK(kb >= 0);
    return kb / 1024;
}

static inline long test_node_rss_mib(pid_t pid) { return test_node_mem_mib(pid, "VmRSS"); }

static inline void test_node_rmdir(test_node_t *n)
{
    char cmd[400];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", n->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "warning: could not remove %s\n", n->dir);
    }
}

static inline kvp_client_h test_client(const char *addr, uint32_t timeout_ms)
{
    kvp_client_params_t p;
    kvp_client_h        c;

    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
    p.server     = addr;
    p.timeout_ms = timeout_ms;
    CHECK_ST(kvp_client_create(&p, &c), KVP_OK);
    return c;
}

/* ---- synthetic session: n_chunks sealed fp16 pages per layer + a tail ---- */

#define TS_HEADS 2
#define TS_DIM   64
#define TS_P     32

typedef struct {
    uint32_t           layers, n_chunks, n_pages;
    uint8_t          **pages;  /* [chunk * layers + layer] */
    size_t            *lens;
    kvp_session_desc_t desc;
} test_session_t;

static inline uint8_t *test_page(uint32_t layer, uint32_t chunk, kvp_key128_t key, uint32_t ntok,
                          uint32_t flags, uint32_t seed, size_t *len_p)
{
    kvp_page_params_t pp;
    size_t            n = (size_t)ntok * TS_HEADS * TS_DIM;
    float            *k = kvp_malloc(n * sizeof(float), "t"), *v = kvp_malloc(n * sizeof(float), "t");
    uint8_t          *out;
    size_t            cap;

    memset(&pp, 0, sizeof(pp));
    pp.codec       = KVP_CODEC_FP16;
    pp.heads       = TS_HEADS;
    pp.head_dim    = TS_DIM;
    pp.page_tokens = TS_P;
    pp.layer       = layer;
    pp.first_pos   = (uint64_t)chunk * TS_P;
    pp.chunk_key   = key;
    pp.flags       = flags;
    for (size_t i = 0; i < n; i++) {
        k[i] = (float)((i * 7 + layer * 131 + chunk * 17 + seed) % 97) / 13.0f - 3.0f;
        v[i] = (float)((i * 11 + layer * 37 + chunk * 5 + seed) % 89) / 11.0f - 4.0f;
    }
    cap = kvp_page_max_bytes(&pp);
    CHECK(cap > 0);
    out = kvp_malloc(cap, "t page");
    CHECK_ST(kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, ntok, out, cap, len_p), KVP_OK);
    kvp_free(k);
    kvp_free(v);
    return out;
}

static inline void test_session_make(test_session_t *ts, uint32_t layers, uint32_t n_chunks,
                              uint32_t tail_tokens, uint32_t seed)
{
    uint32_t tokens[TS_P];
    size_t   off = 0;

    memset(ts, 0, sizeof(*ts));
    ts->layers   = layers;
    ts->n_chunks = n_chunks;
    ts->n_pages  = layers * n_chunks;
    ts->pages    = kvp_calloc(ts->n_pages + 1, sizeof(*ts->pages), "t");
    ts->lens     = kvp_calloc(ts->n_pages + 1, sizeof(*ts->lens), "t");
    ts->desc.layers      = layers;
    ts->desc.page_tokens = TS_P;
    ts->desc.n_chunks    = n_chunks;
    ts->desc.chunk_keys  = kvp_calloc(n_chunks + 1, sizeof(kvp_key128_t), "t");
    for (uint32_t c = 0; c < n_chunks; c++) {
        for (uint32_t t = 0; t < TS_P; t++) {
            tokens[t] = seed * 1000003u + c * TS_P + t;
        }
        ts->desc.chunk_keys[c] = kvp_chunk_key(c ? &ts->desc.chunk_keys[c - 1] : NULL,
                                               0x1234, tokens, TS_P);
        for (uint32_t l = 0; l < layers; l++) {
            ts->pages[c * layers + l] = test_page(l, c, ts->desc.chunk_keys[c], TS_P, 0, seed,
                                                  &ts->lens[c * layers + l]);
        }
    }
    if (tail_tokens > 0) {
        size_t   plen;
        uint8_t *p;

        ts->desc.tail_tokens = tail_tokens;
        ts->desc.n_tail      = layers;
        for (uint32_t l = 0; l < layers; l++) {
            kvp_key128_t zero = {0, 0};

            p = test_page(l, n_chunks, zero, tail_tokens, KVP_PAGE_F_TAIL, seed + 1, &plen);
            ts->desc.tail = kvp_realloc(ts->desc.tail, off + plen, "t tail");
            memcpy(ts->desc.tail + off, p, plen);
            off += plen;
            kvp_free(p);
        }
        ts->desc.tail_len = off;
    }
}

static inline void test_session_free(test_session_t *ts)
{
    for (uint32_t i = 0; i < ts->n_pages; i++) {
        kvp_free(ts->pages[i]);
    }
    kvp_free(ts->pages);
    kvp_free(ts->lens);
    kvp_session_desc_clear(&ts->desc);
}

static inline kvp_status_t test_session_put(kvp_client_h c, uint64_t ns, const char *sid,
                                     const test_session_t *ts)
{
    kvp_status_t s = kvp_client_put_pages(c, ns, (const void *const *)ts->pages, ts->lens,
                                          ts->n_pages);
    return (s == KVP_OK) ? kvp_client_put_session(c, ns, sid, &ts->desc) : s;
}

/* A fetched session must be byte-identical to what was put. */
static inline void test_session_check(const test_session_t *ts, const kvp_session_pages_t *sp)
{
    CHECK(sp->desc.layers == ts->layers && sp->desc.n_chunks == ts->n_chunks);
    CHECK(sp->n_pages == ts->n_pages);
    for (uint32_t c = 0; c < ts->n_chunks; c++) {
        CHECK(sp->desc.chunk_keys[c].lo == ts->desc.chunk_keys[c].lo);
        CHECK(sp->desc.chunk_keys[c].hi == ts->desc.chunk_keys[c].hi);
    }
    for (uint32_t i = 0; i < ts->n_pages; i++) {
        CHECK(sp->page_lens[i] == ts->lens[i]);
        CHECK(memcmp(sp->pages[i], ts->pages[i], ts->lens[i]) == 0);
    }
    CHECK(sp->desc.tail_tokens == ts->desc.tail_tokens && sp->desc.n_tail == ts->desc.n_tail);
    CHECK(sp->desc.tail_len == ts->desc.tail_len);
    CHECK(ts->desc.tail_len == 0 || memcmp(sp->desc.tail, ts->desc.tail, ts->desc.tail_len) == 0);
}

/* A cluster handle over peers with replicas copies and a 3 s client timeout; creating it must
 * give want (NULL handle unless KVP_OK). */
static inline kvp_cluster_h test_cluster_open(const char *peers, uint32_t replicas,
                                              kvp_status_t want)
{
    kvp_client_params_t  cp;
    kvp_cluster_params_t p;
    kvp_cluster_h        cl = NULL;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask = KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.timeout_ms = 3000;
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_CLUSTER_PARAM_PEERS | KVP_CLUSTER_PARAM_REPLICAS | KVP_CLUSTER_PARAM_CLIENT;
    p.peers      = peers;
    p.replicas   = replicas;
    p.client     = &cp;
    CHECK_ST(kvp_cluster_create(&p, &cl), want);
    return cl;
}

/* ---- stub node: a listener of the test's own answering every request with one status ---- */

static inline void test_stub_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    kvp_wire_req_t req;
    kvp_wire_rep_t rep;
    size_t         hl, rl;
    const void    *h = kvp_xfer_msg_hdr(msg, &hl);
    uint8_t       *out;

    memset(&req, 0, sizeof(req));
    kvp_wire_req_unpack(h, hl, kvp_xfer_msg_sent_len(msg), &req); /* for op and req_id */
    memset(&rep, 0, sizeof(rep));
    rep.op     = req.op;
    rep.req_id = req.req_id;
    rep.status = *(const kvp_status_t *)arg;
    snprintf(rep.message, sizeof(rep.message), "stub node: %s", kvp_status_str(rep.status));
    if (kvp_wire_rep_pack(&rep, &out, &rl) == KVP_OK) {
        kvp_xfer_send(conn, out, rl, NULL, 0, NULL, NULL); /* the header is copied */
        kvp_free(out);
    }
    kvp_wire_req_clear(&req);
    kvp_xfer_msg_release(msg);
}

/* A forked child listening on a loopback port 0 that answers every request with status and
 * stores nothing: a node that refuses everything (e.g. out of memory). Before this process makes
 * a transport of its own. Stop it with test_node_stop (it has no directory). */
static inline void test_stub_start(test_node_t *n, kvp_status_t status)
{
    int   fds[2];
    pid_t parent = getpid();

    memset(n, 0, sizeof(*n));
    CHECK(pipe(fds) == 0);
    n->pid = fork();
    CHECK(n->pid >= 0);
    if (n->pid == 0) {
        kvp_xfer_params_t p;
        kvp_xfer_h        x;
        uint16_t          port = 0;

        kvp_test_child_of(parent);
        close(fds[0]);
        memset(&p, 0, sizeof(p));
        p.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CB_ARG;
        p.recv_cb    = test_stub_recv;
        p.cb_arg     = &status;
        if (kvp_xfer_create(&p, &x) != KVP_OK ||
            kvp_xfer_listen(x, "127.0.0.1", 0, &port) != KVP_OK ||
            write(fds[1], &port, sizeof(port)) != sizeof(port)) {
            _exit(3);
        }
        for (;;) {
            kvp_xfer_wait(x, 100);
        }
    }
    close(fds[1]);
    CHECK(read(fds[0], &n->port, sizeof(n->port)) == sizeof(n->port));
    close(fds[0]);
    snprintf(n->addr, sizeof(n->addr), "127.0.0.1:%u", n->port);
}

/* ---- raw transport connection: hand-made (possibly bad) requests, replies unpacked ---- */

typedef struct {
    kvp_xfer_h      x;
    kvp_xfer_conn_h conn;
    kvp_wire_rep_t  rep;    /* the last reply */
    kvp_status_t    unpack; /* how it unpacked */
    int             got;    /* replies since test_raw_call (or open) */
    int             n_ok;   /* replies that unpacked with status OK, since open */
    int             n_busy; /* ... with status KVP_ERR_BUSY, since open */
    uint64_t        pages;  /* pages those carried */
    size_t          data;   /* and their data bytes */
} test_raw_t;

static inline void test_raw_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    test_raw_t *r = arg;
    size_t      hl, dl;
    const void *h = kvp_xfer_msg_hdr(msg, &hl);

    (void)conn;
    kvp_xfer_msg_data(msg, &dl);
    kvp_wire_rep_clear(&r->rep);
    r->unpack = kvp_wire_rep_unpack(h, hl, dl, &r->rep);
    if (r->unpack == KVP_OK && r->rep.status == KVP_OK) {
        r->n_ok++;
        r->pages += r->rep.n_pages;
        r->data += dl;
    }
    r->n_busy += r->unpack == KVP_OK && r->rep.status == KVP_ERR_BUSY;
    r->got++;
    kvp_xfer_msg_release(msg);
}

/* A transport of the test's own with recv_cb(arg, ...), connected to the node at port. */
static inline void test_xfer_open(uint16_t port, kvp_xfer_recv_cb_t recv_cb, void *arg,
                                  kvp_xfer_h *x_p, kvp_xfer_conn_h *conn_p)
{
    kvp_xfer_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CB_ARG;
    p.recv_cb    = recv_cb;
    p.cb_arg     = arg;
    CHECK_ST(kvp_xfer_create(&p, x_p), KVP_OK);
    CHECK_ST(kvp_xfer_connect(*x_p, "127.0.0.1", port, conn_p), KVP_OK);
}

static inline void test_raw_open(test_raw_t *r, uint16_t port)
{
    memset(r, 0, sizeof(*r));
    test_xfer_open(port, test_raw_recv, r, &r->x, &r->conn);
}

/* Send a raw header + data, wait (up to 20 s) for the node's reply in r->rep. */
static inline void test_raw_call(test_raw_t *r, const void *hdr, size_t hl, const void *data,
                                 size_t dl)
{
    kvp_xfer_iov_t iov = {data, dl};
    double         end = kvp_time_s() + 20;
    kvp_status_t   s;

    kvp_wire_rep_clear(&r->rep);
    r->got = 0;
    s = kvp_xfer_send(r->conn, hdr, hl, &iov, dl ? 1 : 0, NULL, NULL);
    CHECK(s == KVP_OK || s == KVP_INPROGRESS);
    while (!r->got && kvp_time_s() < end) {
        kvp_xfer_wait(r->x, 50);
    }
    CHECK(r->got);
}

/* test_raw_open, then one STAT answered: the connection is up when this returns */
static inline void test_raw_open_up(test_raw_t *r, uint16_t port)
{
    kvp_wire_req_t req;
    uint8_t       *hdr;
    size_t         hl;

    test_raw_open(r, port);
    memset(&req, 0, sizeof(req));
    req.op     = KVP_WIRE_OP_STAT;
    req.req_id = 1;
    CHECK_OK(kvp_wire_req_pack(&req, &hdr, &hl));
    test_raw_call(r, hdr, hl, NULL, 0);
    kvp_free(hdr);
}

/* A GET_PAGES request of keys[0..n_keys) in ns, layer 0, replies of up to max_bytes of pages */
static inline void test_get_req(kvp_wire_req_t *req, uint64_t req_id, uint64_t ns,
                                kvp_key128_t *keys, uint32_t n_keys, uint32_t max_bytes)
{
    memset(req, 0, sizeof(*req));
    req->op        = KVP_WIRE_OP_GET_PAGES;
    req->req_id    = req_id;
    req->ns        = ns;
    req->n_keys    = n_keys;
    req->keys      = keys;
    req->layers    = 1;
    req->max_bytes = max_bytes;
}

static inline void test_raw_send_status(void *arg, kvp_status_t status)
{
    *(kvp_status_t *)arg = status;
}

/* Pack req and send it with dl bytes of data, not waiting for anything; *sent (may be NULL)
 * gets the send's outcome: KVP_INPROGRESS until the transport reports it. */
static inline void test_raw_send(test_raw_t *r, kvp_wire_req_t *req, const void *data, size_t dl,
                                 kvp_status_t *sent)
{
    kvp_xfer_iov_t iov = {data, dl};
    uint8_t       *hdr;
    size_t         hl;
    kvp_status_t   s;

    CHECK_OK(kvp_wire_req_pack(req, &hdr, &hl));
    if (sent != NULL) {
        *sent = KVP_INPROGRESS;
    }
    s = kvp_xfer_send(r->conn, hdr, hl, &iov, dl ? 1 : 0, sent ? test_raw_send_status : NULL, sent);
    CHECK(s == KVP_INPROGRESS || s == KVP_OK);
    if (s == KVP_OK && sent != NULL) {
        *sent = KVP_OK;
    }
    kvp_free(hdr);
}

static inline void test_raw_close(test_raw_t *r)
{
    kvp_wire_rep_clear(&r->rep);
    kvp_xfer_conn_close(r->conn);
    kvp_xfer_destroy(r->x);
}

#endif
