/*
 * One kernel instruction -> LLVM IR: types, loads and stores, arithmetic,
 * comparisons, casts. Math functions are in mathfn.c, Philox in philox.c.
 */
#include <string.h>

#include "backends/llvm/llvm_internal.h"

/* The register type of the dtype's row: float or double by significand, else iN
 * (BOOL i1; outside the enum i64, unreachable for a checked kernel). */
LLVMTypeRef lm_type(const lm_cg *g, loom_dtype dt) {
  const lm_dtype_info *d = lm_dtype_info_of(dt);
  if (d->cls == LM_DTYPE_FLOAT) return d->mantissa <= 24 ? g->t_f32 : g->t_f64;
  return LLVMIntTypeInContext(g->ctx, (unsigned)d->bits);
}

LLVMTypeRef lm_mem_type(const lm_cg *g, loom_dtype dt) {
  if (lm_dtype_is_half(dt)) return LLVMInt16TypeInContext(g->ctx);
  return dt == LOOM_BOOL ? g->t_i8 : lm_type(g, dt);
}

static LLVMValueRef i32_const(lm_cg *g, uint32_t bits) { return LLVMConstInt(g->t_i32, bits, 0); }

/* A float rounded to nearest even at BF16's 8 significant bits (a NaN made
 * quiet), or to F16 (through LLVM's half, which handles its range). */
void lm_emit_store_output(lm_cg *g, LLVMValueRef offset, LLVMValueRef v) {
  lm_emit_store(g, g->k->out_dtype, 0, offset, v);
}

LLVMValueRef lm_emit_round(lm_cg *g, loom_dtype dt, LLVMValueRef v) {
  if (dt == LOOM_F16) {
    LLVMValueRef h = LLVMBuildFPTrunc(g->b, v, LLVMHalfTypeInContext(g->ctx), "");
    return LLVMBuildFPExt(g->b, h, g->t_f32, "");
  }
  if (dt != LOOM_BF16) return v;
  LLVMValueRef u = LLVMBuildBitCast(g->b, v, g->t_i32, "");
  LLVMValueRef odd =
      LLVMBuildAnd(g->b, LLVMBuildLShr(g->b, u, i32_const(g, 16), ""), i32_const(g, 1), "");
  LLVMValueRef up = LLVMBuildAdd(g->b, u, LLVMBuildAdd(g->b, odd, i32_const(g, 0x7fff), ""), "");
  LLVMValueRef nan = LLVMBuildFCmp(g->b, LLVMRealUNO, v, v, "");
  LLVMValueRef quiet = LLVMBuildOr(g->b, u, i32_const(g, 0x00400000u), "");
  LLVMValueRef r =
      LLVMBuildAnd(g->b, LLVMBuildSelect(g->b, nan, quiet, up, ""), i32_const(g, 0xffff0000u), "");
  return LLVMBuildBitCast(g->b, r, g->t_f32, "");
}

/* &((T *)slot)[offset] for the memory type of dt. */
static LLVMValueRef element_address(lm_cg *g, loom_dtype dt, int slot, LLVMValueRef offset) {
  LLVMTypeRef mt = lm_mem_type(g, dt);
  LLVMValueRef base = LLVMBuildBitCast(g->b, g->slot[slot], LLVMPointerType(mt, 0), "");
  return LLVMBuildInBoundsGEP2(g->b, mt, base, &offset, 1, "");
}

/* A register value of dt as its bits in memory: an integer of dt's size
 * (BOOL one byte 0 or 1; a BF16 rounded again, as a reduction's result reaches a
 * store unrounded; an F16 exactly, being a half already). */
