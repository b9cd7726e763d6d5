/* Shape-generic kernels (loom_set_dynamic): the kernel description's run-time
 * sizes, generalization, and the lazy API over sizes that change (batches, a
 * growing sequence), each size against values computed here in double, with
 * the compiles counted; on test_device() (CUDA's generic kernels with
 * LOOM_TEST_DEVICE=cuda: the dynamic_cuda_emulated test). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ir/kernel.h"
#include "loom.h"
#include "runtime/compile.h"
#include "scratch.h"
#include "test_device.h"

/* Kernels a backend built or the disk cache gave: what a new size costs. */
static uint64_t kernels_made(void) {
  loom_stats s = loom_get_stats();
  return s.kernels_compiled + s.disk_cache_hits;
}

static double wave(int64_t i, double f) { return sin(0.37 * (double)i * f + 0.1); }

/* ------------------------------------------------------------ the kernel description */

/* out[r, c] = x[r * C + c] * 2.5 + r over [R, C]: an extent, a stride and an
 * index that changes with the sizes. */
static lk_inst scaled_rows[] = {
    {LK_DIM, LOOM_I64, -1, -1, -1, -1, 0, 0},     {LK_DIM, LOOM_I64, -1, -1, -1, -1, 1, 0},
    {LK_CONST, LOOM_I64, -1, -1, -1, -1, 5, 0},   {LK_MUL, LOOM_I64, 0, 2, -1, -1, 0, 0},
    {LK_ADD, LOOM_I64, 3, 1, -1, -1, 0, 0},       {LK_LOAD, LOOM_F32, 4, -1, -1, 1, 0, 0},
    {LK_CONST, LOOM_F32, -1, -1, -1, -1, 0, 2.5}, {LK_MUL, LOOM_F32, 5, 6, -1, -1, 0, 0},
    {LK_CAST, LOOM_F32, 0, -1, -1, -1, 0, 0},     {LK_ADD, LOOM_F32, 7, 8, -1, -1, 0, 0},
};

static lk_kernel rows_kernel(int64_t R, int64_t C, lk_inst *inst) {
  memcpy(inst, scaled_rows, sizeof scaled_rows);
  inst[2].imm_i = C;
  return (lk_kernel){.ndim = 2,
                     .dom = {R, C},
                     .nouter = 2,
                     .out_dtype = LOOM_F32,
                     .nslots = 2,
                     .ninst = 10,
                     .nbody = 10,
                     .value = 9,
                     .result = 9,
                     .inst = inst};
}

static void test_generalize(void) {
  lk_inst ia[10], ib[10], ic[10];
  lk_kernel a = rows_kernel(3, 5, ia), b = rows_kernel(7, 11, ib), c = rows_kernel(7, 11, ic);
  c.inst[6].imm_f = 3.5; /* another computation (2.5 is no size: no integer) */
  CHECK(lk_kernel_shape_hash(&a).lo == lk_kernel_shape_hash(&b).lo);
  CHECK(lk_kernel_shape_hash(&a).hi == lk_kernel_shape_hash(&b).hi);
  CHECK(lk_kernel_shape_hash(&a).lo != lk_kernel_shape_hash(&c).lo);
  CHECK(lk_kernel_hash(&a).lo != lk_kernel_hash(&b).lo);
  CHECK_EQ_INT(lk_kernel_count_sizes(&a), 3); /* R, C and the stride */
  {
    lk_inst id[10];
    lk_kernel d = rows_kernel(3, 5, id);
    d.inst[6].imm_f = 2.0; /* an integer: a count, and so a size too */
    CHECK_EQ_INT(lk_kernel_count_sizes(&d), 4);
    d.inst[6].imm_f = -0.0; /* not a count: no integer gives -0 */
    CHECK_EQ_INT(lk_kernel_count_sizes(&d), 3);
  }
  int64_t sizes[3];
  lk_kernel_sizes(&b, sizes);
  CHECK_EQ_INT(sizes[0], 7);
  CHECK_EQ_INT(sizes[1], 11);
  CHECK_EQ_INT(sizes[2], 11);

  /* R and the stride C lifted; C's extent kept: a kernel for any R and row stride */
  unsigned char lift[3] = {1, 0, 1};
  lk_kernel g;
  int64_t values[3];
  lk_inst *ginst = lk_kernel_generalize(&a, lift, &g, values);
  CHECK(ginst != NULL);
  if (!ginst) return;
  CHECK(lk_kernel_is_generic(&g));
  CHECK(lk_kernel_check(&g) == NULL);
  CHECK_EQ_INT(g.nsizes, 2);
  CHECK_EQ_INT(g.nslots, 3);
  CHECK_EQ_INT(values[0], 3);
  CHECK_EQ_INT(values[1], 5);
  CHECK(lk_dim_is_sized(&g, 0) && !lk_dim_is_sized(&g, 1));
  CHECK(g.inst[2].op == LK_SIZE);

  /* run it over other row counts and strides: rows of 5 out of wider rows */
  lk_fn fn = NULL;
  lm_code *code = NULL;
  CHECK_OK(lm_kernel_function(&g, &fn, &code));
  for (int64_t R = 1; R <= 9 && fn; R += 4)
    for (int64_t stride = 5; stride <= 13; stride += 8) {
      float *x = malloc(sizeof(float) * (size_t)(R * stride)), out[9 * 5];
      for (int64_t i = 0; i < R * stride; i++) x[i] = (float)i;
      int64_t bound[2] = {R, stride};
      void *args[3] = {out, x, bound};
      fn(args, 0, R * 5);
      for (int64_t r = 0; r < R; r++)
        for (int64_t col = 0; col < 5; col++)
          CHECK_NEAR(out[r * 5 + col], (float)(r * stride + col) * 2.5f + (float)r, 0);
      free(x);
    }
  lm_code_release(code);

  /* LK_SIZE outside a generic kernel, a size index out of range */
  lk_kernel bad = a;
  lk_inst binst[10];
  memcpy(binst, ia, sizeof binst);
  bad.inst = binst;
  binst[2].op = LK_SIZE;
  binst[2].slot = 1;
  CHECK(lk_kernel_check(&bad) != NULL);
  g.inst[2].imm_i = 5;
  CHECK(lk_kernel_check(&g) != NULL);
  g.inst[2].imm_i = 1;
  g.dom_size[1] = 3;
  CHECK(lk_kernel_check(&g) != NULL);
  free(ginst);
}

