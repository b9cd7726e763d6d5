/* Running a plan (passes/passes.h lm_plan) on its device. */
#ifndef LOOM_RUNTIME_EXEC_H
#define LOOM_RUNTIME_EXEC_H

#include "passes/passes.h"

/* One run of a plan whose kernels are compiled (every step's fn set).
 * bufs and sizes have plan->nnodes + plan->ntemps entries. The caller
 * sets bufs[pos] of every leaf position (a computed node's data, an input's
 * data: borrowed, never freed by the run) and keys[pos] of every LM_RAND position (its
 * loom_key); the run allocates every step's output, frees what no later step
 * reads, and leaves the published (target) buffers in bufs with their sizes. */
typedef struct lm_exec {
  const lm_plan *plan;
  void **bufs;
  size_t *sizes;
  void *const *keys;
  loom_device device; /* where every buffer lives and every step runs */
  /* Updates in place (lm_plan_in_place; NULL for programs): per position,
   * whether a step updating that leaf may take its buffer (the caller found
   * nothing else holding it); the run sets taken[pos] when one did. A step
   * that may not gets a copy of the leaf. */
  const bool *donatable;
  bool *taken;
} lm_exec;

loom_status lm_exec_run(const lm_exec *x);

/* Compiles (or finds in the caches) every kernel of p for device: on the
 * CPU in parallel, setting each kernel step's fn; on CUDA each step's
 * device_code. */
loom_status lm_exec_compile(lm_plan *p, loom_device device);
/* The same, each kernel step i generalized over the sizes vary[i] marks
 * (lm_kernel_generic_lifted): a plan template's plan, whose kernels serve
 * every size of its box. */
loom_status lm_exec_compile_lifted(lm_plan *p, loom_device device, unsigned char *const *vary);

/* How one device runs a step (a kernel step with its deferred GEMM, if any)
 * into bufs[s->out]: lm_exec_steps walks a plan with it (allocating outputs,
 * freeing intermediates after their last reader) for every device. The CPU's
 * goes through runtime/step_kinds.h's table, a CUDA device's through
 * runtime/cuda/cuda_exec.c's; a step that fails (a check) fails the run
 * before any later step. Collective steps (CPU buffers) run through
 * runtime/dist.c. */
typedef loom_status (*lm_step_runner)(const lm_exec *x, const lm_step *s);
/* runtime/attention_step.c: a fused attention step on the CPU's threads. */
loom_status lm_attention_run_cpu(const lm_exec *x, const lm_step *s);
/* runtime/sort_step.c: a sort step on the CPU's threads. */
loom_status lm_sort_run_cpu(const lm_exec *x, const lm_step *s);
/* runtime/check_step.c: a check step on the CPU. */
loom_status lm_check_run_cpu(const lm_exec *x, const lm_step *s);
/* Runs a kernel-shaped fn over items [begin, end) on loom's threads, or on
 * the caller's when `work` (element visits or multiply-adds) is too little
 * to wake the pool for. */
void lm_run_kernel_fn(lk_fn fn, void *const *args, int64_t begin, int64_t end, int64_t work);
loom_status lm_exec_steps(const lm_exec *x, lm_step_runner run);

/* runtime/profile.c: LOOM_PROFILE=1 times every step of CPU runs and prints
 * them after each run (ms[i]: step i's wall time). */
bool lm_profile_enabled(void);
double lm_profile_now_ms(void);
void lm_profile_report(const lm_plan *p, const double *ms);

#endif
