/*
 * The weights of an exported library too large to embed (io/export.c,
 * LM_EXPORT_EMBED_LIMIT): EXPORT_WEIGHTS_FILE beside the library, mapped at
 * the first call (map_weights, through weights_once) and checked before any
 * call uses it: its header (io/export.h: EXPORT_WEIGHTS_HEADER bytes, the
 * magic EXPORT_WEIGHTS_MAGIC, the data's length EXPORT_WEIGHTS_BYTES and its
 * FNV-1a 64) and its length. io/export_source.c copies this file into
 * <name>_model.c after defining those numbers; weights_mapped stays NULL when
 * the file is missing or corrupt.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_once_t weights_once = PTHREAD_ONCE_INIT;
static const unsigned char *weights_mapped; /* written once, under weights_once */

static uint64_t read_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void map_weights(void) {
  Dl_info info;
  if (!dladdr((void *)&map_weights, &info) || !info.dli_fname) return;
  char path[4096];
  const char *slash = strrchr(info.dli_fname, '/');
  int dirlen = slash ? (int)(slash - info.dli_fname + 1) : 0;
  if (snprintf(path, sizeof path, "%.*s%s", dirlen, info.dli_fname, EXPORT_WEIGHTS_FILE) >=
      (int)sizeof path)
    return;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
  if (fd < 0) return;
  struct stat st;
  size_t want = EXPORT_WEIGHTS_HEADER + (size_t)EXPORT_WEIGHTS_BYTES;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != want) {
    close(fd);
    return;
  }
  const unsigned char *m = mmap(NULL, want, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = EXPORT_WEIGHTS_HEADER; i < want; i++) h = (h ^ m[i]) * 1099511628211ull;
  if (memcmp(m, EXPORT_WEIGHTS_MAGIC, 8) != 0 || read_u64(m + 8) != EXPORT_WEIGHTS_BYTES ||
      read_u64(m + 16) != h) {
    munmap((void *)m, want);
    return;
  }
  weights_mapped = m + EXPORT_WEIGHTS_HEADER;
}
