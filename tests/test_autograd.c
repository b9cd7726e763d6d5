/* Autograd: every differentiable op's gradient against central finite
 * differences in F64 (over broadcasting and views), hand-derived values,
 * accumulation across backward calls, no-grad regions, and second
 * derivatives through loom_grad_of. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gradcheck.h"
#include "loom.h"
#include "test_device.h"

/* ------------------------------------------------------------ the ops */
#define U(fn)                                                                                      \
  static loom_tensor *g_##fn(loom_tensor *const *in) { return loom_##fn(in[0]); }
U(neg)
U(abs)
U(exp)
U(log)
U(sqrt) U(rsqrt) U(sin) U(cos) U(tanh) U(sigmoid) U(relu) U(gelu) U(silu) U(square) U(reciprocal)
    U(erf) U(log1p) U(expm1)
#define B(fn)                                                                                      \
  static loom_tensor *g_##fn(loom_tensor *const *in) { return loom_##fn(in[0], in[1]); }
        B(add) B(sub) B(mul) B(div) B(pow) B(maximum) B(minimum) B(matmul)

            static loom_tensor *g_clamp(loom_tensor *const *in) {
  return loom_clamp(in[0], -1.4, -0.3); /* DISTINCT inputs lie 0.04 or more from each bound */
}
static loom_tensor *g_where(loom_tensor *const *in) {
  loom_tensor *c = loom_gt(in[0], in[1]);
  loom_tensor *r = loom_where(c, in[0], in[2]);
  loom_free(c);
  return r;
}
static const int ax1[] = {1}, ax0[] = {0};
static loom_tensor *g_sum(loom_tensor *const *in) { return loom_sum(in[0], ax1, 1, false); }
static loom_tensor *g_mean(loom_tensor *const *in) { return loom_mean(in[0], ax0, 1, true); }
static loom_tensor *g_max(loom_tensor *const *in) { return loom_max(in[0], ax1, 1, false); }
static loom_tensor *g_var(loom_tensor *const *in) { return loom_var(in[0], ax1, 1, 1, false); }
static loom_tensor *g_std(loom_tensor *const *in) { return loom_std(in[0], NULL, 0, 0, true); }
static loom_tensor *g_min(loom_tensor *const *in) { return loom_min(in[0], NULL, 0, false); }
static loom_tensor *g_lse(loom_tensor *const *in) { return loom_logsumexp(in[0], 1); }
static loom_tensor *g_softmax(loom_tensor *const *in) { return loom_softmax(in[0], 1); }
static loom_tensor *g_log_softmax(loom_tensor *const *in) { return loom_log_softmax(in[0], 0); }
static loom_tensor *g_reshape(loom_tensor *const *in) {
  return loom_reshape(in[0], LOOM_SHAPE(3, 2));
}
static loom_tensor *g_permute(loom_tensor *const *in) {
  return loom_permute(in[0], (int[]){2, 0, 1}, 3);
}
static loom_tensor *g_expand(loom_tensor *const *in) {
  return loom_expand(in[0], LOOM_SHAPE(4, 2, 3));
}
static loom_tensor *g_slice(loom_tensor *const *in) { return loom_slice(in[0], 1, 1, 7, 2); }
static loom_tensor *g_pad(loom_tensor *const *in) {
  return loom_pad(in[0], (int64_t[]){2, -1, 1, 0}, 4, 0.5);
}
static loom_tensor *g_cat(loom_tensor *const *in) { return loom_cat(in, 2, 1); }
static loom_tensor *g_stack(loom_tensor *const *in) { return loom_stack(in, 2, 0); }
static loom_tensor *g_transpose_matmul(loom_tensor *const *in) {
  loom_tensor *t = loom_transpose(in[1], -1, -2);
  loom_tensor *r = loom_matmul(in[0], t);
  loom_free(t);
  return r;
}
static loom_tensor *g_chain(loom_tensor *const *in) { /* a fused chain with a shared value */
  loom_tensor *e = loom_exp(loom_mul_s(in[0], 0.5));
  loom_tensor *r = loom_div(loom_add(e, in[1]), loom_add_s(loom_square(e), 1));
  return r; /* its intermediates belong to the scope gradcheck runs in */
}

