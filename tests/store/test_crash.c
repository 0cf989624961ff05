/* test_crash.c - crash safety of the store under durability sync. Each round starts crash_child
 * (a stand-in for kvpackd) on the same RocksDB directory, streams session puts to it (new
 * sessions, multi-turn extensions of earlier ones, shared prefixes), and SIGKILLs it at a random
 * point: after a random number of acks plus a random delay, or during start-up/recovery. Then it
 * opens the store itself and checks that every acknowledged session is resumable and
 * byte-identical (pages and tail), and that an unacknowledged put is either absent or complete
 * (never a record without its pages). With "spill" the child runs durability spill and reports
 * the sessions the background spiller wrote ("spilled"): those count as acknowledged, so a kill
 * in the middle of a group commit must leave every reported session whole. With "interval" the
 * child runs durability interval (syncs every 5 ms): an ack still means written through, so the
 * checks are those of sync. With "compact" the child (durability sync, 64 KiB segment files)
 * also gets deletes and compacts after every command: a session whose delete was answered must
 * stay gone, one whose delete was cut off by the kill is either gone or intact, and every other
 * acknowledged session must survive kills in the middle of page moves.
 * With a fifth argument, the path of power_shim.so, the child runs under that model of a power
 * failure (writes to segment files and write-ahead logs not yet fsync'd are lost with the kill):
 * sync acks and spill reports must still be durable; under interval an ack is not (the last
 * window may go), but whatever version is visible must be whole, never a record or locator
 * whose bytes were not synced before it (the child sleeps 3 ms after each segment sync, widening
 * the window a commit can race into, and 10 ms after each WAL sync, so kills land after one).
 * usage: test_crash <crash_child> [rounds] [seed] [sync|spill|interval|compact] [power_shim.so] */
#include "store_test_util.h"

#include "kvpack/log.h"

#include <stdbool.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static const tgeom_t G = {4, 2, 64, 16};
#define NS        0x77u
#define MAX_SIDS  512
#define MAX_VERS  16

typedef struct {
    uint32_t chunks, tail;
    uint64_t seed;
} ver_t;

typedef struct {
    uint64_t pseed;
    ver_t    v[MAX_VERS];
    int      nv;        /* versions sent so far */
    int      acked;     /* index of the newest version known durable, -1 none */
    bool     del_sent;  /* a delete was sent (compact mode): never put again */
    bool     deleted;   /* a delete was answered, or the session was gone after it was sent */
} sid_t;

static sid_t    sids[MAX_SIDS];
static int      nsids;
static uint64_t rng;
static bool     spill_mode; /* durable = reported spilled, not acked */
static bool     compact_mode; /* deletes too */
static bool     acks_durable; /* an ack makes its version durable (not spill, not power interval) */
static uint64_t deletes_total, compact_reports;
static uint64_t spilled_total;

static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(kvp_splitmix64(&rng) % n);
}

static void sid_name(int i, char *buf, size_t n)
{
    snprintf(buf, n, "sess-%d", i);
}

/* Check one session against the versions that may legally be visible; return the visible one. */
static int verify_sid(kvp_store_h st, int i)
{
    char               name[32];
    kvp_session_desc_t got;
    kvp_status_t       s;
    sid_t             *e = &sids[i];

    sid_name(i, name, sizeof(name));
    s = kvp_store_session_get(st, NS, name, &got);
    if (e->deleted && s != KVP_ERR_NOT_FOUND) {
        fprintf(stderr, "%s: deleted, but still there (%s)\n", name, kvp_status_name(s));
        exit(1);
    }
    if (s == KVP_ERR_NOT_FOUND) {
        if (e->del_sent) {
            e->deleted = true; /* gone: it must stay gone */
            return -1;
        }
        if (e->acked >= 0) {
            fprintf(stderr, "%s: acknowledged version %d is missing\n", name, e->acked);
            exit(1);
        }
        return -1;
    }
    CHECK_OK(s);
    for (int v = e->acked >= 0 ? e->acked : 0; v < e->nv; v++) {
        if (got.n_chunks == e->v[v].chunks && got.tail_tokens == e->v[v].tail) {
            kvp_session_desc_t want;

            t_session(&G, e->pseed, e->v[v].chunks, e->v[v].seed, e->v[v].chunks, e->v[v].tail,
                      &want);
            s = t_check_session(st, NS, name, &G, &want);
            kvp_session_desc_clear(&want);
            kvp_session_desc_clear(&got);
            if (s != KVP_OK) {
                fprintf(stderr, "%s: visible version %d is not intact: %s\n", name, v,
                        kvp_status_name(s));
                exit(1);
            }
            return v;
        }
    }
    fprintf(stderr, "%s: visible record (%u chunks, %u tail) matches no legal version\n", name,
            got.n_chunks, got.tail_tokens);
    exit(1);
}

