/* See gradcheck.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "gradcheck.h"
#include "test_device.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
double gradcheck_uniform(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static int64_t numel(loom_shape s) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; d++) n *= s.dim[d];
  return n;
}

/* sum(build(in) * weights): a scalar whose gradient exercises every output. */
static double eval_loss(const gcase *c, double vals[MAXIN][MAXEL], const double *weights,
                        loom_tensor **leaves, loom_tensor **loss_out) {
  double v = NAN;
  loom_tensor *in[MAXIN];
  for (int i = 0; i < c->nin; i++) {
    in[i] = loom_from_data(vals[i], c->shapes[i], LOOM_F64, test_device());
    if (leaves) {
      loom_set_requires_grad(in[i], true);
      leaves[i] = loom_retain(in[i]);
    }
  }
  loom_tensor *out = c->build(in);
  if (loom_numel(out) <= MAXEL) {
    loom_tensor *w = loom_from_data(weights, loom_shape_of(out), LOOM_F64, test_device());
    loom_tensor *loss = loom_sum_all(loom_mul(out, w));
    if (loss_out)
      *loss_out = loom_retain(loss);
    else
      v = loom_item(loss);
  }
  return v;
}

void gradcheck(const gcase *c) {
  static double vals[MAXIN][MAXEL], weights[MAXEL], grads[MAXIN][MAXEL];
  for (int i = 0; i < c->nin; i++)
    for (int k = 0; k < numel(c->shapes[i]); k++) {
      double u = gradcheck_uniform();
      vals[i][k] = c->dom == POSITIVE   ? 0.5 + 1.5 * u
                   : c->dom == DISTINCT ? (double)k * 0.37 - 2 + 0.1 * u
                                        : 4 * u - 2;
    }
  for (int k = 0; k < MAXEL; k++) weights[k] = gradcheck_uniform() - 0.3;
  loom_tensor *leaves[MAXIN] = {0}, *loss = NULL;
  eval_loss(c, vals, weights, leaves, &loss);
  if (!loss) {
    CHECK_MSG(false, "%s: building the loss failed: %s", c->name, loom_last_error());
    return;
  }
  CHECK_OK(loom_backward(loss));
  for (int i = 0; i < c->nin; i++) {
    loom_tensor *g = loom_grad(leaves[i]); /* NULL: nothing flowed (where's condition) */
    memset(grads[i], 0, sizeof grads[i]);
    if (g) CHECK_OK(loom_copy_to_host(g, grads[i], (size_t)numel(c->shapes[i]) * sizeof(double)));
  }
  double worst = 0;
  for (int i = 0; i < c->nin; i++)
    for (int k = 0; k < numel(c->shapes[i]); k++) {
      double keep = vals[i][k], h = 1e-6;
      vals[i][k] = keep + h;
      double up = eval_loss(c, vals, weights, NULL, NULL);
      vals[i][k] = keep - h;
      double down = eval_loss(c, vals, weights, NULL, NULL);
      vals[i][k] = keep;
      double fd = (up - down) / (2 * h);
      double err = fabs(fd - grads[i][k]) / (1e-4 + fabs(fd));
      if (err > worst) worst = err;
      if (err > 1e-4)
        printf("  %s: input %d element %d: autograd %.9g, finite differences %.9g\n", c->name, i, k,
               grads[i][k], fd);
    }
  CHECK_MSG(worst <= 1e-4, "%s: gradient off by %.3g (relative)", c->name, worst);
}
