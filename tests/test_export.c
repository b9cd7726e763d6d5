/* AOT export: programs exported as lib<name>.so + <name>.h, loaded with
 * dlopen and linked by a plain C program, give loom_program_run's results;
 * the libraries need neither libloom nor LLVM; concurrent calls; weights in
 * a file beside the library; refused names, folders and compilers. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "scratch.h"

typedef int (*run_fn)(const void *const *inputs, void *const *outputs);

static char dir[256];

static int64_t numel(loom_shape s) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; d++) n *= s.dim[d];
  return n;
}

static void *open_lib(const char *name) { return check_open_library(dir, name); }

static run_fn find_run(void *lib, const char *name) {
  char sym[96];
  snprintf(sym, sizeof sym, "%s_run", name);
  return lib ? (run_fn)dlsym(lib, sym) : NULL;
}

/* Runs p and the exported library on the same random F32 inputs; every
 * output agrees within 1e-6 relative. */
static void check_same(const loom_program *p, run_fn run, unsigned seed) {
  int nin = loom_program_num_inputs(p), nout = loom_program_num_outputs(p);
  float *in[8], *out[8];
  loom_tensor *tin[8], *tout[8];
  LOOM_SCOPE {
    for (int i = 0; i < nin; i++) {
      loom_shape s = loom_program_input_shape(p, i);
      in[i] = malloc(sizeof(float) * (size_t)(numel(s) + 1));
      check_fill_uniform(in[i], numel(s), seed + (unsigned)i);
      tin[i] = loom_from_data(in[i], s, LOOM_F32, LOOM_CPU);
    }
    for (int o = 0; o < nout; o++)
      out[o] = calloc((size_t)numel(loom_program_output_shape(p, o)) + 1, sizeof(float));
    CHECK_OK(loom_program_run(p, tin, tout));
    CHECK_EQ_INT(run((const void *const *)in, (void *const *)out), 0);
    for (int o = 0; o < nout; o++) {
      int64_t n = numel(loom_program_output_shape(p, o));
      float *want = malloc(sizeof(float) * (size_t)(n + 1));
      loom_copy_to_host(tout[o], want, sizeof(float) * (size_t)n);
      double worst = 0;
      for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)out[o][i] - want[i]) / fmax(1.0, fabs((double)want[i]));
        if (!(d <= worst)) worst = d;
      }
      CHECK_MSG(worst <= 1e-6, "output %d differs by %g", o, worst);
      free(want);
      free(out[o]);
    }
    for (int i = 0; i < nin; i++) free(in[i]);
  }
}

/* ------------------------------------------------------------ programs */

static loom_program *chain_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(33, 70), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_tanh(loom_add_s(loom_mul_s(loom_exp(x), 0.5), 1.0));
    p = loom_compile(&y, 1, &x, 1);
  }
  return p;
}

static loom_program *softmax_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("logits", LOOM_SHAPE(64, 129), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_log_softmax(x, -1);
    p = loom_compile(&y, 1, &x, 1);
  }
  return p;
}

static loom_program *mlp_program(loom_params *ps) {
  loom_program *p = NULL;
  loom_key k[2];
  loom_key_split(loom_key_new(5), k, 2);
  loom_linear fc1 = loom_linear_new(ps, "fc1", 64, 48, k[0]);
  loom_linear fc2 = loom_linear_new(ps, "fc2", 48, 10, k[1]);
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(16, 64), LOOM_F32, LOOM_CPU);
    loom_tensor *h = loom_relu(loom_linear_forward(&fc1, x));
    loom_tensor *y = loom_softmax(loom_linear_forward(&fc2, h), -1);
    p = loom_compile(&y, 1, &x, 1);
  }
  return p;
}

