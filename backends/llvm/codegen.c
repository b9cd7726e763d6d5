/*
 * Kernel -> LLVM IR: the functions, the iteration over output points and the
 * reduction loops. What one instruction turns into lives in ops.c.
 *
 * The module defines two functions:
 *   void @<symbol>(i8** args, i64 begin, i64 end)
 *       loads the slot pointers once and calls
 *   internal void @<symbol>.body(i8* noalias slot0, ..., i64 begin, i64 end)
 *       which is always inlined: inlining turns the noalias parameters into
 *       alias scopes on every load and store, so LLVM knows that the output does
 *       not overlap the inputs and can vectorize and hoist freely.
 *
 * Output points are visited in row-major order over the outer dims. `begin` is
 * unravelled into a multi-index once; then the innermost outer dim runs as a
 * tight loop (the one LLVM vectorizes) up to the end of its row or of the
 * range, and the multi-index is advanced with a carry. No division per element.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>
#include <llvm-c/IRReader.h>

#include "backends/llvm/llvm_internal.h"

LLVMValueRef lm_cg_fail(lm_cg *g, const char *fmt, ...) {
  if (!g->failed) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lm_set_err(g->err, g->errlen, "kernel %s: %s", g->symbol, msg);
    g->failed = true;
  }
  return NULL;
}

LLVMValueRef lm_entry_alloca(lm_cg *g, LLVMTypeRef t, const char *name) {
  return LLVMBuildAlloca(g->entry, t, name);
}

static LLVMValueRef const_i64(const lm_cg *g, int64_t v) {
  return LLVMConstInt(g->t_i64, (unsigned long long)v, 1);
}

static void add_attr(lm_cg *g, LLVMValueRef fn, LLVMAttributeIndex where, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(fn, where, LLVMCreateEnumAttribute(g->ctx, kind, 0));
}

/* ------------------------------------------------------------------ plan */

/* One reduction over the dims from `first_dim` on: the kernel's own, or a row
 * statistic (over the last dim). */
typedef struct reduction {
  int value;             /* the instruction accumulated */
  unsigned char *needed; /* the instructions it needs */
  int first_dim;
  bool reports_index;    /* ARGMAX/ARGMIN: steps see the reduced linear index */
  LLVMValueRef store_at; /* a row stat whose values the row's points reuse: each
                            is stored at output index store_at + j as it is summed */
  int chunk_dim;         /* a chunked sum (lm_acc_chunked): the reduced dim whose loop
                            runs in steps of chunk_step, flushing after each; else -1 */
  int64_t chunk_step;
  lm_acc acc;
} reduction;

/* What the generated code evaluates where. */
typedef struct plan {
  unsigned char *body_needed; /* instructions the per-point value needs */
  unsigned char *epi_needed;  /* instructions the result needs (reductions only) */
  reduction main;             /* the kernel's reduction */
  reduction stat[LK_MAX_STATS];
  int cached_stat; /* a stat whose value the body needs too (softmax's exp), or -1 */
  bool fold_tail;  /* rows run their last partial vector masked */
  bool block_rows; /* whole blocks of short rows run as one loop (gen_block_or_row) */
  int keep_arm;    /* an update in place (lk_kernel_keep_arm): only the other arm is stored */
  /* what gen_point does: the usual, or a step of a column reduction */
  enum { POINT_STORE, POINT_ZERO, POINT_ADD, POINT_FLUSH, POINT_ROUND, POINT_FINISH } point;
  LLVMValueRef col_total, col_comp; /* chunked column sums: doubles per output of the range */
  int col_chunk_dim;                /* as reduction.chunk_dim, or -1 */
  int64_t col_chunk_step;
} plan;

/* The points a reduction over dims [from, to) sums, for the accumulator's
 * choices: a run-time extent may be any size, so it counts as unbounded. */
static int64_t reduced_points(const lk_kernel *k, int from, int to) {
  return lk_dims_sized(k, from, to) ? INT64_MAX : lk_extent_product(k, from, to);
}

/* Dim d's extent: a constant, or a generic kernel's size read at run time. */
static LLVMValueRef extent(lm_cg *g, int d) {
  if (lk_dim_is_sized(g->k, d)) return lm_emit_size(g, g->k->dom_size[d] - 1);
  return const_i64(g, g->k->dom[d]);
}

/* Emits the needed instructions up to `target` in the current context (dims and
 * acc as set in g) and returns the target's value, or NULL after a failure. */
static LLVMValueRef evaluate(lm_cg *g, const unsigned char *needed, int target) {
  memset(g->val, 0, (size_t)g->k->ninst * sizeof *g->val);
  for (int i = 0; i <= target; i++) {
    if (!needed[i]) continue;
    if (i == g->cached_inst) /* stored by the row's statistic pass: read it back */
      g->val[i] = lm_emit_load(g, g->k->out_dtype, 0, g->cached_at);
    else if (g->guard[i].ncond > 0)
      g->val[i] = lm_emit_guarded_load(g, i);
    else if (g->pass_to[i] >= 0)
      g->val[i] = g->val[g->pass_to[i]];
    else
      g->val[i] = lm_emit_inst(g, i);
    if (!g->val[i]) return NULL;
  }
  return g->val[target];
}

/* ------------------------------------------------------------------ loops */

typedef struct loop {
  LLVMBasicBlockRef header, exit;
  LLVMValueRef iv_slot, iv;
} loop;

/* for (iv = lo; iv < hi; iv++): leaves the builder in the body; iv is l->iv. */
static void loop_begin(lm_cg *g, loop *l, LLVMValueRef lo, LLVMValueRef hi, const char *name) {
  l->iv_slot = lm_entry_alloca(g, g->t_i64, name);
  LLVMBuildStore(g->b, lo, l->iv_slot);
  l->header = LLVMAppendBasicBlockInContext(g->ctx, g->fn, name);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "body");
  l->exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
  LLVMBuildBr(g->b, l->header);
  LLVMPositionBuilderAtEnd(g->b, l->header);
  l->iv = LLVMBuildLoad2(g->b, g->t_i64, l->iv_slot, "");
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, l->iv, hi, ""), body, l->exit);
  LLVMPositionBuilderAtEnd(g->b, body);
}

/* `llvm.loop` metadata asking the unroller to leave a loop alone and, with
 * `fold_tail`, the vectorizer to run the last partial vector masked instead of
 * a scalar remainder loop. */
