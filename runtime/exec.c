/* Running a plan: its steps in order over a table of buffers,
 * intermediates freed after their last reader. On the CPU kernels split over
 * the pool, GEMMs run through runtime/gemm.c (loom's own GEMM or OpenBLAS)
 * and library steps through their runners (runtime/<op>_step.c, dist.c); a
 * CUDA device has its own step runner (runtime/cuda.h). Realization and
 * compiled programs share it. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/compile.h"
#include "runtime/cuda.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "runtime/gemm.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"
#include "runtime/step_kinds.h"

/* Memory planning: intermediates die after their last reader. */
static void release_dead(const lm_exec *x, const lm_step *s) {
  for (int i = 0; i < s->nfree; i++) {
    int pos = s->free_after[i];
    void **bufs = x->bufs;
    size_t *sizes = x->sizes;
    lm_data_free(x->device, bufs[pos], sizes[pos]);
    bufs[pos] = NULL;
  }
}

typedef struct kernel_call {
  lk_fn fn;
  void *const *args;
  int64_t begin, end;
  int64_t first, unit; /* the parts are of units [first, ..) of `unit` items */
} kernel_call;

static void run_units(void *ctx, int64_t u0, int64_t u1) {
  kernel_call *c = ctx;
  int64_t begin = (c->first + u0) * c->unit, end = (c->first + u1) * c->unit;
  c->fn(c->args, begin > c->begin ? begin : c->begin, end < c->end ? end : c->end);
}

/* Below this many element visits a kernel runs on the calling thread: waking
 * the pool costs more than it saves. */
#define PARALLEL_WORK 32768

/* fn over items [begin, end), each part of the split whole units of `unit`
 * items (counted from item 0) */
static void run_kernel_units(lk_fn fn, void *const *args, int64_t begin, int64_t end, int64_t work,
                             int64_t unit) {
  int64_t first = begin / unit, n = end > begin ? (end + unit - 1) / unit - first : 0;
  int parts = work < PARALLEL_WORK ? 1 : loom_num_threads();
  if (parts > n) parts = (int)n;
  kernel_call call = {fn, args, begin, end, first, unit};
  lm_parallel_for(n, parts, run_units, &call);
}

void lm_run_kernel_fn(lk_fn fn, void *const *args, int64_t begin, int64_t end, int64_t work) {
  run_kernel_units(fn, args, begin, end, work, 1);
}

/* Runs a kernel over output points [begin, end), a row kernel's rows kept
 * whole in its parts (lk_kernel_split_unit): the same bits on any number of
 * threads. */
