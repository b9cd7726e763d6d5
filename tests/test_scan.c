/* loom_cumsum and the scan step under it (LM_SCAN): the reproducers
 * (NaN and inf reach only the sums after them), PyTorch 1.13's values where
 * they are exact and over a long F32 row, every dtype against a reference
 * that sums as torch's CPU does (floats in double, one rounding each;
 * integers and bools as I64, wrapping) over rows of 0 to 70,000 values, both
 * directions of the step, every axis of a 3-D tensor and of a view, long
 * chains along an axis that is not the last (the two-pass parts), the
 * gradient (the scan the other way: a NaN in a later gradient reaches no
 * earlier value's), a program, its text, its plan, and a symbolic program
 * whose scanned axis is the symbol. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "frontend/frontend.h"
#include "gradcheck.h"
#include "loom.h"
#include "test_device.h"

static unsigned next(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

static double *host_f64(loom_tensor *t, int64_t count) {
  double *v = malloc(sizeof *v * (size_t)(count ? count : 1));
  CHECK_OK(loom_copy_to_host(loom_cast(t, LOOM_F64), v, sizeof *v * (size_t)count));
  return v;
}

static int64_t *host_i64(loom_tensor *t, int64_t count) {
  int64_t *v = malloc(sizeof *v * (size_t)(count ? count : 1));
  CHECK_OK(loom_copy_to_host(loom_cast(t, LOOM_I64), v, sizeof *v * (size_t)count));
  return v;
}

static bool same(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* ------------------------------------------------------------ reproducers */

/* Issue 41's: the old composition (a product with a triangular matrix of
 * ones) gave all NaN for the first and NaN first for the second, its zeros
 * times the NaN and inf after them. torch.cumsum's values (1.13). */
static void test_reproducers(void) {
  static const struct {
    double in[4], want[4];
    int n;
  } cases[] = {
      {{1, 2, NAN, 4}, {1, 3, NAN, NAN}, 4},
      {{1, INFINITY, 1, 1}, {1, INFINITY, INFINITY, INFINITY}, 4},
      {{INFINITY, -INFINITY, 1}, {INFINITY, NAN, NAN}, 3},
      {{-INFINITY, 1, NAN, INFINITY}, {-INFINITY, -INFINITY, NAN, NAN}, 4},
  };
  const loom_dtype floats[] = {LOOM_F32, LOOM_F64, LOOM_BF16, LOOM_F16};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < 4; d++) LOOM_SCOPE {
        check_set_ctx("reproducer %zu %s", c, loom_dtype_name(floats[d]));
        loom_tensor *x =
            loom_cast(loom_from_data(cases[c].in, LOOM_SHAPE(cases[c].n), LOOM_F64, test_device()),
                      floats[d]);
        loom_tensor *y = loom_cumsum(x, 0);
        CHECK_EQ_INT(loom_dtype_of(y), floats[d]);
        double *got = host_f64(y, cases[c].n);
        for (int i = 0; i < cases[c].n; i++)
          CHECK_MSG(same(got[i], cases[c].want[i]), "%s: [%d] %g, torch %g", check_ctx, i, got[i],
                    cases[c].want[i]);
        free(got);
      }
  check_set_ctx("%s", "");
  LOOM_SCOPE { /* F32 sums in double: the second past FLT_MAX rounds to inf, the third is back */
    float in[3] = {3e38f, 3e38f, -3e38f}, got[3];
    CHECK_OK(loom_copy_to_host(
        loom_cumsum(loom_from_data(in, LOOM_SHAPE(3), LOOM_F32, test_device()), 0), got,
        sizeof got));
    CHECK(got[0] == 3e38f && isinf(got[1]) && got[1] > 0 && got[2] == 3e38f);
  }
}

/* Integers sum exactly as I64 and wrap as torch's: values near 2^62 (past
 * 2^53, where the old F64 sums lost them), INT64's wrap, and the smaller
 * integers and bools widened (torch.cumsum's values). */
