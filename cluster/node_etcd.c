/* node_etcd.c - kvpackd --etcd: the node registers PREFIX<advertise> under a lease and keeps the
 * lease alive on a background thread (node_etcd.h). The key is only ever written while it is
 * absent or holds this process's own value (etcd txns: reg_claim), so a second process
 * advertising the same address cannot take over a live node's key. The thread owns its own etcd
 * handle; the start and stop calls use another, so no handle is shared between threads (stop only
 * cancels the thread's call in progress: kvp_etcd_cancel).
 * Main flow: kvp_node_etcd_start -> reg_put -> keepalive_main (every ttl/3: keepalive, then the
 * key is checked: put back if deleted, left alone if another process holds it) ->
 * kvp_node_etcd_stop. */
#include "node_etcd.h"
#include "kvpack/alloc.h"
#include "kvpack/etcd.h"
#include "kvpack/log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MOD "etcd"
/* An etcd request ends within min(max(ttl/3, 1 s), REQ_MAX_MS): a hung etcd holds up neither a
 * start (exit 1) nor a keepalive round for long, whatever --etcd-ttl says. */
#define REQ_MIN_MS    1000u
#define REQ_MAX_MS    3000u
/* The revoke at stop, over all the endpoints: the lease runs out anyway, so a hung etcd must not
 * hold up a SIGTERM. A keepalive in flight is canceled first (within about 1 s), so a stop takes
 * about 3 s at most, however many endpoints. */
#define REVOKE_MAX_MS 2000u

struct kvp_node_etcd {
    kvp_etcd_h        etcd;       /* start / stop */
    kvp_etcd_h        bg;         /* the keepalive thread's */
    char              key[512];
    char              addr[320];  /* advertise: the key's suffix */
    char              value[1024];
    uint32_t          ttl_s;
    int64_t           lease;      /* written by start, then by the thread only; read by stop
                                   * after the join */
    atomic_int       *registered;
    atomic_int        dummy;
    pthread_t         thread;
    int               thread_started;
    kvp_etcd_member_t me;         /* what value says */
    char              held[1024]; /* another process's value holding the key, logged once per
                                   * value ("": none) */
    pthread_mutex_t   mu;
    pthread_cond_t    cv;
    int               stop;
};

/* Another process's value holds the key: say who (once per holder while it lasts), never
 * overwrite it. */
static void reg_held_log(kvp_node_etcd_h r, kvp_etcd_h e, const char *held)
{
    kvp_etcd_member_t m;
    char              who[1024];

    if (strncmp(r->held, held, sizeof(r->held) - 1) == 0) {
        return;
    }
    snprintf(r->held, sizeof(r->held), "%s", held);
    if (kvp_etcd_member_parse(r->addr, held, strlen(held), &m) == KVP_OK) {
        snprintf(who, sizeof(who), "pid %lld on host '%s', registered %lld s ago, data dir '%s'",
                 (long long)m.pid, m.host, (long long)(time(NULL) - m.since), m.data_dir);
    } else {
        snprintf(who, sizeof(who), "value '%.200s'", held);
    }
    KVP_LOG_ERROR(MOD, "cannot register %s: etcd key %s is held by another process (%s); is "
                  "another kvpackd advertising %s? Not taking it over (a killed node's key goes "
                  "when its lease runs out)%s", r->addr, r->key, who, r->addr,
                  e == r->bg ? "; still serving, unregistered, checking again every TTL/3"
                             : "; not starting");
}

/* A value left by an earlier process of this node that no longer runs (restarted at once after a
 * crash, its old lease not yet run out): safe to take over. Its pid means a process only within
 * one boot and PID namespace (pid_ns), so the value must name this host and this pid_ns; then the
 * pid is gone (kill: ESRCH), or it is this process's own pid in another value (a container's
 * pid 1 restarted in the same namespace). Anything else (another host, namespace or boot, a value
 * that does not say, a live pid) is not: 0. */
static int reg_held_stale(kvp_node_etcd_h r, const char *held)
{
    const kvp_etcd_member_t *mine = &r->me;
    kvp_etcd_member_t        them;

    if (kvp_etcd_member_parse(r->addr, held, strlen(held), &them) != KVP_OK ||
        mine->host[0] == '\0' || mine->pid_ns[0] == '\0' || strcmp(mine->host, them.host) != 0 ||
        strcmp(mine->pid_ns, them.pid_ns) != 0 || them.pid <= 0 ||
        (them.pid != mine->pid && (kill((pid_t)them.pid, 0) == 0 || errno != ESRCH))) {
        return 0;
    }
    KVP_LOG_WARN(MOD, "etcd key %s names pid %lld of this host and PID namespace, %s (a crash; "
                 "its lease has not run out yet): taking it over", r->key, (long long)them.pid,
                 them.pid == mine->pid ? "now this process's: an earlier run of it"
                                      : "which no longer runs");
    return 1;
}

