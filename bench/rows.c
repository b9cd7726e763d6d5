/* Row-wise and full reductions: softmax, a layer norm written with loom's
 * primitive ops, and a sum of everything. */
#include "bench.h"

#define ROWS 4096
#define COLS 1024
#define SUM_N (16 * 1024 * 1024)

static const int last_axis[1] = {-1};

static loom_status matrix_setup(void **state) {
  loom_shape shapes[1] = {LOOM_SHAPE(ROWS, COLS)};
  return bench_inputs_new(state, 1, shapes);
}

static loom_tensor *build_softmax(loom_tensor *const *in) { return loom_softmax(in[0], -1); }

static loom_status softmax_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_softmax, state);
}

/* (x - mean) * rsqrt(mean((x - mean)^2) + 1e-5) * weight + bias, over the last dim */
static loom_tensor *build_layernorm(loom_tensor *const *in) {
  const loom_tensor *x = in[0], *weight = in[1], *bias = in[2];
  loom_tensor *centered = loom_sub(x, loom_mean(x, last_axis, 1, true));
  loom_tensor *variance = loom_mean(loom_square(centered), last_axis, 1, true);
  loom_tensor *normalized = loom_mul(centered, loom_rsqrt(loom_add_s(variance, 1e-5)));
  return loom_add(loom_mul(normalized, weight), bias);
}

static loom_status layernorm_setup(void **state) {
  loom_shape shapes[3] = {LOOM_SHAPE(ROWS, COLS), LOOM_SHAPE(COLS), LOOM_SHAPE(COLS)};
  return bench_inputs_new(state, 3, shapes);
}

static loom_status layernorm_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_layernorm, state);
}

static loom_tensor *build_sum(loom_tensor *const *in) { return loom_sum_all(in[0]); }

static loom_status sum_setup(void **state) {
  loom_shape shapes[1] = {LOOM_SHAPE(SUM_N)};
  return bench_inputs_new(state, 1, shapes);
}

static loom_status sum_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_sum, state);
}

/* Causal self-attention, inference: GPT-2 124M's heads over 1024 tokens. */
#define ATT_B 1
#define ATT_H 12
#define ATT_T 1024
#define ATT_D 64

static loom_status attention_setup(void **state) {
  loom_shape shapes[3] = {LOOM_SHAPE(ATT_B, ATT_H, ATT_T, ATT_D),
                          LOOM_SHAPE(ATT_B, ATT_H, ATT_T, ATT_D),
                          LOOM_SHAPE(ATT_B, ATT_H, ATT_T, ATT_D)};
  return bench_inputs_new(state, 3, shapes);
}

static loom_tensor *build_attention(loom_tensor *const *in) {
  return loom_scaled_dot_product_attention(in[0], in[1], in[2], NULL, true, 0);
}

static loom_status attention_run(void *state, bench_call_report *report) {
  (void)report;
  loom_status st;
  LOOM_NO_GRAD { st = bench_realize_in_scope(build_attention, state); }
  return st;
}

/* Its training: the gradients of sum(w * attention(q, k, v)) to q, k and v
 * (the fused backward on the CPU), realized with the forward in one program. */
static loom_status attention_train_setup(void **state) {
  loom_shape shape = LOOM_SHAPE(ATT_B, ATT_H, ATT_T, ATT_D);
  loom_shape shapes[4] = {shape, shape, shape, shape};
  loom_status st = bench_inputs_new(state, 4, shapes);
  bench_inputs *in = st ? NULL : *state;
  for (int i = 0; in && i < 3 && !st; i++) st = loom_set_requires_grad(in->t[i], true);
  return st;
}

static loom_status attention_train_run(void *state, bench_call_report *report) {
  (void)report;
  bench_inputs *in = state;
  loom_scope_begin();
  loom_tensor *out = loom_scaled_dot_product_attention(in->t[0], in->t[1], in->t[2], NULL, true, 0);
  loom_status st = loom_backward(loom_sum_all(loom_mul(out, in->t[3])));
  loom_tensor *grads[3];
  for (int i = 0; i < 3; i++) grads[i] = loom_grad(in->t[i]);
  if (!st) st = loom_eval(grads, 3);
  for (int i = 0; i < 3; i++) loom_free(grads[i]), loom_clear_grad(in->t[i]);
  return bench_first_error(st, loom_scope_end());
}

/* Sampling's selections over GPT-2's vocabulary: a whole descending sort
 * (top-p's) and the top 40 (top-k's), values and positions. */
#define VOCAB 50257

static loom_status vocab_setup(void **state) {
  loom_shape shapes[1] = {LOOM_SHAPE(1, VOCAB)};
  return bench_inputs_new(state, 1, shapes);
}

static loom_status select_run(void *state, int64_t k) {
  bench_inputs *in = state;
  loom_scope_begin();
  loom_tensor *out[2] = {NULL, NULL};
  loom_status st = k == VOCAB ? loom_sort(in->t[0], -1, true, &out[0], &out[1])
                              : loom_topk(in->t[0], k, -1, true, &out[0], &out[1]);
  if (!st) st = loom_eval(out, 2);
  return bench_first_error(st, loom_scope_end());
}

static loom_status sort_run(void *state, bench_call_report *report) {
  (void)report;
  return select_run(state, VOCAB);
}

