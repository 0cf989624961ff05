/* test_session_ops.c - DELETE and LIST against a real kvpackd: list order, fields and paging
 * (a page size, a max, and the node's own cap on one reply with hundreds of long session ids);
 * delete keeps pages another session shares, answers NOT_FOUND for unknown sessions, and a
 * deleted session (hot or cold) stays deleted across a node restart; malformed LIST / DELETE
 * requests get KVP_ERR_PROTOCOL and the node keeps serving. Versions: a put or delete older than
 * the node's record or tombstone is KVP_ERR_STALE and changes nothing, tombstones survive a
 * restart and are listed only on request, a drop (repair) keeps no tombstone. */
#include "node_harness.h"

#include "kvpack/log.h"

#define NS  0xC0FFEEull
#define NS2 0x0DDull
#define NS3 0xBEEFull /* paging: a namespace of its own (profiles fix the layer count) */

static kvp_session_list_t *list_all(kvp_client_h c, uint32_t page, uint32_t max)
{
    kvp_session_list_t *l = NULL;

    CHECK_OK(kvp_client_list_sessions(c, page, max, &l));
    for (uint32_t i = 1; i < l->n; i++) { /* strictly increasing (ns, sid): nothing twice */
        const kvp_session_info_t *a = &l->sessions[i - 1], *b = &l->sessions[i];

        CHECK(a->ns < b->ns || (a->ns == b->ns && strcmp(a->sid, b->sid) < 0));
    }
    return l;
}

static const kvp_session_info_t *list_find(const kvp_session_list_t *l, uint64_t ns,
                                           const char *sid)
{
    for (uint32_t i = 0; i < l->n; i++) {
        if (l->sessions[i].ns == ns && strcmp(l->sessions[i].sid, sid) == 0) {
            return &l->sessions[i];
        }
    }
    return NULL;
}

static uint64_t session_bytes(const test_session_t *ts)
{
    uint64_t b = ts->desc.tail_len;

    for (uint32_t i = 0; i < ts->n_pages; i++) {
        b += ts->lens[i];
    }
    return b;
}

static void check_get(kvp_client_h c, uint64_t ns, const char *sid, const test_session_t *ts)
{
    kvp_session_pages_t *sp = NULL;

    CHECK_OK(kvp_client_get_session(c, ns, sid, &sp));
    test_session_check(ts, sp);
    kvp_session_pages_free(sp);
}

static void check_gone(kvp_client_h c, uint64_t ns, const char *sid)
{
    kvp_session_pages_t *sp = NULL;

    CHECK_ST(kvp_client_get_session(c, ns, sid, &sp), KVP_ERR_NOT_FOUND);
    CHECK_ST(kvp_client_delete_session(c, ns, sid), KVP_ERR_NOT_FOUND);
}

/* Stop the node (SIGTERM), start it again on the same data, reconnect *c; list what it holds. */
static kvp_session_list_t *restart(test_node_t *n, kvp_client_h *c)
{
    kvp_client_destroy(*c);
    CHECK(test_node_stop(n, SIGTERM) == 0);
    test_node_start(n, "--durability=spill");
    *c = test_client(n->addr, 10000);
    return list_all(*c, 0, 0);
}

