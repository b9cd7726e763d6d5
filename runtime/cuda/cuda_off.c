/* runtime/cuda.h in a build without the CUDA backend (-DLOOM_CUDA=OFF):
 * no device exists, and every call says so. */
#include <stdio.h>

#include "runtime/cuda.h"
#include "runtime/runtime.h"

static const char reason[] = "this loom was built without the CUDA backend (-DLOOM_CUDA=OFF)";

bool lm_cuda_ready(char *why, size_t whylen) {
  if (why && whylen) snprintf(why, whylen, "%s", reason);
  return false;
}

int lm_cuda_count(void) { return 0; }
size_t lm_cuda_modules_loaded(void) { return 0; }

static loom_status off(const char *op) { return lm_fail(LOOM_ERR_DEVICE, "%s: %s", op, reason); }

loom_status lm_cuda_alloc(const char *op, int dev, size_t bytes, void **out) {
  *out = NULL;
  return off(op);
}
void lm_cuda_free(int dev, void *ptr, size_t bytes) {}
void lm_cuda_trim(void) {}
loom_status lm_cuda_copy(const char *op, loom_device to, void *dst, loom_device from,
                         const void *src, size_t bytes) {
  return off(op);
}
loom_status lm_cuda_zero(const char *op, int dev, void *ptr, size_t bytes) { return off(op); }
loom_status lm_cuda_sync(const char *op, int dev) { return off(op); }
double lm_cuda_peak_gbs(int dev) { return 0; }
loom_status lm_cuda_exec_compile(lm_plan *p, int dev, unsigned char *const *vary) {
  return off("loom_realize");
}
int lm_cuda_max_sizes(void) { return 0; }
bool lm_nccl_available(const char **about) {
  if (about) *about = reason;
  return false;
}
bool lm_nccl_runs(const lm_collective *c) { return false; }
bool lm_nccl_has_comm(int dev, int world) { return false; }
bool lm_nccl_make_id(unsigned char *id, char *err, size_t errlen) {
  snprintf(err, errlen, "%s", reason);
  return false;
}
bool lm_nccl_join(int dev, int rank, int world, const unsigned char *id, char *err, size_t errlen) {
  return lm_nccl_make_id(NULL, err, errlen);
}
bool lm_nccl_run(int dev, const lm_collective *c, const void *const *bufs, void *out,
                 double timeout_s, char *err, size_t errlen) {
  return lm_nccl_make_id(NULL, err, errlen);
}
loom_status lm_cuda_exec_run(const lm_exec *x) { return off("loom_realize"); }
