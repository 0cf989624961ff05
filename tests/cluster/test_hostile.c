/* test_hostile.c - the node's request handlers against requests that decode (proto/wire accepts
 * them) but carry hostile values, over the real transport to a real kvpackd (--data-dir, a small
 * --dram-budget): zero, huge and off-by-one counts (pages, layers, keys, start, max_bytes, list
 * limits; 480 keys x 4096 layers, records of up to 2^20 chunks x 65535 layers), page lengths that
 * split the data wrongly, records that lie about their counts or name pages that are not there,
 * an append refused after a tombstone (no chunk sealed), empty / 127-byte / odd-byte session
 * ids, ns and versions 0 and UINT64_MAX, appends with bad codecs and ids, a delete racing a put,
 * repeats. A fixed seed (systematic edge cases first, then random combinations): every request is
 * answered, nonsense with an error and a message, sound ones with OK (pages byte-identical); then
 * the node is alive, a session put before the flood is intact, a new one round-trips, and once
 * the flood's sessions are dropped STAT's page and session counts are what they were before. */
#include "node_harness.h"

#include "kvpack/bytes.h"
#include "kvpack/log.h"
#include "kvpack/rand.h"

#define NS      0x5ca1ab1e5ca1ab1eull /* the session put before the flood ("pre") */
#define NS_H    0x0badc0de0badc0deull /* the flood's own writes */
#define NS_R    0x7ace7ace7ace7aceull /* a put and a delete racing (pre's pages again) */
#define PRE_L   3u
#define PRE_C   7u
#define DEPTH   8u     /* requests in flight per connection (libkvpack's own) */
#define N_RAND  5000u  /* random requests after the systematic ones */
#define REPLY_S 30.0   /* a reply not seen after this long: the node did not answer */
#define SEED    0x6e0de5eedull

enum { WANT_ANY, WANT_OK, WANT_ERR, WANT_NOT_FOUND };
enum { CHK_NONE, CHK_PRE_SESSION, CHK_PRE_PAGES, CHK_LIST, CHK_LOOKUP };

#define NONE     UINT32_MAX /* a key that is none of pre's */
#define BIG_KEYS 480u /* about the most keys (16 bytes each) a request header fits in 8 KiB */

static const kvp_key128_t *pre_keys;

typedef struct {
    int            busy, answered;
    kvp_status_t   sent;      /* the send's outcome: KVP_INPROGRESS until reported */
    uint64_t       req_id;
    kvp_wire_op_t  op;
    int            want, check;
    uint32_t       n_keys, layers, start, limit; /* GET_PAGES / LOOKUP / LIST checks */
    uint32_t      *key_idx;   /* GET_PAGES: pre's chunk of each key, NONE if not one */
    uint8_t       *data;      /* the request's data: owned until sent and answered */
    double         t_sent;
    char           what[160];
} slot_t;

typedef struct {
    kvp_xfer_h      x;
    kvp_xfer_conn_h conn[2];
    slot_t          slot[2][DEPTH];
    uint64_t        next_id;
    uint64_t        sent, answered, ok, err;
    test_session_t *pre;
    uint64_t        rng;
} flood_t;

/* ---- deterministic PRNG (splitmix64) ---- */

static uint64_t rnd(flood_t *f) { return kvp_splitmix64(&f->rng); }

static uint32_t rnd_below(flood_t *f, uint32_t n)
{
    return n ? (uint32_t)(rnd(f) % n) : 0;
}

#define PICK(f, arr) ((arr)[rnd_below((f), sizeof(arr) / sizeof((arr)[0]))])

static const uint64_t ns_edge[] = {NS, NS, NS_H, 0, UINT64_MAX, 1, NS + 1, NS_H ^ 1};
static const uint64_t ver_edge[] = {0, 1, UINT64_MAX, UINT64_MAX - 1, 1ull << 63};

/* Session ids the flood reuses (also odd bytes, path-like, the 127-byte maximum); "pre" is the
 * one the flood must not change in NS. */
static const char *const sid_pool[] = {
    "pre", "s1", "s2", "a/b", "../../etc/passwd", "%s%n%x", "tab\there", "new\nline",
    "\x01\x02\x7f", "\xff\xfe\xfd", "\xc3\xa9t\xc3\xa9", " ", "x", "pre ", "PRE", "s1\x01",
};

static void sid_pick(flood_t *f, char *sid)
{
    uint32_t r = rnd_below(f, 20);

    if (r < 16) {
        snprintf(sid, KVP_SID_MAX, "%s", sid_pool[r]);
    } else if (r == 16) { /* the longest id: 127 bytes of one odd byte */
        memset(sid, 0x80 + (int)rnd_below(f, 0x7f), KVP_SID_MAX - 1);
        sid[KVP_SID_MAX - 1] = '\0';
    } else if (r == 17) {
        memset(sid, 'L', KVP_SID_MAX - 1);
        sid[KVP_SID_MAX - 1] = '\0';
    } else { /* bytes 1..255, up to 127 of them */
        uint32_t n = 1 + rnd_below(f, KVP_SID_MAX - 1);

        for (uint32_t i = 0; i < n; i++) {
            sid[i] = (char)(1 + rnd_below(f, 255));
        }
        sid[n] = '\0';
    }
}

/* ---- replies ---- */

static slot_t *slot_find(flood_t *f, uint64_t req_id)
{
    for (int c = 0; c < 2; c++) {
        for (uint32_t i = 0; i < DEPTH; i++) {
            slot_t *s = &f->slot[c][i];

            if (s->busy && !s->answered && s->req_id == req_id) {
                return s;
            }
        }
    }
    return NULL;
}

/* An OK GET_SESSION of pre: its record, then a prefix of its pages, all byte-identical. */
static void check_pre_session(flood_t *f, slot_t *s, const kvp_wire_rep_t *rep,
                              const uint8_t *data, size_t dl)
{
    kvp_session_desc_t d;
    size_t             off = rep->record_len;

    EXPECT(rep->record_len > 0 && rep->record_len <= dl, "%s: record_len %u", s->what,
           rep->record_len);
    if (rep->record_len == 0 || rep->record_len > dl) {
        return;
    }
    CHECK_OK(kvp_session_desc_unpack(data, rep->record_len, &d));
    EXPECT(d.layers == PRE_L && d.n_chunks == PRE_C, "%s: record %u x %u", s->what, d.layers,
           d.n_chunks);
    kvp_session_desc_clear(&d);
    EXPECT(rep->n_pages <= f->pre->n_pages, "%s: %u pages", s->what, rep->n_pages);
    for (uint32_t i = 0; i < rep->n_pages && i < f->pre->n_pages; i++) {
        EXPECT(rep->page_lens[i] == f->pre->lens[i] &&
                   memcmp(data + off, f->pre->pages[i], f->pre->lens[i]) == 0,
               "%s: page %u differs", s->what, i);
        off += rep->page_lens[i];
    }
}

