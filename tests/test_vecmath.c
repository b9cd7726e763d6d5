/*
 * The LLVM backend's vector math (backends/llvm/vecmath_*.c) against double
 * precision libm: for each of exp log sin cos tanh erf pow and each float
 * dtype, sweeps of about a million points over the function's range plus its
 * special values, through a compiled kernel out[i] = f(x[i]) (or pow(x[i], y[i])).
 *
 * Tolerances: F32 within 2e-7 relative of the double result (where that is a
 * normal float; below, within one subnormal step); F64 within 1e-15 relative
 * (about 4.5 ulp; libm's own error is part of that). Special values (NaN,
 * infinities, signed zeros, C99's pow cases) must match libm exactly. Prints
 * the largest error found per function and range, then checks that every
 * function's loop was vectorized (LOOM_DUMP assembly) and calls nothing.
 * Last, the vectorized float MAX/MIN/ARGMAX/ARGMIN reductions against their
 * scalar definitions, bit for bit (NaN payloads and signed zeros included).
 * Ends with "N passed, N failed"; exits non-zero on a failure.
 */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/llvm/llvm_backend.h"
#include "ir/kernel.h"
#include "scratch.h"

static int passed, failed;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond) {                                                                                    \
      passed++;                                                                                    \
    } else {                                                                                       \
      failed++;                                                                                    \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

enum { NMAX = 1 << 20 };

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rng_next(void) { /* xorshift64*: deterministic test data */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}
static double uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(rng_next() >> 11) * 0x1p-53);
}
/* |x| log-uniform in [lo, hi], with a random sign when `signed_` */
static double log_uniform(double lo, double hi, bool signed_) {
  double x = exp(uniform(log(lo), log(hi)));
  return signed_ && (rng_next() & 1) ? -x : x;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------------ kernels */

typedef struct kernel {
  lk_kernel k;
  lk_inst inst[16];
} kernel;

static void kernel_init(kernel *kk, lk_op op, loom_dtype dt) {
  memset(kk, 0, sizeof *kk);
  bool binary = op == LK_POW;
  kk->k = (lk_kernel){.ndim = 1,
                      .dom = {NMAX},
                      .nouter = 1,
                      .reduce = LK_RED_NONE,
                      .acc_dtype = dt,
                      .out_dtype = dt,
                      .nslots = binary ? 3 : 2,
                      .inst = kk->inst};
  int n = 0;
  kk->inst[n++] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, 0, 0};
  kk->inst[n++] = (lk_inst){LK_LOAD, dt, 0, -1, -1, 1, 0, 0};
  if (binary) kk->inst[n++] = (lk_inst){LK_LOAD, dt, 0, -1, -1, 2, 0, 0};
  kk->inst[n] = (lk_inst){op, dt, 1, binary ? 2 : -1, -1, 0, 0, 0};
  n++;
  kk->k.ninst = kk->k.nbody = n;
  kk->k.value = kk->k.result = n - 1;
}

static lk_fn compile(const lk_kernel *k, const char *what) {
  char err[1024] = "";
  lk_fn fn = NULL;
  loom_status st = lm_llvm_compile(k, &fn, err, sizeof err);
  CHECK(st == LOOM_OK && fn, "%s: compile failed (%d): %s", what, (int)st, err);
  return st == LOOM_OK ? fn : NULL;
}

/* ------------------------------------------------------------------ the functions */

typedef struct fn_info {
  lk_op op;
  const char *name;
  double (*ref1)(double);
  double (*ref2)(double, double);
} fn_info;

static const fn_info FNS[] = {
    {LK_EXP, "exp", exp, NULL}, {LK_LOG, "log", log, NULL},    {LK_SIN, "sin", sin, NULL},
    {LK_COS, "cos", cos, NULL}, {LK_TANH, "tanh", tanh, NULL}, {LK_ERF, "erf", erf, NULL},
    {LK_POW, "pow", NULL, pow},
};

