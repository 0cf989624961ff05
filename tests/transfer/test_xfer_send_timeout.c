/* test_xfer_send_timeout.c - a server's send to a peer that stops taking it: a forked client
 * asks for an 8 MiB reply and takes it (a send timeout does not cut a reply that is taken); then
 * for eight 8 MiB replies at once, which it takes slowly (its receive budget holds four, and it
 * releases one every 0.7 s: the last completes ~3 s after it was sent, past its own 1.84 s
 * allowance, yet the connection moves all along, so none is cut); then asks again and stops making
 * progress (a hung process: its TCP still answers). That last reply can never complete; with
 * send_timeout_ms 1000 its connection must fail KVP_ERR_TIMEOUT and the send complete with an
 * error, so the buffers it pinned come back. Before send deadlines the send stayed in flight for
 * as long as the connection lived; with deadlines counted from each send, the slow one was cut. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include "check.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define REPLY_BYTES (8u << 20) /* rendezvous: the receiver must fetch it */
#define N_SLOW      8          /* replies taken slowly: twice the client's receive budget */
#define SLOW_GAP_S  0.7        /* between the client's releases of them */

/* ---- client (child) ---- */

typedef struct {
    kvp_xfer_msg_h msg;          /* the latest reply */
    kvp_xfer_msg_h held[N_SLOW]; /* replies received, not released yet, oldest first */
    int            n_held, n_got;
    int            sent;
} client_t;

static void client_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    client_t *cl = arg;

    (void)conn;
    cl->msg = msg;
    if (cl->n_held < N_SLOW) {
        cl->held[cl->n_held++] = msg;
    }
    cl->n_got++;
}

static void client_sent(void *arg, kvp_status_t status)
{
    ((client_t *)arg)->sent = status == KVP_OK ? 1 : -1;
}

/* Release the oldest held reply (it must be a whole REPLY_BYTES one); 0 when it is not. */
static int client_release_oldest(client_t *cl)
{
    size_t len;
    int    ok;

    (void)kvp_xfer_msg_data(cl->held[0], &len);
    ok = kvp_xfer_msg_status(cl->held[0]) == KVP_OK && len == REPLY_BYTES;
    kvp_xfer_msg_release(cl->held[0]);
    memmove(cl->held, cl->held + 1, (size_t)(--cl->n_held) * sizeof(cl->held[0]));
    return ok;
}

/* Send hdr; progress until it is sent (and, want_reply, until the reply came) or 10 s pass. */
static int client_ask(kvp_xfer_h x, kvp_xfer_conn_h c, client_t *cl, const char *hdr,
                      int want_reply)
{
    double       end = kvp_time_s() + 10;
    kvp_status_t s;

    cl->sent = 0;
    s        = kvp_xfer_send(c, hdr, strlen(hdr), NULL, 0, client_sent, cl);
    if (s == KVP_OK) {
        cl->sent = 1;
    } else if (s != KVP_INPROGRESS) {
        return 0;
    }
    while (kvp_time_s() < end && (cl->sent == 0 || (want_reply && cl->msg == NULL))) {
        kvp_xfer_wait(x, 20);
    }
    return cl->sent == 1 && (!want_reply || cl->msg != NULL);
}

static void client(int port_fd, int ready_fd)
{
    client_t          cl;
    kvp_xfer_params_t p = {0};
    kvp_xfer_h        x;
    kvp_xfer_conn_h   c;
    uint16_t          port;
    double            next, end;
    int               released = 0;

    memset(&cl, 0, sizeof(cl));
    if (read(port_fd, &port, sizeof(port)) != sizeof(port)) {
        _exit(2);
    }
    p.field_mask    = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CB_ARG | KVP_XFER_PARAM_MAX_MSG;
    p.recv_cb       = client_recv;
    p.cb_arg        = &cl;
    p.max_msg_bytes = REPLY_BYTES; /* receive budget 4x: four replies held at once */
    if (kvp_xfer_create(&p, &x) != KVP_OK || kvp_xfer_connect(x, "127.0.0.1", port, &c) != KVP_OK) {
        _exit(3);
    }
    if (!client_ask(x, c, &cl, "take", 1) || !client_release_oldest(&cl)) {
        _exit(4);
    }
    cl.n_got = 0;
    if (!client_ask(x, c, &cl, "slow", 0)) {
        _exit(5);
    }
    next = kvp_time_s() + SLOW_GAP_S;
    end  = kvp_time_s() + 60;
    while (released < N_SLOW && kvp_time_s() < end) { /* one released every SLOW_GAP_S */
        kvp_xfer_wait(x, 20);
        if (cl.n_held > 0 && kvp_time_s() >= next) {
            if (!client_release_oldest(&cl)) {
                _exit(6);
            }
            released++;
            next = kvp_time_s() + SLOW_GAP_S;
        }
    }
    if (released < N_SLOW || cl.n_got != N_SLOW) {
        _exit(7);
    }
    if (!client_ask(x, c, &cl, "stall", 0)) {
        _exit(8);
    }
    if (write(ready_fd, "s", 1) != 1) { /* from here on: no progress, as a hung process */
        _exit(9);
    }
    for (;;) {
        pause();
    }
}

/* ---- server (this process) ---- */

