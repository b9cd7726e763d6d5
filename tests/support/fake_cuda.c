/*
 * A driver double: the subset of the CUDA driver API loom uses, over host
 * memory, built as a shared library that tests load through LOOM_LIBCUDA.
 *
 * It reports one device (compute capability 9.0) and checks what a driver
 * would refuse: a context must be current on the calling thread, device
 * pointers must lie in live allocations, modules must be ELF images (NVRTC's
 * cubins) defining the function asked for. It cannot run NVRTC's kernels: a
 * launch is recorded (function name, grid, block, parameter values) and does
 * nothing, so tests check loom's host side (memory, copies, ordering, caches,
 * launch arguments, errors), never kernel results.
 *
 * Emulated (FAKE_CUDA_EMULATE=1, with LOOM_NVRTC at emu_nvrtc.c's library)
 * it does run them: modules are then host shared objects that the emulator's
 * NVRTC compiled from the same CUDA C (cuda_emu.h), and each launch runs the
 * kernel's threads as fibers (cuda_emu_run.c) after the copies queued before
 * it. The device is then "loom emulated CUDA device", which test_cuda_gpu
 * takes for a GPU.
 *
 * Streams are modelled: copies from the device, device-to-device copies and
 * memsets are queued and happen at cuStreamSynchronize (or before a later
 * upload or free, which the driver orders after them), so a caller that
 * reads host memory without waiting sees stale bytes. Uploads copy at once,
 * as the driver stages pageable memory before returning.
 *
 * Switches (environment, read at cuInit, or the setters below):
 *   FAKE_CUDA_FAIL_ALLOC=n   the n-th cuMemAlloc and every later one return
 *                            CUDA_ERROR_OUT_OF_MEMORY (memory stays exhausted)
 *   FAKE_CUDA_FAIL_LAUNCH=n  the n-th cuLaunchKernel returns CUDA_ERROR_LAUNCH_FAILED
 *   (fake_cuda_fail_load(n): the n-th cuModuleLoadData from now, and every
 *   later one, returns CUDA_ERROR_INVALID_IMAGE; loads run on loom's pool)
 *   FAKE_CUDA_DEVICES=n      how many devices (default 1; 0: none)
 *   FAKE_CUDA_STREAM_BUSY=1  cuStreamQuery never reports the stream done (work
 *                            that never ends: a collective whose peers are gone)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_emu_run.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  OK = 0,
  INVALID_VALUE = 1,
  OUT_OF_MEMORY = 2,
  NOT_INITIALIZED = 3,
  NO_DEVICE = 100,
  INVALID_DEVICE = 101,
  INVALID_IMAGE = 200,
  INVALID_CONTEXT = 201,
  INVALID_HANDLE = 400,
  NOT_FOUND = 500,
  LAUNCH_FAILED = 719
};

#define EXPORT __attribute__((visibility("default")))
#define MAX_PARAMS EMU_MAX_PARAMS
#define MAX_LAUNCHES 4096

typedef struct alloc {
  CUdeviceptr ptr;
  size_t bytes;
  struct alloc *next;
} alloc;

typedef enum op_kind { OP_DTOH, OP_DTOD, OP_MEMSET } op_kind;
typedef struct op {
  op_kind kind;
  void *dst;
  const void *src;
  size_t bytes;
  unsigned char value;
  struct op *next;
} op;

typedef struct launch_rec {
  char name[80];
  unsigned grid[3], block[3];
  int nparams;
  unsigned long long params[MAX_PARAMS];
} launch_rec;

typedef struct function {
  char name[80];
  void *emulated;      /* the kernel in an emulated module */
  lm_emu_runtime **rt; /* its object's runtime variable */
  struct function *next;
} function;

/* A cubin's kernel names, or an emulated module's loaded object. */
typedef struct module {
  function *functions;
  void *object;
  lm_emu_runtime **rt;
  struct module *next;
} module;

static struct {
  pthread_mutex_t lock;
  int initialized, devices, emulate;
  alloc *allocs;
  op *queue, *queue_tail;
  module *modules; /* every module loaded and not unloaded */
  long nalloc, nfree, nsync, nlaunch, nmodules, nhtod, ndtoh, ndtod, nbad;
  long fail_alloc, fail_launch,
      fail_load; /* 1-based call numbers from the last setting; 0: never */
  int stream_busy;
  long alloc_calls, launch_calls, load_calls;
  size_t live_bytes;
  launch_rec launches[MAX_LAUNCHES];
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER, .devices = 1};

