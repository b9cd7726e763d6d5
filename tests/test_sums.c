/*
 * Long float sums against exact ones: every reduction whose values are summed
 * (sum, mean, column sums, split reductions, log-sum-exp, the row statistics
 * of softmax and layer norm) stays within check_sum_tolerance (random terms)
 * or check_sum_bound (a constant) of the exact sum of the same terms, whatever
 * the length, on the CPU and (with LOOM_TEST_DEVICE=cuda) on a CUDA device.
 * The data have nonzero means, where one accumulator's error grows with the
 * length: before sums ran in chunks,
 * the mean of 2^24 values near 1000 was off by 2.4e-4 relative and a sum of
 * 2^25 x 0.1 by 6e-4. On the CPU the bits are also the same for 1 and 2
 * threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "loom.h"
#include "test_device.h"

/* Uniform values in [lo, hi), 24 random bits each (an LCG, the same
 * everywhere), rounded to the dtype so that references sum exactly them. */
static double *uniform(int64_t n, uint64_t seed, double lo, double hi, loom_dtype dt) {
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; v && i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    double x = lo + (hi - lo) * (double)(seed >> 40) / 16777216.0;
    v[i] = dt == LOOM_F32 ? (double)(float)x : x;
  }
  return v;
}

static loom_tensor *on_device(const double *v, loom_shape s, loom_dtype dt) {
  loom_tensor *t = loom_cast(loom_from_data(v, s, LOOM_F64, LOOM_CPU), dt);
  return loom_to(t, test_device());
}

static double *values(loom_tensor *t, int64_t n) {
  double *out = malloc(sizeof(double) * (size_t)n);
  if (out &&
      loom_copy_to_host(loom_cast(t, LOOM_F64), out, sizeof(double) * (size_t)n) != LOOM_OK) {
    free(out);
    return NULL;
  }
  return out;
}

/* Exact enough: long double sums of doubles (64-bit mantissa) over at most
 * 2^25 terms. */
typedef struct exact {
  long double sum, sumsq;
} exact;

static exact exact_sum(const double *v, int64_t n, int64_t stride) {
  exact e = {0, 0};
  for (int64_t i = 0; i < n; i++) {
    long double x = v[i * stride];
    e.sum += x, e.sumsq += x * x;
  }
  return e;
}

static const char *name(loom_dtype dt) { return loom_dtype_name(dt); }

/* check_sum_tolerance of the terms e sums. */
static double tolerance(loom_dtype dt, int64_t n, exact e) {
  return check_sum_tolerance(dt == LOOM_F32, (double)n, (double)e.sumsq, (double)e.sum);
}

/* The mean of 2^24 values in [1000, 1001): a split reduction (16 parts on the
 * CPU), the case the hardening issue measured. */
static void test_long_mean(loom_dtype dt) {
  int64_t n = (int64_t)1 << 24;
  double *v = uniform(n, 1, 1000, 1001, dt);
  LOOM_SCOPE {
    loom_tensor *x = on_device(v, LOOM_SHAPE(n), dt);
    exact e = exact_sum(v, n, 1);
    double got = loom_item(loom_mean_all(x));
    double want = (double)(e.sum / n), tol = tolerance(dt, n, e) / (double)n;
    CHECK_MSG(fabs(got - want) <= tol,
              "mean of 2^24 values in [1000, 1001) %s: %.17g, exact %.17g, off by %g > %g",
              name(dt), got, want, fabs(got - want), tol);
  }
  free(v);
}

/* 2^25 x 0.1 where the 0.1 is a fused expression (never in memory). */
static void test_fused_constant(loom_dtype dt) {
  int64_t n = (int64_t)1 << 25;
  LOOM_SCOPE {
    loom_tensor *ones = loom_ones(LOOM_SHAPE(n), dt, test_device());
    double got = loom_item(loom_sum_all(loom_mul_s(ones, 0.1)));
    double tenth = dt == LOOM_F32 ? (double)0.1f : 0.1;
    double want = (double)((long double)tenth * n);
    double tol = check_sum_bound(dt == LOOM_F32, (double)n, tenth * (double)n);
    CHECK_MSG(fabs(got - want) <= tol, "sum of 2^25 x 0.1 %s: %.17g, exact %.17g, off by %g > %g",
              name(dt), got, want, fabs(got - want), tol);
  }
}

/* Row sums of [rows, len] around 1: 20 rows of 100003 (one kernel, a chunk
 * loop per row) and 4 rows of 2^20 + 5 (split reductions, the last part
 * padded); column sums of [50000, 24] around 1000 (the outputs-inside loop),
 * plain and of a fused expression; a mean over [64, 28, 28] per channel of
 * [64, 3, 28, 28] (chunks across the outer reduced dim). */
