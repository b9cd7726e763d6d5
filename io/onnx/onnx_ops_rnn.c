/* RNN, GRU and LSTM, unrolled over the sequence at import (loom's programs
 * have no loops), and Det, by an LU decomposition unrolled over the matrix
 * size. All of it is composed of loom's differentiable ops. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

/* As many steps as onnx_control.c unrolls a Loop to. */
#define MAX_STEPS 4096
#define MAX_DET_SIZE 64

/* ------------------------------------------------------------ activations */

typedef enum activation_kind {
  ACT_RELU,
  ACT_TANH,
  ACT_SIGMOID,
  ACT_AFFINE,
  ACT_LEAKY_RELU,
  ACT_THRESHOLDED_RELU,
  ACT_SCALED_TANH,
  ACT_HARD_SIGMOID,
  ACT_ELU,
  ACT_SOFTSIGN,
  ACT_SOFTPLUS,
} activation_kind;

/* The activations the recurrent ops name, how many of activation_alpha and
 * activation_beta each takes (alpha first), and their defaults: those of the
 * ONNX op of the same name (Affine's of the retired Affine op); ScaledTanh
 * has none, so it needs its values. */
static const struct {
  const char *name;
  int params;
  bool has_default;
  double alpha, beta;
} activation_table[] = {
    [ACT_RELU] = {"Relu", 0, true, 0, 0},
    [ACT_TANH] = {"Tanh", 0, true, 0, 0},
    [ACT_SIGMOID] = {"Sigmoid", 0, true, 0, 0},
    [ACT_AFFINE] = {"Affine", 2, true, 1, 0},
    [ACT_LEAKY_RELU] = {"LeakyRelu", 1, true, 0.01, 0},
    [ACT_THRESHOLDED_RELU] = {"ThresholdedRelu", 1, true, 1, 0},
    [ACT_SCALED_TANH] = {"ScaledTanh", 2, false, 0, 0},
    [ACT_HARD_SIGMOID] = {"HardSigmoid", 2, true, 0.2, 0.5},
    [ACT_ELU] = {"Elu", 1, true, 1, 0},
    [ACT_SOFTSIGN] = {"Softsign", 0, true, 0, 0},
    [ACT_SOFTPLUS] = {"Softplus", 0, true, 0, 0},
};
#define ACTIVATION_KINDS ((int)(sizeof activation_table / sizeof activation_table[0]))

typedef struct activation {
  activation_kind kind;
  double alpha, beta;
} activation;

/* ONNX's reference takes "Tanh" and "tanh" alike; so does this, for every name. */
static bool same_name_any_case(const char *a, const unsigned char *b, size_t blen) {
  size_t i = 0;
  for (; a[i] && i < blen; i++) {
    unsigned char x = (unsigned char)a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (unsigned char)(y - 'A' + 'a');
    if (x != y) return false;
  }
  return !a[i] && i == blen;
}

/* f(x) with x clipped to [-clip, clip] first when clip is given (>= 0). */
static loom_tensor *activate(const activation *a, loom_tensor *x, double clip) {
  if (clip >= 0) x = loom_clamp(x, -clip, clip);
  switch (a->kind) {
  case ACT_RELU: return loom_relu(x);
  case ACT_TANH: return loom_tanh(x);
  case ACT_SIGMOID: return loom_sigmoid(x);
  case ACT_AFFINE: return loom_add_s(loom_mul_s(x, a->alpha), a->beta);
  case ACT_LEAKY_RELU: return loom_where(loom_ge_s(x, 0), x, loom_mul_s(x, a->alpha));
  case ACT_THRESHOLDED_RELU: return loom_where_s(loom_ge_s(x, a->alpha), x, 0);
  case ACT_SCALED_TANH: return loom_mul_s(loom_tanh(loom_mul_s(x, a->beta)), a->alpha);
  case ACT_HARD_SIGMOID: return loom_clamp(loom_add_s(loom_mul_s(x, a->alpha), a->beta), 0, 1);
  case ACT_ELU:
    /* expm1 of the negative part only: the branch not taken stays finite, and so
     * does its gradient */
    return loom_where(loom_ge_s(x, 0), x, loom_mul_s(loom_expm1(loom_minimum_s(x, 0)), a->alpha));
  case ACT_SOFTSIGN: return loom_div(x, loom_add_s(loom_abs(x), 1));
  case ACT_SOFTPLUS:
    /* log(1 + e^x) as max(x, 0) + log1p(e^-|x|), which does not overflow */
    return loom_add(loom_relu(x), loom_log1p(loom_exp(loom_neg(loom_abs(x)))));
  }
  return loom_retain(x);
}

