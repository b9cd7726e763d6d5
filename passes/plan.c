/* Planning: which nodes get their own memory, and the steps computing them.
 *
 * Fusion rule: a node is materialized (ends a kernel) when it is a target, a
 * reduction, a matmul, a matmul operand that cannot be read in place, or a
 * computed value that more than one consumer reads (through any chain of
 * views). Without fusion (LOOM_NO_FUSE=1) every computed value is one.
 * Everything else is computed inline inside its consumer's kernel:
 * elementwise chains, views, constants, ranges and random draws. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* BLAS needs each matrix with one unit stride and a leading dimension no
 * smaller than the other extent. */
static bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool *trans,
                        int64_t *ld) {
  int64_t ncols = cols > 1 ? cols : 1, nrows = rows > 1 ? rows : 1;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= ncols)) {
    *trans = false;
    *ld = rows == 1 ? ncols : sr;
    return true;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= nrows)) {
    *trans = true;
    *ld = cols == 1 ? nrows : sc;
    return true;
  }
  return false;
}

bool lm_gemm_operand(const lm_node *operand, const lm_node **base, lm_view *view) {
  if (operand->materialize || operand->op == LM_BUFFER) {
    *base = operand;
    view->shape = operand->shape;
    view->offset = 0;
    lm_shape_strides(&operand->shape, view->strides);
    return true;
  }
  if (!lm_op_is_view(operand->op) || !lm_view_affine(operand, base, view)) return false;
  int nd = view->shape.ndim;
  bool trans;
  int64_t ld;
  return blas_layout(view->shape.dim[nd - 2], view->shape.dim[nd - 1], view->strides[nd - 2],
                     view->strides[nd - 1], &trans, &ld);
}

static bool is_compute(const lm_node *n) {
  return n->op != LM_BUFFER && n->op != LM_CONST && n->op != LM_IOTA && !lm_op_is_view(n->op);
}

static void mark(const lm_graph *g, bool fuse) {
  for (int i = 0; i < g->n; i++) {
    g->nodes[i]->uses = 0;
    g->nodes[i]->materialize = false;
  }
  for (int t = 0; t < g->ntargets; t++) {
    g->nodes[g->targets[t]]->uses++;
    g->nodes[g->targets[t]]->materialize = true;
  }
  /* Reverse post-order: every consumer is decided before its sources. */
  for (int i = g->n - 1; i >= 0; i--) {
    lm_node *n = g->nodes[i];
    if (n->op == LM_BUFFER) continue;
    if (lm_op_is_reduce(n->op) || n->op == LM_MATMUL) n->materialize = true;
    if (is_compute(n) && (n->uses > 1 || !fuse)) n->materialize = true;
    if (n->op == LM_MATMUL) {
      for (int s = 0; s < 2; s++) {
        const lm_node *base;
        lm_view view;
        lm_node *o = n->src[s];
        if (lm_gemm_operand(o, &base, &view))
          ((lm_node *)base)->materialize |= base->op != LM_BUFFER;
        else
          o->materialize = true;
      }
    }
    bool passes_uses = lm_op_is_view(n->op) && !n->materialize;
    for (int s = 0; s < n->nsrc; s++) {
      bool repeated = false;
      for (int r = 0; r < s; r++) repeated |= n->src[r] == n->src[s];
      if (!repeated) n->src[s]->uses += passes_uses ? (n->uses > 0 ? n->uses : 1) : 1;
    }
  }
}

static void plan_gemm(lm_node *n, lm_step *step) {
  lm_gemm *g = &step->gemm;
  memset(g, 0, sizeof *g);
  const lm_node *a = n->src[0], *b = n->src[1], *abase, *bbase;
  lm_view av, bv;
  lm_gemm_operand(a, &abase, &av);
  lm_gemm_operand(b, &bbase, &bv);
  int nd = n->shape.ndim;
  g->dtype = n->dtype;
  g->nbatch = nd - 2;
  for (int d = 0; d < nd - 2; d++) {
    g->batch[d] = n->shape.dim[d];
    g->a_bstride[d] = av.strides[d];
    g->b_bstride[d] = bv.strides[d];
  }
  g->M = n->shape.dim[nd - 2];
  g->N = n->shape.dim[nd - 1];
  g->K = a->shape.dim[nd - 1];
  g->a_offset = av.offset;
  g->b_offset = bv.offset;
  blas_layout(g->M, g->K, av.strides[nd - 2], av.strides[nd - 1], &g->a_trans, &g->lda);
  blas_layout(g->K, g->N, bv.strides[nd - 2], bv.strides[nd - 1], &g->b_trans, &g->ldb);
  g->a_pos = abase->pos;
  g->b_pos = bbase->pos;
  step->kind = LM_STEP_GEMM;
  step->out = n->pos;
  step->outer = lm_shape_numel(&n->shape);
}

void lm_program_free(lm_program *p) {
  if (!p) return;
  for (int i = 0; i < p->nsteps; i++) {
    free(p->steps[i].kernel.inst);
    free(p->steps[i].arg_pos);
    free(p->steps[i].arg_key);
  }
  free(p->steps);
  free(p->computed);
  free(p);
}

loom_status lm_plan(const lm_graph *g, bool fuse, lm_program **out, char *err, size_t errlen) {
  *out = NULL;
  mark(g, fuse);
  lm_program *p = calloc(1, sizeof *p);
  int count = 0;
  for (int i = 0; i < g->n; i++) count += g->nodes[i]->materialize && g->nodes[i]->op != LM_BUFFER;
  if (p) {
    p->steps = calloc((size_t)(count ? count : 1), sizeof(lm_step));
    p->computed = calloc(g->n > 0 ? (size_t)g->n : 1, sizeof(bool));
  }
  if (!p || !p->steps || !p->computed) {
    lm_program_free(p);
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  p->nnodes = g->n;
  for (int i = 0; i < g->n; i++) {
    lm_node *n = g->nodes[i];
    if (!n->materialize || n->op == LM_BUFFER) continue;
    lm_step *step = &p->steps[p->nsteps++];
    p->computed[i] = true;
    if (n->op == LM_MATMUL) {
      plan_gemm(n, step);
      continue;
    }
    loom_status st = lm_lower(g, n, step, err, errlen);
    if (st != LOOM_OK) {
      lm_program_free(p);
      return st;
    }
  }
  *out = p;
  return LOOM_OK;
}
