/* cmd_loadtest_run.c - the replay engine of `kvpack loadtest`. Per request, against a real node:
 * resume (get the previous turn's session, restored from SSD if cold), lookup of chunk keys chained
 * over token ids derived from the block ids (equal ids at equal positions = equal keys), encode and
 * put only the missing pages (KV from a synthetic pool picked by block id) and the record with its
 * fp16 tail, then the decode side's get, checked against what was put. Over several nodes the
 * session goes to the first r live nodes of its rank (lookup and missing pages on each) and is
 * fetched from the first that has it; dead nodes are kept by address (an --etcd handle's list,
 * and so its node indices, follow etcd). --clients N runs N threads, each with its own cluster
 * handle and engine; all turns of a conversation stay on one
 * thread, the main thread only reports progress. The first failure stops every thread and is
 * reported once, naming the request. At the end, against existing nodes, the sessions the run
 * put are deleted from them (unless --keep-sessions). */
#include "cli.h"
#include "cmd_loadtest.h"

#include "eval/eval.h"
#include "kvpack/alloc.h"
#include "kvpack/placement.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define LT_MODEL_ID    "kvpack-loadtest/synthetic/%016llx" /* the run's salt */
#define LT_POOL_CHUNKS 8u /* distinct P-token KV slabs per pool layer */
#define LT_POOL_LAYERS 4u
#define LT_TICK_MS     20  /* progress refresh, and the longest open-loop sleep between stop checks */

/* What the client threads share. mu guards prefix/next_win/running/last_ns/last, res->done,
 * samples[].done, res->windows[].stat_end and stderr; the rest of each request's sample slot is
 * written by its client only. */
typedef struct {
    pthread_mutex_t          mu;
    const kvp_lt_params_t   *p;
    const kvp_lt_workload_t *w;
    kvp_lt_result_t         *res;
    uint8_t                 *owner;    /* client of each request */
    uint64_t                *held;     /* per session: the nodes a put of it was sent to, which
                                        * may hold a copy (bits of held_addr; set by its client;
                                        * 0: no put of it was sent) */
    char                     held_addr[KVP_LT_MAX_NODES][KVP_LT_ADDR_MAX]; /* more share the last */
    uint32_t                 n_held_addr;
    uint32_t                 prefix;   /* requests [0, prefix) have all finished */
    uint32_t                 next_win; /* first window whose end statistics are not taken yet */
    uint32_t                 running;  /* client threads that have not returned */
    uint64_t                 start, last_ns;
    atomic_int               stop;     /* set by the first failure */
    struct {                           /* each node's last statistics, by address: one that stops
                                        * answering (or leaves etcd) keeps counting with them */
        char            addr[KVP_LT_ADDR_MAX];
        kvp_node_stat_t stat;
    } last[2 * KVP_LT_MAX_NODES];
    uint32_t                 n_last;
} lt_shared_t;

/* A node a client used, by address (an etcd list changes under the node indices). */
typedef struct {
    char     addr[KVP_LT_ADDR_MAX];
    uint32_t failures;  /* calls that found it unreachable */
    bool     dead;      /* found unreachable: skipped from then on */
} lt_peer_t;

#define LT_MAX_PEERS (2 * KVP_LT_MAX_NODES) /* members that came and went; more share the last */

typedef struct {
    lt_shared_t           *sh;
    uint32_t               id;       /* client index */
    kvp_cluster_h          cl;
    lt_peer_t              peer[LT_MAX_PEERS]; /* every node this client used, by address */
    uint32_t               n_peer;
    pthread_t              tid;
    kvp_lt_result_t        part;     /* this client's totals; samples points at the shared array */
    const kvp_lt_params_t *p;
    uint64_t               ns;
    kvp_kv_t               pool;
    size_t                 page_cap, tail_cap;
    uint8_t               *buf;      /* one request's encoded pages, page_cap apart */
    size_t                 buf_pages;
    const void           **ptrs;
    size_t                *lens;
    kvp_key128_t          *keys;
    uint32_t               key_cap;
    uint32_t              *tok;      /* P token ids */
    uint8_t               *tail;     /* the fp16 tail pages, back to back */
    uint32_t              *sess_chunks; /* chunks of each session's last record */
} lt_engine_t;

static void page_params(const lt_engine_t *e, kvp_codec_id_t codec, uint32_t layer,
                        kvp_page_params_t *pp)
{
    memset(pp, 0, sizeof(*pp));
    pp->codec       = codec;
    pp->heads       = e->p->heads;
    pp->head_dim    = e->p->head_dim;
    pp->page_tokens = e->p->page_tokens;
    pp->layer       = layer;
}

static int engine_init(lt_engine_t *e, const kvp_lt_params_t *p, const kvp_lt_workload_t *w)
{
    kvp_page_params_t pp;
    uint32_t          pl = p->layers < LT_POOL_LAYERS ? p->layers : LT_POOL_LAYERS;
    char              model[64];

    memset(e, 0, sizeof(*e));
    e->p  = p;
    snprintf(model, sizeof(model), LT_MODEL_ID, (unsigned long long)p->salt);
    e->ns = kvp_ns_fingerprint(model, p->layers, p->heads, p->head_dim, p->page_tokens,
                               p->codec);
    page_params(e, p->codec, 0, &pp);
    e->page_cap = kvp_page_max_bytes(&pp);
    page_params(e, KVP_CODEC_FP16, 0, &pp);
    e->tail_cap = kvp_page_max_bytes(&pp);
    if (e->page_cap == 0 || e->tail_cap == 0) {
        fprintf(stderr, "kvpack loadtest: codec %s does not support heads %u head_dim %u P %u: it "
                "takes %s\n", kvp_codec_name(p->codec), p->heads, p->head_dim, p->page_tokens,
                kvp_codec_geometry_rule(p->codec));
        return -1;
    }
    e->tok         = kvp_malloc(p->page_tokens * sizeof(*e->tok), "loadtest tokens");
    e->tail        = kvp_malloc(p->layers * e->tail_cap, "loadtest tail");
    e->sess_chunks = kvp_calloc(w->n_sessions, sizeof(*e->sess_chunks), "loadtest sessions");
    if (e->tok == NULL || e->tail == NULL || e->sess_chunks == NULL ||
        kvp_kv_synthetic(&e->pool, pl, LT_POOL_CHUNKS * p->page_tokens, p->heads, p->head_dim,
                         1) != KVP_OK) {
        fprintf(stderr, "kvpack loadtest: out of memory for the engine\n");
        return -1;
    }
    return 0;
}