/* Buffers of one run: inputs as doubles (already rounded to the dtype). */
typedef struct run {
  const fn_info *fn;
  loom_dtype dt;
  lk_fn kfn;
  double *x, *y, *got;
  void *bx, *by, *bout; /* typed buffers */
  size_t n;
} run;

/* Rounds the inputs to the dtype, runs the kernel, reads the results back as doubles. */
static void execute(run *r) {
  bool f32 = r->dt == LOOM_F32;
  for (size_t i = 0; i < r->n; i++) {
    if (f32) {
      ((float *)r->bx)[i] = (float)r->x[i], r->x[i] = ((float *)r->bx)[i];
      ((float *)r->by)[i] = (float)r->y[i], r->y[i] = ((float *)r->by)[i];
    } else {
      ((double *)r->bx)[i] = r->x[i];
      ((double *)r->by)[i] = r->y[i];
    }
  }
  void *args[3] = {r->bout, r->bx, r->by};
  r->kfn(args, 0, (int64_t)r->n);
  for (size_t i = 0; i < r->n; i++)
    r->got[i] = f32 ? (double)((float *)r->bout)[i] : ((double *)r->bout)[i];
}

/* ------------------------------------------------------------------ comparison */

typedef struct stats {
  double max_rel; /* over results of normal magnitude */
  double at_x, at_y;
  size_t bad, checked;
  size_t first_bad;
} stats;

/* Error of one result against libm's double result (rounded to the dtype), or
 * -1 when a special value differs (NaN-ness, infinities, signed zeros). */
static double element_error(loom_dtype dt, double got, double want_d) {
  double want = dt == LOOM_F32 ? (double)(float)want_d : want_d;
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got) ? 0 : -1;
  if (isinf(want) || isinf(got)) return got == want ? 0 : -1;
  if (want == 0 && got == 0) return signbit(want) == signbit(got) ? 0 : -1;
  double smallest_normal = dt == LOOM_F32 ? FLT_MIN : DBL_MIN;
  if (fabs(want_d) >= smallest_normal) return fabs(got - want_d) / fabs(want_d);
  /* subnormal results: in units of the smallest subnormal, scaled so that the
   * tolerance below (a relative one) allows about one step */
  double step = dt == LOOM_F32 ? 0x1p-149 : 0x1p-1074;
  return fabs(got - want_d) <= 1.5 * step ? 0 : -1;
}

static double tolerance(loom_dtype dt) { return dt == LOOM_F32 ? 2e-7 : 1e-15; }

static void compare(const run *r, stats *s) {
  for (size_t i = 0; i < r->n; i++) {
    double want = r->fn->ref1 ? r->fn->ref1(r->x[i]) : r->fn->ref2(r->x[i], r->y[i]);
    double e = element_error(r->dt, r->got[i], want);
    s->checked++;
    if (e < 0 || e > tolerance(r->dt)) {
      if (!s->bad++) s->first_bad = i;
      if (s->bad <= 3)
        fprintf(stderr, "  %s %s(%.17g%s%.17g) = %.17g, libm %.17g\n",
                r->dt == LOOM_F32 ? "f32" : "f64", r->fn->name, r->x[i], r->fn->ref2 ? ", " : "",
                r->fn->ref2 ? r->y[i] : 0.0, r->got[i], want);
    }
    if (e > s->max_rel) s->max_rel = e, s->at_x = r->x[i], s->at_y = r->y[i];
  }
}

/* Fills x (and y) for sweep `which` of the function; returns the count, 0 when
 * the function has no such sweep. */
typedef size_t (*fill_fn)(run *r, int which, const char **label);

static size_t fill_exp(run *r, int which, const char **label) {
  bool f32 = r->dt == LOOM_F32;
  size_t n = NMAX;
  for (size_t i = 0; i < n; i++) {
    switch (which) {
    case 0:
      *label = "whole range";
      r->x[i] = f32 ? uniform(-104, 89) : uniform(-746, 710);
      break;
    case 1:
      *label = "|x| in [1e-30, 1]";
      r->x[i] = log_uniform(1e-30, 1, true);
      break;
    default: return 0;
    }
    r->y[i] = 0;
  }
  return n;
}

