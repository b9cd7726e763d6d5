/* Shared by the CUDA runtime's files (memory, execution, the library ops'
 * CUDA runners in ops/<op>/<op>_cuda.c): not for the rest of loom, which
 * goes through runtime/cuda.h. */
#ifndef LOOM_RUNTIME_CUDA_CUDA_INTERNAL_H
#define LOOM_RUNTIME_CUDA_CUDA_INTERNAL_H

#include <stdint.h>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/exec.h"

struct lm_code;

/* Makes device dev's context current on this thread (creating its context
 * and stream on first use) and gives its stream. Records an error naming op
 * when the device is missing or the driver fails. */
loom_status lm_cuda_enter(const char *op, int dev, CUstream *stream);

/* How a CUDA device runs a kind of step (cuda_exec.c's table, indexed by
 * lm_step_kind): its runner, and the code it compiles for the step, setting
 * s->code (NULL: none; vary: the sizes a plan template's kernel reads at run
 * time). */
typedef struct lm_cuda_step_kind {
  loom_status (*run)(const lm_exec *x, const lm_step *s);
  loom_status (*code)(const lm_plan *p, lm_step *s, int dev, const unsigned char *vary);
} lm_cuda_step_kind;

/* A library step's kernel source (backends/nvrtc's lm_cuda_<op>_source). */
typedef loom_status (*lm_cuda_library_source)(char **source, char name[36], char *err,
                                              size_t errlen);
/* Finds or compiles (through the caches) the library kernel `name` made by
 * make, for device dev, into *code. */
loom_status lm_cuda_library_code(int dev, const char *name, lm_cuda_library_source make,
                                 struct lm_code **code);
/* Launches step s's device code with `grid` blocks of LM_CUDA_BLOCK threads
 * on its device's stream, each value a parameter (8 bytes). */
loom_status lm_cuda_launch_step(const lm_exec *x, const lm_step *s, unsigned grid, uint64_t *values,
                                int nvalues);
/* Blocks for `items` work items of LM_CUDA_BLOCK threads: at most a few
 * waves per multiprocessor (the kernels stride over the rest). */
unsigned lm_cuda_grid_for(const lm_exec *x, int64_t items);
/* A device pointer as a kernel parameter. */
static inline uint64_t lm_cuda_ptr(const void *p) { return (uint64_t)(uintptr_t)p; }

#endif
