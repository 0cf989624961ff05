/* stream.c - streamed put (kvpack.h): a prefill engine pushes each layer's pages as it encodes
 * them and a shipping thread of the stream's own sends them to the node meanwhile, so layer l
 * ships while layer l + 1 encodes (DESIGN 5, "Prefill put"). The stream owns a client (its own
 * connection: a client is one thread's) and a FIFO of pushed page lists; the pages stay the
 * caller's until finish or close returns. finish waits for the FIFO to drain, then sends the
 * record with the last pages (kvp_client_put_session_pages), so the record lands only after every
 * pushed page did. The shipper takes everything queued at once (one pipelined put of all of it),
 * so a fast producer does not make it drain its in-flight batches after every push. The first
 * error stops the shipping: later pushes return it, finish reports it. The record needs every
 * page of the session on the node it lands on: the lists shipped so far are kept (the page
 * pointers, until finish), and when the client connects anew mid-session (its node restarted and
 * lost the loose pages with the old process, or only the connection dropped) all of them are put
 * again on the new connection before anything else (the node takes a page put twice): sent_sync.
 * Main flow: kvp_put_stream_open -> push ... push -> finish (shipper: sent_sync, i.e.
 * kvp_client_put_pages per list not yet on the connection) -> close. */
#include "client_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <pthread.h>
#include <string.h>

#define MOD "client"

/* Tries sent_sync makes after its first one lost the connection, each on a new one carrying the
 * session again, before the session fails: a node that keeps dropping it is not tried for ever. */
#define RESYNC_MAX 2

typedef struct push {
    struct push *next;
    size_t       n;
    const void **pages; /* borrowed pointers, copied array */
    size_t      *lens;
} push_t;

struct kvp_put_stream {
    kvp_client_h    c;
    uint64_t        ns;
    pthread_t       thread;
    pthread_mutex_t mu;
    pthread_cond_t  wake;    /* a push queued, or closing */
    pthread_cond_t  drained; /* the FIFO emptied and the shipper is idle */
    push_t         *head, *tail;
    int             busy;    /* the shipper is sending a list (outside the lock) */
    int             closing;
    kvp_status_t    first;   /* the first error since open or the last finish */
    /* the session's lists taken off the FIFO, oldest first: the shipper's while it is busy,
     * finish's while it idles; dropped at finish */
    push_t         *sent, *sent_tail;
    push_t         *unput;   /* the first of them not yet put on connection generation gen */
    uint64_t        gen;     /* c->conn_gen the lists before unput went on */
};

/* ---- private ---- */

static void push_free(push_t *p)
{
    kvp_free(p); /* one allocation: the node and its arrays */
}

/* Drop everything queued (locked). */
static void queue_drop(kvp_put_stream_h s)
{
    while (s->head != NULL) {
        push_t *p = s->head;

        s->head = p->next;
        push_free(p);
    }
    s->tail = NULL;
}

/* Everything queued as one list (locked; the FIFO is left empty): one kvp_client_put_pages then
 * keeps its batches in flight across the pushes instead of draining after each. NULL: no memory
 * (the FIFO is left as it was). */
static push_t *queue_take_all(kvp_put_stream_h s)
{
    push_t *all, *p = s->head;
    size_t  n = 0, k = 0;

    if (p->next == NULL) {
        s->head = s->tail = NULL;
        return p;
    }
    for (push_t *q = p; q != NULL; q = q->next) {
        n += q->n;
    }
    all = kvp_malloc(sizeof(*all) + n * (sizeof(*all->pages) + sizeof(*all->lens)),
                     "put stream merge");
    if (all == NULL) {
        return NULL;
    }
    all->next  = NULL;
    all->n     = n;
    all->pages = (const void **)(void *)(all + 1);
    all->lens  = (size_t *)(void *)(all->pages + n);
    while (p != NULL) {
        push_t *next = p->next;

        memcpy(all->pages + k, p->pages, p->n * sizeof(*p->pages));
        memcpy(all->lens + k, p->lens, p->n * sizeof(*p->lens));
        k += p->n;
        push_free(p);
        p = next;
    }
    s->head = s->tail = NULL;
    return all;
}

