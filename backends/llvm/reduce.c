/*
 * The accumulator of a reduction kernel: identities and the combine step.
 * The state lives in allocas that mem2reg turns into loop phis, which is the
 * shape LLVM's vectorizer recognizes as a reduction.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/llvm/llvm_internal.h"

/*
 * LLVM 14's C API cannot set fast-math flags, so the accumulating fadd comes
 * from a tiny helper written in textual IR and always inlined: its `reassoc`
 * lets the vectorizer reorder a float sum into vector lanes (the result is
 * still deterministic for the same code), `contract` lets it fuse a multiply
 * into the sum.
 */
static const char PRELUDE[] = "define internal float @lm.fadd.reassoc.f32(float %a, float %b) "
                              "alwaysinline nounwind readnone {\n"
                              "  %r = fadd reassoc contract float %a, %b\n"
                              "  ret float %r\n"
                              "}\n"
                              "define internal double @lm.fadd.reassoc.f64(double %a, double %b) "
                              "alwaysinline nounwind readnone {\n"
                              "  %r = fadd reassoc contract double %a, %b\n"
                              "  ret double %r\n"
                              "}\n";

const char *lm_reduce_prelude_ir(void) { return PRELUDE; }

static bool is_arg_reduce(lk_reduce r) { return r == LK_RED_ARGMAX || r == LK_RED_ARGMIN; }

/* The smallest (lowest) or largest value of a dtype: -inf/+inf for floats. */
static LLVMValueRef extreme(lm_cg *g, loom_dtype dt, bool highest) {
  LLVMTypeRef t = lm_type(g, dt);
  switch (dt) {
  case LOOM_F32:
  case LOOM_F64: return LLVMConstReal(t, highest ? INFINITY : -INFINITY);
  case LOOM_I32:
    return LLVMConstInt(t, highest ? (uint64_t)INT32_MAX : (uint64_t)(int64_t)INT32_MIN, 1);
  case LOOM_I64: return LLVMConstInt(t, highest ? (uint64_t)INT64_MAX : (uint64_t)INT64_MIN, 1);
  default: /* U8, BOOL: unsigned */ return highest ? LLVMConstAllOnes(t) : LLVMConstNull(t);
  }
}

static LLVMValueRef identity(lm_cg *g, lk_reduce r, loom_dtype dt) {
  switch (r) {
  case LK_RED_MAX:
  case LK_RED_ARGMAX: return extreme(g, dt, false);
  case LK_RED_MIN:
  case LK_RED_ARGMIN: return extreme(g, dt, true);
  default: return LLVMConstNull(lm_type(g, dt)); /* SUM */
  }
}

void lm_acc_create(lm_cg *g, lm_acc *acc) {
  const lk_kernel *k = g->k;
  acc->reduce = k->reduce;
  acc->dt = k->inst[k->value].dtype;
  acc->best = lm_entry_alloca(g, lm_type(g, acc->dt), "acc");
  acc->index = is_arg_reduce(acc->reduce) ? lm_entry_alloca(g, g->t_i64, "acc.index") : NULL;
}

void lm_acc_reset(lm_cg *g, const lm_acc *acc) {
  LLVMBuildStore(g->b, identity(g, acc->reduce, acc->dt), acc->best);
  if (acc->index) LLVMBuildStore(g->b, LLVMConstNull(g->t_i64), acc->index);
}

static LLVMValueRef float_sum(lm_cg *g, loom_dtype dt, LLVMValueRef a, LLVMValueRef b) {
  const char *name = dt == LOOM_F32 ? "lm.fadd.reassoc.f32" : "lm.fadd.reassoc.f64";
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, name);
  if (!fn) return lm_cg_fail(g, "prelude function %s is missing", name);
  LLVMValueRef args[2] = {a, b};
  return LLVMBuildCall2(g->b, LLVMGlobalGetValueType(fn), fn, args, 2, "");
}

/* Whether x replaces the best value so far: strictly better (so the first of
 * equal values wins), and a NaN beats everything but an earlier NaN. */
static LLVMValueRef arg_better(lm_cg *g, const lm_acc *acc, LLVMValueRef x, LLVMValueRef best) {
  bool is_max = acc->reduce == LK_RED_ARGMAX;
  if (lm_dtype_is_float(acc->dt)) {
    /* ugt/ult are also true when x or best is NaN; `best is not NaN` keeps the first NaN. */
    LLVMValueRef beats = LLVMBuildFCmp(g->b, is_max ? LLVMRealUGT : LLVMRealULT, x, best, "");
    LLVMValueRef best_ok = LLVMBuildFCmp(g->b, LLVMRealORD, best, best, "");
    return LLVMBuildAnd(g->b, beats, best_ok, "");
  }
  LLVMIntPredicate pred = lm_dtype_is_unsigned(acc->dt) ? (is_max ? LLVMIntUGT : LLVMIntULT)
                                                        : (is_max ? LLVMIntSGT : LLVMIntSLT);
  return LLVMBuildICmp(g->b, pred, x, best, "");
}

void lm_acc_step(lm_cg *g, const lm_acc *acc, LLVMValueRef x, LLVMValueRef lin) {
  LLVMTypeRef t = lm_type(g, acc->dt);
  LLVMValueRef best = LLVMBuildLoad2(g->b, t, acc->best, "");
  LLVMValueRef next;
  switch (acc->reduce) {
  case LK_RED_SUM:
    next = lm_dtype_is_float(acc->dt) ? float_sum(g, acc->dt, best, x)
                                      : LLVMBuildAdd(g->b, best, x, "");
    break;
  case LK_RED_MAX: next = lm_emit_max_min(g, acc->dt, x, best, true); break;
  case LK_RED_MIN: next = lm_emit_max_min(g, acc->dt, x, best, false); break;
  default: {
    LLVMValueRef better = arg_better(g, acc, x, best);
    LLVMValueRef index = LLVMBuildLoad2(g->b, g->t_i64, acc->index, "");
    LLVMBuildStore(g->b, LLVMBuildSelect(g->b, better, lin, index, ""), acc->index);
    next = LLVMBuildSelect(g->b, better, x, best, "");
  }
  }
  if (next) LLVMBuildStore(g->b, next, acc->best);
}

LLVMValueRef lm_acc_result(lm_cg *g, const lm_acc *acc) {
  if (acc->index) return LLVMBuildLoad2(g->b, g->t_i64, acc->index, "");
  return LLVMBuildLoad2(g->b, lm_type(g, acc->dt), acc->best, "");
}
