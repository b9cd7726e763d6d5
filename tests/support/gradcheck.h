/* Gradient checking for tests: autograd against central finite differences
 * in F64 on random inputs. */
#ifndef LOOM_TESTS_GRADCHECK_H
#define LOOM_TESTS_GRADCHECK_H

#include "loom.h"

#define MAXIN 3
#define MAXEL 256

typedef enum domain { ANY, POSITIVE, DISTINCT } domain;

/* An op under test: builds its output from the inputs (borrowed). Called
 * inside a scope. */
typedef loom_tensor *(*build_fn)(loom_tensor *const *in);

typedef struct gcase {
  const char *name;
  build_fn build;
  int nin;
  loom_shape shapes[MAXIN];
  domain dom;
} gcase;

/* Checks d(sum(build(in) * w))/d(in) for random in and w; records a CHECK. */
void gradcheck(const gcase *c);
double gradcheck_uniform(void);

#endif
