/* Sorting: torch's sort, argsort and topk. Each records one library step
 * (LM_SORT: the positions of each line's first k values in order), the
 * values gathered at them; rows longer than CUDA's sort step takes (and every
 * row, with LOOM_SORT=network) become a bitonic network of elementwise ops
 * instead. */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

/* ------------------------------------------------------------ sort steps */

/* The checks topk and sort share: the outputs cleared, a good non-bool
 * tensor, an output asked for, the axis (normalized into *ax). NULL or the
 * error tensor. */
static loom_tensor *check_selection(const char *op, const loom_tensor *a, int axis, int *ax,
                                    loom_tensor **values, loom_tensor **indices) {
  if (values) *values = NULL;
  if (indices) *indices = NULL;
  loom_tensor *err = lm_check(op, a);
  if (err) return err;
  int nd = a->node->shape.ndim;
  *ax = axis;
  if (!values && !indices) return lm_error(LOOM_ERR_NULL, "%s: no output asked for", op);
  if ((err = lm_check_axis(op, ax, nd))) return err;
  if (a->node->dtype == LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "%s: not supported for bool tensors", op);
  return NULL;
}

/* A sort step on CUDA counts, n^2 comparisons a row
 * (backends/nvrtc/cuda_sort.c): longer rows take the bitonic network there. */
#define SORT_CUDA_MAX_ROW 65536

/* LOOM_SORT=network records the network everywhere (read per call, as the
 * tests switch it). */
static bool sort_step_serves(const loom_tensor *a, int ax) {
  const char *how = getenv("LOOM_SORT");
  if (how && !strcmp(how, "network")) return false;
  return a->node->device.type == LOOM_DEVICE_CPU || a->node->shape.dim[ax] <= SORT_CUDA_MAX_ROW;
}

/* a's values along ax at positions (I64, a's shape but k along ax), through
 * the row gather of a's lines, flattened, each position offset by its line's
 * start: O(k) a line, and the gradient a scatter-add into a. */
static loom_tensor *pick_along(const loom_tensor *a, int ax, const loom_tensor *positions) {
  int nd = a->node->shape.ndim;
  int64_t n = a->node->shape.dim[ax];
  if (n == 0) return loom_slice(a, ax, 0, 0, 1); /* (then no positions either) */
  int token = lm_composite_begin();
  int perm[LOOM_MAX_DIMS], back[LOOM_MAX_DIMS];
  lm_axis_last(nd, ax, perm, back);
  loom_tensor *lines = loom_permute(a, perm, nd); /* [.., n] */
  int64_t count = lm_shape_numel(&a->node->shape) / n;
  /* each line's first element's flat index: the first column of each
   * element's, an arange over the lines' shape; the where ties its dims to the
   * lines' (a symbolic n follows; only the column is computed) */
  lm_node *iota = lm_node_new(LM_IOTA, 0, NULL, loom_shape_of(lines), LOOM_I64, a->node->device);
  if (iota) iota->arg.iota.start = 0, iota->arg.iota.step = 1;
  loom_tensor *every = lm_result(iota);
  loom_tensor *starts = loom_slice(loom_where(loom_ne(lines, lines), every, every), -1, 0, 1, 1);
  loom_tensor *flat = loom_add(loom_permute(positions, perm, nd), starts);
  loom_tensor *table = loom_reshape(lines, LOOM_SHAPE(count * n));
  /* (the positions are in their lines by construction: not checked) */
  const char *op = lm_called_op() ? lm_called_op() : "loom_sort";
  return lm_composite_end(token, loom_permute(lm_gather_rows(op, flat, table, false), back, nd));
}

/* The selections' results: *indices the positions (taken), *values a's
 * values there (each only where asked for). */
static loom_status with_values(const loom_tensor *a, int ax, loom_tensor *positions,
                               loom_tensor **values, loom_tensor **indices) {
  loom_status st = loom_status_of(positions);
  if (!st && !lm_is_computed(positions->node)) /* made here: integers carry no gradient */
    positions->node->requires_grad = false;
  loom_tensor *picked = !st && values ? pick_along(a, ax, positions) : NULL;
  if (!st && picked) st = loom_status_of(picked);
  if (st || !indices) loom_free(positions);
  if (st) {
    loom_free(picked);
    return st;
  }
  if (values) *values = picked;
  if (indices) *indices = positions;
  return LOOM_OK;
}

