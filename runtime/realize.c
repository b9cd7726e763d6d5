/* Realization: the unrealized graph behind some targets -> canonical form ->
 * program (from the graph cache, or planned and compiled) -> run -> the
 * computed nodes become buffers. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/exec.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"

/* A program shared by the cache and the realizations running it. */
typedef struct shared_program {
  _Atomic int refs;
  lm_schedule *program;
} shared_program;

static void program_acquire(void *v) { atomic_fetch_add(&((shared_program *)v)->refs, 1); }

static void program_release(void *v) {
  shared_program *sp = v;
  if (atomic_fetch_sub(&sp->refs, 1) == 1) {
    lm_schedule_free(sp->program);
    free(sp);
  }
}

/* A cached program keeps its code loaded: it weighs 1 + the code it holds
 * against the code caches' capacity, so that what cached programs keep
 * loaded is bounded by the same number as the code caches. */
static size_t program_weight(const void *v) {
  const lm_schedule *p = ((const shared_program *)v)->program;
  size_t w = 1;
  for (int i = 0; i < p->nsteps; i++) w += p->steps[i].code != NULL;
  return w;
}

static lm_cache programs = LM_CACHE_INIT_WEIGHED(0, program_release, program_weight);

/* The plan depends on the graph and on whether fusion is on. */
static lm_hash128 program_key(const lm_graph *g, bool fuse) {
  lm_hash128 k = g->hash;
  if (!fuse) k.hi ^= 0x9e3779b97f4a7c15ull;
  return k;
}

static loom_status compile_program(const lm_graph *g, bool fuse, loom_device device,
                                   shared_program **out) {
  char err[1024];
  lm_schedule *p;
  loom_status st = lm_plan(g, fuse, &p, err, sizeof err);
  if (st != LOOM_OK) return lm_fail(st, "loom_realize: %s", err);
  if ((st = lm_exec_compile(p, device)) != LOOM_OK) {
    lm_schedule_free(p);
    return st;
  }
  shared_program *sp = malloc(sizeof *sp);
  if (!sp) {
    lm_schedule_free(p);
    return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  }
  atomic_init(&sp->refs, 1); /* the caller's */
  sp->program = p;
  lm_stat_add(LM_STAT_GRAPHS_COMPILED, 1);
  /* The cache takes its own reference (or hands back an equal program that
   * another thread stored first; either runs the same). */
  lm_cache_set_capacity(&programs, lm_code_cache_capacity());
  shared_program *stored = lm_cache_put(&programs, program_key(g, fuse), sp, program_acquire, NULL);
  if (stored && stored != sp) {
    program_release(sp);
    sp = stored; /* acquired for us by lm_cache_put */
  }
  *out = sp;
  return LOOM_OK;
}

static loom_status find_program(const lm_graph *g, loom_device device, shared_program **out) {
  bool fuse = loom_fusion_enabled();
  shared_program *sp = lm_cache_get(&programs, program_key(g, fuse), program_acquire);
  if (sp && sp->program->nnodes == g->n) {
    lm_stat_add(LM_STAT_GRAPH_CACHE_HITS, 1);
    *out = sp;
    return LOOM_OK;
  }
  if (sp) program_release(sp);
  return compile_program(g, fuse, device, out);
}

/* Hands every computed buffer to its node. Nodes are retained first: turning
 * one into a leaf releases its sources, which may be other computed nodes. */
static void publish(const lm_graph *g, const lm_schedule *p, void **bufs, size_t *sizes) {
  for (int pos = 0; pos < g->n; pos++)
    if (p->published[pos]) lm_node_retain(g->nodes[pos]);
  for (int pos = 0; pos < g->n; pos++) {
    if (!p->published[pos]) continue;
    lm_node_set_buffer(g->nodes[pos], bufs[pos], sizes[pos]);
    bufs[pos] = NULL;
    sizes[pos] = 0;
  }
  for (int pos = 0; pos < g->n; pos++)
    if (p->published[pos]) lm_node_release(g->nodes[pos]);
}

/* Binds the graph's leaves (borrowed data) and random keys for a run; fails
 * when a leaf is a program input, which has no data outside a program. */
