/* Optimizers: SGD, Adam and AdamW against a plain-C reimplementation of
 * torch.optim's update formulas (torch 2.x, the single-tensor for-loop form),
 * stepping a quadratic and a small tanh MLP in F64 (and F32 more loosely);
 * laziness (a step records, the next realization runs forward, backward and
 * updates as one program); the graph cache hitting on every later step, also
 * across loom_optim_set_lr; option validation; parameters without gradients;
 * buffers; scopes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "test_device.h"

#define MAXP 4   /* parameters per problem */
#define MAXEL 16 /* elements per parameter */
#define NSTEPS 8
#define LR_CHANGE_STEP 5 /* loom_optim_set_lr(lr / 2) before this step */

/* ================================================================ the reference */

typedef enum kind { SGD, ADAM, ADAMW } kind;

typedef struct optcase {
  const char *name;
  kind kind;
  loom_sgd_opts sgd;
  loom_adam_opts adam;
} optcase;

/* The options rule (include/loom.h), for the reference: a zero field takes
 * torch's default, LOOM_ZERO (-0.0) is a real zero. loom gets the cases'
 * options as written. */
static double resolve(double v, double def) { return v != 0 ? v : signbit(v) ? 0.0 : def; }

static optcase resolved(const optcase *c) {
  optcase r = *c;
  r.sgd.lr = resolve(c->sgd.lr, 1e-3);
  r.sgd.momentum = resolve(c->sgd.momentum, 0);
  r.sgd.dampening = resolve(c->sgd.dampening, 0);
  r.sgd.weight_decay = resolve(c->sgd.weight_decay, 0);
  r.adam.lr = resolve(c->adam.lr, 1e-3);
  r.adam.beta1 = resolve(c->adam.beta1, 0.9);
  r.adam.beta2 = resolve(c->adam.beta2, 0.999);
  r.adam.eps = resolve(c->adam.eps, 1e-8);
  r.adam.weight_decay = resolve(c->adam.weight_decay, c->kind == ADAMW ? 1e-2 : 0.0);
  return r;
}

typedef struct ref_state {
  double buf[MAXEL], m[MAXEL], v[MAXEL], vmax[MAXEL];
  bool has_buf;
  int64_t t; /* torch's state["step"] */
} ref_state;

/* torch.optim.SGD, _single_tensor_sgd. */
static void ref_sgd(const loom_sgd_opts *o, double lr, ref_state *s, double *p, const double *grad,
                    int n) {
  for (int i = 0; i < n; i++) {
    double g = o->maximize ? -grad[i] : grad[i];
    if (o->weight_decay != 0) g = g + o->weight_decay * p[i];
    if (o->momentum != 0) {
      if (!s->has_buf)
        s->buf[i] = g; /* torch.clone(grad).detach() */
      else
        s->buf[i] = s->buf[i] * o->momentum + (1 - o->dampening) * g;
      g = o->nesterov ? g + o->momentum * s->buf[i] : s->buf[i];
    }
    p[i] = p[i] + -lr * g;
  }
  s->has_buf = true;
}

/* torch.optim.Adam / AdamW, _single_tensor_adam. */
static void ref_adam(const loom_adam_opts *o, bool decoupled, double lr, ref_state *s, double *p,
                     const double *grad, int n) {
  s->t++;
  double bc1 = 1 - pow(o->beta1, (double)s->t), bc2 = 1 - pow(o->beta2, (double)s->t);
  double step_size = lr / bc1, bc2_sqrt = sqrt(bc2);
  for (int i = 0; i < n; i++) {
    double g = o->maximize ? -grad[i] : grad[i];
    if (decoupled)
      p[i] = p[i] * (1 - lr * o->weight_decay);
    else if (o->weight_decay != 0)
      g = g + o->weight_decay * p[i];
    s->m[i] = o->beta1 * s->m[i] + (1 - o->beta1) * g;
    s->v[i] = s->v[i] * o->beta2 + (1 - o->beta2) * g * g;
    double second = s->v[i];
    if (o->amsgrad) second = s->vmax[i] = fmax(s->vmax[i], s->v[i]);
    double denom = sqrt(second) / bc2_sqrt + o->eps;
    p[i] = p[i] + -step_size * s->m[i] / denom;
  }
}

static void ref_step(const optcase *c, double lr, ref_state *s, double *p, const double *grad,
                     int n) {
  if (c->kind == SGD)
    ref_sgd(&c->sgd, lr, s, p, grad, n);
  else
    ref_adam(&c->adam, c->kind == ADAMW, lr, s, p, grad, n);
}

static loom_optim *make_optim(const optcase *c, loom_params *ps) {
  switch (c->kind) {
  case SGD: return loom_sgd(ps, c->sgd);
  case ADAM: return loom_adam(ps, c->adam);
  default: return loom_adamw(ps, c->adam);
  }
}

/* ================================================================ problems */

/* A handful of temporaries freed together (no scope: a scope's end would
 * realize what it keeps, and these tests control realization). */
typedef struct temps {
  loom_tensor *t[32];
  int n;
} temps;

static loom_tensor *T(temps *a, loom_tensor *t) {
  a->t[a->n++] = t;
  return t;
}

static loom_tensor *finish(temps *a, loom_tensor *result) {
  loom_tensor *kept = loom_retain(result);
  for (int i = 0; i < a->n; i++) loom_free(a->t[i]);
  return kept;
}

static loom_tensor *data(temps *a, const double *v, loom_shape shape, loom_dtype dt) {
  float f[64];
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.dim[d];
  for (int64_t i = 0; i < n && dt == LOOM_F32; i++) f[i] = (float)v[i];
  return T(a, loom_from_data(dt == LOOM_F32 ? (const void *)f : v, shape, dt, test_device()));
}

typedef struct problem {
  const char *name;
  int nparams;
  const char *names[MAXP];
  loom_shape shapes[MAXP];
  double init[MAXP][MAXEL];
  /* The loss of the parameters, recorded with loom (a new reference). */
  loom_tensor *(*loss)(loom_tensor *const *params, loom_dtype dt);
  /* Its value and gradient, in plain C. */
  double (*grad)(double p[MAXP][MAXEL], double g[MAXP][MAXEL]);
} problem;

