/* Binding the entry points of a library opened with dlopen (NVRTC, the
 * driver): neither is linked, so libloom runs where they are missing. */
#ifndef LOOM_BASE_DL_H
#define LOOM_BASE_DL_H

#include <stdbool.h>
#include <stddef.h>

/* dlsym(lib, name) into the function pointer at fnptr (size bytes), without
 * the object-to-function cast ISO C forbids. When the symbol is missing,
 * returns false and says so in err: "<what> has no symbol <name>". */
bool lm_dl_bind(void *lib, const char *what, const char *name, void *fnptr, size_t size, char *err,
                size_t errlen);

/* Opens a library the way both loaders do: the path in the environment
 * variable env when it is set ("cannot load <what> from <env>=<path>: <why>"
 * when that fails), else the first of names that loads ("<not_found> (the
 * loader: <its last message>)" when none does). The message goes to err. */
void *lm_dl_open(const char *what, const char *env, const char *const *names, size_t count,
                 const char *not_found, char *err, size_t errlen);

/* printf into buf (when buf && len): the messages both libraries leave. */
void lm_dl_msg(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
