/* cmd_loadtest_run.c - the replay engine of `kvpack loadtest`. Per request, against a real node:
 * resume (get the previous turn's session, restored from SSD if cold), lookup of chunk keys chained
 * over token ids derived from the block ids (equal ids at equal positions = equal keys), encode and
 * put only the missing pages (KV from a synthetic pool picked by block id) and the record with its
 * fp16 tail, then the decode side's get, checked against what was put. The first failure stops the
 * run, naming the request. */
#include "cli.h"
#include "cmd_loadtest.h"

#include "eval/eval.h"
#include "kvpack/alloc.h"

#include <math.h>
#include <string.h>
#include <time.h>

#define LT_MODEL_ID    "kvpack-loadtest/synthetic"
#define LT_POOL_CHUNKS 8u /* distinct P-token KV slabs per pool layer */
#define LT_POOL_LAYERS 4u

typedef struct {
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

uint64_t kvp_lt_mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

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

    memset(e, 0, sizeof(*e));
    e->p  = p;
    e->ns = kvp_ns_fingerprint(LT_MODEL_ID, p->layers, p->heads, p->head_dim, p->page_tokens,
                               p->codec);
    page_params(e, p->codec, 0, &pp);
    e->page_cap = kvp_page_max_bytes(&pp);
    page_params(e, KVP_CODEC_FP16, 0, &pp);
    e->tail_cap = kvp_page_max_bytes(&pp);
    if (e->page_cap == 0 || e->tail_cap == 0) {
        fprintf(stderr, "kvpack loadtest: codec %s does not support heads %u head_dim %u P %u\n",
                kvp_codec_name(p->codec), p->heads, p->head_dim, p->page_tokens);
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

static int fail(const kvp_lt_req_t *r, uint32_t i, const char *what, kvp_status_t st)
{
    kvp_progress_done();
    fprintf(stderr, "kvpack loadtest: request %u", i);
    if (r->line > 0) {
        fprintf(stderr, " (trace line %u)", r->line);
    }
    fprintf(stderr, ", session lt-%u: %s failed: %s (%s)\n", r->session, what,
            kvp_status_str(st), kvp_status_name(st));
    if (st == KVP_ERR_NO_SPACE) {
        fprintf(stderr, "kvpack loadtest: a session is served from DRAM, so the largest one must "
                        "fit the node's budget (--dram-budget)\n");
    }
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

static int lt_resume(lt_engine_t *e, kvp_client_h c, const kvp_lt_req_t *r, uint32_t i,
                     kvp_lt_sample_t *s, kvp_lt_result_t *res)
{
    kvp_session_pages_t *sp = NULL;
    char                 sid[32];
    uint64_t             t0 = kvp_time_ns();
    kvp_status_t         st;

    snprintf(sid, sizeof(sid), "lt-%u", (uint32_t)r->resume);
    st           = kvp_client_get_session(c, e->ns, sid, &sp);
    s->resume_ms = ms_since(t0);
    if (st == KVP_OK && sp->desc.n_chunks != e->sess_chunks[r->resume]) {
        st = KVP_ERR_CORRUPT;
    }
    if (st == KVP_OK) {
        res->bytes_resumed += sp->wire_bytes;
        res->resumes++;
    }
    kvp_session_pages_free(sp);
    return st == KVP_OK ? 0 : fail(r, i, "resume (get of the previous turn)", st);
}

/* Encode and put the chunks [hit, nc) and the record; *tail_len_p gets the tail bytes. */
static int lt_put(lt_engine_t *e, kvp_client_h c, const kvp_lt_req_t *r, uint32_t i, uint32_t hit,
                  kvp_lt_sample_t *s, kvp_lt_result_t *res, size_t *tail_len_p)
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
            res->bytes_put += e->lens[n];
        }
    }
    for (uint32_t l = 0; l < L && rem > 0 && st == KVP_OK; l++) {
        st = chunk_encode(e, r, nc, l, KVP_CODEC_FP16, rem, KVP_PAGE_F_TAIL, e->tail + tail_len,
                          e->tail_cap, &len);
        tail_len += len;
    }
    res->encode_s += kvp_time_s() - t_enc;
    if (st != KVP_OK) {
        return fail(r, i, "encode", st);
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
    t0 = kvp_time_ns();
    if (n > 0) {
        st = kvp_client_put_pages(c, e->ns, e->ptrs, e->lens, n);
    }
    if (st == KVP_OK) {
        st = kvp_client_put_session(c, e->ns, sid, &desc);
    }
    s->put_ms    = ms_since(t0);
    s->pages_put = n;
    res->bytes_put += tail_len;
    res->bytes_put_fp16 += 4ull * ((nc - hit) * (uint64_t)P + rem) * L * e->p->heads *
                           e->p->head_dim;
    *tail_len_p = tail_len;
    return st == KVP_OK ? 0 : fail(r, i, n > 0 ? "put (pages, record)" : "put (record)", st);
}

static int lt_request(lt_engine_t *e, kvp_client_h c, const kvp_lt_req_t *r, uint32_t i,
                      kvp_lt_result_t *res)
{
    kvp_lt_sample_t     *s = &res->samples[i];
    uint32_t             P = e->p->page_tokens, nc = r->input_len / P, rem = r->input_len % P;
    uint32_t             cpb = KVP_LT_BLOCK_TOKENS / P, hit = 0;
    kvp_session_pages_t *sp = NULL;
    kvp_status_t         st = KVP_OK;
    size_t               tail_len = 0;
    uint64_t             t0;
    char                 sid[32];

    s->lookup_ms = s->put_ms = s->get_ms = s->resume_ms = NAN;
    if (r->resume >= 0 && lt_resume(e, c, r, i, s, res) != 0) {
        return -1;
    }
    if (engine_reserve(e, nc) != 0) {
        return fail(r, i, "allocation", KVP_ERR_NO_MEMORY);
    }
    for (uint32_t j = 0; j < nc; j++) {
        chunk_tokens(e, r, j);
        e->keys[j] = kvp_chunk_key(j ? &e->keys[j - 1] : NULL, e->ns, e->tok, P);
    }
    if (nc > 0) {
        t0 = kvp_time_ns();
        st = kvp_client_lookup(c, e->ns, e->keys, nc, e->p->layers, &hit);
        s->lookup_ms = ms_since(t0);
        if (st != KVP_OK) {
            return fail(r, i, "lookup", st);
        }
    }
    s->blocks     = r->n_ids;
    s->chunks     = nc;
    s->hit_chunks = hit;
    for (uint32_t b = 0; b < r->n_ids; b++) { /* a block hits when all its sealed chunks do */
        uint32_t end = (b + 1) * cpb < nc ? (b + 1) * cpb : nc;

        s->hit_blocks += end > b * cpb && end <= hit;
    }
    if (lt_put(e, c, r, i, hit, s, res, &tail_len) != 0) {
        return -1;
    }
    snprintf(sid, sizeof(sid), "lt-%u", r->session);
    t0 = kvp_time_ns();
    st = kvp_client_get_session(c, e->ns, sid, &sp);
    s->get_ms = ms_since(t0);
    if (st != KVP_OK) {
        return fail(r, i, "get", st);
    }
    res->bytes_fetched += sp->wire_bytes;
    res->bytes_fetched_fp16 += 4ull * r->input_len * e->p->layers * e->p->heads * e->p->head_dim;
    if (!session_matches(e, sp, nc, rem, tail_len)) {
        kvp_session_pages_free(sp);
        return fail(r, i, "check of the fetched session against what was put", KVP_ERR_CORRUPT);
    }
    kvp_session_pages_free(sp);
    e->sess_chunks[r->session] = nc;
    return 0;
}

/* Open loop: wait until the request's trace time (scaled) has come. */
static void lt_pace(const kvp_lt_params_t *p, const kvp_lt_workload_t *w, uint32_t i,
                    uint64_t start_ns, kvp_lt_result_t *res)
{
    double due, now;

    if (p->time_scale <= 0) {
        return;
    }
    due = (w->reqs[i].ts_ms - w->reqs[0].ts_ms) / p->time_scale;
    now = (double)(kvp_time_ns() - start_ns) / 1e6;
    if (due > now) {
        struct timespec ts = {(time_t)((due - now) / 1000), (long)(fmod(due - now, 1000) * 1e6)};

        nanosleep(&ts, NULL);
    } else if (now - due > res->behind_max_ms) {
        res->behind_max_ms = now - due;
    }
}

int kvp_lt_run(kvp_client_h client, const kvp_lt_params_t *p, const kvp_lt_workload_t *w,
               kvp_lt_result_t *res)
{
    lt_engine_t  e;
    uint64_t     start;
    kvp_status_t st;
    int          rc = 0;

    memset(res, 0, sizeof(*res));
    memset(&e, 0, sizeof(e));
    res->samples = kvp_calloc(w->n, sizeof(*res->samples), "loadtest samples");
    if (res->samples == NULL || engine_init(&e, p, w) != 0) {
        engine_free(&e);
        return -1;
    }
    res->ns = e.ns;
    st = kvp_client_stat(client, &res->stat_begin);
    if (st != KVP_OK) {
        fprintf(stderr, "kvpack loadtest: node stat failed: %s\n", kvp_status_str(st));
        engine_free(&e);
        return -1;
    }
    start = kvp_time_ns();
    for (uint32_t i = 0; i < w->n && rc == 0; i++) {
        kvp_lt_window_t *win = &res->windows[w->reqs[i].window];

        lt_pace(p, w, i, start, res);
        if (i == 0 || w->reqs[i - 1].window != w->reqs[i].window) {
            win->first = i;
        }
        rc = lt_request(&e, client, &w->reqs[i], i, res);
        if (rc == 0 && (i + 1 == w->n || w->reqs[i + 1].window != w->reqs[i].window)) {
            win->end = i + 1;
            st = kvp_client_stat(client, &win->stat_end);
            rc = st == KVP_OK ? 0 : fail(&w->reqs[i], i, "node stat", st);
        }
        res->done += rc == 0;
        kvp_progress("loadtest", i + 1, w->n);
    }
    kvp_progress_done();
    res->wall_s = (double)(kvp_time_ns() - start) / 1e9;
    if (rc == 0) {
        res->stat_end = res->windows[w->reqs[w->n - 1].window].stat_end;
    }
    engine_free(&e);
    return rc;
}

void kvp_lt_result_free(kvp_lt_result_t *res)
{
    kvp_free(res->samples);
    memset(res, 0, sizeof(*res));
}
