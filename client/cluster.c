/* cluster.c - libkvpack over several kvpackd nodes (kvpack/cluster.h): one kvp_client per node,
 * created on first use; sessions routed by rendezvous rank (kvp_placement_rank). put walks the
 * rank order until r nodes took the session; get until one has it; delete tries every node; list
 * merges all nodes' lists. Each call records what every node it tried answered. The nodes are a
 * static list, or etcd's: a watch (kvp_etcd_watch_*) publishes them and the routed calls adopt
 * the newest list first (cluster_adopt), keeping the clients of nodes still present.
 * The streamed put is cluster_stream.c; both use the helpers of cluster_int.h.
 * Main flow: kvp_cluster_put_session -> cluster_adopt -> kvp_cluster_node_open ->
 * kvp_cluster_put_one (pages, record). */
#include "cluster_int.h"
#include "client_int.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "kvpack/num.h"
#include "kvpack/placement.h"
#include "kvpack/xfer.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MOD          "cluster"
#define DOWN_SKIP_NS (5000ull * 1000000ull) /* a node that failed is skipped this long */

int kvp_cluster_status_unreachable(kvp_status_t s)
{
    return s == KVP_ERR_TIMEOUT || s == KVP_ERR_CANCELED || s == KVP_ERR_PEER_UNREACHABLE ||
           s == KVP_ERR_PEER_GONE || s == KVP_ERR_SHUTTING_DOWN;
}

/* ---- private ---- */

int kvp_cluster_addr_ok(const char *addr, const char *what)
{
    char     host[256];
    uint16_t port;

    if (*addr == '\0' || strlen(addr) >= KVP_ETCD_ADDR_MAX ||
        kvp_xfer_parse_addr(addr, host, sizeof(host), &port) != KVP_OK) {
        KVP_LOG_ERROR(MOD, "%s '%s' is not HOST:PORT", what, addr);
        return 0;
    }
    return 1;
}

/* The addresses host resolves to with port (NULL: none), for kvp_cluster_addr_dup */
static struct addrinfo *addr_resolve(const char *addr)
{
    char             host[256], port_s[8];
    uint16_t         port;
    struct addrinfo  hints, *res = NULL;

