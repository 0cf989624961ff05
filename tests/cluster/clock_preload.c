/* clock_preload.c - an LD_PRELOAD shim for tests: once the file $KVP_TEST_CLOCK_JUMP exists, the
 * process reads CLOCK_REALTIME $KVP_TEST_CLOCK_JUMP_S seconds ahead of the kernel's. That is what
 * it sees when the system clock is stepped back that far just after its last reading (an NTP
 * step, a VM resume, `date -s`), without changing the machine's clock. Other clocks are passed
 * through. Without the variables it only forwards. Test-only: never linked into kvpack. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int (*next_clock_gettime)(clockid_t, struct timespec *);

/* Looked up once, before any thread of the program runs. */
__attribute__((constructor)) static void clock_init(void)
{
    next_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT,
                                                                      "clock_gettime");
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    const char *file = getenv("KVP_TEST_CLOCK_JUMP"), *by = getenv("KVP_TEST_CLOCK_JUMP_S");
    int         rc   = next_clock_gettime(id, ts);

    if (rc == 0 && id == CLOCK_REALTIME && file != NULL && by != NULL && access(file, F_OK) == 0) {
        ts->tv_sec += atol(by);
    }
    return rc;
}
