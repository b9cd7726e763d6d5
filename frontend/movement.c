/* Movement ops: reshape, permute, transpose, expand, squeeze and unsqueeze,
 * flatten, slice, flip, pad, cat and stack, split and chunk (a view each
 * piece), repeat, contiguous. Kernels index through them (a view, a pad or a
 * cat reads its sources where they lie), so none copies: a realized view is
 * stored as any computed tensor is. */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

loom_tensor *loom_reshape(const loom_tensor *a, loom_shape shape) {
  const char *name = "loom_reshape";
  loom_tensor *err;
  char sa[128], sb[128];
  if ((err = lm_check(name, a))) return err;
  if (shape.ndim < 0 || shape.ndim > LOOM_MAX_DIMS)
    return lm_error(LOOM_ERR_SHAPE, "%s: %d dims (loom supports 0 to %d)", name, shape.ndim,
                    LOOM_MAX_DIMS);
  int infer = -1;
  int64_t known = 1, numel = lm_shape_numel(&a->node->shape);
  for (int d = 0; d < shape.ndim; d++) {
    if (shape.dim[d] == -1 && infer < 0) {
      infer = d;
      continue;
    }
    if (shape.dim[d] < 0)
      return lm_error(LOOM_ERR_SHAPE, "%s: invalid target shape %s", name,
                      lm_shape_str(&shape, sb, sizeof sb));
    if (__builtin_mul_overflow(known, shape.dim[d], &known))
      return lm_error(LOOM_ERR_SIZE, "%s: target shape %s is too large", name,
                      lm_shape_str(&shape, sb, sizeof sb));
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      return lm_error(LOOM_ERR_SHAPE, "%s: cannot infer the -1 dim of %s from %s", name,
                      lm_shape_str(&shape, sb, sizeof sb),
                      lm_shape_str(&a->node->shape, sa, sizeof sa));
    shape.dim[infer] = numel / known;
    known = numel;
  }
  if (known != numel)
    return lm_error(LOOM_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s", name,
                    lm_shape_str(&a->node->shape, sa, sizeof sa), (long long)numel,
                    lm_shape_str(&shape, sb, sizeof sb));
  return lm_result(nb_reshape(a->node, shape));
}

loom_tensor *loom_permute(const loom_tensor *a, const int *perm, int n) {
  const char *name = "loom_permute";
  loom_tensor *err;
  if ((err = lm_check(name, a))) return err;
  if (!perm && n > 0) return lm_error(LOOM_ERR_NULL, "%s: perm is NULL", name);
  int nd = a->node->shape.ndim, p[LOOM_MAX_DIMS];
  if (n != nd)
    return lm_error(LOOM_ERR_AXIS, "%s: %d axes given for a tensor of %d dims", name, n, nd);
  uint32_t seen = 0;
  for (int d = 0; d < nd; d++) {
    p[d] = perm[d];
    if (!lm_axis(&p[d], nd) || nd == 0 || (seen & (1u << p[d])))
      return lm_error(LOOM_ERR_AXIS, "%s: axis %d is out of range or repeated", name, perm[d]);
    seen |= 1u << p[d];
  }
  return lm_result(nb_permute(a->node, p));
}

loom_tensor *loom_transpose(const loom_tensor *a, int d0, int d1) {
  loom_tensor *err;
  if ((err = lm_check("loom_transpose", a))) return err;
  int nd = a->node->shape.ndim, perm[LOOM_MAX_DIMS];
  if (!lm_axis(&d0, nd) || !lm_axis(&d1, nd))
    return lm_error(LOOM_ERR_AXIS, "loom_transpose: axes (%d, %d) out of range for %d dims", d0, d1,
                    nd);
  if (nd == 0) return lm_tensor_ref(a);
  for (int d = 0; d < nd; d++) perm[d] = d;
  perm[d0] = d1, perm[d1] = d0;
  return lm_result(nb_permute(a->node, perm));
}

