/* BF16 and F16: the conversions (every 16-bit pattern, and floats against the
 * compiler's _Float16 and an exact reference), ops against PyTorch 1.13
 * (tests/data/half_ops.safetensors, written by tests/data/make_half_fixture.py),
 * the same bits whether a chain is fused or realized op by op, gradients,
 * checkpoints and programs. Runs on the test device (LOOM_TEST_DEVICE). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/gpt2_model.h"
#include "check.h"
#include "loom.h"
#include "scratch.h"
#include "test_device.h"

static char test_dir[256];

static void scratch_path(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", test_dir, name);
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float to_float(loom_dtype dt, uint16_t h) {
  return dt == LOOM_BF16 ? loom_bf16_to_float(h) : loom_f16_to_float(h);
}

static uint16_t from_float(loom_dtype dt, float f) {
  return dt == LOOM_BF16 ? loom_float_to_bf16(f) : loom_float_to_f16(f);
}

/* ------------------------------------------------------------ conversions */

/* BF16 rounding by its definition: the nearer of the two BF16 values around
 * f (the ones whose bits are f's truncated and one above), ties to even. */
static uint16_t bf16_reference(float f) {
  uint32_t u = bits_of(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  /* past the largest finite value the grid goes on to 2^128, which is inf */
  double hv = (hi & 0x7fff) == 0x7f80 ? copysign(0x1p128, f) : (double)loom_bf16_to_float(hi);
  double below = fabs((double)f - (double)loom_bf16_to_float(lo)), above = fabs(hv - (double)f);
  if (below < above) return lo;
  if (above < below) return hi;
  return (lo & 1) ? hi : lo;
}

static void test_conversions(void) {
  /* every 16-bit pattern to float and back */
  int bad_round_trip = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    for (int d = 0; d < 2; d++) {
      loom_dtype dt = d ? LOOM_F16 : LOOM_BF16;
      float f = to_float(dt, (uint16_t)h);
      uint16_t back = from_float(dt, f);
      bool nan = dt == LOOM_BF16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
      bool ok = nan ? isnan(f) && to_float(dt, back) != to_float(dt, back) : back == h;
      if (!ok && bad_round_trip++ < 5)
        printf("  %s 0x%04x -> %g -> 0x%04x\n", d ? "f16" : "bf16", h, f, back);
    }
  }
  CHECK_EQ_INT(bad_round_trip, 0);
  /* F16 against the compiler's _Float16 (F16C), BF16 against its definition,
   * on 2^24 floats spread over every exponent plus the values around each
   * rounding boundary */
  int bad_f16 = 0, bad_bf16 = 0;
  for (uint64_t i = 0; i < (1u << 24); i++) {
    uint32_t u = (uint32_t)(i * 257u) ^ (uint32_t)(i << 8);
    float f = float_of(u);
    _Float16 h = (_Float16)f;
    uint16_t want;
    memcpy(&want, &h, 2);
    uint16_t got = loom_float_to_f16(f);
    if (got != want && !(isnan(f) && (got & 0x7fff) > 0x7c00) && bad_f16++ < 5)
      printf("  f16(%a) = 0x%04x, _Float16 0x%04x\n", f, got, want);
    if (loom_float_to_bf16(f) != bf16_reference(f) && bad_bf16++ < 5)
      printf("  bf16(%a) = 0x%04x, want 0x%04x\n", f, loom_float_to_bf16(f), bf16_reference(f));
  }
  CHECK_EQ_INT(bad_f16, 0);
  CHECK_EQ_INT(bad_bf16, 0);
  /* the edges: F16 overflows from 65520, its smallest subnormal, BF16's ties */
  CHECK(loom_float_to_f16(65519.99f) == 0x7bff && loom_float_to_f16(65520.0f) == 0x7c00);
  CHECK(loom_float_to_f16(0x1p-24f) == 0x0001 && loom_float_to_f16(0x1p-25f) == 0x0000);
  CHECK(loom_float_to_f16(0x1.8p-25f) == 0x0001 && loom_float_to_f16(-0.0f) == 0x8000);
  CHECK(loom_float_to_bf16(float_of(0x3f808000u)) == 0x3f80); /* tie to even: down */
  CHECK(loom_float_to_bf16(float_of(0x3f818000u)) == 0x3f82); /* tie to even: up */
  CHECK(loom_float_to_bf16(float_of(0x7f7fffffu)) == 0x7f80); /* the largest float: inf */
  CHECK(loom_float_to_bf16(NAN) == 0x7fc0);
}

