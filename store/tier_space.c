/* tier_space.c - the SSD tier's disk reserve. Once a flush or compaction meets a full disk,
 * RocksDB refuses every write, deletes included, until its largest memtable fits again: a node
 * whose disk filled could never free space through kvpack (reproduced with RocksDB 7.8 on a
 * 24 MiB tmpfs: every `kvpack rm` failed with ERR_NO_SPACE until a restart). So the tier holds
 * `reserve` bytes back, in two ways:
 *  - admission: a commit that adds bytes (pages, session records) is refused with
 *    KVP_ERR_NO_SPACE before it writes anything while the free space less its bytes is below the
 *    reserve; deletes, tombstones and compaction moves are not held to it;
 *  - a reserve file (kvpack.reserve in the db directory, `reserve` bytes allocated) for when the
 *    disk fills anyway (another process, RocksDB's own compactions): a write that fails for
 *    space removes it, and the tier opens the db again (tier_rocksdb.c), which clears
 *    RocksDB's stop, so deletes go through; and before that, the first commit that finds less
 *    free than a memtable's flush needs removes it. Writes that add bytes wait until
 *    the free space is twice the reserve, and the file is made again first.
 * RocksDB 7.8 opening on a disk without room for a new write-ahead log and the replay of the old
 * one fails an assertion and aborts the process (seen here); so an open first makes sure of
 * that room: the reserve file goes if it must, else the open is refused with a clear error.
 * A closing store's last spills (kvp_tier_last_writes) may use the reserve, keeping only the room
 * the next open needs: what they save is worth more than a reserve for a process that is going.
 * Everything here runs under the tier's mu, or at open. */
#define _GNU_SOURCE
#include "tier_int.h"
#include "kvpack/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MOD TIER_MOD
#define MIB(x) ((unsigned long long)((x) >> 20))

static void reserve_path(const kvp_tier_t *t, char *buf, size_t n)
{
    snprintf(buf, n, "%s/kvpack.reserve", t->path);
}

uint64_t tier_space_free(kvp_tier_t *t)
{
    struct statvfs v;
    uint64_t       free_b;

    if (statvfs(t->path, &v) != 0) {
        return UINT64_MAX; /* unknown: nothing is refused for it */
    }
    free_b = (uint64_t)v.f_bavail * v.f_frsize;
    __atomic_store_n(&t->free_bytes, free_b, __ATOMIC_RELAXED);
    return free_b;
}

/* The reserve file, when there is none and free_b leaves room for it twice. */
static void reserve_make(kvp_tier_t *t, uint64_t free_b)
{
    char path[4096];
    int  fd, rc;

    if (t->reserve_held || t->reserve == 0 || free_b == UINT64_MAX || free_b < 2 * t->reserve) {
        return;
    }
    reserve_path(t, path, sizeof(path));
    if ((fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600)) < 0) {
        KVP_LOG_WARN(MOD, "disk reserve: cannot create %s: %m", path);
        return;
    }
    rc = posix_fallocate(fd, 0, (off_t)t->reserve); /* blocks allocated, not a sparse file */
    if (rc == 0 && fdatasync(fd) != 0) {
        rc = errno;
    }
    close(fd);
    if (rc != 0) {
        KVP_LOG_WARN(MOD, "disk reserve: cannot allocate %llu MiB in %s: %s", MIB(t->reserve), path,
                     strerror(rc));
        unlink(path);
        return;
    }
    t->reserve_held = true;
    __atomic_store_n(&t->reserve_file, t->reserve, __ATOMIC_RELAXED);
    KVP_LOG_INFO(MOD, "disk reserve: %llu MiB held in %s", MIB(t->reserve), path);
}

/* tier_space_admit; count: a refusal counts in full_refusals (not the open's look) */
static kvp_status_t admit(kvp_tier_t *t, uint64_t bytes, bool count)
{
    uint64_t free_b, need;

    if (t->reserve == 0) {
        return KVP_OK;
    }
    free_b = tier_space_free(t);
    if (t->reserve_held && free_b < (uint64_t)t->write_buffer + (1u << 20)) {
        tier_space_release(t); /* filled from outside: RocksDB's next flush gets the room, before
                                * it fails for it */
        free_b = tier_space_free(t);
    }
    if (bytes == 0) {
        return KVP_OK;
    }
    if (t->closing) { /* the stop's last spills may use the reserve: only the next open's room
                       * must stay */
        need = tier_space_open_need(t);
        if (t->reserve_held && (free_b < bytes || free_b - bytes < need)) {
            tier_space_release(t);
            free_b = tier_space_free(t);
        }
        if (free_b >= bytes && free_b - bytes >= need) {
            return KVP_OK;
        }
    } else {
        need = t->reserve_held ? t->reserve : 2 * t->reserve; /* a given-up file comes first */
        if (free_b >= bytes && free_b - bytes >= need) {
            if (t->full) {
                KVP_LOG_WARN(MOD, "disk space back (%llu MiB free): writes accepted again",
                             MIB(free_b));
                t->full = false;
            }
            reserve_make(t, free_b - bytes);
            return KVP_OK;
        }
    }
    if (count) {
        __atomic_add_fetch(&t->full_refusals, 1, __ATOMIC_RELAXED);
    }
    if (!t->full) { /* once per spell: a busy node would log every put */
        KVP_LOG_ERROR(MOD, "disk full: %llu MiB free in %s, writes need %llu MiB (the reserve%s): "
                      "refused (ERR_NO_SPACE) until space is freed (kvpack rm, --idle-ttl); reads "
                      "and deletes go on", MIB(free_b), t->path, MIB(need),
                      t->closing ? ": closing, only what the next start needs"
                      : t->reserve_held ? "" : " twice, its file given up");
        t->full = true;
    }
    return KVP_ERR_NO_SPACE;
}

