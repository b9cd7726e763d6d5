/* The benchmark harness behind `loom bench`: workloads, the machine's limits,
 * the runner that times them, the report and the peer comparison.
 *
 * A workload is one struct (see bench_workload); each family file (elementwise,
 * rows, matmul, compile) lists its own, and registry.c joins the lists. */
#ifndef LOOM_BENCH_H
#define LOOM_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <loom.h>

/* ------------------------------------------------------------------ workloads */

/* What a workload's rate is measured in. */
typedef enum bench_metric {
  BENCH_BANDWIDTH, /* GB/s: bytes that must move (inputs read once + outputs written once) */
  BENCH_FLOPS,     /* GFLOP/s */
  BENCH_LATENCY,   /* microseconds per call (per-call overhead) */
  BENCH_COMPILE    /* milliseconds per call (compilation or loading code) */
} bench_metric;

/* What one call may report about itself when the work is done elsewhere (in a
 * child process): the harness then uses these instead of its own clock and of
 * this process's stats. */
typedef struct bench_call_report {
  bool has_seconds;
  double seconds;
  bool has_stats;
  loom_stats stats; /* the counters' change over the call */
} bench_call_report;

typedef struct bench_workload {
  const char *name;
  const char *what; /* one line: the computation */
  bench_metric metric;
  double work;          /* bytes (BENCH_BANDWIDTH) or flops (BENCH_FLOPS) per call */
  int calls_per_sample; /* calls timed together per sample (0 means 1) */
  bool compare_unfused; /* time it again with loom_set_fusion(false) */
  bool compare_generic; /* time it again with every kernel shape-generic
                           (loom_set_dynamic(LOOM_DYNAMIC_ALWAYS)) */
  bool measure_peak;    /* report bytes_peak over one call */
  loom_status (*setup)(void **state);
  /* One call. report is zeroed before; fill it only for work done elsewhere. */
  loom_status (*run)(void *state, bench_call_report *report);
  void (*teardown)(void *state);
  /* Optional: median seconds of the same work done by calling a library (OpenBLAS)
   * directly, or a negative value when it could not be measured. */
  double (*direct_seconds)(int repeats);
  /* Optional: the same on --device cuda, through cuBLAS on that device. */
  double (*cuda_direct_seconds)(int repeats, int device);
  /* Optional: a note printed under the table (after the runs, before teardown). */
  void (*describe)(void *state, char *buf, size_t size);
  bool cpu_only; /* compiled programs, export, the CPU compiler: skipped on --device cuda */
  bool dist;     /* runs across the ranks mpirun started (loom_ddp): left out of a run of
                    every workload unless loom bench was started by mpirun */
  const char *onnx_model; /* the models folder's model it runs (models.c): left out of a run
                             of every workload when the file is missing */
} bench_workload;

/* Every workload, in the order `loom bench` runs them. */
int bench_workload_count(void);
const bench_workload *bench_workload_at(int i);
const bench_workload *bench_workload_find(const char *name);

/* The family lists registry.c joins. */
extern const bench_workload bench_elementwise_workloads[];
extern const int bench_elementwise_count;
extern const bench_workload bench_rows_workloads[];
extern const int bench_rows_count;
extern const bench_workload bench_matmul_workloads[];
extern const int bench_matmul_count;
extern const bench_workload bench_compile_workloads[];
extern const int bench_compile_count;
extern const bench_workload bench_train_workloads[];
extern const int bench_train_count;
extern const bench_workload bench_program_workloads[];
extern const int bench_program_count;
extern const bench_workload bench_dynamic_workloads[];
extern const int bench_dynamic_count;
extern const bench_workload bench_model_workloads[];
extern const int bench_model_count;
/* Where the model workloads' ONNX files are: $LOOM_BENCH_MODELS_DIR, else the
 * build's onnx_models/ (tests/onnx_models/run.sh writes <name>/model.onnx). */
const char *bench_models_dir(void);
bool bench_model_present(const char *model);

/* ------------------------------------------------------------------ helpers */

double bench_now(void); /* CLOCK_MONOTONIC, seconds */
/* The MLP 784-512-256-10 of mlp_train_step (layers fc1..fc3, key 5), its
 * parameters new; NULL tensors and loom_last_error when it fails. */
loom_params *bench_mlp_784_new(loom_linear fc[3]);
double bench_median(double *values, int n); /* sorts values */

/* A realized F32 tensor of uniform [lo, hi) values, outside any scope (the
 * caller frees it). On failure *out is NULL and the error is returned. */
loom_status bench_uniform_input(uint64_t seed, loom_shape shape, double lo, double hi,
                                loom_tensor **out);
/* Realizes t inside the current scope and waits for its device; returns the
 * status (t's own error first). */
loom_status bench_realize(loom_tensor *t);
/* The first non-OK of two statuses. */
loom_status bench_first_error(loom_status a, loom_status b);
/* Frees an array of tensors (NULLs ignored). */
void bench_free_all(loom_tensor **ts, int n);

/* The usual workload state: realized uniform [-1, 1) inputs. */
#define BENCH_MAX_INPUTS 4
typedef struct bench_inputs {
  int n;
  loom_tensor *t[BENCH_MAX_INPUTS];
} bench_inputs;
/* *state becomes a bench_inputs of n inputs with the given shapes. */
loom_status bench_inputs_new(void **state, int n, const loom_shape *shapes);
void bench_inputs_free(void *state); /* a teardown */
/* A run's usual body: in a scope, realize build(inputs), then end the scope. */
typedef loom_tensor *(*bench_graph_builder)(loom_tensor *const *inputs);
loom_status bench_realize_in_scope(bench_graph_builder build, const bench_inputs *in);

