/*
 * Device memory and copies (runtime/cuda.h). Each device gets its primary
 * context and one non-blocking stream the first time it is used.
 *
 * The allocator caches freed blocks by size class, like the host's
 * (runtime/buffer.c): cuMemAlloc and cuMemFree synchronize and cost far more
 * than a kernel, so a training loop must not call them every step. A block
 * is reused at once on free: every user of a device's memory is queued on
 * its one stream, so the next user runs after the last one. When the driver
 * is out of memory the device's cache is returned to it and the allocation
 * tried once more.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/cuda_internal.h"
#include "runtime/cuda.h"
#include "runtime/runtime.h"

typedef struct block {
  CUdeviceptr ptr;
  struct block *next;
} block;

typedef struct device_state {
  bool up;
  CUcontext ctx;
  CUstream stream;
  block *lists[LM_SIZE_CLASSES];
  size_t cached_bytes;
} device_state;

/* Global state the design names (a cache of device blocks, the contexts and
 * streams), guarded by `lock`. */
static struct {
  pthread_mutex_t lock;
  device_state dev[LM_CUDA_MAX_DEVICES];
} devices = {PTHREAD_MUTEX_INITIALIZER, {{0}}};

static loom_status driver_fail(const char *op, const char *call, int dev, CUresult r) {
  char text[256];
  return lm_fail(lm_cu_status(r), "%s: %s on cuda:%d failed with %s", op, call, dev,
                 lm_cu_error_text(r, text, sizeof text));
}

/* Context and stream of dev, created on first use; caller holds the lock. */
static loom_status bring_up(const char *op, int dev, device_state *d) {
  const lm_cu_api *cu = lm_cu();
  CUresult r = cu->primary_ctx_retain(&d->ctx, lm_cu_device_at(dev)->handle);
  if (r != 0) return driver_fail(op, "cuDevicePrimaryCtxRetain", dev, r);
  if ((r = cu->ctx_set_current(d->ctx)) != 0) return driver_fail(op, "cuCtxSetCurrent", dev, r);
  if ((r = cu->stream_create(&d->stream, LM_CU_STREAM_NON_BLOCKING)) != 0)
    return driver_fail(op, "cuStreamCreate", dev, r);
  d->up = true;
  return LOOM_OK;
}

loom_status lm_cuda_enter(const char *op, int dev, CUstream *stream) {
  char why[1024];
  if (!lm_cuda_ready(why, sizeof why))
    return lm_fail(LOOM_ERR_DEVICE, "%s: cuda:%d is not available: %s", op, dev, why);
  if (dev < 0 || dev >= lm_cu_device_count() || dev >= LM_CUDA_MAX_DEVICES)
    return lm_fail(LOOM_ERR_DEVICE, "%s: cuda:%d does not exist (%d devices)", op, dev,
                   lm_cu_device_count());
  device_state *d = &devices.dev[dev];
  pthread_mutex_lock(&devices.lock);
  loom_status st = d->up ? LOOM_OK : bring_up(op, dev, d);
  CUcontext ctx = d->ctx;
  if (stream) *stream = d->stream;
  pthread_mutex_unlock(&devices.lock);
  if (st != LOOM_OK) return st;
  /* The context is current per thread: set it on whichever thread is here. */
  CUresult r = lm_cu()->ctx_set_current(ctx);
  return r == 0 ? LOOM_OK : driver_fail(op, "cuCtxSetCurrent", dev, r);
}

/* Returns dev's cached blocks to the driver, after the work that may still
 * use them; caller holds the lock and has entered dev. */
static void release_cache(device_state *d) {
  const lm_cu_api *cu = lm_cu();
  if (d->cached_bytes) cu->stream_synchronize(d->stream);
  for (int c = 0; c < LM_SIZE_CLASSES; c++)
    while (d->lists[c]) {
      block *b = d->lists[c];
      d->lists[c] = b->next;
      cu->mem_free(b->ptr);
      free(b);
    }
  d->cached_bytes = 0;
}

static CUdeviceptr take_cached(device_state *d, int c, size_t rounded) {
  block *b = d->lists[c];
  if (!b) return 0;
  d->lists[c] = b->next;
  d->cached_bytes -= rounded;
  CUdeviceptr ptr = b->ptr;
  free(b);
  return ptr;
}

loom_status lm_cuda_alloc(const char *op, int dev, size_t bytes, void **out) {
  *out = NULL;
  loom_status st = lm_cuda_enter(op, dev, NULL);
  if (st != LOOM_OK) return st;
  if (bytes > ((size_t)1 << 56))
    return lm_fail(LOOM_ERR_SIZE, "%s: %zu bytes is too large for cuda:%d", op, bytes, dev);
  size_t rounded;
  int c = lm_size_class(bytes, &rounded);
  device_state *d = &devices.dev[dev];
  const lm_cu_api *cu = lm_cu();
  pthread_mutex_lock(&devices.lock);
  CUdeviceptr ptr = take_cached(d, c, rounded);
  CUresult r = 0;
  if (!ptr) {
    r = cu->mem_alloc(&ptr, rounded);
    if (r == LM_CUDA_ERROR_OUT_OF_MEMORY) {
      release_cache(d);
      r = cu->mem_alloc(&ptr, rounded);
    }
  }
  pthread_mutex_unlock(&devices.lock);
  if (r != 0 || !ptr) {
    char text[256];
    return lm_fail(lm_cu_status(r), "%s: out of memory for %zu bytes on cuda:%d (%s)", op, bytes,
                   dev, lm_cu_error_text(r, text, sizeof text));
  }
  lm_stat_device_bytes((int64_t)bytes);
  *out = (void *)(uintptr_t)ptr;
  return LOOM_OK;
}