static size_t fill_log(run *r, int which, const char **label) {
  bool f32 = r->dt == LOOM_F32;
  size_t n = NMAX;
  for (size_t i = 0; i < n; i++) {
    switch (which) {
    case 0:
      *label = "x log-uniform over all positives";
      r->x[i] = f32 ? log_uniform(1e-45, 3e38, false) : log_uniform(5e-324, 1.7e308, false);
      break;
    case 1:
      *label = "x in [0.5, 2]";
      r->x[i] = uniform(0.5, 2);
      break;
    case 2:
      *label = "x = 1 +- [1e-12, 1e-2]";
      r->x[i] = 1 + log_uniform(1e-12, 1e-2, true);
      break;
    default: return 0;
    }
    r->y[i] = 0;
  }
  return n;
}

static size_t fill_trig(run *r, int which, const char **label) {
  bool f32 = r->dt == LOOM_F32;
  size_t n = NMAX;
  for (size_t i = 0; i < n; i++) {
    switch (which) {
    case 0:
      *label = "|x| <= 10";
      r->x[i] = uniform(-10, 10);
      break;
    case 1:
      *label = "|x| <= 1e5";
      r->x[i] = uniform(-1e5, 1e5);
      break;
    case 2:
      *label = "|x| in [1e-30, 1]";
      r->x[i] = log_uniform(1e-30, 1, true);
      break;
    case 3:
      *label = "|x| in [1e5, max] (Payne-Hanek)";
      r->x[i] = log_uniform(1e5, f32 ? 3.4e38 : 1.7e308, true);
      break;
    default: return 0;
    }
    r->y[i] = 0;
  }
  return n;
}

/* Functions that saturate: uniform over [-wide, wide], then log-spaced small
 * magnitudes up to `small` (where relative error is hardest). */
static size_t fill_saturating(run *r, int which, const char **label, double wide, double small,
                              const char *wide_label, const char *small_label) {
  size_t n = NMAX;
  if (which > 1) return 0;
  *label = which == 0 ? wide_label : small_label;
  for (size_t i = 0; i < n; i++) {
    r->x[i] = which == 0 ? uniform(-wide, wide) : log_uniform(1e-30, small, true);
    r->y[i] = 0;
  }
  return n;
}

static size_t fill_tanh(run *r, int which, const char **label) {
  return fill_saturating(r, which, label, 25, 2, "|x| <= 25", "|x| in [1e-30, 2]");
}

static size_t fill_erf(run *r, int which, const char **label) {
  return fill_saturating(r, which, label, 7, 1, "|x| <= 7", "|x| in [1e-30, 1]");
}

static size_t fill_pow(run *r, int which, const char **label) {
  bool f32 = r->dt == LOOM_F32;
  double limit = f32 ? 88 : 708; /* |y log x| up to about overflow */
  size_t n = NMAX;
  for (size_t i = 0; i < n; i++) {
    double x, y;
    switch (which) {
    case 0:
      *label = "x in [1e-10, 1e10], |y log x| <= overflow";
      x = log_uniform(1e-10, 1e10, false);
      y = uniform(-1, 1) * limit / fmax(fabs(log(x)), 1e-3);
      break;
    case 1:
      *label = "x in [0.5, 2], |y| <= 50";
      x = uniform(0.5, 2);
      y = uniform(-50, 50);
      break;
    case 2:
      *label = "x < 0, y integral";
      x = -log_uniform(1e-3, 1e3, false);
      y = floor(uniform(-60, 60));
      break;
    default: return 0;
    }
    r->x[i] = x, r->y[i] = y;
  }
  return n;
}

