/* Test inputs made with the library (a file of their own in the support
 * library: suites that do not link loom's frontend never pull it in). */
#ifndef LOOM_TESTS_INPUTS_H
#define LOOM_TESTS_INPUTS_H

#include "loom.h"

/* A float tensor of shape s on device, uniform values from check_fill_uniform(seed). */
loom_tensor *check_filled(loom_shape s, unsigned seed, loom_device device);

#endif