loom_tensor *loom_expand(const loom_tensor *a, loom_shape shape) {
  const char *name = "loom_expand";
  loom_tensor *err;
  char sa[128], sb[128];
  if ((err = lm_check(name, a))) return err;
  const loom_shape *from = &a->node->shape;
  if (shape.ndim < from->ndim || shape.ndim > LOOM_MAX_DIMS)
    return lm_error(LOOM_ERR_SHAPE, "%s: cannot expand %s to %s", name,
                    lm_shape_str(from, sa, sizeof sa), lm_shape_str(&shape, sb, sizeof sb));
  int lead = shape.ndim - from->ndim;
  for (int d = 0; d < shape.ndim; d++) {
    int64_t src = d < lead ? -1 : from->dim[d - lead];
    if (shape.dim[d] == -1 && src >= 0) shape.dim[d] = src;
    bool ok = shape.dim[d] >= 0 && (src < 0 || src == shape.dim[d] || src == 1);
    if (!ok)
      return lm_error(LOOM_ERR_SHAPE, "%s: cannot expand %s to %s", name,
                      lm_shape_str(from, sa, sizeof sa), lm_shape_str(&shape, sb, sizeof sb));
  }
  if ((err = lm_check_shape(name, &shape, a->node->dtype))) return err;
  return lm_result(nb_broadcast(a->node, shape));
}

loom_tensor *loom_squeeze(const loom_tensor *a, int axis) {
  loom_tensor *err;
  if ((err = lm_check("loom_squeeze", a))) return err;
  int nd = a->node->shape.ndim;
  if (!lm_axis(&axis, nd))
    return lm_error(LOOM_ERR_AXIS, "loom_squeeze: axis %d out of range for %d dims", axis, nd);
  if (nd == 0 || a->node->shape.dim[axis] != 1) return lm_tensor_ref(a);
  return lm_result(nb_squeeze_axes(a->node, 1u << axis));
}

loom_tensor *loom_unsqueeze(const loom_tensor *a, int axis) {
  loom_tensor *err;
  if ((err = lm_check("loom_unsqueeze", a))) return err;
  int nd = a->node->shape.ndim;
  if (axis < -(nd + 1) || axis > nd || nd + 1 > LOOM_MAX_DIMS)
    return lm_error(LOOM_ERR_AXIS, "loom_unsqueeze: axis %d out of range for %d dims", axis, nd);
  if (axis < 0) axis += nd + 1;
  loom_shape s = {nd + 1, {0}};
  for (int d = 0, j = 0; d < nd + 1; d++) s.dim[d] = d == axis ? 1 : a->node->shape.dim[j++];
  return lm_result(nb_reshape(a->node, s));
}

loom_tensor *loom_flatten(const loom_tensor *a, int start, int end) {
  loom_tensor *err;
  if ((err = lm_check("loom_flatten", a))) return err;
  int nd = a->node->shape.ndim;
  int s0 = start, e0 = end;
  if (!lm_axis(&start, nd) || !lm_axis(&end, nd) || start > end)
    return lm_error(LOOM_ERR_AXIS, "loom_flatten: axes (%d, %d) invalid for %d dims", s0, e0, nd);
  if (nd == 0) return lm_result(nb_reshape(a->node, LOOM_SHAPE(1)));
  loom_shape s = {0, {0}};
  for (int d = 0; d < nd; d++) {
    if (d > start && d <= end)
      s.dim[s.ndim - 1] *= a->node->shape.dim[d];
    else
      s.dim[s.ndim++] = a->node->shape.dim[d];
  }
  return lm_result(nb_reshape(a->node, s));
}

/* from_end: LM_SLICE_*_FROM_END for bounds given from the end (a negative
 * start or end of loom_slice, a pad's crop of the end). */
static lm_node *slice_node(lm_node *a, int axis, int64_t start, int64_t end, int64_t step,
                           uint8_t from_end) {
  loom_shape s = a->shape;
  int64_t len = a->shape.dim[axis];
  if (start < 0) start += len;
  if (end < 0) end += len;
  start = start < 0 ? 0 : start > len ? len : start;
  end = end < start ? start : end > len ? len : end;
  s.dim[axis] = (end - start + step - 1) / step;
  if (s.dim[axis] == len && step == 1) {
    lm_node_retain(a);
    return a;
  }
  lm_node *n = lm_node_new(LM_SLICE, 1, &a, s, a->dtype, a->device);
  if (!n) return NULL;
  for (int d = 0; d < s.ndim; d++) n->arg.slice.step[d] = 1;
  n->arg.slice.start[axis] = s.dim[axis] ? start : 0;
  n->arg.slice.step[axis] = step;
  n->arg.slice.from_end[axis] = s.dim[axis] ? from_end : 0;
  return n;
}

