/*
 * The building blocks of the vector math: double arithmetic, comparisons and
 * selects, bit manipulation, scaling by powers of two, and double-double
 * arithmetic. All of it plain IR or intrinsics that vectorize.
 */
#include <string.h>

#include "backends/llvm/vecmath.h"

LLVMValueRef lm_vm_const(lm_vm *v, double c) { return LLVMConstReal(v->ft, c); }
LLVMValueRef lm_vm_const_i(lm_vm *v, int64_t c) {
  return LLVMConstInt(v->it, (unsigned long long)c, 1);
}

LLVMValueRef lm_vm_add(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFAdd(v->b, a, b, "");
}
LLVMValueRef lm_vm_sub(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFSub(v->b, a, b, "");
}
LLVMValueRef lm_vm_mul(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(v->b, a, b, "");
}
LLVMValueRef lm_vm_div(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFDiv(v->b, a, b, "");
}
LLVMValueRef lm_vm_neg(lm_vm *v, LLVMValueRef a) { return LLVMBuildFNeg(v->b, a, ""); }

/* An overloaded intrinsic on double. */
static LLVMValueRef call(lm_vm *v, const char *name, LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (!id) return lm_cg_fail(v->g, "LLVM has no intrinsic %s", name);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(v->g->mod, id, &v->ft, 1);
  return LLVMBuildCall2(v->b, LLVMIntrinsicGetType(v->g->ctx, id, &v->ft, 1), fn, args, nargs, "");
}

LLVMValueRef lm_vm_fma(lm_vm *v, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return call(v, "llvm.fma", args, 3);
}

LLVMValueRef lm_vm_poly(lm_vm *v, LLVMValueRef x, const double *c, int n) {
  LLVMValueRef r = lm_vm_const(v, c[n - 1]);
  for (int i = n - 2; i >= 0; i--) r = lm_vm_fma(v, r, x, lm_vm_const(v, c[i]));
  return r;
}

LLVMValueRef lm_vm_select(lm_vm *v, LLVMValueRef cond, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(v->b, cond, a, b, "");
}

LLVMValueRef lm_vm_lt(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(v->b, LLVMRealOLT, a, b, "");
}
LLVMValueRef lm_vm_le(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(v->b, LLVMRealOLE, a, b, "");
}
LLVMValueRef lm_vm_eq(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(v->b, LLVMRealOEQ, a, b, "");
}
LLVMValueRef lm_vm_ne_or_nan(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(v->b, LLVMRealUNE, a, b, "");
}
LLVMValueRef lm_vm_is_nan(lm_vm *v, LLVMValueRef a) {
  return LLVMBuildFCmp(v->b, LLVMRealUNO, a, a, "");
}
LLVMValueRef lm_vm_and(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildAnd(v->b, a, b, "");
}
LLVMValueRef lm_vm_or(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildOr(v->b, a, b, "");
}
LLVMValueRef lm_vm_not(lm_vm *v, LLVMValueRef a) { return LLVMBuildNot(v->b, a, ""); }

LLVMValueRef lm_vm_unary(lm_vm *v, const char *intrinsic, LLVMValueRef a) {
  return call(v, intrinsic, &a, 1);
}
LLVMValueRef lm_vm_abs(lm_vm *v, LLVMValueRef a) { return lm_vm_unary(v, "llvm.fabs", a); }
LLVMValueRef lm_vm_rint(lm_vm *v, LLVMValueRef a) { return lm_vm_unary(v, "llvm.rint", a); }
LLVMValueRef lm_vm_floor(lm_vm *v, LLVMValueRef a) { return lm_vm_unary(v, "llvm.floor", a); }

LLVMValueRef lm_vm_copysign(lm_vm *v, LLVMValueRef mag, LLVMValueRef sign) {
  LLVMValueRef args[2] = {mag, sign};
  return call(v, "llvm.copysign", args, 2);
}