typedef enum tail { TAIL_DEFAULT, TAIL_MASKED, TAIL_SCALAR } tail;

static LLVMValueRef loop_metadata(lm_cg *g, tail t, int width) {
  LLVMMetadataRef self = LLVMTemporaryMDNode(g->ctx, NULL, 0);
  const char *vw = "llvm.loop.vectorize.width";
  LLVMMetadataRef width_ops[2] = {
      LLVMMDStringInContext2(g->ctx, vw, strlen(vw)),
      LLVMValueAsMetadata(LLVMConstInt(g->t_i32, (unsigned long long)width, 0)),
  };
  LLVMMetadataRef name = LLVMMDStringInContext2(g->ctx, "llvm.loop.unroll.disable", 24);
  const char *pred = "llvm.loop.vectorize.predicate.enable";
  LLVMMetadataRef pred_ops[2] = {
      LLVMMDStringInContext2(g->ctx, pred, strlen(pred)),
      LLVMValueAsMetadata(LLVMConstInt(g->t_i1, t == TAIL_MASKED, 0)),
  };
  LLVMMetadataRef ops[4] = {self, LLVMMDNodeInContext2(g->ctx, &name, 1)};
  size_t n = 2;
  if (t != TAIL_DEFAULT) ops[n++] = LLVMMDNodeInContext2(g->ctx, pred_ops, 2);
  if (width > 0) ops[n++] = LLVMMDNodeInContext2(g->ctx, width_ops, 2);
  LLVMMetadataRef node = LLVMMDNodeInContext2(g->ctx, ops, n);
  LLVMMetadataReplaceAllUsesWith(self, node); /* a loop ID names itself first */
  return LLVMMetadataAsValue(g->ctx, node);
}

/* Only reduction loops may be unrolled: unrolling gave a memory-bound sum more
 * loads in flight (sum_16M 1.8 -> 1.5 ms), while everywhere else it grew remainder
 * loops and short dims for nothing and made compiles 1.6x slower. width > 0:
 * the vector width the vectorizer is to use. */
static void loop_end_step(lm_cg *g, loop *l, bool may_unroll, tail t, int width, int64_t step) {
  LLVMBuildStore(g->b, LLVMBuildNSWAdd(g->b, l->iv, const_i64(g, step), ""), l->iv_slot);
  LLVMValueRef back = LLVMBuildBr(g->b, l->header);
  if (!may_unroll)
    LLVMSetMetadata(back, LLVMGetMDKindIDInContext(g->ctx, "llvm.loop", 9),
                    loop_metadata(g, t, width));
  LLVMPositionBuilderAtEnd(g->b, l->exit);
}

static void loop_end_tail(lm_cg *g, loop *l, bool may_unroll, tail t, int width) {
  loop_end_step(g, l, may_unroll, t, width, 1);
}

static void loop_end(lm_cg *g, loop *l, bool may_unroll) {
  loop_end_tail(g, l, may_unroll, TAIL_DEFAULT, 0);
}

/*
 * Where a sum over dims [first, ndim) of more than `chunk` points is cut into
 * chunks of at most `chunk` points: the deepest dim d whose loop holds more,
 * taken `*step` iterations at a time (the dims inside it whole). Returns -1
 * when the whole sum fits one chunk.
 */
static int chunk_split(const lk_kernel *k, int first, int64_t chunk, int64_t *step) {
  int64_t inner = 1;
  for (int d = k->ndim - 1; d >= first; d--) {
    if (lk_dim_is_sized(k, d) || inner * k->dom[d] > chunk) { /* a run-time extent may hold more */
      *step = chunk / inner > 1 ? chunk / inner : 1;
      return d;
    }
    inner *= k->dom[d];
  }
  return -1;
}

/* for (c = 0; c < n; c += step) for (iv = c; iv < min(c + step, n); iv++): leaves the
 * builder in the inner body; close with loop_end(inner) then loop_end_step(chunks). */
static void chunk_loops_begin(lm_cg *g, loop *chunks, loop *inner, LLVMValueRef end, int64_t step,
                              const char *name) {
  loop_begin(g, chunks, const_i64(g, 0), end, "chunk");
  LLVMValueRef hi = LLVMBuildNSWAdd(g->b, chunks->iv, const_i64(g, step), "");
  hi = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, hi, end, ""), hi, end, "");
  loop_begin(g, inner, chunks->iv, hi, name);
}

/* Rows of these lengths run their last partial vector masked: an im2col row of
 * 14 would otherwise never reach the 16-wide vector loop. Shorter rows stay
 * scalar, where the mask's set-up would cost more than the few elements. */
#define FOLD_TAIL_FROM 8
#define FOLD_TAIL_BELOW 128

/* Whether masking the rows' last vector pays. Not when a load strides along
 * the row or an index divides the row's dim (pooling windows and their
 * gradients): LLVM 14 cannot mask an interleaved access on x86 and gathers
 * instead, which measured slower than the scalar remainder (the CNN step's
 * pooling kernels 0.29 -> 0.44 and 0.43 -> 0.93 ms). */
static bool fold_tail_pays(const lk_kernel *k) {
  int last = k->nouter - 1;
  if (last < 0 || lk_dim_is_sized(k, last) || k->dom[last] < FOLD_TAIL_FROM ||
      k->dom[last] >= FOLD_TAIL_BELOW)
    return false;
  if (k->dom[last] % 16 == 0) /* no tail for any vector width: masks would only cost */
    return false;
  bool *along = calloc((size_t)k->ninst, sizeof *along); /* depends on the row's index */
  lk_affine *af = malloc(sizeof *af * (size_t)(k->nbody > 0 ? k->nbody : 1));
  bool pays = along && af;
  if (pays) lk_affine_analyze(k, af);
  for (int i = 0; i < k->ninst && pays; i++) {
    const lk_inst *in = &k->inst[i];
    along[i] =
        (in->op == LK_DIM && in->imm_i == last) ||
        (in->op != LK_LOAD && ((in->a >= 0 && along[in->a]) || (in->b >= 0 && along[in->b]) ||
                               (in->c >= 0 && along[in->c])));
    if ((in->op == LK_IDIV || in->op == LK_IMOD) && along[i]) pays = false;
    if (in->op == LK_LOAD && in->a < k->nbody && af[in->a].ok)
      pays = af[in->a].c[last] >= -1 && af[in->a].c[last] <= 1;
  }
  free(along);
  free(af);
  return pays;
}