/* Special values: every one against libm, exactly for NaN/inf/zero results. */
static size_t fill_special(run *r, bool f32) {
  static const double xs[] = {
      0.0,     -0.0,    1.0,      -1.0,      0.5,     -0.5,      2.0,       -2.0,   3.0,
      -3.0,    0.1,     -0.1,     1e-300,    -1e-300, 1e300,     -1e300,    5e-324, -5e-324,
      1e-40,   -1e-40,  88.72,    89.0,      -103.9,  -104.0,    709.78,    709.79, -745.1,
      -745.2,  22.0,    -22.0,    9.0,       6.0,     -6.0,      3.9,       0.875,  1.75,
      2.75,    4.0,     5.95,     1e5,       -1e5,    1647099.0, 1647100,   1e22,   3.4e38,
      -3.4e38, 1.7e308, INFINITY, -INFINITY, NAN,     -NAN,      0.75,      1.5,    2.5,
      -2.5,    1e10,    -1e10,    1.5e-45,   1.2e-38, 0x1p-1022, 0x1p-1023, 100.0,  1e-5};
  size_t nx = sizeof xs / sizeof *xs;
  size_t n = 0;
  if (r->fn->op != LK_POW) {
    for (size_t i = 0; i < nx; i++) r->x[n] = xs[i], r->y[n++] = 0;
    return n;
  }
  static const double ys[] = {0.0,  -0.0, 1.0,    -1.0,       2.0,     -2.0,   3.0,      -3.0,
                              0.5,  -0.5, 2.5,    -2.5,       1e300,   -1e300, INFINITY, -INFINITY,
                              NAN,  1e10, 0x1p53, 0x1p53 + 2, -0x1p53, 1e-10,  -1e-10,   127.0,
                              -149, 1023, -1074,  7.0,        -7.0};
  size_t ny = sizeof ys / sizeof *ys;
  for (size_t i = 0; i < nx; i++)
    for (size_t j = 0; j < ny; j++) r->x[n] = xs[i], r->y[n++] = ys[j];
  (void)f32;
  return n;
}

static fill_fn filler(lk_op op) {
  switch (op) {
  case LK_EXP: return fill_exp;
  case LK_LOG: return fill_log;
  case LK_SIN:
  case LK_COS: return fill_trig;
  case LK_TANH: return fill_tanh;
  case LK_ERF: return fill_erf;
  default: return fill_pow;
  }
}

static void report(const run *r, const char *label, const stats *s) {
  double ulp = r->dt == LOOM_F32 ? 0x1p-23 : 0x1p-52;
  printf("%-4s %-5s %-42s max rel err %.3g (%.2f ulp)", r->dt == LOOM_F32 ? "f32" : "f64",
         r->fn->name, label, s->max_rel, s->max_rel / ulp);
  if (s->max_rel > 0) {
    printf(" at x=%.9g", s->at_x);
    if (r->fn->ref2) printf(" y=%.9g", s->at_y);
  }
  printf("%s\n", s->bad ? "  <-- FAILED" : "");
}

static void test_function(const fn_info *fn, loom_dtype dt, run *r) {
  kernel kk;
  kernel_init(&kk, fn->op, dt);
  char what[64];
  snprintf(what, sizeof what, "%s %s", fn->name, dt == LOOM_F32 ? "f32" : "f64");
  r->fn = fn;
  r->dt = dt;
  r->kfn = compile(&kk.k, what);
  if (!r->kfn) return;
  const char *label = "";
  for (int which = 0;; which++) {
    r->n = filler(fn->op)(r, which, &label);
    if (!r->n) break;
    execute(r);
    stats s = {0};
    compare(r, &s);
    report(r, label, &s);
    CHECK(!s.bad, "%s %s: %zu of %zu beyond tolerance", what, label, s.bad, s.checked);
  }
  r->n = fill_special(r, dt == LOOM_F32);
  execute(r);
  stats s = {0};
  compare(r, &s);
  report(r, "special values", &s);
  CHECK(!s.bad, "%s special values: %zu of %zu differ", what, s.bad, s.checked);
}

/* ------------------------------------------------------------------ vectorization */

typedef struct asm_counts {
  int zmm, ymm, packed, calls; /* packed: arithmetic on packed doubles/floats */
} asm_counts;

