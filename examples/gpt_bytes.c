/* gpt_bytes: a small GPT (GPT-2's block: pre-norm, causal self-attention,
 * a tanh-GELU MLP, tied embeddings) trained on the bytes of a text, then
 * sampling from it with temperature and top-k.
 *
 *   build/gpt_bytes [text file] [steps]
 *
 * The default text is the GNU GPL v3 (/usr/share/common-licenses/GPL-3 on
 * Debian). Training: AdamW (no decay on biases and norms), a warmup-cosine
 * learning rate, gradient clipping at 1, batches of random windows. Sampling
 * runs the model on a fixed-length window with the tokens at its start:
 * causal attention leaves every later position out of a token's logits, so
 * one compiled program serves every step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"

enum { VOCAB = 256, CTX = 64, EMBED = 96, HEADS = 4, LAYERS = 2, BATCH = 16 };

typedef struct block {
  loom_layernorm ln_1, ln_2;
  loom_mha attn;
  loom_linear fc, proj;
} block;

typedef struct gpt {
  loom_params *ps;
  loom_embedding wte, wpe;
  block h[LAYERS];
  loom_layernorm ln_f;
} gpt;

static gpt gpt_new(loom_key key) {
  gpt m;
  memset(&m, 0, sizeof m);
  m.ps = loom_params_new();
  loom_key k[2 + 3 * LAYERS];
  loom_key_split(key, k, 2 + 3 * LAYERS);
  m.wte = loom_embedding_new(m.ps, "wte", VOCAB, EMBED, k[0]);
  m.wpe = loom_embedding_new(m.ps, "wpe", CTX, EMBED, k[1]);
  for (int l = 0; l < LAYERS; l++) {
    char name[32];
    block *b = &m.h[l];
    snprintf(name, sizeof name, "h.%d.ln_1", l), b->ln_1 = loom_layernorm_new(m.ps, name, EMBED);
    snprintf(name, sizeof name, "h.%d.attn", l);
    b->attn = loom_mha_new(m.ps, name, EMBED, HEADS, true, k[2 + 3 * l]);
    snprintf(name, sizeof name, "h.%d.ln_2", l), b->ln_2 = loom_layernorm_new(m.ps, name, EMBED);
    snprintf(name, sizeof name, "h.%d.mlp.c_fc", l);
    b->fc = loom_linear_new(m.ps, name, EMBED, 4 * EMBED, k[3 + 3 * l]);
    snprintf(name, sizeof name, "h.%d.mlp.c_proj", l);
    b->proj = loom_linear_new(m.ps, name, 4 * EMBED, EMBED, k[4 + 3 * l]);
  }
  m.ln_f = loom_layernorm_new(m.ps, "ln_f", EMBED);
  /* GPT-2's embeddings are N(0, 0.02^2) and N(0, 0.01^2), not N(0, 1): the
   * tied head's logits would start some ten times too large */
  LOOM_SCOPE {
    loom_assign(m.wte.weight, loom_mul_s(m.wte.weight, 0.02));
    loom_assign(m.wpe.weight, loom_mul_s(m.wpe.weight, 0.01));
  }
  return m;
}

