/*
 * The fused attention kernels of LM_STEP_ATTENTION on CUDA: cuda_attention.cu
 * (forward) and cuda_attention_grad.cu (backward), embedded at build time
 * (tools/embed_text.cmake), after the prelude.
 */
#include "backends/nvrtc/nvrtc_backend.h"

_Static_assert(LM_CUDA_BLOCK == 256, "the attention kernels run 8 warps a block");

/* backends/nvrtc/cuda_attention.cu's and cuda_attention_grad.cu's text
 * (generated at build time) */
extern const char lm_cuda_attention_text[], lm_cuda_attention_grad_text[];

loom_status lm_cuda_attention_source(char **source, char name[36], char *err, size_t errlen) {
  return lm_cuda_with_prelude(lm_cuda_attention_text, "lm_attention_f32", source, name, err,
                              errlen);
}

loom_status lm_cuda_attention_grad_source(char **source, char name[36], char *err, size_t errlen) {
  return lm_cuda_with_prelude(lm_cuda_attention_grad_text, "lm_attention_grad_f32", source, name,
                              err, errlen);
}