/* ------------------------------------------------------------------ the machine */

typedef struct bench_limits {
  int threads;
  double copy_gbs;     /* STREAM-like copy over 64M floats, best of several */
  double triad_gbs;    /* STREAM-like triad over 64M floats, best of several */
  double sgemm_gflops; /* OpenBLAS SGEMM 2048^3, best of several */
  double device_gbs;   /* on --device cuda: the device's peak bandwidth (then the others are 0) */
} bench_limits;

/* Measures the limits with `threads` pthreads (and OpenBLAS threads). A value
 * that could not be measured is 0 and reported as such. */
bench_limits bench_measure_limits(int threads);
double bench_bandwidth_limit(const bench_limits *limits); /* the better of copy, triad */

/* ------------------------------------------------------------------ running */

typedef struct bench_options {
  int repeats; /* timed samples per workload */
  int warmup;  /* untimed calls before them */
  int threads;
  bool json;
  bool peers;
  const char *peers_dir; /* where the peers' scripts (numpy_bench.py, ...) are */
  loom_device device;    /* where the workloads' tensors live (--device) */
} bench_options;

typedef struct bench_result {
  const bench_workload *workload;
  loom_status status;
  char error[512];

  double median_s; /* per call */
  double first_s;  /* the very first call, compilation included */
  uint64_t first_kernels_compiled;
  uint64_t first_disk_hits;
  uint64_t first_memory_hits;
  double kernels_per_call;
  double gemm_per_call;
  bool has_peak;
  uint64_t peak_bytes;        /* bytes_peak over one call (inputs included) */
  uint64_t live_before_bytes; /* bytes_live before that call (the inputs) */
  double unfused_median_s;    /* 0 when not measured */
  double unfused_kernels_per_call;
  double generic_median_s; /* 0 when not measured */
  double direct_s;         /* 0 when not measured */
  char note[256];
} bench_result;

/* Runs one workload end to end; a failure is recorded in the result. */
bench_result bench_run_workload(const bench_workload *w, const bench_options *opts);

/* The rate in the workload's unit (GB/s, GFLOP/s, us, ms) and the percentage of
 * the machine's limit (negative when there is none). */
double bench_rate(const bench_result *r);
double bench_percent_of_limit(const bench_result *r, const bench_limits *limits);

/* ------------------------------------------------------------------ report */

void bench_print_limits(FILE *out, const bench_limits *limits);
/* The table, printed as results come: the limits and header, a row per
 * workload, then the workloads' notes. */
void bench_print_table_header(FILE *out, const bench_limits *limits);
void bench_print_table_row(FILE *out, const bench_result *r, const bench_limits *limits);
void bench_print_table_notes(FILE *out, const bench_result *results, int n);
void bench_print_json_limits(FILE *out, const bench_limits *limits);
void bench_print_json_result(FILE *out, const bench_result *r, const bench_limits *limits);
/* "1.23 ms" etc. */
const char *bench_format_seconds(double s, char *buf, size_t size);

/* ------------------------------------------------------------------ peers */

typedef struct bench_peer_timing {
  char peer[32]; /* numpy, torch, ort, torch2, jax, openvino */
  char workload[64];
  char variant[64]; /* eager, out=, inductor max-autotune hugetlb passive, ... */
  double seconds;   /* median per call */
} bench_peer_timing;

typedef struct bench_peer_set {
  bench_peer_timing *timings;
  int count;
  char skipped[32][320]; /* "torch: No module named torch", one line per reason */
  int nskipped;
} bench_peer_set;

/* Runs the peer scripts for the given workload names (all when n == 0); a
 * Python, venv or script that is missing is one skipped line. */
void bench_run_peers(const bench_options *opts, const char *const *names, int n,
                     bench_peer_set *set);
/* Adds a script's output (one JSON object per line: a timing, or
 * {"peer": ..., "skipped": reason}) to set; output is cut up in the process. */
void bench_parse_peer_output(bench_peer_set *set, const char *peer, char *output);
/* The fastest timing of a workload, of any peer and variant; NULL when none. */
const bench_peer_timing *bench_best_peer(const bench_peer_set *set, const char *workload);
/* The table: a row per timing (peer / loom), then one per workload against
 * its best peer, then the skipped lines. */
void bench_print_peers(FILE *out, const bench_peer_set *set, const bench_result *results, int n);
void bench_print_json_peers(FILE *out, const bench_peer_set *set, const bench_result *results,
                            int n);
void bench_peer_set_free(bench_peer_set *set);

/* ------------------------------------------------------------------ processes */

/* Runs argv[0] with argv, the environment plus `extra_env` ("NAME=value", NULL
 * ended, may be NULL), and returns its standard output (malloc'd, NUL ended) in
 * *output. Standard error is passed through. Returns the exit status (0 is
 * success), or -1 when it could not run (errno set). */
int bench_run_process(const char *const *argv, const char *const *extra_env, char **output);

/* The hidden `loom __bench-child` subcommand (compile_disk's child processes). */
int bench_child_main(int argc, char **argv);

/* Median seconds of C [m, n] = A [m, k] @ B ([k, n], or [n, k] with b_trans)
 * in F32 through cuBLAS on CUDA device `device`, synchronized per call; a
 * negative value (and the reason on stderr) when cuBLAS or the device is not
 * there (bench/cublas.c). */
double bench_cublas_gemm_seconds(int64_t m, int64_t n, int64_t k, bool b_trans, int repeats,
                                 int device);

#endif /* LOOM_BENCH_H */
