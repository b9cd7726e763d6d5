/* Neural-network ops, layers and losses: forward values against plain loops
 * and hand-computed values, gradients against finite differences (F64). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "gradcheck.h"
#include "loom.h"
#include "test_device.h"

/* ------------------------------------------------------------ forward */

static void conv_ref(const double *x, const double *w, const double *b, int N, int C, int H, int W,
                     int O, int K, int stride, int pad, int dil, int groups, double *out, int OH,
                     int OW) {
  int Cg = C / groups, Og = O / groups;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          double s = b ? b[o] : 0;
          int g = o / Og;
          for (int c = 0; c < Cg; c++)
            for (int kh = 0; kh < K; kh++)
              for (int kw = 0; kw < K; kw++) {
                int ih = oh * stride - pad + kh * dil, iw = ow * stride - pad + kw * dil;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += x[((n * C + g * Cg + c) * H + ih) * W + iw] *
                     w[((o * Cg + c) * K + kh) * K + kw];
              }
          out[((n * O + o) * OH + oh) * OW + ow] = s;
        }
}

static void test_conv_forward(void) {
  typedef struct conv_case {
    int N, C, H, W, O, K, stride, pad, dil, groups;
  } conv_case;
  conv_case cases[] = {{2, 3, 7, 6, 4, 3, 1, 1, 1, 1},
                       {1, 4, 9, 9, 6, 3, 2, 0, 1, 2},
                       {2, 2, 8, 7, 2, 3, 1, 2, 2, 1},
                       {1, 1, 5, 5, 3, 1, 1, 0, 1, 1},
                       /* depthwise (one input channel an output): 1 and 2 outputs each */
                       {2, 5, 9, 8, 5, 3, 1, 1, 1, 5},
                       {1, 3, 11, 10, 6, 5, 2, 2, 2, 3},
                       {1, 4, 6, 6, 4, 1, 1, 0, 1, 4}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) LOOM_SCOPE {
      conv_case c = cases[t];
      static double x[4096], w[1024], b[16], want[8192], got[8192];
      int nx = c.N * c.C * c.H * c.W, nw = c.O * (c.C / c.groups) * c.K * c.K;
      for (int i = 0; i < nx; i++) x[i] = gradcheck_uniform() - 0.5;
      for (int i = 0; i < nw; i++) w[i] = gradcheck_uniform() - 0.5;
      for (int i = 0; i < c.O; i++) b[i] = gradcheck_uniform();
      int OH = (c.H + 2 * c.pad - c.dil * (c.K - 1) - 1) / c.stride + 1;
      int OW = (c.W + 2 * c.pad - c.dil * (c.K - 1) - 1) / c.stride + 1;
      conv_ref(x, w, b, c.N, c.C, c.H, c.W, c.O, c.K, c.stride, c.pad, c.dil, c.groups, want, OH,
               OW);
      loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(c.N, c.C, c.H, c.W), LOOM_F64, test_device());
      loom_tensor *tw =
          loom_from_data(w, LOOM_SHAPE(c.O, c.C / c.groups, c.K, c.K), LOOM_F64, test_device());
      loom_tensor *tb = loom_from_data(b, LOOM_SHAPE(c.O), LOOM_F64, test_device());
      loom_conv2d_opts o = {{c.stride, c.stride}, {c.pad, c.pad}, {c.dil, c.dil}, c.groups};
      loom_tensor *y = loom_conv2d_f(tx, tw, tb, o);
      int ny = c.N * c.O * OH * OW;
      CHECK_OK(loom_copy_to_host(y, got, (size_t)ny * sizeof(double)));
      double worst = 0;
      for (int i = 0; i < ny; i++) worst = fmax(worst, fabs(got[i] - want[i]));
      CHECK_MSG(worst < 1e-12, "conv case %zu differs by %g", t, worst);
    }
}