/* "BOOT_ID/PIDNS_INODE" of this process into buf, or "" when either cannot be read. */
static void reg_pid_ns(char *buf, size_t cap)
{
    char  boot[64] = "", ns[64] = "";
    FILE *f        = fopen("/proc/sys/kernel/random/boot_id", "r");
    ssize_t n;

    buf[0] = '\0';
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL) {
            boot[0] = '\0';
        }
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
    if (boot[0] != '\0' && n > 0) {
        ns[n] = '\0';
        snprintf(buf, cap, "%s/%s", boot, ns);
    }
}

/* Write the key under lease unless another process holds it: one txn writes it while it is absent
 * (create_revision 0), another while it holds this node's own value (only with rewrite: for a new
 * lease; else nothing is written). *put_p: 1 when written. KVP_ERR_EXISTS when another value holds
 * it (logged: reg_held_log); KVP_ERR_BUSY when it changed under every try. */
static kvp_status_t reg_claim(kvp_node_etcd_h r, kvp_etcd_h e, int64_t lease, int rewrite,
                              int *put_p)
{
    const char *if_value = NULL; /* what the key is believed to hold: NULL, absent */
    char        stale[sizeof(r->value)];

    for (int tries = 0; tries < 3; tries++) { /* it may change between two txns */
        char        *held;
        kvp_status_t s = kvp_etcd_put_if(e, r->key, r->value, lease, if_value, put_p, &held);

        if (s == KVP_OK && held != NULL && strcmp(held, r->value) != 0) {
            if (rewrite && strlen(held) < sizeof(stale) && reg_held_stale(r, held)) {
                snprintf(stale, sizeof(stale), "%s", held); /* replaced only if still that */
                if_value = stale;
                kvp_free(held);
                continue;
            }
            reg_held_log(r, e, held);
            kvp_free(held);
            return KVP_ERR_EXISTS;
        }
        if (s != KVP_OK || *put_p || (held != NULL && !rewrite)) {
            if (s == KVP_OK && r->held[0] != '\0') {
                KVP_LOG_WARN(MOD, "etcd key %s is this node's again", r->key);
                r->held[0] = '\0';
            }
            kvp_free(held);
            return s;
        }
        if_value = held ? r->value : NULL;
        kvp_free(held);
    }
    KVP_LOG_WARN(MOD, "etcd key %s kept changing while this node registered", r->key);
    return KVP_ERR_BUSY;
}

/* Grant a lease and put the key under it (reg_claim). */
static kvp_status_t reg_put(kvp_node_etcd_h r, kvp_etcd_h e)
{
    int64_t      lease;
    int          put;
    kvp_status_t s = kvp_etcd_lease_grant(e, r->ttl_s, &lease);

    if (s == KVP_OK) {
        s = reg_claim(r, e, lease, 1, &put);
        if (s != KVP_OK) {
            kvp_etcd_lease_revoke(e, lease);
        }
    }
    if (s == KVP_OK) {
        r->lease = lease;
    }
    return s;
}

/* After a keepalive: the key itself is still there (an operator's `etcdctl del`, or a cleanup of
 * the prefix, removes it while its lease lives, and the lease alone would keep the node out of
 * every list for good) and holds this node's value (pid and start time): put back under the same
 * lease when it is gone, left alone (KVP_ERR_EXISTS, logged) when another process holds it. */
static kvp_status_t reg_key_check(kvp_node_etcd_h r, kvp_etcd_h e)
{
    int          put;
    kvp_status_t s = reg_claim(r, e, r->lease, 0, &put);

    if (s == KVP_OK && put) {
        KVP_LOG_WARN(MOD, "key %s was deleted while its lease lives; put it back", r->key);
    }
    return s;
}

static void *keepalive_main(void *arg)
{
    kvp_node_etcd_h r = arg;
    uint64_t        period_ms = r->ttl_s * 1000u / 3u;

    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec until;
        int64_t         ttl;
        kvp_status_t    s;

        clock_gettime(CLOCK_MONOTONIC, &until); /* the cv's clock: a wall-clock step is no stall */
        until.tv_sec  += (time_t)(period_ms / 1000u);
        until.tv_nsec += (long)(period_ms % 1000u) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!r->stop && pthread_cond_timedwait(&r->cv, &r->mu, &until) != ETIMEDOUT) {
        }
        if (r->stop) {
            break;
        }
        pthread_mutex_unlock(&r->mu); /* no HTTP under the lock: stop must not wait on it */
        s = kvp_etcd_lease_keepalive(r->bg, r->lease, &ttl);
        if (s == KVP_OK) {
            s = reg_key_check(r, r->bg);
        }
        if (s == KVP_ERR_NOT_FOUND) {
            KVP_LOG_WARN(MOD, "lease of %s lost (expired while etcd was out of reach?); "
                         "registering again", r->key);
            s = reg_put(r, r->bg);
            if (s == KVP_OK) {
                KVP_LOG_WARN(MOD, "registered %s again at %s", r->key, kvp_etcd_endpoint(r->bg));
            }
        }
        if (s != KVP_OK && s != KVP_ERR_CANCELED && s != KVP_ERR_EXISTS) {
            /* canceled: stop is under way; exists: reg_held_log said so */
            KVP_LOG_WARN(MOD, "keepalive of %s failed: %s; still serving, retrying in %llu ms",
                         r->key, kvp_status_str(s), (unsigned long long)period_ms);
        }
        atomic_store(r->registered, s == KVP_OK);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- API ---- */

