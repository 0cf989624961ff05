/* proc.h - child-process helpers for CLI commands that run nodes and client roles (see proc.c). */
#ifndef KVPACK_CLI_PROC_H
#define KVPACK_CLI_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* In a child a command forked (a node, a server, a client role): SIGTERM when the command dies
 * (a crash, SIGKILL), so nothing it started lives on without it; a node stops gracefully. parent:
 * the command's pid taken before fork. Fork from the command's main thread: the signal follows
 * the thread that forked. */
void kvp_proc_child_init(pid_t parent);

/* fork + execvp(argv[0], argv) (a name without '/' is looked up in PATH), stdout and stderr
 * appended to log_path when it is not NULL; returns the pid or -1. A program that cannot be run
 * exits 127. The child ends with this process (kvp_proc_child_init). */
pid_t kvp_proc_spawn(char *const argv[], const char *log_path);
/* Exit status (0..255, 128+signal), -1 on error, -2 when timeout_ms passed (child left running). */
int   kvp_proc_wait(pid_t pid, unsigned timeout_ms);
/* SIGTERM, wait up to timeout_ms, then SIGKILL. Returns the exit status as kvp_proc_wait. */
int   kvp_proc_stop(pid_t pid, unsigned timeout_ms);
/* rm -rf dir (a run's own temporary directory), waited for up to timeout_ms: 0 when it went. */
int   kvp_proc_rm_rf(const char *dir, unsigned timeout_ms);
/* Path of a binary next to the running executable (e.g. "kvpackd"); 0 when it exists. */
int   kvp_proc_sibling(const char *name, char *out, size_t out_len);
/* Wait until path holds a complete line (ends in '\n'); copy it to buf. -1 if pid exits first,
 * -2 on timeout. */
int   kvp_proc_wait_file(const char *path, pid_t pid, unsigned timeout_ms, char *buf, size_t buf_len);
/* A node in a forked child (kvp_node_main, the same code as kvpackd) on 127.0.0.1, a free port,
 * DRAM only with budget (e.g. "8G"); its ready file goes in dir. Returns the port (0: it did not
 * start in 30 s) and the child in *pid_p (stop it with kvp_proc_stop). */
unsigned short kvp_proc_node_start(const char *dir, const char *budget, pid_t *pid_p);
/* A loopback TCP port that was free a moment ago, or -1. */
int   kvp_proc_free_port(void);
/* "key value" result files: the last line starting with key. -1 when absent. */
int    kvp_kv_file_get(const char *path, const char *key, char *val, size_t val_len);
double kvp_kv_file_num(const char *path, const char *key); /* NaN when absent */

#endif
