/* Fusion: which nodes get their own memory.
 *
 * A node is materialized (ends a kernel) when it is a target, a reduction, a
 * matmul, a matmul operand that cannot be read in place, or a computed value
 * the cost rule says to store: read by several kernels and costlier to
 * recompute in each than RECOMPUTE_BUDGET, or read through a broadcast and
 * costlier than BROADCAST_BUDGET. Without fusion (LOOM_NO_FUSE=1) every
 * computed value is. Everything else is computed inline by its consumer's
 * kernel: elementwise chains, views, constants, ranges and random draws. An
 * elementwise consumer of a reduction then becomes the reduction's epilogue
 * (fuse_epilogues) when the reduction is read only inside its kernel. */
#include <stdlib.h>

#include "passes/plan_internal.h"

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

/* The records start zero (lm_plan_make allocates them so); the targets are read
 * once and stored. Computed targets have nothing to compute. */
static void mark_targets(lm_planner *pl) {
  const lm_graph *g = pl->g;
  for (int t = 0; t < g->ntargets; t++) {
    lm_node *n = g->nodes[g->targets[t]];
    if (lm_is_computed(n)) continue;
    lm_plan_node *pn = lm_plan_of(pl, n);
    pn->uses++;
    pn->materialize = pn->target = true;
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
static lm_node *operand_memory(lm_planner *pl, const lm_node *consumer, lm_node *o) {
  const lm_node *base;
  lm_view view;
  for (lm_node *x = o->src[0]; o->op == LM_PERMUTE || o->op == LM_RESHAPE;) {
    if (lm_has_memory(pl, x)) break;
    lm_plan_of(pl, x)->materialize = true; /* try it */
    bool reads = lm_library_operand(pl, consumer, o, &base, &view);
    lm_plan_of(pl, x)->materialize = false;
    if (reads) return x;
    if ((x->op != LM_PERMUTE && x->op != LM_RESHAPE) || lm_is_computed(x->src[0])) break;
    x = x->src[0];
  }
  return o;
}

/* The image whose windows a matmul's B operand o is (a convolution's im2col
 * matrix: one batch, on the CPU, F32 or F64), below reshapes, permutes and a
 * zero padding, when its windows overlap (each pixel read by several); else
 * NULL. Such an image gets memory, whatever the sizes (so that a program's
 * plans differ only in numbers from one size to another): the last layer's
 * bias and ReLU, inline, would be computed again for every window covering
 * a pixel, and a product whose B is made in blocks then reads its terms from
 * the image instead (lm_pair_gemm_prologues, runtime/gemm_windows.c). */
static lm_node *convolution_image(const lm_node *matmul, const lm_node *o) {
  if (matmul->op != LM_MATMUL || matmul->src[1] != o || matmul->device.type != LOOM_DEVICE_CPU ||
      (o->dtype != LOOM_F32 && o->dtype != LOOM_F64))
    return NULL;
  for (int d = 0; d + 2 < o->shape.ndim; d++)
    if (o->shape.dim[d] != 1) return NULL;
  while (o->op == LM_RESHAPE || o->op == LM_PERMUTE) o = o->src[0];
  if (o->op != LM_WINDOW) return NULL;
  bool overlap = false;
  for (int i = 0; i < 2; i++)
    overlap |= (o->arg.window.kernel[i] - 1) * o->arg.window.dilation[i] + 1 >
               o->arg.window.stride[i];
  o = o->src[0];
  if (o->op == LM_PAD && o->arg.pad.value == 0) o = o->src[0];
  return overlap && o->shape.ndim == 4 && !lm_op_is_view(o->op) ? (lm_node *)o : NULL;
}

static void mark_gemm_operands(lm_planner *pl) {
  const lm_graph *g = pl->g;
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < g->n; i++) {
      lm_node *n = g->nodes[i];
      if (lm_is_computed(n) ||
          lm_step_kinds[lm_step_kind_of(n->op)]->sources != LM_SOURCES_IN_PLACE)
        continue;
      lm_plan_of(pl, n)->materialize = true;
      for (int s = 0; s < n->nsrc; s++) {
        const lm_node *base;
        lm_view view;
        lm_node *o = n->src[s];
        lm_node *needs = !lm_library_operand(pl, n, o, &base, &view) ? operand_memory(pl, n, o)
                         : lm_is_computed(base)                      ? NULL
                                                                     : (lm_node *)base;
        if (needs && !lm_plan_of(pl, needs)->materialize)
          lm_plan_of(pl, needs)->materialize = changed = true;
        lm_node *image = convolution_image(n, o);
        if (image && !lm_is_computed(image) && image->op != LM_INPUT &&
            !lm_plan_of(pl, image)->materialize)
          lm_plan_of(pl, image)->materialize = changed = true;
      }
    }
  }
}

