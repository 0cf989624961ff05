/* test_tok_merge.c - the tokenizers' pair merger (client/model/tok_merge.c: a heap over a linked
 * list) against the loop it replaced, written out here: scan every adjacent pair for the highest
 * priority, take the leftmost on ties, merge, repeat. Random runs over a small alphabet with a
 * random pair table where most priorities tie (runs like "aaa" merge at 0 or at 1 depending on
 * the tie rule), some pairs never merge, and merged ids merge again; every length from 0 to 40,
 * then long runs. End to end, kvp_tok_encode against llama2.c's plain-scan encode (sp_ref.h): a
 * crafted llama2.c vocabulary of every 1..3-letter string over "ab c" whose scores tie, are NaN,
 * -1e9 (merges), -1e20 or -1e30 (neither merges: llama2.c's scan starts from a best score of
 * -1e10), on random strings; and
 * tok512 on Emma (skipped without ../shared/realdata). */
#define _GNU_SOURCE /* mkstemp, fdopen */
#include "sp_ref.h"

#include "kvpack/alloc.h"
#include "check.h"
#include "tk.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#define ALPHA 24 /* ids 0..ALPHA-1 */

typedef struct {
    int      ok[ALPHA][ALPHA];
    double   prio[ALPHA][ALPHA];
    uint32_t out[ALPHA][ALPHA];
} table_t;

static int table_pair(const void *ctx, uint32_t a, uint32_t b, double *prio, uint32_t *merged)
{
    const table_t *t = ctx;

    if (!t->ok[a][b]) {
        return 0;
    }
    *prio   = t->prio[a][b];
    *merged = t->out[a][b];
    return 1;
}

/* the O(n^2) loop: best priority, leftmost on ties */
static size_t scan_merge(const table_t *t, uint32_t *ids, size_t n)
{
    for (;;) {
        size_t   best = SIZE_MAX;
        double   bp   = 0, p;
        uint32_t m, bm = 0;

        for (size_t i = 0; i + 1 < n; i++) {
            if (table_pair(t, ids[i], ids[i + 1], &p, &m) && (best == SIZE_MAX || p > bp)) {
                best = i;
                bp   = p;
                bm   = m;
            }
        }
        if (best == SIZE_MAX) {
            return n;
        }
        ids[best] = bm;
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(*ids));
        n--;
    }
}

static void random_table(tk_rng_t *rng, table_t *t)
{
    for (int a = 0; a < ALPHA; a++) {
        for (int b = 0; b < ALPHA; b++) {
            t->ok[a][b]   = tk_range(rng, 0, 9) < 6;
            t->prio[a][b] = (double)tk_range(rng, 0, 3); /* four levels: ties everywhere */
            t->out[a][b]  = tk_range(rng, 0, ALPHA - 1);
        }
    }
}

static void compare(tk_rng_t *rng, const table_t *t, kvp_tok_merger_t *m, size_t n, int small)
{
    uint32_t *a = malloc((n + 1) * sizeof(*a)), *b = malloc((n + 1) * sizeof(*b));
    size_t    na, nb;

    for (size_t i = 0; i < n; i++) {
        a[i] = tk_range(rng, 0, small ? 2 : ALPHA - 1);
    }
    memcpy(b, a, n * sizeof(*a));
    na = kvp_tok_merge(m, a, n, table_pair, t);
    nb = scan_merge(t, b, n);
    EXPECT(na == nb && memcmp(a, b, na * sizeof(*a)) == 0,
           "n %zu: the merger gives %zu ids, the scan %zu (or they differ)", n, na, nb);
    free(a);
    free(b);
}

/* A llama2.c tokenizer file: <unk> <s> </s>, the 256 byte tokens, then every string of 1..3
 * characters over "ab c" with scores from a small set (ties, NaN, either side of -1e10). */
