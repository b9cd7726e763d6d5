/* Matrix products: loom's matmul (OpenBLAS underneath) and a linear layer with
 * its bias and activation, each against calling OpenBLAS directly (on --device
 * cuda: cuBLAS on the same GPU). */
#include <cblas.h>
#include <stdlib.h>

#include "bench.h"

#define MM_N 1024
#define LIN_BATCH 4096
#define LIN_IN 1024
#define LIN_OUT 1024

static loom_status matmul_setup(void **state) {
  loom_shape shapes[2] = {LOOM_SHAPE(MM_N, MM_N), LOOM_SHAPE(MM_N, MM_N)};
  return bench_inputs_new(state, 2, shapes);
}

static loom_tensor *build_matmul(loom_tensor *const *in) { return loom_matmul(in[0], in[1]); }

/* the same operands rounded to BF16 (F32 sums, the product rounded to BF16) */
static loom_status matmul_bf16_setup(void **state) {
  loom_status st = matmul_setup(state);
  bench_inputs *in = *state;
  for (int i = 0; st == LOOM_OK && i < in->n; i++) {
    loom_tensor *half = loom_cast(in->t[i], LOOM_BF16);
    st = loom_realize(half);
    loom_free(in->t[i]);
    in->t[i] = half;
  }
  return st;
}

static loom_status matmul_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_matmul, state);
}

/* relu(x @ W^T + b) */
static loom_tensor *build_linear(loom_tensor *const *in) {
  const loom_tensor *x = in[0], *weight = in[1], *bias = in[2];
  return loom_relu(loom_add(loom_matmul(x, loom_transpose(weight, 0, 1)), bias));
}

static loom_status linear_setup(void **state) {
  loom_shape shapes[3] = {LOOM_SHAPE(LIN_BATCH, LIN_IN), LOOM_SHAPE(LIN_OUT, LIN_IN),
                          LOOM_SHAPE(LIN_OUT)};
  return bench_inputs_new(state, 3, shapes);
}

static loom_status linear_run(void *state, bench_call_report *report) {
  (void)report;
  return bench_realize_in_scope(build_linear, state);
}

/* ------------------------------------------------------------------ OpenBLAS directly */

static float *host_matrix(size_t count) {
  float *m = malloc(count * sizeof *m);
  if (!m) return NULL;
  for (size_t i = 0; i < count; i++) m[i] = (float)((i * 7919u) % 1000u) * 1e-3f - 0.5f;
  return m;
}

static void sgemm_square(const float *a, const float *b, float *c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, MM_N, MM_N, MM_N, 1.0f, a, MM_N, b, MM_N,
              0.0f, c, MM_N);
}

void openblas_set_num_threads(int num_threads);

/* The direct baselines use OpenBLAS's own threads, as a program calling it would
 * (loom keeps OpenBLAS single-threaded and splits GEMMs over its pool). */
static void blas_threads_like_loom(void) { openblas_set_num_threads(loom_num_threads()); }

static double direct_matmul_seconds(int repeats) {
  blas_threads_like_loom();
  size_t count = (size_t)MM_N * MM_N;
  float *a = host_matrix(count), *b = host_matrix(count), *c = host_matrix(count);
  double *samples = malloc((size_t)repeats * sizeof *samples);
  double median = -1.0;
  if (a && b && c && samples) {
    sgemm_square(a, b, c); /* warm-up */
    for (int i = 0; i < repeats; i++) {
      double t0 = bench_now();
      sgemm_square(a, b, c);
      samples[i] = bench_now() - t0;
    }
    median = bench_median(samples, repeats);
  }
  free(a), free(b), free(c), free(samples);
  return median;
}

static void linear_direct(const float *x, const float *w, const float *bias, float *y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, LIN_BATCH, LIN_OUT, LIN_IN, 1.0f, x, LIN_IN,
              w, LIN_IN, 0.0f, y, LIN_OUT);
  for (size_t r = 0; r < LIN_BATCH; r++) {
    float *row = y + r * LIN_OUT;
    for (size_t j = 0; j < LIN_OUT; j++) {
      float v = row[j] + bias[j];
      row[j] = v > 0.0f ? v : 0.0f;
    }
  }
}

