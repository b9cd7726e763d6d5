/* Compiled kernels, from the in-memory cache or a backend. */
#ifndef LOOM_RUNTIME_COMPILE_H
#define LOOM_RUNTIME_COMPILE_H

#include "ir/kernel.h"

loom_status lm_kernel_function(const lk_kernel *k, lk_fn *fn);

#endif
