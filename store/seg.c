/* seg.c - segment files for page bytes: one active file appended with O_DIRECT pwritev straight
 * from pool slots (rolled at SEG_ROLL bytes), reads sorted and coalesced into preadv runs straight
 * into pool slots through read fds cached per file (at most a quarter of the fds limit, 256 at
 * least, open; least recently used closed first), live-byte accounting and unlinking of dead segments. Falls back to buffered
 * I/O where the filesystem refuses O_DIRECT (tmpfs). Errors are logged here with %m and mapped:
 * ENOSPC -> KVP_ERR_NO_SPACE, a missing file (ENOENT, or not in the table) or short read ->
 * KVP_ERR_NOT_FOUND, anything else (EMFILE included) -> KVP_ERR_IO, which drops nothing.
 * Main flow: kvp_segs_append (spill) / kvp_segs_read_plan + _run (restore) / kvp_segs_live_add
 * (delete). */
#define _GNU_SOURCE /* O_DIRECT */
#include "seg.h"
#include "kvpack/alloc.h"
#include "kvpack/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MOD       "store"
#define SEG_ROLL  (256ull << 20) /* default: start a new segment once the active one is this large */
#define RUN_MAX   (16u << 20)    /* bytes per preadv/pwritev call */
#define IOV_CAP   1024           /* IOV_MAX on Linux */
#define RFD_MAX   256            /* segment read fds kept open at least (the least recently used
                                  * is closed to open another); more with a higher fds limit */
#define RFD_CAP   65536          /* ... and at most */

typedef struct {
    uint64_t id;
    uint64_t size; /* bytes written (a multiple of KVP_SEG_ALIGN) */
    int64_t  live; /* bytes named by durable locators */
    int      rfd;  /* read fd, opened on first read and kept while fewer than rfd_max are; -1 */
    bool     rdirect;
    uint64_t rused; /* the read tick of its last read plan (kvp_segs.rtick): the LRU order */
    uint32_t pending; /* reservations not ended yet: the file stays (no unlink, no compaction) */
    uint32_t unsynced; /* bytes of it whose death is not yet durable in the WAL
                        * (kvp_segs_dead_later): the file stays, it may be compacted */
} seg_file_t;


struct kvp_segs {
    char       *dir;
    int         dirfd;
    seg_file_t *files;   /* sorted by id */
    size_t      nfiles, cap;
    uint64_t    next_id;
    uint64_t    roll;    /* segment size that starts a new one */
    uint64_t    active;  /* id of the file being appended, 0 = none yet */
    int         wfd;
    uint64_t    written;  /* bytes appended to segment files since open (spans, padding included) */
    uint64_t    app_gen;  /* appends so far (each non-empty kvp_segs_append adds one) */
    uint64_t    sync_gen; /* appends an fdatasync has covered: < app_gen means dirty */
    char      **dead;     /* paths of segments dropped from the table, unlinked by the caller */
    size_t      ndead, capdead; /* after its lock (kvp_segs_take_dead / kvp_segs_unlink_dead) */
    int         spare_fd; /* the next segment, created ahead without the lock; -1: none */
    uint64_t    spare_id; /* its id (taken from next_id when it was asked for) */
    bool        spare_busy; /* being created (kvp_segs_spare_want .. _set) */
    size_t      nrfd;       /* read fds open (files[i].rfd >= 0) */
    size_t      rfd_max;    /* at most that many (kvp_segs_set_rfd_max; RFD_MAX) */
    uint64_t    rtick;      /* read plans so far */
    uint64_t    unsynced;   /* deaths not yet durable in the WAL, all files (kvp_segs_dead_later) */
};

/* Nothing names the file's bytes, and nothing may: it can be unlinked. */
static bool seg_may_go(const kvp_segs_t *s, const seg_file_t *f)
{
    return f->live <= 0 && f->id != s->active && f->pending == 0 && f->unsynced == 0;
}

/* Read fds to cache: a quarter of the open files limit (kvpackd raises its soft limit to the
 * hard one at start), at least RFD_MAX and at most RFD_CAP, so a node whose segment files fit
 * does not open and close one per read, and one with more leaves room for clients and RocksDB. */
size_t kvp_segs_rfd_default(void)
{
    struct rlimit rl;
    rlim_t        q;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        return RFD_MAX;
    }
    q = rl.rlim_cur / 4;
    return q < RFD_MAX ? RFD_MAX : q > RFD_CAP ? RFD_CAP : (size_t)q;
}

static kvp_status_t errno_status(int e)
{
    return e == ENOSPC || e == EDQUOT ? KVP_ERR_NO_SPACE : (e == ENOENT ? KVP_ERR_NOT_FOUND
                                                                       : KVP_ERR_IO);
}