static void test_pool_forward(void) {
  LOOM_SCOPE {
    double x[2 * 2 * 5 * 5], mx[2 * 2 * 3 * 3], av[2 * 2 * 3 * 3];
    for (int i = 0; i < 100; i++) x[i] = gradcheck_uniform();
    loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(2, 2, 5, 5), LOOM_F64, test_device());
    CHECK_OK(loom_copy_to_host(loom_max_pool2d(tx, 3, 2, 1), mx, sizeof mx));
    CHECK_OK(loom_copy_to_host(loom_avg_pool2d(tx, 3, 2, 1), av, sizeof av));
    for (int nc = 0; nc < 4; nc++)
      for (int oh = 0; oh < 3; oh++)
        for (int ow = 0; ow < 3; ow++) {
          double m = -INFINITY, s = 0;
          for (int kh = 0; kh < 3; kh++)
            for (int kw = 0; kw < 3; kw++) {
              int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
              if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
              double v = x[(nc * 5 + ih) * 5 + iw];
              m = fmax(m, v);
              s += v;
            }
          int o = (nc * 3 + oh) * 3 + ow;
          CHECK_NEAR(mx[o], m, 0);
          CHECK_NEAR(av[o], s / 9, 1e-15); /* padding counts, as torch's default */
        }
  }
}

/* stride == kernel, no padding: the windows are a cropped reshape (blocks);
 * odd sizes leave the last rows and columns out, as in torch. */
static void test_pool_blocks(void) {
  LOOM_SCOPE {
    double x[2 * 5 * 7], got[2 * 2 * 3];
    for (int i = 0; i < 70; i++) x[i] = gradcheck_uniform();
    loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(1, 2, 5, 7), LOOM_F64, test_device());
    for (int k = 2; k <= 3; k++)
      for (int is_max = 0; is_max < 2; is_max++) {
        loom_tensor *y = is_max ? loom_max_pool2d(tx, k, k, 0) : loom_avg_pool2d(tx, k, 0, 0);
        int OH = 5 / k, OW = 7 / k;
        CHECK_EQ_INT(loom_shape_of(y).dim[2], OH);
        CHECK_EQ_INT(loom_shape_of(y).dim[3], OW);
        CHECK_OK(loom_copy_to_host(y, got, sizeof(double) * (size_t)(2 * OH * OW)));
        for (int c = 0; c < 2; c++)
          for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
              double m = -INFINITY, s = 0;
              for (int kh = 0; kh < k; kh++)
                for (int kw = 0; kw < k; kw++) {
                  double v = x[(c * 5 + oh * k + kh) * 7 + ow * k + kw];
                  m = fmax(m, v), s += v;
                }
              CHECK_NEAR(got[(c * OH + oh) * OW + ow], is_max ? m : s / (k * k), 1e-15);
            }
      }
  }
}