void lm_cuda_free(int dev, void *ptr, size_t bytes) {
  if (!ptr || dev < 0 || dev >= LM_CUDA_MAX_DEVICES) return;
  lm_stat_device_bytes(-(int64_t)bytes);
  size_t rounded;
  int c = lm_size_class(bytes, &rounded);
  block *b = malloc(sizeof *b);
  device_state *d = &devices.dev[dev];
  pthread_mutex_lock(&devices.lock);
  if (b) {
    b->ptr = (CUdeviceptr)(uintptr_t)ptr;
    b->next = d->lists[c];
    d->lists[c] = b;
    d->cached_bytes += rounded;
  }
  pthread_mutex_unlock(&devices.lock);
  if (!b && lm_cuda_enter("lm_cuda_free", dev, NULL) == LOOM_OK) { /* no room to cache it */
    lm_cu()->stream_synchronize(d->stream);
    lm_cu()->mem_free((CUdeviceptr)(uintptr_t)ptr);
  }
}

void lm_cuda_trim(void) {
  for (int dev = 0; dev < LM_CUDA_MAX_DEVICES; dev++) {
    if (!devices.dev[dev].up || lm_cuda_enter("lm_cuda_trim", dev, NULL) != LOOM_OK) continue;
    pthread_mutex_lock(&devices.lock);
    release_cache(&devices.dev[dev]);
    pthread_mutex_unlock(&devices.lock);
  }
}

loom_status lm_cuda_sync(const char *op, int dev) {
  CUstream stream;
  loom_status st = lm_cuda_enter(op, dev, &stream);
  if (st != LOOM_OK) return st;
  CUresult r = lm_cu()->stream_synchronize(stream);
  return r == 0 ? LOOM_OK : driver_fail(op, "cuStreamSynchronize", dev, r);
}

loom_status lm_cuda_zero(const char *op, int dev, void *ptr, size_t bytes) {
  CUstream stream;
  loom_status st = lm_cuda_enter(op, dev, &stream);
  if (st != LOOM_OK || bytes == 0) return st;
  CUresult r = lm_cu()->memset_d8((CUdeviceptr)(uintptr_t)ptr, 0, bytes, stream);
  return r == 0 ? LOOM_OK : driver_fail(op, "cuMemsetD8Async", dev, r);
}

/* Host to device, queued: the driver has staged pageable host memory before
 * it returns, so the caller may reuse src at once. */
static loom_status upload(const char *op, int dev, void *dst, const void *src, size_t bytes) {
  CUstream stream;
  loom_status st = lm_cuda_enter(op, dev, &stream);
  if (st != LOOM_OK) return st;
  CUresult r = lm_cu()->memcpy_htod((CUdeviceptr)(uintptr_t)dst, src, bytes, stream);
  return r == 0 ? LOOM_OK : driver_fail(op, "cuMemcpyHtoDAsync", dev, r);
}

/* Device to host: the value reaches the host, so this waits. */
static loom_status download(const char *op, int dev, void *dst, const void *src, size_t bytes) {
  CUstream stream;
  loom_status st = lm_cuda_enter(op, dev, &stream);
  if (st != LOOM_OK) return st;
  const lm_cu_api *cu = lm_cu();
  CUresult r = cu->memcpy_dtoh(dst, (CUdeviceptr)(uintptr_t)src, bytes, stream);
  if (r != 0) return driver_fail(op, "cuMemcpyDtoHAsync", dev, r);
  r = cu->stream_synchronize(stream);
  return r == 0 ? LOOM_OK : driver_fail(op, "cuStreamSynchronize", dev, r);
}

loom_status lm_cuda_copy(const char *op, loom_device to, void *dst, loom_device from,
                         const void *src, size_t bytes) {
  if (bytes == 0) return LOOM_OK;
  if (from.type != LOOM_DEVICE_CUDA) return upload(op, to.index, dst, src, bytes);
  if (to.type != LOOM_DEVICE_CUDA) return download(op, from.index, dst, src, bytes);
  if (to.index == from.index) {
    CUstream stream;
    loom_status st = lm_cuda_enter(op, to.index, &stream);
    if (st != LOOM_OK) return st;
    CUresult r = lm_cu()->memcpy_dtod((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                      bytes, stream);
    return r == 0 ? LOOM_OK : driver_fail(op, "cuMemcpyDtoDAsync", to.index, r);
  }
  /* Between two devices through the host: rare enough not to need peer access. */
  void *host = malloc(bytes);
  if (!host) return lm_fail(LOOM_ERR_OOM, "%s: out of memory for %zu bytes", op, bytes);
  loom_status st = download(op, from.index, host, src, bytes);
  if (st == LOOM_OK) st = upload(op, to.index, dst, host, bytes);
  if (st == LOOM_OK) st = lm_cuda_sync(op, to.index); /* before host is freed */
  free(host);
  return st;
}
