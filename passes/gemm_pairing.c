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
      e->outer * (int64_t)loom_dtype_size(e->dtype) < LM_PROLOGUE_MIN_BYTES ||
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

/* ------------------------------------------------------------ B as windows */

/* Element i of view node n (a reshape or a permute) as an element of its source. */
static int64_t view_source_index(const lm_node *n, int64_t i) {
  if (n->op == LM_RESHAPE) return i;
  const loom_shape *out = &n->shape, *in = &n->src[0]->shape;
  int64_t at[LOOM_MAX_DIMS], src_strides[LOOM_MAX_DIMS], r = 0;
  for (int d = out->ndim - 1; d >= 0; d--) at[d] = i % out->dim[d], i /= out->dim[d];
  lm_shape_strides(in, src_strides);
  for (int d = 0; d < out->ndim; d++) r += at[d] * src_strides[n->arg.perm[d]];
  return r;
}

typedef struct windows_chain {
  const lm_node *views[16]; /* from B's node down, each a reshape or permute */
  int nviews;
  const lm_node *window;
  int64_t k, cols; /* B's K x N */
} windows_chain;

/* Whether B(p, j) is the window element im2col puts there: p = (c, kh, kw),
 * j = (n, oh, ow) over the window node's [n, c, oh, ow, kh, kw]. */
static bool im2col_element(const windows_chain *w, int64_t p, int64_t j) {
  int64_t i = p * w->cols + j;
  for (int v = 0; v < w->nviews; v++) i = view_source_index(w->views[v], i);
  const int64_t *d = w->window->shape.dim; /* n c oh ow kh kw */
  int64_t want =
      ((((j / (d[2] * d[3]) * d[1] + p / (d[4] * d[5])) * d[2] + j / d[3] % d[2]) * d[3] +
        j % d[3]) *
           d[4] +
       p / d[5] % d[4]) *
          d[5] +
      p % d[5];
  return i == want;
}

/* Every term at a few columns and every column at a few terms: the views
 * between B and the windows are digit rearrangements, which these pin down. */
static bool reads_as_im2col(const windows_chain *w) {
  int64_t js[3] = {0, w->cols / 2, w->cols - 1}, ps[3] = {0, w->k / 2, w->k - 1};
  for (int t = 0; t < 3; t++) {
    for (int64_t p = 0; p < w->k; p++)
      if (!im2col_element(w, p, js[t])) return false;
    for (int64_t j = 0; j < w->cols; j++)
      if (!im2col_element(w, ps[t], j)) return false;
  }
  return true;
}

/* Fills gm->win when GEMM step gm's B, made by kernel step e, is the im2col
 * matrix of a 2-D convolution (frontend/nn.c loom_conv2d_f, groups 1) over an
 * image e reads from memory: views (reshapes, permutes) of the windows of a
 * zero padding of it. */
static void find_windows(const lm_graph *g, const lm_step *e, lm_gemm *gm) {
  windows_chain w = {.k = gm->K, .cols = gm->N};
  const lm_node *n = g->nodes[e->out];
  if (gm->b_trans || gm->a_pos == gm->b_pos || w.k < 1 || w.cols < 1 ||
      lm_shape_numel(&n->shape) != w.k * w.cols)
    return;
  while ((n->op == LM_RESHAPE || n->op == LM_PERMUTE) && w.nviews < 16)
    w.views[w.nviews++] = n, n = n->src[0];
  if (n->op != LM_WINDOW || n->shape.ndim != 6) return;
  w.window = n;
  const lm_node *padded = n->src[0], *image = padded;
  int64_t pad[2] = {0, 0};
  if (padded->op == LM_PAD) {
    image = padded->src[0];
    if (padded->arg.pad.value != 0 || image->shape.ndim != 4) return;
    for (int d = 0; d < 4; d++) {
      int64_t lo = padded->arg.pad.lo[d];
      if (padded->arg.pad.lo_from_end[d] || lo < 0 ||
          padded->shape.dim[d] < image->shape.dim[d] + lo || (d < 2 && lo != 0))
        return;
    }
    pad[0] = padded->arg.pad.lo[2], pad[1] = padded->arg.pad.lo[3];
  }
  if (image->shape.ndim != 4 || image->dtype != gm->dtype || gm->in_dtype != gm->dtype) return;
  /* the image as the kernel reads it from memory, maybe through reshapes */
  int x_pos = -1;
  for (const lm_node *m = image; x_pos < 0; m = m->src[0]) {
    for (int a = 1; a < e->kernel.nslots && x_pos < 0; a++)
      if (!e->arg_key[a] && e->arg_pos[a] >= 0 && e->arg_pos[a] < g->n &&
          g->nodes[e->arg_pos[a]] == m)
        x_pos = e->arg_pos[a];
    if (x_pos < 0 && m->op != LM_RESHAPE) return;
  }
  const int64_t *wd = n->shape.dim, *xd = image->shape.dim;
  const lm_node *win = n;
  /* the padding at the end must hold every window: loom_conv2d_f pads both sides */
  for (int i = 0; i < 2; i++)
    if (win->arg.window.stride[i] < 1 || win->arg.window.dilation[i] < 1 ||
        (wd[2 + i] - 1) * win->arg.window.stride[i] +
                (wd[4 + i] - 1) * win->arg.window.dilation[i] >=
            padded->shape.dim[2 + i])
      return;
  if (wd[0] != xd[0] || wd[1] != xd[1] || !reads_as_im2col(&w)) return;
  gm->win =
      (lm_gemm_windows){.on = true,
                        .x_pos = x_pos,
                        .n = xd[0],
                        .c = xd[1],
                        .h = xd[2],
                        .w = xd[3],
                        .oh = wd[2],
                        .ow = wd[3],
                        .kh = wd[4],
                        .kw = wd[5],
                        .stride = {win->arg.window.stride[0], win->arg.window.stride[1]},
                        .dilation = {win->arg.window.dilation[0], win->arg.window.dilation[1]},
                        .pad = {pad[0], pad[1]}};
}

void lm_pair_gemm_prologues(const lm_graph *g, lm_plan *p) {
  for (int j = 0; j < p->nsteps; j++) {
    lm_step *e = &p->steps[j];
    if (!makes_gemm_operand(g, p, e)) continue;
    e->deferred = true;
    for (int i = 0; i < p->nsteps; i++)
      if (p->steps[i].kind == LM_STEP_GEMM && p->steps[i].gemm.b_pos == e->out) {
        p->steps[i].b_producer = j;
        find_windows(g, e, &p->steps[i].gemm);
      }
  }
}
