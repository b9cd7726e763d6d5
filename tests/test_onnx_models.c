/* Real models against ONNX Runtime (run by tests/onnx_models/run.sh, which
 * exports torchvision's and Hugging Face's models with dynamic axes and
 * computes ONNX Runtime's outputs):
 *   test_onnx_models [--allow-fixed] DIR [NAME...]
 * For each DIR/<name>/model.onnx: one program from loom_onnx_load, its batch
 * (and sequence) symbolic, run on two sets of inputs b<N>_in<k>.npy (N = 1, 3),
 * its first output within 1e-4 of ONNX Runtime's (b<N>_ort.npy) relative to
 * the largest of those, and, where the export wrote PyTorch's (b<N>_torch.npy:
 * sentence embeddings), each row's cosine with it at least 0.99999; then the
 * program exported (lib<name>.so, which must need only libc, libm and
 * libpthread), opened and run from C on the same inputs, matching the program.
 * --allow-fixed (the dynamo exports, tests/onnx_models/run_dynamo.sh): a model
 * whose symbolic import loom refuses asking for fixed dims is loaded again per
 * input set with its dims fixed, and said so. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "loom.h"
#include "scratch.h"

typedef int (*run_dims_fn)(const int64_t *dims, const void *const *inputs, void *const *outputs);

/* max |a - b| / max |b| over n floats. */
static double relative_difference(const float *a, const float *b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= diff)) diff = d; /* NaN wins */
    if (fabs(b[i]) > scale) scale = fabs(b[i]);
  }
  return scale > 0 ? diff / scale : diff;
}

static float *host_floats(loom_tensor *t) {
  int64_t n = loom_numel(t);
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  loom_tensor *c = loom_cast(t, LOOM_F32);
  if (!v || loom_copy_to_host(c, v, (size_t)n * sizeof *v)) {
    free(v);
    v = NULL;
  }
  loom_free(c);
  return v;
}

/* The least cosine between matching rows (the first dim) of a and b. */
static double least_row_cosine(const float *a, const float *b, int64_t rows, int64_t n) {
  double least = 1;
  int64_t width = rows ? n / rows : 0;
  for (int64_t r = 0; r < rows; r++) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = r * width; i < (r + 1) * width; i++)
      ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    double c = ab / sqrt(aa * bb);
    if (!(c >= least)) least = c;
  }
  return least;
}

enum { MAX_INPUTS = 4 };

/* One set of inputs through the program, against ONNX Runtime (and PyTorch
 * where given), then through the library. */
static void check_inputs(const char *dir, const char *name, const loom_program *p, run_dims_fn run,
                         int batch) {
  int nin = loom_program_num_inputs(p);
  loom_tensor *x[MAX_INPUTS] = {0};
  void *host[MAX_INPUTS] = {0};
  int64_t dims[8] = {0};
  char file[1100];
  for (int k = 0; k < nin; k++) {
    snprintf(file, sizeof file, "%s/%s/b%d_in%d.npy", dir, name, batch, k);
    x[k] = loom_npy_read(file, LOOM_CPU);
    CHECK_STATUS(x[k], LOOM_OK);
    loom_shape s = loom_shape_of(x[k]);
    size_t bytes = (size_t)loom_numel(x[k]) * loom_dtype_size(loom_dtype_of(x[k]));
    host[k] = malloc(bytes ? bytes : 1);
    CHECK(host[k] && !loom_copy_to_host(x[k], host[k], bytes));
    for (int d = 0; d < s.ndim; d++) {
      const char *sym = loom_program_input_dim_symbol(p, k, d);
      for (int j = 0; sym && j < loom_program_num_symbols(p) && j < 8; j++)
        if (!strcmp(sym, loom_program_symbol_name(p, j))) dims[j] = s.dim[d];
    }
  }
  snprintf(file, sizeof file, "%s/%s/b%d_ort.npy", dir, name, batch);
  loom_tensor *want = loom_npy_read(file, LOOM_CPU), *y[4] = {0};
  CHECK_STATUS(want, LOOM_OK);
  CHECK_OK(loom_program_run(p, x, y));
  float *got = y[0] ? host_floats(y[0]) : NULL, *ref = host_floats(want);
  int64_t n = loom_numel(want);
  CHECK(got && ref && loom_numel(y[0]) == n);
  if (got && ref && loom_numel(y[0]) == n) {
    double rel = relative_difference(got, ref, n);
    printf("%-20s b%d: loom vs ONNX Runtime %.2e (relative to max |y|)\n", name, batch, rel);
    CHECK_MSG(rel <= 1e-4, "%s b%d: %.3g from ONNX Runtime", name, batch, rel);
    snprintf(file, sizeof file, "%s/%s/b%d_torch.npy", dir, name, batch);
    FILE *probe = fopen(file, "rb");
    if (probe) {
      fclose(probe);
      loom_tensor *torch = loom_npy_read(file, LOOM_CPU);
      float *tv = host_floats(torch);
      CHECK(tv && loom_numel(torch) == n);
      if (tv && loom_numel(torch) == n) {
        double c = least_row_cosine(got, tv, loom_shape_of(torch).dim[0], n);
        printf("%-20s b%d: least cosine with PyTorch's embeddings %.9f\n", name, batch, c);
        CHECK_MSG(c >= 0.99999, "%s b%d: cosine %.9f with PyTorch", name, batch, c);
      }
      free(tv);
      loom_free(torch);
    }
    float *lib_out = malloc((size_t)n * sizeof *lib_out);
    void *outs[1] = {lib_out};
    if (run && lib_out) {
      CHECK_EQ_INT(run(dims, (const void *const *)host, outs), 0);
      double lrel = relative_difference(lib_out, got, n);
      CHECK_MSG(lrel <= 1e-5, "%s b%d: the library %.3g from the program", name, batch, lrel);
    }
    free(lib_out);
  }
  free(got), free(ref);
  for (int k = 0; k < nin; k++) free(host[k]), loom_free(x[k]);
  loom_free(want), loom_free(y[0]);
}

