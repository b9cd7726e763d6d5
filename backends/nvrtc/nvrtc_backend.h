/*
 * The CUDA backend: kernel descriptions (ir/kernel.h) printed as CUDA C, and
 * NVRTC to compile them (kernel description -> source -> binary, as
 * backends/llvm does for the CPU). The same lk_kernel the LLVM backend
 * compiles for the CPU; one description, two code generators.
 *
 * Nothing here links against CUDA: NVRTC is opened with dlopen on first use
 * (libnvrtc.so.13, .so.12, libnvrtc.so, then the same names under
 * /usr/local/cuda/lib64; LOOM_NVRTC=path overrides), so libloom builds, links
 * and runs on machines without a GPU, a driver or the toolkit.
 *
 * Running them (the driver, device memory, launches, programs) is the
 * runtime's: runtime/cuda/, behind runtime/cuda.h.
 */
#ifndef LOOM_BACKENDS_NVRTC_BACKEND_H
#define LOOM_BACKENDS_NVRTC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/kernel.h"
#include "loom.h"

/* Threads per block of every generated kernel (its __launch_bounds__). */
#define LM_CUDA_BLOCK 256
/* A shape-generic kernel's sizes ride as parameters (one long long each): at
 * most this many, so that its parameters stay within CUDA's 4 KiB. */
#define LM_CUDA_MAX_SIZES 64
/* Output points one thread computes per grid-stride step of an elementwise kernel. */
#define LM_CUDA_VEC 4

/* How a kernel spreads its output points over threads: the code differs, and
 * so does the grid a launcher should pick. */
typedef enum lm_cuda_mode {
  LM_CUDA_ELEMENTWISE, /* LM_CUDA_VEC consecutive points per thread, grid-stride */
  LM_CUDA_RED_THREAD,  /* a reduction: one thread per output point (small rows) */
  LM_CUDA_RED_WARP,    /* a reduction: one warp per output point */
  LM_CUDA_RED_BLOCK,   /* a reduction: one block per output point (long rows) */
  LM_CUDA_ROWS         /* row statistics (lk_stat): one block per row, its statistics
                          by block reductions, then its points */
} lm_cuda_mode;

typedef struct lm_cuda_launch {
  lm_cuda_mode mode;
  int block;            /* threads per block: LM_CUDA_BLOCK */
  int points_per_block; /* output points a block covers per grid-stride step: a
                           grid of ceil(points / points_per_block) blocks (or
                           fewer: every kernel loops) covers [begin, end) */
} lm_cuda_launch;

/*
 * CUDA C for kernel k: one
 *   extern "C" __global__ void <name>(void *s0, const void *s1, ...,
 *                                     long long begin, long long end)
 * computing the output points whose row-major index over the outer dims lies
 * in [begin, end), with the values of the CPU kernel (see docs/cuda.md
 * for where they may differ: math function accuracy, summation order). Slot i
 * is parameter s<i> (a device pointer; a key slot points to two uint32). A
 * shape-generic kernel (ir/kernel.h) takes its sizes by value instead of its
 * size slot: `const long long lm_z0, ...` after the slots, and a row kernel over a
 * run-time row length reports points_per_block 0 (the launch uses the row's
 * length).
 * <name> is the LLVM backend's symbol: "lk_" + 32 hex digits of the hash.
 *
 * *source is malloc'd (the caller frees it); name needs 36 bytes; launch may be
 * NULL. Returns LOOM_ERR_COMPILE (invalid kernel) or LOOM_ERR_OOM with a
 * message in err.
 */
loom_status lm_cuda_source(const lk_kernel *k, char **source, char name[36], lm_cuda_launch *launch,
                           char *err, size_t errlen);

/*
 * CUDA C of the GEMM kernel for LM_STEP_GEMM (F32 or F64; A and/or B read
 * transposed): cuda_gemm.cu's text and one
 *   extern "C" __global__ void <name>(T *c, LM_GEMM_PARAMS(T))
 * (cuda_gemm.cu: a, b, M, N, K, lda, ldb and the batch layout z0, inner,
 * sa0, sa1, sb0, sb1) computing C[M, N] = A @ B for batch index z = z0 +
 * blockIdx.z. Launch: LM_CUDA_BLOCK threads, a grid of (ceil(N /
 * LM_CUDA_GEMM_TILE), ceil(M / LM_CUDA_GEMM_TILE), batch indices) blocks.
 * name: "lm_gemm_<dtype>_<n|t><n|t>". *source is malloc'd.
 */
#define LM_CUDA_GEMM_TILE 64
/* Batch indices one launch covers (the grid's z extent). */
#define LM_CUDA_GEMM_MAX_GRID_Z 65535
loom_status lm_cuda_gemm_source(loom_dtype dtype, bool a_trans, bool b_trans, char **source,
                                char name[40], char *err, size_t errlen);
/* cuda_gemm.cu's text: lm_gemm_tile, what both GEMM kernels share. */
const char *lm_cuda_gemm_tile_source(void);

