/* Planning: the passes in order (mark and fuse, row kernels, split
 * reductions while lowering each materialized node, GEMM pairing, memory),
 * each in its own file under passes/ (plan_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan_internal.h"

void lm_plan_free(lm_plan *p) {
  if (!p) return;
  if (p->release_code) p->release_code(p);
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    if (s->kind == LM_STEP_COLLECTIVE) free(s->coll.in_count);
    if (p->borrows_steps) continue;
    if (s->kind == LM_STEP_KERNEL) {
      free(s->kernel.inst);
      free(s->arg_pos);
      free(s->params);
      free(s->arg_key);
    }
    if (s->kind == LM_STEP_COLLECTIVE) free(s->coll.in_pos);
    free(s->free_after);
  }
  free(p->steps);
  if (!p->borrows_steps) {
    free(p->published);
    free(p->materialized);
  }
  free(p);
}

bool lm_planner_stores(const void *pl, const lm_node *n) { return lm_materialized(pl, n); }

/* A record for the temporary at position pos (from the graph's size on),
 * zeroed; false when out of memory. */
static bool planner_reserve(lm_planner *pl, int pos) {
  if (pos < pl->cap) return true;
  int ncap = 2 * pl->cap > pos ? 2 * pl->cap : pos + 1;
  lm_plan_node *grown = realloc(pl->node, sizeof *grown * (size_t)ncap);
  if (!grown) return false;
  memset(grown + pl->cap, 0, sizeof *grown * (size_t)(ncap - pl->cap));
  pl->node = grown, pl->cap = ncap;
  return true;
}

void lm_library_step(lm_step *step, lm_step_kind kind, const lm_node *n) {
  step->kind = kind;
  step->out = n->pos;
  step->dtype = n->dtype;
  step->outer = lm_shape_numel(&n->shape);
  step->gemm_partner = -1;
  step->b_producer = -1;
}

/* A collective's step: its sources are stored (fusion.c marks them) and read
 * whole. */
loom_status lm_plan_collective(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                               size_t errlen) {
  const lm_node *x = n->src[0];
  lm_collective *c = &step->coll;
  memset(c, 0, sizeof *c);
  c->op = n->op;
  c->reduce = n->arg.coll.reduce;
  c->root = n->arg.coll.root;
  c->world = n->arg.coll.world;
  c->nin = n->nsrc;
  c->in_pos = malloc(sizeof *c->in_pos * (size_t)n->nsrc);
  c->in_count = malloc(sizeof *c->in_count * (size_t)n->nsrc);
  if (!c->in_pos || !c->in_count) {
    snprintf(err, errlen, "out of memory");
    return LOOM_ERR_OOM;
  }
  for (int s = 0; s < n->nsrc; s++) {
    c->in_pos[s] = lm_graph_pos(pl->g, n->src[s]);
    c->in_count[s] = lm_shape_numel(&n->src[s]->shape);
    c->count += c->in_count[s];
  }
  c->dtype = x->dtype;
  c->outer = 1, c->inner = 1;
  for (int d = 0; d < x->shape.ndim; d++) {
    if (n->op == LM_ALL_GATHER && d < n->arg.coll.axis)
      c->outer *= x->shape.dim[d];
    else
      c->inner *= x->shape.dim[d];
  }
  lm_library_step(step, LM_STEP_COLLECTIVE, n);
  return LOOM_OK;
}

/* A sort's step: its source is stored (fusion.c marks it) and read whole,
 * as rows of its last dim. */
loom_status lm_plan_sort(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                         size_t errlen) {
  (void)err, (void)errlen;
  const lm_node *x = n->src[0];
  int64_t n_cols = x->shape.dim[x->shape.ndim - 1], numel = lm_shape_numel(&x->shape);
  step->sort = (lm_sort){.dtype = x->dtype,
                         .in_pos = lm_graph_pos(pl->g, n->src[0]),
                         .rows = n_cols > 0 ? numel / n_cols : lm_shape_numel(&n->shape),
                         .n = n_cols,
                         .k = n->arg.sort.k,
                         .descending = n->arg.sort.descending};
  lm_library_step(step, LM_STEP_SORT, n);
  return LOOM_OK;
}

