/* test_xfer_cold.c - messages sent right after connect, before the connection's wireup has
 * completed (UCX 1.13 then sends even a large message eager). A receiver with max_msg 64 KiB
 * that answers each message with its status, as kvpackd answers a request's req_id: a 128 KiB
 * message (eager) and a 3 MB one, each first on a fresh connection, are refused with
 * KVP_ERR_TOO_LARGE within a round trip (the reply, or the send's own status), and the
 * receiver still serves that connection. Before, the eager one was dropped in silence: its send
 * completed OK and its sender waited out its whole deadline. A receiver with max_msg 4 MB
 * (a 16 MB receive budget) that holds what it gets, and ten 3 MB messages sent right after
 * connect: it never holds more than the budget in receive buffers (4 MiB each: three; the rest
 * wait for releases), and all ten then arrive intact, in order. Before, all ten came eager and
 * were held at once (30 MB), and later five, counted by their length (20 MiB of buffers). The
 * same ten from a sender that sends all eager (UCX_RNDV_THRESH=inf): eager messages over 1 MiB
 * hold at most the budget's worth of data, five are held and the rest refused ERR_BUSY (all ten
 * were held before). Both ends live in this process. */
#include "kvpack/xfer.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_MAX (64u << 10)
#define FLOOD_MAX 4000000u /* max_msg of the holding receiver: a 16 MB budget */
#define FLOOD_N   10
#define FLOOD_LEN 3000000u
#define FLOOD_BUF (4u << 20) /* the receive buffer of one: the next power of two */
#define FLOOD_FIT (4 * FLOOD_MAX / FLOOD_BUF) /* held at once within the budget: 3 */

/* ---- the receiver: answers, or holds ---- */

typedef struct {
    int            got;   /* messages received */
    kvp_status_t   last;  /* the status of the last one */
    size_t         sent;  /* its kvp_xfer_msg_sent_len */
    int            hold;  /* keep messages (in held) instead of answering */
    kvp_xfer_msg_h held[FLOOD_N];
    int            n_held;
    size_t         held_bytes, max_held; /* data bytes held now, at most so far */
    int            in_order; /* held messages that arrived in seq order, intact */
} rx_t;

typedef struct {
    uint8_t      seq;
    kvp_status_t st;
} answer_t;

static void answer_done(void *arg, kvp_status_t status)
{
    (void)status;
    kvp_free(arg);
}

/* Answer every message, refused ones too: its 1-byte header (a seq) and its status. */
static void rx_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    rx_t          *r = arg;
    size_t         hl;
    const uint8_t *h = kvp_xfer_msg_hdr(msg, &hl);
    answer_t      *a;
    kvp_status_t   s;

    CHECK(hl == 1);
    if (r->hold) {
        size_t         dl;
        const uint8_t *d = kvp_xfer_msg_data(msg, &dl);

        CHECK(r->n_held < FLOOD_N);
        r->in_order += h[0] == r->got && kvp_xfer_msg_status(msg) == KVP_OK &&
                       dl == FLOOD_LEN && d[0] == h[0] && d[dl - 1] == h[0];
        r->got++;
        r->held[r->n_held++] = msg;
        r->held_bytes += dl;
        if (r->held_bytes > r->max_held) {
            r->max_held = r->held_bytes;
        }
        return;
    }
    a = kvp_malloc(sizeof(*a), "answer");
    CHECK(a != NULL);
    a->seq  = h[0];
    a->st   = kvp_xfer_msg_status(msg);
    r->got++;
    r->last = a->st;
    r->sent = kvp_xfer_msg_sent_len(msg);
    kvp_xfer_msg_release(msg);
    s = kvp_xfer_send(conn, a, sizeof(*a), NULL, 0, answer_done, a);
    if (s != KVP_INPROGRESS) {
        kvp_free(a);
    }
}

/* ---- the sender ---- */

typedef struct {
    answer_t     ans;
    int          answered;
    kvp_status_t sent; /* KVP_INPROGRESS until the send completes */
} tx_t;