/*
 * A GEMM with its epilogue kernel k fused (a deferred GEMM, lm_step.gemm_partner):
 * k's slot gemm_slot reads the product at the point's own index. One
 *   extern "C" __global__ void <name>(void *s0, const void *s1, ...,
 *       LM_GEMM_PARAMS(T))
 * computes the product of batch index z as lm_cuda_gemm_source's kernel does
 * (cuda_gemm.cu's lm_gemm_tile) and, instead of storing it, k's value at
 * output point z * M * N + r * N + c; slot gemm_slot's pointer is not read.
 * Launched like the GEMM. name ("lf_" + 32 hex digits) needs 36 bytes.
 */
loom_status lm_cuda_gemm_epilogue_source(const lk_kernel *k, int gemm_slot, loom_dtype gemm_dtype,
                                         bool a_trans, bool b_trans, char **source, char name[36],
                                         char *err, size_t errlen);
/* Its name alone (for a cache lookup). */
void lm_cuda_gemm_epilogue_name(const lk_kernel *k, int gemm_slot, loom_dtype gemm_dtype,
                                bool a_trans, bool b_trans, char name[36]);

/* The helper functions every generated source starts with (Philox, NaN-aware
 * max/min, wrapping integer arithmetic, warp shuffles, vector chunks):
 * cuda_prelude.cuh and cuda_philox.cuh. */
const char *lm_cuda_prelude(void);

/*
 * CUDA C of the fused attention kernel of LM_STEP_ATTENTION (cuda_attention.cu):
 *   extern "C" __global__ void lm_attention_f32(float *out, const float *q,
 *       const float *k, const float *v, const void *mask, long long scale_bits,
 *       long long nbatch, tq, tk, d, dv, causal, how, mc, items,
 *       offsets o0..o3, row strides r0..r3, batch sizes n0..n5,
 *       batch strides q0..q5, k0..k5, v0..v5, m0..m5)
 * (q, k, v, mask in that order; how: 0 no mask, 1 bool, 2 added; mc the
 * mask's stride along Tk; items = batch x ceil(Tq / 8)); launched with
 * LM_CUDA_BLOCK threads and any grid. *source (the prelude, then the kernel)
 * is malloc'd; name needs 36 bytes.
 */
loom_status lm_cuda_attention_source(char **source, char name[36], char *err, size_t errlen);
/*
 * Its backward (LM_ATTENTION_GRAD, cuda_attention_grad.cu), two launches of
 * one kernel:
 *   extern "C" __global__ void lm_attention_grad_f32(long long phase,
 *       float *out, q, k, v, mask, const float *o, const float *g,
 *       float *stats, long long scale_bits, nbatch, tq, tk, d, dv, causal,
 *       how, mc, items, t, w, offsets o0..o5, row strides r0..r5, batch
 *       sizes n0..n5, batch strides of q, k, v, mask, o and g (6 each))
 * (out [batch.., 3, t, w]; stats: 2 floats per batch index and query row;
 * items = batch x ceil(t / 8)); phase 0 then phase 1, LM_CUDA_BLOCK threads.
 */
loom_status lm_cuda_attention_grad_source(char **source, char name[36], char *err, size_t errlen);

/*
 * CUDA C of the sort kernel of LM_STEP_SORT (cuda_sort.cu):
 *   extern "C" __global__ void lm_sort_rows(long long *out, const void *src,
 *       long long n, long long k, long long dtype, long long descending,
 *       long long rows)
 * (src [rows, n] of loom_dtype `dtype`, out [rows, k] int64); launched with
 * LM_CUDA_BLOCK threads and any grid (blocks stride over rows x
 * ceil(n / LM_CUDA_BLOCK) items). As lm_cuda_attention_source otherwise.
 */
loom_status lm_cuda_sort_source(char **source, char name[36], char *err, size_t errlen);
/* The prelude, then body, into *source (malloc'd); kernel's name into name. */
loom_status lm_cuda_with_prelude(const char *body, const char *kernel, char **source, char name[36],
                                 char *err, size_t errlen);

/* Whether NVRTC could be loaded; when not, why (into why, when why && whylen). */
bool lm_nvrtc_available(char *why, size_t whylen);

/* NVRTC's version (e.g. 13, 0); false when NVRTC is not available. */
bool lm_nvrtc_version(int *major, int *minor);

/*
 * Compiles CUDA C `source` (program `name`, used in messages) for compute
 * capability `sm` (80 for sm_80) into a cubin for that architecture:
 * *binary is malloc'd, *len its size. On failure returns LOOM_ERR_COMPILE
 * with NVRTC's log in log (when log && loglen), or LOOM_ERR_DEVICE when NVRTC
 * is not available (the reason in log). Thread-safe; NVRTC is loaded once.
 */
loom_status lm_nvrtc_compile(const char *source, const char *name, int sm, char **binary,
                             size_t *len, char *log, size_t loglen);

/* The same, but PTX for the virtual architecture compute_<sm> (NUL-terminated
 * text, for reading the generated code and for JIT by the driver). */
loom_status lm_nvrtc_compile_ptx(const char *source, const char *name, int sm, char **ptx,
                                 size_t *len, char *log, size_t loglen);

#endif
