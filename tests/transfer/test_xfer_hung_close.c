/* test_xfer_hung_close.c - a client gives up on a peer that takes nothing, closes the connection
 * and is destroyed (kvp_client at a call's deadline, then kvp_client_destroy). Two such peers:
 *  - hung node: a TCP listener that never answers, so the connection never completes and the
 *    request waits queued for it;
 *  - stalled node: a transport that accepted the connection and answered a request, then stops
 *    progressing, so an 8 MB request (rendezvous) to it waits for it to pull the data.
 * The close must not hold the thread, and destroy must return with each send completed exactly
 * once. In error mode none (integ.hung_close_err_none) UCX 1.13 refused the force close, so the
 * send stayed queued and ucp_worker_destroy aborted the process ("pending request ... should
 * have been flushed"). Each case runs in a child process, so an abort fails this test instead of
 * ending it. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "xfer_clients.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (8u << 20) /* over the 1 MiB eager size: a rendezvous send the receiver must pull */

static int          n_done;    /* completions of the send under test */
static kvp_status_t done_status;

static void on_sent(void *arg, kvp_status_t status)
{
    (void)arg;
    n_done++;
    done_status = status;
}

/* A listening TCP socket on loopback that nobody accepts from or reads: a hung node. */
static int hung_listener(uint16_t *port_p)
{
    struct sockaddr_in sa;
    socklen_t          len = sizeof(sa);
    int                fd  = socket(AF_INET, SOCK_STREAM, 0);

    CHECK(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(listen(fd, 16) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    *port_p = ntohs(sa.sin_port);
    return fd;
}

/* The client's part once its request is in flight and the peer takes nothing: wait a while (the
 * call's deadline), close, destroy. */
static void give_up(kvp_xfer_h cli, kvp_xfer_conn_h conn, const char *what)
{
    double t0, t_close, t_destroy, end = kvp_time_s() + 0.5;

    while (kvp_time_s() < end) {
        kvp_xfer_wait(cli, 10);
    }
    EXPECT(n_done == 0, "%s: the send completed (%s) before the close: the case under test was "
           "not reached", what, kvp_status_name(done_status));
    t0 = kvp_time_s();
    kvp_xfer_conn_close(conn);
    t_close = kvp_time_s() - t0;
    t0      = kvp_time_s();
    kvp_xfer_destroy(cli);
    t_destroy = kvp_time_s() - t0;
    printf("%s (error mode %s): close %.3f s, destroy %.3f s, the send completed %d time(s), "
           "%s\n", what, getenv("KVP_UCX_ERR_MODE") ? getenv("KVP_UCX_ERR_MODE") : "default",
           t_close, t_destroy, n_done, kvp_status_name(done_status));
    /* bounds for a hang, not timing checks: a close that waited for the peer took 3 s */
    EXPECT(t_close < 1.0, "%s: the close held the thread %.1f s", what, t_close);
    EXPECT(t_destroy < 10.0, "%s: destroy took %.1f s", what, t_destroy);
    EXPECT(n_done == 1 && done_status != KVP_OK, "%s: the send completed %d time(s), %s", what,
           n_done, kvp_status_name(done_status));
}

static void case_hung_node(void)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        cli;
    kvp_xfer_conn_h   conn;
    uint16_t          port;
    int               lfd = hung_listener(&port);
    kvp_status_t      s;

    memset(&p, 0, sizeof(p));
    CHECK_OK(kvp_xfer_create(&p, &cli));
    CHECK_OK(kvp_xfer_connect(cli, "127.0.0.1", port, &conn));
    s = kvp_xfer_send(conn, "q", 1, NULL, 0, on_sent, NULL);
    CHECK(s == KVP_INPROGRESS);
    give_up(cli, conn, "hung node");
    close(lfd);
}

static void case_stalled_node(void)
{
    kvp_xfer_h      srv, cli;
    xt_clients_t    c;
    uint16_t        port;
    kvp_xfer_iov_t  iov;
    uint8_t         id = 0;
    double          end = kvp_time_s() + 20; /* a bound for a hang, not a timing check */
    kvp_status_t    s;
    void           *big = kvp_calloc(1, BIG, "test payload");

    CHECK(big != NULL);
    srv = xt_server(NULL, &port);
    cli = xt_client(&c);
    xt_connect_send(cli, port, &c, 0);
    while (c.n_replied + c.n_failed == 0 && kvp_time_s() < end) {
        kvp_xfer_progress(cli);
        kvp_xfer_progress(srv);
    }
    CHECK(c.n_replied == 1);
    /* the node stops here: srv is never progressed again until its own destroy */
    iov.buf = big;
    iov.len = BIG;
    s = kvp_xfer_send(c.conn[0], &id, 1, &iov, 1, on_sent, NULL);
    CHECK(s == KVP_INPROGRESS);
    give_up(cli, c.conn[0], "stalled node");
    kvp_xfer_destroy(srv);
    kvp_free(big);
}

/* run one case in a child: 0 when it exited 0 */
static int run_child(void (*fn)(void), const char *what)
{
    pid_t pid;
    int   st;

    fflush(stdout);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fn();
        fflush(stdout);
        _exit(kvp_test_result(what));
    }
    CHECK(waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st)) {
        EXPECT(0, "%s: the client process was killed by signal %d", what, WTERMSIG(st));
        return 1;
    }
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the client process exited %d", what,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}

int main(void)
{
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    run_child(case_hung_node, "hung node");
    run_child(case_stalled_node, "stalled node");
    return kvp_test_result("test_xfer_hung_close");
}