/* out[r, j] = (r + 1) % q == 0 && j < 5 ? x[(r + 1) / q * 8 + j] : 0 over [8, 8],
 * the guarded load of a strided convolution's input gradient, with only the
 * divisor q lifted. In nn's conv gradient such a kernel crashed: LLVM 14's
 * vectorizer divided under the guard for the first lane only, leaving the
 * other lanes' address poison when that lane was masked off; guard.c now
 * computes the index before the branch (the nn_generic CTest runs that
 * gradient; this smaller kernel did not trip LLVM, but checks the values). */
static void test_guarded_division(void) {
  enum { R = 8, W = 8 };
  lk_inst inst[] = {
      {LK_DIM, LOOM_I64, -1, -1, -1, -1, 0, 0},   {LK_DIM, LOOM_I64, -1, -1, -1, -1, 1, 0},
      {LK_CONST, LOOM_I64, -1, -1, -1, -1, 1, 0}, {LK_ADD, LOOM_I64, 0, 2, -1, -1, 0, 0},
      {LK_CONST, LOOM_I64, -1, -1, -1, -1, 0, 0}, {LK_CONST, LOOM_I64, -1, -1, -1, -1, 2, 0},
      {LK_IMOD, LOOM_I64, 3, 5, -1, -1, 0, 0},    {LK_CMPLT, LOOM_BOOL, 6, 2, -1, -1, 0, 0},
      {LK_WHERE, LOOM_I64, 7, 3, 4, -1, 0, 0},    {LK_IDIV, LOOM_I64, 8, 5, -1, -1, 0, 0},
      {LK_CONST, LOOM_I64, -1, -1, -1, -1, 5, 0}, {LK_CMPLT, LOOM_BOOL, 1, 10, -1, -1, 0, 0},
      {LK_WHERE, LOOM_I64, 11, 1, 4, -1, 0, 0},   {LK_CONST, LOOM_I64, -1, -1, -1, -1, W, 0},
      {LK_MUL, LOOM_I64, 9, 13, -1, -1, 0, 0},    {LK_ADD, LOOM_I64, 14, 12, -1, -1, 0, 0},
      {LK_LOAD, LOOM_F64, 15, -1, -1, 1, 0, 0},   {LK_CONST, LOOM_F64, -1, -1, -1, -1, 0, 0},
      {LK_WHERE, LOOM_F64, 11, 16, 17, -1, 0, 0}, {LK_WHERE, LOOM_F64, 7, 18, 17, -1, 0, 0},
  };
  lk_kernel k = {.ndim = 2,
                 .dom = {R, W},
                 .nouter = 2,
                 .out_dtype = LOOM_F64,
                 .nslots = 2,
                 .ninst = 20,
                 .nbody = 20,
                 .value = 19,
                 .result = 19,
                 .inst = inst};
  CHECK(lk_kernel_check(&k) == NULL);
  int n = lk_kernel_count_sizes(&k); /* R, W, 1, 0, q, 5, W, 0.0 */
  CHECK_EQ_INT(n, 8);
  unsigned char lift[8] = {0, 0, 0, 0, 1, 0, 0, 0};
  lk_kernel g;
  int64_t values[8];
  lk_inst *ginst = lk_kernel_generalize(&k, lift, &g, values);
  lk_fn fn = NULL;
  lm_code *code = NULL;
  CHECK(ginst && lm_kernel_function(&g, &fn, &code) == LOOM_OK);
  double x[(R + 1) * W], out[R * W];
  for (int i = 0; i < (R + 1) * W; i++) x[i] = i + 1;
  for (int64_t q = 1; q <= 3 && fn; q++) {
    void *args[3] = {out, x, &q};
    fn(args, 0, R * W);
    for (int r = 0; r < R; r++)
      for (int j = 0; j < W; j++)
        CHECK_NEAR(out[r * W + j], (r + 1) % q == 0 && j < 5 ? x[(r + 1) / q * W + j] : 0, 0);
  }
  lm_code_release(code);
  free(ginst);
}

/* out[r, c] = x[r * S + c] + (c < B ? 1 : 0): with S == B value numbering
 * shares one constant; unshared, that kernel has the shape of any other S, B. */
