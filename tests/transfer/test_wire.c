/* test_wire.c - proto/wire.c: every message type round-trips (DELETE and LIST included);
 * truncated, bit-flipped and random headers, and headers whose counts disagree with the data
 * length, give KVP_ERR_PROTOCOL (or a valid struct), never a crash; no allocation leaks. */
#include "kvpack/wire.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static kvp_key128_t keys[5] = {{1, 2}, {3, 4}, {5, 6}, {~0ull, 7}, {8, ~0ull}};
static uint32_t     lens[3] = {100, 64, 70000};
static uint32_t     append_ids[8] = {11, 12, 13, 14, 15, 16, 17, 18};

/* One request of every op, with the data length that goes with it. */
static int make_req(int i, kvp_wire_req_t *r, uint64_t *data_len)
{
    memset(r, 0, sizeof(*r));
    r->req_id      = 1000 + (uint64_t)i;
    r->deadline_ms = 5000;
    r->ns          = 0xABCDEF0123456789ull;
    *data_len      = 0;
    switch (i) {
    case 0:
        r->op = KVP_WIRE_OP_PUT_PAGES;
        r->n_pages = 3;
        r->page_lens = lens;
        *data_len = 100 + 64 + 70000;
        return 1;
    case 1:
        r->op = KVP_WIRE_OP_PUT_SESSION;
        strcpy(r->sid, "session-1");
        r->record_len = 777;
        *data_len = 777;
        return 1;
    case 2:
        r->op = KVP_WIRE_OP_GET_SESSION;
        strcpy(r->sid, "s2");
        return 1;
    case 3:
        r->op = KVP_WIRE_OP_GET_PAGES;
        r->n_keys = 5;
        r->keys = keys;
        r->layers = 4;
        r->start = 7;
        r->max_bytes = 1 << 20;
        return 1;
    case 4:
        r->op = KVP_WIRE_OP_LOOKUP;
        r->n_keys = 5;
        r->keys = keys;
        r->layers = 32;
        return 1;
    case 5:
        r->op = KVP_WIRE_OP_SPILL;
        strcpy(r->sid, "s3");
        return 1;
    case 6:
        r->op = KVP_WIRE_OP_STAT;
        r->ns = 0;
        return 1;
    case 7:
        r->op = KVP_WIRE_OP_DELETE;
        strcpy(r->sid, "gone-1");
        return 1;
    case 8: /* LIST after a cursor */
        r->op = KVP_WIRE_OP_LIST;
        strcpy(r->sid, "after-this");
        r->limit = 100;
        return 1;
    case 15: /* LIST probing one session: at the cursor itself, tombstones too */
        r->op = KVP_WIRE_OP_LIST;
        strcpy(r->sid, "this-one");
        r->limit     = 1;
        r->deleted   = 1;
        r->inclusive = 1;
        return 1;
    case 9: /* LIST from the start: no cursor */
        r->op    = KVP_WIRE_OP_LIST;
        r->ns    = 0;
        r->limit = KVP_WIRE_MAX_LIST;
        return 1;
    case 10: /* PUT_SESSION with its pages ahead of the record */
        r->op = KVP_WIRE_OP_PUT_SESSION;
        strcpy(r->sid, "with-pages");
        r->record_len = 777;
        r->version    = 99;
        r->n_pages    = 3;
        r->page_lens  = lens;
        *data_len     = 100 + 64 + 70000 + 777;
        return 1;
    case 11: /* GET_SESSION asking for the first pages with the record */
        r->op = KVP_WIRE_OP_GET_SESSION;
        strcpy(r->sid, "s4");
        r->max_bytes = 1 << 20;
        return 1;
    case 12: /* APPEND: 5 fp16 tokens of 2 layers x 4 heads x 64 onto a tail of 3, replicated
              * (a version, the chunk count and the version the copy must hold) */
        r->op = KVP_WIRE_OP_APPEND;
        strcpy(r->sid, "appended");
        r->append = (kvp_wire_append_t){2, 0x5EED, 2, 4, 64, 128, 1, 5, 8, append_ids,
                                        0x1234567890ull, 7, 1, 0, 0, 0x1234500000ull, 1};
        *data_len = 2ull * 2 * 5 * 4 * 64 * 2;
        return 1;
    case 14: /* APPEND of one node's client: at the position the session must be at */
        r->op = KVP_WIRE_OP_APPEND;
        strcpy(r->sid, "appended");
        r->append = (kvp_wire_append_t){2, 0x5EED, 2, 4, 64, 128, 1, 5, 8, append_ids, 0, 0, 0, 1,
                                        (1ull << 40) + 3, 0, 0};
        *data_len = 2ull * 2 * 5 * 4 * 64 * 2;
        return 1;
    case 13: /* SCRUB: no body fields, no data */
        r->op = KVP_WIRE_OP_SCRUB;
        r->ns = 0;
        return 1;
    }
    return 0;
}

