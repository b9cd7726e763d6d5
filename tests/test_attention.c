/* Attention (frontend/attention.c), split and chunk (frontend/movement.c)
 * beyond the PyTorch fixtures (tests/test_nn_fixtures.c): split and chunk as
 * torch counts their pieces, attention on a larger case against a
 * double-precision reference (causal, grouped heads, a padding mask), on the
 * test device, its gradients by finite differences, and its scores' mask
 * and softmax fused; the fused attention kernel (runtime/attention_cpu.c) and
 * the composition each against the reference over lengths, head sizes, masks
 * and views. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gradcheck.h"
#include "loom.h"
#include "test_device.h"

static loom_tensor *arange_f(int64_t n, loom_shape shape) {
  loom_tensor *a = loom_arange(0, (double)n, 1, LOOM_F32, test_device());
  return loom_reshape(a, shape);
}

/* torch.split / torch.chunk: the number of pieces, their lengths and values. */
static void test_split_chunk(void) {
  LOOM_SCOPE {
    loom_tensor *x = arange_f(14, LOOM_SHAPE(2, 7)), *p[8] = {0};
    int n = -1;
    CHECK_OK(loom_split(x, 3, 1, p, 8, &n));
    CHECK_EQ_INT(n, 3); /* 3 + 3 + 1 */
    int64_t want_len[3] = {3, 3, 1};
    for (int i = 0; i < n; i++) {
      CHECK_EQ_INT(loom_shape_of(p[i]).dim[1], want_len[i]);
      float v[6] = {0};
      CHECK_OK(loom_copy_to_host(loom_contiguous(p[i]), v, sizeof(float) * 2 * want_len[i]));
      for (int64_t r = 0; r < 2; r++)
        for (int64_t c = 0; c < want_len[i]; c++)
          CHECK_NEAR(v[r * want_len[i] + c], r * 7 + 3 * i + c, 0);
    }
    CHECK_OK(loom_chunk(x, 4, -1, p, &n));
    CHECK_EQ_INT(n, 4); /* ceil(7 / 4) = 2: 2 + 2 + 2 + 1 */
    CHECK_EQ_INT(loom_shape_of(p[3]).dim[1], 1);
    CHECK_OK(loom_chunk(x, 6, 1, p, &n));
    CHECK_EQ_INT(n, 4); /* ceil(7 / 6) = 2: only 4 chunks, as torch.chunk */
    CHECK_OK(loom_chunk(x, 2, 0, p, &n));
    CHECK_EQ_INT(n, 2);
    CHECK_NEAR(loom_item(loom_sum_all(p[1])), 7 * 7 + 21, 0); /* 7..13 */
    CHECK_OK(loom_split(x, 100, 1, p, 1, &n));
    CHECK_EQ_INT(n, 1);
    loom_tensor *empty = loom_zeros(LOOM_SHAPE(0, 3), LOOM_F32, test_device());
    CHECK_OK(loom_split(empty, 2, 0, p, 8, &n));
    CHECK_EQ_INT(n, 1); /* one empty piece, as torch */
    CHECK_EQ_INT(loom_shape_of(p[0]).dim[0], 0);
    /* the pieces' gradients reach the whole */
    loom_tensor *w = loom_ones(LOOM_SHAPE(2, 7), LOOM_F32, test_device());
    CHECK_OK(loom_set_requires_grad(w, true));
    CHECK_OK(loom_chunk(w, 3, 1, p, &n));
    loom_tensor *loss = loom_add(loom_sum_all(p[0]), loom_mul_s(loom_sum_all(p[2]), 3));
    CHECK_OK(loom_backward(loss));
    float g[14];
    CHECK_OK(loom_copy_to_host(loom_grad(w), g, sizeof g));
    for (int c = 0; c < 7; c++) CHECK_NEAR(g[c], c < 3 ? 1 : c < 6 ? 0 : 3, 0);
  }
}

/* out[b][h][i] = softmax_j(q_i . k_j * scale, masked) @ v, in doubles: heads
 * h use key/value head h / (H / HKV); causal keeps j <= i; keep (may be
 * NULL) is [B][TK]: a padding mask, true to attend. */
static void reference(const float *q, const float *k, const float *v, int B, int H, int HKV, int TQ,
                      int TK, int D, bool causal, const bool *keep, double *out) {
  double scale = 1 / sqrt((double)D), *s = malloc(sizeof(double) * (size_t)TK);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      int hk = h / (H / HKV);
      const float *qh = q + ((size_t)(b * H + h) * TQ) * D;
      const float *kh = k + ((size_t)(b * HKV + hk) * TK) * D;
      const float *vh = v + ((size_t)(b * HKV + hk) * TK) * D;
      for (int i = 0; i < TQ; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < TK; j++) {
          double dot = 0;
          for (int e = 0; e < D; e++) dot += (double)qh[i * D + e] * kh[j * D + e];
          bool on = (!causal || j <= i) && (!keep || keep[b * TK + j]);
          s[j] = on ? dot * scale : -INFINITY;
          if (s[j] > m) m = s[j];
        }
        for (int j = 0; j < TK; j++) sum += s[j] = exp(s[j] - m);
        for (int e = 0; e < D; e++) {
          double acc = 0;
          for (int j = 0; j < TK; j++) acc += s[j] / sum * vh[j * D + e];
          out[((size_t)(b * H + h) * TQ + i) * D + e] = acc;
        }
      }
    }
  free(s);
}

static float *random_floats(size_t n, unsigned seed) {
  float *x = malloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
  return x;
}

static void check_attention(const char *what, int B, int H, int HKV, int T, int D, bool causal,
                            bool padded) {
  size_t nq = (size_t)B * H * T * D, nkv = (size_t)B * HKV * T * D;
  float *q = random_floats(nq, 1), *k = random_floats(nkv, 2), *v = random_floats(nkv, 3);
  bool *keep = NULL;
  if (padded) { /* batch b attends to its first T - 3 b keys */
    keep = malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
      for (int j = 0; j < T; j++) keep[b * T + j] = j < T - 3 * b;
  }
  double *want = malloc(sizeof(double) * nq);
  reference(q, k, v, B, H, HKV, T, T, D, causal, keep, want);
  float *got = malloc(sizeof(float) * nq);
  LOOM_SCOPE {
    loom_device dev = test_device();
    loom_tensor *tq = loom_from_data(q, LOOM_SHAPE(B, H, T, D), LOOM_F32, dev);
    loom_tensor *tk = loom_from_data(k, LOOM_SHAPE(B, HKV, T, D), LOOM_F32, dev);
    loom_tensor *tv = loom_from_data(v, LOOM_SHAPE(B, HKV, T, D), LOOM_F32, dev);
    loom_tensor *mask = keep ? loom_from_data(keep, LOOM_SHAPE(B, 1, 1, T), LOOM_BOOL, dev) : NULL;
    loom_tensor *out = loom_scaled_dot_product_attention(tq, tk, tv, mask, causal, 0);
    CHECK_OK(loom_copy_to_host(out, got, sizeof(float) * nq));
  }
  double worst = 0;
  for (size_t i = 0; i < nq; i++) worst = fmax(worst, fabs(got[i] - want[i]));
  CHECK_MSG(worst < 2e-5, "%s: worst difference %g from the double reference", what, worst);
  free(q), free(k), free(v), free(keep), free(want), free(got);
}

/* ------------------------------------------------------------ the fused kernel */

/* softmax(q k^T * scale + mask) v in doubles, q [BH, TQ, D], k [BH, TK, D],
 * v [BH, TK, DV]; mask [TQ, TK] shared by every head: bool bytes (keep) or
 * floats added (add), or none; causal: key j > query i hidden. A row that
 * sees nothing is NaN, as softmax gives. */