/* Fields, order, delete with shared pages, delete of hot and cold sessions across restarts. */
static void test_delete_restart(test_node_t *n)
{
    test_session_t      a, other;
    kvp_client_h        c = test_client(n->addr, 10000);
    kvp_session_list_t *l;
    const kvp_session_info_t *e;

    test_session_make(&a, 3, 4, 5, 1);     /* "a" and "b" name the same pages */
    test_session_make(&other, 2, 2, 0, 9); /* another namespace, no tail */
    CHECK_OK(test_session_put(c, NS, "a", &a));
    CHECK_OK(test_session_put(c, NS, "b", &a));
    CHECK_OK(test_session_put(c, NS2, "z", &other));
    l = list_all(c, 0, 0);
    CHECK(l->n == 3 && !l->truncated && l->requests == 1);
    CHECK(l->sessions[0].ns == NS2 && strcmp(l->sessions[1].sid, "a") == 0);
    e = list_find(l, NS, "a");
    CHECK(e != NULL && e->layers == 3 && e->n_chunks == 4 && e->tail_tokens == 5);
    CHECK(e->page_tokens == TS_P && e->codec == KVP_CODEC_FP16 && e->heads == TS_HEADS &&
          e->head_dim == TS_DIM && e->where == KVP_SESSION_IN_DRAM);
    CHECK(e->bytes == session_bytes(&a));
    e = list_find(l, NS2, "z");
    CHECK(e != NULL && e->tail_tokens == 0 && e->bytes == session_bytes(&other));
    kvp_session_list_free(l);

    /* delete a: b keeps the shared pages */
    CHECK_OK(kvp_client_delete_session(c, NS, "a"));
    check_gone(c, NS, "a");
    check_gone(c, NS2, "a"); /* a session id is only known within its namespace */
    check_get(c, NS, "b", &a);
    /* b and z go to disk; z is then deleted while cold (only on disk) */
    CHECK_OK(kvp_client_spill(c, NS, "b"));
    CHECK_OK(kvp_client_spill(c, NS2, "z"));
    l = list_all(c, 0, 0);
    CHECK(l->n == 2 && list_find(l, NS, "b")->where == KVP_SESSION_ON_DISK);
    kvp_session_list_free(l);
    CHECK_OK(kvp_client_delete_session(c, NS2, "z"));
    l = restart(n, &c);
    CHECK(l->n == 1 && list_find(l, NS, "b") != NULL);
    CHECK(list_find(l, NS, "b")->bytes == session_bytes(&a)); /* page sizes not read yet */
    kvp_session_list_free(l);
    check_gone(c, NS2, "z");
    check_gone(c, NS, "a");
    check_get(c, NS, "b", &a);
    /* a hot session that was on disk: deleting it removes the disk record too */
    CHECK_OK(kvp_client_delete_session(c, NS, "b"));
    l = restart(n, &c);
    CHECK(l->n == 0 && !l->truncated);
    kvp_session_list_free(l);
    check_gone(c, NS, "b");
    kvp_client_destroy(c);
    test_session_free(&a);
    test_session_free(&other);
}

/* Paging by the client's page size and max, and by the node's cap on one reply. */
static void test_paging(test_node_t *n)
{
    test_session_t      ts;
    kvp_client_h        c = test_client(n->addr, 10000);
    kvp_session_list_t *l;
    char                sid[KVP_SID_MAX];
    const uint32_t      many = 600;

    test_session_make(&ts, 2, 1, 3, 4);
    CHECK_OK(kvp_client_put_pages(c, NS3, (const void *const *)ts.pages, ts.lens, ts.n_pages));
    for (uint32_t i = 0; i < 40; i++) {
        snprintf(sid, sizeof(sid), "p-%03u", 39 - i);
        CHECK_OK(kvp_client_put_session(c, NS3, sid, &ts.desc));
    }
    l = list_all(c, 7, 0);
    CHECK(l->n == 40 && l->requests == 6 && !l->truncated);
    for (uint32_t i = 0; i < 40; i++) {
        snprintf(sid, sizeof(sid), "p-%03u", i);
        CHECK(strcmp(l->sessions[i].sid, sid) == 0);
    }
    kvp_session_list_free(l);
    l = list_all(c, 7, 10);
    CHECK(l->n == 10 && l->truncated && strcmp(l->sessions[9].sid, "p-009") == 0);
    kvp_session_list_free(l);
    l = list_all(c, 0, 40);
    CHECK(l->n == 40 && !l->truncated);
    kvp_session_list_free(l);
    /* hundreds of 126-byte ids: more than one reply header holds, so the node sends fewer than
     * asked and says there are more */
    memset(sid, 'x', 120);
    for (uint32_t i = 0; i < many; i++) {
        snprintf(sid + 120, sizeof(sid) - 120, "%06u", i);
        CHECK_OK(kvp_client_put_session(c, NS3, sid, &ts.desc));
    }
    l = list_all(c, 0, 0);
    fprintf(stderr, "test_session_ops: %u sessions listed in %u requests\n", l->n, l->requests);
    CHECK(l->n == many + 40 && l->requests >= 2 && !l->truncated);
    kvp_session_list_free(l);
    CHECK_ST(kvp_client_list_sessions(c, KVP_WIRE_MAX_LIST + 1, 0, &l), KVP_ERR_INVALID);
    kvp_client_destroy(c);
    test_session_free(&ts);
}