/* Drop the session's kept lists (a finish or close: the session is over). */
static void sent_drop(kvp_put_stream_h s)
{
    while (s->sent != NULL) {
        push_t *p = s->sent;

        s->sent = p->next;
        push_free(p);
    }
    s->sent_tail = s->unput = NULL;
}

/* Keep p as the session's newest list, not yet put. */
static void sent_add(kvp_put_stream_h s, push_t *p)
{
    p->next = NULL;
    if (s->sent_tail != NULL) {
        s->sent_tail->next = p;
    } else {
        s->sent = p;
    }
    s->sent_tail = p;
    if (s->unput == NULL) {
        s->unput = p;
    }
}

/* Pages in the lists put before unput: the ones a new connection has to carry again. */
static size_t sent_put_pages(kvp_put_stream_h s)
{
    size_t n = 0;

    for (const push_t *p = s->sent; p != s->unput; p = p->next) {
        n += p->n;
    }
    return n;
}

/* Put the kept lists from unput on (the client's connection: a new one when the old one is
 * gone, kvp_client_conn_ensure). */
static kvp_status_t sent_put_rest(kvp_put_stream_h s)
{
    kvp_status_t st = KVP_OK;

    while (s->unput != NULL && st == KVP_OK) {
        st = kvp_client_put_pages(s->c, s->ns, s->unput->pages, s->unput->lens, s->unput->n);
        s->unput = st == KVP_OK ? s->unput->next : s->unput;
    }
    return st;
}

/* Every list of the session kept so far on the client's connection, the one the record will go
 * on. When that connection is a new one (the old one dropped, or its node restarted: the pages
 * put on the old one may be gone), every list is put again on it, and likewise when it is made
 * anew during a put or a put fails KVP_ERR_PEER_GONE (the connection died under it), at most
 * RESYNC_MAX times (then the status, KVP_ERR_PEER_GONE when the puts themselves succeeded).
 * Any other failure is returned at once. The shipper, or finish while the shipper idles. */
static kvp_status_t sent_sync(kvp_put_stream_h s)
{
    kvp_status_t st = KVP_OK;

    for (int round = 0; round <= RESYNC_MAX; round++) {
        st = kvp_client_conn_ensure(s->c);
        if (st != KVP_OK) {
            return st;
        }
        if (s->c->conn_gen != s->gen) {
            if (s->unput != s->sent) {
                KVP_LOG_WARN(MOD, "put stream to %s:%u: connected anew mid-session: the %zu pages "
                             "put before go again", s->c->host, s->c->port, sent_put_pages(s));
            }
            s->gen   = s->c->conn_gen;
            s->unput = s->sent;
        }
        st = sent_put_rest(s);
        if (st == KVP_OK && s->c->conn_gen == s->gen) {
            return KVP_OK;
        }
        if (st != KVP_OK && st != KVP_ERR_PEER_GONE) {
            return st;
        }
    }
    KVP_LOG_WARN(MOD, "put stream to %s:%u: the connection dropped %d times in one ship: the "
                 "session fails", s->c->host, s->c->port, RESYNC_MAX + 1);
    return st == KVP_OK ? KVP_ERR_PEER_GONE : st;
}

