/*
 * GEMM blocks (ir/kernel.h's lk_gemm) as LLVM IR, in BLIS's design: the five
 * loops around a register-blocked microkernel, with the operands packed so
 * that the microkernel reads both contiguously.
 *
 *   for jc over n by nc               a panel of B, kc x nc (L3)
 *     for pc over k by kc
 *       pack B[pc.., jc..]            slivers of NR columns, kc x NR each
 *       for ic over m by mc           a block of A, mc x kc (L2)
 *         pack A[ic.., pc..]          slivers of MR rows, kc x MR each
 *         for jr over nc by NR        one B sliver (L1) ...
 *           for ir over mc by MR      ... meets every A sliver of the block
 *             microkernel             MR x NR sums in vector registers
 *
 * C is row-major, so the vectors run along its rows: the microkernel keeps
 * MR x (NR / W) vectors of sums, and for each of the kc terms loads NR / W
 * vectors of B and broadcasts MR values of A (one FMA per vector and row).
 * Slivers at the edges are padded with zeros when packed; only the tile's
 * stores are masked. When the caller says so (lk_gemm_args.b_in_place) and
 * B's rows are contiguous, B's whole slivers are read where they are: for a
 * product of few rows, packing B would copy as much as the microkernels read.
 * B's rows may also start where a table says (lk_gemm_args.b_rows): a
 * convolution's terms read straight from the image. Nothing here names an
 * instruction set: LLVM selects the FMAs, broadcasts and masked stores for the target.
 *
 * This file holds the microkernel, the loops and the API; the parts with
 * reasons of their own are files of their own, so that each reads alone:
 * packing (gemm_pack.c), the paths without packing for few rows
 * (gemm_few_rows.c), AMX (gemm_amx.c) and AVX512-BF16 (gemm_bf16.c), with
 * what they share in gemm_internal.h.
 */
#include "backends/llvm/gemm_internal.h"

/* ------------------------------------------------------------------ microkernel */

/* The tile's row r, vector v: sums, plus C's old values when load_c, stored
 * under mask (NULL: every lane). */
void lm_gemm_store_tile_vector(gemm_cg *g, LLVMValueRef sum, LLVMValueRef dst, LLVMValueRef mask,
                               LLVMValueRef load_c) {
  LLVMValueRef p = vec_ptr(g, dst);
  LLVMTypeRef types[2] = {g->vec, LLVMPointerType(g->vec, 0)};
  LLVMValueRef align = LLVMConstInt(g->t_i32, elem_align(g), 0);
  LLVMValueRef old;
  if (mask) {
    LLVMValueRef args[4] = {p, align, mask, LLVMConstNull(g->vec)};
    old = intrinsic(g, "llvm.masked.load", types, 2, args, 4);
  } else {
    old = load_aligned(g, g->vec, p, elem_align(g));
  }
  LLVMValueRef v = LLVMBuildSelect(g->b, load_c, LLVMBuildFAdd(g->b, sum, old, ""), sum, "");
  if (mask) {
    LLVMValueRef args[4] = {v, p, align, mask};
    intrinsic(g, "llvm.masked.store", types, 2, args, 4);
  } else {
    store_aligned(g, v, p, elem_align(g));
  }
}

/* The microkernel's MR x (nv vectors) sums (allocas) to C's mr x nr tile at
 * c, added to C's old values when load_c; returns from the function. */