/* tokens [B, T] (I64) -> logits [B, T, VOCAB] */
static loom_tensor *gpt_forward(const gpt *m, loom_tensor *tokens) {
  int64_t t = loom_shape_of(tokens).dim[1];
  loom_tensor *pos = loom_arange(0, (double)t, 1, LOOM_I64, LOOM_CPU);
  loom_tensor *x =
      loom_add(loom_embedding_forward(&m->wte, tokens), loom_embedding_forward(&m->wpe, pos));
  for (int l = 0; l < LAYERS; l++) {
    const block *b = &m->h[l];
    x = loom_add(x, loom_mha_forward(&b->attn, loom_layernorm_forward(&b->ln_1, x)));
    loom_tensor *hidden =
        loom_gelu_tanh(loom_linear_forward(&b->fc, loom_layernorm_forward(&b->ln_2, x)));
    x = loom_add(x, loom_linear_forward(&b->proj, hidden));
  }
  x = loom_layernorm_forward(&m->ln_f, x);
  return loom_matmul(x, loom_transpose(m->wte.weight, 0, 1)); /* tied head */
}

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

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "/usr/share/common-licenses/GPL-3";
  int steps = argc > 2 ? atoi(argv[2]) : 600;
  long len = 0;
  unsigned char *text = read_text(path, &len);
  if (!text || len < CTX + 2) {
    fprintf(stderr, "gpt_bytes: cannot read a text of at least %d bytes from %s\n", CTX + 2, path);
    return 1;
  }
  gpt m = gpt_new(loom_key_new(1));
  loom_adam_opts opts = LOOM_ADAMW_DEFAULTS;
  opts.lr = 3e-3, opts.weight_decay = 0.1;
  loom_optim *opt = loom_adamw(m.ps, opts);
  if (!opt || loom_optim_group(opt, decays, NULL, 1, 0) != LOOM_OK) {
    fprintf(stderr, "gpt_bytes: %s\n", loom_last_error());
    return 1;
  }
  printf("gpt_bytes: %d layers, %d heads, %d wide, context %d; %ld bytes of %s\n", LAYERS, HEADS,
         EMBED, CTX, len, path);
  int64_t *x = malloc(sizeof(int64_t) * BATCH * CTX), *y = malloc(sizeof(int64_t) * BATCH * CTX);
  unsigned seed = 7;
  for (int step = 0; step < steps; step++) {
    for (int b = 0; b < BATCH; b++) { /* random windows, the next byte as target */
      seed = seed * 1103515245u + 12345u;
      long at = (long)((seed >> 4) % (unsigned)(len - CTX - 1));
      for (int t = 0; t < CTX; t++)
        x[b * CTX + t] = text[at + t], y[b * CTX + t] = text[at + t + 1];
    }
    double loss_value = 0;
    LOOM_SCOPE {
      loom_tensor *tokens = loom_from_data(x, LOOM_SHAPE(BATCH, CTX), LOOM_I64, LOOM_CPU);
      loom_tensor *targets = loom_from_data(y, LOOM_SHAPE(BATCH * CTX), LOOM_I64, LOOM_CPU);
      loom_tensor *logits = loom_reshape(gpt_forward(&m, tokens), LOOM_SHAPE(BATCH * CTX, VOCAB));
      loom_tensor *loss = loom_cross_entropy_ex(logits, targets, (loom_cross_entropy_opts){0});
      loom_optim_zero_grad(opt);
      loom_status st = loom_backward(loss);
      if (st == LOOM_OK) {
        loom_clip_grad_norm(m.ps, 1.0);
        loom_optim_set_lr(opt, loom_lr_warmup_cosine(step, steps / 10, steps, 3e-3, 3e-4));
        st = loom_optim_step(opt);
      }
      loss_value = st == LOOM_OK ? loom_item(loss) : NAN; /* one program: forward, backward,
                                                             clip and update */
    }
    if (step % 50 == 0 || step == steps - 1) printf("step %4d  loss %.3f\n", step, loss_value);
  }
  /* sampling: temperature 0.8, top-k 20, from a prompt */
  const char *prompt = "The GNU General Public License";
  int64_t window[CTX] = {0};
  int n = (int)strlen(prompt);
  for (int i = 0; i < n; i++) window[i] = (unsigned char)prompt[i];
  printf("\n%s", prompt);
  loom_key key = loom_key_new(3);
  for (; n < CTX; n++) {
    int64_t next = 0;
    LOOM_NO_GRAD LOOM_SCOPE {
      loom_tensor *tokens = loom_from_data(window, LOOM_SHAPE(1, CTX), LOOM_I64, LOOM_CPU);
      loom_tensor *logits =
          loom_slice(loom_reshape(gpt_forward(&m, tokens), LOOM_SHAPE(CTX, VOCAB)), 0, n - 1, n, 1);
      loom_tensor *top, *at;
      loom_topk(loom_div_s(logits, 0.8), 20, -1, true, &top, &at);
      loom_tensor *pick =
          loom_multinomial_key(loom_key_fold(key, (uint64_t)n), loom_softmax(top, -1), 1, true);
      int64_t j = 0;
      loom_item_i64(loom_gather(at, 1, pick), &j);
      next = j;
    }
    window[n] = next;
    putchar(next >= 32 && next < 127 ? (int)next : next == '\n' ? '\n' : '?');
  }
  printf("\n");
  free(x), free(y), free(text);
  loom_optim_free(opt);
  loom_params_free(m.ps);
  return 0;
}