static void tx_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    tx_t       *t = arg;
    size_t      hl;
    const void *h = kvp_xfer_msg_hdr(msg, &hl);

    (void)conn;
    CHECK(hl == sizeof(t->ans));
    memcpy(&t->ans, h, sizeof(t->ans));
    t->answered = 1;
    kvp_xfer_msg_release(msg);
}

static void tx_sent(void *arg, kvp_status_t status)
{
    ((tx_t *)arg)->sent = status;
}

static kvp_xfer_h receiver(rx_t *r, size_t max_msg, kvp_xfer_recv_cb_t cb, uint16_t *port_p)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        x;

    memset(&p, 0, sizeof(p));
    p.field_mask    = KVP_XFER_PARAM_MAX_MSG | KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CB_ARG;
    p.max_msg_bytes = max_msg;
    p.recv_cb       = cb;
    p.cb_arg        = r;
    CHECK_OK(kvp_xfer_create(&p, &x));
    CHECK_OK(kvp_xfer_listen(x, "127.0.0.1", 0, port_p));
    return x;
}

/* Send seq with len bytes of data on conn and progress both until it is answered, its send
 * failed, or 10 s passed (a bound for the old silent drop, not a timing check). */
static void call(kvp_xfer_h rx, kvp_xfer_h tx, kvp_xfer_conn_h conn, tx_t *t, uint8_t seq,
                 const uint8_t *data, size_t len)
{
    kvp_xfer_iov_t iov = {data, len};
    kvp_status_t   s;
    double         end = kvp_time_s() + 10;

    memset(t, 0, sizeof(*t));
    t->sent = KVP_INPROGRESS;
    s = kvp_xfer_send(conn, &seq, 1, &iov, len ? 1 : 0, tx_sent, t);
    if (s != KVP_INPROGRESS) {
        t->sent = s;
    }
    while (!t->answered && (t->sent == KVP_INPROGRESS || t->sent == KVP_OK) &&
           kvp_time_s() < end) {
        kvp_xfer_progress(rx);
        kvp_xfer_progress(tx);
    }
}

/* A message over the receiver's max_msg, first on a fresh connection: refused TOO_LARGE (by
 * answer or by its send), then a small one on the same connection is served. */
static void too_large_cold(const uint8_t *data, size_t len)
{
    kvp_xfer_params_t p;
    kvp_xfer_h        rx, tx;
    kvp_xfer_conn_h   conn;
    rx_t              r;
    tx_t              t;
    uint16_t          port;
    kvp_status_t      got;

    memset(&r, 0, sizeof(r));
    rx = receiver(&r, SMALL_MAX, rx_recv, &port);
    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CB_ARG;
    p.recv_cb    = tx_recv;
    p.cb_arg     = &t;
    CHECK_OK(kvp_xfer_create(&p, &tx));
    CHECK_OK(kvp_xfer_connect(tx, "127.0.0.1", port, &conn));

    call(rx, tx, conn, &t, 1, data, len);
    got = t.answered ? t.ans.st : t.sent;
    printf("%zu bytes against max_msg %u on a cold connection: %s %s\n", len, SMALL_MAX,
           t.answered ? "answered" : "send", kvp_status_name(got));
    EXPECT(got == KVP_ERR_TOO_LARGE, "%zu bytes over max_msg: %s %s (want ERR_TOO_LARGE)", len,
           t.answered ? "answered" : t.sent == KVP_OK ? "sent, never answered, send"
                                                      : "send",
           kvp_status_name(got));
    EXPECT(!t.answered || (t.ans.seq == 1 && r.sent == len),
           "the refusal answers seq %u (want 1), sent_len %zu (want %zu)", t.ans.seq, r.sent, len);

    call(rx, tx, conn, &t, 2, data, 100); /* the connection still serves */
    EXPECT(t.answered && t.ans.seq == 2 && t.ans.st == KVP_OK,
           "a small message after the refusal: %s", t.answered ? kvp_status_name(t.ans.st)
                                                               : "not answered");
    kvp_xfer_conn_close(conn);
    kvp_xfer_destroy(tx);
    kvp_xfer_destroy(rx);
}