static void engine_free(lt_engine_t *e)
{
    kvp_kv_free(&e->pool);
    kvp_free(e->buf);
    kvp_free(e->ptrs);
    kvp_free(e->lens);
    kvp_free(e->keys);
    kvp_free(e->tok);
    kvp_free(e->tail);
    kvp_free(e->sess_chunks);
    kvp_cluster_destroy(e->cl);
}

/* Room for n chunk keys and n * layers pages. */
static int engine_reserve(lt_engine_t *e, uint32_t n)
{
    size_t pages = (size_t)n * e->p->layers;

    if (n > e->key_cap) {
        kvp_free(e->keys);
        e->keys    = kvp_malloc(n * sizeof(*e->keys), "loadtest keys");
        e->key_cap = e->keys != NULL ? n : 0;
    }
    if (pages > e->buf_pages) {
        kvp_free(e->buf);
        kvp_free(e->ptrs);
        kvp_free(e->lens);
        e->buf       = kvp_malloc(pages * e->page_cap, "loadtest pages");
        e->ptrs      = kvp_malloc(pages * sizeof(*e->ptrs), "loadtest pages");
        e->lens      = kvp_malloc(pages * sizeof(*e->lens), "loadtest pages");
        e->buf_pages = e->buf && e->ptrs && e->lens ? pages : 0;
    }
    return (n > 0 && e->keys == NULL) || (pages > 0 && e->buf_pages == 0) ? -1 : 0;
}

/* Token ids of chunk j: a function of the block id there and the offset inside the block. */
static void chunk_tokens(lt_engine_t *e, const kvp_lt_req_t *r, uint32_t j)
{
    uint32_t P = e->p->page_tokens, first = j * P;

    for (uint32_t t = 0; t < P && first + t < r->input_len; t++) {
        uint32_t pos = first + t;
        uint64_t id  = r->ids[pos / KVP_LT_BLOCK_TOKENS];

        e->tok[t] = (uint32_t)(kvp_lt_mix64(id * KVP_LT_BLOCK_TOKENS + pos % KVP_LT_BLOCK_TOKENS) %
                               32000u);
    }
}

/* Encode ntok tokens of chunk j, layer l: KV slab chosen by (block id, chunk in block, layer). */
static kvp_status_t chunk_encode(lt_engine_t *e, const kvp_lt_req_t *r, uint32_t j, uint32_t l,
                                 kvp_codec_id_t codec, uint32_t ntok, uint32_t flags, void *out,
                                 size_t cap, size_t *len_p)
{
    uint32_t          P = e->p->page_tokens, cpb = KVP_LT_BLOCK_TOKENS / P;
    uint64_t          pick = kvp_lt_mix64(r->ids[j / cpb] ^ ((uint64_t)(j % cpb) << 40) ^
                                          ((uint64_t)l << 52));
    uint32_t          pl = (uint32_t)(pick % e->pool.layers);
    uint32_t          pc = (uint32_t)((pick >> 8) % LT_POOL_CHUNKS);
    size_t            off = ((size_t)pl * e->pool.tokens + (size_t)pc * P) * e->p->heads *
                            e->p->head_dim;
    kvp_page_params_t pp;

    page_params(e, codec, l, &pp);
    pp.first_pos = (uint64_t)j * P;
    pp.chunk_key = (flags & KVP_PAGE_F_TAIL) ? (kvp_key128_t){0, 0} : e->keys[j];
    pp.flags     = flags;
    return kvp_page_encode(&pp, KVP_DTYPE_F32, e->pool.k + off, e->pool.v + off, ntok, out, cap,
                           len_p);
}

/* Stop every client; only the first failure of the run is printed. */
static int fail(lt_engine_t *e, const kvp_lt_req_t *r, uint32_t i, const char *what,
                kvp_status_t st)
{
    pthread_mutex_lock(&e->sh->mu);
    if (atomic_exchange(&e->sh->stop, 1) == 0) {
        kvp_progress_done();
        fprintf(stderr, "kvpack loadtest: request %u", i);
        if (r->line > 0) {
            fprintf(stderr, " (trace line %u)", r->line);
        }
        if (e->p->clients > 1) {
            fprintf(stderr, " on client %u", e->id);
        }
        fprintf(stderr, ", session lt-%u: %s failed: %s (%s)\n", r->session, what,
                kvp_status_str(st), kvp_status_name(st));
        if (st == KVP_ERR_NO_SPACE && e->p->clients > 1) {
            fprintf(stderr, "kvpack loadtest: a session is served from DRAM, so the sessions in "
                            "flight on all %u clients must fit the node's budget together "
                            "(--dram-budget)\n", e->p->clients);
        } else if (st == KVP_ERR_NO_SPACE) {
            fprintf(stderr, "kvpack loadtest: a session is served from DRAM, so the largest one "
                            "must fit the node's budget (--dram-budget)\n");
        }
    }
    pthread_mutex_unlock(&e->sh->mu);
    return -1;
}

/* What came back must be what was put: chunk keys, layers, P, tail tokens and tail bytes. */
static bool session_matches(const lt_engine_t *e, const kvp_session_pages_t *sp, uint32_t nc,
                            uint32_t rem, size_t tail_len)
{
    const kvp_session_desc_t *d = &sp->desc;

    return d->n_chunks == nc && d->layers == e->p->layers &&
           d->page_tokens == e->p->page_tokens && d->tail_tokens == rem &&
           d->n_tail == (rem ? e->p->layers : 0) && d->tail_len == tail_len &&
           sp->n_pages == nc * e->p->layers &&
           (nc == 0 || memcmp(d->chunk_keys, e->keys, nc * sizeof(kvp_key128_t)) == 0) &&
           (tail_len == 0 || memcmp(d->tail, e->tail, tail_len) == 0);
}

static double ms_since(uint64_t t0)
{
    return (double)(kvp_time_ns() - t0) / 1e6;
}

