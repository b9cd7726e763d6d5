/* libFuzzer target: the op-recording API driven by bytes.
 *
 * The bytes are a small program: each op byte picks an API call, and the
 * bytes after it its operands (indices into a stack of tensors), shapes,
 * axes, dtypes, scalars (NaN and infinities included), options. Results go
 * on the stack; at the end everything on it is realized in one program.
 * Whatever the program, nothing may crash, leak or trip a sanitizer; every
 * result must carry a known status, an error its message, and a good tensor
 * must realize and copy out. Tensors are kept small (MAX_NUMEL elements):
 * a bigger result is dropped before anything computes it.
 *
 * The first byte sets fusion on or off for the input, so both planners are
 * fuzzed. Bytes are read in a fixed order (never two reads in one call's
 * arguments, whose order C leaves open), so an input means the same program
 * whichever compiler built the target. Seeds: tests/fuzz/corpus/ops
 * (tests/fuzz/make_seeds.py). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"

#define STACK 16
#define MAX_NUMEL 4096

typedef struct program {
  const uint8_t *p;
  size_t n, at;
  loom_tensor *stack[STACK];
  int depth;
} program;

/* ------------------------------------------------------------ reading bytes */

static int byte(program *g) { return g->at < g->n ? g->p[g->at++] : 0; }
static int pick(program *g, int n) { return n > 0 ? byte(g) % n : 0; }
static int in_range(program *g, int lo, int hi) { return lo + pick(g, hi - lo + 1); }
static bool flag(program *g) { return byte(g) & 1; }

static double scalar(program *g) {
  static const double values[] = {0,     1,     -1,  0.5, 2,    -3.5, 3,        1e30,
                                  -1e30, 1e-30, 255, 256, -0.0, NAN,  INFINITY, -INFINITY};
  return values[pick(g, (int)(sizeof values / sizeof values[0]))];
}

/* Any dtype, now and then one that does not exist. */
static loom_dtype dtype(program *g) {
  int d = pick(g, 16);
  return (loom_dtype)(d < 12 ? d % LOOM_NUM_DTYPES : d < 15 ? LOOM_F32 : LOOM_NUM_DTYPES);
}

static loom_shape shape(program *g, int lo_dim) {
  loom_shape s = {pick(g, 5), {0}};
  if (byte(g) == 255) s.ndim = 9; /* too many dims, now and then */
  for (int d = 0; d < s.ndim && d < LOOM_MAX_DIMS; d++) s.dim[d] = in_range(g, lo_dim, 5);
  return s;
}

static int axis(program *g) { return in_range(g, -5, 4); }

/* ------------------------------------------------------------ the stack */

static bool tracing; /* LOOM_FUZZ_TRACE=1: prints the program as it runs */

static loom_tensor *operand(program *g) {
  if (!g->depth) return NULL; /* NULL is a case too */
  int i = pick(g, g->depth);
  if (tracing) fprintf(stderr, "  operand stack[%d]\n", i);
  return g->stack[i];
}

static int64_t numel(loom_shape s) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim && d < LOOM_MAX_DIMS; d++) n *= s.dim[d];
  return n;
}

static void trace(const loom_tensor *t) {
  char s[128];
  loom_shape sh = loom_shape_of(t);
  int used = snprintf(s, sizeof s, "[");
  for (int d = 0; d < sh.ndim && used < (int)sizeof s; d++)
    used +=
        snprintf(s + used, sizeof s - (size_t)used, "%s%lld", d ? "," : "", (long long)sh.dim[d]);
  fprintf(stderr, "  -> %s %s%s %s\n", loom_status_name(loom_status_of(t)),
          loom_dtype_name(loom_dtype_of(t)), s,
          loom_error_message(t) ? loom_error_message(t) : "]");
}

