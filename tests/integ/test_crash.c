/* test_crash.c - crash consistency of a real kvpackd under --durability sync: a client puts
 * sessions of kivi pages (families of sessions share prefix pages) while a timer thread SIGKILLs
 * the node at seeded random points, >= 20 rounds on one --data-dir. After every restart each
 * acknowledged session must come back byte-identical, and each unacknowledged one must be either
 * absent (NOT_FOUND, confirmed with a raw GET_SESSION so a record with missing pages cannot hide
 * behind the client's NOT_FOUND) or complete and byte-identical. KVP_CRASH_SEED / KVP_CRASH_ROUNDS
 * override the defaults. */
#include "../cluster/node_harness.h"

#include "kvpack/log.h"
#include "kvpack/wire.h"
#include "kvpack/xfer.h"

#include <pthread.h>
#include <time.h>

#define NS         0xC4A5C4A5C4A5C4A5ull
#define FP         0xFA11u /* namespace fingerprint for the chunk keys */
#define N_FAM      6       /* token families: sessions of a family share prefix chunks */
#define MAX_CHUNKS 6
#define LAYERS     4
#define HEADS      4
#define DIM        64
#define PTOK       32
#define MAX_SESS   4096
#define PER_ROUND  400     /* puts per round at most (the kill normally comes first) */

typedef enum { S_NONE = 0, S_UNACKED, S_DURABLE, S_ABSENT } sess_state_t;

typedef struct {
    char         sid[32];
    uint32_t     fam, n_chunks, tail_tokens, tail_seed;
    sess_state_t state;
    int          acked;       /* put_session returned OK */
    uint8_t     *tail;        /* the tail pages back to back */
    size_t       tail_len;
} sess_t;

static uint8_t     *g_pages[N_FAM][MAX_CHUNKS][LAYERS]; /* shared by every session of a family */
static size_t       g_lens[N_FAM][MAX_CHUNKS][LAYERS];
static kvp_key128_t g_keys[N_FAM][MAX_CHUNKS];
static sess_t       g_sess[MAX_SESS];
static uint32_t     g_n_sess;
static uint64_t     g_rng;
static test_node_t *g_node; /* killed at exit, so a failed CHECK leaves no kvpackd behind */

