/* Devices and execution control. */
#include <stdatomic.h>

#include "runtime/runtime.h"

static _Atomic int default_device_type = LOOM_DEVICE_CPU;
static _Atomic int default_device_index = 0;

bool loom_cuda_available(void) { return false; }
int loom_cuda_device_count(void) { return 0; }
const char *loom_cuda_unavailable_reason(void) {
  return "this build of loom has no CUDA backend yet; only LOOM_CPU is available";
}

loom_status loom_set_default_device(loom_device device) {
  if (device.type == LOOM_DEVICE_CUDA && !loom_cuda_available())
    return lm_fail(LOOM_ERR_DEVICE, "loom_set_default_device: cuda:%d: %s", device.index,
                   loom_cuda_unavailable_reason());
  if (device.type != LOOM_DEVICE_CPU && device.type != LOOM_DEVICE_CUDA)
    return lm_fail(LOOM_ERR_DEVICE, "loom_set_default_device: unknown device type %d",
                   (int)device.type);
  atomic_store(&default_device_type, device.type);
  atomic_store(&default_device_index, device.index);
  return LOOM_OK;
}

loom_device loom_default_device(void) {
  return (loom_device){(loom_device_type)atomic_load(&default_device_type),
                       atomic_load(&default_device_index)};
}
