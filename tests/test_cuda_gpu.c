/*
 * Ops, gradients, an optimizer step and random draws on LOOM_CUDA(0) against
 * the CPU. Needs a real GPU: it skips (with the reason) without one, and
 * under the driver double (which cannot run kernels). tools/gpu_check.sh runs
 * it. Tolerances per dtype: F32 |d| <= 1e-5 + 2e-5 |cpu| (CUDA's float math is
 * within 2-4 ulp where the CPU's is within 1), F64 1e-12 + 1e-11 |cpu|,
 * integers and bools exact; Philox uniform and Bernoulli draws bit for bit.
 * Sums add in another order on each device, and a sum can cancel to far below
 * its terms, so each sum's tolerance also grows with what it sums (sum_bounds,
 * check_sum_tolerance).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "runtime/cuda/cuda_driver.h"

#define GPU LOOM_CUDA(0)

static double worst_f32, worst_f64;

/* The tensor's values as doubles (copied to the host). */
static double *values(loom_tensor *t, int64_t *n) {
  *n = loom_numel(t);
  loom_dtype dt = loom_dtype_of(t);
  size_t es = loom_dtype_size(dt), bytes = (size_t)*n * es;
  unsigned char *raw = malloc(bytes ? bytes : 1);
  double *v = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
  if (!raw || !v || loom_copy_to_host(t, raw, bytes) != LOOM_OK) {
    free(raw), free(v);
    return NULL;
  }
  for (int64_t i = 0; i < *n; i++) {
    const void *p = raw + (size_t)i * es;
    switch (dt) {
    case LOOM_F32: v[i] = *(const float *)p; break;
    case LOOM_F64: v[i] = *(const double *)p; break;
    case LOOM_I32: v[i] = *(const int32_t *)p; break;
    case LOOM_I64: v[i] = (double)*(const int64_t *)p; break;
    default: v[i] = *(const uint8_t *)p; break;
    }
  }
  free(raw);
  return v;
}

/* As compare, with extra[i] (when not NULL) added to element i's tolerance. */
static void compare_within(const char *what, loom_tensor *cpu, loom_tensor *gpu,
                           const double *extra) {
  check_set_ctx("%s", what);
  CHECK_STATUS(cpu, LOOM_OK);
  CHECK_STATUS(gpu, LOOM_OK);
  CHECK(loom_device_of(gpu).type == LOOM_DEVICE_CUDA);
  int64_t n1, n2;
  double *a = values(cpu, &n1), *b = values(gpu, &n2);
  CHECK(a && b && n1 == n2);
  loom_dtype dt = loom_dtype_of(cpu);
  double worst = 0;
  int bad = 0;
  for (int64_t i = 0; a && b && i < n1 && i < n2; i++) {
    double d = fabs(a[i] - b[i]);
    if (isnan(a[i]) && isnan(b[i])) continue;
    if (a[i] == b[i]) continue; /* infinities */
    double tol = (dt == LOOM_F32   ? 1e-5 + 2e-5 * fabs(a[i])
                  : dt == LOOM_F64 ? 1e-12 + 1e-11 * fabs(a[i])
                                   : 0) +
                 (extra ? extra[i] : 0);
    if (tol > 0 && d / tol > worst) worst = d / tol;
    if (!(d <= tol) && bad++ < 3)
      check_fail_at(__FILE__, __LINE__, "%s: element %lld: cpu %.17g, cuda %.17g", what,
                    (long long)i, a[i], b[i]);
  }
  if (!bad) check_passes++;
  if (dt == LOOM_F32 && worst > worst_f32) worst_f32 = worst;
  if (dt == LOOM_F64 && worst > worst_f64) worst_f64 = worst;
  free(a), free(b);
}

static void compare(const char *what, loom_tensor *cpu, loom_tensor *gpu) {
  compare_within(what, cpu, gpu, NULL);
}

/* For each output of a sum over the middle axis of v [outer, n, inner], the
 * tolerance of each device's sum (check_sum_tolerance) twice, times scale (a
 * mean's 1/n). */
static double *sum_bounds(const double *v, int64_t outer, int64_t n, int64_t inner, double scale,
                          loom_dtype dt) {
  double *bound = malloc(sizeof(double) * (size_t)(outer * inner > 0 ? outer * inner : 1));
  for (int64_t o = 0; bound && o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double sq = 0, sum = 0;
      for (int64_t j = 0; j < n; j++) {
        double x = v[(o * n + j) * inner + i];
        sq += x * x, sum += x;
      }
      bound[o * inner + i] = 2 * check_sum_tolerance(dt == LOOM_F32, (double)n, sq, sum) * scale;
    }
  return bound;
}

