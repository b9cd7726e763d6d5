/* Split reductions: a reduction with few outputs and much input runs in two
 * kernels so that every thread (or GPU block) has work: partial results over
 * parts of its longest reduced axis, then their combination. The CPU's part
 * count is fixed, so the result does not depend on the thread count. */
#include <math.h>

#include "passes/plan_internal.h"

/* A reduction with few outputs and much input runs in two kernels so every
 * thread has work: partial results over parts of its longest reduced axis,
 * then their combination. On the CPU, SPLIT_PARTS parts for at most
 * SPLIT_MAX_OUTER outputs; the count is fixed (not the thread count), so the
 * result is the same whatever the number of threads. A GPU runs one block per
 * output of a long reduction and wants thousands of blocks in flight: there a
 * reduction to at most GPU_SPLIT_MAX_OUTER outputs splits into about
 * GPU_SPLIT_BLOCKS / outputs parts of at least GPU_MIN_PART elements each. */
#define SPLIT_PARTS 16
#define GPU_SPLIT_BLOCKS 2048
#define GPU_SPLIT_MAX_OUTER 512
#define GPU_MIN_PART 4096

/* (SPLIT_MAX_OUTER and SPLIT_MIN_REDUCED, shared with row kernels, are in plan_internal.h.) */

/* ------------------------------------------------------------ split reductions */

/* Keeps a planning temporary (released after its step is lowered); NULL and
 * *oom set when it could not be made. */
lm_node *lm_temp(temps *t, lm_node *n, bool *oom) {
  if (!n) {
    *oom = true;
  } else if (t->n < 64) {
    t->nodes[t->n++] = n;
  } else {
    lm_node_release(n);
    n = NULL;
  }
  return n;
}

static bool split_identity(const lm_node *r, double *identity) {
  if (r->op == LM_RSUM)
    *identity = 0;
  else if (r->op == LM_RMAX && loom_dtype_is_float(r->dtype))
    *identity = -INFINITY;
  else if (r->op == LM_RMIN && loom_dtype_is_float(r->dtype))
    *identity = INFINITY;
  else if (r->op == LM_RLSE) /* partial log-sum-exps combine by log-sum-exp */
    *identity = -INFINITY;
  else
    return false;
  return true;
}

/* How many parts reduction r (outer outputs of total / outer inputs each, the
 * longest reduced axis len long) splits into on its device; 0: none. */
static int64_t split_parts(const lm_node *r, int64_t outer, int64_t total, int64_t len) {
  if (outer <= 0 || total / outer < SPLIT_MIN_REDUCED) return 0;
  if (r->device.type == LOOM_DEVICE_CPU)
    return outer <= SPLIT_MAX_OUTER && len >= SPLIT_PARTS ? SPLIT_PARTS : 0;
  if (outer > GPU_SPLIT_MAX_OUTER) return 0;
  int64_t parts = GPU_SPLIT_BLOCKS / outer, most = total / outer / GPU_MIN_PART;
  if (parts > most) parts = most;
  if (parts > len) parts = len;
  return parts >= 2 ? parts : 0;
}

/* Builds partial = reduce(reshape(pad(src))) and final = reduce(partial) for
 * reduction r; returns final (shaped like r with the part axis kept as 1 ...
 * in the same output order), or NULL when r is not worth splitting (or
 * *oom, when memory ran out). The caller gives partial its position and
 * memory. */
lm_node *lm_split_reduction(const lm_node *r, temps *t, bool *oom) {
  const lm_node *src = r->src[0];
  int64_t outer = lm_shape_numel(&r->shape), total = lm_shape_numel(&src->shape);
  if (src->shape.ndim >= LOOM_MAX_DIMS) return NULL;
  int axis = -1;
  for (int d = 0; d < src->shape.ndim; d++)
    if ((r->arg.axes & (1u << d)) && (axis < 0 || src->shape.dim[d] > src->shape.dim[axis]))
      axis = d;
  if (axis < 0) return NULL;
  int64_t len = src->shape.dim[axis], parts = split_parts(r, outer, total, len);
  if (parts == 0) return NULL;
  int64_t chunk = (len + parts - 1) / parts;
  if (r->device.type != LOOM_DEVICE_CPU) parts = (len + chunk - 1) / chunk; /* none all padding */
  double identity;
  bool exact = len % parts == 0;
  if (!split_identity(r, &identity) && !(exact && r->op != LM_ARGMAX && r->op != LM_ARGMIN))
    return NULL;
  lm_node *cur = (lm_node *)src;
  if (!exact) {
    loom_shape padded = src->shape;
    padded.dim[axis] = chunk * parts;
    cur = lm_temp(t, lm_node_new(LM_PAD, 1, &cur, padded, src->dtype, src->device), oom);
    if (!cur) return NULL;
    cur->arg.pad.value = identity;
  }
  loom_shape split = {src->shape.ndim + 1, {0}};
  uint32_t inner_axes = 0;
  for (int d = 0, o = 0; d < src->shape.ndim; d++) {
    if (d == axis) {
      split.dim[o++] = parts;
      split.dim[o] = chunk;
      inner_axes |= 1u << o++;
    } else {
      if (r->arg.axes & (1u << d)) inner_axes |= 1u << o;
      split.dim[o++] = src->shape.dim[d];
    }
  }
  lm_node *reshaped =
      lm_temp(t, lm_node_new(LM_RESHAPE, 1, &cur, split, src->dtype, src->device), oom);
  if (!reshaped) return NULL;
  loom_shape pshape = split, fshape = split;
  for (int d = 0; d < split.ndim; d++)
    if (inner_axes & (1u << d)) pshape.dim[d] = fshape.dim[d] = 1;
  fshape.dim[axis] = 1;
  lm_node *partial = lm_temp(t, lm_node_new(r->op, 1, &reshaped, pshape, r->dtype, r->device), oom);
  if (!partial) return NULL;
  partial->arg.axes = inner_axes;
  lm_node *final = lm_temp(t, lm_node_new(r->op, 1, &partial, fshape, r->dtype, r->device), oom);
  if (!final) return NULL;
  final->arg.axes = 1u << axis;
  return final;
}