/* Cross entropy, NLL, BCE and MSE against values computed here in double. */
static void test_loss_values(void) {
  LOOM_SCOPE {
    double logits[6] = {1, 2, 3, 0.5, -1, 2}, targets[6] = {1, 0, 1, 0, 1, 0.5};
    int64_t labels[2] = {2, 0};
    loom_tensor *l = loom_from_data(logits, LOOM_SHAPE(2, 3), LOOM_F64, test_device());
    loom_tensor *y = loom_from_data(labels, LOOM_SHAPE(2), LOOM_I64, test_device());
    double lse0 = log(exp(1) + exp(2) + exp(3)), lse1 = log(exp(0.5) + exp(-1) + exp(2));
    double ce = ((lse0 - 3) + (lse1 - 0.5)) / 2;
    CHECK_NEAR(loom_item(loom_cross_entropy(l, y)), ce, 1e-14);
    CHECK_NEAR(loom_item(loom_nll_loss(loom_log_softmax(l, 1), y)), ce, 1e-14);
    double bce = 0, mse = 0;
    for (int i = 0; i < 6; i++) {
      double p = 1 / (1 + exp(-logits[i]));
      bce -= targets[i] * log(p) + (1 - targets[i]) * log(1 - p);
      mse += (logits[i] - targets[i]) * (logits[i] - targets[i]);
    }
    loom_tensor *t = loom_from_data(targets, LOOM_SHAPE(2, 3), LOOM_F64, test_device());
    CHECK_NEAR(loom_item(loom_bce_with_logits(l, t)), bce / 6, 1e-14);
    CHECK_NEAR(loom_item(loom_mse_loss(l, t)), mse / 6, 1e-14);
    /* stable for huge logits */
    double big[2] = {1000, -1000};
    loom_tensor *b = loom_from_data(big, LOOM_SHAPE(1, 2), LOOM_F64, test_device());
    int64_t one[1] = {1};
    CHECK_NEAR(loom_item(loom_cross_entropy(
                   b, loom_from_data(one, LOOM_SHAPE(1), LOOM_I64, test_device()))),
               2000, 1e-9);
    /* labels out of range are an error at the call, on every device (a
     * device's are copied down to be checked; tests/test_checks.c has the rest) */
    int64_t bad[2] = {2, 3};
    CHECK_STATUS(loom_cross_entropy(l, loom_from_data(bad, LOOM_SHAPE(2), LOOM_I64, test_device())),
                 LOOM_ERR_VALUE);
    int64_t oh_labels[3] = {0, 2, 1}, oh[9];
    CHECK_OK(loom_copy_to_host(
        loom_one_hot(loom_from_data(oh_labels, LOOM_SHAPE(3), LOOM_I64, test_device()), 3), oh,
        sizeof oh));
    CHECK(oh[0] == 1 && oh[1] == 0 && oh[5] == 1 && oh[7] == 1 && oh[8] == 0);
    /* an empty table has no row to pick, even for indices not known yet */
    loom_tensor *lazy_ix = loom_cast(loom_arange(0, 3, 1, LOOM_F32, test_device()), LOOM_I64);
    CHECK_STATUS(loom_embedding_f(lazy_ix, loom_zeros(LOOM_SHAPE(0, 4), LOOM_F32, test_device())),
                 LOOM_ERR_SHAPE);
    CHECK_OK(loom_realize(
        loom_embedding_f(loom_cast(loom_arange(0, 0, 1, LOOM_F32, test_device()), LOOM_I64),
                         loom_zeros(LOOM_SHAPE(0, 4), LOOM_F32, test_device()))));
    loom_clear_error();
  }
}

/* Batch norm in training records the running-stat updates: applied with the
 * next realization, with torch's momentum and unbiased variance. */
static void test_batchnorm_running_stats(void) {
  loom_params *ps = loom_params_new();
  loom_batchnorm2d bn = loom_batchnorm2d_new(ps, "bn", 2);
  LOOM_SCOPE {
    float x[2 * 2 * 1 * 2] = {1, 3, 10, 20, 5, 7, 30, 40}; /* [N=2, C=2, 1, 2] */
    loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(2, 2, 1, 2), LOOM_F32, test_device());
    loom_tensor *y = loom_batchnorm2d_forward(&bn, tx, true);
    float out[8], rm[2], rv[2];
    CHECK_OK(loom_copy_to_host(y, out, sizeof out));
    CHECK_OK(loom_copy_to_host(bn.running_mean, rm, sizeof rm));
    CHECK_OK(loom_copy_to_host(bn.running_var, rv, sizeof rv));
    /* channel 0: 1 3 5 7: mean 4, biased var 5, unbiased 20/3 */
    CHECK_NEAR(rm[0], 0.4, 1e-6);
    CHECK_NEAR(rv[0], 0.9 + 0.1 * 20.0 / 3.0, 1e-6);
    CHECK_NEAR(out[0], (1 - 4) / sqrt(5 + 1e-5), 1e-5);
    /* eval uses the running stats */
    float e[8];
    CHECK_OK(loom_copy_to_host(loom_batchnorm2d_forward(&bn, tx, false), e, sizeof e));
    CHECK_NEAR(e[0], (1 - rm[0]) / sqrt(rv[0] + 1e-5), 1e-5);
    /* an empty batch in train mode: an empty result, the statistics untouched (as
     * PyTorch); they became NaN for good before */
    loom_tensor *empty = loom_zeros(LOOM_SHAPE(0, 2, 1, 2), LOOM_F32, test_device());
    loom_tensor *ye = loom_batchnorm2d_forward(&bn, empty, true);
    CHECK_STATUS(ye, LOOM_OK);
    CHECK_EQ_INT(loom_numel(ye), 0);
    CHECK_OK(loom_realize(ye));
    float rm2[2], rv2[2], e2[8];
    CHECK_OK(loom_copy_to_host(bn.running_mean, rm2, sizeof rm2));
    CHECK_OK(loom_copy_to_host(bn.running_var, rv2, sizeof rv2));
    CHECK(memcmp(rm, rm2, sizeof rm) == 0 && memcmp(rv, rv2, sizeof rv) == 0);
    CHECK_OK(loom_copy_to_host(loom_batchnorm2d_forward(&bn, tx, false), e2, sizeof e2));
    CHECK(memcmp(e, e2, sizeof e) == 0);
  }
  loom_params_free(ps);
}

