/* gpt2: GPT-2 in the Hugging Face layout (examples/gpt2_model.h): train a
 * byte-level one on a text, or load a model.safetensors, then sample.
 *
 *   build/gpt2 [--train text] [--steps N] [--bf16] [--save out.safetensors]
 *   build/gpt2 --load model.safetensors [--heads 12] [--prompt-ids 464,3290]
 *   common: [--prompt "text"] [--tokens N] [--temperature 0.8] [--top-k 20]
 *
 * Without --load it trains (2 layers, 4 heads, 96 wide, context 64, the 256
 * byte values as its vocabulary) on the text, the GNU GPL v3 as Debian ships
 * it by default: AdamW with no decay on biases and norms (GPT-2's recipe), a
 * warmup-cosine learning rate, gradient clipping at 1, one compiled program
 * per step. A loaded checkpoint brings its own sizes (the heads come from
 * --heads: GPT-2 keeps them in config.json) and its tokens are ids (loom has
 * no BPE tokenizer). Sampling decodes a token at a time with a KV cache
 * (examples/gpt2_model.h gpt2_decode: each position's keys and values written
 * into a cache of the context's length, the position a tensor), so one
 * compiled program serves every position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_model.h"
#include "loom.h"

static bool decays(const char *name, loom_shape shape, void *ud) {
  (void)name, (void)ud;
  return shape.ndim < 2; /* biases and norms: no decay */
}

static unsigned char *read_text(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *text = malloc(*len > 0 ? (size_t)*len : 1);
  if (text && fread(text, 1, (size_t)*len, f) != (size_t)*len) free(text), text = NULL;
  fclose(f);
  return text;
}

static int train(loom_params *ps, gpt2_config c, const char *path, int steps) {
  long len = 0;
  unsigned char *text = read_text(path, &len);
  if (!text || len < c.context + 2) {
    fprintf(stderr, "gpt2: cannot read a text of at least %lld bytes from %s\n",
            (long long)c.context + 2, path);
    free(text);
    return 1;
  }
  loom_adam_opts opts = LOOM_ADAMW_DEFAULTS;
  opts.lr = 3e-3, opts.weight_decay = 0.1;
  loom_optim *opt = loom_adamw(ps, opts);
  if (!opt || loom_optim_group(opt, decays, NULL, 1, 0) != LOOM_OK) {
    fprintf(stderr, "gpt2: %s\n", loom_last_error());
    return 1;
  }
  enum { BATCH = 16 };
  int64_t t = c.context, *x = malloc(sizeof(int64_t) * BATCH * t),
          *y = malloc(sizeof(int64_t) * BATCH * t);
  printf("training on %ld bytes of %s\n", len, path);
  unsigned seed = 7;
  for (int step = 0; step < steps; step++) {
    for (int b = 0; b < BATCH; b++) { /* random windows, the next byte as target */
      seed = seed * 1103515245u + 12345u;
      long at = (long)((seed >> 4) % (unsigned)(len - t - 1));
      for (int64_t i = 0; i < t; i++) x[b * t + i] = text[at + i], y[b * t + i] = text[at + i + 1];
    }
    double loss_value = NAN;
    LOOM_SCOPE {
      loom_tensor *tokens = loom_from_data(x, LOOM_SHAPE(BATCH, t), LOOM_I64, LOOM_CPU);
      loom_tensor *targets = loom_from_data(y, LOOM_SHAPE(BATCH * t), LOOM_I64, LOOM_CPU);
      loom_tensor *logits =
          loom_reshape(gpt2_forward(ps, c, tokens), LOOM_SHAPE(BATCH * t, c.vocab));
      loom_tensor *loss = loom_cross_entropy_ex(logits, targets, (loom_cross_entropy_opts){0});
      loom_optim_zero_grad(opt);
      loom_status st = loom_backward(loss);
      if (st == LOOM_OK) {
        loom_clip_grad_norm(ps, 1.0);
        loom_optim_set_lr(opt, loom_lr_warmup_cosine(step, steps / 10, steps, 3e-3, 3e-4));
        st = loom_optim_step(opt);
      }
      if (st == LOOM_OK) loss_value = loom_item(loss); /* forward, backward, clip, update */
    }
    if (step % 100 == 0 || step == steps - 1) printf("step %4d  loss %.3f\n", step, loss_value);
  }
  loom_optim_free(opt);
  free(x), free(y), free(text);
  return 0;
}

/* n tokens in window[0..n), more appended up to `count`: temperature and
 * top-k, one token at a time through the KV cache (one compiled program for
 * every position); a full window slides and the cache is filled again. */
