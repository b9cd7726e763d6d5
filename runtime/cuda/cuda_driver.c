/*
 * The driver through dlopen (see cuda_driver.h). Loading runs once: open the
 * library, bind every entry point, cuInit, list the devices. Whatever fails
 * first is the reason loom_cuda_unavailable_reason() gives for the life of
 * the process; the library stays open after a success.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dl.h"
#include "runtime/cuda/cuda_driver.h"

static lm_cu_api api;
static bool ready;
static char reason[1024];
static lm_cu_device devices[LM_CUDA_MAX_DEVICES];
static int ndevices;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#define BIND(lib, field, name)                                                                     \
  lm_dl_bind(lib, "the CUDA driver", name, &api.field, sizeof api.field, reason, sizeof reason)

static bool bind_all(void *lib) {
  return BIND(lib, init, "cuInit") && BIND(lib, driver_version, "cuDriverGetVersion") &&
         BIND(lib, device_count, "cuDeviceGetCount") && BIND(lib, device_get, "cuDeviceGet") &&
         BIND(lib, device_name, "cuDeviceGetName") &&
         BIND(lib, device_attribute, "cuDeviceGetAttribute") &&
         BIND(lib, device_total_mem, "cuDeviceTotalMem_v2") &&
         BIND(lib, primary_ctx_retain, "cuDevicePrimaryCtxRetain") &&
         BIND(lib, ctx_set_current, "cuCtxSetCurrent") &&
         BIND(lib, stream_create, "cuStreamCreate") &&
         BIND(lib, stream_synchronize, "cuStreamSynchronize") &&
         BIND(lib, stream_query, "cuStreamQuery") &&
         BIND(lib, mem_alloc, "cuMemAlloc_v2") && BIND(lib, mem_free, "cuMemFree_v2") &&
         BIND(lib, memcpy_htod, "cuMemcpyHtoDAsync_v2") &&
         BIND(lib, memcpy_dtoh, "cuMemcpyDtoHAsync_v2") &&
         BIND(lib, memcpy_dtod, "cuMemcpyDtoDAsync_v2") &&
         BIND(lib, memset_d8, "cuMemsetD8Async") &&
         BIND(lib, module_load_data, "cuModuleLoadData") &&
         BIND(lib, module_get_function, "cuModuleGetFunction") &&
         BIND(lib, module_unload, "cuModuleUnload") && BIND(lib, launch_kernel, "cuLaunchKernel") &&
         BIND(lib, error_name, "cuGetErrorName") && BIND(lib, error_string, "cuGetErrorString");
}

static void *open_library(void) {
  static const char *const names[] = {"libcuda.so.1"};
  return lm_dl_open("the CUDA driver", "LOOM_LIBCUDA", names, 1,
                    "no CUDA driver: libcuda.so.1 not found; install the NVIDIA driver or set "
                    "LOOM_LIBCUDA to its path",
                    reason, sizeof reason);
}

/* Names for the results loom may see before the driver can name them itself
 * (a stub's cuGetErrorName fails like everything else in it). */
static const char *known_name(CUresult r) {
  switch (r) {
  case LM_CUDA_SUCCESS: return "CUDA_SUCCESS (no error)";
  case LM_CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY (out of memory)";
  case LM_CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED (initialization error)";
  case LM_CUDA_ERROR_STUB_LIBRARY:
    return "CUDA_ERROR_STUB_LIBRARY (the driver is the toolkit's stub library, not a real "
           "driver)";
  case LM_CUDA_ERROR_INSUFFICIENT_DRIVER:
    return "CUDA_ERROR_INSUFFICIENT_DRIVER (the driver is older than the runtime needs)";
  case LM_CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE (no CUDA-capable device)";
  default: return NULL;
  }
}

const char *lm_cu_error_text(CUresult r, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  const char *known = known_name(r);
  if (known) {
    lm_dl_msg(buf, len, "%s", known);
    return buf;
  }
  if (api.error_name && api.error_name(r, &name) == 0 && name && api.error_string &&
      api.error_string(r, &text) == 0 && text)
    lm_dl_msg(buf, len, "%s (%s)", name, text);
  else
    lm_dl_msg(buf, len, "CUDA error %d", r);
  return buf;
}

