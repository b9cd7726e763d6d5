/* Elementwise workloads: a long fused chain over big arrays, and the per-call
 * overhead of recording and realizing a small graph. */
#include "bench.h"

#define EW_N (16 * 1024 * 1024)
#define SMALL_N 1024

/* relu(x*1.5 + y) * sigmoid(x) - tanh(y)*0.5 */
static loom_tensor *build_ew_chain(loom_tensor *const *in) {
  const loom_tensor *x = in[0], *y = in[1];
  loom_tensor *left = loom_mul(loom_relu(loom_add(loom_mul_s(x, 1.5), y)), loom_sigmoid(x));
  return loom_sub(left, loom_mul_s(loom_tanh(y), 0.5));
}

static loom_status ew_chain_setup(void **state) {
  loom_shape shapes[2] = {LOOM_SHAPE(EW_N), LOOM_SHAPE(EW_N)};
  return bench_inputs_new(state, 2, shapes);
}

static loom_status ew_chain_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_ew_chain, state);
}

/* Ten cheap ops (x*2 + y - 1, *x, relu, neg, abs, + y, min 4, *0.5), so that the
 * time is loom's per-call overhead (record, hash, look up, launch, free), not math. */
static loom_tensor *build_small_graph(loom_tensor *const *in) {
  const loom_tensor *x = in[0], *y = in[1];
  loom_tensor *t = loom_mul(loom_sub_s(loom_add(loom_mul_s(x, 2.0), y), 1.0), x);
  t = loom_add(loom_abs(loom_neg(loom_relu(t))), y);
  return loom_mul_s(loom_minimum_s(t, 4.0), 0.5);
}

static loom_status small_setup(void **state) {
  loom_shape shapes[2] = {LOOM_SHAPE(SMALL_N), LOOM_SHAPE(SMALL_N)};
  return bench_inputs_new(state, 2, shapes);
}

static loom_status small_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_small_graph, state);
}

const bench_workload bench_elementwise_workloads[] = {
    {
        .name = "ew_chain_16M",
        .what = "relu(x*1.5 + y) * sigmoid(x) - tanh(y)*0.5, x y [16M]",
        .metric = BENCH_BANDWIDTH,
        .work = 3.0 * EW_N * sizeof(float),
        .compare_unfused = true,
        .compare_generic = true,
        .measure_peak = true,
        .setup = ew_chain_setup,
        .run = ew_chain_run,
        .teardown = bench_inputs_free,
    },
    {
        .name = "dispatch_small",
        .what = "10-op elementwise graph on [1024], recorded and realized per call",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 200,
        .compare_unfused = true,
        .measure_peak = true,
        .setup = small_setup,
        .run = small_run,
        .teardown = bench_inputs_free,
    },
};
const int bench_elementwise_count =
    (int)(sizeof bench_elementwise_workloads / sizeof bench_elementwise_workloads[0]);
