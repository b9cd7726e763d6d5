/* Allocation failure injected at every allocation of a small training step.
 *
 * This executable replaces malloc and its relatives (forwarding to glibc's
 * __libc_* functions) so that, when armed, the N-th allocation from then on
 * fails, and it counts the blocks outstanding. A training step (an MLP with
 * batch norm and dropout, cross-entropy, backward, Adam) is run once per N,
 * for every allocation the step makes:
 *
 *   - the step must end in LOOM_ERR_OOM (or succeed, when the failed
 *     allocation was one loom can do without, e.g. a cache entry);
 *   - recovering (realizing again, or redoing the step when the optimizer
 *     recorded nothing) must give exactly the values of a clean run: nothing
 *     already computed is lost, nothing is half-updated;
 *   - no block may leak (allocator counts, loom's bytes_live).
 *
 * Two sweeps: with the program cache warm (recording, autograd, optimizer,
 * realization), and with it cleared before the step (planning and lowering
 * too: kernels still come from the in-memory kernel cache, so LLVM, whose C++
 * allocations abort on failure, never runs while armed). A third sweep fails
 * every allocation from the N-th on (error paths that allocate).
 *
 * Not built with the sanitizers (they own malloc). LOOM_FAULT_STRIDE=k tests
 * every k-th N only (quick runs); LOOM_FAULT_ONLY=N tests that N only (with a
 * breakpoint on fault_fired, a debugger shows the allocation);
 * LOOM_FAULT_VERBOSE=1 prints each fault. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------ the allocator */

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

/* Allocation calls left before the one that fails (0: disarmed). */
static _Atomic long countdown;
/* After the first failure, fail every later allocation too. */
static _Atomic bool persistent, tripped;
static _Atomic long live_blocks, calls;

/* A place for a debugger's breakpoint (LOOM_FAULT_ONLY=N picks the fault). */
__attribute__((noinline)) static void fault_fired(void) { __asm__ volatile(""); }

static bool fail_now(void) {
  atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
  if (atomic_load_explicit(&tripped, memory_order_relaxed)) return true;
  long left = atomic_load_explicit(&countdown, memory_order_relaxed);
  if (left <= 0) return false;
  if (atomic_fetch_sub(&countdown, 1) != 1) return false;
  if (atomic_load(&persistent)) atomic_store(&tripped, true);
  fault_fired();
  return true;
}

static void *counted(void *p) {
  if (p) atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
  return p;
}

void *malloc(size_t size) {
  if (fail_now()) return errno = ENOMEM, NULL;
  return counted(__libc_malloc(size));
}

void *calloc(size_t n, size_t size) {
  if (fail_now()) return errno = ENOMEM, NULL;
  return counted(__libc_calloc(n, size));
}

void free(void *p) {
  if (p) atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
  __libc_free(p);
}

void *realloc(void *p, size_t size) {
  if (!p) return malloc(size);
  if (size == 0) {
    free(p);
    return NULL;
  }
  if (fail_now()) return errno = ENOMEM, NULL; /* p stays valid, as realloc promises */
  return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size) {
  if (fail_now()) return errno = ENOMEM, NULL;
  return counted(__libc_memalign(align, size));
}

void *aligned_alloc(size_t align, size_t size) { return memalign(align, size); }

