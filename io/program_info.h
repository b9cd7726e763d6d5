/* What a program holds, for the `loom` command's inspect (tools/loom.c): the
 * ops its graph computes and how many nodes compute each, its weights, and
 * its outputs' dims over its symbols. Read from the program's graph, which
 * loom.h keeps opaque. */
#ifndef LOOM_IO_PROGRAM_INFO_H
#define LOOM_IO_PROGRAM_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

typedef struct lm_op_count {
  const char *op; /* the IR op's name, as the program text writes it */
  int count;
} lm_op_count;

typedef struct lm_program_info {
  lm_op_count *ops; /* most nodes first, then by name */
  int nops;
  int nodes;             /* the positions the program computes */
  int weights;           /* realized tensors captured when it was compiled */
  uint64_t weight_bytes; /* their bytes */
} lm_program_info;

/* Fills info (free it with lm_program_info_free); LOOM_ERR_OOM or
 * LOOM_ERR_NULL recorded naming op otherwise. */
loom_status lm_program_info_get(const char *op, const loom_program *p, lm_program_info *info);
void lm_program_info_free(lm_program_info *info);
/* Output i's dim d as text: its size, or for a symbolic program the
 * expression over the symbols it follows ("batch", "batch*3"). */
const char *lm_program_output_dim_text(const loom_program *p, int i, int d, char *buf, size_t len);

#endif