void tier_space_open(kvp_tier_t *t, uint64_t reserve)
{
    char        path[4096];
    struct stat sb;

    if (reserve > 0 && reserve < 3 * (uint64_t)t->write_buffer) { /* room for the flushes of the
                                                                    * memtables RocksDB holds */
        KVP_LOG_WARN(MOD, "disk reserve of %llu MiB raised to 3x the index memtable: %llu MiB",
                     MIB(reserve), MIB(3 * (uint64_t)t->write_buffer));
        reserve = 3 * (uint64_t)t->write_buffer;
    }
    t->reserve = reserve;
    reserve_path(t, path, sizeof(path));
    if (stat(path, &sb) == 0 && reserve > 0 && (uint64_t)sb.st_size == reserve &&
        (uint64_t)sb.st_blocks * 512 >= reserve) {
        t->reserve_held = true; /* the one a previous run made */
        __atomic_store_n(&t->reserve_file, reserve, __ATOMIC_RELAXED);
    } else {
        unlink(path); /* another size, or the reserve is off now (or none: ENOENT) */
        reserve_make(t, tier_space_free(t));
    }
    if (reserve > 0 && !t->reserve_held) {
        uint64_t free_b = tier_space_free(t);

        if (free_b == UINT64_MAX) { /* statvfs failed: no figure to quote */
            KVP_LOG_WARN(MOD, "disk reserve: the free space of %s is unknown (%s); the %llu MiB "
                         "reserve file is not made", t->path, strerror(errno), MIB(reserve));
        } else if (free_b < 2 * reserve) { /* else reserve_make said why it failed */
            KVP_LOG_WARN(MOD, "disk reserve: only %llu MiB free in %s; the %llu MiB reserve file "
                         "is made once twice that is free", MIB(free_b), t->path, MIB(reserve));
        }
    }
    (void)admit(t, 1, false); /* full already: says so, and deletes get their space back */
}

kvp_status_t tier_space_admit(kvp_tier_t *t, uint64_t bytes)
{
    return admit(t, bytes, true);
}

uint64_t tier_space_open_need(const kvp_tier_t *t)
{
    uint64_t       wal = 0;
    DIR           *d   = opendir(t->path);
    struct dirent *e;
    char           path[4096];
    struct stat    sb;

    while (d != NULL && (e = readdir(d)) != NULL) { /* NNNNNN.log: write-ahead logs */
        size_t n = strlen(e->d_name);

        if (n > 4 && strcmp(e->d_name + n - 4, ".log") == 0) {
            snprintf(path, sizeof(path), "%s/%s", t->path, e->d_name);
            wal += stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return wal + t->write_buffer + (1u << 20);
}

kvp_status_t tier_space_room(kvp_tier_t *t, uint64_t need, const char *what)
{
    uint64_t free_b = tier_space_free(t);

    if (free_b >= need) {
        return KVP_OK;
    }
    if (tier_space_release(t)) {
        free_b = tier_space_free(t);
    }
    if (free_b >= need) {
        return KVP_OK;
    }
    if (what != NULL) {
        KVP_LOG_ERROR(MOD, "db %s: %s: %llu MiB free, and RocksDB needs about %llu MiB", t->path,
                      what, MIB(free_b), MIB(need));
    }
    return KVP_ERR_NO_SPACE;
}

bool tier_space_release(kvp_tier_t *t)
{
    char path[4096];

    if (!t->reserve_held) {
        return false;
    }
    reserve_path(t, path, sizeof(path));
    if (unlink(path) != 0 && errno != ENOENT) {
        KVP_LOG_ERROR(MOD, "disk reserve: cannot remove %s: %m", path);
        return false;
    }
    t->reserve_held = false;
    __atomic_store_n(&t->reserve_file, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&t->reserve_releases, 1, __ATOMIC_RELAXED);
    KVP_LOG_ERROR(MOD, "disk full: removed the %llu MiB reserve file so that deletes and RocksDB "
                  "have room; writes are accepted again once %llu MiB are free (the file is made "
                  "again first)", MIB(t->reserve), MIB(2 * t->reserve));
    return true;
}