static void test_integers(void) {
  LOOM_SCOPE {
    const int64_t big[4] = {INT64_C(1) << 62, INT64_C(1) << 62, INT64_C(1) << 62, -5};
    const int64_t want[4] = {INT64_C(4611686018427387904), INT64_MIN, -INT64_C(4611686018427387904),
                             -INT64_C(4611686018427387909)};
    int64_t *got =
        host_i64(loom_cumsum(loom_from_data(big, LOOM_SHAPE(4), LOOM_I64, test_device()), 0), 4);
    for (int i = 0; i < 4; i++)
      CHECK_MSG(got[i] == want[i], "i64 wrap [%d] %lld", i, (long long)got[i]);
    free(got);
    /* exact past 2^53: 2^53 + 1 three times */
    const int64_t odd[3] = {(INT64_C(1) << 53) + 1, (INT64_C(1) << 53) + 1, (INT64_C(1) << 53) + 1};
    got = host_i64(loom_cumsum(loom_from_data(odd, LOOM_SHAPE(3), LOOM_I64, test_device()), 0), 3);
    CHECK(got[2] == 3 * ((INT64_C(1) << 53) + 1) && got[1] == 2 * ((INT64_C(1) << 53) + 1));
    free(got);
    const int32_t wide[2] = {2147483647, 5};
    loom_tensor *w = loom_cumsum(loom_from_data(wide, LOOM_SHAPE(2), LOOM_I32, test_device()), 0);
    CHECK_EQ_INT(loom_dtype_of(w), LOOM_I64);
    got = host_i64(w, 2);
    CHECK(got[0] == 2147483647 && got[1] == INT64_C(2147483652));
    free(got);
    const bool flags[5] = {true, false, true, true, false};
    loom_tensor *b = loom_cumsum(loom_from_data(flags, LOOM_SHAPE(5), LOOM_BOOL, test_device()), 0);
    CHECK_EQ_INT(loom_dtype_of(b), LOOM_I64);
    got = host_i64(b, 5);
    CHECK(got[0] == 1 && got[1] == 1 && got[2] == 2 && got[3] == 3 && got[4] == 3);
    free(got);
    const uint8_t bytes[3] = {200, 200, 200};
    got = host_i64(loom_cumsum(loom_from_data(bytes, LOOM_SHAPE(3), LOOM_U8, test_device()), 0), 3);
    CHECK(got[2] == 600);
    free(got);
    /* a 0-d tensor is itself (integers as I64), as torch's */
    loom_tensor *s = loom_cumsum(loom_cast(loom_scalar(3, LOOM_F64, test_device()), LOOM_I32), 0);
    CHECK_EQ_INT(loom_dtype_of(s), LOOM_I64);
    CHECK_NEAR(loom_item(s), 3, 0);
  }
}

/* A long F32 row against torch.cumsum's own values (PyTorch 1.13 on the same
 * 10^6 values: next() * 2^-24 - 0.5 from seed 41, exact in F32). torch sums
 * F32 in double; an F32 running sum ends 8.4e-4 (about 220 of its ulps) away
 * from these. loom's parts are summed in another order, in double too: at
 * most an ulp of the result apart. And BF16's. */
static void test_torch_row(void) {
  LOOM_SCOPE {
    const int64_t n = 1000000;
    float *x = malloc(sizeof *x * (size_t)n), *y = malloc(sizeof *y * (size_t)n);
    unsigned seed = 41;
    for (int64_t i = 0; i < n; i++) x[i] = (float)next(&seed) * 0x1p-24f - 0.5f;
    loom_tensor *t = loom_from_data(x, LOOM_SHAPE(1, n), LOOM_F32, test_device());
    CHECK_OK(loom_copy_to_host(loom_cumsum(t, -1), y, sizeof *y * (size_t)n));
    static const struct {
      int64_t at;
      double torch;
    } want[] = {{0, 0x1.1857e0p-5},     {1, 0x1.115320p-1},      {999, 0x1.21839ep+3},
                {65535, 0x1.d4ebc0p+3}, {500000, 0x1.5f224ap+4}, {999999, -0x1.ba2bd6p+5}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
      double ulp = ldexp(1.0, ilogb(want[i].torch) - 23);
      CHECK_MSG(fabs(y[want[i].at] - want[i].torch) <= ulp, "x[%lld]: %a, torch %a",
                (long long)want[i].at, y[want[i].at], want[i].torch);
    }
    /* the first 20,000 as BF16: torch sums them in F32, loom in double (then
     * F32), each sum rounded to BF16: within a BF16 ulp of torch's */
    loom_tensor *h = loom_cast(loom_slice(t, 1, 0, 20000, 1), LOOM_BF16);
    double *hy = host_f64(loom_cumsum(h, 1), 20000);
    static const struct {
      int64_t at;
      double torch;
    } bf16[] = {{0, 0.0341796875}, {1, 0.53515625}, {999, 9.0625}, {19999, 66.5}};
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++)
      CHECK_MSG(fabs(hy[bf16[i].at] - bf16[i].torch) <= ldexp(1.0, ilogb(bf16[i].torch) - 7),
                "bf16 x[%lld]: %g, torch %g", (long long)bf16[i].at, hy[bf16[i].at], bf16[i].torch);
    free(hy);
    free(x), free(y);
  }
}

