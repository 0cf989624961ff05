/* http.c - the HTTP/1.1 server behind kvpackd --http (see http.h): one thread polls the listening
 * socket and up to max_conns non-blocking connections. A connection reads its request line and
 * headers into a fixed buffer, gets one reply (route callback, or 400/405/431 from here), then
 * lingers (reads and drops) until the client closes so the reply is not lost to a reset: at most
 * LINGER_READ a wakeup and LINGER_DROP in all, so a client that keeps sending cannot hold the
 * thread. A new client that finds every slot taken closes the oldest lingering connection (its
 * reply is sent), else the oldest one still sending its request (408), so clients that connect
 * and stay, silent or answered, cannot keep /health waiting for their deadlines.
 * Deliberately not here: keep-alive, request bodies, chunked encoding, TLS. */
#define _GNU_SOURCE /* accept4, pipe2 */
#include "http.h"

#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MOD         "http"
#define LINGER_READ 16384u        /* bytes a lingering connection's wakeup reads and drops */
#define LINGER_DROP 65536u        /* ... and in all: more, and it is closed at once */
#define ACCEPT_REST 100000000ull  /* pause accepting after an accept error (e.g. EMFILE) */
#define ACCEPT_WARN 10000000000ull /* accept errors are logged at most this often */

typedef enum { CONN_FREE = 0, CONN_READ, CONN_WRITE, CONN_LINGER } conn_state_t;

typedef struct {
    int          fd;
    conn_state_t state;
    uint64_t     deadline_ns;           /* close (READ: after a best-effort 408) past this */
    uint64_t     seq;                   /* accept order: a full table closes its oldest reader */
    size_t       in_len;                /* READ: bytes in `in`; LINGER: bytes dropped */
    char         in[KVP_HTTP_MAX_REQ];  /* request line + headers */
    char        *out;                   /* status line, headers and body being sent */
    size_t       out_len;
    size_t       out_off;
} conn_t;

struct kvp_http {
    int                 lfd;
    int                 wake[2];        /* kvp_http_stop writes a byte to wake[1] */
    pthread_t           thread;
    kvp_http_route_cb_t route;
    void               *arg;
    uint64_t            idle_ns;
    uint64_t            linger_ns;      /* how long an answered connection may keep sending */
    uint32_t            max_conns;
    uint64_t            accept_rest_ns; /* do not accept before this (after an error) */
    uint64_t            accept_warn_ns; /* when accept errors were last logged */
    uint64_t            accept_quiet;   /* accept errors since, not logged */
    uint64_t            accepts;        /* connections accepted so far (conn_t.seq) */
    conn_t             *conns;          /* max_conns slots */
    struct pollfd      *pfd;            /* 2 + max_conns */
    conn_t            **pconn;          /* pfd[i] -> its connection (NULL for the two fds) */
};

/* ---- private: connections ---- */

static const char *reason(int code)
{
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default:  return "Internal Server Error";
    }
}

static void conn_close(conn_t *c)
{
    close(c->fd);
    kvp_free(c->out);
    c->out   = NULL;
    c->fd    = -1;
    c->state = CONN_FREE;
}

/* Send what is left of the reply; once all of it went, half-close and linger. */
static void conn_write(kvp_http_h h, conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            return;
        } else {
            conn_close(c);
            return;
        }
    }
    kvp_free(c->out);
    c->out = NULL;
    shutdown(c->fd, SHUT_WR);
    c->state       = CONN_LINGER;
    c->in_len      = 0; /* from here the bytes dropped */
    c->deadline_ns = kvp_time_ns() + (h->idle_ns < h->linger_ns ? h->idle_ns : h->linger_ns);
}

static void conn_error(kvp_http_h h, conn_t *c, int code, int head_only);

/* Queue a complete response (headers; body unless head_only) and start sending it; a 500 when the
 * headers do not fit (a route's over-long content type). */
