/*
 * The prelude every CUDA source starts with: cuda_prelude.cuh then
 * cuda_philox.cuh, embedded at build time (CMakeLists.txt, embed_text) as
 * lm_cuda_prelude_text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvrtc/nvrtc_backend.h"

/* cuda_prelude.cuh and cuda_philox.cuh (generated at build time) */
extern const char lm_cuda_prelude_text[];

const char *lm_cuda_prelude(void) { return lm_cuda_prelude_text; }

loom_status lm_cuda_with_prelude(const char *body, const char *kernel, char **source, char name[36],
                                 char *err, size_t errlen) {
  size_t a = strlen(lm_cuda_prelude_text), b = strlen(body);
  snprintf(name, 36, "%s", kernel);
  if (!(*source = malloc(a + b + 1))) {
    snprintf(err, errlen, "out of memory");
    return LOOM_ERR_OOM;
  }
  memcpy(*source, lm_cuda_prelude_text, a);
  memcpy(*source + a, body, b + 1);
  return LOOM_OK;
}
