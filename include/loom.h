/*
 * loom: lazy tensors that compile what you ask of them.
 *
 * Every op records a node in an IR graph; values are computed only when asked
 * for (loom_realize, loom_item, loom_copy_to_host, loom_eval, end of a scope).
 *
 * Ownership: every function returning a loom_tensor * returns a NEW reference;
 * inputs are borrowed. Inside a scope the new reference belongs to the scope;
 * outside any scope the caller releases it with loom_free.
 *
 * Errors: a failing op returns an error tensor (never NULL) carrying a status
 * and a message; ops given an error tensor return an error tensor without
 * recording anything, so a chain of calls needs one check at the end.
 *
 * Threads: a tensor (and the graph behind it) is used by one thread at a time.
 * Independent graphs may be built and realized on several threads at once;
 * the caches they share are guarded. Scopes and the last error are per thread.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0
#define LOOM_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------ types */

typedef enum loom_dtype {
  LOOM_F32 = 0, /* the default */
  LOOM_F64,
  LOOM_I32,
  LOOM_I64,
  LOOM_U8,
  LOOM_BOOL,
  LOOM_NUM_DTYPES
} loom_dtype;

typedef enum loom_device_type { LOOM_DEVICE_CPU = 0, LOOM_DEVICE_CUDA = 1 } loom_device_type;

typedef struct loom_device {
  loom_device_type type;
  int index;
} loom_device;

#define LOOM_CPU ((loom_device){LOOM_DEVICE_CPU, 0})
#define LOOM_CUDA(n) ((loom_device){LOOM_DEVICE_CUDA, (n)})

#define LOOM_MAX_DIMS 8

typedef struct loom_shape {
  int ndim;
  int64_t dim[LOOM_MAX_DIMS];
} loom_shape;

/* LOOM_SHAPE(4, 2) is a 2-D shape; LOOM_SHAPE0 is the shape of a 0-d scalar. */
#define LOOM__NARGS_(a1, a2, a3, a4, a5, a6, a7, a8, n, ...) n
#define LOOM__NARGS(...) LOOM__NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define LOOM_SHAPE(...) ((loom_shape){LOOM__NARGS(__VA_ARGS__), {__VA_ARGS__}})
#define LOOM_SHAPE0 ((loom_shape){0, {0}})

typedef enum loom_status {
  LOOM_OK = 0,
  LOOM_ERR_NULL,     /* a NULL tensor, pointer or handle was passed */
  LOOM_ERR_SHAPE,    /* shapes do not fit (broadcasting, matmul, reshape...) */
  LOOM_ERR_DTYPE,    /* a dtype the op does not accept */
  LOOM_ERR_DEVICE,   /* tensors on different devices, or a device not available */
  LOOM_ERR_AXIS,     /* an axis or permutation out of range */
  LOOM_ERR_VALUE,    /* a bad argument value (step 0, negative size...) */
  LOOM_ERR_SIZE,     /* a size too large to represent or allocate */
  LOOM_ERR_OOM,      /* an allocation failed */
  LOOM_ERR_COMPILE,  /* code generation or compilation failed */
  LOOM_ERR_IO,       /* a file could not be read or written */
  LOOM_ERR_CORRUPT,  /* a file or cache entry is malformed */
  LOOM_ERR_BUFFER,   /* a destination buffer has the wrong size */
  LOOM_ERR_SCOPE,    /* scope misuse (end without begin, keep outside scope) */
  LOOM_ERR_INTERNAL, /* a bug in loom: please report it */
  LOOM_NUM_STATUS
} loom_status;

typedef struct loom_tensor loom_tensor;

/* ------------------------------------------------------------------ errors */