/* A sum (or a mean: scale 1/n) over the middle axis of v [outer, n, inner]. */
static void compare_sum(const char *what, loom_tensor *cpu, loom_tensor *gpu, const double *v,
                        int64_t outer, int64_t n, int64_t inner, double scale) {
  double *bound = sum_bounds(v, outer, n, inner, scale, loom_dtype_of(cpu));
  compare_within(what, cpu, gpu, bound);
  free(bound);
}

/* The same host values on both devices. */
static void pair(const double *v, loom_shape s, loom_dtype dt, loom_tensor **cpu,
                 loom_tensor **gpu) {
  loom_tensor *t = loom_from_data(v, s, LOOM_F64, LOOM_CPU);
  *cpu = loom_cast(t, dt);
  loom_realize(*cpu);
  LOOM_NO_GRAD { *gpu = loom_to(*cpu, GPU); }
  loom_free(t);
}

static double *random_values(int64_t n, unsigned seed, double lo, double hi) {
  float *f = malloc(sizeof(float) * (size_t)n);
  double *v = malloc(sizeof(double) * (size_t)n);
  check_fill_uniform(f, n, seed);
  for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (f[i] + 1) / 2;
  free(f);
  return v;
}

typedef loom_tensor *(*unary)(const loom_tensor *);

static void check_elementwise(void) {
  static const struct {
    const char *name;
    unary fn;
    double lo, hi;
  } ops[] = {{"neg", loom_neg, -3, 3},    {"abs", loom_abs, -3, 3},
             {"exp", loom_exp, -10, 10},  {"log", loom_log, 0.01, 100},
             {"sqrt", loom_sqrt, 0, 100}, {"rsqrt", loom_rsqrt, 0.01, 100},
             {"sin", loom_sin, -20, 20},  {"cos", loom_cos, -20, 20},
             {"tanh", loom_tanh, -5, 5},  {"sigmoid", loom_sigmoid, -10, 10},
             {"relu", loom_relu, -1, 1},  {"gelu", loom_gelu, -4, 4},
             {"silu", loom_silu, -6, 6},  {"square", loom_square, -3, 3},
             {"erf", loom_erf, -3, 3},    {"reciprocal", loom_reciprocal, 0.1, 10}};
  int64_t n = 10007; /* not a multiple of the vector width: the tail runs too */
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
    for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) LOOM_SCOPE {
        double *v = random_values(n, (unsigned)o + 1, ops[o].lo, ops[o].hi);
        loom_tensor *c, *g;
        pair(v, LOOM_SHAPE(n), dt, &c, &g);
        char what[64];
        snprintf(what, sizeof what, "%s %s", ops[o].name, loom_dtype_name(dt));
        compare(what, ops[o].fn(c), ops[o].fn(g));
        free(v);
      }
  LOOM_SCOPE { /* binary ops with broadcasting, a permuted view, casts, where */
    double *va = random_values(64 * 33, 7, -2, 2), *vb = random_values(33, 8, 0.5, 2);
    loom_tensor *a, *ag, *b, *bg;
    pair(va, LOOM_SHAPE(64, 33), LOOM_F32, &a, &ag);
    pair(vb, LOOM_SHAPE(33), LOOM_F32, &b, &bg);
    compare("add", loom_add(a, b), loom_add(ag, bg));
    compare("sub", loom_sub(b, a), loom_sub(bg, ag));
    compare("mul", loom_mul(a, b), loom_mul(ag, bg));
    compare("div", loom_div(a, b), loom_div(ag, bg));
    compare("pow", loom_pow(b, a), loom_pow(bg, ag));
    compare("maximum", loom_maximum(a, b), loom_maximum(ag, bg));
    compare("lt", loom_lt(a, b), loom_lt(ag, bg));
    compare("where", loom_where(loom_gt_s(a, 0), a, b), loom_where(loom_gt_s(ag, 0), ag, bg));
    compare("transpose", loom_contiguous(loom_transpose(a, 0, 1)),
            loom_contiguous(loom_transpose(ag, 0, 1)));
    int64_t pads[4] = {1, 2, 3, 0};
    compare("pad", loom_pad(a, pads, 4, -1), loom_pad(ag, pads, 4, -1));
    for (int to = 0; to < LOOM_NUM_DTYPES; to++) {
      char what[32];
      snprintf(what, sizeof what, "cast f32->%s", loom_dtype_name(to));
      compare(what, loom_cast(loom_mul_s(a, 50), to), loom_cast(loom_mul_s(ag, 50), to));
    }
    free(va), free(vb);
  }
}

