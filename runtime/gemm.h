/* Running GEMM steps on the CPU, through loom's own GEMM and OpenBLAS
 * (runtime/gemm.c). */
#ifndef LOOM_RUNTIME_GEMM_H
#define LOOM_RUNTIME_GEMM_H

#include "passes/passes.h"

/* The whole product into c, contiguous [batch.., M, N]. */
void lm_run_gemm(const lm_gemm *g, const void *a, const void *b, void *c);
/* Rows [r0, r1) of batch `batch` (row-major index over the batch dims) into c,
 * which holds (r1 - r0) rows of N. */
void lm_run_gemm_rows(const lm_gemm *g, const void *a, const void *b, int64_t batch, int64_t r0,
                      int64_t r1, void *c);
/* The product (one batch) when B is not in memory: fill(ctx, c0, c1, dst)
 * writes columns [c0, c1) of B's stored matrix (K x N, or N x K when g reads
 * it transposed) to dst, row-major with rows of c1 - c0. It is called from
 * pool threads, a block small enough to stay in cache at a time, each block
 * followed by its share of the product. Transposed, blocks are parts of the
 * sums: each thread adds its blocks in order and the threads' partial sums
 * are added in thread order, so the bits depend only on the thread count. */
typedef void (*lm_gemm_fill)(void *ctx, int64_t c0, int64_t c1, void *dst);
loom_status lm_run_gemm_filled(const lm_gemm *g, const void *a, lm_gemm_fill fill, void *ctx,
                               void *c);
int64_t lm_gemm_batches(const lm_gemm *g);
/* Whether g's product can read B from its image (g->win, loom's own GEMM),
 * and that product (runtime/gemm_windows.c): a = A's buffer, x = the image's. */
bool lm_gemm_windows_usable(const lm_gemm *g);
loom_status lm_run_gemm_windows(const lm_gemm *g, const void *a, const void *x, void *c);
/* Chooses between loom's own GEMM and BLAS for g and fills in g->fn, g->tile
 * (the tile g's M x N suits) and g->fn_for_all, compiling loom's if need be
 * (*code: the reference keeping g->fn loaded, NULL with BLAS only). By
 * default (LOOM_GEMM=auto) loom's computes the blocks it was measured faster
 * on (runtime/gemm.c loom_takes) and BLAS the rest; LOOM_GEMM=loom or blas
 * forces one for every block. */
typedef struct lm_code lm_code;
loom_status lm_gemm_prepare(lm_gemm *g, lm_code **code);
/* The limits lm_gemm_blocking clamps to for tile t (from the caches): kc's
 * (a paired tile's sum splits evenly into blocks of at most kb), mc's (a
 * paired tile's from the bytes of `room` and kc), nc's. Exported wrappers
 * block at run time from these (io/export_source.c). */
void lm_gemm_block_limits(const lk_gemm *t, int64_t *kb, int64_t *mb, int64_t *nb, int64_t *room);
/* The blocking loom's GEMM uses for an m x n x k product with tile t (from
 * the caches this machine reports), and the element strides of g's A and B. */
void lm_gemm_blocking(const lk_gemm *t, int64_t m, int64_t n, int64_t k, int64_t *mc, int64_t *kc,
                      int64_t *nc);
void lm_gemm_strides(const lm_gemm *g, int64_t *a_row, int64_t *a_col, int64_t *b_row,
                     int64_t *b_col);
/* Element offsets of batch `index`'s A and B matrices in their buffers. */
void lm_gemm_batch_offsets(const lm_gemm *g, int64_t index, int64_t *ao, int64_t *bo);

#endif