static void release_held(rx_t *r)
{
    for (int i = 0; i < r->n_held; i++) {
        kvp_xfer_msg_release(r->held[i]);
    }
    r->n_held     = 0;
    r->held_bytes = 0;
}

static void sent_count(void *arg, kvp_status_t status)
{
    int *n = arg;

    n[status == KVP_OK ? 0 : 1]++;
}

/* A sender *tx_p connected to port that sends the FLOOD_N messages of data at once, counting their
 * sends' outcomes in sent (OK, failed); returns the connection. */
static kvp_xfer_conn_h flood_send(kvp_xfer_h *tx_p, uint16_t port, uint8_t *const *data,
                                  int *sent)
{
    kvp_xfer_conn_h conn;

    CHECK_OK(kvp_xfer_create(NULL, tx_p));
    CHECK_OK(kvp_xfer_connect(*tx_p, "127.0.0.1", port, &conn));
    for (int i = 0; i < FLOOD_N; i++) {
        uint8_t        seq = (uint8_t)i;
        kvp_xfer_iov_t iov = {data[i], FLOOD_LEN};

        CHECK_ST(kvp_xfer_send(conn, &seq, 1, &iov, 1, sent_count, sent), KVP_INPROGRESS);
    }
    return conn;
}

/* Ten 3 MB messages right after connect, against a 16 MB budget the receiver fills by holding
 * them: their buffers never take more than that, and once it releases, all ten arrive in order. */
static void flood_cold(uint8_t *const *data)
{
    kvp_xfer_h      rx, tx;
    kvp_xfer_conn_h conn;
    rx_t            r;
    uint16_t        port;
    int             sent[2] = {0, 0}; /* OK, failed */
    double          end;

    memset(&r, 0, sizeof(r));
    r.hold = 1;
    rx   = receiver(&r, FLOOD_MAX, rx_recv, &port);
    conn = flood_send(&tx, port, data, sent);
    end  = kvp_time_s() + 20; /* bounds for a hang, not timing checks */
    while (r.got < (int)FLOOD_FIT && sent[1] == 0 && kvp_time_s() < end) {
        kvp_xfer_progress(rx);
        kvp_xfer_progress(tx);
    }
    for (int k = 0; k < 2000; k++) { /* time for anything that would arrive past the budget */
        kvp_xfer_progress(rx);
        kvp_xfer_progress(tx);
    }
    printf("%d x %u bytes on a cold connection, budget %u: %d held (%zu bytes)\n", FLOOD_N,
           FLOOD_LEN, 4 * FLOOD_MAX, r.got, r.held_bytes);
    EXPECT(r.max_held / FLOOD_LEN * FLOOD_BUF <= 4 * FLOOD_MAX && r.got == (int)FLOOD_FIT,
           "%d messages held at once, %zu bytes in %u-byte buffers, against the %u byte budget "
           "(want %u)", r.got, r.max_held, FLOOD_BUF, 4 * FLOOD_MAX, FLOOD_FIT);
    end = kvp_time_s() + 20;
    while ((r.got < FLOOD_N || sent[0] + sent[1] < FLOOD_N) && kvp_time_s() < end) {
        release_held(&r);
        kvp_xfer_progress(rx);
        kvp_xfer_progress(tx);
    }
    release_held(&r);
    EXPECT(r.got == FLOOD_N && r.in_order == FLOOD_N && sent[0] == FLOOD_N,
           "after releases: %d of %d arrived, %d in order and intact, %d sends OK, %d failed",
           r.got, FLOOD_N, r.in_order, sent[0], sent[1]);
    EXPECT(r.max_held / FLOOD_LEN * FLOOD_BUF <= 4 * FLOOD_MAX,
           "held %zu bytes at once in %u-byte buffers, over the %u budget", r.max_held, FLOOD_BUF,
           4 * FLOOD_MAX);
    kvp_xfer_conn_close(conn);
    kvp_xfer_destroy(tx);
    kvp_xfer_destroy(rx);
}

