/* child.c - a forked child ends with its parent (child.h): PR_SET_PDEATHSIG, then a check that
 * the parent did not die before the request (the child would have been re-parented already and
 * never get the signal). */
#include "kvpack/child.h"

#include <sys/prctl.h>
#include <unistd.h>

int kvp_child_end_with_parent(pid_t parent, int sig)
{
    if (prctl(PR_SET_PDEATHSIG, sig) != 0 || getppid() != parent) {
        return -1;
    }
    return 0;
}