static double direct_linear_seconds(int repeats) {
  blas_threads_like_loom();
  float *x = host_matrix((size_t)LIN_BATCH * LIN_IN), *w = host_matrix((size_t)LIN_OUT * LIN_IN);
  float *bias = host_matrix(LIN_OUT), *y = host_matrix((size_t)LIN_BATCH * LIN_OUT);
  double *samples = malloc((size_t)repeats * sizeof *samples);
  double median = -1.0;
  if (x && w && bias && y && samples) {
    linear_direct(x, w, bias, y); /* warm-up */
    for (int i = 0; i < repeats; i++) {
      double t0 = bench_now();
      linear_direct(x, w, bias, y);
      samples[i] = bench_now() - t0;
    }
    median = bench_median(samples, repeats);
  }
  free(x), free(w), free(bias), free(y), free(samples);
  return median;
}

/* ------------------------------------------------------------------ GEMM shape classes */

/* x [M, K] @ W^T (W [N, K], a layer's weight) or x @ W (W [K, N]), with an
 * optional bias and activation: the shapes loom's own GEMM is measured on. */
typedef struct gemm_shape {
  int64_t m, n, k;
  bool weight_t; /* W stored [N, K] */
  int epilogue;  /* 0 none, 1 bias + GELU */
} gemm_shape;

static const gemm_shape GPT2_UP = {256, 3072, 768, true, 1};
static const gemm_shape BATCH1 = {1, 3072, 768, true, 0};
static const gemm_shape CONV2 = {32, 1568, 144, false, 0};

static loom_status shape_setup(void **state, const gemm_shape *g) {
  loom_shape shapes[3] = {LOOM_SHAPE(g->m, g->k),
                          g->weight_t ? LOOM_SHAPE(g->n, g->k) : LOOM_SHAPE(g->k, g->n),
                          LOOM_SHAPE(g->n)};
  return bench_inputs_new(state, 3, shapes);
}

static loom_tensor *shape_build(const gemm_shape *g, loom_tensor *const *in) {
  loom_tensor *w = g->weight_t ? loom_transpose(in[1], 0, 1) : in[1];
  loom_tensor *y = loom_matmul(in[0], w);
  return g->epilogue ? loom_gelu(loom_add(y, in[2])) : y;
}

static double shape_direct_seconds(const gemm_shape *g, int repeats) {
  blas_threads_like_loom();
  float *x = host_matrix((size_t)(g->m * g->k)), *w = host_matrix((size_t)(g->n * g->k));
  float *y = host_matrix((size_t)(g->m * g->n));
  double *samples = malloc((size_t)(repeats + 1) * sizeof *samples);
  double median = -1.0;
  if (x && w && y && samples) {
    for (int i = 0; i <= repeats; i++) { /* the first is a warm-up */
      double t0 = bench_now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, g->weight_t ? CblasTrans : CblasNoTrans, (int)g->m,
                  (int)g->n, (int)g->k, 1.0f, x, (int)g->k, w, g->weight_t ? (int)g->k : (int)g->n,
                  0.0f, y, (int)g->n);
      samples[i] = bench_now() - t0;
    }
    median = bench_median(samples + 1, repeats);
  }
  free(x), free(w), free(y), free(samples);
  return median;
}

#define GEMM_SHAPE_FUNCTIONS(id, shape)                                                            \
  static loom_status id##_setup(void **state) { return shape_setup(state, &shape); }               \
  static loom_tensor *id##_build(loom_tensor *const *in) { return shape_build(&shape, in); }       \
  static loom_status id##_run(void *state, bench_call_report *report) {                            \
    (void)report;                                                                                  \
    return bench_realize_in_scope(id##_build, state);                                              \
  }                                                                                                \
  static double id##_direct(int repeats) { return shape_direct_seconds(&shape, repeats); }