static void test_axes(loom_dtype dt) {
  static const int64_t shapes[][2] = {{20, 100003}, {4, (1 << 20) + 5}};
  bool f32 = dt == LOOM_F32;
  for (int s = 0; s < 2; s++) LOOM_SCOPE {
      int64_t rows = shapes[s][0], len = shapes[s][1];
      double *v = uniform(rows * len, 2 + (uint64_t)s, 0.5, 1.5, dt);
      double *got =
          values(loom_sum(on_device(v, LOOM_SHAPE(rows, len), dt), (int[]){1}, 1, false), rows);
      CHECK(got != NULL);
      for (int64_t r = 0; got && r < rows; r++) {
        exact e = exact_sum(v + r * len, len, 1);
        double tol = tolerance(dt, len, e);
        CHECK_MSG(fabs(got[r] - (double)e.sum) <= tol,
                  "row sum %lld of [%lld, %lld] %s: %.17g, exact %.17g, off by %g > %g",
                  (long long)r, (long long)rows, (long long)len, name(dt), got[r], (double)e.sum,
                  fabs(got[r] - (double)e.sum), tol);
      }
      free(v), free(got);
    }
  LOOM_SCOPE {
    int64_t rows = 50000, cols = 24;
    double *v = uniform(rows * cols, 4, 1000, 1001, dt);
    loom_tensor *x = on_device(v, LOOM_SHAPE(rows, cols), dt);
    double *got = values(loom_sum(x, (int[]){0}, 1, false), cols);
    double *fused = values(loom_sum(loom_add_s(loom_mul_s(x, 2), 1), (int[]){0}, 1, false), cols);
    CHECK(got && fused);
    for (int64_t c = 0; got && fused && c < cols; c++) {
      exact e = exact_sum(v + c, rows, cols);
      double tol = tolerance(dt, rows, e);
      CHECK_MSG(fabs(got[c] - (double)e.sum) <= tol,
                "column sum %lld of [50000, 24] %s: %.17g, exact %.17g, off by %g > %g",
                (long long)c, name(dt), got[c], (double)e.sum, fabs(got[c] - (double)e.sum), tol);
      /* 2x + 1 rounds once per term in the dtype: u |2x + 1| more per term */
      long double want = 2 * e.sum + rows;
      double tol2 = 2 * tol + (f32 ? ldexp(1, -24) : ldexp(1, -53)) * (double)want;
      CHECK_MSG(fabs(fused[c] - (double)want) <= tol2,
                "column sum %lld of 2x + 1 %s: %.17g, exact %.17g", (long long)c, name(dt),
                fused[c], (double)want);
    }
    free(v), free(got), free(fused);
  }
  LOOM_SCOPE {
    int64_t N = 64, C = 3, HW = 28 * 28, per = N * HW;
    double *v = uniform(N * C * HW, 5, 1000, 1001, dt);
    loom_tensor *x = on_device(v, LOOM_SHAPE(N, C, 28, 28), dt);
    double *got = values(loom_mean(x, (int[]){0, 2, 3}, 3, false), C);
    CHECK(got != NULL);
    for (int64_t c = 0; got && c < C; c++) {
      exact e = {0, 0};
      for (int64_t i = 0; i < N; i++) {
        exact p = exact_sum(v + (i * C + c) * HW, HW, 1);
        e.sum += p.sum, e.sumsq += p.sumsq;
      }
      double want = (double)(e.sum / per);
      double tol = tolerance(dt, per, e) / (double)per +
                   (f32 ? ldexp(1, -24) : ldexp(1, -53)) * want; /* the division */
      CHECK_MSG(fabs(got[c] - want) <= tol,
                "mean of channel %lld over [64, 28, 28] %s: %.17g, exact %.17g, off by %g > %g",
                (long long)c, name(dt), got[c], want, fabs(got[c] - want), tol);
    }
    free(v), free(got);
  }
}

/* A row of 2^18: log-sum-exp, softmax (its sum is a row statistic) and layer
 * norm (mean and variance, around 1000). The exp terms and x - mean round in
 * the dtype; a sum's error moves log(S) by err / S and every p_i = e_i / S by
 * p_i err / S. */