/* a with dim ax and its last swapped (its own inverse). */
static lm_node *swap_last(lm_node *a, int ax) {
  int nd = a->shape.ndim, perm[LOOM_MAX_DIMS];
  for (int d = 0; d < nd; d++) perm[d] = d;
  perm[ax] = nd - 1, perm[nd - 1] = ax;
  return nb_permute(a, perm);
}

/* The first k of a's lines along ax in order, by one LM_SORT node over the
 * axis moved last (full: a whole sort, k the axis' length). */
static loom_status sort_with_step(const loom_tensor *a, int ax, int64_t k, bool descending,
                                  bool full, loom_tensor **values, loom_tensor **indices) {
  int nd = a->node->shape.ndim;
  lm_node *lines = ax == nd - 1 ? (lm_node_retain(a->node), a->node) : swap_last(a->node, ax);
  loom_shape s = lines ? lines->shape : a->node->shape;
  s.dim[nd - 1] = k;
  lm_node *r = lines ? lm_node_new(LM_SORT, 1, &lines, s, LOOM_I64, lines->device) : NULL;
  lm_node_release(lines);
  if (r) {
    r->arg.sort.k = k, r->arg.sort.descending = descending, r->arg.sort.full = full;
    r->requires_grad = false; /* positions: the values' gradient goes through pick_along */
  }
  lm_node *back = r && ax != nd - 1 ? swap_last(r, ax) : (lm_node_retain(r), r);
  lm_node_release(r);
  return with_values(a, ax, lm_result(back), values, indices);
}

/* ------------------------------------------------------------ sort */

/* Whether a belongs after b: keys in order (NaN the largest, as torch),
 * padding (an index >= n) after every key. */
static loom_tensor *after(const loom_tensor *a, const loom_tensor *b, const loom_tensor *ia,
                          const loom_tensor *ib, int64_t n, bool descending) {
  loom_tensor *a_nan = loom_ne(a, a), *b_nan = loom_ne(b, b);
  loom_tensor *keys =
      descending ? loom_logical_or(loom_lt(a, b), loom_logical_and(b_nan, loom_logical_not(a_nan)))
                 : loom_logical_or(loom_gt(a, b), loom_logical_and(a_nan, loom_logical_not(b_nan)));
  loom_tensor *pa = loom_ge_s(ia, (double)n), *pb = loom_ge_s(ib, (double)n);
  loom_tensor *neither = loom_logical_not(loom_logical_or(pa, pb));
  return loom_logical_or(loom_logical_and(pa, loom_logical_not(pb)),
                         loom_logical_and(neither, keys));
}

/* The positions of a bitonic network (CUDA's rows longer than the sort step
 * takes): the axis padded to a power of two, log2(N) (log2(N) + 1) / 2 stages
 * of compare-exchange over pairs at distance j in blocks of k, each stage a
 * few elementwise ops over views, each pair's positions compared where its
 * values tie, so the order is the stable one the sort step gives. */
