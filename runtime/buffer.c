/* Buffers behind computed tensors: 64-byte aligned (a cache line, a full
 * AVX-512 vector), counted in the stats. */
#include <stdlib.h>

#include "runtime/runtime.h"

void *lm_buffer_alloc(size_t bytes) {
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes) return NULL;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (p) lm_stat_bytes((int64_t)bytes);
  return p;
}

void lm_buffer_free(void *data, size_t bytes) {
  if (!data) return;
  free(data);
  lm_stat_bytes(-(int64_t)bytes);
}
