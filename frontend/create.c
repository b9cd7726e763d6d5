/* Tensor creation: copies of host data, constants, ranges. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static loom_tensor *check_new(const char *name, const loom_shape *shape, loom_dtype dtype,
                              loom_device device) {
  loom_tensor *err;
  if ((err = lm_check_dtype(name, dtype)) || (err = lm_check_shape(name, shape, dtype)) ||
      (err = lm_check_device(name, device)))
    return err;
  return NULL;
}

/* A tensor holding a copy of host data, on device. */
static loom_tensor *leaf(const char *name, const void *data, loom_shape shape, loom_dtype dtype,
                         loom_device device) {
  lm_node *n;
  loom_status st = lm_leaf_copy(name, shape, dtype, device, data, LOOM_CPU, &n);
  return st != LOOM_OK ? lm_error_recorded(st) : lm_result(n);
}

loom_tensor *loom_from_data(const void *data, loom_shape shape, loom_dtype dtype,
                            loom_device device) {
  const char *name = "loom_from_data";
  loom_tensor *err;
  if ((err = check_new(name, &shape, dtype, device))) return err;
  size_t bytes = (size_t)lm_shape_numel(&shape) * loom_dtype_size(dtype);
  if (!data && bytes) return lm_error(LOOM_ERR_NULL, "%s: data is NULL", name);
  if (dtype != LOOM_BOOL) return leaf(name, data, shape, dtype, device);
  /* keep bools canonical (0 or 1) whatever the caller wrote */
  unsigned char *canon = malloc(bytes ? bytes : 1);
  if (!canon) return lm_error(LOOM_ERR_OOM, "%s: out of memory for %zu bytes", name, bytes);
  for (size_t i = 0; i < bytes; i++) canon[i] = ((const unsigned char *)data)[i] != 0;
  loom_tensor *t = leaf(name, canon, shape, dtype, device);
  free(canon);
  return t;
}

static loom_tensor *constant(const char *name, loom_shape shape, double value, loom_dtype dtype,
                             loom_device device) {
  loom_tensor *err;
  if ((err = check_new(name, &shape, dtype, device)) || (err = lm_check_fill(name, dtype, value)))
    return err;
  lm_node *n = nb_const(value, shape, dtype, device);
  return lm_result(nb_user_sized(n, name, nb_all_dims(&shape)));
}

loom_tensor *loom_full(loom_shape shape, double value, loom_dtype dtype, loom_device device) {
  return constant("loom_full", shape, value, dtype, device);
}
loom_tensor *loom_zeros(loom_shape shape, loom_dtype dtype, loom_device device) {
  return constant("loom_zeros", shape, 0.0, dtype, device);
}
loom_tensor *loom_ones(loom_shape shape, loom_dtype dtype, loom_device device) {
  return constant("loom_ones", shape, 1.0, dtype, device);
}
loom_tensor *loom_scalar(double value, loom_dtype dtype, loom_device device) {
  return constant("loom_scalar", LOOM_SHAPE0, value, dtype, device);
}

static loom_tensor *full_like(const char *name, const loom_tensor *t, double value) {
  loom_tensor *err;
  if ((err = lm_check(name, t)) || (err = lm_check_fill(name, t->node->dtype, value))) return err;
  lm_node *n = nb_const(value, t->node->shape, t->node->dtype, t->node->device);
  if (n && !n->made_by) n->made_by = name; /* (its sizes are t's: they follow, not fixed) */
  return lm_result(n);
}
loom_tensor *loom_zeros_like(const loom_tensor *t) { return full_like("loom_zeros_like", t, 0); }
loom_tensor *loom_ones_like(const loom_tensor *t) { return full_like("loom_ones_like", t, 1); }
loom_tensor *loom_full_like(const loom_tensor *t, double value) {
  return full_like("loom_full_like", t, value);
}

loom_tensor *loom_arange(double start, double stop, double step, loom_dtype dtype,
                         loom_device device) {
  const char *name = "loom_arange";
  if (!isfinite(start) || !isfinite(stop) || !isfinite(step))
    return lm_error(LOOM_ERR_VALUE, "%s: start %g, stop %g and step %g must be finite", name, start,
                    stop, step);
  if (step == 0) return lm_error(LOOM_ERR_VALUE, "%s: step must not be zero", name);
  double count = ceil((stop - start) / step);
  if (count < 0) count = 0;
  if (count > 9.0e18) return lm_error(LOOM_ERR_SIZE, "%s: %g elements is too many", name, count);
  loom_shape shape = LOOM_SHAPE((int64_t)count);
  loom_tensor *err;
  if ((err = check_new(name, &shape, dtype, device))) return err;
  lm_node *n = lm_node_new(LM_IOTA, 0, NULL, shape, dtype, device);
  if (n) {
    n->arg.iota.start = start;
    n->arg.iota.step = step;
  }
  return lm_result(nb_user_sized(n, name, nb_all_dims(&shape)));
}

loom_tensor *loom_input(const char *name, loom_shape shape, loom_dtype dtype, loom_device device) {
  const char *op = "loom_input";
  loom_tensor *err;
  if (!name) return lm_error(LOOM_ERR_NULL, "%s: name is NULL", op);
  if (!lm_is_name(name, strlen(name)))
    return lm_error(LOOM_ERR_VALUE,
                    "%s: name '%.80s' is not 1-64 letters, digits or '_' (not starting with a "
                    "digit)",
                    op, name);
  if ((err = check_new(op, &shape, dtype, device))) return err;
  char *label = strdup(name);
  lm_node *n = label ? lm_node_new(LM_INPUT, 0, NULL, shape, dtype, device) : NULL;
  if (!n) {
    free(label);
    return lm_result(NULL);
  }
  n->label = label;
  return lm_result(n);
}
