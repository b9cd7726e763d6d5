/*
 * The accumulator of a reduction kernel: identities, the combine step and the
 * two-pass scheme of float MAX/MIN, ARGMAX/ARGMIN and LSE (see llvm_internal.h).
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
  case LOOM_F64:
  case LOOM_BF16:
  case LOOM_F16: return LLVMConstReal(t, highest ? INFINITY : -INFINITY);
  case LOOM_I32:
    return LLVMConstInt(t, highest ? (uint64_t)INT32_MAX : (uint64_t)(int64_t)INT32_MIN, 1);
  case LOOM_I64: return LLVMConstInt(t, highest ? (uint64_t)INT64_MAX : (uint64_t)INT64_MIN, 1);
  case LOOM_I8:
    return LLVMConstInt(t, highest ? (uint64_t)INT8_MAX : (uint64_t)(int64_t)INT8_MIN, 1);
  case LOOM_I16:
    return LLVMConstInt(t, highest ? (uint64_t)INT16_MAX : (uint64_t)(int64_t)INT16_MIN, 1);
  default: /* U8 U16 U32 U64, BOOL: unsigned */
    return highest ? LLVMConstAllOnes(t) : LLVMConstNull(t);
  }
}

static LLVMValueRef identity(lm_cg *g, lk_reduce r, loom_dtype dt) {
  switch (r) {
  case LK_RED_MAX:
  case LK_RED_LSE:
  case LK_RED_ARGMAX: return extreme(g, dt, false);
  case LK_RED_MIN:
  case LK_RED_ARGMIN: return extreme(g, dt, true);
  default: return LLVMConstNull(lm_type(g, dt)); /* SUM */
  }
}

/* Float MAX/MIN/ARGMAX/ARGMIN run their main pass on order keys. */
static bool uses_keys_for(lk_reduce reduce, loom_dtype dt, int64_t extent) {
  /* Tiny rows (a 2x2 pooling window) take the exact pass alone: no key pass
   * to vectorize along them, and without the branch to a second pass the
   * loop over the outputs can vectorize instead. */
  if (extent <= LM_ACC_SMALL_EXTENT && reduce != LK_RED_LSE) return false;
  return lm_dtype_is_float(dt) && reduce != LK_RED_SUM;
}

static LLVMTypeRef key_type(lm_cg *g, loom_dtype dt) {
  return lm_in_float(dt) ? g->t_i32 : g->t_i64;
}

/*
 * The order key of a float's bits: for negative floats every bit but the sign
 * flips, so signed integer comparison of keys orders like the floats (with
 * -0 < +0, NaNs beyond the infinities). The map is its own inverse.
 */
static LLVMValueRef order_key(lm_cg *g, LLVMValueRef bits) {
  LLVMTypeRef t = LLVMTypeOf(bits);
  unsigned width = LLVMGetIntTypeWidth(t);
  LLVMValueRef sign = LLVMBuildAShr(g->b, bits, LLVMConstInt(t, width - 1, 0), "");
  LLVMValueRef flip = LLVMBuildLShr(g->b, sign, LLVMConstInt(t, 1, 0), "");
  return LLVMBuildXor(g->b, bits, flip, "");
}

static LLVMValueRef key_of(lm_cg *g, loom_dtype dt, LLVMValueRef x) {
  return order_key(g, LLVMBuildBitCast(g->b, x, key_type(g, dt), ""));
}

static LLVMValueRef float_of_key(lm_cg *g, loom_dtype dt, LLVMValueRef key) {
  return LLVMBuildBitCast(g->b, order_key(g, key), lm_type(g, dt), "");
}

static bool wants_max(lk_reduce r) {
  return r == LK_RED_MAX || r == LK_RED_ARGMAX || r == LK_RED_LSE;
}

