/* A stand-in for libloom_mpi.so (runtime/mpi/loom_mpi.h) for tests: a world
 * of one process without MPI, so that the sanitizer builds check loom's own
 * collective paths (MPI's allocations are not theirs to judge), and failures
 * on demand: FAKE_MPI_FAIL=timeout makes the n-th collective (FAKE_MPI_FAIL_AT,
 * default 1) time out as a dead rank would, FAKE_MPI_FAIL=init refuses to
 * start. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "runtime/mpi/loom_mpi.h"

static int calls;

static size_t dtype_size(int dtype) {
  switch (dtype) {
  case LOOM_F64:
  case LOOM_I64: return 8;
  case LOOM_F32:
  case LOOM_I32: return 4;
  case LOOM_BF16:
  case LOOM_F16: return 2;
  default: return 1;
  }
}

static const char *version(void) { return "fake MPI (a world of one, tests/support/fake_mpi.c)"; }

/* Whether this collective is the one FAKE_MPI_FAIL makes time out. */
static bool fails_now(void) {
  const char *mode = getenv("FAKE_MPI_FAIL"), *at = getenv("FAKE_MPI_FAIL_AT");
  calls++;
  return mode && strcmp(mode, "timeout") == 0 && calls == (at ? atoi(at) : 1);
}

static int timed_out(const char *what, double timeout_s, char *err, size_t len) {
  snprintf(err, len, "%s: the other ranks did not join within %g s", what, timeout_s);
  return LM_MPI_TIMED_OUT;
}

static int fail_now(const char *what, double timeout_s, char *err, size_t len) {
  return fails_now() ? timed_out(what, timeout_s, err, len) : LM_MPI_OK;
}

/* An all-reduce of one rank is done at its start, unless it is the one that
 * never completes. */
struct lm_mpi_request {
  bool hangs;
};

static int init(int *argc, char ***argv, int *rank, int *size, char *err, size_t len) {
  (void)argc, (void)argv;
  const char *mode = getenv("FAKE_MPI_FAIL");
  if (mode && strcmp(mode, "init") == 0) {
    snprintf(err, len, "MPI_Init_thread: refused (FAKE_MPI_FAIL=init)");
    return LM_MPI_FAILED;
  }
  *rank = 0, *size = 1;
  return LM_MPI_OK;
}

static int finalize(char *err, size_t len) {
  (void)err, (void)len;
  return LM_MPI_OK;
}

static int all_reduce_start(const void *in, void *out, int64_t count, int dtype, lm_mpi_op op,
                            lm_mpi_request **request, char *err, size_t len) {
  (void)op;
  *request = malloc(sizeof **request);
  if (!*request) {
    snprintf(err, len, "MPI_Iallreduce: out of memory");
    return LM_MPI_FAILED;
  }
  (*request)->hangs = fails_now();
  if (in != out) memcpy(out, in, (size_t)count * dtype_size(dtype));
  return LM_MPI_OK;
}

static int test_request(lm_mpi_request *q, int *done, char *err, size_t len) {
  (void)err, (void)len;
  *done = !q->hangs;
  if (*done) free(q);
  return LM_MPI_OK;
}

static int wait_request(lm_mpi_request *q, double timeout_s, char *err, size_t len) {
  bool hangs = q->hangs;
  free(q);
  return hangs ? timed_out("MPI_Iallreduce", timeout_s, err, len) : LM_MPI_OK;
}

static int broadcast(void *buf, int64_t bytes, int root, double timeout_s, char *err, size_t len) {
  (void)buf, (void)bytes, (void)root;
  return fail_now("MPI_Ibcast", timeout_s, err, len);
}

static int all_gather(const void *in, void *out, int64_t bytes, double timeout_s, char *err,
                      size_t len) {
  int st = fail_now("MPI_Iallgather", timeout_s, err, len);
  if (st == LM_MPI_OK) memcpy(out, in, (size_t)bytes);
  return st;
}

static const lm_mpi_api api = {LM_MPI_ABI,   version,      init,      finalize,  all_reduce_start,
                               test_request, wait_request, broadcast, all_gather};

__attribute__((visibility("default"))) const lm_mpi_api *loom_mpi_api(void) { return &api; }