static void conn_respond(kvp_http_h h, conn_t *c, int code, const char *type, const char *body,
                         size_t len, int head_only)
{
    char   hdr[256];
    int    hl = snprintf(hdr, sizeof(hdr),
                         "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                         "Connection: close\r\n\r\n",
                         code, reason(code), type, len,
                         code == 405 ? "Allow: GET, HEAD\r\n" : "");
    size_t blen = head_only ? 0 : len;

    if (hl < 0 || (size_t)hl >= sizeof(hdr)) {
        KVP_LOG_ERROR(MOD, "reply headers past %zu bytes (content type '%.64s...'): answering 500",
                      sizeof(hdr), type);
        if (code != 500) {
            conn_error(h, c, 500, head_only);
        } else {
            conn_close(c);
        }
        return;
    }
    c->out = kvp_malloc((size_t)hl + blen, "http reply");
    if (c->out == NULL) {
        conn_close(c);
        return;
    }
    memcpy(c->out, hdr, (size_t)hl);
    if (blen > 0) {
        memcpy(c->out + hl, body, blen);
    }
    c->out_len     = (size_t)hl + blen;
    c->out_off     = 0;
    c->state       = CONN_WRITE;
    c->deadline_ns = kvp_time_ns() + h->idle_ns;
    conn_write(h, c);
}

/* An error answer; head_only for a HEAD request (a 431 or 500 after its line parsed): no body. */
static void conn_error(kvp_http_h h, conn_t *c, int code, int head_only)
{
    char body[64];
    int  n = snprintf(body, sizeof(body), "%s\n", reason(code));

    KVP_LOG_DEBUG(MOD, "answering %d to a bad request", code);
    conn_respond(h, c, code, "text/plain; charset=utf-8", body, (size_t)n, head_only);
}

/* "METHOD SP /target SP HTTP/1.x": 0 with *head_p and path (query string cut) filled, else the
 * status code to answer (400 malformed, 405 a method other than GET or HEAD). */
static int request_line_parse(const char *line, size_t len, int *head_p, char *path,
                              size_t path_cap)
{
    size_t m = 0, t, tl;

    while (m < len && m < 16 && line[m] >= 'A' && line[m] <= 'Z') {
        m++;
    }
    if (m == 0 || m >= len || line[m] != ' ') {
        return 400;
    }
    t = m + 1;
    for (tl = 0; t + tl < len && line[t + tl] > ' ' && line[t + tl] < 0x7f; tl++) {
    }
    if (tl == 0 || tl >= path_cap || line[t] != '/' || t + tl >= len || line[t + tl] != ' ') {
        return 400;
    }
    if (len - (t + tl + 1) != 8 || (memcmp(line + t + tl + 1, "HTTP/1.1", 8) != 0 &&
                                    memcmp(line + t + tl + 1, "HTTP/1.0", 8) != 0)) {
        return 400;
    }
    if (m == 3 && memcmp(line, "GET", 3) == 0) {
        *head_p = 0;
    } else if (m == 4 && memcmp(line, "HEAD", 4) == 0) {
        *head_p = 1;
    } else {
        return 405;
    }
    memcpy(path, line + t, tl);
    path[tl] = '\0';
    path[strcspn(path, "?")] = '\0';
    return 0;
}

/* Offset just past the blank line that ends the headers, or 0 while it has not arrived. */
static size_t headers_end(const char *buf, size_t len, size_t from)
{
    while (from < len) {
        const char *nl = memchr(buf + from, '\n', len - from);
        size_t      ll;

        if (nl == NULL) {
            return 0;
        }
        ll = (size_t)(nl - (buf + from));
        if (ll == 0 || (ll == 1 && buf[from] == '\r')) {
            return (size_t)(nl - buf) + 1;
        }
        from += ll + 1;
    }
    return 0;
}

