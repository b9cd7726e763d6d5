/* libFuzzer target: the safetensors loader (loom_params_load, its non-strict
 * casting form, loom_safetensors_read) on any bytes.
 *
 * The bytes are a file, loaded into a collection of five tensors (every
 * loom dtype, a scalar and an empty one). Whatever the file, the load must
 * not crash or leak, must return a known status with a message, and must
 * either change nothing (refused) or leave every tensor realized and
 * readable (accepted). Seeds: tests/fuzz/corpus/safetensors. */
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

static loom_params *ps;
static int fd = -1;
static char path[64];
static unsigned char before[256], after[256];

static void add(const char *name, const void *data, loom_shape shape, loom_dtype dtype) {
  loom_tensor *t = loom_from_data(data, shape, dtype, LOOM_CPU);
  loom_status st = loom_dtype_is_float(dtype) ? loom_params_add(ps, name, t)
                                              : loom_params_add_buffer(ps, name, t);
  if (st) fprintf(stderr, "fuzz_safetensors: adding %s: %s\n", name, loom_last_error()), abort();
  loom_free(t);
}

/* The collection the files are loaded into (its names match the seeds),
 * made again after each accepted load, so every input meets the same one. */
static void make_collection(void) {
  const float w[6] = {1, 2, 3, 4, 5, 6};
  const double s = 0.5;
  const int64_t ids[3] = {7, 8, 9};
  const uint8_t mask[4] = {1, 0, 1, 1};
  const int32_t none[1] = {0};
  ps = loom_params_new();
  add("layer.weight", w, LOOM_SHAPE(2, 3), LOOM_F32);
  add("scale", &s, LOOM_SHAPE0, LOOM_F64);
  add("ids", ids, LOOM_SHAPE(3), LOOM_I64);
  add("mask", mask, LOOM_SHAPE(4), LOOM_BOOL);
  add("empty", none, LOOM_SHAPE(0, 2), LOOM_I32);
}

static void setup(void) {
  make_collection();
  /* The file lives in memory; the loader opens it by path like any other. */
  fd = memfd_create("fuzz.safetensors", 0);
  if (fd < 0) perror("memfd_create"), abort();
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
}

/* Every value of the collection, concatenated. */
static size_t values(unsigned char *out) {
  size_t used = 0;
  for (int i = 0; i < loom_params_count(ps); i++) {
    loom_tensor *t = loom_params_at(ps, i);
    size_t bytes = (size_t)loom_numel(t) * loom_dtype_size(loom_dtype_of(t));
    if (used + bytes > sizeof before || loom_copy_to_host(t, out + used, bytes) != LOOM_OK)
      fprintf(stderr, "fuzz_safetensors: cannot read '%s': %s\n", loom_params_name(ps, i),
              loom_last_error()),
          abort();
    used += bytes;
    loom_free(t);
  }
  return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ps) setup();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
  size_t n = values(before);
  loom_clear_error();
  loom_status st = loom_params_load(ps, path);
  if (st < 0 || st >= LOOM_NUM_STATUS) abort();
  if (st != LOOM_OK && !loom_last_error()) abort(); /* every refusal says why */
  size_t m = values(after);
  if (st != LOOM_OK && (m != n || memcmp(before, after, n) != 0)) {
    fprintf(stderr, "fuzz_safetensors: a refused load (%s) changed values\n", loom_last_error());
    abort();
  }
  if (st == LOOM_OK) { /* accepted: a mask stays 0 or 1 */
    const unsigned char *mask = after + 6 * 4 + 8 + 3 * 8;
    for (int i = 0; i < 4; i++)
      if (mask[i] > 1) abort();
    loom_params_free(ps);
    make_collection();
  }
  /* the same bytes non-strict with casting, and read whole into named
   * tensors: a known status with a message, or every tensor readable */
  loom_clear_error();
  loom_load_report report;
  st = loom_params_load_ex(ps, path, (loom_load_opts){.non_strict = true, .cast = true}, &report);
  if (st < 0 || st >= LOOM_NUM_STATUS || (st != LOOM_OK && !loom_last_error())) abort();
  loom_load_report_free(&report);
  loom_params_free(ps);
  make_collection();
  loom_clear_error();
  loom_params *all = loom_safetensors_read(path, LOOM_CPU);
  if (!all && !loom_last_error()) abort();
  for (int i = 0; all && i < loom_params_count(all); i++) {
    loom_tensor *t = loom_params_at(all, i);
    if (loom_realize(t) != LOOM_OK) abort();
    loom_free(t);
  }
  loom_params_free(all);
  return 0;
}
