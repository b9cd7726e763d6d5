/*
 * Math functions of float dtypes. sqrt, floor, fabs are LLVM intrinsics (one
 * instruction each). exp log sin cos tanh erf pow are the straight-line vector
 * math of vecmath_*.c: no libm calls, so loops using them vectorize. It works
 * in double (F32 operands are widened and the result rounded once), except F32
 * exp, tanh and erf, which run in float.
 */
#include <string.h>

#include "backends/llvm/vecmath.h"

static LLVMValueRef call_intrinsic(lm_cg *g, const char *name, LLVMTypeRef t, LLVMValueRef *args,
                                   unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (!id) return lm_cg_fail(g, "LLVM has no intrinsic %s", name);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, &t, 1);
  return LLVMBuildCall2(g->b, LLVMIntrinsicGetType(g->ctx, id, &t, 1), fn, args, nargs, "");
}

/* Vector math in double (`single`: for F32 values), or in float. */
static lm_vm double_vm(lm_cg *g, bool single) {
  return (lm_vm){.g = g,
                 .b = g->b,
                 .ft = g->t_f64,
                 .it = g->t_i64,
                 .mant_bits = 52,
                 .bias = 1023,
                 .single = single};
}

static lm_vm float_vm(lm_cg *g) {
  lm_vm v = double_vm(g, true);
  v.ft = g->t_f32, v.it = g->t_i32, v.mant_bits = 23, v.bias = 127;
  return v;
}

/* One vecmath function in double; F32 values are widened and rounded back. */
static LLVMValueRef vector_math(lm_cg *g, lk_op op, loom_dtype dt, LLVMValueRef x, LLVMValueRef y) {
  lm_vm v = double_vm(g, lm_in_float(dt));
  if (v.single && (op == LK_EXP || op == LK_TANH || op == LK_ERF)) { /* the hottest: in float */
    v = float_vm(g);
    return op == LK_EXP    ? lm_vm_exp_f32(&v, x)
           : op == LK_TANH ? lm_vm_tanh_f32(&v, x)
                           : lm_vm_erf(&v, x);
  }
  if (v.single) {
    x = LLVMBuildFPExt(g->b, x, g->t_f64, "");
    if (y) y = LLVMBuildFPExt(g->b, y, g->t_f64, "");
  }
  LLVMValueRef r;
  switch (op) {
  case LK_EXP: r = lm_vm_exp(&v, x); break;
  case LK_LOG: r = lm_vm_log(&v, x); break;
  case LK_SIN: r = lm_vm_sin(&v, x); break;
  case LK_COS: r = lm_vm_cos(&v, x); break;
  case LK_TANH: r = lm_vm_tanh(&v, x); break;
  case LK_ERF: r = lm_vm_erf(&v, x); break;
  case LK_POW: r = lm_vm_pow(&v, x, y); break;
  default: return lm_cg_fail(g, "%s is not a vector math function", lk_op_name(op));
  }
  if (!r || g->failed) return NULL;
  return v.single ? LLVMBuildFPTrunc(g->b, r, g->t_f32, "") : r;
}

LLVMValueRef lm_emit_math(lm_cg *g, lk_op op, loom_dtype dt, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef t = lm_type(g, dt);
  switch (op) {
  case LK_SQRT: return call_intrinsic(g, "llvm.sqrt", t, &x, 1);
  case LK_FLOOR: return call_intrinsic(g, "llvm.floor", t, &x, 1);
  case LK_ABS: return call_intrinsic(g, "llvm.fabs", t, &x, 1);
  case LK_EXP:
  case LK_LOG:
  case LK_SIN:
  case LK_COS:
  case LK_TANH:
  case LK_ERF:
  case LK_POW: return vector_math(g, op, dt, x, y);
  default: return lm_cg_fail(g, "%s is not a math function", lk_op_name(op));
  }
}

LLVMValueRef lm_emit_exp_absorbed(lm_cg *g, LLVMValueRef x) {
  lm_vm v = float_vm(g);
  return lm_vm_exp_f32_absorbed(&v, x);
}

LLVMValueRef lm_emit_exp_nonpositive(lm_cg *g, loom_dtype dt, LLVMValueRef x) {
  if (dt != LOOM_F32) return vector_math(g, LK_EXP, dt, x, NULL);
  lm_vm v = float_vm(g);
  return lm_vm_exp_f32_normal(&v, lm_vm_clamp(&v, x, -87.0, 0.0));
}
