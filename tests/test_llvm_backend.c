/*
 * The LLVM CPU backend on hand-built kernels, checked against plain C loops.
 * Exits non-zero on any failure; prints "N passed, N failed" at the end.
 */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/llvm/llvm_backend.h"
#include "base/philox.h"
#include "ir/kernel.h"
#include "scratch.h"

/* ------------------------------------------------------------------ checks */

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

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng_next(void) { /* xorshift64*: deterministic test data */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1p-53; }

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static size_t dsize(loom_dtype dt) { return loom_dtype_size(dt); }
static bool is_float(loom_dtype dt) { return loom_dtype_is_float(dt); }
static bool is_half(loom_dtype dt) { return dt == LOOM_BF16 || dt == LOOM_F16; }
static const char *dname(loom_dtype dt) { return loom_dtype_name(dt); }

/* A BF16 or F16 element as a float, and a float rounded to one. */
static float half_get(loom_dtype dt, const void *p, size_t i) {
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == LOOM_BF16 ? loom_bf16_to_float(h) : loom_f16_to_float(h);
}
static void half_put(loom_dtype dt, void *p, size_t i, float v) {
  ((uint16_t *)p)[i] = dt == LOOM_BF16 ? loom_float_to_bf16(v) : loom_float_to_f16(v);
}

/* ------------------------------------------------------------------ kernel builder */

#define KB_MAX 256
typedef struct kb {
  lk_kernel k;
  lk_inst inst[KB_MAX];
} kb;

static void kb_init(kb *b, int ndim, const int64_t *dom, int nouter, lk_reduce red, loom_dtype acc,
                    loom_dtype out, int nslots) {
  memset(b, 0, sizeof *b);
  b->k.ndim = ndim;
  for (int d = 0; d < ndim; d++) b->k.dom[d] = dom[d];
  b->k.nouter = nouter;
  b->k.reduce = red;
  b->k.acc_dtype = acc;
  b->k.out_dtype = out;
  b->k.nslots = nslots;
  b->k.inst = b->inst;
}

static int kb_emit(kb *b, lk_op op, loom_dtype dt, int a, int bb, int c) {
  b->inst[b->k.ninst] = (lk_inst){op, dt, a, bb, c, 0, 0, 0.0};
  return b->k.ninst++;
}
static int kb_dim(kb *b, int d) {
  int i = kb_emit(b, LK_DIM, LOOM_I64, -1, -1, -1);
  b->inst[i].imm_i = d;
  return i;
}
static int kb_ci(kb *b, loom_dtype dt, int64_t v) {
  int i = kb_emit(b, LK_CONST, dt, -1, -1, -1);
  b->inst[i].imm_i = v;
  return i;
}
static int kb_cf(kb *b, loom_dtype dt, double v) {
  int i = kb_emit(b, LK_CONST, dt, -1, -1, -1);
  b->inst[i].imm_f = v;
  return i;
}
static int kb_load(kb *b, loom_dtype dt, int slot, int off) {
  int i = kb_emit(b, LK_LOAD, dt, off, -1, -1);
  b->inst[i].slot = slot;
  return i;
}
static int kb_rand(kb *b, loom_dtype dt, int slot, uint32_t stream, int ctr) {
  int i = kb_emit(b, LK_RAND, dt, ctr, -1, -1);
  b->inst[i].slot = slot;
  b->inst[i].imm_i = stream;
  return i;
}
static int kb_op1(kb *b, lk_op op, loom_dtype dt, int a) { return kb_emit(b, op, dt, a, -1, -1); }
static int kb_op2(kb *b, lk_op op, loom_dtype dt, int a, int c) {
  return kb_emit(b, op, dt, a, c, -1);
}
/* Row-major offset over dims [from, to) of the domain. */
static int kb_offset(kb *b, int from, int to) {
  int off = kb_ci(b, LOOM_I64, 0);
  for (int d = from; d < to; d++) {
    int scaled = kb_op2(b, LK_MUL, LOOM_I64, off, kb_ci(b, LOOM_I64, b->k.dom[d]));
    off = kb_op2(b, LK_ADD, LOOM_I64, scaled, kb_dim(b, d));
  }
  return off;
}
static void kb_end_body(kb *b, int value) {
  b->k.nbody = b->k.ninst;
  b->k.value = value;
  b->k.result = value;
}
static void kb_end_epilogue(kb *b, int result) { b->k.result = result; }

static lk_fn compile(const lk_kernel *k, const char *what) {
  char err[1024] = "";
  lk_fn fn = NULL;
  loom_status st = lm_llvm_compile(k, &fn, err, sizeof err);
  CHECK(st == LOOM_OK && fn, "%s: compile failed (%d): %s", what, (int)st, err);
  return st == LOOM_OK ? fn : NULL;
}

static int64_t outer_numel(const lk_kernel *k) {
  int64_t n = 1;
  for (int d = 0; d < k->nouter; d++) n *= k->dom[d];
  return n;
}

/* Runs fn over [0, n) in random pieces, as a thread pool would. */
static void run_split(lk_fn fn, void *const *args, int64_t n) {
  int64_t at = 0;
  while (at < n) {
    int64_t len = 1 + (int64_t)(rng_next() % (uint64_t)(n / 3 + 1));
    if (at + len > n) len = n - at;
    fn(args, at, at + len);
    at += len;
  }
}

/* ------------------------------------------------------------------ float comparison */

static bool same_float(double got, double want, double rel, double abs_tol) {
  bool exact = rel == 0 && abs_tol == 0;
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (got == want) return signbit(got) == signbit(want) || !exact;
  if (isinf(got) || isinf(want) || exact) return false;
  return fabs(got - want) <= rel * fabs(want) + abs_tol;
}

/* Compares n elements of dtype dt within rel * |want| + abs_tol; both 0 means
 * bit-exact (any NaN matches any NaN). */
static bool same_elements_tol(loom_dtype dt, const void *got, const void *want, size_t n,
                              double rel, double abs_tol, size_t *first_bad) {
  for (size_t i = 0; i < n; i++) {
    bool ok;
    if (dt == LOOM_F32)
      ok = same_float(((const float *)got)[i], ((const float *)want)[i], rel, abs_tol);
    else if (is_half(dt))
      ok = same_float(half_get(dt, got, i), half_get(dt, want, i), rel, abs_tol);
    else if (dt == LOOM_F64)
      ok = same_float(((const double *)got)[i], ((const double *)want)[i], rel, abs_tol);
    else
      ok = memcmp((const char *)got + i * dsize(dt), (const char *)want + i * dsize(dt),
                  dsize(dt)) == 0;
    if (!ok) {
      *first_bad = i;
      return false;
    }
  }
  return true;
}

static bool same_elements(loom_dtype dt, const void *got, const void *want, size_t n, double rel,
                          size_t *first_bad) {
  return same_elements_tol(dt, got, want, n, rel, 0, first_bad);
}

static double elem_as_double(loom_dtype dt, const void *p, size_t i) {
  switch (dt) {
  case LOOM_F32: return ((const float *)p)[i];
  case LOOM_F64: return ((const double *)p)[i];
  case LOOM_I32: return ((const int32_t *)p)[i];
  case LOOM_I64: return (double)((const int64_t *)p)[i];
  case LOOM_I8: return ((const int8_t *)p)[i];
  case LOOM_I16: return ((const int16_t *)p)[i];
  case LOOM_U16: return ((const uint16_t *)p)[i];
  case LOOM_U32: return ((const uint32_t *)p)[i];
  case LOOM_U64: return (double)((const uint64_t *)p)[i];
  case LOOM_BF16:
  case LOOM_F16: return half_get(dt, p, i);
  default: return ((const uint8_t *)p)[i];
  }
}

/* ------------------------------------------------------------------ 1. broadcasting add */

static void test_broadcast_add(void) {
  enum { M = 37, N = 53 };
  int64_t dom[2] = {M, N};
  float *a = malloc(sizeof(float) * M * N), *row = malloc(sizeof(float) * N),
        *col = malloc(sizeof(float) * M), *out = malloc(sizeof(float) * M * N),
        *want = malloc(sizeof(float) * M * N);
  for (int i = 0; i < M * N; i++) a[i] = (float)(rng_uniform() * 10 - 5);
  for (int j = 0; j < N; j++) row[j] = (float)(rng_uniform() * 3);
  for (int i = 0; i < M; i++) col[i] = (float)(rng_uniform() - 0.5);

  /* out[i,j] = a[i,j] + row[j] + col[i]: a is full, row broadcasts over i, col over j. */
  kb b;
  kb_init(&b, 2, dom, 2, LK_RED_NONE, LOOM_F32, LOOM_F32, 4);
  int off = kb_offset(&b, 0, 2);
  int va = kb_load(&b, LOOM_F32, 1, off);
  int vr = kb_load(&b, LOOM_F32, 2, kb_dim(&b, 1));
  int vc = kb_load(&b, LOOM_F32, 3, kb_dim(&b, 0));
  int sum = kb_op2(&b, LK_ADD, LOOM_F32, kb_op2(&b, LK_ADD, LOOM_F32, va, vr), vc);
  kb_end_body(&b, sum);
  lk_fn fn = compile(&b.k, "broadcast add");
  if (fn) {
    void *args[4] = {out, a, row, col};
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) want[i * N + j] = a[i * N + j] + row[j] + col[i];
    memset(out, 0, sizeof(float) * M * N);
    fn(args, 0, M * N);
    size_t bad = 0;
    CHECK(same_elements(LOOM_F32, out, want, M * N, 0, &bad),
          "broadcast add: element %zu: %g vs %g", bad, out[bad], want[bad]);
    memset(out, 0, sizeof(float) * M * N);
    run_split(fn, args, M * N);
    CHECK(memcmp(out, want, sizeof(float) * M * N) == 0, "broadcast add: split ranges differ");
    /* A range that starts and ends mid-row leaves everything else alone. */
    memset(out, 0, sizeof(float) * M * N);
    fn(args, N + 7, 3 * N + 2);
    bool ok = true;
    for (int i = 0; i < M * N; i++) {
      float w = (i >= N + 7 && i < 3 * N + 2) ? want[i] : 0.0f;
      if (out[i] != w) ok = false;
    }
    CHECK(ok, "broadcast add: partial range wrote outside [begin, end)");
  }
  free(a), free(row), free(col), free(out), free(want);
}

/* ------------------------------------------------------------------ 2. ops x dtypes */

static const float F32V[] = {0.0f,    -0.0f,    1.0f,      -1.5f, 2.5f, 3.0f, 1e10f,
                             -1e-10f, INFINITY, -INFINITY, NAN,   0.1f, 7.0f, -7.25f};
static const double F64V[] = {0.0,      -0.0,      1.0, -1.5, 2.5, 3.0,   1e10, -1e-10,
                              INFINITY, -INFINITY, NAN, 0.1,  7.0, -7.25, 1e300};
static const int32_t I32V[] = {0, 1, -1, 7, -7, 100, INT32_MAX, INT32_MIN, 12345, -100000};
static const int64_t I64V[] = {0,   1,         -1,        7,         -7,
                               100, INT64_MAX, INT64_MIN, 1LL << 40, -(1LL << 35) - 3};
static const uint8_t U8V[] = {0, 1, 7, 100, 128, 200, 255};
static const int8_t I8V[] = {0, 1, -1, 7, -7, 100, 127, -128, -100, 64};
static const int16_t I16V[] = {0, 1, -1, 7, -7, 100, INT16_MAX, INT16_MIN, -300, 256};
static const uint16_t U16V[] = {0, 1, 7, 100, 255, 256, 32768, 40000, 65535};
static const uint32_t U32V[] = {0, 1, 7, 100, 65536, 2147483648u, 3000000000u, UINT32_MAX};
static const uint64_t U64V[] = {0,          1,          7,          100,
                                1ull << 32, 1ull << 63, UINT64_MAX, (1ull << 63) + 12345};
static const uint8_t BOOLV[] = {0, 1};

/* The F32 spot values rounded to BF16 and F16 (1e10 is inf in F16), plus each
 * one's largest finite value and smallest subnormal. */
static uint16_t BF16V[sizeof F32V / sizeof *F32V + 2], F16V[sizeof F32V / sizeof *F32V + 2];

static const void *spot_values(loom_dtype dt, size_t *n) {
  if (is_half(dt)) {
    uint16_t *v = dt == LOOM_BF16 ? BF16V : F16V;
    size_t nf = sizeof F32V / sizeof *F32V;
    for (size_t i = 0; i < nf; i++) half_put(dt, v, i, F32V[i]);
    v[nf] = dt == LOOM_BF16 ? 0x7f7f : 0x7bff;
    v[nf + 1] = 0x0001;
    *n = nf + 2;
    return v;
  }
  switch (dt) {
  case LOOM_F32: *n = sizeof F32V / sizeof *F32V; return F32V;
  case LOOM_F64: *n = sizeof F64V / sizeof *F64V; return F64V;
  case LOOM_I32: *n = sizeof I32V / sizeof *I32V; return I32V;
  case LOOM_I64: *n = sizeof I64V / sizeof *I64V; return I64V;
  case LOOM_U8: *n = sizeof U8V; return U8V;
  case LOOM_I8: *n = sizeof I8V; return I8V;
  case LOOM_I16: *n = sizeof I16V / sizeof *I16V; return I16V;
  case LOOM_U16: *n = sizeof U16V / sizeof *U16V; return U16V;
  case LOOM_U32: *n = sizeof U32V / sizeof *U32V; return U32V;
  case LOOM_U64: *n = sizeof U64V / sizeof *U64V; return U64V;
  default: *n = sizeof BOOLV; return BOOLV;
  }
}

