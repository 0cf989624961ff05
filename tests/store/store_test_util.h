/* store_test_util.h - helpers shared by the store tests: deterministic fp16 test pages and
 * sessions (content is a function of (chunk key, layer), so sessions sharing a prefix share
 * pages byte for byte), putting a session into a store, and checking one back byte for byte.
 * Header-only (static functions) so each test program stays one file plus this. */
#ifndef KVP_STORE_TEST_UTIL_H
#define KVP_STORE_TEST_UTIL_H

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/rand.h"
#include "kvpack/page.h"
#include "kvpack/store.h"
#include "check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Geometry of test sessions. */
typedef struct {
    uint32_t layers, heads, head_dim, page_tokens;
} tgeom_t;

static inline uint64_t t_fingerprint(const tgeom_t *g)
{
    return kvp_ns_fingerprint("store-test", g->layers, g->heads, g->head_dim, g->page_tokens,
                              KVP_CODEC_FP16);
}

/* One fp16 page (valid tokens, tail flag) whose payload is a function of (key, layer). Returns
 * a kvp_malloc'd page; *len_p gets its length. */
static uint8_t *t_page(const tgeom_t *g, kvp_key128_t key, uint32_t layer, uint64_t first_pos,
                       uint32_t valid, int tail, size_t *len_p)
{
    kvp_page_info_t info;
    size_t   payload = kvp_codec_payload_bytes(KVP_CODEC_FP16, g->heads, g->head_dim,
                                               g->page_tokens, valid);
    uint8_t *p       = kvp_malloc(KVP_PAGE_HDR_BYTES + payload, "test page");
    uint64_t s       = key.lo ^ (key.hi * 31) ^ ((uint64_t)layer << 40) ^ (uint64_t)tail;

    CHECK(p != NULL && payload > 0);
    memset(&info, 0, sizeof(info));
    info.codec       = KVP_CODEC_FP16;
    info.bits_k      = 16;
    info.bits_v      = 16;
    info.flags       = (valid < g->page_tokens ? KVP_PAGE_F_PARTIAL : 0) |
                       (tail ? KVP_PAGE_F_TAIL : 0);
    info.valid       = valid;
    info.capacity    = g->page_tokens;
    info.heads       = g->heads;
    info.head_dim    = g->head_dim;
    info.layer       = layer;
    info.first_pos   = first_pos;
    info.chunk_key   = key;
    info.payload_len = (uint32_t)payload;
    for (size_t i = 0; i < payload; i += 8) {
        uint64_t r = kvp_splitmix64(&s) & 0x3bff3bff3bff3bffull; /* finite halves */

        memcpy(p + KVP_PAGE_HDR_BYTES + i, &r, payload - i < 8 ? payload - i : 8);
    }
    kvp_page_hdr_write(&info, p);
    kvp_page_seal(p);
    *len_p = KVP_PAGE_HDR_BYTES + payload;
    return p;
}

/* A session of n_chunks full chunks + tail_tokens tail tokens. Token ids of chunk c come from
 * prefix_seed for c < shared, from seed after, so sessions with the same prefix_seed share their
 * first `shared` chunk keys. desc is filled (kvp_session_desc_clear frees it). */
