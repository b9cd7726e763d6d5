/*
 * Shape-generic kernels: a kernel's sizes (its extents and I64 constants)
 * made run-time values. See "Shape-generic kernels" in kernel.h.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/kernel.h"

static int64_t size_value(const lk_inst *in) {
  return in->dtype == LOOM_I64 ? in->imm_i : (int64_t)in->imm_f;
}

int lk_kernel_count_sizes(const lk_kernel *k) {
  int n = k->ndim;
  for (int i = 0; i < k->ninst; i++) n += lk_inst_is_size(&k->inst[i]);
  return n;
}

void lk_kernel_sizes(const lk_kernel *k, int64_t *sizes) {
  int n = 0;
  for (int d = 0; d < k->ndim; d++) sizes[n++] = k->dom[d];
  for (int i = 0; i < k->ninst; i++)
    if (lk_inst_is_size(&k->inst[i])) sizes[n++] = size_value(&k->inst[i]);
}

lk_inst *lk_kernel_generalize(const lk_kernel *k, const unsigned char *lift, lk_kernel *out,
                              int64_t *values) {
  lk_inst *inst = malloc(sizeof *inst * (size_t)k->ninst);
  if (!inst) return NULL;
  memcpy(inst, k->inst, sizeof *inst * (size_t)k->ninst);
  *out = *k;
  out->inst = inst;
  out->size_slot = k->nslots;
  out->nslots = k->nslots + 1;
  int n = 0, at = 0;
  for (int d = 0; d < k->ndim; d++, at++) {
    out->dom_size[d] = 0;
    if (!lift[at]) continue;
    values[n] = k->dom[d];
    out->dom_size[d] = ++n;
    out->dom[d] = LK_GENERIC_EXTENT_GUESS;
  }
  for (int i = 0; i < k->ninst; i++) {
    if (!lk_inst_is_size(&inst[i]) || !lift[at++]) continue;
    values[n] = size_value(&inst[i]);
    inst[i].op = LK_SIZE;
    inst[i].imm_f = 0;
    inst[i].slot = out->size_slot;
    inst[i].imm_i = n++;
  }
  out->nsizes = n;
  return inst;
}
