/* The machine's limits, measured in the same run as the workloads: a STREAM-like
 * copy and triad (memory bandwidth) and OpenBLAS SGEMM (FLOP/s). */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>

#include "bench.h"

#define STREAM_N (64u * 1024u * 1024u) /* floats per array */
#define STREAM_TRIES 5
#define SGEMM_N 2048
#define SGEMM_TRIES 3
#define MAX_STREAM_THREADS 256

void openblas_set_num_threads(int num_threads);

typedef enum stream_kernel { STREAM_TOUCH, STREAM_COPY, STREAM_TRIAD } stream_kernel;

typedef struct stream_arrays {
  float *a, *b, *c;
} stream_arrays;

typedef struct stream_task {
  stream_kernel kernel;
  stream_arrays arrays;
  size_t begin, end;
} stream_task;

static void *stream_worker(void *arg) {
  const stream_task *t = arg;
  float *restrict a = t->arrays.a, *restrict b = t->arrays.b, *restrict c = t->arrays.c;
  const float scalar = 3.0f;
  switch (t->kernel) {
  case STREAM_TOUCH: /* first touch by the thread that will use the pages */
    for (size_t i = t->begin; i < t->end; i++) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.0f;
    break;
  case STREAM_COPY:
    for (size_t i = t->begin; i < t->end; i++) c[i] = a[i];
    break;
  case STREAM_TRIAD:
    for (size_t i = t->begin; i < t->end; i++) a[i] = b[i] + scalar * c[i];
    break;
  }
  return NULL;
}

/* Runs the kernel over the arrays split among threads; returns the seconds, or
 * a negative value when a thread could not start. */
static double run_stream_kernel(stream_kernel kernel, stream_arrays arrays, int threads) {
  pthread_t ids[MAX_STREAM_THREADS];
  stream_task tasks[MAX_STREAM_THREADS];
  size_t chunk = (STREAM_N + (size_t)threads - 1) / (size_t)threads;
  int started = 0;
  double t0 = bench_now();
  for (int i = 0; i < threads; i++) {
    size_t begin = (size_t)i * chunk, end = begin + chunk < STREAM_N ? begin + chunk : STREAM_N;
    tasks[i] = (stream_task){kernel, arrays, begin, end};
    if (pthread_create(&ids[i], NULL, stream_worker, &tasks[i]) != 0) break;
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
  return started == threads ? bench_now() - t0 : -1.0;
}

static double best_stream_gbs(stream_kernel kernel, stream_arrays arrays, int threads,
                              double bytes) {
  double best = 0.0;
  for (int i = 0; i < STREAM_TRIES; i++) {
    double s = run_stream_kernel(kernel, arrays, threads);
    if (s <= 0.0) return 0.0;
    if (bytes / s * 1e-9 > best) best = bytes / s * 1e-9;
  }
  return best;
}

static void measure_stream(int threads, bench_limits *limits) {
  size_t bytes = (size_t)STREAM_N * sizeof(float);
  stream_arrays arrays = {aligned_alloc(64, bytes), aligned_alloc(64, bytes),
                          aligned_alloc(64, bytes)};
  if (arrays.a && arrays.b && arrays.c && run_stream_kernel(STREAM_TOUCH, arrays, threads) > 0.0) {
    limits->copy_gbs = best_stream_gbs(STREAM_COPY, arrays, threads, 2.0 * (double)bytes);
    limits->triad_gbs = best_stream_gbs(STREAM_TRIAD, arrays, threads, 3.0 * (double)bytes);
  }
  free(arrays.a), free(arrays.b), free(arrays.c);
}

static void measure_sgemm(int threads, bench_limits *limits) {
  size_t count = (size_t)SGEMM_N * SGEMM_N;
  float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b),
        *c = malloc(count * sizeof *c);
  if (a && b && c) {
    for (size_t i = 0; i < count; i++) a[i] = 0.5f, b[i] = 0.25f, c[i] = 0.0f;
    openblas_set_num_threads(threads);
    double flops = 2.0 * SGEMM_N * (double)SGEMM_N * SGEMM_N;
    for (int i = 0; i <= SGEMM_TRIES; i++) { /* the first is a warm-up */
      double t0 = bench_now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, SGEMM_N, SGEMM_N, SGEMM_N, 1.0f, a,
                  SGEMM_N, b, SGEMM_N, 0.0f, c, SGEMM_N);
      double gflops = flops / (bench_now() - t0) * 1e-9;
      if (i > 0 && gflops > limits->sgemm_gflops) limits->sgemm_gflops = gflops;
    }
  }
  free(a), free(b), free(c);
}

bench_limits bench_measure_limits(int threads) {
  bench_limits limits = {.threads = threads};
  if (threads < 1) threads = 1;
  if (threads > MAX_STREAM_THREADS) threads = MAX_STREAM_THREADS;
  measure_stream(threads, &limits);
  measure_sgemm(threads, &limits);
  return limits;
}

double bench_bandwidth_limit(const bench_limits *limits) {
  if (limits->device_gbs > 0) return limits->device_gbs;
  return limits->copy_gbs > limits->triad_gbs ? limits->copy_gbs : limits->triad_gbs;
}