static loom_status topk_run(void *state, bench_call_report *report) {
  (void)report;
  return select_run(state, 40);
}

/* Prefix sums along the last axis (torch.cumsum): a sampler's running
 * probabilities over GPT-2's vocabulary, many short rows, a large matrix. */
#define CUMSUM_SETUP(rows, cols)                                                                   \
  static loom_status cumsum_setup_##rows##x##cols(void **state) {                                  \
    loom_shape shapes[1] = {LOOM_SHAPE(rows, cols)};                                               \
    return bench_inputs_new(state, 1, shapes);                                                     \
  }
CUMSUM_SETUP(1, 50257)
CUMSUM_SETUP(64, 1000)
CUMSUM_SETUP(4096, 4096)

static loom_tensor *build_cumsum(loom_tensor *const *in) { return loom_cumsum(in[0], -1); }

static loom_status cumsum_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_cumsum, state);
}

#define CUMSUM_WORKLOAD(rows, cols)                                                                \
  {                                                                                                \
    .name = "cumsum_" #rows "x" #cols,                                                             \
    .what = "loom_cumsum(x, -1) of a [" #rows ", " #cols "] F32 matrix (the scan step)",           \
    .metric = BENCH_BANDWIDTH, .work = 2.0 * rows * cols * sizeof(float),                          \
    .setup = cumsum_setup_##rows##x##cols, .run = cumsum_run, .teardown = bench_inputs_free,       \
  }

const bench_workload bench_rows_workloads[] = {
    {
        .name = "softmax_4096x1024",
        .what = "softmax(x, -1), x [4096,1024]",
        .metric = BENCH_BANDWIDTH,
        .work = 2.0 * ROWS * COLS * sizeof(float),
        .compare_unfused = true,
        .compare_generic = true,
        .measure_peak = true,
        .setup = matrix_setup,
        .run = softmax_run,
        .teardown = bench_inputs_free,
    },
    {
        .name = "attention_causal_1x12x1024x64",
        .what = "causal softmax(q k^T / 8) v, q k v [1,12,1024,64], no gradient: the fused "
                "kernel (LOOM_ATTENTION=composite: two GEMMs and a softmax)",
        .metric = BENCH_FLOPS,
        /* the products over the causal half of the scores */
        .work = 2.0 * 2.0 * ATT_B * ATT_H * ATT_D * (ATT_T * (ATT_T + 1.0) / 2),
        .measure_peak = true,
        .setup = attention_setup,
        .run = attention_run,
        .teardown = bench_inputs_free,
    },
    {
        .name = "attention_causal_train_1x12x1024x64",
        .what = "causal attention's forward and its gradients to q, k, v ([1,12,1024,64]): the "
                "fused forward and backward, recomputing the scores (LOOM_ATTENTION=composite: "
                "the composition's GEMMs, softmax and their gradients)",
        .metric = BENCH_FLOPS,
        /* the forward's two products and the backward's four over the causal half */
        .work = 6.0 * 2.0 * ATT_B * ATT_H * ATT_D * (ATT_T * (ATT_T + 1.0) / 2),
        .measure_peak = true,
        .setup = attention_train_setup,
        .run = attention_train_run,
        .teardown = bench_inputs_free,
    },
    {
        .name = "sort_1x50257",
        .what = "loom_sort(x, -1, descending) of a [1, 50257] F32 row: values and positions (the "
                "sort step; LOOM_SORT=network: the bitonic network)",
        .metric = BENCH_BANDWIDTH,
        .work = VOCAB * (4.0 + 4.0 + 8.0),
        .setup = vocab_setup,
        .run = sort_run,
        .teardown = bench_inputs_free,
    },
    {
        .name = "topk_1x50257_k40",
        .what = "loom_topk(x, 40, -1, largest) of a [1, 50257] F32 row: values and positions",
        .metric = BENCH_BANDWIDTH,
        .work = VOCAB * 4.0 + 40 * (4.0 + 8.0),
        .setup = vocab_setup,
        .run = topk_run,
        .teardown = bench_inputs_free,
    },
    CUMSUM_WORKLOAD(1, 50257),
    CUMSUM_WORKLOAD(64, 1000),
    CUMSUM_WORKLOAD(4096, 4096),
    {
        .name = "layernorm_4096x1024",
        .what = "layer norm from primitives (mean, sub, square, mean, rsqrt, mul, *w + b)",
        .metric = BENCH_BANDWIDTH,
        .work = (2.0 * ROWS * COLS + 2.0 * COLS) * sizeof(float),
        .compare_unfused = true,
        .compare_generic = true,
        .measure_peak = true,
        .setup = layernorm_setup,
        .run = layernorm_run,
        .teardown = bench_inputs_free,
    },
    {
        .name = "sum_16M",
        .what = "sum_all(x), x [16M]",
        .metric = BENCH_BANDWIDTH,
        .work = (double)SUM_N * sizeof(float) + sizeof(float),
        .compare_unfused = true,
        .measure_peak = true,
        .setup = sum_setup,
        .run = sum_run,
        .teardown = bench_inputs_free,
    },
};
const int bench_rows_count = (int)(sizeof bench_rows_workloads / sizeof bench_rows_workloads[0]);
