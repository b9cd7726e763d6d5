/* Execution options: threads and fusion. Read from the environment once,
 * changed by the setters; atomics, since any thread may realize. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/blas.h"
#include "runtime/runtime.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic int num_threads = 1;
static _Atomic bool fusion = true;

static void read_environment(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n = cores > 0 ? (int)cores : 1;
  const char *env = getenv("LOOM_NUM_THREADS");
  if (env && atoi(env) > 0) n = atoi(env);
  if (n > LM_MAX_THREADS) n = LM_MAX_THREADS;
  atomic_store(&num_threads, n);
  atomic_store(&fusion, !lm_env_flag("LOOM_NO_FUSE"));
  lm_blas_single_threaded(); /* loom splits GEMMs over its own pool (runtime/gemm.c) */
}

int loom_num_threads(void) {
  pthread_once(&once, read_environment);
  return atomic_load(&num_threads);
}

loom_status loom_set_num_threads(int n) {
  pthread_once(&once, read_environment);
  if (n < 1 || n > LM_MAX_THREADS)
    return lm_fail(LOOM_ERR_VALUE, "loom_set_num_threads: %d is outside [1, %d]", n,
                   LM_MAX_THREADS);
  atomic_store(&num_threads, n);
  return LOOM_OK;
}

bool loom_fusion_enabled(void) {
  pthread_once(&once, read_environment);
  return atomic_load(&fusion);
}

void loom_set_fusion(bool enabled) {
  pthread_once(&once, read_environment);
  atomic_store(&fusion, enabled);
}
