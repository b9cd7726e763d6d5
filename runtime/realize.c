/* Realization: the unrealized graph behind some targets -> canonical form ->
 * plan (from the graph cache, or planned and compiled) -> run -> the
 * computed nodes become buffers. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cache.h"
#include "passes/passes.h"
#include "runtime/compile.h"
#include "runtime/exec.h"
#include "runtime/pool.h"
#include "runtime/program.h"
#include "runtime/runtime.h"
#include "runtime/step_kinds.h"

/* A plan shared by the graph cache and the realizations running it. */
typedef struct shared_plan {
  _Atomic int refs;
  lm_plan *plan;
} shared_plan;

static void plan_acquire(void *v) { atomic_fetch_add(&((shared_plan *)v)->refs, 1); }

static void plan_release(void *v) {
  shared_plan *sp = v;
  if (atomic_fetch_sub(&sp->refs, 1) == 1) {
    lm_plan_free(sp->plan);
    free(sp);
  }
}

/* A cached plan keeps its code loaded: it weighs 1 + the code it holds
 * against the code caches' capacity, so that what cached plans keep
 * loaded is bounded by the same number as the code caches. */
static size_t plan_weight(const void *v) {
  const lm_plan *p = ((const shared_plan *)v)->plan;
  size_t w = 1;
  for (int i = 0; i < p->nsteps; i++) w += p->steps[i].code != NULL;
  return w;
}

static lm_cache plans = LM_CACHE_INIT_WEIGHED(0, plan_release, plan_weight);

/* The plan depends on the graph and on whether fusion is on. */
static lm_hash128 plan_key(const lm_graph *g, bool fuse) {
  lm_hash128 k = g->hash;
  if (!fuse) k.hi ^= 0x9e3779b97f4a7c15ull;
  return k;
}

static loom_status compile_plan(const lm_graph *g, bool fuse, loom_device device,
                                shared_plan **out) {
  char err[1024];
  lm_plan *p;
  loom_status st = lm_plan_make(g, fuse, &p, err, sizeof err);
  if (st != LOOM_OK) return lm_fail(st, "loom_realize: %s", err);
  lm_plan_in_place(g, p);
  if (fuse) lm_plan_more_outputs(p, device.type == LOOM_DEVICE_CPU);
  if ((st = lm_exec_compile(p, device)) != LOOM_OK) {
    lm_plan_free(p);
    return st;
  }
  shared_plan *sp = malloc(sizeof *sp);
  if (!sp) {
    lm_plan_free(p);
    return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  }
  atomic_init(&sp->refs, 1); /* the caller's */
  sp->plan = p;
  lm_stat_add(LM_STAT_GRAPHS_COMPILED, 1);
  /* The cache takes its own reference (or hands back an equal plan that
   * another thread stored first; either runs the same). */
  lm_cache_set_capacity(&plans, lm_code_cache_capacity());
  shared_plan *stored = lm_cache_put(&plans, plan_key(g, fuse), sp, plan_acquire, NULL);
  if (stored && stored != sp) {
    plan_release(sp);
    sp = stored; /* acquired for us by lm_cache_put */
  }
  *out = sp;
  return LOOM_OK;
}

/* ------------------------------------------------------------ families */

/*
 * A lazy graph's *family*: the graphs that differ from it only in sizes (a
 * batch, a growing sequence), found by lm_graph_family_hash. The first graph
 * of a family is planned for its sizes, as any graph. At the second, the leaf
 * dims that differ from the first's become symbols (dims that changed from
 * the same size to the same size are one symbol) and the graph is compiled
 * into a symbolic program whose inputs are all of its leaves
 * (lm_program_build_lazy, lm_program_make_symbolic): the family's one more
 * graph compile. Every later graph of the family reads the symbols' values
 * from its leaves, is checked to be the program's graph at them (the hash of
 * the program instantiated there equals the graph's: constants, slice bounds,
 * everything), and runs that program's plan for them (its plan template's
 * instance on the CPU), binding its own leaves and publishing its targets.
 * A graph found a member is remembered by its exact hash (`members`), so
 * that realizing it again costs one lookup, as a planned graph's does.
 * A second graph with a differing dim of size 1 waits for a third (a symbol is
 * traced at 2 or more); one whose symbols the program refuses (lm_sym_infer:
 * a constant computed from a size, say) marks the family refused: its graphs
 * are planned for their sizes, as before.
 */
