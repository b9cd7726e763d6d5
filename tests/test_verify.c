/* The IR verifier (ir/verify.c): every node the frontend records verifies,
 * whatever op recorded it (forward ops, composites, gradients, optimizer
 * updates); nodes broken by hand are refused with a message naming what is
 * wrong. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/ir.h"
#include "loom.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------ frontend graphs */

static int nodes_verified;

/* Verifies every node of t's graph; computed nodes are leaves. */
static void verify_graph(const char *what, const loom_tensor *t) {
  if (!t || !t->node) {
    CHECK_MSG(false, "%s: an error tensor: %s", what, t ? loom_error_message(t) : "NULL");
    return;
  }
  int cap = 256, len = 0, nseen = 0;
  const lm_node **stack = malloc(sizeof *stack * (size_t)cap);
  const lm_node **seen = malloc(sizeof *seen * (size_t)cap);
  int seen_cap = cap;
  stack[len++] = t->node;
  while (len > 0) {
    const lm_node *n = stack[--len];
    bool old = false;
    for (int i = 0; i < nseen && !old; i++) old = seen[i] == n;
    if (old) continue;
    if (nseen == seen_cap) seen = realloc(seen, sizeof *seen * (size_t)(seen_cap *= 2));
    seen[nseen++] = n;
    char why[512];
    bool ok = lm_node_verify(n, why, sizeof why);
    CHECK_MSG(ok, "%s: a frontend node fails: %s", what, why);
    nodes_verified++;
    if (lm_is_computed(n)) continue;
    for (int s = 0; s < n->nsrc; s++) {
      if (len == cap) stack = realloc(stack, sizeof *stack * (size_t)(cap *= 2));
      stack[len++] = n->src[s];
    }
  }
  free(stack);
  free(seen);
}

static loom_tensor *floats(loom_shape shape, unsigned seed) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.dim[d];
  float *x = malloc(sizeof(float) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
  loom_tensor *t = loom_from_data(x, shape, LOOM_F32, LOOM_CPU);
  free(x);
  return t;
}

#define V(expr) verify_graph(#expr, (expr))

static void test_elementwise(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(4, 6), LOOM_F32, LOOM_CPU);
    loom_tensor *row = floats(LOOM_SHAPE(6), 1);
    loom_tensor *xi = loom_input("xi", LOOM_SHAPE(4, 6), LOOM_I32, LOOM_CPU);
    loom_tensor *xb = loom_input("xb", LOOM_SHAPE(4, 6), LOOM_BOOL, LOOM_CPU);
    loom_tensor *xd = loom_cast(floats(LOOM_SHAPE(4, 6), 2), LOOM_F64);
    loom_tensor *(*unary[])(const loom_tensor *) = {
        loom_neg, loom_abs,     loom_exp,    loom_log,       loom_sqrt, loom_rsqrt,
        loom_sin, loom_cos,     loom_tanh,   loom_relu,      loom_gelu, loom_silu,
        loom_erf, loom_sigmoid, loom_square, loom_reciprocal};
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
      V(unary[i](x));
      V(unary[i](xi));
      V(unary[i](xd));
      if (unary[i] != loom_neg) V(unary[i](xb));
    }
    V(loom_logical_not(x));
    V(loom_logical_not(xb));
    V(loom_clamp(x, -1, 1));
    V(loom_clamp(xi, -3, 4));
    V(loom_clamp(xi, -INFINITY, 0.5));
    V(loom_clamp(xd, NAN, 1));
    for (int d = 0; d < LOOM_NUM_DTYPES; d++) {
      V(loom_cast(x, (loom_dtype)d));
      V(loom_cast(xb, (loom_dtype)d));
    }
    loom_tensor *(*binary[])(const loom_tensor *, const loom_tensor *) = {
        loom_add, loom_sub, loom_mul, loom_div, loom_pow, loom_maximum,     loom_minimum,   loom_lt,
        loom_le,  loom_gt,  loom_ge,  loom_eq,  loom_ne,  loom_logical_and, loom_logical_or};
    for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
      V(binary[i](x, row));
      V(binary[i](xi, x));
      V(binary[i](xi, xi));
      V(binary[i](xd, x));
      if (binary[i] != loom_sub) V(binary[i](xb, xb));
    }
    loom_tensor *(*scalar[])(const loom_tensor *, double) = {
        loom_add_s, loom_sub_s, loom_mul_s, loom_div_s, loom_pow_s, loom_maximum_s, loom_minimum_s,
        loom_lt_s,  loom_le_s,  loom_gt_s,  loom_ge_s,  loom_eq_s,  loom_ne_s};
    for (size_t i = 0; i < sizeof scalar / sizeof scalar[0]; i++) {
      V(scalar[i](x, 2.5));
      V(scalar[i](xi, 3));
      V(scalar[i](xi, 0.5));
    }
    V(loom_rsub_s(1.5, x));
    V(loom_rdiv_s(2, xi));
    V(loom_where(xb, x, xi));
    V(loom_where(loom_gt_s(row, 0), x, loom_scalar(0, LOOM_F64, LOOM_CPU)));
    V(loom_to(x, LOOM_CPU));
  }
}

static void test_reductions_and_views(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(2, 3, 4), LOOM_F32, LOOM_CPU);
    loom_tensor *xi = loom_input("xi", LOOM_SHAPE(2, 3, 4), LOOM_I64, LOOM_CPU);
    loom_tensor *xb = loom_input("xb", LOOM_SHAPE(2, 3, 4), LOOM_BOOL, LOOM_CPU);
    loom_tensor *s0 = loom_scalar(3, LOOM_F32, LOOM_CPU);
    int ax1[] = {1}, ax02[] = {0, -1};
    loom_tensor *srcs[] = {x, xi, xb};
    for (int i = 0; i < 3; i++) {
      loom_tensor *a = srcs[i];
      V(loom_sum(a, ax1, 1, false));
      V(loom_sum(a, ax02, 2, true));
      V(loom_sum_all(a));
      V(loom_max(a, ax1, 1, true));
      V(loom_min(a, NULL, 0, false));
      V(loom_argmax(a, 2, false));
      V(loom_argmin(a, 0, true));
      V(loom_softmax(a, -1));
      V(loom_log_softmax(a, 1));
      V(loom_logsumexp(a, 0));
    }
    V(loom_mean(x, ax02, 2, false));
    V(loom_mean_all(x));
    V(loom_sum_all(s0));
    V(loom_softmax(s0, 0));
    V(loom_argmax(s0, 0, false));
    V(loom_reshape(x, LOOM_SHAPE(6, -1)));
    V(loom_permute(x, (int[]){2, 0, 1}, 3));
    V(loom_transpose(x, 0, 2));
    V(loom_expand(loom_reshape(x, LOOM_SHAPE(2, 1, 3, 4)), LOOM_SHAPE(2, 5, 3, 4)));
    V(loom_expand(x, LOOM_SHAPE(7, 2, 3, 4)));
    V(loom_squeeze(loom_unsqueeze(x, 1), 1));
    V(loom_flatten(x, 1, 2));
    V(loom_flatten(s0, 0, 0));
    V(loom_slice(x, 2, 1, 4, 2));
    V(loom_slice(x, 1, -2, 100, 1));
    V(loom_slice(x, 0, 5, 9, 3)); /* empty */
    V(loom_pad(x, (int64_t[]){1, 2, 0, 3}, 4, -1.5));
    V(loom_pad(x, (int64_t[]){-1, 2, 1, -1}, 4, 0));
    V(loom_cat((loom_tensor *[]){x, xi, xb}, 3, 1));
    V(loom_cat((loom_tensor *[]){x, loom_slice(x, 2, 0, 0, 1), x}, 3, 2));
    V(loom_stack((loom_tensor *[]){x, x}, 2, -1));
    V(loom_contiguous(loom_transpose(x, 0, 1)));
    loom_tensor *m = loom_input("m", LOOM_SHAPE(4, 5), LOOM_F32, LOOM_CPU);
    V(loom_matmul(x, m));
    V(loom_matmul(loom_transpose(m, 0, 1), loom_transpose(x, 1, 2)));
    V(loom_matmul(loom_slice(m, 0, 0, 1, 1), loom_reshape(m, LOOM_SHAPE(5, 4))));
    V(loom_matmul(loom_reshape(m, LOOM_SHAPE(20)), loom_reshape(m, LOOM_SHAPE(20))));
    V(loom_matmul(xi, loom_cast(m, LOOM_I64)));
    V(loom_matmul(loom_cast(x, LOOM_F64), loom_cast(m, LOOM_F64)));
  }
}

