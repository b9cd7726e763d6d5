/*
 * LK_RAND: Philox 4x32-10 in IR, bit for bit the algorithm of base/philox.h.
 * The 32x32->64 multiplies are zext + mul i64 + lshr 32, which vectorizes
 * (vpmuludq) when the counter is the loop index.
 */
#include "base/philox.h"
#include "backends/llvm/llvm_internal.h"

static LLVMValueRef const_u32(const lm_cg *g, uint32_t v) { return LLVMConstInt(g->t_i32, v, 0); }

/* The key words of a slot, loaded once in the entry block. */
static void slot_key(lm_cg *g, int slot, LLVMValueRef *k0, LLVMValueRef *k1) {
  if (!g->key[2 * slot]) {
    LLVMValueRef base =
        LLVMBuildBitCast(g->entry, g->slot[slot], LLVMPointerType(g->t_i32, 0), "key");
    for (int w = 0; w < 2; w++) {
      LLVMValueRef at = LLVMConstInt(g->t_i64, (unsigned long long)w, 0);
      LLVMValueRef v = LLVMBuildLoad2(
          g->entry, g->t_i32, LLVMBuildInBoundsGEP2(g->entry, g->t_i32, base, &at, 1, ""), "");
      LLVMSetAlignment(v, 4);
      g->key[2 * slot + w] = v;
    }
  }
  *k0 = g->key[2 * slot];
  *k1 = g->key[2 * slot + 1];
}

/* (hi, lo) = 32x32 -> 64-bit product of a 32-bit value and a constant. */
static void mul_hi_lo(lm_cg *g, LLVMValueRef x, uint32_t m, LLVMValueRef *hi, LLVMValueRef *lo) {
  LLVMValueRef p =
      LLVMBuildMul(g->b, LLVMBuildZExt(g->b, x, g->t_i64, ""), LLVMConstInt(g->t_i64, m, 0), "");
  *hi =
      LLVMBuildTrunc(g->b, LLVMBuildLShr(g->b, p, LLVMConstInt(g->t_i64, 32, 0), ""), g->t_i32, "");
  *lo = LLVMBuildTrunc(g->b, p, g->t_i32, "");
}

static void philox4x32_10(lm_cg *g, LLVMValueRef c[4], LLVMValueRef k0, LLVMValueRef k1) {
  for (int round = 0; round < 10; round++) {
    LLVMValueRef hi0, lo0, hi1, lo1;
    mul_hi_lo(g, c[0], LM_PHILOX_M0, &hi0, &lo0);
    mul_hi_lo(g, c[2], LM_PHILOX_M1, &hi1, &lo1);
    LLVMValueRef n0 = LLVMBuildXor(g->b, LLVMBuildXor(g->b, hi1, c[1], ""), k0, "");
    LLVMValueRef n2 = LLVMBuildXor(g->b, LLVMBuildXor(g->b, hi0, c[3], ""), k1, "");
    c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
    k0 = LLVMBuildAdd(g->b, k0, const_u32(g, LM_PHILOX_W0), "");
    k1 = LLVMBuildAdd(g->b, k1, const_u32(g, LM_PHILOX_W1), "");
  }
}

/* x >> shift, as a float of type t (exact: fewer than 27 bits remain). */
static LLVMValueRef bits_to_float(lm_cg *g, LLVMValueRef x, unsigned shift, LLVMTypeRef t) {
  return LLVMBuildUIToFP(g->b, LLVMBuildLShr(g->b, x, const_u32(g, shift), ""), t, "");
}

LLVMValueRef lm_emit_rand(lm_cg *g, loom_dtype dt, int slot, uint32_t stream,
                          LLVMValueRef counter) {
  LLVMValueRef k0, k1;
  slot_key(g, slot, &k0, &k1);
  LLVMValueRef c[4] = {
      LLVMBuildTrunc(g->b, counter, g->t_i32, ""),
      LLVMBuildTrunc(g->b, LLVMBuildLShr(g->b, counter, LLVMConstInt(g->t_i64, 32, 0), ""),
                     g->t_i32, ""),
      const_u32(g, stream),
      const_u32(g, 0),
  };
  philox4x32_10(g, c, k0, k1);
  LLVMTypeRef t = lm_type(g, dt);
  if (dt == LOOM_F32) /* (x0 >> 8) * 2^-24 */
    return LLVMBuildFMul(g->b, bits_to_float(g, c[0], 8, t), LLVMConstReal(t, 1.0 / 16777216.0),
                         "");
  /* ((x0 >> 5) * 2^26 + (x1 >> 6)) * 2^-53: every step is exact. */
  LLVMValueRef hi =
      LLVMBuildFMul(g->b, bits_to_float(g, c[0], 5, t), LLVMConstReal(t, 67108864.0), "");
  LLVMValueRef sum = LLVMBuildFAdd(g->b, hi, bits_to_float(g, c[1], 6, t), "");
  return LLVMBuildFMul(g->b, sum, LLVMConstReal(t, 1.0 / 9007199254740992.0), "");
}