/* An OK GET_PAGES: at least one page, each pre's page of its item. */
static void check_pre_pages(flood_t *f, slot_t *s, const kvp_wire_rep_t *rep,
                            const uint8_t *data)
{
    size_t off = 0;

    EXPECT(rep->n_pages >= 1, "%s: no page", s->what);
    EXPECT((uint64_t)s->start + rep->n_pages <= (uint64_t)s->n_keys * s->layers,
           "%s: %u pages past the end", s->what, rep->n_pages);
    for (uint32_t i = 0; i < rep->n_pages; i++) {
        uint64_t item  = (uint64_t)s->start + i;
        uint32_t chunk = item / s->layers < s->n_keys ? s->key_idx[item / s->layers] : NONE;
        uint32_t layer = (uint32_t)(item % s->layers);
        uint32_t k     = chunk * PRE_L + layer;

        EXPECT(chunk != NONE && layer < PRE_L, "%s: item %llu is no page of pre's", s->what,
               (unsigned long long)item);
        if (chunk == NONE || layer >= PRE_L) {
            return;
        }
        EXPECT(rep->page_lens[i] == f->pre->lens[k] &&
                   memcmp(data + off, f->pre->pages[k], f->pre->lens[k]) == 0,
               "%s: item %llu differs", s->what, (unsigned long long)item);
        off += rep->page_lens[i];
    }
}

static void slot_done(slot_t *s)
{
    if (s->answered && s->sent != KVP_INPROGRESS) {
        kvp_free(s->data);
        kvp_free(s->key_idx);
        memset(s, 0, sizeof(*s));
    }
}

static void flood_recv(void *arg, kvp_xfer_conn_h conn, kvp_xfer_msg_h msg)
{
    flood_t       *f = arg;
    kvp_wire_rep_t rep;
    size_t         hl, dl;
    const void    *h    = kvp_xfer_msg_hdr(msg, &hl);
    const uint8_t *data = kvp_xfer_msg_data(msg, &dl);
    slot_t        *s;

    (void)conn;
    memset(&rep, 0, sizeof(rep));
    CHECK_OK(kvp_wire_rep_unpack(h, hl, dl, &rep));
    s = slot_find(f, rep.req_id);
    if (s == NULL) {
        fprintf(stderr, "FAIL: a reply to request %llu, which is not waiting\n",
                (unsigned long long)rep.req_id);
        exit(1);
    }
    s->answered = 1;
    f->answered++;
    EXPECT(rep.op == s->op, "%s: reply op %s", s->what, kvp_wire_op_name(rep.op));
    EXPECT(rep.status == KVP_OK || rep.status < 0, "%s: status %d", s->what, (int)rep.status);
    if (rep.status != KVP_OK) {
        f->err++;
        EXPECT(rep.message[0] != '\0', "%s: %s without a message", s->what,
               kvp_status_name(rep.status));
    } else {
        f->ok++;
    }
    EXPECT(s->want != WANT_OK || rep.status == KVP_OK, "%s: %s (%s), want OK", s->what,
           kvp_status_name(rep.status), rep.message);
    EXPECT(s->want != WANT_ERR || rep.status != KVP_OK, "%s: OK, want an error", s->what);
    EXPECT(s->want != WANT_NOT_FOUND || rep.status == KVP_ERR_NOT_FOUND, "%s: %s (%s), want "
           "NOT_FOUND", s->what, kvp_status_name(rep.status), rep.message);
    if (rep.status == KVP_OK) {
        switch (s->check) {
        case CHK_PRE_SESSION:
            check_pre_session(f, s, &rep, data, dl);
            break;
        case CHK_PRE_PAGES:
            check_pre_pages(f, s, &rep, data);
            break;
        case CHK_LIST:
            EXPECT(rep.n_sessions <= s->limit, "%s: %u sessions", s->what, rep.n_sessions);
            break;
        case CHK_LOOKUP:
            EXPECT(rep.hit_chunks <= s->n_keys, "%s: %u hits", s->what, rep.hit_chunks);
            break;
        default:
            break;
        }
    }
    kvp_wire_rep_clear(&rep);
    kvp_xfer_msg_release(msg);
    slot_done(s);
}

static void flood_sent(void *arg, kvp_status_t status)
{
    slot_t *s = arg;

    s->sent = status;
    slot_done(s);
}

/* Progress until a slot of connection c is free; fails when a request went unanswered past
 * REPLY_S (the node hung, crashed or dropped it). */
static slot_t *slot_get(flood_t *f, int c)
{
    for (;;) {
        double now = kvp_time_s();

        for (uint32_t i = 0; i < DEPTH; i++) {
            slot_t *s = &f->slot[c][i];

            if (!s->busy) {
                return s;
            }
            if (!s->answered && now - s->t_sent > REPLY_S) {
                fprintf(stderr, "FAIL: no reply to %s after %.0f s\n", s->what, REPLY_S);
                exit(1);
            }
        }
        kvp_xfer_wait(f->x, 20);
    }
}

static void flood_drain(flood_t *f)
{
    for (int c = 0; c < 2; c++) {
        for (uint32_t i = 0; i < DEPTH; i++) {
            while (f->slot[c][i].busy) {
                double now = kvp_time_s();

                if (!f->slot[c][i].answered && now - f->slot[c][i].t_sent > REPLY_S) {
                    fprintf(stderr, "FAIL: no reply to %s after %.0f s\n", f->slot[c][i].what,
                            REPLY_S);
                    exit(1);
                }
                kvp_xfer_wait(f->x, 20);
            }
        }
    }
}

/* Send req with dl bytes of data (transferred: freed once sent and answered) on connection c.
 * key_idx (transferred, may be NULL) goes with a GET_PAGES check. */
static void flood_send(flood_t *f, int c, kvp_wire_req_t *req, uint8_t *data, size_t dl, int want,
                       int check, uint32_t *key_idx, const char *what)
{
    slot_t        *s = slot_get(f, c);
    kvp_xfer_iov_t iov = {data, dl};
    uint8_t       *hdr;
    size_t         hl;
    kvp_status_t   st;

    req->req_id = ++f->next_id;
    CHECK_OK(kvp_wire_req_pack(req, &hdr, &hl));
    memset(s, 0, sizeof(*s));
    s->busy    = 1;
    s->req_id  = req->req_id;
    s->op      = req->op;
    s->want    = want;
    s->check   = check;
    s->n_keys  = req->n_keys;
    s->layers  = req->layers;
    s->start   = req->start;
    s->limit   = req->limit;
    s->key_idx = key_idx;
    s->data    = data;
    s->sent    = KVP_INPROGRESS;
    s->t_sent  = kvp_time_s();
    snprintf(s->what, sizeof(s->what), "#%llu %s %s", (unsigned long long)req->req_id,
             kvp_wire_op_name(req->op), what);
    st = kvp_xfer_send(f->conn[c], hdr, hl, &iov, dl ? 1 : 0, flood_sent, s);
    kvp_free(hdr);
    CHECK(st == KVP_OK || st == KVP_INPROGRESS);
    if (st == KVP_OK) {
        s->sent = KVP_OK;
    }
    f->sent++;
}

