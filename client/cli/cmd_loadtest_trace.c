/* cmd_loadtest_trace.c - the workload of `kvpack loadtest`: read a Mooncake-format JSONL trace
 * ({"timestamp", "input_length", "output_length", "hash_ids"} per line, hash ids = 512-token
 * prefix blocks) or make users x rounds of synthetic multi-turn sessions. For each request it also
 * works out, from the ids alone, how many blocks an unbounded cache would hit and which earlier
 * session it continues (the previous turn, fetched before the new prompt is looked up), and how
 * the replay counts a request's hits (kvp_lt_block_hits, kvp_lt_took: no network here). */
#include "cmd_loadtest.h"

#include "kvpack/alloc.h"
#include "kvpack/file.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t kvp_lt_mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- a u64 -> u32 open-addressing map (key 0 is stored as 1) ---- */

typedef struct {
    uint64_t *keys;
    uint32_t *vals;
    size_t    cap, n;
} lt_map_t;

static uint32_t *map_slot(const lt_map_t *m, uint64_t key, bool *found_p)
{
    size_t i = kvp_lt_mix64(key) & (m->cap - 1);

    while (m->keys[i] != 0 && m->keys[i] != key) {
        i = (i + 1) & (m->cap - 1);
    }
    *found_p = m->keys[i] == key;
    m->keys[i] = key; /* claims the slot; callers always store a value next */
    return &m->vals[i];
}

static int map_grow(lt_map_t *m)
{
    lt_map_t g = {NULL, NULL, m->cap ? m->cap * 2 : 1024, m->n};
    bool     found;

    g.keys = kvp_calloc(g.cap, sizeof(*g.keys), "loadtest map");
    g.vals = kvp_calloc(g.cap, sizeof(*g.vals), "loadtest map");
    if (g.keys == NULL || g.vals == NULL) {
        kvp_free(g.keys);
        kvp_free(g.vals);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] != 0) {
            *map_slot(&g, m->keys[i], &found) = m->vals[i];
        }
    }
    kvp_free(m->keys);
    kvp_free(m->vals);
    *m = g;
    return 0;
}

/* Store key -> val; *old_p (may be NULL) gets the previous value, -1 when the key was new. */
static int map_put(lt_map_t *m, uint64_t key, uint32_t val, int64_t *old_p)
{
    uint32_t *v;
    bool      found;

    if ((m->n + 1) * 2 > m->cap && map_grow(m) != 0) {
        return -1;
    }
    key += key == 0;
    v = map_slot(m, key, &found);
    if (old_p != NULL) {
        *old_p = found ? (int64_t)*v : -1;
    }
    m->n += !found;
    *v = val;
    return 0;
}

static bool map_get(const lt_map_t *m, uint64_t key, uint32_t *val_p)
{
    size_t i;

    key += key == 0;
    for (i = kvp_lt_mix64(key) & (m->cap - 1); m->cap > 0 && m->keys[i] != 0; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) {
            *val_p = m->vals[i];
            return true;
        }
    }
    return false;
}

