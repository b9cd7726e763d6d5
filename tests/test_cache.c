/* The graph and kernel caches: a repeated computation compiles nothing, a new
 * shape does, results stay right, live bytes return to their start, and a second
 * process starts warm from the disk cache. */
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "ref.h"
#include "test_device.h"

/* z = sum(exp(x) * y + 1, axis -1) / 2 on fresh tensors; checks the value. */
static void run_once(loom_shape s, const char *label) {
  ref_t *x = ref_gen(s, LOOM_F32, DOM_ANY), *y = ref_gen(s, LOOM_F32, DOM_ANY);
  loom_tensor *tx = ref_to_loom(x), *ty = ref_to_loom(y);
  loom_tensor *e = loom_exp(tx), *m = loom_mul(e, ty), *p = loom_add_s(m, 1);
  const int ax[] = {-1};
  loom_tensor *sm = loom_sum(p, ax, 1, false), *z = loom_div_s(sm, 2);
  ref_t *r1 = ref_exp(x), *r2 = ref_mul(r1, y), *r3 = ref_add_s(r2, 1),
        *r4 = ref_sum(r3, ax, 1, false), *r5 = ref_div_s(r4, 2);
  REF_CHECK(label, r5, z, 1e-4, 1e-4);
  loom_tensor *ts[] = {tx, ty, e, m, p, sm, z};
  for (int i = 0; i < 7; i++) loom_free(ts[i]);
  ref_t *rs[] = {x, y, r1, r2, r3, r4, r5};
  for (int i = 0; i < 7; i++) ref_free(rs[i]);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* The child process: run the same computation with a warm disk cache. */
static int child_main(void) {
  loom_reset_stats();
  run_once(LOOM_SHAPE(8, 16), "child run");
  loom_stats st = loom_get_stats();
  printf("child: kernels_compiled=%llu disk_cache_hits=%llu graphs_compiled=%llu\n",
         (unsigned long long)st.kernels_compiled, (unsigned long long)st.disk_cache_hits,
         (unsigned long long)st.graphs_compiled);
  CHECK_EQ_INT(st.kernels_compiled, 0);
  CHECK(st.disk_cache_hits > 0);
  return check_report();
}

/* Float constants are kernel parameters: 1,000 realizations, each with a new
 * constant, compile one kernel (they compiled 1,001), with every value right;
 * a hand-written SGD step whose learning rate follows a cosine compiles
 * nothing after its first step. */
static void test_constants_are_parameters(void) {
  float xs[64];
  for (int i = 0; i < 64; i++) xs[i] = (float)i * 0.01f;
  loom_tensor *x = loom_from_data(xs, LOOM_SHAPE(64), LOOM_F32, LOOM_CPU);
  uint64_t before = loom_get_stats().kernels_compiled;
  int wrong = 0;
  for (int i = 0; i < 1000; i++) LOOM_SCOPE {
      double c = 0.001 * i + 0.0123;
      double got = loom_item(loom_sum_all(loom_mul_s(loom_add_s(x, c), 1.7)));
      double want = 0;
      for (int j = 0; j < 64; j++) want += (double)(float)((float)(xs[j] + (float)c) * 1.7f);
      wrong += fabs(got - want) > 1e-4 * (1 + fabs(want));
    }
  CHECK_EQ_INT(wrong, 0);
  CHECK_MSG(loom_get_stats().kernels_compiled - before <= 1,
            "1,000 constants compiled %llu kernels",
            (unsigned long long)(loom_get_stats().kernels_compiled - before));
  loom_tensor *w = loom_zeros(LOOM_SHAPE(64), LOOM_F32, LOOM_CPU);
  loom_tensor *g = loom_ones(LOOM_SHAPE(64), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_realize(w));
  CHECK_OK(loom_realize(g));
  double expected = 0;
  uint64_t after_first = 0;
  for (int step = 0; step < 50; step++) LOOM_SCOPE {
      double lr = 0.05 * (1 + cos(3.14159265358979 * step / 50)) / 2;
      expected -= (double)(float)lr;
      CHECK_OK(loom_assign(w, loom_sub(w, loom_mul_s(g, lr))));
      CHECK_OK(loom_realize(w));
      if (step == 0) after_first = loom_get_stats().kernels_compiled;
    }
  CHECK_EQ_INT(loom_get_stats().kernels_compiled, after_first);
  float got[64];
  CHECK_OK(loom_copy_to_host(w, got, sizeof got));
  CHECK_NEAR(got[0], expected, 1e-5);
  loom_free(w), loom_free(g), loom_free(x);
}

/* y = sum(sin(x) * 2) over n values; false when its value is wrong. */
static bool sine_sum_right(int64_t n) {
  bool right = false;
  LOOM_SCOPE {
    loom_tensor *x = loom_arange(0, (double)n, 1, LOOM_F32, test_device());
    double got = loom_item(loom_sum_all(loom_mul_s(loom_sin(x), 2)));
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += 2 * sin((double)i);
    right = fabs(got - want) <= 1e-4 * (1 + (double)n);
  }
  return right;
}

/* LOOM_JIT_MAX_KERNELS bounds the loaded code (the child process, with the
 * bound set before loom starts): realizations of new shapes load a new
 * kernel each (they all stayed loaded), yet at most twice the bound stay
 * loaded beyond a program the user holds; that program's kernel, evicted from
 * the cache, stays loaded and runs; an unloaded kernel comes back from the
 * disk cache and computes right. On the emulated CUDA device (CUDA modules;
 * each compile runs the host's C++ compiler) with fewer shapes. */
static int JIT_BOUND = 16, SHAPES = 200;

static int jit_bound_main(void) {
  loom_device dev = test_device();
  loom_tensor *x = loom_input("x", LOOM_SHAPE(7), LOOM_F32, dev);
  loom_tensor *x3 = loom_mul_s(x, 3), *y = loom_tanh(x3);
  loom_program *held = loom_compile(&y, 1, &x, 1);
  CHECK(held != NULL);
  uint64_t held_loaded = loom_get_stats().kernels_loaded;
  CHECK(held_loaded >= 1);
  int wrong = 0;
  uint64_t most = 0;
  for (int64_t n = 1; n <= SHAPES; n++) {
    wrong += !sine_sum_right(n);
    uint64_t now = loom_get_stats().kernels_loaded;
    if (now > most) most = now;
  }
  CHECK_EQ_INT(wrong, 0);
  loom_stats s = loom_get_stats();
  printf("jit bound %d: at most %llu kernels loaded, %llu unloaded, %llu compiled\n", JIT_BOUND,
         (unsigned long long)most, (unsigned long long)s.kernels_unloaded,
         (unsigned long long)s.kernels_compiled);
  CHECK_MSG(most <= 2 * JIT_BOUND + held_loaded, "%llu kernels loaded at once (bound %d)",
            (unsigned long long)most, JIT_BOUND);
  CHECK(s.kernels_compiled + s.disk_cache_hits >= (uint64_t)SHAPES);
  CHECK(s.kernels_unloaded >= (uint64_t)(SHAPES - 2 * JIT_BOUND));
  /* the held program's kernel left the cache long ago, and still runs */
  float xs[7] = {-1, -0.5f, -0.1f, 0, 0.1f, 0.5f, 1}, ys[7];
  loom_tensor *in = loom_from_data(xs, LOOM_SHAPE(7), LOOM_F32, dev), *out = NULL;
  CHECK_OK(loom_program_run(held, &in, &out));
  CHECK_OK(loom_copy_to_host(out, ys, sizeof ys));
  for (int i = 0; i < 7; i++) CHECK_NEAR(ys[i], tanh(3.0 * xs[i]), 1e-6);
  /* the first shape's kernel was unloaded: it loads again from disk */
  uint64_t disk_before = loom_get_stats().disk_cache_hits;
  CHECK(sine_sum_right(1));
  CHECK(loom_get_stats().disk_cache_hits > disk_before);
  loom_free(in), loom_free(out), loom_free(x), loom_free(x3), loom_free(y);
  loom_program_free(held);
  CHECK(loom_get_stats().kernels_loaded <= (uint64_t)(2 * JIT_BOUND));
  return check_report();
}

/* Runs this test as a child process in `mode` with the cache in dir. */
static void run_child(const char *argv0, const char *mode, const char *dir, const char *what) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv0, mode, dir, (char *)NULL);
    _exit(127);
  }
  int ws = 0;
  CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid);
  CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "%s child process failed (status %d)", what, ws);
}