static _Thread_local void *current_ctx;
static char the_ctx, the_stream; /* their addresses are the handles */

/* ------------------------------------------------------------------ state */

static alloc *find(CUdeviceptr p, size_t bytes) {
  for (alloc *a = fake.allocs; a; a = a->next)
    if (p >= a->ptr && p + bytes <= a->ptr + a->bytes) return a;
  return NULL;
}

static void run_queue(void) {
  while (fake.queue) {
    op *o = fake.queue;
    fake.queue = o->next;
    if (o->kind == OP_MEMSET)
      memset(o->dst, o->value, o->bytes);
    else
      memmove(o->dst, o->src, o->bytes);
    free(o);
  }
  fake.queue_tail = NULL;
}

static CUresult enqueue(op_kind kind, void *dst, const void *src, size_t bytes,
                        unsigned char value) {
  op *o = calloc(1, sizeof *o);
  if (!o) return OUT_OF_MEMORY;
  *o = (op){kind, dst, src, bytes, value, NULL};
  if (fake.queue_tail)
    fake.queue_tail->next = o;
  else
    fake.queue = o;
  fake.queue_tail = o;
  return OK;
}

static long env_long(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : fallback;
}

static CUresult ready(void) {
  if (!fake.initialized) return NOT_INITIALIZED;
  return current_ctx == &the_ctx ? OK : INVALID_CONTEXT;
}

#define LOCKED(expr)                                                                               \
  do {                                                                                             \
    pthread_mutex_lock(&fake.lock);                                                                \
    CUresult r_ = (expr);                                                                          \
    pthread_mutex_unlock(&fake.lock);                                                              \
    return r_;                                                                                     \
  } while (0)

/* ------------------------------------------------------------------ driver API */

EXPORT CUresult cuInit(unsigned flags) {
  pthread_mutex_lock(&fake.lock);
  fake.initialized = 1;
  fake.devices = (int)env_long("FAKE_CUDA_DEVICES", 1);
  fake.fail_alloc = env_long("FAKE_CUDA_FAIL_ALLOC", 0);
  fake.fail_launch = env_long("FAKE_CUDA_FAIL_LAUNCH", 0);
  fake.emulate = (int)env_long("FAKE_CUDA_EMULATE", 0);
  fake.stream_busy = (int)env_long("FAKE_CUDA_STREAM_BUSY", 0);
  pthread_mutex_unlock(&fake.lock);
  return flags == 0 ? OK : INVALID_VALUE;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return OK;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
  if (!fake.initialized) return NOT_INITIALIZED;
  *n = fake.devices;
  return OK;
}

EXPORT CUresult cuDeviceGet(int *dev, int ordinal) {
  if (ordinal < 0 || ordinal >= fake.devices) return INVALID_DEVICE;
  *dev = ordinal;
  return OK;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int dev) {
  if (dev < 0 || dev >= fake.devices) return INVALID_DEVICE;
  snprintf(name, (size_t)len, "loom %s CUDA device %d", fake.emulate ? "emulated" : "fake", dev);
  return OK;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
  if (dev < 0 || dev >= fake.devices) return INVALID_DEVICE;
  switch (attribute) {
  case 16: *value = 132; return OK;     /* multiprocessors */
  case 36: *value = 2619000; return OK; /* memory clock, kHz */
  case 37: *value = 5120; return OK;    /* bus width, bits */
  case 75: *value = 9; return OK;
  case 76: *value = 0; return OK;
  default: return INVALID_VALUE;
  }
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  *bytes = (size_t)80 << 30;
  return dev >= 0 && dev < fake.devices ? OK : INVALID_DEVICE;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  if (dev < 0 || dev >= fake.devices) return INVALID_DEVICE;
  *ctx = &the_ctx;
  return OK;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx) {
  current_ctx = ctx;
  return ctx == &the_ctx || ctx == NULL ? OK : INVALID_CONTEXT;
}

EXPORT CUresult cuStreamCreate(void **stream, unsigned flags) {
  if (ready()) return ready();
  *stream = &the_stream;
  return OK;
}

static CUresult sync_stream(void *stream) {
  if (ready()) return ready();
  if (stream != &the_stream) return INVALID_HANDLE;
  run_queue();
  fake.nsync++;
  return OK;
}
EXPORT CUresult cuStreamSynchronize(void *stream) { LOCKED(sync_stream(stream)); }
/* Queued work happens when asked about, as at a synchronize: done, unless
 * FAKE_CUDA_STREAM_BUSY. */