static void test_creation_and_nn(void) {
  LOOM_SCOPE {
    V(loom_zeros(LOOM_SHAPE(2, 0), LOOM_U8, LOOM_CPU));
    V(loom_full(LOOM_SHAPE0, -INFINITY, LOOM_F64, LOOM_CPU));
    V(loom_arange(0, 10, 3, LOOM_I64, LOOM_CPU));
    V(loom_arange(1, -1, -0.25, LOOM_F32, LOOM_CPU));
    V(loom_rand_key(loom_key_new(1), LOOM_SHAPE(3, 2), LOOM_F64, LOOM_CPU));
    V(loom_randn_key(loom_key_new(2), LOOM_SHAPE(5), LOOM_F32, LOOM_CPU));
    V(loom_bernoulli_key(loom_key_new(3), 0.25, LOOM_SHAPE(5), LOOM_CPU));
    V(loom_rand(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU));
    loom_tensor *img = loom_input("img", LOOM_SHAPE(2, 4, 9, 9), LOOM_F32, LOOM_CPU);
    loom_tensor *w = floats(LOOM_SHAPE(6, 2, 3, 3), 3), *b = floats(LOOM_SHAPE(6), 4);
    V(loom_conv2d_f(img, w, b, (loom_conv2d_opts){{2, 1}, {1, 2}, {1, 2}, 2}));
    V(loom_conv2d_f(img, floats(LOOM_SHAPE(5, 4, 1, 1), 5), NULL, (loom_conv2d_opts){0}));
    V(loom_max_pool2d(img, 3, 2, 1));
    V(loom_avg_pool2d(img, 2, 0, 0));
    loom_tensor *idx = loom_input("idx", LOOM_SHAPE(3, 5), LOOM_I32, LOOM_CPU);
    loom_tensor *table = floats(LOOM_SHAPE(10, 4), 6);
    V(loom_embedding_f(idx, table));
    V(loom_one_hot(idx, 7));
    loom_tensor *x = loom_input("x", LOOM_SHAPE(8, 10), LOOM_F32, LOOM_CPU);
    V(loom_linear_f(x, floats(LOOM_SHAPE(3, 10), 7), floats(LOOM_SHAPE(3), 8)));
    V(loom_dropout(x, 0.4, loom_key_new(9), true));
    V(loom_dropout(x, 1, loom_key_new(9), true));
    V(loom_layer_norm(x, 1, floats(LOOM_SHAPE(10), 9), floats(LOOM_SHAPE(10), 10), 1e-5));
    loom_tensor *rm = loom_zeros(LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
    loom_tensor *rv = loom_ones(LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
    V(loom_batch_norm(img, rm, rv, NULL, NULL, false, 0.1, 1e-5));
    V(loom_batch_norm(img, rm, rv, floats(LOOM_SHAPE(4), 11), NULL, true, 0.1, 1e-5));
    V(rm); /* the running statistics' lazy updates */
    V(rv);
    loom_tensor *labels = loom_input("labels", LOOM_SHAPE(8), LOOM_I64, LOOM_CPU);
    V(loom_cross_entropy(x, labels));
    V(loom_nll_loss(loom_log_softmax(x, 1), labels));
    V(loom_mse_loss(x, loom_zeros_like(x)));
    V(loom_bce_with_logits(x, loom_ones_like(x)));
    /* data-dependent input the run checks (LM_CHECK) */
    V(loom_cross_entropy_ex(x, labels,
                            (loom_cross_entropy_opts){.ignore = true, .ignore_index = -100}));
    V(loom_gather(x, 1, loom_input("at", LOOM_SHAPE(8, 3), LOOM_I32, LOOM_CPU)));
    V(loom_index_select(x, 0, loom_input("rows", LOOM_SHAPE(2), LOOM_U8, LOOM_CPU)));
    V(loom_multinomial_key(loom_key_new(4), loom_softmax(x, 1), 3, false));
    loom_tensor *pos = loom_input("pos", LOOM_SHAPE0, LOOM_I64, LOOM_CPU);
    V(loom_slice_update(img, 2, pos, loom_slice(img, 2, 0, 2, 1)));
  }
  lm_pending_clear(); /* batch norm's updates depend on a placeholder: never realized */
}

/* Gradient graphs: every rule's nodes (col2im spreads, gather's one-hot GEMM,
 * slices' zero-padded spreads, max's tie sharing, ...) and an optimizer's
 * updates. */
static void test_gradients(void) {
  LOOM_SCOPE {
    loom_params *ps = loom_params_new();
    loom_tensor *w = floats(LOOM_SHAPE(6, 2, 3, 3), 12), *e = floats(LOOM_SHAPE(10, 5), 13);
    loom_tensor *v = floats(LOOM_SHAPE(5, 4), 14);
    loom_params_add(ps, "w", w);
    loom_params_add(ps, "e", e);
    loom_params_add(ps, "v", v);
    loom_tensor *img = floats(LOOM_SHAPE(2, 4, 9, 9), 15);
    loom_tensor *c = loom_conv2d_f(img, w, NULL, (loom_conv2d_opts){{2, 2}, {1, 1}, {2, 1}, 2});
    loom_tensor *pooled = loom_max_pool2d(c, 2, 0, 0);
    loom_tensor *sliced = loom_slice(loom_pad(pooled, (int64_t[]){1, 1}, 2, 0), 3, 0, 3, 2);
    int64_t ix[] = {1, 4, 9, 0};
    loom_tensor *idx = loom_from_data(ix, LOOM_SHAPE(4), LOOM_I64, LOOM_CPU);
    loom_tensor *emb = loom_embedding_f(idx, e);
    loom_tensor *h = loom_tanh(loom_matmul(emb, v));
    loom_tensor *both = loom_cat(
        (loom_tensor *[]){loom_reshape(h, LOOM_SHAPE(16)), loom_reshape(sliced, LOOM_SHAPE(-1))}, 2,
        0);
    loom_tensor *stats = loom_add(loom_logsumexp(both, 0), loom_max(both, NULL, 0, false));
    loom_tensor *loss = loom_add(
        loom_sum_all(loom_pow(loom_abs(both), loom_scalar(1.5, LOOM_F32, LOOM_CPU))), stats);
    CHECK_OK(loom_backward(loss));
    V(loom_grad(w));
    V(loom_grad(e));
    V(loom_grad(v));
    loom_tensor *g = NULL;
    CHECK_OK(loom_grad_of(&loss, 1, &v, 1, &g));
    V(g);
    loom_tensor *gg = NULL;
    loom_tensor *gsum = loom_sum_all(g);
    CHECK_OK(loom_grad_of(&gsum, 1, &v, 1, &gg)); /* a second derivative */
    V(gg);
    loom_optim *opt = loom_adam(
        ps,
        (loom_adam_opts){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .amsgrad = true});
    CHECK_OK(loom_optim_step(opt));
    V(w);
    V(e);
    loom_optim_free(opt);
    loom_params_free(ps);
  }
  lm_pending_clear(); /* the optimizer's updates, recorded only to be verified */
  loom_clear_error();
}

/* ------------------------------------------------------------ broken by hand */

static lm_node *leaf(loom_dtype dtype, loom_shape shape) {
  return lm_node_new(LM_CONST, 0, NULL, shape, dtype, LOOM_CPU);
}

static lm_node *node(lm_op op, loom_shape shape, loom_dtype dtype, lm_node *a, lm_node *b,
                     lm_node *c) {
  lm_node *src[3] = {a, b, c};
  int nsrc = c ? 3 : b ? 2 : a ? 1 : 0;
  lm_node *n = lm_node_new(op, nsrc, src, shape, dtype, LOOM_CPU);
  lm_node_release(a), lm_node_release(b), lm_node_release(c); /* n holds them */
  return n;
}

static void accepted(const char *what, lm_node *n) {
  char why[512];
  bool ok = lm_node_verify(n, why, sizeof why);
  CHECK_MSG(ok, "%s: the control case fails: %s", what, why);
  lm_node_release(n);
}

static void refused(const char *what, lm_node *n, const char *needle) {
  char why[512];
  bool ok = lm_node_verify(n, why, sizeof why);
  CHECK_MSG(!ok, "%s: verified, a refusal was expected", what);
  CHECK_MSG(!ok && strstr(why, needle), "%s: the message '%s' lacks '%s'", what, why, needle);
  lm_node_release(n);
}

#define F32 LOOM_F32
#define S(...) LOOM_SHAPE(__VA_ARGS__)

static void test_broken_common(void) {
  lm_node *n = leaf(F32, S(2));
  n->op = LM_NUM_OPS;
  refused("unknown op", n, "unknown op");
  n = leaf(F32, S(2));
  n->dtype = (loom_dtype)17;
  refused("unknown dtype", n, "unknown dtype 17");
  n = leaf(F32, S(2));
  n->device.type = (loom_device_type)5;
  refused("unknown device", n, "unknown device type 5");
  n = leaf(F32, S(2));
  n->shape.ndim = 9;
  refused("9 dims", n, "9 dims (loom supports 0 to 8)");
  refused("negative dim", leaf(F32, S(2, -3)), "dim 1 is negative (-3)");
  refused("numel overflow", leaf(F32, S(INT64_C(1) << 40, INT64_C(1) << 40)), "too large");
  refused("too many bytes", leaf(LOOM_F64, S(INT64_C(1) << 54)), "too large");
  accepted("largest", leaf(LOOM_U8, S(INT64_C(1) << 56)));
  refused("add of one source", node(LM_ADD, S(2), F32, leaf(F32, S(2)), NULL, NULL),
          "1 sources, add takes 2");
  n = node(LM_NEG, S(2), F32, leaf(F32, S(2)), NULL, NULL);
  lm_node *kept = n->src[0];
  n->src[0] = NULL;
  char why[512];
  CHECK(!lm_node_verify(n, why, sizeof why));
  CHECK_STR_CONTAINS(why, "source 0 is NULL");
  n->src[0] = kept; /* so that releasing n releases it */
  lm_node_release(n);
  n = node(LM_NEG, S(2), F32, leaf(F32, S(2)), NULL, NULL);
  n->src[0]->device = LOOM_CUDA(0);
  refused("devices differ", n, "source 0 is on device 1:0, the node on 0:0");
  refused("const with a source", node(LM_CONST, S(2), F32, leaf(F32, S(2)), NULL, NULL),
          "1 sources, const takes 0");
  n = leaf(F32, S(2));
  n->op = LM_BUFFER;
  refused("buffer without data", n, "a buffer without data");
  n = leaf(F32, S(4));
  n->op = LM_BUFFER;
  n->data = lm_buffer_alloc(8);
  n->release_data = lm_data_free;
  n->bytes = 8;
  refused("short data", n, "holds 8 bytes of data, its shape needs 16");
}

static void test_broken_elementwise(void) {
  accepted("add", node(LM_ADD, S(2, 3), F32, leaf(F32, S(2, 3)), leaf(F32, S(2, 3)), NULL));
  refused("add shapes", node(LM_ADD, S(2, 3), F32, leaf(F32, S(2, 3)), leaf(F32, S(3)), NULL),
          "source 1 is f32[3]; an elementwise op's sources have the node's shape");
  refused("add dtypes", node(LM_ADD, S(2), F32, leaf(F32, S(2)), leaf(LOOM_F64, S(2)), NULL),
          "source 1 is f64, it must be f32");
  refused("add bools",
          node(LM_ADD, S(2), LOOM_BOOL, leaf(LOOM_BOOL, S(2)), leaf(LOOM_BOOL, S(2)), NULL),
          "arithmetic does not take bool");
  refused("div ints",
          node(LM_DIV, S(2), LOOM_I32, leaf(LOOM_I32, S(2)), leaf(LOOM_I32, S(2)), NULL),
          "div computes in f32 or f64");
  refused("exp int", node(LM_EXP, S(2), LOOM_I64, leaf(LOOM_I64, S(2)), NULL, NULL),
          "exp computes in f32 or f64");
  refused("exp source", node(LM_EXP, S(2), F32, leaf(LOOM_F64, S(2)), NULL, NULL),
          "source 0 is f64, it must be f32");
  refused("neg bool", node(LM_NEG, S(2), LOOM_BOOL, leaf(LOOM_BOOL, S(2)), NULL, NULL),
          "neg does not take bool");
  refused("square bool", node(LM_SQUARE, S(2), LOOM_BOOL, leaf(LOOM_BOOL, S(2)), NULL, NULL),
          "square does not take bool");
  refused("not of floats", node(LM_NOT, S(2), LOOM_BOOL, leaf(F32, S(2)), NULL, NULL),
          "not takes bools");
  refused("not to float", node(LM_NOT, S(2), F32, leaf(LOOM_BOOL, S(2)), NULL, NULL),
          "not gives bool");
  accepted("cast", node(LM_CAST, S(2), LOOM_U8, leaf(LOOM_F64, S(2)), NULL, NULL));
  accepted("bitcast", node(LM_BITCAST, S(2), LOOM_BF16, leaf(LOOM_I16, S(2)), NULL, NULL));
  refused("bitcast f32 to i64", node(LM_BITCAST, S(2), LOOM_I64, leaf(F32, S(2)), NULL, NULL),
          "bitcast of f32 (4 bytes) to i64 (8 bytes): the sizes must be equal");
  refused("lt to f32", node(LM_LT, S(2), F32, leaf(F32, S(2)), leaf(F32, S(2)), NULL),
          "a comparison gives bool");
  refused("eq mixed", node(LM_EQ, S(2), LOOM_BOOL, leaf(F32, S(2)), leaf(LOOM_I32, S(2)), NULL),
          "a comparison's sources share a dtype");
  refused("and of floats",
          node(LM_AND, S(2), LOOM_BOOL, leaf(LOOM_BOOL, S(2)), leaf(F32, S(2)), NULL),
          "logic takes bools");
  lm_node *c = node(LM_CLAMP, S(2), LOOM_I32, leaf(LOOM_I32, S(2)), NULL, NULL);
  c->arg.clamp.lo = -INFINITY, c->arg.clamp.hi = 7;
  accepted("clamp i32", c);
  c = node(LM_CLAMP, S(2), LOOM_I32, leaf(LOOM_I32, S(2)), NULL, NULL);
  c->arg.clamp.lo = 0.5, c->arg.clamp.hi = 7;
  refused("clamp i32 to 0.5", c, "clamp's bound 0.5 is not a value of i32");
  c = node(LM_CLAMP, S(2), LOOM_U8, leaf(LOOM_U8, S(2)), NULL, NULL);
  c->arg.clamp.lo = 0, c->arg.clamp.hi = 300;
  refused("clamp u8 to 300", c, "clamp's bound 300 is not a value of u8");
  refused("clamp bool", node(LM_CLAMP, S(2), LOOM_BOOL, leaf(LOOM_BOOL, S(2)), NULL, NULL),
          "clamp does not take bool");
  refused("where cond",
          node(LM_WHERE, S(2), F32, leaf(F32, S(2)), leaf(F32, S(2)), leaf(F32, S(2))),
          "where's condition");
  refused("where branch",
          node(LM_WHERE, S(2), F32, leaf(LOOM_BOOL, S(2)), leaf(F32, S(2)), leaf(LOOM_I32, S(2))),
          "source 2 is i32, it must be f32");
}

static lm_node *reduce(lm_op op, uint32_t axes, loom_shape out, loom_dtype dt, lm_node *src) {
  lm_node *n = node(op, out, dt, src, NULL, NULL);
  if (n) n->arg.axes = axes;
  return n;
}

static void test_broken_reductions(void) {
  accepted("sum", reduce(LM_RSUM, 2, S(2, 1), F32, leaf(F32, S(2, 3))));
  refused("no axes", reduce(LM_RSUM, 0, S(2, 3), F32, leaf(F32, S(2, 3))),
          "axes mask 0x0 does not name");
  refused("axis beyond", reduce(LM_RSUM, 4, S(2, 3), F32, leaf(F32, S(2, 3))),
          "axes mask 0x4 does not name 1 or more of the source's 2 dims");
  refused("kept dim", reduce(LM_RSUM, 2, S(2, 3), F32, leaf(F32, S(2, 3))),
          "the shape must be [2,1]");
  refused("0-d source", reduce(LM_RSUM, 1, LOOM_SHAPE0, F32, leaf(F32, LOOM_SHAPE0)),
          "the source is 0-d");
  refused("sum bool", reduce(LM_RSUM, 1, S(1), LOOM_BOOL, leaf(LOOM_BOOL, S(3))),
          "sum does not take bool");
  refused("sum dtype", reduce(LM_RSUM, 1, S(1), LOOM_I64, leaf(LOOM_I32, S(3))),
          "source 0 is i32, it must be i64");
  refused("argmax two axes", reduce(LM_ARGMAX, 3, S(1, 1), LOOM_I64, leaf(F32, S(2, 3))),
          "argmax reduces one axis, the mask 0x3 names several");
  refused("argmax f32", reduce(LM_ARGMAX, 2, S(2, 1), F32, leaf(F32, S(2, 3))), "argmax gives i64");
  accepted("lse widening", reduce(LM_RLSE, 1, S(1), LOOM_F64, leaf(F32, S(3))));
  refused("lse ints", reduce(LM_RLSE, 1, S(1), LOOM_I32, leaf(LOOM_I32, S(3))),
          "logsumexp takes f32 or f64");
  refused("lse narrowing", reduce(LM_RLSE, 1, S(1), F32, leaf(LOOM_F64, S(3))),
          "logsumexp of f64 gives f64");
  refused("max of nothing", reduce(LM_RMAX, 2, S(2, 1), F32, leaf(F32, S(2, 0))),
          "max over an empty axis of [2,0]");
  accepted("sum of nothing", reduce(LM_RSUM, 2, S(2, 1), F32, leaf(F32, S(2, 0))));
}

static lm_node *view(lm_op op, loom_shape out, lm_node *src) {
  return node(op, out, src ? src->dtype : F32, src, NULL, NULL);
}

static lm_node *sliced(loom_shape out, lm_node *src, const int64_t *start, const int64_t *step) {
  lm_node *n = view(LM_SLICE, out, src);
  for (int d = 0; n && d < out.ndim; d++)
    n->arg.slice.start[d] = start[d], n->arg.slice.step[d] = step[d];
  return n;
}

static lm_node *padded(loom_shape out, lm_node *src, const int64_t *lo) {
  lm_node *n = view(LM_PAD, out, src);
  for (int d = 0; n && d < out.ndim; d++) n->arg.pad.lo[d] = lo[d];
  return n;
}

static lm_node *permuted(loom_shape out, lm_node *src, const int *perm) {
  lm_node *n = view(LM_PERMUTE, out, src);
  for (int d = 0; n && d < out.ndim; d++) n->arg.perm[d] = perm[d];
  return n;
}

static void test_broken_views(void) {
  refused("reshape count", view(LM_RESHAPE, S(5), leaf(F32, S(2, 3))),
          "a reshape keeps the element count; the source is [2,3] (6 elements)");
  refused("reshape dtype", node(LM_RESHAPE, S(6), LOOM_I32, leaf(F32, S(2, 3)), NULL, NULL),
          "source 0 is f32, it must be i32");
  accepted("permute", permuted(S(3, 2), leaf(F32, S(2, 3)), (int[]){1, 0}));
  refused("permute repeat", permuted(S(2, 2), leaf(F32, S(2, 2)), (int[]){1, 1}),
          "perm[1] = 1 is out of range or repeated");
  refused("permute range", permuted(S(2, 2), leaf(F32, S(2, 2)), (int[]){0, 2}),
          "perm[1] = 2 is out of range");
  refused("permute shape", permuted(S(2, 3), leaf(F32, S(2, 3)), (int[]){1, 0}),
          "the shape must be [3,2]");
  refused("permute ndim", permuted(S(6), leaf(F32, S(2, 3)), (int[]){0}),
          "has 2 dims, permute keeps them");
  accepted("expand", view(LM_EXPAND, S(4, 3), leaf(F32, S(1, 3))));
  refused("expand a 2", view(LM_EXPAND, S(4, 3), leaf(F32, S(2, 3))),
          "dim 0 of the source [2,3] is 2: only size-1 dims expand");
  accepted("slice", sliced(S(2), leaf(F32, S(5)), (int64_t[]){1}, (int64_t[]){3}));
  accepted("slice backwards", sliced(S(3), leaf(F32, S(5)), (int64_t[]){4}, (int64_t[]){-2}));
  accepted("slice empty", sliced(S(0), leaf(F32, S(5)), (int64_t[]){5}, (int64_t[]){1}));
  refused("slice step 0", sliced(S(2), leaf(F32, S(5)), (int64_t[]){1}, (int64_t[]){0}),
          "step[0] is 0");
  refused("slice past the end", sliced(S(3), leaf(F32, S(5)), (int64_t[]){1}, (int64_t[]){2}),
          "dim 0: 3 indices from 1 by 2 do not all lie in [0, 5)");
  refused("slice start", sliced(S(1), leaf(F32, S(5)), (int64_t[]){-1}, (int64_t[]){1}),
          "do not all lie in [0, 5)");
  refused("slice backwards too far", sliced(S(3), leaf(F32, S(5)), (int64_t[]){3}, (int64_t[]){-2}),
          "3 indices from 3 by -2");
  refused("slice overflow",
          sliced(S(3), leaf(F32, S(5)), (int64_t[]){1}, (int64_t[]){INT64_MAX / 2 + 1}),
          "do not all lie");
  accepted("pad", padded(S(7), leaf(F32, S(5)), (int64_t[]){1}));
  refused("pad lo", padded(S(7), leaf(F32, S(5)), (int64_t[]){-1}), "lo[0] is negative (-1)");
  refused("pad short", padded(S(5), leaf(F32, S(5)), (int64_t[]){1}),
          "dim 0 is 5, less than the source's 5 plus lo 1");
  refused("pad overflow", padded(S(7), leaf(F32, S(5)), (int64_t[]){INT64_MAX}), "less than");
}

static lm_node *cat(loom_shape out, int axis, int nsrc, lm_node **src) {
  lm_node *n = lm_node_new(LM_CAT, nsrc, src, out, src[0]->dtype, LOOM_CPU);
  for (int i = 0; i < nsrc; i++) lm_node_release(src[i]);
  if (n) n->arg.axis = axis;
  return n;
}

static void test_broken_cat_window(void) {
  accepted("cat", cat(S(2, 5), 1, 2, (lm_node *[]){leaf(F32, S(2, 2)), leaf(F32, S(2, 3))}));
  refused("cat axis", cat(S(2, 5), 2, 2, (lm_node *[]){leaf(F32, S(2, 2)), leaf(F32, S(2, 3))}),
          "axis 2 is outside [0, 2)");
  refused("cat dims", cat(S(2, 5), 1, 2, (lm_node *[]){leaf(F32, S(2, 2)), leaf(F32, S(3, 3))}),
          "source 1 is f32[3,3], which does not match the node outside axis 1");
  refused("cat sum", cat(S(2, 6), 1, 2, (lm_node *[]){leaf(F32, S(2, 2)), leaf(F32, S(2, 3))}),
          "dim 1 is 6, the sources' extents along it add up to 5");
  refused("cat empty part",
          cat(S(2, 2), 1, 2, (lm_node *[]){leaf(F32, S(2, 2)), leaf(F32, S(2, 0))}),
          "source 1 is f32[2,0], empty along axis 1");
  refused("cat dtype",
          cat(S(2, 5), 1, 2, (lm_node *[]){leaf(F32, S(2, 2)), leaf(LOOM_F64, S(2, 3))}),
          "source 1 is f64, it must be f32");
  lm_node *many[LM_CAT_MAX_SOURCES + 1];
  for (int i = 0; i <= LM_CAT_MAX_SOURCES; i++) many[i] = leaf(F32, S(1));
  refused("cat of 65", cat(S(LM_CAT_MAX_SOURCES + 1), 0, LM_CAT_MAX_SOURCES + 1, many),
          "65 sources, cat takes 1 to 64");
  lm_node *w = view(LM_WINDOW, S(1, 3, 3, 2, 2), leaf(F32, S(1, 4, 4)));
  for (int i = 0; i < 2; i++)
    w->arg.window.kernel[i] = 2, w->arg.window.stride[i] = 1, w->arg.window.dilation[i] = 1;
  accepted("window", w);
  w = view(LM_WINDOW, S(1, 3, 3, 2, 2), leaf(F32, S(1, 4, 4)));
  for (int i = 0; i < 2; i++)
    w->arg.window.kernel[i] = 2, w->arg.window.stride[i] = 0, w->arg.window.dilation[i] = 1;
  refused("window stride", w, "stride 0");
  w = view(LM_WINDOW, S(1, 1, 1, 5, 5), leaf(F32, S(1, 4, 4)));
  for (int i = 0; i < 2; i++)
    w->arg.window.kernel[i] = 5, w->arg.window.stride[i] = 1, w->arg.window.dilation[i] = 1;
  refused("window too big", w, "a window of 5 with dilation 1 does not fit in 4");
  w = view(LM_WINDOW, S(1, 2, 3, 2, 2), leaf(F32, S(1, 4, 4)));
  for (int i = 0; i < 2; i++)
    w->arg.window.kernel[i] = 2, w->arg.window.stride[i] = 1, w->arg.window.dilation[i] = 1;
  refused("window shape", w, "the shape must be [1,3,3,2,2]");
  refused("window of 1 dim", view(LM_WINDOW, S(4, 1, 1), leaf(F32, S(4))), "needs 2 or more dims");
}

/* A sort node of x: its first k (full: a whole sort). */
static lm_node *sort(loom_shape out, loom_dtype dtype, lm_node *x, int64_t k, bool full) {
  lm_node *n = lm_node_new(LM_SORT, 1, &x, out, dtype, LOOM_CPU);
  lm_node_release(x);
  n->arg.sort.k = k, n->arg.sort.full = full, n->arg.sort.descending = true;
  return n;
}

static void test_broken_sort(void) {
  accepted("sort", sort(S(3, 5), LOOM_I64, leaf(LOOM_F16, S(3, 5)), 5, true));
  accepted("top 2", sort(S(3, 2), LOOM_I64, leaf(LOOM_U8, S(3, 5)), 2, false));
  accepted("top 0", sort(S(3, 0), LOOM_I64, leaf(F32, S(3, 5)), 0, false));
  refused("sort of bools", sort(S(3, 5), LOOM_I64, leaf(LOOM_BOOL, S(3, 5)), 5, true),
          "sorts numbers, not bool");
  refused("sort to f32", sort(S(3, 5), F32, leaf(F32, S(3, 5)), 5, true),
          "gives i64 positions, not f32");
  refused("sort of a scalar", sort(S(1), LOOM_I64, leaf(F32, (loom_shape){0, {0}}), 1, false),
          "sorts along the last dim of a source with none");
  refused("top 6 of 5", sort(S(3, 6), LOOM_I64, leaf(F32, S(3, 5)), 6, false),
          "k 6 of a source [3,5]: it must be 0 to the last dim's length");
  refused("top -1", sort(S(3, 5), LOOM_I64, leaf(F32, S(3, 5)), -1, false), "k -1");
  refused("a whole sort of 4", sort(S(3, 4), LOOM_I64, leaf(F32, S(3, 5)), 4, true),
          "a whole sort keeps the row's length");
  refused("sort shape", sort(S(5, 2), LOOM_I64, leaf(F32, S(3, 5)), 2, false),
          "the shape must be [3,2]");
}

/* A scan node of x along axis (sums unless combine says otherwise). */
static lm_node *scan(loom_shape out, loom_dtype dtype, lm_node *x, int axis, int combine) {
  lm_node *n = node(LM_SCAN, out, dtype, x, NULL, NULL);
  n->arg.scan.axis = axis, n->arg.scan.combine = combine, n->arg.scan.reverse = true;
  return n;
}

static void test_broken_scan(void) {
  const int sum = LOOM_REDUCE_SUM;
  accepted("scan", scan(S(3, 5), F32, leaf(F32, S(3, 5)), 1, sum));
  accepted("scan i64", scan(S(3, 0, 2), LOOM_I64, leaf(LOOM_I64, S(3, 0, 2)), 1, sum));
  refused("scan of i32", scan(S(3, 5), LOOM_I32, leaf(LOOM_I32, S(3, 5)), 0, sum),
          "scans f32, f64 or i64, not i32");
  refused("scan of f16", scan(S(3, 5), LOOM_F16, leaf(LOOM_F16, S(3, 5)), 0, sum),
          "scans f32, f64 or i64, not f16");
  refused("scan to f64", scan(S(3, 5), LOOM_F64, leaf(F32, S(3, 5)), 0, sum),
          "source 0 is f32, it must be f64");
  refused("scan axis 2", scan(S(3, 5), F32, leaf(F32, S(3, 5)), 2, sum),
          "axis 2 of a source of 2 dims");
  refused("scan axis -1", scan(S(3, 5), F32, leaf(F32, S(3, 5)), -1, sum), "axis -1");
  refused("scan of a scalar",
          scan((loom_shape){0, {0}}, F32, leaf(F32, (loom_shape){0, {0}}), 0, sum),
          "axis 0 of a source of 0 dims");
  refused("scan by max", scan(S(3, 5), F32, leaf(F32, S(3, 5)), 1, LOOM_REDUCE_MAX),
          "sums are the one scan there is");
  refused("scan shape", scan(S(5, 3), F32, leaf(F32, S(3, 5)), 1, sum), "the shape must be [3,5]");
}

/* A check node of x under rule, its range from the shapes of a and b. */
static lm_node *check(lm_check_rule rule, loom_shape out, loom_dtype dtype, lm_node *x, lm_node *a,
                      lm_node *b, int axis, const char *op) {
  lm_node *n = node(LM_CHECK, out, dtype, x, a, b);
  n->arg.check.rule = rule, n->arg.check.axis = axis;
  snprintf(n->arg.check.op, LM_CHECK_OP_LEN, "%s", op);
  return n;
}

static void test_broken_check(void) {
  accepted("index", check(LM_CHECK_INDEX, S(3), LOOM_I64, leaf(LOOM_I64, S(3)), leaf(F32, S(5, 2)),
                          NULL, 0, "loom_embedding_f"));
  accepted("start", check(LM_CHECK_START, LOOM_SHAPE0, LOOM_I32, leaf(LOOM_I32, LOOM_SHAPE0),
                          leaf(F32, S(2, 8)), leaf(F32, S(2, 3)), 1, "loom_slice_update"));
  accepted("weights", check(LM_CHECK_WEIGHTS, S(2, 4), LOOM_BF16, leaf(LOOM_BF16, S(2, 4)), NULL,
                            NULL, 0, "loom_multinomial_key"));
  lm_node *ignoring = check(LM_CHECK_INDEX, S(3), LOOM_U8, leaf(LOOM_U8, S(3)), leaf(F32, S(3, 7)),
                            NULL, 1, "loom_cross_entropy_ex");
  ignoring->arg.check.has_ignore = true, ignoring->arg.check.ignore = -100;
  accepted("index or ignored", ignoring);
  refused("rule 7", check(7, S(3), LOOM_I64, leaf(LOOM_I64, S(3)), NULL, NULL, 0, "loom_x"),
          "rule 7 is not index, start or weights");
  refused("index without a table",
          check(LM_CHECK_INDEX, S(3), LOOM_I64, leaf(LOOM_I64, S(3)), NULL, NULL, 0, "loom_x"),
          "1 sources, the index rule takes 2");
  refused("float indices",
          check(LM_CHECK_INDEX, S(3), F32, leaf(F32, S(3)), leaf(F32, S(4)), NULL, 0, "loom_x"),
          "the index rule does not take f32 values (integers)");
  refused("integer weights",
          check(LM_CHECK_WEIGHTS, S(3), LOOM_I64, leaf(LOOM_I64, S(3)), NULL, NULL, 0, "loom_x"),
          "the weights rule does not take i64 values");
  refused(
      "weights of a scalar",
      check(LM_CHECK_WEIGHTS, LOOM_SHAPE0, F32, leaf(F32, LOOM_SHAPE0), NULL, NULL, 0, "loom_x"),
      "floats of at least one dim");
  refused("another shape",
          check(LM_CHECK_INDEX, S(4), LOOM_I64, leaf(LOOM_I64, S(3)), leaf(F32, S(4)), NULL, 0,
                "loom_x"),
          "the shape must be [3]");
  refused("axis 2 of a table [4]",
          check(LM_CHECK_INDEX, S(3), LOOM_I64, leaf(LOOM_I64, S(3)), leaf(F32, S(4)), NULL, 2,
                "loom_x"),
          "axis 2 is not a dim of source 1");
  refused("an update longer than the tensor",
          check(LM_CHECK_START, LOOM_SHAPE0, LOOM_I64, leaf(LOOM_I64, LOOM_SHAPE0),
                leaf(F32, S(2, 3)), leaf(F32, S(2, 4)), 1, "loom_x"),
          "an update of 4 along axis 1 does not fit a tensor of 3");
  lm_node *start = check(LM_CHECK_START, LOOM_SHAPE0, LOOM_I64, leaf(LOOM_I64, LOOM_SHAPE0),
                         leaf(F32, S(5)), leaf(F32, S(1)), 0, "loom_x");
  start->arg.check.has_ignore = true;
  refused("a start ignoring", start, "the start rule allows no ignored value");
  refused("no op",
          check(LM_CHECK_INDEX, S(3), LOOM_I64, leaf(LOOM_I64, S(3)), leaf(F32, S(4)), NULL, 0, ""),
          "the op it reports for is not named");
  refused("a quote in the op",
          check(LM_CHECK_INDEX, S(3), LOOM_I64, leaf(LOOM_I64, S(3)), leaf(F32, S(4)), NULL, 0,
                "loom\"x"),
          "the op it reports for is not named");
  lm_node *unterminated = check(LM_CHECK_INDEX, S(3), LOOM_I64, leaf(LOOM_I64, S(3)),
                                leaf(F32, S(4)), NULL, 0, "loom_x");
  memset(unterminated->arg.check.op, 'a', LM_CHECK_OP_LEN);
  refused("an unterminated op", unterminated, "the op it reports for is not named");
}

/* An attention node of q [2, 5, 4], k [2, 7, 4], v [2, 7, 3], and a mask when given. */
static lm_node *attention(loom_shape out, lm_node *q, lm_node *k, lm_node *v, lm_node *mask,
                          int kind, bool causal) {
  lm_node *src[4] = {q, k, v, mask};
  lm_node *n = lm_node_new(LM_ATTENTION, mask ? 4 : 3, src, out, F32, LOOM_CPU);
  for (int s = 0; s < 4; s++) lm_node_release(src[s]);
  n->arg.attn.scale = 0.5, n->arg.attn.causal = causal, n->arg.attn.mask = kind;
  return n;
}

/* Attention's gradient node over q [2, 5, 4], k [2, 7, 4], v [2, 7, 3],
 * the output o and its gradient g: [2, 3, 7, 4]. */
static lm_node *attention_grad(loom_shape out, lm_node *o, lm_node *g, int nsrc) {
  lm_node *src[5] = {leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)), leaf(F32, S(2, 7, 3)), o, g};
  lm_node *n = lm_node_new(LM_ATTENTION_GRAD, nsrc, src, out, F32, LOOM_CPU);
  for (int s = 0; s < 5; s++) lm_node_release(src[s]);
  n->arg.attn.scale = 0.5, n->arg.attn.causal = true, n->arg.attn.mask = LM_ATTENTION_NO_MASK;
  return n;
}