void lm_gemm_store_tile(gemm_cg *g, LLVMValueRef *sums, LLVMValueRef c, LLVMValueRef ldc,
                        LLVMValueRef mr, LLVMValueRef nr, LLVMValueRef load_c) {
  int MR = g->d->mr, NR = g->d->nr, nv = g->nv, w = g->w;
  LLVMValueRef whole = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, mr, i64c(g, MR), ""),
                                    LLVMBuildICmp(g->b, LLVMIntEQ, nr, i64c(g, NR), ""), "");
  LLVMBasicBlockRef whole_bb = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "whole");
  LLVMBasicBlockRef edge_bb = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "edge");
  LLVMBuildCondBr(g->b, whole, whole_bb, edge_bb);

  LLVMPositionBuilderAtEnd(g->b, whole_bb);
  for (int r = 0; r < MR; r++) {
    LLVMValueRef crow = at(g, c, LLVMBuildNSWMul(g->b, i64c(g, r), ldc, ""));
    for (int v = 0; v < nv; v++)
      lm_gemm_store_tile_vector(g, LLVMBuildLoad2(g->b, g->vec, sums[r * nv + v], ""),
                                at(g, crow, i64c(g, v * w)), NULL, load_c);
  }
  LLVMBuildRetVoid(g->b);

  LLVMPositionBuilderAtEnd(g->b, edge_bb);
  LLVMValueRef mask[8];
  for (int v = 0; v < nv; v++)
    mask[v] = lanes_below(g, w, LLVMBuildNSWSub(g->b, nr, i64c(g, v * w), ""));
  for (int r = 0; r < MR; r++) {
    LLVMBasicBlockRef join = if_begin(g, LLVMBuildICmp(g->b, LLVMIntSLT, i64c(g, r), mr, ""));
    LLVMValueRef crow = at(g, c, LLVMBuildNSWMul(g->b, i64c(g, r), ldc, ""));
    for (int v = 0; v < nv; v++)
      lm_gemm_store_tile_vector(g, LLVMBuildLoad2(g->b, g->vec, sums[r * nv + v], ""),
                                at(g, crow, i64c(g, v * w)), mask[v], load_c);
    if_end(g, join);
  }
  LLVMBuildRetVoid(g->b);
}

/*
 * micro(kc, pa, pb, c, ldc, mr, nr, load_c, pb_row): C's mr x nr tile (mr <=
 * MR, nr <= NR) = A sliver @ B sliver, plus the tile's old values when
 * load_c. The B sliver's term p is at pb + p * NR when packed, at pb + p *
 * pb_row (B's row stride) in the in_place variant. C is read only where it is written, so a
 * tile past the matrix's edge never touches memory outside it.
 */
static LLVMValueRef gen_micro(gemm_cg *g, const char *symbol, bool in_place) {
  char name[64];
  snprintf(name, sizeof name, "%s.micro%s", symbol, in_place ? "_in_place" : "");
  LLVMTypeRef params[9] = {g->t_i64, g->tp,    g->tp,   g->tp,   g->t_i64,
                           g->t_i64, g->t_i64, g->t_i1, g->t_i64};
  LLVMValueRef fn = begin_function(g, name, params, 9, true);
  for (unsigned i = 1; i <= 3; i++) add_attr(g, fn, i + 1, "noalias");
  add_attr(g, fn, LLVMAttributeFunctionIndex, "alwaysinline");
  LLVMValueRef kc = LLVMGetParam(fn, 0), pa = LLVMGetParam(fn, 1), pb = LLVMGetParam(fn, 2),
               c = LLVMGetParam(fn, 3), ldc = LLVMGetParam(fn, 4), mr = LLVMGetParam(fn, 5),
               nr = LLVMGetParam(fn, 6), load_c = LLVMGetParam(fn, 7), pb_row = LLVMGetParam(fn, 8);
  int MR = g->d->mr, NR = g->d->nr, nv = g->nv, w = g->w;
  LLVMValueRef sums[32 * 8]; /* lk_gemm_check: MR <= 32; nr / w <= 8 */
  _Static_assert(32 <= 8 * 64, "transpose_lines: MR rows in at most 8 blocks");
  for (int s = 0; s < MR * nv; s++) sums[s] = new_var(g, g->vec, LLVMConstNull(g->vec));

  gloop p;
  gloop_begin(g, &p, i64c(g, 0), kc);
  {
    /* packed, the stride is a constant the loads fold in */
    LLVMValueRef brow = at(g, pb, LLVMBuildNSWMul(g->b, p.iv, in_place ? pb_row : i64c(g, NR), ""));
    LLVMValueRef acol = at(g, pa, LLVMBuildNSWMul(g->b, p.iv, i64c(g, MR), ""));
    LLVMValueRef bv[8];
    for (int v = 0; v < nv; v++)
      bv[v] = load_aligned(g, g->vec, vec_ptr(g, at(g, brow, i64c(g, v * w))), elem_align(g));
    LLVMTypeRef i32v = LLVMVectorType(g->t_i32, (unsigned)w);
    for (int r = 0; r < MR; r++) {
      LLVMValueRef x = load_aligned(g, g->t, at(g, acol, i64c(g, r)), elem_align(g));
      LLVMValueRef one =
          LLVMBuildInsertElement(g->b, LLVMGetUndef(g->vec), x, LLVMConstInt(g->t_i32, 0, 0), "");
      LLVMValueRef splat =
          LLVMBuildShuffleVector(g->b, one, LLVMGetUndef(g->vec), LLVMConstNull(i32v), "");
      for (int v = 0; v < nv; v++) {
        LLVMValueRef acc = LLVMBuildLoad2(g->b, g->vec, sums[r * nv + v], "");
        LLVMValueRef args[3] = {splat, bv[v], acc};
        LLVMBuildStore(g->b, intrinsic(g, "llvm.fma", &g->vec, 1, args, 3), sums[r * nv + v]);
      }
    }
  }
  gloop_end(g, &p, i64c(g, 1));

  lm_gemm_store_tile(g, sums, c, ldc, mr, nr, load_c);
  return fn;
}

