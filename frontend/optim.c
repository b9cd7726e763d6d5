/* What every optimizer shares: the parameters it holds, the state it owns,
 * and the step that records one lazy assignment per changed tensor. The
 * update formulas themselves live in optim_sgd.c and optim_adam.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/optim.h"
#include "frontend/params.h"

/* ------------------------------------------------------------ options */

bool lm_optim_check_nonneg(const char *name, const char *option, double value) {
  if (value >= 0) return true;
  lm_fail(LOOM_ERR_VALUE, "%s: invalid %s: %g (must be >= 0)", name, option, value);
  return false;
}

bool lm_optim_check_beta(const char *name, const char *option, double value) {
  if (value >= 0 && value < 1) return true;
  lm_fail(LOOM_ERR_VALUE, "%s: invalid %s: %g (must be in [0, 1))", name, option, value);
  return false;
}

bool lm_optim_check_number(const char *name, const char *option, double value) {
  if (!isnan(value)) return true;
  lm_fail(LOOM_ERR_VALUE, "%s: invalid %s: %g (must be a number)", name, option, value);
  return false;
}

/* ------------------------------------------------------------ the handle */

loom_optim *lm_optim_new(const char *name, loom_params *ps, const lm_optim_rule *rule,
                         double weight_decay) {
  if (!ps) {
    lm_fail(LOOM_ERR_NULL, "%s: the parameter collection is NULL", name);
    return NULL;
  }
  int n = 0;
  for (int i = 0; i < ps->count; i++) n += ps->items[i].trainable;
  if (n == 0) {
    lm_fail(LOOM_ERR_VALUE, "%s: the collection has no trainable parameters", name);
    return NULL;
  }
  loom_optim *o = calloc(1, sizeof *o);
  lm_optim_slot *slots = calloc((size_t)n, sizeof *slots);
  if (!o || !slots) {
    free(o), free(slots);
    lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
    return NULL;
  }
  o->rule = rule, o->slots = slots;
  for (int i = 0; i < ps->count; i++) {
    if (!ps->items[i].trainable) continue; /* buffers are never updated */
    lm_optim_slot *s = &slots[o->nslots];
    if (!(s->name = strdup(ps->items[i].name))) {
      loom_optim_free(o);
      lm_fail(LOOM_ERR_OOM, "%s: out of memory", name);
      return NULL;
    }
    loom_tensor *t = ps->items[i].tensor;
    t->refs++; /* the optimizer's own reference, in no scope */
    s->param = t;
    s->lr_scale = 1, s->weight_decay = weight_decay;
    o->nslots++;
  }
  return o;
}

void loom_optim_free(loom_optim *o) {
  if (!o) return;
  for (int i = 0; i < o->nslots; i++) {
    free(o->slots[i].name);
    lm_tensor_release(o->slots[i].param);
    for (int k = 0; k < LM_OPTIM_MAX_STATE; k++) lm_tensor_release(o->slots[i].state[k]);
  }
  free(o->slots);
  free(o);
}

void loom_optim_zero_grad(loom_optim *o) {
  for (int i = 0; o && i < o->nslots; i++) loom_clear_grad(o->slots[i].param);
}

loom_status loom_optim_set_lr(loom_optim *o, double lr) {
  if (!o) return lm_fail(LOOM_ERR_NULL, "loom_optim_set_lr: optimizer is NULL");
  if (!lm_optim_check_nonneg("loom_optim_set_lr", "lr", lr)) return LOOM_ERR_VALUE;
  o->lr = lr; /* read by the next step's scalars, never compiled in */
  return LOOM_OK;
}

loom_status loom_optim_group(loom_optim *o,
                             bool (*select)(const char *name, loom_shape shape, void *ud), void *ud,
                             double lr_scale, double weight_decay) {
  const char *op = "loom_optim_group";
  if (!o || !select)
    return lm_fail(LOOM_ERR_NULL, "%s: %s is NULL", op, o ? "select" : "optimizer");
  if (!(lr_scale >= 0) || isinf(lr_scale) || !(weight_decay >= 0) || isinf(weight_decay))
    return lm_fail(LOOM_ERR_VALUE, "%s: lr_scale %g and weight_decay %g must be finite and >= 0",
                   op, lr_scale, weight_decay);
  int matched = 0;
  for (int i = 0; i < o->nslots; i++) {
    lm_optim_slot *s = &o->slots[i];
    if (!select(s->name, s->param->node->shape, ud)) continue;
    s->lr_scale = lr_scale, s->weight_decay = weight_decay;
    matched++;
  }
  if (matched == 0) /* a group of nothing is a mistake, never a silent no-op */
    return lm_fail(LOOM_ERR_VALUE, "%s: no parameter of the optimizer's %d was selected", op,
                   o->nslots);
  return LOOM_OK;
}

double loom_optim_lr(const loom_optim *o) {
  if (!o) {
    lm_fail(LOOM_ERR_NULL, "loom_optim_lr: optimizer is NULL");
    return NAN;
  }
  return o->lr;
}

