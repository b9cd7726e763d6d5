/*
 * Numbers at their edges (issue 41), on the CPU and (LOOM_TEST_DEVICE=cuda)
 * on a CUDA device:
 * - integer scalar ops follow PyTorch: the scalar is converted to the
 *   tensor's dtype modulo 2^bits and the arithmetic wraps, computed exactly in
 *   integers (U8 + 300 adds 44, U8 + -1 adds 255, I8 + 300 adds 44; INT32_MAX
 *   ** 2 is 1; I64 powers past 2^53 exact). Every scalar op over all 256 U8
 *   and all 256 I8 values and a set
 *   of scalars, and at the extremes of I32 and I64; integer powers of tensors;
 *   the refusals (a negative or out-of-range exponent, a where value the dtype
 *   cannot hold, a scalar outside the 64-bit integers). Expected values are
 *   computed here with explicit wrapping; samples of them are PyTorch 1.13's.
 * - float ops keep their range: expm1 finite up to the float's max (it was
 *   inf from 84.2 in F32, 703 in F64), var and std of huge and tiny values
 *   (the squares overflowed past 1.8e19 and vanished below 1e-19 in F32).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

/* ================================================================ integers */

static bool fits(loom_dtype d, double s) {
  switch (d) {
  case LOOM_U8: return s >= 0 && s <= 255;
  case LOOM_I8: return s >= -128 && s <= 127;
  case LOOM_I32: return s >= -0x1p31 && s < 0x1p31;
  default: return s >= -0x1p63 && s < 0x1p63;
  }
}

static loom_tensor *on_device(const void *v, loom_shape s, loom_dtype d) {
  return loom_to(loom_from_data(v, s, d, LOOM_CPU), test_device());
}

/* Integers of dtype d from int64 values that d holds. */
static loom_tensor *ints(const int64_t *v, loom_shape s, loom_dtype d) {
  return loom_to(loom_cast(loom_from_data(v, s, LOOM_I64, LOOM_CPU), d), test_device());
}

/* A tensor's elements as int64 (integers, bools) or doubles (floats). */
static bool fetch(loom_tensor *t, int64_t *iv, double *fv, int64_t n) {
  if (loom_dtype_is_float(loom_dtype_of(t)))
    return loom_copy_to_host(loom_cast(t, LOOM_F64), fv, sizeof(double) * (size_t)n) == LOOM_OK;
  return loom_copy_to_host(loom_cast(t, LOOM_I64), iv, sizeof(int64_t) * (size_t)n) == LOOM_OK;
}

typedef enum sop {
  ADD,
  SUB,
  RSUB,
  MUL,
  MAXIMUM,
  MINIMUM,
  LT,
  LE,
  GT,
  GE,
  EQ,
  NE,
  DIV,
  RDIV,
  POW,
  WHERE,
  NSOPS
} sop;
static const char *const sop_name[NSOPS] = {
    "loom_add_s", "loom_sub_s",  "loom_rsub_s", "loom_mul_s",  "loom_maximum_s", "loom_minimum_s",
    "loom_lt_s",  "loom_le_s",   "loom_gt_s",   "loom_ge_s",   "loom_eq_s",      "loom_ne_s",
    "loom_div_s", "loom_rdiv_s", "loom_pow_s",  "loom_where_s"};

/* cond: where_s's condition (odd positions) */
static loom_tensor *apply(sop op, loom_tensor *x, double s, loom_tensor *cond) {
  switch (op) {
  case ADD: return loom_add_s(x, s);
  case SUB: return loom_sub_s(x, s);
  case RSUB: return loom_rsub_s(s, x);
  case MUL: return loom_mul_s(x, s);
  case MAXIMUM: return loom_maximum_s(x, s);
  case MINIMUM: return loom_minimum_s(x, s);
  case LT: return loom_lt_s(x, s);
  case LE: return loom_le_s(x, s);
  case GT: return loom_gt_s(x, s);
  case GE: return loom_ge_s(x, s);
  case EQ: return loom_eq_s(x, s);
  case NE: return loom_ne_s(x, s);
  case DIV: return loom_div_s(x, s);
  case RDIV: return loom_rdiv_s(s, x);
  case POW: return loom_pow_s(x, s);
  case WHERE: return loom_where_s(cond, x, s);
  case NSOPS: break;
  }
  return NULL;
}

/* What op gives for element x (position i) of dtype d: an integer in *iv or a
 * float in *fv (div, rdiv); false where the op must refuse the scalar. */
static bool expected(sop op, loom_dtype d, int64_t x, int64_t i, double s, int64_t *iv,
                     double *fv) {
  if (op == DIV || op == RDIV) { /* true division: F32, as torch */
    float a = (float)x, b = (float)s;
    *fv = op == DIV ? (double)(a / b) : (double)(b / a);
    return true;
  }
  if (!(s >= -0x1p63 && s < 0x1p63)) return false; /* not a 64-bit integer */
  if (op == POW) {
    if (s < 0 || !fits(d, s)) return false;
    *iv = ref_int_pow(x, (int64_t)s, d);
    return true;
  }
  if (op == WHERE) {
    if (!fits(d, s)) return false;
    *iv = (i & 1) ? x : (int64_t)s;
    return true;
  }
  int64_t w = ref_int_wrap((uint64_t)(int64_t)s, d);
  uint64_t ux = (uint64_t)x, uw = (uint64_t)w;
  switch (op) {
  case ADD: *iv = ref_int_wrap(ux + uw, d); break;
  case SUB: *iv = ref_int_wrap(ux - uw, d); break;
  case RSUB: *iv = ref_int_wrap(uw - ux, d); break;
  case MUL: *iv = ref_int_wrap(ux * uw, d); break;
  case MAXIMUM: *iv = x > w ? x : w; break;
  case MINIMUM: *iv = x < w ? x : w; break;
  case LT: *iv = x < w; break;
  case LE: *iv = x <= w; break;
  case GT: *iv = x > w; break;
  case GE: *iv = x >= w; break;
  case EQ: *iv = x == w; break;
  case NE: *iv = x != w; break;
  default: return false;
  }
  return true;
}

static bool same_float(double a, double b) {
  return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
}

/* Every scalar op on the values xs of dtype d with each scalar: the values
 * (exactly), or the refusal naming the op and the scalar. */
