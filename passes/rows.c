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

static lm_node *stat_reduction(lm_node *m) {
  return m->fused_reduce ? m->fused_reduce : lm_op_is_reduce(m->op) ? m : NULL;
}

/* Rows too few and long for one thread each are left to split reductions. */
static bool row_kernel_root(const lm_node *e) {
  if (lm_is_computed(e) || !e->materialize || e->fused_reduce || !lm_op_is_elementwise(e->op))
    return false;
  int nd = e->shape.ndim;
  if (nd < 2 || e->shape.dim[nd - 1] < 2) return false;
  int64_t len = e->shape.dim[nd - 1], rows = lm_shape_numel(&e->shape) / len;
  return rows > 0 && !(rows <= SPLIT_MAX_OUTER && len >= SPLIT_MIN_REDUCED);
}

static bool stat_candidate(const lm_node *e, lm_node *m) {
  if (lm_is_computed(m) || !m->materialize || m->target || m->row_root || m == e) return false;
  lm_node *r = stat_reduction(m);
  if (!r || r->target) return false;
  if (r->op != LM_RSUM && r->op != LM_RMAX && r->op != LM_RMIN && r->op != LM_RLSE) return false;
  int nd = e->shape.ndim;
  return r->arg.axes == 1u << (nd - 1) && lm_shape_eq(&r->src[0]->shape, &e->shape);
}

typedef struct row_group {
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
  lm_collect_inline(k, k, lm_walk_epoch(), l);
  grp->oom |= l->oom;
  for (int j = 0; j < l->len && !grp->oom; j++)
    for (int s = 0; s < l->items[j]->nsrc; s++) {
      lm_node *m = l->items[j]->src[s];
      if (grp->n == LK_MAX_STATS || in_group(grp, m) || !stat_candidate(grp->root, m)) continue;
      grp->stat[grp->n++] = m;
      gather_stats(grp, grp->n);
    }
}

/* Counts, into group_uses, the reads of each node by the group's nodes, the
 * way lm_mark() counts uses (an inline view passes on its readers): a node read
 * only inside the group has group_uses == uses. A node inline in two of the
 * group's kernels is one reader, as in lm_mark(). */
static void count_group_uses(row_group *grp) {
  uint64_t epoch = lm_walk_epoch();
  for (int i = 0; i <= grp->n; i++)
    for (int j = 0; j < grp->list[i].len; j++) {
      lm_node *n = grp->list[i].items[j];
      n->group_uses = 0;
      for (int s = 0; s < n->nsrc; s++) n->src[s]->group_uses = 0;
    }
  for (int i = 0; i <= grp->n; i++)
    for (int j = 0; j < grp->list[i].len; j++) {
      lm_node *n = grp->list[i].items[j];
      if (n->visit == epoch) continue; /* counted from another kernel's list */
      n->visit = epoch;
      bool inline_view = lm_op_is_view(n->op) && !n->materialize;
      for (int s = 0; s < n->nsrc; s++) {
        bool repeated = false;
        for (int q = 0; q < s; q++) repeated |= n->src[q] == n->src[s];
        if (!repeated && !lm_is_computed(n->src[s]))
          n->src[s]->group_uses += inline_view ? (n->uses > 0 ? n->uses : 1) : 1;
      }
    }
}

/* Whether an inline node leads to a statistic (its reads of it would be
 * recomputed by any kernel outside the group that also reads the node). */
static bool reaches_stat(row_group *grp, lm_node *n, uint64_t epoch) {
  if (n->visit == epoch) return n->reaches_stat;
  n->visit = epoch;
  n->reaches_stat = false;
  for (int s = 0; s < n->nsrc; s++) {
    lm_node *src = n->src[s];
    if (in_group(grp, src))
      n->reaches_stat = true;
    else if (!lm_is_computed(src) && !src->materialize && reaches_stat(grp, src, epoch))
      n->reaches_stat = true;
  }
  return n->reaches_stat;
}

/* Every statistic, and every inline node leading to one, read only inside. */
static bool group_closed(row_group *grp) {
  count_group_uses(grp);
  for (int i = 0; i < grp->n; i++)
    if (grp->stat[i]->group_uses != grp->stat[i]->uses) return false;
  uint64_t epoch = lm_walk_epoch();
  for (int i = 0; i <= grp->n; i++)
    for (int j = 0; j < grp->list[i].len; j++) {
      lm_node *n = grp->list[i].items[j];
      if (n != group_kernel(grp, i) && n->group_uses != n->uses && reaches_stat(grp, n, epoch))
        return false;
    }
  return true;
}

/* False when out of memory. */
bool lm_fuse_rows(const lm_graph *g) {
  for (int i = 0; i < g->n; i++) {
    lm_node *e = g->nodes[i];
    if (!row_kernel_root(e)) continue;
    row_group grp = {.root = e};
    gather_stats(&grp, 0);
    bool closed = grp.n > 0 && !grp.oom && group_closed(&grp);
    for (int s = 0; s < grp.n && closed; s++) {
      lm_node *m = grp.stat[s], *r = stat_reduction(m);
      m->row_root = r->row_root = e;
      m->materialize = r->materialize = false;
    }
    if (closed) e->row_root = e; /* marks the group's root */
    group_free_lists(&grp);
    if (grp.oom) return false;
  }
  return true;
}

/* When lowering found a statistic read off its row: they get kernels again. */
void lm_unfuse_rows(const lm_graph *g, const lm_node *e) {
  for (int i = 0; i < g->n; i++) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n) || n->row_root != e) continue;
    n->row_root = NULL;
    n->materialize = true; /* the root, a stat, or a reduction that is its own stat */
  }
  for (int i = 0; i < g->n; i++) { /* an epilogue's reduction stays inside its kernel */
    lm_node *n = g->nodes[i];
    if (!lm_is_computed(n) && n->fused_reduce) n->fused_reduce->materialize = false;
  }
}
