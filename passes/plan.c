/* Planning: which nodes get their own memory, and the steps computing them.
 *
 * Fusion rule: a node is materialized (ends a kernel) when it is a target, a
 * reduction, a matmul, a matmul operand that cannot be read in place, or a
 * computed value the cost rule says to store: read by several kernels and
 * costlier to recompute in each than RECOMPUTE_BUDGET, or read through a
 * broadcast and costlier than BROADCAST_BUDGET. Without fusion
 * (LOOM_NO_FUSE=1) every computed value is. Everything else is computed
 * inline by its consumer's kernel: elementwise chains, views, constants,
 * ranges and random draws. An elementwise consumer of a reduction becomes
 * the reduction's epilogue; a big reduction to few values is split in two. */
#include <math.h>
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
  if (operand->materialize || lm_is_computed(operand)) {
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
  return !lm_is_computed(n) && n->op != LM_CONST && n->op != LM_IOTA && !lm_op_is_view(n->op);
}

/* Rough cost of computing one element of an op, in simple-instruction units
 * (the op table's cost column). */
static int op_cost(const lm_node *n) { return lm_op_table[n->op].cost; }

/* A view that repeats elements: its source would be computed once per copy. */
static bool broadcasts(const lm_node *n) {
  return n->op == LM_EXPAND && lm_shape_numel(&n->shape) > lm_shape_numel(&n->src[0]->shape);
}

/* Recomputing a value in each reader beats a round trip through memory
 * while it costs at most this much per element for all extra readers. */
#define RECOMPUTE_BUDGET 8
/* A value read through a broadcast is stored once it costs more than this:
 * recomputing it would repeat it for every copy. */
#define BROADCAST_BUDGET 2

/* Planning writes the scratch fields of unrealized nodes only: computed ones
 * (leaves) may be in graphs other threads plan at the same time. */
static void reset(const lm_graph *g) {
  for (int i = 0; i < g->n; i++) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n)) continue;
    n->uses = 0;
    n->materialize = n->target = n->broadcast_use = n->reaches_stat = false;
    n->fused_reduce = n->row_root = NULL;
    n->group_uses = 0;
  }
  for (int t = 0; t < g->ntargets; t++) {
    lm_node *n = g->nodes[g->targets[t]];
    if (lm_is_computed(n)) continue; /* nothing to compute */
    n->uses++;
    n->materialize = n->target = true;
  }
}

/* Consumers before sources: what must have memory (reductions, matmuls and
 * their operands), and how many kernels read each node (views pass their
 * readers on) and whether any reads it through a broadcast. */
/* Each GEMM operand either read in place (through views down to a node with
 * memory) or given memory itself. Sources first, and again until nothing
 * changes: a forward GEMM stores its im2col matrix, and then the backward
 * GEMM reads that matrix transposed in place instead of copying the
 * transpose out of the window again (consumers first, the backward GEMM was
 * decided before it knew). Marks only grow, so this ends. */
/* The node to give memory so that GEMM operand o reads in place: o itself,
 * or, below reshapes and permutes (which only reorder), the highest node
 * whose memory makes o an affine view BLAS reads (a transposed im2col matrix
 * stored in the order its kernel writes fastest). */
static lm_node *operand_memory(lm_node *o) {
  const lm_node *base;
  lm_view view;
  for (lm_node *x = o->src[0]; o->op == LM_PERMUTE || o->op == LM_RESHAPE;) {
    if (lm_is_computed(x) || x->materialize) break;
    x->materialize = true; /* try it */
    bool reads = lm_gemm_operand(o, &base, &view);
    x->materialize = false;
    if (reads) return x;
    if ((x->op != LM_PERMUTE && x->op != LM_RESHAPE) || lm_is_computed(x->src[0])) break;
    x = x->src[0];
  }
  return o;
}

static void mark_gemm_operands(const lm_graph *g) {
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < g->n; i++) {
      lm_node *n = g->nodes[i];
      if (lm_is_computed(n) || n->op != LM_MATMUL) continue;
      n->materialize = true;
      for (int s = 0; s < 2; s++) {
        const lm_node *base;
        lm_view view;
        lm_node *o = n->src[s];
        lm_node *needs = !lm_gemm_operand(o, &base, &view) ? operand_memory(o)
                         : lm_is_computed(base)            ? NULL
                                                           : (lm_node *)base;
        if (needs && !needs->materialize) needs->materialize = changed = true;
      }
    }
  }
}