static void sweep_scalar_ops(loom_dtype d, const int64_t *xs, int64_t n, const double *scalars,
                             int nscalars) {
  int64_t *got_i = malloc(sizeof(int64_t) * (size_t)n), *cond_v = malloc(sizeof(int64_t) * n);
  double *got_f = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) cond_v[i] = i & 1;
  for (int si = 0; si < nscalars; si++)
    for (int op = 0; op < NSOPS; op++) LOOM_SCOPE {
        double s = scalars[si];
        loom_tensor *x = ints(xs, LOOM_SHAPE(n), d), *cond = ints(cond_v, LOOM_SHAPE(n), LOOM_BOOL);
        loom_tensor *r = apply((sop)op, x, s, cond);
        int64_t want_i = 0;
        double want_f = 0;
        if (!expected((sop)op, d, xs[0], 0, s, &want_i, &want_f)) {
          CHECK_MSG(loom_status_of(r) == LOOM_ERR_VALUE, "%s(%s, %.17g): %s, expected a refusal",
                    sop_name[op], loom_dtype_name(d), s, loom_status_name(loom_status_of(r)));
          const char *msg = loom_error_message(r);
          CHECK_MSG(msg && strncmp(msg, sop_name[op], strlen(sop_name[op])) == 0,
                    "%s's refusal names it: %s", sop_name[op], msg ? msg : "(none)");
          continue;
        }
        if (!fetch(r, got_i, got_f, n)) {
          CHECK_MSG(false, "%s(%s, %.17g) failed: %s", sop_name[op], loom_dtype_name(d), s,
                    loom_error_message(r) ? loom_error_message(r) : loom_last_error());
          continue;
        }
        loom_dtype want_dt = op >= LT && op <= NE      ? LOOM_BOOL
                             : op == DIV || op == RDIV ? LOOM_F32
                                                       : d;
        CHECK_MSG(loom_dtype_of(r) == want_dt, "%s(%s, %.17g) is %s, expected %s", sop_name[op],
                  loom_dtype_name(d), s, loom_dtype_name(loom_dtype_of(r)),
                  loom_dtype_name(want_dt));
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
          expected((sop)op, d, xs[i], i, s, &want_i, &want_f);
          bool ok = op == DIV || op == RDIV ? same_float(got_f[i], want_f) : got_i[i] == want_i;
          if (!ok) bad = i;
        }
        if (bad >= 0) {
          expected((sop)op, d, xs[bad], bad, s, &want_i, &want_f);
          if (op == DIV || op == RDIV)
            CHECK_MSG(false, "%s(%s %lld, %.17g) = %.9g, expected %.9g", sop_name[op],
                      loom_dtype_name(d), (long long)xs[bad], s, got_f[bad], want_f);
          else
            CHECK_MSG(false, "%s(%s %lld, %.17g) = %lld, expected %lld", sop_name[op],
                      loom_dtype_name(d), (long long)xs[bad], s, (long long)got_i[bad],
                      (long long)want_i);
        } else {
          CHECK(true);
        }
      }
  free(got_i), free(got_f), free(cond_v);
}

/* Every scalar op over all 256 U8 values. */
static void test_u8_scalar_ops_exhaustive(void) {
  int64_t xs[256];
  for (int i = 0; i < 256; i++) xs[i] = i;
  static const double scalars[] = {-300, -256, -1, 0, 1, 2, 3, 127, 255, 256, 300, 1000, 1e30};
  sweep_scalar_ops(LOOM_U8, xs, 256, scalars, (int)(sizeof scalars / sizeof scalars[0]));
}

/* Every scalar op over all 256 I8 values (torch.int8): scalars wrap to
 * [-128, 127] (300 is 44, 255 is -1, 128 is -128). */
static void test_i8_scalar_ops_exhaustive(void) {
  int64_t xs[256];
  for (int i = 0; i < 256; i++) xs[i] = i - 128;
  static const double scalars[] = {-300, -256, -129, -128, -1,  0,   1,    2,
                                   3,    127,  128,  255,  256, 300, 1000, 1e30};
  sweep_scalar_ops(LOOM_I8, xs, 256, scalars, (int)(sizeof scalars / sizeof scalars[0]));
}

/* I32 and I64 at their extremes, with scalars past their range. */
static void test_wide_scalar_ops_extremes(void) {
  static const int64_t i32[] = {INT32_MAX, INT32_MIN,     0, 1,  -1, 1 << 30, -(1 << 30), 46341,
                                -46341,    INT32_MAX - 1, 3, -3, 7};
  static const int64_t i64[] = {INT64_MAX,
                                INT64_MIN,
                                0,
                                1,
                                -1,
                                (int64_t)1 << 62,
                                ((int64_t)1 << 53) + 1,
                                -((int64_t)1 << 53) - 1,
                                3037000500,
                                -3037000500,
                                3,
                                -3,
                                7};
  static const double scalars[] = {
      0,          1,          -1,          2,      3,      31,      40,
      41,         63,         64,          300,    -300,   0x1p31,  -0x1p31,
      0x1p31 - 1, 0x1p32 + 5, -0x1p32 - 5, 0x1p53, 0x1p62, -0x1p63, 0x1p63 - 1024,
      1e18,       0x1p63,     1e30};
  int ns = (int)(sizeof scalars / sizeof scalars[0]);
  sweep_scalar_ops(LOOM_I32, i32, (int64_t)(sizeof i32 / sizeof i32[0]), scalars, ns);
  sweep_scalar_ops(LOOM_I64, i64, (int64_t)(sizeof i64 / sizeof i64[0]), scalars, ns);
}

static void expect_ints(const char *what, loom_tensor *t, loom_dtype d, const int64_t *want,
                        int n) {
  int64_t got[256];
  CHECK_MSG(loom_dtype_of(t) == d, "%s: dtype %s, expected %s", what,
            loom_dtype_name(loom_dtype_of(t)), loom_dtype_name(d));
  if (!fetch(t, got, NULL, n)) {
    CHECK_MSG(false, "%s failed: %s", what, loom_error_message(t) ? loom_error_message(t) : "");
    return;
  }
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (got[i] != want[i] && bad++ < 4)
      CHECK_MSG(false, "%s[%d] = %lld, expected %lld", what, i, (long long)got[i],
                (long long)want[i]);
  if (!bad) CHECK(true);
}

/* Values PyTorch 1.13 printed, the model above checked against them. */
static void test_torch_samples(void) {
  LOOM_SCOPE {
    loom_tensor *u = ints((const int64_t[]){255, 0, 1, 128}, LOOM_SHAPE(4), LOOM_U8);
    expect_ints("u8 + -1", loom_add_s(u, -1), LOOM_U8, (const int64_t[]){254, 255, 0, 127}, 4);
    expect_ints("u8 + 300", loom_add_s(u, 300), LOOM_U8, (const int64_t[]){43, 44, 45, 172}, 4);
    expect_ints("u8 - 300", loom_sub_s(u, 300), LOOM_U8, (const int64_t[]){211, 212, 213, 84}, 4);
    expect_ints("u8 * 300", loom_mul_s(u, 300), LOOM_U8, (const int64_t[]){212, 0, 44, 0}, 4);
    expect_ints("300 - u8", loom_rsub_s(300, u), LOOM_U8, (const int64_t[]){45, 44, 43, 172}, 4);
    expect_ints("u8 < 300", loom_lt_s(u, 300), LOOM_BOOL, (const int64_t[]){0, 1, 1, 0}, 4);
    expect_ints("u8 == -1", loom_eq_s(u, -1), LOOM_BOOL, (const int64_t[]){1, 0, 0, 0}, 4);
    expect_ints("u8 ** u8",
                loom_pow(ints((const int64_t[]){2, 3, 255, 0}, LOOM_SHAPE(4), LOOM_U8),
                         ints((const int64_t[]){8, 5, 3, 0}, LOOM_SHAPE(4), LOOM_U8)),
                LOOM_U8, (const int64_t[]){0, 243, 255, 1}, 4);
    loom_tensor *i32 =
        ints((const int64_t[]){INT32_MAX, INT32_MIN, 46341, -3}, LOOM_SHAPE(4), LOOM_I32);
    expect_ints("i32 ** 2", loom_pow_s(i32, 2), LOOM_I32, (const int64_t[]){1, 0, -2147479015, 9},
                4);
    expect_ints("i32 ** i32",
                loom_pow(i32, ints((const int64_t[]){2, -1, 3, 31}, LOOM_SHAPE(4), LOOM_I32)),
                LOOM_I32, (const int64_t[]){1, 0, -1932785795, -1264544299}, 4);
    loom_tensor *i64 = ints((const int64_t[]){3, -3, 7}, LOOM_SHAPE(3), LOOM_I64);
    expect_ints("i64 ** 41", loom_pow_s(i64, 41), LOOM_I64,
                (const int64_t[]){-420491770248316829, 420491770248316829, -6596974204628493241},
                3);
    expect_ints("3 ** 40", loom_pow_s(i64, 40), LOOM_I64,
                (const int64_t[]){-6289078614652622815, -6289078614652622815, -6212923193149656639},
                3);
    expect_ints("i64 ** negative",
                loom_pow(ints((const int64_t[]){2, 1, -1, 0, -2, 3}, LOOM_SHAPE(6), LOOM_I64),
                         ints((const int64_t[]){-1, -1, -3, -1, -2, -2}, LOOM_SHAPE(6), LOOM_I64)),
                LOOM_I64, (const int64_t[]){0, 1, -1, 0, 0, 0}, 6);
    expect_ints(
        "INT64_MAX ** (2^32 + 5)",
        loom_pow_s(ints((const int64_t[]){INT64_MAX, INT64_MIN, 0, 1}, LOOM_SHAPE(4), LOOM_I64),
                   0x1p32 + 5),
        LOOM_I64, (const int64_t[]){INT64_MAX, 0, 0, 1}, 4);
    loom_tensor *b = ints((const int64_t[]){1, 0}, LOOM_SHAPE(2), LOOM_BOOL);
    expect_ints("bool + 300", loom_add_s(b, 300), LOOM_I64, (const int64_t[]){301, 300}, 2);
    expect_ints("bool + -1", loom_add_s(b, -1), LOOM_I64, (const int64_t[]){0, -1}, 2);
    expect_ints("bool < 2", loom_lt_s(b, 2), LOOM_BOOL, (const int64_t[]){1, 1}, 2);
    expect_ints("bool == 257", loom_eq_s(b, 257), LOOM_BOOL, (const int64_t[]){0, 0}, 2);
    expect_ints("where(u8 > 0, u8, 255)", loom_where_s(loom_gt_s(u, 0), u, 255), LOOM_U8,
                (const int64_t[]){255, 255, 1, 128}, 4);
  }
  loom_clear_error();
}

