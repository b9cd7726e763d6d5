/* The CUDA matmul baselines: cuBLAS on the same GPU, loaded at run time (the
 * CUDA runtime and cuBLAS from the toolkit), so the tool builds and runs
 * without them. Row-major products are computed as their transposes in
 * cuBLAS's column-major convention. Both share the device's primary context
 * with loom; the operands are the baseline's own (their values do not matter
 * for the time). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

typedef int (*cublas_create_fn)(void **handle);
typedef int (*cublas_destroy_fn)(void *handle);
typedef int (*cublas_sgemm_fn)(void *handle, int transa, int transb, int m, int n, int k,
                               const float *alpha, const float *a, int lda, const float *b, int ldb,
                               const float *beta, float *c, int ldc);
typedef int (*cuda_set_device_fn)(int device);
typedef int (*cuda_malloc_fn)(void **ptr, size_t bytes);
typedef int (*cuda_memset_fn)(void *ptr, int value, size_t bytes);
typedef int (*cuda_free_fn)(void *ptr);
typedef int (*cuda_sync_fn)(void);
typedef const char *(*cuda_error_string_fn)(int error);

enum { OP_N = 0, OP_T = 1 };

typedef struct cublas_api {
  cublas_create_fn create;
  cublas_destroy_fn destroy;
  cublas_sgemm_fn sgemm;
  cuda_set_device_fn set_device;
  cuda_malloc_fn malloc_;
  cuda_memset_fn memset_;
  cuda_free_fn free_;
  cuda_sync_fn sync;
  cuda_error_string_fn error_string; /* may be NULL */
} cublas_api;

static void *open_first(const char *const *names) {
  for (int i = 0; names[i]; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
  }
  return NULL;
}

/* The API, or NULL with why (libraries are kept open: cuBLAS keeps state). */
static const cublas_api *load(char *why, size_t size) {
  static const char *const runtime_names[] = {"libcudart.so.13",
                                              "libcudart.so.12",
                                              "libcudart.so",
                                              "/usr/local/cuda/lib64/libcudart.so.13",
                                              "/usr/local/cuda/lib64/libcudart.so.12",
                                              "/usr/local/cuda/lib64/libcudart.so",
                                              NULL};
  static const char *const cublas_names[] = {"libcublas.so.13",
                                             "libcublas.so.12",
                                             "libcublas.so",
                                             "/usr/local/cuda/lib64/libcublas.so.13",
                                             "/usr/local/cuda/lib64/libcublas.so.12",
                                             "/usr/local/cuda/lib64/libcublas.so",
                                             NULL};
  static cublas_api api;
  static bool loaded;
  if (loaded) return &api;
  void *rt = open_first(runtime_names), *cb = rt ? open_first(cublas_names) : NULL;
  if (!rt || !cb) {
    snprintf(why, size, "%s not found (tried .so.13, .so.12, .so and /usr/local/cuda/lib64)",
             rt ? "libcublas" : "libcudart");
    return NULL;
  }
  api.create = (cublas_create_fn)dlsym(cb, "cublasCreate_v2");
  api.destroy = (cublas_destroy_fn)dlsym(cb, "cublasDestroy_v2");
  api.sgemm = (cublas_sgemm_fn)dlsym(cb, "cublasSgemm_v2");
  api.set_device = (cuda_set_device_fn)dlsym(rt, "cudaSetDevice");
  api.malloc_ = (cuda_malloc_fn)dlsym(rt, "cudaMalloc");
  api.memset_ = (cuda_memset_fn)dlsym(rt, "cudaMemset");
  api.free_ = (cuda_free_fn)dlsym(rt, "cudaFree");
  api.sync = (cuda_sync_fn)dlsym(rt, "cudaDeviceSynchronize");
  api.error_string = (cuda_error_string_fn)dlsym(rt, "cudaGetErrorString");
  if (!api.create || !api.destroy || !api.sgemm || !api.set_device || !api.malloc_ ||
      !api.memset_ || !api.free_ || !api.sync) {
    snprintf(why, size,
             "a cuBLAS or CUDA runtime symbol is missing (cublasSgemm_v2, cudaMalloc, ...)");
    return NULL;
  }
  loaded = true;
  return &api;
}

typedef struct operands {
  float *a, *b, *c;
} operands;

static int alloc_operands(const cublas_api *api, int64_t m, int64_t n, int64_t k, operands *o) {
  size_t sizes[3] = {(size_t)(m * k) * sizeof(float), (size_t)(k * n) * sizeof(float),
                     (size_t)(m * n) * sizeof(float)};
  float **ptrs[3] = {&o->a, &o->b, &o->c};
  for (int i = 0; i < 3; i++) {
    int r = api->malloc_((void **)ptrs[i], sizes[i]);
    if (r == 0) r = api->memset_(*ptrs[i], 0, sizes[i]);
    if (r != 0) return r;
  }
  return 0;
}

/* C [m, n] = A [m, k] @ B, row-major, B [k, n] or (b_trans) [n, k]: in
 * column-major terms C^T = op(B) A^T. */
static int sgemm(const cublas_api *api, void *handle, int64_t m, int64_t n, int64_t k, bool b_trans,
                 const operands *o) {
  const float one = 1.0f, zero = 0.0f;
  return api->sgemm(handle, b_trans ? OP_T : OP_N, OP_N, (int)n, (int)m, (int)k, &one, o->b,
                    b_trans ? (int)k : (int)n, o->a, (int)k, &zero, o->c, (int)n);
}

double bench_cublas_gemm_seconds(int64_t m, int64_t n, int64_t k, bool b_trans, int repeats,
                                 int device) {
  char why[256] = "";
  const cublas_api *api = load(why, sizeof why);
  void *handle = NULL;
  operands o = {NULL, NULL, NULL};
  double *samples = malloc((size_t)(repeats > 0 ? repeats : 1) * sizeof *samples);
  double median = -1.0;
  int r = !api ? -1 : api->set_device(device);
  if (api && r != 0)
    snprintf(why, sizeof why, "cudaSetDevice(%d) returned %d (%s)", device, r,
             api->error_string ? api->error_string(r) : "no message");
  if (api && r == 0 && (r = api->create(&handle)) != 0)
    snprintf(why, sizeof why, "cublasCreate returned %d", r);
  if (api && r == 0 && (r = alloc_operands(api, m, n, k, &o)) != 0)
    snprintf(why, sizeof why, "cudaMalloc/cudaMemset returned %d", r);
  if (api && r == 0 && samples) {
    r = sgemm(api, handle, m, n, k, b_trans, &o); /* warm-up */
    if (r == 0) r = api->sync();
    for (int i = 0; i < repeats && r == 0; i++) {
      double t0 = bench_now();
      r = sgemm(api, handle, m, n, k, b_trans, &o);
      if (r == 0) r = api->sync();
      samples[i] = bench_now() - t0;
    }
    if (r == 0 && repeats > 0) median = bench_median(samples, repeats);
    if (r != 0) snprintf(why, sizeof why, "cublasSgemm or the synchronization returned %d", r);
  }
  if (api) {
    float *bufs[3] = {o.a, o.b, o.c};
    for (int i = 0; i < 3; i++)
      if (bufs[i]) api->free_(bufs[i]);
    if (handle) api->destroy(handle);
  }
  free(samples);
  if (median < 0) fprintf(stderr, "cuBLAS baseline not measured: %s\n", why[0] ? why : "?");
  return median;
}
