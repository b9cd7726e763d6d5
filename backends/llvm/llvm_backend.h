/*
 * The LLVM CPU backend: compiles an lk_kernel (ir/kernel.h) to native code and
 * loads it into one ORC LLJIT per process.
 *
 * Generated code assumes that distinct slots do not overlap in memory, except
 * that an input slot may be the output buffer itself when every point reads
 * exactly the element it writes (an in-place elementwise update).
 *
 * Environment: LOOM_DEBUG=1 prints each kernel's listing and optimized LLVM IR
 * to stderr; LOOM_DUMP=dir writes dir/<symbol>.txt (listing), .ll (optimized
 * IR) and .s (assembly).
 */
#ifndef LOOM_BACKENDS_LLVM_BACKEND_H
#define LOOM_BACKENDS_LLVM_BACKEND_H

#include <stddef.h>

#include "ir/kernel.h"
#include "loom.h"

/* Compiles a kernel to a callable function named lk_<32 hex digits of its
 * hash>. Thread-safe; the LLJIT is created on first use. Compiling a kernel
 * that is already loaded returns the loaded function. The function stays
 * loaded until lm_llvm_shutdown (tests use this; the runtime loads objects
 * with holders, below). On failure returns LOOM_ERR_COMPILE (or LOOM_ERR_OOM)
 * with a message in err. */
loom_status lm_llvm_compile(const lk_kernel *k, lk_fn *out_fn, char *err, size_t errlen);

/* The symbol lm_llvm_compile gives k: "lk_" + 32 hex digits; buf needs 36 bytes. */
void lm_llvm_symbol_name(const lk_kernel *k, char buf[36]);

/* Compiles k to a relocatable object file defining `symbol` (an lk_fn).
 * *obj is malloc'd; the caller frees it. */
loom_status lm_llvm_emit_object(const lk_kernel *k, const char *symbol, void **obj, size_t *objlen,
                                char *err, size_t errlen);

/* A loaded object, counted: each load of its symbol is one more holder, and
 * the last lm_llvm_release unloads it (its code and data leave the JIT's
 * memory; a later load of the symbol loads the object again). */
typedef struct lm_llvm_object lm_llvm_object;

/* Loads an object made by lm_llvm_emit_object and looks up `symbol` in it. When
 * `symbol` is already loaded, returns that function without loading obj. The
 * caller becomes a holder: *held (when held is not NULL) is what it releases;
 * with held NULL the object stays loaded until lm_llvm_shutdown. */
loom_status lm_llvm_load_object(const void *obj, size_t objlen, const char *symbol, lk_fn *out_fn,
                                lm_llvm_object **held, char *err, size_t errlen);
/* Drops one holder (NULL: nothing); the last one unloads the object (true
 * then). The caller no longer calls its function. */
bool lm_llvm_release(lm_llvm_object *o);
/* Objects loaded now. */
size_t lm_llvm_objects_loaded(void);

/* GEMM block functions (ir/kernel.h's lk_gemm): the tiles that fit the
 * host's registers for operands of in_dtype (F32, F64; BF16 and F16 with F32
 * sums, widened as they are packed), with each one's speed on a large
 * product relative to the first. With pairs, BF16 gets the one tile that
 * multiplies term pairs natively where the host can: AMX's when amx (the
 * caller has the OS's leave to use the tiles) and the host has them, else
 * AVX512-BF16's pair products. Then: the tile an m x n product wastes least
 * on; the symbol ("lg_" + 32 hex digits); the object defining it (*obj
 * malloc'd). Load it with lm_llvm_load_object and call it as an lk_gemm_fn. */
#define LM_GEMM_MAX_TILES 4
int lm_llvm_gemm_tiles(loom_dtype in_dtype, bool pairs, bool amx, lk_gemm out[LM_GEMM_MAX_TILES],
                       double speed[]);
void lm_llvm_gemm_tile(loom_dtype in_dtype, bool amx, int64_t m, int64_t n, lk_gemm *out);
/* The host CPU has AMX tiles with BF16 products (whether the OS lets a
 * process use them is the runtime's question); AVX512-BF16's pair products. */
bool lm_llvm_has_amx_bf16(void);
bool lm_llvm_has_avx512_bf16(void);
void lm_llvm_gemm_symbol_name(const lk_gemm *d, char buf[36]);
loom_status lm_llvm_emit_gemm_object(const lk_gemm *d, const char *symbol, void **obj,
                                     size_t *objlen, char *err, size_t errlen);

/* "llvm-14.0.6/<triple>/<cpu>/<features>/cg<LOOM_CODEGEN_ID>": everything that
 * changes the generated code, for cache keys (LOOM_CODEGEN_ID: a hash of the
 * code generators' sources, which CMake computes). */
const char *lm_llvm_target_id(void);

/* Frees the JIT and every function it loaded (for leak checkers at exit). Safe
 * to call twice; a later compile starts a new JIT. */
void lm_llvm_shutdown(void);

#endif
