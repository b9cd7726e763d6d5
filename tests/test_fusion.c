/* Fusion: how many kernels the common patterns take (from the stats), that
 * fused and unfused results agree, and that reductions are deterministic
 * whatever the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

static loom_tensor *input(loom_shape shape, uint64_t seed) {
  return loom_randn_key(loom_key_new(seed), shape, LOOM_F32, LOOM_CPU);
}

/* Kernels launched to realize t (its inputs already realized). */
static uint64_t kernels_for(loom_tensor *t) {
  uint64_t before = loom_get_stats().kernels_launched;
  CHECK_OK(loom_realize(t));
  return loom_get_stats().kernels_launched - before;
}

static void realized(loom_tensor *t) { CHECK_OK(loom_realize(t)); }

static void test_counts(void) {
  LOOM_SCOPE {
    loom_tensor *x = input(LOOM_SHAPE(64, 128), 1), *y = input(LOOM_SHAPE(64, 128), 2);
    loom_tensor *b = input(LOOM_SHAPE(128), 3), *big = input(LOOM_SHAPE(1 << 20), 4);
    realized(x), realized(y), realized(b), realized(big);
    int last[] = {-1};

    loom_tensor *chain =
        loom_sub(loom_mul(loom_relu(loom_add(loom_mul_s(x, 1.5), y)), loom_sigmoid(x)),
                 loom_mul_s(loom_tanh(y), 0.5));
    CHECK_EQ_INT(kernels_for(chain), 1);
    CHECK_EQ_INT(kernels_for(loom_sum_all(loom_mul(x, y))), 1);
    CHECK_EQ_INT(kernels_for(loom_mean(x, last, 1, false)), 1);
    CHECK_EQ_INT(kernels_for(loom_add(loom_sum(x, (int[]){0}, 1, false), b)), 1);
    CHECK_EQ_INT(kernels_for(loom_logsumexp(x, -1)), 1);
    CHECK_EQ_INT(kernels_for(loom_softmax(x, -1)), 1); /* the row's log-sum-exp inside */
    CHECK_EQ_INT(kernels_for(loom_log_softmax(x, -1)), 1);
    /* not the last dim: no row kernel; the max, the sum of exp(x - max), the result */
    CHECK_EQ_INT(kernels_for(loom_softmax(x, 0)), 3);
    CHECK_EQ_INT(kernels_for(loom_log_softmax(x, 0)), 3);
    /* a big reduction to one value: partial sums in parallel, then their sum */
    CHECK_EQ_INT(kernels_for(loom_mean_all(big)), 2);

    /* layer norm written with primitive ops */
    loom_tensor *mu = loom_mean(x, last, 1, true);
    loom_tensor *xc = loom_sub(x, mu);
    loom_tensor *var = loom_mean(loom_square(xc), last, 1, true);
    loom_tensor *ln = loom_add(loom_mul(loom_mul(xc, loom_rsqrt(loom_add_s(var, 1e-5))), b), b);
    CHECK_EQ_INT(kernels_for(ln), 1); /* mean and variance as row statistics */

    /* a cheap value read by two kernels is recomputed by each (no memory
     * round trip); an expensive one is stored once and read twice */
    loom_tensor *e = loom_exp(x);
    loom_tensor *cheap[2] = {loom_add_s(e, 1), loom_mul_s(e, 2)};
    uint64_t before = loom_get_stats().kernels_launched;
    CHECK_OK(loom_eval(cheap, 2));
    CHECK_EQ_INT(loom_get_stats().kernels_launched - before, 2);
    loom_tensor *costly = loom_exp(loom_sin(loom_tanh(loom_exp(loom_log(loom_abs(x))))));
    loom_tensor *pair[2] = {loom_add_s(costly, 1), loom_mul_s(costly, 2)};
    before = loom_get_stats().kernels_launched;
    CHECK_OK(loom_eval(pair, 2));
    CHECK_EQ_INT(loom_get_stats().kernels_launched - before, 3);
  }
}

/* relu(x @ w^T + b): the GEMM runs in row blocks, each followed by the bias
 * and relu while the block is in cache; values as computed unfused. */
static void test_matmul_epilogue(void) {
  /* 3 batches of 700 rows: 65536 / 70 = 936 rows per block, so blocks
   * cross no batch but several blocks fill one batch */
  static float fused[3 * 2100 * 70], unfused[3 * 2100 * 70];
  for (int pass = 0; pass < 2; pass++) {
    loom_set_fusion(pass == 0);
    LOOM_SCOPE {
      loom_tensor *x = input(LOOM_SHAPE(3, 2100, 50), 8), *w = input(LOOM_SHAPE(70, 50), 9);
      loom_tensor *b = input(LOOM_SHAPE(70), 10), *res = input(LOOM_SHAPE(2100, 70), 11);
      realized(x), realized(w), realized(b), realized(res);
      loom_tensor *y =
          loom_add(loom_relu(loom_add(loom_matmul(x, loom_transpose(w, 0, 1)), b)), res);
      uint64_t before = loom_get_stats().kernels_launched;
      CHECK_OK(loom_copy_to_host(y, pass == 0 ? fused : unfused, sizeof fused));
      if (pass == 0) CHECK_EQ_INT(loom_get_stats().kernels_launched - before, 1);
    }
  }
  loom_set_fusion(true);
  double worst = 0;
  for (int i = 0; i < 3 * 2100 * 70; i++) worst = fmax(worst, fabs(fused[i] - unfused[i]));
  CHECK_MSG(worst < 1e-5, "matmul epilogue differs from unfused by %g", worst);
}

