/* file.h - opening a file a user names (a .kvd, a model, a tokenizer, a text, a trace, a token-id
 * file): one way, which refuses a directory at once. fopen takes a directory, and the first read
 * (EISDIR) or ftell (LONG_MAX: "out of memory" for a buffer that size) then fails with a
 * misleading message. And the file an output path names when it is a symlink. */
#ifndef KVPACK_FILE_H
#define KVPACK_FILE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fopen(path, mode), and NULL with errno EISDIR when path is a directory; the caller reports
 * strerror(errno) ("Is a directory") as for any other failed open. */
FILE *kvp_file_open(const char *path, const char *mode);

/* The file that writing path would write: path with every symlink of its last component
 * followed, a dangling one too (the file a shell redirection would create), so a file written
 * beside it and renamed replaces the target and the link stays. Owned by the caller (free); path
 * itself copied when it is no link. NULL with errno (ELOOP past 40 links, ENOMEM). */
char *kvp_file_link_target(const char *path);

#ifdef __cplusplus
}
#endif
#endif