static void check_reductions(void) {
  static const int64_t rows[] = {1, 7, 100, 1000, 5000};
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
    for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) LOOM_SCOPE {
        int64_t m = 33, n = rows[r];
        double *v = random_values(m * n, (unsigned)r + 20, -3, 3);
        loom_tensor *c, *g;
        pair(v, LOOM_SHAPE(m, n), dt, &c, &g);
        int last[1] = {1}, first[1] = {0};
        char what[64];
#define RED(label, expr_c, expr_g)                                                                 \
  snprintf(what, sizeof what, "%s rows %lld %s", label, (long long)n, loom_dtype_name(dt));        \
  compare(what, expr_c, expr_g)
#define RED_SUM(label, expr_c, expr_g, outer, len, inner, scale)                                   \
  snprintf(what, sizeof what, "%s rows %lld %s", label, (long long)n, loom_dtype_name(dt));        \
  compare_sum(what, expr_c, expr_g, v, outer, len, inner, scale)
        RED_SUM("sum", loom_sum(c, last, 1, false), loom_sum(g, last, 1, false), m, n, 1, 1);
        RED_SUM("sum0", loom_sum(c, first, 1, true), loom_sum(g, first, 1, true), 1, m, n, 1);
        RED("max", loom_max(c, last, 1, false), loom_max(g, last, 1, false));
        RED("min", loom_min(c, first, 1, false), loom_min(g, first, 1, false));
        RED_SUM("mean", loom_mean(c, last, 1, false), loom_mean(g, last, 1, false), m, n, 1,
                1.0 / (double)n);
        RED("argmax", loom_argmax(c, 1, false), loom_argmax(g, 1, false));
        RED("logsumexp", loom_logsumexp(c, 1), loom_logsumexp(g, 1));
        RED("softmax", loom_softmax(c, 1), loom_softmax(g, 1));
        RED("log_softmax", loom_log_softmax(c, 1), loom_log_softmax(g, 1));
        RED("layer_norm", loom_layer_norm(c, 1, NULL, NULL, 1e-5),
            loom_layer_norm(g, 1, NULL, NULL, 1e-5));
#undef RED
#undef RED_SUM
        free(v);
      }
  LOOM_SCOPE { /* split reductions: 256 parts on a GPU (16 on the CPU), and 77 rows of
                * 2^16 + 3 values (16 parts each, the last padded), around 0 and around 1 */
    int64_t n = 1 << 20, rows = 77, len = (1 << 16) + 3;
    double *v = random_values(n, 99, -1, 1), *w = random_values(rows * len, 98, -1, 1);
    double *sq = malloc(sizeof(double) * (size_t)n),
           *w1 = malloc(sizeof(double) * (size_t)(rows * len));
    for (int64_t i = 0; i < n; i++) sq[i] = v[i] * v[i];
    for (int64_t i = 0; i < rows * len; i++) w1[i] = w[i] / 2 + 1;
    loom_tensor *c, *g, *c2, *g2, *c3, *g3;
    pair(v, LOOM_SHAPE(n), LOOM_F32, &c, &g);
    pair(w, LOOM_SHAPE(rows, len), LOOM_F32, &c2, &g2);
    pair(w1, LOOM_SHAPE(rows, len), LOOM_F32, &c3, &g3);
    compare_sum("sum_all 1M", loom_sum_all(c), loom_sum_all(g), v, 1, n, 1, 1);
    compare_sum("mean_all 1M", loom_mean_all(loom_square(c)), loom_mean_all(loom_square(g)), sq, 1,
                n, 1, 1.0 / (double)n);
    compare("max over rows", loom_max(c2, (int[]){1}, 1, false),
            loom_max(g2, (int[]){1}, 1, false));
    compare_sum("sum over rows", loom_sum(c2, (int[]){1}, 1, false),
                loom_sum(g2, (int[]){1}, 1, false), w, rows, len, 1, 1);
    compare_sum("sum over rows around 1", loom_sum(c3, (int[]){1}, 1, false),
                loom_sum(g3, (int[]){1}, 1, false), w1, rows, len, 1, 1);
    free(v), free(w), free(sq), free(w1);
  }
}

