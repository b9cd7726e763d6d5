/*
 * runtime/: what runs and owns things: tensor handles and their lifetimes
 * (scopes), errors, stats, buffers, and realization (graph -> program -> run).
 */
#ifndef LOOM_RUNTIME_H
#define LOOM_RUNTIME_H

#include <stdarg.h>

#include "ir/ir.h"
#include "loom.h"

/* A handle: one user-visible reference-counted tensor over an IR node, or an
 * error tensor (node NULL, status and message set). */
struct loom_tensor {
  _Atomic int refs; /* atomic: threads may share a realized tensor's handle */
  lm_node *node;
  loom_status status;
  char *message;
  bool requires_grad;             /* a leaf the user asked gradients for */
  lm_node *grad;                  /* accumulated gradient (owned), or NULL */
  struct loom_tensor *grad_of;    /* loom_grad's handle: the tensor whose gradient it
                                     is (a reference), so that loom_assign on it sets
                                     that gradient */
  int64_t ddp_bucket_bytes;       /* a parameter under loom_ddp: its gradient is
                                     all-reduced in buckets of this size; 0 otherwise */
  int64_t ddp_first_bucket_bytes; /* loom_ddp's first_bucket_bytes (0: none) */
  uint32_t freed;                 /* LM_HANDLE_FREED once released (see below) */
};

/* Set in a handle's last field just before its memory is freed, so a handle
 * used after loom_free is recognized while that memory has not been handed
 * out again: glibc's allocator writes its links at the start of a freed
 * block, not at its end. Best effort: a reused block is a live handle. */
#define LM_HANDLE_FREED 0xf7eed0u
static inline bool lm_is_freed(const loom_tensor *t) {
  return *(const volatile uint32_t *)&t->freed == LM_HANDLE_FREED;
}
/* LOOM_OK for a good handle; else records and returns why not (NULL, used
 * after being freed, or the error tensor's own status), naming op. */
loom_status lm_check_handle(const char *op, const loom_tensor *t);

/* ------------------------------------------------------------ handles */
/* A new handle owning one reference of `node` (consumed), registered with the
 * current scope. A NULL node means allocation failed: an OOM error tensor. */
loom_tensor *lm_tensor_wrap(lm_node *node);
/* A new reference to an existing handle, registered with the current scope. */
loom_tensor *lm_tensor_ref(const loom_tensor *t);
/* Drops one reference without touching scope registrations. */
void lm_tensor_release(loom_tensor *t);
/* The preallocated tensor returned when not even an error tensor fits in memory. */
bool lm_is_static_error(const loom_tensor *t);
/* Records an LOOM_ERR_OOM error and returns that preallocated tensor (never
 * freed, in no scope): for paths that must not allocate or register. */
loom_tensor *lm_oom_tensor(const char *message);

/* ------------------------------------------------------------ errors */
/* Records an error (thread's first error, handler, LOOM_ABORT_ON_ERROR) and
 * returns a new error tensor carrying it. */