/* ------------------------------------------------------------ the reference */

/* values [outer, n, inner]: running sums along n (from its end if reverse),
 * floats in double rounded to dt, integers in uint64 (wrapping). */
static void reference(loom_dtype dt, const double *f, const int64_t *iv, int64_t outer, int64_t n,
                      int64_t inner, bool reverse, double *fo, int64_t *io) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t c = 0; c < inner; c++) {
      double s = 0;
      uint64_t u = 0;
      for (int64_t j = 0; j < n; j++) {
        int64_t at = (o * n + (reverse ? n - 1 - j : j)) * inner + c;
        if (f) {
          s += f[at];
          fo[at] = dt == LOOM_F64 ? s : (double)(float)s;
        } else {
          u += (uint64_t)iv[at];
          io[at] = (int64_t)u;
        }
      }
    }
}

/* values of dt [outer, n, inner] from seed: floats multiples of 1/8 (F16 and
 * BF16 hold them, so every dtype sums the same values), now and then NaN or
 * inf where `specials`; integers of the dtype's range (I64's near 2^60, so
 * that long rows wrap). As a tensor, and as doubles or int64s. */
static loom_tensor *make(loom_dtype dt, int64_t count, loom_shape shape, unsigned seed,
                         bool specials, double **f, int64_t **iv) {
  size_t len = (size_t)(count ? count : 1);
  *f = NULL, *iv = NULL;
  if (loom_dtype_is_float(dt)) {
    double *d = malloc(sizeof *d * len);
    for (int64_t i = 0; i < count; i++) {
      unsigned r = next(&seed);
      d[i] = specials && r % 997 == 0   ? NAN
             : specials && r % 991 == 0 ? (r & 1 ? INFINITY : -INFINITY)
                                        : (double)((int)(r % 161) - 80) / 8;
    }
    *f = d;
    return loom_cast(loom_from_data(d, shape, LOOM_F64, test_device()), dt);
  }
  int64_t *v = malloc(sizeof *v * len);
  for (int64_t i = 0; i < count; i++) {
    unsigned r = next(&seed);
    v[i] = dt == LOOM_BOOL  ? r & 1
           : dt == LOOM_U8  ? r % 256
           : dt == LOOM_I32 ? (int64_t)(r % 4000001) * 500 - 1000000000
                            : ((int64_t)(r % 15) - 7) * (INT64_C(1) << 60) + r % 7;
  }
  *iv = v;
  return loom_cast(loom_from_data(v, shape, LOOM_I64, test_device()), dt);
}

/* How far loom's float sum at `at` may be from the reference's: both sum in
 * double and round once (loom's parts in another order: n double roundings of
 * at most the sum of |x|), halves rounding twice (double to F32 to the half):
 * a result's ulp, and the double sums' difference. */
static double tolerance(loom_dtype dt, double want, double sum_abs, int64_t n) {
  int bits = dt == LOOM_F64 ? 52 : dt == LOOM_F32 ? 23 : dt == LOOM_BF16 ? 7 : 10;
  double ulp = want == 0 || isinf(want) ? 0 : ldexp(1.0, ilogb(want) - bits);
  return (dt == LOOM_F64 ? 0 : ulp) + (double)n * 0x1p-52 * sum_abs;
}