static int numel_of(loom_shape s) {
  int n = 1;
  for (int d = 0; d < s.ndim; d++) n *= (int)s.dim[d];
  return n;
}

/* (a) sum((p - c)^2 * a) over a [2,3] parameter. */
static const double quad_c[6] = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};
static const double quad_a[6] = {1.0, 0.5, 2.0, 1.5, 0.25, 1.0};

static loom_tensor *quad_loss(loom_tensor *const *p, loom_dtype dt) {
  temps a = {{0}, 0};
  loom_tensor *c = data(&a, quad_c, LOOM_SHAPE(2, 3), dt);
  loom_tensor *w = data(&a, quad_a, LOOM_SHAPE(2, 3), dt);
  loom_tensor *sq = T(&a, loom_square(T(&a, loom_sub(p[0], c))));
  return finish(&a, T(&a, loom_sum_all(T(&a, loom_mul(sq, w)))));
}

static double quad_grad(double p[MAXP][MAXEL], double g[MAXP][MAXEL]) {
  double loss = 0;
  for (int i = 0; i < 6; i++) {
    double d = p[0][i] - quad_c[i];
    loss += d * d * quad_a[i];
    g[0][i] = 2 * d * quad_a[i];
  }
  return loss;
}

static const problem quadratic = {
    "quadratic", 1,        {"p"}, {LOOM_SHAPE(2, 3)}, {{1.0, 0.5, -0.5, 2.0, 0.0, -1.0}},
    quad_loss,   quad_grad};

/* (b) mean((tanh(x @ w1 + b1) @ w2 + b2 - y)^2) with x [6,3], y [6,2]. */
enum { NB = 6, NI = 3, NH = 4, NO = 2 };
static const double mlp_x[NB * NI] = {0.1,  -0.4, 0.9, 0.5, 0.3,  -0.8, -0.6, 0.2, 0.7,
                                      -0.3, 0.8,  0.1, 0.4, -0.9, -0.2, 0.6,  0.0, 0.5};
static const double mlp_y[NB * NO] = {0.3, -0.2, 0.8,  0.1, -0.5, 0.4,
                                      0.2, 0.9,  -0.7, 0.0, 0.6,  -0.3};

static loom_tensor *mlp_loss(loom_tensor *const *p, loom_dtype dt) {
  temps a = {{0}, 0};
  loom_tensor *x = data(&a, mlp_x, LOOM_SHAPE(NB, NI), dt);
  loom_tensor *y = data(&a, mlp_y, LOOM_SHAPE(NB, NO), dt);
  loom_tensor *h = T(&a, loom_tanh(T(&a, loom_add(T(&a, loom_matmul(x, p[0])), p[1]))));
  loom_tensor *out = T(&a, loom_add(T(&a, loom_matmul(h, p[2])), p[3]));
  return finish(&a, T(&a, loom_mean_all(T(&a, loom_square(T(&a, loom_sub(out, y)))))));
}

static double mlp_grad(double p[MAXP][MAXEL], double g[MAXP][MAXEL]) {
  const double *w1 = p[0], *b1 = p[1], *w2 = p[2], *b2 = p[3];
  double h[NB][NH], dout[NB][NO], loss = 0;
  for (int i = 0; i < NB; i++)
    for (int j = 0; j < NH; j++) {
      double z = b1[j];
      for (int k = 0; k < NI; k++) z += mlp_x[i * NI + k] * w1[k * NH + j];
      h[i][j] = tanh(z);
    }
  for (int i = 0; i < NB; i++)
    for (int o = 0; o < NO; o++) {
      double out = b2[o];
      for (int j = 0; j < NH; j++) out += h[i][j] * w2[j * NO + o];
      double d = out - mlp_y[i * NO + o];
      loss += d * d / (NB * NO);
      dout[i][o] = 2 * d / (NB * NO);
    }
  memset(g, 0, sizeof(double) * MAXP * MAXEL);
  for (int i = 0; i < NB; i++)
    for (int j = 0; j < NH; j++) {
      double dh = 0;
      for (int o = 0; o < NO; o++) {
        g[2][j * NO + o] += h[i][j] * dout[i][o];
        dh += dout[i][o] * w2[j * NO + o];
      }
      double dz = dh * (1 - h[i][j] * h[i][j]);
      g[1][j] += dz;
      for (int k = 0; k < NI; k++) g[0][k * NH + j] += mlp_x[i * NI + k] * dz;
    }
  for (int i = 0; i < NB; i++)
    for (int o = 0; o < NO; o++) g[3][o] += dout[i][o];
  return loss;
}

static const problem mlp = {
    "mlp",
    4,
    {"w1", "b1", "w2", "b2"},
    {LOOM_SHAPE(NI, NH), LOOM_SHAPE(NH), LOOM_SHAPE(NH, NO), LOOM_SHAPE(NO)},
    {{0.3, -0.2, 0.5, 0.1, -0.4, 0.6, 0.2, -0.3, 0.7, -0.1, 0.4, 0.2},
     {0.05, -0.1, 0.0, 0.1},
     {0.4, -0.6, 0.3, 0.5, -0.2, 0.1, 0.6, -0.4},
     {0.1, -0.05}},
    mlp_loss,
    mlp_grad};

/* ================================================================ trajectories */

static loom_tensor *new_param(const problem *pb, int i, loom_dtype dt) {
  temps a = {{0}, 0};
  return finish(&a, data(&a, pb->init[i], pb->shapes[i], dt));
}

static double max_rel_error(const double *got, const double *want, int n) {
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
    if (!(e <= worst)) worst = e; /* NaN counts as the worst */
  }
  return worst;
}

static void read_param(loom_tensor *t, loom_dtype dt, double *out, int n) {
  float f[MAXEL];
  if (dt == LOOM_F64) {
    CHECK_OK(loom_copy_to_host(t, out, sizeof(double) * (size_t)n));
    return;
  }
  CHECK_OK(loom_copy_to_host(t, f, sizeof(float) * (size_t)n));
  for (int i = 0; i < n; i++) out[i] = f[i];
}

/* One step's laziness: the step realizes nothing and leaves the updated
 * parameters unrealized; the loss's realization then runs everything. */
