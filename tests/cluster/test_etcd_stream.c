/* test_etcd_stream.c - the etcd watch stream as cluster/etcd_json.c cuts and reads it, on canned
 * chunks shaped like etcd 3.4.23's POST /v3/watch output (no etcd needed): messages split across
 * chunks at every byte, braces and escaped quotes inside strings, a cut message left pending,
 * garbage between messages, the size cap; then the messages themselves: created, PUT events
 * (type left out), DELETE, a compaction cancel, an error object, bodies that are not watch
 * responses. */
#include "kvpack/etcd.h"
#include "kvpack/alloc.h"
#include "check.h"

#include <string.h>

#define BODY(s) (s), strlen(s)

/* etcd 3.4.23's output for: watch created at 2, PUT /p/a=x, DELETE /p/a (captured with curl -N) */
static const char stream[] =
    "{\"result\":{\"header\":{\"cluster_id\":\"15118495548433857066\",\"revision\":\"2\"},"
    "\"created\":true}}\n"
    "{\"result\":{\"header\":{\"revision\":\"3\"},\"events\":[{\"kv\":{\"key\":\"L3AvYQ==\","
    "\"create_revision\":\"3\",\"mod_revision\":\"3\",\"version\":\"1\",\"value\":\"eA==\"}}]}}\n"
    "{\"result\":{\"header\":{\"revision\":\"4\"},\"events\":[{\"type\":\"DELETE\","
    "\"kv\":{\"key\":\"L3AvYQ==\",\"mod_revision\":\"4\"}}]}}\n";

typedef struct {
    int    n;
    char   msg[8][512];
    int    fail_at; /* the callback's status at this message: ERR_CANCELED */
} got_t;

static kvp_status_t collect(void *arg, const char *m, size_t len)
{
    got_t *g = arg;

    CHECK(g->n < 8 && len < sizeof(g->msg[0]) && m[len] == '\0');
    memcpy(g->msg[g->n], m, len + 1);
    return ++g->n == g->fail_at ? KVP_ERR_CANCELED : KVP_OK;
}

static void test_split(void)
{
    size_t            total = strlen(stream);
    kvp_etcd_stream_t st;

    /* every split point into two chunks gives the same three messages */
    for (size_t cut = 0; cut <= total; cut++) {
        got_t g = {0};

        kvp_etcd_stream_init(&st, 1 << 16);
        CHECK_OK(kvp_etcd_stream_feed(&st, stream, cut, collect, &g));
        CHECK_OK(kvp_etcd_stream_feed(&st, stream + cut, total - cut, collect, &g));
        CHECK(g.n == 3 && kvp_etcd_stream_pending(&st) == 0);
        CHECK(strncmp(g.msg[0], "{\"result\"", 9) == 0 && strstr(g.msg[0], "created") != NULL);
        CHECK(strstr(g.msg[2], "DELETE") != NULL && g.msg[2][strlen(g.msg[2]) - 1] == '}');
        kvp_etcd_stream_free(&st);
    }
    /* one byte at a time */
    {
        got_t g = {0};

        kvp_etcd_stream_init(&st, 1 << 16);
        for (size_t i = 0; i < total; i++) {
            CHECK_OK(kvp_etcd_stream_feed(&st, stream + i, 1, collect, &g));
        }
        CHECK(g.n == 3);
        kvp_etcd_stream_free(&st);
    }
    /* braces, brackets and escaped quotes inside strings do not end a message; no separator */
    {
        static const char tricky[] = "{\"a\":\"}{\\\"]\\\\\",\"b\":[{}]}{\"c\":1}";
        got_t             g = {0};

        kvp_etcd_stream_init(&st, 1 << 16);
        CHECK_OK(kvp_etcd_stream_feed(&st, BODY(tricky), collect, &g));
        CHECK(g.n == 2 && strcmp(g.msg[0], "{\"a\":\"}{\\\"]\\\\\",\"b\":[{}]}") == 0);
        CHECK(strcmp(g.msg[1], "{\"c\":1}") == 0);
        kvp_etcd_stream_free(&st);
    }
    /* a truncated stream: the cut message stays pending, nothing is delivered for it */
    {
        got_t g = {0};

        kvp_etcd_stream_init(&st, 1 << 16);
        CHECK_OK(kvp_etcd_stream_feed(&st, stream, total - 20, collect, &g));
        CHECK(g.n == 2 && kvp_etcd_stream_pending(&st) > 0);
        kvp_etcd_stream_reset(&st);
        CHECK(kvp_etcd_stream_pending(&st) == 0);
        CHECK_OK(kvp_etcd_stream_feed(&st, BODY("{\"x\":2}"), collect, &g));
        CHECK(g.n == 3 && strcmp(g.msg[2], "{\"x\":2}") == 0);
        kvp_etcd_stream_free(&st);
    }
    /* garbage between messages, a message over the cap, the callback stopping the feed */
    {
        got_t g = {0};

        kvp_etcd_stream_init(&st, 1 << 16);
        CHECK_ST(kvp_etcd_stream_feed(&st, BODY("{\"a\":1} x{"), collect, &g), KVP_ERR_PROTOCOL);
        CHECK(g.n == 1);
        kvp_etcd_stream_free(&st);
        kvp_etcd_stream_init(&st, 16);
        CHECK_ST(kvp_etcd_stream_feed(&st, BODY("{\"aaaaaaaaaaaaaaaaaaaa\":1}"), collect, &g),
                 KVP_ERR_TOO_LARGE);
        kvp_etcd_stream_free(&st);
        g.n = 0, g.fail_at = 2;
        kvp_etcd_stream_init(&st, 1 << 16);
        CHECK_ST(kvp_etcd_stream_feed(&st, BODY(stream), collect, &g), KVP_ERR_CANCELED);
        CHECK(g.n == 2);
        kvp_etcd_stream_free(&st);
    }
}