/* a^e modulo 2^64, wrapped to unsigned d (U64's exponents past 2^63 too). */
static int64_t unsigned_pow(uint64_t a, uint64_t e, loom_dtype d) {
  uint64_t r = 1;
  for (; e; e >>= 1, a *= a)
    if (e & 1) r *= a;
  return ref_int_wrap(r, d);
}

/* I16 as PyTorch 1.13 printed it; U16, U32, U64 as NumPy 1.24 did (torch
 * 1.13 has none): arithmetic wraps, comparisons are unsigned, sums are I64
 * (U64 for U64), promotion is NumPy's. */
static void test_wide_int_samples(void) {
  LOOM_SCOPE {
    loom_tensor *x = ints((const int64_t[]){32767, -32768, 1, -1, 300}, LOOM_SHAPE(5), LOOM_I16);
    expect_ints("i16 + 1", loom_add_s(x, 1), LOOM_I16, (const int64_t[]){-32768, -32767, 2, 0, 301},
                5);
    expect_ints("i16 * 300", loom_mul_s(x, 300), LOOM_I16,
                (const int64_t[]){-300, 0, 300, -300, 24464}, 5);
    expect_ints("-i16", loom_neg(x), LOOM_I16, (const int64_t[]){-32767, -32768, -1, 1, -300}, 5);
    expect_ints("abs(i16)", loom_abs(x), LOOM_I16, (const int64_t[]){32767, -32768, 1, 1, 300}, 5);
    expect_ints("i16 < 300", loom_lt_s(x, 300), LOOM_BOOL, (const int64_t[]){0, 1, 1, 1, 0}, 5);
    expect_ints("sum(i16)", loom_sum_all(x), LOOM_I64, (const int64_t[]){299}, 1);
    expect_ints("cumsum(i16)", loom_cumsum(x, 0), LOOM_I64,
                (const int64_t[]){32767, -1, 0, -1, 299}, 5);
    expect_ints("i16 + u8",
                loom_add(x, ints((const int64_t[]){255, 255, 0, 0, 1}, LOOM_SHAPE(5), LOOM_U8)),
                LOOM_I16, (const int64_t[]){-32514, -32513, 1, -1, 301}, 5);
    expect_ints("i16 + i8",
                loom_add(x, ints((const int64_t[]){1, -1, 0, 0, -128}, LOOM_SHAPE(5), LOOM_I8)),
                LOOM_I16, (const int64_t[]){-32768, 32767, 1, -1, 172}, 5);
    expect_ints("i16 ** i16",
                loom_pow(ints((const int64_t[]){2, 3, -3, 7}, LOOM_SHAPE(4), LOOM_I16),
                         ints((const int64_t[]){15, 10, 7, 6}, LOOM_SHAPE(4), LOOM_I16)),
                LOOM_I16, (const int64_t[]){-32768, -6487, -2187, -13423}, 4);
    const float f[] = {32767.9f, -32768.9f, 2.5f, -2.5f, -0.5f, 1e10f, NAN};
    expect_ints("f32 -> i16", loom_cast(on_device(f, LOOM_SHAPE(7), LOOM_F32), LOOM_I16), LOOM_I16,
                (const int64_t[]){32767, -32768, 2, -2, 0, 32767, 0}, 7);

    loom_tensor *u = ints((const int64_t[]){0, 1, 65535, 40000, 7}, LOOM_SHAPE(5), LOOM_U16);
    expect_ints("u16 + 1", loom_add_s(u, 1), LOOM_U16, (const int64_t[]){1, 2, 0, 40001, 8}, 5);
    expect_ints("u16 - 2", loom_sub_s(u, 2), LOOM_U16,
                (const int64_t[]){65534, 65535, 65533, 39998, 5}, 5);
    expect_ints("u16 * 3", loom_mul_s(u, 3), LOOM_U16, (const int64_t[]){0, 3, 65533, 54464, 21},
                5);
    expect_ints("u16 * u16", loom_mul(u, u), LOOM_U16, (const int64_t[]){0, 1, 1, 4096, 49}, 5);
    expect_ints("-u16", loom_neg(u), LOOM_U16, (const int64_t[]){0, 65535, 1, 25536, 65529}, 5);
    expect_ints("u16 < 40000", loom_lt_s(u, 40000), LOOM_BOOL, (const int64_t[]){1, 1, 0, 0, 1}, 5);
    expect_ints("sum(u16)", loom_sum_all(u), LOOM_I64, (const int64_t[]){105543}, 1);
    expect_ints("cumsum(u16)", loom_cumsum(u, 0), LOOM_I64,
                (const int64_t[]){0, 1, 65536, 105536, 105543}, 5);
    expect_ints("max(u16)", loom_max(u, (const int[]){0}, 1, false), LOOM_U16,
                (const int64_t[]){65535}, 1);
    expect_ints("argmax(u16)", loom_argmax(u, 0, false), LOOM_I64, (const int64_t[]){2}, 1);
    expect_ints("u16 + i8",
                loom_add(u, ints((const int64_t[]){-1, -1, 1, -128, 127}, LOOM_SHAPE(5), LOOM_I8)),
                LOOM_I32, (const int64_t[]){-1, 0, 65536, 39872, 134}, 5);
    expect_ints("u16 -> i16", loom_cast(u, LOOM_I16), LOOM_I16,
                (const int64_t[]){0, 1, -1, -25536, 7}, 5);
    const float fu[] = {0.9f, 65535.9f, 2.5f, 40000.7f, -1.5f, 1e10f, NAN};
    expect_ints("f32 -> u16", loom_cast(on_device(fu, LOOM_SHAPE(7), LOOM_F32), LOOM_U16), LOOM_U16,
                (const int64_t[]){0, 65535, 2, 40000, 0, 65535, 0}, 7);

    loom_tensor *w =
        ints((const int64_t[]){0, 1, 4294967295, 3000000000, 7}, LOOM_SHAPE(5), LOOM_U32);
    expect_ints("u32 + 1", loom_add_s(w, 1), LOOM_U32, (const int64_t[]){1, 2, 0, 3000000001, 8},
                5);
    expect_ints("u32 - 2", loom_sub_s(w, 2), LOOM_U32,
                (const int64_t[]){4294967294, 4294967295, 4294967293, 2999999998, 5}, 5);
    expect_ints("u32 * 3", loom_mul_s(w, 3), LOOM_U32,
                (const int64_t[]){0, 3, 4294967293, 410065408, 21}, 5);
    expect_ints("-u32", loom_neg(w), LOOM_U32,
                (const int64_t[]){0, 4294967295, 1, 1294967296, 4294967289}, 5);
    expect_ints("u32 > 2^31", loom_gt_s(w, 2147483648.0), LOOM_BOOL,
                (const int64_t[]){0, 0, 1, 1, 0}, 5);
    expect_ints("sum(u32)", loom_sum_all(w), LOOM_I64, (const int64_t[]){7294967303}, 1);
    expect_ints("u32 + i32",
                loom_add(w, ints((const int64_t[]){-1, -1, 1, -5, 2}, LOOM_SHAPE(5), LOOM_I32)),
                LOOM_I64, (const int64_t[]){-1, 0, 4294967296, 2999999995, 9}, 5);
    expect_ints("u32 ** u32",
                loom_pow(ints((const int64_t[]){2, 3, 65536}, LOOM_SHAPE(3), LOOM_U32),
                         ints((const int64_t[]){31, 21, 2}, LOOM_SHAPE(3), LOOM_U32)),
                LOOM_U32, (const int64_t[]){2147483648, 1870418611, 0}, 3);
    const double fw[] = {0.9, 4294967295.0, 3e9 + 0.5, 12345.7, -1.0, 1e12};
    expect_ints("f64 -> u32", loom_cast(on_device(fw, LOOM_SHAPE(6), LOOM_F64), LOOM_U32), LOOM_U32,
                (const int64_t[]){0, 4294967295, 3000000000, 12345, 0, 4294967295}, 6);

    /* U64 values as their bits: -1 is 2^64 - 1, INT64_MIN 2^63 */
    loom_tensor *q = ints((const int64_t[]){0, 1, -1, INT64_MIN, 7}, LOOM_SHAPE(5), LOOM_U64);
    expect_ints("u64 + 1", loom_add_s(q, 1), LOOM_U64, (const int64_t[]){1, 2, 0, INT64_MIN + 1, 8},
                5);
    expect_ints("u64 - 2", loom_sub_s(q, 2), LOOM_U64,
                (const int64_t[]){-2, -1, -3, INT64_MAX - 1, 5}, 5);
    expect_ints("u64 * 3", loom_mul_s(q, 3), LOOM_U64, (const int64_t[]){0, 3, -3, INT64_MIN, 21},
                5);
    expect_ints("-u64", loom_neg(q), LOOM_U64, (const int64_t[]){0, -1, 1, INT64_MIN, -7}, 5);
    expect_ints("u64 + -1", loom_add_s(q, -1), LOOM_U64, (const int64_t[]){-1, 0, -2, INT64_MAX, 6},
                5);
    loom_tensor *inexact = loom_add_s(q, -2); /* 2^64 - 2: no double holds it */
    CHECK_MSG(loom_status_of(inexact) == LOOM_ERR_VALUE &&
                  strstr(loom_error_message(inexact), "subtract 2 instead") != NULL,
              "u64 + -2: %s",
              loom_error_message(inexact) ? loom_error_message(inexact) : "no error");
    loom_clear_error();
    loom_tensor *top = ints((const int64_t[]){INT64_MAX}, LOOM_SHAPE(1), LOOM_U64);
    expect_ints("u64 > 2^63 - 1", loom_gt(q, top), LOOM_BOOL, (const int64_t[]){0, 0, 1, 1, 0}, 5);
    expect_ints("sum(u64)", loom_sum_all(q), LOOM_U64, (const int64_t[]){INT64_MIN + 7}, 1);
    expect_ints("cumsum(u64)", loom_cumsum(q, 0), LOOM_U64,
                (const int64_t[]){0, 1, 0, INT64_MIN, INT64_MIN + 7}, 5);
    expect_ints("max(u64)", loom_max(q, (const int[]){0}, 1, false), LOOM_U64,
                (const int64_t[]){-1}, 1);
    expect_ints("min(u64)", loom_min(q, (const int[]){0}, 1, false), LOOM_U64, (const int64_t[]){0},
                1);
    expect_ints("argmax(u64)", loom_argmax(q, 0, false), LOOM_I64, (const int64_t[]){2}, 1);
    expect_ints("u64 + u8", loom_add(q, loom_cast(q, LOOM_U8)), LOOM_U64,
                (const int64_t[]){0, 2, 254, INT64_MIN, 14}, 5);
    expect_ints("u64 + i64 (loom: I64)", loom_add(q, loom_cast(q, LOOM_I64)), LOOM_I64,
                (const int64_t[]){0, 2, -2, 0, 14}, 5);
    expect_ints(
        "i16 -> u64",
        loom_cast(ints((const int64_t[]){-1, -32768, 5}, LOOM_SHAPE(3), LOOM_I16), LOOM_U64),
        LOOM_U64, (const int64_t[]){-1, -32768, 5}, 3);
    double got[5];
    CHECK_MSG(fetch(loom_cast(q, LOOM_F64), NULL, got, 5) && got[2] == 0x1p64 && got[3] == 0x1p63 &&
                  got[4] == 7,
              "u64 -> f64: %.17g %.17g %.17g", got[2], got[3], got[4]);
    const double fq[] = {0.9, 1.8e19, 0x1p63, 12345.7, -1.0, 1e20, NAN};
    expect_ints("f64 -> u64", loom_cast(on_device(fq, LOOM_SHAPE(7), LOOM_F64), LOOM_U64), LOOM_U64,
                (const int64_t[]){0, (int64_t)18000000000000000000ull, INT64_MIN, 12345, 0, -1, 0},
                7);
  }
  loom_clear_error();
}

