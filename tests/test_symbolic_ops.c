/* Every public op in a symbolic program (issue 41): each entry of the table
 * below records ops over x [2, s, 6] (s a symbol traced at 11), most of them
 * along s itself, and the program must give what the same graph recorded
 * eagerly gives at s = 1, 7 (a prime) and 131 (a large prime): the same shape,
 * dtype and every value; so must the program saved and loaded again, and the
 * library it exports (<name>_run_dims, <name>_output_shape), on the CPU. An
 * op that cannot follow s must be refused when the program is compiled, with
 * a message naming the op and the symbol (the entries with a `refused`
 * message). The table is checked against include/loom.h: every function it
 * declares is covered by an entry or excluded with a reason, so a new op
 * cannot skip the sweep. */
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "inputs.h"
#include "loom.h"
#include "scratch.h"
#include "test_device.h"

#define TRACED 11 /* s in the traced graph: no fixed dim or constant of the table is near it */
static const int64_t sizes[] = {1, 7, 131};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static loom_tensor *filled(loom_shape s, unsigned seed) {
  return check_filled(s, seed, test_device());
}

/* ------------------------------------------------------------ what the entries use */

typedef struct weights {
  loom_tensor *w6, *w64, *b4, *w46, *g6; /* [6], [6,4], [4], [4,6], [6] (requires grad) */
  loom_tensor *table;                    /* [6, 5]: embedding rows */
  loom_tensor *conv_w, *conv_b;          /* [3, 1, 2, 3], [3] */
  loom_tensor *running_mean, *running_var;
  loom_params *ps;
  loom_linear linear;
  loom_conv2d conv;
  loom_batchnorm2d bn;
  loom_layernorm ln;
  loom_embedding emb;
  loom_mha mha;
  loom_seq *seq;
  loom_key key;
} weights;

static weights w;

/* An entry's graph over x [2, s, 6] (one output). */
typedef loom_tensor *(*sweep_fn)(loom_tensor *x);

static int along_s = 1;

static loom_tensor *positive(loom_tensor *x) { return loom_add_s(loom_abs(x), 0.5); }
/* integer labels in [0, 6), [2, s] (the channel of each row's largest) */
static loom_tensor *labels_of(loom_tensor *x) { return loom_argmax(x, -1, false); }
/* [2s, 6]: rows of every batch and position */
static loom_tensor *rows_of(loom_tensor *x) { return loom_flatten(x, 0, 1); }
/* [2, 1, s, 6]: an image of s rows */
static loom_tensor *image_of(loom_tensor *x) { return loom_unsqueeze(x, 1); }
/* [2, s, s]: x x^T, a score matrix over s */
static loom_tensor *scores_of(loom_tensor *x) { return loom_matmul(x, loom_transpose(x, 1, 2)); }

/* ------------------------------------------------------------ creation */

static loom_tensor *op_fixed_constants(loom_tensor *x) {
  /* input-free tensors whose sizes the program wrote, meeting only fixed dims */
  loom_tensor *k = loom_add(loom_ones(LOOM_SHAPE(6), LOOM_F32, test_device()),
                            loom_zeros(LOOM_SHAPE(1, 6), LOOM_F32, test_device()));
  loom_tensor *c = loom_add(loom_full(LOOM_SHAPE(6), 0.25, LOOM_F32, test_device()),
                            loom_scalar(2.0, LOOM_F32, test_device()));
  loom_tensor *r = loom_mul(loom_arange(0, 6, 1, LOOM_F32, test_device()), k);
  return loom_add(loom_mul(x, c), r);
}

static loom_tensor *op_fixed_draws(loom_tensor *x) {
  loom_manual_seed(7); /* loom_rand's key: the same for the program and eager */
  loom_tensor *u = loom_add(loom_rand(LOOM_SHAPE(6), LOOM_F32, test_device()),
                            loom_randn(LOOM_SHAPE(1, 6), LOOM_F32, test_device()));
  loom_tensor *v =
      loom_add(loom_rand_key(w.key, LOOM_SHAPE(2, 1, 6), LOOM_F32, test_device()),
               loom_randn_key(loom_key_fold(w.key, 1), LOOM_SHAPE(6), LOOM_F32, test_device()));
  loom_tensor *b = loom_cast(
      loom_bernoulli_key(loom_key_fold(w.key, 2), 0.5, LOOM_SHAPE(6), test_device()), LOOM_F32);
  return loom_add(loom_mul(x, u), loom_mul(v, b));
}

static loom_tensor *op_like(loom_tensor *x) {
  return loom_add(loom_add(loom_zeros_like(x), loom_mul(loom_ones_like(x), x)),
                  loom_full_like(x, 0.5));
}

/* refused: an output with x's shape but not its data, x outside the graph */
static loom_tensor *op_like_alone(loom_tensor *x) { return loom_zeros_like(x); }

/* refused: sizes the program wrote cannot take s */
static loom_tensor *op_ones_over_s(loom_tensor *x) {
  return loom_add(x, loom_ones(LOOM_SHAPE(2, TRACED, 6), LOOM_F32, test_device()));
}
static loom_tensor *op_randn_product(loom_tensor *x) { /* issue 41's x[2,c] @ randn[16,16] */
  loom_tensor *r = loom_randn_key(w.key, LOOM_SHAPE(TRACED, 4), LOOM_F32, test_device());
  return loom_matmul(loom_transpose(x, 1, 2), r);
}
static loom_tensor *op_arange_over_s(loom_tensor *x) {
  loom_tensor *at = loom_arange(0, TRACED, 1, LOOM_F32, test_device());
  return loom_add(x, loom_reshape(at, LOOM_SHAPE(1, TRACED, 1)));
}

/* ------------------------------------------------------------ elementwise */

static loom_tensor *op_unary(loom_tensor *x) {
  loom_tensor *p = positive(x);
  loom_tensor *a = loom_add(loom_add(loom_neg(x), loom_abs(x)), loom_exp(x));
  loom_tensor *b = loom_add(loom_add(loom_log(p), loom_sqrt(p)), loom_rsqrt(p));
  loom_tensor *c = loom_add(loom_add(loom_sin(x), loom_cos(x)), loom_tanh(x));
  loom_tensor *d = loom_add(loom_add(loom_sigmoid(x), loom_relu(x)), loom_gelu(x));
  loom_tensor *e = loom_add(loom_add(loom_gelu_tanh(x), loom_silu(x)), loom_square(x));
  loom_tensor *f = loom_add(loom_add(loom_reciprocal(p), loom_erf(x)), loom_log1p(p));
  loom_tensor *g = loom_add(loom_add(loom_expm1(x), loom_sign(x)), loom_clamp(x, -0.3, 0.7));
  loom_tensor *h = loom_mul_s(x, 3.7);
  loom_tensor *r = loom_add(loom_add(loom_floor(h), loom_ceil(h)), loom_round(h));
  loom_tensor *all[] = {a, b, c, d, e, f, g, r};
  loom_tensor *sum = all[0];
  for (int i = 1; i < 8; i++) sum = loom_add(sum, all[i]);
  return sum;
}

