/* node_obs.c - a node's counters and its /health and /metrics pages (see node_obs.h). /metrics is
 * Prometheus text exposition 0.0.4: every family has # HELP and # TYPE, names are kvpack_* with
 * their unit (_bytes, _seconds, _total for counters). Store figures come from one
 * kvp_store_stats snapshot per scrape and are left out while the store is not open; the
 * kvpack_disk_* ones also without an SSD tier.
 * Main flow: kvp_node_obs_route -> /health | /metrics (node_families, store_samples,
 * request_families -> duration_family; both histogram kinds render through hist_series). */
#include "node_obs.h"

#include "kvpack/alloc.h"
#include "kvpack/codec.h"
#include "kvpack/version.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Store statistics exported as they are: every field of kvp_store_stats_t is a uint64_t. disk:
 * only with an SSD tier (a DRAM-only node has no disk to fill, so no disk-full alert); a value of
 * UINT64_MAX is unknown (the free space when the query failed) and left out. */
static const struct {
    const char *name;
    const char *type;
    const char *help;
    size_t      off;
    int         disk;
} store_families[] = {
    {"kvpack_dram_bytes", "gauge", "Bytes of DRAM pool slots holding pages",
     offsetof(kvp_store_stats_t, dram_bytes), 0},
    {"kvpack_dram_pages", "gauge", "Pages resident in the DRAM pool",
     offsetof(kvp_store_stats_t, dram_pages), 0},
    {"kvpack_dram_budget_bytes", "gauge", "DRAM page budget",
     offsetof(kvp_store_stats_t, dram_budget), 0},
    {"kvpack_sessions", "gauge", "Sessions known to the node, in DRAM or on disk",
     offsetof(kvp_store_stats_t, sessions), 0},
    {"kvpack_sessions_in_dram", "gauge", "Sessions whose pages and tail are in DRAM",
     offsetof(kvp_store_stats_t, sessions_in_dram), 0},
    {"kvpack_sessions_on_disk", "gauge", "Sessions with a record in the SSD tier",
     offsetof(kvp_store_stats_t, sessions_on_disk), 0},
    {"kvpack_spills_total", "counter", "Sessions written to disk by eviction or request",
     offsetof(kvp_store_stats_t, spills), 0},
    {"kvpack_spill_bytes_total", "counter", "Page bytes written to disk by spills",
     offsetof(kvp_store_stats_t, spill_bytes), 0},
    {"kvpack_restores_total", "counter", "Sessions read back from disk",
     offsetof(kvp_store_stats_t, restores), 0},
    {"kvpack_restore_bytes_total", "counter", "Page bytes read back from disk by restores",
     offsetof(kvp_store_stats_t, restore_bytes), 0},
    {"kvpack_spill_waits_total", "counter",
     "Requests that waited for the background spiller at the DRAM budget",
     offsetof(kvp_store_stats_t, spill_waits), 0},
    {"kvpack_spill_syncs_total", "counter",
     "Segment fdatasync + WAL fsync pairs of spills: one per spiller group, one per other spill",
     offsetof(kvp_store_stats_t, spill_syncs), 0},
    {"kvpack_interval_syncs_total", "counter",
     "Segment fdatasync + WAL fsync pairs of --durability interval (none while nothing was written)",
     offsetof(kvp_store_stats_t, interval_syncs), 0},
    {"kvpack_crc_failures_total", "counter", "Pages dropped because they failed their CRC on read",
     offsetof(kvp_store_stats_t, crc_failures), 0},
    {"kvpack_disk_errors_total", "counter", "I/O or disk-full errors from the SSD tier",
     offsetof(kvp_store_stats_t, disk_errors), 1},
    {"kvpack_expired_sessions_total", "counter", "Sessions removed by the idle TTL",
     offsetof(kvp_store_stats_t, expired), 0},
    {"kvpack_dropped_sessions_total", "counter",
     "Sessions evicted without an SSD tier (gone, not spilled)",
     offsetof(kvp_store_stats_t, dropped), 0},
    {"kvpack_disk_segment_files", "gauge", "Segment files holding page bytes on disk",
     offsetof(kvp_store_stats_t, disk_files), 1},
    {"kvpack_disk_bytes", "gauge", "Size of the segment files",
     offsetof(kvp_store_stats_t, disk_bytes), 1},
    {"kvpack_disk_live_bytes", "gauge", "Bytes of the segment files that pages on disk still use",
     offsetof(kvp_store_stats_t, disk_live_bytes), 1},
    {"kvpack_disk_logical_bytes_total", "counter",
     "Page and record bytes the store committed to its SSD tier (spills, write-through puts)",
     offsetof(kvp_store_stats_t, disk_logical_bytes), 1},
    {"kvpack_disk_segment_write_bytes_total", "counter",
     "Bytes appended to segment files (4 KiB page spans, compaction copies included)",
     offsetof(kvp_store_stats_t, disk_segment_write_bytes), 1},
    {"kvpack_compact_segments_total", "counter",
     "Segment files compaction emptied and removed (--compact-ratio)",
     offsetof(kvp_store_stats_t, compact_segments), 0},
    {"kvpack_compact_moved_bytes_total", "counter",
     "Live page bytes compaction copied out of mostly dead segment files",
     offsetof(kvp_store_stats_t, compact_moved_bytes), 0},
    {"kvpack_compact_freed_bytes_total", "counter",
     "Disk bytes given back by the segment files compaction removed",
     offsetof(kvp_store_stats_t, compact_freed_bytes), 0},
    {"kvpack_scrub_bytes_total", "counter",
     "Page bytes scrubbing read back from disk and checked (--scrub-mib-s)",
     offsetof(kvp_store_stats_t, scrub_bytes), 0},
    {"kvpack_scrub_passes_total", "counter", "Complete scrubbing passes over every page on disk",
     offsetof(kvp_store_stats_t, scrub_passes), 0},
    {"kvpack_index_rebuilds_total", "counter",
     "RocksDB index rebuilds after a damaged block was found (since the node started)",
     offsetof(kvp_store_stats_t, index_rebuilds), 0},
    {"kvpack_index_lost_total", "counter",
     "Runs of index records a rebuild lost to damage no read got past",
     offsetof(kvp_store_stats_t, index_lost), 0},
    {"kvpack_wal_dropped_bytes_total", "counter",
     "Bytes of damaged write-ahead log records dropped at the node's start (their writes lost)",
     offsetof(kvp_store_stats_t, wal_dropped_bytes), 0},
    {"kvpack_disk_free_bytes", "gauge", "Free space of the data dir's filesystem",
     offsetof(kvp_store_stats_t, disk_free_bytes), 1},
    {"kvpack_disk_reserve_bytes", "gauge",
     "Bytes held in the disk reserve file (0 while released after the disk filled)",
     offsetof(kvp_store_stats_t, disk_reserve_bytes), 1},
    {"kvpack_disk_full_refusals_total", "counter",
     "Disk writes refused with ERR_NO_SPACE: they would have left less than the reserve free",
     offsetof(kvp_store_stats_t, disk_full_refusals), 1},
    {"kvpack_disk_reserve_releases_total", "counter",
     "Disk reserve file removed because a write failed for space",
     offsetof(kvp_store_stats_t, disk_reserve_releases), 1},
    {"kvpack_tombstones", "gauge", "Delete tombstones held (kept --tombstone-ttl after an rm)",
     offsetof(kvp_store_stats_t, tombstones), 0},
    {"kvpack_tombstone_bytes", "gauge",
     "DRAM the delete tombstones take, outside --dram-budget (about 100-130 B each)",
     offsetof(kvp_store_stats_t, tombstone_bytes), 0},
    {"kvpack_tombstones_expired_total", "counter", "Tombstones dropped after --tombstone-ttl",
     offsetof(kvp_store_stats_t, tombstones_expired), 0},
    {"kvpack_stale_refused_total", "counter",
     "Puts and deletes refused as older than the record or tombstone held (ERR_STALE)",
     offsetof(kvp_store_stats_t, stale_refused), 0},
};

