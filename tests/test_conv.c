/* Convolutions whose product reads its terms from the image itself
 * (runtime/gemm_windows.c: no im2col matrix), against loops in double: a
 * sweep over kernel sizes (square and not), strides, paddings, dilations,
 * batch, image shapes and channel counts, F32 and F64, each large enough that
 * its im2col matrix would be made in blocks (>= 1 MiB), so the windows path
 * is the one that runs on the CPU (counted by loom_stats.gemms_from_windows);
 * then the same convolutions with fusion off (im2col stored, a plain GEMM),
 * which must agree; a symbolic program over batch and height run at sizes it
 * was not traced at; and a training step's gradients, whose weight gradient
 * reads the im2col matrix transposed (made in blocks, as before). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "test_device.h"

typedef struct conv_case {
  int n, c, h, w, o, kh, kw;
  int stride[2], pad[2], dil[2];
} conv_case;

static int out_size(int in, int k, int s, int p, int d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

static double value_at(unsigned seed, int64_t i) {
  uint64_t x = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
  return (double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

/* want[n, o, oh, ow] and the sum of its terms' magnitudes */
static void conv_ref(const conv_case *c, const double *x, const double *w, const double *b,
                     double *want, double *sumabs) {
  int OH = out_size(c->h, c->kh, c->stride[0], c->pad[0], c->dil[0]);
  int OW = out_size(c->w, c->kw, c->stride[1], c->pad[1], c->dil[1]);
  for (int n = 0; n < c->n; n++)
    for (int o = 0; o < c->o; o++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          double s = b[o], mag = fabs(b[o]);
          for (int ci = 0; ci < c->c; ci++)
            for (int kh = 0; kh < c->kh; kh++) {
              int ih = oh * c->stride[0] - c->pad[0] + kh * c->dil[0];
              if (ih < 0 || ih >= c->h) continue;
              for (int kw = 0; kw < c->kw; kw++) {
                int iw = ow * c->stride[1] - c->pad[1] + kw * c->dil[1];
                if (iw < 0 || iw >= c->w) continue;
                double t = x[((n * c->c + ci) * c->h + ih) * c->w + iw] *
                           w[((o * c->c + ci) * c->kh + kh) * c->kw + kw];
                s += t, mag += fabs(t);
              }
            }
          int64_t i = (((int64_t)n * c->o + o) * OH + oh) * OW + ow;
          want[i] = s, sumabs[i] = mag;
        }
}

static void *host_values(loom_dtype dt, const double *v, int64_t n) {
  void *m = malloc((size_t)n * loom_dtype_size(dt));
  for (int64_t i = 0; i < n; i++)
    if (dt == LOOM_F32)
      ((float *)m)[i] = (float)v[i];
    else
      ((double *)m)[i] = v[i];
  return m;
}

/* y = conv(x, w, b) as a program of input x; NULL with the error reported */
static loom_tensor *run_conv(const conv_case *c, loom_dtype dt, const double *x, const double *w,
                             const double *b) {
  int64_t nx = (int64_t)c->n * c->c * c->h * c->w, nw = (int64_t)c->o * c->c * c->kh * c->kw;
  void *hx = host_values(dt, x, nx), *hw = host_values(dt, w, nw), *hb = host_values(dt, b, c->o);
  loom_tensor *r = NULL;
  loom_tensor *xv = loom_from_data(hx, LOOM_SHAPE(c->n, c->c, c->h, c->w), dt, test_device());
  loom_tensor *xi = loom_input("x", LOOM_SHAPE(c->n, c->c, c->h, c->w), dt, test_device());
  loom_tensor *wt = loom_from_data(hw, LOOM_SHAPE(c->o, c->c, c->kh, c->kw), dt, test_device());
  loom_tensor *bt = loom_from_data(hb, LOOM_SHAPE(c->o), dt, test_device());
  loom_conv2d_opts o = {.stride = {c->stride[0], c->stride[1]},
                        .padding = {c->pad[0], c->pad[1]},
                        .dilation = {c->dil[0], c->dil[1]}};
  loom_tensor *y = loom_conv2d_f(xi, wt, bt, o);
  loom_program *p = loom_compile(&y, 1, &xi, 1);
  CHECK_MSG(p != NULL, "compile: %s", loom_last_error());
  if (p) CHECK_OK(loom_program_run(p, &xv, &r));
  loom_program_free(p);
  loom_free(xv), loom_free(xi), loom_free(wt), loom_free(bt), loom_free(y);
  free(hx), free(hw), free(hb);
  return r;
}