static loom_tensor *op_binary(loom_tensor *x) {
  loom_tensor *y = loom_flip(x, along_s), *p = positive(y);
  loom_tensor *a = loom_add(loom_sub(x, y), loom_mul(x, y));
  loom_tensor *b = loom_add(loom_div(x, p), loom_pow(p, x));
  loom_tensor *c = loom_add(loom_maximum(x, y), loom_minimum(x, w.w6));
  return loom_add(loom_add(a, b), c);
}

static loom_tensor *op_scalar_forms(loom_tensor *x) {
  loom_tensor *p = positive(x);
  loom_tensor *a = loom_add(loom_add_s(x, 1.5), loom_sub_s(x, 0.5));
  loom_tensor *b = loom_add(loom_rsub_s(2.0, x), loom_mul_s(x, 3.0));
  loom_tensor *c = loom_add(loom_div_s(x, 4.0), loom_rdiv_s(1.0, p));
  loom_tensor *d = loom_add(loom_pow_s(p, 1.5), loom_maximum_s(x, 0.2));
  return loom_add(loom_add(a, b), loom_add(c, loom_add(d, loom_minimum_s(x, -0.2))));
}

static loom_tensor *op_compare(loom_tensor *x) { /* bool results, counted per row */
  loom_tensor *y = loom_flip(x, along_s);
  loom_tensor *t[] = {loom_lt(x, y),     loom_le(x, w.w6),  loom_gt(x, y),      loom_ge(x, y),
                      loom_eq(x, y),     loom_ne(x, y),     loom_lt_s(x, 0.3),  loom_le_s(x, 0.3),
                      loom_gt_s(x, 0.3), loom_ge_s(x, 0.3), loom_eq_s(x, 0.25), loom_ne_s(x, 0.25)};
  loom_tensor *any = loom_logical_or(loom_logical_and(t[0], t[1]), loom_logical_not(t[2]));
  loom_tensor *sum = loom_cast(any, LOOM_I64);
  for (int i = 3; i < 12; i++) sum = loom_add(sum, loom_cast(t[i], LOOM_I64));
  return sum; /* I64 */
}

static loom_tensor *op_bool(loom_tensor *x) { return loom_gt(x, loom_flip(x, along_s)); }

static loom_tensor *op_select(loom_tensor *x) {
  loom_tensor *m = loom_gt_s(x, 0);
  loom_tensor *a = loom_where(m, x, loom_flip(x, along_s));
  loom_tensor *b = loom_where_s(m, x, -2.0);
  return loom_add(loom_add(a, b), loom_masked_fill(x, loom_lt_s(x, -0.5), 9.0));
}

/* Rows written at positions computed by the run, each in its range (a start
 * outside it fails the run: tests/test_checks.c): along s at the largest
 * row's position, in [0, s); two channels at 4, the last start that fits. */
static loom_tensor *op_slice_update(loom_tensor *x) {
  loom_tensor *row = loom_mul_s(loom_slice(x, along_s, 0, 1, 1), -3.0); /* [2, 1, 6] */
  loom_tensor *at = loom_reshape(loom_argmax(loom_sum(x, (int[]){0, 2}, 2, false), 0, false),
                                 LOOM_SHAPE0);                    /* in [0, s) */
  loom_tensor *cols = loom_mul_s(loom_slice(x, 2, 0, 2, 1), 5.0); /* [2, s, 2] */
  loom_tensor *four = loom_add_s(loom_mul_s(at, 0), 4);
  return loom_add(loom_slice_update(x, along_s, at, row), loom_slice_update(x, 2, four, cols));
}

static loom_tensor *op_cast_detach(loom_tensor *x) {
  loom_tensor *d = loom_cast(loom_cast(loom_mul_s(x, 8.0), LOOM_I32), LOOM_F64);
  loom_tensor *next = loom_bitcast(loom_add_s(loom_bitcast(x, LOOM_I32), 1), LOOM_F32);
  d = loom_add(d, loom_cast(next, LOOM_F64));
  return loom_add(d, loom_cast(loom_mul(loom_detach(x), x), LOOM_F64));
}

/* ------------------------------------------------------------ reductions */

static loom_tensor *op_reduce_s(loom_tensor *x) {
  int s = along_s;
  loom_tensor *parts[] = {loom_sum(x, &s, 1, false), loom_mean(x, &s, 1, false),
                          loom_max(x, &s, 1, false), loom_min(x, &s, 1, false),
                          loom_logsumexp(x, s)};
  return loom_stack(parts, 5, 0); /* [5, 2, 6] */
}

static loom_tensor *op_reduce_fixed(loom_tensor *x) {
  int c = 2;
  loom_tensor *a = loom_add(loom_sum(x, &c, 1, true), loom_mean(x, &c, 1, true));
  return loom_add(a, loom_add(loom_max(x, &c, 1, true), loom_min(x, &c, 1, true)));
}

static loom_tensor *op_reduce_all(loom_tensor *x) {
  loom_tensor *parts[] = {loom_sum_all(x), loom_mean_all(x)};
  return loom_stack(parts, 2, 0);
}

static loom_tensor *op_arg(loom_tensor *x) { /* I64 positions along s and along the channels */
  loom_tensor *a = loom_add(loom_argmax(x, along_s, true), loom_argmin(x, along_s, true));
  return loom_add(a, loom_unsqueeze(loom_argmax(x, -1, false), -1));
}

static loom_tensor *op_var_std(loom_tensor *x) {
  int s = along_s;
  loom_tensor *v = loom_add(loom_var(x, &s, 1, 0.0, true), loom_std(x, &s, 1, 0.0, true));
  loom_tensor *both[2] = {loom_var(x, &s, 1, 1.0, true), loom_std(x, NULL, 0, 1.0, true)};
  return loom_add(v, loom_add(both[0], both[1])); /* (correction 1 at s = 1: NaN, as torch) */
}

static loom_tensor *op_softmax(loom_tensor *x) {
  return loom_add(loom_add(loom_softmax(x, along_s), loom_log_softmax(x, along_s)),
                  loom_add(loom_softmax(x, -1), loom_log_softmax(x, -1)));
}

/* ------------------------------------------------------------ movement */