static void map_free(lt_map_t *m)
{
    kvp_free(m->keys);
    kvp_free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* ---- prefix bookkeeping shared by both workloads ---- */

typedef struct {
    lt_map_t seen; /* hash of ids[0..b] -> 1, for every prefix put so far */
    lt_map_t ends; /* hash of ids[0..n-2] (a request's full blocks) -> its session */
    uint64_t *hash; /* scratch: prefix hashes of the current request */
    uint32_t  hash_cap;
} lt_prefix_t;

/* Count ref_hit_blocks and, when find_parent, set resume to the latest session whose full blocks
 * (all its ids but the last, at least two: the first block alone is mostly a shared system
 * prompt, not a conversation) are the longest prefix of r's ids. Then remember r's prefixes. */
/* px->hash[b] = hash of r's ids[0..b], for every block b. 0 or -1. */
static int prefix_hash(lt_prefix_t *px, const kvp_lt_req_t *r)
{
    if (r->n_ids > px->hash_cap) {
        uint64_t *h = kvp_realloc(px->hash, r->n_ids * sizeof(*h), "loadtest prefix");

        if (h == NULL) {
            return -1;
        }
        px->hash     = h;
        px->hash_cap = r->n_ids;
    }
    for (uint32_t b = 0; b < r->n_ids; b++) {
        px->hash[b] = kvp_lt_prefix_next(b ? px->hash[b - 1] : 0, b, r->ids[b]);
    }
    return 0;
}

uint64_t kvp_lt_prefix_next(uint64_t prev, uint32_t b, uint64_t id)
{
    return kvp_lt_mix64((b ? prev : 0x4B56504Bull) ^ kvp_lt_mix64(id + 1));
}

static int prefix_note(lt_prefix_t *px, kvp_lt_req_t *r, bool find_parent)
{
    uint32_t v;
    int64_t  old;

    if (prefix_hash(px, r) != 0) {
        return -1;
    }
    for (uint32_t b = 0; b < r->n_ids; b++) {
        r->ref_hit_blocks += map_get(&px->seen, px->hash[b], &v);
    }
    for (uint32_t k = r->n_ids - 1; find_parent && k > 1; k--) {
        if (map_get(&px->ends, px->hash[k - 1], &v)) {
            r->resume = v;
            break;
        }
    }
    for (uint32_t b = 0; b < r->n_ids; b++) {
        if (map_put(&px->seen, px->hash[b], 1, &old) != 0) {
            return -1;
        }
    }
    if (r->n_ids > 2 && map_put(&px->ends, px->hash[r->n_ids - 2], r->session, &old) != 0) {
        return -1;
    }
    return 0;
}

static void prefix_free(lt_prefix_t *px)
{
    map_free(&px->seen);
    map_free(&px->ends);
    kvp_free(px->hash);
}

/* Chunk j of a request (P tokens, cpb chunks a block) is the same tokens wherever the ids up to its
 * block are: its identity is the prefix hash of that block and j's place in it. */
static uint64_t chunk_id(const lt_prefix_t *px, uint32_t j, uint32_t cpb)
{
    return kvp_lt_mix64(px->hash[j / cpb] ^ kvp_lt_mix64(0x43484B00ull + j % cpb));
}

int kvp_lt_reference(const kvp_lt_workload_t *w, uint32_t page_tokens, const uint8_t *primary,
                     const uint64_t *holders, uint32_t *hits)
{
    lt_map_t    held[KVP_LT_MAX_NODES];
    lt_prefix_t px = {0};
    uint32_t    cpb = KVP_LT_BLOCK_TOKENS / page_tokens, v;
    int64_t     old;
    int         rc = 0;

    memset(held, 0, sizeof(held));
    for (uint32_t i = 0; i < w->n && rc == 0; i++) {
        const kvp_lt_req_t *r = &w->reqs[i];
        uint32_t            nc = r->input_len / page_tokens, hit = 0;
        uint64_t            mask = holders[r->session];

        rc = prefix_hash(&px, r);
        while (rc == 0 && hit < nc && map_get(&held[primary[r->session]], chunk_id(&px, hit, cpb), &v)) {
            hit++;
        }
        hits[i] = kvp_lt_block_hits(r, page_tokens, hit);
        for (uint32_t k = 0; k < KVP_LT_MAX_NODES && rc == 0; k++) {
            for (uint32_t j = 0; (mask >> k & 1) && j < nc && rc == 0; j++) {
                rc = map_put(&held[k], chunk_id(&px, j, cpb), 1, &old);
            }
        }
    }
    for (uint32_t k = 0; k < KVP_LT_MAX_NODES; k++) {
        map_free(&held[k]);
    }
    prefix_free(&px);
    return rc;
}

uint32_t kvp_lt_block_hits(const kvp_lt_req_t *r, uint32_t page_tokens, uint32_t hit)
{
    uint32_t cpb = KVP_LT_BLOCK_TOKENS / page_tokens, nc = r->input_len / page_tokens, n = 0;

    for (uint32_t b = 0; b < r->n_ids; b++) {
        uint32_t end = (b + 1) * cpb < nc ? (b + 1) * cpb : nc;

        n += end > b * cpb && end <= hit;
    }
    return n;
}

void kvp_lt_took(kvp_lt_sample_t *s, kvp_lt_result_t *res, const kvp_lt_req_t *r,
                 uint32_t page_tokens, bool first, const kvp_lt_part_t *part)
{
    if (first) {
        s->hit_chunks = part->hit_chunks;
        s->hit_blocks = kvp_lt_block_hits(r, page_tokens, part->hit_chunks);
    }
    s->pages_put += part->pages;
    res->bytes_put += part->bytes;
    res->bytes_put_fp16 += part->bytes_fp16;
}

static kvp_lt_req_t *workload_add(kvp_lt_workload_t *w, size_t *cap)
{
    kvp_lt_req_t *r = kvp_array_room(w->reqs, cap, w->n, sizeof(*r), 256, "loadtest requests");

    if (r == NULL) {
        return NULL;
    }
    w->reqs = r;
    memset(&w->reqs[w->n], 0, sizeof(w->reqs[0]));
    w->reqs[w->n].resume = -1;
    return &w->reqs[w->n++];
}

void kvp_lt_workload_free(kvp_lt_workload_t *w)
{
    for (uint32_t i = 0; w->reqs != NULL && i < w->n; i++) {
        kvp_free(w->reqs[i].ids);
    }
    kvp_free(w->reqs);
    memset(w, 0, sizeof(*w));
}

/* ---- one trace line: a flat JSON object; unknown keys are skipped ---- */

static void skip_ws(const char **p)
{
    while (isspace((unsigned char)**p)) {
        (*p)++;
    }
}

/* A JSON string starting at *p (the opening quote); copies up to cap-1 bytes of it to out. */
static const char *take_string(const char **p, char *out, size_t cap)
{
    size_t n = 0;

    if (**p != '"') {
        return "expected a string";
    }
    for ((*p)++; **p != '"'; (*p)++) {
        if (**p == '\0') {
            return "unterminated string";
        }
        if (**p == '\\' && (*p)[1] != '\0') {
            (*p)++;
        }
        if (n + 1 < cap) {
            out[n++] = **p;
        }
    }
    (*p)++;
    out[n] = '\0';
    return NULL;
}

/* Bytes of the JSON number at p (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), 0 if none:
 * strtod alone also took hex (0x10), a leading +, inf and nan. */
static size_t json_number_len(const char *p)
{
    const char *q = p;

    q += *q == '-';
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (isdigit((unsigned char)*q)) {
            q++;
        }
    } else {
        return 0;
    }
    if (*q == '.') {
        if (!isdigit((unsigned char)*++q)) {
            return 0;
        }
        while (isdigit((unsigned char)*q)) {
            q++;
        }
    }
    if (*q == 'e' || *q == 'E') {
        q += q[1] == '+' || q[1] == '-';
        if (!isdigit((unsigned char)*++q)) {
            return 0;
        }
        while (isdigit((unsigned char)*q)) {
            q++;
        }
    }
    return (size_t)(q - p);
}

