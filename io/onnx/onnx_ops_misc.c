/* Asin, Acos, Atan (loom has no inverse trigonometry: a composite), the
 * window functions, BitShift and the bitwise ops (composed exactly of
 * wrapping integer arithmetic on the bits), LRN, the random ops, and the ops
 * refused because their output's size depends on the input's values. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

/* The dtype inverse trigonometry computes in: F64 stays, the rest F32. */
static loom_dtype work_dtype(loom_dtype dt) { return dt == LOOM_F64 ? LOOM_F64 : LOOM_F32; }

/* atan(x): |x| > 1 through atan(x) = sign(x) pi/2 - atan(1/x); then two
 * halvings atan(t) = 2 atan(t / (1 + sqrt(1 + t^2))) bring |t| under
 * tan(pi/16) ~ 0.199, where atan's series to t^25 is within 2^-60 of it:
 * a few ulps in F32 and in F64. */
static loom_tensor *atan_of(loom_tensor *x) {
  loom_tensor *big = loom_gt_s(loom_abs(x), 1);
  loom_tensor *t = loom_where(big, loom_reciprocal(x), x);
  for (int h = 0; h < 2; h++)
    t = loom_div(t, loom_add_s(loom_sqrt(loom_add_s(loom_square(t), 1)), 1));
  loom_tensor *t2 = loom_square(t);
  /* Horner over the series' terms (-1)^k t^(2k+1) / (2k+1), k = 0 .. 12,
   * scaled by 3: a constant 1/17 or 1/19 would read as the reciprocal of a
   * traced symbolic size to loom's symbolic inference (docs/onnx.md) */
  loom_tensor *p = loom_full_like(t, 3.0 / 25);
  for (int k = 11; k >= 0; k--) p = loom_add_s(loom_mul(p, t2), (k % 2 ? -3.0 : 3.0) / (2 * k + 1));
  loom_tensor *a = loom_mul_s(loom_mul(p, t), 4.0 / 3);
  return loom_where(big, loom_sub(loom_mul_s(loom_sign(x), M_PI / 2), a), a);
}

static loom_status inverse_trig(onnx_node *n, int which) {
  loom_tensor *x0 = onnx_in(n, 0);
  loom_dtype dt = loom_dtype_of(x0);
  if (!onnx_is_float(dt))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "a non-float input; ONNX defines it on floats");
  loom_tensor *x = loom_cast(x0, work_dtype(dt)), *r;
  /* (1 - x)(1 + x) rather than 1 - x^2: accurate near |x| = 1 */
  loom_tensor *one_minus = loom_rsub_s(1, x), *one_plus = loom_add_s(x, 1);
  if (which == 0)
    r = atan_of(x);
  else if (which == 1)
    r = atan_of(loom_div(x, loom_sqrt(loom_mul(one_minus, one_plus))));
  else
    r = loom_mul_s(atan_of(loom_sqrt(loom_div(one_minus, one_plus))), 2);
  onnx_out(n, 0, loom_cast(r, dt));
  return LOOM_OK;
}
static loom_status op_atan(onnx_node *n) { return inverse_trig(n, 0); }
static loom_status op_asin(onnx_node *n) { return inverse_trig(n, 1); }
static loom_status op_acos(onnx_node *n) { return inverse_trig(n, 2); }

/* a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic) or
 * size - 1, computed in F64 and cast to output_datatype. */