loom_status loom_status_of(const loom_tensor *t);
/* The message carried by an error tensor, or NULL for a good tensor. */
const char *loom_error_message(const loom_tensor *t);
/* First error on this thread since loom_clear_error(), or NULL. */
const char *loom_last_error(void);
loom_status loom_last_status(void);
void loom_clear_error(void);
const char *loom_status_name(loom_status s);
typedef void (*loom_error_handler)(loom_status status, const char *message, void *userdata);
/* Called on every error as it happens (on the thread that made it). NULL removes it. */
void loom_set_error_handler(loom_error_handler fn, void *userdata);

/* ------------------------------------------------------------------ lifetime */

/* Release one reference. NULL is ignored. */
void loom_free(loom_tensor *t);
/* A new reference to the same tensor. */
loom_tensor *loom_retain(loom_tensor *t);

void loom_scope_begin(void);
/* Realizes the tensors kept from this scope, then releases every reference made
 * in it. Returns the first error met while realizing, else LOOM_OK. */
loom_status loom_scope_end(void);
/* Moves one reference of t from the current scope to the enclosing one (or to
 * the caller, outside all scopes). Returns t. */
loom_tensor *loom_keep(loom_tensor *t);
int loom_scope_depth(void);

#define LOOM__CAT_(a, b) a##b
#define LOOM__CAT(a, b) LOOM__CAT_(a, b)
/* LOOM_SCOPE { ... }: do not leave the block with break/return/goto. */
#define LOOM_SCOPE                                                                                 \
  for (int LOOM__CAT(loom_scope_once_, __LINE__) = (loom_scope_begin(), 1);                        \
       LOOM__CAT(loom_scope_once_, __LINE__);                                                      \
       LOOM__CAT(loom_scope_once_, __LINE__) = 0, loom_scope_end())

/* ------------------------------------------------------------------ creation */

loom_tensor *loom_from_data(const void *data, loom_shape shape, loom_dtype dtype,
                            loom_device device);
loom_tensor *loom_zeros(loom_shape shape, loom_dtype dtype, loom_device device);
loom_tensor *loom_ones(loom_shape shape, loom_dtype dtype, loom_device device);
loom_tensor *loom_full(loom_shape shape, double value, loom_dtype dtype, loom_device device);
loom_tensor *loom_scalar(double value, loom_dtype dtype, loom_device device);
/* Values start, start+step, ... below stop (above it for a negative step). */
loom_tensor *loom_arange(double start, double stop, double step, loom_dtype dtype,
                         loom_device device);
loom_tensor *loom_zeros_like(const loom_tensor *t);
loom_tensor *loom_ones_like(const loom_tensor *t);
loom_tensor *loom_full_like(const loom_tensor *t, double value);

/* ------------------------------------------------------------------ data */

loom_status loom_realize(loom_tensor *t);
/* Realizes several tensors in one program. */
loom_status loom_eval(loom_tensor *const *ts, int n);
/* The value of a one-element tensor (realizing it); NaN on error. */
double loom_item(loom_tensor *t);
/* Copies the realized, contiguous, row-major data into dst (bytes must equal
 * numel * element size). */
loom_status loom_copy_to_host(loom_tensor *t, void *dst, size_t bytes);
loom_shape loom_shape_of(const loom_tensor *t);
loom_dtype loom_dtype_of(const loom_tensor *t);
loom_device loom_device_of(const loom_tensor *t);
int64_t loom_numel(const loom_tensor *t);
int loom_ndim(const loom_tensor *t);
bool loom_is_realized(const loom_tensor *t);
/* PyTorch-like text: tensor([[1., 2.], [3., 4.]]). Realizes t. */
loom_status loom_print(loom_tensor *t);
loom_status loom_fprint(FILE *f, loom_tensor *t);
size_t loom_dtype_size(loom_dtype dtype);
const char *loom_dtype_name(loom_dtype dtype);
bool loom_dtype_is_float(loom_dtype dtype);

/* Lazy assignment: t now names value's data (same shape, dtype and device),
 * computed by the next realization on this thread, in the same program as
 * whatever is realized then (optimizers update parameters this way).
 * Gradients of t keep accumulating into t. */
loom_status loom_assign(loom_tensor *t, const loom_tensor *value);