static void test_unshare(void) {
  lk_inst shared[] = {
      {LK_DIM, LOOM_I64, -1, -1, -1, -1, 0, 0},   {LK_DIM, LOOM_I64, -1, -1, -1, -1, 1, 0},
      {LK_CONST, LOOM_I64, -1, -1, -1, -1, 8, 0}, {LK_MUL, LOOM_I64, 0, 2, -1, -1, 0, 0},
      {LK_ADD, LOOM_I64, 3, 1, -1, -1, 0, 0},     {LK_LOAD, LOOM_F32, 4, -1, -1, 1, 0, 0},
      {LK_CMPLT, LOOM_BOOL, 1, 2, -1, -1, 0, 0},  {LK_CAST, LOOM_F32, 6, -1, -1, -1, 0, 0},
      {LK_ADD, LOOM_F32, 5, 7, -1, -1, 0, 0},
  };
  lk_inst apart[] = {
      {LK_DIM, LOOM_I64, -1, -1, -1, -1, 0, 0},   {LK_DIM, LOOM_I64, -1, -1, -1, -1, 1, 0},
      {LK_CONST, LOOM_I64, -1, -1, -1, -1, 8, 0}, {LK_MUL, LOOM_I64, 0, 2, -1, -1, 0, 0},
      {LK_ADD, LOOM_I64, 3, 1, -1, -1, 0, 0},     {LK_LOAD, LOOM_F32, 4, -1, -1, 1, 0, 0},
      {LK_CONST, LOOM_I64, -1, -1, -1, -1, 6, 0}, {LK_CMPLT, LOOM_BOOL, 1, 6, -1, -1, 0, 0},
      {LK_CAST, LOOM_F32, 7, -1, -1, -1, 0, 0},   {LK_ADD, LOOM_F32, 5, 8, -1, -1, 0, 0},
  };
  lk_kernel a = {.ndim = 2,
                 .dom = {4, 8},
                 .nouter = 2,
                 .out_dtype = LOOM_F32,
                 .nslots = 2,
                 .ninst = 9,
                 .nbody = 9,
                 .value = 8,
                 .result = 8,
                 .inst = shared};
  lk_kernel b = a;
  b.inst = apart, b.ninst = b.nbody = 10, b.value = b.result = 9;
  CHECK(lk_kernel_check(&a) == NULL && lk_kernel_check(&b) == NULL);
  CHECK(lk_kernel_shape_hash(&a).lo != lk_kernel_shape_hash(&b).lo);
  lk_kernel ua, ub;
  lk_inst *ia = lk_kernel_unshare_sizes(&a, &ua), *ib = lk_kernel_unshare_sizes(&b, &ub);
  CHECK(ia && ib);
  if (!ia || !ib) return;
  CHECK(lk_kernel_check(&ua) == NULL && lk_kernel_check(&ub) == NULL);
  CHECK_EQ_INT(ua.ninst, 10);
  CHECK(lk_kernel_shape_hash(&ua).lo == lk_kernel_shape_hash(&ub).lo);
  CHECK(lk_kernel_shape_hash(&ua).hi == lk_kernel_shape_hash(&ub).hi);
  /* the same values as the shared form */
  lk_fn f1 = NULL, f2 = NULL;
  lm_code *c1 = NULL, *c2 = NULL;
  CHECK_OK(lm_kernel_function(&a, &f1, &c1));
  CHECK_OK(lm_kernel_function(&ua, &f2, &c2));
  float x[32], o1[32], o2[32];
  for (int i = 0; i < 32; i++) x[i] = (float)i;
  void *args1[2] = {o1, x}, *args2[2] = {o2, x};
  if (f1 && f2) {
    f1(args1, 0, 32);
    f2(args2, 0, 32);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
  }
  lm_code_release(c1);
  lm_code_release(c2);
  free(ia);
  free(ib);
}

/* ------------------------------------------------------------ the option */

static void test_option(void) {
  loom_dynamic was = loom_dynamic_mode();
  CHECK_RC(loom_set_dynamic((loom_dynamic)7), LOOM_ERR_VALUE);
  CHECK_STR_CONTAINS(loom_last_error(), "loom_set_dynamic: 7");
  CHECK_OK(loom_set_dynamic(LOOM_DYNAMIC_OFF));
  CHECK(loom_dynamic_mode() == LOOM_DYNAMIC_OFF);
  CHECK_OK(loom_set_dynamic(was));
}

/* ------------------------------------------------------------ an MLP over batch sizes */

enum { IN = 24, HID = 40, OUT = 10 };

/* softmax(relu(x @ w1 + b1) @ w2 + b2) for a batch; true when it matches the
 * same computed here in double. */
static bool mlp_batch(int batch, loom_tensor *w1, loom_tensor *b1, loom_tensor *w2, loom_tensor *b2,
                      const float *hw1, const float *hb1, const float *hw2, const float *hb2) {
  bool ok = true;
  LOOM_SCOPE {
    float *x = malloc(sizeof(float) * (size_t)(batch * IN));
    float *got = malloc(sizeof(float) * (size_t)(batch * OUT));
    for (int i = 0; i < batch * IN; i++) x[i] = (float)wave(i, 1.0);
    loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(batch, IN), LOOM_F32, test_device());
    loom_tensor *h = loom_relu(loom_add(loom_matmul(tx, w1), b1));
    loom_tensor *y = loom_softmax(loom_add(loom_matmul(h, w2), b2), -1);
    CHECK_OK(loom_copy_to_host(y, got, sizeof(float) * (size_t)(batch * OUT)));
    for (int r = 0; r < batch; r++) {
      double hid[HID], logit[OUT], m = -INFINITY, s = 0;
      for (int j = 0; j < HID; j++) {
        double acc = hb1[j];
        for (int i = 0; i < IN; i++) acc += (double)x[r * IN + i] * hw1[i * HID + j];
        hid[j] = acc > 0 ? acc : 0;
      }
      for (int j = 0; j < OUT; j++) {
        double acc = hb2[j];
        for (int i = 0; i < HID; i++) acc += hid[i] * hw2[i * OUT + j];
        logit[j] = acc;
        m = fmax(m, acc);
      }
      for (int j = 0; j < OUT; j++) s += exp(logit[j] - m);
      for (int j = 0; j < OUT; j++) {
        double want = exp(logit[j] - m) / s;
        if (fabs(got[r * OUT + j] - want) > 1e-5) {
          CHECK_NEAR(got[r * OUT + j], want, 1e-5);
          ok = false;
        }
      }
    }
    free(x);
    free(got);
  }
  return ok;
}

