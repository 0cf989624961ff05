/* tokenizer.c - vocabulary storage, the piece->id hash map, the llama2.c tokenizer (load, the
 * score-greedy merge encoder, byte fallback) and token decoding. GPT-2 byte-level BPE lives in
 * tok_bpe.c. Main flow: kvp_tok_load_* -> kvp_tok_encode -> sp_encode | kvp_tok_bpe_encode. */
#include "tokenizer.h"

#include "kvpack/alloc.h"
#include "kvpack/file.h"
#include "kvpack/log.h"

#include <stdio.h>
#include <string.h>

/* ---- storage and hash map ---- */

kvp_status_t kvp_tok_alloc(kvp_tok_t *tok, uint32_t n)
{
    tok->n         = n;
    tok->piece     = kvp_calloc(n, sizeof(*tok->piece), "tok piece");
    tok->piece_len = kvp_calloc(n, sizeof(*tok->piece_len), "tok piece len");
    tok->score     = kvp_calloc(n, sizeof(*tok->score), "tok score");
    tok->out       = kvp_calloc(n, sizeof(*tok->out), "tok out");
    tok->out_len   = kvp_calloc(n, sizeof(*tok->out_len), "tok out len");
    if (tok->piece == NULL || tok->piece_len == NULL || tok->score == NULL || tok->out == NULL ||
        tok->out_len == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    return KVP_OK;
}

static uint32_t str_hash(const char *s, size_t len)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    }
    return h;
}

