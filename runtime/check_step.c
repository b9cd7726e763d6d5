/* Check steps (LM_CHECK): the step's description as the numbers
 * runtime/check_cpu.c reads, the check of values on the host (a failure
 * recorded as the run's error), and the step on the CPU: checked, then
 * copied into its output. */
#include "runtime/check_step.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "runtime/runtime.h"

/* runtime/check_cpu.c names the dtypes and the rules by their values (it
 * includes no loom header). */
_Static_assert(LOOM_F32 == 0 && LOOM_F64 == 1 && LOOM_I32 == 2 && LOOM_I64 == 3 && LOOM_U8 == 4 &&
                   LOOM_BOOL == 5 && LOOM_BF16 == 6 && LOOM_F16 == 7 && LOOM_I8 == 8 &&
                   LOOM_I16 == 9 && LOOM_U16 == 10 && LOOM_U32 == 11 && LOOM_U64 == 12,
               "runtime/check_cpu.c's dtype numbers");
_Static_assert(LM_CHECK_INDEX == 0 && LM_CHECK_START == 1 && LM_CHECK_WEIGHTS == 2,
               "runtime/check_cpu.c's rule numbers");

void lm_check_numbers(const lm_check_step *c, int64_t num[LM_CHECK_NUMBERS]) {
  num[0] = c->rows, num[1] = c->cols, num[2] = c->dtype, num[3] = c->rule;
  num[4] = c->lo, num[5] = c->hi, num[6] = c->has_ignore, num[7] = c->ignore;
}

loom_status lm_check_host(const lm_check_step *c, const void *values) {
  int64_t num[LM_CHECK_NUMBERS];
  char msg[512];
  lm_check_numbers(c, num);
  if (!lm_check_values(values, num, c->op, msg, sizeof msg)) return LOOM_OK;
  return lm_fail(LOOM_ERR_VALUE, "%s", msg);
}

loom_status lm_check_now(const lm_node *n) {
  const lm_node *x = n->src[0];
  lm_check_step c;
  lm_check_describe(n, &c);
  if (x->device.type == LOOM_DEVICE_CPU) return lm_check_host(&c, x->data);
  size_t bytes = (size_t)lm_shape_numel(&x->shape) * loom_dtype_size(x->dtype);
  void *host = malloc(bytes + 1);
  if (!host) return lm_fail(LOOM_ERR_OOM, "%s: out of memory checking %zu bytes", c.op, bytes);
  loom_status st = lm_data_copy(c.op, LOOM_CPU, host, x->device, x->data, bytes);
  if (st == LOOM_OK) st = lm_check_host(&c, host);
  free(host);
  return st;
}

loom_status lm_check_run_cpu(const lm_exec *x, const lm_step *s) {
  const void *in = x->bufs[s->check.in_pos];
  loom_status st = lm_check_host(&s->check, in);
  if (st == LOOM_OK && s->outer > 0)
    memcpy(x->bufs[s->out], in, (size_t)s->outer * loom_dtype_size(s->dtype));
  return st;
}
