/* Tiny test macros for loom's suites: count passes and failures, print file:line. */
#ifndef LOOM_TESTS_CHECK_H
#define LOOM_TESTS_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern int check_passes;
extern int check_failures;
/* Optional context printed with every failure (e.g. "add F32 [3,4] view=permute"). */
extern char check_ctx[256];

void check_set_ctx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void check_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records one check: pass if ok, else a failure at file:line with the message. */
bool check_record(bool ok, const char *file, int line, const char *what);
/* n floats in [-1, 1] from a seed (a small LCG: the same values everywhere). */
void check_fill_uniform(float *x, int64_t n, unsigned seed);
/* Element i of host data of a loom_dtype as a double (NaN for BF16, F16). */
double check_element(const void *data, int dtype, int64_t i);
/*
 * How far loom's float sum of n terms may be from the exact sum of the same
 * terms, with u the unit roundoff (2^-24 for F32, else 2^-53). No accumulator
 * adds more than m = min(n, 2048) terms in the dtype: the CPU sums chunks of at
 * most 2048 terms over the vector lanes and adds the chunks' sums to a
 * compensated double; CUDA sums in double. Split reductions and the result
 * round once more each.
 *
 * check_sum_tolerance, for random terms (whose roundings are independent):
 * each addition rounds by at most u/2 of a partial sum of at most m terms,
 * about sqrt(m / n) ||x||_2 or less, and n such roundings total about
 * u sqrt(m) ||x||_2 / 2: 8 u sqrt(m) ||x||_2, and 2 u |sum| for the partial
 * results and the result. One accumulator over all n terms fails it by far
 * when the terms have a nonzero mean (before chunks, the mean of 2^24 values
 * near 1000 was off by 0.24).
 *
 * check_sum_bound, for any terms (a constant's roundings all agree): a term
 * passes through at most min(n, 1024) additions in its accumulator (a chunk of
 * 2048 over at least 2 lanes) and 32 more (lanes, parts, the result), each
 * rounding by at most u times the sum of |x|: u (min(n, 1024) + 32) sum|x|.
 */
double check_sum_tolerance(bool f32, double n, double sumsq, double sum);
double check_sum_bound(bool f32, double n, double sumabs);
/* How many of the n rows of x ([n, cols]) got[row] misses by more than
 * 1e-12: sum(softmax(row) * row), computed here in double (the threads
 * suites' computation over sizes that change). */
int check_softmax_dot_rows(const double *x, int n, int cols, const double *got);
/* Prints "N passed, M failed" and returns the exit code of the suite. */
int check_report(void);

#define CHECK(cond) check_record((cond) ? true : false, __FILE__, __LINE__, #cond)

#define CHECK_MSG(cond, ...)                                                                       \
  do {                                                                                             \
    if (cond)                                                                                      \
      check_passes++;                                                                              \
    else                                                                                           \
      check_fail_at(__FILE__, __LINE__, __VA_ARGS__);                                              \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
  do {                                                                                             \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                \
    if (check_a_ == check_b_)                                                                      \
      check_passes++;                                                                              \
    else                                                                                           \
      check_fail_at(__FILE__, __LINE__, "%s == %s: got %lld, expected %lld", #a, #b, check_a_,     \
                    check_b_);                                                                     \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
  do {                                                                                             \
    double check_a_ = (double)(a), check_b_ = (double)(b);                                         \
    if ((check_a_ != check_a_ && check_b_ != check_b_) ||                                          \
        (check_a_ - check_b_ <= (tol) && check_b_ - check_a_ <= (tol)))                            \
      check_passes++;                                                                              \
    else                                                                                           \
      check_fail_at(__FILE__, __LINE__, "%s ~= %s: got %.17g, expected %.17g", #a, #b, check_a_,   \
                    check_b_);                                                                     \
  } while (0)

/* The status of a tensor (needs loom.h). */
#define CHECK_STATUS(t, st)                                                                        \
  do {                                                                                             \
    loom_status check_s_ = loom_status_of(t), check_e_ = (st);                                     \
    if (check_s_ == check_e_)                                                                      \
      check_passes++;                                                                              \
    else                                                                                           \
      check_fail_at(__FILE__, __LINE__, "status of %s: got %s (%s), expected %s", #t,              \
                    loom_status_name(check_s_),                                                    \
                    loom_error_message(t) ? loom_error_message(t) : "no message",                  \
                    loom_status_name(check_e_));                                                   \
  } while (0)

/* A loom_status returned by a call. */
#define CHECK_RC(expr, st)                                                                         \
  do {                                                                                             \
    loom_status check_s_ = (expr), check_e_ = (st);                                                \
    if (check_s_ == check_e_)                                                                      \
      check_passes++;                                                                              \
    else                                                                                           \
      check_fail_at(__FILE__, __LINE__, "%s: got %s, expected %s (last: %s)", #expr,               \
                    loom_status_name(check_s_), loom_status_name(check_e_),                        \
                    loom_last_error() ? loom_last_error() : "none");                               \
  } while (0)
#define CHECK_OK(expr) CHECK_RC(expr, LOOM_OK)

#define CHECK_STR_CONTAINS(s, sub)                                                                 \
  do {                                                                                             \
    const char *check_s_ = (s), *check_sub_ = (sub);                                               \
    if (check_s_ && strstr(check_s_, check_sub_))                                                  \
      check_passes++;                                                                              \
    else                                                                                           \
      check_fail_at(__FILE__, __LINE__, "%s contains \"%s\": got \"%s\"", #s, check_sub_,          \
                    check_s_ ? check_s_ : "(null)");                                               \
  } while (0)

#define CHECK_STR_EQ(s, expected)                                                                  \
  do {                                                                                             \
    const char *check_s_ = (s), *check_x_ = (expected);                                            \
    if (check_s_ && strcmp(check_s_, check_x_) == 0)                                               \
      check_passes++;                                                                              \
    else                                                                                           \
      check_fail_at(__FILE__, __LINE__, "%s:\n--- got:\n%s\n--- expected:\n%s", #s,                \
                    check_s_ ? check_s_ : "(null)", check_x_);                                     \
  } while (0)

#endif
