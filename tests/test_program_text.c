/* Programs as text (io/program_text.c, io/program_parse.c): the
 * dump, the Graphviz picture, save -> load round trips whose runs equal the
 * original program's bit for bit, and the strict loader refusing broken
 * files (every truncation, every line mutated several ways, wrong versions,
 * missing or mismatched weights) with the expected status and message. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/program_text.h"
#include "loom.h"
#include "runtime/program.h"
#include "runtime/runtime.h"
#include "scratch.h"

static char scratch[256];

static const char *in_scratch(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", scratch, name);
  return buf;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)size + 1);
  *len = fread(buf, 1, (size_t)size, f);
  buf[*len] = 0;
  fclose(f);
  return buf;
}

static void write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(data, 1, len, f);
    fclose(f);
  }
}

static bool same_file(const char *a, const char *b) {
  size_t la = 0, lb = 0;
  char *x = read_file(a, &la), *y = read_file(b, &lb);
  bool same = x && y && la == lb && memcmp(x, y, la) == 0;
  free(x);
  free(y);
  return same;
}

/* The dump of p as a string (free it). */
static char *dump_of(const loom_program *p) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  CHECK_OK(loom_program_dump(p, f));
  fclose(f);
  return s;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *at = s; (at = strstr(at, needle)); at += strlen(needle)) n++;
  return n;
}

/* ------------------------------------------------------------ data */

static unsigned next_random(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

static loom_tensor *floats(loom_shape shape, unsigned seed) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.dim[d];
  float *x = malloc(sizeof(float) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) x[i] = (float)(next_random(&seed) % 2001) / 1000.0f - 1.0f;
  loom_tensor *t = loom_from_data(x, shape, LOOM_F32, LOOM_CPU);
  free(x);
  return t;
}

/* Random data of any dtype: floats in [-1, 1], integers in [0, 10) (I8 in
 * [-128, 127]), bools. */
static loom_tensor *random_data(loom_shape shape, loom_dtype dtype, unsigned seed) {
  if (dtype == LOOM_F32) return floats(shape, seed);
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.dim[d];
  unsigned char *buf = malloc((size_t)(n + 1) * 8);
  for (int64_t i = 0; i < n; i++) {
    unsigned r = next_random(&seed);
    switch (dtype) {
    case LOOM_F64: ((double *)buf)[i] = (double)(r % 20001) / 10000.0 - 1.0; break;
    case LOOM_I32: ((int32_t *)buf)[i] = (int32_t)(r % 10); break;
    case LOOM_I64: ((int64_t *)buf)[i] = (int64_t)(r % 10); break;
    case LOOM_U8: buf[i] = (unsigned char)(r % 10); break;
    case LOOM_I8: ((int8_t *)buf)[i] = (int8_t)(int)(r % 256 - 128); break;
    case LOOM_I16: ((int16_t *)buf)[i] = (int16_t)(int)(r % 65536 - 32768); break;
    case LOOM_U16: ((uint16_t *)buf)[i] = (uint16_t)(r % 65536); break;
    case LOOM_U32: ((uint32_t *)buf)[i] = (uint32_t)r * 2654435761u; break;
    case LOOM_U64: ((uint64_t *)buf)[i] = (uint64_t)r * 0x9e3779b97f4a7c15ull; break;
    default: buf[i] = (unsigned char)(r & 1); break;
    }
  }
  loom_tensor *t = loom_from_data(buf, shape, dtype, LOOM_CPU);
  free(buf);
  return t;
}

/* The bytes of a realized tensor (free them). */
static unsigned char *bytes_of(loom_tensor *t, size_t *len) {
  *len = (size_t)loom_numel(t) * loom_dtype_size(loom_dtype_of(t));
  unsigned char *b = malloc(*len + 1);
  if (loom_copy_to_host(t, b, *len) != LOOM_OK) *len = (size_t)-1;
  return b;
}

/* ------------------------------------------------------------ models */

typedef struct model {
  const char *name;
  int nin, nout;
  loom_shape shape[4];
  loom_dtype dtype[4];
  void (*build)(loom_tensor *const *in, loom_tensor **out);
} model;

static void chain(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_tanh(loom_add_s(loom_mul_s(in[0], 2.0), 1.0));
}

/* ops added after the format: written and read by their table names */
static void log1p_expm1(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_log1p(loom_abs(in[0]));
  out[1] = loom_expm1(in[0]);
}

/* clamp's two bounds (one infinite) are the op's arguments in the text */
static void clamps(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_clamp(in[0], -0.25, 0.5);
  out[1] = loom_clamp(loom_mul_s(in[0], 3), -INFINITY, 1.0);
}

/* bitcast: the node's dtype is the whole argument; both ways, and to BOOL */
static void bitcasts(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_bitcast(loom_add_s(loom_bitcast(in[0], LOOM_I32), 1), LOOM_F32);
  out[1] = loom_bitcast(loom_cast(in[0], LOOM_U8), LOOM_BOOL);
}

static void softmaxes(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_softmax(in[0], -1);
  out[1] = loom_log_softmax(in[0], 0);
}

static void mlp(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *w1 = floats(LOOM_SHAPE(64, 32), 1), *b1 = floats(LOOM_SHAPE(32), 2);
  loom_tensor *w2 = floats(LOOM_SHAPE(32, 10), 3), *b2 = floats(LOOM_SHAPE(10), 4);
  loom_tensor *h = loom_relu(loom_add(loom_matmul(in[0], w1), b1));
  out[0] = loom_softmax(loom_add(loom_matmul(h, w2), b2), -1);
}

/* Three inputs (the last unused), four outputs: one a weight as it is, one
 * an input as it is. */
static void several(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *w = floats(LOOM_SHAPE(3, 5), 9);
  int axis = 1;
  out[0] = loom_sum(loom_mul(loom_add(in[0], in[1]), w), &axis, 1, false);
  out[1] = w;
  out[2] = loom_exp(in[1]);
  out[3] = in[0];
}

static void random_draws(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_dropout(in[0], 0.3, loom_key_new(7), true);
  out[1] = loom_add(
      in[0], loom_randn_key(loom_key_new(0xdeadbeefcafeull), LOOM_SHAPE(6, 9), LOOM_F32, LOOM_CPU));
  out[2] = loom_rand_key(loom_key_fold(loom_key_new(3), 5), LOOM_SHAPE(4), LOOM_F64, LOOM_CPU);
}

static void integers(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *xi = in[0], *xb = in[1];
  int axis = 1;
  out[0] = loom_where(xb, loom_sub_s(loom_mul_s(xi, 3), 2), loom_neg(xi));
  out[1] = loom_argmax(xi, 1, false);
  out[2] = loom_sum(loom_square(xi), &axis, 1, true);
  out[3] = loom_logical_or(loom_logical_and(xb, loom_gt_s(xi, 4)), loom_eq_s(xi, 0));
  out[4] = loom_cast(loom_add(xi, loom_arange(0, 7, 1, LOOM_I32, LOOM_CPU)), LOOM_U8);
  out[5] = loom_matmul(xi, loom_transpose(xi, 0, 1));
  out[6] = loom_div(xi, loom_add_s(xi, 1));
  out[7] = loom_max(loom_cast(xb, LOOM_I64), NULL, 0, false);
}

/* I8 as a quantized model holds it: dequantized, requantized (clamped,
 * rounded, cast back), wrapping arithmetic, sums as I64, promotion with U8. */
static void int8s(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *q = in[0];
  loom_tensor *deq = loom_mul_s(loom_cast(loom_add_s(q, 3), LOOM_F32), 0.05);
  out[0] = loom_cast(loom_clamp(loom_round(loom_div_s(loom_relu(deq), 0.1)), -128, 127), LOOM_I8);
  out[1] = loom_sum(loom_mul(q, q), NULL, 0, false);
  out[2] = loom_argmin(q, 0, true);
  out[3] = loom_add(q, loom_cast(loom_transpose(q, 0, 1), LOOM_U8));
  out[4] = loom_where(loom_lt_s(q, 0), loom_neg(q), loom_mul_s(q, 3));
}

/* I16, U16, U32, U64 inputs (ONNX's integer tensors): wrapping arithmetic,
 * unsigned comparisons, sums (I64; U64 for U64), NumPy's promotion, casts. */