loom_tensor *lm_error(loom_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* An error tensor carrying the error an lm_fail on this thread has just
 * recorded (status is what it returned), without reporting it again. */
loom_tensor *lm_error_recorded(loom_status status);
/* While a public op runs others, errors they raise name it first
 * ("loom_layer_norm: loom_reshape: ..."): the outermost call on the thread
 * wins. lm_called_enter returns what lm_called_leave restores. */
const char *lm_called_enter(const char *op);
void lm_called_leave(const char *previous);
/* The public op the user called (the outermost running), or NULL. */
const char *lm_called_op(void);
/* Whether op (a public op's name) runs because the user called it: no public
 * op is running on this thread, or op itself is the outermost. Sizes such an
 * op takes from its arguments are the user's, not derived by a composite op
 * from another tensor's (lm_node.fixed_dims). */
bool lm_called_by_user(const char *op);
/* The same for functions returning a status. */
/* Trial work whose failures are answers, not errors (planning a symbolic
 * program at sizes that may not fit it, inferring a lazy graph's symbols):
 * between these, failures are neither the thread's error nor handed to the
 * error handler nor aborted on (LOOM_ABORT_ON_ERROR). They nest. */
void lm_errors_quiet_begin(void);
void lm_errors_quiet_end(void);
/* The latest error reported on this thread, quiet or not, and its message. */
loom_status lm_recent_error(const char **message);
loom_status lm_fail(loom_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
loom_status lm_failv(loom_status status, const char *fmt, va_list ap);

/* ------------------------------------------------------------ scopes */
/* Composite ops record freely between these: every reference made in between
 * is released at lm_composite_end except `result`, which goes to the caller
 * (or the caller's scope). Nothing is realized. */
int lm_composite_begin(void);
loom_tensor *lm_composite_end(int token, loom_tensor *result);
/* Registers one reference of t with the current scope; false when the
 * scope's list cannot grow (then the caller still owns the reference). */
bool lm_scope_track(loom_tensor *t);
/* Removes one registration of t from the innermost scope holding it; returns
 * false when no scope holds it. */
bool lm_scope_untrack(loom_tensor *t);

/* ------------------------------------------------------------ stats */
typedef enum lm_stat {
  LM_STAT_GRAPHS_COMPILED,
  LM_STAT_GRAPH_CACHE_HITS,
  LM_STAT_KERNELS_COMPILED,
  LM_STAT_KERNEL_CACHE_HITS,
  LM_STAT_DISK_CACHE_HITS,
  LM_STAT_KERNELS_LAUNCHED,
  LM_STAT_GEMM_CALLS,
  LM_STAT_COMPILE_NS,
  LM_STAT_REALIZATIONS,
  LM_STAT_NODES_RECORDED,
  LM_STAT_KERNELS_UNLOADED,
  LM_STAT_GENERIC_KERNELS_COMPILED,
  LM_STAT_GENERIC_KERNEL_USES,
  LM_STAT_PROGRAM_SIZES_PLANNED,
  LM_STAT_PROGRAM_SIZES_FROM_TEMPLATE,
  LM_STAT_IN_PLACE_UPDATES,
  LM_STAT_COLLECTIVES_RUN,
  LM_STAT_COLLECTIVES_OVERLAPPED,
  LM_STAT_COLLECTIVE_BYTES,
  LM_STAT_GEMMS_FROM_WINDOWS,
  LM_NUM_STATS
} lm_stat;
void lm_stat_add(lm_stat which, uint64_t amount);
void lm_stat_bytes(int64_t delta); /* bytes_live += delta, bytes_peak tracks it */
uint64_t lm_now_ns(void);

/* ------------------------------------------------------------ realization */
/* Computes the given nodes (and everything unrealized they depend on) in one
 * program. Nodes already computed are skipped. */
loom_status lm_realize_nodes(lm_node *const *nodes, int n);
/* Drops every cached program (running ones finish first: they hold a
 * reference). Tests use it to plan a graph again without compiling kernels,
 * which stay in the kernel cache. */
void lm_program_cache_clear(void);

/* ------------------------------------------------------------ allocators */
/* Size classes of the caching allocators (host and device): up to 4 KiB in
 * steps of 64 bytes, then quarters of each power of two (at most 25%
 * rounding). Returns the class (< LM_SIZE_CLASSES for sizes below 2^64)
 * and the rounded size in *rounded. */
#define LM_SIZE_CLASSES (4096 / 64 + 4 * 64)
int lm_size_class(size_t bytes, size_t *rounded);
/* The allocator behind LM_BUFFER data on the CPU (runtime/buffer.c). */
void *lm_buffer_alloc(size_t bytes);
void lm_buffer_free(void *data, size_t bytes);
/* Returns the allocator's cached free blocks to the system (tests that count
 * allocations, and the memory-profile test). */
void lm_buffer_trim(void);
/* Bytes the allocator holds in its free blocks now. */
size_t lm_buffer_cached_bytes(void);
/* Frees data on device d: lm_buffer_free on the CPU, the device's allocator
 * on CUDA. A node's data is freed through it (lm_node.release_data). */
void lm_data_free(loom_device d, void *data, size_t bytes);
/* Device-aware buffers (runtime/device.c): the host allocator for the CPU,
 * the device's caching allocator for CUDA. lm_data_alloc records an error
 * naming op when it fails. */
loom_status lm_data_alloc(const char *op, loom_device d, size_t bytes, void **out);
/* bytes bytes between any two devices (waits when dst is the host). */
loom_status lm_data_copy(const char *op, loom_device to, void *dst, loom_device from,
                         const void *src, size_t bytes);
/* A new computed leaf on device `to` holding a copy of the bytes at src (on
 * device `from`), or zeros when src is NULL. Records an error naming op. */
loom_status lm_leaf_copy(const char *op, loom_shape shape, loom_dtype dtype, loom_device to,
                         const void *src, loom_device from, lm_node **out);
/* "cpu" or "cuda:<n>", written to buf, for messages. */
const char *lm_device_str(loom_device d, char *buf, size_t len);
/* The same device (the CPU's index does not matter). */
static inline bool lm_device_eq(loom_device a, loom_device b) {
  return a.type == b.type && (a.type == LOOM_DEVICE_CPU || a.index == b.index);
}
/* Device bytes held by tensors (the device allocator counts them). */
void lm_stat_device_bytes(int64_t delta);

/* ------------------------------------------------------------ options */
#define LM_MAX_THREADS 256

/* ------------------------------------------------------------ assignments */
/* Rebinds t to value (consumed): t now names the new value, computed at the
 * next realization together with whatever is realized then. */
loom_status lm_assign_node(loom_tensor *t, lm_node *value);
/* Room for `extra` more pending assignments: after it, that many
 * lm_assign_node calls cannot fail (a group of updates is all or nothing). */
bool lm_pending_reserve(int extra);
/* The nodes of pending assignments (this thread), for the next realization. */
int lm_pending_count(void);
lm_node *lm_pending_at(int i);
void lm_pending_clear(void);
/* Gives every handle with a pending assignment the value it named before
 * (unless assigned again since), then clears them: a run that refused a
 * value (LOOM_ERR_VALUE) applies none of its assignments, as torch's
 * raising op leaves its tensors. */
void lm_pending_rollback(void);
/* How many pending assignments hold n as the value their handle named
 * before (references that updates in place do not count). */
int lm_pending_holds(const lm_node *n);

/* ------------------------------------------------------------ names */
/* 1 to LM_MAX_NAME letters, digits or '_', not starting with a digit: a C
 * identifier (program inputs, weights, exported libraries). */
#define LM_MAX_NAME 64
bool lm_is_name(const char *s, size_t len);

/* ------------------------------------------------------------ environment */
bool lm_env_flag(const char *name); /* set to something other than "" or "0" */
/* A positive whole number from the environment; fallback when unset, or (with
 * a warning on stderr naming the variable) when it is not one. */
uint64_t lm_env_count(const char *name, uint64_t fallback);

#endif
