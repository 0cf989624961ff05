/* gate_preload.c - an LD_PRELOAD shim for tests: while $KVP_TEST_GATE names a file that does not
 * exist yet, reads of kvpackd's segment files (*.seg, the SSD tier's page bytes) wait for it, so
 * a test can hold a cold session's restore on the disk for as long as it likes without timing.
 * Likewise $KVP_TEST_OPEN_GATE holds the store open's listing of its segment directory (opendir
 * of .../seg), so a test can hold a node inside its open, $KVP_TEST_WRITE_GATE holds writes
 * of segment files (pwritev: a spill), so a test can hold a node inside its stop-time spill, and
 * $KVP_TEST_FSYNC_GATE holds every fsync, so a test can hold `kvpack get` between writing its
 * file beside the target and renaming it.
 * Each thread that waits creates "$KVP_TEST_GATE.waiting.<tid>" (the test counts these: how many
 * restores are inside their disk read at once). Without the variable it only forwards.
 * Test-only: never linked into kvpack. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int is_segment(int fd)
{
    char   link[64], path[4096];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    if (n < 4) {
        return 0;
    }
    path[n] = '\0';
    return strcmp(path + n - 4, ".seg") == 0;
}

static void gate_hold(const char *gate)
{
    char mark[4096];

    if (gate == NULL || access(gate, F_OK) == 0) {
        return;
    }
    snprintf(mark, sizeof(mark), "%s.waiting.%ld", gate, (long)gettid());
    close(open(mark, O_CREAT | O_WRONLY, 0600));
    while (access(gate, F_OK) != 0) {
        usleep(10000);
    }
}

static void gate_wait(int fd)
{
    if (getenv("KVP_TEST_GATE") != NULL && is_segment(fd)) {
        gate_hold(getenv("KVP_TEST_GATE"));
    }
}

static ssize_t (*next_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*next_pwritev)(int, const struct iovec *, int, off_t);
static DIR *(*next_opendir)(const char *);
static int (*next_fsync)(int);
static ssize_t (*next_pread)(int, void *, size_t, off_t);

/* Looked up once, before any thread of the program runs. */
__attribute__((constructor)) static void gate_init(void)
{
    next_preadv = (ssize_t (*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "preadv");
    next_pwritev = (ssize_t (*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    next_pread  = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    next_opendir = (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
    next_fsync   = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
}

DIR *opendir(const char *name)
{
    size_t n = strlen(name);

    if (next_opendir == NULL) { /* called by another library's constructor, before ours */
        next_opendir = (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
    }
    if (n >= 4 && strcmp(name + n - 4, "/seg") == 0) {
        gate_hold(getenv("KVP_TEST_OPEN_GATE"));
    }
    return next_opendir(name);
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    gate_wait(fd);
    return next_preadv(fd, iov, cnt, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    if (getenv("KVP_TEST_WRITE_GATE") != NULL && is_segment(fd)) {
        gate_hold(getenv("KVP_TEST_WRITE_GATE"));
    }
    return next_pwritev(fd, iov, cnt, off);
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
    gate_wait(fd);
    return next_pread(fd, buf, len, off);
}

int fsync(int fd)
{
    gate_hold(getenv("KVP_TEST_FSYNC_GATE"));
    return next_fsync(fd);
}