/* Checks what every call must give, and keeps small results. */
static void push(program *g, loom_tensor *t) {
  if (!t) return; /* the functions returning tensors never return NULL ... */
  if (tracing) trace(t);
  loom_status st = loom_status_of(t);
  if (st < 0 || st >= LOOM_NUM_STATUS) abort();
  if (st != LOOM_OK && !loom_error_message(t)) abort(); /* ... and errors say why */
  if (st == LOOM_OK && numel(loom_shape_of(t)) > MAX_NUMEL) return;
  if (g->depth == STACK) memmove(g->stack, g->stack + 1, sizeof(loom_tensor *) * (STACK - 1));
  if (tracing) fprintf(stderr, "  pushed as stack[%d]\n", g->depth < STACK ? g->depth : STACK - 1);
  g->stack[g->depth < STACK ? g->depth++ : STACK - 1] = t;
}

/* ------------------------------------------------------------ ops */

static void op_make(program *g) {
  loom_shape s = shape(g, 0);
  loom_dtype d = dtype(g);
  switch (pick(g, 6)) {
  case 0: {
    unsigned char data[MAX_NUMEL * 8];
    size_t bytes = numel(s) * loom_dtype_size(d);
    if (bytes > sizeof data) return;
    for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)byte(g);
    if (d == LOOM_F32) /* bounded floats: random bits make NaNs everywhere */
      for (size_t i = 0; i < bytes / 4; i++) ((float *)data)[i] = (float)(data[4 * i] % 17) - 8;
    push(g, loom_from_data(bytes ? data : NULL, s, d, LOOM_CPU));
    break;
  }
  case 1: push(g, loom_full(s, scalar(g), d, LOOM_CPU)); break;
  case 2: {
    int start = in_range(g, -4, 4), stop = in_range(g, -4, 12);
    push(g, loom_arange(start, stop, scalar(g), d, LOOM_CPU));
    break;
  }
  case 3: push(g, loom_rand_key(loom_key_new((uint64_t)byte(g)), s, d, LOOM_CPU)); break;
  case 4: push(g, loom_randn_key(loom_key_new((uint64_t)byte(g)), s, d, LOOM_CPU)); break;
  default: {
    loom_key key = loom_key_new((uint64_t)byte(g));
    push(g, loom_bernoulli_key(key, scalar(g), s, LOOM_CPU));
  }
  }
}

typedef loom_tensor *(*unary_fn)(const loom_tensor *);
static const unary_fn unaries[] = {
    loom_neg,     loom_abs,         loom_exp,        loom_log,        loom_sqrt,
    loom_rsqrt,   loom_sin,         loom_cos,        loom_tanh,       loom_sigmoid,
    loom_relu,    loom_gelu,        loom_silu,       loom_square,     loom_reciprocal,
    loom_erf,     loom_logical_not, loom_contiguous, loom_zeros_like, loom_ones_like,
    loom_sum_all, loom_mean_all};

typedef loom_tensor *(*binary_fn)(const loom_tensor *, const loom_tensor *);
static const binary_fn binaries[] = {loom_add,        loom_sub,
                                     loom_mul,        loom_div,
                                     loom_pow,        loom_maximum,
                                     loom_minimum,    loom_lt,
                                     loom_le,         loom_gt,
                                     loom_ge,         loom_eq,
                                     loom_ne,         loom_logical_and,
                                     loom_logical_or, loom_matmul,
                                     loom_mse_loss,   loom_cross_entropy,
                                     loom_nll_loss,   loom_bce_with_logits,
                                     loom_embedding_f};

typedef loom_tensor *(*scalar_fn)(const loom_tensor *, double);
static const scalar_fn scalars[] = {
    loom_add_s, loom_sub_s, loom_mul_s, loom_div_s, loom_pow_s, loom_maximum_s, loom_minimum_s,
    loom_lt_s,  loom_le_s,  loom_gt_s,  loom_ge_s,  loom_eq_s,  loom_ne_s,      loom_full_like};

static void op_reduce(program *g) {
  loom_tensor *a = operand(g);
  int axes[4] = {0}, n = pick(g, 5);
  for (int i = 0; i < n && i < 4; i++) axes[i] = axis(g);
  bool keep = flag(g);
  switch (pick(g, 10)) {
  case 0: push(g, loom_sum(a, axes, n, keep)); break;
  case 1: push(g, loom_mean(a, axes, n, keep)); break;
  case 2: push(g, loom_max(a, axes, n, keep)); break;
  case 3: push(g, loom_min(a, axes, n, keep)); break;
  case 4: push(g, loom_argmax(a, axes[0], keep)); break;
  case 5: push(g, loom_argmin(a, axes[0], keep)); break;
  case 6: push(g, loom_softmax(a, axes[0])); break;
  case 7: push(g, loom_log_softmax(a, axes[0])); break;
  case 8: push(g, loom_logsumexp(a, axes[0])); break;
  default: push(g, loom_sum(a, axes, -n, keep)); /* a negative count */
  }
}