#define FAMILIES 256
#define MEMBERS 1024 /* exact graph hashes remembered as family members */
#define FAMILY_MAX_DIMS 64

typedef struct family {
  _Atomic int refs;
  pthread_mutex_t lock; /* the fields below */
  int n;
  lm_hash128 first;                   /* the first graph's hash */
  loom_shape *shape;                  /* [n] its shapes */
  int64_t *slice_start;               /* [n * LOOM_MAX_DIMS] its slices' starts */
  loom_program *program;              /* the family as a symbolic program, from its second graph */
  uint8_t *from_end;                  /* [n * LOOM_MAX_DIMS] slice bound flags the program added */
  lm_sym_seed seeds[FAMILY_MAX_DIMS]; /* where a graph's dims give the symbols' values */
  int nseeds;
  bool refused;
} family;

static void family_acquire(void *v) { atomic_fetch_add(&((family *)v)->refs, 1); }

static void family_release(void *v) {
  family *f = v;
  if (!f || atomic_fetch_sub(&f->refs, 1) != 1) return;
  loom_program_free(f->program);
  free(f->shape);
  free(f->slice_start);
  free(f->from_end);
  pthread_mutex_destroy(&f->lock);
  free(f);
}

static lm_cache families = LM_CACHE_INIT(FAMILIES, family_release);

/* A graph known to be its family's program at some values. */
typedef struct member {
  _Atomic int refs;
  family *fam;
  int64_t values[LM_SYM_MAX_SYMBOLS];
} member;

static void member_acquire(void *v) { atomic_fetch_add(&((member *)v)->refs, 1); }

static void member_release(void *v) {
  member *m = v;
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  family_release(m->fam);
  free(m);
}

static lm_cache members = LM_CACHE_INIT(MEMBERS, member_release);

/* Remembers g as f's program at values (nothing when out of memory: g is
 * checked again next time). */
static void member_remember(const lm_graph *g, family *f, const int64_t *values) {
  member *m = calloc(1, sizeof *m);
  if (!m) return;
  atomic_init(&m->refs, 1);
  family_acquire(f);
  m->fam = f;
  memcpy(m->values, values, sizeof(int64_t) * (size_t)f->program->nsym);
  bool inserted = false;
  lm_cache_put(&members, g->hash, m, NULL, &inserted); /* the cache takes our reference */
  if (!inserted) member_release(m);
}

/* Where a run's plan comes from: the graph cache, or a family's program. */
typedef struct plan_ref {
  shared_plan *sp;
  family *fam;
  lm_binding *bound; /* the family program's plan at other sizes, or NULL: its own */
  const lm_plan *plan;
} plan_ref;

static void plan_ref_release(plan_ref *r) {
  if (r->sp) plan_release(r->sp);
  if (r->fam) {
    lm_program_unbind(r->fam->program, r->bound);
    family_release(r->fam);
  }
  *r = (plan_ref){0};
}

/* The symbols of f's second graph g and where they are: leaf dims that
 * differ from the first graph's (as program inputs), and the lengths of
 * slices that changed while their sources' dims did not (a batch taken as
 * x[:b] of a fixed tensor; as graph positions); one symbol per pair of
 * sizes, traced at g's. Slice bounds that kept their distance from the end
 * of a dim that changed get from-end flags (the second trace shows what one
 * trace cannot: a start written t - 1). Returns how many dims: -1: more than
 * a program takes; -2: one is below 2 in g, where no symbol is traced (a
 * batch of 1 broadcasts), so a later graph makes the program. */
typedef struct family_seeds {
  loom_symbolic_dim dims[FAMILY_MAX_DIMS];
  lm_sym_seed seeds[FAMILY_MAX_DIMS];
  char names[LM_SYM_MAX_SYMBOLS][16];
  int64_t example[LM_SYM_MAX_SYMBOLS];
  int nsym;
} family_seeds;

