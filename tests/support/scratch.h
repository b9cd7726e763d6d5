/* Scratch space for tests that write files. */
#ifndef LOOM_TESTS_SCRATCH_H
#define LOOM_TESTS_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>

/* Removes a directory of plain files; errors are ignored. */
void check_remove_dir(const char *dir);
/* Writes len bytes as the whole file (a message on stderr when it cannot). */
void check_write_file(const char *path, const void *data, size_t len);
/* The whole file (free it) and its length, or NULL. */
unsigned char *check_read_file(const char *path, size_t *len);
/* Whether the file's first 64 KiB hold `what`. */
bool check_file_contains(const char *path, const char *what);
/* dir/lib<name>.so (an exported library) opened with dlopen, or NULL (a
 * failed check). */
void *check_open_library(const char *dir, const char *name);
/* Checks that dir/lib<name>.so needs only the C library's parts (libc, libm,
 * libpthread, libdl), as an exported library must: no dynamic loader either. */
void check_library_needs_only_libc(const char *dir, const char *name);
/* The exported library h's function <name>_<what>, or NULL (a failed check). */
void *check_library_symbol(void *h, const char *name, const char *what);

#endif
