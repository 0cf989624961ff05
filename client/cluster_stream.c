/* cluster_stream.c - the streamed put over a cluster (kvpack/cluster.h, kvp_cluster_stream_*):
 * one kvp_put_stream per destination (the session's first r ranked nodes and the caller's "also"
 * nodes, e.g. a decode node's kvpackd), each with its own connection and shipping thread, so
 * every destination receives layer l while the prefill encodes layer l + 1. The stream keeps the
 * pointers of every pushed page (the pages stay the caller's until finish returns), so a
 * destination whose stream failed for its connection (its node died or timed out; a restart or
 * a dropped connection the put stream mends itself by re-shipping) is sent the whole session
 * again on a fresh stream at finish, and a ranked node that still fails is replaced by the next
 * node of the rank, which gets the whole session in one go.
 * Main flow: kvp_cluster_stream_open (rank, dst_open per node) -> push (to each live stream) ->
 * finish (kvp_put_stream_finish per stream at one version, then replace) -> close. */
#include "cluster_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/num.h"

#include <stdio.h>
#include <stdbool.h>
#include <string.h>

#define MOD "cluster"

/* One destination: a ranked node or an also node. */
typedef struct {
    char             addr[KVP_ETCD_ADDR_MAX];
    kvp_put_stream_h st;     /* NULL: it never connected */
    kvp_status_t     status; /* its first failure (KVP_OK while it is fine) */
    const char      *stage;  /* static: where status came from */
    int              mirror; /* also only: the ranked dst of the same address, + 1 (0: none) */
} dst_t;

struct kvp_cluster_stream {
    kvp_cluster_h cluster;
    uint64_t      ns;
    char          sid[KVP_SID_MAX];
    dst_t         ranked[KVP_CLUSTER_MAX_NODES];
    uint32_t      n_ranked;
    dst_t         also[KVP_CLUSTER_STREAM_ALSO_MAX];
    uint32_t      n_also;
    kvp_status_t  stop;      /* a ranked node refused a page for good: every node would */
    bool          finished;  /* finish ran: its streams are released, nothing more goes out */
    dst_t         passed[KVP_CLUSTER_MAX_NODES]; /* ranked nodes open passed over (st NULL) */
    uint32_t      n_passed;
    const void  **pages;     /* every pushed page, in push order (borrowed) */
    size_t       *lens;
    size_t        n, cap;
};

/* ---- private ---- */

/* d->addr = addr (checked by kvp_cluster_addr_ok, or a listed node's) */
static void dst_addr(dst_t *d, const char *addr)
{
    size_t l = strnlen(addr, sizeof(d->addr) - 1);

    memcpy(d->addr, addr, l);
    d->addr[l] = '\0';
}

/* The slot that keeps addr's put stream between sessions (*ns_p: the namespace of the stream in
 * it): its node's, or an also entry (a free one when want_free and addr has none); NULL when
 * there is none. */
static kvp_put_stream_h *kept_slot(kvp_cluster_h c, const char *addr, int want_free,
                                   uint64_t **ns_p)
{
    kvp_cluster_kept_t *free_one = NULL;

    for (uint32_t i = 0; i < c->n; i++) {
        if (strcmp(c->peer[i], addr) == 0) {
            *ns_p = &c->node[i].stream_ns;
            return &c->node[i].stream;
        }
    }
    for (uint32_t i = 0; i < KVP_CLUSTER_STREAM_ALSO_MAX; i++) {
        if (c->also[i].stream != NULL && strcmp(c->also[i].addr, addr) == 0) {
            *ns_p = &c->also[i].stream_ns;
            return &c->also[i].stream;
        }
        free_one = free_one == NULL && c->also[i].stream == NULL ? &c->also[i] : free_one;
    }
    if (want_free && free_one != NULL) {
        size_t l = strnlen(addr, sizeof(free_one->addr) - 1);

        memcpy(free_one->addr, addr, l);
        free_one->addr[l] = '\0';
        *ns_p             = &free_one->stream_ns;
        return &free_one->stream;
    }
    return NULL;
}

/* d's stream: the one kept from an earlier session to addr in this namespace (its connection is
 * up already), else a new one. The stream owns it until dst_release. */