/* ------------------------------------------------------------------ autograd */

/* Marks t (a float tensor with no gradient history) as a leaf whose
 * gradients loom_backward accumulates. */
loom_status loom_set_requires_grad(loom_tensor *t, bool requires_grad);
bool loom_requires_grad(const loom_tensor *t);
/* Accumulates d(loss)/d(leaf) into every leaf's gradient (loss: one element),
 * as lazy tensors: computing them waits for the next realization. */
loom_status loom_backward(const loom_tensor *loss);
/* The gradient accumulated into t (a new reference), or NULL if none. */
loom_tensor *loom_grad(const loom_tensor *t);
/* Drops t's gradient (as PyTorch's zero_grad(set_to_none=True)). */
void loom_clear_grad(loom_tensor *t);
/* Functional gradients, like torch.autograd.grad with create_graph=True:
 * out_grads[j] = sum_i d(outs[i] * seeds[i]) / d(ins[j]) (seeds NULL: ones;
 * outs[i] must then have one element). Results are new references and are
 * differentiable again (higher derivatives). An input the outputs do not
 * depend on gets zeros. */
loom_status loom_grad_of(loom_tensor *const *outs, int nout, loom_tensor *const *ins, int nin,
                         loom_tensor **out_grads);
/* A variant taking the seeds (one per output, each of its output's shape). */
loom_status loom_grad_of_seeded(loom_tensor *const *outs, loom_tensor *const *seeds, int nout,
                                loom_tensor *const *ins, int nin, loom_tensor **out_grads);

/* No-grad regions: nothing recorded inside requires gradients. */
void loom_no_grad_begin(void);
void loom_no_grad_end(void);
bool loom_grad_enabled(void);
/* LOOM_NO_GRAD { ... }: do not leave the block with break/return/goto. */
#define LOOM_NO_GRAD                                                                               \
  for (int LOOM__CAT(loom_no_grad_once_, __LINE__) = (loom_no_grad_begin(), 1);                    \
       LOOM__CAT(loom_no_grad_once_, __LINE__);                                                    \
       LOOM__CAT(loom_no_grad_once_, __LINE__) = 0, loom_no_grad_end())

/* ------------------------------------------------------------------ random */

/* Philox 4x32-10 keys (algorithm version 1). Element i of a draw depends only on
 * (key, i): never on fusion, thread count or device. */
typedef struct loom_key {
  uint32_t k[2];
} loom_key;

#define LOOM_RNG_VERSION 1

loom_key loom_key_new(uint64_t seed);
loom_key loom_key_fold(loom_key key, uint64_t data);
/* out[i] == loom_key_fold(key, i) */
void loom_key_split(loom_key key, loom_key *out, int n);
loom_tensor *loom_rand_key(loom_key key, loom_shape shape, loom_dtype dtype, loom_device device);
loom_tensor *loom_randn_key(loom_key key, loom_shape shape, loom_dtype dtype, loom_device device);
/* BOOL tensor, true with probability p. */
loom_tensor *loom_bernoulli_key(loom_key key, double p, loom_shape shape, loom_device device);
/* The global key used by loom_rand / loom_randn; each draw folds in a counter. */
void loom_manual_seed(uint64_t seed);
loom_key loom_next_key(void);
loom_tensor *loom_rand(loom_shape shape, loom_dtype dtype, loom_device device);
loom_tensor *loom_randn(loom_shape shape, loom_dtype dtype, loom_device device);

/* ------------------------------------------------------------------ elementwise */