void lm_acc_create(lm_cg *g, lm_acc *acc, lk_reduce reduce, loom_dtype dt, loom_dtype out_dt,
                   int64_t extent) {
  bool keys = uses_keys_for(reduce, dt, extent);
  acc->reduce = reduce;
  acc->dt = dt;
  acc->out_dt = out_dt;
  acc->best = lm_entry_alloca(g, lm_type(g, acc->dt), "acc");
  acc->index = is_arg_reduce(acc->reduce) ? lm_entry_alloca(g, g->t_i64, "acc.index") : NULL;
  acc->key = keys ? lm_entry_alloca(g, key_type(g, acc->dt), "acc.key") : NULL;
  acc->nan = keys ? lm_entry_alloca(g, g->t_i1, "acc.nan") : NULL;
  acc->sum = acc->reduce == LK_RED_LSE ? lm_entry_alloca(g, lm_type(g, dt), "acc.sum") : NULL;
  bool chunks = lm_dtype_is_float(dt) && (reduce == LK_RED_SUM || reduce == LK_RED_LSE) &&
                extent > LM_SUM_CHUNK;
  acc->total = chunks ? lm_entry_alloca(g, g->t_f64, "acc.total") : NULL;
  acc->comp = chunks ? lm_entry_alloca(g, g->t_f64, "acc.comp") : NULL;
  acc->pass = LM_ACC_MAIN;
}

bool lm_acc_chunked(const lm_acc *acc) {
  return acc->total && ((acc->reduce == LK_RED_SUM && acc->pass == LM_ACC_MAIN) ||
                        (acc->reduce == LK_RED_LSE && acc->pass == LM_ACC_EXP_SUM));
}

/* The running chunk: SUM's best, LSE's sum. */
static LLVMValueRef chunk_slot(const lm_acc *acc) {
  return acc->reduce == LK_RED_LSE ? acc->sum : acc->best;
}

void lm_neumaier_add(lm_cg *g, LLVMValueRef total, LLVMValueRef comp, LLVMValueRef x) {
  LLVMValueRef s = LLVMBuildLoad2(g->b, g->t_f64, total, "");
  LLVMValueRef t = LLVMBuildFAdd(g->b, s, x, "");
  LLVMValueRef abs_s = lm_emit_math(g, LK_ABS, LOOM_F64, s, NULL);
  LLVMValueRef abs_x = lm_emit_math(g, LK_ABS, LOOM_F64, x, NULL);
  if (!abs_s || !abs_x) return;
  LLVMValueRef s_larger = LLVMBuildFCmp(g->b, LLVMRealOGE, abs_s, abs_x, "");
  LLVMValueRef lost_x = LLVMBuildFAdd(g->b, LLVMBuildFSub(g->b, s, t, ""), x, "");
  LLVMValueRef lost_s = LLVMBuildFAdd(g->b, LLVMBuildFSub(g->b, x, t, ""), s, "");
  LLVMValueRef lost = LLVMBuildSelect(g->b, s_larger, lost_x, lost_s, "");
  /* nothing is lost once the total is infinite or NaN (inf - inf would make a
     sum with an inf NaN) */
  LLVMValueRef abs_t = lm_emit_math(g, LK_ABS, LOOM_F64, t, NULL);
  if (!abs_t) return;
  LLVMValueRef finite =
      LLVMBuildFCmp(g->b, LLVMRealOLT, abs_t, LLVMConstReal(g->t_f64, INFINITY), "");
  lost = LLVMBuildSelect(g->b, finite, lost, LLVMConstNull(g->t_f64), "");
  LLVMValueRef c = LLVMBuildLoad2(g->b, g->t_f64, comp, "");
  LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, c, lost, ""), comp);
  LLVMBuildStore(g->b, t, total);
}