static void reference_general(const float *q, const float *k, const float *v, int BH, int TQ,
                              int TK, int D, int DV, bool causal, const unsigned char *keep,
                              const float *add, double scale, double *out) {
  double *s = malloc(sizeof(double) * (size_t)(TK + 1));
  for (int b = 0; b < BH; b++)
    for (int i = 0; i < TQ; i++) {
      double m = -INFINITY, sum = 0;
      for (int j = 0; j < TK; j++) {
        double dot = 0;
        for (int e = 0; e < D; e++)
          dot += (double)q[((size_t)b * TQ + i) * D + e] * k[((size_t)b * TK + j) * D + e];
        s[j] = dot * scale + (add ? add[i * TK + j] : 0);
        if ((causal && j > i) || (keep && !keep[i * TK + j])) s[j] = -INFINITY;
        if (s[j] > m) m = s[j];
      }
      for (int j = 0; j < TK; j++) sum += s[j] = exp(s[j] - m);
      for (int e = 0; e < DV; e++) {
        double acc = 0;
        for (int j = 0; j < TK; j++) acc += s[j] / sum * v[((size_t)b * TK + j) * DV + e];
        out[((size_t)b * TQ + i) * DV + e] = acc;
      }
    }
  free(s);
}

/* loom_program_dump's text of a program computing t (free it). */
static char *plan_text(loom_tensor *t) {
  char *text = NULL;
  size_t len = 0;
  loom_program *p = loom_compile(&t, 1, NULL, 0);
  FILE *f = open_memstream(&text, &len);
  if (p && f) loom_program_dump(p, f);
  if (f) fclose(f);
  loom_program_free(p);
  return text;
}

typedef enum { NO_MASK, KEEP_MASK, ADD_MASK } mask_kind;

/* A [TQ, TK] mask of the kind: a bool pattern, or floats with -inf in places,
 * every row keeping some key (free both). */
static void make_mask(mask_kind mk, int TQ, int TK, unsigned seed, unsigned char **keep,
                      float **add) {
  if (mk == KEEP_MASK) {
    *keep = malloc((size_t)TQ * TK);
    for (int i = 0; i < TQ * TK; i++) (*keep)[i] = (i * 7919) % 5 != 0 || i % TK == 0;
  }
  if (mk == ADD_MASK) {
    float *a = *add = random_floats((size_t)TQ * TK, seed);
    for (int i = 0; i < TQ * TK; i++) a[i] = i % 3 == 1 ? -INFINITY : 2 * a[i];
    for (int i = 0; i < TQ; i++) a[i * TK] = 0.5f;
  }
}

/* One case, fused (LOOM_ATTENTION=fused: the kernel wherever it can run, as
 * CUDA's default runs it for short queries only) and composed
 * (LOOM_ATTENTION=composite), each against the double reference; `fused`:
 * whether the first path must be the fused kernel. */
static void check_general(const char *what, int B, int H, int TQ, int TK, int D, int DV,
                          bool causal, mask_kind mk, bool fused) {
  int BH = B * H;
  float *q = random_floats((size_t)BH * TQ * D, 11), *k = random_floats((size_t)BH * TK * D, 12),
        *v = random_floats((size_t)BH * TK * DV, 13), *add = NULL;
  unsigned char *keep = NULL;
  make_mask(mk, TQ, TK, 14, &keep, &add);
  double scale = 1 / sqrt((double)D);
  size_t nout = (size_t)BH * TQ * DV;
  double *want = malloc(sizeof(double) * nout);
  reference_general(q, k, v, BH, TQ, TK, D, DV, causal, keep, add, scale, want);
  float *got = malloc(sizeof(float) * nout);
  for (int composite = 0; composite < 2; composite++) {
    setenv("LOOM_ATTENTION", composite ? "composite" : "fused", 1);
    LOOM_NO_GRAD LOOM_SCOPE {
      loom_device dev = test_device();
      loom_tensor *tq = loom_from_data(q, LOOM_SHAPE(B, H, TQ, D), LOOM_F32, dev);
      loom_tensor *tk = loom_from_data(k, LOOM_SHAPE(B, H, TK, D), LOOM_F32, dev);
      loom_tensor *tv = loom_from_data(v, LOOM_SHAPE(B, H, TK, DV), LOOM_F32, dev);
      loom_tensor *mask = mk == KEEP_MASK ? loom_from_data(keep, LOOM_SHAPE(TQ, TK), LOOM_BOOL, dev)
                          : mk == ADD_MASK ? loom_from_data(add, LOOM_SHAPE(TQ, TK), LOOM_F32, dev)
                                           : NULL;
      loom_tensor *out = loom_scaled_dot_product_attention(tq, tk, tv, mask, causal, 0);
      if (!composite) { /* (before out is computed) */
        char *text = plan_text(out);
        CHECK_MSG(text && (strstr(text, ": attention ->") != NULL) == fused,
                  "%s: the plan %s the fused kernel", what, fused ? "lacks" : "has");
        free(text);
      }
      CHECK_OK(loom_copy_to_host(out, got, sizeof(float) * nout));
    }
    unsetenv("LOOM_ATTENTION");
    double worst = 0;
    for (size_t i = 0; i < nout; i++) worst = fmax(worst, fabs(got[i] - want[i]));
    CHECK_MSG(worst < 3e-5, "%s (%s): worst difference %g from the double reference", what,
              composite ? "composed" : "fused", worst);
  }
  free(q), free(k), free(v), free(add), free(keep), free(want), free(got);
}

/* q, k and v as GPT-2 makes them: column blocks of one [B, T, 3C] product,
 * viewed [B, H, T, D] (row stride 3C, head stride D): read in place. */
static void test_fused_views(void) {
  enum { B = 2, T = 19, H = 3, D = 8, C = H * D };
  float *x = random_floats((size_t)B * T * 3 * C, 21);
  float got[2][B * T * C];
  for (int composite = 0; composite < 2; composite++) {
    setenv("LOOM_ATTENTION", composite ? "composite" : "fused", 1);
    LOOM_NO_GRAD LOOM_SCOPE {
      loom_tensor *qkv = loom_from_data(x, LOOM_SHAPE(B, T, 3 * C), LOOM_F32, test_device());
      loom_tensor *part[3];
      CHECK_OK(loom_split(qkv, C, 2, part, 3, NULL));
      for (int i = 0; i < 3; i++)
        part[i] = loom_transpose(loom_reshape(part[i], LOOM_SHAPE(B, T, H, D)), 1, 2);
      loom_tensor *y = loom_scaled_dot_product_attention(part[0], part[1], part[2], NULL, true, 0);
      CHECK_OK(loom_copy_to_host(y, got[composite], sizeof got[composite]));
    }
    unsetenv("LOOM_ATTENTION");
  }
  double worst = 0;
  for (int i = 0; i < B * T * C; i++) worst = fmax(worst, fabs(got[0][i] - got[1][i]));
  CHECK_MSG(worst < 1e-5, "views of one product: fused and composed differ by %g", worst);
  free(x);
}

/* NaN in a query gives that row NaN and no other; a row whose mask hides
 * every key is NaN, as torch's softmax over -inf gives. */
static void test_fused_nan(void) {
  enum { T = 20, D = 4 };
  float q[T * D], k[T * D], v[T * D], out[T * D];
  for (int i = 0; i < T * D; i++) q[i] = k[i] = v[i] = (float)(i % 7) / 7;
  q[3 * D + 1] = NAN;
  unsigned char keep[T * T];
  for (int i = 0; i < T * T; i++) keep[i] = i / T != 5; /* row 5 sees nothing */
  setenv("LOOM_ATTENTION", "fused", 1);
  LOOM_NO_GRAD LOOM_SCOPE {
    loom_device dev = test_device();
    loom_tensor *tq = loom_from_data(q, LOOM_SHAPE(1, T, D), LOOM_F32, dev);
    loom_tensor *tk = loom_from_data(k, LOOM_SHAPE(1, T, D), LOOM_F32, dev);
    loom_tensor *tv = loom_from_data(v, LOOM_SHAPE(1, T, D), LOOM_F32, dev);
    loom_tensor *m = loom_from_data(keep, LOOM_SHAPE(T, T), LOOM_BOOL, dev);
    CHECK_OK(loom_copy_to_host(loom_scaled_dot_product_attention(tq, tk, tv, m, false, 0), out,
                               sizeof out));
  }
  unsetenv("LOOM_ATTENTION");
  for (int i = 0; i < T; i++) {
    bool nan_row = i == 3 || i == 5, nan = isnan(out[i * D]);
    CHECK_MSG(nan == nan_row, "row %d: %g (NaN expected: %d)", i, out[i * D], nan_row);
  }
}

