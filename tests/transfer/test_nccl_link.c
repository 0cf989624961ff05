/* test_nccl_link.c - the NCCL link's set-up (transfer/xfer_nccl.c) over real UCX on loopback, up
 * to where NCCL needs a GPU; peers are real links or fakes made of a raw kvp_xfer_h and wire.c:
 * a prefill's hello of another link version or NCCL major version is refused by the decode side
 * (UNSUPPORTED on both, the reason sent), garbage is KVP_ERR_PROTOCOL, a peer killed before its
 * hello an error by the deadline; the prefill's hello carries its unique
 * id intact, a decode side gone after it is PEER_GONE, one answering in another link version is
 * refused, nobody listening is an error; without a GPU a real pair ends KVP_ERR_UNSUPPORTED on
 * both sides with the same unique id, in seconds, no hang. Built without NCCL: every call is
 * KVP_ERR_UNSUPPORTED. Batches are tested by transfer.nccl_emu (stand-in) and transfer.nccl_gpu. */
#include "kvpack/xfer_nccl.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOST "127.0.0.1"

/* ---- a link side on a thread ---- */

typedef struct {
    kvp_nccl_link_h link;
    int             connect; /* 1: prefill (connect to port), 0: decode (accept) */
    uint16_t        port;
    kvp_status_t    st;
    double          secs;
    pthread_t       th;
} side_t;

static void *side_main(void *arg)
{
    side_t *s  = arg;
    double  t0 = kvp_time_s();

    s->st   = s->connect ? kvp_nccl_link_connect(s->link, HOST, s->port)
                         : kvp_nccl_link_accept(s->link);
    s->secs = kvp_time_s() - t0;
    return NULL;
}

/* A link with a deadline of ms; decode sides listen on a fresh port. */
static void side_start_ms(side_t *s, int connect, uint16_t port, uint32_t ms)
{
    kvp_nccl_params_t p = {.field_mask = KVP_NCCL_PARAM_TIMEOUT_MS, .timeout_ms = ms};

    memset(s, 0, sizeof(*s));
    s->connect = connect;
    s->port    = port;
    CHECK_OK(kvp_nccl_link_create(&p, &s->link));
    if (!connect) {
        CHECK_OK(kvp_nccl_link_listen(s->link, HOST, 0, &s->port));
    }
    CHECK(pthread_create(&s->th, NULL, side_main, s) == 0);
}

static void side_start(side_t *s, int connect, uint16_t port)
{
    side_start_ms(s, connect, port, 10000);
}

static void side_join(side_t *s)
{
    CHECK(pthread_join(s->th, NULL) == 0);
}

/* ---- a fake peer: a raw transport speaking wire.c's link messages ---- */

typedef struct {
    kvp_xfer_h      x;
    kvp_xfer_conn_h conn; /* connected to, or the one the last message came by */
    kvp_xfer_msg_h  msg;
    kvp_status_t    conn_st;
} fake_t;

static void fake_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    fake_t *f = arg;

    kvp_xfer_msg_release(f->msg);
    f->msg  = msg;
    f->conn = conn;
}

static void fake_connerr(void *arg, kvp_xfer_conn_h conn, kvp_status_t status)
{
    (void)conn;
    ((fake_t *)arg)->conn_st = status;
}

static void fake_make(fake_t *f, uint16_t *listen_port)
{
    kvp_xfer_params_t p = {0};

    memset(f, 0, sizeof(*f));
    p.field_mask = KVP_XFER_PARAM_RECV_CB | KVP_XFER_PARAM_CONN_CB | KVP_XFER_PARAM_CB_ARG;
    p.recv_cb    = fake_recv;
    p.conn_cb    = fake_connerr;
    p.cb_arg     = f;
    CHECK_OK(kvp_xfer_create(&p, &f->x));
    if (listen_port != NULL) {
        CHECK_OK(kvp_xfer_listen(f->x, HOST, 0, listen_port));
    }
}

static void fake_destroy(fake_t *f)
{
    kvp_xfer_msg_release(f->msg);
    kvp_xfer_destroy(f->x);
}

