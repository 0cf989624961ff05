/* cluster_layout.c - prints, as one JSON object, sizeof and every field offset of the cluster.h
 * structs and the kvpack.h, page.h and codec.h ones that client/python/kvpack.py mirrors with ctypes;
 * check_python_cluster.py compares them with ctypes.sizeof and the fields' offsets. */
#include "kvpack/cluster.h"
#include "kvpack/codec.h"
#include "kvpack/page.h"

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
    F(kvp_cluster_list_t, damaged); F(kvp_cluster_list_t, on_disk);
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
    S(kvp_session_desc_t);
    F(kvp_session_desc_t, layers); F(kvp_session_desc_t, page_tokens);
    F(kvp_session_desc_t, n_chunks); F(kvp_session_desc_t, chunk_keys);
    F(kvp_session_desc_t, tail_tokens); F(kvp_session_desc_t, n_tail);
    F(kvp_session_desc_t, tail_len); F(kvp_session_desc_t, tail);
    printf("}");
    S(kvp_session_pages_t);
    F(kvp_session_pages_t, desc); F(kvp_session_pages_t, n_pages); F(kvp_session_pages_t, pages);
    F(kvp_session_pages_t, page_lens); F(kvp_session_pages_t, wire_bytes);
    F(kvp_session_pages_t, version); F(kvp_session_pages_t, disk_pages);
    F(kvp_session_pages_t, disk_bytes);
    printf("}");
    S(kvp_node_stat_t);
    F(kvp_node_stat_t, dram_bytes); F(kvp_node_stat_t, dram_pages); F(kvp_node_stat_t, dram_budget);
    F(kvp_node_stat_t, sessions); F(kvp_node_stat_t, sessions_on_disk); F(kvp_node_stat_t, spills);
    F(kvp_node_stat_t, restores); F(kvp_node_stat_t, crc_failures); F(kvp_node_stat_t, disk_errors);
    F(kvp_node_stat_t, uptime_ms); F(kvp_node_stat_t, disk_bytes);
    F(kvp_node_stat_t, disk_live_bytes); F(kvp_node_stat_t, requests);
    F(kvp_node_stat_t, bad_requests); F(kvp_node_stat_t, index_rebuilds);
    F(kvp_node_stat_t, wal_dropped_bytes); F(kvp_node_stat_t, disk_free_bytes);
    F(kvp_node_stat_t, disk_full_refusals); F(kvp_node_stat_t, connections);
    F(kvp_node_stat_t, connections_max); F(kvp_node_stat_t, connections_rejected);
    printf("}");
    S(kvp_scrub_result_t);
    F(kvp_scrub_result_t, bytes); F(kvp_scrub_result_t, bad_pages);
    F(kvp_scrub_result_t, elapsed_ms); F(kvp_scrub_result_t, index_rebuilt);
    printf("}");
    S(kvp_page_params_t);
    F(kvp_page_params_t, codec); F(kvp_page_params_t, heads); F(kvp_page_params_t, head_dim);
    F(kvp_page_params_t, page_tokens); F(kvp_page_params_t, layer); F(kvp_page_params_t, first_pos);
    F(kvp_page_params_t, chunk_key); F(kvp_page_params_t, flags); F(kvp_page_params_t, kvarn_iters);
    printf("}");
    S(kvp_page_info_t);
    F(kvp_page_info_t, version); F(kvp_page_info_t, codec); F(kvp_page_info_t, flags);
    F(kvp_page_info_t, bits_k); F(kvp_page_info_t, bits_v); F(kvp_page_info_t, group_k);
    F(kvp_page_info_t, group_v); F(kvp_page_info_t, valid); F(kvp_page_info_t, capacity);
    F(kvp_page_info_t, heads); F(kvp_page_info_t, head_dim); F(kvp_page_info_t, layer);
    F(kvp_page_info_t, first_pos); F(kvp_page_info_t, chunk_key); F(kvp_page_info_t, payload_len);
    F(kvp_page_info_t, aux); F(kvp_page_info_t, crc);
    printf("}");
    S(kvp_client_params_t);
    F(kvp_client_params_t, server); F(kvp_client_params_t, timeout_ms);
    F(kvp_client_params_t, max_inflight);
    printf("}}\n");
    return 0;
}
