/* hist.c - the shared duration buckets (see kvpack/hist.h): the bounds table and the slot of a
 * duration. */
#include "kvpack/hist.h"

const kvp_hist_bound_t kvp_hist_bounds[KVP_HIST_BUCKETS] = {
    {50000, "0.00005"},     {100000, "0.0001"},    {250000, "0.00025"},    {500000, "0.0005"},
    {1000000, "0.001"},     {2500000, "0.0025"},   {5000000, "0.005"},     {10000000, "0.01"},
    {25000000, "0.025"},    {50000000, "0.05"},    {100000000, "0.1"},     {250000000, "0.25"},
    {500000000, "0.5"},     {1000000000, "1"},     {2500000000u, "2.5"},   {5000000000u, "5"},
    {10000000000u, "10"},
};

uint32_t kvp_hist_bucket(uint64_t ns)
{
    uint32_t b = 0;

    while (b < KVP_HIST_BUCKETS && ns > kvp_hist_bounds[b].ns) {
        b++;
    }
    return b;
}