void lm_check_describe(const lm_node *n, lm_check_step *c) {
  const lm_node *x = n->src[0];
  int nd = x->shape.ndim, axis = n->arg.check.axis;
  int64_t rows = 1, hi = 0;
  for (int d = 0; d + 1 < nd; d++) rows *= x->shape.dim[d];
  if (n->arg.check.rule == LM_CHECK_INDEX) hi = n->src[1]->shape.dim[axis];
  if (n->arg.check.rule == LM_CHECK_START)
    hi = n->src[1]->shape.dim[axis] - n->src[2]->shape.dim[axis] + 1;
  *c = (lm_check_step){.dtype = x->dtype,
                       .in_pos = -1,
                       .rule = n->arg.check.rule,
                       .has_ignore = n->arg.check.has_ignore,
                       .lo = 0,
                       .hi = hi,
                       .ignore = n->arg.check.has_ignore ? n->arg.check.ignore : 0,
                       .rows = rows,
                       .cols = nd ? x->shape.dim[nd - 1] : 1};
  memcpy(c->op, n->arg.check.op, LM_CHECK_OP_LEN);
  c->op[LM_CHECK_OP_LEN - 1] = 0;
}

/* A check's step: its source is stored (fusion.c marks it) and read whole. */
loom_status lm_plan_check(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                          size_t errlen) {
  (void)err, (void)errlen;
  lm_check_describe(n, &step->check);
  step->check.in_pos = lm_graph_pos(pl->g, n->src[0]);
  lm_library_step(step, LM_STEP_CHECK, n);
  return LOOM_OK;
}

/* The step computing n, planned by its kind's row (passes/step_kinds.c). */
static loom_status lower_step(const lm_planner *pl, lm_plan *p, lm_node *n, char *err,
                              size_t errlen) {
  lm_step *step = &p->steps[p->nsteps++];
  return lm_step_kinds[lm_step_kind_of(n->op)]->plan(pl, n, step, err, errlen);
}

/* A row group's root: one kernel with its statistics, or, when one of them
 * is read off its row, the statistics' own kernels and then the root's. */
static loom_status plan_node(lm_planner *pl, lm_plan *p, lm_node *n, temps *t, char *err,
                             size_t errlen);

static loom_status plan_row_root(lm_planner *pl, lm_plan *p, lm_node *e, temps *t, char *err,
                                 size_t errlen) {
  const lm_graph *g = pl->g;
  bool misaligned;
  lm_step *step = &p->steps[p->nsteps++];
  loom_status st = lm_lower_rows(pl, e, step, &misaligned, err, errlen);
  if (st == LOOM_OK || !misaligned) return st;
  memset(step, 0, sizeof *step);
  p->nsteps--;
  int first = p->nsteps;
  lm_unfuse_rows(pl, e);
  st = LOOM_OK;
  for (int i = 0; i < g->n && st == LOOM_OK && g->nodes[i] != e; i++) {
    lm_node *n = g->nodes[i];
    bool stat = lm_materialized(pl, n) && n->pos >= 0;
    for (int s = 0; stat && s < first; s++) stat = p->steps[s].out != n->pos;
    if (stat) st = plan_node(pl, p, n, t, err, errlen);
  }
  return st == LOOM_OK ? lower_step(pl, p, e, err, errlen) : st;
}

