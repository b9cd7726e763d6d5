/*
 * Packing for the GEMM blocks (gemm.c's design): B's slivers and A's, copied
 * into the contiguous layouts the microkernel reads, with the in-register
 * transposes they need. A file of its own: the largest part of the generator
 * that is not the microkernel, shared by the F32/F64 and the widened paths.
 */
#include "backends/llvm/gemm_internal.h"

/* ------------------------------------------------------------------ packing */

/* v[0..w): the w rows of a w x w block (vectors of w lanes, any element
 * type), transposed in registers by log2(w) rounds of two-input shuffles;
 * round s swaps bit s of every element's row and lane index. */
void lm_gemm_transpose_lanes(gemm_cg *g, LLVMValueRef *v, int w) {
  LLVMValueRef lo[64], hi[64];
  for (int s = 1; s < w; s *= 2) {
    for (int l = 0; l < w; l++) {
      lo[l] = LLVMConstInt(g->t_i32, (unsigned long long)((l & s) ? w + l - s : l), 0);
      hi[l] = LLVMConstInt(g->t_i32, (unsigned long long)((l & s) ? w + l : l + s), 0);
    }
    LLVMValueRef lo_mask = LLVMConstVector(lo, (unsigned)w),
                 hi_mask = LLVMConstVector(hi, (unsigned)w);
    for (int i = 0; i < w; i++) {
      if (i & s) continue;
      LLVMValueRef a = v[i], b = v[i + s];
      v[i] = LLVMBuildShuffleVector(g->b, a, b, lo_mask, "");
      v[i + s] = LLVMBuildShuffleVector(g->b, a, b, hi_mask, "");
    }
  }
}

static void transpose_square(gemm_cg *g, LLVMValueRef *v) { lm_gemm_transpose_lanes(g, v, g->w); }

/*
 * Lines row[0 .. nblk * W), each contiguous, become columns: for q < W,
 * dst[(p0 + q) * stride + r] = row[r][p0 + q] for r < nblk * W, a W x W
 * block at a time through registers. Stores go in order of q, so where a
 * row of dst is shorter than nblk * W (stride < nblk * W) the extra lanes
 * land on the next row's start, which the next store overwrites.
 */
void lm_gemm_transpose_lines(gemm_cg *g, const LLVMValueRef *row, int nblk, LLVMValueRef p0,
                             LLVMValueRef dst, int64_t stride) {
  int w = g->w;
  LLVMValueRef v[8][64];
  for (int blk = 0; blk < nblk; blk++) {
    for (int r = 0; r < w; r++) v[blk][r] = load_op_vec(g, op_at(g, row[blk * w + r], p0), NULL);
    transpose_square(g, v[blk]);
  }
  for (int q = 0; q < w; q++) {
    LLVMValueRef line =
        at(g, dst,
           LLVMBuildNSWMul(g->b, LLVMBuildNSWAdd(g->b, p0, i64c(g, q), ""), i64c(g, stride), ""));
    for (int blk = 0; blk < nblk; blk++)
      store_aligned(g, v[blk][q], vec_ptr(g, at(g, line, i64c(g, blk * w))), elem_align(g));
  }
}

/* for p0 = 0, W, ... while p0 + W <= n: the builder in the body; returns the
 * loop, which the caller ends; the first p it left is n - n % W. */
void lm_gemm_chunk_loop_begin(gemm_cg *g, gloop *l, LLVMValueRef n) {
  gloop_begin(g, l, i64c(g, 0), LLVMBuildNSWSub(g->b, n, i64c(g, g->w - 1), ""));
}

LLVMValueRef lm_gemm_chunked_part(gemm_cg *g, LLVMValueRef n) {
  return LLVMBuildNSWSub(g->b, n, LLVMBuildSRem(g->b, n, i64c(g, g->w), ""), "");
}

/* dst[p * stride] = line[p * step] (an operand's) for p in [from, n), or
 * zeros when !inside. */
static void copy_line(gemm_cg *g, LLVMValueRef inside, LLVMValueRef line, LLVMValueRef step,
                      LLVMValueRef from, LLVMValueRef n, LLVMValueRef dst, int64_t stride) {
  gloop p;
  gloop_begin(g, &p, from, n);
  LLVMValueRef to = at(g, dst, LLVMBuildNSWMul(g->b, p.iv, i64c(g, stride), ""));
  LLVMBasicBlockRef join = if_begin(g, inside);
  store_aligned(g, load_op(g, op_at(g, line, LLVMBuildNSWMul(g->b, p.iv, step, ""))), to,
                elem_align(g));
  if_end(g, join);
  join = if_begin(g, LLVMBuildNot(g->b, inside, ""));
  store_aligned(g, LLVMConstNull(g->t), to, elem_align(g));
  if_end(g, join);
  gloop_end(g, &p, i64c(g, 1));
}