static void step_lazily(loom_optim *o, loom_tensor *loss, loom_tensor *const *params, int n) {
  uint64_t before = loom_get_stats().realizations;
  CHECK_OK(loom_optim_step(o));
  CHECK_EQ_INT(loom_get_stats().realizations, before);
  for (int i = 0; i < n; i++) CHECK(!loom_is_realized(params[i]));
  CHECK(isfinite(loom_item(loss)));
  CHECK_EQ_INT(loom_get_stats().realizations, before + 1);
  for (int i = 0; i < n; i++) CHECK(loom_is_realized(params[i]));
}

typedef struct trajectory_stats {
  uint64_t kernels_per_step; /* launched by the last step's realization */
} trajectory_stats;

static trajectory_stats run_trajectory(const problem *pb, const optcase *oc, loom_dtype dt,
                                       double tol) {
  optcase rc = resolved(oc);
  double want[MAXP][MAXEL], grad[MAXP][MAXEL], got[MAXEL];
  ref_state rs[MAXP];
  memset(rs, 0, sizeof rs);
  memcpy(want, pb->init, sizeof want);
  loom_params *ps = loom_params_new();
  loom_tensor *params[MAXP];
  for (int i = 0; i < pb->nparams; i++) {
    params[i] = new_param(pb, i, dt);
    CHECK_OK(loom_params_add(ps, pb->names[i], params[i]));
  }
  loom_optim *o = make_optim(oc, ps); /* as written: zero fields are torch's defaults */
  CHECK(o != NULL);
  trajectory_stats ts = {0};
  loom_stats first = {0};
  double lr = rc.kind == SGD ? rc.sgd.lr : rc.adam.lr;
  for (int step = 1; o && step <= NSTEPS; step++) {
    if (step == LR_CHANGE_STEP) {
      lr /= 2;
      CHECK_OK(loom_optim_set_lr(o, lr));
      CHECK(loom_optim_lr(o) == lr);
    }
    loom_optim_zero_grad(o);
    loom_tensor *loss = pb->loss(params, dt);
    CHECK_OK(loom_backward(loss));
    loom_stats before = loom_get_stats();
    step_lazily(o, loss, params, pb->nparams);
    loom_stats after = loom_get_stats();
    ts.kernels_per_step = after.kernels_launched - before.kernels_launched;
    double want_loss = pb->grad(want, grad);
    CHECK_MSG(fabs(loom_item(loss) - want_loss) <= tol * fmax(1, fabs(want_loss)),
              "%s %s step %d: loss %.17g, expected %.17g", pb->name, oc->name, step,
              loom_item(loss), want_loss);
    for (int i = 0; i < pb->nparams; i++) {
      int n = numel_of(pb->shapes[i]);
      ref_step(&rc, lr, &rs[i], want[i], grad[i], n);
      read_param(params[i], dt, got, n);
      double err = max_rel_error(got, want[i], n);
      CHECK_MSG(err <= tol, "%s %s %s step %d: relative error %.3g (got %.17g, expected %.17g)",
                pb->name, oc->name, pb->names[i], step, err, got[0], want[i][0]);
    }
    /* Every step records the same graph as the first (the state starts as
     * zeros in memory; lr and bias corrections are data): nothing compiles
     * after it, set_lr included. */
    if (step == 1) first = after;
    CHECK_MSG(after.graphs_compiled == first.graphs_compiled &&
                  after.kernels_compiled == first.kernels_compiled,
              "%s %s step %d compiled %llu graphs and %llu kernels", pb->name, oc->name, step,
              (unsigned long long)(after.graphs_compiled - first.graphs_compiled),
              (unsigned long long)(after.kernels_compiled - first.kernels_compiled));
    if (step > 1) CHECK_EQ_INT(after.graph_cache_hits, before.graph_cache_hits + 1);
    loom_free(loss);
  }
  loom_optim_free(o);
  for (int i = 0; i < pb->nparams; i++) loom_free(params[i]);
  loom_params_free(ps);
  return ts;
}

#define SGD_CASE(n, ...)                                                                           \
  {                                                                                                \
    .name = n, .kind = SGD, .sgd = { __VA_ARGS__ }                                                 \
  }
#define ADAM_CASE(n, k, ...)                                                                       \
  {                                                                                                \
    .name = n, .kind = k, .adam = { __VA_ARGS__ }                                                  \
  }

