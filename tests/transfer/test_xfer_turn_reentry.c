/* test_xfer_turn_reentry.c - a recv_cb that progresses its own transport in the middle of a
 * connection's turn. While the server's recv_cb handles a client's first message it sends the
 * client's second one and progresses both ends, so the second message arrives inside the turn
 * and is handed over in that same turn. The client then closes and the server's connection is
 * freed. Before, the connection stayed in the turn order with no ready message after that turn
 * took its last one, and the next progress used it after it was freed (a double free). After it,
 * a new connection must still be answered. Both ends live in this process. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "xfer_clients.h"

#include <stdio.h>
#include <string.h>

static struct {
    kvp_xfer_h      srv, cli;
    kvp_xfer_conn_h first;       /* the client connection that sends two messages */
    int             got[3];      /* server: messages with header byte 1, 2 */
    int             outer_done;  /* the outer kvp_xfer_progress that handed message 1 returned */
    int             second_inner; /* message 2 was handed over inside message 1's turn */
    int             srv_failed;  /* server connections reported gone */
} T;

static void send_byte(kvp_xfer_conn_h conn, uint8_t b)
{
    kvp_status_t s = kvp_xfer_send(conn, &b, 1, NULL, 0, NULL, NULL);

    CHECK(s == KVP_OK || s == KVP_INPROGRESS);
}

static void srv_conn(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    (void)arg;
    (void)conn;
    T.srv_failed += status != KVP_OK;
}

static void srv_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    size_t         hl;
    const uint8_t *h = kvp_xfer_msg_hdr(msg, &hl);
    double         end;

    (void)arg;
    (void)conn;
    if (hl != 1 || h[0] < 1 || h[0] > 2) { /* another client's request: echo it */
        xt_echo_recv(NULL, conn, msg);
        return;
    }
    T.got[h[0]]++;
    if (h[0] == 2) {
        T.second_inner = !T.outer_done;
        kvp_xfer_msg_release(msg);
        return;
    }
    kvp_xfer_msg_release(msg);
    /* message 1: send message 2 and progress both ends from inside this recv_cb, so message 2
     * becomes ready while this connection's turn is under way */
    send_byte(T.first, 2);
    end = kvp_time_s() + 0.3; /* a window for loopback delivery, not a timing check */
    while (kvp_time_s() < end) {
        kvp_xfer_progress(T.cli);
        kvp_xfer_progress(T.srv);
    }
}

int main(void)
{
    kvp_xfer_params_t sp;
    xt_clients_t      c;
    uint16_t          port;
    double            end;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    memset(&sp, 0, sizeof(sp));
    sp.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB;
    sp.recv_cb    = srv_recv;
    sp.conn_cb    = srv_conn;
    CHECK_OK(kvp_xfer_create(&sp, &T.srv));
    CHECK_OK(kvp_xfer_listen(T.srv, "127.0.0.1", 0, &port));
    T.cli = xt_client(&c);

    CHECK_OK(kvp_xfer_connect(T.cli, "127.0.0.1", port, &T.first));
    send_byte(T.first, 1);
    end = kvp_time_s() + 20; /* a bound for a hang, not a timing check */
    while (T.got[1] == 0 && kvp_time_s() < end) {
        kvp_xfer_progress(T.cli);
        kvp_xfer_progress(T.srv); /* message 1's turn runs (and re-enters) in here */
    }
    T.outer_done = 1;
    while (T.got[2] == 0 && kvp_time_s() < end) {
        kvp_xfer_progress(T.cli);
        kvp_xfer_progress(T.srv);
    }
    EXPECT(T.got[1] == 1 && T.got[2] == 1, "server got message 1 %d times, message 2 %d times",
           T.got[1], T.got[2]);
    EXPECT(T.second_inner, "message 2 was not handed over inside message 1's turn: the case "
           "under test was not reached");

    /* the client leaves: the server's connection is reported gone and freed */
    kvp_xfer_conn_close(T.first);
    while (T.srv_failed == 0 && kvp_time_s() < end) {
        kvp_xfer_progress(T.cli);
        kvp_xfer_progress(T.srv);
    }
    EXPECT(T.srv_failed == 1, "the server saw %d connections gone, not 1", T.srv_failed);
    for (int i = 0; i < 100; i++) { /* turns after the free: a stale entry would be used here */
        kvp_xfer_progress(T.srv);
    }

    /* a new connection is still answered */
    xt_connect_send(T.cli, port, &c, 7);
    while (c.n_replied + c.n_failed == 0 && kvp_time_s() < end) {
        kvp_xfer_progress(T.cli);
        kvp_xfer_progress(T.srv);
    }
    EXPECT(c.n_replied == 1 && c.n_failed == 0, "the new connection: %d replied, %d failed",
           c.n_replied, c.n_failed);
    printf("re-entrant turn: message 2 inside message 1's turn %d, server saw %d gone, new "
           "connection replied %d\n", T.second_inner, T.srv_failed, c.n_replied);

    kvp_xfer_conn_close(c.conn[7]);
    kvp_xfer_destroy(T.cli);
    kvp_xfer_destroy(T.srv);
    return kvp_test_result("test_xfer_turn_reentry");
}