static void count_uses(const lm_graph *g) {
  mark_gemm_operands(g);
  for (int i = g->n - 1; i >= 0; i--) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n)) continue;
    if (lm_op_is_reduce(n->op) || n->op == LM_MATMUL) n->materialize = true;
    bool inline_view = lm_op_is_view(n->op) && !n->materialize;
    bool repeats = inline_view && (broadcasts(n) || n->broadcast_use || n->op == LM_WINDOW);
    if (n->op == LM_GATHER && !lm_is_computed(n->src[0]))
      n->src[0]->broadcast_use = true; /* rows read many times */
    for (int s = 0; s < n->nsrc; s++) {
      bool repeated = false;
      for (int r = 0; r < s; r++) repeated |= n->src[r] == n->src[s];
      if (repeated || lm_is_computed(n->src[s])) continue;
      n->src[s]->uses += inline_view ? (n->uses > 0 ? n->uses : 1) : 1;
      n->src[s]->broadcast_use |= repeats;
    }
  }
}

/* Sources before consumers: the inline cost of each node, and the cost rule
 * deciding which computed values with several readers, or read through a
 * broadcast, get memory. */
static void apply_cost_rule(const lm_graph *g, bool fuse) {
  for (int i = 0; i < g->n; i++) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n)) continue;
    int cost = op_cost(n);
    for (int s = 0; s < n->nsrc; s++)
      if (!n->src[s]->materialize && !lm_is_computed(n->src[s])) cost += n->src[s]->cost;
    n->cost = cost > 1000000 ? 1000000 : cost;
    if (!is_compute(n) || n->materialize) continue;
    bool shared = n->uses > 1 && (n->broadcast_use || n->cost * (n->uses - 1) > RECOMPUTE_BUDGET);
    bool repeated = n->broadcast_use && n->cost > BROADCAST_BUDGET;
    if (!fuse || shared || repeated) n->materialize = true;
  }
}

static void mark(const lm_graph *g, bool fuse) {
  reset(g);
  count_uses(g);
  apply_cost_rule(g, fuse);
}

static void plan_gemm(const lm_graph *graph, lm_node *n, lm_step *step) {
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
  g->a_pos = lm_graph_pos(graph, abase);
  g->b_pos = lm_graph_pos(graph, bbase);
  step->kind = LM_STEP_GEMM;
  step->out = n->pos;
  step->dtype = n->dtype;
  step->outer = lm_shape_numel(&n->shape);
}

/* A reduction with few outputs and much input runs in two kernels so every
 * thread has work: partial results over parts of its longest reduced axis,
 * then their combination. On the CPU, SPLIT_PARTS parts for at most
 * SPLIT_MAX_OUTER outputs; the count is fixed (not the thread count), so the
 * result is the same whatever the number of threads. A GPU runs one block per
 * output of a long reduction and wants thousands of blocks in flight: there a
 * reduction to at most GPU_SPLIT_MAX_OUTER outputs splits into about
 * GPU_SPLIT_BLOCKS / outputs parts of at least GPU_MIN_PART elements each. */
#define SPLIT_PARTS 16
#define SPLIT_MAX_OUTER 16
#define SPLIT_MIN_REDUCED 65536
#define GPU_SPLIT_BLOCKS 2048
#define GPU_SPLIT_MAX_OUTER 512
#define GPU_MIN_PART 4096

/* ------------------------------------------------------------ epilogues */

/* Looks through root's inline expression for the one reduction it reads,
 * reached only through elementwise ops and reshapes (which keep the output
 * order). Anything else (two reductions, a reduction behind an expand or a
 * permute) disqualifies. */
static void scan_for_reduce(lm_node *n, const lm_node *root, bool path_ok, lm_node **found,
                            bool *bad) {
  if (*bad || lm_is_computed(n)) return;
  if (n != root && n->materialize) {
    if (!lm_op_is_reduce(n->op)) return;
    if (!path_ok || (*found && *found != n)) *bad = true;
    *found = n;
    return;
  }
  /* the root too: a permute or expand at the top reorders the output */
  bool ok = path_ok && (lm_op_is_elementwise(n->op) || n->op == LM_RESHAPE);
  for (int s = 0; s < n->nsrc; s++) scan_for_reduce(n->src[s], root, ok, found, bad);
}