static void wide_ints(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *a = in[0], *b = in[1], *c = in[2], *d = in[3];
  out[0] = loom_add(loom_mul(a, a), loom_cast(b, LOOM_I16)); /* I16 with U16 -> I32 */
  out[1] = loom_sum(loom_mul_s(b, 3), NULL, 0, false);
  out[2] = loom_where(loom_gt_s(c, 2147483648.0), loom_sub_s(c, 7), loom_neg(c));
  out[3] = loom_sum(loom_add(d, loom_cast(c, LOOM_U64)), NULL, 0, false);
  out[4] = loom_max(loom_add(c, loom_cast(a, LOOM_I8)), NULL, 0, false); /* U32 with I8: I64 */
  out[5] = loom_cast(loom_lt(d, loom_transpose(d, 0, 1)), LOOM_U16);
}

static void views(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *x = in[0];
  loom_tensor *s = loom_slice(x, 1, 1, 9, 3);
  loom_tensor *p = loom_pad(x, (int64_t[]){2, -1, -1, 1}, 4, -0.5);
  loom_tensor *c = loom_cat((loom_tensor *[]){s, loom_slice(p, 1, 0, 3, 1), x}, 3, 1);
  out[0] = loom_permute(c, (int[]){1, 0}, 2);
  out[1] =
      loom_expand(loom_reshape(loom_sum(x, NULL, 0, false), LOOM_SHAPE(1, 1)), LOOM_SHAPE(3, 2));
  out[2] = loom_flatten(loom_stack((loom_tensor *[]){x, loom_neg(x)}, 2, 2), 0, 1);
}

/* A sum over 90000 values to one: planned as a split reduction (partial sums
 * in a temporary, then their combination). */
static void split(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_mean_all(in[0]);
  out[1] = loom_max(in[0], NULL, 0, false);
}

static void conv(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *w = floats(LOOM_SHAPE(6, 2, 3, 3), 11), *b = floats(LOOM_SHAPE(6), 12);
  loom_tensor *c = loom_conv2d_f(in[0], w, b, (loom_conv2d_opts){{2, 1}, {1, 2}, {1, 2}, 2});
  out[0] = loom_max_pool2d(loom_relu(c), 2, 0, 1);
  out[1] = loom_avg_pool2d(in[0], 3, 2, 1);
}

static void embedding(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *table = floats(LOOM_SHAPE(10, 4), 13), *w = floats(LOOM_SHAPE(3, 4), 14);
  loom_tensor *e = loom_embedding_f(in[0], table);
  out[0] = loom_linear_f(e, w, NULL);
  out[1] = loom_one_hot(in[0], 10);
}

static void normalized(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *g = random_data(LOOM_SHAPE(12), LOOM_F64, 15);
  out[0] = loom_gelu(loom_layer_norm(in[0], 1, g, NULL, 1e-5));
  out[1] = loom_cross_entropy(loom_cast(in[0], LOOM_F32), in[1]);
}

/* The fused attention kernel: causal, and under a mask of a comparison (its
 * own step, read through a broadcast). */
static void attention(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *k = loom_mul_s(in[0], 0.5), *keep = loom_gt_s(floats(LOOM_SHAPE(9, 9), 16), -0.5);
  out[0] = loom_scaled_dot_product_attention(in[0], k, in[0], NULL, true, 0);
  out[1] = loom_scaled_dot_product_attention(in[0], k, in[0], keep, false, 0.3);
}

/* Attention's fused backward (over 130 keys, as the default takes it): a
 * weight's gradient through causal attention. */
static void attention_grad(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *w = floats(LOOM_SHAPE(8, 8), 17);
  CHECK_OK(loom_set_requires_grad(w, true));
  loom_tensor *q = loom_matmul(in[0], w);
  loom_tensor *y = loom_scaled_dot_product_attention(q, in[0], in[0], NULL, true, 0);
  CHECK_OK(loom_backward(loom_sum_all(loom_mul(y, in[0]))));
  loom_tensor *g = loom_grad(w); /* (a handle outside the scope) */
  out[0] = loom_mul_s(g, 1);
  loom_free(g);
}

/* A sort's values and a top-k's positions along the other axis (two sort
 * steps: ascending whole rows, the 3 largest of each column). */
static void sorts(loom_tensor *const *in, loom_tensor **out) {
  CHECK_OK(loom_sort(in[0], -1, false, &out[0], NULL));
  CHECK_OK(loom_topk(in[0], 3, 0, true, NULL, &out[1]));
}

/* Running sums along either axis (floats, and integers as I64) and a
 * weight's gradient through one: three scan steps, the last from the end. */
static void cumsums(loom_tensor *const *in, loom_tensor **out) {
  loom_tensor *w = floats(LOOM_SHAPE(6, 50), 18);
  CHECK_OK(loom_set_requires_grad(w, true));
  out[0] = loom_cumsum(in[0], 0);
  out[1] = loom_cumsum(loom_cast(loom_gt_s(in[0], 0), LOOM_I32), -1);
  CHECK_OK(loom_backward(loom_sum_all(loom_mul(loom_cumsum(loom_mul(in[0], w), 1), in[0]))));
  loom_tensor *g = loom_grad(w); /* (a handle outside the scope) */
  out[2] = loom_mul_s(g, 1);
  loom_free(g);
}

/* Checks of data-dependent input (LM_CHECK, every rule): a draw's weights, labels
 * with one ignored, a KV cache's position (inputs below 10: every one valid). */
static void checks(loom_tensor *const *in, loom_tensor **out) {
  out[0] = loom_multinomial_key(loom_key_new(5), loom_softmax(in[0], 1), 2, true);
  out[1] = loom_cross_entropy_ex(in[0], in[1],
                                 (loom_cross_entropy_opts){.ignore = true, .ignore_index = 3});
  loom_tensor *start = loom_reshape(loom_slice(in[1], 0, 0, 1, 1), LOOM_SHAPE0);
  out[2] =
      loom_slice_update(floats(LOOM_SHAPE(12, 10), 17), 0, start, loom_slice(in[0], 0, 0, 1, 1));
}

static const model models[] = {
    {"chain", 1, 1, {LOOM_SHAPE(37, 19)}, {LOOM_F32}, chain},
    {"clamp", 1, 2, {LOOM_SHAPE(6, 7)}, {LOOM_F32}, clamps},
    {"bitcast", 1, 2, {LOOM_SHAPE(6, 7)}, {LOOM_F32}, bitcasts},
    {"log1p_expm1", 1, 2, {LOOM_SHAPE(5, 3)}, {LOOM_F32}, log1p_expm1},
    {"softmax", 1, 2, {LOOM_SHAPE(16, 100)}, {LOOM_F32}, softmaxes},
    {"mlp", 1, 1, {LOOM_SHAPE(8, 64)}, {LOOM_F32}, mlp},
    {"several",
     3,
     4,
     {LOOM_SHAPE(3, 5), LOOM_SHAPE(3, 5), LOOM_SHAPE(2)},
     {LOOM_F32, LOOM_F32, LOOM_I64},
     several},
    {"random", 1, 3, {LOOM_SHAPE(6, 9)}, {LOOM_F32}, random_draws},
    {"integers", 2, 8, {LOOM_SHAPE(7, 7), LOOM_SHAPE(7, 7)}, {LOOM_I32, LOOM_BOOL}, integers},
    {"int8", 1, 5, {LOOM_SHAPE(6, 6)}, {LOOM_I8}, int8s},
    {"wide_ints",
     4,
     6,
     {LOOM_SHAPE(6, 6), LOOM_SHAPE(6, 6), LOOM_SHAPE(6, 6), LOOM_SHAPE(6, 6)},
     {LOOM_I16, LOOM_U16, LOOM_U32, LOOM_U64},
     wide_ints},
    {"views", 1, 3, {LOOM_SHAPE(3, 10)}, {LOOM_F32}, views},
    {"split", 1, 2, {LOOM_SHAPE(300, 300)}, {LOOM_F32}, split},
    {"conv", 1, 2, {LOOM_SHAPE(2, 4, 9, 9)}, {LOOM_F32}, conv},
    {"embedding", 1, 2, {LOOM_SHAPE(3, 5)}, {LOOM_I64}, embedding},
    {"normalized", 2, 2, {LOOM_SHAPE(5, 12), LOOM_SHAPE(5)}, {LOOM_F64, LOOM_I64}, normalized},
    {"attention", 1, 2, {LOOM_SHAPE(2, 3, 9, 8)}, {LOOM_F32}, attention},
    {"attention_grad", 1, 1, {LOOM_SHAPE(1, 2, 130, 8)}, {LOOM_F32}, attention_grad},
    {"sort", 1, 2, {LOOM_SHAPE(6, 50)}, {LOOM_F32}, sorts},
    {"cumsum", 1, 3, {LOOM_SHAPE(6, 50)}, {LOOM_F32}, cumsums},
    {"checks", 2, 3, {LOOM_SHAPE(4, 10), LOOM_SHAPE(4)}, {LOOM_F32, LOOM_I64}, checks},
};
#define NMODELS ((int)(sizeof models / sizeof models[0]))