static const char *take_number(const char **p, double *v)
{
    size_t n = json_number_len(*p);
    char  *end;

    *v = n > 0 ? strtod(*p, &end) : 0.0;
    if (n == 0 || end != *p + n || !isfinite(*v)) {
        return "expected a JSON number";
    }
    *p = end;
    return NULL;
}

/* Skip any JSON value (string, number, literal, nested array or object). */
static const char *skip_value(const char **p)
{
    int  depth = 0;
    char tmp[2];

    do {
        skip_ws(p);
        if (**p == '"') {
            if (take_string(p, tmp, sizeof(tmp)) != NULL) {
                return "unterminated string";
            }
        } else if (**p == '[' || **p == '{') {
            depth++;
            (*p)++;
        } else if (**p == ']' || **p == '}') {
            if (--depth < 0) {
                return "unbalanced brackets";
            }
            (*p)++;
        } else if (**p == ',' || **p == ':') {
            if (depth == 0) {
                return "expected a value";
            }
            (*p)++;
        } else if (isalnum((unsigned char)**p) || **p == '-' || **p == '.' || **p == '+') {
            while (isalnum((unsigned char)**p) || **p == '-' || **p == '.' || **p == '+') {
                (*p)++;
            }
        } else {
            return **p == '\0' ? "truncated value" : "unexpected character";
        }
    } while (depth > 0);
    return NULL;
}