/* eager_flood's receiver: holds what arrives whole, counts (and releases) what is refused */
static void rx_hold_or_count(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    rx_t  *r = arg;
    size_t dl;

    (void)conn;
    (void)kvp_xfer_msg_data(msg, &dl);
    if (kvp_xfer_msg_status(msg) != KVP_OK) {
        r->last = kvp_xfer_msg_status(msg);
        r->sent++; /* here: messages refused */
        kvp_xfer_msg_release(msg);
        return;
    }
    CHECK(r->n_held < FLOOD_N);
    r->got++;
    r->held[r->n_held++] = msg;
    r->held_bytes += dl;
    r->max_held = r->held_bytes > r->max_held ? r->held_bytes : r->max_held;
}

/* The same ten 3 MB messages from a sender that sends everything eager (UCX_RNDV_THRESH=inf, as
 * a client of another build could): eager messages over 1 MiB hold at most 16 MB (the budget) at
 * once, so five are held and the rest refused ERR_BUSY. Before, all ten were held (30 MB: eager
 * data was counted nowhere, so one connection could hold 256 x max_msg). */
static void eager_flood(uint8_t *const *data)
{
    kvp_xfer_h        rx, tx;
    kvp_xfer_conn_h   conn;
    rx_t              r;
    uint16_t          port;
    int               sent[2] = {0, 0};
    double            end;

    CHECK(setenv("UCX_RNDV_THRESH", "inf", 1) == 0); /* read as each context is made */
    memset(&r, 0, sizeof(r));
    rx   = receiver(&r, FLOOD_MAX, rx_hold_or_count, &port);
    conn = flood_send(&tx, port, data, sent);
    end  = kvp_time_s() + 30; /* a bound for a hang, not a timing check */
    while (r.got + (int)r.sent < FLOOD_N && kvp_time_s() < end) {
        kvp_xfer_progress(rx);
        kvp_xfer_progress(tx);
    }
    printf("%d x %u bytes sent eager, budget %u: %d held (%zu bytes at most), %zu refused %s\n",
           FLOOD_N, FLOOD_LEN, 4 * FLOOD_MAX, r.got, r.max_held, r.sent,
           r.sent ? kvp_status_name(r.last) : "-");
    EXPECT(r.got + (int)r.sent == FLOOD_N, "%d held + %zu refused of %d", r.got, r.sent, FLOOD_N);
    EXPECT(r.max_held <= 4 * FLOOD_MAX && r.sent > 0 && r.last == KVP_ERR_BUSY,
           "eager data held at once: %zu bytes against the %u budget, %zu refused (want some, "
           "ERR_BUSY)", r.max_held, 4 * FLOOD_MAX, r.sent);
    release_held(&r);
    kvp_xfer_conn_close(conn);
    kvp_xfer_destroy(tx);
    kvp_xfer_destroy(rx);
    CHECK(unsetenv("UCX_RNDV_THRESH") == 0);
}

int main(void)
{
    uint8_t *data[FLOOD_N];

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    for (int i = 0; i < FLOOD_N; i++) {
        data[i] = kvp_malloc(FLOOD_LEN, "data");
        CHECK(data[i] != NULL);
        memset(data[i], i, FLOOD_LEN);
    }
    too_large_cold(data[0], 2 * SMALL_MAX); /* eager */
    too_large_cold(data[0], FLOOD_LEN);     /* eager before wireup, else rendezvous */
    flood_cold(data);
    eager_flood(data);
    for (int i = 0; i < FLOOD_N; i++) {
        kvp_free(data[i]);
    }
    return kvp_test_result("test_xfer_cold");
}
