/* AOT export of symbolic programs: one lib<name>.so whose <name>_run_dims
 * takes the symbols' sizes at run time gives loom_program_run's results at
 * sizes 1 to 200 (an MLP over any batch, causal attention over any batch and
 * sequence, means and variances whose divisors count a symbol); its shape
 * and scratch functions; sizes it refuses; programs it refuses to export. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "inputs.h"
#include "loom.h"
#include "scratch.h"

typedef int (*run_dims_fn)(const int64_t *dims, const void *const *inputs, void *const *outputs);
typedef int (*shape_fn)(int i, const int64_t *dims, int64_t *shape);
typedef size_t (*scratch_fn)(const int64_t *dims);

static char dir[256];

typedef struct library {
  void *handle;
  run_dims_fn run;
  shape_fn input_shape, output_shape;
  scratch_fn scratch_bytes;
} library;

static library open_library(const char *name) {
  library l = {0};
  char path[512];
  snprintf(path, sizeof path, "%s/lib%s.so", dir, name);
  l.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK_MSG(l.handle != NULL, "dlopen %s: %s", path, dlerror());
  l.run = (run_dims_fn)check_library_symbol(l.handle, name, "run_dims");
  l.input_shape = (shape_fn)check_library_symbol(l.handle, name, "input_shape");
  l.output_shape = (shape_fn)check_library_symbol(l.handle, name, "output_shape");
  l.scratch_bytes = (scratch_fn)check_library_symbol(l.handle, name, "scratch_bytes");
  CHECK(l.handle && dlsym(l.handle, "x_run") == NULL); /* no fixed-size entry */
  return l;
}

static int64_t numel(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

/* The library at dims against loom_program_run on the same random inputs:
 * shapes equal, values within 1e-5 relative (a shape-generic kernel may sum
 * in another order). */
static void check_at(const loom_program *p, const library *l, const int64_t *dims,
                     const char *what) {
  int nin = loom_program_num_inputs(p), nout = loom_program_num_outputs(p);
  float *in[4] = {0}, *out[4] = {0};
  loom_tensor *tin[4], *tout[4];
  int64_t shape[LOOM_MAX_DIMS];
  LOOM_SCOPE {
    for (int i = 0; i < nin; i++) {
      int nd = l->input_shape(i, dims, shape);
      CHECK_MSG(nd >= 0, "%s: input %d has no shape", what, i);
      if (nd < 0) return;
      loom_shape s = {.ndim = nd};
      for (int d = 0; d < nd; d++) s.dim[d] = shape[d];
      in[i] = malloc(sizeof(float) * (size_t)(numel(shape, nd) + 1));
      check_fill_uniform(in[i], numel(shape, nd), 40 + (unsigned)i);
      tin[i] = loom_from_data(in[i], s, LOOM_F32, LOOM_CPU);
    }
    loom_status st = loom_program_run(p, tin, tout);
    CHECK_MSG(st == LOOM_OK, "%s: %s", what, loom_last_error());
    int64_t n[4] = {0};
    for (int o = 0; o < nout && st == LOOM_OK; o++) {
      int nd = l->output_shape(o, dims, shape);
      loom_shape want = loom_shape_of(tout[o]);
      CHECK_EQ_INT(nd, want.ndim);
      for (int d = 0; d < nd && d < want.ndim; d++)
        CHECK_MSG(shape[d] == want.dim[d], "%s: output %d dim %d is %lld, loom says %lld", what, o,
                  d, (long long)shape[d], (long long)want.dim[d]);
      n[o] = loom_numel(tout[o]);
      out[o] = calloc((size_t)n[o] + 1, sizeof(float));
    }
    CHECK_EQ_INT(l->run(dims, (const void *const *)in, (void *const *)out), 0);
    for (int o = 0; o < nout && st == LOOM_OK; o++) {
      float *want = malloc(sizeof(float) * (size_t)(n[o] + 1));
      loom_copy_to_host(tout[o], want, sizeof(float) * (size_t)n[o]);
      double worst = 0;
      for (int64_t i = 0; i < n[o]; i++) {
        double d = fabs((double)out[o][i] - want[i]) / fmax(1.0, fabs((double)want[i]));
        if (!(d <= worst)) worst = d;
      }
      CHECK_MSG(worst <= 1e-5, "%s: output %d differs by %g", what, o, worst);
      free(want);
    }
  }
  for (int i = 0; i < 4; i++) free(in[i]), free(out[i]);
}

static loom_tensor *filled(loom_shape s, unsigned seed) { return check_filled(s, seed, LOOM_CPU); }

/* ------------------------------------------------------------ programs */

static loom_program *mlp_program(loom_tensor **w) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(37, 64), LOOM_F32, LOOM_CPU);
    loom_tensor *h = loom_relu(loom_add(loom_matmul(x, w[0]), w[1]));
    loom_tensor *y = loom_softmax(loom_add(loom_matmul(h, w[2]), w[3]), -1);
    loom_symbolic_dim batch = {0, 0, "batch"};
    p = loom_compile_symbolic(&y, 1, &x, 1, &batch, 1);
  }
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  return p;
}