void lm_acc_flush(lm_cg *g, const lm_acc *acc) {
  LLVMTypeRef t = lm_type(g, acc->dt);
  LLVMValueRef slot = chunk_slot(acc);
  LLVMValueRef x = LLVMBuildLoad2(g->b, t, slot, "chunk");
  if (lm_in_float(acc->dt)) x = LLVMBuildFPExt(g->b, x, g->t_f64, "");
  lm_neumaier_add(g, acc->total, acc->comp, x);
  LLVMBuildStore(g->b, LLVMConstNull(t), slot);
}

/* A chunked sum's value in double: the total, the last chunk and the compensation. */
static LLVMValueRef chunked_value(lm_cg *g, const lm_acc *acc) {
  lm_acc_flush(g, acc);
  LLVMValueRef s = LLVMBuildLoad2(g->b, g->t_f64, acc->total, "");
  return LLVMBuildFAdd(g->b, s, LLVMBuildLoad2(g->b, g->t_f64, acc->comp, ""), "");
}

void lm_acc_reset(lm_cg *g, lm_acc *acc) {
  LLVMValueRef id = identity(g, acc->reduce, acc->dt);
  LLVMBuildStore(g->b, id, acc->best);
  if (acc->index) LLVMBuildStore(g->b, LLVMConstNull(g->t_i64), acc->index);
  if (acc->key) {
    LLVMBuildStore(g->b, key_of(g, acc->dt, id), acc->key);
    LLVMBuildStore(g->b, LLVMConstNull(g->t_i1), acc->nan);
  }
  /* LSE: best = -inf and sum = 0 make an empty reduction -inf + log(0) = -inf. */
  if (acc->sum) LLVMBuildStore(g->b, LLVMConstNull(lm_type(g, acc->dt)), acc->sum);
  if (acc->total) {
    LLVMBuildStore(g->b, LLVMConstNull(g->t_f64), acc->total);
    LLVMBuildStore(g->b, LLVMConstNull(g->t_f64), acc->comp);
  }
  acc->pass = LM_ACC_MAIN;
}

static LLVMValueRef float_sum(lm_cg *g, loom_dtype dt, LLVMValueRef a, LLVMValueRef b) {
  const char *name = lm_in_float(dt) ? "lm.fadd.reassoc.f32" : "lm.fadd.reassoc.f64";
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, name);
  if (!fn) return lm_cg_fail(g, "prelude function %s is missing", name);
  LLVMValueRef args[2] = {a, b};
  return LLVMBuildCall2(g->b, LLVMGlobalGetValueType(fn), fn, args, 2, "");
}

/* Main pass on keys: the extreme key (a vectorizable smax/smin) and the NaN flag. */
static void step_keys(lm_cg *g, const lm_acc *acc, LLVMValueRef x) {
  LLVMTypeRef kt = key_type(g, acc->dt);
  LLVMValueRef key = key_of(g, acc->dt, x);
  LLVMValueRef best = LLVMBuildLoad2(g->b, kt, acc->key, "");
  LLVMValueRef beats =
      LLVMBuildICmp(g->b, wants_max(acc->reduce) ? LLVMIntSGT : LLVMIntSLT, key, best, "");
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, beats, key, best, ""), acc->key);
  LLVMValueRef seen = LLVMBuildLoad2(g->b, g->t_i1, acc->nan, "");
  LLVMValueRef is_nan = LLVMBuildFCmp(g->b, LLVMRealUNO, x, x, "");
  LLVMBuildStore(g->b, LLVMBuildOr(g->b, seen, is_nan, ""), acc->nan);
}

/* Second pass of ARGMAX/ARGMIN: index = min(index, lin) where x is the extreme
 * (a NaN when the main pass saw one). */