/* ------------------------------------------------------------------ points */

/* Row-major linear index over the reduced dims (ARGMAX/ARGMIN report it). */
static LLVMValueRef reduced_linear_index(lm_cg *g, int first_dim) {
  const lk_kernel *k = g->k;
  LLVMValueRef lin = const_i64(g, 0);
  for (int d = first_dim; d < k->ndim; d++)
    lin = LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, lin, extent(g, d), ""), g->dim[d], "");
  return lin;
}

/* Loops over reduced dims d.. (innermost last, the tight loop) and accumulates. */
static void gen_reduced_dims(lm_cg *g, reduction *r, int d) {
  const lk_kernel *k = g->k;
  if (d == k->ndim) {
    LLVMValueRef x = evaluate(g, r->needed, r->value);
    if (!x) return;
    if (r->store_at)
      lm_emit_store_output(g, LLVMBuildNSWAdd(g->b, r->store_at, g->dim[d - 1], ""), x);
    lm_acc_step(g, &r->acc, x, r->reports_index ? reduced_linear_index(g, r->first_dim) : NULL);
    return;
  }
  loop l;
  if (d == r->chunk_dim && lm_acc_chunked(&r->acc)) { /* each chunk, then a flush */
    loop chunks;
    chunk_loops_begin(g, &chunks, &l, extent(g, d), r->chunk_step, "red");
    g->dim[d] = l.iv;
    gen_reduced_dims(g, r, d + 1);
    loop_end(g, &l, true);
    lm_acc_flush(g, &r->acc);
    loop_end_step(g, &chunks, false, TAIL_DEFAULT, 0, r->chunk_step);
    g->dim[d] = NULL;
    return;
  }
  loop_begin(g, &l, const_i64(g, 0), extent(g, d), "red");
  g->dim[d] = l.iv;
  gen_reduced_dims(g, r, d + 1);
  loop_end(g, &l, true);
  g->dim[d] = NULL;
}

/* The second pass over the reduced dims (see lm_acc in llvm_internal.h),
 * branched around when the main pass's result is already final. */
static void gen_second_pass(lm_cg *g, reduction *r) {
  LLVMValueRef needed = lm_acc_end_main_pass(g, &r->acc);
  LLVMBasicBlockRef second = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "second.pass");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "passes.done");
  LLVMBuildCondBr(g->b, needed, second, done);
  LLVMPositionBuilderAtEnd(g->b, second);
  lm_acc_begin_second_pass(g, &r->acc);
  gen_reduced_dims(g, r, r->first_dim);
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
}

/* The reduction's result at the current outer point (dims before first_dim set). */
static LLVMValueRef gen_reduction(lm_cg *g, reduction *r) {
  lm_acc_reset(g, &r->acc);
  /* A reduced extent of 0 leaves the accumulator at its identity. */
  if (lk_extent_product(g->k, r->first_dim, g->k->ndim) > 0) {
    gen_reduced_dims(g, r, r->first_dim);
    if (lm_acc_has_second_pass(&r->acc) && !g->failed) gen_second_pass(g, r);
  }
  return g->failed ? NULL : lm_acc_result(g, &r->acc);
}

/* A point of an update in place: the output already holds the kept slot's
 * values, so only a point taking the WHERE's other arm is stored (the
 * vectorizer makes the branch a masked store). */
static void gen_kept_point(lm_cg *g, plan *p, LLVMValueRef out_index) {
  const lk_inst *w = &g->k->inst[g->k->value];
  int other = p->keep_arm == 1 ? w->c : w->b;
  if (!evaluate(g, p->body_needed, w->a > other ? w->a : other)) return;
  LLVMValueRef take = g->val[w->a];
  if (p->keep_arm == 1) take = LLVMBuildNot(g->b, take, "");
  LLVMBasicBlockRef store = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "update");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "update.done");
  LLVMBuildCondBr(g->b, take, store, done);
  LLVMPositionBuilderAtEnd(g->b, store);
  lm_emit_store_output(g, out_index, g->val[other]);
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
}

/* A point of a kernel without a reduction: its value, and its more outputs'
 * values at the same index, from one evaluation. */
static void gen_plain_point(lm_cg *g, plan *p, LLVMValueRef out_index) {
  const lk_kernel *k = g->k;
  int last = k->value;
  for (int m = 0; m < k->nmore; m++)
    if (k->more[m].value > last) last = k->more[m].value;
  if (!evaluate(g, p->body_needed, last)) return;
  lm_emit_store_output(g, out_index, g->val[k->value]);
  for (int m = 0; m < k->nmore; m++) {
    int v = k->more[m].value;
    lm_emit_store(g, k->inst[v].dtype, k->more[m].slot, out_index, g->val[v]);
  }
}