/* Regression: the gradient of a transposed leaf broadcast over a batch is a
 * sum whose consumer permutes it; a permute must not become the epilogue of
 * that sum (it reorders the output). */
static void test_permuted_reduction(void) {
  double wv[20], gv[40], got[20];
  for (int i = 0; i < 40; i++) gv[i] = i, wv[i % 20] = i % 20;
  LOOM_SCOPE {
    loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(5, 4), LOOM_F64, LOOM_CPU);
    loom_tensor *g = loom_from_data(gv, LOOM_SHAPE(2, 4, 5), LOOM_F64, LOOM_CPU);
    CHECK_OK(loom_set_requires_grad(w, true));
    loom_tensor *wt = loom_expand(loom_unsqueeze(loom_transpose(w, 0, 1), 0), LOOM_SHAPE(2, 4, 5));
    CHECK_OK(loom_backward(loom_sum_all(loom_mul(wt, g))));
    CHECK_OK(loom_copy_to_host(loom_grad(w), got, sizeof got));
  }
  /* d/dw[i][j] = g[0][j][i] + g[1][j][i] */
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 4; j++) CHECK_NEAR(got[i * 4 + j], gv[j * 5 + i] + gv[20 + j * 5 + i], 0);
}

/* Instructions doing `op` in the kernels of t's fused plan (nothing runs); with
 * needed_only, those the kernels evaluate (lowering leaves an instruction it
 * stopped using in place; backends skip it). */
static int plan_ops(const loom_tensor *t, lk_op op, bool needed_only) {
  lm_graph g;
  lm_plan *p = NULL;
  char err[512];
  int count = 0;
  if (!t->node || lm_graph_build(&g, &t->node, 1) != LOOM_OK) {
    CHECK_MSG(0, "cannot build the graph");
    return -1;
  }
  CHECK_MSG(lm_plan_make(&g, true, &p, err, sizeof err) == LOOM_OK, "lm_plan_make: %s", err);
  for (int s = 0; p && s < p->nsteps; s++) {
    const lk_kernel *k = &p->steps[s].kernel;
    if (p->steps[s].kind != LM_STEP_KERNEL) continue;
    unsigned char *needed = calloc((size_t)k->ninst, 1);
    lk_mark_needed(k, k->result, needed);
    lk_mark_needed(k, k->value, needed);
    for (int st = 0; st < k->nstats; st++) lk_mark_needed(k, k->stat[st].value, needed);
    for (int i = 0; i < k->ninst; i++) count += (needed[i] || !needed_only) && k->inst[i].op == op;
    free(needed);
  }
  lm_plan_free(p);
  lm_graph_free(&g);
  return count;
}

/* Views over memory that compose into strides are one affine load: the rows
 * of [O, N*H*W] over memory shaped [O, N, H, W] (a flatten before a
 * per-sample sum) read at o * NHW + j, where lowering view by view divided j
 * into (n, h, w) and multiplied it back, and the sum did not vectorize.
 * Permuted first, [N, O*H*W] is no such view: that index still divides. */
static void test_affine_view_loads(void) {
  enum { O = 4, N = 8, H = 6, W = 5 };
  static float xv[O * N * H * W];
  float rows[O], cols[N];
  for (int i = 0; i < O * N * H * W; i++) xv[i] = (float)sin(i * 0.61);
  LOOM_SCOPE {
    loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(O, N, H, W), LOOM_F32, LOOM_CPU);
    int one[] = {1};
    loom_tensor *r = loom_sum(loom_reshape(x, LOOM_SHAPE(O, N * H * W)), one, 1, false);
    loom_tensor *xt = loom_permute(x, (int[]){1, 0, 2, 3}, 4);
    loom_tensor *c = loom_sum(loom_reshape(xt, LOOM_SHAPE(N, O * H * W)), one, 1, false);
    CHECK_EQ_INT(plan_ops(r, LK_IDIV, false) + plan_ops(r, LK_IMOD, false), 0);
    CHECK_MSG(plan_ops(c, LK_IDIV, false) > 0,
              "a permuted reshape read without dividing its index");
    CHECK_OK(loom_copy_to_host(r, rows, sizeof rows));
    CHECK_OK(loom_copy_to_host(c, cols, sizeof cols));
  }
  for (int o = 0; o < O; o++) {
    double want = 0;
    for (int j = 0; j < N * H * W; j++) want += xv[o * N * H * W + j];
    CHECK_NEAR(rows[o], want, 1e-4);
  }
  for (int n = 0; n < N; n++) {
    double want = 0;
    for (int o = 0; o < O; o++)
      for (int j = 0; j < H * W; j++) want += xv[(o * N + n) * H * W + j];
    CHECK_NEAR(cols[n], want, 1e-4);
  }
}

