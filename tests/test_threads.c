/* Threads: several threads recording and realizing independent graphs at
 * once, sharing the program and kernel caches, the buffer pool, the thread
 * pool and the JIT, and reading the same realized tensors (weights).
 *
 * Each thread runs the same work the main thread ran alone first, and must
 * get the same values bit for bit (kernels split their output the same way
 * whoever runs them; GEMMs are compared with a tolerance). The work mixes
 * graphs of one shape for every thread (cache hits, or the same program
 * compiled by two threads at once) with shapes of the thread's own (new
 * kernels compiling concurrently), random draws, scopes, and a training
 * step with its own optimizer (pending assignments are per thread).
 *
 * Run under ThreadSanitizer by tools/test.sh --tsan (ctest -L threads). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"
#include "test_device.h"

#define THREADS 4
#define ROUNDS 3
#define D 48

/* Realized before the threads start, then only read (and retained) by them. */
static loom_tensor *shared_w, *shared_b;

typedef struct result {
  int failures;       /* calls that failed (CHECK is not thread-safe: main counts) */
  char first[256];    /* the first failure */
  float mlp[16 * D];  /* relu(x @ W + b), the same shapes in every thread */
  double own[ROUNDS]; /* a graph of shapes of the thread's own */
  float draw[64];     /* random numbers from the thread's key */
  float params[2 * D + 2];
  double loss;
} result;

static result alone[THREADS], together[THREADS];

/* A call that must succeed, on any thread: recorded in the result. */
#define OK(r, expr)                                                                                \
  do {                                                                                             \
    loom_status ok_s_ = (expr);                                                                    \
    if (ok_s_ != LOOM_OK && (r)->failures++ == 0)                                                  \
      snprintf((r)->first, sizeof(r)->first, "%s: %s", #expr, loom_last_error());                  \
  } while (0)

/* Deterministic inputs of thread t. */
static void fill(float *x, int n, int t, int salt) {
  uint64_t s = (uint64_t)(t * 7919 + salt * 104729 + 1);
  for (int i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
  }
}

/* Shapes every thread uses: hits the shared caches. */
static void same_shapes(int t, result *r) {
  static _Thread_local float x[16 * D];
  fill(x, 16 * D, t, 1);
  LOOM_SCOPE {
    loom_tensor *w = loom_retain(shared_w); /* a reference of this thread's own */
    loom_tensor *in = loom_from_data(x, LOOM_SHAPE(16, D), LOOM_F32, test_device());
    loom_tensor *y = loom_relu(loom_add(loom_matmul(in, w), shared_b));
    OK(r, loom_copy_to_host(y, r->mlp, sizeof r->mlp));
    loom_free(w);
  }
}

/* Shapes of thread t's own: kernels no other thread compiles. */
static void own_shapes(int t, int round, result *r) {
  int rows = 3 + t, cols = 5 + round;
  float x[16 * 16];
  fill(x, rows * cols, t, 2 + round);
  LOOM_SCOPE {
    loom_tensor *in = loom_from_data(x, LOOM_SHAPE(rows, cols), LOOM_F32, test_device());
    loom_tensor *s = loom_softmax(loom_mul_s(loom_tanh(in), 1.0 + t), 1);
    loom_tensor *v = loom_sum_all(loom_mul(s, loom_sin(in)));
    r->own[round] = loom_item(v);
  }
}

static void draws(int t, result *r) {
  LOOM_SCOPE {
    loom_tensor *u = loom_randn_key(loom_key_fold(loom_key_new(99), (uint64_t)t), LOOM_SHAPE(64),
                                    LOOM_F32, test_device());
    OK(r, loom_copy_to_host(loom_add_s(u, 1), r->draw, sizeof r->draw));
  }
}

/* A model of the thread's own, trained a few steps with SGD (momentum):
 * optimizer updates are lazy assignments, pending on this thread only. */
static void training(int t, result *r) {
  loom_params *ps = loom_params_new();
  loom_linear l1 = loom_linear_new(ps, "l1", D, 2, loom_key_new((uint64_t)t));
  loom_optim *opt = loom_sgd(ps, (loom_sgd_opts){.lr = 0.05, .momentum = 0.9});
  float x[8 * D];
  int64_t y[8];
  fill(x, 8 * D, t, 9);
  for (int i = 0; i < 8; i++) y[i] = (i + t) % 2;
  for (int step = 0; step < 4; step++) LOOM_SCOPE {
      loom_tensor *in = loom_from_data(x, LOOM_SHAPE(8, D), LOOM_F32, test_device());
      loom_tensor *labels = loom_from_data(y, LOOM_SHAPE(8), LOOM_I64, test_device());
      /* the shared weight feeds the model, read only */
      loom_tensor *h = loom_tanh(loom_matmul(in, shared_w));
      loom_tensor *loss = loom_cross_entropy(loom_linear_forward(&l1, h), labels);
      loom_optim_zero_grad(opt);
      OK(r, loom_backward(loss));
      OK(r, loom_optim_step(opt));
      r->loss = loom_item(loss);
    }
  OK(r, loom_copy_to_host(l1.weight, r->params, 2 * D * sizeof(float)));
  OK(r, loom_copy_to_host(l1.bias, r->params + 2 * D, 2 * sizeof(float)));
  loom_optim_free(opt);
  loom_params_free(ps);
}

static void work(int t, result *r) {
  for (int round = 0; round < ROUNDS; round++) {
    same_shapes(t, r);
    own_shapes(t, round, r);
    draws(t, r);
  }
  training(t, r);
}

static pthread_barrier_t start;

static void *thread_main(void *arg) {
  int t = (int)(intptr_t)arg;
  pthread_barrier_wait(&start); /* every thread misses the caches at once */
  work(t, &together[t]);
  return NULL;
}

static void compare(int t) {
  const result *a = &alone[t], *b = &together[t];
  check_set_ctx("thread %d", t);
  CHECK_MSG(a->failures == 0, "alone: %d calls failed, first %s", a->failures, a->first);
  CHECK_MSG(b->failures == 0, "together: %d calls failed, first %s", b->failures, b->first);
  double worst = 0;
  for (int i = 0; i < 16 * D; i++) worst = fmax(worst, fabs(a->mlp[i] - b->mlp[i]));
  CHECK_MSG(worst <= 1e-5, "shared-weight MLP differs by %g", worst);
  for (int k = 0; k < ROUNDS; k++) CHECK_MSG(a->own[k] == b->own[k], "own shapes, round %d", k);
  CHECK(memcmp(a->draw, b->draw, sizeof a->draw) == 0);
  worst = 0;
  for (int i = 0; i < 2 * D + 2; i++) worst = fmax(worst, fabs(a->params[i] - b->params[i]));
  CHECK_MSG(worst <= 1e-5, "trained parameters differ by %g", worst);
  CHECK_NEAR(a->loss, b->loss, 1e-5);
  check_ctx[0] = 0;
}

/* Releasing a realized tensor's references from several threads at once. */
static void *retain_release(void *arg) {
  (void)arg;
  for (int i = 0; i < 2000; i++) loom_free(loom_retain(shared_w));
  return NULL;
}

static void run_together(void) {
  pthread_barrier_init(&start, NULL, THREADS);
  pthread_t th[THREADS];
  memset(together, 0, sizeof together);
  for (int t = 0; t < THREADS; t++)
    if (pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)t) != 0) abort();
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start);
}