static void make_command(char *buf, size_t n)
{
    int    i;
    sid_t *e;
    ver_t  v;
    char   name[32];

    if (compact_mode && nsids > 0 && rnd(4) == 0) { /* delete a durable session */
        i = (int)rnd((uint32_t)nsids);
        if (sids[i].acked >= 0 && !sids[i].del_sent) {
            sids[i].del_sent = true;
            sid_name(i, name, sizeof(name));
            snprintf(buf, n, "del %s\n", name);
            return;
        }
    }
    if (nsids > 0 && (rnd(10) < 4 || nsids == MAX_SIDS)) { /* extend an existing session */
        i = (int)rnd((uint32_t)nsids);
        e = &sids[i];
        if (e->nv == MAX_VERS || e->del_sent) {
            i = -1;
        }
    } else {
        i = -1;
    }
    if (i < 0) {
        i        = nsids++;
        e        = &sids[i];
        /* 8 prefix groups: sessions share leading chunks (compact mode: none, so a delete
         * frees pages and segment files empty) */
        e->pseed = compact_mode ? 5000 + (uint64_t)i : 1000 + rnd(8);
        e->acked = -1;
        v.chunks = 1 + rnd(6);
    } else {
        v.chunks = e->v[e->nv - 1].chunks + 1 + rnd(3);
    }
    v.tail            = rnd(G.page_tokens);
    v.seed            = kvp_splitmix64(&rng) >> 16;
    e->v[e->nv++]     = v;
    sid_name(i, name, sizeof(name));
    snprintf(buf, n, "put %s %llu %llu %u %u\n", name, (unsigned long long)e->pseed,
             (unsigned long long)v.seed, v.chunks, v.tail);
}

static int round_first[MAX_SIDS]; /* versions sent before this round, per sid */
static int round_acks[MAX_SIDS];  /* acks received this round, per sid */

/* The child handles commands in order, so the k-th ack of a sid this round is the k-th version
 * of that sid sent this round. In spill mode an ack is not durable; "spilled" makes the sid's
 * last acked version durable (the spiller wrote the record the store held). */
static void ack(const char *line)
{
    int i;

    if (sscanf(line, "ack sess-%d", &i) == 1 && i >= 0 && i < nsids) {
        round_acks[i]++;
        if (acks_durable) {
            sids[i].acked = round_first[i] + round_acks[i] - 1;
        }
        CHECK(round_first[i] + round_acks[i] - 1 < sids[i].nv);
    } else if (spill_mode && sscanf(line, "spilled sess-%d", &i) == 1 && i >= 0 && i < nsids) {
        if (round_acks[i] > 0) { /* else a record from an earlier round, known already */
            sids[i].acked = round_first[i] + round_acks[i] - 1;
        }
        spilled_total++;
    } else if (compact_mode && sscanf(line, "deleted sess-%d", &i) == 1 && i >= 0 && i < nsids) {
        CHECK(sids[i].del_sent);
        sids[i].deleted = true;
        deletes_total++;
    } else if (compact_mode && strncmp(line, "compacted ", 10) == 0) {
        compact_reports++;
    } else if (strncmp(line, "ready", 5) != 0) {
        fprintf(stderr, "child said: %s", line);
        exit(1);
    }
}

/* a line that answers a command: an ack of a put, or (compact mode) of a delete */
static int replied(const char *line)
{
    return strncmp(line, "ack", 3) == 0 || strncmp(line, "deleted ", 8) == 0;
}

/* power model, interval: commits slowed to span several 5 ms syncs, each segment sync followed by
 * a window a commit can race into, each WAL sync by one a kill can land in (power_shim.c) */
static bool power_naps(void)
{
    return setenv("KVP_POWER_SEG_WRITE_SLEEP_MS", "1", 1) == 0 &&
           setenv("KVP_POWER_SEG_SYNC_SLEEP_MS", "3", 1) == 0 &&
           setenv("KVP_POWER_WAL_SYNC_SLEEP_MS", "10", 1) == 0;
}

