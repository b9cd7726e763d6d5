/* The `loom` command: information about this build and machine, the kernel
 * cache, saved programs and ONNX models (export, run on .npy files,
 * inspect), and the benchmarks (bench/).
 *
 *   loom info
 *   loom cache stats | clear
 *   loom export MODEL --name NAME --out DIR
 *   loom run MODEL [--input FILE.npy]... [--dim NAME=N]... [--device D] --output-dir DIR
 *   loom inspect MODEL
 * MODEL is a program file (.loom) or an ONNX model (.onnx).
 *   loom bench [name...] [--json] [--peers] [--repeats N] [--warmup N] [--threads N]
 *              [--no-limits] [--list]
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <loom.h>

#include "bench.h"
#include "io/onnx/onnx.h"
#include "io/program_info.h"

#ifndef LOOM_BENCH_PEERS_DIR
#define LOOM_BENCH_PEERS_DIR "bench/peers"
#endif

#define DEFAULT_REPEATS 10
#define DEFAULT_WARMUP 2

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: loom info\n"
          "       loom cache stats | clear\n"
          "       loom export MODEL --name NAME --out DIR\n"
          "       loom run MODEL [--input FILE.npy]... [--dim NAME=N]... [--device D] --output-dir "
          "DIR\n"
          "       loom inspect MODEL\n"
          "       loom bench [name...] [--json] [--peers] [--repeats N] [--warmup N]\n"
          "                  [--threads N] [--no-limits] [--list] [--device cpu|cuda[:N]]\n"
          "\n"
          "bench: all workloads when no names are given. --json prints one JSON object per\n"
          "line on stdout (the table then goes to stderr). --peers also runs the NumPy,\n"
          "PyTorch, ONNX Runtime, JAX and OpenVINO versions (bench/peers, or\n"
          "$LOOM_BENCH_PEERS_DIR) and gives loom's ratio to the best of them; PyTorch 2, JAX\n"
          "and OpenVINO need .venv-peers (bash bench/peers/setup.sh).\n"
          "--no-limits skips measuring the machine's limits (no percentages then).\n"
          "\n"
          "MODEL: a program saved with loom_program_save (.loom) or an ONNX model (.onnx,\n"
          "loom_onnx_load).\n"
          "\n"
          "export: loads MODEL and writes DIR/libNAME.so and DIR/NAME.h (loom_program_export).\n"
          "\n"
          "run: runs MODEL on NumPy .npy inputs, one --input per input in its order, and\n"
          "writes DIR/output_<i>.npy in its output order (DIR is made if missing). --dim\n"
          "NAME=N: for a .loom program, the size a symbol takes (the inputs must agree); for\n"
          "an ONNX model, fixes the dim_param NAME at import. --device cpu|cuda[:N]: where\n"
          "an ONNX model runs (its inputs and weights go there). .npy dtypes: float32, float64,\n"
          "float16, int32, int64, int8, uint8, bool.\n"
          "\n"
          "inspect: prints a program's inputs and outputs (dtype, shape with its symbols),\n"
          "its symbols, the ops its graph computes with their counts, and its weights; for\n"
          "an ONNX model first what the file declares, its ops and parameters, and the\n"
          "nodes loom cannot import.\n");
}

static void print_error(const char *what, loom_status status) {
  const char *message = loom_last_error();
  fprintf(stderr, "loom: %s: %s: %s\n", what, loom_status_name(status),
          message ? message : "(no message)");
}

/* ------------------------------------------------------------------ info */

