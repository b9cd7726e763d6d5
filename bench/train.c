/* Training-step workloads: one whole step (forward, backward, optimizer
 * updates) realized as one program, the way a training loop runs it. */
#include <stdlib.h>

#include "../examples/gpt2_model.h"
#include "bench.h"

typedef struct mlp_state {
  loom_params *ps;
  loom_linear fc[3];
  loom_optim *opt;
  loom_tensor *x, *y;
  loom_stats before, after; /* around the last step (dist_mlp_step's collectives) */
} mlp_state;

typedef struct cnn_state {
  loom_params *ps;
  loom_conv2d conv1, conv2;
  loom_linear fc;
  loom_optim *opt;
  loom_tensor *x, *y;
} cnn_state;

/* Labels 0..9 for a batch, realized. */
static loom_tensor *labels(int64_t n) {
  int64_t *v = malloc(sizeof(int64_t) * (size_t)n);
  if (!v) return NULL;
  for (int64_t i = 0; i < n; i++) v[i] = (i * 7) % 10;
  loom_tensor *t = loom_from_data(v, LOOM_SHAPE(n), LOOM_I64, loom_default_device());
  free(v);
  return t;
}

/* The rest of a step after the forward pass: backward, the optimizer's
 * updates, and one realization running it all; ends the run's scope. */
static loom_status finish_step(loom_optim *opt, loom_tensor *loss) {
  loom_optim_zero_grad(opt);
  loom_status st = loom_backward(loss);
  if (!st) st = loom_optim_step(opt);
  if (!st) st = bench_realize(loss);
  return bench_first_error(st, loom_scope_end());
}

/* ------------------------------------------------------------ MLP 784-512-256-10, Adam */

loom_params *bench_mlp_784_new(loom_linear fc[3]) {
  loom_key k[3];
  loom_key_split(loom_key_new(5), k, 3);
  loom_params *ps = loom_params_new();
  int64_t sizes[4] = {784, 512, 256, 10};
  const char *names[3] = {"fc1", "fc2", "fc3"};
  for (int i = 0; i < 3; i++) fc[i] = loom_linear_new(ps, names[i], sizes[i], sizes[i + 1], k[i]);
  return ps;
}

/* The model, Adam, a batch of 256; with ddp, under loom_ddp and this rank's
 * own rows. */
static loom_status mlp_make(void **state, bool ddp) {
  mlp_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  *state = s;
  s->ps = bench_mlp_784_new(s->fc);
  loom_status st = ddp ? loom_ddp(s->ps, LOOM_DDP_DEFAULTS) : LOOM_OK;
  s->opt = loom_adam(s->ps, LOOM_ADAM_DEFAULTS);
  if (st == LOOM_OK)
    st = bench_uniform_input(6 + (uint64_t)loom_dist_rank(), LOOM_SHAPE(256, 784), 0, 1, &s->x);
  s->y = labels(256);
  if (!st && (!s->opt || !s->y || loom_last_error())) st = LOOM_ERR_VALUE;
  return st;
}

static loom_status mlp_setup(void **state) { return mlp_make(state, false); }

static loom_status mlp_run(void *state, bench_call_report *report) {
  (void)report;
  mlp_state *s = state;
  loom_scope_begin();
  loom_tensor *h = loom_relu(loom_linear_forward(&s->fc[0], s->x));
  h = loom_relu(loom_linear_forward(&s->fc[1], h));
  return finish_step(s->opt, loom_cross_entropy(loom_linear_forward(&s->fc[2], h), s->y));
}

static void mlp_teardown(void *state) {
  mlp_state *s = state;
  loom_optim_free(s->opt);
  loom_params_free(s->ps);
  loom_free(s->x), loom_free(s->y);
  free(s);
}

/* ------------------------------------------------------------ the same, data-parallel */

/* dist_mlp_step: mlp_train_step's model under loom_ddp, batch 256 on every
 * rank (its own rows), the gradients all-reduced inside the step. */
static loom_status dist_mlp_setup(void **state) {
  if (!loom_dist_initialized()) { /* started alone: a world of one */
    loom_status st = loom_dist_init(NULL, NULL);
    if (st != LOOM_OK) return st;
  }
  return mlp_make(state, true);
}