static void test_layers(void) {
  loom_params *ps = loom_params_new();
  loom_linear fc = loom_linear_new(ps, "fc1", 64, 32, loom_key_new(1));
  CHECK_EQ_INT(loom_params_count(ps), 2);
  CHECK(strcmp(loom_params_name(ps, 0), "fc1.weight") == 0);
  CHECK(loom_requires_grad(fc.weight));
  float w[32 * 64];
  CHECK_OK(loom_copy_to_host(fc.weight, w, sizeof w));
  double bound = 1 / sqrt(64.0), lo = 1, hi = -1;
  for (int i = 0; i < 32 * 64; i++) lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
  CHECK_MSG(lo >= -bound && hi <= bound && lo < -0.8 * bound && hi > 0.8 * bound,
            "kaiming-uniform bounds: [%g, %g] vs %g", lo, hi, bound);
  loom_linear fc2 = loom_linear_new(ps, "fc2", 32, 4, loom_key_new(2));
  loom_seq *seq = loom_seq_new();
  loom_seq_add(seq, loom_stage_linear, &fc);
  loom_seq_add(seq, loom_stage_relu, NULL);
  loom_seq_add(seq, loom_stage_linear, &fc2);
  LOOM_SCOPE {
    loom_tensor *x = loom_randn_key(loom_key_new(3), LOOM_SHAPE(5, 64), LOOM_F32, test_device());
    float a[20], b[20];
    CHECK_OK(loom_copy_to_host(loom_seq_forward(seq, x, true), a, sizeof a));
    loom_tensor *manual = loom_linear_forward(&fc2, loom_relu(loom_linear_forward(&fc, x)));
    CHECK_OK(loom_copy_to_host(manual, b, sizeof b));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_STATUS(loom_linear_forward(&fc, loom_zeros(LOOM_SHAPE(5, 63), LOOM_F32, test_device())),
                 LOOM_ERR_SHAPE);
  }
  loom_seq_free(seq);
  loom_params_free(ps);
  loom_clear_error();
}

/* ------------------------------------------------------------ gradients */