/* ------------------------------------------------------------ recurrent ops */

typedef enum cell_kind { CELL_RNN, CELL_GRU, CELL_LSTM } cell_kind;

/* A recurrent node's attributes and sizes, checked against its inputs. */
typedef struct recurrent {
  cell_kind cell;
  const char *op;
  int gates;    /* weight blocks per direction: 1, 3 or 4 */
  int nact;     /* activations per direction: 1, 2 or 3 */
  int dirs;     /* 1 or 2 */
  bool reverse; /* the single direction runs from the last step */
  int layout;   /* 0: [seq, batch, ...]; 1: [batch, seq, ...] */
  double clip;  /* < 0: none */
  bool linear_before_reset, input_forget;
  int64_t steps, batch, hidden, input_size;
  activation act[2][3];
} recurrent;

static loom_status read_activations(onnx_node *n, recurrent *r) {
  static const activation_kind defaults[3][3] = {
      [CELL_RNN] = {ACT_TANH},
      [CELL_GRU] = {ACT_SIGMOID, ACT_TANH},
      [CELL_LSTM] = {ACT_SIGMOID, ACT_TANH, ACT_TANH},
  };
  const Onnx__AttributeProto *names = onnx_attr(n, "activations");
  int given = names ? (int)names->n_strings : 0;
  if (!names) {
    for (int d = 0; d < r->dirs; d++)
      for (int k = 0; k < r->nact; k++) r->act[d][k] = (activation){.kind = defaults[r->cell][k]};
    return LOOM_OK;
  }
  /* one set for each direction, or one set for both */
  if (given != r->nact * r->dirs && !(r->dirs == 2 && given == r->nact))
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "%d activations; %s takes %d for each of its %d direction%s (or %d for "
                       "both when bidirectional)",
                       given, r->op, r->nact, r->dirs, r->dirs > 1 ? "s" : "", r->nact);
  double alphas[16], betas[16];
  int nalpha, nbeta;
  loom_status st = onnx_attr_floats(n, "activation_alpha", alphas, 16, &nalpha);
  if (!st) st = onnx_attr_floats(n, "activation_beta", betas, 16, &nbeta);
  if (st) return st;
  if (nalpha < 0) nalpha = 0;
  if (nbeta < 0) nbeta = 0;
  /* the values go, in order, to the activations that take them (as onnxruntime
   * reads them) */
  int next_alpha = 0, next_beta = 0;
  for (int k = 0; k < given; k++) {
    const ProtobufCBinaryData *s = &names->strings[k];
    int kind = 0;
    while (kind < ACTIVATION_KINDS &&
           !same_name_any_case(activation_table[kind].name, s->data, s->len))
      kind++;
    if (kind == ACTIVATION_KINDS)
      return onnx_refuse(n, LOOM_ERR_VALUE,
                         "activation %d is '%.*s'; loom knows Relu, Tanh, Sigmoid, Affine, "
                         "LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign and "
                         "Softplus",
                         k, (int)(s->len < 64 ? s->len : 64), (const char *)s->data);
    activation a = {.kind = (activation_kind)kind,
                    .alpha = activation_table[kind].alpha,
                    .beta = activation_table[kind].beta};
    int params = activation_table[kind].params;
    bool has_alpha = params >= 1 && next_alpha < nalpha,
         has_beta = params >= 2 && next_beta < nbeta;
    if (has_alpha) a.alpha = alphas[next_alpha++];
    if (has_beta) a.beta = betas[next_beta++];
    if (!activation_table[kind].has_default &&
        ((params >= 1 && !has_alpha) || (params >= 2 && !has_beta)))
      return onnx_refuse(n, LOOM_ERR_VALUE,
                         "activation %d (%s) needs its alpha and beta, and activation_alpha and "
                         "activation_beta run out before it",
                         k, activation_table[kind].name);
    r->act[k / r->nact][k % r->nact] = a;
  }
  if (next_alpha < nalpha || next_beta < nbeta)
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "activation_alpha holds %d values and activation_beta %d; the activations "
                       "take %d and %d",
                       nalpha, nbeta, next_alpha, next_beta);
  if (given == r->nact && r->dirs == 2)
    for (int k = 0; k < r->nact; k++) r->act[1][k] = r->act[0][k];
  return LOOM_OK;
}