static int command_info(void) {
  const char *dir = loom_cache_dir();
  printf("loom %s\n", LOOM_VERSION_STRING);
  printf("target:    %s\n", loom_target_id());
  printf("threads:   %d\n", loom_num_threads());
  printf("fusion:    %s\n", loom_fusion_enabled() ? "on" : "off");
  static const char *const dynamic[] = {
      "auto (a kernel met again over other sizes is compiled once more, shape-generic)",
      "off (every kernel specialized to its sizes)", "always (every CPU kernel shape-generic)"};
  printf("dynamic:   %s\n", dynamic[loom_dynamic_mode()]);
  printf("cache dir: %s\n", dir ? dir : "(none: kernels are cached in memory only)");
  const char *library, *version, *core, *reason;
  loom_blas_info(&library, &version, &core, &reason);
  printf("blas:      %s, core %s (%s)\n", library, core, reason);
  printf("           %s\n", version);
  const char *gemm_why, *gemm = loom_gemm_choice(&gemm_why);
  printf("gemm:      %s (%s)\n", gemm, gemm_why);
  const char *no_amx;
  if (loom_cpu_amx(&no_amx))
    printf("amx:       BF16 matrix products on the CPU's AMX tiles\n");
  else
    printf("amx:       not used (%s)\n", no_amx);
  const char *bf16 = loom_cpu_bf16_products();
  printf("bf16 gemm: %s\n", strcmp(bf16, "amx") == 0 ? "AMX tiles"
                            : strcmp(bf16, "avx512-bf16") == 0
                                ? "AVX512-BF16 dot products of term pairs (vdpbf16ps)"
                                : "operands widened to F32 as they are packed");
  const char *mpi;
  if (loom_dist_available(&mpi))
    printf("mpi:       %s\n", mpi);
  else
    printf("mpi:       not available (%s)\n", mpi);
  const char *nccl;
  if (loom_dist_nccl_available(&nccl))
    printf("nccl:      %s (collectives on CUDA tensors)\n", nccl);
  else
    printf("nccl:      not used (%s)\n", nccl);
  if (loom_cuda_available())
    printf("cuda:      available, %d device(s)\n", loom_cuda_device_count());
  else {
    const char *reason = loom_cuda_unavailable_reason();
    printf("cuda:      unavailable (%s)\n", reason ? reason : "no reason given");
  }
  return 0;
}

/* ------------------------------------------------------------------ cache */

static int print_cache_stats(void) {
  loom_cache_info info;
  loom_status status = loom_cache_info_get(&info);
  if (status != LOOM_OK) {
    print_error("cache stats", status);
    return 1;
  }
  const char *dir = loom_cache_dir();
  printf("dir:     %s\n", dir ? dir : "(none)");
  printf("entries: %llu\n", (unsigned long long)info.entries);
  printf("bytes:   %llu (%.1f KiB)\n", (unsigned long long)info.bytes, (double)info.bytes / 1024.0);
  printf("cap:     %llu (%.1f MiB; LOOM_CACHE_MAX_BYTES; least recently used go first)\n",
         (unsigned long long)info.max_bytes, (double)info.max_bytes / (1024.0 * 1024.0));
  return 0;
}

static int clear_cache(void) {
  loom_cache_info before = {0};
  loom_status status = loom_cache_info_get(&before);
  if (status == LOOM_OK) status = loom_cache_clear();
  if (status != LOOM_OK) {
    print_error("cache clear", status);
    return 1;
  }
  printf("removed %llu entries (%llu bytes) from %s\n", (unsigned long long)before.entries,
         (unsigned long long)before.bytes, loom_cache_dir() ? loom_cache_dir() : "(none)");
  return 0;
}

static int command_cache(int argc, char **argv) {
  if (argc == 1 && strcmp(argv[0], "stats") == 0) return print_cache_stats();
  if (argc == 1 && strcmp(argv[0], "clear") == 0) return clear_cache();
  print_usage(stderr);
  return 2;
}

/* ------------------------------------------------------------------ bench */

typedef struct bench_command {
  bench_options options;
  int requested_threads; /* 0: loom's default */
  bool list_only;
  bool skip_limits; /* --no-limits: no STREAM/SGEMM (quick runs, valgrind) */
  const char **names;
  int nnames;
} bench_command;

/* An integer of at least `minimum` for a flag. */
static bool parse_count(const char *flag, const char *text, int minimum, int *value) {
  char *end = NULL;
  errno = 0;
  long v = text ? strtol(text, &end, 10) : 0;
  if (!text || !*text || errno || *end || v < minimum || v > INT_MAX) {
    fprintf(stderr, "loom bench: %s needs an integer of at least %d, got '%s'\n", flag, minimum,
            text ? text : "");
    return false;
  }
  *value = (int)v;
  return true;
}