static inline void t_session(const tgeom_t *g, uint64_t prefix_seed, uint32_t shared, uint64_t seed,
                      uint32_t n_chunks, uint32_t tail_tokens, kvp_session_desc_t *desc)
{
    uint64_t      fp = t_fingerprint(g);
    uint32_t     *tok = kvp_malloc(g->page_tokens * sizeof(uint32_t), "test tokens");
    kvp_key128_t  prev;
    size_t        off = 0;

    memset(desc, 0, sizeof(*desc));
    desc->layers      = g->layers;
    desc->page_tokens = g->page_tokens;
    desc->n_chunks    = n_chunks;
    desc->chunk_keys  = kvp_malloc((n_chunks + 1) * sizeof(kvp_key128_t), "test keys");
    CHECK(tok != NULL && desc->chunk_keys != NULL);
    for (uint32_t c = 0; c <= n_chunks; c++) {
        uint64_t s = (c < shared ? prefix_seed : seed) * 1000003ull + c;

        for (uint32_t t = 0; t < g->page_tokens; t++) {
            tok[t] = (uint32_t)(kvp_splitmix64(&s) % 32000);
        }
        if (c == n_chunks) {
            if (tail_tokens == 0) {
                break;
            }
            prev = kvp_chunk_key(c ? &desc->chunk_keys[c - 1] : NULL, fp, tok, tail_tokens);
            desc->tail_tokens = tail_tokens;
            desc->n_tail      = g->layers;
            for (uint32_t l = 0; l < g->layers; l++) {
                size_t   len;
                uint8_t *p = t_page(g, prev, l, (uint64_t)c * g->page_tokens, tail_tokens, 1, &len);

                desc->tail = kvp_realloc(desc->tail, off + len, "test tail");
                CHECK(desc->tail != NULL);
                memcpy(desc->tail + off, p, len);
                off += len;
                kvp_free(p);
            }
            desc->tail_len = off;
            break;
        }
        desc->chunk_keys[c] = kvp_chunk_key(c ? &desc->chunk_keys[c - 1] : NULL, fp, tok,
                                            g->page_tokens);
    }
    kvp_free(tok);
}

static inline kvp_status_t t_put_pages(kvp_store_h st, uint64_t ns, const tgeom_t *g,
                                const kvp_session_desc_t *d)
{
    for (uint32_t c = 0; c < d->n_chunks; c++) {
        for (uint32_t l = 0; l < g->layers; l++) {
            size_t       len;
            uint8_t     *p = t_page(g, d->chunk_keys[c], l, (uint64_t)c * g->page_tokens,
                                    g->page_tokens, 0, &len);
            kvp_status_t s = kvp_store_page_put(st, ns, p, len);

            kvp_free(p);
            if (s != KVP_OK) {
                return s;
            }
        }
    }
    return KVP_OK;
}

static inline kvp_status_t t_put_session(kvp_store_h st, uint64_t ns, const char *sid, const tgeom_t *g,
                                  const kvp_session_desc_t *d)
{
    kvp_status_t s = t_put_pages(st, ns, g, d);

    return s != KVP_OK ? s : kvp_store_session_put(st, ns, sid, d);
}

/* Append n tokens of f32 K/V ([layers][n][heads][head_dim]) of geometry g with codec; ids holds
 * the session's current tail ids followed by the n new ones (n_ids of them). */
/* As t_append_f32, a replicated append's: the record must be at version base (0: unchecked). */
static inline kvp_status_t t_append_f32_on(kvp_store_h st, uint64_t ns, const char *sid,
                                           const tgeom_t *g, kvp_codec_id_t codec, const float *k,
                                           const float *v, uint32_t n, const uint32_t *ids,
                                           uint32_t n_ids, uint64_t base, uint32_t *sealed)
{
    kvp_store_append_t a = {0};

    a.field_mask     = base != 0 ? KVP_STORE_APPEND_BASE : 0;
    a.base           = base;
    a.codec          = codec;
    a.ns_fingerprint = t_fingerprint(g);
    a.layers         = g->layers;
    a.heads          = g->heads;
    a.head_dim       = g->head_dim;
    a.page_tokens    = g->page_tokens;
    a.dtype          = KVP_DTYPE_F32;
    a.k              = k;
    a.v              = v;
    a.ntok           = n;
    a.ids            = ids;
    a.n_ids          = n_ids;
    return kvp_store_session_append(st, ns, sid, &a, sealed);
}

static inline kvp_status_t t_append_f32(kvp_store_h st, uint64_t ns, const char *sid,
                                        const tgeom_t *g, kvp_codec_id_t codec, const float *k,
                                        const float *v, uint32_t n, const uint32_t *ids,
                                        uint32_t n_ids, uint32_t *sealed)
{
    return t_append_f32_on(st, ns, sid, g, codec, k, v, n, ids, n_ids, 0, sealed);
}

/* Get the session and every page; compare with the expected record and regenerated pages.
 * Returns the first failing status, or KVP_ERR_CORRUPT on any byte mismatch (with a message). */