/* Input i, when given, has the shape want (ndim dims); else a refusal. */
static loom_status check_shape(onnx_node *n, const recurrent *r, int i, const char *name,
                               loom_shape want) {
  if (!onnx_has_in(n, i)) return LOOM_OK;
  loom_shape s = loom_shape_of(n->in[i]->t);
  bool same = s.ndim == want.ndim;
  for (int d = 0; same && d < s.ndim; d++) same = s.dim[d] == want.dim[d];
  if (same) return LOOM_OK;
  char got[160] = "", expected[160] = "";
  for (int d = 0; d < s.ndim; d++)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
             (long long)s.dim[d]);
  for (int d = 0; d < want.ndim; d++)
    snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s%lld",
             d ? ", " : "", (long long)want.dim[d]);
  return onnx_refuse(n, LOOM_ERR_SHAPE, "%s is [%s]; %s with hidden_size %lld expects [%s]", name,
                     got, r->op, (long long)r->hidden, expected);
}

static loom_status read_recurrent(onnx_node *n, cell_kind cell, recurrent *r) {
  static const char *const ops[] = {"RNN", "GRU", "LSTM"};
  static const int gates[] = {1, 3, 4}, nact[] = {1, 2, 3};
  memset(r, 0, sizeof *r);
  r->cell = cell, r->op = ops[cell], r->gates = gates[cell], r->nact = nact[cell];
  char dir[32];
  onnx_attr_string(n, "direction", "forward", dir, sizeof dir);
  if (strcmp(dir, "forward") == 0)
    r->dirs = 1;
  else if (strcmp(dir, "reverse") == 0)
    r->dirs = 1, r->reverse = true;
  else if (strcmp(dir, "bidirectional") == 0)
    r->dirs = 2;
  else
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "direction '%s'; forward, reverse or bidirectional expected", dir);
  int64_t layout = onnx_attr_int(n, "layout", 0);
  if (layout != 0 && layout != 1)
    return onnx_refuse(n, LOOM_ERR_VALUE, "layout %lld; 0 or 1 expected", (long long)layout);
  r->layout = (int)layout;
  r->clip = -1;
  if (onnx_attr(n, "clip")) {
    r->clip = onnx_attr_float(n, "clip", 0);
    if (!(r->clip >= 0))
      return onnx_refuse(n, LOOM_ERR_VALUE, "clip %g; a threshold of 0 or more expected", r->clip);
  }
  int64_t lbr = onnx_attr_int(n, "linear_before_reset", 0),
          forget = onnx_attr_int(n, "input_forget", 0);
  r->linear_before_reset = cell == CELL_GRU && lbr != 0;
  r->input_forget = cell == CELL_LSTM && forget != 0;

  loom_tensor *x = onnx_in(n, 0), *w = onnx_in(n, 1), *rw = onnx_in(n, 2);
  if (!x || !w || !rw) return onnx_refuse(n, LOOM_ERR_VALUE, "X, W and R are required");
  loom_dtype dt = loom_dtype_of(x);
  if (!onnx_is_float(dt))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "X is %s; a float type expected", loom_dtype_name(dt));
  static const char *const names[] = {"X",         "W",         "R", "B", "sequence_lens",
                                      "initial_h", "initial_c", "P"};
  for (int i = 1; i < 8 && i < n->nin; i++)
    if (i != 4 && onnx_has_in(n, i) && loom_dtype_of(n->in[i]->t) != dt)
      return onnx_refuse(n, LOOM_ERR_DTYPE, "%s is %s and X %s; they must agree", names[i],
                         loom_dtype_name(loom_dtype_of(n->in[i]->t)), loom_dtype_name(dt));
  loom_shape xs = loom_shape_of(x), ws = loom_shape_of(w), rs = loom_shape_of(rw);
  if (xs.ndim != 3 || ws.ndim != 3 || rs.ndim != 3)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "X, W and R have ranks %d, %d and %d; 3 expected",
                       xs.ndim, ws.ndim, rs.ndim);
  int seq_axis = r->layout ? 1 : 0;
  r->steps = xs.dim[seq_axis];
  r->batch = xs.dim[1 - seq_axis];
  r->input_size = xs.dim[2];
  if (!onnx_in_dim_fixed(n, 0, seq_axis))
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "the sequence length of X ('%s', dim %d) follows a symbolic dim; loom "
                       "unrolls %s over a length known when it imports the model (fix the dim "
                       "with loom_onnx_opts.dims or --dim NAME=N)",
                       n->in[0]->name, seq_axis, r->op);
  if (r->steps > MAX_STEPS)
    return onnx_refuse(n, LOOM_ERR_VALUE, "a sequence of %lld steps; loom unrolls %s up to %d",
                       (long long)r->steps, r->op, MAX_STEPS);
  if (!onnx_in_dim_fixed(n, 1, 1) || !onnx_in_dim_fixed(n, 2, 2))
    return onnx_refuse(n, LOOM_ERR_SHAPE, "the hidden size of W or R follows a symbolic dim");
  r->hidden = rs.dim[2];
  int64_t attr_hidden = onnx_attr_int(n, "hidden_size", r->hidden);
  if (attr_hidden != r->hidden || r->hidden < 1)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "hidden_size is %lld and R is [%lld, %lld, %lld]; R's last dim is the "
                       "hidden size",
                       (long long)attr_hidden, (long long)rs.dim[0], (long long)rs.dim[1],
                       (long long)rs.dim[2]);
  int64_t gh = r->gates * r->hidden, dirs = r->dirs, b = r->batch, h = r->hidden;
  loom_shape state = r->layout ? LOOM_SHAPE(b, dirs, h) : LOOM_SHAPE(dirs, b, h);
  loom_status st;
  if ((st = check_shape(n, r, 1, "W", LOOM_SHAPE(dirs, gh, r->input_size))) ||
      (st = check_shape(n, r, 2, "R", LOOM_SHAPE(dirs, gh, h))) ||
      (st = check_shape(n, r, 3, "B", LOOM_SHAPE(dirs, 2 * gh))) ||
      (st = check_shape(n, r, 4, "sequence_lens", LOOM_SHAPE(b))) ||
      (st = check_shape(n, r, 5, "initial_h", state)))
    return st;
  if (cell == CELL_LSTM && ((st = check_shape(n, r, 6, "initial_c", state)) ||
                            (st = check_shape(n, r, 7, "P", LOOM_SHAPE(dirs, 3 * h)))))
    return st;
  if (onnx_has_in(n, 4) && !onnx_is_integer(loom_dtype_of(n->in[4]->t)))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "sequence_lens is %s; integers expected",
                       loom_dtype_name(loom_dtype_of(n->in[4]->t)));
  return read_activations(n, r);
}

