/* proc.c - child processes for CLI commands that orchestrate nodes and clients (demo, model
 * --node): spawn with an argv, wait with a deadline, stop gracefully, find sibling binaries, and
 * read "key value" result files written by child roles. */
#include "proc.h"

#include "kvpack/child.h"
#include "kvpack/node.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void kvp_proc_child_init(pid_t parent)
{
    if (kvp_child_end_with_parent(parent, SIGTERM) != 0) {
        _exit(1); /* the command is gone already */
    }
}

pid_t kvp_proc_spawn(char *const argv[], const char *log_path)
{
    pid_t parent = getpid(), pid = fork();

    if (pid == 0) {
        kvp_proc_child_init(parent);
        if (log_path != NULL) {
            int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);

            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        execvp(argv[0], argv);
        fprintf(stderr, "kvpack: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pid < 0) {
        fprintf(stderr, "kvpack: fork failed: %s\n", strerror(errno));
    }
    return pid;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

int kvp_proc_wait(pid_t pid, unsigned timeout_ms)
{
    int status;

    for (unsigned waited = 0;; waited += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);

        if (r == pid) {
            if (WIFEXITED(status)) {
                return WEXITSTATUS(status);
            }
            return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        }
        if (r < 0) {
            return -1;
        }
        if (waited >= timeout_ms) {
            return -2;
        }
        sleep_ms(10);
    }
}

int kvp_proc_stop(pid_t pid, unsigned timeout_ms)
{
    int rc;

    if (pid <= 0) {
        return -1;
    }
    kill(pid, SIGTERM);
    rc = kvp_proc_wait(pid, timeout_ms);
    if (rc == -2) {
        kill(pid, SIGKILL);
        rc = kvp_proc_wait(pid, 5000);
    }
    return rc;
}

int kvp_proc_rm_rf(const char *dir, unsigned timeout_ms)
{
    char *argv[] = {"/bin/rm", "-rf", (char *)dir, NULL};

    return kvp_proc_wait(kvp_proc_spawn(argv, NULL), timeout_ms);
}

int kvp_proc_sibling(const char *name, char *out, size_t out_len)
{
    char    self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char   *slash;

    if (n <= 0) {
        return -1;
    }
    self[n] = '\0';
    slash   = strrchr(self, '/');
    if (slash == NULL) {
        return -1;
    }
    *slash = '\0';
    if ((size_t)snprintf(out, out_len, "%s/%s", self, name) >= out_len) {
        return -1;
    }
    return access(out, X_OK) == 0 ? 0 : -1;
}

int kvp_proc_wait_file(const char *path, pid_t pid, unsigned timeout_ms, char *buf, size_t buf_len)
{
    for (unsigned waited = 0; waited <= timeout_ms; waited += 20) {
        FILE *f = fopen(path, "r");

        if (f != NULL) {
            size_t n = fread(buf, 1, buf_len - 1, f);

            fclose(f);
            buf[n] = '\0';
            if (n > 0 && buf[n - 1] == '\n') {
                return 0;
            }
        }
        if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid) {
            return -1; /* the child died before it was ready */
        }
        sleep_ms(20);
    }
    return -2;
}

int kvp_kv_file_get(const char *path, const char *key, char *val, size_t val_len)
{
    FILE  *f = fopen(path, "r");
    char   line[512];
    size_t klen = strlen(key);
    int    found = -1;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            snprintf(val, val_len, "%s", line + klen + 1);
            val[strcspn(val, "\n")] = '\0';
            found = 0;
        }
    }
    fclose(f);
    return found;
}

double kvp_kv_file_num(const char *path, const char *key)
{
    char val[128];

    if (kvp_kv_file_get(path, key, val, sizeof(val)) != 0) {
        return 0.0 / 0.0;
    }
    return strtod(val, NULL);
}

unsigned short kvp_proc_node_start(const char *dir, const char *budget, pid_t *pid_p)
{
    char            ready[PATH_MAX], line[32];
    unsigned        port = 0;
    pid_t           parent;

    snprintf(ready, sizeof(ready), "%s/ready", dir);
    unlink(ready);
    parent = getpid();
    *pid_p = fork();
    if (*pid_p < 0) {
        return 0;
    }
    if (*pid_p == 0) {
        char *argv[] = {"node", "--listen", "127.0.0.1:0", "--dram-budget", (char *)budget,
                        "--ready-file", ready, NULL};

        kvp_proc_child_init(parent);
        if (freopen("/dev/null", "w", stdout) == NULL) {
            _exit(1);
        }
        _exit(kvp_node_main("kvpack bench node", 7, argv));
    }
    if (kvp_proc_wait_file(ready, *pid_p, 30000, line, sizeof(line)) != 0 ||
        sscanf(line, "%u", &port) != 1) {
        return 0;
    }
    unlink(ready);
    return (unsigned short)port;
}

int kvp_proc_free_port(void)
{
    struct sockaddr_in a;
    socklen_t          len = sizeof(a);
    int                fd  = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}
