/* Counter-based random numbers: keys, folds, splits, and draws bit-identical to
 * the reference Philox 4x32-10 in base/philox.h. */
#include <math.h>
#include <string.h>

#include "base/philox.h"
#include "check.h"
#include "loom.h"
#include "ref.h"

static loom_key ref_fold(loom_key k, uint64_t d) {
  uint32_t ctr[4] = {(uint32_t)d, (uint32_t)(d >> 32), 0, 1}, out[4];
  lm_philox4x32(ctr, k.k, out);
  return (loom_key){{out[0], out[1]}};
}

static void test_keys(void) {
  const uint64_t seeds[] = {0, 1, 42, 0xdeadbeefcafef00dULL, UINT64_MAX};
  for (int i = 0; i < 5; i++) {
    loom_key k = loom_key_new(seeds[i]);
    CHECK_EQ_INT(k.k[0], (uint32_t)seeds[i]);
    CHECK_EQ_INT(k.k[1], (uint32_t)(seeds[i] >> 32));
    const uint64_t ds[] = {0, 1, 7, 1ULL << 32, 0x123456789abcULL};
    for (int j = 0; j < 5; j++) {
      loom_key f = loom_key_fold(k, ds[j]), e = ref_fold(k, ds[j]);
      CHECK_EQ_INT(f.k[0], e.k[0]);
      CHECK_EQ_INT(f.k[1], e.k[1]);
    }
    loom_key out[6];
    loom_key_split(k, out, 6);
    for (int j = 0; j < 6; j++) {
      loom_key e = loom_key_fold(k, (uint64_t)j);
      CHECK(out[j].k[0] == e.k[0] && out[j].k[1] == e.k[1]);
    }
  }
  loom_key a = loom_key_fold(loom_key_new(5), 1), b = loom_key_fold(loom_key_new(5), 2);
  CHECK(a.k[0] != b.k[0] || a.k[1] != b.k[1]);
}

static void test_uniform_bits(void) {
  const loom_shape shapes[] = {LOOM_SHAPE(1000), LOOM_SHAPE(7, 13), LOOM_SHAPE(2, 3, 17),
                               LOOM_SHAPE0, LOOM_SHAPE(0, 5)};
  for (int si = 0; si < 5; si++) {
    loom_key key = loom_key_new(1234 + (uint64_t)si);
    int64_t n = ref_shape_numel(shapes[si]);
    /* F32 */
    loom_tensor *t = loom_rand_key(key, shapes[si], LOOM_F32, LOOM_CPU);
    CHECK_EQ_INT(loom_dtype_of(t), LOOM_F32);
    CHECK(ref_shape_eq(loom_shape_of(t), shapes[si]));
    float *got = malloc((size_t)(n ? n : 1) * sizeof(float));
    CHECK_OK(loom_copy_to_host(t, got, (size_t)n * sizeof(float)));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      float e = lm_philox_uniform_f32(key.k, (uint64_t)i, 0);
      if (memcmp(&e, &got[i], 4) != 0 && bad++ < 3)
        printf("  rand F32 element %lld: expected %.9g got %.9g\n", (long long)i, e, got[i]);
      if (!(got[i] >= 0.0f && got[i] < 1.0f)) bad++;
    }
    CHECK_MSG(bad == 0, "rand_key F32 shape %d: %d elements differ from lm_philox_uniform_f32", si,
              bad);
    free(got);
    loom_free(t);
    /* F64 */
    t = loom_rand_key(key, shapes[si], LOOM_F64, LOOM_CPU);
    CHECK_EQ_INT(loom_dtype_of(t), LOOM_F64);
    double *gd = malloc((size_t)(n ? n : 1) * sizeof(double));
    CHECK_OK(loom_copy_to_host(t, gd, (size_t)n * sizeof(double)));
    bad = 0;
    for (int64_t i = 0; i < n; i++) {
      double e = lm_philox_uniform_f64(key.k, (uint64_t)i, 0);
      if (memcmp(&e, &gd[i], 8) != 0 && bad++ < 3)
        printf("  rand F64 element %lld: expected %.17g got %.17g\n", (long long)i, e, gd[i]);
    }
    CHECK_MSG(bad == 0, "rand_key F64 shape %d: %d elements differ", si, bad);
    free(gd);
    loom_free(t);
  }
}

