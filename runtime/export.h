/* Ahead-of-time export of a compiled program (loom_program_export), shared by
 * the driver (export.c: files, the toolchain) and the code writer
 * (export_source.c: the C wrapper and the header). */
#ifndef LOOM_RUNTIME_EXPORT_H
#define LOOM_RUNTIME_EXPORT_H

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
  bool uses_amx; /* a GEMM runs on AMX tiles: the library asks Linux for them */
} lm_export_layout;

/* Scratch offsets by liveness (the plan's frees), weight offsets, outputs,
 * the GEMM steps' block functions (named, not compiled: export.c writes them). */
loom_status lm_export_layout_make(lm_export_layout *l, const loom_program *p, const char *name,
                                  int64_t embed_limit);
void lm_export_layout_free(lm_export_layout *l);

/* The C wrapper: <name>_run with the schedule inlined. */
void lm_export_write_source(const lm_export_layout *l, FILE *f);
/* <name>.h: the ABI and the inputs' and outputs' names, dtypes and shapes. */
void lm_export_write_header(const lm_export_layout *l, FILE *f);
/* The weights file's header: magic, data bytes, FNV-1a 64 of the data. */
#define LM_EXPORT_WEIGHTS_MAGIC "LOOMW001"
#define LM_EXPORT_WEIGHTS_HEADER 64

#endif
