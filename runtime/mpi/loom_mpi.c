/* libloom_mpi.so: loom's collectives on the system's MPI (runtime/mpi/loom_mpi.h
 * is the ABI libloom opens it by). Built only where CMake finds MPI.
 *
 * Every collective is MPI's non-blocking form, polled until it completes or
 * the timeout passes (an all-reduce's polls are the caller's, between its
 * own work): a rank that died or hangs then fails the collective
 * instead of hanging this process forever. (The request cannot be taken back:
 * after a timeout the world is unusable, and libloom refuses later
 * collectives.) Counts past MPI's int are sent in chunks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom.h"
#include "runtime/mpi/loom_mpi.h"

/* MPI's int counts: chunks of at most this many elements */
#define CHUNK ((int64_t)1 << 30)

static void say(char *err, size_t len, const char *what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, text, &n) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
  snprintf(err, len, "%s: %s", what, text);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A started collective: its chunks' requests and when it began. */
struct lm_mpi_request {
  double started;
  int n;
  const char *what;
  MPI_Request r[];
};

/* Whether every chunk of q completed (testing each lets MPI progress). */
static int test_all(lm_mpi_request *q, int *done, char *err, size_t len) {
  int flag = 0, code = MPI_Testall(q->n, q->r, &flag, MPI_STATUSES_IGNORE);
  if (code != MPI_SUCCESS) {
    say(err, len, q->what, code);
    return LM_MPI_FAILED;
  }
  *done = flag;
  return LM_MPI_OK;
}

static int test_request(lm_mpi_request *q, int *done, char *err, size_t len) {
  int st = test_all(q, done, err, len);
  if (st != LM_MPI_OK || *done) free(q);
  return st;
}

/* Polls q until done: back to back for the first 200 us (most collectives of
 * a step end there), then with sleeps growing to 1 ms. The timeout counts
 * from the start. */
static int wait_request(lm_mpi_request *q, double timeout_s, char *err, size_t len) {
  long sleep_ns = 0;
  double entered = now_s();
  for (;;) {
    int done = 0, st = test_all(q, &done, err, len);
    if (st != LM_MPI_OK || done) {
      free(q);
      return st;
    }
    double now = now_s();
    if (now - q->started > timeout_s) {
      snprintf(err, len, "%s: the other ranks did not join within %g s", q->what, timeout_s);
      free(q); /* MPI's requests stay with MPI: a running collective cannot be freed */
      return LM_MPI_TIMED_OUT;
    }
    if (now - entered > 200e-6) {
      sleep_ns = sleep_ns ? (sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2) : 10000;
      nanosleep(&(struct timespec){0, sleep_ns}, NULL);
    }
  }
}

/* One collective of a single chunk, started, waited for. */
static int wait_one(MPI_Request r, double timeout_s, const char *what, char *err, size_t len) {
  lm_mpi_request *q = malloc(sizeof *q + sizeof(MPI_Request));
  if (!q) {
    snprintf(err, len, "%s: out of memory", what);
    return LM_MPI_FAILED; /* (r runs on; the world is refused from here) */
  }
  q->started = now_s(), q->n = 1, q->what = what, q->r[0] = r;
  return wait_request(q, timeout_s, err, len);
}

static const char *version(void) {
  static char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  if (MPI_Get_library_version(text, &n) != MPI_SUCCESS) return "MPI (version unknown)";
  text[strcspn(text, "\n,")] = 0; /* Open MPI's runs to several lines */
  return text;
}