static void check_req_equal(const kvp_wire_req_t *a, const kvp_wire_req_t *b)
{
    CHECK(a->op == b->op && a->req_id == b->req_id && a->deadline_ms == b->deadline_ms);
    CHECK(a->ns == b->ns && strcmp(a->sid, b->sid) == 0);
    CHECK(a->n_pages == b->n_pages && a->record_len == b->record_len);
    CHECK(a->n_keys == b->n_keys && a->layers == b->layers && a->start == b->start);
    CHECK(a->max_bytes == b->max_bytes && a->limit == b->limit);
    CHECK(a->deleted == b->deleted && a->inclusive == b->inclusive);
    for (uint32_t i = 0; i < a->n_pages; i++) {
        CHECK(a->page_lens[i] == b->page_lens[i]);
    }
    for (uint32_t i = 0; i < a->n_keys; i++) {
        CHECK(a->keys[i].lo == b->keys[i].lo && a->keys[i].hi == b->keys[i].hi);
    }
    CHECK(a->append.codec == b->append.codec && a->append.fingerprint == b->append.fingerprint &&
          a->append.layers == b->append.layers && a->append.heads == b->append.heads &&
          a->append.head_dim == b->append.head_dim &&
          a->append.page_tokens == b->append.page_tokens && a->append.dtype == b->append.dtype &&
          a->append.ntok == b->append.ntok && a->append.n_ids == b->append.n_ids &&
          a->append.version == b->append.version && a->append.chunks == b->append.chunks &&
          a->append.has_chunks == b->append.has_chunks &&
          a->append.has_first_pos == b->append.has_first_pos &&
          a->append.first_pos == b->append.first_pos && a->append.base == b->append.base &&
          a->append.has_base == b->append.has_base);
    for (uint32_t i = 0; i < a->append.n_ids; i++) {
        CHECK(a->append.ids[i] == b->append.ids[i]);
    }
}