/* Computes and stores one output point (outer dims already in g->dim). */
static void gen_point(lm_cg *g, plan *p, LLVMValueRef out_index) {
  const lk_kernel *k = g->k;
  LLVMValueRef v;
  if (p->point == POINT_ZERO) {
    v = LLVMConstNull(lm_type(g, k->out_dtype));
    if (p->col_total) {
      LLVMValueRef local = LLVMBuildNSWSub(g->b, out_index, g->begin, "");
      LLVMValueRef zero = LLVMConstNull(g->t_f64);
      LLVMBuildStore(g->b, zero, LLVMBuildGEP2(g->b, g->t_f64, p->col_total, &local, 1, ""));
      LLVMBuildStore(g->b, zero, LLVMBuildGEP2(g->b, g->t_f64, p->col_comp, &local, 1, ""));
    }
  } else if (p->point == POINT_ADD) { /* out[i] += value, at the reduced index set in g */
    v = evaluate(g, p->body_needed, k->value);
    if (!v) return;
    LLVMValueRef old = lm_emit_load(g, k->out_dtype, 0, out_index);
    v = lm_dtype_is_float(k->out_dtype) ? LLVMBuildFAdd(g->b, old, v, "")
                                        : LLVMBuildAdd(g->b, old, v, "");
  } else if (p->point == POINT_FLUSH || p->point == POINT_ROUND) { /* chunked column sums */
    LLVMValueRef local = LLVMBuildNSWSub(g->b, out_index, g->begin, "");
    LLVMValueRef total = LLVMBuildGEP2(g->b, g->t_f64, p->col_total, &local, 1, "");
    LLVMValueRef comp = LLVMBuildGEP2(g->b, g->t_f64, p->col_comp, &local, 1, "");
    if (p->point == POINT_FLUSH) { /* total += out[i]; out[i] = 0 */
      LLVMValueRef x = lm_emit_load(g, k->out_dtype, 0, out_index);
      if (lm_in_float(k->out_dtype)) x = LLVMBuildFPExt(g->b, x, g->t_f64, "");
      lm_neumaier_add(g, total, comp, x);
      v = LLVMConstNull(lm_type(g, k->out_dtype));
    } else { /* out[i] = total + comp, rounded once */
      v = LLVMBuildFAdd(g->b, LLVMBuildLoad2(g->b, g->t_f64, total, ""),
                        LLVMBuildLoad2(g->b, g->t_f64, comp, ""), "");
      if (lm_in_float(k->out_dtype)) v = LLVMBuildFPTrunc(g->b, v, g->t_f32, "");
    }
  } else if (p->point == POINT_FINISH) { /* the epilogue on the finished sum */
    g->acc = lm_emit_load(g, k->acc_dtype, 0, out_index);
    v = evaluate(g, p->epi_needed, k->result);
  } else if (k->reduce == LK_RED_NONE && p->keep_arm) {
    gen_kept_point(g, p, out_index);
    return;
  } else if (k->reduce == LK_RED_NONE) {
    gen_plain_point(g, p, out_index);
    return;
  } else {
    g->acc = gen_reduction(g, &p->main);
    v = g->acc ? evaluate(g, p->epi_needed, k->result) : NULL;
  }
  if (v) lm_emit_store_output(g, out_index, v);
}

/* The row statistics of the current row (dims before the last set), in order:
 * a stat's value may use the earlier ones. With `row_at` (a whole row in the
 * range, its first output index), the cached stat stores its values there. */
static void gen_row_stats(lm_cg *g, plan *p, LLVMValueRef row_at) {
  int last = g->k->ndim - 1;
  LLVMValueRef point_index = g->dim[last];
  g->dim[last] = NULL;
  for (int s = 0; s < g->k->nstats && !g->failed; s++) {
    p->stat[s].store_at = s == p->cached_stat ? row_at : NULL;
    g->stat[s] = gen_reduction(g, &p->stat[s]);
    p->stat[s].store_at = NULL;
  }
  g->dim[last] = point_index;
}

/* Rows shorter than this that are not masked (see fold_tail_pays) run a
 * 4-wide vector loop. LLVM picks 16 lanes and an 8-lane epilogue: a row of 7
 * pooling windows (the CNN's second block) reached neither and ran all
 * scalar, a row of 14 ran 8 lanes and 6 scalar points (now 12 and 2). */
#define SHORT_ROW 16

/* The points [start, start + n) of the current row, output indices from at. */
static void gen_row_points(lm_cg *g, plan *p, LLVMValueRef start, LLVMValueRef n, LLVMValueRef at) {
  int last = g->k->nouter - 1;
  int64_t len = lk_dim_is_sized(g->k, last) ? 0 : g->k->dom[last];
  loop l;
  loop_begin(g, &l, const_i64(g, 0), n, "inner");
  g->dim[last] = LLVMBuildNSWAdd(g->b, start, l.iv, "");
  gen_point(g, p, LLVMBuildNSWAdd(g->b, at, l.iv, ""));
  int width = !p->fold_tail && len >= 4 && len < SHORT_ROW ? 4 : 0;
  loop_end_tail(g, &l, false, p->fold_tail ? TAIL_MASKED : TAIL_DEFAULT, width);
}

/* A row kernel whose last stat sums a value the points need again (softmax's
 * exp(x - max)): a row wholly in the range stores those values in the output
 * while summing and its points read them back, one exp per element instead of
 * two; a row cut by the range (its ends belong to other threads) recomputes. */
static void gen_cached_row(lm_cg *g, plan *p, LLVMValueRef start, LLVMValueRef n, LLVMValueRef at) {
  int last = g->k->nouter - 1;
  LLVMValueRef whole =
      LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, start, const_i64(g, 0), ""),
                   LLVMBuildICmp(g->b, LLVMIntEQ, n, extent(g, last), ""), "whole");
  LLVMBasicBlockRef cached = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "row.cached");
  LLVMBasicBlockRef computed = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "row.computed");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "row.done");
  LLVMBuildCondBr(g->b, whole, cached, computed);
  LLVMPositionBuilderAtEnd(g->b, cached);
  gen_row_stats(g, p, at);
  g->cached_inst = g->k->stat[p->cached_stat].value;
  loop l;
  loop_begin(g, &l, const_i64(g, 0), n, "inner.cached");
  g->dim[last] = l.iv;
  g->cached_at = LLVMBuildNSWAdd(g->b, at, l.iv, "");
  gen_point(g, p, g->cached_at);
  loop_end(g, &l, false);
  g->cached_inst = -1;
  g->cached_at = NULL;
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, computed);
  gen_row_stats(g, p, NULL);
  gen_row_points(g, p, start, n, at);
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
}

/* nouter == 0: one output point (index 0) when the range is not empty. */
static void gen_single_point(lm_cg *g, plan *p) {
  loop l;
  loop_begin(g, &l, g->begin, g->end, "point");
  gen_point(g, p, l.iv);
  loop_end(g, &l, false);
}

/* Advances the multi-index after a finished row: the innermost outer dim
 * restarts at 0 and the carry ripples outwards. Every path branches to `next`. */
static void gen_carry(lm_cg *g, LLVMValueRef *idx, LLVMBasicBlockRef next) {
  const lk_kernel *k = g->k;
  int last = k->nouter - 1;
  LLVMBuildStore(g->b, const_i64(g, 0), idx[last]);
  for (int d = last - 1; d >= 0; d--) {
    LLVMValueRef v =
        LLVMBuildNSWAdd(g->b, LLVMBuildLoad2(g->b, g->t_i64, idx[d], ""), const_i64(g, 1), "");
    LLVMBasicBlockRef fits = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "carry.fits");
    LLVMBasicBlockRef wraps = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "carry.wraps");
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, v, extent(g, d), ""), fits, wraps);
    LLVMPositionBuilderAtEnd(g->b, fits);
    LLVMBuildStore(g->b, v, idx[d]);
    LLVMBuildBr(g->b, next);
    LLVMPositionBuilderAtEnd(g->b, wraps);
    LLVMBuildStore(g->b, const_i64(g, 0), idx[d]);
  }
  /* Wrapping the outermost dim means every point is done: pos >= end now. */
  LLVMBuildBr(g->b, next);
}

