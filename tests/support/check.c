#include "check.h"

#include <math.h>
#include <stdarg.h>

#include "loom.h"

int check_passes = 0;
int check_failures = 0;
char check_ctx[256] = "";

void check_set_ctx(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(check_ctx, sizeof check_ctx, fmt, ap);
  va_end(ap);
}

void check_fail_at(const char *file, int line, const char *fmt, ...) {
  check_failures++;
  if (check_failures > 200) return; /* enough to read */
  fprintf(stdout, "FAIL %s:%d: ", file, line);
  if (check_ctx[0]) fprintf(stdout, "[%s] ", check_ctx);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
}

bool check_record(bool ok, const char *file, int line, const char *what) {
  if (ok)
    check_passes++;
  else
    check_fail_at(file, line, "%s", what);
  return ok;
}

int check_report(void) {
  printf("%d passed, %d failed\n", check_passes, check_failures);
  fflush(stdout);
  return check_failures ? 1 : 0;
}

double check_sum_tolerance(bool f32, double n, double sumsq, double sum) {
  double u = f32 ? ldexp(1, -24) : ldexp(1, -53), m = n < 2048 ? n : 2048;
  return 8 * u * sqrt(m) * sqrt(sumsq) + 2 * u * fabs(sum);
}

double check_sum_bound(bool f32, double n, double sumabs) {
  double u = f32 ? ldexp(1, -24) : ldexp(1, -53), m = n < 1024 ? n : 1024;
  return u * (m + 32) * sumabs;
}

double check_element(const void *data, int dtype, int64_t i) {
  switch ((loom_dtype)dtype) {
  case LOOM_F32: return ((const float *)data)[i];
  case LOOM_F64: return ((const double *)data)[i];
  case LOOM_I32: return ((const int32_t *)data)[i];
  case LOOM_I64: return (double)((const int64_t *)data)[i];
  case LOOM_BOOL:
  case LOOM_U8: return ((const uint8_t *)data)[i];
  case LOOM_I8: return ((const int8_t *)data)[i];
  case LOOM_I16: return ((const int16_t *)data)[i];
  case LOOM_U16: return ((const uint16_t *)data)[i];
  case LOOM_U32: return ((const uint32_t *)data)[i];
  case LOOM_U64: return (double)((const uint64_t *)data)[i];
  default: return NAN;
  }
}

void check_fill_uniform(float *x, int64_t n, unsigned seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
}

int check_softmax_dot_rows(const double *x, int n, int cols, const double *got) {
  int misses = 0;
  for (int row = 0; row < n; row++) {
    const double *r = x + (size_t)row * (size_t)cols;
    double m = -INFINITY, s = 0, want = 0;
    for (int c = 0; c < cols; c++) m = fmax(m, r[c]);
    for (int c = 0; c < cols; c++) s += exp(r[c] - m);
    for (int c = 0; c < cols; c++) want += exp(r[c] - m) / s * r[c];
    misses += fabs(got[row] - want) > 1e-12;
  }
  return misses;
}