/* Wait up to s seconds for a message; unpack it into m (the caller clears it). */
static kvp_status_t fake_wait(fake_t *f, double s, kvp_wire_link_t *m)
{
    double       end = kvp_time_s() + s;
    size_t       hl, dl;
    const void  *h;
    kvp_status_t st;

    while (f->msg == NULL && kvp_time_s() < end) {
        kvp_xfer_wait(f->x, 10);
    }
    if (f->msg == NULL) {
        return KVP_ERR_TIMEOUT;
    }
    h = kvp_xfer_msg_hdr(f->msg, &hl);
    (void)kvp_xfer_msg_data(f->msg, &dl);
    st = kvp_wire_link_unpack(h, hl, dl, m);
    return st;
}

static void fake_send_raw(fake_t *f, const void *b, size_t n)
{
    kvp_status_t st = kvp_xfer_send(f->conn, b, n, NULL, 0, NULL, NULL);

    CHECK(st == KVP_OK || st == KVP_INPROGRESS);
    for (int i = 0; i < 20; i++) {
        kvp_xfer_wait(f->x, 5);
    }
}

static void fake_say(fake_t *f, const kvp_wire_link_t *m)
{
    uint8_t *b;
    size_t   n;

    CHECK_OK(kvp_wire_link_pack(m, &b, &n));
    fake_send_raw(f, b, n);
    kvp_free(b);
}

static kvp_wire_link_t hello_of(uint32_t version, uint32_t nccl)
{
    kvp_wire_link_t h;

    memset(&h, 0, sizeof(h));
    h.kind         = KVP_WIRE_LINK_HELLO;
    h.version      = version;
    h.nccl_version = nccl;
    h.device.index = 0;
    memset(h.unique_id, 0x5A, sizeof(h.unique_id));
    return h;
}

/* ---- decode side against fake prefills ---- */

/* A fake prefill sends raw bytes (if any: junk, which accept drops), then hello h (if any); the
 * decode side's accept must end want, and the fake must get an accept naming `says` (NULL:
 * expect no answer). */
static void decode_against(const kvp_wire_link_t *h, const void *raw, size_t raw_len,
                           kvp_status_t want, const char *says)
{
    side_t          d;
    fake_t          f;
    kvp_wire_link_t a;

    side_start(&d, 0, 0);
    fake_make(&f, NULL);
    CHECK_OK(kvp_xfer_connect(f.x, HOST, d.port, &f.conn));
    if (raw != NULL) {
        fake_send_raw(&f, raw, raw_len);
    }
    if (h != NULL) {
        fake_say(&f, h);
    }
    if (says != NULL) {
        CHECK_OK(fake_wait(&f, 10, &a));
        EXPECT(a.kind == KVP_WIRE_LINK_ACCEPT && a.status == KVP_ERR_UNSUPPORTED,
               "answer %s %s", kvp_wire_link_kind_name(a.kind), kvp_status_name(a.status));
        EXPECT(strstr(a.message, says) != NULL, "refusal \"%s\" does not say \"%s\"", a.message,
               says);
        kvp_wire_link_clear(&a);
    }
    side_join(&d);
    EXPECT(d.st == want, "accept %s, want %s", kvp_status_name(d.st), kvp_status_name(want));
    EXPECT(d.secs < 9, "accept took %.1f s (its deadline: 10 s)", d.secs);
    EXPECT(kvp_nccl_link_status(d.link) == want, "link %s", kvp_status_name(kvp_nccl_link_status(d.link)));
    kvp_nccl_link_destroy(d.link);
    fake_destroy(&f);
}

