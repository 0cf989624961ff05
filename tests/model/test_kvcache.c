/* test_kvcache.c - kvp_kvc_restore on pages that do not fit the session (no model needed): the
 * pages come from another process (a node), so a page whose header disagrees with the record or
 * the cache (more rows than the record says, a wider geometry) must be refused before anything
 * is decoded into the cache rows; a fitting session restores the exact rows.
 * Usage: test_kvcache (always runs). */
#include "model/kvcache.h"

#include "kvpack/alloc.h"
#include "kvpack/log.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define L  2u
#define HD 8u
#define P  16u
#define MAXT 64u

/* A cache of `heads` KV heads holding ntok tokens with distinct rows, its pages kept. */
static kvp_kvc_t *source(uint32_t heads, uint32_t ntok)
{
    kvp_kvc_params_t p = {.codec = KVP_CODEC_FP16, .layers = L, .heads = heads, .head_dim = HD,
                          .page_tokens = P, .max_tokens = MAXT, .ns = 7, .keep_pages = 1};
    kvp_kvc_t       *c = NULL;
    float            k[8 * HD], v[8 * HD];

    if (kvp_kvc_create(&p, &c) != KVP_OK) {
        return NULL;
    }
    for (uint32_t t = 0; t < ntok; t++) {
        for (uint32_t l = 0; l < L; l++) {
            for (uint32_t i = 0; i < heads * HD; i++) {
                k[i] = (float)(t + i + l) + 0.5f;
                v[i] = (float)((int)t - (int)i - (int)l) - 0.5f;
            }
            kvp_kvc_put(c, l, k, v);
        }
        if (kvp_kvc_commit(c, 100 + t) != KVP_OK) {
            kvp_kvc_destroy(c);
            return NULL;
        }
    }
    return c;
}

/* An empty 4-head cache to restore into, with room for MAXT tokens (so a page decoded past the
 * session's rows lands inside the arrays, where the test can see it, instead of past them). */
static kvp_kvc_t *sink_cache(void)
{
    kvp_kvc_params_t p = {.codec = KVP_CODEC_FP16, .layers = L, .heads = 4, .head_dim = HD,
                          .page_tokens = P, .max_tokens = MAXT, .ns = 7};
    kvp_kvc_t       *c = NULL;

    return kvp_kvc_create(&p, &c) == KVP_OK ? c : NULL;
}

/* Rows [from, MAXT) of every layer of c are still zero (K and V). */
static int untouched_from(const kvp_kvc_t *c, uint32_t from)
{
    for (uint32_t l = 0; l < L; l++) {
        for (size_t i = (size_t)from * c->row; i < (size_t)MAXT * c->row; i++) {
            if (kvp_kvc_k(c, l)[i] != 0.0f || kvp_kvc_v(c, l)[i] != 0.0f) {
                return 0;
            }
        }
    }
    return 1;
}

int main(void)
{
    kvp_kvc_t   *a = source(4, 26), *w = source(8, 26), *b;
    uint8_t     *tail = NULL, *wtail = NULL;
    size_t       tail_len = 0, wtail_len = 0;
    uint32_t     n_tail = 0, wn_tail = 0;
    kvp_status_t st;

    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    EXPECT(a != NULL && w != NULL, "source caches");
    if (a == NULL || w == NULL) {
        return kvp_test_result("test_kvcache");
    }
    EXPECT(a->sealed == P && kvp_kvc_tail_pack(a, &tail, &tail_len, &n_tail) == KVP_OK &&
           n_tail == L, "source: one chunk + a 10-row tail per layer");
    EXPECT(kvp_kvc_tail_pack(w, &wtail, &wtail_len, &wn_tail) == KVP_OK, "wide tail pack");

    /* the record says 17 tokens (a 1-row tail) but the tail pages hold 10 rows each */
    kvp_log_level_current = -1; /* the refusals below log an error line each: expected */
    b  = sink_cache();
    st = b ? kvp_kvc_restore(b, a->tokens, 17, (const uint8_t *const *)a->pages, a->page_lens,
                             L, tail, tail_len, n_tail)
           : KVP_ERR_NO_MEMORY;
    EXPECT(st == KVP_ERR_WRONG_CODEC, "tail with more rows than the record: %s",
           kvp_status_name(st));
    EXPECT(b != NULL && b->ntok == 0 && untouched_from(b, P),
           "no row past the sealed chunk was written by the refused tail page");
    kvp_kvc_destroy(b);

    /* sealed pages of 8 KV heads into a 4-head cache: twice the rows' width */
    b  = sink_cache();
    st = b ? kvp_kvc_restore(b, w->tokens, 26, (const uint8_t *const *)w->pages, w->page_lens,
                             L, wtail, wtail_len, wn_tail)
           : KVP_ERR_NO_MEMORY;
    EXPECT(st == KVP_ERR_WRONG_CODEC, "pages of a wider geometry: %s", kvp_status_name(st));
    EXPECT(b != NULL && untouched_from(b, 0), "the refused wide page wrote nothing");
    kvp_kvc_destroy(b);
    kvp_log_level_current = KVP_LOG_LVL_ERROR;

    /* the matching session restores the exact rows */
    b  = sink_cache();
    st = b ? kvp_kvc_restore(b, a->tokens, 26, (const uint8_t *const *)a->pages, a->page_lens,
                             L, tail, tail_len, n_tail)
           : KVP_ERR_NO_MEMORY;
    EXPECT(st == KVP_OK && b->ntok == 26 && b->sealed == P, "restore: %s", kvp_status_name(st));
    for (uint32_t l = 0; st == KVP_OK && l < L; l++) {
        size_t n = (size_t)26 * a->row * sizeof(float);

        EXPECT(memcmp(kvp_kvc_k(b, l), kvp_kvc_k(a, l), n) == 0 &&
               memcmp(kvp_kvc_v(b, l), kvp_kvc_v(a, l), n) == 0, "layer %u rows restored", l);
    }
    EXPECT(b != NULL && untouched_from(b, 26), "nothing past the session's rows");
    kvp_kvc_destroy(b);
    kvp_free(tail);
    kvp_free(wtail);
    kvp_kvc_destroy(a);
    kvp_kvc_destroy(w);
    return kvp_test_result("test_kvcache");
}