static void op_view(program *g) {
  loom_tensor *a = operand(g);
  switch (pick(g, 11)) {
  case 0: {
    loom_shape s = shape(g, -1);
    push(g, loom_reshape(a, s));
    break;
  }
  case 1: {
    int perm[LOOM_MAX_DIMS], n = pick(g, 6);
    for (int i = 0; i < n; i++) perm[i] = axis(g);
    push(g, loom_permute(a, perm, n));
    break;
  }
  case 2: {
    int d0 = axis(g), d1 = axis(g);
    push(g, loom_transpose(a, d0, d1));
    break;
  }
  case 3: push(g, loom_expand(a, shape(g, -1))); break;
  case 4: push(g, loom_squeeze(a, axis(g))); break;
  case 5: push(g, loom_unsqueeze(a, axis(g))); break;
  case 6: {
    int start = axis(g), end = axis(g);
    push(g, loom_flatten(a, start, end));
    break;
  }
  case 7: {
    int ax = axis(g), start = in_range(g, -6, 6), end = in_range(g, -6, 8);
    push(g, loom_slice(a, ax, start, end, in_range(g, -1, 3)));
    break;
  }
  case 8: {
    int64_t pads[8];
    int n = pick(g, 9);
    for (int i = 0; i < n; i++) pads[i] = in_range(g, -3, 3);
    push(g, loom_pad(a, pads, n, scalar(g)));
    break;
  }
  case 9: {
    loom_tensor *ts[3];
    int n = in_range(g, 1, 3);
    for (int i = 0; i < n; i++) ts[i] = operand(g);
    bool cat = flag(g);
    int ax = axis(g);
    push(g, cat ? loom_cat(ts, n, ax) : loom_stack(ts, n, ax));
    break;
  }
  default: {
    loom_tensor *cond = operand(g), *b = operand(g);
    push(g, loom_where(cond, a, b));
  }
  }
}

static void op_nn(program *g) {
  loom_tensor *x = operand(g), *w = operand(g), *b = flag(g) ? operand(g) : NULL;
  int k[7];
  for (int i = 0; i < 7; i++) k[i] = in_range(g, -1, 3); /* sizes, strides, paddings */
  switch (pick(g, 9)) {
  case 0: push(g, loom_linear_f(x, w, b)); break;
  case 1: {
    loom_conv2d_opts o = {{k[0], k[1]}, {k[2], k[3]}, {k[4], k[5]}, k[6]};
    push(g, loom_conv2d_f(x, w, b, o));
    break;
  }
  case 2: push(g, loom_max_pool2d(x, k[0], k[1], k[2])); break;
  case 3: push(g, loom_avg_pool2d(x, k[0], k[1], k[2])); break;
  case 4: push(g, loom_layer_norm(x, k[0], w, b, 1e-5)); break;
  case 5: push(g, loom_batch_norm(x, NULL, NULL, w, b, k[0] > 0, 0.1, 1e-5)); break;
  case 6: {
    double p = scalar(g);
    push(g, loom_dropout(x, p, loom_key_new((uint64_t)k[0]), k[1] > 0));
    break;
  }
  case 7: push(g, loom_one_hot(x, k[0] * 2)); break;
  default: push(g, loom_cast(x, dtype(g)));
  }
}

/* Gradients: a fresh leaf (a copy of an operand) through one op, backward,
 * the gradient on the stack. */
