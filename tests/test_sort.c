/* loom_sort, loom_argsort and loom_topk against a stable reference sort (qsort
 * of (value, position) pairs: NaN above every number, -0 equal to 0) over
 * every dtype they take, rows short and long (the sort step's insertion sort,
 * partial selection and radix sort on the CPU; its counting kernel on CUDA),
 * values with ties, NaN, infinities and signed zeros, k from 0 to n, both
 * directions and axes that are not the last; the same through the bitonic
 * network (LOOM_SORT=network, which CUDA records for longer rows); the
 * values' gradient; the plan's one step; and a symbolic program whose rows
 * change length (its plan template's instances checked against their own
 * plans). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "test_device.h"

/* ------------------------------------------------------------ the reference */

typedef struct item {
  double f;  /* floats' values */
  int64_t i; /* integers' */
  int64_t pos;
} item;

static bool ints, unsigned_ints, descending;

static int cmp_items(const void *pa, const void *pb) {
  const item *a = pa, *b = pb;
  int c;
  if (ints) {
    uint64_t ua = (uint64_t)a->i, ub = (uint64_t)b->i; /* U64: its bits */
    c = unsigned_ints ? (ua > ub) - (ua < ub) : (a->i > b->i) - (a->i < b->i);
  } else {
    bool na = isnan(a->f), nb = isnan(b->f);
    c = na || nb ? (int)na - (int)nb : (a->f > b->f) - (a->f < b->f);
  }
  if (descending) c = -c;
  return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}

/* The first k positions of each of rows lines of n (row-major values). */
static void reference(const double *f, const int64_t *i, int64_t rows, int64_t n, int64_t k,
                      int64_t *out) {
  item *line = malloc(sizeof *line * (size_t)(n ? n : 1));
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t j = 0; j < n; j++) line[j] = (item){f ? f[r * n + j] : 0, i ? i[r * n + j] : 0, j};
    qsort(line, (size_t)n, sizeof *line, cmp_items);
    for (int64_t j = 0; j < k; j++) out[r * k + j] = line[j].pos;
  }
  free(line);
}

/* ------------------------------------------------------------ data */

