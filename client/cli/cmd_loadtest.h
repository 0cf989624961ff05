/* cmd_loadtest.h - the pieces of `kvpack loadtest`: the workload (a Mooncake-format JSONL trace
 * or users x rounds of synthetic multi-turn sessions, cmd_loadtest_trace.c), the replay engine
 * against a real kvpackd (cmd_loadtest_run.c) and the report (JSON, text, SVG/HTML chart,
 * cmd_loadtest_report.c). cmd_loadtest.c parses options, starts the node and ties them together. */
#ifndef KVPACK_CLI_LOADTEST_H
#define KVPACK_CLI_LOADTEST_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvpack/cluster.h"
#include "kvpack/kvpack.h"

#define KVP_LT_BLOCK_TOKENS 512u /* tokens per trace hash id (Mooncake block size) */
#define KVP_LT_MAX_WINDOWS  64u
#define KVP_LT_MAX_CLIENTS  64u /* --clients: concurrent client threads, one kvp_client each */
#define KVP_LT_MAX_NODES    KVP_CLUSTER_MAX_NODES /* --node A,B,C / --etcd / --local-nodes */
#define KVP_LT_ADDR_MAX     264u                  /* HOST:PORT and the NUL */

/* Counts SIGINT/SIGTERM during a replay: at the first the clients stop between requests, and the
 * command cleans up (the sessions it put on existing nodes, its local nodes and their data
 * directories) and exits 130; one more during the delete of the sessions stops that too. */
extern volatile sig_atomic_t kvp_lt_interrupted;

/* A 64-bit mixer (splitmix64 finalizer): token ids, KV slab picks and prefix hashes. */
uint64_t kvp_lt_mix64(uint64_t z);
/* The hash of a request's block ids up to block b from the hash up to b - 1 (prev; ignored for
 * b 0): the identity of the tokens of every block up to b, which a chunk's key chains over. */
uint64_t kvp_lt_prefix_next(uint64_t prev, uint32_t b, uint64_t id);

/* One request of the workload: a prompt of input_len tokens made of 512-token blocks ids[]. */
typedef struct {
    double    ts_ms;          /* arrival time from the trace (0 for synthetic) */
    uint32_t  input_len;      /* prompt tokens */
    uint32_t  n_ids;          /* = ceil(input_len / 512) */
    uint64_t *ids;            /* block ids; equal ids at equal positions = the same tokens */
    uint32_t  line;           /* trace line (1-based), 0 for synthetic */
    uint32_t  session;        /* session this request's record is put under ("lt-<n>") */
    int64_t   resume;         /* session fetched first (previous turn), -1 for none */
    uint32_t  window;         /* report window (10 by request index, or the round) */
    uint32_t  ref_hit_blocks; /* blocks whose id prefix was seen before (unbounded cache) */
} kvp_lt_req_t;

typedef struct {
    kvp_lt_req_t *reqs;
    uint32_t      n;
    uint32_t      n_sessions;
    uint32_t      n_windows;
    bool          synthetic;
    uint64_t      users, rounds, turn_tokens; /* synthetic only */
} kvp_lt_workload_t;

/* Read the first max (0 = all) requests of a JSONL trace. A line that cannot be read is an error
 * naming the file and line on stderr; returns 0 or -1. */
int  kvp_lt_trace_load(const char *cmd, const char *path, uint32_t max, uint32_t windows,
                       kvp_lt_workload_t *w);
/* users x rounds requests, round-major; user u's prompt in round r is (r+1)*turn tokens. */
int  kvp_lt_synthetic_make(uint64_t users, uint64_t rounds, uint64_t turn_tokens,
                           kvp_lt_workload_t *w);
void kvp_lt_workload_free(kvp_lt_workload_t *w);
/* The hit-ratio reference of a placement: replay w's requests in order against one unbounded
 * chunk cache per node; request i looks up on its session's primary[] node (a block hits when it
 * has sealed P-token chunks and all were found, as the replay counts) and its sealed chunks then
 * go to every node in its session's holders[] mask. hits[i] gets request i's block hits. With
 * one node (primary 0, holders 1) it is what one big never-evicting node would hit. 0 or -1. */
int  kvp_lt_reference(const kvp_lt_workload_t *w, uint32_t page_tokens, const uint8_t *primary,
                      const uint64_t *holders, uint32_t *hits);

/* Geometry and pacing of a replay. */
typedef struct {
    uint64_t       salt;       /* this run's: in the namespace's model id, so an earlier run's
                                * pages (same node, same workload) are never this run's hits */
    kvp_codec_id_t codec;
    uint32_t       layers, heads, head_dim, page_tokens;
    double         time_scale; /* 0: closed loop; S: trace time / S */
    uint32_t       clients;    /* concurrent clients, 1..KVP_LT_MAX_CLIENTS */
    uint32_t       replicas;   /* r: nodes each session is put on (first r live of its rank) */
    const char    *etcd;       /* the members from etcd, followed by a watch (else the peers) */
    bool           delete_sessions; /* existing nodes, no --keep-sessions: the run's sessions are
                                     * deleted from the nodes when it ends (kvp_lt_run) */
} kvp_lt_params_t;

/* Per-request measurements (latencies in ms; NaN where the step did not run). */
typedef struct {
    uint32_t blocks, hit_blocks, chunks, hit_chunks, pages_put;
    double   lookup_ms, put_ms, get_ms, resume_ms;
    bool     done;  /* the request completed (a failed or interrupted run reports only these) */
} kvp_lt_sample_t;

/* One node's part of a request: its lookup's hit chunks and what was put to it. */
typedef struct {
    uint32_t hit_chunks, pages;
    uint64_t bytes, bytes_fp16;
} kvp_lt_part_t;

