/* OpenBLAS as loom finds it: which library, which kernels, and the core rule
 * that corrects a detection that fell back to old kernels on a new CPU. */
#ifndef LOOM_RUNTIME_BLAS_H
#define LOOM_RUNTIME_BLAS_H

#include <stdbool.h>

/* The vector extensions that pick OpenBLAS kernels (and that the OS enables). */
typedef struct lm_cpu_flags {
  bool avx2_fma;
  bool avx512; /* F, DQ, BW and VL: what OpenBLAS's SkylakeX kernels use */
  bool avx512_bf16;
} lm_cpu_flags;

/*
 * The core loom makes OpenBLAS use when it reported `reported` on a CPU with
 * `flags`, or NULL to keep it: a core older than the CPU's vector units
 * (Prescott, Core2, Nehalem, Sandybridge, the generic ones: what OpenBLAS
 * 0.3.21 falls back to on a CPU it does not know) becomes Cooperlake
 * (AVX-512 with BF16), SkylakeX (AVX-512) or Haswell (AVX2 + FMA). A core
 * matching the CPU, or a newer or another vendor's (Zen), is kept.
 */
const char *lm_blas_core_for(const char *reported, lm_cpu_flags flags);
/* The core whose kernels fit a CPU with `flags` (Cooperlake, SkylakeX or
 * Haswell), or NULL when none is better than the old ones. */
const char *lm_blas_core_fitting(lm_cpu_flags flags);

/*
 * Whether the kernels of OpenBLAS core `core` use narrower vectors than a CPU
 * with `flags` has: AVX2 kernels (Haswell, Zen) on an AVX-512 CPU, as a
 * user's OPENBLAS_CORETYPE may ask, or SSE kernels on an AVX2 one. Then
 * loom's GEMM, generated for the CPU's widest vectors, takes every F32 and
 * F64 product under LOOM_GEMM=auto (runtime/gemm.c). A core this table does
 * not know (NULL, a newer one) is taken to fit.
 */
bool lm_blas_core_narrow(const char *core, lm_cpu_flags flags);
/* lm_blas_core_narrow for the core OpenBLAS runs in this process, as chosen
 * at load. */
bool lm_blas_narrow_here(void);

/* This machine's flags (all false off x86-64). */
lm_cpu_flags lm_cpu_flags_host(void);

/* OpenBLAS on one thread: loom splits GEMMs over its own pool, and someone
 * else may have raised OpenBLAS's threads. (Every user of BLAS calls it, so
 * this file, and its constructor, are in every program that links libloom.) */
void lm_blas_single_threaded(void);

/* Has OpenBLAS pick its kernels again as for OPENBLAS_CORETYPE=core (the
 * variable restored after); true when it now reports core. Only before any BLAS
 * call is in flight: libloom's constructor, and tests. */
bool lm_blas_use_core(const char *core);

#endif
