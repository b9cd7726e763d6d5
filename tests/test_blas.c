/* OpenBLAS's kernels (runtime/blas.c): the core rule as a table (a core older
 * than the CPU's vector units is replaced; one that fits, a newer one or another
 * vendor's is kept), switching cores in this process (then a GEMM against a
 * double loop), and what loom_blas_info reports, with and without the user's
 * OPENBLAS_CORETYPE (CTest runs this suite both ways). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "loom.h"
#include "runtime/blas.h"

char *openblas_get_corename(void);

static void test_rule(void) {
  const lm_cpu_flags none = {false, false, false}, avx2 = {true, false, false},
                     avx512 = {true, true, false}, bf16 = {true, true, true};
  static const struct {
    const char *reported;
    int flags; /* 0 none, 1 avx2, 2 avx512, 3 avx512 + bf16 */
    const char *want;
  } rows[] = {
      {"Prescott", 3, "Cooperlake"}, /* Emerald Rapids under 0.3.21 */
      {"Prescott", 2, "SkylakeX"},
      {"Prescott", 1, "Haswell"},
      {"Prescott", 0, NULL},
      {"Core2", 2, "SkylakeX"},
      {"Nehalem", 1, "Haswell"},
      {"Sandybridge", 1, "Haswell"},
      {"sandybridge", 2, "SkylakeX"},
      {"Generic", 1, "Haswell"},
      {"Haswell", 1, NULL},
      {"Haswell", 2, NULL}, /* an AVX2 build's choice: kept */
      {"SkylakeX", 3, NULL},
      {"Cooperlake", 3, NULL},
      {"SapphireRapids", 3, NULL},
      {"Zen", 2, NULL}, /* another vendor's tuning: kept */
      {NULL, 2, NULL},
  };
  const lm_cpu_flags table[4] = {none, avx2, avx512, bf16};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const char *got = lm_blas_core_for(rows[i].reported, table[rows[i].flags]);
    CHECK_MSG((got == NULL && rows[i].want == NULL) ||
                  (got && rows[i].want && strcmp(got, rows[i].want) == 0),
              "%s with flags %d: got %s, want %s", rows[i].reported ? rows[i].reported : "NULL",
              rows[i].flags, got ? got : "NULL", rows[i].want ? rows[i].want : "NULL");
  }
}

/* Whether a core's kernels are narrower than the CPU's vectors (then loom's
 * GEMM takes every product under LOOM_GEMM=auto). */
static void test_narrow(void) {
  const lm_cpu_flags none = {false, false, false}, avx2 = {true, false, false},
                     avx512 = {true, true, false}, bf16 = {true, true, true};
  static const struct {
    const char *core;
    int flags; /* as in test_rule */
    bool narrow;
  } rows[] = {
      {"Haswell", 3, true}, /* OPENBLAS_CORETYPE=Haswell on a Zen 5 or a Xeon */
      {"Haswell", 2, true},     {"zen", 2, true},
      {"Haswell", 1, false},    {"Zen", 1, false},
      {"SkylakeX", 3, false},   {"Cooperlake", 3, false},
      {"SkylakeX", 2, false},   {"SapphireRapids", 3, false},
      {"Prescott", 1, true},    {"Prescott", 0, false},
      {"Sandybridge", 2, true}, {"Piledriver", 1, true},
      {"Generic", 1, true},     {"unknown", 3, false},
      {"Zen7", 3, false}, /* not in the table */
      {NULL, 3, false},
  };
  const lm_cpu_flags table[4] = {none, avx2, avx512, bf16};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    CHECK_MSG(lm_blas_core_narrow(rows[i].core, table[rows[i].flags]) == rows[i].narrow,
              "%s with flags %d: narrow should be %d", rows[i].core ? rows[i].core : "NULL",
              rows[i].flags, rows[i].narrow);
  /* and what loom_gemm_choice says follows it, and LOOM_GEMM */
  const char *why = NULL, *choice = loom_gemm_choice(&why);
  printf("gemm: %s (%s)\n", choice, why);
  const char *force = getenv("LOOM_GEMM");
  if (!force || !*force) CHECK_STR_EQ(choice, lm_blas_narrow_here() ? "loom" : "auto");
  CHECK(why && *why);
  char saved[64] = "";
  if (force) snprintf(saved, sizeof saved, "%s", force); /* setenv may move the old value */
  setenv("LOOM_GEMM", "blas", 1);
  CHECK_STR_EQ(loom_gemm_choice(NULL), "blas");
  setenv("LOOM_GEMM", "fast", 1);
  CHECK_STR_EQ(loom_gemm_choice(&why), "invalid");
  CHECK_STR_CONTAINS(why, "LOOM_ERR_VALUE");
  if (force)
    setenv("LOOM_GEMM", saved, 1);
  else
    unsetenv("LOOM_GEMM");
}