/* This client's entry for node (an index into the list the handle adopted last). */
static lt_peer_t *lt_peer(lt_engine_t *e, uint32_t node)
{
    const char *addr = kvp_cluster_peer(e->cl, node);
    uint32_t    i;

    for (i = 0; i < e->n_peer && strcmp(e->peer[i].addr, addr) != 0; i++) {
    }
    if (i == e->n_peer && e->n_peer < LT_MAX_PEERS) {
        snprintf(e->peer[e->n_peer++].addr, KVP_LT_ADDR_MAX, "%s", addr);
    }
    return &e->peer[i < LT_MAX_PEERS ? i : LT_MAX_PEERS - 1];
}

/* The bit of the node at addr in lt_shared_t.held: with add, a put is being sent there (its
 * address is added when new); without (after the run), 0 for a node no put was sent to. */
static uint64_t lt_held_bit(lt_shared_t *sh, const char *addr, bool add)
{
    uint64_t bit = 0;
    uint32_t i;

    pthread_mutex_lock(&sh->mu);
    for (i = 0; i < sh->n_held_addr && strcmp(sh->held_addr[i], addr) != 0; i++) {
    }
    if (i == sh->n_held_addr && i < KVP_LT_MAX_NODES && add) {
        snprintf(sh->held_addr[sh->n_held_addr++], KVP_LT_ADDR_MAX, "%s", addr);
    }
    if (i < sh->n_held_addr || i == KVP_LT_MAX_NODES) { /* a full table: the last bit */
        bit = 1ull << (i < KVP_LT_MAX_NODES ? i : KVP_LT_MAX_NODES - 1);
    }
    pthread_mutex_unlock(&sh->mu);
    return bit;
}

/* A node a call found unreachable: count it, say so once per client, skip it from now on. */
static void node_failed(lt_engine_t *e, uint32_t node, kvp_status_t st, bool locked)
{
    lt_peer_t *p = lt_peer(e, node);

    p->failures++;
    if (!p->dead) {
        p->dead = true;
        if (!locked) {
            pthread_mutex_lock(&e->sh->mu);
        }
        kvp_progress_done();
        fprintf(stderr, "kvpack loadtest: node %s: %s; client %u skips it from now on\n",
                p->addr, kvp_status_str(st), e->id);
        if (!locked) {
            pthread_mutex_unlock(&e->sh->mu);
        }
    }
}

/* A cluster get: the nodes it found unreachable on the way count as failures (several nodes). */
static kvp_status_t cluster_get(lt_engine_t *e, const char *sid, kvp_session_pages_t **sp_p)
{
    kvp_cluster_report_t rep;
    kvp_status_t         st = kvp_cluster_get_session(e->cl, e->ns, sid, NULL, sp_p, &rep);

    for (uint32_t k = 0; k < rep.n_tried && kvp_cluster_size(e->cl) > 1; k++) {
        if (strcmp(rep.tried[k].stage, "skipped") != 0 &&
            kvp_cluster_status_unreachable(rep.tried[k].status)) {
            node_failed(e, rep.tried[k].node, rep.tried[k].status, false);
        }
    }
    return st;
}

static int lt_resume(lt_engine_t *e, const kvp_lt_req_t *r, uint32_t i, kvp_lt_sample_t *s,
                     kvp_lt_result_t *res)
{
    kvp_session_pages_t *sp = NULL;
    char                 sid[32];
    uint64_t             t0 = kvp_time_ns();
    kvp_status_t         st;

    snprintf(sid, sizeof(sid), "lt-%u", (uint32_t)r->resume);
    st           = cluster_get(e, sid, &sp);
    s->resume_ms = ms_since(t0);
    if (st == KVP_OK && sp->desc.n_chunks != e->sess_chunks[r->resume]) {
        st = KVP_ERR_CORRUPT;
    }
    if (st == KVP_OK) {
        res->bytes_resumed += sp->wire_bytes;
        res->resumes++;
    }
    kvp_session_pages_free(sp);
    if (st != KVP_OK && kvp_cluster_size(e->cl) > 1 && kvp_cluster_status_unreachable(st)) {
        /* every node that held the previous turn is gone (one replica, its node died): a lost
         * resume, as an engine would recompute it; the request's lookup misses and its put sends
         * the pages again (the run used to stop here) */
        res->resumes_lost++;
        s->resume_ms = NAN; /* not a resume: out of the resume percentiles (a hung node's would be
                             * a --timeout-ms sample) */
        return 0;
    }
    return st == KVP_OK ? 0 : fail(e, r, i, "resume (get of the previous turn)", st);
}

/* Encode and put the chunks [hit, nc) and the record, at version, on node (its client c); part
 * gets what was sent, *tail_len_p the tail bytes, *what_p the step that failed. Times add up over
 * the nodes of a request (the pages and bytes count once the put is acked: kvp_lt_took). */
static kvp_status_t lt_put(lt_engine_t *e, uint32_t node, kvp_client_h c, const kvp_lt_req_t *r,
                           uint32_t hit, uint64_t version, kvp_lt_sample_t *s,
                           kvp_lt_result_t *res, kvp_lt_part_t *part, size_t *tail_len_p,
                           const char **what_p)
{
    uint32_t           L = e->p->layers, P = e->p->page_tokens, nc = r->input_len / P;
    uint32_t           rem = r->input_len % P, n = 0;
    kvp_session_desc_t desc = {0};
    kvp_status_t       st = KVP_OK;
    size_t             tail_len = 0, len;
    double             t_enc = kvp_time_s();
    uint64_t           t0;
    char               sid[32];

    for (uint32_t j = hit; j < nc && st == KVP_OK; j++) {
        for (uint32_t l = 0; l < L && st == KVP_OK; l++, n++) {
            e->ptrs[n] = e->buf + (size_t)n * e->page_cap;
            st = chunk_encode(e, r, j, l, e->p->codec, P, 0, e->buf + (size_t)n * e->page_cap,
                              e->page_cap, &e->lens[n]);
            part->bytes += e->lens[n];
        }
    }
    for (uint32_t l = 0; l < L && rem > 0 && st == KVP_OK; l++) {
        st = chunk_encode(e, r, nc, l, KVP_CODEC_FP16, rem, KVP_PAGE_F_TAIL, e->tail + tail_len,
                          e->tail_cap, &len);
        tail_len += len;
    }
    res->encode_s += kvp_time_s() - t_enc;
    if (st != KVP_OK) {
        *what_p = "encode";
        return st;
    }
    desc.layers      = L;
    desc.page_tokens = P;
    desc.n_chunks    = nc;
    desc.chunk_keys  = e->keys;
    desc.tail_tokens = rem;
    desc.n_tail      = rem ? L : 0;
    desc.tail_len    = tail_len;
    desc.tail        = rem ? e->tail : NULL;
    snprintf(sid, sizeof(sid), "lt-%u", r->session);
    /* from now on the node may hold some of it */
    e->sh->held[r->session] |= lt_held_bit(e->sh, kvp_cluster_peer(e->cl, node), true);
    t0 = kvp_time_ns();
    st = kvp_client_put_session_pages(c, e->ns, sid, &desc, e->ptrs, e->lens, n, version);
    s->put_ms    = (isnan(s->put_ms) ? 0 : s->put_ms) + ms_since(t0);
    part->pages  = n;
    part->bytes += tail_len;
    part->bytes_fp16 = 4ull * ((nc - hit) * (uint64_t)P + rem) * L * e->p->heads * e->p->head_dim;
    *tail_len_p = tail_len;
    *what_p     = n > 0 ? "put (pages, record)" : "put (record)";
    return st;
}

