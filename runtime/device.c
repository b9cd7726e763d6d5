/* Devices and execution control, and buffers on any device: the CPU's come
 * from runtime/buffer.c, a CUDA device's from the backend (runtime/cuda.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "runtime/cuda.h"
#include "runtime/runtime.h"

static _Atomic int default_device_type = LOOM_DEVICE_CPU;
static _Atomic int default_device_index = 0;

/* Why CUDA is unavailable, found once (the driver is loaded once too). */
static pthread_once_t reason_once = PTHREAD_ONCE_INIT;
static bool available;
static char reason[1024];

static void find_reason(void) { available = lm_cuda_ready(reason, sizeof reason); }

bool loom_cuda_available(void) {
  pthread_once(&reason_once, find_reason);
  return available;
}

int loom_cuda_device_count(void) { return loom_cuda_available() ? lm_cuda_count() : 0; }

const char *loom_cuda_unavailable_reason(void) { return loom_cuda_available() ? NULL : reason; }

/* Whether device can be used: LOOM_OK, or an error naming op and why not. */
static loom_status check_device(const char *op, loom_device device) {
  if (device.type == LOOM_DEVICE_CUDA && !loom_cuda_available())
    return lm_fail(LOOM_ERR_DEVICE, "%s: cuda:%d: %s", op, device.index,
                   loom_cuda_unavailable_reason());
  if (device.type == LOOM_DEVICE_CUDA &&
      (device.index < 0 || device.index >= loom_cuda_device_count()))
    return lm_fail(LOOM_ERR_DEVICE, "%s: cuda:%d does not exist (%d devices)", op, device.index,
                   loom_cuda_device_count());
  if (device.type != LOOM_DEVICE_CPU && device.type != LOOM_DEVICE_CUDA)
    return lm_fail(LOOM_ERR_DEVICE, "%s: unknown device type %d", op, (int)device.type);
  return LOOM_OK;
}

loom_status loom_synchronize(loom_device device) {
  loom_status st = check_device("loom_synchronize", device);
  if (st != LOOM_OK || device.type == LOOM_DEVICE_CPU) return st;
  return lm_cuda_sync("loom_synchronize", device.index);
}

double loom_cuda_peak_bandwidth(int index) {
  if (index < 0 || index >= loom_cuda_device_count()) return 0;
  return lm_cuda_peak_gbs(index);
}

loom_status loom_set_default_device(loom_device device) {
  loom_status st = check_device("loom_set_default_device", device);
  if (st != LOOM_OK) return st;
  atomic_store(&default_device_type, device.type);
  atomic_store(&default_device_index, device.index);
  return LOOM_OK;
}

const char *lm_device_str(loom_device d, char *buf, size_t len) {
  if (d.type == LOOM_DEVICE_CPU)
    snprintf(buf, len, "cpu");
  else
    snprintf(buf, len, "cuda:%d", d.index);
  return buf;
}

loom_device loom_default_device(void) {
  return (loom_device){(loom_device_type)atomic_load(&default_device_type),
                       atomic_load(&default_device_index)};
}

/* ------------------------------------------------------------ buffers */

loom_status lm_data_alloc(const char *op, loom_device d, size_t bytes, void **out) {
  if (d.type == LOOM_DEVICE_CUDA) return lm_cuda_alloc(op, d.index, bytes, out);
  *out = lm_buffer_alloc(bytes);
  if (!*out) return lm_fail(LOOM_ERR_OOM, "%s: out of memory for %zu bytes", op, bytes);
  return LOOM_OK;
}

void lm_data_free(loom_device d, void *data, size_t bytes) {
  if (!data) return;
  if (d.type == LOOM_DEVICE_CUDA)
    lm_cuda_free(d.index, data, bytes);
  else
    lm_buffer_free(data, bytes);
}

loom_status lm_data_copy(const char *op, loom_device to, void *dst, loom_device from,
                         const void *src, size_t bytes) {
  if (bytes == 0) return LOOM_OK;
  if (to.type == LOOM_DEVICE_CUDA || from.type == LOOM_DEVICE_CUDA)
    return lm_cuda_copy(op, to, dst, from, src, bytes);
  memcpy(dst, src, bytes);
  return LOOM_OK;
}

loom_status lm_leaf_copy(const char *op, loom_shape shape, loom_dtype dtype, loom_device to,
                         const void *src, loom_device from, lm_node **out) {
  *out = NULL;
  size_t bytes = (size_t)lm_shape_numel(&shape) * loom_dtype_size(dtype);
  void *data;
  loom_status st = lm_data_alloc(op, to, bytes, &data);
  if (st != LOOM_OK) return st;
  if (src)
    st = lm_data_copy(op, to, data, from, src, bytes);
  else if (to.type == LOOM_DEVICE_CUDA)
    st = lm_cuda_zero(op, to.index, data, bytes);
  else
    memset(data, 0, bytes);
  lm_node *n = st == LOOM_OK ? lm_node_new(LM_BUFFER, 0, NULL, shape, dtype, to) : NULL;
  if (!n) {
    lm_data_free(to, data, bytes);
    return st != LOOM_OK ? st : lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  n->data = data;
  n->bytes = bytes;
  n->release_data = lm_data_free;
  *out = n;
  return LOOM_OK;
}
