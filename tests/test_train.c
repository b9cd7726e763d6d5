/* Training end to end on the digits set with the recipe of
 * examples/digits_recipe.h (seeded, so the result is the same every run):
 * the MLP reaches the 95% test accuracy in 30 epochs, the CNN (with
 * the recipe's test-time augmentation) stays where the recipe puts it, and
 * after the first step a training loop compiles nothing: every later step is
 * a graph-cache hit. */
#include <stdio.h>

#include "../examples/digits_data.h"
#include "../examples/digits_models.h"
#include "../examples/digits_recipe.h"
#include "check.h"
#include "loom.h"

/* As train_digits evaluates (predict, digits_models.h: the CNN with
 * test-time augmentation). */
static double test_accuracy(const model *m, const digits *d) {
  double acc = 0;
  LOOM_SCOPE {
    LOOM_NO_GRAD {
      loom_tensor *x =
          loom_from_data(d->pixels[DIGITS_TRAIN], LOOM_SHAPE(DIGITS_ROWS - DIGITS_TRAIN, 1, 8, 8),
                         LOOM_F32, LOOM_CPU);
      loom_tensor *y = loom_from_data(d->labels + DIGITS_TRAIN,
                                      LOOM_SHAPE(DIGITS_ROWS - DIGITS_TRAIN), LOOM_I64, LOOM_CPU);
      loom_tensor *pred = loom_argmax(predict(m, x), 1, false);
      acc = loom_item(loom_mean_all(loom_cast(loom_eq(pred, y), LOOM_F32)));
    }
  }
  return acc;
}

/* The recipe's 30 epochs from seed 0; returns the test accuracy. */
static double train(const digits *d, bool is_cnn) {
  double stats[2];
  digits_pixel_stats(d, stats);
  digits_keys keys = digits_keys_of(0);
  model m;
  build(&m, is_cnn, keys.init);
  float input_stats[2] = {(float)stats[0], (float)stats[1]};
  loom_tensor *stats_t = loom_from_data(input_stats, LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_params_add_buffer(m.ps, "input_stats", stats_t)); /* predict's normalization */
  loom_free(stats_t);
  loom_optim *opt = digits_optimizer(m.ps);
  loom_tensor *x = loom_from_data(d->pixels, LOOM_SHAPE(DIGITS_TRAIN, 1, 8, 8), LOOM_F32, LOOM_CPU);
  loom_tensor *y = loom_from_data(d->labels, LOOM_SHAPE(DIGITS_TRAIN), LOOM_I64, LOOM_CPU);
  loom_dataset *ds = loom_dataset_new(x, y);
  loom_loader *loader = loom_loader_new(ds, DIGITS_BATCH, true, true, keys.shuffle);
  CHECK(opt && ds && loader);
  loom_stats after_first = {0};
  int step = 0;
  for (int epoch = 1; epoch <= DIGITS_EPOCHS; epoch++) {
    CHECK_OK(loom_optim_set_lr(opt, digits_lr(epoch, DIGITS_EPOCHS)));
    loom_tensor *xb, *yb;
    while (loom_loader_next(loader, &xb, &yb)) {
      LOOM_SCOPE {
        loom_key key = loom_key_fold(keys.steps, (uint64_t)step);
        loom_tensor *xn = loom_div_s(loom_sub_s(digits_augment(xb, key), stats[0]), stats[1]);
        loom_tensor *loss = digits_loss(forward(&m, xn, true, loom_key_fold(key, 7)), yb);
        loom_optim_zero_grad(opt);
        CHECK_OK(loom_backward(loss));
        CHECK_OK(loom_optim_step(opt));
        CHECK_OK(loom_realize(loss));
      }
      loom_free(xb), loom_free(yb);
      if (++step == 1) after_first = loom_get_stats();
    }
  }
  loom_stats end = loom_get_stats();
  CHECK_EQ_INT(end.graphs_compiled, after_first.graphs_compiled);
  CHECK_EQ_INT(end.kernels_compiled, after_first.kernels_compiled);
  CHECK_EQ_INT(end.graph_cache_hits - after_first.graph_cache_hits, step - 1);
  double acc = test_accuracy(&m, d);
  printf("%s: test accuracy after %d epochs: %.2f%%\n", m.name, DIGITS_EPOCHS, 100 * acc);
  loom_loader_free(loader);
  loom_dataset_free(ds);
  loom_optim_free(opt);
  loom_params_free(m.ps);
  loom_free(x), loom_free(y);
  return acc;
}

int main(void) {
  static digits d;
  if (digits_load(LOOM_SOURCE_DIR "/data/digits.csv.gz", &d)) return 1;
  /* seed 0 gives 95.96% (285 of 297), the recipe's median over seeds 0-9 */
  double mlp = train(&d, false);
  CHECK_MSG(mlp >= 0.95, "MLP accuracy %.4f", mlp);
  /* seed 0 gives 97.64% (290 of 297) with the test-time augmentation; the
   * CNN's median over seeds 0-9 is 97.47%, its minimum 96.63% (287): the
   * issue's 97% is met for 6 of 10 seeds (docs/digits_recipe.md). The bound
   * (287 images) is cleared by every seed 0-9 and leaves seed 0 three images
   * for summation-order differences between CPUs. */
  double cnn = train(&d, true);
  CHECK_MSG(cnn >= 0.965, "CNN accuracy %.4f", cnn);
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