static LLVMValueRef memory_bits(lm_cg *g, loom_dtype dt, LLVMValueRef v) {
  LLVMTypeRef bits = LLVMIntTypeInContext(g->ctx, (unsigned)(8 * loom_dtype_size(dt)));
  if (dt == LOOM_BOOL) return LLVMBuildZExt(g->b, v, bits, "");
  if (dt == LOOM_F16)
    return LLVMBuildBitCast(g->b, LLVMBuildFPTrunc(g->b, v, LLVMHalfTypeInContext(g->ctx), ""),
                            bits, "");
  if (dt == LOOM_BF16) {
    LLVMValueRef u = LLVMBuildBitCast(g->b, lm_emit_round(g, dt, v), g->t_i32, "");
    return LLVMBuildTrunc(g->b, LLVMBuildLShr(g->b, u, i32_const(g, 16), ""), bits, "");
  }
  return lm_dtype_is_float(dt) ? LLVMBuildBitCast(g->b, v, bits, "") : v;
}

/* The register value of dt whose bits in memory are `bits` (an integer of dt's
 * size): BOOL is a byte != 0, BF16 and F16 widen to float. */
static LLVMValueRef from_memory_bits(lm_cg *g, loom_dtype dt, LLVMValueRef bits) {
  if (dt == LOOM_BOOL) return LLVMBuildICmp(g->b, LLVMIntNE, bits, LLVMConstNull(g->t_i8), "");
  if (dt == LOOM_F16)
    return LLVMBuildFPExt(g->b, LLVMBuildBitCast(g->b, bits, LLVMHalfTypeInContext(g->ctx), ""),
                          g->t_f32, "");
  if (dt == LOOM_BF16) {
    LLVMValueRef u =
        LLVMBuildShl(g->b, LLVMBuildZExt(g->b, bits, g->t_i32, ""), i32_const(g, 16), "");
    return LLVMBuildBitCast(g->b, u, g->t_f32, "");
  }
  return lm_dtype_is_float(dt) ? LLVMBuildBitCast(g->b, bits, lm_type(g, dt), "") : bits;
}

LLVMValueRef lm_emit_load(lm_cg *g, loom_dtype dt, int slot, LLVMValueRef offset) {
  bool through_bits = dt == LOOM_BOOL || lm_dtype_is_half(dt);
  LLVMValueRef v =
      LLVMBuildLoad2(g->b, lm_mem_type(g, dt), element_address(g, dt, slot, offset), "");
  LLVMSetAlignment(v, (unsigned)loom_dtype_size(dt));
  return through_bits ? from_memory_bits(g, dt, v) : v;
}

void lm_emit_store(lm_cg *g, loom_dtype dt, int slot, LLVMValueRef offset, LLVMValueRef v) {
  if (dt == LOOM_BOOL || lm_dtype_is_half(dt)) v = memory_bits(g, dt, v);
  LLVMValueRef st = LLVMBuildStore(g->b, v, element_address(g, dt, slot, offset));
  LLVMSetAlignment(st, (unsigned)loom_dtype_size(dt));
}

/* Floats: NaN if either operand is NaN (a select, not maxnum/minnum, which drop
 * NaNs). Integers: signed or unsigned by dtype. */
LLVMValueRef lm_emit_max_min(lm_cg *g, loom_dtype dt, LLVMValueRef a, LLVMValueRef b, bool is_max) {
  LLVMValueRef a_wins;
  if (lm_dtype_is_float(dt)) {
    LLVMValueRef a_nan = LLVMBuildFCmp(g->b, LLVMRealUNO, a, a, "");
    LLVMValueRef a_beats = LLVMBuildFCmp(g->b, is_max ? LLVMRealOGT : LLVMRealOLT, a, b, "");
    a_wins = LLVMBuildOr(g->b, a_nan, a_beats, "");
  } else {
    LLVMIntPredicate pred = lm_dtype_is_unsigned(dt) ? (is_max ? LLVMIntUGT : LLVMIntULT)
                                                     : (is_max ? LLVMIntSGT : LLVMIntSLT);
    a_wins = LLVMBuildICmp(g->b, pred, a, b, "");
  }
  return LLVMBuildSelect(g->b, a_wins, a, b, "");
}

static LLVMValueRef emit_const(lm_cg *g, const lk_inst *in) {
  LLVMTypeRef t = lm_type(g, in->dtype);
  if (lm_dtype_is_float(in->dtype)) return LLVMConstReal(t, in->imm_f);
  return LLVMConstInt(t, (unsigned long long)in->imm_i, 1);
}