/* Which path the default takes: the kernel on the CPU for every length; on
 * CUDA for queries of up to 16 rows (decoding), the composition past them. */
static void test_default_path(void) {
  const int lengths[] = {1, 16, 17, 64};
  for (int i = 0; i < 4; i++) {
    LOOM_NO_GRAD LOOM_SCOPE {
      loom_device dev = test_device();
      loom_tensor *q = loom_ones(LOOM_SHAPE(2, lengths[i], 8), LOOM_F32, dev);
      loom_tensor *k = loom_ones(LOOM_SHAPE(2, 40, 8), LOOM_F32, dev);
      char *text = plan_text(loom_scaled_dot_product_attention(q, k, k, NULL, false, 0));
      bool want = dev.type == LOOM_DEVICE_CPU || lengths[i] <= 16;
      CHECK_MSG(text && (strstr(text, ": attention ->") != NULL) == want,
                "%d queries: the default plan %s the fused kernel", lengths[i],
                want ? "lacks" : "has");
      free(text);
    }
  }
}

static void test_fused(void) {
  check_general("plain", 2, 3, 37, 37, 16, 16, false, NO_MASK, true);
  check_general("causal across tiles and row blocks", 1, 2, 70, 70, 64, 64, true, NO_MASK, true);
  check_general("fewer queries, causal", 1, 2, 5, 131, 16, 16, true, NO_MASK, true);
  check_general("more queries, causal", 2, 1, 20, 6, 8, 8, true, NO_MASK, true);
  check_general("two queries, causal", 2, 3, 2, 70, 16, 16, true, NO_MASK, true);
  check_general("one query, kept keys", 1, 4, 1, 130, 32, 32, false, KEEP_MASK, true);
  /* one query's scores: 16 keys' dot products summed at once (heads of whole
   * vectors), else the key tile transposed */
  check_general("one query, long keys, added mask", 2, 3, 1, 1000, 64, 48, false, ADD_MASK, true);
  check_general("one query, odd head", 1, 2, 1, 77, 7, 9, false, NO_MASK, true);
  check_general("one query, widest head", 1, 1, 1, 70, 256, 256, false, KEEP_MASK, true);
  check_general("one query, causal", 1, 2, 1, 40, 16, 16, true, NO_MASK, true);
  check_general("rows, kept keys", 2, 2, 33, 65, 16, 16, false, KEEP_MASK, true);
  check_general("added mask", 1, 3, 18, 40, 8, 8, false, ADD_MASK, true);
  check_general("other value width", 1, 2, 17, 23, 24, 40, true, NO_MASK, true);
  check_general("odd widths", 2, 1, 3, 5, 3, 5, false, NO_MASK, true);
  check_general("widest head", 1, 1, 9, 70, 256, 256, false, NO_MASK, true);
  check_general("head past the kernel's", 1, 1, 4, 9, 257, 8, false, NO_MASK, false);
  test_fused_views();
  test_fused_nan();
  test_default_path();
}

/* The gradients of sum(w * attention(q, k, v)) to q, k and v: the fused
 * backward (LM_ATTENTION_GRAD, on the test device) against the composition's
 * (LOOM_ATTENTION=composite), whose rules gradcheck checks by finite
 * differences. H query heads over HKV key/value heads; `order2`: also the
 * second derivative through loom_grad_of (the gradient of sum(dq * dq) to
 * v), which differentiates a composed backward. */
static void check_grads(const char *what, int B, int H, int HKV, int TQ, int TK, int D, int DV,
                        bool causal, mask_kind mk, bool order2) {
  size_t nq = (size_t)B * H * TQ * D, nk = (size_t)B * HKV * TK * D, nv = (size_t)B * HKV * TK * DV;
  size_t no = (size_t)B * H * TQ * DV;
  float *q = random_floats(nq, 31), *k = random_floats(nk, 32), *v = random_floats(nv, 33);
  float *w = random_floats(no, 34), *add = NULL;
  unsigned char *keep = NULL;
  make_mask(mk, TQ, TK, 35, &keep, &add);
  size_t sizes[4] = {nq, nk, nv, nv};
  float *got[2][4];
  bool fused_plan = false;
  for (int composite = 0; composite < 2; composite++) {
    for (int i = 0; i < 4; i++) got[composite][i] = calloc(sizes[i], sizeof(float));
    setenv("LOOM_ATTENTION", composite ? "composite" : "fused", 1);
    LOOM_SCOPE {
      loom_device dev = test_device();
      loom_tensor *in[3] = {loom_from_data(q, LOOM_SHAPE(B, H, TQ, D), LOOM_F32, dev),
                            loom_from_data(k, LOOM_SHAPE(B, HKV, TK, D), LOOM_F32, dev),
                            loom_from_data(v, LOOM_SHAPE(B, HKV, TK, DV), LOOM_F32, dev)};
      for (int i = 0; i < 3; i++) CHECK_OK(loom_set_requires_grad(in[i], true));
      loom_tensor *mask = mk == KEEP_MASK ? loom_from_data(keep, LOOM_SHAPE(TQ, TK), LOOM_BOOL, dev)
                          : mk == ADD_MASK ? loom_from_data(add, LOOM_SHAPE(TQ, TK), LOOM_F32, dev)
                                           : NULL;
      loom_tensor *out = loom_scaled_dot_product_attention(in[0], in[1], in[2], mask, causal, 0);
      loom_tensor *tw = loom_from_data(w, LOOM_SHAPE(B, H, TQ, DV), LOOM_F32, dev);
      loom_tensor *loss = loom_sum_all(loom_mul(out, tw));
      if (order2) {
        loom_tensor *g[3], *g2;
        CHECK_OK(loom_grad_of(&loss, 1, in, 3, g));
        loom_tensor *inner = loom_sum_all(loom_mul(g[0], g[0]));
        CHECK_OK(loom_grad_of(&inner, 1, &in[2], 1, &g2));
        for (int i = 0; i < 3; i++)
          CHECK_OK(loom_copy_to_host(g[i], got[composite][i], sizes[i] * 4));
        CHECK_OK(loom_copy_to_host(g2, got[composite][3], sizes[3] * 4));
      } else {
        CHECK_OK(loom_backward(loss));
        if (!composite) {
          loom_tensor *dq = loom_grad(in[0]);
          char *text = plan_text(dq);
          fused_plan = text && strstr(text, ": attention_grad ->") != NULL;
          free(text);
        }
        for (int i = 0; i < 3; i++)
          CHECK_OK(loom_copy_to_host(loom_grad(in[i]), got[composite][i], sizes[i] * 4));
      }
    }
    unsetenv("LOOM_ATTENTION");
  }
  CHECK_MSG(order2 || fused_plan, "%s: the gradient's plan lacks the fused backward", what);
  static const char *names[4] = {"dq", "dk", "dv", "d(|dq|^2)/dv"};
  for (int i = 0; i < (order2 ? 4 : 3); i++) {
    double worst = 0, top = 0;
    for (size_t j = 0; j < sizes[i]; j++) {
      worst = fmax(worst, fabs((double)got[0][i][j] - got[1][i][j]));
      top = fmax(top, fabs((double)got[1][i][j]));
    }
    CHECK_MSG(worst <= 2e-5 * fmax(top, 1), "%s: %s fused and composed differ by %g (largest %g)",
              what, names[i], worst, top);
  }
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 4; i++) free(got[c][i]);
  free(q), free(k), free(v), free(w), free(add), free(keep);
}

/* Where a gradient flows, the default takes the fused forward and backward
 * on the CPU over 96 keys or more; shorter rows, and CUDA, the composition. */