static double ref_randn(loom_key key, uint64_t i, bool f64) {
  if (f64) {
    double u1 = lm_philox_uniform_f64(key.k, i, 0), u2 = lm_philox_uniform_f64(key.k, i, 1);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
  }
  double u1 = lm_philox_uniform_f32(key.k, i, 0), u2 = lm_philox_uniform_f32(key.k, i, 1);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

static void test_normal(void) {
  const int64_t n = 100000;
  for (int f64 = 0; f64 < 2; f64++) {
    loom_key key = loom_key_new(99 + (uint64_t)f64);
    loom_dtype d = f64 ? LOOM_F64 : LOOM_F32;
    loom_tensor *t = loom_randn_key(key, LOOM_SHAPE(n), d, LOOM_CPU);
    CHECK_EQ_INT(loom_dtype_of(t), d);
    ref_t *g = ref_from_loom(t);
    CHECK(g != NULL);
    if (g) {
      int bad = 0;
      double s = 0, s2 = 0;
      for (int64_t i = 0; i < n; i++) {
        double e = ref_randn(key, (uint64_t)i, f64), x = g->data[i];
        double tol = f64 ? 1e-10 * (1 + fabs(e)) : 1e-5 * (1 + fabs(e));
        if (!(fabs(e - x) <= tol) && bad++ < 3)
          printf("  randn %s element %lld: expected %.9g got %.9g\n", ref_dtype_str(d),
                 (long long)i, e, x);
        s += x, s2 += x * x;
      }
      CHECK_MSG(bad == 0, "randn_key %s: %d elements differ from the Box-Muller reference",
                ref_dtype_str(d), bad);
      double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
      CHECK_NEAR(mean, 0.0, 0.02);
      CHECK_NEAR(sd, 1.0, 0.02);
      ref_free(g);
    }
    loom_free(t);
  }
}

static void test_bernoulli(void) {
  const double ps[] = {0.3, 0.0, 1.0, 0.75};
  for (int pi = 0; pi < 4; pi++) {
    loom_key key = loom_key_new(500 + (uint64_t)pi);
    loom_tensor *t = loom_bernoulli_key(key, ps[pi], LOOM_SHAPE(40, 50), LOOM_CPU);
    CHECK_EQ_INT(loom_dtype_of(t), LOOM_BOOL);
    uint8_t got[2000];
    CHECK_OK(loom_copy_to_host(t, got, sizeof got));
    int bad = 0, ones = 0;
    for (int i = 0; i < 2000; i++) {
      uint8_t e = lm_philox_uniform_f32(key.k, (uint64_t)i, 0) < (float)ps[pi];
      if (got[i] != e) bad++;
      ones += got[i] != 0;
    }
    CHECK_MSG(bad == 0, "bernoulli p=%g: %d elements differ", ps[pi], bad);
    CHECK_NEAR(ones / 2000.0, ps[pi], 0.05);
    loom_free(t);
  }
}

static void test_determinism_and_fusion(void) {
  loom_key key = loom_key_new(2024);
  /* same key -> same bits; different key -> different */
  loom_tensor *a = loom_rand_key(key, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU);
  loom_tensor *b = loom_rand_key(key, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU);
  loom_tensor *c = loom_rand_key(loom_key_fold(key, 1), LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU);
  ref_t *ra = ref_from_loom(a), *rb = ref_from_loom(b), *rc = ref_from_loom(c);
  CHECK(ra && rb && rc);
  if (ra && rb && rc) {
    CHECK(memcmp(ra->data, rb->data, sizeof(double) * 2048) == 0);
    CHECK(memcmp(ra->data, rc->data, sizeof(double) * 2048) != 0);
    /* fused into a chain: rand * 2 + 1 */
    loom_tensor *f = loom_add_s(
        TK(loom_mul_s(TK(loom_rand_key(key, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU)), 2)), 1);
    TK(f);
    ref_t *e1 = ref_mul_s(ra, 2), *e2 = ref_add_s(e1, 1);
    REF_CHECK("rand*2+1 fused", e2, f, 0, 0);
    /* a transposed view of a draw */
    loom_tensor *tr =
        TK(loom_transpose(TK(loom_rand_key(key, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU)), 0, 1));
    ref_t *etr = ref_transpose(ra, 0, 1);
    REF_CHECK("transpose(rand)", etr, tr, 0, 0);
    /* a slice of a draw, and a reduction over it */
    loom_tensor *sl =
        TK(loom_slice(TK(loom_rand_key(key, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU)), 1, 3, 30, 4));
    ref_t *esl = ref_slice(ra, 1, 3, 30, 4);
    REF_CHECK("slice(rand)", esl, sl, 0, 0);
    const int ax[] = {0};
    loom_tensor *sm =
        TK(loom_sum(TK(loom_rand_key(key, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU)), ax, 1, false));
    ref_t *esm = ref_sum(ra, ax, 1, false);
    REF_CHECK("sum(rand)", esm, sm, 1e-5, 1e-5);
    /* two draws in one graph */
    loom_tensor *two = TK(
        loom_sub(TK(loom_rand_key(key, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU)),
                 TK(loom_rand_key(loom_key_fold(key, 1), LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CPU))));
    ref_t *etwo = ref_sub(ra, rc);
    REF_CHECK("rand(k) - rand(fold(k,1))", etwo, two, 0, 0);
    ref_free(e1), ref_free(e2), ref_free(etr), ref_free(esl), ref_free(esm), ref_free(etwo);
  }
  ref_free(ra), ref_free(rb), ref_free(rc);
  loom_free(a), loom_free(b), loom_free(c);
  ref_release_all();
}

static void test_global_seed(void) {
  loom_manual_seed(7);
  loom_key k1 = loom_next_key();
  loom_tensor *a = loom_rand(LOOM_SHAPE(100), LOOM_F32, LOOM_CPU);
  loom_manual_seed(7);
  loom_key k2 = loom_next_key();
  loom_tensor *b = loom_rand(LOOM_SHAPE(100), LOOM_F32, LOOM_CPU);
  loom_tensor *c = loom_rand(LOOM_SHAPE(100), LOOM_F32, LOOM_CPU);
  CHECK(k1.k[0] == k2.k[0] && k1.k[1] == k2.k[1]);
  float fa[100], fb[100], fc[100];
  CHECK_OK(loom_copy_to_host(a, fa, sizeof fa));
  CHECK_OK(loom_copy_to_host(b, fb, sizeof fb));
  CHECK_OK(loom_copy_to_host(c, fc, sizeof fc));
  CHECK(memcmp(fa, fb, sizeof fa) == 0);
  CHECK(memcmp(fb, fc, sizeof fb) != 0);
  loom_manual_seed(8);
  loom_tensor *d = loom_randn(LOOM_SHAPE(100), LOOM_F64, LOOM_CPU);
  loom_manual_seed(8);
  loom_tensor *e = loom_randn(LOOM_SHAPE(100), LOOM_F64, LOOM_CPU);
  double dd[100], de[100];
  CHECK_OK(loom_copy_to_host(d, dd, sizeof dd));
  CHECK_OK(loom_copy_to_host(e, de, sizeof de));
  CHECK(memcmp(dd, de, sizeof dd) == 0);
  loom_free(a), loom_free(b), loom_free(c), loom_free(d), loom_free(e);
  /* integer dtypes are refused */
  const loom_dtype ints[] = {LOOM_I32, LOOM_I64, LOOM_U8, LOOM_BOOL};
  for (int i = 0; i < 4; i++) {
    loom_tensor *t = loom_rand_key(loom_key_new(1), LOOM_SHAPE(3), ints[i], LOOM_CPU);
    CHECK_STATUS(t, LOOM_ERR_DTYPE);
    loom_free(t);
    t = loom_randn(LOOM_SHAPE(3), ints[i], LOOM_CPU);
    CHECK_STATUS(t, LOOM_ERR_DTYPE);
    loom_free(t);
  }
  loom_clear_error();
}

static void test_cuda_identical(void) {
  if (!loom_cuda_available()) {
    printf("skip: CUDA not available (%s): CPU/CUDA bit-identity not checked\n",
           loom_cuda_unavailable_reason() ? loom_cuda_unavailable_reason() : "?");
    return;
  }
  loom_key key = loom_key_new(31337);
  loom_tensor *c = TK(loom_rand_key(key, LOOM_SHAPE(1000), LOOM_F32, LOOM_CPU));
  loom_tensor *g =
      TK(loom_to(TK(loom_rand_key(key, LOOM_SHAPE(1000), LOOM_F32, LOOM_CUDA(0))), LOOM_CPU));
  ref_t *rc = ref_from_loom(c);
  if (rc) REF_CHECK("rand CUDA == CPU", rc, g, 0, 0);
  ref_free(rc);
  ref_release_all();
}

int main(void) {
  test_keys();
  test_uniform_bits();
  test_normal();
  test_bernoulli();
  test_determinism_and_fusion();
  test_global_seed();
  test_cuda_identical();
  return check_report();
}
