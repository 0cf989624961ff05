/* test_etcd_json.c - the etcd gateway's JSON as cluster/etcd_json.c reads it, on canned bodies
 * shaped like etcd 3.4.23's replies (no etcd needed): base64 both ways (padding, bad input),
 * lease grant and keepalive replies with int64 fields as strings, an expired lease's keepalive,
 * range replies (values decoded, empty result), txn replies (succeeded; failed with the key's
 * value, or with the key absent), error bodies mapped to statuses, truncated and
 * non-JSON bodies refused, which replies move a call on to the next endpoint (5xx, not JSON, no
 * quorum) and which are answers, and a member's value written then parsed back (garbage
 * refused). */
#include "kvpack/etcd.h"
#include "kvpack/alloc.h"
#include "check.h"

#include <string.h>

#define BODY(s) (s), strlen(s)

static void test_b64(void)
{
    static const char *plain[] = {"", "f", "fo", "foo", "foob", "/kvpack/nodes/127.0.0.1:7070"};
    static const char *coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==",
                                  "L2t2cGFjay9ub2Rlcy8xMjcuMC4wLjE6NzA3MA=="};
    char               enc[128], dec[128];
    size_t             n;

    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        CHECK(kvp_etcd_b64_encode(plain[i], strlen(plain[i]), enc) == strlen(coded[i]));
        CHECK(strcmp(enc, coded[i]) == 0);
        CHECK_OK(kvp_etcd_b64_decode(coded[i], strlen(coded[i]), dec, &n));
        CHECK(n == strlen(plain[i]) && memcmp(dec, plain[i], n) == 0);
    }
    CHECK_ST(kvp_etcd_b64_decode(BODY("Zm9"), dec, &n), KVP_ERR_PROTOCOL);   /* not 4k long */
    CHECK_ST(kvp_etcd_b64_decode(BODY("Zm!v"), dec, &n), KVP_ERR_PROTOCOL);  /* bad char */
    CHECK_ST(kvp_etcd_b64_decode(BODY("Zg==Zm9v"), dec, &n), KVP_ERR_PROTOCOL); /* pad inside */
    CHECK_ST(kvp_etcd_b64_decode(BODY("Z==="), dec, &n), KVP_ERR_PROTOCOL);
}

static void test_lease(void)
{
    int64_t id = 0, ttl = 0;

    CHECK_OK(kvp_etcd_parse_lease(BODY("{\"header\":{\"cluster_id\":\"324952591200643719\","
                                       "\"revision\":\"1\"},\"ID\":\"7668682553041621261\","
                                       "\"TTL\":\"30\"}"), &id, &ttl));
    CHECK(id == 7668682553041621261ll && ttl == 30);
    /* keepalive: one "result" per reply */
    CHECK_OK(kvp_etcd_parse_lease(BODY("{\"result\":{\"header\":{},\"ID\":\"42\",\"TTL\":\"3\"}}"),
                                  &id, &ttl));
    CHECK(id == 42 && ttl == 3);
    /* an expired or revoked lease: its ID and no TTL */
    CHECK_OK(kvp_etcd_parse_lease(BODY("{\"result\":{\"header\":{},\"ID\":\"42\"}}"), &id, &ttl));
    CHECK(id == 42 && ttl == 0);
    CHECK_ST(kvp_etcd_parse_lease(BODY("{\"result\":{\"ID\":\"4x2\",\"TTL\":\"3\"}}"), &id, &ttl),
             KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_lease(BODY("{\"header\":{}}"), &id, &ttl), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_lease(BODY("{\"ID\":\"76686825530416"), &id, &ttl),
             KVP_ERR_PROTOCOL); /* truncated */
    CHECK_ST(kvp_etcd_parse_lease(BODY("<html>bad gateway</html>"), &id, &ttl), KVP_ERR_PROTOCOL);
}

