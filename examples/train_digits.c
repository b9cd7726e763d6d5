/* train_digits: an MLP (64-128-10) and a small CNN on the UCI digits set.
 *
 *   ./train_digits [--model mlp|cnn|both] [--epochs N] [--seed N] [--data path]
 *                  [--device cpu|cuda] [--save dir] [--ddp]
 *   mpirun -np 2 ./train_digits --ddp
 *
 * --ddp trains data-parallel across the processes mpirun starts (loom_ddp):
 * each rank takes its share of every batch of the same global size, the
 * gradients are averaged across ranks inside each step's program, and every
 * rank ends with the same parameters (rank 0 prints and saves).
 *
 * --save writes each trained model's parameters and
 * input normalization to dir/<model>.safetensors (examples/export_digits.c
 * exports them as a shared library).
 *
 * A model is a struct of layers and a forward function (Toro's records as
 * models). Each step records the augmentation, forward, backward and AdamW's
 * updates; the loss's realization runs them as one program, compiled once:
 * later steps hit the graph cache. The recipe is examples/digits_recipe.h;
 * the CNN's test accuracy averages each image's class probabilities over 9
 * shifted copies (predict, examples/digits_models.h);
 * the seed decides the initialization, the shuffling, the augmentation and
 * the dropout masks, so a run is the same every time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digits_data.h"
#include "digits_models.h"
#include "digits_recipe.h"
#include "loom.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* predict (digits_models.h): the CNN with test-time augmentation. */
static double accuracy(const model *m, const loom_tensor *x, const loom_tensor *y) {
  double acc = 0;
  LOOM_SCOPE {
    LOOM_NO_GRAD {
      loom_tensor *pred = loom_argmax(predict(m, x), 1, false);
      acc = loom_item(loom_mean_all(loom_cast(loom_eq(pred, y), LOOM_F32)));
    }
  }
  return acc;
}

static void progress(int epoch, int64_t done, int64_t total, double loss) {
  int width = 30, filled = (int)(width * done / (total ? total : 1));
  printf("\r  epoch %2d [", epoch);
  for (int i = 0; i < width; i++) putchar(i < filled ? '#' : '.');
  printf("] %3lld/%lld  loss %.4f", (long long)done, (long long)total, loss);
  fflush(stdout);
}