#define DEFINE_REF_FLOAT(NAME, T, SUF)                                                             \
  static T NAME(lk_op op, T a, T b) {                                                              \
    switch (op) {                                                                                  \
    case LK_ADD: return a + b;                                                                     \
    case LK_SUB: return a - b;                                                                     \
    case LK_MUL: return a * b;                                                                     \
    case LK_DIV: return a / b;                                                                     \
    case LK_MAX: return (isnan(a) || a > b) ? a : b;                                               \
    case LK_MIN: return (isnan(a) || a < b) ? a : b;                                               \
    case LK_POW: return pow##SUF(a, b);                                                            \
    case LK_NEG: return -a;                                                                        \
    case LK_ABS: return fabs##SUF(a);                                                              \
    case LK_EXP: return exp##SUF(a);                                                               \
    case LK_LOG: return log##SUF(a);                                                               \
    case LK_SQRT: return sqrt##SUF(a);                                                             \
    case LK_SIN: return sin##SUF(a);                                                               \
    case LK_COS: return cos##SUF(a);                                                               \
    case LK_TANH: return tanh##SUF(a);                                                             \
    case LK_ERF: return erf##SUF(a);                                                               \
    case LK_FLOOR: return floor##SUF(a);                                                           \
    default: return (T)NAN;                                                                        \
    }                                                                                              \
  }
DEFINE_REF_FLOAT(ref_f32, float, f)
DEFINE_REF_FLOAT(ref_f64, double, )

static bool negative(int64_t v) { return v < 0; }

/* Integer arithmetic wraps: computed in the unsigned type. */
#define DEFINE_REF_INT(NAME, T, UT, UNSIGNED)                                                      \
  static T NAME(lk_op op, T a, T b) {                                                              \
    switch (op) {                                                                                  \
    case LK_ADD: return (T)((UT)a + (UT)b);                                                        \
    case LK_SUB: return (T)((UT)a - (UT)b);                                                        \
    case LK_MUL: return (T)((UT)a * (UT)b);                                                        \
    case LK_MAX: return a > b ? a : b;                                                             \
    case LK_MIN: return a < b ? a : b;                                                             \
    case LK_NEG: return (T)((UT)0 - (UT)a);                                                        \
    case LK_ABS: return (UNSIGNED || !negative((int64_t)a)) ? a : (T)((UT)0 - (UT)a);              \
    case LK_IDIV: return a / b;                                                                    \
    case LK_IMOD: return a % b;                                                                    \
    default: return 0;                                                                             \
    }                                                                                              \
  }
DEFINE_REF_INT(ref_i32, int32_t, uint32_t, 0)
DEFINE_REF_INT(ref_i64, int64_t, uint64_t, 0)
DEFINE_REF_INT(ref_u8, uint8_t, uint8_t, 1)
DEFINE_REF_INT(ref_i8, int8_t, uint8_t, 0)
DEFINE_REF_INT(ref_i16, int16_t, uint16_t, 0)
DEFINE_REF_INT(ref_u16, uint16_t, uint16_t, 1)
DEFINE_REF_INT(ref_u32, uint32_t, uint32_t, 1)
DEFINE_REF_INT(ref_u64, uint64_t, uint64_t, 1)

#define REF_CMP(op, a, b)                                                                          \
  ((op) == LK_CMPLT   ? (a) < (b)                                                                  \
   : (op) == LK_CMPLE ? (a) <= (b)                                                                 \
   : (op) == LK_CMPEQ ? (a) == (b)                                                                 \
                      : (a) != (b))

/* Element i of op on typed inputs A, B, written to out[i]. */
static void ref_elementwise(lk_op op, loom_dtype dt, const void *A, const void *B, size_t i,
                            void *out) {
  bool cmp = op == LK_CMPLT || op == LK_CMPLE || op == LK_CMPEQ || op == LK_CMPNE;
  switch (dt) {
#define CASE(DT, T, REF)                                                                           \
  case DT: {                                                                                       \
    T a = ((const T *)A)[i], b = B ? ((const T *)B)[i] : (T)0;                                     \
    if (cmp)                                                                                       \
      ((uint8_t *)out)[i] = REF_CMP(op, a, b);                                                     \
    else                                                                                           \
      ((T *)out)[i] = REF(op, a, b);                                                               \
    break;                                                                                         \
  }
    CASE(LOOM_F32, float, ref_f32)
    CASE(LOOM_F64, double, ref_f64)
    CASE(LOOM_I32, int32_t, ref_i32)
    CASE(LOOM_I64, int64_t, ref_i64)
    CASE(LOOM_U8, uint8_t, ref_u8)
    CASE(LOOM_I8, int8_t, ref_i8)
    CASE(LOOM_I16, int16_t, ref_i16)
    CASE(LOOM_U16, uint16_t, ref_u16)
    CASE(LOOM_U32, uint32_t, ref_u32)
    CASE(LOOM_U64, uint64_t, ref_u64)
#undef CASE
  case LOOM_BF16:
  case LOOM_F16: { /* in float, then rounded: what the op computes */
    float a = half_get(dt, A, i), b = B ? half_get(dt, B, i) : 0.0f;
    if (cmp)
      ((uint8_t *)out)[i] = REF_CMP(op, a, b);
    else
      half_put(dt, out, i, ref_f32(op, a, b));
    break;
  }
  case LOOM_BOOL: {
    uint8_t a = ((const uint8_t *)A)[i], b = B ? ((const uint8_t *)B)[i] : 0;
    uint8_t r = cmp ? REF_CMP(op, a, b) : op == LK_AND ? (a && b) : op == LK_OR ? (a || b) : !a;
    ((uint8_t *)out)[i] = r;
    break;
  }
  default: break;
  }
}

static int op_arity(lk_op op) {
  switch (op) {
  case LK_NEG:
  case LK_ABS:
  case LK_EXP:
  case LK_LOG:
  case LK_SQRT:
  case LK_SIN:
  case LK_COS:
  case LK_TANH:
  case LK_ERF:
  case LK_FLOOR:
  case LK_NOT: return 1;
  default: return 2;
  }
}

/* Tolerance for libm-backed functions (a later vector-math version may differ by ulps). */
static double op_tolerance(lk_op op, loom_dtype dt) {
  switch (op) {
  case LK_POW:
  case LK_EXP:
  case LK_LOG:
  case LK_SIN:
  case LK_COS:
  case LK_TANH:
  case LK_ERF: return is_half(dt) ? 0x1p-7 : dt == LOOM_F32 ? 1e-6 : 1e-14; /* halves: 1 ulp */
  default: return 0;
  }
}

/* out[i] = op(x[i], y[i]) over every pair of spot values of dt. */
static void test_elementwise(lk_op op, loom_dtype dt) {
  size_t nv;
  const void *vals = spot_values(dt, &nv);
  if (op == LK_IDIV || op == LK_IMOD) nv = 6; /* 0, 1, -1, 7, -7, 100: keep the nonnegative ones */
  int arity = op_arity(op);
  size_t n = arity == 1 ? nv : nv * nv, es = dsize(dt);
  bool cmp = op == LK_CMPLT || op == LK_CMPLE || op == LK_CMPEQ || op == LK_CMPNE;
  loom_dtype out_dt = cmp ? LOOM_BOOL : dt;
  char *x = calloc(n, es), *y = calloc(n, es), *got = calloc(n, 8), *want = calloc(n, 8);
  size_t m = 0;
  for (size_t i = 0; i < nv; i++) {
    for (size_t j = 0; j < (arity == 1 ? 1 : nv); j++, m++) {
      memcpy(x + m * es, (const char *)vals + i * es, es);
      memcpy(y + m * es, (const char *)vals + j * es, es);
    }
  }
  if (op == LK_IDIV || op == LK_IMOD) { /* nonnegative a, positive b */
    for (size_t i = 0; i < n; i++) {
      ((int64_t *)x)[i] = llabs(((int64_t *)x)[i]) * 13;
      ((int64_t *)y)[i] = llabs(((int64_t *)y)[i]) + 1;
    }
  }
  int64_t dom[1] = {(int64_t)n};
  kb b;
  kb_init(&b, 1, dom, 1, LK_RED_NONE, out_dt, out_dt, 3);
  int i0 = kb_dim(&b, 0);
  int a = kb_load(&b, dt, 1, i0);
  int r =
      arity == 1 ? kb_op1(&b, op, out_dt, a) : kb_op2(&b, op, out_dt, a, kb_load(&b, dt, 2, i0));
  kb_end_body(&b, r);
  char what[64];
  snprintf(what, sizeof what, "%s %s", lk_op_name(op), dname(dt));
  lk_fn fn = compile(&b.k, what);
  if (fn) {
    void *args[3] = {got, x, y};
    fn(args, 0, (int64_t)n);
    for (size_t i = 0; i < n; i++) ref_elementwise(op, dt, x, arity == 1 ? NULL : y, i, want);
    size_t bad = 0;
    bool ok = same_elements(out_dt, got, want, n, op_tolerance(op, dt), &bad);
    CHECK(ok, "%s: element %zu: op(%.9g, %.9g) = %.17g, want %.17g", what, bad,
          elem_as_double(dt, x, bad), elem_as_double(dt, y, bad), elem_as_double(out_dt, got, bad),
          elem_as_double(out_dt, want, bad));
  }
  free(x), free(y), free(got), free(want);
}

static void test_all_elementwise(void) {
  static const lk_op numeric_ops[] = {LK_ADD, LK_SUB, LK_MUL, LK_MAX, LK_MIN, LK_NEG, LK_ABS};
  static const lk_op float_ops[] = {LK_DIV, LK_POW, LK_EXP,  LK_LOG, LK_SQRT,
                                    LK_SIN, LK_COS, LK_TANH, LK_ERF, LK_FLOOR};
  static const lk_op cmp_ops[] = {LK_CMPLT, LK_CMPLE, LK_CMPEQ, LK_CMPNE};
  for (int dt = 0; dt < LOOM_NUM_DTYPES; dt++) {
    for (size_t i = 0; i < sizeof cmp_ops / sizeof *cmp_ops; i++) test_elementwise(cmp_ops[i], dt);
    if (dt == LOOM_BOOL) continue;
    for (size_t i = 0; i < sizeof numeric_ops / sizeof *numeric_ops; i++)
      test_elementwise(numeric_ops[i], dt);
    if (!is_float(dt)) continue;
    for (size_t i = 0; i < sizeof float_ops / sizeof *float_ops; i++)
      test_elementwise(float_ops[i], dt);
  }
  test_elementwise(LK_AND, LOOM_BOOL);
  test_elementwise(LK_OR, LOOM_BOOL);
  test_elementwise(LK_NOT, LOOM_BOOL);
  test_elementwise(LK_IDIV, LOOM_I64);
  test_elementwise(LK_IMOD, LOOM_I64);
}

/* where(c, x, y) on every dtype, c loaded as BOOL. */
static void test_where(void) {
  for (int dt = 0; dt < LOOM_NUM_DTYPES; dt++) {
    size_t nv;
    const char *vals = spot_values(dt, &nv);
    size_t n = nv * 2, es = dsize(dt);
    uint8_t *cond = malloc(n);
    char *x = malloc(n * es), *y = malloc(n * es), *got = malloc(n * es), *want = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
      cond[i] = (uint8_t)(i & 1);
      memcpy(x + i * es, vals + (i % nv) * es, es);
      memcpy(y + i * es, vals + ((i * 7 + 3) % nv) * es, es);
      memcpy(want + i * es, (cond[i] ? x : y) + i * es, es);
    }
    int64_t dom[1] = {(int64_t)n};
    kb b;
    kb_init(&b, 1, dom, 1, LK_RED_NONE, dt, dt, 4);
    int i0 = kb_dim(&b, 0);
    int c = kb_load(&b, LOOM_BOOL, 1, i0);
    int r = kb_emit(&b, LK_WHERE, dt, c, kb_load(&b, dt, 2, i0), kb_load(&b, dt, 3, i0));
    kb_end_body(&b, r);
    lk_fn fn = compile(&b.k, "where");
    if (fn) {
      void *args[4] = {got, cond, x, y};
      fn(args, 0, (int64_t)n);
      CHECK(memcmp(got, want, n * es) == 0, "where %s differs", dname(dt));
    }
    free(cond), free(x), free(y), free(got), free(want);
  }
}

