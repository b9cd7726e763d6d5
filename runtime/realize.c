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
#include "runtime/gemm.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"

/* A program shared by the cache and the realizations running it. */
typedef struct shared_program {
  _Atomic int refs;
  lm_program *program;
} shared_program;

static void program_acquire(void *v) { atomic_fetch_add(&((shared_program *)v)->refs, 1); }

static void program_release(void *v) {
  shared_program *sp = v;
  if (atomic_fetch_sub(&sp->refs, 1) == 1) {
    lm_program_free(sp->program);
    free(sp);
  }
}

#define PROGRAM_CACHE_CAPACITY 4096
static lm_cache programs = LM_CACHE_INIT(PROGRAM_CACHE_CAPACITY, program_release);

/* The plan depends on the graph and on whether fusion is on. */
static lm_hash128 program_key(const lm_graph *g, bool fuse) {
  lm_hash128 k = g->hash;
  if (!fuse) k.hi ^= 0x9e3779b97f4a7c15ull;
  return k;
}

/* Compiles the kernels of steps [begin, end) (a pool part). A failure leaves
 * fn NULL; the caller reports it on its own thread. */
static void compile_steps(void *ctx, int64_t begin, int64_t end) {
  lm_program *p = ctx;
  for (int64_t i = begin; i < end; i++) {
    lm_step *s = &p->steps[i];
    if (s->kind == LM_STEP_KERNEL && lm_kernel_function(&s->kernel, &s->fn) != LOOM_OK)
      s->fn = NULL;
  }
}

/* A new program's kernels compile in parallel (LLVM work dominates a cold
 * start); cached ones come back at once. */
static loom_status compile_kernels(lm_program *p) {
  int kernels = 0;
  for (int i = 0; i < p->nsteps; i++) {
    if (p->steps[i].kind != LM_STEP_KERNEL) continue;
    kernels++;
    if (lm_env_flag("LOOM_DEBUG")) lk_kernel_print(&p->steps[i].kernel, stderr);
  }
  int parts = kernels > 1 ? loom_num_threads() : 1;
  lm_parallel_for(p->nsteps, parts < p->nsteps ? parts : p->nsteps, compile_steps, p);
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    if (s->kind != LM_STEP_KERNEL || s->fn) continue;
    loom_status st = lm_kernel_function(&s->kernel, &s->fn); /* again, to report here */
    if (st != LOOM_OK) return st;
  }
  return LOOM_OK;
}

static loom_status compile_program(const lm_graph *g, bool fuse, shared_program **out) {
  char err[1024];
  lm_program *p;
  loom_status st = lm_plan(g, fuse, &p, err, sizeof err);
  if (st != LOOM_OK) return lm_fail(st, "loom_realize: %s", err);
  if ((st = compile_kernels(p)) != LOOM_OK) {
    lm_program_free(p);
    return st;
  }
  shared_program *sp = malloc(sizeof *sp);
  if (!sp) {
    lm_program_free(p);
    return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  }
  atomic_init(&sp->refs, 1); /* the caller's */
  sp->program = p;
  lm_stat_add(LM_STAT_GRAPHS_COMPILED, 1);
  /* The cache takes its own reference (or hands back an equal program that
   * another thread stored first; either runs the same). */
  shared_program *stored = lm_cache_put(&programs, program_key(g, fuse), sp, program_acquire);
  if (stored && stored != sp) {
    program_release(sp);
    sp = stored; /* acquired for us by lm_cache_put */
  }
  *out = sp;
  return LOOM_OK;
}

static loom_status find_program(const lm_graph *g, shared_program **out) {
  bool fuse = loom_fusion_enabled();
  shared_program *sp = lm_cache_get(&programs, program_key(g, fuse), program_acquire);
  if (sp && sp->program->nnodes == g->n) {
    lm_stat_add(LM_STAT_GRAPH_CACHE_HITS, 1);
    *out = sp;
    return LOOM_OK;
  }
  if (sp) program_release(sp);
  return compile_program(g, fuse, out);
}

/* Positions past the graph are the program's temporaries. */
static void *data_of(const lm_graph *g, void **bufs, int pos) {
  if (pos >= g->n) return bufs[pos];
  lm_node *n = g->nodes[pos];
  return lm_is_computed(n) ? n->data : bufs[pos];
}