typedef struct node_list {
  lm_node **items;
  int len, cap;
  bool oom;
} node_list;

/* The nodes root computes inline (root included), each once. */
static void collect_inline(lm_node *n, const lm_node *root, uint64_t epoch, node_list *l) {
  if (n->visit == epoch || lm_is_computed(n) || (n != root && n->materialize)) return;
  n->visit = epoch;
  if (l->len == l->cap) {
    int ncap = l->cap ? 2 * l->cap : 32;
    lm_node **grown = realloc(l->items, sizeof(lm_node *) * (size_t)ncap);
    if (!grown) {
      l->oom = true;
      return;
    }
    l->items = grown, l->cap = ncap;
  }
  l->items[l->len++] = n;
  for (int s = 0; s < n->nsrc; s++) collect_inline(n->src[s], root, epoch, l);
}

static int later_first(const void *a, const void *b) {
  return (*(lm_node *const *)b)->pos - (*(lm_node *const *)a)->pos;
}

/* Whether every use of r comes from inside root's kernel (1, else 0; -1 when
 * out of memory): the uses counted the way mark() counts them, but only over
 * root's inline nodes. */
static int used_only_inside(lm_node *r, lm_node *root) {
  node_list l = {0};
  collect_inline(root, root, lm_walk_epoch(), &l);
  bool ok = !l.oom;
  if (ok) {
    qsort(l.items, (size_t)l.len, sizeof(lm_node *), later_first);
    for (int i = 0; i < l.len; i++) l.items[i]->inner_uses = 0;
    r->inner_uses = 0;
    for (int i = 0; i < l.len; i++) { /* consumers before their sources */
      lm_node *n = l.items[i];
      bool passes = lm_op_is_view(n->op) && n != root;
      for (int s = 0; s < n->nsrc; s++) {
        bool repeated = false;
        for (int q = 0; q < s; q++) repeated |= n->src[q] == n->src[s];
        if (!repeated && !lm_is_computed(n->src[s]))
          n->src[s]->inner_uses += passes ? n->inner_uses : 1;
      }
    }
    /* every node between root and r must be read only inside root's kernel
     * too: a shared value recomputed elsewhere would read r from memory */
    ok = r->inner_uses == r->uses;
    for (int i = 0; i < l.len && ok; i++)
      ok = l.items[i] == root || l.items[i]->inner_uses == l.items[i]->uses;
  }
  free(l.items);
  return l.oom ? -1 : ok;
}

/* An elementwise consumer of a reduction (mean's division, softmax's max
 * fix-up, logsumexp's log + max) runs as that reduction's epilogue: one
 * kernel instead of two, and the reduced values never go to memory. The
 * reduction must be read only by that consumer's kernel. False when out of
 * memory (planning fails rather than cache a plan that lacks the fusion). */
