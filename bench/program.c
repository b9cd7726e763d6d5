/* Program workloads: what one call of a small model costs through the lazy
 * path (record, hash, look up, run), through loom_program_run (run only) and
 * through an exported library's <name>_run; and the digits-sized CNN's
 * inference through the JIT'd program against its exported library. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

typedef int (*exported_run)(const void *const *inputs, void *const *outputs);
typedef int (*exported_run_dims)(const int64_t *dims, const void *const *inputs,
                                 void *const *outputs);

typedef struct model_state {
  loom_params *ps;
  loom_linear fc1, fc2;
  loom_conv2d c1, c2;
  loom_linear head;
  bool cnn;
  loom_shape in_shape;
  loom_tensor *x; /* a realized input */
  float *host_in; /* the same values for the exported library */
  float *host_out;
  int64_t out_numel;
  loom_program *program;
  void *lib;
  exported_run run;
  exported_run_dims run_dims; /* symbolic: the batch a symbol, traced at 37 */
  char dir[128];
} model_state;

/* ------------------------------------------------------------ models */

/* tiny: [1, 16] -> linear 16 -> relu -> linear 4 */
static loom_tensor *tiny_forward(const model_state *s, const loom_tensor *x) {
  return loom_linear_forward(&s->fc2, loom_relu(loom_linear_forward(&s->fc1, x)));
}

/* the digits CNN's shape: conv 1->16, pool, conv 16->32, pool, linear -> 10 */
static loom_tensor *cnn_forward(const model_state *s, const loom_tensor *x) {
  loom_tensor *h = loom_max_pool2d(loom_relu(loom_conv2d_forward(&s->c1, x)), 2, 2, 0);
  h = loom_max_pool2d(loom_relu(loom_conv2d_forward(&s->c2, h)), 2, 2, 0);
  return loom_linear_forward(&s->head, loom_flatten(h, 1, -1));
}

static loom_tensor *forward(const model_state *s, const loom_tensor *x) {
  return s->cnn ? cnn_forward(s, x) : tiny_forward(s, x);
}

static void remove_dir(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", dir);
}

static void model_teardown(void *state) {
  model_state *s = state;
  if (!s) return;
  if (s->lib) dlclose(s->lib);
  if (s->dir[0]) remove_dir(s->dir);
  loom_program_free(s->program);
  loom_free(s->x);
  loom_params_free(s->ps);
  free(s->host_in);
  free(s->host_out);
  free(s);
}

/* The model, an input, its program and its exported library (symbolic: the
 * library of the program traced at batch 37 with the batch a symbol). */
static loom_status model_setup(void **state, bool cnn, bool symbolic) {
  model_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  *state = s;
  s->cnn = cnn;
  s->ps = loom_params_new();
  loom_key k[3];
  loom_key_split(loom_key_new(42), k, 3);
  loom_conv2d_opts pad1 = {.padding = {1, 1}};
  if (cnn) {
    s->in_shape = LOOM_SHAPE(64, 1, 8, 8);
    s->c1 = loom_conv2d_new(s->ps, "c1", 1, 16, 3, pad1, k[0]);
    s->c2 = loom_conv2d_new(s->ps, "c2", 16, 32, 3, pad1, k[1]);
    s->head = loom_linear_new(s->ps, "head", 32 * 2 * 2, 10, k[2]);
  } else {
    s->in_shape = LOOM_SHAPE(1, 16);
    s->fc1 = loom_linear_new(s->ps, "fc1", 16, 16, k[0]);
    s->fc2 = loom_linear_new(s->ps, "fc2", 16, 4, k[1]);
  }
  loom_status st = bench_uniform_input(3, s->in_shape, -1, 1, &s->x);
  if (st != LOOM_OK) return st;
  int64_t n = loom_numel(s->x);
  s->host_in = malloc(sizeof(float) * (size_t)n);
  if (!s->host_in) return LOOM_ERR_OOM;
  if ((st = loom_copy_to_host(s->x, s->host_in, sizeof(float) * (size_t)n)) != LOOM_OK) return st;
  LOOM_SCOPE {
    loom_shape traced = s->in_shape;
    if (symbolic) traced.dim[0] = 37;
    loom_tensor *in = loom_input("x", traced, LOOM_F32, LOOM_CPU);
    loom_tensor *out = forward(s, in);
    s->out_numel = loom_numel(out) / traced.dim[0] * s->in_shape.dim[0];
    loom_symbolic_dim batch = {0, 0, "batch"};
    s->program = loom_compile_symbolic(&out, 1, &in, 1, &batch, symbolic ? 1 : 0);
  }
  if (!s->program) return loom_last_status();
  s->host_out = malloc(sizeof(float) * (size_t)s->out_numel);
  snprintf(s->dir, sizeof s->dir, "/tmp/loom-bench-export-%d", (int)getpid());
  if (!s->host_out || mkdir(s->dir, 0700) != 0) return LOOM_ERR_IO;
  if ((st = loom_program_export(s->program, s->dir, "benchmodel")) != LOOM_OK) return st;
  char path[256];
  snprintf(path, sizeof path, "%s/libbenchmodel.so", s->dir);
  s->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (symbolic)
    s->run_dims = s->lib ? (exported_run_dims)dlsym(s->lib, "benchmodel_run_dims") : NULL;
  else
    s->run = s->lib ? (exported_run)dlsym(s->lib, "benchmodel_run") : NULL;
  return s->run || s->run_dims ? LOOM_OK : LOOM_ERR_IO;
}

