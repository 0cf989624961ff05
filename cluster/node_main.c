/* node_main.c - the node command line shared by kvpackd and `kvpack serve`: options (including
 * --http for /health and /metrics, --etcd registration), the open files limit raised to its hard
 * limit, signal handling for a clean shutdown on SIGTERM/SIGINT/SIGHUP, then kvp_node_run. */
#include "kvpack/node.h"
#include "kvpack/log.h"
#include "kvpack/num.h"
#include "kvpack/page.h"
#include "kvpack/version.h"
#include "kvpack/wire.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "kvpack/xfer.h"

#define MOD "node"

static volatile sig_atomic_t node_stop;

/* --max-msg at most: the receive budget is 4x it (a value near 2^62 wrapped it to 0, and every
 * large request then waited forever) */
#define MAX_MSG_LIMIT ((size_t)16 << 30)

static void on_signal(int sig)
{
    (void)sig;
    node_stop = 1;
}

/* Raise the soft RLIMIT_NOFILE to the hard limit: every client connection costs about 2 file
 * descriptors, and the store's segment and RocksDB files share the budget, so a soft limit of
 * 1024 (a common default) would refuse clients past about 450 while the hard limit allows more.
 * Nothing in the node uses select(), so descriptors past 1024 are fine. */
static void nofile_raise(void)
{
    struct rlimit rl;
    rlim_t        was;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        KVP_LOG_WARN(MOD, "cannot read the open files limit: %m");
        return;
    }
    was = rl.rlim_cur;
    if (rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            KVP_LOG_WARN(MOD, "cannot raise the open files limit from %llu to %llu: %m",
                         (unsigned long long)was, (unsigned long long)rl.rlim_max);
            return;
        }
    }
    KVP_LOG_INFO(MOD, "open files limit %llu (was %llu; about 2 per client connection)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)was);
}