static void decode_refusals(void)
{
    kvp_wire_link_t h = hello_of(2, 22809);
    static const char garbage[] = "\xff\xff\xff not a link message";

    decode_against(&h, NULL, 0, KVP_ERR_UNSUPPORTED, "link version 2 refused");
    h = hello_of(0, 30000); /* NCCL 3.0.0 */
    decode_against(&h, NULL, 0, KVP_ERR_UNSUPPORTED, "major versions differ");
    h = hello_of(2, 22809); /* junk first: dropped, the accept waits on and takes the hello */
    decode_against(&h, garbage, sizeof(garbage), KVP_ERR_UNSUPPORTED, "link version 2 refused");
    {                       /* a stray CLOSE first: the same (it used to end the accept) */
        kvp_wire_link_t c;
        uint8_t        *cb;
        size_t          cl;

        memset(&c, 0, sizeof(c));
        c.kind   = KVP_WIRE_LINK_CLOSE;
        c.status = KVP_ERR_PEER_GONE;
        CHECK_OK(kvp_wire_link_pack(&c, &cb, &cl));
        decode_against(&h, cb, cl, KVP_ERR_UNSUPPORTED, "link version 2 refused");
        kvp_free(cb);
        c.version = 2; /* a CLOSE of another link version: no hello either, dropped the same, */
        CHECK_OK(kvp_wire_link_pack(&c, &cb, &cl)); /* and the hello of ours is judged */
        h = hello_of(0, 22809);
        decode_against(&h, cb, cl, KVP_ERR_UNSUPPORTED, "decode side has no usable gpu");
        kvp_free(cb);
    }
    h = hello_of(0, 22809);
    h.device.index = -1;
    strcpy(h.device.why, "no driver here");
    decode_against(&h, NULL, 0, KVP_ERR_UNSUPPORTED, "prefill has no usable gpu (no driver here)");
}

/* A prefill process connects and is killed before its hello: accept ends at its deadline
 * (3 s here) at the latest, KVP_ERR_TIMEOUT (a connection failing before its hello is ignored:
 * accept waits on for another prefill; UCX 1.13 may not even report it): an error, never a
 * hang. */
static void decode_peer_killed(void)
{
    side_t d;
    pid_t  parent = getpid(), pid;
    int    status;

    side_start_ms(&d, 0, 0, 3000);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fake_t f;

        kvp_test_child_of(parent);
        fake_make(&f, NULL);
        if (kvp_xfer_connect(f.x, HOST, d.port, &f.conn) != KVP_OK) {
            _exit(2);
        }
        for (int i = 0; i < 50; i++) {
            kvp_xfer_wait(f.x, 10); /* the connection is up at the listener */
        }
        raise(SIGKILL);
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    side_join(&d);
    EXPECT(d.st == KVP_ERR_PEER_GONE || d.st == KVP_ERR_TIMEOUT, "accept %s",
           kvp_status_name(d.st));
    EXPECT(d.secs < 9, "accept took %.1f s (its deadline: 3 s, the peer's 10 s)", d.secs);
    kvp_nccl_link_destroy(d.link);
}

/* ---- prefill side against fake decode sides ---- */

static void prefill_against(int answer_version, kvp_status_t want)
{
    side_t          p;
    fake_t          f;
    uint16_t        port;
    kvp_wire_link_t h, a;
    uint8_t         id[KVP_NCCL_ID_BYTES], zero[KVP_NCCL_ID_BYTES] = {0};

    fake_make(&f, &port);
    side_start(&p, 1, port);
    CHECK_OK(fake_wait(&f, 10, &h));
    CHECK(h.kind == KVP_WIRE_LINK_HELLO && h.version == KVP_WIRE_LINK_VERSION);
    CHECK(h.nccl_version >= 22800);
    if (kvp_nccl_gpus() == 0) {
        EXPECT(h.device.index == -1 && strstr(h.device.why, "cudaGetDeviceCount") != NULL,
               "no gpu, hello says device %d (%s)", h.device.index, h.device.why);
    }
    if (answer_version != 0) {
        memset(&a, 0, sizeof(a));
        a.kind         = KVP_WIRE_LINK_ACCEPT;
        a.version      = (uint32_t)answer_version;
        a.nccl_version = h.nccl_version;
        fake_say(&f, &a);
    } else {
        kvp_xfer_msg_release(f.msg); /* the decode side goes away instead */
        f.msg = NULL;
        kvp_xfer_destroy(f.x);
        f.x = NULL;
    }
    side_join(&p);
    EXPECT(p.st == want, "connect %s, want %s", kvp_status_name(p.st), kvp_status_name(want));
    EXPECT(p.secs < 9, "connect took %.1f s (its deadline: 10 s)", p.secs);
    kvp_nccl_link_unique_id(p.link, id);
    EXPECT(memcmp(id, h.unique_id, sizeof(id)) == 0, "the hello's unique id is not the link's");
    EXPECT(memcmp(id, zero, sizeof(id)) != 0, "unique id of zeros");
    kvp_wire_link_clear(&h);
    kvp_nccl_link_destroy(p.link);
    if (f.x != NULL) {
        fake_destroy(&f);
    }
}