static seg_file_t *seg_find(kvp_segs_t *s, uint64_t id)
{
    size_t lo = 0, hi = s->nfiles;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (s->files[mid].id == id) {
            return &s->files[mid];
        }
        if (s->files[mid].id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

static void seg_path(const kvp_segs_t *s, uint64_t id, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%016" PRIx64 ".seg", s->dir, id);
}

/* Append an entry (ids only grow, so the array stays sorted). */
static seg_file_t *seg_add(kvp_segs_t *s, uint64_t id, uint64_t size)
{
    seg_file_t *f = kvp_array_room(s->files, &s->cap, s->nfiles, sizeof(*f), 16, "segment table");

    if (f == NULL) {
        KVP_LOG_ERROR(MOD, "no memory for the segment table");
        return NULL;
    }
    s->files = f;
    s->files[s->nfiles] = (seg_file_t){id, size, 0, -1, false, 0, 0, 0};
    return &s->files[s->nfiles++];
}

/* Close a segment's cached read fd, if open (a read plan in flight holds its own duplicate). */
static void seg_rfd_close(kvp_segs_t *s, seg_file_t *f)
{
    if (f->rfd >= 0) {
        close(f->rfd);
        f->rfd = -1;
        s->nrfd--;
    }
}

/* Drop a dead segment from the table; returns the file bytes given back. Its file is unlinked
 * later, outside the tier's lock (unlinking a large file takes tens of ms); when there is no
 * memory to queue the path, or after a crash first, the open-time sweep (kvp_segs_reap) does. */
static uint64_t seg_unlink(kvp_segs_t *s, seg_file_t *f)
{
    char     path[PATH_MAX];
    size_t   i = (size_t)(f - s->files);
    uint64_t size;
    char    *copy, **d;

    seg_path(s, f->id, path, sizeof(path));
    seg_rfd_close(s, f);
    d = kvp_array_room(s->dead, &s->capdead, s->ndead, sizeof(*d), 8, "dead segments");
    if (d != NULL) { /* else the list stays as it was, full */
        s->dead = d;
    }
    copy = s->ndead < s->capdead ? kvp_malloc(strlen(path) + 1, "dead segment path") : NULL;
    if (copy != NULL) {
        strcpy(copy, path);
        s->dead[s->ndead++] = copy;
    } else if (unlink(path) != 0 && errno != ENOENT) { /* no memory to queue it: now */
        KVP_LOG_WARN(MOD, "cannot remove dead segment %s: %m", path);
    }
    size = f->size;
    memmove(&s->files[i], &s->files[i + 1], (s->nfiles - i - 1) * sizeof(*f));
    s->nfiles--;
    return size;
}

/* Segment ids stop far below 2^64, so the next one never wraps to 0 (0 names an inline page). */
#define SEG_ID_MAX (UINT64_C(1) << 62)

/* 1 and *id for a name exactly as seg_path writes one (16 lower-case hex digits, id 1 to
 * SEG_ID_MAX, ".seg"); -1 for another name ending in .seg (a stray file, logged and left
 * alone); 0 for anything else. */
static int seg_name_id(const char *name, uint64_t *id)
{
    uint64_t x = 0;
    size_t   n = strlen(name);

    if (n < 4 || strcmp(name + n - 4, ".seg") != 0) {
        return 0;
    }
    if (n != 20) {
        return -1;
    }
    for (size_t i = 0; i < 16; i++) {
        char c = name[i];

        if (c >= '0' && c <= '9') {
            x = x << 4 | (uint64_t)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            x = x << 4 | (uint64_t)(c - 'a' + 10);
        } else {
            return -1;
        }
    }
    if (x == 0 || x > SEG_ID_MAX) {
        return -1;
    }
    *id = x;
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

kvp_status_t kvp_segs_open(const char *db_path, uint64_t roll_bytes, kvp_segs_t **segs_p)
{
    kvp_segs_t    *s = kvp_calloc(1, sizeof(*s), "segments");
    size_t         n = strlen(db_path) + 8;
    DIR           *dp;
    struct dirent *e;
    uint64_t      *ids = NULL;
    size_t         nids = 0, capids = 0;

    if (s == NULL || (s->dir = kvp_malloc(n, "segment dir")) == NULL) {
        kvp_free(s);
        KVP_LOG_ERROR(MOD, "no memory for the segment files of %s", db_path);
        return KVP_ERR_NO_MEMORY;
    }
    snprintf(s->dir, n, "%s/seg", db_path);
    s->wfd   = -1;
    s->dirfd = -1;
    s->spare_fd = -1;
    s->rfd_max  = kvp_segs_rfd_default();
    s->roll  = roll_bytes ? roll_bytes : SEG_ROLL;
    if (mkdir(s->dir, 0700) != 0 && errno != EEXIST) {
        KVP_LOG_ERROR(MOD, "cannot create segment directory %s: %m", s->dir);
        kvp_segs_close(s);
        return errno_status(errno);
    }
    s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY);
    dp       = opendir(s->dir);
    if (s->dirfd < 0 || dp == NULL) {
        KVP_LOG_ERROR(MOD, "cannot open segment directory %s: %m", s->dir);
        if (dp != NULL) {
            closedir(dp);
        }
        kvp_segs_close(s);
        return KVP_ERR_IO;
    }
    for (errno = 0; (e = readdir(dp)) != NULL; errno = 0) {
        uint64_t id;
        int      named = seg_name_id(e->d_name, &id);

        if (named < 0) {
            KVP_LOG_WARN(MOD, "segment directory %s: %s is not a segment file kvpack wrote "
                         "(16 lower-case hex digits from 1 to %016" PRIx64 ", then .seg): left "
                         "alone", s->dir, e->d_name, SEG_ID_MAX);
        }
        if (named > 0) {
            uint64_t *t = kvp_array_room(ids, &capids, nids, sizeof(*t), 64, "seg ids");

            if (t == NULL) {
                closedir(dp);
                kvp_free(ids);
                kvp_segs_close(s);
                return KVP_ERR_NO_MEMORY;
            }
            ids         = t;
            ids[nids++] = id;
        }
    }
    if (errno != 0) { /* a partial list would make the open-time sweep drop live locators */
        KVP_LOG_ERROR(MOD, "cannot list segment directory %s: %m", s->dir);
        closedir(dp);
        kvp_free(ids);
        kvp_segs_close(s);
        return KVP_ERR_IO;
    }
    closedir(dp);
    if (nids > 1) {
        qsort(ids, nids, sizeof(*ids), cmp_u64);
    }
    s->next_id = 1;
    for (size_t i = 0; i < nids; i++) {
        char        path[PATH_MAX];
        struct stat sb;

        seg_path(s, ids[i], path, sizeof(path));
        if (stat(path, &sb) != 0 || seg_add(s, ids[i], (uint64_t)sb.st_size) == NULL) {
            KVP_LOG_ERROR(MOD, "cannot stat segment %s: %m", path);
            kvp_free(ids);
            kvp_segs_close(s);
            return KVP_ERR_IO;
        }
        s->next_id = ids[i] + 1;
    }
    kvp_free(ids);
    *segs_p = s;
    return KVP_OK;
}

void kvp_segs_sync_files(const char *db_path)
{
    char           dir[PATH_MAX], path[PATH_MAX + 300];
    DIR           *dp;
    struct dirent *e;

    snprintf(dir, sizeof(dir), "%s/seg", db_path);
    dp = opendir(dir);
    if (dp == NULL) {
        return; /* a new store: none yet (kvp_segs_open reports any other reason) */
    }
    while ((e = readdir(dp)) != NULL) {
        uint64_t id;
        int      fd;

        if (seg_name_id(e->d_name, &id) <= 0) {
            continue; /* kvp_segs_open names what it leaves alone */
        }
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) != 0) {
            KVP_LOG_WARN(MOD, "cannot sync segment %s before the index opens: %m (a power loss "
                         "may now cost pages of it that the index names)", path);
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    closedir(dp);
}

size_t kvp_segs_take_dead(kvp_segs_t *s, char ***paths_p)
{
    size_t n = s->ndead;

    *paths_p = NULL;
    if (n == 0) {
        return 0;
    }
    *paths_p   = s->dead;
    s->dead    = NULL;
    s->ndead   = 0;
    s->capdead = 0;
    return n;
}

void kvp_segs_unlink_dead(char **paths, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (unlink(paths[i]) != 0 && errno != ENOENT) {
            KVP_LOG_WARN(MOD, "cannot remove dead segment %s: %m", paths[i]);
        } else {
            KVP_LOG_DEBUG(MOD, "removed dead segment %s", paths[i]);
        }
        kvp_free(paths[i]);
    }
    kvp_free(paths);
}

void kvp_segs_close(kvp_segs_t *s)
{
    char **dead;
    size_t ndead;

    if (s == NULL) {
        return;
    }
    ndead = kvp_segs_take_dead(s, &dead);
    kvp_segs_unlink_dead(dead, ndead);
    for (size_t i = 0; i < s->nfiles; i++) {
        seg_rfd_close(s, &s->files[i]);
    }
    if (s->wfd >= 0) {
        close(s->wfd);
    }
    if (s->spare_fd >= 0) { /* never used: empty, and not in the table */
        char path[PATH_MAX];

        close(s->spare_fd);
        seg_path(s, s->spare_id, path, sizeof(path));
        unlink(path);
    }
    if (s->dirfd >= 0) {
        close(s->dirfd);
    }
    kvp_free(s->files);
    kvp_free(s->dir);
    kvp_free(s);
}

/* Create segment file id (O_DIRECT where the filesystem takes it) and make its name durable. */
static int seg_create(const char *dir, int dirfd, uint64_t id, kvp_status_t *status_p)
{
    char path[PATH_MAX];
    int  fd;

    snprintf(path, sizeof(path), "%s/%016" PRIx64 ".seg", dir, id);
    fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
        fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
    }
    if (fd < 0) {
        KVP_LOG_ERROR(MOD, "cannot create segment %s: %m", path);
        *status_p = errno_status(errno);
        return -1;
    }
    if (fsync(dirfd) != 0) {
        KVP_LOG_ERROR(MOD, "cannot record segment %s: %m", path);
        close(fd);
        unlink(path);
        *status_p = KVP_ERR_IO;
        return -1;
    }
    *status_p = KVP_OK;
    return fd;
}

