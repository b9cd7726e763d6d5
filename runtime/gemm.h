/* Running GEMM steps on the CPU. */
#ifndef LOOM_RUNTIME_GEMM_H
#define LOOM_RUNTIME_GEMM_H

#include "passes/passes.h"

/* The whole product into c, contiguous [batch.., M, N]. */
void lm_run_gemm(const lm_gemm *g, const void *a, const void *b, void *c);
/* Rows [r0, r1) of batch `batch` (row-major index over the batch dims) into c,
 * which holds (r1 - r0) rows of N. */
void lm_run_gemm_rows(const lm_gemm *g, const void *a, const void *b, int64_t batch, int64_t r0,
                      int64_t r1, void *c);
int64_t lm_gemm_batches(const lm_gemm *g);
/* Element offsets of batch `index`'s A and B matrices in their buffers. */
void lm_gemm_batch_offsets(const lm_gemm *g, int64_t index, int64_t *ao, int64_t *bo);

#endif