/* layer norm, then causal self-attention over [b, t, 16] */
static loom_program *attention_program(loom_tensor **w) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(7, 11, 16), LOOM_F32, LOOM_CPU);
    loom_tensor *h = loom_layer_norm(x, 1, w[0], w[1], 1e-5);
    loom_tensor *q = loom_matmul(h, w[2]);
    loom_tensor *y = loom_scaled_dot_product_attention(q, h, h, NULL, true, 0);
    loom_symbolic_dim dims[2] = {{0, 0, "b"}, {0, 1, "t"}};
    p = loom_compile_symbolic(&y, 1, &x, 1, dims, 2);
  }
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  return p;
}

/* means and a variance over the batch (divisors that count it), two outputs */
static loom_program *stats_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(9, 3), LOOM_F32, LOOM_CPU);
    int batch = 0, features = 1;
    loom_tensor *outs[2] = {
        loom_add(loom_mean(x, &batch, 1, false), loom_var(x, &batch, 1, 1.0, false)),
        loom_mean(x, &features, 1, true)};
    loom_symbolic_dim b = {0, 0, "rows"};
    p = loom_compile_symbolic(outs, 2, &x, 1, &b, 1);
  }
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  return p;
}

/* the last position and all but it (torch's x[:, -1:], x[:, :-1]): their
 * bounds follow t */
static loom_program *tail_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(7, 11, 4), LOOM_F32, LOOM_CPU);
    int t = 1;
    loom_tensor *outs[2] = {loom_mul_s(loom_slice(x, 1, -1, INT64_MAX, 1), 2.0),
                            loom_sum(loom_slice(x, 1, 0, -1, 1), &t, 1, false)};
    loom_symbolic_dim dims[2] = {{0, 0, "b"}, {0, 1, "t"}};
    p = loom_compile_symbolic(outs, 2, &x, 1, dims, 2);
  }
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  return p;
}

/* rows of t sorted (the sort's k follows t) with their positions, and the
 * top 3 of each (k fixed) */
static loom_program *sort_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(7, 11), LOOM_F32, LOOM_CPU);
    loom_tensor *values, *top;
    CHECK_OK(loom_sort(x, 1, false, &values, NULL));
    CHECK_OK(loom_topk(x, 3, 1, true, &top, NULL));
    loom_tensor *outs[2] = {loom_add(values, loom_cast(loom_argsort(x, 1, true), LOOM_F32)), top};
    loom_symbolic_dim dims[2] = {{0, 0, "b"}, {0, 1, "t"}};
    p = loom_compile_symbolic(outs, 2, &x, 1, dims, 2);
  }
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  return p;
}

/* running sums along t (a symbolic length) and along b, and a row's sums
 * from the end (the gradient of a cumsum) */
static loom_program *scan_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(7, 11), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_add(loom_cumsum(x, 1), loom_mul_s(loom_cumsum(x, 0), 0.5));
    loom_tensor *outs[2] = {y, loom_flip(loom_cumsum(loom_flip(x, 1), 1), 1)};
    loom_symbolic_dim dims[2] = {{0, 0, "b"}, {0, 1, "t"}};
    p = loom_compile_symbolic(outs, 2, &x, 1, dims, 2);
  }
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  return p;
}

/* ------------------------------------------------------------ tests */