static void count_uses(lm_planner *pl) {
  const lm_graph *g = pl->g;
  mark_gemm_operands(pl);
  for (int i = g->n - 1; i >= 0; i--) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n)) continue;
    lm_plan_node *pn = lm_plan_of(pl, n);
    const lm_step_kind_info *kind = lm_step_kinds[lm_step_kind_of(n->op)];
    /* the sources it reads: a check's first (the others give it shapes only) */
    int reads = kind->first_source_only ? 1 : n->nsrc;
    if (lm_op_is_reduce(n->op) || kind->sources == LM_SOURCES_IN_PLACE) pn->materialize = true;
    if (kind->sources == LM_SOURCES_WHOLE) { /* a library step: its sources whole in memory */
      pn->materialize = true;
      for (int s = 0; s < reads; s++)
        if (!lm_is_computed(n->src[s])) lm_plan_of(pl, n->src[s])->materialize = true;
    }
    bool inline_view = lm_op_is_view(n->op) && !pn->materialize;
    bool repeats = inline_view && (broadcasts(n) || pn->broadcast_use || n->op == LM_WINDOW);
    if (n->op == LM_GATHER && !lm_is_computed(n->src[0]))
      lm_plan_of(pl, n->src[0])->broadcast_use = true; /* rows read many times */
    for (int s = 0; s < reads; s++) {
      bool repeated = false;
      for (int r = 0; r < s; r++) repeated |= n->src[r] == n->src[s];
      if (repeated || lm_is_computed(n->src[s])) continue;
      lm_plan_node *src = lm_plan_of(pl, n->src[s]);
      src->uses += inline_view ? (pn->uses > 0 ? pn->uses : 1) : 1;
      src->broadcast_use |= repeats;
    }
  }
}

/* Sources before consumers: the inline cost of each node, and the cost rule
 * deciding which computed values with several readers, or read through a
 * broadcast, get memory. */
static void apply_cost_rule(lm_planner *pl, bool fuse) {
  const lm_graph *g = pl->g;
  for (int i = 0; i < g->n; i++) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n)) continue;
    lm_plan_node *pn = lm_plan_of(pl, n);
    int cost = op_cost(n);
    for (int s = 0; s < n->nsrc; s++)
      if (!lm_has_memory(pl, n->src[s])) cost += lm_plan_of(pl, n->src[s])->cost;
    pn->cost = cost > 1000000 ? 1000000 : cost;
    if (!is_compute(n) || pn->materialize) continue;
    bool shared =
        pn->uses > 1 && (pn->broadcast_use || pn->cost * (pn->uses - 1) > RECOMPUTE_BUDGET);
    bool repeated = pn->broadcast_use && pn->cost > BROADCAST_BUDGET;
    if (!fuse || shared || repeated) pn->materialize = true;
  }
}

/* What reading child c costs a kernel that computes its reader inline: one
 * slot for memory or a placeholder, none for a constant, else its own. */
static int slots_of(const lm_planner *pl, const lm_node *c) {
  if (lm_has_memory(pl, c) || c->op == LM_INPUT) return 1;
  if (c->op == LM_CONST || c->op == LM_IOTA) return 0;
  return lm_plan_marks(pl, c)->inputs;
}

