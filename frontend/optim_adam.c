/* Adam and AdamW: the formulas of torch.optim.Adam / AdamW (torch 2.x,
 * _single_tensor_adam), per parameter, t its own update count:
 *
 *   g = maximize ? -grad : grad
 *   AdamW:          p = p * (1 - lr * weight_decay)
 *   Adam, if wd:    g = g + weight_decay * p
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   step_size = lr / (1 - beta1^t);  bc2_sqrt = sqrt(1 - beta2^t)
 *   amsgrad:        vmax = max(vmax, v), denom = sqrt(vmax) / bc2_sqrt + eps
 *   else:           denom = sqrt(v) / bc2_sqrt + eps
 *   p = p + (-step_size) * m / denom          (param.addcdiv_(m, denom, value=-step_size))
 *
 * (torch writes the m update as m.lerp_(g, 1 - beta1), the same value up to
 * rounding.) The scalars that change with t or with loom_optim_set_lr are the
 * step's data; betas and eps never change and are constants. */
#include <math.h>

#include "frontend/optim.h"

enum adam_scalar { NEG_STEP_SIZE, BC2_SQRT, DECAY_FACTOR, ADAM_NSCALARS };
enum adam_state { EXP_AVG, EXP_AVG_SQ, MAX_EXP_AVG_SQ };

static void adam_scalars(const loom_optim *o, const lm_optim_slot *s, int64_t update, double *out) {
  const loom_adam_opts *opt = &o->opts.adam;
  double t = (double)update, lr = o->lr * s->lr_scale;
  double bias_correction1 = 1 - pow(opt->beta1, t), bias_correction2 = 1 - pow(opt->beta2, t);
  out[NEG_STEP_SIZE] = -(lr / bias_correction1);
  out[BC2_SQRT] = sqrt(bias_correction2);
  if (o->decoupled) out[DECAY_FACTOR] = 1 - lr * s->weight_decay;
}

static void adam_update(const lm_update_in *in, lm_node **out) {
  const loom_adam_opts *opt = &in->o->opts.adam;
  bool decoupled = in->o->decoupled;
  double weight_decay = in->slot->weight_decay;
  lm_node *g = ex_grad(in, opt->maximize, decoupled ? 0 : weight_decay);
  lm_node *p = ex_ref(in->param);
  if (decoupled && weight_decay != 0) p = ex_mul(p, ex_scalar(in, DECAY_FACTOR));
  lm_node *m = ex_add(ex_mul(ex_const(in, opt->beta1), ex_ref(in->state[EXP_AVG])),
                      ex_mul(ex_const(in, 1 - opt->beta1), ex_ref(g)));
  lm_node *v = ex_add(ex_mul(ex_ref(in->state[EXP_AVG_SQ]), ex_const(in, opt->beta2)),
                      ex_mul(ex_mul(ex_const(in, 1 - opt->beta2), ex_ref(g)), g));
  lm_node *second = v;
  if (opt->amsgrad)
    second = out[1 + MAX_EXP_AVG_SQ] = ex_max(ex_ref(in->state[MAX_EXP_AVG_SQ]), ex_ref(v));
  lm_node *denom =
      ex_add(ex_div(ex_sqrt(ex_ref(second)), ex_scalar(in, BC2_SQRT)), ex_const(in, opt->eps));
  out[0] = ex_add(p, ex_div(ex_mul(ex_scalar(in, NEG_STEP_SIZE), ex_ref(m)), denom));
  out[1 + EXP_AVG] = m;
  out[1 + EXP_AVG_SQ] = v;
}

static const lm_optim_rule adam_rule = {adam_scalars, adam_update};

static bool adam_valid(const char *name, const loom_adam_opts *opt) {
  return lm_optim_check_nonneg(name, "lr", opt->lr) &&
         lm_optim_check_nonneg(name, "eps", opt->eps) &&
         lm_optim_check_beta(name, "beta1", opt->beta1) &&
         lm_optim_check_beta(name, "beta2", opt->beta2) &&
         lm_optim_check_nonneg(name, "weight_decay", opt->weight_decay);
}

/* include/loom.h's options rule: zero fields take torch's defaults. */
static loom_optim *adam_new(const char *name, loom_params *ps, loom_adam_opts opts,
                            bool decoupled) {
  opts.lr = lm_option(opts.lr, 1e-3);
  opts.beta1 = lm_option(opts.beta1, 0.9);
  opts.beta2 = lm_option(opts.beta2, 0.999);
  opts.eps = lm_option(opts.eps, 1e-8);
  opts.weight_decay = lm_option(opts.weight_decay, decoupled ? 1e-2 : 0.0);
  if (!adam_valid(name, &opts)) return NULL;
  loom_optim *o = lm_optim_new(name, ps, &adam_rule, opts.weight_decay);
  if (!o) return NULL;
  o->lr = opts.lr;
  o->opts.adam = opts;
  o->decoupled = decoupled;
  o->nstate = opts.amsgrad ? 3 : 2;
  o->nscalars = decoupled ? ADAM_NSCALARS : DECAY_FACTOR;
  return o;
}

loom_optim *loom_adam(loom_params *ps, loom_adam_opts opts) {
  return adam_new("loom_adam", ps, opts, false);
}

loom_optim *loom_adamw(loom_params *ps, loom_adam_opts opts) {
  return adam_new("loom_adamw", ps, opts, true);
}
