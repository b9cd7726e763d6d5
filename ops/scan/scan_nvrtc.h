/* The scan step's CUDA kernel for NVRTC (the backends/nvrtc layer). */
#ifndef LOOM_OPS_SCAN_NVRTC_H
#define LOOM_OPS_SCAN_NVRTC_H

#include "backends/nvrtc/nvrtc_backend.h"

/*
 * CUDA C of the scan kernel of LM_STEP_SCAN (ops/scan/scan.cu):
 *   extern "C" __global__ void lm_scan_rows(long long phase, void *out,
 *       const void *src, unsigned long long *partial, long long n,
 *       long long inner, long long outer, long long parts, long long dtype,
 *       long long reverse)
 * (src and out [outer, n, inner] of loom_dtype `dtype`: F32, F64 or I64,
 * scanned along n; partial [outer * inner * parts] 64-bit totals where parts
 * > 1: phase 0 writes them, phase 1 the sums); launched with LM_CUDA_BLOCK
 * threads and any grid (blocks stride over the work). As
 * backends/nvrtc's lm_cuda_attention_source otherwise.
 */
loom_status lm_cuda_scan_source(char **source, char name[36], char *err, size_t errlen);

#endif