static void launch(const lm_step *s, void *const *args, int64_t begin, int64_t end) {
  int64_t inner = 1;
  for (int d = s->kernel.nouter; d < s->kernel.ndim; d++) inner *= s->kernel.dom[d];
  run_kernel_units(s->fn, args, begin, end, (end - begin) * (inner > 0 ? inner : 1),
                   lk_kernel_split_unit(&s->kernel));
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
static loom_status run_gemm_epilogue(const lm_exec *x, const lm_step *s, void **args) {
  const lm_gemm *gm = &x->plan->steps[s->gemm_partner].gemm;
  size_t es = loom_dtype_size(gm->dtype);
  int64_t n = gm->N > 0 ? gm->N : 1, per = GEMM_BLOCK_ELEMS / n;
  if (per < GEMM_BLOCK_ROWS) per = GEMM_BLOCK_ROWS;
  if (per > gm->M) per = gm->M;
  size_t bytes = (size_t)(per * n) * es;
  void *scratch = lm_buffer_alloc(bytes);
  if (!scratch) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory for a GEMM block");
  const void *a = x->bufs[gm->a_pos], *b = x->bufs[gm->b_pos];
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

/* The slots kernel step s's function takes: its kernel's, and the sizes of
 * a shape-generic kernel after them. */
static int step_slots(const lm_step *s) { return s->kernel.nslots + (s->sizes != NULL); }

/* Slots 1.. of kernel step s: the buffers (or Philox keys, or sizes) they bind to. */
static void bind_slots(const lm_exec *x, const lm_step *s, void **args) {
  for (int a = 1; a < s->kernel.nslots; a++) {
    int pos = s->arg_pos[a];
    args[a] = pos == LM_PARAMS_SLOT ? (void *)s->params
              : s->arg_key[a]       ? x->keys[pos]
                                    : x->bufs[pos];
  }
  if (s->sizes) args[s->kernel.nslots] = s->sizes;
}

loom_status lm_kernel_run_cpu(const lm_exec *x, const lm_step *s) {
  if (s->outer == 0) return LOOM_OK;
  void *args_small[16];
  int nslots = step_slots(s);
  void **args = nslots <= 16 ? args_small : malloc(sizeof(void *) * (size_t)nslots);
  if (!args) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory");
  args[0] = x->bufs[s->out];
  bind_slots(x, s, args);
  loom_status st = LOOM_OK;
  if (s->gemm_partner >= 0)
    st = run_gemm_epilogue(x, s, args);
  else
    launch(s, args, 0, s->outer);
  lm_stat_add(LM_STAT_KERNELS_LAUNCHED, 1); /* once per step, blocked or not */
  if (args != args_small) free(args);
  return st;
}

/* A GEMM prologue: B's kernel, run on columns [c0, c1) of B's stored matrix
 * (rows x cols) one row at a time, its output slot pointing so that point
 * r * cols + c lands at dst[r * (c1 - c0) + c - c0]. */
typedef struct prologue_call {
  const lm_step *s;
  void *const *args;
  int64_t rows, cols;
} prologue_call;

static void fill_columns(void *ctx, int64_t c0, int64_t c1, void *dst) {
  const prologue_call *p = ctx;
  void *args[LM_PROLOGUE_MAX_SLOTS + 1];
  memcpy(args, p->args, sizeof(void *) * (size_t)step_slots(p->s));
  size_t es = loom_dtype_size(p->s->dtype);
  for (int64_t r = 0; r < p->rows; r++) {
    int64_t first = r * p->cols + c0, to = r * (c1 - c0);
    args[0] = (void *)((uintptr_t)dst + (uintptr_t)to * es - (uintptr_t)first * es);
    p->s->fn(args, first, first + (c1 - c0));
  }
}

loom_status lm_gemm_run_cpu(const lm_exec *x, const lm_step *s) {
  const lm_gemm *g = &s->gemm;
  if (s->b_producer < 0) {
    lm_run_gemm(g, x->bufs[g->a_pos], x->bufs[g->b_pos], x->bufs[s->out]);
    return LOOM_OK;
  }
  if (lm_gemm_windows_usable(g))
    return lm_run_gemm_windows(g, x->bufs[g->a_pos], x->bufs[g->win.x_pos], x->bufs[s->out]);
  const lm_step *e = &x->plan->steps[s->b_producer];
  void *args[LM_PROLOGUE_MAX_SLOTS + 1] = {NULL};
  bind_slots(x, e, args);
  prologue_call call = {e, args, g->b_trans ? g->N : g->K, g->b_trans ? g->K : g->N};
  return lm_run_gemm_filled(g, x->bufs[g->a_pos], fill_columns, &call, x->bufs[s->out]);
}

static loom_status cpu_step(const lm_exec *x, const lm_step *s) {
  return lm_step_kind_runtimes[s->kind]->run_cpu(x, s);
}

/* The all-reduces a run started and has not finished: each runs while the
 * steps before its wait_before compute, and its step's dead buffers (its
 * sources among them) are freed once it is done. */
#define MAX_IN_FLIGHT 16
typedef struct in_flight {
  bool entered; /* lm_dist_begin was called */
  int n;
  int step[MAX_IN_FLIGHT];
  lm_dist_pending q[MAX_IN_FLIGHT];
} in_flight;

/* Ends in-flight collective k; st: the run's status so far (kept if failed). */
static loom_status finish(const lm_exec *x, in_flight *f, int k, double *ms, loom_status st) {
  double t0 = ms ? lm_profile_now_ms() : 0;
  loom_status done = lm_dist_finish(&f->q[k]);
  release_dead(x, &x->plan->steps[f->step[k]]);
  if (ms) ms[f->step[k]] += lm_profile_now_ms() - t0;
  f->n--;
  f->step[k] = f->step[f->n], f->q[k] = f->q[f->n];
  return st != LOOM_OK ? st : done;
}

/* A collective over device buffers, through the host: its sources copied
 * down, run by MPI, the result copied up (the copy down waits for the steps
 * before it; the copy up is queued before the steps after it). */
static loom_status run_collective_on_host(const lm_exec *x, const lm_step *s) {
  const char *op = "loom_realize";
  const lm_collective *c = &s->coll;
  size_t es = loom_dtype_size(c->dtype), out_bytes = (size_t)s->outer * es;
  int npos = x->plan->nnodes + x->plan->ntemps;
  void **host = calloc((size_t)npos + 1, sizeof(void *));
  void *out = malloc(out_bytes + 1);
  loom_status st =
      host && out
          ? LOOM_OK
          : lm_fail(LOOM_ERR_OOM, "%s: out of memory staging loom_%s's %zu bytes on the host", op,
                    lm_op_name(c->op), out_bytes);
  for (int k = 0; k < c->nin && st == LOOM_OK; k++) {
    int pos = c->in_pos[k];
    size_t bytes = (size_t)c->in_count[k] * es;
    if (host[pos]) continue;
    if (!(host[pos] = malloc(bytes + 1)))
      st = lm_fail(LOOM_ERR_OOM, "%s: out of memory staging %zu bytes on the host", op, bytes);
    else if (bytes)
      st = lm_cuda_copy(op, LOOM_CPU, host[pos], x->device, x->bufs[pos], bytes);
  }
  if (st == LOOM_OK) st = lm_dist_run(c, (const void *const *)host, out);
  if (st == LOOM_OK && out_bytes)
    st = lm_cuda_copy(op, x->device, x->bufs[s->out], LOOM_CPU, out, out_bytes);
  for (int k = 0; host && k < c->nin; k++) {
    free(host[c->in_pos[k]]);
    host[c->in_pos[k]] = NULL;
  }
  free(host);
  free(out);
  return st;
}

/* A collective step; the plan's first one on this process first checks that
 * every rank runs the same collectives. An all-reduce whose result no step
 * reads next is started and left running (*started); on a device, a
 * collective goes through NCCL where it can, else through the host. */
static loom_status run_collective(const lm_exec *x, int i, in_flight *f, bool *started) {
  const lm_step *s = &x->plan->steps[i];
  if (!f->entered) lm_dist_begin();
  f->entered = true;
  lm_plan *p = (lm_plan *)x->plan; /* its flag is the runtime's */
  int path = x->device.type == LOOM_DEVICE_CPU ? LM_DIST_CPU : lm_dist_device_path();
  if (!atomic_load(&p->ranks_agree)) {
    loom_status st = lm_dist_check_plan(p, s->coll.op, path);
    if (st != LOOM_OK) return st;
    atomic_store(&p->ranks_agree, true);
  }
  const void *const *bufs = (const void *const *)x->bufs;
  lm_stat_add(LM_STAT_COLLECTIVES_RUN, 1);
  lm_stat_add(LM_STAT_COLLECTIVE_BYTES, (uint64_t)s->coll.count * loom_dtype_size(s->coll.dtype));
  if (path == LM_DIST_NCCL && lm_nccl_runs(&s->coll))
    return lm_dist_run_nccl(&s->coll, x->device.index, bufs, x->bufs[s->out]);
  if (path != LM_DIST_CPU) return run_collective_on_host(x, s);
  if (!lm_collective_runs_on(x->plan, i) || f->n == MAX_IN_FLIGHT)
    return lm_dist_run(&s->coll, bufs, x->bufs[s->out]);
  loom_status st = lm_dist_start(&s->coll, bufs, x->bufs[s->out], &f->q[f->n]);
  if (st == LOOM_OK) f->step[f->n++] = i, *started = true;
  lm_stat_add(LM_STAT_COLLECTIVES_OVERLAPPED, st == LOOM_OK);
  return st;
}

/* A kernel's more outputs (lk_kernel.more) get their memory with its output. */
static loom_status alloc_more(const lm_exec *x, const lm_step *s) {
  for (int m = 0; s->kind == LM_STEP_KERNEL && m < s->kernel.nmore; m++) {
    const struct lk_output *o = &s->kernel.more[m];
    int pos = s->arg_pos[o->slot];
    size_t bytes = (size_t)s->outer * loom_dtype_size(s->kernel.inst[o->value].dtype);
    if (x->bufs[pos]) continue;
    loom_status st = lm_data_alloc("loom_realize", x->device, bytes, &x->bufs[pos]);
    if (st != LOOM_OK) return st;
    x->sizes[pos] = bytes;
  }
  return LOOM_OK;
}

/* Step i: its output's memory, the step, then what no later step reads. */
static loom_status run_step(const lm_exec *x, lm_step_runner run, int i, in_flight *f) {
  const lm_step *s = &x->plan->steps[i];
  loom_status st = LOOM_OK;
  bool started = false;
  if (!s->deferred) { /* a deferred GEMM is run by its epilogue kernel */
    size_t bytes = (size_t)s->outer * loom_dtype_size(s->dtype);
    if (!x->bufs[s->out] && s->donor >= 0 && x->donatable && x->donatable[s->donor]) {
      x->bufs[s->out] = x->bufs[s->donor]; /* updated in place */
      x->sizes[s->out] = bytes;
      x->taken[s->donor] = true;
      lm_stat_add(LM_STAT_IN_PLACE_UPDATES, 1);
    }
    if (!x->bufs[s->out]) {
      st = lm_data_alloc("loom_realize", x->device, bytes, &x->bufs[s->out]);
      if (st != LOOM_OK) return st;
      x->sizes[s->out] = bytes;
      if (s->donor >= 0 && (st = lm_data_copy("loom_realize", x->device, x->bufs[s->out], x->device,
                                              x->bufs[s->donor], bytes)) != LOOM_OK)
        return st; /* (the output's buffer is the run's: freed with the others) */
    }
    if ((st = alloc_more(x, s)) != LOOM_OK) return st;
    /* collectives overlap later steps, on every device (runtime/dist.c) */
    st = s->kind == LM_STEP_COLLECTIVE ? run_collective(x, i, f, &started) : run(x, s);
  }
  if (!started) release_dead(x, s);
  return st;
}

loom_status lm_exec_steps(const lm_exec *x, lm_step_runner run) {
  const lm_plan *p = x->plan;
  /* device steps are asynchronous: only the CPU's wall times mean anything */
  double *ms = x->device.type == LOOM_DEVICE_CPU && lm_profile_enabled()
                   ? calloc((size_t)p->nsteps + 1, sizeof(double))
                   : NULL;
  loom_status st = LOOM_OK;
  in_flight f; /* (its pending slots are filled as used: no clearing every run) */
  f.entered = false, f.n = 0;
  for (int i = 0; i < p->nsteps && st == LOOM_OK; i++) {
    for (int k = f.n - 1; k >= 0; k--) /* what step i reads is complete */
      if (p->steps[f.step[k]].coll.wait_before <= i) st = finish(x, &f, k, ms, st);
    if (st != LOOM_OK) break;
    double t0 = ms ? lm_profile_now_ms() : 0;
    st = run_step(x, run, i, &f);
    if (ms) ms[i] += lm_profile_now_ms() - t0;
    for (int k = 0; k < f.n && st == LOOM_OK; k++) st = lm_dist_poll(&f.q[k]); /* MPI progresses */
  }
  while (f.n > 0) st = finish(x, &f, f.n - 1, ms, st); /* even after a failure: MPI writes them */
  if (f.entered) lm_dist_end();
  if (ms && st == LOOM_OK) lm_profile_report(p, ms);
  free(ms);
  return st;
}

loom_status lm_exec_run(const lm_exec *x) {
  if (x->device.type == LOOM_DEVICE_CUDA) return lm_cuda_exec_run(x);
  return lm_exec_steps(x, cpu_step);
}

static void release_code(lm_plan *p) {
  for (int i = 0; i < p->nsteps; i++) {
    lm_step *s = &p->steps[i];
    lm_code_release(s->code);
    s->code = NULL;
    if (s->kind != LM_STEP_KERNEL) continue;
    free(s->sizes);
    s->sizes = NULL;
    s->nsizes = 0;
  }
}

/* What a program's compile runs on the pool: step indices, the first GEMM
 * step of each distinct tile first (a GEMM block function is the longest
 * compile, 0.4-2 s cold), then every kernel step. */
typedef struct compile_job {
  lm_plan *p;
  const int *order;
  int n;
  bool lifted; /* kernels generic over the sizes in vary (a plan template's) */
  unsigned char *const *vary;
  _Atomic int next; /* the next of order[] to take: each thread takes one at a time */
} compile_job;

/* A pool part: compiles steps from order[] until none is left. A failure
 * leaves fn NULL; the caller reports it on its own thread. */
static loom_status compile_kernel_step(const compile_job *j, int i) {
  lm_step *s = &j->p->steps[i];
  return j->lifted ? lm_kernel_function_lifted("loom_program_run", &s->kernel, j->vary[i], &s->fn,
                                               &s->code, &s->sizes, &s->nsizes)
                   : lm_kernel_function_sized(&s->kernel, &s->fn, &s->code, &s->sizes, &s->nsizes);
}

static void compile_steps(void *ctx, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  compile_job *j = ctx;
  for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
    lm_step *s = &j->p->steps[j->order[i]];
    if (s->kind == LM_STEP_GEMM) {
      if (lm_gemm_prepare(&s->gemm, &s->code) != LOOM_OK) s->gemm.fn = NULL;
    } else if (compile_kernel_step(j, j->order[i]) != LOOM_OK) {
      s->fn = NULL;
    }
  }
}

static bool same_tile(const lk_gemm *a, const lk_gemm *b) {
  return a->dtype == b->dtype && a->in_dtype == b->in_dtype && a->amx == b->amx &&
         a->dot_pairs == b->dot_pairs && a->mr == b->mr && a->nr == b->nr;
}

/* The steps compile_steps runs, in order (n of them). */
static int compile_order(const lm_plan *p, int *order) {
  int n = 0;
  lk_gemm tiles[16]; /* dtypes x tiles; more would only compile later, serially */
  int ntiles = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const lm_gemm *g = &p->steps[i].gemm;
    if (p->steps[i].kind != LM_STEP_GEMM) continue;
    lk_gemm t;
    lm_gemm_tile_for(g->in_dtype, g->M, g->N, &t);
    bool seen = false;
    for (int k = 0; k < ntiles && !seen; k++) seen = same_tile(&tiles[k], &t);
    if (seen || ntiles == (int)(sizeof tiles / sizeof *tiles)) continue;
    tiles[ntiles++] = t;
    order[n++] = i;
  }
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == LM_STEP_KERNEL) order[n++] = i;
  return n;
}