static const optcase cases[] = {
    SGD_CASE("sgd", .lr = 0.05),
    SGD_CASE("sgd defaults", .lr = 0),
    SGD_CASE("sgd lr zero", .lr = LOOM_ZERO, .momentum = 0.9),
    SGD_CASE("sgd zeros written", .lr = 0.05, .momentum = LOOM_ZERO, .weight_decay = LOOM_ZERO),
    SGD_CASE("sgd momentum", .lr = 0.05, .momentum = 0.9),
    SGD_CASE("sgd dampening", .lr = 0.05, .momentum = 0.9, .dampening = 0.3),
    SGD_CASE("sgd nesterov", .lr = 0.05, .momentum = 0.8, .nesterov = true),
    SGD_CASE("sgd weight decay", .lr = 0.05, .weight_decay = 0.1),
    SGD_CASE("sgd momentum weight decay", .lr = 0.05, .momentum = 0.5, .weight_decay = 0.1),
    SGD_CASE("sgd maximize", .lr = 0.02, .momentum = 0.9, .maximize = true),
    ADAM_CASE("adam", ADAM, .lr = 0.05),
    ADAM_CASE("adam defaults", ADAM, .lr = 0),
    ADAM_CASE("adam beta1 zero", ADAM, .lr = 0.05, .beta1 = LOOM_ZERO), /* GANs' (0, 0.99) */
    ADAM_CASE("adam beta2 zero", ADAM, .lr = 0.05, .beta1 = 0.5, .beta2 = LOOM_ZERO, .eps = 1e-3),
    ADAM_CASE("adam eps zero", ADAM, .lr = 0.05, .eps = LOOM_ZERO),
    ADAM_CASE("adam lr zero", ADAM, .lr = LOOM_ZERO),
    ADAM_CASE("adam betas eps", ADAM, .lr = 0.05, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3),
    ADAM_CASE("adam weight decay", ADAM, .lr = 0.05, .weight_decay = 0.1),
    ADAM_CASE("adam amsgrad", ADAM, .lr = 0.05, .beta2 = 0.5, .amsgrad = true),
    ADAM_CASE("adam maximize", ADAM, .lr = 0.05, .maximize = true),
    ADAM_CASE("adamw", ADAMW, .lr = 0.05),
    ADAM_CASE("adamw zero decay", ADAMW, .lr = 0.05, .weight_decay = LOOM_ZERO),
    ADAM_CASE("adamw defaults", ADAMW, .lr = 0),
    ADAM_CASE("adamw amsgrad maximize", ADAMW, .lr = 0.05, .beta2 = 0.5, .weight_decay = 0.1,
              .amsgrad = true, .maximize = true),
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static void test_trajectories_f64(void) {
  for (int c = 0; c < NCASES; c++) {
    run_trajectory(&quadratic, &cases[c], LOOM_F64, 1e-12);
    trajectory_stats ts = run_trajectory(&mlp, &cases[c], LOOM_F64, 1e-12);
    printf("  mlp %-24s %llu kernels per step\n", cases[c].name,
           (unsigned long long)ts.kernels_per_step);
  }
}

/* F32 parameters read the step's F64 scalars through a cast. */
static void test_trajectories_f32(void) {
  static const char *picks[] = {"sgd momentum", "sgd nesterov", "adam", "adam amsgrad",
                                "adamw amsgrad maximize"};
  for (int i = 0; i < (int)(sizeof picks / sizeof picks[0]); i++)
    for (int c = 0; c < NCASES; c++) {
      if (strcmp(cases[c].name, picks[i])) continue;
      run_trajectory(&quadratic, &cases[c], LOOM_F32, 1e-5);
      run_trajectory(&mlp, &cases[c], LOOM_F32, 1e-5);
    }
}

/* ================================================================ compound literals */

/* Issue 41: (loom_adam_opts){.lr = 1e-3} on an MLP ended in a NaN loss when
 * a field left out was a zero (beta1 = beta2 = eps = 0). A compound literal
 * naming some fields is torch's defaults for the rest, LOOM_ZERO a real
 * zero: the mlp problem's parameters after 3 steps in F64 against
 * torch 1.13 (torch.optim.Adam(params, lr=1e-3) and so on; SGD's lr given
 * as 1e-3, torch 2's default), and bit for bit against the LOOM_*_DEFAULTS
 * spelling. */
static const double torch_adam[26] = {
    0.3029999819994959,   -0.19699944990029578,  0.49700022256928267,   0.10299995945516328,
    -0.39700048327463705, 0.60300045697010274,   0.19700067000521959,   -0.29700046145996223,
    0.69700069659232111,  -0.097001946418082352, 0.4029993631224027,    0.19700078750899475,
    0.047000930859112361, -0.097000713797507132, 0.0029993470774772294, 0.097001342827679402,
    0.39700092494201655,  -0.59700119706507948,  0.30299945859954824,   0.49700144435581239,
    -0.19700098732478238, 0.10300013926472169,   0.59700130232179593,   -0.39700152821260637,
    0.097002787593456069, -0.047000747545854787};
static const double torch_adam_beta1_0[26] = {
    0.30299972041560375,  -0.19699113635558066,  0.49700343728849261,   0.10299936416798636,
    -0.39700739856343253, 0.6030073204012012,    0.19701016818725745,   -0.29700707337821508,
    0.69701056844471165,  -0.097028098890235684, 0.40299032721111472,   0.19701190023957149,
    0.047013979707748191, -0.097010830411528082, 0.0029901189918588832, 0.097019823411584813,
    0.39701389981315116,  -0.5970177903864089,   0.3029917572694979,    0.49702124011166882,
    -0.19701482350111332, 0.10300219806084343,   0.59701926918197268,   -0.39702240997932692,
    0.097039013039690161, -0.047011322585735926};
static const double torch_adamw[26] = {
    0.30299095253567288,  -0.19699348305374087,  0.49698525301883567,   0.10299692913875139,
    -0.39698851641384825, 0.60298243059044743,   0.19699470248012618,   -0.296991493930581,
    0.69697972874353475,  -0.096998980373961319, 0.40298733089336053,   0.19699482000267868,
    0.046999462695563994, -0.096997745214036896, 0.0029993145317301507, 0.096998375358135963,
    0.3969889572432308,   -0.59698323099602491,  0.30299042685018834,   0.49698647946818392,
    -0.19699501548452591, 0.10299710602223208,   0.59698333480616461,   -0.39698956216415066,
    0.09699982181853363,  -0.046999278635245924};
static const double torch_sgd_momentum[26] = {
    0.30030147869794371,  -0.19987986109787184,  0.49986890524780347,    0.10044811185689381,
    -0.39949161001675315, 0.60014500695631456,   0.19973922621971399,    -0.29927632659568115,
    0.69922181215764068,  -0.099793038038666709, 0.40029803690098148,    0.19901538684667755,
    0.04867781013443314,  -0.099086354672397292, 0.00032671446576157555, 0.098927473908899791,
    0.39909018440256538,  -0.59912933056037765,  0.30060373550026709,    0.49951696192539646,
    -0.19986175446773655, 0.10028522219600164,   0.59950022737567799,    -0.39946691256340566,
    0.099539564806818248, -0.047637807445185081};

static void train_mlp_3_steps(const optcase *c, double *out) {
  loom_params *ps = loom_params_new();
  loom_tensor *params[MAXP];
  for (int i = 0; i < mlp.nparams; i++) {
    params[i] = new_param(&mlp, i, LOOM_F64);
    CHECK_OK(loom_params_add(ps, mlp.names[i], params[i]));
  }
  loom_optim *o = make_optim(c, ps);
  CHECK_MSG(o != NULL, "%s: %s", c->name, loom_last_error() ? loom_last_error() : "");
  for (int step = 0; o && step < 3; step++) {
    loom_optim_zero_grad(o);
    loom_tensor *loss = mlp.loss(params, LOOM_F64);
    CHECK_OK(loom_backward(loss));
    CHECK_OK(loom_optim_step(o));
    CHECK_MSG(isfinite(loom_item(loss)), "%s: loss %g at step %d", c->name, loom_item(loss), step);
    loom_free(loss);
  }
  for (int i = 0, at = 0; i < mlp.nparams; i++) {
    int n = numel_of(mlp.shapes[i]);
    read_param(params[i], LOOM_F64, out + at, n);
    at += n;
    loom_free(params[i]);
  }
  loom_optim_free(o);
  loom_params_free(ps);
}

static void test_compound_literals(void) {
  enum { N = 26 }; /* the mlp problem's parameters, in order */
  const struct {
    optcase literal, spelled; /* spelled: the same options from a macro (or name empty) */
    const double *torch;
  } rows[] = {
      {{"adam lr", ADAM, .adam = {.lr = 1e-3}},
       {"LOOM_ADAM_DEFAULTS", ADAM, .adam = LOOM_ADAM_DEFAULTS},
       torch_adam},
      {{"adam nothing", ADAM, .adam = {0}},
       {"LOOM_ADAM_DEFAULTS", ADAM, .adam = LOOM_ADAM_DEFAULTS},
       torch_adam},
      {{"adam beta1 LOOM_ZERO", ADAM, .adam = {.beta1 = LOOM_ZERO}}, {NULL}, torch_adam_beta1_0},
      {{"adamw lr", ADAMW, .adam = {.lr = 1e-3}},
       {"LOOM_ADAMW_DEFAULTS", ADAMW, .adam = LOOM_ADAMW_DEFAULTS},
       torch_adamw},
      {{"adamw weight_decay LOOM_ZERO", ADAMW, .adam = {.weight_decay = LOOM_ZERO}},
       {NULL},
       torch_adam}, /* AdamW(weight_decay=0) is Adam: torch gives the same values */
      {{"sgd momentum", SGD, .sgd = {.momentum = 0.9}},
       {"spelled out", SGD, .sgd = {.lr = 1e-3, .momentum = 0.9}},
       torch_sgd_momentum},
  };
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    double got[N], spelled[N];
    train_mlp_3_steps(&rows[r].literal, got);
    double err = max_rel_error(got, rows[r].torch, N);
    CHECK_MSG(err <= 1e-12, "%s: relative error %.3g from torch 1.13 (w1[0] %.17g, torch %.17g)",
              rows[r].literal.name, err, got[0], rows[r].torch[0]);
    if (!rows[r].spelled.name) continue;
    train_mlp_3_steps(&rows[r].spelled, spelled);
    CHECK_MSG(memcmp(got, spelled, sizeof got) == 0, "%s and %s differ", rows[r].literal.name,
              rows[r].spelled.name);
  }
}

