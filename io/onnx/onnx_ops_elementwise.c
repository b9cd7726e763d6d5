/* Elementwise ops: math, activations, comparisons, logic, casts. ONNX's
 * binary ops broadcast as NumPy, as loom's do; their operands share a dtype
 * (Pow's exponent and the bit ops aside), so loom's promotion never applies. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

/* ------------------------------------------------------------ unary */

#define UNARY(name, fn)                                                                            \
  static loom_status op_##name(onnx_node *n) {                                                     \
    onnx_out(n, 0, fn(onnx_in(n, 0)));                                                             \
    return LOOM_OK;                                                                                \
  }
UNARY(abs, loom_abs)
UNARY(neg, loom_neg)
UNARY(exp, loom_exp)
UNARY(log, loom_log)
UNARY(sqrt, loom_sqrt)
UNARY(reciprocal, loom_reciprocal)
UNARY(sin, loom_sin)
UNARY(cos, loom_cos)
UNARY(tanh, loom_tanh)
UNARY(sigmoid, loom_sigmoid)
UNARY(relu, loom_relu)
UNARY(erf, loom_erf)
UNARY(floor, loom_floor)
UNARY(ceil, loom_ceil)
UNARY(round, loom_round)
UNARY(sign, loom_sign)
UNARY(not, loom_logical_not)

static loom_status op_identity(onnx_node *n) {
  onnx_out(n, 0, loom_retain(onnx_in(n, 0)));
  return LOOM_OK;
}

static loom_status op_tan(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_div(loom_sin(x), loom_cos(x)));
  return LOOM_OK;
}

/* (e^x - e^-x) / 2 and (e^x + e^-x) / 2 */
static loom_status hyperbolic(onnx_node *n, bool cosh) {
  loom_tensor *x = onnx_in(n, 0);
  loom_tensor *a = loom_exp(x), *b = loom_exp(loom_neg(x));
  onnx_out(n, 0, loom_mul_s(cosh ? loom_add(a, b) : loom_sub(a, b), 0.5));
  return LOOM_OK;
}
static loom_status op_sinh(onnx_node *n) { return hyperbolic(n, false); }
static loom_status op_cosh(onnx_node *n) { return hyperbolic(n, true); }

/* asinh x = sign(x) log(|x| + sqrt(x^2 + 1)), which keeps its precision for
 * large negative x; acosh x = log(x + sqrt(x^2 - 1)); atanh x = log((1+x)/(1-x))/2. */
static loom_status op_asinh(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *ax = loom_abs(x);
  loom_tensor *r = loom_log(loom_add(ax, loom_sqrt(loom_add_s(loom_square(ax), 1))));
  onnx_out(n, 0, loom_mul(loom_sign(x), r));
  return LOOM_OK;
}
static loom_status op_acosh(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_log(loom_add(x, loom_sqrt(loom_sub_s(loom_square(x), 1)))));
  return LOOM_OK;
}
static loom_status op_atanh(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_mul_s(loom_log(loom_div(loom_add_s(x, 1), loom_rsub_s(1, x))), 0.5));
  return LOOM_OK;
}

/* log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|) */
static loom_tensor *softplus(loom_tensor *x) {
  return loom_add(loom_relu(x), loom_log1p(loom_exp(loom_neg(loom_abs(x)))));
}
static loom_status op_softplus(onnx_node *n) {
  onnx_out(n, 0, softplus(onnx_in(n, 0)));
  return LOOM_OK;
}
static loom_status op_softsign(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_div(x, loom_add_s(loom_abs(x), 1)));
  return LOOM_OK;
}
static loom_status op_mish(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_mul(x, loom_tanh(softplus(x))));
  return LOOM_OK;
}