bool kvp_segs_spare_want(kvp_segs_t *s, uint64_t *id_p, const char **dir_p, int *dirfd_p)
{
    seg_file_t *f = s->active ? seg_find(s, s->active) : NULL;

    if (f == NULL || s->spare_fd >= 0 || s->spare_busy || f->size < s->roll / 2) {
        return false;
    }
    s->spare_busy = true;
    *id_p         = s->next_id++; /* ids only grow: the spare's is the next a roll takes */
    *dir_p        = s->dir;
    *dirfd_p      = s->dirfd;
    return true;
}

int kvp_segs_spare_create(const char *dir, int dirfd, uint64_t id)
{
    kvp_status_t status;

    return seg_create(dir, dirfd, id, &status);
}

void kvp_segs_spare_set(kvp_segs_t *s, uint64_t id, int fd)
{
    s->spare_busy = false;
    if (fd >= 0 && id < s->active) { /* a roll made its own meanwhile: ids must keep growing */
        char path[PATH_MAX];

        close(fd);
        seg_path(s, id, path, sizeof(path));
        unlink(path); /* empty */
    } else if (fd >= 0) {
        s->spare_fd = fd;
        s->spare_id = id;
    }
}

/* Start a new active segment (the spare when one was made ahead, else a file created here); the
 * old one is unlinked if nothing names it. */
