/* Compilation workloads: one fused kernel compiled cold, and a graph whose
 * kernels are in the disk cache but not in memory (a fresh process). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ftw.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define COLD_N 1024
#define CHILD_ROWS 256
#define CHILD_COLS 512
#define CHILD_COMMAND "compile-disk"

/* ------------------------------------------------------------------ compile_cold */

typedef struct cold_state {
  loom_tensor *x;
  double base_constant; /* differs between processes, so the disk cache never has it */
  uint64_t variant;     /* likewise: picks the folded constants that make the kernel new */
  int calls;
  uint64_t kernels_compiled;
  uint64_t compile_ns;
} cold_state;

static uint64_t process_unique_bits(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t mix = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
  return (mix ^ (mix >> 31)) * 0x9e3779b97f4a7c15u;
}

static loom_status cold_setup(void **state) {
  cold_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  s->variant = process_unique_bits();
  s->base_constant = 1.0 + (double)(s->variant % 1000000u) * 1e-6;
  loom_status status = bench_uniform_input(7, LOOM_SHAPE(COLD_N), -1.0, 1.0, &s->x);
  if (status != LOOM_OK) {
    free(s);
    return status;
  }
  *state = s;
  return LOOM_OK;
}

/* (tanh(x*c + 0.25) * sigmoid(x - c) + a) * b: one fused kernel, new per call.
 * c is a parameter (a kernel serves every value of it); a and b, small
 * integers, are folded into the code: a new pair is a new kernel. */
static loom_status cold_run(void *state, bench_call_report *report) {
  (void)report;
  cold_state *s = state;
  double c = s->base_constant + 1e-3 * s->calls;
  uint64_t v = s->variant + (uint64_t)s->calls++ * 0x9e3779b97f4a7c15u;
  double a = (double)(2 + (v >> 8) % 60000), b = (double)(2 + (v >> 32) % 60000);
  loom_stats before = loom_get_stats();
  /* specialized: a shape-generic kernel (loom_set_dynamic) would read a and b
   * at run time after two calls, and nothing would compile */
  loom_dynamic dynamic = loom_dynamic_mode();
  loom_set_dynamic(LOOM_DYNAMIC_OFF);
  loom_scope_begin();
  loom_tensor *out =
      loom_mul_s(loom_add_s(loom_mul(loom_tanh(loom_add_s(loom_mul_s(s->x, c), 0.25)),
                                     loom_sigmoid(loom_sub_s(s->x, c))),
                            a),
                 b);
  loom_status status = bench_realize(out); /* before the scope ends: it frees out */
  status = bench_first_error(status, loom_scope_end());
  loom_set_dynamic(dynamic);
  loom_stats after = loom_get_stats();
  s->kernels_compiled += after.kernels_compiled - before.kernels_compiled;
  s->compile_ns += after.compile_ns - before.compile_ns;
  return status;
}

static void cold_describe(void *state, char *buf, size_t size) {
  cold_state *s = state;
  int calls = s->calls > 0 ? s->calls : 1;
  snprintf(buf, size, "%.2f kernels compiled per call, backend compile time %.2f ms per call",
           (double)s->kernels_compiled / calls, (double)s->compile_ns * 1e-6 / calls);
}

static void cold_teardown(void *state) {
  cold_state *s = state;
  if (!s) return;
  loom_free(s->x);
  free(s);
}

/* ------------------------------------------------------------------ the child process */

/* The graph the children realize: softmax, then a normalization (several kernels). */
static loom_tensor *build_child_graph(const loom_tensor *x) {
  static const int last_axis[1] = {-1};
  loom_tensor *h = loom_softmax(loom_mul_s(x, 0.5), -1);
  loom_tensor *centered = loom_sub(h, loom_mean(h, last_axis, 1, true));
  loom_tensor *variance = loom_mean(loom_square(centered), last_axis, 1, true);
  return loom_mul(centered, loom_rsqrt(loom_add_s(variance, 1e-5)));
}

static loom_tensor *child_input(void) {
  size_t count = (size_t)CHILD_ROWS * CHILD_COLS;
  float *data = malloc(count * sizeof *data);
  if (!data) return NULL;
  for (size_t i = 0; i < count; i++) data[i] = (float)(i % 97) * 0.01f;
  loom_tensor *x = loom_from_data(data, LOOM_SHAPE(CHILD_ROWS, CHILD_COLS), LOOM_F32, LOOM_CPU);
  free(data);
  return x;
}

