/* Row kernels: an elementwise node whose inline expression reads statistics
 * of its own rows (softmax's log-sum-exp, layer norm's mean and variance)
 * computes them itself, once per row, in one kernel; the row comes from memory
 * once. The statistics must be read only by the group's kernels. */
#include <stdlib.h>

#include "passes/plan_internal.h"

/* ------------------------------------------------------------ row kernels */

/* A map whose inline expression reads statistics of its own rows (softmax's
 * log-sum-exp, layer norm's mean and variance: reductions over the last dim,
 * with their epilogues) computes them itself, once per row, before the row's
 * points: one kernel, the row read from memory once and from cache after.
 * The statistics must be read by the group's kernels only (the map's and
 * each other's: the variance reads the mean). */

static lm_node *stat_reduction(const lm_planner *pl, lm_node *m) {
  lm_node *fused = lm_plan_of(pl, m)->fused_reduce;
  return fused ? fused : lm_op_is_reduce(m->op) ? m : NULL;
}

/* Rows too few and long for one thread each are left to split reductions. */
static bool row_kernel_root(const lm_planner *pl, const lm_node *e) {
  if (!lm_materialized(pl, e) || lm_plan_of(pl, e)->fused_reduce || !lm_op_is_elementwise(e->op))
    return false;
  int nd = e->shape.ndim;
  if (nd < 2 || e->shape.dim[nd - 1] < 2) return false;
  int64_t len = e->shape.dim[nd - 1], rows = lm_shape_numel(&e->shape) / len;
  return rows > 0 && !(rows <= SPLIT_MAX_OUTER && len >= SPLIT_MIN_REDUCED);
}

static bool stat_candidate(const lm_planner *pl, const lm_node *e, lm_node *m) {
  if (!lm_materialized(pl, m) || m == e) return false;
  const lm_plan_node *pm = lm_plan_of(pl, m);
  if (pm->target || pm->row_root) return false;
  lm_node *r = stat_reduction(pl, m);
  if (!r || lm_plan_of(pl, r)->target) return false;
  if (r->op != LM_RSUM && r->op != LM_RMAX && r->op != LM_RMIN && r->op != LM_RLSE) return false;
  int nd = e->shape.ndim;
  return r->arg.axes == 1u << (nd - 1) && lm_shape_eq(&r->src[0]->shape, &e->shape);
}

typedef struct row_group {
  lm_planner *pl;
  lm_node *root;
  lm_node *stat[LK_MAX_STATS];
  node_list list[LK_MAX_STATS + 1]; /* inline nodes of each kernel: root's, then each stat's */
  int n;
  bool oom;
} row_group;

static lm_node *group_kernel(const row_group *grp, int i) {
  return i == 0 ? grp->root : grp->stat[i - 1];
}

static bool in_group(const row_group *grp, const lm_node *m) {
  for (int i = 0; i < grp->n; i++)
    if (grp->stat[i] == m) return true;
  return false;
}

static void group_free_lists(row_group *grp) {
  for (int i = 0; i <= LK_MAX_STATS; i++) {
    free(grp->list[i].items);
    grp->list[i] = (node_list){0};
  }
}

/* Adds the statistics kernel i's inline expression reads, and theirs. */
static void gather_stats(row_group *grp, int i) {
  node_list *l = &grp->list[i];
  lm_node *k = group_kernel(grp, i);
  lm_collect_inline(grp->pl, k, k, lm_walk_epoch(), l);
  grp->oom |= l->oom;
  for (int j = 0; j < l->len && !grp->oom; j++)
    for (int s = 0; s < l->items[j]->nsrc; s++) {
      lm_node *m = l->items[j]->src[s];
      if (grp->n == LK_MAX_STATS || in_group(grp, m) || !stat_candidate(grp->pl, grp->root, m))
        continue;
      grp->stat[grp->n++] = m;
      gather_stats(grp, grp->n);
    }
}

/* Counts, into group_uses, the reads of each node by the group's nodes, the
 * way lm_mark() counts uses (an inline view passes on its readers): a node read
 * only inside the group has group_uses == uses. A node inline in two of the
 * group's kernels is one reader, as in lm_mark(). */
