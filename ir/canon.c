/* The canonical form of a graph: a deterministic post-order and its
 * serialization, hashed with XXH3-128 to find the compiled program. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ir/ir.h"

/* Marks which walk last saw a node; a counter (not a flag) so no pass has to
 * clear marks afterwards. The only shared state here, and atomic. */
static _Atomic uint64_t walk_epoch = 1;

uint64_t lm_walk_epoch(void) { return atomic_fetch_add(&walk_epoch, 1); }

/* ------------------------------------------------------------ leaf positions */

static size_t leaf_slot(const lm_graph *g, const lm_node *n) {
  uintptr_t h = (uintptr_t)n;
  h ^= h >> 17, h *= 0x9e3779b97f4a7c15ull, h ^= h >> 29;
  return (size_t)h & (g->leaves_cap - 1);
}

/* The slot holding n's position, or the empty slot where it would go. */
static size_t leaf_find(const lm_graph *g, const lm_node *n) {
  size_t i = leaf_slot(g, n);
  while (g->leaves[i] >= 0 && g->nodes[g->leaves[i]] != n) i = (i + 1) & (g->leaves_cap - 1);
  return i;
}

static bool leaves_grow(lm_graph *g) {
  size_t cap = g->leaves_cap ? 2 * g->leaves_cap : 64;
  int *old = g->leaves;
  size_t old_cap = g->leaves_cap;
  g->leaves = malloc(sizeof(int) * cap);
  if (!g->leaves) {
    g->leaves = old;
    return false;
  }
  for (size_t i = 0; i < cap; i++) g->leaves[i] = -1;
  g->leaves_cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i] >= 0) g->leaves[leaf_find(g, g->nodes[old[i]])] = old[i];
  free(old);
  return true;
}

int lm_graph_pos(const lm_graph *g, const lm_node *n) {
  if (!lm_is_computed(n)) return n->pos;
  if (!g->leaves_cap) return -1;
  return g->leaves[leaf_find(g, n)];
}

/* ------------------------------------------------------------ the walk */

/* Appends n at the next position: an unrealized node keeps it in its scratch
 * field, a leaf in the graph's table. */
static bool push_node(lm_graph *g, lm_node *n) {
  if (g->n == g->cap) {
    int ncap = g->cap ? g->cap * 2 : 64;
    lm_node **grown = realloc(g->nodes, sizeof(lm_node *) * (size_t)ncap);
    if (!grown) return false;
    g->nodes = grown, g->cap = ncap;
  }
  if (lm_is_computed(n)) {
    if (2 * (g->nleaves + 1) > g->leaves_cap && !leaves_grow(g)) return false;
    g->nodes[g->n] = n; /* leaf_find compares through nodes[] */
    g->leaves[leaf_find(g, n)] = g->n;
    g->nleaves++;
  } else {
    n->pos = g->n;
  }
  g->nodes[g->n++] = n;
  return true;
}

static bool put(lm_graph *g, const void *p, size_t len) {
  if (g->nbytes + len > g->bytes_cap) {
    size_t ncap = g->bytes_cap ? g->bytes_cap * 2 : 1024;
    while (ncap < g->nbytes + len) ncap *= 2;
    unsigned char *grown = realloc(g->bytes, ncap);
    if (!grown) return false;
    g->bytes = grown, g->bytes_cap = ncap;
  }
  memcpy(g->bytes + g->nbytes, p, len);
  g->nbytes += len;
  return true;
}

static bool put_i64(lm_graph *g, int64_t v) { return put(g, &v, sizeof v); }
static bool put_f64(lm_graph *g, double v) { return put(g, &v, sizeof v); }

