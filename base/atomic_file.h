/* Files written whole or not at all (saved weights and programs, disk cache
 * entries): a temporary beside the path, renamed over it once complete, so a
 * reader sees the old file or the new one, never half of one. And files
 * opened for reading without blocking. */
#ifndef LOOM_BASE_ATOMIC_FILE_H
#define LOOM_BASE_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct lm_atomic_file {
  int fd;           /* the temporary, open for writing */
  char *tmp;        /* its path (malloc'd), relative to dir */
  const char *path; /* where it goes, relative to dir */
  int dir;          /* AT_FDCWD, or a directory held open (lm_atomic_file_open_at) */
} lm_atomic_file;

/* Creates the temporary beside path (the rename stays in one file system), with
 * O_EXCL so two writers never share one. False with errno set (ENOMEM when out
 * of memory). */
bool lm_atomic_file_open(lm_atomic_file *f, const char *path, mode_t mode);
/* The same for `name` inside the directory open as dirfd, neither following
 * a symbolic link nor resolving the directory's path again. */
bool lm_atomic_file_open_at(lm_atomic_file *f, int dirfd, const char *name, mode_t mode);
/* Writes all of data (retrying short writes and EINTR); false with errno set.
 * A write that would pass the process's file size limit (ulimit -f) is not
 * made (EFBIG): the kernel would end the process with SIGXFSZ instead. */
bool lm_write_all(int fd, const void *data, size_t len);
/* Syncs (when sync), closes and renames the temporary over path. False with
 * errno set, the temporary removed; *what then says which step failed ("sync",
 * "close", "replace"). Either way f is finished. */
bool lm_atomic_file_commit(lm_atomic_file *f, bool sync, const char **what);
/* Closes and removes the temporary (after a failed write). */
void lm_atomic_file_abandon(lm_atomic_file *f);

/* open(path, O_RDONLY) that never waits: a FIFO or a device where a file
 * belongs opens at once (the caller refuses what fstat says is not a regular
 * file) instead of blocking until a writer comes. -1 with errno set. */
int lm_open_for_reading(const char *path);
/* lm_open_for_reading, then fstat: a regular file's descriptor and its size
 * in *size; or -1, why holding "cannot open: <reason>", "cannot stat:
 * <reason>" or "not a regular file" (the readers' messages name the file
 * around it). */
int lm_open_regular_file(const char *path, uint64_t *size, char *why, size_t why_len);
/* Reads exactly len bytes at offset, retrying short reads and EINTR: 1 when
 * all were read, 0 when the file ended first (*ended the offset where it
 * did), -1 on an error (errno set). */
int lm_read_at(int fd, uint64_t offset, void *dst, uint64_t len, uint64_t *ended);

#endif