/* ------------------------------------------------------------ against PyTorch */

/* The spacing of dtype dt's values at |v| (its smallest normal's below it). */
static double ulp(loom_dtype dt, float v) {
  int e;
  frexpf(fmaxf(fabsf(v), dt == LOOM_BF16 ? 0x1p-126f : 0x1p-14f), &e);
  return ldexp(1.0, e - (dt == LOOM_BF16 ? 8 : 11));
}

/* Units in the last place of dtype dt between got and want, as floats. */
static double ulps(loom_dtype dt, float got, float want) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want) ? 0 : INFINITY;
  if (got == want) return 0;
  if (isinf(got) || isinf(want)) return INFINITY;
  return fabs((double)got - (double)want) / ulp(dt, want);
}

typedef struct fixture {
  loom_params *file;
  const char *prefix;
  loom_dtype dt;
} fixture;

static loom_tensor *input(const fixture *fx, const char *name) {
  char key[64];
  snprintf(key, sizeof key, "%s.%s", fx->prefix, name);
  return loom_params_get(fx->file, key);
}

/* got against the fixture's `name`: the largest distance in ulps of each
 * value (`scaled`: in ulps of the largest |want|), at most `limit`. */
static void compare(const fixture *fx, const char *name, loom_tensor *got, double limit,
                    bool scaled) {
  loom_tensor *want = input(fx, name);
  CHECK_MSG(want != NULL, "%s.%s missing from the fixture", fx->prefix, name);
  if (!want) return;
  CHECK_EQ_INT(loom_dtype_of(got), loom_dtype_of(want));
  int64_t n = loom_numel(want);
  float *g = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
  CHECK_OK(loom_copy_to_host(loom_cast(got, LOOM_F32), g, sizeof(float) * (size_t)n));
  CHECK_OK(loom_copy_to_host(loom_cast(want, LOOM_F32), w, sizeof(float) * (size_t)n));
  float top = 0;
  for (int64_t i = 0; i < n; i++) top = fmaxf(top, fabsf(w[i]));
  double worst = 0;
  int64_t at = 0;
  loom_dtype dt = loom_dtype_of(want) == LOOM_F32 ? LOOM_F16 : fx->dt;
  for (int64_t i = 0; i < n; i++) {
    double u = scaled && isfinite(w[i]) && isfinite(g[i]) ? fabs((double)g[i] - w[i]) / ulp(dt, top)
                                                          : ulps(dt, g[i], w[i]);
    if (loom_dtype_of(want) == LOOM_F32) u = fabs(g[i] - w[i]) / fmax(fabs(w[i]), 1e-30) / 0x1p-23;
    if (u > worst) worst = u, at = i;
  }
  printf("  %s.%-14s worst %.2f ulp (at %lld: %.9g, torch %.9g)\n", fx->prefix, name, worst,
         (long long)at, n ? g[at] : 0.0, n ? w[at] : 0.0);
  CHECK_MSG(worst <= limit, "%s.%s: %.2f ulp from torch, at most %.2f", fx->prefix, name, worst,
            limit);
  free(g), free(w);
}