/* Which steps each batch entry takes, [batch, steps] BOOL: those before its
 * sequence_lens. NULL when every entry takes every step (no sequence_lens,
 * or lengths known at import that are all the sequence's). A length outside
 * [0, steps] is refused at import when known, else by the run (one_hot's
 * check on the lengths). */
static loom_status step_mask(onnx_node *n, const recurrent *r, loom_tensor **mask) {
  *mask = NULL;
  if (!onnx_has_in(n, 4)) return LOOM_OK;
  if (n->in[4]->known && r->batch <= 4096) {
    int64_t lens[4096];
    int count;
    loom_status st = onnx_ints(n, 4, lens, 4096, &count);
    if (st) return st;
    bool all = true;
    for (int i = 0; i < count; i++) {
      if (lens[i] < 0 || lens[i] > r->steps)
        return onnx_refuse(n, LOOM_ERR_VALUE,
                           "sequence_lens[%d] is %lld, outside a sequence of %lld steps", i,
                           (long long)lens[i], (long long)r->steps);
      all &= lens[i] == r->steps;
    }
    if (all) return LOOM_OK;
  }
  loom_tensor *lens = loom_cast(onnx_in(n, 4), LOOM_I64);
  /* the one-hot of each length, summed up to each step: 0 before it, 1 from it on */
  loom_tensor *reached = loom_cumsum(loom_one_hot(lens, r->steps + 1), 1);
  *mask = loom_eq_s(loom_slice(reached, 1, 0, r->steps, 1), 0);
  return LOOM_OK;
}

/* Direction d's slice of a [dirs, ...] tensor, without the dirs dim; NULL stays NULL. */
static loom_tensor *direction_of(loom_tensor *t, int d) {
  return t ? loom_squeeze(loom_slice(t, 0, d, d + 1, 1), 0) : NULL;
}

