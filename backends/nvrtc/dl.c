/* See dl.h. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backends/nvrtc/dl.h"

void lm_dl_msg(char *buf, size_t len, const char *fmt, ...) {
  if (!buf || len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

bool lm_dl_bind(void *lib, const char *what, const char *name, void *fnptr, size_t size, char *err,
                size_t errlen) {
  void *sym = dlsym(lib, name);
  if (!sym) {
    lm_dl_msg(err, errlen, "%s has no symbol %s", what, name);
    return false;
  }
  memcpy(fnptr, &sym, size);
  return true;
}
