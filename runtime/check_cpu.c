/*
 * Checking data-dependent input on the CPU (LM_CHECK): a stored source's
 * values against a rule, and, for the first value that breaks it, the
 * message a failed run reports. The rules (ir/ir.h lm_check_rule):
 *
 *  - index: integers in [lo, hi) (an embedding's row, a gather's position, a
 *    class label), or equal to the ignored value where there is one
 *    (cross-entropy's ignore_index);
 *  - start: an integer in [lo, hi) (a slice's start: written [lo, hi - 1]);
 *  - weights: rows of floats along the last dim, each finite and >= 0, some
 *    value of each row above 0 (a distribution multinomial draws from).
 *
 * Each row is first scanned without an early exit (a loop per dtype, which
 * the compiler vectorizes), and only a row that breaks the rule is read again
 * for its first bad value.
 *
 * The file includes no loom header: exported libraries compile its text
 * (io/export_source.c), as runtime/sort_cpu.c's, so that a library's run
 * refuses what loom's does with the same message.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The numbers a check reads (lm_check_numbers writes them). */
enum {
  CHECK_ROWS,
  CHECK_COLS,
  CHECK_DTYPE,
  CHECK_RULE,
  CHECK_LO,
  CHECK_HI,
  CHECK_HAS_IGNORE,
  CHECK_IGNORE,
  CHECK_NUMBERS
};
/* loom_dtype's values and lm_check_rule's (runtime/check_step.c checks that they are). */
enum {
  CHECK_F32,
  CHECK_F64,
  CHECK_I32,
  CHECK_I64,
  CHECK_U8,
  CHECK_BOOL,
  CHECK_BF16,
  CHECK_F16,
  CHECK_I8,
  CHECK_I16,
  CHECK_U16,
  CHECK_U32,
  CHECK_U64
};
enum { CHECK_RULE_INDEX, CHECK_RULE_START, CHECK_RULE_WEIGHTS };

/* ------------------------------------------------------------ integers */

static int64_t check_int_at(const void *src, int64_t i, int dtype) {
  switch (dtype) {
  case CHECK_I32: return ((const int32_t *)src)[i];
  case CHECK_U8: return ((const uint8_t *)src)[i];
  case CHECK_I8: return ((const int8_t *)src)[i];
  case CHECK_I16: return ((const int16_t *)src)[i];
  case CHECK_U16: return ((const uint16_t *)src)[i];
  case CHECK_U32: return ((const uint32_t *)src)[i];
  default: return ((const int64_t *)src)[i]; /* I64; U64 past 2^63 negative, so outside */
  }
}

/* Whether any of v[0..n) breaks [lo, hi) but for `ignore` (when has_ignore). */
#define CHECK_ANY_OUTSIDE(T)                                                                       \
  do {                                                                                             \
    const T *v = (const T *)src + first;                                                           \
    for (int64_t i = 0; i < n; i++) {                                                              \
      int64_t x = v[i];                                                                            \
      bad |= ((x < lo) | (x >= hi)) & !(has_ignore & (x == ignore));                               \
    }                                                                                              \
  } while (0)

static bool check_any_outside(const void *src, int64_t first, int64_t n, int dtype, int64_t lo,
                              int64_t hi, int has_ignore, int64_t ignore) {
  int bad = 0;
  switch (dtype) {
  case CHECK_I32: CHECK_ANY_OUTSIDE(int32_t); break;
  case CHECK_U8: CHECK_ANY_OUTSIDE(uint8_t); break;
  case CHECK_I8: CHECK_ANY_OUTSIDE(int8_t); break;
  case CHECK_I16: CHECK_ANY_OUTSIDE(int16_t); break;
  case CHECK_U16: CHECK_ANY_OUTSIDE(uint16_t); break;
  case CHECK_U32: CHECK_ANY_OUTSIDE(uint32_t); break;
  default: CHECK_ANY_OUTSIDE(int64_t); break;
  }
  return bad != 0;
}

/* ------------------------------------------------------------ floats */

static double check_half_value(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0    ? ldexp(man, -24)
             : exp == 31 ? (man ? NAN : INFINITY)
                         : ldexp(man + 1024, exp - 25);
  return h & 0x8000 ? -v : v;
}