static void sample(const loom_params *ps, gpt2_config c, int64_t *window, int n, int count,
                   double temperature, int top_k, bool bytes) {
  int64_t t = c.context;
  loom_key key = loom_key_new(3);
  gpt2_cache *cache = gpt2_cache_new(c, 1, c.context);
  if (!cache) return;
  int fed = 0; /* window[0..fed) is in the cache */
  for (int made = 0; made < count; made++) {
    if (n == t) { /* the window is full: slide it */
      memmove(window, window + 1, sizeof(int64_t) * (size_t)(t - 1));
      n--, fed = 0;
    }
    int64_t next = 0;
    for (; fed < n; fed++) LOOM_NO_GRAD LOOM_SCOPE {
        int64_t at = fed;
        loom_tensor *tokens = loom_from_data(&window[fed], LOOM_SHAPE(1, 1), LOOM_I64, LOOM_CPU);
        loom_tensor *logits =
            gpt2_decode(ps, c, cache, tokens, loom_from_data(&at, LOOM_SHAPE0, LOOM_I64, LOOM_CPU));
        loom_realize(logits); /* and the cache */
        if (fed < n - 1) continue;
        loom_tensor *last = loom_div_s(logits, temperature), *top = NULL, *pick_at = NULL;
        if (loom_topk(last, top_k < c.vocab ? top_k : c.vocab, -1, true, &top, &pick_at) ==
            LOOM_OK) {
          loom_tensor *pick = loom_multinomial_key(loom_key_fold(key, (uint64_t)made),
                                                   loom_softmax(top, -1), 1, true);
          loom_item_i64(loom_gather(pick_at, 1, pick), &next);
        }
      }
    window[n++] = next;
    if (bytes)
      putchar(next == '\n' || (next >= 32 && next < 127) ? (int)next : '?');
    else
      printf(" %lld", (long long)next);
    fflush(stdout);
  }
  printf("\n");
  gpt2_cache_free(cache);
}

int main(int argc, char **argv) {
  const char *text = "/usr/share/common-licenses/GPL-3", *load = NULL, *save = NULL;
  const char *prompt = "The GNU General Public License", *ids = NULL;
  int steps = 600, heads = 12, count = 200, top_k = 20;
  double temperature = 0.8;
  bool bf16 = false; /* mixed precision: F32 weights, the forward in BF16 */
  for (int i = 1; i < argc; i += 2) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(k, "--bf16")) {
      bf16 = true, i--;
      continue;
    }
    if (!strcmp(k, "--train"))
      text = v;
    else if (!strcmp(k, "--steps"))
      steps = atoi(v);
    else if (!strcmp(k, "--save"))
      save = v;
    else if (!strcmp(k, "--load"))
      load = v;
    else if (!strcmp(k, "--heads"))
      heads = atoi(v);
    else if (!strcmp(k, "--prompt"))
      prompt = v;
    else if (!strcmp(k, "--prompt-ids"))
      ids = v;
    else if (!strcmp(k, "--tokens"))
      count = atoi(v);
    else if (!strcmp(k, "--temperature"))
      temperature = atof(v);
    else if (!strcmp(k, "--top-k"))
      top_k = atoi(v);
    else {
      fprintf(stderr, "gpt2: unknown option %s\n", k);
      return 2;
    }
  }
  loom_params *ps;
  gpt2_config c;
  if (load) {
    loom_params *file = loom_safetensors_read(load, LOOM_CPU);
    if (!file || !gpt2_config_of(file, heads, &c)) {
      fprintf(stderr, "gpt2: %s is not a GPT-2 with %d heads: %s\n", load, heads,
              file ? "missing tensors or an embedding the heads do not divide" : loom_last_error());
      return 1;
    }
    ps = file;
  } else {
    c = (gpt2_config){.layers = 2, .heads = 4, .vocab = 256, .context = 64, .embed = 96};
    ps = gpt2_new(c, loom_key_new(1));
  }
  if (bf16) c.compute = LOOM_BF16;
  printf("gpt2: %d layers, %d heads, %lld wide, context %lld, vocabulary %lld\n", c.layers, c.heads,
         (long long)c.embed, (long long)c.context, (long long)c.vocab);
  if (!load && train(ps, c, text, steps) != 0) return 1;
  if (save && loom_params_save(ps, save) != LOOM_OK) {
    fprintf(stderr, "gpt2: %s\n", loom_last_error());
    return 1;
  }
  int64_t *window = calloc((size_t)c.context, sizeof(int64_t));
  int n = 0;
  if (ids) {
    for (const char *p = ids; *p && n < c.context - 1; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
      window[n++] = atoll(p);
    printf("\n%s ->", ids);
  } else {
    for (; prompt[n] && n < c.context - 1 && c.vocab == 256; n++)
      window[n] = (unsigned char)prompt[n];
    printf("\n%s", prompt);
  }
  if (n == 0) {
    fprintf(stderr, "gpt2: an empty prompt (a loaded model takes --prompt-ids)\n");
    return 1;
  }
  sample(ps, c, window, n, count, temperature, top_k, c.vocab == 256 && !ids);
  free(window);
  loom_params_free(ps);
  return 0;
}
