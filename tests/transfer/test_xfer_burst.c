/* test_xfer_burst.c - a burst of connects to one listener: 100 connections (one client xfer) are
 * opened and each sends a request while the server does not progress, so every conn request
 * reaches the server in one ucp_worker_progress drain. Every one must be accepted and answered.
 * Before, the listener queued 64 and rejected the rest: those clients got
 * KVP_ERR_PEER_UNREACHABLE from a healthy server. Both ends live in this process. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "xfer_clients.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define N_CONN 100 /* more than the 64 the accept queue used to hold */

int main(void)
{
    kvp_xfer_h        srv, cli;
    xt_clients_t      c;
    uint16_t          port;
    int               unreachable = 0;
    double            end;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    srv = xt_server(NULL, &port);
    cli = xt_client(&c);

    /* the burst: every client connects and sends; the server is not progressed meanwhile */
    for (int i = 0; i < N_CONN; i++) {
        xt_connect_send(cli, port, &c, i);
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
