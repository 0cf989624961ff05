/* file.c - kvp_file_open (see file.h). */
#include "kvpack/file.h"

#include <errno.h>
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