static const model *model_named(const char *name) {
  for (int i = 0; i < NMODELS; i++)
    if (strcmp(models[i].name, name) == 0) return &models[i];
  return NULL;
}

/* Compiles a model on placeholders (names x0, x1, ...). */
static loom_program *compile_model(const model *m) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *ph[4], *outs[8];
    for (int i = 0; i < m->nin; i++) {
      char name[16];
      snprintf(name, sizeof name, "x%d", i);
      ph[i] = loom_input(name, m->shape[i], m->dtype[i], LOOM_CPU);
    }
    m->build(ph, outs);
    p = loom_compile(outs, m->nout, ph, m->nin);
    CHECK_MSG(p != NULL, "%s: compile failed: %s", m->name, loom_last_error());
  }
  return p;
}

/* ------------------------------------------------------------ dump and dot */

static void test_dump(void) {
  loom_program *p = compile_model(model_named("mlp"));
  if (!p) return;
  char *d = dump_of(p);
  CHECK_STR_CONTAINS(d, "loom program: 1 input, 4 weights,");
  CHECK_STR_CONTAINS(d, "\ninputs\n  input 0 x0 f32[8,64]");
  CHECK_STR_CONTAINS(d, "\nnodes\n  %0 = input 0");
  CHECK_STR_CONTAINS(d, "%1 = weight w0 f32[64,32]");
  CHECK_STR_CONTAINS(d, "%2 = matmul f32[8,32] %0 %1");
  CHECK_STR_CONTAINS(d, "max f32[8,1]"); /* softmax: exp(x - max) / sum */
  CHECK_STR_CONTAINS(d, "axes=[1]");
  CHECK_STR_CONTAINS(d, "stored, out0");
  CHECK_STR_CONTAINS(d, "\noutputs\n  output %");
  CHECK_STR_CONTAINS(d, "\nschedule\n  step 0: gemm -> %2 f32[8,32]");
  CHECK_STR_CONTAINS(d, "M 8 N 32 K 64: A %0 lda 64");
  CHECK_STR_CONTAINS(d, "kernel dom [8, 32]");
  CHECK_STR_CONTAINS(d, "stats max f32, sum f32"); /* the row's max and sum in its kernel */
  CHECK_STR_CONTAINS(d, "slots: 0 %");
  CHECK_STR_CONTAINS(d, "rows of step"); /* a GEMM run in blocks by its epilogue */
  for (int i = 0; i < p->plan->nsteps; i++) {
    char step[32];
    snprintf(step, sizeof step, "  step %d: %s", i,
             p->plan->steps[i].kind == LM_STEP_GEMM ? "gemm" : "kernel");
    CHECK_STR_CONTAINS(d, step);
  }
  CHECK_EQ_INT(count(d, "kernel dom"), p->plan->nsteps - count(d, ": gemm ->"));
  free(d);
  /* a split reduction's temporary, and a kernel recomputing what another computes */
  loom_program *s = compile_model(model_named("split"));
  if (s) {
    d = dump_of(s);
    CHECK_STR_CONTAINS(d, "kernel -> %t0");
    CHECK_STR_CONTAINS(d, "partial results of a split reduction");
    CHECK_STR_CONTAINS(d, "1 %t0");
    free(d);
    loom_program_free(s);
  }
  CHECK_RC(loom_program_dump(NULL, stdout), LOOM_ERR_NULL);
  CHECK_RC(loom_program_dump(p, NULL), LOOM_ERR_NULL);
  FILE *ro = fopen("/dev/null", "r");
  CHECK_RC(loom_program_dump(p, ro), LOOM_ERR_IO);
  fclose(ro);
  loom_program_free(p);
  loom_clear_error();
}

/* The picture's structure: one cluster per step, each node drawn once,
 * an edge per distinct source, balanced braces and quotes. */
static void check_dot(const char *name) {
  loom_program *p = compile_model(model_named(name));
  if (!p) return;
  char path[512];
  in_scratch("picture.dot", path, sizeof path);
  CHECK_OK(loom_program_dot(p, path));
  size_t len;
  char *dot = read_file(path, &len);
  CHECK_MSG(dot && strncmp(dot, "digraph loom_program {\n", 23) == 0, "%s: no digraph", name);
  if (!dot) return;
  CHECK_EQ_INT(count(dot, "subgraph cluster_"), p->plan->nsteps);
  for (int i = 0; i < p->plan->nsteps; i++) {
    char label[96];
    snprintf(label, sizeof label, "subgraph cluster_%d {\n    label=\"step %d: %s\"", i, i,
             p->plan->steps[i].kind == LM_STEP_GEMM ? "gemm" : "kernel");
    CHECK_STR_CONTAINS(dot, label);
  }
  CHECK_EQ_INT(count(dot, "{"), count(dot, "}"));
  CHECK_EQ_INT(count(dot, "\"") % 2, 0);
  int edges = 0;
  for (int pos = 0; pos < p->n; pos++) {
    char top[32], inside[32]; /* a node's statement starts its line */
    snprintf(top, sizeof top, "\n  n%d [", pos);
    snprintf(inside, sizeof inside, "\n    n%d [", pos);
    int drawn = count(dot, top) + count(dot, inside);
    CHECK_MSG(drawn == 1, "%s: node %d drawn %d times", name, pos, drawn);
    for (int s = p->src_start[pos]; s < p->src_start[pos + 1]; s++) {
      bool repeated = false;
      for (int r = p->src_start[pos]; r < s; r++) repeated |= p->src_pos[r] == p->src_pos[s];
      edges += !repeated;
    }
  }
  int temps = 0;
  for (int i = 0; i < p->plan->nsteps; i++) temps += p->plan->steps[i].out >= p->n;
  CHECK_EQ_INT(count(dot, " -> "), edges + p->nout + temps);
  CHECK_EQ_INT(count(dot, "shape=invhouse"), p->nin - (strcmp(name, "several") == 0));
  if (system("command -v dot >/dev/null 2>&1") == 0) { /* Graphviz, where installed */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o /dev/null", path);
    CHECK_MSG(system(cmd) == 0, "%s: dot refuses the picture", name);
  }
  free(dot);
  loom_program_free(p);
}

static void test_dot(void) {
  check_dot("mlp");
  check_dot("split");
  check_dot("conv");
  check_dot("several");
  CHECK_RC(loom_program_dot(NULL, "x"), LOOM_ERR_NULL);
  loom_program *p = compile_model(model_named("chain"));
  CHECK_RC(loom_program_dot(p, "/nonexistent-dir/p.dot"), LOOM_ERR_IO);
  loom_program_free(p);
  loom_clear_error();
}

/* ------------------------------------------------------------ round trips */

static void same_signature(const char *name, const loom_program *p, const loom_program *q) {
  CHECK_EQ_INT(loom_program_num_inputs(q), loom_program_num_inputs(p));
  CHECK_EQ_INT(loom_program_num_outputs(q), loom_program_num_outputs(p));
  for (int i = 0; i < loom_program_num_inputs(p); i++) {
    CHECK_STR_EQ(loom_program_input_name(q, i), loom_program_input_name(p, i));
    CHECK_EQ_INT(loom_program_input_dtype(q, i), loom_program_input_dtype(p, i));
    loom_shape a = loom_program_input_shape(p, i), b = loom_program_input_shape(q, i);
    CHECK_MSG(a.ndim == b.ndim && memcmp(a.dim, b.dim, sizeof(int64_t) * (size_t)a.ndim) == 0,
              "%s: input %d's shape differs", name, i);
  }
}

/* Runs both programs on the same random inputs: every output bit for bit equal. */
static void same_runs(const model *m, const loom_program *p, const loom_program *q) {
  for (int round = 0; round < 2; round++) {
    LOOM_SCOPE {
      loom_tensor *ins[4], *a[8], *b[8];
      for (int i = 0; i < m->nin; i++)
        ins[i] = random_data(m->shape[i], m->dtype[i], 1000u * (unsigned)round + (unsigned)i);
      CHECK_OK(loom_program_run(p, ins, a));
      CHECK_OK(loom_program_run(q, ins, b));
      for (int o = 0; o < m->nout; o++) {
        size_t la, lb;
        unsigned char *x = bytes_of(a[o], &la), *y = bytes_of(b[o], &lb);
        CHECK_MSG(la == lb && la != (size_t)-1 && memcmp(x, y, la) == 0,
                  "%s: output %d of the loaded program differs", m->name, o);
        CHECK_EQ_INT(loom_dtype_of(b[o]), loom_dtype_of(a[o]));
        free(x);
        free(y);
      }
    }
  }
}