static void test_row_statistics(loom_dtype dt) {
  int64_t n = (int64_t)1 << 18;
  bool f32 = dt == LOOM_F32;
  double u = f32 ? ldexp(1, -24) : ldexp(1, -53);
  LOOM_SCOPE {
    double *v = uniform(n, 6, 0, 1, dt);
    loom_tensor *x = on_device(v, LOOM_SHAPE(1, n), dt);
    double mx = 0;
    for (int64_t i = 0; i < n; i++) mx = v[i] > mx ? v[i] : mx;
    exact e = {0, 0};
    for (int64_t i = 0; i < n; i++) {
      long double t = expl((long double)v[i] - mx);
      e.sum += t, e.sumsq += t * t;
    }
    long double s = e.sum;
    /* the exps themselves: within 4 u each (CUDA's within 2 ulp) */
    double serr = tolerance(dt, n, e) + 4 * u * (double)s;
    double lse = loom_item(loom_logsumexp(x, 1)), want = mx + (double)logl(s);
    double tol = serr / (double)s + 2 * u * fabs(want);
    CHECK_MSG(fabs(lse - want) <= tol, "logsumexp over 2^18 %s: %.17g, exact %.17g, off by %g > %g",
              name(dt), lse, want, fabs(lse - want), tol);
    double *p = values(loom_softmax(x, 1), n);
    CHECK(p != NULL);
    double worst = 0;
    for (int64_t i = 0; p && i < n; i++) {
      double pi = (double)(expl((long double)v[i] - mx) / s);
      double d = fabs(p[i] - pi) / (pi * (serr / (double)s + 8 * u));
      worst = d > worst ? d : worst;
    }
    CHECK_MSG(worst <= 1, "softmax over 2^18 %s: off by %g of its tolerance", name(dt), worst);
    free(v), free(p);
  }
  LOOM_SCOPE {
    double *v = uniform(2 * n, 7, 1000, 1001, dt);
    loom_tensor *x = on_device(v, LOOM_SHAPE(2, n), dt);
    double *y = values(loom_layer_norm(x, 1, NULL, NULL, 1e-5), 2 * n);
    CHECK(y != NULL);
    for (int r = 0; y && r < 2; r++) {
      const double *row = v + r * n;
      exact e = exact_sum(row, n, 1);
      long double mean = e.sum / n, var = 0, dsq = 0;
      for (int64_t i = 0; i < n; i++) {
        long double d = row[i] - mean;
        var += d * d, dsq += d * d * d * d;
      }
      exact d2 = {var, dsq}; /* the terms of the variance's sum */
      var /= n;
      long double rs = 1 / sqrtl(var + 1e-5L);
      /* the mean's error (and its rounding to the dtype) shifts every x - mean;
       * the variance's relative error scales y by half of it */
      double mean_err = tolerance(dt, n, e) / (double)n + u * (double)mean;
      double var_rel =
          (tolerance(dt, n, d2) / (double)n + 2 * mean_err * (double)sqrtl(var)) / (double)var +
          4 * u;
      double worst = 0;
      for (int64_t i = 0; i < n; i++) {
        double want = (double)((row[i] - mean) * rs);
        double tol = mean_err * (double)rs + fabs(want) * var_rel / 2 + 4 * u * (1 + fabs(want)) +
                     2 * u * row[i] * (double)rs;
        double d = fabs(y[r * n + i] - want) / tol;
        worst = d > worst ? d : worst;
      }
      CHECK_MSG(worst <= 1, "layer_norm row %d of 2^18 around 1000 %s: off by %g of its tolerance",
                r, name(dt), worst);
    }
    free(v), free(y);
  }
}

/* The same bits on 1 and 2 threads: each output is summed in one order. */
static void test_thread_counts(void) {
  int64_t rows = 20, len = 100003;
  double *v = uniform(rows * len, 8, -1, 1, LOOM_F32);
  int threads = loom_num_threads();
  float got[2][3][20];
  for (int t = 0; t < 2; t++) LOOM_SCOPE {
      CHECK_OK(loom_set_num_threads(t + 1));
      loom_tensor *x =
          loom_cast(loom_from_data(v, LOOM_SHAPE(rows, len), LOOM_F64, LOOM_CPU), LOOM_F32);
      CHECK_OK(loom_copy_to_host(loom_sum(x, (int[]){1}, 1, false), got[t][0], sizeof got[t][0]));
      CHECK_OK(
          loom_copy_to_host(loom_sum(loom_reshape(x, LOOM_SHAPE(len, rows)), (int[]){0}, 1, false),
                            got[t][1], sizeof got[t][1]));
      float all;
      CHECK_OK(loom_copy_to_host(loom_sum_all(x), &all, sizeof all));
      got[t][2][0] = all;
    }
  CHECK_MSG(memcmp(got[0][0], got[1][0], sizeof got[0][0]) == 0, "row sums differ by thread count");
  CHECK_MSG(memcmp(got[0][1], got[1][1], sizeof got[0][1]) == 0,
            "column sums differ by thread count");
  CHECK_MSG(got[0][2][0] == got[1][2][0], "sum_all differs by thread count");
  CHECK_OK(loom_set_num_threads(threads));
  free(v);
}

int main(void) {
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) {
    test_long_mean(dt);
    test_fused_constant(dt);
    test_axes(dt);
    test_row_statistics(dt);
  }
  if (test_device().type == LOOM_DEVICE_CPU) test_thread_counts();
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
