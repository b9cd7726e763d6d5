/*
 * The GEMM blocks' AMX path (BF16 operands, F32 sums in tile registers):
 * its packing and microkernel. A file of its own: only CPUs with AMX take
 * it, and its layouts are AMX's tiles', not gemm.c's slivers.
 */
#include "backends/llvm/gemm_internal.h"

/* ------------------------------------------------------------------ AMX (BF16) */

/*
 * With AMX, the microkernel is four 16 x 16 tiles of float sums (a 32 x 32
 * block of C) in the CPU's tile registers; each step loads two 16 x 32 tiles
 * of A (rows, 32 terms each) and two of B (16 pairs of terms x 16 columns)
 * and runs four tile products, 32 terms of 1024 sums. The packed layouts are
 * the tiles' rows:
 *   A's block: rows padded to a multiple of 32, each of kp terms (kc rounded
 *     up to 32, zeros past kc); row i at pa + i * kp.
 *   B's panel: slivers of 32 columns, sliver s at pb + s * 32 * kp; in a
 *     sliver, term pair q is 64 values at q * 64: (B(2q, j), B(2q+1, j)) for
 *     each column j, zeros past the panel.
 * Tile shapes are constants, so LLVM configures the tiles once per function;
 * a tile of C past the matrix's edge goes through a 32 x 32 block on the stack.
 */

static LLVMValueRef amx_call(gemm_cg *g, const char *name, LLVMValueRef *args, unsigned n) {
  return intrinsic(g, name, NULL, 0, args, n);
}

static LLVMValueRef i16c(gemm_cg *g, int v) {
  return LLVMConstInt(LLVMInt16TypeInContext(g->ctx), (unsigned long long)v, 0);
}

static LLVMValueRef i8_ptr(gemm_cg *g, LLVMValueRef p) {
  return LLVMBuildBitCast(g->b, p, LLVMPointerType(LLVMInt8TypeInContext(g->ctx), 0), "");
}

static LLVMValueRef load_i16x32(gemm_cg *g, LLVMValueRef p, LLVMValueRef mask) {
  LLVMTypeRef vt = LLVMVectorType(g->op_t, 32), vp = LLVMPointerType(vt, 0);
  LLVMTypeRef types[2] = {vt, vp};
  LLVMValueRef args[4] = {LLVMBuildBitCast(g->b, p, vp, ""), LLVMConstInt(g->t_i32, 2, 0), mask,
                          LLVMConstNull(vt)};
  return intrinsic(g, "llvm.masked.load", types, 2, args, 4);
}

/* v at p (an i16 pointer), 2-byte aligned */
static void store_op_vec(gemm_cg *g, LLVMValueRef v, LLVMValueRef p) {
  store_aligned(g, v, LLVMBuildBitCast(g->b, p, LLVMPointerType(LLVMTypeOf(v), 0), ""), 2);
}

/* *to = ok ? *from : 0, one operand element (read only when ok) */
static void copy_op_or_zero(gemm_cg *g, LLVMValueRef ok, LLVMValueRef from, LLVMValueRef to) {
  store_aligned(g, LLVMConstNull(g->op_t), to, 2);
  LLVMBasicBlockRef join = if_begin(g, ok);
  store_aligned(g, load_aligned(g, g->op_t, from, 2), to, 2);
  if_end(g, join);
}

LLVMValueRef lm_gemm_round_up_iv(gemm_cg *g, LLVMValueRef v, int to) {
  return LLVMBuildMul(
      g->b, LLVMBuildSDiv(g->b, LLVMBuildNSWAdd(g->b, v, i64c(g, to - 1), ""), i64c(g, to), ""),
      i64c(g, to), "");
}