static bool put_args(lm_graph *g, const lm_node *n) {
  bool ok = true;
  int nd = n->shape.ndim;
  switch (lm_op_table[n->op].arg) {
  case LM_ARG_NONE: break;
  case LM_ARG_VALUE: ok = put_f64(g, n->arg.f); break;
  case LM_ARG_IOTA:
    ok = put_f64(g, n->arg.iota.start) && put_f64(g, n->arg.iota.step);
    if (ok && n->arg.iota.from_end) ok = put_i64(g, 1000); /* (only where set) */
    break;
  case LM_ARG_RAND: /* the key is data: it is passed to the kernel, not compiled in */
    ok = put_i64(g, n->arg.rand.kind) && put_f64(g, n->arg.rand.p);
    break;
  case LM_ARG_AXES: ok = put_i64(g, n->arg.axes); break;
  case LM_ARG_PERM:
    for (int d = 0; d < nd && ok; d++) ok = put_i64(g, n->arg.perm[d]);
    break;
  case LM_ARG_SLICE:
    for (int d = 0; d < nd && ok; d++)
      ok = put_i64(g, n->arg.slice.start[d]) && put_i64(g, n->arg.slice.step[d]);
    for (int d = 0; d < nd && ok; d++) /* (only where set: other slices hash as before) */
      if (n->arg.slice.from_end[d]) ok = put_i64(g, 1000 + 8 * d + n->arg.slice.from_end[d]);
    break;
  case LM_ARG_PAD:
    for (int d = 0; d < nd && ok; d++) ok = put_i64(g, n->arg.pad.lo[d]);
    ok = ok && put_f64(g, n->arg.pad.value);
    for (int d = 0; d < nd && ok; d++) /* (only where set: other pads hash as before) */
      if (n->arg.pad.lo_from_end[d]) ok = put_i64(g, 1000 + d);
    break;
  case LM_ARG_AXIS: ok = put_i64(g, n->arg.axis); break;
  case LM_ARG_COLL:
    ok = put_i64(g, n->arg.coll.reduce) && put_i64(g, n->arg.coll.root) &&
         put_i64(g, n->arg.coll.axis) && put_i64(g, n->arg.coll.world);
    break;
  case LM_ARG_CLAMP: ok = put_f64(g, n->arg.clamp.lo) && put_f64(g, n->arg.clamp.hi); break;
  case LM_ARG_ATTN:
    ok = put_f64(g, n->arg.attn.scale) && put_i64(g, n->arg.attn.causal) &&
         put_i64(g, n->arg.attn.mask);
    break;
  case LM_ARG_SORT:
    ok = put_i64(g, n->arg.sort.k) && put_i64(g, n->arg.sort.descending) &&
         put_i64(g, n->arg.sort.full);
    break;
  case LM_ARG_SCAN:
    ok = put_i64(g, n->arg.scan.axis) && put_i64(g, n->arg.scan.combine) &&
         put_i64(g, n->arg.scan.reverse);
    break;
  case LM_ARG_CHECK: { /* the op's name too: the message of a run that fails names it */
    size_t len = strnlen(n->arg.check.op, LM_CHECK_OP_LEN);
    ok = put_i64(g, n->arg.check.rule) && put_i64(g, n->arg.check.axis) &&
         put_i64(g, n->arg.check.has_ignore) &&
         put_i64(g, n->arg.check.has_ignore ? n->arg.check.ignore : 0) &&
         put_i64(g, (int64_t)len) && put(g, n->arg.check.op, len);
    break;
  }
  case LM_ARG_WINDOW:
    for (int i = 0; i < 2 && ok; i++)
      ok = put_i64(g, n->arg.window.kernel[i]) && put_i64(g, n->arg.window.stride[i]) &&
           put_i64(g, n->arg.window.dilation[i]);
    break;
  }
  return ok;
}

static bool put_node(lm_graph *g, const lm_node *n) {
  bool leaf = lm_is_computed(n); /* a leaf, whatever history it keeps */
  bool ok = put_i64(g, leaf ? LM_BUFFER : n->op) && put_i64(g, n->dtype) &&
            put_i64(g, n->device.type) && put_i64(g, n->device.index) && put_i64(g, n->shape.ndim);
  for (int d = 0; d < n->shape.ndim && ok; d++) ok = put_i64(g, n->shape.dim[d]);
  if (leaf) return ok && put_i64(g, 0);
  ok = ok && put_i64(g, n->nsrc);
  for (int i = 0; i < n->nsrc && ok; i++) ok = put_i64(g, lm_graph_pos(g, n->src[i]));
  return ok && put_args(g, n);
}

typedef struct frame {
  lm_node *node;
  int next;
} frame;

/* A leaf joins the graph the first time the walk meets it (marked in the
 * graph's table, not in the node: see lm_graph). */
static bool add_leaf(lm_graph *g, lm_node *n) {
  if (lm_graph_pos(g, n) >= 0) return true;
  return push_node(g, n) && put_node(g, n);
}

/* Iterative post-order: graphs of training loops are deep. The root is
 * unrealized (lm_realize_nodes skips computed targets). */
