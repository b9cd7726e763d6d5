/* Fused attention steps on the CPU: the step's description as the numbers
 * runtime/attention_cpu.c reads, and the step run over loom's threads. */
#include "runtime/attention_step.h"

#include "runtime/exec.h"
#include "runtime/runtime.h"

int lm_attention_numbers(const lm_attention *a, int64_t *num) {
  return lm_attention_f32_numbers(a->nbatch, a->batch, a->tq, a->tk, a->d, a->dv, a->causal,
                                  a->mask, a->mask_stride, a->backward, a->offset, a->row_stride,
                                  &a->bstride[0][0], LOOM_MAX_DIMS, num);
}

int64_t lm_attention_work(const lm_step *s) {
  const lm_attention *a = &s->attn;
  int64_t batch = 1;
  for (int d = 0; d < a->nbatch; d++) batch *= a->batch[d];
  /* the backward computes the scores twice, dp, dq, dk and dv */
  return batch * a->tq * a->tk * (a->backward ? 4 * a->d + 2 * a->dv : a->d + a->dv);
}

loom_status lm_attention_run_cpu(const lm_exec *x, const lm_step *s) {
  const lm_attention *a = &s->attn;
  if (s->outer == 0) return LOOM_OK;
  int64_t num[LM_ATTENTION_MAX_NUMBERS];
  if (!lm_attention_numbers(a, num))
    return lm_fail(LOOM_ERR_INTERNAL, "loom_realize: an attention step of %d batch dims",
                   a->nbatch);
  void *const args[] = {x->bufs[s->out],
                        x->bufs[a->pos[0]],
                        x->bufs[a->pos[1]],
                        x->bufs[a->pos[2]],
                        num,
                        (void *)&a->scale,
                        a->mask ? x->bufs[a->pos[3]] : NULL,
                        a->backward ? x->bufs[a->pos[4]] : NULL,
                        a->backward ? x->bufs[a->pos[5]] : NULL};
  if (a->backward)
    lm_run_kernel_fn(lm_attention_grad_f32, args, 0, lm_attention_grad_f32_items(num),
                     lm_attention_work(s));
  else
    lm_run_kernel_fn(lm_attention_f32, args, 0, lm_attention_f32_items(num), lm_attention_work(s));
  lm_stat_add(LM_STAT_KERNELS_LAUNCHED, 1);
  return LOOM_OK;
}
