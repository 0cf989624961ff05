/* power_shim.c - an LD_PRELOAD model of what a power failure loses, for the crash tests: writes
 * to segment files (*.seg) and RocksDB write-ahead logs (*.log) stay in this process's memory and
 * reach the file only when it (any fd of the same inode) is fsync'd or fdatasync'd, so a SIGKILL
 * loses exactly the writes the page cache could lose. Table files and the MANIFEST go straight
 * through (RocksDB syncs them before it names them). Reads of a file with held writes apply them
 * first. KVP_POWER_SEG_SYNC_SLEEP_MS=N sleeps N ms after each segment sync, widening the window
 * between that sync and whatever the store does next; KVP_POWER_WAL_SYNC_SLEEP_MS=N likewise
 * after each WAL sync, so a kill often lands while what that sync made durable is all there is;
 * KVP_POWER_SEG_WRITE_SLEEP_MS=N after each segment write, so a stream of commits spans several
 * syncs.
 * A file unlinked (or renamed over) takes its held writes with it, as a power loss would: its
 * inode may be reused by the next file. $KVP_POWER_MARK names a file the shim creates when it first
 * holds a write back, so a test can tell the model was in effect (a shim that failed to load, or a
 * store writing through a call it does not take, left every check trivially true).
 * Loaded into test_crash's child only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef struct held {
    dev_t        dev;
    ino_t        ino;
    off_t        off;
    size_t       len;
    char        *data;
    struct held *next;
} held_t;

enum { OTHER = 0, SEGMENT = 1, WAL = 2 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static held_t         *head;
static size_t          nheld;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static ssize_t (*real_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);

static void init(void)
{
    if (real_write == NULL) {
        real_pwrite    = dlsym(RTLD_NEXT, "pwrite64");
        real_pwritev   = dlsym(RTLD_NEXT, "pwritev64");
        real_fsync     = dlsym(RTLD_NEXT, "fsync");
        real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
        real_preadv    = dlsym(RTLD_NEXT, "preadv64");
        real_pread     = dlsym(RTLD_NEXT, "pread64");
        real_write     = dlsym(RTLD_NEXT, "write");
    }
}

/* SEGMENT, WAL or OTHER for fd, and its stat */
static int kind(int fd, struct stat *sb)
{
    char    link[64], path[4096];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    if (n <= 4 || fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        return OTHER;
    }
    path[n] = 0;
    if (strcmp(path + n - 4, ".seg") == 0) {
        return SEGMENT;
    }
    return strcmp(path + n - 4, ".log") == 0 && strstr(path, "/LOG") == NULL ? WAL : OTHER;
}

static void nap(const char *env)
{
    const char *ms = getenv(env);

    if (ms != NULL) {
        struct timespec ts = {atoi(ms) / 1000, (long)(atoi(ms) % 1000) * 1000000L};

        nanosleep(&ts, NULL);
    }
}