/* ------------------------------------------------------------------ the loops */

enum {
  ARG_M,
  ARG_N,
  ARG_K,
  ARG_A,
  ARG_A_ROW,
  ARG_A_COL,
  ARG_B,
  ARG_B_ROW,
  ARG_B_COL,
  ARG_C,
  ARG_LDC,
  ARG_ACCUMULATE,
  ARG_MC,
  ARG_KC,
  ARG_NC,
  ARG_PACK,
  ARG_B_IN_PLACE,
  ARG_B_ROWS,
  ARG_COUNT
};

_Static_assert(sizeof(lk_gemm_args) == ARG_COUNT * 8, "lk_gemm_args: every field 8 bytes");

static LLVMValueRef arg_i64(gemm_cg *g, LLVMValueRef args, int field) {
  LLVMValueRef i = i64c(g, field);
  return load_aligned(g, g->t_i64, LLVMBuildInBoundsGEP2(g->b, g->t_i64, args, &i, 1, ""), 8);
}

static LLVMValueRef arg_ptr(gemm_cg *g, LLVMValueRef args, int field, LLVMTypeRef type) {
  return LLVMBuildIntToPtr(g->b, arg_i64(g, args, field), type, "");
}

/* What the loops over one block's slivers read. */
typedef struct sliver_operands {
  LLVMValueRef kcur, mcur, ncur; /* the block's terms, rows, columns */
  LLVMValueRef pa, pb;           /* the packed block of A and panel of B */
  LLVMValueRef bsrc, b_row;      /* B's block where it is, and its row stride */
  LLVMValueRef cblock, ldc, load_c;
} sliver_operands;

/* for jr over the block's columns by NR, for ir over its rows by MR: the
 * microkernel. With micro_in_place, B's whole slivers are read where they
 * are (a last, partial one was packed into the panel's first sliver). */