/* A scalar bound at run time: loaded once, in the entry block, since nothing
 * the kernel writes can alias the step's parameters. */
static LLVMValueRef emit_param(lm_cg *g, const lk_inst *in) {
  LLVMValueRef base =
      LLVMBuildBitCast(g->entry, g->slot[in->slot], LLVMPointerType(g->t_f64, 0), "params");
  LLVMValueRef at = LLVMConstInt(g->t_i64, (unsigned long long)in->imm_i, 0);
  LLVMValueRef v = LLVMBuildLoad2(g->entry, g->t_f64,
                                  LLVMBuildInBoundsGEP2(g->entry, g->t_f64, base, &at, 1, ""), "");
  LLVMSetAlignment(v, 8);
  return in->dtype == LOOM_F64 ? v : LLVMBuildFPTrunc(g->entry, v, lm_type(g, in->dtype), "");
}

LLVMValueRef lm_emit_size(lm_cg *g, int64_t index) {
  LLVMValueRef base =
      LLVMBuildBitCast(g->entry, g->slot[g->k->size_slot], LLVMPointerType(g->t_i64, 0), "sizes");
  LLVMValueRef at = LLVMConstInt(g->t_i64, (unsigned long long)index, 0);
  LLVMValueRef v = LLVMBuildLoad2(g->entry, g->t_i64,
                                  LLVMBuildInBoundsGEP2(g->entry, g->t_i64, base, &at, 1, ""), "");
  LLVMSetAlignment(v, 8);
  return v;
}

/* a / b or a % b for index math (a >= 0, b > 0) by a divisor read at run
 * time (a shape-generic kernel's size), without a hardware division per
 * point: 64-bit division never vectorizes, so a generic kernel whose views
 * reshape ran 4-20x slower than its specialized twin, whose constant
 * divisors LLVM turns into multiplies. The estimate trunc(a * (1.0 / b)) is
 * off by at most a * 2^-51 + 1 (three roundings of 2^-53); a second estimate
 * from the remainder brings it within one for every a < 2^63, and one
 * correction each way makes it exact. The reciprocal is loop-invariant,
 * hoisted. */
static LLVMValueRef emit_index_division(lm_cg *g, lk_op op, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef it = LLVMTypeOf(a);
  LLVMValueRef zero = LLVMConstNull(it), one = LLVMConstInt(it, 1, 0);
  LLVMValueRef rcp =
      LLVMBuildFDiv(g->b, LLVMConstReal(g->t_f64, 1.0), LLVMBuildUIToFP(g->b, b, g->t_f64, ""), "");
  LLVMValueRef q = LLVMBuildFPToUI(
      g->b, LLVMBuildFMul(g->b, LLVMBuildUIToFP(g->b, a, g->t_f64, ""), rcp, ""), it, "");
  LLVMValueRef r = LLVMBuildSub(g->b, a, LLVMBuildMul(g->b, q, b, ""), "");
  LLVMValueRef step = LLVMBuildFPToSI(
      g->b, LLVMBuildFMul(g->b, LLVMBuildSIToFP(g->b, r, g->t_f64, ""), rcp, ""), it, "");
  q = LLVMBuildAdd(g->b, q, step, "");
  r = LLVMBuildSub(g->b, a, LLVMBuildMul(g->b, q, b, ""), "");
  LLVMValueRef over = LLVMBuildICmp(g->b, LLVMIntSLT, r, zero, ""); /* q one too large */
  q = LLVMBuildSelect(g->b, over, LLVMBuildSub(g->b, q, one, ""), q, "");
  r = LLVMBuildSelect(g->b, over, LLVMBuildAdd(g->b, r, b, ""), r, "");
  LLVMValueRef under = LLVMBuildICmp(g->b, LLVMIntSGE, r, b, ""); /* q one too small */
  q = LLVMBuildSelect(g->b, under, LLVMBuildAdd(g->b, q, one, ""), q, "");
  r = LLVMBuildSelect(g->b, under, LLVMBuildSub(g->b, r, b, ""), r, "");
  return op == LK_IDIV ? q : r;
}

