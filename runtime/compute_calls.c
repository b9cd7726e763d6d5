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

double loom_item(loom_tensor *t) {
  if (check_tensor("loom_item", t) != LOOM_OK) return NAN;
  int64_t numel = lm_shape_numel(&t->node->shape);
  if (numel != 1) {
    char sb[128];
    lm_fail(LOOM_ERR_SHAPE, "loom_item: needs exactly one element, shape %s has %lld",
            lm_shape_str(&t->node->shape, sb, sizeof sb), (long long)numel);
    return NAN;
  }
  if (lm_realize_nodes(&t->node, 1) != LOOM_OK) return NAN;
  double value[1]; /* room for any dtype's element, aligned */
  if (lm_data_copy("loom_item", LOOM_CPU, value, t->node->device, t->node->data,
                   loom_dtype_size(t->node->dtype)) != LOOM_OK)
    return NAN;
  return lm_dtype_load_double(t->node->dtype, value);
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