/* How many of y's values miss want by more than its rounding bound. */
static int64_t misses(const conv_case *c, loom_dtype dt, loom_tensor *y, const double *want,
                      const double *sumabs, int64_t ny) {
  if (!y) return ny;
  void *got = malloc((size_t)ny * loom_dtype_size(dt));
  int64_t bad = 0;
  if (loom_copy_to_host(y, got, (size_t)ny * loom_dtype_size(dt)) != LOOM_OK) bad = ny;
  for (int64_t i = 0; i < ny && !bad; i++) {
    double g = dt == LOOM_F32 ? ((float *)got)[i] : ((double *)got)[i];
    double terms = (double)c->c * c->kh * c->kw + 1;
    if (!(fabs(g - want[i]) <= check_sum_bound(dt == LOOM_F32, terms, sumabs[i]))) bad++;
  }
  free(got);
  return bad;
}

static void check_case(conv_case c, loom_dtype dt, unsigned seed) {
  int OH = out_size(c.h, c.kh, c.stride[0], c.pad[0], c.dil[0]);
  int OW = out_size(c.w, c.kw, c.stride[1], c.pad[1], c.dil[1]);
  int64_t nx = (int64_t)c.n * c.c * c.h * c.w, nw = (int64_t)c.o * c.c * c.kh * c.kw;
  int64_t ny = (int64_t)c.n * c.o * OH * OW;
  double *x = malloc(sizeof *x * (size_t)nx), *w = malloc(sizeof *w * (size_t)nw);
  double *b = malloc(sizeof *b * (size_t)c.o), *want = malloc(sizeof *want * (size_t)ny);
  double *sumabs = malloc(sizeof *sumabs * (size_t)ny);
  for (int64_t i = 0; i < nx; i++) x[i] = value_at(seed, i);
  for (int64_t i = 0; i < nw; i++) w[i] = value_at(seed + 1, i);
  for (int i = 0; i < c.o; i++) b[i] = value_at(seed + 2, i);
  conv_ref(&c, x, w, b, want, sumabs);
  char what[200];
  snprintf(what, sizeof what,
           "%s x [%d,%d,%d,%d] w [%d,%d,%d,%d] stride %dx%d pad %dx%d dilation %dx%d",
           loom_dtype_name(dt), c.n, c.c, c.h, c.w, c.o, c.c, c.kh, c.kw, c.stride[0], c.stride[1],
           c.pad[0], c.pad[1], c.dil[0], c.dil[1]);
  bool cpu = test_device().type == LOOM_DEVICE_CPU;
  for (int fused = 1; fused >= 0; fused--) {
    loom_set_fusion(fused);
    uint64_t before = loom_get_stats().gemms_from_windows;
    loom_tensor *y = run_conv(&c, dt, x, w, b);
    uint64_t ran = loom_get_stats().gemms_from_windows - before;
    int64_t bad = misses(&c, dt, y, want, sumabs, ny);
    CHECK_MSG(bad == 0, "%s, fusion %s: %lld of %lld values wrong", what, fused ? "on" : "off",
              (long long)bad, (long long)ny);
    /* the windows path when fused on the CPU (with loom's GEMM), never unfused */
    bool loom_gemm = !getenv("LOOM_GEMM") || strcmp(getenv("LOOM_GEMM"), "blas") != 0;
    /* (a 1x1 kernel at stride 1 and no padding over one image reads x in place) */
    bool in_place = c.kh == 1 && c.kw == 1 && c.stride[0] == 1 && c.stride[1] == 1 &&
                    c.pad[0] == 0 && c.pad[1] == 0 && c.n == 1;
    CHECK_MSG(ran == (uint64_t)(fused && cpu && loom_gemm && !in_place),
              "%s, fusion %s: %llu products from windows", what, fused ? "on" : "off",
              (unsigned long long)ran);
    loom_free(y);
  }
  loom_set_fusion(true);
  free(x), free(w), free(b), free(want), free(sumabs);
}

