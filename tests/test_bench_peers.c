/* `loom bench --peers`'s side of the peers (bench/peers.c): parsing the
 * scripts' JSON lines, the best peer of a workload and loom's ratio to it in
 * the table and the JSON, one line for a missing .venv-peers, and the
 * arguments and environments each script is run with (a fake .venv-peers
 * Python that echoes them). Needs neither the peers nor their venvs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "check.h"
#include "scratch.h"

static char test_dir[256];

static bench_peer_set parsed(const char *text) {
  bench_peer_set set = {0};
  char *copy = strdup(text);
  bench_parse_peer_output(&set, "fake", copy);
  free(copy);
  return set;
}

/* Timings in seconds: matmul_1024's best is torch2 at 2 ms, sum_16M's openvino at 1 ms. */
static const char *const OUTPUT =
    "{\"peer\": \"numpy\", \"workload\": \"matmul_1024\", \"variant\": \"matmul\", \"seconds\": "
    "0.004}\n"
    "not JSON: a warning a library printed\n"
    "{\"peer\": \"torch2\", \"workload\": \"matmul_1024\", \"variant\": \"inductor max-autotune "
    "hugetlb passive\", \"seconds\": 0.002}\n"
    "{\"peer\": \"jax\", \"workload\": \"matmul_1024\", \"variant\": \"jit\", \"seconds\": 0.003}\n"
    "{\"peer\": \"jax\", \"workload\": \"matmul_1024\", \"variant\": \"no time\", \"seconds\": 0}\n"
    "{\"peer\": \"openvino\", \"workload\": \"sum_16M\", \"variant\": \"latency f32\", "
    "\"seconds\": 0.001}\n"
    "{\"peer\": \"ort\", \"workload\": \"sum_16M\", \"variant\": \"cpu ep\", \"seconds\": 0.0015}\n"
    "{\"peer\": \"jax\", \"skipped\": \"cnn_train_step: failed: XlaRuntimeError\"}\n"
    "{\"peer\": \"jax\", \"skipped\": \"cnn_train_step: failed: XlaRuntimeError\"}\n";

static void test_parse_and_best(void) {
  bench_peer_set set = parsed(OUTPUT);
  CHECK_EQ_INT(set.count, 6);
  CHECK_EQ_INT(set.nskipped, 1); /* the same reason twice is one line */
  CHECK_STR_CONTAINS(set.skipped[0], "fake: cnn_train_step: failed: XlaRuntimeError");
  const bench_peer_timing *best = bench_best_peer(&set, "matmul_1024");
  CHECK(best && strcmp(best->peer, "torch2") == 0);
  CHECK(best && strcmp(best->variant, "inductor max-autotune hugetlb passive") == 0);
  best = bench_best_peer(&set, "sum_16M");
  CHECK(best && strcmp(best->peer, "openvino") == 0);
  CHECK(bench_best_peer(&set, "softmax_4096x1024") == NULL);
  bench_peer_set_free(&set);
}

/* What `print` wrote to a temporary file. */
static char *printed(void (*print)(FILE *, const bench_peer_set *, const bench_result *, int),
                     const bench_peer_set *set, const bench_result *results, int n) {
  FILE *f = tmpfile();
  if (!f) return NULL;
  print(f, set, results, n);
  long size = ftell(f);
  char *text = calloc((size_t)size + 1, 1);
  rewind(f);
  if (text && fread(text, 1, (size_t)size, f) != (size_t)size) text[0] = 0;
  fclose(f);
  return text;
}

/* The line of text that starts with `start` after `after`, or "". */
static const char *line_after(const char *text, const char *after, const char *start, char *line,
                              size_t size) {
  const char *p = text ? strstr(text, after) : NULL;
  line[0] = 0;
  while (p && (p = strchr(p, '\n'))) {
    p++;
    if (strncmp(p, start, strlen(start)) == 0) {
      size_t n = strcspn(p, "\n");
      snprintf(line, size, "%.*s", (int)(n < size ? n : size - 1), p);
      break;
    }
  }
  return line;
}

static void test_report(void) {
  bench_peer_set set = parsed(OUTPUT);
  /* loom: matmul_1024 in 1 ms (2x the best), sum_16M in 4 ms (4x its best) */
  bench_result results[2] = {{.workload = bench_workload_find("matmul_1024"), .median_s = 0.001},
                             {.workload = bench_workload_find("sum_16M"), .median_s = 0.004}};
  CHECK(results[0].workload && results[1].workload);
  if (!results[0].workload || !results[1].workload) return;
  char *table = printed(bench_print_peers, &set, results, 2), line[512];
  CHECK_STR_CONTAINS(table, "loom against the best peer");
  line_after(table, "loom against the best peer", "matmul_1024", line, sizeof line);
  CHECK_STR_CONTAINS(line, "torch2");
  CHECK_STR_CONTAINS(line, "inductor max-autotune hugetlb passive");
  CHECK_STR_CONTAINS(line, "2.00 ms");
  CHECK_STR_CONTAINS(line, "loom 2.00x faster");
  line_after(table, "loom against the best peer", "sum_16M", line, sizeof line);
  CHECK_STR_CONTAINS(line, "openvino");
  CHECK_STR_CONTAINS(line, "loom 4.00x slower");
  /* every peer's row is still there, with its own ratio */
  line_after(table, "peers (median", "matmul_1024 ", line, sizeof line);
  CHECK_STR_CONTAINS(line, "numpy");
  CHECK_STR_CONTAINS(line, "loom 4.00x faster");
  CHECK_STR_CONTAINS(table, "skipped fake: cnn_train_step: failed: XlaRuntimeError");
  free(table);

  char *json = printed(bench_print_json_peers, &set, results, 2);
  line_after(json, "", "{\"kind\":\"peer_best\",\"peer\":\"torch2\"", line, sizeof line);
  CHECK_STR_CONTAINS(line, "\"workload\":\"matmul_1024\"");
  CHECK_STR_CONTAINS(line, "\"peer_over_loom\":2.0");
  line_after(json, "", "{\"kind\":\"peer_best\",\"peer\":\"openvino\"", line, sizeof line);
  CHECK_STR_CONTAINS(line, "\"workload\":\"sum_16M\"");
  CHECK_STR_CONTAINS(line, "\"peer_over_loom\":0.25");
  free(json);
  bench_peer_set_free(&set);
}

