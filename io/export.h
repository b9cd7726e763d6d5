/* Ahead-of-time export of a compiled program (loom_program_export), shared by
 * the driver (export.c: files, the toolchain) and the code writer
 * (export_source.c: the C wrapper and the header). */
#ifndef LOOM_IO_EXPORT_H
#define LOOM_IO_EXPORT_H

#include <stdio.h>

#include "runtime/program.h"

/* Weights past this many bytes go to a file beside the library (mapped at
 * first call) rather than into it: a shared object's data is addressed with
 * 32-bit offsets by the wrapper's code, and a 2 GiB .so strains loaders. */
#define LM_EXPORT_EMBED_LIMIT ((int64_t)1 << 30)
#define LM_EXPORT_ALIGN 64

/* Where each buffer of the program lives in the exported wrapper. */
typedef struct lm_export_layout {
  const loom_program *p;
  const char *name;   /* C prefix of every symbol */
  char upper[72];     /* NAME for macros */
  int64_t *arena_off; /* [n + ntemps] offset in the per-call scratch, or -1 */
  int64_t arena_bytes;
  int64_t *weight_off; /* [n] offset of a weight in the weights blob, or -1 */
  int64_t weight_bytes;
  int *output_of;     /* [n] first output a published position is, or -1 */
  char (*symbol)[36]; /* [nsteps] kernel and GEMM block function names */
  lk_gemm *tile;      /* [nsteps] a GEMM step's block function */
  int64_t pack_bytes; /* the largest GEMM step's packed panels */
  bool embed;         /* weights inside the .so (else <name>.weights) */
  bool uses_gemm;
  bool uses_kind[LM_STEP_KINDS]; /* a step of the kind: a library step's CPU kernel
                                   (io/step_kinds.h export_kernel) goes in */
  bool library_kernels;          /* one of those: compiled at -O3 */
  bool contract;                 /* one of those asks for -ffp-contract=fast (attention's) */
  bool may_fail;                 /* a step may stop the run with a message (a check's):
                                    <NAME>_ERR_VALUE and <name>_error_detail */
  bool uses_amx;                 /* a GEMM runs on AMX tiles: the library asks Linux for them */
  lk_kernel *kernel;             /* [nsteps] what a kernel step links: its own kernel, or
                                    (generic) its kernel generalized, instructions owned */
  /* A symbolic program's export (export_symbolic.c) writes the wrapper once
   * per sample of the symbols' values, p a view of the program planned at
   * them; the numbers that differ between samples become expressions. */
  bool generic;
  int64_t **sizes;     /* generic: [nsteps] a kernel step's size values here */
  const int *slot;     /* generic: [n + ntemps] scratch slot of a position, or -1 */
  int nslots;          /* generic: scratch slots, each a run-time offset */
  int64_t *slot_bytes; /* generic: [nslots] their bytes here */
} lm_export_layout;

/* Scratch offsets by liveness (the plan's frees), weight offsets, outputs,
 * the GEMM steps' block functions (named, not compiled: export.c writes them). */
loom_status lm_export_layout_make(lm_export_layout *l, const loom_program *p, const char *name,
                                  int64_t embed_limit);
/* The layout of a symbolic program's view p (planned at some values of its
 * symbols): kernels generalized over every size, GEMM tiles chosen for the
 * products of tiles_from (the plan at the traced sizes), scratch slots as
 * given (slot[pos], nslots of them). */
loom_status lm_export_layout_make_generic(lm_export_layout *l, const loom_program *p,
                                          const char *name, int64_t embed_limit,
                                          const lm_plan *tiles_from, const int *slot, int nslots);
void lm_export_layout_free(lm_export_layout *l);
/* The first output a computed, published position pos is (its step writes
 * into the caller's buffer), or -1 (it lives in the scratch block). */
int lm_export_output_of(const loom_program *p, int pos);
/* Bytes a step's output takes. */
int64_t lm_export_step_bytes(const lm_step *s);
/* The last step that reads pos (its buffer is free after it), or def. */
int lm_export_freed_after(const lm_plan *plan, int pos, int def);

/* The C wrapper: <name>_run with the schedule inlined. */
void lm_export_write_source(const lm_export_layout *l, FILE *f);
/* <name>.h: the ABI and the inputs' and outputs' names, dtypes and shapes. */
void lm_export_write_header(const lm_export_layout *l, FILE *f);
/* The linker's version script: the symbols the library exports. */
void lm_export_write_version_script(const lm_export_layout *l, FILE *f);
/* Builds lib<name>.so and <name>.h of layout l into dir (export.c): the
 * kernels' and block functions' objects, the weights, the wrapper and the
 * header (header_text and source_text when given, else written from l). */
loom_status lm_export_build(const lm_export_layout *l, const char *dir, const char *header_text,
                            const char *source_text);
/* loom_program_export of a symbolic program (export_symbolic.c), its
 * arguments checked. */
loom_status lm_export_symbolic(const loom_program *p, const char *dir, const char *name,
                               int64_t embed_limit);
/* The weights file's header: magic, data bytes, FNV-1a 64 of the data. */
#define LM_EXPORT_WEIGHTS_MAGIC "LOOMW001"
#define LM_EXPORT_WEIGHTS_HEADER 64

#endif
