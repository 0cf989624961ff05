/* tok_bpe.c - GPT-2 byte-level BPE from GGUF metadata (tokenizer.ggml.tokens/merges/token_type).
 * Encoding: split out literal special tokens, pre-split each run like the "smollm" pre-tokenizer
 * (digits one by one, then the GPT-2 pattern: contractions, " ?letters", " ?punctuation",
 * whitespace runs that leave their last space to the next word), map bytes to the byte-level
 * alphabet and apply the lowest-rank merge until none applies. Letter/space classes are exact for
 * ASCII and Latin-1 and approximate above (code points >= 0x100 count as letters except the
 * general-punctuation and CJK-symbol blocks). Main flow: kvp_tok_bpe_encode -> pre_split -> bpe_word. */
#include "tokenizer.h"

#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <string.h>

enum { CL_LETTER, CL_DIGIT, CL_SPACE, CL_OTHER };

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to 256 + n in order. */
static void byte_map(uint32_t cp_of[256])
{
    uint32_t n = 0;

    for (uint32_t b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);

        cp_of[b] = keep ? b : 256 + n++;
    }
}

static size_t utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* Decode one code point; invalid sequences yield the byte itself with length 1. */
static uint32_t utf8_get(const uint8_t *s, size_t len, size_t *cl)
{
    uint32_t cp;
    size_t   n;

    if (s[0] < 0x80) {
        *cl = 1;
        return s[0];
    }
    if ((s[0] & 0xE0) == 0xC0) {
        n = 2, cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        n = 3, cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        n = 4, cp = s[0] & 0x07;
    } else {
        *cl = 1;
        return 0xFFFD;
    }
    if (n > len) {
        *cl = 1;
        return 0xFFFD;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cl = 1;
            return 0xFFFD;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *cl = n;
    return cp;
}

static int cp_class(uint32_t cp)
{
    if (cp == ' ' || (cp >= 9 && cp <= 13) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
        (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
        cp == 0x205F || cp == 0x3000) {
        return CL_SPACE;
    }
    if ((cp >= '0' && cp <= '9') || cp == 0xB2 || cp == 0xB3 || cp == 0xB9 ||
        (cp >= 0xBC && cp <= 0xBE)) { /* Latin-1's numbers too (superscripts, fractions): \p{N} */
        return CL_DIGIT;
    }
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == 0xAA || cp == 0xB5 ||
        cp == 0xBA || (cp >= 0xC0 && cp <= 0xFF && cp != 0xD7 && cp != 0xF7)) {
        return CL_LETTER;
    }
    if (cp < 0x100 || (cp >= 0x2000 && cp <= 0x206F) || (cp >= 0x3000 && cp <= 0x303F) ||
        cp == 0xFFFD) {
        return CL_OTHER;
    }
    return CL_LETTER;
}

/* ---- init ---- */

static uint32_t pair_slot(const kvp_tok_t *tok, uint64_t key)
{
    uint64_t h = (key + 1) * 0x9E3779B97F4A7C15ull;
    uint32_t s = (uint32_t)(h >> 32) & tok->pair_mask;

    while (tok->pair_key[s] != 0 && tok->pair_key[s] != key + 1) {
        s = (s + 1) & tok->pair_mask;
    }
    return s;
}

static kvp_status_t bpe_merges(kvp_tok_t *tok, const kvp_gguf_t *g)
{
    const uint8_t *cur;
    uint32_t       type, cap = 16;
    uint64_t       n;
    kvp_status_t   status;
    char          *buf;

    status = kvp_gguf_get_arr(g, "tokenizer.ggml.merges", &type, &n, &cur);
    if (status != KVP_OK || type != KVP_GGUF_STR || n > (1u << 24)) {
        KVP_LOG_ERROR("model", "gguf has no usable tokenizer.ggml.merges string array");
        return KVP_ERR_INVALID;
    }
    while (cap < 2 * n) {
        cap <<= 1;
    }
    tok->pair_mask = cap - 1;
    tok->pair_key  = kvp_calloc(cap, sizeof(*tok->pair_key), "bpe pairs");
    tok->pair_rank = kvp_calloc(cap, sizeof(*tok->pair_rank), "bpe ranks");
    tok->pair_out  = kvp_calloc(cap, sizeof(*tok->pair_out), "bpe out");
    if (tok->pair_key == NULL || tok->pair_rank == NULL || tok->pair_out == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    for (uint64_t r = 0; r < n; r++) {
        size_t      len;
        const char *m  = kvp_gguf_str_next(&cur, &len);
        const char *sp = memchr(m, ' ', len);
        uint32_t    a, b, ab, s;
        uint64_t    key;

        if (sp == NULL) {
            continue;
        }
        buf = kvp_malloc(len, "bpe merge");
        if (buf == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(buf, m, (size_t)(sp - m));
        memcpy(buf + (sp - m), sp + 1, len - (size_t)(sp - m) - 1);
        if (kvp_tok_map_get(tok, m, (size_t)(sp - m), &a) &&
            kvp_tok_map_get(tok, sp + 1, len - (size_t)(sp - m) - 1, &b) &&
            kvp_tok_map_get(tok, buf, len - 1, &ab)) {
            key = ((uint64_t)a << 32) | b;
            s   = pair_slot(tok, key);
            if (tok->pair_key[s] == 0) {
                tok->pair_key[s]  = key + 1;
                tok->pair_rank[s] = (uint32_t)r;
                tok->pair_out[s]  = ab;
            }
        }
        kvp_free(buf);
    }
    return KVP_OK;
}

static kvp_status_t bpe_vocab(kvp_tok_t *tok, const kvp_gguf_t *g, const uint32_t cp_of[256])
{
    const uint8_t *cur, *types = NULL;
    uint32_t       type, ttype = 0, byte_of[512];
    uint64_t       n, nt = 0;

    if (kvp_gguf_get_arr(g, "tokenizer.ggml.tokens", &type, &n, &cur) != KVP_OK ||
        type != KVP_GGUF_STR || n == 0 || n > (1u << 24)) {
        KVP_LOG_ERROR("model", "gguf has no usable tokenizer.ggml.tokens string array");
        return KVP_ERR_INVALID;
    }
    if (kvp_gguf_get_arr(g, "tokenizer.ggml.token_type", &ttype, &nt, &types) == KVP_OK &&
        (nt != n || (ttype != KVP_GGUF_I32 && ttype != KVP_GGUF_U32))) {
        KVP_LOG_ERROR("model", "gguf tokenizer.ggml.token_type does not match the tokens");
        return KVP_ERR_INVALID;
    }
    if (kvp_tok_alloc(tok, (uint32_t)n) != KVP_OK) {
        return KVP_ERR_NO_MEMORY;
    }
    tok->special = kvp_calloc(n, sizeof(*tok->special), "bpe special");
    if (tok->special == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    memset(byte_of, 0xFF, sizeof(byte_of));
    for (uint32_t b = 0; b < 256; b++) {
        byte_of[cp_of[b]] = b;
    }
    for (uint32_t i = 0; i < n; i++) {
        size_t      len, o = 0;
        const char *s = kvp_gguf_str_next(&cur, &len);
        int32_t     tt = 1;

        if (types != NULL) {
            memcpy(&tt, types + 4 * (size_t)i, 4);
        }
        tok->piece[i] = kvp_malloc(len + 1, "bpe piece");
        tok->out[i]   = kvp_malloc(len + 1, "bpe out");
        if (tok->piece[i] == NULL || tok->out[i] == NULL) {
            return KVP_ERR_NO_MEMORY;
        }
        memcpy(tok->piece[i], s, len);
        tok->piece[i][len] = '\0';
        tok->piece_len[i]  = (uint32_t)len;
        if (tt == 3 || tt == 4) { /* control / user-defined: printed and matched literally */
            tok->special[tok->n_special++] = i;
            memcpy(tok->out[i], s, len);
            tok->out_len[i] = (uint32_t)len;
            continue;
        }
        for (size_t k = 0; k < len;) {
            size_t   cl;
            uint32_t cp = utf8_get((const uint8_t *)s + k, len - k, &cl);

            if (cp < 512 && byte_of[cp] != 0xFFFFFFFFu) {
                tok->out[i][o++] = (char)byte_of[cp];
            } else {
                memcpy(tok->out[i] + o, s + k, cl);
                o += cl;
            }
            k += cl;
        }
        tok->out_len[i] = (uint32_t)o;
    }
    return KVP_OK;
}

kvp_status_t kvp_tok_bpe_init(kvp_tok_t *tok, const kvp_gguf_t *g)
{
    uint32_t     cp_of[256], unk;
    const char  *model;
    size_t       mlen;
    kvp_status_t status;

    if (kvp_gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen) != KVP_OK ||
        mlen != 4 || memcmp(model, "gpt2", 4) != 0) {
        KVP_LOG_ERROR("model", "gguf tokenizer model is not \"gpt2\" (byte-level BPE); "
                      "other tokenizers are not supported");
        return KVP_ERR_UNSUPPORTED;
    }
    tok->kind = KVP_TOK_BPE;
    byte_map(cp_of);
    status = bpe_vocab(tok, g, cp_of);
    if (status == KVP_OK) {
        status = kvp_tok_map_build(tok);
    }
    if (status != KVP_OK) {
        return status;
    }
    if (kvp_gguf_opt_u32(g, "tokenizer.ggml.unknown_token_id", 0, &unk) != KVP_OK ||
        kvp_gguf_opt_u32(g, "tokenizer.ggml.bos_token_id", 1, &tok->bos) != KVP_OK ||
        kvp_gguf_opt_u32(g, "tokenizer.ggml.eos_token_id", 2, &tok->eos) != KVP_OK ||
        kvp_gguf_opt_bool(g, "tokenizer.ggml.add_bos_token", 0, &tok->add_bos) != KVP_OK) {
        KVP_LOG_ERROR("model", "malformed gguf: tokenizer.ggml.* token ids of a wrong type");
        return KVP_ERR_INVALID;
    }
    unk = unk < tok->n ? unk : 0; /* as before: an id past the vocabulary names nothing */
    /* Vocabularies may lack tokens for bytes that never occur in valid UTF-8 text (0xC0, 0xF5..)
     * or for rare control characters: those bytes encode as the unknown token. */
    for (uint32_t b = 0; b < 256; b++) {
        char   u[4];
        size_t ul = utf8_put(cp_of[b], u);

        if (!kvp_tok_map_get(tok, u, ul, &tok->byte_id[b])) {
            tok->byte_id[b] = unk;
        }
    }
    if (tok->bos >= tok->n || tok->eos >= tok->n) {
        KVP_LOG_ERROR("model", "gguf bos/eos ids %u/%u are outside the vocabulary", tok->bos,
                      tok->eos);
        return KVP_ERR_INVALID;
    }
    return bpe_merges(tok, g);
}

/* ---- encode ---- */

/* a and b merge when the merges list has the pair: the lower its rank, the higher the priority */
static int bpe_pair(const void *ctx, uint32_t a, uint32_t b, double *prio, uint32_t *merged)
{
    const kvp_tok_t *tok  = ctx;
    uint32_t         slot = pair_slot(tok, ((uint64_t)a << 32) | b);

    if (tok->pair_key[slot] == 0) {
        return 0;
    }
    *prio   = -(double)tok->pair_rank[slot];
    *merged = tok->pair_out[slot];
    return 1;
}

/* Merge a word's byte tokens by lowest rank (tok_merge.c); appends the result to ids. */
static void bpe_word(const kvp_tok_t *tok, kvp_tok_merger_t *m, const uint8_t *s, size_t len,
                     uint32_t *ids, size_t *n_p)
{
    uint32_t *w = ids + *n_p;

    for (size_t i = 0; i < len; i++) {
        w[i] = tok->byte_id[s[i]];
    }
    *n_p += kvp_tok_merge(m, w, len, bpe_pair, tok);
}

size_t kvp_tok_prefix_cut(const char *text, size_t len)
{
    const uint8_t *s = (const uint8_t *)text;

    for (size_t i = len; i-- > 1;) {
        size_t j = i - 1, cl;

        if (s[i] != ' ' && !(s[i] >= 9 && s[i] <= 13)) {
            continue;
        }
        /* the char that ends at s[i-1]: back over its continuation bytes to the lead byte. A
         * Unicode space there (NBSP, U+3000, ...) would make this the middle of a whitespace run,
         * whose pre-split depends on how the run ends */
        while (j > 0 && i - j < 4 && (s[j] & 0xC0) == 0x80) {
            j--;
        }
        if (cp_class(utf8_get(s + j, i - j, &cl)) != CL_SPACE) {
            return i;
        }
    }
    return 0;
}

/* Length in bytes of the next pre-token of s[0..len) (len > 0). */
static size_t pre_split(const uint8_t *s, size_t len)
{
    size_t   cl, cl2, i;
    uint32_t cp = utf8_get(s, len, &cl);
    int      c  = cp_class(cp), c2 = -1;

    if (cl < len) {
        c2 = cp_class(utf8_get(s + cl, len - cl, &cl2));
    }
    if (c == CL_DIGIT) {
        return cl;
    }
    if (cp == '\'' && len >= 2) {
        if (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd') {
            return 2;
        }
        if (len >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') ||
                         (s[1] == 'l' && s[2] == 'l'))) {
            return 3;
        }
    }
    i = 0;
    if (cp == ' ' && (c2 == CL_LETTER || c2 == CL_OTHER)) {
        i = cl;
        c = c2;
    }
    if (c == CL_LETTER || c == CL_OTHER) {
        while (i < len) {
            size_t k;

            if (cp_class(utf8_get(s + i, len - i, &k)) != c) {
                break;
            }
            i += k;
        }
        return i;
    }
    /* whitespace run: keep its last char for the next word unless the run ends the piece */
    {
        size_t last = 0, k;

        i = 0;
        while (i < len && cp_class(utf8_get(s + i, len - i, &k)) == CL_SPACE) {
            last = i;
            i += k;
        }
        if (i == len || last == 0 || cp_class(utf8_get(s + i, len - i, &k)) == CL_DIGIT) {
            return i;
        }
        return last;
    }
}

static void encode_plain(const kvp_tok_t *tok, kvp_tok_merger_t *m, const uint8_t *s, size_t len,
                         uint32_t *ids, size_t *n_p)
{
    while (len > 0) {
        size_t k = pre_split(s, len);

        bpe_word(tok, m, s, k, ids, n_p);
        s += k;
        len -= k;
    }
}

kvp_status_t kvp_tok_bpe_encode(const kvp_tok_t *tok, const char *text, size_t len,
                                uint32_t *ids, size_t *n_p)
{
    const uint8_t   *s     = (const uint8_t *)text;
    size_t           start = 0, n = 0;
    kvp_tok_merger_t m;
    kvp_status_t     status = kvp_tok_merger_init(&m, len); /* a word is at most the text */

    if (status != KVP_OK) {
        return status;
    }

    for (size_t i = 0; i < len; i++) {
        for (uint32_t k = 0; k < tok->n_special; k++) {
            uint32_t id = tok->special[k];
            uint32_t pl = tok->piece_len[id];

            if (pl > 0 && pl <= len - i && s[i] == (uint8_t)tok->piece[id][0] &&
                memcmp(s + i, tok->piece[id], pl) == 0) {
                encode_plain(tok, &m, s + start, i - start, ids, &n);
                ids[n++] = id;
                i += pl - 1;
                start = i + 1;
                break;
            }
        }
    }
    encode_plain(tok, &m, s + start, len - start, ids, &n);
    kvp_tok_merger_free(&m);
    *n_p = n;
    return KVP_OK;
}
