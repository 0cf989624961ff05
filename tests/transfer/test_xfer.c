/* test_xfer.c - the UCX transport between two processes: a forked echo server on a loopback
 * port 0, eager and rendezvous messages (single and multi-iov data) echoed byte-identical, an
 * over-limit message rejected while the server keeps serving, and the server SIGKILLed while the
 * client waits: the client's connection fails with an error instead of hanging. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MSG (8u << 20)

/* ---- server (child) ---- */

static void echo_done(void *arg, kvp_status_t status)
{
    (void)status;
    kvp_xfer_msg_release(arg);
}

static void echo_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    size_t         hl, dl;
    const void    *h = kvp_xfer_msg_hdr(msg, &hl);
    const void    *d = kvp_xfer_msg_data(msg, &dl);
    kvp_xfer_iov_t iov = {d, dl};
    kvp_status_t   s;

    (void)arg;
    if (kvp_xfer_msg_status(msg) != KVP_OK) {
        kvp_xfer_msg_release(msg);
        return;
    }
    s = kvp_xfer_send(conn, h, hl, &iov, dl ? 1 : 0, echo_done, msg);
    if (s != KVP_INPROGRESS) {
        kvp_xfer_msg_release(msg);
    }
}

static void server(int fd)
{
    kvp_xfer_params_t p = {0};
    kvp_xfer_h        x;
    uint16_t          port;

    p.field_mask    = KVP_XFER_PARAM_MAX_MSG | KVP_XFER_PARAM_RECV_CB;
    p.max_msg_bytes = MAX_MSG;
    p.recv_cb       = echo_recv;
    if (kvp_xfer_create(&p, &x) != KVP_OK || kvp_xfer_listen(x, "127.0.0.1", 0, &port) != KVP_OK) {
        _exit(3);
    }
    if (write(fd, &port, sizeof(port)) != sizeof(port)) {
        _exit(3);
    }
    close(fd);
    for (;;) {
        kvp_xfer_wait(x, 100);
        if (getppid() == 1) {
            break;
        }
    }
    kvp_xfer_destroy(x);
    _exit(0);
}

/* ---- client ---- */

#define MAX_SENDS 64

/* One send's completion: its status and how many times it was reported (must end at 1). */
typedef struct {
    kvp_status_t status;
    int          calls;
} send_slot_t;

typedef struct {
    kvp_xfer_msg_h msg;
    kvp_status_t   conn_status;
    send_slot_t    sends[MAX_SENDS]; /* outlive roundtrip: a send may complete after it */
    unsigned       n_sends;
} client_state_t;

static void client_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    client_state_t *st = arg;

    (void)conn;
    CHECK(st->msg == NULL);
    st->msg = msg;
}

static void client_conn(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    client_state_t *st = arg;

    (void)conn;
    st->conn_status = status;
}

static void send_done(void *arg, kvp_status_t status)
{
    send_slot_t *slot = arg;

    slot->status = status;
    slot->calls++;
}

/* Send and wait for the echo (or a failure) for up to limit_s seconds. */
static kvp_status_t roundtrip(kvp_xfer_h x, kvp_xfer_conn_h c, client_state_t *st,
                              const char *hdr, const kvp_xfer_iov_t *iov, int n, double limit_s)
{
    send_slot_t *slot;
    kvp_status_t s;
    double       end = kvp_time_s() + limit_s;

    CHECK(st->n_sends < MAX_SENDS);
    slot         = &st->sends[st->n_sends++];
    slot->status = KVP_INPROGRESS;
    s            = kvp_xfer_send(c, hdr, strlen(hdr), iov, n, send_done, slot);
    if (s != KVP_INPROGRESS) { /* done at once: the callback is not called */
        slot->status = s;
        slot->calls  = 1;
    }
    if (slot->status != KVP_OK && slot->status != KVP_INPROGRESS) {
        return slot->status;
    }
    while (st->msg == NULL && st->conn_status == KVP_OK && kvp_time_s() < end) {
        if (slot->status != KVP_OK && slot->status != KVP_INPROGRESS) {
            return slot->status;
        }
        kvp_xfer_wait(x, 20);
    }
    if (st->msg != NULL) {
        return KVP_OK;
    }
    return (st->conn_status != KVP_OK) ? st->conn_status : KVP_ERR_TIMEOUT;
}

static void check_echo(client_state_t *st, const char *hdr, const kvp_xfer_iov_t *iov, int n)
{
    size_t         hl, dl, off = 0;
    const uint8_t *h = kvp_xfer_msg_hdr(st->msg, &hl);
    const uint8_t *d = kvp_xfer_msg_data(st->msg, &dl);

    CHECK(kvp_xfer_msg_status(st->msg) == KVP_OK);
    CHECK(hl == strlen(hdr) && memcmp(h, hdr, hl) == 0);
    for (int i = 0; i < n; i++) {
        CHECK(off + iov[i].len <= dl);
        CHECK(memcmp(d + off, iov[i].buf, iov[i].len) == 0);
        off += iov[i].len;
    }
    CHECK(off == dl);
    kvp_xfer_msg_release(st->msg);
    st->msg = NULL;
}