/* amx_pack_a(mc, kc, a, row, col, dst): A's block as tile rows. */
LLVMValueRef lm_gemm_gen_amx_pack_a(gemm_cg *g, const char *symbol) {
  char name[64];
  snprintf(name, sizeof name, "%s.amx_pack_a", symbol);
  LLVMTypeRef params[6] = {g->t_i64, g->t_i64, g->op_tp, g->t_i64, g->t_i64, g->op_tp};
  LLVMValueRef fn = begin_function(g, name, params, 6, true);
  LLVMValueRef mc = LLVMGetParam(fn, 0), kc = LLVMGetParam(fn, 1), a = LLVMGetParam(fn, 2),
               row = LLVMGetParam(fn, 3), col = LLVMGetParam(fn, 4), dst = LLVMGetParam(fn, 5);
  LLVMValueRef kp = lm_gemm_round_up_iv(g, kc, LK_GEMM_AMX_K);
  LLVMValueRef rows = lm_gemm_round_up_iv(g, mc, g->d->mr);
  LLVMValueRef contiguous = LLVMBuildICmp(g->b, LLVMIntEQ, col, i64c(g, 1), "");
  /* columns contiguous (A^T: a weight gradient's activations): 32 x 32
   * blocks through registers, whole rows of blocks and terms; the rest below */
  const int T = LK_GEMM_AMX_TILE;
  LLVMValueRef transposed = LLVMBuildAnd(g->b, LLVMBuildNot(g->b, contiguous, ""),
                                         LLVMBuildICmp(g->b, LLVMIntEQ, row, i64c(g, 1), ""), "");
  LLVMValueRef whole_k = LLVMBuildSelect(
      g->b, transposed, LLVMBuildNSWSub(g->b, kc, LLVMBuildSRem(g->b, kc, i64c(g, T), ""), ""),
      i64c(g, 0), "");
  LLVMValueRef whole_rows = LLVMBuildNSWSub(g->b, mc, LLVMBuildSRem(g->b, mc, i64c(g, T), ""), "");
  {
    gloop i0;
    gloop_begin(g, &i0, i64c(g, 0), LLVMBuildSelect(g->b, transposed, whole_rows, i64c(g, 0), ""));
    gloop p0;
    gloop_begin(g, &p0, i64c(g, 0), whole_k);
    LLVMValueRef v[32];
    LLVMValueRef all = lanes_below(g, 32, i64c(g, 32));
    for (int p = 0; p < T; p++)
      v[p] = load_i16x32(
          g,
          op_at(g, a,
                LLVMBuildNSWAdd(
                    g->b, i0.iv,
                    LLVMBuildNSWMul(g->b, LLVMBuildNSWAdd(g->b, p0.iv, i64c(g, p), ""), col, ""),
                    "")),
          all);
    lm_gemm_transpose_lanes(g, v, T);
    for (int r = 0; r < T; r++)
      store_op_vec(
          g, v[r],
          op_at(g, dst,
                LLVMBuildNSWAdd(
                    g->b,
                    LLVMBuildNSWMul(g->b, LLVMBuildNSWAdd(g->b, i0.iv, i64c(g, r), ""), kp, ""),
                    p0.iv, "")));
    gloop_end(g, &p0, i64c(g, T));
    gloop_end(g, &i0, i64c(g, T));
  }
  gloop i;
  gloop_begin(g, &i, i64c(g, 0), rows);
  LLVMValueRef inside = LLVMBuildICmp(g->b, LLVMIntSLT, i.iv, mc, "");
  LLVMValueRef line = op_at(g, a, LLVMBuildNSWMul(g->b, min_i64(g, i.iv, mc), row, ""));
  LLVMValueRef to = op_at(g, dst, LLVMBuildNSWMul(g->b, i.iv, kp, ""));
  LLVMBasicBlockRef vec_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "contiguous");
  LLVMBasicBlockRef other_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "other");
  LLVMBasicBlockRef next_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "next");
  LLVMBuildCondBr(g->b, contiguous, vec_bb, other_bb);
  LLVMPositionBuilderAtEnd(g->b, vec_bb);
  {
    gloop p;
    gloop_begin(g, &p, i64c(g, 0), kp);
    LLVMValueRef left =
        LLVMBuildSelect(g->b, inside, LLVMBuildNSWSub(g->b, kc, p.iv, ""), i64c(g, 0), "");
    LLVMValueRef v = load_i16x32(g, op_at(g, line, p.iv), lanes_below(g, 32, left));
    store_op_vec(g, v, op_at(g, to, p.iv));
    gloop_end(g, &p, i64c(g, 32));
    LLVMBuildBr(g->b, next_bb);
  }
  LLVMPositionBuilderAtEnd(g->b, other_bb);
  {
    LLVMValueRef done_k = LLVMBuildSelect(
        g->b, LLVMBuildICmp(g->b, LLVMIntSLT, i.iv, whole_rows, ""), whole_k, i64c(g, 0), "");
    gloop p;
    gloop_begin(g, &p, done_k, kp);
    LLVMValueRef ok = LLVMBuildAnd(g->b, inside, LLVMBuildICmp(g->b, LLVMIntSLT, p.iv, kc, ""), "");
    copy_op_or_zero(g, ok, op_at(g, line, LLVMBuildNSWMul(g->b, p.iv, col, "")),
                    op_at(g, to, p.iv));
    gloop_end(g, &p, i64c(g, 1));
    LLVMBuildBr(g->b, next_bb);
  }
  LLVMPositionBuilderAtEnd(g->b, next_bb);
  gloop_end(g, &i, i64c(g, 1));
  LLVMBuildRetVoid(g->b);
  return fn;
}