/* A reshape of computed values undone by another with ops between them (GPT-2's
 * logits cast, viewed as [b, t, V], cast again and viewed as [b*t, V] for the
 * loss) reads at (i / t) * t + i % t, which is i: lowering keeps that load
 * affine. Not analyzable, the row sums over it were once generated as column
 * sums, striding through the rows (25 ms for [256, 50257] instead of 3). */
static void test_undone_reshape(void) {
  enum { B = 3, T = 4, V = 50 };
  float xv[B * T * V], got[B * T];
  for (int i = 0; i < B * T * V; i++) xv[i] = (float)sin(i * 0.37);
  LOOM_SCOPE {
    loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(B * T, V), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_exp(loom_reshape(loom_neg(x), LOOM_SHAPE(B, T, V)));
    loom_tensor *s = loom_sum(loom_reshape(y, LOOM_SHAPE(B * T, V)), (int[]){1}, 1, false);
    CHECK_EQ_INT(plan_ops(s, LK_IDIV, true) + plan_ops(s, LK_IMOD, true), 0);
    CHECK_OK(loom_copy_to_host(s, got, sizeof got));
  }
  for (int r = 0; r < B * T; r++) {
    double want = 0;
    for (int j = 0; j < V; j++) want += exp(-(double)xv[r * V + j]);
    CHECK_NEAR(got[r], want, 1e-4 * want);
  }
}

/* Regression (found by test_random_graphs): a GEMM operand read through a
 * view chain that passes a target must read the target's buffer, not the
 * reduction under it, which becomes the target's epilogue. */
static void test_matmul_of_reduced_target(void) {
  LOOM_SCOPE {
    loom_tensor *x4 = input(LOOM_SHAPE(4, 5, 3), 12), *x = input(LOOM_SHAPE(1, 5, 3), 13);
    realized(x4), realized(x);
    loom_tensor *a = loom_sum(x4, (int[]){-1}, 1, false); /* [4, 5] */
    loom_tensor *m = loom_matmul(a, loom_abs(x));         /* [1, 4, 3] */
    loom_tensor *outs[2] = {m, a};
    CHECK_OK(loom_eval(outs, 2));
    float av[20], mv[12], xv[15];
    CHECK_OK(loom_copy_to_host(a, av, sizeof av));
    CHECK_OK(loom_copy_to_host(m, mv, sizeof mv));
    CHECK_OK(loom_copy_to_host(x, xv, sizeof xv));
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++) {
        double s = 0;
        for (int k = 0; k < 5; k++) s += (double)av[i * 5 + k] * fabs(xv[k * 3 + j]);
        CHECK_NEAR(mv[i * 3 + j], s, 1e-4);
      }
  }
}

static void test_unfused_counts(void) {
  loom_set_fusion(false);
  LOOM_SCOPE {
    loom_tensor *x = input(LOOM_SHAPE(8, 16), 5);
    realized(x);
    /* one kernel per op that computes: mul, add, exp */
    CHECK_EQ_INT(kernels_for(loom_exp(loom_add_s(loom_mul_s(x, 2), 1))), 3);
  }
  loom_set_fusion(true);
}

/* The same graph fused and unfused gives the same values (the op suites
 * also run whole with LOOM_NO_FUSE=1). */
static void test_fused_matches_unfused(void) {
  float fused[64 * 32], unfused[64 * 32];
  for (int pass = 0; pass < 2; pass++) {
    loom_set_fusion(pass == 0);
    LOOM_SCOPE {
      loom_tensor *x = input(LOOM_SHAPE(64, 32), 6);
      loom_tensor *s = loom_log_softmax(loom_mul_s(loom_tanh(x), 3), -1);
      loom_tensor *m = loom_mean(s, (int[]){0}, 1, true);
      loom_tensor *r = loom_sub(s, m);
      CHECK_OK(loom_copy_to_host(r, pass == 0 ? fused : unfused, sizeof fused));
    }
  }
  loom_set_fusion(true);
  double worst = 0;
  for (int i = 0; i < 64 * 32; i++) worst = fmax(worst, fabs(fused[i] - unfused[i]));
  CHECK_MSG(worst < 1e-5, "fused and unfused differ by %g", worst);
}