/* torch.int8, as PyTorch 1.13 printed it: scalars and results wrap, sums
 * are int64, u8 with i8 is int16. */
static void test_i8_torch_samples(void) {
  LOOM_SCOPE {
    loom_tensor *x = ints((const int64_t[]){127, -128, 1, -1, 100}, LOOM_SHAPE(5), LOOM_I8);
    expect_ints("i8 + -1", loom_add_s(x, -1), LOOM_I8, (const int64_t[]){126, 127, 0, -2, 99}, 5);
    expect_ints("i8 + 300", loom_add_s(x, 300), LOOM_I8, (const int64_t[]){-85, -84, 45, 43, -112},
                5);
    expect_ints("i8 - 300", loom_sub_s(x, 300), LOOM_I8, (const int64_t[]){83, 84, -43, -45, 56},
                5);
    expect_ints("i8 * 300", loom_mul_s(x, 300), LOOM_I8, (const int64_t[]){-44, 0, 44, -44, 48}, 5);
    expect_ints("300 - i8", loom_rsub_s(300, x), LOOM_I8, (const int64_t[]){-83, -84, 43, 45, -56},
                5);
    expect_ints("i8 < 300", loom_lt_s(x, 300), LOOM_BOOL, (const int64_t[]){0, 1, 1, 1, 0}, 5);
    expect_ints("i8 == 255", loom_eq_s(x, 255), LOOM_BOOL, (const int64_t[]){0, 0, 0, 1, 0}, 5);
    expect_ints("i8 ** i8",
                loom_pow(ints((const int64_t[]){2, 3, -128, -3, 127}, LOOM_SHAPE(5), LOOM_I8),
                         ints((const int64_t[]){7, 5, 2, 3, 2}, LOOM_SHAPE(5), LOOM_I8)),
                LOOM_I8, (const int64_t[]){-128, -13, 0, -27, 1}, 5);
    expect_ints("-i8", loom_neg(x), LOOM_I8, (const int64_t[]){-127, -128, -1, 1, -100}, 5);
    expect_ints("abs(i8)", loom_abs(x), LOOM_I8, (const int64_t[]){127, -128, 1, 1, 100}, 5);
    expect_ints("i8 * i8", loom_mul(x, x), LOOM_I8, (const int64_t[]){1, 0, 1, 1, 16}, 5);
    expect_ints("sum(i8)", loom_sum_all(x), LOOM_I64, (const int64_t[]){99}, 1);
    expect_ints("cumsum(i8)", loom_cumsum(x, 0), LOOM_I64, (const int64_t[]){127, -1, 0, -1, 99},
                5);
    expect_ints("i8 + u8",
                loom_add(x, ints((const int64_t[]){255, 255, 0, 0, 1}, LOOM_SHAPE(5), LOOM_U8)),
                LOOM_I16, (const int64_t[]){382, 127, 1, -1, 101}, 5);
    expect_ints("argmax(i8)", loom_argmax(x, 0, false), LOOM_I64, (const int64_t[]){0}, 1);
    expect_ints("argmin(i8)", loom_argmin(x, 0, false), LOOM_I64, (const int64_t[]){1}, 1);
    expect_ints("max(i8)", loom_max(x, (const int[]){0}, 1, false), LOOM_I8, (const int64_t[]){127},
                1);
    expect_ints("min(i8)", loom_min(x, (const int[]){0}, 1, false), LOOM_I8,
                (const int64_t[]){-128}, 1);
    expect_ints("maximum(i8, 0)", loom_maximum_s(x, 0), LOOM_I8,
                (const int64_t[]){127, 0, 1, 0, 100}, 5);
    expect_ints("where(i8 > 0, i8, -128)", loom_where_s(loom_gt_s(x, 0), x, -128), LOOM_I8,
                (const int64_t[]){127, -128, 1, -128, 100}, 5);
    expect_ints("i8 -> u8", loom_cast(x, LOOM_U8), LOOM_U8,
                (const int64_t[]){127, 128, 1, 255, 100}, 5);
    expect_ints("u8 -> i8",
                loom_cast(ints((const int64_t[]){200, 128, 127}, LOOM_SHAPE(3), LOOM_U8), LOOM_I8),
                LOOM_I8, (const int64_t[]){-56, -128, 127}, 3);
    expect_ints(
        "i32 -> i8",
        loom_cast(ints((const int64_t[]){200, -200, 255, 256, -129}, LOOM_SHAPE(5), LOOM_I32),
                  LOOM_I8),
        LOOM_I8, (const int64_t[]){-56, 56, -1, 0, 127}, 5);
    /* float -> i8 truncates toward zero; outside [-128, 127] (undefined in
     * torch) it saturates, as loom's other float -> integer casts */
    const float f[] = {127.9f, -128.9f, 2.5f, -2.5f, -0.5f, 1e10f, -300.0f, NAN};
    expect_ints("f32 -> i8", loom_cast(on_device(f, LOOM_SHAPE(8), LOOM_F32), LOOM_I8), LOOM_I8,
                (const int64_t[]){127, -128, 2, -2, 0, 127, -128, 0}, 8);
    expect_ints("i8 @ i8 wraps",
                loom_matmul(ints((const int64_t[]){100, -100, 3, 4}, LOOM_SHAPE(2, 2), LOOM_I8),
                            ints((const int64_t[]){2, 1, 1, 3}, LOOM_SHAPE(2, 2), LOOM_I8)),
                LOOM_I8, (const int64_t[]){100, 56, 10, 15}, 4);
    const loom_dtype other[] = {LOOM_BOOL, LOOM_U8,   LOOM_I32, LOOM_I64,
                                LOOM_F16,  LOOM_BF16, LOOM_F32, LOOM_F64};
    const loom_dtype promoted[] = {LOOM_I8,  LOOM_I16,  LOOM_I32, LOOM_I64,
                                   LOOM_F16, LOOM_BF16, LOOM_F32, LOOM_F64};
    for (int k = 0; k < 8; k++) {
      loom_tensor *y = loom_cast(x, other[k]);
      CHECK_MSG(loom_dtype_of(loom_add(x, y)) == promoted[k] &&
                    loom_dtype_of(loom_add(y, x)) == promoted[k],
                "i8 with %s promotes to %s", loom_dtype_name(other[k]),
                loom_dtype_name(promoted[k]));
    }
  }
  loom_clear_error();
}