static kvp_status_t dst_open(kvp_cluster_stream_h s, dst_t *d, const char *addr)
{
    kvp_cluster_h     c = s->cluster;
    kvp_put_stream_h *slot;
    uint64_t         *ns;

    dst_addr(d, addr);
    d->stage = "connect";
    slot     = kept_slot(c, d->addr, 0, &ns);
    if (slot != NULL && *slot != NULL && *ns == s->ns) {
        d->st     = *slot;
        *slot     = NULL;
        d->status = KVP_OK;
        return KVP_OK;
    }
    c->cp.server = d->addr;
    d->status    = kvp_put_stream_open(&c->cp, s->ns, &d->st);
    return d->status;
}

/* Give d's stream back to the handle for the next session when it carried this one through
 * (keep), else close it (its connection may be gone, or pages of an unfinished session may be
 * queued on it). A slot holding another namespace's stream keeps that one. Only an also node's
 * stream may take a free also slot: a ranked node that left the list meanwhile (etcd) is closed,
 * not parked there for the handle's life. */
static void dst_release(kvp_cluster_stream_h s, dst_t *d, int keep)
{
    int               also = d >= s->also && d < s->also + KVP_CLUSTER_STREAM_ALSO_MAX;
    uint64_t         *ns;
    kvp_put_stream_h *slot = keep && d->st != NULL && d->status == KVP_OK
                                 ? kept_slot(s->cluster, d->addr, also, &ns) : NULL;

    if (slot != NULL && *slot == NULL) {
        *slot = d->st;
        *ns   = s->ns;
    } else {
        kvp_put_stream_close(d->st);
    }
    d->st = NULL;
}

/* Close every destination's stream, none kept (a stream not finished, or stopped). */
static void dsts_release_all(kvp_cluster_stream_h s)
{
    for (uint32_t i = 0; i < s->n_ranked; i++) {
        dst_release(s, &s->ranked[i], 0);
    }
    for (uint32_t j = 0; j < s->n_also; j++) {
        dst_release(s, &s->also[j], 0);
    }
}

/* Remember the pushed pointers (for a replacement at finish). */
static kvp_status_t keep_pages(kvp_cluster_stream_h s, const void *const *pages, const size_t *lens,
                               size_t n)
{
    if (s->n + n > s->cap) {
        size_t       cap = s->cap ? s->cap : 64;
        const void **p;
        size_t      *l;

        while (cap < s->n + n) {
            cap *= 2;
        }
        p = kvp_realloc(s->pages, cap * sizeof(*p), "cluster stream pages");
        if (p == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        s->pages = p;
        l = kvp_realloc(s->lens, cap * sizeof(*l), "cluster stream pages");
        if (l == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        s->lens = l;
        s->cap  = cap;
    }
    memcpy(s->pages + s->n, pages, n * sizeof(*pages));
    memcpy(s->lens + s->n, lens, n * sizeof(*lens));
    s->n += n;
    return KVP_OK;
}

/* The current index of addr in the cluster's list (kvp_cluster_size: it left the list). */
static uint32_t node_index(kvp_cluster_h c, const char *addr)
{
    for (uint32_t i = 0; i < c->n; i++) {
        if (strcmp(c->peer[i], addr) == 0) {
            return i;
        }
    }
    return c->n;
}

/* Add what the node at addr did to r (by its index now; the handle's skip list is updated only
 * when mark and the node is still listed). */
static void report_dst(kvp_cluster_h c, kvp_cluster_report_t *r, const dst_t *d, int mark)
{
    uint32_t node = node_index(c, d->addr);

    if (mark && node < c->n) {
        kvp_cluster_report_add(c, r, node, d->status, d->stage);
    } else if (r->n_tried < KVP_CLUSTER_MAX_NODES) {
        r->tried[r->n_tried++] = (kvp_cluster_try_t){node, d->status, d->stage};
    }
}

/* Index + 1 of the destination at addr among a[0..n) (0: none). */
static int dst_find(const dst_t *a, uint32_t n, const char *addr)
{
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(a[i].addr, addr) == 0) {
            return (int)i + 1;
        }
    }
    return 0;
}