static loom_tensor *op_views(loom_tensor *x) {
  loom_shape s = loom_shape_of(x);
  loom_tensor *t = loom_permute(x, (int[]){2, 0, 1}, 3);                     /* [6, 2, s] */
  loom_tensor *f = loom_reshape(loom_transpose(t, 0, 2), LOOM_SHAPE(-1, 6)); /* [2s, 6] */
  loom_tensor *back = loom_reshape(f, LOOM_SHAPE(s.dim[0], s.dim[1], 2, 3)); /* split 6 */
  loom_tensor *sq = loom_squeeze(loom_unsqueeze(loom_flatten(back, 2, 3), 0), 0);
  loom_tensor *e = loom_expand(loom_slice(x, 2, 0, 1, 1), LOOM_SHAPE(-1, -1, 6));
  return loom_add(loom_contiguous(sq), e);
}

static loom_tensor *op_slices(loom_tensor *x) {
  loom_tensor *tail = loom_slice(x, along_s, -1, INT64_MAX, 1); /* the last position */
  loom_tensor *all = loom_slice(x, along_s, 0, INT64_MAX, 1);
  loom_tensor *odd = loom_slice(x, 2, 1, 6, 2); /* every other channel */
  loom_tensor *padded = loom_pad(odd, (int64_t[]){1, 2}, 2, -1.0);
  return loom_add(loom_add(all, tail), padded);
}

static loom_tensor *op_pad_s(loom_tensor *x) { /* s + 3 */
  return loom_pad(x, (int64_t[]){0, 0, 1, 2}, 4, 0.5);
}

static loom_tensor *op_cat_stack(loom_tensor *x) {
  loom_tensor *two[2] = {x, loom_mul_s(x, 2.0)};
  loom_tensor *cat = loom_cat(two, 2, along_s); /* [2, 2s, 6] */
  loom_tensor *st = loom_stack(two, 2, 2);      /* [2, s, 2, 6] */
  return loom_add(loom_reshape(cat, LOOM_SHAPE(-1)), loom_reshape(st, LOOM_SHAPE(-1)));
}

static loom_tensor *op_repeat(loom_tensor *x) {
  return loom_repeat(x, (int64_t[]){2, 1, 3, 1}, 4); /* [2, 2, 3s, 6] */
}

/* a flip along s alone (nothing else ties its length to s), and along the others */
static loom_tensor *op_flip(loom_tensor *x) { return loom_flip(x, along_s); }
static loom_tensor *op_flips(loom_tensor *x) {
  return loom_add(loom_flip(loom_exp(x), along_s), loom_flip(loom_flip(x, 2), 0));
}

static loom_tensor *op_cumsum_s(loom_tensor *x) { return loom_cumsum(x, along_s); }
static loom_tensor *op_cumsum_fixed(loom_tensor *x) {
  return loom_add(loom_cumsum(x, 2), loom_cast(loom_cumsum(loom_gt_s(x, 0), 2), LOOM_F32));
}

static loom_tensor *op_triangles(loom_tensor *x) {
  loom_tensor *sc = scores_of(x);
  return loom_add(loom_tril(sc, 0), loom_triu(sc, 1));
}

static loom_tensor *op_split_fixed(loom_tensor *x) {
  loom_tensor *a[3], *b[3];
  int na = 0, nb = 0;
  CHECK_OK(loom_split(x, 4, 2, a, 3, &na)); /* [.., 4], [.., 2] */
  CHECK_OK(loom_chunk(x, 3, 2, b, &nb));    /* three of [.., 2] */
  if (na != 2 || nb != 3) return loom_retain(x);
  loom_tensor *chunks = loom_add(loom_add(b[0], b[1]), b[2]); /* [2, s, 2] */
  return loom_add(loom_cat(a, 2, 2), loom_pad(chunks, (int64_t[]){0, 4}, 2, 0));
}

static loom_tensor *op_chunk_s(loom_tensor *x) { /* refused: pieces of s/2 */
  loom_tensor *b[2];
  int nb = 0;
  CHECK_OK(loom_chunk(x, 2, along_s, b, &nb));
  return nb == 2 ? loom_retain(b[0]) : loom_retain(x);
}

/* ------------------------------------------------------------ indexing */

static loom_tensor *op_index_select(loom_tensor *x) {
  int64_t idx[3] = {5, 0, 2};
  loom_tensor *i = loom_from_data(idx, LOOM_SHAPE(3), LOOM_I64, test_device());
  /* along s at a position the data picks: always inside [0, s) */
  loom_tensor *at =
      loom_reshape(loom_argmax(loom_sum(x, (int[]){0, 2}, 2, false), 0, false), LOOM_SHAPE(1));
  loom_tensor *row = loom_index_select(x, along_s, at); /* [2, 1, 6] */
  loom_tensor *cols = loom_index_select(x, 2, i);       /* [2, s, 3] */
  return loom_add(loom_pad(cols, (int64_t[]){0, 3}, 2, 0), row);
}

static loom_tensor *op_gather(loom_tensor *x) {
  loom_tensor *order = loom_argsort(x, along_s, false); /* a permutation along s */
  loom_tensor *by_row = loom_gather(x, along_s, order);
  loom_tensor *pick = loom_gather(x, 2, loom_unsqueeze(labels_of(x), -1)); /* [2, s, 1] */
  return loom_add(by_row, pick);
}

static loom_tensor *op_sort(loom_tensor *x) {
  loom_tensor *v = NULL, *i = NULL, *tv = NULL, *ti = NULL, *cv = NULL;
  CHECK_OK(loom_sort(x, along_s, true, &v, &i));
  CHECK_OK(loom_topk(x, 1, along_s, true, &tv, &ti)); /* k 1 fits every s */
  CHECK_OK(loom_topk(x, 3, 2, false, &cv, NULL));     /* [2, s, 3] */
  if (!v || !i || !tv || !ti || !cv) return loom_retain(x);
  loom_tensor *a = loom_add(v, loom_cast(i, LOOM_F32));
  loom_tensor *b = loom_add(tv, loom_cast(ti, LOOM_F32));
  return loom_add(loom_add(a, b), loom_pad(cv, (int64_t[]){0, 3}, 2, 0));
}

static loom_tensor *op_multinomial(loom_tensor *x) {
  loom_tensor *probs = loom_softmax(rows_of(x), -1); /* [2s, 6] */
  loom_tensor *with = loom_multinomial_key(w.key, probs, 3, true);
  loom_tensor *without = loom_multinomial_key(loom_key_fold(w.key, 3), probs, 2, false);
  loom_tensor *over_s = loom_softmax(loom_sum(x, (int[]){2}, 1, false), -1); /* [2, s] */
  loom_tensor *one = loom_multinomial_key(loom_key_fold(w.key, 4), over_s, 1, false);
  loom_tensor *many = loom_multinomial_key(loom_key_fold(w.key, 5), over_s, 4, true);
  loom_tensor *rows = loom_reshape(loom_add(loom_slice(with, 1, 0, 2, 1), without),
                                   LOOM_SHAPE(2, -1)); /* [2, 2s] */
  loom_tensor *ends[2] = {loom_add(one, loom_slice(many, 1, 0, 1, 1)), rows};
  return loom_cat(ends, 2, 1);
}