static CUresult query_stream(void *stream) {
  CUresult r = sync_stream(stream);
  return r == OK && fake.stream_busy ? 600 /* CUDA_ERROR_NOT_READY */ : r;
}
EXPORT CUresult cuStreamQuery(void *stream) { LOCKED(query_stream(stream)); }

static CUresult mem_alloc(CUdeviceptr *p, size_t bytes) {
  if (ready()) return ready();
  fake.alloc_calls++;
  if (fake.fail_alloc && fake.alloc_calls >= fake.fail_alloc) return OUT_OF_MEMORY;
  if (bytes == 0) return INVALID_VALUE;
  alloc *a = malloc(sizeof *a);
  void *mem = malloc(bytes);
  if (!a || !mem) {
    free(a);
    free(mem);
    return OUT_OF_MEMORY;
  }
  memset(mem, 0xCD, bytes); /* fresh device memory is not zero */
  *a = (alloc){(CUdeviceptr)(uintptr_t)mem, bytes, fake.allocs};
  fake.allocs = a;
  fake.nalloc++;
  fake.live_bytes += bytes;
  *p = a->ptr;
  return OK;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) { LOCKED(mem_alloc(p, bytes)); }

static CUresult mem_free(CUdeviceptr p) {
  if (ready()) return ready();
  run_queue(); /* cuMemFree waits for the work before it */
  for (alloc **a = &fake.allocs; *a; a = &(*a)->next)
    if ((*a)->ptr == p) {
      alloc *dead = *a;
      *a = dead->next;
      fake.live_bytes -= dead->bytes;
      free((void *)(uintptr_t)dead->ptr);
      free(dead);
      fake.nfree++;
      return OK;
    }
  fake.nbad++;
  return INVALID_VALUE;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { LOCKED(mem_free(p)); }

static CUresult check_copy(CUdeviceptr p, size_t bytes, void *stream) {
  if (ready()) return ready();
  if (stream != &the_stream) return INVALID_HANDLE;
  if (!find(p, bytes)) {
    fake.nbad++;
    return INVALID_VALUE;
  }
  return OK;
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t bytes, void *stream) {
  CUresult r = check_copy(dst, bytes, stream);
  if (r) return r;
  run_queue(); /* stream order: after what came before */
  memcpy((void *)(uintptr_t)dst, src, bytes);
  fake.nhtod++;
  return OK;
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *s) {
  LOCKED(htod(dst, src, bytes, s));
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t bytes, void *stream) {
  CUresult r = check_copy(src, bytes, stream);
  if (!r) r = enqueue(OP_DTOH, dst, (const void *)(uintptr_t)src, bytes, 0);
  if (!r) fake.ndtoh++;
  return r;
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *s) {
  LOCKED(dtoh(dst, src, bytes, s));
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream) {
  CUresult r = check_copy(dst, bytes, stream);
  if (!r) r = check_copy(src, bytes, stream);
  if (!r) r = enqueue(OP_DTOD, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, 0);
  if (!r) fake.ndtod++;
  return r;
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *s) {
  LOCKED(dtod(dst, src, bytes, s));
}

static CUresult memset8(CUdeviceptr dst, unsigned char v, size_t bytes, void *stream) {
  CUresult r = check_copy(dst, bytes, stream);
  return r ? r : enqueue(OP_MEMSET, (void *)(uintptr_t)dst, NULL, bytes, v);
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t bytes, void *s) {
  LOCKED(memset8(dst, v, bytes, s));
}

/* An ELF image's size from its header (section and program header tables
 * come last in NVRTC's cubins). */
static size_t elf_size(const unsigned char *p) {
  uint64_t phoff, shoff;
  uint16_t phentsize, phnum, shentsize, shnum;
  memcpy(&phoff, p + 0x20, 8);
  memcpy(&shoff, p + 0x28, 8);
  memcpy(&phentsize, p + 0x36, 2);
  memcpy(&phnum, p + 0x38, 2);
  memcpy(&shentsize, p + 0x3A, 2);
  memcpy(&shnum, p + 0x3C, 2);
  uint64_t a = phoff + (uint64_t)phentsize * phnum, b = shoff + (uint64_t)shentsize * shnum;
  return (size_t)(a > b ? a : b);
}

/* An emulated module: the image is a host shared object (x86-64, ET_DYN),
 * loaded from a temporary file. */
static CUresult load_object(module *m, const unsigned char *p) {
  uint16_t type, machine;
  memcpy(&type, p + 16, 2);
  memcpy(&machine, p + 18, 2);
  if (type != 3 || machine != 62) return INVALID_IMAGE;
  const char *tmp = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/loom_emu_module_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) return OUT_OF_MEMORY;
  size_t size = elf_size(p);
  bool written = write(fd, p, size) == (ssize_t)size;
  close(fd);
  m->object = written ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  unlink(path);
  if (!m->object) {
    fprintf(stderr, "fake CUDA: cannot load an emulated module: %s\n",
            written ? dlerror() : "write failed");
    return INVALID_IMAGE;
  }
  m->rt = dlsym(m->object, "lm_emu_rt");
  return m->rt ? OK : INVALID_IMAGE;
}

