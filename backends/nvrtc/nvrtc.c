/*
 * NVRTC through dlopen: libloom never links it, so it loads and runs where no
 * CUDA toolkit is installed. The library is opened once (pthread_once); NVRTC
 * programs are independent objects, so compiles may run on several threads.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvrtc/nvrtc_backend.h"
#include "base/dl.h"

/* NVRTC's C API, declared here so that building needs no CUDA headers.
 * nvrtcResult is an enum: 0 is NVRTC_SUCCESS. */
typedef struct nvrtc_api {
  int (*create)(void **prog, const char *src, const char *name, int nheaders,
                const char *const *headers, const char *const *include_names);
  int (*destroy)(void **prog);
  int (*compile)(void *prog, int nopts, const char *const *opts);
  int (*log_size)(void *prog, size_t *size);
  int (*log)(void *prog, char *log);
  int (*ptx_size)(void *prog, size_t *size);
  int (*ptx)(void *prog, char *ptx);
  int (*cubin_size)(void *prog, size_t *size);
  int (*cubin)(void *prog, char *cubin);
  const char *(*error_string)(int result);
  int (*version)(int *major, int *minor);
} nvrtc_api;

static nvrtc_api api;
static bool loaded;
static char load_error[1024];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#define BIND(lib, field, name)                                                                     \
  lm_dl_bind(lib, "NVRTC", name, &api.field, sizeof api.field, load_error, sizeof load_error)

static bool bind_all(void *lib) {
  return BIND(lib, create, "nvrtcCreateProgram") && BIND(lib, destroy, "nvrtcDestroyProgram") &&
         BIND(lib, compile, "nvrtcCompileProgram") &&
         BIND(lib, log_size, "nvrtcGetProgramLogSize") && BIND(lib, log, "nvrtcGetProgramLog") &&
         BIND(lib, ptx_size, "nvrtcGetPTXSize") && BIND(lib, ptx, "nvrtcGetPTX") &&
         BIND(lib, cubin_size, "nvrtcGetCUBINSize") && BIND(lib, cubin, "nvrtcGetCUBIN") &&
         BIND(lib, error_string, "nvrtcGetErrorString") && BIND(lib, version, "nvrtcVersion");
}

/* Tries LOOM_NVRTC, then the sonames of the releases known to work, then the
 * toolkit's default location (not always on the loader's path). */
static void *open_library(void) {
  static const char *const names[] = {
      "libnvrtc.so.13",
      "libnvrtc.so.12",
      "libnvrtc.so",
      "/usr/local/cuda/lib64/libnvrtc.so.13",
      "/usr/local/cuda/lib64/libnvrtc.so.12",
      "/usr/local/cuda/lib64/libnvrtc.so",
  };
  return lm_dl_open("NVRTC", "LOOM_NVRTC", names, sizeof names / sizeof names[0],
                    "NVRTC not found: tried libnvrtc.so.13, .so.12, libnvrtc.so and "
                    "/usr/local/cuda/lib64; install the CUDA toolkit or set LOOM_NVRTC to the "
                    "library's path",
                    load_error, sizeof load_error);
}

static void load(void) {
  void *lib = open_library();
  if (!lib) return;
  if (!bind_all(lib)) {
    dlclose(lib);
    return;
  }
  loaded = true; /* the library stays open for the life of the process */
}

bool lm_nvrtc_available(char *why, size_t whylen) {
  pthread_once(&load_once, load);
  if (!loaded) lm_dl_msg(why, whylen, "%s", load_error);
  return loaded;
}

bool lm_nvrtc_version(int *major, int *minor) {
  if (!lm_nvrtc_available(NULL, 0)) return false;
  return api.version(major, minor) == 0;
}

/* ------------------------------------------------------------------ compiling */

/* NVRTC's log into log (truncated to fit). */
static void copy_log(void *prog, char *log, size_t loglen) {
  size_t n = 0;
  if (!log || loglen == 0) return;
  log[0] = '\0';
  if (api.log_size(prog, &n) != 0 || n == 0) return;
  char *text = malloc(n);
  if (!text) return;
  if (api.log(prog, text) == 0) lm_dl_msg(log, loglen, "%s", text);
  free(text);
}

/* The compiled code (cubin, or PTX) out of a compiled program. */
static loom_status take_output(void *prog, bool ptx, const char *name, char **out, size_t *len,
                               char *log, size_t loglen) {
  size_t n = 0;
  int r = ptx ? api.ptx_size(prog, &n) : api.cubin_size(prog, &n);
  if (r != 0 || n == 0) {
    lm_dl_msg(log, loglen, "%s: NVRTC returned no %s: %s", name, ptx ? "PTX" : "cubin",
              api.error_string(r));
    return LOOM_ERR_COMPILE;
  }
  char *buf = malloc(n);
  if (!buf) {
    lm_dl_msg(log, loglen, "%s: out of memory for %zu bytes of compiled code", name, n);
    return LOOM_ERR_OOM;
  }
  r = ptx ? api.ptx(prog, buf) : api.cubin(prog, buf);
  if (r != 0) {
    free(buf);
    lm_dl_msg(log, loglen, "%s: reading the compiled code failed: %s", name, api.error_string(r));
    return LOOM_ERR_COMPILE;
  }
  *out = buf;
  *len = ptx ? strlen(buf) : n;
  return LOOM_OK;
}

/*
 * Options: C++17 for the prelude; --fmad=false because the CPU kernels never
 * contract a * b + c into an fma, and contraction would change results.
 * -prec-div, -prec-sqrt and denormals are NVRTC's IEEE defaults.
 */
static loom_status compile(const char *source, const char *name, int sm, bool ptx, char **out,
                           size_t *len, char *log, size_t loglen) {
  *out = NULL;
  *len = 0;
  char why[1024];
  if (!lm_nvrtc_available(why, sizeof why)) {
    lm_dl_msg(log, loglen, "%s", why);
    return LOOM_ERR_DEVICE;
  }
  if (sm < 10 || sm > 999) {
    lm_dl_msg(log, loglen, "%s: compute capability %d is not of the form 80 (sm_80)", name, sm);
    return LOOM_ERR_VALUE;
  }
  char arch[64];
  snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", sm);
  const char *opts[] = {arch, "--std=c++17", "--fmad=false"};
  void *prog = NULL;
  int r = api.create(&prog, source, name, 0, NULL, NULL);
  if (r != 0) {
    lm_dl_msg(log, loglen, "%s: nvrtcCreateProgram failed: %s", name, api.error_string(r));
    return r == 1 ? LOOM_ERR_OOM : LOOM_ERR_COMPILE; /* 1: NVRTC_ERROR_OUT_OF_MEMORY */
  }
  loom_status st = LOOM_OK;
  r = api.compile(prog, (int)(sizeof opts / sizeof opts[0]), opts);
  if (r != 0) {
    copy_log(prog, log, loglen);
    if (log && loglen && !log[0])
      lm_dl_msg(log, loglen, "%s: %s (no log)", name, api.error_string(r));
    st = LOOM_ERR_COMPILE;
  } else {
    st = take_output(prog, ptx, name, out, len, log, loglen);
  }
  api.destroy(&prog);
  return st;
}

loom_status lm_nvrtc_compile(const char *source, const char *name, int sm, char **binary,
                             size_t *len, char *log, size_t loglen) {
  return compile(source, name, sm, false, binary, len, log, loglen);
}

loom_status lm_nvrtc_compile_ptx(const char *source, const char *name, int sm, char **ptx,
                                 size_t *len, char *log, size_t loglen) {
  return compile(source, name, sm, true, ptx, len, log, loglen);
}