/* The points [start, start + n) of the current row, with its statistics. */
static void gen_row(lm_cg *g, plan *p, LLVMValueRef start, LLVMValueRef n, LLVMValueRef at) {
  if (p->cached_stat >= 0) {
    gen_cached_row(g, p, start, n, at);
  } else {
    gen_row_stats(g, p, NULL); /* a row's points all follow: stats once per row */
    gen_row_points(g, p, start, n, at);
  }
}

/* Rows of at most this many points, of at least BLOCK_MIN_ROWS rows each, run
 * a block of rows at a time: the loop over the rows is the vectorized one, the
 * points of a row unrolled in its body (a pooling gradient over [.., 14, 2]
 * after kernel_regroup.c split its row: its stores interleave). */
#define BLOCK_MAX_ROW 4
#define BLOCK_MIN_ROWS 4

static bool block_rows_pay(const lk_kernel *k) {
  int last = k->nouter - 1;
  return last >= 1 && k->nstats == 0 && !lk_dims_sized(k, last - 1, last + 1) &&
         k->dom[last] <= BLOCK_MAX_ROW && k->dom[last - 1] >= BLOCK_MIN_ROWS;
}

/* At the start of a whole block in the range (both last dims at 0), the block
 * runs as one loop over its rows, each row's points unrolled, and the index
 * moves to the block's last row; elsewhere (a range starting or ending inside
 * a block) one row runs as usual. Stores pos; the caller then carries. */
static void gen_block_or_row(lm_cg *g, plan *p, LLVMValueRef *idx, LLVMValueRef pos,
                             LLVMValueRef start, LLVMValueRef at, LLVMValueRef n) {
  const lk_kernel *k = g->k;
  int last = k->nouter - 1;
  int64_t width = k->dom[last], rows = k->dom[last - 1];
  LLVMValueRef row = g->dim[last - 1];
  LLVMValueRef left = LLVMBuildNSWSub(g->b, g->end, at, "");
  LLVMValueRef whole = LLVMBuildAnd(
      g->b,
      LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, start, const_i64(g, 0), ""),
                   LLVMBuildICmp(g->b, LLVMIntEQ, row, const_i64(g, 0), ""), ""),
      LLVMBuildICmp(g->b, LLVMIntSGE, left, const_i64(g, width * rows), ""), "whole.block");
  LLVMBasicBlockRef block = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "block");
  LLVMBasicBlockRef one_row = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "block.row");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "block.done");
  LLVMBuildCondBr(g->b, whole, block, one_row);

  LLVMPositionBuilderAtEnd(g->b, block);
  /* The row count through an empty asm: LLVM vectorizes a loop with a known
   * trip count under 16 only with a masked tail, where these interleaved
   * accesses become gathers and scatters. Unknown, it runs whole vectors
   * and a scalar remainder. */
  LLVMTypeRef opaque_ty = LLVMFunctionType(g->t_i64, &g->t_i64, 1, 0);
  LLVMValueRef opaque =
      LLVMGetInlineAsm(opaque_ty, "", 0, "=r,0", 4, 0, 0, LLVMInlineAsmDialectATT, 0);
  LLVMValueRef nrows = const_i64(g, rows);
  nrows = LLVMBuildCall2(g->b, opaque_ty, opaque, &nrows, 1, "rows");
  loop l;
  loop_begin(g, &l, const_i64(g, 0), nrows, "block.rows");
  g->dim[last - 1] = l.iv;
  LLVMValueRef row_at =
      LLVMBuildNSWAdd(g->b, at, LLVMBuildNSWMul(g->b, l.iv, const_i64(g, width), ""), "");
  for (int64_t j = 0; j < width && !g->failed; j++) {
    g->dim[last] = const_i64(g, j);
    gen_point(g, p, LLVMBuildNSWAdd(g->b, row_at, const_i64(g, j), ""));
  }
  /* whole vectors, the rest scalar: 16 wide, or 4 for fewer rows than
   * SHORT_ROW (at least BLOCK_MIN_ROWS: 14 rows run 12 + 2, not 8 + 6) */
  int vector = rows < SHORT_ROW ? 4 : 16;
  loop_end_tail(g, &l, false, TAIL_SCALAR, vector);
  LLVMBuildStore(g->b, const_i64(g, rows - 1), idx[last - 1]);
  LLVMBuildStore(g->b, LLVMBuildNSWAdd(g->b, at, const_i64(g, width * rows), ""), pos);
  LLVMBuildBr(g->b, done);

  LLVMPositionBuilderAtEnd(g->b, one_row);
  g->dim[last - 1] = row;
  gen_row(g, p, start, n, at);
  LLVMBuildStore(g->b, LLVMBuildNSWAdd(g->b, at, n, ""), pos);
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
}