loom_status lm_cu_status(CUresult r) {
  return r == LM_CUDA_ERROR_OUT_OF_MEMORY ? LOOM_ERR_OOM : LOOM_ERR_DEVICE;
}

/* Peak bandwidth from the memory clock (kHz, of a double-data-rate bus) and
 * the bus width: what the benchmarks compare against. */
static double peak_gbs(int clock_khz, int bus_bits) {
  return clock_khz > 0 && bus_bits > 0 ? 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9 : 0.0;
}

static bool describe(int i, lm_cu_device *d) {
  char msg[256];
  CUresult r = api.device_get(&d->handle, i);
  int major = 0, minor = 0, clock = 0, bus = 0;
  if (r == 0) r = api.device_name(d->name, (int)sizeof d->name, d->handle);
  if (r == 0) r = api.device_attribute(&major, LM_CU_ATTR_COMPUTE_CAPABILITY_MAJOR, d->handle);
  if (r == 0) r = api.device_attribute(&minor, LM_CU_ATTR_COMPUTE_CAPABILITY_MINOR, d->handle);
  if (r == 0)
    r = api.device_attribute(&d->multiprocessors, LM_CU_ATTR_MULTIPROCESSOR_COUNT, d->handle);
  if (r == 0) r = api.device_total_mem(&d->total_mem, d->handle);
  if (r != 0) {
    lm_dl_msg(reason, sizeof reason, "querying CUDA device %d failed: %s", i,
              lm_cu_error_text(r, msg, sizeof msg));
    return false;
  }
  /* Optional: newer drivers may not report the memory clock. */
  if (api.device_attribute(&clock, LM_CU_ATTR_MEMORY_CLOCK_RATE, d->handle) != 0) clock = 0;
  if (api.device_attribute(&bus, LM_CU_ATTR_GLOBAL_MEMORY_BUS_WIDTH, d->handle) != 0) bus = 0;
  d->name[sizeof d->name - 1] = '\0';
  d->sm = major * 10 + minor;
  d->peak_gbs = peak_gbs(clock, bus);
  return true;
}

static bool init_driver(void) {
  char msg[256];
  CUresult r = api.init(0);
  if (r != 0) {
    lm_dl_msg(reason, sizeof reason, "cuInit failed with %s", lm_cu_error_text(r, msg, sizeof msg));
    return false;
  }
  int count = 0;
  r = api.device_count(&count);
  if (r != 0) {
    lm_dl_msg(reason, sizeof reason, "cuDeviceGetCount failed with %s",
              lm_cu_error_text(r, msg, sizeof msg));
    return false;
  }
  if (count <= 0) {
    lm_dl_msg(reason, sizeof reason, "the CUDA driver found no device");
    return false;
  }
  ndevices = count < LM_CUDA_MAX_DEVICES ? count : LM_CUDA_MAX_DEVICES;
  for (int i = 0; i < ndevices; i++)
    if (!describe(i, &devices[i])) return false;
  return true;
}

static void load(void) {
  void *lib = open_library();
  if (!lib) return;
  if (!bind_all(lib) || !init_driver()) {
    ndevices = 0;
    memset(&api, 0, sizeof api);
    dlclose(lib);
    return;
  }
  ready = true; /* the library stays open for the life of the process */
}

bool lm_cu_ready(char *why, size_t whylen) {
  pthread_once(&load_once, load);
  if (!ready) lm_dl_msg(why, whylen, "%s", reason);
  return ready;
}

const lm_cu_api *lm_cu(void) { return lm_cu_ready(NULL, 0) ? &api : NULL; }

int lm_cu_device_count(void) { return lm_cu_ready(NULL, 0) ? ndevices : 0; }

const lm_cu_device *lm_cu_device_at(int index) {
  return index >= 0 && index < lm_cu_device_count() ? &devices[index] : NULL;
}