static asm_counts count_asm(const char *path) {
  asm_counts c = {0};
  FILE *f = fopen(path, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    if (strstr(line, "zmm")) c.zmm++;
    if (strstr(line, "ymm")) c.ymm++;
    bool packed = strstr(line, "pd\t") || strstr(line, "ps\t");
    bool arith = strstr(line, "add") || strstr(line, "sub") || strstr(line, "mul");
    if (packed && arith) c.packed++;
    if (strstr(line, "\tcall") || strstr(line, "\tjmp\t*")) c.calls++;
  }
  if (f) fclose(f);
  return c;
}

/* F32 loops over 1M elements: the assembly must use vector registers and call
 * nothing; also prints the time per element. */
static void test_vectorized(run *r) {
  char dir[] = "/tmp/loom_vecmath_XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp failed");
    return;
  }
  for (size_t f = 0; f < sizeof FNS / sizeof *FNS; f++) {
    for (int d = 0; d < 2; d++) {
      loom_dtype dt = d == 0 ? LOOM_F32 : LOOM_F64;
      kernel kk;
      kernel_init(&kk, FNS[f].op, dt);
      kk.k.dom[0] = NMAX - 1; /* a kernel not compiled above, so LOOM_DUMP sees it */
      setenv("LOOM_DUMP", dir, 1);
      lk_fn fn = compile(&kk.k, FNS[f].name);
      unsetenv("LOOM_DUMP");
      if (!fn) continue;
      char sym[36], path[600];
      lm_llvm_symbol_name(&kk.k, sym);
      snprintf(path, sizeof path, "%s/%s.s", dir, sym);
      asm_counts c = count_asm(path);
      size_t es = dt == LOOM_F32 ? 4 : 8;
      for (size_t i = 0; i < NMAX - 1; i++) {
        double x = uniform(0.1, 3);
        if (es == 4)
          ((float *)r->bx)[i] = (float)x, ((float *)r->by)[i] = 1.5f;
        else
          ((double *)r->bx)[i] = x, ((double *)r->by)[i] = 1.5;
      }
      void *args[3] = {r->bout, r->bx, r->by};
      fn(args, 0, NMAX - 1);
      double t0 = now_ms();
      for (int rep = 0; rep < 5; rep++) fn(args, 0, NMAX - 1);
      double ns = (now_ms() - t0) / 5 * 1e6 / (NMAX - 1);
      printf("vectorization: %s %-4s 1M elements: %4d zmm lines, %4d ymm lines, %3d packed "
             "arithmetic, %d calls; %.2f ns per element\n",
             dt == LOOM_F32 ? "f32" : "f64", FNS[f].name, c.zmm, c.ymm, c.packed, c.calls, ns);
      /* any SIMD width counts (a host without AVX has only xmm) */
      CHECK(c.packed > 0 && c.calls == 0, "%s %s: not vectorized (%d packed lines, %d calls)",
            FNS[f].name, dt == LOOM_F32 ? "f32" : "f64", c.packed, c.calls);
    }
  }
  check_remove_dir(dir);
}

/* ------------------------------------------------------------------ reductions */

/* The scalar definitions of ir/kernel.h, element by element in order. */
#define DEFINE_REF_REDUCE(NAME, T)                                                                 \
  static void NAME(lk_reduce red, const T *x, int64_t n, T *best_out, int64_t *index_out) {        \
    bool max = red == LK_RED_MAX || red == LK_RED_ARGMAX;                                          \
    T best = max ? (T)-INFINITY : (T)INFINITY;                                                     \
    int64_t index = 0;                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                              \
      bool beats = max ? x[i] > best : x[i] < best;                                                \
      if (red == LK_RED_MAX || red == LK_RED_MIN) {                                                \
        if (isnan(x[i]) || beats) best = x[i];                                                     \
      } else if (!isnan(best) && (isnan(x[i]) || beats)) {                                         \
        best = x[i], index = i;                                                                    \
      }                                                                                            \
    }                                                                                              \
    *best_out = best;                                                                              \
    *index_out = index;                                                                            \
  }
