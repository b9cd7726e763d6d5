/* The peers: the same workloads in NumPy, PyTorch, ONNX Runtime, JAX and OpenVINO
 * (bench/peers/NAME_bench.py); their JSON lines are parsed and set beside loom's
 * times, with loom's ratio to the best of them per workload. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "runtime/blas.h"

#define MAX_ARGS 64

/* Which Python runs a script: Debian's (python3-numpy, python3-torch 1.13), the
 * project's .venv (tools/setup.sh: ONNX Runtime) or .venv-peers (bench/peers/setup.sh:
 * PyTorch 2, JAX, OpenVINO; outside the test command, about 6 GB). The venvs are
 * two folders above the peers' scripts. */
typedef enum peer_python { PY_DEBIAN, PY_VENV, PY_VENV_PEERS } peer_python;

typedef struct peer_script {
  const char *peer; /* the name its skipped lines carry */
  const char *script;
  peer_python python;
  const char *env[2];  /* settings beside the threads', or NULL */
  const char *args[4]; /* before the workloads' names */
  bool fit_core;       /* gets the OpenBLAS core that fits the CPU (below) */
} peer_script;

/* The "tuned" environment: glibc's huge-page malloc (most of PyTorch's default
 * time is page faults on fresh temporaries) and OpenMP threads that sleep
 * instead of spinning between ops (OMP_WAIT_POLICY=PASSIVE: on two cores the
 * spinning threads starve the next op). Debian's PyTorch runs as installed and
 * tuned, the tuned run also with OPENBLAS_CORETYPE set to the core that fits
 * the CPU when the one in force is narrower (an OPENBLAS_CORETYPE=Haswell in
 * the environment of an AVX-512 machine; bench_run_peers). The peers of
 * .venv-peers run with the huge-page malloc alone: measured on the 2-vCPU
 * EPYC, it made JAX's CNN step 1.7x faster and PyPI's PyTorch eager about 10%
 * (Inductor's code and OpenVINO: no change), while PASSIVE made PyPI's PyTorch
 * (oneDNN, MKL, Inductor's OpenMP kernels) 10-25% slower. PyTorch 2 runs
 * eager, and each workload under torch.compile in Inductor's two modes. The
 * scripts name these settings in their variants. */
#define HUGETLB "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
#define TUNED_ENV                                                                                  \
  { HUGETLB, "OMP_WAIT_POLICY=PASSIVE" }
static const peer_script peer_scripts[] = {
    {"numpy", "numpy_bench.py", PY_DEBIAN, {NULL}, {NULL}, false},
    {"torch", "torch_bench.py", PY_DEBIAN, {NULL}, {NULL}, false},
    {"torch", "torch_bench.py", PY_DEBIAN, TUNED_ENV, {NULL}, true},
    {"ort", "ort_bench.py", PY_VENV, {NULL}, {NULL}, false},
    {"torch2", "torch_bench.py", PY_VENV_PEERS, {HUGETLB}, {"--peer", "torch2"}, false},
    {"torch2",
     "torch_bench.py",
     PY_VENV_PEERS,
     {HUGETLB},
     {"--peer", "torch2", "--compile", "default"},
     false},
    {"torch2",
     "torch_bench.py",
     PY_VENV_PEERS,
     {HUGETLB},
     {"--peer", "torch2", "--compile", "max-autotune"},
     false},
    {"jax", "jax_bench.py", PY_VENV_PEERS, {HUGETLB}, {NULL}, false},
    {"openvino", "ov_bench.py", PY_VENV_PEERS, {HUGETLB}, {NULL}, false},
};
#define NUM_PEERS ((int)(sizeof peer_scripts / sizeof peer_scripts[0]))
#define VENV_PEERS_NAMES "torch2, jax, openvino"
#define SKIPPED_MAX                                                                                \
  ((int)(sizeof((bench_peer_set *)0)->skipped / sizeof((bench_peer_set *)0)->skipped[0]))

/* One line per reason: the tuned and untuned runs of a script report the same. */
static void add_skipped(bench_peer_set *set, const char *peer, const char *reason) {
  char line[sizeof set->skipped[0]];
  snprintf(line, sizeof line, "%.40s: %.270s", peer, reason);
  for (int i = 0; i < set->nskipped; i++)
    if (strcmp(set->skipped[i], line) == 0) return;
  if (set->nskipped >= SKIPPED_MAX) return;
  memcpy(set->skipped[set->nskipped++], line, sizeof line);
}

static bool copy_string_field(json_t *o, const char *key, char *dst, size_t size) {
  const char *s = json_string_value(json_object_get(o, key));
  if (!s) return false;
  snprintf(dst, size, "%s", s);
  return true;
}