int main(void)
{
    client_state_t    st = {.msg = NULL, .conn_status = KVP_OK};
    kvp_xfer_params_t p  = {0};
    kvp_xfer_h        x;
    kvp_xfer_conn_h   c;
    kvp_xfer_iov_t    iov[3];
    uint16_t          port;
    uint8_t          *buf;
    size_t            sizes[] = {0, 1, 100, 8000, 30000, 1u << 20, 6u << 20};
    int               fds[2];
    pid_t             pid, killer, parent;
    char              host[64];
    kvp_status_t      s;
    double            t0;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    CHECK(kvp_xfer_parse_addr("127.0.0.1:4242", host, sizeof(host), &port) == KVP_OK);
    CHECK(strcmp(host, "127.0.0.1") == 0 && port == 4242);
    CHECK(kvp_xfer_parse_addr("[::1]:7", host, sizeof(host), &port) == KVP_OK && port == 7);
    CHECK(strcmp(host, "::1") == 0);
    CHECK(kvp_xfer_parse_addr("nohost", host, sizeof(host), &port) == KVP_ERR_INVALID);
    CHECK(kvp_xfer_parse_addr("h:99999", host, sizeof(host), &port) == KVP_ERR_INVALID);
    CHECK(kvp_xfer_parse_addr(":80", host, sizeof(host), &port) == KVP_ERR_INVALID);

    CHECK(pipe(fds) == 0);
    parent = getpid();
    pid    = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        kvp_test_child_of(parent);
        close(fds[0]);
        server(fds[1]);
    }
    close(fds[1]);
    CHECK(read(fds[0], &port, sizeof(port)) == sizeof(port));
    close(fds[0]);
    CHECK(port != 0);

    p.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG;
    p.recv_cb    = client_recv;
    p.conn_cb    = client_conn;
    p.cb_arg     = &st;
    CHECK(kvp_xfer_create(&p, &x) == KVP_OK);
    CHECK(kvp_xfer_max_hdr(x) >= 256);
    fprintf(stderr, "max header %zu bytes\n", kvp_xfer_max_hdr(x));
    CHECK(kvp_xfer_connect(x, "127.0.0.1", port, &c) == KVP_OK);

    buf = kvp_malloc(16u << 20, "test");
    for (size_t i = 0; i < (16u << 20); i++) {
        buf[i] = (uint8_t)(i * 2654435761u >> 13);
    }
    /* eager and rendezvous sizes, one iov */
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        iov[0].buf = buf + i;
        iov[0].len = sizes[i];
        s = roundtrip(x, c, &st, "single", iov, sizes[i] ? 1 : 0, 30);
        CHECK(s == KVP_OK);
        check_echo(&st, "single", iov, sizes[i] ? 1 : 0);
    }
    /* three iovs, small and large */
    for (int big = 0; big < 2; big++) {
        size_t unit = big ? (1u << 20) : 300;
        iov[0].buf = buf + 7;
        iov[0].len = unit;
        iov[1].buf = buf + 3 * unit;
        iov[1].len = unit / 2 + 1;
        iov[2].buf = buf + 6 * unit;
        iov[2].len = 2 * unit;
        s = roundtrip(x, c, &st, "iov", iov, 3, 30);
        CHECK(s == KVP_OK);
        check_echo(&st, "iov", iov, 3);
    }
    /* over the server's limit: rejected, and the server still serves afterwards */
    iov[0].buf = buf;
    iov[0].len = MAX_MSG + 1;
    s = roundtrip(x, c, &st, "big", iov, 1, 30);
    CHECK(s == KVP_ERR_TOO_LARGE);
    iov[0].len = 1000;
    s = roundtrip(x, c, &st, "after", iov, 1, 30);
    CHECK(s == KVP_OK);
    check_echo(&st, "after", iov, 1);

    /* stop the server: a request times out (nothing answers) */
    CHECK(kill(pid, SIGSTOP) == 0);
    iov[0].len = 100;
    t0 = kvp_time_s();
    s  = roundtrip(x, c, &st, "stopped", iov, 1, 1.0);
    CHECK(s == KVP_ERR_TIMEOUT);
    CHECK(kvp_time_s() - t0 < 30); /* returned at its deadline, not a hang */
    /* the server dies while we wait: a killer process SIGKILLs it 300 ms into a request with a
     * 20 s deadline; the connection error arrives long before the deadline */
    if (st.msg != NULL) { /* the stopped server's echo may have been queued */
        kvp_xfer_msg_release(st.msg);
        st.msg = NULL;
    }
    killer = fork();
    CHECK(killer >= 0);
    if (killer == 0) {
        usleep(300000);
        kill(pid, SIGKILL);
        _exit(0);
    }
    iov[0].len = 4u << 20;
    t0 = kvp_time_s();
    s  = roundtrip(x, c, &st, "dead", iov, 1, 20);
    fprintf(stderr, "dead peer: %s after %.2f s (deadline 20 s)\n", kvp_status_name(s),
            kvp_time_s() - t0);
    CHECK(s == KVP_ERR_PEER_GONE || s == KVP_ERR_PEER_UNREACHABLE);
    CHECK(waitpid(killer, NULL, 0) == killer);
    CHECK(waitpid(pid, NULL, 0) == pid);
    CHECK(kvp_xfer_send(c, "x", 1, NULL, 0, NULL, NULL) != KVP_INPROGRESS ||
          kvp_xfer_conn_status(c) != KVP_OK);

    kvp_xfer_conn_close(c);
    kvp_xfer_destroy(x);
    /* every send completed exactly once, by destroy at the latest (the one to the dead server
     * too, which UCX in error mode none never cancels by itself) */
    for (unsigned i = 0; i < st.n_sends; i++) {
        if (st.sends[i].calls != 1 || st.sends[i].status == KVP_INPROGRESS) {
            fprintf(stderr, "send %u: %d completions, status %s\n", i, st.sends[i].calls,
                    kvp_status_name(st.sends[i].status));
        }
        CHECK(st.sends[i].calls == 1 && st.sends[i].status != KVP_INPROGRESS);
    }
    kvp_free(buf);
    printf("test_xfer: ok\n");
    return 0;
}