static void test_against_torch(loom_params *file, const char *prefix, loom_dtype dt) {
  fixture fx = {file, prefix, dt};
  LOOM_SCOPE {
    loom_tensor *x = input(&fx, "x"), *y = input(&fx, "y"), *w = input(&fx, "w");
    loom_tensor *b = input(&fx, "b"), *m = input(&fx, "m"), *labels = input(&fx, "labels");
    loom_tensor *y32 = loom_params_get(file, "f32.y"), *x32 = loom_params_get(file, "f32.x");
    CHECK(x && y && w && b && m && labels && x32 && y32);
    CHECK_EQ_INT(loom_dtype_of(x), dt);
    /* one rounding of the exact result: the same bits as torch */
    compare(&fx, "add", loom_add(x, y), 0, false);
    compare(&fx, "mul", loom_mul(x, y), 0, false);
    compare(&fx, "div", loom_div(x, y), 0, false);
    compare(&fx, "sub_w", loom_sub(x, w), 0, false);
    compare(&fx, "sqrt", loom_sqrt(y), 0, false);
    compare(&fx, "relu", loom_relu(x), 0, false);
    compare(&fx, "max", loom_max(x, (int[]){-1}, 1, false), 0, false);
    compare(&fx, "add_f32", loom_add(x, y32), 0, false);
    compare(&fx, "cast_from_f32", loom_cast(x32, dt), 0, false);
    /* functions: torch's and loom's float versions differ in their last
     * float bits, which rounding to 8 or 11 bits almost always hides */
    compare(&fx, "exp", loom_exp(loom_div_s(x, 4)), 1, false);
    compare(&fx, "log", loom_log(y), 1, false);
    compare(&fx, "tanh", loom_tanh(x), 1, false);
    compare(&fx, "sigmoid", loom_sigmoid(x), 1, false);
    compare(&fx, "gelu", loom_gelu(x), 1, false);
    /* torch 1.13's BF16 kernels for these round inside (its tanh GELU gives -0
     * where 1 + tanh cancels; its layer norm is off by 0.003 at 3): against
     * the largest value */
    compare(&fx, "gelu_tanh", loom_gelu_tanh(x), 1, true);
    compare(&fx, "silu", loom_silu(x), 1, false);
    compare(&fx, "softmax", loom_softmax(x, -1), 1, false);
    compare(&fx, "log_softmax", loom_log_softmax(x, -1), 1, false);
    compare(&fx, "layer_norm", loom_layer_norm(x, 1, w, b, 1e-5), 1, true);
    /* sums: F32 sums in another order, rounded once */
    compare(&fx, "sum", loom_sum(x, (int[]){-1}, 1, false), 1, true);
    compare(&fx, "mean", loom_mean(x, (int[]){-1}, 1, false), 1, true);
    compare(&fx, "matmul", loom_matmul(x, m), 1, true);
    loom_tensor *m_t = loom_contiguous(loom_transpose(m, 0, 1)); /* a weight read as W^T */
    compare(&fx, "matmul", loom_matmul(x, loom_transpose(m_t, 0, 1)), 1, true);
    compare(&fx, "cross_entropy", loom_cross_entropy(x, labels), 1, false);
    /* gradients of sum(gelu(x * w)): each backward op rounds (torch's F16
     * reference here ran in F32), against the largest value */
    loom_tensor *xg = loom_contiguous(x), *wg = loom_contiguous(w);
    CHECK_OK(loom_realize(xg));
    CHECK_OK(loom_realize(wg));
    CHECK_OK(loom_set_requires_grad(xg, true));
    CHECK_OK(loom_set_requires_grad(wg, true));
    CHECK_OK(loom_backward(loom_sum_all(loom_gelu(loom_mul(xg, wg)))));
    compare(&fx, "grad_x", loom_grad(xg), 1, true);
    compare(&fx, "grad_w", loom_grad(wg), 1, true);
  }
}

/* ------------------------------------------------------------ fusion keeps the bits */

/* A chain realized as one fused kernel and op by op (each result realized
 * before the next op reads it) gives the same bits: every op rounds once. */
