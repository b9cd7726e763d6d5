/* The ABI between libloom (runtime/dist.c) and its MPI plugin, libloom_mpi.so
 * (runtime/mpi/loom_mpi.c, built against the system's mpi.h): libloom opens
 * the plugin at run time, so that neither libloom nor a program using it
 * depends on an MPI library. The plugin exports one function, loom_mpi_api,
 * returning this table; every call returns LM_MPI_OK, LM_MPI_FAILED or
 * LM_MPI_TIMED_OUT, with the reason written into err; a failed start leaves no
 * request. Counts are elements
 * of a loom_dtype (any size: the plugin splits what MPI's int count cannot
 * hold). */
#ifndef LOOM_RUNTIME_MPI_LOOM_MPI_H
#define LOOM_RUNTIME_MPI_LOOM_MPI_H

#include <stddef.h>
#include <stdint.h>

#define LM_MPI_ABI 2
#define LM_MPI_OK 0
#define LM_MPI_FAILED 1
#define LM_MPI_TIMED_OUT 2

/* Reductions the plugin combines with (an all-reduce's mean is a sum here). */
typedef enum lm_mpi_op { LM_MPI_SUM, LM_MPI_MAX, LM_MPI_MIN } lm_mpi_op;

/* A started collective (the plugin's): finished by test or wait. */
typedef struct lm_mpi_request lm_mpi_request;

typedef struct lm_mpi_api {
  int abi; /* LM_MPI_ABI */
  /* The MPI library's own version string. */
  const char *(*version)(void);
  /* MPI_Init_thread (MPI_THREAD_MULTIPLE asked, at least MPI_THREAD_SERIALIZED
     needed), MPI_COMM_WORLD's rank and size. */
  int (*init)(int *argc, char ***argv, int *rank, int *size, char *err, size_t errlen);
  int (*finalize)(char *err, size_t errlen);
  /* An all-reduce, started and left running (in == out: in place): the
     caller lets MPI progress with test between its own work and ends it with
     wait; in and out stay untouched until then. dtype: a loom_dtype other
     than BF16 and F16 (the caller widens those). */
  int (*all_reduce_start)(const void *in, void *out, int64_t count, int dtype, lm_mpi_op op,
                          lm_mpi_request **request, char *err, size_t errlen);
  /* *done: whether it completed (the request is then gone) */
  int (*test)(lm_mpi_request *request, int *done, char *err, size_t errlen);
  /* Until complete, or timeout_s after the start: LM_MPI_TIMED_OUT (the
     request is gone either way; MPI's own cannot be freed while it runs,
     and stays with MPI). */
  int (*wait)(lm_mpi_request *request, double timeout_s, char *err, size_t errlen);
  int (*broadcast)(void *buf, int64_t bytes, int root, double timeout_s, char *err, size_t errlen);
  /* out holds every rank's `bytes` in rank order */
  int (*all_gather)(const void *in, void *out, int64_t bytes, double timeout_s, char *err,
                    size_t errlen);
} lm_mpi_api;

typedef const lm_mpi_api *(*lm_mpi_api_fn)(void);
#define LM_MPI_API_SYMBOL "loom_mpi_api"

#endif
