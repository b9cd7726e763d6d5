/* Sizes that change, through the lazy API: an MLP forward over every batch
 * size from 1 to 256, and greedy decoding with a small GPT over a growing
 * prefix (no KV cache: each token runs the whole prefix, a new length each
 * time). The first call meets every size new (its kernels compiled, counted
 * in "first from"); later calls meet them cached. The note says what the
 * first call compiled and what its tokens cost once the generic kernels were
 * there, against the later calls' (every length's program cached). */
#include <stdio.h>
#include <stdlib.h>

#include "../examples/gpt2_model.h"
#include "bench.h"

/* ------------------------------------------------------------ MLP over batch sizes */

#define MLP_BATCHES 256

typedef struct batches_state {
  loom_params *ps;
  loom_linear fc[3];
  loom_tensor *x;           /* [MLP_BATCHES, 784]: each batch size its first rows */
  loom_program *program;    /* the symbolic program's workload */
  float *host_x;            /* x's values, each batch size its first rows */
  loom_stats before, after; /* around the first call */
  int calls;
} batches_state;

static loom_status batches_setup(void **state) {
  batches_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  *state = s;
  s->ps = bench_mlp_784_new(s->fc);
  loom_status st = bench_uniform_input(6, LOOM_SHAPE(MLP_BATCHES, 784), 0, 1, &s->x);
  return !st && loom_last_error() ? LOOM_ERR_VALUE : st;
}

/* softmax(fc2(relu(fc1(relu(fc0(x)))))) */
static loom_tensor *mlp_forward(const batches_state *s, const loom_tensor *x) {
  loom_tensor *h = loom_relu(loom_linear_forward(&s->fc[0], x));
  h = loom_relu(loom_linear_forward(&s->fc[1], h));
  return loom_softmax(loom_linear_forward(&s->fc[2], h), -1);
}

static loom_status batches_run(void *state, bench_call_report *report) {
  (void)report;
  batches_state *s = state;
  if (s->calls == 0) s->before = loom_get_stats();
  loom_status st = LOOM_OK;
  for (int64_t b = 1; b <= MLP_BATCHES && st == LOOM_OK; b++) LOOM_NO_GRAD LOOM_SCOPE {
      st = bench_realize(mlp_forward(s, loom_slice(s->x, 0, 0, b, 1)));
    }
  if (s->calls++ == 0) s->after = loom_get_stats();
  return st;
}

/* The same through one symbolic program (loom_compile_symbolic, the batch
 * dim named): planned once per size it keeps, its kernels generic. */
static loom_status program_batches_setup(void **state) {
  loom_status st = batches_setup(state);
  batches_state *s = *state;
  if (st != LOOM_OK) return st;
  loom_tensor *x = loom_input("x", LOOM_SHAPE(8, 784), LOOM_F32, LOOM_CPU), *out = NULL;
  LOOM_NO_GRAD out = mlp_forward(s, x);
  loom_symbolic_dim batch = {0, 0, "batch"};
  s->program = loom_compile_symbolic(&out, 1, &x, 1, &batch, 1);
  loom_free(out), loom_free(x);
  if (!s->program) return loom_last_status();
  size_t bytes = sizeof(float) * MLP_BATCHES * 784;
  if (!(s->host_x = malloc(bytes))) return LOOM_ERR_OOM;
  return loom_copy_to_host(s->x, s->host_x, bytes);
}

static loom_status program_batches_run(void *state, bench_call_report *report) {
  (void)report;
  batches_state *s = state;
  if (s->calls == 0) s->before = loom_get_stats();
  loom_status st = LOOM_OK;
  for (int64_t b = 1; b <= MLP_BATCHES && st == LOOM_OK; b++) LOOM_SCOPE {
      loom_tensor *in = loom_from_data(s->host_x, LOOM_SHAPE(b, 784), LOOM_F32, LOOM_CPU);
      loom_tensor *out = NULL;
      st = loom_program_run(s->program, &in, &out);
    }
  if (s->calls++ == 0) s->after = loom_get_stats();
  return st;
}

