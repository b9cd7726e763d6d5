/* ONNX's narrow dtypes: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), float4e2m1,
 * int4, uint4, int2 and uint2. loom holds each in the narrowest dtype that
 * holds every one of its values exactly (F16, I8, U8), and keeps the values in
 * the narrow type's set: a Cast to it rounds as ONNX's reference does, and a
 * model's input of such a type is cast to it on entry. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"
#include "runtime/runtime.h"

/* A float format: the sign, an exponent field and mant bits of mantissa. */
typedef struct narrow_format {
  int32_t onnx;
  loom_dtype held;
  int int_bits; /* an integer type's width; 0 for a float format */
  bool is_signed;
  int exp_bits, mant;
  int emin, emax; /* exponents of the least and greatest normal binades */
  double max;     /* the greatest finite value */
  bool has_inf, has_nan;
  bool unsigned_zero; /* the fnuz formats: no -0, NaN is the bits of -0 */
} narrow_format;

static const narrow_format formats[] = {
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E4M3FN, LOOM_F16, 0, true, 4, 3, -6, 8, 448, false, true,
     false},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E4M3FNUZ, LOOM_F16, 0, true, 4, 3, -7, 7, 240, false,
     true, true},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E5M2, LOOM_F16, 0, true, 5, 2, -14, 15, 57344, true, true,
     false},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E5M2FNUZ, LOOM_F16, 0, true, 5, 2, -15, 15, 57344, false,
     true, true},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT4E2M1, LOOM_F16, 0, true, 2, 1, 0, 2, 6, false, false,
     false},
    {ONNX__TENSOR_PROTO__DATA_TYPE__UINT4, LOOM_U8, 4, false, 0, 0, 0, 0, 0, false, false, false},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT4, LOOM_I8, 4, true, 0, 0, 0, 0, 0, false, false, false},
    {ONNX_UINT2, LOOM_U8, 2, false, 0, 0, 0, 0, 0, false, false, false},
    {ONNX_INT2, LOOM_I8, 2, true, 0, 0, 0, 0, 0, false, false, false},
};

static const narrow_format *format_of(int32_t onnx_type) {
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
    if (formats[i].onnx == onnx_type) return &formats[i];
  return NULL;
}

bool onnx_dtype_is_narrow(int32_t onnx_type) { return format_of(onnx_type) != NULL; }

int onnx_dtype_held(int32_t onnx_type, const char **name) {
  const narrow_format *f = format_of(onnx_type);
  int dt = onnx_dtype_to_loom(onnx_type, name); /* the name from onnx_read.c's table */
  return f ? (int)f->held : dt;
}

int onnx_narrow_bits(int32_t onnx_type) {
  const narrow_format *f = format_of(onnx_type);
  return !f ? 0 : f->int_bits ? f->int_bits : 1 + f->exp_bits + f->mant;
}

/* ------------------------------------------------------------ stored values */

/* The value of one element's bits (the low bits of code). */
static double float_value(const narrow_format *f, unsigned code) {
  int bits = 1 + f->exp_bits + f->mant;
  unsigned sign = code >> (bits - 1) & 1, exp = code >> f->mant & ((1u << f->exp_bits) - 1);
  unsigned mant = code & ((1u << f->mant) - 1), exp_all = (1u << f->exp_bits) - 1;
  if (f->unsigned_zero && code == 1u << (bits - 1)) return NAN;
  if (f->has_inf && exp == exp_all) return mant ? NAN : sign ? -INFINITY : INFINITY;
  if (f->has_nan && !f->has_inf && !f->unsigned_zero && exp == exp_all &&
      mant == (1u << f->mant) - 1)
    return NAN;
  int bias = 1 - f->emin;
  double v =
      exp ? ldexp(1.0 + ldexp(mant, -f->mant), (int)exp - bias) : ldexp(mant, f->emin - f->mant);
  return sign ? -v : v;
}

loom_status onnx_narrow_unpack(int32_t onnx_type, const uint8_t *packed, size_t nbytes,
                               int64_t count, void *out) {
  const narrow_format *f = format_of(onnx_type);
  int bits = onnx_narrow_bits(onnx_type);
  if (!f || (size_t)((count * bits + 7) / 8) != nbytes) return LOOM_ERR_CORRUPT;
  for (int64_t i = 0; i < count; i++) {
    int64_t bit = i * bits;
    unsigned code = packed[bit / 8] >> (bit % 8) & ((1u << bits) - 1);
    if (f->int_bits) {
      int v = f->is_signed && code >> (bits - 1) ? (int)code - (1 << bits) : (int)code;
      if (f->held == LOOM_I8)
        ((int8_t *)out)[i] = (int8_t)v;
      else
        ((uint8_t *)out)[i] = (uint8_t)v;
    } else {
      ((uint16_t *)out)[i] = loom_float_to_f16((float)float_value(f, code));
    }
  }
  return LOOM_OK;
}

