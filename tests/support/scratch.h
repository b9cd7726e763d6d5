/* Scratch space for tests that write files. */
#ifndef LOOM_TESTS_SCRATCH_H
#define LOOM_TESTS_SCRATCH_H

/* Removes a directory of plain files; errors are ignored. */
void check_remove_dir(const char *dir);

#endif