static void round_trip(const model *m) {
  check_set_ctx("round trip %s", m->name);
  loom_program *p = compile_model(m);
  if (!p) return;
  char path[512], again[512], weights[600], weights_again[600];
  snprintf(path, sizeof path, "%s/%s.loom", scratch, m->name);
  snprintf(again, sizeof again, "%s/%s.again.loom", scratch, m->name);
  snprintf(weights, sizeof weights, "%s.safetensors", path);
  snprintf(weights_again, sizeof weights_again, "%s.safetensors", again);
  CHECK_OK(loom_program_save(p, path));
  loom_program *q = loom_program_load(path);
  CHECK_MSG(q != NULL, "%s: load failed: %s", m->name, loom_last_error());
  if (q) {
    same_signature(m->name, p, q);
    same_runs(m, p, q);
    CHECK_OK(loom_program_save(q, again)); /* the same text, the same weights */
    CHECK_MSG(same_file(path, again), "%s: saving the loaded program writes other text", m->name);
    bool has_weights = access(weights, F_OK) == 0;
    CHECK_EQ_INT(access(weights_again, F_OK) == 0, has_weights);
    if (has_weights) CHECK(same_file(weights, weights_again));
    char *dp = dump_of(p), *dq = dump_of(q); /* the same plan and kernels */
    CHECK_STR_EQ(dq, dp);
    free(dp);
    free(dq);
    loom_program_free(q);
  }
  loom_program_free(p);
  check_set_ctx("%s", "");
}

static void test_round_trips(void) {
  for (int i = 0; i < NMODELS; i++) round_trip(&models[i]);
}

/* A program text given directly, with the caller's weights. */
static void test_parse_with_weights(void) {
  char path[512];
  in_scratch("mlp.loom", path, sizeof path);
  size_t len;
  char *text = read_file(path, &len);
  CHECK(text != NULL);
  if (!text) return;
  loom_program *q = NULL;
  loom_clear_error();
  CHECK_RC(lm_program_parse(text, len, NULL, &q), LOOM_ERR_CORRUPT);
  CHECK_STR_CONTAINS(loom_last_error(),
                     "lm_program_parse: <text>:4: weight 'w0' (f32[64,32]) is not among the "
                     "weights given");
  loom_params *ps = loom_params_new();
  loom_tensor *w[4] = {floats(LOOM_SHAPE(64, 32), 1), floats(LOOM_SHAPE(32), 2),
                       floats(LOOM_SHAPE(32, 10), 3), floats(LOOM_SHAPE(10), 4)};
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof name, "w%d", i);
    CHECK_OK(loom_params_add(ps, name, w[i])); /* trainable: the program ignores that */
  }
  CHECK_OK(lm_program_parse(text, len, ps, &q));
  loom_program *p = compile_model(model_named("mlp"));
  if (p && q) same_runs(model_named("mlp"), p, q);
  loom_program_free(p);
  loom_program_free(q);
  q = NULL;
  loom_tensor *extra = loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_realize(extra));
  CHECK_OK(loom_params_add_buffer(ps, "extra", extra));
  loom_clear_error();
  CHECK_RC(lm_program_parse(text, len, ps, &q), LOOM_ERR_CORRUPT);
  CHECK_STR_CONTAINS(loom_last_error(), "the weights given hold 'extra', which it does not use");
  loom_params_free(ps);
  ps = loom_params_new();
  loom_tensor *wide = loom_cast(w[0], LOOM_F64);
  CHECK_OK(loom_realize(wide));
  CHECK_OK(loom_params_add_buffer(ps, "w0", wide));
  loom_clear_error();
  CHECK_RC(lm_program_parse(text, len, ps, &q), LOOM_ERR_CORRUPT);
  CHECK_STR_CONTAINS(loom_last_error(),
                     "<text>:4: weight 'w0' is f32[64,32] here, f64[64,32] in the weights given");
  loom_params_free(ps);
  ps = loom_params_new();
  loom_tensor *lazy = loom_add_s(w[0], 1);
  CHECK_OK(loom_params_add_buffer(ps, "w0", lazy));
  loom_clear_error();
  CHECK_RC(lm_program_parse(text, len, ps, &q), LOOM_ERR_CORRUPT);
  CHECK_STR_CONTAINS(loom_last_error(), "weight 'w0' has no data on the CPU (realize it first)");
  loom_params_free(ps);
  for (int i = 0; i < 4; i++) loom_free(w[i]);
  loom_free(extra), loom_free(wide), loom_free(lazy);
  CHECK_RC(lm_program_parse(text, len, NULL, NULL), LOOM_ERR_NULL);
  CHECK_RC(lm_program_parse(NULL, 3, NULL, &q), LOOM_ERR_NULL);
  free(text);
  loom_clear_error();
}

/* ------------------------------------------------------------ hand-written texts */

static loom_status parse(const char *text, loom_program **out) {
  *out = NULL;
  loom_clear_error();
  return lm_program_parse(text, strlen(text), NULL, out);
}

static void refused_bytes(const char *what, const char *text, size_t len, const char *needle) {
  loom_program *p = NULL;
  loom_clear_error();
  loom_status st = lm_program_parse(text, len, NULL, &p);
  CHECK_MSG(st == LOOM_ERR_CORRUPT && !p, "%s: %s (%s), expected LOOM_ERR_CORRUPT", what,
            loom_status_name(st), loom_last_error() ? loom_last_error() : "no error");
  CHECK_MSG(loom_last_error() && strstr(loom_last_error(), needle),
            "%s: the message '%s' lacks '%s'", what, loom_last_error(), needle);
  loom_program_free(p);
}

static void refused_text(const char *what, const char *text, const char *needle) {
  refused_bytes(what, text, strlen(text), needle);
}

