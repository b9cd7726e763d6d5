/*
 * The sort kernel of LM_STEP_SORT on CUDA: cuda_sort.cu's text (embedded at
 * build time, tools/embed_text.cmake) after the prelude.
 */
#include "backends/nvrtc/nvrtc_backend.h"

_Static_assert(LM_CUDA_BLOCK == 256, "the sort kernel's tile is a block's threads");

/* backends/nvrtc/cuda_sort.cu's text (generated at build time) */
extern const char lm_cuda_sort_text[];

loom_status lm_cuda_sort_source(char **source, char name[36], char *err, size_t errlen) {
  return lm_cuda_with_prelude(lm_cuda_sort_text, "lm_sort_rows", source, name, err, errlen);
}
