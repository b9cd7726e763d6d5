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
 * product of few rows, packing B would copy as much as the microkernels read. Nothing here names an
 * instruction set: LLVM selects the FMAs, broadcasts and masked stores for the target.
 */
#include <stdio.h>
#include <string.h>

#include "backends/llvm/llvm_internal.h"

typedef struct gemm_cg {
  const lk_gemm *d;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;     /* where code goes */
  LLVMBuilderRef entry; /* the current function's entry block (allocas) */
  LLVMValueRef fn;      /* the current function */
  LLVMTypeRef t_void, t_i1, t_i32, t_i64, t, vec, tp, i64p;
  LLVMTypeRef op_t, op_tp; /* A's and B's elements: t, or i16 (BF16/F16 bits) */
  int w, nv;               /* vector width (elements); vectors per tile row */
} gemm_cg;

/* ------------------------------------------------------------------ helpers */

static LLVMValueRef i64c(const gemm_cg *g, int64_t v) {
  return LLVMConstInt(g->t_i64, (unsigned long long)v, 1);
}

static void add_attr(gemm_cg *g, LLVMValueRef fn, LLVMAttributeIndex where, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(fn, where, LLVMCreateEnumAttribute(g->ctx, kind, 0));
}

static LLVMValueRef min_i64(gemm_cg *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, a, b, ""), a, b, "");
}

/* The mask of n lanes l < limit (an i64). */
static LLVMValueRef lanes_below(gemm_cg *g, int n, LLVMValueRef limit) {
  LLVMTypeRef i64v = LLVMVectorType(g->t_i64, (unsigned)n);
  LLVMValueRef offs[64];
  for (int l = 0; l < n; l++) offs[l] = i64c(g, l);
  LLVMValueRef splat =
      LLVMBuildInsertElement(g->b, LLVMGetUndef(i64v), limit, LLVMConstInt(g->t_i32, 0, 0), "");
  splat = LLVMBuildShuffleVector(g->b, splat, LLVMGetUndef(i64v),
                                 LLVMConstNull(LLVMVectorType(g->t_i32, (unsigned)n)), "");
  return LLVMBuildICmp(g->b, LLVMIntSLT, LLVMConstVector(offs, (unsigned)n), splat, "");
}

/* &p[i] for a T* p */
static LLVMValueRef at(gemm_cg *g, LLVMValueRef p, LLVMValueRef i) {
  return LLVMBuildInBoundsGEP2(g->b, g->t, p, &i, 1, "");
}

/* &p[i * si + j * sj] */
static LLVMValueRef at2(gemm_cg *g, LLVMValueRef p, LLVMValueRef i, LLVMValueRef si, LLVMValueRef j,
                        LLVMValueRef sj) {
  return at(g, p,
            LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, i, si, ""),
                            LLVMBuildNSWMul(g->b, j, sj, ""), ""));
}

static LLVMValueRef vec_ptr(gemm_cg *g, LLVMValueRef p) {
  return LLVMBuildBitCast(g->b, p, LLVMPointerType(g->vec, 0), "");
}

/* &p[i] and &p[i * si + j * sj] for an operand (A or B) pointer p */
static LLVMValueRef op_at(gemm_cg *g, LLVMValueRef p, LLVMValueRef i) {
  return LLVMBuildInBoundsGEP2(g->b, g->op_t, p, &i, 1, "");
}

static LLVMValueRef op_at2(gemm_cg *g, LLVMValueRef p, LLVMValueRef i, LLVMValueRef si,
                           LLVMValueRef j, LLVMValueRef sj) {
  return op_at(g, p,
               LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, i, si, ""),
                               LLVMBuildNSWMul(g->b, j, sj, ""), ""));
}

static LLVMValueRef load_aligned(gemm_cg *g, LLVMTypeRef t, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, t, p, "");
  LLVMSetAlignment(v, align);
  return v;
}

static void store_aligned(gemm_cg *g, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMSetAlignment(LLVMBuildStore(g->b, v, p), align);
}

static unsigned elem_align(const gemm_cg *g) { return (unsigned)loom_dtype_size(g->d->dtype); }
static unsigned op_align(const gemm_cg *g) { return (unsigned)loom_dtype_size(g->d->in_dtype); }

static LLVMValueRef intrinsic(gemm_cg *g, const char *name, LLVMTypeRef *types, size_t ntypes,
                              LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, types, ntypes);
  return LLVMBuildCall2(g->b, LLVMIntrinsicGetType(g->ctx, id, types, ntypes), fn, args, nargs, "");
}

