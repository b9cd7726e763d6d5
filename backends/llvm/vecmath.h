/*
 * Vector math: exp log tanh sin cos erf pow as straight-line LLVM IR (selects,
 * no branches, no calls), so the loop vectorizer turns every loop that uses
 * them into SIMD code. Shared by the vecmath_*.c files of backends/llvm/ only.
 *
 * Every function but F32 exp, tanh and erf evaluates in double. F32 inputs are widened, go
 * through the same construction with polynomials sized for single precision,
 * and are rounded once at the end, the way glibc's expf/logf/sinf/powf work
 * since 2.28: the result is then within about 0.5 ulp of float, far inside the
 * 2e-7 relative error loom promises for F32. F32 exp, tanh and erf, the hottest
 * of them (softmax, sigmoid, silu, tanh and GELU activations), run in float at
 * twice the vector width; they are within 8.5e-8 (exp), 1.85e-7 (tanh) and
 * 7.2e-8 (erf, 0.60 ulp) relative of double libm for every float |x| <= 104,
 * checked exhaustively (LOOM_VECMATH_EXHAUSTIVE=exp|tanh|erf test_vecmath).
 * F64 results are within a
 * few ulp.
 *
 * Accuracy, measured by tests/test_vecmath.c against double-precision libm
 * (which prints the maxima): F32 within 0.72 ulp (<= 8.5e-8 relative, the
 * limit asked is 2e-7) but for tanh (1.55 ulp, 1.85e-7); F64 exp log sin cos erf pow within 1 ulp,
 * tanh within 2.2 ulp (its -t/(t+2) form for |x| < 0.55). sin/cos range reduction: Cody-Waite (pi/2
 * in three exact 33-bit parts) for |x| < 2^19 pi, Payne-Hanek with a table of 2/pi bits beyond it,
 * so every finite argument is reduced with an absolute error below 1e-28 (F32 arguments: 1e-21).
 * Only the few F64 arguments above 2^19 pi that lie within 1e-20 of a multiple of pi/2 lose
 * relative (never absolute) accuracy. Special values follow C99 Annex F: NaN in, NaN out; exp
 * overflow -> inf, underflow -> 0 (with gradual underflow); log(0) = -inf, log(x<0) = NaN, log(inf)
 * = inf; tanh(+-large) = +-1; sin/cos(+-inf) = NaN; pow as C pow.
 *
 * The only assumption about the target is that llvm.fma is fast (x86-64 with
 * FMA, AArch64): error-free products use it.
 */
#ifndef LOOM_BACKENDS_LLVM_VECMATH_H
#define LOOM_BACKENDS_LLVM_VECMATH_H

#include "backends/llvm/llvm_internal.h"

/* Emits one function's IR at g->b. `ft` is the float type computed in (double,
 * except for lm_vm_exp_f32 and lm_vm_tanh_f32) and `it` the integer type of its bits; `single`
 * selects the F32 polynomials and thresholds. */
typedef struct lm_vm {
  lm_cg *g;
  LLVMBuilderRef b;
  LLVMTypeRef ft, it;
  int mant_bits, bias; /* of ft: 52 and 1023, or 23 and 127 */
  bool single;
} lm_vm;

/* A double-double hi + lo with |lo| <= ulp(hi) / 2. */
typedef struct lm_dd {
  LLVMValueRef hi, lo;
} lm_dd;

/* ------------------------------------------------------------ vecmath_core.c */

