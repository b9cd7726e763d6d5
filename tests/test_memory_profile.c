/* A training loop holds a flat memory profile: 1,000 steps of a small model
 * (MLP with layer norm and dropout, cross-entropy, Adam, batches from a
 * loader), and after warm-up neither the bytes tensors hold (bytes_live),
 * nor the heap in use (glibc's mallinfo2: handles, nodes, graphs, programs),
 * nor the resident set grows.
 *
 * Checkpoints every 100 steps after a 100-step warm-up. bytes_live must be
 * exactly the same at each; the heap and RSS may move by allocator noise
 * (HEAP_SLACK, RSS_SLACK), not by a step's worth of anything, let alone 900.
 * LOOM_PROFILE_STEPS overrides the number of steps (long form). Under
 * AddressSanitizer (whose quarantine holds freed memory, and whose allocator
 * glibc's counters do not see) only bytes_live is checked. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"

#define BATCH 32
#define IN 32
#define HIDDEN 64
#define CLASSES 10
#define ROWS 512
#define WARMUP 100
#define EVERY 100
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HOST_MEMORY_CHECKED 0
#else
#define HOST_MEMORY_CHECKED 1
#endif
#define HEAP_SLACK (256 * 1024)
#define RSS_SLACK (2 * 1024 * 1024)

static long rss_bytes(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  if (f) fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

static long heap_bytes(void) { return (long)mallinfo2().uordblks; }

typedef struct profile {
  long step;
  unsigned long long live;
  long heap, rss;
} profile;

int main(void) {
  const char *env = getenv("LOOM_PROFILE_STEPS");
  long steps = env && atol(env) > WARMUP ? atol(env) : 1000;
  static float xs[ROWS * IN];
  static int64_t ys[ROWS];
  for (int i = 0; i < ROWS * IN; i++) xs[i] = (float)((i * 37 % 101) - 50) / 50.0f;
  for (int i = 0; i < ROWS; i++) ys[i] = i % CLASSES;
  loom_tensor *x = loom_from_data(xs, LOOM_SHAPE(ROWS, IN), LOOM_F32, LOOM_CPU);
  loom_tensor *y = loom_from_data(ys, LOOM_SHAPE(ROWS), LOOM_I64, LOOM_CPU);
  loom_dataset *data = loom_dataset_new(x, y);
  loom_loader *loader = loom_loader_new(data, BATCH, true, true, loom_key_new(5));
  loom_params *ps = loom_params_new();
  loom_key k[2];
  loom_key_split(loom_key_new(1), k, 2);
  loom_linear fc1 = loom_linear_new(ps, "fc1", IN, HIDDEN, k[0]);
  loom_layernorm ln = loom_layernorm_new(ps, "ln", HIDDEN);
  loom_linear fc2 = loom_linear_new(ps, "fc2", HIDDEN, CLASSES, k[1]);
  loom_optim *opt = loom_adam(ps, LOOM_ADAM_DEFAULTS);
  CHECK(data && loader && opt);

  profile base = {0, 0, 0, 0}, worst = {0, 0, 0, 0};
  double first_loss = 0, last_loss = 0;
  int checkpoints = 0;
  for (long step = 1; step <= steps; step++) {
    loom_tensor *xb, *yb;
    if (!loom_loader_next(loader, &xb, &yb)) loom_loader_next(loader, &xb, &yb); /* new epoch */
    LOOM_SCOPE {
      loom_tensor *h = loom_relu(loom_layernorm_forward(&ln, loom_linear_forward(&fc1, xb)));
      h = loom_dropout(h, 0.1, loom_key_fold(loom_key_new(7), (uint64_t)step), true);
      loom_tensor *loss = loom_cross_entropy(loom_linear_forward(&fc2, h), yb);
      loom_optim_zero_grad(opt);
      loom_backward(loss);
      loom_optim_step(opt);
      last_loss = loom_item(loss);
      if (step == 1) first_loss = last_loss;
    }
    loom_free(xb), loom_free(yb);
    if (step % EVERY) continue;
    profile now = {step, (unsigned long long)loom_get_stats().bytes_live, heap_bytes(),
                   rss_bytes()};
    if (step == WARMUP) {
      base = now;
      continue;
    }
    if (step < WARMUP) continue;
    checkpoints++;
    CHECK_MSG(now.live == base.live, "step %ld: %llu tensor bytes live, %llu after warm-up", step,
              now.live, base.live);
    CHECK_MSG(!HOST_MEMORY_CHECKED || now.heap - base.heap <= HEAP_SLACK,
              "step %ld: heap in use grew by %ld bytes", step, now.heap - base.heap);
    CHECK_MSG(!HOST_MEMORY_CHECKED || now.rss - base.rss <= RSS_SLACK,
              "step %ld: RSS grew by %ld bytes", step, now.rss - base.rss);
    if (now.heap - base.heap > worst.heap) worst.heap = now.heap - base.heap;
    if (now.rss - base.rss > worst.rss) worst.rss = now.rss - base.rss;
  }
  printf("%ld steps (loss %.4f -> %.4f): after warm-up, bytes live %llu at all %d checkpoints; "
         "heap in use %.1f MiB, at most %+ld bytes; RSS %.1f MiB, at most %+ld bytes\n",
         steps, first_loss, last_loss, base.live, checkpoints, base.heap / 1048576.0, worst.heap,
         base.rss / 1048576.0, worst.rss);
  CHECK(last_loss < first_loss);
  loom_optim_free(opt);
  loom_params_free(ps);
  loom_loader_free(loader);
  loom_dataset_free(data);
  loom_free(x), loom_free(y);
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