static void test_mlp(void) {
  loom_tensor *w[4] = {filled(LOOM_SHAPE(64, 48), 1), filled(LOOM_SHAPE(48), 2),
                       filled(LOOM_SHAPE(48, 10), 3), filled(LOOM_SHAPE(10), 4)};
  loom_program *p = mlp_program(w);
  loom_status st = p ? loom_program_export(p, dir, "mlp") : LOOM_ERR_NULL;
  CHECK_MSG(st == LOOM_OK, "export: %s", loom_last_error());
  if (st == LOOM_OK) {
    library l = open_library("mlp");
    const int64_t batches[] = {1, 7, 64, 37, 2, 200, 5};
    for (int i = 0; l.run && i < (int)(sizeof batches / sizeof batches[0]); i++) {
      char what[64];
      snprintf(what, sizeof what, "mlp at batch %lld", (long long)batches[i]);
      check_at(p, &l, &batches[i], what);
    }
    /* the shapes, the scratch, and the sizes it refuses */
    int64_t shape[4], one = 1, seven = 7, zero = 0, negative = -3, huge = (int64_t)1 << 40;
    CHECK_EQ_INT(l.input_shape(0, &seven, shape), 2);
    CHECK(shape[0] == 7 && shape[1] == 64);
    CHECK_EQ_INT(l.output_shape(0, &seven, shape), 2);
    CHECK(shape[0] == 7 && shape[1] == 10);
    CHECK_EQ_INT(l.input_shape(1, &seven, shape), -1);
    CHECK_EQ_INT(l.input_shape(0, &zero, shape), -1);
    CHECK_EQ_INT(l.input_shape(0, NULL, shape), -1);
    CHECK(l.scratch_bytes(&seven) > l.scratch_bytes(&one));
    CHECK(l.scratch_bytes(&zero) == 0 && l.scratch_bytes(&huge) == 0);
    float in[64] = {0}, out[10];
    const void *ins[] = {in};
    void *outs[] = {out};
    CHECK_EQ_INT(l.run(&zero, ins, outs), 5);
    CHECK_EQ_INT(l.run(&negative, ins, outs), 5);
    CHECK_EQ_INT(l.run(&huge, ins, outs), 5);
    CHECK_EQ_INT(l.run(NULL, ins, outs), 1);
    CHECK_EQ_INT(l.run(&one, NULL, outs), 1);
    if (l.handle) dlclose(l.handle);
    char header[512];
    snprintf(header, sizeof header, "%s/mlp.h", dir);
    CHECK(check_file_contains(header, "#define MLP_SYMBOL0_NAME \"batch\""));
    CHECK(check_file_contains(header, "f32 [batch,64]"));
    CHECK(check_file_contains(header, "int mlp_run_dims("));
  }
  /* saved and loaded (format version 2), it exports the same library */
  char path[512];
  snprintf(path, sizeof path, "%s/mlp.loom", dir);
  loom_program *loaded = NULL;
  if (p && loom_program_save(p, path) == LOOM_OK) loaded = loom_program_load(path);
  CHECK_MSG(loaded != NULL, "save and load: %s", loom_last_error());
  st = loaded ? loom_program_export(loaded, dir, "mlp_loaded") : LOOM_ERR_NULL;
  CHECK_MSG(st == LOOM_OK, "export of the loaded program: %s", loom_last_error());
  if (st == LOOM_OK) {
    library l = open_library("mlp_loaded");
    int64_t batch = 13;
    if (l.run) check_at(loaded, &l, &batch, "the loaded mlp at batch 13");
    if (l.handle) dlclose(l.handle);
  }
  loom_program_free(loaded);
  loom_program_free(p);
  for (int i = 0; i < 4; i++) loom_free(w[i]);
}

/* p exported as lib<name>.so, run at n sizes of its nsym symbols
 * (sizes[i * nsym ...]) against loom_program_run. */
static void export_and_check(loom_program *p, const char *name, const int64_t *sizes, int n,
                             int nsym) {
  loom_status st = p ? loom_program_export(p, dir, name) : LOOM_ERR_NULL;
  CHECK_MSG(st == LOOM_OK, "export %s: %s", name, loom_last_error());
  if (st != LOOM_OK) return;
  library l = open_library(name);
  for (int i = 0; l.run && i < n; i++) {
    char what[96];
    int len = snprintf(what, sizeof what, "%s at", name);
    for (int k = 0; k < nsym && len < (int)sizeof what; k++)
      len +=
          snprintf(what + len, sizeof what - (size_t)len, " %lld", (long long)sizes[i * nsym + k]);
    check_at(p, &l, &sizes[i * nsym], what);
  }
  if (l.handle) dlclose(l.handle);
}

