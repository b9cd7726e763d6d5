/* The step kinds at the runtime layer: one row per lm_step_kind (the
 * planning layer's row is passes.h's lm_step_kinds): how the CPU runs it,
 * its lines in a program's listing and in LOOM_PROFILE's report, its fields
 * for plan templates, and its code in exported libraries. A CUDA device runs
 * steps by runtime/cuda/cuda_exec.c's table, indexed by the same kinds (the
 * CUDA half is left out of -DLOOM_CUDA=OFF builds). Every dispatch on a
 * step's kind goes through these tables; a library op's rows and functions
 * live in its folder (ops/<op>/, docs/adding-ops.md), the older library
 * steps' in runtime/, and the interfaces below are what they write through. */
#ifndef LOOM_RUNTIME_STEP_KINDS_H
#define LOOM_RUNTIME_STEP_KINDS_H

#include <stdio.h>

#include "runtime/exec.h"
#include "runtime/export.h"

/* ------------------------------------------------------------ the listing (program_text.c) */

/* The text being written (loom_program_dump's). */
typedef struct lm_step_text lm_step_text;
void lm_step_text_put(lm_step_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The listing's name of position pos (%3, a weight's name, %t0). */
const char *lm_step_text_pos(const loom_program *p, int pos, char buf[24]);

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

/* ------------------------------------------------------------ exports (export_source.c) */

/* The C expression of the buffer at pos inside <name>_run. */
const char *lm_export_buffer(const lm_export_layout *l, int pos, char *buf, size_t len);
/* A library step's numbers as its block's array `num` (not static: a
 * symbolic export computes them). */
void lm_export_write_numbers(FILE *f, const int64_t *num, int count);

/* A library step's CPU kernel (runtime/<what>_cpu.c, no loom header), which
 * exports compile into their libraries at -O3, its functions renamed into the
 * library's prefix. */
typedef struct lm_export_kernel {
  const char *what;       /* the op */
  const char *path;       /* its file: runtime/<what>_cpu.c, ops/<what>/<what>_cpu.c */
  const char *text;       /* its text, embedded at build time */
  const char *const *fns; /* the functions the calls name (lm_<what>_...) */
  int nfns;
  bool contract; /* compiled with -ffp-contract=fast, as in libloom */
} lm_export_kernel;

/* ------------------------------------------------------------ the table */

typedef struct lm_step_kind_runtime {
  /* runs the step on the CPU into x->bufs[s->out] (NULL: the collective, which
     runtime/exec.c runs through runtime/dist.c, overlapping later steps) */
  loom_status (*run_cpu)(const lm_exec *x, const lm_step *s);
  /* step i's lines in the listing */
  void (*write_text)(lm_step_text *t, const loom_program *p, int i);
  /* LOOM_PROFILE's line for step s, after its time */
  void (*write_profile)(FILE *f, const lm_step *s);
  /* its fields for plan templates: every field a run reads (a new field of
     the payload must be walked, or an instance would run with the
     template's value) */
  void (*walk)(lm_plan_walk *w, lm_step *s, int i);
  /* step i's code inside <name>_run (NULL: exports refuse it, export.c) */
  void (*write_export)(const lm_export_layout *l, int i, FILE *f);
  const lm_export_kernel *export_kernel; /* NULL: none (kernel and GEMM
                                            steps link object code) */
  bool may_fail;                         /* a run may stop at it with a message (the export keeps
                                            <name>_error_detail) */
} lm_step_kind_runtime;
extern const lm_step_kind_runtime *const lm_step_kind_runtimes[LM_STEP_KINDS];

/* ------------------------------------------------------------ the rows' functions */

/* the kernel (runtime/exec.c, program_text.c, profile.c, plan_template.c,
   export_source.c) */
loom_status lm_kernel_run_cpu(const lm_exec *x, const lm_step *s);
void lm_kernel_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_kernel_write_profile(FILE *f, const lm_step *s);
void lm_kernel_walk(lm_plan_walk *w, lm_step *s, int i);
void lm_kernel_write_export(const lm_export_layout *l, int i, FILE *f);
/* GEMM */
loom_status lm_gemm_run_cpu(const lm_exec *x, const lm_step *s);
void lm_gemm_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_gemm_write_profile(FILE *f, const lm_step *s);
void lm_gemm_walk(lm_plan_walk *w, lm_step *s, int i);
void lm_gemm_write_export(const lm_export_layout *l, int i, FILE *f);
/* collectives */
void lm_collective_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_collective_write_profile(FILE *f, const lm_step *s);
void lm_collective_walk(lm_plan_walk *w, lm_step *s, int i);
/* fused attention */
void lm_attention_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_attention_write_profile(FILE *f, const lm_step *s);
void lm_attention_walk(lm_plan_walk *w, lm_step *s, int i);
void lm_attention_write_export(const lm_export_layout *l, int i, FILE *f);
/* sort */
void lm_sort_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_sort_write_profile(FILE *f, const lm_step *s);
void lm_sort_walk(lm_plan_walk *w, lm_step *s, int i);
void lm_sort_write_export(const lm_export_layout *l, int i, FILE *f);
/* check */
void lm_check_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_check_write_profile(FILE *f, const lm_step *s);
void lm_check_walk(lm_plan_walk *w, lm_step *s, int i);
void lm_check_write_export(const lm_export_layout *l, int i, FILE *f);

#endif
