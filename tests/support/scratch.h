/* Scratch space for tests that write files. */
#ifndef LOOM_TESTS_SCRATCH_H
#define LOOM_TESTS_SCRATCH_H

#include <stdbool.h>

/* Removes a directory of plain files; errors are ignored. */
void check_remove_dir(const char *dir);
/* Whether the file's first 64 KiB hold `what`. */
bool check_file_contains(const char *path, const char *what);
/* dir/lib<name>.so (an exported library) opened with dlopen, or NULL (a
 * failed check). */
void *check_open_library(const char *dir, const char *name);
/* The exported library h's function <name>_<what>, or NULL (a failed check). */
void *check_library_symbol(void *h, const char *name, const char *what);

#endif