static void node_reap(void)
{
    if (g_node != NULL && g_node->pid > 0) {
        kill(g_node->pid, SIGKILL);
        waitpid(g_node->pid, NULL, 0);
        g_node->pid = 0;
    }
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static uint32_t rng_below(uint32_t n)
{
    return (uint32_t)(rng_next(&g_rng) % n);
}

/* One page of codec over ntok tokens, K/V from a generator seeded by seed. */
static uint8_t *make_page(kvp_codec_id_t codec, uint32_t layer, uint64_t first_pos,
                          kvp_key128_t key, uint32_t ntok, uint32_t flags, uint64_t seed,
                          size_t *len_p)
{
    kvp_page_params_t pp;
    size_t            n = (size_t)ntok * HEADS * DIM;
    float            *k = kvp_malloc(n * sizeof(float), "t k");
    float            *v = kvp_malloc(n * sizeof(float), "t v");
    uint64_t          s = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t          *out;
    size_t            cap;

    CHECK(k != NULL && v != NULL);
    memset(&pp, 0, sizeof(pp));
    pp.codec       = codec;
    pp.heads       = HEADS;
    pp.head_dim    = DIM;
    pp.page_tokens = PTOK;
    pp.layer       = layer;
    pp.first_pos   = first_pos;
    pp.chunk_key   = key;
    pp.flags       = flags;
    for (size_t i = 0; i < n; i++) {
        k[i] = (float)((int64_t)(rng_next(&s) % 2001) - 1000) / 250.0f + ((i % DIM == 7) ? 6.f : 0.f);
        v[i] = (float)((int64_t)(rng_next(&s) % 2001) - 1000) / 400.0f;
    }
    cap = kvp_page_max_bytes(&pp);
    CHECK(cap > 0);
    out = kvp_malloc(cap, "t page");
    CHECK(out != NULL);
    CHECK_ST(kvp_page_encode(&pp, KVP_DTYPE_F32, k, v, ntok, out, cap, len_p), KVP_OK);
    kvp_free(k);
    kvp_free(v);
    return out;
}

static void make_families(void)
{
    uint32_t tokens[PTOK];

    for (uint32_t f = 0; f < N_FAM; f++) {
        for (uint32_t c = 0; c < MAX_CHUNKS; c++) {
            for (uint32_t t = 0; t < PTOK; t++) {
                tokens[t] = f * 100003u + c * PTOK + t;
            }
            g_keys[f][c] = kvp_chunk_key(c ? &g_keys[f][c - 1] : NULL, FP, tokens, PTOK);
            for (uint32_t l = 0; l < LAYERS; l++) {
                g_pages[f][c][l] = make_page(KVP_CODEC_KIVI, l, (uint64_t)c * PTOK, g_keys[f][c],
                                             PTOK, 0, (f * 64 + c) * 8 + l, &g_lens[f][c][l]);
            }
        }
    }
}

/* A new session: a family prefix of 1..MAX_CHUNKS chunks plus its own fp16 tail. */
static sess_t *sess_new(uint32_t round)
{
    sess_t      *s = &g_sess[g_n_sess];
    kvp_key128_t zero = {0, 0};

    CHECK(g_n_sess < MAX_SESS);
    memset(s, 0, sizeof(*s));
    snprintf(s->sid, sizeof(s->sid), "r%02u-s%04u", round, g_n_sess);
    s->fam         = rng_below(N_FAM);
    s->n_chunks    = 1 + rng_below(MAX_CHUNKS);
    s->tail_tokens = 1 + rng_below(PTOK - 1);
    s->tail_seed   = 1000000u + g_n_sess;
    for (uint32_t l = 0; l < LAYERS; l++) {
        size_t   plen;
        uint8_t *p = make_page(KVP_CODEC_FP16, l, (uint64_t)s->n_chunks * PTOK, zero,
                               s->tail_tokens, KVP_PAGE_F_TAIL, (uint64_t)s->tail_seed * 8 + l,
                               &plen);

        s->tail = kvp_realloc(s->tail, s->tail_len + plen, "t tail");
        CHECK(s->tail != NULL);
        memcpy(s->tail + s->tail_len, p, plen);
        s->tail_len += plen;
        kvp_free(p);
    }
    g_n_sess++;
    return s;
}

static void sess_desc(const sess_t *s, kvp_session_desc_t *d)
{
    memset(d, 0, sizeof(*d));
    d->layers      = LAYERS;
    d->page_tokens = PTOK;
    d->n_chunks    = s->n_chunks;
    d->chunk_keys  = (kvp_key128_t *)g_keys[s->fam];
    d->tail_tokens = s->tail_tokens;
    d->n_tail      = LAYERS;
    d->tail_len    = s->tail_len;
    d->tail        = s->tail;
}

/* put_pages then put_session; returns the first failure. */
static kvp_status_t sess_put(kvp_client_h c, const sess_t *s)
{
    const void        *pages[MAX_CHUNKS * LAYERS];
    size_t             lens[MAX_CHUNKS * LAYERS];
    kvp_session_desc_t d;
    kvp_status_t       st;

    for (uint32_t ch = 0; ch < s->n_chunks; ch++) {
        for (uint32_t l = 0; l < LAYERS; l++) {
            pages[ch * LAYERS + l] = g_pages[s->fam][ch][l];
            lens[ch * LAYERS + l]  = g_lens[s->fam][ch][l];
        }
    }
    st = kvp_client_put_pages(c, NS, pages, lens, (size_t)s->n_chunks * LAYERS);
    if (st != KVP_OK) {
        return st;
    }
    sess_desc(s, &d);
    return kvp_client_put_session(c, NS, s->sid, &d);
}

/* A fetched session must be exactly what was put: record, every page, the tail. */
static void sess_check_same(const sess_t *s, const kvp_session_pages_t *sp)
{
    CHECK(sp->desc.layers == LAYERS && sp->desc.page_tokens == PTOK);
    CHECK(sp->desc.n_chunks == s->n_chunks && sp->n_pages == s->n_chunks * LAYERS);
    for (uint32_t ch = 0; ch < s->n_chunks; ch++) {
        CHECK(memcmp(&sp->desc.chunk_keys[ch], &g_keys[s->fam][ch], sizeof(kvp_key128_t)) == 0);
        for (uint32_t l = 0; l < LAYERS; l++) {
            uint32_t i = ch * LAYERS + l;

            CHECK(sp->page_lens[i] == g_lens[s->fam][ch][l]);
            CHECK(memcmp(sp->pages[i], g_pages[s->fam][ch][l], sp->page_lens[i]) == 0);
            CHECK_ST(kvp_page_parse(sp->pages[i], sp->page_lens[i], NULL), KVP_OK);
        }
    }
    CHECK(sp->desc.tail_tokens == s->tail_tokens && sp->desc.n_tail == LAYERS);
    CHECK(sp->desc.tail_len == s->tail_len && memcmp(sp->desc.tail, s->tail, s->tail_len) == 0);
}

/* ---- raw GET_SESSION: does the node hold the record itself? ---- */

static kvp_status_t raw_get_record(uint16_t port, const char *sid)
{
    test_raw_t     r;
    kvp_wire_req_t req;
    uint8_t       *hdr;
    size_t         hl;
    kvp_status_t   s;

    test_raw_open(&r, port);
    memset(&req, 0, sizeof(req));
    req.op     = KVP_WIRE_OP_GET_SESSION;
    req.req_id = 1;
    req.ns     = NS;
    CHECK(strlen(sid) < sizeof(req.sid));
    memcpy(req.sid, sid, strlen(sid) + 1);
    CHECK_ST(kvp_wire_req_pack(&req, &hdr, &hl), KVP_OK);
    test_raw_call(&r, hdr, hl, NULL, 0);
    CHECK_ST(r.unpack, KVP_OK);
    CHECK(r.rep.req_id == 1);
    s = r.rep.status;
    kvp_free(hdr);
    test_raw_close(&r);
    return s;
}

/* ---- one restart: check every session ever attempted ---- */

typedef struct {
    uint32_t acked, unacked_complete, unacked_absent;
} tally_t;

static void verify_all(const test_node_t *n, tally_t *t)
{
    kvp_client_h c = test_client(n->addr, 30000);

    for (uint32_t i = 0; i < g_n_sess; i++) {
        sess_t              *s  = &g_sess[i];
        kvp_session_pages_t *sp = NULL;
        kvp_status_t         st = kvp_client_get_session(c, NS, s->sid, &sp);

        if (st == KVP_OK) {
            sess_check_same(s, sp);
            kvp_session_pages_free(sp);
            if (s->state == S_ABSENT) {
                fprintf(stderr, "FAIL: session %s was absent after an earlier restart and is "
                                "back now\n", s->sid);
                exit(1);
            }
            if (s->state == S_UNACKED) {
                t->unacked_complete++;
            }
            s->state = S_DURABLE; /* seen whole after a crash: it is on disk for good */
            continue;
        }
        if (st != KVP_ERR_NOT_FOUND) {
            fprintf(stderr, "FAIL: session %s (%s) after restart: %s\n", s->sid,
                    s->acked ? "acknowledged" : "unacknowledged", kvp_status_name(st));
            exit(1);
        }
        if (s->state == S_DURABLE) {
            fprintf(stderr, "FAIL: session %s (%s) lost after a restart\n", s->sid,
                    s->acked ? "acknowledged" : "seen complete before");
            exit(1);
        }
        /* NOT_FOUND from the client also covers a record whose pages are missing: ask the node
         * for the record alone; a half-visible session has a record */
        st = raw_get_record(n->port, s->sid);
        if (st != KVP_ERR_NOT_FOUND) {
            fprintf(stderr, "FAIL: unacknowledged session %s is half-visible: the record is "
                            "there (%s) but its pages are not\n", s->sid, kvp_status_name(st));
            exit(1);
        }
        if (s->state == S_UNACKED) {
            t->unacked_absent++;
        }
        s->state = S_ABSENT;
    }
    kvp_client_destroy(c);
}

/* ---- the killer: SIGKILL the node a delay after being armed, from another thread ---- */

typedef struct {
    pid_t           pid;
    uint64_t        delay_us;
    int             armed;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
} killer_t;

static void *killer_main(void *arg)
{
    killer_t       *k = arg;
    struct timespec ts = {(time_t)(k->delay_us / 1000000u), (long)(k->delay_us % 1000000u) * 1000};

    pthread_mutex_lock(&k->mu);
    while (!k->armed) {
        pthread_cond_wait(&k->cv, &k->mu);
    }
    pthread_mutex_unlock(&k->mu);
    while (nanosleep(&ts, &ts) != 0) {
    }
    kill(k->pid, SIGKILL);
    return NULL;
}

static void killer_arm(killer_t *k)
{
    pthread_mutex_lock(&k->mu);
    k->armed = 1;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

/* Put new sessions until the node dies; returns how many were acknowledged. The kill timer
 * starts at connect (cold) or after the first acknowledged put (warm). */
static uint32_t put_until_killed(test_node_t *n, uint32_t round, uint64_t delay_us, int warm,
                                 uint32_t *attempted_p)
{
    kvp_client_params_t p;
    kvp_client_h        c;
    killer_t            k;
    pthread_t           th;
    uint32_t            acked = 0, attempted = 0;
    int                 st;

    memset(&k, 0, sizeof(k));
    k.pid      = n->pid;
    k.delay_us = delay_us;
    CHECK(pthread_mutex_init(&k.mu, NULL) == 0 && pthread_cond_init(&k.cv, NULL) == 0);
    memset(&p, 0, sizeof(p));
    p.field_mask   = KVP_CLIENT_PARAM_SERVER | KVP_CLIENT_PARAM_TIMEOUT_MS |
                     KVP_CLIENT_PARAM_BATCH | KVP_CLIENT_PARAM_INFLIGHT;
    p.server       = n->addr;
    p.timeout_ms   = 3000;
    p.batch_bytes  = 16u << 10; /* several PUT_PAGES messages in flight per session */
    p.max_inflight = 4;
    CHECK(pthread_create(&th, NULL, killer_main, &k) == 0);
    if (!warm) {
        killer_arm(&k);
    }
    CHECK_ST(kvp_client_create(&p, &c), KVP_OK);
    for (uint32_t i = 0; i < PER_ROUND; i++) {
        sess_t      *s = sess_new(round);
        kvp_status_t r;

        s->state = S_UNACKED;
        attempted++;
        r = sess_put(c, s);
        if (i == 0) {
            killer_arm(&k);
        }
        if (r != KVP_OK) {
            break; /* the node is gone (or going): this session stays unacknowledged */
        }
        s->acked = 1;
        s->state = S_DURABLE;
        acked++;
    }
    killer_arm(&k);
    CHECK(pthread_join(th, NULL) == 0);
    pthread_mutex_destroy(&k.mu);
    pthread_cond_destroy(&k.cv);
    kvp_client_destroy(c);
    CHECK(waitpid(n->pid, &st, 0) == n->pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    n->pid       = 0;
    *attempted_p = attempted;
    return acked;
}

int main(void)
{
    const char *seed_env   = getenv("KVP_CRASH_SEED");
    const char *rounds_env = getenv("KVP_CRASH_ROUNDS");
    uint64_t    seed       = seed_env ? strtoull(seed_env, NULL, 0) : 0x5EEDC0DEull;
    uint32_t    rounds     = rounds_env ? (uint32_t)strtoul(rounds_env, NULL, 0) : 24;
    tally_t     t          = {0, 0, 0};
    uint32_t    total_acked = 0, killed_mid_put = 0;
    test_node_t n;
    double      t0 = kvp_time_s();

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    g_rng = seed ? seed : 1;
    fprintf(stderr, "test_crash: seed 0x%llx, %u rounds (KVP_CRASH_SEED / KVP_CRASH_ROUNDS)\n",
            (unsigned long long)seed, rounds);
    make_families();
    test_node_mkdir(&n);
    n.pid  = 0;
    g_node = &n;
    atexit(node_reap);
    test_node_start(&n, "--durability=sync");
    for (uint32_t r = 0; r < rounds; r++) {
        /* cold rounds time the kill from connect, warm ones from the first acknowledged put;
         * the delay's scale varies: mid-connect or mid-first-put, within a few puts, many puts */
        static const uint32_t scale_us[] = {30000, 3000, 12000, 60000};
        int                   warm  = (r % 4) != 0;
        uint64_t              delay = rng_below(scale_us[r % 4]);
        uint32_t              attempted, acked;

        acked = put_until_killed(&n, r, delay, warm, &attempted);
        total_acked += acked;
        killed_mid_put += (attempted > acked);
        test_node_start(&n, "--durability=sync");
        verify_all(&n, &t);
        fprintf(stderr, "round %2u: kill %6.1f ms after %s, %3u puts acknowledged, %u in "
                        "flight; restart ok (%u sessions checked)\n",
                r, delay / 1000.0, warm ? "1st put" : "connect", acked, attempted - acked,
                g_n_sess);
    }
    /* the raw probe itself tells a present record from an absent one */
    for (uint32_t i = 0; i < g_n_sess; i++) {
        if (g_sess[i].acked) {
            CHECK_ST(raw_get_record(n.port, g_sess[i].sid), KVP_OK);
            break;
        }
    }
    CHECK_ST(raw_get_record(n.port, "never-put"), KVP_ERR_NOT_FOUND);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    test_node_rmdir(&n);
    fprintf(stderr, "test_crash: %u rounds in %.1f s: %u acknowledged sessions all resumed "
                    "byte-identical; unacknowledged: %u complete, %u absent, none partial; "
                    "%u kills landed mid-put\n",
            rounds, kvp_time_s() - t0, total_acked, t.unacked_complete, t.unacked_absent,
            killed_mid_put);
    CHECK(total_acked > 0);
    CHECK(killed_mid_put > 0);
    for (uint32_t i = 0; i < g_n_sess; i++) {
        kvp_free(g_sess[i].tail);
    }
    for (uint32_t f = 0; f < N_FAM; f++) {
        for (uint32_t c = 0; c < MAX_CHUNKS; c++) {
            for (uint32_t l = 0; l < LAYERS; l++) {
                kvp_free(g_pages[f][c][l]);
            }
        }
    }
    printf("test_crash: ok\n");
    return 0;
}
