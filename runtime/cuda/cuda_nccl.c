/*
 * NCCL through dlopen (libnccl.so.2, or $LOOM_NCCL; LOOM_NCCL=0 turns it
 * off): collectives on device buffers, queued on the device's stream and
 * run between the GPUs directly. runtime/dist.c decides when (every rank
 * must take the same path) and makes the communicators: rank 0's unique id
 * travels over MPI. The declarations below are NCCL's own ABI (nccl.h, 2.10
 * and later), written out because loom builds without NCCL's headers.
 *
 * State (docs/global-state.md lists it): `nccl`, guarded by nccl_lock; the
 * library is opened once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dl.h"
#include "runtime/cuda.h"
#include "runtime/cuda/cuda_internal.h"
#include "runtime/runtime.h"

typedef int nccl_result;
typedef struct nccl_comm *nccl_comm;
typedef struct {
  char internal[LM_NCCL_ID_BYTES];
} nccl_unique_id;

enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7 };
enum { NCCL_SUM = 0, NCCL_MAX = 2, NCCL_MIN = 3, NCCL_AVG = 4 };
enum {
  NCCL_INT8 = 0,
  NCCL_UINT8 = 1,
  NCCL_INT32 = 2,
  NCCL_UINT32 = 3,
  NCCL_INT64 = 4,
  NCCL_UINT64 = 5,
  NCCL_FLOAT16 = 6,
  NCCL_FLOAT32 = 7,
  NCCL_FLOAT64 = 8,
  NCCL_BFLOAT16 = 9
};

/* 2.10: ncclAvg and ncclBfloat16 */
#define NCCL_MIN_VERSION 21000
#define CUDA_ERROR_NOT_READY 600

static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool opened; /* looked for: api or why_not is set */
  bool ready;
  char why_not[512];
  char about[256];
  nccl_result (*get_version)(int *version);
  nccl_result (*get_unique_id)(nccl_unique_id *id);
  nccl_result (*comm_init_rank)(nccl_comm *comm, int nranks, nccl_unique_id id, int rank);
  nccl_result (*comm_abort)(nccl_comm comm);
  nccl_result (*comm_get_async_error)(nccl_comm comm, nccl_result *error);
  const char *(*get_error_string)(nccl_result r);
  nccl_result (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op,
                            nccl_comm comm, CUstream stream);
  nccl_result (*broadcast)(const void *send, void *recv, size_t count, int dtype, int root,
                           nccl_comm comm, CUstream stream);
  nccl_result (*all_gather)(const void *send, void *recv, size_t count, int dtype, nccl_comm comm,
                            CUstream stream);
  nccl_comm comm[LM_CUDA_MAX_DEVICES];
  int comm_world[LM_CUDA_MAX_DEVICES];
} nccl;

#define BIND(lib, field, name)                                                                     \
  lm_dl_bind(lib, "NCCL", name, &nccl.field, sizeof nccl.field, nccl.why_not, sizeof nccl.why_not)

/* Under nccl_lock. */
static void open_nccl(void) {
  if (nccl.opened) return;
  nccl.opened = true;
  const char *env = getenv("LOOM_NCCL");
  if (env && strcmp(env, "0") == 0) {
    snprintf(nccl.why_not, sizeof nccl.why_not, "turned off (LOOM_NCCL=0)");
    return;
  }
  if (!lm_cuda_ready(NULL, 0)) {
    snprintf(nccl.why_not, sizeof nccl.why_not, "no CUDA device");
    return;
  }
  static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
  void *lib = lm_dl_open("NCCL", "LOOM_NCCL", names, 2,
                         "no NCCL: libnccl.so.2 not found (collectives on CUDA tensors go "
                         "through the host; LOOM_NCCL names the library)",
                         nccl.why_not, sizeof nccl.why_not);
  if (!lib) return;
  int version = 0;
  if (!BIND(lib, get_version, "ncclGetVersion") || !BIND(lib, get_unique_id, "ncclGetUniqueId") ||
      !BIND(lib, comm_init_rank, "ncclCommInitRank") || !BIND(lib, comm_abort, "ncclCommAbort") ||
      !BIND(lib, comm_get_async_error, "ncclCommGetAsyncError") ||
      !BIND(lib, get_error_string, "ncclGetErrorString") ||
      !BIND(lib, all_reduce, "ncclAllReduce") || !BIND(lib, broadcast, "ncclBroadcast") ||
      !BIND(lib, all_gather, "ncclAllGather"))
    return; /* (the library stays open: its symbols may be bound) */
  if (nccl.get_version(&version) != NCCL_SUCCESS || version < NCCL_MIN_VERSION) {
    snprintf(nccl.why_not, sizeof nccl.why_not,
             "NCCL %d is older than 2.10 (loom needs its average and BF16)", version);
    return;
  }
  snprintf(nccl.about, sizeof nccl.about, "NCCL %d.%d.%d", version / 10000, version / 100 % 100,
           version % 100);
  nccl.ready = true;
}

