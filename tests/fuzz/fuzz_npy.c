/* libFuzzer target: the .npy reader (loom_npy_read) on any bytes.
 *
 * The bytes are a file. Whatever it holds, reading must not crash, leak or
 * allocate more than the file's size, and must give either NULL with a known
 * status and a message naming the file, or a computed tensor whose values
 * written back (loom_npy_write) and read again are the same bytes.
 * Seeds: tests/fuzz/corpus/npy. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom.h"

static int fd = -1;
static char path[64], back_path[4096];

static char dir[4000];

static void remove_dir(void) {
  unlink(back_path);
  rmdir(dir);
}

static void setup(void) {
  /* The file lives in memory; the reader opens it by path like any other. */
  fd = memfd_create("fuzz.npy", 0);
  if (fd < 0) perror("memfd_create"), abort();
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/loom-fuzz-npy-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) perror("mkdtemp"), abort();
  snprintf(back_path, sizeof back_path, "%s/back.npy", dir);
  atexit(remove_dir);
}

/* The tensor's bytes (free them). */
static void *values(loom_tensor *t, size_t *bytes) {
  *bytes = (size_t)loom_numel(t) * loom_dtype_size(loom_dtype_of(t));
  void *data = malloc(*bytes ? *bytes : 1);
  if (!data || loom_copy_to_host(t, data, *bytes) != LOOM_OK) abort();
  return data;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fd < 0) setup();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
  loom_clear_error();
  loom_tensor *t = loom_npy_read(path, LOOM_CPU);
  if (!t) {
    loom_status st = loom_last_status();
    if (st <= LOOM_OK || st >= LOOM_NUM_STATUS || !loom_last_error()) abort();
    if (!strstr(loom_last_error(), path)) abort(); /* every refusal names the file */
    return 0;
  }
  size_t bytes, again_bytes;
  void *first = values(t, &bytes);
  if (bytes > size) abort(); /* every value came from the file */
  if (loom_dtype_of(t) == LOOM_BOOL)
    for (size_t i = 0; i < bytes; i++)
      if (((unsigned char *)first)[i] > 1) abort();
  if (loom_npy_write(t, back_path) != LOOM_OK) abort();
  loom_tensor *again = loom_npy_read(back_path, LOOM_CPU);
  if (!again || loom_dtype_of(again) != loom_dtype_of(t)) abort();
  void *second = values(again, &again_bytes);
  if (again_bytes != bytes || memcmp(first, second, bytes) != 0) abort();
  free(first), free(second);
  loom_free(t), loom_free(again);
  unlink(back_path);
  return 0;
}