static loom_tensor *columns(loom_tensor *t, int64_t from, int64_t to) {
  return t ? loom_slice(t, loom_ndim(t) - 1, from, to, 1) : NULL;
}

static loom_tensor *add_maybe(loom_tensor *a, loom_tensor *b) { return b ? loom_add(a, b) : a; }

/* One direction's weights. */
typedef struct direction_weights {
  loom_tensor *w, *r;   /* [gates * hidden, input], [gates * hidden, hidden] */
  loom_tensor *wb, *rb; /* [gates * hidden] each, or NULL */
  loom_tensor *p;       /* LSTM's peepholes [3 * hidden], or NULL */
} direction_weights;

/* The cell's next hidden state (and LSTM's cell state in *c), from xw (the
 * step's X W^T + Wb, [batch, gates * hidden]) and the previous states. */
static loom_tensor *cell_step(const recurrent *r, const activation *act,
                              const direction_weights *dw, loom_tensor *xw, loom_tensor *h,
                              loom_tensor **c) {
  int64_t hs = r->hidden;
  double clip = r->clip;
  switch (r->cell) {
  case CELL_RNN: return activate(&act[0], loom_add(xw, loom_linear_f(h, dw->r, dw->rb)), clip);
  case CELL_GRU: {
    loom_tensor *zr = activate(
        &act[0],
        loom_add(columns(xw, 0, 2 * hs),
                 loom_linear_f(h, loom_slice(dw->r, 0, 0, 2 * hs, 1), columns(dw->rb, 0, 2 * hs))),
        clip);
    loom_tensor *z = columns(zr, 0, hs), *reset = columns(zr, hs, 2 * hs);
    loom_tensor *rh = loom_slice(dw->r, 0, 2 * hs, 3 * hs, 1),
                *rbh = columns(dw->rb, 2 * hs, 3 * hs);
    loom_tensor *recurrent_part = r->linear_before_reset
                                      ? loom_mul(reset, loom_linear_f(h, rh, rbh))
                                      : loom_linear_f(loom_mul(reset, h), rh, rbh);
    loom_tensor *candidate =
        activate(&act[1], loom_add(columns(xw, 2 * hs, 3 * hs), recurrent_part), clip);
    /* (1 - z) candidate + z h */
    return loom_add(loom_mul(loom_rsub_s(1, z), candidate), loom_mul(z, h));
  }
  case CELL_LSTM: {
    loom_tensor *g = add_maybe(loom_add(xw, loom_linear_f(h, dw->r, NULL)), dw->rb);
    loom_tensor *pi = columns(dw->p, 0, hs), *po = columns(dw->p, hs, 2 * hs),
                *pf = columns(dw->p, 2 * hs, 3 * hs);
    loom_tensor *prev = *c;
    loom_tensor *i =
        activate(&act[0], add_maybe(columns(g, 0, hs), pi ? loom_mul(pi, prev) : NULL), clip);
    loom_tensor *f =
        r->input_forget
            ? loom_rsub_s(1, i)
            : activate(&act[0],
                       add_maybe(columns(g, 2 * hs, 3 * hs), pf ? loom_mul(pf, prev) : NULL), clip);
    loom_tensor *cell = activate(&act[1], columns(g, 3 * hs, 4 * hs), clip);
    loom_tensor *next = loom_add(loom_mul(f, prev), loom_mul(i, cell));
    loom_tensor *o =
        activate(&act[0], add_maybe(columns(g, hs, 2 * hs), po ? loom_mul(po, next) : NULL), clip);
    *c = next;
    return loom_mul(o, activate(&act[2], next, clip));
  }
  }
  return NULL;
}

/* Direction d over the sequence x ([steps, batch, input]): its outputs
 * stacked [steps, batch, hidden] and its last states. A batch entry's state
 * stops at its length (mask) and its outputs past it are 0. */
