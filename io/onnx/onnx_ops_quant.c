/* Quantized ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
 * MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv. Scales and zero
 * points are per tensor, per axis (1-D along `axis`) or per block
 * (block_size along `axis`); rounding is to nearest even and results
 * saturate to the integer dtype, as ONNX asks. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

/* A scale or zero point shaped to broadcast against a rank-`rank` tensor of
 * shape s: a scalar as is, 1-D along axis, blocked ones repeated block_size
 * times along axis and cut to s's length. */
static loom_status fit_param(onnx_node *n, loom_tensor *p, loom_shape s, int axis, int64_t block,
                             loom_tensor **out) {
  loom_shape ps = loom_shape_of(p);
  if (loom_numel(p) == 1 && block <= 0) {
    *out = loom_reshape(p, LOOM_SHAPE0);
    return LOOM_OK;
  }
  if (block > 0) {
    if (block > (int64_t)1 << 30)
      return onnx_refuse(n, LOOM_ERR_VALUE, "block_size %lld", (long long)block);
    if (ps.ndim != s.ndim)
      return onnx_refuse(n, LOOM_ERR_SHAPE, "a blocked scale of rank %d for rank %d", ps.ndim,
                         s.ndim);
    loom_tensor *u = loom_unsqueeze(p, axis + 1);
    loom_shape es = loom_shape_of(u);
    es.dim[axis + 1] = block;
    loom_shape merged = ps;
    merged.dim[axis] = ps.dim[axis] * block;
    loom_tensor *r = loom_reshape(loom_expand(u, es), merged);
    *out = loom_slice(r, axis, 0, s.dim[axis], 1);
    return LOOM_OK;
  }
  if (ps.ndim != 1 || ps.dim[0] != s.dim[axis])
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a scale of %lld values along axis %d of size %lld",
                       (long long)loom_numel(p), axis, (long long)s.dim[axis]);
  loom_shape b = {.ndim = s.ndim};
  for (int d = 0; d < s.ndim; d++) b.dim[d] = d == axis ? s.dim[axis] : 1;
  *out = loom_reshape(p, b);
  return LOOM_OK;
}

/* round-half-even(v) + zero point, saturated to dt. */
static loom_tensor *saturate(loom_tensor *v, loom_dtype dt) {
  double lo, hi;
  onnx_int_range(dt, &lo, &hi);
  return loom_cast(loom_clamp(loom_round(v), lo, hi), dt);
}

/* Inputs 1 and 2 (the scale, the optional zero point) fitted to x by the axis
 * and block_size attributes; the axis matters only for a scale that is not a
 * scalar. */
static loom_status scale_and_zero_point(onnx_node *n, loom_tensor *x, loom_tensor **scale,
                                        loom_tensor **zp) {
  loom_shape s = loom_shape_of(x);
  int64_t block = onnx_attr_int(n, "block_size", 0);
  int axis = 0;
  loom_status st = LOOM_OK;
  *zp = NULL;
  if (block > 0 || loom_numel(onnx_in(n, 1)) != 1)
    st = onnx_axis(n, onnx_attr_int(n, "axis", 1), s.ndim, &axis);
  if (!st) st = fit_param(n, onnx_in(n, 1), s, axis, block, scale);
  if (!st && onnx_has_in(n, 2)) st = fit_param(n, onnx_in(n, 2), s, axis, block, zp);
  return st;
}

/* The output's type: output_dtype, else the zero point's, else uint8; a
 * narrow one (int4, float8, ...) is held wider with its values in range. */