/* ---- request makers ---- */

static uint8_t *bytes_random(flood_t *f, size_t n)
{
    uint8_t *b = kvp_malloc(n ? n : 1, "hostile data");

    CHECK(b != NULL);
    for (size_t i = 0; i < n; i++) {
        b[i] = (uint8_t)rnd(f);
    }
    return b;
}

/* PUT_PAGES: lengths and bytes that do not make pages (OK only when every page is one of pre's,
 * whole, in NS; an error for anything else, in any namespace). */
static void make_put_pages(flood_t *f, int c)
{
    static const uint32_t counts[] = {1, 1, 2, 3, PRE_L * PRE_C, 64, 4095, 4096};
    const test_session_t *pre = f->pre;
    kvp_wire_req_t        req;
    uint32_t              n, *lens, *ks;
    size_t                total = 0, off = 0;
    uint8_t              *data;
    int                   mode = (int)rnd_below(f, 6), flip = 0;
    char                  what[100];

    n = PICK(f, counts);
    if (n > 64 && mode != 0) {
        n = 1 + rnd_below(f, 64);
    }
    lens = kvp_calloc(n, sizeof(*lens), "hostile lens");
    ks   = kvp_calloc(n, sizeof(*ks), "hostile ks");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t d = 1 + rnd_below(f, 64);

        ks[i] = rnd_below(f, pre->n_pages);
        if (mode == 0) { /* headers only, or a byte past one: up to 4096 tiny non-pages */
            lens[i] = KVP_PAGE_HDR_BYTES + rnd_below(f, 2);
        } else if (mode == 1) { /* pre's pages, whole */
            lens[i] = (uint32_t)pre->lens[ks[i]];
        } else if (mode == 2) { /* a page cut short */
            lens[i] = (uint32_t)pre->lens[ks[i]] - d;
        } else if (mode == 3) { /* a page with bytes after it */
            lens[i] = (uint32_t)pre->lens[ks[i]] + d;
        } else { /* random bytes of a page's length */
            lens[i] = (uint32_t)pre->lens[ks[i]];
        }
        total += lens[i];
    }
    data = kvp_malloc(total ? total : 1, "hostile pages");
    for (uint32_t i = 0; i < n; i++) {
        size_t m = lens[i] < pre->lens[ks[i]] ? lens[i] : pre->lens[ks[i]];

        if (mode >= 1 && mode <= 3) {
            memcpy(data + off, pre->pages[ks[i]], m);
            memset(data + off + m, 0, lens[i] - m);
        } else {
            for (uint32_t j = 0; j < lens[i]; j++) {
                data[off + j] = (uint8_t)rnd(f);
            }
        }
        off += lens[i];
    }
    if (mode == 1 && rnd_below(f, 4) == 0) { /* one flipped bit */
        data[rnd_below(f, (uint32_t)total)] ^= (uint8_t)(1u << rnd_below(f, 8));
        flip = 1;
    }
    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_PUT_PAGES;
    /* pre's pages go to NS even with one flipped: the others are stored (each page is tried),
     * and elsewhere they would be new pages the flood leaves behind */
    req.ns        = mode == 1 ? NS : PICK(f, ns_edge);
    req.n_pages   = n;
    req.page_lens = lens;
    snprintf(what, sizeof(what), "%u pages mode %d flip %d ns %llx", n, mode, flip,
             (unsigned long long)req.ns);
    flood_send(f, c, &req, data, total, (mode == 1 && !flip) ? WANT_OK : WANT_ERR, CHK_NONE,
               NULL, what);
    kvp_free(lens);
    kvp_free(ks);
}

/* A record as given (kvp_session_desc_pack checks nothing), keys from pre or not. */
static uint8_t *record_make(const kvp_session_desc_t *d, size_t *len_p)
{
    uint8_t *b;

    CHECK_OK(kvp_session_desc_pack(d, &b, len_p));
    return b;
}