static inline kvp_status_t t_check_session(kvp_store_h st, uint64_t ns, const char *sid, const tgeom_t *g,
                                    const kvp_session_desc_t *want)
{
    kvp_session_desc_t got;
    kvp_status_t       s = kvp_store_session_get(st, ns, sid, &got);

    if (s != KVP_OK) {
        return s;
    }
    if (got.n_chunks != want->n_chunks || got.layers != want->layers ||
        got.tail_tokens != want->tail_tokens || got.tail_len != want->tail_len ||
        memcmp(got.chunk_keys, want->chunk_keys, want->n_chunks * sizeof(kvp_key128_t)) != 0 ||
        (want->tail_len && memcmp(got.tail, want->tail, want->tail_len) != 0)) {
        fprintf(stderr, "session %s: record differs\n", sid);
        kvp_session_desc_clear(&got);
        return KVP_ERR_CORRUPT;
    }
    kvp_session_desc_clear(&got);
    for (uint32_t c = 0; c < want->n_chunks; c++) {
        for (uint32_t l = 0; l < g->layers; l++) {
            kvp_page_ref_h ref;
            size_t         len, glen;
            uint8_t       *p;
            const void    *data;

            s = kvp_store_page_get(st, ns, want->chunk_keys[c], l, &ref);
            if (s != KVP_OK) {
                fprintf(stderr, "session %s chunk %u layer %u: %s\n", sid, c, l,
                        kvp_status_name(s));
                return s;
            }
            p    = t_page(g, want->chunk_keys[c], l, (uint64_t)c * g->page_tokens,
                          g->page_tokens, 0, &len);
            data = kvp_page_ref_data(ref, &glen);
            if (glen != len || memcmp(data, p, len) != 0) {
                fprintf(stderr, "session %s chunk %u layer %u: bytes differ\n", sid, c, l);
                s = KVP_ERR_CORRUPT;
            }
            kvp_free(p);
            kvp_page_ref_release(ref);
            if (s != KVP_OK) {
                return s;
            }
        }
    }
    return KVP_OK;
}

/* Open a store with a budget and durability; dir NULL = DRAM only; high/low 0 = the defaults;
 * spill_group 0 = the default spill_group_max. */
static inline kvp_store_h t_open_store_group(const char *dir, size_t budget, kvp_durability_t dur,
                                             double high, double low, uint32_t spill_group)
{
    kvp_store_params_t p = {0};
    kvp_store_h        st;

    p.field_mask      = KVP_STORE_PARAM_DRAM_BUDGET | KVP_STORE_PARAM_DURABILITY |
                        (dir != NULL ? KVP_STORE_PARAM_DB_PATH : 0) |
                        (high > 0 ? KVP_STORE_PARAM_HIGH_WM | KVP_STORE_PARAM_LOW_WM : 0) |
                        (spill_group ? KVP_STORE_PARAM_SPILL_GROUP : 0);
    p.dram_budget     = budget;
    p.durability      = dur;
    p.db_path         = dir;
    p.high_watermark  = high;
    p.low_watermark   = low;
    p.spill_group_max = spill_group;
    CHECK_OK(kvp_store_open(&p, &st));
    return st;
}

static inline kvp_store_h t_open_store(const char *dir, size_t budget, kvp_durability_t dur,
                                       double high, double low)
{
    return t_open_store_group(dir, budget, dur, high, low, 0);
}

static inline kvp_store_stats_t t_stats(kvp_store_h st)
{
    kvp_store_stats_t s;

    kvp_store_stats(st, &s);
    return s;
}

/* A fresh empty directory under $TMPDIR (or /tmp); the caller removes it with t_rmrf. */
static inline void t_tmpdir(char *buf, size_t n, const char *tag)
{
    const char *base = getenv("TMPDIR");

    snprintf(buf, n, "%s/kvp-%s-XXXXXX", base ? base : "/tmp", tag);
    CHECK(mkdtemp(buf) != NULL);
}

static inline void t_rmrf(const char *dir)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
}

/* Edit one byte of the first copy of the pn bytes pat, in whichever file of dir/sub whose name
 * ends in suffix (NULL: any) holds it (sub "seg": the segment files, 64-byte aligned matches;
 * "": RocksDB's own files, at any offset, e.g. suffix ".sst" its tables, ".log" its WAL): the
 * byte off past the match start, which must be was (-1: any), becomes now (-1: flipped, ^ 0x40). */