static void test_fused_equals_op_by_op(loom_dtype dt) {
  LOOM_SCOPE {
    loom_tensor *x =
        loom_cast(loom_randn_key(loom_key_new(5), LOOM_SHAPE(64, 33), LOOM_F32, test_device()), dt);
    CHECK_OK(loom_realize(x));
    loom_tensor *steps[6];
    steps[0] = loom_mul_s(x, 1.7);
    steps[1] = loom_add(steps[0], x);
    steps[2] = loom_tanh(steps[1]);
    steps[3] = loom_mul(steps[2], steps[0]);
    steps[4] = loom_sum(steps[3], (int[]){1}, 1, true);
    steps[5] = loom_div(steps[3], loom_add_s(loom_abs(steps[4]), 1));
    loom_tensor *fused = steps[5];
    CHECK_OK(loom_realize(fused));
    loom_tensor *cur = x, *one[6];
    one[0] = loom_mul_s(cur, 1.7);
    CHECK_OK(loom_realize(one[0]));
    one[1] = loom_add(one[0], x);
    CHECK_OK(loom_realize(one[1]));
    one[2] = loom_tanh(one[1]);
    CHECK_OK(loom_realize(one[2]));
    one[3] = loom_mul(one[2], one[0]);
    CHECK_OK(loom_realize(one[3]));
    one[4] = loom_sum(one[3], (int[]){1}, 1, true);
    CHECK_OK(loom_realize(one[4]));
    loom_tensor *den = loom_add_s(loom_abs(one[4]), 1);
    CHECK_OK(loom_realize(den));
    one[5] = loom_div(one[3], den);
    CHECK_OK(loom_realize(one[5]));
    uint16_t a[64 * 33], c[64 * 33];
    CHECK_OK(loom_copy_to_host(fused, a, sizeof a));
    CHECK_OK(loom_copy_to_host(one[5], c, sizeof c));
    CHECK_MSG(memcmp(a, c, sizeof a) == 0, "%s: fused and op-by-op results differ",
              loom_dtype_name(dt));
  }
}

/* ------------------------------------------------------------ random graphs, fused and not */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned next_rand(unsigned n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (unsigned)(rng % n);
}

/* A random graph of elementwise ops (and, with `sums`, row sums broadcast
 * back) over two [7, 13] tensors of dtype dt. */
static loom_tensor *random_graph(loom_tensor *x, loom_tensor *y, int depth, bool sums) {
  loom_tensor *v[16] = {x, y};
  int n = 2;
  for (int d = 0; d < depth && n < 16; d++) {
    loom_tensor *a = v[next_rand((unsigned)n)], *b = v[next_rand((unsigned)n)], *r;
    switch (next_rand(sums ? 15 : 13)) {
    case 0: r = loom_add(a, b); break;
    case 1: r = loom_sub(a, b); break;
    case 2: r = loom_mul(a, b); break;
    case 3: r = loom_div(a, loom_add_s(loom_abs(b), 0.5)); break;
    case 4: r = loom_exp(loom_mul_s(a, 0.25)); break;
    case 5: r = loom_tanh(a); break;
    case 6: r = loom_sigmoid(a); break;
    case 7: r = loom_gelu(a); break;
    case 8: r = loom_maximum(a, b); break;
    case 9: r = loom_where(loom_gt(a, b), a, loom_neg(b)); break;
    case 10: r = loom_sqrt(loom_abs(a)); break;
    case 11: r = loom_mul_s(a, 1.3); break;
    case 12:
      r = loom_cast(loom_add(loom_cast(a, LOOM_F32), loom_cast(b, LOOM_F32)), loom_dtype_of(a));
      break;
    case 13: r = loom_add(a, loom_sum(b, (int[]){1}, 1, true)); break;
    default: r = loom_mul(a, loom_mean(b, (int[]){0}, 1, true)); break;
    }
    v[n++] = r;
  }
  return v[n - 1];
}

/* The same graphs realized fused and with fusion off: every op rounds once
 * either way, so elementwise graphs agree bit for bit; with sums (whose order
 * the two plans may take differently), within one ulp. */