int posix_memalign(void **out, size_t align, size_t size) {
  void *p = memalign(align, size);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void *valloc(size_t size) { return memalign(4096, size); }
void *pvalloc(size_t size) { return memalign(4096, (size + 4095) & ~(size_t)4095); }

static void arm(long n, bool every_later) {
  atomic_store(&tripped, false);
  atomic_store(&persistent, every_later);
  atomic_store(&countdown, n);
}

/* Whether the armed fault fired. */
static bool disarm(void) {
  bool fired = atomic_load(&countdown) == 0;
  atomic_store(&countdown, 0);
  atomic_store(&tripped, false);
  return fired;
}

/* ------------------------------------------------------------ the model */

#define BATCH 16
#define IN 12
#define HIDDEN 24
#define CLASSES 5

typedef struct model {
  loom_params *ps;
  loom_linear fc1, fc2;
  loom_layernorm ln;
  loom_optim *opt;
} model;

static float xs[BATCH * IN];
static int64_t ys[BATCH];

static void make_data(void) {
  uint64_t s = 42;
  for (int i = 0; i < BATCH * IN; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xs[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  for (int i = 0; i < BATCH; i++) ys[i] = (i * 7 + 3) % CLASSES;
}

/* Built unarmed, the same every time. */
static bool model_new(model *m) {
  loom_key k[2];
  loom_key_split(loom_key_new(7), k, 2);
  m->ps = loom_params_new();
  m->fc1 = loom_linear_new(m->ps, "fc1", IN, HIDDEN, k[0]);
  m->ln = loom_layernorm_new(m->ps, "ln", HIDDEN);
  m->fc2 = loom_linear_new(m->ps, "fc2", HIDDEN, CLASSES, k[1]);
  m->opt =
      loom_adam(m->ps, (loom_adam_opts){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
  return m->ps && m->fc1.weight && m->ln.bias && m->fc2.bias && m->opt;
}

static void model_free(model *m) {
  loom_optim_free(m->opt);
  loom_params_free(m->ps);
}

/* How far a step got, and its status. */
typedef enum stage { S_SCOPE, S_RECORD, S_BACKWARD, S_OPTIM, S_REALIZE, S_DONE } stage;
static const char *const stage_names[] = {"scope",     "record",  "backward",
                                          "optimizer", "realize", "done"};

typedef struct step_result {
  stage failed_at; /* S_DONE when it succeeded */
  loom_status status;
  loom_tensor *loss; /* NULL unless the step got to realizing */
} step_result;

/* One training step, in a scope it opens and the caller ends. Every
 * allocation in here may fail. */
static step_result step(const model *m, int index) {
  step_result r = {S_SCOPE, LOOM_OK, NULL};
  loom_clear_error();
  loom_scope_begin();
  if ((r.status = loom_last_status())) return r;
  r.failed_at = S_RECORD;
  loom_tensor *x = loom_from_data(xs, LOOM_SHAPE(BATCH, IN), LOOM_F32, LOOM_CPU);
  loom_tensor *y = loom_from_data(ys, LOOM_SHAPE(BATCH), LOOM_I64, LOOM_CPU);
  loom_tensor *h = loom_relu(loom_layernorm_forward(&m->ln, loom_linear_forward(&m->fc1, x)));
  h = loom_dropout(h, 0.25, loom_key_fold(loom_key_new(9), (uint64_t)index), true);
  loom_tensor *loss = loom_cross_entropy(loom_linear_forward(&m->fc2, h), y);
  if ((r.status = loom_status_of(loss))) return r;
  r.failed_at = S_BACKWARD;
  loom_optim_zero_grad(m->opt);
  if ((r.status = loom_backward(loss))) return r;
  r.failed_at = S_OPTIM;
  if ((r.status = loom_optim_step(m->opt))) return r;
  r.failed_at = S_REALIZE;
  r.loss = loss;
  if ((r.status = loom_realize(loss))) return r;
  r.failed_at = S_DONE;
  return r;
}

/* Every tensor of the collection (values, running stats) as bytes. */
static size_t snapshot(const model *m, unsigned char *out, size_t cap) {
  size_t used = 0;
  for (int i = 0; i < loom_params_count(m->ps); i++) {
    loom_tensor *t = loom_params_at(m->ps, i);
    size_t bytes = (size_t)loom_numel(t) * loom_dtype_size(loom_dtype_of(t));
    if (used + bytes <= cap && loom_copy_to_host(t, out + used, bytes) == LOOM_OK) used += bytes;
    loom_free(t);
  }
  return used;
}

/* ------------------------------------------------------------ the reference */

#define SNAP_CAP 8192
static unsigned char want[SNAP_CAP];
static size_t want_len;
static double want_loss;

/* Two clean steps from a fresh model: what every faulted run must end with. */
static void reference(void) {
  model m;
  CHECK(model_new(&m));
  for (int i = 0; i < 2; i++) {
    step_result r = step(&m, i);
    CHECK_MSG(r.failed_at == S_DONE, "clean step %d failed at %s: %s", i, stage_names[r.failed_at],
              loom_last_error());
    if (i == 1) want_loss = loom_item(r.loss);
    loom_scope_end();
  }
  want_len = snapshot(&m, want, sizeof want);
  model_free(&m);
}

/* ------------------------------------------------------------ one trial */

typedef enum sweep { WARM, COLD, PERSISTENT, NUM_SWEEPS } sweep;
static const char *const sweep_names[] = {"warm program cache", "cold program cache",
                                          "every allocation from the N-th on"};

typedef struct tally {
  long trials, faults, oom, absorbed;
  long stage_counts[S_DONE + 1];
} tally;

static long outstanding(void) {
  lm_buffer_trim();
  return atomic_load(&live_blocks);
}

/* Runs step 1 clean, then step 2 with the N-th allocation failing (n 0: no
 * fault, to count), recovers, and checks the values and the leaks (a second
 * time when blocks seem to leak: a cache may have filled once, a leak
 * repeats). Returns the allocations step 2 made when n is 0. */
static long trial(sweep sw, long n, tally *t, bool again) {
  long before = outstanding();
  uint64_t bytes_before = loom_get_stats().bytes_live;
  model m;
  if (!model_new(&m)) {
    CHECK_MSG(0, "building the model: %s", loom_last_error());
    return 0;
  }
  step_result r = step(&m, 0);
  CHECK(r.failed_at == S_DONE);
  loom_scope_end();
  if (sw != WARM) lm_program_cache_clear();

  long calls_before = atomic_load(&calls);
  arm(n, sw == PERSISTENT);
  r = step(&m, 1);
  bool fired = disarm();
  long made = atomic_load(&calls) - calls_before;

  if (n > 0) {
    t->trials++;
    t->faults += fired;
    t->stage_counts[r.failed_at]++;
    if (r.failed_at == S_DONE && fired) t->absorbed++;
    if (r.failed_at != S_DONE) t->oom += r.status == LOOM_ERR_OOM;
    if (getenv("LOOM_FAULT_VERBOSE"))
      printf("  %s N=%ld: %s at %s (%s)\n", sweep_names[sw], n, loom_status_name(r.status),
             stage_names[r.failed_at], r.status ? loom_last_error() : "");
    CHECK_MSG(r.failed_at == S_DONE || r.status == LOOM_ERR_OOM,
              "%s, fault at allocation %ld: the step failed at %s with %s: %s", sweep_names[sw], n,
              stage_names[r.failed_at], loom_status_name(r.status), loom_last_error());
  }
  /* Recovery. A step whose optimizer recorded its updates completes when
   * realized again; one that failed before changed nothing and is redone. */
  stage failed_at = r.failed_at;
  if (r.failed_at == S_REALIZE) {
    loom_status st = loom_realize(r.loss);
    CHECK_MSG(st == LOOM_OK, "%s N=%ld: realizing again: %s", sweep_names[sw], n,
              loom_last_error());
  } else if (r.failed_at != S_DONE) {
    loom_scope_end();
    r = step(&m, 1);
    CHECK_MSG(r.failed_at == S_DONE, "%s N=%ld: the clean retry failed at %s: %s", sweep_names[sw],
              n, stage_names[r.failed_at], loom_last_error());
  }
  double loss = r.loss ? loom_item(r.loss) : NAN;
  CHECK_MSG(loss == want_loss, "%s N=%ld: loss %.9g after recovering, %.9g clean", sweep_names[sw],
            n, loss, want_loss);
  loom_scope_end();
  static unsigned char got[SNAP_CAP];
  size_t got_len = snapshot(&m, got, sizeof got);
  CHECK_MSG(got_len == want_len && memcmp(got, want, want_len) == 0,
            "%s N=%ld (failed at %s): parameters differ from a clean run", sweep_names[sw], n,
            stage_names[failed_at]);
  model_free(&m);
  if (sw != WARM) lm_program_cache_clear();
  if (n == 0) return made; /* warming up: caches fill */
  CHECK_MSG(loom_get_stats().bytes_live == bytes_before,
            "%s N=%ld (failed at %s): %lld tensor bytes leaked", sweep_names[sw], n,
            stage_names[failed_at], (long long)(loom_get_stats().bytes_live - bytes_before));
  long leaked = outstanding() - before;
  if (leaked != 0 && !again) return trial(sw, n, &(tally){0}, true), made;
  CHECK_MSG(leaked == 0, "%s N=%ld (failed at %s): %ld blocks leaked", sweep_names[sw], n,
            stage_names[failed_at], leaked);
  return made;
}

static long first = 1;

static void run_sweep(sweep sw, long stride) {
  trial(sw, 0, &(tally){0}, false); /* warm up: every kernel compiled, every cache filled */
  long total = trial(sw, 0, &(tally){0}, false);
  long again = trial(sw, 0, &(tally){0}, false);
  CHECK_MSG(total == again, "%s: a clean step made %ld allocations, then %ld", sweep_names[sw],
            total, again);
  tally t = {0};
  for (long n = first; n <= total + 2; n += stride) trial(sw, n, &t, false);
  printf("%s: %ld allocations in the step, %ld trials, %ld faults injected: %ld ended in "
         "LOOM_ERR_OOM, %ld absorbed (the step succeeded)\n",
         sweep_names[sw], total, t.trials, t.faults, t.oom, t.absorbed);
  printf("  failed at:");
  for (int s = 0; s <= S_DONE; s++)
    if (t.stage_counts[s]) printf(" %s %ld", stage_names[s], t.stage_counts[s]);
  printf("\n");
  CHECK(t.faults > 0);
  fflush(stdout);
}

/* ------------------------------------------------------------ batch norm */

/* A training-mode batch norm records two assignments (its running
 * statistics) while recording the forward pass: a fault must leave both
 * updated or neither, and leak nothing (checked twice when blocks seem to
 * leak: realizing the statistics alone may compile a program once). With n
 * 0 (no fault) it fills `clean` with the updated statistics; returns the
 * allocations made. */
static long bn_trial(long n, float *clean, tally *t, bool again) {
  long before = outstanding();
  loom_params *ps = loom_params_new();
  loom_batchnorm2d bn = loom_batchnorm2d_new(ps, "bn", HIDDEN);
  loom_tensor *x = loom_from_data(xs, LOOM_SHAPE(BATCH / 2, HIDDEN), LOOM_F32, LOOM_CPU);
  long calls_before = atomic_load(&calls);
  arm(n, false);
  loom_clear_error();
  loom_scope_begin();
  loom_tensor *y = loom_relu(loom_batchnorm2d_forward(&bn, x, true));
  loom_status st = loom_status_of(y) ? loom_status_of(y) : loom_realize(y);
  bool fired = disarm();
  long made = atomic_load(&calls) - calls_before;
  loom_scope_end();
  float got[2 * HIDDEN];
  loom_tensor *stats[2] = {bn.running_mean, bn.running_var};
  CHECK_OK(loom_eval(stats, 2)); /* completes updates recorded before a failure */
  CHECK_OK(loom_copy_to_host(bn.running_mean, got, sizeof got / 2));
  CHECK_OK(loom_copy_to_host(bn.running_var, got + HIDDEN, sizeof got / 2));
  if (n == 0) {
    memcpy(clean, got, sizeof got);
  } else {
    t->trials++, t->faults += fired, t->oom += st == LOOM_ERR_OOM, t->absorbed += fired && !st;
    CHECK_MSG(st == LOOM_OK || st == LOOM_ERR_OOM, "batch norm N=%ld: %s", n, loom_last_error());
    bool mean_updated = memcmp(got, clean, sizeof got / 2) == 0;
    bool var_updated = memcmp(got + HIDDEN, clean + HIDDEN, sizeof got / 2) == 0;
    CHECK_MSG(mean_updated == var_updated,
              "batch norm N=%ld: one running statistic was updated alone", n);
    for (int i = 0; i < HIDDEN && !mean_updated; i++) /* else still zeros and ones */
      CHECK_MSG(got[i] == 0 && got[HIDDEN + i] == 1, "batch norm N=%ld: statistics changed", n);
  }
  loom_free(x);
  loom_params_free(ps);
  long leaked = outstanding() - before;
  if (n == 0) return made;
  if (leaked != 0 && !again) return bn_trial(n, clean, &(tally){0}, true), made;
  CHECK_MSG(leaked == 0, "batch norm N=%ld: %ld blocks leaked", n, leaked);
  return made;
}

static void run_bn_sweep(long stride) {
  static float clean[2 * HIDDEN];
  bn_trial(0, clean, &(tally){0}, false); /* warm up */
  long total = bn_trial(0, clean, &(tally){0}, false);
  tally t = {0};
  for (long n = first; n <= total + 2; n += stride) bn_trial(n, clean, &t, false);
  printf("batch norm forward: %ld allocations, %ld trials, %ld faults injected: %ld ended in "
         "LOOM_ERR_OOM, %ld absorbed\n",
         total, t.trials, t.faults, t.oom, t.absorbed);
  CHECK(t.faults > 0);
}

/* A BF16 product under a failure at each allocation in turn. BLAS takes no
 * BF16 operands, so a GEMM whose packing buffer cannot be allocated must not
 * hand the product to it (it once did: the values were garbage): every run
 * ends in LOOM_ERR_OOM or gives the fault-free values bit for bit. */
static void run_bf16_gemm_sweep(void) {
  enum { M = 64, K = 96, N = 80 };
  static uint16_t a[M * K], b[K * N];
  static float want[M * N], got[M * N];
  for (int i = 0; i < M * K; i++) a[i] = loom_float_to_bf16((float)((i * 7 % 23) - 11) / 16.0f);
  for (int i = 0; i < K * N; i++) b[i] = loom_float_to_bf16((float)((i * 5 % 19) - 9) / 16.0f);
  LOOM_SCOPE {
    loom_tensor *x = loom_from_data(a, LOOM_SHAPE(M, K), LOOM_BF16, LOOM_CPU);
    loom_tensor *y = loom_from_data(b, LOOM_SHAPE(K, N), LOOM_BF16, LOOM_CPU);
    CHECK_OK(loom_copy_to_host(loom_cast(loom_matmul(x, y), LOOM_F32), want, sizeof want));
  }
  long faults = 0, oom = 0;
  for (long n = 1;; n++) {
    bool fired = false;
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(a, LOOM_SHAPE(M, K), LOOM_BF16, LOOM_CPU);
      loom_tensor *y = loom_from_data(b, LOOM_SHAPE(K, N), LOOM_BF16, LOOM_CPU);
      lm_buffer_trim(); /* the packing buffer comes from the system, not the cache */
      arm(n, false);
      loom_tensor *c = loom_cast(loom_matmul(x, y), LOOM_F32);
      loom_status st = loom_realize(c);
      fired = disarm();
      if (st == LOOM_OK) {
        CHECK_OK(loom_copy_to_host(c, got, sizeof got));
        CHECK_MSG(memcmp(got, want, sizeof got) == 0, "BF16 product, fault %ld: wrong values", n);
      } else {
        CHECK_MSG(st == LOOM_ERR_OOM, "BF16 product, fault %ld: %s", n, loom_status_name(st));
        oom++;
      }
    }
    if (!fired) break;
    faults++;
  }
  printf("bf16 gemm: %ld faults, %ld ended in LOOM_ERR_OOM, the rest absorbed\n", faults, oom);
  CHECK(faults > 0);
}

/* A sort's positions under a fault at each allocation: its kernel's scratch
 * failing is absorbed (the partial selection it falls back on needs none:
 * the same positions); anything else ends in LOOM_ERR_OOM. */
static void run_sort_sweep(void) {
  enum { ROWS = 4, N = 300 };
  static float v[ROWS * N];
  static int64_t want[ROWS * N], got[ROWS * N];
  for (int i = 0; i < ROWS * N; i++) v[i] = (float)((i * 37) % 101) - 50; /* ties */
  LOOM_SCOPE {
    loom_tensor *x = loom_from_data(v, LOOM_SHAPE(ROWS, N), LOOM_F32, LOOM_CPU);
    CHECK_OK(loom_copy_to_host(loom_argsort(x, -1, true), want, sizeof want));
  }
  long faults = 0, oom = 0;
  for (long n = 1;; n++) {
    bool fired = false;
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(v, LOOM_SHAPE(ROWS, N), LOOM_F32, LOOM_CPU);
      arm(n, false);
      loom_tensor *pos = loom_argsort(x, -1, true);
      loom_status st = loom_realize(pos);
      fired = disarm();
      if (st == LOOM_OK) {
        CHECK_OK(loom_copy_to_host(pos, got, sizeof got));
        CHECK_MSG(memcmp(got, want, sizeof got) == 0, "sort, fault %ld: wrong positions", n);
      } else {
        CHECK_MSG(st == LOOM_ERR_OOM, "sort, fault %ld: %s", n, loom_status_name(st));
        oom++;
      }
    }
    if (!fired) break;
    faults++;
  }
  printf("sort: %ld faults, %ld ended in LOOM_ERR_OOM, the rest absorbed\n", faults, oom);
  CHECK(faults > oom); /* at least the kernel's scratch */
}

/* Running sums and their gradient (a scan each way: rows long enough to be
 * cut into parts) under a fault at each allocation: the right sums, or
 * LOOM_ERR_OOM. */
static void run_scan_sweep(void) {
  enum { ROWS = 3, N = 5000 };
  static float v[ROWS * N], want[2][ROWS * N], got[2][ROWS * N];
  for (int i = 0; i < ROWS * N; i++) v[i] = (float)((i * 37) % 101) - 50;
  long faults = 0, oom = 0;
  for (long n = 0;; n++) { /* (n 0: no fault, the values wanted) */
    bool fired = false;
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(v, LOOM_SHAPE(ROWS, N), LOOM_F32, LOOM_CPU);
      CHECK_OK(loom_set_requires_grad(x, true));
      if (n) arm(n, false);
      loom_tensor *sums = loom_cumsum(x, -1);
      loom_status st = loom_backward(loom_sum_all(loom_mul(sums, x)));
      loom_tensor *outs[2] = {sums, st == LOOM_OK ? loom_grad(x) : NULL};
      if (st == LOOM_OK) st = loom_eval(outs, 2);
      fired = n && disarm();
      for (int k = 0; k < 2 && st == LOOM_OK; k++)
        CHECK_OK(loom_copy_to_host(outs[k], n ? got[k] : want[k], sizeof got[k]));
      if (!n)
        CHECK_OK(st);
      else if (st == LOOM_OK)
        CHECK_MSG(!memcmp(got, want, sizeof got), "scan, fault %ld: wrong sums", n);
      else
        CHECK_MSG(st == LOOM_ERR_OOM, "scan, fault %ld: %s", n, loom_status_name(st));
      oom += n && st != LOOM_OK;
      loom_free(outs[1]);
    }
    if (!n) continue;
    if (!fired) break;
    faults++;
  }
  printf("scan: %ld faults, %ld ended in LOOM_ERR_OOM, the rest absorbed\n", faults, oom);
  CHECK(faults > 0);
}

/* got ([rows, cols]) against softmax(3 x) over each row, in double. */
static void check_softmax3(const double *x, const double *got, int rows, int cols, const char *what,
                           long fault) {
  for (int r = 0; r < rows; r++) {
    double m = -INFINITY, sum = 0;
    for (int c = 0; c < cols; c++) m = fmax(m, 3 * x[r * cols + c]);
    for (int c = 0; c < cols; c++) sum += exp(3 * x[r * cols + c] - m);
    for (int c = 0; c < cols; c++)
      CHECK_MSG(fabs(got[r * cols + c] - exp(3 * x[r * cols + c] - m) / sum) < 1e-12,
                "%s, fault %ld, %d rows: wrong values", what, fault, rows);
  }
}

/* A shape-generic kernel's path: softmax rows over a new row count each trial
 * (the first trial's generic compile, later trials' regrouping, lookup and
 * generalizing), a fault at every allocation in turn: each ends in a clean
 * LOOM_ERR_OOM or the right values. */
static void run_generic_sweep(void) {
  enum { C = 9, MAXR = 200 };
  static double x[MAXR * C], got[MAXR * C];
  for (int i = 0; i < MAXR * C; i++) x[i] = (double)((i * 7 % 23) - 11) / 8.0;
  LOOM_SCOPE { /* the shape's first sight: a specialized kernel */
    loom_tensor *t = loom_from_data(x, LOOM_SHAPE(3, C), LOOM_F64, LOOM_CPU);
    CHECK_OK(loom_copy_to_host(loom_softmax(loom_mul_s(t, 3.0), 1), got, sizeof(double) * 3 * C));
  }
  long faults = 0, oom = 0;
  for (long n = 1; n + 4 <= MAXR; n++) {
    int rows = (int)n + 4;
    bool fired = false;
    LOOM_SCOPE {
      loom_tensor *t = loom_from_data(x, LOOM_SHAPE(rows, C), LOOM_F64, LOOM_CPU);
      arm(n, false);
      loom_tensor *y = loom_softmax(loom_mul_s(t, 3.0), 1);
      loom_status st = loom_realize(y);
      fired = disarm();
      if (st == LOOM_OK) {
        CHECK_OK(loom_copy_to_host(y, got, sizeof(double) * (size_t)(rows * C)));
        check_softmax3(x, got, rows, C, "generic softmax", n);
      } else {
        CHECK_MSG(st == LOOM_ERR_OOM, "generic softmax, fault %ld: %s", n, loom_status_name(st));
        oom++;
      }
    }
    if (!fired) break;
    faults++;
  }
  printf("generic kernels: %ld faults, %ld ended in LOOM_ERR_OOM, the rest absorbed\n", faults,
         oom);
  CHECK(faults > 0);
}

/* A symbolic program (loom_compile_symbolic) under a failure at each
 * allocation in turn: compiling it (the inference's tables), and running it at
 * a new size each trial (the graph instantiated, planned, its plan kept):
 * each ends in a clean LOOM_ERR_OOM or the right values, and the program runs
 * afterwards. */
static void run_symbolic_sweep(void) {
  enum { C = 9, MAXR = 200 };
  static double x[MAXR * C], got[MAXR * C];
  for (int i = 0; i < MAXR * C; i++) x[i] = (double)((i * 5 % 19) - 9) / 8.0;
  long faults = 0, oom = 0;
  loom_program *p = NULL;
  for (long n = 1;; n++) {
    bool fired = false;
    LOOM_SCOPE {
      loom_tensor *in = loom_input("x", LOOM_SHAPE(11, C), LOOM_F64, LOOM_CPU);
      loom_tensor *y = loom_softmax(loom_mul_s(in, 3.0), 1);
      loom_symbolic_dim rows = {0, 0, "rows"};
      arm(n, false);
      loom_program *q = loom_compile_symbolic(&y, 1, &in, 1, &rows, 1);
      fired = disarm();
      if (!q) {
        CHECK_MSG(loom_last_status() == LOOM_ERR_OOM, "symbolic compile, fault %ld: %s", n,
                  loom_last_error());
        oom++;
      } else if (fired) {
        loom_program_free(q);
      } else {
        p = q;
      }
      loom_clear_error();
    }
    if (!fired) break;
    faults++;
  }
  for (long n = 1; p && n + 4 <= MAXR; n++) {
    int rows = (int)n + 4;
    bool fired = false;
    LOOM_SCOPE {
      loom_tensor *t = loom_from_data(x, LOOM_SHAPE(rows, C), LOOM_F64, LOOM_CPU), *y = NULL;
      arm(n, false);
      loom_status st = loom_program_run(p, &t, &y);
      fired = disarm();
      if (st == LOOM_OK) {
        CHECK_OK(loom_copy_to_host(y, got, sizeof(double) * (size_t)(rows * C)));
        check_softmax3(x, got, rows, C, "symbolic program", n);
      } else {
        CHECK_MSG(st == LOOM_ERR_OOM, "symbolic program, fault %ld: %s", n, loom_status_name(st));
        oom++;
      }
      loom_clear_error();
    }
    if (!fired) break;
    faults++;
  }
  CHECK(p != NULL);
  if (p) LOOM_SCOPE { /* after every failure, the sizes it failed at run */
      loom_tensor *t = loom_from_data(x, LOOM_SHAPE(7, C), LOOM_F64, LOOM_CPU), *y = NULL;
      CHECK_OK(loom_program_run(p, &t, &y));
    }
  loom_program_free(p);
  printf("symbolic programs: %ld faults, %ld ended in LOOM_ERR_OOM, the rest absorbed\n", faults,
         oom);
  CHECK(faults > 0);
}

int main(void) {
  const char *s = getenv("LOOM_FAULT_STRIDE"), *only = getenv("LOOM_FAULT_ONLY");
  long stride = s && atol(s) > 0 ? atol(s) : 1;
  first = only && atol(only) > 0 ? atol(only) : 1;
  if (only) stride = 1 << 30;
  make_data();
  reference();
  for (int sw = 0; sw < NUM_SWEEPS; sw++) run_sweep((sweep)sw, stride);
  run_bn_sweep(stride);
  run_bf16_gemm_sweep();
  run_sort_sweep();
  run_scan_sweep();
  run_generic_sweep();
  run_symbolic_sweep();
  /* The library is usable afterwards. */
  model m;
  CHECK(model_new(&m));
  for (int i = 0; i < 2; i++) {
    step_result r = step(&m, i);
    CHECK(r.failed_at == S_DONE);
    if (i == 1) CHECK(loom_item(r.loss) == want_loss);
    loom_scope_end();
  }
  model_free(&m);
  return check_report();
}