static loom_tensor *op_embedding(loom_tensor *x) {
  loom_tensor *e = loom_embedding_f(labels_of(x), w.table);                /* [2, s, 5] */
  loom_tensor *h = loom_cast(loom_one_hot(labels_of(x), 6), LOOM_F32);     /* [2, s, 6] */
  loom_tensor *f = loom_embedding_forward(&w.emb, labels_of(loom_neg(x))); /* [2, s, 5] */
  return loom_add(loom_add(e, f), loom_slice(loom_mul(h, x), 2, 0, 5, 1));
}

/* ------------------------------------------------------------ linear algebra, nn */

static loom_tensor *op_matmul(loom_tensor *x) {
  loom_tensor *outer = loom_matmul(x, w.w64);                   /* [2, s, 4] */
  loom_tensor *inner = loom_matmul(loom_transpose(x, 1, 2), x); /* [2, 6, 6]: sum over s */
  loom_tensor *vec = loom_matmul(x, w.w6);                      /* [2, s] */
  loom_tensor *lin = loom_linear_f(x, w.w46, w.b4);             /* [2, s, 4] */
  loom_tensor *a = loom_add(loom_add(outer, lin), loom_unsqueeze(vec, -1));
  return loom_add(loom_reshape(a, LOOM_SHAPE(-1)), loom_sum_all(inner));
}

static loom_tensor *op_scores(loom_tensor *x) { return scores_of(x); } /* [2, s, s] */

static loom_tensor *op_layers(loom_tensor *x) {
  loom_tensor *a = loom_linear_forward(&w.linear, x);       /* [2, s, 4] */
  loom_tensor *b = loom_layernorm_forward(&w.ln, x);        /* [2, s, 6] */
  loom_tensor *c = loom_layer_norm(x, 1, w.w6, NULL, 1e-5); /* [2, s, 6] */
  loom_tensor *d = loom_seq_forward(w.seq, x, false);       /* [2, s, 4] */
  loom_tensor *e = loom_mha_forward(&w.mha, x);             /* [2, s, 6] */
  loom_tensor *flat[] = {loom_reshape(loom_add(a, d), LOOM_SHAPE(-1)),
                         loom_reshape(loom_add(loom_add(b, c), e), LOOM_SHAPE(-1))};
  return loom_cat(flat, 2, 0);
}