/* How deep a reader's inline expression goes through child c. */
static int depth_of(const lm_planner *pl, const lm_node *c) {
  if (lm_has_memory(pl, c) || c->op == LM_INPUT) return 0;
  return lm_plan_marks(pl, c)->depth;
}

/* The inline source of n that most exceeds a limit by `measure`, or NULL. */
static lm_node *heaviest_source(const lm_planner *pl, lm_node *n,
                                int (*measure)(const lm_planner *, const lm_node *)) {
  lm_node *heaviest = NULL;
  for (int s = 0; s < n->nsrc; s++) {
    lm_node *c = n->src[s];
    if (lm_has_memory(pl, c) || c->op == LM_INPUT || measure(pl, c) <= 1) continue;
    if (!heaviest || measure(pl, c) > measure(pl, heaviest)) heaviest = c;
  }
  return heaviest;
}

/* No fused expression reads more than half of LM_KERNEL_MAX_SLOTS or is
 * deeper than LM_FUSION_MAX_DEPTH: sources first (the canonical order), each
 * node's slots are its sources' (and a random draw's key) and its depth one
 * more than its deepest inline source's; past a limit, its heaviest sources
 * are stored (each then one slot, depth 0) until it fits. A sum of 300
 * tensors becomes kernels of at most 128 inputs, a chain of a million ops
 * kernels of 24 (alike, so compiled once). A cat's sources (at most
 * LM_CAT_MAX_SOURCES, the frontend nests longer ones) are each one slot at
 * worst. Iterative: chains are deep. */
static void limit_expressions(lm_planner *pl) {
  const lm_graph *g = pl->g;
  const int limit = LM_KERNEL_MAX_SLOTS / 2;
  for (int i = 0; i < g->n; i++) {
    lm_node *n = g->nodes[i];
    if (lm_is_computed(n) || n->op == LM_INPUT) continue;
    int total = n->op == LM_RAND, depth = 0;
    for (int s = 0; s < n->nsrc; s++) total += slots_of(pl, n->src[s]);
    for (lm_node *c; total > limit && (c = heaviest_source(pl, n, slots_of));) {
      total -= slots_of(pl, c) - 1;
      lm_plan_of(pl, c)->materialize = true;
    }
    for (int s = 0; s < n->nsrc; s++)
      if (depth_of(pl, n->src[s]) > depth) depth = depth_of(pl, n->src[s]);
    while (depth + 1 > LM_FUSION_MAX_DEPTH) {
      lm_node *c = heaviest_source(pl, n, depth_of);
      if (!c) break;
      lm_plan_of(pl, c)->materialize = true;
      depth = 0;
      for (int s = 0; s < n->nsrc; s++)
        if (depth_of(pl, n->src[s]) > depth) depth = depth_of(pl, n->src[s]);
    }
    lm_plan_of(pl, n)->inputs = total;
    lm_plan_of(pl, n)->depth = depth + 1;
  }
}

void lm_mark(lm_planner *pl, bool fuse) {
  mark_targets(pl);
  count_uses(pl);
  apply_cost_rule(pl, fuse);
  limit_expressions(pl);
}

/* ------------------------------------------------------------ epilogues */

/* Looks through root's inline expression for the one reduction it reads,
 * reached only through elementwise ops and reshapes (which keep the output
 * order). Anything else (two reductions, a reduction behind an expand or a
 * permute) disqualifies. */
static void scan_for_reduce(const lm_planner *pl, lm_node *n, const lm_node *root, bool path_ok,
                            lm_node **found, bool *bad) {
  if (*bad || lm_is_computed(n)) return;
  if (n != root && lm_materialized(pl, n)) {
    if (!lm_op_is_reduce(n->op)) return;
    if (!path_ok || (*found && *found != n)) *bad = true;
    *found = n;
    return;
  }
  /* the root too: a permute or expand at the top reorders the output */
  bool ok = path_ok && (lm_op_is_elementwise(n->op) || n->op == LM_RESHAPE);
  for (int s = 0; s < n->nsrc; s++) scan_for_reduce(pl, n->src[s], root, ok, found, bad);
}