static kvp_status_t seg_roll(kvp_segs_t *s)
{
    uint64_t     id;
    seg_file_t  *old;
    int          fd;
    kvp_status_t status;

    /* a later sync covers only the active segment: bytes written into this one without a sync
     * (write-through) must not be left behind */
    if (s->wfd >= 0 && s->sync_gen < s->app_gen && fdatasync(s->wfd) != 0) {
        int e = errno;

        KVP_LOG_ERROR(MOD, "segment %016" PRIx64 " fdatasync failed: %m", s->active);
        return errno_status(e);
    }
    if (s->spare_fd >= 0) {
        id          = s->spare_id;
        fd          = s->spare_fd;
        s->spare_fd = -1;
    } else { /* none ready (or one being made: this takes a later id) */
        id = s->next_id;
        fd = seg_create(s->dir, s->dirfd, id, &status);
        if (fd < 0) {
            return status;
        }
        s->next_id++;
    }
    if (seg_add(s, id, 0) == NULL) {
        char path[PATH_MAX];

        seg_path(s, id, path, sizeof(path));
        close(fd);
        unlink(path);
        return KVP_ERR_NO_MEMORY;
    }
    if (s->wfd >= 0) {
        close(s->wfd);
    }
    old       = s->active ? seg_find(s, s->active) : NULL;
    s->wfd      = fd;
    s->sync_gen = s->app_gen;
    s->active = id;
    if (old != NULL && seg_may_go(s, old)) {
        seg_unlink(s, old);
    }
    return KVP_OK;
}

/* pwritev/preadv all of iov at off, resuming after partial transfers. */
static ssize_t xfer_all(int fd, struct iovec *iov, int cnt, uint64_t off, bool wr)
{
    size_t done = 0;

    while (cnt > 0) {
        ssize_t r = wr ? pwritev(fd, iov, cnt, (off_t)(off + done))
                       : preadv(fd, iov, cnt, (off_t)(off + done));

        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return r < 0 ? -1 : (ssize_t)done; /* 0 = end of file */
        }
        done += (size_t)r;
        while (cnt > 0 && (size_t)r >= iov->iov_len) {
            r -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + r;
            iov->iov_len -= (size_t)r;
        }
    }
    return (ssize_t)done;
}

kvp_status_t kvp_segs_reserve(kvp_segs_t *s, kvp_seg_ext_t *ext, size_t n, kvp_seg_resv_t *r)
{
    uint64_t    off;
    seg_file_t *f;

    memset(r, 0, sizeof(*r));
    r->fd = -1;
    for (size_t k = 0; k < n; k++) {
        if (((uintptr_t)ext[k].buf & (KVP_SEG_ALIGN - 1)) != 0) {
            KVP_LOG_ERROR(MOD, "segment append: page buffer %p is not %u-aligned", ext[k].buf,
                          KVP_SEG_ALIGN);
            return KVP_ERR_INVALID;
        }
    }
    if (n == 0) {
        return KVP_OK;
    }
    if (s->active == 0 || seg_find(s, s->active)->size >= s->roll) {
        kvp_status_t status = seg_roll(s);

        if (status != KVP_OK) {
            return status;
        }
    }
    r->fd = fcntl(s->wfd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        KVP_LOG_ERROR(MOD, "segment %016" PRIx64 ": cannot dup its write fd: %m", s->active);
        return KVP_ERR_IO;
    }
    f   = seg_find(s, s->active);
    off = f->size;
    for (size_t k = 0; k < n; k++) {
        ext[k].seg = f->id;
        ext[k].off = off;
        off += kvp_seg_span(ext[k].len);
    }
    r->seg   = f->id;
    r->off   = f->size;
    r->bytes = off - f->size;
    f->size  = off; /* the next reservation goes after it, written or not */
    f->pending++;
    return KVP_OK;
}

