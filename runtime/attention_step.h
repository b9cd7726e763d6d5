/* The fused attention step (LM_STEP_ATTENTION) on the CPU: the
 * kernel-shaped entry points of runtime/attention_cpu.c, their work items,
 * and the numbers they read, made from a step (runtime/attention_step.c). */
#ifndef LOOM_RUNTIME_ATTENTION_STEP_H
#define LOOM_RUNTIME_ATTENTION_STEP_H

#include <stdint.h>

#include "passes/passes.h"

#define LM_ATTENTION_MAX_NUMBERS 64

/* args: {out, q, k, v, const int64_t numbers[], const double *scale, mask};
 * [begin, end): work items (lm_attention_f32_items). */
void lm_attention_f32(void *const *args, int64_t begin, int64_t end);
int64_t lm_attention_f32_items(const int64_t *num);
/* The backward (LM_ATTENTION_GRAD): args as the forward's, then the
 * forward's output and its gradient; a work item is a batch index. */
void lm_attention_grad_f32(void *const *args, int64_t begin, int64_t end);
int64_t lm_attention_grad_f32_items(const int64_t *num);
int lm_attention_f32_numbers(int nbatch, const int64_t *batch, int64_t tq, int64_t tk, int64_t d,
                             int64_t dv, int causal, int mask, int64_t mask_stride, int backward,
                             const int64_t *offset, const int64_t *row_stride,
                             const int64_t *bstride, int pitch, int64_t *num);
/* The numbers of a step (room for LM_ATTENTION_MAX_NUMBERS); how many. */
int lm_attention_numbers(const lm_attention *a, int64_t *num);
/* A step's multiply-adds, as counted to decide whether it runs on threads. */
int64_t lm_attention_work(const lm_step *s);

/* runtime/attention_cpu.c's text (generated at build time), for exports */
extern const char lm_attention_cpu_source[];

#endif
