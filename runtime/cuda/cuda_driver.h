/*
 * The CUDA driver API, opened with dlopen: libloom never links libcuda, so it
 * loads and runs where there is no driver or GPU. The few types and entry
 * points loom uses are declared here, so building needs no CUDA headers.
 *
 * The library is libcuda.so.1 (LOOM_LIBCUDA=path overrides it: tests point it
 * at the toolkit's stub or at tests/support/fake_cuda.c). It is opened and
 * cuInit is called once per process (pthread_once); lm_cu_ready says whether
 * that gave a usable driver with at least one device, and if not, why.
 */
#ifndef LOOM_RUNTIME_CUDA_CUDA_DRIVER_H
#define LOOM_RUNTIME_CUDA_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "loom.h"

typedef int CUresult; /* 0 is CUDA_SUCCESS */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef unsigned long long CUdeviceptr;

/* The result codes loom tells apart (driver_types.h's values). */
enum {
  LM_CUDA_SUCCESS = 0,
  LM_CUDA_ERROR_OUT_OF_MEMORY = 2,
  LM_CUDA_ERROR_NOT_INITIALIZED = 3,
  LM_CUDA_ERROR_STUB_LIBRARY = 34,
  LM_CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
  LM_CUDA_ERROR_NO_DEVICE = 100
};

/* Device attributes loom reads (CUdevice_attribute values). */
enum {
  LM_CU_ATTR_MULTIPROCESSOR_COUNT = 16,
  LM_CU_ATTR_MEMORY_CLOCK_RATE = 36,       /* kHz */
  LM_CU_ATTR_GLOBAL_MEMORY_BUS_WIDTH = 37, /* bits */
  LM_CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
  LM_CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76
};

#define LM_CU_STREAM_NON_BLOCKING 1u

/* Devices loom uses at most (the rest are not listed). */
#define LM_CUDA_MAX_DEVICES 16

typedef struct lm_cu_api {
  CUresult (*init)(unsigned flags);
  CUresult (*driver_version)(int *version);
  CUresult (*device_count)(int *count);
  CUresult (*device_get)(CUdevice *dev, int ordinal);
  CUresult (*device_name)(char *name, int len, CUdevice dev);
  CUresult (*device_attribute)(int *value, int attribute, CUdevice dev);
  CUresult (*device_total_mem)(size_t *bytes, CUdevice dev);
  CUresult (*primary_ctx_retain)(CUcontext *ctx, CUdevice dev);
  CUresult (*ctx_set_current)(CUcontext ctx);
  CUresult (*stream_create)(CUstream *stream, unsigned flags);
  CUresult (*stream_synchronize)(CUstream stream);
  CUresult (*stream_query)(CUstream stream); /* CUDA_SUCCESS: done; 600: not yet */
  CUresult (*mem_alloc)(CUdeviceptr *ptr, size_t bytes);
  CUresult (*mem_free)(CUdeviceptr ptr);
  CUresult (*memcpy_htod)(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
  CUresult (*memcpy_dtoh)(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*memcpy_dtod)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*memset_d8)(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream);
  CUresult (*module_load_data)(CUmodule *module, const void *image);
  CUresult (*module_get_function)(CUfunction *fn, CUmodule module, const char *name);
  CUresult (*module_unload)(CUmodule module);
  CUresult (*launch_kernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shared_bytes, CUstream stream,
                            void **params, void **extra);
  CUresult (*error_name)(CUresult r, const char **name);
  CUresult (*error_string)(CUresult r, const char **text);
} lm_cu_api;

/* One device as found at start-up. */
typedef struct lm_cu_device {
  CUdevice handle;
  char name[128];
  int sm; /* compute capability as 90 for 9.0 */
  int multiprocessors;
  size_t total_mem;
  double peak_gbs; /* from the memory clock and bus width; 0 when unknown */
} lm_cu_device;

/* The entry points, once lm_cu_ready returned true (NULL before). */
const lm_cu_api *lm_cu(void);
/* Whether the driver loaded, initialized and has a device; else why (into
 * why). Loads on the first call. */
bool lm_cu_ready(char *why, size_t whylen);
int lm_cu_device_count(void);
/* Device `index` (0 <= index < count), or NULL. */
const lm_cu_device *lm_cu_device_at(int index);
/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for r: names from the driver,
 * or from loom's table when the driver cannot say (a stub). */
const char *lm_cu_error_text(CUresult r, char *buf, size_t len);
/* loom's status for a driver result: OOM for CUDA_ERROR_OUT_OF_MEMORY,
 * else LOOM_ERR_DEVICE. */
loom_status lm_cu_status(CUresult r);

#endif
