/* The options rule (include/loom.h, before LOOM_ZERO): every options struct
 * written as a compound literal naming one field is torch's defaults for the
 * rest, LOOM_ZERO is a real zero where the default is not zero, and values
 * torch refuses are refused naming the function, the field and the value.
 * One row per options struct: the header is read when the suite runs, and a
 * loom_*_opts struct without a row (or a row for a struct that is gone)
 * fails it. Rows for the layer structs' option fields and attention's scale
 * follow. (The optimizers' trajectories against torch's formulas are in
 * test_optim, DDP's buckets in test_dist.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"

/* ------------------------------------------------------------ helpers */

/* t's values as doubles (free them); n gets how many. */
static double *values_of(loom_tensor *t, int64_t *n) {
  *n = loom_numel(t);
  double *v = calloc((size_t)(*n ? *n : 1), sizeof(double));
  loom_tensor *wide = loom_cast(t, LOOM_F64); /* (callers may be in no scope) */
  CHECK_OK(loom_copy_to_host(wide, v, sizeof(double) * (size_t)*n));
  loom_free(wide);
  return v;
}

/* Whether a and b hold the same values, bit for bit (NaN never matches). */
static bool same_values(loom_tensor *a, loom_tensor *b) {
  int64_t na, nb;
  double *x = values_of(a, &na), *y = values_of(b, &nb);
  bool same = na == nb;
  for (int64_t i = 0; same && i < na; i++) same = x[i] == y[i] && !signbit(x[i]) == !signbit(y[i]);
  free(x), free(y);
  return same;
}

static bool all_finite(loom_tensor *t) {
  int64_t n;
  double *x = values_of(t, &n);
  bool finite = true;
  for (int64_t i = 0; i < n; i++) finite &= isfinite(x[i]) != 0;
  free(x);
  return finite;
}

static void check_refused(loom_status got, loom_status want, const char *part) {
  CHECK_EQ_INT(got, want);
  const char *msg = loom_last_error();
  CHECK_MSG(msg && strstr(msg, part), "message %s, want a part %s", msg ? msg : "(none)", part);
  loom_clear_error();
}

/* ------------------------------------------------------------ optimizers */

/* The reproducer: a ReLU MLP (8 -> 16 -> 4) trained 5 steps by the
 * optimizer make(ps, opts) gives, on inputs whose first feature is always 0
 * (as MNIST's border pixels): the weights reading it get zero gradients,
 * which Adam with eps 0 turned into 0/0. Its parameters, flattened into one
 * tensor (a new reference). */
static loom_tensor *train_mlp(loom_optim *(*make)(loom_params *, const void *), const void *opts) {
  loom_tensor *flat = NULL;
  LOOM_SCOPE {
    loom_params *ps = loom_params_new();
    loom_key k[4];
    loom_key_split(loom_key_new(41), k, 4);
    loom_linear fc1 = loom_linear_new(ps, "fc1", 8, 16, k[0]);
    loom_linear fc2 = loom_linear_new(ps, "fc2", 16, 4, k[1]);
    loom_tensor *x = loom_randn_key(k[2], LOOM_SHAPE(32, 8), LOOM_F32, LOOM_CPU);
    x = loom_mul(x, loom_gt_s(loom_arange(0, 8, 1, LOOM_F32, LOOM_CPU), 0));
    loom_tensor *y = loom_randn_key(k[3], LOOM_SHAPE(32, 4), LOOM_F32, LOOM_CPU);
    loom_optim *o = make(ps, opts);
    CHECK_MSG(o != NULL, "optimizer: %s", loom_last_error() ? loom_last_error() : "");
    for (int step = 0; o && step < 5; step++) {
      loom_optim_zero_grad(o);
      loom_tensor *h = loom_relu(loom_linear_forward(&fc1, x));
      loom_tensor *loss = loom_mse_loss(loom_linear_forward(&fc2, h), y);
      CHECK_OK(loom_backward(loss));
      CHECK_OK(loom_optim_step(o));
      CHECK_MSG(isfinite(loom_item(loss)), "loss %g at step %d", loom_item(loss), step);
    }
    loom_tensor *parts[4] = {loom_reshape(fc1.weight, LOOM_SHAPE(-1)), fc1.bias,
                             loom_reshape(fc2.weight, LOOM_SHAPE(-1)), fc2.bias};
    flat = loom_keep(loom_cat(parts, 4, 0));
    CHECK_OK(loom_realize(flat));
    loom_optim_free(o);
    loom_params_free(ps);
  }
  return flat;
}

