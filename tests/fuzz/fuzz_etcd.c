/* fuzz_etcd.c - the etcd gateway's JSON as kvpack parses it (cluster/etcd_json.c): lease, range
 * (and txn: the same bytes), error and watch bodies, a member's value, base64, and the watch
 * stream splitter fed in two cuts. Input: byte 0 picks the parser (and the cut), the rest is the
 * body. Properties: never a crash or a leak; base64 that decodes encodes back to the same length
 * class; a range's keys and values are NUL-terminated within their stated lengths; a txn that
 * failed comes with its range, one that succeeded without. */
#include "fuzz.h"
#include "kvpack/alloc.h"
#include "kvpack/etcd.h"

#include <string.h>

static kvp_status_t on_msg(void *arg, const char *msg, size_t len)
{
    kvp_etcd_watch_msg_t m;

    (void)arg;
    memset(&m, 0, sizeof(m));
    (void)kvp_etcd_parse_watch(msg, len, &m);
    kvp_etcd_watch_msg_clear(&m);
    return KVP_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body;
    size_t      len;
    char       *copy;

    if (size < 1) {
        return 0;
    }
    /* a private copy: the parsers must not read past len (ASan sees the exact size) */
    len  = size - 1;
    copy = kvp_malloc(len ? len : 1, "fuzz body");
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, data + 1, len);
    body = copy;
    switch (data[0] % 7) {
    case 0: {
        int64_t lease, ttl;

        (void)kvp_etcd_parse_lease(body, len, &lease, &ttl);
        break;
    }
    case 1: {
        kvp_etcd_kvs_t *kvs = NULL;

        int             ok;

        if (kvp_etcd_parse_range(body, len, &kvs) == KVP_OK) {
            for (size_t i = 0; i < kvs->n; i++) {
                if (strlen(kvs->kv[i].value) > kvs->kv[i].value_len) {
                    FUZZ_FAIL("range value %zu longer than its length", i);
                }
            }
        }
        kvp_etcd_kvs_free(kvs);
        kvs = NULL;
        if (kvp_etcd_parse_txn(body, len, &ok, &kvs) == KVP_OK && ok == (kvs != NULL)) {
            FUZZ_FAIL("txn succeeded %d with%s a range", ok, kvs ? "" : "out");
        }
        kvp_etcd_kvs_free(kvs);
        break;
    }
    case 2: {
        char msg[64];

        int  next;

        (void)kvp_etcd_parse_error(body, len, msg, sizeof(msg));
        if (memchr(msg, 0, sizeof(msg)) == NULL) {
            FUZZ_FAIL("error message not terminated");
        }
        (void)kvp_etcd_reply_check(len % 2 ? 503 : 200, body, len, msg, sizeof(msg), &next);
        if (memchr(msg, 0, sizeof(msg)) == NULL || (next != 0 && next != 1)) {
            FUZZ_FAIL("reply check: message not terminated or next %d", next);
        }
        break;
    }
    case 3: {
        kvp_etcd_watch_msg_t m;

        memset(&m, 0, sizeof(m));
        (void)kvp_etcd_parse_watch(body, len, &m);
        kvp_etcd_watch_msg_clear(&m);
        break;
    }
    case 4: {
        kvp_etcd_member_t m;

        (void)kvp_etcd_member_parse("127.0.0.1:7070", body, len, &m);
        break;
    }
    case 5: {
        uint8_t *out = kvp_malloc(len * 3 / 4 + 1, "fuzz b64");
        size_t   n;

        if (out != NULL && kvp_etcd_b64_decode(body, len, out, &n) == KVP_OK) {
            char *enc = kvp_malloc(4 * ((n + 2) / 3) + 1, "fuzz b64");

            if (enc != NULL && kvp_etcd_b64_encode(out, n, enc) != len) {
                FUZZ_FAIL("base64 of %zu bytes decoded to %zu, which encode to another length",
                          len, n);
            }
            kvp_free(enc);
        }
        kvp_free(out);
        break;
    }
    default: {
        kvp_etcd_stream_t st;
        size_t            cut = len ? (size_t)data[0] % (len + 1) : 0;

        kvp_etcd_stream_init(&st, 4096);
        if (kvp_etcd_stream_feed(&st, body, cut, on_msg, NULL) == KVP_OK) {
            (void)kvp_etcd_stream_feed(&st, body + cut, len - cut, on_msg, NULL);
        }
        kvp_etcd_stream_free(&st);
        break;
    }
    }
    kvp_free(copy);
    return 0;
}