/* Memory planning: intermediates die after their last reader. */
static void release_dead(const lm_step *s, void **bufs, size_t *sizes) {
  for (int i = 0; i < s->nfree; i++) {
    int pos = s->free_after[i];
    lm_buffer_free(bufs[pos], sizes[pos]);
    bufs[pos] = NULL;
  }
}

typedef struct kernel_call {
  lk_fn fn;
  void *const *args;
  int64_t offset;
} kernel_call;

static void run_range(void *ctx, int64_t begin, int64_t end) {
  kernel_call *c = ctx;
  c->fn(c->args, c->offset + begin, c->offset + end);
}

/* Below this many element visits a kernel runs on the calling thread: waking
 * the pool costs more than it saves. */
#define PARALLEL_WORK 32768

/* Runs a kernel over output points [begin, end). */
static void launch(const lm_step *s, void *const *args, int64_t begin, int64_t end) {
  int64_t inner = 1;
  for (int d = s->kernel.nouter; d < s->kernel.ndim; d++) inner *= s->kernel.dom[d];
  int64_t n = end - begin, work = n * (inner > 0 ? inner : 1);
  int parts = work < PARALLEL_WORK ? 1 : loom_num_threads();
  if (parts > n) parts = (int)n;
  kernel_call call = {s->fn, args, begin};
  lm_parallel_for(n, parts, run_range, &call);
}

/* Rows a GEMM epilogue block covers: at least GEMM_BLOCK_ROWS (a BLAS call on
 * fewer rows repacks B for little work and threads poorly), and about
 * GEMM_BLOCK_ELEMS outputs, which stay in cache between the GEMM writing them
 * and the kernel reading them. */
#define GEMM_BLOCK_ELEMS (1 << 20)
#define GEMM_BLOCK_ROWS 256

/* A deferred GEMM in row blocks, each followed by its epilogue kernel on those
 * rows. The product goes to one block-sized scratch buffer: the kernel's slot
 * for it points gemm_first elements before, so index i reads scratch[i - first]. */
static loom_status run_gemm_epilogue(const lm_graph *g, const lm_program *p, const lm_step *s,
                                     void **args, void **bufs) {
  const lm_gemm *gm = &p->steps[s->gemm_partner].gemm;
  size_t es = loom_dtype_size(gm->dtype);
  int64_t n = gm->N > 0 ? gm->N : 1, per = GEMM_BLOCK_ELEMS / n;
  if (per < GEMM_BLOCK_ROWS) per = GEMM_BLOCK_ROWS;
  if (per > gm->M) per = gm->M;
  size_t bytes = (size_t)(per * n) * es;
  void *scratch = lm_buffer_alloc(bytes);
  if (!scratch) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory for a GEMM block");
  const void *a = data_of(g, bufs, gm->a_pos), *b = data_of(g, bufs, gm->b_pos);
  int64_t batches = lm_gemm_batches(gm);
  for (int64_t batch = 0; batch < batches; batch++)
    for (int64_t r0 = 0; r0 < gm->M; r0 += per) {
      int64_t r1 = r0 + per < gm->M ? r0 + per : gm->M;
      int64_t first = (batch * gm->M + r0) * gm->N;
      lm_run_gemm_rows(gm, a, b, batch, r0, r1, scratch);
      args[s->gemm_slot] = (void *)((uintptr_t)scratch - (uintptr_t)first * es);
      launch(s, args, first, first + (r1 - r0) * gm->N);
    }
  lm_buffer_free(scratch, bytes);
  return LOOM_OK;
}

static loom_status run_kernel(const lm_graph *g, const lm_program *p, const lm_step *s,
                              void **bufs) {
  void *args_small[16];
  void **args =
      s->kernel.nslots <= 16 ? args_small : malloc(sizeof(void *) * (size_t)s->kernel.nslots);
  if (!args) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  args[0] = bufs[s->out];
  for (int a = 1; a < s->kernel.nslots; a++) {
    int pos = s->arg_pos[a];
    args[a] = s->arg_key[a] ? (void *)g->nodes[pos]->arg.rand.key.k : data_of(g, bufs, pos);
  }
  loom_status st = LOOM_OK;
  if (s->gemm_partner >= 0)
    st = run_gemm_epilogue(g, p, s, args, bufs);
  else
    launch(s, args, 0, s->outer);
  lm_stat_add(LM_STAT_KERNELS_LAUNCHED, 1); /* once per step, blocked or not */
  if (args != args_small) free(args);
  return st;
}