/* Integer add, sub, mul and pow of two tensors (every pair of values), neg,
 * abs and square: wrapping, with no undefined signed overflow in either code
 * generator; all 256 x 256 U8 pairs. */
static void test_tensor_ops_wrap(void) {
  static const int64_t i32[] = {INT32_MAX, INT32_MIN, 0, 1, -1, 46341, -46341, 3, -3, 31, 32, -2};
  static const int64_t i64[] = {INT64_MAX, INT64_MIN, 0, 1, -1, 3037000500, -3, 3, 63, 64, 41, -2};
  static const int64_t i16[] = {INT16_MAX, INT16_MIN, 0, 1, -1, 181, -182, 3, -3, 15, 16, -2};
  static const int64_t u16[] = {65535, 0, 1, 256, 255, 40000, 32768, 3, 15, 16, 17, 2};
  static const int64_t u32[] = {UINT32_MAX, 0, 1,  65536, 65535, 3000000000,
                                2147483648, 3, 31, 32,    41,    2};
  static const int64_t u64[] = {-1, INT64_MIN, 0,  1, 3037000500, 1LL << 32, 3,
                                63, 64,        41, 2, INT64_MAX}; /* U64's bits: -1 is 2^64 - 1 */
  static int64_t u8[256], i8[256];
  for (int i = 0; i < 256; i++) u8[i] = i, i8[i] = i - 128;
  const struct {
    loom_dtype d;
    const int64_t *v;
    int n;
  } sets[] = {{LOOM_U8, u8, 256},  {LOOM_I8, i8, 256},  {LOOM_I32, i32, 12}, {LOOM_I64, i64, 12},
              {LOOM_I16, i16, 12}, {LOOM_U16, u16, 12}, {LOOM_U32, u32, 12}, {LOOM_U64, u64, 12}};
  int64_t *got = malloc(sizeof(int64_t) * 256 * 256);
  for (int k = 0; k < (int)(sizeof sets / sizeof sets[0]); k++) {
    loom_dtype d = sets[k].d;
    int n = sets[k].n;
    const int64_t *v = sets[k].v;
    for (int op = 0; op < 4; op++) LOOM_SCOPE {
        loom_tensor *a = loom_reshape(ints(v, LOOM_SHAPE(n), d), LOOM_SHAPE(n, 1));
        loom_tensor *b = loom_reshape(ints(v, LOOM_SHAPE(n), d), LOOM_SHAPE(1, n));
        static const char *const names[] = {"add", "sub", "mul", "pow"};
        loom_tensor *r = op == 0   ? loom_add(a, b)
                         : op == 1 ? loom_sub(a, b)
                         : op == 2 ? loom_mul(a, b)
                                   : loom_pow(a, b);
        if (!fetch(r, got, NULL, (int64_t)n * n)) {
          CHECK_MSG(false, "%s %s failed: %s", loom_dtype_name(d), names[op],
                    loom_error_message(r) ? loom_error_message(r) : "");
          continue;
        }
        int bad = -1;
        int64_t want = 0;
        for (int i = 0; i < n && bad < 0; i++)
          for (int j = 0; j < n && bad < 0; j++) {
            uint64_t x = (uint64_t)v[i], y = (uint64_t)v[j];
            want = op == 0              ? ref_int_wrap(x + y, d)
                   : op == 1            ? ref_int_wrap(x - y, d)
                   : op == 2            ? ref_int_wrap(x * y, d)
                   : ref_is_unsigned(d) ? unsigned_pow(x, y, d)
                                        : ref_int_pow(v[i], v[j], d);
            if (got[i * n + j] != want) bad = i * n + j;
          }
        CHECK_MSG(bad < 0, "%s %s(%lld, %lld) = %lld, expected %lld", loom_dtype_name(d), names[op],
                  bad < 0 ? 0LL : (long long)v[bad / n], bad < 0 ? 0LL : (long long)v[bad % n],
                  bad < 0 ? 0LL : (long long)got[bad], (long long)want);
      }
    LOOM_SCOPE {
      loom_tensor *x = ints(v, LOOM_SHAPE(n), d);
      int64_t neg[256], abs_v[256], sq[256];
      for (int i = 0; i < n; i++) {
        neg[i] = ref_int_wrap(0 - (uint64_t)v[i], d);
        abs_v[i] = ref_is_unsigned(d) || v[i] >= 0 ? v[i] : neg[i];
        sq[i] = ref_int_wrap((uint64_t)v[i] * (uint64_t)v[i], d);
      }
      expect_ints("neg", loom_neg(x), d, neg, n);
      expect_ints("abs", loom_abs(x), d, abs_v, n);
      expect_ints("square", loom_square(x), d, sq, n);
    }
  }
  free(got);
  /* no integer division in loom: div is true division, in F32 as torch's */
  LOOM_SCOPE {
    loom_tensor *x = ints((const int64_t[]){5, INT32_MIN, 0}, LOOM_SHAPE(3), LOOM_I32);
    loom_tensor *y = ints((const int64_t[]){0, -1, 0}, LOOM_SHAPE(3), LOOM_I32);
    double q[3];
    CHECK_OK(loom_copy_to_host(loom_cast(loom_div(x, y), LOOM_F64), q, sizeof q));
    CHECK(isinf(q[0]) && q[0] > 0 && q[1] == 2147483648.0 && isnan(q[2]));
  }
}