static void test_default_train_path(void) {
  const int lengths[] = {64, 95, 96, 200};
  for (int i = 0; i < 4; i++) LOOM_SCOPE {
      loom_device dev = test_device();
      loom_tensor *q = loom_ones(LOOM_SHAPE(2, 8, 8), LOOM_F32, dev);
      loom_tensor *k = loom_ones(LOOM_SHAPE(2, lengths[i], 8), LOOM_F32, dev);
      CHECK_OK(loom_set_requires_grad(k, true));
      CHECK_OK(
          loom_backward(loom_sum_all(loom_scaled_dot_product_attention(q, k, k, NULL, false, 0))));
      loom_tensor *g = loom_grad(k);
      char *text = plan_text(g);
      bool want = dev.type == LOOM_DEVICE_CPU && lengths[i] >= 96;
      CHECK_MSG(text && (strstr(text, ": attention_grad ->") != NULL) == want,
                "%d keys: the default gradient's plan %s the fused backward", lengths[i],
                want ? "lacks" : "has");
      free(text);
      loom_free(g);
    }
}

static void test_fused_grads(void) {
  test_default_train_path();
  check_grads("plain", 2, 3, 3, 37, 37, 16, 16, false, NO_MASK, false);
  check_grads("causal across tiles and row blocks", 1, 2, 2, 70, 70, 64, 64, true, NO_MASK, false);
  check_grads("fewer queries, causal", 1, 2, 2, 5, 131, 16, 16, true, NO_MASK, false);
  check_grads("more queries, causal", 2, 1, 1, 20, 6, 8, 8, true, NO_MASK, false);
  check_grads("one query", 1, 2, 2, 1, 40, 8, 8, false, NO_MASK, false);
  check_grads("kept keys", 2, 2, 2, 33, 65, 16, 16, false, KEEP_MASK, false);
  check_grads("added mask", 1, 3, 3, 18, 40, 8, 8, false, ADD_MASK, false);
  check_grads("grouped heads, causal", 2, 4, 2, 24, 24, 16, 16, true, NO_MASK, false);
  check_grads("other value width, odd", 1, 2, 2, 17, 23, 24, 37, true, NO_MASK, false);
  check_grads("widest head", 1, 1, 1, 9, 70, 256, 256, false, NO_MASK, false);
  check_grads("second order, causal", 1, 2, 2, 9, 9, 8, 8, true, NO_MASK, true);
  check_grads("second order, kept keys", 1, 2, 2, 7, 11, 8, 4, false, KEEP_MASK, true);
}

static loom_tensor *sdpa_causal(loom_tensor *const *in) {
  return loom_scaled_dot_product_attention(in[0], in[1], in[2], NULL, true, 0);
}

static loom_tensor *sdpa_grouped(loom_tensor *const *in) {
  return loom_scaled_dot_product_attention(in[0], in[1], in[2], NULL, false, 0.7);
}

static loom_tensor *gelu_tanh(loom_tensor *const *in) { return loom_gelu_tanh(in[0]); }

static loom_tensor *slice_update_at(loom_tensor *const *in) {
  int64_t at = 2;
  loom_tensor *start = loom_from_data(&at, LOOM_SHAPE0, LOOM_I64, test_device());
  return loom_slice_update(in[0], 1, start, in[1]);
}

/* t [2, 7, 3] with rows [start, start + n) of axis 1 from update [2, n, 3];
 * a start outside [0, 7 - n] is refused (jax.lax.dynamic_update_slice clamps
 * it; torch's slice assignment raises), naming the op and the start. */
static void check_slice_update(int64_t start, int64_t n) {
  LOOM_SCOPE {
    loom_tensor *t = arange_f(42, LOOM_SHAPE(2, 7, 3));
    loom_tensor *u = loom_add_s(arange_f(6 * n, LOOM_SHAPE(2, n, 3)), 1000);
    loom_tensor *s32 =
        loom_cast(loom_full(LOOM_SHAPE0, (double)start, LOOM_I64, test_device()), LOOM_I32);
    float got[42];
    loom_clear_error();
    loom_status st = loom_copy_to_host(loom_slice_update(t, -2, s32, u), got, sizeof got);
    if (start < 0 || start > 7 - n) {
      char want[96];
      snprintf(want, sizeof want, "loom_slice_update: start %lld is outside [0, %lld]",
               (long long)start, (long long)(7 - n));
      CHECK_EQ_INT(st, LOOM_ERR_VALUE);
      CHECK_MSG(loom_last_error() && strstr(loom_last_error(), want), "got: %s, wanted: %s",
                loom_last_error() ? loom_last_error() : "(none)", want);
      loom_clear_error();
    } else {
      CHECK_OK(st);
      for (int64_t b = 0; b < 2; b++)
        for (int64_t r = 0; r < 7; r++)
          for (int64_t c = 0; c < 3; c++) {
            bool in = r >= start && r < start + n;
            double want = in ? 1000 + (b * n + r - start) * 3 + c : (b * 7 + r) * 3 + c;
            CHECK_NEAR(got[(b * 7 + r) * 3 + c], want, 0);
          }
    }
  }
}

static void test_slice_update(void) {
  for (int64_t n = 0; n <= 7; n += 1)
    for (int64_t start = -2; start <= 8; start += 1) check_slice_update(start, n);
  LOOM_SCOPE {
    loom_tensor *t = loom_zeros(LOOM_SHAPE(2, 5), LOOM_F32, test_device());
    loom_tensor *i0 = loom_full(LOOM_SHAPE0, 1, LOOM_I64, test_device());
    loom_tensor *r = loom_ones(LOOM_SHAPE(2, 1), LOOM_F32, test_device());
    CHECK_EQ_INT(loom_status_of(loom_slice_update(
                     t, 1, i0, loom_ones(LOOM_SHAPE(3, 1), LOOM_F32, test_device()))),
                 LOOM_ERR_SHAPE);
    CHECK_EQ_INT(loom_status_of(loom_slice_update(
                     t, 1, i0, loom_ones(LOOM_SHAPE(2, 6), LOOM_F32, test_device()))),
                 LOOM_ERR_SHAPE);
    CHECK_EQ_INT(loom_status_of(loom_slice_update(t, 2, i0, r)), LOOM_ERR_AXIS);
    CHECK_EQ_INT(loom_status_of(loom_slice_update(t, 1, loom_cast(i0, LOOM_F32), r)),
                 LOOM_ERR_DTYPE);
    CHECK_EQ_INT(loom_status_of(loom_slice_update(t, 1, loom_reshape(i0, LOOM_SHAPE(1)), r)),
                 LOOM_ERR_DTYPE);
    CHECK_EQ_INT(loom_status_of(loom_slice_update(t, 1, i0, loom_cast(r, LOOM_F64))),
                 LOOM_ERR_DTYPE);
    CHECK_EQ_INT(loom_status_of(loom_slice_update(NULL, 1, i0, r)), LOOM_ERR_NULL);
    const char *msg = loom_error_message(loom_slice_update(t, 0, i0, r));
    CHECK_MSG(msg && strstr(msg, "loom_slice_update") && strstr(msg, "[2,1]"), "message: %s",
              msg ? msg : "(none)");
  }
}

/* The scale, mask and softmax of the scores: one fused kernel between the
 * two products (plus the iotas' comparison, folded in). */
static void test_scores_fused(void) {
  if (test_device().type != LOOM_DEVICE_CPU) return;
  setenv("LOOM_ATTENTION", "composite", 1); /* the composition's kernels */
  LOOM_SCOPE {
    loom_tensor *q = loom_ones(LOOM_SHAPE(2, 4, 16, 8), LOOM_F32, LOOM_CPU);
    loom_tensor *out = loom_scaled_dot_product_attention(q, q, q, NULL, true, 0);
    loom_stats before = loom_get_stats();
    CHECK_OK(loom_realize(out));
    loom_stats after = loom_get_stats();
    uint64_t kernels = after.kernels_launched - before.kernels_launched;
    CHECK_MSG(kernels <= 2, "causal attention ran %llu kernels", (unsigned long long)kernels);
    float v[8];
    CHECK_OK(
        loom_copy_to_host(loom_slice(loom_reshape(out, LOOM_SHAPE(-1)), 0, 0, 8, 1), v, sizeof v));
    CHECK_NEAR(v[0], 1, 1e-6); /* averages of ones */
  }
  unsetenv("LOOM_ATTENTION");
}