static loom_status dist_mlp_run(void *state, bench_call_report *report) {
  mlp_state *s = state;
  s->before = loom_get_stats();
  loom_status st = mlp_run(state, report);
  s->after = loom_get_stats();
  return st;
}

static void dist_mlp_describe(void *state, char *buf, size_t size) {
  const mlp_state *s = state;
  snprintf(
      buf, size,
      "%d rank(s) x batch 256; %.2f MB of gradients all-reduced per step in %llu "
      "bucket(s), %llu of them while the step computed",
      loom_dist_size(), (double)(s->after.collective_bytes - s->before.collective_bytes) / 1e6,
      (unsigned long long)(s->after.collectives_run - s->before.collectives_run),
      (unsigned long long)(s->after.collectives_overlapped - s->before.collectives_overlapped));
}

/* ------------------------------------------------------------ CNN on 28x28, SGD momentum */

static loom_status cnn_setup(void **state) {
  cnn_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  loom_key k[3];
  loom_key_split(loom_key_new(8), k, 3);
  s->ps = loom_params_new();
  loom_conv2d_opts pad1 = {.padding = {1, 1}};
  s->conv1 = loom_conv2d_new(s->ps, "conv1", 1, 16, 3, pad1, k[0]);
  s->conv2 = loom_conv2d_new(s->ps, "conv2", 16, 32, 3, pad1, k[1]);
  s->fc = loom_linear_new(s->ps, "fc", 32 * 7 * 7, 10, k[2]);
  s->opt = loom_sgd(s->ps, (loom_sgd_opts){.lr = 0.01, .momentum = 0.9});
  loom_status st = bench_uniform_input(9, LOOM_SHAPE(64, 1, 28, 28), 0, 1, &s->x);
  s->y = labels(64);
  *state = s;
  if (!st && (!s->opt || !s->y || loom_last_error())) st = LOOM_ERR_VALUE;
  return st;
}

static loom_status cnn_run(void *state, bench_call_report *report) {
  (void)report;
  cnn_state *s = state;
  loom_scope_begin();
  loom_tensor *h = loom_max_pool2d(loom_relu(loom_conv2d_forward(&s->conv1, s->x)), 2, 2, 0);
  h = loom_max_pool2d(loom_relu(loom_conv2d_forward(&s->conv2, h)), 2, 2, 0);
  return finish_step(s->opt,
                     loom_cross_entropy(loom_linear_forward(&s->fc, loom_flatten(h, 1, -1)), s->y));
}

static void cnn_teardown(void *state) {
  cnn_state *s = state;
  loom_optim_free(s->opt);
  loom_params_free(s->ps);
  loom_free(s->x), loom_free(s->y);
  free(s);
}

/* ------------------------------------------------------------ GPT-2s, AdamW */

/* issue 18's shapes: "L4 H4 C256, V256, B=8" with a context of 64, the same
 * blocks with GPT-2's vocabulary and context at B=4, and GPT-2 124M (1024
 * positions) at B=4, T=64 */
typedef struct gpt_shape {
  int layers, heads;
  int64_t embed, vocab, positions, batch, tokens;
  loom_dtype compute; /* the forward's (mixed precision: F32 weights, AdamW) */
} gpt_shape;

static const gpt_shape GPT_SMALL = {4, 4, 256, 256, 64, 8, 64, LOOM_F32};
static const gpt_shape GPT_SMALL_V50257 = {4, 4, 256, 50257, 1024, 4, 64, LOOM_F32};
static const gpt_shape GPT2_124M = {12, 12, 768, 50257, 1024, 4, 64, LOOM_F32};
static const gpt_shape GPT2_124M_BF16 = {12, 12, 768, 50257, 1024, 4, 64, LOOM_BF16};

/* 6 per parameter and token (blocks and the tied head), and attention's two
 * products, forward and backward */
#define GPT_WORK(g)                                                                                \
  (6.0 * (g).batch * (g).tokens *                                                                  \
       (12.0 * (g).layers * (g).embed * (g).embed + (double)(g).vocab * (g).embed) +               \
   6.0 * 2 * (g).layers * (g).batch * (double)(g).tokens * (g).tokens * (g).embed)

typedef struct gpt_state {
  loom_params *ps;
  gpt2_config c;
  gpt_shape g;
  loom_optim *opt;
  loom_tensor *x, *y;
} gpt_state;