static void test_range(void)
{
    kvp_etcd_kvs_t *kvs = NULL;
    char            msg[128];

    /* /kvpack/nodes/a:1 -> {"x":1}, /kvpack/nodes/b:2 -> "" (value left out) */
    CHECK_OK(kvp_etcd_parse_range(BODY("{\"header\":{\"revision\":\"9\"},\"kvs\":["
                                       "{\"key\":\"L2t2cGFjay9ub2Rlcy9hOjE=\","
                                       "\"create_revision\":\"4\",\"value\":\"eyJ4IjoxfQ==\","
                                       "\"lease\":\"7668682553041621261\"},"
                                       "{\"key\":\"L2t2cGFjay9ub2Rlcy9iOjI=\"}],\"count\":\"2\"}"),
                                  &kvs));
    CHECK(kvs != NULL && kvs->n == 2);
    if (kvs != NULL && kvs->n == 2) {
        CHECK(strcmp(kvs->kv[0].key, "/kvpack/nodes/a:1") == 0);
        CHECK(strcmp(kvs->kv[0].value, "{\"x\":1}") == 0 && kvs->kv[0].value_len == 7);
        CHECK(kvs->kv[0].lease == 7668682553041621261ll && kvs->revision == 9);
        CHECK(strcmp(kvs->kv[1].key, "/kvpack/nodes/b:2") == 0 && kvs->kv[1].value_len == 0);
    }
    kvp_etcd_kvs_free(kvs);
    CHECK_OK(kvp_etcd_parse_range(BODY("{\"header\":{\"revision\":\"3\"}}"), &kvs));
    CHECK(kvs != NULL && kvs->n == 0);
    kvp_etcd_kvs_free(kvs);
    CHECK_ST(kvp_etcd_parse_range(BODY("{\"kvs\":[{\"key\":\"L2t2cGFj"), &kvs), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_range(BODY("{\"kvs\":[{\"key\":\"!!!!\"}]}"), &kvs), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_range(BODY("{\"kvs\":{}}"), &kvs), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_range(BODY("[]"), &kvs), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_range(BODY(""), &kvs), KVP_ERR_PROTOCOL);

    CHECK_ST(kvp_etcd_parse_error(BODY("{\"error\":\"illegal base64 data at input byte 0\","
                                       "\"message\":\"illegal base64 data at input byte 0\","
                                       "\"code\":3}"), msg, sizeof(msg)), KVP_ERR_INVALID);
    CHECK(strcmp(msg, "illegal base64 data at input byte 0") == 0);
    CHECK_ST(kvp_etcd_parse_error(BODY("{\"error\":\"etcdserver: requested lease not found\","
                                       "\"code\":5}"), msg, sizeof(msg)), KVP_ERR_NOT_FOUND);
    CHECK_ST(kvp_etcd_parse_error(BODY("{\"error\":\"etcdserver: request is too large\","
                                       "\"code\":\"8\"}"), msg, sizeof(msg)), KVP_ERR_IO);
    CHECK_OK(kvp_etcd_parse_error(BODY("{\"header\":{}}"), msg, sizeof(msg)));
    CHECK_ST(kvp_etcd_parse_error(BODY("{\"error\":\"etcdser"), msg, sizeof(msg)),
             KVP_ERR_PROTOCOL);
}

/* A put-if txn's replies, as etcd 3.4.23 sent them: succeeded (the put), failed with the range
 * of the key ("succeeded" left out), failed with the key absent (no kvs). */
static void test_txn(void)
{
    kvp_etcd_kvs_t *kvs = NULL;
    int             ok  = -1;

    CHECK_OK(kvp_etcd_parse_txn(BODY("{\"header\":{\"cluster_id\":\"15118495548433857066\","
                                     "\"revision\":\"2\",\"raft_term\":\"2\"},\"succeeded\":true,"
                                     "\"responses\":[{\"response_put\":{\"header\":"
                                     "{\"revision\":\"2\"}}}]}"), &ok, &kvs));
    CHECK(ok == 1 && kvs == NULL);
    CHECK_OK(kvp_etcd_parse_txn(BODY("{\"header\":{\"revision\":\"2\"},\"responses\":["
                                     "{\"response_range\":{\"header\":{\"revision\":\"2\"},"
                                     "\"kvs\":[{\"key\":\"L2svYQ==\",\"create_revision\":\"2\","
                                     "\"mod_revision\":\"2\",\"version\":\"1\","
                                     "\"value\":\"djE=\"}],\"count\":\"1\"}}]}"), &ok, &kvs));
    CHECK(ok == 0 && kvs != NULL && kvs->n == 1);
    if (kvs != NULL && kvs->n == 1) {
        CHECK(strcmp(kvs->kv[0].key, "/k/a") == 0 && strcmp(kvs->kv[0].value, "v1") == 0);
    }
    kvp_etcd_kvs_free(kvs);
    CHECK_OK(kvp_etcd_parse_txn(BODY("{\"header\":{\"revision\":\"3\"},\"responses\":["
                                     "{\"response_range\":{\"header\":{\"revision\":\"3\"}}}]}"),
                                &ok, &kvs));
    CHECK(ok == 0 && kvs != NULL && kvs->n == 0);
    kvp_etcd_kvs_free(kvs);
    CHECK_ST(kvp_etcd_parse_txn(BODY("{\"succeeded\":\"yes\"}"), &ok, &kvs), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_txn(BODY("{\"header\":{}}"), &ok, &kvs), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_parse_txn(BODY("{\"responses\":[{\"response_range\":{\"kvs\":[{\"key"),
                                &ok, &kvs), KVP_ERR_PROTOCOL);
    CHECK(kvs == NULL);
}

