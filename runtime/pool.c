/* See pool.h. Workers sleep on a condition variable between jobs. One job
 * runs at a time: a thread that finds the pool busy (another thread's
 * realization) runs its ranges itself, so callers never wait on each other. */
#include <pthread.h>
#include <stdatomic.h>

#include "runtime/pool.h"
#include "runtime/runtime.h"

typedef struct job {
  lm_range_fn fn;
  void *ctx;
  int64_t n;
  int parts;
  _Atomic int next_part;
  _Atomic int parts_done;
  int holders; /* workers that took the job and may still touch it (pool.lock) */
} job;

/* The pool (global state the design names), guarded by `lock`; `busy` lets
 * one job in at a time. */
static struct {
  pthread_mutex_t busy;
  pthread_mutex_t lock;
  pthread_cond_t wake, finished;
  pthread_t threads[LM_MAX_THREADS];
  int nworkers;
  uint64_t generation;
  job *current;
} pool = {PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          {0},
          0,
          0,
          NULL};

static void run_parts(job *j) {
  for (;;) {
    int p = atomic_fetch_add(&j->next_part, 1);
    if (p >= j->parts) return;
    int64_t begin = j->n * p / j->parts, end = j->n * (p + 1) / j->parts;
    if (begin < end) j->fn(j->ctx, begin, end);
    if (atomic_fetch_add(&j->parts_done, 1) + 1 == j->parts) {
      pthread_mutex_lock(&pool.lock);
      pthread_cond_broadcast(&pool.finished);
      pthread_mutex_unlock(&pool.lock);
    }
  }
}

static void *worker(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    seen = pool.generation;
    job *j = pool.current;
    if (!j) continue;
    j->holders++;
    pthread_mutex_unlock(&pool.lock);
    run_parts(j);
    pthread_mutex_lock(&pool.lock);
    /* the job lives on its caller's stack: let go before the caller returns */
    if (--j->holders == 0) pthread_cond_broadcast(&pool.finished);
  }
  return NULL;
}

/* Called with `busy` held. Workers are never stopped: they sleep between jobs. */
static void ensure_workers(int wanted) {
  while (pool.nworkers < wanted && pool.nworkers < LM_MAX_THREADS - 1) {
    if (pthread_create(&pool.threads[pool.nworkers], NULL, worker, NULL) != 0) return;
    pthread_detach(pool.threads[pool.nworkers]);
    pool.nworkers++;
  }
}

void lm_parallel_for(int64_t n, int parts, lm_range_fn fn, void *ctx) {
  if (parts < 1) parts = 1;
  job j = {.fn = fn, .ctx = ctx, .n = n, .parts = parts};
  atomic_init(&j.next_part, 0);
  atomic_init(&j.parts_done, 0);
  if (parts == 1 || pthread_mutex_trylock(&pool.busy) != 0) {
    run_parts(&j);
    return;
  }
  ensure_workers(parts - 1);
  pthread_mutex_lock(&pool.lock);
  pool.current = &j;
  pool.generation++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  run_parts(&j);
  pthread_mutex_lock(&pool.lock);
  while (atomic_load(&j.parts_done) < parts || j.holders > 0)
    pthread_cond_wait(&pool.finished, &pool.lock);
  pool.current = NULL;
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.busy);
}