double loom_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, double max_lr,
                             double min_lr) {
  if (step < 0 || warmup < 0 || warmup > total || !(max_lr >= 0) || !(min_lr >= 0)) return NAN;
  if (step < warmup) return max_lr * (double)(step + 1) / (double)warmup;
  if (step >= total) return min_lr;
  double progress = (double)(step - warmup) / (double)(total - warmup);
  return min_lr + 0.5 * (1 + cos(M_PI * progress)) * (max_lr - min_lr);
}

/* ------------------------------------------------------------ state */

/* A computed zero tensor: state starts as data, not as a constant, so the
 * first step records the same graph as every later one. */
static lm_node *zero_buffer(const lm_node *like) {
  lm_node *n = NULL;
  lm_leaf_copy("loom_optim", like->shape, like->dtype, like->device, NULL, LOOM_CPU, &n);
  return n;
}

/* A handle owned by the optimizer alone: in no scope, so a step recorded
 * inside a scope does not lose its state at the scope's end. */
static loom_tensor *owned_handle(lm_node *node) {
  if (!node) return NULL;
  loom_tensor *t = calloc(1, sizeof *t);
  if (!t) {
    lm_node_release(node);
    return NULL;
  }
  t->refs = 1;
  t->node = node;
  return t;
}

static bool ensure_state(const loom_optim *o, lm_optim_slot *s) {
  for (int k = 0; k < o->nstate; k++)
    if (!s->state[k] && !(s->state[k] = owned_handle(zero_buffer(s->param->node)))) return false;
  return true;
}

/* ------------------------------------------------------------ expressions */

lm_node *ex_ref(lm_node *n) {
  if (n) lm_node_retain(n);
  return n;
}

lm_node *ex_const(const lm_update_in *in, double value) {
  return nb_const(value, in->param->shape, in->param->dtype, in->param->device);
}

lm_node *ex_scalar(const lm_update_in *in, int k) {
  loom_shape one = {1, {1}}, ones = {in->param->shape.ndim, {0}};
  for (int d = 0; d < ones.ndim; d++) ones.dim[d] = 1;
  int64_t start = in->first + k, step = 1;
  lm_node *element = nb_slice(in->scalars, one, &start, &step);
  lm_node *lifted = nb_reshape(element, ones);
  lm_node *typed = nb_cast(lifted, in->param->dtype);
  lm_node *spread = nb_expand(typed, in->param->shape);
  nb_drop(element, lifted, typed, NULL);
  return spread;
}

static lm_node *binary(lm_op op, lm_node *a, lm_node *b) {
  lm_node *r = nb_binary(op, a, b);
  nb_drop(a, b, NULL, NULL);
  return r;
}

static lm_node *unary(lm_op op, lm_node *a) {
  lm_node *r = nb_unary(op, a);
  lm_node_release(a);
  return r;
}

lm_node *ex_add(lm_node *a, lm_node *b) { return binary(LM_ADD, a, b); }
lm_node *ex_mul(lm_node *a, lm_node *b) { return binary(LM_MUL, a, b); }
lm_node *ex_div(lm_node *a, lm_node *b) { return binary(LM_DIV, a, b); }
lm_node *ex_max(lm_node *a, lm_node *b) { return binary(LM_MAX, a, b); }
lm_node *ex_neg(lm_node *a) { return unary(LM_NEG, a); }
lm_node *ex_sqrt(lm_node *a) { return unary(LM_SQRT, a); }

lm_node *ex_grad(const lm_update_in *in, bool maximize, double weight_decay) {
  lm_node *g = ex_ref(in->grad);
  if (maximize) g = ex_neg(g);
  if (weight_decay != 0) g = ex_add(g, ex_mul(ex_const(in, weight_decay), ex_ref(in->param)));
  return g;
}

/* ------------------------------------------------------------ the step */

/* The parameters a step updates: those with a gradient (torch skips the
 * others: no update, no state, no step count). */
typedef struct step_plan {
  lm_optim_slot **active;
  int nactive;
  double *values;    /* nscalars per active parameter */
  lm_node **scalars; /* the values as a buffer on each parameter's device */
  lm_node **outs;    /* (1 + nstate) new values per active parameter */
  lm_node **grads;   /* the gradient each active parameter is updated with */
} step_plan;

static void plan_free(step_plan *p, int nout) {
  for (int i = 0; p->outs && i < nout; i++) lm_node_release(p->outs[i]);
  for (int i = 0; p->grads && i < p->nactive; i++) lm_node_release(p->grads[i]);
  free(p->grads);
  for (int i = 0; p->scalars && i < p->nactive; i++) lm_node_release(p->scalars[i]);
  free(p->active), free(p->values), free(p->scalars), free(p->outs);
}