/* amx_pack_b(kc, nc, b, row, col, dst): B's panel as slivers of term pairs. */
LLVMValueRef lm_gemm_gen_amx_pack_b(gemm_cg *g, const char *symbol) {
  char name[64];
  snprintf(name, sizeof name, "%s.amx_pack_b", symbol);
  LLVMTypeRef params[6] = {g->t_i64, g->t_i64, g->op_tp, g->t_i64, g->t_i64, g->op_tp};
  LLVMValueRef fn = begin_function(g, name, params, 6, true);
  LLVMValueRef kc = LLVMGetParam(fn, 0), nc = LLVMGetParam(fn, 1), b = LLVMGetParam(fn, 2),
               row = LLVMGetParam(fn, 3), col = LLVMGetParam(fn, 4), dst = LLVMGetParam(fn, 5);
  const int NR = LK_GEMM_AMX_TILE;
  LLVMValueRef kp = lm_gemm_round_up_iv(g, kc, LK_GEMM_AMX_K);
  LLVMValueRef pairs = LLVMBuildSDiv(g->b, kp, i64c(g, 2), "");
  LLVMValueRef rows_contiguous = LLVMBuildICmp(g->b, LLVMIntEQ, col, i64c(g, 1), "");
  gloop js;
  gloop_begin(g, &js, i64c(g, 0), nc);
  LLVMValueRef width = min_i64(g, i64c(g, NR), LLVMBuildNSWSub(g->b, nc, js.iv, ""));
  LLVMValueRef sliver = op_at(g, dst, LLVMBuildNSWMul(g->b, js.iv, kp, ""));
  LLVMValueRef src = op_at(g, b, LLVMBuildNSWMul(g->b, js.iv, col, ""));
  LLVMBasicBlockRef rows_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "rows");
  LLVMBasicBlockRef other_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "other");
  LLVMBasicBlockRef next_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "next");
  LLVMBuildCondBr(g->b, rows_contiguous, rows_bb, other_bb);

  /* rows of B contiguous: two rows' 32 values interleaved into one pair row */
  LLVMPositionBuilderAtEnd(g->b, rows_bb);
  {
    gloop q;
    gloop_begin(g, &q, i64c(g, 0), pairs);
    LLVMValueRef v[2];
    for (int h = 0; h < 2; h++) {
      LLVMValueRef p =
          LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, q.iv, i64c(g, 2), ""), i64c(g, h), "");
      LLVMValueRef limit =
          LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, p, kc, ""), width, i64c(g, 0), "");
      LLVMValueRef from = op_at(g, src, LLVMBuildNSWMul(g->b, min_i64(g, p, kc), row, ""));
      v[h] = load_i16x32(g, from, lanes_below(g, 32, limit));
    }
    LLVMValueRef idx[64];
    for (int l = 0; l < 64; l++)
      idx[l] = LLVMConstInt(g->t_i32, (unsigned long long)((l % 2) * 32 + l / 2), 0);
    LLVMValueRef pair = LLVMBuildShuffleVector(g->b, v[0], v[1], LLVMConstVector(idx, 64), "");
    store_op_vec(g, pair, op_at(g, sliver, LLVMBuildNSWMul(g->b, q.iv, i64c(g, 2 * NR), "")));
    gloop_end(g, &q, i64c(g, 1));
    LLVMBuildBr(g->b, next_bb);
  }

  /* columns contiguous (a weight [N, K] read as W^T): each column's pairs
   * are 32-bit words, 16 columns x 16 pairs transposed through registers,
   * for whole slivers and whole 32 terms; the rest one value at a time */
  LLVMPositionBuilderAtEnd(g->b, other_bb);
  LLVMValueRef vector_k = LLVMBuildSelect(
      g->b,
      LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, row, i64c(g, 1), ""),
                   LLVMBuildICmp(g->b, LLVMIntEQ, width, i64c(g, NR), ""), ""),
      LLVMBuildNSWSub(g->b, kc, LLVMBuildSRem(g->b, kc, i64c(g, LK_GEMM_AMX_K), ""), ""),
      i64c(g, 0), "");
  {
    LLVMTypeRef w16 = LLVMVectorType(g->t_i32, 16), w16p = LLVMPointerType(w16, 0);
    gloop p0;
    gloop_begin(g, &p0, i64c(g, 0), vector_k);
    for (int half = 0; half < 2; half++) {
      LLVMValueRef v[16];
      for (int j = 0; j < 16; j++) {
        LLVMValueRef from =
            op_at(g, src,
                  LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, i64c(g, half * 16 + j), col, ""),
                                  p0.iv, ""));
        v[j] = load_aligned(g, w16, LLVMBuildBitCast(g->b, from, w16p, ""), 2);
        /* 32 columns are 32 streams, more than the CPU's prefetchers follow */
        LLVMValueRef ahead = i8_ptr(g, op_at(g, from, i64c(g, 4 * LK_GEMM_AMX_K)));
        LLVMValueRef pf[4] = {ahead, LLVMConstInt(g->t_i32, 0, 0), LLVMConstInt(g->t_i32, 3, 0),
                              LLVMConstInt(g->t_i32, 1, 0)};
        LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(g->ctx), 0);
        intrinsic(g, "llvm.prefetch", &i8p, 1, pf, 4);
      }
      lm_gemm_transpose_lanes(g, v, 16);
      LLVMValueRef pair0 = LLVMBuildSDiv(g->b, p0.iv, i64c(g, 2), "");
      for (int q = 0; q < 16; q++) {
        LLVMValueRef to = op_at(
            g, sliver,
            LLVMBuildNSWAdd(g->b,
                            LLVMBuildNSWMul(g->b, LLVMBuildNSWAdd(g->b, pair0, i64c(g, q), ""),
                                            i64c(g, 2 * NR), ""),
                            i64c(g, half * 32), ""));
        store_aligned(g, v[q], LLVMBuildBitCast(g->b, to, w16p, ""), 2);
      }
    }
    gloop_end(g, &p0, i64c(g, LK_GEMM_AMX_K));
  }
  {
    gloop j;
    gloop_begin(g, &j, i64c(g, 0), i64c(g, NR));
    LLVMValueRef jin = LLVMBuildICmp(g->b, LLVMIntSLT, j.iv, width, "");
    LLVMValueRef line = op_at(g, src, LLVMBuildNSWMul(g->b, min_i64(g, j.iv, width), col, ""));
    gloop p;
    gloop_begin(g, &p, vector_k, kp);
    LLVMValueRef slot =
        op_at(g, sliver,
              LLVMBuildNSWAdd(g->b,
                              LLVMBuildNSWMul(g->b, LLVMBuildSDiv(g->b, p.iv, i64c(g, 2), ""),
                                              i64c(g, 2 * NR), ""),
                              LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, j.iv, i64c(g, 2), ""),
                                              LLVMBuildSRem(g->b, p.iv, i64c(g, 2), ""), ""),
                              ""));
    copy_op_or_zero(g, LLVMBuildAnd(g->b, jin, LLVMBuildICmp(g->b, LLVMIntSLT, p.iv, kc, ""), ""),
                    op_at(g, line, LLVMBuildNSWMul(g->b, p.iv, row, "")), slot);
    gloop_end(g, &p, i64c(g, 1));
    gloop_end(g, &j, i64c(g, 1));
    LLVMBuildBr(g->b, next_bb);
  }
  LLVMPositionBuilderAtEnd(g->b, next_bb);
  gloop_end(g, &js, i64c(g, NR));
  LLVMBuildRetVoid(g->b);
  return fn;
}

