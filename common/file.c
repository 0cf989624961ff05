/* file.c - kvp_file_open, kvp_file_link_target (see file.h). */
#include "kvpack/file.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

FILE *kvp_file_open(const char *path, const char *mode)
{
    FILE       *f = fopen(path, mode);
    struct stat st;

    if (f != NULL && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        errno = EISDIR;
        return NULL;
    }
    return f;
}

char *kvp_file_link_target(const char *path)
{
    char       *cur = strdup(path);
    struct stat st;

    for (int hops = 0; cur != NULL; hops++) {
        char        target[PATH_MAX];
        ssize_t     n;
        const char *slash;
        char       *next;

        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
            return cur; /* not there (yet), or not a link: this is the file */
        }
        n = readlink(cur, target, sizeof(target) - 1);
        if (n < 0 || hops == 40) {
            free(cur);
            errno = n < 0 ? errno : ELOOP;
            return NULL;
        }
        target[n] = 0;
        slash     = strrchr(cur, '/');
        if (target[0] == '/' || slash == NULL) { /* absolute, or relative to "." (cur's dir) */
            next = strdup(target);
        } else { /* relative to the link's own directory */
            size_t dir = (size_t)(slash - cur) + 1;

            next = malloc(dir + (size_t)n + 1);
            if (next != NULL) {
                memcpy(next, cur, dir);
                memcpy(next + dir, target, (size_t)n + 1);
            }
        }
        free(cur);
        cur = next;
    }
    errno = ENOMEM;
    return NULL;
}