static void gen_slivers(gemm_cg *g, const sliver_operands *o, LLVMValueRef micro,
                        LLVMValueRef micro_in_place) {
  int MR = g->d->mr, NR = g->d->nr;
  gloop jr;
  gloop_begin(g, &jr, i64c(g, 0), o->ncur);
  LLVMValueRef nr = min_i64(g, i64c(g, NR), LLVMBuildNSWSub(g->b, o->ncur, jr.iv, ""));
  LLVMValueRef whole = LLVMBuildICmp(g->b, LLVMIntEQ, nr, i64c(g, NR), "");
  LLVMValueRef packed =
      micro_in_place ? o->pb : at(g, o->pb, LLVMBuildNSWMul(g->b, jr.iv, o->kcur, ""));
  LLVMValueRef bsliver = packed;
  if (micro_in_place) bsliver = LLVMBuildSelect(g->b, whole, at(g, o->bsrc, jr.iv), packed, "");
  gloop ir;
  gloop_begin(g, &ir, i64c(g, 0), o->mcur);
  LLVMValueRef mr = min_i64(g, i64c(g, MR), LLVMBuildNSWSub(g->b, o->mcur, ir.iv, ""));
  LLVMValueRef asliver = at(g, o->pa, LLVMBuildNSWMul(g->b, ir.iv, o->kcur, ""));
  LLVMValueRef ctile =
      at(g, o->cblock, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, ir.iv, o->ldc, ""), jr.iv, ""));
  LLVMValueRef m_args[9] = {o->kcur, asliver, bsliver, ctile, o->ldc, mr, nr, o->load_c, o->b_row};
  if (micro_in_place) {
    LLVMValueRef fn = g->fn;
    LLVMBasicBlockRef in_place_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "sliver_in_place");
    LLVMBasicBlockRef packed_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "sliver_packed");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, fn, "sliver_done");
    LLVMBuildCondBr(g->b, whole, in_place_bb, packed_bb);
    LLVMPositionBuilderAtEnd(g->b, in_place_bb);
    call(g, micro_in_place, m_args, 9);
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, packed_bb);
    call(g, micro, m_args, 9);
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, done);
  } else {
    call(g, micro, m_args, 9);
  }
  gloop_end(g, &ir, i64c(g, MR));
  gloop_end(g, &jr, i64c(g, NR));
}

/* The exported block function `symbol` with its arguments loaded (pack_type:
 * the pointer type of the packed panels), and C zeroed for an empty sum (left
 * as it is when accumulating); returns the function. */
LLVMValueRef lm_gemm_begin_entry(gemm_cg *g, const char *symbol, LLVMTypeRef pack_type,
                                 entry_args *e) {
  LLVMValueRef fn = begin_function(g, symbol, &g->i64p, 1, false);
  add_attr(g, fn, 1, "nocapture");
  add_attr(g, fn, 1, "readonly");
  LLVMValueRef args = e->args = LLVMGetParam(fn, 0);
  e->m = arg_i64(g, args, ARG_M), e->n = arg_i64(g, args, ARG_N), e->k = arg_i64(g, args, ARG_K);
  e->a = arg_ptr(g, args, ARG_A, g->op_tp), e->b = arg_ptr(g, args, ARG_B, g->op_tp);
  e->a_row = arg_i64(g, args, ARG_A_ROW), e->a_col = arg_i64(g, args, ARG_A_COL);
  e->b_row = arg_i64(g, args, ARG_B_ROW), e->b_col = arg_i64(g, args, ARG_B_COL);
  e->c = arg_ptr(g, args, ARG_C, g->tp), e->ldc = arg_i64(g, args, ARG_LDC);
  e->mc = arg_i64(g, args, ARG_MC), e->kc = arg_i64(g, args, ARG_KC);
  e->nc = arg_i64(g, args, ARG_NC), e->pack = arg_ptr(g, args, ARG_PACK, pack_type);
  e->accumulate = LLVMBuildICmp(g->b, LLVMIntNE, arg_i64(g, args, ARG_ACCUMULATE), i64c(g, 0), "");
  LLVMValueRef no_terms = LLVMBuildICmp(g->b, LLVMIntSLE, e->k, i64c(g, 0), "");
  LLVMBasicBlockRef join =
      if_begin(g, LLVMBuildAnd(g->b, no_terms, LLVMBuildNot(g->b, e->accumulate, ""), ""));
  {
    gloop i;
    gloop_begin(g, &i, i64c(g, 0), e->m);
    LLVMValueRef crow = at(g, e->c, LLVMBuildNSWMul(g->b, i.iv, e->ldc, ""));
    gloop j;
    gloop_begin(g, &j, i64c(g, 0), e->n);
    store_aligned(g, LLVMConstNull(g->t), at(g, crow, j.iv), elem_align(g));
    gloop_end(g, &j, i64c(g, 1));
    gloop_end(g, &i, i64c(g, 1));
  }
  if_end(g, join);
  return fn;
}