/* Row kernels: statistics of a row computed by the map over it. */
static double worst_difference(const float *a, const float *b, int n) {
  double worst = 0;
  for (int i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
  return worst;
}

static loom_tensor *layer_norm(const loom_tensor *x, const loom_tensor *w, const loom_tensor *b) {
  int last[] = {-1};
  loom_tensor *mu = loom_mean(x, last, 1, true);
  loom_tensor *xc = loom_sub(x, mu);
  loom_tensor *var = loom_mean(loom_square(xc), last, 1, true);
  return loom_add(loom_mul(loom_mul(xc, loom_rsqrt(loom_add_s(var, 1e-5))), w), b);
}

/* The same values as separate kernels, for shapes with one row, odd rows, a
 * row split between threads (3 rows of 40000: the two threads meet mid-row). */
static void test_row_kernel_values(void) {
  static float fused[120000], unfused[120000];
  loom_shape shapes[3] = {LOOM_SHAPE(3, 5, 37), LOOM_SHAPE(1, 77), LOOM_SHAPE(3, 40000)};
  for (int s = 0; s < 3; s++)
    for (int op = 0; op < 3; op++) {
      int n = 1;
      for (int d = 0; d < shapes[s].ndim; d++) n *= (int)shapes[s].dim[d];
      int64_t len = shapes[s].dim[shapes[s].ndim - 1];
      for (int pass = 0; pass < 2; pass++) {
        loom_set_fusion(pass == 0);
        LOOM_SCOPE {
          loom_tensor *x = loom_mul_s(input(shapes[s], 20 + s), 4);
          loom_tensor *w = input(LOOM_SHAPE(len), 30), *b = input(LOOM_SHAPE(len), 31);
          loom_tensor *y = op == 0   ? loom_softmax(x, -1)
                           : op == 1 ? loom_log_softmax(x, -1)
                                     : layer_norm(x, w, b);
          uint64_t before = loom_get_stats().kernels_launched;
          CHECK_OK(loom_copy_to_host(y, pass == 0 ? fused : unfused, sizeof(float) * (size_t)n));
          /* the inputs' random draws are kernels of their own */
          if (pass == 0) CHECK(loom_get_stats().kernels_launched - before <= (op == 2 ? 4 : 2));
        }
      }
      double worst = worst_difference(fused, unfused, n);
      CHECK_MSG(worst < 2e-5, "row kernel %d on shape %d differs from unfused by %g", op, s, worst);
    }
  loom_set_fusion(true);
}

/* A statistic someone else reads too (here an output) keeps its own kernel;
 * one read off its row (rotated by a cat of slices) as well: the plan falls
 * back to separate kernels, with the right values. */
static void test_row_kernel_refusals(void) {
  LOOM_SCOPE {
    loom_tensor *x = input(LOOM_SHAPE(64, 32), 40);
    realized(x);
    loom_tensor *lse = loom_logsumexp(x, -1);
    loom_tensor *both[2] = {loom_exp(loom_sub(x, loom_unsqueeze(lse, -1))), lse};
    uint64_t before = loom_get_stats().kernels_launched;
    CHECK_OK(loom_eval(both, 2));
    CHECK_EQ_INT(loom_get_stats().kernels_launched - before, 2);

    loom_tensor *s = loom_sum(x, (int[]){-1}, 1, true); /* [64, 1] */
    loom_tensor *halves[2] = {loom_slice(s, 0, 32, 64, 1), loom_slice(s, 0, 0, 32, 1)};
    loom_tensor *rotated = loom_cat(halves, 2, 0);
    loom_tensor *y = loom_add(x, rotated);
    CHECK_EQ_INT(kernels_for(y), 2);
    float xv[64 * 32], yv[64 * 32];
    CHECK_OK(loom_copy_to_host(x, xv, sizeof xv));
    CHECK_OK(loom_copy_to_host(y, yv, sizeof yv));
    for (int r = 0; r < 64; r++) {
      double sum = 0;
      for (int j = 0; j < 32; j++) sum += xv[((r + 32) % 64) * 32 + j];
      for (int j = 0; j < 32; j++) CHECK_NEAR(yv[r * 32 + j], xv[r * 32 + j] + sum, 1e-4);
    }
  }
}

/* A GEMM operand that needs memory (a pad: no affine view) is stored once and
 * a second GEMM reads it transposed in place, whichever GEMM comes first in the
 * graph (regression: the later one copied the transpose out). */
static void test_shared_gemm_operand(void) {
  LOOM_SCOPE {
    loom_tensor *x = input(LOOM_SHAPE(6, 6), 50), *w = input(LOOM_SHAPE(8, 8), 51);
    realized(x), realized(w);
    loom_tensor *p = loom_pad(x, (int64_t[]){1, 1, 1, 1}, 4, 0.5);
    loom_tensor *both[2] = {loom_matmul(p, w), loom_matmul(loom_transpose(p, 0, 1), w)};
    uint64_t before = loom_get_stats().kernels_launched;
    CHECK_OK(loom_eval(both, 2));
    CHECK_EQ_INT(loom_get_stats().kernels_launched - before, 1); /* the pad, once */
    float pv[64], wv[64], got[64];
    CHECK_OK(loom_copy_to_host(p, pv, sizeof pv));
    CHECK_OK(loom_copy_to_host(w, wv, sizeof wv));
    CHECK_OK(loom_copy_to_host(both[1], got, sizeof got));
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 8; j++) {
        double s = 0;
        for (int k = 0; k < 8; k++) s += (double)pv[k * 8 + i] * wv[k * 8 + j];
        CHECK_NEAR(got[i * 8 + j], s, 1e-4);
      }
  }
}

/* Few rows and many columns (a convolution's [O, N*OH*OW]): the GEMM splits
 * its columns over the threads; B read as is and transposed, with and without
 * an epilogue kernel. */