/* A cubin's module is the list of the image's symbol names that look like
 * kernels (lk_: a kernel, lm_: a GEMM, lf_: a GEMM with its epilogue). */
static CUresult module_load(void **out, const void *image) {
  if (ready()) return ready();
  fake.load_calls++;
  if (fake.fail_load && fake.load_calls >= fake.fail_load) return INVALID_IMAGE;
  const unsigned char *p = image;
  if (!p ||
      memcmp(p,
             "\x7f"
             "ELF",
             4) != 0 ||
      p[4] != 2)
    return INVALID_IMAGE;
  module *m = calloc(1, sizeof *m);
  if (!m) return OUT_OF_MEMORY;
  if (fake.emulate) {
    CUresult r = load_object(m, p);
    if (r != OK) {
      free(m);
      return r;
    }
  } else {
    size_t size = elf_size(p);
    for (size_t i = 0; i + 3 < size; i++) {
      bool start = (p[i] == 'l' && (p[i + 1] == 'k' || p[i + 1] == 'm' || p[i + 1] == 'f') &&
                    p[i + 2] == '_') &&
                   (i == 0 || p[i - 1] == 0 || p[i - 1] == '.');
      if (!start) continue;
      function *f = calloc(1, sizeof *f);
      if (!f) break; /* the module holds the names found so far */
      size_t n = strnlen((const char *)p + i, sizeof f->name - 1);
      memcpy(f->name, p + i, n);
      f->next = m->functions;
      m->functions = f;
    }
  }
  m->next = fake.modules;
  fake.modules = m;
  *out = m;
  fake.nmodules++;
  return OK;
}
EXPORT CUresult cuModuleLoadData(void **module, const void *image) {
  LOCKED(module_load(module, image));
}

static CUresult get_function(void **fn, void *handle, const char *name) {
  if (ready()) return ready();
  module *m = handle;
  if (!m) return INVALID_HANDLE;
  for (function *f = m->functions; f; f = f->next)
    if (strcmp(f->name, name) == 0) {
      *fn = f;
      return OK;
    }
  void *code = m->object ? dlsym(m->object, name) : NULL;
  if (!code) return NOT_FOUND;
  function *f = calloc(1, sizeof *f);
  if (!f) return OUT_OF_MEMORY;
  snprintf(f->name, sizeof f->name, "%s", name);
  f->emulated = code;
  f->rt = m->rt;
  f->next = m->functions;
  m->functions = f;
  *fn = f;
  return OK;
}
EXPORT CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
  LOCKED(get_function(fn, module, name));
}

static CUresult module_unload(void *handle) {
  if (ready()) return ready();
  module **at = &fake.modules;
  while (*at && *at != handle) at = &(*at)->next;
  if (!*at) return INVALID_HANDLE; /* never loaded, or unloaded already */
  module *m = *at;
  *at = m->next;
  while (m->functions) {
    function *f = m->functions;
    m->functions = f->next;
    free(f);
  }
  if (m->object) dlclose(m->object);
  free(m);
  return OK;
}
EXPORT CUresult cuModuleUnload(void *module) { LOCKED(module_unload(module)); }

