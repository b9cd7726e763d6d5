/*
 * The GEMM blocks' paths without packing (gemm.c's entry takes them): for
 * few rows, dot products of unpacked operands; for unpacked operands of few
 * rows, sweeps. A file of its own: a path beside the BLIS loops, with its own
 * reasons (a token at a time reads each weight once).
 */
#include "backends/llvm/gemm_internal.h"

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
      lm_gemm_chunk_loop_begin(g, &p, k);
    } else {
      LLVMValueRef from = lm_gemm_chunked_part(g, k);
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

/* C = (or +=) A @ B, rows DOT_MAX_ROWS at a time (the last group fewer), each
 * group's columns through the functions gen makes for its row count (made
 * first, each a function of its own). */
void lm_gemm_gen_row_groups(gemm_cg *g, const char *symbol, const unpacked_ops *o, rows_fn_gen gen,
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

LLVMValueRef lm_gemm_dot_fn(gemm_cg *g, const char *symbol, int rows, int which) {
  return gen_dot(g, symbol, rows, which ? 1 : 4);
}

/* gen_dot's columns: four at a time, then one. */
void lm_gemm_dot_columns(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
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
      lm_gemm_store_tile_vector(g, LLVMBuildLoad2(g->b, g->vec, sums[r][v], ""),
                                at(g, crow, i64c(g, v * g->w)), mask[v], load_c);
  }
  LLVMBuildRetVoid(g->b);
  return fn;
}

/* Vectors of columns per sweep: more rows keep fewer (R x V sums in registers). */
static int sweep_vectors(int rows) { return rows <= 2 ? 8 : 4; }

LLVMValueRef lm_gemm_sweep_fn(gemm_cg *g, const char *symbol, int rows, int which) {
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
void lm_gemm_sweep_columns(gemm_cg *g, const unpacked_ops *o, int rows, LLVMValueRef fns[2],
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