/*
 * pack_b(kc, nc, b, row, col, dst): B's kc x nc panel as slivers of NR
 * columns, sliver s at dst + s * NR * kc holding row p's NR values at p * NR;
 * columns past nc are zeros. Whole slivers of the two common layouts run
 * vectors: rows of B contiguous (col == 1) copy NR / W vectors per row;
 * columns contiguous (row == 1, a layer's weight [N, K] read as W^T) go
 * through transpose_lines. The rest, one column at a time.
 */
LLVMValueRef lm_gemm_gen_pack_b(gemm_cg *g, const char *symbol) {
  char name[64];
  snprintf(name, sizeof name, "%s.pack_b", symbol);
  LLVMTypeRef params[6] = {g->t_i64, g->t_i64, g->op_tp, g->t_i64, g->t_i64, g->tp};
  LLVMValueRef fn = begin_function(g, name, params, 6, true);
  for (unsigned i = 2; i < 6; i += 3) add_attr(g, fn, i + 1, "noalias");
  LLVMValueRef kc = LLVMGetParam(fn, 0), nc = LLVMGetParam(fn, 1), b = LLVMGetParam(fn, 2),
               row = LLVMGetParam(fn, 3), col = LLVMGetParam(fn, 4), dst = LLVMGetParam(fn, 5);
  int nr = g->d->nr;
  gloop js;
  gloop_begin(g, &js, i64c(g, 0), nc);
  LLVMValueRef width = min_i64(g, i64c(g, nr), LLVMBuildNSWSub(g->b, nc, js.iv, ""));
  LLVMValueRef sliver = at(g, dst, LLVMBuildNSWMul(g->b, js.iv, kc, ""));
  LLVMValueRef src = op_at(g, b, LLVMBuildNSWMul(g->b, js.iv, col, ""));
  LLVMValueRef whole = LLVMBuildICmp(g->b, LLVMIntEQ, width, i64c(g, nr), "");
  LLVMValueRef rows_contiguous =
      LLVMBuildAnd(g->b, whole, LLVMBuildICmp(g->b, LLVMIntEQ, col, i64c(g, 1), ""), "");
  LLVMValueRef cols_contiguous =
      LLVMBuildAnd(g->b, whole, LLVMBuildICmp(g->b, LLVMIntEQ, row, i64c(g, 1), ""), "");
  LLVMBasicBlockRef rows_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "rows");
  LLVMBasicBlockRef not_rows_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "not_rows");
  LLVMBasicBlockRef cols_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "columns");
  LLVMBasicBlockRef other_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "other");
  LLVMBasicBlockRef next_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "next");
  LLVMBuildCondBr(g->b, rows_contiguous, rows_bb, not_rows_bb);
  LLVMPositionBuilderAtEnd(g->b, not_rows_bb);
  LLVMBuildCondBr(g->b, cols_contiguous, cols_bb, other_bb);

  LLVMPositionBuilderAtEnd(g->b, rows_bb);
  {
    gloop p;
    gloop_begin(g, &p, i64c(g, 0), kc);
    LLVMValueRef from = op_at(g, src, LLVMBuildNSWMul(g->b, p.iv, row, ""));
    LLVMValueRef to = at(g, sliver, LLVMBuildNSWMul(g->b, p.iv, i64c(g, nr), ""));
    for (int v = 0; v < g->nv; v++) {
      LLVMValueRef x = load_op_vec(g, op_at(g, from, i64c(g, v * g->w)), NULL);
      store_aligned(g, x, vec_ptr(g, at(g, to, i64c(g, v * g->w))), elem_align(g));
    }
    gloop_end(g, &p, i64c(g, 1));
    LLVMBuildBr(g->b, next_bb);
  }

  LLVMPositionBuilderAtEnd(g->b, cols_bb);
  {
    LLVMValueRef lines[8 * 64] = {0};
    for (int j = 0; j < nr; j++)
      lines[j] = op_at(g, src, LLVMBuildNSWMul(g->b, i64c(g, j), col, ""));
    gloop p0;
    lm_gemm_chunk_loop_begin(g, &p0, kc);
    lm_gemm_transpose_lines(g, lines, g->nv, p0.iv, sliver, nr);
    gloop_end(g, &p0, i64c(g, g->w));
    LLVMValueRef rest = lm_gemm_chunked_part(g, kc);
    for (int j = 0; j < nr; j++)
      copy_line(g, LLVMConstInt(g->t_i1, 1, 0), lines[j], i64c(g, 1), rest, kc,
                at(g, sliver, i64c(g, j)), nr);
    LLVMBuildBr(g->b, next_bb);
  }

  LLVMPositionBuilderAtEnd(g->b, other_bb);
  {
    gloop j;
    gloop_begin(g, &j, i64c(g, 0), i64c(g, nr));
    LLVMValueRef inside = LLVMBuildICmp(g->b, LLVMIntSLT, j.iv, width, "");
    copy_line(g, inside, op_at(g, src, LLVMBuildNSWMul(g->b, j.iv, col, "")), row, i64c(g, 0), kc,
              at(g, sliver, j.iv), nr);
    gloop_end(g, &j, i64c(g, 1));
    LLVMBuildBr(g->b, next_bb);
  }

  LLVMPositionBuilderAtEnd(g->b, next_bb);
  gloop_end(g, &js, i64c(g, nr));
  LLVMBuildRetVoid(g->b);
  return fn;
}