/* Channels so that the im2col matrix takes at least 1 MiB (made in blocks). */
static int channels_for(conv_case c, loom_dtype dt) {
  int OH = out_size(c.h, c.kh, c.stride[0], c.pad[0], c.dil[0]);
  int OW = out_size(c.w, c.kw, c.stride[1], c.pad[1], c.dil[1]);
  double per_channel = (double)c.kh * c.kw * c.n * OH * OW * (double)loom_dtype_size(dt);
  return (int)ceil((double)(1 << 20) / per_channel) + 1;
}

static void test_sweep(void) {
  /* hand-picked: ResNet's shapes at a smaller scale, and the edges */
  const conv_case picked[] = {
      {1, 0, 30, 30, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}},  /* 3x3, pad 1 */
      {2, 0, 23, 17, 70, 3, 3, {2, 2}, {1, 1}, {1, 1}},  /* stride 2, odd sizes */
      {1, 0, 40, 40, 24, 7, 7, {2, 2}, {3, 3}, {1, 1}},  /* the stem */
      {2, 0, 14, 14, 130, 1, 1, {2, 2}, {0, 0}, {1, 1}}, /* 1x1 downsampling */
      {3, 0, 9, 9, 96, 1, 1, {1, 1}, {0, 0}, {1, 1}},    /* 1x1 over a batch */
      {1, 0, 7, 7, 200, 3, 3, {1, 1}, {1, 1}, {1, 1}},   /* a 7x7 map: rows split */
      {1, 0, 26, 31, 33, 3, 5, {1, 2}, {2, 1}, {2, 1}},  /* rectangular everything */
      {2, 0, 12, 40, 8, 2, 4, {3, 1}, {0, 3}, {1, 3}},   /* even kernels, stride 3 */
      {1, 0, 6, 50, 17, 5, 1, {1, 3}, {4, 0}, {1, 1}},   /* padding past the kernel */
      {1, 0, 20, 20, 65, 3, 3, {1, 1}, {0, 0}, {3, 3}},  /* dilation 3 */
  };
  unsigned seed = 11;
  for (size_t i = 0; i < sizeof picked / sizeof *picked; i++)
    for (int d = 0; d < 2; d++) LOOM_SCOPE {
        loom_dtype dt = d ? LOOM_F64 : LOOM_F32;
        conv_case c = picked[i];
        c.c = channels_for(c, dt);
        check_case(c, dt, seed += 3);
      }
  /* drawn: kernels 1-5 a side, strides 1-3, paddings 0-2, dilations 1-2 */
  unsigned pick = 5;
  for (int t = 0; t < 12; t++) LOOM_SCOPE {
      pick = pick * 1103515245u + 12345u;
      conv_case c = {.n = 1 + (int)(pick >> 8) % 2,
                     .h = 8 + (int)(pick >> 10) % 25,
                     .w = 8 + (int)(pick >> 15) % 25,
                     .o = 1 + (int)(pick >> 20) % 80,
                     .kh = 1 + (int)(pick >> 3) % 5,
                     .kw = 1 + (int)(pick >> 27) % 5};
      pick = pick * 1103515245u + 12345u;
      for (int a = 0; a < 2; a++) {
        c.stride[a] = 1 + (int)(pick >> (4 + 6 * a)) % 3;
        c.pad[a] = (int)(pick >> (6 + 6 * a)) % 3;
        c.dil[a] = 1 + (int)(pick >> (8 + 6 * a)) % 2;
      }
      if (out_size(c.h, c.kh, c.stride[0], c.pad[0], c.dil[0]) < 1 ||
          out_size(c.w, c.kw, c.stride[1], c.pad[1], c.dil[1]) < 1)
        continue;
      c.c = channels_for(c, LOOM_F32);
      check_case(c, LOOM_F32, seed += 3);
    }
}