/* Replies as a leaderless member, a proxy before a dead one and a healthy member send them. */
static void test_reply_check(void)
{
    char msg[128];
    int  next;

    /* no quorum: a range times out with 14, a lease grant with 2, both as HTTP 503 / 500 */
    CHECK_ST(kvp_etcd_reply_check(503, BODY("{\"error\":\"etcdserver: request timed out\","
                                            "\"message\":\"etcdserver: request timed out\","
                                            "\"code\":14}"), msg, sizeof(msg), &next),
             KVP_ERR_PEER_UNREACHABLE);
    CHECK(next == 1 && strcmp(msg, "etcdserver: request timed out") == 0);
    CHECK_ST(kvp_etcd_reply_check(500, BODY("{\"error\":\"context deadline exceeded\","
                                            "\"code\":2}"), msg, sizeof(msg), &next), KVP_ERR_IO);
    CHECK(next == 1);
    /* the same codes behind a proxy that says 200, and DeadlineExceeded */
    CHECK_ST(kvp_etcd_reply_check(200, BODY("{\"error\":\"x\",\"code\":14}"), msg, sizeof(msg),
                                  &next), KVP_ERR_PEER_UNREACHABLE);
    CHECK(next == 1);
    CHECK_ST(kvp_etcd_reply_check(200, BODY("{\"error\":\"x\",\"code\":2}"), msg, sizeof(msg),
                                  &next), KVP_ERR_IO);
    CHECK(next == 1);
    CHECK_ST(kvp_etcd_reply_check(504, BODY("{\"error\":\"x\",\"code\":4}"), msg, sizeof(msg),
                                  &next), KVP_ERR_TIMEOUT);
    CHECK(next == 1);
    /* a proxy's own page: 5xx without a gateway body; a 200 that is not JSON; an empty body */
    CHECK_ST(kvp_etcd_reply_check(503, BODY("no healthy upstream"), msg, sizeof(msg), &next),
             KVP_ERR_PEER_UNREACHABLE);
    CHECK(next == 1 && strstr(msg, "HTTP 503") != NULL);
    CHECK_ST(kvp_etcd_reply_check(502, BODY("{}"), msg, sizeof(msg), &next),
             KVP_ERR_PEER_UNREACHABLE);
    CHECK(next == 1);
    CHECK_ST(kvp_etcd_reply_check(200, BODY("<html>"), msg, sizeof(msg), &next),
             KVP_ERR_PROTOCOL);
    CHECK(next == 1);
    CHECK_ST(kvp_etcd_reply_check(200, BODY(""), msg, sizeof(msg), &next), KVP_ERR_PROTOCOL);
    CHECK(next == 1);
    /* answers: success, and real errors every member would give */
    CHECK_OK(kvp_etcd_reply_check(200, BODY("{\"header\":{\"revision\":\"7\"}}"), msg, sizeof(msg),
                                  &next));
    CHECK(next == 0);
    CHECK_ST(kvp_etcd_reply_check(404, BODY("{\"error\":\"etcdserver: requested lease not found\","
                                            "\"code\":5}"), msg, sizeof(msg), &next),
             KVP_ERR_NOT_FOUND);
    CHECK(next == 0);
    CHECK_ST(kvp_etcd_reply_check(400, BODY("{\"error\":\"illegal base64\",\"code\":3}"), msg,
                                  sizeof(msg), &next), KVP_ERR_INVALID);
    CHECK(next == 0);
    CHECK_ST(kvp_etcd_reply_check(400, BODY("{\"error\":\"too large\",\"code\":8}"), msg,
                                  sizeof(msg), &next), KVP_ERR_IO);
    CHECK(next == 0);
}

static void test_member(void)
{
    kvp_etcd_member_t m, back;
    char              json[512];

    memset(&m, 0, sizeof(m));
    strcpy(m.addr, "10.0.0.7:7070");
    strcpy(m.data_dir, "/var/lib/kvpack \"a\"");
    m.pid   = 4242;
    m.since = 1795975864;
    CHECK_OK(kvp_etcd_member_json(&m, json, sizeof(json)));
    CHECK_OK(kvp_etcd_member_parse("10.0.0.7:7070", BODY(json), &back));
    CHECK(memcmp(&m, &back, sizeof(m)) == 0);
    CHECK_ST(kvp_etcd_member_json(&m, json, 16), KVP_ERR_TOO_LARGE);
    /* the value must name the key's address; garbage is refused */
    CHECK_ST(kvp_etcd_member_parse("10.0.0.8:7070", BODY(json), &back), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_member_parse("10.0.0.7:7070", BODY("garbage"), &back), KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_member_parse("10.0.0.7:7070", BODY("{\"pid\":1}"), &back),
             KVP_ERR_PROTOCOL);
    CHECK_ST(kvp_etcd_member_parse("10.0.0.7:7070", BODY("{\"addr\":7070}"), &back),
             KVP_ERR_PROTOCOL);
    CHECK_OK(kvp_etcd_member_parse("10.0.0.7:7070", BODY("{\"addr\":\"10.0.0.7:7070\"}"), &back));
    CHECK(back.pid == 0 && back.data_dir[0] == '\0');
}

int main(void)
{
    test_b64();
    test_lease();
    test_range();
    test_txn();
    test_reply_check();
    test_member();
    return kvp_test_result("test_etcd_json");
}
