/*
 * The worker threads of an exported library (io/export_source.c copies
 * this file into every <name>_model.c, after defining its numbers):
 * EXPORT_THREADS_ENV ("<NAME>_THREADS") of them, the CPUs online by default,
 * counting the caller, started at the first call (start_pool, through
 * pool_once). One call at a time runs its steps' parts on them; a call that
 * finds them busy runs its parts itself. A part's outputs are its own and
 * every one is computed as on one thread, so the bits never depend on the
 * threads. A kernel step of fewer than EXPORT_PARALLEL_WORK element visits
 * runs on the calling thread (as runtime/exec.c decides).
 */
#define LOOM_EXPORT_THREAD_POOL

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef void (*part_fn)(const void *job, int part, int parts);
static struct {
  pthread_mutex_t busy; /* held by the call using the workers */
  pthread_mutex_t lock; /* guards the waits */
  pthread_cond_t go, done;
  _Atomic unsigned long long round; /* a new job: fn, job, parts are set */
  _Atomic int pending;              /* workers yet to finish this round */
  int threads, parts, quit;
  part_fn fn;
  const void *job;
  pthread_t workers[256];
} pool = {PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          0,
          0,
          1,
          0,
          0,
          NULL,
          NULL,
          {0}};
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* Steps take tens of microseconds and waking a thread about as long: a
 * worker done with a part, and a caller waiting for the parts, spin this
 * long before they sleep. */
#define SPIN_NS 200000
#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  unsigned long long seen = 0;
  for (;;) {
    for (int64_t t0 = now_ns(); atomic_load(&pool.round) == seen && now_ns() - t0 < SPIN_NS;)
      CPU_RELAX();
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.round) == seen && !pool.quit) pthread_cond_wait(&pool.go, &pool.lock);
    int quit = pool.quit;
    pthread_mutex_unlock(&pool.lock);
    if (quit) return NULL;
    seen = atomic_load(&pool.round);
    if (id < pool.parts) pool.fn(pool.job, id, pool.parts);
    if (atomic_fetch_sub(&pool.pending, 1) == 1) {
      pthread_mutex_lock(&pool.lock);
      pthread_cond_signal(&pool.done);
      pthread_mutex_unlock(&pool.lock);
    }
  }
}

/* dlclose: the workers end before the code they run is unmapped */
__attribute__((destructor)) static void stop_pool(void) {
  pthread_mutex_lock(&pool.lock);
  pool.quit = 1;
  pthread_cond_broadcast(&pool.go);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 1; i < pool.threads; i++) pthread_join(pool.workers[i], NULL);
}

static void start_pool(void) {
  const char *e = getenv(EXPORT_THREADS_ENV);
  long n = e && *e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > 256) n = 256;
  pthread_attr_t attr;
  if (n > 1 && pthread_attr_init(&attr) == 0) {
    pthread_attr_setstacksize(&attr, (size_t)1 << 20);
    for (long i = 1; i < n; i++) {
      if (pthread_create(&pool.workers[i], &attr, worker, (void *)(intptr_t)i) != 0) break;
      pool.threads++;
    }
    pthread_attr_destroy(&attr);
  }
}

static void run_parts(part_fn fn, const void *job, int parts) {
  if (parts > pool.threads) parts = pool.threads;
  if (parts > 1 && pthread_mutex_trylock(&pool.busy) == 0) {
    pool.fn = fn, pool.job = job, pool.parts = parts;
    atomic_store(&pool.pending, pool.threads - 1);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.round, 1);
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.lock);
    fn(job, 0, parts);
    for (int64_t t0 = now_ns(); atomic_load(&pool.pending) > 0 && now_ns() - t0 < SPIN_NS;)
      CPU_RELAX();
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.pending) > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
    return;
  }
  for (int p = 0; p < parts; p++) fn(job, p, parts);
}

struct kernel_job {
  void (*fn)(void *const *args, int64_t begin, int64_t end);
  void *const *args;
  int64_t points, unit; /* a part is whole units of points */
};

static void kernel_part(const void *job, int part, int parts) {
  const struct kernel_job *k = job;
  int64_t units = (k->points + k->unit - 1) / k->unit;
  int64_t begin = units * part / parts * k->unit;
  int64_t end = units * (part + 1) / parts * k->unit;
  if (end > k->points) end = k->points;
  if (end > begin) k->fn(k->args, begin, end);
}

/* A kernel's points over the pool in parts of whole rows of `row` points
 * (a row kernel's: its sums are then the same on any number of threads);
 * below EXPORT_PARALLEL_WORK element visits, on this thread. */
static void run_kernel_rows(void (*fn)(void *const *args, int64_t begin, int64_t end),
                            void *const *args, int64_t points, int64_t visits, int64_t row) {
  if (points <= 0) return;
  if (visits < EXPORT_PARALLEL_WORK) {
    fn(args, 0, points);
    return;
  }
  const struct kernel_job job = {fn, args, points, row > 0 ? row : 1};
  run_parts(kernel_part, &job, pool.threads);
}

static void run_kernel(void (*fn)(void *const *args, int64_t begin, int64_t end), void *const *args,
                       int64_t points, int64_t visits) {
  run_kernel_rows(fn, args, points, visits, 1);
}
