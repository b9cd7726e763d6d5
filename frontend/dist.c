/* Collectives across processes (loom_all_reduce, loom_broadcast,
 * loom_all_gather): nodes like any op's, run by runtime/dist.c as steps of
 * the realized graph or program. No gradient flows through them, as through
 * torch.distributed's. */
#include "runtime/dist.h"
#include "frontend/frontend.h"

static loom_tensor *collective(const char *op, const loom_tensor *t, lm_op kind, int reduce,
                               int root, int axis) {
  loom_tensor *err;
  if ((err = lm_check(op, t))) return err;
  const lm_node *x = t->node;
  int world;
  loom_status st = lm_dist_world(op, &world);
  if (st != LOOM_OK) return lm_error_recorded(st);
  loom_shape shape = x->shape;
  if (kind == LM_ALL_GATHER) {
    if ((err = lm_check_axis(op, &axis, shape.ndim))) return err;
    if (__builtin_mul_overflow(shape.dim[axis], (int64_t)world, &shape.dim[axis]) ||
        (err = lm_check_shape(op, &shape, x->dtype)))
      return err ? err
                 : lm_error(LOOM_ERR_SIZE, "%s: %lld x %d ranks overflows", op,
                            (long long)x->shape.dim[axis], world);
  }
  if (kind == LM_BROADCAST && (root < 0 || root >= world))
    return lm_error(LOOM_ERR_VALUE, "%s: root %d is not a rank of %d", op, root, world);
  if (kind == LM_ALL_REDUCE) {
    const char *name = lm_reduce_op_name(reduce);
    if (!name || reduce == LOOM_REDUCE_NONE)
      return lm_error(LOOM_ERR_VALUE, "%s: op %d is not LOOM_REDUCE_SUM, _MEAN, _MAX or _MIN", op,
                      reduce);
    if (x->dtype == LOOM_BOOL && reduce != LOOM_REDUCE_MAX && reduce != LOOM_REDUCE_MIN)
      return lm_error(LOOM_ERR_DTYPE, "%s: a bool tensor takes max (any) or min (all), not %s", op,
                      name);
    if (reduce == LOOM_REDUCE_MEAN && !loom_dtype_is_float(x->dtype))
      return lm_error(LOOM_ERR_DTYPE, "%s: a mean over ranks is of floats; t is %s", op,
                      loom_dtype_name(x->dtype));
  }
  lm_no_grad_push(); /* no gradient flows through a collective */
  lm_node *n = lm_node_new(kind, 1, (lm_node *const *)&t->node, shape, x->dtype, x->device);
  lm_no_grad_pop();
  if (n)
    n->arg.coll.reduce = reduce, n->arg.coll.root = root, n->arg.coll.axis = axis,
    n->arg.coll.world = world;
  return lm_result(n);
}

loom_tensor *loom_all_reduce(const loom_tensor *t, loom_reduction op) {
  return collective("loom_all_reduce", t, LM_ALL_REDUCE, (int)op, 0, 0);
}

loom_tensor *loom_broadcast(const loom_tensor *t, int root) {
  return collective("loom_broadcast", t, LM_BROADCAST, LOOM_REDUCE_NONE, root, 0);
}

loom_tensor *loom_all_gather(const loom_tensor *t, int axis) {
  return collective("loom_all_gather", t, LM_ALL_GATHER, LOOM_REDUCE_NONE, 0, axis);
}