static void usage(const char *prog, FILE *out)
{
    fprintf(out,
            "usage: %s [options]\n"
            "Serve one kvpack store (DRAM pool + RocksDB directory) over UCX.\n\n"
            "  --listen HOST:PORT      address to listen on (port 0 picks a free port and prints it;\n"
            "                          default 127.0.0.1:0)\n"
            "  --data-dir DIR          RocksDB directory for the SSD tier (default: DRAM only);\n"
            "                          a damaged RocksDB file found at start (or later) is\n"
            "                          repaired or the index rebuilt from what reads (logged;\n"
            "                          kvpack stat and /metrics count it)\n"
            "  --dram-budget BYTES     DRAM page budget, suffixes K M G allowed (default 1G)\n"
            "  --durability MODE       spill | write-through | sync | interval (default spill):\n"
            "                          spill writes sessions to disk when DRAM runs short and\n"
            "                          on SIGTERM/SIGHUP (a kill loses what is only in DRAM);\n"
            "                          write-through acks before an fsync (a power loss may lose\n"
            "                          any acked put), sync fsyncs before each ack, interval\n"
            "                          writes through and fsyncs every --sync-ms when anything\n"
            "                          was written (loses at most that window)\n"
            "  --sync-ms N             interval: ms between syncs, 1..60000 (default 100)\n"
            "  --ready-file FILE       write the bound port to FILE once listening\n"
            "  --http HOST:PORT        serve GET /health and /metrics (Prometheus text) over\n"
            "                          HTTP on HOST:PORT (port 0 picks a free port; default off)\n"
            "  --http-ready-file FILE  write the bound HTTP port to FILE once listening\n"
            "  --etcd URL[,URL]        register in etcd (v3 HTTP gateway, e.g. http://127.0.0.1:2379)\n"
            "                          once listening: key PREFIX<advertise> under a lease kept\n"
            "                          alive every TTL/3, revoked on SIGTERM; a hung etcd holds up a\n"
            "                          start at most 3 s per endpoint and a stop about 3 s in all;\n"
            "                          unreachable, or the key held by another process: exit 1\n"
            "  --etcd-prefix P         key prefix (default /kvpack/nodes/)\n"
            "  --etcd-ttl S            lease TTL in seconds, 2..3600 (default 10)\n"
            "  --advertise HOST:PORT   address registered in etcd (default: the listen host and\n"
            "                          the bound port; required when listening on 0.0.0.0)\n"
            "  --tombstone-ttl S       keep delete tombstones S seconds (default 604800, 7 days):\n"
            "                          a replica back from an outage longer than that may bring\n"
            "                          a deleted session back; each takes ~100 B + its id's\n"
            "                          length of DRAM, outside --dram-budget\n"
            "  --put-grace S           keep a page put without a session record for S seconds\n"
            "                          after the last record naming it goes (deleted or\n"
            "                          replaced), so the record its own client sends next still\n"
            "                          finds it (shared prefixes; 0..86400, default 60)\n"
            "  --idle-ttl S            remove a session nobody put or fetched on this node for S\n"
            "                          seconds, from DRAM and disk (default 0: never)\n"
            "  --compact-ratio F       empty and remove a segment file once this fraction of it\n"
            "                          is dead (deleted or rewritten pages), 0..1, 0 = never\n"
            "                          (default 0.5; checked every 2 s)\n"
            "  --segment-mib N         size of the SSD tier's segment files, 1..16384 (default 256)\n"
            "  --scrub-mib-s N         read every page on disk back and check it, N MiB a second,\n"
            "                          over and over, then the index; a bad one is dropped and its\n"
            "                          sessions listed damaged for kvpack repair (0..4096, 0 =\n"
            "                          off; default 4; kvpack scrub runs one pass at once)\n"
            "  --disk-reserve-mib N    keep N MiB of the data dir's filesystem free: a put or\n"
            "                          spill that would leave less gets ERR_NO_SPACE (deletes\n"
            "                          do not), and a file of N MiB (kvpack.reserve) is held and\n"
            "                          removed when the disk fills anyway, so deletes have room\n"
            "                          (0 = off; default 4x the index memtable: DRAM budget / 2,\n"
            "                          16..256)\n"
            "  --max-msg BYTES         largest request accepted, up to 16G (default 256M); request\n"
            "                          data takes 4x that (at least 64K) of memory at once at most (being\n"
            "                          received, or queued behind its connection's earlier\n"
            "                          requests; each in a buffer of the next power of two): a\n"
            "                          request past that waits for room, it is not refused\n"
            "  --recv-timeout S        a request whose data has not all arrived S seconds after\n"
            "                          its receive began (plus 1 s per 10 MB; a wait for room\n"
            "                          does not count) closes its connection, so a stalled\n"
            "                          client cannot hold the receive budget (4x --max-msg)\n"
            "                          from the others (1..3600, default 30)\n"
            "  --send-timeout S        a client that takes none of its replies for S seconds\n"
            "                          (plus 1 s per 10 MB of all its replies waiting; each taken\n"
            "                          restarts the clock) is taken for hung: its connection is\n"
            "                          closed, so it cannot keep the pages it asked for pinned\n"
            "                          in DRAM (1..3600, default 30)\n"
            "  --max-conns N           client connections held at once; a connect past it is\n"
            "                          refused at once (its client sees the node unreachable and\n"
            "                          tries a replica), so clients cannot run the node out of\n"
            "                          file descriptors (0 = no limit; default from the open\n"
            "                          files limit L: (L - min(max(L/4, 256), 65536) - 384) / 2,\n"
            "                          192 for 1024; kvpack_connections* in /metrics)\n"
            "  --workers N             request worker threads, 1..64 (default 4): a request that\n"
            "                          waits on the disk holds up only its own connection (which\n"
            "                          holds at most 256 requests: more get ERR_BUSY at once;\n"
            "                          one that also leaves 130 MiB of replies untaken is closed)\n"
            "  --log-level LEVEL       error | warn | info | debug | trace (default warn)\n"
            "  --version               print the version and exit\n"
            "  -h, --help              this text\n",
            prog);
}