/* Constants of every dtype, including values that need rounding or wrapping. */
static void test_consts(void) {
  struct {
    loom_dtype dt;
    double f;
    int64_t i;
  } cases[] = {
      {LOOM_F32, 0.1, 0},   {LOOM_F32, -INFINITY, 0}, {LOOM_F32, NAN, 0},       {LOOM_F64, 0.1, 0},
      {LOOM_F64, -0.0, 0},  {LOOM_I32, 0, INT32_MIN}, {LOOM_I64, 0, INT64_MIN}, {LOOM_I64, 0, -5},
      {LOOM_U8, 0, 255},    {LOOM_BOOL, 0, 1},        {LOOM_BOOL, 0, 0},        {LOOM_BF16, 0.1, 0},
      {LOOM_BF16, 1e39, 0}, {LOOM_F16, 0.1, 0},       {LOOM_F16, 70000, 0},     {LOOM_F16, 1e-7, 0},
      {LOOM_I8, 0, -128},   {LOOM_I8, 0, 127},        {LOOM_I8, 0, -1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    loom_dtype dt = cases[c].dt;
    int64_t dom[1] = {5};
    kb b;
    kb_init(&b, 1, dom, 1, LK_RED_NONE, dt, dt, 1);
    int v = is_float(dt) ? kb_cf(&b, dt, cases[c].f) : kb_ci(&b, dt, cases[c].i);
    kb_end_body(&b, v);
    lk_fn fn = compile(&b.k, "const");
    if (!fn) continue;
    char got[5 * 8], want[8];
    void *args[1] = {got};
    fn(args, 0, 5);
    switch (dt) {
    case LOOM_F32: *(float *)want = (float)cases[c].f; break;
    case LOOM_F64: *(double *)want = cases[c].f; break;
    case LOOM_I32: *(int32_t *)want = (int32_t)cases[c].i; break;
    case LOOM_I64: *(int64_t *)want = cases[c].i; break;
    case LOOM_BF16:
    case LOOM_F16: half_put(dt, want, 0, (float)cases[c].f); break;
    default: *(uint8_t *)want = (uint8_t)cases[c].i; break;
    }
    size_t bad;
    bool ok = true;
    for (int i = 0; i < 5; i++) ok = ok && same_elements(dt, got + i * dsize(dt), want, 1, 0, &bad);
    CHECK(ok, "const %s case %zu", dname(dt), c);
  }
}

/* ------------------------------------------------------------------ 3. casts */

#define READ_AS(T, src, from, i)                                                                   \
  (is_half(from)        ? (T)half_get(from, src, i)                                                \
   : (from) == LOOM_F32 ? (T)((const float *)(src))[i]                                             \
   : (from) == LOOM_F64 ? (T)((const double *)(src))[i]                                            \
   : (from) == LOOM_I32 ? (T)((const int32_t *)(src))[i]                                           \
   : (from) == LOOM_I64 ? (T)((const int64_t *)(src))[i]                                           \
   : (from) == LOOM_I8  ? (T)((const int8_t *)(src))[i]                                            \
   : (from) == LOOM_I16 ? (T)((const int16_t *)(src))[i]                                           \
   : (from) == LOOM_U16 ? (T)((const uint16_t *)(src))[i]                                          \
   : (from) == LOOM_U32 ? (T)((const uint32_t *)(src))[i]                                          \
   : (from) == LOOM_U64 ? (T)((const uint64_t *)(src))[i]                                          \
                        : (T)((const uint8_t *)(src))[i])

static void ref_cast(loom_dtype from, loom_dtype to, const void *src, size_t i, void *dst) {
  switch (to) {
  case LOOM_F32: ((float *)dst)[i] = READ_AS(float, src, from, i); break;
  case LOOM_F64: ((double *)dst)[i] = READ_AS(double, src, from, i); break;
  case LOOM_I32: ((int32_t *)dst)[i] = READ_AS(int32_t, src, from, i); break;
  case LOOM_I64: ((int64_t *)dst)[i] = READ_AS(int64_t, src, from, i); break;
  case LOOM_BF16: /* through float, as torch converts (and doubles round twice) */
  case LOOM_F16: half_put(to, dst, i, READ_AS(float, src, from, i)); break;
  case LOOM_U8: ((uint8_t *)dst)[i] = READ_AS(uint8_t, src, from, i); break;
  case LOOM_I8: ((int8_t *)dst)[i] = READ_AS(int8_t, src, from, i); break;
  case LOOM_I16: ((int16_t *)dst)[i] = READ_AS(int16_t, src, from, i); break;
  case LOOM_U16: ((uint16_t *)dst)[i] = READ_AS(uint16_t, src, from, i); break;
  case LOOM_U32: ((uint32_t *)dst)[i] = READ_AS(uint32_t, src, from, i); break;
  case LOOM_U64: ((uint64_t *)dst)[i] = READ_AS(uint64_t, src, from, i); break;
  default: ((uint8_t *)dst)[i] = READ_AS(bool, src, from, i); break;
  }
}

/* Source values for a cast: float -> int stays in range (C leaves the rest undefined). */
static size_t cast_sources(loom_dtype from, loom_dtype to, void *buf) {
  static const double to_signed[] = {0.0, -0.0, 1.9, -1.9, 100.5, -1e6, 2e9, -2e9, 0.49};
  static const double to_u8[] = {0.0, 1.9, 100.5, 255.0, 254.99, 0.7};
  static const double to_i8[] = {0.0, -0.0, 1.9, -1.9, 100.5, -127.99, 127.0, -128.0, 0.49};
  static const double to_i16[] = {0.0, -0.0, 1.9, -1.9, 100.5, -32767.99, 32512.0, -32768.0, 0.49};
  static const double to_u16[] = {0.0, 1.9, 100.5, 65280.0, 65279.9, 0.7}; /* BF16, F16 hold them */
  static const double to_u32[] = {0.0, 1.9, 100.5, 3e9, 4e9, 0.7};
  static const double to_u64[] = {0.0, 1.9, 100.5, 1e19, 1.8e19, 0.7};
  static const double to_i64_extra[] = {1e15, -3e17};
  size_t n = 0;
  if (is_float(from) && !is_float(to) && to != LOOM_BOOL) {
    const double *src = to == LOOM_U8    ? to_u8
                        : to == LOOM_I8  ? to_i8
                        : to == LOOM_I16 ? to_i16
                        : to == LOOM_U16 ? to_u16
                        : to == LOOM_U32 ? to_u32
                        : to == LOOM_U64 ? to_u64
                                         : to_signed;
    size_t ns = to == LOOM_U8    ? sizeof to_u8 / sizeof *to_u8
                : to == LOOM_I8  ? sizeof to_i8 / sizeof *to_i8
                : to == LOOM_I16 ? sizeof to_i16 / sizeof *to_i16
                : to == LOOM_U16 ? sizeof to_u16 / sizeof *to_u16
                : to == LOOM_U32 ? sizeof to_u32 / sizeof *to_u32
                : to == LOOM_U64 ? sizeof to_u64 / sizeof *to_u64
                                 : sizeof to_signed / sizeof *to_signed;
    for (size_t i = 0; i < ns; i++, n++) {
      if (from == LOOM_F16 && fabs(src[i]) > 65504) { /* inf: C's conversion is undefined */
        n--;
        continue;
      }
      if (is_half(from))
        half_put(from, buf, n, (float)src[i]);
      else if (from == LOOM_F32)
        ((float *)buf)[n] = (float)src[i];
      else
        ((double *)buf)[n] = src[i];
    }
    if (to == LOOM_I64 && !is_half(from)) /* beyond F16's range, and rounded in BF16 */
      for (size_t i = 0; i < 2; i++, n++) {
        if (from == LOOM_F32)
          ((float *)buf)[n] = (float)to_i64_extra[i];
        else
          ((double *)buf)[n] = to_i64_extra[i];
      }
    return n;
  }
  const void *vals = spot_values(from, &n);
  memcpy(buf, vals, n * dsize(from));
  /* F64 -> F32 of 1e300 overflows to inf, as C does; keep it. */
  return n;
}

static void test_casts(void) {
  for (int from = 0; from < LOOM_NUM_DTYPES; from++) {
    for (int to = 0; to < LOOM_NUM_DTYPES; to++) {
      char src[64 * 8], got[64 * 8], want[64 * 8];
      size_t n = cast_sources(from, to, src);
      int64_t dom[1] = {(int64_t)n};
      kb b;
      kb_init(&b, 1, dom, 1, LK_RED_NONE, to, to, 2);
      int x = kb_load(&b, from, 1, kb_dim(&b, 0));
      kb_end_body(&b, kb_op1(&b, LK_CAST, to, x));
      char what[64];
      snprintf(what, sizeof what, "cast %s -> %s", dname(from), dname(to));
      lk_fn fn = compile(&b.k, what);
      if (!fn) continue;
      void *args[2] = {got, src};
      fn(args, 0, (int64_t)n);
      for (size_t i = 0; i < n; i++) ref_cast(from, to, src, i, want);
      size_t bad = 0;
      CHECK(same_elements(to, got, want, n, 0, &bad), "%s: element %zu: %.17g -> %.17g, want %.17g",
            what, bad, elem_as_double(from, src, bad), elem_as_double(to, got, bad),
            elem_as_double(to, want, bad));
    }
  }
}

/* ------------------------------------------------------------------ 4. reductions */

typedef struct red_case {
  const char *name;
  lk_reduce red;
  loom_dtype dt; /* of the reduced values */
  int ndim, nouter;
  int64_t dom[4];
  bool mean;      /* epilogue: acc * (1/n) */
  bool add_outer; /* epilogue: acc + y[outer offset], a body instruction of outer dims only */
  bool specials;  /* sprinkle NaN / ties into the data */
} red_case;

/* Reference reduction of `count` values x[base + j] (j in reduced row-major order). */
static void ref_reduce(const red_case *rc, const void *x, int64_t base, int64_t count, void *out,
                       int64_t o, const double *y) {
  double accf = rc->red == LK_RED_SUM                               ? 0
                : rc->red == LK_RED_MAX || rc->red == LK_RED_ARGMAX ? -INFINITY
                                                                    : INFINITY;
  int64_t acci = 0, arg = 0;
  bool isf = is_float(rc->dt);
  if (!isf) {
    int64_t lo = rc->dt == LOOM_I32   ? INT32_MIN
                 : rc->dt == LOOM_I64 ? INT64_MIN
                 : rc->dt == LOOM_I8  ? INT8_MIN
                                      : 0;
    int64_t hi = rc->dt == LOOM_I32   ? INT32_MAX
                 : rc->dt == LOOM_I64 ? INT64_MAX
                 : rc->dt == LOOM_I8  ? INT8_MAX
                                      : 255;
    acci = rc->red == LK_RED_SUM                                 ? 0
           : (rc->red == LK_RED_MAX || rc->red == LK_RED_ARGMAX) ? lo
                                                                 : hi;
  }
  for (int64_t j = 0; j < count; j++) {
    if (isf) {
      double v = elem_as_double(rc->dt, x, (size_t)(base + j));
      bool nan_best = isnan(accf);
      switch (rc->red) {
      case LK_RED_SUM: accf += v; break;
      case LK_RED_MAX:
        if (isnan(v) || v > accf) accf = v;
        break;
      case LK_RED_MIN:
        if (isnan(v) || v < accf) accf = v;
        break;
      case LK_RED_ARGMAX:
        if (!nan_best && (isnan(v) || v > accf)) accf = v, arg = j;
        break;
      case LK_RED_ARGMIN:
        if (!nan_best && (isnan(v) || v < accf)) accf = v, arg = j;
        break;
      default: break;
      }
    } else {
      int64_t v = rc->dt == LOOM_I32   ? ((const int32_t *)x)[base + j]
                  : rc->dt == LOOM_I64 ? ((const int64_t *)x)[base + j]
                  : rc->dt == LOOM_I8  ? ((const int8_t *)x)[base + j]
                                       : ((const uint8_t *)x)[base + j];
      switch (rc->red) {
      case LK_RED_SUM: acci = (int64_t)((uint64_t)acci + (uint64_t)v); break;
      case LK_RED_MAX:
        if (v > acci) acci = v;
        break;
      case LK_RED_MIN:
        if (v < acci) acci = v;
        break;
      case LK_RED_ARGMAX:
        if (v > acci) acci = v, arg = j;
        break;
      case LK_RED_ARGMIN:
        if (v < acci) acci = v, arg = j;
        break;
      default: break;
      }
    }
  }
  if (rc->red == LK_RED_ARGMAX || rc->red == LK_RED_ARGMIN) {
    int64_t r = arg + (rc->add_outer ? (int64_t)y[o] : 0);
    ((int64_t *)out)[o] = r;
    return;
  }
  if (rc->mean) accf = accf * (1.0 / (double)count);
  if (rc->add_outer) accf += y[o], acci += (int64_t)y[o];
  switch (rc->dt) {
  case LOOM_F32: ((float *)out)[o] = (float)accf; break;
  case LOOM_F64: ((double *)out)[o] = accf; break;
  case LOOM_I32: ((int32_t *)out)[o] = (int32_t)acci; break;
  case LOOM_I64: ((int64_t *)out)[o] = acci; break;
  case LOOM_I8: ((int8_t *)out)[o] = (int8_t)(uint8_t)acci; break;
  default: ((uint8_t *)out)[o] = (uint8_t)acci; break;
  }
}

static void fill_reduce_input(const red_case *rc, void *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double v = rng_uniform() * 200 - 100;
    if (rc->specials) {
      uint64_t r = rng_next() % 64;
      if (r == 0 && is_float(rc->dt))
        v = NAN;
      else if (r < 8)
        v = 42; /* ties: the first index must win */
    }
    switch (rc->dt) {
    case LOOM_F32: ((float *)x)[i] = (float)v; break;
    case LOOM_F64: ((double *)x)[i] = v; break;
    case LOOM_I32: ((int32_t *)x)[i] = (int32_t)(v * 1e6); break;
    case LOOM_I64: ((int64_t *)x)[i] = (int64_t)(v * 1e15); break;
    case LOOM_I8: ((int8_t *)x)[i] = (int8_t)(int)(v * 1.27); break;
    default: ((uint8_t *)x)[i] = (uint8_t)(int)(v + 100); break;
    }
  }
}

