/* The thread pool kernels run on: a range split into contiguous parts, one
 * per thread, the calling thread taking part too. */
#ifndef LOOM_RUNTIME_POOL_H
#define LOOM_RUNTIME_POOL_H

#include <stdint.h>

typedef void (*lm_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) in `parts` contiguous ranges (part p is
 * [n*p/parts, n*(p+1)/parts)), in parallel where the pool is free; returns
 * when all are done. The split depends only on n and parts, never on timing. */
void lm_parallel_for(int64_t n, int parts, lm_range_fn fn, void *ctx);

#endif
