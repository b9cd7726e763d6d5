/* Compiled code, for either device, through one pipeline: the in-memory
 * cache, the disk cache, the backend. */
#ifndef LOOM_RUNTIME_COMPILE_H
#define LOOM_RUNTIME_COMPILE_H

#include <stddef.h>

#include "ir/kernel.h"
#include "runtime/cache.h"

/*
 * What a backend contributes to the pipeline. Each callback gets the caller's
 * ctx and, on failure, leaves a message naming what failed in err (the
 * pipeline records it as the error).
 */
typedef struct lm_code_backend {
  /* Run once an in-memory lookup missed, before anything else (may be NULL):
   * the CUDA generator makes its source and launch shape here. */
  loom_status (*prepare)(void *ctx, char *err, size_t errlen);
  /* The binary: an object file, a cubin (*bin malloc'd). */
  loom_status (*build)(void *ctx, void **bin, size_t *len, char *err, size_t errlen);
  /* The code in a binary, ready to run (*code: what the cache keeps). A
   * binary from the disk cache that fails here is removed and rebuilt. */
  loom_status (*load)(void *ctx, const void *bin, size_t len, void **code, char *err,
                      size_t errlen);
  /* Frees code that did not make it into the cache (may be NULL). */
  void (*discard)(void *code);
} lm_code_backend;

/*
 * The code cached under memory_key, else the binary under disk_key loaded,
 * else built, stored on disk and loaded; counted in the stats (kernel cache
 * hits, disk cache hits, kernels compiled, compile time). When two threads
 * build the same code, one is kept. op names the call for errors.
 */
loom_status lm_code_get(const char *op, lm_cache *cache, lm_hash128 memory_key, lm_hash128 disk_key,
                        const lm_code_backend *b, void *ctx, const void **code);

/* The CPU function of kernel k (backends/llvm). */
loom_status lm_kernel_function(const lk_kernel *k, lk_fn *fn);
/* The relocatable object file defining k (from the disk cache, or emitted):
 * the same code the JIT runs, for ahead-of-time export. *obj is malloc'd;
 * symbol gets the function's name ("lk_" + 32 hex digits). */
loom_status lm_kernel_object(const lk_kernel *k, char symbol[36], void **obj, size_t *len);

/* The same for GEMM block functions (backends/llvm/gemm.c): of dtype, with
 * the tile that fits the host (*d); that tile and its symbol; the object of d. */
loom_status lm_gemm_function(loom_dtype dtype, lk_gemm *d, lk_gemm_fn *fn);
void lm_gemm_tile_name(loom_dtype dtype, lk_gemm *d, char symbol[36]);
loom_status lm_gemm_object(const lk_gemm *d, char symbol[36], void **obj, size_t *len);

#endif
