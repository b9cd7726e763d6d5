/* GEMM steps and their pairings: each matmul's BLAS layout (operands read in
 * place through views where one unit stride allows), then, among the planned
 * steps, a GEMM whose only reader is an elementwise kernel of its shape runs
 * deferred in row blocks with that kernel (an epilogue), and a large B operand
 * that only GEMMs read is made inside each of them a block at a time (a
 * prologue, CPU only). */
#include <string.h>

#include "passes/plan_internal.h"

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

/* operand as a view of the buffer it is read from: itself when it has memory,
 * else an affine chain of views down to a node that does; false otherwise,
 * and for a view reading backwards (a flip: a negative stride, which the
 * library steps' layouts do not take). */
static bool operand_view(const lm_planner *pl, const lm_node *operand, const lm_node **base,
                         lm_view *view) {
  if (lm_has_memory(pl, operand)) {
    *base = operand;
    view->shape = operand->shape;
    view->offset = 0;
    lm_shape_strides(&operand->shape, view->strides);
    return true;
  }
  if (!lm_op_is_view(operand->op) || !lm_view_affine(operand, lm_planner_stores, pl, base, view))
    return false;
  for (int d = 0; d < view->shape.ndim; d++)
    if (view->strides[d] < 0 && view->shape.dim[d] > 1) return false;
  return true;
}

bool lm_gemm_operand(const lm_planner *pl, const lm_node *operand, const lm_node **base,
                     lm_view *view) {
  if (!operand_view(pl, operand, base, view)) return false;
  int nd = view->shape.ndim;
  bool trans;
  int64_t ld;
  return blas_layout(view->shape.dim[nd - 2], view->shape.dim[nd - 1], view->strides[nd - 2],
                     view->strides[nd - 1], &trans, &ld);
}

/* The attention kernel reads rows of unit stride (any row and batch strides);
 * its mask, any strides (an element at a time). */
static bool attention_operand(const lm_planner *pl, const lm_node *operand, const lm_node **base,
                              lm_view *view, bool mask) {
  if (!operand_view(pl, operand, base, view)) return false;
  int nd = view->shape.ndim;
  return mask || view->shape.dim[nd - 1] <= 1 || view->strides[nd - 1] == 1;
}

bool lm_library_operand(const lm_planner *pl, const lm_node *consumer, const lm_node *operand,
                        const lm_node **base, lm_view *view) {
  if (!lm_op_is_attention(consumer->op)) return lm_gemm_operand(pl, operand, base, view);
  return attention_operand(pl, operand, base, view,
                           consumer->arg.attn.mask && consumer->src[3] == operand);
}

loom_status lm_plan_attention(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                              size_t errlen) {
  (void)err, (void)errlen;
  lm_attention *a = &step->attn;
  memset(a, 0, sizeof *a);
  const loom_shape *q = &n->src[0]->shape;
  int nd = q->ndim;
  a->nbatch = nd - 2;
  for (int d = 0; d < nd - 2; d++) a->batch[d] = q->dim[d];
  a->tq = q->dim[nd - 2];
  a->d = q->dim[nd - 1];
  a->tk = n->src[1]->shape.dim[nd - 2];
  a->dv = n->src[2]->shape.dim[nd - 1];
  a->scale = n->arg.attn.scale;
  a->causal = n->arg.attn.causal;
  a->mask = n->arg.attn.mask;
  a->backward = n->op == LM_ATTENTION_GRAD;
  for (int k = 0; k < LM_ATTENTION_OPERANDS; k++) a->pos[k] = -1;
  for (int s = 0; s < n->nsrc; s++) {
    /* q, k, v, [mask], then the gradient's o and do at 4 and 5 */
    int k = s < 3 || a->mask ? s : s + 1;
    const lm_node *base;
    lm_view view;
    attention_operand(pl, n->src[s], &base, &view, k == 3);
    a->pos[k] = lm_graph_pos(pl->g, base);
    a->offset[k] = view.offset;
    a->row_stride[k] = view.strides[nd - 2];
    for (int d = 0; d < nd - 2; d++) a->bstride[k][d] = view.strides[d];
    if (k == 3) a->mask_stride = view.strides[nd - 1];
  }
  step->kind = LM_STEP_ATTENTION;
  step->out = n->pos;
  step->dtype = n->dtype;
  step->outer = lm_shape_numel(&n->shape);
  return LOOM_OK;
}

loom_status lm_plan_gemm(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                         size_t errlen) {
  (void)err, (void)errlen;
  const lm_graph *graph = pl->g;
  lm_gemm *g = &step->gemm;
  memset(g, 0, sizeof *g);
  const lm_node *a = n->src[0], *b = n->src[1], *abase, *bbase;
  lm_view av, bv;
  lm_gemm_operand(pl, a, &abase, &av);
  lm_gemm_operand(pl, b, &bbase, &bv);
  int nd = n->shape.ndim;
  g->dtype = n->dtype;
  g->in_dtype = a->dtype; /* BF16 / F16 operands give F32 (ir/verify.c) */
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
  g->a_pos = lm_graph_pos(graph, abase);
  g->b_pos = lm_graph_pos(graph, bbase);
  step->kind = LM_STEP_GEMM;
  step->out = n->pos;
  step->dtype = n->dtype;
  step->outer = lm_shape_numel(&n->shape);
  return LOOM_OK;
}

/* ------------------------------------------------------------ matmul epilogues */

