/* test_wire_link.c - the NCCL link's control messages in proto/wire.c: hello, accept, batch,
 * ready, ack and close round-trip field for field; every truncation of a hello or a batch, and a hello
 * whose unique id is 127 or 129 bytes, are KVP_ERR_PROTOCOL; a batch of 0 or 4097 pages, of a
 * page shorter than a header or longer than the largest page, or of more than 16 GiB, an ack
 * with an unknown status or 4097 statuses, and any message with data are KVP_ERR_PROTOCOL (the
 * oversized ones hand-encoded: the packer refuses to write them); a message of another link
 * version is KVP_ERR_UNSUPPORTED with its kind and version; random bytes never crash; no leak. */
#include "kvpack/wire.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include "check.h"

#include <stdio.h>
#include <string.h>

/* ---- a hand encoder of protobuf, for messages the packer will not write ---- */

typedef struct {
    uint8_t b[1 << 16];
    size_t  n;
} pb_t;

static void pb_varint(pb_t *p, uint64_t v)
{
    do {
        p->b[p->n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);
}
static void pb_tag(pb_t *p, unsigned field, unsigned wt) { pb_varint(p, (uint64_t)field << 3 | wt); }
static void pb_uint(pb_t *p, unsigned field, uint64_t v) { pb_tag(p, field, 0), pb_varint(p, v); }
static void pb_bytes(pb_t *p, unsigned field, const void *d, size_t n)
{
    pb_tag(p, field, 2), pb_varint(p, n);
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void pb_sint(pb_t *p, unsigned field, int32_t v)
{
    pb_uint(p, field, ((uint32_t)v << 1) ^ (uint32_t)(v >> 31));
}

/* LinkMsg{version, batch{batch_id 7, page_len (packed) = lens}} */
static void enc_batch(pb_t *out, uint32_t version, const uint32_t *lens, size_t n)
{
    pb_t body = {.n = 0}, packed = {.n = 0};

    for (size_t i = 0; i < n; i++) {
        pb_varint(&packed, lens[i]);
    }
    pb_uint(&body, 1, 7);
    pb_bytes(&body, 2, packed.b, packed.n);
    out->n = 0;
    pb_uint(out, 1, version);
    pb_bytes(out, 12, body.b, body.n);
}

/* LinkMsg{1, ack{batch_id 7, status, page_status (packed, sint32) = st}} */
static void enc_ack(pb_t *out, int32_t status, const int32_t *st, size_t n)
{
    pb_t body = {.n = 0}, packed = {.n = 0};

    for (size_t i = 0; i < n; i++) {
        pb_varint(&packed, ((uint32_t)st[i] << 1) ^ (uint32_t)(st[i] >> 31));
    }
    pb_uint(&body, 1, 7);
    pb_sint(&body, 2, status);
    pb_bytes(&body, 4, packed.b, packed.n);
    out->n = 0;
    pb_uint(out, 1, KVP_WIRE_LINK_VERSION);
    pb_bytes(out, 14, body.b, body.n);
}

/* LinkMsg{1, hello{nccl 22809, unique_id of id_len bytes, device{index 0}}} */
static void enc_hello(pb_t *out, size_t id_len)
{
    pb_t    body = {.n = 0}, dev = {.n = 0};
    uint8_t id[200];

    memset(id, 0xA5, sizeof(id));
    pb_sint(&dev, 1, 0);
    pb_uint(&body, 1, 22809);
    pb_bytes(&body, 2, id, id_len);
    pb_bytes(&body, 3, dev.b, dev.n);
    out->n = 0;
    pb_uint(out, 1, KVP_WIRE_LINK_VERSION);
    pb_bytes(out, 10, body.b, body.n);
}

static kvp_status_t unpack_pb(const pb_t *p, kvp_wire_link_t *m)
{
    kvp_status_t st = kvp_wire_link_unpack(p->b, p->n, 0, m);

    kvp_wire_link_clear(m);
    return st;
}

/* ---- round trips ---- */

static uint32_t     lens[3]  = {64, 1000, 64 + (256u << 20)};
static kvp_status_t pstat[4] = {KVP_OK, KVP_ERR_CORRUPT, KVP_OK, KVP_ERR_BAD_PAGE};

static void make(kvp_wire_link_kind_t kind, kvp_wire_link_t *m)
{
    memset(m, 0, sizeof(*m));
    m->kind = kind;
    switch (kind) {
    case KVP_WIRE_LINK_HELLO:
    case KVP_WIRE_LINK_ACCEPT:
        m->nccl_version = 22809;
        for (unsigned i = 0; i < KVP_WIRE_NCCL_ID_BYTES; i++) {
            m->unique_id[i] = (uint8_t)(i * 7 + 1);
        }
        m->device.index = kind == KVP_WIRE_LINK_HELLO ? -1 : 1;
        m->device.cc    = kind == KVP_WIRE_LINK_HELLO ? 0 : 90;
        strcpy(m->device.name, kind == KVP_WIRE_LINK_HELLO ? "" : "NVIDIA H100");
        strcpy(m->device.why, kind == KVP_WIRE_LINK_HELLO ? "insufficient driver" : "");
        if (kind == KVP_WIRE_LINK_ACCEPT) {
            m->status = KVP_ERR_UNSUPPORTED;
            strcpy(m->message, "decode has no usable gpu");
        }
        break;
    case KVP_WIRE_LINK_BATCH:
        m->batch_id  = 0xFFFFFFFFFFull;
        m->n_pages   = 3;
        m->page_lens = lens;
        m->budget_ms = 29999;
        break;
    case KVP_WIRE_LINK_READY:
        m->batch_id = 5;
        m->status   = KVP_ERR_TOO_LARGE;
        strcpy(m->message, "does not fit");
        break;
    case KVP_WIRE_LINK_CLOSE:
        m->status = KVP_ERR_TIMEOUT;
        strcpy(m->message, "receiving pages: not done within 1500 ms");
        break;
    default:
        m->batch_id    = 6;
        m->status      = KVP_ERR_CORRUPT;
        m->n_pages     = 4;
        m->page_status = pstat;
        strcpy(m->message, "pages 1, 3 failed");
        break;
    }
}

static void roundtrips(void)
{
    for (int k = KVP_WIRE_LINK_HELLO; k <= KVP_WIRE_LINK_CLOSE; k++) {
        kvp_wire_link_t a, b;
        uint8_t        *buf;
        size_t          len;

        make((kvp_wire_link_kind_t)k, &a);
        CHECK_OK(kvp_wire_link_pack(&a, &buf, &len));
        CHECK_OK(kvp_wire_link_unpack(buf, len, 0, &b));
        CHECK(b.kind == a.kind && b.version == KVP_WIRE_LINK_VERSION);
        CHECK(b.nccl_version == a.nccl_version && b.status == a.status &&
              b.batch_id == a.batch_id && b.n_pages == a.n_pages && b.budget_ms == a.budget_ms);
        CHECK(strcmp(b.message, a.message) == 0);
        CHECK(b.device.index == a.device.index && b.device.cc == a.device.cc &&
              strcmp(b.device.name, a.device.name) == 0 && strcmp(b.device.why, a.device.why) == 0);
        if (k == KVP_WIRE_LINK_HELLO) {
            CHECK(memcmp(b.unique_id, a.unique_id, KVP_WIRE_NCCL_ID_BYTES) == 0);
        }
        for (uint32_t i = 0; i < a.n_pages; i++) {
            CHECK(k == KVP_WIRE_LINK_BATCH ? b.page_lens[i] == a.page_lens[i]
                                           : b.page_status[i] == a.page_status[i]);
        }
        kvp_wire_link_clear(&b);
        /* any data with it is malformed */
        CHECK_ST(kvp_wire_link_unpack(buf, len, 1, &b), KVP_ERR_PROTOCOL);
        kvp_wire_link_clear(&b);
        /* every truncation: never a crash or a leak; of a hello or a batch always malformed */
        for (size_t cut = 0; cut < len; cut++) {
            kvp_status_t st = kvp_wire_link_unpack(buf, cut, 0, &b);

            if (k == KVP_WIRE_LINK_HELLO || k == KVP_WIRE_LINK_BATCH) {
                EXPECT(st == KVP_ERR_PROTOCOL, "%s cut at %zu: %s", kvp_wire_link_kind_name(k),
                       cut, kvp_status_name(st));
            }
            kvp_wire_link_clear(&b);
        }
        /* another link version: refused as such, kind and version known */
        a.version = 2;
        kvp_free(buf);
        CHECK_OK(kvp_wire_link_pack(&a, &buf, &len));
        CHECK_ST(kvp_wire_link_unpack(buf, len, 0, &b), KVP_ERR_UNSUPPORTED);
        CHECK(b.kind == a.kind && b.version == 2);
        kvp_wire_link_clear(&b);
        kvp_free(buf);
    }
}

static void malformed(void)
{
    static uint32_t big[KVP_WIRE_MAX_PAGES + 1];
    static int32_t  sts[KVP_WIRE_MAX_PAGES + 1];
    pb_t           *p = malloc(sizeof(*p));
    kvp_wire_link_t m;
    uint32_t        l;
    uint8_t        *buf;
    size_t          len;

    CHECK(p != NULL);
    for (size_t i = 0; i <= KVP_WIRE_MAX_PAGES; i++) {
        big[i] = 100;
    }
    enc_batch(p, 1, big, 3);
    CHECK_OK(unpack_pb(p, &m)); /* the hand encoder agrees with protobuf-c */
    enc_batch(p, 1, big, 0);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    enc_batch(p, 1, big, KVP_WIRE_MAX_PAGES);
    CHECK_OK(unpack_pb(p, &m));
    enc_batch(p, 1, big, KVP_WIRE_MAX_PAGES + 1);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    l = 63;
    enc_batch(p, 1, &l, 1);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    l = 65 + (256u << 20);
    enc_batch(p, 1, &l, 1);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    for (size_t i = 0; i < 65; i++) {
        big[i] = 64 + (256u << 20); /* 64 of the largest: just past 16 GiB */
    }
    enc_batch(p, 1, big, 63);
    CHECK_OK(unpack_pb(p, &m));
    enc_batch(p, 1, big, 64);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    enc_batch(p, 9, big, 3);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_UNSUPPORTED);
    enc_ack(p, KVP_OK, sts, KVP_WIRE_MAX_PAGES);
    CHECK_OK(unpack_pb(p, &m));
    enc_ack(p, KVP_OK, sts, KVP_WIRE_MAX_PAGES + 1);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    sts[5] = -77;
    enc_ack(p, KVP_ERR_CORRUPT, sts, 6);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    sts[5] = KVP_INPROGRESS;
    enc_ack(p, KVP_ERR_CORRUPT, sts, 6);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    enc_ack(p, -77, sts, 0);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    enc_hello(p, KVP_WIRE_NCCL_ID_BYTES);
    CHECK_OK(unpack_pb(p, &m));
    enc_hello(p, KVP_WIRE_NCCL_ID_BYTES - 1);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    enc_hello(p, KVP_WIRE_NCCL_ID_BYTES + 1);
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    p->n = 0;
    pb_uint(p, 1, KVP_WIRE_LINK_VERSION); /* no body */
    CHECK_ST(unpack_pb(p, &m), KVP_ERR_PROTOCOL);
    /* the packer refuses what the unpacker would */
    make(KVP_WIRE_LINK_BATCH, &m);
    m.n_pages = 0;
    CHECK_ST(kvp_wire_link_pack(&m, &buf, &len), KVP_ERR_INVALID);
    m.n_pages   = KVP_WIRE_MAX_PAGES + 1;
    m.page_lens = big;
    CHECK_ST(kvp_wire_link_pack(&m, &buf, &len), KVP_ERR_INVALID);
    m.kind = KVP_WIRE_LINK_NONE;
    CHECK_ST(kvp_wire_link_pack(&m, &buf, &len), KVP_ERR_INVALID);
    /* random bytes: any status, never a crash or a leak */
    for (int i = 0; i < 20000; i++) {
        p->n = (size_t)(rand() % 300);
        for (size_t j = 0; j < p->n; j++) {
            p->b[j] = (uint8_t)rand();
        }
        (void)unpack_pb(p, &m);
    }
    free(p);
}

int main(void)
{
    int64_t live0;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    srand(1);
    live0 = kvp_alloc_live_count();
    roundtrips();
    malformed();
    CHECK(kvp_alloc_live_count() == live0);
    return kvp_test_result("test_wire_link");
}