kvp_status_t kvp_segs_resv_write(const kvp_seg_resv_t *r, const kvp_seg_ext_t *ext, size_t n,
                                 bool sync)
{
    struct iovec iov[IOV_CAP];
    size_t       i = 0;

    while (i < n) {
        uint64_t off   = ext[i].off;
        size_t   bytes = 0;
        int      cnt   = 0;

        while (i + (size_t)cnt < n && cnt < IOV_CAP && (cnt == 0 || bytes < RUN_MAX)) {
            iov[cnt].iov_base = ext[i + (size_t)cnt].buf;
            iov[cnt].iov_len  = kvp_seg_span(ext[i + (size_t)cnt].len);
            bytes += iov[cnt].iov_len;
            cnt++;
        }
        if (xfer_all(r->fd, iov, cnt, off, true) != (ssize_t)bytes) {
            int e = errno;

            KVP_LOG_ERROR(MOD, "segment %016" PRIx64 " write of %zu bytes at %" PRIu64
                          " failed: %m", r->seg, bytes, off);
            return errno_status(e ? e : EIO);
        }
        i += (size_t)cnt;
    }
    if (sync && n > 0 && fdatasync(r->fd) != 0) {
        int e = errno;

        KVP_LOG_ERROR(MOD, "segment %016" PRIx64 " fdatasync failed: %m", r->seg);
        return errno_status(e);
    }
    return KVP_OK;
}

kvp_status_t kvp_segs_resv_end(kvp_segs_t *s, kvp_seg_resv_t *r, bool written, bool synced)
{
    seg_file_t  *f      = r->seg != 0 ? seg_find(s, r->seg) : NULL;
    kvp_status_t status = KVP_OK;

    if (f == NULL) { /* nothing reserved */
        return KVP_OK;
    }
    f->pending--;
    if (written) {
        s->written += r->bytes;
        if (f->id == s->active && !synced) {
            s->app_gen++; /* the next sync of the active file covers it */
        } else if (!synced && fdatasync(r->fd) != 0) { /* rolled away meanwhile: a later sync
                                                        * covers only the new active file */
            int e = errno;

            KVP_LOG_ERROR(MOD, "segment %016" PRIx64 " fdatasync failed: %m", r->seg);
            status = errno_status(e);
        }
    } else if (f->size == r->off + r->bytes) {
        f->size = r->off; /* the last reservation of its file: give its room back */
    }
    close(r->fd);
    r->fd = -1;
    /* written: the caller names the bytes next (same lock hold), so the file must stay; if that
     * fails, the open-time sweep reaps a file nothing names */
    if (!written && seg_may_go(s, f)) {
        seg_unlink(s, f);
    }
    return status;
}

kvp_status_t kvp_segs_append(kvp_segs_t *s, kvp_seg_ext_t *ext, size_t n, bool sync)
{
    kvp_seg_resv_t r;
    kvp_status_t   status = kvp_segs_reserve(s, ext, n, &r), end;

    if (status != KVP_OK || n == 0) {
        return status;
    }
    status = kvp_segs_resv_write(&r, ext, n, false);
    end    = kvp_segs_resv_end(s, &r, status == KVP_OK, false);
    status = status != KVP_OK ? status : end;
    return status == KVP_OK && sync ? kvp_segs_sync(s) : status;
}

kvp_status_t kvp_segs_sync(kvp_segs_t *s)
{
    if (s->wfd >= 0 && s->sync_gen < s->app_gen && fdatasync(s->wfd) != 0) {
        int e = errno;

        KVP_LOG_ERROR(MOD, "segment %016" PRIx64 " fdatasync failed: %m", s->active);
        return errno_status(e);
    }
    s->sync_gen = s->app_gen;
    return KVP_OK;
}

int kvp_segs_sync_begin(kvp_segs_t *s, uint64_t *gen_p)
{
    int fd;

    *gen_p = s->app_gen;
    if (s->wfd < 0 || s->sync_gen >= s->app_gen) {
        return -1;
    }
    fd = fcntl(s->wfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        KVP_LOG_ERROR(MOD, "segment %016" PRIx64 ": cannot dup its write fd: %m", s->active);
        return -2;
    }
    return fd;
}

kvp_status_t kvp_segs_sync_run(int fd)
{
    kvp_status_t status = KVP_OK;

    if (fdatasync(fd) != 0) {
        int e = errno;

        KVP_LOG_ERROR(MOD, "segment fdatasync failed: %m");
        status = errno_status(e);
    }
    close(fd);
    return status;
}

void kvp_segs_sync_end(kvp_segs_t *s, uint64_t gen)
{
    s->sync_gen = gen > s->sync_gen ? gen : s->sync_gen;
}

/* Close cached read fds, least recently used first, until fewer than max are open. A scan of
 * the table per close: it runs only when a file is opened past the cap, next to an open(). */