static loom_tensor *op_conv_batch(loom_tensor *x) { /* images of a fixed size, s of them */
  loom_tensor *img = loom_reshape(rows_of(x), LOOM_SHAPE(-1, 1, 2, 3)); /* [2s, 1, 2, 3] */
  loom_tensor *c = loom_conv2d_f(img, w.conv_w, w.conv_b, (loom_conv2d_opts){0});
  loom_tensor *d = loom_conv2d_forward(&w.conv, img);
  loom_tensor *m = loom_max_pool2d(img, 2, 1, 0), *a = loom_avg_pool2d(img, 1, 1, 0);
  loom_tensor *n = loom_batchnorm2d_forward(&w.bn, img, false);
  loom_tensor *bn = loom_batch_norm(img, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
  loom_tensor *flat[] = {loom_flatten(c, 1, 3), loom_flatten(d, 1, 3), loom_flatten(m, 1, 3),
                         loom_flatten(loom_add(loom_add(a, n), bn), 1, 3)};
  return loom_cat(flat, 4, 1);
}

static loom_tensor *op_conv_s(loom_tensor *x) { /* refused: windows over s */
  return loom_conv2d_f(image_of(x), w.conv_w, w.conv_b, (loom_conv2d_opts){0});
}

static loom_tensor *op_pool_s(loom_tensor *x) { /* refused: windows over s */
  return loom_max_pool2d(image_of(x), 2, 1, 0);
}

static loom_tensor *op_dropout(loom_tensor *x) {
  return loom_add(loom_dropout(x, 0.3, w.key, true), loom_dropout(x, 0.3, w.key, false));
}

static loom_tensor *op_losses(loom_tensor *x) {
  loom_tensor *r = rows_of(x), *lab = loom_reshape(labels_of(loom_neg(x)), LOOM_SHAPE(-1));
  loom_tensor *ce = loom_cross_entropy(r, lab), *nll = loom_nll_loss(loom_log_softmax(r, -1), lab);
  loom_tensor *mse = loom_mse_loss(x, loom_flip(x, along_s));
  loom_tensor *bce = loom_bce_with_logits(x, loom_sigmoid(loom_flip(x, along_s)));
  loom_cross_entropy_opts o = {.ignore = true, .ignore_index = 2, .label_smoothing = 0.125};
  loom_tensor *ex = loom_cross_entropy_ex(r, lab, o);
  o.reduction = LOOM_REDUCE_SUM;
  loom_tensor *sum = loom_cross_entropy_ex(r, lab, o);
  loom_tensor *parts[] = {ce, nll, mse, bce, ex, sum};
  return loom_stack(parts, 6, 0);
}

static loom_tensor *op_loss_rows(loom_tensor *x) { /* per label, and classes along s */
  loom_cross_entropy_opts o = {.reduction = LOOM_REDUCE_NONE};
  loom_tensor *logits = loom_transpose(x, 1, 2); /* [2, 6, s]: s positions of 6 classes */
  loom_tensor *per = loom_cross_entropy_ex(logits, labels_of(x), o); /* [2, s] */
  loom_tensor *cls = loom_sum(x, (int[]){2}, 1, false);              /* [2, s]: s classes */
  loom_tensor *lab = loom_argmin(cls, 1, false);                     /* [2] */
  return loom_add(per, loom_cross_entropy(cls, lab));
}

static loom_tensor *op_attention(loom_tensor *x) {
  loom_tensor *q = loom_matmul(x, loom_transpose(w.w46, 0, 1)); /* [2, s, 4] */
  loom_tensor *causal = loom_scaled_dot_product_attention(q, q, x, NULL, true, 0);
  loom_tensor *mask = loom_gt_s(loom_tril(loom_ones_like(scores_of(x)), 0), 0.5);
  loom_tensor *masked = loom_scaled_dot_product_attention(q, q, x, mask, false, 0.3);
  loom_tensor *add = loom_mul_s(loom_tanh(scores_of(x)), 0.5); /* an additive mask */
  return loom_add(loom_add(causal, masked),
                  loom_scaled_dot_product_attention(x, x, x, add, false, 0));
}

/* ------------------------------------------------------------ gradients */

static loom_tensor *op_backward(loom_tensor *x) {
  loom_clear_grad(w.g6);
  loom_tensor *y = loom_tanh(loom_matmul(loom_mul(x, w.g6), w.w64));
  loom_tensor *loss = loom_add(loom_sum_all(loom_square(y)),
                               loom_mean_all(loom_softmax(loom_flip(y, along_s), along_s)));
  CHECK_OK(loom_backward(loss));
  return loom_grad(w.g6); /* [6]: sums over 2s rows */
}

static loom_tensor *op_grad_of(loom_tensor *x) {
  CHECK_OK(loom_set_requires_grad(x, true)); /* (a gradient into x itself) */
  loom_tensor *y = loom_cumsum(loom_mul(x, w.w6), 2);
  loom_tensor *loss = loom_sum_all(loom_mul(loom_softmax(y, along_s), loom_flip(x, along_s)));
  loom_tensor *g[2] = {NULL, NULL};
  CHECK_OK(loom_grad_of(&loss, 1, (loom_tensor *[]){x}, 1, g));
  loom_tensor *seed = loom_full_like(y, 0.5);
  CHECK_OK(loom_grad_of_seeded(&y, &seed, 1, (loom_tensor *[]){x}, 1, &g[1]));
  return g[0] && g[1] ? loom_add(g[0], g[1]) : loom_retain(x);
}

/* ------------------------------------------------------------ the table */

typedef struct sweep_op {
  const char *name;
  const char *covers; /* the loom.h functions it records, space-separated */
  sweep_fn build;
  /* NULL: the program follows s; else compiling refuses with a message
     holding both of these */
  const char *refused, *refused_too;
} sweep_op;

#define FOLLOWS(n, c, f)                                                                           \
  { .name = n, .covers = c, .build = f }
#define REFUSED(n, c, f, a, b)                                                                     \
  { .name = n, .covers = c, .build = f, .refused = a, .refused_too = b }
static const sweep_op table[] = {
    FOLLOWS("fixed constants", "loom_ones loom_zeros loom_full loom_scalar loom_arange",
            op_fixed_constants),
    FOLLOWS("fixed draws",
            "loom_rand loom_randn loom_rand_key loom_randn_key loom_bernoulli_key loom_key_fold "
            "loom_manual_seed",
            op_fixed_draws),
    FOLLOWS("like", "loom_zeros_like loom_ones_like loom_full_like", op_like),
    REFUSED("zeros_like(x) without x", "", op_like_alone, "equals s at the traced sizes",
            "recorded by loom_zeros_like"),
    REFUSED("ones over s", "", op_ones_over_s, "a dim of size s meets a fixed dim of size 11",
            "recorded by loom_ones"),
    REFUSED("randn in a product over s", "", op_randn_product,
            "a dim of size s meets a fixed dim of size 11", "recorded by loom_randn_key"),
    REFUSED("arange over s", "", op_arange_over_s, "a dim of size s meets a fixed dim of size 11",
            "recorded by loom_arange"),
    FOLLOWS("unary",
            "loom_neg loom_abs loom_exp loom_log loom_sqrt loom_rsqrt loom_sin loom_cos loom_tanh "
            "loom_sigmoid loom_relu loom_gelu loom_gelu_tanh loom_silu loom_square loom_reciprocal "
            "loom_erf loom_log1p loom_expm1 loom_sign loom_floor loom_ceil loom_round loom_clamp",
            op_unary),
    FOLLOWS("binary", "loom_add loom_sub loom_mul loom_div loom_pow loom_maximum loom_minimum",
            op_binary),
    FOLLOWS("scalar forms",
            "loom_add_s loom_sub_s loom_rsub_s loom_mul_s loom_div_s loom_rdiv_s loom_pow_s "
            "loom_maximum_s loom_minimum_s",
            op_scalar_forms),
    FOLLOWS(
        "comparisons",
        "loom_lt loom_le loom_gt loom_ge loom_eq loom_ne loom_lt_s loom_le_s loom_gt_s loom_ge_s "
        "loom_eq_s loom_ne_s loom_logical_not loom_logical_and loom_logical_or",
        op_compare),
    FOLLOWS("a bool output", "", op_bool),
    FOLLOWS("where", "loom_where loom_where_s loom_masked_fill", op_select),
    FOLLOWS("slice_update along s", "loom_slice_update", op_slice_update),
    FOLLOWS("cast, detach, bitcast", "loom_cast loom_detach loom_bitcast", op_cast_detach),
    FOLLOWS("reductions over s", "loom_sum loom_mean loom_max loom_min loom_logsumexp loom_stack",
            op_reduce_s),
    FOLLOWS("reductions over the channels", "", op_reduce_fixed),
    FOLLOWS("reductions of everything", "loom_sum_all loom_mean_all", op_reduce_all),
    FOLLOWS("argmax, argmin", "loom_argmax loom_argmin", op_arg),
    FOLLOWS("var, std", "loom_var loom_std", op_var_std),
    FOLLOWS("softmaxes", "loom_softmax loom_log_softmax", op_softmax),
    FOLLOWS("views",
            "loom_reshape loom_permute loom_transpose loom_expand loom_squeeze loom_unsqueeze "
            "loom_flatten loom_contiguous",
            op_views),
    FOLLOWS("slices, pads", "loom_slice loom_pad", op_slices),
    FOLLOWS("a pad along s", "", op_pad_s),
    FOLLOWS("cat, stack along s", "loom_cat", op_cat_stack),
    FOLLOWS("repeat", "loom_repeat", op_repeat),
    FOLLOWS("flip along s", "loom_flip", op_flip),
    FOLLOWS("flips along every axis", "", op_flips),
    FOLLOWS("cumsum along s", "loom_cumsum", op_cumsum_s),
    FOLLOWS("cumsum along the channels", "", op_cumsum_fixed),
    FOLLOWS("tril, triu over [s, s]", "loom_tril loom_triu", op_triangles),
    FOLLOWS("split, chunk of the channels", "loom_split loom_chunk", op_split_fixed),
    REFUSED("chunks of s", "", op_chunk_s, "has a bound of 6 (the dim is traced at 11)",
            "recorded by loom_chunk"),
    FOLLOWS("index_select", "loom_index_select loom_from_data", op_index_select),
    FOLLOWS("gather, argsort", "loom_gather loom_argsort", op_gather),
    FOLLOWS("sort, topk", "loom_sort loom_topk", op_sort),
    FOLLOWS("multinomial", "loom_multinomial_key", op_multinomial),
    FOLLOWS("embedding, one_hot", "loom_embedding_f loom_one_hot loom_embedding_forward",
            op_embedding),
    FOLLOWS("matmul, linear", "loom_matmul loom_linear_f", op_matmul),
    FOLLOWS("scores [s, s]", "", op_scores),
    FOLLOWS("layers",
            "loom_linear_forward loom_layernorm_forward loom_layer_norm loom_seq_forward "
            "loom_mha_forward",
            op_layers),
    FOLLOWS("convolutions, pools, batch norms of s images",
            "loom_conv2d_f loom_conv2d_forward loom_max_pool2d loom_avg_pool2d "
            "loom_batchnorm2d_forward "
            "loom_batch_norm",
            op_conv_batch),
    REFUSED("a convolution along s", "", op_conv_s, "sliding windows over a dim of size s",
            "recorded by loom_conv2d_f"),
    REFUSED("a max pool along s", "", op_pool_s, "sliding windows over a dim of size s",
            "recorded by loom_max_pool2d"),
    FOLLOWS("dropout", "loom_dropout", op_dropout),
    FOLLOWS(
        "losses",
        "loom_cross_entropy loom_nll_loss loom_mse_loss loom_bce_with_logits loom_cross_entropy_ex",
        op_losses),
    FOLLOWS("losses per label, classes along s", "", op_loss_rows),
    FOLLOWS("attention", "loom_scaled_dot_product_attention", op_attention),
    FOLLOWS("backward", "loom_backward loom_grad loom_clear_grad", op_backward),
    FOLLOWS("functional gradients", "loom_grad_of loom_grad_of_seeded", op_grad_of),
};
#define NTABLE ((int)(sizeof table / sizeof table[0]))

/* Functions of include/loom.h that record no op a program could hold, each
 * with why; every other one must be in some entry's `covers`. */
static const struct {
  const char *names, *why;
} excluded[] = {
    {"loom_status_of loom_error_message loom_last_error loom_last_status loom_clear_error "
     "loom_status_name loom_set_error_handler",
     "errors: no tensors recorded"},
    {"loom_free loom_retain loom_scope_begin loom_scope_end loom_keep loom_scope_depth",
     "handles and scopes: lifetimes, not ops"},
    {"loom_realize loom_eval loom_item loom_item_i64 loom_copy_to_host loom_print loom_fprint",
     "reading values: realizes, records nothing (the sweep reads every result through them)"},
    {"loom_shape_of loom_dtype_of loom_device_of loom_numel loom_ndim loom_is_realized "
     "loom_dtype_size loom_dtype_name loom_dtype_is_float loom_bf16_to_float loom_float_to_bf16 "
     "loom_f16_to_float loom_float_to_f16",
     "properties and scalar conversions, no tensors recorded"},
    {"loom_assign loom_set_grad",
     "lazy assignments to a handle: a program's graph ends at its outputs and holds none"},
    {"loom_set_requires_grad loom_requires_grad loom_no_grad_begin loom_no_grad_end "
     "loom_grad_enabled",
     "gradient bookkeeping, no op (the gradient entries use them)"},
    {"loom_key_new loom_key_split loom_next_key", "keys are host values, not tensors"},
    {"loom_to",
     "a copy to another device is computed when recorded: it cannot take a program's input"},
    {"loom_input loom_compile loom_compile_symbolic loom_program_num_symbols "
     "loom_program_symbol_name loom_program_input_dim_symbol loom_program_run loom_program_free "
     "loom_program_num_inputs loom_program_num_outputs loom_program_input_name "
     "loom_program_input_shape loom_program_input_dtype loom_program_output_name "
     "loom_program_output_shape loom_program_output_dtype loom_program_dump loom_program_dot "
     "loom_program_save loom_program_load loom_program_export",
     "the program machinery the sweep runs every entry through"},
    {"loom_linear_new loom_conv2d_new loom_batchnorm2d_new loom_layernorm_new loom_embedding_new "
     "loom_mha_new loom_seq_new loom_seq_add loom_seq_free",
     "make layers (realized weights); their forwards are in the table"},
    {"loom_stage_linear loom_stage_conv2d loom_stage_batchnorm2d loom_stage_layernorm "
     "loom_stage_relu loom_stage_tanh loom_stage_flatten loom_stage_max_pool2d",
     "stage functions run by loom_seq_forward (its entry runs linear, relu and tanh stages); the "
     "rest are their layers' forwards, in the table"},
    {"loom_dataset_new loom_dataset_len loom_dataset_free loom_loader_new loom_loader_next "
     "loom_loader_shard loom_loader_batches loom_loader_free loom_mean_loss_add "
     "loom_mean_loss_value",
     "host-side data loading and loss bookkeeping"},
    {"loom_params_new loom_params_free loom_params_add loom_params_add_buffer loom_params_count "
     "loom_params_at loom_params_name loom_params_trainable loom_params_get loom_zero_grad "
     "loom_clip_grad_norm loom_params_save loom_params_load loom_params_load_ex "
     "loom_load_report_free loom_safetensors_read",
     "parameter collections and their files: they act on stored tensors and gradients, not on "
     "a program's inputs"},
    {"loom_npy_read loom_npy_write loom_onnx_load loom_onnx_open loom_onnx_forward "
     "loom_onnx_close",
     "file formats: .npy tensors and ONNX models read and written (test_npy, test_onnx and the "
     "ONNX node tests); an imported model is a program of the table's ops"},
    {"loom_dist_init loom_dist_finalize loom_dist_rank loom_dist_size loom_dist_initialized "
     "loom_dist_available loom_dist_nccl_available loom_dist_set_timeout loom_all_reduce "
     "loom_broadcast loom_all_gather loom_ddp",
     "collectives need an initialized world of processes (test_dist runs them)"},
    {"loom_sgd loom_adam loom_adamw loom_optim_step loom_optim_zero_grad loom_optim_set_lr "
     "loom_optim_group loom_optim_lr loom_lr_warmup_cosine loom_optim_free",
     "optimizers update parameters by lazy assignments, outside any program"},
    {"loom_get_stats loom_reset_stats loom_set_default_device loom_default_device "
     "loom_cuda_available loom_cuda_device_count loom_cuda_unavailable_reason loom_synchronize "
     "loom_cuda_peak_bandwidth loom_set_num_threads loom_num_threads loom_set_fusion "
     "loom_fusion_enabled loom_set_dynamic loom_dynamic_mode loom_cache_dir loom_cache_info_get "
     "loom_cache_clear loom_target_id loom_blas_info loom_gemm_choice loom_cpu_amx "
     "loom_cpu_bf16_products",
     "settings, statistics and machine facts"},
};

static bool in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
  return false;
}

