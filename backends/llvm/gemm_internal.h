/*
 * What the GEMM code generator's files share (backends/llvm/gemm.c and the
 * gemm_*.c beside it, one file per part of the design gemm.c describes): the
 * generator's state, the small IR-building helpers every part uses (static
 * inline, so each file has its own and none is an exported symbol), and the
 * functions one part calls in another.
 */
#ifndef LOOM_BACKENDS_LLVM_GEMM_INTERNAL_H
#define LOOM_BACKENDS_LLVM_GEMM_INTERNAL_H

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

static inline LLVMValueRef i64c(const gemm_cg *g, int64_t v) {
  return LLVMConstInt(g->t_i64, (unsigned long long)v, 1);
}

static inline void add_attr(gemm_cg *g, LLVMValueRef fn, LLVMAttributeIndex where,
                            const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(fn, where, LLVMCreateEnumAttribute(g->ctx, kind, 0));
}

static inline LLVMValueRef min_i64(gemm_cg *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, a, b, ""), a, b, "");
}

/* The mask of n lanes l < limit (an i64). */
static inline LLVMValueRef lanes_below(gemm_cg *g, int n, LLVMValueRef limit) {
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
static inline LLVMValueRef at(gemm_cg *g, LLVMValueRef p, LLVMValueRef i) {
  return LLVMBuildInBoundsGEP2(g->b, g->t, p, &i, 1, "");
}

/* &p[i * si + j * sj] */
static inline LLVMValueRef at2(gemm_cg *g, LLVMValueRef p, LLVMValueRef i, LLVMValueRef si,
                               LLVMValueRef j, LLVMValueRef sj) {
  return at(g, p,
            LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, i, si, ""),
                            LLVMBuildNSWMul(g->b, j, sj, ""), ""));
}

static inline LLVMValueRef vec_ptr(gemm_cg *g, LLVMValueRef p) {
  return LLVMBuildBitCast(g->b, p, LLVMPointerType(g->vec, 0), "");
}

/* &p[i] and &p[i * si + j * sj] for an operand (A or B) pointer p */
static inline LLVMValueRef op_at(gemm_cg *g, LLVMValueRef p, LLVMValueRef i) {
  return LLVMBuildInBoundsGEP2(g->b, g->op_t, p, &i, 1, "");
}

static inline LLVMValueRef op_at2(gemm_cg *g, LLVMValueRef p, LLVMValueRef i, LLVMValueRef si,
                                  LLVMValueRef j, LLVMValueRef sj) {
  return op_at(g, p,
               LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, i, si, ""),
                               LLVMBuildNSWMul(g->b, j, sj, ""), ""));
}

static inline LLVMValueRef load_aligned(gemm_cg *g, LLVMTypeRef t, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, t, p, "");
  LLVMSetAlignment(v, align);
  return v;
}

static inline void store_aligned(gemm_cg *g, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMSetAlignment(LLVMBuildStore(g->b, v, p), align);
}

static inline unsigned elem_align(const gemm_cg *g) {
  return (unsigned)loom_dtype_size(g->d->dtype);
}
static inline unsigned op_align(const gemm_cg *g) {
  return (unsigned)loom_dtype_size(g->d->in_dtype);
}

static inline LLVMValueRef intrinsic(gemm_cg *g, const char *name, LLVMTypeRef *types,
                                     size_t ntypes, LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, types, ntypes);
  return LLVMBuildCall2(g->b, LLVMIntrinsicGetType(g->ctx, id, types, ntypes), fn, args, nargs, "");
}

/* An operand's value(s) v (of op_t, or vectors of it) as t: BF16's bits are
 * a float's top half; F16 through LLVM's half (F16C). */