static void test_req_roundtrip(void)
{
    kvp_wire_req_t r, u;
    uint64_t       dl;
    uint8_t       *buf;
    size_t         len;

    for (int i = 0; make_req(i, &r, &dl); i++) {
        CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
        CHECK(kvp_wire_req_unpack(buf, len, dl, &u) == KVP_OK);
        check_req_equal(&r, &u);
        kvp_wire_req_clear(&u);
        /* the data length must match what the header describes */
        if (r.op != KVP_WIRE_OP_PUT_PAGES && r.op != KVP_WIRE_OP_PUT_SESSION &&
            r.op != KVP_WIRE_OP_APPEND) {
            CHECK(kvp_wire_req_unpack(buf, len, 1, &u) == KVP_ERR_PROTOCOL);
        } else {
            CHECK(kvp_wire_req_unpack(buf, len, dl - 1, &u) == KVP_ERR_PROTOCOL);
            CHECK(u.req_id == r.req_id); /* still matched for the error reply */
            kvp_wire_req_clear(&u);
            CHECK(kvp_wire_req_unpack(buf, len, dl + 1, &u) == KVP_ERR_PROTOCOL);
        }
        kvp_wire_req_clear(&u);
        /* every truncation is an error, never a crash */
        for (size_t t = 0; t < len; t++) {
            kvp_status_t s = kvp_wire_req_unpack(buf, t, dl, &u);
            CHECK(s == KVP_ERR_PROTOCOL);
            kvp_wire_req_clear(&u);
        }
        /* flipped bytes: either a consistent message or KVP_ERR_PROTOCOL */
        for (int k = 0; k < 2000; k++) {
            uint8_t *cp = kvp_malloc(len, "t");
            memcpy(cp, buf, len);
            cp[rnd() % len] ^= (uint8_t)(1u + rnd() % 255u);
            kvp_status_t s = kvp_wire_req_unpack(cp, len, dl, &u);
            CHECK(s == KVP_OK || s == KVP_ERR_PROTOCOL);
            if (s == KVP_OK && (u.op == KVP_WIRE_OP_PUT_PAGES || u.op == KVP_WIRE_OP_PUT_SESSION)) {
                uint64_t sum = u.record_len;
                for (uint32_t p = 0; p < u.n_pages; p++) {
                    sum += u.page_lens[p];
                }
                CHECK(sum == dl);
            }
            kvp_wire_req_clear(&u);
            kvp_free(cp);
        }
        kvp_free(buf);
    }
}