/* PUT_SESSION: sound records naming pre's pages under new ids (OK), and records that lie. */
static void make_put_session(flood_t *f, int c, uint32_t round)
{
    const test_session_t *pre = f->pre;
    kvp_session_desc_t    d   = pre->desc;
    kvp_wire_req_t        req;
    uint8_t              *rec, *data;
    size_t                rl, pl = 0;
    uint32_t              n_pages = 0, lens[PRE_L * PRE_C], kind = rnd_below(f, 14);
    kvp_key128_t         *keys = NULL;
    int                   want = WANT_ERR;
    char                  what[200];

    memset(&req, 0, sizeof(req));
    req.op      = KVP_WIRE_OP_PUT_SESSION;
    req.ns      = NS;
    req.version = rnd_below(f, 2) ? 0 : PICK(f, ver_edge);
    snprintf(req.sid, sizeof(req.sid), "ok-%u", round); /* fresh: a sound put is OK */
    switch (kind) {
    case 0: /* pre's record as it is */
        want = WANT_OK;
        break;
    case 1: /* a prefix of pre's chunks, no tail */
        d.n_chunks    = rnd_below(f, PRE_C + 1);
        d.tail_tokens = d.n_tail = 0;
        d.tail_len    = 0;
        d.tail        = NULL;
        want          = WANT_OK;
        break;
    case 2: /* layers the pages do not have, or no record could */
        d.layers = (uint32_t)PICK(f, ((const uint64_t[]){0, PRE_L + 1, 65535, 65536, UINT32_MAX}));
        d.tail_tokens = d.n_tail = 0;
        d.tail_len    = 0;
        d.tail        = NULL;
        break;
    case 3: /* page_tokens 0, not the pages', past the largest */
        d.page_tokens = (uint32_t)PICK(f, ((const uint64_t[]){0, 1, 16, 64, 4097, UINT32_MAX}));
        d.tail_tokens = d.n_tail = 0;
        d.tail_len    = 0;
        d.tail        = NULL;
        break;
    case 4: /* pre's keys, then keys nobody put: up to 65537 of them, by 65535 layers a record
             * of more than 2^32 pages (1 MiB of keys) */
        d.n_chunks = PICK(f, ((const uint32_t[]){1 + rnd_below(f, 64), 1 + rnd_below(f, 64), 4096,
                                                 65537}));
        d.layers   = d.n_chunks == 65537 || rnd_below(f, 2) ? 65535 : PRE_L;
        keys       = kvp_calloc(d.n_chunks, sizeof(*keys), "hostile keys");
        for (uint32_t i = 0; i < d.n_chunks; i++) {
            keys[i] = i < PRE_C ? pre->desc.chunk_keys[i] : (kvp_key128_t){rnd(f), rnd(f)};
        }
        d.chunk_keys = keys;
        d.tail_tokens = d.n_tail = 0;
        d.tail_len    = 0;
        d.tail        = NULL;
        want          = WANT_NOT_FOUND; /* as for one chunk missing: no more work, no memory */
        break;
    case 5: /* one key named twice */
        keys = kvp_calloc(PRE_C, sizeof(*keys), "hostile keys");
        memcpy(keys, pre->desc.chunk_keys, PRE_C * sizeof(*keys));
        keys[PRE_C - 1] = keys[rnd_below(f, PRE_C - 1)];
        d.chunk_keys    = keys;
        break;
    case 6: /* tail counts that disagree */
        d.tail_tokens = rnd_below(f, 2) ? 0 : (rnd_below(f, 2) ? TS_P : TS_P + 1);
        d.n_tail      = rnd_below(f, 2) ? PRE_L : PRE_L + 1;
        if (d.tail_tokens == pre->desc.tail_tokens && d.n_tail == PRE_L) {
            d.n_tail = 1;
        }
        break;
    case 7: /* a tail of garbage */
        d.tail = bytes_random(f, d.tail_len);
        break;
    case 8: /* sound record, another namespace: its pages are not there */
        req.ns = PICK(f, ((const uint64_t[]){0, UINT64_MAX, NS_H, NS + 1}));
        d.n_chunks    = 1 + rnd_below(f, PRE_C);
        d.tail_tokens = d.n_tail = 0;
        d.tail_len    = 0;
        d.tail        = NULL;
        want          = WANT_NOT_FOUND;
        break;
    case 9: /* pre's pages with it, all sound */
        n_pages = 1 + rnd_below(f, PRE_L * PRE_C);
        want    = WANT_OK;
        break;
    case 10: /* a page with it that is not one: the record is not written */
        n_pages = 1 + rnd_below(f, PRE_L * PRE_C);
        break;
    case 11: /* the record's bytes damaged */
    case 12:
        break;
    default: /* a sid of the flood's pool (repeats, odd bytes): OK or STALE */
        sid_pick(f, req.sid);
        if (strcmp(req.sid, "pre") == 0) {
            req.sid[0] = 'q';
        }
        want = WANT_ANY;
        break;
    }
    rec = record_make(&d, &rl);
    if (kind == 11) {
        rec[rnd_below(f, (uint32_t)rl)] ^= (uint8_t)(1u << rnd_below(f, 8));
    } else if (kind == 12) {
        rl = 1 + rnd_below(f, (uint32_t)rl - 1); /* cut short */
    }
    for (uint32_t i = 0; i < n_pages; i++) {
        lens[i] = (uint32_t)pre->lens[i];
        pl += lens[i];
    }
    data = kvp_malloc(pl + rl, "hostile put");
    pl   = 0;
    for (uint32_t i = 0; i < n_pages; i++) {
        memcpy(data + pl, pre->pages[i], lens[i]);
        pl += lens[i];
    }
    if (kind == 10) {
        data[rnd_below(f, (uint32_t)pl)] ^= 0x20;
    }
    memcpy(data + pl, rec, rl);
    req.n_pages    = n_pages;
    req.page_lens  = n_pages ? lens : NULL;
    req.record_len = (uint32_t)rl;
    snprintf(what, sizeof(what), "kind %u round %u ns %llx layers %u P %u chunks %u tail "
             "%u/%u/%zu version %llu, %u pages", kind, round, (unsigned long long)req.ns,
             d.layers, d.page_tokens, d.n_chunks, d.tail_tokens, d.n_tail, d.tail_len,
             (unsigned long long)req.version, n_pages);
    flood_send(f, c, &req, data, pl + rl, want, CHK_NONE, NULL, what);
    kvp_free(rec);
    kvp_free(keys);
    if (kind == 7) {
        kvp_free(d.tail);
    }
}

/* GET_SESSION: pre (OK, checked), ids never put (error), the pool; every max_bytes. */
static void make_get_session(flood_t *f, int c)
{
    static const uint32_t mb[] = {0, 1, 63, 64, 16000, 17000, 1u << 20, UINT32_MAX - 1,
                                  UINT32_MAX};
    kvp_wire_req_t        req;
    uint32_t              r = rnd_below(f, 3);
    int                   want = WANT_ANY;
    char                  what[200];

    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_GET_SESSION;
    req.max_bytes = PICK(f, mb);
    if (r == 0) {
        req.ns = NS;
        snprintf(req.sid, sizeof(req.sid), "pre");
        want = WANT_OK;
    } else if (r == 1) {
        req.ns = PICK(f, ns_edge);
        snprintf(req.sid, sizeof(req.sid), "never-%llx", (unsigned long long)rnd(f));
        want = WANT_ERR;
    } else {
        req.ns = PICK(f, ns_edge);
        sid_pick(f, req.sid);
        want = (req.ns == NS && strcmp(req.sid, "pre") == 0) ? WANT_OK : WANT_ANY;
    }
    snprintf(what, sizeof(what), "ns %llx max_bytes %u", (unsigned long long)req.ns,
             req.max_bytes);
    flood_send(f, c, &req, NULL, 0, want, want == WANT_OK ? CHK_PRE_SESSION : CHK_NONE, NULL,
               what);
}

/* Keys for GET_PAGES / LOOKUP: pre's chunks (idx) or keys nobody put (NONE). */
static void keys_make(flood_t *f, uint32_t n, kvp_key128_t *keys, uint32_t *idx)
{
    uint32_t mode = rnd_below(f, 4);

    for (uint32_t i = 0; i < n; i++) {
        if (mode == 0 || (mode == 1 && rnd_below(f, 4) != 0)) {
            idx[i]  = rnd_below(f, PRE_C);
            keys[i] = f->pre->desc.chunk_keys[idx[i]];
        } else if (mode == 2) { /* pre's in order, from chunk 0 */
            idx[i]  = i % PRE_C;
            keys[i] = f->pre->desc.chunk_keys[idx[i]];
        } else {
            idx[i]  = NONE;
            keys[i] = PICK(f, ((const kvp_key128_t[]){{0, 0}, {UINT64_MAX, UINT64_MAX},
                                                      {i, 0}, {rnd(f), rnd(f)}}));
        }
    }
}

/* BIG_KEYS keys, a header under the transport's 8 KiB limit: pre's chunks first, then
 * small ones nobody put */
static void keys_big(kvp_key128_t *keys, uint32_t *idx)
{
    for (uint32_t i = 0; i < BIG_KEYS; i++) {
        idx[i]  = i < PRE_C ? i : NONE;
        keys[i] = i < PRE_C ? pre_keys[i] : (kvp_key128_t){i, 0};
    }
}

