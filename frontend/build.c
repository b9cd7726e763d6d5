/* Node builders: the small vocabulary composite ops are written in. */
#include <string.h>

#include "frontend/frontend.h"

static lm_node *make(lm_op op, int nsrc, lm_node *const *src, loom_shape shape, loom_dtype dtype) {
  for (int i = 0; i < nsrc; i++)
    if (!src[i]) return NULL;
  return lm_node_new(op, nsrc, src, shape, dtype, nsrc ? src[0]->device : LOOM_CPU);
}

lm_node *nb_const(double value, loom_shape shape, loom_dtype dtype, loom_device device) {
  lm_node *n = lm_node_new(LM_CONST, 0, NULL, shape, dtype, device);
  if (n) n->arg.f = value;
  return n;
}

lm_node *nb_user_sized(lm_node *n, const char *op, uint8_t dims) {
  if (n && lm_called_by_user(op)) {
    n->fixed_dims |= dims;
    if (!n->made_by) n->made_by = op;
  }
  return n;
}

lm_node *nb_cast(lm_node *a, loom_dtype dtype) {
  if (!a) return NULL;
  if (a->dtype == dtype) {
    lm_node_retain(a);
    return a;
  }
  return make(LM_CAST, 1, &a, a->shape, dtype);
}

lm_node *nb_reshape(lm_node *a, loom_shape shape) {
  if (!a) return NULL;
  if (lm_shape_eq(&a->shape, &shape)) {
    lm_node_retain(a);
    return a;
  }
  return make(LM_RESHAPE, 1, &a, shape, a->dtype);
}

lm_node *nb_expand(lm_node *a, loom_shape shape) {
  if (!a) return NULL;
  if (lm_shape_eq(&a->shape, &shape)) {
    lm_node_retain(a);
    return a;
  }
  return make(LM_EXPAND, 1, &a, shape, a->dtype);
}

lm_node *nb_broadcast(lm_node *a, loom_shape shape) {
  if (!a) return NULL;
  loom_shape lifted = {shape.ndim, {0}};
  int lead = shape.ndim - a->shape.ndim;
  for (int d = 0; d < shape.ndim; d++) lifted.dim[d] = d < lead ? 1 : a->shape.dim[d - lead];
  lm_node *r = nb_reshape(a, lifted);
  lm_node *e = nb_expand(r, shape);
  nb_drop(r, NULL, NULL, NULL);
  return e;
}

lm_node *nb_permute(lm_node *a, const int *perm) {
  if (!a) return NULL;
  bool identity = true;
  loom_shape shape = {a->shape.ndim, {0}};
  for (int d = 0; d < a->shape.ndim; d++) {
    shape.dim[d] = a->shape.dim[perm[d]];
    identity &= perm[d] == d;
  }
  if (identity) {
    lm_node_retain(a);
    return a;
  }
  lm_node *n = make(LM_PERMUTE, 1, &a, shape, a->dtype);
  if (n) memcpy(n->arg.perm, perm, sizeof(int) * (size_t)a->shape.ndim);
  return n;
}

lm_node *nb_unary(lm_op op, lm_node *a) {
  if (!a) return NULL;
  return make(op, 1, &a, a->shape, lm_op_table[op].result == LM_RES_BOOL ? LOOM_BOOL : a->dtype);
}

lm_node *nb_binary(lm_op op, lm_node *a, lm_node *b) {
  lm_node *src[2] = {a, b};
  if (!a || !b) return NULL;
  bool to_bool = lm_op_table[op].result == LM_RES_BOOL;
  return make(op, 2, src, a->shape, to_bool ? LOOM_BOOL : a->dtype);
}

lm_node *nb_where(lm_node *c, lm_node *a, lm_node *b) {
  lm_node *src[3] = {c, a, b};
  if (!c || !a || !b) return NULL;
  return make(LM_WHERE, 3, src, a->shape, a->dtype);
}

lm_node *nb_reduce(lm_op op, lm_node *a, uint32_t axes) {
  if (!a) return NULL;
  loom_shape shape = a->shape;
  for (int d = 0; d < shape.ndim; d++)
    if (axes & (1u << d)) shape.dim[d] = 1;
  bool arg = lm_op_table[op].result == LM_RES_I64;
  lm_node *n = make(op, 1, &a, shape, arg ? LOOM_I64 : a->dtype);
  if (n) n->arg.axes = axes;
  return n;
}

lm_node *nb_squeeze_axes(lm_node *a, uint32_t axes) {
  if (!a) return NULL;
  loom_shape shape = {0, {0}};
  for (int d = 0; d < a->shape.ndim; d++)
    if (!(axes & (1u << d))) shape.dim[shape.ndim++] = a->shape.dim[d];
  return nb_reshape(a, shape);
}