static loom_status op_quantize_linear(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int32_t type = onnx_has_in(n, 2) ? onnx_in_narrow(n, 2) : 0;
  loom_dtype out = onnx_has_in(n, 2) ? loom_dtype_of(onnx_in(n, 2)) : LOOM_U8;
  if (onnx_attr(n, "output_dtype")) {
    const char *name;
    type = (int32_t)onnx_attr_int(n, "output_dtype", 2);
    int d = onnx_dtype_held(type, &name);
    if (d < 0) return onnx_refuse(n, LOOM_ERR_DTYPE, "output_dtype %s", name);
    out = (loom_dtype)d;
    if (!onnx_dtype_is_narrow(type)) type = 0;
  }
  if (!type && out != LOOM_U8 && out != LOOM_I8 && out != LOOM_U16 && out != LOOM_I16 &&
      out != LOOM_I32)
    return onnx_refuse(n, LOOM_ERR_DTYPE,
                       "quantizing to %s: loom quantizes to uint8, int8, uint16, int16, int32 and "
                       "the narrow types (int4, uint4, int2, uint2, float8, float4)",
                       loom_dtype_name(out));
  loom_tensor *scale, *zp;
  loom_status st = scale_and_zero_point(n, x, &scale, &zp);
  if (st) return st;
  loom_dtype work = loom_dtype_of(x) == LOOM_F64 ? LOOM_F64 : LOOM_F32;
  loom_tensor *v = loom_div(loom_cast(x, work), loom_cast(scale, work));
  bool to_float = type && onnx_dtype_held(type, NULL) == LOOM_F16;
  if (!to_float) v = loom_round(v);
  if (zp) v = loom_add(v, loom_cast(zp, work));
  if (to_float)
    onnx_out_narrow(n, 0, onnx_narrow_cast(v, type, onnx_attr_int(n, "saturate", 1) != 0), type);
  else
    onnx_out_narrow(n, 0, type ? onnx_narrow_saturate(v, type) : saturate(v, out), type);
  return LOOM_OK;
}

static loom_status op_dequantize_linear(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_tensor *scale, *zp;
  loom_status st = scale_and_zero_point(n, x, &scale, &zp);
  if (st) return st;
  loom_dtype dt = loom_dtype_of(scale);
  loom_tensor *v = loom_cast(x, LOOM_F32);
  if (zp) v = loom_sub(v, loom_cast(zp, LOOM_F32));
  onnx_out_narrow(n, 0, loom_cast(loom_mul(v, loom_cast(scale, LOOM_F32)), dt), 0);
  return LOOM_OK;
}

/* uint8 with scale (max(0, max x) - min(0, min x)) / 255 and the zero point
 * that maps 0 exactly. */
static loom_status op_dynamic_quantize_linear(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_tensor *hi = loom_maximum_s(loom_max(x, NULL, 0, false), 0);
  loom_tensor *lo = loom_minimum_s(loom_min(x, NULL, 0, false), 0);
  loom_tensor *scale = loom_div_s(loom_sub(hi, lo), 255);
  loom_tensor *zp = saturate(loom_rsub_s(0, loom_div(lo, scale)), LOOM_U8);
  loom_tensor *y =
      saturate(loom_add(loom_round(loom_div(x, scale)), loom_cast(zp, LOOM_F32)), LOOM_U8);
  onnx_out(n, 0, y);
  onnx_out(n, 1, scale);
  onnx_out(n, 2, zp);
  return LOOM_OK;
}

/* x - zero point as I32: a per-row (A) or per-column (B) zero point is 1-D. */
static loom_tensor *less_zero_point(loom_tensor *x, loom_tensor *zp, bool rows) {
  loom_tensor *w = loom_cast(x, LOOM_I32);
  if (!zp) return w;
  loom_tensor *z = loom_cast(zp, LOOM_I32);
  if (loom_numel(zp) > 1 && rows) z = loom_unsqueeze(z, -1);
  return loom_sub(w, z);
}

static loom_status op_matmul_integer(onnx_node *n) {
  loom_tensor *a = less_zero_point(onnx_in(n, 0), onnx_in(n, 2), true);
  loom_tensor *b = less_zero_point(onnx_in(n, 1), onnx_in(n, 3), false);
  onnx_out(n, 0, loom_matmul(a, b));
  return LOOM_OK;
}