static loom_optim *make_adam(loom_params *ps, const void *o) {
  return loom_adam(ps, *(const loom_adam_opts *)o);
}
static loom_optim *make_adamw(loom_params *ps, const void *o) {
  return loom_adamw(ps, *(const loom_adam_opts *)o);
}
static loom_optim *make_sgd(loom_params *ps, const void *o) {
  return loom_sgd(ps, *(const loom_sgd_opts *)o);
}

/* make(literal) trains to finite parameters, bit for bit those of
 * make(spelled). */
static void check_same_training(const char *what, loom_optim *(*make)(loom_params *, const void *),
                                const void *literal, const void *spelled) {
  loom_tensor *a = train_mlp(make, literal), *b = train_mlp(make, spelled);
  CHECK_MSG(all_finite(a), "%s: parameters not finite after 5 steps", what);
  CHECK_MSG(same_values(a, b), "%s: parameters differ from the spelled-out options'", what);
  loom_free(a), loom_free(b);
}

static void row_adam_opts(void) {
  loom_adam_opts lr_only = {.lr = 1e-3}, d = LOOM_ADAM_DEFAULTS, dw = LOOM_ADAMW_DEFAULTS;
  check_same_training("loom_adam {.lr = 1e-3}", make_adam, &lr_only, &d);
  check_same_training("loom_adamw {.lr = 1e-3}", make_adamw, &lr_only, &dw);
  loom_adam_opts amsgrad = {.amsgrad = true}, amsgrad_spelled = LOOM_ADAM_DEFAULTS;
  amsgrad_spelled.amsgrad = true;
  check_same_training("loom_adam {.amsgrad = true}", make_adam, &amsgrad, &amsgrad_spelled);
  /* AdamW's decay 1e-2 unless LOOM_ZERO: then Adam's update */
  loom_adam_opts no_decay = {.weight_decay = LOOM_ZERO};
  loom_tensor *a = train_mlp(make_adamw, &no_decay), *b = train_mlp(make_adamw, &lr_only);
  loom_tensor *c = train_mlp(make_adam, &lr_only);
  CHECK_MSG(!same_values(a, b), "AdamW's weight_decay LOOM_ZERO decayed as 1e-2");
  CHECK_MSG(same_values(a, c), "AdamW without decay differs from Adam");
  loom_free(a), loom_free(b), loom_free(c);
  loom_params *ps = loom_params_new();
  loom_tensor *w = loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_params_add(ps, "w", w));
  CHECK(loom_adam(ps, (loom_adam_opts){.beta2 = -0.5}) == NULL);
  check_refused(loom_last_status(), LOOM_ERR_VALUE, "loom_adam: invalid beta2: -0.5");
  CHECK(loom_adamw(ps, (loom_adam_opts){.eps = NAN}) == NULL);
  check_refused(loom_last_status(), LOOM_ERR_VALUE, "loom_adamw: invalid eps: nan");
  loom_free(w);
  loom_params_free(ps);
}

static void row_sgd_opts(void) {
  loom_sgd_opts momentum = {.momentum = 0.9}, spelled = {.lr = 1e-3, .momentum = 0.9};
  check_same_training("loom_sgd {.momentum = 0.9}", make_sgd, &momentum, &spelled);
  loom_sgd_opts nothing = {0}, defaults = LOOM_SGD_DEFAULTS;
  check_same_training("loom_sgd {0}", make_sgd, &nothing, &defaults);
  loom_params *ps = loom_params_new();
  loom_tensor *w = loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_params_add(ps, "w", w));
  loom_optim *o = loom_sgd(ps, (loom_sgd_opts){.nesterov = true, .momentum = 0.5});
  CHECK(o != NULL && loom_optim_lr(o) == 1e-3);
  loom_optim_free(o);
  CHECK(loom_sgd(ps, (loom_sgd_opts){.dampening = NAN}) == NULL);
  check_refused(loom_last_status(), LOOM_ERR_VALUE, "loom_sgd: invalid dampening: nan");
  loom_free(w);
  loom_params_free(ps);
}

