/*
 * The scan kernel of LM_STEP_SCAN on CUDA: ops/scan/scan.cu's text (embedded
 * at build time, tools/embed_text.cmake) after the prelude.
 */
#include "ops/scan/scan_nvrtc.h"

_Static_assert(LM_CUDA_BLOCK == 256, "ops/scan/scan.cu's blocks are of 256 threads");

/* ops/scan/scan.cu's text (generated at build time) */
extern const char lm_cuda_scan_text[];

loom_status lm_cuda_scan_source(char **source, char name[36], char *err, size_t errlen) {
  return lm_cuda_with_prelude(lm_cuda_scan_text, "lm_scan_rows", source, name, err, errlen);
}
