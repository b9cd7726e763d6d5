/* The scan step (LM_STEP_SCAN) on a CUDA device: its row of
 * runtime/cuda/cuda_exec.c's step kinds (ops/scan/scan_cuda.c). */
#ifndef LOOM_OPS_SCAN_CUDA_H
#define LOOM_OPS_SCAN_CUDA_H

#include "runtime/cuda/cuda_internal.h"

extern const lm_cuda_step_kind lm_scan_cuda_kind;

#endif