/* The layer: torch's parameter names, shapes and initialization bounds
 * (its forward against torch is in the fixtures); bad sizes refused. */
static void test_mha_layer(void) {
  LOOM_SCOPE {
    loom_params *ps = loom_params_new();
    loom_mha m = loom_mha_new(ps, "attn", 16, 4, true, loom_key_new(3));
    const char *names[4] = {"attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight",
                            "attn.out_proj.bias"};
    const int64_t dims0[4] = {48, 48, 16, 16};
    CHECK_EQ_INT(loom_params_count(ps), 4);
    for (int i = 0; i < 4 && i < loom_params_count(ps); i++) {
      CHECK(strcmp(loom_params_name(ps, i), names[i]) == 0);
      loom_tensor *t = loom_params_at(ps, i);
      CHECK_EQ_INT(loom_shape_of(t).dim[0], dims0[i]);
      loom_free(t);
    }
    double in_bound = sqrt(6.0 / 64), out_bound = 1 / sqrt(16.0);
    CHECK(loom_item(loom_max(loom_abs(m.in_proj_weight), NULL, 0, false)) <= in_bound);
    CHECK(loom_item(loom_max(loom_abs(m.in_proj_weight), NULL, 0, false)) > in_bound * 0.9);
    CHECK(loom_item(loom_max(loom_abs(m.out_proj_weight), NULL, 0, false)) <= out_bound);
    CHECK(loom_item(loom_sum_all(loom_abs(m.in_proj_bias))) == 0);
    loom_tensor *x = loom_ones(LOOM_SHAPE(2, 7, 16), LOOM_F32, test_device());
    loom_tensor *y = loom_mha_forward(&m, x);
    CHECK_OK(loom_realize(y));
    CHECK_EQ_INT(loom_shape_of(y).dim[1], 7);
    loom_params *bad = loom_params_new();
    loom_mha none = loom_mha_new(bad, "attn", 10, 4, false, loom_key_new(1));
    CHECK(none.in_proj_weight == NULL);
    CHECK_STR_CONTAINS(loom_last_error(), "4 heads do not divide the embedding 10");
    loom_clear_error();
    CHECK_EQ_INT(loom_status_of(
                     loom_mha_forward(&m, loom_ones(LOOM_SHAPE(2, 7, 8), LOOM_F32, test_device()))),
                 LOOM_ERR_SHAPE);
    loom_clear_error();
    loom_params_free(bad);
    loom_params_free(ps);
  }
}

/* topk's indices in order (ties: the first), and sampling: draws with
 * replacement follow the probabilities (4 standard deviations), a zero
 * never drawn; without replacement, distinct. */
static void test_topk_and_sampling(void) {
  LOOM_SCOPE {
    float v[8] = {3, -1, 7, 7, 0, 2, 9, -4};
    loom_tensor *x = loom_from_data(v, LOOM_SHAPE(2, 4), LOOM_F32, test_device()), *val, *idx;
    CHECK_OK(loom_topk(x, 3, 1, true, &val, &idx));
    int64_t got[6];
    CHECK_OK(loom_copy_to_host(idx, got, sizeof got));
    const int64_t want[6] = {2, 3, 0, 2, 1, 0}; /* row 0: 7 (first), 7, 3; row 1: 9, 2, 0 */
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(got[i], want[i]);
    CHECK_OK(loom_topk(x, 1, 0, false, NULL, &idx));
    CHECK_OK(loom_copy_to_host(idx, got, 4 * sizeof(int64_t)));
    CHECK(got[0] == 1 && got[1] == 0 && got[2] == 0 && got[3] == 1);
    /* a k of most of the row (the sort step's radix sort, not its partial selection) */
    float many[40];
    for (int i = 0; i < 40; i++) many[i] = (float)((i * 17) % 40);
    loom_tensor *m = loom_from_data(many, LOOM_SHAPE(40), LOOM_F32, test_device());
    CHECK_OK(loom_topk(m, 30, 0, true, &val, &idx));
    float top[30];
    CHECK_OK(loom_copy_to_host(val, top, sizeof top));
    for (int i = 0; i < 30; i++) CHECK_NEAR(top[i], 39 - i, 0);
    CHECK_OK(loom_copy_to_host(loom_slice(idx, 0, 0, 6, 1), got, sizeof(int64_t) * 6));
    for (int i = 0; i < 6; i++) CHECK_NEAR(many[got[i]], 39 - i, 0);
    CHECK_RC(loom_topk(x, 5, 1, true, &val, &idx), LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_last_error(), "loom_topk: k 5 is outside [0, 4]");
    loom_clear_error();

    float p[4] = {0.1f, 0, 0.6f, 0.3f};
    loom_tensor *probs = loom_from_data(p, LOOM_SHAPE(4), LOOM_F32, test_device());
    enum { N = 20000 };
    loom_tensor *draws = loom_multinomial_key(loom_key_new(11), probs, N, true);
    int64_t *d = malloc(sizeof(int64_t) * N), count[4] = {0};
    CHECK_OK(loom_copy_to_host(draws, d, sizeof(int64_t) * N));
    for (int i = 0; i < N; i++)
      if (d[i] >= 0 && d[i] < 4) count[d[i]]++;
    for (int c = 0; c < 4; c++) {
      double expect = N * p[c], sd = sqrt(N * p[c] * (1 - p[c]));
      CHECK_MSG(fabs((double)count[c] - expect) <= 4 * sd + (c == 1 ? 0 : 1),
                "category %d drawn %lld times of %d, expected %.0f", c, (long long)count[c], N,
                expect);
    }
    free(d);
    loom_tensor *three = loom_multinomial_key(loom_key_new(12), probs, 3, false);
    int64_t t3[3];
    CHECK_OK(loom_copy_to_host(three, t3, sizeof t3));
    bool seen[4] = {false};
    for (int i = 0; i < 3; i++)
      if (t3[i] >= 0 && t3[i] < 4) seen[t3[i]] = true;
    CHECK(seen[0] && seen[2] && seen[3] && !seen[1]); /* every nonzero one, once */
    CHECK_EQ_INT(loom_status_of(loom_multinomial_key(loom_key_new(1), probs, 5, false)),
                 LOOM_ERR_VALUE);
    loom_clear_error();
  }
}

static int by_value(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* sort against qsort on 1,000 values with ties (a value at every index:
 * the indices are checked through them), NaN last ascending and first
 * descending, as torch. */
static void test_sort(void) {
  LOOM_SCOPE {
    enum { N = 1000 };
    float *v = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    float *got = malloc(sizeof(float) * N);
    int64_t *idx = malloc(sizeof(int64_t) * N);
    unsigned seed = 5;
    for (int i = 0; i < N; i++) {
      seed = seed * 1103515245u + 12345u;
      v[i] = (float)((seed >> 8) % 200) - 100; /* many ties */
    }
    memcpy(want, v, sizeof(float) * N);
    qsort(want, N, sizeof(float), by_value);
    loom_tensor *x = loom_from_data(v, LOOM_SHAPE(N), LOOM_F32, test_device()), *sv, *si;
    CHECK_OK(loom_sort(x, 0, false, &sv, &si));
    CHECK_OK(loom_copy_to_host(sv, got, sizeof(float) * N));
    CHECK_OK(loom_copy_to_host(si, idx, sizeof(int64_t) * N));
    int wrong = 0;
    for (int i = 0; i < N; i++)
      wrong += got[i] != want[i] || idx[i] < 0 || idx[i] >= N || v[idx[i]] != got[i];
    CHECK_EQ_INT(wrong, 0);
    float w[5] = {2, NAN, -1, 7, 0}, out[5];
    loom_tensor *with_nan = loom_from_data(w, LOOM_SHAPE(5), LOOM_F32, test_device());
    CHECK_OK(loom_sort(with_nan, 0, false, &sv, NULL));
    CHECK_OK(loom_copy_to_host(sv, out, sizeof out));
    CHECK(out[0] == -1 && out[1] == 0 && out[2] == 2 && out[3] == 7 && isnan(out[4]));
    CHECK_OK(loom_sort(with_nan, 0, true, &sv, NULL));
    CHECK_OK(loom_copy_to_host(sv, out, sizeof out));
    CHECK(isnan(out[0]) && out[1] == 7 && out[2] == 2 && out[3] == 0 && out[4] == -1);
    CHECK_RC(loom_sort(with_nan, 1, false, &sv, NULL), LOOM_ERR_AXIS);
    loom_clear_error();
    free(v), free(want), free(got), free(idx);
  }
}

/* ------------------------------------------------------------ the arguments' sweep */

/* Every combination a caller can pass loom_scaled_dot_product_attention:
 * mask dtypes (none, bool, q's float, F32, another float, integers) and
 * shapes (exact, broadcast, wrong), head counts (equal, grouped, broadcast,
 * not a multiple, k's and v's apart), ranks 2 to 4 and batch dims that
 * broadcast or not, with q in F32, F64 and BF16. Each case either computes
 * what a double reference does (torch 2's rules: a bool mask keeps where
 * true, a float one is added) or is refused with the message that names
 * what the caller passed: torch's checks, never an inner op's shapes. */

enum { SW_B = 2, SW_TQ = 3, SW_TK = 5, SW_D = 4, SW_DV = 3 };

typedef enum {
  MASK_NONE,
  MASK_BOOL,
  MASK_Q,
  MASK_F32,
  MASK_OTHER,
  MASK_I32,
  MASK_I64,
  MASK_U8
} sweep_mask;
typedef enum {
  AT_EXACT,
  AT_ROWS,
  AT_KEYS,
  AT_ONE_D,
  AT_WRONG_TK,
  AT_WRONG_LEAD,
  AT_TOO_MANY
} sweep_at;

/* Values k/64 with |k| <= 64: exact in every float dtype. */
static double *sweep_values(int64_t n, unsigned seed) {
  double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (double)((int)((seed >> 8) % 129) - 64) / 64;
  }
  return x;
}