static loom_tensor *g_conv(loom_tensor *const *in) {
  return loom_conv2d_f(in[0], in[1], in[2], (loom_conv2d_opts){{2, 1}, {1, 0}, {1, 2}, 1});
}
static loom_tensor *g_conv_groups(loom_tensor *const *in) {
  return loom_conv2d_f(in[0], in[1], in[2], (loom_conv2d_opts){.padding = {1, 1}, .groups = 2});
}
static loom_tensor *g_conv_depthwise(loom_tensor *const *in) {
  return loom_conv2d_f(in[0], in[1], in[2],
                       (loom_conv2d_opts){{2, 1}, {1, 1}, {1, 2}, .groups = 3});
}
static loom_tensor *g_maxpool(loom_tensor *const *in) { return loom_max_pool2d(in[0], 2, 2, 0); }
static loom_tensor *g_avgpool(loom_tensor *const *in) { return loom_avg_pool2d(in[0], 3, 1, 1); }
static loom_tensor *g_maxpool_odd(loom_tensor *const *in) {
  return loom_max_pool2d(in[0], 2, 0, 0);
}
static loom_tensor *g_avgpool_odd(loom_tensor *const *in) {
  return loom_avg_pool2d(in[0], 3, 3, 0);
}
static loom_tensor *g_embedding(loom_tensor *const *in) {
  int64_t idx[5] = {3, 0, 3, 1, 2};
  return loom_embedding_f(loom_from_data(idx, LOOM_SHAPE(5), LOOM_I64, test_device()), in[0]);
}
/* more rows than indices, some repeated: the gradient by rank, not the one-hot GEMM */
static loom_tensor *g_embedding_wide(loom_tensor *const *in) {
  int64_t idx[6] = {3, 0, 10, 3, 9, 3};
  return loom_embedding_f(loom_from_data(idx, LOOM_SHAPE(2, 3), LOOM_I64, test_device()), in[0]);
}
static loom_tensor *g_batchnorm(loom_tensor *const *in) {
  return loom_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5);
}
static loom_tensor *g_layernorm(loom_tensor *const *in) {
  return loom_layer_norm(in[0], 1, in[1], in[2], 1e-5);
}
static loom_tensor *g_cross_entropy(loom_tensor *const *in) {
  int64_t y[4] = {1, 0, 2, 2};
  return loom_cross_entropy(in[0], loom_from_data(y, LOOM_SHAPE(4), LOOM_I64, test_device()));
}
static loom_tensor *g_bce(loom_tensor *const *in) { return loom_bce_with_logits(in[0], in[1]); }
static loom_tensor *g_mse(loom_tensor *const *in) { return loom_mse_loss(in[0], in[1]); }
static loom_tensor *g_linear(loom_tensor *const *in) { return loom_linear_f(in[0], in[1], in[2]); }
static loom_tensor *g_dropout(loom_tensor *const *in) {
  return loom_dropout(in[0], 0.4, loom_key_new(9), true);
}

static const gcase grads[] = {
    {"conv2d (stride, pad, dilation)",
     g_conv,
     3,
     {LOOM_SHAPE(2, 2, 5, 6), LOOM_SHAPE(3, 2, 2, 2), LOOM_SHAPE(3)},
     ANY},
    {"conv2d (groups, bias)",
     g_conv_groups,
     3,
     {LOOM_SHAPE(1, 4, 4, 4), LOOM_SHAPE(4, 2, 3, 3), LOOM_SHAPE(4)},
     ANY},
    {"conv2d (depthwise, 2 outputs a channel)",
     g_conv_depthwise,
     3,
     {LOOM_SHAPE(2, 3, 5, 6), LOOM_SHAPE(6, 1, 3, 2), LOOM_SHAPE(6)},
     ANY},
    {"max_pool2d", g_maxpool, 1, {LOOM_SHAPE(1, 2, 4, 4)}, DISTINCT},
    {"avg_pool2d", g_avgpool, 1, {LOOM_SHAPE(1, 2, 4, 4)}, ANY},
    {"max_pool2d (odd, cropped)", g_maxpool_odd, 1, {LOOM_SHAPE(1, 2, 5, 7)}, DISTINCT},
    {"avg_pool2d (stride = kernel)", g_avgpool_odd, 1, {LOOM_SHAPE(1, 2, 7, 8)}, ANY},
    {"embedding", g_embedding, 1, {LOOM_SHAPE(4, 3)}, ANY},
    {"embedding_wide", g_embedding_wide, 1, {LOOM_SHAPE(11, 3)}, ANY},
    {"batch_norm", g_batchnorm, 3, {LOOM_SHAPE(3, 2, 2, 2), LOOM_SHAPE(2), LOOM_SHAPE(2)}, ANY},
    {"layer_norm", g_layernorm, 3, {LOOM_SHAPE(3, 5), LOOM_SHAPE(5), LOOM_SHAPE(5)}, ANY},
    {"cross_entropy", g_cross_entropy, 1, {LOOM_SHAPE(4, 3)}, ANY},
    {"bce_with_logits", g_bce, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 3)}, ANY},
    {"mse_loss", g_mse, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 3)}, ANY},
    {"linear", g_linear, 3, {LOOM_SHAPE(4, 3), LOOM_SHAPE(2, 3), LOOM_SHAPE(2)}, ANY},
    {"dropout", g_dropout, 1, {LOOM_SHAPE(4, 5)}, ANY},
};