/* ------------------------------------------------------------ casts */

/* x rounded to the nearest value of the float format, ties to even; out of
 * range saturates to the greatest finite value, or (saturate false) becomes
 * infinity where the format has it and NaN where not. float4e2m1 has neither
 * and always saturates; a NaN becomes its -0, as ONNX's reference gives. */
static loom_tensor *round_to_float(loom_tensor *x, const narrow_format *f, bool saturate) {
  loom_dtype work =
      loom_dtype_of(x) == LOOM_F32 || loom_dtype_of(x) == LOOM_F16 || loom_dtype_of(x) == LOOM_BF16
          ? LOOM_F32
          : LOOM_F64;
  loom_tensor *v = loom_cast(x, work), *a = loom_abs(v);
  /* the spacing of the format's values at |v|: 2^(e - mant) in binade e */
  loom_tensor *quantum = loom_full_like(v, ldexp(1, f->emin - f->mant));
  for (int e = f->emin + 1; e <= f->emax; e++)
    quantum = loom_where_s(loom_lt_s(a, ldexp(1, e)), quantum, ldexp(1, e - f->mant));
  loom_tensor *r = loom_mul(loom_round(loom_div(v, quantum)), quantum);
  loom_tensor *over = loom_gt_s(loom_abs(r), f->max);
  loom_tensor *signed_max = loom_mul_s(loom_sign(v), f->max);
  if (saturate || (!f->has_inf && !f->has_nan))
    r = loom_where(over, signed_max, r);
  else if (f->has_inf)
    r = loom_where(over, loom_mul_s(loom_sign(v), INFINITY), r);
  else
    r = loom_masked_fill(r, over, NAN);
  if (!f->has_nan) r = loom_masked_fill(r, loom_ne(v, v), -0.0);
  if (f->unsigned_zero) r = loom_masked_fill(r, loom_eq_s(r, 0), 0.0);
  return loom_cast(r, f->held);
}

/* x truncated toward zero and wrapped modulo 2^bits, as ONNX's test data
 * gives (8.0 as int4 is -8); NaN and the infinities give 0. */
static loom_tensor *wrap_to_int(loom_tensor *x, const narrow_format *f) {
  loom_dtype dt = loom_dtype_of(x);
  double m = ldexp(1, f->int_bits);
  loom_tensor *v;
  if (dt == LOOM_I64 || dt == LOOM_U64) {
    /* the low byte keeps the residue; a double would not for |x| > 2^53 */
    v = loom_cast(loom_cast(x, LOOM_U8), LOOM_F64);
  } else {
    v = loom_cast(x, LOOM_F64);
    v = loom_where(loom_lt_s(v, 0), loom_ceil(v), loom_floor(v));
    v = loom_masked_fill(v, loom_logical_or(loom_ne(v, v), loom_eq_s(loom_abs(v), INFINITY)), 0);
  }
  loom_tensor *w = loom_sub(v, loom_mul_s(loom_floor(loom_div_s(v, m)), m));
  if (f->is_signed) w = loom_where(loom_ge_s(w, m / 2), loom_sub_s(w, m), w);
  return loom_cast(w, f->held);
}

/* Both record their steps in a composite, so that only the result is left
 * to the caller: they are called outside an op's own (a model's inputs). */
loom_tensor *onnx_narrow_cast(loom_tensor *x, int32_t onnx_type, bool saturate) {
  const narrow_format *f = format_of(onnx_type);
  if (!f) return loom_retain(x);
  int token = lm_composite_begin();
  return lm_composite_end(token, f->int_bits ? wrap_to_int(x, f) : round_to_float(x, f, saturate));
}

loom_tensor *onnx_narrow_saturate(loom_tensor *v, int32_t onnx_type) {
  const narrow_format *f = format_of(onnx_type);
  if (!f->int_bits) return onnx_narrow_cast(v, onnx_type, true);
  double lo = f->is_signed ? -ldexp(1, f->int_bits - 1) : 0;
  double hi = f->is_signed ? ldexp(1, f->int_bits - 1) - 1 : ldexp(1, f->int_bits) - 1;
  int token = lm_composite_begin();
  return lm_composite_end(token, loom_cast(loom_clamp(loom_round(v), lo, hi), f->held));
}