/* Realizes a trivial graph first, so the timed realize excludes the JIT's own
 * start-up; its time is reported apart. */
static loom_status child_startup(const loom_tensor *x, double *seconds) {
  double t0 = bench_now();
  loom_scope_begin();
  loom_status status = bench_realize(loom_add_s(x, 1.0));
  status = bench_first_error(status, loom_scope_end());
  *seconds = bench_now() - t0;
  return status;
}

static void print_child_report(double seconds, double startup_seconds, loom_stats before,
                               loom_stats after) {
  json_t *o = json_pack(
      "{s:f, s:f, s:I, s:I, s:I, s:I, s:I}", "seconds", seconds, "startup_seconds", startup_seconds,
      "kernels_compiled", (json_int_t)(after.kernels_compiled - before.kernels_compiled),
      "disk_cache_hits", (json_int_t)(after.disk_cache_hits - before.disk_cache_hits),
      "kernel_cache_hits", (json_int_t)(after.kernel_cache_hits - before.kernel_cache_hits),
      "kernels_launched", (json_int_t)(after.kernels_launched - before.kernels_launched),
      "gemm_calls", (json_int_t)(after.gemm_calls - before.gemm_calls));
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  if (text) printf("%s\n", text);
  free(text);
  json_decref(o);
}

static loom_status child_realize_and_report(void) {
  loom_tensor *x = child_input();
  if (!x) return LOOM_ERR_OOM;
  double startup_seconds = 0.0;
  loom_status status = child_startup(x, &startup_seconds);
  if (status == LOOM_OK) {
    loom_scope_begin();
    loom_tensor *out = build_child_graph(x);
    loom_stats before = loom_get_stats();
    double t0 = bench_now();
    status = bench_realize(out);
    double seconds = bench_now() - t0;
    loom_stats after = loom_get_stats();
    status = bench_first_error(status, loom_scope_end());
    if (status == LOOM_OK) print_child_report(seconds, startup_seconds, before, after);
  }
  loom_free(x);
  return status;
}