static void add_timing(bench_peer_set *set, json_t *o) {
  bench_peer_timing t;
  json_t *seconds = json_object_get(o, "seconds");
  if (!copy_string_field(o, "peer", t.peer, sizeof t.peer) ||
      !copy_string_field(o, "workload", t.workload, sizeof t.workload) ||
      !copy_string_field(o, "variant", t.variant, sizeof t.variant) || !json_is_number(seconds))
    return;
  t.seconds = json_number_value(seconds);
  bench_peer_timing *bigger = realloc(set->timings, (size_t)(set->count + 1) * sizeof t);
  if (!bigger) return;
  set->timings = bigger;
  set->timings[set->count++] = t;
}

/* One JSON object per line: a timing, or {"peer": ..., "skipped": reason}. */
void bench_parse_peer_output(bench_peer_set *set, const char *peer, char *output) {
  char *saved = NULL;
  for (char *line = strtok_r(output, "\n", &saved); line; line = strtok_r(NULL, "\n", &saved)) {
    json_t *o = json_loads(line, 0, NULL);
    if (!json_is_object(o)) {
      json_decref(o);
      continue;
    }
    const char *skipped = json_string_value(json_object_get(o, "skipped"));
    if (skipped)
      add_skipped(set, peer, skipped);
    else
      add_timing(set, o);
    json_decref(o);
  }
}

/* The Python that runs a script; false when missing (why says so). */
static bool peer_python_path(const bench_options *opts, peer_python python, char *path, size_t size,
                             char *why, size_t why_size) {
  static const char *const venvs[] = {[PY_VENV] = ".venv", [PY_VENV_PEERS] = ".venv-peers"};
  if (python == PY_DEBIAN)
    snprintf(path, size, "/usr/bin/python3");
  else
    snprintf(path, size, "%s/../../%s/bin/python", opts->peers_dir, venvs[python]);
  if (access(path, X_OK) == 0) return true;
  snprintf(why, why_size, "%.180s not found%s", path,
           python == PY_VENV         ? " (tools/setup.sh makes .venv)"
           : python == PY_VENV_PEERS ? ": bash bench/peers/setup.sh installs PyTorch 2, JAX and "
                                       "OpenVINO into .venv-peers (about 6 GB)"
                                     : "");
  return false;
}

static void run_one_peer(const bench_options *opts, const char *const *names, int n,
                         const peer_script *ps, const char *core, bench_peer_set *set) {
  char path[4096], repeats[16], warmup[16], threads[16], omp[48], openblas[48], mkl[48];
  char python[4200], models[4200], why[320];
  if (!peer_python_path(opts, ps->python, python, sizeof python, why, sizeof why)) {
    add_skipped(set, ps->python == PY_VENV_PEERS ? VENV_PEERS_NAMES : ps->peer, why);
    return;
  }
  snprintf(path, sizeof path, "%s/%s", opts->peers_dir, ps->script);
  if (access(path, R_OK) != 0) {
    snprintf(why, sizeof why, "%.180s not found", path);
    add_skipped(set, ps->peer, why);
    return;
  }
  snprintf(models, sizeof models, "LOOM_BENCH_MODELS_DIR=%s", bench_models_dir());
  snprintf(repeats, sizeof repeats, "%d", opts->repeats);
  snprintf(warmup, sizeof warmup, "%d", opts->warmup);
  snprintf(threads, sizeof threads, "%d", opts->threads);
  const char *argv[MAX_ARGS] = {python,     path,   "--repeats", repeats,
                                "--warmup", warmup, "--threads", threads};
  int argc = 8;
  for (int i = 0; i < 4 && ps->args[i]; i++) argv[argc++] = ps->args[i];
  for (int i = 0; i < n && argc < MAX_ARGS - 1; i++) argv[argc++] = names[i];
  argv[argc] = NULL;
  snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%d", opts->threads);
  snprintf(openblas, sizeof openblas, "OPENBLAS_NUM_THREADS=%d", opts->threads);
  snprintf(mkl, sizeof mkl, "MKL_NUM_THREADS=%d", opts->threads);
  const char *env[8] = {omp, openblas, mkl, models};
  int nenv = 4;
  for (int i = 0; i < 2; i++)
    if (ps->env[i]) env[nenv++] = ps->env[i];
  if (ps->fit_core && core[0]) env[nenv++] = core;
  env[nenv] = NULL;
  char *output = NULL;
  int status = bench_run_process(argv, env, &output);
  if (output) bench_parse_peer_output(set, ps->peer, output);
  if (status != 0) add_skipped(set, ps->peer, "the script failed (see its messages above)");
  free(output);
}

void bench_run_peers(const bench_options *opts, const char *const *names, int n,
                     bench_peer_set *set) {
  memset(set, 0, sizeof *set);
  char core[64] = "";
  const char *fit = lm_blas_core_fitting(lm_cpu_flags_host());
  if (fit && lm_blas_narrow_here()) snprintf(core, sizeof core, "OPENBLAS_CORETYPE=%s", fit);
  for (int p = 0; p < NUM_PEERS; p++) run_one_peer(opts, names, n, &peer_scripts[p], core, set);
}

