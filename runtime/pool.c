/* See pool.h. Workers sleep on a condition variable between jobs. One job
 * runs at a time: a thread that finds the pool busy (another thread's
 * realization) runs its ranges itself, so callers never wait on each other.
 *
 * A program runs its kernels back to back, tens of microseconds each, and
 * waking a sleeping thread costs about as much (more in a VM): a worker that
 * finished a job, and a caller waiting for its parts, first spin for up to
 * SPIN_NS watching for the next job or the last part before they sleep. The
 * spin is bounded, unlike OpenBLAS's busy-waiting threads (runtime/gemm.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

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
  _Atomic uint64_t generation; /* written under lock; read without it to spin */
  job *current;
} pool = {PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          {0},
          0,
          0,
          NULL};

#define SPIN_NS 200000

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spins until done(arg) (true) or SPIN_NS pass (false). */
static bool spin_until(bool (*done)(void *), void *arg) {
  int64_t until = now_ns() + SPIN_NS;
  for (int i = 1;; i++) {
    if (done(arg)) return true;
    cpu_relax();
    if (i % 64 == 0 && now_ns() > until) return false;
  }
}

/* What the two spins wait for: a job after generation *seen, all parts of a job. */
static bool new_job_posted(void *seen) {
  return atomic_load_explicit(&pool.generation, memory_order_acquire) != *(uint64_t *)seen;
}

static bool all_parts_done(void *arg) {
  job *j = arg;
  return atomic_load_explicit(&j->parts_done, memory_order_acquire) >= j->parts;
}

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
    if (atomic_load(&pool.generation) == seen) { /* the next job is likely close */
      pthread_mutex_unlock(&pool.lock);
      spin_until(new_job_posted, &seen);
      pthread_mutex_lock(&pool.lock);
    }
    while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    seen = atomic_load(&pool.generation);
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
  atomic_fetch_add(&pool.generation, 1);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  run_parts(&j);
  spin_until(all_parts_done, &j);
  pthread_mutex_lock(&pool.lock);
  while (atomic_load(&j.parts_done) < parts || j.holders > 0)
    pthread_cond_wait(&pool.finished, &pool.lock);
  pool.current = NULL;
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.busy);
}