/* The same new kernel compiled by every thread at once: counted once as
 * compiled, the copies not kept as cache hits (identical runs once differed
 * by how many such races they had). */
static pthread_barrier_t at_once;
static lk_inst race_inst[4];
static lk_kernel race_kernel;
static lk_fn race_fns[THREADS];

static lm_code *race_code[THREADS];

static void *compile_same(void *arg) {
  lk_fn *fn = arg;
  pthread_barrier_wait(&at_once);
  if (lm_kernel_function(&race_kernel, fn, &race_code[fn - race_fns]) != LOOM_OK) *fn = NULL;
  return NULL;
}

static void test_concurrent_compile_counted_once(void) {
  /* out[i] = sin(i + 0.0007 * THREADS * 97): new in this process */
  race_inst[0] = (lk_inst){LK_DIM, LOOM_I64, -1, -1, -1, 0, 0, 0.0};
  race_inst[1] = (lk_inst){LK_CAST, LOOM_F32, 0, -1, -1, 0, 0, 0.0};
  race_inst[2] = (lk_inst){LK_CONST, LOOM_F32, -1, -1, -1, 0, 0, 0.0007 * THREADS * 97};
  race_inst[3] = (lk_inst){LK_ADD, LOOM_F32, 1, 2, -1, 0, 0, 0.0};
  race_kernel = (lk_kernel){.ndim = 1,
                            .dom = {64},
                            .nouter = 1,
                            .out_dtype = LOOM_F32,
                            .acc_dtype = LOOM_F32,
                            .nslots = 1,
                            .ninst = 4,
                            .nbody = 4,
                            .value = 3,
                            .result = 3,
                            .inst = race_inst};
  loom_stats before = loom_get_stats();
  pthread_barrier_init(&at_once, NULL, THREADS);
  pthread_t th[THREADS];
  lk_fn *fns = race_fns;
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, compile_same, &fns[t]);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&at_once);
  loom_stats after = loom_get_stats();
  for (int t = 0; t < THREADS; t++) CHECK(fns[t] != NULL && fns[t] == fns[0]);
  CHECK_EQ_INT((after.kernels_compiled - before.kernels_compiled) +
                   (after.disk_cache_hits - before.disk_cache_hits),
               1); /* made once (or loaded, with a disk cache warm from an earlier run) */
  CHECK_EQ_INT((after.kernels_compiled - before.kernels_compiled) +
                   (after.kernel_cache_hits - before.kernel_cache_hits) +
                   (after.disk_cache_hits - before.disk_cache_hits),
               THREADS);
  for (int t = 0; t < THREADS; t++) {
    CHECK(race_code[t] != NULL);
    lm_code_release(race_code[t]);
  }
}