/* One node's part of a request: lookup, then the pages it lacks and the record at version (the
 * request's, the same on every replica); part gets its hits and what was sent (counted by the
 * caller only when this returns KVP_OK). */
static kvp_status_t lt_place(lt_engine_t *e, uint32_t node, bool first, const kvp_lt_req_t *r,
                             uint64_t version, kvp_lt_sample_t *s, kvp_lt_result_t *res,
                             kvp_lt_part_t *part, size_t *tail_len_p, const char **what_p)
{
    uint32_t     nc = r->input_len / e->p->page_tokens, hit = 0;
    kvp_client_h c;
    kvp_status_t st;
    uint64_t     t0;

    *what_p = "connect";
    st      = kvp_cluster_client(e->cl, node, &c);
    if (st == KVP_OK && nc > 0) {
        *what_p = "lookup";
        t0      = kvp_time_ns();
        st      = kvp_client_lookup(c, e->ns, e->keys, nc, e->p->layers, &hit);
        s->lookup_ms = first ? ms_since(t0) : s->lookup_ms;
    }
    if (st != KVP_OK) {
        return st;
    }
    memset(part, 0, sizeof(*part));
    part->hit_chunks = hit;
    st = lt_put(e, node, c, r, hit, version, s, res, part, tail_len_p, what_p);
    if (st == KVP_ERR_NOT_FOUND && hit > 0) {
        /* the pages the lookup found were evicted before the record named them (a node under
         * DRAM pressure, no SSD tier): the whole session again, as an engine would (the run
         * used to stop here); those chunks count as misses */
        memset(part, 0, sizeof(*part));
        st = lt_put(e, node, c, r, 0, version, s, res, part, tail_len_p, what_p);
    }
    return st;
}

static int lt_request(lt_engine_t *e, const kvp_lt_req_t *r, uint32_t i, kvp_lt_result_t *res)
{
    kvp_lt_sample_t     *s = &res->samples[i];
    uint32_t             P = e->p->page_tokens, nc = r->input_len / P, rem = r->input_len % P;
    uint32_t             order[KVP_LT_MAX_NODES], took = 0, n;
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         st = KVP_ERR_PEER_UNREACHABLE;
    size_t               tail_len = 0;
    const char          *what = "put";
    uint64_t             t0, version;
    char                 sid[32];

    s->lookup_ms = s->put_ms = s->get_ms = s->resume_ms = NAN;
    if (r->resume >= 0 && lt_resume(e, r, i, s, res) != 0) {
        return -1;
    }
    if (engine_reserve(e, nc) != 0) {
        return fail(e, r, i, "allocation", KVP_ERR_NO_MEMORY);
    }
    for (uint32_t j = 0; j < nc; j++) {
        chunk_tokens(e, r, j);
        e->keys[j] = kvp_chunk_key(j ? &e->keys[j - 1] : NULL, e->ns, e->tok, P);
    }
    s->blocks = r->n_ids;
    s->chunks = nc;
    snprintf(sid, sizeof(sid), "lt-%u", r->session);
    st = kvp_cluster_rank(e->cl, e->ns, sid, order); /* etcd: adopts the newest members */
    if (st != KVP_OK) {
        return fail(e, r, i, "placement", st);
    }
    n       = kvp_cluster_size(e->cl);
    st      = KVP_ERR_PEER_UNREACHABLE;
    version = kvp_version_now(); /* once per put: every replica gets the same (as kvp_cluster_put) */
    for (uint32_t k = 0; k < n && took < e->p->replicas; k++) {
        kvp_lt_part_t part;
        kvp_status_t  pst;

        if (lt_peer(e, order[k])->dead) {
            continue;
        }
        pst = lt_place(e, order[k], took == 0, r, version, s, res, &part, &tail_len, &what);
        if (pst == KVP_OK) { /* a node that failed after its lookup counted nothing */
            kvp_lt_took(s, res, r, P, took == 0, &part);
            took++;
        } else if (n > 1 && kvp_cluster_status_unreachable(pst)) {
            node_failed(e, order[k], pst, false); /* the next live node in rank takes its place */
            st = pst;
        } else {
            return fail(e, r, i, what, pst);
        }
    }
    if (took == 0) {
        return fail(e, r, i, n > 1 ? "put (no live node left)" : what, st);
    }
    t0 = kvp_time_ns();
    st = cluster_get(e, sid, &sp);
    s->get_ms = ms_since(t0);
    if (st != KVP_OK && n > 1 && kvp_cluster_status_unreachable(st)) {
        /* the nodes that just took the session died since (one replica, its node killed between
         * the put and this get): the session stays counted as put there, so the next turn's
         * resume finds it lost; the run goes on (it used to stop here) */
        kvp_session_pages_free(sp);
        s->get_ms = NAN; /* not a fetch: out of sessions_fetched and the get percentiles */
        res->fetches_lost++;
        e->sess_chunks[r->session] = nc;
        return 0;
    }
    if (st != KVP_OK) {
        return fail(e, r, i, "get", st);
    }
    res->bytes_fetched += sp->wire_bytes;
    res->bytes_fetched_fp16 += 4ull * r->input_len * e->p->layers * e->p->heads * e->p->head_dim;
    if (!session_matches(e, sp, nc, rem, tail_len)) {
        kvp_session_pages_free(sp);
        return fail(e, r, i, "check of the fetched session against what was put", KVP_ERR_CORRUPT);
    }
    kvp_session_pages_free(sp);
    e->sess_chunks[r->session] = nc;
    return 0;
}

