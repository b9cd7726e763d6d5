/*
 * ops/scan/scan.cu's kernel against the CPU's scan
 * (ops/scan/scan_cpu.c) on a GPU, without loom: the kernel compiled by nvcc
 * rather than NVRTC, launched as runtime/cuda/cuda_exec.c launches it, on a
 * few shapes, dtypes, directions and part counts. The model is llm.c's
 * dev/cuda: a kernel file and a small check against a CPU version, so that
 * the kernel can be worked on alone. tools/check_kernel_sources.sh builds it
 * on every CI machine (no GPU there); tools/gpu_check.sh runs it on a GPU.
 *
 * Built as
 *   cc -std=c11 -O2 -c ops/scan/scan_cpu.c -Dlm_scan_parts=cpu_scan_parts \
 *      -Dlm_scan_items=cpu_scan_items -Dlm_scan_sums=cpu_scan_sums \
 *      -Dlm_scan_rows=cpu_scan_rows -o scan_cpu.o
 *   nvcc -arch=sm_80 -o cuda_scan_check tests/kernels/cuda_scan_check.cu scan_cpu.o
 * (the CPU's functions renamed, as exports rename them: the kernel is
 * lm_scan_rows too). Exit status 0: every case matched.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/scan/scan.cu"

extern "C" {
int64_t cpu_scan_parts(const int64_t *num);
int64_t cpu_scan_items(const int64_t *num);
void cpu_scan_sums(void *const *args, int64_t begin, int64_t end);
void cpu_scan_rows(void *const *args, int64_t begin, int64_t end);
}

#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

enum { F32 = 0, F64 = 1, I64 = 3 }; /* loom_dtype's values, as the kernel reads them */

static size_t element_size(int dtype) { return dtype == F32 ? 4 : 8; }

/* The CPU's running sums of src ([outer, n, inner]) into out. */
static void scan_on_cpu(void *out, const void *src, int64_t outer, int64_t n, int64_t inner,
                        int dtype, int reverse) {
  int64_t num[5] = {n, inner, outer, dtype, reverse};
  uint64_t partial[128]; /* runtime/scan.h's LM_SCAN_MAX_PARTIALS */
  void *const args[] = {out, (void *)src, num, partial};
  int64_t items = cpu_scan_items(num);
  if (cpu_scan_parts(num) > 1) cpu_scan_sums(args, 0, items);
  cpu_scan_rows(args, 0, items);
}

/* The kernel's, with each chain cut into `parts` (two launches when more
 * than one), over at most 1,024 blocks so that blocks stride over items. */
static void scan_on_gpu(void *out, const void *src, int64_t outer, int64_t n, int64_t inner,
                        int dtype, int reverse, int64_t parts) {
  size_t bytes = (size_t)(outer * n * inner) * element_size(dtype);
  int64_t chains = outer * inner;
  void *d_out, *d_src;
  unsigned long long *d_partial = NULL;
  CUDA_OK(cudaMalloc(&d_out, bytes));
  CUDA_OK(cudaMalloc(&d_src, bytes));
  if (parts > 1) CUDA_OK(cudaMalloc(&d_partial, sizeof(uint64_t) * (size_t)(chains * parts)));
  CUDA_OK(cudaMemcpy(d_src, src, bytes, cudaMemcpyHostToDevice));
  int64_t items = inner == 1 ? chains * parts : (chains * parts + 255) / 256;
  unsigned int grid = (unsigned int)(items < 1024 ? items : 1024);
  for (long long phase = parts > 1 ? 0 : 1; phase < 2; phase++) {
    lm_scan_rows<<<grid, 256>>>(phase, d_out, d_src, d_partial, n, inner, outer, parts, dtype,
                                reverse);
    CUDA_OK(cudaGetLastError());
  }
  CUDA_OK(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_out));
  CUDA_OK(cudaFree(d_src));
  if (d_partial) CUDA_OK(cudaFree(d_partial));
}

/* Integers exactly (they wrap alike); floats to within their rounding: the
 * two sum the same values in double in another order. */
static int64_t mismatches(const void *gpu, const void *cpu, int64_t count, int dtype,
                          int64_t *first) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; i++) {
    bool same;
    if (dtype == I64) {
      same = ((const int64_t *)gpu)[i] == ((const int64_t *)cpu)[i];
    } else {
      double g = dtype == F32 ? ((const float *)gpu)[i] : ((const double *)gpu)[i];
      double c = dtype == F32 ? ((const float *)cpu)[i] : ((const double *)cpu)[i];
      same = fabs(g - c) <= (dtype == F32 ? 2e-6 : 1e-12) * (1 + fabs(c));
    }
    if (!same && bad++ == 0) *first = i;
  }
  return bad;
}

int main(void) {
  static const struct {
    int64_t outer, n, inner;
  } shapes[] = {{3, 5000, 1}, {1, 70000, 1}, {2, 300, 7}, {4, 1, 1}, {1, 9000, 300}};
  static const int dtypes[] = {F32, F64, I64};
  srand(42);
  int failed = 0, cases = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
      int64_t outer = shapes[s].outer, n = shapes[s].n, inner = shapes[s].inner;
      int dtype = dtypes[d];
      int64_t count = outer * n * inner;
      size_t bytes = (size_t)count * element_size(dtype);
      unsigned char *src = (unsigned char *)malloc(bytes), *cpu = (unsigned char *)malloc(bytes),
                    *gpu = (unsigned char *)malloc(bytes);
      for (int64_t i = 0; i < count; i++) {
        double v = 2.0 * rand() / RAND_MAX - 1;
        if (dtype == F32) ((float *)src)[i] = (float)v;
        if (dtype == F64) ((double *)src)[i] = v;
        if (dtype == I64) /* large enough to wrap */
          ((int64_t *)src)[i] = (int64_t)((uint64_t)rand() << 42 ^ (uint64_t)rand());
      }
      for (int reverse = 0; reverse < 2; reverse++)
        for (int64_t parts = 1; parts <= 4; parts += 3) {
          scan_on_cpu(cpu, src, outer, n, inner, dtype, reverse);
          scan_on_gpu(gpu, src, outer, n, inner, dtype, reverse, parts);
          int64_t first = -1, bad = mismatches(gpu, cpu, count, dtype, &first);
          cases++;
          if (bad) {
            failed++;
            printf("FAILED [%lld, %lld, %lld] dtype %d reverse %d parts %lld: %lld of %lld "
                   "sums differ, the first at %lld\n",
                   (long long)outer, (long long)n, (long long)inner, dtype, reverse,
                   (long long)parts, (long long)bad, (long long)count, (long long)first);
          }
        }
      free(src), free(cpu), free(gpu);
    }
  printf("cuda_scan_check: %d of %d cases match the CPU\n", cases - failed, cases);
  return failed ? 1 : 0;
}
