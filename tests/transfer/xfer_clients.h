/* xfer_clients.h - test helpers for many client connections against one listener, both ends in
 * one process: an echo server (each request's header goes back as its reply) and a client
 * table whose connection i sends the one-byte header i and expects it back. Header-only. */
#ifndef KVP_TEST_XFER_CLIENTS_H
#define KVP_TEST_XFER_CLIENTS_H

#include "kvpack/xfer.h"
#include "check.h"

#include <string.h>

#define XT_CLIENTS_MAX 128

typedef struct {
    kvp_xfer_conn_h conn[XT_CLIENTS_MAX];
    int             replied[XT_CLIENTS_MAX]; /* replies connection i got */
    kvp_status_t    failed[XT_CLIENTS_MAX];  /* its connection error (KVP_OK: none) */
    int             n_replied, n_failed;     /* connections with a reply, with an error */
} xt_clients_t;

static inline void xt_echo_done(void *arg, kvp_status_t status)
{
    (void)status;
    kvp_xfer_msg_release(arg);
}

/* server recv_cb: the request's header goes back as the reply */
static inline void xt_echo_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    size_t       hl;
    const void  *h = kvp_xfer_msg_hdr(msg, &hl);
    kvp_status_t s;

    (void)arg;
    s = kvp_xfer_send(conn, h, hl, NULL, 0, xt_echo_done, msg);
    if (s != KVP_INPROGRESS) {
        kvp_xfer_msg_release(msg);
    }
}

static inline int xt_conn_index(const xt_clients_t *c, kvp_xfer_conn_h conn)
{
    for (int i = 0; i < XT_CLIENTS_MAX; i++) {
        if (c->conn[i] == conn) {
            return i;
        }
    }
    return -1;
}

static inline void xt_client_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    xt_clients_t *c = arg;
    int           i = xt_conn_index(c, conn);
    size_t        hl;
    const char   *h = kvp_xfer_msg_hdr(msg, &hl);

    CHECK(i >= 0 && hl == 1 && (uint8_t)h[0] == (uint8_t)i);
    if (!c->replied[i]++) {
        c->n_replied++;
    }
    kvp_xfer_msg_release(msg);
}

static inline void xt_client_conn(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    xt_clients_t *c = arg;
    int           i = xt_conn_index(c, conn);

    if (i >= 0 && c->failed[i] == KVP_OK) {
        c->failed[i] = status;
        c->n_failed++;
    }
}

/* an echo server (params: extra fields on top of its recv_cb, or NULL) listening on loopback */
static inline kvp_xfer_h xt_server(kvp_xfer_params_t *params, uint16_t *port_p)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        srv;

    if (params != NULL) {
        p = *params;
    } else {
        memset(&p, 0, sizeof(p));
    }
    p.field_mask |= KVP_XFER_PARAM_RECV_CB;
    p.recv_cb = xt_echo_recv;
    CHECK_OK(kvp_xfer_create(&p, &srv));
    CHECK_OK(kvp_xfer_listen(srv, "127.0.0.1", 0, port_p));
    return srv;
}

/* the client side of table c */
static inline kvp_xfer_h xt_client(xt_clients_t *c)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        cli;

    memset(c, 0, sizeof(*c));
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG;
    p.recv_cb    = xt_client_recv;
    p.conn_cb    = xt_client_conn;
    p.cb_arg     = c;
    CHECK_OK(kvp_xfer_create(&p, &cli));
    return cli;
}

/* connection i connects to port and sends its request */
static inline void xt_connect_send(kvp_xfer_h cli, uint16_t port, xt_clients_t *c, int i)
{
    uint8_t      id = (uint8_t)i;
    kvp_status_t s;

    CHECK(i >= 0 && i < XT_CLIENTS_MAX);
    CHECK_OK(kvp_xfer_connect(cli, "127.0.0.1", port, &c->conn[i]));
    s = kvp_xfer_send(c->conn[i], &id, 1, NULL, 0, NULL, NULL);
    CHECK(s == KVP_OK || s == KVP_INPROGRESS);
}

#endif