static void test_hand_written(void) {
  loom_program *p;
  CHECK_OK(parse("loom-program 1\n"
                 "input 0 x f32[3]\n"
                 "input 1 unused i64[]\n"
                 "%0 = input 0\n"
                 "%1 = const f32[] value=0x1.8p+1\n"
                 "%2 = reshape f32[1] %1\n"
                 "%3 = expand f32[3] %2\n"
                 "%4 = mul f32[3] %0 %3\n"
                 "output %4\n"
                 "output %0\n"
                 "end\n",
                 &p));
  if (p) {
    LOOM_SCOPE {
      float x[3] = {1, -2, 0.5f}, y[3];
      loom_tensor *ins[2] = {loom_from_data(x, LOOM_SHAPE(3), LOOM_F32, LOOM_CPU),
                             loom_scalar(4, LOOM_I64, LOOM_CPU)};
      loom_tensor *outs[2];
      CHECK_OK(loom_program_run(p, ins, outs));
      CHECK_OK(loom_copy_to_host(outs[0], y, sizeof y));
      CHECK(y[0] == 3.0f && y[1] == -6.0f && y[2] == 1.5f);
      CHECK_STR_EQ(loom_program_input_name(p, 1), "unused");
    }
    loom_program_free(p);
  }
  /* no step at all: the output is the input */
  CHECK_OK(parse("loom-program 1\ninput 0 x f32[2]\n%0 = input 0\noutput %0\nend\n", &p));
  if (p) {
    CHECK_EQ_INT(p->plan->nsteps, 0);
    char *d = dump_of(p);
    CHECK_STR_CONTAINS(d, "0 steps (0 kernels, 0 gemms)");
    free(d);
    char path[512];
    CHECK_OK(loom_program_save(p, in_scratch("identity.loom", path, sizeof path)));
    CHECK_OK(loom_program_dot(p, in_scratch("identity.dot", path, sizeof path)));
    LOOM_SCOPE {
      loom_tensor *x = loom_full(LOOM_SHAPE(2), 7, LOOM_F32, LOOM_CPU), *y;
      CHECK_OK(loom_program_run(p, &x, &y));
      CHECK_NEAR(loom_item(loom_sum_all(y)), 14, 0);
    }
    loom_program_free(p);
  }
  const char *head = "loom-program 1\ninput 0 x f32[2]\n";
  char text[1024];
  snprintf(text, sizeof text,
           "%s%%0 = input 0\n%%1 = const f32[2] value=0x1p+0\n%%2 = add f32[2] %%0 %%1\n"
           "%%3 = neg f32[2] %%0\noutput %%2\nend\n",
           head);
  refused_text("unused position", text, "<text>:6: position %3 is not used by any output");
  snprintf(text, sizeof text,
           "%s%%0 = const f32[2] value=0x1p+0\n%%1 = input 0\n%%2 = add f32[2] %%1 %%0\n"
           "output %%2\nend\n",
           head);
  refused_text("out of order", text,
               "<text>:3: position %0 is out of order: walking from the outputs (sources in "
               "order, then the node) reaches it as position %1");
  snprintf(text, sizeof text, "%s%%0 = input 0\n%%1 = input 0\noutput %%1\nend\n", head);
  refused_text("input twice", text, "<text>:4: input 0 is already at %0");
  snprintf(text, sizeof text, "%s%%0 = input 0\nend\n", head);
  refused_text("no output", text, "<text>:4: a program needs at least one output before 'end'");
  snprintf(text, sizeof text, "%soutput %%0\nend\n", head);
  refused_text("output first", text, "<text>:3: an output before any position");
  snprintf(text, sizeof text, "%s%%0 = input 0\noutput %%0\n%%1 = neg f32[2] %%0\nend\n", head);
  refused_text("position after outputs", text, "<text>:5: positions come before the outputs");
  snprintf(text, sizeof text, "%s%%0 = input 0\ninput 1 y f32[2]\noutput %%0\nend\n", head);
  refused_text("late input", text,
               "<text>:4: input declarations come before the symbols and positions");
  snprintf(text, sizeof text, "%s%%0 = input 0\noutput %%0\nend\nend\n", head);
  refused_text("after end", text, "<text>:6: text after 'end'");
  snprintf(text, sizeof text, "%s%%0 = input 0\n%%1 = weight w0 f32[2]\noutput %%1\nend\n", head);
  refused_text("weights without weights", text,
               "<text>:4: weight 'w0' (f32[2]) is not among the weights given");
  snprintf(text, sizeof text, "%s%%0 = buffer f32[2]\noutput %%0\nend\n", head);
  refused_text("buffer op", text, "<text>:3: unknown op 'buffer'");
  snprintf(text, sizeof text, "loom-program 1\n%%0 = iota i64[65] value=0x0p+0\noutput %%0\nend\n");
  refused_text("wrong argument", text, "<text>:2: expected start=..., got 'value=0x0p+0'");
  snprintf(text, sizeof text, "loom-program 1\n%%0 = iota i64[65] start=0x0p+0\noutput %%0\nend\n");
  refused_text("missing argument", text, "<text>:2: the line ends where step=... was expected");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = rand f32[2] kind=normal p=0x0p+0 key=0x0000000G,0x00000000\n"
           "output %%0\nend\n");
  refused_text("bad key", text, "key=0x0000000G,0x00000000: expected two 8-digit hex words");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = rand f32[2] kind=gauss p=0x0p+0 key=0x00000000,0x00000000\n"
           "output %%0\nend\n");
  refused_text("bad kind", text, "kind=gauss: expected uniform, normal or bernoulli");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = const f32[2,3] value=0x0p+0\n%%1 = sum f32[1,3] %%0 axes=[0,0]\n"
           "output %%1\nend\n");
  refused_text("repeated axes", text, "axes=[0,0]: expected 1 to 8 increasing axes");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = const f32[2,3] value=0x0p+0\n%%1 = sum f32[1,3] %%0 axes=[]\n"
           "output %%1\nend\n");
  refused_text("no axes", text, "axes=[]: expected 1 to 8 increasing axes");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = const f32[2,3] value=0x0p+0\n"
           "%%1 = permute f32[3,2] %%0 perm=[1,4294967296]\noutput %%1\nend\n");
  refused_text("perm overflow", text, "entry 1 (4294967296) is outside");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = const f32[1,2,3,4,5,6,7,8,9] value=0x0p+0\noutput %%0\nend\n");
  refused_text("9 dims", text, "'f32[1,2,3,4,5,6,7,8,9]' has more than 8 dims");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = const f32[99999999999,99999999999] value=0x0p+0\noutput %%0\n"
           "end\n");
  refused_text("absurd shape", text, "too large");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = const f32[99999999999999999999] value=0x0p+0\noutput %%0\n"
           "end\n");
  refused_text("dim overflow", text, "malformed shape");
  snprintf(text, sizeof text,
           "loom-program 1\n%%0 = const f32[01] value=0x0p+0\noutput %%0\nend\n");
  refused_text("leading zero", text, "malformed shape");
  snprintf(text, sizeof text, "loom-program 1\n%%0 = const F32[1] value=0x0p+0\noutput %%0\nend\n");
  refused_text("upper-case dtype", text, "unknown dtype in 'F32[1]'");
  refused_text("empty", "", "lm_program_parse: <text>:1: not a loom program");
  refused_text("binary",
               "\x7f"
               "ELF\x02\x01",
               "not a loom program");
  refused_text("no newline", "loom-program 1", "<text>:1: the line does not end with a newline");
  refused_text("version 5", "loom-program 5\n",
               "<text>:1: written by format version 5, this loom reads versions 1 to 4");
  refused_text("version 0", "loom-program 0\n%0 = const f32[] value=0x0p+0\n",
               "written by format version 0, this loom reads versions 1 to 4");
  refused_text("version x", "loom-program one\n", "the format version 'one' is not a number");
  /* symbol lines (version 2): an input dim that takes any size */
  const char *rows = "%0 = input 0\n%1 = relu f32[5,3] %0\noutput %1\nend\n";
  char sym[512];
  snprintf(sym, sizeof sym, "loom-program 2\ninput 0 x f32[5,3]\nsymbol 0 0 rows\n%s", rows);
  CHECK_OK(parse(sym, &p));
  if (p) {
    CHECK_STR_EQ(loom_program_input_dim_symbol(p, 0, 0), "rows");
    LOOM_SCOPE {
      float x[6] = {1, -2, 3, -4, 5, -6}, y[6];
      loom_tensor *in = loom_from_data(x, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU), *out = NULL;
      CHECK_OK(loom_program_run(p, &in, &out));
      CHECK_OK(loom_copy_to_host(out, y, sizeof y));
      CHECK(y[0] == 1 && y[1] == 0 && y[4] == 5 && y[5] == 0);
    }
    loom_program_free(p);
  }
  const struct {
    const char *what, *version, *dims, *symbols, *says;
  } sym_bad[] = {
      {"symbol in version 1", "1", "5,3", "symbol 0 0 rows\n",
       "<text>:3: symbol lines need format version 2"},
      {"version 2 without symbols", "2", "5,3", "",
       "<text>:3: format version 2 has symbol lines before the positions"},
      {"symbol on no input", "2", "5,3", "symbol 1 0 rows\n",
       "symbol on input 1, which is not declared"},
      {"symbol past the dims", "2", "5,3", "symbol 0 2 rows\n",
       "symbol on dim 2 of input 0, which has 2 dims"},
      {"symbols out of order", "2", "5,3", "symbol 0 1 cols\nsymbol 0 0 rows\n",
       "increasing input and axis order"},
      {"symbol name", "2", "5,3", "symbol 0 0 9rows\n", "<text>:3:"},
      {"symbol traced at 1", "2", "1,3", "symbol 0 0 rows\n", "a size of at least 2"},
  };
  for (int i = 0; i < (int)(sizeof sym_bad / sizeof sym_bad[0]); i++) {
    snprintf(sym, sizeof sym,
             "loom-program %s\ninput 0 x f32[%s]\n%s%%0 = input 0\n%%1 = relu f32[%s] %%0\n"
             "output %%1\nend\n",
             sym_bad[i].version, sym_bad[i].dims, sym_bad[i].symbols, sym_bad[i].dims);
    refused_text(sym_bad[i].what, sym, sym_bad[i].says);
  }
  /* bounds from the end (version 3): the last row of any number of rows */
  const char *last = "%%0 = input 0\n%%1 = slice f32[1,3] %%0 start=[4,0] step=[1,1]%s\n"
                     "output %%1\nend\n";
  char body[256];
  snprintf(body, sizeof body, last, " from_end=[1,0]");
  snprintf(sym, sizeof sym, "loom-program 3\ninput 0 x f32[5,3]\nsymbol 0 0 rows\n%s", body);
  CHECK_OK(parse(sym, &p));
  if (p) {
    LOOM_SCOPE {
      float x[6] = {1, 2, 3, 4, 5, 6}, y[3];
      loom_tensor *in = loom_from_data(x, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU), *out = NULL;
      CHECK_OK(loom_program_run(p, &in, &out));
      CHECK_OK(loom_copy_to_host(out, y, sizeof y));
      CHECK(y[0] == 4 && y[1] == 5 && y[2] == 6);
    }
    loom_program_free(p);
  }
  snprintf(sym, sizeof sym, "loom-program 2\ninput 0 x f32[5,3]\nsymbol 0 0 rows\n%s", body);
  refused_text("from_end in version 2", sym, "<text>:5: unexpected 'from_end=[1,0]'");
  snprintf(body, sizeof body, last, " from_end=[4,0]");
  snprintf(sym, sizeof sym, "loom-program 3\ninput 0 x f32[5,3]\nsymbol 0 0 rows\n%s", body);
  refused_text("from_end out of range", sym, "entry 0 (4) is outside [0, 3]");
  /* input-free leaves (version 4): dims fixed unless follows= lists them */
  const char *ones = "loom-program %d\ninput 0 x f32[5,3]\nsymbol 0 0 rows\n%%0 = input 0\n"
                     "%%1 = const f32[5,3] value=0x1p+0%s\n%%2 = add f32[5,3] %%0 %%1\n"
                     "output %%2\nend\n";
  snprintf(sym, sizeof sym, ones, 4, " follows=[1,0]");
  CHECK_OK(parse(sym, &p));
  if (p) {
    LOOM_SCOPE {
      float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
      loom_tensor *in = loom_from_data(x, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU), *out = NULL;
      CHECK_OK(loom_program_run(p, &in, &out));
      CHECK_OK(loom_copy_to_host(out, y, sizeof y));
      CHECK(y[0] == 2 && y[5] == 7);
    }
    loom_program_free(p);
  }
  snprintf(sym, sizeof sym, ones, 3, " follows=[1,0]");
  refused_text("follows in version 3", sym, "<text>:5: unexpected 'follows=[1,0]'");
  snprintf(sym, sizeof sym, ones, 4, " follows=[2,0]");
  refused_text("follows out of range", sym, "entry 0 (2) is outside [0, 1]");
  snprintf(sym, sizeof sym, ones, 4, "");
  refused_text("a fixed constant meeting a symbol", sym,
               "a dim of size rows meets a fixed dim of size 5, dim 0 of node 1 (const [5,3])");
  refused_text("tab", "loom-program\t1\n", "not a loom program");
  refused_text("crlf", "loom-program 1\r\n", "<text>:1: byte 0x0d at column 15");
  refused_bytes("nul", "loom-program 1\n%0\0", 18,
                "<text>:2: the line does not end with a newline");
  refused_bytes("nul in line", "loom-program 1\n%0\0\n", 19, "<text>:2: byte 0x00 at column 3");
  refused_text("blank line", "loom-program 1\n\n", "<text>:2: an empty line");
  refused_text("double space", "loom-program 1\n%0  = x\n", "<text>:2: tokens are separated");
}