DEFINE_REF_REDUCE(ref_reduce_f32, float)
DEFINE_REF_REDUCE(ref_reduce_f64, double)

/* A NaN with a random payload and sign, as different producers make them. */
static double random_nan(loom_dtype dt, void *slot) {
  if (dt == LOOM_F32) {
    uint32_t b =
        0x7fc00000u | (uint32_t)(rng_next() & 0x3fffff) | (rng_next() & 1 ? 0x80000000u : 0);
    memcpy(slot, &b, 4);
  } else {
    uint64_t b = 0x7ff8000000000000ull | (rng_next() & 0x7ffffffffffffull) |
                 (rng_next() & 1 ? 0x8000000000000000ull : 0);
    memcpy(slot, &b, 8);
  }
  return NAN;
}

/* Row r of a [rows, n] test matrix: one of several hard cases. */
static void fill_row(loom_dtype dt, char *row, int64_t n, int kind) {
  size_t es = dt == LOOM_F32 ? 4 : 8;
  for (int64_t i = 0; i < n; i++) {
    double v;
    switch (kind) {
    case 0: v = uniform(-1, 1); break;                                 /* plain */
    case 1: v = -uniform(0, 1) * (double)(rng_next() % 3 != 0); break; /* max is a zero */
    case 2: v = (double)(int)(rng_next() % 5) - 2; break;              /* many ties */
    case 3: v = -INFINITY; break;
    case 4: v = (double)(rng_next() % 3) - 1; break; /* ties of +-1, 0 */
    default: v = uniform(-1e30, 1e30); break;
    }
    if (kind == 1 && v == 0 && (rng_next() & 1)) v = -0.0;
    if (kind == 4 && v == 0) v = rng_next() & 1 ? -0.0 : 0.0;
    if (es == 4)
      ((float *)row)[i] = (float)v;
    else
      ((double *)row)[i] = v;
  }
  if (kind >= 5) { /* NaNs: a few, at random places (kind 6: everywhere) */
    int64_t count = kind == 6 ? n : 1 + (int64_t)(rng_next() % 4);
    for (int64_t c = 0; c < count; c++)
      random_nan(dt, row + es * (size_t)(kind == 6 ? c : (int64_t)(rng_next() % (uint64_t)n)));
  }
  if (kind == 0 && n > 3 && (rng_next() & 1)) /* +inf somewhere */
    memcpy(row + es * (size_t)(rng_next() % (uint64_t)n),
           es == 4 ? (const void *)&(const float){INFINITY}
                   : (const void *)&(const double){INFINITY},
           es);
}

/* out[r] = red over x[r, :] with the reduced extent split in `nred` dims
 * (so ARGMAX's row-major index over several dims is covered too). */
static lk_fn reduce_kernel(kernel *kk, lk_reduce red, loom_dtype dt, int64_t rows, int64_t n,
                           int nred) {
  memset(kk, 0, sizeof *kk);
  bool arg = red == LK_RED_ARGMAX || red == LK_RED_ARGMIN;
  loom_dtype acc = arg ? LOOM_I64 : dt;
  kk->k = (lk_kernel){.ndim = 1 + nred,
                      .dom = {rows},
                      .nouter = 1,
                      .reduce = red,
                      .acc_dtype = acc,
                      .out_dtype = acc,
                      .nslots = 2,
                      .inst = kk->inst};
  int64_t inner = nred == 2 ? 8 : 1; /* the stride of dim 1 */
  kk->k.dom[1] = n / inner;
  if (nred == 2) kk->k.dom[2] = inner;
  int i = 0;
  /* offset = dim0 * n + dim1 * inner + dim2 */
  kk->inst[i++] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, 0, 0};
  kk->inst[i++] = (lk_inst){LK_CONST, LOOM_I64, -1, -1, -1, 0, n, 0};
  kk->inst[i++] = (lk_inst){LK_MUL, LOOM_I64, 0, 1, -1, 0, 0, 0};
  kk->inst[i++] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, 1, 0};
  kk->inst[i++] = (lk_inst){LK_CONST, LOOM_I64, -1, -1, -1, 0, inner, 0};
  kk->inst[i++] = (lk_inst){LK_MUL, LOOM_I64, 3, 4, -1, 0, 0, 0};
  kk->inst[i++] = (lk_inst){LK_ADD, LOOM_I64, 2, 5, -1, 0, 0, 0};
  int off = i - 1;
  if (nred == 2) {
    kk->inst[i++] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, 2, 0};
    kk->inst[i] = (lk_inst){LK_ADD, LOOM_I64, off, i - 1, -1, 0, 0, 0};
    off = i++;
  }
  kk->inst[i] = (lk_inst){LK_LOAD, dt, off, -1, -1, 1, 0, 0};
  kk->k.value = i++;
  kk->k.nbody = i;
  kk->inst[i] = (lk_inst){LK_ACC, acc, -1, -1, -1, 0, 0, 0};
  kk->k.result = i++;
  kk->k.ninst = i;
  return compile(&kk->k, "reduction");
}