/* ------------------------------------------------------------ layers' options */

static void row_conv2d_opts(void) {
  LOOM_SCOPE {
    loom_key k[3];
    loom_key_split(loom_key_new(5), k, 3);
    loom_tensor *x = loom_randn_key(k[0], LOOM_SHAPE(2, 4, 7, 6), LOOM_F32, LOOM_CPU);
    loom_tensor *w = loom_randn_key(k[1], LOOM_SHAPE(6, 2, 3, 3), LOOM_F32, LOOM_CPU);
    loom_tensor *b = loom_randn_key(k[2], LOOM_SHAPE(6), LOOM_F32, LOOM_CPU);
    loom_conv2d_opts pad = {.padding = {1, 1}, .groups = 2};
    loom_conv2d_opts spelled = {
        .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 2};
    CHECK(same_values(loom_conv2d_f(x, w, b, pad), loom_conv2d_f(x, w, b, spelled)));
    loom_tensor *w1 = loom_randn_key(k[1], LOOM_SHAPE(6, 4, 3, 3), LOOM_F32, LOOM_CPU);
    loom_conv2d_opts strided = {.stride = {2, 1}}, strided_spelled = {{2, 1}, {0, 0}, {1, 1}, 1};
    CHECK(same_values(loom_conv2d_f(x, w1, NULL, strided),
                      loom_conv2d_f(x, w1, NULL, strided_spelled)));
    loom_tensor *bad = loom_conv2d_f(x, w1, NULL, (loom_conv2d_opts){.padding = {0, -1}});
    check_refused(loom_status_of(bad), LOOM_ERR_VALUE, "loom_conv2d_f: ");
  }
}

/* Against torch 1.13: F.cross_entropy(x, y, label_smoothing=0.1) and
 * F.cross_entropy(x, y, ignore_index=0). */
static void row_cross_entropy_opts(void) {
  LOOM_SCOPE {
    double x[12] = {0.5, -1.0, 2.0, 0.25, 0.75, -0.5, 1.5, 0.0, -2.0, -0.25, 1.0, 0.5};
    int64_t y[4] = {2, 0, 1, 0}, padded[4] = {-100, 0, 1, 0};
    loom_tensor *logits = loom_from_data(x, LOOM_SHAPE(4, 3), LOOM_F64, LOOM_CPU);
    loom_tensor *labels = loom_from_data(y, LOOM_SHAPE(4), LOOM_I64, LOOM_CPU);
    loom_tensor *smooth =
        loom_cross_entropy_ex(logits, labels, (loom_cross_entropy_opts){.label_smoothing = 0.1});
    CHECK_NEAR(loom_item(smooth), 1.275452471011765, 1e-15);
    loom_tensor *plain = loom_cross_entropy_ex(logits, labels, (loom_cross_entropy_opts){0});
    CHECK(same_values(plain, loom_cross_entropy(logits, labels)));
    CHECK_NEAR(loom_item(plain), 1.2483691376784316, 1e-15);
    /* with ignore, ignore_index 0 is label 0 (written, or left out) */
    loom_tensor *ignored =
        loom_cross_entropy_ex(logits, labels, (loom_cross_entropy_opts){.ignore = true});
    CHECK_NEAR(loom_item(ignored), 0.98355667294437832, 1e-15);
    /* without it, torch's -100 is refused, never trained on as a class */
    loom_tensor *pad = loom_from_data(padded, LOOM_SHAPE(4), LOOM_I64, LOOM_CPU);
    loom_tensor *refused = loom_cross_entropy_ex(logits, pad, (loom_cross_entropy_opts){0});
    CHECK(loom_realize(refused) == LOOM_ERR_VALUE);
    loom_clear_error();
    loom_tensor *bad =
        loom_cross_entropy_ex(logits, labels, (loom_cross_entropy_opts){.label_smoothing = NAN});
    check_refused(loom_status_of(bad), LOOM_ERR_VALUE, "label_smoothing nan");
  }
}