lm_node *nb_slice(lm_node *a, loom_shape shape, const int64_t *start, const int64_t *step) {
  if (!a) return NULL;
  bool identity = lm_shape_eq(&shape, &a->shape);
  for (int d = 0; d < shape.ndim; d++) identity &= start[d] == 0 && step[d] == 1;
  if (identity) {
    lm_node_retain(a);
    return a;
  }
  lm_node *n = make(LM_SLICE, 1, &a, shape, a->dtype);
  if (n) {
    memcpy(n->arg.slice.start, start, sizeof(int64_t) * (size_t)shape.ndim);
    memcpy(n->arg.slice.step, step, sizeof(int64_t) * (size_t)shape.ndim);
  }
  return n;
}

lm_node *nb_reverse(lm_node *a, int d) {
  if (!a) return NULL;
  int64_t n = a->shape.dim[d], start[LOOM_MAX_DIMS] = {0}, step[LOOM_MAX_DIMS];
  for (int k = 0; k < LOOM_MAX_DIMS; k++) step[k] = 1;
  if (n > 1) start[d] = n - 1, step[d] = -1; /* (0 or 1 slices: a itself) */
  lm_node *r = nb_slice(a, a->shape, start, step);
  if (r && n > 1) r->arg.slice.from_end[d] = LM_SLICE_START_FROM_END;
  return r;
}

lm_node *nb_pad(lm_node *a, const int64_t *lo, const int64_t *hi, double value) {
  if (!a) return NULL;
  loom_shape shape = a->shape;
  bool any = false;
  for (int d = 0; d < shape.ndim; d++) {
    shape.dim[d] += lo[d] + hi[d];
    any |= lo[d] || hi[d];
  }
  if (!any) {
    lm_node_retain(a);
    return a;
  }
  lm_node *n = make(LM_PAD, 1, &a, shape, a->dtype);
  if (n) {
    memcpy(n->arg.pad.lo, lo, sizeof(int64_t) * (size_t)shape.ndim);
    n->arg.pad.value = value;
  }
  return n;
}

lm_node *nb_matmul(lm_node *a, lm_node *b) {
  if (!a || !b) return NULL;
  lm_node *src[2] = {a, b};
  loom_shape shape = a->shape;
  shape.dim[shape.ndim - 1] = b->shape.dim[b->shape.ndim - 1];
  if (lm_dtype_is_half(a->dtype)) { /* F32 sums rounded once, as loom_matmul's */
    lm_node *wa = a, *wb = b, *p;
    if (a->device.type != LOOM_DEVICE_CPU) { /* (CUDA's GEMM reads F32 and F64) */
      wa = nb_cast(a, LOOM_F32), wb = nb_cast(b, LOOM_F32);
      p = nb_matmul(wa, wb);
      nb_drop(wa, wb, NULL, NULL);
    } else {
      p = wa && wb ? make(LM_MATMUL, 2, src, shape, LOOM_F32) : NULL;
    }
    lm_node *r = nb_cast(p, a->dtype);
    nb_drop(p, NULL, NULL, NULL);
    return r;
  }
  return make(LM_MATMUL, 2, src, shape, a->dtype);
}

bool nb_is_transpose_last(const lm_node *x) {
  int nd = x->shape.ndim;
  if (x->op != LM_PERMUTE || nd < 2) return false;
  for (int d = 0; d < nd - 2; d++)
    if (x->arg.perm[d] != d) return false;
  return x->arg.perm[nd - 2] == nd - 1 && x->arg.perm[nd - 1] == nd - 2;
}

lm_node *nb_scan(lm_node *a, int axis, bool reverse) {
  if (!a) return NULL;
  lm_node *n = make(LM_SCAN, 1, &a, a->shape, a->dtype);
  if (n)
    n->arg.scan.axis = axis, n->arg.scan.combine = LOOM_REDUCE_SUM, n->arg.scan.reverse = reverse;
  return n;
}

lm_node *nb_transpose_last(lm_node *a) {
  if (!a) return NULL;
  int perm[LOOM_MAX_DIMS], nd = a->shape.ndim;
  for (int d = 0; d < nd; d++) perm[d] = d;
  perm[nd - 1] = nd - 2, perm[nd - 2] = nd - 1;
  return nb_permute(a, perm);
}

void nb_drop(lm_node *a, lm_node *b, lm_node *c, lm_node *d) {
  lm_node_release(a);
  lm_node_release(b);
  lm_node_release(c);
  lm_node_release(d);
}