static void step_find_first(lm_cg *g, const lm_acc *acc, LLVMValueRef x, LLVMValueRef lin) {
  LLVMTypeRef t = lm_type(g, acc->dt);
  LLVMValueRef best = LLVMBuildLoad2(g->b, t, acc->best, "");
  LLVMValueRef match;
  if (lm_dtype_is_float(acc->dt)) { /* a NaN extreme: the first NaN */
    LLVMValueRef seen = acc->key ? LLVMBuildLoad2(g->b, g->t_i1, acc->nan, "")
                                 : LLVMBuildFCmp(g->b, LLVMRealUNO, best, best, "");
    match = LLVMBuildSelect(g->b, seen, LLVMBuildFCmp(g->b, LLVMRealUNO, x, x, ""),
                            LLVMBuildFCmp(g->b, LLVMRealOEQ, x, best, ""), "");
  } else {
    match = LLVMBuildICmp(g->b, LLVMIntEQ, x, best, "");
  }
  LLVMValueRef cand = LLVMBuildSelect(g->b, match, lin, LLVMConstInt(g->t_i64, INT64_MAX, 0), "");
  LLVMValueRef index = LLVMBuildLoad2(g->b, g->t_i64, acc->index, "");
  LLVMValueRef lower = LLVMBuildICmp(g->b, LLVMIntULT, cand, index, "");
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, lower, cand, index, ""), acc->index);
}

/* Second pass of LSE: sum += exp(x - shift) in the values' dtype. Every term
 * is at most 1 and the reassociated sum runs in vector lanes, so F32 loses
 * little; summing in double halved the vector width (measured 1.7x slower). */
static void step_exp_sum(lm_cg *g, const lm_acc *acc, LLVMValueRef x) {
  LLVMValueRef shift = LLVMBuildLoad2(g->b, lm_type(g, acc->dt), acc->best, "");
  LLVMValueRef e = lm_emit_exp_nonpositive(g, acc->dt, LLVMBuildFSub(g->b, x, shift, ""));
  if (!e) return;
  LLVMValueRef sum = LLVMBuildLoad2(g->b, lm_type(g, acc->dt), acc->sum, "");
  LLVMValueRef next = float_sum(g, acc->dt, sum, e);
  if (next) LLVMBuildStore(g->b, next, acc->sum);
}

void lm_acc_step(lm_cg *g, const lm_acc *acc, LLVMValueRef x, LLVMValueRef lin) {
  if (acc->pass == LM_ACC_EXP_SUM) {
    step_exp_sum(g, acc, x);
    return;
  }
  if (acc->pass == LM_ACC_FIND_FIRST) {
    step_find_first(g, acc, x, lin);
    return;
  }
  if (acc->pass == LM_ACC_MAIN && acc->key) {
    step_keys(g, acc, x);
    return;
  }
  LLVMTypeRef t = lm_type(g, acc->dt);
  LLVMValueRef best = LLVMBuildLoad2(g->b, t, acc->best, "");
  LLVMValueRef next;
  switch (acc->reduce) {
  case LK_RED_SUM:
    next = lm_dtype_is_float(acc->dt) ? float_sum(g, acc->dt, best, x)
                                      : LLVMBuildAdd(g->b, best, x, "");
    break;
  /* integer MAX/MIN and ARGMAX/ARGMIN's main pass, float MAX/MIN's exact pass */
  case LK_RED_MAX:
  case LK_RED_ARGMAX: next = lm_emit_max_min(g, acc->dt, x, best, true); break;
  default: next = lm_emit_max_min(g, acc->dt, x, best, false); break;
  }
  if (next) LLVMBuildStore(g->b, next, acc->best);
}

bool lm_acc_has_second_pass(const lm_acc *acc) {
  return acc->key != NULL || is_arg_reduce(acc->reduce);
}