typedef struct {
    uint8_t       *reply;
    kvp_xfer_msg_h  stalled;     /* the "stall" request, answered once the client is stuck */
    kvp_xfer_conn_h stalled_conn;
    kvp_status_t   send_status[2 + N_SLOW]; /* "take", "stall", the slow ones: INPROGRESS
                                             * until completed */
    kvp_status_t   conn_status;
} server_t;

static void server_sent(void *arg, kvp_status_t status) { *(kvp_status_t *)arg = status; }

static void server_reply(server_t *sv, kvp_xfer_conn_h conn, int which)
{
    kvp_xfer_iov_t iov = {sv->reply, REPLY_BYTES};
    kvp_status_t   s;

    sv->send_status[which] = KVP_INPROGRESS;
    s = kvp_xfer_send(conn, "r", 1, &iov, 1, server_sent, &sv->send_status[which]);
    if (s != KVP_INPROGRESS) {
        sv->send_status[which] = s;
    }
}

static void server_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    server_t   *sv = arg;
    size_t      hl;
    const char *h = kvp_xfer_msg_hdr(msg, &hl);

    if (hl == 4 && memcmp(h, "take", 4) == 0) {
        server_reply(sv, conn, 0);
        kvp_xfer_msg_release(msg);
    } else if (hl == 4 && memcmp(h, "slow", 4) == 0) {
        for (int i = 0; i < N_SLOW; i++) {
            server_reply(sv, conn, 2 + i);
        }
        kvp_xfer_msg_release(msg);
    } else {
        sv->stalled      = msg; /* held until answered */
        sv->stalled_conn = conn;
    }
}

static void server_conn(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    (void)conn;
    ((server_t *)arg)->conn_status = status;
}

/* 1 when fd has something to read */
static int readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    return poll(&pfd, 1, 0) == 1;
}

int main(void)
{
    server_t          sv;
    kvp_xfer_params_t p  = {0};
    kvp_xfer_h        x;
    uint16_t          port;
    int               to_child[2], from_child[2];
    pid_t             pid, parent = getpid();
    char              c;
    double            t0, end;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    memset(&sv, 0, sizeof(sv)); /* statuses KVP_OK (0) */
    CHECK(pipe(to_child) == 0 && pipe(from_child) == 0);
    pid = fork(); /* before any UCX state: the child makes its own */
    CHECK(pid >= 0);
    if (pid == 0) {
        kvp_test_child_of(parent);
        close(to_child[1]);
        close(from_child[0]);
        client(to_child[0], from_child[1]);
    }
    close(to_child[0]);
    close(from_child[1]);
    sv.reply = kvp_malloc(REPLY_BYTES, "test reply");
    CHECK(sv.reply != NULL);
    memset(sv.reply, 0x5A, REPLY_BYTES);
    p.field_mask      = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG |
                        KVP_XFER_PARAM_SEND_TIMEOUT;
    p.recv_cb         = server_recv;
    p.conn_cb         = server_conn;
    p.cb_arg          = &sv;
    p.send_timeout_ms = 1000;
    CHECK(kvp_xfer_create(&p, &x) == KVP_OK);
    CHECK(kvp_xfer_listen(x, "127.0.0.1", 0, &port) == KVP_OK);
    CHECK(write(to_child[1], &port, sizeof(port)) == sizeof(port));

    /* the first reply is taken; then the client asks again and says it is stuck */
    end = kvp_time_s() + 30;
    while (kvp_time_s() < end && (sv.stalled == NULL || !readable(from_child[0]))) {
        kvp_xfer_wait(x, 20);
    }
    CHECK(sv.stalled != NULL);
    CHECK(read(from_child[0], &c, 1) == 1 && c == 's');
    CHECK(sv.send_status[0] == KVP_OK); /* an 8 MiB reply that was taken is not cut */
    for (int i = 0; i < N_SLOW; i++) { /* nor those taken slowly: the connection kept moving */
        if (sv.send_status[2 + i] != KVP_OK) {
            fprintf(stderr, "slow reply %d: %s\n", i, kvp_status_name(sv.send_status[2 + i]));
        }
        CHECK(sv.send_status[2 + i] == KVP_OK);
    }
    CHECK(sv.conn_status == KVP_OK);

    /* the reply the client never takes: its connection fails at the send deadline (1 s plus
     * 1 s per 10 MB), long before this test's 20 s */
    server_reply(&sv, sv.stalled_conn, 1);
    kvp_xfer_msg_release(sv.stalled);
    CHECK(sv.send_status[1] == KVP_INPROGRESS);
    t0  = kvp_time_s();
    end = t0 + 20;
    while (kvp_time_s() < end && sv.send_status[1] == KVP_INPROGRESS) {
        kvp_xfer_wait(x, 50);
    }
    fprintf(stderr, "stalled reply: send %s, connection %s after %.2f s\n",
            kvp_status_name(sv.send_status[1]), kvp_status_name(sv.conn_status),
            kvp_time_s() - t0);
    CHECK(sv.send_status[1] != KVP_INPROGRESS && sv.send_status[1] != KVP_OK);
    CHECK(sv.conn_status == KVP_ERR_TIMEOUT);

    kill(pid, SIGKILL);
    CHECK(waitpid(pid, NULL, 0) == pid);
    kvp_xfer_destroy(x);
    kvp_free(sv.reply);
    printf("test_xfer_send_timeout: ok\n");
    return 0;
}