static const gcase cases[] = {
    {"neg", g_neg, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"abs", g_abs, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"exp", g_exp, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"log", g_log, 1, {LOOM_SHAPE(2, 3)}, POSITIVE},
    {"sqrt", g_sqrt, 1, {LOOM_SHAPE(2, 3)}, POSITIVE},
    {"rsqrt", g_rsqrt, 1, {LOOM_SHAPE(2, 3)}, POSITIVE},
    {"sin", g_sin, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"cos", g_cos, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"tanh", g_tanh, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"sigmoid", g_sigmoid, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"relu", g_relu, 1, {LOOM_SHAPE(2, 3)}, DISTINCT},
    {"clamp", g_clamp, 1, {LOOM_SHAPE(2, 3)}, DISTINCT},
    {"gelu", g_gelu, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"silu", g_silu, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"square", g_square, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"reciprocal", g_reciprocal, 1, {LOOM_SHAPE(2, 3)}, POSITIVE},
    {"erf", g_erf, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"log1p", g_log1p, 1, {LOOM_SHAPE(2, 3)}, POSITIVE},
    {"expm1", g_expm1, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"add (broadcast)", g_add, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(3)}, ANY},
    {"sub (broadcast)", g_sub, 2, {LOOM_SHAPE(2, 1), LOOM_SHAPE(1, 3)}, ANY},
    {"mul (broadcast)", g_mul, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 1)}, ANY},
    {"div", g_div, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 3)}, POSITIVE},
    {"pow", g_pow, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(3)}, POSITIVE},
    {"maximum", g_maximum, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 3)}, ANY},
    {"minimum", g_minimum, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(3)}, ANY},
    {"where", g_where, 3, {LOOM_SHAPE(2, 3), LOOM_SHAPE(3), LOOM_SHAPE(2, 3)}, ANY},
    {"sum", g_sum, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"mean", g_mean, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"max", g_max, 1, {LOOM_SHAPE(2, 3)}, DISTINCT},
    {"min (all)", g_min, 1, {LOOM_SHAPE(2, 3)}, DISTINCT},
    {"logsumexp", g_lse, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"var", g_var, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"std (all)", g_std, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"softmax", g_softmax, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"log_softmax", g_log_softmax, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"reshape", g_reshape, 1, {LOOM_SHAPE(2, 3)}, ANY},
    {"permute", g_permute, 1, {LOOM_SHAPE(2, 3, 2)}, ANY},
    {"expand", g_expand, 1, {LOOM_SHAPE(1, 3)}, ANY},
    {"slice with step", g_slice, 1, {LOOM_SHAPE(2, 8)}, ANY},
    {"pad (and crop)", g_pad, 1, {LOOM_SHAPE(3, 4)}, ANY},
    {"cat", g_cat, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 2)}, ANY},
    {"stack", g_stack, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 3)}, ANY},
    {"matmul 2-D", g_matmul, 2, {LOOM_SHAPE(3, 4), LOOM_SHAPE(4, 2)}, ANY},
    {"matmul batched broadcast", g_matmul, 2, {LOOM_SHAPE(2, 3, 4), LOOM_SHAPE(4, 2)}, ANY},
    {"matmul 1-D", g_matmul, 2, {LOOM_SHAPE(4), LOOM_SHAPE(4, 3)}, ANY},
    {"matmul of a transpose", g_transpose_matmul, 2, {LOOM_SHAPE(3, 4), LOOM_SHAPE(2, 4)}, ANY},
    {"fused chain", g_chain, 2, {LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 3)}, ANY},
};

static void test_all_ops(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) LOOM_SCOPE {
      gradcheck(&cases[i]);
    }
}

/* ------------------------------------------------------------ semantics */

static void test_accumulation_and_no_grad(void) {
  LOOM_SCOPE {
    double xv[3] = {1, 2, 3};
    loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(3), LOOM_F64, test_device());
    CHECK_OK(loom_set_requires_grad(x, true));
    loom_tensor *l1 = loom_sum_all(loom_square(x)); /* d/dx = 2x */
    CHECK_OK(loom_backward(l1));
    CHECK_OK(loom_backward(l1)); /* accumulates: 4x */
    double g[3];
    CHECK_OK(loom_copy_to_host(loom_grad(x), g, sizeof g));
    CHECK(g[0] == 4 && g[1] == 8 && g[2] == 12);
    loom_clear_grad(x);
    CHECK(loom_grad(x) == NULL);
    loom_tensor *y;
    LOOM_NO_GRAD { y = loom_mul_s(x, 2); }
    CHECK(!loom_requires_grad(y));
    CHECK_RC(loom_backward(loom_sum_all(y)), LOOM_ERR_VALUE);
    /* integer tensors never have gradients */
    loom_tensor *i = loom_arange(0, 3, 1, LOOM_I64, test_device());
    CHECK_RC(loom_set_requires_grad(i, true), LOOM_ERR_DTYPE);
    /* a loss realized before backward keeps what backward needs */
    loom_tensor *l2 = loom_sum_all(loom_mul(x, x));
    CHECK(loom_item(l2) == 14);
    CHECK_OK(loom_backward(l2));
    CHECK_OK(loom_copy_to_host(loom_grad(x), g, sizeof g));
    CHECK(g[0] == 2 && g[1] == 4 && g[2] == 6);
    loom_clear_error();
  }
}

