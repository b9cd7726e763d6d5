/* Indexing: torch's index_select and gather, and slice_update (a window
 * written at a start that is data: a KV cache's row). Each is a composition
 * of the core ops (index_select's gradient is the embedding's scatter-add,
 * gather's the selection's, slice_update's the where's), fused like any
 * other. The indices and the start are checked against the shapes: at the
 * call where their values are at hand, else by the run (LM_CHECK). */
#include "frontend/frontend.h"

/* ------------------------------------------------------------ index_select, gather */

/* torch.index_select: a's slices at index (1-D integers) along axis, through
 * the embedding's row gather with axis moved first. */
static loom_tensor *index_select(const char *op, const loom_tensor *a, int axis,
                                 const loom_tensor *index, bool check) {
  loom_tensor *err;
  if ((err = lm_check(op, a)) || (err = lm_check(op, index))) return err;
  int nd = a->node->shape.ndim, ax = axis;
  if ((err = lm_check_axis(op, &ax, nd))) return err;
  if (index->node->shape.ndim != 1) {
    char si[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: the index must be 1-D, got %s", op,
                    lm_shape_str(&index->node->shape, si, sizeof si));
  }
  int token = lm_composite_begin();
  int to_front[LOOM_MAX_DIMS], back[LOOM_MAX_DIMS];
  to_front[0] = ax;
  for (int d = 0, j = 1; d < nd; d++)
    if (d != ax) to_front[j++] = d;
  for (int d = 0; d < nd; d++) back[to_front[d]] = d;
  loom_tensor *rows = lm_gather_rows(op, index, loom_permute(a, to_front, nd), check);
  return lm_composite_end(token, loom_permute(rows, back, nd));
}

LM_PUBLIC(loom_tensor *, loom_index_select,
          (const loom_tensor *a, int axis, const loom_tensor *index), (a, axis, index)) {
  return index_select("loom_index_select", a, axis, index, true);
}

/* torch.gather: out[i][j][k] = a[index[i][j][k]][j][k] along axis 0 (and so
 * on for the others); index has a's rank, no dim larger than a's except
 * along axis. Each output selects its element from a's line along axis (a
 * one-hot comparison with that line, so a -inf elsewhere stays out). */
LM_PUBLIC(loom_tensor *, loom_gather, (const loom_tensor *a, int axis, const loom_tensor *index),
          (a, axis, index)) {
  const char *op = "loom_gather";
  loom_tensor *err;
  if ((err = lm_check(op, a)) || (err = lm_check(op, index))) return err;
  if (!lm_dtype_is_int(index->node->dtype))
    return lm_error(LOOM_ERR_DTYPE, "%s: the index must be integers, got %s", op,
                    loom_dtype_name(index->node->dtype));
  const loom_shape *s = &a->node->shape, *is = &index->node->shape;
  int nd = s->ndim, ax = axis;
  if ((err = lm_check_axis(op, &ax, nd))) return err;
  bool fits = is->ndim == nd && nd < LOOM_MAX_DIMS;
  for (int d = 0; fits && d < nd; d++) fits = d == ax || is->dim[d] <= s->dim[d];
  if (!fits) {
    char sa[128], si[128];
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: the index %s needs the rank of %s and no dim larger except along axis %d",
                    op, lm_shape_str(is, si, sizeof si), lm_shape_str(s, sa, sizeof sa), axis);
  }
  int token = lm_composite_begin();
  loom_tensor *good = lm_checked_index(op, index, a->node, ax, false, 0); /* in [0, n) */
  if ((err = lm_check(op, good))) return lm_composite_end(token, err);
  /* a cut to the index's size off axis, with axis moved last and one
   * broadcast dim for the index's positions along it: [.., 1, n] against
   * the index's one-hot [.., m, n] */
  loom_tensor *cut = (loom_tensor *)a;
  for (int d = 0; d < nd; d++)
    if (d != ax && is->dim[d] < s->dim[d]) cut = loom_slice(cut, d, 0, is->dim[d], 1);
  int perm[LOOM_MAX_DIMS], back[LOOM_MAX_DIMS];
  lm_axis_last(nd, ax, perm, back);
  loom_tensor *lines = loom_unsqueeze(loom_permute(cut, perm, nd), nd - 1); /* [.., 1, n] */
  loom_tensor *picks = loom_permute(good, perm, nd);                        /* [.., m] */
  loom_tensor *hit =
      loom_cast(lm_one_hot(op, picks, s->dim[ax], false), LOOM_BOOL); /* [.., m, n] */
  loom_tensor *chosen = loom_sum(loom_where_s(hit, lines, 0), (int[]){-1}, 1, false);
  return lm_composite_end(token, loom_permute(chosen, back, nd));
}