static void gen_entry(gemm_cg *g, const char *symbol, LLVMValueRef pack_a, LLVMValueRef pack_b,
                      LLVMValueRef pack_b_rows, LLVMValueRef micro, LLVMValueRef micro_in_place) {
  entry_args e;
  LLVMValueRef fn = lm_gemm_begin_entry(g, symbol, g->tp, &e);
  LLVMValueRef m = e.m, n = e.n, k = e.k, a = e.a, a_row = e.a_row, a_col = e.a_col, b = e.b,
               b_row = e.b_row, b_col = e.b_col, c = e.c, ldc = e.ldc, mc = e.mc, kc = e.kc,
               nc = e.nc, pack = e.pack, accumulate = e.accumulate;
  /* B's rows at offsets of their own (lk_gemm_args.b_rows) are always packed */
  LLVMValueRef b_rows = arg_i64(g, e.args, ARG_B_ROWS);
  LLVMValueRef strided = LLVMBuildICmp(g->b, LLVMIntEQ, b_rows, i64c(g, 0), "");
  /* widened operands are always packed (lk_gemm_b_in_place) */
  LLVMValueRef in_place = LLVMConstInt(g->t_i1, 0, 0);
  if (micro_in_place)
    in_place = LLVMBuildAnd(
        g->b, LLVMBuildICmp(g->b, LLVMIntNE, arg_i64(g, e.args, ARG_B_IN_PLACE), i64c(g, 0), ""),
        LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, b_col, i64c(g, 1), ""), strided, ""), "");
  int NR = g->d->nr;

  /* lk_gemm_unpacked: a few rows, or few outputs for a long sum, against a
   * weight: no packing */
  LLVMValueRef outputs_terms = LLVMBuildNSWMul(g->b, LLVMBuildNSWMul(g->b, m, n, ""),
                                               i64c(g, LK_GEMM_DOT_TERMS_PER_OUTPUT), "");
  LLVMValueRef few =
      LLVMBuildOr(g->b, LLVMBuildICmp(g->b, LLVMIntSLE, m, i64c(g, DOT_MAX_ROWS), ""),
                  LLVMBuildICmp(g->b, LLVMIntSLE, outputs_terms, k, ""), "");
  few = LLVMBuildAnd(g->b, few, LLVMBuildICmp(g->b, LLVMIntEQ, a_col, i64c(g, 1), ""), "");
  few = LLVMBuildAnd(g->b, few, LLVMBuildICmp(g->b, LLVMIntEQ, b_row, i64c(g, 1), ""), "");
  few = LLVMBuildAnd(g->b, few, LLVMBuildICmp(g->b, LLVMIntSGT, k, i64c(g, 0), ""), "");
  few = LLVMBuildAnd(g->b, few, strided, "");
  LLVMBasicBlockRef few_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "few_rows");
  LLVMBasicBlockRef blocked_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "blocked");
  LLVMBuildCondBr(g->b, few, few_bb, blocked_bb);
  LLVMPositionBuilderAtEnd(g->b, few_bb);
  unpacked_ops ops = {m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, accumulate};
  lm_gemm_gen_row_groups(g, symbol, &ops, lm_gemm_dot_fn, lm_gemm_dot_columns);
  LLVMBuildRetVoid(g->b);
  LLVMPositionBuilderAtEnd(g->b, blocked_bb);

  /* lk_gemm_swept: a few rows against B's contiguous rows: no packing */
  LLVMValueRef swept =
      LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSLE, m, i64c(g, DOT_MAX_ROWS), ""),
                   LLVMBuildICmp(g->b, LLVMIntEQ, b_col, i64c(g, 1), ""), "");
  swept = LLVMBuildAnd(g->b, swept, LLVMBuildICmp(g->b, LLVMIntSGT, k, i64c(g, 0), ""), "");
  swept = LLVMBuildAnd(g->b, swept, strided, "");
  LLVMBasicBlockRef swept_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "swept");
  LLVMBasicBlockRef packed_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "packed_entry");
  LLVMBuildCondBr(g->b, swept, swept_bb, packed_bb);
  LLVMPositionBuilderAtEnd(g->b, swept_bb);
  lm_gemm_gen_row_groups(g, symbol, &ops, lm_gemm_sweep_fn, lm_gemm_sweep_columns);
  LLVMBuildRetVoid(g->b);
  LLVMPositionBuilderAtEnd(g->b, packed_bb);

  /* B's panel, then A's block (pack_bytes's layout) */
  LLVMValueRef nc_whole = LLVMBuildMul(
      g->b, LLVMBuildSDiv(g->b, LLVMBuildNSWAdd(g->b, nc, i64c(g, NR - 1), ""), i64c(g, NR), ""),
      i64c(g, NR), "");
  LLVMValueRef pb = pack, pa = at(g, pack, LLVMBuildNSWMul(g->b, nc_whole, kc, ""));

  gloop jc;
  gloop_begin(g, &jc, i64c(g, 0), n);
  LLVMValueRef ncur = min_i64(g, nc, LLVMBuildNSWSub(g->b, n, jc.iv, ""));
  {
    gloop pc;
    gloop_begin(g, &pc, i64c(g, 0), k);
    LLVMValueRef kcur = min_i64(g, kc, LLVMBuildNSWSub(g->b, k, pc.iv, ""));
    LLVMValueRef bsrc = op_at2(g, b, pc.iv, b_row, jc.iv, b_col);
    /* in place, whole slivers are read where they are; only a last, partial
     * one is packed (into the panel's first sliver) */
    LLVMValueRef whole_cols =
        LLVMBuildMul(g->b, LLVMBuildSDiv(g->b, ncur, i64c(g, NR), ""), i64c(g, NR), "");
    LLVMValueRef pack_from = LLVMBuildSelect(g->b, in_place, whole_cols, i64c(g, 0), "");
    LLVMBasicBlockRef by_rows = if_begin(g, LLVMBuildNot(g->b, strided, ""));
    {
      LLVMValueRef rows = LLVMBuildIntToPtr(
          g->b, LLVMBuildNSWAdd(g->b, b_rows, LLVMBuildNSWMul(g->b, pc.iv, i64c(g, 8), ""), ""),
          g->i64p, "");
      LLVMValueRef pr_args[5] = {kcur, ncur, bsrc, rows, pb};
      call(g, pack_b_rows, pr_args, 5);
    }
    if_end(g, by_rows);
    LLVMBasicBlockRef packed = if_begin(
        g, LLVMBuildAnd(g->b, strided, LLVMBuildICmp(g->b, LLVMIntSLT, pack_from, ncur, ""), ""));
    LLVMValueRef pb_args[6] = {kcur,
                               LLVMBuildNSWSub(g->b, ncur, pack_from, ""),
                               op_at(g, bsrc, LLVMBuildNSWMul(g->b, pack_from, b_col, "")),
                               b_row,
                               b_col,
                               pb};
    call(g, pack_b, pb_args, 6);
    if_end(g, packed);
    LLVMValueRef load_c =
        LLVMBuildOr(g->b, accumulate, LLVMBuildICmp(g->b, LLVMIntSGT, pc.iv, i64c(g, 0), ""), "");
    gloop ic;
    gloop_begin(g, &ic, i64c(g, 0), m);
    {
      LLVMValueRef mcur = min_i64(g, mc, LLVMBuildNSWSub(g->b, m, ic.iv, ""));
      LLVMValueRef asrc = op_at2(g, a, ic.iv, a_row, pc.iv, a_col);
      LLVMValueRef pa_args[6] = {mcur, kcur, asrc, a_row, a_col, pa};
      call(g, pack_a, pa_args, 6);
      LLVMValueRef cblock =
          at(g, c, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, ic.iv, ldc, ""), jc.iv, ""));
      /* one branch per block: the packed nest keeps its constant strides */
      sliver_operands ops = {kcur, mcur, ncur, pa, pb, bsrc, b_row, cblock, ldc, load_c};
      if (micro_in_place) {
        LLVMBasicBlockRef in_place_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "in_place");
        LLVMBasicBlockRef packed_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "packed");
        LLVMBasicBlockRef block_done = LLVMAppendBasicBlockInContext(g->ctx, fn, "block_done");
        LLVMBuildCondBr(g->b, in_place, in_place_bb, packed_bb);
        LLVMPositionBuilderAtEnd(g->b, in_place_bb);
        gen_slivers(g, &ops, micro, micro_in_place);
        LLVMBuildBr(g->b, block_done);
        LLVMPositionBuilderAtEnd(g->b, packed_bb);
        gen_slivers(g, &ops, micro, NULL);
        LLVMBuildBr(g->b, block_done);
        LLVMPositionBuilderAtEnd(g->b, block_done);
      } else {
        gen_slivers(g, &ops, micro, NULL);
      }
    }
    gloop_end(g, &ic, mc);
    gloop_end(g, &pc, kc);
  }
  gloop_end(g, &jc, nc);
  LLVMBuildRetVoid(g->b);
}