/* A reshape that only splits rows (the last dim kept): [b*t, N] -> [b, t, N]. */
static bool splits_rows(const lm_node *n) {
  const loom_shape *out = &n->shape, *in = &n->src[0]->shape;
  return n->op == LM_RESHAPE && out->ndim > 0 && in->ndim > 0 &&
         out->dim[out->ndim - 1] == in->dim[in->ndim - 1];
}

/* 1 when n's inline expression reads m only through elementwise ops and
 * reshapes that split rows (so at n's own row-major output index, whole rows
 * of m per row block: a [b, t, N] bias add reads a folded [b*t, N] product so),
 * 0 when it does not read m, -1 otherwise. (A reshape that regroups the last
 * dim, a weight gradient [O, C*KH*KW] read as [O, C, KH, KW], stays out: pairing
 * it would cost the convolution's GEMM prologue.) */
static int elementwise_path(const lm_planner *pl, const lm_node *n, const lm_node *m) {
  int found = 0;
  for (int s = 0; s < n->nsrc; s++) {
    const lm_node *src = n->src[s];
    int r = src == m ? 1 : lm_has_memory(pl, src) ? 0 : elementwise_path(pl, src, m);
    if (r < 0 || (r > 0 && !lm_op_is_elementwise(n->op) && !splits_rows(n))) return -1;
    found |= r;
  }
  return found;
}

static int step_computing(const lm_plan *p, int pos) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].out == pos) return i;
  return -1;
}

/* Pairs each GEMM whose output only an elementwise kernel of the same shape
 * reads (bias, activation, residual) with that kernel. False when out of
 * memory. */
bool lm_pair_gemm_epilogues(lm_planner *pl, lm_plan *p) {
  const lm_graph *g = pl->g;
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *e = &p->steps[i];
    e->gemm_partner = -1;
    if (e->kind != LM_STEP_KERNEL || e->out >= p->nnodes || e->kernel.reduce != LK_RED_NONE ||
        e->kernel.nstats > 0)
      continue;
    lm_node *root = g->nodes[e->out];
    for (int a = 1; a < e->kernel.nslots && e->gemm_partner < 0; a++) {
      int pos = e->arg_pos[a];
      if (e->arg_key[a] || pos < 0 || pos >= p->nnodes) continue;
      lm_node *m = g->nodes[pos];
      if (lm_is_computed(m) || m->op != LM_MATMUL || lm_plan_of(pl, m)->target ||
          lm_shape_numel(&m->shape) != lm_shape_numel(&root->shape) ||
          elementwise_path(pl, root, m) != 1)
        continue;
      int inside = lm_used_only_inside(pl, m, root);
      if (inside < 0) return false;
      if (!inside) continue;
      int j = step_computing(p, pos);
      if (j < 0 || p->steps[j].kind != LM_STEP_GEMM) continue;
      p->steps[j].deferred = true;
      e->gemm_partner = j;
      e->gemm_slot = a;
    }
  }
  return true;
}

/* ------------------------------------------------------------ GEMM prologues */

/* Below this size an operand is stored: it stays in cache between its kernel
 * and the GEMM anyway. */
#define PROLOGUE_MIN_BYTES ((int64_t)1 << 20)

/* Whether GEMM step s reads the whole buffer at pos, row-major, as its B
 * operand and not as A (one batch). */
static bool reads_whole_b(const lm_step *s, int pos) {
  const lm_gemm *gm = &s->gemm;
  if (s->kind != LM_STEP_GEMM || gm->b_pos != pos || gm->a_pos == pos || gm->b_offset != 0)
    return false;
  for (int d = 0; d < gm->nbatch; d++)
    if (gm->batch[d] != 1) return false;
  return gm->ldb == (gm->b_trans ? gm->K : gm->N);
}

/* Whether kernel step e's output can be made inside the GEMMs that read it:
 * an elementwise kernel (any subset of its points can be computed alone) on
 * the CPU whose large output only GEMMs read, each as its whole B operand. */
static bool makes_gemm_operand(const lm_graph *g, const lm_plan *p, const lm_step *e) {
  if (e->kind != LM_STEP_KERNEL || e->out >= p->nnodes || p->published[e->out] ||
      e->kernel.reduce != LK_RED_NONE || e->kernel.nstats > 0 || e->gemm_partner >= 0 ||
      e->kernel.nslots > LM_PROLOGUE_MAX_SLOTS ||
      e->outer * (int64_t)loom_dtype_size(e->dtype) < PROLOGUE_MIN_BYTES ||
      g->nodes[e->out]->device.type != LOOM_DEVICE_CPU)
    return false;
  int readers = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const lm_step *s = &p->steps[i];
    if (s->kind == LM_STEP_GEMM && (s->gemm.a_pos == e->out || s->gemm.b_pos == e->out)) {
      /* (one with an epilogue; widened operands are not made in blocks) */
      if (!reads_whole_b(s, e->out) || s->deferred || s->gemm.in_dtype != s->gemm.dtype)
        return false;
      readers++;
    } else if (lm_step_reads_pos(s, e->out))
      return false;
  }
  return readers > 0;
}

void lm_pair_gemm_prologues(const lm_graph *g, lm_plan *p) {
  for (int j = 0; j < p->nsteps; j++) {
    lm_step *e = &p->steps[j];
    if (!makes_gemm_operand(g, p, e)) continue;
    e->deferred = true;
    for (int i = 0; i < p->nsteps; i++)
      if (p->steps[i].kind == LM_STEP_GEMM && p->steps[i].gemm.b_pos == e->out)
        p->steps[i].b_producer = j;
  }
}
