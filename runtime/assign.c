/* Lazy assignment: a tensor handle is rebound to a new value (an optimizer's
 * update of a parameter or of its state), computed by the next realization
 * together with whatever is realized then, so a training step is one program.
 * Pending assignments are per thread, as the scopes are. */
#include <stdlib.h>

#include "runtime/runtime.h"

/* One pending assignment: the handle, the value it now names and the one it
 * named before (both held), so that a run that refuses a value can give each
 * handle its old value back (lm_pending_rollback). */
typedef struct pending_assignment {
  loom_tensor *handle;
  lm_node *value, *before;
} pending_assignment;

static _Thread_local pending_assignment *pending;
static _Thread_local int npending, pending_cap;

int lm_pending_count(void) { return npending; }
lm_node *lm_pending_at(int i) { return pending[i].value; }

int lm_pending_holds(const lm_node *n) {
  int holds = 0;
  for (int i = 0; i < npending; i++) holds += pending[i].before == n;
  return holds;
}

void lm_pending_clear(void) {
  for (int i = 0; i < npending; i++) {
    lm_node_release(pending[i].value);
    lm_node_release(pending[i].before);
    lm_tensor_release(pending[i].handle);
  }
  npending = 0;
  free(pending);
  pending = NULL;
  pending_cap = 0;
}

/* The handle t's node becomes `to` in place of `from` (one reference each way),
 * gradients accumulating into t as before. */
static void rebind(loom_tensor *t, lm_node *from, lm_node *to) {
  t->node = to;
  if (from->grad_leaf == t) from->grad_leaf = NULL;
  if (t->requires_grad) {
    to->requires_grad = true;
    to->grad_leaf = t;
  }
  lm_node_release(from);
}

void lm_pending_rollback(void) {
  for (int i = npending - 1; i >= 0; i--) { /* the latest first: t = f(t) twice */
    pending_assignment *a = &pending[i];
    if (a->handle->node != a->value) continue; /* assigned again since, outside */
    lm_node_retain(a->before);
    rebind(a->handle, a->value, a->before);
  }
  lm_pending_clear();
}

bool lm_pending_reserve(int extra) {
  if (npending + extra <= pending_cap) return true;
  int ncap = pending_cap ? 2 * pending_cap : 16;
  while (ncap < npending + extra) ncap *= 2;
  pending_assignment *grown = realloc(pending, sizeof *pending * (size_t)ncap);
  if (!grown) return false;
  pending = grown, pending_cap = ncap;
  return true;
}

loom_status lm_assign_node(loom_tensor *t, lm_node *value) {
  lm_node *old = t->node;
  if (!lm_is_computed(value)) {
    if (!lm_pending_reserve(1)) {
      lm_node_release(value);
      return lm_fail(LOOM_ERR_OOM, "loom_assign: out of memory");
    }
    lm_node_retain(value);
    lm_node_retain(old);
    t->refs++; /* held by the assignment, not by a scope (lm_tensor_ref's) */
    pending[npending++] = (pending_assignment){t, value, old};
  }
  rebind(t, old, value);
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