/*
 * pack_b_rows(kc, nc, b, rows, dst): pack_b's slivers of a B whose row p
 * starts at b + rows[p] (lk_gemm_args.b_rows) with its columns contiguous:
 * NR / W vectors per row, the last sliver's lanes past nc loaded as zeros.
 */
LLVMValueRef lm_gemm_gen_pack_b_rows(gemm_cg *g, const char *symbol) {
  char name[64];
  snprintf(name, sizeof name, "%s.pack_b_rows", symbol);
  LLVMTypeRef params[5] = {g->t_i64, g->t_i64, g->op_tp, g->i64p, g->tp};
  LLVMValueRef fn = begin_function(g, name, params, 5, true);
  add_attr(g, fn, 5, "noalias");
  LLVMValueRef kc = LLVMGetParam(fn, 0), nc = LLVMGetParam(fn, 1), b = LLVMGetParam(fn, 2),
               rows = LLVMGetParam(fn, 3), dst = LLVMGetParam(fn, 4);
  int nr = g->d->nr;
  gloop js;
  gloop_begin(g, &js, i64c(g, 0), nc);
  LLVMValueRef width = min_i64(g, i64c(g, nr), LLVMBuildNSWSub(g->b, nc, js.iv, ""));
  LLVMValueRef sliver = at(g, dst, LLVMBuildNSWMul(g->b, js.iv, kc, ""));
  LLVMValueRef src = op_at(g, b, js.iv);
  LLVMValueRef whole = LLVMBuildICmp(g->b, LLVMIntEQ, width, i64c(g, nr), "");
  LLVMBasicBlockRef whole_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "whole");
  LLVMBasicBlockRef part_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "part");
  LLVMBasicBlockRef next_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "next");
  LLVMBuildCondBr(g->b, whole, whole_bb, part_bb);
  for (int edge = 0; edge < 2; edge++) {
    LLVMPositionBuilderAtEnd(g->b, edge ? part_bb : whole_bb);
    LLVMValueRef masks[8] = {NULL};
    for (int v = 0; edge && v < g->nv; v++)
      masks[v] = lanes_below(g, g->w, LLVMBuildNSWSub(g->b, width, i64c(g, v * g->w), ""));
    gloop p;
    gloop_begin(g, &p, i64c(g, 0), kc);
    LLVMValueRef start =
        load_aligned(g, g->t_i64, LLVMBuildInBoundsGEP2(g->b, g->t_i64, rows, &p.iv, 1, ""), 8);
    LLVMValueRef from = op_at(g, src, start);
    LLVMValueRef to = at(g, sliver, LLVMBuildNSWMul(g->b, p.iv, i64c(g, nr), ""));
    for (int v = 0; v < g->nv; v++) {
      LLVMValueRef x = load_op_vec(g, op_at(g, from, i64c(g, v * g->w)), masks[v]);
      store_aligned(g, x, vec_ptr(g, at(g, to, i64c(g, v * g->w))), elem_align(g));
    }
    gloop_end(g, &p, i64c(g, 1));
    LLVMBuildBr(g->b, next_bb);
  }
  LLVMPositionBuilderAtEnd(g->b, next_bb);
  gloop_end(g, &js, i64c(g, nr));
  LLVMBuildRetVoid(g->b);
  return fn;
}

