/* The op table's lookup, and helpers every op family uses. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

static const struct {
  const onnx_op *ops;
  const int *count;
} families[] = {
    {onnx_ops_elementwise, &onnx_ops_elementwise_count},
    {onnx_ops_tensor, &onnx_ops_tensor_count},
    {onnx_ops_nn, &onnx_ops_nn_count},
    {onnx_ops_reduce, &onnx_ops_reduce_count},
    {onnx_ops_attention, &onnx_ops_attention_count},
    {onnx_ops_loss, &onnx_ops_loss_count},
    {onnx_ops_quant, &onnx_ops_quant_count},
    {onnx_ops_resize, &onnx_ops_resize_count},
    {onnx_ops_control, &onnx_ops_control_count},
    {onnx_ops_indexing, &onnx_ops_indexing_count},
    {onnx_ops_misc, &onnx_ops_misc_count},
    {onnx_ops_sampling, &onnx_ops_sampling_count},
    {onnx_ops_signal, &onnx_ops_signal_count},
    {onnx_ops_rnn, &onnx_ops_rnn_count},
};

const onnx_op *onnx_find_op(const char *op_type) {
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (int i = 0; i < *families[f].count; i++)
      if (strcmp(families[f].ops[i].op_type, op_type) == 0) return &families[f].ops[i];
  return NULL;
}

bool onnx_is_integer(loom_dtype dt) {
  return dt == LOOM_I32 || dt == LOOM_I64 || dt == LOOM_U8 || dt == LOOM_I8 || dt == LOOM_I16 ||
         dt == LOOM_U16 || dt == LOOM_U32 || dt == LOOM_U64;
}

void onnx_int_range(loom_dtype dt, double *lo, double *hi) {
  switch (dt) {
  case LOOM_I8: *lo = -128, *hi = 127; break;
  case LOOM_U8: *lo = 0, *hi = 255; break;
  case LOOM_I16: *lo = -32768, *hi = 32767; break;
  case LOOM_U16: *lo = 0, *hi = 65535; break;
  case LOOM_I32: *lo = -2147483648.0, *hi = 2147483647.0; break;
  case LOOM_U32: *lo = 0, *hi = 4294967295.0; break;
  /* the doubles nearest the ends that convert back inside the range */
  case LOOM_I64: *lo = -9223372036854775808.0, *hi = 9223372036854774784.0; break;
  case LOOM_U64: *lo = 0, *hi = 18446744073709549568.0; break;
  case LOOM_BOOL: *lo = 0, *hi = 1; break;
  default: *lo = -INFINITY, *hi = INFINITY; break;
  }
}

bool onnx_is_float(loom_dtype dt) {
  return dt == LOOM_F32 || dt == LOOM_F64 || dt == LOOM_F16 || dt == LOOM_BF16;
}

loom_status onnx_trailing_axes(onnx_node *n, int rank, int *axes, int *count) {
  int axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", -1), rank, &axis);
  *count = 0;
  for (int d = axis; !st && d < rank; d++) axes[(*count)++] = d;
  return st;
}

loom_status onnx_running_axis(onnx_node *n, loom_tensor *x, int *axis, bool *exclusive,
                              bool *reverse) {
  int64_t a;
  int count;
  loom_status st = onnx_ints(n, 1, &a, 1, &count);
  if (!st) st = onnx_axis(n, a, onnx_rank(x), axis);
  *exclusive = onnx_attr_int(n, "exclusive", 0) != 0;
  *reverse = onnx_attr_int(n, "reverse", 0) != 0;
  return st;
}

int onnx_rank(const loom_tensor *t) { return loom_ndim(t); }

loom_shape onnx_shape(const loom_tensor *t) { return loom_shape_of(t); }

loom_tensor *onnx_ones_along(loom_tensor *x, int axis) {
  loom_tensor *line = loom_retain(x);
  for (int d = 0; d < loom_ndim(x); d++)
    if (d != axis) {
      loom_tensor *cut = loom_slice(line, d, 0, 1, 1);
      loom_free(line);
      line = cut;
    }
  loom_tensor *flat = loom_flatten(line, 0, -1);
  loom_free(line);
  /* true whatever the values, NaN included */
  return loom_cast(loom_logical_or(loom_eq(flat, flat), loom_ne(flat, flat)), LOOM_I64);
}

loom_tensor *onnx_scalar_like(double value, const loom_tensor *like) {
  return loom_scalar(value, loom_dtype_of(like), loom_device_of(like));
}
