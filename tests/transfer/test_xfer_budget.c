/* test_xfer_budget.c - the receive budget is backpressure, not refusal: a receiver (max_msg
 * 2 MiB, so 8 MiB of rendezvous data at once) that holds every message it gets. A sender's six
 * 2 MiB messages and a small eager one: the first four arrive, the other two wait (their sends
 * stay in flight, none fails ERR_BUSY as they did before) and the eager one waits behind them
 * (one connection's messages arrive in order); once the receiver releases, all the rest arrive,
 * in order and intact. A second sender whose message waits for the budget and then closes: that
 * message is dropped, never delivered. Destroying the receiver with messages still waiting frees
 * them. A receiver with conn_msgs_max 8: eager messages behind a waiting one count, the one past
 * the cap reaches recv_cb at once with ERR_BUSY (before: held with no limit), a rendezvous one
 * past it fails its send ERR_BUSY; the held ones then arrive in order. Both ends live in this
 * process (one thread progresses both). */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include "check.h"

#include <stdio.h>
#include <string.h>

#define MSG_BYTES (2u << 20)
#define N_BIG     6
#define N_HOLD    16
#define CONN_MAX  8 /* conn_msgs_max of conn_cap's receiver */

typedef struct {
    kvp_xfer_msg_h  held[N_HOLD];
    kvp_xfer_conn_h from[N_HOLD];
    int             n;
    int             dead; /* connections reported failed */
} rx_t;

typedef struct {
    kvp_status_t st[N_HOLD];
    int          done;
} tx_t;

static void rx_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    rx_t *r = arg;

    CHECK(r->n < N_HOLD);
    r->from[r->n] = conn;
    r->held[r->n++] = msg;
}

static void rx_conn(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    (void)conn;
    (void)status;
    ((rx_t *)arg)->dead++;
}

static void tx_done(void *arg, kvp_status_t status)
{
    kvp_status_t *st = arg;

    *st = status;
}

static void progress(kvp_xfer_h a, kvp_xfer_h b, kvp_xfer_h c)
{
    kvp_xfer_progress(a);
    kvp_xfer_progress(b);
    if (c != NULL) {
        kvp_xfer_progress(c);
    }
}

/* Progress until cond or 20 s (a bound for a hang, not a timing check). */
#define PROGRESS_UNTIL(cond, a, b, c)                                   \
    do {                                                                \
        double end_ = kvp_time_s() + 20;                                \
        while (!(cond) && kvp_time_s() < end_) {                        \
            progress(a, b, c);                                          \
        }                                                               \
    } while (0)

static void send_one(kvp_xfer_conn_h conn, uint8_t seq, const uint8_t *data, size_t len,
                     kvp_status_t *st)
{
    kvp_xfer_iov_t iov = {data, len};
    kvp_status_t   s;

    *st = KVP_INPROGRESS;
    s   = kvp_xfer_send(conn, &seq, 1, &iov, 1, tx_done, st);
    CHECK(s == KVP_INPROGRESS || s == KVP_OK);
    if (s == KVP_OK) {
        *st = KVP_OK;
    }
}

static uint8_t seq_of(kvp_xfer_msg_h m)
{
    size_t         hl;
    const uint8_t *h = kvp_xfer_msg_hdr(m, &hl);

    CHECK(hl == 1);
    return h[0];
}

/* The message carries len bytes of seq * 3 + 1. */
static int intact(kvp_xfer_msg_h m, size_t len)
{
    size_t         dl;
    const uint8_t *d = kvp_xfer_msg_data(m, &dl);

    if (kvp_xfer_msg_status(m) != KVP_OK || dl != len) {
        return 0;
    }
    for (size_t i = 0; i < dl; i += 4093) {
        if (d[i] != (uint8_t)(seq_of(m) * 3 + 1)) {
            return 0;
        }
    }
    return d[dl - 1] == (uint8_t)(seq_of(m) * 3 + 1);
}

static void release_all(rx_t *r)
{
    for (int i = 0; i < r->n; i++) {
        kvp_xfer_msg_release(r->held[i]);
    }
    r->n = 0;
}

/* A sender connected to rx, its connection wired up: until then UCX sends even large messages
 * eager, so one small message goes through first. */
/* The receiver: MSG_BYTES messages at most (a budget of 4x that), into r; conn_msgs_max held
 * messages a connection (0: no cap); listening on a free port (*port_p). */
static kvp_xfer_h receiver(rx_t *r, uint32_t conn_msgs_max, uint16_t *port_p)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        rx;

    memset(&p, 0, sizeof(p));
    p.field_mask    = KVP_XFER_PARAM_MAX_MSG | KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB |
                      KVP_XFER_PARAM_CB_ARG | (conn_msgs_max ? KVP_XFER_PARAM_CONN_MSGS_MAX : 0);
    p.max_msg_bytes = MSG_BYTES;
    p.recv_cb       = rx_recv;
    p.conn_cb       = rx_conn;
    p.cb_arg        = r;
    p.conn_msgs_max = conn_msgs_max;
    CHECK_OK(kvp_xfer_create(&p, &rx));
    CHECK_OK(kvp_xfer_listen(rx, "127.0.0.1", 0, port_p));
    return rx;
}