static void test_reduction(const red_case *rc) {
  kb b;
  bool arg = rc->red == LK_RED_ARGMAX || rc->red == LK_RED_ARGMIN;
  loom_dtype acc = arg ? LOOM_I64 : rc->dt;
  kb_init(&b, rc->ndim, rc->dom, rc->nouter, rc->red, acc, acc, 3);
  int64_t nout = outer_numel(&b.k), nred = 1;
  for (int d = rc->nouter; d < rc->ndim; d++) nred *= rc->dom[d];
  int off = kb_offset(&b, 0, rc->ndim);
  int x = kb_load(&b, rc->dt, 1, off);
  /* A body instruction that only the epilogue uses: y[outer offset]. */
  int y = rc->add_outer ? kb_load(&b, LOOM_F64, 2, kb_offset(&b, 0, rc->nouter)) : -1;
  kb_end_body(&b, x);
  int r = kb_emit(&b, LK_ACC, acc, -1, -1, -1);
  if (rc->mean) r = kb_op2(&b, LK_MUL, acc, r, kb_cf(&b, acc, 1.0 / (double)nred));
  if (rc->add_outer) r = kb_op2(&b, LK_ADD, acc, r, kb_op1(&b, LK_CAST, acc, y));
  kb_end_epilogue(&b, r);
  lk_fn fn = compile(&b.k, rc->name);
  if (!fn) return;
  int64_t n = nout * nred;
  void *xs = calloc((size_t)(n ? n : 1), 8);
  double *ys = calloc((size_t)nout, sizeof *ys);
  char *got = calloc((size_t)nout, 8), *want = calloc((size_t)nout, 8),
       *got2 = calloc((size_t)nout, 8);
  fill_reduce_input(rc, xs, n);
  for (int64_t o = 0; o < nout; o++) ys[o] = (double)(o % 5);
  for (int64_t o = 0; o < nout; o++) ref_reduce(rc, xs, o * nred, nred, want, o, ys);
  void *args[3] = {got, xs, ys};
  fn(args, 0, nout);
  /* Float sums are reassociated into vector lanes: compare with a tolerance. */
  double abs_tol = 0;
  if (rc->red == LK_RED_SUM && is_float(rc->dt)) /* |x| <= 100 */
    abs_tol = (rc->dt == LOOM_F32 ? 1e-5 : 1e-13) * 100 * (rc->mean ? 1 : (double)nred);
  size_t bad = 0;
  CHECK(same_elements_tol(acc, got, want, (size_t)nout, 0, abs_tol, &bad),
        "%s: output %zu: %.17g, want %.17g", rc->name, bad, elem_as_double(acc, got, bad),
        elem_as_double(acc, want, bad));
  void *args2[3] = {got2, xs, ys};
  run_split(fn, args2, nout);
  CHECK(memcmp(got, got2, (size_t)nout * dsize(acc)) == 0, "%s: split ranges give other bytes",
        rc->name);
  free(xs), free(ys), free(got), free(want), free(got2);
}

static void test_reductions(void) {
  static const red_case cases[] = {
      {"sum f32 mean", LK_RED_SUM, LOOM_F32, 2, 1, {17, 1000}, true, false, false},
      {"sum f32 3d +outer", LK_RED_SUM, LOOM_F32, 4, 2, {3, 5, 7, 9}, false, true, false},
      {"sum f64 all", LK_RED_SUM, LOOM_F64, 2, 0, {30, 41}, false, false, false},
      {"sum f64 mean", LK_RED_SUM, LOOM_F64, 2, 1, {9, 333}, true, false, false},
      {"sum i64", LK_RED_SUM, LOOM_I64, 3, 1, {6, 7, 50}, false, false, false},
      {"sum i32 wraps", LK_RED_SUM, LOOM_I32, 2, 1, {8, 3000}, false, true, false},
      {"sum u8 wraps", LK_RED_SUM, LOOM_U8, 2, 1, {8, 300}, false, false, false},
      {"max f32 nan", LK_RED_MAX, LOOM_F32, 2, 1, {40, 100}, false, false, true},
      {"min f64 nan", LK_RED_MIN, LOOM_F64, 2, 1, {40, 100}, false, false, true},
      {"max i32", LK_RED_MAX, LOOM_I32, 2, 1, {10, 77}, false, true, false},
      {"min i64", LK_RED_MIN, LOOM_I64, 3, 1, {10, 7, 11}, false, false, false},
      {"max u8", LK_RED_MAX, LOOM_U8, 2, 1, {10, 77}, false, false, false},
      {"min u8", LK_RED_MIN, LOOM_U8, 2, 1, {10, 77}, false, false, false},
      {"argmax f32 nan ties", LK_RED_ARGMAX, LOOM_F32, 2, 1, {64, 50}, false, false, true},
      {"argmin f64 nan ties", LK_RED_ARGMIN, LOOM_F64, 3, 1, {16, 5, 10}, false, true, true},
      {"argmax i32 ties", LK_RED_ARGMAX, LOOM_I32, 2, 1, {64, 50}, false, false, true},
      {"argmin u8", LK_RED_ARGMIN, LOOM_U8, 2, 1, {64, 50}, false, false, true},
      {"sum i8 wraps", LK_RED_SUM, LOOM_I8, 2, 1, {8, 300}, false, false, false},
      {"max i8", LK_RED_MAX, LOOM_I8, 2, 1, {10, 77}, false, false, false},
      {"min i8", LK_RED_MIN, LOOM_I8, 2, 1, {10, 77}, false, false, false},
      {"argmax i8 ties", LK_RED_ARGMAX, LOOM_I8, 2, 1, {64, 50}, false, false, true},
      {"argmin i8", LK_RED_ARGMIN, LOOM_I8, 3, 1, {16, 5, 10}, false, true, false},
      {"argmax i64 all", LK_RED_ARGMAX, LOOM_I64, 2, 0, {7, 9}, false, false, true},
      /* a reduced extent of 0: identity (sum 0, max -inf, argmax 0) */
      {"sum f32 empty", LK_RED_SUM, LOOM_F32, 2, 1, {5, 0}, false, false, false},
      {"max f32 empty", LK_RED_MAX, LOOM_F32, 2, 1, {5, 0}, false, true, false},
      {"min i32 empty", LK_RED_MIN, LOOM_I32, 3, 1, {5, 3, 0}, false, false, false},
      {"argmax f64 empty", LK_RED_ARGMAX, LOOM_F64, 2, 1, {5, 0}, false, false, false},
      {"sum i64 empty all", LK_RED_SUM, LOOM_I64, 1, 0, {0}, false, false, false},
      /* no reduced dims at all: one value per point */
      {"sum f32 no reduced dims", LK_RED_SUM, LOOM_F32, 2, 2, {4, 6}, false, false, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_reduction(&cases[i]);
}

/* ------------------------------------------------------------------ 4b. log-sum-exp */

/* Row kinds of the LSE data: ordinary, large (stability), all -inf, one +inf,
 * one NaN, some -inf, large negative, tiny. */
enum { LSE_KINDS = 8 };
static double lse_value(int kind, int64_t j, int64_t n) {
  double u = rng_uniform();
  switch (kind) {
  case 1: return 990 + 20 * u;
  case 2: return -INFINITY;
  case 3: return j == n / 2 ? INFINITY : u * 20 - 10;
  case 4: return j == n / 3 ? NAN : u * 20 - 10;
  case 5: return j % 3 == 0 ? -INFINITY : u * 20 - 10;
  case 6: return -1010 + 20 * u;
  case 7: return (u - 0.5) * 1e-3;
  default: return u * 20 - 10;
  }
}

/* torch.logsumexp in double: m + log(sum(exp(x - m))), m = 0 when it is +-inf. */
static double ref_lse(const double *x, int64_t n) {
  double m = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    if (isnan(x[j])) return NAN;
    if (x[j] > m) m = x[j];
  }
  if (isinf(m)) m = 0;
  double sum = 0;
  for (int64_t j = 0; j < n; j++) sum += exp(x[j] - m);
  return m + log(sum);
}

/* out[outer] = lse(x over the reduced dims) (+ y[outer] when epi): dims
 * [nouter, ndim) reduced; every row of kind outer % LSE_KINDS. */
static void test_lse_case(const char *name, loom_dtype dt, int ndim, int nouter, const int64_t *dom,
                          bool epi) {
  kb b;
  kb_init(&b, ndim, dom, nouter, LK_RED_LSE, dt, dt, 3);
  int64_t nout = outer_numel(&b.k), nred = 1;
  for (int d = nouter; d < ndim; d++) nred *= dom[d];
  int x = kb_load(&b, dt, 1, kb_offset(&b, 0, ndim));
  int y = epi ? kb_load(&b, LOOM_F64, 2, kb_offset(&b, 0, nouter)) : -1;
  kb_end_body(&b, x);
  int r = kb_emit(&b, LK_ACC, dt, -1, -1, -1);
  if (epi) r = kb_op2(&b, LK_ADD, dt, r, kb_op1(&b, LK_CAST, dt, y));
  kb_end_epilogue(&b, r);
  CHECK(lk_kernel_check(&b.k) == NULL, "%s: check: %s", name, lk_kernel_check(&b.k));
  lk_fn fn = compile(&b.k, name);
  if (!fn) return;
  size_t es = dsize(dt), n = (size_t)(nout * nred);
  double *xd = malloc(sizeof(double) * (n ? n : 1)), *ys = malloc(sizeof(double) * (size_t)nout);
  char *xs = malloc(es * (n ? n : 1)), *got = malloc(es * (size_t)nout),
       *got2 = malloc(es * (size_t)nout), *want = malloc(es * (size_t)nout);
  for (int64_t o = 0; o < nout; o++) {
    ys[o] = (double)(o % 5);
    for (int64_t j = 0; j < nred; j++) {
      double v = lse_value((int)(o % LSE_KINDS), j, nred);
      size_t i = (size_t)(o * nred + j);
      if (dt == LOOM_F32)
        ((float *)xs)[i] = (float)v, xd[i] = (float)v;
      else
        ((double *)xs)[i] = v, xd[i] = v;
    }
    double w = ref_lse(xd + o * nred, nred);
    if (dt == LOOM_F32)
      ((float *)want)[o] = (float)w + (epi ? (float)ys[o] : 0.0f);
    else
      ((double *)want)[o] = w + (epi ? ys[o] : 0.0);
  }
  void *args[3] = {got, xs, ys};
  fn(args, 0, nout);
  double rel = dt == LOOM_F32 ? 1e-6 : 1e-13;
  size_t bad = 0;
  CHECK(same_elements_tol(dt, got, want, (size_t)nout, rel, rel * 1e-3, &bad),
        "%s: output %zu (kind %d): %.17g, want %.17g", name, bad, (int)(bad % LSE_KINDS),
        elem_as_double(dt, got, bad), elem_as_double(dt, want, bad));
  void *args2[3] = {got2, xs, ys};
  run_split(fn, args2, nout);
  CHECK(memcmp(got, got2, es * (size_t)nout) == 0, "%s: split ranges give other bytes", name);
  free(xd), free(ys), free(xs), free(got), free(got2), free(want);
}

static void test_lse(void) {
  for (int d = 0; d < 2; d++) {
    loom_dtype dt = d == 0 ? LOOM_F32 : LOOM_F64;
    char name[64];
    static const int64_t lengths[] = {1, 7, 33, 1000};
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
      int64_t dom[2] = {3 * LSE_KINDS, lengths[li]};
      snprintf(name, sizeof name, "lse %s rows of %lld", dname(dt), (long long)lengths[li]);
      test_lse_case(name, dt, 2, 1, dom, li % 2 == 1);
    }
    int64_t dom3[4] = {LSE_KINDS, 3, 5, 7}; /* two outer, two reduced dims */
    snprintf(name, sizeof name, "lse %s 4d +outer", dname(dt));
    test_lse_case(name, dt, 4, 2, dom3, true);
    int64_t dom_empty[2] = {5, 0};
    snprintf(name, sizeof name, "lse %s empty", dname(dt));
    test_lse_case(name, dt, 2, 1, dom_empty, true);
    int64_t dom_all[2] = {9, 11};
    snprintf(name, sizeof name, "lse %s all", dname(dt));
    test_lse_case(name, dt, 2, 0, dom_all, false);
  }
  /* The kernel check: float dtypes only, value dtype = acc dtype. */
  kb b;
  int64_t dom[2] = {4, 8};
  kb_init(&b, 2, dom, 1, LK_RED_LSE, LOOM_I32, LOOM_I32, 2);
  kb_end_body(&b, kb_load(&b, LOOM_I32, 1, kb_offset(&b, 0, 2)));
  kb_end_epilogue(&b, kb_emit(&b, LK_ACC, LOOM_I32, -1, -1, -1));
  CHECK(lk_kernel_check(&b.k) != NULL, "lse of i32 passes the check");
  kb_init(&b, 2, dom, 1, LK_RED_LSE, LOOM_F64, LOOM_F64, 2);
  kb_end_body(&b, kb_load(&b, LOOM_F32, 1, kb_offset(&b, 0, 2)));
  kb_end_epilogue(&b, kb_emit(&b, LK_ACC, LOOM_F64, -1, -1, -1));
  CHECK(lk_kernel_check(&b.k) == NULL, "lse of f32 into f64 (widening) fails the check");
  kb_init(&b, 2, dom, 1, LK_RED_LSE, LOOM_F32, LOOM_F32, 2);
  kb_end_body(&b, kb_load(&b, LOOM_F64, 1, kb_offset(&b, 0, 2)));
  kb_end_epilogue(&b, kb_emit(&b, LK_ACC, LOOM_F32, -1, -1, -1));
  CHECK(lk_kernel_check(&b.k) != NULL, "lse of f64 into f32 passes the check");
}

/* ------------------------------------------------------------------ 5. random numbers */