static unsigned next(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

/* rows x n values of dtype dt as a tensor, and exactly those values as
 * doubles (floats) or int64s (integers): ties, and for floats NaN, +-inf and
 * +-0 among them. */
static loom_tensor *make(loom_dtype dt, int64_t rows, int64_t n, unsigned seed, double **f,
                         int64_t **iv) {
  int64_t count = rows * n;
  size_t len = (size_t)(count ? count : 1);
  *f = NULL, *iv = NULL;
  loom_tensor *t;
  if (loom_dtype_is_float(dt)) {
    double *d = malloc(sizeof *d * len);
    for (int64_t x = 0; x < count; x++) {
      unsigned r = next(&seed) % 64;
      d[x] = r == 0   ? NAN
             : r == 1 ? INFINITY
             : r == 2 ? -INFINITY
             : r == 3 ? -0.0
             : r == 4 ? 0.0
                      : (double)((int)(next(&seed) % 41) - 20) * 0.375;
    }
    loom_tensor *wide = loom_from_data(d, LOOM_SHAPE(rows, n), LOOM_F64, test_device());
    t = dt == LOOM_F64 ? wide : loom_cast(wide, dt);
    /* the values as stored (F16 and BF16 hold these exactly; NaN keeps its sign) */
    CHECK_OK(loom_copy_to_host(loom_cast(t, LOOM_F64), d, sizeof *d * (size_t)count));
    *f = d;
  } else {
    int64_t *v = malloc(sizeof *v * len);
    for (int64_t x = 0; x < count; x++) {
      int64_t r = (int64_t)(next(&seed) % 23);
      v[x] = dt == LOOM_U8    ? r * 11
             : dt == LOOM_I8  ? (r - 11) * 11 + (r & 1) /* -121 to 122, ties */
             : dt == LOOM_I16 ? (r - 11) * 2900 + (r & 1)
             : dt == LOOM_U16 ? r * 2900
             : dt == LOOM_U32 ? r * 190000000u /* past 2^31 */
             : dt == LOOM_U64
                 ? (int64_t)((uint64_t)r * ((uint64_t)1 << 59)) + (r & 1) /* past 2^63 */
             : dt == LOOM_I32 ? (r - 11) * 190000000
                              : (r - 11) * ((int64_t)1 << 58) + (r & 1); /* beyond 2^53 */
    }
    loom_tensor *wide = loom_from_data(v, LOOM_SHAPE(rows, n), LOOM_I64, test_device());
    t = dt == LOOM_I64 ? wide : loom_cast(wide, dt);
    *iv = v;
  }
  return t;
}

/* ------------------------------------------------------------ the checks */

static int64_t *host_i64(loom_tensor *t, int64_t count) {
  int64_t *v = malloc(sizeof *v * (size_t)(count ? count : 1));
  CHECK_OK(loom_copy_to_host(t, v, sizeof *v * (size_t)count));
  return v;
}

/* topk (or, k = n and sorting, sort) of x [rows, n] along the last axis
 * against the reference: the positions exactly, the values as the source's
 * at them. */
static void check_rows(const char *how, loom_dtype dt, int64_t rows, int64_t n, int64_t k,
                       bool desc, bool sorting, unsigned seed) {
  LOOM_SCOPE {
    check_set_ctx("%s %s [%lld,%lld] k %lld %s", how, loom_dtype_name(dt), (long long)rows,
                  (long long)n, (long long)k, desc ? "descending" : "ascending");
    double *f;
    int64_t *iv;
    loom_tensor *x = make(dt, rows, n, seed, &f, &iv), *val = NULL, *idx = NULL;
    if (sorting)
      CHECK_OK(loom_sort(x, -1, desc, &val, &idx));
    else
      CHECK_OK(loom_topk(x, k, 1, desc, &val, &idx));
    int64_t *want = malloc(sizeof *want * (size_t)(rows * k + 1));
    ints = !f, unsigned_ints = dt == LOOM_U64, descending = desc;
    reference(f, iv, rows, n, k, want);
    int64_t *got = host_i64(idx, rows * k);
    int wrong = 0;
    for (int64_t x2 = 0; x2 < rows * k; x2++) wrong += got[x2] != want[x2];
    CHECK_MSG(wrong == 0, "%s: %d of %lld positions wrong", check_ctx, wrong,
              (long long)(rows * k));
    /* the values: the source's at the positions (compared as F64 or I64) */
    loom_tensor *wide = loom_cast(val, f ? LOOM_F64 : LOOM_I64);
    int bad = 0;
    if (f) {
      double *v = malloc(sizeof *v * (size_t)(rows * k + 1));
      CHECK_OK(loom_copy_to_host(wide, v, sizeof *v * (size_t)(rows * k)));
      for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
          double w = f[r * n + want[r * k + j]], g = v[r * k + j];
          bad += !(g == w || (isnan(g) && isnan(w)));
        }
      free(v);
    } else {
      int64_t *v = host_i64(wide, rows * k);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) bad += v[r * k + j] != iv[r * n + want[r * k + j]];
      free(v);
    }
    CHECK_MSG(bad == 0, "%s: %d values wrong", check_ctx, bad);
    free(got), free(want), free(f), free(iv);
  }
  check_set_ctx("%s", "");
}

static const loom_dtype dtypes[] = {LOOM_F32, LOOM_F64, LOOM_BF16, LOOM_F16, LOOM_I32, LOOM_I64,
                                    LOOM_U8,  LOOM_I8,  LOOM_I16,  LOOM_U16, LOOM_U32, LOOM_U64};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

/* Every dtype over rows short (insertion), long with few kept (partial
 * selection) and long with many (radix: 3,000 and, on the CPU, 70,000); the
 * network (a kernel per stage and dtype) over fewer. */
static void test_rows(const char *how) {
  const int64_t lengths[][2] = {{3, 1}, {2, 7}, {4, 32}, {2, 33}, {3, 200}, {2, 3000}};
  bool network = strcmp(how, "network") == 0;
  unsigned seed = 1;
  for (int d = 0; d < NDTYPES; d++)
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
      if (network && (l == 0 || l == 3 || l == 5 ||
                      (dtypes[d] != LOOM_F32 && dtypes[d] != LOOM_F16 && dtypes[d] != LOOM_I64)))
        continue;
      int64_t rows = lengths[l][0], n = lengths[l][1];
      for (int desc = 0; desc < 2; desc++) {
        check_rows(how, dtypes[d], rows, n, n, desc, true, seed++);
        const int64_t ks[] = {0, 1, 3, n / 64 + 1, n / 2};
        for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
          if (ks[q] <= n && (desc || q % 2 == 0))
            check_rows(how, dtypes[d], rows, n, ks[q], desc, false, seed++);
      }
    }
  if (test_device().type == LOOM_DEVICE_CPU && !network) {
    check_rows(how, LOOM_F32, 1, 70000, 70000, true, true, 99);
    check_rows(how, LOOM_F32, 1, 70000, 40, true, false, 98);
    check_rows(how, LOOM_BF16, 2, 50257, 50257, false, true, 97);
  }
}