static void crafted_vocab(tk_rng_t *rng)
{
    static const float scores[] = {0.0f, 0.0f, -1.0f, -1e9f, -1e20f, -1e30f, NAN};
    const char        *alpha = "ab c";
    char               path[] = "/tmp/kvp_tok_merge_XXXXXX", piece[8], text[64];
    int                fd = mkstemp(path);
    FILE              *f  = fd >= 0 ? fdopen(fd, "wb") : NULL;
    uint32_t           n = 0, *ids, want[70];
    int32_t            maxlen = 6;
    kvp_tok_t         *tok;
    size_t             nids, nw;

    CHECK(f != NULL);
    fwrite(&maxlen, 4, 1, f);
#define PUT(str, sc)                                                                                   do {                                                                                                   float   s_ = (sc);                                                                                 int32_t l_ = (int32_t)strlen(str);                                                                 fwrite(&s_, 4, 1, f);                                                                              fwrite(&l_, 4, 1, f);                                                                              fwrite((str), 1, (size_t)l_, f);                                                                   n++;                                                                                           } while (0)
    PUT("<unk>", 0.0f);
    PUT("<s>", 0.0f);
    PUT("</s>", 0.0f);
    for (int b = 0; b < 256; b++) {
        snprintf(piece, sizeof(piece), "<0x%02X>", b);
        PUT(piece, 0.0f);
    }
    for (int len = 1; len <= 3; len++) {
        for (int k = 0; k < (len == 1 ? 4 : len == 2 ? 16 : 64); k++) {
            for (int i = 0, x = k; i < len; i++, x /= 4) {
                piece[i] = alpha[x % 4];
            }
            piece[len] = '\0';
            PUT(piece, scores[tk_range(rng, 0, 6)]);
        }
    }
#undef PUT
    fclose(f);
    CHECK_OK(kvp_tok_load_llama2c(path, n, &tok));
    unlink(path);
    for (int round = 0; round < 2000; round++) {
        size_t len = tk_range(rng, 0, 60);

        for (size_t i = 0; i < len; i++) {
            text[i] = alpha[tk_range(rng, 0, 3)];
        }
        CHECK_OK(kvp_tok_encode(tok, text, len, 0, &ids, &nids));
        nw = sp_ref_encode(tok, text, len, want);
        EXPECT(nids == nw && memcmp(ids, want, nw * sizeof(*ids)) == 0,
               "crafted vocabulary, \"%.*s\": %zu ids, the plain scan %zu (or they differ)",
               (int)len, text, nids, nw);
        kvp_free(ids);
    }
    kvp_tok_free(tok);
}

static int real_text(const char *dir)
{
    char       path[4096];
    kvp_tok_t *tok;
    FILE      *f;
    char      *text;
    size_t     len, n, nw;
    uint32_t  *ids, *want;

    snprintf(path, sizeof(path), "%s/tok512.bin", dir);
    if (kvp_tok_load_llama2c(path, 512, &tok) != KVP_OK) {
        printf("SKIP the tok512 check: %s not readable (../shared/realdata absent)\n", path);
        return 0;
    }
    snprintf(path, sizeof(path), "%s/emma.txt", dir);
    f = fopen(path, "rb");
    if (f == NULL) {
        printf("SKIP the tok512 check: %s not readable\n", path);
        kvp_tok_free(tok);
        return 0;
    }
    text = malloc(8192);
    len  = fread(text, 1, 8192, f); /* the scan is quadratic: 8 KiB is enough to show it */
    fclose(f);
    want = malloc((len + 2) * sizeof(*want));
    CHECK_OK(kvp_tok_encode(tok, text, len, 0, &ids, &n));
    nw = sp_ref_encode(tok, text, len, want);
    EXPECT(n == nw && memcmp(ids, want, n * sizeof(*ids)) == 0,
           "tok512 on %zu bytes of Emma: %zu ids, the plain scan %zu (or they differ)", len, n, nw);
    printf("tok512: %zu bytes of Emma -> %zu ids, as the plain scan\n", len, n);
    kvp_free(ids);
    free(want);
    free(text);
    kvp_tok_free(tok);
    return 1;
}

int main(int argc, char **argv)
{
    tk_rng_t         rng = {2026};
    table_t         *t   = malloc(sizeof(*t));
    kvp_tok_merger_t m;

    CHECK_OK(kvp_tok_merger_init(&m, 1024));
    for (int round = 0; round < 200; round++) {
        random_table(&rng, t);
        for (size_t n = 0; n <= 40; n++) {
            compare(&rng, t, &m, n, round % 2);
        }
        compare(&rng, t, &m, 1024, round % 2);
    }
    kvp_tok_merger_free(&m);
    EXPECT(kvp_tok_merger_init(&m, (size_t)UINT32_MAX) == KVP_ERR_TOO_LARGE, "2^32 - 1 symbols");
    free(t);
    crafted_vocab(&rng);
    real_text(argc > 1 ? argv[1] : "../shared/realdata");
    return kvp_test_result("test_tok_merge");
}