int kvp_http_request_parse(const char *buf, size_t len, size_t cap, int *head_p, char *path,
                           size_t path_cap)
{
    const char *nl;
    size_t      ll, skip = 0;
    int         code;

    while (skip < len && (buf[skip] == '\r' || buf[skip] == '\n')) {
        skip++; /* empty lines before the request line are ignored (RFC 9112 section 2.2) */
    }
    if (skip == len) {
        return len >= cap ? 400 : 0;
    }
    buf += skip;
    len -= skip;
    cap -= skip;
    nl = memchr(buf, '\n', len);
    if (nl == NULL) { /* a line of KVP_HTTP_MAX_LINE may still get its "\r\n" (in a buffer
                       * that empty lines have not filled) */
        return (len > KVP_HTTP_MAX_LINE + 1 || len >= cap) ? 400 : 0;
    }
    ll = (size_t)(nl - buf);
    if (ll > 0 && buf[ll - 1] == '\r') {
        ll--;
    }
    if (ll > KVP_HTTP_MAX_LINE) {
        return 400;
    }
    code = request_line_parse(buf, ll, head_p, path, path_cap);
    if (code != 0) {
        return code;
    }
    if (headers_end(buf, len, (size_t)(nl - buf) + 1) == 0) {
        return len >= cap ? 431 : 0;
    }
    return 200;
}

/* Act on what has arrived: wait, answer an error, or route a complete request. */
static void conn_parse(kvp_http_h h, conn_t *c)
{
    char             path[KVP_HTTP_MAX_LINE];
    kvp_http_reply_t r;
    int              head = 0;
    int code = kvp_http_request_parse(c->in, c->in_len, sizeof(c->in), &head, path, sizeof(path));

    if (code == 0) {
        return;
    }
    if (code != 200) {
        conn_error(h, c, code, head); /* head is set once the request line parsed */
        return;
    }
    memset(&r, 0, sizeof(r));
    r.code         = 200;
    r.content_type = "text/plain; charset=utf-8";
    h->route(h->arg, path, &r);
    if (r.oom) {
        conn_error(h, c, 500, head);
    } else {
        conn_respond(h, c, r.code, r.content_type, r.body ? r.body : "", r.len, head);
    }
    kvp_free(r.body);
}

static void conn_readable(kvp_http_h h, conn_t *c)
{
    char    drop[512];
    ssize_t n;

    if (c->state == CONN_LINGER) { /* bounded: a client sending on must not hold the thread */
        size_t got = 0;

        do {
            n = recv(c->fd, drop, sizeof(drop), 0);
            got += n > 0 ? (size_t)n : 0;
        } while (n > 0 && got < LINGER_READ);
        c->in_len += got;
        if (n == 0 || c->in_len > LINGER_DROP ||
            (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            conn_close(c); /* gone, or sending more than a request's trailing bytes */
        }
        return;
    }
    n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
    if (n > 0) {
        c->in_len += (size_t)n;
        conn_parse(h, c);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        conn_close(c); /* gone before asking anything */
    }
}

/* Past its deadline: a reader gets a best-effort 408, every state is closed. */
static void conn_expire(conn_t *c)
{
    static const char timeout[] = "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
                                  "Connection: close\r\n\r\n";

    if (c->state == CONN_READ) {
        ssize_t n = send(c->fd, timeout, sizeof(timeout) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n;
    }
    conn_close(c);
}

/* ---- private: the server thread ---- */

/* The slot for the next connection: a free one, else the oldest lingering connection (answered
 * already), else the oldest connection still sending its request that was accepted before this
 * round (seq <= before: one accepted now has had no chance to send); NULL when there is none of
 * these (the others wait in the backlog). */
static conn_t *conn_slot(kvp_http_h h, uint64_t before)
{
    conn_t *oldest = NULL, *linger = NULL;

    for (uint32_t i = 0; i < h->max_conns; i++) {
        conn_t *c = &h->conns[i];

        if (c->state == CONN_FREE) {
            return c;
        }
        if (c->state == CONN_LINGER && (linger == NULL || c->seq < linger->seq)) {
            linger = c;
        }
        if (c->state == CONN_READ && c->seq <= before && (oldest == NULL || c->seq < oldest->seq)) {
            oldest = c;
        }
    }
    return linger != NULL ? linger : oldest;
}

static void accept_all(kvp_http_h h)
{
    uint64_t before = h->accepts;

    for (;;) {
        conn_t *c = conn_slot(h, before);
        int     fd;

        if (c == NULL) {
            return;
        }
        fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED) {
                uint64_t now = kvp_time_ns();

                if (now - h->accept_warn_ns >= ACCEPT_WARN || h->accept_warn_ns == 0) {
                    /* out of fds it fails every ACCEPT_REST: one line per 10 s, not ten a second */
                    KVP_LOG_WARN(MOD, "accept: %s (%llu more since the last such line)",
                                 strerror(errno), (unsigned long long)h->accept_quiet);
                    h->accept_warn_ns = now;
                    h->accept_quiet   = 0;
                } else {
                    h->accept_quiet++;
                }
                h->accept_rest_ns = now + ACCEPT_REST;
            }
            return;
        }
        if (c->state != CONN_FREE) { /* the table is full: an answered or silent client gives way */
            KVP_LOG_DEBUG(MOD, "%u connections open: closing the oldest one %s", h->max_conns,
                          c->state == CONN_LINGER ? "already answered" : "still sending its request");
            conn_expire(c);
        }
        c->fd          = fd;
        c->state       = CONN_READ;
        c->in_len      = 0;
        c->seq         = ++h->accepts;
        c->deadline_ns = kvp_time_ns() + h->idle_ns;
    }
}

