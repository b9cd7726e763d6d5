/* The step kinds at the io layer: one row per lm_step_kind (the planning
 * layer's row is passes.h's lm_step_kinds, the runtime's is
 * runtime/step_kinds.h's lm_step_kind_runtimes): its lines in a program's
 * listing, its code in exported libraries and the CPU kernel they compile
 * in. A library op's row and functions live in its folder
 * (ops/<op>/<op>_io.c, docs/adding-ops.md), the older steps' in
 * io/program_text.c and io/export_source.c; the interfaces below are what
 * they write through. */
#ifndef LOOM_IO_STEP_KINDS_H
#define LOOM_IO_STEP_KINDS_H

#include <stdio.h>

#include "io/export.h"

/* ------------------------------------------------------------ the listing (program_text.c) */

/* The text being written (loom_program_dump's). */
typedef struct lm_step_text lm_step_text;
void lm_step_text_put(lm_step_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The listing's name of position pos (%3, a weight's name, %t0). */
const char *lm_step_text_pos(const loom_program *p, int pos, char buf[24]);

/* ------------------------------------------------------------ exports (export_source.c) */

/* The C expression of the buffer at pos inside <name>_run. */
const char *lm_export_buffer(const lm_export_layout *l, int pos, char *buf, size_t len);
/* A library step's numbers as its block's array `num` (not static: a
 * symbolic export computes them). */
void lm_export_write_numbers(FILE *f, const int64_t *num, int count);

/* A library step's CPU kernel (runtime/<what>_cpu.c, ops/<what>/<what>_cpu.c:
 * no loom header), which exports compile into their libraries at -O3, its
 * functions renamed into the library's prefix. */
typedef struct lm_export_kernel {
  const char *path;       /* its file, named in the generated source */
  const char *text;       /* its text, embedded at build time */
  const char *const *fns; /* the functions the calls name (lm_<what>_...) */
  int nfns;
  bool contract; /* compiled with -ffp-contract=fast, as in libloom */
} lm_export_kernel;
/* fns and nfns of an lm_export_kernel from an array of names */
#define LM_EXPORT_FNS(names) names, (int)(sizeof names / sizeof *names)

/* ------------------------------------------------------------ the table */

typedef struct lm_step_kind_io {
  /* step i's lines in the listing */
  void (*write_text)(lm_step_text *t, const loom_program *p, int i);
  /* step i's code inside <name>_run (NULL: exports refuse it, export.c) */
  void (*write_export)(const lm_export_layout *l, int i, FILE *f);
  const lm_export_kernel *export_kernel; /* NULL: none (kernel and GEMM
                                            steps link object code) */
} lm_step_kind_io;
extern const lm_step_kind_io *const lm_step_kind_ios[LM_STEP_KINDS];

/* ------------------------------------------------------------ the rows' functions */

/* the kernel (program_text.c, export_source.c) */
void lm_kernel_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_kernel_write_export(const lm_export_layout *l, int i, FILE *f);
/* GEMM */
void lm_gemm_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_gemm_write_export(const lm_export_layout *l, int i, FILE *f);
/* collectives */
void lm_collective_write_text(lm_step_text *t, const loom_program *p, int i);
/* fused attention */
void lm_attention_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_attention_write_export(const lm_export_layout *l, int i, FILE *f);
/* sort */
void lm_sort_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_sort_write_export(const lm_export_layout *l, int i, FILE *f);
/* check */
void lm_check_write_text(lm_step_text *t, const loom_program *p, int i);
void lm_check_write_export(const lm_export_layout *l, int i, FILE *f);

#endif