/* Parse also into s->also and open each (an address already ranked mirrors that stream). */
static kvp_status_t also_open(kvp_cluster_stream_h s, const char *also)
{
    char buf[KVP_CLUSTER_STREAM_ALSO_MAX * KVP_ETCD_ADDR_MAX], *list = buf;

    if (also == NULL || *also == '\0') {
        return KVP_OK;
    }
    if (strlen(also) >= sizeof(buf)) {
        KVP_LOG_ERROR(MOD, "stream: the also list is too long (%zu bytes)", strlen(also));
        return KVP_ERR_INVALID;
    }
    snprintf(buf, sizeof(buf), "%s", also);
    for (char *p; (p = kvp_list_item_next(&list)) != NULL;) {
        dst_t *d;

        if (!kvp_cluster_addr_ok(p, "stream: also node")) {
            return KVP_ERR_INVALID;
        }
        if (s->n_also == KVP_CLUSTER_STREAM_ALSO_MAX) {
            KVP_LOG_ERROR(MOD, "stream: more than %u also nodes", KVP_CLUSTER_STREAM_ALSO_MAX);
            return KVP_ERR_INVALID;
        }
        for (uint32_t i = 0; i < s->n_also; i++) {
            if (strcmp(s->also[i].addr, p) == 0) {
                KVP_LOG_ERROR(MOD, "stream: also node %s listed twice", p);
                return KVP_ERR_INVALID;
            }
        }
        d = &s->also[s->n_also++];
        d->mirror = dst_find(s->ranked, s->n_ranked, p);
        if (d->mirror != 0) {
            dst_addr(d, p);
        } else if (dst_open(s, d, p) != KVP_OK) {
            KVP_LOG_WARN(MOD, "stream: also node %s: %s (the ranked nodes still get the session)",
                         p, kvp_status_str(d->status));
        }
    }
    return KVP_OK;
}

/* Finish one destination's stream (record at version) unless it already failed. A stream that
 * failed for its connection (unreachable: its node died, timed out, or was still down when the
 * put stream connected anew; a restart it reached it re-ships to itself) is opened afresh once
 * and carries the whole session again, so a node that came back still gets its copy before a
 * replacement is tried. */
static void dst_finish(kvp_cluster_stream_h s, dst_t *d, const kvp_session_desc_t *desc,
                       const void *const *pages, const size_t *lens, size_t n, uint64_t version)
{
    if (d->st != NULL && d->status == KVP_OK) {
        d->status = kvp_put_stream_finish(d->st, s->sid, desc, pages, lens, n, version);
        d->stage  = "stream";
    }
    if (d->st != NULL && kvp_cluster_status_unreachable(d->status) &&
        d->status != KVP_ERR_SHUTTING_DOWN) { /* a stopping node is not asked again */
        kvp_cluster_h c = s->cluster;

        kvp_put_stream_close(d->st);
        d->st        = NULL;
        c->cp.server = d->addr;
        d->status    = kvp_put_stream_open(&c->cp, s->ns, &d->st);
        d->status    = d->status == KVP_OK && s->n > 0
                           ? kvp_put_stream_push(d->st, s->pages, s->lens, s->n) : d->status;
        d->status    = d->status == KVP_OK ? kvp_put_stream_finish(d->st, s->sid, desc, pages,
                                                                   lens, n, version)
                                           : d->status;
        d->stage     = "stream (reconnected)";
    }
}

/* The whole session (every pushed page, then the record with the last pages) to one node in
 * place of a failed stream. */
static kvp_status_t replace_one(kvp_cluster_stream_h s, uint32_t node,
                                const kvp_session_desc_t *desc, const void *const *pages,
                                const size_t *lens, size_t n, uint64_t version,
                                kvp_cluster_report_t *r)
{
    kvp_client_h cl;
    kvp_status_t st = kvp_cluster_node_open(s->cluster, node, r, &cl);

    if (st != KVP_OK) {
        return st; /* reported by node_open */
    }
    if (s->n > 0) {
        st = kvp_client_put_pages(cl, s->ns, s->pages, s->lens, s->n);
    }
    if (st == KVP_OK) {
        st = kvp_client_put_session_pages(cl, s->ns, s->sid, desc, pages, lens, n, version);
    }
    kvp_cluster_report_add(s->cluster, r, node, st, "replacement");
    return st;
}