/* A lazy graph over sizes that change is a family (runtime/realize.c): on
 * every device, with AUTO, it plans at most two graphs (the first size's, and the
 * family's symbolic program at the second size other than 1); the sizes
 * after come from the program's plan template (a few planned to check its
 * box, and sizes of 1 planned alone), at least `instances` of them. */
static void check_family(const loom_stats *s0, const loom_stats *s1, int instances) {
  if (loom_dynamic_mode() != LOOM_DYNAMIC_AUTO) return;
  uint64_t planned = s1->program_sizes_planned - s0->program_sizes_planned;
  CHECK_MSG(s1->graphs_compiled - s0->graphs_compiled <= 2, "%llu graphs planned",
            (unsigned long long)(s1->graphs_compiled - s0->graphs_compiled));
  CHECK_MSG(planned <= 12, "%llu sizes planned", (unsigned long long)planned);
  CHECK_MSG(
      s1->program_sizes_from_template - s0->program_sizes_from_template >= (uint64_t)instances,
      "%llu sizes from the template",
      (unsigned long long)(s1->program_sizes_from_template - s0->program_sizes_from_template));
}

static void test_mlp_batches(void) {
  float hw1[IN * HID], hb1[HID], hw2[HID * OUT], hb2[OUT];
  for (int i = 0; i < IN * HID; i++) hw1[i] = (float)(0.3 * wave(i, 2.1));
  for (int i = 0; i < HID; i++) hb1[i] = (float)(0.1 * wave(i, 3.3));
  for (int i = 0; i < HID * OUT; i++) hw2[i] = (float)(0.3 * wave(i, 1.7));
  for (int i = 0; i < OUT; i++) hb2[i] = (float)(0.1 * wave(i, 0.9));
  LOOM_SCOPE {
    loom_tensor *w1 = loom_from_data(hw1, LOOM_SHAPE(IN, HID), LOOM_F32, test_device());
    loom_tensor *b1 = loom_from_data(hb1, LOOM_SHAPE(HID), LOOM_F32, test_device());
    loom_tensor *w2 = loom_from_data(hw2, LOOM_SHAPE(HID, OUT), LOOM_F32, test_device());
    loom_tensor *b2 = loom_from_data(hb2, LOOM_SHAPE(OUT), LOOM_F32, test_device());
    uint64_t before = kernels_made();
    CHECK(mlp_batch(16, w1, b1, w2, b2, hw1, hb1, hw2, hb2));
    uint64_t one = kernels_made() - before;
    loom_stats s0 = loom_get_stats();
    before = kernels_made();
    for (int batch = 1; batch <= 48; batch++) {
      check_set_ctx("batch %d", batch);
      if (!mlp_batch(batch, w1, b1, w2, b2, hw1, hb1, hw2, hb2)) break;
    }
    check_set_ctx(" ");
    uint64_t all = kernels_made() - before;
    loom_stats s1 = loom_get_stats();
    printf("  MLP forward: %llu kernels for batch 16, %llu more for batches 1..48 (%llu generic "
           "kernel steps); %llu graphs planned, %llu sizes planned for the family, %llu from its "
           "template\n",
           (unsigned long long)one, (unsigned long long)all,
           (unsigned long long)(s1.generic_kernel_uses - s0.generic_kernel_uses),
           (unsigned long long)(s1.graphs_compiled - s0.graphs_compiled),
           (unsigned long long)(s1.program_sizes_planned - s0.program_sizes_planned),
           (unsigned long long)(s1.program_sizes_from_template - s0.program_sizes_from_template));
    CHECK(one > 0);
    CHECK(all <= 2 * one);
    CHECK(s1.generic_kernel_uses > s0.generic_kernel_uses);
    check_family(&s0, &s1, 45); /* batches 3..48 but 16 */
    /* again: every graph is known (a planned one, or a member of its family) */
    for (int batch = 1; batch <= 48; batch++) {
      check_set_ctx("again, batch %d", batch);
      if (!mlp_batch(batch, w1, b1, w2, b2, hw1, hb1, hw2, hb2)) break;
    }
    check_set_ctx(" ");
    loom_stats s2 = loom_get_stats();
    CHECK(s2.graphs_compiled == s1.graphs_compiled);
    CHECK(s2.program_sizes_planned == s1.program_sizes_planned);
    CHECK(s2.program_sizes_from_template == s1.program_sizes_from_template);
    CHECK(s2.kernels_compiled == s1.kernels_compiled);
    CHECK(s2.graph_cache_hits - s1.graph_cache_hits >= 48);
  }
}

/* ------------------------------------------------------------ a growing sequence */

/* One step of causal self-attention over T positions of width D and a layer
 * norm, as a decoder runs it on its whole prefix: true when it matches. */