static void make_get_pages(flood_t *f, int c, int lookup)
{
    static const uint32_t nk[]  = {1, 2, PRE_C, 64, BIG_KEYS};
    static const uint32_t nl[]  = {1, 2, PRE_L, PRE_L + 1, 4096};
    static const uint32_t mb[]  = {1, 64, 16000, 17000, 1u << 20, UINT32_MAX};
    kvp_wire_req_t        req;
    uint32_t              n = PICK(f, nk), *idx, all = 1;
    uint64_t              items, ns = rnd_below(f, 4) ? NS : PICK(f, ns_edge);
    kvp_key128_t         *keys;
    int                   want;
    char                  what[200];

    if (n == 64) {
        n = 1 + rnd_below(f, 64);
    }
    keys = kvp_calloc(n, sizeof(*keys), "hostile keys");
    idx  = kvp_calloc(n, sizeof(*idx), "hostile idx");
    if (n == BIG_KEYS) {
        keys_big(keys, idx);
    } else {
        keys_make(f, n, keys, idx);
    }
    memset(&req, 0, sizeof(req));
    req.op        = lookup ? KVP_WIRE_OP_LOOKUP : KVP_WIRE_OP_GET_PAGES;
    req.ns        = ns;
    req.n_keys    = n;
    req.keys      = keys;
    req.layers    = PICK(f, nl);
    if (req.layers == 2 && rnd_below(f, 2)) {
        req.layers = 1 + rnd_below(f, KVP_WIRE_MAX_LAYERS);
    }
    items = (uint64_t)n * req.layers; /* up to 2^24 */
    req.start     = PICK(f, ((const uint32_t[]){0, 0, 1, (uint32_t)items - 1,
                                                 (uint32_t)(rnd(f) % items)}));
    if (req.start >= items) {
        req.start = 0;
    }
    req.max_bytes = PICK(f, mb);
    if (lookup) {
        snprintf(what, sizeof(what), "ns %llx %u keys x %u layers", (unsigned long long)ns, n,
                 req.layers);
        flood_send(f, c, &req, NULL, 0, WANT_OK, CHK_LOOKUP, NULL, what);
        kvp_free(idx);
        kvp_free(keys);
        return;
    }
    /* the reply: pages from start on while they exist; the first missing one is NOT_FOUND */
    for (uint64_t it = req.start; it < items && all; it++) {
        all = ns == NS && idx[it / req.layers] != NONE && it % req.layers < PRE_L;
    }
    if (ns != NS || idx[req.start / req.layers] == NONE || req.start % req.layers >= PRE_L) {
        want = WANT_ERR;
    } else {
        want = all ? WANT_OK : WANT_ANY;
    }
    snprintf(what, sizeof(what), "ns %llx %u keys x %u layers start %u max_bytes %u",
             (unsigned long long)ns, n, req.layers, req.start, req.max_bytes);
    flood_send(f, c, &req, NULL, 0, want, CHK_PRE_PAGES, idx, what);
    kvp_free(keys);
}

static void make_list(flood_t *f, int c)
{
    kvp_wire_req_t req;
    char           what[200];

    memset(&req, 0, sizeof(req));
    req.op    = KVP_WIRE_OP_LIST;
    req.limit = PICK(f, ((const uint32_t[]){1, 2, 3, 17, KVP_WIRE_MAX_LIST - 1,
                                            KVP_WIRE_MAX_LIST}));
    if (rnd_below(f, 2)) {
        req.ns = PICK(f, ns_edge);
        sid_pick(f, req.sid);
        req.inclusive = rnd_below(f, 3) == 0;
    }
    req.deleted = rnd_below(f, 2);
    snprintf(what, sizeof(what), "limit %u cursor %llx:%.8s incl %u deleted %u", req.limit,
             (unsigned long long)req.ns, req.sid, req.inclusive, req.deleted);
    flood_send(f, c, &req, NULL, 0, WANT_OK, CHK_LIST, NULL, what);
}

/* SPILL / DELETE of the pool's ids in every namespace (never pre itself: it must survive). */
static void make_session_op(flood_t *f, int c, kvp_wire_op_t op)
{
    kvp_wire_req_t req;
    char           what[200];

    memset(&req, 0, sizeof(req));
    req.op = op;
    req.ns = PICK(f, ns_edge);
    sid_pick(f, req.sid);
    if (op == KVP_WIRE_OP_DELETE) {
        req.version = PICK(f, ver_edge);
        req.drop    = rnd_below(f, 3) == 0;
        if (req.ns == NS && strcmp(req.sid, "pre") == 0) {
            req.ns = NS_H;
        }
    }
    snprintf(what, sizeof(what), "ns %llx version %llu drop %u", (unsigned long long)req.ns,
             (unsigned long long)req.version, req.drop);
    flood_send(f, c, &req, NULL, 0,
               (op == KVP_WIRE_OP_SPILL && req.ns == NS && strcmp(req.sid, "pre") == 0)
                   ? WANT_OK : WANT_ANY,
               CHK_NONE, NULL, what);
}

/* APPEND: geometries, codecs, ids and conditions that do not add up, in the flood's namespaces
 * (never NS: pre must not change). Nonsense codecs, P past the largest and Inf/NaN values are
 * errors; the rest may be OK (a fresh session's tail) or refused. */
