/* Reductions and arg-reductions. The axes are an attribute, or from opset 13
 * (ReduceSum) and 18 (the others) an optional input; none reduces every axis,
 * or none when noop_with_empty_axes is set. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

typedef enum {
  R_SUM,
  R_MEAN,
  R_MAX,
  R_MIN,
  R_PROD,
  R_SUM_SQUARE,
  R_L1,
  R_L2,
  R_LOG_SUM,
  R_LOG_SUM_EXP
} reduction;

static loom_status reduce(onnx_node *n, reduction kind, int64_t axes_input_since) {
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x);
  int64_t raw[LOOM_MAX_DIMS];
  int count = -1;
  loom_status st;
  if (n->opset < axes_input_since)
    st = onnx_attr_ints(n, "axes", raw, LOOM_MAX_DIMS, &count);
  else
    st = onnx_has_in(n, 1) ? onnx_ints(n, 1, raw, LOOM_MAX_DIMS, &count) : LOOM_OK;
  if (st) return st;
  bool keep = onnx_attr_int(n, "keepdims", 1);
  if (count <= 0 && onnx_attr_int(n, "noop_with_empty_axes", 0)) {
    onnx_out(n, 0, loom_retain(x));
    return LOOM_OK;
  }
  int axes[LOOM_MAX_DIMS], nax = 0;
  if (count <= 0) {
    for (int d = 0; d < rank; d++) axes[nax++] = d;
  } else {
    for (int i = 0; i < count; i++)
      if ((st = onnx_axis(n, raw[i], rank, &axes[nax++]))) return st;
  }
  loom_dtype dt = loom_dtype_of(x);
  loom_shape in = loom_shape_of(x), out = {0};
  bool empty = false, reduced[LOOM_MAX_DIMS] = {0};
  for (int i = 0; i < nax; i++) reduced[axes[i]] = true, empty |= in.dim[axes[i]] == 0;
  if (empty) { /* the reduction's identity, as ONNX's reference */
    for (int d = 0; d < in.ndim; d++)
      if (!reduced[d] || keep) out.dim[out.ndim++] = reduced[d] ? 1 : in.dim[d];
    bool fl = onnx_is_float(dt);
    double v = 0;
    double least, greatest;
    onnx_int_range(dt, &least, &greatest);
    if (kind == R_MAX || kind == R_LOG_SUM || kind == R_LOG_SUM_EXP)
      v = least;
    else if (kind == R_MIN)
      v = greatest;
    else if (kind == R_PROD)
      v = 1;
    else if (kind == R_MEAN)
      v = fl ? NAN : 0; /* an integer mean of nothing: 0 (a full of NaN is refused) */
    onnx_out(n, 0, loom_full(out, v, dt, onnx_device(n)));
    return LOOM_OK;
  }
  loom_tensor *r;
  switch (kind) {
  case R_SUM: r = loom_sum(x, axes, nax, keep); break;
  case R_MEAN: r = loom_mean(x, axes, nax, keep); break;
  case R_MAX: r = loom_max(x, axes, nax, keep); break;
  case R_MIN: r = loom_min(x, axes, nax, keep); break;
  case R_SUM_SQUARE: r = loom_sum(loom_mul(x, x), axes, nax, keep); break;
  case R_L1: r = loom_sum(loom_abs(x), axes, nax, keep); break;
  case R_L2: r = loom_sqrt(loom_sum(loom_mul(x, x), axes, nax, keep)); break;
  case R_LOG_SUM: r = loom_log(loom_sum(x, axes, nax, keep)); break;
  case R_LOG_SUM_EXP: {
    loom_tensor *m = loom_max(x, axes, nax, true);
    /* an all -inf row: its max subtracted would make NaN */
    m = loom_where_s(loom_eq_s(m, -INFINITY), m, 0);
    loom_tensor *s = loom_log(loom_sum(loom_exp(loom_sub(x, m)), axes, nax, true));
    r = loom_add(s, m);
    if (!keep) {
      loom_shape sh = loom_shape_of(x), out = {0};
      bool drop[LOOM_MAX_DIMS] = {0};
      for (int i = 0; i < nax; i++) drop[axes[i]] = true;
      for (int d = 0; d < sh.ndim; d++)
        if (!drop[d]) out.dim[out.ndim++] = sh.dim[d];
      r = loom_reshape(r, out);
    }
    break;
  }
  case R_PROD: {
    /* |x|'s product as exp(sum log|x|), its sign from the count of negatives, 0 where any is 0 */
    loom_tensor *w = loom_cast(x, LOOM_F64);
    loom_tensor *mag = loom_exp(loom_sum(loom_log(loom_abs(w)), axes, nax, keep));
    loom_tensor *negs = loom_sum(loom_cast(loom_lt_s(w, 0), LOOM_F64), axes, nax, keep);
    loom_tensor *odd = loom_ne_s(loom_sub(negs, loom_mul_s(loom_floor(loom_div_s(negs, 2)), 2)), 0);
    loom_tensor *zero = loom_max(loom_cast(loom_eq_s(w, 0), LOOM_F64), axes, nax, keep);
    r = loom_where(odd, loom_neg(mag), mag);
    r = loom_where_s(loom_eq_s(zero, 0), r, 0);
    if (!onnx_is_float(dt)) r = loom_round(r);
    break;
  }
  default: return onnx_refuse(n, LOOM_ERR_INTERNAL, "reduction %d", (int)kind);
  }
  onnx_out(n, 0, loom_cast(r, dt));
  return LOOM_OK;
}