static bool attend_prefix(int T) {
  enum { D = 16 };
  bool ok = true;
  LOOM_SCOPE {
    float *x = malloc(sizeof(float) * (size_t)(T * D)),
          *got = malloc(sizeof(float) * (size_t)(T * D));
    for (int i = 0; i < T * D; i++) x[i] = (float)wave(i, 0.7);
    loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(T, D), LOOM_F32, test_device());
    loom_tensor *n = loom_layer_norm(tx, 1, NULL, NULL, 1e-5);
    loom_tensor *scores = loom_mul_s(loom_matmul(n, loom_transpose(n, 0, 1)), 0.25);
    loom_tensor *p = loom_softmax(loom_tril(scores, 0), -1); /* zeros above: still weighs them */
    loom_tensor *y = loom_add(loom_matmul(p, n), tx);
    CHECK_OK(loom_copy_to_host(y, got, sizeof(float) * (size_t)(T * D)));
    double *nd = malloc(sizeof(double) * (size_t)(T * D));
    for (int t = 0; t < T; t++) {
      double mean = 0, var = 0;
      for (int j = 0; j < D; j++) mean += x[t * D + j];
      mean /= D;
      for (int j = 0; j < D; j++) var += (x[t * D + j] - mean) * (x[t * D + j] - mean);
      var /= D;
      for (int j = 0; j < D; j++) nd[t * D + j] = (x[t * D + j] - mean) / sqrt(var + 1e-5);
    }
    for (int t = 0; t < T && ok; t++) {
      double *w = malloc(sizeof(double) * (size_t)T), m = -INFINITY, s = 0;
      for (int u = 0; u < T; u++) {
        double dot = 0;
        for (int j = 0; j < D; j++) dot += nd[t * D + j] * nd[u * D + j];
        w[u] = u <= t ? dot * 0.25 : 0;
        m = fmax(m, w[u]);
      }
      for (int u = 0; u < T; u++) s += exp(w[u] - m);
      for (int j = 0; j < D && ok; j++) {
        double acc = x[t * D + j];
        for (int u = 0; u < T; u++) acc += exp(w[u] - m) / s * nd[u * D + j];
        if (fabs(got[t * D + j] - acc) > 1e-4) {
          CHECK_NEAR(got[t * D + j], acc, 1e-4);
          ok = false;
        }
      }
      free(w);
    }
    free(nd);
    free(x);
    free(got);
  }
  return ok;
}

static void test_growing_sequence(void) {
  uint64_t before = kernels_made();
  CHECK(attend_prefix(9));
  uint64_t one = kernels_made() - before;
  loom_stats s0 = loom_get_stats();
  /* T = 1 is a different computation (a [1, 1] product broadcasts): its own kernels */
  CHECK(attend_prefix(1));
  before = kernels_made();
  int T = 2;
  for (; T <= 40; T++) {
    check_set_ctx("T %d", T);
    uint64_t b0 = kernels_made();
    if (!attend_prefix(T)) break;
    if (getenv("DYN_VERBOSE")) printf("T %d: %llu\n", T, (unsigned long long)(kernels_made() - b0));
  }
  check_set_ctx(" ");
  uint64_t all = kernels_made() - before;
  loom_stats s1 = loom_get_stats();
  printf("  causal attention prefix: %llu kernels for T 9, %llu more for T 1..40; %llu graphs "
         "planned, %llu sizes planned for the family, %llu from its template\n",
         (unsigned long long)one, (unsigned long long)all,
         (unsigned long long)(s1.graphs_compiled - s0.graphs_compiled),
         (unsigned long long)(s1.program_sizes_planned - s0.program_sizes_planned),
         (unsigned long long)(s1.program_sizes_from_template - s0.program_sizes_from_template));
  CHECK(all <= 2 * one);
  check_family(&s0, &s1, 37); /* T 3..40 but 9 */
}

/* ------------------------------------------------------------ sizes through slices */

/* The last row of attention over the first T rows of a fixed tensor, as a
 * decoder written without symbols records it: x = X[:T] (a slice of a fixed
 * leaf), its last row y[T-1:T] (a bound given as a number), a scale 1/8. Two
 * traces show the slice's length is the size and the bound keeps its
 * distance from the end, so the family covers every T: 2 graphs planned. */
static void test_lazy_slices(void) {
  enum { R = 64, D = 8 };
  float hx[R * D];
  for (int i = 0; i < R * D; i++) hx[i] = (float)wave(i, 0.9);
  loom_tensor *X = loom_from_data(hx, LOOM_SHAPE(R, D), LOOM_F32, test_device());
  loom_stats s0 = loom_get_stats();
  for (int T = 4; T <= 40; T++) {
    check_set_ctx("T %d", T);
    float got[D];
    LOOM_SCOPE {
      loom_tensor *x = loom_slice(X, 0, 0, T, 1);
      loom_tensor *p = loom_softmax(loom_mul_s(loom_matmul(x, loom_transpose(x, 0, 1)), 0.125), -1);
      loom_tensor *last = loom_slice(loom_matmul(p, x), 0, T - 1, T, 1);
      CHECK_OK(loom_copy_to_host(last, got, sizeof got));
    }
    double w[R], m = -INFINITY, sum = 0;
    for (int u = 0; u < T; u++) {
      w[u] = 0;
      for (int j = 0; j < D; j++) w[u] += (double)hx[(T - 1) * D + j] * hx[u * D + j];
      w[u] *= 0.125;
      m = fmax(m, w[u]);
    }
    for (int u = 0; u < T; u++) sum += exp(w[u] - m);
    for (int j = 0; j < D; j++) {
      double want = 0;
      for (int u = 0; u < T; u++) want += exp(w[u] - m) / sum * hx[u * D + j];
      CHECK_NEAR(got[j], want, 1e-5);
    }
  }
  check_set_ctx(" ");
  loom_stats s1 = loom_get_stats();
  printf("  last row over a growing slice: %llu graphs planned, %llu sizes planned for the family, "
         "%llu from its template\n",
         (unsigned long long)(s1.graphs_compiled - s0.graphs_compiled),
         (unsigned long long)(s1.program_sizes_planned - s0.program_sizes_planned),
         (unsigned long long)(s1.program_sizes_from_template - s0.program_sizes_from_template));
  check_family(&s0, &s1, 35); /* T 6..40 */
  loom_free(X);
}

