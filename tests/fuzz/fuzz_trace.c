/* fuzz_trace.c - the workload trace reader of `kvpack loadtest --trace` and `kvpack plan --trace`
 * (client/cli/cmd_loadtest_trace.c, compiled into this harness) on arbitrary bytes, given to it
 * as a file, as a user would. Properties: never a crash, a leak or undefined behaviour (UBSan:
 * numbers out of range are refused before they are converted); a trace that loads has, for every
 * request, one block id per 512 tokens of its input, a window below the count it reports, and a
 * resumed session that came earlier. */
#define _GNU_SOURCE /* fuzz_as_file */
#include "fuzz.h"
#include "cmd_loadtest.h" /* client/cli */

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvp_lt_workload_t w;

    if (kvp_lt_trace_load("fuzz", fuzz_as_file(data, size), 1000, 4, &w) != 0) {
        return 0;
    }
    for (uint32_t i = 0; i < w.n; i++) {
        const kvp_lt_req_t *r = &w.reqs[i];

        if (r->n_ids != (r->input_len + KVP_LT_BLOCK_TOKENS - 1) / KVP_LT_BLOCK_TOKENS ||
            r->window >= w.n_windows || r->resume >= (int64_t)i) {
            FUZZ_FAIL("request %u: %u ids for %u tokens, window %u of %u, resumes %lld", i,
                      r->n_ids, r->input_len, r->window, w.n_windows, (long long)r->resume);
        }
    }
    kvp_lt_workload_free(&w);
    return 0;
}
