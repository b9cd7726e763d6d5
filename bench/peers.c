/* The peers: the same workloads in NumPy, PyTorch and ONNX Runtime
 * (bench/peers/numpy_bench.py, torch_bench.py, ort_bench.py); their JSON lines are
 * parsed and set beside loom's times. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "runtime/blas.h"

#define PYTHON "/usr/bin/python3"
#define MAX_ARGS 64

/* PyTorch runs twice: as installed, and "tuned": glibc's huge-page malloc (most
 * of its default time is page faults on fresh temporaries), OpenMP threads
 * that sleep instead of spinning between ops (OMP_WAIT_POLICY=PASSIVE: on two
 * cores the spinning threads starve the next op) and, when the OpenBLAS core
 * in force here is narrower than the CPU (an OPENBLAS_CORETYPE=Haswell in the
 * environment of an AVX-512 machine), OPENBLAS_CORETYPE set to the core that
 * fits it (bench_run_peers). The script marks the tuned run's variants. */
static const char *const peer_scripts[][4] = {
    {"numpy", "numpy_bench.py", NULL, NULL},
    {"torch", "torch_bench.py", NULL, NULL},
    {"torch", "torch_bench.py", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "OMP_WAIT_POLICY=PASSIVE"},
    {"ort", "ort_bench.py", NULL, NULL},
};
/* The peers run with Debian's Python, but ONNX Runtime, from PyPI, with the
 * project's .venv (tools/requirements.txt pins it), two folders above the
 * peers' scripts. */
#define VENV_PEER "ort"
#define TUNED 2 /* the peer_scripts row that gets the fitting core */
#define NUM_PEERS ((int)(sizeof peer_scripts / sizeof peer_scripts[0]))

static void add_skipped(bench_peer_set *set, const char *peer, const char *reason) {
  if (set->nskipped >= (int)(sizeof set->skipped / sizeof set->skipped[0])) return;
  snprintf(set->skipped[set->nskipped++], sizeof set->skipped[0], "%.16s: %.230s", peer, reason);
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
static void parse_peer_output(bench_peer_set *set, const char *peer, char *output) {
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

static void run_one_peer(const bench_options *opts, const char *const *names, int n,
                         const char *peer, const char *script, const char *const tuning[3],
                         bench_peer_set *set) {
  char path[4096], repeats[16], warmup[16], threads[16], omp[48], openblas[48], mkl[48];
  char python[4200], models[4200];
  snprintf(path, sizeof path, "%s/%s", opts->peers_dir, script);
  if (strcmp(peer, VENV_PEER) == 0)
    snprintf(python, sizeof python, "%s/../../.venv/bin/python", opts->peers_dir);
  else
    snprintf(python, sizeof python, "%s", PYTHON);
  if (access(python, X_OK) != 0 || access(path, R_OK) != 0) {
    char why[240];
    snprintf(why, sizeof why, "%.180s not found%s", access(python, X_OK) != 0 ? python : path,
             strcmp(peer, VENV_PEER) == 0 ? " (tools/setup.sh makes .venv)" : "");
    add_skipped(set, peer, why);
    return;
  }
  snprintf(models, sizeof models, "LOOM_BENCH_MODELS_DIR=%s", bench_models_dir());
  snprintf(repeats, sizeof repeats, "%d", opts->repeats);
  snprintf(warmup, sizeof warmup, "%d", opts->warmup);
  snprintf(threads, sizeof threads, "%d", opts->threads);
  const char *argv[MAX_ARGS] = {python,     path,   "--repeats", repeats,
                                "--warmup", warmup, "--threads", threads};
  int argc = 8;
  for (int i = 0; i < n && argc < MAX_ARGS - 1; i++) argv[argc++] = names[i];
  argv[argc] = NULL;
  snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%d", opts->threads);
  snprintf(openblas, sizeof openblas, "OPENBLAS_NUM_THREADS=%d", opts->threads);
  snprintf(mkl, sizeof mkl, "MKL_NUM_THREADS=%d", opts->threads);
  const char *env[] = {omp, openblas, mkl, models, tuning[0], tuning[1], tuning[2], NULL};
  char *output = NULL;
  int status = bench_run_process(argv, env, &output);
  if (output) parse_peer_output(set, peer, output);
  if (status != 0) add_skipped(set, peer, "the script failed (see its messages above)");
  free(output);
}

void bench_run_peers(const bench_options *opts, const char *const *names, int n,
                     bench_peer_set *set) {
  memset(set, 0, sizeof *set);
  char core[64] = "";
  const char *fit = lm_blas_core_fitting(lm_cpu_flags_host());
  if (fit && lm_blas_narrow_here()) snprintf(core, sizeof core, "OPENBLAS_CORETYPE=%s", fit);
  for (int p = 0; p < NUM_PEERS; p++) {
    const char *tuning[3] = {peer_scripts[p][2], peer_scripts[p][3], NULL};
    if (p == TUNED && core[0]) tuning[2] = core;
    run_one_peer(opts, names, n, peer_scripts[p][0], peer_scripts[p][1], tuning, set);
  }
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

static void print_peer_row(FILE *out, const bench_peer_timing *t, double loom_s) {
  char peer_time[32], loom_time[32], ratio[48];
  fprintf(out, "%-32s %-6s %-18s %10s %10s  %s\n", t->workload, t->peer, t->variant,
          bench_format_seconds(t->seconds, peer_time, sizeof peer_time),
          bench_format_seconds(loom_s, loom_time, sizeof loom_time),
          verdict(loom_s, t->seconds, ratio, sizeof ratio));
}

/* Grouped by workload, in the order loom ran them. */
void bench_print_peers(FILE *out, const bench_peer_set *set, const bench_result *results, int n) {
  fprintf(out, "\npeers (median per call, same sizes and threads)\n");
  fprintf(out, "%-32s %-6s %-18s %10s %10s  %s\n", "workload", "peer", "variant", "peer", "loom",
          "ratio");
  for (int r = 0; r < n; r++) {
    const char *name = results[r].workload->name;
    double loom_s = loom_seconds_for(name, results, n);
    for (int i = 0; i < set->count; i++)
      if (strcmp(set->timings[i].workload, name) == 0)
        print_peer_row(out, &set->timings[i], loom_s);
  }
  for (int i = 0; i < set->nskipped; i++) fprintf(out, "skipped %s\n", set->skipped[i]);
}

void bench_print_json_peers(FILE *out, const bench_peer_set *set, const bench_result *results,
                            int n) {
  for (int i = 0; i < set->count; i++) {
    const bench_peer_timing *t = &set->timings[i];
    double loom_s = loom_seconds_for(t->workload, results, n);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:f}", "kind", "peer", "peer", t->peer, "workload",
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
  for (int i = 0; i < set->nskipped; i++) {
    json_t *o = json_pack("{s:s, s:s}", "kind", "peer_skipped", "reason", set->skipped[i]);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text) fprintf(out, "%s\n", text);
    free(text);
    json_decref(o);
  }
}