static void test_wide_gemm(void) {
  enum { M = 20, K = 300, N = 1000 };
  static float av[M * K], bv[K * N], got[M * N];
  for (int i = 0; i < M * K; i++) av[i] = (float)sin(i * 0.11);
  for (int i = 0; i < K * N; i++) bv[i] = (float)cos(i * 0.07);
  LOOM_SCOPE {
    loom_tensor *a = loom_from_data(av, LOOM_SHAPE(M, K), LOOM_F32, LOOM_CPU);
    loom_tensor *b = loom_from_data(bv, LOOM_SHAPE(K, N), LOOM_F32, LOOM_CPU);
    loom_tensor *bt = loom_contiguous(loom_transpose(b, 0, 1)); /* [N, K] */
    for (int form = 0; form < 3; form++) {
      loom_tensor *y = form == 0   ? loom_matmul(a, b)
                       : form == 1 ? loom_matmul(a, loom_transpose(bt, 0, 1))
                                   : loom_relu(loom_add_s(loom_matmul(a, b), 0.25));
      CHECK_OK(loom_copy_to_host(y, got, sizeof got));
      for (int i = 0; i < M; i += 3)
        for (int j = 0; j < N; j += 7) {
          double s = 0;
          for (int k = 0; k < K; k++) s += (double)av[i * K + k] * bv[k * N + j];
          if (form == 2) s = fmax(s + 0.25, 0);
          CHECK_NEAR(got[i * N + j], s, 1e-3);
        }
    }
  }
}

/* Few outputs over a long sum (a convolution's weight gradient, [16, 9] over
 * 50000): on two threads the GEMM splits the sum and adds the parts in order,
 * so the values are right and the bits the same on every run; F32 and F64,
 * each operand as is and transposed, with an epilogue. */
static void test_long_sum_gemm(void) {
  enum { M = 16, K = 50000, N = 9 };
  static double av[M * K], bv[K * N];
  for (int i = 0; i < M * K; i++) av[i] = sin(i * 0.013);
  for (int i = 0; i < K * N; i++) bv[i] = cos(i * 0.007);
  int threads = loom_num_threads();
  loom_set_num_threads(2);
  for (int dt = 0; dt < 2; dt++) LOOM_SCOPE {
      loom_dtype dtype = dt == 0 ? LOOM_F32 : LOOM_F64;
      loom_tensor *a = loom_cast(loom_from_data(av, LOOM_SHAPE(M, K), LOOM_F64, LOOM_CPU), dtype);
      loom_tensor *b = loom_cast(loom_from_data(bv, LOOM_SHAPE(K, N), LOOM_F64, LOOM_CPU), dtype);
      loom_tensor *at = loom_contiguous(loom_transpose(a, 0, 1)); /* [K, M] */
      loom_tensor *bt = loom_contiguous(loom_transpose(b, 0, 1)); /* [N, K] */
      for (int form = 0; form < 3; form++) {
        double got[2][M * N];
        for (int run = 0; run < 2; run++) {
          loom_tensor *y = form == 0 ? loom_matmul(a, b)
                           : form == 1
                               ? loom_matmul(loom_transpose(at, 0, 1), loom_transpose(bt, 0, 1))
                               : loom_tanh(loom_matmul(a, b));
          CHECK_OK(loom_copy_to_host(loom_cast(y, LOOM_F64), got[run], sizeof got[run]));
        }
        CHECK_MSG(memcmp(got[0], got[1], sizeof got[0]) == 0, "long sum %s form %d: bits differ",
                  dt ? "f64" : "f32", form);
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += av[i * K + k] * bv[k * N + j];
            if (form == 2) s = tanh(s);
            CHECK_NEAR(got[0][i * N + j], s, dt == 0 ? 2e-2 : 1e-9);
          }
      }
    }
  loom_set_num_threads(threads);
}

/* A large B operand that only GEMMs read (an im2col matrix, here a padded
 * and scaled matrix) is made inside each GEMM a block of columns at a time and
 * never stored: read as is (a convolution) and transposed (its weight
 * gradient, with A transposed too), with a remainder block, against C. */
