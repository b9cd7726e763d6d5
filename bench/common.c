/* Small helpers shared by the workloads and the runner. */
#include <stdlib.h>
#include <time.h>

#include "bench.h"

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *values, int n) {
  if (n <= 0) return 0.0;
  qsort(values, (size_t)n, sizeof *values, compare_doubles);
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

loom_status bench_first_error(loom_status a, loom_status b) { return a != LOOM_OK ? a : b; }

loom_status bench_realize(loom_tensor *t) {
  loom_status status = loom_status_of(t);
  if (status == LOOM_OK) status = loom_realize(t);
  /* device work is queued: a timing must include it */
  return status != LOOM_OK ? status : loom_synchronize(loom_device_of(t));
}

loom_status bench_uniform_input(uint64_t seed, loom_shape shape, double lo, double hi,
                                loom_tensor **out) {
  *out = NULL;
  loom_status status = LOOM_OK;
  loom_scope_begin();
  loom_tensor *u = loom_rand_key(loom_key_new(seed), shape, LOOM_F32, loom_default_device());
  loom_tensor *scaled = loom_add_s(loom_mul_s(u, hi - lo), lo);
  status = bench_realize(scaled);
  if (status == LOOM_OK) *out = loom_keep(scaled);
  status = bench_first_error(status, loom_scope_end());
  if (status != LOOM_OK && *out) {
    loom_free(*out);
    *out = NULL;
  }
  return status;
}

void bench_free_all(loom_tensor **ts, int n) {
  for (int i = 0; i < n; i++) {
    loom_free(ts[i]);
    ts[i] = NULL;
  }
}

loom_status bench_inputs_new(void **state, int n, const loom_shape *shapes) {
  *state = NULL;
  if (n < 0 || n > BENCH_MAX_INPUTS) return LOOM_ERR_VALUE;
  bench_inputs *in = calloc(1, sizeof *in);
  if (!in) return LOOM_ERR_OOM;
  loom_status status = LOOM_OK;
  for (int i = 0; i < n && status == LOOM_OK; i++) {
    status = bench_uniform_input(1000u + (uint64_t)i, shapes[i], -1.0, 1.0, &in->t[i]);
    in->n = i + 1;
  }
  if (status != LOOM_OK) {
    bench_inputs_free(in);
    return status;
  }
  *state = in;
  return LOOM_OK;
}

void bench_inputs_free(void *state) {
  bench_inputs *in = state;
  if (!in) return;
  bench_free_all(in->t, in->n);
  free(in);
}

loom_status bench_realize_in_scope(bench_graph_builder build, const bench_inputs *in) {
  loom_scope_begin();
  loom_status status = bench_realize(build(in->t));
  return bench_first_error(status, loom_scope_end());
}
