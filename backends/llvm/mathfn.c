/*
 * Math functions of float dtypes. LLVM intrinsics where LLVM has them (they
 * lower to libm calls or instructions); tanh and erf call libm directly.
 * Kept apart so vectorizable polynomial versions can replace these.
 */
#include <string.h>

#include "backends/llvm/llvm_internal.h"

static LLVMValueRef call_intrinsic(lm_cg *g, const char *name, LLVMTypeRef t, LLVMValueRef *args,
                                   unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (!id) return lm_cg_fail(g, "LLVM has no intrinsic %s", name);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, &t, 1);
  return LLVMBuildCall2(g->b, LLVMIntrinsicGetType(g->ctx, id, &t, 1), fn, args, nargs, "");
}

/* A libm function T name(T): declared without side effects (loom never reads
 * errno), so LLVM may hoist or drop it like an intrinsic. */
static LLVMValueRef call_libm(lm_cg *g, const char *name, LLVMTypeRef t, LLVMValueRef x) {
  LLVMTypeRef ft = LLVMFunctionType(t, &t, 1, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, name);
  if (!fn) {
    fn = LLVMAddFunction(g->mod, name, ft);
    const char *attrs[] = {"nounwind", "readnone", "willreturn"};
    for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++) {
      unsigned kind = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
      LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                              LLVMCreateEnumAttribute(g->ctx, kind, 0));
    }
  }
  return LLVMBuildCall2(g->b, ft, fn, &x, 1, "");
}

LLVMValueRef lm_emit_math(lm_cg *g, lk_op op, loom_dtype dt, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef t = lm_type(g, dt);
  bool f32 = dt == LOOM_F32;
  LLVMValueRef xy[2] = {x, y};
  switch (op) {
  case LK_EXP: return call_intrinsic(g, "llvm.exp", t, xy, 1);
  case LK_LOG: return call_intrinsic(g, "llvm.log", t, xy, 1);
  case LK_SQRT: return call_intrinsic(g, "llvm.sqrt", t, xy, 1);
  case LK_SIN: return call_intrinsic(g, "llvm.sin", t, xy, 1);
  case LK_COS: return call_intrinsic(g, "llvm.cos", t, xy, 1);
  case LK_FLOOR: return call_intrinsic(g, "llvm.floor", t, xy, 1);
  case LK_ABS: return call_intrinsic(g, "llvm.fabs", t, xy, 1);
  case LK_POW: return call_intrinsic(g, "llvm.pow", t, xy, 2);
  case LK_TANH: return call_libm(g, f32 ? "tanhf" : "tanh", t, x);
  case LK_ERF: return call_libm(g, f32 ? "erff" : "erf", t, x);
  default: return lm_cg_fail(g, "%s is not a math function", lk_op_name(op));
  }
}
