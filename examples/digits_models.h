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

#endif