/* Float MAX/MIN/ARGMAX/ARGMIN: bit-identical to the scalar definitions (NaN
 * payloads, signed zeros, first index of ties), over rows of every kind. */
static void test_reductions(void) {
  enum { ROWS = 64, KINDS = 7 };
  static const int64_t lengths[] = {1, 7, 16, 33, 1000, 1024};
  static const lk_reduce reds[] = {LK_RED_MAX, LK_RED_MIN, LK_RED_ARGMAX, LK_RED_ARGMIN};
  static const char *red_names[] = {"max", "min", "argmax", "argmin"};
  for (int d = 0; d < 2; d++) {
    loom_dtype dt = d == 0 ? LOOM_F32 : LOOM_F64;
    size_t es = dt == LOOM_F32 ? 4 : 8;
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
      int64_t n = lengths[li];
      char *x = malloc(es * ROWS * (size_t)n), *out = malloc(8 * ROWS);
      for (int r = 0; r < ROWS; r++) fill_row(dt, x + es * (size_t)(r * n), n, r % KINDS);
      for (size_t ri = 0; ri < 4; ri++) {
        for (int nred = 1; nred <= (n % 8 == 0 ? 2 : 1); nred++) {
          kernel kk;
          lk_fn fn = reduce_kernel(&kk, reds[ri], dt, ROWS, n, nred);
          if (!fn) continue;
          void *args[2] = {out, x};
          fn(args, 0, ROWS);
          int bad = -1;
          for (int r = 0; r < ROWS && bad < 0; r++) {
            int64_t index;
            char best[8];
            if (dt == LOOM_F32)
              ref_reduce_f32(reds[ri], (const float *)x + r * n, n, (float *)best, &index);
            else
              ref_reduce_f64(reds[ri], (const double *)x + r * n, n, (double *)best, &index);
            bool arg = ri >= 2;
            bool same =
                arg ? ((int64_t *)out)[r] == index : memcmp(out + es * (size_t)r, best, es) == 0;
            if (!same) bad = r;
          }
          CHECK(bad < 0, "%s %s over %lld (%d reduced dims): row %d (kind %d) differs",
                red_names[ri], dt == LOOM_F32 ? "f32" : "f64", (long long)n, nred, bad,
                bad % KINDS);
        }
      }
      free(x), free(out);
    }
  }
}