void bench_peer_set_free(bench_peer_set *set) {
  free(set->timings);
  memset(set, 0, sizeof *set);
}

/* ------------------------------------------------------------------ report */

static double loom_seconds_for(const char *workload, const bench_result *results, int n) {
  for (int i = 0; i < n; i++)
    if (results[i].status == LOOM_OK && strcmp(results[i].workload->name, workload) == 0)
      return results[i].median_s;
  return 0.0;
}

/* "loom 3.20x faster", "loom 1.50x slower" */
static const char *verdict(double loom_s, double peer_s, char *buf, size_t size) {
  if (loom_s <= 0.0 || peer_s <= 0.0)
    snprintf(buf, size, "-");
  else if (peer_s >= loom_s)
    snprintf(buf, size, "loom %.2fx faster", peer_s / loom_s);
  else
    snprintf(buf, size, "loom %.2fx slower", loom_s / peer_s);
  return buf;
}

const bench_peer_timing *bench_best_peer(const bench_peer_set *set, const char *workload) {
  const bench_peer_timing *best = NULL;
  for (int i = 0; i < set->count; i++) {
    const bench_peer_timing *t = &set->timings[i];
    if (t->seconds > 0.0 && strcmp(t->workload, workload) == 0 &&
        (!best || t->seconds < best->seconds))
      best = t;
  }
  return best;
}

#define PEER_ROW "%-32s %-8s %-40s %10s %10s  %s\n"

static void print_peer_row(FILE *out, const char *workload, const char *peer, const char *variant,
                           double peer_s, double loom_s) {
  char peer_time[32], loom_time[32], ratio[48];
  fprintf(out, PEER_ROW, workload, peer, variant,
          bench_format_seconds(peer_s, peer_time, sizeof peer_time),
          bench_format_seconds(loom_s, loom_time, sizeof loom_time),
          verdict(loom_s, peer_s, ratio, sizeof ratio));
}

/* Grouped by workload, in the order loom ran them; then loom against the best
 * (fastest) peer of each workload. */
void bench_print_peers(FILE *out, const bench_peer_set *set, const bench_result *results, int n) {
  fprintf(out, "\npeers (median per call, same sizes and threads)\n");
  fprintf(out, PEER_ROW, "workload", "peer", "variant", "peer", "loom", "ratio");
  for (int r = 0; r < n; r++) {
    const char *name = results[r].workload->name;
    double loom_s = loom_seconds_for(name, results, n);
    for (int i = 0; i < set->count; i++) {
      const bench_peer_timing *t = &set->timings[i];
      if (strcmp(t->workload, name) == 0)
        print_peer_row(out, name, t->peer, t->variant, t->seconds, loom_s);
    }
  }
  bool any = false;
  for (int r = 0; r < n; r++) {
    const char *name = results[r].workload->name;
    const bench_peer_timing *best = bench_best_peer(set, name);
    if (!best) continue;
    if (!any)
      fprintf(out, "\nloom against the best peer (the fastest of the rows above)\n" PEER_ROW,
              "workload", "peer", "variant", "best", "loom", "ratio");
    any = true;
    print_peer_row(out, name, best->peer, best->variant, best->seconds,
                   loom_seconds_for(name, results, n));
  }
  for (int i = 0; i < set->nskipped; i++) fprintf(out, "skipped %s\n", set->skipped[i]);
}

static void print_json_peer(FILE *out, const char *kind, const bench_peer_timing *t,
                            double loom_s) {
  json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:f}", "kind", kind, "peer", t->peer, "workload",
                        t->workload, "variant", t->variant, "seconds", t->seconds);
  if (o && loom_s > 0.0) {
    json_object_set_new(o, "loom_s", json_real(loom_s));
    json_object_set_new(o, "peer_over_loom", json_real(t->seconds / loom_s));
  }
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  if (text) fprintf(out, "%s\n", text);
  free(text);
  json_decref(o);
}

/* A "peer" line per timing, a "peer_best" line per workload loom ran that has
 * a peer (its fastest), a "peer_skipped" line per reason. */
void bench_print_json_peers(FILE *out, const bench_peer_set *set, const bench_result *results,
                            int n) {
  for (int i = 0; i < set->count; i++) {
    const bench_peer_timing *t = &set->timings[i];
    print_json_peer(out, "peer", t, loom_seconds_for(t->workload, results, n));
  }
  for (int r = 0; r < n; r++) {
    const char *name = results[r].workload->name;
    const bench_peer_timing *best = bench_best_peer(set, name);
    if (best) print_json_peer(out, "peer_best", best, loom_seconds_for(name, results, n));
  }
  for (int i = 0; i < set->nskipped; i++) {
    json_t *o = json_pack("{s:s, s:s}", "kind", "peer_skipped", "reason", set->skipped[i]);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text) fprintf(out, "%s\n", text);
    free(text);
    json_decref(o);
  }
}