static loom_status window(onnx_node *n, double a0, double a1, double a2) {
  int64_t size;
  int count;
  loom_status st = onnx_ints(n, 0, &size, 1, &count);
  if (st) return st;
  if (count != 1 || size < 0) return onnx_refuse(n, LOOM_ERR_VALUE, "size must be one value >= 0");
  const char *name;
  int dt = onnx_dtype_to_loom((int32_t)onnx_attr_int(n, "output_datatype", 1), &name);
  if (dt < 0) return onnx_refuse(n, LOOM_ERR_DTYPE, "output_datatype %s", name);
  double N = (double)(onnx_attr_int(n, "periodic", 1) ? size : size - 1);
  loom_tensor *i = loom_arange(0, (double)size, 1, LOOM_F64, onnx_device(n));
  loom_tensor *w = loom_rsub_s(a0, loom_mul_s(loom_cos(loom_mul_s(i, 2 * M_PI / N)), a1));
  if (a2 != 0) w = loom_add(w, loom_mul_s(loom_cos(loom_mul_s(i, 4 * M_PI / N)), a2));
  onnx_out(n, 0, loom_cast(w, (loom_dtype)dt));
  return LOOM_OK;
}
static loom_status op_hann_window(onnx_node *n) { return window(n, 0.5, 0.5, 0); }
static loom_status op_hamming_window(onnx_node *n) {
  return window(n, 25.0 / 46.0, 21.0 / 46.0, 0);
}
static loom_status op_blackman_window(onnx_node *n) { return window(n, 0.42, 0.5, 0.08); }

/* ------------------------------------------------------------ bits */

/* loom has no bitwise ops: they are composed exactly of integer arithmetic,
 * which wraps modulo 2^bits in every integer dtype. A value's bits come from
 * the top: the sign bit of its signed reading (a cast to the signed dtype of
 * its width keeps the bits), then the value doubled (wrapping) brings the
 * next bit to the top. The only constants are 0, 1 and 2, so a symbolic
 * model's inference never takes one for a traced size (docs/onnx.md). */

static loom_dtype signed_of(loom_dtype dt) {
  switch (dt) {
  case LOOM_U8: return LOOM_I8;
  case LOOM_U16: return LOOM_I16;
  case LOOM_U32: return LOOM_I32;
  case LOOM_U64: return LOOM_I64;
  default: return dt;
  }
}

static bool is_unsigned(loom_dtype dt) { return signed_of(dt) != dt; }

/* x's bits as bools, bit[0] the lowest; x of an integer dtype of bits bits. */
static void split_bits(loom_tensor *x, int bits, loom_tensor **bit) {
  loom_tensor *s = loom_cast(x, signed_of(loom_dtype_of(x)));
  for (int k = bits - 1; k >= 0; k--) {
    bit[k] = loom_lt_s(s, 0);
    if (k) s = loom_add(s, s);
  }
}

/* The integer of dtype dt whose bits are bit[0 .. bits), by Horner's rule
 * from the top (wrapping puts the top bit at the sign in a signed dtype). */
static loom_tensor *join_bits(loom_tensor *const *bit, int bits, loom_dtype dt) {
  loom_tensor *r = loom_cast(bit[bits - 1], dt);
  for (int k = bits - 2; k >= 0; k--) r = loom_add(loom_add(r, r), loom_cast(bit[k], dt));
  return r;
}

/* The integer inputs' dtype and width (refused unless both share one). */
static loom_status integer_inputs(onnx_node *n, int count, loom_dtype *dt, int *bits) {
  *dt = loom_dtype_of(onnx_in(n, 0));
  if (!onnx_is_integer(*dt))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "an input of dtype %s; ONNX defines it on integers",
                       loom_dtype_name(*dt));
  if (count > 1 && loom_dtype_of(onnx_in(n, 1)) != *dt)
    return onnx_refuse(n, LOOM_ERR_DTYPE, "inputs of two dtypes, %s and %s", loom_dtype_name(*dt),
                       loom_dtype_name(loom_dtype_of(onnx_in(n, 1))));
  *bits = (int)loom_dtype_size(*dt) * 8;
  return LOOM_OK;
}

/* ONNX shifts unsigned integers; a signed dtype shifts as numpy (its
 * reference) does: arithmetically, a shift below 0 or of the width or more
 * giving 0 (left) or the sign (right). x << y is x 2^y, 2^y an exact wrapping
 * power (0 from the width on, and for a negative y). x >> y keeps the bits
 * of x from the top down to bit y: the mask -(2^y) has exactly those bits
 * set (none when y is out of range). */