static void seg_rfd_trim(kvp_segs_t *s, size_t max)
{
    while (s->nrfd > max) {
        seg_file_t *lru = NULL;

        for (size_t i = 0; i < s->nfiles; i++) {
            seg_file_t *f = &s->files[i];

            if (f->rfd >= 0 && (lru == NULL || f->rused < lru->rused)) {
                lru = f;
            }
        }
        if (lru == NULL) { /* cannot happen: nrfd counts the open ones */
            s->nrfd = 0;
            return;
        }
        seg_rfd_close(s, lru);
    }
}

/* Out of fds: close every cached read fd but keep's, in one pass (reads in flight hold their
 * own dups, so none is in use). */
static void seg_rfd_drop_idle(kvp_segs_t *s, const seg_file_t *keep)
{
    for (size_t i = 0; i < s->nfiles; i++) {
        if (&s->files[i] != keep) {
            seg_rfd_close(s, &s->files[i]);
        }
    }
}

void kvp_segs_set_rfd_max(kvp_segs_t *s, size_t max)
{
    s->rfd_max = max > 0 ? max : kvp_segs_rfd_default();
    seg_rfd_trim(s, s->rfd_max);
}

/* The segment's read fd, opened on first use (closing the least recently used one when rfd_max
 * are open: a node with thousands of segment files holds at most rfd_max of them open; out of
 * fds, the cached ones are closed and the open tried once more); -1 with *err_p = errno when
 * open() failed (not logged here). */
static int seg_rfd_open(const char *path, bool *direct)
{
    int fd = open(path, O_RDONLY | O_DIRECT);

    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) { /* no O_DIRECT here (tmpfs) */
        fd = open(path, O_RDONLY);
    }
    return fd;
}

static int seg_rfd(kvp_segs_t *s, seg_file_t *f, int *err_p)
{
    f->rused = s->rtick;
    if (f->rfd < 0) {
        char path[PATH_MAX];

        seg_rfd_trim(s, s->rfd_max - 1);
        seg_path(s, f->id, path, sizeof(path));
        f->rfd = seg_rfd_open(path, &f->rdirect);
        if (f->rfd < 0 && (errno == EMFILE || errno == ENFILE) && s->nrfd > 0) {
            seg_rfd_drop_idle(s, NULL); /* out of fds: give back those kept idle */
            f->rfd = seg_rfd_open(path, &f->rdirect);
        }
        if (f->rfd < 0) {
            *err_p = errno; /* logged by the plan, once per read */
        } else {
            s->nrfd++;
        }
    }
    return f->rfd;
}

static int cmp_ext(const void *a, const void *b)
{
    const kvp_seg_ext_t *x = *(kvp_seg_ext_t *const *)a, *y = *(kvp_seg_ext_t *const *)b;

    if (x->seg != y->seg) {
        return x->seg < y->seg ? -1 : 1;
    }
    return x->off < y->off ? -1 : x->off > y->off;
}

/* A read's plan: the extents in disk order and, per extent, a read fd of its segment that the
 * plan owns (one dup per segment), so the I/O runs without the tier's lock while segments are
 * appended, rolled or unlinked meanwhile (an unlinked file stays readable through an open fd),
 * and while the cache of read fds closes the one it was duplicated from (rfd_max). */
struct kvp_seg_read {
    kvp_seg_ext_t **ord;
    int            *fd;     /* per extent; -1: its status is set already */
    bool           *direct; /* per extent: the fd is O_DIRECT (aligned buffers only) */
    size_t          n;
};

/* Read one extent into its (unaligned) buffer through an aligned bounce buffer. */
static kvp_status_t read_bounce(int fd, kvp_seg_ext_t *e)
{
    size_t       span = kvp_seg_span(e->len);
    void        *b    = kvp_aligned_alloc(KVP_SEG_ALIGN, span, "segment bounce");
    struct iovec v    = {b, span};
    ssize_t      r;

    if (b == NULL) {
        return KVP_ERR_NO_MEMORY;
    }
    r = xfer_all(fd, &v, 1, e->off, false);
    if (r >= (ssize_t)e->len) {
        memcpy(e->buf, b, e->len);
    }
    kvp_free(b);
    return r < 0 ? KVP_ERR_IO : (r < (ssize_t)e->len ? KVP_ERR_NOT_FOUND : KVP_OK);
}

static void read_plan_free(kvp_seg_read_t *p)
{
    for (size_t k = 0; k < p->n; k++) {
        if (p->fd[k] >= 0 && (k == 0 || p->fd[k] != p->fd[k - 1])) {
            close(p->fd[k]);
        }
    }
    kvp_free(p->ord);
    kvp_free(p->fd);
    kvp_free(p->direct);
    kvp_free(p);
}