LLVMValueRef lm_vm_const(lm_vm *v, double c);
LLVMValueRef lm_vm_const_i(lm_vm *v, int64_t c);
LLVMValueRef lm_vm_add(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_sub(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_mul(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_div(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_neg(lm_vm *v, LLVMValueRef a);
/* a * b + c with one rounding (llvm.fma). */
LLVMValueRef lm_vm_fma(lm_vm *v, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c);
/* c[0] + c[1] x + ... + c[n-1] x^(n-1), Horner with fma. */
LLVMValueRef lm_vm_poly(lm_vm *v, LLVMValueRef x, const double *c, int n);
LLVMValueRef lm_vm_select(lm_vm *v, LLVMValueRef cond, LLVMValueRef a, LLVMValueRef b);
/* Ordered comparisons (false on NaN) and their logic. */
LLVMValueRef lm_vm_lt(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_le(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_eq(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_ne_or_nan(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_is_nan(lm_vm *v, LLVMValueRef a);
LLVMValueRef lm_vm_and(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_or(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lm_vm_not(lm_vm *v, LLVMValueRef a);
/* Unary intrinsics: "llvm.fabs", "llvm.rint", "llvm.floor". */
LLVMValueRef lm_vm_unary(lm_vm *v, const char *intrinsic, LLVMValueRef a);
LLVMValueRef lm_vm_abs(lm_vm *v, LLVMValueRef a);
LLVMValueRef lm_vm_rint(lm_vm *v, LLVMValueRef a);
LLVMValueRef lm_vm_floor(lm_vm *v, LLVMValueRef a);
LLVMValueRef lm_vm_copysign(lm_vm *v, LLVMValueRef mag, LLVMValueRef sign);
/* lo <= x <= hi; a NaN stays NaN (callers select their NaN result apart). */
LLVMValueRef lm_vm_clamp(lm_vm *v, LLVMValueRef x, double lo, double hi);
LLVMValueRef lm_vm_bits(lm_vm *v, LLVMValueRef x);      /* double -> i64 */
LLVMValueRef lm_vm_from_bits(lm_vm *v, LLVMValueRef i); /* i64 -> double */
/* 2^k for an integer-valued k in ft's normal exponent range. */
LLVMValueRef lm_vm_pow2(lm_vm *v, LLVMValueRef k);
/* x * 2^k for an integer-valued k up to twice ft's exponent range (two exact
 * steps, so an underflowing result is rounded once, to a subnormal or zero). */
LLVMValueRef lm_vm_scale(lm_vm *v, LLVMValueRef x, LLVMValueRef k);

/* Error-free transformations and double-double arithmetic (Dekker, Knuth;
 * T. J. Dekker, "A floating-point technique for extending the available
 * precision", 1971). */
lm_dd lm_vm_two_sum(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
lm_dd lm_vm_fast_two_sum(lm_vm *v, LLVMValueRef a, LLVMValueRef b); /* |a| >= |b| */
lm_dd lm_vm_two_prod(lm_vm *v, LLVMValueRef a, LLVMValueRef b);
lm_dd lm_vm_dd_add(lm_vm *v, lm_dd a, lm_dd b);
lm_dd lm_vm_dd_mul(lm_vm *v, lm_dd a, lm_dd b);
lm_dd lm_vm_dd_mul_d(lm_vm *v, lm_dd a, LLVMValueRef b);

/* ------------------------------------------------------------ the functions */

/* vecmath_exp_log.c */
LLVMValueRef lm_vm_exp(lm_vm *v, LLVMValueRef x);
/* exp of a float computed in float (v->ft is float): twice the vector width of
 * the double path, about 0.6 ulp. */
LLVMValueRef lm_vm_exp_f32(lm_vm *v, LLVMValueRef x);
/* e^x for a value only ever added to constants of magnitude >= 1 (sigmoid's
 * 1 + e^-x): below e^-86.5 the result stays e^-86.5, which vanishes in such a
 * sum as the true value does, so 2^k takes one step instead of two. */
LLVMValueRef lm_vm_exp_f32_absorbed(lm_vm *v, LLVMValueRef x);
/* The same for -87 <= x <= 88 only (no clamping, no NaN handling, 2^k scaled
 * in one step): for callers that bound x themselves. */
LLVMValueRef lm_vm_exp_f32_normal(lm_vm *v, LLVMValueRef x);
/* e^(hi + lo) for |lo| small against hi; no NaN handling (a NaN hi gives 0). */
LLVMValueRef lm_vm_exp_dd(lm_vm *v, LLVMValueRef hi, LLVMValueRef lo);
/* e^x - 1 for |x| <= 64, accurate also near 0. */
LLVMValueRef lm_vm_expm1(lm_vm *v, LLVMValueRef x);
/* e^x - 1 in float for 0 <= x <= 20 (no clamping, no NaN handling). */
LLVMValueRef lm_vm_expm1_f32(lm_vm *v, LLVMValueRef x);
LLVMValueRef lm_vm_log(lm_vm *v, LLVMValueRef x);
LLVMValueRef lm_vm_pow(lm_vm *v, LLVMValueRef x, LLVMValueRef y);
/* vecmath_trig.c */
LLVMValueRef lm_vm_sin(lm_vm *v, LLVMValueRef x);
LLVMValueRef lm_vm_cos(lm_vm *v, LLVMValueRef x);
/* vecmath_special.c */
LLVMValueRef lm_vm_tanh(lm_vm *v, LLVMValueRef x);
/* tanh of a float computed in float (v->ft is float), like lm_vm_exp_f32. */
LLVMValueRef lm_vm_tanh_f32(lm_vm *v, LLVMValueRef x);
LLVMValueRef lm_vm_erf(lm_vm *v, LLVMValueRef x);

#endif
