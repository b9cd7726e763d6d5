/* Reductions (sum, mean, max, min, their arg forms; var and std, with a
 * correction), the row-wise ops built from them (softmax, logsumexp), and the
 * running sum (cumsum: one scan step, LM_SCAN). */
#include <math.h>

#include "frontend/frontend.h"

/* Validates axes into a bit mask over the input's dims. A 0-d input is
 * treated as [1] by the callers, so the mask has a bit for it. */
static loom_tensor *axes_mask(const char *name, const lm_node *a, const int *axes, int naxes,
                              uint32_t *mask) {
  int nd = a->shape.ndim > 0 ? a->shape.ndim : 1;
  *mask = 0;
  if (naxes < 0 || (naxes > 0 && !axes))
    return lm_error(LOOM_ERR_NULL, "%s: %d axes but the axis list is NULL", name, naxes);
  if (naxes == 0) {
    *mask = (nd >= 32 ? 0xffffffffu : (1u << nd) - 1);
    return NULL;
  }
  for (int i = 0; i < naxes; i++) {
    int ax = axes[i];
    char sb[128];
    if (!lm_axis(&ax, a->shape.ndim))
      return lm_error(LOOM_ERR_AXIS, "%s: axis %d is out of range for shape %s", name, axes[i],
                      lm_shape_str(&a->shape, sb, sizeof sb));
    if (*mask & (1u << ax))
      return lm_error(LOOM_ERR_AXIS, "%s: axis %d appears twice", name, axes[i]);
    *mask |= 1u << ax;
  }
  return NULL;
}

static lm_node *as_at_least_1d(lm_node *a) {
  return a->shape.ndim ? (lm_node_retain(a), a) : nb_reshape(a, LOOM_SHAPE(1));
}

static int64_t reduced_count(const lm_node *a, uint32_t mask) {
  int64_t n = 1;
  for (int d = 0; d < a->shape.ndim; d++)
    if (mask & (1u << d)) n *= a->shape.dim[d];
  return n;
}

/* The reduction `op` of `a` (dtype `dt`) over mask, squeezed unless keepdim.
 * The result of a 0-d input is 0-d. */
static lm_node *reduce_node(lm_op op, lm_node *a, loom_dtype dt, uint32_t mask, bool keepdim) {
  bool scalar_in = a->shape.ndim == 0;
  lm_node *one_d = as_at_least_1d(a);
  lm_node *c = nb_cast(one_d, dt);
  lm_node *r = nb_reduce(op, c, mask);
  lm_node *out = scalar_in ? nb_reshape(r, LOOM_SHAPE0)
                 : keepdim ? (lm_node_retain(r), r)
                           : nb_squeeze_axes(r, mask);
  nb_drop(one_d, c, r, NULL);
  return out;
}

static loom_tensor *check_nonempty(const char *name, const lm_node *a, uint32_t mask) {
  if (lm_shape_numel(&a->shape) != 0 || reduced_count(a, mask) != 0 || a->shape.ndim == 0)
    return NULL;
  char sb[128];
  return lm_error(LOOM_ERR_SHAPE, "%s: cannot reduce over an empty axis of shape %s", name,
                  lm_shape_str(&a->shape, sb, sizeof sb));
}

/* torch's sum dtype: a float keeps its own, integers and bool give I64 (U64
 * keeps U64, as NumPy: I64 would not hold its values). */
static loom_dtype sum_dtype(loom_dtype d) {
  return loom_dtype_is_float(d) || d == LOOM_U64 ? d : LOOM_I64;
}

loom_tensor *loom_sum(const loom_tensor *a, const int *axes, int naxes, bool keepdim) {
  loom_tensor *err;
  uint32_t mask;
  if ((err = lm_check("loom_sum", a)) || (err = axes_mask("loom_sum", a->node, axes, naxes, &mask)))
    return err;
  loom_dtype dt = sum_dtype(a->node->dtype);
  return lm_result(reduce_node(LM_RSUM, a->node, dt, mask, keepdim));
}