static loom_program *cnn_program(loom_params *ps) {
  loom_program *p = NULL;
  loom_key k[3];
  loom_key_split(loom_key_new(6), k, 3);
  loom_conv2d c1 = loom_conv2d_new(ps, "c1", 1, 8, 3, (loom_conv2d_opts){.padding = {1, 1}}, k[0]);
  loom_batchnorm2d bn = loom_batchnorm2d_new(ps, "bn", 8);
  loom_conv2d c2 = loom_conv2d_new(ps, "c2", 8, 16, 3, (loom_conv2d_opts){.padding = {1, 1}}, k[1]);
  loom_linear fc = loom_linear_new(ps, "fc", 16 * 2 * 2, 10, k[2]);
  LOOM_SCOPE {
    /* 256 images: conv2's im2col matrix [72, 4096] (1.2 MB) is made inside its
     * GEMM when loom runs the program; the export stores it */
    loom_tensor *x = loom_input("image", LOOM_SHAPE(256, 1, 8, 8), LOOM_F32, LOOM_CPU);
    loom_tensor *h = loom_max_pool2d(
        loom_relu(loom_batchnorm2d_forward(&bn, loom_conv2d_forward(&c1, x), false)), 2, 2, 0);
    h = loom_max_pool2d(loom_relu(loom_conv2d_forward(&c2, h)), 2, 2, 0);
    loom_tensor *y = loom_linear_forward(&fc, loom_flatten(h, 1, -1));
    p = loom_compile(&y, 1, &x, 1);
  }
  return p;
}

/* Two inputs; outputs: a reduction, a weight as is, an input as is, the
 * reduction again. */
static loom_program *multi_program(loom_tensor *w) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *ins[] = {loom_input("a", LOOM_SHAPE(3, 5), LOOM_F32, LOOM_CPU),
                          loom_input("b", LOOM_SHAPE(5), LOOM_F32, LOOM_CPU)};
    int axis = 1;
    loom_tensor *s = loom_sum(loom_mul(loom_add(ins[0], ins[1]), w), &axis, 1, false);
    loom_tensor *outs[] = {s, w, ins[1], s,
                           loom_matmul(ins[0], loom_reshape(ins[1], LOOM_SHAPE(5, 1)))};
    p = loom_compile(outs, 5, ins, 2);
  }
  return p;
}

static void export_and_compare(loom_program *p, const char *name) {
  check_set_ctx("%s", name);
  CHECK(p != NULL);
  if (!p) return;
  CHECK_OK(loom_program_export(p, dir, name));
  void *lib = open_lib(name);
  run_fn run = find_run(lib, name);
  CHECK(run != NULL);
  if (run) {
    check_same(p, run, 11);
    check_same(p, run, 12);
  }
  if (lib) dlclose(lib);
  check_set_ctx("%s", "");
}

/* ------------------------------------------------------------ dependencies */

/* Every model, matrix products included (loom's own GEMM is linked in),
 * needs the C library's parts only. */
static void check_needed(const char *name) {
  char cmd[512], line[512];
  FILE *f;
  check_library_needs_only_libc(dir, name);
  /* only <name>_run and <name>_status_string are exported */
  snprintf(cmd, sizeof cmd, "nm -D --defined-only %s/lib%s.so", dir, name);
  f = popen(cmd, "r");
  int exported = 0;
  while (f && fgets(line, sizeof line, f)) {
    exported++;
    CHECK_MSG(strstr(line, name) != NULL, "unexpected export %s", line);
  }
  if (f) pclose(f);
  CHECK_EQ_INT(exported, 2);
}

/* A plain C program that includes only the header and links only the
 * library, run on inputs written by the test. */
static void check_linked_program(const loom_program *p, const char *name) {
  char path[512], cmd[2048];
  snprintf(path, sizeof path, "%s/use_%s.c", dir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f,
          "#include <stdio.h>\n#include \"%s.h\"\n"
          "static float in0[MLP_INPUT0_NUMEL], out0[MLP_OUTPUT0_NUMEL];\n"
          "int main(void) {\n"
          "  FILE *f = fopen(\"%s/in.bin\", \"rb\");\n"
          "  if (!f || fread(in0, 1, sizeof in0, f) != sizeof in0) return 10;\n"
          "  fclose(f);\n"
          "  const void *ins[] = {in0};\n  void *outs[] = {out0};\n"
          "  int st = %s_run(ins, outs);\n"
          "  if (st) { fprintf(stderr, \"%%s\\n\", %s_status_string(st)); return st; }\n"
          "  f = fopen(\"%s/out.bin\", \"wb\");\n"
          "  fwrite(out0, 1, sizeof out0, f);\n  fclose(f);\n  return 0;\n}\n",
          name, dir, name, name, dir);
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "cc -std=c11 -Wall -Werror -o %s/use_%s %s -I%s -L%s -l%s -Wl,-rpath,%s", dir, name,
           path, dir, dir, name, dir);
  CHECK_EQ_INT(system(cmd), 0);
  loom_shape s = loom_program_input_shape(p, 0);
  int64_t n = numel(s), m = numel(loom_program_output_shape(p, 0));
  float *in = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)m),
        *want = malloc(sizeof(float) * (size_t)m);
  check_fill_uniform(in, n, 99);
  snprintf(path, sizeof path, "%s/in.bin", dir);
  f = fopen(path, "wb");
  fwrite(in, sizeof(float), (size_t)n, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s/use_%s", dir, name);
  CHECK_EQ_INT(system(cmd), 0);
  snprintf(path, sizeof path, "%s/out.bin", dir);
  f = fopen(path, "rb");
  CHECK(f && fread(got, sizeof(float), (size_t)m, f) == (size_t)m);
  if (f) fclose(f);
  LOOM_SCOPE {
    loom_tensor *t = loom_from_data(in, s, LOOM_F32, LOOM_CPU), *o;
    CHECK_OK(loom_program_run(p, &t, &o));
    loom_copy_to_host(o, want, sizeof(float) * (size_t)m);
  }
  double worst = 0;
  for (int64_t i = 0; i < m; i++) worst = fmax(worst, fabs((double)got[i] - want[i]));
  CHECK_MSG(worst <= 1e-6, "linked program differs by %g", worst);
  free(in);
  free(got);
  free(want);
}