/* C = A @ B through loom on whatever core OpenBLAS runs, against doubles. */
static double gemm_error(void) {
  enum { M = 67, K = 129, N = 45 };
  static float a[M * K], b[K * N], c[M * N];
  for (int i = 0; i < M * K; i++) a[i] = (float)sin(i * 0.37);
  for (int i = 0; i < K * N; i++) b[i] = (float)cos(i * 0.11);
  double worst = INFINITY;
  LOOM_SCOPE {
    loom_tensor *ta = loom_from_data(a, LOOM_SHAPE(M, K), LOOM_F32, LOOM_CPU);
    loom_tensor *tb = loom_from_data(b, LOOM_SHAPE(K, N), LOOM_F32, LOOM_CPU);
    if (loom_copy_to_host(loom_matmul(ta, tb), c, sizeof c) == LOOM_OK) {
      worst = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double s = 0, sq = 0;
          for (int k = 0; k < K; k++) {
            double t = (double)a[i * K + k] * b[k * N + j];
            s += t, sq += t * t;
          }
          double tol = check_sum_tolerance(true, K, sq, s);
          worst = fmax(worst, fabs(c[i * N + j] - s) / tol);
        }
    }
  }
  return worst;
}

static void test_switching(void) {
  char original[64];
  snprintf(original, sizeof original, "%s", openblas_get_corename());
  CHECK_MSG(gemm_error() <= 1, "a GEMM on %s is off", original);
  lm_cpu_flags host = lm_cpu_flags_host();
  if (!host.avx2_fma) {
    printf("SKIP switching: this CPU has no AVX2\n");
    return;
  }
  if (!lm_blas_use_core("Haswell")) {
    printf("SKIP switching: this OpenBLAS is built for one core (%s)\n", original);
    return;
  }
  CHECK_STR_EQ(openblas_get_corename(), "Haswell");
  CHECK_MSG(gemm_error() <= 1, "a GEMM on Haswell kernels is off");
  CHECK(lm_blas_use_core(original));
  CHECK_MSG(strcasecmp(openblas_get_corename(), original) == 0, "back on %s, not %s",
            openblas_get_corename(), original);
  CHECK_MSG(gemm_error() <= 1, "a GEMM back on %s is off", original);
}

static void test_info(void) {
  const char *library = NULL, *version = NULL, *core = NULL, *reason = NULL;
  loom_blas_info(&library, &version, &core, &reason);
  CHECK(library && strstr(library, "blas") != NULL);
  CHECK(version && strstr(version, "OpenBLAS") != NULL);
  CHECK(core && *core && reason && *reason);
  printf("blas: %s, core %s (%s)\n", library, core, reason);
  const char *user = getenv("OPENBLAS_CORETYPE");
  if (user && *user) { /* the user's choice wins, and is named */
    CHECK_STR_CONTAINS(reason, "(yours)");
    CHECK_MSG(strcasecmp(core, user) == 0, "OPENBLAS_CORETYPE=%s, core %s", user, core);
  } else {
    lm_cpu_flags host = lm_cpu_flags_host();
    CHECK_MSG(lm_blas_core_for(core, host) == NULL, "core %s is older than this CPU", core);
  }
  loom_blas_info(NULL, NULL, NULL, NULL); /* every pointer may be NULL */
}

int main(void) {
  test_rule();
  test_narrow();
  test_info();
  test_switching();
  return check_report();
}
