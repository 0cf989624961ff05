/* test_loadtest_count.c - how `kvpack loadtest` counts a request (cmd_loadtest_trace.c, no
 * network): kvp_lt_block_hits' rule (a block hits when it has sealed P-token chunks and all were
 * found; a partial last block, or one with no sealed chunk, does not), and kvp_lt_took over a
 * failover. With --replicas 2 the primary can answer the lookup and die during its put; the next
 * node in rank then takes the request as its first. The request's hits must be that node's
 * (they once added up over both: 6 hits of 4 blocks), and the pages and bytes those of the puts
 * that were acked (the failed put's were counted too). */
#include "check.h"
#include "cmd_loadtest.h"

#include <string.h>

/* A request of len tokens made of n_ids 512-token blocks. */
static kvp_lt_req_t req(uint32_t len)
{
    static uint64_t ids[64];
    kvp_lt_req_t    r;

    memset(&r, 0, sizeof(r));
    r.input_len = len;
    r.n_ids     = (len + KVP_LT_BLOCK_TOKENS - 1) / KVP_LT_BLOCK_TOKENS;
    r.ids       = ids;
    return r;
}

static void block_hits(void)
{
    kvp_lt_req_t r = req(4 * 512 + 300); /* 5 blocks: 4 full, one of 300 tokens */

    /* P = 128: 4 chunks a block, 18 sealed chunks (the last block has 2 of its 300 tokens' 3) */
    CHECK(kvp_lt_block_hits(&r, 128, 0) == 0);
    CHECK(kvp_lt_block_hits(&r, 128, 3) == 0);   /* block 0 needs all 4 */
    CHECK(kvp_lt_block_hits(&r, 128, 4) == 1);
    CHECK(kvp_lt_block_hits(&r, 128, 16) == 4);
    CHECK(kvp_lt_block_hits(&r, 128, 17) == 4);  /* block 4: 1 of its 2 sealed chunks */
    CHECK(kvp_lt_block_hits(&r, 128, 18) == 5);  /* both: its tail tokens are no chunk */
    /* P = 512: the partial last block has no sealed chunk, so it never hits */
    CHECK(kvp_lt_block_hits(&r, 512, 4) == 4);
    r = req(200);
    CHECK(kvp_lt_block_hits(&r, 128, 1) == 1 && kvp_lt_block_hits(&r, 512, 0) == 0);
}

static void failover(void)
{
    kvp_lt_req_t    r = req(4 * 512);                     /* 16 chunks at P = 128 */
    kvp_lt_sample_t s;
    kvp_lt_result_t res;
    kvp_lt_part_t   primary = {12, 8, 1000, 8000};        /* hits 3 blocks, then its put fails */
    kvp_lt_part_t   second  = {12, 8, 1000, 8000};        /* the next in rank: the same prefix */
    kvp_lt_part_t   third   = {16, 0, 100, 0};            /* a replica that had everything */

    memset(&s, 0, sizeof(s));
    memset(&res, 0, sizeof(res));
    (void)primary; /* its put failed: lt_request never passes it to kvp_lt_took */
    kvp_lt_took(&s, &res, &r, 128, true, &second);
    kvp_lt_took(&s, &res, &r, 128, false, &third);
    CHECK(s.hit_chunks == 12 && s.hit_blocks == 3);       /* the first that took it, once */
    CHECK(s.pages_put == 8 && res.bytes_put == 1100 && res.bytes_put_fp16 == 8000);

    /* a first node's hits replace, never add: whatever came before in the sample */
    kvp_lt_took(&s, &res, &r, 128, true, &third);
    CHECK(s.hit_chunks == 16 && s.hit_blocks == 4);
}

int main(void)
{
    block_hits();
    failover();
    return kvp_test_result("test_loadtest_count");
}