static void hold(int k, const struct stat *sb, off_t off, const struct iovec *iov, int cnt)
{
    held_t *h = calloc(1, sizeof(*h));
    size_t  at = 0;

    if (h == NULL) {
        abort();
    }
    for (int i = 0; i < cnt; i++) {
        h->len += iov[i].iov_len;
    }
    if (posix_memalign((void **)&h->data, 4096, h->len ? h->len : 1) != 0) { /* O_DIRECT-able */
        abort();
    }
    for (int i = 0; i < cnt; i++) {
        memcpy(h->data + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    h->dev = sb->st_dev;
    h->ino = sb->st_ino;
    h->off = off;
    pthread_mutex_lock(&mu);
    held_t **pp = &head;
    while (*pp != NULL) { /* in order: a later write over the same bytes lands last */
        pp = &(*pp)->next;
    }
    *pp = h;
    if (nheld++ == 0 && getenv("KVP_POWER_MARK") != NULL) { /* the model is in effect */
        int fd = open(getenv("KVP_POWER_MARK"), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

        if (fd >= 0) {
            close(fd);
        }
    }
    pthread_mutex_unlock(&mu);
    if (k == SEGMENT) {
        nap("KVP_POWER_SEG_WRITE_SLEEP_MS");
    }
}

/* take the held writes of inode (dev, ino) off the list, in order, writing each to wfd first
 * when wfd >= 0 (a sync) or dropping it (the file's last name went) */
static void take(dev_t dev, ino_t ino, int wfd)
{
    held_t **pp, *h;

    pthread_mutex_lock(&mu);
    for (pp = &head; (h = *pp) != NULL;) {
        if (h->dev == dev && h->ino == ino) {
            if (wfd >= 0 && real_pwrite(wfd, h->data, h->len, h->off) != (ssize_t)h->len) {
                abort();
            }
            *pp = h->next;
            free(h->data);
            free(h);
            nheld--;
        } else {
            pp = &h->next;
        }
    }
    pthread_mutex_unlock(&mu);
}

/* write every held write of fd's inode to the file, in order */
static void apply(int fd, const struct stat *sb)
{
    char link[64];
    int  wfd = open((snprintf(link, sizeof(link), "/proc/self/fd/%d", fd), link), O_WRONLY);

    if (wfd < 0) { /* a buffered writer: the held bytes need not be O_DIRECT-aligned */
        abort();
    }
    take(sb->st_dev, sb->st_ino, wfd);
    close(wfd);
}

/* drop the held writes of path's inode (its last name is going) */
static void forget(int dirfd, const char *path)
{
    struct stat sb;

    if (fstatat(dirfd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
        sb.st_nlink <= 1) {
        take(sb.st_dev, sb.st_ino, -1);
    }
}

int unlink(const char *path)
{
    static int (*real)(const char *);

    real = real ? real : (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    forget(AT_FDCWD, path);
    return real(path);
}

int unlinkat(int dirfd, const char *path, int flags)
{
    static int (*real)(int, const char *, int);

    real = real ? real : (int (*)(int, const char *, int))dlsym(RTLD_NEXT, "unlinkat");
    if (!(flags & AT_REMOVEDIR)) {
        forget(dirfd, path);
    }
    return real(dirfd, path, flags);
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);

    real = real ? real : (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    forget(AT_FDCWD, to); /* the file renamed over */
    return real(from, to);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    struct stat sb;
    int         k;

    init();
    if ((k = kind(fd, &sb)) != OTHER) {
        off_t        pos = lseek(fd, 0, SEEK_CUR);
        struct iovec v   = {(void *)buf, n};

        hold(k, &sb, pos, &v, 1);
        lseek(fd, pos + (off_t)n, SEEK_SET);
        return (ssize_t)n;
    }
    return real_write(fd, buf, n);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    struct stat sb;
    int         k;

    init();
    if ((k = kind(fd, &sb)) != OTHER) {
        struct iovec v = {(void *)buf, n};

        hold(k, &sb, off, &v, 1);
        return (ssize_t)n;
    }
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return pwrite64(fd, buf, n, off); }

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    struct stat sb;
    int         k;

    init();
    if ((k = kind(fd, &sb)) != OTHER) {
        size_t len = 0;

        for (int i = 0; i < cnt; i++) {
            len += iov[i].iov_len;
        }
        hold(k, &sb, off, iov, cnt);
        return (ssize_t)len;
    }
    return real_pwritev(fd, iov, cnt, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pwritev64(fd, iov, cnt, off);
}

static int synced(int fd, int (*real)(int))
{
    struct stat sb;
    int         k, r;

    init();
    k = kind(fd, &sb);
    if (k != OTHER) {
        apply(fd, &sb);
    }
    r = real(fd);
    if (k != OTHER) {
        nap(k == SEGMENT ? "KVP_POWER_SEG_SYNC_SLEEP_MS" : "KVP_POWER_WAL_SYNC_SLEEP_MS");
    }
    return r;
}

int fdatasync(int fd) { return synced(fd, (init(), real_fdatasync)); }
int fsync(int fd) { return synced(fd, (init(), real_fsync)); }

ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    struct stat sb;

    init();
    if (__atomic_load_n(&nheld, __ATOMIC_RELAXED) > 0 && kind(fd, &sb) != OTHER) {
        apply(fd, &sb);
    }
    return real_preadv(fd, iov, cnt, off);
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return preadv64(fd, iov, cnt, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    struct stat sb;

    init();
    if (__atomic_load_n(&nheld, __ATOMIC_RELAXED) > 0 && kind(fd, &sb) != OTHER) {
        apply(fd, &sb);
    }
    return real_pread(fd, buf, n, off);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) { return pread64(fd, buf, n, off); }