int main(int argc, char **argv)
{
    int      rounds = argc > 2 ? atoi(argv[2]) : 24;
    char     dir[256], mark[300];
    uint64_t acked_total = 0, killed_early = 0;
    const char *mode, *shim = argc > 5 ? argv[5] : NULL;
    bool        interval;

    if (argc < 2) {
        fprintf(stderr, "usage: test_crash <crash_child> [rounds] [seed] "
                "[sync|spill|interval|compact] [power_shim.so]\n");
        return 2;
    }
    rng          = argc > 3 ? strtoull(argv[3], NULL, 0) : 20261129;
    spill_mode   = argc > 4 && strcmp(argv[4], "spill") == 0;
    compact_mode = argc > 4 && strcmp(argv[4], "compact") == 0;
    interval     = argc > 4 && strcmp(argv[4], "interval") == 0;
    mode         = spill_mode || compact_mode || interval ? argv[4] : NULL;
    acks_durable = !spill_mode && !(interval && shim != NULL);
    kvp_log_set_level(KVP_LOG_LVL_ERROR);
    signal(SIGPIPE, SIG_IGN);
    t_tmpdir(dir, sizeof(dir), "crash");
    snprintf(mark, sizeof(mark), "%s.power_mark", dir); /* beside dir: rounds reopen dir */
    unlink(mark);
    for (int r = 0; r < rounds; r++) {
        int      in[2], out[2], status;
        pid_t    pid;
        FILE    *from;
        char     line[256];
        int      ncmd = 10 + (int)rnd(30), kill_after = (int)rnd((uint32_t)ncmd + 1);
        int      nack = 0, early = rnd(8) == 0;
        kvp_store_params_t p = {0};
        kvp_store_h        st;

        CHECK(pipe(in) == 0 && pipe(out) == 0);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            dup2(in[0], 0);
            dup2(out[1], 1);
            close(in[1]);
            close(out[0]);
            if (shim != NULL && (setenv("LD_PRELOAD", shim, 1) != 0 ||
                                 setenv("KVP_POWER_MARK", mark, 1) != 0 ||
                                 (interval && !power_naps()))) {
                _exit(126);
            }
            execl(argv[1], argv[1], dir, mode, (char *)NULL);
            _exit(127);
        }
        close(in[0]);
        close(out[1]);
        from = fdopen(out[0], "r");
        for (int i = 0; i < MAX_SIDS; i++) {
            round_first[i] = sids[i].nv;
            round_acks[i]  = 0;
        }
        for (int c = 0; c < ncmd; c++) {
            char cmd[160];

            make_command(cmd, sizeof(cmd));
            if (write(in[1], cmd, strlen(cmd)) < 0) {
                break;
            }
        }
        if (early) {
            usleep(rnd(20000));
        } else {
            while (nack < kill_after && fgets(line, sizeof(line), from) != NULL) {
                ack(line);
                nack += replied(line);
            }
            usleep(rnd(3000));
        }
        kill(pid, SIGKILL);
        CHECK(waitpid(pid, &status, 0) == pid);
        close(in[1]);
        while (fgets(line, sizeof(line), from) != NULL) { /* acks written before the kill count */
            ack(line);
            nack += replied(line);
        }
        fclose(from);
        acked_total += (uint64_t)nack;
        killed_early += (uint64_t)early;

        /* restart and check every session ever sent */
        p.field_mask = KVP_STORE_PARAM_DB_PATH | KVP_STORE_PARAM_DURABILITY;
        p.db_path    = dir;
        p.durability = KVP_DURABILITY_SYNC;
        CHECK_OK(kvp_store_open(&p, &st));
        for (int i = 0; i < nsids; i++) {
            int v = verify_sid(st, i);

            if (v >= 0) {
                sids[i].acked = v; /* visible after a restart: durable from now on */
            }
        }
        kvp_store_close(st);
        fprintf(stderr, "round %d: %d commands, %d acked, kill %s, %d sessions checked\n", r,
                ncmd, nack, early ? "during start-up" : "mid-stream", nsids);
    }
    fprintf(stderr, "crash test%s: %d rounds, %llu acknowledged commands, %llu spilled reports, %llu "
            "answered deletes, %llu compactions seen, %llu start-up kills, %d sessions all "
            "intact\n", shim != NULL ? " (power-loss model)" : "", rounds, (unsigned long long)acked_total, (unsigned long long)spilled_total,
            (unsigned long long)deletes_total, (unsigned long long)compact_reports, (unsigned long long)killed_early, nsids);
    CHECK(!spill_mode || spilled_total > 0);
    CHECK(!compact_mode || (deletes_total > 0 && compact_reports > 0));
    CHECK(acked_total > 0); /* a child that died at start would make every round vacuous */
    CHECK(shim == NULL || access(mark, F_OK) == 0); /* the power model held writes back */
    t_rmrf(dir);
    unlink(mark);
    return 0;
}
