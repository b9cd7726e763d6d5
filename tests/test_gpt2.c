/* A GPT-2 in the Hugging Face layout against PyTorch 1.13 (issue 18): the
 * checkpoint tests/data/gpt2_tiny.safetensors (seeded random weights, written
 * by tests/data/make_gpt2_fixture.py with its expected values) read with
 * loom_safetensors_read, run through examples/gpt2_model.h (the layout as
 * stored: Conv1D weights [in, out], q, k, v in one projection, the head tied
 * to wte), and compared: logits, loss, the gradient of every tensor, five
 * AdamW steps' losses and greedy decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/gpt2_model.h"
#include "check.h"
#include "loom.h"
#include "test_device.h"

enum { HEADS = 4 };

/* The largest |got - want| over the largest |want|. */
static double relative_error(loom_tensor *got, loom_tensor *want) {
  int64_t n = 1;
  loom_shape s = loom_shape_of(want);
  for (int i = 0; i < s.ndim; i++) n *= s.dim[i];
  double *g = malloc(sizeof(double) * (size_t)n), *e = malloc(sizeof(double) * (size_t)n);
  double worst = INFINITY, scale = 0;
  if (loom_copy_to_host(loom_cast(got, LOOM_F64), g, sizeof(double) * (size_t)n) == LOOM_OK &&
      loom_copy_to_host(want, e, sizeof(double) * (size_t)n) == LOOM_OK) {
    worst = 0;
    for (int64_t i = 0; i < n; i++) {
      worst = fmax(worst, fabs(g[i] - e[i]));
      scale = fmax(scale, fabs(e[i]));
    }
    worst = scale > 0 ? worst / scale : worst;
  }
  free(g), free(e);
  return worst;
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device()));
  loom_params *file =
      loom_safetensors_read(LOOM_SOURCE_DIR "/tests/data/gpt2_tiny.safetensors", test_device());
  loom_params *want =
      loom_safetensors_read(LOOM_SOURCE_DIR "/tests/data/gpt2_tiny_expected.safetensors", LOOM_CPU);
  CHECK(file && want);
  if (!file || !want) return check_report();
  /* the checkpoint's tensors, trainable, in a collection of their own */
  loom_params *ps = loom_params_new();
  for (int i = 0; i < loom_params_count(file); i++) {
    loom_tensor *t = loom_params_at(file, i);
    CHECK_OK(loom_params_add(ps, loom_params_name(file, i), t));
    loom_free(t);
  }
  gpt2_config cfg = {0};
  CHECK(gpt2_config_of(ps, HEADS, &cfg));
  CHECK_EQ_INT(cfg.layers, 2);
  int layers = cfg.layers;
  loom_scope_begin(); /* every tensor below is freed at its end */
  loom_tensor *all = loom_params_get(want, "tokens");
  loom_shape ts = loom_shape_of(all);
  int64_t b = ts.dim[0], t = ts.dim[1] - 1, v = cfg.vocab;
  loom_tensor *inputs = loom_to(loom_contiguous(loom_slice(all, 1, 0, t, 1)), test_device());
  loom_tensor *targets =
      loom_to(loom_reshape(loom_contiguous(loom_slice(all, 1, 1, t + 1, 1)), LOOM_SHAPE(b * t)),
              test_device());

  LOOM_SCOPE {
    loom_tensor *logits = gpt2_forward(ps, cfg, inputs);
    loom_tensor *loss = loom_cross_entropy(loom_reshape(logits, LOOM_SHAPE(b * t, v)), targets);
    CHECK_OK(loom_backward(loss));
    double err = relative_error(logits, loom_params_get(want, "logits"));
    CHECK_MSG(err <= 1e-5, "logits: relative error %.3g", err);
    double l = loom_item(loss), lw = loom_item(loom_params_get(want, "loss"));
    CHECK_MSG(fabs(l - lw) <= 1e-5 * fabs(lw), "loss %.9g, PyTorch %.9g", l, lw);
    double worst = 0;
    for (int i = 0; i < loom_params_count(ps); i++) {
      char name[128];
      snprintf(name, sizeof name, "grad.%s", loom_params_name(ps, i));
      loom_tensor *g = loom_grad(loom_params_at(ps, i));
      double e = g ? relative_error(g, loom_params_get(want, name)) : INFINITY;
      CHECK_MSG(e <= 1e-5, "the gradient of %s: relative error %.3g", loom_params_name(ps, i), e);
      worst = fmax(worst, e);
    }
    printf("GPT-2 (%d layers, %d heads) against PyTorch: logits %.2g, loss %.2g, gradients at most "
           "%.2g relative\n",
           layers, HEADS, err, fabs(l - lw) / fabs(lw), worst);
  }
  /* five AdamW steps, torch's defaults but lr 1e-2 and weight decay 0.1 */
  loom_adam_opts o = LOOM_ADAMW_DEFAULTS;
  o.lr = 1e-2, o.weight_decay = 0.1;
  loom_optim *opt = loom_adamw(ps, o);
  double losses[5], worst = 0;
  CHECK_OK(loom_copy_to_host(loom_params_get(want, "adamw_losses"), losses, sizeof losses));
  for (int step = 0; step < 5 && opt; step++) LOOM_SCOPE {
      loom_optim_zero_grad(opt);
      loom_tensor *logits = gpt2_forward(ps, cfg, inputs);
      loom_tensor *loss = loom_cross_entropy(loom_reshape(logits, LOOM_SHAPE(b * t, v)), targets);
      CHECK_OK(loom_backward(loss));
      CHECK_OK(loom_optim_step(opt));
      double l = loom_item(loss), e = fabs(l - losses[step]) / fabs(losses[step]);
      CHECK_MSG(e <= 1e-5, "AdamW step %d: loss %.9g, PyTorch %.9g", step, l, losses[step]);
      worst = fmax(worst, e);
    }
  printf("five AdamW steps: losses within %.2g relative of PyTorch's\n", worst);
  /* greedy decoding with the trained weights: 8 tokens after 4, on a fixed
   * window (causal attention keeps the later positions out), the same as
   * PyTorch's on the growing sequence */
  int64_t greedy[12], window[16] = {0};
  CHECK_OK(loom_copy_to_host(loom_params_get(want, "greedy"), greedy, sizeof greedy));
  memcpy(window, greedy, 4 * sizeof(int64_t));
  int same = 0;
  for (int n = 4; n < 12; n++) LOOM_NO_GRAD LOOM_SCOPE {
      loom_tensor *tok = loom_from_data(window, LOOM_SHAPE(1, t), LOOM_I64, test_device());
      loom_tensor *logits = gpt2_forward(ps, cfg, tok);
      loom_tensor *last = loom_slice(loom_reshape(logits, LOOM_SHAPE(t, v)), 0, n - 1, n, 1);
      int64_t next = -1;
      CHECK_OK(loom_item_i64(loom_argmax(last, -1, false), &next));
      window[n] = next;
      same += next == greedy[n];
    }
  CHECK_EQ_INT(same, 8);
  printf("greedy decoding: %d of 8 tokens as PyTorch's\n", same);
  /* the same with the KV cache: the prompt a token at a time, then 8 more;
   * each step's logits as the full forward's at that position */
  gpt2_cache *cache = gpt2_cache_new(cfg, 1, cfg.context);
  CHECK(cache != NULL);
  int cached_same = 0;
  double worst_logit = 0;
  int64_t next = greedy[0];
  uint64_t programs = 0; /* the decode steps' programs compiled from the second on: none */
  for (int n = 0; cache && n < 11; n++) LOOM_NO_GRAD LOOM_SCOPE {
      int64_t tok = n < 4 ? greedy[n] : next, at = n;
      loom_tensor *logits = gpt2_decode(
          ps, cfg, cache, loom_from_data(&tok, LOOM_SHAPE(1, 1), LOOM_I64, test_device()),
          loom_from_data(&at, LOOM_SHAPE0, LOOM_I64, test_device()));
      uint64_t before = loom_get_stats().graphs_compiled;
      CHECK_OK(loom_realize(logits)); /* with the cache's assignments */
      if (n > 0) programs += loom_get_stats().graphs_compiled - before;
      window[n] = tok;
      loom_tensor *full =
          gpt2_forward(ps, cfg, loom_from_data(window, LOOM_SHAPE(1, t), LOOM_I64, test_device()));
      loom_tensor *row = loom_reshape(
          loom_slice(loom_reshape(full, LOOM_SHAPE(t, v)), 0, n, n + 1, 1), LOOM_SHAPE(1, v));
      worst_logit = fmax(worst_logit, relative_error(logits, loom_cast(row, LOOM_F64)));
      CHECK_OK(loom_item_i64(loom_argmax(logits, -1, false), &next));
      if (n >= 3) cached_same += next == greedy[n + 1];
    }
  CHECK_EQ_INT(cached_same, 8);
  CHECK_EQ_INT((int)programs, 0); /* one program for every position */
  CHECK_MSG(worst_logit <= 1e-5, "KV-cache logits %.3g from the full forward's", worst_logit);
  printf("KV-cache decoding: %d of 8 tokens as PyTorch's, logits within %.2g of the full "
         "forward's\n",
         cached_same, worst_logit);
  gpt2_cache_free(cache);
  loom_optim_free(opt);
  CHECK_OK(loom_scope_end());
  loom_params_free(ps);
  loom_params_free(file);
  loom_params_free(want);
  return check_report();
}