static void stats_note(const loom_stats *before, const loom_stats *after, char *buf, size_t size) {
  snprintf(buf, size,
           "first call: %llu graphs planned, %llu program sizes planned, %llu from the plan "
           "template, %llu kernels compiled (%llu shape-generic) + %llu from disk",
           (unsigned long long)(after->graphs_compiled - before->graphs_compiled),
           (unsigned long long)(after->program_sizes_planned - before->program_sizes_planned),
           (unsigned long long)(after->program_sizes_from_template -
                                before->program_sizes_from_template),
           (unsigned long long)(after->kernels_compiled - before->kernels_compiled),
           (unsigned long long)(after->generic_kernels_compiled - before->generic_kernels_compiled),
           (unsigned long long)(after->disk_cache_hits - before->disk_cache_hits));
}

static void batches_describe(void *state, char *buf, size_t size) {
  batches_state *s = state;
  stats_note(&s->before, &s->after, buf, size);
}

static void batches_teardown(void *state) {
  batches_state *s = state;
  loom_params_free(s->ps);
  loom_free(s->x);
  loom_program_free(s->program);
  free(s->host_x);
  free(s);
}

/* ------------------------------------------------------------ GPT decoding over a growing prefix
 */

#define DECODE_PROMPT 8
#define DECODE_NEW 256

typedef struct grow_state {
  loom_params *ps;
  gpt2_config c;
  loom_stats before, after;
  loom_program *program;            /* the symbolic program's workload */
  double first_token_s[DECODE_NEW]; /* the first call's, token by token */
  double call_s;                    /* the latest call's whole time */
  int calls;
} grow_state;

static loom_status grow_setup(void **state) {
  grow_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  *state = s;
  s->c = (gpt2_config){4, 4, 256, DECODE_PROMPT + DECODE_NEW, 256, LOOM_F32};
  s->ps = gpt2_new(s->c, loom_key_new(11));
  return loom_last_error() ? LOOM_ERR_VALUE : LOOM_OK;
}

static loom_status grow_run(void *state, bench_call_report *report) {
  (void)report;
  grow_state *s = state;
  int64_t tokens[DECODE_PROMPT + DECODE_NEW];
  for (int i = 0; i < DECODE_PROMPT; i++) tokens[i] = (i * 37 + 11) % 256;
  if (s->calls == 0) s->before = loom_get_stats();
  double start = bench_now();
  loom_status st = LOOM_OK;
  for (int n = 0; n < DECODE_NEW && st == LOOM_OK; n++) {
    int64_t t = DECODE_PROMPT + n;
    double t0 = bench_now();
    LOOM_NO_GRAD LOOM_SCOPE {
      loom_tensor *x = loom_from_data(tokens, LOOM_SHAPE(1, t), LOOM_I64, loom_default_device());
      loom_tensor *logits = gpt2_forward(s->ps, s->c, x);
      loom_tensor *last = loom_reshape(loom_slice(logits, 1, t - 1, t, 1), LOOM_SHAPE(256));
      st = loom_copy_to_host(loom_argmax(last, 0, false), &tokens[t], sizeof(int64_t));
    }
    if (s->calls == 0) s->first_token_s[n] = bench_now() - t0;
  }
  s->call_s = bench_now() - start;
  if (s->calls++ == 0) s->after = loom_get_stats();
  return st;
}

/* The same decoding through one symbolic program over the prefix length
 * (traced at 37 tokens: no constant of the model is near it), each token's
 * logits read back and the last row's argmax taken here. */
#define DECODE_TRACE 37

static loom_status program_grow_setup(void **state) {
  loom_status st = grow_setup(state);
  grow_state *s = *state;
  if (st != LOOM_OK) return st;
  loom_tensor *x = loom_input("tokens", LOOM_SHAPE(1, DECODE_TRACE), LOOM_I64, LOOM_CPU);
  loom_tensor *logits = NULL;
  LOOM_NO_GRAD logits = gpt2_forward(s->ps, s->c, x);
  loom_symbolic_dim length = {0, 1, "t"};
  s->program = loom_compile_symbolic(&logits, 1, &x, 1, &length, 1);
  loom_free(logits), loom_free(x);
  return s->program ? LOOM_OK : loom_last_status();
}