/* An operand's value(s) v (of op_t, or vectors of it) as t: BF16's bits are
 * a float's top half; F16 through LLVM's half (F16C). */
static LLVMValueRef widen(gemm_cg *g, LLVMValueRef v, unsigned lanes) {
  if (g->d->in_dtype == g->d->dtype) return v;
  LLVMTypeRef f = lanes ? LLVMVectorType(g->t, lanes) : g->t;
  if (g->d->in_dtype == LOOM_F16) {
    LLVMTypeRef h = LLVMHalfTypeInContext(g->ctx);
    return LLVMBuildFPExt(g->b, LLVMBuildBitCast(g->b, v, lanes ? LLVMVectorType(h, lanes) : h, ""),
                          f, "");
  }
  LLVMTypeRef i32 = lanes ? LLVMVectorType(g->t_i32, lanes) : g->t_i32;
  LLVMValueRef sixteen = LLVMConstInt(g->t_i32, 16, 0);
  if (lanes) {
    LLVMValueRef s[64];
    for (unsigned l = 0; l < lanes; l++) s[l] = sixteen;
    sixteen = LLVMConstVector(s, lanes);
  }
  return LLVMBuildBitCast(g->b, LLVMBuildShl(g->b, LLVMBuildZExt(g->b, v, i32, ""), sixteen, ""), f,
                          "");
}

/* W operand elements at p as a vector of t, under mask (NULL: all) */
static LLVMValueRef load_op_vec(gemm_cg *g, LLVMValueRef p, LLVMValueRef mask) {
  LLVMTypeRef vt = LLVMVectorType(g->op_t, (unsigned)g->w), vp = LLVMPointerType(vt, 0);
  LLVMValueRef ptr = LLVMBuildBitCast(g->b, p, vp, ""), v;
  if (mask) {
    LLVMTypeRef types[2] = {vt, vp};
    LLVMValueRef args[4] = {ptr, LLVMConstInt(g->t_i32, op_align(g), 0), mask, LLVMConstNull(vt)};
    v = intrinsic(g, "llvm.masked.load", types, 2, args, 4);
  } else {
    v = load_aligned(g, vt, ptr, op_align(g));
  }
  return widen(g, v, (unsigned)g->w);
}

static LLVMValueRef load_op(gemm_cg *g, LLVMValueRef p) {
  return widen(g, load_aligned(g, g->op_t, p, op_align(g)), 0);
}

static LLVMValueRef call(gemm_cg *g, LLVMValueRef fn, LLVMValueRef *args, unsigned n) {
  return LLVMBuildCall2(g->b, LLVMGlobalGetValueType(fn), fn, args, n, "");
}

/* A new internal function; the builder at its first block, after the
 * entry block that holds its allocas. */
static LLVMValueRef begin_function(gemm_cg *g, const char *name, LLVMTypeRef *params,
                                   unsigned nparams, bool internal) {
  LLVMValueRef fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->t_void, params, nparams, 0));
  if (internal) LLVMSetLinkage(fn, LLVMInternalLinkage);
  add_attr(g, fn, LLVMAttributeFunctionIndex, "nounwind");
  /* the tile's vectors are as wide as the CPU's: a target that prefers
   * narrower ones (AVX-512 CPUs tuned for 256 bits) must not split them */
  char width[16];
  snprintf(width, sizeof width, "%d", lm_target_vector_bytes() * 8);
  const char *key = "min-legal-vector-width";
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateStringAttribute(g->ctx, key, (unsigned)strlen(key), width,
                                                    (unsigned)strlen(width)));
  g->fn = fn;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, fn, "entry");
  LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(g->ctx, fn, "start");
  LLVMPositionBuilderAtEnd(g->b, entry);
  LLVMValueRef br = LLVMBuildBr(g->b, start);
  LLVMPositionBuilderBefore(g->entry, br);
  LLVMPositionBuilderAtEnd(g->b, start);
  return fn;
}

static LLVMValueRef new_var(gemm_cg *g, LLVMTypeRef t, LLVMValueRef init) {
  LLVMValueRef v = LLVMBuildAlloca(g->entry, t, "");
  LLVMBuildStore(g->b, init, v);
  return v;
}

/* for (iv = lo; iv < hi; iv += step): the builder in the body; gloop_end closes it. */
typedef struct gloop {
  LLVMValueRef var, iv;
  LLVMBasicBlockRef header, exit;
} gloop;