static loom_status check_grad(const lm_optim_slot *s) {
  const lm_node *p = s->param->node, *g = s->param->grad;
  if (lm_shape_eq(&p->shape, &g->shape) && p->dtype == g->dtype) return LOOM_OK;
  char a[128], b[128];
  return lm_fail(LOOM_ERR_SHAPE, "loom_optim_step: a %s %s parameter has a %s %s gradient",
                 loom_dtype_name(p->dtype), lm_shape_str(&p->shape, a, sizeof a),
                 loom_dtype_name(g->dtype), lm_shape_str(&g->shape, b, sizeof b));
}

static bool same_device(loom_device a, loom_device b) {
  return a.type == b.type && a.index == b.index;
}

/* The step's scalars as one small buffer per device (parameters on one
 * device share it). Made with loom_from_data: a computed leaf, so the values
 * are data the program reads. */
static lm_node *scalars_on(step_plan *p, int nvalues, int i) {
  loom_device dev = p->active[i]->param->node->device;
  for (int j = 0; j < i; j++)
    if (same_device(p->active[j]->param->node->device, dev)) {
      p->scalars[i] = ex_ref(p->scalars[j]);
      return p->scalars[i];
    }
  loom_tensor *t = loom_from_data(p->values, LOOM_SHAPE(nvalues), LOOM_F64, dev);
  if (!t->status) p->scalars[i] = ex_ref(t->node);
  loom_free(t);
  return p->scalars[i];
}

static loom_status plan_step(loom_optim *o, step_plan *p) {
  for (int i = 0; i < o->nslots; i++) {
    if (!o->slots[i].param->grad) continue;
    loom_status st = check_grad(&o->slots[i]);
    if (st) return st;
    p->active[p->nactive++] = &o->slots[i];
  }
  if (p->nactive == 0) return LOOM_OK;
  int per = o->nscalars > 0 ? o->nscalars : 1, nvalues = p->nactive * per;
  p->values = calloc((size_t)nvalues, sizeof *p->values);
  p->scalars = calloc((size_t)p->nactive, sizeof *p->scalars);
  p->outs = calloc((size_t)p->nactive * (size_t)(1 + o->nstate), sizeof *p->outs);
  p->grads = calloc((size_t)p->nactive, sizeof *p->grads);
  if (!p->values || !p->scalars || !p->outs || !p->grads) return LOOM_ERR_OOM;
  loom_status st = lm_ddp_grads(p->active, p->nactive, p->grads);
  if (st != LOOM_OK) return st;
  for (int i = 0; i < p->nactive; i++) {
    if (!ensure_state(o, p->active[i])) return LOOM_ERR_OOM;
    o->rule->scalars(o, p->active[i], p->active[i]->updates + 1,
                     p->values + (size_t)i * (size_t)per);
  }
  for (int i = 0; i < p->nactive; i++) {
    lm_optim_slot *s = p->active[i];
    lm_update_in in = {
        o, s, s->param->node, p->grads[i], {0}, scalars_on(p, nvalues, i), (int64_t)i * per};
    if (!in.scalars) return LOOM_ERR_OOM;
    for (int k = 0; k < o->nstate; k++) in.state[k] = s->state[k]->node;
    lm_node **out = p->outs + (size_t)i * (size_t)(1 + o->nstate);
    o->rule->update(&in, out);
    for (int k = 0; k <= o->nstate; k++)
      if (!out[k]) return LOOM_ERR_OOM;
  }
  return LOOM_OK;
}

/* Every expression is built, and room for every pending assignment made,
 * before the first assignment: running out of memory leaves the parameters
 * and state as they were, never half updated. */
static loom_status assign_all(loom_optim *o, step_plan *p) {
  int per = 1 + o->nstate;
  if (!lm_pending_reserve(p->nactive * per))
    return lm_fail(LOOM_ERR_OOM, "loom_optim_step: out of memory");
  for (int i = 0; i < p->nactive; i++) {
    lm_optim_slot *s = p->active[i];
    for (int k = 0; k < per; k++) {
      loom_tensor *target = k == 0 ? s->param : s->state[k - 1];
      lm_node *value = p->outs[(size_t)i * (size_t)per + (size_t)k];
      p->outs[(size_t)i * (size_t)per + (size_t)k] = NULL; /* consumed */
      loom_status st = lm_assign_node(target, value);
      if (st) return st;
    }
    s->updates++;
  }
  return LOOM_OK;
}

loom_status loom_optim_step(loom_optim *o) {
  if (!o) return lm_fail(LOOM_ERR_NULL, "loom_optim_step: optimizer is NULL");
  step_plan p = {0};
  p.active = calloc((size_t)o->nslots, sizeof *p.active);
  if (!p.active) return lm_fail(LOOM_ERR_OOM, "loom_optim_step: out of memory");
  lm_no_grad_push(); /* updates are not differentiated (torch.no_grad) */
  loom_status st = plan_step(o, &p);
  if (st == LOOM_ERR_OOM) st = lm_fail(st, "loom_optim_step: out of memory");
  if (st == LOOM_OK) st = assign_all(o, &p);
  lm_no_grad_pop();
  plan_free(&p, p.nactive * (1 + o->nstate));
  return st;
}
