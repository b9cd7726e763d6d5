/*
 * The GEMM kernel of LM_STEP_GEMM on CUDA: cuda_gemm.cu's text (embedded at
 * build time, tools/embed_text.cmake), then the one kernel of a dtype and
 * layout it asks for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvrtc/nvrtc_backend.h"

_Static_assert(LM_CUDA_BLOCK == 256 && LM_CUDA_GEMM_TILE == 64,
               "cuda_gemm.cu's blocks are of 256 threads, its tiles 64 x 64");

/* backends/nvrtc/cuda_gemm.cu's text (generated at build time) */
extern const char lm_cuda_gemm_text[];

const char *lm_cuda_gemm_tile_source(void) { return lm_cuda_gemm_text; }

loom_status lm_cuda_gemm_source(loom_dtype dtype, bool a_trans, bool b_trans, char **source,
                                char name[40], char *err, size_t errlen) {
  *source = NULL;
  if (dtype != LOOM_F32 && dtype != LOOM_F64) {
    snprintf(err, errlen, "CUDA GEMM: dtype %s is not F32 or F64", loom_dtype_name(dtype));
    return LOOM_ERR_DTYPE;
  }
  snprintf(name, 40, "lm_gemm_%s_%c%c", loom_dtype_name(dtype), a_trans ? 't' : 'n',
           b_trans ? 't' : 'n');
  static const char kernel[] = "\nLM_GEMM_KERNEL(%s, %s, %s, %s)\n";
  const char *t = lm_dtype_info_of(dtype)->cuda_type, *at = a_trans ? "true" : "false",
             *bt = b_trans ? "true" : "false";
  size_t pre = strlen(lm_cuda_gemm_text);
  int n = snprintf(NULL, 0, kernel, name, t, at, bt);
  char *s = n > 0 ? malloc(pre + (size_t)n + 1) : NULL;
  if (!s) {
    snprintf(err, errlen, "CUDA GEMM %s: out of memory", name);
    return LOOM_ERR_OOM;
  }
  memcpy(s, lm_cuda_gemm_text, pre);
  snprintf(s + pre, (size_t)n + 1, kernel, name, t, at, bt);
  *source = s;
  return LOOM_OK;
}