/* "cpu", "cuda" or "cuda:N". */
static bool parse_device(const char *text, loom_device *out) {
  int index = 0;
  char extra;
  if (text && strcmp(text, "cpu") == 0) {
    *out = LOOM_CPU;
    return true;
  }
  if (text && (strcmp(text, "cuda") == 0 ||
               (sscanf(text, "cuda:%d%c", &index, &extra) == 1 && index >= 0))) {
    *out = LOOM_CUDA(index);
    return true;
  }
  fprintf(stderr, "loom: --device takes cpu, cuda or cuda:N, got '%s'\n", text ? text : "");
  return false;
}

/* One argument (and its value, for flags that take one); returns the number of
 * arguments used, or 0 on error. */
static int parse_bench_argument(bench_command *cmd, int argc, char **argv) {
  const char *arg = argv[0], *value = argc > 1 ? argv[1] : NULL;
  bool *switch_flag = strcmp(arg, "--json") == 0        ? &cmd->options.json
                      : strcmp(arg, "--peers") == 0     ? &cmd->options.peers
                      : strcmp(arg, "--list") == 0      ? &cmd->list_only
                      : strcmp(arg, "--no-limits") == 0 ? &cmd->skip_limits
                                                        : NULL;
  int *number_flag = strcmp(arg, "--repeats") == 0   ? &cmd->options.repeats
                     : strcmp(arg, "--warmup") == 0  ? &cmd->options.warmup
                     : strcmp(arg, "--threads") == 0 ? &cmd->requested_threads
                                                     : NULL;
  if (switch_flag) {
    *switch_flag = true;
    return 1;
  }
  if (strcmp(arg, "--device") == 0) return parse_device(value, &cmd->options.device) ? 2 : 0;
  int minimum = number_flag == &cmd->options.warmup ? 0 : 1;
  if (number_flag) return parse_count(arg, value, minimum, number_flag) ? 2 : 0;
  if (arg[0] == '-') {
    fprintf(stderr, "loom bench: unknown option '%s'\n", arg);
    return 0;
  }
  if (!bench_workload_find(arg)) {
    fprintf(stderr, "loom bench: no workload named '%s' (loom bench --list)\n", arg);
    return 0;
  }
  cmd->names[cmd->nnames++] = arg;
  return 1;
}

static bool parse_bench_command(bench_command *cmd, int argc, char **argv) {
  const char *peers_dir = getenv("LOOM_BENCH_PEERS_DIR");
  cmd->options = (bench_options){.repeats = DEFAULT_REPEATS,
                                 .warmup = DEFAULT_WARMUP,
                                 .peers_dir = peers_dir ? peers_dir : LOOM_BENCH_PEERS_DIR};
  cmd->names = calloc((size_t)argc + 1, sizeof *cmd->names);
  if (!cmd->names) return false;
  for (int i = 0; i < argc;) {
    int used = parse_bench_argument(cmd, argc - i, argv + i);
    if (used == 0) return false;
    i += used;
  }
  return true;
}

static void list_workloads(void) {
  for (int i = 0; i < bench_workload_count(); i++)
    printf("%-32s %s\n", bench_workload_at(i)->name, bench_workload_at(i)->what);
}

/* The workloads to run: the named ones, else all. */
/* The named workloads, or all; on a CUDA device those that run on the CPU only
 * are left out with a note. */
static int selected_workloads(const bench_command *cmd, const bench_workload **out, FILE *table) {
  bool device = cmd->options.device.type == LOOM_DEVICE_CUDA;
  int all = cmd->nnames == 0 ? bench_workload_count() : cmd->nnames, n = 0;
  for (int i = 0; i < all; i++) {
    const bench_workload *w =
        cmd->nnames == 0 ? bench_workload_at(i) : bench_workload_find(cmd->names[i]);
    if (device && w->cpu_only)
      fprintf(table, "%s: skipped, it runs on the CPU only\n", w->name);
    else if (w->dist && cmd->nnames == 0 && !loom_dist_initialized())
      fprintf(table, "%s: skipped, it runs under mpirun (name it to run it alone)\n", w->name);
    else if (w->onnx_model && cmd->nnames == 0 && !bench_model_present(w->onnx_model))
      fprintf(table, "%s: skipped, %s/%s/model.onnx is missing (tests/onnx_models/run.sh)\n",
              w->name, bench_models_dir(), w->onnx_model);
    else
      out[n++] = w;
  }
  return n;
}

