/*
 * The emulated CUDA device itself (tests/support/cuda_emu*.{h,c}, the driver
 * double with FAKE_CUDA_EMULATE=1 and the emulator's NVRTC), on hand-written
 * kernels: warp shuffles exchange between the right lanes, __syncthreads
 * orders shared memory across the block, every block of a 2-d grid runs with
 * its own indices, and a shuffle that not every lane of the warp reaches
 * fails the launch instead of returning made-up values. test_cuda_gpu then
 * runs loom's own kernels on it (the cuda_gpu_emulated test).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cuda_driver.h"
#include "backends/nvrtc/nvrtc_backend.h"
#include "check.h"
#include "loom.h"

static const char SOURCE[] =
    "extern \"C\" __global__ void warp_sums(int *out) {\n"
    "  const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  int v = i;\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  out[i] = v;\n"
    "}\n"
    "extern \"C\" __global__ void block_sums(const double *in, double *out, long long n) {\n"
    "  __shared__ double part[256];\n"
    "  double s = 0;\n"
    "  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x)\n"
    "    s += in[i];\n"
    "  part[threadIdx.x] = s;\n"
    "  __syncthreads();\n"
    "  for (int w = 128; w > 0; w >>= 1) {\n"
    "    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  if (threadIdx.x == 0) out[blockIdx.x] = part[0];\n"
    "}\n"
    "extern \"C\" __global__ void grid_ids(int *out) {\n"
    "  const int block = (int)(blockIdx.y * gridDim.x + blockIdx.x);\n"
    "  out[block * blockDim.x * blockDim.y + threadIdx.y * blockDim.x + threadIdx.x] =\n"
    "      block * 1000 + (int)(threadIdx.y * 10 + threadIdx.x);\n"
    "}\n"
    "extern \"C\" __global__ void odd_lanes_return(int *out) {\n"
    "  if (threadIdx.x & 1) return;\n"
    "  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 2);\n"
    "}\n"
    "extern \"C\" __global__ void shuffle_or_barrier(int *out) {\n"
    "  if (threadIdx.x < 16)\n"
    "    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);\n"
    "  else\n"
    "    __syncthreads();\n"
    "}\n";

static const lm_cu_api *cu;
static CUstream stream;
static CUmodule module;

static CUresult launch(const char *name, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                       void **params) {
  CUfunction fn = NULL;
  CUresult r = cu->module_get_function(&fn, module, name);
  CHECK_MSG(r == 0, "%s: not in the module (%d)", name, r);
  if (r != 0) return r;
  return cu->launch_kernel(fn, gx, gy, 1, bx, by, 1, 0, stream, params, NULL);
}

static void check_warp_sums(void) {
  enum { N = 2 * 256 };
  CUdeviceptr out;
  int got[N];
  CHECK(cu->mem_alloc(&out, sizeof got) == 0);
  void *params[] = {&out, NULL};
  CHECK(launch("warp_sums", 2, 1, 256, 1, params) == 0);
  CHECK(cu->memcpy_dtoh(got, out, sizeof got, stream) == 0);
  CHECK(cu->stream_synchronize(stream) == 0);
  for (int i = 0; i < N; i++) {
    int first = i & ~31, want = 32 * first + 31 * 32 / 2; /* the warp's indices summed */
    if (got[i] != want) {
      CHECK_MSG(0, "warp_sums[%d] = %d, want %d", i, got[i], want);
      break;
    }
  }
  cu->mem_free(out);
}

static void check_block_sums(void) {
  enum { N = 5000, BLOCKS = 3 };
  static double in[N];
  double got[BLOCKS], want[BLOCKS] = {0};
  for (int i = 0; i < N; i++) {
    in[i] = i * 0.5;
    want[(i / 256) % BLOCKS] += in[i];
  }
  CUdeviceptr din, dout;
  CHECK(cu->mem_alloc(&din, sizeof in) == 0 && cu->mem_alloc(&dout, sizeof got) == 0);
  CHECK(cu->memcpy_htod(din, in, sizeof in, stream) == 0);
  long long n = N;
  void *params[] = {&din, &dout, &n, NULL};
  CHECK(launch("block_sums", BLOCKS, 1, 256, 1, params) == 0);
  CHECK(cu->memcpy_dtoh(got, dout, sizeof got, stream) == 0);
  CHECK(cu->stream_synchronize(stream) == 0);
  for (int b = 0; b < BLOCKS; b++) CHECK_NEAR(got[b], want[b], 1e-9 * want[b]);
  cu->mem_free(din), cu->mem_free(dout);
}

static void check_grid_ids(void) {
  enum { GX = 3, GY = 2, BX = 8, BY = 4, N = GX * GY * BX * BY };
  CUdeviceptr out;
  int got[N];
  CHECK(cu->mem_alloc(&out, sizeof got) == 0);
  void *params[] = {&out, NULL};
  CHECK(launch("grid_ids", GX, GY, BX, BY, params) == 0);
  CHECK(cu->memcpy_dtoh(got, out, sizeof got, stream) == 0);
  CHECK(cu->stream_synchronize(stream) == 0);
  for (int i = 0; i < N; i++) {
    int block = i / (BX * BY), t = i % (BX * BY);
    CHECK_EQ_INT(got[i], block * 1000 + (t / BX) * 10 + t % BX);
  }
  cu->mem_free(out);
}

/* On a GPU these are undefined; the emulator refuses them. */
static void check_divergence_fails(void) {
  static const char *const kernels[] = {"odd_lanes_return", "shuffle_or_barrier"};
  CUdeviceptr out;
  CHECK(cu->mem_alloc(&out, 64 * sizeof(int)) == 0);
  void *params[] = {&out, NULL};
  for (int k = 0; k < 2; k++) {
    CUresult r = launch(kernels[k], 1, 1, 64, 1, params);
    char text[128];
    CHECK_MSG(r != 0, "%s: a divergent shuffle launched", kernels[k]);
    printf("%s: %s (expected)\n", kernels[k], lm_cu_error_text(r, text, sizeof text));
  }
  cu->mem_free(out);
}

int main(void) {
  char why[512];
  if (!lm_cu_ready(why, sizeof why)) {
    CHECK_MSG(0, "no device: %s", why);
    return check_report();
  }
  const lm_cu_device *dev = lm_cu_device_at(0);
  CHECK_MSG(strncmp(dev->name, "loom emulated", 13) == 0, "not the emulated device: %s", dev->name);
  cu = lm_cu();
  CUcontext ctx = NULL;
  CHECK(cu->primary_ctx_retain(&ctx, dev->handle) == 0 && cu->ctx_set_current(ctx) == 0);
  CHECK(cu->stream_create(&stream, 0) == 0);
  char *image = NULL, log[4096];
  size_t len = 0;
  loom_status st = lm_nvrtc_compile(SOURCE, "emu_test", dev->sm, &image, &len, log, sizeof log);
  CHECK_MSG(st == LOOM_OK, "compiling: %s", log);
  if (st != LOOM_OK) return check_report();
  CHECK(cu->module_load_data(&module, image) == 0);
  free(image);
  check_warp_sums();
  check_block_sums();
  check_grid_ids();
  check_divergence_fails();
  return check_report();
}