static bool allow_fixed;

/* The model loaded with each symbol fixed at the sizes input set `batch` has. */
static loom_program *load_fixed(const char *path, const char *dir, const char *name, int batch) {
  char file[1100];
  snprintf(file, sizeof file, "%s/%s/b%d_in0.npy", dir, name, batch);
  loom_tensor *x = loom_npy_read(file, LOOM_CPU);
  if (!x) return NULL;
  loom_shape s = loom_shape_of(x);
  loom_free(x);
  /* the exporters' dim names: batch first, then sequence */
  loom_onnx_dim dims[2] = {{"batch", s.dim[0]}, {"sequence", s.ndim > 1 ? s.dim[1] : 1}};
  return loom_onnx_load(path, &(loom_onnx_opts){.dims = dims, .ndims = s.ndim == 2 ? 2 : 1});
}

static void check_model(const char *dir, const char *name) {
  char path[1024], lib_dir[1024];
  snprintf(path, sizeof path, "%s/%s/model.onnx", dir, name);
  loom_program *p = loom_onnx_load(path, NULL);
  if (!p && allow_fixed && strstr(loom_last_error(), "fix the dims")) {
    printf("%-20s symbolic import refused, so each input set's dims are fixed: %s\n", name,
           loom_last_error());
    for (int b = 1; b <= 3; b += 2) {
      loom_program *fixed = load_fixed(path, dir, name, b);
      CHECK_MSG(fixed != NULL, "%s b%d with fixed dims: %s", name, b, loom_last_error());
      if (fixed) check_inputs(dir, name, fixed, NULL, b);
      loom_program_free(fixed);
    }
    return;
  }
  CHECK_MSG(p != NULL, "%s: %s", name, loom_last_error());
  if (!p) return;
  CHECK(loom_program_num_symbols(p) >= 1);
  CHECK(loom_program_num_inputs(p) <= MAX_INPUTS);
  CHECK_EQ_INT(loom_program_num_outputs(p), 1);
  CHECK_EQ_INT(loom_program_output_dtype(p, 0), LOOM_F32);
  snprintf(lib_dir, sizeof lib_dir, "%s/%s/lib", dir, name);
  mkdir(lib_dir, 0755);
  CHECK_OK(loom_program_export(p, lib_dir, "model"));
  check_library_needs_only_libc(lib_dir, "model");
  void *h = check_open_library(lib_dir, "model");
  run_dims_fn run = h ? (run_dims_fn)check_library_symbol(h, "model", "run_dims") : NULL;
  if (loom_program_num_inputs(p) <= MAX_INPUTS)
    for (int b = 1; b <= 3; b += 2) check_inputs(dir, name, p, run, b);
  if (h) dlclose(h);
  loom_program_free(p);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--allow-fixed") == 0) allow_fixed = true, argv++, argc--;
  if (argc < 2) {
    fprintf(stderr, "usage: test_onnx_models [--allow-fixed] DIR [NAME...]\n");
    return 2;
  }
  int checked = 0;
  if (argc > 2) {
    for (int i = 2; i < argc; i++, checked++) check_model(argv[1], argv[i]);
  } else {
    DIR *d = opendir(argv[1]);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char path[1024];
      struct stat st;
      snprintf(path, sizeof path, "%s/%s/model.onnx", argv[1], e->d_name);
      if (e->d_name[0] == '.' || stat(path, &st) != 0) continue;
      check_model(argv[1], e->d_name);
      checked++;
    }
    if (d) closedir(d);
  }
  CHECK_MSG(checked > 0, "no models in %s", argv[1]);
  return check_report();
}