static int64_t sweep_numel(loom_shape s) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; d++) n *= s.dim[d];
  return n;
}

/* The offset of element idx (of full's rank) in a tensor of shape s
 * broadcast to it (s aligned to the right, size-1 dims repeated). */
static int64_t sweep_offset(loom_shape s, const int64_t *idx, int rank) {
  int64_t off = 0;
  for (int d = 0; d < s.ndim; d++) {
    int64_t i = idx[rank - s.ndim + d];
    off = off * s.dim[d] + (s.dim[d] == 1 ? 0 : i);
  }
  return off;
}

/* softmax(q k^T * scale (+ mask)) v in doubles over the scores' shape S
 * [..., Tq, Tk]: query head h reads key head h / (H / Hk) (h for Hk = H, 0
 * for 1), likewise value heads. */
static void sweep_reference(const double *q, loom_shape qs, const double *k, loom_shape ks,
                            const double *v, loom_shape vs, const double *mask, loom_shape ms,
                            bool bool_mask, loom_shape S, double *out) {
  int r = S.ndim;
  int64_t tq = S.dim[r - 2], tk = S.dim[r - 1], d = qs.dim[r - 1], dv = vs.dim[r - 1];
  int64_t rows = sweep_numel(S) / tk, idx[LOOM_MAX_DIMS + 1];
  double scale = 1 / sqrt((double)d), s[SW_TK + 1];
  for (int64_t row = 0; row < rows; row++) {
    int64_t rest = row;
    for (int x = r - 2; x >= 0; x--) idx[x] = rest % S.dim[x], rest /= S.dim[x];
    int64_t h = r >= 3 ? idx[r - 3] : 0, H = r >= 3 ? S.dim[r - 3] : 1;
    int64_t kidx[LOOM_MAX_DIMS], vidx[LOOM_MAX_DIMS];
    memcpy(kidx, idx, sizeof kidx), memcpy(vidx, idx, sizeof vidx);
    if (r >= 3) {
      int64_t hk = ks.dim[r - 3], hv = vs.dim[r - 3];
      kidx[r - 3] = hk == 1 ? 0 : h / (H / hk), vidx[r - 3] = hv == 1 ? 0 : h / (H / hv);
    }
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < tk; j++) {
      double dot = 0;
      kidx[r - 2] = j, idx[r - 1] = j;
      for (int64_t e = 0; e < d; e++) {
        idx[r - 1] = e, kidx[r - 1] = e;
        dot += q[sweep_offset(qs, idx, r)] * k[sweep_offset(ks, kidx, r)];
      }
      idx[r - 1] = j;
      s[j] = dot * scale;
      if (mask) {
        double mv = mask[sweep_offset(ms, idx, r)];
        s[j] = bool_mask ? (mv != 0 ? s[j] : -INFINITY) : s[j] + mv;
      }
      m = fmax(m, s[j]);
    }
    for (int64_t j = 0; j < tk; j++) sum += s[j] = exp(s[j] - m);
    for (int64_t e = 0; e < dv; e++) {
      double acc = 0;
      vidx[r - 1] = e;
      for (int64_t j = 0; j < tk; j++) {
        vidx[r - 2] = j;
        acc += s[j] / sum * v[sweep_offset(vs, vidx, r)];
      }
      out[row / tq * tq * dv + (row % tq) * dv + e] = acc;
    }
  }
}

static loom_shape sweep_mask_shape(sweep_at at, loom_shape S) {
  int r = S.ndim;
  loom_shape m = S;
  switch (at) {
  case AT_EXACT: break;
  case AT_ROWS: m = LOOM_SHAPE(S.dim[r - 2], S.dim[r - 1]); break;
  case AT_KEYS: /* [B, 1, 1, Tk]: a padding mask */
    for (int x = 1; x < r - 1; x++) m.dim[x] = 1;
    break;
  case AT_ONE_D: m = LOOM_SHAPE(S.dim[r - 1]); break;
  case AT_WRONG_TK: m = LOOM_SHAPE(S.dim[r - 2], S.dim[r - 1] + 1); break;
  case AT_WRONG_LEAD: m.dim[0] = 7; break;
  case AT_TOO_MANY:
    m.ndim = r + 1, m.dim[0] = 2;
    for (int x = 0; x < r; x++) m.dim[x + 1] = S.dim[x];
    break;
  }
  return m;
}

static loom_tensor *sweep_tensor(const double *x, loom_shape s, loom_dtype dt) {
  return loom_cast(loom_from_data(x, s, LOOM_F64, test_device()), dt);
}

static char *sweep_shape_text(loom_shape s, char *buf) {
  int n = sprintf(buf, "[");
  for (int d = 0; d < s.ndim; d++) n += sprintf(buf + n, d ? ",%lld" : "%lld", (long long)s.dim[d]);
  sprintf(buf + n, "]");
  return buf;
}

/* One case: q [.., H, Tq, D] (heads and batch as the shapes say), k, v, a
 * mask of the kind at its place, and what must come of it: NULL (values
 * against the reference) or the message's part. */
static int sweep_computed, sweep_refused;

