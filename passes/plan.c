/* Planning: the passes in order (mark and fuse, row kernels, split
 * reductions while lowering each materialized node, GEMM pairing, memory),
 * each in its own file under passes/ (plan_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan_internal.h"

void lm_schedule_free(lm_schedule *p) {
  if (!p) return;
  for (int i = 0; i < p->nsteps; i++) {
    free(p->steps[i].kernel.inst);
    free(p->steps[i].arg_pos);
    free(p->steps[i].arg_key);
    free(p->steps[i].free_after);
  }
  free(p->steps);
  free(p->published);
  free(p);
}

static loom_status lower_step(const lm_graph *g, lm_schedule *p, lm_node *n, char *err,
                              size_t errlen) {
  lm_step *step = &p->steps[p->nsteps++];
  if (n->op == LM_MATMUL) {
    lm_plan_gemm(g, n, step);
    return LOOM_OK;
  }
  return lm_lower(g, n, step, err, errlen);
}

/* A row group's root: one kernel with its statistics, or, when one of them
 * is read off its row, the statistics' own kernels and then the root's. */
static loom_status plan_node(const lm_graph *g, lm_schedule *p, lm_node *n, temps *t, char *err,
                             size_t errlen);

static loom_status plan_row_root(const lm_graph *g, lm_schedule *p, lm_node *e, temps *t, char *err,
                                 size_t errlen) {
  bool misaligned;
  lm_step *step = &p->steps[p->nsteps++];
  loom_status st = lm_lower_rows(g, e, step, &misaligned, err, errlen);
  if (st == LOOM_OK || !misaligned) return st;
  memset(step, 0, sizeof *step);
  p->nsteps--;
  int first = p->nsteps;
  lm_unfuse_rows(g, e);
  st = LOOM_OK;
  for (int i = 0; i < g->n && st == LOOM_OK && g->nodes[i] != e; i++) {
    lm_node *n = g->nodes[i];
    bool stat = !lm_is_computed(n) && n->materialize && n->pos >= 0;
    for (int s = 0; stat && s < first; s++) stat = p->steps[s].out != n->pos;
    if (stat) st = plan_node(g, p, n, t, err, errlen);
  }
  return st == LOOM_OK ? lower_step(g, p, e, err, errlen) : st;
}

/* Steps for node n, splitting its reduction first when that pays. */
static loom_status plan_node(const lm_graph *g, lm_schedule *p, lm_node *n, temps *t, char *err,
                             size_t errlen) {
  lm_node *red = n->fused_reduce ? n->fused_reduce : lm_op_is_reduce(n->op) ? n : NULL;
  bool oom = false;
  lm_node *final = red ? lm_split_reduction(red, t, &oom) : NULL;
  if (oom) {
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  if (!final) return lower_step(g, p, n, err, errlen);
  lm_node *partial = final->src[0];
  partial->pos = p->nnodes + p->ntemps++;
  loom_status st = lower_step(g, p, partial, err, errlen);
  if (st != LOOM_OK) return st;
  if (red == n) {
    final->pos = n->pos; /* same output order: it writes n's buffer */
    return lower_step(g, p, final, err, errlen);
  }
  n->fused_reduce = final;
  return lower_step(g, p, n, err, errlen);
}

loom_status lm_plan(const lm_graph *g, bool fuse, lm_schedule **out, char *err, size_t errlen) {
  *out = NULL;
  lm_mark(g, fuse);
  if (fuse && (!lm_fuse_epilogues(g) || !lm_fuse_rows(g))) {
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  lm_schedule *p = calloc(1, sizeof *p);
  int count = 0;
  for (int i = 0; i < g->n; i++)
    count += (g->nodes[i]->materialize || g->nodes[i]->row_root) && !lm_is_computed(g->nodes[i]);
  if (p) {
    p->steps = calloc((size_t)(2 * count + 1), sizeof(lm_step));
    p->published = calloc(g->n > 0 ? (size_t)g->n : 1, sizeof(bool));
  }
  if (!p || !p->steps || !p->published) {
    lm_schedule_free(p);
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  p->nnodes = g->n;
  loom_status st = LOOM_OK;
  for (int i = 0; i < g->n && st == LOOM_OK; i++) {
    lm_node *n = g->nodes[i];
    if (!n->materialize || lm_is_computed(n)) continue;
    p->published[i] = n->target;
    temps t = {.n = 0};
    if (!fuse)
      st = lower_step(g, p, n, err, errlen);
    else if (n->row_root == n)
      st = plan_row_root(g, p, n, &t, err, errlen);
    else
      st = plan_node(g, p, n, &t, err, errlen);
    n->fused_reduce = NULL;
    for (int k = t.n - 1; k >= 0; k--) lm_node_release(t.nodes[k]);
  }
  for (int i = 0; i < p->nsteps; i++) p->steps[i].gemm_partner = -1, p->steps[i].b_producer = -1;
  if (st == LOOM_OK && fuse && !lm_pair_gemm_epilogues(g, p)) {
    snprintf(err, errlen, "planning: out of memory");
    st = LOOM_ERR_OOM;
  }
  if (st == LOOM_OK && fuse) lm_pair_gemm_prologues(g, p);
  if (st == LOOM_OK && !lm_plan_frees(p)) {
    snprintf(err, errlen, "planning: out of memory");
    st = LOOM_ERR_OOM;
  }
  if (st != LOOM_OK) {
    lm_schedule_free(p);
    return st;
  }
  *out = p;
  return LOOM_OK;
}
