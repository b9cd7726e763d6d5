/* The digits models of the examples (train_digits, export_digits): the
 * issue's MLP (64-128-10, with dropout while training) and CNN (two
 * conv-relu-pool blocks and a linear layer). A model is a struct of layers
 * and a forward function. */
#ifndef LOOM_EXAMPLES_DIGITS_MODELS_H
#define LOOM_EXAMPLES_DIGITS_MODELS_H

#include "loom.h"

typedef struct mlp {
  loom_linear fc1, fc2;
} mlp;

typedef struct cnn {
  loom_conv2d conv1, conv2;
  loom_linear fc;
} cnn;

typedef struct model {
  const char *name;
  loom_params *ps;
  mlp m;
  cnn c;
  bool is_cnn;
} model;

/* Dropout 0.1 after the hidden layer while training (0.1 to 0.3 did about
 * as well on the validation folds; docs/digits_recipe.md). */
static loom_tensor *mlp_forward(const mlp *m, const loom_tensor *x, bool train, loom_key key) {
  loom_tensor *flat = loom_flatten(x, 1, -1); /* [N, 1, 8, 8] -> [N, 64] */
  loom_tensor *h = loom_dropout(loom_relu(loom_linear_forward(&m->fc1, flat)), 0.1, key, train);
  return loom_linear_forward(&m->fc2, h);
}

static loom_tensor *cnn_forward(const cnn *c, const loom_tensor *x) {
  loom_tensor *h = loom_max_pool2d(loom_relu(loom_conv2d_forward(&c->conv1, x)), 2, 2, 0);
  h = loom_max_pool2d(loom_relu(loom_conv2d_forward(&c->conv2, h)), 2, 2, 0);
  return loom_linear_forward(&c->fc, loom_flatten(h, 1, -1));
}

/* Called inside a scope: the intermediates are the scope's. */
static loom_tensor *forward(const model *m, const loom_tensor *x, bool train, loom_key key) {
  return m->is_cnn ? cnn_forward(&m->c, x) : mlp_forward(&m->m, x, train, key);
}

static void build(model *m, bool is_cnn, loom_key key) {
  loom_key k[3];
  loom_key_split(key, k, 3);
  m->ps = loom_params_new();
  m->is_cnn = is_cnn;
  m->name = is_cnn ? "cnn" : "mlp";
  loom_conv2d_opts pad1 = {.padding = {1, 1}};
  if (is_cnn) {
    m->c.conv1 = loom_conv2d_new(m->ps, "conv1", 1, 16, 3, pad1, k[0]);
    m->c.conv2 = loom_conv2d_new(m->ps, "conv2", 16, 32, 3, pad1, k[1]);
    m->c.fc = loom_linear_new(m->ps, "fc", 32 * 2 * 2, 10, k[2]);
  } else {
    m->m.fc1 = loom_linear_new(m->ps, "fc1", 64, 128, k[0]);
    m->m.fc2 = loom_linear_new(m->ps, "fc2", 128, 10, k[1]);
  }
}

/* Bilinear resampling, zero outside the image: output pixel (i, j) of image
 * k samples the source at scale_k * (i, j) + (dy_k, dx_k), in pixels about
 * the image's centre. dy, dx, scale: [K, 1, 1]; the result, [K, 64, 64],
 * multiplies an image flattened to [64, 1]. Built by broadcasting (a
 * triangle kernel per axis). Called inside a scope. */
static loom_tensor *digits_warp(const loom_tensor *dy, const loom_tensor *dx,
                                const loom_tensor *scale) {
  loom_device dev = loom_device_of(dy);
  float row[64], col[64]; /* pixel centres about the image's centre */
  for (int p = 0; p < 64; p++) row[p] = (float)(p / 8) - 3.5f, col[p] = (float)(p % 8) - 3.5f;
  loom_tensor *rows = loom_from_data(row, LOOM_SHAPE(1, 64, 1), LOOM_F32, dev);
  loom_tensor *cols = loom_from_data(col, LOOM_SHAPE(1, 64, 1), LOOM_F32, dev);
  /* where output pixel p samples: [K, 64, 1]; against source pixel q: [.., 64] */
  loom_tensor *u = loom_add(loom_mul(scale, rows), dy), *v = loom_add(loom_mul(scale, cols), dx);
  loom_tensor *wy =
      loom_relu(loom_rsub_s(1, loom_abs(loom_sub(u, loom_reshape(rows, LOOM_SHAPE(1, 1, 64))))));
  loom_tensor *wx =
      loom_relu(loom_rsub_s(1, loom_abs(loom_sub(v, loom_reshape(cols, LOOM_SHAPE(1, 1, 64))))));
  return loom_mul(wy, wx);
}

/* The CNN's test-time augmentation: each image is classified as 9 copies,
 * shifted by {-s, 0, s} pixels in each direction (bilinear, s =
 * DIGITS_TTA_SHIFT), and the copies' softmax probabilities are averaged
 * (chosen on the training rows' validation folds; the MLP is evaluated on
 * the image alone: docs/digits_recipe.md says why). */
#define DIGITS_TTA_SHIFT 0.25

/* The model's class probabilities [N, 10] (eval mode) for images x
 * [N, 1, 8, 8] of pixels in [0, 1], standardized with the model's
 * input_stats buffer; for the CNN with test-time augmentation, the 9 copies
 * as one batch of 9N images. Called inside a scope. */
static loom_tensor *predict(const model *m, const loom_tensor *x) {
  loom_tensor *stats = loom_params_get(m->ps, "input_stats");
  loom_tensor *mean = loom_slice(stats, 0, 0, 1, 1), *std = loom_slice(stats, 0, 1, 2, 1);
  loom_free(stats);
  if (!m->is_cnn)
    return loom_softmax(forward(m, loom_div(loom_sub(x, mean), std), false, loom_key_new(0)), 1);
  loom_device dev = loom_device_of(x);
  int64_t n = loom_shape_of(x).dim[0];
  float dy[9], dx[9], one[9];
  for (int k = 0; k < 9; k++)
    dy[k] = (float)((k / 3 - 1) * DIGITS_TTA_SHIFT),
    dx[k] = (float)((k % 3 - 1) * DIGITS_TTA_SHIFT), one[k] = 1;
  loom_tensor *w = digits_warp(loom_from_data(dy, LOOM_SHAPE(9, 1, 1), LOOM_F32, dev),
                               loom_from_data(dx, LOOM_SHAPE(9, 1, 1), LOOM_F32, dev),
                               loom_from_data(one, LOOM_SHAPE(9, 1, 1), LOOM_F32, dev));
  loom_tensor *views = loom_matmul(loom_reshape(w, LOOM_SHAPE(9, 1, 64, 64)),
                                   loom_reshape(x, LOOM_SHAPE(1, n, 64, 1))); /* [9, N, 64, 1] */
  views = loom_reshape(loom_div(loom_sub(views, mean), std), LOOM_SHAPE(9 * n, 1, 8, 8));
  loom_tensor *probs = loom_softmax(forward(m, views, false, loom_key_new(0)), 1);
  int copies = 0;
  return loom_mean(loom_reshape(probs, LOOM_SHAPE(9, n, 10)), &copies, 1, false);
}

#endif