static void run_direction(const recurrent *r, int d, loom_tensor *x, const direction_weights *dw,
                          loom_tensor *h, loom_tensor *c, loom_tensor *mask, loom_tensor **y,
                          loom_tensor **h_last, loom_tensor **c_last) {
  bool backwards = r->reverse || d == 1;
  /* X W^T for every step at once; LSTM and RNN add both biases here, GRU its W biases */
  loom_tensor *wb = r->cell == CELL_GRU ? dw->wb : dw->wb ? loom_add(dw->wb, dw->rb) : NULL;
  loom_tensor *xw = loom_linear_f(x, dw->w, wb);
  loom_tensor *ys[MAX_STEPS];
  direction_weights step_weights = *dw;
  if (r->cell == CELL_RNN) step_weights.rb = NULL; /* in xw already */
  if (r->cell == CELL_LSTM) step_weights.rb = NULL;
  for (int64_t k = 0; k < r->steps; k++) {
    int64_t t = backwards ? r->steps - 1 - k : k;
    loom_tensor *xt = loom_squeeze(loom_slice(xw, 0, t, t + 1, 1), 0);
    loom_tensor *c_next = c;
    loom_tensor *h_next = cell_step(r, r->act[d], &step_weights, xt, h, &c_next);
    if (mask) {
      loom_tensor *m = loom_slice(mask, 1, t, t + 1, 1); /* [batch, 1] */
      ys[t] = loom_where_s(m, h_next, 0);
      h = loom_where(m, h_next, h);
      if (c) c = loom_where(m, c_next, c);
    } else {
      ys[t] = h_next;
      h = h_next, c = c_next;
    }
  }
  *y = loom_stack(ys, (int)r->steps, 0);
  *h_last = h;
  *c_last = c;
}

static loom_status build_recurrent(onnx_node *n, cell_kind cell) {
  recurrent r;
  loom_status st = read_recurrent(n, cell, &r);
  loom_tensor *mask = NULL;
  if (!st) st = step_mask(n, &r, &mask);
  if (st) return st;
  loom_tensor *x = onnx_in(n, 0);
  if (r.layout) x = loom_transpose(x, 0, 1);
  loom_tensor *h0 = onnx_in(n, 5), *c0 = cell == CELL_LSTM ? onnx_in(n, 6) : NULL;
  if (r.layout && h0) h0 = loom_transpose(h0, 0, 1);
  if (r.layout && c0) c0 = loom_transpose(c0, 0, 1);
  loom_tensor *b = onnx_in(n, 3), *p = cell == CELL_LSTM ? onnx_in(n, 7) : NULL;
  int64_t gh = r.gates * r.hidden;
  /* zero states shaped as X's first step, so a symbolic batch dim is followed */
  loom_tensor *zero_state = NULL;
  if (!h0 || (cell == CELL_LSTM && !c0)) {
    loom_tensor *first = loom_squeeze(loom_slice(x, 0, 0, 1, 1), 0);
    loom_tensor *zero_col =
        loom_sum(loom_mul_s(loom_cast(loom_eq(first, first), loom_dtype_of(x)), 0),
                 (const int[]){1}, 1, true);
    zero_state = loom_expand(zero_col, LOOM_SHAPE(-1, r.hidden));
  }
  loom_tensor *ys[2], *hs[2], *cs[2];
  for (int d = 0; d < r.dirs; d++) {
    direction_weights dw = {.w = direction_of(onnx_in(n, 1), d),
                            .r = direction_of(onnx_in(n, 2), d)};
    loom_tensor *bd = direction_of(b, d);
    dw.wb = columns(bd, 0, gh), dw.rb = columns(bd, gh, 2 * gh);
    dw.p = direction_of(p, d);
    loom_tensor *hd = h0 ? direction_of(h0, d) : zero_state;
    loom_tensor *cd = cell == CELL_LSTM ? (c0 ? direction_of(c0, d) : zero_state) : NULL;
    run_direction(&r, d, x, &dw, hd, cd, mask, &ys[d], &hs[d], &cs[d]);
  }
  loom_tensor *y = loom_stack(ys, r.dirs, 1); /* [steps, dirs, batch, hidden] */
  loom_tensor *y_h = loom_stack(hs, r.dirs, 0);
  loom_tensor *y_c = cell == CELL_LSTM ? loom_stack(cs, r.dirs, 0) : NULL;
  if (r.layout) {
    const int perm[] = {2, 0, 1, 3};
    y = loom_permute(y, perm, 4);
    y_h = loom_transpose(y_h, 0, 1);
    if (y_c) y_c = loom_transpose(y_c, 0, 1);
  }
  onnx_out(n, 0, y);
  onnx_out(n, 1, y_h);
  if (y_c) onnx_out(n, 2, y_c);
  return LOOM_OK;
}