    if (kvp_xfer_parse_addr(addr, host, sizeof(host), &port) != KVP_OK) {
        return NULL;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = AI_NUMERICSERV;
    snprintf(port_s, sizeof(port_s), "%u", (unsigned)port);
    return getaddrinfo(host, port_s, &hints, &res) == 0 ? res : NULL;
}

static int addr_lists_meet(const struct addrinfo *ra, const struct addrinfo *rb)
{
    for (const struct addrinfo *x = ra; x != NULL; x = x->ai_next) {
        for (const struct addrinfo *y = rb; y != NULL; y = y->ai_next) {
            if (x->ai_addrlen == y->ai_addrlen && memcmp(x->ai_addr, y->ai_addr, x->ai_addrlen) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

/* One node under two names: the same text, or a port and an address in common. */
static int addr_same(const char *a, const struct addrinfo *ra, const char *b,
                     const struct addrinfo *rb)
{
    return strcmp(a, b) == 0 || addr_lists_meet(ra, rb);
}

int kvp_cluster_addr_dup(const char *const *addrs, uint32_t n, uint32_t *i_p, uint32_t *j_p)
{
    struct addrinfo *res[KVP_CLUSTER_MAX_NODES] = {NULL};
    int              dup = 0;

    n = n < KVP_CLUSTER_MAX_NODES ? n : KVP_CLUSTER_MAX_NODES;
    for (uint32_t j = 0; j < n && !dup; j++) {
        res[j] = addr_resolve(addrs[j]);
        for (uint32_t i = 0; i < j && !dup; i++) {
            dup = addr_same(addrs[i], res[i], addrs[j], res[j]);
            if (dup) {
                *i_p = i;
                *j_p = j;
            }
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        if (res[j] != NULL) {
            freeaddrinfo(res[j]);
        }
    }
    return dup;
}

/* Split the list at commas into c->node; each must be HOST:PORT and name a node once. */
static kvp_status_t peers_split(kvp_cluster_h c, char *list)
{
    uint32_t i, j;

    for (char *p; (p = kvp_list_item_next(&list)) != NULL;) {
        if (c->n == KVP_CLUSTER_MAX_NODES) {
            KVP_LOG_ERROR(MOD, "more than %u peers", KVP_CLUSTER_MAX_NODES);
            return KVP_ERR_INVALID;
        }
        if (!kvp_cluster_addr_ok(p, "peer")) {
            return KVP_ERR_INVALID;
        }
        snprintf(c->node[c->n].addr, sizeof(c->node[0].addr), "%s", p);
        c->peer[c->n] = c->node[c->n].addr;
        c->n++;
    }
    if (kvp_cluster_addr_dup((const char *const *)c->peer, c->n, &i, &j)) {
        KVP_LOG_ERROR(MOD, "peers %s and %s are one node, listed twice", c->peer[i], c->peer[j]);
        return KVP_ERR_INVALID;
    }
    return KVP_OK;
}

/* Drop from m[0..n) (order kept) each member that is a node listed under another name too (a
 * node restarted with another --advertise while its old key's lease runs out): the one
 * registered last stays, with a warning naming both. Returns the count left. */
static uint32_t members_one_per_node(kvp_etcd_member_t *m, uint32_t n, const char *where)
{
    struct addrinfo **res  = kvp_calloc(n ? n : 1, sizeof(*res), "cluster.members");
    uint8_t          *drop = kvp_calloc(n ? n : 1, 1, "cluster.members");
    uint32_t          kept = 0;

    if (res == NULL || drop == NULL) { /* keep them all: the node then counts twice */
        kvp_free(res);
        kvp_free(drop);
        return n;
    }
    for (uint32_t j = 0; j < n; j++) {
        res[j] = addr_resolve(m[j].addr);
        for (uint32_t i = 0; i < j && !drop[j]; i++) {
            if (!drop[i] && addr_same(m[i].addr, res[i], m[j].addr, res[j])) {
                uint32_t old = m[j].since > m[i].since ? i : j; /* a tie: the first stays */

                KVP_LOG_WARN(MOD, "%s lists one node twice, as %s and %s: using %s (registered "
                             "last; the other key goes when its lease runs out)", where,
                             m[i].addr, m[j].addr, m[old == i ? j : i].addr);
                drop[old] = 1;
            }
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        if (res[j] != NULL) {
            freeaddrinfo(res[j]);
        }
        if (!drop[j]) {
            m[kept++] = m[j];
        }
    }
    kvp_free(res);
    kvp_free(drop);
    return kept;
}

/* How many of n members registered under where (sorted by address) a cluster takes: each node
 * once (members_one_per_node), then all, or past KVP_CLUSTER_MAX_NODES the first ones, with a
 * warning. For the watch and the one-shot read. */
static uint32_t members_take(kvp_etcd_member_t *m, uint32_t n, const char *where)
{
    n = members_one_per_node(m, n, where);
    if (n > KVP_CLUSTER_MAX_NODES) {
        KVP_LOG_WARN(MOD, "%u nodes registered under %s: using the first %u by address", n,
                     where, KVP_CLUSTER_MAX_NODES);
        return KVP_CLUSTER_MAX_NODES;
    }
    return n;
}

/* Take the watch's newest list when its generation moved: nodes still present keep their client
 * and down state (matched by address), removed nodes' clients are closed, new ones start
 * unconnected. Past KVP_CLUSTER_MAX_NODES the first ones by address (the list is sorted). */
static kvp_status_t cluster_adopt(kvp_cluster_h c)
{
    kvp_etcd_member_t *m;
    kvp_cluster_node_t            *next;
    uint32_t           n, k = 0;
    uint64_t           gen;
    kvp_status_t       s;

    if (c->watch == NULL || kvp_etcd_watch_generation(c->watch) == c->gen) {
        return KVP_OK;
    }
    s = kvp_etcd_watch_members(c->watch, &m, &n, &gen);
    if (s != KVP_OK) {
        return s;
    }
    next = kvp_calloc(KVP_CLUSTER_MAX_NODES, sizeof(*next), "cluster adopt");
    if (next == NULL) {
        kvp_free(m);
        return KVP_ERR_NO_MEMORY;
    }
    n = members_take(m, n, c->where);
    for (uint32_t i = 0; i < n; i++) {
        snprintf(next[i].addr, sizeof(next[i].addr), "%s", m[i].addr);
    }
    for (uint32_t j = 0; j < c->n; j++) { /* both lists are sorted by address */
        while (k < n && strcmp(next[k].addr, c->node[j].addr) < 0) {
            k++;
        }
        if (k < n && strcmp(next[k].addr, c->node[j].addr) == 0) {
            next[k] = c->node[j];
        } else {
            kvp_client_destroy(c->node[j].client);
            kvp_put_stream_close(c->node[j].stream);
        }
    }
    memcpy(c->node, next, sizeof(c->node));
    for (uint32_t i = 0; i < n; i++) {
        c->peer[i] = c->node[i].addr;
    }
    c->n   = n;
    c->gen = gen;
    kvp_free(next);
    kvp_free(m);
    return KVP_OK;
}

/* Adopt, then refuse a routed call when no node is registered. */
static kvp_status_t cluster_ready(kvp_cluster_h c)
{
    kvp_status_t s = cluster_adopt(c);

    if (s == KVP_OK && c->n == 0) {
        KVP_LOG_ERROR(MOD, "no nodes registered under %s", c->where);
        s = KVP_ERR_PEER_UNREACHABLE;
    }
    return s;
}

void kvp_cluster_report_add(kvp_cluster_h c, kvp_cluster_report_t *r, uint32_t node,
                            kvp_status_t s, const char *stage)
{
    if (r->n_tried < KVP_CLUSTER_MAX_NODES) {
        r->tried[r->n_tried].node   = node;
        r->tried[r->n_tried].status = s;
        r->tried[r->n_tried].stage  = stage;
        r->n_tried++;
    }
    if (c->n > 1 && kvp_cluster_status_unreachable(s) && strcmp(stage, "skipped") != 0) {
        c->node[node].down_until  = kvp_time_ns() + DOWN_SKIP_NS;
        c->node[node].down_status = s;
    }
}

kvp_status_t kvp_cluster_node_down(kvp_cluster_h c, uint32_t node)
{
    return c->n > 1 && c->node[node].down_until > kvp_time_ns() ? c->node[node].down_status
                                                                : KVP_OK;
}

kvp_status_t kvp_cluster_node_open(kvp_cluster_h c, uint32_t node, kvp_cluster_report_t *r,
                                   kvp_client_h *client_p)
{
    kvp_status_t s = kvp_cluster_node_down(c, node);

    if (s != KVP_OK) {
        kvp_cluster_report_add(c, r, node, s, "skipped");
        return s;
    }
    if (c->node[node].client == NULL) {
        c->cp.server = c->peer[node];
        s = kvp_client_create(&c->cp, &c->node[node].client);
        if (s != KVP_OK) {
            kvp_cluster_report_add(c, r, node, s, "connect");
            return s;
        }
    }
    *client_p = c->node[node].client;
    return KVP_OK;
}

kvp_status_t kvp_cluster_route_begin(kvp_cluster_h c, int routed, uint64_t ns, const char *sid,
                                     kvp_cluster_report_t *report, kvp_cluster_route_t *rt)
{
    kvp_status_t s;

    memset(rt, 0, sizeof(*rt));
    rt->r = report ? report : &rt->local;
    memset(rt->r, 0, sizeof(*rt->r));
    s = routed ? cluster_ready(c) : KVP_OK;
    return (s == KVP_OK && sid) ? kvp_placement_rank(c->peer, c->n, ns, sid, rt->order) : s;
}

static void route_fail(kvp_cluster_route_t *rt, kvp_status_t s)
{
    if (kvp_cluster_status_unreachable(s)) {
        rt->unreach = rt->unreach ? rt->unreach : s;
    } else if (s != KVP_OK && s != KVP_ERR_NOT_FOUND) {
        rt->other = rt->other ? rt->other : s;
    }
}

/* What a routed call that found no node to serve it returns: a status other than NOT_FOUND or
 * unreachable if one came back, else an unreachable one, else KVP_ERR_NOT_FOUND. */
static kvp_status_t route_status(const kvp_cluster_route_t *rt)
{
    return rt->other ? rt->other : rt->unreach ? rt->unreach : KVP_ERR_NOT_FOUND;
}

/* NO_MEMORY and TOO_LARGE are not: a node's (its store, its transport refusing the message, a
 * message over its own --max-msg) is that node's state or setting, not the put's, and another
 * node may well take it; one of this process's own fails again at once on the next node, so
 * walking on costs nothing. */
int kvp_cluster_put_stops(kvp_status_t s)
{
    return s == KVP_ERR_INVALID || s == KVP_ERR_BAD_PAGE ||
           s == KVP_ERR_WRONG_CODEC || s == KVP_ERR_BAD_INPUT_DATA || s == KVP_ERR_STALE;
}

void kvp_cluster_drop_older(kvp_cluster_h c, const kvp_cluster_report_t *r, uint64_t ns,
                            const char *sid, uint64_t version)
{
    for (uint32_t i = 0; i < r->n_tried && version > 1; i++) {
        kvp_status_t s = r->tried[i].status;
        kvp_client_h cl;

        if (s == KVP_OK || kvp_cluster_status_unreachable(s) || kvp_cluster_put_stops(s) ||
            strcmp(r->tried[i].stage, "skipped") == 0 || strcmp(r->tried[i].stage, "probe") == 0 ||
            kvp_cluster_client(c, r->tried[i].node, &cl) != KVP_OK) {
            continue;
        }
        s = kvp_client_drop_session(cl, ns, sid, version - 1);
        if (s == KVP_OK) {
            KVP_LOG_INFO(MOD, "session %s: dropped the older copy on %s, which refused the put",
                         sid, c->peer[r->tried[i].node]);
        }
    }
}

kvp_status_t kvp_cluster_put_one(kvp_cluster_h c, kvp_client_h cl, uint32_t node, uint64_t ns,
                                 const char *sid, const void *const *pages, const size_t *lens,
                                 size_t n, const kvp_session_desc_t *desc, uint64_t version,
                                 const char **stage_p)
{
    uint32_t     L      = desc->layers;
    uint64_t     chunks = n / L;
    kvp_status_t s      = KVP_OK;

    *stage_p = "pages";
    for (uint64_t ch = 0; s == KVP_OK && ch + 1 < chunks; ch++) {
        s = kvp_client_put_pages(cl, ns, pages + ch * L, lens + ch * L, L);
        if (s == KVP_OK && c->progress_cb != NULL) {
            c->progress_cb(c->progress_arg, c->peer[node], ch + 1, chunks);
        }
    }
    if (s == KVP_OK) {
        *stage_p = chunks > 0 ? "last chunk and session record" : "session record";
        s = kvp_client_put_session_pages(cl, ns, sid, desc,
                                         chunks > 0 ? pages + (chunks - 1) * L : NULL,
                                         chunks > 0 ? lens + (chunks - 1) * L : NULL,
                                         chunks > 0 ? L : 0, version);
    }
    if (s == KVP_OK && chunks > 0 && c->progress_cb != NULL) {
        c->progress_cb(c->progress_arg, c->peer[node], chunks, chunks);
    }
    if (s != KVP_OK && *kvp_client_node_message(cl) != '\0') { /* the node's why, in its words */
        KVP_LOG_WARN(MOD, "%s refused session %s: %s", c->peer[node], sid,
                     kvp_client_node_message(cl));
    }
    return s;
}

typedef struct {
    kvp_session_info_t info;
    uint32_t           node;
} held_t;

static int held_cmp(const void *a, const void *b)
{
    const held_t *x = a, *y = b;
    int           d = strcmp(x->info.sid, y->info.sid);

    if (x->info.ns != y->info.ns) {
        return x->info.ns < y->info.ns ? -1 : 1;
    }
    return d != 0 ? d : (x->node > y->node) - (x->node < y->node);
}

/* Merge the nodes' lists (NULL for a node not listed) into out: sorted, each (ns, sid) once with
 * the lowest-indexed holder's info, at most max (0: all). */
static kvp_status_t list_merge(kvp_cluster_h c, kvp_session_list_t **ls, uint32_t max,
                               kvp_cluster_list_t *out)
{
    uint32_t total = 0, k = 0;
    held_t  *all;
    int      vers = out->stride != 0;

    for (uint32_t i = 0; i < c->n; i++) {
        total += ls[i] ? ls[i]->n : 0;
        out->truncated |= ls[i] ? ls[i]->truncated : 0;
        out->requests += ls[i] ? ls[i]->requests : 0;
    }
    all           = kvp_calloc(total + 1u, sizeof(*all), "cluster merge");
    out->sessions = kvp_calloc(total + 1u, sizeof(*out->sessions), "cluster list");
    out->holders  = kvp_calloc(total + 1u, sizeof(*out->holders), "cluster holders");
    out->damaged  = kvp_calloc(total + 1u, sizeof(*out->damaged), "cluster damaged");
    out->on_disk  = kvp_calloc(total + 1u, sizeof(*out->on_disk), "cluster on disk");
    if (vers) {
        out->versions = kvp_calloc((size_t)(total + 1u) * out->stride, sizeof(uint64_t),
                                   "cluster versions");
        out->deleted  = kvp_calloc(total + 1u, sizeof(*out->deleted), "cluster tombstones");
    }
    if (all == NULL || out->sessions == NULL || out->holders == NULL || out->damaged == NULL ||
        out->on_disk == NULL || (vers && (out->versions == NULL || out->deleted == NULL))) {
        kvp_free(all);
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        for (uint32_t j = 0; ls[i] && j < ls[i]->n; j++) {
            all[k].info   = ls[i]->sessions[j];
            all[k++].node = i;
        }
    }
    qsort(all, total, sizeof(*all), held_cmp);
    for (uint32_t j = 0; j < total; j++) {
        kvp_session_info_t *last = out->n ? &out->sessions[out->n - 1] : NULL;
        const uint64_t      bit  = 1ull << all[j].node;

        if (last == NULL || last->ns != all[j].info.ns || strcmp(last->sid, all[j].info.sid) != 0) {
            if (max != 0 && out->n == max) {
                out->truncated = 1;
                break;
            }
            last  = &out->sessions[out->n++];
            *last = all[j].info;
        } else if (last->deleted && !all[j].info.deleted) {
            *last = all[j].info; /* a record's info before any tombstone's */
        }
        if (vers && all[j].info.deleted) {
            out->deleted[out->n - 1] |= bit;
        } else {
            out->holders[out->n - 1] |= bit;
            out->damaged[out->n - 1] |= all[j].info.damaged ? bit : 0;
            out->on_disk[out->n - 1] |= (all[j].info.where & KVP_SESSION_ON_DISK) ? bit : 0;
        }
        if (vers) {
            out->versions[(size_t)(out->n - 1) * out->stride + all[j].node] = all[j].info.version;
        }
    }
    kvp_free(all);
    return KVP_OK;
}

/* ---- API ---- */

/* The members from etcd: a watch, its first list adopted; nobody registered is an error here. */
static kvp_status_t cluster_from_etcd(kvp_cluster_h c, const char *etcd, const char *prefix)
{
    kvp_status_t s;

    prefix = prefix ? prefix : KVP_ETCD_DEFAULT_PREFIX;
    snprintf(c->where, sizeof(c->where), "%s at etcd %s", prefix, etcd);
    s = kvp_etcd_watch_start(etcd, prefix, &c->watch);
    if (s == KVP_OK) {
        s = cluster_adopt(c);
    }
    if (s == KVP_OK && c->n == 0) {
        KVP_LOG_ERROR(MOD, "no kvpack nodes registered under %s", c->where);
        s = KVP_ERR_NOT_FOUND;
    }
    return s;
}

kvp_status_t kvp_cluster_create(const kvp_cluster_params_t *params, kvp_cluster_h *cluster_p)
{
    uint64_t      fm = (params != NULL) ? params->field_mask : 0;
    int           peers = (fm & KVP_CLUSTER_PARAM_PEERS) && params->peers != NULL;
    int           etcd  = (fm & KVP_CLUSTER_PARAM_ETCD) && params->etcd != NULL;
    kvp_cluster_h c;
    char         *buf;
    kvp_status_t  s;

    if (peers == etcd || cluster_p == NULL) {
        KVP_LOG_ERROR(MOD, "a cluster needs exactly one of a peer list and etcd");
        return KVP_ERR_INVALID;
    }
    c = kvp_calloc(1, sizeof(*c), "cluster");
    if (c == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    if (etcd) {
        s = cluster_from_etcd(c, params->etcd, params->etcd_prefix);
    } else {
        buf = kvp_strdup(params->peers, "cluster peers");
        s   = (buf == NULL) ? KVP_ERR_NO_MEMORY : peers_split(c, buf);
        kvp_free(buf);
    }
    if (s != KVP_OK) {
        goto err_free;
    }
    c->replicas = (fm & KVP_CLUSTER_PARAM_REPLICAS) && params->replicas ? params->replicas : 1;
    if (!etcd && c->replicas > c->n) {
        KVP_LOG_ERROR(MOD, "%u replicas need at least %u peers, the list has %u", c->replicas,
                      c->replicas, c->n);
        s = KVP_ERR_INVALID;
        goto err_free;
    }
    if ((fm & KVP_CLUSTER_PARAM_CLIENT) && params->client != NULL) {
        c->cp = *params->client;
    }
    c->cp.field_mask |= KVP_CLIENT_PARAM_SERVER;
    if (fm & KVP_CLUSTER_PARAM_PROGRESS) {
        c->progress_cb  = params->progress_cb;
        c->progress_arg = params->progress_arg;
    }
    *cluster_p = c;
    return KVP_OK;

err_free:
    kvp_etcd_watch_stop(c->watch);
    kvp_free(c);
    return s;
}

void kvp_cluster_destroy(kvp_cluster_h cluster)
{
    if (cluster == NULL) {
        return;
    }
    kvp_etcd_watch_stop(cluster->watch);
    for (uint32_t i = 0; i < cluster->n; i++) {
        kvp_client_destroy(cluster->node[i].client);
        kvp_put_stream_close(cluster->node[i].stream);
    }
    for (uint32_t i = 0; i < KVP_CLUSTER_STREAM_ALSO_MAX; i++) {
        kvp_put_stream_close(cluster->also[i].stream);
    }
    kvp_free(cluster);
}

kvp_status_t kvp_cluster_sync(kvp_cluster_h cluster, uint64_t *generation_p)
{
    kvp_status_t s = cluster_adopt(cluster);

    if (s == KVP_OK && generation_p != NULL) {
        *generation_p = cluster->gen;
    }
    return s;
}

uint32_t kvp_cluster_size(kvp_cluster_h cluster) { return cluster->n; }

uint32_t kvp_cluster_replicas(kvp_cluster_h cluster) { return cluster->replicas; }

const char *kvp_cluster_peer(kvp_cluster_h cluster, uint32_t node)
{
    return node < cluster->n ? cluster->peer[node] : NULL;
}

kvp_status_t kvp_cluster_rank(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                              uint32_t *order)
{
    kvp_status_t s = cluster_ready(cluster);

    return s == KVP_OK ? kvp_placement_rank(cluster->peer, cluster->n, ns, sid, order) : s;
}

kvp_status_t kvp_cluster_client(kvp_cluster_h cluster, uint32_t node, kvp_client_h *client_p)
{
    kvp_cluster_report_t r = {0};

    return node < cluster->n ? kvp_cluster_node_open(cluster, node, &r, client_p) : KVP_ERR_INVALID;
}

kvp_status_t kvp_cluster_put_session(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                     const void *const *pages, const size_t *lens, size_t n,
                                     const kvp_session_desc_t *desc,
                                     kvp_cluster_report_t *report)
{
    kvp_cluster_route_t      rt;
    kvp_status_t first   = KVP_OK;
    uint64_t     version = kvp_version_now(); /* one version for every replica */
    kvp_status_t s       = kvp_cluster_route_begin(cluster, 1, ns, sid, report, &rt);

    if (desc == NULL || desc->layers == 0 || n % desc->layers != 0) {
        KVP_LOG_ERROR(MOD, "put: %zu pages are not whole chunks of the record's layers", n);
        return KVP_ERR_INVALID;
    }
    for (uint32_t k = 0; s == KVP_OK && k < cluster->n && rt.r->n_ok < cluster->replicas; k++) {
        const char  *stage = "connect";
        kvp_client_h cl;
        kvp_status_t ps = kvp_cluster_node_open(cluster, rt.order[k], rt.r, &cl);

        if (ps == KVP_OK) {
            ps = kvp_cluster_put_one(cluster, cl, rt.order[k], ns, sid, pages, lens, n, desc,
                                     version, &stage);
            kvp_cluster_report_add(cluster, rt.r, rt.order[k], ps, stage);
        }
        rt.r->n_ok += ps == KVP_OK;
        first = (first == KVP_OK) ? ps : first;
        if (kvp_cluster_put_stops(ps)) {
            first = ps; /* every node would refuse it: that, not an earlier node's outage */
            break;
        }
    }
    if (s == KVP_OK && rt.r->n_ok > 0) {
        kvp_cluster_drop_older(cluster, rt.r, ns, sid, version);
    }
    /* STALE: a node holds a newer write, which wins every copy at the next repair */
    return s != KVP_OK ? s : first == KVP_ERR_STALE || rt.r->n_ok == 0 ? first : KVP_OK;
}

/* Before a replicated append or a latest get: every node's record or tombstone for (ns, sid),
 * asked of all at once (kvp_client_session_info_start on each, then finish on each). held[k]:
 * rank k holds a record, at version ver[k]. 1 with *base_p the newest record version when some node holds one
 * and no tombstone is as new (deletes win ties); else 0, *deleted_p telling whether a tombstone
 * was the newest. Nodes without a record, or that failed, are in the report. */
static int version_probe(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                        kvp_cluster_route_t *rt, uint8_t *held, uint64_t *ver, uint64_t *base_p,
                        int *deleted_p)
{
    kvp_client_h       cl[KVP_CLUSTER_MAX_NODES];
    kvp_client_call_t *call[KVP_CLUSTER_MAX_NODES];
    kvp_status_t       st[KVP_CLUSTER_MAX_NODES];
    uint64_t           rec = 0, tomb = 0;
    int                any_rec = 0, any_tomb = 0;

    for (uint32_t k = 0; k < cluster->n; k++) {
        call[k] = NULL;
        st[k]   = kvp_cluster_node_open(cluster, rt->order[k], rt->r, &cl[k]);
        if (st[k] == KVP_OK) {
            st[k] = kvp_client_session_info_start(cl[k], ns, sid, &call[k]);
        } else {
            cl[k] = NULL; /* node_open reported it */
        }
    }
    for (uint32_t k = 0; k < cluster->n; k++) {
        kvp_session_info_t info;
        kvp_status_t       ps = st[k];

        held[k] = 0;
        if (cl[k] != NULL) {
            ps = kvp_client_session_info_finish(cl[k], call[k], st[k], ns, sid, &info);
            if (ps == KVP_OK && info.deleted) {
                tomb     = !any_tomb || info.version > tomb ? info.version : tomb;
                any_tomb = 1;
                ps       = KVP_ERR_NOT_FOUND;
            }
            if (ps != KVP_OK) {
                kvp_cluster_report_add(cluster, rt->r, rt->order[k], ps, "probe");
            }
        }
        route_fail(rt, ps);
        if (ps == KVP_OK) {
            held[k] = 1;
            ver[k]  = info.version;
            rec     = !any_rec || info.version > rec ? info.version : rec;
            any_rec = 1;
        }
    }
    *deleted_p = any_tomb && (!any_rec || tomb >= rec);
    if (any_rec && *deleted_p) {
        KVP_LOG_WARN(MOD, "append to %s: a copy at version %llu outlived an rm at %llu; not "
                     "appended (kvpack repair removes it)", sid, (unsigned long long)rec,
                     (unsigned long long)tomb);
    }
    *base_p = rec;
    return any_rec && !*deleted_p;
}

kvp_status_t kvp_cluster_append(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                const kvp_append_t *append, uint32_t chunks, uint32_t *sealed_p,
                                kvp_cluster_report_t *report)
{
    kvp_cluster_route_t rt;
    uint64_t            version = kvp_version_now(); /* one version for every copy */
    uint64_t            ver[KVP_CLUSTER_MAX_NODES], base = 0;
    uint8_t             held[KVP_CLUSTER_MAX_NODES];
    int                 deleted = 0, found = 0, stale = 0;
    kvp_status_t        s = kvp_cluster_route_begin(cluster, 1, ns, sid, report, &rt);

    if (s == KVP_OK) {
        found = version_probe(cluster, ns, sid, &rt, held, ver, &base, &deleted);
    }
    /* only the copies at the newest version, each on that version (a copy that moved meanwhile
     * refuses), so every copy that takes the append holds the same bytes after it */
    for (uint32_t k = 0; found && k < cluster->n; k++) {
        kvp_client_h cl;
        uint32_t     sealed = 0;
        kvp_status_t as;

        if (!held[k]) {
            continue; /* no copy there, or no answer (in the report) */
        }
        if (ver[k] != base) {
            KVP_LOG_WARN(MOD, "append to %s: the copy on %s is at version %llu, behind %llu; "
                         "not appended (kvpack repair replaces it)", sid,
                         cluster->peer[rt.order[k]], (unsigned long long)ver[k],
                         (unsigned long long)base);
            kvp_cluster_report_add(cluster, rt.r, rt.order[k], KVP_ERR_INVALID, "append");
            continue;
        }
        as = kvp_cluster_node_open(cluster, rt.order[k], rt.r, &cl);
        if (as == KVP_OK) {
            as = kvp_client_append_at(cl, ns, sid, append, chunks, version, &base, &sealed);
            kvp_cluster_report_add(cluster, rt.r, rt.order[k], as, "append");
        }
        if (as == KVP_OK && rt.r->n_ok++ == 0 && sealed_p != NULL) {
            *sealed_p = sealed;
        }
        route_fail(&rt, as);
        stale |= as == KVP_ERR_STALE;
        if (as != KVP_ERR_INVALID && as != KVP_ERR_STALE && kvp_cluster_put_stops(as)) {
            break; /* bad input: every copy would refuse it (INVALID and STALE may be this
                    * copy's own: its chunk count or version, a newer version) */
        }
    }
    if (s == KVP_OK && rt.r->n_ok > 0) {
        kvp_cluster_drop_older(cluster, rt.r, ns, sid, version);
        return stale ? KVP_ERR_STALE : KVP_OK; /* a newer write wins every copy at repair */
    }
    if (s != KVP_OK) {
        return s;
    }
    if (deleted) {
        return KVP_ERR_NOT_FOUND; /* an rm is the newest write */
    }
    return route_status(&rt);
}

kvp_status_t kvp_cluster_put_node(kvp_cluster_h cluster, uint32_t node, uint64_t ns,
                                  const char *sid, const void *const *pages, const size_t *lens,
                                  size_t n, const kvp_session_desc_t *desc, uint64_t version,
                                  kvp_cluster_report_t *report)
{
    kvp_cluster_route_t      rt;
    const char  *stage = "connect";
    kvp_client_h cl;
    kvp_status_t s;

    (void)kvp_cluster_route_begin(cluster, 0, ns, NULL, report, &rt); /* no rank: clears report */
    if (node >= cluster->n || desc == NULL || desc->layers == 0 || n % desc->layers != 0) {
        KVP_LOG_ERROR(MOD, "put to node %u: bad node or pages not whole chunks", node);
        return KVP_ERR_INVALID;
    }
    s = kvp_cluster_node_open(cluster, node, rt.r, &cl);
    if (s == KVP_OK) {
        s = kvp_cluster_put_one(cluster, cl, node, ns, sid, pages, lens, n, desc, version, &stage);
        kvp_cluster_report_add(cluster, rt.r, node, s, stage);
    }
    rt.r->n_ok = s == KVP_OK;
    return s;
}

kvp_status_t kvp_cluster_get_session(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                     const kvp_page_params_t *expect, kvp_session_pages_t **out_p,
                                     kvp_cluster_report_t *report)
{
    return kvp_cluster_get_session_cb(cluster, ns, sid, expect, NULL, NULL, out_p, report);
}

kvp_status_t kvp_cluster_get_session_cb(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                        const kvp_page_params_t *expect, kvp_client_pages_cb_t cb,
                                        void *cb_arg, kvp_session_pages_t **out_p,
                                        kvp_cluster_report_t *report)
{
    kvp_cluster_route_t rt;
    uint64_t            deleted = 0; /* the newest delete a node answered with */
    kvp_status_t        s       = kvp_cluster_route_begin(cluster, 1, ns, sid, report, &rt);

    for (uint32_t k = 0; s == KVP_OK && k < cluster->n; k++) {
        kvp_client_h cl;
        uint64_t     d  = 0;
        kvp_status_t gs = kvp_cluster_node_open(cluster, rt.order[k], rt.r, &cl);

        if (gs == KVP_OK) { /* a copy no newer than a delete seen on the way is deleted too */
            gs = kvp_client_get_session_newer(cl, ns, sid, expect, cb, cb_arg, deleted, &d,
                                              out_p);
            kvp_cluster_report_add(cluster, rt.r, rt.order[k], gs, "get");
            deleted = d > deleted ? d : deleted;
        }
        if (gs == KVP_OK) {
            rt.r->n_ok      = 1;
            rt.r->served_by = rt.order[k];
            return KVP_OK;
        }
        route_fail(&rt, gs);
    }
    return s != KVP_OK ? s : route_status(&rt);
}

kvp_status_t kvp_cluster_get_session_latest(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                            const kvp_page_params_t *expect,
                                            kvp_client_pages_cb_t cb, void *cb_arg,
                                            kvp_session_pages_t **out_p,
                                            kvp_cluster_report_t *report)
{
    kvp_cluster_route_t rt;
    uint64_t            ver[KVP_CLUSTER_MAX_NODES], base = 0;
    uint8_t             held[KVP_CLUSTER_MAX_NODES];
    int                 deleted = 0;
    kvp_status_t        s = kvp_cluster_route_begin(cluster, 1, ns, sid, report, &rt);

    if (s != KVP_OK) {
        return s;
    }
    if (!version_probe(cluster, ns, sid, &rt, held, ver, &base, &deleted)) {
        return deleted ? KVP_ERR_NOT_FOUND : route_status(&rt); /* deleted: an rm is newest */
    }
    /* only a copy at the newest version, in rank order: an older one is not served (a node that
     * answered the probe and then failed leaves it to the next copy at that version) */
    for (uint32_t k = 0; k < cluster->n; k++) {
        kvp_client_h cl;
        kvp_status_t gs;

        if (!held[k] || ver[k] != base) {
            continue;
        }
        gs = kvp_cluster_node_open(cluster, rt.order[k], rt.r, &cl);
        if (gs == KVP_OK) { /* newer than base - 1: this version or one put since */
            gs = kvp_client_get_session_newer(cl, ns, sid, expect, cb, cb_arg,
                                              base > 0 ? base - 1 : 0, NULL, out_p);
            kvp_cluster_report_add(cluster, rt.r, rt.order[k], gs, "get");
        }
        if (gs == KVP_OK) {
            rt.r->n_ok      = 1;
            rt.r->served_by = rt.order[k];
            return KVP_OK;
        }
        route_fail(&rt, gs);
    }
    return route_status(&rt);
}

kvp_status_t kvp_cluster_delete_session(kvp_cluster_h cluster, uint64_t ns, const char *sid,
                                        kvp_cluster_report_t *report)
{
    kvp_cluster_route_t      rt;
    kvp_status_t first_r = KVP_OK;
    uint64_t     version = kvp_version_now(); /* one tombstone version on every node */
    kvp_status_t s       = kvp_cluster_route_begin(cluster, 1, ns, sid, report, &rt);

    for (uint32_t k = 0; s == KVP_OK && k < cluster->n; k++) {
        kvp_client_h cl;
        kvp_status_t ds = kvp_cluster_node_open(cluster, rt.order[k], rt.r, &cl);

        if (ds == KVP_OK) {
            ds = kvp_client_delete_session_version(cl, ns, sid, version);
            kvp_cluster_report_add(cluster, rt.r, rt.order[k], ds, "delete");
        }
        rt.r->n_ok += ds == KVP_OK;
        if (ds != KVP_OK && ds != KVP_ERR_NOT_FOUND && first_r == KVP_OK &&
            k < cluster->replicas) {
            first_r = ds;
        }
        route_fail(&rt, ds);
    }
    if (s != KVP_OK) {
        return s;
    }
    if (rt.r->n_ok > 0) {
        return first_r;
    }
    return rt.unreach ? rt.unreach : rt.other ? rt.other : KVP_ERR_NOT_FOUND;
}

kvp_status_t kvp_cluster_list_sessions(kvp_cluster_h cluster, uint32_t page_size, uint32_t max,
                                       kvp_cluster_list_t **out_p, kvp_cluster_report_t *report)
{
    return kvp_cluster_list_sessions_ex(cluster, page_size, max, 0, out_p, report);
}

kvp_status_t kvp_cluster_list_sessions_ex(kvp_cluster_h cluster, uint32_t page_size, uint32_t max,
                                          uint64_t flags, kvp_cluster_list_t **out_p,
                                          kvp_cluster_report_t *report)
{
    kvp_session_list_t *ls[KVP_CLUSTER_MAX_NODES] = {0};
    kvp_cluster_list_t *out = NULL;
    kvp_cluster_route_t             rt;
    kvp_status_t        first = KVP_OK;
    kvp_status_t        s     = kvp_cluster_route_begin(cluster, 1, 0, NULL, report, &rt);

    for (uint32_t i = 0; s == KVP_OK && i < cluster->n; i++) {
        kvp_client_h cl;
        kvp_status_t ls_s = kvp_cluster_node_open(cluster, i, rt.r, &cl);

        if (ls_s == KVP_OK) {
            ls_s = kvp_client_list_sessions_ex(cl, page_size, max, flags, &ls[i]);
            kvp_cluster_report_add(cluster, rt.r, i, ls_s, "list");
        }
        rt.r->n_ok += ls_s == KVP_OK;
        first = first ? first : ls_s;
    }
    if (s != KVP_OK || rt.r->n_ok == 0) {
        s = s != KVP_OK ? s : first;
    } else {
        out = kvp_calloc(1, sizeof(*out), "cluster list");
        if (out != NULL && (flags & KVP_LIST_DELETED)) {
            out->stride = cluster->n;
        }
        s = out ? list_merge(cluster, ls, max, out) : KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < cluster->n; i++) {
        kvp_session_list_free(ls[i]);
    }
    if (s != KVP_OK) {
        kvp_cluster_list_free(out);
        return s;
    }
    *out_p = out;
    return KVP_OK;
}

void kvp_cluster_list_free(kvp_cluster_list_t *list)
{
    if (list != NULL) {
        kvp_free(list->sessions);
        kvp_free(list->holders);
        kvp_free(list->damaged);
        kvp_free(list->on_disk);
        kvp_free(list->versions);
        kvp_free(list->deleted);
        kvp_free(list);
    }
}

kvp_status_t kvp_cluster_stat(kvp_cluster_h cluster, uint32_t node, kvp_node_stat_t *stat_p)
{
    kvp_client_h cl;
    kvp_status_t s = kvp_cluster_client(cluster, node, &cl);

    return s == KVP_OK ? kvp_client_stat(cl, stat_p) : s;
}

kvp_status_t kvp_cluster_scrub(kvp_cluster_h cluster, uint32_t node, kvp_scrub_result_t *out)
{
    kvp_client_h cl;
    kvp_status_t s = kvp_cluster_client(cluster, node, &cl);

    return s == KVP_OK ? kvp_client_scrub(cl, out) : s;
}

kvp_status_t kvp_cluster_peers_etcd(const char *etcd, const char *prefix, char **peers_p,
                                    uint32_t *n_p)
{
    kvp_etcd_h         e;
    kvp_etcd_member_t *m = NULL;
    uint32_t           n = 0;
    size_t             len = 0;
    char              *peers, where[512];
    kvp_status_t       s;

    prefix = prefix ? prefix : KVP_ETCD_DEFAULT_PREFIX;
    s      = kvp_etcd_create(etcd, 0, &e);
    if (s == KVP_OK) {
        s = kvp_etcd_members(e, prefix, &m, &n);
        if (s != KVP_OK) {
            KVP_LOG_ERROR(MOD, "cannot list %s at etcd %s: %s", prefix, etcd, kvp_status_str(s));
        }
        kvp_etcd_destroy(e);
    }
    snprintf(where, sizeof(where), "%s at etcd %s", prefix, etcd);
    if (s == KVP_OK && n == 0) {
        KVP_LOG_ERROR(MOD, "no kvpack nodes registered under %s", where);
        s = KVP_ERR_NOT_FOUND;
    }
    if (s != KVP_OK) {
        kvp_free(m);
        return s;
    }
    n = members_take(m, n, where);
    peers = kvp_malloc((size_t)n * KVP_ETCD_ADDR_MAX, "cluster.peers");
    if (peers == NULL) {
        kvp_free(m);
        return KVP_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        len += (size_t)sprintf(peers + len, "%s%s", i ? "," : "", m[i].addr);
    }
    kvp_free(m);
    *peers_p = peers;
    if (n_p != NULL) {
        *n_p = n;
    }
    return KVP_OK;
}