/* log_softmax, softmax and cross_entropy of logits too large for x - (max + log(sum)):
 * 1e16 + log(2) is 1e16 in F64 (that form gave 0 for -0.693); (x - max) - log(sum)
 * keeps the difference, over the last dim (a row kernel) and another. */
static void test_huge_logits(void) {
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) LOOM_SCOPE {
      double v[4] = {1e16, 1e16, -3e15, -3e15}, got[4];
      loom_tensor *x =
          loom_cast(loom_from_data(v, LOOM_SHAPE(2, 2), LOOM_F64, test_device()), (loom_dtype)dt);
      double tol = dt == LOOM_F32 ? 1e-6 : 1e-14;
      CHECK_OK(loom_copy_to_host(loom_cast(loom_log_softmax(x, 1), LOOM_F64), got, sizeof got));
      for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], -M_LN2, tol);
      CHECK_OK(loom_copy_to_host(loom_cast(loom_log_softmax(loom_transpose(x, 0, 1), 0), LOOM_F64),
                                 got, sizeof got));
      for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], -M_LN2, tol);
      CHECK_OK(loom_copy_to_host(loom_cast(loom_softmax(loom_transpose(x, 0, 1), 0), LOOM_F64), got,
                                 sizeof got));
      for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], 0.5, tol);
      int64_t lv[2] = {0, 1};
      loom_tensor *labels = loom_from_data(lv, LOOM_SHAPE(2), LOOM_I64, test_device());
      CHECK_NEAR(loom_item(loom_cross_entropy(x, labels)), M_LN2, tol);
      /* logits 1e12 apart from 1e12 + 1: F64 keeps the 1 */
      if (dt == LOOM_F64) {
        double w[2] = {1e12, 1e12 + 1};
        loom_tensor *y = loom_from_data(w, LOOM_SHAPE(1, 2), LOOM_F64, test_device());
        CHECK_OK(loom_copy_to_host(loom_log_softmax(y, 1), got, 2 * sizeof(double)));
        CHECK_NEAR(got[0], -log1p(exp(1.0)), 1e-12);
        CHECK_NEAR(got[1], -log1p(exp(-1.0)), 1e-12);
      }
    }
}

/* cross_entropy_ex beyond the fixtures: every label ignored gives NaN (mean)
 * and 0 (sum), as torch; labels given lazily (not yet computed) work too, and
 * the ignored label may lie outside the classes. */
static void test_cross_entropy_ignored(void) {
  LOOM_SCOPE {
    float z[6] = {0.5f, -1, 2, 0, 1, -2};
    int64_t none[2] = {-100, -100}, some[2] = {2, -100};
    loom_tensor *x = loom_from_data(z, LOOM_SHAPE(2, 3), LOOM_F32, test_device());
    loom_cross_entropy_opts mean = {.ignore = true, .ignore_index = -100};
    loom_cross_entropy_opts sum = {
        .ignore = true, .ignore_index = -100, .reduction = LOOM_REDUCE_SUM};
    loom_tensor *all = loom_from_data(none, LOOM_SHAPE(2), LOOM_I64, test_device());
    CHECK(isnan(loom_item(loom_cross_entropy_ex(x, all, mean))));
    CHECK_NEAR(loom_item(loom_cross_entropy_ex(x, all, sum)), 0, 0);
    loom_tensor *lazy = loom_add_s(loom_from_data(some, LOOM_SHAPE(2), LOOM_I64, test_device()), 0);
    double want = -(2 - log(exp(0.5) + exp(-1.0) + exp(2.0)));
    CHECK_NEAR(loom_item(loom_cross_entropy_ex(x, lazy, mean)), want, 1e-6);
  }
}

/* The composites' edges: repeat at the most dims (copies side by side, no
 * room for another dim) and with a zero; var over one value with Bessel's
 * correction is NaN, as torch; gather of an index outside the axis names it. */