/* (a - azp) (b - bzp) a_scale b_scale / y_scale + yzp, saturated. */
static loom_status op_qlinear_matmul(onnx_node *n) {
  loom_tensor *a = less_zero_point(onnx_in(n, 0), onnx_in(n, 2), true);
  loom_tensor *b = less_zero_point(onnx_in(n, 3), onnx_in(n, 5), false);
  loom_tensor *ab =
      loom_cast(loom_matmul(loom_cast(a, LOOM_F64), loom_cast(b, LOOM_F64)), LOOM_F64);
  loom_tensor *as = loom_cast(onnx_in(n, 1), LOOM_F64), *bs = loom_cast(onnx_in(n, 4), LOOM_F64);
  loom_tensor *ys = loom_cast(onnx_in(n, 6), LOOM_F64);
  if (loom_numel(as) > 1) as = loom_unsqueeze(as, -1);
  loom_tensor *v = loom_div(loom_mul(loom_mul(ab, as), bs), ys);
  loom_tensor *yzp = onnx_in(n, 7);
  v = loom_add(loom_round(v), loom_cast(yzp, LOOM_F64));
  onnx_out(n, 0, saturate(v, loom_dtype_of(yzp)));
  return LOOM_OK;
}

/* A convolution of (x - xzp) and (w - wzp) in float, exact below 2^24. */
static loom_status integer_conv(onnx_node *n, int x_at, int xzp_at, int w_at, int wzp_at,
                                loom_tensor *bias, loom_tensor **out) {
  loom_tensor *x = loom_cast(onnx_in(n, x_at), LOOM_F32);
  if (onnx_has_in(n, xzp_at)) x = loom_sub(x, loom_cast(onnx_in(n, xzp_at), LOOM_F32));
  loom_tensor *w = loom_cast(onnx_in(n, w_at), LOOM_F32);
  if (onnx_has_in(n, wzp_at)) {
    loom_tensor *z = loom_cast(onnx_in(n, wzp_at), LOOM_F32);
    if (loom_numel(z) > 1) {
      loom_shape ws = loom_shape_of(w), zs = {.ndim = ws.ndim};
      for (int d = 0; d < ws.ndim; d++) zs.dim[d] = d == 0 ? ws.dim[0] : 1;
      z = loom_reshape(z, zs);
    }
    w = loom_sub(w, z);
  }
  return onnx_conv(n, x, w, bias, out);
}

static loom_status op_conv_integer(onnx_node *n) {
  loom_tensor *y;
  loom_status st = integer_conv(n, 0, 2, 1, 3, NULL, &y);
  if (!st) onnx_out(n, 0, loom_cast(loom_round(y), LOOM_I32));
  return st;
}

static loom_status op_qlinear_conv(onnx_node *n) {
  loom_tensor *bias = onnx_has_in(n, 8) ? loom_cast(onnx_in(n, 8), LOOM_F32) : NULL;
  loom_tensor *y;
  loom_status st = integer_conv(n, 0, 2, 3, 5, bias, &y);
  if (st) return st;
  int rank = onnx_rank(y);
  loom_tensor *ws = loom_cast(onnx_in(n, 4), LOOM_F64);
  if (loom_numel(ws) > 1) {
    loom_shape cs = {.ndim = rank};
    for (int d = 0; d < rank; d++) cs.dim[d] = d == 1 ? loom_numel(ws) : 1;
    ws = loom_reshape(ws, cs);
  }
  loom_tensor *scale = loom_div(loom_mul(loom_cast(onnx_in(n, 1), LOOM_F64), ws),
                                loom_cast(onnx_in(n, 6), LOOM_F64));
  loom_tensor *yzp = onnx_in(n, 7);
  loom_tensor *v =
      loom_add(loom_round(loom_mul(loom_cast(y, LOOM_F64), scale)), loom_cast(yzp, LOOM_F64));
  onnx_out(n, 0, saturate(v, loom_dtype_of(yzp)));
  return LOOM_OK;
}

const onnx_op onnx_ops_quant[] = {
    ONNX_OP(QuantizeLinear, op_quantize_linear),
    ONNX_OP(DequantizeLinear, op_dequantize_linear),
    ONNX_OP(DynamicQuantizeLinear, op_dynamic_quantize_linear),
    ONNX_OP(MatMulInteger, op_matmul_integer),
    ONNX_OP(QLinearMatMul, op_qlinear_matmul),
    ONNX_OP(ConvInteger, op_conv_integer),
    ONNX_OP(QLinearConv, op_qlinear_conv),
};
const int onnx_ops_quant_count = sizeof onnx_ops_quant / sizeof onnx_ops_quant[0];