static void test_broken_attention_grad(void) {
  accepted("attention_grad",
           attention_grad(S(2, 3, 7, 4), leaf(F32, S(2, 5, 3)), leaf(F32, S(2, 5, 3)), 5));
  refused("attention_grad shape",
          attention_grad(S(2, 3, 5, 4), leaf(F32, S(2, 5, 3)), leaf(F32, S(2, 5, 3)), 5),
          "the shape must be [2,3,7,4]");
  refused("attention_grad output",
          attention_grad(S(2, 3, 7, 4), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 5, 3)), 5),
          "output [2,5,4]: attention's output and its gradient are [.., Tq, Dv] [2,5,3]");
  refused("attention_grad gradient dtype",
          attention_grad(S(2, 3, 7, 4), leaf(F32, S(2, 5, 3)), leaf(LOOM_F64, S(2, 5, 3)), 5),
          "source 4 is f64, it must be f32");
  refused("attention_grad sources",
          attention_grad(S(2, 3, 7, 4), leaf(F32, S(2, 5, 3)), leaf(F32, S(2, 5, 3)), 4),
          "4 sources: attention takes q, k, v (and a mask), its output and the output's gradient");
}

static void test_broken_attention(void) {
  test_broken_attention_grad();
  accepted("attention", attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)),
                                  leaf(F32, S(2, 7, 3)), NULL, LM_ATTENTION_NO_MASK, true));
  accepted("attention, bool mask",
           attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)),
                     leaf(F32, S(2, 7, 3)), leaf(LOOM_BOOL, S(2, 5, 7)), LM_ATTENTION_BOOL_MASK,
                     false));
  refused("attention f64",
          attention(S(2, 5, 3), leaf(LOOM_F64, S(2, 5, 4)), leaf(F32, S(2, 7, 4)),
                    leaf(F32, S(2, 7, 3)), NULL, LM_ATTENTION_NO_MASK, false),
          "source 0 is f64, it must be f32");
  refused("attention head dims",
          attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 5)), leaf(F32, S(2, 7, 3)),
                    NULL, LM_ATTENTION_NO_MASK, false),
          "attention takes [.., Tq, D], [.., Tk, D], [.., Tk, Dv]");
  refused("attention batch",
          attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(1, 7, 4)), leaf(F32, S(2, 7, 3)),
                    NULL, LM_ATTENTION_NO_MASK, false),
          "the node's rank and batch dims");
  refused("attention result",
          attention(S(2, 5, 4), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)), leaf(F32, S(2, 7, 3)),
                    NULL, LM_ATTENTION_NO_MASK, false),
          "the shape must be [2,5,3]");
  refused("attention wide head",
          attention(S(1, 2, 3), leaf(F32, S(1, 2, 300)), leaf(F32, S(1, 2, 300)),
                    leaf(F32, S(1, 2, 3)), NULL, LM_ATTENTION_NO_MASK, false),
          "the fused kernel takes at most 256");
  refused("attention mask shape",
          attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)), leaf(F32, S(2, 7, 3)),
                    leaf(LOOM_BOOL, S(2, 5, 5)), LM_ATTENTION_BOOL_MASK, false),
          "attention's mask is [.., Tq, Tk]");
  refused("attention mask dtype",
          attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)), leaf(F32, S(2, 7, 3)),
                    leaf(LOOM_BOOL, S(2, 5, 7)), LM_ATTENTION_ADD_MASK, false),
          "source 3 is bool, it must be f32");
  refused("attention mask and causal",
          attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)), leaf(F32, S(2, 7, 3)),
                    leaf(LOOM_BOOL, S(2, 5, 7)), LM_ATTENTION_BOOL_MASK, true),
          "mask=bool and causal");
  refused("attention mask missing",
          attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)), leaf(F32, S(2, 7, 3)),
                    NULL, LM_ATTENTION_ADD_MASK, false),
          "3 sources with mask=add");
  lm_node *n = attention(S(2, 5, 3), leaf(F32, S(2, 5, 4)), leaf(F32, S(2, 7, 4)),
                         leaf(F32, S(2, 7, 3)), NULL, LM_ATTENTION_NO_MASK, false);
  n->arg.attn.scale = -1;
  refused("attention scale", n, "scale -1 is not a finite value >= 0");
}