static void test_composite_edges(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_reshape(loom_arange(0, 2, 1, LOOM_F32, test_device()),
                                  ((loom_shape){LOOM_MAX_DIMS, {1, 1, 1, 1, 1, 1, 1, 2}}));
    int64_t reps[LOOM_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 3, 2};
    loom_tensor *r = loom_repeat(x, reps, LOOM_MAX_DIMS);
    float v[12];
    CHECK_OK(loom_copy_to_host(r, v, sizeof v));
    for (int i = 0; i < 12; i++) CHECK_NEAR(v[i], i % 2, 0);
    CHECK_EQ_INT(loom_shape_of(r).dim[6], 3);
    int64_t zero[2] = {0, 2};
    CHECK_EQ_INT(
        loom_shape_of(loom_repeat(loom_ones(LOOM_SHAPE(2, 2), LOOM_F32, test_device()), zero, 2))
            .dim[0],
        0);
    CHECK(isnan(
        loom_item(loom_var(loom_ones(LOOM_SHAPE(1), LOOM_F32, test_device()), NULL, 0, 1, false))));
    /* cumsum: integers exact as I64 over a long axis (three levels of blocks), floats */
    loom_tensor *ones = loom_ones(LOOM_SHAPE(70001), LOOM_I32, test_device());
    loom_tensor *counts = loom_cumsum(ones, 0);
    CHECK_EQ_INT(loom_dtype_of(counts), LOOM_I64);
    int64_t last = 0;
    CHECK_OK(loom_item_i64(loom_slice(counts, 0, 70000, 70001, 1), &last));
    CHECK_EQ_INT(last, 70001);
    CHECK_OK(loom_item_i64(loom_slice(counts, 0, 12344, 12345, 1), &last));
    CHECK_EQ_INT(last, 12345);
    loom_tensor *ramp = loom_arange(0, 5000, 1, LOOM_F64, test_device());
    CHECK_NEAR(loom_item(loom_slice(loom_cumsum(ramp, -1), 0, 4999, 5000, 1)), 4999.0 * 5000 / 2,
               1e-6);
    /* rounding in F32: the float just under a half, ties to even, zeros' signs, NaN */
    float rv[6] = {0.49999997f, 2.5f, -0.3f, -0.5f, NAN, -8388609.0f}, out[6];
    loom_tensor *rt = loom_from_data(rv, LOOM_SHAPE(6), LOOM_F32, test_device());
    CHECK_OK(loom_copy_to_host(loom_round(rt), out, sizeof out));
    CHECK(out[0] == 0 && out[1] == 2 && out[2] == 0 && signbit(out[2]) && signbit(out[3]) &&
          isnan(out[4]) && out[5] == -8388609.0f);
    CHECK_OK(loom_copy_to_host(loom_ceil(rt), out, sizeof out));
    CHECK(out[0] == 1 && out[1] == 3 && out[2] == 0 && signbit(out[2]) && isnan(out[4]));
    CHECK_OK(loom_copy_to_host(loom_floor(rt), out, sizeof out));
    CHECK(out[0] == 0 && !signbit(out[0]) && out[1] == 2 && out[2] == -1 && out[3] == -1);
    int32_t iv[3] = {-7, 0, 9}, io[3];
    loom_tensor *it = loom_floor(loom_from_data(iv, LOOM_SHAPE(3), LOOM_I32, test_device()));
    CHECK_EQ_INT(loom_dtype_of(it), LOOM_I32);
    CHECK_OK(loom_copy_to_host(it, io, sizeof io));
    CHECK(io[0] == -7 && io[2] == 9);
    int64_t far[2] = {1, 5};
    loom_tensor *g = loom_gather(loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, test_device()), 1,
                                 loom_from_data(far, LOOM_SHAPE(2, 1), LOOM_I64, test_device()));
    if (test_device().type == LOOM_DEVICE_CPU) {
      CHECK_EQ_INT(loom_status_of(g), LOOM_ERR_VALUE);
      CHECK_STR_CONTAINS(loom_last_error(), "loom_gather");
    }
    loom_clear_error();
  }
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device())); /* layers and parameters */
  test_composite_edges();
  test_cross_entropy_ignored();
  test_huge_logits();
  test_conv_forward();
  test_pool_forward();
  test_pool_blocks();
  test_loss_values();
  test_batchnorm_running_stats();
  test_layers();
  for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++) LOOM_SCOPE {
      gradcheck(&grads[i]);
    }
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
