/* Compiled code, for either device, through one pipeline: the in-memory
 * cache, the disk cache, the backend; and how long it stays loaded. */
#ifndef LOOM_RUNTIME_COMPILE_H
#define LOOM_RUNTIME_COMPILE_H

#include <stddef.h>

#include "base/cache.h"
#include "ir/kernel.h"
#include "runtime/runtime.h"

/* What a backend's load hands over: what callers run (a CPU function, the
 * CUDA backend's launchable record) and the handle its unload takes. */
typedef struct lm_loaded {
  const void *fn;
  void *handle;
} lm_loaded;

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
  /* The code in a binary, ready to run. A binary from the disk cache that
   * fails here is removed and rebuilt. */
  loom_status (*load)(void *ctx, const void *bin, size_t len, lm_loaded *out, char *err,
                      size_t errlen);
  /* Unloads what load made, once nothing holds it. */
  void (*unload)(void *handle);
} lm_code_backend;

/* Loaded code, counted: the cache holds one reference while it keeps the
 * code, each compiled program one per step that runs it; the last release
 * unloads it. So at most the cache's capacity (LOOM_JIT_MAX_KERNELS) of code
 * stays loaded beyond what live programs run. */
typedef struct lm_code lm_code;

/*
 * A reference to the code cached under memory_key, else the binary under
 * disk_key loaded, else built, stored on disk and loaded; counted in the stats
 * (kernel cache hits, disk cache hits, kernels compiled, compile time; which
 * of the first three it counted in *counted, when not NULL). When two threads
 * build the same code, one is kept. op names the call for errors. The caller
 * releases *code.
 */
loom_status lm_code_get(const char *op, lm_cache *cache, lm_hash128 memory_key, lm_hash128 disk_key,
                        const lm_code_backend *b, void *ctx, lm_code **code, lm_stat *counted);
const void *lm_code_fn(const lm_code *code);
void lm_code_release(lm_code *code); /* NULL: nothing */
/* The capacity of the code caches (LOOM_JIT_MAX_KERNELS, default 4096); the
 * graph -> program cache weighs its programs against the same number. */
size_t lm_code_cache_capacity(void);
/* A cache of code: its capacity, set on first use from the environment. */
#define LM_CODE_CACHE_INIT LM_CACHE_INIT(0, lm_code_cache_free)
void lm_code_cache_free(void *code);

/* The CPU function of kernel k (backends/llvm), with the reference that keeps
 * it loaded (*code, released by the caller). */
loom_status lm_kernel_function(const lk_kernel *k, lk_fn *fn, lm_code **code);
/* Shape-generic kernels (loom_set_dynamic; docs/kernels.md): when k's
 * shape has one for target, *out is it (out->inst malloc'd) and *sizes the
 * values it runs with (malloc'd, out->nsizes of them); else *sizes is NULL
 * and k is compiled as it is. The CPU's is generalized from k regrouped
 * (lk_kernel_regroup_dims), CUDA's from k as lowered. */
typedef enum lm_generic_target { LM_GENERIC_CPU, LM_GENERIC_CUDA } lm_generic_target;
loom_status lm_kernel_generalized(const lk_kernel *k, lm_generic_target target, lk_kernel *out,
                                  int64_t **sizes);
/* k (not empty, not generic) generalized over every extent and every size
 * constant but -1, 0 and 1, as lowered (not regrouped: regrouping reads
 * divisibility at one size), and the values it runs with at k's sizes:
 * what a symbolic export links, whatever sizes it is run at. */
loom_status lm_kernel_generic_all(const char *op, const lk_kernel *k, lk_kernel *out,
                                  int64_t **sizes);
/* The same over only those of those sizes that vary (vary[j] for the j-th
 * size lm_kernel_generic_all lifts; NULL: all): the others stay constants
 * the backend can use (a row length, a fixed stride). *sizes NULL (and out
 * untouched) when none varies: k itself serves. */
loom_status lm_kernel_generic_lifted(const char *op, const lk_kernel *k, const unsigned char *vary,
                                     lk_kernel *out, int64_t **sizes);
/* Counts a generic kernel's use (and its compile, when `how` says it was built). */
void lm_generic_counted(lm_stat how);
/* The same, or the shape-generic kernel serving k (loom_set_dynamic), and then
 * the sizes it runs with: *sizes (malloc'd; the caller frees it) is bound to
 * the slot after k's last, *nsizes of them. *sizes NULL: k's own function. */
loom_status lm_kernel_function_sized(const lk_kernel *k, lk_fn *fn, lm_code **code, int64_t **sizes,
                                     int *nsizes);
/* k's lm_kernel_generic_lifted kernel, compiled (or from the caches), and
 * the sizes it runs with at k's sizes (*sizes malloc'd, *nsizes of them;
 * NULL: k's own function): a plan template's kernels
 * (runtime/plan_template.c), which serve every size of its box. */
loom_status lm_kernel_function_lifted(const char *op, const lk_kernel *k, const unsigned char *vary,
                                      lk_fn *fn, lm_code **code, int64_t **sizes, int *nsizes);
/* The relocatable object file defining k (from the disk cache, or emitted):
 * the same code the JIT runs, for ahead-of-time export. *obj is malloc'd;
 * symbol gets the function's name ("lk_" + 32 hex digits). */
loom_status lm_kernel_object(const lk_kernel *k, char symbol[36], void **obj, size_t *len);
void lm_kernel_symbol(const lk_kernel *k, char symbol[36]);

/* The same for GEMM block functions (backends/llvm/gemm.c): the tile that
 * suits an m x n product of dtype on the host; the function of tile d (with
 * the reference keeping it loaded); the object of d and its symbol. */
void lm_gemm_tile_for(loom_dtype in_dtype, int64_t m, int64_t n, lk_gemm *tile);
/* Whether this process may use the CPU's AMX tiles: the CPU has them, the OS
 * granted them (Linux's ARCH_REQ_XCOMP_PERM, asked once) and LOOM_AMX is not
 * 0. Why not, in words, for `loom info`. */
bool lm_cpu_amx_usable(const char **why_not);
loom_status lm_gemm_function(const lk_gemm *d, lk_gemm_fn *fn, lm_code **code);
void lm_gemm_symbol(const lk_gemm *d, char symbol[36]);
loom_status lm_gemm_object(const lk_gemm *d, char symbol[36], void **obj, size_t *len);

#endif
