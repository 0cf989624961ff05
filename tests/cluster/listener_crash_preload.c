/* listener_crash_preload.c - an LD_PRELOAD shim for tests: while $KVP_TEST_LISTENER_CRASH is set,
 * ucp_listener_destroy kills the process with SIGSEGV instead of destroying the listener. It
 * stands in for UCX 1.13's listener-teardown race (openucx/ucx#11087: a client that connects
 * while kvpackd shuts down can make the destroy read the freed listener), deterministically, so
 * a test can check that a node crashing there has made its store durable first.
 * Without the variable it only forwards. Test-only: never linked into kvpack. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

typedef struct ucp_listener *ucp_listener_h; /* opaque here: the shim never looks inside */

void ucp_listener_destroy(ucp_listener_h listener)
{
    void (*next)(ucp_listener_h);

    if (getenv("KVP_TEST_LISTENER_CRASH") != NULL) {
        struct rlimit none = {0, 0};

        setrlimit(RLIMIT_CORE, &none); /* no core file for an expected crash */
        signal(SIGSEGV, SIG_DFL); /* not UCX's handler: the process dies as the race kills it */
        raise(SIGSEGV);
    }
    next = (void (*)(ucp_listener_h))dlsym(RTLD_NEXT, "ucp_listener_destroy");
    if (next != NULL) {
        next(listener);
    }
}