/* One program over a symbolic batch, run at sizes it was not traced at (from
 * its plan template, LOOM_VERIFY_PLANS=1 checks it against a plan made anew). */
static void test_symbolic(void) {
  /* (windows over a symbolic height are refused: loom_compile_symbolic) */
  const int traced[2] = {7, 20}, sizes[][2] = {{7, 20}, {1, 20}, {3, 20}, {5, 20}};
  conv_case c = {traced[0], 64, traced[1], 24, 48, 3, 3, {1, 1}, {1, 1}, {1, 1}};
  int64_t nw = (int64_t)c.o * c.c * 9;
  double *w = malloc(sizeof *w * (size_t)nw), b[48];
  for (int64_t i = 0; i < nw; i++) w[i] = value_at(41, i);
  for (int i = 0; i < c.o; i++) b[i] = value_at(42, i);
  float *hw = host_values(LOOM_F32, w, nw), *hb = host_values(LOOM_F32, b, c.o);
  uint64_t before = loom_get_stats().gemms_from_windows;
  LOOM_SCOPE {
    loom_tensor *xi = loom_input("x", LOOM_SHAPE(c.n, c.c, c.h, c.w), LOOM_F32, test_device());
    loom_tensor *wt = loom_from_data(hw, LOOM_SHAPE(c.o, c.c, 3, 3), LOOM_F32, test_device());
    loom_tensor *bt = loom_from_data(hb, LOOM_SHAPE(c.o), LOOM_F32, test_device());
    loom_tensor *y = loom_conv2d_f(xi, wt, bt, (loom_conv2d_opts){.padding = {1, 1}});
    loom_symbolic_dim dims[1] = {{0, 0, "n"}};
    loom_program *p = loom_compile_symbolic(&y, 1, &xi, 1, dims, 1);
    CHECK_MSG(p != NULL, "compile_symbolic: %s", loom_last_error());
    for (size_t s = 0; p && s < sizeof sizes / sizeof *sizes; s++) {
      c.n = sizes[s][0], c.h = sizes[s][1];
      int64_t nx = (int64_t)c.n * c.c * c.h * c.w, ny = (int64_t)c.n * c.o * c.h * c.w;
      double *x = malloc(sizeof *x * (size_t)nx), *want = malloc(sizeof *want * (size_t)ny);
      double *sumabs = malloc(sizeof *sumabs * (size_t)ny);
      for (int64_t i = 0; i < nx; i++) x[i] = value_at(43 + (unsigned)s, i);
      conv_ref(&c, x, w, b, want, sumabs);
      float *hx = host_values(LOOM_F32, x, nx);
      loom_tensor *xv = loom_from_data(hx, LOOM_SHAPE(c.n, c.c, c.h, c.w), LOOM_F32, test_device());
      loom_tensor *out = NULL;
      CHECK_OK(loom_program_run(p, &xv, &out));
      int64_t bad = misses(&c, LOOM_F32, out, want, sumabs, ny);
      CHECK_MSG(bad == 0, "symbolic program at n %d h %d: %lld of %lld values wrong", c.n, c.h,
                (long long)bad, (long long)ny);
      loom_free(out), loom_free(xv);
      free(x), free(want), free(sumabs), free(hx);
    }
    loom_program_free(p);
  }
  if (test_device().type == LOOM_DEVICE_CPU &&
      !(getenv("LOOM_GEMM") && !strcmp(getenv("LOOM_GEMM"), "blas")))
    CHECK_MSG(loom_get_stats().gemms_from_windows > before, "the symbolic program read no windows");
  free(w), free(hw), free(hb);
}