/* tanh'' = -2 tanh (1 - tanh^2), through two loom_grad_of calls. */
static void test_second_derivative_tanh(void) {
  LOOM_SCOPE {
    double xv[4] = {-1.5, -0.2, 0.3, 2.0}, d2[4];
    loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(4), LOOM_F64, test_device());
    CHECK_OK(loom_set_requires_grad(x, true));
    loom_tensor *y = loom_sum_all(loom_tanh(x)), *g1, *g2;
    CHECK_OK(loom_grad_of(&y, 1, &x, 1, &g1));
    loom_tensor *s = loom_sum_all(g1);
    CHECK_OK(loom_grad_of(&s, 1, &x, 1, &g2));
    CHECK_OK(loom_copy_to_host(g2, d2, sizeof d2));
    for (int i = 0; i < 4; i++) {
      double t = tanh(xv[i]), want = -2 * t * (1 - t * t);
      CHECK_MSG(fabs(d2[i] - want) < 1e-12, "tanh'' at %g: %.15g, want %.15g", xv[i], d2[i], want);
    }
  }
}

/* A Hessian-vector product of a small MLP's loss against finite differences
 * of its gradient. */
static loom_tensor *mlp_loss(loom_tensor *w1, loom_tensor *w2, loom_tensor *x) {
  return loom_mean_all(loom_square(loom_matmul(loom_tanh(loom_matmul(x, w1)), w2)));
}

static void grad_at(const double *w1v, const double *w2v, const double *xv, double *gw1) {
  LOOM_SCOPE {
    loom_tensor *w1 = loom_from_data(w1v, LOOM_SHAPE(3, 4), LOOM_F64, test_device());
    loom_tensor *w2 = loom_from_data(w2v, LOOM_SHAPE(4, 2), LOOM_F64, test_device());
    loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(5, 3), LOOM_F64, test_device());
    loom_set_requires_grad(w1, true);
    loom_tensor *l = mlp_loss(w1, w2, x), *g;
    CHECK_OK(loom_grad_of(&l, 1, &w1, 1, &g));
    CHECK_OK(loom_copy_to_host(g, gw1, 12 * sizeof(double)));
  }
}

static void test_hessian_vector_mlp(void) {
  double w1v[12], w2v[8], xv[15], v[12], hv[12], up[12], down[12], w[12];
  for (int i = 0; i < 12; i++) w1v[i] = gradcheck_uniform() - 0.5, v[i] = gradcheck_uniform() - 0.5;
  for (int i = 0; i < 8; i++) w2v[i] = gradcheck_uniform() - 0.5;
  for (int i = 0; i < 15; i++) xv[i] = 2 * gradcheck_uniform() - 1;
  LOOM_SCOPE {
    loom_tensor *w1 = loom_from_data(w1v, LOOM_SHAPE(3, 4), LOOM_F64, test_device());
    loom_tensor *w2 = loom_from_data(w2v, LOOM_SHAPE(4, 2), LOOM_F64, test_device());
    loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(5, 3), LOOM_F64, test_device());
    loom_tensor *vt = loom_from_data(v, LOOM_SHAPE(3, 4), LOOM_F64, test_device());
    loom_set_requires_grad(w1, true);
    loom_tensor *l = mlp_loss(w1, w2, x), *g, *h;
    CHECK_OK(loom_grad_of(&l, 1, &w1, 1, &g));
    loom_tensor *gv = loom_sum_all(loom_mul(g, vt));
    CHECK_OK(loom_grad_of(&gv, 1, &w1, 1, &h));
    CHECK_OK(loom_copy_to_host(h, hv, sizeof hv));
  }
  double eps = 1e-5;
  for (int i = 0; i < 12; i++) w[i] = w1v[i] + eps * v[i];
  grad_at(w, w2v, xv, up);
  for (int i = 0; i < 12; i++) w[i] = w1v[i] - eps * v[i];
  grad_at(w, w2v, xv, down);
  for (int i = 0; i < 12; i++) {
    double fd = (up[i] - down[i]) / (2 * eps);
    CHECK_MSG(fabs(fd - hv[i]) < 1e-6 * (1 + fabs(fd)), "Hv[%d] = %.12g, finite differences %.12g",
              i, hv[i], fd);
  }
}

int main(void) {
  test_all_ops();
  test_accumulation_and_no_grad();
  test_second_derivative_tanh();
  test_hessian_vector_mlp();
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