/* Fill the poll set; returns its size and the poll timeout in *ms_p. */
static nfds_t poll_set(kvp_http_h h, uint64_t now, int *ms_p)
{
    uint64_t next = now + 1000000000ull;
    nfds_t   n    = 0;
    int      room = 0;

    h->pfd[n]     = (struct pollfd){.fd = h->wake[0], .events = POLLIN};
    h->pconn[n++] = NULL;
    for (uint32_t i = 0; i < h->max_conns; i++) {
        conn_t *c = &h->conns[i];

        if (c->state == CONN_FREE) {
            room = 1;
            continue;
        }
        room |= c->state == CONN_READ || c->state == CONN_LINGER; /* a new client may take its
                                                                    * slot (conn_slot) */
        h->pfd[n]     = (struct pollfd){.fd = c->fd,
                                        .events = c->state == CONN_WRITE ? POLLOUT : POLLIN};
        h->pconn[n++] = c;
        next          = c->deadline_ns < next ? c->deadline_ns : next;
    }
    if (room && now >= h->accept_rest_ns) {
        h->pfd[n]     = (struct pollfd){.fd = h->lfd, .events = POLLIN};
        h->pconn[n++] = NULL;
    } else if (room) {
        next = h->accept_rest_ns < next ? h->accept_rest_ns : next;
    }
    *ms_p = next > now ? (int)((next - now) / 1000000u) + 1 : 0;
    return n;
}

static void *http_main(void *arg)
{
    kvp_http_h h = arg;

    for (;;) {
        uint64_t now = kvp_time_ns();
        int      ms;
        nfds_t   n = poll_set(h, now, &ms);

        if (poll(h->pfd, n, ms) < 0) {
            if (errno == EINTR) {
                continue;
            }
            KVP_LOG_ERROR(MOD, "poll: %s; HTTP server stops", strerror(errno));
            break;
        }
        if (h->pfd[0].revents != 0) {
            break; /* kvp_http_stop */
        }
        for (nfds_t i = 1; i < n; i++) {
            conn_t *c = h->pconn[i];

            if (h->pfd[i].revents == 0) {
                continue;
            }
            if (c == NULL) {
                accept_all(h);
            } else if (c->state == CONN_WRITE) {
                conn_write(h, c);
            } else if (c->state != CONN_FREE) {
                conn_readable(h, c);
            }
        }
        now = kvp_time_ns();
        for (uint32_t i = 0; i < h->max_conns; i++) {
            if (h->conns[i].state != CONN_FREE && h->conns[i].deadline_ns <= now) {
                conn_expire(&h->conns[i]);
            }
        }
    }
    return NULL;
}

