/* Composing chains of movement ops into one affine view (shape, strides, offset). */
#include <string.h>

#include "ir/ir.h"

/* numpy's no-copy reshape: succeeds when each group of old dims that merges or
 * splits into new dims is itself contiguous. */
static bool reshape_view(lm_view *v, const loom_shape *to) {
  int64_t olddims[LOOM_MAX_DIMS], oldstrides[LOOM_MAX_DIMS];
  int oldnd = 0;
  int64_t numel = lm_shape_numel(&v->shape);
  lm_view out = {.shape = *to, .offset = v->offset};
  if (numel == 0) {
    lm_shape_strides(to, out.strides);
    *v = out;
    return true;
  }
  for (int d = 0; d < v->shape.ndim; d++) {
    if (v->shape.dim[d] == 1) continue;
    olddims[oldnd] = v->shape.dim[d];
    oldstrides[oldnd++] = v->strides[d];
  }
  int newnd = to->ndim;
  const int64_t *newdims = to->dim;
  int oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < newnd && oi < oldnd) {
    int64_t np = newdims[ni], op = olddims[oi];
    while (np != op) {
      if (np < op) {
        if (nj >= newnd) return false;
        np *= newdims[nj++];
      } else {
        if (oj >= oldnd) return false;
        op *= olddims[oj++];
      }
    }
    for (int ok = oi; ok < oj - 1; ok++)
      if (oldstrides[ok] != olddims[ok + 1] * oldstrides[ok + 1]) return false;
    out.strides[nj - 1] = oldstrides[oj - 1];
    for (int nk = nj - 1; nk > ni; nk--) out.strides[nk - 1] = out.strides[nk] * newdims[nk];
    ni = nj++;
    oi = oj++;
  }
  for (int nk = ni; nk < newnd; nk++) out.strides[nk] = 1; /* trailing size-1 dims */
  *v = out;
  return true;
}

static bool apply(lm_view *v, const lm_node *n) {
  lm_view out = {.shape = n->shape, .offset = v->offset};
  switch (n->op) {
  case LM_RESHAPE: return reshape_view(v, &n->shape);
  case LM_PERMUTE:
    for (int d = 0; d < n->shape.ndim; d++) out.strides[d] = v->strides[n->arg.perm[d]];
    break;
  case LM_EXPAND:
    for (int d = 0; d < n->shape.ndim; d++)
      out.strides[d] = v->shape.dim[d] == n->shape.dim[d] ? v->strides[d] : 0;
    break;
  case LM_WINDOW: {
    int nd = v->shape.ndim; /* source dims; the last two slide */
    for (int d = 0; d < nd - 2; d++) out.strides[d] = v->strides[d];
    for (int i = 0; i < 2; i++) {
      out.strides[nd - 2 + i] = v->strides[nd - 2 + i] * n->arg.window.stride[i];
      out.strides[nd + i] = v->strides[nd - 2 + i] * n->arg.window.dilation[i];
    }
    break;
  }
  case LM_SLICE:
    for (int d = 0; d < n->shape.ndim; d++) {
      out.offset += n->arg.slice.start[d] * v->strides[d];
      out.strides[d] = v->strides[d] * n->arg.slice.step[d];
    }
    break;
  default: return false;
  }
  *v = out;
  return true;
}

bool lm_view_affine(const lm_node *n, lm_stored_fn *stored, const void *planner,
                    const lm_node **base, lm_view *view) {
  const lm_node *chain[64];
  int len = 0;
  while (lm_op_is_view(n->op) && !lm_is_computed(n) && !stored(planner, n)) {
    if (n->op == LM_PAD || n->op == LM_CAT || len == 64) return false;
    chain[len++] = n;
    n = n->src[0];
  }
  *base = n;
  lm_view v = {.shape = n->shape, .offset = 0};
  lm_shape_strides(&n->shape, v.strides);
  while (len > 0)
    if (!apply(&v, chain[--len])) return false;
  *view = v;
  return true;
}