kvp_status_t kvp_tok_map_build(kvp_tok_t *tok)
{
    uint32_t cap = 16;

    while (cap < 2 * tok->n) {
        cap <<= 1;
    }
    tok->map.slot = kvp_calloc(cap, sizeof(uint32_t), "tok map");
    if (tok->map.slot == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    tok->map.mask = cap - 1;
    for (uint32_t id = 0; id < tok->n; id++) {
        uint32_t h = str_hash(tok->piece[id], tok->piece_len[id]) & tok->map.mask;
        uint32_t dup;

        if (kvp_tok_map_get(tok, tok->piece[id], tok->piece_len[id], &dup)) {
            continue; /* duplicate piece: the first id wins */
        }
        while (tok->map.slot[h] != 0) {
            h = (h + 1) & tok->map.mask;
        }
        tok->map.slot[h] = id + 1;
    }
    return KVP_OK;
}

int kvp_tok_map_get(const kvp_tok_t *tok, const char *s, size_t len, uint32_t *id_p)
{
    uint32_t h = str_hash(s, len) & tok->map.mask;

    while (tok->map.slot[h] != 0) {
        uint32_t id = tok->map.slot[h] - 1;

        if (tok->piece_len[id] == len && memcmp(tok->piece[id], s, len) == 0) {
            *id_p = id;
            return 1;
        }
        h = (h + 1) & tok->map.mask;
    }
    return 0;
}

void kvp_tok_free(kvp_tok_t *tok)
{
    if (tok == NULL) {
        return;
    }
    for (uint32_t i = 0; i < tok->n; i++) {
        if (tok->piece != NULL) {
            kvp_free(tok->piece[i]);
        }
        if (tok->out != NULL) {
            kvp_free(tok->out[i]);
        }
    }
    kvp_free(tok->piece);
    kvp_free(tok->piece_len);
    kvp_free(tok->score);
    kvp_free(tok->out);
    kvp_free(tok->out_len);
    kvp_free(tok->map.slot);
    kvp_free(tok->pair_key);
    kvp_free(tok->pair_rank);
    kvp_free(tok->pair_out);
    kvp_free(tok->special);
    kvp_free(tok);
}

kvp_tok_kind_t kvp_tok_kind(const kvp_tok_t *tok)
{
    return tok->kind;
}

uint32_t kvp_tok_vocab(const kvp_tok_t *tok)
{
    return tok->n;
}

uint32_t kvp_tok_bos(const kvp_tok_t *tok)
{
    return tok->bos;
}

uint32_t kvp_tok_eos(const kvp_tok_t *tok)
{
    return tok->eos;
}

int kvp_tok_add_bos(const kvp_tok_t *tok)
{
    return tok->add_bos;
}

/* ---- llama2.c tokenizer ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

kvp_status_t kvp_tok_load_llama2c(const char *path, uint32_t vocab_size, kvp_tok_t **tok_p)
{
    kvp_tok_t   *tok;
    kvp_status_t status;
    FILE        *f;
    int32_t      max_len;

    f = kvp_file_open(path, "rb");
    if (f == NULL) {
        KVP_LOG_ERROR("model", "cannot open tokenizer %s: %m", path);
        return KVP_ERR_IO;
    }
    tok = kvp_calloc(1, sizeof(*tok), "tok");
    if (tok == NULL) {
        fclose(f);
        return KVP_ERR_NO_MEMORY;
    }
    tok->kind = KVP_TOK_SP;
    tok->bos  = 1;
    tok->eos  = 2;
    tok->add_bos = 1;
    status    = kvp_tok_alloc(tok, vocab_size);
    if (status != KVP_OK) {
        goto err;
    }
    if (fread(&max_len, 4, 1, f) != 1 || max_len <= 0 || max_len > 4096) {
        KVP_LOG_ERROR("model", "tokenizer %s: bad header", path);
        status = KVP_ERR_INVALID;
        goto err;
    }
    for (uint32_t i = 0; i < vocab_size; i++) {
        int32_t len;
        char   *p;
        int     hi, lo;

        if (fread(&tok->score[i], 4, 1, f) != 1 || fread(&len, 4, 1, f) != 1 || len < 0 ||
            len > max_len) {
            KVP_LOG_ERROR("model", "tokenizer %s: entry %u is truncated or too long (vocab %u)",
                          path, i, vocab_size);
            status = KVP_ERR_INVALID;
            goto err;
        }
        p = kvp_malloc((size_t)len + 1, "tok piece");
        if (p == NULL) {
            status = KVP_ERR_NO_MEMORY;
            goto err;
        }
        tok->piece[i] = p;
        if (fread(p, 1, (size_t)len, f) != (size_t)len) {
            KVP_LOG_ERROR("model", "tokenizer %s: entry %u is truncated", path, i);
            status = KVP_ERR_INVALID;
            goto err;
        }
        p[len]            = '\0';
        tok->piece_len[i] = (uint32_t)len;
        /* what the token prints as: <0xNN> byte tokens print their byte */
        if (len == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' && (hi = hexval(p[3])) >= 0 &&
            (lo = hexval(p[4])) >= 0) {
            tok->out[i]     = kvp_malloc(1, "tok out");
            tok->out_len[i] = 1;
            if (tok->out[i] == NULL) {
                status = KVP_ERR_NO_MEMORY;
                goto err;
            }
            tok->out[i][0] = (char)(hi * 16 + lo);
        } else {
            tok->out[i]     = kvp_malloc((size_t)len + 1, "tok out"); /* a piece may hold NULs */
            tok->out_len[i] = (uint32_t)len;
            if (tok->out[i] == NULL) {
                status = KVP_ERR_NO_MEMORY;
                goto err;
            }
            memcpy(tok->out[i], p, (size_t)len + 1);
        }
    }
    /* llama2.c's encoder gives a code point the vocabulary lacks as ids byte + 3: those must be
     * the byte tokens (<0x00>..<0xFF>), or an id would lie past a small vocabulary */
    for (uint32_t b = 0; b < 256; b++) {
        if (b + 3 >= vocab_size || tok->out_len[b + 3] != 1 || (uint8_t)tok->out[b + 3][0] != b) {
            KVP_LOG_ERROR("model", "tokenizer %s: ids 3..258 are not the byte tokens <0x00>.."
                          "<0xFF> of llama2.c's byte fallback (id %u; vocab %u)", path, b + 3,
                          vocab_size);
            status = KVP_ERR_INVALID;
            goto err;
        }
    }
    fclose(f);
    f      = NULL;
    status = kvp_tok_map_build(tok);
    if (status != KVP_OK) {
        goto err;
    }
    *tok_p = tok;
    return KVP_OK;
err:
    if (f != NULL) {
        fclose(f);
    }
    kvp_tok_free(tok);
    return status;
}

typedef struct {
    const kvp_tok_t *tok;
    char            *buf; /* 2 * the longest piece */
} sp_ctx_t;

/* a and b merge when their concatenation is a piece, at its score; a score of -1e10 or less (or
 * NaN) never merges, as in llama2.c's scan from a best score of -1e10 */