/* Hand-made bad LIST / DELETE requests: PROTOCOL back, the node keeps serving. */
static void test_malformed(test_node_t *n)
{
    test_raw_t      r;
    kvp_wire_req_t  req;
    kvp_client_h    c;
    kvp_node_stat_t st;
    uint8_t        *h;
    size_t          hl;
    uint8_t         junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    test_raw_open(&r, n->port);
    memset(&req, 0, sizeof(req));
    req.op     = KVP_WIRE_OP_LIST;
    req.req_id = 5;
    req.limit  = 0; /* no sessions asked */
    CHECK_OK(kvp_wire_req_pack(&req, &h, &hl));
    test_raw_call(&r, h, hl, NULL, 0);
    CHECK(r.unpack == KVP_OK && r.rep.status == KVP_ERR_PROTOCOL && r.rep.req_id == 5);
    kvp_free(h);
    req.limit = 3; /* a good request with data attached */
    CHECK_OK(kvp_wire_req_pack(&req, &h, &hl));
    test_raw_call(&r, h, hl, junk, sizeof(junk));
    CHECK(r.unpack == KVP_OK && r.rep.status == KVP_ERR_PROTOCOL);
    test_raw_call(&r, h, hl, NULL, 0); /* and without: served */
    CHECK(r.unpack == KVP_OK && r.rep.status == KVP_OK && r.rep.op == KVP_WIRE_OP_LIST);
    kvp_free(h);
    req.op = KVP_WIRE_OP_DELETE;
    strcpy(req.sid, "nobody");
    CHECK_OK(kvp_wire_req_pack(&req, &h, &hl));
    test_raw_call(&r, h, hl, junk, sizeof(junk));
    CHECK(r.unpack == KVP_OK && r.rep.status == KVP_ERR_PROTOCOL);
    for (size_t t = 1; t < hl; t += 3) { /* truncated DELETE headers */
        test_raw_call(&r, h, t, NULL, 0);
        CHECK(r.unpack == KVP_OK && r.rep.status == KVP_ERR_PROTOCOL);
    }
    test_raw_call(&r, h, hl, NULL, 0);
    CHECK(r.unpack == KVP_OK && r.rep.status == KVP_ERR_NOT_FOUND);
    kvp_free(h);
    test_raw_close(&r);
    c = test_client(n->addr, 10000);
    CHECK_OK(kvp_client_stat(c, &st));
    kvp_client_destroy(c);
}

static int list_has(kvp_client_h c, uint64_t flags, const char *sid, kvp_session_info_t *out)
{
    kvp_session_list_t       *l = NULL;
    const kvp_session_info_t *e;

    CHECK_OK(kvp_client_list_sessions_ex(c, 0, 0, flags, &l));
    e = list_find(l, NS, sid);
    if (e != NULL) {
        *out = *e;
    }
    kvp_session_list_free(l);
    return e != NULL;
}

static uint64_t get_version(kvp_client_h c, const char *sid, const test_session_t *ts)
{
    kvp_session_pages_t *sp = NULL;
    uint64_t             v;

    CHECK_OK(kvp_client_get_session(c, NS, sid, &sp));
    test_session_check(ts, sp);
    v = sp->version;
    kvp_session_pages_free(sp);
    return v;
}

