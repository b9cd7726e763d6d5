/* See program_info.h. */
#include "io/program_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/program.h"
#include "runtime/runtime.h"

static int by_count(const void *a, const void *b) {
  const lm_op_count *x = a, *y = b;
  if (x->count != y->count) return x->count > y->count ? -1 : 1;
  return strcmp(x->op, y->op);
}

loom_status lm_program_info_get(const char *op, const loom_program *p, lm_program_info *info) {
  *info = (lm_program_info){0};
  if (!p) return lm_fail(LOOM_ERR_NULL, "%s: program is NULL", op);
  int *per_op = calloc(LM_NUM_OPS, sizeof *per_op);
  info->ops = calloc(LM_NUM_OPS, sizeof *info->ops);
  if (!per_op || !info->ops) {
    free(per_op);
    lm_program_info_free(info);
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  for (int pos = 0; pos < p->n; pos++) {
    const lm_node *n = p->nodes[pos];
    if (p->kind[pos] == LM_SLOT_WEIGHT) {
      info->weights++;
      info->weight_bytes += (uint64_t)lm_shape_numel(&n->shape) * loom_dtype_size(n->dtype);
    } else if (p->kind[pos] == LM_SLOT_NODE) {
      info->nodes++;
      per_op[n->op]++;
    }
  }
  for (int o = 0; o < LM_NUM_OPS; o++)
    if (per_op[o]) info->ops[info->nops++] = (lm_op_count){lm_op_name((lm_op)o), per_op[o]};
  qsort(info->ops, (size_t)info->nops, sizeof *info->ops, by_count);
  free(per_op);
  return LOOM_OK;
}

void lm_program_info_free(lm_program_info *info) {
  free(info->ops);
  *info = (lm_program_info){0};
}

const char *lm_program_output_dim_text(const loom_program *p, int i, int d, char *buf, size_t len) {
  const lm_node *n = p->nodes[p->out_pos[i]];
  if (p->nsym == 0)
    snprintf(buf, len, "%lld", (long long)n->shape.dim[d]);
  else
    lm_sym_str(&p->dims[p->out_pos[i] * LOOM_MAX_DIMS + d], (const char *const *)p->sym_names, buf,
               len);
  return buf;
}
