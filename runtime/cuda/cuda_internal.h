/* Shared by the CUDA runtime's files (memory, execution): not for the rest
 * of loom, which goes through runtime/cuda.h. */
#ifndef LOOM_RUNTIME_CUDA_CUDA_INTERNAL_H
#define LOOM_RUNTIME_CUDA_CUDA_INTERNAL_H

#include "runtime/cuda/cuda_driver.h"

/* Makes device dev's context current on this thread (creating its context
 * and stream on first use) and gives its stream. Records an error naming op
 * when the device is missing or the driver fails. */
loom_status lm_cuda_enter(const char *op, int dev, CUstream *stream);

#endif