static void make_append(flood_t *f, int c)
{
    static const uint32_t codecs[] = {KVP_CODEC_FP16, KVP_CODEC_FP16, KVP_CODEC_KIVI,
                                      KVP_CODEC_NAIVE2, 0, KVP_CODEC_MAX, 99, UINT32_MAX};
    static const uint32_t ptoks[]  = {1, 2, 4, 32, 4096, 4097, 65536};
    kvp_wire_req_t        req;
    kvp_wire_append_t    *a = &req.append;
    uint64_t              vals;
    size_t                es, dl;
    uint8_t              *data;
    uint32_t             *ids;
    int                   bad, nan = rnd_below(f, 10) == 0;
    char                  what[200];

    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_APPEND;
    req.ns = PICK(f, ((const uint64_t[]){NS_H, NS_H, 0, UINT64_MAX}));
    sid_pick(f, req.sid);
    a->codec       = PICK(f, codecs);
    a->fingerprint = rnd_below(f, 2) ? 0x1234 : rnd(f);
    a->layers      = 1 + rnd_below(f, 3);
    a->heads       = PICK(f, ((const uint32_t[]){1, 2, 4}));
    a->head_dim    = PICK(f, ((const uint32_t[]){1, 2, 8, 64}));
    a->page_tokens = PICK(f, ptoks);
    a->dtype       = rnd_below(f, 2) ? KVP_DTYPE_F16 : KVP_DTYPE_F32;
    a->ntok        = 1 + rnd_below(f, 8);
    a->n_ids       = a->ntok; /* and up to 7 more: a tail the session may not have */
    a->n_ids      += rnd_below(f, 2) ? 0 : rnd_below(f, a->page_tokens < 8 ? a->page_tokens : 8);
    ids = kvp_calloc(a->n_ids, sizeof(*ids), "hostile ids");
    for (uint32_t i = 0; i < a->n_ids; i++) {
        ids[i] = rnd_below(f, 2) ? i : (uint32_t)rnd(f);
    }
    a->ids = ids;
    if (rnd_below(f, 4) == 0) {
        a->version = PICK(f, ver_edge);
    }
    if (rnd_below(f, 5) == 0) {
        a->has_chunks = 1;
        a->chunks     = PICK(f, ((const uint32_t[]){0, 1, UINT32_MAX}));
    }
    if (rnd_below(f, 5) == 0) {
        a->has_first_pos = 1;
        a->first_pos     = PICK(f, ((const uint64_t[]){0, 1, UINT64_MAX}));
    }
    if (rnd_below(f, 5) == 0) {
        a->has_base = 1;
        a->base     = PICK(f, ver_edge);
    }
    es   = a->dtype == KVP_DTYPE_F16 ? 2 : 4;
    vals = (uint64_t)a->layers * a->ntok * a->heads * a->head_dim;
    dl   = 2 * vals * es;
    data = kvp_malloc(dl, "hostile append");
    for (uint64_t i = 0; i < 2 * vals; i++) {
        if (es == 2) {
            kvp_st16(data + 2 * i, 0x3C00 + (uint16_t)(i % 64)); /* 1.0 and a little more */
        } else {
            float v = 1.0f + (float)(i % 64) / 64.0f;

            memcpy(data + 4 * i, &v, 4);
        }
    }
    if (nan) { /* an Inf (fp16) or NaN (f32) among them */
        uint64_t i = rnd(f) % (2 * vals);

        if (es == 2) {
            kvp_st16(data + 2 * i, 0x7C00);
        } else {
            kvp_st32(data + 4 * i, 0x7FC00000u);
        }
    }
    bad = nan || a->codec == 0 || a->codec >= KVP_CODEC_MAX || a->page_tokens > KVP_PAGE_MAX_TOKENS;
    snprintf(what, sizeof(what), "ns %llx codec %u %ux%ux%u P %u %s ntok %u ids %u nan %d",
             (unsigned long long)req.ns, a->codec, a->layers, a->heads, a->head_dim,
             a->page_tokens, a->dtype == KVP_DTYPE_F16 ? "f16" : "f32", a->ntok, a->n_ids, nan);
    flood_send(f, c, &req, data, dl, bad ? WANT_ERR : WANT_ANY, CHK_NONE, NULL, what);
    kvp_free(ids);
}

static void make_simple(flood_t *f, int c, kvp_wire_op_t op)
{
    kvp_wire_req_t req;

    memset(&req, 0, sizeof(req));
    req.op = op;
    flood_send(f, c, &req, NULL, 0, op == KVP_WIRE_OP_STAT ? WANT_OK : WANT_ANY, CHK_NONE, NULL,
               "");
}

/* A put of a fresh session on one connection and its delete on the other at once, then a get:
 * whatever order the node takes them in, each is answered. */
static void make_race(flood_t *f, uint32_t round)
{
    kvp_wire_req_t req;
    uint8_t       *rec, *data;
    size_t         rl, pl = 0;
    uint32_t       lens[PRE_L * PRE_C];
    char           sid[KVP_SID_MAX];

    snprintf(sid, sizeof(sid), "race-%u", round);
    CHECK_OK(kvp_session_desc_pack(&f->pre->desc, &rec, &rl));
    for (uint32_t i = 0; i < f->pre->n_pages; i++) {
        lens[i] = (uint32_t)f->pre->lens[i];
        pl += lens[i];
    }
    data = kvp_malloc(pl + rl, "race put");
    pl   = 0;
    for (uint32_t i = 0; i < f->pre->n_pages; i++) {
        memcpy(data + pl, f->pre->pages[i], lens[i]);
        pl += lens[i];
    }
    memcpy(data + pl, rec, rl);
    kvp_free(rec);
    memset(&req, 0, sizeof(req));
    req.op         = KVP_WIRE_OP_PUT_SESSION;
    req.ns         = NS_R;
    req.n_pages    = f->pre->n_pages;
    req.page_lens  = lens;
    req.record_len = (uint32_t)rl;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    /* OK, or STALE: the delete's tombstone takes the node's clock on its own worker, which may
     * read it after this put's did */
    flood_send(f, 0, &req, data, pl + rl, WANT_ANY, CHK_NONE, NULL, "race put");
    memset(&req, 0, sizeof(req));
    req.op = KVP_WIRE_OP_DELETE;
    req.ns = NS_R;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    req.drop    = round & 1;
    req.version = round & 1 ? UINT64_MAX : 0;
    flood_send(f, 1, &req, NULL, 0, WANT_ANY, CHK_NONE, NULL, "race delete");
    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_GET_SESSION;
    req.ns        = NS_R;
    req.max_bytes = UINT32_MAX;
    snprintf(req.sid, sizeof(req.sid), "%s", sid);
    flood_send(f, (int)(round & 1), &req, NULL, 0, WANT_ANY, CHK_NONE, NULL, "race get");
}

/* ---- the flood ---- */

/* The edges one by one, each op on its own: the largest counts and products, the last item,
 * ids of 127 bytes and of odd bytes, namespaces and versions at 0 and UINT64_MAX. */