static gpt2_config config_of(const gpt_shape *g) {
  return (gpt2_config){g->layers, g->heads, g->vocab, g->positions, g->embed, g->compute};
}

static loom_status gpt_setup(void **state, const gpt_shape *g) {
  gpt_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  s->g = *g;
  s->c = config_of(g);
  s->ps = gpt2_new(s->c, loom_key_new(11));
  s->opt = loom_adamw(s->ps, LOOM_ADAMW_DEFAULTS);
  int64_t n = g->batch * g->tokens, *tokens = malloc(sizeof(int64_t) * (size_t)(n + 1));
  if (!tokens) return LOOM_ERR_OOM;
  for (int64_t i = 0; i <= n; i++) tokens[i] = (i * 37 + 11) % g->vocab;
  s->x = loom_from_data(tokens, LOOM_SHAPE(g->batch, g->tokens), LOOM_I64, loom_default_device());
  s->y = loom_from_data(tokens + 1, LOOM_SHAPE(n), LOOM_I64, loom_default_device());
  free(tokens);
  *state = s;
  return !s->opt || loom_last_error() ? LOOM_ERR_VALUE : LOOM_OK;
}

static loom_status gpt_run(void *state, bench_call_report *report) {
  (void)report;
  gpt_state *s = state;
  loom_scope_begin();
  loom_tensor *logits = gpt2_forward(s->ps, s->c, s->x);
  loom_tensor *flat = loom_reshape(logits, LOOM_SHAPE(s->g.batch * s->g.tokens, s->g.vocab));
  return finish_step(s->opt, loom_cross_entropy(flat, s->y));
}

static void gpt_teardown(void *state) {
  gpt_state *s = state;
  loom_optim_free(s->opt);
  loom_params_free(s->ps);
  loom_free(s->x), loom_free(s->y);
  free(s);
}

static loom_status gpt_small_setup(void **state) { return gpt_setup(state, &GPT_SMALL); }
static loom_status gpt_small_v50257_setup(void **state) {
  return gpt_setup(state, &GPT_SMALL_V50257);
}
static loom_status gpt2_124m_setup(void **state) { return gpt_setup(state, &GPT2_124M); }
static loom_status gpt2_124m_bf16_setup(void **state) { return gpt_setup(state, &GPT2_124M_BF16); }

/* ------------------------------------------------------------ GPT-2 124M decoding */

/* One token through GPT-2 124M with a KV cache of `length` positions, the
 * token at the last: ms per token with that many in context, batch 1. */
typedef struct decode_state {
  loom_params *ps;
  gpt2_config c;
  gpt2_cache *cache;
  loom_tensor *token, *pos;
} decode_state;

static loom_status decode_setup(void **state, int64_t length) {
  decode_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  *state = s;
  s->c = config_of(&GPT2_124M);
  s->ps = gpt2_new(s->c, loom_key_new(11));
  s->cache = gpt2_cache_new(s->c, 1, length);
  int64_t token = 11, at = length - 1;
  s->token = loom_from_data(&token, LOOM_SHAPE(1, 1), LOOM_I64, loom_default_device());
  s->pos = loom_from_data(&at, LOOM_SHAPE0, LOOM_I64, loom_default_device());
  return !s->cache || loom_last_error() ? LOOM_ERR_VALUE : LOOM_OK;
}

static loom_status decode_run(void *state, bench_call_report *report) {
  (void)report;
  decode_state *s = state;
  loom_status st;
  LOOM_NO_GRAD LOOM_SCOPE {
    st = loom_realize(gpt2_decode(s->ps, s->c, s->cache, s->token, s->pos)); /* and the cache */
  }
  return st;
}

static void decode_teardown(void *state) {
  decode_state *s = state;
  gpt2_cache_free(s->cache);
  loom_params_free(s->ps);
  loom_free(s->token), loom_free(s->pos);
  free(s);
}

static loom_status decode128_setup(void **state) { return decode_setup(state, 128); }
static loom_status decode512_setup(void **state) { return decode_setup(state, 512); }
static loom_status decode1024_setup(void **state) { return decode_setup(state, 1024); }

