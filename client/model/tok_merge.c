/* tok_merge.c - the pair-merging loop both tokenizers share (llama2.c's score-greedy merges in
 * tokenizer.c, GPT-2 BPE's rank-ordered merges in tok_bpe.c): repeatedly merge the adjacent pair
 * of highest priority, the leftmost on ties, until no pair merges. Done with a heap of candidate
 * pairs over a linked list of symbols, O(n log n), where the plain scan-and-memmove loop was
 * O(n^2) (160 KB of text took 6.7 s through tok512's vocabulary). Heap entries are checked
 * lazily: a symbol's version counts its changes (merged into, or merged away), and an entry whose
 * two symbols changed since it was pushed is dropped when it surfaces. The order is the scan's:
 * priority first, then the left symbol's position, which merging never reorders. */
#include "tokenizer.h"

#include "kvpack/alloc.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    double   prio;
    uint32_t left, right; /* symbol positions */
    uint32_t vl, vr;      /* their versions when pushed */
    uint32_t merged;      /* id of the merged token */
} merge_cand_t;

/* a before b: higher priority, then further left */
static int cand_before(const merge_cand_t *a, const merge_cand_t *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static void heap_push(merge_cand_t *h, size_t *n, merge_cand_t c)
{
    size_t i = (*n)++;

    while (i > 0 && cand_before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i    = (i - 1) / 2;
    }
    h[i] = c;
}

static merge_cand_t heap_pop(merge_cand_t *h, size_t *n)
{
    merge_cand_t top = h[0], last = h[--(*n)];
    size_t       i = 0;

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= *n) {
            break;
        }
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c])) {
            c++;
        }
        if (!cand_before(&h[c], &last)) {
            break;
        }
        h[i] = h[c];
        i    = c;
    }
    if (*n > 0) {
        h[i] = last;
    }
    return top;
}

kvp_status_t kvp_tok_merger_init(kvp_tok_merger_t *m, size_t max_symbols)
{
    size_t n = max_symbols > 0 ? max_symbols : 1;

    memset(m, 0, sizeof(*m));
    if (n >= UINT32_MAX) { /* positions are 32-bit; UINT32_MAX marks the ends */
        return KVP_ERR_TOO_LARGE;
    }
    m->cap  = n;
    m->next = kvp_malloc(n * sizeof(*m->next), "tok merge links");
    m->prev = kvp_malloc(n * sizeof(*m->prev), "tok merge links");
    m->ver  = kvp_malloc(n * sizeof(*m->ver), "tok merge versions");
    m->heap = kvp_malloc(3 * n * sizeof(merge_cand_t), "tok merge heap"); /* n - 1 + 2 per merge */
    if (m->next == NULL || m->prev == NULL || m->ver == NULL || m->heap == NULL) {
        kvp_tok_merger_free(m);
        return KVP_ERR_NO_MEMORY;
    }
    return KVP_OK;
}

void kvp_tok_merger_free(kvp_tok_merger_t *m)
{
    kvp_free(m->next);
    kvp_free(m->prev);
    kvp_free(m->ver);
    kvp_free(m->heap);
    m->next = m->prev = m->ver = NULL;
    m->heap = NULL;
    m->cap  = 0;
}

static void push_pair(kvp_tok_merger_t *m, const uint32_t *ids, uint32_t l, uint32_t r,
                      kvp_tok_pair_fn pair, const void *ctx, size_t *nh)
{
    merge_cand_t c = {.left = l, .right = r, .vl = m->ver[l], .vr = m->ver[r]};

    if (pair(ctx, ids[l], ids[r], &c.prio, &c.merged)) {
        heap_push(m->heap, nh, c);
    }
}

size_t kvp_tok_merge(kvp_tok_merger_t *m, uint32_t *ids, size_t n, kvp_tok_pair_fn pair,
                     const void *ctx)
{
    const uint32_t none = UINT32_MAX;
    merge_cand_t  *h    = m->heap;
    size_t         nh   = 0, out = 0;

    if (n < 2) {
        return n;
    }
    for (uint32_t i = 0; i < n; i++) {
        m->prev[i] = i > 0 ? i - 1 : none;
        m->next[i] = i + 1 < n ? i + 1 : none;
        m->ver[i]  = 0;
    }
    for (uint32_t i = 0; i + 1 < n; i++) {
        push_pair(m, ids, i, i + 1, pair, ctx, &nh);
    }
    while (nh > 0) {
        merge_cand_t c = heap_pop(h, &nh);
        uint32_t     l = c.left, r = c.right;

        if (m->ver[l] != c.vl || m->ver[r] != c.vr) {
            continue; /* one of its symbols changed since: a stale candidate */
        }
        ids[l] = c.merged;
        m->ver[l]++;
        m->ver[r]++; /* merged away */
        m->next[l] = m->next[r];
        if (m->next[r] != none) {
            m->prev[m->next[r]] = l;
        }
        if (m->prev[l] != none) {
            push_pair(m, ids, m->prev[l], l, pair, ctx, &nh);
        }
        if (m->next[l] != none) {
            push_pair(m, ids, l, m->next[l], pair, ctx, &nh);
        }
    }
    for (uint32_t i = 0; i != none; i = m->next[i]) { /* symbol 0 is never merged away */
        ids[out++] = ids[i];
    }
    return out;
}
