/* Layers: plain structs whose tensors live in a parameter collection, with
 * PyTorch's default initialization drawn from a key. */
#include <math.h>
#include <stdio.h>

#include "frontend/frontend.h"

/* Realizes t and adds it to ps as "<layer>.<field>"; returns the collection's
 * handle (borrowed) or NULL. The caller's own reference is released. */
static loom_tensor *register_tensor(loom_params *ps, const char *layer, const char *field,
                                    loom_tensor *t, bool trainable) {
  char name[256];
  snprintf(name, sizeof name, "%s.%s", layer ? layer : "", field);
  loom_status st = loom_status_of(t) ? loom_status_of(t) : loom_realize(t);
  if (!st) st = trainable ? loom_params_add(ps, name, t) : loom_params_add_buffer(ps, name, t);
  loom_tensor *kept = st ? NULL : t;
  loom_free(t); /* the collection holds its own reference */
  return kept;
}

/* U(-bound, bound), as PyTorch's kaiming_uniform(a=sqrt(5)) and bias init give
 * with bound = 1/sqrt(fan_in). */
static loom_tensor *uniform(loom_key key, loom_shape shape, double bound) {
  int token = lm_composite_begin();
  loom_tensor *u = loom_rand_key(key, shape, LOOM_F32, loom_default_device());
  return lm_composite_end(token, loom_sub_s(loom_mul_s(u, 2 * bound), bound));
}

static bool check_sizes(const char *op, loom_params *ps, int64_t a, int64_t b) {
  if (!ps) return lm_fail(LOOM_ERR_NULL, "%s: params is NULL", op), false;
  if (a <= 0 || b <= 0)
    return lm_fail(LOOM_ERR_VALUE, "%s: sizes must be positive, got %lld and %lld", op,
                   (long long)a, (long long)b),
           false;
  return true;
}

loom_linear loom_linear_new(loom_params *ps, const char *name, int64_t in, int64_t out,
                            loom_key key) {
  loom_linear l = {NULL, NULL};
  if (!check_sizes("loom_linear_new", ps, in, out)) return l;
  loom_key k[2];
  loom_key_split(key, k, 2);
  double bound = 1.0 / sqrt((double)in);
  l.weight = register_tensor(ps, name, "weight", uniform(k[0], LOOM_SHAPE(out, in), bound), true);
  l.bias = register_tensor(ps, name, "bias", uniform(k[1], LOOM_SHAPE(out), bound), true);
  return l;
}

LM_PUBLIC(loom_tensor *, loom_linear_forward, (const loom_linear *l, const loom_tensor *x),
          (l, x)) {
  if (!l) return lm_error(LOOM_ERR_NULL, "loom_linear_forward: layer is NULL");
  return loom_linear_f(x, l->weight, l->bias);
}

loom_conv2d loom_conv2d_new(loom_params *ps, const char *name, int64_t in, int64_t out, int kernel,
                            loom_conv2d_opts opts, loom_key key) {
  loom_conv2d c = {NULL, NULL, opts};
  int64_t groups = opts.groups > 0 ? opts.groups : 1;
  if (!check_sizes("loom_conv2d_new", ps, in, out)) return c;
  if (kernel <= 0 || in % groups || out % groups) {
    lm_fail(LOOM_ERR_VALUE, "loom_conv2d_new: kernel %d, channels %lld -> %lld, groups %lld",
            kernel, (long long)in, (long long)out, (long long)groups);
    return c;
  }
  loom_key k[2];
  loom_key_split(key, k, 2);
  double bound = 1.0 / sqrt((double)(in / groups * kernel * kernel));
  c.weight = register_tensor(
      ps, name, "weight", uniform(k[0], LOOM_SHAPE(out, in / groups, kernel, kernel), bound), true);
  c.bias = register_tensor(ps, name, "bias", uniform(k[1], LOOM_SHAPE(out), bound), true);
  return c;
}

LM_PUBLIC(loom_tensor *, loom_conv2d_forward, (const loom_conv2d *c, const loom_tensor *x),
          (c, x)) {
  if (!c) return lm_error(LOOM_ERR_NULL, "loom_conv2d_forward: layer is NULL");
  return loom_conv2d_f(x, c->weight, c->bias, c->opts);
}

loom_batchnorm2d loom_batchnorm2d_new(loom_params *ps, const char *name, int64_t channels) {
  loom_batchnorm2d b = {NULL, NULL, NULL, NULL, 0.1, 1e-5};
  if (!check_sizes("loom_batchnorm2d_new", ps, channels, 1)) return b;
  loom_shape s = LOOM_SHAPE(channels);
  b.weight =
      register_tensor(ps, name, "weight", loom_ones(s, LOOM_F32, loom_default_device()), true);
  b.bias = register_tensor(ps, name, "bias", loom_zeros(s, LOOM_F32, loom_default_device()), true);
  b.running_mean = register_tensor(ps, name, "running_mean",
                                   loom_zeros(s, LOOM_F32, loom_default_device()), false);
  b.running_var = register_tensor(ps, name, "running_var",
                                  loom_ones(s, LOOM_F32, loom_default_device()), false);
  return b;
}

LM_PUBLIC(loom_tensor *, loom_batchnorm2d_forward,
          (const loom_batchnorm2d *b, const loom_tensor *x, bool train), (b, x, train)) {
  if (!b) return lm_error(LOOM_ERR_NULL, "loom_batchnorm2d_forward: layer is NULL");
  /* include/loom.h's options rule: zero fields are torch's defaults */
  return loom_batch_norm(x, b->running_mean, b->running_var, b->weight, b->bias, train,
                         lm_option(b->momentum, 0.1), lm_option(b->eps, 1e-5));
}

