/* Real models against ONNX Runtime (run by tests/onnx_models/run.sh, which
 * exports torchvision's models with a dynamic batch and computes ONNX
 * Runtime's outputs):
 *   test_onnx_models DIR [NAME...]
 * For each DIR/<name>/model.onnx: one program from loom_onnx_load, with the
 * batch symbolic, run at batch 1 and 3 on input_b<N>.npy, each output within
 * 1e-4 of ONNX Runtime's (ort_b<N>.npy) relative to the largest of those; then
 * the program exported (lib<name>.so, which must need only libc, libm and
 * libpthread), opened and run from C at both batches, matching the program. */
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

static void check_model(const char *dir, const char *name) {
  char path[1024], lib_dir[1024];
  snprintf(path, sizeof path, "%s/%s/model.onnx", dir, name);
  loom_program *p = loom_onnx_load(path, NULL);
  CHECK_MSG(p != NULL, "%s: %s", name, loom_last_error());
  if (!p) return;
  CHECK_EQ_INT(loom_program_num_symbols(p), 1);
  CHECK_EQ_INT(loom_program_num_inputs(p), 1);
  CHECK_EQ_INT(loom_program_num_outputs(p), 1);
  snprintf(lib_dir, sizeof lib_dir, "%s/%s/lib", dir, name);
  mkdir(lib_dir, 0755);
  CHECK_OK(loom_program_export(p, lib_dir, "model"));
  check_library_needs_only_libc(lib_dir, "model");
  char so[1100];
  snprintf(so, sizeof so, "%s/libmodel.so", lib_dir);
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  CHECK_MSG(h != NULL, "dlopen %s: %s", so, dlerror());
  run_dims_fn run = h ? (run_dims_fn)check_library_symbol(h, "model", "run_dims") : NULL;
  const int64_t batches[] = {1, 3};
  for (int b = 0; b < 2; b++) {
    char file[1100];
    snprintf(file, sizeof file, "%s/%s/input_b%lld.npy", dir, name, (long long)batches[b]);
    loom_tensor *x = loom_npy_read(file, LOOM_CPU);
    snprintf(file, sizeof file, "%s/%s/ort_b%lld.npy", dir, name, (long long)batches[b]);
    loom_tensor *want = loom_npy_read(file, LOOM_CPU);
    CHECK_STATUS(x, LOOM_OK);
    CHECK_STATUS(want, LOOM_OK);
    loom_tensor *y = NULL;
    CHECK_OK(loom_program_run(p, &x, &y));
    float *got = y ? host_floats(y) : NULL, *ref = host_floats(want), *in = host_floats(x);
    int64_t n = loom_numel(want);
    CHECK(got && ref && in && y && loom_numel(y) == n);
    if (got && ref && in && y && loom_numel(y) == n) {
      double rel = relative_difference(got, ref, n);
      printf("%-20s batch %lld: loom vs ONNX Runtime %.2e (relative to max |y|)\n", name,
             (long long)batches[b], rel);
      CHECK_MSG(rel <= 1e-4, "%s batch %lld: %.3g from ONNX Runtime", name, (long long)batches[b],
                rel);
      float *lib_out = malloc((size_t)n * sizeof *lib_out);
      const void *ins[1] = {in};
      void *outs[1] = {lib_out};
      if (run && lib_out) {
        CHECK_EQ_INT(run(&batches[b], ins, outs), 0);
        double lrel = relative_difference(lib_out, got, n);
        CHECK_MSG(lrel <= 1e-5, "%s batch %lld: the library %.3g from the program", name,
                  (long long)batches[b], lrel);
      }
      free(lib_out);
    }
    free(got), free(ref), free(in);
    loom_free(x), loom_free(want), loom_free(y);
  }
  if (h) dlclose(h);
  loom_program_free(p);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_onnx_models DIR [NAME...]\n");
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