static loom_status run(const lm_graph *g, const lm_program *p, void **bufs, size_t *sizes) {
  for (int i = 0; i < p->nsteps; i++) {
    const lm_step *s = &p->steps[i];
    if (s->deferred) { /* a GEMM its epilogue kernel runs */
      release_dead(s, bufs, sizes);
      continue;
    }
    size_t bytes = (size_t)s->outer * loom_dtype_size(s->dtype);
    if (!bufs[s->out]) {
      bufs[s->out] = lm_buffer_alloc(bytes);
      sizes[s->out] = bytes;
    }
    if (!bufs[s->out])
      return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory for a %zu-byte %s result", bytes,
                     loom_dtype_name(s->dtype));
    loom_status st = LOOM_OK;
    if (s->kind == LM_STEP_GEMM)
      lm_run_gemm(&s->gemm, data_of(g, bufs, s->gemm.a_pos), data_of(g, bufs, s->gemm.b_pos),
                  bufs[s->out]);
    else if (s->outer > 0)
      st = run_kernel(g, p, s, bufs);
    release_dead(s, bufs, sizes);
    if (st != LOOM_OK) return st;
  }
  return LOOM_OK;
}

/* Hands every computed buffer to its node. Nodes are retained first: turning
 * one into a leaf releases its sources, which may be other computed nodes. */
static void publish(const lm_graph *g, const lm_program *p, void **bufs, size_t *sizes) {
  for (int pos = 0; pos < g->n; pos++)
    if (p->published[pos]) lm_node_retain(g->nodes[pos]);
  for (int pos = 0; pos < g->n; pos++) {
    if (!p->published[pos]) continue;
    lm_node_set_buffer(g->nodes[pos], bufs[pos], sizes[pos]);
    bufs[pos] = NULL;
  }
  for (int pos = 0; pos < g->n; pos++)
    if (p->published[pos]) lm_node_release(g->nodes[pos]);
}

loom_status lm_realize_nodes(lm_node *const *nodes, int n) {
  int npending = lm_pending_count(), total = n + npending;
  lm_node **todo = malloc(sizeof(lm_node *) * (size_t)(total > 0 ? total : 1));
  if (!todo) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  int count = 0;
  for (int i = 0; i < total; i++) {
    lm_node *node = i < n ? nodes[i] : lm_pending_at(i - n); /* assignments ride along */
    if (lm_is_computed(node)) continue;
    bool dup = false;
    for (int j = 0; j < count; j++) dup |= todo[j] == node;
    if (!dup) todo[count++] = node;
  }
  if (count == 0) {
    free(todo);
    if (npending) lm_pending_clear();
    return LOOM_OK;
  }
  lm_graph g;
  loom_status st = lm_graph_build(&g, todo, count);
  free(todo);
  shared_program *sp = NULL;
  if (st != LOOM_OK)
    st = lm_fail(st, "loom_realize: out of memory collecting the graph");
  else
    st = find_program(&g, &sp);
  void **bufs = NULL;
  size_t *sizes = NULL;
  int nbufs = st == LOOM_OK ? g.n + sp->program->ntemps : 0;
  if (st == LOOM_OK) {
    bufs = calloc((size_t)nbufs, sizeof *bufs);
    sizes = calloc((size_t)nbufs, sizeof *sizes);
    if (!bufs || !sizes) st = lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  }
  if (st == LOOM_OK) st = run(&g, sp->program, bufs, sizes);
  if (st == LOOM_OK) {
    publish(&g, sp->program, bufs, sizes);
    lm_stat_add(LM_STAT_REALIZATIONS, 1);
    if (npending) lm_pending_clear();
  }
  for (int i = 0; bufs && i < nbufs; i++) lm_buffer_free(bufs[i], sizes[i]);
  free(bufs);
  free(sizes);
  if (sp) program_release(sp);
  lm_graph_free(&g);
  return st;
}