static loom_status op_leaky_relu(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  double alpha = onnx_attr_float(n, "alpha", 0.01);
  onnx_out(n, 0, loom_where(loom_lt_s(x, 0), loom_mul_s(x, alpha), x));
  return LOOM_OK;
}
/* alpha (e^x - 1) below zero, x above */
static loom_tensor *elu(loom_tensor *x, double alpha) {
  return loom_where(loom_lt_s(x, 0), loom_mul_s(loom_expm1(x), alpha), x);
}
static loom_status op_elu(onnx_node *n) {
  onnx_out(n, 0, elu(onnx_in(n, 0), onnx_attr_float(n, "alpha", 1.0)));
  return LOOM_OK;
}
static loom_status op_selu(onnx_node *n) {
  double alpha = onnx_attr_float(n, "alpha", 1.67326319217681884765625);
  double gamma = onnx_attr_float(n, "gamma", 1.05070102214813232421875);
  onnx_out(n, 0, loom_mul_s(elu(onnx_in(n, 0), alpha), gamma));
  return LOOM_OK;
}
/* max(0, x) + min(0, alpha (e^(x/alpha) - 1)) */
static loom_status op_celu(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  double alpha = onnx_attr_float(n, "alpha", 1.0);
  loom_tensor *neg = loom_mul_s(loom_expm1(loom_div_s(x, alpha)), alpha);
  onnx_out(n, 0, loom_add(loom_relu(x), loom_minimum_s(neg, 0)));
  return LOOM_OK;
}
static loom_tensor *hard_sigmoid(loom_tensor *x, double alpha, double beta) {
  return loom_clamp(loom_add_s(loom_mul_s(x, alpha), beta), 0, 1);
}
static loom_status op_hard_sigmoid(onnx_node *n) {
  onnx_out(n, 0,
           hard_sigmoid(onnx_in(n, 0), onnx_attr_float(n, "alpha", 0.2),
                        onnx_attr_float(n, "beta", 0.5)));
  return LOOM_OK;
}
static loom_status op_hard_swish(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_mul(x, hard_sigmoid(x, 1.0 / 6, 0.5)));
  return LOOM_OK;
}
static loom_status op_thresholded_relu(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_where_s(loom_gt_s(x, onnx_attr_float(n, "alpha", 1.0)), x, 0));
  return LOOM_OK;
}
static loom_status op_shrink(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  double lambd = onnx_attr_float(n, "lambd", 0.5), bias = onnx_attr_float(n, "bias", 0);
  loom_tensor *below = loom_add_s(x, bias), *above = loom_sub_s(x, bias);
  loom_tensor *r =
      loom_where(loom_lt_s(x, -lambd), below, loom_where_s(loom_gt_s(x, lambd), above, 0));
  onnx_out(n, 0, loom_cast(r, loom_dtype_of(x)));
  return LOOM_OK;
}
static loom_status op_gelu(onnx_node *n) {
  char buf[16];
  const char *approx = onnx_attr_string(n, "approximate", "none", buf, sizeof buf);
  if (strcmp(approx, "none") && strcmp(approx, "tanh"))
    return onnx_refuse(n, LOOM_ERR_VALUE, "approximate '%s' is neither 'none' nor 'tanh'", approx);
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, approx[0] == 't' ? loom_gelu_tanh(x) : loom_gelu(x));
  return LOOM_OK;
}
static loom_status op_swish(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_mul(x, loom_sigmoid(loom_mul_s(x, onnx_attr_float(n, "alpha", 1.0)))));
  return LOOM_OK;
}

static loom_status op_prelu(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *slope = onnx_in(n, 1);
  onnx_out(n, 0, loom_where(loom_lt_s(x, 0), loom_mul(x, slope), x));
  return LOOM_OK;
}

static loom_status op_is_nan(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  onnx_out(n, 0, loom_ne(x, x));
  return LOOM_OK;
}
static loom_status op_is_inf(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  bool neg = onnx_attr_int(n, "detect_negative", 1), pos = onnx_attr_int(n, "detect_positive", 1);
  loom_tensor *p = loom_eq_s(x, INFINITY), *m = loom_eq_s(x, -INFINITY);
  if (pos && neg)
    onnx_out(n, 0, loom_logical_or(p, m));
  else
    onnx_out(n, 0, pos ? p : neg ? m : loom_logical_and(p, m));
  return LOOM_OK;
}

/* ------------------------------------------------------------ binary */

#define BINARY(name, fn)                                                                           \
  static loom_status op_##name(onnx_node *n) {                                                     \
    onnx_out(n, 0, fn(onnx_in(n, 0), onnx_in(n, 1)));                                              \
    return LOOM_OK;                                                                                \
  }
BINARY(add, loom_add)
BINARY(sub, loom_sub)
BINARY(mul, loom_mul)
BINARY(equal, loom_eq)
BINARY(less, loom_lt)
BINARY(greater, loom_gt)
BINARY(less_or_equal, loom_le)
BINARY(greater_or_equal, loom_ge)
BINARY(and, loom_logical_and)
BINARY(or, loom_logical_or)
BINARY(xor, loom_ne)

/* Integers divide truncating toward zero (as C and ONNX's reference). */
static loom_status op_div(onnx_node *n) {
  loom_tensor *a = onnx_in(n, 0), *b = onnx_in(n, 1);
  loom_dtype dt = loom_dtype_of(a);
  if (!onnx_is_integer(dt)) {
    onnx_out(n, 0, loom_div(a, b));
    return LOOM_OK;
  }
  loom_tensor *q = loom_div(loom_cast(a, LOOM_F64), loom_cast(b, LOOM_F64));
  onnx_out(n, 0, loom_cast(q, dt));
  return LOOM_OK;
}

/* fmod 0: the remainder takes the divisor's sign (Python's %); fmod 1: the
 * dividend's (C's fmod). Integers are computed in double, exact below 2^53. */