/* What loom refuses, and says so naming the op and the value. */
static void test_refusals(void) {
  LOOM_SCOPE {
    loom_tensor *u = ints((const int64_t[]){1, 2}, LOOM_SHAPE(2), LOOM_U8);
    loom_tensor *l = ints((const int64_t[]){1, 2}, LOOM_SHAPE(2), LOOM_I64);
    loom_tensor *r = loom_pow_s(l, -1);
    CHECK_STATUS(r, LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_error_message(r),
                       "loom_pow_s: integers to negative integer powers are not allowed");
    r = loom_pow_s(u, 256);
    CHECK_STATUS(r, LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_error_message(r), "loom_pow_s: the exponent 256 does not fit u8");
    r = loom_where_s(loom_gt_s(u, 1), u, -1);
    CHECK_STATUS(r, LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_error_message(r), "loom_where_s: the value -1 does not fit u8");
    r = loom_add_s(l, 0x1p63);
    CHECK_STATUS(r, LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_error_message(r),
                       "loom_add_s: the scalar 9.2233720368547758e+18 is outside the 64-bit");
    r = loom_lt_s(u, -1e30);
    CHECK_STATUS(r, LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_error_message(r),
                       "loom_lt_s: the scalar -1e+30 is outside the 64-bit integers");
    /* a fractional or infinite scalar promotes to F32, as torch's float scalars */
    CHECK(loom_dtype_of(loom_add_s(u, 1.5)) == LOOM_F32);
    CHECK(loom_dtype_of(loom_lt_s(u, INFINITY)) == LOOM_BOOL);
    CHECK(loom_dtype_of(loom_pow_s(u, 0.5)) == LOOM_F32);
    CHECK(loom_dtype_of(loom_pow_s(l, -0.5)) == LOOM_F32);
  }
  loom_clear_error();
}

/* Values filling an integer tensor, as torch.full takes them: truncated toward
 * zero, refused outside the dtype ("value cannot be converted to type uint8_t
 * without overflow"); saturated before (300 gave 255, 2^31 gave INT32_MAX). */
static void test_fill_values(void) {
  LOOM_SCOPE {
    const struct {
      loom_dtype dtype;
      double value;
    } refused[] = {{LOOM_U8, 300},        {LOOM_U8, 256},           {LOOM_U8, -1},
                   {LOOM_I32, 0x1p31},    {LOOM_I32, -0x1p31 - 1},  {LOOM_I64, 1e19},
                   {LOOM_I64, -1e19},     {LOOM_I32, NAN},          {LOOM_U8, INFINITY},
                   {LOOM_I64, -INFINITY}, {LOOM_I32, 4294967295.0}, {LOOM_I8, 128},
                   {LOOM_I8, -129},       {LOOM_I8, 255},           {LOOM_I8, NAN}};
    for (int i = 0; i < (int)(sizeof refused / sizeof refused[0]); i++) {
      loom_dtype d = refused[i].dtype;
      double v = refused[i].value;
      char want[160];
      snprintf(want, sizeof want, "the value %.17g cannot be converted to %s without overflow", v,
               loom_dtype_name(d));
      loom_tensor *like = loom_zeros(LOOM_SHAPE(2), d, LOOM_CPU);
      loom_tensor *r[3] = {loom_full(LOOM_SHAPE(2), v, d, LOOM_CPU), loom_full_like(like, v),
                           loom_pad(like, (const int64_t[]){1, 0}, 2, v)};
      const char *op[3] = {"loom_full", "loom_full_like", "loom_pad"};
      for (int k = 0; k < 3; k++) {
        check_set_ctx("%s(%s, %g)", op[k], loom_dtype_name(d), v);
        CHECK_STATUS(r[k], LOOM_ERR_VALUE);
        CHECK_STR_CONTAINS(loom_error_message(r[k]), op[k]);
        CHECK_STR_CONTAINS(loom_error_message(r[k]), want);
      }
    }
    check_set_ctx("%s", "");
    /* in range: kept, truncated toward zero as torch.full(.., 2.5, int32) */
    const struct {
      loom_dtype dtype;
      double value;
      int64_t want;
    } kept[] = {
        {LOOM_I32, 2.5, 2},    {LOOM_I32, -2.5, -2},           {LOOM_U8, 255, 255},
        {LOOM_U8, 255.9, 255}, {LOOM_I32, -0x1p31, INT32_MIN}, {LOOM_I64, -0x1p63, INT64_MIN},
        {LOOM_BOOL, -3, 1},    {LOOM_I8, -128.9, -128},        {LOOM_I8, 127.5, 127}};
    for (int i = 0; i < (int)(sizeof kept / sizeof kept[0]); i++) {
      int64_t got[2] = {0, 0};
      loom_tensor *t = loom_full(LOOM_SHAPE(2), kept[i].value, kept[i].dtype, LOOM_CPU);
      CHECK_OK(loom_copy_to_host(loom_cast(t, LOOM_I64), got, sizeof got));
      CHECK_MSG(got[0] == kept[i].want && got[1] == kept[i].want, "full(%s, %g): %lld, not %lld",
                loom_dtype_name(kept[i].dtype), kept[i].value, (long long)got[0],
                (long long)kept[i].want);
    }
  }
  loom_clear_error();
}

/* ================================================================ float ranges */

static double *as_doubles(loom_tensor *t, int64_t n) {
  double *out = malloc(sizeof(double) * (size_t)n);
  if (loom_copy_to_host(loom_cast(t, LOOM_F64), out, sizeof(double) * (size_t)n) != LOOM_OK) {
    free(out);
    return NULL;
  }
  return out;
}