/* A number (kvp_num_parse_u64) in lo..hi into *out; -1 if it is not one. */
static int parse_u32(const char *s, uint64_t lo, uint64_t hi, uint32_t *out)
{
    uint64_t x;

    if (kvp_num_parse_u64(s, &x) != 0 || x < lo || x > hi) {
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

/* A byte count, 1 or more ("256M", "4GiB"), into *out; -1 if it is not one. */
static int parse_bytes(const char *s, size_t *out)
{
    uint64_t v;

    if (kvp_num_parse_u64(s, &v) != 0 || v == 0 || v > SIZE_MAX) {
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

/* "--name value" or "--name=value"; returns the value or NULL when argv[*i] is not --name. */
static const char *opt(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);

    if (strncmp(argv[*i], name, n) != 0) {
        return NULL;
    }
    if (argv[*i][n] == '=') {
        return argv[*i] + n + 1;
    }
    if (argv[*i][n] != '\0') {
        return NULL;
    }
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int kvp_node_main(const char *prog, int argc, char **argv)
{
    static const char *const levels[] = {"error", "warn", "info", "debug", "trace"};
    kvp_node_params_t        p;
    struct sigaction         sa;
    struct stat              st;
    char                     host[256] = "127.0.0.1", http_host[256], adv_host[256];
    uint16_t                 adv_port;
    const char              *v;
    int                      missing = 0;

    memset(&p, 0, sizeof(p));
    p.field_mask = KVP_NODE_PARAM_HOST | KVP_NODE_PARAM_PORT;
    p.host       = host;
    for (int i = 1; i < argc; i++) {
        const struct { const char *name; uint64_t lo, hi, bit; const char *want; uint32_t *val; }
            nums[] = {
                {"--etcd-ttl", 2, 3600, 0, "seconds in 2..3600", &p.etcd_ttl_s},
                {"--tombstone-ttl", 1, UINT32_MAX, KVP_NODE_PARAM_TOMB_TTL, "seconds >= 1",
                 &p.tomb_ttl_s},
                {"--idle-ttl", 0, UINT32_MAX, KVP_NODE_PARAM_IDLE_TTL, "seconds (0: never)",
                 &p.idle_ttl_s},
                {"--sync-ms", 1, 60000, KVP_NODE_PARAM_SYNC_INTERVAL, "1..60000 ms",
                 &p.sync_interval_ms},
                {"--workers", 1, 64, KVP_NODE_PARAM_WORKERS, "1..64 threads", &p.workers},
                {"--segment-mib", 1, 16384, KVP_NODE_PARAM_SEGMENT_MIB, "1..16384 MiB",
                 &p.segment_mib},
                {"--scrub-mib-s", 0, 4096, KVP_NODE_PARAM_SCRUB_MIB, "0..4096 MiB/s (0: off)",
                 &p.scrub_mib_s},
                {"--disk-reserve-mib", 0, 1u << 20, KVP_NODE_PARAM_DISK_RESERVE, "0..1048576 MiB",
                 &p.disk_reserve_mib},
                {"--put-grace", 0, 86400, KVP_NODE_PARAM_PUT_GRACE, "0..86400 seconds",
                 &p.put_grace_s},
                {"--recv-timeout", 1, 3600, KVP_NODE_PARAM_RECV_TIMEOUT, "1..3600 seconds",
                 &p.recv_timeout_s},
                {"--send-timeout", 1, 3600, KVP_NODE_PARAM_SEND_TIMEOUT, "1..3600 seconds",
                 &p.send_timeout_s},
                {"--max-conns", 0, 1u << 24, KVP_NODE_PARAM_MAX_CONNS,
                 "0..16777216 connections (0: no limit)", &p.max_conns}};
        size_t k = 0;

        while (k < sizeof(nums) / sizeof(nums[0]) &&
               (v = opt(argc, argv, &i, nums[k].name, &missing)) == NULL) {
            k++;
        }
        if (k < sizeof(nums) / sizeof(nums[0])) {
            if (parse_u32(v, nums[k].lo, nums[k].hi, nums[k].val) != 0) {
                fprintf(stderr, "%s: %s wants %s, got '%s'\n", prog, nums[k].name, nums[k].want, v);
                return 2;
            }
            p.field_mask |= nums[k].bit;
            continue;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(prog, stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("%s %s (page format v%u, wire v%u)\n", prog, kvp_version(), KVP_PAGE_VERSION,
                   KVP_WIRE_VERSION);
            return 0;
        } else if ((v = opt(argc, argv, &i, "--listen", &missing)) != NULL) {
            if (kvp_xfer_parse_addr(v, host, sizeof(host), &p.port) != KVP_OK) {
                fprintf(stderr, "%s: --listen wants HOST:PORT, got '%s'\n", prog, v);
                return 2;
            }
        } else if ((v = opt(argc, argv, &i, "--http", &missing)) != NULL) {
            p.field_mask |= KVP_NODE_PARAM_HTTP;
            p.http_host   = http_host;
            if (kvp_xfer_parse_addr(v, http_host, sizeof(http_host), &p.http_port) != KVP_OK) {
                fprintf(stderr, "%s: --http wants HOST:PORT, got '%s'\n", prog, v);
                return 2;
            }
        } else if ((v = opt(argc, argv, &i, "--http-ready-file", &missing)) != NULL) {
            p.field_mask     |= KVP_NODE_PARAM_HTTP_READY_FILE;
            p.http_ready_file = v;
        } else if ((v = opt(argc, argv, &i, "--etcd", &missing)) != NULL) {
            p.field_mask |= KVP_NODE_PARAM_ETCD;
            p.etcd        = v;
        } else if ((v = opt(argc, argv, &i, "--etcd-prefix", &missing)) != NULL) {
            p.etcd_prefix = v;
        } else if ((v = opt(argc, argv, &i, "--advertise", &missing)) != NULL) {
            if (kvp_xfer_parse_addr(v, adv_host, sizeof(adv_host), &adv_port) != KVP_OK ||
                adv_port == 0) {
                fprintf(stderr, "%s: --advertise wants HOST:PORT, got '%s'\n", prog, v);
                return 2;
            }
            p.advertise = v;
        } else if ((v = opt(argc, argv, &i, "--data-dir", &missing)) != NULL) {
            p.field_mask |= KVP_NODE_PARAM_DATA_DIR;
            p.data_dir    = v;
        } else if ((v = opt(argc, argv, &i, "--dram-budget", &missing)) != NULL) {
            p.field_mask |= KVP_NODE_PARAM_DRAM_BUDGET;
            if (parse_bytes(v, &p.dram_budget) != 0) {
                fprintf(stderr, "%s: --dram-budget wants bytes >= 1, suffixes K M G allowed "
                        "(e.g. 512M), got '%s'\n", prog, v);
                return 2;
            }
        } else if ((v = opt(argc, argv, &i, "--max-msg", &missing)) != NULL) {
            p.field_mask |= KVP_NODE_PARAM_MAX_MSG;
            if (parse_bytes(v, &p.max_msg_bytes) != 0 || p.max_msg_bytes > MAX_MSG_LIMIT) {
                fprintf(stderr, "%s: --max-msg wants 1 byte to 16G, got '%s'\n", prog, v);
                return 2;
            }
        } else if ((v = opt(argc, argv, &i, "--durability", &missing)) != NULL) {
            p.field_mask |= KVP_NODE_PARAM_DURABILITY;
            if (strcmp(v, "spill") == 0) {
                p.durability = KVP_DURABILITY_SPILL;
            } else if (strcmp(v, "write-through") == 0) {
                p.durability = KVP_DURABILITY_WRITE_THROUGH;
            } else if (strcmp(v, "sync") == 0) {
                p.durability = KVP_DURABILITY_SYNC;
            } else if (strcmp(v, "interval") == 0) {
                p.durability = KVP_DURABILITY_INTERVAL;
            } else {
                fprintf(stderr,
                        "%s: --durability wants spill|write-through|sync|interval, got '%s'\n",
                        prog, v);
                return 2;
            }
        } else if ((v = opt(argc, argv, &i, "--compact-ratio", &missing)) != NULL) {
            char *end;

            p.field_mask        |= KVP_NODE_PARAM_COMPACT;
            p.compact_dead_ratio = strtod(v, &end);
            if (end == v || *end != '\0' || !(p.compact_dead_ratio >= 0.0 &&
                                               p.compact_dead_ratio <= 1.0)) {
                fprintf(stderr, "%s: --compact-ratio wants a fraction in 0..1, got '%s'\n", prog, v);
                return 2;
            }
        } else if ((v = opt(argc, argv, &i, "--ready-file", &missing)) != NULL) {
            p.field_mask |= KVP_NODE_PARAM_READY_FILE;
            p.ready_file  = v;
        } else if ((v = opt(argc, argv, &i, "--log-level", &missing)) != NULL) {
            int lvl = -1;

            for (int k = 0; k < 5; k++) {
                if (strcmp(v, levels[k]) == 0) {
                    lvl = k;
                }
            }
            if (lvl < 0) {
                fprintf(stderr, "%s: --log-level wants error|warn|info|debug|trace, got '%s'\n",
                        prog, v);
                return 2;
            }
            kvp_log_set_level((kvp_log_level_t)lvl);
        } else {
            if (missing) {
                fprintf(stderr, "%s: option %s needs a value\n", prog, argv[i]);
            } else {
                fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", prog, argv[i], prog);
            }
            return 2;
        }
    }
    if ((p.field_mask & KVP_NODE_PARAM_SYNC_INTERVAL) &&
        !((p.field_mask & KVP_NODE_PARAM_DURABILITY) && p.durability == KVP_DURABILITY_INTERVAL)) {
        fprintf(stderr, "%s: --sync-ms needs --durability interval\n", prog);
        return 2;
    }
    if ((p.field_mask & KVP_NODE_PARAM_HTTP_READY_FILE) && !(p.field_mask & KVP_NODE_PARAM_HTTP)) {
        fprintf(stderr, "%s: --http-ready-file needs --http HOST:PORT\n", prog);
        return 2;
    }
    if ((p.etcd_prefix || p.advertise || p.etcd_ttl_s) && !(p.field_mask & KVP_NODE_PARAM_ETCD)) {
        fprintf(stderr, "%s: --etcd-prefix, --etcd-ttl and --advertise need --etcd URL\n", prog);
        return 2;
    }
    if ((p.field_mask & KVP_NODE_PARAM_ETCD) && p.advertise == NULL &&
        (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)) {
        fprintf(stderr, "%s: listening on %s, --etcd needs --advertise HOST:PORT\n", prog, host);
        return 2;
    }
    if ((p.field_mask & KVP_NODE_PARAM_DATA_DIR) && stat(p.data_dir, &st) == 0 &&
        !S_ISDIR(st.st_mode)) { /* (a missing one is made) RocksDB said so only after the disk
                                 * reserve had warned of free space twice */
        fprintf(stderr, "%s: --data-dir '%s' is not a directory\n", prog, p.data_dir);
        return 2;
    }
    nofile_raise();
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: the poll in the loop returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* a closed terminal: the same clean stop, not a kill that loses
                                   * what is only in DRAM */
    signal(SIGPIPE, SIG_IGN);
    node_stop = 0;
    return (kvp_node_run(&p, &node_stop) == KVP_OK) ? 0 : 1;
}