/* ================================================================ the rest */

static void check_rejected(loom_optim *o, loom_status st, const char *option, const char *value) {
  CHECK(o == NULL);
  loom_optim_free(o);
  CHECK_EQ_INT(loom_last_status(), st);
  CHECK_STR_CONTAINS(loom_last_error(), option);
  if (value) CHECK_STR_CONTAINS(loom_last_error(), value);
  loom_clear_error();
}

static void test_validation(void) {
  loom_params *ps = loom_params_new();
  loom_tensor *w = loom_zeros(LOOM_SHAPE(3), LOOM_F64, test_device());
  CHECK_OK(loom_params_add(ps, "w", w));
  loom_clear_error();
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.lr = -1}), LOOM_ERR_VALUE, "lr", "-1");
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.lr = NAN}), LOOM_ERR_VALUE, "lr", "nan");
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.momentum = -0.5}), LOOM_ERR_VALUE, "momentum",
                 "-0.5");
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.weight_decay = -2}), LOOM_ERR_VALUE, "weight_decay",
                 "-2");
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.momentum = NAN}), LOOM_ERR_VALUE, "momentum", "nan");
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.dampening = NAN}), LOOM_ERR_VALUE, "dampening",
                 "nan");
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.weight_decay = NAN}), LOOM_ERR_VALUE, "weight_decay",
                 "nan");
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.nesterov = true}), LOOM_ERR_VALUE, "nesterov", NULL);
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.momentum = LOOM_ZERO, .nesterov = true}),
                 LOOM_ERR_VALUE, "nesterov", NULL);
  check_rejected(loom_sgd(ps, (loom_sgd_opts){.momentum = 0.9, .dampening = 0.1, .nesterov = 1}),
                 LOOM_ERR_VALUE, "dampening", "0.1");
  for (int k = ADAM; k <= ADAMW; k++) {
    loom_optim *(*make)(loom_params *, loom_adam_opts) = k == ADAM ? loom_adam : loom_adamw;
    check_rejected(make(ps, (loom_adam_opts){.lr = -0.1}), LOOM_ERR_VALUE, "lr", "-0.1");
    check_rejected(make(ps, (loom_adam_opts){.eps = -1e-8}), LOOM_ERR_VALUE, "eps", "-1e-08");
    check_rejected(make(ps, (loom_adam_opts){.beta1 = 1.0}), LOOM_ERR_VALUE, "beta1", "1");
    check_rejected(make(ps, (loom_adam_opts){.beta2 = -0.5}), LOOM_ERR_VALUE, "beta2", "-0.5");
    check_rejected(make(ps, (loom_adam_opts){.beta2 = 1.5}), LOOM_ERR_VALUE, "beta2", "1.5");
    check_rejected(make(ps, (loom_adam_opts){.weight_decay = -1}), LOOM_ERR_VALUE, "weight_decay",
                   "-1");
    const char *fields[5] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    for (int f = 0; f < 5; f++) { /* NaN, in every field (0 <= NaN is false, as torch's test) */
      loom_adam_opts o = {0};
      double *field[5] = {&o.lr, &o.beta1, &o.beta2, &o.eps, &o.weight_decay};
      *field[f] = NAN;
      check_rejected(make(ps, o), LOOM_ERR_VALUE, fields[f], "nan");
      check_rejected(make(ps, o), LOOM_ERR_VALUE, k == ADAM ? "loom_adam:" : "loom_adamw:", NULL);
    }
  }
  check_rejected(loom_adam(NULL, (loom_adam_opts){0}), LOOM_ERR_NULL, "NULL", NULL);
  loom_params *only_buffers = loom_params_new();
  CHECK_OK(loom_params_add_buffer(only_buffers, "running", w));
  check_rejected(loom_sgd(only_buffers, (loom_sgd_opts){0}), LOOM_ERR_VALUE, "trainable", NULL);
  loom_params_free(only_buffers);

  /* a zero field is torch's default, LOOM_ZERO a real zero; the macros are torch's */
  loom_optim *o = loom_sgd(ps, (loom_sgd_opts){0});
  CHECK(loom_optim_lr(o) == 1e-3);
  loom_optim_free(o);
  o = loom_sgd(ps, (loom_sgd_opts){.lr = LOOM_ZERO});
  CHECK(loom_optim_lr(o) == 0 && !signbit(loom_optim_lr(o)));
  CHECK_RC(loom_optim_set_lr(o, -1), LOOM_ERR_VALUE);
  CHECK_STR_CONTAINS(loom_last_error(), "lr");
  CHECK_RC(loom_optim_set_lr(o, NAN), LOOM_ERR_VALUE);
  CHECK(loom_optim_lr(o) == 0);
  CHECK_OK(loom_optim_set_lr(o, 0.5));
  CHECK(loom_optim_lr(o) == 0.5);
  loom_optim_free(o);
  o = loom_sgd(ps, LOOM_SGD_DEFAULTS);
  CHECK(o != NULL && loom_optim_lr(o) == 1e-3);
  loom_optim_free(o);
  o = loom_adam(ps, (loom_adam_opts){0});
  CHECK(o != NULL && loom_optim_lr(o) == 1e-3);
  loom_optim_free(o);
  o = loom_adamw(ps, (loom_adam_opts){.lr = LOOM_ZERO});
  CHECK(o != NULL && loom_optim_lr(o) == 0);
  loom_optim_free(o);
  loom_adam_opts d = LOOM_ADAM_DEFAULTS, dw = LOOM_ADAMW_DEFAULTS;
  CHECK(d.lr == 1e-3 && d.beta1 == 0.9 && d.beta2 == 0.999 && d.eps == 1e-8 && d.weight_decay == 0);
  CHECK(dw.lr == 1e-3 && dw.weight_decay == 1e-2);
  loom_clear_error();

  CHECK_RC(loom_optim_step(NULL), LOOM_ERR_NULL);
  CHECK_RC(loom_optim_set_lr(NULL, 0.1), LOOM_ERR_NULL);
  CHECK(isnan(loom_optim_lr(NULL)));
  loom_optim_zero_grad(NULL);
  loom_optim_free(NULL);
  loom_clear_error();
  loom_free(w);
  loom_params_free(ps);
}