loom_tensor *loom_mean(const loom_tensor *a, const int *axes, int naxes, bool keepdim) {
  loom_tensor *err;
  uint32_t mask;
  if ((err = lm_check("loom_mean", a)) ||
      (err = axes_mask("loom_mean", a->node, axes, naxes, &mask)))
    return err;
  if (!loom_dtype_is_float(a->node->dtype))
    return lm_error(LOOM_ERR_DTYPE, "loom_mean: needs a float tensor, got %s (cast it first)",
                    loom_dtype_name(a->node->dtype));
  /* BF16 and F16 sum and divide in F32, rounded once (as torch) */
  lm_node *s = reduce_node(LM_RSUM, a->node, lm_compute_dtype(a->node->dtype), mask, keepdim);
  lm_node *n = s ? nb_const((double)(a->node->shape.ndim ? reduced_count(a->node, mask) : 1),
                            s->shape, s->dtype, s->device)
                 : NULL;
  lm_node *q = nb_binary(LM_DIV, s, n);
  lm_node *r = nb_cast(q, a->node->dtype);
  nb_drop(s, n, q, NULL);
  return lm_result(r);
}

static loom_tensor *extremum(const char *name, lm_op op, const loom_tensor *a, const int *axes,
                             int naxes, bool keepdim) {
  loom_tensor *err;
  uint32_t mask;
  if ((err = lm_check(name, a)) || (err = axes_mask(name, a->node, axes, naxes, &mask)) ||
      (err = check_nonempty(name, a->node, mask)))
    return err;
  return lm_result(reduce_node(op, a->node, a->node->dtype, mask, keepdim));
}

loom_tensor *loom_max(const loom_tensor *a, const int *axes, int naxes, bool keepdim) {
  return extremum("loom_max", LM_RMAX, a, axes, naxes, keepdim);
}
loom_tensor *loom_min(const loom_tensor *a, const int *axes, int naxes, bool keepdim) {
  return extremum("loom_min", LM_RMIN, a, axes, naxes, keepdim);
}
LM_PUBLIC(loom_tensor *, loom_sum_all, (const loom_tensor *a), (a)) {
  return loom_sum(a, NULL, 0, false);
}
LM_PUBLIC(loom_tensor *, loom_mean_all, (const loom_tensor *a), (a)) {
  return loom_mean(a, NULL, 0, false);
}

static loom_tensor *arg_extremum(const char *name, lm_op op, const loom_tensor *a, int axis,
                                 bool keepdim) {
  loom_tensor *err;
  uint32_t mask;
  if ((err = lm_check(name, a)) || (err = axes_mask(name, a->node, &axis, 1, &mask)) ||
      (err = check_nonempty(name, a->node, mask)))
    return err;
  return lm_result(reduce_node(op, a->node, a->node->dtype, mask, keepdim));
}

loom_tensor *loom_argmax(const loom_tensor *a, int axis, bool keepdim) {
  return arg_extremum("loom_argmax", LM_ARGMAX, a, axis, keepdim);
}
loom_tensor *loom_argmin(const loom_tensor *a, int axis, bool keepdim) {
  return arg_extremum("loom_argmin", LM_ARGMIN, a, axis, keepdim);
}

/* ------------------------------------------------------------ row-wise */

typedef enum rowwise { SOFTMAX, LOG_SOFTMAX, LOGSUMEXP } rowwise;

/* softmax and log_softmax from the max m (not differentiated: it cancels) and
 * s = sum(exp(x - m)): softmax = exp(x - m) / s, log_softmax = (x - m) -
 * log(s), as PyTorch computes them. x - m keeps the row's differences exact
 * whatever the logits' size (x - (m + log s) lost log s past |x| ~ 1e15: 0
 * instead of -0.693 at 1e16). Over the last dim each is one row kernel (m and
 * s its statistics; softmax stores exp(x - m) while summing it and divides in
 * place, one exp per element); over another dim three kernels (m, s, the
 * result). logsumexp is one LM_RLSE reduction (max, then the sum of exp(x -
 * max), in one kernel), in F64 for F32 x (its max and exps stay in float),
 * rounded once. */
static lm_node *row_max(lm_node *x, uint32_t mask) {
  lm_no_grad_push();
  lm_node *m = nb_reduce(LM_RMAX, x, mask);
  lm_no_grad_pop();
  return m;
}