int main(int argc, char **argv) {
  /* A private cache directory (not yet existing), set before loom starts. */
  char base[] = "/tmp/loom-test-cache-XXXXXX";
  char dir[256];
  bool is_child = argc > 2 && strcmp(argv[1], "--child") == 0;
  bool is_jit_child = argc > 2 && strcmp(argv[1], "--jit-bound") == 0;
  if (is_jit_child) {
    if (test_device().type == LOOM_DEVICE_CUDA) JIT_BOUND = 3, SHAPES = 16;
    char bound[16];
    snprintf(bound, sizeof bound, "%d", JIT_BOUND);
    setenv("LOOM_CACHE_DIR", argv[2], 1);
    setenv("LOOM_JIT_MAX_KERNELS", bound, 1);
    loom_set_dynamic(LOOM_DYNAMIC_OFF); /* every size its own kernel: many to unload */
    return jit_bound_main();
  }
  if (is_child) {
    snprintf(dir, sizeof dir, "%s", argv[2]);
  } else {
    if (!mkdtemp(base)) {
      perror("mkdtemp");
      return 1;
    }
    snprintf(dir, sizeof dir, "%s/cache", base);
  }
  setenv("LOOM_CACHE_DIR", dir, 1);
  if (is_child) return child_main();

  ref_seed(77);
  /* bytes_live before anything */
  uint64_t live0 = loom_get_stats().bytes_live;
  loom_reset_stats();
  loom_stats s0 = loom_get_stats();
  CHECK_EQ_INT(s0.graphs_compiled, 0);
  CHECK_EQ_INT(s0.kernels_compiled, 0);
  CHECK_EQ_INT(s0.graph_cache_hits, 0);

  run_once(LOOM_SHAPE(8, 16), "first run");
  loom_stats s1 = loom_get_stats();
  CHECK(s1.graphs_compiled >= 1);
  CHECK(s1.kernels_compiled >= 1);
  CHECK(s1.kernels_launched >= 1);
  CHECK(s1.realizations >= 1);
  CHECK(s1.nodes_recorded >= 5);
  CHECK(s1.compile_ns > 0);
  CHECK(s1.bytes_peak > 0);
  CHECK_EQ_INT(s1.disk_cache_hits, 0);

  run_once(LOOM_SHAPE(8, 16), "second run (new data)");
  loom_stats s2 = loom_get_stats();
  CHECK_EQ_INT(s2.graphs_compiled, s1.graphs_compiled);
  CHECK_EQ_INT(s2.kernels_compiled, s1.kernels_compiled);
  CHECK(s2.graph_cache_hits > s1.graph_cache_hits);
  CHECK(s2.kernels_launched > s1.kernels_launched);
  CHECK(s2.realizations > s1.realizations);
  CHECK_EQ_INT(s2.compile_ns, s1.compile_ns);

  run_once(LOOM_SHAPE(8, 16), "third run");
  loom_stats s3 = loom_get_stats();
  CHECK_EQ_INT(s3.graphs_compiled, s1.graphs_compiled);
  CHECK_EQ_INT(s3.kernels_compiled, s1.kernels_compiled);
  CHECK(s3.graph_cache_hits > s2.graph_cache_hits);

  /* a different shape compiles a new graph */
  run_once(LOOM_SHAPE(5, 3), "other shape");
  loom_stats s4 = loom_get_stats();
  CHECK(s4.graphs_compiled > s3.graphs_compiled);
  run_once(LOOM_SHAPE(5, 3), "other shape again");
  loom_stats s5 = loom_get_stats();
  CHECK_EQ_INT(s5.graphs_compiled, s4.graphs_compiled);
  CHECK_EQ_INT(s5.kernels_compiled, s4.kernels_compiled);

  /* the same ops on the same data but built twice: no recompilation either */
  for (int i = 0; i < 2; i++) {
    loom_tensor *a = loom_arange(0, 64, 1, LOOM_F64, LOOM_CPU);
    loom_tensor *b = loom_reshape(a, LOOM_SHAPE(8, 8));
    loom_tensor *c = loom_transpose(b, 0, 1);
    loom_tensor *d = loom_mul(b, c);
    loom_tensor *e = loom_sum_all(d);
    double v = loom_item(e);
    double expect = 0;
    for (int r = 0; r < 8; r++)
      for (int q = 0; q < 8; q++) expect += (double)(r * 8 + q) * (double)(q * 8 + r);
    CHECK(v == expect);
    loom_tensor *ts[] = {a, b, c, d, e};
    for (int k = 0; k < 5; k++) loom_free(ts[k]);
    if (i == 0) s5 = loom_get_stats();
  }
  loom_stats s6 = loom_get_stats();
  CHECK_EQ_INT(s6.graphs_compiled, s5.graphs_compiled);
  CHECK_EQ_INT(s6.kernels_compiled, s5.kernels_compiled);
  CHECK(s6.graph_cache_hits > s5.graph_cache_hits);

  /* everything freed: live bytes are back where they started */
  CHECK_EQ_INT(loom_get_stats().bytes_live, live0);
  loom_reset_stats();
  loom_stats s7 = loom_get_stats();
  CHECK_EQ_INT(s7.graphs_compiled, 0);
  CHECK_EQ_INT(s7.kernels_compiled, 0);
  CHECK_EQ_INT(s7.bytes_peak, s7.bytes_live);

  /* the disk cache: a private 0700 directory, and a second process starts warm */
  struct stat st;
  if (stat(dir, &st) == 0) {
    CHECK(S_ISDIR(st.st_mode));
    CHECK_EQ_INT(st.st_mode & 0777, 0700);
    run_child(argv[0], "--child", dir, "warm");
    run_child(argv[0], "--jit-bound", dir, "bounded JIT");
  } else {
    CHECK_MSG(false, "LOOM_CACHE_DIR %s was not created", dir);
  }
  test_constants_are_parameters();
  nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return check_report();
}