/* ------------------------------------------------------------ slice update */

static loom_tensor *slice_update_checked(const char *op, const loom_tensor *t, int axis,
                                         const loom_tensor *start, const loom_tensor *update) {
  const loom_shape *ts = &t->node->shape, *us = &update->node->shape;
  int64_t size = ts->dim[axis], n = us->dim[axis];
  loom_device dev = t->node->device;
  int token = lm_composite_begin();
  /* start in [0, size - n]: refused at the call or by the run, never clamped
   * (a KV cache written past its end would lose its last row silently) */
  loom_tensor *good = lm_checked_start(op, start, t->node, update->node, axis), *err;
  if ((err = lm_check(op, good))) return lm_composite_end(token, err);
  loom_shape along = *ts; /* [1, .., size, .., 1] */
  for (int d = 0; d < along.ndim; d++) along.dim[d] = d == axis ? size : 1;
  loom_tensor *first = loom_cast(good, LOOM_I64);
  loom_tensor *at = loom_arange(0, (double)size, 1, LOOM_I64, dev);
  /* the window's mask from an iota already in the broadcast shape: the where's
   * kernel computes it inline (an iota reshaped after the comparison is stored) */
  loom_tensor *offset = loom_sub(loom_reshape(at, along), first);
  loom_tensor *inside = n == 1
                            ? loom_eq_s(offset, 0) /* one comparison: inlined where it is read */
                            : loom_logical_and(loom_ge_s(offset, 0), loom_lt_s(offset, (double)n));
  /* one row broadcasts along the axis; no row: nothing is replaced (the
   * start still checked) */
  const loom_tensor *rows = n == 0 ? t : update;
  if (n > 1) /* (offsets outside the window are masked: clamped, not checked) */
    rows =
        index_select(op, update, axis, loom_clamp(loom_sub(at, first), 0, (double)(n - 1)), false);
  return lm_composite_end(token, loom_where(inside, rows, t));
}

LM_PUBLIC(loom_tensor *, loom_slice_update,
          (const loom_tensor *t, int axis, const loom_tensor *start, const loom_tensor *update),
          (t, axis, start, update)) {
  const char *op = "loom_slice_update";
  loom_tensor *err;
  if ((err = lm_check(op, t)) || (err = lm_check(op, start)) || (err = lm_check(op, update)))
    return err;
  const loom_shape *ts = &t->node->shape, *us = &update->node->shape;
  char a[128], b[128];
  if (update->node->dtype != t->node->dtype)
    return lm_error(LOOM_ERR_DTYPE, "%s: update is %s, the tensor %s", op,
                    loom_dtype_name(update->node->dtype), loom_dtype_name(t->node->dtype));
  if (!lm_dtype_is_int(start->node->dtype) || start->node->shape.ndim != 0)
    return lm_error(LOOM_ERR_DTYPE, "%s: start must be a 0-d integer tensor, got %s %s", op,
                    loom_dtype_name(start->node->dtype),
                    lm_shape_str(&start->node->shape, a, sizeof a));
  if (start->node->device.type != t->node->device.type ||
      start->node->device.index != t->node->device.index ||
      update->node->device.type != t->node->device.type ||
      update->node->device.index != t->node->device.index)
    return lm_error(LOOM_ERR_DEVICE, "%s: the tensor, start and update are on different devices",
                    op);
  int nd = ts->ndim;
  if (axis < -nd || axis >= nd || nd == 0)
    return lm_error(LOOM_ERR_AXIS, "%s: axis %d is out of range for %s", op, axis,
                    lm_shape_str(&t->node->shape, a, sizeof a));
  if (axis < 0) axis += nd;
  bool fits = us->ndim == nd && us->dim[axis] <= ts->dim[axis];
  for (int d = 0; fits && d < nd; d++) fits = d == axis || us->dim[d] == ts->dim[d];
  if (!fits)
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: update %s does not fit %s along axis %d (the other dims equal, at most "
                    "the tensor's size along it)",
                    op, lm_shape_str(&update->node->shape, b, sizeof b),
                    lm_shape_str(&t->node->shape, a, sizeof a), axis);
  return slice_update_checked(op, t, axis, start, update);
}
