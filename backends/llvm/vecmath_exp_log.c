/*
 * exp, expm1, log and pow as straight-line IR (see vecmath.h).
 *
 * exp: Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, with ln2 split into a
 * 42-bit head (k * head is exact) and a tail; e^r = 1 + r + r^2 P(r) with a
 * minimax P; the result 2^k e^r is scaled in two exact steps so gradual
 * underflow rounds once (Cephes exp / SLEEF xexp structure).
 * log: x = 2^e m with m in [sqrt2/2, sqrt2) found with integer bit operations
 * (musl's log does the same), then fdlibm's
 *   log(1+f) = f - (hfsq - s (hfsq + R(s^2))),  f = m - 1, s = f / (2 + f),
 * with a minimax R. pow: exp(y log|x|) with log|x| in double-double (SLEEF's
 * logk structure: s = (m-1)/(m+1) in double-double and the series' leading
 * term 2/3 in double-double) and exp taking a double-double argument, so F64
 * pow is within about 1 ulp even when y log|x| is near 709; F32 pow evaluates
 * in double. Coefficients: vecmath_coeffs.h (vecmath_fit.py).
 */
#include <math.h>

#include "backends/llvm/vecmath.h"
#include "backends/llvm/vecmath_coeffs.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* ------------------------------------------------------------------ exp */

/* e^(hi + lo) using the F32 (`single`) or F64 polynomial. hi is clamped to
 * [-746, 710], beyond which the result is 0 or inf anyway; a NaN hi gives NaN. */
static LLVMValueRef exp_core(lm_vm *v, LLVMValueRef hi, LLVMValueRef lo, bool single) {
  LLVMValueRef hc = lm_vm_clamp(v, hi, -746.0, 710.0);
  lo = lm_vm_select(v, lm_vm_eq(v, hc, hi), lo, lm_vm_const(v, 0.0));
  LLVMValueRef k = lm_vm_rint(v, lm_vm_mul(v, hc, lm_vm_const(v, LOG2E)));
  LLVMValueRef nk = lm_vm_neg(v, k);
  LLVMValueRef r = lm_vm_fma(v, nk, lm_vm_const(v, LN2_HI), hc); /* exact */
  r = lm_vm_add(v, r, lm_vm_fma(v, nk, lm_vm_const(v, LN2_LO), lo));
  LLVMValueRef p = single ? lm_vm_poly(v, r, EXP_P_F32, COUNT(EXP_P_F32))
                          : lm_vm_poly(v, r, EXP_P_F64, COUNT(EXP_P_F64));
  LLVMValueRef em1 = lm_vm_fma(v, lm_vm_mul(v, r, r), p, r); /* e^r - 1 */
  return lm_vm_scale(v, lm_vm_add(v, lm_vm_const(v, 1.0), em1), k);
}

LLVMValueRef lm_vm_exp_dd(lm_vm *v, LLVMValueRef hi, LLVMValueRef lo) {
  return exp_core(v, hi, lo, v->single);
}

LLVMValueRef lm_vm_exp(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef r = exp_core(v, x, lm_vm_const(v, 0.0), v->single);
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, r);
}

/* The same construction in float arithmetic (v->ft is float): |k| <= 150, so
 * k LN2_HI_F32 needs 32 bits and fma makes x - k LN2_HI_F32 exact; the
 * polynomial's 2^-28 and the roundings of r + r^2 P and 1 + (...) stay under
 * about 0.6 ulp (test_vecmath measures the maximum). */
/* e^x = 2^k e^r in float; *k is k, the return value e^r - 1. */
static LLVMValueRef expm1_f32_reduced(lm_vm *v, LLVMValueRef x, LLVMValueRef *k_out) {
  LLVMValueRef k = lm_vm_rint(v, lm_vm_mul(v, x, lm_vm_const(v, LOG2E_F32)));
  LLVMValueRef nk = lm_vm_neg(v, k);
  LLVMValueRef r = lm_vm_fma(v, nk, lm_vm_const(v, LN2_HI_F32), x);
  r = lm_vm_fma(v, nk, lm_vm_const(v, LN2_LO_F32), r);
  LLVMValueRef p = lm_vm_poly(v, r, EXP_P_F32_NATIVE, COUNT(EXP_P_F32_NATIVE));
  *k_out = k;
  return lm_vm_fma(v, lm_vm_mul(v, r, r), p, r);
}