static int init(int *argc, char ***argv, int *rank, int *size, char *err, size_t len) {
  int ready = 0, provided = 0, code;
  MPI_Initialized(&ready);
  if (!ready &&
      (code = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS) {
    say(err, len, "MPI_Init_thread", code);
    return LM_MPI_FAILED;
  }
  if (ready) MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    snprintf(err, len, "MPI gives thread level %d; loom needs MPI_THREAD_SERIALIZED or more",
             provided);
    return LM_MPI_FAILED;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return LM_MPI_OK;
}

static int finalize(char *err, size_t len) {
  int done = 0, code;
  MPI_Finalized(&done);
  if (!done && (code = MPI_Finalize()) != MPI_SUCCESS) {
    say(err, len, "MPI_Finalize", code);
    return LM_MPI_FAILED;
  }
  return LM_MPI_OK;
}

static MPI_Datatype mpi_type(int dtype) {
  switch (dtype) {
  case LOOM_F32: return MPI_FLOAT;
  case LOOM_F64: return MPI_DOUBLE;
  case LOOM_I32: return MPI_INT32_T;
  case LOOM_I64: return MPI_INT64_T;
  case LOOM_I8: return MPI_INT8_T;
  case LOOM_I16: return MPI_INT16_T;
  case LOOM_U16: return MPI_UINT16_T;
  case LOOM_U32: return MPI_UINT32_T;
  case LOOM_U64: return MPI_UINT64_T;
  case LOOM_U8:
  case LOOM_BOOL: return MPI_UINT8_T; /* 0 or 1: max is any, min is all */
  default: return MPI_DATATYPE_NULL;
  }
}

static int all_reduce_start(const void *in, void *out, int64_t count, int dtype, lm_mpi_op op,
                            lm_mpi_request **request, char *err, size_t len) {
  MPI_Datatype t = mpi_type(dtype);
  MPI_Op o = op == LM_MPI_SUM ? MPI_SUM : op == LM_MPI_MAX ? MPI_MAX : MPI_MIN;
  *request = NULL;
  if (t == MPI_DATATYPE_NULL) {
    snprintf(err, len, "MPI_Iallreduce: no MPI type for dtype %d", dtype);
    return LM_MPI_FAILED;
  }
  int es = 0;
  MPI_Type_size(t, &es);
  int chunks = count > 0 ? (int)((count + CHUNK - 1) / CHUNK) : 0;
  lm_mpi_request *q = malloc(sizeof *q + sizeof(MPI_Request) * (size_t)chunks);
  if (!q) {
    snprintf(err, len, "MPI_Iallreduce: out of memory");
    return LM_MPI_FAILED;
  }
  q->started = now_s(), q->n = 0, q->what = "MPI_Iallreduce";
  for (int64_t at = 0; at < count; at += CHUNK) {
    int n = (int)(count - at < CHUNK ? count - at : CHUNK);
    const void *send = in == out ? MPI_IN_PLACE : (const char *)in + at * es;
    int code = MPI_Iallreduce(send, (char *)out + at * es, n, t, o, MPI_COMM_WORLD, &q->r[q->n]);
    if (code != MPI_SUCCESS) { /* (chunks started run on; the world is refused from here) */
      say(err, len, "MPI_Iallreduce", code);
      free(q);
      return LM_MPI_FAILED;
    }
    q->n++;
  }
  *request = q;
  return LM_MPI_OK;
}

static int broadcast(void *buf, int64_t bytes, int root, double timeout_s, char *err, size_t len) {
  for (int64_t at = 0; at < bytes; at += CHUNK) {
    int n = (int)(bytes - at < CHUNK ? bytes - at : CHUNK);
    MPI_Request r;
    int code = MPI_Ibcast((char *)buf + at, n, MPI_BYTE, root, MPI_COMM_WORLD, &r);
    if (code != MPI_SUCCESS) {
      say(err, len, "MPI_Ibcast", code);
      return LM_MPI_FAILED;
    }
    int st = wait_one(r, timeout_s, "MPI_Ibcast", err, len);
    if (st != LM_MPI_OK) return st;
  }
  return LM_MPI_OK;
}

static int all_gather(const void *in, void *out, int64_t bytes, double timeout_s, char *err,
                      size_t len) {
  if (bytes > CHUNK) { /* each rank's part at its own offset: in pieces through a derived type */
    snprintf(err, len, "MPI_Iallgather: %lld bytes a rank is more than loom gathers (%lld)",
             (long long)bytes, (long long)CHUNK);
    return LM_MPI_FAILED;
  }
  MPI_Request r;
  int code =
      MPI_Iallgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &r);
  if (code != MPI_SUCCESS) {
    say(err, len, "MPI_Iallgather", code);
    return LM_MPI_FAILED;
  }
  return wait_one(r, timeout_s, "MPI_Iallgather", err, len);
}

static const lm_mpi_api api = {LM_MPI_ABI,   version,      init,      finalize,  all_reduce_start,
                               test_request, wait_request, broadcast, all_gather};

__attribute__((visibility("default"))) const lm_mpi_api *loom_mpi_api(void) { return &api; }