/* Every function include/loom.h declares is in the table or excluded: its
 * text without comments and preprocessor lines, each `loom_name(` that
 * follows a type (a word or `*`) being a declaration. */
static void test_header_covered(void) {
  const char *path = LOOM_SOURCE_DIR "/include/loom.h";
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  if (!f) return;
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  /* comments and preprocessor lines (with their continuations) become spaces */
  for (size_t i = 0; i < len; i++) {
    if (text[i] == '/' && text[i + 1] == '*') {
      char *end = strstr(text + i + 2, "*/");
      size_t stop = end ? (size_t)(end - text) + 2 : len;
      for (; i < stop; i++)
        if (text[i] != '\n') text[i] = ' ';
      i--;
    } else if (text[i] == '#' && (i == 0 || text[i - 1] == '\n')) {
      for (; i < len && !(text[i] == '\n' && text[i - 1] != '\\'); i++) text[i] = ' ';
    }
  }
  int declared = 0;
  for (char *p = text; (p = strstr(p, "loom_")) != NULL; p++) {
    if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
    char name[96];
    size_t n = 0;
    while ((isalnum((unsigned char)p[n]) || p[n] == '_') && n < sizeof name - 1)
      name[n] = p[n], n++;
    name[n] = 0;
    const char *after = p + n;
    while (*after == ' ') after++;
    const char *before = p - 1;
    while (before > text && *before == ' ') before--;
    bool after_type = *before == '*' || isalnum((unsigned char)*before) || *before == '_';
    if (*after != '(' || !after_type || before <= text) continue;
    /* `typedef ret (*name)(`: a function pointer type, not a function */
    if (*before == '*' && before[-1] == '(') continue;
    declared++;
    bool found = false;
    for (int i = 0; i < NTABLE && !found; i++) found = in_list(table[i].covers, name);
    for (int i = 0; i < (int)(sizeof excluded / sizeof excluded[0]) && !found; i++)
      found = in_list(excluded[i].names, name);
    CHECK_MSG(found,
              "%s, declared in include/loom.h, is in no entry of the symbolic sweep's table and "
              "not excluded (tests/test_symbolic_ops.c)",
              name);
  }
  CHECK_MSG(declared > 250, "only %d functions found in %s", declared, path);
  /* and nothing named that loom.h no longer declares */
  for (int i = 0; i < NTABLE; i++) {
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", table[i].covers);
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) {
      char call[128];
      snprintf(call, sizeof call, "%s(", tok);
      CHECK_MSG(strstr(text, call) != NULL, "the table names %s, which loom.h does not declare",
                tok);
    }
  }
}

