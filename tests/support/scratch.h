/* Scratch space for tests that write files. */
#ifndef LOOM_TESTS_SCRATCH_H
#define LOOM_TESTS_SCRATCH_H

#include <stdbool.h>

/* Removes a directory of plain files; errors are ignored. */
void check_remove_dir(const char *dir);
/* Whether the file's first 64 KiB hold `what`. */
bool check_file_contains(const char *path, const char *what);

#endif
