/* test_xfer_conncap.c - the listener's connection cap (KVP_XFER_PARAM_MAX_CONNS): with a cap of
 * 3, five clients connect and send a request; three are answered, the other two fail
 * KVP_ERR_PEER_UNREACHABLE (rejected at once, not left hanging), and kvp_xfer_conn_counts says
 * 3 open and 2 rejected. Once a client leaves, a new client gets in, also when the leave and the
 * connect reach the server in one progress (the leaving one counted until then). Without the cap every
 * connection was accepted, so a node could be run out of file descriptors by its clients.
 * Both ends live in this process. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "xfer_clients.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CAP    3
#define N_CONN 8 /* five at first, one after a client left, one as another leaves, one more */
#define FIRST  5

/* progress both until clients [lo, hi) each got a reply or failed (or a hang bound passes) */
static void settle(kvp_xfer_h srv, kvp_xfer_h cli, xt_clients_t *c, int lo, int hi)
{
    double end = kvp_time_s() + 20; /* a bound for a hang, not a timing check */

    for (;;) {
        int done = 0;

        for (int i = lo; i < hi; i++) {
            done += c->replied[i] > 0 || c->failed[i] != KVP_OK;
        }
        if (done == hi - lo || kvp_time_s() >= end) {
            return;
        }
        kvp_xfer_progress(srv);
        kvp_xfer_progress(cli);
    }
}

int main(void)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        srv, cli;
    xt_clients_t      c;
    uint16_t          port;
    int               replied = 0, unreachable = 0, gone = -1;
    unsigned          open;
    uint64_t          capped;
    double            end;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_XFER_PARAM_MAX_CONNS;
    p.max_conns  = CAP;
    srv          = xt_server(&p, &port);
    cli          = xt_client(&c);

    for (int i = 0; i < FIRST; i++) {
        xt_connect_send(cli, port, &c, i);
    }
    settle(srv, cli, &c, 0, FIRST);
    for (int i = 0; i < FIRST; i++) {
        replied += c.replied[i] > 0;
        unreachable += c.failed[i] == KVP_ERR_PEER_UNREACHABLE;
        if (c.replied[i] > 0 && gone < 0) {
            gone = i;
        }
    }
    kvp_xfer_conn_counts(srv, &open, &capped);
    printf("%d connects against a cap of %d: %d answered, %d PEER_UNREACHABLE; server: %u open, "
           "%llu rejected\n", FIRST, CAP, replied, unreachable, open, (unsigned long long)capped);
    EXPECT(replied == CAP && unreachable == FIRST - CAP,
           "%d answered and %d rejected, want %d and %d", replied, unreachable, CAP, FIRST - CAP);
    EXPECT(open == CAP && capped == (uint64_t)(FIRST - CAP),
           "server counts %u open, %llu rejected", open, (unsigned long long)capped);

    /* a client leaves: once the server saw it go, the next one gets in */
    CHECK(gone >= 0);
    kvp_xfer_conn_close(c.conn[gone]);
    c.conn[gone] = NULL;
    end = kvp_time_s() + 20; /* a bound for a hang, not a timing check */
    do {
        kvp_xfer_progress(srv);
        kvp_xfer_progress(cli);
        kvp_xfer_conn_counts(srv, &open, NULL);
    } while (open >= CAP && kvp_time_s() < end);
    EXPECT(open == CAP - 1, "server still counts %u open after a client left", open);
    xt_connect_send(cli, port, &c, FIRST);
    settle(srv, cli, &c, FIRST, FIRST + 1);
    EXPECT(c.replied[FIRST] > 0, "a client under the cap again was not answered (%s)",
           kvp_status_name(c.failed[FIRST]));

    /* the cap full again: a client leaves and another connects before the server progresses,
     * so it sees the leave and the connect in one go; the newcomer takes the freed place */
    gone = -1;
    for (int i = 0; i <= FIRST && gone < 0; i++) {
        gone = c.conn[i] != NULL && c.replied[i] > 0 ? i : -1;
    }
    CHECK(gone >= 0);
    kvp_xfer_conn_close(c.conn[gone]);
    c.conn[gone] = NULL;
    xt_connect_send(cli, port, &c, FIRST + 1);
    end = kvp_time_s() + 0.5; /* time for both to reach the listener (not a check) */
    while (kvp_time_s() < end) {
        kvp_xfer_progress(cli);
        usleep(1000);
    }
    settle(srv, cli, &c, FIRST + 1, FIRST + 2);
    EXPECT(c.replied[FIRST + 1] > 0, "a client connecting as another left was refused (%s)",
           kvp_status_name(c.failed[FIRST + 1]));

    /* full again: the ones that left are counted out for good, so a newcomer is still refused */
    xt_connect_send(cli, port, &c, FIRST + 2);
    settle(srv, cli, &c, FIRST + 2, FIRST + 3);
    kvp_xfer_conn_counts(srv, &open, &capped);
    EXPECT(c.failed[FIRST + 2] == KVP_ERR_PEER_UNREACHABLE && open == CAP,
           "a connect past the full cap at the end: %s, %u open",
           kvp_status_name(c.failed[FIRST + 2]), open);

    for (int i = 0; i < N_CONN; i++) {
        kvp_xfer_conn_close(c.conn[i]);
    }
    kvp_xfer_destroy(cli);
    kvp_xfer_destroy(srv);
    return kvp_test_result("test_xfer_conncap");
}
