/* See dl.h. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dl.h"

void lm_dl_msg(char *buf, size_t len, const char *fmt, ...) {
  if (!buf || len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

void *lm_dl_open(const char *what, const char *env, const char *const *names, size_t count,
                 const char *not_found, char *err, size_t errlen) {
  const char *forced = getenv(env);
  if (forced && *forced) {
    void *lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lm_dl_msg(err, errlen, "cannot load %s from %s=%s: %s", what, env, forced, dlerror());
    return lib;
  }
  const char *last = "no names to try";
  for (size_t i = 0; i < count; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
    last = dlerror();
  }
  lm_dl_msg(err, errlen, "%s (the loader: %s)", not_found, last ? last : "not found");
  return NULL;
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