/* ------------------------------------------------------------------ API */

loom_status lm_gemm_module(LLVMContextRef ctx, const lk_gemm *d, const char *symbol,
                           LLVMModuleRef *out, char *err, size_t errlen) {
  *out = NULL;
  const char *bad = lk_gemm_check(d);
  int w = lm_target_vector_bytes() / (int)loom_dtype_size(d->dtype);
  if (!bad && (w < 1 || w > 64 || d->nr % w != 0 || d->nr / w > 8))
    bad = "its tile is not whole vectors for this CPU";
  if (bad) {
    lm_set_err(err, errlen, "GEMM %s is invalid: %s", symbol, bad);
    return LOOM_ERR_COMPILE;
  }
  gemm_cg g = {.d = d, .ctx = ctx, .w = w, .nv = d->nr / w};
  g.t_void = LLVMVoidTypeInContext(ctx);
  g.t_i1 = LLVMInt1TypeInContext(ctx);
  g.t_i32 = LLVMInt32TypeInContext(ctx);
  g.t_i64 = LLVMInt64TypeInContext(ctx);
  g.t = d->dtype == LOOM_F32 ? LLVMFloatTypeInContext(ctx) : LLVMDoubleTypeInContext(ctx);
  g.vec = LLVMVectorType(g.t, (unsigned)w);
  g.tp = LLVMPointerType(g.t, 0);
  g.i64p = LLVMPointerType(g.t_i64, 0);
  g.op_t = d->in_dtype == d->dtype ? g.t : LLVMInt16TypeInContext(ctx);
  g.op_tp = LLVMPointerType(g.op_t, 0);
  g.mod = LLVMModuleCreateWithNameInContext(symbol, ctx);
  g.b = LLVMCreateBuilderInContext(ctx);
  g.entry = LLVMCreateBuilderInContext(ctx);
  if (lk_gemm_paired(d)) {
    LLVMValueRef pack_a = lm_gemm_gen_amx_pack_a(&g, symbol),
                 pack_b = lm_gemm_gen_amx_pack_b(&g, symbol),
                 micro = d->amx ? lm_gemm_gen_amx_micro(&g, symbol)
                                : lm_gemm_gen_pairs_micro(&g, symbol);
    lm_gemm_gen_paired_entry(&g, symbol, pack_a, pack_b, micro);
  } else {
    LLVMValueRef pack_a = lm_gemm_gen_pack_a(&g, symbol), pack_b = lm_gemm_gen_pack_b(&g, symbol),
                 pack_b_rows = lm_gemm_gen_pack_b_rows(&g, symbol),
                 micro = gen_micro(&g, symbol, false),
                 micro_in_place = d->in_dtype == d->dtype ? gen_micro(&g, symbol, true) : NULL;
    gen_entry(&g, symbol, pack_a, pack_b, pack_b_rows, micro, micro_in_place);
  }
  LLVMDisposeBuilder(g.b);
  LLVMDisposeBuilder(g.entry);
  *out = g.mod;
  return LOOM_OK;
}