static void test_random_graphs_fused(loom_dtype dt) {
  int exact_bad = 0, ulp_bad = 0;
  for (int g = 0; g < 60; g++) {
    bool sums = g % 2 == 1;
    LOOM_SCOPE {
      loom_tensor *x = loom_cast(
          loom_randn_key(loom_key_new((uint64_t)g), LOOM_SHAPE(7, 13), LOOM_F32, test_device()),
          dt);
      loom_tensor *y = loom_cast(loom_randn_key(loom_key_new((uint64_t)g + 1000), LOOM_SHAPE(7, 13),
                                                LOOM_F32, test_device()),
                                 dt);
      CHECK_OK(loom_realize(x));
      CHECK_OK(loom_realize(y));
      uint64_t state = rng;
      loom_tensor *fused = random_graph(x, y, 8, sums);
      rng = state;
      loom_set_fusion(false);
      loom_tensor *plain = random_graph(x, y, 8, sums);
      CHECK_OK(loom_realize(plain));
      loom_set_fusion(true);
      CHECK_OK(loom_realize(fused));
      uint16_t a[91], b[91];
      CHECK_OK(loom_copy_to_host(loom_cast(fused, dt), a, sizeof a));
      CHECK_OK(loom_copy_to_host(loom_cast(plain, dt), b, sizeof b));
      for (int i = 0; i < 91; i++) {
        float fa = to_float(dt, a[i]), fb = to_float(dt, b[i]);
        if (a[i] == b[i] || (isnan(fa) && isnan(fb))) continue;
        if (!sums)
          exact_bad++;
        else if (ulps(dt, fa, fb) > 1)
          ulp_bad++;
      }
    }
  }
  CHECK_MSG(exact_bad == 0, "%s: %d elements of elementwise graphs differ fused and not",
            loom_dtype_name(dt), exact_bad);
  CHECK_MSG(ulp_bad == 0, "%s: %d elements of graphs with sums differ by more than 1 ulp",
            loom_dtype_name(dt), ulp_bad);
}

/* ------------------------------------------------------------ random draws */

static void test_random(loom_dtype dt) {
  LOOM_SCOPE {
    enum { N = 1 << 16 };
    loom_tensor *u = loom_rand_key(loom_key_new(9), LOOM_SHAPE(N), dt, test_device());
    loom_tensor *z = loom_randn_key(loom_key_new(9), LOOM_SHAPE(N), dt, test_device());
    CHECK_EQ_INT(loom_dtype_of(u), dt);
    static uint16_t ub[N], zb[N];
    CHECK_OK(loom_copy_to_host(u, ub, sizeof ub));
    CHECK_OK(loom_copy_to_host(z, zb, sizeof zb));
    double lo = 1, hi = 0, mean = 0, var = 0;
    for (int i = 0; i < N; i++) {
      double v = to_float(dt, ub[i]), g = to_float(dt, zb[i]);
      lo = fmin(lo, v), hi = fmax(hi, v), mean += g / N, var += g * g / N;
    }
    CHECK(lo >= 0 && hi < 1); /* never rounded up to 1 */
    CHECK_NEAR(mean, 0, 0.02);
    CHECK_NEAR(var, 1, 0.03);
  }
}

/* ------------------------------------------------------------ checkpoints, programs */