LLVMValueRef lm_acc_end_main_pass(lm_cg *g, lm_acc *acc) {
  LLVMValueRef always = LLVMConstInt(g->t_i1, 1, 0);
  if (!acc->key) return always; /* integer ARGMAX/ARGMIN: best is final */
  LLVMTypeRef kt = key_type(g, acc->dt);
  LLVMValueRef best = float_of_key(g, acc->dt, LLVMBuildLoad2(g->b, kt, acc->key, ""));
  LLVMBuildStore(g->b, best, acc->best);
  if (is_arg_reduce(acc->reduce)) return always;
  LLVMValueRef seen = LLVMBuildLoad2(g->b, g->t_i1, acc->nan, "");
  if (acc->reduce == LK_RED_LSE) {
    /* The second pass runs when the max m is finite; then every x - m <= 0
     * and the largest term is 1. Otherwise the result is m: NaN after a NaN
     * (NaN + log(0)), +-inf when the max is (m + log(1)). */
    LLVMTypeRef t = lm_type(g, acc->dt);
    LLVMValueRef mag = lm_emit_math(g, LK_ABS, acc->dt, best, NULL);
    if (!mag) return always;
    LLVMValueRef inf = LLVMBuildFCmp(g->b, LLVMRealOEQ, mag, LLVMConstReal(t, INFINITY), "");
    LLVMBuildStore(g->b, LLVMBuildSelect(g->b, seen, LLVMConstReal(t, NAN), best, ""), acc->best);
    LLVMBuildStore(g->b, LLVMBuildSelect(g->b, inf, LLVMConstReal(t, 1.0), LLVMConstNull(t), ""),
                   acc->sum);
    return LLVMBuildNot(g->b, LLVMBuildOr(g->b, seen, inf, ""), "");
  }
  /* A NaN (which one the scalar definition keeps depends on order) or a zero
   * (whose sign does) makes the exact pass run. */
  LLVMValueRef zero =
      LLVMBuildFCmp(g->b, LLVMRealOEQ, best, LLVMConstNull(lm_type(g, acc->dt)), "");
  return LLVMBuildOr(g->b, seen, zero, "");
}

void lm_acc_begin_second_pass(lm_cg *g, lm_acc *acc) {
  if (is_arg_reduce(acc->reduce)) {
    LLVMBuildStore(g->b, LLVMConstInt(g->t_i64, INT64_MAX, 0), acc->index);
    acc->pass = LM_ACC_FIND_FIRST;
  } else if (acc->reduce == LK_RED_LSE) {
    acc->pass = LM_ACC_EXP_SUM; /* the shift is in best, the sum still 0 */
  } else {
    LLVMBuildStore(g->b, identity(g, acc->reduce, acc->dt), acc->best);
    acc->pass = LM_ACC_EXACT;
  }
}

LLVMValueRef lm_acc_result(lm_cg *g, const lm_acc *acc) {
  if (acc->sum) { /* LSE: shift + log(sum), rounded once */
    LLVMValueRef shift = LLVMBuildLoad2(g->b, lm_type(g, acc->dt), acc->best, "");
    if (lm_in_float(acc->dt)) shift = LLVMBuildFPExt(g->b, shift, g->t_f64, "");
    LLVMValueRef sum;
    if (acc->total) { /* the skipped second pass left 0 or 1 in sum: the flush adds it */
      sum = chunked_value(g, acc);
    } else {
      sum = LLVMBuildLoad2(g->b, lm_type(g, acc->dt), acc->sum, "");
      if (lm_in_float(acc->dt)) sum = LLVMBuildFPExt(g->b, sum, g->t_f64, "");
    }
    LLVMValueRef lg = lm_emit_math(g, LK_LOG, LOOM_F64, sum, NULL);
    if (!lg) return NULL;
    LLVMValueRef r = LLVMBuildFAdd(g->b, shift, lg, "");
    return lm_in_float(acc->out_dt) ? LLVMBuildFPTrunc(g->b, r, g->t_f32, "") : r;
  }
  if (acc->index) return LLVMBuildLoad2(g->b, g->t_i64, acc->index, "");
  if (acc->total) {
    LLVMValueRef v = chunked_value(g, acc);
    return lm_in_float(acc->dt) ? LLVMBuildFPTrunc(g->b, v, g->t_f32, "") : v;
  }
  return LLVMBuildLoad2(g->b, lm_type(g, acc->dt), acc->best, "");
}
