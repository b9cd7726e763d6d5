/*
 * NVRTC for the emulated device (tests only; LOOM_NVRTC points at it): the
 * C API loom uses, compiling CUDA C with the host's C++ compiler and
 * cuda_emu.h into a shared object whose bytes stand for the cubin. The driver
 * double loads such objects and runs their kernels (FAKE_CUDA_EMULATE=1).
 *
 * Options are those of NVRTC, of which the architecture is ignored; the
 * compiler contracts nothing (loom compiles with --fmad=false). Its version
 * is 99.0, so disk cache entries never mix with a real NVRTC's.
 *
 * EMU_NVRTC_CXX (default c++) names the compiler and EMU_NVRTC_OPT its
 * optimization (default -O1: -O0 compiled no faster); EMU_NVRTC_HEADER is the
 * header's path, compiled in by CMake.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
  SUCCESS = 0,
  OUT_OF_MEMORY = 1,
  INVALID_INPUT = 3,
  INVALID_PROGRAM = 4,
  COMPILATION = 6,
};

typedef struct program {
  char *source, *name, *log, *object;
  size_t object_len;
} program;

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
      fread(buf, 1, (size_t)n, f) == (size_t)n) {
    buf[n] = '\0';
    *len = (size_t)n;
  } else {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  return buf;
}

EXPORT int nvrtcCreateProgram(void **prog, const char *src, const char *name, int nheaders,
                              const char *const *headers, const char *const *names) {
  (void)headers, (void)names;
  if (!prog || !src || nheaders != 0) return INVALID_INPUT;
  program *p = calloc(1, sizeof *p);
  if (!p || !(p->source = strdup(src)) || !(p->name = strdup(name ? name : "kernel"))) {
    if (p) free(p->source);
    free(p);
    return OUT_OF_MEMORY;
  }
  *prog = p;
  return SUCCESS;
}

EXPORT int nvrtcDestroyProgram(void **prog) {
  if (!prog || !*prog) return INVALID_PROGRAM;
  program *p = *prog;
  free(p->source), free(p->name), free(p->log), free(p->object);
  free(p);
  *prog = NULL;
  return SUCCESS;
}

EXPORT int nvrtcCompileProgram(void *prog, int nopts, const char *const *opts) {
  (void)nopts, (void)opts;
  program *p = prog;
  if (!p) return INVALID_PROGRAM;
  const char *tmp = getenv("TMPDIR");
  char dir[512], src[600], obj[600], log[600], cmd[3000];
  snprintf(dir, sizeof dir, "%s/loom_emu_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return COMPILATION;
  snprintf(src, sizeof src, "%s/k.cu", dir);
  snprintf(obj, sizeof obj, "%s/k.so", dir);
  snprintf(log, sizeof log, "%s/log", dir);
  FILE *f = fopen(src, "w");
  int ok = f && fputs(p->source, f) >= 0;
  if (f) ok &= fclose(f) == 0;
  const char *cxx = getenv("EMU_NVRTC_CXX"), *opt = getenv("EMU_NVRTC_OPT");
  snprintf(cmd, sizeof cmd,
           "%s -std=c++17 %s -fPIC -shared -ffp-contract=off -w -x c++ -include '%s' '%s' -o "
           "'%s' >'%s' 2>&1",
           cxx && *cxx ? cxx : "c++", opt && *opt ? opt : "-O1", EMU_NVRTC_HEADER, src, obj, log);
  ok = ok && system(cmd) == 0;
  size_t loglen = 0;
  free(p->log);
  p->log = slurp(log, &loglen);
  free(p->object);
  p->object = ok ? slurp(obj, &p->object_len) : NULL;
  unlink(src), unlink(obj), unlink(log), rmdir(dir);
  return p->object ? SUCCESS : COMPILATION;
}

EXPORT int nvrtcGetProgramLogSize(void *prog, size_t *size) {
  program *p = prog;
  if (!p || !size) return INVALID_INPUT;
  *size = (p->log ? strlen(p->log) : 0) + 1;
  return SUCCESS;
}

EXPORT int nvrtcGetProgramLog(void *prog, char *log) {
  program *p = prog;
  if (!p || !log) return INVALID_INPUT;
  strcpy(log, p->log ? p->log : "");
  return SUCCESS;
}

EXPORT int nvrtcGetCUBINSize(void *prog, size_t *size) {
  program *p = prog;
  if (!p || !p->object) return INVALID_PROGRAM;
  *size = p->object_len;
  return SUCCESS;
}

EXPORT int nvrtcGetCUBIN(void *prog, char *out) {
  program *p = prog;
  if (!p || !p->object) return INVALID_PROGRAM;
  memcpy(out, p->object, p->object_len);
  return SUCCESS;
}

/* No PTX: the emulated device takes only its own objects. */
EXPORT int nvrtcGetPTXSize(void *prog, size_t *size) {
  (void)prog, (void)size;
  return INVALID_INPUT;
}

EXPORT int nvrtcGetPTX(void *prog, char *out) {
  (void)prog, (void)out;
  return INVALID_INPUT;
}

EXPORT const char *nvrtcGetErrorString(int r) {
  switch (r) {
  case SUCCESS: return "NVRTC_SUCCESS";
  case OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
  case INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
  case INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
  case COMPILATION: return "NVRTC_ERROR_COMPILATION";
  default: return "NVRTC_ERROR_UNKNOWN";
  }
}

EXPORT int nvrtcVersion(int *major, int *minor) {
  *major = 99;
  *minor = 0;
  return SUCCESS;
}