/* strict unless non_strict (torch's strict=True), converting only with cast. */
static void row_load_opts(void) {
  char dir[] = "/tmp/loom-options-XXXXXX", path[64], extra_path[64];
  if (!mkdtemp(dir)) {
    CHECK_MSG(false, "mkdtemp failed");
    return;
  }
  snprintf(path, sizeof path, "%s/w.st", dir);
  snprintf(extra_path, sizeof extra_path, "%s/extra.st", dir);
  loom_params *wide = loom_params_new(), *more = loom_params_new(), *narrow = loom_params_new();
  double v[3] = {0.5, -2, 3.25};
  loom_tensor *w64 = loom_from_data(v, LOOM_SHAPE(3), LOOM_F64, LOOM_CPU);
  loom_tensor *extra = loom_ones(LOOM_SHAPE(1), LOOM_F64, LOOM_CPU);
  loom_tensor *w32 = loom_zeros(LOOM_SHAPE(3), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_params_add(wide, "w", w64));
  CHECK_OK(loom_params_add(more, "w", w64));
  CHECK_OK(loom_params_add(more, "extra", extra));
  CHECK_OK(loom_params_add(narrow, "w", w32));
  CHECK_OK(loom_params_save(wide, path));
  CHECK_OK(loom_params_save(more, extra_path));
  check_refused(loom_params_load_ex(narrow, path, (loom_load_opts){0}, NULL), LOOM_ERR_DTYPE,
                "(loom_params_load_ex with (loom_load_opts){.cast = true} converts float dtypes)");
  check_refused(loom_params_load_ex(narrow, extra_path, (loom_load_opts){.cast = true}, NULL),
                LOOM_ERR_SHAPE, "unexpected 'extra'");
  CHECK_OK(loom_params_load_ex(narrow, path, (loom_load_opts){.cast = true}, NULL));
  CHECK(same_values(w32, w64));
  loom_free(w64), loom_free(extra), loom_free(w32);
  loom_params_free(wide), loom_params_free(more), loom_params_free(narrow);
  remove(path), remove(extra_path), rmdir(dir);
}

/* loom_onnx_opts spelled as compound literals on tests/data/onnx/mlp.onnx
 * (x [batch, 3]): all defaults keep the batch a symbol, .dims fixes it, a
 * size of 0 or a name no input has is refused, .inputs makes x a constant,
 * .device places it. */
static void row_onnx_opts(void) {
  const char *path = LOOM_SOURCE_DIR "/tests/data/onnx/mlp.onnx";
  loom_program *p = loom_onnx_load(path, &(loom_onnx_opts){0});
  CHECK(p && loom_program_num_symbols(p) == 1);
  loom_program_free(p);
  p = loom_onnx_load(path, &(loom_onnx_opts){.dims = &(loom_onnx_dim){"batch", 3}, .ndims = 1});
  CHECK(p && loom_program_num_symbols(p) == 0 && loom_program_input_shape(p, 0).dim[0] == 3);
  loom_program_free(p);
  loom_clear_error();
  CHECK(!loom_onnx_load(path, &(loom_onnx_opts){.dims = &(loom_onnx_dim){"batch", 0}, .ndims = 1}));
  check_refused(loom_last_status(), LOOM_ERR_VALUE, "fixed at 0");
  CHECK(!loom_onnx_load(path, &(loom_onnx_opts){.dims = &(loom_onnx_dim){"seq", 4}, .ndims = 1}));
  check_refused(loom_last_status(), LOOM_ERR_VALUE, "'seq', which is no symbolic dim");
  CHECK(!loom_onnx_load(path, &(loom_onnx_opts){.ndims = 1}));
  check_refused(loom_last_status(), LOOM_ERR_NULL, "opts->dims or opts->inputs is NULL");
  /* one field alone: a list is read for its count, so .dims without .ndims fixes
   * nothing (the batch stays a symbol), and a count without its list is refused */
  p = loom_onnx_load(path, &(loom_onnx_opts){.dims = &(loom_onnx_dim){"batch", 3}});
  CHECK(p && loom_program_num_symbols(p) == 1);
  loom_program_free(p);
  CHECK(!loom_onnx_load(path, &(loom_onnx_opts){.ninputs = 1}));
  check_refused(loom_last_status(), LOOM_ERR_NULL, "opts->dims or opts->inputs is NULL");
  loom_tensor *x = loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
  p = loom_onnx_load(path, &(loom_onnx_opts){.inputs = &(loom_onnx_input){"x", x}, .ninputs = 1});
  CHECK(p && loom_program_num_inputs(p) == 0);
  loom_program_free(p);
  loom_free(x);
  /* .device alone: the CPU as the zero default; a CUDA device without one is
   * refused naming it */
  p = loom_onnx_load(path, &(loom_onnx_opts){.device = LOOM_CPU});
  CHECK(p && loom_program_num_symbols(p) == 1);
  loom_program_free(p);
  if (!loom_cuda_available()) {
    loom_clear_error();
    CHECK(!loom_onnx_load(path, &(loom_onnx_opts){.device = LOOM_CUDA(0)}));
    CHECK(loom_last_error() && strstr(loom_last_error(), "cuda:0 is not available"));
    loom_clear_error();
  }
}