/* Compares y (loom's) with the reference of x's values for a scan of [outer,
 * n, inner]; counts what differs. */
static int compare(loom_dtype dt, loom_tensor *y, const double *f, const int64_t *iv, int64_t outer,
                   int64_t n, int64_t inner, bool reverse) {
  int64_t count = outer * n * inner;
  int wrong = 0;
  if (f) {
    double *want = malloc(sizeof *want * (size_t)(count ? count : 1)), *got = host_f64(y, count);
    reference(LOOM_F64, f, NULL, outer, n, inner, reverse, want, NULL);
    double *rounded = NULL; /* the halves' sums rounded once to their dtype */
    if (dt == LOOM_BF16 || dt == LOOM_F16)
      rounded = host_f64(loom_cast(loom_from_data(want, LOOM_SHAPE(count), LOOM_F64, LOOM_CPU), dt),
                         count);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t c = 0; c < inner; c++) {
        double sum_abs = 0;
        for (int64_t j = 0; j < n; j++) {
          int64_t at = (o * n + (reverse ? n - 1 - j : j)) * inner + c;
          sum_abs += fabs(f[at]);
          double w = dt == LOOM_F32 ? (double)(float)want[at] : want[at];
          if (dt == LOOM_BF16 || dt == LOOM_F16) w = rounded[at];
          if (!same(got[at], w) &&
              !(fabs(got[at] - w) <= tolerance(dt, w, sum_abs, n) && !isnan(got[at]))) {
            if (wrong++ < 3)
              check_fail_at(__FILE__, __LINE__, "%s: [%lld] %.17g, want %.17g", check_ctx,
                            (long long)at, got[at], w);
          }
        }
      }
    free(want), free(got), free(rounded);
  } else {
    int64_t *want = malloc(sizeof *want * (size_t)(count ? count : 1)), *got = host_i64(y, count);
    reference(LOOM_I64, NULL, iv, outer, n, inner, reverse, NULL, want);
    for (int64_t i = 0; i < count; i++) wrong += got[i] != want[i];
    free(want), free(got);
  }
  return wrong;
}

/* ------------------------------------------------------------ sweeps */

static const loom_dtype dtypes[] = {LOOM_F32, LOOM_F64, LOOM_BF16, LOOM_F16,
                                    LOOM_I32, LOOM_I64, LOOM_U8,   LOOM_BOOL};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

/* cumsum along the last axis of [rows, n], every dtype; and the step itself
 * from the end (the gradient's), which the frontend records only for F32,
 * F64 and I64. */
static void check_rows(loom_dtype dt, int64_t rows, int64_t n, unsigned seed) {
  LOOM_SCOPE {
    check_set_ctx("%s [%lld,%lld]", loom_dtype_name(dt), (long long)rows, (long long)n);
    double *f;
    int64_t *iv;
    loom_tensor *x = make(dt, rows * n, LOOM_SHAPE(rows, n), seed, true, &f, &iv);
    loom_tensor *y = loom_cumsum(x, 1);
    CHECK_EQ_INT(loom_dtype_of(y), loom_dtype_is_float(dt) ? dt : LOOM_I64);
    int wrong = compare(dt, y, f, iv, rows, n, 1, false);
    CHECK_MSG(wrong == 0, "%s: %d sums wrong", check_ctx, wrong);
    if (dt == LOOM_F32 || dt == LOOM_F64 || dt == LOOM_I64) {
      loom_tensor *back = lm_result(nb_scan(x->node, 1, true));
      wrong = compare(dt, back, f, iv, rows, n, 1, true);
      CHECK_MSG(wrong == 0, "%s from the end: %d sums wrong", check_ctx, wrong);
    }
    free(f), free(iv);
  }
  check_set_ctx("%s", "");
}