/* Floats are written in C99 hex form and read back exactly; nothing else is
 * accepted (no decimals, no other spelling of the same value). */
static void test_floats(void) {
  double values[] = {0.0,
                     -0.0,
                     1.0,
                     -1.5,
                     0.1,
                     M_PI,
                     DBL_MAX,
                     DBL_MIN,
                     4.9e-324,
                     0x1p-1023,
                     -0x1.fffffffffffffp-1023,
                     1e300,
                     255.0,
                     INFINITY,
                     -INFINITY,
                     NAN,
                     -NAN};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    char tok[LM_HEX_DOUBLE_LEN], text[256];
    lm_hex_double(values[i], tok);
    snprintf(text, sizeof text, "loom-program 1\n%%0 = const f64[] value=%s\noutput %%0\nend\n",
             tok);
    loom_program *p;
    CHECK_MSG(parse(text, &p) == LOOM_OK, "%s does not read back: %s", tok, loom_last_error());
    if (!p) continue;
    double got = p->nodes[p->out_pos[0]]->arg.f, want = values[i];
    CHECK_MSG(memcmp(&got, &want, sizeof got) == 0 ||
                  (isnan(got) && isnan(want) && !signbit(got) == !signbit(want)),
              "%s reads back as %a", tok, got);
    loom_program_free(p);
  }
  char tok[LM_HEX_DOUBLE_LEN];
  CHECK_STR_EQ(lm_hex_double(1.5, tok), "0x1.8p+0");
  CHECK_STR_EQ(lm_hex_double(-0.0, tok), "-0x0p+0");
  CHECK_STR_EQ(lm_hex_double(4.9e-324, tok), "0x0.0000000000001p-1022");
  CHECK_STR_EQ(lm_hex_double(DBL_MAX, tok), "0x1.fffffffffffffp+1023");
  CHECK_STR_EQ(lm_hex_double(-NAN, tok), "-nan");
  const char *bad[] = {"1.5",
                       "0x1.80p+0",
                       "0X1.8p+0",
                       "0x1.8P+0",
                       "0x1.8p0",
                       "0x2p+0",
                       "0x1p+01",
                       "+inf",
                       "Inf",
                       "0x1.p+0",
                       "0x1p-1023",
                       "0x1.0p+0",
                       "0x1.00000000000000p+0",
                       "0x1p+99999",
                       "0x1p+1024",
                       "",
                       "0x",
                       "nan(1)",
                       "-0x0p-0",
                       "0x1.8p+0 ",
                       "0x1.Ap+0",
                       "1e10",
                       "0x1p+0x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[256], needle[128];
    snprintf(text, sizeof text, "loom-program 1\n%%0 = const f64[] value=%s\noutput %%0\nend\n",
             bad[i]);
    snprintf(needle, sizeof needle, "value=%s is not a float in its exact hex form", bad[i]);
    if (strchr(bad[i], ' ')) snprintf(needle, sizeof needle, "tokens are separated");
    refused_text(bad[i], text, needle);
  }
}

/* ------------------------------------------------------------ broken files */

static char mutant[512]; /* the file every broken text is written to */

/* Loads `text` from the mutant file (its weights beside it as saved): refused
 * with `want`, the message holding `needle`. */
static void refused_file(const char *what, const char *text, size_t len, loom_status want,
                         const char *needle) {
  write_file(mutant, text, len);
  loom_clear_error();
  loom_program *p = loom_program_load(mutant);
  const char *msg = loom_last_error() ? loom_last_error() : "no error";
  CHECK_MSG(!p, "%s: loaded, a refusal was expected", what);
  CHECK_MSG(loom_last_status() == want, "%s: %s (%s), expected %s", what,
            loom_status_name(loom_last_status()), msg, loom_status_name(want));
  CHECK_MSG(strstr(msg, needle), "%s: the message '%s' lacks '%s'", what, msg, needle);
  loom_program_free(p);
}

#define MAX_WORDS 96
#define WORD_LEN 200

typedef struct words {
  int n;
  char w[MAX_WORDS][WORD_LEN];
} words;

static void split_words(const char *line, size_t len, words *ws) {
  ws->n = 0;
  for (size_t at = 0; at <= len && ws->n < MAX_WORDS;) {
    const char *sp = memchr(line + at, ' ', len - at);
    size_t wl = sp ? (size_t)(sp - line) - at : len - at;
    snprintf(ws->w[ws->n++], WORD_LEN, "%.*s", (int)wl, line + at);
    at += wl + 1;
  }
}

static void join_words(const words *ws, char *out, size_t len) {
  out[0] = 0;
  for (int i = 0; i < ws->n; i++) {
    if (i) strncat(out, " ", len - strlen(out) - 1);
    strncat(out, ws->w[i], len - strlen(out) - 1);
  }
}

/* The saved text split in lines. */
typedef struct text_lines {
  const char *text;
  size_t len;
  int n;
  size_t start[512], end[512]; /* end: the newline */
} text_lines;

static void split_lines(const char *text, size_t len, text_lines *ls) {
  ls->text = text, ls->len = len, ls->n = 0;
  for (size_t at = 0; at < len && ls->n < 512;) {
    const char *nl = memchr(text + at, '\n', len - at);
    ls->start[ls->n] = at;
    ls->end[ls->n++] = (size_t)(nl - text);
    at = (size_t)(nl - text) + 1;
  }
}

/* The text with line i replaced (NULL deletes it). */
static char *with_line(const text_lines *ls, int i, const char *replacement, size_t *len) {
  size_t rl = replacement ? strlen(replacement) + 1 : 0;
  char *out = malloc(ls->len + rl + 1);
  size_t head = ls->start[i], tail = ls->end[i] + 1;
  memcpy(out, ls->text, head);
  if (replacement) {
    memcpy(out + head, replacement, rl - 1);
    out[head + rl - 1] = '\n';
  }
  memcpy(out + head + rl, ls->text + tail, ls->len - tail);
  *len = head + rl + ls->len - tail;
  return out;
}

static void refused_line(const text_lines *ls, int i, const char *replacement, loom_status want,
                         const char *needle, const char *what) {
  size_t len;
  char *t = with_line(ls, i, replacement, &len);
  char label[300];
  snprintf(label, sizeof label, "line %d %s: '%.200s'", i + 1, what,
           replacement ? replacement : "(deleted)"); /* long lines are cut in the label */
  refused_file(label, t, len, want, needle);
  free(t);
}