static LLVMValueRef emit_arith(lm_cg *g, lk_op op, loom_dtype dt, LLVMValueRef a, LLVMValueRef b) {
  bool f = lm_dtype_is_float(dt);
  switch (op) {
  case LK_ADD: return f ? LLVMBuildFAdd(g->b, a, b, "") : LLVMBuildAdd(g->b, a, b, "");
  case LK_SUB: return f ? LLVMBuildFSub(g->b, a, b, "") : LLVMBuildSub(g->b, a, b, "");
  case LK_MUL: return f ? LLVMBuildFMul(g->b, a, b, "") : LLVMBuildMul(g->b, a, b, "");
  case LK_DIV: return LLVMBuildFDiv(g->b, a, b, "");
  /* Index math: both operands are >= 0, so unsigned division is exact and cheaper. */
  case LK_IDIV:
  case LK_IMOD:
    if (!LLVMIsConstant(b)) return emit_index_division(g, op, a, b);
    return op == LK_IDIV ? LLVMBuildUDiv(g->b, a, b, "") : LLVMBuildURem(g->b, a, b, "");
  case LK_MAX: return lm_emit_max_min(g, dt, a, b, true);
  case LK_MIN: return lm_emit_max_min(g, dt, a, b, false);
  default: return lm_cg_fail(g, "%s is not arithmetic", lk_op_name(op));
  }
}

static LLVMValueRef emit_neg_abs(lm_cg *g, lk_op op, loom_dtype dt, LLVMValueRef a) {
  if (lm_dtype_is_float(dt))
    return op == LK_NEG ? LLVMBuildFNeg(g->b, a, "") : lm_emit_math(g, LK_ABS, dt, a, NULL);
  if (op == LK_NEG) return LLVMBuildNeg(g->b, a, ""); /* wraps, like unsigned C arithmetic */
  if (lm_dtype_is_unsigned(dt)) return a;
  LLVMValueRef negative = LLVMBuildICmp(g->b, LLVMIntSLT, a, LLVMConstNull(LLVMTypeOf(a)), "");
  return LLVMBuildSelect(g->b, negative, LLVMBuildNeg(g->b, a, ""), a, "");
}

/* Integer a^e, exact and wrapping: square-and-multiply over e's bits (the
 * sign bit of a signed e aside), branch-free so the loop still vectorizes; a
 * negative e gives PyTorch's 1 for a base of 1, +-1 for -1 by e's parity,
 * else 0. Through double, results past 2^53 were inexact and overflow
 * saturated where torch wraps. */
static LLVMValueRef emit_int_pow(lm_cg *g, loom_dtype dt, LLVMValueRef a, LLVMValueRef e) {
  LLVMTypeRef t = LLVMTypeOf(a);
  bool is_unsigned = lm_dtype_is_unsigned(dt);
  unsigned bits = LLVMGetIntTypeWidth(t) - (is_unsigned ? 0 : 1);
  LLVMValueRef zero = LLVMConstNull(t), one = LLVMConstInt(t, 1, 0);
  LLVMValueRef r = one, square = a, rest = e;
  for (unsigned k = 0; k < bits; k++) {
    LLVMValueRef bit = LLVMBuildICmp(g->b, LLVMIntNE, LLVMBuildAnd(g->b, rest, one, ""), zero, "");
    r = LLVMBuildSelect(g->b, bit, LLVMBuildMul(g->b, r, square, ""), r, "");
    if (k + 1 == bits) break;
    square = LLVMBuildMul(g->b, square, square, "");
    rest = LLVMBuildLShr(g->b, rest, one, "");
  }
  if (is_unsigned) return r;
  LLVMValueRef minus_one = LLVMConstAllOnes(t);
  LLVMValueRef odd = LLVMBuildICmp(g->b, LLVMIntNE, LLVMBuildAnd(g->b, e, one, ""), zero, "");
  LLVMValueRef of_minus_one = LLVMBuildSelect(g->b, odd, minus_one, one, "");
  LLVMValueRef below_zero =
      LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, a, one, ""), one,
                      LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, a, minus_one, ""),
                                      of_minus_one, zero, ""),
                      "");
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, e, zero, ""), below_zero, r, "");
}

