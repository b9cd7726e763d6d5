/* torch ops that the core ops express: var and std (with a correction),
 * sign, repeat, index_select and gather, flip (a reversed view). Each is a
 * composition (its gradient the composition's: index_select's is the
 * embedding's scatter-add, gather's the selection's), fused like any other.
 * Sort and topk record one library step (LM_SORT: the positions), their
 * values gathered by them; or a bitonic network of elementwise ops. Cumsum
 * records one scan step (LM_SCAN). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

/* ------------------------------------------------------------ var, std */

static loom_tensor *variance(const char *op, const loom_tensor *a, const int *axes, int naxes,
                             double correction, bool keepdim, bool root) {
  loom_tensor *err;
  if ((err = lm_check(op, a))) return err;
  if (!(correction >= 0) || isinf(correction))
    return lm_error(LOOM_ERR_VALUE, "%s: correction %g is not a finite value >= 0", op, correction);
  /* the reduced count, from the axes as loom_sum reads them (it checks them) */
  const loom_shape *s = &a->node->shape;
  int64_t count = 1;
  bool seen[LOOM_MAX_DIMS] = {false};
  for (int i = 0; i < (naxes ? naxes : s->ndim); i++) {
    int ax = naxes ? axes[i] : i;
    if (!lm_axis(&ax, s->ndim) || seen[ax]) break; /* loom_sum reports it */
    seen[ax] = true;
    count *= s->dim[ax];
  }
  int token = lm_composite_begin();
  /* In F64, as torch sums the squares of float values in double: in F32 they
   * overflowed past 1.8e19 and lost their digits below 1e-19
   * (std([+-1e37, +-2e37]) was inf for torch's 1.8257e37, the std of 1e-30
   * values 0). BF16 and F16 are rounded once, from F64; F64 values square in
   * F64, as torch's do. */
  loom_dtype out = lm_float_result(a->node->dtype);
  loom_tensor *x = loom_cast(a, LOOM_F64);
  loom_tensor *centered = loom_sub(x, loom_mean(x, axes, naxes, true));
  loom_tensor *squares = loom_sum(loom_square(centered), axes, naxes, keepdim);
  /* torch: max(0, N - correction); 0 gives inf or NaN, as torch */
  double denominator = (double)count - correction > 0 ? (double)count - correction : 0;
  loom_tensor *v = loom_div_s(squares, denominator);
  return lm_composite_end(token, loom_cast(root ? loom_sqrt(v) : v, out));
}

LM_PUBLIC(loom_tensor *, loom_var,
          (const loom_tensor *a, const int *axes, int naxes, double correction, bool keepdim),
          (a, axes, naxes, correction, keepdim)) {
  return variance("loom_var", a, axes, naxes, correction, keepdim, false);
}

LM_PUBLIC(loom_tensor *, loom_std,
          (const loom_tensor *a, const int *axes, int naxes, double correction, bool keepdim),
          (a, axes, naxes, correction, keepdim)) {
  return variance("loom_std", a, axes, naxes, correction, keepdim, true);
}

/* ------------------------------------------------------------ sign */

