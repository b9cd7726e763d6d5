/*
 * tanh and erf as straight-line IR (see vecmath.h).
 *
 * tanh (fdlibm s_tanh.c structure): with t = expm1(-2|x|) for |x| < 1 and
 * t = expm1(2|x|) above, tanh|x| = -t / (t + 2), resp. 1 - 2 / (t + 2); both
 * share one expm1 and one division. |x| is clamped to 22, where tanh rounds
 * to 1 in double. F32 tanh has a float version (lm_vm_tanh_f32, below).
 *
 * erf: piecewise minimax polynomials, evaluated as ONE polynomial whose
 * coefficients are selected per element by the interval |x| falls in (the
 * way SLEEF's erf picks coefficients by lane):
 *   |x| < 0.875:            erf x = x + x P(x^2)
 *   interval i above that:  erf x = 1 - E_i(|x| - center_i)   (E_i ~ erfc)
 *   beyond the last one:    erf x = +-1 (F64 from 5.95, F32 from 3.95)
 * Near 0 this keeps erf's relative accuracy; above 0.875 erf >= 0.78, so
 * absolute accuracy of E_i is enough. Coefficients: vecmath_coeffs.h.
 */
#include <math.h>

#include "backends/llvm/vecmath.h"
#include "backends/llvm/vecmath_coeffs.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

LLVMValueRef lm_vm_tanh(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef a = lm_vm_abs(v, x);
  LLVMValueRef ac = lm_vm_clamp(v, a, 0.0, 22.0);
  LLVMValueRef small = lm_vm_lt(v, a, lm_vm_const(v, 0.55));
  LLVMValueRef two_a = lm_vm_add(v, ac, ac);
  LLVMValueRef t = lm_vm_expm1(v, lm_vm_select(v, small, lm_vm_neg(v, two_a), two_a));
  LLVMValueRef two = lm_vm_const(v, 2.0);
  LLVMValueRef q = lm_vm_div(v, lm_vm_select(v, small, lm_vm_neg(v, t), two), lm_vm_add(v, t, two));
  LLVMValueRef mag = lm_vm_select(v, small, q, lm_vm_sub(v, lm_vm_const(v, 1.0), q));
  LLVMValueRef r = lm_vm_copysign(v, mag, x);
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, r);
}

/* tanh in float arithmetic (v->ft is float): tanh|x| = t / (t + 2) with
 * t = expm1(2|x|) from the float exp's reduction (2^k (e^r - 1) + (2^k - 1),
 * one rounding, so t keeps its relative accuracy near 0); |x| is clamped to
 * 9, where the result rounds to 1. Within 1.85e-7 relative of double libm
 * for every float (1.55 ulp, exhaustive check): one expm1 and one division,
 * where a polynomial below |x| = 1 besides (0.74 ulp) cost 15% more on
 * ew_chain_16M, a kernel bound by its vector operations (8.5 -> 7.2 ms). */
LLVMValueRef lm_vm_tanh_f32(lm_vm *v, LLVMValueRef x) {
  LLVMValueRef a = lm_vm_abs(v, x);
  LLVMValueRef ac = lm_vm_clamp(v, a, 0.0, 9.0);
  LLVMValueRef e1 = lm_vm_expm1_f32(v, lm_vm_add(v, ac, ac));
  LLVMValueRef mag = lm_vm_div(v, e1, lm_vm_add(v, e1, lm_vm_const(v, 2.0)));
  LLVMValueRef r = lm_vm_copysign(v, mag, x);
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, r);
}

/* The intervals of one precision. */
typedef struct erf_pieces {
  const double *small; /* P, for |x| < bound[0] */
  int nsmall;
  const double *bound;  /* [nbig + 1] */
  const double *center; /* [nbig] */
  const double *big;    /* [nbig][nbig_coef] */
  int nbig, nbig_coef;
} erf_pieces;

static erf_pieces pieces(bool single) {
  if (single)
    return (erf_pieces){ERF_P_F32,       COUNT(ERF_P_F32), ERFC_F32_BOUND,    ERFC_F32_CENTER,
                        &ERFC_F32[0][0], COUNT(ERFC_F32),  COUNT(ERFC_F32[0])};
  return (erf_pieces){ERF_P_F64,       COUNT(ERF_P_F64), ERFC_F64_BOUND,    ERFC_F64_CENTER,
                      &ERFC_F64[0][0], COUNT(ERFC_F64),  COUNT(ERFC_F64[0])};
}

/* The value of table[i] for the interval a lies in: selects from the last
 * interval inwards, so the first interval whose upper bound exceeds a wins. */
static LLVMValueRef pick(lm_vm *v, const LLVMValueRef *below, const double *per_interval,
                         int stride, int n) {
  LLVMValueRef r = lm_vm_const(v, per_interval[(n - 1) * stride]);
  for (int i = n - 2; i >= 0; i--)
    r = lm_vm_select(v, below[i], lm_vm_const(v, per_interval[i * stride]), r);
  return r;
}

LLVMValueRef lm_vm_erf(lm_vm *v, LLVMValueRef x) {
  erf_pieces e = pieces(v->single);
  LLVMValueRef a = lm_vm_abs(v, x);
  LLVMValueRef in_small = lm_vm_lt(v, a, lm_vm_const(v, e.bound[0]));
  LLVMValueRef below[8]; /* below[i]: a is under interval i's upper bound */
  for (int i = 0; i < e.nbig; i++) below[i] = lm_vm_lt(v, a, lm_vm_const(v, e.bound[i + 1]));
  LLVMValueRef zero = lm_vm_const(v, 0.0);

  LLVMValueRef centered = lm_vm_sub(v, a, pick(v, below, e.center, 1, e.nbig));
  LLVMValueRef t = lm_vm_select(v, in_small, lm_vm_mul(v, a, a), centered);
  int n = e.nbig_coef > e.nsmall ? e.nbig_coef : e.nsmall;
  LLVMValueRef p = NULL;
  for (int i = n - 1; i >= 0; i--) {
    LLVMValueRef c = i < e.nbig_coef ? pick(v, below, e.big + i, e.nbig_coef, e.nbig) : zero;
    c = lm_vm_select(v, in_small, i < e.nsmall ? lm_vm_const(v, e.small[i]) : zero, c);
    p = p ? lm_vm_fma(v, p, t, c) : c;
  }
  LLVMValueRef one = lm_vm_const(v, 1.0);
  LLVMValueRef mag = lm_vm_select(v, in_small, lm_vm_fma(v, a, p, a), lm_vm_sub(v, one, p));
  mag = lm_vm_select(v, below[e.nbig - 1], mag, one);
  LLVMValueRef r = lm_vm_copysign(v, mag, x);
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, r);
}