/* A parameter's values against the reference's after a step. */
static void check_param(loom_tensor *t, const double *want, int n, const char *what, int step) {
  double got[MAXEL];
  read_param(t, LOOM_F64, got, n);
  CHECK_MSG(max_rel_error(got, want, n) <= 1e-12, "%s at step %d: %.17g, want %.17g", what, step,
            got[0], want[0]);
}

/* Parameters without a gradient are skipped (no update, no state, no step
 * count: Adam's bias correction of one that joins later starts at t = 1). */
static void test_skips_params_without_grad(void) {
  double a0[3] = {1, 2, 3}, b0[3] = {-1, 0.5, 2}, c[3] = {0.5, 0.5, 0.5};
  double want_a[3], want_b[3], ga[3], gb[3];
  memcpy(want_a, a0, sizeof a0), memcpy(want_b, b0, sizeof b0);
  loom_params *ps = loom_params_new();
  loom_tensor *a = loom_from_data(a0, LOOM_SHAPE(3), LOOM_F64, test_device());
  loom_tensor *b = loom_from_data(b0, LOOM_SHAPE(3), LOOM_F64, test_device());
  loom_tensor *ct = loom_from_data(c, LOOM_SHAPE(3), LOOM_F64, test_device());
  CHECK_OK(loom_params_add(ps, "a", a));
  CHECK_OK(loom_params_add(ps, "b", b));
  optcase oc = resolved(&(optcase)ADAM_CASE("adam", ADAM, .lr = 0.1));
  loom_optim *o = loom_adam(ps, oc.adam);
  ref_state ra = {0}, rb = {0};
  for (int step = 1; step <= 5; step++) {
    bool with_b = step >= 3;
    loom_optim_zero_grad(o);
    temps t = {{0}, 0};
    loom_tensor *loss = T(&t, loom_sum_all(T(&t, loom_square(T(&t, loom_sub(a, ct))))));
    if (with_b)
      loss = T(&t, loom_add(loss, T(&t, loom_sum_all(T(&t, loom_square(T(&t, loom_sub(b, ct))))))));
    loss = finish(&t, loss);
    CHECK_OK(loom_backward(loss));
    loom_tensor *gb_t = loom_grad(b);
    CHECK(with_b == (gb_t != NULL));
    loom_free(gb_t);
    CHECK_OK(loom_optim_step(o));
    CHECK(!loom_is_realized(a));
    CHECK(loom_is_realized(b) == !with_b); /* untouched: still the old buffer */
    loom_item(loss);
    for (int i = 0; i < 3; i++) ga[i] = 2 * (want_a[i] - c[i]), gb[i] = 2 * (want_b[i] - c[i]);
    ref_step(&oc, oc.adam.lr, &ra, want_a, ga, 3);
    if (with_b) ref_step(&oc, oc.adam.lr, &rb, want_b, gb, 3);
    check_param(a, want_a, 3, "a", step);
    check_param(b, want_b, 3, "b", step);
    loom_free(loss);
  }
  /* no gradient at all: nothing recorded, nothing pending */
  loom_optim_zero_grad(o);
  CHECK(loom_grad(a) == NULL);
  uint64_t before = loom_get_stats().realizations;
  CHECK_OK(loom_optim_step(o));
  CHECK(loom_is_realized(a) && loom_is_realized(b));
  loom_tensor *one = loom_ones(LOOM_SHAPE0, LOOM_F64, test_device());
  CHECK(loom_item(one) == 1);
  CHECK_EQ_INT(loom_get_stats().realizations, before + 1);
  loom_free(one);
  loom_optim_free(o);
  loom_free(a), loom_free(b), loom_free(ct);
  loom_params_free(ps);
}

static bool fewer_than_two_dims(const char *name, loom_shape shape, void *ud) {
  (void)name, (void)ud;
  return shape.ndim < 2;
}

static bool named_nothing(const char *name, loom_shape shape, void *ud) {
  (void)name, (void)shape, (void)ud;
  return false;
}

