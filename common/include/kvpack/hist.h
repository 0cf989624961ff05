/* hist.h - the one set of duration buckets kvpack's Prometheus histograms use (kvpackd request
 * handling, the store's session spills and restores): KVP_HIST_BUCKETS finite upper bounds (le,
 * inclusive), log-spaced 1-2.5-5 from 50 us to 10 s, then +Inf in slot KVP_HIST_BUCKETS.
 * Counters keep one count per slot (not cumulative); renderers add them up. */
#ifndef KVPACK_HIST_H
#define KVPACK_HIST_H

#include <stdint.h>

#define KVP_HIST_BUCKETS 17u

typedef struct {
    uint64_t    ns; /* upper bound in nanoseconds */
    const char *le; /* the same bound in seconds, as the le label prints it */
} kvp_hist_bound_t;

extern const kvp_hist_bound_t kvp_hist_bounds[KVP_HIST_BUCKETS];

/* The slot of a duration: the first bound >= ns, or KVP_HIST_BUCKETS (+Inf) past the last. */
uint32_t kvp_hist_bucket(uint64_t ns);

#endif
