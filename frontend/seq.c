/* Sequential composition of stages (TorchLean's seq). */
#include <stdlib.h>

#include "frontend/frontend.h"

typedef struct stage {
  loom_stage_fn fn;
  const void *layer;
} stage;

struct loom_seq {
  stage *stages;
  int n, cap;
};

loom_seq *loom_seq_new(void) {
  loom_seq *s = calloc(1, sizeof *s);
  if (!s) lm_fail(LOOM_ERR_OOM, "loom_seq_new: out of memory");
  return s;
}

void loom_seq_free(loom_seq *s) {
  if (!s) return;
  free(s->stages);
  free(s);
}

loom_status loom_seq_add(loom_seq *s, loom_stage_fn fn, const void *layer) {
  if (!s || !fn) return lm_fail(LOOM_ERR_NULL, "loom_seq_add: seq or function is NULL");
  if (s->n == s->cap) {
    int ncap = s->cap ? 2 * s->cap : 8;
    stage *grown = realloc(s->stages, sizeof(stage) * (size_t)ncap);
    if (!grown) return lm_fail(LOOM_ERR_OOM, "loom_seq_add: out of memory");
    s->stages = grown, s->cap = ncap;
  }
  s->stages[s->n++] = (stage){fn, layer};
  return LOOM_OK;
}

LM_PUBLIC(loom_tensor *, loom_seq_forward, (const loom_seq *s, const loom_tensor *x, bool train),
          (s, x, train)) {
  if (!s) return lm_error(LOOM_ERR_NULL, "loom_seq_forward: seq is NULL");
  loom_tensor *err;
  if ((err = lm_check("loom_seq_forward", x))) return err;
  int token = lm_composite_begin();
  loom_tensor *cur = (loom_tensor *)x;
  for (int i = 0; i < s->n; i++) cur = s->stages[i].fn(s->stages[i].layer, cur, train);
  return lm_composite_end(token, cur == x ? lm_tensor_ref(x) : cur);
}

loom_tensor *loom_stage_linear(const void *layer, const loom_tensor *x, bool train) {
  (void)train;
  return loom_linear_forward(layer, x);
}
loom_tensor *loom_stage_conv2d(const void *layer, const loom_tensor *x, bool train) {
  (void)train;
  return loom_conv2d_forward(layer, x);
}
loom_tensor *loom_stage_batchnorm2d(const void *layer, const loom_tensor *x, bool train) {
  return loom_batchnorm2d_forward(layer, x, train);
}
loom_tensor *loom_stage_layernorm(const void *layer, const loom_tensor *x, bool train) {
  (void)train;
  return loom_layernorm_forward(layer, x);
}
loom_tensor *loom_stage_relu(const void *unused, const loom_tensor *x, bool train) {
  (void)unused, (void)train;
  return loom_relu(x);
}
loom_tensor *loom_stage_tanh(const void *unused, const loom_tensor *x, bool train) {
  (void)unused, (void)train;
  return loom_tanh(x);
}
loom_tensor *loom_stage_flatten(const void *unused, const loom_tensor *x, bool train) {
  (void)unused, (void)train;
  return loom_flatten(x, 1, -1);
}
loom_tensor *loom_stage_max_pool2d(const void *kernel, const loom_tensor *x, bool train) {
  (void)train;
  int k = kernel ? *(const int *)kernel : 2;
  return loom_max_pool2d(x, k, k, 0);
}