/* Every truncation: at each line boundary, and in the middle of each line. */
static void truncations(const text_lines *ls) {
  refused_file("empty", ls->text, 0, LOOM_ERR_CORRUPT, "not a loom program");
  for (int i = 0; i < ls->n; i++) {
    char at[600], label[64];
    snprintf(at, sizeof at, "%s:%d: the line does not end with a newline", mutant, i + 1);
    size_t mid = ls->start[i] + (ls->end[i] - ls->start[i]) / 2;
    snprintf(label, sizeof label, "cut in line %d", i + 1);
    if (i > 0) refused_file(label, ls->text, mid, LOOM_ERR_CORRUPT, at);
    refused_file(label, ls->text, ls->end[i], LOOM_ERR_CORRUPT, at);
    if (i == ls->n - 1) continue; /* the whole file */
    snprintf(at, sizeof at, "%s:%d: the text ends without 'end'", mutant, i + 1);
    snprintf(label, sizeof label, "cut after line %d", i + 1);
    refused_file(label, ls->text, ls->end[i] + 1, LOOM_ERR_CORRUPT, at);
  }
}

/* A position's type with its first dim replaced (a 0-d one gets that dim). */
static void set_first_dim(char *type, const char *dim) {
  char *open = strchr(type, '[');
  if (!open) return;
  char rest[WORD_LEN];
  size_t first = strcspn(open + 1, ",]");
  snprintf(rest, sizeof rest, "%s", open[1] == ']' ? "]" : open + 1 + first);
  snprintf(open, WORD_LEN - (size_t)(open - type), "[%s%s", dim, rest);
}

static void mutate_node(const text_lines *ls, int i, words ws, const char *at) {
  char line[4096], needle[1200];
  words m = ws;
  snprintf(m.w[2], WORD_LEN, "frobnicate");
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s unknown op 'frobnicate'", at);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "op");
  m = ws;
  snprintf(m.w[3], WORD_LEN, "q8%s", strchr(ws.w[3], '['));
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s unknown dtype", at);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "dtype");
  m = ws;
  set_first_dim(m.w[3], "-1");
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s %s %s: dim 0 is negative (-1)", at, ws.w[2], m.w[3]);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "negative dim");
  m = ws;
  set_first_dim(m.w[3], "4611686018427387904");
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s %s %s: too large", at, ws.w[2], m.w[3]);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "huge dim");
  m = ws;
  snprintf(m.w[0], WORD_LEN, "%%%d", atoi(ws.w[0] + 1) + 1);
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s expected position %s here", at, ws.w[0]);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "number");
  for (int k = 4; k < ws.n; k++) {
    m = ws;
    const char *eq = strchr(ws.w[k], '=');
    if (ws.w[k][0] == '%') { /* a source: forward, to itself */
      snprintf(m.w[k], WORD_LEN, "%s", ws.w[0]);
      snprintf(needle, sizeof needle, "%s source '%s' is not an earlier position", at, ws.w[0]);
    } else if (eq && eq[1] == '[') {
      snprintf(m.w[k], WORD_LEN, "%.*s=[1,x]", (int)(eq - ws.w[k]), ws.w[k]);
      snprintf(needle, sizeof needle, "%s %s%s", at, m.w[k],
               strncmp(ws.w[k], "axes", 4) == 0 ? ": expected 1 to 8 increasing axes"
                                                : " is not a list of integers");
    } else if (eq && (strncmp(ws.w[k], "kind=", 5) == 0)) {
      snprintf(m.w[k], WORD_LEN, "kind=1.5");
      snprintf(needle, sizeof needle, "%s kind=1.5: expected uniform", at);
    } else if (eq && (strncmp(ws.w[k], "key=", 4) == 0)) {
      snprintf(m.w[k], WORD_LEN, "key=0x1,0x2");
      snprintf(needle, sizeof needle, "%s key=0x1,0x2: expected two 8-digit hex words", at);
    } else if (eq && (strncmp(ws.w[k], "axis=", 5) == 0)) {
      snprintf(m.w[k], WORD_LEN, "axis=1.5");
      snprintf(needle, sizeof needle, "%s axis=1.5 is not an integer", at);
    } else if (eq) { /* a float */
      snprintf(m.w[k], WORD_LEN, "%.*s=1.5", (int)(eq - ws.w[k]), ws.w[k]);
      snprintf(needle, sizeof needle, "%s %s is not a float in its exact hex form", at, m.w[k]);
    } else {
      continue;
    }
    join_words(&m, line, sizeof line);
    refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "argument");
    if (!eq || k != ws.n - 1) continue;
    m = ws;
    m.n--; /* the last argument missing */
    join_words(&m, line, sizeof line);
    snprintf(needle, sizeof needle, "%s the line ends where %.*s=... was expected", at,
             (int)(eq - ws.w[k]), ws.w[k]);
    refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "missing argument");
  }
}

static void mutate_declaration(const text_lines *ls, int i, words ws, const char *at) {
  char line[4096], needle[1200];
  words m = ws;
  snprintf(m.w[2], WORD_LEN, "1x");
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s the input's name '1x' is not 1 to 64 letters", at);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "input name");
  m = ws;
  snprintf(m.w[1], WORD_LEN, "%d", atoi(ws.w[1]) + 1);
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s expected input %s", at, ws.w[1]);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "input index");
  m = ws;
  char *open = strchr(m.w[3], '[');
  if (open && open[1] != ']') { /* a first dim of -4 */
    snprintf(open, WORD_LEN - (size_t)(open - m.w[3]), "[-4]");
    join_words(&m, line, sizeof line);
    snprintf(needle, sizeof needle, "%s input ", at);
    refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "negative dim");
    CHECK_STR_CONTAINS(loom_last_error(), "dim 0 is negative (-4)");
  }
}

static void mutate_weight(const text_lines *ls, int i, words ws, const char *at) {
  char line[4096], needle[1200];
  words m = ws;
  snprintf(m.w[3], WORD_LEN, "9w");
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s the weight's name '9w' is not", at);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "weight name");
  m = ws;
  snprintf(m.w[3], WORD_LEN, "zz");
  join_words(&m, line, sizeof line);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, "its weights: loom_params_load:", "other weight");
  m = ws; /* the first pass meets the consumers, or the weights file disagrees */
  memcpy(m.w[4], strncmp(ws.w[4], "f64", 3) ? "f64" : "f32", 3);
  join_words(&m, line, sizeof line);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, mutant, "weight dtype");
  m = ws;
  set_first_dim(m.w[4], "-1");
  join_words(&m, line, sizeof line);
  snprintf(needle, sizeof needle, "%s weight 'w", at);
  refused_line(ls, i, line, LOOM_ERR_CORRUPT, needle, "weight shape");
  CHECK_STR_CONTAINS(loom_last_error(), "dim 0 is negative (-1)");
}

/* Every line of a saved program, broken in the ways that fit it. */
static void mutate_lines(const text_lines *ls, bool one_output) {
  for (int i = 0; i < ls->n; i++) {
    char line[4096], at[600], needle[1200];
    size_t len = ls->end[i] - ls->start[i];
    snprintf(line, sizeof line, "%.*s", (int)len, ls->text + ls->start[i]);
    snprintf(at, sizeof at, "%s:%d:", mutant, i + 1);
    words ws;
    split_words(line, len, &ws);
    char changed[8400];
    snprintf(changed, sizeof changed, "%s junk", line);
    refused_line(ls, i, changed, LOOM_ERR_CORRUPT, i == 0 ? at : "unexpected 'junk'", "extra");
    snprintf(changed, sizeof changed, "%s ", line);
    snprintf(needle, sizeof needle, "%s tokens are separated by single spaces", at);
    refused_line(ls, i, changed, LOOM_ERR_CORRUPT, needle, "trailing space");
    snprintf(changed, sizeof changed, "%s\r", line);
    snprintf(needle, sizeof needle, "%s byte 0x0d", at);
    refused_line(ls, i, changed, LOOM_ERR_CORRUPT, needle, "carriage return");
    snprintf(needle, sizeof needle, "%s %s", at,
             i == 0 ? "not a loom program" : "expected 'input'");
    refused_line(ls, i, "junk", LOOM_ERR_CORRUPT, i == 0 ? "not a loom program" : needle, "junk");
    if (strncmp(line, "output ", 7) != 0) { /* two outputs may be the same position */
      snprintf(changed, sizeof changed, "%s\n%s", line, line);
      refused_line(ls, i, changed, LOOM_ERR_CORRUPT, mutant, "twice");
    }
    if (one_output) refused_line(ls, i, NULL, LOOM_ERR_CORRUPT, mutant, "deleted");
    if (i == 0) {
      snprintf(needle, sizeof needle,
               "%s written by format version 5, this loom reads versions 1 to 4", at);
      refused_line(ls, i, "loom-program 5", LOOM_ERR_CORRUPT, needle, "version");
    } else if (strcmp(ws.w[0], "input") == 0) {
      mutate_declaration(ls, i, ws, at);
    } else if (strcmp(ws.w[0], "output") == 0) {
      snprintf(needle, sizeof needle, "%s output '%%999999' is not a position", at);
      refused_line(ls, i, "output %999999", LOOM_ERR_CORRUPT, needle, "output");
      snprintf(changed, sizeof changed, "output %.100s", ws.w[1] + 1);
      refused_line(ls, i, changed, LOOM_ERR_CORRUPT, "is not a position", "output");
    } else if (strcmp(ws.w[0], "end") == 0) {
      refused_line(ls, i, "END", LOOM_ERR_CORRUPT, "got 'END'", "end");
    } else if (strcmp(ws.w[2], "input") == 0) {
      snprintf(changed, sizeof changed, "%s = input 99", ws.w[0]);
      snprintf(needle, sizeof needle, "%s input '99' is not declared", at);
      refused_line(ls, i, changed, LOOM_ERR_CORRUPT, needle, "input use");
    } else if (strcmp(ws.w[2], "weight") == 0) {
      mutate_weight(ls, i, ws, at);
    } else {
      mutate_node(ls, i, ws, at);
    }
  }
}