/* ------------------------------------------------------------ reductions over a changing dim */

/* Sums and means over the batch (a bias gradient's), argmax along a row that
 * grows, and a cache grown by cat: each size against the loops here. */
static void test_changing_reductions(void) {
  enum { C = 12 };
  uint64_t before = 0;
  for (int n = 1; n <= 70; n += (n < 8 ? 1 : 9)) {
    if (n == 3) before = kernels_made();
    check_set_ctx("n %d", n);
    uint64_t b0 = kernels_made();
    LOOM_SCOPE {
      double *x = malloc(sizeof(double) * (size_t)(n * C));
      for (int i = 0; i < n * C; i++) x[i] = wave(i, 1.3);
      loom_tensor *t = loom_from_data(x, LOOM_SHAPE(n, C), LOOM_F64, test_device());
      double col_sum[C], col_mean[C];
      int axis0 = 0;
      CHECK_OK(loom_copy_to_host(loom_sum(t, &axis0, 1, false), col_sum, sizeof col_sum));
      CHECK_OK(loom_copy_to_host(loom_mean(t, &axis0, 1, false), col_mean, sizeof col_mean));
      for (int c = 0; c < C; c++) {
        double s = 0;
        for (int r = 0; r < n; r++) s += x[r * C + c];
        CHECK_NEAR(col_sum[c], s, 1e-12);
        CHECK_NEAR(col_mean[c], s / n, 1e-12);
      }
      /* a row of n: the argmax of its transpose */
      int64_t *am = malloc(sizeof(int64_t) * C);
      CHECK_OK(loom_copy_to_host(loom_argmax(loom_transpose(t, 0, 1), 1, false), am,
                                 sizeof(int64_t) * C));
      for (int c = 0; c < C; c++) {
        int best = 0;
        for (int r = 1; r < n; r++)
          if (x[r * C + c] > x[best * C + c]) best = r;
        CHECK_EQ_INT(am[c], best);
      }
      /* the cache one row longer */
      loom_tensor *row = loom_full(LOOM_SHAPE(1, C), 0.5, LOOM_F64, test_device());
      loom_tensor *parts[2] = {t, row};
      double *grown = malloc(sizeof(double) * (size_t)((n + 1) * C));
      CHECK_OK(loom_copy_to_host(loom_mul_s(loom_cat(parts, 2, 0), 2.0), grown,
                                 sizeof(double) * (size_t)((n + 1) * C)));
      for (int i = 0; i < (n + 1) * C; i++) CHECK_NEAR(grown[i], i < n * C ? 2 * x[i] : 1.0, 0);
      free(grown);
      free(am);
      free(x);
    }
    if (getenv("DYN_VERBOSE")) printf("n %d: %llu\n", n, (unsigned long long)(kernels_made() - b0));
  }
  check_set_ctx(" ");
  printf("  reductions over 1..70 rows: %llu kernels after the first two sizes\n",
         (unsigned long long)(kernels_made() - before));
}

/* ------------------------------------------------------------ convolutions over image sizes */

/* A strided, padded convolution and its input gradient over images of
 * several sizes: im2col's padded windows and the gradient's stride are guarded
 * loads whose bounds and divisors become run-time sizes. */
static bool conv_size(int H, int W) {
  enum { N = 2, C = 2, O = 3, K = 3 };
  int OH = (H + 2 - K) / 2 + 1, OW = (W + 2 - K) / 2 + 1;
  bool ok = true;
  LOOM_SCOPE {
    double *x = malloc(sizeof(double) * (size_t)(N * C * H * W));
    double *gx = malloc(sizeof(double) * (size_t)(N * C * H * W));
    double *want_gx = calloc((size_t)(N * C * H * W), sizeof(double));
    double *y = malloc(sizeof(double) * (size_t)(N * O * OH * OW));
    double *got_y = malloc(sizeof(double) * (size_t)(N * O * OH * OW));
    double w[O * C * K * K];
    for (int i = 0; i < N * C * H * W; i++) x[i] = wave(i, 0.9);
    for (int i = 0; i < O * C * K * K; i++) w[i] = 0.5 * wave(i, 1.9);
    loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(N, C, H, W), LOOM_F64, test_device());
    loom_tensor *tw = loom_from_data(w, LOOM_SHAPE(O, C, K, K), LOOM_F64, test_device());
    CHECK_OK(loom_set_requires_grad(tx, true));
    loom_tensor *ty = loom_conv2d_f(tx, tw, NULL, (loom_conv2d_opts){{2, 2}, {1, 1}, {1, 1}, 1});
    CHECK_OK(loom_backward(loom_sum_all(loom_mul(ty, ty))));
    CHECK_OK(loom_copy_to_host(ty, got_y, sizeof(double) * (size_t)(N * O * OH * OW)));
    CHECK_OK(loom_copy_to_host(loom_grad(tx), gx, sizeof(double) * (size_t)(N * C * H * W)));
    for (int n = 0; n < N; n++)
      for (int o = 0; o < O; o++)
        for (int i = 0; i < OH; i++)
          for (int j = 0; j < OW; j++) {
            double acc = 0;
            for (int c = 0; c < C; c++)
              for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++) {
                  int h = 2 * i + kh - 1, v = 2 * j + kw - 1;
                  if (h >= 0 && h < H && v >= 0 && v < W)
                    acc += x[((n * C + c) * H + h) * W + v] * w[((o * C + c) * K + kh) * K + kw];
                }
            y[((n * O + o) * OH + i) * OW + j] = acc;
            for (int c = 0; c < C; c++)
              for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++) {
                  int h = 2 * i + kh - 1, v = 2 * j + kw - 1;
                  if (h >= 0 && h < H && v >= 0 && v < W)
                    want_gx[((n * C + c) * H + h) * W + v] +=
                        2 * acc * w[((o * C + c) * K + kh) * K + kw];
                }
          }
    for (int i = 0; i < N * O * OH * OW && ok; i++)
      if (fabs(got_y[i] - y[i]) > 1e-12) {
        CHECK_NEAR(got_y[i], y[i], 1e-12);
        ok = false;
      }
    for (int i = 0; i < N * C * H * W && ok; i++)
      if (fabs(gx[i] - want_gx[i]) > 1e-11) {
        CHECK_NEAR(gx[i], want_gx[i], 1e-11);
        ok = false;
      }
    free(x), free(gx), free(want_gx), free(y), free(got_y);
  }
  return ok;
}