/* Along an axis that is not the last, of a view: sort's positions are along
 * that axis. */
static void test_axes(void) {
  LOOM_SCOPE {
    float v[2 * 3 * 4];
    for (int i = 0; i < 24; i++) v[i] = (float)((i * 7) % 5) - (i % 3 == 0 ? 0.5f : 0.0f);
    loom_tensor *x = loom_from_data(v, LOOM_SHAPE(2, 3, 4), LOOM_F32, test_device());
    loom_tensor *xt = loom_transpose(x, 0, 2); /* [4, 3, 2], a view */
    loom_tensor *val, *idx;
    CHECK_OK(loom_sort(xt, 0, false, &val, &idx)); /* along the 4 */
    int64_t got[24];
    float gv[24];
    CHECK_OK(loom_copy_to_host(loom_contiguous(idx), got, sizeof got));
    CHECK_OK(loom_copy_to_host(loom_contiguous(val), gv, sizeof gv));
    int wrong = 0;
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 2; c++) {
        item line[4];
        for (int a = 0; a < 4; a++) line[a] = (item){v[c * 12 + b * 4 + a], 0, a};
        ints = false, descending = false;
        qsort(line, 4, sizeof *line, cmp_items);
        for (int a = 0; a < 4; a++)
          wrong += got[a * 6 + b * 2 + c] != line[a].pos || gv[a * 6 + b * 2 + c] != line[a].f;
      }
    CHECK_EQ_INT(wrong, 0);
    /* argsort is sort's positions; topk along the middle axis */
    int64_t again[24];
    CHECK_OK(loom_copy_to_host(loom_contiguous(loom_argsort(xt, 0, false)), again, sizeof again));
    CHECK(memcmp(again, got, sizeof got) == 0);
    CHECK_OK(loom_topk(x, 2, 1, true, &val, &idx)); /* [2, 2, 4] */
    int64_t top[16];
    CHECK_OK(loom_copy_to_host(loom_contiguous(idx), top, sizeof top));
    wrong = 0;
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 4; c++) {
        item line[3];
        for (int b = 0; b < 3; b++) line[b] = (item){v[a * 12 + b * 4 + c], 0, b};
        ints = false, descending = true;
        qsort(line, 3, sizeof *line, cmp_items);
        for (int j = 0; j < 2; j++) wrong += top[a * 8 + j * 4 + c] != line[j].pos;
      }
    CHECK_EQ_INT(wrong, 0);
  }
}

/* The values' gradient reaches the source at the positions: d/dx sum(w *
 * sort(x)) puts w[j] where the j-th value came from. */
static void test_gradient(void) {
  LOOM_SCOPE {
    float v[10] = {3, -1, 7, 7, 0, 2, 9, -4, 2, 5}, w[6] = {1, 2, 3, 4, 5, 6}, g[10];
    loom_tensor *x = loom_from_data(v, LOOM_SHAPE(2, 5), LOOM_F32, test_device());
    CHECK_OK(loom_set_requires_grad(x, true));
    loom_tensor *val, *idx;
    CHECK_OK(loom_topk(x, 3, 1, true, &val, &idx)); /* row 0: 7 (2), 7 (3), 3 (0); row 1: 9, 5, 2 */
    loom_tensor *wt = loom_from_data(w, LOOM_SHAPE(2, 3), LOOM_F32, test_device());
    CHECK_OK(loom_backward(loom_sum_all(loom_mul(val, wt))));
    CHECK_OK(loom_copy_to_host(loom_grad(x), g, sizeof g));
    const float want[10] = {3, 0, 1, 2, 0, 6, 4, 0, 0, 5};
    for (int i = 0; i < 10; i++) CHECK_NEAR(g[i], want[i], 0);
    CHECK(!loom_requires_grad(idx));
  }
}