/* Floats: ordered (false on NaN) except NE, which is true on NaN. */
static LLVMValueRef emit_compare(lm_cg *g, lk_op op, loom_dtype dt, LLVMValueRef a,
                                 LLVMValueRef b) {
  if (lm_dtype_is_float(dt)) {
    LLVMRealPredicate pred = op == LK_CMPLT   ? LLVMRealOLT
                             : op == LK_CMPLE ? LLVMRealOLE
                             : op == LK_CMPEQ ? LLVMRealOEQ
                                              : LLVMRealUNE;
    return LLVMBuildFCmp(g->b, pred, a, b, "");
  }
  bool u = lm_dtype_is_unsigned(dt);
  LLVMIntPredicate pred = op == LK_CMPLT   ? (u ? LLVMIntULT : LLVMIntSLT)
                          : op == LK_CMPLE ? (u ? LLVMIntULE : LLVMIntSLE)
                          : op == LK_CMPEQ ? LLVMIntEQ
                                           : LLVMIntNE;
  return LLVMBuildICmp(g->b, pred, a, b, "");
}

/* Float -> an integer dtype, truncated toward zero, saturated at that dtype's
 * limits, NaN 0 (llvm.fptosi.sat / fptoui.sat): +inf as I32 is INT32_MAX, -1
 * as U8 is 0. A plain fptosi is poison out of range: a cast of -1e30 then
 * made any bits, a bool of 192 for instance (found by fuzz_ops). */
static LLVMValueRef float_to_int(lm_cg *g, LLVMValueRef v, loom_dtype to) {
  const char *name = lm_dtype_is_unsigned(to) ? "llvm.fptoui.sat" : "llvm.fptosi.sat";
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (!id) return lm_cg_fail(g, "LLVM has no intrinsic %s", name);
  LLVMTypeRef types[2] = {lm_type(g, to), LLVMTypeOf(v)};
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, types, 2);
  return LLVMBuildCall2(g->b, LLVMIntrinsicGetType(g->ctx, id, types, 2), fn, &v, 1, "");
}

/* As C converts, but defined everywhere: float -> int truncates toward zero
 * (saturated to the target's range, NaN 0), to BOOL is != 0, U8 and BOOL widen
 * and convert as unsigned, integer narrowing wraps. */
static LLVMValueRef emit_cast(lm_cg *g, loom_dtype from, loom_dtype to, LLVMValueRef v) {
  if (from == to) return v;
  LLVMTypeRef t = lm_type(g, to);
  if (to == LOOM_BOOL) {
    LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(v));
    return lm_dtype_is_float(from) ? LLVMBuildFCmp(g->b, LLVMRealUNE, v, zero, "")
                                   : LLVMBuildICmp(g->b, LLVMIntNE, v, zero, "");
  }
  if (lm_dtype_is_float(from) && lm_dtype_is_float(to)) { /* then rounded to a 16-bit `to` */
    if (LLVMTypeOf(v) == t) return v;
    return lm_in_float(from) ? LLVMBuildFPExt(g->b, v, t, "") : LLVMBuildFPTrunc(g->b, v, t, "");
  }
  if (lm_dtype_is_float(from)) return float_to_int(g, v, to);
  if (lm_dtype_is_float(to))
    return lm_dtype_is_unsigned(from) ? LLVMBuildUIToFP(g->b, v, t, "")
                                      : LLVMBuildSIToFP(g->b, v, t, "");
  unsigned from_bits = LLVMGetIntTypeWidth(LLVMTypeOf(v)), to_bits = LLVMGetIntTypeWidth(t);
  if (to_bits < from_bits) return LLVMBuildTrunc(g->b, v, t, "");
  if (to_bits > from_bits)
    return lm_dtype_is_unsigned(from) ? LLVMBuildZExt(g->b, v, t, "")
                                      : LLVMBuildSExt(g->b, v, t, "");
  return v;
}