static void check_matmul(void) {
  static const int64_t shapes[][4] = {{1, 1, 1, 1},    {1, 17, 33, 65},  {1, 128, 256, 64},
                                      {3, 40, 50, 30}, {1, 300, 7, 129}, {2, 64, 0, 16}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int dt = LOOM_F32; dt <= LOOM_F64; dt++)
      for (int tb = 0; tb < 2; tb++) LOOM_SCOPE {
          int64_t B = shapes[s][0], M = shapes[s][1], K = shapes[s][2], N = shapes[s][3];
          double *va = random_values(B * M * K + 1, 30 + (unsigned)s, -1, 1);
          double *vb = random_values(B * K * N + 1, 40 + (unsigned)s, -1, 1);
          loom_tensor *a, *ag, *b, *bg;
          pair(va, LOOM_SHAPE(B, M, K), dt, &a, &ag);
          pair(vb, tb ? LOOM_SHAPE(B, N, K) : LOOM_SHAPE(B, K, N), dt, &b, &bg);
          if (tb) b = loom_transpose(b, 1, 2), bg = loom_transpose(bg, 1, 2);
          char what[96];
          snprintf(what, sizeof what, "matmul %lldx[%lld,%lld]@[%lld,%lld]%s %s", (long long)B,
                   (long long)M, (long long)K, (long long)K, (long long)N, tb ? "^T" : "",
                   loom_dtype_name(dt));
          compare(what, loom_matmul(a, b), loom_matmul(ag, bg));
          /* with an epilogue: bias and relu */
          loom_tensor *bias = loom_arange(0, (double)N, 1, dt, LOOM_CPU);
          loom_tensor *biasg = loom_arange(0, (double)N, 1, dt, GPU);
          strcat(what, " +bias relu");
          compare(what, loom_relu(loom_add(loom_matmul(a, b), bias)),
                  loom_relu(loom_add(loom_matmul(ag, bg), biasg)));
          free(va), free(vb);
        }
  /* A long sum of positive products (K = 5000: 19 blocks of 256 terms and a
   * part-block on the device), within the sums' tolerance of the products. */
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) LOOM_SCOPE {
      int64_t M = 40, K = 5000, N = 30;
      double *va = random_values(M * K, 60, 0, 1), *vb = random_values(K * N, 61, 0, 1);
      double *terms = malloc(sizeof(double) * (size_t)(M * N * K));
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
          for (int64_t k = 0; k < K; k++)
            terms[(i * N + j) * K + k] = va[i * K + k] * vb[k * N + j];
      loom_tensor *a, *ag, *b, *bg;
      pair(va, LOOM_SHAPE(M, K), dt, &a, &ag);
      pair(vb, LOOM_SHAPE(K, N), dt, &b, &bg);
      char what[64];
      snprintf(what, sizeof what, "matmul [40,5000]@[5000,30] %s", loom_dtype_name(dt));
      compare_sum(what, loom_matmul(a, b), loom_matmul(ag, bg), terms, M * N, K, 1, 1);
      free(va), free(vb), free(terms);
    }
}

/* Batch dims that collapse (one launch, grid z) and ones that do not (a
 * launch per batch index): A's batch dims permuted, B's broadcast. */
static void check_batched_matmul(void) {
  LOOM_SCOPE {
    double *va = random_values(4 * 3 * 2 * 5 * 6, 90, -1, 1),
           *vb = random_values(3 * 6 * 7, 91, -1, 1);
    loom_tensor *a, *ag, *b, *bg;
    pair(va, LOOM_SHAPE(4, 3, 2, 5, 6), LOOM_F32, &a, &ag);
    pair(vb, LOOM_SHAPE(1, 3, 1, 6, 7), LOOM_F32, &b, &bg);
    int perm[5] = {2, 1, 0, 3, 4};
    loom_shape bs = LOOM_SHAPE(2, 3, 4, 6, 7);
    compare("matmul, permuted batch dims",
            loom_matmul(loom_permute(a, perm, 5), loom_expand(b, bs)),
            loom_matmul(loom_permute(ag, perm, 5), loom_expand(bg, bs)));
    compare("matmul, broadcast batch dims",
            loom_matmul(a, loom_expand(b, LOOM_SHAPE(4, 3, 2, 6, 7))),
            loom_matmul(ag, loom_expand(bg, LOOM_SHAPE(4, 3, 2, 6, 7))));
    free(va), free(vb);
  }
}