static void sweep_case(loom_dtype qdt, loom_shape qs, loom_shape ks, loom_shape vs, sweep_mask kind,
                       sweep_at at) {
  int r = qs.ndim;
  /* the scores' shape: batch dims and heads broadcast */
  loom_shape S = qs;
  for (int x = 0; x < r - 2; x++) { /* heads: q's, else k's or v's */
    int64_t n = 1;
    const int64_t e[3] = {qs.dim[x], ks.dim[x], vs.dim[x]};
    for (int i = 2; i >= 0; i--)
      if (e[i] != 1) n = e[i];
    S.dim[x] = n;
  }
  S.dim[r - 1] = ks.dim[r - 2];
  loom_shape ms = sweep_mask_shape(at, S), os = S;
  os.dim[r - 1] = vs.dim[r - 1];
  static const loom_dtype mask_dtypes[] = {LOOM_F32, LOOM_BOOL, LOOM_F32, LOOM_F32,
                                           LOOM_F64, LOOM_I32,  LOOM_I64, LOOM_U8};
  loom_dtype mdt = kind == MASK_Q ? qdt : mask_dtypes[kind];
  if (kind == MASK_OTHER) mdt = qdt == LOOM_F64 ? LOOM_F16 : LOOM_F64;
  /* what torch 2 says, in loom's order of checks */
  char want[512] = "", a[64], b[64], c[64];
  sweep_shape_text(qs, a), sweep_shape_text(ks, b), sweep_shape_text(vs, c);
  int64_t h = r >= 3 ? qs.dim[r - 3] : 1, hk = r >= 3 ? ks.dim[r - 3] : 1;
  int64_t hv = r >= 3 ? vs.dim[r - 3] : 1, hkv = hk > hv ? hk : hv;
  bool batch_ok = true;
  for (int x = 0; x < r - 3; x++)
    batch_ok &= (qs.dim[x] == 1 || qs.dim[x] == S.dim[x]) &&
                (ks.dim[x] == 1 || ks.dim[x] == S.dim[x]) &&
                (vs.dim[x] == 1 || vs.dim[x] == S.dim[x]);
  bool mask_fits = true;
  for (int x = 0; x < ms.ndim; x++) {
    int sx = S.ndim - ms.ndim + x;
    mask_fits &= sx >= 0 && (ms.dim[x] == 1 || ms.dim[x] == S.dim[sx]);
  }
  loom_status want_status = LOOM_OK;
  if (hk != hv && hk != 1 && hv != 1) {
    want_status = LOOM_ERR_SHAPE;
    snprintf(want, sizeof want, "key heads (%lld) and value heads (%lld) differ (k %s, v %s)",
             (long long)hk, (long long)hv, b, c);
  } else if (hkv != h && hkv > 1 && h != 1 && h % hkv) {
    want_status = LOOM_ERR_SHAPE;
    snprintf(want, sizeof want,
             "query heads (%lld) must be a multiple of key/value heads (%lld) (q %s, k %s, v %s)",
             (long long)h, (long long)hkv, a, b, c);
  } else if (!batch_ok) {
    want_status = LOOM_ERR_SHAPE;
    snprintf(want, sizeof want, "the batch dims of q %s, k %s, v %s do not broadcast", a, b, c);
  } else if (kind != MASK_NONE && mdt != LOOM_BOOL && mdt != LOOM_F32 && mdt != qdt) {
    want_status = LOOM_ERR_DTYPE;
    snprintf(want, sizeof want, "the mask is %s and q %s: a mask is bool (true: attend) or added",
             loom_dtype_name(mdt), loom_dtype_name(qdt));
  } else if (kind != MASK_NONE && !mask_fits) {
    char sm[64], ss[64];
    want_status = LOOM_ERR_SHAPE;
    snprintf(want, sizeof want, "the mask %s does not broadcast to the scores' shape %s",
             sweep_shape_text(ms, sm), sweep_shape_text(S, ss));
  }
  char at_text[64];
  check_set_ctx("attention sweep: %s q %s, k %s, v %s, mask %s %s", loom_dtype_name(qdt), a, b, c,
                kind == MASK_NONE ? "none" : loom_dtype_name(mdt),
                kind == MASK_NONE ? "" : sweep_shape_text(ms, at_text));
  double *q = sweep_values(sweep_numel(qs), 41), *k = sweep_values(sweep_numel(ks), 42);
  double *v = sweep_values(sweep_numel(vs), 43), *mv = NULL;
  if (kind != MASK_NONE) { /* every row keeps its first key */
    int64_t n = sweep_numel(ms), tk = ms.dim[ms.ndim - 1];
    mv = sweep_values(n, 44);
    for (int64_t i = 0; i < n; i++)
      mv[i] = kind == MASK_BOOL ? (double)((i * 7919) % 5 != 0 || i % tk == 0)
              : i % tk == 0     ? 0.5
              : i % 3 == 1      ? -INFINITY
                                : 2 * mv[i];
  }
  LOOM_NO_GRAD LOOM_SCOPE {
    loom_tensor *tq = sweep_tensor(q, qs, qdt), *tk = sweep_tensor(k, ks, qdt);
    loom_tensor *tv = sweep_tensor(v, vs, qdt), *tm = mv ? sweep_tensor(mv, ms, mdt) : NULL;
    loom_tensor *out = loom_scaled_dot_product_attention(tq, tk, tv, tm, false, 0);
    CHECK_EQ_INT(loom_status_of(out), want_status);
    *(want_status == LOOM_OK ? &sweep_computed : &sweep_refused) += 1;
    if (want_status != LOOM_OK) {
      const char *msg = loom_error_message(out);
      CHECK_MSG(msg && !strncmp(msg, "loom_scaled_dot_product_attention: ", 35) &&
                    strstr(msg, want) && !strstr(msg, "loom_matmul"),
                "message %s, want %s", msg ? msg : "(none)", want);
    } else {
      int64_t n = sweep_numel(os);
      double *got = malloc(sizeof(double) * (size_t)n), *ref = malloc(sizeof(double) * (size_t)n);
      char gs[64], ws[64];
      CHECK_MSG(!strcmp(sweep_shape_text(loom_shape_of(out), gs), sweep_shape_text(os, ws)),
                "the result is %s, want %s", gs, ws);
      CHECK_OK(loom_copy_to_host(loom_cast(out, LOOM_F64), got, sizeof(double) * (size_t)n));
      sweep_reference(q, qs, k, ks, v, vs, mv, ms, kind == MASK_BOOL, S, ref);
      double worst = 0, tol = qdt == LOOM_F64 ? 1e-12 : qdt == LOOM_F32 ? 3e-5 : 4e-2;
      for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - ref[i]));
      CHECK_MSG(worst <= tol, "worst difference %g from the double reference", worst);
      free(got), free(ref);
    }
  }
  check_set_ctx("%s", "");
  loom_clear_error();
  free(q), free(k), free(v), free(mv);
}

static void test_argument_sweep(void) {
  /* (H, Hk, Hv): equal, grouped, grouped over one value head, one key/value
   * head for all, one query head for several, not a multiple, keys and
   * values apart */
  static const int64_t heads[][3] = {{4, 4, 4}, {4, 2, 2}, {6, 3, 1}, {4, 1, 1},
                                     {1, 2, 2}, {6, 4, 4}, {4, 2, 4}};
  enum { NHEADS = sizeof heads / sizeof heads[0] };
  for (int i = 0; i < NHEADS; i++) {
    int64_t h = heads[i][0], hk = heads[i][1], hv = heads[i][2];
    loom_shape q4 = LOOM_SHAPE(SW_B, h, SW_TQ, SW_D), k4 = LOOM_SHAPE(SW_B, hk, SW_TK, SW_D);
    loom_shape v4 = LOOM_SHAPE(SW_B, hv, SW_TK, SW_DV);
    loom_shape q3 = LOOM_SHAPE(h, SW_TQ, SW_D), k3 = LOOM_SHAPE(hk, SW_TK, SW_D);
    loom_shape v3 = LOOM_SHAPE(hv, SW_TK, SW_DV);
    sweep_case(LOOM_F32, q4, k4, v4, MASK_NONE, AT_EXACT);
    sweep_case(LOOM_F32, q3, k3, v3, MASK_NONE, AT_EXACT);
    for (int kind = MASK_BOOL; kind <= MASK_U8; kind++)
      for (int at = AT_EXACT; at <= AT_TOO_MANY; at++) {
        sweep_case(LOOM_F32, q4, k4, v4, (sweep_mask)kind, (sweep_at)at);
        if (i < 2 || i == 5) sweep_case(LOOM_F32, q3, k3, v3, (sweep_mask)kind, (sweep_at)at);
      }
  }
  /* rank 2; ranks 4 with batch dims that broadcast (k's and v's 1) or not */
  loom_shape q2 = LOOM_SHAPE(SW_TQ, SW_D), k2 = LOOM_SHAPE(SW_TK, SW_D),
             v2 = LOOM_SHAPE(SW_TK, SW_DV);
  sweep_case(LOOM_F32, q2, k2, v2, MASK_NONE, AT_EXACT);
  for (int kind = MASK_BOOL; kind <= MASK_U8; kind++)
    for (int at = AT_EXACT; at <= AT_TOO_MANY; at++)
      sweep_case(LOOM_F32, q2, k2, v2, (sweep_mask)kind, (sweep_at)at);
  loom_shape qb = LOOM_SHAPE(SW_B, 4, SW_TQ, SW_D);
  for (int kind = MASK_NONE; kind <= MASK_F32; kind++) {
    sweep_case(LOOM_F32, qb, LOOM_SHAPE(1, 2, SW_TK, SW_D), LOOM_SHAPE(SW_B, 2, SW_TK, SW_DV),
               (sweep_mask)kind, AT_KEYS);
    sweep_case(LOOM_F32, LOOM_SHAPE(1, 4, SW_TQ, SW_D), LOOM_SHAPE(SW_B, 4, SW_TK, SW_D),
               LOOM_SHAPE(1, 4, SW_TK, SW_DV), (sweep_mask)kind, AT_EXACT);
    sweep_case(LOOM_F32, qb, LOOM_SHAPE(3, 4, SW_TK, SW_D), LOOM_SHAPE(3, 4, SW_TK, SW_DV),
               (sweep_mask)kind, AT_ROWS);
  }
  /* F64 (the composition) and BF16 (an F32 mask added, then rounded) */
  for (int kind = MASK_NONE; kind <= MASK_U8; kind++)
    for (int at = AT_EXACT; at <= AT_WRONG_TK; at++) {
      sweep_case(LOOM_F64, LOOM_SHAPE(SW_B, 4, SW_TQ, SW_D), LOOM_SHAPE(SW_B, 2, SW_TK, SW_D),
                 LOOM_SHAPE(SW_B, 2, SW_TK, SW_DV), (sweep_mask)kind, (sweep_at)at);
      if (at == AT_ROWS || at == AT_WRONG_TK)
        sweep_case(LOOM_BF16, LOOM_SHAPE(SW_B, 2, SW_TQ, SW_D), LOOM_SHAPE(SW_B, 2, SW_TK, SW_D),
                   LOOM_SHAPE(SW_B, 2, SW_TK, SW_DV), (sweep_mask)kind, (sweep_at)at);
    }
  printf("attention's arguments: %d cases computed, %d refused\n", sweep_computed, sweep_refused);
}