static inline void t_edit_bytes(const char *dir, const char *sub, const char *suffix,
                                const void *pat, size_t pn, size_t off, int was, int now)
{
    char           path[600], file[900];
    DIR           *dp;
    struct dirent *e;
    int            done = 0;
    long           step = sub[0] != '\0' ? 64 : 1;

    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    dp = opendir(path);
    CHECK(dp != NULL);
    while (!done && (e = readdir(dp)) != NULL) {
        FILE    *f;
        long     n;
        uint8_t *buf;
        size_t   nl = strlen(e->d_name);

        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        if (e->d_name[0] == '.' ||
            (suffix != NULL && (nl < strlen(suffix) || strcmp(e->d_name + nl - strlen(suffix), suffix) != 0)) ||
            (f = fopen(file, "r+b")) == NULL) {
            continue;
        }
        fseek(f, 0, SEEK_END);
        n   = ftell(f);
        buf = kvp_malloc((size_t)n + 1, "data file");
        CHECK(buf != NULL);
        fseek(f, 0, SEEK_SET);
        CHECK(n < 0 || fread(buf, 1, (size_t)n, f) == (size_t)n);
        for (long k = 0; k + (long)pn <= n && !done; k += step) {
            if (memcmp(buf + k, pat, pn) == 0) {
                long    at = k + (long)off;
                uint8_t b;

                CHECK(at < n && (was < 0 || buf[at] == (uint8_t)was));
                b = now < 0 ? (uint8_t)(buf[at] ^ 0x40) : (uint8_t)now;
                CHECK(fseek(f, at, SEEK_SET) == 0 && fwrite(&b, 1, 1, f) == 1);
                done = 1;
            }
        }
        kvp_free(buf);
        fclose(f);
    }
    closedir(dp);
    CHECK(done);
}

/* Flip one byte (at min(100, pn/2) past the match) of the first copy of pat (t_edit_bytes). */
static inline void t_flip_bytes(const char *dir, const char *sub, const char *suffix,
                                const uint8_t *pat, size_t pn)
{
    t_edit_bytes(dir, sub, suffix, pat, pn, pn / 2 < 100 ? pn / 2 : 100, -1, -1);
}

/* the page whose first 256 payload bytes are pay, in a segment file (sub "seg") or an SST ("") */
static inline void t_flip_in(const char *dir, const char *sub, const uint8_t *pay)
{
    t_flip_bytes(dir, sub, sub[0] != '\0' ? NULL : ".sst", pay, 256);
}

static inline void t_flip_on_disk(const char *dir, const uint8_t *pay)
{
    t_flip_in(dir, "seg", pay);
}

/* A test program of named cases, each run in a fresh directory under $TMPDIR: main for
 * `prog CASE` (usage and exit 2 for an unknown one, "ok CASE" on success). cases ends with
 * {NULL, NULL}; usage names them. */
typedef struct {
    const char *name;
    void (*run)(const char *dir);
} t_case_t;

static inline int t_run_case(int argc, char **argv, const t_case_t *cases, const char *tag)
{
    char dir[512];

    if (argc == 2) {
        for (const t_case_t *c = cases; c->name != NULL; c++) {
            if (strcmp(argv[1], c->name) == 0) {
                t_tmpdir(dir, sizeof(dir), tag);
                c->run(dir);
                t_rmrf(dir);
                printf("ok %s\n", argv[1]);
                return 0;
            }
        }
    }
    fprintf(stderr, "usage: %s", argv[0]);
    for (const t_case_t *c = cases; c->name != NULL; c++) {
        fprintf(stderr, "%s%s", c == cases ? " " : "|", c->name);
    }
    fprintf(stderr, "\n");
    return 2;
}

/* This process's resident memory in bytes (/proc/self/status VmRSS). */
static inline size_t t_rss_bytes(void)
{
    FILE  *f = fopen("/proc/self/status", "r");
    char   line[256];
    size_t kb = 0;

    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

#endif