static lm_node *softmax_of(lm_node *x, uint32_t mask, bool log_form) {
  lm_node *m = row_max(x, mask);
  lm_node *mx = x ? nb_expand(m, x->shape) : NULL;
  lm_node *d = nb_binary(LM_SUB, x, mx);
  lm_node *e = nb_unary(LM_EXP, d);
  lm_node *s = nb_reduce(LM_RSUM, e, mask);
  lm_node *ls = log_form ? nb_unary(LM_LOG, s) : (lm_node_retain(s), s);
  lm_node *sx = x ? nb_expand(ls, x->shape) : NULL;
  lm_node *r = log_form ? nb_binary(LM_SUB, d, sx) : nb_binary(LM_DIV, e, sx);
  nb_drop(m, mx, d, e);
  nb_drop(s, ls, sx, NULL);
  return r;
}

static loom_tensor *row(const char *name, rowwise kind, const loom_tensor *a, int axis) {
  loom_tensor *err;
  uint32_t mask;
  if ((err = lm_check(name, a)) || (err = axes_mask(name, a->node, &axis, 1, &mask))) return err;
  bool scalar_in = a->node->shape.ndim == 0;
  loom_dtype out = lm_float_result(a->node->dtype), dt = lm_compute_dtype(out);
  lm_node *one_d = as_at_least_1d(a->node);
  lm_node *x = nb_cast(one_d, dt);
  lm_node *r = NULL;
  if (kind != LOGSUMEXP) {
    lm_node *y = softmax_of(x, mask, kind == LOG_SOFTMAX);
    lm_node *c = nb_cast(y, out); /* BF16 and F16: computed in F32, rounded once */
    r = scalar_in ? nb_reshape(c, LOOM_SHAPE0) : (lm_node_retain(c), c);
    nb_drop(y, c, NULL, NULL);
  } else {
    lm_node *lse = nb_reduce(LM_RLSE, x, mask);
    if (lse) lse->dtype = LOOM_F64; /* an F32 x still takes its max and exps in float */
    lm_node *l = scalar_in ? nb_reshape(lse, LOOM_SHAPE0) : nb_squeeze_axes(lse, mask);
    r = nb_cast(l, out);
    nb_drop(lse, l, NULL, NULL);
  }
  nb_drop(one_d, x, NULL, NULL);
  return lm_result(r);
}

loom_tensor *loom_softmax(const loom_tensor *a, int axis) {
  return row("loom_softmax", SOFTMAX, a, axis);
}
loom_tensor *loom_log_softmax(const loom_tensor *a, int axis) {
  return row("loom_log_softmax", LOG_SOFTMAX, a, axis);
}
loom_tensor *loom_logsumexp(const loom_tensor *a, int axis) {
  return row("loom_logsumexp", LOGSUMEXP, a, axis);
}

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

/* ------------------------------------------------------------ cumsum */

/* torch.cumsum: one scan step (LM_SCAN) along the axis. Integers and bools
 * sum as I64 (torch's result; exact, wrapping on overflow as torch's),
 * floats give their dtype: F32 summed in double, as torch's CPU, and halves
 * in F32 (then in double), rounded to their dtype once. */
LM_PUBLIC(loom_tensor *, loom_cumsum, (const loom_tensor *a, int axis), (a, axis)) {
  const char *op = "loom_cumsum";
  loom_tensor *err;
  if ((err = lm_check(op, a))) return err;
  int nd = a->node->shape.ndim, ax = axis;
  loom_dtype dt = a->node->dtype, out = sum_dtype(dt);
  if (nd == 0) return loom_cast(a, out);
  if ((err = lm_check_axis(op, &ax, nd))) return err;
  int token = lm_composite_begin();
  /* the scan kernel adds F32, F64 and I64; U64's sums are I64's bits */
  loom_dtype scanned = out == LOOM_BF16 || out == LOOM_F16 ? LOOM_F32
                       : out == LOOM_U64                   ? LOOM_I64
                                                           : out;
  loom_tensor *x = loom_cast(a, scanned);
  loom_tensor *sums = loom_status_of(x) ? x : lm_result(nb_scan(x->node, ax, false));
  return lm_composite_end(token, loom_cast(sums, out));
}