static loom_status op_reduce_sum(onnx_node *n) { return reduce(n, R_SUM, 13); }
static loom_status op_reduce_mean(onnx_node *n) { return reduce(n, R_MEAN, 18); }
static loom_status op_reduce_max(onnx_node *n) { return reduce(n, R_MAX, 18); }
static loom_status op_reduce_min(onnx_node *n) { return reduce(n, R_MIN, 18); }
static loom_status op_reduce_prod(onnx_node *n) { return reduce(n, R_PROD, 18); }
static loom_status op_reduce_sum_square(onnx_node *n) { return reduce(n, R_SUM_SQUARE, 18); }
static loom_status op_reduce_l1(onnx_node *n) { return reduce(n, R_L1, 18); }
static loom_status op_reduce_l2(onnx_node *n) { return reduce(n, R_L2, 18); }
static loom_status op_reduce_log_sum(onnx_node *n) { return reduce(n, R_LOG_SUM, 18); }
static loom_status op_reduce_log_sum_exp(onnx_node *n) { return reduce(n, R_LOG_SUM_EXP, 18); }

/* select_last_index: the last of equal extremes, found in the flipped axis. */
static loom_status arg(onnx_node *n, bool max) {
  loom_tensor *x = onnx_in(n, 0);
  int axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", 0), onnx_rank(x), &axis);
  if (st) return st;
  bool keep = onnx_attr_int(n, "keepdims", 1), last = onnx_attr_int(n, "select_last_index", 0);
  loom_tensor *src = last ? loom_flip(x, axis) : loom_retain(x);
  loom_tensor *i = max ? loom_argmax(src, axis, keep) : loom_argmin(src, axis, keep);
  if (last) i = loom_rsub_s((double)(loom_shape_of(x).dim[axis] - 1), i);
  onnx_out(n, 0, i);
  return LOOM_OK;
}
static loom_status op_arg_max(onnx_node *n) { return arg(n, true); }
static loom_status op_arg_min(onnx_node *n) { return arg(n, false); }

const onnx_op onnx_ops_reduce[] = {
    ONNX_OP(ReduceSum, op_reduce_sum),
    ONNX_OP(ReduceMean, op_reduce_mean),
    ONNX_OP(ReduceMax, op_reduce_max),
    ONNX_OP(ReduceMin, op_reduce_min),
    ONNX_OP(ReduceProd, op_reduce_prod),
    ONNX_OP(ReduceSumSquare, op_reduce_sum_square),
    ONNX_OP(ReduceL1, op_reduce_l1),
    ONNX_OP(ReduceL2, op_reduce_l2),
    ONNX_OP(ReduceLogSum, op_reduce_log_sum),
    ONNX_OP(ReduceLogSumExp, op_reduce_log_sum_exp),
    ONNX_OP(ArgMax, op_arg_max),
    ONNX_OP(ArgMin, op_arg_min),
};
const int onnx_ops_reduce_count = sizeof onnx_ops_reduce / sizeof onnx_ops_reduce[0];