static loom_status op_bit_shift(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *y = onnx_in(n, 1);
  char buf[8];
  const char *dir = onnx_attr_string(n, "direction", "", buf, sizeof buf);
  bool left = strcmp(dir, "LEFT") == 0;
  if (!left && strcmp(dir, "RIGHT"))
    return onnx_refuse(n, LOOM_ERR_VALUE, "direction '%s'; LEFT or RIGHT expected", dir);
  loom_dtype dt;
  int bits;
  loom_status st = integer_inputs(n, 2, &dt, &bits);
  if (st) return st;
  if (left) {
    onnx_out(n, 0, loom_mul(x, loom_pow(loom_full_like(y, 2), y)));
    return LOOM_OK;
  }
  loom_dtype sd = signed_of(dt);
  loom_tensor *shift = loom_cast(y, sd); /* an unsigned shift from 2^(bits-1) up: out of range */
  loom_tensor *mask = loom_neg(loom_pow(loom_full_like(shift, 2), shift));
  loom_tensor *xbit[64], *keep[64];
  split_bits(x, bits, xbit);
  split_bits(mask, bits, keep);
  loom_tensor *r =
      is_unsigned(dt) ? loom_zeros_like(shift) : loom_neg(loom_cast(xbit[bits - 1], sd));
  for (int k = bits - 1; k >= 0; k--)
    r = loom_where(keep[k], loom_add(loom_add(r, r), loom_cast(xbit[k], sd)), r);
  onnx_out(n, 0, loom_cast(r, dt));
  return LOOM_OK;
}

typedef enum { BIT_AND, BIT_OR, BIT_XOR } bit_op;

/* a & b bit by bit; then a | b = a + b - (a & b) and a ^ b = a + b - 2 (a &
 * b), exact in wrapping arithmetic. */
static loom_status bitwise(onnx_node *n, bit_op op) {
  loom_tensor *a = onnx_in(n, 0), *b = onnx_in(n, 1);
  loom_dtype dt;
  int bits;
  loom_status st = integer_inputs(n, 2, &dt, &bits);
  if (st) return st;
  loom_tensor *abit[64], *bbit[64], *both[64];
  split_bits(a, bits, abit);
  split_bits(b, bits, bbit);
  for (int k = 0; k < bits; k++) both[k] = loom_logical_and(abit[k], bbit[k]);
  loom_tensor *and_bits = join_bits(both, bits, dt), *r = and_bits;
  if (op != BIT_AND) r = loom_sub(loom_add(a, b), and_bits);
  if (op == BIT_XOR) r = loom_sub(r, and_bits);
  onnx_out(n, 0, r);
  return LOOM_OK;
}
static loom_status op_bitwise_and(onnx_node *n) { return bitwise(n, BIT_AND); }
static loom_status op_bitwise_or(onnx_node *n) { return bitwise(n, BIT_OR); }
static loom_status op_bitwise_xor(onnx_node *n) { return bitwise(n, BIT_XOR); }

/* ~x = -x - 1 in two's complement, read in the signed dtype of x's width. */
static loom_status op_bitwise_not(onnx_node *n) {
  loom_dtype dt;
  int bits;
  loom_status st = integer_inputs(n, 1, &dt, &bits);
  if (st) return st;
  loom_tensor *s = loom_cast(onnx_in(n, 0), signed_of(dt));
  onnx_out(n, 0, loom_cast(loom_sub_s(loom_neg(s), 1), dt));
  return LOOM_OK;
}

/* x / (bias + alpha / size * sum of x^2 over the channels [c - floor((size -
 * 1) / 2), c + ceil((size - 1) / 2)])^beta. */
