/*
 * The GEMM blocks' AVX512-BF16 path (pairs of BF16 terms, F32 sums in
 * vector registers), and the loops of both paired tiles (this and AMX's):
 * a file of its own as gemm_amx.c is, whose packed layouts it reads.
 */
#include "backends/llvm/gemm_internal.h"

/* ------------------------------------------------------------------ AVX512-BF16 pairs */

/*
 * Without AMX, AVX512-BF16's dot product of term pairs (vdpbf16ps: each F32
 * lane += a0 * b0 + a1 * b1) reads AMX's packed layouts as they are: B's term
 * pair q of a 32-column sliver is two vectors of 16 columns' pairs, and A's
 * row i holds its pair q as one 32-bit word at pa + i * kp + 2q, broadcast to
 * every lane. The tile is MR rows x 32 columns of F32 sums in registers, as
 * the F32 microkernel's, and shares its stores.
 *
 * pairs_micro: C's mr x nr block (<= MR x 32) from A's MR packed rows.
 */
LLVMValueRef lm_gemm_gen_pairs_micro(gemm_cg *g, const char *symbol) {
  LLVMValueRef p[8];
  LLVMValueRef fn = lm_gemm_begin_paired_micro(g, symbol, "pairs_micro", p);
  for (unsigned i = 1; i <= 3; i++) add_attr(g, fn, i + 1, "noalias");
  LLVMValueRef kp = p[0], pa = p[1], pb = p[2], c = p[3], ldc = p[4], mr = p[5], nr = p[6],
               load_c = p[7];
  int MR = g->d->mr, nv = g->nv, w = g->w;
  LLVMTypeRef words = LLVMVectorType(g->t_i32, (unsigned)w);
  LLVMTypeRef word_p = LLVMPointerType(g->t_i32, 0), words_p = LLVMPointerType(words, 0);
  LLVMValueRef sums[32 * 2]; /* lk_gemm_check: MR <= 32; 32 columns of F32 are 2 vectors */
  for (int s = 0; s < MR * nv; s++) sums[s] = new_var(g, g->vec, LLVMConstNull(g->vec));

  gloop q;
  gloop_begin(g, &q, i64c(g, 0), LLVMBuildSDiv(g->b, kp, i64c(g, 2), ""));
  {
    LLVMValueRef pair_row = op_at(g, pb, LLVMBuildNSWMul(g->b, q.iv, i64c(g, 2 * g->d->nr), ""));
    LLVMValueRef bv[2];
    for (int v = 0; v < nv; v++)
      bv[v] = load_aligned(
          g, words, LLVMBuildBitCast(g->b, op_at(g, pair_row, i64c(g, 2 * v * w)), words_p, ""), 4);
    LLVMValueRef term = LLVMBuildNSWMul(g->b, q.iv, i64c(g, 2), "");
    for (int r = 0; r < MR; r++) {
      LLVMValueRef x = load_aligned(
          g, g->t_i32,
          LLVMBuildBitCast(
              g->b,
              op_at(g, pa,
                    LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, i64c(g, r), kp, ""), term, "")),
              word_p, ""),
          4);
      LLVMValueRef one =
          LLVMBuildInsertElement(g->b, LLVMGetUndef(words), x, LLVMConstInt(g->t_i32, 0, 0), "");
      LLVMValueRef splat =
          LLVMBuildShuffleVector(g->b, one, LLVMGetUndef(words), LLVMConstNull(words), "");
      for (int v = 0; v < nv; v++) {
        LLVMValueRef acc = LLVMBuildLoad2(g->b, g->vec, sums[r * nv + v], "");
        LLVMValueRef args[3] = {acc, splat, bv[v]};
        LLVMBuildStore(g->b, intrinsic(g, "llvm.x86.avx512bf16.dpbf16ps.512", NULL, 0, args, 3),
                       sums[r * nv + v]);
      }
    }
  }
  gloop_end(g, &q, i64c(g, 1));
  lm_gemm_store_tile(g, sums, c, ldc, mr, nr, load_c);
  return fn;
}