static inline LLVMValueRef widen(gemm_cg *g, LLVMValueRef v, unsigned lanes) {
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
static inline LLVMValueRef load_op_vec(gemm_cg *g, LLVMValueRef p, LLVMValueRef mask) {
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

static inline LLVMValueRef load_op(gemm_cg *g, LLVMValueRef p) {
  return widen(g, load_aligned(g, g->op_t, p, op_align(g)), 0);
}

static inline LLVMValueRef call(gemm_cg *g, LLVMValueRef fn, LLVMValueRef *args, unsigned n) {
  return LLVMBuildCall2(g->b, LLVMGlobalGetValueType(fn), fn, args, n, "");
}

/* A new internal function; the builder at its first block, after the
 * entry block that holds its allocas. */
static inline LLVMValueRef begin_function(gemm_cg *g, const char *name, LLVMTypeRef *params,
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

static inline LLVMValueRef new_var(gemm_cg *g, LLVMTypeRef t, LLVMValueRef init) {
  LLVMValueRef v = LLVMBuildAlloca(g->entry, t, "");
  LLVMBuildStore(g->b, init, v);
  return v;
}

/* for (iv = lo; iv < hi; iv += step): the builder in the body; gloop_end closes it. */
typedef struct gloop {
  LLVMValueRef var, iv;
  LLVMBasicBlockRef header, exit;
} gloop;

static inline void gloop_begin(gemm_cg *g, gloop *l, LLVMValueRef lo, LLVMValueRef hi) {
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

static inline void gloop_end(gemm_cg *g, gloop *l, LLVMValueRef step) {
  LLVMBuildStore(g->b, LLVMBuildNSWAdd(g->b, l->iv, step, ""), l->var);
  LLVMBuildBr(g->b, l->header);
  LLVMPositionBuilderAtEnd(g->b, l->exit);
}

/* if (cond) { ... }: the builder in the then block; if_end joins. */
static inline LLVMBasicBlockRef if_begin(gemm_cg *g, LLVMValueRef cond) {
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "then");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "join");
  LLVMBuildCondBr(g->b, cond, then, join);
  LLVMPositionBuilderAtEnd(g->b, then);
  return join;
}

static inline void if_end(gemm_cg *g, LLVMBasicBlockRef join) {
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, join);
}

/* ------------------------------------------------------------------ across the files */

/* gemm_pack.c: B's and A's packing, and the transposes the microkernel's
 * stores share */
void lm_gemm_transpose_lanes(gemm_cg *g, LLVMValueRef *v, int w);

/*
 * Lines row[0 .. nblk * W), each contiguous, become columns: for q < W,
 * dst[(p0 + q) * stride + r] = row[r][p0 + q] for r < nblk * W, a W x W
 * block at a time through registers. Stores go in order of q, so where a
 * row of dst is shorter than nblk * W (stride < nblk * W) the extra lanes
 * land on the next row's start, which the next store overwrites.
 */
void lm_gemm_transpose_lines(gemm_cg *g, const LLVMValueRef *row, int nblk, LLVMValueRef p0,
                             LLVMValueRef dst, int64_t stride);
void lm_gemm_chunk_loop_begin(gemm_cg *g, gloop *l, LLVMValueRef n);
LLVMValueRef lm_gemm_chunked_part(gemm_cg *g, LLVMValueRef n);
LLVMValueRef lm_gemm_gen_pack_b(gemm_cg *g, const char *symbol);
LLVMValueRef lm_gemm_gen_pack_b_rows(gemm_cg *g, const char *symbol);
LLVMValueRef lm_gemm_gen_pack_a(gemm_cg *g, const char *symbol);

/* gemm.c: the microkernel's stores, which the few-row paths and the BF16
 * pairs share */
void lm_gemm_store_tile_vector(gemm_cg *g, LLVMValueRef sum, LLVMValueRef dst, LLVMValueRef mask,
                               LLVMValueRef load_c);
void lm_gemm_store_tile(gemm_cg *g, LLVMValueRef *sums, LLVMValueRef c, LLVMValueRef ldc,
                        LLVMValueRef mr, LLVMValueRef nr, LLVMValueRef load_c);

#define DOT_MAX_ROWS LK_GEMM_DOT_MAX_ROWS

/* An unpacked product's operands, as the entry function has them. */
typedef struct unpacked_ops {
  LLVMValueRef m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, load_c;
} unpacked_ops;

/* The unpacked paths' two functions for `rows` rows (0 and 1: which). */
typedef LLVMValueRef (*rows_fn_gen)(gemm_cg *g, const char *symbol, int rows, int which);
/* The columns' loop over a group's functions, for rows of A at arow, of C at crow. */
typedef void (*rows_columns_gen)(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
                                 LLVMValueRef arow, LLVMValueRef crow);

/* gemm_few_rows.c: the unpacked paths for few rows (dot products) and for
 * unpacked operands (sweeps), over groups of rows */
void lm_gemm_gen_row_groups(gemm_cg *g, const char *symbol, const unpacked_ops *o, rows_fn_gen gen,
                            rows_columns_gen columns);
LLVMValueRef lm_gemm_dot_fn(gemm_cg *g, const char *symbol, int rows, int which);
void lm_gemm_dot_columns(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
                         LLVMValueRef arow, LLVMValueRef crow);
LLVMValueRef lm_gemm_sweep_fn(gemm_cg *g, const char *symbol, int rows, int which);
void lm_gemm_sweep_columns(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
                           LLVMValueRef arow, LLVMValueRef crow);

/* The block function's arguments (lk_gemm_args), loaded. */
typedef struct entry_args {
  LLVMValueRef m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, mc, kc, nc, pack, accumulate;
  LLVMValueRef args; /* the pointer to them */
} entry_args;

/* gemm.c: the block function's entry */
LLVMValueRef lm_gemm_begin_entry(gemm_cg *g, const char *symbol, LLVMTypeRef pack_type,
                                 entry_args *e);

/* gemm_amx.c: AMX's packing and microkernel */
LLVMValueRef lm_gemm_round_up_iv(gemm_cg *g, LLVMValueRef v, int to);
LLVMValueRef lm_gemm_gen_amx_pack_a(gemm_cg *g, const char *symbol);
LLVMValueRef lm_gemm_gen_amx_pack_b(gemm_cg *g, const char *symbol);
LLVMValueRef lm_gemm_begin_paired_micro(gemm_cg *g, const char *symbol, const char *kind,
                                        LLVMValueRef p[8]);
LLVMValueRef lm_gemm_gen_amx_micro(gemm_cg *g, const char *symbol);

/* gemm_bf16.c: AVX512-BF16's microkernel, and the loops of both paired tiles */
LLVMValueRef lm_gemm_gen_pairs_micro(gemm_cg *g, const char *symbol);
void lm_gemm_gen_paired_entry(gemm_cg *g, const char *symbol, LLVMValueRef pack_a,
                              LLVMValueRef pack_b, LLVMValueRef micro);

#endif
