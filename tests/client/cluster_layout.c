/* cluster_layout.c - prints, as one JSON object, sizeof and every field offset of the cluster.h
 * structs and the kvpack.h ones that client/python/kvpack.py mirrors with ctypes;
 * check_python_cluster.py compares them with ctypes.sizeof and the fields' offsets. */
#include "kvpack/cluster.h"

#include <stddef.h>
#include <stdio.h>

#define F(T, f) printf(", \"%s\": %zu", #f, offsetof(T, f))
#define S(T)    printf("%s\"%s\": {\"size\": %zu", first ? "" : ", ", #T, sizeof(T)), first = 0

int main(void)
{
    int first = 1;

    printf("{");
    S(kvp_cluster_params_t);
    F(kvp_cluster_params_t, field_mask); F(kvp_cluster_params_t, peers);
    F(kvp_cluster_params_t, replicas); F(kvp_cluster_params_t, client);
    F(kvp_cluster_params_t, progress_cb); F(kvp_cluster_params_t, progress_arg);
    F(kvp_cluster_params_t, etcd); F(kvp_cluster_params_t, etcd_prefix);
    printf("}");
    S(kvp_cluster_try_t);
    F(kvp_cluster_try_t, node); F(kvp_cluster_try_t, status); F(kvp_cluster_try_t, stage);
    printf("}");
    S(kvp_cluster_report_t);
    F(kvp_cluster_report_t, n_tried); F(kvp_cluster_report_t, tried);
    F(kvp_cluster_report_t, n_ok); F(kvp_cluster_report_t, served_by);
    printf("}");
    S(kvp_cluster_list_t);
    F(kvp_cluster_list_t, n); F(kvp_cluster_list_t, sessions); F(kvp_cluster_list_t, holders);
    F(kvp_cluster_list_t, truncated); F(kvp_cluster_list_t, requests);
    F(kvp_cluster_list_t, stride); F(kvp_cluster_list_t, versions); F(kvp_cluster_list_t, deleted);
    printf("}");
    S(kvp_session_info_t);
    F(kvp_session_info_t, ns); F(kvp_session_info_t, sid); F(kvp_session_info_t, where);
    F(kvp_session_info_t, bytes); F(kvp_session_info_t, version); F(kvp_session_info_t, deleted);
    printf("}");
    S(kvp_append_t);
    F(kvp_append_t, codec); F(kvp_append_t, ns_fingerprint); F(kvp_append_t, layers);
    F(kvp_append_t, page_tokens); F(kvp_append_t, dtype); F(kvp_append_t, k);
    F(kvp_append_t, v); F(kvp_append_t, ntok); F(kvp_append_t, ids); F(kvp_append_t, n_ids);
    F(kvp_append_t, first_pos);
    printf("}");
    S(kvp_client_params_t);
    F(kvp_client_params_t, server); F(kvp_client_params_t, timeout_ms);
    F(kvp_client_params_t, max_inflight);
    printf("}}\n");
    return 0;
}
