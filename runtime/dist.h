/* Collectives across processes (runtime/dist.c): MPI through the plugin
 * libloom_mpi.so, opened at run time. */
#ifndef LOOM_RUNTIME_DIST_H
#define LOOM_RUNTIME_DIST_H

#include "passes/passes.h"

/* The number of ranks for a collective recorded now by op; LOOM_ERR_DIST
 * (recorded as the thread's error) before loom_dist_init. */
loom_status lm_dist_world(const char *op, int *world);
/* A program's collectives run between lm_dist_begin and lm_dist_end (a lock:
 * the collectives of two threads never interleave); every call below is
 * made between them. */
void lm_dist_begin(void);
void lm_dist_end(void);
/* How a rank runs its collectives: on the CPU, or on device buffers through
 * NCCL or through the host. */
enum { LM_DIST_CPU, LM_DIST_NCCL, LM_DIST_HOST };
/* Before p's first collective runs: every rank runs the same sequence of
 * collectives (ops, dtypes, element counts, reductions, roots) the same
 * way (path), compared by a 64-bit signature through one small all-reduce.
 * LOOM_ERR_DIST naming the collective op about to run when they differ (and
 * later collectives are refused). */
loom_status lm_dist_check_plan(const lm_plan *p, lm_op op, int path);
/* How this rank runs collectives on device buffers: through NCCL when it is
 * there (a collective NCCL does not run, lm_nccl_runs, goes through the host). */
int lm_dist_device_path(void);
/* Runs collective c on device dev's buffers through NCCL (the device's
 * communicator made at its first collective, rank 0's id sent over MPI). */
loom_status lm_dist_run_nccl(const lm_collective *c, int dev, const void *const *bufs, void *out);
/* Runs collective step c: bufs holds every position's buffer (its sources at
 * c->in_pos), out the step's. */
loom_status lm_dist_run(const lm_collective *c, const void *const *bufs, void *out);

/* An all-reduce started and left running while later steps compute. */
typedef struct lm_dist_pending {
  const lm_collective *c;
  void *out;
  struct lm_mpi_request *request; /* NULL once complete */
  float *wide;                    /* BF16 / F16: reduced widened */
  double timeout;
  int rank;
  bool broken; /* a poll failed (and reported it) */
} lm_dist_pending;
/* Starts all-reduce step c (as lm_dist_run would run it): its sources must
 * stay until lm_dist_finish, and out is written by then. */
loom_status lm_dist_start(const lm_collective *c, const void *const *bufs, void *out,
                          lm_dist_pending *q);
/* Lets MPI progress q (an error is reported once; finish still ends q). */
loom_status lm_dist_poll(lm_dist_pending *q);
/* Waits for q (within the timeout from its start) and completes out. */
loom_status lm_dist_finish(lm_dist_pending *q);

#endif