static int add_seed(family_seeds *fs, int ndims, int input, int pos, int d, int64_t was,
                    int64_t now, int64_t *was_size) {
  if (now < 2) return -2;
  int s = 0;
  while (s < fs->nsym && !(was_size[s] == was && fs->example[s] == now)) s++;
  if (s == fs->nsym) {
    if (fs->nsym == LM_SYM_MAX_SYMBOLS) return -1;
    was_size[s] = was, fs->example[s] = now;
    snprintf(fs->names[s], sizeof fs->names[s], "s%d", s);
    fs->nsym++;
  }
  if (ndims == FAMILY_MAX_DIMS) return -1;
  fs->dims[ndims] = (loom_symbolic_dim){input >= 0 ? input : LM_SYM_DIM_AT(pos), d, fs->names[s]};
  fs->seeds[ndims] = (lm_sym_seed){pos, d, s};
  return ndims + 1;
}

static int family_symbols(const family *f, const lm_graph *g, family_seeds *fs, uint8_t *from_end) {
  int ndims = 0, input = 0;
  int64_t was_size[LM_SYM_MAX_SYMBOLS];
  fs->nsym = 0;
  for (int pos = 0; pos < g->n && ndims >= 0; pos++) {
    const lm_node *n = g->nodes[pos];
    bool leaf = lm_is_computed(n);
    int src = leaf || n->op != LM_SLICE ? -1 : lm_graph_pos(g, n->src[0]);
    for (int d = 0; d < n->shape.ndim && ndims >= 0; d++) {
      int64_t was = f->shape[pos].dim[d], now = n->shape.dim[d];
      if (was == now) continue;
      if (leaf) {
        ndims = add_seed(fs, ndims, input, pos, d, was, now, was_size);
      } else if (src >= 0 && f->shape[src].dim[d] == g->nodes[src]->shape.dim[d]) {
        ndims = add_seed(fs, ndims, -1, pos, d, was, now, was_size);
      }
    }
    if (src >= 0) { /* bounds that kept their distance from a changed end */
      for (int d = 0; d < n->shape.ndim; d++) {
        int64_t n1 = f->shape[src].dim[d], n2 = g->nodes[src]->shape.dim[d];
        int64_t s1 = f->slice_start[pos * LOOM_MAX_DIMS + d], s2 = n->arg.slice.start[d];
        int64_t l1 = f->shape[pos].dim[d], l2 = n->shape.dim[d], step = n->arg.slice.step[d];
        uint8_t has = n->arg.slice.from_end[d];
        if (n1 == n2 || step < 1) continue;
        if (s1 != s2 && n1 - s1 == n2 - s2 && !(has & LM_SLICE_START_FROM_END))
          from_end[pos * LOOM_MAX_DIMS + d] |= LM_SLICE_START_FROM_END;
        int64_t e1 = n1 - (s1 + l1 * step), e2 = n2 - (s2 + l2 * step);
        if (l1 != l2 && e1 == e2 && e1 > 0 && !(has & LM_SLICE_STOP_FROM_END))
          from_end[pos * LOOM_MAX_DIMS + d] |= LM_SLICE_STOP_FROM_END;
      }
    }
    if (leaf) input++;
  }
  return ndims;
}

/* Makes f's program from its second graph g (f locked); false when it
 * cannot be one (the graph then plans for its sizes). */
static bool family_make(family *f, const lm_graph *g) {
  family_seeds fs;
  uint8_t *from_end = calloc((size_t)g->n * LOOM_MAX_DIMS + 1, 1);
  int ndims = from_end ? family_symbols(f, g, &fs, from_end) : 0;
  if (ndims == 0 || ndims == -2) { /* the same sizes, or a size of 1: not yet */
    free(from_end);
    return false;
  }
  loom_program *p = NULL;
  loom_status st = LOOM_ERR_VALUE;
  if (ndims > 0) {
    lm_errors_quiet_begin(); /* a refusal is an answer: the graph plans as before */
    st = lm_program_build_lazy("loom_realize", g, from_end, fs.dims, ndims, &p);
    lm_errors_quiet_end();
  }
  if (st != LOOM_OK) {
    loom_program_free(p);
    free(from_end);
    f->refused = true;
    return false;
  }
  lm_stat_add(LM_STAT_GRAPHS_COMPILED, 1);
  f->program = p;
  f->from_end = from_end;
  memcpy(f->seeds, fs.seeds, sizeof *fs.seeds * (size_t)ndims);
  f->nseeds = ndims;
  return true;
}