kvp_status_t kvp_node_etcd_start(const char *endpoints, const char *prefix, const char *advertise,
                                 uint32_t ttl_s, const char *data_dir, atomic_int *registered,
                                 kvp_node_etcd_h *reg_p)
{
    kvp_node_etcd_h   r = kvp_calloc(1, sizeof(*r), "node.etcd");
    kvp_etcd_member_t  m;
    pthread_condattr_t ca;
    uint32_t           tmo = ttl_s * 1000u / 3u;
    kvp_status_t       s;

    if (r == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    memset(&m, 0, sizeof(m));
    snprintf(m.addr, sizeof(m.addr), "%s", advertise);
    snprintf(r->addr, sizeof(r->addr), "%s", advertise);
    snprintf(m.data_dir, sizeof(m.data_dir), "%s", data_dir ? data_dir : "");
    if (gethostname(m.host, sizeof(m.host) - 1) != 0) {
        m.host[0] = '\0'; /* then its key is never taken over as stale (reg_held_stale) */
    }
    reg_pid_ns(m.pid_ns, sizeof(m.pid_ns));
    m.pid        = (int64_t)getpid();
    m.since      = (int64_t)time(NULL);
    r->ttl_s     = ttl_s;
    r->registered = registered ? registered : &r->dummy;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    tmo = tmo < REQ_MIN_MS ? REQ_MIN_MS : tmo > REQ_MAX_MS ? REQ_MAX_MS : tmo;
    if ((size_t)snprintf(r->key, sizeof(r->key), "%s%s", prefix, advertise) >= sizeof(r->key)) {
        KVP_LOG_ERROR(MOD, "etcd key %s%s is too long", prefix, advertise);
        s = KVP_ERR_INVALID;
        goto err;
    }
    r->me = m;
    s     = kvp_etcd_member_json(&m, r->value, sizeof(r->value));
    if (s == KVP_OK) {
        s = kvp_etcd_create(endpoints, tmo, &r->etcd);
    }
    if (s == KVP_OK) {
        s = kvp_etcd_create(endpoints, tmo, &r->bg);
    }
    if (s != KVP_OK) {
        goto err;
    }
    s = reg_put(r, r->etcd);
    if (s != KVP_OK) {
        if (s != KVP_ERR_EXISTS) { /* reg_held_log named the holder */
            KVP_LOG_ERROR(MOD, "cannot register %s with etcd %s: %s", r->key, endpoints,
                          kvp_status_str(s));
        }
        goto err;
    }
    atomic_store(r->registered, 1);
    if (pthread_create(&r->thread, NULL, keepalive_main, r) != 0) {
        KVP_LOG_ERROR(MOD, "cannot start the etcd keepalive thread");
        kvp_etcd_lease_revoke(r->etcd, r->lease);
        atomic_store(r->registered, 0);
        s = KVP_ERR_NO_MEMORY;
        goto err;
    }
    r->thread_started = 1;
    KVP_LOG_INFO(MOD, "registered %s (lease %lld, ttl %u s) at %s", r->key, (long long)r->lease,
                 ttl_s, kvp_etcd_endpoint(r->etcd));
    *reg_p = r;
    return KVP_OK;
err:
    r->thread_started = 0;
    kvp_node_etcd_stop(r);
    return s;
}

void kvp_node_etcd_stop(kvp_node_etcd_h r)
{
    if (r == NULL) {
        return;
    }
    if (r->thread_started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        kvp_etcd_cancel(r->bg); /* a keepalive waiting on a hung etcd ends now, not after trying
                                 * every endpoint */
        pthread_join(r->thread, NULL);
        kvp_etcd_set_budget(r->etcd, REVOKE_MAX_MS);
        if (kvp_etcd_lease_revoke(r->etcd, r->lease) == KVP_OK) {
            KVP_LOG_INFO(MOD, "left: revoked the lease of %s", r->key);
        } else {
            KVP_LOG_WARN(MOD, "cannot revoke the lease of %s; it expires in at most %u s",
                         r->key, r->ttl_s);
        }
        atomic_store(r->registered, 0);
    }
    kvp_etcd_destroy(r->bg);
    kvp_etcd_destroy(r->etcd);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    kvp_free(r);
}