static void test_checkpoint_and_program(loom_dtype dt) {
  char path[4096];
  scratch_path(path, sizeof path, "half.safetensors");
  LOOM_SCOPE {
    loom_params *ps = loom_params_new();
    loom_tensor *w = loom_cast(loom_arange(-3, 3, 0.37, LOOM_F32, test_device()), dt);
    CHECK_OK(loom_realize(w));
    CHECK_OK(loom_params_add(ps, "w", w));
    CHECK_OK(loom_params_save(ps, path));
    uint16_t before[17], after[17];
    CHECK_OK(loom_copy_to_host(w, before, sizeof before));
    loom_params *back = loom_params_new();
    CHECK_OK(loom_params_add(back, "w", loom_zeros(LOOM_SHAPE(17), dt, test_device())));
    CHECK_OK(loom_params_load(back, path));
    CHECK_OK(loom_copy_to_host(loom_params_get(back, "w"), after, sizeof after));
    CHECK(memcmp(before, after, sizeof before) == 0);
    /* into F32 with `cast`: exact */
    loom_params *wide = loom_params_new();
    CHECK_OK(loom_params_add(wide, "w", loom_zeros(LOOM_SHAPE(17), LOOM_F32, test_device())));
    CHECK_OK(loom_params_load_ex(wide, path, (loom_load_opts){.cast = true}, NULL));
    float wf[17];
    CHECK_OK(loom_copy_to_host(loom_params_get(wide, "w"), wf, sizeof wf));
    for (int i = 0; i < 17; i++) CHECK(wf[i] == to_float(dt, before[i]));
    /* a compiled program with a BF16 / F16 input, saved and loaded */
    loom_tensor *in = loom_input("x", LOOM_SHAPE(17), dt, test_device());
    loom_tensor *out = loom_softmax(loom_mul(in, w), 0);
    loom_program *p = loom_compile(&out, 1, &in, 1);
    CHECK(p != NULL);
    if (p) {
      CHECK_EQ_INT(loom_program_input_dtype(p, 0), dt);
      CHECK_EQ_INT(loom_program_output_dtype(p, 0), dt);
      char ppath[4096];
      scratch_path(ppath, sizeof ppath, "half.program");
      CHECK_OK(loom_program_save(p, ppath));
      loom_program *q = loom_program_load(ppath);
      CHECK(q != NULL);
      loom_tensor *got_p = NULL, *got_q = NULL;
      CHECK_OK(loom_program_run(p, &w, &got_p));
      loom_tensor *w_host = loom_to(w, LOOM_CPU); /* a loaded program runs on the CPU */
      if (q) CHECK_OK(loom_program_run(q, &w_host, &got_q));
      loom_tensor *lazy = loom_softmax(loom_mul(w, w), 0);
      uint16_t a[17], c[17], e[17];
      CHECK_OK(loom_copy_to_host(got_p, a, sizeof a));
      if (got_q) CHECK_OK(loom_copy_to_host(got_q, c, sizeof c));
      CHECK_OK(loom_copy_to_host(lazy, e, sizeof e));
      CHECK(memcmp(a, e, sizeof a) == 0 && (!got_q || memcmp(c, e, sizeof c) == 0));
      loom_program_free(q);
      loom_program_free(p);
    }
    loom_params_free(ps), loom_params_free(back), loom_params_free(wide);
  }
}

/* ------------------------------------------------------------ mixed precision */

/* A small GPT-2 trained 40 AdamW steps with F32 weights, its forward in F32
 * and in dt (each weight cast where used): the gradients stay F32 and the
 * losses follow the F32 run's. */
static double train_small_gpt(loom_dtype compute, bool *grads_f32) {
  gpt2_config c = {2, 2, 64, 16, 32, compute};
  loom_params *ps = gpt2_new(c, loom_key_new(21));
  loom_optim *opt = loom_adamw(ps, LOOM_ADAMW_DEFAULTS);
  double last = NAN;
  int64_t x[4 * 16], y[4 * 16];
  *grads_f32 = true;
  for (int step = 0; step < 40; step++) {
    for (int i = 0; i < 4 * 16; i++) x[i] = (i * 7 + step) % 64, y[i] = (i * 7 + step + 1) % 64;
    LOOM_SCOPE {
      loom_tensor *logits =
          gpt2_forward(ps, c, loom_from_data(x, LOOM_SHAPE(4, 16), LOOM_I64, test_device()));
      loom_tensor *loss =
          loom_cross_entropy(loom_reshape(logits, LOOM_SHAPE(64, 64)),
                             loom_from_data(y, LOOM_SHAPE(64), LOOM_I64, test_device()));
      loom_optim_zero_grad(opt);
      CHECK_OK(loom_backward(loss));
      loom_tensor *g = loom_grad(loom_params_get(ps, "h.0.attn.c_attn.weight"));
      *grads_f32 = *grads_f32 && g && loom_dtype_of(g) == LOOM_F32;
      CHECK_OK(loom_optim_step(opt));
      last = loom_item(loss);
    }
  }
  loom_optim_free(opt);
  loom_params_free(ps);
  return last;
}