loom_tensor *loom_slice(const loom_tensor *a, int axis, int64_t start, int64_t end, int64_t step) {
  loom_tensor *err;
  if ((err = lm_check("loom_slice", a))) return err;
  int nd = a->node->shape.ndim, ax = axis;
  if (nd == 0 || !lm_axis(&ax, nd))
    return lm_error(LOOM_ERR_AXIS, "loom_slice: axis %d out of range for %d dims", axis, nd);
  if (step <= 0)
    return lm_error(LOOM_ERR_VALUE, "loom_slice: step must be positive, got %lld", (long long)step);
  /* torch's x[-k:], x[:-k] (not where the bound is clipped at the start) */
  int64_t len = a->node->shape.dim[ax];
  uint8_t from_end = (start < 0 && start >= -len ? LM_SLICE_START_FROM_END : 0) |
                     (end < 0 && end >= -len ? LM_SLICE_STOP_FROM_END : 0);
  return lm_result(slice_node(a->node, ax, start, end, step, from_end));
}

loom_tensor *loom_pad(const loom_tensor *a, const int64_t *pads, int npads, double value) {
  const char *name = "loom_pad";
  loom_tensor *err;
  if ((err = lm_check(name, a))) return err;
  if ((err = lm_check_fill(name, a->node->dtype, value))) return err;
  int nd = a->node->shape.ndim;
  if (npads < 0 || npads % 2 || npads / 2 > nd)
    return lm_error(LOOM_ERR_VALUE, "%s: %d pad values for %d dims (need pairs, at most %d)", name,
                    npads, nd, 2 * nd);
  if (npads && !pads) return lm_error(LOOM_ERR_NULL, "%s: pads is NULL", name);
  /* Negative pads crop first (as torch), then the rest pads. */
  lm_node *cur = a->node;
  lm_node_retain(cur);
  int64_t lo[LOOM_MAX_DIMS] = {0}, hi[LOOM_MAX_DIMS] = {0};
  for (int i = 0; i < npads / 2; i++) {
    int d = nd - 1 - i;
    lo[d] = pads[2 * i], hi[d] = pads[2 * i + 1];
    int64_t len = cur->shape.dim[d];
    /* a crop past the dim (INT64_MIN among them: its negation overflows) */
    bool past = (lo[d] < 0 && lo[d] < -len) || (hi[d] < 0 && hi[d] < -len);
    int64_t start = !past && lo[d] < 0 ? -lo[d] : 0, end = !past && hi[d] < 0 ? len + hi[d] : len;
    if (past || end < start) {
      lm_node_release(cur);
      return lm_error(LOOM_ERR_SHAPE, "%s: pads (%lld, %lld) leave a negative size on dim %d", name,
                      (long long)lo[d], (long long)hi[d], d);
    }
    if (start || end != len) {
      lm_node *s = slice_node(cur, d, start, end, 1, hi[d] < 0 ? LM_SLICE_STOP_FROM_END : 0);
      lm_node_release(cur);
      cur = s;
      if (!cur) return lm_result(NULL);
    }
  }
  loom_shape s = cur->shape;
  bool any = false;
  for (int d = 0; d < nd; d++) {
    lo[d] = lo[d] > 0 ? lo[d] : 0, hi[d] = hi[d] > 0 ? hi[d] : 0;
    if (__builtin_add_overflow(s.dim[d], lo[d], &s.dim[d]) ||
        __builtin_add_overflow(s.dim[d], hi[d], &s.dim[d])) {
      lm_node_release(cur);
      return lm_error(LOOM_ERR_SIZE, "%s: pads (%lld, %lld) make dim %d too large", name,
                      (long long)lo[d], (long long)hi[d], d);
    }
    any |= lo[d] || hi[d];
  }
  if (!any) return lm_result(cur);
  if ((err = lm_check_shape(name, &s, cur->dtype))) {
    lm_node_release(cur);
    return err;
  }
  lm_node *n = lm_node_new(LM_PAD, 1, &cur, s, cur->dtype, cur->device);
  lm_node_release(cur);
  if (n) {
    memcpy(n->arg.pad.lo, lo, sizeof lo);
    n->arg.pad.value = value;
  }
  return lm_result(n);
}