/* sum(conv(x, w, b) * r)'s gradients with the forward product read from
 * windows (fused) and from a stored im2col matrix (fusion off), F64. */
static void test_gradients(void) {
  conv_case c = {2, 48, 18, 18, 40, 3, 3, {1, 1}, {1, 1}, {1, 1}};
  int64_t nx = (int64_t)c.n * c.c * c.h * c.w, nw = (int64_t)c.o * c.c * 9;
  int64_t ny = (int64_t)c.n * c.o * c.h * c.w;
  double *x = malloc(sizeof *x * (size_t)nx), *w = malloc(sizeof *w * (size_t)nw);
  double *r = malloc(sizeof *r * (size_t)ny), b[40];
  for (int64_t i = 0; i < nx; i++) x[i] = value_at(51, i);
  for (int64_t i = 0; i < nw; i++) w[i] = value_at(52, i);
  for (int64_t i = 0; i < ny; i++) r[i] = value_at(53, i);
  for (int i = 0; i < c.o; i++) b[i] = value_at(54, i);
  int64_t counts[3] = {nx, nw, c.o};
  double *grads[2][3], losses[2];
  for (int fused = 1; fused >= 0; fused--) LOOM_SCOPE {
      loom_set_fusion(fused);
      uint64_t before = loom_get_stats().gemms_from_windows;
      loom_tensor *leaves[3] = {
          loom_from_data(x, LOOM_SHAPE(c.n, c.c, c.h, c.w), LOOM_F64, test_device()),
          loom_from_data(w, LOOM_SHAPE(c.o, c.c, 3, 3), LOOM_F64, test_device()),
          loom_from_data(b, LOOM_SHAPE(c.o), LOOM_F64, test_device())};
      for (int i = 0; i < 3; i++) CHECK_OK(loom_set_requires_grad(leaves[i], true));
      loom_tensor *rt = loom_from_data(r, LOOM_SHAPE(c.n, c.o, c.h, c.w), LOOM_F64, test_device());
      loom_tensor *y =
          loom_conv2d_f(leaves[0], leaves[1], leaves[2], (loom_conv2d_opts){.padding = {1, 1}});
      loom_tensor *loss = loom_sum(loom_mul(y, rt), NULL, 0, false);
      CHECK_OK(loom_backward(loss));
      losses[fused] = loom_item(loss); /* the forward product */
      for (int i = 0; i < 3; i++) {
        grads[fused][i] = malloc(sizeof(double) * (size_t)counts[i]);
        CHECK_OK(loom_copy_to_host(loom_grad(leaves[i]), grads[fused][i],
                                   sizeof(double) * (size_t)counts[i]));
      }
      bool windows = fused && test_device().type == LOOM_DEVICE_CPU &&
                     !(getenv("LOOM_GEMM") && !strcmp(getenv("LOOM_GEMM"), "blas"));
      CHECK_MSG((loom_get_stats().gemms_from_windows > before) == windows,
                "fusion %s: the forward product %s windows", fused ? "on" : "off",
                windows ? "read no" : "read");
    }
  loom_set_fusion(true);
  CHECK_MSG(fabs(losses[1] - losses[0]) <= 1e-12 * fabs(losses[0]), "loss %.17g fused, %.17g not",
            losses[1], losses[0]);
  const char *names[3] = {"x", "w", "b"};
  for (int i = 0; i < 3; i++) {
    double worst = 0, scale = 0;
    for (int64_t j = 0; j < counts[i]; j++)
      worst = fmax(worst, fabs(grads[1][i][j] - grads[0][i][j])),
      scale = fmax(scale, fabs(grads[0][i][j]));
    CHECK_MSG(worst <= 1e-12 * scale, "d loss / d %s: fused and unfused differ by %g (of %g)",
              names[i], worst, scale);
    free(grads[0][i]), free(grads[1][i]);
  }
  free(x), free(w), free(r);
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device()));
  test_sweep();
  test_symbolic();
  test_gradients();
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
