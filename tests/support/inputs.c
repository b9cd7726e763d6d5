#include <stdlib.h>

#include "check.h"
#include "inputs.h"

loom_tensor *check_filled(loom_shape s, unsigned seed, loom_device device) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; d++) n *= s.dim[d];
  float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
  check_fill_uniform(x, n, seed);
  loom_tensor *t = loom_from_data(x, s, LOOM_F32, device);
  free(x);
  return t;
}
