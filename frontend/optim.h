/* Optimizers inside frontend/: the handle every optimizer shares (optim.c)
 * and the vocabulary their update rules (optim_sgd.c, optim_adam.c) are
 * written in.
 *
 * A step records, for every parameter with a gradient, one elementwise
 * expression per tensor it changes (the parameter and each state tensor) and
 * assigns it lazily. Scalars that change from step to step (the learning
 * rate, bias corrections) are read from a small buffer made for the step, not
 * baked in as constants: constants are part of the graph's hash, data is not,
 * so every step after the first finds its program in the cache. */
#ifndef LOOM_FRONTEND_OPTIM_H
#define LOOM_FRONTEND_OPTIM_H

#include "frontend/frontend.h"

#define LM_OPTIM_MAX_STATE 3   /* Adam with amsgrad: m, v, vmax */
#define LM_OPTIM_MAX_SCALARS 4 /* per parameter and step */

/* One trainable parameter and the state kept for it. */
typedef struct lm_optim_slot {
  loom_tensor *param;                     /* the optimizer's own reference */
  char *name;                             /* its name in the collection */
  double lr_scale, weight_decay;          /* its group's (loom_optim_group) */
  loom_tensor *state[LM_OPTIM_MAX_STATE]; /* NULL until the first update */
  int64_t updates;                        /* torch's state["step"]: updates made */
} lm_optim_slot;

/* What an update rule reads for one parameter (all borrowed). */
typedef struct lm_update_in {
  const loom_optim *o;
  const lm_optim_slot *slot;
  lm_node *param, *grad;
  lm_node *state[LM_OPTIM_MAX_STATE];
  lm_node *scalars; /* this step's scalars (F64, every parameter's in a row) */
  int64_t first;    /* where this parameter's scalars start */
} lm_update_in;

typedef struct lm_optim_rule {
  /* This step's scalars for parameter s about to get its update-th update
   * (1-based), o->nscalars of them. */
  void (*scalars)(const loom_optim *o, const lm_optim_slot *s, int64_t update, double *out);
  /* The new values: out[0] the parameter's, out[1 + k] state k's. An entry
   * is NULL when memory ran out. */
  void (*update)(const lm_update_in *in, lm_node **out);
} lm_optim_rule;

struct loom_optim {
  const lm_optim_rule *rule;
  double lr;
  int nstate, nscalars;
  union {
    loom_sgd_opts sgd;
    loom_adam_opts adam; /* weight_decay is decoupled (AdamW) when `decoupled` */
  } opts;
  bool decoupled;
  lm_optim_slot *slots;
  int nslots;
};

/* A new optimizer over the trainable tensors of ps (as torch takes
 * model.parameters() when it is made), each with lr_scale 1 and
 * weight_decay; NULL with the error recorded. */
loom_optim *lm_optim_new(const char *name, loom_params *ps, const lm_optim_rule *rule,
                         double weight_decay);

/* ------------------------------------------------------------ options */
/* Each records LOOM_ERR_VALUE naming the option and returns false when the
 * value is outside what torch accepts (NaN never is). */
bool lm_optim_check_nonneg(const char *name, const char *option, double value);
bool lm_optim_check_beta(const char *name, const char *option, double value);
bool lm_optim_check_number(const char *name, const char *option, double value); /* not NaN */

/* ------------------------------------------------------------ expressions */
/* Builders for update expressions over one parameter's shape and dtype.
 * Unlike nb_*, they CONSUME their node arguments (NULL passes through, for
 * out of memory), so a formula reads as one nested expression. */
lm_node *ex_ref(lm_node *n); /* a new reference to a borrowed node */
lm_node *ex_const(const lm_update_in *in, double value);
/* The k-th of this parameter's step scalars, spread over its shape. */
lm_node *ex_scalar(const lm_update_in *in, int k);
lm_node *ex_add(lm_node *a, lm_node *b);
lm_node *ex_mul(lm_node *a, lm_node *b);
lm_node *ex_div(lm_node *a, lm_node *b);
lm_node *ex_max(lm_node *a, lm_node *b);
lm_node *ex_neg(lm_node *a);
lm_node *ex_sqrt(lm_node *a);
/* The gradient as torch's optimizers first turn it: negated for maximize,
 * then grad.add(param, alpha=weight_decay) when weight_decay != 0. */
lm_node *ex_grad(const lm_update_in *in, bool maximize, double weight_decay);

/* ------------------------------------------------------------ data parallel (ddp.c) */
/* The gradients a step updates with (new references into grads[n]): each
 * active slot's own, or, for loom_ddp's parameters, all-reduced (mean) in
 * buckets. */
loom_status lm_ddp_grads(lm_optim_slot *const *active, int n, lm_node **grads);

#endif
