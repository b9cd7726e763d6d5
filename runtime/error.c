/* Errors: error tensors, the thread's first error, the handler, abort-on-error. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static _Thread_local loom_status first_status;
static _Thread_local char first_message[1024];
/* The latest error reported on this thread, for lm_error_recorded. */
static _Thread_local char recent_message[1024];
static _Thread_local loom_status recent_status;
/* Inside trial work (lm_errors_quiet_begin): failures are answers. */
static _Thread_local int quiet;
/* The public op the user called, while it runs others, is ir/'s recording
 * op (its nodes' made_by). */
const char *lm_called_enter(const char *op) { return lm_recording_op_enter(op); }

void lm_called_leave(const char *previous) { lm_recording_op_leave(previous); }

bool lm_called_by_user(const char *op) {
  const char *called_op = lm_recording_op();
  return !called_op || strcmp(called_op, op) == 0;
}

const char *lm_called_op(void) { return lm_recording_op(); }
/* message, named after the op the user called when another op raised it. */
static void format_message(char *message, size_t len, const char *fmt, va_list ap) {
  const char *called_op = lm_recording_op();
  if (called_op) {
    char first[768]; /* room for the name in front */
    vsnprintf(first, sizeof first, fmt, ap);
    size_t n = strlen(called_op);
    if (strncmp(first, called_op, n) == 0 && first[n] == ':')
      snprintf(message, len, "%s", first);
    else
      snprintf(message, len, "%.200s: %s", called_op, first);
    return;
  }
  vsnprintf(message, len, fmt, ap);
}

/* Set once by the user; read on every error. Both fields swap together under
 * the lock so a handler never meets another handler's userdata. */
static struct {
  atomic_flag lock;
  loom_error_handler fn;
  void *userdata;
} handler = {ATOMIC_FLAG_INIT, NULL, NULL};

static const char *const status_names[LOOM_NUM_STATUS] = {
    [LOOM_OK] = "LOOM_OK",
    [LOOM_ERR_NULL] = "LOOM_ERR_NULL",
    [LOOM_ERR_SHAPE] = "LOOM_ERR_SHAPE",
    [LOOM_ERR_DTYPE] = "LOOM_ERR_DTYPE",
    [LOOM_ERR_DEVICE] = "LOOM_ERR_DEVICE",
    [LOOM_ERR_AXIS] = "LOOM_ERR_AXIS",
    [LOOM_ERR_VALUE] = "LOOM_ERR_VALUE",
    [LOOM_ERR_SIZE] = "LOOM_ERR_SIZE",
    [LOOM_ERR_OOM] = "LOOM_ERR_OOM",
    [LOOM_ERR_COMPILE] = "LOOM_ERR_COMPILE",
    [LOOM_ERR_IO] = "LOOM_ERR_IO",
    [LOOM_ERR_CORRUPT] = "LOOM_ERR_CORRUPT",
    [LOOM_ERR_BUFFER] = "LOOM_ERR_BUFFER",
    [LOOM_ERR_SCOPE] = "LOOM_ERR_SCOPE",
    [LOOM_ERR_INTERNAL] = "LOOM_ERR_INTERNAL",
    [LOOM_ERR_DIST] = "LOOM_ERR_DIST",
};

const char *loom_status_name(loom_status s) {
  return s >= 0 && s < LOOM_NUM_STATUS ? status_names[s] : "LOOM_ERR_UNKNOWN";
}

void loom_set_error_handler(loom_error_handler fn, void *userdata) {
  while (atomic_flag_test_and_set(&handler.lock)) {
  }
  handler.fn = fn;
  handler.userdata = userdata;
  atomic_flag_clear(&handler.lock);
}

const char *loom_last_error(void) { return first_status ? first_message : NULL; }
loom_status loom_last_status(void) { return first_status; }

void loom_clear_error(void) {
  first_status = LOOM_OK;
  first_message[0] = 0;
}

void lm_errors_quiet_begin(void) { quiet++; }
void lm_errors_quiet_end(void) { quiet--; }

static void report(loom_status status, const char *message) {
  snprintf(recent_message, sizeof recent_message, "%s", message);
  recent_status = status;
  if (quiet) return;
  if (first_status == LOOM_OK) {
    first_status = status;
    snprintf(first_message, sizeof first_message, "%s", message);
  }
  while (atomic_flag_test_and_set(&handler.lock)) {
  }
  loom_error_handler fn = handler.fn;
  void *userdata = handler.userdata;
  atomic_flag_clear(&handler.lock);
  if (fn) fn(status, message, userdata);
  if (lm_env_flag("LOOM_ABORT_ON_ERROR")) {
    fprintf(stderr, "loom: %s: %s (LOOM_ABORT_ON_ERROR is set)\n", loom_status_name(status),
            message);
    abort();
  }
}

loom_status lm_failv(loom_status status, const char *fmt, va_list ap) {
  char message[1024];
  format_message(message, sizeof message, fmt, ap);
  report(status, message);
  return status;
}

loom_status lm_fail(loom_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lm_failv(status, fmt, ap);
  va_end(ap);
  return status;
}

/* Used when even the error tensor cannot be allocated: never freed, never
 * counted (loom_free ignores it). */
static loom_tensor oom_tensor = {
    .refs = 1, .status = LOOM_ERR_OOM, .message = "out of memory creating an error tensor"};

static loom_tensor *error_tensor(loom_status status, const char *message) {
  loom_tensor *t = calloc(1, sizeof *t);
  if (t) t->message = strdup(message);
  if (t && t->message) {
    t->refs = 1;
    t->status = status;
    if (lm_scope_track(t)) return t;
  }
  if (t) free(t->message);
  free(t);
  return &oom_tensor;
}

loom_tensor *lm_error(loom_status status, const char *fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  format_message(message, sizeof message, fmt, ap);
  va_end(ap);
  report(status, message);
  return error_tensor(status, message);
}

loom_tensor *lm_error_recorded(loom_status status) { return error_tensor(status, recent_message); }

loom_status lm_recent_error(const char **message) {
  *message = recent_message;
  return recent_status;
}

bool lm_is_static_error(const loom_tensor *t) { return t == &oom_tensor; }

loom_tensor *lm_oom_tensor(const char *message) {
  report(LOOM_ERR_OOM, message);
  return &oom_tensor;
}

bool lm_env_flag(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

uint64_t lm_env_count(const char *name, uint64_t fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (*v != '-' && end && !*end && errno == 0 && n > 0) return n;
  fprintf(stderr, "loom: %s=%s is not a positive whole number; using %llu\n", name, v,
          (unsigned long long)fallback);
  return fallback;
}