bool lm_nccl_available(const char **about) {
  pthread_mutex_lock(&nccl_lock);
  open_nccl();
  bool ok = nccl.ready;
  pthread_mutex_unlock(&nccl_lock);
  if (about) *about = ok ? nccl.about : nccl.why_not; /* fixed once written */
  return ok;
}

static int nccl_dtype(loom_dtype dt) {
  switch (dt) {
  case LOOM_F32: return NCCL_FLOAT32;
  case LOOM_F64: return NCCL_FLOAT64;
  case LOOM_F16: return NCCL_FLOAT16;
  case LOOM_BF16: return NCCL_BFLOAT16;
  case LOOM_I32: return NCCL_INT32;
  case LOOM_I64: return NCCL_INT64;
  case LOOM_I8: return NCCL_INT8;
  case LOOM_U32: return NCCL_UINT32;
  case LOOM_U64: return NCCL_UINT64;
  case LOOM_U8:
  case LOOM_BOOL: return NCCL_UINT8; /* 0 or 1: max is any, min is all */
  default: return -1;
  }
}

bool lm_nccl_runs(const lm_collective *c) {
  return nccl_dtype(c->dtype) >= 0 && (c->op != LM_ALL_GATHER || c->outer == 1);
}

static const char *result_text(nccl_result r) {
  const char *s = nccl.get_error_string ? nccl.get_error_string(r) : NULL;
  return s ? s : "unknown NCCL error";
}

bool lm_nccl_has_comm(int dev, int world) {
  pthread_mutex_lock(&nccl_lock);
  bool has =
      dev >= 0 && dev < LM_CUDA_MAX_DEVICES && nccl.comm[dev] && nccl.comm_world[dev] == world;
  pthread_mutex_unlock(&nccl_lock);
  return has;
}

bool lm_nccl_make_id(unsigned char *id, char *err, size_t errlen) {
  nccl_unique_id u;
  nccl_result r = nccl.get_unique_id(&u);
  if (r != NCCL_SUCCESS) {
    snprintf(err, errlen, "ncclGetUniqueId: %s", result_text(r));
    return false;
  }
  memcpy(id, u.internal, LM_NCCL_ID_BYTES);
  return true;
}