static void *shipper_main(void *arg)
{
    kvp_put_stream_h s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        push_t      *p;
        kvp_status_t st;

        while (s->head == NULL && !s->closing) {
            pthread_cond_wait(&s->wake, &s->mu);
        }
        if (s->closing) {
            break;
        }
        if (s->first != KVP_OK) { /* after an error nothing more ships */
            queue_drop(s);
            pthread_cond_broadcast(&s->drained);
            continue;
        }
        p = queue_take_all(s);
        if (p == NULL) { /* no memory to merge: ship the oldest list alone */
            p       = s->head;
            s->head = p->next;
            if (s->head == NULL) {
                s->tail = NULL;
            }
        }
        s->busy = 1;
        pthread_mutex_unlock(&s->mu);
        sent_add(s, p); /* kept until finish: a new connection carries it again */
        st = sent_sync(s);
        pthread_mutex_lock(&s->mu);
        s->busy = 0;
        if (st != KVP_OK && s->first == KVP_OK) {
            KVP_LOG_INFO(MOD, "put stream: a pushed page list failed: %s", kvp_status_str(st));
            s->first = st;
        }
        if (s->head == NULL) {
            pthread_cond_broadcast(&s->drained);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- API ---- */

kvp_status_t kvp_put_stream_open(const kvp_client_params_t *params, uint64_t ns,
                                 kvp_put_stream_h *stream_p)
{
    kvp_put_stream_h s;
    kvp_status_t     st;

    if (params == NULL || stream_p == NULL) {
        KVP_LOG_ERROR(MOD, "put stream: NULL params or output pointer");
        return KVP_ERR_INVALID;
    }
    s = kvp_calloc(1, sizeof(*s), "put stream");
    if (s == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    st = kvp_client_create(params, &s->c);
    if (st != KVP_OK) {
        goto err_free;
    }
    s->ns = ns;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->drained, NULL);
    if (pthread_create(&s->thread, NULL, shipper_main, s) != 0) {
        KVP_LOG_ERROR(MOD, "put stream: cannot start its shipping thread");
        st = KVP_ERR_NO_MEMORY;
        goto err_sync;
    }
    *stream_p = s;
    return KVP_OK;

err_sync:
    pthread_cond_destroy(&s->drained);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    kvp_client_destroy(s->c);
err_free:
    kvp_free(s);
    return st;
}

kvp_status_t kvp_put_stream_push(kvp_put_stream_h s, const void *const *pages, const size_t *lens,
                                 size_t n)
{
    push_t      *p;
    kvp_status_t st;

    if (s == NULL || (n > 0 && (pages == NULL || lens == NULL))) {
        KVP_LOG_ERROR(MOD, "put stream push: NULL stream, pages or lengths");
        return KVP_ERR_INVALID;
    }
    if (n == 0) {
        pthread_mutex_lock(&s->mu);
        st = s->first;
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    p = kvp_malloc(sizeof(*p) + n * (sizeof(*p->pages) + sizeof(*p->lens)), "put stream push");
    if (p == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    p->next  = NULL;
    p->n     = n;
    p->pages = (const void **)(void *)(p + 1);
    p->lens  = (size_t *)(void *)(p->pages + n);
    memcpy(p->pages, pages, n * sizeof(*p->pages));
    memcpy(p->lens, lens, n * sizeof(*p->lens));
    pthread_mutex_lock(&s->mu);
    st = s->first;
    if (st == KVP_OK) {
        if (s->tail != NULL) {
            s->tail->next = p;
        } else {
            s->head = p;
        }
        s->tail = p;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    if (st != KVP_OK) {
        push_free(p);
    }
    return st;
}

kvp_status_t kvp_put_stream_finish(kvp_put_stream_h s, const char *sid,
                                   const kvp_session_desc_t *desc, const void *const *pages,
                                   const size_t *lens, size_t n, uint64_t version)
{
    kvp_status_t st;

    if (s == NULL) {
        KVP_LOG_ERROR(MOD, "put stream finish: NULL stream");
        return KVP_ERR_INVALID;
    }
    pthread_mutex_lock(&s->mu);
    while (s->head != NULL || s->busy) {
        pthread_cond_wait(&s->drained, &s->mu);
    }
    st       = s->first;
    s->first = KVP_OK; /* the stream starts afresh for the next session */
    pthread_mutex_unlock(&s->mu);
    /* the shipper is idle and stays so until the next push: this thread may use the client */
    st = st == KVP_OK ? sent_sync(s) : st; /* every pushed page on the record's connection */
    if (st != KVP_OK) {
        KVP_LOG_ERROR(MOD, "put stream: session %s not written: its pages failed: %s",
                      sid != NULL ? sid : "(null)", kvp_status_str(st));
        sent_drop(s);
        return st;
    }
    st = kvp_client_put_session_pages(s->c, s->ns, sid, desc, pages, lens, n, version);
    /* a page the record names missing once it went on a new connection: the pushed pages may
     * have been the old process's (a restarted node). Any other refusal is the record's own. */
    st = st == KVP_ERR_NOT_FOUND && s->c->conn_gen != s->gen ? KVP_ERR_PEER_GONE : st;
    sent_drop(s);
    return st;
}

void kvp_put_stream_close(kvp_put_stream_h s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    queue_drop(s); /* unfinished: what was not shipped yet is not */
    s->closing = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    sent_drop(s);
    pthread_cond_destroy(&s->drained);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    kvp_client_destroy(s->c);
    kvp_free(s);
}