static loom_status op_mod(onnx_node *n) {
  loom_tensor *a = onnx_in(n, 0), *b = onnx_in(n, 1);
  loom_dtype dt = loom_dtype_of(a);
  bool fmod = onnx_attr_int(n, "fmod", 0);
  if (!fmod && !onnx_is_integer(dt))
    return onnx_refuse(n, LOOM_ERR_VALUE, "fmod 0 on %s: ONNX asks fmod 1 for floats",
                       loom_dtype_name(dt));
  loom_dtype work = onnx_is_integer(dt) ? LOOM_F64 : dt;
  loom_tensor *x = loom_cast(a, work), *y = loom_cast(b, work);
  loom_tensor *q = loom_div(x, y);
  /* trunc(q) = sign(q) floor(|q|) */
  q = fmod ? loom_mul(loom_sign(q), loom_floor(loom_abs(q))) : loom_floor(q);
  loom_tensor *r = loom_sub(x, loom_mul(y, q));
  onnx_out(n, 0, loom_cast(r, dt));
  return LOOM_OK;
}

/* The result keeps the base's dtype whatever the exponent's. */
static loom_status op_pow(onnx_node *n) {
  loom_tensor *a = onnx_in(n, 0), *b = onnx_in(n, 1);
  loom_dtype dt = loom_dtype_of(a);
  loom_dtype work = onnx_is_integer(dt) ? LOOM_F64 : dt;
  onnx_out(n, 0, loom_cast(loom_pow(loom_cast(a, work), loom_cast(b, work)), dt));
  return LOOM_OK;
}

static loom_status
variadic(onnx_node *n, loom_tensor *(*fn)(const loom_tensor *, const loom_tensor *), bool mean) {
  int count = 0;
  loom_tensor *acc = NULL;
  for (int i = 0; i < n->nin; i++) {
    loom_tensor *x = onnx_in(n, i);
    if (!x) continue;
    acc = acc ? fn(acc, x) : loom_retain(x);
    count++;
  }
  if (!acc) return onnx_refuse(n, LOOM_ERR_VALUE, "no inputs");
  onnx_out(n, 0, mean ? loom_div_s(acc, count) : acc);
  return LOOM_OK;
}
static loom_status op_sum(onnx_node *n) { return variadic(n, loom_add, false); }
static loom_status op_mean(onnx_node *n) { return variadic(n, loom_add, true); }
static loom_status op_max(onnx_node *n) { return variadic(n, loom_maximum, false); }
static loom_status op_min(onnx_node *n) { return variadic(n, loom_minimum, false); }

static loom_status op_where(onnx_node *n) {
  onnx_out(n, 0, loom_where(onnx_in(n, 0), onnx_in(n, 1), onnx_in(n, 2)));
  return LOOM_OK;
}

/* Before opset 11 the bounds are attributes; from 11, optional inputs. */
static loom_status op_clip(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  if (n->opset < 11) {
    onnx_out(
        n, 0,
        loom_clamp(x, onnx_attr_float(n, "min", -INFINITY), onnx_attr_float(n, "max", INFINITY)));
    return LOOM_OK;
  }
  loom_tensor *r = loom_retain(x);
  if (onnx_has_in(n, 1)) r = loom_maximum(r, onnx_in(n, 1));
  if (onnx_has_in(n, 2)) r = loom_minimum(r, onnx_in(n, 2));
  onnx_out(n, 0, r);
  return LOOM_OK;
}

/* To a narrow type (float8, float4, int4, int2 and unsigned forms), values
 * are rounded into its set and held in a wider dtype (onnx_narrow.c); the
 * saturate attribute (opset 19) applies to the float8s. */
static loom_status cast_to(onnx_node *n, int32_t to) {
  const char *type_name;
  int dt = onnx_dtype_held(to, &type_name);
  if (dt < 0)
    return onnx_refuse(n, LOOM_ERR_DTYPE, "cast to %s (%lld), which loom does not hold", type_name,
                       (long long)to);
  loom_tensor *x = onnx_in(n, 0);
  if (onnx_dtype_is_narrow(to))
    onnx_out_narrow(n, 0, onnx_narrow_cast(x, to, onnx_attr_int(n, "saturate", 1) != 0), to);
  else
    onnx_out_narrow(n, 0, loom_cast(x, (loom_dtype)dt), 0);
  return LOOM_OK;
}
/* round_mode concerns float8e8m0 only, which loom does not hold. */
static loom_status op_cast(onnx_node *n) { return cast_to(n, (int32_t)onnx_attr_int(n, "to", -1)); }
/* Opset 26: the bits of each element as another dtype of the same size. The
 * narrow types' bits are not what loom holds (a wider dtype), so a bitcast
 * from or to one is refused. */