static void test_broken_library(void) {
  accepted("matmul", node(LM_MATMUL, S(2, 4), F32, leaf(F32, S(2, 3)), leaf(F32, S(3, 4)), NULL));
  refused(
      "matmul ints",
      node(LM_MATMUL, S(2, 4), LOOM_I32, leaf(LOOM_I32, S(2, 3)), leaf(LOOM_I32, S(3, 4)), NULL),
      "matmul is f32 or f64");
  refused("matmul inner",
          node(LM_MATMUL, S(2, 4), F32, leaf(F32, S(2, 3)), leaf(F32, S(2, 4)), NULL),
          "[2,3] @ [2,4]: inner dims or batch dims differ");
  refused("matmul batch",
          node(LM_MATMUL, S(2, 2, 4), F32, leaf(F32, S(2, 2, 3)), leaf(F32, S(1, 3, 4)), NULL),
          "inner dims or batch dims differ");
  refused("matmul 1-d", node(LM_MATMUL, S(1), F32, leaf(F32, S(3)), leaf(F32, S(3)), NULL),
          "2 or more dims each");
  refused("matmul result",
          node(LM_MATMUL, S(2, 5), F32, leaf(F32, S(2, 3)), leaf(F32, S(3, 4)), NULL),
          "the shape must be [2,4]");
  refused("matmul dtypes",
          node(LM_MATMUL, S(2, 4), F32, leaf(F32, S(2, 3)), leaf(LOOM_F64, S(3, 4)), NULL),
          "source 1 is f64, it must be f32");
  accepted("matmul of bf16, f32 sums",
           node(LM_MATMUL, S(2, 4), F32, leaf(LOOM_BF16, S(2, 3)), leaf(LOOM_BF16, S(3, 4)), NULL));
  refused("matmul of bf16 and f16",
          node(LM_MATMUL, S(2, 4), F32, leaf(LOOM_BF16, S(2, 3)), leaf(LOOM_F16, S(3, 4)), NULL),
          "source 1 is f16, it must be bf16");
  refused(
      "matmul bf16 node",
      node(LM_MATMUL, S(2, 4), LOOM_BF16, leaf(LOOM_BF16, S(2, 3)), leaf(LOOM_BF16, S(3, 4)), NULL),
      "a product of bf16 or f16 operands is f32");
  refused(
      "matmul f64 sums of f16",
      node(LM_MATMUL, S(2, 4), LOOM_F64, leaf(LOOM_F16, S(2, 3)), leaf(LOOM_F16, S(3, 4)), NULL),
      "source 0 is f16, it must be f64");
  test_broken_attention();
  accepted("gather",
           node(LM_GATHER, S(2, 3, 4), F32, leaf(F32, S(10, 4)), leaf(LOOM_U8, S(2, 3)), NULL));
  refused("gather float indices",
          node(LM_GATHER, S(2, 4), F32, leaf(F32, S(10, 4)), leaf(F32, S(2)), NULL),
          "indices are f32; they must be u8, i32 or i64");
  refused("gather shape",
          node(LM_GATHER, S(2, 5), F32, leaf(F32, S(10, 4)), leaf(LOOM_I64, S(2)), NULL),
          "the shape must be [2,4]");
  refused("gather empty table",
          node(LM_GATHER, S(2, 4), F32, leaf(F32, S(0, 4)), leaf(LOOM_I64, S(2)), NULL),
          "the table [0,4] has no rows");
  refused("gather dtype",
          node(LM_GATHER, S(2, 4), LOOM_F64, leaf(F32, S(10, 4)), leaf(LOOM_I64, S(2)), NULL),
          "source 0 is f32, it must be f64");
}