static loom_status program_grow_run(void *state, bench_call_report *report) {
  (void)report;
  grow_state *s = state;
  int64_t tokens[DECODE_PROMPT + DECODE_NEW];
  static float logits[(DECODE_PROMPT + DECODE_NEW) * 256];
  for (int i = 0; i < DECODE_PROMPT; i++) tokens[i] = (i * 37 + 11) % 256;
  if (s->calls == 0) s->before = loom_get_stats();
  double start = bench_now();
  loom_status st = LOOM_OK;
  for (int n = 0; n < DECODE_NEW && st == LOOM_OK; n++) {
    int64_t t = DECODE_PROMPT + n;
    double t0 = bench_now();
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(tokens, LOOM_SHAPE(1, t), LOOM_I64, LOOM_CPU), *out = NULL;
      st = loom_program_run(s->program, &x, &out);
      if (st == LOOM_OK) st = loom_copy_to_host(out, logits, sizeof(float) * (size_t)(t * 256));
    }
    const float *last = logits + (t - 1) * 256;
    int best = 0;
    for (int v = 1; v < 256; v++) best = last[v] > last[best] ? v : best;
    tokens[t] = best;
    if (s->calls == 0) s->first_token_s[n] = bench_now() - t0;
  }
  s->call_s = bench_now() - start;
  if (s->calls++ == 0) s->after = loom_get_stats();
  return st;
}

static void grow_describe(void *state, char *buf, size_t size) {
  grow_state *s = state;
  char stats[256];
  stats_note(&s->before, &s->after, stats, sizeof stats);
  /* the first call's tokens from the third length on (the first two compile
   * the specialized and the generic kernels), against a cached call's */
  double rest = 0;
  for (int n = 2; n < DECODE_NEW; n++) rest += s->first_token_s[n];
  snprintf(buf, size,
           "%s; first call %.2f ms/token from its third length on (new lengths from the plan "
           "template, or planned), %.2f ms/token once every length is cached",
           stats, 1e3 * rest / (DECODE_NEW - 2), 1e3 * s->call_s / DECODE_NEW);
}

static void grow_teardown(void *state) {
  grow_state *s = state;
  loom_params_free(s->ps);
  loom_program_free(s->program);
  free(s);
}

const bench_workload bench_dynamic_workloads[] = {
    {
        .name = "mlp_forward_batches_1_256",
        .what = "MLP 784-512-256-10 forward (lazy, no grad) at every batch size 1..256: one call",
        .metric = BENCH_LATENCY,
        .setup = batches_setup,
        .run = batches_run,
        .teardown = batches_teardown,
        .describe = batches_describe,
        .cpu_only = true,
    },
    {
        .name = "mlp_program_batches_1_256",
        .what = "the same through one symbolic program (loom_compile_symbolic, batch named): "
                "one call",
        .metric = BENCH_LATENCY,
        .setup = program_batches_setup,
        .run = program_batches_run,
        .teardown = batches_teardown,
        .describe = batches_describe,
        .cpu_only = true,
    },
    {
        .name = "gpt_small_decode_grow_256",
        .what = "GPT L4 H4 C256 V256: 256 greedy tokens after 8, each over the whole prefix "
                "(lengths 8..263, no KV cache): one call",
        .metric = BENCH_LATENCY,
        .setup = grow_setup,
        .run = grow_run,
        .teardown = grow_teardown,
        .describe = grow_describe,
        .cpu_only = true,
    },
    {
        .name = "gpt_small_decode_program_256",
        .what = "the same through one symbolic program over the prefix length "
                "(loom_compile_symbolic, traced at 37 tokens): one call",
        .metric = BENCH_LATENCY,
        .setup = program_grow_setup,
        .run = program_grow_run,
        .teardown = grow_teardown,
        .describe = grow_describe,
        .cpu_only = true,
    },
};
const int bench_dynamic_count =
    (int)(sizeof bench_dynamic_workloads / sizeof *bench_dynamic_workloads);