/* ------------------------------------------------------------ threads */

typedef struct job {
  run_fn run;
  const float *in;
  const float *want;
  int64_t n_out;
  int bad;
} job;

static void *call_many(void *arg) {
  job *j = arg;
  float *out = malloc(sizeof(float) * (size_t)j->n_out);
  for (int r = 0; r < 50; r++) {
    const void *ins[] = {j->in};
    void *outs[] = {out};
    j->bad += j->run(ins, outs) != 0;
    for (int64_t i = 0; i < j->n_out; i++) j->bad += out[i] != j->want[i];
  }
  free(out);
  return NULL;
}

static void check_threads(const loom_program *p, run_fn run) {
  int64_t n = numel(loom_program_input_shape(p, 0)), m = numel(loom_program_output_shape(p, 0));
  float *in[4], *want[4];
  job jobs[4];
  pthread_t th[4];
  for (int t = 0; t < 4; t++) {
    in[t] = malloc(sizeof(float) * (size_t)n);
    want[t] = malloc(sizeof(float) * (size_t)m);
    check_fill_uniform(in[t], n, 1000u + (unsigned)t);
    const void *ins[] = {in[t]};
    void *outs[] = {want[t]};
    run(ins, outs);
    jobs[t] = (job){run, in[t], want[t], m, 0};
  }
  for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, call_many, &jobs[t]);
  for (int t = 0; t < 4; t++) {
    pthread_join(th[t], NULL);
    CHECK_EQ_INT(jobs[t].bad, 0);
    free(in[t]);
    free(want[t]);
  }
}

/* ------------------------------------------------------------ tests */

/* BF16 products (on AMX tiles where the CPU has them: the library asks Linux
 * for them itself), a weight read as is and one read transposed. */
static loom_program *bf16_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(100, 300), LOOM_F32, LOOM_CPU);
    loom_tensor *w = loom_cast(
        loom_mul_s(loom_randn_key(loom_key_new(5), LOOM_SHAPE(300, 200), LOOM_F32, LOOM_CPU), 0.05),
        LOOM_BF16);
    loom_tensor *v = loom_cast(
        loom_mul_s(loom_randn_key(loom_key_new(6), LOOM_SHAPE(64, 200), LOOM_F32, LOOM_CPU), 0.05),
        LOOM_BF16);
    loom_tensor *h = loom_relu(loom_matmul(loom_cast(x, LOOM_BF16), w));
    loom_tensor *y = loom_cast(loom_matmul(h, loom_transpose(v, 0, 1)), LOOM_F32);
    p = loom_compile(&y, 1, &x, 1);
  }
  return p;
}

/* Fused attention (runtime/attention_cpu.c's text compiled into the
 * library): causal, and under a bool mask read through a broadcast. */
static loom_program *attention_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(2, 3, 40, 16), LOOM_F32, LOOM_CPU);
    loom_tensor *k = loom_add_s(loom_mul_s(x, 0.7), 0.1);
    loom_tensor *keep =
        loom_gt_s(loom_randn_key(loom_key_new(7), LOOM_SHAPE(40, 40), LOOM_F32, LOOM_CPU), -1);
    loom_tensor *y =
        loom_add(loom_scaled_dot_product_attention(x, k, x, NULL, true, 0),
                 loom_scaled_dot_product_attention(x, k, loom_neg(x), keep, false, 0.2));
    p = loom_compile(&y, 1, &x, 1);
  }
  return p;
}