static bool fuse_epilogues(const lm_graph *g) {
  for (int i = 0; i < g->n; i++) {
    lm_node *e = g->nodes[i];
    if (!e->materialize || lm_is_computed(e) || lm_op_is_reduce(e->op) || e->op == LM_MATMUL)
      continue;
    lm_node *r = NULL;
    bool bad = false;
    scan_for_reduce(e, e, true, &r, &bad);
    if (!r || bad || r->target || r->fused_reduce ||
        lm_shape_numel(&r->shape) != lm_shape_numel(&e->shape))
      continue;
    int inside = used_only_inside(r, e);
    if (inside < 0) return false;
    if (!inside) continue;
    e->fused_reduce = r;
    r->materialize = false;
  }
  return true;
}

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
  collect_inline(k, k, lm_walk_epoch(), l);
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
 * way mark() counts uses (an inline view passes on its readers): a node read
 * only inside the group has group_uses == uses. A node inline in two of the
 * group's kernels is one reader, as in mark(). */
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
static bool fuse_rows(const lm_graph *g) {
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
static void unfuse_rows(const lm_graph *g, const lm_node *e) {
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

/* ------------------------------------------------------------ split reductions */

typedef struct temps {
  lm_node *nodes[64];
  int n;
} temps;

/* Keeps a planning temporary (released after its step is lowered); NULL and
 * *oom set when it could not be made. */
static lm_node *temp(temps *t, lm_node *n, bool *oom) {
  if (!n) {
    *oom = true;
  } else if (t->n < 64) {
    t->nodes[t->n++] = n;
  } else {
    lm_node_release(n);
    n = NULL;
  }
  return n;
}

static bool split_identity(const lm_node *r, double *identity) {
  if (r->op == LM_RSUM)
    *identity = 0;
  else if (r->op == LM_RMAX && loom_dtype_is_float(r->dtype))
    *identity = -INFINITY;
  else if (r->op == LM_RMIN && loom_dtype_is_float(r->dtype))
    *identity = INFINITY;
  else if (r->op == LM_RLSE) /* partial log-sum-exps combine by log-sum-exp */
    *identity = -INFINITY;
  else
    return false;
  return true;
}

/* How many parts reduction r (outer outputs of total / outer inputs each, the
 * longest reduced axis len long) splits into on its device; 0: none. */
static int64_t split_parts(const lm_node *r, int64_t outer, int64_t total, int64_t len) {
  if (outer <= 0 || total / outer < SPLIT_MIN_REDUCED) return 0;
  if (r->device.type == LOOM_DEVICE_CPU)
    return outer <= SPLIT_MAX_OUTER && len >= SPLIT_PARTS ? SPLIT_PARTS : 0;
  if (outer > GPU_SPLIT_MAX_OUTER) return 0;
  int64_t parts = GPU_SPLIT_BLOCKS / outer, most = total / outer / GPU_MIN_PART;
  if (parts > most) parts = most;
  if (parts > len) parts = len;
  return parts >= 2 ? parts : 0;
}

/* Builds partial = reduce(reshape(pad(src))) and final = reduce(partial) for
 * reduction r; returns final (shaped like r with the part axis kept as 1 ...
 * in the same output order), or NULL when r is not worth splitting (or
 * *oom, when memory ran out). */
static lm_node *split_reduction(const lm_node *r, temps *t, bool *oom) {
  const lm_node *src = r->src[0];
  int64_t outer = lm_shape_numel(&r->shape), total = lm_shape_numel(&src->shape);
  if (src->shape.ndim >= LOOM_MAX_DIMS) return NULL;
  int axis = -1;
  for (int d = 0; d < src->shape.ndim; d++)
    if ((r->arg.axes & (1u << d)) && (axis < 0 || src->shape.dim[d] > src->shape.dim[axis]))
      axis = d;
  if (axis < 0) return NULL;
  int64_t len = src->shape.dim[axis], parts = split_parts(r, outer, total, len);
  if (parts == 0) return NULL;
  int64_t chunk = (len + parts - 1) / parts;
  if (r->device.type != LOOM_DEVICE_CPU) parts = (len + chunk - 1) / chunk; /* none all padding */
  double identity;
  bool exact = len % parts == 0;
  if (!split_identity(r, &identity) && !(exact && r->op != LM_ARGMAX && r->op != LM_ARGMIN))
    return NULL;
  lm_node *cur = (lm_node *)src;
  if (!exact) {
    loom_shape padded = src->shape;
    padded.dim[axis] = chunk * parts;
    cur = temp(t, lm_node_new(LM_PAD, 1, &cur, padded, src->dtype, src->device), oom);
    if (!cur) return NULL;
    cur->arg.pad.value = identity;
  }
  loom_shape split = {src->shape.ndim + 1, {0}};
  uint32_t inner_axes = 0;
  for (int d = 0, o = 0; d < src->shape.ndim; d++) {
    if (d == axis) {
      split.dim[o++] = parts;
      split.dim[o] = chunk;
      inner_axes |= 1u << o++;
    } else {
      if (r->arg.axes & (1u << d)) inner_axes |= 1u << o;
      split.dim[o++] = src->shape.dim[d];
    }
  }
  lm_node *reshaped =
      temp(t, lm_node_new(LM_RESHAPE, 1, &cur, split, src->dtype, src->device), oom);
  if (!reshaped) return NULL;
  loom_shape pshape = split, fshape = split;
  for (int d = 0; d < split.ndim; d++)
    if (inner_axes & (1u << d)) pshape.dim[d] = fshape.dim[d] = 1;
  fshape.dim[axis] = 1;
  lm_node *partial = temp(t, lm_node_new(r->op, 1, &reshaped, pshape, r->dtype, r->device), oom);
  if (!partial) return NULL;
  partial->arg.axes = inner_axes;
  partial->materialize = true;
  lm_node *final = temp(t, lm_node_new(r->op, 1, &partial, fshape, r->dtype, r->device), oom);
  if (!final) return NULL;
  final->arg.axes = 1u << axis;
  final->replaces = r;
  return final;
}

void lm_program_free(lm_program *p) {
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

/* ------------------------------------------------------------ matmul epilogues */

/* 1 when n's inline expression reads m only through elementwise ops (so at
 * n's own output index), 0 when it does not read m, -1 otherwise. */
static int elementwise_path(const lm_node *n, const lm_node *m) {
  int found = 0;
  for (int s = 0; s < n->nsrc; s++) {
    const lm_node *src = n->src[s];
    int r = src == m ? 1 : (src->materialize || lm_is_computed(src)) ? 0 : elementwise_path(src, m);
    if (r < 0 || (r > 0 && !lm_op_is_elementwise(n->op))) return -1;
    found |= r;
  }
  return found;
}

static int step_computing(const lm_program *p, int pos) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].out == pos) return i;
  return -1;
}

