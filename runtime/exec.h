/* Running a planned program (passes/passes.h) on the CPU. */
#ifndef LOOM_RUNTIME_EXEC_H
#define LOOM_RUNTIME_EXEC_H

#include "passes/passes.h"

/* One run of a program whose kernels are compiled (every step's fn set).
 * bufs and sizes have program->nnodes + program->ntemps entries. The caller
 * sets bufs[pos] of every leaf position (a computed node's data, an input's
 * data: borrowed, never freed by the run) and keys[pos] of every LM_RAND position (its
 * loom_key); the run allocates every step's output, frees what no later step
 * reads, and leaves the published (target) buffers in bufs with their sizes. */
typedef struct lm_exec {
  const lm_program *program;
  void **bufs;
  size_t *sizes;
  void *const *keys;
} lm_exec;

loom_status lm_exec_run(const lm_exec *x);

/* Compiles (or finds in the caches) every kernel of p, in parallel; sets
 * each kernel step's fn. */
loom_status lm_exec_compile(lm_program *p);

#endif