typedef struct {
    uint32_t        first, end;       /* requests [first, end) */
    kvp_node_stat_t stat_end;         /* node statistics when the window ended */
} kvp_lt_window_t;

/* One node of a multi-node run. */
typedef struct {
    char            addr[KVP_LT_ADDR_MAX]; /* HOST:PORT */
    kvp_node_stat_t stat_end;          /* at the end of the run, when stat_ok */
    bool            stat_ok;
    uint32_t        failures;          /* calls that found it unreachable (then skipped) */
    uint32_t        expected_sessions; /* sessions whose rank puts it among the first r */
} kvp_lt_node_t;

typedef struct {
    uint64_t          ns;
    kvp_lt_sample_t  *samples;        /* one per request */
    uint32_t          done;           /* requests completed, all clients */
    uint32_t          client_requests[KVP_LT_MAX_CLIENTS]; /* requests assigned to each client */
    uint32_t          resumes;
    uint32_t          resumes_lost;   /* several nodes: no node that held the previous turn was
                                       * reachable (then the request goes on without it) */
    uint32_t          fetches_lost;   /* several nodes: the get right after the request's put
                                       * found none of the nodes it went to (they died between);
                                       * the request goes on, its session counted as put */
    uint64_t          bytes_put, bytes_put_fp16, bytes_fetched, bytes_fetched_fp16;
    uint64_t          bytes_resumed;
    double            encode_s, wall_s, behind_max_ms; /* encode_s: summed over clients */
    kvp_node_stat_t   stat_begin, stat_end; /* stat_end: when the last window taken ended */
    kvp_lt_window_t   windows[KVP_LT_MAX_WINDOWS];
    uint32_t          windows_done;        /* windows whose stat_end was taken (all when ok) */
    bool              ran;                 /* the clients started: there is something to report */
    bool              ok;                  /* every request done, no failure, not interrupted */
    /* several nodes (n_nodes > 1): stat_* and windows are summed over every node seen, one
     * that stopped answering (or left etcd) with its last statistics */
    uint32_t          n_nodes;             /* the members at the end, then nodes that left
                                            * during the run with failures (stat_ok false) */
    kvp_lt_node_t     nodes[KVP_LT_MAX_NODES];
    uint64_t          membership_changes;  /* --etcd: changes the first client's watch saw */
    uint64_t          ref_single, ref_placed; /* kvp_lt_reference block hits: one node, placed */
    /* the run's sessions: put (a put was sent for them), then with params.delete_sessions:
     * deleted from the nodes, absent (no node held one: its put failed) and left (a node a put of
     * it was sent to did not delete it, or the delete was stopped) */
    uint32_t          sessions_put, sessions_deleted, sessions_absent, sessions_left;
    uint32_t          departed_nodes;       /* took puts, no member at the end (left etcd) */
    uint32_t          departed_deleted;     /* copies deleted on those directly */
    uint32_t          departed_unreachable; /* of those, not reached: their copies stay */
} kvp_lt_result_t;

/* Block hits of request r whose lookup found its first hit P-token chunks: a block hits when it
 * has sealed chunks and all of them were found (the replay's rule, and the references'). */
uint32_t kvp_lt_block_hits(const kvp_lt_req_t *r, uint32_t page_tokens, uint32_t hit);
/* A node took request r (its put was acked): its part counts in the request's sample s and in
 * res's bytes. The first node to take it (first) gives the request's hits; a node that failed
 * after its lookup is never passed here, so hits come from one node and pages only from puts
 * that were acked. */
void kvp_lt_took(kvp_lt_sample_t *s, kvp_lt_result_t *res, const kvp_lt_req_t *r,
                 uint32_t page_tokens, bool first, const kvp_lt_part_t *part);

/* Replay w against the nodes in peers ("host:port[,...]"), or p->etcd's members (each handle
 * follows them: a node that joins takes its share of new sessions), on p->clients threads, each
 * with its own kvp_cluster handle; all turns of one conversation (a chain of resumes) go to one client, in
 * order. Each request goes to the first p->replicas live nodes of its session's rank (lookup,
 * missing pages, record on each); get and resume from the first in rank that has it. With several
 * nodes, a node found unreachable is counted in res->nodes[].failures and skipped by that client
 * for the rest of the run, and a resume that finds no reachable node holding the previous turn
 * is counted in res->resumes_lost (the request goes on), as is in res->fetches_lost the get
 * after a put whose every node died in between. The first other failure (or a request
 * no node took) stops every client and is reported once, naming the request; res->done says how
 * many requests completed. Then,
 * with p->delete_sessions, the sessions it put are deleted from the nodes, also after a failure
 * or an interrupt (res->sessions_*; a progress line and a one-line summary on stderr).
 * Returns 0 or -1. */
int  kvp_lt_run(const char *peers, uint32_t timeout_ms, const kvp_lt_params_t *p,
                const kvp_lt_workload_t *w, kvp_lt_result_t *res);
void kvp_lt_result_free(kvp_lt_result_t *res);

/* Report context: what the run was (echoed in the report). */
typedef struct {
    const char            *source;   /* trace path or "synthetic" */
    const char            *node;     /* host:port */
    bool                   local_node;
    uint64_t               dram_budget;
    uint64_t               node_workers; /* local nodes: their --workers */
    const kvp_lt_params_t *params;
} kvp_lt_info_t;

void kvp_lt_report_json(const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                        const kvp_lt_result_t *res);
void kvp_lt_report_text(const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                        const kvp_lt_result_t *res);
/* Chart of hit ratio and get latency per window: .svg, or .html with the SVG inline. 0 or -1. */
int  kvp_lt_report_chart(const char *path, const kvp_lt_info_t *info, const kvp_lt_workload_t *w,
                         const kvp_lt_result_t *res);

#endif