/* Attention's fused backward (130 keys: the default takes it): a weight's
 * gradient through causal attention of a projection. */
static loom_program *attention_grad_program(void) {
  loom_program *p = NULL;
  float wv[64];
  check_fill_uniform(wv, 64, 5);
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(1, 2, 130, 8), LOOM_F32, LOOM_CPU);
    loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(8, 8), LOOM_F32, LOOM_CPU);
    CHECK_OK(loom_set_requires_grad(w, true));
    loom_tensor *q = loom_matmul(x, w);
    loom_tensor *y = loom_scaled_dot_product_attention(q, loom_mul_s(q, 0.5), x, NULL, true, 0);
    CHECK_OK(loom_backward(loom_sum_all(loom_mul(y, x))));
    loom_tensor *g = loom_grad(w);
    p = loom_compile(&g, 1, &x, 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (p && f) loom_program_dump(p, f);
    if (f) fclose(f);
    CHECK_MSG(text && strstr(text, ": attention_grad ->"), "the program lacks the fused backward");
    free(text);
    loom_free(g);
  }
  return p;
}

/* A sort and a top-k (runtime/sort_cpu.c's text compiled into the library):
 * rows long enough for its radix sort and its partial selection. */
static loom_program *sort_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(3, 200), LOOM_F32, LOOM_CPU);
    loom_tensor *values, *top;
    CHECK_OK(loom_sort(x, -1, true, &values, NULL));
    CHECK_OK(loom_topk(loom_neg(x), 3, 0, false, &top, NULL));
    loom_tensor *outs[2] = {loom_add(values, loom_cast(loom_argsort(x, 1, false), LOOM_F32)), top};
    p = loom_compile(outs, 2, &x, 1);
  }
  return p;
}

/* I8 inside a library: the input quantized to I8, an I8 weight (saved as
 * I8), a wrapping I8 product, an I8 sort (runtime/sort_cpu.c's I8 keys),
 * sums as I64, dequantized back to F32. */
static loom_program *int8_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    int8_t wv[16 * 4];
    for (int i = 0; i < 16 * 4; i++) wv[i] = (int8_t)(i * 37 % 256 - 128);
    loom_tensor *x = loom_input("x", LOOM_SHAPE(8, 16), LOOM_F32, LOOM_CPU);
    loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(16, 4), LOOM_I8, LOOM_CPU);
    loom_tensor *q =
        loom_cast(loom_clamp(loom_round(loom_mul_s(x, 40)), -128, 127), LOOM_I8); /* [8, 16] */
    loom_tensor *y = loom_matmul(q, w);                                           /* [8, 4] */
    loom_tensor *sorted;
    CHECK_OK(loom_sort(q, -1, true, &sorted, NULL));
    int axis = 1;
    loom_tensor *sums = loom_cast(loom_sum(q, &axis, 1, true), LOOM_F32);
    loom_tensor *outs[2] = {loom_add(loom_mul_s(loom_cast(y, LOOM_F32), 0.5), sums),
                            loom_sub(loom_cast(sorted, LOOM_F32), sums)};
    p = loom_compile(outs, 2, &x, 1);
  }
  return p;
}

/* ONNX's integer dtypes inside a library: a U16 weight (saved as U16), U32
 * and U64 wrapping arithmetic and unsigned comparisons, an I16 product, a
 * U64 sort (runtime/sort_cpu.c's U64 keys), sums as I64 and U64. */