/* Parameter groups: AdamW, the matrix decayed at the optimizer's rate, the
 * bias (1-D) in a group without decay at half the learning rate (GPT-2's
 * recipe), each against torch's formulas with its own options; a group that
 * selects nothing is refused. A weight decay of 0 is none (it once meant 1e-2). */
static void test_param_groups(void) {
  double w0[4] = {1, -2, 0.5, 3}, b0[2] = {0.25, -1}, want_w[4], want_b[2], gw[4], gb[2];
  memcpy(want_w, w0, sizeof w0), memcpy(want_b, b0, sizeof b0);
  loom_params *ps = loom_params_new();
  loom_tensor *w = loom_from_data(w0, LOOM_SHAPE(2, 2), LOOM_F64, test_device());
  loom_tensor *b = loom_from_data(b0, LOOM_SHAPE(2), LOOM_F64, test_device());
  CHECK_OK(loom_params_add(ps, "fc.weight", w));
  CHECK_OK(loom_params_add(ps, "fc.bias", b));
  loom_adam_opts ow = LOOM_ADAMW_DEFAULTS;
  ow.lr = 0.1, ow.weight_decay = 0.2;
  loom_optim *o = loom_adamw(ps, ow);
  CHECK_RC(loom_optim_group(o, named_nothing, NULL, 1, 0), LOOM_ERR_VALUE);
  CHECK_STR_CONTAINS(loom_last_error(), "no parameter");
  CHECK_RC(loom_optim_group(o, fewer_than_two_dims, NULL, -1, 0), LOOM_ERR_VALUE);
  CHECK_OK(loom_optim_group(o, fewer_than_two_dims, NULL, 0.5, 0));
  loom_clear_error();
  optcase cw = {.name = "w", .kind = ADAMW, .adam = ow}, cb = cw;
  cb.adam.weight_decay = 0;
  ref_state rw = {0}, rb = {0};
  for (int step = 1; step <= 4; step++) {
    loom_optim_zero_grad(o);
    temps t = {{0}, 0};
    loom_tensor *loss = T(&t, loom_add(T(&t, loom_sum_all(T(&t, loom_square(w)))),
                                       T(&t, loom_sum_all(T(&t, loom_mul_s(b, 3))))));
    loss = finish(&t, loss);
    CHECK_OK(loom_backward(loss));
    CHECK_OK(loom_optim_step(o));
    loom_item(loss);
    for (int i = 0; i < 4; i++) gw[i] = 2 * want_w[i];
    for (int i = 0; i < 2; i++) gb[i] = 3;
    ref_step(&cw, ow.lr, &rw, want_w, gw, 4);
    ref_step(&cb, ow.lr * 0.5, &rb, want_b, gb, 2);
    check_param(w, want_w, 4, "weight", step);
    check_param(b, want_b, 2, "bias", step);
    loom_free(loss);
  }
  loom_optim_free(o);
  loom_free(w), loom_free(b);
  loom_params_free(ps);
}

/* The schedule against the GPT-2 recipes' get_lr (warmup counts step + 1). */
static void test_lr_schedule(void) {
  const int64_t warmup = 10, total = 100;
  const double max_lr = 6e-4, min_lr = 6e-5;
  for (int64_t step = 0; step < 120; step++) {
    double want;
    if (step < warmup)
      want = max_lr * (double)(step + 1) / (double)warmup;
    else if (step > total)
      want = min_lr;
    else {
      double ratio = (double)(step - warmup) / (double)(total - warmup);
      want = min_lr + 0.5 * (1.0 + cos(M_PI * ratio)) * (max_lr - min_lr);
    }
    CHECK_NEAR(loom_lr_warmup_cosine(step, warmup, total, max_lr, min_lr), want, 1e-18);
  }
  CHECK_NEAR(loom_lr_warmup_cosine(warmup, warmup, total, max_lr, min_lr), max_lr, 1e-18);
  CHECK(isnan(loom_lr_warmup_cosine(-1, warmup, total, max_lr, min_lr)));
  CHECK(isnan(loom_lr_warmup_cosine(5, 200, total, max_lr, min_lr)));
  CHECK(isnan(loom_lr_warmup_cosine(5, warmup, total, -1, min_lr)));
  CHECK_NEAR(loom_lr_warmup_cosine(0, 0, 0, max_lr, min_lr), min_lr, 0);
}