/* A double rounded to dtype d (nearest even, inf past its max). */
static double round_to(double v, loom_dtype d) {
  switch (d) {
  case LOOM_F32: return (float)v;
  case LOOM_F16: return loom_f16_to_float(loom_float_to_f16((float)v));
  case LOOM_BF16: return loom_bf16_to_float(loom_float_to_bf16((float)v));
  default: return v;
  }
}

/* Relative tolerance of a few roundings in d. */
static double tolerance(loom_dtype d) {
  switch (d) {
  case LOOM_F32: return 4e-7;
  case LOOM_F16: return 2e-3;
  case LOOM_BF16: return 1.6e-2;
  default: return 1e-15;
  }
}

static bool close_to(double got, double want, loom_dtype d) {
  if (isnan(want) || isinf(want)) return same_float(got, want) || (isnan(got) && isnan(want));
  double smallest = d == LOOM_F64 ? 4.9e-324 : d == LOOM_F16 ? 6e-8 : 1.4e-45;
  return fabs(got - want) <= tolerance(d) * fabs(want) + 4 * smallest;
}

/* expm1 up to the float's max: (u - 1) * x overflowed before (u - 1) did. */
static void test_expm1_range(void) {
  static const struct {
    loom_dtype d;
    double x[8];
  } cases[] = {
      {LOOM_F32, {80, 84.25, 85, 88, 88.7, 88.72, 88.73, -104}},
      {LOOM_F64, {700, 703.5, 705, 709, 709.7, 709.78, 709.79, -746}},
      {LOOM_BF16, {80, 84.5, 85, 88, 88.5, 89, 10, -104}},
      {LOOM_F16, {9, 10, 10.5, 11, 11.08, 11.1, 12, -18}},
  };
  for (int c = 0; c < 4; c++) LOOM_SCOPE {
      loom_dtype d = cases[c].d;
      loom_tensor *x = loom_cast(on_device(cases[c].x, LOOM_SHAPE(8), LOOM_F64), d);
      double *xs = as_doubles(x, 8), *got = as_doubles(loom_expm1(x), 8);
      CHECK(xs && got);
      for (int i = 0; xs && got && i < 8; i++) {
        /* torch's F32 expm1(85) is 8.223013e36, finite to 88.72 */
        double want = round_to(expm1(xs[i]), d);
        CHECK_MSG(close_to(got[i], want, d), "%s expm1(%.9g) = %.9g, expected %.9g",
                  loom_dtype_name(d), xs[i], got[i], want);
      }
      free(xs), free(got);
    }
}

/* Two-pass var and std in long double (no overflow or underflow for the
 * values here) over the reduced dims of a [2, 3, 4] tensor. */
static void reference_var(const double *x, const int *axes, int naxes, double correction, bool root,
                          double *out, int64_t *nout) {
  bool reduced[3] = {naxes == 0, naxes == 0, naxes == 0};
  for (int i = 0; i < naxes; i++) reduced[axes[i]] = true;
  const int dims[3] = {2, 3, 4};
  int64_t count = 1, k = 0;
  for (int d = 0; d < 3; d++) count *= reduced[d] ? dims[d] : 1;
  for (int i = 0; i < (reduced[0] ? 1 : 2); i++)
    for (int j = 0; j < (reduced[1] ? 1 : 3); j++)
      for (int l = 0; l < (reduced[2] ? 1 : 4); l++) {
        long double sum = 0, ss = 0;
        for (int a = 0; a < 2; a++)
          for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++)
              if ((reduced[0] || a == i) && (reduced[1] || b == j) && (reduced[2] || c == l))
                sum += x[(a * 3 + b) * 4 + c];
        long double mean = sum / count;
        for (int a = 0; a < 2; a++)
          for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++)
              if ((reduced[0] || a == i) && (reduced[1] || b == j) && (reduced[2] || c == l)) {
                long double dev = x[(a * 3 + b) * 4 + c] - mean;
                ss += dev * dev;
              }
        long double den = (long double)count - correction;
        long double v = ss / (den > 0 ? den : 0);
        out[k++] = (double)(root ? sqrtl(v) : v);
      }
  *nout = k;
}

/* var and std of huge and tiny values: every float dtype, correction 0 and
 * 1, over one axis, two and all, keepdim or not, against the exact values
 * rounded once (F32 sums of 1e37-scale values overflow: the mean too is taken
 * in F64). F32 std([+-1e37, +-2e37]) is torch's 1.8257e37 (its var overflows,
 * as torch's); F64 squares overflow past 1e154, as torch's. */
static void test_var_std_range(void) {
  static const struct {
    loom_dtype d;
    double scale;
  } cases[] = {{LOOM_F32, 1e37}, {LOOM_F32, 1e-30}, {LOOM_F32, 1e-40}, {LOOM_F32, 1e20},
               {LOOM_F32, 1},    {LOOM_F32, 3e-20}, {LOOM_F64, 1e150}, {LOOM_F64, 1e-150},
               {LOOM_F16, 1e4},  {LOOM_F16, 1e-4},  {LOOM_BF16, 1e37}, {LOOM_BF16, 1e-30}};
  static const int axes_sets[][3] = {{2}, {1}, {0, 2}, {0}};
  static const int naxes[] = {1, 1, 2, 0};
  double base[24];
  uint64_t seed = 12345;
  for (int i = 0; i < 24; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    base[i] = ((double)(seed >> 40) / 16777216.0) * 4 - 2; /* [-2, 2) */
  }
  for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
    loom_dtype d = cases[c].d;
    double v[24];
    for (int i = 0; i < 24; i++) v[i] = base[i] * cases[c].scale;
    for (int a = 0; a < 4; a++)
      for (int corr = 0; corr < 2; corr++)
        for (int root = 0; root < 2; root++)
          for (int keep = 0; keep < 2; keep++) LOOM_SCOPE {
              loom_tensor *x = loom_cast(on_device(v, LOOM_SHAPE(2, 3, 4), LOOM_F64), d);
              double *xs = as_doubles(x, 24); /* the values as d holds them */
              double want[24];
              int64_t n;
              reference_var(xs, axes_sets[a], naxes[a], corr, root, want, &n);
              loom_tensor *r = (root ? loom_std : loom_var)(x, axes_sets[a], naxes[a], corr, keep);
              CHECK_MSG(loom_numel(r) == n, "%s numel %lld, expected %lld", root ? "std" : "var",
                        (long long)loom_numel(r), (long long)n);
              double *got = as_doubles(r, n);
              for (int64_t i = 0; got && i < n; i++) {
                double w = round_to(want[i], d);
                CHECK_MSG(close_to(got[i], w, d),
                          "%s %s of %g-scale values (axes case %d, correction %d, keepdim %d)[%lld]"
                          " = %.9g, expected %.9g",
                          loom_dtype_name(d), root ? "std" : "var", cases[c].scale, a, corr, keep,
                          (long long)i, got[i], w);
              }
              CHECK(got != NULL);
              free(xs), free(got);
            }
  }
  LOOM_SCOPE { /* the example, with torch's values */
    const float x[4] = {1e37f, -1e37f, 2e37f, -2e37f};
    loom_tensor *t = on_device(x, LOOM_SHAPE(4), LOOM_F32);
    double s1, s0, var;
    CHECK_OK(loom_copy_to_host(loom_cast(loom_std(t, NULL, 0, 1, false), LOOM_F64), &s1, 8));
    CHECK_OK(loom_copy_to_host(loom_cast(loom_std(t, NULL, 0, 0, false), LOOM_F64), &s0, 8));
    CHECK_OK(loom_copy_to_host(loom_cast(loom_var(t, NULL, 0, 1, false), LOOM_F64), &var, 8));
    CHECK_MSG(fabs(s1 - 1.8257418899425489e+37) <= 4e-7 * 1.83e37, "std %.9g", s1);
    CHECK_MSG(fabs(s0 - 1.5811388189538302e+37) <= 4e-7 * 1.59e37, "std0 %.9g", s0);
    CHECK_MSG(isinf(var), "var %.9g (torch: inf)", var);
    /* denormals: torch's std([1e-40, 0, -1e-40, 1e-45]) is 8.16494576e-41 */
    const float tiny[4] = {1e-40f, 0, -1e-40f, 1e-45f};
    double st;
    CHECK_OK(loom_copy_to_host(
        loom_cast(loom_std(on_device(tiny, LOOM_SHAPE(4), LOOM_F32), NULL, 0, 1, false), LOOM_F64),
        &st, 8));
    CHECK_MSG(fabs(st - 8.16494576e-41) <= 1e-3 * 8.2e-41, "std of denormals %.9g", st);
    /* rows of one value, of an infinity, of a NaN: 0, NaN, NaN as torch */
    const float odd[3][3] = {{5, 5, 5}, {INFINITY, 1, 2}, {NAN, 1, 2}};
    double o[3];
    CHECK_OK(loom_copy_to_host(loom_cast(loom_std(on_device(odd, LOOM_SHAPE(3, 3), LOOM_F32),
                                                  (const int[]){1}, 1, 1, false),
                                         LOOM_F64),
                               o, sizeof o));
    CHECK_MSG(o[0] == 0 && isnan(o[1]) && isnan(o[2]), "std of odd rows %g %g %g", o[0], o[1],
              o[2]);
    /* F64 as torch's: std of 1e300-scale values inf, of 1e-300-scale 0 */
    const double wide[4] = {1e300, -1e300, 1e-300, -1e-300};
    double w[2];
    CHECK_OK(loom_copy_to_host(
        loom_std(on_device(wide, LOOM_SHAPE(2, 2), LOOM_F64), (const int[]){1}, 1, 1, false), w,
        sizeof w));
    CHECK_MSG(isinf(w[0]) && w[1] == 0, "F64 std %g %g (torch: inf 0)", w[0], w[1]);
  }
}