static void gen_outer_iteration(lm_cg *g, plan *p) {
  const lk_kernel *k = g->k;
  int last = k->nouter - 1;
  LLVMValueRef idx[LOOM_MAX_DIMS];
  for (int d = 0; d < k->nouter; d++) idx[d] = lm_entry_alloca(g, g->t_i64, "idx");
  LLVMValueRef pos = lm_entry_alloca(g, g->t_i64, "pos");

  /* Unravel `begin` once (constant extents: the divisions become multiplies). */
  LLVMValueRef rem = g->begin;
  for (int d = last; d > 0; d--) {
    LLVMValueRef e = extent(g, d);
    LLVMBuildStore(g->b, LLVMBuildURem(g->b, rem, e, ""), idx[d]);
    rem = LLVMBuildUDiv(g->b, rem, e, "");
  }
  LLVMBuildStore(g->b, rem, idx[0]);
  LLVMBuildStore(g->b, g->begin, pos);

  LLVMBasicBlockRef header = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "row");
  LLVMBasicBlockRef row = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "row.body");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "rows.done");
  LLVMBuildBr(g->b, header);
  LLVMPositionBuilderAtEnd(g->b, header);
  LLVMValueRef at = LLVMBuildLoad2(g->b, g->t_i64, pos, "at");
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, at, g->end, ""), row, exit);

  /* One row: the innermost outer dim from its current index to the end of the
   * row or of the range, whichever comes first. */
  LLVMPositionBuilderAtEnd(g->b, row);
  for (int d = 0; d < last; d++) g->dim[d] = LLVMBuildLoad2(g->b, g->t_i64, idx[d], "");
  LLVMValueRef start = LLVMBuildLoad2(g->b, g->t_i64, idx[last], "start");
  LLVMValueRef room = LLVMBuildNSWSub(g->b, extent(g, last), start, "");
  LLVMValueRef left = LLVMBuildNSWSub(g->b, g->end, at, "");
  LLVMValueRef n =
      LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, room, left, ""), room, left, "n");
  if (p->block_rows) {
    gen_block_or_row(g, p, idx, pos, start, at, n);
  } else {
    gen_row(g, p, start, n, at);
    LLVMBuildStore(g->b, LLVMBuildNSWAdd(g->b, at, n, ""), pos);
  }
  gen_carry(g, idx, header);

  LLVMPositionBuilderAtEnd(g->b, exit);
}

/* ------------------------------------------------------------------ columns */

/* A sum over few outputs whose loads run along the outputs and across the
 * reduced dims (a bias gradient: the column sums of a [rows, C] matrix): each
 * output's row loop would stride through memory. Such kernels loop over the
 * reduced dims outside and add into the outputs inside, a contiguous loop;
 * the outputs hold the running sums (acc_dtype is out_dtype), and an epilogue
 * (a fused optimizer update) runs over them at the end. */
#define COLUMN_MAX_OUTPUTS 4096

static bool column_shaped(const lk_kernel *k, const unsigned char *needed) {
  /* BF16 and F16 outputs would sum at their own precision there */
  /* (and outputs of a known count: their totals live on the stack) */
  if (k->reduce != LK_RED_SUM || k->nouter == 0 || k->nouter == k->ndim ||
      lk_dims_sized(k, 0, k->nouter) || k->acc_dtype != k->out_dtype ||
      lm_dtype_is_half(k->out_dtype) || lk_extent_product(k, 0, k->nouter) > COLUMN_MAX_OUTPUTS ||
      k->dom[k->nouter - 1] < 4)
    return false;
  lk_affine *af = malloc(sizeof *af * (size_t)k->nbody);
  if (!af) return false;
  lk_affine_analyze(k, af);
  int across = 0, along = 0;
  for (int i = 0; i < k->nbody; i++) {
    const lk_inst *in = &k->inst[i];
    if (in->op != LK_LOAD || !needed[i]) continue;
    const lk_affine *o = &af[in->a];
    if (!o->ok) { /* its order through memory is unknown: rows are the safe choice */
      along++;
      continue;
    }
    along += o->c[k->ndim - 1] == 1;
    across += o->c[k->nouter - 1] == 1 && o->c[k->ndim - 1] != 1;
  }
  free(af);
  return across > 0 && along == 0;
}

static void gen_outer_iteration(lm_cg *g, plan *p);

/* Loops over reduced dims d.. and, innermost, over the outputs, adding; a
 * chunked float sum flushes the outputs into their totals after each chunk. */
static void gen_column_dims(lm_cg *g, plan *p, int d) {
  if (d == g->k->ndim) {
    gen_outer_iteration(g, p);
    return;
  }
  loop chunks, l;
  bool chunked = d == p->col_chunk_dim;
  if (chunked)
    chunk_loops_begin(g, &chunks, &l, extent(g, d), p->col_chunk_step, "col.red");
  else
    loop_begin(g, &l, const_i64(g, 0), extent(g, d), "col.red");
  g->dim[d] = l.iv;
  gen_column_dims(g, p, d + 1);
  loop_end(g, &l, false);
  g->dim[d] = NULL;
  if (chunked) {
    p->point = POINT_FLUSH;
    gen_outer_iteration(g, p);
    p->point = POINT_ADD;
    loop_end_step(g, &chunks, false, TAIL_DEFAULT, 0, p->col_chunk_step);
  }
}

/* Column sums add this many terms per output in the output's dtype before a
 * flush into its double total: a pass over the outputs per chunk. */
#define COLUMN_CHUNK 128

/* Each output is summed in reduced-index order by the thread owning it, so the
 * result is the same for any split of the range. A float sum of more than
 * COLUMN_CHUNK terms per output keeps a double total per output of the range
 * (at most COLUMN_MAX_OUTPUTS, on the stack). */
static void gen_column_reduction(lm_cg *g, plan *p) {
  const lk_kernel *k = g->k;
  p->col_chunk_dim = lm_dtype_is_float(k->out_dtype)
                         ? chunk_split(k, k->nouter, COLUMN_CHUNK, &p->col_chunk_step)
                         : -1;
  if (p->col_chunk_dim >= 0) {
    LLVMValueRef count = const_i64(g, COLUMN_MAX_OUTPUTS);
    p->col_total = LLVMBuildArrayAlloca(g->entry, g->t_f64, count, "col.total");
    p->col_comp = LLVMBuildArrayAlloca(g->entry, g->t_f64, count, "col.comp");
  }
  p->point = POINT_ZERO;
  gen_outer_iteration(g, p);
  p->point = POINT_ADD;
  gen_column_dims(g, p, k->nouter);
  if (p->col_total) {
    p->point = POINT_ROUND;
    gen_outer_iteration(g, p);
  }
  if (k->inst[k->result].op != LK_ACC) { /* an epilogue: over the sums, in place */
    p->point = POINT_FINISH;
    gen_outer_iteration(g, p);
  }
  p->point = POINT_STORE;
  p->col_total = p->col_comp = NULL;
}

/* ------------------------------------------------------------------ functions */