kvp_seg_read_t *kvp_segs_read_plan(kvp_segs_t *s, kvp_seg_ext_t *ext, size_t n)
{
    kvp_seg_read_t *p = kvp_calloc(1, sizeof(*p), "segment read plan");
    size_t          m = n ? n : 1, nfail = 0;
    uint64_t        fail_id = 0;
    int             fail_err = 0;
    bool            fail_dup = false;

    if (p == NULL || (p->ord = kvp_malloc(m * sizeof(*p->ord), "segment read order")) == NULL ||
        (p->fd = kvp_malloc(m * sizeof(*p->fd), "segment read fds")) == NULL ||
        (p->direct = kvp_malloc(m * sizeof(*p->direct), "segment read fds")) == NULL) {
        KVP_LOG_ERROR(MOD, "no memory to read %zu pages", n);
        for (size_t k = 0; k < n; k++) {
            ext[k].status = KVP_ERR_NO_MEMORY;
        }
        if (p != NULL) {
            read_plan_free(p);
        }
        return NULL;
    }
    for (size_t k = 0; k < n; k++) {
        p->ord[k] = &ext[k];
    }
    qsort(p->ord, n, sizeof(*p->ord), cmp_ext);
    s->rtick++;
    for (size_t k = 0; k < n; k++) {
        seg_file_t *f;
        int         fd, err = ENOENT;

        if (k > 0 && p->ord[k]->seg == p->ord[k - 1]->seg) { /* the same segment's fd */
            p->fd[k]     = p->fd[k - 1];
            p->direct[k] = p->direct[k - 1];
            if (p->fd[k] < 0) {
                p->ord[k]->status = p->ord[k - 1]->status;
            }
            continue;
        }
        f  = seg_find(s, p->ord[k]->seg);
        fd = f != NULL ? seg_rfd(s, f, &err) : -1;
        if (f == NULL) { /* the caller says what it means (moved by a compaction, or lost) */
            KVP_LOG_DEBUG(MOD, "segment %016" PRIx64 " named by a locator is gone",
                          p->ord[k]->seg);
        }
        p->fd[k]     = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
        if (fd >= 0 && p->fd[k] < 0 && (errno == EMFILE || errno == ENFILE) && s->nrfd > 1) {
            seg_rfd_drop_idle(s, f); /* out of fds: the idle cached ones go, not this one */
            p->fd[k] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        }
        p->direct[k] = f != NULL && f->rdirect;
        if (fd >= 0 && p->fd[k] < 0) {
            err = errno;
        }
        if (f != NULL && p->fd[k] < 0 && nfail++ == 0) {
            fail_id  = f->id;
            fail_err = err;
            fail_dup = fd >= 0;
        }
        /* missing only when the segment is known gone (not in the table, or its file is not
         * there); a file that could not be opened otherwise (out of fds: EMFILE, ENFILE; EIO,
         * EACCES, ENOMEM) is a transient I/O error, so its pages are kept */
        p->ord[k]->status = p->fd[k] >= 0 ? KVP_OK
                                          : (fd < 0 && err == ENOENT ? KVP_ERR_NOT_FOUND
                                                                     : KVP_ERR_IO);
    }
    if (nfail > 0) { /* one line per read, not per file (out of fds, every file fails) */
        char path[PATH_MAX];

        seg_path(s, fail_id, path, sizeof(path));
        errno = fail_err;
        KVP_LOG_ERROR(MOD, "cannot %s segment %s: %m (%zu segment files of this read could not "
                      "be opened)", fail_dup ? "dup the read fd of" : "open", path, nfail);
    }
    p->n = n;
    return p;
}

void kvp_segs_read_run(kvp_seg_read_t *p)
{
    struct iovec iov[IOV_CAP];
    size_t       i = 0;

    while (i < p->n) {
        int      fd    = p->fd[i];
        bool     dir   = p->direct[i];
        uint64_t seg   = p->ord[i]->seg, off = p->ord[i]->off;
        size_t   bytes = 0;
        int      cnt   = 0;
        ssize_t  r;

        if (fd < 0) {
            i++; /* its status says why */
            continue;
        }
        if (dir && ((uintptr_t)p->ord[i]->buf & (KVP_SEG_ALIGN - 1)) != 0) {
            p->ord[i]->status = read_bounce(fd, p->ord[i]);
            i++;
            continue;
        }
        /* a run: same segment, back to back, aligned buffers */
        while (i + (size_t)cnt < p->n && cnt < IOV_CAP && bytes < RUN_MAX) {
            kvp_seg_ext_t *e = p->ord[i + (size_t)cnt];

            if (e->seg != seg || e->off != off + bytes ||
                (dir && ((uintptr_t)e->buf & (KVP_SEG_ALIGN - 1)) != 0)) {
                break;
            }
            iov[cnt].iov_base = e->buf;
            iov[cnt].iov_len  = kvp_seg_span(e->len);
            bytes += iov[cnt].iov_len;
            cnt++;
        }
        r = xfer_all(fd, iov, cnt, off, false);
        if (r < 0) {
            KVP_LOG_ERROR(MOD, "segment %016" PRIx64 " read of %zu bytes at %" PRIu64
                          " failed: %m", seg, bytes, off);
        }
        for (int k = 0; k < cnt; k++) {
            kvp_seg_ext_t *e = p->ord[i + (size_t)k];

            e->status = r < 0 ? KVP_ERR_IO
                              : (e->off + e->len <= off + (uint64_t)r ? KVP_OK : KVP_ERR_NOT_FOUND);
        }
        i += (size_t)cnt;
    }
    read_plan_free(p);
}