/* Accepted here (a zero bucket_bytes is DDP's 25 MiB: the call gets as far
 * as asking for the world, which this process has not joined); its buckets
 * are in test_dist. */
static void row_ddp_opts(void) {
  loom_params *ps = loom_params_new();
  loom_tensor *w = loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_params_add(ps, "w", w));
  CHECK_EQ_INT(loom_ddp(ps, (loom_ddp_opts){.first_bucket_bytes = 16}), LOOM_ERR_DIST);
  loom_clear_error();
  check_refused(loom_ddp(ps, (loom_ddp_opts){.bucket_bytes = -1}), LOOM_ERR_VALUE,
                "loom_ddp: bucket_bytes -1 and first_bucket_bytes 0 must be >= 0");
  loom_free(w);
  loom_params_free(ps);
}

/* momentum 0.1, eps 1e-5 for fields left zero; LOOM_ZERO real zeros. */
static void row_batchnorm2d(void) {
  LOOM_SCOPE {
    loom_params *ps = loom_params_new(), *qs = loom_params_new();
    loom_batchnorm2d made = loom_batchnorm2d_new(ps, "bn", 3),
                     other = loom_batchnorm2d_new(qs, "bn", 3);
    loom_batchnorm2d literal = {.weight = other.weight,
                                .bias = other.bias,
                                .running_mean = other.running_mean,
                                .running_var = other.running_var};
    loom_tensor *x = loom_randn_key(loom_key_new(9), LOOM_SHAPE(4, 3, 2, 2), LOOM_F32, LOOM_CPU);
    x = loom_add_s(loom_mul_s(x, 3), 1);
    CHECK(same_values(loom_batchnorm2d_forward(&made, x, true),
                      loom_batchnorm2d_forward(&literal, x, true)));
    CHECK(same_values(made.running_mean, other.running_mean));
    CHECK(same_values(made.running_var, other.running_var));
    /* LOOM_ZERO momentum: the statistics stay; LOOM_ZERO eps: none added */
    literal.momentum = LOOM_ZERO, literal.eps = LOOM_ZERO;
    double before[3], after[3];
    loom_tensor *mean_before = loom_cast(loom_contiguous(other.running_mean), LOOM_F64);
    CHECK_OK(loom_realize(mean_before));
    CHECK_OK(loom_copy_to_host(mean_before, before, sizeof before));
    loom_tensor *y = loom_batchnorm2d_forward(&literal, x, true);
    loom_tensor *want = loom_batch_norm(x, NULL, NULL, other.weight, other.bias, true, 0, 0);
    CHECK(same_values(y, want));
    loom_tensor *mean_after = loom_cast(other.running_mean, LOOM_F64);
    CHECK_OK(loom_copy_to_host(mean_after, after, sizeof after));
    CHECK(memcmp(before, after, sizeof before) == 0);
    literal.eps = -1;
    check_refused(loom_status_of(loom_batchnorm2d_forward(&literal, x, true)), LOOM_ERR_VALUE,
                  "loom_batchnorm2d_forward: loom_batch_norm: eps -1 is not a finite value >= 0");
    loom_params_free(ps), loom_params_free(qs);
  }
}