/*
 * pack_a(mc, kc, a, row, col, dst): A's mc x kc block as slivers of MR rows,
 * sliver s at dst + s * MR * kc holding column p's MR values at p * MR; rows
 * past mc are zeros, or (in the vector path) copies of the last row, whose
 * sums the microkernel never stores. With rows contiguous (col == 1) W terms
 * of every row go through transpose_lines at a time (its extra lanes spill
 * past the block by less than W elements: lk_gemm_pack_bytes's slack); the
 * rest, one row at a time.
 */
LLVMValueRef lm_gemm_gen_pack_a(gemm_cg *g, const char *symbol) {
  char name[64];
  snprintf(name, sizeof name, "%s.pack_a", symbol);
  LLVMTypeRef params[6] = {g->t_i64, g->t_i64, g->op_tp, g->t_i64, g->t_i64, g->tp};
  LLVMValueRef fn = begin_function(g, name, params, 6, true);
  for (unsigned i = 2; i < 6; i += 3) add_attr(g, fn, i + 1, "noalias");
  LLVMValueRef mc = LLVMGetParam(fn, 0), kc = LLVMGetParam(fn, 1), a = LLVMGetParam(fn, 2),
               row = LLVMGetParam(fn, 3), col = LLVMGetParam(fn, 4), dst = LLVMGetParam(fn, 5);
  int mr = g->d->mr, nblk = (mr + g->w - 1) / g->w;
  gloop is;
  gloop_begin(g, &is, i64c(g, 0), mc);
  LLVMValueRef sliver = at(g, dst, LLVMBuildNSWMul(g->b, is.iv, kc, ""));
  LLVMValueRef last = LLVMBuildNSWSub(g->b, mc, i64c(g, 1), "");
  LLVMValueRef vector_path = LLVMBuildICmp(g->b, LLVMIntEQ, col, i64c(g, 1), "");
  LLVMBasicBlockRef vec_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "rows");
  LLVMBasicBlockRef other_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "other");
  LLVMBasicBlockRef next_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "next");
  LLVMBuildCondBr(g->b, vector_path, vec_bb, other_bb);

  LLVMPositionBuilderAtEnd(g->b, vec_bb);
  {
    LLVMValueRef lines[8 * 64] = {0};
    for (int r = 0; r < nblk * g->w; r++) {
      LLVMValueRef i = min_i64(g, LLVMBuildNSWAdd(g->b, is.iv, i64c(g, r), ""), last);
      lines[r] = op_at(g, a, LLVMBuildNSWMul(g->b, i, row, ""));
    }
    gloop p0;
    lm_gemm_chunk_loop_begin(g, &p0, kc);
    lm_gemm_transpose_lines(g, lines, nblk, p0.iv, sliver, mr);
    gloop_end(g, &p0, i64c(g, g->w));
    LLVMValueRef rest = lm_gemm_chunked_part(g, kc);
    for (int r = 0; r < mr; r++) {
      LLVMValueRef inside =
          LLVMBuildICmp(g->b, LLVMIntSLT, LLVMBuildNSWAdd(g->b, is.iv, i64c(g, r), ""), mc, "");
      copy_line(g, inside, lines[r], i64c(g, 1), rest, kc, at(g, sliver, i64c(g, r)), mr);
    }
    LLVMBuildBr(g->b, next_bb);
  }

  LLVMPositionBuilderAtEnd(g->b, other_bb);
  {
    gloop r;
    gloop_begin(g, &r, i64c(g, 0), i64c(g, mr));
    LLVMValueRef i = LLVMBuildNSWAdd(g->b, is.iv, r.iv, "");
    LLVMValueRef inside = LLVMBuildICmp(g->b, LLVMIntSLT, i, mc, "");
    LLVMValueRef line = op_at(g, a, LLVMBuildNSWMul(g->b, min_i64(g, i, last), row, ""));
    copy_line(g, inside, line, col, i64c(g, 0), kc, at(g, sliver, r.iv), mr);
    gloop_end(g, &r, i64c(g, 1));
    LLVMBuildBr(g->b, next_bb);
  }

  LLVMPositionBuilderAtEnd(g->b, next_bb);
  gloop_end(g, &is, i64c(g, mr));
  LLVMBuildRetVoid(g->b);
  return fn;
}
