/* http.h - a small HTTP/1.1 server for kvpackd's /health and /metrics (cluster-internal).
 * One thread, plain POSIX sockets, non-blocking connections multiplexed with poll(2): GET and
 * HEAD only, one request per connection (Connection: close), a bounded request size and a
 * per-connection deadline, so a silent or slow client holds one slot, never the thread, and
 * gives its slot up to a new client when every slot is taken.
 * Main flow: kvp_http_start -> http_main (poll loop) -> conn_readable -> kvp_http_request_parse ->
 *            route callback -> conn_write -> linger until the client closes -> close. */
#ifndef KVPACK_CLUSTER_HTTP_H
#define KVPACK_CLUSTER_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "kvpack/status.h"

#define KVP_HTTP_MAX_LINE 2048u /* longest request line accepted (else 400) */
#define KVP_HTTP_MAX_REQ  8192u /* request line + headers (else 431) */

typedef struct kvp_http *kvp_http_h;

/* What a route answers: code 200 and text/plain unless it says otherwise. */
typedef struct {
    int         code;         /* HTTP status code */
    const char *content_type; /* static string */
    char       *body;         /* grown by kvp_http_reply_printf; freed by the server */
    size_t      len;
    size_t      cap;
    int         oom;          /* an append failed: the server answers 500 */
} kvp_http_reply_t;

/* Called on the server thread for every well-formed GET or HEAD request. path is the target
 * without its query string (borrowed). HEAD gets the same headers with no body. */
typedef void (*kvp_http_route_cb_t)(void *arg, const char *path, kvp_http_reply_t *reply);

typedef struct {
    const char         *host;      /* numeric address or name to bind; borrowed */
    uint16_t            port;      /* 0 = a free port */
    kvp_http_route_cb_t route;
    void               *arg;       /* passed to route */
    uint32_t            idle_ms;   /* a connection that has not sent its request, or does not take
                                    * its reply, within this is closed; 0 = 5000 */
    uint32_t            max_conns; /* connections served at once; 0 = 64. One more closes the
                                    * oldest answered one, else the oldest one still sending its
                                    * request (408); while every one is being answered, others
                                    * wait in the listen backlog */
    uint32_t            linger_ms; /* an answered connection is read (and dropped) until the
                                    * client closes, at most this long (and idle_ms); 0 = 1000 */
} kvp_http_params_t;

/* Bind, listen and start the server thread; *port_p (may be NULL) gets the bound port.
 * KVP_ERR_INVALID for a host that does not resolve, KVP_ERR_IO when bind/listen fail (logged). */
kvp_status_t kvp_http_start(const kvp_http_params_t *params, kvp_http_h *http_p, uint16_t *port_p);
/* Stop the thread and close every connection. NULL is a no-op. */
void         kvp_http_stop(kvp_http_h http);

/* What the first len bytes of a request buffer of cap bytes ask for (the server's parser, pure,
 * for tests), after any CR and LF bytes before the request line (RFC 9112 section 2.2; a buffer
 * full of them is 400): 0 while incomplete; 200 for a complete GET or HEAD, *head_p and path (the target
 * up to its query string, shorter than path_cap) filled; else the status to answer: 400 (a
 * malformed or over-long request line), 405 (a method other than GET or HEAD) or 431 (the
 * headers filled all cap bytes). */
int kvp_http_request_parse(const char *buf, size_t len, size_t cap, int *head_p, char *path,
                           size_t path_cap);

/* Append formatted text to the reply body (sets reply->oom on failure). */
void kvp_http_reply_printf(kvp_http_reply_t *reply, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