bool lm_nccl_join(int dev, int rank, int world, const unsigned char *id, char *err, size_t errlen) {
  if (lm_cuda_enter("loom_realize", dev, NULL) != LOOM_OK) {
    snprintf(err, errlen, "cuda:%d: %s", dev, loom_last_error());
    return false;
  }
  nccl_unique_id u;
  memcpy(u.internal, id, LM_NCCL_ID_BYTES);
  nccl_comm comm = NULL;
  /* blocks until every rank joined: they all passed the plan's check just before */
  nccl_result r = nccl.comm_init_rank(&comm, world, u, rank);
  if (r != NCCL_SUCCESS) {
    snprintf(err, errlen, "ncclCommInitRank (rank %d of %d on cuda:%d): %s", rank, world, dev,
             result_text(r));
    return false;
  }
  pthread_mutex_lock(&nccl_lock);
  nccl_comm old = nccl.comm[dev];
  nccl.comm[dev] = comm, nccl.comm_world[dev] = world;
  pthread_mutex_unlock(&nccl_lock);
  if (old) nccl.comm_abort(old);
  return true;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Until the stream (the collective and what was queued before it) is done,
 * NCCL reports an error, or timeout_s passes: then the communicator is
 * aborted (a collective cannot be taken back) and forgotten. */
static bool wait_stream(int dev, nccl_comm comm, CUstream stream, double timeout_s,
                        const char *what, char *err, size_t errlen) {
  double start = now_s();
  long sleep_ns = 0;
  for (;;) {
    CUresult q = lm_cu()->stream_query(stream);
    if (q == LM_CUDA_SUCCESS) return true;
    char text[256];
    nccl_result async = NCCL_SUCCESS;
    nccl.comm_get_async_error(comm, &async);
    if (q != CUDA_ERROR_NOT_READY || (async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS) ||
        now_s() - start > timeout_s) {
      if (q != CUDA_ERROR_NOT_READY && q != LM_CUDA_SUCCESS)
        snprintf(err, errlen, "%s on cuda:%d: the stream failed with %s", what, dev,
                 lm_cu_error_text(q, text, sizeof text));
      else if (async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS)
        snprintf(err, errlen, "%s on cuda:%d: %s", what, dev, result_text(async));
      else
        snprintf(err, errlen, "%s on cuda:%d: the other ranks did not join within %g s", what, dev,
                 timeout_s);
      pthread_mutex_lock(&nccl_lock);
      if (nccl.comm[dev] == comm) nccl.comm[dev] = NULL;
      pthread_mutex_unlock(&nccl_lock);
      nccl.comm_abort(comm);
      return false;
    }
    if (now_s() - start > 200e-6) {
      sleep_ns = sleep_ns ? (sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2) : 10000;
      nanosleep(&(struct timespec){0, sleep_ns}, NULL);
    }
  }
}

bool lm_nccl_run(int dev, const lm_collective *c, const void *const *bufs, void *out,
                 double timeout_s, char *err, size_t errlen) {
  CUstream stream;
  if (lm_cuda_enter("loom_realize", dev, &stream) != LOOM_OK) {
    snprintf(err, errlen, "cuda:%d: %s", dev, loom_last_error());
    return false;
  }
  pthread_mutex_lock(&nccl_lock);
  nccl_comm comm = nccl.comm[dev];
  pthread_mutex_unlock(&nccl_lock);
  if (!comm) {
    snprintf(err, errlen, "cuda:%d has no NCCL communicator", dev);
    return false;
  }
  int dt = nccl_dtype(c->dtype);
  const void *in = bufs[c->in_pos[0]];
  size_t es = loom_dtype_size(c->dtype);
  nccl_result r;
  const char *what;
  if (c->op == LM_ALL_REDUCE) {
    what = "ncclAllReduce";
    if (c->nin > 1) { /* joined into the output, reduced in place */
      size_t at = 0;
      for (int k = 0; k < c->nin; k++) {
        size_t bytes = (size_t)c->in_count[k] * es;
        CUresult q =
            bytes ? lm_cu()->memcpy_dtod((CUdeviceptr)(uintptr_t)((char *)out + at),
                                         (CUdeviceptr)(uintptr_t)bufs[c->in_pos[k]], bytes, stream)
                  : LM_CUDA_SUCCESS;
        if (q != LM_CUDA_SUCCESS) {
          char text[256];
          snprintf(err, errlen, "joining a bucket on cuda:%d: %s", dev,
                   lm_cu_error_text(q, text, sizeof text));
          return false;
        }
        at += bytes;
      }
      in = out;
    }
    int op = c->reduce == LOOM_REDUCE_MAX    ? NCCL_MAX
             : c->reduce == LOOM_REDUCE_MIN  ? NCCL_MIN
             : c->reduce == LOOM_REDUCE_MEAN ? NCCL_AVG
                                             : NCCL_SUM;
    r = nccl.all_reduce(in, out, (size_t)c->count, dt, op, comm, stream);
  } else if (c->op == LM_BROADCAST) {
    what = "ncclBroadcast";
    r = nccl.broadcast(in, out, (size_t)c->count, dt, c->root, comm, stream);
  } else {
    what = "ncclAllGather";
    r = nccl.all_gather(in, out, (size_t)c->count, dt, comm, stream);
  }
  if (r != NCCL_SUCCESS) {
    snprintf(err, errlen, "%s on cuda:%d: %s", what, dev, result_text(r));
    return false;
  }
  return wait_stream(dev, comm, stream, timeout_s, what, err, errlen);
}