static void flood_systematic(flood_t *f)
{
    kvp_wire_req_t req;
    kvp_key128_t  *keys = kvp_calloc(BIG_KEYS, sizeof(*keys), "sys keys");
    uint32_t      *idx;
    uint32_t      *lens = kvp_calloc(KVP_WIRE_MAX_PAGES, sizeof(*lens), "sys lens");
    uint8_t       *data;

    /* GET_PAGES of 480 keys x 4096 layers from the last item; and from 0 */
    for (uint32_t s = 0; s < 4; s++) {
        idx = kvp_calloc(BIG_KEYS, sizeof(*idx), "sys idx");
        keys_big(keys, idx);
        test_get_req(&req, 0, NS, keys, BIG_KEYS, UINT32_MAX);
        req.layers = s < 2 ? KVP_WIRE_MAX_LAYERS : PRE_L;
        req.start  = (s & 1) ? BIG_KEYS * req.layers - 1 : 0;
        flood_send(f, 0, &req, NULL, 0, (s & 1) ? WANT_ERR : WANT_ANY, CHK_PRE_PAGES, idx,
                   "480 keys, last/first item");
        req.op = KVP_WIRE_OP_LOOKUP;
        flood_send(f, 1, &req, NULL, 0, WANT_OK, CHK_LOOKUP, NULL, "480 keys x 4096 or 3 layers");
    }
    /* pre's last page alone, max_bytes 1 (at least one page is sent) */
    idx = kvp_calloc(PRE_C, sizeof(*idx), "sys idx");
    for (uint32_t i = 0; i < PRE_C; i++) {
        idx[i] = i;
    }
    test_get_req(&req, 0, NS, f->pre->desc.chunk_keys, PRE_C, 1);
    req.layers = PRE_L;
    req.start  = PRE_C * PRE_L - 1;
    flood_send(f, 0, &req, NULL, 0, WANT_OK, CHK_PRE_PAGES, idx, "last item, max_bytes 1");
    /* PUT_PAGES of 4096 64-byte non-pages */
    for (uint32_t i = 0; i < KVP_WIRE_MAX_PAGES; i++) {
        lens[i] = KVP_PAGE_HDR_BYTES;
    }
    memset(&req, 0, sizeof(req));
    req.op        = KVP_WIRE_OP_PUT_PAGES;
    req.ns        = NS;
    req.n_pages   = KVP_WIRE_MAX_PAGES;
    req.page_lens = lens;
    flood_send(f, 0, &req, bytes_random(f, (size_t)KVP_WIRE_MAX_PAGES * KVP_PAGE_HDR_BYTES),
               (size_t)KVP_WIRE_MAX_PAGES * KVP_PAGE_HDR_BYTES, WANT_ERR, CHK_NONE, NULL,
               "4096 header-only pages");
    /* session ops with an empty id (the wire refuses it), a 127-byte one and odd bytes */
    for (uint32_t s = 0; s < 3; s++) {
        static const kvp_wire_op_t ops[] = {KVP_WIRE_OP_GET_SESSION, KVP_WIRE_OP_SPILL,
                                            KVP_WIRE_OP_DELETE};

        for (uint32_t k = 0; k < 3; k++) {
            memset(&req, 0, sizeof(req));
            req.op = ops[k];
            req.ns = s == 0 ? 0 : UINT64_MAX;
            if (s == 1) {
                memset(req.sid, 0xff, KVP_SID_MAX - 1);
            } else if (s == 2) {
                snprintf(req.sid, sizeof(req.sid), "\x01\x7f\x80\xc0");
            }
            req.version = s == 2 ? UINT64_MAX : 0;
            flood_send(f, 1, &req, NULL, 0, (s == 0 || k == 0) ? WANT_ERR : WANT_ANY, CHK_NONE,
                       NULL, s == 0 ? "empty sid" : s == 1 ? "127 x 0xff sid" : "odd sid");
        }
    }
    /* a record of 2^20 chunks (16 MiB of keys, pre's first) x 65535 layers, 2^36 pages: the
     * node refuses it NOT_FOUND for its first missing page, not NO_MEMORY for a page list of
     * 512 GiB (or an allocation that size where the kernel grants it) */
    {
        kvp_session_desc_t d;
        size_t             rl;

        memset(&d, 0, sizeof(d));
        d.layers      = 65535;
        d.page_tokens = TS_P;
        d.n_chunks    = 1u << 20;
        d.chunk_keys  = kvp_calloc(d.n_chunks, sizeof(*d.chunk_keys), "sys keys");
        for (uint32_t i = 0; i < d.n_chunks; i++) {
            d.chunk_keys[i] = i < PRE_C ? pre_keys[i] : (kvp_key128_t){i, ~(uint64_t)i};
        }
        memset(&req, 0, sizeof(req));
        req.op = KVP_WIRE_OP_PUT_SESSION;
        req.ns = NS;
        snprintf(req.sid, sizeof(req.sid), "huge");
        data           = record_make(&d, &rl);
        req.record_len = (uint32_t)rl;
        flood_send(f, 1, &req, data, rl, WANT_NOT_FOUND, CHK_NONE, NULL,
                   "record of 2^20 chunks x 65535 layers");
        d.layers = PRE_L; /* and by the pages' own layer count */
        data     = record_make(&d, &rl);
        flood_send(f, 1, &req, data, rl, WANT_NOT_FOUND, CHK_NONE, NULL,
                   "record of 2^20 chunks x 3 layers");
        kvp_free(d.chunk_keys);
    }
    /* a session deleted at the largest version, then appended to (a fresh record, stamped with
     * the node's clock: older than that tombstone): STALE, and no chunk of it sealed and left
     * loose (the page count at the end would show it) */
    memset(&req, 0, sizeof(req));
    req.op      = KVP_WIRE_OP_DELETE;
    req.ns      = NS_H;
    req.version = UINT64_MAX;
    snprintf(req.sid, sizeof(req.sid), "tombstoned");
    flood_send(f, 0, &req, NULL, 0, WANT_ANY, CHK_NONE, NULL, "tombstone at UINT64_MAX");
    {
        uint32_t ids[4] = {1, 2, 3, 4};
        uint16_t kv[2 * 4 * 2 * 8];

        for (uint32_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
            kv[i] = 0x3C00;
        }
        memset(&req, 0, sizeof(req));
        req.op     = KVP_WIRE_OP_APPEND;
        req.ns     = NS_H;
        req.append = (kvp_wire_append_t){KVP_CODEC_FP16, 0x1234, 1, 2, 8, 2, KVP_DTYPE_F16, 4, 4,
                                         ids, 0, 0, 0, 0, 0, 0, 0};
        snprintf(req.sid, sizeof(req.sid), "tombstoned");
        data = kvp_malloc(sizeof(kv), "sys append");
        memcpy(data, kv, sizeof(kv));
        flood_send(f, 0, &req, data, sizeof(kv), WANT_ERR, CHK_NONE, NULL,
                   "append after a tombstone at UINT64_MAX (2 chunks to seal)");
    }
    /* LIST at the largest limit, and from a cursor past everything */
    memset(&req, 0, sizeof(req));
    req.op    = KVP_WIRE_OP_LIST;
    req.limit = KVP_WIRE_MAX_LIST;
    flood_send(f, 0, &req, NULL, 0, WANT_OK, CHK_LIST, NULL, "limit max");
    req.ns = UINT64_MAX;
    memset(req.sid, 0xff, KVP_SID_MAX - 1);
    req.inclusive = 1;
    flood_send(f, 0, &req, NULL, 0, WANT_OK, CHK_LIST, NULL, "cursor at the end");
    flood_drain(f);
    kvp_free(keys);
    kvp_free(lens);
}

