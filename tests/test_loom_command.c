/* The `loom` command's run and inspect (tools/loom.c) on saved programs: a
 * fixed one (a weight, two outputs of two dtypes) run on NumPy's own .npy
 * file, a symbolic one on inputs loom_npy_write wrote, at sizes --dim names;
 * the outputs compared with loom_program_run's; inspect's listing; and every
 * refusal (input count, files, dtypes, shapes, --dim names and sizes,
 * arguments, the output directory), each with its exit code and message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "scratch.h"
#include "test_device.h"

static char dir[256];

static const char *path_of(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static const char *fixture(const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/tests/data/npy/%s.npy", LOOM_SOURCE_DIR, name);
  return buf;
}

/* Runs `loom <args>` with stdout and stderr in dir/out.txt, dir/err.txt;
 * returns its exit code. */
static int loom_command(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s > '%s/out.txt' 2> '%s/err.txt'", LOOM_TOOL, args, dir, dir);
  int status = system(cmd);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The last command's stdout or stderr (free it). */
static char *output_of(const char *name) {
  size_t len = 0;
  unsigned char *data = check_read_file(path_of(name), &len);
  char *text = realloc(data, len + 1);
  if (text) text[len] = 0;
  return text;
}

/* `loom <args>` exits with code and says `says` on stderr. */
static void expect_command(const char *args, int code, const char *says) {
  check_set_ctx("loom %s", args);
  CHECK_EQ_INT(loom_command(args), code);
  char *err = output_of("err.txt");
  CHECK_STR_CONTAINS(err, says);
  free(err);
  check_set_ctx("%s", "");
}

/* The values of two tensors of one dtype and shape agree exactly. */
static void check_same_tensor(loom_tensor *got, loom_tensor *want) {
  CHECK(got && want);
  if (!got || !want) return;
  CHECK_EQ_INT(loom_dtype_of(got), loom_dtype_of(want));
  loom_shape a = loom_shape_of(got), b = loom_shape_of(want);
  CHECK_EQ_INT(a.ndim, b.ndim);
  for (int d = 0; d < a.ndim && d < b.ndim; d++) CHECK_EQ_INT(a.dim[d], b.dim[d]);
  size_t bytes = (size_t)loom_numel(want) * loom_dtype_size(loom_dtype_of(want));
  if ((size_t)loom_numel(got) * loom_dtype_size(loom_dtype_of(got)) != bytes) return;
  void *x = malloc(bytes + 1), *y = malloc(bytes + 1);
  CHECK_OK(loom_copy_to_host(got, x, bytes));
  CHECK_OK(loom_copy_to_host(want, y, bytes));
  CHECK(memcmp(x, y, bytes) == 0);
  free(x), free(y);
}

/* fixed.loom: x f32 [2,3] -> relu(x @ w + b) f32 [2,4], argmax of it along
 * dim 1 (i64 [2]); w [3,4] and b [4] are weights (64 bytes). */
static loom_program *fixed_program(void) {
  float w[12], b[4];
  check_fill_uniform(w, 12, 3);
  check_fill_uniform(b, 4, 4);
  loom_tensor *x = loom_input("x", LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
  loom_tensor *wt = loom_from_data(w, LOOM_SHAPE(3, 4), LOOM_F32, LOOM_CPU);
  loom_tensor *bt = loom_from_data(b, LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
  loom_tensor *mm = loom_matmul(x, wt), *sum = loom_add(mm, bt), *y = loom_relu(sum);
  loom_tensor *top = loom_argmax(y, 1, false);
  loom_tensor *outs[2] = {y, top};
  loom_program *p = loom_compile(outs, 2, &x, 1);
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  loom_free(x), loom_free(wt), loom_free(bt), loom_free(mm), loom_free(sum), loom_free(y);
  loom_free(top);
  return p;
}

/* symbolic.loom: x f32 [batch,3] and s f32 [batch] -> x * 2 + s[:, None]
 * f32 [batch,3] and its sum along dim 1, f32 [batch]. */
static loom_program *symbolic_program(void) {
  loom_tensor *x = loom_input("x", LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
  loom_tensor *s = loom_input("s", LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  loom_tensor *twice = loom_mul_s(x, 2), *col = loom_unsqueeze(s, 1);
  loom_tensor *y = loom_add(twice, col);
  int axis = 1;
  loom_tensor *total = loom_sum(y, &axis, 1, false);
  loom_tensor *ins[2] = {x, s}, *outs[2] = {y, total};
  loom_symbolic_dim dims[2] = {{0, 0, "batch"}, {1, 0, "batch"}};
  loom_program *p = loom_compile_symbolic(outs, 2, ins, 2, dims, 2);
  CHECK_MSG(p != NULL, "%s", loom_last_error());
  loom_free(x), loom_free(s), loom_free(twice), loom_free(col), loom_free(y), loom_free(total);
  return p;
}

/* loom run fixed.loom on NumPy's f4_2x3.npy: the outputs loom_program_run gives. */
static void test_run_fixed(loom_program *p) {
  char args[2048];
  snprintf(args, sizeof args, "run '%s' --input '%s' --output-dir '%s'", path_of("fixed.loom"),
           fixture("f4_2x3"), path_of("out/fixed"));
  CHECK_EQ_INT(loom_command(args), 0);
  char *out = output_of("out.txt");
  CHECK_STR_CONTAINS(out, "output_0.npy (out0 f32 [2,4])");
  CHECK_STR_CONTAINS(out, "output_1.npy (out1 i64 [2])");
  free(out);
  loom_tensor *x = loom_npy_read(fixture("f4_2x3"), LOOM_CPU), *want[2] = {NULL, NULL};
  CHECK_OK(loom_program_run(p, &x, want));
  for (int i = 0; i < 2; i++) {
    char name[64];
    snprintf(name, sizeof name, "out/fixed/output_%d.npy", i);
    loom_tensor *got = loom_npy_read(path_of(name), LOOM_CPU);
    CHECK_MSG(got != NULL, "%s", loom_last_error());
    check_same_tensor(got, want[i]);
    loom_free(got), loom_free(want[i]);
  }
  loom_free(x);
}

/* loom run symbolic.loom at batch 5 and 1, with and without --dim. */
static void test_run_symbolic(loom_program *p) {
  for (int k = 0; k < 2; k++) {
    int batch = k == 0 ? 5 : 1;
    check_set_ctx("symbolic, batch %d", batch);
    float xv[15], sv[5];
    check_fill_uniform(xv, 15, 10 + (unsigned)k);
    check_fill_uniform(sv, 5, 20 + (unsigned)k);
    loom_tensor *ins[2] = {loom_from_data(xv, LOOM_SHAPE(batch, 3), LOOM_F32, LOOM_CPU),
                           loom_from_data(sv, LOOM_SHAPE(batch), LOOM_F32, LOOM_CPU)};
    CHECK_OK(loom_npy_write(ins[0], path_of("x.npy")));
    CHECK_OK(loom_npy_write(ins[1], path_of("s.npy")));
    char args[2048];
    snprintf(args, sizeof args, "run '%s' --input '%s' %s --input '%s' --output-dir '%s'",
             path_of("symbolic.loom"), path_of("x.npy"), k == 0 ? "--dim batch=5" : "",
             path_of("s.npy"), path_of("out/sym"));
    CHECK_EQ_INT(loom_command(args), 0);
    loom_tensor *want[2] = {NULL, NULL};
    CHECK_OK(loom_program_run(p, ins, want));
    for (int i = 0; i < 2; i++) {
      char name[64];
      snprintf(name, sizeof name, "out/sym/output_%d.npy", i);
      loom_tensor *got = loom_npy_read(path_of(name), LOOM_CPU);
      check_same_tensor(got, want[i]);
      loom_free(got), loom_free(want[i]);
    }
    loom_free(ins[0]), loom_free(ins[1]);
  }
  check_set_ctx("%s", "");
}

static void test_inspect(void) {
  char args[1024];
  snprintf(args, sizeof args, "inspect '%s'", path_of("fixed.loom"));
  CHECK_EQ_INT(loom_command(args), 0);
  char *out = output_of("out.txt");
  CHECK_STR_CONTAINS(out, "(a loom program)");
  CHECK_STR_CONTAINS(out, "inputs: 1\n  0  x                f32 [2,3]\n");
  CHECK_STR_CONTAINS(out, "outputs: 2\n  0  out0             f32 [2,4]\n"
                          "  1  out1             i64 [2]\n");
  CHECK_STR_CONTAINS(out, "symbols: 0\n");
  CHECK_STR_CONTAINS(out, "\n  matmul           1\n");
  CHECK_STR_CONTAINS(out, "\n  argmax           1\n");
  CHECK_STR_CONTAINS(out, "weights: 2 tensors, 64 bytes\n");
  free(out);
  snprintf(args, sizeof args, "inspect '%s'", path_of("symbolic.loom"));
  CHECK_EQ_INT(loom_command(args), 0);
  out = output_of("out.txt");
  CHECK_STR_CONTAINS(out, "inputs: 2\n  0  x                f32 [batch,3]\n"
                          "  1  s                f32 [batch]\n");
  CHECK_STR_CONTAINS(out, "outputs: 2\n  0  out0             f32 [batch,3]\n"
                          "  1  out1             f32 [batch]\n");
  CHECK_STR_CONTAINS(out, "symbols: 1 (batch; --dim NAME=N)\n");
  CHECK_STR_CONTAINS(out, "weights: 0 tensors, 0 bytes\n");
  free(out);
  expect_command("inspect", 2, "usage:");
  snprintf(args, sizeof args, "inspect '%s'", path_of("none.loom"));
  expect_command(args, 1, "none.loom");
}

static void test_refusals(void) {
  char fixed[512], sym[512], out[512], args[4096]; /* path_of's buffers are reused */
  snprintf(fixed, sizeof fixed, "%s", path_of("fixed.loom"));
  snprintf(sym, sizeof sym, "%s", path_of("symbolic.loom"));
  snprintf(out, sizeof out, "%s", path_of("out/refused"));
#define EXPECT(code, says, ...)                                                                    \
  do {                                                                                             \
    snprintf(args, sizeof args, __VA_ARGS__);                                                      \
    expect_command(args, code, says);                                                              \
  } while (0)
  EXPECT(2, "takes 1 input (x f32 [2,3]), 0 --input given", "run '%s' --output-dir '%s'", fixed,
         out);
  EXPECT(1, "--device applies to ONNX models", "run '%s' --device cuda --output-dir '%s'", fixed,
         out);
  EXPECT(2, "takes 2 inputs (x f32 [batch,3], s f32 [batch]), 1 --input given",
         "run '%s' --input '%s' --output-dir '%s'", sym, fixture("f4_2x3"), out);
  EXPECT(1, "input 0 (x): LOOM_ERR_IO: loom_npy_read: '", "run '%s' --input '%s' --output-dir '%s'",
         fixed, path_of("none.npy"), out);
  EXPECT(1, "(complex64) is not a loom dtype", "run '%s' --input '%s' --output-dir '%s'", fixed,
         fixture("c8_2"), out);
  EXPECT(1, "is u32 [3]; the program takes f32 [2,3]", "run '%s' --input '%s' --output-dir '%s'",
         fixed, fixture("u4_3"), out); /* read (it was refused), then the wrong dtype */
  EXPECT(1, "input 0 (x) '", "run '%s' --input '%s' --output-dir '%s'", fixed, fixture("i4_2x3"),
         out);
  EXPECT(1, "is i32 [2,3]; the program takes f32 [2,3]", "run '%s' --input '%s' --output-dir '%s'",
         fixed, fixture("i4_2x3"), out);
  EXPECT(1, "is f32 [1,2,1,2,1,1,2,1]; the program takes f32 [2,3]",
         "run '%s' --input '%s' --output-dir '%s'", fixed, fixture("f4_8d"), out);
  /* --dim: a name the program lacks, on a fixed program, sizes the inputs
   * disagree with, malformed values */
  EXPECT(1, "--dim seq: '", "run '%s' --dim seq=3 --input a --input b --output-dir '%s'", sym, out);
  EXPECT(1, "has no symbol of that name (its symbols: batch)",
         "run '%s' --dim seq=3 --input a --input b --output-dir '%s'", sym, out);
  EXPECT(1, "(it has none: every size is fixed)",
         "run '%s' --dim batch=2 --input a --output-dir '%s'", fixed, out);
  EXPECT(1, "is f32 [2,3]: dim 0 (symbol batch) is 2, not the 4 of --dim batch=4",
         "run '%s' --dim batch=4 --input '%s' --input '%s' --output-dir '%s'", sym,
         fixture("f4_2x3"), fixture("f4_2x3"), out);
  EXPECT(2, "--dim takes NAME=N with N >= 1, got 'batch'",
         "run '%s' --dim batch --input a --output-dir '%s'", sym, out);
  EXPECT(2, "got 'batch=0'", "run '%s' --dim batch=0 --input a --output-dir '%s'", sym, out);
  EXPECT(2, "got '=3'", "run '%s' --dim =3 --input a --output-dir '%s'", sym, out);
  /* sizes --dim agrees with but the inputs do not share: loom_program_run's refusal */
  float v[3] = {1, 2, 3};
  loom_tensor *s3 = loom_from_data(v, LOOM_SHAPE(3), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_npy_write(s3, path_of("s3.npy")));
  loom_free(s3);
  EXPECT(1, "LOOM_ERR_SHAPE", "run '%s' --input '%s' --input '%s' --output-dir '%s'", sym,
         fixture("f4_2x3"), path_of("s3.npy"), out);
  /* arguments */
  EXPECT(2, "needs a model and --output-dir DIR", "run '%s' --input '%s'", fixed,
         fixture("f4_2x3"));
  EXPECT(2, "unexpected argument '--bogus'", "run '%s' --bogus --output-dir '%s'", fixed, out);
  EXPECT(2, "usage:", "run");
  /* a model that is not there, or not a program */
  EXPECT(1, "none.loom", "run '%s' --input a --output-dir '%s'", path_of("none.loom"), out);
  EXPECT(1, "LOOM_ERR_", "run '%s' --input a --output-dir '%s'", fixture("f4_2x3"), out);
  /* an output directory under a file */
  check_write_file(path_of("plain"), "x", 1);
  EXPECT(1, "cannot make the directory", "run '%s' --input '%s' --output-dir '%s'", fixed,
         fixture("f4_2x3"), path_of("plain/out"));
#undef EXPECT
}

static const char *onnx_fixture(const char *name) {
  static char buf[2][512];
  static int next;
  char *p = buf[next++ % 2];
  snprintf(p, sizeof buf[0], "%s/tests/data/onnx/%s.onnx", LOOM_SOURCE_DIR, name);
  return p;
}

/* tests/data/onnx (tests/data/make_onnx_fixtures.py): mlp.onnx, relu(x W + b)
 * over a symbolic batch, run at two batches, with the batch fixed, inspected
 * and exported; unsupported.onnx's nodes named by inspect and by run. */
static void test_onnx_models(void) {
  static const float w[3][2] = {{1, -1}, {2, 0.5f}, {-1, 1}}, b[2] = {0.5f, -0.5f};
  char args[2048];
  for (int k = 0; k < 2; k++) {
    int64_t batch = k == 0 ? 5 : 1;
    check_set_ctx("mlp.onnx at batch %lld", (long long)batch);
    float x[15];
    for (int i = 0; i < batch * 3; i++) x[i] = (float)(i - 7) / 3;
    loom_tensor *in = loom_from_data(x, LOOM_SHAPE(batch, 3), LOOM_F32, LOOM_CPU);
    CHECK_OK(loom_npy_write(in, path_of("x.npy")));
    /* on the device where the suite runs (LOOM_TEST_DEVICE=cuda: the emulated one) */
    snprintf(args, sizeof args, "run '%s' --input '%s' --device %s --output-dir '%s'",
             onnx_fixture("mlp"), path_of("x.npy"),
             test_device().type == LOOM_DEVICE_CUDA ? "cuda" : "cpu", path_of("out/onnx"));
    CHECK_EQ_INT(loom_command(args), 0);
    loom_tensor *y = loom_npy_read(path_of("out/onnx/output_0.npy"), LOOM_CPU);
    CHECK(y != NULL);
    float got[10] = {0};
    if (y) {
      CHECK_EQ_INT(loom_shape_of(y).dim[0], batch);
      CHECK_OK(loom_copy_to_host(y, got, (size_t)batch * 2 * sizeof *got));
    }
    for (int r = 0; r < batch; r++)
      for (int c = 0; c < 2; c++) {
        float v = b[c];
        for (int i = 0; i < 3; i++) v += x[r * 3 + i] * w[i][c];
        CHECK_NEAR(got[r * 2 + c], v > 0 ? v : 0, 1e-6);
      }
    loom_free(in), loom_free(y);
    /* the batch fixed at import: the other batch is refused */
    snprintf(args, sizeof args, "run '%s' --input '%s' --dim batch=%d --output-dir '%s'",
             onnx_fixture("mlp"), path_of("x.npy"), batch == 5 ? 4 : 1, path_of("out/onnx"));
    CHECK_EQ_INT(loom_command(args), batch == 5 ? 1 : 0);
  }
  check_set_ctx("%s", "");
  snprintf(args, sizeof args, "run '%s' --input '%s' --dim nope=2 --output-dir '%s'",
           onnx_fixture("mlp"), path_of("x.npy"), path_of("out/onnx"));
  expect_command(args, 1, "opts.dims[0] names 'nope', which is no symbolic dim");
  if (test_device().type == LOOM_DEVICE_CPU && !loom_cuda_available()) {
    snprintf(args, sizeof args, "run '%s' --input '%s' --device cuda --output-dir '%s'",
             onnx_fixture("mlp"), path_of("x.npy"), path_of("out/onnx"));
    expect_command(args, 1, "cuda:0 is not available");
  }
  snprintf(args, sizeof args, "run '%s' --input '%s' --device tpu --output-dir '%s'",
           onnx_fixture("mlp"), path_of("x.npy"), path_of("out/onnx"));
  expect_command(args, 2, "--device takes cpu, cuda or cuda:N, got 'tpu'");
  snprintf(args, sizeof args, "inspect '%s'", onnx_fixture("mlp"));
  CHECK_EQ_INT(loom_command(args), 0);
  char *out = output_of("out.txt");
  CHECK_STR_CONTAINS(out, "x                        float [batch, 3]");
  CHECK_STR_CONTAINS(out, "MatMul                   1");
  CHECK_STR_CONTAINS(out, "parameters: 2 initializers, 32 bytes");
  CHECK_STR_CONTAINS(out, "unsupported nodes: 0");
  CHECK_STR_CONTAINS(out, "symbols: 1 (batch");
  free(out);
  snprintf(args, sizeof args, "inspect '%s'", onnx_fixture("unsupported"));
  CHECK_EQ_INT(loom_command(args), 0);
  out = output_of("out.txt");
  CHECK_STR_CONTAINS(out, "unsupported nodes: 2");
  CHECK_STR_CONTAINS(out, "node 1 'first_missing' (NoSuchOp)");
  CHECK_STR_CONTAINS(out, "node 2 'second_missing' (AlsoMissing in example.com)");
  CHECK_STR_CONTAINS(out, "as a loom program: not imported:");
  free(out);
  snprintf(args, sizeof args, "run '%s' --input '%s' --output-dir '%s'",
           onnx_fixture("unsupported"), fixture("f4_2x3"), path_of("out/onnx"));
  expect_command(args, 1, "2 nodes of ops loom does not import: node 'first_missing' (NoSuchOp)");
  mkdir(path_of("lib"), 0755);
  snprintf(args, sizeof args, "export '%s' --name mlp --out '%s'", onnx_fixture("mlp"),
           path_of("lib"));
  CHECK_EQ_INT(loom_command(args), 0);
  CHECK(check_file_contains(path_of("lib/mlp.h"), "mlp_run_dims"));
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/loom-command-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  loom_program *fixed = fixed_program(), *sym = symbolic_program();
  if (fixed && sym) {
    CHECK_OK(loom_program_save(fixed, path_of("fixed.loom")));
    CHECK_OK(loom_program_save(sym, path_of("symbolic.loom")));
    test_run_fixed(fixed);
    test_run_symbolic(sym);
    test_inspect();
    test_refusals();
  }
  test_onnx_models();
  loom_program_free(fixed);
  loom_program_free(sym);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_report();
}