static loom_program *wide_int_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    uint16_t wv[16 * 4];
    for (int i = 0; i < 16 * 4; i++) wv[i] = (uint16_t)(i * 4099 % 65536);
    loom_tensor *x = loom_input("x", LOOM_SHAPE(8, 16), LOOM_F32, LOOM_CPU);
    loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(16, 4), LOOM_U16, LOOM_CPU);
    loom_tensor *q = loom_cast(loom_mul_s(x, 30000), LOOM_I16);    /* [8, 16] */
    loom_tensor *big = loom_mul_s(loom_cast(q, LOOM_U64), 0x1p50); /* wraps past 2^64 */
    loom_tensor *y = loom_matmul(q, loom_cast(w, LOOM_I16));       /* [8, 4], wraps */
    loom_tensor *u = loom_sub_s(loom_cast(loom_matmul(q, loom_cast(w, LOOM_I16)), LOOM_U32), 5);
    loom_tensor *sorted;
    CHECK_OK(loom_sort(big, -1, true, &sorted, NULL));
    int axis = 1;
    loom_tensor *sums = loom_cast(loom_sum(big, &axis, 1, true), LOOM_F32);
    loom_tensor *outs[3] = {
        loom_add(loom_cast(y, LOOM_F32), sums),
        loom_cast(loom_where(loom_gt_s(u, 2147483648.0), u, loom_neg(u)), LOOM_F32),
        loom_cast(sorted, LOOM_F32)};
    p = loom_compile(outs, 3, &x, 1);
  }
  return p;
}

/* Running sums (ops/scan/scan_cpu.c's text compiled into the library): along
 * two long rows (cut into parts), along the first axis, and from the end (a
 * weight's gradient through a cumsum). */
static loom_program *scan_program(void) {
  loom_program *p = NULL;
  float *wv = malloc(sizeof *wv * 18000);
  check_fill_uniform(wv, 18000, 6);
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(2, 9000), LOOM_F32, LOOM_CPU);
    loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(2, 9000), LOOM_F32, LOOM_CPU);
    CHECK_OK(loom_set_requires_grad(w, true));
    CHECK_OK(loom_backward(loom_sum_all(loom_mul(loom_cumsum(loom_mul(x, w), 1), x))));
    loom_tensor *g = loom_grad(w);
    loom_tensor *outs[3] = {loom_cumsum(x, -1), loom_cumsum(x, 0), g};
    p = loom_compile(outs, 3, &x, 1);
    loom_free(g);
  }
  free(wv);
  return p;
}

static void test_programs(void) {
  loom_program *p = chain_program();
  export_and_compare(p, "chain");
  check_needed("chain");
  loom_program_free(p);
  p = softmax_program();
  export_and_compare(p, "softmax");
  loom_program_free(p);
  loom_params *ps = loom_params_new();
  p = mlp_program(ps);
  export_and_compare(p, "mlp");
  check_needed("mlp");
  check_linked_program(p, "mlp");
  void *lib = open_lib("mlp");
  if (find_run(lib, "mlp")) check_threads(p, find_run(lib, "mlp"));
  if (lib) dlclose(lib);
  loom_program_free(p);
  p = cnn_program(ps);
  export_and_compare(p, "cnn");
  loom_program_free(p);
  loom_params_free(ps);
  float wv[15];
  check_fill_uniform(wv, 15, 3);
  loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(3, 5), LOOM_F32, LOOM_CPU);
  p = multi_program(w);
  export_and_compare(p, "multi");
  loom_program_free(p);
  loom_free(w);
  p = bf16_program();
  CHECK(p != NULL);
  export_and_compare(p, "bf16");
  check_needed("bf16");
  loom_program_free(p);
  p = attention_program();
  CHECK(p != NULL);
  export_and_compare(p, "attention");
  check_needed("attention");
  loom_program_free(p);
  p = attention_grad_program();
  CHECK(p != NULL);
  export_and_compare(p, "attention_grad");
  check_needed("attention_grad");
  loom_program_free(p);
  p = sort_program();
  CHECK(p != NULL);
  export_and_compare(p, "sort");
  check_needed("sort");
  loom_program_free(p);
  p = scan_program();
  export_and_compare(p, "scan");
  check_needed("scan");
  loom_program_free(p);
  p = int8_program();
  CHECK(p != NULL);
  export_and_compare(p, "int8");
  check_needed("int8");
  loom_program_free(p);
  p = wide_int_program();
  CHECK(p != NULL);
  export_and_compare(p, "wide_ints");
  check_needed("wide_ints");
  loom_program_free(p);
}