/* Compare-and-select in the operand order of x86's maxps/minps, so each bound
 * is one instruction (llvm.maxnum's NaN rule costs three); a NaN passes. */
LLVMValueRef lm_vm_clamp(lm_vm *v, LLVMValueRef x, double lo, double hi) {
  LLVMValueRef l = lm_vm_const(v, lo), h = lm_vm_const(v, hi);
  LLVMValueRef m = lm_vm_select(v, LLVMBuildFCmp(v->b, LLVMRealOLT, x, l, ""), l, x);
  return lm_vm_select(v, LLVMBuildFCmp(v->b, LLVMRealOGT, m, h, ""), h, m);
}

LLVMValueRef lm_vm_bits(lm_vm *v, LLVMValueRef x) { return LLVMBuildBitCast(v->b, x, v->it, ""); }
LLVMValueRef lm_vm_from_bits(lm_vm *v, LLVMValueRef i) {
  return LLVMBuildBitCast(v->b, i, v->ft, "");
}

LLVMValueRef lm_vm_pow2(lm_vm *v, LLVMValueRef k) {
  LLVMValueRef ki = LLVMBuildFPToSI(v->b, k, v->it, "");
  LLVMValueRef biased = LLVMBuildAdd(v->b, ki, lm_vm_const_i(v, v->bias), "");
  return lm_vm_from_bits(v, LLVMBuildShl(v->b, biased, lm_vm_const_i(v, v->mant_bits), ""));
}

LLVMValueRef lm_vm_scale(lm_vm *v, LLVMValueRef x, LLVMValueRef k) {
  /* k = k1 + k2 with k1 = floor(k / 2): both halves are normal exponents. */
  LLVMValueRef k1 = lm_vm_floor(v, lm_vm_mul(v, k, lm_vm_const(v, 0.5)));
  LLVMValueRef k2 = lm_vm_sub(v, k, k1);
  return lm_vm_mul(v, lm_vm_mul(v, x, lm_vm_pow2(v, k1)), lm_vm_pow2(v, k2));
}

/* ------------------------------------------------------------ double-double */

lm_dd lm_vm_two_sum(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef s = lm_vm_add(v, a, b);
  LLVMValueRef bb = lm_vm_sub(v, s, a);
  LLVMValueRef err = lm_vm_add(v, lm_vm_sub(v, a, lm_vm_sub(v, s, bb)), lm_vm_sub(v, b, bb));
  return (lm_dd){s, err};
}

lm_dd lm_vm_fast_two_sum(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef s = lm_vm_add(v, a, b);
  return (lm_dd){s, lm_vm_sub(v, b, lm_vm_sub(v, s, a))};
}

lm_dd lm_vm_two_prod(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef p = lm_vm_mul(v, a, b);
  return (lm_dd){p, lm_vm_fma(v, a, b, lm_vm_neg(v, p))};
}

lm_dd lm_vm_dd_add(lm_vm *v, lm_dd a, lm_dd b) {
  lm_dd s = lm_vm_two_sum(v, a.hi, b.hi);
  LLVMValueRef lo = lm_vm_add(v, s.lo, lm_vm_add(v, a.lo, b.lo));
  return lm_vm_fast_two_sum(v, s.hi, lo);
}

lm_dd lm_vm_dd_mul(lm_vm *v, lm_dd a, lm_dd b) {
  lm_dd p = lm_vm_two_prod(v, a.hi, b.hi);
  LLVMValueRef cross = lm_vm_fma(v, a.hi, b.lo, lm_vm_mul(v, a.lo, b.hi));
  return lm_vm_fast_two_sum(v, p.hi, lm_vm_add(v, p.lo, cross));
}

lm_dd lm_vm_dd_mul_d(lm_vm *v, lm_dd a, LLVMValueRef b) {
  lm_dd p = lm_vm_two_prod(v, a.hi, b);
  return lm_vm_fast_two_sum(v, p.hi, lm_vm_fma(v, a.lo, b, p.lo));
}
