/* fuzz_http.c - the request parser of kvpackd --http (cluster/http.c, compiled into this
 * harness: kvp_http_request_parse, what the server runs on every read) on arbitrary bytes, as
 * they fill its request buffer. Properties: never a crash or an out-of-bounds read; the answer is
 * one the server knows (0 wait, 200, 400, 405, 431); a full buffer is always answered; a routed
 * request is a GET or HEAD as the bytes after any leading CR and LF say, its path starts with '/', is printable ASCII without
 * a query string and fits its buffer; and what a prefix of the bytes decided stands: the answer to
 * every prefix is "wait" or the answer to the whole (a request split across reads gets the same
 * answer however it is split). */
#include "fuzz.h"
#include "http.h" /* cluster */

#include <string.h>

static int parse(const uint8_t *buf, size_t len, int *head_p, char *path)
{
    int code = kvp_http_request_parse((const char *)buf, len, KVP_HTTP_MAX_REQ, head_p, path,
                                      KVP_HTTP_MAX_LINE);

    if (code != 0 && code != 200 && code != 400 && code != 405 && code != 431) {
        FUZZ_FAIL("%zu bytes: answer %d", len, code);
    }
    return code;
}

static void check_prefix(const uint8_t *data, size_t k, size_t len, int code)
{
    char p2[KVP_HTTP_MAX_LINE];
    int  ph, pc = parse(data, k, &ph, p2);

    if (pc != 0 && pc != code) {
        FUZZ_FAIL("the first %zu of %zu bytes answer %d, all of them %d", k, len, pc, code);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char    path[KVP_HTTP_MAX_LINE];
    size_t         len  = size < KVP_HTTP_MAX_REQ ? size : KVP_HTTP_MAX_REQ;
    size_t         skip = 0; /* empty lines before the request line (RFC 9112 section 2.2) */
    int            head = -1, code;
    const uint8_t *req, *nl;

    code = parse(data, len, &head, path);
    if (len == KVP_HTTP_MAX_REQ && code == 0) {
        FUZZ_FAIL("a full %zu-byte buffer is left waiting", len);
    }
    while (skip < len && (data[skip] == '\r' || data[skip] == '\n')) {
        skip++;
    }
    req = data + skip;
    if (code == 200) {
        size_t pl = strnlen(path, sizeof(path));

        if ((head == 0 && memcmp(req, "GET ", 4) != 0) ||
            (head == 1 && memcmp(req, "HEAD ", 5) != 0) || (head != 0 && head != 1)) {
            FUZZ_FAIL("routed as %s: \"%.5s\"", head == 1 ? "HEAD" : "GET", (const char *)req);
        }
        if (pl == 0 || pl == sizeof(path) || path[0] != '/' || strchr(path, '?') != NULL) {
            FUZZ_FAIL("routed path of %zu bytes \"%.40s\"", pl, path);
        }
        for (size_t i = 0; i < pl; i++) {
            if ((uint8_t)path[i] <= ' ' || (uint8_t)path[i] >= 0x7f) {
                FUZZ_FAIL("path byte %zu is 0x%02x", i, (uint8_t)path[i]);
            }
        }
    }
    /* prefixes, as reads would deliver them: every length up to 64, 64 more spread evenly, and
     * the request line without its '\n' (where a line of the longest length splits) */
    for (size_t k = 0; k < len; k += k < 64 ? 1 : len / 64 + 1) {
        check_prefix(data, k, len, code);
    }
    nl = memchr(req, '\n', len - skip);
    if (nl != NULL) {
        check_prefix(data, (size_t)(nl - data), len, code);
    }
    return 0;
}