/* Open loop: wait until the request's trace time (scaled) has come, in short sleeps so that a
 * failure elsewhere stops this client promptly. -1 when stopped. */
static int lt_pace(lt_engine_t *e, uint32_t i)
{
    const kvp_lt_workload_t *w = e->sh->w;
    double                   due, now;
    bool                     slept = false;

    if (e->p->time_scale <= 0) {
        return 0;
    }
    due = (w->reqs[i].ts_ms - w->reqs[0].ts_ms) / e->p->time_scale;
    for (now = (double)(kvp_time_ns() - e->sh->start) / 1e6; due > now && !atomic_load(&e->sh->stop);
         now = (double)(kvp_time_ns() - e->sh->start) / 1e6) {
        double          ms = due - now < LT_TICK_MS ? due - now : LT_TICK_MS;
        struct timespec ts = {0, (long)(ms * 1e6)};

        nanosleep(&ts, NULL);
        slept = true;
    }
    if (!slept && now - due > e->part.behind_max_ms) {
        e->part.behind_max_ms = now - due;
    }
    return atomic_load(&e->sh->stop) ? -1 : 0;
}

/* The last statistics of the node at addr (sh->mu held); NULL when the table is full. */
static kvp_node_stat_t *lt_last(lt_shared_t *sh, const char *addr)
{
    uint32_t i;

    for (i = 0; i < sh->n_last && strcmp(sh->last[i].addr, addr) != 0; i++) {
    }
    if (i == sh->n_last) {
        if (i == sizeof(sh->last) / sizeof(sh->last[0])) {
            return NULL;
        }
        snprintf(sh->last[i].addr, KVP_LT_ADDR_MAX, "%s", addr);
        sh->n_last++;
    }
    return &sh->last[i].stat;
}

/* Node statistics summed over every node seen in the run: those that answer now with what they
 * say, one this client found dead (or that does not answer now, with several nodes: counted and
 * skipped) or that left etcd with its last statistics, so that a delta over a window or the run
 * is over the same nodes at both ends (it used to drop a dead node's counters at the end only:
 * negative spills). Called with sh->mu held. */
static kvp_status_t lt_stat(lt_engine_t *e, kvp_node_stat_t *sum)
{
    lt_shared_t *sh = e->sh;
    uint32_t     n = kvp_cluster_size(e->cl), ok = 0;
    kvp_status_t st = KVP_OK;

    for (uint32_t k = 0; k < n; k++) {
        kvp_node_stat_t x, *last;

        if (lt_peer(e, k)->dead) {
            continue;
        }
        st = kvp_cluster_stat(e->cl, k, &x);
        if (st != KVP_OK && n > 1 && kvp_cluster_status_unreachable(st)) {
            node_failed(e, k, st, true);
            continue;
        }
        if (st != KVP_OK) {
            return st;
        }
        ok++;
        last = lt_last(sh, kvp_cluster_peer(e->cl, k));
        if (last != NULL) {
            *last = x;
        }
    }
    memset(sum, 0, sizeof(*sum));
    for (uint32_t i = 0; i < sh->n_last; i++) {
        for (size_t f = 0; f < sizeof(*sum) / sizeof(uint64_t); f++) {
            ((uint64_t *)sum)[f] += ((const uint64_t *)&sh->last[i].stat)[f];
        }
    }
    return ok > 0 ? KVP_OK : st;
}

/* Request i is done: advance the finished prefix and take the node's statistics for every window
 * it completes, in window order. */
static int lt_complete(lt_engine_t *e, uint32_t i)
{
    lt_shared_t     *sh  = e->sh;
    kvp_lt_result_t *res = sh->res;
    kvp_status_t     st  = KVP_OK;
    uint32_t         k   = 0;

    pthread_mutex_lock(&sh->mu);
    res->samples[i].done = true;
    res->done++;
    while (sh->prefix < sh->w->n && res->samples[sh->prefix].done) {
        sh->prefix++;
    }
    while (st == KVP_OK && sh->next_win < sh->w->n_windows &&
           res->windows[sh->next_win].end <= sh->prefix) {
        kvp_node_stat_t got;

        k  = sh->next_win;
        st = lt_stat(e, &got);
        if (st == KVP_OK) { /* a window whose stat failed stays not taken (it showed zeros and
                             * negative spills) */
            res->windows[k].stat_end = got;
            sh->next_win++;
        }
    }
    sh->last_ns = kvp_time_ns();
    pthread_mutex_unlock(&sh->mu);
    if (st != KVP_OK) {
        uint32_t last = res->windows[k].end - 1;

        return fail(e, &sh->w->reqs[last], last, "node stat", st);
    }
    return 0;
}

static void *lt_client_main(void *arg)
{
    lt_engine_t *e  = arg;
    lt_shared_t *sh = e->sh;

    for (uint32_t i = 0; i < sh->w->n && !atomic_load(&sh->stop); i++) {
        if (sh->owner[i] == e->id &&
            (lt_pace(e, i) != 0 || lt_request(e, &sh->w->reqs[i], i, &e->part) != 0 ||
             lt_complete(e, i) != 0)) {
            break;
        }
    }
    pthread_mutex_lock(&sh->mu);
    sh->running--;
    pthread_mutex_unlock(&sh->mu);
    return NULL;
}

/* Who runs what: all turns of one conversation go to one client, in order (a request that resumes
 * a session joins that session's client, a new conversation goes to the next client round-robin);
 * and each window's run of requests [first, end). */
