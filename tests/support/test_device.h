/* Where the suites make their tensors: the CPU, or LOOM_CUDA(0) with
 * LOOM_TEST_DEVICE=cuda, so that the same checks against the same reference
 * run with the ops computed on the device (on a GPU, or on the emulated one:
 * the ops_cuda_emulated and autograd_cuda_emulated tests). */
#ifndef LOOM_TESTS_TEST_DEVICE_H
#define LOOM_TESTS_TEST_DEVICE_H

#include <stdlib.h>
#include <string.h>

#include "loom.h"

static inline loom_device test_device(void) {
  const char *d = getenv("LOOM_TEST_DEVICE");
  return d && strcmp(d, "cuda") == 0 ? LOOM_CUDA(0) : LOOM_CPU;
}

#endif
