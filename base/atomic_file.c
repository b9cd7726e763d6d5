/* See atomic_file.h. */
#include "base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static _Atomic unsigned long long temp_counter;

bool lm_atomic_file_open(lm_atomic_file *f, const char *path, mode_t mode) {
  return lm_atomic_file_open_at(f, AT_FDCWD, path, mode);
}

bool lm_atomic_file_open_at(lm_atomic_file *f, int dirfd, const char *path, mode_t mode) {
  size_t len = strlen(path) + 64;
  f->path = path;
  f->dir = dirfd;
  f->fd = -1;
  f->tmp = malloc(len);
  if (!f->tmp) {
    errno = ENOMEM;
    return false;
  }
  for (int tries = 0; tries < 100; tries++) {
    snprintf(f->tmp, len, "%s.tmp.%ld.%llu", path, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&temp_counter, 1));
    f->fd = openat(dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (f->fd >= 0) return true;
    if (errno != EEXIST) break;
  }
  int saved = errno;
  free(f->tmp);
  f->tmp = NULL;
  errno = saved;
  return false;
}

/* Whether writing len more bytes at fd's end stays under RLIMIT_FSIZE. */
static bool within_size_limit(int fd, size_t len) {
  struct rlimit lim;
  struct stat st;
  if (getrlimit(RLIMIT_FSIZE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return true;
  off_t at = lseek(fd, 0, SEEK_CUR);
  if (at < 0 && fstat(fd, &st) == 0) at = st.st_size;
  return at >= 0 && (uint64_t)at + len <= (uint64_t)lim.rlim_cur;
}

bool lm_write_all(int fd, const void *data, size_t len) {
  if (!within_size_limit(fd, len)) {
    errno = EFBIG;
    return false;
  }
  const char *p = data;
  while (len > 0) {
    size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
    ssize_t put = write(fd, p, chunk);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return false;
    if (put == 0) {
      errno = EIO;
      return false;
    }
    p += put, len -= (size_t)put;
  }
  return true;
}

static void finish(lm_atomic_file *f, bool remove) {
  if (remove) unlinkat(f->dir, f->tmp, 0);
  free(f->tmp);
  f->tmp = NULL;
  f->fd = -1;
}

bool lm_atomic_file_commit(lm_atomic_file *f, bool sync, const char **what) {
  const char *failed = NULL;
  if (sync && fsync(f->fd) != 0) failed = "sync";
  int saved = errno;
  if (close(f->fd) != 0 && !failed) failed = "close", saved = errno;
  if (!failed && renameat(f->dir, f->tmp, f->dir, f->path) != 0) failed = "replace", saved = errno;
  finish(f, failed != NULL);
  if (what) *what = failed;
  errno = saved;
  return failed == NULL;
}

void lm_atomic_file_abandon(lm_atomic_file *f) {
  int saved = errno;
  if (f->fd >= 0) close(f->fd);
  finish(f, true);
  errno = saved;
}

int lm_open_for_reading(const char *path) {
  int fd;
  do fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;
  int flags = fcntl(fd, F_GETFL); /* blocking reads again, for what is a file */
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

int lm_open_regular_file(const char *path, uint64_t *size, char *why, size_t why_len) {
  int fd = lm_open_for_reading(path);
  if (fd < 0) {
    snprintf(why, why_len, "cannot open: %s", strerror(errno));
    return -1;
  }
  struct stat info;
  if (fstat(fd, &info) != 0)
    snprintf(why, why_len, "cannot stat: %s", strerror(errno));
  else if (!S_ISREG(info.st_mode))
    snprintf(why, why_len, "not a regular file");
  else {
    *size = (uint64_t)info.st_size;
    return fd;
  }
  close(fd);
  return -1;
}

int lm_read_at(int fd, uint64_t offset, void *dst, uint64_t len, uint64_t *ended) {
  unsigned char *p = dst;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
    ssize_t got = pread(fd, p, chunk, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) {
      *ended = offset;
      return 0;
    }
    p += got, offset += (uint64_t)got, len -= (uint64_t)got;
  }
  return 1;
}