static int lt_plan(lt_shared_t *sh)
{
    const kvp_lt_workload_t *w    = sh->w;
    uint8_t                 *sess = kvp_calloc(w->n_sessions, 1, "loadtest clients");
    uint32_t                 next = 0;

    if (sess == NULL) {
        return -1;
    }
    for (uint32_t i = 0; i < w->n; i++) {
        const kvp_lt_req_t *r = &w->reqs[i];

        sh->owner[i]      = r->resume >= 0 ? sess[r->resume] : (uint8_t)(next++ % sh->p->clients);
        sess[r->session]  = sh->owner[i];
        sh->res->client_requests[sh->owner[i]]++;
        if (i == 0 || w->reqs[i - 1].window != r->window) {
            sh->res->windows[r->window].first = i;
        }
        sh->res->windows[r->window].end = i + 1;
    }
    kvp_free(sess);
    return 0;
}

static int lt_client_init(lt_engine_t *e, lt_shared_t *sh, uint32_t id, const char *peers,
                          uint32_t timeout_ms)
{
    kvp_client_params_t  cp = {0};
    kvp_cluster_params_t kp = {0};
    kvp_status_t         st;

    if (engine_init(e, sh->p, sh->w) != 0) {
        return -1;
    }
    e->sh           = sh;
    e->id           = id;
    e->part.samples = sh->res->samples;
    cp.field_mask   = KVP_CLIENT_PARAM_TIMEOUT_MS;
    cp.timeout_ms   = timeout_ms;
    kp.field_mask   = KVP_CLUSTER_PARAM_PEERS | KVP_CLUSTER_PARAM_REPLICAS |
                      KVP_CLUSTER_PARAM_CLIENT;
    kp.peers        = peers;
    kp.replicas     = sh->p->replicas;
    kp.client       = &cp;
    if (sh->p->etcd != NULL) { /* the members follow etcd */
        kp.field_mask = (kp.field_mask & ~(uint64_t)KVP_CLUSTER_PARAM_PEERS) |
                        KVP_CLUSTER_PARAM_ETCD;
        kp.etcd       = sh->p->etcd;
    }
    st              = kvp_cluster_create(&kp, &e->cl);
    if (st == KVP_OK && kvp_cluster_size(e->cl) == 1) { /* one node: connect now, as before */
        kvp_client_h c;

        st = kvp_cluster_client(e->cl, 0, &c);
    }
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack loadtest: cannot connect to %s: %s\n", peers, kvp_status_str(st));
        return -1;
    }
    return 0;
}

/* The one progress reporter: all clients' completed requests, until every client has returned. */
static void lt_watch(lt_shared_t *sh)
{
    struct timespec tick = {0, LT_TICK_MS * 1000000L};
    uint32_t        running;

    do {
        nanosleep(&tick, NULL);
        pthread_mutex_lock(&sh->mu);
        running = sh->running;
        if (kvp_lt_interrupted) {
            atomic_store(&sh->stop, 1); /* the clients end after their request in flight */
        }
        if (!atomic_load(&sh->stop)) {
            kvp_progress("loadtest", sh->res->done, sh->w->n);
        }
        pthread_mutex_unlock(&sh->mu);
    } while (running > 0);
    kvp_progress_done();
}

static void lt_merge(kvp_lt_result_t *res, const kvp_lt_result_t *part)
{
    res->resumes += part->resumes;
    res->resumes_lost += part->resumes_lost;
    res->fetches_lost += part->fetches_lost;
    res->bytes_put += part->bytes_put;
    res->bytes_put_fp16 += part->bytes_put_fp16;
    res->bytes_fetched += part->bytes_fetched;
    res->bytes_fetched_fp16 += part->bytes_fetched_fp16;
    res->bytes_resumed += part->bytes_resumed;
    res->encode_s += part->encode_s;
    res->behind_max_ms = part->behind_max_ms > res->behind_max_ms ? part->behind_max_ms
                                                                  : res->behind_max_ms;
}

/* Failures of the node at addr over every client. */
/* Failures of the node at addr over every client, taken (so each is counted once). */
static uint32_t lt_failures_take(lt_engine_t *eng, uint32_t n_eng, const char *addr)
{
    uint32_t f = 0;

    for (uint32_t c = 0; c < n_eng; c++) {
        for (uint32_t i = 0; i < eng[c].n_peer; i++) {
            if (strcmp(eng[c].peer[i].addr, addr) == 0) {
                f += eng[c].peer[i].failures;
                eng[c].peer[i].failures = 0;
            }
        }
    }
    return f;
}

/* res->nodes: the members at the end (eng[0]'s handle, adopted now) with every client's
 * failures, then the nodes that left during the run and had failures. */
static void lt_nodes_list(lt_engine_t *eng, uint32_t n_eng, kvp_lt_result_t *res)
{
    uint64_t gen = 0;

    (void)kvp_cluster_sync(eng[0].cl, &gen);
    res->membership_changes = gen > 1 ? gen - 1 : 0;
    res->n_nodes            = kvp_cluster_size(eng[0].cl);
    for (uint32_t k = 0; k < res->n_nodes; k++) {
        snprintf(res->nodes[k].addr, KVP_LT_ADDR_MAX, "%s", kvp_cluster_peer(eng[0].cl, k));
        res->nodes[k].failures = lt_failures_take(eng, n_eng, res->nodes[k].addr);
    }
    for (uint32_t c = 0; c < n_eng; c++) {
        for (uint32_t i = 0; i < eng[c].n_peer && res->n_nodes < KVP_LT_MAX_NODES; i++) {
            kvp_lt_node_t *n = &res->nodes[res->n_nodes];

            if (eng[c].peer[i].failures > 0) {
                snprintf(n->addr, KVP_LT_ADDR_MAX, "%s", eng[c].peer[i].addr);
                n->failures = lt_failures_take(eng, n_eng, n->addr);
                res->n_nodes++;
            }
        }
    }
}

/* After the run (several nodes): each node's statistics, how many sessions its rank gives it,
 * and the hit references of one big node and of this placement (kvp_lt_reference). */