static void count_group_uses(row_group *grp) {
  lm_planner *pl = grp->pl;
  uint64_t epoch = lm_walk_epoch();
  for (int i = 0; i <= grp->n; i++)
    for (int j = 0; j < grp->list[i].len; j++) {
      lm_node *n = grp->list[i].items[j];
      lm_plan_of(pl, n)->group_uses = 0;
      for (int s = 0; s < n->nsrc; s++) /* (leaves are never counted) */
        if (!lm_is_computed(n->src[s])) lm_plan_of(pl, n->src[s])->group_uses = 0;
    }
  for (int i = 0; i <= grp->n; i++)
    for (int j = 0; j < grp->list[i].len; j++) {
      lm_node *n = grp->list[i].items[j];
      if (n->visit == epoch) continue; /* counted from another kernel's list */
      n->visit = epoch;
      const lm_plan_node *pn = lm_plan_of(pl, n);
      bool inline_view = lm_op_is_view(n->op) && !pn->materialize;
      for (int s = 0; s < n->nsrc; s++) {
        bool repeated = false;
        for (int q = 0; q < s; q++) repeated |= n->src[q] == n->src[s];
        if (!repeated && !lm_is_computed(n->src[s]))
          lm_plan_of(pl, n->src[s])->group_uses += inline_view ? (pn->uses > 0 ? pn->uses : 1) : 1;
      }
    }
}

/* Whether an inline node leads to a statistic (its reads of it would be
 * recomputed by any kernel outside the group that also reads the node). */
static bool reaches_stat(row_group *grp, lm_node *n, uint64_t epoch) {
  lm_plan_node *pn = lm_plan_of(grp->pl, n);
  if (n->visit == epoch) return pn->reaches_stat;
  n->visit = epoch;
  pn->reaches_stat = false;
  for (int s = 0; s < n->nsrc; s++) {
    lm_node *src = n->src[s];
    if (in_group(grp, src))
      pn->reaches_stat = true;
    else if (!lm_has_memory(grp->pl, src) && reaches_stat(grp, src, epoch))
      pn->reaches_stat = true;
  }
  return pn->reaches_stat;
}

/* Every statistic, and every inline node leading to one, read only inside. */
static bool group_closed(row_group *grp) {
  count_group_uses(grp);
  for (int i = 0; i < grp->n; i++) {
    const lm_plan_node *stat = lm_plan_of(grp->pl, grp->stat[i]);
    if (stat->group_uses != stat->uses) return false;
  }
  uint64_t epoch = lm_walk_epoch();
  for (int i = 0; i <= grp->n; i++)
    for (int j = 0; j < grp->list[i].len; j++) {
      lm_node *n = grp->list[i].items[j];
      const lm_plan_node *pn = lm_plan_of(grp->pl, n);
      if (n != group_kernel(grp, i) && pn->group_uses != pn->uses && reaches_stat(grp, n, epoch))
        return false;
    }
  return true;
}

/* False when out of memory. */
bool lm_fuse_rows(lm_planner *pl) {
  const lm_graph *g = pl->g;
  for (int i = 0; i < g->n; i++) {
    lm_node *e = g->nodes[i];
    if (!row_kernel_root(pl, e)) continue;
    row_group grp = {.pl = pl, .root = e};
    gather_stats(&grp, 0);
    bool closed = grp.n > 0 && !grp.oom && group_closed(&grp);
    for (int s = 0; s < grp.n && closed; s++) {
      lm_plan_node *m = lm_plan_of(pl, grp.stat[s]);
      lm_plan_node *r = lm_plan_of(pl, stat_reduction(pl, grp.stat[s]));
      m->row_root = r->row_root = e;
      m->materialize = r->materialize = false;
    }
    if (closed) lm_plan_of(pl, e)->row_root = e; /* marks the group's root */
    group_free_lists(&grp);
    if (grp.oom) return false;
  }
  return true;
}

/* When lowering found a statistic read off its row: they get kernels again. */
void lm_unfuse_rows(lm_planner *pl, const lm_node *e) {
  const lm_graph *g = pl->g;
  for (int i = 0; i < g->n; i++) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n) || lm_plan_of(pl, n)->row_root != e) continue;
    lm_plan_of(pl, n)->row_root = NULL;
    lm_plan_of(pl, n)->materialize =
        true; /* the root, a stat, or a reduction that is its own stat */
  }
  for (int i = 0; i < g->n; i++) { /* an epilogue's reduction stays inside its kernel */
    lm_node *n = g->nodes[i];
    lm_node *fused = lm_is_computed(n) ? NULL : lm_plan_of(pl, n)->fused_reduce;
    if (fused) lm_plan_of(pl, fused)->materialize = false;
  }
}