static CUresult launch(function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  if (ready()) return ready();
  if (!f || stream != &the_stream || extra) return INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
  fake.launch_calls++;
  if (fake.fail_launch && fake.launch_calls == fake.fail_launch) return LAUNCH_FAILED;
  launch_rec *r = &fake.launches[fake.nlaunch % MAX_LAUNCHES];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", f->name);
  r->grid[0] = gx, r->grid[1] = gy, r->grid[2] = gz;
  r->block[0] = bx, r->block[1] = by, r->block[2] = bz;
  while (params && params[r->nparams] && r->nparams < MAX_PARAMS) {
    memcpy(&r->params[r->nparams], params[r->nparams], 8); /* loom's are all 8 bytes */
    r->nparams++;
  }
  if (params && r->nparams == MAX_PARAMS && params[r->nparams]) return INVALID_VALUE;
  fake.nlaunch++;
  if (!f->emulated) return OK;
  run_queue(); /* the stream's earlier copies and memsets come first */
  char why[512];
  if (emu_launch(f->emulated, f->rt, r->grid, r->block, r->nparams, (const uint64_t *)r->params,
                 why, sizeof why))
    return OK;
  fprintf(stderr, "fake CUDA: launch of %s failed: %s\n", f->name, why);
  return LAUNCH_FAILED;
}
EXPORT CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, void *stream,
                               void **params, void **extra) {
  LOCKED(launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra));
}

static const char *names[][2] = {
    {"CUDA_SUCCESS", "no error"},
    {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
};

static int name_index(CUresult r) {
  switch (r) {
  case OK: return 0;
  case INVALID_VALUE: return 1;
  case OUT_OF_MEMORY: return 2;
  case LAUNCH_FAILED: return 3;
  case INVALID_CONTEXT: return 4;
  case NOT_FOUND: return 5;
  case INVALID_IMAGE: return 6;
  default: return -1;
  }
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
  int i = name_index(r);
  if (i < 0) return INVALID_VALUE;
  *s = names[i][0];
  return OK;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
  int i = name_index(r);
  if (i < 0) return INVALID_VALUE;
  *s = names[i][1];
  return OK;
}

/* ------------------------------------------------------------------ for tests */

typedef struct fake_cuda_counts {
  long allocs, frees, live_allocs, syncs, launches, modules, htod, dtoh, dtod, bad_pointers;
  size_t live_bytes;
} fake_cuda_counts;

EXPORT fake_cuda_counts fake_cuda_get_counts(void) {
  pthread_mutex_lock(&fake.lock);
  long live = 0;
  for (alloc *a = fake.allocs; a; a = a->next) live++;
  fake_cuda_counts c = {fake.nalloc,  fake.nfree,    live,           fake.nsync,
                        fake.nlaunch, fake.nmodules, fake.nhtod,     fake.ndtoh,
                        fake.ndtod,   fake.nbad,     fake.live_bytes};
  pthread_mutex_unlock(&fake.lock);
  return c;
}

/* Launch i (0 = the first since the start): name, grid, block, parameters. */
EXPORT int fake_cuda_launch(long i, char *name, size_t len, unsigned grid[3], unsigned block[3],
                            unsigned long long *params, int max_params) {
  pthread_mutex_lock(&fake.lock);
  int n = -1;
  if (i >= 0 && i < fake.nlaunch && fake.nlaunch - i <= MAX_LAUNCHES) {
    const launch_rec *r = &fake.launches[i % MAX_LAUNCHES];
    snprintf(name, len, "%s", r->name);
    memcpy(grid, r->grid, sizeof r->grid);
    memcpy(block, r->block, sizeof r->block);
    n = r->nparams;
    for (int k = 0; k < n && k < max_params; k++) params[k] = r->params[k];
  }
  pthread_mutex_unlock(&fake.lock);
  return n;
}

/* Allocations fail from the n-th call from now on, launches at the n-th
 * (0: none fail). */
EXPORT void fake_cuda_fail_alloc(long n) {
  pthread_mutex_lock(&fake.lock);
  fake.fail_alloc = n ? fake.alloc_calls + n : 0;
  pthread_mutex_unlock(&fake.lock);
}
EXPORT void fake_cuda_fail_launch(long n) {
  pthread_mutex_lock(&fake.lock);
  fake.fail_launch = n ? fake.launch_calls + n : 0;
  pthread_mutex_unlock(&fake.lock);
}

EXPORT void fake_cuda_fail_load(long n) {
  pthread_mutex_lock(&fake.lock);
  fake.fail_load = n ? fake.load_calls + n : 0;
  pthread_mutex_unlock(&fake.lock);
}

/* Whether ptr lies in a live allocation (tests check loom's pointers). */
EXPORT int fake_cuda_is_device_pointer(const void *ptr, size_t bytes) {
  pthread_mutex_lock(&fake.lock);
  int yes = find((CUdeviceptr)(uintptr_t)ptr, bytes) != NULL;
  pthread_mutex_unlock(&fake.lock);
  return yes;
}