/* Joins k >= 1 nodes (same dtype and device) along ax. More than
 * LM_CAT_MAX_SOURCES become a tree of cats: lowering picks among a cat's
 * sources with a table of that size. */
static lm_node *cat_nodes(lm_node *const *src, int k, int ax) {
  if (k == 1) {
    lm_node_retain(src[0]);
    return src[0];
  }
  if (k <= LM_CAT_MAX_SOURCES) {
    loom_shape s = src[0]->shape;
    for (int i = 1; i < k; i++) s.dim[ax] += src[i]->shape.dim[ax];
    lm_node *r = lm_node_new(LM_CAT, k, src, s, src[0]->dtype, src[0]->device);
    if (r) r->arg.axis = ax;
    return r;
  }
  int groups = (k + LM_CAT_MAX_SOURCES - 1) / LM_CAT_MAX_SOURCES;
  lm_node **part = calloc((size_t)groups, sizeof *part);
  bool oom = !part;
  for (int g = 0; g < groups && !oom; g++) {
    int first = g * LM_CAT_MAX_SOURCES, count = k - first;
    part[g] = cat_nodes(src + first, count < LM_CAT_MAX_SOURCES ? count : LM_CAT_MAX_SOURCES, ax);
    oom = !part[g];
  }
  lm_node *r = oom ? NULL : cat_nodes(part, groups, ax);
  for (int g = 0; part && g < groups; g++) lm_node_release(part[g]);
  free(part);
  return r;
}

loom_tensor *loom_cat(loom_tensor *const *ts, int n, int axis) {
  const char *name = "loom_cat";
  loom_tensor *err;
  char sa[128], sb[128];
  if (!ts) return lm_error(LOOM_ERR_NULL, "%s: tensor list is NULL", name);
  if (n <= 0) return lm_error(LOOM_ERR_VALUE, "%s: needs at least one tensor, got %d", name, n);
  for (int i = 0; i < n; i++)
    if ((err = lm_check(name, ts[i]))) return err;
  const lm_node *first = ts[0]->node;
  int nd = first->shape.ndim, ax = axis;
  if (nd == 0)
    return lm_error(LOOM_ERR_SHAPE, "%s: zero-dimensional tensors cannot be joined", name);
  if ((err = lm_check_axis(name, &ax, nd))) return err;
  loom_dtype dt = first->dtype;
  loom_shape s = first->shape;
  s.dim[ax] = 0;
  for (int i = 0; i < n; i++) {
    const lm_node *t = ts[i]->node;
    if ((err = lm_check_same_device(name, first, t))) return err;
    bool ok = t->shape.ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = d == ax || t->shape.dim[d] == first->shape.dim[d];
    if (!ok)
      return lm_error(LOOM_ERR_SHAPE,
                      "%s: tensor %d has shape %s, which does not match %s "
                      "outside axis %d",
                      name, i, lm_shape_str(&t->shape, sa, sizeof sa),
                      lm_shape_str(&first->shape, sb, sizeof sb), ax);
    dt = lm_promote(dt, t->dtype);
    s.dim[ax] += t->shape.dim[ax];
  }
  if ((err = lm_check_shape(name, &s, dt))) return err;
  lm_node **src = malloc(sizeof(lm_node *) * (size_t)n);
  if (!src) return lm_result(NULL);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (ts[i]->node->shape.dim[ax] > 0 || n == 1) src[k++] = nb_cast(ts[i]->node, dt);
  lm_node *r = NULL;
  bool oom = false;
  for (int i = 0; i < k; i++) oom |= !src[i];
  if (!oom && k == 1) {
    r = src[0];
    lm_node_retain(r);
  } else if (!oom && k == 0) {
    r = nb_const(0, s, dt, first->device);
  } else if (!oom) {
    r = cat_nodes(src, k, ax);
  }
  for (int i = 0; i < k; i++) lm_node_release(src[i]);
  free(src);
  return lm_result(r);
}

