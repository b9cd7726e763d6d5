/* GPT-2 in the Hugging Face layout, written with loom's ops: the tensors of
 * a model.safetensors as stored (wte, wpe, h.<i>.ln_1, h.<i>.attn.c_attn and
 * c_proj as Conv1D weights [in, out], h.<i>.ln_2, h.<i>.mlp.c_fc and c_proj,
 * ln_f; the head tied to wte), so a checkpoint loads with no renaming or
 * transposing. Used by examples/gpt2.c and tests/test_gpt2.c (which checks
 * it against PyTorch). */
#ifndef LOOM_EXAMPLES_GPT2_MODEL_H
#define LOOM_EXAMPLES_GPT2_MODEL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"

typedef struct gpt2_config {
  int layers, heads;
  int64_t vocab, context, embed;
  /* what the forward computes in (LOOM_F32, the zero value, or LOOM_BF16 /
   * LOOM_F16: mixed precision, each weight cast from its stored dtype where
   * it is used, so gradients and the optimizer stay in the stored dtype) */
  loom_dtype compute;
} gpt2_config;

/* The tensor named name in ps (a new reference, in the current scope). */
static inline loom_tensor *gpt2_tensor(const loom_params *ps, const char *name) {
  loom_tensor *t = loom_params_get(ps, name);
  if (!t) fprintf(stderr, "gpt2: the model has no tensor '%s'\n", name);
  return t;
}

/* The configuration a checkpoint's shapes give (the heads are not among
 * them: GPT-2 keeps them in config.json); false when a tensor is missing. */
static inline bool gpt2_config_of(const loom_params *ps, int heads, gpt2_config *c) {
  loom_tensor *wte = loom_params_get(ps, "wte.weight"), *wpe = loom_params_get(ps, "wpe.weight");
  bool ok = wte && wpe;
  *c = (gpt2_config){0};
  if (ok) {
    c->vocab = loom_shape_of(wte).dim[0], c->embed = loom_shape_of(wte).dim[1];
    c->context = loom_shape_of(wpe).dim[0], c->heads = heads, c->layers = 0;
    for (int i = 0; i < loom_params_count(ps); i++) {
      const char *name = loom_params_name(ps, i);
      if (!strncmp(name, "h.", 2) && atoi(name + 2) + 1 > c->layers) c->layers = atoi(name + 2) + 1;
    }
  }
  loom_free(wte), loom_free(wpe);
  return ok && c->layers > 0 && heads > 0 && c->embed % heads == 0;
}

/* A new model on the default device, with GPT-2's initialization: weights N(0, 0.02^2) (the
 * residual projections' scaled by 1/sqrt(2 layers)), wpe N(0, 0.01^2), zero
 * biases, unit norms. */
static inline loom_params *gpt2_new(gpt2_config c, loom_key key) {
  loom_params *ps = loom_params_new();
  int64_t e = c.embed;
  int n = 0;
  char name[96];
#define GPT2_ADD(label, shape, std, one)                                                           \
  do {                                                                                             \
    loom_tensor *t_ = (std) > 0                                                                    \
                          ? loom_mul_s(loom_randn_key(loom_key_fold(key, (uint64_t)n++), shape,    \
                                                      LOOM_F32, loom_default_device()),            \
                                       (std))                                                      \
                          : loom_full(shape, (one) ? 1 : 0, LOOM_F32, loom_default_device());      \
    loom_realize(t_);                                                                              \
    loom_params_add(ps, label, t_);                                                                \
    loom_free(t_);                                                                                 \
  } while (0)
  LOOM_SCOPE {
    GPT2_ADD("wte.weight", LOOM_SHAPE(c.vocab, e), 0.02, false);
    GPT2_ADD("wpe.weight", LOOM_SHAPE(c.context, e), 0.01, false);
    double proj_std = 0.02 / sqrt(2.0 * c.layers);
    for (int l = 0; l < c.layers; l++) {
      const char *fields[] = {"ln_1", "attn.c_attn", "attn.c_proj",
                              "ln_2", "mlp.c_fc",    "mlp.c_proj"};
      const int64_t ins[] = {0, e, e, 0, e, 4 * e}, outs[] = {e, 3 * e, e, e, 4 * e, e};
      for (int f = 0; f < 6; f++) {
        bool is_norm = ins[f] == 0;
        double std = strstr(fields[f], "c_proj") ? proj_std : 0.02;
        snprintf(name, sizeof name, "h.%d.%s.weight", l, fields[f]);
        if (is_norm)
          GPT2_ADD(name, LOOM_SHAPE(outs[f]), 0, true);
        else
          GPT2_ADD(name, LOOM_SHAPE(ins[f], outs[f]), std, false);
        snprintf(name, sizeof name, "h.%d.%s.bias", l, fields[f]);
        GPT2_ADD(name, LOOM_SHAPE(outs[f]), 0, false);
      }
    }
    GPT2_ADD("ln_f.weight", LOOM_SHAPE(e), 0, true);
    GPT2_ADD("ln_f.bias", LOOM_SHAPE(e), 0, false);
  }
#undef GPT2_ADD
  return ps;
}