static void test_broken_leaves(void) {
  lm_node *n = node(LM_IOTA, S(4), F32, NULL, NULL, NULL);
  n->arg.iota.start = 0, n->arg.iota.step = 0;
  refused("iota step 0", n, "the step not 0");
  n = node(LM_IOTA, S(4), F32, NULL, NULL, NULL);
  n->arg.iota.start = INFINITY, n->arg.iota.step = 1;
  refused("iota inf", n, "start inf and step 1 must be finite");
  n = node(LM_RAND, S(4), LOOM_BOOL, NULL, NULL, NULL);
  n->arg.rand.kind = LM_RAND_BERNOULLI, n->arg.rand.p = 0.5;
  accepted("bernoulli", n);
  n = node(LM_RAND, S(4), LOOM_BOOL, NULL, NULL, NULL);
  n->arg.rand.kind = (lm_rand_kind)7;
  refused("rand kind", n, "unknown random kind 7");
  n = node(LM_RAND, S(4), LOOM_BOOL, NULL, NULL, NULL);
  n->arg.rand.kind = LM_RAND_BERNOULLI, n->arg.rand.p = 1.5;
  refused("rand p", n, "p 1.5 is outside [0, 1]");
  n = node(LM_RAND, S(4), LOOM_BOOL, NULL, NULL, NULL);
  n->arg.rand.kind = LM_RAND_BERNOULLI, n->arg.rand.p = NAN;
  refused("rand p nan", n, "is outside [0, 1]");
  n = node(LM_RAND, S(4), F32, NULL, NULL, NULL);
  n->arg.rand.kind = LM_RAND_BERNOULLI;
  refused("bernoulli f32", n, "a bernoulli draw is bool");
  n = node(LM_RAND, S(4), LOOM_I32, NULL, NULL, NULL);
  n->arg.rand.kind = LM_RAND_NORMAL;
  refused("normal i32", n, "a uniform or normal draw is f32 or f64");
  n = node(LM_INPUT, S(4), F32, NULL, NULL, NULL);
  refused("nameless input", n, "an input without a name");
  n = leaf(LOOM_I32, S(2));
  n->arg.f = 0x1p63;
  refused("int const too large", n, "the value 9.22337e+18 is outside the int64 range");
  n = leaf(LOOM_I64, S(2));
  n->arg.f = NAN;
  refused("int const nan", n, "the value nan is outside the int64 range");
  n = leaf(LOOM_I64, S(2));
  n->arg.f = -0x1p63;
  accepted("int const smallest", n);
  n = leaf(LOOM_F32, S(2));
  n->arg.f = -INFINITY;
  accepted("float const inf", n);
  n = leaf(LOOM_BOOL, S(2));
  n->arg.f = NAN;
  accepted("bool const nan", n);
  n = padded(S(7), leaf(LOOM_U8, S(5)), (int64_t[]){1});
  n->arg.pad.value = -INFINITY;
  refused("int pad -inf", n, "the pad value -inf is outside the int64 range");
  char why[8];
  CHECK(!lm_node_verify(NULL, why, sizeof why));
  CHECK_STR_EQ(why, "NULL no"); /* cut to the buffer */
}

int main(void) {
  uint64_t before = loom_get_stats().bytes_live;
  test_elementwise();
  test_reductions_and_views();
  test_creation_and_nn();
  test_gradients();
  CHECK_MSG(nodes_verified > 1000, "only %d frontend nodes verified", nodes_verified);
  test_broken_common();
  test_broken_sort();
  test_broken_scan();
  test_broken_check();
  test_broken_elementwise();
  test_broken_reductions();
  test_broken_views();
  test_broken_cat_window();
  test_broken_library();
  test_broken_leaves();
  CHECK_EQ_INT(loom_get_stats().bytes_live, before);
  printf("%d frontend nodes verified\n", nodes_verified);
  return check_report();
}
