/* Runs one workload: the first call (cold), warm-up, the median of repeats with
 * kernels per call, the peak bytes of one call, the same with fusion off, and
 * the direct-library baseline. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* What a stretch of calls took and did. */
typedef struct call_measure {
  double seconds;
  loom_stats delta;
} call_measure;

static loom_stats stats_delta(loom_stats before, loom_stats after) {
  loom_stats d = {0};
  d.graphs_compiled = after.graphs_compiled - before.graphs_compiled;
  d.graph_cache_hits = after.graph_cache_hits - before.graph_cache_hits;
  d.kernels_compiled = after.kernels_compiled - before.kernels_compiled;
  d.kernel_cache_hits = after.kernel_cache_hits - before.kernel_cache_hits;
  d.disk_cache_hits = after.disk_cache_hits - before.disk_cache_hits;
  d.kernels_launched = after.kernels_launched - before.kernels_launched;
  d.gemm_calls = after.gemm_calls - before.gemm_calls;
  d.compile_ns = after.compile_ns - before.compile_ns;
  d.realizations = after.realizations - before.realizations;
  d.nodes_recorded = after.nodes_recorded - before.nodes_recorded;
  return d;
}

static void stats_accumulate(loom_stats *sum, loom_stats d) {
  sum->kernels_compiled += d.kernels_compiled;
  sum->kernel_cache_hits += d.kernel_cache_hits;
  sum->disk_cache_hits += d.disk_cache_hits;
  sum->kernels_launched += d.kernels_launched;
  sum->gemm_calls += d.gemm_calls;
}

/* One call, timed by the harness unless the call reports its own time and stats. */
static loom_status timed_call(const bench_workload *w, void *state, call_measure *m) {
  bench_call_report report = {0};
  loom_stats before = loom_get_stats();
  double t0 = bench_now();
  loom_status status = w->run(state, &report);
  double seconds = bench_now() - t0;
  loom_stats after = loom_get_stats();
  m->seconds = report.has_seconds ? report.seconds : seconds;
  m->delta = report.has_stats ? report.stats : stats_delta(before, after);
  return status;
}

static int calls_per_sample(const bench_workload *w) {
  return w->calls_per_sample > 0 ? w->calls_per_sample : 1;
}

/* A sample: calls_per_sample calls; seconds per call, stats summed. */
static loom_status timed_sample(const bench_workload *w, void *state, call_measure *sample) {
  int calls = calls_per_sample(w);
  memset(sample, 0, sizeof *sample);
  for (int i = 0; i < calls; i++) {
    call_measure one;
    loom_status status = timed_call(w, state, &one);
    if (status != LOOM_OK) return status;
    sample->seconds += one.seconds;
    stats_accumulate(&sample->delta, one.delta);
  }
  sample->seconds /= calls;
  return LOOM_OK;
}

static loom_status warm_up(const bench_workload *w, void *state, int samples) {
  for (int i = 0; i < samples; i++) {
    call_measure ignored;
    loom_status status = timed_sample(w, state, &ignored);
    if (status != LOOM_OK) return status;
  }
  return LOOM_OK;
}

/* Median seconds per call over `repeats` samples, and kernels/GEMMs per call. */
static loom_status measure_repeats(const bench_workload *w, void *state, int repeats,
                                   double *median_s, double *kernels_per_call,
                                   double *gemm_per_call) {
  double *samples = malloc((size_t)repeats * sizeof *samples);
  if (!samples) return LOOM_ERR_OOM;
  loom_stats total = {0};
  loom_status status = LOOM_OK;
  for (int i = 0; i < repeats && status == LOOM_OK; i++) {
    call_measure sample;
    status = timed_sample(w, state, &sample);
    samples[i] = sample.seconds;
    stats_accumulate(&total, sample.delta);
  }
  if (status == LOOM_OK) {
    double calls = (double)repeats * calls_per_sample(w);
    *median_s = bench_median(samples, repeats);
    *kernels_per_call = (double)total.kernels_launched / calls;
    *gemm_per_call = (double)total.gemm_calls / calls;
  }
  free(samples);
  return status;
}

static loom_status measure_first_call(const bench_workload *w, void *state, bench_result *r) {
  call_measure first;
  loom_status status = timed_call(w, state, &first);
  r->first_s = first.seconds;
  r->first_kernels_compiled = first.delta.kernels_compiled;
  r->first_disk_hits = first.delta.disk_cache_hits;
  r->first_memory_hits = first.delta.kernel_cache_hits;
  return status;
}

/* The memory of the device the workloads run on. */
static void memory_of(loom_stats s, uint64_t *live, uint64_t *peak) {
  bool device = loom_default_device().type == LOOM_DEVICE_CUDA;
  *live = device ? s.device_bytes_live : s.bytes_live;
  *peak = device ? s.device_bytes_peak : s.bytes_peak;
}