/* The symbols' values in g (a graph of f's family), read where the seeds
 * are: false when its dims give a symbol two values. */
static bool family_values(const family *f, const lm_graph *g, int64_t *values) {
  const loom_program *p = f->program;
  for (int s = 0; s < p->nsym; s++) values[s] = -1;
  for (int i = 0; i < f->nseeds; i++) {
    const lm_sym_seed *sd = &f->seeds[i];
    const loom_shape *sh = &g->nodes[sd->pos]->shape;
    if (sd->axis >= sh->ndim) return false;
    int64_t v = sh->dim[sd->axis];
    if (v < 1 || (values[sd->symbol] >= 0 && values[sd->symbol] != v)) return false;
    values[sd->symbol] = v;
  }
  for (int s = 0; s < p->nsym; s++)
    if (values[s] < 0) return false;
  return true;
}

/* Whether g is f's program's graph at values. */
static bool family_member(const family *f, const lm_graph *g, const int64_t *values) {
  lm_hash128 h;
  lm_errors_quiet_begin(); /* sizes the program refuses: not a member */
  loom_status st = lm_program_graph_hash_at(f->program, values, f->from_end, &h);
  lm_errors_quiet_end();
  return st == LOOM_OK && g->hash.lo == h.lo && g->hash.hi == h.hi;
}

/* A new family for g (its first graph), stored. */
static void family_start(const lm_graph *g, lm_hash128 key) {
  family *f = calloc(1, sizeof *f);
  if (!f || !(f->shape = malloc(sizeof *f->shape * (size_t)(g->n + 1))) ||
      !(f->slice_start = calloc((size_t)g->n * LOOM_MAX_DIMS + 1, sizeof *f->slice_start)) ||
      pthread_mutex_init(&f->lock, NULL) != 0) {
    if (f) free(f->shape), free(f->slice_start);
    free(f);
    return; /* the graph plans as it would anyway */
  }
  atomic_init(&f->refs, 1);
  f->n = g->n;
  f->first = g->hash;
  for (int pos = 0; pos < g->n; pos++) {
    const lm_node *n = g->nodes[pos];
    f->shape[pos] = n->shape;
    for (int d = 0; n->op == LM_SLICE && !lm_is_computed(n) && d < n->shape.ndim; d++)
      f->slice_start[pos * LOOM_MAX_DIMS + d] = n->arg.slice.start[d];
  }
  bool inserted = false;
  lm_cache_put(&families, key, f, NULL, &inserted); /* the cache takes our reference */
  if (!inserted) family_release(f);                 /* out of memory, or another thread's first */
}

/* g's family and the symbols' values in g when g is its family's program at
 * them (a reference taken), else NULL. */
static family *family_find(const lm_graph *g, int64_t *values) {
  member *m = lm_cache_get(&members, g->hash, member_acquire);
  if (m) {
    family *f = m->fam;
    family_acquire(f);
    memcpy(values, m->values, sizeof(int64_t) * (size_t)f->program->nsym);
    member_release(m);
    return f;
  }
  lm_hash128 key = lm_graph_family_hash(g);
  family *f = lm_cache_get(&families, key, family_acquire);
  if (!f) {
    family_start(g, key);
    return NULL;
  }
  pthread_mutex_lock(&f->lock);
  bool made = f->n == g->n && !f->refused && !f->program &&
              (g->hash.lo != f->first.lo || g->hash.hi != f->first.hi) && family_make(f, g);
  bool known = f->program && f->n == g->n && family_values(f, g, values);
  pthread_mutex_unlock(&f->lock);
  /* the program is g's at its traced values; any other graph is compared */
  if (known && (made || family_member(f, g, values))) {
    member_remember(g, f, values);
    return f;
  }
  family_release(f);
  return NULL;
}