/* ---- private: rendering ---- */

static void family(kvp_http_reply_t *r, const char *name, const char *type, const char *help)
{
    kvp_http_reply_printf(r, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *op_label(uint32_t op)
{
    return (op == 0 || op >= KVP_NODE_OBS_OPS) ? "unknown" : kvp_wire_op_name((kvp_wire_op_t)op);
}

/* "ok", "err_not_found", ...: the status name in lower case; "other" for slot 100. */
static void result_label(uint32_t slot, char *out, size_t cap)
{
    const char *name = (slot < 100) ? kvp_status_name((kvp_status_t) - (int)slot) : "other";
    size_t      i;

    for (i = 0; name[i] != '\0' && i + 1 < cap; i++) {
        out[i] = (char)tolower((unsigned char)name[i]);
    }
    out[i] = '\0';
}

static uint64_t load(atomic_uint_fast64_t *a)
{
    return (uint64_t)atomic_load_explicit(a, memory_order_relaxed);
}

/* One histogram series of name: cumulative _bucket lines up to +Inf from per-slot counts
 * hist[0..KVP_HIST_BUCKETS], _sum from sum_ns and _count (the +Inf bucket). label: "" or one
 * `key="value"` pair put before le and on _sum and _count. */
static void hist_series(kvp_http_reply_t *r, const char *name, const char *label,
                        const uint64_t *hist, uint64_t sum_ns)
{
    const char *sep = label[0] ? "," : "";
    const char *lb  = label[0] ? "{" : "";
    const char *rb  = label[0] ? "}" : "";
    uint64_t    cum = 0;

    for (uint32_t b = 0; b <= KVP_HIST_BUCKETS; b++) {
        cum += hist[b];
        kvp_http_reply_printf(r, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, label, sep,
                              (b < KVP_HIST_BUCKETS) ? kvp_hist_bounds[b].le : "+Inf",
                              (unsigned long long)cum);
    }
    kvp_http_reply_printf(r, "%s_sum%s%s%s %.9f\n", name, lb, label, rb, (double)sum_ns / 1e9);
    kvp_http_reply_printf(r, "%s_count%s%s%s %llu\n", name, lb, label, rb,
                          (unsigned long long)cum);
}

static void node_families(kvp_node_obs_t *obs, kvp_http_reply_t *r, int serving)
{
    char codecs[96] = "";

    for (int c = 1; c < KVP_CODEC_MAX; c++) {
        size_t l = strlen(codecs);

        snprintf(codecs + l, sizeof(codecs) - l, "%s%s", l ? "," : "",
                 kvp_codec_name((kvp_codec_id_t)c));
    }
    family(r, "kvpack_build_info", "gauge", "Version, codecs and wire version of this kvpackd");
    kvp_http_reply_printf(r, "kvpack_build_info{version=\"%s\",codecs=\"%s\",wire=\"%u\"} 1\n",
                          kvp_version(), codecs, KVP_WIRE_VERSION);
    family(r, "kvpack_serving", "gauge",
           "1 while /health says ok: store open, UCX listener up, main loop running");
    kvp_http_reply_printf(r, "kvpack_serving %d\n", serving);
    family(r, "kvpack_uptime_seconds", "gauge", "Seconds since the node started");
    kvp_http_reply_printf(r, "kvpack_uptime_seconds %.3f\n",
                          (double)(kvp_time_ns() - obs->start_ns) / 1e9);
    if (atomic_load(&obs->etcd_registered) >= 0) {
        family(r, "kvpack_etcd_registered", "gauge",
               "1 while this node's key and lease are alive in etcd (--etcd)");
        kvp_http_reply_printf(r, "kvpack_etcd_registered %d\n",
                              atomic_load(&obs->etcd_registered));
    }
}

/* What the node process sent to storage (/proc/self/io write_bytes: segment files, RocksDB's WAL,
 * flushes and compactions, everything else) and that over the logical bytes: the write
 * amplification an SSD sees. Left out where the kernel does not account task I/O. */
static void process_writes(kvp_http_reply_t *r, uint64_t logical)
{
    int64_t wb = kvp_proc_write_bytes();

    if (wb < 0) {
        return;
    }
    family(r, "kvpack_process_disk_write_bytes_total", "counter",
           "Bytes the node process sent to storage (/proc/self/io write_bytes: segment files, "
           "RocksDB WAL, flushes and compactions)");
    kvp_http_reply_printf(r, "kvpack_process_disk_write_bytes_total %lld\n", (long long)wb);
    if (logical > 0) {
        family(r, "kvpack_write_amplification", "gauge",
               "kvpack_process_disk_write_bytes_total over kvpack_disk_logical_bytes_total");
        kvp_http_reply_printf(r, "kvpack_write_amplification %.4f\n", (double)wb / (double)logical);
    }
}

static void store_samples(kvp_node_obs_t *obs, kvp_http_reply_t *r)
{
    kvp_store_stats_t st;
    int               open;

    memset(&st, 0, sizeof(st));
    pthread_mutex_lock(&obs->store_mu);
    open = obs->store != NULL;
    if (open) {
        kvp_store_stats(obs->store, &st);
    }
    pthread_mutex_unlock(&obs->store_mu);
    for (size_t i = 0; open && i < sizeof(store_families) / sizeof(store_families[0]); i++) {
        uint64_t v;

        memcpy(&v, (const char *)&st + store_families[i].off, sizeof(v));
        if ((store_families[i].disk && !st.disk_tier) || v == UINT64_MAX) {
            continue;
        }
        family(r, store_families[i].name, store_families[i].type, store_families[i].help);
        kvp_http_reply_printf(r, "%s %llu\n", store_families[i].name, (unsigned long long)v);
    }
    if (open) {
        process_writes(r, st.disk_logical_bytes);
        family(r, "kvpack_spill_duration_seconds", "histogram",
               "Time to spill one session to disk, its write and fdatasync included");
        hist_series(r, "kvpack_spill_duration_seconds", "", st.spill_hist, st.spill_ns);
        family(r, "kvpack_restore_duration_seconds", "histogram",
               "Time to restore one session from disk into DRAM, its reads included");
        hist_series(r, "kvpack_restore_duration_seconds", "", st.restore_hist, st.restore_ns);
    }
}

/* kvpack_request_duration_seconds by op; _sum from busy, the scrape's busy_ns snapshot, so it
 * equals kvpack_request_handling_seconds_total. */
static void duration_family(kvp_http_reply_t *r, const uint64_t *busy,
                            uint64_t (*hists)[KVP_HIST_BUCKETS + 1])
{
    family(r, "kvpack_request_duration_seconds", "histogram",
           "Time a worker spent handling one request (its handler, not the wait), by op");
    for (uint32_t op = 0; op < KVP_NODE_OBS_OPS; op++) {
        char label[48];

        snprintf(label, sizeof(label), "op=\"%s\"", op_label(op));
        hist_series(r, "kvpack_request_duration_seconds", label, hists[op], busy[op]);
    }
}

static void request_families(kvp_node_obs_t *obs, kvp_http_reply_t *r)
{
    char     res[32];
    uint64_t busy[KVP_NODE_OBS_OPS];
    uint64_t hists[KVP_NODE_OBS_OPS][KVP_HIST_BUCKETS + 1];

    /* the histograms before answered[]: a request's answered[] is bumped before its histogram
     * (release there, acquire here), so _count may trail requests_total but never lead it */
    for (uint32_t op = 0; op < KVP_NODE_OBS_OPS; op++) {
        for (uint32_t b = 0; b <= KVP_HIST_BUCKETS; b++) {
            hists[op][b] = atomic_load_explicit(&obs->busy_hist[op][b], memory_order_acquire);
        }
        busy[op] = load(&obs->busy_ns[op]); /* after the buckets: added before them, so _sum
                                             * covers every request _count does */
    }

    family(r, "kvpack_requests_total", "counter",
           "Requests answered, by op and result (ok or the error status)");
    for (uint32_t op = 0; op < KVP_NODE_OBS_OPS; op++) {
        for (uint32_t k = 0; k < KVP_NODE_OBS_RESULTS; k++) {
            uint64_t v = load(&obs->answered[op][k]);

            if (v == 0 && (k != 0 || op == 0)) {
                continue; /* every known op's ok series always; errors once they happen */
            }
            result_label(k, res, sizeof(res));
            kvp_http_reply_printf(r, "kvpack_requests_total{op=\"%s\",result=\"%s\"} %llu\n",
                                  op_label(op), res, (unsigned long long)v);
        }
    }
    family(r, "kvpack_request_bytes_total", "counter", "Request bytes received (header + data)");
    for (uint32_t op = 0; op < KVP_NODE_OBS_OPS; op++) {
        kvp_http_reply_printf(r, "kvpack_request_bytes_total{op=\"%s\"} %llu\n", op_label(op),
                              (unsigned long long)load(&obs->req_bytes[op]));
    }
    family(r, "kvpack_reply_bytes_total", "counter", "Reply bytes sent (header + data)");
    for (uint32_t op = 0; op < KVP_NODE_OBS_OPS; op++) {
        kvp_http_reply_printf(r, "kvpack_reply_bytes_total{op=\"%s\"} %llu\n", op_label(op),
                              (unsigned long long)load(&obs->rep_bytes[op]));
    }
    family(r, "kvpack_request_handling_seconds_total", "counter",
           "Time the workers spent handling requests, by op");
    for (uint32_t op = 0; op < KVP_NODE_OBS_OPS; op++) {
        kvp_http_reply_printf(r, "kvpack_request_handling_seconds_total{op=\"%s\"} %.9f\n",
                              op_label(op), (double)busy[op] / 1e9);
    }
    duration_family(r, busy, hists);
    family(r, "kvpack_reply_waits_total", "counter",
           "Requests held back because their connection had 64 MiB of replies not taken yet");
    kvp_http_reply_printf(r, "kvpack_reply_waits_total %llu\n",
                          (unsigned long long)load(&obs->reply_waits));
    family(r, "kvpack_connections", "gauge", "Client connections open");
    kvp_http_reply_printf(r, "kvpack_connections %llu\n", (unsigned long long)load(&obs->conns));
    family(r, "kvpack_connections_max", "gauge",
           "Client connections held at most (--max-conns; 0: no limit)");
    kvp_http_reply_printf(r, "kvpack_connections_max %llu\n",
                          (unsigned long long)load(&obs->max_conns));
    family(r, "kvpack_connections_rejected_total", "counter",
           "Connection requests rejected at --max-conns");
    kvp_http_reply_printf(r, "kvpack_connections_rejected_total %llu\n",
                          (unsigned long long)load(&obs->conns_rejected));
}

/* ---- API ---- */

void kvp_node_obs_init(kvp_node_obs_t *obs)
{
    memset(obs, 0, sizeof(*obs));
    atomic_init(&obs->state, KVP_NODE_STARTING);
    atomic_init(&obs->etcd_registered, -1);
    obs->start_ns = kvp_time_ns();
    pthread_mutex_init(&obs->store_mu, NULL);
}

void kvp_node_obs_cleanup(kvp_node_obs_t *obs)
{
    pthread_mutex_destroy(&obs->store_mu);
}

void kvp_node_obs_parked(kvp_node_obs_t *obs)
{
    atomic_fetch_add_explicit(&obs->reply_waits, 1, memory_order_relaxed);
}

void kvp_node_obs_conns(kvp_node_obs_t *obs, uint64_t open, uint64_t rejected)
{
    atomic_store_explicit(&obs->conns, open, memory_order_relaxed);
    atomic_store_explicit(&obs->conns_rejected, rejected, memory_order_relaxed);
}

void kvp_node_obs_set_state(kvp_node_obs_t *obs, kvp_node_state_t state)
{
    if (state == KVP_NODE_SERVING) {
        kvp_node_obs_loop(obs);
    }
    atomic_store(&obs->state, (int)state);
}

void kvp_node_obs_loop(kvp_node_obs_t *obs)
{
    atomic_store_explicit(&obs->loop_ns, kvp_time_ns(), memory_order_relaxed);
}

void kvp_node_obs_set_store(kvp_node_obs_t *obs, kvp_store_h store)
{
    pthread_mutex_lock(&obs->store_mu);
    obs->store = store;
    pthread_mutex_unlock(&obs->store_mu);
}

void kvp_node_obs_request(kvp_node_obs_t *obs, uint32_t op, uint64_t bytes, uint64_t busy_ns)
{
    uint32_t b = kvp_hist_bucket(busy_ns);

    op = (op < KVP_NODE_OBS_OPS) ? op : 0;
    atomic_fetch_add_explicit(&obs->req_bytes[op], bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&obs->busy_ns[op], busy_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&obs->busy_hist[op][b], 1, memory_order_release); /* after answered */
}

void kvp_node_obs_reply(kvp_node_obs_t *obs, uint32_t op, kvp_status_t status, uint64_t bytes)
{
    uint32_t slot = (status <= 0 && status > -100) ? (uint32_t)(-(int)status) : 100u;

    if (slot < 100 && strcmp(kvp_status_name(status), "UNKNOWN") == 0) {
        slot = 100u; /* "other": two unnamed statuses would print one label set twice, and
                      * Prometheus refuses a scrape with a repeated series */
    }
    op = (op < KVP_NODE_OBS_OPS) ? op : 0;
    atomic_fetch_add_explicit(&obs->answered[op][slot], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&obs->rep_bytes[op], bytes, memory_order_relaxed);
}

void kvp_node_obs_route(void *arg, const char *path, kvp_http_reply_t *r)
{
    kvp_node_obs_t *obs   = arg;
    int             state = atomic_load(&obs->state);
    uint64_t        now = kvp_time_ns(), last = load(&obs->loop_ns);
    uint64_t        ago_ms = (state == KVP_NODE_SERVING && now > last) ? (now - last) / 1000000u
                                                                       : 0;
    int             ok     = state == KVP_NODE_SERVING && ago_ms <= KVP_NODE_STALL_MS;

    if (strcmp(path, "/health") == 0) {
        r->code = ok ? 200 : 503;
        if (state == KVP_NODE_SERVING && !ok) {
            kvp_http_reply_printf(r, "stalled: main loop last ran %llu ms ago\n",
                                  (unsigned long long)ago_ms);
        } else {
            kvp_http_reply_printf(r, "%s\n", ok                           ? "ok"
                                             : state == KVP_NODE_STARTING ? "starting"
                                                                          : "shutting down");
        }
    } else if (strcmp(path, "/metrics") == 0) {
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
        node_families(obs, r, ok);
        store_samples(obs, r);
        request_families(obs, r);
    } else {
        r->code = 404;
        kvp_http_reply_printf(r, "not found: try /health or /metrics\n");
    }
}