static void row_layernorm(void) {
  LOOM_SCOPE {
    loom_params *ps = loom_params_new();
    loom_layernorm made = loom_layernorm_new(ps, "ln", 5);
    loom_layernorm literal = {.weight = made.weight, .bias = made.bias};
    loom_tensor *x = loom_randn_key(loom_key_new(3), LOOM_SHAPE(4, 5), LOOM_F32, LOOM_CPU);
    x = loom_mul_s(x, 1e-3); /* small enough for eps to count */
    CHECK(same_values(loom_layernorm_forward(&made, x), loom_layernorm_forward(&literal, x)));
    literal.eps = LOOM_ZERO;
    CHECK(same_values(loom_layernorm_forward(&literal, x),
                      loom_layer_norm(x, 1, made.weight, made.bias, 0)));
    CHECK(!same_values(loom_layernorm_forward(&literal, x), loom_layernorm_forward(&made, x)));
    literal.eps = NAN;
    check_refused(loom_status_of(loom_layernorm_forward(&literal, x)), LOOM_ERR_VALUE,
                  "loom_layernorm_forward: loom_layer_norm: eps nan is not a finite value >= 0");
    loom_params_free(ps);
  }
}

/* scale 0 is torch's None (1/sqrt(D)); LOOM_ZERO weighs every key alike. */
static void row_attention_scale(void) {
  LOOM_SCOPE {
    loom_tensor *q = loom_randn_key(loom_key_new(1), LOOM_SHAPE(2, 3, 4), LOOM_F64, LOOM_CPU);
    loom_tensor *k = loom_randn_key(loom_key_new(2), LOOM_SHAPE(2, 5, 4), LOOM_F64, LOOM_CPU);
    CHECK(same_values(loom_scaled_dot_product_attention(q, k, k, NULL, false, 0),
                      loom_scaled_dot_product_attention(q, k, k, NULL, false, 0.5)));
    loom_tensor *flat = loom_scaled_dot_product_attention(q, k, k, NULL, false, LOOM_ZERO);
    loom_tensor *mean = loom_mean(k, (int[]){1}, 1, true);
    loom_tensor *diff = loom_sub(flat, loom_expand(mean, LOOM_SHAPE(2, 3, 4)));
    CHECK_NEAR(loom_item(loom_max(loom_abs(diff), NULL, 0, false)), 0, 1e-15);
  }
}

/* ------------------------------------------------------------ the table */

typedef struct row {
  const char *type; /* a loom_*_opts struct, or what else the row covers */
  void (*check)(void);
} row;

static const row rows[] = {
    {"loom_adam_opts", row_adam_opts},     {"loom_sgd_opts", row_sgd_opts},
    {"loom_conv2d_opts", row_conv2d_opts}, {"loom_cross_entropy_opts", row_cross_entropy_opts},
    {"loom_load_opts", row_load_opts},     {"loom_ddp_opts", row_ddp_opts},
    {"loom_onnx_opts", row_onnx_opts},     {"loom_batchnorm2d", row_batchnorm2d},
    {"loom_layernorm", row_layernorm},     {"attention's scale", row_attention_scale},
};
enum { NROWS = sizeof rows / sizeof rows[0] };

static bool ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && !strcmp(s + n - m, tail);
}

/* Every "typedef struct loom_<name>_opts" of the header has a row, and
 * every _opts row names one of them. */
static void test_every_struct_has_a_row(void) {
  const char *path = LOOM_SOURCE_DIR "/include/loom.h";
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "cannot read %s", path);
  if (!f) return;
  char line[512];
  bool covered[NROWS] = {false};
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    char name[128];
    if (sscanf(line, "typedef struct %127[A-Za-z0-9_]", name) != 1 || !ends_with(name, "_opts"))
      continue;
    found++;
    int r = 0;
    while (r < NROWS && strcmp(rows[r].type, name)) r++;
    CHECK_MSG(r < NROWS, "include/loom.h's %s has no row in tests/test_options.c", name);
    if (r < NROWS) covered[r] = true;
  }
  fclose(f);
  CHECK_MSG(found >= 6, "only %d options structs found in %s", found, path);
  for (int r = 0; r < NROWS; r++)
    CHECK_MSG(covered[r] || !ends_with(rows[r].type, "_opts"),
              "the row for %s names no struct of include/loom.h", rows[r].type);
}

int main(void) {
  test_every_struct_has_a_row();
  for (int r = 0; r < NROWS; r++) {
    check_set_ctx("%s", rows[r].type);
    rows[r].check();
  }
  check_set_ctx("%s", "");
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