static void gloop_begin(gemm_cg *g, gloop *l, LLVMValueRef lo, LLVMValueRef hi) {
  l->var = new_var(g, g->t_i64, lo);
  l->header = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "loop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "body");
  l->exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
  LLVMBuildBr(g->b, l->header);
  LLVMPositionBuilderAtEnd(g->b, l->header);
  l->iv = LLVMBuildLoad2(g->b, g->t_i64, l->var, "");
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, l->iv, hi, ""), body, l->exit);
  LLVMPositionBuilderAtEnd(g->b, body);
}

static void gloop_end(gemm_cg *g, gloop *l, LLVMValueRef step) {
  LLVMBuildStore(g->b, LLVMBuildNSWAdd(g->b, l->iv, step, ""), l->var);
  LLVMBuildBr(g->b, l->header);
  LLVMPositionBuilderAtEnd(g->b, l->exit);
}

/* if (cond) { ... }: the builder in the then block; if_end joins. */
static LLVMBasicBlockRef if_begin(gemm_cg *g, LLVMValueRef cond) {
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "then");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "join");
  LLVMBuildCondBr(g->b, cond, then, join);
  LLVMPositionBuilderAtEnd(g->b, then);
  return join;
}

static void if_end(gemm_cg *g, LLVMBasicBlockRef join) {
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, join);
}

/* ------------------------------------------------------------------ packing */

/* v[0..w): the w rows of a w x w block (vectors of w lanes, any element
 * type), transposed in registers by log2(w) rounds of two-input shuffles;
 * round s swaps bit s of every element's row and lane index. */