static loom_status op_bitcast(onnx_node *n) {
  const char *type_name;
  int64_t to = onnx_attr_int(n, "to", -1);
  int dt = onnx_dtype_to_loom((int32_t)to, &type_name);
  if (dt < 0)
    return onnx_refuse(n, LOOM_ERR_DTYPE, "bitcast to %s (%lld), which loom does not hold",
                       type_name, (long long)to);
  if (onnx_in_narrow(n, 0)) {
    onnx_dtype_held(onnx_in_narrow(n, 0), &type_name);
    return onnx_refuse(n, LOOM_ERR_DTYPE,
                       "bitcast of a %s value, which loom holds in a wider dtype", type_name);
  }
  onnx_out_narrow(n, 0, loom_bitcast(onnx_in(n, 0), (loom_dtype)dt), 0);
  return LOOM_OK;
}
/* The like input's ONNX type: its narrow type, or the one of its dtype. */
static loom_status op_cast_like(onnx_node *n) {
  if (!onnx_has_in(n, 1))
    return onnx_refuse(n, LOOM_ERR_VALUE, "its target_type input (input 1) is missing");
  int32_t like = onnx_in_narrow(n, 1);
  if (like) return cast_to(n, like);
  onnx_out_narrow(n, 0, loom_cast(onnx_in(n, 0), loom_dtype_of(n->in[1]->t)), 0);
  return LOOM_OK;
}

const onnx_op onnx_ops_elementwise[] = {
    ONNX_OP(Abs, op_abs),
    ONNX_OP(Neg, op_neg),
    ONNX_OP(Exp, op_exp),
    ONNX_OP(Log, op_log),
    ONNX_OP(Sqrt, op_sqrt),
    ONNX_OP(Reciprocal, op_reciprocal),
    ONNX_OP(Sin, op_sin),
    ONNX_OP(Cos, op_cos),
    ONNX_OP(Tan, op_tan),
    ONNX_OP(Sinh, op_sinh),
    ONNX_OP(Cosh, op_cosh),
    ONNX_OP(Asinh, op_asinh),
    ONNX_OP(Acosh, op_acosh),
    ONNX_OP(Atanh, op_atanh),
    ONNX_OP(Tanh, op_tanh),
    ONNX_OP(Sigmoid, op_sigmoid),
    ONNX_OP(Relu, op_relu),
    ONNX_OP(Erf, op_erf),
    ONNX_OP(Floor, op_floor),
    ONNX_OP(Ceil, op_ceil),
    ONNX_OP(Round, op_round),
    ONNX_OP(Sign, op_sign),
    ONNX_OP(Not, op_not),
    ONNX_OP(Identity, op_identity),
    ONNX_OP(Softplus, op_softplus),
    ONNX_OP(Softsign, op_softsign),
    ONNX_OP(Mish, op_mish),
    ONNX_OP(LeakyRelu, op_leaky_relu),
    ONNX_OP(Elu, op_elu),
    ONNX_OP(Selu, op_selu),
    ONNX_OP(Celu, op_celu),
    ONNX_OP(HardSigmoid, op_hard_sigmoid),
    ONNX_OP(HardSwish, op_hard_swish),
    ONNX_OP(ThresholdedRelu, op_thresholded_relu),
    ONNX_OP(Shrink, op_shrink),
    ONNX_OP(Gelu, op_gelu),
    ONNX_OP(PRelu, op_prelu),
    ONNX_OP(Swish, op_swish),
    ONNX_OP(IsNaN, op_is_nan),
    ONNX_OP(IsInf, op_is_inf),
    ONNX_OP(Add, op_add),
    ONNX_OP(Sub, op_sub),
    ONNX_OP(Mul, op_mul),
    ONNX_OP(Div, op_div),
    ONNX_OP(Mod, op_mod),
    ONNX_OP(Pow, op_pow),
    ONNX_OP(Equal, op_equal),
    ONNX_OP(Less, op_less),
    ONNX_OP(Greater, op_greater),
    ONNX_OP(LessOrEqual, op_less_or_equal),
    ONNX_OP(GreaterOrEqual, op_greater_or_equal),
    ONNX_OP(And, op_and),
    ONNX_OP(Or, op_or),
    ONNX_OP(Xor, op_xor),
    ONNX_OP(Sum, op_sum),
    ONNX_OP(Mean, op_mean),
    ONNX_OP(Max, op_max),
    ONNX_OP(Min, op_min),
    ONNX_OP(Where, op_where),
    ONNX_OP(Clip, op_clip),
    ONNX_OP(Cast, op_cast),
    ONNX_OP(CastLike, op_cast_like),
    ONNX_OP(BitCast, op_bitcast),
};
const int onnx_ops_elementwise_count = sizeof onnx_ops_elementwise / sizeof onnx_ops_elementwise[0];