static void run_peers_and_report(const bench_command *cmd, FILE *table, const bench_result *results,
                                 int n) {
  bench_peer_set peers;
  bench_run_peers(&cmd->options, cmd->names, cmd->nnames, &peers);
  bench_print_peers(table, &peers, results, n);
  if (cmd->options.json) bench_print_json_peers(stdout, &peers, results, n);
  bench_peer_set_free(&peers);
}

/* Runs the workloads; returns how many failed, or -1 when nothing could run. */
static int run_benchmarks(const bench_command *cmd) {
  FILE *table = cmd->options.json ? stderr : stdout;
  const bench_workload **workloads =
      calloc((size_t)bench_workload_count() + (size_t)cmd->nnames, sizeof *workloads);
  bench_result *results =
      calloc((size_t)bench_workload_count() + (size_t)cmd->nnames, sizeof *results);
  if (!workloads || !results) {
    free(workloads), free(results);
    return -1;
  }
  int n = selected_workloads(cmd, workloads, table), failed = 0;
  bench_limits limits = {.threads = cmd->options.threads};
  if (cmd->options.device.type == LOOM_DEVICE_CUDA)
    limits.device_gbs = loom_cuda_peak_bandwidth(cmd->options.device.index);
  else if (!cmd->skip_limits)
    limits = bench_measure_limits(cmd->options.threads);
  bench_print_table_header(table, &limits);
  if (cmd->options.json) bench_print_json_limits(stdout, &limits);
  for (int i = 0; i < n; i++) {
    results[i] = bench_run_workload(workloads[i], &cmd->options);
    failed += results[i].status != LOOM_OK;
    bench_print_table_row(table, &results[i], &limits);
    if (cmd->options.json) {
      bench_print_json_result(stdout, &results[i], &limits);
      fflush(stdout);
    }
  }
  bench_print_table_notes(table, results, n);
  if (cmd->options.peers && cmd->options.device.type == LOOM_DEVICE_CUDA)
    fprintf(table, "\npeers: skipped on a CUDA device (they run on the CPU)\n");
  else if (cmd->options.peers)
    run_peers_and_report(cmd, table, results, n);
  free(workloads), free(results);
  return failed;
}

/* Started by mpirun (Open MPI's, MPICH's or a PMIx launcher's variables):
 * every rank runs the workloads, rank 0 prints. */
static bool launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static int command_bench(int argc, char **argv) {
  bench_command cmd = {0};
  int exit_code = 2;
  if (launched_by_mpi()) {
    if (loom_dist_init(NULL, NULL) != LOOM_OK) {
      print_error("mpirun", loom_last_status());
      return 1;
    }
    if (loom_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) return 1;
  }
  if (parse_bench_command(&cmd, argc, argv)) {
    loom_status status =
        cmd.requested_threads ? loom_set_num_threads(cmd.requested_threads) : LOOM_OK;
    cmd.options.threads = loom_num_threads();
    loom_status on_device = loom_set_default_device(cmd.options.device);
    if (status != LOOM_OK) {
      print_error("--threads", status);
    } else if (on_device != LOOM_OK) {
      print_error("--device", on_device);
    } else if (cmd.list_only) {
      list_workloads();
      exit_code = 0;
    } else {
      exit_code = run_benchmarks(&cmd) == 0 ? 0 : 1;
    }
  }
  free(cmd.names);
  if (loom_dist_initialized()) loom_dist_finalize();
  return exit_code;
}

/* ------------------------------------------------------------------ export */

static bool is_onnx(const char *path);