static void test_conv_sizes(void) {
  const int sizes[][2] = {{5, 6}, {7, 7}, {8, 5}, {11, 13}, {6, 9}, {16, 16}, {3, 4}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    check_set_ctx("conv %dx%d", sizes[i][0], sizes[i][1]);
    if (!conv_size(sizes[i][0], sizes[i][1])) break;
  }
  check_set_ctx(" ");
}

/* ------------------------------------------------------------ a KV cache grown by cat */

/* Decoding the natural way: one attention head whose keys and values grow by
 * one row a token (loom_cat), each token's output against the whole prefix
 * computed here; the cache's new length every token compiles nothing once the
 * generic kernels exist: by the sixth token (the first lengths compile a
 * specialized kernel, the shape-generic one and, for each graph's family,
 * the kernels over all sizes its plan template runs). */
static void test_kv_cache_by_cat(void) {
  enum { D = 16, STEPS = 24 };
  float wq[D * D], wk[D * D], wv[D * D], xs[STEPS * D];
  for (int i = 0; i < D * D; i++) {
    wq[i] = (float)(0.3 * wave(i, 1.1));
    wk[i] = (float)(0.3 * wave(i, 1.7));
    wv[i] = (float)(0.3 * wave(i, 2.3));
  }
  for (int i = 0; i < STEPS * D; i++) xs[i] = (float)wave(i, 0.45);
  loom_device dev = test_device();
  loom_tensor *tq = loom_from_data(wq, LOOM_SHAPE(D, D), LOOM_F32, dev);
  loom_tensor *tk = loom_from_data(wk, LOOM_SHAPE(D, D), LOOM_F32, dev);
  loom_tensor *tv = loom_from_data(wv, LOOM_SHAPE(D, D), LOOM_F32, dev);
  loom_tensor *keys = NULL, *values = NULL; /* [t, D], realized, outside any scope */
  uint64_t before = 0;
  for (int t = 0; t < STEPS; t++) {
    if (t == 6) before = kernels_made();
    float y[D];
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(xs + t * D, LOOM_SHAPE(1, D), LOOM_F32, dev);
      loom_tensor *k = loom_matmul(x, tk), *v = loom_matmul(x, tv);
      loom_tensor *kparts[2] = {keys, k}, *vparts[2] = {values, v};
      loom_tensor *nk = keys ? loom_cat(kparts, 2, 0) : k,
                  *nv = values ? loom_cat(vparts, 2, 0) : v;
      loom_tensor *scores =
          loom_mul_s(loom_matmul(loom_matmul(x, tq), loom_transpose(nk, 0, 1)), 0.25);
      CHECK_OK(loom_copy_to_host(loom_matmul(loom_softmax(scores, -1), nv), y, sizeof y));
      CHECK_OK(loom_realize(nk));
      CHECK_OK(loom_realize(nv));
      loom_free(keys), loom_free(values);
      keys = loom_keep(loom_retain(nk)), values = loom_keep(loom_retain(nv));
    }
    /* the reference over the whole prefix */
    double q[D], w[STEPS], m = -INFINITY, s = 0;
    for (int j = 0; j < D; j++) {
      q[j] = 0;
      for (int i = 0; i < D; i++) q[j] += (double)xs[t * D + i] * wq[i * D + j];
    }
    double kk[STEPS][D], vv[STEPS][D];
    for (int u = 0; u <= t; u++)
      for (int j = 0; j < D; j++) {
        kk[u][j] = vv[u][j] = 0;
        for (int i = 0; i < D; i++) {
          kk[u][j] += (double)xs[u * D + i] * wk[i * D + j];
          vv[u][j] += (double)xs[u * D + i] * wv[i * D + j];
        }
      }
    for (int u = 0; u <= t; u++) {
      w[u] = 0;
      for (int j = 0; j < D; j++) w[u] += q[j] * kk[u][j];
      w[u] *= 0.25;
      m = fmax(m, w[u]);
    }
    for (int u = 0; u <= t; u++) s += exp(w[u] - m);
    for (int j = 0; j < D; j++) {
      double want = 0;
      for (int u = 0; u <= t; u++) want += exp(w[u] - m) / s * vv[u][j];
      CHECK_NEAR(y[j], want, 1e-4);
    }
  }
  printf("  KV cache grown by cat over 24 tokens: %llu kernels after the sixth\n",
         (unsigned long long)(kernels_made() - before));
  CHECK(kernels_made() - before == 0);
  loom_free(keys), loom_free(values), loom_free(tq), loom_free(tk), loom_free(tv);
}