uint64_t kvp_segs_live_add(kvp_segs_t *s, uint64_t seg, int64_t bytes)
{
    seg_file_t *f = seg_find(s, seg);

    if (f == NULL) {
        return 0;
    }
    f->live += bytes;
    return seg_may_go(s, f) ? seg_unlink(s, f) : 0;
}

void kvp_segs_dead_later(kvp_segs_t *s, uint64_t seg, int64_t bytes)
{
    seg_file_t *f = seg_find(s, seg);

    if (f != NULL) {
        f->live -= bytes;
        f->unsynced++;
        s->unsynced++;
    }
}

int64_t kvp_segs_unnamed_dead(kvp_segs_t *s, uint64_t seg)
{
    seg_file_t *f = seg_find(s, seg);
    int64_t     live;

    if (f == NULL || f->id == s->active || f->pending > 0 || f->live <= 0) {
        return 0;
    }
    live = f->live;
    kvp_segs_dead_later(s, seg, live);
    return live;
}

bool kvp_segs_dead_waiting(const kvp_segs_t *s)
{
    return s->unsynced > 0;
}

uint64_t kvp_segs_dead_synced(kvp_segs_t *s, uint64_t *files_p)
{
    uint64_t freed = 0;

    for (size_t i = 0; s->unsynced > 0 && i < s->nfiles;) {
        seg_file_t *f = &s->files[i];
        bool        had = f->unsynced > 0;

        s->unsynced -= f->unsynced;
        f->unsynced = 0;
        if (had && seg_may_go(s, f)) { /* the table shifts down: the same i is the next file */
            freed += seg_unlink(s, f);
            if (files_p != NULL) {
                (*files_p)++;
            }
        } else {
            i++;
        }
    }
    s->unsynced = 0;
    return freed;
}

bool kvp_segs_holds(kvp_segs_t *s, uint64_t seg, uint64_t off, uint32_t len)
{
    seg_file_t *f = seg_find(s, seg);

    return f != NULL && off <= f->size && len <= f->size - off;
}

uint64_t kvp_segs_hold(kvp_segs_t *s, uint64_t seg, int delta)
{
    seg_file_t *f = seg_find(s, seg);

    if (f == NULL) {
        return 0;
    }
    if (delta > 0) {
        f->pending++;
        return 0;
    }
    f->pending--;
    return kvp_segs_live_add(s, seg, 0);
}

uint64_t kvp_segs_next(kvp_segs_t *s, uint64_t after)
{
    for (size_t i = 0; i < s->nfiles; i++) { /* sorted by id */
        if (s->files[i].id > after) {
            return s->files[i].id;
        }
    }
    return 0;
}

/* dead bytes of a segment file */
static uint64_t seg_dead(const seg_file_t *f)
{
    return f->live > 0 ? (f->size > (uint64_t)f->live ? f->size - (uint64_t)f->live : 0) : f->size;
}

size_t kvp_segs_victims(kvp_segs_t *s, double dead_ratio, uint64_t *ids, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < s->nfiles; i++) {
        const seg_file_t *f = &s->files[i];
        uint64_t          dead = seg_dead(f);
        size_t            pos;

        if (f->id == s->active || f->pending > 0 || f->size == 0 || dead == 0 ||
            (double)dead < dead_ratio * (double)f->size ||
            (f->live <= 0 && f->unsynced > 0)) { /* no page to move: it goes at the WAL sync */
            continue;
        }
        /* insert, deadest first, keeping the max deadest */
        pos = n;
        while (pos > 0 && seg_dead(seg_find(s, ids[pos - 1])) < dead) {
            pos--;
        }
        if (pos >= max) {
            continue;
        }
        n += n < max;
        memmove(&ids[pos + 1], &ids[pos], (n - 1 - pos) * sizeof(*ids));
        ids[pos] = f->id;
    }
    return n;
}

void kvp_segs_reap(kvp_segs_t *s)
{
    for (size_t i = 0; i < s->nfiles;) {
        if (seg_may_go(s, &s->files[i])) {
            seg_unlink(s, &s->files[i]);
        } else {
            i++;
        }
    }
}

void kvp_segs_stats(kvp_segs_t *s, uint64_t *files_p, uint64_t *file_bytes_p,
                    uint64_t *live_bytes_p, uint64_t *written_p)
{
    uint64_t bytes = 0, live = 0;

    for (size_t i = 0; i < s->nfiles; i++) {
        bytes += s->files[i].size;
        live += s->files[i].live > 0 ? (uint64_t)s->files[i].live : 0;
    }
    *files_p      = s->nfiles;
    *file_bytes_p = bytes;
    *live_bytes_p = live;
    *written_p    = s->written;
}
