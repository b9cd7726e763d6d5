/* SGD with momentum, dampening, Nesterov, weight decay and maximize: the
 * formulas of torch.optim.SGD (torch 2.x, _single_tensor_sgd):
 *
 *   g = maximize ? -grad : grad
 *   if weight_decay:  g = g + weight_decay * p
 *   if momentum:      buf = clone(g)                                on the first update
 *                     buf = momentum * buf + (1 - dampening) * g    afterwards
 *                     g = nesterov ? g + momentum * buf : buf
 *   p = p + (-lr) * g
 *
 * The first update's special case is data, not structure: buf starts as
 * zeros and reads its two factors from the step's scalars, (0, 1) on the
 * first update and (momentum, 1 - dampening) after, which gives exactly g
 * and then torch's sum. So every step records the same graph. */
#include "frontend/optim.h"

enum sgd_scalar { NEG_LR, BUF_KEEP, GRAD_WEIGHT, SGD_NSCALARS };

static void sgd_scalars(const loom_optim *o, const lm_optim_slot *s, int64_t update, double *out) {
  const loom_sgd_opts *opt = &o->opts.sgd;
  out[NEG_LR] = -(o->lr * s->lr_scale);
  if (opt->momentum == 0) return;
  out[BUF_KEEP] = update == 1 ? 0.0 : opt->momentum;
  out[GRAD_WEIGHT] = update == 1 ? 1.0 : 1.0 - opt->dampening;
}

static void sgd_update(const lm_update_in *in, lm_node **out) {
  const loom_sgd_opts *opt = &in->o->opts.sgd;
  lm_node *g = ex_grad(in, opt->maximize, in->slot->weight_decay);
  lm_node *step = g;
  if (opt->momentum != 0) {
    lm_node *buf = ex_add(ex_mul(ex_ref(in->state[0]), ex_scalar(in, BUF_KEEP)),
                          ex_mul(ex_scalar(in, GRAD_WEIGHT), ex_ref(g)));
    if (opt->nesterov)
      step = ex_add(g, ex_mul(ex_const(in, opt->momentum), ex_ref(buf)));
    else
      lm_node_release(g), step = ex_ref(buf);
    out[1] = buf;
  }
  out[0] = ex_add(ex_ref(in->param), ex_mul(ex_scalar(in, NEG_LR), step));
}

static const lm_optim_rule sgd_rule = {sgd_scalars, sgd_update};

static bool sgd_valid(const char *name, const loom_sgd_opts *opt) {
  if (!lm_optim_check_nonneg(name, "lr", opt->lr) ||
      !lm_optim_check_nonneg(name, "momentum", opt->momentum) ||
      !lm_optim_check_number(name, "dampening", opt->dampening) ||
      !lm_optim_check_nonneg(name, "weight_decay", opt->weight_decay))
    return false;
  if (opt->nesterov && (opt->momentum <= 0 || opt->dampening != 0)) {
    lm_fail(LOOM_ERR_VALUE,
            "%s: nesterov momentum requires a momentum and zero dampening (momentum %g, "
            "dampening %g)",
            name, opt->momentum, opt->dampening);
    return false;
  }
  return true;
}

loom_optim *loom_sgd(loom_params *ps, loom_sgd_opts opts) {
  const char *name = "loom_sgd";
  /* include/loom.h's options rule: lr 0 is torch's 1e-3, the rest default to 0 */
  opts.lr = lm_option(opts.lr, 1e-3);
  opts.momentum = lm_option(opts.momentum, 0);
  opts.dampening = lm_option(opts.dampening, 0);
  opts.weight_decay = lm_option(opts.weight_decay, 0);
  if (!sgd_valid(name, &opts)) return NULL;
  loom_optim *o = lm_optim_new(name, ps, &sgd_rule, opts.weight_decay);
  if (!o) return NULL;
  o->lr = opts.lr;
  o->opts.sgd = opts;
  o->nstate = opts.momentum != 0 ? 1 : 0;
  o->nscalars = opts.momentum != 0 ? SGD_NSCALARS : 1;
  return o;
}
