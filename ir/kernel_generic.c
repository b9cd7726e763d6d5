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

lk_inst *lk_kernel_unshare_sizes(const lk_kernel *k, lk_kernel *out) {
  unsigned char *root = calloc((size_t)k->ninst, 1);
  int *map = malloc(sizeof *map * (size_t)k->ninst), uses = 0;
  for (int i = 0; i < k->ninst; i++) {
    const int ops[3] = {k->inst[i].a, k->inst[i].b, k->inst[i].c};
    for (int o = 0; o < 3; o++) uses += ops[o] >= 0;
  }
  lk_inst *inst = malloc(sizeof *inst * (size_t)(k->ninst + uses));
  if (!root || !map || !inst) {
    free(root), free(map), free(inst);
    return NULL;
  }
  /* what is read from outside the list keeps its place */
  int roots[LK_MAX_ROOTS];
  for (int r = 0, nroots = lk_kernel_roots(k, roots); r < nroots; r++) root[roots[r]] = 1;
  *out = *k;
  out->inst = inst;
  int n = 0;
  for (int i = 0; i < k->ninst; i++) {
    if (i == k->nbody) out->nbody = n;
    lk_inst in = k->inst[i];
    if (lk_inst_is_size(&in) && !root[i]) {
      map[i] = -1; /* a copy before each use instead */
      continue;
    }
    int *ops[3] = {&in.a, &in.b, &in.c};
    for (int o = 0; o < 3; o++) {
      if (*ops[o] < 0) continue;
      if (map[*ops[o]] >= 0) {
        *ops[o] = map[*ops[o]];
      } else {
        inst[n] = k->inst[*ops[o]];
        *ops[o] = n++;
      }
    }
    inst[n] = in;
    map[i] = n++;
  }
  lk_kernel_remap_roots(k, out, map, n);
  free(root);
  free(map);
  return inst;
}
