/* The parameter collection's layout, for the files of frontend/ that walk it
 * (optimizers, safetensors). */
#ifndef LOOM_FRONTEND_PARAMS_H
#define LOOM_FRONTEND_PARAMS_H

#include "loom.h"

typedef struct lm_param {
  char *name;
  loom_tensor *tensor; /* the collection's own reference */
  bool trainable;
} lm_param;

struct loom_params {
  lm_param *items;
  int count, cap;
};

/* Index of the parameter named name, or -1. */
int lm_params_find(const loom_params *ps, const char *name);

#endif