static void copy_file(const char *from, const char *to) {
  size_t len;
  char *data = read_file(from, &len);
  if (data) write_file(to, data, len);
  free(data);
}

/* Saved programs broken every way: each must be refused, and none may leak. */
static void test_broken_files(const char *name, bool one_output) {
  char path[512], weights[600], mutant_weights[600];
  snprintf(path, sizeof path, "%s/%s.loom", scratch, name);
  snprintf(weights, sizeof weights, "%s.safetensors", path);
  in_scratch("mutant.loom", mutant, sizeof mutant);
  snprintf(mutant_weights, sizeof mutant_weights, "%s.safetensors", mutant);
  unlink(mutant_weights);
  if (access(weights, F_OK) == 0) copy_file(weights, mutant_weights);
  size_t len;
  char *text = read_file(path, &len);
  CHECK_MSG(text != NULL, "%s was not saved", path);
  if (!text) return;
  check_set_ctx("broken %s", name);
  text_lines ls;
  split_lines(text, len, &ls);
  truncations(&ls);
  mutate_lines(&ls, one_output);
  /* the unbroken text still loads */
  write_file(mutant, text, len);
  loom_program *p = loom_program_load(mutant);
  CHECK_MSG(p != NULL, "%s: the unbroken copy does not load: %s", name, loom_last_error());
  loom_program_free(p);
  free(text);
  check_set_ctx("%s", "");
}

/* The weights file beside a program: missing, another program's, cut short. */
static void test_weights_files(void) {
  char path[512], weights[600], other[600], cut[600];
  in_scratch("mutant.loom", mutant, sizeof mutant);
  snprintf(weights, sizeof weights, "%s.safetensors", mutant);
  size_t len;
  char *text = read_file(in_scratch("mlp.loom", path, sizeof path), &len);
  if (!text) return;
  unlink(weights);
  refused_file("no weights file", text, len, LOOM_ERR_IO, "its weights: loom_params_load: '");
  CHECK_STR_CONTAINS(loom_last_error(), "mutant.loom.safetensors': cannot open");
  copy_file(in_scratch("conv.loom.safetensors", other, sizeof other), weights);
  refused_file("another program's weights", text, len, LOOM_ERR_CORRUPT,
               "does not fit the collection");
  CHECK_STR_CONTAINS(loom_last_error(), "loom_program_load: '");
  copy_file(in_scratch("mlp.loom.safetensors", other, sizeof other), weights);
  size_t wlen;
  char *w = read_file(weights, &wlen);
  write_file(weights, w, wlen - 7);
  refused_file("weights cut short", text, len, LOOM_ERR_CORRUPT, "its weights");
  free(w);
  mkdir(weights, 0700);
  free(text);
  /* a program without weights ignores a file beside it */
  text = read_file(in_scratch("chain.loom", path, sizeof path), &len);
  unlink(weights);
  write_file(weights, "junk", 4);
  write_file(mutant, text, len);
  loom_program *p = loom_program_load(mutant);
  CHECK_MSG(p != NULL, "chain with junk beside: %s", loom_last_error());
  loom_program_free(p);
  free(text);
  /* files that are not there, not files, too large, and NULL */
  loom_clear_error();
  CHECK(loom_program_load(in_scratch("missing.loom", cut, sizeof cut)) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_IO);
  CHECK_STR_CONTAINS(loom_last_error(), "missing.loom': cannot open: No such file");
  loom_clear_error();
  CHECK(loom_program_load(scratch) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_IO);
  CHECK_STR_CONTAINS(loom_last_error(), "not a regular file");
  FILE *big = fopen(mutant, "wb");
  if (big) {
    CHECK(ftruncate(fileno(big), (off_t)LM_PROGRAM_MAX_TEXT + 1) == 0); /* sparse */
    fclose(big);
  }
  loom_clear_error();
  CHECK(loom_program_load(mutant) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_CORRUPT);
  CHECK_STR_CONTAINS(loom_last_error(), "bytes; a program text is at most 268435456");
  unlink(mutant);
  loom_clear_error();
  CHECK(loom_program_load(NULL) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_NULL);
  CHECK_RC(loom_program_save(NULL, mutant), LOOM_ERR_NULL);
  loom_program *c = compile_model(model_named("mlp"));
  CHECK_RC(loom_program_save(c, "/nonexistent-dir/p.loom"), LOOM_ERR_IO);
  loom_program_free(c);
  unlink(weights);
  loom_clear_error();
}

/* A 60,000-step program (an unfused chain) dumps and draws with memory that
 * grows with its size: the dump once allocated steps x nodes bytes (3.6 GB
 * here). The address space is capped at 1 GiB more than in use while it
 * runs, so a quadratic table fails as LOOM_ERR_OOM. (Not under ASan, whose
 * shadow memory takes address space of its own.) */
static size_t address_space_in_use(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f && fscanf(f, "%lu", &pages) != 1) pages = 0;
  if (f) fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void test_dump_large(void) {
#if defined(__SANITIZE_ADDRESS__)
  return;
#endif
  enum { STEPS = 60000 };
  bool fused = loom_fusion_enabled();
  loom_set_fusion(false);
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(4), LOOM_F32, LOOM_CPU), *y = x;
    for (int i = 0; i < STEPS; i++) y = i % 2 ? loom_cos(y) : loom_sin(y);
    loom_program *p = loom_compile(&y, 1, &x, 1);
    CHECK_MSG(p != NULL, "compiling a %d-step chain: %s", STEPS, loom_last_error());
    struct rlimit old;
    getrlimit(RLIMIT_AS, &old);
    struct rlimit cap = {address_space_in_use() + ((size_t)1 << 30), old.rlim_max};
    bool capped = p && setrlimit(RLIMIT_AS, &cap) == 0;
    FILE *out = fopen("/dev/null", "w");
    char path[600];
    snprintf(path, sizeof path, "%s/large.dot", scratch);
    if (p && out) {
      CHECK_MSG(loom_program_dump(p, out) == LOOM_OK, "dump of %d steps: %s", STEPS,
                loom_last_error());
      CHECK_MSG(loom_program_dot(p, path) == LOOM_OK, "dot of %d steps: %s", STEPS,
                loom_last_error());
    }
    if (capped) setrlimit(RLIMIT_AS, &old);
    if (out) fclose(out);
    remove(path);
    loom_program_free(p);
  }
  loom_set_fusion(fused);
}

int main(void) {
  snprintf(scratch, sizeof scratch, "/tmp/loom-program-text-XXXXXX");
  if (!mkdtemp(scratch)) {
    perror("mkdtemp");
    return 1;
  }
  uint64_t before = loom_get_stats().bytes_live;
  test_dump();
  test_dot();
  test_round_trips();
  test_parse_with_weights();
  test_hand_written();
  test_floats();
  test_broken_files("mlp", true);
  test_broken_files("views", false);
  test_broken_files("random", false);
  test_broken_files("conv", false);
  test_broken_files("integers", false);
  test_broken_files("several", false);
  test_weights_files();
  test_dump_large();
  CHECK_EQ_INT(loom_get_stats().bytes_live, before);
  check_remove_dir(scratch);
  return check_report();
}