/* ------------------------------------------------------------ comparing */

/* got's values (host memory of dtype dt, shape gs) against the eager
 * result want: shapes, dtypes and every value. */
static void compare(const char *what, const void *got, loom_dtype dt, loom_shape gs,
                    loom_tensor *want) {
  loom_shape ws = loom_shape_of(want);
  bool same = gs.ndim == ws.ndim;
  for (int d = 0; same && d < gs.ndim; d++) same = gs.dim[d] == ws.dim[d];
  char a[128] = "", b[128] = "";
  for (int d = 0; d < gs.ndim; d++)
    snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", (long long)gs.dim[d]);
  for (int d = 0; d < ws.ndim; d++)
    snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)ws.dim[d]);
  CHECK_MSG(same, "%s: shape [%s], eager gives [%s]", what, a, b);
  CHECK_MSG(dt == loom_dtype_of(want), "%s: dtype %s, eager gives %s", what, loom_dtype_name(dt),
            loom_dtype_name(loom_dtype_of(want)));
  if (!same || dt != loom_dtype_of(want)) return;
  int64_t n = loom_numel(want);
  size_t bytes = (size_t)n * loom_dtype_size(dt);
  void *ref = malloc(bytes + 8);
  CHECK_OK(loom_copy_to_host(want, ref, bytes));
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 3; i++) {
    double x = check_element(got, dt, i), y = check_element(ref, dt, i);
    bool ok = (isnan(x) && isnan(y)) || x == y || fabs(x - y) <= 2e-5 * (1 + fabs(y));
    if (!ok) {
      bad++;
      check_fail_at(__FILE__, __LINE__, "%s: element %lld of [%s] is %.9g, eager gives %.9g", what,
                    (long long)i, b, x, y);
    }
  }
  if (!bad) check_passes++;
  free(ref);
}

/* A program's result at this input against eager. */
static void compare_run(const char *what, const loom_program *p, const sweep_op *op,
                        loom_tensor *in) {
  LOOM_SCOPE {
    loom_tensor *got = NULL;
    loom_status st = loom_program_run(p, &in, &got);
    CHECK_MSG(st == LOOM_OK, "%s: %s", what, loom_last_error());
    loom_clear_error();
    loom_tensor *want = op->build(in);
    CHECK_MSG(loom_realize(want) == LOOM_OK, "%s: eager: %s", what, loom_last_error());
    if (st == LOOM_OK && loom_status_of(want) == LOOM_OK) {
      size_t bytes = (size_t)loom_numel(got) * loom_dtype_size(loom_dtype_of(got));
      void *data = malloc(bytes + 8);
      CHECK_OK(loom_copy_to_host(got, data, bytes));
      compare(what, data, loom_dtype_of(got), loom_shape_of(got), want);
      free(data);
    }
  }
}

static loom_tensor *input_at(int64_t s, unsigned seed) { return filled(LOOM_SHAPE(2, s, 6), seed); }

/* ------------------------------------------------------------ programs, files, exports */

static char dir[256];
static loom_symbolic_dim symbol = {0, 1, "s"};

/* The entry's program, or NULL when refused (checked against the entry). */
static loom_program *compile_entry(const sweep_op *op) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(2, TRACED, 6), LOOM_F32, test_device());
    loom_clear_error();
    loom_tensor *out = op->build(x);
    p = loom_compile_symbolic(&out, 1, &x, 1, &symbol, 1);
  }
  const char *err = loom_last_error();
  if (op->refused) {
    CHECK_MSG(p == NULL, "%s: compiled, but must be refused (%s)", op->name, op->refused);
    CHECK_MSG(err && strstr(err, op->refused) && strstr(err, op->refused_too),
              "%s: refused with '%s', which lacks '%s' or '%s'", op->name, err ? err : "(none)",
              op->refused, op->refused_too);
    loom_program_free(p);
    return NULL;
  }
  CHECK_MSG(p != NULL, "%s: %s", op->name, err ? err : "(no message)");
  return p;
}

static void check_entry(const sweep_op *op, loom_program *p) {
  for (int i = 0; i < NSIZES; i++) {
    char what[160];
    snprintf(what, sizeof what, "%s at s=%lld", op->name, (long long)sizes[i]);
    loom_tensor *in = input_at(sizes[i], 100 + (unsigned)i);
    compare_run(what, p, op, in);
    loom_free(in);
  }
  if (test_device().type != LOOM_DEVICE_CPU) return; /* (files load on the CPU) */
  char path[512];
  snprintf(path, sizeof path, "%s/entry.loom", dir);
  CHECK_MSG(loom_program_save(p, path) == LOOM_OK, "%s: save: %s", op->name, loom_last_error());
  loom_program *back = loom_program_load(path);
  CHECK_MSG(back != NULL, "%s: load: %s", op->name, loom_last_error());
  for (int i = 0; back && i < NSIZES; i++) {
    char what[160];
    snprintf(what, sizeof what, "%s, loaded, at s=%lld", op->name, (long long)sizes[i]);
    loom_tensor *in = input_at(sizes[i], 200 + (unsigned)i);
    compare_run(what, back, op, in);
    loom_free(in);
  }
  loom_program_free(back);
}