LM_PUBLIC(loom_tensor *, loom_sign, (const loom_tensor *a), (a)) {
  loom_tensor *err;
  if ((err = lm_check("loom_sign", a))) return err;
  if (a->node->dtype == LOOM_BOOL) return loom_cast(a, LOOM_BOOL);
  int token = lm_composite_begin();
  loom_dtype dt = a->node->dtype;
  /* (a > 0) - (a < 0); NaN stays NaN, as torch */
  loom_tensor *s = loom_sub(loom_cast(loom_gt_s(a, 0), dt), loom_cast(loom_lt_s(a, 0), dt));
  if (loom_dtype_is_float(dt)) s = loom_where(loom_ne(a, a), a, s);
  return lm_composite_end(token, s);
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

/* ------------------------------------------------------------ indexing */

/* torch.index_select: a's slices at index (1-D integers) along axis, through
 * the embedding's row gather with axis moved first. */
loom_tensor *lm_index_select(const char *op, const loom_tensor *a, int axis,
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
  return lm_index_select("loom_index_select", a, axis, index, true);
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

/* ------------------------------------------------------------ topk, sampling */

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

/* torch.multinomial by the Gumbel-max trick: argmax(log p + g), g Gumbel
 * noise drawn from key, is a draw from p / sum(p); n such draws are n
 * independent draws, and the top n of one set of noisy scores are n draws
 * without replacement (Gumbel-top-k). */
LM_PUBLIC(loom_tensor *, loom_multinomial_key,
          (loom_key key, const loom_tensor *probs, int64_t n, bool replacement),
          (key, probs, n, replacement)) {
  const char *op = "loom_multinomial_key";
  loom_tensor *err;
  if ((err = lm_check(op, probs))) return err;
  const loom_shape *s = &probs->node->shape;
  if (s->ndim < 1 || s->ndim > 2 || !loom_dtype_is_float(probs->node->dtype)) {
    char sp[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: needs float probabilities [C] or [N, C], got %s %s", op,
                    loom_dtype_name(probs->node->dtype), lm_shape_str(s, sp, sizeof sp));
  }
  int64_t classes = s->dim[s->ndim - 1];
  if (n <= 0 || (!replacement && n > classes))
    return lm_error(LOOM_ERR_VALUE, "%s: %lld draws %s from %lld categories", op, (long long)n,
                    replacement ? "with replacement" : "without replacement", (long long)classes);
  int token = lm_composite_begin();
  /* torch's invalid distributions (a weight < 0, inf or NaN; a row summing to
   * 0) refused, not drawn from: log of a negative weight is NaN, which
   * argmax takes for the largest */
  loom_tensor *weights = lm_checked_weights(op, probs);
  loom_tensor *logp = loom_log(loom_cast(weights, LOOM_F64)), *draws;
  if (replacement) { /* [.., n, C]: n noisy copies */
    loom_shape wide = *s;
    wide.ndim = s->ndim + 1;
    wide.dim[wide.ndim - 1] = classes, wide.dim[wide.ndim - 2] = n;
    loom_tensor *u = loom_rand_key(key, wide, LOOM_F64, probs->node->device);
    if (loom_status_of(u) == LOOM_OK) /* the draws, counted by the user */
      nb_user_sized(u->node, op, (uint8_t)(1u << (wide.ndim - 2)));
    loom_tensor *gumbel = loom_neg(loom_log(loom_neg(loom_log(u))));
    draws = loom_argmax(loom_add(loom_unsqueeze(logp, -2), gumbel), -1, false);
  } else {
    loom_tensor *u = loom_rand_key(key, *s, LOOM_F64, probs->node->device);
    loom_tensor *gumbel = loom_neg(loom_log(loom_neg(loom_log(u))));
    loom_status st = loom_topk(loom_add(logp, gumbel), n, -1, true, NULL, &draws);
    if (st) return lm_composite_end(token, lm_error_recorded(st));
  }
  return lm_composite_end(token, draws);
}

/* ------------------------------------------------------------ flip, cumsum */

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

/* torch.cumsum: one scan step (LM_SCAN) along the axis. Integers and bools
 * sum as I64 (torch's result; exact, wrapping on overflow as torch's),
 * floats give their dtype: F32 summed in double, as torch's CPU, and halves
 * in F32 (then in double), rounded to their dtype once. */
LM_PUBLIC(loom_tensor *, loom_cumsum, (const loom_tensor *a, int axis), (a, axis)) {
  const char *op = "loom_cumsum";
  loom_tensor *err;
  if ((err = lm_check(op, a))) return err;
  int nd = a->node->shape.ndim, ax = axis;
  loom_dtype dt = a->node->dtype, out = loom_dtype_is_float(dt) ? dt : LOOM_I64;
  if (nd == 0) return loom_cast(a, out);
  if ((err = lm_check_axis(op, &ax, nd))) return err;
  int token = lm_composite_begin();
  loom_tensor *x = loom_cast(a, out == LOOM_BF16 || out == LOOM_F16 ? LOOM_F32 : out);
  loom_tensor *sums = loom_status_of(x) ? x : lm_result(nb_scan(x->node, ax, false));
  return lm_composite_end(token, loom_cast(sums, out));
}