#define DECODE_WORKLOAD(length)                                                                    \
  {                                                                                                \
    .name = "gpt2_decode_ctx" #length,                                                             \
    .what = "GPT-2 124M, one token with a KV cache of " #length " positions, batch 1",             \
    .metric = BENCH_LATENCY, .setup = decode##length##_setup, .run = decode_run,                   \
    .teardown = decode_teardown,                                                                   \
  }

const bench_workload bench_train_workloads[] = {
    {
        .name = "mlp_train_step",
        .what = "MLP 784-512-256-10, batch 256, ReLU, cross-entropy, Adam: one whole step",
        .metric = BENCH_FLOPS,
        .work = 3.0 * 2.0 * 256 * (784.0 * 512 + 512.0 * 256 + 256.0 * 10),
        .measure_peak = true,
        .compare_unfused = true,
        .compare_generic = true,
        .setup = mlp_setup,
        .run = mlp_run,
        .teardown = mlp_teardown,
    },
    {
        .name = "dist_mlp_step",
        .what = "mlp_train_step data-parallel (loom_ddp): batch 256 on each rank mpirun started, "
                "gradients all-reduced",
        .metric = BENCH_FLOPS,
        .work = 3.0 * 2.0 * 256 * (784.0 * 512 + 512.0 * 256 + 256.0 * 10),
        .setup = dist_mlp_setup,
        .run = dist_mlp_run,
        .teardown = mlp_teardown,
        .describe = dist_mlp_describe,
        .cpu_only = true,
        .dist = true,
    },
    {
        .name = "cnn_train_step",
        .what = "conv 1->16, pool, conv 16->32, pool, linear 1568->10; batch 64 of 28x28; SGD "
                "momentum: one whole step",
        .metric = BENCH_FLOPS,
        .work = 3.0 * 2.0 * 64 * (28.0 * 28 * 16 * 9 + 14.0 * 14 * 32 * 16 * 9 + 1568.0 * 10),
        .measure_peak = true,
        .compare_unfused = true,
        .compare_generic = true,
        .setup = cnn_setup,
        .run = cnn_run,
        .teardown = cnn_teardown,
    },
    {
        .name = "gpt_small_train_step",
        .what = "GPT-2 layout, 4 layers, 4 heads, C 256, vocab 256, batch 8 x 64 tokens; AdamW: "
                "one whole step",
        .metric = BENCH_FLOPS,
        .work = GPT_WORK(GPT_SMALL),
        .measure_peak = true,
        .compare_unfused = false,
        .compare_generic = true,
        .setup = gpt_small_setup,
        .run = gpt_run,
        .teardown = gpt_teardown,
    },
    {
        .name = "gpt_small_v50257_train_step",
        .what = "GPT-2 layout, 4 layers, 4 heads, C 256, GPT-2's vocabulary (50257), batch 4 x 64 "
                "tokens; AdamW: one whole step",
        .metric = BENCH_FLOPS,
        .work = GPT_WORK(GPT_SMALL_V50257),
        .measure_peak = true,
        .compare_unfused = false,
        .setup = gpt_small_v50257_setup,
        .run = gpt_run,
        .teardown = gpt_teardown,
    },
    {
        .name = "gpt2_124m_train_step",
        .what = "GPT-2 124M (12 layers, 12 heads, C 768, vocab 50257), batch 4 x 64 tokens; "
                "AdamW: one whole step",
        .metric = BENCH_FLOPS,
        .work = GPT_WORK(GPT2_124M),
        .measure_peak = true,
        .compare_unfused = false,
        .setup = gpt2_124m_setup,
        .run = gpt_run,
        .teardown = gpt_teardown,
    },
    {
        .name = "gpt2_124m_train_step_bf16",
        .what = "GPT-2 124M as above, mixed precision: F32 weights and AdamW, the forward and "
                "backward in BF16 (on AMX tiles where the CPU has them)",
        .metric = BENCH_FLOPS,
        .work = GPT_WORK(GPT2_124M),
        .measure_peak = true,
        .compare_unfused = false,
        .setup = gpt2_124m_bf16_setup,
        .run = gpt_run,
        .teardown = gpt_teardown,
    },
    DECODE_WORKLOAD(128),
    DECODE_WORKLOAD(512),
    DECODE_WORKLOAD(1024),
};
const int bench_train_count = (int)(sizeof bench_train_workloads / sizeof bench_train_workloads[0]);