static void test_rand(void) {
  static const uint32_t keys[][2] = {{0, 0}, {0x12345678u, 0x9abcdef0u}, {0xffffffffu, 1}};
  static const uint32_t streams[] = {0, 1, 12345, 0xffffffffu};
  static const int64_t bases[] = {0, (1LL << 32) - 300, (1LL << 40) + 12345};
  enum { N = 1000 };
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) {
    for (size_t s = 0; s < sizeof streams / sizeof *streams; s++) {
      for (size_t bi = 0; bi < sizeof bases / sizeof *bases; bi++) {
        int64_t dom[1] = {N};
        kb b;
        kb_init(&b, 1, dom, 1, LK_RED_NONE, dt, dt, 2);
        int ctr = kb_op2(&b, LK_ADD, LOOM_I64, kb_dim(&b, 0), kb_ci(&b, LOOM_I64, bases[bi]));
        kb_end_body(&b, kb_rand(&b, dt, 1, streams[s], ctr));
        lk_fn fn = compile(&b.k, "rand");
        if (!fn) continue;
        for (size_t ki = 0; ki < sizeof keys / sizeof *keys; ki++) {
          double got[N], want[N];
          loom_key key = {{keys[ki][0], keys[ki][1]}};
          void *args[2] = {got, &key};
          run_split(fn, args, N);
          for (int i = 0; i < N; i++) {
            uint64_t c = (uint64_t)(bases[bi] + i);
            if (dt == LOOM_F32)
              ((float *)want)[i] = lm_philox_uniform_f32(keys[ki], c, streams[s]);
            else
              want[i] = lm_philox_uniform_f64(keys[ki], c, streams[s]);
          }
          CHECK(memcmp(got, want, N * dsize(dt)) == 0,
                "rand %s stream %u base %lld key %zu differs", dname(dt), streams[s],
                (long long)bases[bi], ki);
        }
      }
    }
  }
}

/* ------------------------------------------------------------------ 6. split ranges */

/* A 3-D kernel mixing index math, math functions and randomness. */
static void test_split_identical(void) {
  int64_t dom[3] = {7, 11, 13};
  kb b;
  kb_init(&b, 3, dom, 3, LK_RED_NONE, LOOM_F64, LOOM_F64, 3);
  int off = kb_offset(&b, 0, 3);
  int x = kb_load(&b, LOOM_F64, 1, kb_op2(&b, LK_IMOD, LOOM_I64, off, kb_ci(&b, LOOM_I64, 100)));
  int r = kb_rand(&b, LOOM_F64, 2, 3, off);
  int e = kb_op1(&b, LK_EXP, LOOM_F64, kb_op2(&b, LK_MUL, LOOM_F64, x, r));
  int t = kb_op1(&b, LK_TANH, LOOM_F64, kb_op2(&b, LK_SUB, LOOM_F64, e, kb_cf(&b, LOOM_F64, 1.5)));
  kb_end_body(&b, t);
  lk_fn fn = compile(&b.k, "split kernel");
  if (!fn) return;
  enum { N = 7 * 11 * 13 };
  double x_in[100], one[N], parts[N];
  for (int i = 0; i < 100; i++) x_in[i] = rng_uniform() * 4 - 2;
  loom_key key = {{7, 9}};
  void *a1[3] = {one, x_in, &key}, *a2[3] = {parts, x_in, &key};
  fn(a1, 0, N);
  bool ok = true;
  for (int trial = 0; trial < 20; trial++) {
    memset(parts, 0xab, sizeof parts);
    run_split(fn, a2, N);
    ok = ok && memcmp(one, parts, sizeof one) == 0;
  }
  CHECK(ok, "split ranges give other bytes than one call");
  double want0 = tanh(exp(x_in[0] * lm_philox_uniform_f64(key.k, 0, 3)) - 1.5);
  CHECK(fabs(one[0] - want0) < 1e-14, "split kernel: element 0 is %.17g, want %.17g", one[0],
        want0);
}

/* out[p] = p over odd shapes (size-1 dims, a scalar): exercises the unravel and carry. */
static void test_shapes(void) {
  static const int64_t shapes[][6] = {/* ndim, dims... */
                                      {5, 3, 1, 4, 1, 5},
                                      {1, 1},
                                      {3, 1, 1, 1},
                                      {2, 1, 37},
                                      {4, 2, 3, 2, 3}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int ndim = (int)shapes[s][0];
    kb b;
    kb_init(&b, ndim, &shapes[s][1], ndim, LK_RED_NONE, LOOM_I64, LOOM_I64, 1);
    kb_end_body(&b, kb_offset(&b, 0, ndim));
    lk_fn fn = compile(&b.k, "shape");
    if (!fn) continue;
    int64_t n = outer_numel(&b.k), out[64];
    void *args[1] = {out};
    bool ok = true;
    for (int trial = 0; trial < 10; trial++) {
      memset(out, 0xff, sizeof out);
      if (trial == 0)
        fn(args, 0, n);
      else
        run_split(fn, args, n);
      for (int64_t i = 0; i < n; i++) ok = ok && out[i] == i;
      ok = ok && out[n] == -1; /* nothing written past the end */
    }
    CHECK(ok, "shape %zu: linear index wrong", s);
  }
}

/* Large constant fills (LLVM may turn them into memset, resolved from the process)
 * and an in-place update whose input slot is the output buffer. */