GEMM_SHAPE_FUNCTIONS(gpt2_up, GPT2_UP)
GEMM_SHAPE_FUNCTIONS(batch1, BATCH1)
GEMM_SHAPE_FUNCTIONS(conv2, CONV2)

/* ------------------------------------------------------------------ cuBLAS (--device cuda) */

static double cublas_matmul_seconds(int repeats, int device) {
  return bench_cublas_gemm_seconds(MM_N, MM_N, MM_N, false, repeats, device);
}

/* The GEMM alone: cuBLAS has no bias and ReLU here, so loom's ratio includes them */
static double cublas_linear_seconds(int repeats, int device) {
  return bench_cublas_gemm_seconds(LIN_BATCH, LIN_OUT, LIN_IN, true, repeats, device);
}

const bench_workload bench_matmul_workloads[] = {
    {
        .name = "matmul_1024",
        .what = "a @ b, [1024,1024] x [1024,1024]",
        .metric = BENCH_FLOPS,
        .work = 2.0 * MM_N * MM_N * MM_N,
        .compare_unfused = false, /* one GEMM: nothing to fuse */
        .measure_peak = true,
        .setup = matmul_setup,
        .run = matmul_run,
        .teardown = bench_inputs_free,
        .direct_seconds = direct_matmul_seconds,
        .cuda_direct_seconds = cublas_matmul_seconds,
    },
    {
        .name = "matmul_1024_bf16",
        .what = "a @ b in BF16 (F32 sums, rounded once), [1024,1024] x [1024,1024]: AMX tiles "
                "where the CPU has them",
        .metric = BENCH_FLOPS,
        .work = 2.0 * MM_N * MM_N * MM_N,
        .compare_unfused = false,
        .measure_peak = true,
        .setup = matmul_bf16_setup,
        .run = matmul_run,
        .teardown = bench_inputs_free,
    },
    {
        .name = "linear_bias_relu_4096x1024x1024",
        .what = "relu(x @ W^T + b), x [4096,1024], W [1024,1024], b [1024]",
        .metric = BENCH_FLOPS,
        .work = 2.0 * LIN_BATCH * LIN_IN * LIN_OUT,
        .compare_unfused = true,
        .measure_peak = true,
        .setup = linear_setup,
        .run = linear_run,
        .teardown = bench_inputs_free,
        .direct_seconds = direct_linear_seconds,
        .cuda_direct_seconds = cublas_linear_seconds,
    },
    {
        .name = "gemm_gpt2_mlp_up",
        .what = "gelu(x @ W^T + b), x [256,768], W [3072,768] (GPT-2's MLP up-projection)",
        .metric = BENCH_FLOPS,
        .work = 2.0 * 256 * 3072 * 768,
        .compare_unfused = true,
        .setup = gpt2_up_setup,
        .run = gpt2_up_run,
        .teardown = bench_inputs_free,
        .direct_seconds = gpt2_up_direct,
    },
    {
        .name = "gemm_batch1_768x3072",
        .what = "x @ W^T, x [1,768], W [3072,768] (one token through a linear layer)",
        .metric = BENCH_FLOPS,
        .work = 2.0 * 1 * 3072 * 768,
        .setup = batch1_setup,
        .run = batch1_run,
        .teardown = bench_inputs_free,
        .direct_seconds = batch1_direct,
    },
    {
        .name = "gemm_conv2_32x1568x144",
        .what = "W @ cols, W [32,144], cols [144,1568] (the digits CNN's second convolution)",
        .metric = BENCH_FLOPS,
        .work = 2.0 * 32 * 1568 * 144,
        .setup = conv2_setup,
        .run = conv2_run,
        .teardown = bench_inputs_free,
        .direct_seconds = conv2_direct,
    },
};
const int bench_matmul_count =
    (int)(sizeof bench_matmul_workloads / sizeof bench_matmul_workloads[0]);