/* Pairs each GEMM whose output only an elementwise kernel of the same shape
 * reads (bias, activation, residual) with that kernel. False when out of
 * memory. */
static bool pair_gemm_epilogues(const lm_graph *g, lm_program *p) {
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *e = &p->steps[i];
    e->gemm_partner = -1;
    if (e->kind != LM_STEP_KERNEL || e->out >= p->nnodes || e->kernel.reduce != LK_RED_NONE ||
        e->kernel.nstats > 0)
      continue;
    lm_node *root = g->nodes[e->out];
    for (int a = 1; a < e->kernel.nslots && e->gemm_partner < 0; a++) {
      int pos = e->arg_pos[a];
      if (e->arg_key[a] || pos >= p->nnodes) continue;
      lm_node *m = g->nodes[pos];
      if (lm_is_computed(m) || m->op != LM_MATMUL || m->target ||
          !lm_shape_eq(&m->shape, &root->shape) || elementwise_path(root, m) != 1)
        continue;
      int inside = used_only_inside(m, root);
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
static bool makes_gemm_operand(const lm_graph *g, const lm_program *p, const lm_step *e) {
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
      if (!reads_whole_b(s, e->out) || s->deferred) return false; /* (one with an epilogue) */
      readers++;
    }
    for (int a = 1; s->kind == LM_STEP_KERNEL && a < s->kernel.nslots; a++)
      if (!s->arg_key[a] && s->arg_pos[a] == e->out) return false;
  }
  return readers > 0;
}

static void pair_gemm_prologues(const lm_graph *g, lm_program *p) {
  for (int j = 0; j < p->nsteps; j++) {
    lm_step *e = &p->steps[j];
    if (!makes_gemm_operand(g, p, e)) continue;
    e->deferred = true;
    for (int i = 0; i < p->nsteps; i++)
      if (p->steps[i].kind == LM_STEP_GEMM && p->steps[i].gemm.b_pos == e->out)
        p->steps[i].b_producer = j;
  }
}

/* ------------------------------------------------------------ memory */

static void note_read(int *last, int pos, int step) {
  if (pos >= 0) last[pos] = step;
}

/* Liveness: every buffer the program allocates for a non-target is freed
 * right after the last step reading it, so later steps reuse its memory
 * (the allocator hands freed blocks out again by size class). */