static loom_status op_lrn(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t size = onnx_attr_int(n, "size", 0);
  if (size < 1) return onnx_refuse(n, LOOM_ERR_VALUE, "size %lld", (long long)size);
  int rank = onnx_rank(x);
  if (rank < 3) return onnx_refuse(n, LOOM_ERR_SHAPE, "a rank-%d input; N, C, ... expected", rank);
  double alpha = onnx_attr_float(n, "alpha", 1e-4), beta = onnx_attr_float(n, "beta", 0.75),
         bias = onnx_attr_float(n, "bias", 1);
  int64_t before = (size - 1) / 2, after = size - 1 - before, c = loom_shape_of(x).dim[1];
  int64_t pads[2 * LOOM_MAX_DIMS] = {0};
  pads[2 * (rank - 2)] = before, pads[2 * (rank - 2) + 1] = after;
  loom_tensor *sq = loom_pad(loom_square(x), pads, 2 * (rank - 1), 0), *sum = NULL;
  for (int64_t k = 0; k < size; k++) {
    loom_tensor *s = loom_slice(sq, 1, k, k + c, 1);
    sum = sum ? loom_add(sum, s) : s;
  }
  loom_tensor *den = loom_pow_s(loom_add_s(loom_mul_s(sum, alpha / (double)size), bias), beta);
  onnx_out(n, 0, loom_div(x, den));
  return LOOM_OK;
}

/* ------------------------------------------------------------ random ops */

/* The dtype attribute, else fallback. */
static loom_status random_dtype(onnx_node *n, loom_dtype fallback, loom_dtype *out) {
  *out = fallback;
  if (!onnx_attr(n, "dtype")) return LOOM_OK;
  const char *name;
  int dt = onnx_dtype_to_loom((int32_t)onnx_attr_int(n, "dtype", 1), &name);
  if (dt < 0) return onnx_refuse(n, LOOM_ERR_DTYPE, "dtype %s", name);
  *out = (loom_dtype)dt;
  return LOOM_OK;
}

/* Uniform [0, 1) or standard normal draws: from the seed attribute's key when
 * given (the same values every run), else from loom's global key. */
static loom_tensor *draw(onnx_node *n, loom_shape s, loom_dtype dt, bool normal) {
  loom_dtype fd = onnx_is_float(dt) ? dt : LOOM_F32;
  loom_tensor *r;
  if (onnx_attr(n, "seed")) {
    loom_key key = loom_key_new((uint64_t)(int64_t)onnx_attr_float(n, "seed", 0));
    r = normal ? loom_randn_key(key, s, fd, onnx_device(n))
               : loom_rand_key(key, s, fd, onnx_device(n));
  } else {
    r = normal ? loom_randn(s, fd, onnx_device(n)) : loom_rand(s, fd, onnx_device(n));
  }
  return r;
}

static loom_status random_op(onnx_node *n, bool normal, bool like) {
  loom_shape s = {0};
  loom_dtype dt = LOOM_F32;
  loom_status st;
  if (like) {
    loom_tensor *x = onnx_in(n, 0);
    s = loom_shape_of(x);
    if ((st = random_dtype(n, loom_dtype_of(x), &dt))) return st;
  } else {
    int64_t dims[LOOM_MAX_DIMS];
    int count;
    if ((st = onnx_attr_ints(n, "shape", dims, LOOM_MAX_DIMS, &count))) return st;
    if (count < 0) return onnx_refuse(n, LOOM_ERR_VALUE, "no shape attribute");
    s.ndim = count;
    for (int d = 0; d < count; d++) s.dim[d] = dims[d];
    if ((st = random_dtype(n, LOOM_F32, &dt))) return st;
  }
  loom_tensor *r = draw(n, s, dt, normal);
  if (normal)
    r = loom_add_s(loom_mul_s(r, onnx_attr_float(n, "scale", 1)), onnx_attr_float(n, "mean", 0));
  else {
    double low = onnx_attr_float(n, "low", 0), high = onnx_attr_float(n, "high", 1);
    r = loom_add_s(loom_mul_s(r, high - low), low);
  }
  onnx_out(n, 0, loom_cast(r, dt));
  return LOOM_OK;
}
static loom_status op_random_normal(onnx_node *n) { return random_op(n, true, false); }
static loom_status op_random_uniform(onnx_node *n) { return random_op(n, false, false); }
static loom_status op_random_normal_like(onnx_node *n) { return random_op(n, true, true); }
static loom_status op_random_uniform_like(onnx_node *n) { return random_op(n, false, true); }

