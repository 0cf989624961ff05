/* child.h - a forked child that must not outlive the process that forked it (a node a test or a
 * command started, a decode role, a server): one way, used by the CLI, the model runner and the
 * tests. */
#ifndef KVPACK_CHILD_H
#define KVPACK_CHILD_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* In the child, right after fork: deliver sig (SIGTERM for a graceful stop, SIGKILL) to this
 * process when parent dies. parent: the forking process's pid taken before fork. Returns 0, or -1
 * when parent is already gone (or the request failed): the caller then exits at once. Fork from
 * the thread that lives as long as the process (main): Linux sends the signal when the forking
 * thread ends. */
int kvp_child_end_with_parent(pid_t parent, int sig);

#ifdef __cplusplus
}
#endif

#endif