loom_tensor *loom_add(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_sub(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_mul(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_div(const loom_tensor *a, const loom_tensor *b); /* true division */
loom_tensor *loom_pow(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_maximum(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_minimum(const loom_tensor *a, const loom_tensor *b);

/* Scalar forms: the scalar is a "weak" type, as in PyTorch: an integer tensor
 * stays integer for an integral scalar, and becomes F32 for a fractional one. */
loom_tensor *loom_add_s(const loom_tensor *a, double s);
loom_tensor *loom_sub_s(const loom_tensor *a, double s);
loom_tensor *loom_rsub_s(double s, const loom_tensor *a); /* s - a */
loom_tensor *loom_mul_s(const loom_tensor *a, double s);
loom_tensor *loom_div_s(const loom_tensor *a, double s);
loom_tensor *loom_rdiv_s(double s, const loom_tensor *a); /* s / a */
loom_tensor *loom_pow_s(const loom_tensor *a, double s);
loom_tensor *loom_maximum_s(const loom_tensor *a, double s);
loom_tensor *loom_minimum_s(const loom_tensor *a, double s);

/* Comparisons give LOOM_BOOL. */
loom_tensor *loom_lt(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_le(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_gt(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_ge(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_eq(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_ne(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_lt_s(const loom_tensor *a, double s);
loom_tensor *loom_le_s(const loom_tensor *a, double s);
loom_tensor *loom_gt_s(const loom_tensor *a, double s);
loom_tensor *loom_ge_s(const loom_tensor *a, double s);
loom_tensor *loom_eq_s(const loom_tensor *a, double s);
loom_tensor *loom_ne_s(const loom_tensor *a, double s);
loom_tensor *loom_logical_not(const loom_tensor *a);
loom_tensor *loom_logical_and(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_logical_or(const loom_tensor *a, const loom_tensor *b);

/* cond ? a : b; cond must be BOOL; a and b are promoted; all three broadcast. */
loom_tensor *loom_where(const loom_tensor *cond, const loom_tensor *a, const loom_tensor *b);

loom_tensor *loom_neg(const loom_tensor *a);
loom_tensor *loom_abs(const loom_tensor *a);
loom_tensor *loom_exp(const loom_tensor *a);
loom_tensor *loom_log(const loom_tensor *a);
loom_tensor *loom_sqrt(const loom_tensor *a);
loom_tensor *loom_rsqrt(const loom_tensor *a);
loom_tensor *loom_sin(const loom_tensor *a);
loom_tensor *loom_cos(const loom_tensor *a);
loom_tensor *loom_tanh(const loom_tensor *a);
loom_tensor *loom_sigmoid(const loom_tensor *a);
loom_tensor *loom_relu(const loom_tensor *a);
loom_tensor *loom_gelu(const loom_tensor *a); /* exact (erf) form, as torch's default */
loom_tensor *loom_silu(const loom_tensor *a);
loom_tensor *loom_square(const loom_tensor *a);
loom_tensor *loom_reciprocal(const loom_tensor *a);
loom_tensor *loom_erf(const loom_tensor *a);
loom_tensor *loom_cast(const loom_tensor *a, loom_dtype dtype);
loom_tensor *loom_to(const loom_tensor *a, loom_device device);

/* ------------------------------------------------------------------ reductions */

/* axes may be negative; naxes == 0 reduces over every axis. */
loom_tensor *loom_sum(const loom_tensor *a, const int *axes, int naxes, bool keepdim);
loom_tensor *loom_mean(const loom_tensor *a, const int *axes, int naxes, bool keepdim);
loom_tensor *loom_max(const loom_tensor *a, const int *axes, int naxes, bool keepdim);
loom_tensor *loom_min(const loom_tensor *a, const int *axes, int naxes, bool keepdim);
loom_tensor *loom_sum_all(const loom_tensor *a);
loom_tensor *loom_mean_all(const loom_tensor *a);
loom_tensor *loom_argmax(const loom_tensor *a, int axis, bool keepdim); /* LOOM_I64 */
loom_tensor *loom_argmin(const loom_tensor *a, int axis, bool keepdim); /* LOOM_I64 */
loom_tensor *loom_softmax(const loom_tensor *a, int axis);
loom_tensor *loom_log_softmax(const loom_tensor *a, int axis);
loom_tensor *loom_logsumexp(const loom_tensor *a, int axis);

/* ------------------------------------------------------------------ shape (views) */

loom_tensor *loom_reshape(const loom_tensor *a, loom_shape shape); /* one dim may be -1 */
loom_tensor *loom_permute(const loom_tensor *a, const int *perm, int n);
loom_tensor *loom_transpose(const loom_tensor *a, int dim0, int dim1);
loom_tensor *loom_expand(const loom_tensor *a, loom_shape shape); /* -1 keeps a dim */
loom_tensor *loom_squeeze(const loom_tensor *a, int axis);
loom_tensor *loom_unsqueeze(const loom_tensor *a, int axis);
loom_tensor *loom_flatten(const loom_tensor *a, int start, int end);
loom_tensor *loom_slice(const loom_tensor *a, int axis, int64_t start, int64_t end, int64_t step);
/* pads holds (before, after) pairs starting from the LAST axis, as torch.nn.functional.pad. */
loom_tensor *loom_pad(const loom_tensor *a, const int64_t *pads, int npads, double value);
loom_tensor *loom_cat(loom_tensor *const *ts, int n, int axis);
loom_tensor *loom_stack(loom_tensor *const *ts, int n, int axis);
loom_tensor *loom_contiguous(const loom_tensor *a);

/* ------------------------------------------------------------------ linear algebra */

/* torch.matmul's rules: 1-D, 2-D, batched with broadcasting. */
loom_tensor *loom_matmul(const loom_tensor *a, const loom_tensor *b);

/* ------------------------------------------------------------------ stats */

typedef struct loom_stats {
  uint64_t graphs_compiled;   /* graph -> program cache misses */
  uint64_t graph_cache_hits;  /* graph -> program cache hits */
  uint64_t kernels_compiled;  /* kernels built by a backend */
  uint64_t kernel_cache_hits; /* in-memory kernel cache hits */
  uint64_t disk_cache_hits;   /* kernels loaded from the disk cache */
  uint64_t kernels_launched;  /* generated kernels run */
  uint64_t gemm_calls;        /* BLAS calls */
  uint64_t compile_ns;        /* time spent compiling kernels */
  uint64_t realizations;      /* programs run */
  uint64_t nodes_recorded;    /* IR nodes created */
  uint64_t bytes_live;        /* tensor buffer bytes allocated now */
  uint64_t bytes_peak;        /* most bytes_live since the last reset */
} loom_stats;

loom_stats loom_get_stats(void);
/* Zeroes the counters (bytes_peak restarts from bytes_live). */
void loom_reset_stats(void);

/* ------------------------------------------------------------------ execution control */

loom_status loom_set_default_device(loom_device device);
loom_device loom_default_device(void);
bool loom_cuda_available(void);
int loom_cuda_device_count(void);
/* Why CUDA is not available, or NULL when it is. */
const char *loom_cuda_unavailable_reason(void);

/* Threads that run kernels and BLAS (default: LOOM_NUM_THREADS, else the cores). */
loom_status loom_set_num_threads(int n);
int loom_num_threads(void);
/* Fusion on (the default) or off: one kernel per op, for comparison and tests.
 * LOOM_NO_FUSE=1 turns it off at start. */
void loom_set_fusion(bool enabled);
bool loom_fusion_enabled(void);

/* The on-disk kernel cache: LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else
 * ~/.cache/loom. NULL when it is unusable (then kernels are cached in memory
 * only, with one warning). */
const char *loom_cache_dir(void);
typedef struct loom_cache_info {
  uint64_t entries; /* kernel objects on disk */
  uint64_t bytes;   /* their total size */
} loom_cache_info;
loom_status loom_cache_info_get(loom_cache_info *info);
/* Removes every kernel object from the disk cache (compiled code already
 * loaded in this process stays usable). */
loom_status loom_cache_clear(void);
/* A description of the code generator's target (LLVM version, triple, CPU,
 * features), as it enters the kernel cache keys. */
const char *loom_target_id(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H */