/* Whether a kernel is bound by its vector instructions rather than by memory:
 * it evaluates vector math (exp, log, tanh, erf, sin, cos, pow), and either
 * its rows come from cache (a row kernel reads each row again for its points)
 * or its outputs are few enough for cache (a GEMM epilogue's, run in blocks,
 * always are); and it is not so small that compiling costs more than running.
 * Measured on an AVX-512 Xeon, two threads: 512-bit vectors made an erf GELU
 * over [256, 3072] 0.33 -> 0.24 ms and a softmax over [4096, 1024] 1.45 ->
 * 1.12 ms, but a tanh and sigmoid chain over 16M values from memory 8.8 -> 9.8
 * ms, and compiled that chain on 1024 values in 17 instead of 13 ms. */
#define WIDE_VECTORS_MIN_POINTS (1 << 16)
#define WIDE_VECTORS_MAX_POINTS (1 << 21)
static bool wide_vectors_pay(const lk_kernel *k) {
  bool math = false;
  for (int i = 0; i < k->ninst; i++) switch (k->inst[i].op) {
    case LK_EXP:
    case LK_LOG:
    case LK_TANH:
    case LK_ERF:
    case LK_SIN:
    case LK_COS:
    case LK_POW: math = true; break;
    default: break;
    }
  int64_t points = lk_extent_product(k, 0, k->ndim);
  if (!math || points < WIDE_VECTORS_MIN_POINTS) return false;
  return k->nstats > 0 || points <= WIDE_VECTORS_MAX_POINTS;
}

/* LLVM vectorizes at 256 bits on AVX-512 CPUs it tunes for narrower vectors
 * (Skylake-X through Sapphire Rapids); a kernel bound by its vector
 * instructions needs half as many at the full width. */
static void prefer_full_vectors(lm_cg *g, LLVMValueRef fn) {
  char width[16];
  snprintf(width, sizeof width, "%d", lm_target_vector_bytes() * 8);
  const char *keys[2] = {"prefer-vector-width", "min-legal-vector-width"};
  for (int i = 0; i < 2; i++)
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(g->ctx, keys[i], (unsigned)strlen(keys[i]),
                                                      width, (unsigned)strlen(width)));
}

static LLVMValueRef create_body_function(lm_cg *g) {
  const lk_kernel *k = g->k;
  int n = k->nslots;
  LLVMTypeRef i8p = LLVMPointerType(g->t_i8, 0);
  LLVMTypeRef *params = malloc((size_t)(n + 2) * sizeof *params);
  char *name = malloc(strlen(g->symbol) + sizeof ".body");
  if (!params || !name) {
    free(params);
    free(name);
    return NULL;
  }
  for (int s = 0; s < n; s++) params[s] = i8p;
  params[n] = params[n + 1] = g->t_i64;
  sprintf(name, "%s.body", g->symbol);
  LLVMValueRef fn =
      LLVMAddFunction(g->mod, name, LLVMFunctionType(g->t_void, params, (unsigned)n + 2, 0));
  free(params);
  free(name);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  add_attr(g, fn, LLVMAttributeFunctionIndex, "alwaysinline");
  add_attr(g, fn, LLVMAttributeFunctionIndex, "nounwind");
  for (int s = 0; s < n; s++) {
    add_attr(g, fn, (LLVMAttributeIndex)s + 1, "noalias");
    add_attr(g, fn, (LLVMAttributeIndex)s + 1, "nocapture");
    g->slot[s] = LLVMGetParam(fn, (unsigned)s);
  }
  g->begin = LLVMGetParam(fn, (unsigned)n);
  g->end = LLVMGetParam(fn, (unsigned)n + 1);
  return fn;
}

/* The exported lk_fn: reads the slot pointers once and calls the body. */
static bool create_entry_function(lm_cg *g, LLVMValueRef body) {
  int n = g->k->nslots;
  LLVMTypeRef i8p = LLVMPointerType(g->t_i8, 0);
  LLVMTypeRef params[3] = {LLVMPointerType(i8p, 0), g->t_i64, g->t_i64};
  LLVMValueRef fn = LLVMAddFunction(g->mod, g->symbol, LLVMFunctionType(g->t_void, params, 3, 0));
  add_attr(g, fn, LLVMAttributeFunctionIndex, "nounwind");
  add_attr(g, fn, 1, "noalias");
  add_attr(g, fn, 1, "nocapture");
  add_attr(g, fn, 1, "readonly");
  LLVMValueRef *call_args = malloc((size_t)(n + 2) * sizeof *call_args);
  if (!call_args) return false;
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  LLVMValueRef args = LLVMGetParam(fn, 0);
  for (int s = 0; s < n; s++) {
    LLVMValueRef at = const_i64(g, s);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(g->b, i8p, args, &at, 1, "");
    call_args[s] = LLVMBuildLoad2(g->b, i8p, p, "slot");
    LLVMSetAlignment(call_args[s], 8);
  }
  call_args[n] = LLVMGetParam(fn, 1);
  call_args[n + 1] = LLVMGetParam(fn, 2);
  LLVMBuildCall2(g->b, LLVMGlobalGetValueType(body), body, call_args, (unsigned)n + 2, "");
  LLVMBuildRetVoid(g->b);
  free(call_args);
  return true;
}

static void gen_body(lm_cg *g, plan *p) {
  const lk_kernel *k = g->k;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "entry");
  LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "start");
  LLVMPositionBuilderAtEnd(g->entry, entry);
  LLVMPositionBuilderAtEnd(g->b, start);
  if (k->reduce != LK_RED_NONE) {
    p->main.value = k->value;
    p->main.needed = p->body_needed;
    p->main.first_dim = k->nouter;
    p->main.reports_index = k->reduce == LK_RED_ARGMAX || k->reduce == LK_RED_ARGMIN;
    lm_acc_create(g, &p->main.acc, k->reduce, k->inst[k->value].dtype, k->acc_dtype,
                  reduced_points(k, k->nouter, k->ndim));
    p->main.chunk_dim =
        p->main.acc.total ? chunk_split(k, k->nouter, LM_SUM_CHUNK, &p->main.chunk_step) : -1;
  }
  for (int s = 0; s < k->nstats; s++) {
    reduction *r = &p->stat[s];
    r->value = k->stat[s].value;
    r->first_dim = k->ndim - 1;
    lm_acc_create(g, &r->acc, k->stat[s].reduce, k->inst[r->value].dtype, k->stat[s].acc_dtype,
                  reduced_points(k, k->ndim - 1, k->ndim));
    r->chunk_dim = r->acc.total ? chunk_split(k, k->ndim - 1, LM_SUM_CHUNK, &r->chunk_step) : -1;
  }
  /* Outer numel 0 is never launched; emit nothing that would divide by it. */
  if (lk_extent_product(k, 0, k->nouter) > 0) {
    if (k->nouter == 0)
      gen_single_point(g, p);
    else if (column_shaped(k, p->body_needed))
      gen_column_reduction(g, p);
    else
      gen_outer_iteration(g, p);
  }
  LLVMBuildRetVoid(g->b);
  LLVMBuildBr(g->entry, start);
}