static void flood_random(flood_t *f)
{
    uint32_t scrubs = 0;

    for (uint32_t r = 0; r < N_RAND; r++) {
        int      c  = (int)(r & 1);
        uint32_t op = rnd_below(f, 100);

        if (op < 12) {
            make_put_pages(f, c);
        } else if (op < 30) {
            make_put_session(f, c, r);
        } else if (op < 42) {
            make_get_session(f, c);
        } else if (op < 56) {
            make_get_pages(f, c, 0);
        } else if (op < 62) {
            make_get_pages(f, c, 1);
        } else if (op < 68) {
            make_list(f, c);
        } else if (op < 73) { /* these three on connection 0: one at a time, in order (an
                                * append racing a delete of its session may leave loose pages) */
            make_session_op(f, 0, KVP_WIRE_OP_SPILL);
        } else if (op < 80) {
            make_session_op(f, 0, KVP_WIRE_OP_DELETE);
        } else if (op < 92) {
            make_append(f, 0);
        } else if (op < 95) {
            make_race(f, r);
        } else if (op < 96 && scrubs < 3) {
            make_simple(f, c, KVP_WIRE_OP_SCRUB);
            scrubs++;
        } else {
            make_simple(f, c, KVP_WIRE_OP_STAT);
        }
    }
    flood_drain(f);
}

/* ---- before and after ---- */

static void stat_now(kvp_client_h c, kvp_node_stat_t *st)
{
    CHECK_OK(kvp_client_stat(c, st));
}

/* Drop every session but pre (the flood's, in any namespace), no tombstones kept. */
static void drop_flood_sessions(kvp_client_h c)
{
    kvp_session_list_t *l = NULL;

    CHECK_OK(kvp_client_list_sessions(c, 0, 0, &l));
    for (uint32_t i = 0; i < l->n; i++) {
        const kvp_session_info_t *s = &l->sessions[i];
        kvp_status_t              st;

        if (s->ns == NS && strcmp(s->sid, "pre") == 0) {
            continue;
        }
        st = kvp_client_drop_session(c, s->ns, s->sid, UINT64_MAX);
        EXPECT(st == KVP_OK, "drop %llx:%s: %s", (unsigned long long)s->ns, s->sid,
               kvp_status_name(st));
    }
    kvp_session_list_free(l);
}

int main(void)
{
    test_node_t          n;
    test_session_t       pre, post;
    kvp_session_pages_t *sp = NULL;
    kvp_node_stat_t      st0, st1;
    kvp_client_h         c;
    flood_t             *f = kvp_calloc(1, sizeof(*f), "flood");
    double               t0 = kvp_time_s(), end;
    char                 log[300];
    int                  fd, err;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    setenv("KVP_LOG_LEVEL", "error", 1);
    test_node_mkdir(&n);
    snprintf(log, sizeof(log), "%s/node.log", n.dir); /* thousands of refusals: kept apart */
    fd  = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    err = dup(2);
    CHECK(fd >= 0 && err >= 0 && dup2(fd, 2) == 2);
    /* a small DRAM budget, the disk tier (SPILL, restores); pages a dropped record named go at
     * once (no put grace), so the counts can come back */
    test_node_start_args(&n, 0, "--dram-budget=8M", "--put-grace=0");
    CHECK(dup2(err, 2) == 2);
    close(fd);
    close(err);
    c = test_client(n.addr, 20000);

    test_session_make(&pre, PRE_L, PRE_C, 5, 1);
    CHECK_OK(test_session_put(c, NS, "pre", &pre));
    CHECK_OK(kvp_client_get_session(c, NS, "pre", &sp));
    test_session_check(&pre, sp);
    kvp_session_pages_free(sp);
    sp = NULL;
    stat_now(c, &st0);

    f->pre   = &pre;
    pre_keys = pre.desc.chunk_keys;
    f->rng = SEED;
    test_xfer_open(n.port, flood_recv, f, &f->x, &f->conn[0]);
    CHECK_OK(kvp_xfer_connect(f->x, "127.0.0.1", n.port, &f->conn[1]));
    flood_systematic(f);
    flood_random(f);
    fprintf(stderr, "flood: %llu requests, %llu answered (%llu OK, %llu errors) in %.1f s\n",
            (unsigned long long)f->sent, (unsigned long long)f->answered,
            (unsigned long long)f->ok, (unsigned long long)f->err, kvp_time_s() - t0);
    CHECK(f->answered == f->sent);
    kvp_xfer_conn_close(f->conn[0]);
    kvp_xfer_conn_close(f->conn[1]);
    kvp_xfer_destroy(f->x);

    /* the node is alive and serving; pre is as it was put */
    CHECK(waitpid(n.pid, NULL, WNOHANG) == 0);
    CHECK_OK(kvp_client_get_session(c, NS, "pre", &sp));
    test_session_check(&pre, sp);
    kvp_session_pages_free(sp);
    sp = NULL;

    /* the flood's sessions dropped: DRAM pages, bytes and sessions back where they were (a pin
     * or page the flood leaked would stay); the DRAM-side let-go may take a tick */
    drop_flood_sessions(c);
    end = kvp_time_s() + 20;
    do {
        stat_now(c, &st1);
        if (st1.dram_pages == st0.dram_pages && st1.dram_bytes == st0.dram_bytes &&
            st1.sessions == st0.sessions) {
            break;
        }
        usleep(100000);
    } while (kvp_time_s() < end);
    fprintf(stderr, "before: %llu pages %llu bytes %llu sessions; after: %llu %llu %llu; "
            "%llu requests (%llu bad), %llu spills, %llu restores\n",
            (unsigned long long)st0.dram_pages, (unsigned long long)st0.dram_bytes,
            (unsigned long long)st0.sessions, (unsigned long long)st1.dram_pages,
            (unsigned long long)st1.dram_bytes, (unsigned long long)st1.sessions,
            (unsigned long long)st1.requests, (unsigned long long)st1.bad_requests,
            (unsigned long long)st1.spills, (unsigned long long)st1.restores);
    EXPECT(st1.dram_pages == st0.dram_pages, "DRAM pages %llu, were %llu",
           (unsigned long long)st1.dram_pages, (unsigned long long)st0.dram_pages);
    EXPECT(st1.dram_bytes == st0.dram_bytes, "DRAM bytes %llu, were %llu",
           (unsigned long long)st1.dram_bytes, (unsigned long long)st0.dram_bytes);
    EXPECT(st1.sessions == st0.sessions, "sessions %llu, were %llu",
           (unsigned long long)st1.sessions, (unsigned long long)st0.sessions);

    /* a normal put and get still round-trip */
    test_session_make(&post, 2, 5, 7, 42);
    CHECK_OK(test_session_put(c, NS + 2, "post", &post));
    CHECK_OK(kvp_client_get_session(c, NS + 2, "post", &sp));
    test_session_check(&post, sp);
    kvp_session_pages_free(sp);
    CHECK(waitpid(n.pid, NULL, WNOHANG) == 0);

    kvp_client_destroy(c);
    CHECK(test_node_stop(&n, SIGTERM) == 0);
    if (kvp_test_failures == 0) {
        test_node_rmdir(&n);
    } else {
        fprintf(stderr, "the node's log: %s\n", log);
    }
    test_session_free(&pre);
    test_session_free(&post);
    kvp_free(f);
    fprintf(stderr, "test_hostile: %.1f s\n", kvp_time_s() - t0);
    return kvp_test_result("test_hostile");
}