static void make_dirs(const char *path) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(dir, 0755);
      *p = '/';
    }
  mkdir(dir, 0755);
}

/* No venv at all: .venv-peers is one line that says how to install it. */
static void test_missing_venv(void) {
  char peers[400];
  snprintf(peers, sizeof peers, "%s/missing/bench/peers", test_dir);
  make_dirs(peers);
  bench_options opts = {.repeats = 1, .threads = 2, .peers_dir = peers};
  const char *names[] = {"matmul_1024"};
  bench_peer_set set;
  bench_run_peers(&opts, names, 1, &set);
  CHECK_EQ_INT(set.count, 0);
  int venv_lines = 0;
  for (int i = 0; i < set.nskipped; i++)
    if (strstr(set.skipped[i], ".venv-peers")) {
      venv_lines++;
      CHECK_STR_CONTAINS(set.skipped[i], "torch2, jax, openvino: ");
      CHECK_STR_CONTAINS(set.skipped[i], "bash bench/peers/setup.sh");
    }
  CHECK_EQ_INT(venv_lines, 1);
  bench_peer_set_free(&set);
}

/* A .venv-peers whose Python prints a timing named after the script, its
 * first word, its arguments after the threads', and the settings of its
 * environment: h for the huge-page malloc, then OMP_WAIT_POLICY. */
static void test_fake_venv_peers(void) {
  char root[400], path[512];
  snprintf(root, sizeof root, "%s/fake", test_dir);
  snprintf(path, sizeof path, "%s/bench/peers", root);
  make_dirs(path);
  snprintf(path, sizeof path, "%s/.venv-peers/bin", root);
  make_dirs(path);
  static const char python[] =
      "#!/bin/sh\n"
      "script=$(basename \"$1\"); threads=$7; shift 7\n"
      "echo \"{\\\"peer\\\": \\\"fake\\\", \\\"workload\\\": \\\"sum_16M\\\", "
      "\\\"variant\\\": \\\"${script%%_*} $* t$threads ${GLIBC_TUNABLES:+h} "
      "${OMP_WAIT_POLICY:-spin}\\\", "
      "\\\"seconds\\\": 0.5}\"\n";
  snprintf(path, sizeof path, "%s/.venv-peers/bin/python", root);
  check_write_file(path, python, sizeof python - 1);
  chmod(path, 0755);
  const char *scripts[] = {"torch_bench.py", "jax_bench.py", "ov_bench.py"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/bench/peers/%s", root, scripts[i]);
    check_write_file(path, "", 0);
  }
  snprintf(path, sizeof path, "%s/bench/peers", root);
  unsetenv("OMP_WAIT_POLICY"); /* the caller's would pass through to the untuned runs */
  bench_options opts = {.repeats = 1, .threads = 3, .peers_dir = path};
  const char *names[] = {"sum_16M"};
  bench_peer_set set;
  bench_run_peers(&opts, names, 1, &set);
  static const char *const expected[] = {
      "torch --peer torch2 sum_16M t3 h spin",
      "torch --peer torch2 --compile default sum_16M t3 h spin",
      "torch --peer torch2 --compile max-autotune sum_16M t3 h spin",
      "jax sum_16M t3 h spin",
      "ov sum_16M t3 h spin",
  };
  CHECK_EQ_INT(set.count, 5);
  for (int i = 0; i < 5 && i < set.count; i++)
    CHECK_MSG(strcmp(set.timings[i].variant, expected[i]) == 0,
              "run %d: got \"%s\", expected \"%s\"", i, set.timings[i].variant, expected[i]);
  for (int i = 0; i < set.nskipped; i++)
    CHECK_MSG(!strstr(set.skipped[i], ".venv-peers"), "skipped: %s", set.skipped[i]);
  bench_peer_set_free(&set);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(test_dir, sizeof test_dir, "%s/loom-bench-peers-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(test_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_parse_and_best();
  test_report();
  test_missing_venv();
  test_fake_venv_peers();
  char command[400];
  snprintf(command, sizeof command, "rm -rf '%s'", test_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
  return check_report();
}