static void test_fill_and_in_place(void) {
  enum { N = 100000 };
  int64_t dom[1] = {N};
  for (int dt = 0; dt < LOOM_NUM_DTYPES; dt++) {
    kb b;
    kb_init(&b, 1, dom, 1, LK_RED_NONE, dt, dt, 1);
    kb_end_body(&b, is_float(dt) ? kb_cf(&b, dt, 0.0) : kb_ci(&b, dt, dt == LOOM_BOOL ? 1 : 0));
    lk_fn fn = compile(&b.k, "fill");
    if (!fn) continue;
    char *out = malloc(N * dsize(dt)), *want = calloc(N, dsize(dt));
    if (dt == LOOM_BOOL) memset(want, 1, N);
    memset(out, 0x77, N * dsize(dt));
    void *args[1] = {out};
    run_split(fn, args, N);
    CHECK(memcmp(out, want, N * dsize(dt)) == 0, "fill %s", dname(dt));
    free(out), free(want);
  }
  kb b;
  kb_init(&b, 1, dom, 1, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  int x = kb_load(&b, LOOM_F32, 1, kb_dim(&b, 0));
  kb_end_body(&b, kb_op2(&b, LK_MUL, LOOM_F32, x, kb_cf(&b, LOOM_F32, 3.0)));
  lk_fn fn = compile(&b.k, "in place");
  if (fn) {
    float *buf = malloc(N * sizeof *buf);
    for (int i = 0; i < N; i++) buf[i] = (float)i;
    void *args[2] = {buf, buf};
    fn(args, 0, N);
    bool ok = true;
    for (int i = 0; i < N; i++) ok = ok && buf[i] == 3.0f * (float)i;
    CHECK(ok, "in-place update");
    free(buf);
  }
}

/* Epilogue reading an outer dim directly: out[i] = sum_j x[i, j] + i. */
static void test_epilogue_dim(void) {
  int64_t dom[2] = {6, 9};
  kb b;
  kb_init(&b, 2, dom, 1, LK_RED_SUM, LOOM_I64, LOOM_I64, 2);
  kb_end_body(&b, kb_load(&b, LOOM_I64, 1, kb_offset(&b, 0, 2)));
  int acc = kb_emit(&b, LK_ACC, LOOM_I64, -1, -1, -1);
  kb_end_epilogue(&b, kb_op2(&b, LK_ADD, LOOM_I64, acc, kb_dim(&b, 0)));
  lk_fn fn = compile(&b.k, "epilogue dim");
  if (!fn) return;
  int64_t x[54], out[6];
  for (int i = 0; i < 54; i++) x[i] = i * i;
  void *args[2] = {out, x};
  fn(args, 0, 6);
  bool ok = true;
  for (int i = 0; i < 6; i++) {
    int64_t want = i;
    for (int j = 0; j < 9; j++) want += x[i * 9 + j];
    ok = ok && out[i] == want;
  }
  CHECK(ok, "epilogue dim");
}

/* ------------------------------------------------------------------ merged dims */

static void check_merged(const kb *b, int want_ndim, const int64_t *want_dom, int want_nouter,
                         const char *what) {
  lk_kernel m;
  lk_inst *inst = lk_kernel_regroup_dims(&b->k, &m);
  bool ok = inst != NULL;
  bool same = ok && m.ndim == want_ndim && m.nouter == want_nouter && !lk_kernel_check(&m);
  for (int d = 0; same && d < want_ndim; d++) same = m.dom[d] == want_dom[d];
  CHECK(same, "merge %s: ndim %d nouter %d dom [%lld, %lld, ...], want ndim %d", what, m.ndim,
        m.nouter, (long long)m.dom[0], (long long)m.dom[1], want_ndim);
  free(inst);
}

/* Compiles an F64 kernel summing `rows` rows of `len` contiguous values, runs
 * it over random range splits and checks every sum. */
static void check_row_sums(const lk_kernel *k, int64_t rows, int64_t len, const char *what) {
  lk_fn fn = compile(k, what);
  if (!fn) return;
  double *in = malloc(sizeof *in * (size_t)(rows * len)), *out = malloc(sizeof *out * (size_t)rows);
  for (int64_t i = 0; i < rows * len; i++) in[i] = (double)(i * 7 % 17);
  void *args[2] = {out, in};
  run_split(fn, args, rows);
  bool ok = true;
  for (int64_t r = 0; r < rows; r++) {
    double want = 0;
    for (int64_t j = 0; j < len; j++) want += in[r * len + j];
    ok = ok && out[r] == want;
  }
  CHECK(ok, "%s: values", what);
  free(in), free(out);
}

/* Adjacent dims merge exactly where every offset weighs them row-major, and the
 * compiled kernels (which run merged) give the unmerged values. */
static void test_merge_dims(void) {
  kb b;
  /* contiguous: [4, 6, 8] -> [192] */
  int64_t d3[3] = {4, 6, 8};
  kb_init(&b, 3, d3, 3, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  kb_end_body(&b, kb_load(&b, LOOM_F32, 1, kb_offset(&b, 0, 3)));
  check_merged(&b, 1, (int64_t[]){192}, 1, "contiguous");
  /* plus b[i] along dim 0: [4, 48]; its values */
  kb_init(&b, 3, d3, 3, LK_RED_NONE, LOOM_F32, LOOM_F32, 3);
  int x = kb_load(&b, LOOM_F32, 1, kb_offset(&b, 0, 3));
  kb_end_body(&b, kb_op2(&b, LK_ADD, LOOM_F32, x, kb_load(&b, LOOM_F32, 2, kb_dim(&b, 0))));
  check_merged(&b, 2, (int64_t[]){4, 48}, 2, "bias along dim 0");
  lk_fn fn = compile(&b.k, "bias along dim 0");
  if (fn) {
    float in[192], bias[4], out[192];
    for (int i = 0; i < 192; i++) in[i] = (float)i * 0.25f;
    for (int i = 0; i < 4; i++) bias[i] = (float)(100 * i);
    void *args[3] = {out, in, bias};
    run_split(fn, args, 192);
    bool ok = true;
    for (int i = 0; i < 192; i++) ok = ok && out[i] == in[i] + bias[i / 48];
    CHECK(ok, "merged bias kernel values");
  }
  /* a comparison on dim 2 keeps it apart: [24, 8] */
  kb_init(&b, 3, d3, 3, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  x = kb_load(&b, LOOM_F32, 1, kb_offset(&b, 0, 3));
  int lt = kb_op2(&b, LK_CMPLT, LOOM_BOOL, kb_dim(&b, 2), kb_ci(&b, LOOM_I64, 3));
  kb_end_body(&b, kb_emit(&b, LK_WHERE, LOOM_F32, lt, x, kb_cf(&b, LOOM_F32, -1)));
  check_merged(&b, 2, (int64_t[]){24, 8}, 2, "where on dim 2");
  /* a transposed read keeps its dims: out[i, j] = x[j, i] */
  int64_t d2[2] = {6, 8};
  kb_init(&b, 2, d2, 2, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  int t =
      kb_op2(&b, LK_ADD, LOOM_I64,
             kb_op2(&b, LK_MUL, LOOM_I64, kb_dim(&b, 1), kb_ci(&b, LOOM_I64, 6)), kb_dim(&b, 0));
  kb_end_body(&b, kb_load(&b, LOOM_F32, 1, t));
  check_merged(&b, 2, d2, 2, "transpose");
  /* a sum over [5 | 6, 7] -> [5 | 42], never an outer dim with a reduced one */
  int64_t dr[3] = {5, 6, 7};
  kb_init(&b, 3, dr, 1, LK_RED_SUM, LOOM_F64, LOOM_F64, 2);
  kb_end_body(&b, kb_load(&b, LOOM_F64, 1, kb_offset(&b, 0, 3)));
  kb_end_epilogue(&b, kb_emit(&b, LK_ACC, LOOM_F64, -1, -1, -1));
  check_merged(&b, 2, (int64_t[]){5, 42}, 1, "sum over two dims");
  check_row_sums(&b.k, 5, 42, "sum over two dims");
  /* a Philox counter merges like an offset: [4, 6, 8] -> [192] */
  kb_init(&b, 3, d3, 3, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  kb_end_body(&b, kb_rand(&b, LOOM_F32, 1, 0, kb_offset(&b, 0, 3)));
  check_merged(&b, 1, (int64_t[]){192}, 1, "rand");
  /* an index stored as a value stays per dim */
  kb_init(&b, 3, d3, 3, LK_RED_NONE, LOOM_I64, LOOM_I64, 1);
  kb_end_body(&b, kb_offset(&b, 0, 3));
  check_merged(&b, 3, d3, 3, "index as value");
}

/* out[i, w] = x[i, w] + p[i, w / q] * (w % q), over [R, W] (a pooling
 * gradient's reads): the row splits into [W / q, q] and runs in blocks. */
static void build_divided(kb *b, int64_t R, int64_t W, int64_t q) {
  int64_t dom[2] = {R, W};
  kb_init(b, 2, dom, 2, LK_RED_NONE, LOOM_F64, LOOM_F64, 3);
  int x = kb_load(b, LOOM_F64, 1, kb_offset(b, 0, 2));
  int w = kb_dim(b, 1), cq = kb_ci(b, LOOM_I64, q);
  int at = kb_op2(b, LK_ADD, LOOM_I64,
                  kb_op2(b, LK_MUL, LOOM_I64, kb_dim(b, 0), kb_ci(b, LOOM_I64, W / q)),
                  kb_op2(b, LK_IDIV, LOOM_I64, w, cq));
  int m = kb_op1(b, LK_CAST, LOOM_F64, kb_op2(b, LK_IMOD, LOOM_I64, w, cq));
  int pm = kb_op2(b, LK_MUL, LOOM_F64, kb_load(b, LOOM_F64, 2, at), m);
  kb_end_body(b, kb_op2(b, LK_ADD, LOOM_F64, x, pm));
}

/* The row's dim splits where the index divides it (and only then), and the
 * kernels give the same values whatever the range's split (whole blocks of
 * rows and single rows). */
static void test_split_rows(void) {
  static const int64_t cases[][3] = {{5, 28, 2}, {3, 36, 3}, {2, 16, 4}, {7, 8, 2}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int64_t R = cases[c][0], W = cases[c][1], q = cases[c][2];
    kb b;
    build_divided(&b, R, W, q);
    /* split to [R, W / q, q], then the first two merge */
    check_merged(&b, 2, (int64_t[]){R * W / q, q}, 2, "row divided by q");
    lk_fn fn = compile(&b.k, "row divided by q");
    if (!fn) continue;
    double *x = malloc(sizeof *x * (size_t)(R * W)), *p = malloc(sizeof *p * (size_t)(R * W / q));
    double *out = malloc(sizeof *out * (size_t)(R * W));
    for (int64_t i = 0; i < R * W; i++) x[i] = (double)(i % 101);
    for (int64_t i = 0; i < R * W / q; i++) p[i] = 1000.0 * (double)(i + 1);
    void *args[3] = {out, x, p};
    for (int rep = 0; rep < 4; rep++) {
      if (rep == 0)
        fn(args, 0, R * W);
      else
        run_split(fn, args, R * W);
      bool ok = true;
      for (int64_t i = 0; i < R; i++)
        for (int64_t w = 0; w < W; w++)
          ok = ok && out[i * W + w] == x[i * W + w] + p[i * (W / q) + w / q] * (double)(w % q);
      CHECK(ok, "row divided by %lld over [%lld, %lld]: values (split %d)", (long long)q,
            (long long)R, (long long)W, rep);
    }
    free(x), free(p), free(out);
  }
  kb b; /* not divisible, too wide a q, two different q: left alone */
  build_divided(&b, 4, 30, 4);
  check_merged(&b, 2, (int64_t[]){4, 30}, 2, "extent not a multiple of q");
  build_divided(&b, 4, 40, 5);
  check_merged(&b, 2, (int64_t[]){4, 40}, 2, "q over 4");
  build_divided(&b, 4, 12, 2);
  int w = 0;
  while (b.inst[w].op != LK_DIM || b.inst[w].imm_i != 1) w++;
  int by3 = kb_op2(&b, LK_IDIV, LOOM_I64, w, kb_ci(&b, LOOM_I64, 3));
  kb_end_body(&b, kb_op2(&b, LK_ADD, LOOM_F64, b.k.value, kb_op1(&b, LK_CAST, LOOM_F64, by3)));
  check_merged(&b, 2, (int64_t[]){4, 12}, 2, "two divisors");
  /* a sum per point over short rows of a block: [3, 10, 2 | 5] */
  int64_t dom[4] = {3, 10, 2, 5};
  kb_init(&b, 4, dom, 3, LK_RED_SUM, LOOM_F64, LOOM_F64, 2);
  kb_end_body(&b, kb_load(&b, LOOM_F64, 1, kb_offset(&b, 0, 4)));
  kb_end_epilogue(&b, kb_emit(&b, LK_ACC, LOOM_F64, -1, -1, -1));
  check_row_sums(&b.k, 60, 5, "sums over blocks of short rows");
}

/* ------------------------------------------------------------------ absorbed exps */

/* out = 1 / (1 + exp(-x)) (the exp absorbed: only added to 1) and the same with
 * the exp also read elsewhere (times 0, so computed the usual way): the same
 * bits wherever the result is a normal float, and sigmoid's limits at the
 * ends and for infinities and NaN. */
static void test_absorbed_exp(void) {
  enum { N = 4096 };
  int64_t dom[1] = {N};
  lk_fn fn[2];
  for (int form = 0; form < 2; form++) {
    kb b;
    kb_init(&b, 1, dom, 1, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
    int x = kb_load(&b, LOOM_F32, 1, kb_dim(&b, 0));
    int e = kb_op1(&b, LK_EXP, LOOM_F32, kb_op1(&b, LK_NEG, LOOM_F32, x));
    int one = kb_cf(&b, LOOM_F32, 1.0);
    int s = kb_op2(&b, LK_DIV, LOOM_F32, one, kb_op2(&b, LK_ADD, LOOM_F32, one, e));
    if (form == 1)
      s = kb_op2(&b, LK_ADD, LOOM_F32, s, kb_op2(&b, LK_MUL, LOOM_F32, e, kb_cf(&b, LOOM_F32, 0)));
    kb_end_body(&b, s);
    fn[form] = compile(&b.k, form ? "sigmoid, exp read twice" : "sigmoid, exp absorbed");
  }
  if (!fn[0] || !fn[1]) return;
  static float x[N], out[2][N];
  for (int i = 0; i < N - 8; i++) x[i] = -100.0f + 200.0f * (float)i / (float)(N - 8);
  const float ends[8] = {-1e30f, 1e30f, INFINITY, -INFINITY, NAN, 86.4f, 87.0f, -89.0f};
  for (int i = 0; i < 8; i++) x[N - 8 + i] = ends[i];
  for (int form = 0; form < 2; form++) {
    void *args[2] = {out[form], x};
    fn[form](args, 0, N);
  }
  int differ = 0, far = 0;
  for (int i = 0; i < N; i++) {
    double want = 1.0 / (1.0 + exp(-(double)x[i]));
    bool normal = fabs(want) >= FLT_MIN;
    if (normal && memcmp(&out[0][i], &out[1][i], sizeof(float)) != 0) differ++;
    if (isnan(x[i]) ? !isnan(out[0][i]) : normal && fabs(out[0][i] - want) > 3e-7 * want) far++;
  }
  CHECK(differ == 0 && far == 0,
        "absorbed exp: %d results differ from the usual exp, %d far from sigmoid", differ, far);
  CHECK(out[0][N - 8] == 0.0f && out[0][N - 7] == 1.0f && out[0][N - 6] == 1.0f &&
            out[0][N - 5] == 0.0f,
        "absorbed exp: sigmoid(-1e30, 1e30, inf, -inf) = %g %g %g %g", out[0][N - 8], out[0][N - 7],
        out[0][N - 6], out[0][N - 5]);
}

/* ------------------------------------------------------------------ padded reads */

static lk_fn compile_dumped(const lk_kernel *k, const char *what, const char *dir);

/* inside = 0 <= d - 1 < n, and d - 1 clamped into range (as lowering pads). */
static int kb_shifted_in(kb *b, int d, int64_t n, int *clamped) {
  int zero = kb_ci(b, LOOM_I64, 0);
  int s = kb_op2(b, LK_SUB, LOOM_I64, kb_dim(b, d), kb_ci(b, LOOM_I64, 1));
  int lo = kb_op1(b, LK_NOT, LOOM_BOOL, kb_op2(b, LK_CMPLT, LOOM_BOOL, s, zero));
  int in =
      kb_op2(b, LK_AND, LOOM_BOOL, lo, kb_op2(b, LK_CMPLT, LOOM_BOOL, s, kb_ci(b, LOOM_I64, n)));
  *clamped = kb_emit(b, LK_WHERE, LOOM_I64, in, s, zero);
  return in;
}

static int kb_fill(kb *b, loom_dtype dt, double v) {
  return is_float(dt) ? kb_cf(b, dt, v) : kb_ci(b, dt, (int64_t)v);
}

/* x [R, W] padded by one on every side with `fill`, then times 3:
 *   form 0: where(in_c, where(in_r, load, fill), fill)   (a chain of wrappers)
 *   form 1: where(in_r & in_c, load, fill)
 *   form 2: form 1, and the load is also used unwrapped (added in, times 0),
 *           so it must stay an ordinary load
 *   form 3: the wrappers' fills differ (the inner one is 0): only the inner is
 *           the guard. */
static void build_padded(kb *b, loom_dtype dt, int form, int64_t R, int64_t W, double fill) {
  int64_t dom[2] = {R + 2, W + 2};
  kb_init(b, 2, dom, 2, LK_RED_NONE, dt, dt, 2);
  int r, c;
  int in_r = kb_shifted_in(b, 0, R, &r), in_c = kb_shifted_in(b, 1, W, &c);
  int at = kb_op2(b, LK_ADD, LOOM_I64, kb_op2(b, LK_MUL, LOOM_I64, r, kb_ci(b, LOOM_I64, W)), c);
  int x = kb_load(b, dt, 1, at);
  int v;
  if (form == 0 || form == 3) {
    v = kb_emit(b, LK_WHERE, dt, in_r, x, kb_fill(b, dt, form == 3 ? 0 : fill));
    v = kb_emit(b, LK_WHERE, dt, in_c, v, kb_fill(b, dt, fill));
  } else {
    v = kb_emit(b, LK_WHERE, dt, kb_op2(b, LK_AND, LOOM_BOOL, in_r, in_c), x, kb_fill(b, dt, fill));
    if (form == 2) v = kb_op2(b, LK_ADD, dt, v, kb_op2(b, LK_MUL, dt, x, kb_fill(b, dt, 0)));
  }
  kb_end_body(b, kb_op2(b, LK_MUL, dt, v, kb_fill(b, dt, 3)));
}

static double padded_want(const double *x, int form, int64_t R, int64_t W, double fill, int64_t i,
                          int64_t j) {
  bool in_r = i >= 1 && i <= R, in_c = j >= 1 && j <= W;
  double inner = in_r ? x[(in_c ? (i - 1) * W + j - 1 : (i - 1) * W)] : (form == 3 ? 0 : fill);
  if (form != 0 && form != 3) return 3 * (in_r && in_c ? inner : fill);
  return 3 * (in_c ? inner : fill);
}

/* Padded reads (a load under where-wrappers, its index clamped by the same
 * conditions) give the same values as written, for short and odd rows, every
 * form and dtype; and they are masked loads, never gathers. */
static void test_padded_reads(void) {
  static const int64_t shapes[][2] = {{5, 14}, {3, 1}, {7, 37}, {2, 200}};
  const loom_dtype dts[] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64};
  int cases = 0, bad = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int form = 0; form < 4; form++)
      for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        loom_dtype dt = dts[t];
        int64_t R = shapes[s][0], W = shapes[s][1], n = (R + 2) * (W + 2);
        double fill = -7;
        kb b;
        build_padded(&b, dt, form, R, W, fill);
        lk_fn fn = compile(&b.k, "padded read");
        if (!fn) continue;
        double *xd = malloc(sizeof *xd * (size_t)(R * W));
        char *x = malloc(dsize(dt) * (size_t)(R * W)), *out = malloc(dsize(dt) * (size_t)n);
        for (int64_t i = 0; i < R * W; i++) {
          xd[i] = (double)(i % 23) - 11;
          if (dt == LOOM_F32) ((float *)x)[i] = (float)xd[i];
          if (dt == LOOM_F64) ((double *)x)[i] = xd[i];
          if (dt == LOOM_I32) ((int32_t *)x)[i] = (int32_t)xd[i];
          if (dt == LOOM_I64) ((int64_t *)x)[i] = (int64_t)xd[i];
        }
        void *args[2] = {out, x};
        run_split(fn, args, n);
        for (int64_t i = 0; i < R + 2; i++)
          for (int64_t j = 0; j < W + 2; j++) {
            double want = padded_want(xd, form, R, W, fill, i, j);
            if (elem_as_double(dt, out, (size_t)(i * (W + 2) + j)) != want && bad++ < 3)
              fprintf(stderr, "  padded %s form %d [%lld,%lld] at (%lld,%lld): %g, want %g\n",
                      dname(dt), form, (long long)R, (long long)W, (long long)i, (long long)j,
                      elem_as_double(dt, out, (size_t)(i * (W + 2) + j)), want);
          }
        cases++;
        free(xd), free(x), free(out);
      }
  CHECK(bad == 0, "padded reads: %d wrong elements over %d kernels", bad, cases);
#if defined(__x86_64__)
  char dir[] = "/tmp/loom_dump_XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp failed");
    return;
  }
  kb b;
  build_padded(&b, LOOM_F32, 0, 64, 14, 0);
  compile_dumped(&b.k, "padded read [66, 16] f32", dir);
  char sym[36], path[600], line[512];
  lm_llvm_symbol_name(&b.k, sym);
  snprintf(path, sizeof path, "%s/%s.s", dir, sym);
  FILE *f = fopen(path, "r");
  int gathers = 0, lines = 0;
  while (f && fgets(line, sizeof line, f)) lines++, gathers += strstr(line, "gather") != NULL;
  if (f) fclose(f);
  CHECK(lines > 0 && gathers == 0, "padded read: %d gather instructions in %s", gathers, path);
  check_remove_dir(dir);
#endif
}

/* ------------------------------------------------------------------ 7. vectorization */

static void count_vector_registers(const char *path, int *zmm, int *ymm, int *xmm_packed) {
  *zmm = *ymm = *xmm_packed = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "zmm"))
      (*zmm)++;
    else if (strstr(line, "ymm"))
      (*ymm)++;
    else if (strstr(line, "ps\t") && strstr(line, "xmm"))
      (*xmm_packed)++;
  }
  fclose(f);
}