/* Bind and listen on host:port (any address family the name resolves to). */
static kvp_status_t listen_on(const char *host, uint16_t port, int *fd_p)
{
    struct addrinfo hints = {.ai_family   = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags    = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res, *ai;
    char             svc[8];
    int              rc, fd = -1, err = 0, one = 1;

    snprintf(svc, sizeof(svc), "%u", port);
    rc = getaddrinfo(host, svc, &hints, &res);
    if (rc != 0) {
        KVP_LOG_ERROR(MOD, "cannot resolve %s: %s", host, gai_strerror(rc));
        return KVP_ERR_INVALID;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
            break;
        }
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        KVP_LOG_ERROR(MOD, "cannot listen on %s:%u: %s", host, port, strerror(err));
        return KVP_ERR_IO;
    }
    *fd_p = fd;
    return KVP_OK;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t               sl = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        return 0;
    }
    if (ss.ss_family == AF_INET6) {
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void http_free(kvp_http_h h)
{
    for (uint32_t i = 0; h->conns != NULL && i < h->max_conns; i++) {
        if (h->conns[i].state != CONN_FREE) {
            conn_close(&h->conns[i]);
        }
    }
    if (h->lfd >= 0) {
        close(h->lfd);
    }
    if (h->wake[0] >= 0) {
        close(h->wake[0]);
        close(h->wake[1]);
    }
    kvp_free(h->conns);
    kvp_free(h->pfd);
    kvp_free(h->pconn);
    kvp_free(h);
}

/* ---- API ---- */

kvp_status_t kvp_http_start(const kvp_http_params_t *params, kvp_http_h *http_p, uint16_t *port_p)
{
    kvp_http_h   h = kvp_calloc(1, sizeof(*h), "http");
    sigset_t     all, old;
    kvp_status_t s;

    if (h == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    h->lfd       = -1;
    h->wake[0]   = h->wake[1] = -1;
    h->route     = params->route;
    h->arg       = params->arg;
    h->idle_ns   = (uint64_t)(params->idle_ms ? params->idle_ms : 5000u) * 1000000u;
    h->max_conns = params->max_conns ? params->max_conns : 64u;
    h->linger_ns = (uint64_t)(params->linger_ms ? params->linger_ms : 1000u) * 1000000u;
    h->conns     = kvp_calloc(h->max_conns, sizeof(*h->conns), "http conns");
    h->pfd       = kvp_calloc(h->max_conns + 2, sizeof(*h->pfd), "http pollfds");
    h->pconn     = kvp_calloc(h->max_conns + 2, sizeof(*h->pconn), "http pollconns");
    if (h->conns == NULL || h->pfd == NULL || h->pconn == NULL) {
        s = KVP_ERR_NO_MEMORY;
        goto err_free;
    }
    for (uint32_t i = 0; i < h->max_conns; i++) {
        h->conns[i].fd = -1;
    }
    if (pipe2(h->wake, O_CLOEXEC) != 0) {
        KVP_LOG_ERROR(MOD, "pipe: %s", strerror(errno));
        h->wake[0] = h->wake[1] = -1;
        s = KVP_ERR_IO;
        goto err_free;
    }
    s = listen_on(params->host, params->port, &h->lfd);
    if (s != KVP_OK) {
        goto err_free;
    }
    /* the node's SIGTERM/SIGINT handlers belong to the transport thread, not this one */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&h->thread, NULL, http_main, h) != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        KVP_LOG_ERROR(MOD, "cannot start the HTTP thread");
        s = KVP_ERR_NO_MEMORY;
        goto err_free;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (port_p != NULL) {
        *port_p = bound_port(h->lfd);
    }
    *http_p = h;
    return KVP_OK;

err_free:
    http_free(h);
    return s;
}

void kvp_http_stop(kvp_http_h h)
{
    char    b = 1;
    ssize_t n;

    if (h == NULL) {
        return;
    }
    n = write(h->wake[1], &b, 1);
    (void)n;
    pthread_join(h->thread, NULL);
    http_free(h);
}

void kvp_http_reply_printf(kvp_http_reply_t *r, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (r->oom) {
        return;
    }
    for (int tries = 0; tries < 2; tries++) {
        size_t room = r->cap - r->len;

        va_start(ap, fmt);
        n = vsnprintf(r->body ? r->body + r->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            r->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            r->len += (size_t)n;
            return;
        }
        if (tries == 0) {
            size_t cap  = r->cap ? r->cap : 4096;
            char  *body;

            while (cap - r->len <= (size_t)n) {
                cap *= 2;
            }
            body = kvp_realloc(r->body, cap, "http body");
            if (body == NULL) {
                r->oom = 1;
                return;
            }
            r->body = body;
            r->cap  = cap;
        }
    }
    r->oom = 1;
}
