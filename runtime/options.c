/* Execution options: threads, fusion and shape-generic kernels. Read from the environment once,
 * changed by the setters; atomics, since any thread may realize. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/blas.h"
#include "runtime/runtime.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic int num_threads = 1;
static _Atomic bool fusion = true;
static _Atomic int dynamic = LOOM_DYNAMIC_AUTO;

static int dynamic_from_env(void) {
  const char *env = getenv("LOOM_DYNAMIC");
  if (!env) return LOOM_DYNAMIC_AUTO;
  if (strcmp(env, "off") == 0 || strcmp(env, "0") == 0) return LOOM_DYNAMIC_OFF;
  if (strcmp(env, "always") == 0) return LOOM_DYNAMIC_ALWAYS;
  if (strcmp(env, "auto") != 0)
    fprintf(stderr, "loom: LOOM_DYNAMIC=%s is not auto, off or always: using auto\n", env);
  return LOOM_DYNAMIC_AUTO;
}

static void read_environment(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n = cores > 0 ? (int)cores : 1;
  const char *env = getenv("LOOM_NUM_THREADS");
  if (env && atoi(env) > 0) n = atoi(env);
  if (n > LM_MAX_THREADS) n = LM_MAX_THREADS;
  atomic_store(&num_threads, n);
  atomic_store(&fusion, !lm_env_flag("LOOM_NO_FUSE"));
  atomic_store(&dynamic, dynamic_from_env());
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

loom_dynamic loom_dynamic_mode(void) {
  pthread_once(&once, read_environment);
  return (loom_dynamic)atomic_load(&dynamic);
}

loom_status loom_set_dynamic(loom_dynamic mode) {
  pthread_once(&once, read_environment);
  if (mode != LOOM_DYNAMIC_AUTO && mode != LOOM_DYNAMIC_OFF && mode != LOOM_DYNAMIC_ALWAYS)
    return lm_fail(LOOM_ERR_VALUE, "loom_set_dynamic: %d is not LOOM_DYNAMIC_AUTO, _OFF or _ALWAYS",
                   (int)mode);
  atomic_store(&dynamic, mode);
  return LOOM_OK;
}