static void test_gemm_prologue(void) {
  enum { M = 8, R = 96, C = 10007, XC = C - 2 };
  static double xv[R * XC], av[M * R], gv[M * C];
  for (int i = 0; i < R * XC; i++) xv[i] = sin(i * 0.011);
  for (int i = 0; i < M * R; i++) av[i] = cos(i * 0.37);
  for (int i = 0; i < M * C; i++) gv[i] = sin(i * 0.029 + 1);
  int threads = loom_num_threads();
  for (int t = 1; t <= 2; t++)
    for (int dt = 0; dt < 2; dt++) LOOM_SCOPE {
        CHECK_OK(loom_set_num_threads(t));
        loom_dtype dtype = dt == 0 ? LOOM_F32 : LOOM_F64;
        loom_tensor *x =
            loom_cast(loom_from_data(xv, LOOM_SHAPE(R, XC), LOOM_F64, LOOM_CPU), dtype);
        loom_tensor *a = loom_cast(loom_from_data(av, LOOM_SHAPE(M, R), LOOM_F64, LOOM_CPU), dtype);
        loom_tensor *gt = loom_contiguous(loom_transpose(
            loom_cast(loom_from_data(gv, LOOM_SHAPE(M, C), LOOM_F64, LOOM_CPU), dtype), 0, 1));
        CHECK_OK(loom_realize(x));
        CHECK_OK(loom_realize(a));
        CHECK_OK(loom_realize(gt));
        /* B = 2 * pad(x) [R, C]: columns 0 and C-1 are zero */
        loom_tensor *b = loom_mul_s(loom_pad(x, (int64_t[]){1, 1}, 2, 0.0), 2.0);
        loom_tensor *y = loom_matmul(a, b); /* [M, C] */
        loom_tensor *w =
            loom_matmul(loom_transpose(gt, 0, 1), loom_transpose(b, 0, 1)); /* [M, R] */
        loom_reset_stats();
        uint64_t before = loom_get_stats().bytes_live;
        loom_tensor *outs[2] = {y, w};
        CHECK_OK(loom_eval(outs, 2));
        size_t es = loom_dtype_size(dtype);
        uint64_t b_bytes = (uint64_t)R * C * es, extra = loom_get_stats().bytes_peak - before;
        CHECK_MSG(extra < b_bytes / 2, "B [%d, %d] seems stored: the realization took %llu bytes",
                  R, C, (unsigned long long)extra);
        static double yv[M * C], wv[M * R];
        CHECK_OK(loom_copy_to_host(loom_cast(y, LOOM_F64), yv, sizeof yv));
        CHECK_OK(loom_copy_to_host(loom_cast(w, LOOM_F64), wv, sizeof wv));
        /* Each output is a sum of K products, added in BLAS's order: within its
         * blocks of K (at most a few hundred terms) and across them into C.
         * check_sum_tolerance of the products bounds that (terms of any sign,
         * roundings independent); the products round once each too, 2 u sum|t|.
         * Worst: the error over its tolerance. */
        bool f32 = dt == 0;
        double u = f32 ? ldexp(1, -24) : ldexp(1, -53), worst_y = 0, worst_w = 0;
        for (int i = 0; i < M; i++) {
          for (int j = 0; j < C; j++) {
            double s = 0, sq = 0, sa = 0;
            for (int k = 0; j > 0 && j < C - 1 && k < R; k++) {
              double t = av[i * R + k] * 2 * xv[k * XC + j - 1];
              s += t, sq += t * t, sa += fabs(t);
            }
            double tol = check_sum_tolerance(f32, R, sq, s) + 2 * u * sa;
            worst_y = fmax(worst_y, fabs(yv[i * C + j] - s) / tol);
          }
          for (int k = 0; k < R; k++) {
            double s = 0, sq = 0, sa = 0;
            for (int j = 1; j < C - 1; j++) {
              double t = gv[i * C + j] * 2 * xv[k * XC + j - 1];
              s += t, sq += t * t, sa += fabs(t);
            }
            double tol = check_sum_tolerance(f32, C - 2, sq, s) + 2 * u * sa;
            worst_w = fmax(worst_w, fabs(wv[i * R + k] - s) / tol);
          }
        }
        CHECK_MSG(worst_y <= 1 && worst_w <= 1,
                  "%s, %d threads: off by %g (as is), %g (transposed) of the tolerance",
                  dt ? "f64" : "f32", t, worst_y, worst_w);
      }
  CHECK_OK(loom_set_num_threads(threads));
}

/* Column sums (sum over the rows of a [rows, C] matrix: a bias gradient) loop
 * over the rows outside and the columns inside; with an epilogue (mean), for
 * integers, and the same bits for any number of threads. */
static void test_column_sums(void) {
  enum { R = 5000, C = 24 };
  static float xv[R * C];
  static int32_t iv[R * C];
  for (int i = 0; i < R * C; i++) xv[i] = (float)sin(i * 0.37), iv[i] = (int32_t)(i % 1001) - 500;
  float sums[2][C], means[C];
  int64_t isums[C]; /* integer sums widen to I64, as in torch */
  for (int t = 0; t < 2; t++) {
    CHECK_OK(loom_set_num_threads(t + 1));
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(R, C), LOOM_F32, LOOM_CPU);
      loom_tensor *xi = loom_from_data(iv, LOOM_SHAPE(R, C), LOOM_I32, LOOM_CPU);
      CHECK_OK(loom_copy_to_host(loom_sum(x, (int[]){0}, 1, false), sums[t], sizeof sums[t]));
      CHECK_OK(loom_copy_to_host(loom_mean(x, (int[]){0}, 1, false), means, sizeof means));
      CHECK_OK(loom_copy_to_host(loom_sum(xi, (int[]){0}, 1, false), isums, sizeof isums));
    }
  }
  CHECK_OK(loom_set_num_threads(2));
  CHECK_MSG(memcmp(sums[0], sums[1], sizeof sums[0]) == 0, "column sums depend on the threads");
  for (int c = 0; c < C; c++) {
    double s = 0;
    int64_t si = 0;
    for (int r = 0; r < R; r++) s += xv[r * C + c], si += iv[r * C + c];
    CHECK_NEAR(sums[0][c], s, 1e-3);
    CHECK_NEAR(means[c], s / R, 1e-6);
    CHECK_EQ_INT(isums[c], si);
  }
}