static void test_rows(void) {
  const int64_t shapes[][2] = {{1, 0},   {2, 0},    {1, 1},    {3, 1},    {1, 2},    {2, 7},
                               {3, 100}, {1, 1000}, {9, 1000}, {1, 4099}, {2, 70000}};
  unsigned seed = 1;
  for (int d = 0; d < NDTYPES; d++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      check_rows(dtypes[d], shapes[s][0], shapes[s][1], seed++);
  /* chains enough not to be cut, rows not a multiple of the interleaving */
  check_rows(LOOM_F32, 70, 300, 77);
  check_rows(LOOM_I64, 13, 5000, 78);
}

/* Along each axis of a 3-D tensor, and of a permuted view of it; long
 * chains along an axis that is not the last (cut into parts), from both ends. */
static void check_axis(loom_dtype dt, loom_shape shape, int axis, bool view, unsigned seed) {
  LOOM_SCOPE {
    check_set_ctx("%s [%lld,%lld,%lld] axis %d%s", loom_dtype_name(dt), (long long)shape.dim[0],
                  (long long)shape.dim[1], (long long)shape.dim[2], axis, view ? " of a view" : "");
    int64_t count = shape.dim[0] * shape.dim[1] * shape.dim[2];
    double *f;
    int64_t *iv;
    loom_tensor *x;
    if (view) { /* the values made as [d2, d1, d0], then seen transposed */
      loom_shape back = LOOM_SHAPE(shape.dim[2], shape.dim[1], shape.dim[0]);
      loom_tensor *raw = make(dt, count, back, seed, false, &f, &iv);
      x = loom_transpose(raw, 0, 2);
      /* the reference reads row-major [d0, d1, d2]: the values in that order */
      double *fr = f ? malloc(sizeof *fr * (size_t)count) : NULL;
      int64_t *ir = iv ? malloc(sizeof *ir * (size_t)count) : NULL;
      for (int64_t a = 0; a < shape.dim[0]; a++)
        for (int64_t b = 0; b < shape.dim[1]; b++)
          for (int64_t c = 0; c < shape.dim[2]; c++) {
            int64_t to = (a * shape.dim[1] + b) * shape.dim[2] + c,
                    from = (c * shape.dim[1] + b) * shape.dim[0] + a;
            if (fr) fr[to] = f[from];
            if (ir) ir[to] = iv[from];
          }
      free(f), free(iv);
      f = fr, iv = ir;
    } else {
      x = make(dt, count, shape, seed, false, &f, &iv);
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= shape.dim[d];
    for (int d = axis + 1; d < 3; d++) inner *= shape.dim[d];
    int wrong = compare(dt, loom_contiguous(loom_cumsum(x, axis - 3)), f, iv, outer,
                        shape.dim[axis], inner, false);
    CHECK_MSG(wrong == 0, "%s: %d sums wrong", check_ctx, wrong);
    if (dt == LOOM_F32 || dt == LOOM_I64) {
      wrong = compare(dt, lm_result(nb_scan(x->node, axis, true)), f, iv, outer, shape.dim[axis],
                      inner, true);
      CHECK_MSG(wrong == 0, "%s from the end: %d sums wrong", check_ctx, wrong);
    }
    free(f), free(iv);
  }
  check_set_ctx("%s", "");
}

static void test_axes(void) {
  unsigned seed = 100;
  for (int axis = 0; axis < 3; axis++)
    for (int view = 0; view < 2; view++) {
      check_axis(LOOM_F32, LOOM_SHAPE(4, 5, 6), axis, view, seed++);
      check_axis(LOOM_I64, LOOM_SHAPE(3, 7, 2), axis, view, seed++);
      check_axis(LOOM_BF16, LOOM_SHAPE(2, 3, 600), axis, view, seed++);
    }
  check_axis(LOOM_F32, LOOM_SHAPE(1, 70000, 3), 1, false, seed++); /* few chains: parts */
  check_axis(LOOM_F64, LOOM_SHAPE(2, 9000, 5), 1, false, seed++);
  /* 11 blocks of 64 chains, the last of 60 */
  check_axis(LOOM_I64, LOOM_SHAPE(1, 5000, 700), 1, false, seed++);
  check_axis(LOOM_F32, LOOM_SHAPE(5000, 2, 3), 0, true, seed++);
}

/* ------------------------------------------------------------ gradient */

static loom_tensor *cumsum_last(loom_tensor *const *in) { return loom_cumsum(in[0], -1); }
static loom_tensor *cumsum_first(loom_tensor *const *in) { return loom_cumsum(in[0], 0); }
static loom_tensor *cumsum_twice(loom_tensor *const *in) {
  return loom_cumsum(loom_mul(loom_cumsum(in[0], 1), in[0]), 1); /* a gradient through both */
}

/* Against finite differences; and the gradient is the sums from the end of
 * the incoming gradient, so a NaN there reaches only the values before it
 * (torch: d/dx sum(cumsum(x) * [1, nan, 1, 1]) = [nan, nan, 2, 1]). */
static void test_gradient(void) {
  const gcase cases[] = {
      {"cumsum last", cumsum_last, 1, {LOOM_SHAPE(3, 9)}, ANY},
      {"cumsum first", cumsum_first, 1, {LOOM_SHAPE(5, 2, 3)}, ANY},
      {"cumsum twice", cumsum_twice, 1, {LOOM_SHAPE(2, 6)}, ANY},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) LOOM_SCOPE {
      gradcheck(&cases[c]);
    }
  const loom_dtype floats[] = {LOOM_F32, LOOM_F64, LOOM_BF16};
  for (int d = 0; d < 3; d++) LOOM_SCOPE {
      check_set_ctx("gradient %s", loom_dtype_name(floats[d]));
      const double xv[4] = {1, 2, 3, 4}, wv[4] = {1, NAN, 1, 1};
      loom_tensor *x =
          loom_cast(loom_from_data(xv, LOOM_SHAPE(4), LOOM_F64, test_device()), floats[d]);
      x = loom_contiguous(x);
      CHECK_OK(loom_realize(x));
      CHECK_OK(loom_set_requires_grad(x, true));
      loom_tensor *w =
          loom_cast(loom_from_data(wv, LOOM_SHAPE(4), LOOM_F64, test_device()), floats[d]);
      CHECK_OK(loom_backward(loom_sum_all(loom_mul(loom_cumsum(x, 0), w))));
      double *g = host_f64(loom_grad(x), 4);
      CHECK_MSG(isnan(g[0]) && isnan(g[1]) && g[2] == 2 && g[3] == 1, "%s: %g %g %g %g", check_ctx,
                g[0], g[1], g[2], g[3]);
      free(g);
    }
  check_set_ctx("%s", "");
}

/* ------------------------------------------------------------ programs */

static char *dump_of(const loom_program *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (p && f) loom_program_dump(p, f);
  if (f) fclose(f);
  return text;
}

/* A program with a cumsum and its gradient: one scan step each way in its
 * plan; saved as text, loaded and run, the same values. */
static void test_program(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(4, 3000), LOOM_F32, test_device());
    loom_tensor *y = loom_mul_s(loom_cumsum(x, 1), 0.5);
    loom_tensor *z = loom_cumsum(loom_cast(loom_gt_s(x, 0), LOOM_I32), 0);
    loom_tensor *outs[2] = {y, z};
    loom_program *p = loom_compile(outs, 2, &x, 1);
    CHECK_MSG(p != NULL, "%s", loom_last_error());
    char *text = dump_of(p);
    CHECK_MSG(text && strstr(text, ": scan ->") && strstr(text, "2 scans"), "%s",
              text ? text : "(no text)");
    free(text);
    char path[256];
    snprintf(path, sizeof path, "%s/loom_test_scan_%d.loom",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    CHECK_OK(loom_program_save(p, path));
    loom_program *q = loom_program_load(path);
    CHECK_MSG(q != NULL, "%s", loom_last_error());
    remove(path);
    float *v = malloc(sizeof *v * 12000);
    check_fill_uniform(v, 12000, 5);
    v[7] = NAN;
    loom_tensor *in = loom_from_data(v, LOOM_SHAPE(4, 3000), LOOM_F32, test_device());
    loom_tensor *a[2] = {NULL, NULL}, *b[2] = {NULL, NULL};
    CHECK_OK(loom_program_run(p, &in, a));
    loom_tensor *host_in = loom_to(in, LOOM_CPU); /* (a loaded program runs on the CPU) */
    if (q) CHECK_OK(loom_program_run(q, &host_in, b));
    double *ya = a[0] ? host_f64(a[0], 12000) : NULL, *yb = b[0] ? host_f64(b[0], 12000) : NULL;
    int64_t *za = a[1] ? host_i64(a[1], 12000) : NULL, *zb = b[1] ? host_i64(b[1], 12000) : NULL;
    CHECK(ya && yb && za && zb);
    int differ = 0, wrong = 0;
    double s = 0;
    for (int i = 0; ya && yb && za && zb && i < 12000; i++) {
      differ += !same(ya[i], yb[i]) || za[i] != zb[i];
      if (i % 3000 == 0) s = 0;
      s += v[i];
      wrong += !same(ya[i], (double)(float)(0.5 * (double)(float)s));
    }
    CHECK_EQ_INT(differ, 0);
    CHECK_EQ_INT(wrong, 0);
    CHECK(ya && isnan(ya[7]) && isnan(ya[2999]) && !isnan(ya[6]) && !isnan(ya[3000]));
    free(ya), free(yb), free(za), free(zb), free(v);
    loom_program_free(p);
    loom_program_free(q);
  }
}

/* The scanned axis is the symbol: its sums at 1, a prime and a large size
 * (each instance of the plan template checked against its own plan under
 * LOOM_VERIFY_PLANS); and the symbol on another axis. */
static void test_symbolic(void) {
  for (int along = 0; along < 2; along++) LOOM_SCOPE {
      loom_tensor *x = loom_input("x", LOOM_SHAPE(3, 40), LOOM_F32, test_device());
      loom_tensor *y = loom_cumsum(x, along ? 0 : 1);
      loom_symbolic_dim n = {0, 1, "n"};
      loom_program *p = loom_compile_symbolic(&y, 1, &x, 1, &n, 1);
      CHECK_MSG(p != NULL, "%s", loom_last_error());
      const int64_t lengths[] = {40, 1, 7, 4099, 70001};
      for (int l = 0; p && l < 5; l++) {
        int64_t len = lengths[l];
        check_set_ctx("symbolic n %lld along %d", (long long)len, along ? 0 : 1);
        double *f;
        int64_t *iv;
        loom_tensor *in =
            make(LOOM_F32, 3 * len, LOOM_SHAPE(3, len), 9 + (unsigned)l, true, &f, &iv);
        CHECK_OK(loom_realize(in));
        loom_tensor *got = NULL;
        CHECK_OK(loom_program_run(p, &in, &got));
        int wrong = got ? (along ? compare(LOOM_F32, got, f, NULL, 1, 3, len, false)
                                 : compare(LOOM_F32, got, f, NULL, 3, len, 1, false))
                        : 1;
        CHECK_MSG(wrong == 0, "%s: %d sums wrong", check_ctx, wrong);
        free(f), free(iv);
        loom_free(got), loom_free(in);
      }
      check_set_ctx("%s", "");
      loom_program_free(p);
    }
}

/* The refusals, naming loom_cumsum. */
static void test_errors(void) {
  loom_clear_error();
  LOOM_SCOPE {
    loom_tensor *x = loom_zeros(LOOM_SHAPE(2, 3), LOOM_F32, test_device());
    CHECK_STATUS(loom_cumsum(x, 2), LOOM_ERR_AXIS);
    CHECK_STR_CONTAINS(loom_last_error(), "loom_cumsum");
    CHECK_STATUS(loom_cumsum(x, -3), LOOM_ERR_AXIS);
    CHECK_STATUS(loom_cumsum(NULL, 0), LOOM_ERR_NULL);
    loom_clear_error();
  }
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device()));
  test_reproducers();
  test_integers();
  test_torch_row();
  test_rows();
  test_axes();
  test_gradient();
  test_program();
  setenv("LOOM_VERIFY_PLANS", "1", 1); /* each instance of the plan template against its plan */
  test_symbolic();
  unsetenv("LOOM_VERIFY_PLANS");
  test_errors();
  return check_report();
}