static loom_status bind_leaves(const lm_graph *g, void **bufs, void **keys) {
  for (int pos = 0; pos < g->n; pos++) {
    lm_node *n = g->nodes[pos];
    if (n->op == LM_INPUT && !n->data)
      return lm_fail(LOOM_ERR_VALUE,
                     "loom_realize: the result depends on input '%s', which has a value only "
                     "in a compiled program (loom_compile, loom_program_run)",
                     n->label ? n->label : "?");
    if (lm_is_computed(n)) bufs[pos] = n->data;
    if (n->op == LM_RAND) keys[pos] = n->arg.rand.key.k;
  }
  return LOOM_OK;
}

static loom_status run_graph(const lm_graph *g, const lm_schedule *p, loom_device device) {
  int nbufs = g->n + p->ntemps;
  void **bufs = calloc((size_t)(nbufs + g->n), sizeof *bufs);
  size_t *sizes = calloc((size_t)nbufs, sizeof *sizes);
  loom_status st = LOOM_OK;
  if (!bufs || !sizes) st = lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  void **keys = bufs ? bufs + nbufs : NULL;
  if (st == LOOM_OK) st = bind_leaves(g, bufs, keys);
  if (st == LOOM_OK) st = lm_exec_run(&(lm_exec){p, bufs, sizes, keys, device});
  /* Leaves' data is borrowed: unbind it now, while every node is alive.
   * Publishing frees the nodes nothing holds any more (the graph does not
   * retain its nodes), so nothing may look at g->nodes after it. */
  for (int pos = 0; bufs && pos < g->n; pos++)
    if (lm_is_computed(g->nodes[pos])) bufs[pos] = NULL;
  if (st == LOOM_OK) publish(g, p, bufs, sizes);
  for (int i = 0; bufs && sizes && i < nbufs; i++) lm_data_free(device, bufs[i], sizes[i]);
  free(bufs);
  free(sizes);
  return st;
}

/* One program for the nodes of one device (nothing records an op across
 * devices: loom_to copies at once, so a graph never spans two). */
static loom_status realize_on(lm_node *const *todo, int count, loom_device device) {
  lm_graph g;
  loom_status st = lm_graph_build(&g, todo, count);
  shared_program *sp = NULL;
  if (st != LOOM_OK)
    st = lm_fail(st, "loom_realize: out of memory collecting the graph");
  else
    st = find_program(&g, device, &sp);
  if (st == LOOM_OK) st = run_graph(&g, sp->program, device);
  if (st == LOOM_OK) lm_stat_add(LM_STAT_REALIZATIONS, 1);
  if (sp) program_release(sp);
  lm_graph_free(&g);
  return st;
}

/* The targets grouped by device, one program per device (in the order their
 * first target comes). */
static loom_status realize_grouped(lm_node **todo, int count) {
  loom_status st = LOOM_OK;
  while (count > 0 && st == LOOM_OK) {
    loom_device d = todo[0]->device;
    int same = 0;
    for (int i = 0; i < count; i++) /* stable partition: this device's nodes first */
      if (lm_device_eq(todo[i]->device, d)) {
        lm_node *t = todo[i];
        memmove(todo + same + 1, todo + same, sizeof *todo * (size_t)(i - same));
        todo[same++] = t;
      }
    st = realize_on(todo, same, d);
    todo += same;
    count -= same;
  }
  return st;
}

loom_status lm_realize_nodes(lm_node *const *nodes, int n) {
  int npending = lm_pending_count(), total = n + npending;
  lm_node **todo = malloc(sizeof(lm_node *) * (size_t)(total > 0 ? total : 1));
  if (!todo) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  int count = 0;
  for (int i = 0; i < total; i++) {
    lm_node *node = i < n ? nodes[i] : lm_pending_at(i - n); /* assignments ride along */
    if (node->op == LM_INPUT && !node->data) {
      free(todo);
      return lm_fail(LOOM_ERR_VALUE,
                     "loom_realize: input '%s' has a value only in a compiled program "
                     "(loom_compile, loom_program_run)",
                     node->label ? node->label : "?");
    }
    if (lm_is_computed(node)) continue;
    bool dup = false;
    for (int j = 0; j < count; j++) dup |= todo[j] == node;
    if (!dup) todo[count++] = node;
  }
  loom_status st = realize_grouped(todo, count);
  free(todo);
  if (st == LOOM_OK && npending) lm_pending_clear();
  return st;
}

void lm_program_cache_clear(void) { lm_cache_clear(&programs); }