static kvp_xfer_h sender(kvp_xfer_h rx, rx_t *r, uint16_t port, kvp_xfer_conn_h *conn_p)
{
    kvp_xfer_h   x;
    kvp_status_t st;
    uint8_t      one = 0;

    CHECK_OK(kvp_xfer_create(NULL, &x));
    CHECK_OK(kvp_xfer_connect(x, "127.0.0.1", port, conn_p));
    send_one(*conn_p, 200, &one, 1, &st);
    PROGRESS_UNTIL(r->n == 1 && st != KVP_INPROGRESS, rx, x, NULL);
    CHECK(r->n == 1 && st == KVP_OK);
    release_all(r);
    return x;
}

/* conn_msgs_max: five 2 MiB messages (four fill the budget, one waits) and three eager ones behind
 * them make eight held; the next eager one is refused at once (ERR_BUSY, its header, no data),
 * the next rendezvous one's send fails ERR_BUSY; once released, the held ones arrive in order. */
static void conn_cap(uint8_t *const *data)
{
    kvp_xfer_h        rx, a;
    kvp_xfer_conn_h   ca;
    rx_t              r;
    tx_t              ta;
    uint16_t          port;
    size_t            dl = 1;
    kvp_xfer_msg_h    refused = NULL;
    int               in_order = 0;

    memset(&r, 0, sizeof(r));
    memset(&ta, 0, sizeof(ta));
    rx = receiver(&r, CONN_MAX, &port);
    a = sender(rx, &r, port, &ca);
    for (int i = 0; i < 5; i++) {
        send_one(ca, (uint8_t)i, data[i], MSG_BYTES, &ta.st[i]);
    }
    for (int i = 5; i < CONN_MAX + 1; i++) {
        send_one(ca, (uint8_t)i, data[0], 100, &ta.st[i]);
    }
    PROGRESS_UNTIL(r.n == 5 && ta.st[CONN_MAX] != KVP_INPROGRESS, rx, a, NULL);
    send_one(ca, CONN_MAX + 1, data[0], MSG_BYTES, &ta.st[CONN_MAX + 1]);
    PROGRESS_UNTIL(ta.st[CONN_MAX + 1] != KVP_INPROGRESS, rx, a, NULL);
    for (int k = 0; k < 2000; k++) { /* time for anything that would arrive early */
        progress(rx, a, NULL);
    }
    for (int i = 0; i < r.n; i++) { /* the refused one: at once, maybe before #3's data is in */
        if (seq_of(r.held[i]) == CONN_MAX) {
            refused = r.held[i];
        } else {
            in_order += seq_of(r.held[i]) == in_order;
        }
    }
    printf("conn_msgs_max %d: %d delivered while 8 are held; the 9th: %s (send %s), the 10th's "
           "send %s\n", CONN_MAX, r.n,
           refused != NULL ? kvp_status_name(kvp_xfer_msg_status(refused)) : "not delivered",
           kvp_status_name(ta.st[CONN_MAX]), kvp_status_name(ta.st[CONN_MAX + 1]));
    EXPECT(r.n == 5 && in_order == 4, "%d delivered (%d of #0-3 in order) while the connection "
           "holds %d (want #0-3 + the refused one)", r.n, in_order, CONN_MAX);
    EXPECT(refused != NULL && kvp_xfer_msg_status(refused) == KVP_ERR_BUSY &&
               kvp_xfer_msg_data(refused, &dl) == NULL && dl == 0 &&
               kvp_xfer_msg_sent_len(refused) == 100,
           "the message past the cap: %s",
           refused != NULL ? kvp_status_name(kvp_xfer_msg_status(refused)) : "not delivered");
    EXPECT(ta.st[CONN_MAX + 1] == KVP_ERR_BUSY, "a rendezvous send past the cap: %s",
           kvp_status_name(ta.st[CONN_MAX + 1]));
    release_all(&r); /* the waiting one is received, then the eager ones behind it */
    PROGRESS_UNTIL(r.n == 4, rx, a, NULL);
    EXPECT(r.n == 4, "after the release %d of 4 delivered", r.n);
    for (int i = 0; i < r.n; i++) {
        kvp_xfer_msg_data(r.held[i], &dl);
        EXPECT(seq_of(r.held[i]) == 4 + i && kvp_xfer_msg_status(r.held[i]) == KVP_OK &&
                   dl == (i == 0 ? MSG_BYTES : 100),
               "message %d is #%d, %s, %zu bytes", i, seq_of(r.held[i]),
               kvp_status_name(kvp_xfer_msg_status(r.held[i])), dl);
    }
    EXPECT(r.n == 0 || intact(r.held[0], MSG_BYTES), "the waiting message not intact");
    release_all(&r);
    kvp_xfer_conn_close(ca);
    kvp_xfer_destroy(a);
    kvp_xfer_destroy(rx);
}

