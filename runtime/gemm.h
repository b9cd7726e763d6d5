/* Running GEMM steps on the CPU. */
#ifndef LOOM_RUNTIME_GEMM_H
#define LOOM_RUNTIME_GEMM_H

#include "passes/passes.h"

void lm_run_gemm(const lm_gemm *g, const void *a, const void *b, void *c);

#endif