static void op_grad(program *g) {
  loom_tensor *a = operand(g);
  if (!a || loom_status_of(a) || !loom_dtype_is_float(loom_dtype_of(a))) return;
  loom_tensor *leaf = loom_add_s(a, 0);
  if (loom_realize(leaf) != LOOM_OK || loom_set_requires_grad(leaf, true) != LOOM_OK) return;
  unary_fn f = unaries[pick(g, 16)];
  loom_tensor *y = f(leaf);
  if (flag(g)) y = loom_mul(y, operand(g));
  loom_tensor *loss = loom_sum_all(y);
  if (flag(g)) {
    loom_tensor *grad = NULL;
    loom_grad_of(&loss, 1, &leaf, 1, &grad);
    push(g, grad);
  } else if (loom_backward(loss) == LOOM_OK) {
    push(g, loom_grad(leaf));
  }
}

/* Realizes what is on the stack and reads it back. */
static void finish(program *g) {
  loom_tensor *good[STACK];
  int n = 0;
  for (int i = 0; i < g->depth; i++)
    if (!loom_status_of(g->stack[i])) good[n++] = g->stack[i];
  loom_status st = loom_eval(good, n);
  if (st < 0 || st >= LOOM_NUM_STATUS) abort();
  if (st != LOOM_OK) return;
  static unsigned char out[MAX_NUMEL * 8];
  for (int i = 0; i < n; i++) {
    size_t bytes = (size_t)loom_numel(good[i]) * loom_dtype_size(loom_dtype_of(good[i]));
    if (!loom_is_realized(good[i]) || loom_copy_to_host(good[i], out, bytes) != LOOM_OK) {
      fprintf(stderr, "fuzz_ops: a realized tensor cannot be read: %s\n", loom_last_error());
      abort();
    }
    if (loom_dtype_of(good[i]) == LOOM_BOOL)
      for (size_t k = 0; k < bytes; k++)
        if (out[k] > 1) { /* bools are 0 or 1 */
          fprintf(stderr, "fuzz_ops: stack entry %d, a bool, holds %d\n", i, out[k]);
          abort();
        }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool once;
  if (!once) {
    once = true;
    loom_set_num_threads(2);
    tracing = getenv("LOOM_FUZZ_TRACE") != NULL;
  }
  program g = {data, size, 0, {0}, 0};
  loom_set_fusion(byte(&g) & 1);
  loom_clear_error();
  loom_scope_begin();
  for (int steps = 0; g.at < g.n && steps < 48; steps++) {
    int op = pick(&g, 16);
    if (tracing) fprintf(stderr, "op %d (byte %zu)\n", op, g.at - 1);
    switch (op) {
    case 0:
    case 1: op_make(&g); break;
    case 2:
    case 3: {
      loom_tensor *a = operand(&g);
      push(&g, unaries[pick(&g, (int)(sizeof unaries / sizeof unaries[0]))](a));
      break;
    }
    case 4:
    case 5: {
      loom_tensor *a = operand(&g), *b = operand(&g);
      push(&g, binaries[pick(&g, (int)(sizeof binaries / sizeof binaries[0]))](a, b));
      break;
    }
    case 6: {
      loom_tensor *a = operand(&g);
      int k = pick(&g, (int)(sizeof scalars / sizeof scalars[0]) + 2);
      double s = scalar(&g);
      push(&g, k == 14 ? loom_rsub_s(s, a) : k == 15 ? loom_rdiv_s(s, a) : scalars[k](a, s));
      break;
    }
    case 7: {
      loom_tensor *a = operand(&g);
      push(&g, loom_cast(a, dtype(&g)));
      break;
    }
    case 8: op_reduce(&g); break;
    case 9:
    case 10: op_view(&g); break;
    case 11: op_nn(&g); break;
    case 12: op_grad(&g); break;
    case 13: { /* realize one now: later ops then read a computed buffer */
      loom_tensor *a = operand(&g);
      if (a && !loom_status_of(a)) loom_realize(a);
      break;
    }
    case 14: { /* drop one */
      if (!g.depth) break;
      int i = pick(&g, g.depth);
      loom_free(g.stack[i]);
      g.stack[i] = g.stack[--g.depth];
      break;
    }
    default: {
      loom_tensor *a = operand(&g), *b = operand(&g);
      push(&g, loom_matmul(a, b));
    }
    }
  }
  finish(&g);
  loom_scope_end();
  return 0;
}