int lm_llvm_gemm_tiles(loom_dtype in_dtype, bool pairs, bool amx, lk_gemm out[LM_GEMM_MAX_TILES],
                       double speed[]) {
  bool half = in_dtype == LOOM_BF16 || in_dtype == LOOM_F16;
  loom_dtype dtype = half ? LOOM_F32 : in_dtype;
  pairs = pairs && in_dtype == LOOM_BF16;
  if (pairs && amx && lm_target_has_amx_bf16()) {
    /* measured on a Xeon with AMX: ~1600 GMAC/s a core in the tile products
     * against ~110 with AVX-512 FMAs; packing bounds it well below that */
    out[0] = (lk_gemm){.dtype = LOOM_F32,
                       .in_dtype = LOOM_BF16,
                       .mr = LK_GEMM_AMX_TILE,
                       .nr = LK_GEMM_AMX_TILE,
                       .amx = true};
    if (speed) speed[0] = 1.0;
    return 1;
  }
  if (pairs && lm_target_has_avx512_bf16()) {
    /* 14 rows of two vectors, as the F32 tile: 28 sums beside B's two pair
     * vectors, A's pair broadcast from memory. Each instruction makes twice
     * an F32 FMA's products. */
    out[0] = (lk_gemm){.dtype = LOOM_F32,
                       .in_dtype = LOOM_BF16,
                       .mr = 14,
                       .nr = LK_GEMM_AMX_TILE,
                       .dot_pairs = true};
    if (speed) speed[0] = 1.0;
    return 1;
  }
  int bytes = lm_target_vector_bytes(), w = bytes / (int)loom_dtype_size(dtype);
  /* with 32 registers (AVX-512, whose FMAs take A's broadcast from memory):
   * 14 rows of two vectors (28 sums beside B's two vectors), 8 rows of three
   * for row counts of 8 and 16 and 32, 16 rows of one for narrow products;
   * with 16, 6 rows of two (one more register for the broadcast). Their speed
   * on a large product, relative to the first, as measured on an AVX-512
   * Xeon (docs/gemm.md); only the first is measured with 16. */
  static const struct {
    int mr, nv, per_mille;
  } wide[] = {{14, 2, 1000}, {8, 3, 970}, {16, 1, 780}}, narrow[] = {{6, 2, 1000}};
  bool many = bytes >= 64;
  int n = many ? 3 : 1;
  for (int i = 0; i < n; i++) {
    int mr = many ? wide[i].mr : narrow[i].mr, nv = many ? wide[i].nv : narrow[i].nv;
    out[i] = (lk_gemm){.dtype = dtype, .in_dtype = in_dtype, .mr = mr, .nr = nv * w};
    if (speed) speed[i] = (many ? wide[i].per_mille : narrow[i].per_mille) / 1000.0;
  }
  return n;
}