/* C's mr x nr block at c (row stride ldc) to or from the 32 x 32 block on the
 * stack (rows of 32); to it, zeros past mr x nr. */
static void amx_edge_copy(gemm_cg *g, LLVMValueRef c, LLVMValueRef ldc, LLVMValueRef block,
                          LLVMValueRef mr, LLVMValueRef nr, bool to_block) {
  gloop i;
  gloop_begin(g, &i, i64c(g, 0), i64c(g, LK_GEMM_AMX_TILE));
  LLVMValueRef brow = at(g, block, LLVMBuildNSWMul(g->b, i.iv, i64c(g, LK_GEMM_AMX_TILE), ""));
  LLVMValueRef crow = at(g, c, LLVMBuildNSWMul(g->b, min_i64(g, i.iv, mr), ldc, ""));
  LLVMValueRef row_in = LLVMBuildICmp(g->b, LLVMIntSLT, i.iv, mr, "");
  gloop j;
  gloop_begin(g, &j, i64c(g, 0), i64c(g, LK_GEMM_AMX_TILE));
  LLVMValueRef in = LLVMBuildAnd(g->b, row_in, LLVMBuildICmp(g->b, LLVMIntSLT, j.iv, nr, ""), "");
  if (to_block) {
    store_aligned(g, LLVMConstNull(g->t), at(g, brow, j.iv), 4);
    LLVMBasicBlockRef join = if_begin(g, in);
    store_aligned(g, load_aligned(g, g->t, at(g, crow, j.iv), 4), at(g, brow, j.iv), 4);
    if_end(g, join);
  } else {
    LLVMBasicBlockRef join = if_begin(g, in);
    store_aligned(g, load_aligned(g, g->t, at(g, brow, j.iv), 4), at(g, crow, j.iv), 4);
    if_end(g, join);
  }
  gloop_end(g, &j, i64c(g, 1));
  gloop_end(g, &i, i64c(g, 1));
}