/* One sort step in the plan (none with LOOM_SORT=network); the refusals. */
static void test_plan_and_errors(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_rand_key(loom_key_new(3), LOOM_SHAPE(4, 100), LOOM_F32, test_device());
    loom_tensor *idx = loom_argsort(x, -1, true);
    loom_program *p = loom_compile(&idx, 1, NULL, 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (p && f) loom_program_dump(p, f);
    if (f) fclose(f);
    CHECK_MSG(text && strstr(text, ": sort ->") && strstr(text, "descending"), "%s",
              text ? text : "(no text)");
    free(text);
    loom_program_free(p);
    loom_tensor *val = NULL;
    loom_tensor *b = loom_gt_s(x, 0.5);
    CHECK_RC(loom_sort(b, 0, false, &val, NULL), LOOM_ERR_DTYPE);
    CHECK(val == NULL);
    loom_clear_error();
    CHECK_RC(loom_topk(x, 101, -1, true, &val, NULL), LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_last_error(), "loom_topk: k 101 is outside [0, 100]");
    CHECK_RC(loom_sort(x, 2, false, &val, NULL), LOOM_ERR_AXIS);
    CHECK_RC(loom_sort(x, 0, false, NULL, NULL), LOOM_ERR_NULL);
    CHECK_EQ_INT(loom_status_of(loom_argsort(NULL, 0, false)), LOOM_ERR_NULL);
    loom_clear_error();
  }
}

/* A program over rows whose length is a symbol: the whole sort follows it,
 * the top 5 keeps 5, and a length below 5 is refused when run. */
static void test_symbolic(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(3, 40), LOOM_F32, test_device());
    loom_tensor *outs[2] = {loom_argsort(x, -1, false), NULL};
    CHECK_OK(loom_topk(x, 5, -1, true, NULL, &outs[1]));
    loom_symbolic_dim n = {0, 1, "n"};
    loom_program *p = loom_compile_symbolic(outs, 2, &x, 1, &n, 1);
    CHECK_MSG(p != NULL, "%s", loom_last_error());
    const int64_t lengths[] = {40, 7, 64, 5, 300};
    for (int l = 0; p && l < 5; l++) {
      int64_t len = lengths[l];
      check_set_ctx("symbolic n %lld", (long long)len);
      float *v = malloc(sizeof *v * (size_t)(3 * len));
      double *d = malloc(sizeof *d * (size_t)(3 * len));
      unsigned seed = 7 + (unsigned)l;
      for (int64_t i = 0; i < 3 * len; i++) d[i] = v[i] = (float)((int)(next(&seed) % 17) - 8);
      loom_tensor *in = loom_from_data(v, LOOM_SHAPE(3, len), LOOM_F32, test_device());
      loom_tensor *got[2] = {NULL, NULL};
      CHECK_OK(loom_program_run(p, &in, got));
      int64_t *want = malloc(sizeof *want * (size_t)(3 * len));
      ints = false, descending = false;
      reference(d, NULL, 3, len, len, want);
      int64_t *g = got[0] ? host_i64(got[0], 3 * len) : NULL;
      CHECK(g && memcmp(g, want, sizeof *g * (size_t)(3 * len)) == 0);
      free(g);
      descending = true;
      reference(d, NULL, 3, len, 5, want);
      g = got[1] ? host_i64(got[1], 15) : NULL;
      CHECK(g && memcmp(g, want, sizeof *g * 15) == 0);
      free(g), free(want), free(v), free(d);
      loom_free(got[0]), loom_free(got[1]), loom_free(in);
    }
    check_set_ctx("%s", "");
    if (p) {
      float v[12] = {0};
      loom_tensor *in = loom_from_data(v, LOOM_SHAPE(3, 4), LOOM_F32, test_device());
      loom_tensor *got[2] = {NULL, NULL};
      CHECK(loom_program_run(p, &in, got) != LOOM_OK);
      CHECK_STR_CONTAINS(loom_last_error(), "5");
      loom_clear_error();
      loom_free(in);
    }
    loom_program_free(p);
  }
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device()));
  unsetenv("LOOM_SORT");
  test_rows("step");
  test_axes();
  test_gradient();
  test_plan_and_errors();
  setenv("LOOM_VERIFY_PLANS", "1", 1); /* each instance of the plan template against its plan */
  test_symbolic();
  unsetenv("LOOM_VERIFY_PLANS");
  setenv("LOOM_SORT", "network", 1);
  test_rows("network");
  test_axes();
  test_gradient();
  unsetenv("LOOM_SORT");
  return check_report();
}
