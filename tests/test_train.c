/* Training end to end on the digits set: an MLP learns (seeded, so the
 * result is the same every run), and after the first step a training loop
 * compiles nothing: every later step is a graph-cache hit. */
#include <stdio.h>

#include "../examples/digits_data.h"
#include "check.h"
#include "loom.h"

int main(void) {
  static digits d;
  if (digits_load(LOOM_SOURCE_DIR "/data/digits.csv.gz", &d)) return 1;
  loom_params *ps = loom_params_new();
  loom_key k[2];
  loom_key_split(loom_key_new(3), k, 2);
  loom_linear fc1 = loom_linear_new(ps, "fc1", 64, 128, k[0]);
  loom_linear fc2 = loom_linear_new(ps, "fc2", 128, 10, k[1]);
  loom_optim *opt = loom_sgd(ps, (loom_sgd_opts){.lr = 0.1, .momentum = 0.9});
  loom_tensor *x = loom_from_data(d.pixels, LOOM_SHAPE(DIGITS_ROWS, 64), LOOM_F32, LOOM_CPU);
  loom_tensor *y = loom_from_data(d.labels, LOOM_SHAPE(DIGITS_ROWS), LOOM_I64, LOOM_CPU);
  loom_tensor *xtr = loom_slice(x, 0, 0, DIGITS_TRAIN, 1),
              *ytr = loom_slice(y, 0, 0, DIGITS_TRAIN, 1);
  loom_dataset *ds = loom_dataset_new(xtr, ytr);
  loom_loader *loader = loom_loader_new(ds, 50, true, true, loom_key_new(11));
  CHECK(opt && ds && loader);
  loom_stats after_first = {0};
  int step = 0;
  for (int epoch = 0; epoch < 8; epoch++) {
    loom_tensor *xb, *yb;
    while (loom_loader_next(loader, &xb, &yb)) {
      LOOM_SCOPE {
        loom_tensor *logits = loom_linear_forward(&fc2, loom_relu(loom_linear_forward(&fc1, xb)));
        loom_tensor *loss = loom_cross_entropy(logits, yb);
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
  double acc = 0;
  LOOM_SCOPE {
    LOOM_NO_GRAD {
      loom_tensor *xte = loom_slice(x, 0, DIGITS_TRAIN, DIGITS_ROWS, 1);
      loom_tensor *yte = loom_slice(y, 0, DIGITS_TRAIN, DIGITS_ROWS, 1);
      loom_tensor *pred = loom_argmax(
          loom_linear_forward(&fc2, loom_relu(loom_linear_forward(&fc1, xte))), 1, false);
      acc = loom_item(loom_mean_all(loom_cast(loom_eq(pred, yte), LOOM_F32)));
    }
  }
  printf("test accuracy after 8 epochs: %.2f%%\n", 100 * acc);
  /* PyTorch reaches about 92% with this setup on this split (the last 297 rows) */
  CHECK_MSG(acc >= 0.88, "accuracy %.4f", acc);
  loom_loader_free(loader);
  loom_dataset_free(ds);
  loom_optim_free(opt);
  loom_params_free(ps);
  loom_free(x), loom_free(y), loom_free(xtr), loom_free(ytr);
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