/* Row kernels (statistics over each row: softmax's, which stores its exps
 * while summing them, log-softmax's, layer norm's) over 1 to 4 of loom's
 * threads give the same bits, wherever the parts fall: rows of lengths no
 * vector width divides, row counts no thread count divides. A part boundary
 * inside a row once summed that row's softmax in a loop of its own, which
 * LLVM vectorized otherwise (on a Zen 3, AVX2: 8 lanes x 2 sums and a scalar
 * tail, against 8 x 1), so the bits depended on the thread count. */
static void test_thread_counts(void) {
  static const int rows_cols[][2] = {{101, 333}, {256, 200}, {37, 2049}, {300, 129}};
  int threads = loom_num_threads();
  for (size_t s = 0; s < sizeof rows_cols / sizeof *rows_cols; s++) {
    int r = rows_cols[s][0], c = rows_cols[s][1], n = r * c;
    check_set_ctx("rows of %d x %d", r, c);
    float *x = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * 3 * (size_t)n),
          *got = malloc(sizeof(float) * 3 * (size_t)n);
    fill(x, n, (int)s, 7);
    loom_program *p = NULL;
    LOOM_SCOPE {
      loom_tensor *in = loom_input("x", LOOM_SHAPE(r, c), LOOM_F32, LOOM_CPU);
      loom_tensor *outs[3] = {loom_softmax(in, -1), loom_log_softmax(in, -1),
                              loom_layer_norm(in, 1, NULL, NULL, 1e-5)};
      p = loom_compile(outs, 3, &in, 1);
    }
    CHECK(p != NULL);
    for (int t = 1; t <= 4 && p; t++) {
      CHECK_OK(loom_set_num_threads(t));
      LOOM_SCOPE {
        loom_tensor *in = loom_from_data(x, LOOM_SHAPE(r, c), LOOM_F32, LOOM_CPU), *outs[3];
        CHECK_OK(loom_program_run(p, &in, outs));
        for (int o = 0; o < 3; o++)
          CHECK_OK(
              loom_copy_to_host(outs[o], (t == 1 ? want : got) + o * n, sizeof(float) * (size_t)n));
      }
      for (int o = 0; t > 1 && o < 3; o++)
        CHECK_MSG(memcmp(want + o * n, got + o * n, sizeof(float) * (size_t)n) == 0,
                  "output %d on %d threads differs from one thread's", o, t);
    }
    loom_program_free(p);
    free(x), free(want), free(got);
  }
  check_set_ctx("%s", "");
  CHECK_OK(loom_set_num_threads(threads));
}

int main(void) {
  /* Bit for bit alone and together: with shape-generic kernels (AUTO), which
   * threads saw a kernel's other sizes first would decide whether its sum runs
   * generic or specialized, and those may round differently
   * (tests/test_dynamic.c runs threads over shared shapes). */
  loom_set_dynamic(LOOM_DYNAMIC_OFF);
  test_concurrent_compile_counted_once();
  test_thread_counts();
  CHECK_OK(loom_set_default_device(test_device())); /* the training step's layer */
  float w[D * D], b[D];
  fill(w, D * D, 100, 0);
  fill(b, D, 101, 0);
  shared_w = loom_from_data(w, LOOM_SHAPE(D, D), LOOM_F32, test_device());
  shared_b = loom_from_data(b, LOOM_SHAPE(D), LOOM_F32, test_device());
  /* Cold caches (ctest gives this suite no disk cache): the threads plan
   * and compile the same programs and kernels at once, and their own. */
  run_together();
  loom_stats cold = loom_get_stats();
  printf("threads at once, cold: %llu programs, %llu kernels compiled\n",
         (unsigned long long)cold.graphs_compiled, (unsigned long long)cold.kernels_compiled);
  for (int t = 0; t < THREADS; t++) work(t, &alone[t]); /* the reference */
  for (int t = 0; t < THREADS; t++) compare(t);
  /* Programs planned again at once, kernels from the shared cache. */
  lm_program_cache_clear();
  run_together();
  for (int t = 0; t < THREADS; t++) compare(t);

  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, retain_release, NULL);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  float back[D * D];
  CHECK_OK(loom_copy_to_host(shared_w, back, sizeof back));
  CHECK(memcmp(back, w, sizeof w) == 0);
  loom_free(shared_w);
  loom_free(shared_b);
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