/* 1 where a uniform draw falls below the input's probability. */
static loom_status op_bernoulli(onnx_node *n) {
  loom_tensor *p = onnx_in(n, 0);
  loom_dtype dt;
  loom_status st = random_dtype(n, loom_dtype_of(p), &dt);
  if (st) return st;
  loom_tensor *u = draw(n, loom_shape_of(p), loom_dtype_of(p), false);
  onnx_out(n, 0, loom_cast(loom_lt(u, p), dt));
  return LOOM_OK;
}

/* sample_size draws per row of [batch, classes] unnormalized log
 * probabilities, with replacement. */
static loom_status op_multinomial(onnx_node *n) {
  loom_tensor *logits = onnx_in(n, 0);
  loom_dtype dt;
  loom_status st = random_dtype(n, LOOM_I32, &dt);
  if (st) return st;
  if (onnx_rank(logits) != 2)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a rank-%d input; [batch, classes] expected",
                       onnx_rank(logits));
  int64_t samples = onnx_attr_int(n, "sample_size", 1);
  const int last[] = {1};
  loom_tensor *w = loom_exp(loom_sub(logits, loom_max(logits, last, 1, true)));
  loom_key key = onnx_attr(n, "seed")
                     ? loom_key_new((uint64_t)(int64_t)onnx_attr_float(n, "seed", 0))
                     : loom_next_key();
  onnx_out(n, 0, loom_cast(loom_multinomial_key(key, w, samples, true), dt));
  return LOOM_OK;
}

/* ------------------------------------------------------------ refused */

static loom_status refuse_data_sized(onnx_node *n) {
  return onnx_refuse(n, LOOM_ERR_SHAPE,
                     "its output's size depends on the input's values, which loom's compiled "
                     "shapes cannot follow");
}

const onnx_op onnx_ops_misc[] = {
    ONNX_OP(Atan, op_atan),
    ONNX_OP(Asin, op_asin),
    ONNX_OP(Acos, op_acos),
    ONNX_OP(HannWindow, op_hann_window),
    ONNX_OP(HammingWindow, op_hamming_window),
    ONNX_OP(BlackmanWindow, op_blackman_window),
    ONNX_OP(BitShift, op_bit_shift),
    ONNX_OP(BitwiseAnd, op_bitwise_and),
    ONNX_OP(BitwiseOr, op_bitwise_or),
    ONNX_OP(BitwiseXor, op_bitwise_xor),
    ONNX_OP(BitwiseNot, op_bitwise_not),
    ONNX_OP(LRN, op_lrn),
    ONNX_OP_FLAGS(RandomNormal, op_random_normal, ONNX_RANDOM),
    ONNX_OP_FLAGS(RandomUniform, op_random_uniform, ONNX_RANDOM),
    ONNX_OP_FLAGS(RandomNormalLike, op_random_normal_like, ONNX_RANDOM),
    ONNX_OP_FLAGS(RandomUniformLike, op_random_uniform_like, ONNX_RANDOM),
    ONNX_OP_FLAGS(Bernoulli, op_bernoulli, ONNX_RANDOM),
    ONNX_OP_FLAGS(Multinomial, op_multinomial, ONNX_RANDOM),
    ONNX_OP(NonZero, refuse_data_sized),
    ONNX_OP(Unique, refuse_data_sized),
    ONNX_OP(Compress, refuse_data_sized),
    ONNX_OP(NonMaxSuppression, refuse_data_sized),
};
const int onnx_ops_misc_count = sizeof onnx_ops_misc / sizeof onnx_ops_misc[0];