bool lm_llvm_has_amx_bf16(void) { return lm_target_has_amx_bf16(); }
bool lm_llvm_has_avx512_bf16(void) { return lm_target_has_avx512_bf16(); }

static double round_up_to(int64_t v, int64_t to) { return (double)((v + to - 1) / to * to); }

void lm_llvm_gemm_tile(loom_dtype in_dtype, bool amx, int64_t m, int64_t n, lk_gemm *out) {
  lk_gemm tiles[LM_GEMM_MAX_TILES];
  double speed[LM_GEMM_MAX_TILES];
  /* a few rows waste most of a paired tile and gain the dot path without packing
   * (BF16, 2 threads, x [m, 768] @ W^T [768, 3072] on an AVX-512 Xeon: m = 1
   * 69 us widened against 384 on AMX, m = 4 116 against 213; m = 8 324
   * against 223) */
  int count = lm_llvm_gemm_tiles(in_dtype, m > LK_GEMM_DOT_MAX_ROWS, amx, tiles, speed);
  /* the tile whose padding (sums computed past m x n) costs least */
  int best = 0;
  double best_cost = 0;
  for (int i = 0; i < count; i++) {
    double cost = round_up_to(m > 0 ? m : 1, tiles[i].mr) *
                  round_up_to(n > 0 ? n : 1, tiles[i].nr) / speed[i];
    if (i == 0 || cost < best_cost) best = i, best_cost = cost;
  }
  *out = tiles[best];
}
