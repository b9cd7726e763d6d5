/* Tensor handles: creation, reference counting, and the questions a user asks
 * of a tensor without computing it. */
#include <stdlib.h>

#include "runtime/runtime.h"

loom_tensor *lm_tensor_wrap(lm_node *node) {
  if (!node) return lm_error(LOOM_ERR_OOM, "out of memory recording a node");
  loom_tensor *t = calloc(1, sizeof *t);
  if (!t) {
    lm_node_release(node);
    return lm_error(LOOM_ERR_OOM, "out of memory creating a tensor handle");
  }
  t->refs = 1;
  t->node = node;
  lm_stat_add(LM_STAT_NODES_RECORDED, 1);
  if (lm_scope_track(t)) return t;
  lm_tensor_release(t);
  return lm_error(LOOM_ERR_OOM, "out of memory registering a tensor with its scope");
}

loom_tensor *lm_tensor_ref(const loom_tensor *t) {
  loom_tensor *m = (loom_tensor *)t;
  if (lm_is_static_error(m)) return m;
  m->refs++;
  if (lm_scope_track(m)) return m;
  m->refs--; /* the caller's reference keeps it alive */
  return lm_error(LOOM_ERR_OOM, "out of memory registering a tensor with its scope");
}

void lm_tensor_release(loom_tensor *t) {
  if (!t || lm_is_static_error(t) || --t->refs > 0) return;
  if (t->node && t->node->grad_leaf == t) t->node->grad_leaf = NULL;
  lm_tensor_release(t->grad_of);
  lm_node_release(t->grad);
  lm_node_release(t->node);
  free(t->message);
  /* volatile: a store right before free() is otherwise removed as dead */
  *(volatile uint32_t *)&t->freed = LM_HANDLE_FREED;
  free(t);
}

static const char *const freed_message = "the tensor was freed (a handle used after loom_free)";

loom_status lm_check_handle(const char *op, const loom_tensor *t) {
  if (!t) return lm_fail(LOOM_ERR_NULL, "%s: tensor is NULL", op);
  if (lm_is_freed(t)) return lm_fail(LOOM_ERR_NULL, "%s: %s", op, freed_message);
  if (t->status) return lm_fail(t->status, "%s: %s", op, t->message);
  if (!t->node) return lm_fail(LOOM_ERR_INTERNAL, "%s: tensor has no node", op);
  return LOOM_OK;
}

loom_tensor *loom_retain(loom_tensor *t) {
  if (!t) return lm_error(LOOM_ERR_NULL, "loom_retain: tensor is NULL");
  if (lm_is_freed(t)) return lm_error(LOOM_ERR_NULL, "loom_retain: %s", freed_message);
  return lm_tensor_ref(t);
}

void loom_free(loom_tensor *t) {
  if (!t) return;
  if (lm_is_freed(t)) {
    lm_fail(LOOM_ERR_NULL, "loom_free: the tensor was already freed");
    return;
  }
  lm_scope_untrack(t);
  lm_tensor_release(t);
}

loom_status loom_status_of(const loom_tensor *t) {
  return !t || lm_is_freed(t) ? LOOM_ERR_NULL : t->status;
}

const char *loom_error_message(const loom_tensor *t) {
  if (!t) return "tensor is NULL";
  return t->status ? t->message : NULL;
}

static const loom_shape empty_shape = {0, {0}};

loom_shape loom_shape_of(const loom_tensor *t) {
  return t && t->node ? t->node->shape : empty_shape;
}
loom_dtype loom_dtype_of(const loom_tensor *t) { return t && t->node ? t->node->dtype : LOOM_F32; }
loom_device loom_device_of(const loom_tensor *t) {
  return t && t->node ? t->node->device : LOOM_CPU;
}
int64_t loom_numel(const loom_tensor *t) {
  return t && t->node ? lm_shape_numel(&t->node->shape) : 0;
}
int loom_ndim(const loom_tensor *t) { return t && t->node ? t->node->shape.ndim : 0; }
bool loom_is_realized(const loom_tensor *t) { return t && t->node && lm_is_computed(t->node); }