/* A buffer is never updated, even one that has a gradient. */
static void test_buffers_untouched(void) {
  double w0[4] = {1, 2, 3, 4}, r0[4] = {0.5, -1, 2, 0.25}, got[4];
  loom_params *ps = loom_params_new();
  loom_tensor *w = loom_from_data(w0, LOOM_SHAPE(4), LOOM_F64, test_device());
  loom_tensor *r = loom_from_data(r0, LOOM_SHAPE(4), LOOM_F64, test_device());
  CHECK_OK(loom_params_add(ps, "w", w));
  CHECK_OK(loom_params_add_buffer(ps, "running", r));
  CHECK_OK(loom_set_requires_grad(r, true));
  loom_optim *o = loom_sgd(ps, (loom_sgd_opts){.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; step++) {
    temps t = {{0}, 0};
    loom_tensor *loss = finish(&t, T(&t, loom_sum_all(T(&t, loom_mul(w, r)))));
    CHECK_OK(loom_backward(loss));
    loom_tensor *gr = loom_grad(r);
    CHECK(gr != NULL);
    loom_free(gr);
    CHECK_OK(loom_optim_step(o));
    CHECK(loom_is_realized(r));
    loom_item(loss);
    read_param(r, LOOM_F64, got, 4);
    CHECK(memcmp(got, r0, sizeof r0) == 0);
    loom_optim_zero_grad(o);
    loom_clear_grad(r);
    loom_free(loss);
  }
  read_param(w, LOOM_F64, got, 4);
  CHECK(got[0] != w0[0]);
  loom_optim_free(o);
  loom_free(w), loom_free(r);
  loom_params_free(ps);
}

/* Steps recorded inside scopes: the scope's end realizes the loss it keeps
 * and the updates with it, and the optimizer's state (in no scope) outlives
 * the scope. */
static void test_steps_in_scopes(void) {
  optcase oc = resolved(&(optcase)SGD_CASE("sgd", .lr = 0.05, .momentum = 0.9));
  double want[MAXP][MAXEL], grad[MAXP][MAXEL], got[MAXEL];
  memcpy(want, quadratic.init, sizeof want);
  ref_state rs = {0};
  loom_params *ps = loom_params_new();
  loom_tensor *p = new_param(&quadratic, 0, LOOM_F64);
  CHECK_OK(loom_params_add(ps, "p", p));
  loom_optim *o = loom_sgd(ps, oc.sgd);
  for (int step = 1; step <= 4; step++) {
    loom_tensor *loss = NULL;
    LOOM_SCOPE {
      loom_optim_zero_grad(o);
      loss = loom_keep(quad_loss(&p, LOOM_F64));
      CHECK_OK(loom_backward(loss));
      CHECK_OK(loom_optim_step(o));
      CHECK(!loom_is_realized(p));
    }
    CHECK(loom_is_realized(loss) && loom_is_realized(p));
    loom_free(loss);
    quadratic.grad(want, grad);
    ref_step(&oc, oc.sgd.lr, &rs, want[0], grad[0], 6);
    read_param(p, LOOM_F64, got, 6);
    CHECK_MSG(max_rel_error(got, want[0], 6) <= 1e-12, "scoped step %d: %.17g, want %.17g", step,
              got[0], want[0][0]);
  }
  loom_optim_zero_grad(o);
  CHECK(loom_grad(p) == NULL);
  loom_optim_free(o);
  loom_free(p);
  loom_params_free(ps);
}

/* Gradients set by hand reach the optimizer: loom_assign on loom_grad's
 * handle (it did nothing: the step used the old gradient), loom_set_grad, and
 * loom_clip_grad_norm against its formula; a wrong gradient says why; a
 * detached value passes no gradient back. */
static void test_setting_gradients(void) {
  LOOM_SCOPE {
    loom_params *ps = loom_params_new();
    float wv[4] = {1, 2, 3, 4}, vv[3] = {-1, 0.5f, 2};
    loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(4), LOOM_F32, test_device());
    loom_tensor *v = loom_from_data(vv, LOOM_SHAPE(3), LOOM_F32, test_device());
    CHECK_OK(loom_params_add(ps, "w", w));
    CHECK_OK(loom_params_add(ps, "v", v));
    loom_optim *opt = loom_sgd(ps, (loom_sgd_opts){.lr = 1.0});
    /* grad = 2 * [1,2,3,4] and [0, 1, 4] from sum(w^2) + sum(v * [0,2,2]) ... */
    loom_tensor *loss = loom_add(loom_sum_all(loom_square(w)), loom_sum_all(loom_mul(v, v)));
    CHECK_OK(loom_backward(loss));
    /* halve w's gradient through loom_grad's handle, set v's outright */
    loom_tensor *gw = loom_grad(w);
    CHECK_OK(loom_assign(gw, loom_mul_s(gw, 0.5)));
    CHECK_OK(loom_set_grad(v, loom_full(LOOM_SHAPE(3), 0.25, LOOM_F32, test_device())));
    CHECK_OK(loom_optim_step(opt));
    float got_w[4], got_v[3];
    CHECK_OK(loom_copy_to_host(w, got_w, sizeof got_w));
    CHECK_OK(loom_copy_to_host(v, got_v, sizeof got_v));
    for (int i = 0; i < 4; i++) CHECK_NEAR(got_w[i], 0.0, 1e-6); /* w - 0.5 * 2w */
    for (int i = 0; i < 3; i++) CHECK_NEAR(got_v[i], vv[i] - 0.25, 1e-6);
    CHECK_RC(loom_set_grad(w, loom_zeros(LOOM_SHAPE(3), LOOM_F32, test_device())), LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "loom_set_grad: a f32 [4] tensor cannot take a f32 [3]"));
    loom_clear_error();

    /* clip: gradients [3, 4] and [12] (norm 13) to max_norm 6.5: halved */
    loom_zero_grad(ps);
    CHECK_OK(loom_set_grad(
        w, loom_from_data((float[]){3, 4, 0, 0}, LOOM_SHAPE(4), LOOM_F32, test_device())));
    CHECK_OK(loom_set_grad(
        v, loom_from_data((float[]){12, 0, 0}, LOOM_SHAPE(3), LOOM_F32, test_device())));
    loom_tensor *norm = loom_clip_grad_norm(ps, 6.5);
    CHECK_NEAR(loom_item(norm), 13.0, 1e-5);
    float cw[4], cv[3];
    loom_tensor *cgw = loom_grad(w), *cgv = loom_grad(v);
    CHECK_OK(loom_copy_to_host(cgw, cw, sizeof cw));
    CHECK_OK(loom_copy_to_host(cgv, cv, sizeof cv));
    double coef = 6.5 / (13.0 + 1e-6);
    CHECK_NEAR(cw[0], 3 * coef, 1e-5);
    CHECK_NEAR(cw[1], 4 * coef, 1e-5);
    CHECK_NEAR(cv[0], 12 * coef, 1e-5);
    loom_tensor *unclipped = loom_clip_grad_norm(ps, 100); /* under the limit: unchanged */
    CHECK_NEAR(loom_item(unclipped), 6.5, 1e-4);
    CHECK_NEAR(loom_item(loom_sum_all(loom_grad(w))), 7 * coef, 1e-5);
    CHECK(loom_status_of(loom_clip_grad_norm(ps, -1)) == LOOM_ERR_VALUE);
    loom_clear_error();

    /* detach: d(detach(x) * x)/dx = x, not 2x */
    loom_tensor *x = loom_from_data((float[]){3}, LOOM_SHAPE(1), LOOM_F32, test_device());
    CHECK_OK(loom_set_requires_grad(x, true));
    CHECK_OK(loom_backward(loom_sum_all(loom_mul(loom_detach(x), x))));
    CHECK_NEAR(loom_item(loom_sum_all(loom_grad(x))), 3.0, 1e-6);
    loom_optim_free(opt);
    loom_params_free(ps);
  }
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device())); /* layers and parameters */
  test_setting_gradients();
  test_trajectories_f64();
  test_trajectories_f32();
  test_compound_literals();
  test_validation();
  test_skips_params_without_grad();
  test_param_groups();
  test_lr_schedule();
  test_buffers_untouched();
  test_steps_in_scopes();
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