/* The refusals the sweep does not reach, each naming what was passed; a
 * scale of LOOM_ZERO is a real zero (every key weighs alike). */
static void test_argument_errors(void) {
  LOOM_NO_GRAD LOOM_SCOPE {
    loom_device dev = test_device();
    loom_tensor *q = loom_ones(LOOM_SHAPE(2, 3, 4), LOOM_F32, dev);
    loom_tensor *k = loom_ones(LOOM_SHAPE(2, 5, 4), LOOM_F32, dev);
    struct {
      loom_tensor *result;
      loom_status status;
      const char *message;
    } rows[] = {
        {loom_scaled_dot_product_attention(q, loom_ones(LOOM_SHAPE(1, 2, 5, 4), LOOM_F32, dev), k,
                                           NULL, false, 0),
         LOOM_ERR_SHAPE, "q [2,3,4], k [1,2,5,4], v [2,5,4]: need [..., T, D] each, the same rank"},
        {loom_scaled_dot_product_attention(loom_ones(LOOM_SHAPE(4), LOOM_F32, dev), k, k, NULL,
                                           false, 0),
         LOOM_ERR_SHAPE, "q [4], k [2,5,4], v [2,5,4]: need [..., T, D] each"},
        {loom_scaled_dot_product_attention(q, loom_ones(LOOM_SHAPE(2, 5, 3), LOOM_F32, dev), k,
                                           NULL, false, 0),
         LOOM_ERR_SHAPE, "q and k need the same last dim, k and v the same length"},
        {loom_scaled_dot_product_attention(q, k, loom_ones(LOOM_SHAPE(2, 6, 4), LOOM_F32, dev),
                                           NULL, false, 0),
         LOOM_ERR_SHAPE, "q and k need the same last dim, k and v the same length"},
        {loom_scaled_dot_product_attention(q, loom_cast(k, LOOM_F64), k, NULL, false, 0),
         LOOM_ERR_DTYPE, "q is f32, k f64, v f32: q, k and v need one dtype"},
        {loom_scaled_dot_product_attention(q, k, loom_cast(k, LOOM_BF16), NULL, false, 0),
         LOOM_ERR_DTYPE, "q is f32, k f32, v bf16: q, k and v need one dtype"},
        {loom_scaled_dot_product_attention(loom_cast(q, LOOM_I32), loom_cast(k, LOOM_I32),
                                           loom_cast(k, LOOM_I32), NULL, false, 0),
         LOOM_ERR_DTYPE, "q is i32; attention needs floats"},
        {loom_scaled_dot_product_attention(q, k, k, loom_ones(LOOM_SHAPE(3, 5), LOOM_BOOL, dev),
                                           true, 0),
         LOOM_ERR_VALUE, "a mask and causal together"},
        {loom_scaled_dot_product_attention(q, k, k, NULL, false, -1), LOOM_ERR_VALUE,
         "scale -1 is not a finite value >= 0"},
        {loom_scaled_dot_product_attention(q, k, k, NULL, false, NAN), LOOM_ERR_VALUE,
         "scale nan is not a finite value >= 0"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
      const char *msg = loom_error_message(rows[i].result);
      CHECK_EQ_INT(loom_status_of(rows[i].result), rows[i].status);
      CHECK_MSG(msg && !strncmp(msg, "loom_scaled_dot_product_attention: ", 35) &&
                    strstr(msg, rows[i].message),
                "row %zu: %s, want %s", i, msg ? msg : "(none)", rows[i].message);
    }
    double kv[2 * 5 * 4], got[2 * 3 * 4];
    for (int i = 0; i < 40; i++) kv[i] = i % 7;
    loom_tensor *keys = loom_from_data(kv, LOOM_SHAPE(2, 5, 4), LOOM_F64, dev);
    loom_tensor *flat = loom_scaled_dot_product_attention(loom_cast(q, LOOM_F64), keys, keys, NULL,
                                                          false, LOOM_ZERO);
    CHECK_OK(loom_copy_to_host(flat, got, sizeof got));
    for (int b = 0; b < 2; b++)
      for (int e = 0; e < 4; e++) {
        double mean = 0;
        for (int j = 0; j < 5; j++) mean += kv[(b * 5 + j) * 4 + e] / 5;
        for (int i = 0; i < 3; i++) CHECK_NEAR(got[(b * 3 + i) * 4 + e], mean, 1e-12);
      }
  }
  loom_clear_error();
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device()));
  test_split_chunk();
  test_mha_layer();
  test_topk_and_sampling();
  test_sort();
  test_slice_update();
  check_attention("plain", 2, 3, 3, 17, 8, false, false);
  check_attention("causal", 2, 2, 2, 33, 16, true, false);
  check_attention("grouped, causal", 1, 8, 2, 20, 8, true, false);
  check_attention("padding mask", 3, 2, 2, 12, 8, false, true);
  gcase cases[] = {
      {"sdpa causal",
       sdpa_causal,
       3,
       {LOOM_SHAPE(1, 2, 5, 3), LOOM_SHAPE(1, 2, 5, 3), LOOM_SHAPE(1, 2, 5, 3)},
       ANY},
      {"sdpa grouped",
       sdpa_grouped,
       3,
       {LOOM_SHAPE(1, 4, 3, 2), LOOM_SHAPE(1, 2, 4, 2), LOOM_SHAPE(1, 2, 4, 2)},
       ANY},
      {"gelu_tanh", gelu_tanh, 1, {LOOM_SHAPE(3, 5)}, ANY},
      {"slice_update", slice_update_at, 2, {LOOM_SHAPE(2, 6, 3), LOOM_SHAPE(2, 3, 3)}, ANY},
      {"slice_update row", slice_update_at, 2, {LOOM_SHAPE(2, 6, 3), LOOM_SHAPE(2, 1, 3)}, ANY},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) LOOM_SCOPE {
      gradcheck(&cases[i]);
    }
  test_argument_sweep();
  test_argument_errors();
  test_scores_fused();
  test_fused();
  test_fused_grads();
  return check_report();
}