/* Steps for node n, splitting its reduction first when that pays. */
static loom_status plan_node(lm_planner *pl, lm_plan *p, lm_node *n, temps *t, char *err,
                             size_t errlen) {
  lm_node *fused = lm_plan_of(pl, n)->fused_reduce;
  lm_node *red = fused ? fused : lm_op_is_reduce(n->op) ? n : NULL;
  bool oom = false;
  lm_node *final = red ? lm_split_reduction(red, t, &oom) : NULL;
  lm_node *partial = final ? final->src[0] : NULL;
  /* the partial results get memory: the schedule's next temporary position */
  if (partial && planner_reserve(pl, p->nnodes + p->ntemps)) {
    partial->pos = p->nnodes + p->ntemps++;
    lm_plan_of(pl, partial)->materialize = true;
  } else if (partial) {
    oom = true;
  }
  if (oom) {
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  if (!final) return lower_step(pl, p, n, err, errlen);
  loom_status st = lower_step(pl, p, partial, err, errlen);
  if (st != LOOM_OK) return st;
  if (red == n) {
    /* same output order: it writes n's buffer, and has n's position (and
     * record: a materialized reduction that fuses nothing) */
    final->pos = n->pos;
    return lower_step(pl, p, final, err, errlen);
  }
  lm_plan_of(pl, n)->split_reduce = final;
  st = lower_step(pl, p, n, err, errlen);
  lm_plan_of(pl, n)->split_reduce = NULL; /* final goes with the other temporaries */
  return st;
}

static bool hoisted_check(const lm_planner *pl, const lm_node *n) {
  return lm_op_is_check(n->op) && lm_materialized(pl, n) && lm_is_computed(n->src[0]);
}

loom_status lm_plan_make(const lm_graph *g, bool fuse, lm_plan **out, char *err, size_t errlen) {
  *out = NULL;
  /* a record per graph position; split reductions' partial results add theirs */
  lm_planner pl = {
      .g = g, .node = calloc(g->n > 0 ? (size_t)g->n : 1, sizeof(lm_plan_node)), .cap = g->n};
  if (!pl.node) {
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  lm_mark(&pl, fuse);
  if (fuse && (!lm_fuse_epilogues(&pl) || !lm_fuse_rows(&pl))) {
    free(pl.node);
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  lm_plan *p = calloc(1, sizeof *p);
  int count = 0;
  for (int i = 0; i < g->n; i++) {
    const lm_plan_node *marks = lm_plan_marks(&pl, g->nodes[i]);
    count += marks->materialize || marks->row_root;
  }
  if (p) {
    p->steps = calloc((size_t)(2 * count + 1), sizeof(lm_step));
    p->published = calloc(g->n > 0 ? (size_t)g->n : 1, sizeof(bool));
    p->materialized = calloc(g->n > 0 ? (size_t)g->n : 1, sizeof(bool));
  }
  if (!p || !p->steps || !p->published || !p->materialized) {
    lm_plan_free(p);
    free(pl.node);
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  p->nnodes = g->n;
  loom_status st = LOOM_OK;
  /* Checks of leaves (a program's token ids, positions) first: a run that
   * fails one stops before any other step has run. */
  for (int i = 0; i < g->n && st == LOOM_OK; i++)
    if (hoisted_check(&pl, g->nodes[i])) {
      p->published[i] = lm_plan_of(&pl, g->nodes[i])->target;
      st = lower_step(&pl, p, g->nodes[i], err, errlen);
    }
  for (int i = 0; i < g->n && st == LOOM_OK; i++) {
    lm_node *n = g->nodes[i];
    if (!lm_materialized(&pl, n) || hoisted_check(&pl, n)) continue;
    p->published[i] = lm_plan_of(&pl, n)->target;
    temps t = {.n = 0};
    if (!fuse)
      st = lower_step(&pl, p, n, err, errlen);
    else if (lm_plan_of(&pl, n)->row_root == n)
      st = plan_row_root(&pl, p, n, &t, err, errlen);
    else
      st = plan_node(&pl, p, n, &t, err, errlen);
    lm_plan_of(&pl, n)->fused_reduce = NULL; /* planned: what it fused is done with */
    for (int k = t.n - 1; k >= 0; k--) lm_node_release(t.nodes[k]);
  }
  for (int i = 0; i < p->nsteps; i++)
    p->steps[i].gemm_partner = -1, p->steps[i].b_producer = -1, p->steps[i].donor = -1;
  if (st == LOOM_OK && !lm_plan_overlap_collectives(p)) {
    snprintf(err, errlen, "planning: out of memory");
    st = LOOM_ERR_OOM;
  }
  if (st == LOOM_OK && fuse && !lm_pair_gemm_epilogues(&pl, p)) {
    snprintf(err, errlen, "planning: out of memory");
    st = LOOM_ERR_OOM;
  }
  if (st == LOOM_OK && fuse) lm_pair_gemm_prologues(g, p);
  if (st == LOOM_OK && !lm_plan_frees(p)) {
    snprintf(err, errlen, "planning: out of memory");
    st = LOOM_ERR_OOM;
  }
  if (st == LOOM_OK) lm_plan_collective_waits(p);
  for (int i = 0; i < g->n; i++) p->materialized[i] = lm_materialized(&pl, g->nodes[i]);
  free(pl.node);
  if (st != LOOM_OK) {
    lm_plan_free(p);
    return st;
  }
  *out = p;
  return LOOM_OK;
}
