/* Autograd inside frontend/: derivative rules over IR nodes. */
#ifndef LOOM_FRONTEND_AUTOGRAD_H
#define LOOM_FRONTEND_AUTOGRAD_H

#include "ir/ir.h"

/* The gradient flowing to n->src[which] given the gradient g of n (a new
 * reference), or NULL when none flows (then *oom tells whether memory ran out). */
lm_node *lm_grad_rule(const lm_node *n, int which, lm_node *g, bool *oom);
/* Fused attention's (LM_ATTENTION) gradients to q, k and v at once, given
 * the gradient g of its output: out[s] a new reference, or NULL where none
 * flows. False when memory ran out (nothing is returned then). */
bool lm_attention_grads(const lm_node *n, lm_node *g, lm_node *out[3]);

#endif