static loom_status op_rnn(onnx_node *n) { return build_recurrent(n, CELL_RNN); }
static loom_status op_gru(onnx_node *n) { return build_recurrent(n, CELL_GRU); }
static loom_status op_lstm(onnx_node *n) { return build_recurrent(n, CELL_LSTM); }

/* ------------------------------------------------------------ Det */

/* The determinant of [..., M, M] by Gaussian elimination with partial
 * pivoting, as LAPACK's getrf that numpy's det calls: at each column the row
 * of largest magnitude is swapped in exactly (selected by a comparison with
 * its argmax, never by arithmetic), each swap negates the product of the
 * pivots. A zero pivot (a singular matrix) divides by 1 instead, so the
 * product is an exact 0 rather than NaN. */
static loom_status op_det(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int rank = s.ndim;
  if (rank < 2) return onnx_refuse(n, LOOM_ERR_SHAPE, "X has rank %d; [..., M, M] expected", rank);
  int rows = rank - 2, cols = rank - 1;
  int64_t m = s.dim[cols];
  if (s.dim[rows] != m)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "X's matrices are %lld x %lld; square ones expected",
                       (long long)s.dim[rows], (long long)m);
  if (!onnx_in_dim_fixed(n, 0, rows) || !onnx_in_dim_fixed(n, 0, cols))
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "X's matrix size follows a symbolic dim; loom unrolls Det over a size "
                       "known when it imports the model");
  if (m > MAX_DET_SIZE)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%lld x %lld matrices; loom computes Det up to %d x %d",
                       (long long)m, (long long)m, MAX_DET_SIZE, MAX_DET_SIZE);
  loom_dtype dt = loom_dtype_of(x);
  if (!onnx_is_float(dt))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "X is %s; a float type expected", loom_dtype_name(dt));
  const int both[] = {rows, cols};
  if (m == 0) { /* the empty product */
    onnx_out(n, 0, loom_add_s(loom_sum(x, both, 2, false), 1));
    return LOOM_OK;
  }
  loom_tensor *a = loom_cast(x, dt == LOOM_F64 ? LOOM_F64 : LOOM_F32), *det = NULL;
  for (int64_t k = m; k >= 1; k--) { /* a is [..., k, k] */
    loom_shape is = {.ndim = rank};
    for (int d = 0; d < rank; d++) is.dim[d] = d == rows ? k : 1;
    loom_tensor *iota = loom_reshape(loom_arange(0, (double)k, 1, LOOM_I64, onnx_device(n)), is);
    loom_tensor *first_col = loom_slice(a, cols, 0, 1, 1);
    loom_tensor *pivot_at = loom_argmax(loom_abs(first_col), rows, true); /* [..., 1, 1] */
    loom_tensor *is_pivot = loom_eq(iota, pivot_at);                      /* [..., k, 1] */
    loom_tensor *pivot_row = loom_sum(loom_where_s(is_pivot, a, 0), (const int[]){rows}, 1, true);
    loom_tensor *pivot = loom_slice(pivot_row, cols, 0, 1, 1);
    det = det ? loom_mul(det, pivot) : pivot;
    det = loom_where(loom_ne_s(pivot_at, 0), loom_neg(det), det);
    if (k == 1) break;
    /* rows 1..k-1 after the swap: the old first row where the pivot was */
    loom_tensor *row0 = loom_slice(a, rows, 0, 1, 1);
    loom_tensor *rest =
        loom_where(loom_slice(is_pivot, rows, 1, k, 1), row0, loom_slice(a, rows, 1, k, 1));
    loom_tensor *divisor = loom_where_s(loom_ne_s(pivot, 0), pivot, 1);
    loom_tensor *factors = loom_div(loom_slice(rest, cols, 0, 1, 1), divisor);
    a = loom_sub(loom_slice(rest, cols, 1, k, 1),
                 loom_mul(factors, loom_slice(pivot_row, cols, 1, k, 1)));
  }
  det = loom_squeeze(loom_squeeze(det, cols), rows);
  onnx_out(n, 0, loom_cast(det, dt));
  return LOOM_OK;
}

const onnx_op onnx_ops_rnn[] = {
    ONNX_OP(RNN, op_rnn),
    ONNX_OP(GRU, op_gru),
    ONNX_OP(LSTM, op_lstm),
    ONNX_OP(Det, op_det),
};
const int onnx_ops_rnn_count = sizeof onnx_ops_rnn / sizeof onnx_ops_rnn[0];