static const char *take_ids(const char **p, kvp_lt_req_t *r)
{
    size_t cap = 0;
    double v;

    if (**p != '[') {
        return "hash_ids must be an array";
    }
    (*p)++;
    for (skip_ws(p); **p != ']';) {
        uint64_t *ids = kvp_array_room(r->ids, &cap, r->n_ids, sizeof(*ids), 64, "loadtest ids");

        if (ids == NULL) {
            return "out of memory";
        }
        r->ids = ids;
        if (take_number(p, &v) != NULL || v < 0 || v != floor(v) || v > 9007199254740992.0) {
            return "hash_ids must hold non-negative integers";
        }
        r->ids[r->n_ids++] = (uint64_t)v;
        skip_ws(p);
        if (**p == ',') {
            (*p)++;
            skip_ws(p);
            if (**p == ']') {
                return "a comma before ']' in hash_ids";
            }
        } else if (**p != ']') {
            return **p == '\0' ? "truncated hash_ids array" : "expected ',' or ']' in hash_ids";
        }
    }
    (*p)++;
    return NULL;
}

static const char *parse_line(const char *p, kvp_lt_req_t *r)
{
    bool        has_len = false, has_ids = false, has_ts = false;
    char        key[32];
    const char *err;
    double      v;

    skip_ws(&p);
    if (*p != '{') {
        return "not a JSON object";
    }
    p++;
    for (skip_ws(&p); *p != '}';) {
        if ((err = take_string(&p, key, sizeof(key))) != NULL) {
            return err;
        }
        skip_ws(&p);
        if (*p != ':') {
            return "expected ':' after a key";
        }
        p++;
        skip_ws(&p);
        if ((strcmp(key, "hash_ids") == 0 && has_ids) ||
            (strcmp(key, "input_length") == 0 && has_len) ||
            (strcmp(key, "timestamp") == 0 && has_ts)) {
            return "a key given twice"; /* a second hash_ids was appended to the first */
        }
        if (strcmp(key, "hash_ids") == 0) {
            err     = take_ids(&p, r);
            has_ids = true;
        } else if (strcmp(key, "input_length") == 0 || strcmp(key, "timestamp") == 0) {
            err = take_number(&p, &v);
            if (err == NULL && (v < 0 || v > 1e15 ||
                                (key[0] == 'i' && (v < 1 || v > (1 << 24) || v != floor(v))))) {
                err = key[0] == 'i' ? "input_length must be a whole number of tokens, 1..16777216"
                                    : "timestamp must be a number of ms from 0 to 1e15";
            }
            if (err == NULL && key[0] == 'i') { /* in range: the conversion is defined */
                r->input_len = (uint32_t)v;
                has_len      = true;
            } else if (err == NULL) {
                r->ts_ms = v;
                has_ts   = true;
            }
        } else {
            err = skip_value(&p);
        }
        if (err != NULL) {
            return err;
        }
        skip_ws(&p);
        if (*p == ',') {
            p++;
            skip_ws(&p);
            if (*p == '}') {
                return "a comma before '}'";
            }
        } else if (*p != '}') {
            return *p == '\0' ? "truncated object" : "expected ',' or '}'";
        }
    }
    p++;
    skip_ws(&p);
    if (*p != '\0') {
        return "text after the object";
    }
    if (!has_len || !has_ids || !has_ts) {
        return !has_len ? "no input_length" : !has_ids ? "no hash_ids" : "no timestamp";
    }
    return NULL;
}