/* ---- API ---- */

kvp_status_t kvp_cluster_stream_open(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                     const char *also, kvp_cluster_stream_h *stream_p)
{
    kvp_cluster_stream_h s;
    kvp_cluster_route_t  rt;
    kvp_status_t         st, first = KVP_OK;

    if (cluster == NULL || sid == NULL || stream_p == NULL || sid[0] == '\0' ||
        strlen(sid) >= KVP_SID_MAX) {
        KVP_LOG_ERROR(MOD, "stream: NULL cluster or output pointer, or a session id not of 1..%d "
                      "bytes", (int)KVP_SID_MAX - 1);
        return KVP_ERR_INVALID;
    }
    s = kvp_calloc(1, sizeof(*s), "cluster stream");
    if (s == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    s->cluster = cluster;
    s->ns      = ns;
    snprintf(s->sid, sizeof(s->sid), "%s", sid);
    st = kvp_cluster_route_begin(cluster, 1, ns, sid, NULL, &rt);
    for (uint32_t k = 0; st == KVP_OK && k < cluster->n && s->n_ranked < cluster->replicas; k++) {
        uint32_t node = rt.order[k];
        dst_t   *d    = &s->ranked[s->n_ranked];

        d->status = kvp_cluster_node_down(cluster, node);
        d->stage  = "skipped";
        if (d->status != KVP_OK) {
            dst_addr(d, cluster->peer[node]);
        } else if (dst_open(s, d, cluster->peer[node]) == KVP_OK) {
            s->n_ranked++;
            continue;
        } else {
            kvp_cluster_report_add(cluster, &rt.local, node, d->status, "connect"); /* skip it */
        }
        first                    = first == KVP_OK ? d->status : first;
        s->passed[s->n_passed++] = *d;
        memset(d, 0, sizeof(*d));
    }
    if (st == KVP_OK && s->n_ranked == 0) {
        st = first != KVP_OK ? first : KVP_ERR_PEER_UNREACHABLE;
        KVP_LOG_ERROR(MOD, "stream '%s': no node of its rank took a connection: %s", sid,
                      kvp_status_str(st));
    }
    if (st == KVP_OK) {
        st = also_open(s, also);
    }
    if (st != KVP_OK) {
        kvp_cluster_stream_close(s);
        return st;
    }
    *stream_p = s;
    return KVP_OK;
}

kvp_status_t kvp_cluster_stream_push(kvp_cluster_stream_h s, const void *const *pages,
                                     const size_t *lens, size_t n)
{
    kvp_status_t st;

    if (s == NULL || (n > 0 && (pages == NULL || lens == NULL))) {
        KVP_LOG_ERROR(MOD, "stream push: NULL stream, pages or lengths");
        return KVP_ERR_INVALID;
    }
    if (s->finished) { /* its streams are gone: this would reach no node and say OK */
        KVP_LOG_ERROR(MOD, "stream push after finish: one session per stream");
        return KVP_ERR_INVALID;
    }
    if (s->stop != KVP_OK) {
        return s->stop;
    }
    st = n > 0 ? keep_pages(s, pages, lens, n) : KVP_OK;
    if (st != KVP_OK) {
        s->stop = st; /* a layer missing on every node: finish must not put the record */
        return st;
    }
    for (uint32_t i = 0; i < s->n_ranked + s->n_also; i++) {
        dst_t *d = i < s->n_ranked ? &s->ranked[i] : &s->also[i - s->n_ranked];

        if (d->st == NULL || d->status != KVP_OK) {
            continue;
        }
        st = kvp_put_stream_push(d->st, pages, lens, n);
        if (st != KVP_OK) {
            d->status = st;
            d->stage  = "stream";
            if (i < s->n_ranked && kvp_cluster_put_stops(st)) {
                s->stop = st;
            }
        }
    }
    return s->stop;
}

kvp_status_t kvp_cluster_stream_finish(kvp_cluster_stream_h s, const kvp_session_desc_t *desc,
                                       const void *const *pages, const size_t *lens, size_t n,
                                       kvp_cluster_report_t *report, kvp_status_t *also_status)
{
    kvp_cluster_route_t rt;
    kvp_cluster_h       c;
    uint64_t            version = kvp_version_now(); /* one version for every copy */
    kvp_status_t        first = KVP_OK, st;
    uint32_t            failed = 0;
    int                 stale  = 0; /* a ranked node holds a newer write */

    if (s == NULL || desc == NULL) {
        KVP_LOG_ERROR(MOD, "stream finish: NULL stream or record");
        return KVP_ERR_INVALID;
    }
    if (s->finished) {
        KVP_LOG_ERROR(MOD, "stream finish after finish: one session per stream");
        return KVP_ERR_INVALID;
    }
    s->finished = true;
    c = s->cluster;
    if (s->stop != KVP_OK) { /* a push failed on every node: no record goes anywhere */
        KVP_LOG_ERROR(MOD, "stream finish: session %s not written: a push failed (%s)", s->sid,
                      kvp_status_str(s->stop));
        (void)kvp_cluster_route_begin(c, 0, s->ns, NULL, report, &rt); /* an empty report */
        dsts_release_all(s);
        for (uint32_t j = 0; also_status != NULL && j < s->n_also; j++) {
            also_status[j] = s->stop;
        }
        return s->stop;
    }
    for (uint32_t i = 0; i < s->n_ranked + s->n_also; i++) {
        dst_t *d = i < s->n_ranked ? &s->ranked[i] : &s->also[i - s->n_ranked];

        dst_finish(s, d, desc, pages, lens, n, version);
        dst_release(s, d, 1); /* before an adopt can move the nodes' slots */
    }
    st = kvp_cluster_route_begin(c, 1, s->ns, s->sid, report, &rt); /* adopt, rank again */
    for (uint32_t i = 0; i < s->n_passed; i++) {
        report_dst(c, rt.r, &s->passed[i], 0); /* marked when open passed it over */
        first = first == KVP_OK ? s->passed[i].status : first;
    }
    for (uint32_t i = 0; i < s->n_ranked; i++) {
        const dst_t *d = &s->ranked[i];

        report_dst(c, rt.r, d, 1);
        rt.r->n_ok += d->status == KVP_OK;
        failed += d->status != KVP_OK;
        stale |= d->status == KVP_ERR_STALE;
        first = first == KVP_OK ? d->status : first;
        s->stop = s->stop == KVP_OK && kvp_cluster_put_stops(d->status) ? d->status : s->stop;
    }
    /* a failed stream's place: the next nodes of the rank not tried yet */
    for (uint32_t k = 0; st == KVP_OK && s->stop == KVP_OK && failed > 0 &&
                         rt.r->n_ok < c->replicas && k < c->n; k++) {
        kvp_status_t rs;

        if (dst_find(s->ranked, s->n_ranked, c->peer[rt.order[k]]) ||
            dst_find(s->passed, s->n_passed, c->peer[rt.order[k]])) {
            continue;
        }
        rs = replace_one(s, rt.order[k], desc, pages, lens, n, version, rt.r);
        rt.r->n_ok += rs == KVP_OK;
        stale |= rs == KVP_ERR_STALE;
        if (kvp_cluster_put_stops(rs)) {
            s->stop = rs;
            break;
        }
    }
    for (uint32_t j = 0; also_status != NULL && j < s->n_also; j++) {
        also_status[j] = s->also[j].mirror ? s->ranked[s->also[j].mirror - 1].status
                                           : s->also[j].status;
    }
    if (rt.r->n_ok > 0) { /* a node that refused it may hold an older copy: not served now */
        kvp_cluster_drop_older(c, rt.r, s->ns, s->sid, version);
        return stale ? KVP_ERR_STALE : KVP_OK; /* a newer write wins every copy at repair */
    }
    if (s->stop != KVP_OK) { /* every node would refuse it: that, not a passed node's outage */
        return s->stop;
    }
    return first != KVP_OK ? first : st;
}

void kvp_cluster_stream_close(kvp_cluster_stream_h s)
{
    if (s == NULL) {
        return;
    }
    dsts_release_all(s); /* not finished: nothing of it is kept (after finish: no-ops) */
    kvp_free(s->pages);
    kvp_free(s->lens);
    kvp_free(s);
}