/* The nodes root computes inline (root included), each once. */
void lm_collect_inline(const lm_planner *pl, lm_node *n, const lm_node *root, uint64_t epoch,
                       node_list *l) {
  if (lm_is_computed(n) || n->visit == epoch || (n != root && lm_materialized(pl, n))) return;
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
  for (int s = 0; s < n->nsrc; s++) lm_collect_inline(pl, n->src[s], root, epoch, l);
}

static int later_first(const void *a, const void *b) {
  return (*(lm_node *const *)b)->pos - (*(lm_node *const *)a)->pos;
}

/* Whether every use of r comes from inside root's kernel (1, else 0; -1 when
 * out of memory): the uses counted the way lm_mark() counts them, but only over
 * root's inline nodes. */
int lm_used_only_inside(lm_planner *pl, lm_node *r, lm_node *root) {
  node_list l = {0};
  lm_collect_inline(pl, root, root, lm_walk_epoch(), &l);
  bool ok = !l.oom;
  if (ok) {
    qsort(l.items, (size_t)l.len, sizeof(lm_node *), later_first);
    for (int i = 0; i < l.len; i++) lm_plan_of(pl, l.items[i])->inner_uses = 0;
    lm_plan_of(pl, r)->inner_uses = 0;
    for (int i = 0; i < l.len; i++) { /* consumers before their sources */
      lm_node *n = l.items[i];
      bool passes = lm_op_is_view(n->op) && n != root;
      for (int s = 0; s < n->nsrc; s++) {
        bool repeated = false;
        for (int q = 0; q < s; q++) repeated |= n->src[q] == n->src[s];
        if (!repeated && !lm_is_computed(n->src[s]))
          lm_plan_of(pl, n->src[s])->inner_uses += passes ? lm_plan_of(pl, n)->inner_uses : 1;
      }
    }
    /* every node between root and r must be read only inside root's kernel
     * too: a shared value recomputed elsewhere would read r from memory */
    ok = lm_plan_of(pl, r)->inner_uses == lm_plan_of(pl, r)->uses;
    for (int i = 0; i < l.len && ok; i++) {
      const lm_plan_node *pn = lm_plan_of(pl, l.items[i]);
      ok = l.items[i] == root || pn->inner_uses == pn->uses;
    }
  }
  free(l.items);
  return l.oom ? -1 : ok;
}

/* An elementwise consumer of a reduction (mean's division, softmax's max
 * fix-up, logsumexp's log + max) runs as that reduction's epilogue: one
 * kernel instead of two, and the reduced values never go to memory. The
 * reduction must be read only by that consumer's kernel. False when out of
 * memory (planning fails rather than cache a plan that lacks the fusion). */
bool lm_fuse_epilogues(lm_planner *pl) {
  const lm_graph *g = pl->g;
  for (int i = 0; i < g->n; i++) {
    lm_node *e = g->nodes[i];
    if (!lm_materialized(pl, e) || lm_op_is_reduce(e->op) ||
        lm_step_kind_of(e->op) != LM_STEP_KERNEL)
      continue;
    lm_node *r = NULL;
    bool bad = false;
    scan_for_reduce(pl, e, e, true, &r, &bad);
    if (!r || bad || lm_plan_of(pl, r)->target || lm_plan_of(pl, r)->fused_reduce ||
        lm_shape_numel(&r->shape) != lm_shape_numel(&e->shape))
      continue;
    int inside = lm_used_only_inside(pl, r, e);
    if (inside < 0) return false;
    if (!inside) continue;
    lm_plan_of(pl, e)->fused_reduce = r;
    lm_plan_of(pl, r)->materialize = false;
  }
  return true;
}
