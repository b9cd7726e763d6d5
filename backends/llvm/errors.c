/* Error messages of the LLVM backend. */
#include <stdarg.h>
#include <stdio.h>

#include "backends/llvm/llvm_internal.h"

void lm_set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}
