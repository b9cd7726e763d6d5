/* Lazy assignment: a tensor handle is rebound to a new value (an optimizer's
 * update of a parameter or of its state), computed by the next realization
 * together with whatever is realized then, so a training step is one program.
 * Pending assignments are per thread, as the scopes are. */
#include <stdlib.h>

#include "runtime/runtime.h"

static _Thread_local lm_node **pending;
static _Thread_local int npending, pending_cap;

int lm_pending_count(void) { return npending; }
lm_node *lm_pending_at(int i) { return pending[i]; }

void lm_pending_clear(void) {
  for (int i = 0; i < npending; i++) lm_node_release(pending[i]);
  npending = 0;
  free(pending);
  pending = NULL;
  pending_cap = 0;
}

bool lm_pending_reserve(int extra) {
  if (npending + extra <= pending_cap) return true;
  int ncap = pending_cap ? 2 * pending_cap : 16;
  while (ncap < npending + extra) ncap *= 2;
  lm_node **grown = realloc(pending, sizeof(lm_node *) * (size_t)ncap);
  if (!grown) return false;
  pending = grown, pending_cap = ncap;
  return true;
}

static bool push_pending(lm_node *n) {
  if (!lm_pending_reserve(1)) return false;
  lm_node_retain(n);
  pending[npending++] = n;
  return true;
}

loom_status lm_assign_node(loom_tensor *t, lm_node *value) {
  if (!lm_is_computed(value) && !push_pending(value)) {
    lm_node_release(value);
    return lm_fail(LOOM_ERR_OOM, "loom_assign: out of memory");
  }
  lm_node *old = t->node;
  t->node = value;
  if (old->grad_leaf == t) old->grad_leaf = NULL;
  if (t->requires_grad) {
    value->requires_grad = true;
    value->grad_leaf = t;
  }
  lm_node_release(old);
  return LOOM_OK;
}

loom_status loom_assign(loom_tensor *t, const loom_tensor *value) {
  loom_status st = lm_check_handle("loom_assign", t);
  if (!st) st = lm_check_handle("loom_assign", value);
  if (st) return st;
  char a[128], b[128];
  if (!lm_shape_eq(&t->node->shape, &value->node->shape) || t->node->dtype != value->node->dtype ||
      t->node->device.type != value->node->device.type ||
      t->node->device.index != value->node->device.index)
    return lm_fail(LOOM_ERR_SHAPE, "loom_assign: %s %s cannot take a %s %s value",
                   loom_dtype_name(t->node->dtype), lm_shape_str(&t->node->shape, a, sizeof a),
                   loom_dtype_name(value->node->dtype),
                   lm_shape_str(&value->node->shape, b, sizeof b));
  if (t->grad_of) { /* loom_grad's handle: the gradient itself is set, now */
    loom_tensor *owner = t->grad_of;
    lm_node_retain(value->node);
    lm_node_release(owner->grad);
    owner->grad = value->node;
    lm_node_retain(value->node);
    lm_node_release(t->node);
    t->node = value->node;
    return LOOM_OK;
  }
  lm_node_retain(value->node);
  return lm_assign_node(t, value->node);
}