/* The loops around a paired tile's microkernel (AMX's or the pair
 * products'): the five of the F32 GEMM, with panels padded to whole steps of
 * LK_GEMM_AMX_K terms. */
void lm_gemm_gen_paired_entry(gemm_cg *g, const char *symbol, LLVMValueRef pack_a,
                              LLVMValueRef pack_b, LLVMValueRef micro) {
  entry_args e;
  lm_gemm_begin_entry(g, symbol, g->op_tp, &e);
  LLVMValueRef m = e.m, n = e.n, k = e.k, a = e.a, a_row = e.a_row, a_col = e.a_col, b = e.b,
               b_row = e.b_row, b_col = e.b_col, c = e.c, ldc = e.ldc, mc = e.mc, kc = e.kc,
               nc = e.nc, pack = e.pack, accumulate = e.accumulate;
  const int MR = g->d->mr, NR = g->d->nr;
  LLVMValueRef kcp = lm_gemm_round_up_iv(g, kc, LK_GEMM_AMX_K);
  LLVMValueRef pb = pack,
               pa = op_at(g, pack, LLVMBuildNSWMul(g->b, lm_gemm_round_up_iv(g, nc, NR), kcp, ""));
  gloop jc;
  gloop_begin(g, &jc, i64c(g, 0), n);
  LLVMValueRef ncur = min_i64(g, nc, LLVMBuildNSWSub(g->b, n, jc.iv, ""));
  {
    gloop pc;
    gloop_begin(g, &pc, i64c(g, 0), k);
    LLVMValueRef kcur = min_i64(g, kc, LLVMBuildNSWSub(g->b, k, pc.iv, ""));
    LLVMValueRef kp = lm_gemm_round_up_iv(g, kcur, LK_GEMM_AMX_K);
    LLVMValueRef pb_args[6] = {kcur,  ncur,  op_at2(g, b, pc.iv, b_row, jc.iv, b_col),
                               b_row, b_col, pb};
    call(g, pack_b, pb_args, 6);
    LLVMValueRef load_c =
        LLVMBuildOr(g->b, accumulate, LLVMBuildICmp(g->b, LLVMIntSGT, pc.iv, i64c(g, 0), ""), "");
    gloop ic;
    gloop_begin(g, &ic, i64c(g, 0), m);
    {
      LLVMValueRef mcur = min_i64(g, mc, LLVMBuildNSWSub(g->b, m, ic.iv, ""));
      LLVMValueRef pa_args[6] = {mcur,  kcur,  op_at2(g, a, ic.iv, a_row, pc.iv, a_col),
                                 a_row, a_col, pa};
      call(g, pack_a, pa_args, 6);
      LLVMValueRef cblock =
          at(g, c, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, ic.iv, ldc, ""), jc.iv, ""));
      gloop jr;
      gloop_begin(g, &jr, i64c(g, 0), ncur);
      LLVMValueRef nr = min_i64(g, i64c(g, NR), LLVMBuildNSWSub(g->b, ncur, jr.iv, ""));
      LLVMValueRef bsliver = op_at(g, pb, LLVMBuildNSWMul(g->b, jr.iv, kp, ""));
      gloop ir;
      gloop_begin(g, &ir, i64c(g, 0), mcur);
      LLVMValueRef mr = min_i64(g, i64c(g, MR), LLVMBuildNSWSub(g->b, mcur, ir.iv, ""));
      LLVMValueRef arows = op_at(g, pa, LLVMBuildNSWMul(g->b, ir.iv, kp, ""));
      LLVMValueRef ctile =
          at(g, cblock, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, ir.iv, ldc, ""), jr.iv, ""));
      LLVMValueRef m_args[8] = {kp, arows, bsliver, ctile, ldc, mr, nr, load_c};
      call(g, micro, m_args, 8);
      gloop_end(g, &ir, i64c(g, MR));
      gloop_end(g, &jr, i64c(g, NR));
    }
    gloop_end(g, &ic, mc);
    gloop_end(g, &pc, kc);
  }
  gloop_end(g, &jc, nc);
  LLVMBuildRetVoid(g->b);
}