static void check_nn(void) {
  LOOM_SCOPE {
    double *vx = random_values(4 * 3 * 12 * 12, 50, -1, 1),
           *vw = random_values(8 * 3 * 3 * 3, 51, -1, 1);
    loom_tensor *x, *xg, *w, *wg;
    pair(vx, LOOM_SHAPE(4, 3, 12, 12), LOOM_F32, &x, &xg);
    pair(vw, LOOM_SHAPE(8, 3, 3, 3), LOOM_F32, &w, &wg);
    loom_conv2d_opts o = {.stride = {1, 1}, .padding = {1, 1}};
    compare("conv2d", loom_conv2d_f(x, w, NULL, o), loom_conv2d_f(xg, wg, NULL, o));
    compare("max_pool2d", loom_max_pool2d(x, 2, 0, 0), loom_max_pool2d(xg, 2, 0, 0));
    compare("avg_pool2d", loom_avg_pool2d(x, 3, 1, 1), loom_avg_pool2d(xg, 3, 1, 1));
    double labels[4] = {1, 7, 0, 3};
    loom_tensor *y, *yg;
    pair(labels, LOOM_SHAPE(4), LOOM_I64, &y, &yg);
    loom_tensor *logits = loom_reshape(x, LOOM_SHAPE(4, -1)),
                *logitsg = loom_reshape(xg, LOOM_SHAPE(4, -1));
    compare("cross_entropy", loom_cross_entropy(logits, y), loom_cross_entropy(logitsg, yg));
    compare("embedding", loom_embedding_f(y, w), loom_embedding_f(yg, wg));
    /* gradients of a small network */
    loom_tensor *outs[2] = {loom_mean_all(loom_square(loom_conv2d_f(x, w, NULL, o))),
                            loom_mean_all(loom_square(loom_conv2d_f(xg, wg, NULL, o)))};
    loom_tensor *grads[2];
    CHECK_OK(loom_grad_of(&outs[0], 1, &w, 1, &grads[0]));
    CHECK_OK(loom_grad_of(&outs[1], 1, &wg, 1, &grads[1]));
    compare("conv2d weight gradient", grads[0], grads[1]);
    free(vx), free(vw);
  }
}

