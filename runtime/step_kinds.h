/* The step kinds at the runtime layer: one row per lm_step_kind (the
 * planning layer's row is passes.h's lm_step_kinds, the formats' is
 * io/step_kinds.h's lm_step_kind_ios): how the CPU runs it, its line in
 * LOOM_PROFILE's report, and its fields for plan templates. A CUDA device runs
 * steps by runtime/cuda/cuda_exec.c's table, indexed by the same kinds (the
 * CUDA half is left out of -DLOOM_CUDA=OFF builds). Every dispatch on a
 * step's kind goes through these tables; a library op's rows and functions
 * live in its folder (ops/<op>/, docs/adding-ops.md), the older library
 * steps' in runtime/, and the interfaces below are what they write through. */
#ifndef LOOM_RUNTIME_STEP_KINDS_H
#define LOOM_RUNTIME_STEP_KINDS_H

#include <stdio.h>

#include "runtime/exec.h"

/* ------------------------------------------------------------ plan templates (plan_template.c) */

/* A walk over a plan's steps: it describes a plan (every field a run reads,
 * as shape or as a number that may follow the symbols), or writes an
 * instance's numbers back in the same order. */
typedef struct lm_plan_walk lm_plan_walk;
/* A field that must be the same at every size (its bytes). */
void lm_plan_walk_shape(lm_plan_walk *w, const void *field, size_t bytes);
#define LM_WALK_SHAPE(w, field) lm_plan_walk_shape((w), &(field), sizeof(field))
/* A number that may follow the sizes (fitted as a polynomial of the symbols). */
void lm_plan_walk_number(lm_plan_walk *w, int64_t *field);

/* ------------------------------------------------------------ the table */

typedef struct lm_step_kind_runtime {
  /* runs the step on the CPU into x->bufs[s->out] (NULL: the collective, which
     runtime/exec.c runs through runtime/dist.c, overlapping later steps) */
  loom_status (*run_cpu)(const lm_exec *x, const lm_step *s);
  /* LOOM_PROFILE's line for step s, after its time */
  void (*write_profile)(FILE *f, const lm_step *s);
  /* its fields for plan templates: every field a run reads (a new field of
     the payload must be walked, or an instance would run with the
     template's value) */
  void (*walk)(lm_plan_walk *w, lm_step *s, int i);
  bool may_fail; /* a run may stop at it with a message (realize's last check;
                    the export keeps <name>_error_detail) */
} lm_step_kind_runtime;
extern const lm_step_kind_runtime *const lm_step_kind_runtimes[LM_STEP_KINDS];

/* ------------------------------------------------------------ the rows' functions */

/* the kernel (runtime/exec.c, profile.c, plan_template.c) */
loom_status lm_kernel_run_cpu(const lm_exec *x, const lm_step *s);
void lm_kernel_write_profile(FILE *f, const lm_step *s);
void lm_kernel_walk(lm_plan_walk *w, lm_step *s, int i);
/* GEMM */
loom_status lm_gemm_run_cpu(const lm_exec *x, const lm_step *s);
void lm_gemm_write_profile(FILE *f, const lm_step *s);
void lm_gemm_walk(lm_plan_walk *w, lm_step *s, int i);
/* collectives */
void lm_collective_write_profile(FILE *f, const lm_step *s);
void lm_collective_walk(lm_plan_walk *w, lm_step *s, int i);
/* fused attention */
void lm_attention_write_profile(FILE *f, const lm_step *s);
void lm_attention_walk(lm_plan_walk *w, lm_step *s, int i);
/* sort */
void lm_sort_write_profile(FILE *f, const lm_step *s);
void lm_sort_walk(lm_plan_walk *w, lm_step *s, int i);
/* check */
void lm_check_write_profile(FILE *f, const lm_step *s);
void lm_check_walk(lm_plan_walk *w, lm_step *s, int i);

#endif