/* ------------------------------------------------------------ across processes */

/* A child (--child): softmax rows over 3, 5 and 7 rows, each checked; prints
 * "<compiled> <from disk> <ok>". */
static int child_sizes(void) {
  int ok = 1;
  for (int n = 3; n <= 7; n += 2) LOOM_SCOPE {
      double x[7 * 9], got[7 * 9];
      for (int i = 0; i < n * 9; i++) x[i] = wave(i, 0.5);
      loom_tensor *t = loom_from_data(x, LOOM_SHAPE(n, 9), LOOM_F64, LOOM_CPU);
      ok &= loom_copy_to_host(loom_softmax(loom_mul_s(t, 3.0), 1), got,
                              sizeof(double) * (size_t)(n * 9)) == LOOM_OK;
      for (int r = 0; r < n; r++) {
        double m = -INFINITY, sum = 0;
        for (int c = 0; c < 9; c++) m = fmax(m, 3 * x[r * 9 + c]);
        for (int c = 0; c < 9; c++) sum += exp(3 * x[r * 9 + c] - m);
        for (int c = 0; c < 9; c++)
          ok &= fabs(got[r * 9 + c] - exp(3 * x[r * 9 + c] - m) / sum) < 1e-12;
      }
    }
  loom_stats s = loom_get_stats();
  printf("%llu %llu %d\n", (unsigned long long)s.kernels_compiled,
         (unsigned long long)s.disk_cache_hits, ok);
  return 0;
}

/* The disk cache keeps generic kernels like any other: a second process over
 * the same sizes compiles nothing (its first size's kernel and the generic one
 * from disk). */
static void test_across_processes(void) {
  char self[4096], base[] = "/tmp/loom-dynamic-XXXXXX", cmd[8500];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0 && mkdtemp(base) != NULL);
  if (n <= 0) return;
  self[n] = 0;
  unsigned long long compiled[2] = {0, 0}, disk[2] = {0, 0};
  int ok[2] = {0, 0};
  for (int run = 0; run < 2; run++) {
    snprintf(cmd, sizeof cmd,
             "LOOM_CACHE_DIR='%s/cache' LOOM_DYNAMIC=auto timeout 120 '%s' --child", base, self);
    FILE *p = popen(cmd, "r");
    if (!p || fscanf(p, "%llu %llu %d", &compiled[run], &disk[run], &ok[run]) != 3) ok[run] = 0;
    if (p) pclose(p);
  }
  CHECK_MSG(ok[0] && ok[1], "children: %d %d", ok[0], ok[1]);
  CHECK_MSG(compiled[0] >= 2 && disk[0] == 0, "first child: %llu compiled, %llu from disk",
            compiled[0], disk[0]);
  CHECK_MSG(compiled[1] == 0 && disk[1] == compiled[0],
            "second child: %llu compiled, %llu from disk (the first compiled %llu)", compiled[1],
            disk[1], compiled[0]);
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/cache", base);
  check_remove_dir(dir);
  check_remove_dir(base);
}

/* ------------------------------------------------------------ threads */

/* Threads over the same shapes in opposite orders: the shapes table is shared
 * and the kernels compile at once; every value against the loop here. */
typedef struct thread_job {
  int first, step, failures;
} thread_job;

static void *rows_over_sizes(void *arg) {
  thread_job *j = arg;
  for (int i = 0, n = j->first; i < 12; i++, n += j->step) {
    LOOM_SCOPE {
      double x[40 * 7], got[40];
      for (int k = 0; k < n * 7; k++) x[k] = wave(k, 0.3 * n);
      loom_tensor *t = loom_from_data(x, LOOM_SHAPE(n, 7), LOOM_F64, test_device());
      int last = 1;
      loom_tensor *r = loom_sum(loom_mul(loom_softmax(t, 1), t), &last, 1, false);
      if (loom_copy_to_host(r, got, sizeof(double) * (size_t)n) != LOOM_OK) j->failures++;
      j->failures += check_softmax_dot_rows(x, n, 7, got);
    }
  }
  return NULL;
}

static void test_threads(void) {
  thread_job up = {3, 3, 0}, down = {36, -3, 0};
  pthread_t a, b;
  CHECK(pthread_create(&a, NULL, rows_over_sizes, &up) == 0);
  CHECK(pthread_create(&b, NULL, rows_over_sizes, &down) == 0);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  CHECK_EQ_INT(up.failures, 0);
  CHECK_EQ_INT(down.failures, 0);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_sizes();
  CHECK_OK(loom_set_dynamic(LOOM_DYNAMIC_AUTO)); /* the counts below are AUTO's */
  test_generalize();
  test_guarded_division();
  test_unshare();
  test_option();
  test_mlp_batches();
  test_growing_sequence();
  test_lazy_slices();
  test_changing_reductions();
  test_conv_sizes();
  test_kv_cache_by_cat();
  test_threads();
  if (test_device().type == LOOM_DEVICE_CPU) test_across_processes();
  return check_report();
}