/* Three Adam steps of a linear layer on each device. */
static void check_training(void) {
  loom_tensor *w[2];
  for (int d = 0; d < 2; d++) LOOM_SCOPE {
      CHECK_OK(loom_set_default_device(d ? GPU : LOOM_CPU));
      loom_params *ps = loom_params_new();
      loom_linear l = loom_linear_new(ps, "fc", 16, 4, loom_key_new(5));
      loom_optim *opt =
          loom_adam(ps, (loom_adam_opts){.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
      double *vx = random_values(32 * 16, 60, -1, 1);
      loom_tensor *x, *xg;
      pair(vx, LOOM_SHAPE(32, 16), LOOM_F32, &x, &xg);
      for (int step = 0; step < 3; step++) LOOM_SCOPE {
          loom_tensor *loss = loom_mean_all(loom_square(loom_linear_forward(&l, d ? xg : x)));
          loom_optim_zero_grad(opt);
          CHECK_OK(loom_backward(loss));
          CHECK_OK(loom_optim_step(opt));
          loom_item(loss);
        }
      w[d] = loom_keep(loom_retain(l.weight));
      loom_optim_free(opt);
      loom_params_free(ps);
      free(vx);
    }
  CHECK_OK(loom_set_default_device(LOOM_CPU));
  compare("adam x3 weight", w[0], w[1]);
  loom_free(w[0]), loom_free(w[1]);
}

/* A CPU leaf used on the GPU: tanh(x) @ w computed on the device, the loss
 * back on the host; x's gradient crosses both copies and matches the CPU's. */
static void check_grad_across_devices(void) {
  LOOM_SCOPE {
    double *vx = random_values(8 * 16, 70, -2, 2), *vw = random_values(16 * 4, 71, -1, 1);
    loom_tensor *grads[2];
    for (int d = 0; d < 2; d++) {
      loom_tensor *x =
          loom_cast(loom_from_data(vx, LOOM_SHAPE(8, 16), LOOM_F64, LOOM_CPU), LOOM_F32);
      loom_realize(x);
      CHECK_OK(loom_set_requires_grad(x, true));
      loom_tensor *w =
          loom_cast(loom_from_data(vw, LOOM_SHAPE(16, 4), LOOM_F64, LOOM_CPU), LOOM_F32);
      loom_tensor *on = d ? loom_to(x, GPU) : x, *wd = d ? loom_to(w, GPU) : w;
      loom_tensor *y = loom_matmul(loom_tanh(on), wd);
      loom_tensor *loss = loom_mean_all(loom_square(d ? loom_to(y, LOOM_CPU) : y));
      CHECK_OK(loom_backward(loss));
      grads[d] = loom_grad(x);
      CHECK(grads[d] && loom_device_of(grads[d]).type == LOOM_DEVICE_CPU);
    }
    LOOM_NO_GRAD { compare("gradient across devices", grads[0], loom_to(grads[1], GPU)); }
    free(vx), free(vw);
  }
}

/* A compiled program (linear, tanh, softmax) on each device, run twice with
 * new inputs: the same values. */
static void check_program(void) {
  LOOM_SCOPE {
    double *vw = random_values(16 * 8, 80, -1, 1), *vx = random_values(2 * 32 * 16, 81, -2, 2);
    loom_tensor *wc, *wg;
    pair(vw, LOOM_SHAPE(16, 8), LOOM_F32, &wc, &wg);
    loom_program *prog[2];
    for (int d = 0; d < 2; d++) {
      loom_tensor *in = loom_input("x", LOOM_SHAPE(32, 16), LOOM_F32, d ? GPU : LOOM_CPU);
      loom_tensor *y = loom_softmax(loom_tanh(loom_matmul(in, d ? wg : wc)), -1);
      prog[d] = loom_compile(&y, 1, &in, 1);
      CHECK_MSG(prog[d] != NULL, "compile: %s", loom_last_error() ? loom_last_error() : "?");
    }
    for (int run = 0; run < 2 && prog[0] && prog[1]; run++) {
      loom_tensor *xc, *xg, *yc = NULL, *yg = NULL;
      pair(vx + run * 32 * 16, LOOM_SHAPE(32, 16), LOOM_F32, &xc, &xg);
      CHECK_OK(loom_program_run(prog[0], &xc, &yc));
      CHECK_OK(loom_program_run(prog[1], &xg, &yg));
      compare("program softmax(tanh(x @ w))", yc, yg);
    }
    loom_program_free(prog[0]), loom_program_free(prog[1]);
    free(vw), free(vx);
  }
}

/* Uniform and Bernoulli draws bit for bit; normal ones within the math's error. */
static void check_random(void) {
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) LOOM_SCOPE {
      loom_key k = loom_key_fold(loom_key_new(1234), (uint64_t)dt);
      loom_tensor *c = loom_rand_key(k, LOOM_SHAPE(100003), dt, LOOM_CPU);
      loom_tensor *g = loom_rand_key(k, LOOM_SHAPE(100003), dt, GPU);
      size_t bytes = 100003 * loom_dtype_size(dt);
      void *hc = malloc(bytes), *hg = malloc(bytes);
      CHECK_OK(loom_copy_to_host(c, hc, bytes));
      CHECK_OK(loom_copy_to_host(g, hg, bytes));
      CHECK_MSG(memcmp(hc, hg, bytes) == 0, "uniform %s draws differ", loom_dtype_name(dt));
      free(hc), free(hg);
      compare("randn", loom_randn_key(k, LOOM_SHAPE(4099), dt, LOOM_CPU),
              loom_randn_key(k, LOOM_SHAPE(4099), dt, GPU));
      compare("bernoulli", loom_bernoulli_key(k, 0.3, LOOM_SHAPE(5000), LOOM_CPU),
              loom_bernoulli_key(k, 0.3, LOOM_SHAPE(5000), GPU));
    }
}

int main(void) {
  const lm_cu_device *dev = loom_cuda_available() ? lm_cu_device_at(0) : NULL;
  if (!dev) {
    printf("SKIP: no CUDA device: %s\n", loom_cuda_unavailable_reason());
    return 0;
  }
  if (strncmp(dev->name, "loom fake", 9) == 0) {
    printf("SKIP: the driver double cannot run kernels\n");
    return 0;
  }
  printf("device: %s, sm_%d, %d SMs, %.1f GiB, peak %.0f GB/s\n", dev->name, dev->sm,
         dev->multiprocessors, dev->total_mem / 1073741824.0, dev->peak_gbs);
  check_elementwise();
  check_reductions();
  check_matmul();
  check_batched_matmul();
  check_nn();
  check_training();
  check_grad_across_devices();
  check_program();
  check_random();
  printf("worst difference as a share of its tolerance: f32 %.3g, f64 %.3g\n", worst_f32,
         worst_f64);
  return check_report();
}