/* e^x = 2^k (1 + em1) in float; *k and the return value are k and e^r. */
static LLVMValueRef exp_f32_reduced(lm_vm *v, LLVMValueRef x, LLVMValueRef *k_out) {
  return lm_vm_add(v, lm_vm_const(v, 1.0), expm1_f32_reduced(v, x, k_out));
}

LLVMValueRef lm_vm_exp_f32(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef xc = lm_vm_clamp(v, x, -104.0, 89.0); /* beyond: 0 and inf */
  LLVMValueRef k;
  LLVMValueRef er = exp_f32_reduced(v, xc, &k);
  LLVMValueRef e = lm_vm_scale(v, er, k);
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, e);
}

LLVMValueRef lm_vm_exp_f32_absorbed(lm_vm *v, LLVMValueRef x) {
  /* k in [-125, 128]: 2^(k-1) is a normal float, and so is 2 e^r 2^(k-1)
   * until it overflows, rounding once to inf */
  LLVMValueRef xc = lm_vm_clamp(v, x, -86.5, 89.0);
  LLVMValueRef k;
  LLVMValueRef em1 = expm1_f32_reduced(v, xc, &k);
  LLVMValueRef two = lm_vm_const(v, 2.0);
  lm_vm half = *v;
  half.bias--;
  LLVMValueRef e = lm_vm_mul(v, lm_vm_fma(v, two, em1, two), lm_vm_pow2(&half, k));
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, e);
}

LLVMValueRef lm_vm_exp_f32_normal(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef k;
  LLVMValueRef er = exp_f32_reduced(v, x, &k);
  return lm_vm_mul(v, er, lm_vm_pow2(v, k)); /* 2^k is a normal float */
}

LLVMValueRef lm_vm_expm1_f32(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef k;
  LLVMValueRef em1 = expm1_f32_reduced(v, x, &k);
  LLVMValueRef s = lm_vm_pow2(v, k);
  return lm_vm_fma(v, s, em1, lm_vm_sub(v, s, lm_vm_const(v, 1.0)));
}

LLVMValueRef lm_vm_expm1(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef k = lm_vm_rint(v, lm_vm_mul(v, x, lm_vm_const(v, LOG2E)));
  LLVMValueRef nk = lm_vm_neg(v, k);
  LLVMValueRef r = lm_vm_fma(v, nk, lm_vm_const(v, LN2_HI), x);
  r = lm_vm_fma(v, nk, lm_vm_const(v, LN2_LO), r);
  LLVMValueRef p = v->single ? lm_vm_poly(v, r, EXP_P_F32, COUNT(EXP_P_F32))
                             : lm_vm_poly(v, r, EXP_P_F64, COUNT(EXP_P_F64));
  LLVMValueRef em1 = lm_vm_fma(v, lm_vm_mul(v, r, r), p, r);
  /* 2^k e^r - 1 = 2^k (e^r - 1) + (2^k - 1), one rounding; 2^k - 1 is exact. */
  LLVMValueRef s = lm_vm_pow2(v, k);
  return lm_vm_fma(v, s, em1, lm_vm_sub(v, s, lm_vm_const(v, 1.0)));
}

/* ------------------------------------------------------------------ log */

/* x = 2^e m, m in [sqrt2/2, sqrt2), for x > 0 finite (other x give garbage
 * that the callers select away; the integer operations have no poison). */
typedef struct mant_exp {
  LLVMValueRef m, e; /* both double */
} mant_exp;

static mant_exp split_exponent(lm_vm *v, LLVMValueRef x, bool subnormals) {
  LLVMValueRef adjust = NULL;
  if (subnormals) { /* scale subnormals into the normal range first */
    LLVMValueRef sub = lm_vm_lt(v, x, lm_vm_const(v, 0x1p-1022));
    x = lm_vm_select(v, sub, lm_vm_mul(v, x, lm_vm_const(v, 0x1p54)), x);
    adjust = lm_vm_select(v, sub, lm_vm_const(v, -54.0), lm_vm_const(v, 0.0));
  }
  LLVMValueRef bits = lm_vm_bits(v, x);
  /* Subtracting the bits of sqrt2/2 makes the exponent field step exactly
   * where m leaves [sqrt2/2, sqrt2). */
  LLVMValueRef u = LLVMBuildSub(v->b, bits, lm_vm_const_i(v, 0x3FE6A09E667F3BCDLL), "");
  LLVMValueRef e = LLVMBuildAShr(v->b, u, lm_vm_const_i(v, 52), "");
  LLVMValueRef mbits =
      LLVMBuildSub(v->b, bits, LLVMBuildShl(v->b, e, lm_vm_const_i(v, 52), ""), "");
  LLVMValueRef ed = LLVMBuildSIToFP(v->b, e, v->ft, "");
  if (adjust) ed = lm_vm_add(v, ed, adjust);
  return (mant_exp){lm_vm_from_bits(v, mbits), ed};
}