/* The gradients of std and var at huge and tiny magnitudes: (x - mean) /
 * ((n - c) std) and 2 (x - mean) / (n - c), finite and exact where the
 * unscaled squares overflowed or vanished. */
static void test_var_std_gradients(void) {
  static const double scales[] = {1e37, 1e-30, 1};
  for (int si = 0; si < 3; si++)
    for (int root = 0; root < 2; root++) LOOM_SCOPE {
        double s = scales[si];
        const float x[4] = {(float)(1 * s), (float)(-1 * s), (float)(2 * s), (float)(-3 * s)};
        loom_tensor *t = on_device(x, LOOM_SHAPE(4), LOOM_F32);
        CHECK_OK(loom_set_requires_grad(t, true));
        loom_tensor *r = (root ? loom_std : loom_var)(t, NULL, 0, 1, false);
        CHECK_OK(loom_backward(r));
        double g[4];
        CHECK_OK(loom_copy_to_host(loom_cast(loom_grad(t), LOOM_F64), g, sizeof g));
        long double mean = ((long double)x[0] + x[1] + x[2] + x[3]) / 4, ss = 0;
        for (int i = 0; i < 4; i++) ss += ((long double)x[i] - mean) * ((long double)x[i] - mean);
        long double sd = sqrtl(ss / 3);
        for (int i = 0; i < 4; i++) {
          double want = (double)(root ? ((long double)x[i] - mean) / (3 * sd)
                                      : 2 * ((long double)x[i] - mean) / 3);
          CHECK_MSG(close_to(g[i], round_to(want, LOOM_F32), LOOM_F32) ||
                        fabs(g[i] - want) <= 2e-6 * fabs(want),
                    "d %s / dx[%d] at scale %g = %.9g, expected %.9g", root ? "std" : "var", i, s,
                    g[i], want);
        }
      }
}

/* Sums with an infinity: the compensated sums (the CPU's chunks of long rows
 * and its shape-generic kernels, CUDA's F64 sums and log-sum-exps) took
 * inf - inf into their compensation, so sum([1, inf, 1, ...]) was NaN for
 * torch's inf. +inf, -inf, both (NaN) and a NaN, in rows short and long,
 * over the last dim, over a column (a [n, 4] tensor summed over dim 0) and
 * whole: sum, mean and logsumexp. */
static void test_sums_with_infinities(void) {
  static const int64_t lengths[] = {3, 100, 5000, 100000};
  static const double specials[][2] = {
      {INFINITY, 1}, {-INFINITY, 1}, {INFINITY, -INFINITY}, {NAN, 1}};
  for (int li = 0; li < 4; li++)
    for (int k = 0; k < 4; k++)
      for (int d = 0; d < 2; d++) LOOM_SCOPE {
          int64_t n = lengths[li];
          loom_dtype dt = d ? LOOM_F64 : LOOM_F32;
          double *v = malloc(sizeof(double) * (size_t)n * 4);
          for (int64_t i = 0; i < n * 4; i++) v[i] = 0.5;
          v[(n / 2) * 4 + 1] = specials[k][0]; /* in row (n / 2), column 1 */
          if (specials[k][1] != 1) v[(n - 1) * 4 + 1] = specials[k][1];
          double want = specials[k][1] == 1 ? specials[k][0] : NAN;
          loom_tensor *x = loom_cast(on_device(v, LOOM_SHAPE(n, 4), LOOM_F64), dt);
          loom_tensor *column = loom_slice(loom_transpose(x, 0, 1), 0, 1, 2, 1); /* [1, n] */
          double got[4];
          CHECK_OK(loom_copy_to_host(loom_cast(loom_sum_all(x), LOOM_F64), &got[0], 8));
          CHECK_OK(loom_copy_to_host(loom_cast(loom_sum(x, (const int[]){0}, 1, false), LOOM_F64),
                                     v, 4 * sizeof(double)));
          got[1] = v[1];
          CHECK_OK(loom_copy_to_host(loom_cast(loom_mean_all(column), LOOM_F64), &got[2], 8));
          CHECK_OK(loom_copy_to_host(loom_cast(loom_logsumexp(column, 1), LOOM_F64), &got[3], 8));
          static const char *const what[] = {"sum", "column sum", "mean", "logsumexp"};
          for (int w = 0; w < 4; w++) {
            /* log-sum-exp: -inf terms add nothing, +inf wins over -inf */
            double lse = k == 1 ? log((double)(n - 1)) + 0.5 : k == 2 ? INFINITY : want;
            double expect = w == 3 ? lse : want;
            bool ok = isnan(expect)   ? isnan(got[w])
                      : isinf(expect) ? got[w] == expect
                                      : fabs(got[w] - expect) <= 1e-5 * fabs(expect);
            CHECK_MSG(ok, "%s %s of %lld values with %g and %g: %g, expected %g",
                      loom_dtype_name(dt), what[w], (long long)n, specials[k][0], specials[k][1],
                      got[w], expect);
          }
          free(v);
        }
}

int main(void) {
  test_torch_samples();
  test_i8_torch_samples();
  test_wide_int_samples();
  test_u8_scalar_ops_exhaustive();
  test_i8_scalar_ops_exhaustive();
  test_wide_scalar_ops_extremes();
  test_tensor_ops_wrap();
  test_refusals();
  test_fill_values();
  test_expm1_range();
  test_var_std_range();
  test_var_std_gradients();
  test_sums_with_infinities();
  return check_report();
}
