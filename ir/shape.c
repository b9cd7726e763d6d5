/* Shape arithmetic shared by every folder. */
#include <stdio.h>

#include "ir/ir.h"

int64_t lm_shape_numel(const loom_shape *s) {
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++) {
    if (s->dim[d] == 0) return 0;
  }
  for (int d = 0; d < s->ndim; d++) {
    if (__builtin_mul_overflow(n, s->dim[d], &n)) return -1;
  }
  return n;
}

bool lm_shape_eq(const loom_shape *a, const loom_shape *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->dim[d] != b->dim[d]) return false;
  return true;
}

const char *lm_shape_str(const loom_shape *s, char *buf, size_t len) {
  size_t used = 0;
  if (len == 0) return buf;
  buf[0] = 0;
  /* A shape a caller made up may claim more dims than it holds (found by
   * fuzz_ops: loom_expand's message read dim[8]). */
  if (s->ndim < 0 || s->ndim > LOOM_MAX_DIMS) {
    snprintf(buf, len, "(%d dims)", s->ndim);
    return buf;
  }
  used += (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < s->ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, d ? ",%lld" : "%lld", (long long)s->dim[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

void lm_shape_strides(const loom_shape *s, int64_t *strides) {
  int64_t st = 1;
  for (int d = s->ndim - 1; d >= 0; d--) {
    strides[d] = st;
    st *= s->dim[d] > 0 ? s->dim[d] : 1;
  }
}