static loom_status tiny_setup(void **state) { return model_setup(state, false, false); }
static loom_status cnn_setup(void **state) { return model_setup(state, true, false); }
static loom_status tiny_symbolic_setup(void **state) { return model_setup(state, false, true); }
static loom_status cnn_symbolic_setup(void **state) { return model_setup(state, true, true); }

/* ------------------------------------------------------------ calls */

static loom_status lazy_run(void *state, bench_call_report *report) {
  (void)report;
  model_state *s = state;
  loom_scope_begin();
  loom_status st = bench_realize(forward(s, s->x));
  return bench_first_error(st, loom_scope_end());
}

static loom_status program_run(void *state, bench_call_report *report) {
  (void)report;
  model_state *s = state;
  loom_scope_begin();
  loom_tensor *out = NULL;
  loom_status st = loom_program_run(s->program, &s->x, &out);
  return bench_first_error(st, loom_scope_end());
}

static loom_status exported_call(void *state, bench_call_report *report) {
  (void)report;
  model_state *s = state;
  const void *ins[] = {s->host_in};
  void *outs[] = {s->host_out};
  return s->run(ins, outs) == 0 ? LOOM_OK : LOOM_ERR_INTERNAL;
}

static loom_status exported_dims_call(void *state, bench_call_report *report) {
  (void)report;
  model_state *s = state;
  const void *ins[] = {s->host_in};
  void *outs[] = {s->host_out};
  return s->run_dims(&s->in_shape.dim[0], ins, outs) == 0 ? LOOM_OK : LOOM_ERR_INTERNAL;
}

const bench_workload bench_program_workloads[] = {
    {
        .name = "call_lazy_tiny",
        .what = "linear 16-16, relu, linear 16-4 on [1,16]: record + realize",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 1000,
        .setup = tiny_setup,
        .run = lazy_run,
        .teardown = model_teardown,
        .cpu_only = true,
    },
    {
        .name = "call_program_tiny",
        .what = "the same as a compiled program: loom_program_run",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 1000,
        .setup = tiny_setup,
        .run = program_run,
        .teardown = model_teardown,
        .cpu_only = true,
    },
    {
        .name = "call_so_tiny",
        .what = "the same exported: <name>_run from the .so",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 1000,
        .setup = tiny_setup,
        .run = exported_call,
        .teardown = model_teardown,
        .cpu_only = true,
    },
    {
        .name = "call_so_tiny_symbolic",
        .what = "the same exported with the batch a symbol: <name>_run_dims at batch 1",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 1000,
        .setup = tiny_symbolic_setup,
        .run = exported_dims_call,
        .teardown = model_teardown,
        .cpu_only = true,
    },
    {
        .name = "cnn_infer_program",
        .what = "digits CNN inference, batch 64: loom_program_run (JIT, loom's threads)",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 10,
        .setup = cnn_setup,
        .run = program_run,
        .teardown = model_teardown,
        .cpu_only = true,
    },
    {
        .name = "cnn_infer_so",
        .what = "the same exported: <name>_run (its own threads, as many as the CPUs)",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 10,
        .setup = cnn_setup,
        .run = exported_call,
        .teardown = model_teardown,
        .cpu_only = true,
    },
    {
        .name = "cnn_infer_so_symbolic",
        .what = "the same exported with the batch a symbol (traced at 37): <name>_run_dims at 64",
        .metric = BENCH_LATENCY,
        .calls_per_sample = 10,
        .setup = cnn_symbolic_setup,
        .run = exported_dims_call,
        .teardown = model_teardown,
        .cpu_only = true,
    },
};
const int bench_program_count = sizeof bench_program_workloads / sizeof bench_program_workloads[0];