/* g's plan from its family (*r filled), or LOOM_OK with r->plan NULL: plan
 * it for its sizes. */
static loom_status family_plan(const lm_graph *g, loom_device device, plan_ref *r) {
  if (loom_dynamic_mode() == LOOM_DYNAMIC_OFF) return LOOM_OK;
  int64_t values[LM_SYM_MAX_SYMBOLS];
  family *f = family_find(g, values);
  if (!f) return LOOM_OK;
  const loom_program *p = f->program;
  bool traced = true;
  for (int s = 0; s < p->nsym; s++) traced &= values[s] == p->sym_example[s];
  lm_binding *b = NULL;
  loom_status st = traced ? LOOM_OK : lm_program_bind_values(p, values, &b);
  if (st != LOOM_OK) {
    family_release(f);
    return st;
  }
  *r = (plan_ref){NULL, f, b, b ? b->plan : p->plan};
  lm_stat_add(LM_STAT_GRAPH_CACHE_HITS, 1); /* planned before, as its family */
  return LOOM_OK;
}

static loom_status find_plan(const lm_graph *g, loom_device device, plan_ref *r) {
  *r = (plan_ref){0};
  bool fuse = loom_fusion_enabled();
  shared_plan *sp = lm_cache_get(&plans, plan_key(g, fuse), plan_acquire);
  if (sp && sp->plan->nnodes == g->n) {
    lm_stat_add(LM_STAT_GRAPH_CACHE_HITS, 1);
    *r = (plan_ref){.sp = sp, .plan = sp->plan};
    return LOOM_OK;
  }
  if (sp) plan_release(sp);
  loom_status st = fuse ? family_plan(g, device, r) : LOOM_OK;
  if (st != LOOM_OK || r->plan) return st;
  if ((st = compile_plan(g, fuse, device, &sp)) == LOOM_OK)
    *r = (plan_ref){.sp = sp, .plan = sp->plan};
  return st;
}

/* Hands every computed buffer to its node. Nodes are retained first: turning
 * one into a leaf releases its sources, which may be other computed nodes. */