static void prefill_unreachable(void)
{
    fake_t   f;
    uint16_t port;
    side_t   p;

    fake_make(&f, &port);
    fake_destroy(&f); /* a port nobody listens on any more */
    side_start(&p, 1, port);
    side_join(&p);
    EXPECT(p.st == KVP_ERR_PEER_UNREACHABLE || p.st == KVP_ERR_PEER_GONE, "connect %s",
           kvp_status_name(p.st));
    EXPECT(p.secs < 9, "connect took %.1f s (its deadline: 10 s)", p.secs);
    kvp_nccl_link_destroy(p.link);
}

/* ---- two real sides ---- */

static void real_pair_without_gpu(void)
{
    side_t  d, p;
    uint8_t a[KVP_NCCL_ID_BYTES], b[KVP_NCCL_ID_BYTES], zero[KVP_NCCL_ID_BYTES] = {0};

    side_start(&d, 0, 0);
    side_start(&p, 1, d.port);
    side_join(&p);
    side_join(&d);
    EXPECT(d.st == KVP_ERR_UNSUPPORTED && p.st == KVP_ERR_UNSUPPORTED, "accept %s connect %s",
           kvp_status_name(d.st), kvp_status_name(p.st));
    EXPECT(d.secs < 9 && p.secs < 9, "took %.1f s and %.1f s (deadlines: 10 s)", d.secs, p.secs);
    kvp_nccl_link_unique_id(d.link, a);
    kvp_nccl_link_unique_id(p.link, b);
    EXPECT(memcmp(a, b, sizeof(a)) == 0 && memcmp(a, zero, sizeof(a)) != 0,
           "the unique id did not arrive intact");
    kvp_nccl_link_destroy(d.link);
    kvp_nccl_link_destroy(p.link);
}

static void not_set_up(void)
{
    kvp_nccl_link_h l;
    uint8_t         buf[64];
    uint32_t        lens[1] = {64}, n;
    const void     *pages[1] = {buf};

    CHECK_OK(kvp_nccl_link_create(NULL, &l));
    CHECK_ST(kvp_nccl_link_status(l), KVP_ERR_NOT_FOUND);
    CHECK_ST(kvp_nccl_link_send(l, pages, lens, 1), KVP_ERR_NOT_FOUND);
    CHECK_ST(kvp_nccl_link_recv(l, buf, sizeof(buf), lens, 1, 0, &n, NULL), KVP_ERR_NOT_FOUND);
    CHECK_ST(kvp_nccl_link_send(l, pages, lens, 0), KVP_ERR_INVALID);
    CHECK_ST(kvp_nccl_link_accept(l), KVP_ERR_INVALID); /* not listening */
    kvp_nccl_link_destroy(l);
}

int main(void)
{
#ifdef KVP_HAVE_NCCL
    const int built = 1;
#else
    const int built = 0;
#endif
    kvp_nccl_link_h l;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    if (!built) {
        CHECK_ST(kvp_nccl_link_create(NULL, &l), KVP_ERR_UNSUPPORTED);
        CHECK(kvp_nccl_gpus() == 0);
        printf("test_nccl_link: built without nccl: the link says unsupported\n");
        return 0;
    }
    not_set_up();
    decode_refusals();
    decode_peer_killed();
    prefill_against(2, KVP_ERR_UNSUPPORTED);
    prefill_against(0, KVP_ERR_PEER_GONE);
    prefill_unreachable();
    if (kvp_nccl_gpus() == 0) {
        real_pair_without_gpu();
    } else {
        printf("test_nccl_link: %d gpus: the no-gpu pair is left to machines without one\n",
               kvp_nccl_gpus());
    }
    return kvp_test_result("test_nccl_link");
}
