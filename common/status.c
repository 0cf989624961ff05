/* status.c - strings for kvp_status_t, generated from KVP_STATUS_MAP. */
#include "kvpack/status.h"

const char *kvp_status_str(kvp_status_t status)
{
    switch (status) {
#define KVP_STATUS_CASE(_n, _v, _s) case KVP_##_n: return _s;
        KVP_STATUS_MAP(KVP_STATUS_CASE)
#undef KVP_STATUS_CASE
    }
    return "unknown status";
}

const char *kvp_status_name(kvp_status_t status)
{
    switch (status) {
#define KVP_STATUS_CASE(_n, _v, _s) case KVP_##_n: return #_n;
        KVP_STATUS_MAP(KVP_STATUS_CASE)
#undef KVP_STATUS_CASE
    }
    return "UNKNOWN";
}