loom_layernorm loom_layernorm_new(loom_params *ps, const char *name, int64_t dim) {
  loom_layernorm l = {NULL, NULL, 1e-5};
  if (!check_sizes("loom_layernorm_new", ps, dim, 1)) return l;
  l.weight = register_tensor(ps, name, "weight",
                             loom_ones(LOOM_SHAPE(dim), LOOM_F32, loom_default_device()), true);
  l.bias = register_tensor(ps, name, "bias",
                           loom_zeros(LOOM_SHAPE(dim), LOOM_F32, loom_default_device()), true);
  return l;
}

LM_PUBLIC(loom_tensor *, loom_layernorm_forward, (const loom_layernorm *l, const loom_tensor *x),
          (l, x)) {
  if (!l) return lm_error(LOOM_ERR_NULL, "loom_layernorm_forward: layer is NULL");
  return loom_layer_norm(x, 1, l->weight, l->bias, lm_option(l->eps, 1e-5));
}

loom_embedding loom_embedding_new(loom_params *ps, const char *name, int64_t num, int64_t dim,
                                  loom_key key) {
  loom_embedding e = {NULL};
  if (!check_sizes("loom_embedding_new", ps, num, dim)) return e;
  e.weight = register_tensor(
      ps, name, "weight",
      loom_randn_key(key, LOOM_SHAPE(num, dim), LOOM_F32, loom_default_device()), true);
  return e;
}

LM_PUBLIC(loom_tensor *, loom_embedding_forward,
          (const loom_embedding *e, const loom_tensor *indices), (e, indices)) {
  if (!e) return lm_error(LOOM_ERR_NULL, "loom_embedding_forward: layer is NULL");
  return loom_embedding_f(indices, e->weight);
}

/* torch.nn.MultiheadAttention's parameters and initialization (xavier
 * uniform over the stacked q, k, v projection; zero biases; the output
 * projection a linear layer's weight). */
loom_mha loom_mha_new(loom_params *ps, const char *name, int64_t embed, int64_t heads, bool causal,
                      loom_key key) {
  loom_mha m = {NULL, NULL, NULL, NULL, heads, causal};
  if (!check_sizes("loom_mha_new", ps, embed, heads)) return m;
  if (embed % heads != 0) {
    lm_fail(LOOM_ERR_VALUE, "loom_mha_new: %lld heads do not divide the embedding %lld",
            (long long)heads, (long long)embed);
    return m;
  }
  loom_key k[2];
  loom_key_split(key, k, 2);
  loom_device dev = loom_default_device();
  m.in_proj_weight = register_tensor(
      ps, name, "in_proj_weight",
      uniform(k[0], LOOM_SHAPE(3 * embed, embed), sqrt(6.0 / (double)(embed + 3 * embed))), true);
  m.in_proj_bias = register_tensor(ps, name, "in_proj_bias",
                                   loom_zeros(LOOM_SHAPE(3 * embed), LOOM_F32, dev), true);
  m.out_proj_weight =
      register_tensor(ps, name, "out_proj.weight",
                      uniform(k[1], LOOM_SHAPE(embed, embed), 1.0 / sqrt((double)embed)), true);
  m.out_proj_bias = register_tensor(ps, name, "out_proj.bias",
                                    loom_zeros(LOOM_SHAPE(embed), LOOM_F32, dev), true);
  return m;
}

/* x [B, T, E] (or [T, E]): q, k, v = x W_in^T + b_in split three ways, H heads
 * of E/H each, scaled dot-product attention, heads joined, the output
 * projection. */
LM_PUBLIC(loom_tensor *, loom_mha_forward, (const loom_mha *m, const loom_tensor *x), (m, x)) {
  const char *op = "loom_mha_forward";
  if (!m) return lm_error(LOOM_ERR_NULL, "%s: layer is NULL", op);
  loom_tensor *err;
  if ((err = lm_check(op, x)) || (err = lm_check(op, m->in_proj_weight))) return err;
  const loom_shape *s = &x->node->shape;
  int64_t e = m->in_proj_weight->node->shape.dim[1], h = m->heads;
  char sx[128];
  if ((s->ndim != 2 && s->ndim != 3) || s->dim[s->ndim - 1] != e || h <= 0 || e % h != 0)
    return lm_error(LOOM_ERR_SHAPE, "%s: needs x [B, T, %lld] or [T, %lld] for %lld heads, got %s",
                    op, (long long)e, (long long)e, (long long)h, lm_shape_str(s, sx, sizeof sx));
  int token = lm_composite_begin();
  bool batched = s->ndim == 3;
  int64_t b = batched ? s->dim[0] : 1, t = s->dim[s->ndim - 2], d = e / h;
  loom_tensor *qkv = loom_linear_f(x, m->in_proj_weight, m->in_proj_bias), *part[3];
  loom_status st = loom_chunk(qkv, 3, -1, part, NULL);
  if (st) return lm_composite_end(token, lm_error_recorded(st));
  for (int i = 0; i < 3; i++) /* [B, T, E] -> [B, H, T, D] */
    part[i] = loom_transpose(loom_reshape(part[i], LOOM_SHAPE(b, t, h, d)), 1, 2);
  loom_tensor *heads =
      loom_scaled_dot_product_attention(part[0], part[1], part[2], NULL, m->causal, 0);
  loom_tensor *joined =
      loom_reshape(loom_transpose(heads, 1, 2), batched ? LOOM_SHAPE(b, t, e) : LOOM_SHAPE(t, e));
  return lm_composite_end(token, loom_linear_f(joined, m->out_proj_weight, m->out_proj_bias));
}