static loom_status walk(lm_graph *g, lm_node *root, uint64_t epoch) {
  if (root->visit == epoch) return LOOM_OK;
  int cap = 64, len = 0;
  frame *stack = malloc(sizeof(frame) * (size_t)cap);
  if (!stack) return LOOM_ERR_OOM;
  root->visit = epoch;
  stack[len++] = (frame){root, 0};
  while (len > 0) {
    frame *top = &stack[len - 1];
    lm_node *n = top->node;
    if (top->next < n->nsrc) {
      lm_node *s = n->src[top->next++];
      if (lm_is_computed(s)) {
        if (!add_leaf(g, s)) goto oom;
        continue;
      }
      if (s->visit == epoch) continue;
      s->visit = epoch;
      if (len == cap) {
        frame *grown = realloc(stack, sizeof(frame) * (size_t)(cap *= 2));
        if (!grown) goto oom;
        stack = grown;
      }
      stack[len++] = (frame){s, 0};
      continue;
    }
    if (!push_node(g, n) || !put_node(g, n)) goto oom;
    len--;
  }
  free(stack);
  return LOOM_OK;
oom:
  free(stack);
  return LOOM_ERR_OOM;
}

loom_status lm_graph_build(lm_graph *g, lm_node *const *targets, int ntargets) {
  memset(g, 0, sizeof *g);
  g->targets = malloc(sizeof(int) * (size_t)(ntargets > 0 ? ntargets : 1));
  if (!g->targets) return LOOM_ERR_OOM;
  uint64_t epoch = lm_walk_epoch();
  for (int i = 0; i < ntargets; i++) {
    loom_status st = lm_is_computed(targets[i]) ? (add_leaf(g, targets[i]) ? LOOM_OK : LOOM_ERR_OOM)
                                                : walk(g, targets[i], epoch);
    if (st != LOOM_OK) return st;
    int pos = lm_graph_pos(g, targets[i]);
    g->targets[g->ntargets++] = pos;
    if (!put_i64(g, -1 - pos)) return LOOM_ERR_OOM;
  }
  XXH128_hash_t h = XXH3_128bits(g->bytes, g->nbytes);
  g->hash = (lm_hash128){h.low64, h.high64};
  return LOOM_OK;
}

/* ------------------------------------------------------------ families */

static void family_put(XXH3_state_t *st, int64_t v) { XXH3_128bits_update(st, &v, sizeof v); }

/* A float constant that may count elements (a mean's divisor) and so follow
 * the sizes: an integer from 2 up, as a kernel's size constants are. */
static bool maybe_count(double v) {
  return v >= 2 && v <= (double)(1 << 30) && v == (double)(int64_t)v; /* in range before the cast */
}

lm_hash128 lm_graph_family_hash(const lm_graph *g) {
  XXH3_state_t *st = XXH3_createState();
  if (!st) return (lm_hash128){0, 0};
  XXH3_128bits_reset(st);
  for (int pos = 0; pos < g->n; pos++) {
    const lm_node *n = g->nodes[pos];
    bool leaf = lm_is_computed(n);
    family_put(st, leaf ? LM_BUFFER : n->op);
    family_put(st, n->dtype);
    family_put(st, n->device.type);
    family_put(st, n->device.index);
    family_put(st, n->shape.ndim);
    if (leaf) continue;
    family_put(st, n->nsrc);
    for (int i = 0; i < n->nsrc; i++) family_put(st, lm_graph_pos(g, n->src[i]));
    int nd = n->shape.ndim;
    switch (lm_op_table[n->op].arg) { /* what cannot follow a size */
    case LM_ARG_VALUE:
      if (!maybe_count(n->arg.f)) XXH3_128bits_update(st, &n->arg.f, sizeof n->arg.f);
      break;
    case LM_ARG_IOTA: XXH3_128bits_update(st, &n->arg.iota.step, sizeof(double)); break;
    case LM_ARG_SLICE:
      for (int d = 0; d < nd; d++) family_put(st, n->arg.slice.step[d]);
      break;
    case LM_ARG_AXES: family_put(st, n->arg.axes); break;
    case LM_ARG_AXIS: family_put(st, n->arg.axis); break;
    case LM_ARG_PERM:
      for (int d = 0; d < nd; d++) family_put(st, n->arg.perm[d]);
      break;
    case LM_ARG_SORT: /* (k is the row's length in a whole sort, else checked as the rest) */
      family_put(st, n->arg.sort.descending);
      family_put(st, n->arg.sort.full);
      break;
    case LM_ARG_SCAN:
      family_put(st, n->arg.scan.axis);
      family_put(st, n->arg.scan.combine);
      family_put(st, n->arg.scan.reverse);
      break;
    case LM_ARG_CHECK:
      family_put(st, n->arg.check.rule);
      family_put(st, n->arg.check.axis);
      break;
    default: break; /* the rest is checked at the sizes by the caller */
    }
  }
  for (int i = 0; i < g->ntargets; i++) family_put(st, -1 - g->targets[i]);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return (lm_hash128){h.low64, h.high64};
}

void lm_graph_free(lm_graph *g) {
  free(g->nodes);
  free(g->targets);
  free(g->bytes);
  free(g->leaves);
  memset(g, 0, sizeof *g);
}