static void test_parse(void)
{
    kvp_etcd_watch_msg_t m;
    got_t                g = {0};
    kvp_etcd_stream_t    st;

    kvp_etcd_stream_init(&st, 1 << 16);
    CHECK_OK(kvp_etcd_stream_feed(&st, BODY(stream), collect, &g));
    kvp_etcd_stream_free(&st);
    CHECK_OK(kvp_etcd_parse_watch(BODY(g.msg[0]), &m));
    CHECK(m.created && !m.canceled && m.revision == 2 && m.n == 0);
    kvp_etcd_watch_msg_clear(&m);
    CHECK_OK(kvp_etcd_parse_watch(BODY(g.msg[1]), &m)); /* a PUT: "type" left out */
    CHECK(m.n == 1 && !m.ev[0].del && strcmp(m.ev[0].key, "/p/a") == 0);
    CHECK(m.ev[0].value_len == 1 && strcmp(m.ev[0].value, "x") == 0);
    CHECK(m.ev[0].mod_revision == 3 && m.revision == 3);
    kvp_etcd_watch_msg_clear(&m);
    CHECK_OK(kvp_etcd_parse_watch(BODY(g.msg[2]), &m));
    CHECK(m.n == 1 && m.ev[0].del && strcmp(m.ev[0].key, "/p/a") == 0 && m.ev[0].value_len == 0);
    kvp_etcd_watch_msg_clear(&m);
    /* a watch from a compacted revision: created, then canceled with compact_revision */
    CHECK_OK(kvp_etcd_parse_watch(BODY("{\"result\":{\"header\":{\"cluster_id\":\"1\","
                                       "\"raft_term\":\"2\"},\"canceled\":true,"
                                       "\"compact_revision\":\"3\"}}"), &m));
    CHECK(m.canceled && m.compact_revision == 3 && m.revision == 0 && m.n == 0);
    kvp_etcd_watch_msg_clear(&m);
    /* errors: the gateway's {"error","code"} and a stream's {"error":{"grpc_code","message"}} */
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"error\":\"illegal base64 data at input byte 0\","
                                       "\"message\":\"illegal base64\",\"code\":3}"), &m),
             KVP_ERR_INVALID);
    CHECK(strstr(m.reason, "illegal base64") != NULL);
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"error\":{\"grpc_code\":14,\"http_code\":503,"
                                       "\"message\":\"etcdserver: no leader\"}}"), &m),
             KVP_ERR_PEER_UNREACHABLE); /* 14 Unavailable */
    CHECK(strcmp(m.reason, "etcdserver: no leader") == 0);
    /* not a watch response, a bad event, bad base64, a cut body */
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"header\":{}}"), &m), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"result\":{\"events\":[{\"type\":\"PUT\"}]}}"), &m),
             KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"result\":{\"events\":[{\"type\":\"MOVE\","
                                       "\"kv\":{\"key\":\"L3AvYQ==\"}}]}}"), &m),
             KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"result\":{\"events\":[{\"kv\":{\"key\":\"!!\"}}]}}"),
                                  &m), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"result\":{\"events\":{}}}"), &m), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_watch(BODY("{\"result\":{\"header\":{\"revision\":\"3\"},\"ev"), &m),
             KVP_ERR_PROTOCOL);
    CHECK(m.n == 0 && m.ev == NULL);
}

/* A member event as the watcher reads it: the key's suffix must be the value's address. */
static void test_member_kv(void)
{
    kvp_etcd_member_t m;

    CHECK_OK(kvp_etcd_member_from_kv("/kvpack/nodes/", "/kvpack/nodes/127.0.0.1:7070",
                                     BODY("{\"addr\":\"127.0.0.1:7070\",\"pid\":5}"), &m));
    CHECK(strcmp(m.addr, "127.0.0.1:7070") == 0 && m.pid == 5);
    CHECK_ST(kvp_etcd_member_from_kv("/kvpack/nodes/", "/kvpack/nodes/127.0.0.1:7071",
                                     BODY("{\"addr\":\"127.0.0.1:7070\"}"), &m), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_member_from_kv("/kvpack/nodes/", "/kvpack/nodes/garbage",
                                     BODY("{\"addr\":\"garbage\"}"), &m), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_member_from_kv("/kvpack/nodes/", "/other/127.0.0.1:7070",
                                     BODY("{\"addr\":\"127.0.0.1:7070\"}"), &m), KVP_ERR_PROTOCOL);
}

int main(void)
{
    test_split();
    test_parse();
    test_member_kv();
    printf("etcd stream: ok\n");
    return 0;
}