static int command_export(int argc, char **argv) {
  const char *path = NULL, *name = NULL, *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
      name = argv[++i];
    else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
      out = argv[++i];
    else if (argv[i][0] != '-' && !path)
      path = argv[i];
    else {
      print_usage(stderr);
      return 2;
    }
  }
  if (!path || !name || !out) {
    print_usage(stderr);
    return 2;
  }
  loom_program *p = is_onnx(path) ? loom_onnx_load(path, NULL) : loom_program_load(path);
  if (!p) {
    print_error("export", loom_last_status());
    return 1;
  }
  loom_status st = loom_program_export(p, out, name);
  loom_program_free(p);
  if (st != LOOM_OK) {
    print_error("export", st);
    return 1;
  }
  printf("loom: wrote %s/lib%s.so and %s/%s.h\n", out, name, out, name);
  return 0;
}

/* ------------------------------------------------------------------ models */

/* A symbol's size from --dim NAME=N. */
typedef struct dim_value {
  const char *name; /* points into the argument */
  size_t name_len;
  int64_t value;
} dim_value;

static bool parse_dim_value(const char *text, dim_value *out) {
  const char *eq = text ? strchr(text, '=') : NULL;
  char *end = NULL;
  errno = 0;
  long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
  if (!eq || eq == text || !eq[1] || errno || *end || v < 1) {
    fprintf(stderr, "loom: --dim takes NAME=N with N >= 1, got '%s'\n", text ? text : "");
    return false;
  }
  *out = (dim_value){text, (size_t)(eq - text), v};
  return true;
}

static bool dim_named(const dim_value *d, const char *name) {
  return strlen(name) == d->name_len && strncmp(d->name, name, d->name_len) == 0;
}

/* The model at path, with the sizes --dim gave its symbols. A program file
 * (loom_program_save's) keeps its symbols: the names are checked here and
 * the sizes against the inputs when it runs. Model formats that fix their
 * dims when loaded join here. NULL after printing why. */