/* log x for x > 0 finite (fdlibm's e_log.c formula, minimax Q). */
static LLVMValueRef log_core(lm_vm *v, LLVMValueRef x, bool single) {
  mant_exp me = split_exponent(v, x, !single);
  LLVMValueRef f = lm_vm_sub(v, me.m, lm_vm_const(v, 1.0)); /* exact */
  LLVMValueRef s = lm_vm_div(v, f, lm_vm_add(v, lm_vm_const(v, 2.0), f));
  LLVMValueRef z = lm_vm_mul(v, s, s);
  LLVMValueRef q = single ? lm_vm_poly(v, z, LOG_Q_F32, COUNT(LOG_Q_F32))
                          : lm_vm_poly(v, z, LOG_Q_F64, COUNT(LOG_Q_F64));
  LLVMValueRef R = lm_vm_mul(v, z, q);
  LLVMValueRef hfsq = lm_vm_mul(v, lm_vm_mul(v, lm_vm_const(v, 0.5), f), f);
  LLVMValueRef inner =
      lm_vm_fma(v, s, lm_vm_add(v, hfsq, R), lm_vm_mul(v, me.e, lm_vm_const(v, LN2_LO)));
  LLVMValueRef t = lm_vm_sub(v, lm_vm_sub(v, hfsq, inner), f);
  return lm_vm_sub(v, lm_vm_mul(v, me.e, lm_vm_const(v, LN2_HI)), t); /* e LN2_HI exact */
}

LLVMValueRef lm_vm_log(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef r = log_core(v, x, v->single);
  r = lm_vm_select(v, lm_vm_eq(v, x, lm_vm_const(v, INFINITY)), x, r);
  r = lm_vm_select(v, lm_vm_eq(v, x, lm_vm_const(v, 0.0)), lm_vm_const(v, -INFINITY), r);
  r = lm_vm_select(v, lm_vm_lt(v, x, lm_vm_const(v, 0.0)), lm_vm_const(v, NAN), r);
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, r);
}

/* log x in double-double for x > 0 finite, relative error about 2^-100 from
 * the arithmetic and 2^-70 from the polynomial. */
static lm_dd log_dd(lm_vm *v, LLVMValueRef x) {
  mant_exp me = split_exponent(v, x, true);
  LLVMValueRef f = lm_vm_sub(v, me.m, lm_vm_const(v, 1.0)); /* exact */
  /* s = f / (2 + f) in double-double: 2 + f is exact as a double-double, and
   * the division's remainder comes from an fma. */
  lm_dd den = lm_vm_fast_two_sum(v, lm_vm_const(v, 2.0), f);
  LLVMValueRef s_hi = lm_vm_div(v, f, den.hi);
  LLVMValueRef rem =
      lm_vm_sub(v, lm_vm_fma(v, lm_vm_neg(v, s_hi), den.hi, f), lm_vm_mul(v, s_hi, den.lo));
  lm_dd s = lm_vm_fast_two_sum(v, s_hi, lm_vm_div(v, rem, den.hi));
  /* log(1+f) = 2s + s^3 (2/3 + z T(z)), z = s^2 */
  LLVMValueRef z = lm_vm_mul(v, s.hi, s.hi);
  LLVMValueRef zt = lm_vm_mul(v, z, lm_vm_poly(v, z, LOGDD_T_F64, COUNT(LOGDD_T_F64)));
  lm_dd c = lm_vm_fast_two_sum(v, lm_vm_const(v, TWO_THIRDS_HI), zt);
  c.lo = lm_vm_add(v, c.lo, lm_vm_const(v, TWO_THIRDS_LO));
  lm_dd s3 = lm_vm_dd_mul(v, lm_vm_dd_mul(v, s, s), s);
  lm_dd series = lm_vm_dd_add(v, (lm_dd){lm_vm_add(v, s.hi, s.hi), lm_vm_add(v, s.lo, s.lo)},
                              lm_vm_dd_mul(v, s3, c));
  lm_dd eln2 = {lm_vm_mul(v, me.e, lm_vm_const(v, LN2_HI)),
                lm_vm_mul(v, me.e, lm_vm_const(v, LN2_LO))};
  return lm_vm_dd_add(v, eln2, series);
}