LM_PUBLIC(loom_tensor *, loom_stack, (loom_tensor *const *ts, int n, int axis), (ts, n, axis)) {
  const char *name = "loom_stack";
  loom_tensor *err;
  if (!ts) return lm_error(LOOM_ERR_NULL, "%s: tensor list is NULL", name);
  if (n <= 0) return lm_error(LOOM_ERR_VALUE, "%s: needs at least one tensor, got %d", name, n);
  for (int i = 0; i < n; i++)
    if ((err = lm_check(name, ts[i]))) return err;
  int nd = ts[0]->node->shape.ndim;
  for (int i = 1; i < n; i++)
    if (!lm_shape_eq(&ts[i]->node->shape, &ts[0]->node->shape)) {
      char sa[128], sb[128];
      return lm_error(LOOM_ERR_SHAPE, "%s: tensor %d has shape %s, tensor 0 has %s", name, i,
                      lm_shape_str(&ts[i]->node->shape, sa, sizeof sa),
                      lm_shape_str(&ts[0]->node->shape, sb, sizeof sb));
    }
  if (axis < -(nd + 1) || axis > nd || nd + 1 > LOOM_MAX_DIMS)
    return lm_error(LOOM_ERR_AXIS, "%s: axis %d out of range for %d dims", name, axis, nd);
  if (axis < 0) axis += nd + 1;
  loom_tensor **parts = calloc((size_t)n, sizeof *parts);
  if (!parts) return lm_result(NULL);
  for (int i = 0; i < n; i++) parts[i] = loom_unsqueeze(ts[i], axis);
  loom_tensor *r = loom_cat(parts, n, axis);
  for (int i = 0; i < n; i++) loom_free(parts[i]);
  free(parts);
  return r;
}

loom_tensor *loom_contiguous(const loom_tensor *a) {
  loom_tensor *err;
  if ((err = lm_check("loom_contiguous", a))) return err;
  /* Every computed tensor is stored contiguously, so a view realizes into a
   * fresh contiguous buffer and anything else already is one. */
  return lm_tensor_ref(a);
}

/* ------------------------------------------------------------ flip */

/* torch.flip along one axis: a view of a's slices in reverse, from n - 1 by
 * -1, its start from the end: over a symbolic axis it follows the size
 * (passes/symbolic.c). */
LM_PUBLIC(loom_tensor *, loom_flip, (const loom_tensor *a, int axis), (a, axis)) {
  const char *op = "loom_flip";
  loom_tensor *err;
  if ((err = lm_check(op, a))) return err;
  int ax = axis;
  if ((err = lm_check_axis(op, &ax, a->node->shape.ndim))) return err;
  return lm_result(nb_reverse(a->node, ax));
}

/* ------------------------------------------------------------ split, chunk */

/* Pieces of `size` along axis (the last one shorter), as views. */
static loom_status pieces(const char *op, const loom_tensor *a, int64_t size, int axis,
                          loom_tensor **out, int cap, int *n) {
  *n = 0;
  int ax = axis;
  loom_tensor *err = lm_check(op, a);
  if (!err && !out) err = lm_error(LOOM_ERR_NULL, "%s: no array for the pieces", op);
  if (!err) err = lm_check_axis(op, &ax, a->node->shape.ndim);
  if (err) return lm_error_status(err);
  int64_t len = a->node->shape.dim[ax];
  int64_t count = len == 0 ? 1 : (len + size - 1) / size;
  if (count > cap)
    return lm_fail(LOOM_ERR_VALUE,
                   "%s: %lld pieces of %lld along axis %d (length %lld), room for %d", op,
                   (long long)count, (long long)size, axis, (long long)len, cap);
  for (int64_t i = 0; i < count; i++) {
    int64_t start = i * size, end = start + size < len ? start + size : len;
    out[i] = loom_slice(a, ax, start, end, 1);
    if (loom_status_of(out[i]) != LOOM_OK) {
      loom_status st = loom_status_of(out[i]);
      for (int64_t j = 0; j <= i; j++) loom_free(out[j]), out[j] = NULL;
      return st;
    }
  }
  *n = (int)count;
  return LOOM_OK;
}