static void test_weights_file(void) {
  loom_params *ps = loom_params_new();
  loom_program *p = mlp_program(ps);
  setenv("LOOM_EXPORT_EMBED_LIMIT", "0", 1);
  CHECK_OK(loom_program_export(p, dir, "mlpfile"));
  CHECK_OK(loom_program_export(p, dir, "mlpbad"));
  unsetenv("LOOM_EXPORT_EMBED_LIMIT");
  char path[512];
  snprintf(path, sizeof path, "%s/mlpfile.h", dir);
  CHECK(check_file_contains(path, "#define MLPFILE_WEIGHTS_EMBEDDED 0"));
  CHECK(check_file_contains(path, "#define MLPFILE_WEIGHTS_FILE \"mlpfile.weights\""));
  void *lib = open_lib("mlpfile");
  run_fn run = find_run(lib, "mlpfile");
  if (run) check_same(p, run, 21);
  if (lib) dlclose(lib);
  /* a corrupted weights file: the call says so instead of computing garbage */
  snprintf(path, sizeof path, "%s/mlpbad.weights", dir);
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 200, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
  }
  lib = open_lib("mlpbad");
  run = find_run(lib, "mlpbad");
  if (run) {
    float in[16 * 64] = {0}, out[160];
    const void *ins[] = {in};
    void *outs[] = {out};
    CHECK_EQ_INT(run(ins, outs), 3);
    CHECK_EQ_INT(run(NULL, outs), 1);
  }
  if (lib) dlclose(lib);
  loom_program_free(p);
  loom_params_free(ps);
}

static void test_errors(void) {
  loom_program *p = chain_program();
  loom_clear_error();
  CHECK_RC(loom_program_export(p, dir, "9lives"), LOOM_ERR_VALUE);
  CHECK_RC(loom_program_export(p, dir, "a-b"), LOOM_ERR_VALUE);
  CHECK_RC(loom_program_export(p, dir, ""), LOOM_ERR_VALUE);
  CHECK_RC(loom_program_export(NULL, dir, "x"), LOOM_ERR_NULL);
  CHECK_RC(loom_program_export(p, NULL, "x"), LOOM_ERR_NULL);
  CHECK_RC(loom_program_export(p, "/nonexistent/folder", "x"), LOOM_ERR_IO);
  /* no compiler, a failing compiler: clear errors, the earlier library intact */
  CHECK_OK(loom_program_export(p, dir, "keep"));
  setenv("CC", "/nonexistent/bin/cc", 1);
  loom_clear_error();
  CHECK_RC(loom_program_export(p, dir, "keep"), LOOM_ERR_IO);
  CHECK_STR_CONTAINS(loom_last_error(), "no C compiler");
  setenv("CC", "false", 1);
  loom_clear_error();
  CHECK_RC(loom_program_export(p, dir, "keep"), LOOM_ERR_COMPILE);
  CHECK_STR_CONTAINS(loom_last_error(), "linking libkeep.so");
  unsetenv("CC");
  loom_clear_error();
  void *lib = open_lib("keep");
  CHECK(find_run(lib, "keep") != NULL);
  if (lib) dlclose(lib);
  /* nothing left behind by the failed attempts */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "ls -a %s | grep -q loom-export", dir);
  CHECK(system(cmd) != 0);
  loom_program_free(p);
}

/* `loom export model.loom --name NAME --out DIR` on a saved program. */
static void test_command_line(void) {
  loom_params *ps = loom_params_new();
  loom_program *p = mlp_program(ps);
  char saved[512], cmd[2048];
  snprintf(saved, sizeof saved, "%s/mlp.loom", dir);
  CHECK_OK(loom_program_save(p, saved));
  snprintf(cmd, sizeof cmd, "'%s' export '%s' --name cli --out '%s' > /dev/null", LOOM_TOOL, saved,
           dir);
  CHECK_EQ_INT(system(cmd), 0);
  void *lib = open_lib("cli");
  run_fn run = find_run(lib, "cli");
  CHECK(run != NULL);
  if (run) check_same(p, run, 31);
  if (lib) dlclose(lib);
  /* a missing file, a missing argument: a message and a failing status */
  snprintf(cmd, sizeof cmd, "'%s' export '%s/none.loom' --name cli --out '%s' 2> %s/err.txt",
           LOOM_TOOL, dir, dir, dir);
  CHECK(system(cmd) != 0);
  char path[512];
  snprintf(path, sizeof path, "%s/err.txt", dir);
  CHECK(check_file_contains(path, "none.loom"));
  snprintf(cmd, sizeof cmd, "'%s' export '%s' --out '%s' 2> /dev/null", LOOM_TOOL, saved, dir);
  CHECK(system(cmd) != 0);
  loom_program_free(p);
  loom_params_free(ps);
}

/* Directories whose names a compiler or an assembler would misread: one
 * starting with '-' (given relative, as `--out -models` would), one with a
 * ',' (which -Wl splits at) and one with '\\' and '"' (string escapes in the
 * assembler's .incbin); each library loads and has its <name>_run. */