/* The [4096, 1024] row max the reduction work was measured on (printed only). */
static void time_row_max(void) {
  enum { R = 4096, C = 1024 };
  float *x = malloc(sizeof(float) * R * C);
  char *out = malloc(8 * R);
  for (size_t i = 0; i < (size_t)R * C; i++) x[i] = (float)uniform(-1, 1);
  for (size_t ri = 0; ri < 2; ri++) {
    lk_reduce red = ri == 0 ? LK_RED_MAX : LK_RED_ARGMAX;
    kernel kk;
    lk_fn fn = reduce_kernel(&kk, red, LOOM_F32, R, C, 1);
    if (!fn) continue;
    void *args[2] = {out, x};
    fn(args, 0, R);
    double best = 1e30;
    for (int rep = 0; rep < 10; rep++) {
      double t0 = now_ms();
      fn(args, 0, R);
      best = fmin(best, now_ms() - t0);
    }
    printf("reduction: f32 row %-6s over [4096, 1024]: %.3f ms per call\n",
           ri == 0 ? "max" : "argmax", best);
  }
  free(x), free(out);
}

/* LOOM_VECMATH_EXHAUSTIVE=<name>: instead of the suite, every float x with
 * |x| <= 104 (both signs) through the F32 kernel of that function, against
 * double libm; prints the largest relative error. Minutes, so not in ctest. */
static int exhaustive_f32(const char *name) {
  const fn_info *fn = NULL;
  for (size_t f = 0; f < sizeof FNS / sizeof *FNS; f++)
    if (!strcmp(FNS[f].name, name) && FNS[f].ref1) fn = &FNS[f];
  if (!fn) {
    fprintf(stderr, "no unary function %s\n", name);
    return 1;
  }
  kernel kk;
  kernel_init(&kk, fn->op, LOOM_F32);
  lk_fn kfn = compile(&kk.k, name);
  float *in = malloc(NMAX * sizeof(float)), *out = malloc(NMAX * sizeof(float));
  if (!kfn || !in || !out) return 1;
  const uint32_t last = 0x42D00000u; /* 104.0f */
  double worst = 0, at = 0;
  size_t bad = 0;
  for (uint32_t sign = 0; sign < 2; sign++) {
    for (uint64_t start = 0; start <= last; start += NMAX) {
      size_t n = 0;
      for (uint64_t b = start; b <= last && n < NMAX; b++, n++) {
        uint32_t u = (uint32_t)b | (sign << 31);
        memcpy(&in[n], &u, 4);
      }
      void *args[3] = {out, in, in};
      kfn(args, 0, (int64_t)n);
      for (size_t i = 0; i < n; i++) {
        double e = element_error(LOOM_F32, out[i], fn->ref1(in[i]));
        if (e < 0 || e > tolerance(LOOM_F32)) {
          if (bad++ < 5) fprintf(stderr, "  %s(%.9g) = %.9g\n", name, in[i], out[i]);
        }
        if (e > worst) worst = e, at = in[i];
      }
    }
  }
  printf("exhaustive f32 %s, |x| <= 104: max rel err %.3g (%.2f ulp) at x=%.9g, %zu beyond "
         "tolerance\n",
         name, worst, worst / 0x1p-23, at, bad);
  free(in), free(out);
  lm_llvm_shutdown();
  return bad ? 1 : 0;
}

int main(void) {
  const char *exhaustive = getenv("LOOM_VECMATH_EXHAUSTIVE");
  if (exhaustive) return exhaustive_f32(exhaustive);
  double t0 = now_ms();
  run r = {0};
  r.x = malloc(NMAX * sizeof(double));
  r.y = malloc(NMAX * sizeof(double));
  r.got = malloc(NMAX * sizeof(double));
  r.bx = malloc(NMAX * sizeof(double));
  r.by = malloc(NMAX * sizeof(double));
  r.bout = malloc(NMAX * sizeof(double));
  if (!r.x || !r.y || !r.got || !r.bx || !r.by || !r.bout) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (size_t f = 0; f < sizeof FNS / sizeof *FNS; f++) {
    test_function(&FNS[f], LOOM_F32, &r);
    test_function(&FNS[f], LOOM_F64, &r);
  }
  test_vectorized(&r);
  test_reductions();
  time_row_max();
  free(r.x), free(r.y), free(r.got), free(r.bx), free(r.by), free(r.bout);
  lm_llvm_shutdown();
  printf("vecmath: %.1f s\n", (now_ms() - t0) / 1e3);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