/* Tensor `name` of ps in x's dtype (the forward's compute dtype). */
static inline loom_tensor *gpt2_like(const loom_params *ps, const char *name,
                                     const loom_tensor *x) {
  return loom_cast(gpt2_tensor(ps, name), loom_dtype_of(x));
}

/* x @ W + b, W [in, out] (Hugging Face's Conv1D) */
static inline loom_tensor *gpt2_conv1d(const loom_params *ps, const char *prefix, loom_tensor *x) {
  char wn[96], bn[96];
  snprintf(wn, sizeof wn, "%s.weight", prefix), snprintf(bn, sizeof bn, "%s.bias", prefix);
  return loom_add(loom_matmul(x, gpt2_like(ps, wn, x)), gpt2_like(ps, bn, x));
}

static inline loom_tensor *gpt2_norm(const loom_params *ps, const char *prefix, loom_tensor *x) {
  char wn[96], bn[96];
  snprintf(wn, sizeof wn, "%s.weight", prefix), snprintf(bn, sizeof bn, "%s.bias", prefix);
  return loom_layer_norm(x, 1, gpt2_like(ps, wn, x), gpt2_like(ps, bn, x), 1e-5);
}

/* Layer l's queries, keys and values of x [B, T, E], each [B, H, T, E/H];
 * false (the error recorded) when they cannot be made. */
static inline bool gpt2_qkv(const loom_params *ps, gpt2_config c, int l, loom_tensor *x,
                            loom_tensor **part) {
  loom_shape xs = loom_shape_of(x);
  int64_t b = xs.dim[0], t = xs.dim[1], e = c.embed;
  char p[64];
  snprintf(p, sizeof p, "h.%d.ln_1", l);
  loom_tensor *h = gpt2_norm(ps, p, x);
  snprintf(p, sizeof p, "h.%d.attn.c_attn", l);
  if (loom_split(gpt2_conv1d(ps, p, h), e, -1, part, 3, NULL) != LOOM_OK) return false;
  for (int i = 0; i < 3; i++) /* [B, T, E] -> [B, H, T, E/H] */
    part[i] = loom_transpose(loom_reshape(part[i], LOOM_SHAPE(b, t, c.heads, e / c.heads)), 1, 2);
  return true;
}

/* The rest of layer l after attention gave y [B, H, T, E/H]: its
 * projection's residual, then the MLP's. */
static inline loom_tensor *gpt2_block_rest(const loom_params *ps, int l, loom_tensor *x,
                                           loom_tensor *y) {
  loom_shape xs = loom_shape_of(x);
  char p[64];
  y = loom_reshape(loom_transpose(y, 1, 2), xs);
  snprintf(p, sizeof p, "h.%d.attn.c_proj", l);
  x = loom_add(x, gpt2_conv1d(ps, p, y));
  snprintf(p, sizeof p, "h.%d.ln_2", l);
  loom_tensor *h = gpt2_norm(ps, p, x);
  snprintf(p, sizeof p, "h.%d.mlp.c_fc", l);
  h = loom_gelu_tanh(gpt2_conv1d(ps, p, h));
  snprintf(p, sizeof p, "h.%d.mlp.c_proj", l);
  return loom_add(x, gpt2_conv1d(ps, p, h));
}

/* tokens [B, T] (I64) -> logits [B, T, vocab]. Call it inside a scope. */
static inline loom_tensor *gpt2_forward(const loom_params *ps, gpt2_config c, loom_tensor *tokens) {
  int64_t t = loom_shape_of(tokens).dim[1];
  loom_dtype dt = c.compute; /* LOOM_F32 is 0 */
  loom_tensor *wte = loom_cast(gpt2_tensor(ps, "wte.weight"), dt);
  loom_tensor *x = loom_add(loom_embedding_f(tokens, wte),
                            loom_cast(loom_slice(gpt2_tensor(ps, "wpe.weight"), 0, 0, t, 1), dt));
  for (int l = 0; l < c.layers; l++) {
    loom_tensor *part[3] = {NULL, NULL, NULL};
    if (!gpt2_qkv(ps, c, l, x, part)) return loom_retain(x); /* the error is recorded */
    loom_tensor *y = loom_scaled_dot_product_attention(part[0], part[1], part[2], NULL, true, 0);
    x = gpt2_block_rest(ps, l, x, y);
  }
  return loom_matmul(gpt2_norm(ps, "ln_f", x), loom_transpose(wte, 0, 1));
}

