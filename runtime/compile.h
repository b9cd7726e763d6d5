/* Compiled kernels, from the in-memory cache or a backend. */
#ifndef LOOM_RUNTIME_COMPILE_H
#define LOOM_RUNTIME_COMPILE_H

#include "ir/kernel.h"

loom_status lm_kernel_function(const lk_kernel *k, lk_fn *fn);
/* The relocatable object file defining k (from the disk cache, or emitted):
 * the same code the JIT runs, for ahead-of-time export. *obj is malloc'd;
 * symbol gets the function's name ("lk_" + 32 hex digits). */
loom_status lm_kernel_object(const lk_kernel *k, char symbol[36], void **obj, size_t *len);

#endif