static int train(const digits *d, bool is_cnn, int epochs, uint64_t seed, loom_device device,
                 const char *save_dir, bool ddp) {
  int rank = loom_dist_rank(), ranks = loom_dist_size();
  if (DIGITS_BATCH % ranks != 0) {
    fprintf(stderr, "--ddp: the batch of %d does not split over %d ranks\n", DIGITS_BATCH, ranks);
    return 1;
  }
  double stats[2];
  digits_pixel_stats(d, stats);
  digits_keys keys = digits_keys_of(seed);
  model m;
  /* layers are created on the default device; the data below goes there too */
  if (loom_set_default_device(device) != LOOM_OK) {
    fprintf(stderr, "%s\n", loom_last_error());
    return 1;
  }
  build(&m, is_cnn, keys.init);
  float input_stats[2] = {(float)stats[0], (float)stats[1]};
  loom_tensor *stats_t = loom_from_data(input_stats, LOOM_SHAPE(2), LOOM_F32, device);
  loom_params_add_buffer(m.ps, "input_stats", stats_t); /* saved with the weights */
  loom_free(stats_t);
  if (loom_last_error()) {
    fprintf(stderr, "building the %s failed: %s\n", m.name, loom_last_error());
    return 1;
  }
  if (ddp && loom_ddp(m.ps, LOOM_DDP_DEFAULTS) != LOOM_OK) { /* rank 0's initial values */
    fprintf(stderr, "loom_ddp: %s\n", loom_last_error());
    return 1;
  }
  loom_optim *opt = digits_optimizer(m.ps);
  loom_tensor *xtr = loom_from_data(d->pixels, LOOM_SHAPE(DIGITS_TRAIN, 1, 8, 8), LOOM_F32, device);
  loom_tensor *ytr = loom_from_data(d->labels, LOOM_SHAPE(DIGITS_TRAIN), LOOM_I64, device);
  loom_tensor *xte = loom_from_data(
      d->pixels[DIGITS_TRAIN], LOOM_SHAPE(DIGITS_ROWS - DIGITS_TRAIN, 1, 8, 8), LOOM_F32, device);
  loom_tensor *yte = loom_from_data(d->labels + DIGITS_TRAIN,
                                    LOOM_SHAPE(DIGITS_ROWS - DIGITS_TRAIN), LOOM_I64, device);
  loom_dataset *ds = loom_dataset_new(xtr, ytr);
  loom_loader *loader = loom_loader_new(ds, DIGITS_BATCH / ranks, true, true, keys.shuffle);
  if (loader && ddp) loom_loader_shard(loader, rank, ranks);
  if (!opt || !ds || !loader) {
    fprintf(stderr, "setting up training failed: %s\n", loom_last_error());
    return 1;
  }
  if (rank == 0)
    printf("%s: %d parameter tensors, %lld batches of %d per epoch (%d a rank), seed %llu\n",
           m.name, loom_params_count(m.ps), (long long)loom_loader_batches(loader), DIGITS_BATCH,
           DIGITS_BATCH / ranks, (unsigned long long)seed);
  double acc = 0, step_time = 0;
  int64_t steps = 0, steps_total = 0;
  loom_stats before = loom_get_stats();
  for (int epoch = 1; epoch <= epochs; epoch++) {
    loom_optim_set_lr(opt, digits_lr(epoch, epochs));
    loom_mean_loss mean = {0, 0};
    loom_tensor *xb, *yb;
    int64_t done = 0;
    while (loom_loader_next(loader, &xb, &yb)) {
      double t0 = now();
      double loss = NAN;
      LOOM_SCOPE {
        loom_key key = loom_key_fold(keys.steps, (uint64_t)steps_total++);
        if (ddp) key = loom_key_fold(key, (uint64_t)rank); /* each rank its own masks */
        loom_tensor *x = loom_div_s(loom_sub_s(digits_augment(xb, key), stats[0]), stats[1]);
        loom_tensor *l = digits_loss(forward(&m, x, true, loom_key_fold(key, 7)), yb);
        loom_optim_zero_grad(opt);
        loom_backward(l);
        loom_optim_step(opt);
        loss = loom_item(l); /* forward, backward and the updates: one program */
      }
      loom_free(xb);
      loom_free(yb);
      if (epoch > 1) step_time += now() - t0, steps++;
      loom_mean_loss_add(&mean, loss, DIGITS_BATCH / ranks);
      ++done;
      if (rank == 0)
        progress(epoch, done, loom_loader_batches(loader), loom_mean_loss_value(&mean));
    }
    acc = accuracy(&m, xte, yte);
    if (rank == 0) printf("  test accuracy %.2f%%\n", 100 * acc); /* the loss: rank 0's share */
  }
  loom_stats after = loom_get_stats();
  if (rank == 0)
    printf("%s: test accuracy %.2f%% after %d epochs; %.3f ms per step; graphs compiled %llu, "
           "graph-cache hits %llu, kernels per step %.1f\n",
           m.name, 100 * acc, epochs, steps ? 1e3 * step_time / (double)steps : 0.0,
           (unsigned long long)(after.graphs_compiled - before.graphs_compiled),
           (unsigned long long)(after.graph_cache_hits - before.graph_cache_hits),
           (double)(after.kernels_launched - before.kernels_launched) /
               (double)(after.realizations - before.realizations));
  if (save_dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", save_dir, m.name);
    if (loom_params_save(m.ps, path) == LOOM_OK && rank == 0) /* under --ddp rank 0 writes */
      printf("%s: saved %s\n", m.name, path);
  }
  if (loom_last_error()) fprintf(stderr, "error: %s\n", loom_last_error());
  loom_loader_free(loader);
  loom_dataset_free(ds);
  loom_optim_free(opt);
  loom_params_free(m.ps);
  loom_free(xtr), loom_free(ytr), loom_free(xte), loom_free(yte);
  return loom_last_error() ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *which = "both", *path = "data/digits.csv.gz", *save_dir = NULL;
  int epochs = DIGITS_EPOCHS;
  uint64_t seed = 0; /* a median run of the recipe's (docs/digits_recipe.md) */
  loom_device device = LOOM_CPU;
  bool ddp = false;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--ddp")) ddp = true;
  if (ddp && loom_dist_init(&argc, &argv) != LOOM_OK) {
    fprintf(stderr, "--ddp: %s\n", loom_last_error());
    return 1;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ddp")) {
      i--; /* a flag alone */
      continue;
    }
    if (!strcmp(argv[i], "--model"))
      which = argv[i + 1];
    else if (!strcmp(argv[i], "--epochs"))
      epochs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed"))
      seed = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--data"))
      path = argv[i + 1];
    else if (!strcmp(argv[i], "--save"))
      save_dir = argv[i + 1];
    else if (!strcmp(argv[i], "--device"))
      device = !strcmp(argv[i + 1], "cuda") ? LOOM_CUDA(0) : LOOM_CPU;
  }
  static digits d;
  if (digits_load(path, &d)) return 1;
  int rc = 0;
  if (strcmp(which, "cnn")) rc |= train(&d, false, epochs, seed, device, save_dir, ddp);
  if (strcmp(which, "mlp")) rc |= train(&d, true, epochs, seed, device, save_dir, ddp);
  if (ddp) loom_dist_finalize();
  return rc;
}