int bench_child_main(int argc, char **argv) {
  if (argc < 1 || strcmp(argv[0], CHILD_COMMAND) != 0) {
    fprintf(stderr, "loom __bench-child: expected '%s'\n", CHILD_COMMAND);
    return 2;
  }
  if (argc >= 3 && strcmp(argv[1], "--threads") == 0 &&
      loom_set_num_threads(atoi(argv[2])) != LOOM_OK) {
    fprintf(stderr, "loom __bench-child: %s\n", loom_last_error());
    return 1;
  }
  loom_status status = child_realize_and_report();
  if (status != LOOM_OK) {
    const char *message = loom_last_error();
    fprintf(stderr, "loom __bench-child: %s: %s\n", loom_status_name(status),
            message ? message : "(no message)");
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ compile_disk */

typedef struct disk_state {
  char cache_dir[64];
  char self_exe[4096];
  double compile_child_seconds;
  uint64_t compile_child_kernels;
  double startup_seconds_sum;
  int loads;
} disk_state;

typedef struct child_report {
  double seconds, startup_seconds;
  loom_stats stats;
} child_report;

static bool json_number_field(json_t *o, const char *key, double *value) {
  json_t *v = json_object_get(o, key);
  if (!json_is_number(v)) return false;
  *value = json_number_value(v);
  return true;
}

/* Parses the child's last output line into r. */
static bool parse_child_report(const char *output, child_report *r) {
  const char *line = strrchr(output, '{');
  json_t *o = line ? json_loads(line, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
  double compiled = 0, disk = 0, memory = 0, launched = 0, gemm = 0;
  bool ok = o && json_number_field(o, "seconds", &r->seconds) &&
            json_number_field(o, "startup_seconds", &r->startup_seconds) &&
            json_number_field(o, "kernels_compiled", &compiled) &&
            json_number_field(o, "disk_cache_hits", &disk) &&
            json_number_field(o, "kernel_cache_hits", &memory) &&
            json_number_field(o, "kernels_launched", &launched) &&
            json_number_field(o, "gemm_calls", &gemm);
  json_decref(o);
  memset(&r->stats, 0, sizeof r->stats);
  r->stats.kernels_compiled = (uint64_t)compiled;
  r->stats.disk_cache_hits = (uint64_t)disk;
  r->stats.kernel_cache_hits = (uint64_t)memory;
  r->stats.kernels_launched = (uint64_t)launched;
  r->stats.gemm_calls = (uint64_t)gemm;
  r->stats.realizations = 1;
  return ok;
}

static loom_status run_child(const disk_state *s, child_report *r) {
  char threads[16], cache_env[128];
  snprintf(threads, sizeof threads, "%d", loom_num_threads());
  snprintf(cache_env, sizeof cache_env, "LOOM_CACHE_DIR=%s", s->cache_dir);
  const char *argv[] = {s->self_exe, "__bench-child", CHILD_COMMAND, "--threads", threads, NULL};
  const char *env[] = {cache_env, NULL};
  char *output = NULL;
  int exit_status = bench_run_process(argv, env, &output);
  bool ok = exit_status == 0 && output && parse_child_report(output, r);
  free(output);
  if (!ok)
    fprintf(stderr, "compile_disk: the child process failed (exit status %d)\n", exit_status);
  return ok ? LOOM_OK : LOOM_ERR_INTERNAL;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static loom_status disk_prepare(disk_state *s) {
  ssize_t len = readlink("/proc/self/exe", s->self_exe, sizeof s->self_exe - 1);
  if (len <= 0) return LOOM_ERR_IO;
  s->self_exe[len] = 0;
  snprintf(s->cache_dir, sizeof s->cache_dir, "/tmp/loom-bench-cache-XXXXXX");
  return mkdtemp(s->cache_dir) ? LOOM_OK : LOOM_ERR_IO;
}

/* A first child compiles the graph into a fresh, private disk cache. */
static loom_status disk_setup(void **state) {
  disk_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  loom_status status = disk_prepare(s);
  child_report compiled = {0};
  if (status == LOOM_OK) status = run_child(s, &compiled);
  if (status == LOOM_OK && compiled.stats.kernels_compiled == 0) {
    fprintf(stderr, "compile_disk: the compiling child compiled nothing\n");
    status = LOOM_ERR_INTERNAL;
  }
  if (status != LOOM_OK) {
    if (s->cache_dir[0] && !strstr(s->cache_dir, "XXXXXX")) remove_tree(s->cache_dir);
    free(s);
    return status;
  }
  s->compile_child_seconds = compiled.seconds;
  s->compile_child_kernels = compiled.stats.kernels_compiled;
  *state = s;
  return LOOM_OK;
}

/* A fresh child realizes the same graph: its kernels come from the disk cache. */
static loom_status disk_run(void *state, bench_call_report *report) {
  disk_state *s = state;
  child_report r;
  loom_status status = run_child(s, &r);
  if (status != LOOM_OK) return status;
  report->has_seconds = true;
  report->seconds = r.seconds;
  report->has_stats = true;
  report->stats = r.stats;
  s->startup_seconds_sum += r.startup_seconds;
  s->loads++;
  return LOOM_OK;
}

static void disk_describe(void *state, char *buf, size_t size) {
  disk_state *s = state;
  snprintf(buf, size,
           "the same graph compiled cold in a child: %.2f ms (%llu kernels); "
           "first realize in a fresh process (JIT start-up): %.2f ms",
           s->compile_child_seconds * 1e3, (unsigned long long)s->compile_child_kernels,
           s->loads ? s->startup_seconds_sum * 1e3 / s->loads : 0.0);
}

static void disk_teardown(void *state) {
  disk_state *s = state;
  if (!s) return;
  remove_tree(s->cache_dir);
  free(s);
}

const bench_workload bench_compile_workloads[] = {
    {
        .name = "compile_cold",
        .what = "realize one fused elementwise kernel never compiled before (new constant)",
        .metric = BENCH_COMPILE,
        .setup = cold_setup,
        .run = cold_run,
        .teardown = cold_teardown,
        .cpu_only = true,
        .describe = cold_describe,
    },
    {
        .name = "compile_disk",
        .what = "realize a graph whose kernels are on disk, in a fresh child process",
        .metric = BENCH_COMPILE,
        .setup = disk_setup,
        .run = disk_run,
        .teardown = disk_teardown,
        .cpu_only = true,
        .describe = disk_describe,
    },
};
const int bench_compile_count =
    (int)(sizeof bench_compile_workloads / sizeof bench_compile_workloads[0]);