static int lt_nodes_end(lt_engine_t *e, const kvp_lt_workload_t *w, kvp_lt_result_t *res)
{
    uint32_t  n = kvp_cluster_size(e->cl), order[KVP_LT_MAX_NODES], r = e->p->replicas;
    const char *peers[KVP_LT_MAX_NODES];
    uint8_t  *primary = kvp_calloc(w->n_sessions + 1, 1, "loadtest placement");
    uint64_t *holders = kvp_calloc(w->n_sessions + 1, sizeof(*holders), "loadtest placement");
    uint32_t *hits = kvp_calloc(w->n + 1, sizeof(*hits), "loadtest reference");
    int       rc = -1;

    for (uint32_t k = 0; k < n; k++) { /* the list lt_nodes_list adopted (stat adopts none) */
        res->nodes[k].stat_ok = kvp_cluster_stat(e->cl, k, &res->nodes[k].stat_end) == KVP_OK;
        peers[k]              = res->nodes[k].addr;
    }
    if (primary == NULL || holders == NULL || hits == NULL) {
        goto out;
    }
    for (uint32_t s = 0; s < w->n_sessions; s++) {
        char sid[32];

        snprintf(sid, sizeof(sid), "lt-%u", s);
        if (kvp_placement_rank(peers, n, e->ns, sid, order) != KVP_OK) { /* no adoption */
            goto out;
        }
        primary[s] = (uint8_t)order[0];
        for (uint32_t k = 0; k < r && k < n; k++) {
            holders[s] |= 1ull << order[k];
            res->nodes[order[k]].expected_sessions++;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* one node that holds everything */
            memset(primary, 0, w->n_sessions + 1);
            for (uint32_t s = 0; s < w->n_sessions; s++) {
                holders[s] = 1;
            }
        }
        if (kvp_lt_reference(w, e->p->page_tokens, primary, holders, hits) != 0) {
            goto out;
        }
        for (uint32_t i = 0; i < w->n; i++) { /* the requests that ran, as the hits count */
            *(pass ? &res->ref_single : &res->ref_placed) += res->samples[i].done ? hits[i] : 0;
        }
    }
    rc = 0;
out:
    kvp_free(primary);
    kvp_free(holders);
    kvp_free(hits);
    return rc;
}

/* True when no node answered the call of report rep (each was unreachable, or skipped as such). */
static bool lt_none_answered(const kvp_cluster_report_t *rep)
{
    for (uint32_t k = 0; k < rep->n_tried; k++) {
        if (!kvp_cluster_status_unreachable(rep->tried[k].status)) {
            return false;
        }
    }
    return true;
}

/* The first failure, in delete report rep, of a node that may hold a copy of the session (a put
 * of it was sent there: held, lt_held_bit); KVP_OK when none failed. A node that never took a
 * put of it (one dead from the start) holds no copy, whatever its delete said. */
static kvp_status_t lt_delete_missed(lt_engine_t *e, const kvp_cluster_report_t *rep,
                                     uint64_t held)
{
    for (uint32_t k = 0; k < rep->n_tried; k++) {
        kvp_status_t st = rep->tried[k].status;
        uint32_t     node = rep->tried[k].node;

        if (st != KVP_OK && st != KVP_ERR_NOT_FOUND &&
            (node >= kvp_cluster_size(e->cl) || /* left an etcd list meanwhile: may hold one */
             (held & lt_held_bit(e->sh, kvp_cluster_peer(e->cl, node), false)) != 0)) {
            return st;
        }
    }
    return KVP_OK;
}

/* The end of a run against existing nodes: delete each session a put was sent for from every
 * node (kvp_cluster_delete_session: its record and the pages no other session names). Also after
 * a failure or an interrupt; it stops when no node answers, or at one more SIGINT/SIGTERM (the
 * rest are left). A session is left when a node a put of it was sent to did not delete it (a
 * node that never took one may fail: it holds none); else deleted, or absent when no node held
 * it. A progress line while it runs, then one line: deleted, and left. */
static void lt_delete(lt_engine_t *e, const uint64_t *held, uint32_t n_sessions,
                      kvp_lt_result_t *res)
{
    sig_atomic_t signals = kvp_lt_interrupted;
    kvp_status_t first = KVP_OK;
    const char  *stopped = NULL;
    char         sid[32], why[96] = "";

    for (uint32_t s = 0, done = 0; s < n_sessions && stopped == NULL; s++) {
        kvp_cluster_report_t rep;
        kvp_status_t         st, missed;

        if (held[s] == 0) {
            continue;
        }
        snprintf(sid, sizeof(sid), "lt-%u", s);
        st     = kvp_cluster_delete_session(e->cl, e->ns, sid, &rep);
        missed = lt_delete_missed(e, &rep, held[s]);
        res->sessions_deleted += missed == KVP_OK && rep.n_ok > 0;
        res->sessions_absent += missed == KVP_OK && rep.n_ok == 0;
        if (missed != KVP_OK && first == KVP_OK) {
            first = missed;
            snprintf(why, sizeof(why), "%s: %s", sid, kvp_status_str(missed));
        }
        if (kvp_cluster_status_unreachable(st) && lt_none_answered(&rep)) {
            stopped = "no node answered";
        } else if (kvp_lt_interrupted != signals) {
            stopped = "interrupted";
        }
        kvp_progress("loadtest: deleting sessions", ++done, res->sessions_put);
    }
    kvp_progress_done();
    res->sessions_left = res->sessions_put - res->sessions_deleted - res->sessions_absent;
    if (res->sessions_put == 0) {
        return;
    }
    fprintf(stderr, "kvpack loadtest: deleted %u of its %u sessions from the nodes, %u could not "
                    "be", res->sessions_deleted, res->sessions_put, res->sessions_left);
    if (res->sessions_left > 0) {
        fprintf(stderr, " (%s%s%s); they stay under namespace %016llx (run salt %016llx)", why,
                why[0] != '\0' && stopped != NULL ? "; stopped: " : stopped ? "stopped: " : "",
                stopped != NULL ? stopped : "", (unsigned long long)e->ns,
                (unsigned long long)e->p->salt);
    }
    if (res->sessions_absent > 0) {
        fprintf(stderr, "; %u were on no node (evicted from a node without an SSD tier, or "
                        "their put failed)", res->sessions_absent);
    }
    fputc('\n', stderr);
}