static loom_status measure_peak(const bench_workload *w, void *state, bench_result *r) {
  uint64_t peak;
  memory_of(loom_get_stats(), &r->live_before_bytes, &peak);
  loom_reset_stats();
  call_measure ignored;
  loom_status status = timed_call(w, state, &ignored);
  uint64_t live;
  memory_of(loom_get_stats(), &live, &r->peak_bytes);
  r->has_peak = status == LOOM_OK;
  return status;
}

static loom_status measure_unfused(const bench_workload *w, void *state, const bench_options *opts,
                                   bench_result *r) {
  double gemm_per_call;
  bool fusion_was_enabled = loom_fusion_enabled();
  loom_set_fusion(false);
  loom_status status = warm_up(w, state, opts->warmup > 0 ? opts->warmup : 1);
  if (status == LOOM_OK)
    status = measure_repeats(w, state, opts->repeats, &r->unfused_median_s,
                             &r->unfused_kernels_per_call, &gemm_per_call);
  loom_set_fusion(fusion_was_enabled);
  return status;
}

/* The same calls with every kernel compiled shape-generic: what reading the
 * sizes at run time costs against kernels specialized to them. */
static loom_status measure_generic(const bench_workload *w, void *state, const bench_options *opts,
                                   bench_result *r) {
  double kernels, gemm;
  loom_dynamic was = loom_dynamic_mode();
  loom_set_dynamic(LOOM_DYNAMIC_ALWAYS);
  loom_status status = warm_up(w, state, opts->warmup > 0 ? opts->warmup : 1);
  if (status == LOOM_OK)
    status = measure_repeats(w, state, opts->repeats, &r->generic_median_s, &kernels, &gemm);
  loom_set_dynamic(was);
  return status;
}

static void record_error(bench_result *r) {
  const char *message = loom_last_error();
  snprintf(r->error, sizeof r->error, "%s: %s", loom_status_name(r->status),
           message ? message : "(no message from loom)");
}

/* Everything after setup; stops at the first failure. */
static loom_status measure_all(const bench_workload *w, void *state, const bench_options *opts,
                               bench_result *r) {
  loom_status status = measure_first_call(w, state, r);
  if (status == LOOM_OK) status = warm_up(w, state, opts->warmup);
  if (status == LOOM_OK)
    status = measure_repeats(w, state, opts->repeats, &r->median_s, &r->kernels_per_call,
                             &r->gemm_per_call);
  if (status == LOOM_OK && w->measure_peak) status = measure_peak(w, state, r);
  if (status == LOOM_OK && w->compare_unfused) status = measure_unfused(w, state, opts, r);
  if (status == LOOM_OK && w->compare_generic && opts->device.type == LOOM_DEVICE_CPU)
    status = measure_generic(w, state, opts, r);
  bool cuda = opts->device.type == LOOM_DEVICE_CUDA;
  if (status == LOOM_OK && (cuda ? w->cuda_direct_seconds != NULL : w->direct_seconds != NULL)) {
    double direct = cuda ? w->cuda_direct_seconds(opts->repeats, opts->device.index)
                         : w->direct_seconds(opts->repeats);
    r->direct_s = direct > 0.0 ? direct : 0.0;
  }
  return status;
}

bench_result bench_run_workload(const bench_workload *w, const bench_options *opts) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.workload = w;
  loom_clear_error();
  void *state = NULL;
  r.status = w->setup(&state);
  if (r.status == LOOM_OK) r.status = measure_all(w, state, opts, &r);
  if (r.status != LOOM_OK) record_error(&r);
  if (state && w->describe) w->describe(state, r.note, sizeof r.note);
  if (state) w->teardown(state);
  loom_clear_error();
  return r;
}

double bench_rate(const bench_result *r) {
  if (r->median_s <= 0.0) return 0.0;
  switch (r->workload->metric) {
  case BENCH_BANDWIDTH:
  case BENCH_FLOPS: return r->workload->work / r->median_s * 1e-9;
  case BENCH_LATENCY: return r->median_s * 1e6;
  case BENCH_COMPILE: return r->median_s * 1e3;
  }
  return 0.0;
}

double bench_percent_of_limit(const bench_result *r, const bench_limits *limits) {
  double limit = 0.0;
  if (r->workload->metric == BENCH_BANDWIDTH) limit = bench_bandwidth_limit(limits);
  if (r->workload->metric == BENCH_FLOPS) limit = limits->sgemm_gflops;
  return limit > 0.0 && r->status == LOOM_OK ? 100.0 * bench_rate(r) / limit : -1.0;
}