static void test_attention(void) {
  loom_tensor *w[3] = {filled(LOOM_SHAPE(16), 5), filled(LOOM_SHAPE(16), 6),
                       filled(LOOM_SHAPE(16, 16), 7)};
  loom_program *p = attention_program(w);
  const int64_t sizes[][2] = {{1, 1}, {7, 11}, {2, 5}, {1, 64}, {3, 2}, {4, 29}};
  export_and_check(p, "attention", &sizes[0][0], 6, 2);
  loom_program_free(p);
  for (int i = 0; i < 3; i++) loom_free(w[i]);
}

static void test_sort(void) {
  loom_program *p = sort_program();
  const int64_t sizes[][2] = {{1, 3}, {7, 11}, {2, 5}, {3, 40}, {5, 300}};
  export_and_check(p, "sort", &sizes[0][0], 5, 2);
  loom_program_free(p);
}

/* (5,000: two rows cut into parts) */
static void test_scan(void) {
  loom_program *p = scan_program();
  const int64_t sizes[][2] = {{1, 1}, {7, 11}, {2, 5000}, {3, 40}, {67, 13}};
  export_and_check(p, "scan", &sizes[0][0], 5, 2);
  loom_program_free(p);
}

static void test_counts(void) {
  loom_program *p = stats_program();
  const int64_t rows[] = {2, 9, 3, 50, 17};
  export_and_check(p, "stats", rows, 5, 1);
  loom_program_free(p);
}

static void test_tail(void) {
  loom_program *p = tail_program();
  const int64_t sizes[][2] = {{1, 2}, {7, 11}, {3, 5}, {2, 31}};
  export_and_check(p, "tail", &sizes[0][0], 4, 2);
  loom_program_free(p);
}

/* issue 41: a flip along t (and a cumsum) over [b, t] traced at [3, 37]:
 * <name>_output_shape at {2, 5} said [2, 37] */
static void test_flip(void) {
  loom_symbolic_dim dims[2] = {{0, 0, "b"}, {0, 1, "t"}};
  loom_program *p = NULL, *sums = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(3, 37), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_mul_s(loom_flip(x, 1), 2.0), *c = loom_cumsum(x, 1);
    p = loom_compile_symbolic(&y, 1, &x, 1, dims, 2);
    CHECK_MSG(p != NULL, "%s", loom_last_error());
    loom_clear_error();
    sums = loom_compile_symbolic(&c, 1, &x, 1, dims, 2);
    CHECK_MSG(sums != NULL, "%s", loom_last_error());
  }
  const int64_t sizes[][2] = {{2, 5}, {1, 1}, {3, 37}, {4, 100}};
  export_and_check(p, "flip", &sizes[0][0], 4, 2);
  if (sums) export_and_check(sums, "cumsum", &sizes[0][0], 4, 2);
  for (int k = 0; k < 2; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/lib%s.so", dir, k ? "cumsum" : "flip");
    void *h = (k ? sums : p) ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    shape_fn out_shape =
        h ? (shape_fn)check_library_symbol(h, k ? "cumsum" : "flip", "output_shape") : NULL;
    int64_t at[2] = {2, 5}, shape[2] = {0, 0};
    if (out_shape) {
      CHECK_EQ_INT(out_shape(0, at, shape), 2);
      CHECK(shape[0] == 2 && shape[1] == 5);
    }
    if (h) dlclose(h);
  }
  loom_program_free(p), loom_program_free(sums);
}

/* five symbols: 3^5 plans is past what an export makes */
static void test_refused(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(2, 3, 5, 7, 9), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_exp(x);
    loom_symbolic_dim dims[5] = {{0, 0, "a"}, {0, 1, "b"}, {0, 2, "c"}, {0, 3, "d"}, {0, 4, "e"}};
    p = loom_compile_symbolic(&y, 1, &x, 1, dims, 5);
  }
  CHECK(p != NULL);
  loom_clear_error();
  CHECK_RC(loom_program_export(p, dir, "five"), LOOM_ERR_VALUE);
  CHECK_STR_CONTAINS(loom_last_error(), "at most 4");
  loom_program_free(p);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom-test-export-symbolic-%d", (int)getpid());
  mkdir(dir, 0700);
  test_mlp();
  test_attention();
  test_sort();
  test_scan();
  test_counts();
  test_tail();
  test_flip();
  test_refused();
  if (!check_failures && !getenv("LOOM_EXPORT_KEEP")) check_remove_dir(dir);
  return check_report();
}