static int sp_pair(const void *ctx, uint32_t a, uint32_t b, double *prio, uint32_t *merged)
{
    const sp_ctx_t  *c   = ctx;
    const kvp_tok_t *tok = c->tok;
    uint32_t         la = tok->piece_len[a], lb = tok->piece_len[b];

    memcpy(c->buf, tok->piece[a], la);
    memcpy(c->buf + la, tok->piece[b], lb);
    if (!kvp_tok_map_get(tok, c->buf, la + lb, merged) || !(tok->score[*merged] > -1e10f)) {
        return 0;
    }
    *prio = tok->score[*merged];
    return 1;
}

/* llama2.c encoding: dummy-prefix " ", one token per UTF-8 code point (bytes + 3 as fallback),
 * then repeatedly merge the adjacent pair whose concatenation has the best score (tok_merge.c). */
static kvp_status_t sp_encode(const kvp_tok_t *tok, const char *text, size_t len, uint32_t *ids,
                              size_t *n_p)
{
    size_t           n = 0, maxlen = 0;
    sp_ctx_t         ctx = {tok, NULL};
    kvp_tok_merger_t m;
    kvp_status_t     status;
    uint32_t         id;

    for (uint32_t i = 0; i < tok->n; i++) {
        maxlen = tok->piece_len[i] > maxlen ? tok->piece_len[i] : maxlen;
    }
    if (len > 0 && kvp_tok_map_get(tok, " ", 1, &id)) {
        ids[n++] = id;
    }
    for (size_t i = 0; i < len;) {
        size_t cl = 1;

        if (((uint8_t)text[i] & 0xC0) == 0xC0) {
            while (i + cl < len && cl < 4 && ((uint8_t)text[i + cl] & 0xC0) == 0x80) {
                cl++;
            }
        }
        if (kvp_tok_map_get(tok, text + i, cl, &id)) {
            ids[n++] = id;
        } else {
            for (size_t b = 0; b < cl; b++) {
                ids[n++] = (uint8_t)text[i + b] + 3u;
            }
        }
        i += cl;
    }
    status = kvp_tok_merger_init(&m, n);
    if (status != KVP_OK) {
        return status;
    }
    ctx.buf = kvp_malloc(2 * maxlen + 1, "sp buf");
    if (ctx.buf == NULL) {
        kvp_tok_merger_free(&m);
        return KVP_ERR_NO_MEMORY;
    }
    *n_p = kvp_tok_merge(&m, ids, n, sp_pair, &ctx);
    kvp_free(ctx.buf);
    kvp_tok_merger_free(&m);
    return KVP_OK;
}

/* ---- front door ---- */

kvp_status_t kvp_tok_load_gguf(const kvp_gguf_t *g, kvp_tok_t **tok_p)
{
    kvp_tok_t   *tok;
    kvp_status_t status;

    tok = kvp_calloc(1, sizeof(*tok), "tok");
    if (tok == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    status = kvp_tok_bpe_init(tok, g);
    if (status != KVP_OK) {
        kvp_tok_free(tok);
        return status;
    }
    *tok_p = tok;
    return KVP_OK;
}

kvp_status_t kvp_tok_encode(const kvp_tok_t *tok, const char *text, size_t len, int add_bos,
                            uint32_t **ids_p, size_t *n_p)
{
    uint32_t    *ids;
    size_t       n = 0;
    kvp_status_t status;

    /* every byte yields at most one token, plus BOS and the dummy prefix */
    ids = kvp_malloc((len + 2) * sizeof(*ids), "token ids");
    if (ids == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    if (add_bos) {
        ids[0] = tok->bos;
    }
    if (tok->kind == KVP_TOK_SP) {
        status = sp_encode(tok, text, len, ids + (add_bos ? 1 : 0), &n);
    } else {
        status = kvp_tok_bpe_encode(tok, text, len, ids + (add_bos ? 1 : 0), &n);
    }
    if (status != KVP_OK) {
        kvp_free(ids);
        return status;
    }
    *ids_p = ids;
    *n_p   = n + (add_bos ? 1 : 0);
    return KVP_OK;
}

const char *kvp_tok_decode(const kvp_tok_t *tok, uint32_t prev, uint32_t id, size_t *len_p)
{
    const char *s;

    if (id >= tok->n) {
        *len_p = 0;
        return "";
    }
    s      = tok->out[id];
    *len_p = tok->out_len[id];
    if (tok->kind == KVP_TOK_SP && prev == tok->bos && *len_p > 0 && s[0] == ' ') {
        s++;
        (*len_p)--;
    }
    return s;
}