int kvp_lt_trace_load(const char *cmd, const char *path, uint32_t max, uint32_t windows,
                      kvp_lt_workload_t *w)
{
    FILE        *f = kvp_file_open(path, "r");
    char        *line = NULL;
    size_t       line_cap = 0, cap = 0;
    uint32_t     lineno = 0, need;
    lt_prefix_t  px = {0};
    const char  *err = NULL;
    kvp_lt_req_t *r;

    memset(w, 0, sizeof(*w));
    if (f == NULL) {
        fprintf(stderr, "kvpack %s: cannot read trace %s: %m\n", cmd, path);
        return -1;
    }
    while ((max == 0 || w->n < max) && getline(&line, &line_cap, f) >= 0) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0') {
            continue;
        }
        r = workload_add(w, &cap);
        if (r == NULL) {
            err = "out of memory";
            break;
        }
        r->line    = lineno;
        r->session = w->n - 1;
        err = parse_line(line, r);
        need = r->input_len / KVP_LT_BLOCK_TOKENS + (r->input_len % KVP_LT_BLOCK_TOKENS != 0);
        if (err == NULL && r->n_ids != need) {
            fprintf(stderr, "kvpack %s: %s:%u: hash_ids has %u ids, input_length %u needs %u "
                    "blocks of 512 tokens\n", cmd, path, lineno, r->n_ids, r->input_len, need);
            err = "";
            break;
        }
        if (err == NULL && w->n > 1 && r->ts_ms < w->reqs[w->n - 2].ts_ms) {
            /* replayed in file order at (ts - the first ts) / scale: an earlier one waited
             * behind later lines, or ran at once, and the lateness was put on the node */
            fprintf(stderr, "kvpack %s: %s:%u: timestamp %.17g is before the previous request's "
                    "%.17g: a trace is replayed in time order (sort it by timestamp)\n", cmd,
                    path, lineno, r->ts_ms, w->reqs[w->n - 2].ts_ms);
            err = "";
            break;
        }
        if (err == NULL && prefix_note(&px, r, true) != 0) {
            err = "out of memory";
        }
        if (err != NULL) {
            break;
        }
    }
    free(line);
    fclose(f);
    prefix_free(&px);
    if (err == NULL && w->n == 0) {
        err = "no requests in the file";
    }
    if (err != NULL) {
        if (err[0] != '\0') {
            fprintf(stderr, "kvpack %s: %s:%u: %s\n", cmd, path, lineno, err);
        }
        kvp_lt_workload_free(w);
        return -1;
    }
    w->n_sessions = w->n;
    w->n_windows  = windows < w->n ? windows : w->n;
    for (uint32_t i = 0; i < w->n; i++) {
        w->reqs[i].window = (uint32_t)((uint64_t)i * w->n_windows / w->n);
    }
    return 0;
}

int kvp_lt_synthetic_make(uint64_t users, uint64_t rounds, uint64_t turn_tokens,
                          kvp_lt_workload_t *w)
{
    lt_prefix_t   px = {0};
    size_t        cap = 0;
    kvp_lt_req_t *r;
    int           rc = 0;

    memset(w, 0, sizeof(*w));
    w->synthetic   = true;
    w->users       = users;
    w->rounds      = rounds;
    w->turn_tokens = turn_tokens;
    w->n_sessions  = (uint32_t)users;
    w->n_windows   = rounds < KVP_LT_MAX_WINDOWS ? (uint32_t)rounds : KVP_LT_MAX_WINDOWS;
    for (uint64_t round = 0; round < rounds && rc == 0; round++) {
        for (uint64_t u = 0; u < users && rc == 0; u++) {
            r = workload_add(w, &cap);
            if (r == NULL) {
                rc = -1;
                break;
            }
            r->input_len = (uint32_t)((round + 1) * turn_tokens);
            r->n_ids     = (r->input_len + KVP_LT_BLOCK_TOKENS - 1) / KVP_LT_BLOCK_TOKENS;
            r->ids       = kvp_malloc(r->n_ids * sizeof(*r->ids), "loadtest ids");
            r->session   = (uint32_t)u;
            r->resume    = round > 0 ? (int64_t)u : -1;
            r->window    = (uint32_t)(round * w->n_windows / rounds);
            if (r->ids == NULL) {
                rc = -1;
                break;
            }
            for (uint32_t b = 0; b < r->n_ids; b++) { /* user u's b-th block, whatever the round */
                r->ids[b] = ((u + 1) << 32) | b;
            }
            rc = prefix_note(&px, r, false);
        }
    }
    prefix_free(&px);
    if (rc != 0) {
        fprintf(stderr, "kvpack loadtest: out of memory for the synthetic workload\n");
        kvp_lt_workload_free(w);
    }
    return rc;
}