static double check_float_at(const void *src, int64_t i, int dtype) {
  switch (dtype) {
  case CHECK_F64: return ((const double *)src)[i];
  case CHECK_BF16: {
    uint32_t bits = (uint32_t)((const uint16_t *)src)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  case CHECK_F16: return check_half_value(((const uint16_t *)src)[i]);
  default: return ((const float *)src)[i];
  }
}

/* A weight breaks the rule when it is not a finite value >= 0 (NaN fails
 * both comparisons). */
#define CHECK_WEIGHTS_SCAN(T, value)                                                               \
  do {                                                                                             \
    const T *v = (const T *)src + first;                                                           \
    for (int64_t i = 0; i < n; i++) {                                                              \
      double x = value;                                                                            \
      bad |= !((x >= 0) & (x <= DBL_MAX));                                                         \
      positive |= x > 0;                                                                           \
    }                                                                                              \
  } while (0)

/* Whether the row v[first..first + n) breaks the weights rule. */
static bool check_bad_weights(const void *src, int64_t first, int64_t n, int dtype) {
  int bad = 0, positive = 0;
  switch (dtype) {
  case CHECK_F64: CHECK_WEIGHTS_SCAN(double, v[i]); break;
  case CHECK_BF16: CHECK_WEIGHTS_SCAN(uint16_t, check_float_at(v, i, CHECK_BF16)); break;
  case CHECK_F16: CHECK_WEIGHTS_SCAN(uint16_t, check_half_value(v[i])); break;
  default: CHECK_WEIGHTS_SCAN(float, (double)v[i]); break;
  }
  return bad || !positive;
}

/* ------------------------------------------------------------ the check */

/* 0 when src's values keep the rule; else 1, with "<op>: <what broke it>"
 * in msg (always terminated). src: num[CHECK_ROWS] rows of num[CHECK_COLS]
 * values of dtype num[CHECK_DTYPE], row-major. */
int lm_check_values(const void *src, const int64_t *num, const char *op, char *msg, size_t len) {
  int64_t rows = num[CHECK_ROWS], cols = num[CHECK_COLS], lo = num[CHECK_LO], hi = num[CHECK_HI];
  int64_t ignore = num[CHECK_IGNORE];
  int dtype = (int)num[CHECK_DTYPE], rule = (int)num[CHECK_RULE];
  int has_ignore = num[CHECK_HAS_IGNORE] != 0;
  for (int64_t r = 0; r < rows; r++) {
    int64_t first = r * cols;
    if (rule == CHECK_RULE_WEIGHTS) {
      if (!check_bad_weights(src, first, cols, dtype)) continue;
      for (int64_t c = 0; c < cols; c++) {
        double x = check_float_at(src, first + c, dtype);
        if (x >= 0 && x <= DBL_MAX) continue;
        if (x != x) x = NAN; /* "nan", whatever its sign bit */
        snprintf(msg, len,
                 "%s: weight %g at position %" PRId64 " of row %" PRId64
                 " is not a finite value >= 0 (an invalid multinomial distribution)",
                 op, x, c, r);
        return 1;
      }
      snprintf(msg, len,
               "%s: row %" PRId64 "'s %" PRId64
               " weights sum to 0 (an invalid multinomial distribution)",
               op, r, cols);
      return 1;
    }
    if (!check_any_outside(src, first, cols, dtype, lo, hi, has_ignore, ignore)) continue;
    for (int64_t c = 0; c < cols; c++) {
      int64_t v = check_int_at(src, first + c, dtype);
      if ((v >= lo && v < hi) || (has_ignore && v == ignore)) continue;
      if (rule == CHECK_RULE_START)
        snprintf(msg, len, "%s: start %" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", op, v, lo,
                 hi - 1);
      else
        snprintf(msg, len,
                 "%s: index %" PRId64 " at position %" PRId64 " is outside [%" PRId64 ", %" PRId64
                 ")%s",
                 op, v, first + c, lo, hi, has_ignore ? " and not the ignored index" : "");
      return 1;
    }
  }
  return 0;
}
