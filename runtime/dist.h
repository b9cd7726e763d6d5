/* Collectives across processes (runtime/dist.c): MPI through the plugin
 * libloom_mpi.so, opened at run time. */
#ifndef LOOM_RUNTIME_DIST_H
#define LOOM_RUNTIME_DIST_H

#include "passes/passes.h"

/* The number of ranks for a collective recorded now by op; LOOM_ERR_DIST
 * (recorded as the thread's error) before loom_dist_init. */
loom_status lm_dist_world(const char *op, int *world);
/* Before p's first collective runs: every rank runs the same sequence of
 * collectives (ops, dtypes, element counts, reductions, roots), compared by
 * a 64-bit signature through one small all-reduce. LOOM_ERR_DIST naming the
 * collective op about to run when they differ (and later collectives are refused). */
loom_status lm_dist_check_plan(const lm_schedule *p, lm_op op);
/* Runs collective step c: bufs holds every position's buffer (its sources at
 * c->in_pos), out the step's. */
loom_status lm_dist_run(const lm_collective *c, const void *const *bufs, void *out);

#endif
