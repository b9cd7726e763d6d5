/* A stand-in for libnccl.so.2 for tests on the emulated CUDA device
 * (tests/support/fake_cuda.c, loaded through LOOM_LIBCUDA): a world of one
 * rank whose collectives are device-to-device copies queued on the stream
 * through the same driver, so loom's NCCL path (loading, the communicator,
 * bucket joins, the stream wait) runs for real. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct comm {
  int nranks;
} comm;
typedef struct {
  char internal[128];
} unique_id;

enum { SUCCESS = 0, SYSTEM_ERROR = 2, INVALID_ARGUMENT = 4 };

static size_t dtype_size(int dt) {
  switch (dt) {
  case 0:
  case 1: return 1; /* int8, uint8 */
  case 6:
  case 9: return 2; /* float16, bfloat16 */
  case 4:
  case 5:
  case 8: return 8; /* int64, uint64, float64 */
  default: return 4;
  }
}

/* cuMemcpyDtoDAsync_v2 of the driver loom loaded. */
static int copy(void *dst, const void *src, size_t bytes, void *stream) {
  static int (*dtod)(uint64_t, uint64_t, size_t, void *);
  if (!dtod) {
    const char *path = getenv("LOOM_LIBCUDA");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *sym = lib ? dlsym(lib, "cuMemcpyDtoDAsync_v2") : NULL;
    if (!sym) return SYSTEM_ERROR;
    memcpy(&dtod, &sym, sizeof sym);
  }
  if (dst == src || bytes == 0) return SUCCESS;
  return dtod((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, bytes, stream) ? SYSTEM_ERROR
                                                                                 : SUCCESS;
}

EXPORT int ncclGetVersion(int *version) {
  *version = 21805;
  return SUCCESS;
}

EXPORT int ncclGetUniqueId(unique_id *id) {
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "fake nccl");
  return SUCCESS;
}

EXPORT int ncclCommInitRank(comm **c, int nranks, unique_id id, int rank) {
  if (nranks != 1 || rank != 0 || strcmp(id.internal, "fake nccl") != 0) return INVALID_ARGUMENT;
  *c = calloc(1, sizeof **c);
  if (!*c) return SYSTEM_ERROR;
  (*c)->nranks = nranks;
  return SUCCESS;
}

EXPORT int ncclCommAbort(comm *c) {
  free(c);
  return SUCCESS;
}

EXPORT int ncclCommGetAsyncError(comm *c, int *error) {
  (void)c;
  *error = SUCCESS;
  return SUCCESS;
}

EXPORT const char *ncclGetErrorString(int r) {
  return r == INVALID_ARGUMENT ? "invalid argument (fake NCCL: a world of one)" : "fake NCCL error";
}

EXPORT int ncclAllReduce(const void *send, void *recv, size_t count, int dt, int op, comm *c,
                         void *stream) {
  (void)op, (void)c; /* one rank: sum, max, min and average are the value */
  return copy(recv, send, count * dtype_size(dt), stream);
}

EXPORT int ncclBroadcast(const void *send, void *recv, size_t count, int dt, int root, comm *c,
                         void *stream) {
  (void)c;
  return root != 0 ? INVALID_ARGUMENT : copy(recv, send, count * dtype_size(dt), stream);
}

EXPORT int ncclAllGather(const void *send, void *recv, size_t count, int dt, comm *c,
                         void *stream) {
  (void)c;
  return copy(recv, send, count * dtype_size(dt), stream);
}
