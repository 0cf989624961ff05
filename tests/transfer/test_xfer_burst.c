/* test_xfer_burst.c - a burst of connects to one listener: 100 connections (one client xfer) are
 * opened and each sends a request while the server does not progress, so every conn request
 * reaches the server in one ucp_worker_progress drain. Every one must be accepted and answered.
 * Before, the listener queued 64 and rejected the rest: those clients got
 * KVP_ERR_PEER_UNREACHABLE from a healthy server. Both ends live in this process. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include "check.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define N_CONN 100 /* more than the 64 the accept queue used to hold */

typedef struct {
    kvp_xfer_conn_h conn[N_CONN];
    int             replied[N_CONN];
    kvp_status_t    failed[N_CONN];
    int             n_replied, n_failed;
} clients_t;

static void echo_done(void *arg, kvp_status_t status)
{
    (void)status;
    kvp_xfer_msg_release(arg);
}

/* Server: the request's header goes back as the reply. */
static void echo_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    size_t       hl;
    const void  *h = kvp_xfer_msg_hdr(msg, &hl);
    kvp_status_t s;

    (void)arg;
    s = kvp_xfer_send(conn, h, hl, NULL, 0, echo_done, msg);
    if (s != KVP_INPROGRESS) {
        kvp_xfer_msg_release(msg);
    }
}

static int conn_index(const clients_t *c, kvp_xfer_conn_h conn)
{
    for (int i = 0; i < N_CONN; i++) {
        if (c->conn[i] == conn) {
            return i;
        }
    }
    return -1;
}

static void client_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    clients_t  *c = arg;
    int         i = conn_index(c, conn);
    size_t      hl;
    const char *h = kvp_xfer_msg_hdr(msg, &hl);

    CHECK(i >= 0 && hl == 1 && (uint8_t)h[0] == (uint8_t)i);
    if (!c->replied[i]++) {
        c->n_replied++;
    }
    kvp_xfer_msg_release(msg);
}

static void client_conn(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    clients_t *c = arg;
    int        i = conn_index(c, conn);

    if (i >= 0 && c->failed[i] == KVP_OK) {
        c->failed[i] = status;
        c->n_failed++;
    }
}

int main(void)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        srv, cli;
    clients_t         c;
    uint16_t          port;
    int               unreachable = 0;
    double            end;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    memset(&c, 0, sizeof(c));
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_XFER_PARAM_RECV_CB;
    p.recv_cb    = echo_recv;
    CHECK_OK(kvp_xfer_create(&p, &srv));
    CHECK_OK(kvp_xfer_listen(srv, "127.0.0.1", 0, &port));
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG;
    p.recv_cb    = client_recv;
    p.conn_cb    = client_conn;
    p.cb_arg     = &c;
    CHECK_OK(kvp_xfer_create(&p, &cli));

    /* the burst: every client connects and sends; the server is not progressed meanwhile */
    for (int i = 0; i < N_CONN; i++) {
        uint8_t      id = (uint8_t)i;
        kvp_status_t s;

        CHECK_OK(kvp_xfer_connect(cli, "127.0.0.1", port, &c.conn[i]));
        s = kvp_xfer_send(c.conn[i], &id, 1, NULL, 0, NULL, NULL);
        CHECK(s == KVP_OK || s == KVP_INPROGRESS);
    }
    end = kvp_time_s() + 0.5; /* time for the connects to reach the listener (not a check) */
    while (kvp_time_s() < end) {
        kvp_xfer_progress(cli);
        usleep(1000);
    }

    /* now the server takes them all in one progress; each client must get its reply */
    end = kvp_time_s() + 20; /* a bound for a hang, not a timing check */
    while (c.n_replied + c.n_failed < N_CONN && kvp_time_s() < end) {
        kvp_xfer_progress(srv);
        kvp_xfer_progress(cli);
    }
    for (int i = 0; i < N_CONN; i++) {
        unreachable += c.failed[i] == KVP_ERR_PEER_UNREACHABLE;
    }
    printf("%d connects at once: %d replied, %d failed (%d PEER_UNREACHABLE)\n", N_CONN,
           c.n_replied, c.n_failed, unreachable);
    EXPECT(c.n_replied == N_CONN && c.n_failed == 0,
           "%d of %d connections answered, %d failed (%d ERR_PEER_UNREACHABLE: rejected)",
           c.n_replied, N_CONN, c.n_failed, unreachable);

    for (int i = 0; i < N_CONN; i++) {
        kvp_xfer_conn_close(c.conn[i]);
    }
    kvp_xfer_destroy(cli);
    kvp_xfer_destroy(srv);
    return kvp_test_result("test_xfer_burst");
}