int main(void)
{
    kvp_xfer_h        rx, a, b;
    kvp_xfer_conn_h   ca, cb;
    rx_t              r;
    tx_t              ta, tb;
    uint16_t          port;
    uint8_t          *data[N_BIG + 1];
    int               busy = 0, early = 0;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    memset(&r, 0, sizeof(r));
    memset(&ta, 0, sizeof(ta));
    memset(&tb, 0, sizeof(tb));
    rx = receiver(&r, 0, &port);
    for (int i = 0; i <= N_BIG; i++) {
        data[i] = kvp_malloc(MSG_BYTES, "data");
        CHECK(data[i] != NULL);
        memset(data[i], i * 3 + 1, MSG_BYTES);
    }

    /* six rendezvous messages and an eager one; the receiver holds what it gets */
    a = sender(rx, &r, port, &ca);
    for (int i = 0; i < N_BIG; i++) {
        send_one(ca, (uint8_t)i, data[i], MSG_BYTES, &ta.st[i]);
    }
    send_one(ca, N_BIG, data[N_BIG], 100, &ta.st[N_BIG]);
    PROGRESS_UNTIL(r.n >= 4 && ta.st[N_BIG] != KVP_INPROGRESS, rx, a, NULL);
    for (int k = 0; k < 2000; k++) { /* time for anything that would arrive early */
        progress(rx, a, NULL);
    }
    for (int i = 0; i < N_BIG; i++) {
        busy += ta.st[i] == KVP_ERR_BUSY;
    }
    for (int i = 0; i < r.n; i++) {
        early += seq_of(r.held[i]) != i;
    }
    printf("budget full: %d delivered, %d sends refused busy, %d out of order; eager send %s\n",
           r.n, busy, early, kvp_status_name(ta.st[N_BIG]));
    EXPECT(busy == 0, "%d messages refused ERR_BUSY instead of waiting", busy);
    EXPECT(r.n == 4 && early == 0, "%d delivered, %d out of order (the eager one must wait "
           "behind its connection's waiting messages)", r.n, early);
    EXPECT(ta.st[4] == KVP_INPROGRESS && ta.st[5] == KVP_INPROGRESS,
           "the waiting messages' sends: %s %s", kvp_status_name(ta.st[4]),
           kvp_status_name(ta.st[5]));

    /* released: the waiting ones are received, then the eager one, in order */
    release_all(&r);
    PROGRESS_UNTIL(r.n == 3, rx, a, NULL);
    EXPECT(r.n == 3, "after the release %d of 3 delivered", r.n);
    for (int i = 0; i < r.n; i++) {
        EXPECT(seq_of(r.held[i]) == 4 + i, "message %d is #%d", i, seq_of(r.held[i]));
        EXPECT(intact(r.held[i], seq_of(r.held[i]) == N_BIG ? 100 : MSG_BYTES),
               "message #%d not intact", seq_of(r.held[i]));
    }
    PROGRESS_UNTIL(ta.st[4] != KVP_INPROGRESS && ta.st[5] != KVP_INPROGRESS, rx, a, NULL);
    EXPECT(ta.st[4] == KVP_OK && ta.st[5] == KVP_OK, "sends %s %s", kvp_status_name(ta.st[4]),
           kvp_status_name(ta.st[5]));
    release_all(&r);

    /* the budget full again (4 held); b's message waits, then b goes: it is dropped */
    b = sender(rx, &r, port, &cb);
    for (int i = 0; i < 4; i++) {
        send_one(ca, (uint8_t)i, data[i], MSG_BYTES, &ta.st[i]);
    }
    PROGRESS_UNTIL(r.n == 4, rx, a, NULL);
    send_one(cb, 9, data[0], MSG_BYTES, &tb.st[0]);
    for (int k = 0; k < 2000; k++) {
        progress(rx, a, b);
    }
    EXPECT(r.n == 4 && tb.st[0] == KVP_INPROGRESS, "b's message: %d delivered, send %s", r.n,
           kvp_status_name(tb.st[0]));
    kvp_xfer_conn_close(cb);
    kvp_xfer_destroy(b);
    PROGRESS_UNTIL(r.dead == 1, rx, a, NULL);
    EXPECT(r.dead == 1, "b's connection not reported gone");
    release_all(&r);
    send_one(ca, 5, data[5], MSG_BYTES, &ta.st[5]);
    PROGRESS_UNTIL(r.n == 1, rx, a, NULL);
    EXPECT(r.n == 1 && seq_of(r.held[0]) == 5 && intact(r.held[0], MSG_BYTES),
           "after b left: %d delivered (want a's #5 only)", r.n);
    release_all(&r);

    conn_cap(data);

    /* messages still waiting when the receiver goes are freed with it */
    for (int i = 0; i < N_BIG; i++) {
        send_one(ca, (uint8_t)i, data[i], MSG_BYTES, &ta.st[i]);
    }
    PROGRESS_UNTIL(r.n == 4, rx, a, NULL);
    release_all(&r);
    kvp_xfer_destroy(rx);
    kvp_xfer_conn_close(ca);
    kvp_xfer_destroy(a);
    for (int i = 0; i <= N_BIG; i++) {
        kvp_free(data[i]);
    }
    return kvp_test_result("test_xfer_budget");
}