/* A new program's kernels and GEMM functions compile in parallel (LLVM work
 * dominates a cold start), one pool part each; cached ones come back at once.
 * Each step holds its code until the schedule is freed. */
static loom_status compile_cpu(lm_plan *p, unsigned char *const *vary) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == LM_STEP_KERNEL && lm_env_flag("LOOM_DEBUG"))
      lk_kernel_print(&p->steps[i].kernel, stderr);
  int *order = malloc(sizeof(int) * (size_t)(p->nsteps + 1));
  if (!order) return lm_fail(LOOM_ERR_OOM, "loom_realize: out of memory compiling a program");
  compile_job job = {p, order, compile_order(p, order), vary != NULL, vary, 0};
  int threads = loom_num_threads();
  lm_parallel_for(threads, job.n > 1 ? threads : 1, compile_steps, &job);
  free(order);
  for (int i = 0; i < p->nsteps; i++) { /* failures again, to report here; the rest */
    lm_step *s = &p->steps[i];
    loom_status st = LOOM_OK;
    if (s->kind == LM_STEP_KERNEL && !s->fn)
      st = compile_kernel_step(&job, i);
    else if (s->kind == LM_STEP_GEMM && !s->code)
      st = lm_gemm_prepare(&s->gemm, &s->code);
    if (st != LOOM_OK) return st;
  }
  return LOOM_OK;
}

loom_status lm_exec_compile(lm_plan *p, loom_device device) {
  release_code(p); /* compiled before: for another device, say */
  p->release_code = release_code;
  if (device.type == LOOM_DEVICE_CUDA) return lm_cuda_exec_compile(p, device.index, NULL);
  return compile_cpu(p, NULL);
}

loom_status lm_exec_compile_lifted(lm_plan *p, loom_device device, unsigned char *const *vary) {
  release_code(p);
  p->release_code = release_code;
  if (device.type == LOOM_DEVICE_CUDA) return lm_cuda_exec_compile(p, device.index, vary);
  return compile_cpu(p, vary);
}