/* Every output point is computed by one thread and big reductions split into
 * a fixed number of parts, so the bits do not depend on the threads. */
static void test_deterministic_reductions(void) {
  double sums[3];
  int threads[3] = {1, 2, 2};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(loom_set_num_threads(threads[i]));
    LOOM_SCOPE {
      loom_tensor *x = input(LOOM_SHAPE(3, 1 << 19), 7);
      sums[i] = loom_item(loom_sum_all(loom_exp(x)));
    }
  }
  CHECK_MSG(memcmp(&sums[0], &sums[1], sizeof(double)) == 0 &&
                memcmp(&sums[1], &sums[2], sizeof(double)) == 0,
            "sums differ: %.17g %.17g %.17g", sums[0], sums[1], sums[2]);
  CHECK_OK(loom_set_num_threads(2));
}

/* A linear layer on [b, t, C] folds its batch into rows: the forward product, the
 * input's gradient and the weight's (K = b*t) are one GEMM each, as for the same
 * layer on [b*t, C] (and the bias + relu still run as the forward GEMM's epilogue):
 * the same BLAS calls and the same bits. Unfolded, each was b GEMMs (and the
 * weight's gradient a sum of b of them). */
static void test_folded_linear(void) {
  enum { B = 8, T = 64, C = 128, N = 96 };
  int threads = loom_num_threads();
  CHECK_OK(loom_set_num_threads(1)); /* a call count per GEMM, not per thread */
  uint64_t calls[2];
  float grads[2][N * C], outs[2][B * T * N];
  for (int form = 0; form < 2; form++) LOOM_SCOPE {
      loom_key key = loom_key_new(7);
      loom_tensor *x =
          loom_rand_key(loom_key_fold(key, 1), LOOM_SHAPE(B, T, C), LOOM_F32, LOOM_CPU);
      loom_tensor *w = loom_rand_key(loom_key_fold(key, 2), LOOM_SHAPE(N, C), LOOM_F32, LOOM_CPU);
      loom_tensor *bias = loom_rand_key(loom_key_fold(key, 3), LOOM_SHAPE(N), LOOM_F32, LOOM_CPU);
      CHECK_OK(loom_realize(x));
      CHECK_OK(loom_realize(w));
      CHECK_OK(loom_set_requires_grad(w, true));
      loom_tensor *in = form == 0 ? x : loom_reshape(x, LOOM_SHAPE(B * T, C));
      loom_tensor *y = loom_relu(loom_linear_f(in, w, bias));
      loom_tensor *loss = loom_sum_all(loom_square(y));
      CHECK_OK(loom_backward(loss));
      loom_tensor *dw = loom_grad(w);
      loom_reset_stats();
      loom_tensor *targets[2] = {dw, y};
      CHECK_OK(loom_eval(targets, 2));
      calls[form] = loom_get_stats().gemm_calls;
      CHECK_OK(loom_copy_to_host(dw, grads[form], sizeof grads[form]));
      CHECK_OK(loom_copy_to_host(y, outs[form], sizeof outs[form]));
    }
  CHECK_MSG(calls[0] == calls[1] && calls[0] < B,
            "a [%d, %d, %d] linear made %llu BLAS calls, "
            "its [%d, %d] form %llu",
            B, T, C, (unsigned long long)calls[0], B * T, C, (unsigned long long)calls[1]);
  CHECK_MSG(memcmp(grads[0], grads[1], sizeof grads[0]) == 0, "the weight's gradients differ");
  CHECK_MSG(memcmp(outs[0], outs[1], sizeof outs[0]) == 0, "the outputs differ");
  CHECK_OK(loom_set_num_threads(threads));
}

/* Kernels launched to realize the n targets together; their values (as
 * doubles) into vals, at most `room` each. */
static uint64_t eval_counting(loom_tensor **t, int n, double *vals, int64_t room) {
  uint64_t before = loom_get_stats().kernels_launched;
  CHECK_OK(loom_eval(t, n));
  uint64_t launched = loom_get_stats().kernels_launched - before;
  for (int i = 0; i < n; i++) {
    loom_tensor *d = loom_cast(t[i], LOOM_F64);
    CHECK(loom_numel(d) <= room);
    CHECK_OK(loom_copy_to_host(d, vals + i * room, sizeof(double) * (size_t)loom_numel(d)));
    loom_free(d);
  }
  return launched;
}

/* Targets that one later kernel alone reads at its own points are stored by
 * that kernel (passes/multi_output.c): how many kernels each pattern takes
 * fused, and that every value is what the unfused kernels compute. */