/* ------------------------------------------------------------------ module */

static LLVMModuleRef parse_prelude(lm_cg *g) {
  const char *ir = lm_reduce_prelude_ir();
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(ir, strlen(ir), "prelude");
  LLVMModuleRef mod = NULL;
  char *msg = NULL;
  if (LLVMParseIRInContext(g->ctx, buf, &mod, &msg)) { /* consumes buf */
    lm_cg_fail(g, "prelude IR does not parse: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    return NULL;
  }
  LLVMSetModuleIdentifier(mod, g->symbol, strlen(g->symbol));
  LLVMSetSourceFileName(mod, g->symbol, strlen(g->symbol));
  return mod;
}

static void init_types(lm_cg *g) {
  g->t_void = LLVMVoidTypeInContext(g->ctx);
  g->t_i1 = LLVMInt1TypeInContext(g->ctx);
  g->t_i8 = LLVMInt8TypeInContext(g->ctx);
  g->t_i32 = LLVMInt32TypeInContext(g->ctx);
  g->t_i64 = LLVMInt64TypeInContext(g->ctx);
  g->t_f32 = LLVMFloatTypeInContext(g->ctx);
  g->t_f64 = LLVMDoubleTypeInContext(g->ctx);
}

static bool alloc_arrays(lm_cg *g, plan *p) {
  size_t ni = (size_t)g->k->ninst, ns = (size_t)g->k->nslots;
  g->slot = calloc(ns, sizeof *g->slot);
  g->key = calloc(2 * ns, sizeof *g->key);
  g->val = calloc(ni, sizeof *g->val);
  p->body_needed = calloc(ni, 1);
  p->epi_needed = calloc(ni, 1);
  bool ok = g->slot && g->key && g->val && p->body_needed && p->epi_needed &&
            lm_guards_analyze(g) && lm_absorbed_analyze(g);
  for (int s = 0; s < g->k->nstats; s++) ok &= (p->stat[s].needed = calloc(ni, 1)) != NULL;
  return ok;
}

static void free_arrays(lm_cg *g, plan *p) {
  free(g->slot);
  free(g->key);
  free(g->val);
  lm_guards_free(g);
  free(g->absorbed);
  free(p->body_needed);
  free(p->epi_needed);
  for (int s = 0; s < g->k->nstats; s++) free(p->stat[s].needed);
}

static loom_status generate(lm_cg *g, plan *p) {
  const lk_kernel *k = g->k;
  if (!alloc_arrays(g, p)) {
    lm_set_err(g->err, g->errlen, "kernel %s: out of memory in codegen", g->symbol);
    return LOOM_ERR_OOM;
  }
  p->keep_arm = lk_kernel_keep_arm(k);
  if (p->keep_arm) { /* the condition and the other arm: the kept load is never read */
    const lk_inst *w = &k->inst[k->value];
    lk_mark_needed(k, w->a, p->body_needed);
    lk_mark_needed(k, p->keep_arm == 1 ? w->c : w->b, p->body_needed);
  } else {
    lk_mark_needed(k, k->value, p->body_needed);
  }
  for (int m = 0; m < k->nmore; m++) lk_mark_needed(k, k->more[m].value, p->body_needed);
  if (k->reduce != LK_RED_NONE) lk_mark_needed(k, k->result, p->epi_needed);
  for (int s = 0; s < k->nstats; s++) lk_mark_needed(k, k->stat[s].value, p->stat[s].needed);
  p->cached_stat = -1;
  p->fold_tail = fold_tail_pays(k);
  p->block_rows = block_rows_pay(k);
  g->cached_inst = -1;
  int s = k->nstats - 1; /* single-pass sums only: a second pass would store again */
  if (s >= 0 && k->stat[s].reduce == LK_RED_SUM && p->body_needed[k->stat[s].value] &&
      k->inst[k->stat[s].value].dtype == k->out_dtype && k->stat[s].value != k->value)
    p->cached_stat = s;
  g->mod = parse_prelude(g);
  if (!g->mod) return LOOM_ERR_COMPILE;
  g->fn = create_body_function(g);
  if (!g->fn || !create_entry_function(g, g->fn)) {
    lm_set_err(g->err, g->errlen, "kernel %s: out of memory in codegen", g->symbol);
    return LOOM_ERR_OOM;
  }
  if (wide_vectors_pay(g->k)) { /* the body is inlined into the entry: both ask */
    prefer_full_vectors(g, g->fn);
    prefer_full_vectors(g, LLVMGetNamedFunction(g->mod, g->symbol));
  }

  gen_body(g, p);
  return g->failed ? LOOM_ERR_COMPILE : LOOM_OK;
}

loom_status lm_codegen_module(LLVMContextRef ctx, const lk_kernel *k, const char *symbol,
                              LLVMModuleRef *out, char *err, size_t errlen) {
  /* longer rows: the loops below run over the merged domain */
  lk_kernel merged;
  lk_inst *inst = lk_kernel_regroup_dims(k, &merged);
  if (!inst) {
    *out = NULL;
    lm_set_err(err, errlen, "kernel %s: out of memory in codegen", symbol);
    return LOOM_ERR_OOM;
  }
  lm_cg g = {.k = &merged, .symbol = symbol, .ctx = ctx, .err = err, .errlen = errlen};
  plan p = {0};
  init_types(&g);
  g.b = LLVMCreateBuilderInContext(ctx);
  g.entry = LLVMCreateBuilderInContext(ctx);
  loom_status st = generate(&g, &p);
  LLVMDisposeBuilder(g.b);
  LLVMDisposeBuilder(g.entry);
  free_arrays(&g, &p);
  free(inst);
  if (st != LOOM_OK && g.mod) {
    LLVMDisposeModule(g.mod);
    g.mod = NULL;
  }
  *out = g.mod;
  return st;
}
