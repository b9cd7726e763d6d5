/* The digits training recipe shared by examples/train_digits.c and
 * tests/test_train.c (docs/digits_recipe.md: how it was chosen, on
 * cross-validation folds of the training rows only): inputs standardized
 * with the training pixels' mean and deviation, every training image warped
 * by a random small translation and scale, AdamW with a cosine schedule per
 * epoch, cross-entropy with label smoothing, batches of 32, 30 epochs. The
 * CNN is evaluated with test-time augmentation (predict, digits_models.h). */
#ifndef LOOM_EXAMPLES_DIGITS_RECIPE_H
#define LOOM_EXAMPLES_DIGITS_RECIPE_H

#include <math.h>

#include "digits_data.h"
#include "digits_models.h"
#include "loom.h"

#define DIGITS_BATCH 32
#define DIGITS_EPOCHS 30
#define DIGITS_LR 1e-2
#define DIGITS_WEIGHT_DECAY 0.05
#define DIGITS_LABEL_SMOOTHING 0.1
#define DIGITS_SHIFT 0.5  /* pixels each way, uniform */
#define DIGITS_SCALE 0.15 /* zoom in [0.85, 1.15], uniform */

/* The keys of one seeded run: everything random derives from the seed. */
typedef struct digits_keys {
  loom_key init, shuffle, steps;
} digits_keys;

static digits_keys digits_keys_of(uint64_t seed) {
  loom_key base = loom_key_new(seed);
  return (digits_keys){loom_key_fold(base, 0), loom_key_fold(base, 1), loom_key_fold(base, 2)};
}

/* One mean and standard deviation over the training pixels (a scalar pair,
 * not per pixel: the corner pixels are almost always 0 in training). */
static void digits_pixel_stats(const digits *d, double stats[2]) {
  double sum = 0, sq = 0, n = (double)DIGITS_TRAIN * DIGITS_PIXELS;
  for (int r = 0; r < DIGITS_TRAIN; r++)
    for (int c = 0; c < DIGITS_PIXELS; c++)
      sum += d->pixels[r][c], sq += d->pixels[r][c] * d->pixels[r][c];
  stats[0] = sum / n;
  stats[1] = sqrt(sq / n - stats[0] * stats[0]);
}

/* U(-r, r) per image, [n, 1, 1]. */
static loom_tensor *digits_uniform(loom_key key, int64_t n, double r, loom_device dev) {
  loom_tensor *u = loom_rand_key(key, LOOM_SHAPE(n, 1, 1), LOOM_F32, dev);
  return loom_mul_s(loom_sub_s(u, 0.5), 2 * r);
}

/* Augmentation on the device, fused into the step: each image [N, 1, 8, 8]
 * of pixels in [0, 1] is resampled (bilinear, zero outside) at
 * scale * (i, j) + shift about its centre. The resampling is a per-image
 * 64x64 interpolation matrix built by broadcasting and applied with one
 * batched matmul. Sub-pixel shifts and zoom model other writers' placement
 * and size of digits that were 32x32 bitmaps before being averaged to 8x8;
 * whole-pixel shifts move an 8x8 digit too far for the MLP. Called inside a
 * scope: the intermediates are the scope's. */
static loom_tensor *digits_augment(const loom_tensor *x, loom_key key) {
  loom_key k[3];
  loom_key_split(key, k, 3);
  int64_t n = loom_shape_of(x).dim[0];
  loom_device dev = loom_device_of(x);
  loom_tensor *dy = digits_uniform(k[0], n, DIGITS_SHIFT, dev);
  loom_tensor *dx = digits_uniform(k[1], n, DIGITS_SHIFT, dev);
  loom_tensor *scale = loom_add_s(digits_uniform(k[2], n, DIGITS_SCALE, dev), 1.0);
  loom_tensor *out = loom_matmul(digits_warp(dy, dx, scale), loom_reshape(x, LOOM_SHAPE(n, 64, 1)));
  return loom_reshape(out, LOOM_SHAPE(n, 1, 8, 8));
}

/* torch's cross_entropy(label_smoothing=e): (1 - e) * CE + e * the mean over
 * classes of -log p, both averaged over the batch. It keeps the logits from
 * growing without bound on a training set the model fits exactly. */
static loom_tensor *digits_loss(const loom_tensor *logits, const loom_tensor *labels) {
  loom_tensor *ce = loom_cross_entropy(logits, labels);
  loom_tensor *uniform = loom_neg(loom_mean_all(loom_log_softmax(logits, 1)));
  return loom_add(loom_mul_s(ce, 1 - DIGITS_LABEL_SMOOTHING),
                  loom_mul_s(uniform, DIGITS_LABEL_SMOOTHING));
}

/* Cosine from DIGITS_LR to 0 over the epochs, set once per epoch (1-based). */
static double digits_lr(int epoch, int epochs) {
  return DIGITS_LR * 0.5 * (1 + cos(M_PI * (epoch - 1) / epochs));
}

static loom_optim *digits_optimizer(loom_params *ps) {
  /* betas and eps left out: torch's defaults */
  return loom_adamw(ps, (loom_adam_opts){.lr = DIGITS_LR, .weight_decay = DIGITS_WEIGHT_DECAY});
}

#endif