static bool plan_frees(lm_program *p) {
  int npos = p->nnodes + p->ntemps;
  int *last = malloc(sizeof(int) * (size_t)(npos > 0 ? npos : 1));
  if (!last) return false;
  for (int i = 0; i < npos; i++) last[i] = -1;
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    note_read(last, s->out, i); /* a buffer nobody reads is freed after its step */
    if (s->kind == LM_STEP_GEMM) {
      note_read(last, s->gemm.a_pos, i);
      note_read(last, s->gemm.b_pos, i);
    }
    for (int a = 1; s->kind == LM_STEP_KERNEL && a < s->kernel.nslots; a++)
      if (!s->arg_key[a]) note_read(last, s->arg_pos[a], i);
    if (s->kind == LM_STEP_KERNEL && s->gemm_partner >= 0) { /* its GEMM runs here */
      note_read(last, p->steps[s->gemm_partner].gemm.a_pos, i);
      note_read(last, p->steps[s->gemm_partner].gemm.b_pos, i);
    }
    if (s->kind == LM_STEP_GEMM && s->b_producer >= 0) { /* so does B's kernel */
      const lm_step *e = &p->steps[s->b_producer];
      for (int a = 1; a < e->kernel.nslots; a++)
        if (!e->arg_key[a]) note_read(last, e->arg_pos[a], i);
    }
  }
  bool ok = true;
  for (int i = 0; i < p->nsteps && ok; i++) {
    lm_step *s = &p->steps[i];
    int out = s->out;
    bool owned = out >= p->nnodes || !p->published[out];
    if (!owned || last[out] < 0) continue;
    lm_step *at = &p->steps[last[out]];
    int *grown = realloc(at->free_after, sizeof(int) * (size_t)(at->nfree + 1));
    if (!grown)
      ok = false;
    else
      at->free_after = grown, at->free_after[at->nfree++] = out;
  }
  free(last);
  return ok;
}

static loom_status lower_step(const lm_graph *g, lm_program *p, lm_node *n, char *err,
                              size_t errlen) {
  lm_step *step = &p->steps[p->nsteps++];
  if (n->op == LM_MATMUL) {
    plan_gemm(g, n, step);
    return LOOM_OK;
  }
  return lm_lower(g, n, step, err, errlen);
}

/* A row group's root: one kernel with its statistics, or, when one of them
 * is read off its row, the statistics' own kernels and then the root's. */
static loom_status plan_node(const lm_graph *g, lm_program *p, lm_node *n, temps *t, char *err,
                             size_t errlen);

static loom_status plan_row_root(const lm_graph *g, lm_program *p, lm_node *e, temps *t, char *err,
                                 size_t errlen) {
  bool misaligned;
  lm_step *step = &p->steps[p->nsteps++];
  loom_status st = lm_lower_rows(g, e, step, &misaligned, err, errlen);
  if (st == LOOM_OK || !misaligned) return st;
  memset(step, 0, sizeof *step);
  p->nsteps--;
  int first = p->nsteps;
  unfuse_rows(g, e);
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
static loom_status plan_node(const lm_graph *g, lm_program *p, lm_node *n, temps *t, char *err,
                             size_t errlen) {
  lm_node *red = n->fused_reduce ? n->fused_reduce : lm_op_is_reduce(n->op) ? n : NULL;
  bool oom = false;
  lm_node *final = red ? split_reduction(red, t, &oom) : NULL;
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

loom_status lm_plan(const lm_graph *g, bool fuse, lm_program **out, char *err, size_t errlen) {
  *out = NULL;
  mark(g, fuse);
  if (fuse && (!fuse_epilogues(g) || !fuse_rows(g))) {
    snprintf(err, errlen, "planning: out of memory");
    return LOOM_ERR_OOM;
  }
  lm_program *p = calloc(1, sizeof *p);
  int count = 0;
  for (int i = 0; i < g->n; i++)
    count += (g->nodes[i]->materialize || g->nodes[i]->row_root) && !lm_is_computed(g->nodes[i]);
  if (p) {
    p->steps = calloc((size_t)(2 * count + 1), sizeof(lm_step));
    p->published = calloc(g->n > 0 ? (size_t)g->n : 1, sizeof(bool));
  }
  if (!p || !p->steps || !p->published) {
    lm_program_free(p);
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
  if (st == LOOM_OK && fuse && !pair_gemm_epilogues(g, p)) {
    snprintf(err, errlen, "planning: out of memory");
    st = LOOM_ERR_OOM;
  }
  if (st == LOOM_OK && fuse) pair_gemm_prologues(g, p);
  if (st == LOOM_OK && !plan_frees(p)) {
    snprintf(err, errlen, "planning: out of memory");
    st = LOOM_ERR_OOM;
  }
  if (st != LOOM_OK) {
    lm_program_free(p);
    return st;
  }
  *out = p;
  return LOOM_OK;
}