static void test_awkward_paths(void) {
  static const char *const subdirs[] = {"-models", "a,b", "back\\slash \"quoted\""};
  loom_program *p = chain_program();
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK_EQ_INT(chdir(dir), 0);
  for (int i = 0; i < 3; i++) {
    mkdir(subdirs[i], 0700);
    check_set_ctx("export into '%s'", subdirs[i]);
    CHECK_OK(loom_program_export(p, subdirs[i], "awkward"));
    char lib[8192];
    snprintf(lib, sizeof lib, "%s/%s/libawkward.so", dir, subdirs[i]);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(h != NULL, "dlopen %s: %s", lib, dlerror());
    if (h) {
      run_fn run = (run_fn)(uintptr_t)dlsym(h, "awkward_run");
      CHECK(run != NULL);
      if (run) check_same(p, run, 5);
      dlclose(h);
    }
  }
  check_set_ctx("%s", "");
  CHECK_EQ_INT(chdir(cwd), 0);
  loom_program_free(p);
}

/* A copy of lib<name>.so at lib<name>-<suffix>.so: another inode, so dlopen
 * maps it again, with threads of its own. */
static void copy_lib(const char *name, int suffix) {
  char from[512], to[512];
  snprintf(from, sizeof from, "%s/lib%s.so", dir, name);
  snprintf(to, sizeof to, "%s/lib%s-%d.so", dir, name, suffix);
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  CHECK(in != NULL && out != NULL);
  char buf[1 << 16];
  size_t n;
  while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) CHECK(fwrite(buf, 1, n, out) == n);
  if (in) fclose(in);
  if (out) CHECK_EQ_INT(fclose(out), 0);
}

#define SWEEP_THREADS 4

/* p exported once and run on 1 to SWEEP_THREADS threads (<NAME>_THREADS, read
 * by each copy of the library at its first call) on the same random inputs:
 * every output the same bits as on one thread; and, with `compare`, as the
 * program's within check_same's bound. */
static void check_thread_counts(const loom_program *p, const char *name, const char *upper,
                                bool compare) {
  check_set_ctx("%s", name);
  CHECK_OK(loom_program_export(p, dir, name));
  int nin = loom_program_num_inputs(p), nout = loom_program_num_outputs(p);
  void *in[8], *first[8], *out[8], *libs[SWEEP_THREADS] = {NULL};
  for (int i = 0; i < nin; i++) {
    int64_t n = numel(loom_program_input_shape(p, i));
    in[i] = malloc(sizeof(float) * (size_t)n);
    check_fill_uniform(in[i], n, 20 + (unsigned)i);
  }
  for (int o = 0; o < nout; o++) {
    size_t bytes = sizeof(float) * (size_t)numel(loom_program_output_shape(p, o));
    first[o] = malloc(bytes), out[o] = malloc(bytes);
  }
  char var[96], lib[512], threads[16];
  snprintf(var, sizeof var, "%s_THREADS", upper);
  for (int t = 1; t <= SWEEP_THREADS; t++) {
    snprintf(threads, sizeof threads, "%d", t);
    setenv(var, threads, 1);
    copy_lib(name, t);
    snprintf(lib, sizeof lib, "%s/lib%s-%d.so", dir, name, t);
    libs[t - 1] = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(libs[t - 1] != NULL, "dlopen %s: %s", lib, dlerror());
    run_fn run = find_run(libs[t - 1], name);
    if (!run) continue;
    CHECK_EQ_INT(run((const void *const *)in, t == 1 ? first : out), 0);
    for (int o = 0; t > 1 && o < nout; o++)
      CHECK_MSG(memcmp(first[o], out[o],
                       sizeof(float) * (size_t)numel(loom_program_output_shape(p, o))) == 0,
                "output %d on %d threads differs from one thread's", o, t);
    if (compare) check_same(p, run, 5);
  }
  unsetenv(var);
  for (int t = 0; t < SWEEP_THREADS; t++)
    if (libs[t]) dlclose(libs[t]); /* its workers end first */
  for (int i = 0; i < nin; i++) free(in[i]);
  for (int o = 0; o < nout; o++) free(first[o]), free(out[o]);
  check_set_ctx("%s", "");
}