static loom_tensor *bitonic_positions(const loom_tensor *a, int ax, bool descending) {
  const char *op = "loom_sort";
  int nd = a->node->shape.ndim;
  int64_t n = a->node->shape.dim[ax], width = 1;
  while (width < n) width *= 2;
  int token = lm_composite_begin();
  loom_device dev = a->node->device;
  /* the axis last, padded; the values compared, their positions beside them */
  loom_tensor *keys = loom_transpose(a, ax, nd - 1);
  loom_shape s = loom_shape_of(keys);
  int64_t pad[2] = {0, width - n};
  keys = loom_contiguous(loom_pad(keys, pad, 2, 0));
  loom_shape ws = s;
  ws.dim[nd - 1] = width;
  loom_tensor *idx = loom_contiguous(
      loom_expand(loom_arange(0, (double)width, 1, LOOM_I64, dev), ws)); /* [.., width] */
  for (int64_t k = 2; k <= width; k *= 2)
    for (int64_t j = k / 2; j >= 1; j /= 2) {
      int64_t blocks = width / (2 * j);
      /* pairs (i, i + j) for i with bit j clear: [.., blocks, 2, j] */
      loom_shape ps = ws;
      ps.ndim = nd + 2;
      ps.dim[nd - 1] = blocks, ps.dim[nd] = 2, ps.dim[nd + 1] = j;
      loom_tensor *kp = loom_reshape(keys, ps), *ip = loom_reshape(idx, ps);
      loom_tensor *ka = loom_slice(kp, nd, 0, 1, 1), *kb = loom_slice(kp, nd, 1, 2, 1);
      loom_tensor *ia = loom_slice(ip, nd, 0, 1, 1), *ib = loom_slice(ip, nd, 1, 2, 1);
      /* a block ascends where bit k of its first index is clear */
      bool *up = malloc((size_t)blocks);
      if (!up) return lm_composite_end(token, lm_error(LOOM_ERR_OOM, "%s: out of memory", op));
      for (int64_t blk = 0; blk < blocks; blk++) up[blk] = ((blk * 2 * j) & k) == 0;
      loom_shape us = {nd + 2, {0}};
      for (int d = 0; d < nd + 2; d++) us.dim[d] = 1;
      us.dim[nd - 1] = blocks;
      loom_tensor *ascend = loom_from_data(up, us, LOOM_BOOL, dev);
      free(up);
      /* ties: the later position after the earlier (negative zeros equal) */
      loom_tensor *tie =
          loom_logical_or(loom_eq(ka, kb), loom_logical_and(loom_ne(ka, ka), loom_ne(kb, kb)));
      loom_tensor *later = loom_gt(ia, ib);
      loom_tensor *a_after =
          loom_logical_or(after(ka, kb, ia, ib, n, descending), loom_logical_and(tie, later));
      loom_tensor *b_after = loom_logical_or(after(kb, ka, ib, ia, n, descending),
                                             loom_logical_and(tie, loom_logical_not(later)));
      loom_tensor *swap = loom_where(ascend, a_after, b_after);
      loom_tensor *kpair[2] = {loom_where(swap, kb, ka), loom_where(swap, ka, kb)};
      loom_tensor *ipair[2] = {loom_where(swap, ib, ia), loom_where(swap, ia, ib)};
      keys = loom_contiguous(loom_reshape(loom_cat(kpair, 2, nd), ws));
      idx = loom_contiguous(loom_reshape(loom_cat(ipair, 2, nd), ws));
    }
  return lm_composite_end(
      token, loom_contiguous(loom_transpose(loom_slice(idx, -1, 0, n, 1), ax, nd - 1)));
}

LM_PUBLIC(loom_status, loom_sort,
          (const loom_tensor *a, int axis, bool descending, loom_tensor **values,
           loom_tensor **indices),
          (a, axis, descending, values, indices)) {
  int ax = axis;
  loom_tensor *err = check_selection("loom_sort", a, axis, &ax, values, indices);
  if (err) return lm_error_status(err);
  int64_t n = a->node->shape.dim[ax];
  if (sort_step_serves(a, ax)) return sort_with_step(a, ax, n, descending, true, values, indices);
  return with_values(a, ax, bitonic_positions(a, ax, descending), values, indices);
}

LM_PUBLIC(loom_tensor *, loom_argsort, (const loom_tensor *a, int axis, bool descending),
          (a, axis, descending)) {
  loom_tensor *indices = NULL;
  loom_status st = loom_sort(a, axis, descending, NULL, &indices);
  return st ? lm_error_recorded(st) : indices;
}

/* ------------------------------------------------------------ topk */

/* torch.topk: the first k of a sort along axis (largest: descending; ties:
 * the first position first): the sort step's partial selection, or the
 * first k of the bitonic network where that serves instead. */
LM_PUBLIC(loom_status, loom_topk,
          (const loom_tensor *a, int64_t k, int axis, bool largest, loom_tensor **values,
           loom_tensor **indices),
          (a, k, axis, largest, values, indices)) {
  const char *op = "loom_topk";
  int ax = axis;
  loom_tensor *err = check_selection(op, a, axis, &ax, values, indices);
  if (err) return lm_error_status(err);
  int64_t len = a->node->shape.dim[ax];
  if (k < 0 || k > len)
    return lm_fail(LOOM_ERR_VALUE, "%s: k %lld is outside [0, %lld] (the length of axis %d)", op,
                   (long long)k, (long long)len, axis);
  if (sort_step_serves(a, ax)) return sort_with_step(a, ax, k, largest, false, values, indices);
  loom_tensor *all = bitonic_positions(a, ax, largest);
  loom_tensor *first = loom_slice(all, ax, 0, k, 1);
  loom_free(all);
  return with_values(a, ax, first, values, indices);
}