/* ------------------------------------------------------------------ pow */

/* |x|^y for |x| positive finite; overflow and underflow come out of exp. */
static LLVMValueRef pow_core(lm_vm *v, LLVMValueRef ax, LLVMValueRef y) {
  if (v->single) { /* float inputs: double log and exp leave ~2^-45 of error */
    LLVMValueRef w = lm_vm_mul(v, y, log_core(v, ax, false));
    return exp_core(v, w, lm_vm_const(v, 0.0), false);
  }
  lm_dd w = lm_vm_dd_mul_d(v, log_dd(v, ax), y);
  return exp_core(v, w.hi, w.lo, false);
}

/* C99 F.9.4.4, as selects around pow_core. */
LLVMValueRef lm_vm_pow(lm_vm *v, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef zero = lm_vm_const(v, 0.0), one = lm_vm_const(v, 1.0);
  LLVMValueRef inf = lm_vm_const(v, INFINITY);
  LLVMValueRef ax = lm_vm_abs(v, x), ay = lm_vm_abs(v, y);
  LLVMValueRef y_neg = lm_vm_lt(v, y, zero);
  /* y integral (inf counts as an even integer) and y odd */
  LLVMValueRef y_int = lm_vm_eq(v, lm_vm_floor(v, y), y);
  LLVMValueRef half = lm_vm_mul(v, y, lm_vm_const(v, 0.5));
  LLVMValueRef y_odd = lm_vm_and(v, y_int, lm_vm_ne_or_nan(v, lm_vm_floor(v, half), half));

  LLVMValueRef mag = pow_core(v, ax, y);
  /* |x| = 0 or inf */
  LLVMValueRef to_inf = lm_vm_select(v, y_neg, inf, zero);
  LLVMValueRef to_zero = lm_vm_select(v, y_neg, zero, inf);
  mag = lm_vm_select(v, lm_vm_eq(v, ax, zero), to_inf, mag);
  mag = lm_vm_select(v, lm_vm_eq(v, ax, inf), to_zero, mag);
  /* y = +-inf: 1 for |x| = 1, else inf when (|x| < 1) == (y < 0), else 0 */
  LLVMValueRef grows = LLVMBuildICmp(v->b, LLVMIntEQ, lm_vm_lt(v, ax, one), y_neg, "");
  LLVMValueRef inf_y = lm_vm_select(v, grows, inf, zero);
  inf_y = lm_vm_select(v, lm_vm_eq(v, ax, one), one, inf_y);
  mag = lm_vm_select(v, lm_vm_eq(v, ay, inf), inf_y, mag);
  /* the sign: x with its sign bit set (also -0, -inf) and y an odd integer */
  LLVMValueRef x_signbit =
      LLVMBuildICmp(v->b, LLVMIntSLT, lm_vm_bits(v, x), lm_vm_const_i(v, 0), "");
  LLVMValueRef r = lm_vm_select(v, lm_vm_and(v, x_signbit, y_odd), lm_vm_neg(v, mag), mag);
  /* NaN: finite x < 0 with y not an integer, or a NaN operand */
  LLVMValueRef neg_finite =
      lm_vm_and(v, lm_vm_lt(v, x, zero), lm_vm_lt(v, lm_vm_const(v, -INFINITY), x));
  LLVMValueRef nan = lm_vm_or(v, lm_vm_and(v, neg_finite, lm_vm_not(v, y_int)),
                              lm_vm_or(v, lm_vm_is_nan(v, x), lm_vm_is_nan(v, y)));
  r = lm_vm_select(v, nan, lm_vm_const(v, NAN), r);
  /* pow(x, +-0) = 1 and pow(1, y) = 1, even for a NaN operand */
  LLVMValueRef is_one = lm_vm_or(v, lm_vm_eq(v, y, zero), lm_vm_eq(v, x, one));
  return lm_vm_select(v, is_one, one, r);
}
