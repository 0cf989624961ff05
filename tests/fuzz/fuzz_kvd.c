/* fuzz_kvd.c - the .kvd reader of `kvpack eval --input`, `kvpack put --kvd` and the Python
 * binding (client/eval/kv.c) on arbitrary bytes, given to it as a file, as a user would.
 * Properties: never a crash, a leak or an out-of-bounds access; a dump that loads has exactly
 * the bytes its header promises (24 + 8 x L x T x H x D, every dimension at least 1), and the
 * scan for values no codec stores reads all of it and names a place inside the dump; a dump that
 * does not load comes with its reason and nothing allocated. */
#define _GNU_SOURCE /* fuzz_as_file */
#include "fuzz.h"
#include "eval.h" /* client/eval */

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char     where[160], why[KVP_KVD_WHY_MAX] = "";
    kvp_kv_t kv;
    uint64_t n;

    if (kvp_kvd_read(fuzz_as_file(data, size), &kv, why, sizeof(why)) != KVP_OK) {
        if (why[0] == '\0' || kv.k != NULL) {
            FUZZ_FAIL("refused with no reason given, or with tensors left allocated");
        }
        return 0;
    }
    n = (uint64_t)kv.layers * kv.tokens * kv.heads * kv.head_dim;
    if (n == 0 || 24 + 8 * n != size) {
        FUZZ_FAIL("%u x %u x %u x %u loaded from %zu bytes", kv.layers, kv.tokens, kv.heads,
                  kv.head_dim, size);
    }
    if (kvp_kv_find_unstorable(&kv, where, sizeof(where)) &&
        (where[0] != 'K' && where[0] != 'V')) {
        FUZZ_FAIL("unstorable value placed at \"%s\"", where);
    }
    kvp_kv_free(&kv);
    return 0;
}