LM_PUBLIC(loom_status, loom_split,
          (const loom_tensor *a, int64_t size, int axis, loom_tensor **out, int cap, int *n),
          (a, size, axis, out, cap, n)) {
  int ignored;
  if (!n) n = &ignored;
  *n = 0;
  if (size <= 0)
    return lm_fail(LOOM_ERR_VALUE, "loom_split: piece size %lld is not positive", (long long)size);
  return pieces("loom_split", a, size, axis, out, cap, n);
}

LM_PUBLIC(loom_status, loom_chunk,
          (const loom_tensor *a, int chunks, int axis, loom_tensor **out, int *n),
          (a, chunks, axis, out, n)) {
  int ignored;
  if (!n) n = &ignored;
  *n = 0;
  if (chunks <= 0) return lm_fail(LOOM_ERR_VALUE, "loom_chunk: %d chunks is not positive", chunks);
  int ax = axis;
  loom_tensor *err = lm_check("loom_chunk", a);
  if (!err) err = lm_check_axis("loom_chunk", &ax, a->node->shape.ndim);
  if (err) return lm_error_status(err);
  int64_t len = a->node->shape.dim[ax];
  int64_t size = (len + chunks - 1) / chunks; /* torch.chunk: ceil, so maybe fewer chunks */
  return pieces("loom_chunk", a, size > 0 ? size : 1, axis, out, chunks, n);
}

/* ------------------------------------------------------------ repeat */

/* torch.Tensor.repeat: a tiled reps[i] times along each dim (reps may have
 * more dims than a, which then gets leading dims of 1). */
LM_PUBLIC(loom_tensor *, loom_repeat, (const loom_tensor *a, const int64_t *reps, int nreps),
          (a, reps, nreps)) {
  const char *op = "loom_repeat";
  loom_tensor *err;
  if ((err = lm_check(op, a))) return err;
  const loom_shape *s = &a->node->shape;
  if (!reps || nreps < s->ndim || nreps > LOOM_MAX_DIMS)
    return lm_error(LOOM_ERR_VALUE, "%s: %d repeats for %d dims (need %d to %d)", op, nreps,
                    s->ndim, s->ndim, LOOM_MAX_DIMS);
  for (int i = 0; i < nreps; i++)
    if (reps[i] < 0)
      return lm_error(LOOM_ERR_VALUE, "%s: repeat %lld of dim %d is negative", op,
                      (long long)reps[i], i);
  int token = lm_composite_begin();
  loom_shape lifted = {nreps, {0}};
  for (int i = 0; i < nreps; i++)
    lifted.dim[i] = i < nreps - s->ndim ? 1 : s->dim[i - (nreps - s->ndim)];
  loom_tensor *cur = loom_reshape(a, lifted);
  for (int i = 0; i < nreps; i++) { /* dim i: [.., d, ..] -> [.., 1, d, ..] -> [.., r d, ..] */
    if (reps[i] == 1) continue;
    loom_shape now = loom_shape_of(cur), merged = now;
    merged.dim[i] *= reps[i];
    if (now.ndim < LOOM_MAX_DIMS) {
      loom_shape ex = {now.ndim + 1, {0}};
      for (int d = 0, j = 0; d < now.ndim; d++) {
        if (d == i) ex.dim[j++] = reps[i];
        ex.dim[j++] = now.dim[d];
      }
      cur = loom_reshape(loom_expand(loom_unsqueeze(cur, i), ex), merged);
    } else { /* no room for another dim: copies side by side */
      loom_tensor **copies = malloc(sizeof *copies * (size_t)(reps[i] ? reps[i] : 1));
      if (!copies) return lm_composite_end(token, lm_error(LOOM_ERR_OOM, "%s: out of memory", op));
      for (int64_t c = 0; c < reps[i]; c++) copies[c] = cur;
      cur = reps[i] ? loom_cat(copies, (int)reps[i], i) : loom_reshape(cur, merged);
      free(copies);
    }
  }
  return lm_composite_end(token, loom_contiguous(cur));
}
