/* file.h - opening a file a user names (a .kvd, a model, a tokenizer, a text, a trace, a token-id
 * file): one way, which refuses a directory at once. fopen takes a directory, and the first read
 * (EISDIR) or ftell (LONG_MAX: "out of memory" for a buffer that size) then fails with a
 * misleading message. */
#ifndef KVPACK_FILE_H
#define KVPACK_FILE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fopen(path, mode), and NULL with errno EISDIR when path is a directory; the caller reports
 * strerror(errno) ("Is a directory") as for any other failed open. */
FILE *kvp_file_open(const char *path, const char *mode);

#ifdef __cplusplus
}
#endif
#endif