typedef int (*run_dims_fn)(const int64_t *dims, const void *const *inputs, void *const *outputs);
typedef int (*shape_fn)(int i, const int64_t *dims, int64_t *shape);

/* The entries [first, last) that compiled, as one program of one output each,
 * exported as lib<name>.so and run at every size against eager. */
static void check_export(const char *name, const int *entries, int n) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(2, TRACED, 6), LOOM_F32, LOOM_CPU);
    loom_tensor *outs[64];
    for (int i = 0; i < n; i++) outs[i] = table[entries[i]].build(x);
    p = loom_compile_symbolic(outs, n, &x, 1, &symbol, 1);
  }
  CHECK_MSG(p != NULL, "export %s: %s", name, loom_last_error());
  loom_status st = p ? loom_program_export(p, dir, name) : LOOM_ERR_NULL;
  CHECK_MSG(st == LOOM_OK, "export %s: %s", name, loom_last_error());
  if (st != LOOM_OK) {
    loom_program_free(p);
    return;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/lib%s.so", dir, name);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK_MSG(h != NULL, "dlopen %s: %s", path, dlerror());
  run_dims_fn run = (run_dims_fn)check_library_symbol(h, name, "run_dims");
  shape_fn in_shape = (shape_fn)check_library_symbol(h, name, "input_shape");
  shape_fn out_shape = (shape_fn)check_library_symbol(h, name, "output_shape");
  for (int k = 0; run && in_shape && out_shape && k < NSIZES; k++) {
    int64_t dims[1] = {sizes[k]}, shape[LOOM_MAX_DIMS];
    CHECK_EQ_INT(in_shape(0, dims, shape), 3);
    CHECK(shape[0] == 2 && shape[1] == sizes[k] && shape[2] == 6);
    float *in = malloc(sizeof(float) * (size_t)(12 * sizes[k]));
    check_fill_uniform(in, 12 * sizes[k], 300 + (unsigned)k);
    void *out[64];
    loom_shape os[64];
    for (int i = 0; i < n; i++) {
      int nd = out_shape(i, dims, shape);
      os[i] = (loom_shape){.ndim = nd > 0 ? nd : 0};
      int64_t count = 1;
      for (int d = 0; d < nd; d++) os[i].dim[d] = shape[d], count *= shape[d];
      out[i] = calloc((size_t)count + 1, loom_dtype_size(loom_program_output_dtype(p, i)));
    }
    const void *ins[1] = {in};
    CHECK_EQ_INT(run(dims, ins, out), 0);
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(in, LOOM_SHAPE(2, sizes[k], 6), LOOM_F32, LOOM_CPU);
      for (int i = 0; i < n; i++) {
        char what[200];
        snprintf(what, sizeof what, "%s exported (lib%s.so) at s=%lld", table[entries[i]].name,
                 name, (long long)sizes[k]);
        loom_tensor *want = table[entries[i]].build(x);
        CHECK_MSG(loom_realize(want) == LOOM_OK, "%s: eager: %s", what, loom_last_error());
        compare(what, out[i], loom_program_output_dtype(p, i), os[i], want);
      }
    }
    for (int i = 0; i < n; i++) free(out[i]);
    free(in);
  }
  if (h) dlclose(h);
  loom_program_free(p);
}

static void test_sweep(void) {
  int exportable[NTABLE], nexport = 0;
  for (int i = 0; i < NTABLE; i++) {
    loom_scope_begin();
    loom_program *p = compile_entry(&table[i]);
    if (p) {
      check_entry(&table[i], p);
      exportable[nexport++] = i;
    }
    loom_program_free(p);
    CHECK_OK(loom_scope_end());
  }
  if (test_device().type != LOOM_DEVICE_CPU) return;
  /* exports compile C: a few libraries of several entries each */
  for (int first = 0, part = 0; first < nexport; first += 12, part++) {
    char name[32];
    snprintf(name, sizeof name, "sweep%d", part);
    check_export(name, exportable + first, nexport - first < 12 ? nexport - first : 12);
  }
}

/* ------------------------------------------------------------ setup */

static void make_weights(void) {
  w.key = loom_key_new(41);
  w.w6 = filled(LOOM_SHAPE(6), 1), w.w64 = filled(LOOM_SHAPE(6, 4), 2);
  w.b4 = filled(LOOM_SHAPE(4), 3), w.w46 = filled(LOOM_SHAPE(4, 6), 4);
  w.g6 = filled(LOOM_SHAPE(6), 5);
  CHECK_OK(loom_set_requires_grad(w.g6, true));
  w.table = filled(LOOM_SHAPE(6, 5), 6);
  w.conv_w = filled(LOOM_SHAPE(3, 1, 2, 3), 7), w.conv_b = filled(LOOM_SHAPE(3), 8);
  w.ps = loom_params_new();
  w.linear = loom_linear_new(w.ps, "linear", 6, 4, loom_key_fold(w.key, 10));
  w.conv = loom_conv2d_new(w.ps, "conv", 1, 2, 2, (loom_conv2d_opts){0}, loom_key_fold(w.key, 11));
  w.bn = loom_batchnorm2d_new(w.ps, "bn", 1);
  w.ln = loom_layernorm_new(w.ps, "ln", 6);
  w.emb = loom_embedding_new(w.ps, "emb", 6, 5, loom_key_fold(w.key, 12));
  w.mha = loom_mha_new(w.ps, "mha", 6, 2, true, loom_key_fold(w.key, 13));
  w.seq = loom_seq_new();
  CHECK_OK(loom_seq_add(w.seq, loom_stage_linear, &w.linear));
  CHECK_OK(loom_seq_add(w.seq, loom_stage_relu, NULL));
  CHECK_OK(loom_seq_add(w.seq, loom_stage_tanh, NULL));
}

static void free_weights(void) {
  loom_free(w.w6), loom_free(w.w64), loom_free(w.b4), loom_free(w.w46), loom_free(w.g6);
  loom_free(w.table), loom_free(w.conv_w), loom_free(w.conv_b);
  loom_seq_free(w.seq);
  loom_params_free(w.ps);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom-test-symbolic-ops-%d", (int)getpid());
  mkdir(dir, 0700);
  if (test_device().type != LOOM_DEVICE_CPU) loom_set_default_device(test_device());
  make_weights();
  test_header_covered();
  test_sweep();
  free_weights();
  if (!check_failures && !getenv("LOOM_EXPORT_KEEP")) check_remove_dir(dir);
  return check_report();
}