static void test_req_invalid(void)
{
    kvp_wire_req_t r, u;
    uint64_t       dl;
    uint8_t       *buf;
    size_t         len;
    uint32_t       small[2] = {10, 64};

    /* a page shorter than a page header */
    make_req(0, &r, &dl);
    r.n_pages   = 2;
    r.page_lens = small;
    CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_req_unpack(buf, len, 74, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_req_clear(&u);
    kvp_free(buf);
    /* zero pages */
    r.n_pages = 0;
    CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_req_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_req_clear(&u);
    kvp_free(buf);
    /* empty session id */
    make_req(2, &r, &dl);
    r.sid[0] = '\0';
    CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_req_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_req_clear(&u);
    kvp_free(buf);
    /* get_pages start past the end, zero layers */
    make_req(3, &r, &dl);
    r.start = 5 * 4;
    CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_req_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_req_clear(&u);
    kvp_free(buf);
    make_req(4, &r, &dl);
    r.layers = 0;
    CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_req_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_req_clear(&u);
    kvp_free(buf);
    /* zero keys cannot even be packed */
    r.n_keys = 0;
    CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_ERR_INVALID);
    /* LIST asking for no sessions, or more than a reply may carry, or at a cursor it lacks */
    for (int k = 0; k < 3; k++) {
        make_req(k < 2 ? 8 : 15, &r, &dl);
        r.limit  = k == 0 ? 0 : k == 1 ? KVP_WIRE_MAX_LIST + 1 : r.limit;
        r.sid[0] = k == 2 ? '\0' : r.sid[0];
        CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
        CHECK(kvp_wire_req_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
        CHECK(u.req_id == r.req_id);
        kvp_wire_req_clear(&u);
        kvp_free(buf);
    }
    /* APPEND: fewer ids than new tokens, a full tail's worth more, no tokens, a bad dtype */
    for (int k = 0; k < 4; k++) {
        make_req(12, &r, &dl);
        r.append.n_ids       = k == 0 ? 4 : k == 1 ? 5 + 128 : r.append.n_ids;
        r.append.ntok        = k == 2 ? 0 : r.append.ntok;
        r.append.dtype       = k == 3 ? 7 : r.append.dtype;
        CHECK(kvp_wire_req_pack(&r, &buf, &len) == KVP_OK);
        CHECK(kvp_wire_req_unpack(buf, len, dl, &u) == KVP_ERR_PROTOCOL);
        CHECK(u.req_id == r.req_id);
        kvp_wire_req_clear(&u);
        kvp_free(buf);
    }
    /* random garbage of every length up to 300 */
    for (size_t n = 0; n < 300; n++) {
        uint8_t g[300];
        for (size_t i = 0; i < n; i++) {
            g[i] = (uint8_t)rnd();
        }
        kvp_status_t s = kvp_wire_req_unpack(g, n, rnd() % 4096, &u);
        CHECK(s == KVP_OK || s == KVP_ERR_PROTOCOL);
        kvp_wire_req_clear(&u);
        s = kvp_wire_req_unpack(NULL, 0, 0, &u);
        CHECK(s == KVP_ERR_PROTOCOL);
    }
}

/* Every truncation of a packed reply is KVP_ERR_PROTOCOL, never a crash. */
static void rep_truncations_fail(const uint8_t *buf, size_t len, uint64_t data_len)
{
    kvp_wire_rep_t u;

    for (size_t t = 0; t < len; t++) {
        CHECK(kvp_wire_rep_unpack(buf, t, data_len, &u) == KVP_ERR_PROTOCOL);
        kvp_wire_rep_clear(&u);
    }
}

static void test_rep(void)
{
    kvp_wire_rep_t r, u;
    uint8_t       *buf;
    size_t         len;
    uint32_t       pl[2] = {64, 1000};

    /* get_pages OK */
    memset(&r, 0, sizeof(r));
    r.op = KVP_WIRE_OP_GET_PAGES;
    r.req_id = 9;
    r.n_pages = 2;
    r.page_lens = pl;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 1064, &u) == KVP_OK);
    CHECK(u.op == r.op && u.req_id == 9 && u.status == KVP_OK && u.n_pages == 2);
    CHECK(u.page_lens[0] == 64 && u.page_lens[1] == 1000);
    kvp_wire_rep_clear(&u);
    CHECK(kvp_wire_rep_unpack(buf, len, 1063, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    rep_truncations_fail(buf, len, 1064);
    kvp_free(buf);
    /* get_session OK: version and what the node read from disk travel; absent ones decode as 0 */
    memset(&r, 0, sizeof(r));
    r.op         = KVP_WIRE_OP_GET_SESSION;
    r.req_id     = 11;
    r.record_len = 300;
    r.version    = 1234567890123ull;
    r.disk_pages = 48;
    r.disk_bytes = 4718592ull + 3;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 300, &u) == KVP_OK);
    CHECK(u.record_len == 300 && u.version == r.version && u.disk_pages == 48 &&
          u.disk_bytes == r.disk_bytes);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    r.version = r.disk_bytes = 0;
    r.disk_pages = 0;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 300, &u) == KVP_OK);
    CHECK(u.version == 0 && u.disk_pages == 0 && u.disk_bytes == 0 && u.n_pages == 0);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    /* get_session with the record's first pages after it: the data must be record + pages */
    r.n_pages   = 2;
    r.page_lens = pl;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 1364, &u) == KVP_OK);
    CHECK(u.record_len == 300 && u.n_pages == 2 && u.page_lens[0] == 64 && u.page_lens[1] == 1000);
    kvp_wire_rep_clear(&u);
    CHECK(kvp_wire_rep_unpack(buf, len, 1363, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    CHECK(kvp_wire_rep_unpack(buf, len, 300, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    rep_truncations_fail(buf, len, 1364);
    kvp_free(buf);
    /* an error reply carries status and message, no body */
    memset(&r, 0, sizeof(r));
    r.op = KVP_WIRE_OP_GET_SESSION;
    r.req_id = 10;
    r.status = KVP_ERR_NOT_FOUND;
    strcpy(r.message, "no session s9");
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK);
    CHECK(u.status == KVP_ERR_NOT_FOUND && strcmp(u.message, "no session s9") == 0);
    kvp_wire_rep_clear(&u);
    CHECK(kvp_wire_rep_unpack(buf, len, 5, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    /* an unknown status code is a protocol error */
    r.status = (kvp_status_t)-33;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    /* stat round trip */
    memset(&r, 0, sizeof(r));
    r.op = KVP_WIRE_OP_STAT;
    r.stat.dram_bytes = 123456789012ull;
    r.stat.spills = 7;
    r.stat.uptime_ms = 42;
    r.stat.disk_free_bytes    = 5ull << 40;
    r.stat.disk_full_refusals = 3;
    r.stat.connections          = 190;
    r.stat.connections_max      = 192;
    r.stat.connections_rejected = 11;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK);
    CHECK(u.stat.dram_bytes == 123456789012ull && u.stat.spills == 7 && u.stat.uptime_ms == 42);
    CHECK(u.stat.disk_free_bytes == 5ull << 40 && u.stat.disk_full_refusals == 3);
    CHECK(u.stat.connections == 190 && u.stat.connections_max == 192 &&
          u.stat.connections_rejected == 11);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    /* scrub round trip; a SCRUB reply carrying data is refused */
    memset(&r, 0, sizeof(r));
    r.op = KVP_WIRE_OP_SCRUB;
    r.scrub.bytes = 5ull << 40;
    r.scrub.bad_pages = 3;
    r.scrub.index_rebuilt = 1;
    r.scrub.elapsed_ms = 61000;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK);
    CHECK(u.op == KVP_WIRE_OP_SCRUB && u.scrub.bytes == 5ull << 40 && u.scrub.bad_pages == 3 &&
          u.scrub.index_rebuilt == 1 && u.scrub.elapsed_ms == 61000);
    kvp_wire_rep_clear(&u);
    CHECK(kvp_wire_rep_unpack(buf, len, 8, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    /* a request header is not a reply */
    kvp_free(buf);
    memset(&r, 0, sizeof(r));
    r.op = KVP_WIRE_OP_LOOKUP;
    r.hit_chunks = 3;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK && u.hit_chunks == 3);
    kvp_wire_rep_clear(&u);
    for (int k = 0; k < 3000; k++) {
        uint8_t cp[256];
        memcpy(cp, buf, len);
        cp[rnd() % len] ^= (uint8_t)(1u + rnd() % 255u);
        kvp_status_t s = kvp_wire_rep_unpack(cp, len, 0, &u);
        CHECK(s == KVP_OK || s == KVP_ERR_PROTOCOL);
        kvp_wire_rep_clear(&u);
    }
    kvp_free(buf);
    /* append OK: chunks sealed; no data may come with it */
    memset(&r, 0, sizeof(r));
    r.op     = KVP_WIRE_OP_APPEND;
    r.req_id = 12;
    r.sealed = 2;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK && u.sealed == 2 && u.op == r.op);
    kvp_wire_rep_clear(&u);
    CHECK(kvp_wire_rep_unpack(buf, len, 1, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    rep_truncations_fail(buf, len, 0);
    kvp_free(buf);
}

/* LIST replies: entries round-trip; bad entries, data, truncation and flipped bytes are
 * KVP_ERR_PROTOCOL or a consistent list; DELETE answers with a bare status. */
static void test_rep_list(void)
{
    kvp_wire_session_t e[3];
    kvp_wire_rep_t     r, u;
    uint8_t           *buf;
    size_t             len;

    memset(e, 0, sizeof(e));
    for (int i = 0; i < 3; i++) {
        e[i].ns = 0x1111000000000000ull + (uint64_t)i;
        snprintf(e[i].sid, sizeof(e[i].sid), "sess-%d", i);
        e[i].layers      = 4 + (uint32_t)i;
        e[i].page_tokens = 128;
        e[i].n_chunks    = 10 * (uint32_t)i;
        e[i].tail_tokens = 7;
        e[i].codec       = (uint32_t)i + 1;
        e[i].heads       = 8;
        e[i].head_dim    = 128;
        e[i].where       = (uint32_t)i;
        e[i].bytes       = 123456789ull * (uint64_t)(i + 1);
    }
    memset(&r, 0, sizeof(r));
    r.op         = KVP_WIRE_OP_LIST;
    r.req_id     = 77;
    r.n_sessions = 3;
    r.sessions   = e;
    r.more       = 1;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(len <= KVP_WIRE_LIST_SLACK + 3 * KVP_WIRE_LIST_ENTRY_MAX);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK);
    CHECK(u.op == KVP_WIRE_OP_LIST && u.n_sessions == 3 && u.more == 1);
    CHECK(memcmp(u.sessions, e, sizeof(e)) == 0);
    kvp_wire_rep_clear(&u);
    CHECK(kvp_wire_rep_unpack(buf, len, 8, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    rep_truncations_fail(buf, len, 0);
    for (int k = 0; k < 3000; k++) {
        uint8_t cp[1024];

        CHECK(len <= sizeof(cp));
        memcpy(cp, buf, len);
        cp[rnd() % len] ^= (uint8_t)(1u + rnd() % 255u);
        kvp_status_t s = kvp_wire_rep_unpack(cp, len, 0, &u);
        CHECK(s == KVP_OK || s == KVP_ERR_PROTOCOL);
        for (uint32_t i = 0; s == KVP_OK && i < u.n_sessions; i++) {
            CHECK(u.sessions[i].sid[0] != '\0' && u.sessions[i].codec < KVP_CODEC_MAX);
        }
        kvp_wire_rep_clear(&u);
    }
    kvp_free(buf);
    /* the widest entry fits the per-entry bound the node sizes its replies by */
    memset(e[0].sid, 'x', KVP_SID_MAX - 1);
    e[0].sid[KVP_SID_MAX - 1] = '\0';
    e[0].ns = e[0].bytes = ~0ull;
    e[0].layers = e[0].page_tokens = e[0].n_chunks = e[0].tail_tokens = ~0u;
    e[0].heads = e[0].head_dim = ~0u;
    r.n_sessions = 1;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(len <= KVP_WIRE_LIST_SLACK + KVP_WIRE_LIST_ENTRY_MAX);
    kvp_free(buf);
    /* an entry with an unknown codec or an empty session id is rejected */
    e[0].layers = 4;
    e[0].codec  = KVP_CODEC_MAX;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    e[0].codec  = 1;
    e[0].sid[0] = '\0';
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_ERR_PROTOCOL);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    /* an empty list */
    r.n_sessions = 0;
    r.more       = 0;
    CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
    CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK && u.n_sessions == 0 && !u.more);
    kvp_wire_rep_clear(&u);
    kvp_free(buf);
    /* DELETE: OK and NOT_FOUND carry no body */
    memset(&r, 0, sizeof(r));
    r.op     = KVP_WIRE_OP_DELETE;
    r.status = KVP_ERR_NOT_FOUND;
    strcpy(r.message, "s1: not found");
    for (int k = 0; k < 2; k++) {
        CHECK(kvp_wire_rep_pack(&r, &buf, &len) == KVP_OK);
        CHECK(kvp_wire_rep_unpack(buf, len, 0, &u) == KVP_OK);
        CHECK(u.op == KVP_WIRE_OP_DELETE && u.status == r.status);
        kvp_wire_rep_clear(&u);
        CHECK(kvp_wire_rep_unpack(buf, len, 3, &u) == KVP_ERR_PROTOCOL);
        kvp_wire_rep_clear(&u);
        kvp_free(buf);
        r.status = KVP_OK;
    }
}

int main(void)
{
    int64_t live0;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    live0 = kvp_alloc_live_count();
    test_req_roundtrip();
    test_req_invalid();
    test_rep();
    test_rep_list();
    CHECK(kvp_alloc_live_count() == live0);
    printf("test_wire: ok\n");
    return 0;
}