/* 1 when addr is a member of e's cluster now */
static int lt_member(lt_engine_t *e, const char *addr)
{
    for (uint32_t i = 0; i < kvp_cluster_size(e->cl); i++) {
        if (strcmp(kvp_cluster_peer(e->cl, i), addr) == 0) {
            return 1;
        }
    }
    return 0;
}

/* After lt_delete: a node that took puts during the run and is no member now (it left etcd)
 * still holds its copies, which the cluster's delete does not reach; each such node is asked
 * directly. res gets the copies deleted there and the nodes that did not answer (their copies
 * stay; the summary says so). */
static void lt_delete_departed(lt_engine_t *e, const lt_shared_t *sh, uint32_t n_sessions,
                               uint32_t timeout_ms, kvp_lt_result_t *res)
{
    (void)kvp_cluster_sync(e->cl, NULL);
    for (uint32_t i = 0; i < sh->n_last; i++) {
        kvp_client_params_t cp = {0};
        kvp_client_h        c  = NULL;
        kvp_status_t        st = KVP_OK;
        char                sid[32];

        if (lt_member(e, sh->last[i].addr)) {
            continue;
        }
        res->departed_nodes++;
        cp.field_mask = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS;
        cp.server     = sh->last[i].addr;
        cp.timeout_ms = timeout_ms;
        st = kvp_client_create(&cp, &c);
        for (uint32_t s = 0; s < n_sessions && st == KVP_OK; s++) {
            kvp_status_t ds;

            if (sh->held[s] == 0) {
                continue;
            }
            snprintf(sid, sizeof(sid), "lt-%u", s);
            ds = kvp_client_delete_session(c, e->ns, sid);
            res->departed_deleted += ds == KVP_OK;
            st = ds == KVP_OK || ds == KVP_ERR_NOT_FOUND ? KVP_OK : ds;
        }
        if (st != KVP_OK) {
            res->departed_unreachable++;
            fprintf(stderr, "kvpack loadtest: node %s left the cluster during the run and did not "
                            "answer the delete (%s): the copies it took stay there\n",
                    sh->last[i].addr, kvp_status_str(st));
        }
        kvp_client_destroy(c);
    }
    if (res->departed_nodes > 0) {
        fprintf(stderr, "kvpack loadtest: %u node(s) left the cluster during the run: %u copies "
                        "deleted there, %u node(s) not reached\n", res->departed_nodes,
                res->departed_deleted, res->departed_unreachable);
    }
}

int kvp_lt_run(const char *peers, uint32_t timeout_ms, const kvp_lt_params_t *p,
               const kvp_lt_workload_t *w, kvp_lt_result_t *res)
{
    lt_shared_t  sh;
    lt_engine_t *eng = kvp_calloc(p->clients, sizeof(*eng), "loadtest clients");
    uint32_t     ready = 0, started = 0;
    kvp_status_t st;
    int          rc = -1;

    memset(res, 0, sizeof(*res));
    memset(&sh, 0, sizeof(sh));
    pthread_mutex_init(&sh.mu, NULL);
    atomic_init(&sh.stop, 0);
    sh.p         = p;
    sh.w         = w;
    sh.res       = res;
    res->samples = kvp_calloc(w->n, sizeof(*res->samples), "loadtest samples");
    sh.owner     = kvp_calloc(w->n, 1, "loadtest clients");
    sh.held      = kvp_calloc(w->n_sessions + 1, sizeof(*sh.held), "loadtest sessions");
    if (eng == NULL || res->samples == NULL || sh.owner == NULL || sh.held == NULL || lt_plan(&sh) != 0) {
        fprintf(stderr, "kvpack loadtest: out of memory for %u requests\n", w->n);
        goto out;
    }
    for (; ready < p->clients; ready++) {
        if (lt_client_init(&eng[ready], &sh, ready, peers, timeout_ms) != 0) {
            ready++; /* freed below with the others */
            goto out;
        }
    }
    res->ns = eng[0].ns;
    pthread_mutex_lock(&sh.mu);
    st = lt_stat(&eng[0], &res->stat_begin);
    pthread_mutex_unlock(&sh.mu);
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack loadtest: node stat failed: %s\n", kvp_status_str(st));
        goto out;
    }
    sh.start = sh.last_ns = kvp_time_ns();
    sh.running = p->clients;
    res->ran   = true;
    for (; started < p->clients; started++) {
        if (pthread_create(&eng[started].tid, NULL, lt_client_main, &eng[started]) != 0) {
            fprintf(stderr, "kvpack loadtest: cannot start client thread %u\n", started);
            atomic_store(&sh.stop, 1);
            pthread_mutex_lock(&sh.mu);
            sh.running -= p->clients - started;
            pthread_mutex_unlock(&sh.mu);
            break;
        }
    }
    lt_watch(&sh);
    for (uint32_t c = 0; c < started; c++) {
        pthread_join(eng[c].tid, NULL);
        lt_merge(res, &eng[c].part);
    }
    res->wall_s       = (double)(sh.last_ns - sh.start) / 1e9;
    res->windows_done = sh.next_win;
    res->stat_end     = sh.next_win > 0 ? res->windows[sh.next_win - 1].stat_end : res->stat_begin;
    if (!atomic_load(&sh.stop) && res->done == w->n) {
        res->ok = true;
        rc      = 0;
    }
    lt_nodes_list(eng, started, res);
    if (res->n_nodes > 1 && lt_nodes_end(&eng[0], w, res) != 0) {
        fprintf(stderr, "kvpack loadtest: out of memory for the hit references\n");
        rc = -1;
    }
    for (uint32_t s = 0; s < w->n_sessions; s++) {
        res->sessions_put += sh.held[s] != 0;
    }
    if (p->delete_sessions) {
        lt_delete(&eng[0], sh.held, w->n_sessions, res);
        lt_delete_departed(&eng[0], &sh, w->n_sessions, timeout_ms, res);
    }
out:
    for (uint32_t c = 0; c < ready; c++) {
        engine_free(&eng[c]);
    }
    kvp_free(eng);
    kvp_free(sh.owner);
    kvp_free(sh.held);
    pthread_mutex_destroy(&sh.mu);
    return rc;
}

void kvp_lt_result_free(kvp_lt_result_t *res)
{
    kvp_free(res->samples);
    memset(res, 0, sizeof(*res));
}