/*
 * Decoding with a KV cache: per layer, the keys and values of every position
 * so far, [B, H, length, E/H], each token's written at its position
 * (loom_slice_update with the position a tensor of its own, not a growing
 * tensor), so one compiled program serves every position, and the cache is
 * updated in place.
 */
typedef struct gpt2_cache {
  int layers;
  loom_tensor **k, **v; /* [layers] each, owned (in no scope) */
} gpt2_cache;

static inline void gpt2_cache_free(gpt2_cache *cache) {
  if (!cache) return;
  for (int l = 0; l < cache->layers; l++) {
    if (cache->k) loom_free(cache->k[l]);
    if (cache->v) loom_free(cache->v[l]);
  }
  free(cache->k), free(cache->v), free(cache);
}

/* Zeros for batch rows and `length` positions (at most the context), on the
 * default device; NULL when out of memory. */
static inline gpt2_cache *gpt2_cache_new(gpt2_config c, int64_t batch, int64_t length) {
  gpt2_cache *cache = calloc(1, sizeof *cache);
  if (!cache) return NULL;
  cache->k = calloc((size_t)c.layers, sizeof *cache->k);
  cache->v = calloc((size_t)c.layers, sizeof *cache->v);
  if (!cache->k || !cache->v) {
    gpt2_cache_free(cache);
    return NULL;
  }
  cache->layers = c.layers;
  loom_shape s = LOOM_SHAPE(batch, c.heads, length, c.embed / c.heads);
  for (int l = 0; l < c.layers; l++) {
    cache->k[l] = loom_zeros(s, LOOM_F32, loom_default_device());
    cache->v[l] = loom_zeros(s, LOOM_F32, loom_default_device());
    loom_realize(cache->k[l]), loom_realize(cache->v[l]);
  }
  return cache;
}

/* One token per batch row, tokens [B, 1] (I64), at position pos (a 0-d I64
 * tensor, below the cache's length) -> the next token's logits [B, vocab]; the
 * cache takes this position's keys and values at the same realization (its
 * tensors are assigned). Call it inside a scope. */
static inline loom_tensor *gpt2_decode(const loom_params *ps, gpt2_config c, gpt2_cache *cache,
                                       loom_tensor *tokens, loom_tensor *pos) {
  int64_t b = loom_shape_of(tokens).dim[0];
  loom_tensor *wte = gpt2_tensor(ps, "wte.weight");
  loom_tensor *x =
      loom_add(loom_embedding_f(tokens, wte),
               loom_embedding_f(loom_reshape(pos, LOOM_SHAPE(1)), gpt2_tensor(ps, "wpe.weight")));
  /* [1, 1, length, 1]: the positions */
  int64_t length = loom_shape_of(cache->k[0]).dim[2];
  loom_tensor *at =
      loom_reshape(loom_arange(0, (double)length, 1, LOOM_I64, loom_device_of(tokens)),
                   LOOM_SHAPE(1, 1, length, 1));
  loom_tensor *mask = loom_transpose(loom_le(at, pos), 2, 3); /* [1, 1, 1, length]: the keys seen */
  for (int l = 0; l < c.layers; l++) {
    loom_tensor *part[3] = {NULL, NULL, NULL};
    if (!gpt2_qkv(ps, c, l, x, part)) return loom_retain(x); /* the error is recorded */
    loom_tensor *keys = loom_slice_update(cache->k[l], 2, pos, part[1]);
    loom_tensor *values = loom_slice_update(cache->v[l], 2, pos, part[2]);
    loom_assign(cache->k[l], keys), loom_assign(cache->v[l], values);
    loom_tensor *y = loom_scaled_dot_product_attention(part[0], keys, values, mask, false, 0);
    x = gpt2_block_rest(ps, l, x, y);
  }
  loom_tensor *logits = loom_matmul(gpt2_norm(ps, "ln_f", x), loom_transpose(wte, 0, 1));
  return loom_reshape(logits, LOOM_SHAPE(b, c.vocab));
}

#endif