static void test_mixed_precision(loom_dtype dt) {
  bool f32_grads = false, half_grads = false;
  double full = train_small_gpt(LOOM_F32, &f32_grads), half = train_small_gpt(dt, &half_grads);
  printf("  small GPT, 40 AdamW steps: loss %.4f in F32, %.4f with the forward in %s\n", full, half,
         loom_dtype_name(dt));
  CHECK(f32_grads && half_grads);
  CHECK(full < log(64.0) - 0.5); /* it learned */
  CHECK_MSG(fabs(half - full) <= 0.05 * full, "%s forward: loss %.4f, F32 %.4f",
            loom_dtype_name(dt), half, full);
}

/* ------------------------------------------------------------ promotion and errors */

static void test_promotion(void) {
  LOOM_SCOPE {
    loom_device d = test_device();
    loom_tensor *bf = loom_ones(LOOM_SHAPE(3), LOOM_BF16, d),
                *h = loom_ones(LOOM_SHAPE(3), LOOM_F16, d);
    loom_tensor *f = loom_ones(LOOM_SHAPE(3), LOOM_F32, d),
                *i = loom_ones(LOOM_SHAPE(3), LOOM_I64, d);
    CHECK_EQ_INT(loom_dtype_of(loom_add(bf, h)), LOOM_F32); /* neither holds the other */
    CHECK_EQ_INT(loom_dtype_of(loom_add(bf, f)), LOOM_F32);
    CHECK_EQ_INT(loom_dtype_of(loom_add(bf, i)), LOOM_BF16);
    CHECK_EQ_INT(loom_dtype_of(loom_mul_s(h, 2.5)), LOOM_F16);
    CHECK_EQ_INT(loom_dtype_of(loom_add(h, loom_scalar(2, LOOM_F64, d))), LOOM_F16);
    CHECK_EQ_INT(loom_dtype_of(loom_div(i, i)), LOOM_F32);
    CHECK_STR_EQ(loom_dtype_name(LOOM_BF16), "bf16");
    CHECK_EQ_INT((int)loom_dtype_size(LOOM_F16), 2);
    loom_tensor *bad = loom_matmul(bf, loom_ones(LOOM_SHAPE(3), LOOM_F32, d));
    CHECK_STATUS(bad, LOOM_ERR_DTYPE);
    CHECK_STR_CONTAINS(loom_last_error(), "loom_matmul");
    CHECK_STR_CONTAINS(loom_last_error(), "bf16 and f32 differ");
    loom_clear_error();
  }
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(test_dir, sizeof test_dir, "%s/loom-half-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(test_dir)) {
    perror("mkdtemp");
    return 1;
  }
  CHECK_OK(loom_set_default_device(test_device()));
  test_conversions();
  loom_params *file =
      loom_safetensors_read(LOOM_SOURCE_DIR "/tests/data/half_ops.safetensors", test_device());
  CHECK(file != NULL);
  if (file) {
    test_against_torch(file, "bf16", LOOM_BF16);
    test_against_torch(file, "f16", LOOM_F16);
    loom_params_free(file);
  }
  for (int d = 0; d < 2; d++) {
    loom_dtype dt = d ? LOOM_F16 : LOOM_BF16;
    test_fused_equals_op_by_op(dt);
    test_random_graphs_fused(dt);
    test_random(dt);
    test_checkpoint_and_program(dt);
    test_mixed_precision(dt);
  }
  test_promotion();
  check_remove_dir(test_dir);
  return check_report();
}
