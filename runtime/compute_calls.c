/* The calls that compute: realize, eval, item, copy to host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static loom_status check_tensor(const char *op, const loom_tensor *t) {
  return lm_check_handle(op, t);
}

loom_status loom_realize(loom_tensor *t) {
  loom_status st = check_tensor("loom_realize", t);
  if (st != LOOM_OK) return st;
  return lm_realize_nodes(&t->node, 1);
}

loom_status loom_eval(loom_tensor *const *ts, int n) {
  if (n < 0) return lm_fail(LOOM_ERR_VALUE, "loom_eval: negative count %d", n);
  if (n > 0 && !ts) return lm_fail(LOOM_ERR_NULL, "loom_eval: tensor list is NULL");
  lm_node **nodes = malloc(sizeof(lm_node *) * (size_t)(n ? n : 1));
  if (!nodes) return lm_fail(LOOM_ERR_OOM, "loom_eval: out of memory");
  loom_status st = LOOM_OK;
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    st = check_tensor("loom_eval", ts[i]);
    if (st == LOOM_OK) nodes[i] = ts[i]->node;
  }
  if (st == LOOM_OK) st = lm_realize_nodes(nodes, n);
  free(nodes);
  return st;
}

/* The one element of t, realized, copied to *element (room for any dtype). */
static loom_status one_element(const char *op, loom_tensor *t, double element[1]) {
  loom_status st = check_tensor(op, t);
  if (st != LOOM_OK) return st;
  int64_t numel = lm_shape_numel(&t->node->shape);
  if (numel != 1) {
    char sb[128];
    return lm_fail(LOOM_ERR_SHAPE, "%s: needs exactly one element, shape %s has %lld", op,
                   lm_shape_str(&t->node->shape, sb, sizeof sb), (long long)numel);
  }
  if ((st = lm_realize_nodes(&t->node, 1)) != LOOM_OK) return st;
  return lm_data_copy(op, LOOM_CPU, element, t->node->device, t->node->data,
                      loom_dtype_size(t->node->dtype));
}

double loom_item(loom_tensor *t) {
  double element[1];
  if (one_element("loom_item", t, element) != LOOM_OK) return NAN;
  return lm_dtype_load_double(t->node->dtype, element);
}

loom_status loom_item_i64(loom_tensor *t, int64_t *value) {
  if (!value) return lm_fail(LOOM_ERR_NULL, "loom_item_i64: value is NULL");
  loom_status st = check_tensor("loom_item_i64", t);
  if (st != LOOM_OK) return st;
  if (lm_dtype_is_float(t->node->dtype))
    return lm_fail(LOOM_ERR_DTYPE, "loom_item_i64: the tensor is %s (loom_item reads floats)",
                   loom_dtype_name(t->node->dtype));
  double element[1];
  if ((st = one_element("loom_item_i64", t, element)) != LOOM_OK) return st;
  if (t->node->dtype == LOOM_I64) /* the one integer dtype a double does not hold exactly */
    memcpy(value, element, sizeof *value);
  else
    *value = (int64_t)lm_dtype_load_double(t->node->dtype, element);
  return LOOM_OK;
}

loom_status loom_copy_to_host(loom_tensor *t, void *dst, size_t bytes) {
  loom_status st = check_tensor("loom_copy_to_host", t);
  if (st != LOOM_OK) return st;
  size_t need = (size_t)lm_shape_numel(&t->node->shape) * loom_dtype_size(t->node->dtype);
  if (bytes != need) {
    char sb[128];
    return lm_fail(LOOM_ERR_BUFFER, "loom_copy_to_host: %zu bytes given, %s %s needs %zu", bytes,
                   loom_dtype_name(t->node->dtype), lm_shape_str(&t->node->shape, sb, sizeof sb),
                   need);
  }
  if (need && !dst) return lm_fail(LOOM_ERR_NULL, "loom_copy_to_host: dst is NULL");
  if ((st = lm_realize_nodes(&t->node, 1)) != LOOM_OK) return st;
  return lm_data_copy("loom_copy_to_host", LOOM_CPU, dst, t->node->device, t->node->data, need);
}