/* Last writer wins: stale puts and deletes refused, tombstones across a restart, drop. */
static void test_versions(test_node_t *n)
{
    test_session_t     a, b;
    kvp_session_info_t e;
    kvp_client_h       c = test_client(n->addr, 10000);
    kvp_session_list_t *l;

    test_session_make(&a, 3, 2, 4, 21);
    test_session_make(&b, 3, 1, 0, 22);
    CHECK_OK(kvp_client_put_pages(c, NS, (const void *const *)a.pages, a.lens, a.n_pages));
    CHECK_OK(kvp_client_put_pages(c, NS, (const void *const *)b.pages, b.lens, b.n_pages));
    CHECK_OK(kvp_client_put_session_version(c, NS, "v", &a.desc, 1000));
    CHECK(get_version(c, "v", &a) == 1000);
    CHECK_ST(kvp_client_put_session_version(c, NS, "v", &b.desc, 999), KVP_ERR_STALE);
    CHECK(get_version(c, "v", &a) == 1000);                       /* unchanged */
    CHECK_OK(kvp_client_put_session_version(c, NS, "v", &a.desc, 1000)); /* a retry */
    CHECK_ST(kvp_client_delete_session_version(c, NS, "v", 500), KVP_ERR_STALE);
    CHECK(get_version(c, "v", &a) == 1000);
    CHECK_OK(kvp_client_delete_session_version(c, NS, "v", 2000));
    CHECK_ST(kvp_client_put_session_version(c, NS, "v", &b.desc, 1500), KVP_ERR_STALE);
    CHECK_ST(kvp_client_delete_session_version(c, NS, "never", 3000), KVP_ERR_NOT_FOUND);
    CHECK(!list_has(c, 0, "v", &e) && !list_has(c, 0, "never", &e));
    CHECK(list_has(c, KVP_LIST_DELETED, "v", &e) && e.deleted && e.version == 2000 &&
          e.n_chunks == 0);
    CHECK(list_has(c, KVP_LIST_DELETED, "never", &e) && e.deleted && e.version == 3000);
    l = restart(n, &c);                                           /* tombstones persist */
    CHECK(list_find(l, NS, "v") == NULL);
    kvp_session_list_free(l);
    CHECK_ST(kvp_client_put_session_version(c, NS, "never", &b.desc, 2999), KVP_ERR_STALE);
    CHECK(list_has(c, KVP_LIST_DELETED, "v", &e) && e.deleted && e.version == 2000);
    CHECK_OK(kvp_client_put_pages(c, NS, (const void *const *)b.pages, b.lens, b.n_pages));
    CHECK_OK(kvp_client_put_session_version(c, NS, "v", &b.desc, 2001)); /* newer: back */
    CHECK(get_version(c, "v", &b) == 2001);
    CHECK(list_has(c, KVP_LIST_DELETED, "v", &e) && !e.deleted && e.version == 2001);
    /* a drop (repair moving a replica) refuses a newer record and leaves no tombstone */
    CHECK_ST(kvp_client_drop_session(c, NS, "v", 2000), KVP_ERR_STALE);
    CHECK_OK(kvp_client_drop_session(c, NS, "v", 2001));
    CHECK(!list_has(c, KVP_LIST_DELETED, "v", &e));
    CHECK_OK(kvp_client_put_pages(c, NS, (const void *const *)b.pages, b.lens, b.n_pages));
    CHECK_OK(kvp_client_put_session_version(c, NS, "v", &b.desc, 7)); /* nothing blocks it */
    CHECK(get_version(c, "v", &b) == 7);
    CHECK_OK(kvp_client_delete_session(c, NS, "v"));               /* now: newer than 7 */
    kvp_client_destroy(c);
    test_session_free(&a);
    test_session_free(&b);
}

int main(void)
{
    test_node_t n;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    test_node_mkdir(&n);
    test_node_start(&n, "--durability=spill");
    test_delete_restart(&n);
    test_malformed(&n);
    test_paging(&n);
    test_versions(&n);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_node_rmdir(&n);
    printf("test_session_ops: ok\n");
    return 0;
}