/* Compiles with LOOM_DUMP set and reports the vector registers in the assembly. */
static lk_fn compile_dumped(const lk_kernel *k, const char *what, const char *dir) {
  setenv("LOOM_DUMP", dir, 1);
  lk_fn fn = compile(k, what);
  unsetenv("LOOM_DUMP");
  char sym[36], path[512];
  lm_llvm_symbol_name(k, sym);
  snprintf(path, sizeof path, "%s/%s.s", dir, sym);
  int zmm, ymm, xmm;
  count_vector_registers(path, &zmm, &ymm, &xmm);
  printf("vectorization: %-28s %s: %d zmm lines, %d ymm lines, %d packed xmm lines\n", what, path,
         zmm, ymm, xmm);
  char listing[512], ll[512];
  snprintf(listing, sizeof listing, "%s/%s.txt", dir, sym);
  snprintf(ll, sizeof ll, "%s/%s.ll", dir, sym);
  CHECK(access(listing, R_OK) == 0 && access(ll, R_OK) == 0 && access(path, R_OK) == 0,
        "LOOM_DUMP did not write %s.{txt,ll,s}", sym);
  return fn;
}

static void test_vectorization(void) {
  char dir[] = "/tmp/loom_dump_XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp failed");
    return;
  }
  enum { N = 1 << 20 };
  int64_t dom[1] = {N};
  kb b;
  kb_init(&b, 1, dom, 1, LK_RED_NONE, LOOM_F32, LOOM_F32, 4);
  int i0 = kb_dim(&b, 0);
  int ab = kb_op2(&b, LK_MUL, LOOM_F32, kb_load(&b, LOOM_F32, 1, i0), kb_load(&b, LOOM_F32, 2, i0));
  kb_end_body(&b, kb_op2(&b, LK_ADD, LOOM_F32, ab, kb_load(&b, LOOM_F32, 3, i0)));
  lk_fn fn = compile_dumped(&b.k, "out = a*b + c (1M f32)", dir);
  if (fn) {
    float *x = malloc(4 * N), *y = malloc(4 * N), *z = malloc(4 * N), *out = malloc(4 * N);
    for (int i = 0; i < N; i++)
      x[i] = (float)i * 0.5f, y[i] = 1.0f / (float)(i + 1), z[i] = (float)(i % 7);
    void *args[4] = {out, x, y, z};
    fn(args, 0, N); /* first touch */
    double t0 = now_ms();
    for (int rep = 0; rep < 10; rep++) fn(args, 0, N);
    double ms = (now_ms() - t0) / 10;
    bool ok = true;
    for (int i = 0; i < N; i++) ok = ok && out[i] == x[i] * y[i] + z[i];
    CHECK(ok, "a*b+c differs from C");
    printf("vectorization: a*b+c 1M f32: %.3f ms per call (%.1f GB/s)\n", ms, 16.0 * N / ms / 1e6);
    free(x), free(y), free(z), free(out);
  }
  /* 2x2 max pooling over rows of 7 windows (stride-2 loads): a 4-wide vector
   * loop and 3 outputs scalar, where LLVM's own choice (16 lanes, then 8) left
   * the whole row scalar: only 4-wide code now. Values against C over random
   * range splits. */
  {
    enum { R = 5, OW = 7, W = 2 * OW };
    int64_t pool_dom[4] = {R, OW, 2, 2};
    kb_init(&b, 4, pool_dom, 2, LK_RED_MAX, LOOM_F32, LOOM_F32, 2);
    int h =
        kb_op2(&b, LK_ADD, LOOM_I64,
               kb_op2(&b, LK_MUL, LOOM_I64, kb_dim(&b, 0), kb_ci(&b, LOOM_I64, 2)), kb_dim(&b, 2));
    int w =
        kb_op2(&b, LK_ADD, LOOM_I64,
               kb_op2(&b, LK_MUL, LOOM_I64, kb_dim(&b, 1), kb_ci(&b, LOOM_I64, 2)), kb_dim(&b, 3));
    int at =
        kb_op2(&b, LK_ADD, LOOM_I64, kb_op2(&b, LK_MUL, LOOM_I64, h, kb_ci(&b, LOOM_I64, W)), w);
    kb_end_body(&b, kb_load(&b, LOOM_F32, 1, at));
    kb_end_epilogue(&b, kb_emit(&b, LK_ACC, LOOM_F32, -1, -1, -1));
    lk_fn pool = compile_dumped(&b.k, "2x2 max over rows of 7", dir);
    float in[2 * R * W], out[R * OW];
    for (int i = 0; i < 2 * R * W; i++) in[i] = (float)((i * 37) % 101) - 50;
    void *args[2] = {out, in};
    if (pool) run_split(pool, args, R * OW);
    int wrong = 0;
    for (int i = 0; pool && i < R; i++)
      for (int j = 0; j < OW; j++) {
        float m = -INFINITY;
        for (int a = 0; a < 2; a++)
          for (int c = 0; c < 2; c++) m = fmaxf(m, in[(2 * i + a) * W + 2 * j + c]);
        wrong += out[i * OW + j] != m;
      }
    CHECK(wrong == 0, "2x2 max over rows of 7: %d wrong outputs", wrong);
#if defined(__x86_64__)
    char sym[36], path[600];
    lm_llvm_symbol_name(&b.k, sym);
    snprintf(path, sizeof path, "%s/%s.s", dir, sym);
    int zmm, ymm, xmm;
    count_vector_registers(path, &zmm, &ymm, &xmm);
    CHECK(xmm > 0 && zmm == 0 && ymm == 0,
          "2x2 max over rows of 7: want 4-wide vectors only, got %d zmm, %d ymm, %d packed xmm "
          "lines in %s",
          zmm, ymm, xmm, path);
#endif
  }
  /* A float sum over the inner dim (reassoc on the accumulating fadd). */
  int64_t dom2[2] = {64, 4096};
  kb_init(&b, 2, dom2, 1, LK_RED_SUM, LOOM_F32, LOOM_F32, 2);
  int x = kb_load(&b, LOOM_F32, 1, kb_offset(&b, 0, 2));
  kb_end_body(&b, x);
  kb_end_epilogue(&b, kb_emit(&b, LK_ACC, LOOM_F32, -1, -1, -1));
  compile_dumped(&b.k, "sum over 4096 f32", dir);
  /* Philox: elementwise over the loop index. */
  kb_init(&b, 1, dom, 1, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  kb_end_body(&b, kb_rand(&b, LOOM_F32, 1, 0, kb_dim(&b, 0)));
  compile_dumped(&b.k, "rand f32", dir);
  /* LSE: both passes vectorize and nothing is called (no libm). */
  for (int d = 0; d < 2; d++) {
    loom_dtype dt = d == 0 ? LOOM_F32 : LOOM_F64;
    int64_t dom3[2] = {64, 4096};
    kb_init(&b, 2, dom3, 1, LK_RED_LSE, dt, dt, 2);
    kb_end_body(&b, kb_load(&b, dt, 1, kb_offset(&b, 0, 2)));
    kb_end_epilogue(&b, kb_emit(&b, LK_ACC, dt, -1, -1, -1));
    compile_dumped(&b.k, d == 0 ? "lse over 4096 f32" : "lse over 4096 f64", dir);
    char sym[36], path[600], line[512];
    lm_llvm_symbol_name(&b.k, sym);
    snprintf(path, sizeof path, "%s/%s.s", dir, sym);
    FILE *f = fopen(path, "r");
    int calls = 0, packed_add = 0;
    const char *add = d == 0 ? "addps\t" : "addpd\t"; /* the sum of exp, in the values' dtype */
    while (f && fgets(line, sizeof line, f)) {
      if (strstr(line, "\tcall") || strstr(line, "\tjmp\t*")) calls++;
      if (strstr(line, add) && strstr(line, "mm")) packed_add++;
    }
    if (f) fclose(f);
    CHECK(f && calls == 0 && packed_add > 0, "lse %s: not vectorized (%d calls, %d packed adds)",
          dname(dt), calls, packed_add);
  }
  check_remove_dir(dir); /* leave nothing behind in /tmp */
}

/* ------------------------------------------------------------------ 8. errors and checks */

static void expect_invalid(kb *b, const char *what, const char *want_substring) {
  const char *msg = lk_kernel_check(&b->k);
  CHECK(msg && (!want_substring || strstr(msg, want_substring)), "check(%s): got %s", what,
        msg ? msg : "NULL");
}