static bool is_onnx(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

/* An ONNX model with its --dim values fixed at import (loom_onnx_opts.dims). */
static loom_program *load_onnx(const char *command, const char *path, const dim_value *dims,
                               int ndims, loom_device device) {
  loom_onnx_dim *fixed = calloc((size_t)ndims + 1, sizeof *fixed);
  char **names = calloc((size_t)ndims + 1, sizeof *names);
  bool ok = fixed && names;
  for (int i = 0; ok && i < ndims; i++) {
    names[i] = strndup(dims[i].name, dims[i].name_len);
    fixed[i] = (loom_onnx_dim){names[i], dims[i].value};
    ok = names[i] != NULL;
  }
  loom_program *p =
      ok ? loom_onnx_load(path, &(loom_onnx_opts){.dims = fixed, .ndims = ndims, .device = device})
         : NULL;
  if (!p) print_error(command, ok ? loom_last_status() : LOOM_ERR_OOM);
  for (int i = 0; names && i < ndims; i++) free(names[i]);
  free(names), free(fixed);
  return p;
}

static loom_program *load_model(const char *command, const char *path, const dim_value *dims,
                                int ndims, loom_device device) {
  if (is_onnx(path)) return load_onnx(command, path, dims, ndims, device);
  if (device.type != LOOM_DEVICE_CPU) {
    fprintf(stderr,
            "loom: %s: --device: '%s' is a program file, which runs on the device it was "
            "compiled for; --device applies to ONNX models\n",
            command, path);
    return NULL;
  }
  loom_program *p = loom_program_load(path);
  if (!p) {
    print_error(command, loom_last_status());
    return NULL;
  }
  for (int i = 0; i < ndims; i++) {
    bool known = false;
    for (int s = 0; s < loom_program_num_symbols(p); s++)
      known |= dim_named(&dims[i], loom_program_symbol_name(p, s));
    if (known) continue;
    fprintf(stderr, "loom: %s: --dim %.*s: '%s' has no symbol of that name (", command,
            (int)dims[i].name_len, dims[i].name, path);
    if (loom_program_num_symbols(p) == 0) fprintf(stderr, "it has none: every size is fixed");
    for (int s = 0; s < loom_program_num_symbols(p); s++)
      fprintf(stderr, "%s%s", s ? ", " : "its symbols: ", loom_program_symbol_name(p, s));
    fprintf(stderr, ")\n");
    loom_program_free(p);
    return NULL;
  }
  return p;
}

/* "f32 [batch,3]": input (or output) i's dtype and dims, a symbolic dim by
 * what it follows. */
static const char *io_type(const loom_program *p, bool output, int i, char *buf, size_t len) {
  loom_shape s = output ? loom_program_output_shape(p, i) : loom_program_input_shape(p, i);
  loom_dtype dt = output ? loom_program_output_dtype(p, i) : loom_program_input_dtype(p, i);
  size_t used = (size_t)snprintf(buf, len, "%s [", loom_dtype_name(dt));
  for (int d = 0; d < s.ndim && used < len; d++) {
    char text[128];
    const char *sym = output ? lm_program_output_dim_text(p, i, d, text, sizeof text)
                             : loom_program_input_dim_symbol(p, i, d);
    if (!sym) snprintf(text, sizeof text, "%lld", (long long)s.dim[d]), sym = text;
    used += (size_t)snprintf(buf + used, len - used, "%s%s", d ? "," : "", sym);
  }
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

/* "f32 [2,3]": a tensor's dtype and shape. */
static const char *tensor_type(loom_tensor *t, char *buf, size_t len) {
  loom_shape s = loom_shape_of(t);
  size_t used = (size_t)snprintf(buf, len, "%s [", loom_dtype_name(loom_dtype_of(t)));
  for (int d = 0; d < s.ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? "," : "", (long long)s.dim[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

/* ------------------------------------------------------------------ run */

typedef struct run_command {
  const char *model, *output_dir;
  const char **inputs;
  int ninputs;
  dim_value *dims;
  int ndims;
  loom_device device; /* --device: where an ONNX model runs */
} run_command;

static bool parse_run_command(run_command *cmd, int argc, char **argv) {
  cmd->inputs = calloc((size_t)argc + 1, sizeof *cmd->inputs);
  cmd->dims = calloc((size_t)argc + 1, sizeof *cmd->dims);
  if (!cmd->inputs || !cmd->dims) return false;
  for (int i = 0; i < argc; i++) {
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--input") == 0 && value)
      cmd->inputs[cmd->ninputs++] = argv[++i];
    else if (strcmp(argv[i], "--dim") == 0 && value) {
      if (!parse_dim_value(argv[++i], &cmd->dims[cmd->ndims++])) return false;
    } else if (strcmp(argv[i], "--device") == 0 && value) {
      if (!parse_device(argv[++i], &cmd->device)) return false;
    } else if (strcmp(argv[i], "--output-dir") == 0 && value && !cmd->output_dir)
      cmd->output_dir = argv[++i];
    else if (argv[i][0] != '-' && !cmd->model)
      cmd->model = argv[i];
    else {
      fprintf(stderr, "loom run: unexpected argument '%s'\n", argv[i]);
      return false;
    }
  }
  if (!cmd->model || !cmd->output_dir) {
    fprintf(stderr, "loom run: needs a model and --output-dir DIR\n");
    return false;
  }
  return true;
}

/* Whether input i (read from file) fits what the program takes: its dtype,
 * rank and fixed dims, and the sizes --dim gave its symbolic dims. The run
 * checks the rest (symbols taking one size across inputs). */
static bool input_fits(const loom_program *p, const run_command *cmd, int i, loom_tensor *t) {
  loom_shape want = loom_program_input_shape(p, i), got = loom_shape_of(t);
  char wants[256], gots[256];
  io_type(p, false, i, wants, sizeof wants);
  tensor_type(t, gots, sizeof gots);
  bool fits = loom_dtype_of(t) == loom_program_input_dtype(p, i) && got.ndim == want.ndim;
  for (int d = 0; fits && d < want.ndim; d++) {
    const char *sym = loom_program_input_dim_symbol(p, i, d);
    fits = sym || got.dim[d] == want.dim[d];
    for (int k = 0; sym && k < cmd->ndims; k++)
      if (dim_named(&cmd->dims[k], sym) && got.dim[d] != cmd->dims[k].value) {
        fprintf(stderr,
                "loom run: input %d (%s) '%s' is %s: dim %d (symbol %s) is %lld, not the %lld of "
                "--dim %s=%lld\n",
                i, loom_program_input_name(p, i), cmd->inputs[i], gots, d, sym,
                (long long)got.dim[d], (long long)cmd->dims[k].value, sym,
                (long long)cmd->dims[k].value);
        return false;
      }
  }
  if (!fits)
    fprintf(stderr, "loom run: input %d (%s) '%s' is %s; the program takes %s\n", i,
            loom_program_input_name(p, i), cmd->inputs[i], gots, wants);
  return fits;
}

/* mkdir -p. */
static bool make_dir(const char *path) {
  char *copy = strdup(path);
  bool made = copy != NULL;
  for (char *c = copy ? copy + 1 : NULL; made && c && *c; c++)
    if (*c == '/') {
      *c = 0;
      made = mkdir(copy, 0777) == 0 || errno == EEXIST;
      *c = '/';
    }
  made = made && (mkdir(copy, 0777) == 0 || errno == EEXIST);
  struct stat info;
  if (made && (stat(path, &info) != 0 || !S_ISDIR(info.st_mode))) made = false, errno = ENOTDIR;
  if (!made)
    fprintf(stderr, "loom run: cannot make the directory '%s': %s\n", path, strerror(errno));
  free(copy);
  return made;
}

/* Reads the inputs, runs p, writes the outputs: the exit code. */
static int run_program(const loom_program *p, const run_command *cmd) {
  int nin = loom_program_num_inputs(p), nout = loom_program_num_outputs(p), code = 1;
  if (cmd->ninputs != nin) {
    fprintf(stderr, "loom run: '%s' takes %d input%s (", cmd->model, nin, nin == 1 ? "" : "s");
    for (int i = 0; i < nin; i++) {
      char type[256];
      fprintf(stderr, "%s%s %s", i ? ", " : "", loom_program_input_name(p, i),
              io_type(p, false, i, type, sizeof type));
    }
    fprintf(stderr, "), %d --input given\n", cmd->ninputs);
    return 2;
  }
  loom_tensor **ins = calloc((size_t)nin + 1, sizeof *ins);
  loom_tensor **outs = calloc((size_t)nout + 1, sizeof *outs);
  bool ready = ins && outs;
  for (int i = 0; ready && i < nin; i++) {
    ins[i] = loom_npy_read(cmd->inputs[i], cmd->device);
    if (!ins[i]) {
      char what[64];
      snprintf(what, sizeof what, "run: input %d (%s)", i, loom_program_input_name(p, i));
      print_error(what, loom_last_status());
    }
    ready = ins[i] && input_fits(p, cmd, i, ins[i]);
  }
  loom_status st = ready ? loom_program_run(p, ins, outs) : LOOM_OK;
  if (ready && st != LOOM_OK) print_error("run", st);
  if (ready && st == LOOM_OK && make_dir(cmd->output_dir)) {
    code = 0;
    for (int i = 0; i < nout && code == 0; i++) {
      char path[4096], type[256];
      snprintf(path, sizeof path, "%s/output_%d.npy", cmd->output_dir, i);
      if ((st = loom_npy_write(outs[i], path)) != LOOM_OK) {
        print_error("run", st);
        code = 1;
        break;
      }
      tensor_type(outs[i], type, sizeof type);
      printf("loom: wrote %s (%s %s)\n", path, loom_program_output_name(p, i), type);
    }
  }
  for (int i = 0; ins && i < nin; i++) loom_free(ins[i]);
  for (int i = 0; outs && i < nout; i++) loom_free(outs[i]);
  free(ins), free(outs);
  return code;
}

static int command_run(int argc, char **argv) {
  run_command cmd = {0};
  int code = 2;
  if (parse_run_command(&cmd, argc, argv)) {
    loom_program *p = load_model("run", cmd.model, cmd.dims, cmd.ndims, cmd.device);
    code = p ? run_program(p, &cmd) : 1;
    loom_program_free(p);
  } else {
    print_usage(stderr);
  }
  free(cmd.inputs), free(cmd.dims);
  return code;
}

/* ------------------------------------------------------------------ inspect */

/* The sections of `loom inspect`, each a heading with a count and its lines,
 * so that a model format holding what loom cannot run (ONNX's unsupported
 * nodes) adds a section of its own beside them. */
static void inspect_io(const loom_program *p) {
  char type[256];
  printf("inputs: %d\n", loom_program_num_inputs(p));
  for (int i = 0; i < loom_program_num_inputs(p); i++)
    printf("  %d  %-16s %s\n", i, loom_program_input_name(p, i),
           io_type(p, false, i, type, sizeof type));
  printf("outputs: %d\n", loom_program_num_outputs(p));
  for (int i = 0; i < loom_program_num_outputs(p); i++)
    printf("  %d  %-16s %s\n", i, loom_program_output_name(p, i),
           io_type(p, true, i, type, sizeof type));
  int nsym = loom_program_num_symbols(p);
  printf("symbols: %d%s", nsym, nsym ? " (" : "\n");
  for (int s = 0; s < nsym; s++) printf("%s%s", s ? ", " : "", loom_program_symbol_name(p, s));
  if (nsym) printf("; --dim NAME=N)\n");
}

static void inspect_graph(const lm_program_info *info) {
  printf("ops: %d kinds, %d nodes\n", info->nops, info->nodes);
  for (int i = 0; i < info->nops; i++) printf("  %-16s %d\n", info->ops[i].op, info->ops[i].count);
  printf("weights: %d tensors, %llu bytes\n", info->weights,
         (unsigned long long)info->weight_bytes);
}

/* The program's sections under heading; frees p. The command's exit code. */
static int inspect_program(loom_program *p, const char *heading) {
  lm_program_info info;
  loom_status st = lm_program_info_get("loom inspect", p, &info);
  if (st == LOOM_OK) {
    fputs(heading, stdout);
    inspect_io(p);
    inspect_graph(&info);
    lm_program_info_free(&info);
  } else {
    print_error("inspect", st);
  }
  loom_program_free(p);
  return st == LOOM_OK ? 0 : 1;
}

static int command_inspect(int argc, char **argv) {
  if (argc != 1 || argv[0][0] == '-') {
    print_usage(stderr);
    return 2;
  }
  if (is_onnx(argv[0])) {
    /* the file as it is, then the program loom makes of it, if it can */
    if (onnx_describe(argv[0], stdout) != LOOM_OK) return 1;
    loom_clear_error();
    loom_program *p = loom_onnx_load(argv[0], NULL);
    if (!p) {
      printf("as a loom program: not imported: %s\n", loom_last_error());
      return 0;
    }
    return inspect_program(p, "as a loom program:\n");
  }
  loom_program *p = load_model("inspect", argv[0], NULL, 0, LOOM_CPU);
  if (!p) return 1;
  char heading[4200];
  snprintf(heading, sizeof heading, "model: %s (a loom program)\n", argv[0]);
  return inspect_program(p, heading);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const char *command = argv[1];
  if (strcmp(command, "info") == 0 && argc == 2) return command_info();
  if (strcmp(command, "cache") == 0) return command_cache(argc - 2, argv + 2);
  if (strcmp(command, "bench") == 0) return command_bench(argc - 2, argv + 2);
  if (strcmp(command, "export") == 0) return command_export(argc - 2, argv + 2);
  if (strcmp(command, "run") == 0) return command_run(argc - 2, argv + 2);
  if (strcmp(command, "inspect") == 0) return command_inspect(argc - 2, argv + 2);
  if (strcmp(command, "__bench-child") == 0) return bench_child_main(argc - 2, argv + 2);
  if (strcmp(command, "help") == 0 || strcmp(command, "--help") == 0 ||
      strcmp(command, "-h") == 0) {
    print_usage(stdout);
    return 0;
  }
  print_usage(stderr);
  return 2;
}