/* A paired tile's microkernel, (kp, pa, pb, c, ldc, mr, nr, load_c): C's
 * mr x nr block = A's packed rows @ B's packed sliver, plus C's old values
 * when load_c; its parameters in p. */
LLVMValueRef lm_gemm_begin_paired_micro(gemm_cg *g, const char *symbol, const char *kind,
                                        LLVMValueRef p[8]) {
  char name[64];
  snprintf(name, sizeof name, "%s.%s", symbol, kind);
  LLVMTypeRef params[8] = {g->t_i64, g->op_tp, g->op_tp, g->tp,
                           g->t_i64, g->t_i64, g->t_i64, g->t_i1};
  LLVMValueRef fn = begin_function(g, name, params, 8, true);
  for (unsigned i = 0; i < 8; i++) p[i] = LLVMGetParam(fn, i);
  return fn;
}

/* amx_micro: C's mr x nr block (<= 32 x 32) from A's 32 packed rows. */
LLVMValueRef lm_gemm_gen_amx_micro(gemm_cg *g, const char *symbol) {
  LLVMValueRef p[8];
  LLVMValueRef fn = lm_gemm_begin_paired_micro(g, symbol, "amx_micro", p);
  LLVMValueRef kp = p[0], pa = p[1], pb = p[2], c = p[3], ldc = p[4], mr = p[5], nr = p[6],
               load_c = p[7];
  const int T = LK_GEMM_AMX_TILE, H = T / 2;
  LLVMTypeRef amx = LLVMX86AMXTypeInContext(g->ctx);
  LLVMValueRef block =
      LLVMBuildArrayAlloca(g->entry, g->t, i64c(g, T * T), "edge"); /* float[32][32] */
  LLVMSetAlignment(block, 64);
  block = LLVMBuildBitCast(g->entry, block, g->tp, "");
  LLVMValueRef whole = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, mr, i64c(g, T), ""),
                                    LLVMBuildICmp(g->b, LLVMIntEQ, nr, i64c(g, T), ""), "");
  LLVMValueRef ldc_bytes = LLVMBuildNSWMul(g->b, ldc, i64c(g, 4), "");
  /* where the sums start from and end: C itself, or the block on the stack */
  LLVMBasicBlockRef edge_in = LLVMAppendBasicBlockInContext(g->ctx, fn, "edge_in");
  LLVMBasicBlockRef place = LLVMAppendBasicBlockInContext(g->ctx, fn, "place");
  LLVMBuildCondBr(g->b, LLVMBuildAnd(g->b, LLVMBuildNot(g->b, whole, ""), load_c, ""), edge_in,
                  place);
  LLVMPositionBuilderAtEnd(g->b, edge_in);
  amx_edge_copy(g, c, ldc, block, mr, nr, true);
  LLVMBuildBr(g->b, place);
  LLVMPositionBuilderAtEnd(g->b, place);
  LLVMValueRef base = LLVMBuildSelect(g->b, whole, c, block, "");
  LLVMValueRef stride = LLVMBuildSelect(g->b, whole, ldc_bytes, i64c(g, T * 4), "");
  LLVMValueRef tile_at[4];
  for (int t = 0; t < 4; t++)
    tile_at[t] = i8_ptr(
        g,
        at(g, base,
           LLVMBuildNSWAdd(g->b,
                           LLVMBuildNSWMul(g->b, i64c(g, (t / 2) * H),
                                           LLVMBuildSelect(g->b, whole, ldc, i64c(g, T), ""), ""),
                           i64c(g, (t % 2) * H), "")));
  LLVMBasicBlockRef load_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "load_c");
  LLVMBasicBlockRef zero_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "zero_c");
  LLVMBasicBlockRef header = LLVMAppendBasicBlockInContext(g->ctx, fn, "terms");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, fn, "step");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, fn, "sums");
  LLVMBuildCondBr(g->b, load_c, load_bb, zero_bb);
  LLVMValueRef loaded[4], zeros[4];
  LLVMPositionBuilderAtEnd(g->b, load_bb);
  for (int t = 0; t < 4; t++) {
    LLVMValueRef args[4] = {i16c(g, H), i16c(g, H * 4), tile_at[t], stride};
    loaded[t] = amx_call(g, "llvm.x86.tileloadd64.internal", args, 4);
  }
  LLVMBuildBr(g->b, header);
  LLVMPositionBuilderAtEnd(g->b, zero_bb);
  for (int t = 0; t < 4; t++) {
    LLVMValueRef args[2] = {i16c(g, H), i16c(g, H * 4)};
    zeros[t] = amx_call(g, "llvm.x86.tilezero.internal", args, 2);
  }
  LLVMBuildBr(g->b, header);

  LLVMPositionBuilderAtEnd(g->b, header);
  LLVMValueRef q = LLVMBuildPhi(g->b, g->t_i64, "q"), sums[4];
  for (int t = 0; t < 4; t++) sums[t] = LLVMBuildPhi(g->b, amx, "");
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, q, kp, ""), body, exit);
  LLVMPositionBuilderAtEnd(g->b, body);
  LLVMValueRef at_[2], bt[2], kp_bytes = LLVMBuildNSWMul(g->b, kp, i64c(g, 2), "");
  for (int h = 0; h < 2; h++) {
    LLVMValueRef pa_h =
        op_at(g, pa, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, i64c(g, h * H), kp, ""), q, ""));
    LLVMValueRef a_args[4] = {i16c(g, H), i16c(g, 64), i8_ptr(g, pa_h), kp_bytes};
    at_[h] = amx_call(g, "llvm.x86.tileloadd64.internal", a_args, 4);
    /* term pairs q / 2 .. q / 2 + 15 of the sliver, columns h * 16 .. */
    LLVMValueRef pb_h = op_at(
        g, pb, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, q, i64c(g, T), ""), i64c(g, h * T), ""));
    LLVMValueRef b_args[4] = {i16c(g, H), i16c(g, 64), i8_ptr(g, pb_h), i64c(g, 4 * T)};
    bt[h] = amx_call(g, "llvm.x86.tileloadd64.internal", b_args, 4);
  }
  LLVMValueRef next[4];
  for (int t = 0; t < 4; t++) {
    LLVMValueRef args[6] = {i16c(g, H), i16c(g, H * 4), i16c(g, 64),
                            sums[t],    at_[t / 2],     bt[t % 2]};
    next[t] = amx_call(g, "llvm.x86.tdpbf16ps.internal", args, 6);
  }
  LLVMValueRef q_next = LLVMBuildNSWAdd(g->b, q, i64c(g, LK_GEMM_AMX_K), "");
  LLVMBuildBr(g->b, header);
  LLVMValueRef q_in[3] = {i64c(g, 0), i64c(g, 0), q_next};
  LLVMBasicBlockRef from[3] = {load_bb, zero_bb, body};
  LLVMAddIncoming(q, q_in, from, 3);
  for (int t = 0; t < 4; t++) {
    LLVMValueRef in[3] = {loaded[t], zeros[t], next[t]};
    LLVMAddIncoming(sums[t], in, from, 3);
  }

  LLVMPositionBuilderAtEnd(g->b, exit);
  for (int t = 0; t < 4; t++) {
    LLVMValueRef args[5] = {i16c(g, H), i16c(g, H * 4), tile_at[t], stride, sums[t]};
    amx_call(g, "llvm.x86.tilestored64.internal", args, 5);
  }
  LLVMBasicBlockRef edge_out = LLVMAppendBasicBlockInContext(g->ctx, fn, "edge_out");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, fn, "done");
  LLVMBuildCondBr(g->b, whole, done, edge_out);
  LLVMPositionBuilderAtEnd(g->b, edge_out);
  amx_edge_copy(g, c, ldc, block, mr, nr, false);
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
  LLVMBuildRetVoid(g->b);
  return fn;
}