static void transpose_lanes(gemm_cg *g, LLVMValueRef *v, int w) {
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

static void transpose_square(gemm_cg *g, LLVMValueRef *v) { transpose_lanes(g, v, g->w); }

/*
 * Lines row[0 .. nblk * W), each contiguous, become columns: for q < W,
 * dst[(p0 + q) * stride + r] = row[r][p0 + q] for r < nblk * W, a W x W
 * block at a time through registers. Stores go in order of q, so where a
 * row of dst is shorter than nblk * W (stride < nblk * W) the extra lanes
 * land on the next row's start, which the next store overwrites.
 */
static void transpose_lines(gemm_cg *g, const LLVMValueRef *row, int nblk, LLVMValueRef p0,
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
static void chunk_loop_begin(gemm_cg *g, gloop *l, LLVMValueRef n) {
  gloop_begin(g, l, i64c(g, 0), LLVMBuildNSWSub(g->b, n, i64c(g, g->w - 1), ""));
}

static LLVMValueRef chunked_part(gemm_cg *g, LLVMValueRef n) {
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
static LLVMValueRef gen_pack_b(gemm_cg *g, const char *symbol) {
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
    chunk_loop_begin(g, &p0, kc);
    transpose_lines(g, lines, g->nv, p0.iv, sliver, nr);
    gloop_end(g, &p0, i64c(g, g->w));
    LLVMValueRef rest = chunked_part(g, kc);
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
 * pack_a(mc, kc, a, row, col, dst): A's mc x kc block as slivers of MR rows,
 * sliver s at dst + s * MR * kc holding column p's MR values at p * MR; rows
 * past mc are zeros, or (in the vector path) copies of the last row, whose
 * sums the microkernel never stores. With rows contiguous (col == 1) W terms
 * of every row go through transpose_lines at a time (its extra lanes spill
 * past the block by less than W elements: lk_gemm_pack_bytes's slack); the
 * rest, one row at a time.
 */
static LLVMValueRef gen_pack_a(gemm_cg *g, const char *symbol) {
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
    chunk_loop_begin(g, &p0, kc);
    transpose_lines(g, lines, nblk, p0.iv, sliver, mr);
    gloop_end(g, &p0, i64c(g, g->w));
    LLVMValueRef rest = chunked_part(g, kc);
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

/* ------------------------------------------------------------------ microkernel */

/* The tile's row r, vector v: sums, plus C's old values when load_c, stored
 * under mask (NULL: every lane). */
static void store_tile_vector(gemm_cg *g, LLVMValueRef sum, LLVMValueRef dst, LLVMValueRef mask,
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
static void store_tile(gemm_cg *g, LLVMValueRef *sums, LLVMValueRef c, LLVMValueRef ldc,
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
      store_tile_vector(g, LLVMBuildLoad2(g->b, g->vec, sums[r * nv + v], ""),
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
      store_tile_vector(g, LLVMBuildLoad2(g->b, g->vec, sums[r * nv + v], ""),
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

  store_tile(g, sums, c, ldc, mr, nr, load_c);
  return fn;
}

/* ------------------------------------------------------------------ few rows */

/* The sum of v's lanes, halves added pairwise (the same order everywhere). */
static LLVMValueRef lanes_sum(gemm_cg *g, LLVMValueRef v) {
  for (int width = g->w; width > 1; width /= 2) {
    LLVMValueRef idx[64];
    for (int l = 0; l < g->w; l++)
      idx[l] = LLVMConstInt(g->t_i32, (unsigned long long)(l + width / 2) % (unsigned)g->w, 0);
    v = LLVMBuildFAdd(g->b, v,
                      LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(g->vec),
                                             LLVMConstVector(idx, (unsigned)g->w), ""),
                      "");
  }
  return LLVMBuildExtractElement(g->b, v, LLVMConstInt(g->t_i32, 0, 0), "");
}

#define DOT_MAX_ROWS LK_GEMM_DOT_MAX_ROWS

/*
 * dot_RxJ(k, a, a_row, b, b_col, c, ldc, load_c): C's R x J outputs from
 * unpacked operands whose terms are contiguous, A's rows and B's columns (a
 * layer's weight [N, K] read as W^T): each output a vector of partial sums
 * along k, W terms a step (the last step masked), its lanes added at the end.
 * Packing B would copy every weight for R <= DOT_MAX_ROWS rows of use, so a
 * batch of one token reads the weight once, straight from memory.
 */
static LLVMValueRef gen_dot(gemm_cg *g, const char *symbol, int R, int J) {
  char name[80];
  snprintf(name, sizeof name, "%s.dot%dx%d", symbol, R, J);
  LLVMTypeRef params[8] = {g->t_i64, g->op_tp, g->t_i64, g->op_tp,
                           g->t_i64, g->tp,    g->t_i64, g->t_i1};
  LLVMValueRef fn = begin_function(g, name, params, 8, true);
  add_attr(g, fn, LLVMAttributeFunctionIndex, "alwaysinline");
  LLVMValueRef k = LLVMGetParam(fn, 0), a = LLVMGetParam(fn, 1), a_row = LLVMGetParam(fn, 2),
               b = LLVMGetParam(fn, 3), b_col = LLVMGetParam(fn, 4), c = LLVMGetParam(fn, 5),
               ldc = LLVMGetParam(fn, 6), load_c = LLVMGetParam(fn, 7);
  LLVMValueRef arow[DOT_MAX_ROWS], bcol[4], sums[DOT_MAX_ROWS][4];
  for (int r = 0; r < R; r++) arow[r] = op_at(g, a, LLVMBuildNSWMul(g->b, i64c(g, r), a_row, ""));
  for (int j = 0; j < J; j++) bcol[j] = op_at(g, b, LLVMBuildNSWMul(g->b, i64c(g, j), b_col, ""));
  for (int r = 0; r < R; r++)
    for (int j = 0; j < J; j++) sums[r][j] = new_var(g, g->vec, LLVMConstNull(g->vec));
  /* whole vectors, then the masked rest */
  for (int tail = 0; tail < 2; tail++) {
    gloop p;
    LLVMValueRef mask = NULL;
    if (!tail) {
      chunk_loop_begin(g, &p, k);
    } else {
      LLVMValueRef from = chunked_part(g, k);
      gloop_begin(g, &p, from, k); /* runs once when k % W != 0 */
      mask = lanes_below(g, g->w, LLVMBuildNSWSub(g->b, k, p.iv, ""));
    }
    LLVMValueRef av[DOT_MAX_ROWS], bv[4];
    for (int r = 0; r < R; r++) av[r] = load_op_vec(g, op_at(g, arow[r], p.iv), mask);
    for (int j = 0; j < J; j++) bv[j] = load_op_vec(g, op_at(g, bcol[j], p.iv), mask);
    for (int r = 0; r < R; r++)
      for (int j = 0; j < J; j++) {
        LLVMValueRef args[3] = {av[r], bv[j], LLVMBuildLoad2(g->b, g->vec, sums[r][j], "")};
        LLVMBuildStore(g->b, intrinsic(g, "llvm.fma", &g->vec, 1, args, 3), sums[r][j]);
      }
    gloop_end(g, &p, tail ? k : i64c(g, g->w));
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < J; j++) {
      LLVMValueRef dst = at2(g, c, i64c(g, r), ldc, i64c(g, j), i64c(g, 1));
      LLVMValueRef sum = lanes_sum(g, LLVMBuildLoad2(g->b, g->vec, sums[r][j], ""));
      LLVMValueRef old = load_aligned(g, g->t, dst, elem_align(g));
      store_aligned(g, LLVMBuildSelect(g->b, load_c, LLVMBuildFAdd(g->b, old, sum, ""), sum, ""),
                    dst, elem_align(g));
    }
  LLVMBuildRetVoid(g->b);
  return fn;
}

/* An unpacked product's operands, as the entry function has them. */
typedef struct unpacked_ops {
  LLVMValueRef m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, load_c;
} unpacked_ops;

/* The unpacked paths' two functions for `rows` rows (0 and 1: which). */
typedef LLVMValueRef (*rows_fn_gen)(gemm_cg *g, const char *symbol, int rows, int which);
/* The columns' loop over a group's functions, for rows of A at arow, of C at crow. */
typedef void (*rows_columns_gen)(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
                                 LLVMValueRef arow, LLVMValueRef crow);

/* C = (or +=) A @ B, rows DOT_MAX_ROWS at a time (the last group fewer), each
 * group's columns through the functions gen makes for its row count (made
 * first, each a function of its own). */
static void gen_row_groups(gemm_cg *g, const char *symbol, const unpacked_ops *o, rows_fn_gen gen,
                           rows_columns_gen columns) {
  LLVMValueRef fns[DOT_MAX_ROWS + 1][2];
  LLVMValueRef caller = g->fn;
  LLVMBasicBlockRef where = LLVMGetInsertBlock(g->b);
  LLVMBuilderRef entry = g->entry;
  g->entry = LLVMCreateBuilderInContext(g->ctx);
  for (int r = 1; r <= DOT_MAX_ROWS; r++)
    for (int q = 0; q < 2; q++) fns[r][q] = gen(g, symbol, r, q);
  LLVMDisposeBuilder(g->entry);
  g->entry = entry;
  g->fn = caller;
  LLVMPositionBuilderAtEnd(g->b, where);
  gloop i;
  gloop_begin(g, &i, i64c(g, 0), o->m);
  LLVMValueRef rows = min_i64(g, i64c(g, DOT_MAX_ROWS), LLVMBuildNSWSub(g->b, o->m, i.iv, ""));
  LLVMValueRef arow = op_at(g, o->a, LLVMBuildNSWMul(g->b, i.iv, o->a_row, ""));
  LLVMValueRef crow = at(g, o->c, LLVMBuildNSWMul(g->b, i.iv, o->ldc, ""));
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "rows_done");
  LLVMValueRef sw = LLVMBuildSwitch(g->b, rows, done, DOT_MAX_ROWS);
  for (int r = 1; r <= DOT_MAX_ROWS; r++) {
    LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "rows");
    LLVMAddCase(sw, i64c(g, r), bb);
    LLVMPositionBuilderAtEnd(g->b, bb);
    columns(g, o, r, fns[r], arow, crow);
    LLVMBuildBr(g->b, done);
  }
  LLVMPositionBuilderAtEnd(g->b, done);
  gloop_end(g, &i, i64c(g, DOT_MAX_ROWS));
}

static LLVMValueRef dot_fn(gemm_cg *g, const char *symbol, int rows, int which) {
  return gen_dot(g, symbol, rows, which ? 1 : 4);
}

/* gen_dot's columns: four at a time, then one. */
static void dot_columns(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
                        LLVMValueRef arow, LLVMValueRef crow) {
  (void)rows;
  LLVMValueRef n = o->n;
  for (int q = 0; q < 2; q++) {
    gloop j;
    if (q == 0)
      gloop_begin(g, &j, i64c(g, 0), LLVMBuildNSWSub(g->b, n, i64c(g, 3), ""));
    else
      gloop_begin(g, &j, LLVMBuildNSWSub(g->b, n, LLVMBuildSRem(g->b, n, i64c(g, 4), ""), ""), n);
    LLVMValueRef args[8] = {o->k,     arow,
                            o->a_row, op_at(g, o->b, LLVMBuildNSWMul(g->b, j.iv, o->b_col, "")),
                            o->b_col, at(g, crow, j.iv),
                            o->ldc,   o->load_c};
    call(g, fns[q], args, 8);
    gloop_end(g, &j, i64c(g, q ? 1 : 4));
  }
}

/*
 * sweep_RxV(k, a, a_row, a_col, b, b_row, c, ldc, load_c, cols): C's R rows x
 * cols columns (cols <= V vectors) from unpacked operands where B's rows are
 * contiguous (a token against a layer stored [in, out]): for each term p, B's
 * row p scaled by A's R terms p, added into R x V vectors of sums. B streams
 * through once, a row at a time, where packing it would copy every weight for
 * R <= DOT_MAX_ROWS rows of use; the edge variant masks the columns.
 */
static LLVMValueRef gen_sweep(gemm_cg *g, const char *symbol, int R, int V, bool edge) {
  char name[80];
  snprintf(name, sizeof name, "%s.sweep%dx%d%s", symbol, R, V, edge ? "e" : "");
  LLVMTypeRef params[10] = {g->t_i64, g->op_tp, g->t_i64, g->t_i64, g->op_tp,
                            g->t_i64, g->tp,    g->t_i64, g->t_i1,  g->t_i64};
  LLVMValueRef fn = begin_function(g, name, params, 10, true);
  LLVMValueRef k = LLVMGetParam(fn, 0), a = LLVMGetParam(fn, 1), a_row = LLVMGetParam(fn, 2),
               a_col = LLVMGetParam(fn, 3), b = LLVMGetParam(fn, 4), b_row = LLVMGetParam(fn, 5),
               c = LLVMGetParam(fn, 6), ldc = LLVMGetParam(fn, 7), load_c = LLVMGetParam(fn, 8),
               cols = LLVMGetParam(fn, 9);
  LLVMValueRef mask[8] = {NULL}, sums[DOT_MAX_ROWS][8];
  for (int v = 0; edge && v < V; v++)
    mask[v] = lanes_below(g, g->w, LLVMBuildNSWSub(g->b, cols, i64c(g, v * g->w), ""));
  for (int r = 0; r < R; r++)
    for (int v = 0; v < V; v++) sums[r][v] = new_var(g, g->vec, LLVMConstNull(g->vec));
  gloop p;
  gloop_begin(g, &p, i64c(g, 0), k);
  LLVMValueRef brow = op_at(g, b, LLVMBuildNSWMul(g->b, p.iv, b_row, ""));
  LLVMValueRef acol = op_at(g, a, LLVMBuildNSWMul(g->b, p.iv, a_col, ""));
  LLVMValueRef bv[8], av[DOT_MAX_ROWS];
  for (int v = 0; v < V; v++) bv[v] = load_op_vec(g, op_at(g, brow, i64c(g, v * g->w)), mask[v]);
  for (int r = 0; r < R; r++) {
    LLVMValueRef term = load_op(g, op_at(g, acol, LLVMBuildNSWMul(g->b, i64c(g, r), a_row, "")));
    LLVMValueRef one =
        LLVMBuildInsertElement(g->b, LLVMGetUndef(g->vec), term, LLVMConstInt(g->t_i32, 0, 0), "");
    av[r] = LLVMBuildShuffleVector(g->b, one, LLVMGetUndef(g->vec),
                                   LLVMConstNull(LLVMVectorType(g->t_i32, (unsigned)g->w)), "");
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < V; v++) {
      LLVMValueRef args[3] = {av[r], bv[v], LLVMBuildLoad2(g->b, g->vec, sums[r][v], "")};
      LLVMBuildStore(g->b, intrinsic(g, "llvm.fma", &g->vec, 1, args, 3), sums[r][v]);
    }
  gloop_end(g, &p, i64c(g, 1));
  for (int r = 0; r < R; r++) {
    LLVMValueRef crow = at(g, c, LLVMBuildNSWMul(g->b, i64c(g, r), ldc, ""));
    for (int v = 0; v < V; v++)
      store_tile_vector(g, LLVMBuildLoad2(g->b, g->vec, sums[r][v], ""),
                        at(g, crow, i64c(g, v * g->w)), mask[v], load_c);
  }
  LLVMBuildRetVoid(g->b);
  return fn;
}

/* Vectors of columns per sweep: more rows keep fewer (R x V sums in registers). */
static int sweep_vectors(int rows) { return rows <= 2 ? 8 : 4; }

static LLVMValueRef sweep_fn(gemm_cg *g, const char *symbol, int rows, int which) {
  return gen_sweep(g, symbol, rows, sweep_vectors(rows), which);
}

/* One of gen_sweep's functions over cols columns from column `from`. */
static void call_sweep(gemm_cg *g, const unpacked_ops *o, LLVMValueRef fn, LLVMValueRef arow,
                       LLVMValueRef crow, LLVMValueRef from, LLVMValueRef cols) {
  LLVMValueRef args[10] = {
      o->k,   arow,      o->a_row, o->a_col, op_at(g, o->b, from), o->b_row, at(g, crow, from),
      o->ldc, o->load_c, cols};
  call(g, fn, args, 10);
}

/* gen_sweep's columns: sweep_vectors(rows) vectors at a time, the last block
 * masked. */
static void sweep_columns(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
                          LLVMValueRef arow, LLVMValueRef crow) {
  LLVMValueRef n = o->n;
  int width = sweep_vectors(rows) * g->w;
  gloop j;
  gloop_begin(g, &j, i64c(g, 0), LLVMBuildNSWSub(g->b, n, i64c(g, width - 1), ""));
  call_sweep(g, o, fns[0], arow, crow, j.iv, i64c(g, width));
  gloop_end(g, &j, i64c(g, width));
  LLVMValueRef from = LLVMBuildNSWSub(g->b, n, LLVMBuildSRem(g->b, n, i64c(g, width), ""), "");
  LLVMBasicBlockRef join = if_begin(g, LLVMBuildICmp(g->b, LLVMIntSLT, from, n, ""));
  call_sweep(g, o, fns[1], arow, crow, from, LLVMBuildNSWSub(g->b, n, from, ""));
  if_end(g, join);
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

/* The block function's arguments (lk_gemm_args), loaded. */
typedef struct entry_args {
  LLVMValueRef m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, mc, kc, nc, pack, accumulate;
  LLVMValueRef args; /* the pointer to them */
} entry_args;

/* The exported block function `symbol` with its arguments loaded (pack_type:
 * the pointer type of the packed panels), and C zeroed for an empty sum (left
 * as it is when accumulating); returns the function. */
static LLVMValueRef begin_entry(gemm_cg *g, const char *symbol, LLVMTypeRef pack_type,
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
                      LLVMValueRef micro, LLVMValueRef micro_in_place) {
  entry_args e;
  LLVMValueRef fn = begin_entry(g, symbol, g->tp, &e);
  LLVMValueRef m = e.m, n = e.n, k = e.k, a = e.a, a_row = e.a_row, a_col = e.a_col, b = e.b,
               b_row = e.b_row, b_col = e.b_col, c = e.c, ldc = e.ldc, mc = e.mc, kc = e.kc,
               nc = e.nc, pack = e.pack, accumulate = e.accumulate;
  /* widened operands are always packed (lk_gemm_b_in_place) */
  LLVMValueRef in_place = LLVMConstInt(g->t_i1, 0, 0);
  if (micro_in_place)
    in_place = LLVMBuildAnd(
        g->b, LLVMBuildICmp(g->b, LLVMIntNE, arg_i64(g, e.args, ARG_B_IN_PLACE), i64c(g, 0), ""),
        LLVMBuildICmp(g->b, LLVMIntEQ, b_col, i64c(g, 1), ""), "");
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
  LLVMBasicBlockRef few_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "few_rows");
  LLVMBasicBlockRef blocked_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "blocked");
  LLVMBuildCondBr(g->b, few, few_bb, blocked_bb);
  LLVMPositionBuilderAtEnd(g->b, few_bb);
  unpacked_ops ops = {m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, accumulate};
  gen_row_groups(g, symbol, &ops, dot_fn, dot_columns);
  LLVMBuildRetVoid(g->b);
  LLVMPositionBuilderAtEnd(g->b, blocked_bb);

  /* lk_gemm_swept: a few rows against B's contiguous rows: no packing */
  LLVMValueRef swept =
      LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSLE, m, i64c(g, DOT_MAX_ROWS), ""),
                   LLVMBuildICmp(g->b, LLVMIntEQ, b_col, i64c(g, 1), ""), "");
  swept = LLVMBuildAnd(g->b, swept, LLVMBuildICmp(g->b, LLVMIntSGT, k, i64c(g, 0), ""), "");
  LLVMBasicBlockRef swept_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "swept");
  LLVMBasicBlockRef packed_bb = LLVMAppendBasicBlockInContext(g->ctx, fn, "packed_entry");
  LLVMBuildCondBr(g->b, swept, swept_bb, packed_bb);
  LLVMPositionBuilderAtEnd(g->b, swept_bb);
  gen_row_groups(g, symbol, &ops, sweep_fn, sweep_columns);
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
    LLVMBasicBlockRef packed = if_begin(g, LLVMBuildICmp(g->b, LLVMIntSLT, pack_from, ncur, ""));
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

static LLVMValueRef round_up_iv(gemm_cg *g, LLVMValueRef v, int to) {
  return LLVMBuildMul(
      g->b, LLVMBuildSDiv(g->b, LLVMBuildNSWAdd(g->b, v, i64c(g, to - 1), ""), i64c(g, to), ""),
      i64c(g, to), "");
}

/* amx_pack_a(mc, kc, a, row, col, dst): A's block as tile rows. */
static LLVMValueRef gen_amx_pack_a(gemm_cg *g, const char *symbol) {
  char name[64];
  snprintf(name, sizeof name, "%s.amx_pack_a", symbol);
  LLVMTypeRef params[6] = {g->t_i64, g->t_i64, g->op_tp, g->t_i64, g->t_i64, g->op_tp};
  LLVMValueRef fn = begin_function(g, name, params, 6, true);
  LLVMValueRef mc = LLVMGetParam(fn, 0), kc = LLVMGetParam(fn, 1), a = LLVMGetParam(fn, 2),
               row = LLVMGetParam(fn, 3), col = LLVMGetParam(fn, 4), dst = LLVMGetParam(fn, 5);
  LLVMValueRef kp = round_up_iv(g, kc, LK_GEMM_AMX_K);
  LLVMValueRef rows = round_up_iv(g, mc, g->d->mr);
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
    transpose_lanes(g, v, T);
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
static LLVMValueRef gen_amx_pack_b(gemm_cg *g, const char *symbol) {
  char name[64];
  snprintf(name, sizeof name, "%s.amx_pack_b", symbol);
  LLVMTypeRef params[6] = {g->t_i64, g->t_i64, g->op_tp, g->t_i64, g->t_i64, g->op_tp};
  LLVMValueRef fn = begin_function(g, name, params, 6, true);
  LLVMValueRef kc = LLVMGetParam(fn, 0), nc = LLVMGetParam(fn, 1), b = LLVMGetParam(fn, 2),
               row = LLVMGetParam(fn, 3), col = LLVMGetParam(fn, 4), dst = LLVMGetParam(fn, 5);
  const int NR = LK_GEMM_AMX_TILE;
  LLVMValueRef kp = round_up_iv(g, kc, LK_GEMM_AMX_K);
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
      transpose_lanes(g, v, 16);
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
static LLVMValueRef begin_paired_micro(gemm_cg *g, const char *symbol, const char *kind,
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
static LLVMValueRef gen_amx_micro(gemm_cg *g, const char *symbol) {
  LLVMValueRef p[8];
  LLVMValueRef fn = begin_paired_micro(g, symbol, "amx_micro", p);
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
static LLVMValueRef gen_pairs_micro(gemm_cg *g, const char *symbol) {
  LLVMValueRef p[8];
  LLVMValueRef fn = begin_paired_micro(g, symbol, "pairs_micro", p);
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
  store_tile(g, sums, c, ldc, mr, nr, load_c);
  return fn;
}

/* The loops around a paired tile's microkernel (AMX's or the pair
 * products'): the five of the F32 GEMM, with panels padded to whole steps of
 * LK_GEMM_AMX_K terms. */
static void gen_paired_entry(gemm_cg *g, const char *symbol, LLVMValueRef pack_a,
                             LLVMValueRef pack_b, LLVMValueRef micro) {
  entry_args e;
  begin_entry(g, symbol, g->op_tp, &e);
  LLVMValueRef m = e.m, n = e.n, k = e.k, a = e.a, a_row = e.a_row, a_col = e.a_col, b = e.b,
               b_row = e.b_row, b_col = e.b_col, c = e.c, ldc = e.ldc, mc = e.mc, kc = e.kc,
               nc = e.nc, pack = e.pack, accumulate = e.accumulate;
  const int MR = g->d->mr, NR = g->d->nr;
  LLVMValueRef kcp = round_up_iv(g, kc, LK_GEMM_AMX_K);
  LLVMValueRef pb = pack,
               pa = op_at(g, pack, LLVMBuildNSWMul(g->b, round_up_iv(g, nc, NR), kcp, ""));
  gloop jc;
  gloop_begin(g, &jc, i64c(g, 0), n);
  LLVMValueRef ncur = min_i64(g, nc, LLVMBuildNSWSub(g->b, n, jc.iv, ""));
  {
    gloop pc;
    gloop_begin(g, &pc, i64c(g, 0), k);
    LLVMValueRef kcur = min_i64(g, kc, LLVMBuildNSWSub(g->b, k, pc.iv, ""));
    LLVMValueRef kp = round_up_iv(g, kcur, LK_GEMM_AMX_K);
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
    LLVMValueRef pack_a = gen_amx_pack_a(&g, symbol), pack_b = gen_amx_pack_b(&g, symbol),
                 micro = d->amx ? gen_amx_micro(&g, symbol) : gen_pairs_micro(&g, symbol);
    gen_paired_entry(&g, symbol, pack_a, pack_b, micro);
  } else {
    LLVMValueRef pack_a = gen_pack_a(&g, symbol), pack_b = gen_pack_b(&g, symbol),
                 micro = gen_micro(&g, symbol, false),
                 micro_in_place = d->in_dtype == d->dtype ? gen_micro(&g, symbol, true) : NULL;
    gen_entry(&g, symbol, pack_a, pack_b, micro, micro_in_place);
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