/* Steps big enough for the library's threads, on 1 to 4 of them: the same
 * bits (the parts fall at other rows and columns for each count), and as the
 * program's.
 * - a GEMM split by rows, a row kernel over its rows (softmax: its parts are
 *   whole rows; before, a part that cut a row summed its exps in a loop of
 *   its own, which LLVM vectorized otherwise on a Zen 3 (AVX2): 8 lanes x 2
 *   sums and a scalar tail against 8 x 1);
 * - a GEMM of few rows split by columns;
 * - row kernels whose rows (333 points) and row count (101) no vector width
 *   or thread count divides. */
static void test_library_threads(void) {
  LOOM_SCOPE {
    loom_tensor *ins[] = {loom_input("x", LOOM_SHAPE(256, 300), LOOM_F32, LOOM_CPU),
                          loom_input("y", LOOM_SHAPE(101, 333), LOOM_F32, LOOM_CPU)};
    /* scaled so that products stay near 1: sums of 300 terms in the orders
     * of the library's and the program's splits then agree within
     * check_same's 1e-6 through the softmax */
    loom_tensor *w =
        loom_mul_s(loom_randn_key(loom_key_new(3), LOOM_SHAPE(300, 200), LOOM_F32, LOOM_CPU), 0.05);
    loom_tensor *v = loom_mul_s(
        loom_randn_key(loom_key_new(4), LOOM_SHAPE(300, 1024), LOOM_F32, LOOM_CPU), 0.05);
    loom_tensor *outs[] = {
        loom_softmax(loom_relu(loom_matmul(ins[0], w)), -1),
        loom_tanh(loom_matmul(loom_slice(ins[0], 0, 0, 16, 1), v)), /* 16 rows */
        loom_softmax(ins[1], -1),
        loom_layer_norm(ins[1], 1, NULL, NULL, 1e-5),
    };
    loom_program *p = loom_compile(outs, 4, ins, 2);
    CHECK(p != NULL);
    if (p) check_thread_counts(p, "thr", "THR", true);
    loom_program_free(p);
  }
}

/* Products whose operands are contiguous along the sum (x @ W^T) with few
 * outputs for their sums: summed packed as a whole, while a part of them
 * (rows or columns split over threads) would have few enough outputs for the
 * unpacked path, whose partial sums are in another order. Each part takes
 * the whole product's path, on 1 to 4 threads. Not compared with the
 * program: loom splits these products its own way (docs/gemm.md,
 * "GEMM threads"), and sums of 10000 and 30000 terms in other orders differ
 * by more than check_same's bound (2.4e-5 and 1.7e-4 here). */
static void test_library_threads_unpacked_edge(void) {
  LOOM_SCOPE {
    loom_tensor *ins[] = {loom_input("a", LOOM_SHAPE(64, 10000), LOOM_F32, LOOM_CPU),
                          loom_input("wa", LOOM_SHAPE(4, 10000), LOOM_F32, LOOM_CPU),
                          loom_input("b", LOOM_SHAPE(5, 30000), LOOM_F32, LOOM_CPU),
                          loom_input("wb", LOOM_SHAPE(128, 30000), LOOM_F32, LOOM_CPU)};
    loom_tensor *outs[] = {
        loom_matmul(ins[0], loom_transpose(ins[1], 0, 1)), /* 64 x 4: split by rows */
        loom_matmul(ins[2], loom_transpose(ins[3], 0, 1)), /* 5 x 128: by columns */
    };
    loom_program *p = loom_compile(outs, 2, ins, 4);
    CHECK(p != NULL);
    if (p) check_thread_counts(p, "edge", "EDGE", false);
    loom_program_free(p);
  }
}

int main(void) {
  /* The programs compute their products with loom's GEMM, the one an export
   * links: under auto, a CPU whose OpenBLAS kernels are as wide as its
   * vectors (a Zen 3's Zen kernels: AVX2) gives most products to OpenBLAS,
   * whose sums are in another order (attention's weight gradient differed
   * by 1.2e-6 there); where OpenBLAS's kernels are narrower, auto already
   * meant loom's. */
  setenv("LOOM_GEMM", "loom", 1);
  snprintf(dir, sizeof dir, "/tmp/loom-test-export-%d", (int)getpid());
  mkdir(dir, 0700);
  test_programs();
  test_weights_file();
  test_errors();
  test_command_line();
  test_awkward_paths();
  test_library_threads();
  test_library_threads_unpacked_edge();
  if (!check_failures) check_remove_dir(dir);
  return check_report();
}