static void test_more_outputs(void) {
  enum { R = 37, C = 29, N = R * C, MAXT = 7 };
  static double fused[MAXT * N], unfused[MAXT * N]; /* (smaller targets leave zeros) */
  for (int pattern = 0; pattern < 10; pattern++) {
    uint64_t launched[2] = {0, 0};
    memset(fused, 0, sizeof fused);
    memset(unfused, 0, sizeof unfused);
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
      loom_set_fusion(pass == 0);
      LOOM_SCOPE {
        loom_tensor *p = input(LOOM_SHAPE(R, C), 11), *g = input(LOOM_SHAPE(R, C), 12);
        loom_tensor *m = input(LOOM_SHAPE(R, C), 13), *v = loom_square(input(LOOM_SHAPE(R, C), 14));
        realized(p), realized(g), realized(m), realized(v);
        loom_tensor *t[MAXT];
        if (pattern == 0) { /* an Adam update: the moments, then the parameter reading them */
          t[0] = loom_add(loom_mul_s(m, 0.9), loom_mul_s(g, 0.1));
          t[1] = loom_add(loom_mul_s(v, 0.999), loom_mul_s(loom_square(g), 0.001));
          t[2] = loom_sub(p, loom_div(loom_mul_s(t[0], 0.01), loom_add_s(loom_sqrt(t[1]), 1e-8)));
          n = 3;
        } else if (pattern == 1) { /* a chain: each target read by the next alone */
          t[0] = loom_exp(loom_mul_s(p, 0.5));
          for (n = 1; n < 6; n++) t[n] = loom_add(loom_mul_s(t[n - 1], 0.7), g);
        } else if (pattern == 2) { /* read by two kernels: stored by its own */
          t[0] = loom_tanh(p);
          t[1] = loom_add(t[0], g);
          t[2] = loom_mul(t[0], m);
          n = 3;
        } else if (pattern == 3) { /* read transposed: not at the reader's own points */
          loom_tensor *sq = input(LOOM_SHAPE(C, C), 15);
          realized(sq);
          t[0] = loom_sin(loom_slice(p, 0, 0, C, 1));
          t[1] = loom_add(loom_transpose(t[0], 0, 1), sq);
          n = 2;
        } else if (pattern == 4) { /* read by a reduction */
          t[0] = loom_mul(p, g);
          t[1] = loom_sum(t[0], (int[]){1}, 1, true);
          n = 2;
        } else if (pattern == 5) { /* dtypes: a BF16 target and a boolean one */
          t[0] = loom_cast(loom_mul_s(p, 3), LOOM_BF16);
          t[1] = loom_gt(loom_cast(t[0], LOOM_F32), g);
          t[2] = loom_where(t[1], loom_mul_s(m, 2), g); /* (not an update of m in place) */
          n = 3;
        } else if (pattern == 6) { /* a random draw in the producer */
          loom_tensor *u = loom_rand_key(loom_key_new(16), LOOM_SHAPE(R, C), LOOM_F32, LOOM_CPU);
          t[0] = loom_mul(p, loom_lt_s(u, 0.5));
          t[1] = loom_add(t[0], g);
          n = 2;
        } else if (pattern == 7) { /* a broadcast reader: other points */
          loom_tensor *row = loom_slice(p, 0, 0, 1, 1);
          t[0] = loom_exp(row);
          t[1] = loom_mul(loom_expand(t[0], LOOM_SHAPE(R, C)), g);
          n = 2;
        } else if (pattern == 9) { /* a GEMM's epilogue takes in its reader (SGD momentum) */
          loom_tensor *x = input(LOOM_SHAPE(R, 23), 17), *w = input(LOOM_SHAPE(23, C), 18);
          realized(x), realized(w);
          t[0] = loom_add(loom_mul_s(m, 0.9), loom_matmul(x, w)); /* the new momentum */
          t[1] = loom_sub(p, loom_mul_s(t[0], 0.1));
          n = 2;
        } else { /* one producer's value read twice by one reader */
          t[0] = loom_log1p(loom_abs(p));
          t[1] = loom_mul(t[0], loom_add(t[0], g));
          n = 2;
        }
        launched[pass] = eval_counting(t, n, pass == 0 ? fused : unfused, N);
      }
    }
    loom_set_fusion(true);
    static const int want[10] = {1, 2, 3, 2, 2, 1, 1, 2, 1, 1};
    CHECK_MSG(launched[0] == (uint64_t)want[pattern], "pattern %d: %llu kernels fused, expected %d",
              pattern, (unsigned long long)launched[0], want[pattern]);
    CHECK_MSG(launched[1] >= (uint64_t)n, "pattern %d: %llu kernels unfused", pattern,
              (unsigned long long)launched[1]);
    for (int i = 0; i < n * N; i++)
      CHECK_MSG(fabs(fused[i] - unfused[i]) <= 1e-6 * fmax(1, fabs(unfused[i])) ||
                    (isnan(fused[i]) && isnan(unfused[i])),
                "pattern %d: value %d of target %d: %.9g fused, %.9g unfused", pattern, i % N,
                i / N, fused[i], unfused[i]);
  }
}

int main(void) {
  test_counts();
  test_more_outputs();
  test_folded_linear();
  test_unfused_counts();
  test_permuted_reduction();
  test_affine_view_loads();
  test_undone_reshape();
  test_matmul_of_reduced_target();
  test_matmul_epilogue();
  test_gemm_prologue();
  test_fused_matches_unfused();
  test_row_kernel_values();
  test_row_kernel_refusals();
  test_column_sums();
  test_shared_gemm_operand();
  test_wide_gemm();
  test_long_sum_gemm();
  test_deterministic_reductions();
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