static void simple_kernel(kb *b) { /* out[i] = x[i] + 1 */
  int64_t dom[1] = {10};
  kb_init(b, 1, dom, 1, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  int x = kb_load(b, LOOM_F32, 1, kb_dim(b, 0));
  kb_end_body(b, kb_op2(b, LK_ADD, LOOM_F32, x, kb_cf(b, LOOM_F32, 1.0)));
}

static void test_errors(void) {
  kb b;
  simple_kernel(&b);
  CHECK(lk_kernel_check(&b.k) == NULL, "simple kernel is invalid: %s", lk_kernel_check(&b.k));

  /* Operand out of range: compile returns a status and a message naming the kernel. */
  simple_kernel(&b);
  b.inst[3].b = 17;
  char err[512] = "";
  lk_fn fn = (lk_fn)1;
  loom_status st = lm_llvm_compile(&b.k, &fn, err, sizeof err);
  CHECK(st == LOOM_ERR_COMPILE && fn == NULL, "bad operand: status %d", (int)st);
  CHECK(strstr(err, "lk_") && strstr(err, "operand"), "bad operand: message '%s'", err);
  printf("error message: %s\n", err);
  void *obj = NULL;
  size_t objlen = 0;
  st = lm_llvm_emit_object(&b.k, "lk_bad", &obj, &objlen, err, sizeof err);
  CHECK(st == LOOM_ERR_COMPILE && !obj && strstr(err, "lk_bad"), "emit bad kernel: %d '%s'",
        (int)st, err);

  simple_kernel(&b);
  b.inst[3].b = 3;
  expect_invalid(&b, "self operand", "operand");
  simple_kernel(&b);
  b.inst[2].dtype = LOOM_I32;
  expect_invalid(&b, "const dtype mismatch", NULL);
  simple_kernel(&b);
  b.inst[1].slot = 2;
  expect_invalid(&b, "slot >= nslots", "slot");
  simple_kernel(&b);
  b.inst[3].c = 0;
  expect_invalid(&b, "unused operand", "unused");
  simple_kernel(&b);
  b.k.value = 4;
  b.k.result = 4;
  expect_invalid(&b, "value out of range", "value");
  simple_kernel(&b);
  b.inst[3].op = LK_DIV;
  b.inst[3].dtype = LOOM_I32;
  expect_invalid(&b, "div on int", NULL);
  simple_kernel(&b);
  b.k.ndim = 0;
  expect_invalid(&b, "ndim 0", "ndim");
  simple_kernel(&b);
  b.inst[0].imm_i = 1;
  expect_invalid(&b, "dim out of range", "dim");
  simple_kernel(&b);
  kb_emit(&b, LK_ACC, LOOM_F32, -1, -1, -1);
  b.k.nbody = b.k.ninst;
  expect_invalid(&b, "acc in body", "acc");
  simple_kernel(&b);
  b.inst[3].op = (lk_op)999;
  expect_invalid(&b, "unknown op", "op");
  CHECK(lk_kernel_check(NULL) != NULL, "NULL kernel passes the check");

  /* Reduction rules: epilogue must not use a reduced dim, value dtype = acc dtype. */
  int64_t dom[2] = {4, 8};
  kb_init(&b, 2, dom, 1, LK_RED_SUM, LOOM_F32, LOOM_F32, 2);
  int off = kb_offset(&b, 0, 2); /* uses dim 1, a reduced dim */
  int x = kb_load(&b, LOOM_F32, 1, off);
  kb_end_body(&b, x);
  int acc = kb_emit(&b, LK_ACC, LOOM_F32, -1, -1, -1);
  kb_end_epilogue(&b, kb_op2(&b, LK_ADD, LOOM_F32, acc, x));
  expect_invalid(&b, "epilogue uses reduced body value", "reduced");
  b.k.ninst--; /* drop it: the check rejects it even when the result does not use it */
  b.k.result = acc;
  CHECK(lk_kernel_check(&b.k) == NULL, "good reduction rejected: %s", lk_kernel_check(&b.k));
  b.k.acc_dtype = LOOM_F64;
  expect_invalid(&b, "acc dtype", NULL);
  b.k.acc_dtype = LOOM_F32;
  kb_dim(&b, 1);
  expect_invalid(&b, "epilogue dim of reduced", "reduced dim");
  b.k.ninst--;
  b.k.reduce = LK_RED_ARGMAX;
  expect_invalid(&b, "argmax acc f32", "argmax");
}

/* ------------------------------------------------------------------ 9. hash, listing, cache */

static void test_hash_and_listing(void) {
  kb b1, b2;
  simple_kernel(&b1);
  simple_kernel(&b2);
  /* Unused fields and padding differ: the hash must not. */
  memset(&b2.k.dom[1], 0x5a, sizeof(int64_t) * (LOOM_MAX_DIMS - 1));
  b2.inst[0].imm_f = 3.25;
  b2.inst[0].slot = 7;
  b2.inst[3].imm_i = 99;
  b2.k.acc_dtype = LOOM_I64;
  lk_hash h1 = lk_kernel_hash(&b1.k), h2 = lk_kernel_hash(&b2.k);
  CHECK(h1.lo == h2.lo && h1.hi == h2.hi, "hash depends on unused fields");
  b2.k.dom[0] = 11;
  h2 = lk_kernel_hash(&b2.k);
  CHECK(h1.lo != h2.lo || h1.hi != h2.hi, "hash ignores dom");
  simple_kernel(&b2);
  b2.inst[2].imm_f = 2.0;
  h2 = lk_kernel_hash(&b2.k);
  CHECK(h1.lo != h2.lo || h1.hi != h2.hi, "hash ignores a float const");

  lk_fn f1 = compile(&b1.k, "cache 1"), f2 = compile(&b1.k, "cache 2");
  CHECK(f1 && f1 == f2, "compiling the same kernel twice gives another function");

  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  int64_t dom[1] = {10};
  kb_init(&b1, 1, dom, 1, LK_RED_NONE, LOOM_F32, LOOM_F32, 2);
  int i0 = kb_dim(&b1, 0);
  int off = kb_op2(&b1, LK_ADD, LOOM_I64, i0, kb_ci(&b1, LOOM_I64, 3));
  kb_end_body(&b1, kb_load(&b1, LOOM_F32, 1, off));
  lk_kernel_print(&b1.k, mem);
  fclose(mem);
  CHECK(text && strstr(text, "%3 = f32 load slot1 [%2]"), "listing:\n%s", text ? text : "");
  CHECK(text && strstr(text, "%2 = i64 add %0, %1"), "listing:\n%s", text ? text : "");
  free(text);
  CHECK(strcmp(lk_op_name(LK_WHERE), "where") == 0, "op name");
}

static void test_emit_and_load(void) {
  kb b;
  int64_t dom[2] = {3, 4};
  kb_init(&b, 2, dom, 2, LK_RED_NONE, LOOM_I32, LOOM_I32, 1);
  kb_end_body(&b, kb_op1(&b, LK_CAST, LOOM_I32, kb_offset(&b, 0, 2)));
  void *obj = NULL;
  size_t objlen = 0;
  char err[512] = "";
  loom_status st =
      lm_llvm_emit_object(&b.k, "lk_test_custom_symbol", &obj, &objlen, err, sizeof err);
  CHECK(st == LOOM_OK && obj && objlen > 64, "emit object: %s", err);
  if (st != LOOM_OK) return;
  CHECK(memcmp(obj, "\177ELF", 4) == 0, "object is not ELF");
  lk_fn fn = NULL, again = NULL;
  lm_llvm_object *first = NULL, *second = NULL;
  size_t before = lm_llvm_objects_loaded();
  st = lm_llvm_load_object(obj, objlen, "lk_test_custom_symbol", &fn, &first, err, sizeof err);
  CHECK(st == LOOM_OK && fn && first, "load object: %s", err);
  st = lm_llvm_load_object(obj, objlen, "lk_test_custom_symbol", &again, &second, err, sizeof err);
  CHECK(st == LOOM_OK && again == fn && second == first, "loading twice gives another function");
  CHECK(lm_llvm_objects_loaded() == before + 1, "one object loaded: %zu then %zu", before,
        lm_llvm_objects_loaded());
  /* unloaded after its last holder only; then loaded afresh, and it runs */
  for (int round = 0; round < 2 && fn; round++) {
    int32_t out[12];
    void *args[1] = {out};
    fn(args, 0, 12);
    bool ok = true;
    for (int i = 0; i < 12; i++) ok = ok && out[i] == i;
    CHECK(ok, "loaded object computes the wrong values (round %d)", round);
    lm_llvm_release(first);
    CHECK(lm_llvm_objects_loaded() == before + (round == 0), "after one release: %zu loaded",
          lm_llvm_objects_loaded());
    lm_llvm_release(second);
    CHECK(lm_llvm_objects_loaded() == before, "after the last release: %zu loaded",
          lm_llvm_objects_loaded());
    if (round == 1) break;
    st = lm_llvm_load_object(obj, objlen, "lk_test_custom_symbol", &fn, &first, err, sizeof err);
    CHECK(st == LOOM_OK && fn, "loading an unloaded object again: %s", err);
    second = NULL;
  }
  free(obj);
  char junk[256];
  memset(junk, 0x42, sizeof junk);
  lk_fn bad = (lk_fn)1;
  st = lm_llvm_load_object(junk, sizeof junk, "lk_junk", &bad, NULL, err, sizeof err);
  CHECK(st == LOOM_ERR_COMPILE && !bad && strstr(err, "lk_junk"), "junk object: %d '%s'", (int)st,
        err);
  const char *id = lm_llvm_target_id();
  CHECK(strncmp(id, "llvm-14", 7) == 0 && strstr(id, "x86_64"), "target id %s", id);
  /* the code generators' sources, hashed at configure time, end it */
  const char *cg = strrchr(id, '/');
  bool hex = cg && strncmp(cg, "/cg", 3) == 0 && strlen(cg) == 3 + 16;
  for (int i = 3; hex && cg[i]; i++) hex = strchr("0123456789abcdef", cg[i]) != NULL;
  CHECK(hex, "target id ends with /cg and 16 hex digits: '%s'", cg ? cg : "(no slash)");
  printf("target id: %.160s...\n", id);
}

/* ------------------------------------------------------------------ 10. threads */

typedef struct thread_job {
  const lk_kernel *k;
  lk_fn fn;
} thread_job;

static void *compile_thread(void *p) {
  thread_job *job = p;
  char err[512];
  if (lm_llvm_compile(job->k, &job->fn, err, sizeof err) != LOOM_OK) job->fn = NULL;
  return NULL;
}

static void test_threads(void) {
  kb b;
  int64_t dom[1] = {100};
  kb_init(&b, 1, dom, 1, LK_RED_NONE, LOOM_F64, LOOM_F64, 1);
  kb_end_body(&b, kb_op1(&b, LK_SQRT, LOOM_F64, kb_op1(&b, LK_CAST, LOOM_F64, kb_dim(&b, 0))));
  enum { T = 4 };
  pthread_t th[T];
  thread_job jobs[T];
  for (int t = 0; t < T; t++) {
    jobs[t] = (thread_job){&b.k, NULL};
    pthread_create(&th[t], NULL, compile_thread, &jobs[t]);
  }
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  bool same = jobs[0].fn != NULL;
  for (int t = 1; t < T; t++) same = same && jobs[t].fn == jobs[0].fn;
  CHECK(same, "threads compiling the same kernel got different functions");
  if (same) {
    double out[100];
    void *args[1] = {out};
    jobs[0].fn(args, 0, 100);
    CHECK(out[49] == 7.0, "sqrt(49) = %g", out[49]);
  }
}

/* ------------------------------------------------------------------ 11. compile time */

static void report_compile_time(void) {
  enum { K = 5 };
  double total = 0;
  for (int i = 0; i < K; i++) {
    kb b;
    simple_kernel(&b);
    b.inst[2].imm_f = 1000.0 + i; /* a kernel nobody compiled yet */
    double t0 = now_ms();
    compile(&b.k, "timing");
    total += now_ms() - t0;
  }
  printf("compile time: %.1f ms per small kernel (average of %d, emit + load)\n", total / K, K);
}

/* ------------------------------------------------------------------ row statistics */

/* out[r][j] = (x[r][j] - mean_r) * var_r over x [5, 7] in F64: stat 0 the row's
 * sum, stat 1 the sum of squared deviations (using stat 0), and a stat of
 * each other kind; the kernel run over ranges that start and end mid-row. */
static void row_stats_kernel(kb *b, lk_reduce third) {
  int64_t dom[2] = {5, 7};
  kb_init(b, 2, dom, 2, LK_RED_NONE, LOOM_F64, LOOM_F64, 2);
  int x = kb_load(b, LOOM_F64, 1, kb_offset(b, 0, 2));
  int n = kb_cf(b, LOOM_F64, 7.0);
  int s0 = kb_emit(b, LK_STAT, LOOM_F64, -1, -1, -1);
  b->inst[s0].imm_i = 0;
  int dev = kb_op2(b, LK_SUB, LOOM_F64, x, kb_op2(b, LK_DIV, LOOM_F64, s0, n));
  int sq = kb_op2(b, LK_MUL, LOOM_F64, dev, dev);
  int s1 = kb_emit(b, LK_STAT, LOOM_F64, -1, -1, -1);
  b->inst[s1].imm_i = 1;
  int s2 = kb_emit(b, LK_STAT, LOOM_F64, -1, -1, -1);
  b->inst[s2].imm_i = 2;
  int v = kb_op2(b, LK_ADD, LOOM_F64, kb_op2(b, LK_MUL, LOOM_F64, dev, s1), s2);
  kb_end_body(b, v);
  b->k.nstats = 3;
  b->k.stat[0] = (lk_stat){LK_RED_SUM, LOOM_F64, x};
  b->k.stat[1] = (lk_stat){LK_RED_SUM, LOOM_F64, sq};
  b->k.stat[2] = (lk_stat){third, LOOM_F64, x};
}

static double row_stats_reference(const double *x, int r, int j, lk_reduce third) {
  double sum = 0, ss = 0, t = third == LK_RED_MIN ? INFINITY : -INFINITY, lse = 0;
  for (int i = 0; i < 7; i++) sum += x[r * 7 + i];
  for (int i = 0; i < 7; i++) {
    double d = x[r * 7 + i] - sum / 7;
    ss += d * d;
    t = third == LK_RED_MIN ? fmin(t, x[r * 7 + i]) : fmax(t, x[r * 7 + i]);
  }
  for (int i = 0; i < 7; i++) lse += exp(x[r * 7 + i] - t);
  double third_value = third == LK_RED_LSE ? t + log(lse) : t;
  return (x[r * 7 + j] - sum / 7) * ss + third_value;
}

static void test_row_stats(void) {
  double x[35], out[35];
  for (int i = 0; i < 35; i++) x[i] = sin(i * 1.7) * 3;
  lk_reduce thirds[3] = {LK_RED_MAX, LK_RED_MIN, LK_RED_LSE};
  for (int t = 0; t < 3; t++) {
    kb b;
    row_stats_kernel(&b, thirds[t]);
    CHECK(lk_kernel_check(&b.k) == NULL, "row stats kernel is invalid: %s", lk_kernel_check(&b.k));
    lk_fn fn = compile(&b.k, "row stats");
    if (!fn) continue;
    int64_t ranges[3][2] = {{0, 35}, {3, 30}, {12, 13}};
    for (int r = 0; r < 3; r++) {
      for (int i = 0; i < 35; i++) out[i] = -1234.5;
      void *args[2] = {out, x};
      fn(args, ranges[r][0], ranges[r][1]);
      for (int i = 0; i < 35; i++) {
        bool inside = i >= ranges[r][0] && i < ranges[r][1];
        double want = inside ? row_stats_reference(x, i / 7, i % 7, thirds[t]) : -1234.5;
        CHECK(fabs(out[i] - want) <= 1e-12 * fmax(1, fabs(want)),
              "row stats (%d) range %d point %d: got %.17g, want %.17g", t, r, i, out[i], want);
      }
    }
  }
  /* the rules: earlier stats only, kinds, a map of 2+ dims */
  kb b;
  row_stats_kernel(&b, LK_RED_MAX);
  b.k.stat[0].value = b.k.value; /* uses stats 1 and 2 */
  expect_invalid(&b, "stat using later stats", "later stat");
  row_stats_kernel(&b, LK_RED_ARGMAX);
  expect_invalid(&b, "argmax stat", "sum, max, min or lse");
  row_stats_kernel(&b, LK_RED_MAX);
  b.k.nstats = LK_MAX_STATS + 1;
  expect_invalid(&b, "too many stats", "nstats");
  row_stats_kernel(&b, LK_RED_MAX);
  b.k.nstats = 2; /* instruction `stat 2` now names a stat that is not there */
  expect_invalid(&b, "stat index", "stat index");
  row_stats_kernel(&b, LK_RED_MAX);
  b.k.stat[1].acc_dtype = LOOM_F32;
  expect_invalid(&b, "stat dtype", "stat dtype");
  /* the hash sees the stats */
  kb c;
  row_stats_kernel(&b, LK_RED_MAX);
  row_stats_kernel(&c, LK_RED_MIN);
  lk_hash hb = lk_kernel_hash(&b.k), hc = lk_kernel_hash(&c.k);
  CHECK(hb.lo != hc.lo || hb.hi != hc.hi, "kernels differing in a stat's kind hash alike");
}

int main(void) {
  test_broadcast_add();
  test_all_elementwise();
  test_where();
  test_consts();
  test_casts();
  test_reductions();
  test_lse();
  test_rand();
  test_split_identical();
  test_shapes();
  test_fill_and_in_place();
  test_epilogue_dim();
  test_padded_reads();
  test_merge_dims();
  test_split_rows();
  test_absorbed_exp();
  test_row_stats();
  test_errors();
  test_hash_and_listing();
  test_emit_and_load();
  test_threads();
  report_compile_time();
  test_vectorization();
  lm_llvm_shutdown();
  lm_llvm_shutdown();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