static void publish(const lm_graph *g, const lm_plan *p, void **bufs, size_t *sizes) {
  for (int pos = 0; pos < g->n; pos++)
    if (p->published[pos]) lm_node_retain(g->nodes[pos]);
  for (int pos = 0; pos < g->n; pos++) {
    if (!p->published[pos]) continue;
    lm_node_set_buffer(g->nodes[pos], bufs[pos], sizes[pos], lm_data_free);
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

/* The leaves that steps of p may update in place (lm_plan_in_place), into
 * donatable[]: those nothing holds but the node updating them (one
 * reference, those of checks that read only its shape: a KV cache's length
 * gives its position's range, and those of pending assignments that would
 * give it back if a check failed), which keeps no gradient history through
 * them; and only by steps after every check, so that a run a check fails
 * has written no leaf (lm_pending_rollback gives the leaves back). */
static void find_donatable(const lm_graph *g, const lm_plan *p, bool *donatable) {
  int *shape_refs = NULL, last_check = -1;
  for (int i = 0; i < p->nsteps; i++)
    if (lm_step_kind_runtimes[p->steps[i].kind]->may_fail) last_check = i;
  for (int pos = 0; pos < g->n; pos++) {
    const lm_node *n = g->nodes[pos];
    for (int s = 1; n->op == LM_CHECK && s < n->nsrc; s++) {
      if (!shape_refs && !(shape_refs = calloc((size_t)g->n, sizeof *shape_refs)))
        return; /* no update in place: copies */
      int at = lm_graph_pos(g, n->src[s]);
      if (at >= 0) shape_refs[at]++;
    }
  }
  for (int i = 0; i < p->nsteps; i++) {
    const lm_step *s = &p->steps[i];
    if (s->donor < 0 || i < last_check) continue;
    const lm_node *leaf = g->nodes[s->donor], *out = g->nodes[s->out];
    int holders = 1 + (shape_refs ? shape_refs[s->donor] : 0) + lm_pending_holds(leaf);
    donatable[s->donor] = atomic_load(&leaf->refs) == holders && leaf->op == LM_BUFFER &&
                          leaf->data && !leaf->requires_grad && !out->requires_grad &&
                          leaf->bytes == (size_t)s->outer * loom_dtype_size(s->dtype);
  }
  free(shape_refs);
}

/* After a run that took leaves' buffers: on success each such leaf lets go
 * of its buffer (its updating node publishes it); on failure it keeps it,
 * holding the update's values, which the update recomputes alike. */
static void settle_taken(const lm_graph *g, const lm_plan *p, const bool *taken, void **bufs,
                         bool ok) {
  for (int i = 0; i < p->nsteps; i++) {
    const lm_step *s = &p->steps[i];
    if (s->donor < 0 || !taken[s->donor]) continue;
    if (ok) {
      g->nodes[s->donor]->data = NULL;
      g->nodes[s->donor]->bytes = 0;
    } else {
      bufs[s->out] = NULL;
    }
  }
}

static loom_status run_graph(const lm_graph *g, const lm_plan *p, loom_device device) {
  int nbufs = g->n + p->ntemps;
  bool in_place = false;
  for (int i = 0; i < p->nsteps; i++) in_place |= p->steps[i].donor >= 0;
  void **bufs = calloc((size_t)(nbufs + g->n), sizeof *bufs);
  size_t *sizes = calloc((size_t)nbufs, sizeof *sizes);
  bool *donatable = in_place ? calloc(2 * (size_t)g->n, sizeof *donatable) : NULL;
  bool *taken = donatable ? donatable + g->n : NULL;
  loom_status st = LOOM_OK;
  if (!bufs || !sizes || (in_place && !donatable))
    st = lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  void **keys = bufs ? bufs + nbufs : NULL;
  if (st == LOOM_OK) st = bind_leaves(g, bufs, keys);
  if (st == LOOM_OK && donatable) find_donatable(g, p, donatable);
  if (st == LOOM_OK) st = lm_exec_run(&(lm_exec){p, bufs, sizes, keys, device, donatable, taken});
  /* Leaves' data is borrowed: unbind it now, while every node is alive.
   * Publishing frees the nodes nothing holds any more (the graph does not
   * retain its nodes), so nothing may look at g->nodes after it. */
  for (int pos = 0; bufs && pos < g->n; pos++)
    if (lm_is_computed(g->nodes[pos])) bufs[pos] = NULL;
  if (taken) settle_taken(g, p, taken, bufs, st == LOOM_OK);
  free(donatable);
  if (st == LOOM_OK) publish(g, p, bufs, sizes);
  for (int i = 0; bufs && sizes && i < nbufs; i++) lm_data_free(device, bufs[i], sizes[i]);
  free(bufs);
  free(sizes);
  return st;
}

/* One plan for the nodes of one device (nothing records an op across
 * devices: loom_to copies at once, so a graph never spans two). */
static loom_status realize_on(lm_node *const *todo, int count, loom_device device) {
  lm_graph g;
  loom_status st = lm_graph_build(&g, todo, count);
  plan_ref r = {0};
  if (st != LOOM_OK)
    st = lm_fail(st, "loom_realize: out of memory collecting the graph");
  else
    st = find_plan(&g, device, &r);
  if (st == LOOM_OK) st = run_graph(&g, r.plan, device);
  if (st == LOOM_OK) lm_stat_add(LM_STAT_REALIZATIONS, 1);
  plan_ref_release(&r);
  lm_graph_free(&g);
  return st;
}

/* The targets grouped by device, one plan per device (in the order their
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
  /* A value the run refused (a check's index, position or weights; an input
   * outside a program) would fail every realization alike: the assignments it
   * carried are undone, each tensor naming its value from before them (no
   * step that updates a leaf in place runs before the last check:
   * find_donatable), as torch's raising op leaves the tensors it would have
   * written. Other failures (memory) keep them pending, so that realizing
   * again completes the step. */
  if (npending && st == LOOM_OK) lm_pending_clear();
  if (npending && st == LOOM_ERR_VALUE) lm_pending_rollback();
  return st;
}

void lm_program_cache_clear(void) {
  lm_cache_clear(&plans);
  lm_cache_clear(&members);
  lm_cache_clear(&families);
}