static LLVMValueRef operand_value(lm_cg *g, int i, int which) {
  if (which < 0) return NULL;
  if (!g->val[which])
    return lm_cg_fail(g, "instruction %d uses %%%d, which has no value here", i, which);
  return g->val[which];
}

static LLVMValueRef emit_inst_unrounded(lm_cg *g, int i);

LLVMValueRef lm_emit_inst(lm_cg *g, int i) {
  const lk_inst *in = &g->k->inst[i];
  LLVMValueRef v = emit_inst_unrounded(g, i);
  return v && lk_inst_rounds(in) ? lm_emit_round(g, in->dtype, v) : v;
}

static LLVMValueRef emit_inst_unrounded(lm_cg *g, int i) {
  const lk_inst *in = &g->k->inst[i];
  LLVMValueRef a = operand_value(g, i, in->a);
  LLVMValueRef b = operand_value(g, i, in->b);
  LLVMValueRef c = operand_value(g, i, in->c);
  if (g->failed) return NULL;
  loom_dtype dt = in->dtype;
  loom_dtype adt = in->a >= 0 ? g->k->inst[in->a].dtype : dt;
  switch (in->op) {
  case LK_DIM:
    if (!g->dim[in->imm_i])
      return lm_cg_fail(g, "instruction %d: dim %d has no index here", i, (int)in->imm_i);
    return g->dim[in->imm_i];
  case LK_CONST: return emit_const(g, in);
  case LK_PARAM: return emit_param(g, in);
  case LK_SIZE: /* a count as a float: the integer is exact in double */
    return dt == LOOM_I64 ? lm_emit_size(g, in->imm_i)
                          : LLVMBuildSIToFP(g->b, lm_emit_size(g, in->imm_i), lm_type(g, dt), "");
  case LK_LOAD: return lm_emit_load(g, dt, in->slot, a);
  case LK_RAND: return lm_emit_rand(g, dt, in->slot, (uint32_t)in->imm_i, a);
  case LK_ACC:
    if (!g->acc) return lm_cg_fail(g, "instruction %d: acc outside the epilogue", i);
    return g->acc;
  case LK_STAT:
    if (!g->stat[in->imm_i])
      return lm_cg_fail(g, "instruction %d: stat %d is not known here", i, (int)in->imm_i);
    return g->stat[in->imm_i];
  case LK_IDIV:
  case LK_IMOD:
  case LK_ADD:
  case LK_SUB:
  case LK_MUL:
  case LK_DIV:
  case LK_MAX:
  case LK_MIN: return emit_arith(g, in->op, dt, a, b);
  case LK_NEG:
  case LK_ABS: return emit_neg_abs(g, in->op, dt, a);
  case LK_EXP:
    if (g->absorbed[i]) return lm_emit_exp_absorbed(g, a);
    return lm_emit_math(g, in->op, dt, a, b);
  case LK_POW:
    if (!lm_dtype_is_float(dt)) return emit_int_pow(g, dt, a, b);
    return lm_emit_math(g, in->op, dt, a, b);
  case LK_LOG:
  case LK_SQRT:
  case LK_SIN:
  case LK_COS:
  case LK_TANH:
  case LK_ERF:
  case LK_FLOOR: return lm_emit_math(g, in->op, dt, a, b);
  case LK_CMPLT:
  case LK_CMPLE:
  case LK_CMPEQ:
  case LK_CMPNE: return emit_compare(g, in->op, adt, a, b);
  case LK_AND: return LLVMBuildAnd(g->b, a, b, "");
  case LK_OR: return LLVMBuildOr(g->b, a, b, "");
  case LK_NOT: return LLVMBuildNot(g->b, a, "");
  case LK_WHERE: return LLVMBuildSelect(g->b, a, b, c, "");
  case LK_CAST: return emit_cast(g, adt, dt, a);
  case LK_BITCAST: return adt == dt ? a : from_memory_bits(g, dt, memory_bits(g, adt, a));
  case LK_NUM_OPS: break;
  }
  return lm_cg_fail(g, "instruction %d: unknown op %d", i, (int)in->op);
}
