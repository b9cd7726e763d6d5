/*
 * loom: lazy tensors that compile what you ask of them.
 *
 * Ops record an IR graph; values are computed when asked for (loom_realize,
 * loom_eval, loom_item, loom_copy_to_host, the end of a scope).
 * Ownership: a function returning a loom_tensor * returns a NEW reference (the
 * current scope's, else the caller's to loom_free); inputs are borrowed.
 * Errors: a failing op returns an error tensor (never NULL); ops given one
 * return it, so a chain of calls needs one check at the end.
 * Threads: a realized tensor may be shared; a lazy tensor and its graph,
 * gradients, assignments, optimizers and parameter collections belong to one
 * thread at a time. Scopes, assignments, no-grad and errors are per thread.
 * The rules behind each contract: docs/api.md.
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
  LOOM_BF16, /* bfloat16 and IEEE half: stored in 2 bytes, computed in float with */
  LOOM_F16,  /* every op's result rounded (nearest even) to the dtype, as torch */
  LOOM_I8,   /* signed 8-bit, torch.int8: arithmetic wraps; appended, so the values above keep
                their numbers (saved programs and caches name them) */
  LOOM_I16,  /* signed 16-bit, torch.int16 */
  LOOM_U16,  /* unsigned 16-, 32- and 64-bit (NumPy's uint16/32/64): arithmetic wraps */
  LOOM_U32,  /* modulo 2^n, comparisons are unsigned; U64 values pass through doubles */
  LOOM_U64,  /* (scalars, constants) exactly only up to 2^53, as I64's do */
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
  LOOM_ERR_DIST,     /* a collective failed or timed out, or no MPI (loom_dist_init) */
  LOOM_NUM_STATUS
} loom_status;

typedef struct loom_tensor loom_tensor;
typedef struct loom_params loom_params; /* a named collection of tensors (below) */

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
/* An integer dtype takes value truncated toward zero (2.5 is 2, as torch.full);
 * a value outside the dtype, NaN or inf, is LOOM_ERR_VALUE (loom_full_like
 * and loom_pad's value alike). */
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
/* The value of a one-element tensor (realizing it); NaN on error. An I64 beyond
 * 2^53 rounds to the nearest double: loom_item_i64 gives integers exactly. */
double loom_item(loom_tensor *t);
/* The value of a one-element integer or bool tensor, exactly, into *value;
 * LOOM_ERR_DTYPE for a float tensor (loom_item reads those). */
loom_status loom_item_i64(loom_tensor *t, int64_t *value);
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
/* BF16 and F16 elements are their bits (uint16_t). Float to them rounds to
 * nearest even (overflow to inf, NaN stays a quiet NaN), as torch converts. */
float loom_bf16_to_float(uint16_t bits);
uint16_t loom_float_to_bf16(float value);
float loom_f16_to_float(uint16_t bits);
uint16_t loom_float_to_f16(float value);

/* Lazy assignment: t names value's data (same shape, dtype and device) from the
 * next realization on this thread, computed in the same program. A value
 * loom_where(mask, x, t) is written into t's own buffer when nothing else holds
 * t's old value. A failed realization keeps its assignments pending, but
 * LOOM_ERR_VALUE undoes them (docs/api.md, "Assignments"). */
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
/* Sets t's gradient to grad (same shape, dtype and device; NULL clears it), as
 * PyTorch's `p.grad = g`: an optimizer step then uses it. loom_assign on the
 * handle loom_grad returned does the same. */
loom_status loom_set_grad(loom_tensor *t, const loom_tensor *grad);
/* The same values, with no gradient flowing back through them (torch's detach). */
loom_tensor *loom_detach(const loom_tensor *t);
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
/* Integers: exact, wrapping; a negative exponent gives 1 for a base of 1, +-1
 * for -1 and 0 otherwise (torch's). */
loom_tensor *loom_pow(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_maximum(const loom_tensor *a, const loom_tensor *b);
loom_tensor *loom_minimum(const loom_tensor *a, const loom_tensor *b);

/* Scalar forms: the scalar is a weak type, as in PyTorch: an integral one keeps
 * an integer tensor's dtype (taken modulo 2^bits, arithmetic wrapping), a
 * fractional one makes it F32. An integral scalar outside [-2^63, 2^63) is
 * refused; loom_pow_s of integers takes an exponent >= 0 that the dtype holds
 * (docs/api.md, "Scalars"). */
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
/* cond ? a : s, the scalar promoted as in the scalar forms (torch.where(cond, a, s));
 * an integral s must be a value of an integer result's dtype. */
loom_tensor *loom_where_s(const loom_tensor *cond, const loom_tensor *a, double s);
/* a with value where mask (BOOL, broadcast to a's shape) is true, a's dtype kept
 * (torch.Tensor.masked_fill); an integer tensor's value must fit its dtype. */
loom_tensor *loom_masked_fill(const loom_tensor *a, const loom_tensor *mask, double value);
/* t with its slice [start, start + n) along axis replaced by update (n: update's
 * size there; its other dims, dtype and device t's), as jax.lax.dynamic_update_slice
 * with start a 0-d integer tensor. A start outside [0, size - n] is LOOM_ERR_VALUE
 * (README, "Reliability"). loom_assign(cache, loom_slice_update(cache, 2, pos,
 * row)) writes a KV cache's row in place (docs/api.md, "KV caches"). */
loom_tensor *loom_slice_update(const loom_tensor *t, int axis, const loom_tensor *start,
                               const loom_tensor *update);

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
/* 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))): GPT-2's, torch's approximate='tanh'. */
loom_tensor *loom_gelu_tanh(const loom_tensor *a);
loom_tensor *loom_silu(const loom_tensor *a);
loom_tensor *loom_square(const loom_tensor *a);
loom_tensor *loom_reciprocal(const loom_tensor *a);
loom_tensor *loom_erf(const loom_tensor *a);
/* log(1 + a) and exp(a) - 1, accurate where a is small (torch.log1p, expm1). */
loom_tensor *loom_log1p(const loom_tensor *a);
loom_tensor *loom_expm1(const loom_tensor *a);
loom_tensor *loom_sign(const loom_tensor *a); /* -1, 0 or 1 in a's dtype (NaN stays NaN) */
/* torch.floor, ceil, round (half to even): exact for every float (infinities
 * and NaN kept), integers returned as they are, gradient zero as torch's. */
loom_tensor *loom_floor(const loom_tensor *a);
loom_tensor *loom_ceil(const loom_tensor *a);
loom_tensor *loom_round(const loom_tensor *a);
/* min(max(a, lo), hi), as torch.clamp: an infinite bound leaves that side open, a NaN
 * bound or value gives NaN, lo > hi gives hi everywhere. The gradient flows where
 * lo <= a <= hi. Bounds promote like scalars (a non-integral bound makes an integer
 * tensor F32); an integral bound must fit an integer tensor's dtype; bools are refused. */
loom_tensor *loom_clamp(const loom_tensor *a, double lo, double hi);
loom_tensor *loom_cast(const loom_tensor *a, loom_dtype dtype);
/* Each element's bits read as `dtype` (numpy's view(dtype), ONNX's BitCast): the
 * dtypes must have the same element size (LOOM_ERR_DTYPE naming both otherwise);
 * the same dtype gives a as it is. To LOOM_BOOL, which holds 0 or 1, a byte other
 * than 0 is true (so U8 5 -> BOOL -> U8 gives 1). BF16 and F16 keep their bits,
 * except that a signaling NaN may come back quiet (they compute in float registers).
 * No gradient flows through it (as torch's rounding ops: zero). */
loom_tensor *loom_bitcast(const loom_tensor *a, loom_dtype dtype);
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
/* torch.var / torch.std: the sum of squared deviations over N - correction
 * (1: Bessel's, torch's default; 0: the population's), computed in F64 (torch
 * sums the squares of floats in double) and rounded once to the result: a's
 * float dtype, F32 for integers. */
loom_tensor *loom_var(const loom_tensor *a, const int *axes, int naxes, double correction,
                      bool keepdim);
loom_tensor *loom_std(const loom_tensor *a, const int *axes, int naxes, double correction,
                      bool keepdim);
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
/* torch.Tensor.repeat: a tiled reps[i] times along each dim; nreps >= a's dims
 * (extra repeats add leading dims). */
loom_tensor *loom_repeat(const loom_tensor *a, const int64_t *reps, int nreps);
/* Data-dependent input (README, "Reliability"): an index, position or weight that
 * an op below cannot take is LOOM_ERR_VALUE naming the op and the value, from
 * the call when its tensor is realized, else from the run computing it
 * (loom_realize, loom_item, loom_program_run, an export's run), which then
 * publishes nothing and undoes its assignments (see loom_assign). */

/* torch.index_select: a's slices at index (1-D integers in [0, a's size
 * along axis); negative ones are refused, as torch does). */
loom_tensor *loom_index_select(const loom_tensor *a, int axis, const loom_tensor *index);
/* torch.gather: out[..i..] = a[..index[..i..]..] along axis; index has a's
 * rank and no dim larger than a's except along axis; its values in [0, a's
 * size along axis). */
loom_tensor *loom_gather(const loom_tensor *a, int axis, const loom_tensor *index);
/* torch.flip along one axis: a view of a's slices in reverse (its gradient
 * reversed likewise; over a symbolic dim it follows the size). */
loom_tensor *loom_flip(const loom_tensor *a, int axis);
/* torch.cumsum: inclusive running sums along axis, in order (NaN and inf reach
 * only the later sums). Integers and bools give I64, exact and wrapping; F32
 * sums in double, F16 and BF16 in F32, each sum rounded to the dtype. Its
 * gradient is the running sums from the other end (docs/api.md, "Sorting and
 * running sums"). */
loom_tensor *loom_cumsum(const loom_tensor *a, int axis);
/* torch.topk: the k largest (or smallest) along axis, in order, as *values
 * (a's dtype, differentiable) and *indices (I64); either may be NULL. Ties:
 * the first position first (torch leaves their order open). A partial
 * selection on the CPU, O(n) a line for k well below n. */
loom_status loom_topk(const loom_tensor *a, int64_t k, int axis, bool largest, loom_tensor **values,
                      loom_tensor **indices);
/* torch.sort along axis with stable=True (descending: the largest first; NaN
 * the largest and -0 equal to 0, as torch; equal values keep their order):
 * *values (a's dtype, differentiable) and *indices (I64), either may be NULL.
 * One library step (docs/api.md, "Sorting and running sums"). */
loom_status loom_sort(const loom_tensor *a, int axis, bool descending, loom_tensor **values,
                      loom_tensor **indices);
/* torch.argsort(stable=True): loom_sort's indices alone. */
loom_tensor *loom_argsort(const loom_tensor *a, int axis, bool descending);
/* torch.multinomial with a key: n category indices (I64, [n] or [N, n]) drawn
 * from probs [C] or [N, C] (non-negative weights, not necessarily summing to
 * 1), with or without replacement; the Gumbel-max trick, so the draws are
 * exact and fuse. A weight that is negative, NaN or infinite, or a row whose
 * weights are all 0, is an invalid distribution, as in torch: LOOM_ERR_VALUE
 * (at the call or from the run, as the indices above). */
loom_tensor *loom_multinomial_key(loom_key key, const loom_tensor *probs, int64_t n,
                                  bool replacement);
/* The lower (tril: column - row <= diagonal) or upper (triu: >= diagonal)
 * triangle of the last two dims, the rest zero (torch.tril, torch.triu). */
loom_tensor *loom_tril(const loom_tensor *a, int64_t diagonal);
loom_tensor *loom_triu(const loom_tensor *a, int64_t diagonal);
/* Views of a along axis: pieces of `size` (the last may be shorter), as
 * torch.split; `chunks` pieces of ceil(length / chunks) (maybe fewer), as
 * torch.chunk. out has room for cap (chunks) tensors; *n (may be NULL) gets
 * how many were made. On an error nothing is made and the status says why. */
loom_status loom_split(const loom_tensor *a, int64_t size, int axis, loom_tensor **out, int cap,
                       int *n);
loom_status loom_chunk(const loom_tensor *a, int chunks, int axis, loom_tensor **out, int *n);

/* ------------------------------------------------------------------ linear algebra */

/* torch.matmul's rules: 1-D, 2-D, batched with broadcasting. */
loom_tensor *loom_matmul(const loom_tensor *a, const loom_tensor *b);

/* ------------------------------------------------------------------ options */

/* Options structs (loom_*_opts, the option fields of the layer structs): a field
 * left zero means torch's default, so (loom_adam_opts){.lr = 3e-4} is torch's
 * Adam(lr=3e-4); where that default is not zero, LOOM_ZERO is a real zero
 * (.beta1 = LOOM_ZERO). Values torch refuses are LOOM_ERR_VALUE naming the
 * function, the field and the value (docs/api.md, "Options"). */
#define LOOM_ZERO (-0.0)

/* ------------------------------------------------------------------ nn ops */
/* Functional forms (torch.nn.functional); the names ending in _f avoid the
 * layer types below. */

/* x @ w^T + b (b may be NULL): x [.., in], w [out, in], b [out]. */
loom_tensor *loom_linear_f(const loom_tensor *x, const loom_tensor *w, const loom_tensor *b);

/* Options (LOOM_ZERO's rule): stride 1, padding 0, dilation 1, groups 1. */
typedef struct loom_conv2d_opts {
  int stride[2], padding[2], dilation[2], groups;
} loom_conv2d_opts;
/* x [N, C, H, W], w [O, C/groups, KH, KW], b [O] or NULL -> [N, O, OH, OW].
 * Lowered to im2col + GEMM; on the CPU the product reads the im2col matrix's
 * terms from the image (docs/gemm.md). A zero field of opts takes its default (stride 1,
 * padding 0, dilation 1, groups 1); negative ones are refused. */
loom_tensor *loom_conv2d_f(const loom_tensor *x, const loom_tensor *w, const loom_tensor *b,
                           loom_conv2d_opts opts);
/* stride 0 means stride = kernel. avg_pool2d counts padding (torch's default). */
loom_tensor *loom_max_pool2d(const loom_tensor *x, int kernel, int stride, int padding);
loom_tensor *loom_avg_pool2d(const loom_tensor *x, int kernel, int stride, int padding);
/* Rows of weight [V, D] picked by integer indices (any shape): indices + [D].
 * An index outside [0, V) is LOOM_ERR_VALUE: from the call when the indices
 * are realized, else from the run (as loom_index_select's). */
loom_tensor *loom_embedding_f(const loom_tensor *indices, const loom_tensor *weight);
/* I64 one-hot encoding of integer labels: labels + [num_classes]; a label
 * outside [0, num_classes) is LOOM_ERR_VALUE (at the call or from the run). */
loom_tensor *loom_one_hot(const loom_tensor *labels, int64_t num_classes);
/* x * mask / (1 - p) with mask ~ Bernoulli(1 - p) drawn from key, when train;
 * x itself otherwise. */
loom_tensor *loom_dropout(const loom_tensor *x, double p, loom_key key, bool train);
/* Normalizes over every dim but 1 (channels). When train, uses the batch's
 * statistics and records the running-stat updates (momentum, unbiased
 * variance) as lazy assignments; otherwise uses the running stats.
 * weight, bias, running stats may be NULL. */
loom_tensor *loom_batch_norm(const loom_tensor *x, loom_tensor *running_mean,
                             loom_tensor *running_var, const loom_tensor *weight,
                             const loom_tensor *bias, bool train, double momentum, double eps);
/* Normalizes over the last `ndims` dims; weight and bias (their shape) may be NULL. */
loom_tensor *loom_layer_norm(const loom_tensor *x, int ndims, const loom_tensor *weight,
                             const loom_tensor *bias, double eps);

/* Losses, mean over the batch. Labels are integer class indices in [0, C): any
 * other is LOOM_ERR_VALUE, at the call or from the run (as loom_one_hot's). */
loom_tensor *loom_mse_loss(const loom_tensor *pred, const loom_tensor *target);
loom_tensor *loom_cross_entropy(const loom_tensor *logits, const loom_tensor *labels);
loom_tensor *loom_nll_loss(const loom_tensor *log_probs, const loom_tensor *labels);
loom_tensor *loom_bce_with_logits(const loom_tensor *logits, const loom_tensor *targets);

/* How values combine: a loss's over its batch (MEAN, SUM, NONE), an
 * all-reduce's over ranks (MEAN, SUM, MAX, MIN). */
typedef enum loom_reduction {
  LOOM_REDUCE_MEAN,
  LOOM_REDUCE_SUM,
  LOOM_REDUCE_NONE,
  LOOM_REDUCE_MAX,
  LOOM_REDUCE_MIN
} loom_reduction;
/* Options (LOOM_ZERO's rule): nothing ignored (a label outside [0, C) is an
 * error, where torch ignores -100), no smoothing, MEAN. */
typedef struct loom_cross_entropy_opts {
  bool ignore;              /* labels equal to ignore_index add nothing (torch: ignore_index) */
  int64_t ignore_index;     /* read only with ignore: 0 is label 0; torch's -100 is
                               written out */
  double label_smoothing;   /* in [0, 1]: the target is (1 - s) one-hot + s / C */
  loom_reduction reduction; /* MEAN (default: over the labels not ignored), SUM, NONE */
} loom_cross_entropy_opts;
/* torch's F.cross_entropy with its options: logits [N, C, d...] (classes on
 * axis 1) against integer labels [N, d...] in [0, C) (or equal to the ignored
 * index, with ignore; any other is LOOM_ERR_VALUE, at the call or from the
 * run), or [C] against one 0-d label.
 * NONE gives the loss per label ([N, d...], 0 where ignored); MEAN over no
 * labels at all (every one ignored) is NaN, as in torch. */
loom_tensor *loom_cross_entropy_ex(const loom_tensor *logits, const loom_tensor *labels,
                                   loom_cross_entropy_opts opts);

/* ------------------------------------------------------------------ attention */

/* softmax(q @ k^T * scale + mask) @ v, as torch 2's F.scaled_dot_product_attention:
 * q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] -> [..., Tq, Dv]; mask (or NULL)
 * BOOL (true: attend) or additive, broadcast to [..., Tq, Tk]; causal: query i
 * sees keys 0..i; scale 0 is 1/sqrt(D), LOOM_ZERO a real 0. Grouped-query heads
 * and argument checks as torch's; a row that sees nothing is NaN. One fused
 * kernel where it serves, else composed (docs/api.md, "Attention"). */
loom_tensor *loom_scaled_dot_product_attention(const loom_tensor *q, const loom_tensor *k,
                                               const loom_tensor *v, const loom_tensor *mask,
                                               bool causal, double scale);

/* ------------------------------------------------------------------ layers */
/* Plain structs created into a parameter collection (which owns the tensors;
 * the struct borrows them), each with a forward function. Initialization
 * follows PyTorch's defaults, drawn from the key. A user's model is a struct
 * of layers and a forward function. On failure the tensors are NULL and
 * loom_last_error says why. */

typedef struct loom_linear {
  loom_tensor *weight, *bias; /* [out, in], [out] */
} loom_linear;
loom_linear loom_linear_new(loom_params *ps, const char *name, int64_t in, int64_t out,
                            loom_key key);
loom_tensor *loom_linear_forward(const loom_linear *l, const loom_tensor *x);

typedef struct loom_conv2d {
  loom_tensor *weight, *bias; /* [out, in/groups, k, k], [out] */
  loom_conv2d_opts opts;
} loom_conv2d;
loom_conv2d loom_conv2d_new(loom_params *ps, const char *name, int64_t in, int64_t out, int kernel,
                            loom_conv2d_opts opts, loom_key key);
loom_tensor *loom_conv2d_forward(const loom_conv2d *c, const loom_tensor *x);

typedef struct loom_batchnorm2d {
  loom_tensor *weight, *bias, *running_mean, *running_var;
  double momentum, eps; /* options (LOOM_ZERO's rule): 0.1, 1e-5 */
} loom_batchnorm2d;
loom_batchnorm2d loom_batchnorm2d_new(loom_params *ps, const char *name, int64_t channels);
loom_tensor *loom_batchnorm2d_forward(const loom_batchnorm2d *b, const loom_tensor *x, bool train);

typedef struct loom_layernorm {
  loom_tensor *weight, *bias; /* [dim] */
  double eps;                 /* an option (LOOM_ZERO's rule): 1e-5 */
} loom_layernorm;
loom_layernorm loom_layernorm_new(loom_params *ps, const char *name, int64_t dim);
loom_tensor *loom_layernorm_forward(const loom_layernorm *l, const loom_tensor *x);

typedef struct loom_embedding {
  loom_tensor *weight; /* [num, dim] */
} loom_embedding;
loom_embedding loom_embedding_new(loom_params *ps, const char *name, int64_t num, int64_t dim,
                                  loom_key key);
/* The rows of e's weight at indices, each in [0, num) (as loom_embedding_f). */
loom_tensor *loom_embedding_forward(const loom_embedding *e, const loom_tensor *indices);

/* Multi-head self-attention, as torch.nn.MultiheadAttention(embed, heads,
 * batch_first=True) with q = k = v = x: its parameters (under its names,
 * <name>.in_proj_weight [3E, E], .in_proj_bias [3E], .out_proj.weight [E, E],
 * .out_proj.bias [E]) and initialization. causal: position i attends to
 * positions 0..i (GPT's). x [B, T, E] or [T, E]. */
typedef struct loom_mha {
  loom_tensor *in_proj_weight, *in_proj_bias;
  loom_tensor *out_proj_weight, *out_proj_bias;
  int64_t heads;
  bool causal;
} loom_mha;
loom_mha loom_mha_new(loom_params *ps, const char *name, int64_t embed, int64_t heads, bool causal,
                      loom_key key);
loom_tensor *loom_mha_forward(const loom_mha *m, const loom_tensor *x);

/* Sequential composition: stages run in order. A stage is a function of (its
 * layer, input, train) returning a new reference. */
typedef loom_tensor *(*loom_stage_fn)(const void *layer, const loom_tensor *x, bool train);
typedef struct loom_seq loom_seq;
loom_seq *loom_seq_new(void);
loom_status loom_seq_add(loom_seq *s, loom_stage_fn fn, const void *layer);
loom_tensor *loom_seq_forward(const loom_seq *s, const loom_tensor *x, bool train);
void loom_seq_free(loom_seq *s);
/* Stage functions for the layers and common activations. */
loom_tensor *loom_stage_linear(const void *layer, const loom_tensor *x, bool train);
loom_tensor *loom_stage_conv2d(const void *layer, const loom_tensor *x, bool train);
loom_tensor *loom_stage_batchnorm2d(const void *layer, const loom_tensor *x, bool train);
loom_tensor *loom_stage_layernorm(const void *layer, const loom_tensor *x, bool train);
loom_tensor *loom_stage_relu(const void *unused, const loom_tensor *x, bool train);
loom_tensor *loom_stage_tanh(const void *unused, const loom_tensor *x, bool train);
loom_tensor *loom_stage_flatten(const void *unused, const loom_tensor *x, bool train);
/* layer points to an int: the pooling kernel (stride = kernel). */
loom_tensor *loom_stage_max_pool2d(const void *kernel, const loom_tensor *x, bool train);

/* ------------------------------------------------------------------ data */
/* An in-memory dataset: x [N, ..], y [N, ..] (copied to host once). */
typedef struct loom_dataset loom_dataset;
loom_dataset *loom_dataset_new(loom_tensor *x, loom_tensor *y);
int64_t loom_dataset_len(const loom_dataset *d);
void loom_dataset_free(loom_dataset *d);
/* Batches of a fixed size; with shuffle, epoch e's order is a permutation
 * drawn from loom_key_fold(key, e), the same on every run. */
typedef struct loom_loader loom_loader;
loom_loader *loom_loader_new(const loom_dataset *d, int64_t batch, bool shuffle, bool drop_last,
                             loom_key key);
/* The next batch (new references); false at the end of the epoch, after
 * which the next call starts the next epoch. */
bool loom_loader_next(loom_loader *l, loom_tensor **x, loom_tensor **y);
/* Makes l rank's share of each epoch among ranks processes (as torch's
 * DistributedSampler): the epoch's order, the same on every rank (same key),
 * padded by wrapping to a multiple of ranks, then every ranks-th row from
 * `rank`, so every rank runs the same number of batches. Call it before the
 * first batch (it restarts the epoch). */
loom_status loom_loader_shard(loom_loader *l, int rank, int ranks);
int64_t loom_loader_batches(const loom_loader *l);
void loom_loader_free(loom_loader *l);
/* The mean of per-batch losses weighted by batch size. */
typedef struct loom_mean_loss {
  double sum;
  int64_t count;
} loom_mean_loss;
void loom_mean_loss_add(loom_mean_loss *m, double loss, int64_t n);
double loom_mean_loss_value(const loom_mean_loss *m);

/* ------------------------------------------------------------------ parameters */

/* A named collection of tensors (the C form of a model's trainable
 * variables). It holds its own reference of each tensor: an optimizer's
 * update (loom_assign) is seen through it. */
loom_params *loom_params_new(void);
void loom_params_free(loom_params *ps);
/* Adds a trainable tensor (marked requires_grad); names are unique. */
loom_status loom_params_add(loom_params *ps, const char *name, loom_tensor *t);
/* Adds a tensor that is saved and loaded but not trained (running stats). */
loom_status loom_params_add_buffer(loom_params *ps, const char *name, loom_tensor *t);
int loom_params_count(const loom_params *ps);
/* The i-th tensor (a new reference) and its name, in the order added. */
loom_tensor *loom_params_at(const loom_params *ps, int i);
const char *loom_params_name(const loom_params *ps, int i);
bool loom_params_trainable(const loom_params *ps, int i);
/* The tensor named name (a new reference), or NULL. */
loom_tensor *loom_params_get(const loom_params *ps, const char *name);
/* Drops every gradient. */
void loom_zero_grad(loom_params *ps);
/* Scales every gradient by min(1, max_norm / (norm + 1e-6)), norm the 2-norm of
 * all of them together (torch.nn.utils.clip_grad_norm_), and returns that norm
 * (F32); both are computed at the next realization. */
loom_tensor *loom_clip_grad_norm(loom_params *ps, double max_norm);
/* safetensors: 8-byte little-endian header length, JSON header (dtype, shape,
 * data_offsets per name), raw little-endian data. Loading checks every name,
 * shape and dtype, reports all mismatches, and changes nothing on error. */
loom_status loom_params_save(const loom_params *ps, const char *path);
loom_status loom_params_load(loom_params *ps, const char *path);

/* Loading with torch's load_state_dict options (LOOM_ZERO's rule): strict,
 * as torch's default, and a dtype mismatch refused (torch converts; the
 * error says to set cast). Shapes must always match. */
typedef struct loom_load_opts {
  bool non_strict; /* missing and unexpected names go to the report, not errors
                      (torch's strict=False); a missing tensor keeps its value */
  bool cast;       /* a float entry of another float dtype (F16, BF16, F32, F64)
                      is converted to the tensor's dtype */
} loom_load_opts;
/* The names a non-strict load did not pair: tensors the file lacks, entries
 * the collection lacks. Free with loom_load_report_free. */
typedef struct loom_load_report {
  int nmissing, nunexpected;
  char **missing, **unexpected;
} loom_load_report;
/* report may be NULL; on an error it is empty and nothing changed. */
loom_status loom_params_load_ex(loom_params *ps, const char *path, loom_load_opts opts,
                                loom_load_report *report);
void loom_load_report_free(loom_load_report *report);
/* Every tensor of a safetensors file, in the file's order and under its names
 * (as safetensors' load_file), in a new collection of buffers (not trainable)
 * on device: loom_params_get(ps, "wte.weight") reads one. Every entry keeps
 * its dtype (I8, I16, U16, U32, U64 as LOOM_I8 ... LOOM_U64); a dtype no
 * loom dtype holds (F8, C64) is an error naming it. NULL on an
 * error (loom_last_error says which). */
loom_params *loom_safetensors_read(const char *path, loom_device device);
/* NumPy's .npy files (versions 1.0, 2.0, 3.0): one array, np.save's and
 * np.load's. Reading gives a new computed tensor on device holding the file's
 * values, or NULL with loom_last_error naming the file and the problem:
 * LOOM_ERR_CORRUPT for a malformed header, a shape whose bytes the data does
 * not hold exactly, a truncated file; LOOM_ERR_DTYPE for a dtype loom lacks
 * (it reads float32, float64, float16, int8 to int64, uint8 to uint64, bool;
 * the others are refused naming theirs); LOOM_ERR_SHAPE past LOOM_MAX_DIMS
 * dims; LOOM_ERR_IO for a file it cannot read. A 0-d array is a scalar
 * (LOOM_SHAPE0); big-endian descrs ('>f4') are converted, Fortran-ordered
 * arrays transposed into loom's C order, bools read as 0 or 1. */
loom_tensor *loom_npy_read(const char *path, loom_device device);
/* Computes t and writes it to path as np.save does (version 1.0, the header
 * padded to 64 bytes, C order, little-endian), whole or not at all.
 * LOOM_ERR_DTYPE for BF16, which NumPy lacks (loom_cast it to LOOM_F32). */
loom_status loom_npy_write(loom_tensor *t, const char *path);

/* ------------------------------------------------------------------ programs */

/* A compiled program: the graph between some placeholders and some outputs,
 * planned and compiled once, then run on new inputs without recording or
 * hashing. Realized tensors it reads (weights) are captured when it is compiled,
 * and its random draws keep their keys. Immutable once compiled:
 * loom_program_run may be called from several threads at once. */
typedef struct loom_program loom_program;

/* A placeholder for a program's input: a tensor with a shape and dtype but no
 * value. Ops record on it as on any tensor; realizing anything that depends on
 * it outside loom_program_run fails with LOOM_ERR_VALUE. `name` is copied
 * (letters, digits, '_'; it names the input in dumps and exported headers). */
loom_tensor *loom_input(const char *name, loom_shape shape, loom_dtype dtype, loom_device device);
/* Compiles everything between ins (loom_input placeholders, in the order the
 * program takes them) and outs. Every placeholder the outputs depend on must
 * be among ins. NULL on failure (loom_last_error says why). */
loom_program *loom_compile(loom_tensor *const *outs, int nout, loom_tensor *const *ins, int nin);
/* A dim of a program's input that takes any size when the program runs:
 * ins[input]'s dim `axis`, named `symbol` (1-64 letters, digits or '_', not
 * starting with a digit); dims named alike take one size. */
typedef struct loom_symbolic_dim {
  int input, axis;
  const char *symbol;
} loom_symbolic_dim;
/* loom_compile with input dims that take any size >= 1 (at most 8 symbols),
 * traced at the placeholders' sizes (>= 2 on a symbolic dim); every other dim
 * follows the symbols as the traced graph says, and each run checks its sizes.
 * NULL when a size or a number cannot follow the symbols (LOOM_ERR_SHAPE naming
 * the node, its op and the symbol; docs/api.md, "Symbolic programs"). Saved,
 * loaded and exported programs keep the symbols (<name>_run_dims). */
loom_program *loom_compile_symbolic(loom_tensor *const *outs, int nout, loom_tensor *const *ins,
                                    int nin, const loom_symbolic_dim *dims, int ndims);
/* The symbols of a program (0 for one compiled by loom_compile), their names,
 * and the symbol input i's dim `axis` takes (NULL when it is fixed). */
int loom_program_num_symbols(const loom_program *p);
const char *loom_program_symbol_name(const loom_program *p, int i);
const char *loom_program_input_dim_symbol(const loom_program *p, int i, int axis);
/* Runs p on ins (one tensor per input, matching its shape and dtype; lazy ones
 * are realized first) and stores new tensors in outs[0..nout) (registered
 * with the current scope, like any op's result). On failure every outs[i] is
 * NULL and the status says why. */
loom_status loom_program_run(const loom_program *p, loom_tensor *const *ins, loom_tensor **outs);
void loom_program_free(loom_program *p);
int loom_program_num_inputs(const loom_program *p);
int loom_program_num_outputs(const loom_program *p);
/* Input i's name, shape and dtype (outputs are named "out0", "out1", ...). */
const char *loom_program_input_name(const loom_program *p, int i);
loom_shape loom_program_input_shape(const loom_program *p, int i);
loom_dtype loom_program_input_dtype(const loom_program *p, int i);
const char *loom_program_output_name(const loom_program *p, int i);
loom_shape loom_program_output_shape(const loom_program *p, int i);
loom_dtype loom_program_output_dtype(const loom_program *p, int i);
/* Its IR (inputs, weights, nodes, outputs) and its schedule (each fused
 * kernel's description, each GEMM), readably. */
loom_status loom_program_dump(const loom_program *p, FILE *out);
/* A Graphviz picture of the IR, each fused kernel a cluster of the nodes it
 * computes (`dot -Tsvg path`). */
loom_status loom_program_dot(const loom_program *p, const char *path);
/* Stores p as a versioned text file (docs/PROGRAM_FORMAT.md) at path, its
 * weights in a safetensors file beside it (path + ".safetensors"). */
loom_status loom_program_save(const loom_program *p, const char *path);
/* Loads and compiles a saved program; NULL on a missing, corrupt or
 * wrong-version file (loom_last_error says which and where). */
loom_program *loom_program_load(const char *path);
/* Writes lib<name>.so and <name>.h into dir: the kernels as native code for this
 * CPU, the schedule, the weights embedded (past LOOM_EXPORT_EMBED_LIMIT bytes, in
 * <name>.weights beside it); it needs only libc, libm and pthreads; linked with
 * $CC (default cc). It exports <name>_run(inputs, outputs), or for a symbolic
 * program <name>_run_dims(dims, inputs, outputs); LOOM_ERR_VALUE where the plan
 * changes with the sizes (docs/api.md, "Exported libraries"). */
loom_status loom_program_export(const loom_program *p, const char *dir, const char *name);

/* ------------------------------------------------------------------ ONNX models */

/* A dim of the model's inputs given a size at import: the ONNX dim_param
 * `name` (or "<input>_dim<axis>" for a dim with neither value nor name). */
typedef struct loom_onnx_dim {
  const char *name;
  int64_t size;
} loom_onnx_dim;
/* An input of the model given its value at import: it becomes a constant
 * (its shape and dtype those the model declares) and the program does not
 * take it. For inputs that size things (a Reshape's shape, a Slice's bounds):
 * loom compiles shapes, so their values must be known when it does. */
typedef struct loom_onnx_input {
  const char *name;
  loom_tensor *value;
} loom_onnx_input;
/* Options (NULL for all defaults): dims fixes symbolic dims, so that the
 * program takes only those sizes there; inputs fixes inputs' values. Each list is
 * read for its count's length: dims with ndims 0 fixes nothing; a count
 * without its list is LOOM_ERR_NULL. */
typedef struct loom_onnx_opts {
  const loom_onnx_dim *dims;
  int ndims;
  const loom_onnx_input *inputs;
  int ninputs;
  /* Where the program runs (zero: the CPU): its inputs are placeholders
   * there, its weights are copied there at import. */
  loom_device device;
} loom_onnx_opts;
/* An ONNX model (ai.onnx opsets 7 to 27) as a compiled program: its inputs in
 * the model's order (graph inputs that are also initializers are weights), its
 * outputs in the model's order, its initializers as weights. Dims named by a
 * dim_param (or without a value) become the program's symbols, named as in the
 * model (letters, digits and '_' kept, others made '_'). NULL on failure:
 * loom_last_error names the file, the node, its op and the reason; a model
 * with ops loom does not import names every such node (docs/onnx.md). */
loom_program *loom_onnx_load(const char *path, const loom_onnx_opts *opts);
/* For training an imported model: loom_onnx_forward records the model's graph
 * on the caller's tensors (one per model input, in its order; dtypes and fixed
 * dims as declared, other dims any size) and stores its outputs, lazy, in
 * outs[0..nout). Its initializers come from ps by their ONNX names, added on
 * the first call (floating-point ones trainable, loom_params_add; the others
 * buffers), so loom_backward and the optimizers train them, and
 * loom_params_save/load keep them. Call it once per step, as a layer's forward. */
typedef struct loom_onnx_model loom_onnx_model;
loom_onnx_model *loom_onnx_open(const char *path);
loom_status loom_onnx_forward(loom_onnx_model *m, loom_params *ps, loom_tensor *const *ins, int nin,
                              loom_tensor **outs, int nout);
void loom_onnx_close(loom_onnx_model *m);

/* ------------------------------------------------------------------ distributed */

/* Processes over MPI, opened at run time (libloom_mpi.so: $LOOM_MPI_PLUGIN,
 * beside loom, or the loader's path); launch with `mpirun -np N prog`, a process
 * started alone being a world of one. loom_dist_init once before any collective
 * (LOOM_ERR_DIST with the reason when there is no MPI); loom_dist_finalize at
 * the end, after which collectives are refused (docs/api.md, "Processes"). */
loom_status loom_dist_init(int *argc, char ***argv);
loom_status loom_dist_finalize(void);
/* This process's rank and the number of processes (0 and 1 before
 * loom_dist_init); whether it was called (and loom_dist_finalize not yet). */
int loom_dist_rank(void);
int loom_dist_size(void);
bool loom_dist_initialized(void);
/* Whether MPI can be opened here; *about (may be NULL) says which MPI and
 * plugin ("Open MPI v4.1.4 (/usr/lib/libloom_mpi.so)") or, when it cannot,
 * why not. */
bool loom_dist_available(const char **about);
/* Whether collectives on CUDA tensors go through NCCL (libnccl.so.2, 2.10 or
 * later, or the library $LOOM_NCCL names; LOOM_NCCL=0: never), queued on the
 * device's stream; *about (when not NULL) its version, or why not. Without
 * it they go through the host (copied down, run by MPI, copied back). */
bool loom_dist_nccl_available(const char **about);
/* How long a collective waits for the other ranks before it fails with
 * LOOM_ERR_DIST (seconds, > 0; default 60, or $LOOM_DIST_TIMEOUT). */
loom_status loom_dist_set_timeout(double seconds);

/* Collectives are ops: they record nodes, run as steps of the realized graph
 * or compiled program (every rank must run the same ones, in the same order)
 * and carry no gradient (as torch.distributed's). CPU or CUDA tensors; every
 * rank's tensor has the same shape and dtype. */
/* Every rank's t combined elementwise by op (LOOM_REDUCE_SUM, _MEAN: the sum
 * over the number of ranks, floats only, _MAX, _MIN); every rank gets the
 * result. BF16 and F16 are combined in F32; BOOL takes MAX (any) and MIN
 * (all). */
loom_tensor *loom_all_reduce(const loom_tensor *t, loom_reduction op);
/* Rank root's t, on every rank. */
loom_tensor *loom_broadcast(const loom_tensor *t, int root);
/* Every rank's t joined along axis in rank order (that dim grows size-fold). */
loom_tensor *loom_all_gather(const loom_tensor *t, int axis);

/* Data-parallel training (PyTorch's DistributedDataParallel): loom_ddp makes
 * every rank's trainable tensors rank 0's; then loom_optim_step averages their
 * gradients across ranks inside the step's program, in buckets whose
 * all-reduces run while the rest of the step computes, and every rank ends each
 * step with the same bits. Needs loom_dist_init; loom_params_save then writes on
 * rank 0 only (docs/api.md, "Data-parallel training"). */
typedef struct loom_ddp_opts { /* options: LOOM_ZERO's rule */
  int64_t bucket_bytes;        /* DDP's default 25 MiB */
  /* The first bucket (the last parameters' gradients, made first) holds up
     to this many bytes, so that its all-reduce starts early and runs while
     the backward pass computes the rest. DDP's default 1 MiB, or
     bucket_bytes where that is smaller. */
  int64_t first_bucket_bytes;
} loom_ddp_opts;
#define LOOM_DDP_DEFAULTS                                                                          \
  ((loom_ddp_opts){.bucket_bytes = (int64_t)25 << 20, .first_bucket_bytes = (int64_t)1 << 20})
loom_status loom_ddp(loom_params *ps, loom_ddp_opts opts);

/* ------------------------------------------------------------------ optimizers */

/* Optimizers own their state (momentum buffers, moments). loom_optim_step
 * records the updates as lazy assignments: the next realization runs forward,
 * backward and every update as one program. Options follow LOOM_ZERO's rule (a
 * zero assigned later counts as left zero: o.beta1 = 0 is 0.9);
 * LOOM_*_DEFAULTS spell torch's defaults out (docs/api.md, "Optimizers"). */
typedef struct loom_optim loom_optim;

typedef struct loom_sgd_opts {
  double lr;                                /* torch's default 1e-3 */
  double momentum, dampening, weight_decay; /* 0 */
  bool nesterov, maximize;                  /* nesterov: momentum > 0, dampening 0 */
} loom_sgd_opts;

typedef struct loom_adam_opts {
  double lr;           /* torch's default 1e-3 */
  double beta1, beta2; /* 0.9, 0.999; each in [0, 1) */
  double eps;          /* 1e-8 */
  double weight_decay; /* 0 (Adam), 1e-2 (AdamW) */
  bool amsgrad, maximize;
} loom_adam_opts;

#define LOOM_SGD_DEFAULTS ((loom_sgd_opts){.lr = 1e-3})
#define LOOM_ADAM_DEFAULTS ((loom_adam_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8})
#define LOOM_ADAMW_DEFAULTS                                                                        \
  ((loom_adam_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2})

/* NULL on bad options (the error says which). */
loom_optim *loom_sgd(loom_params *ps, loom_sgd_opts opts);
loom_optim *loom_adam(loom_params *ps, loom_adam_opts opts);
loom_optim *loom_adamw(loom_params *ps, loom_adam_opts opts);
loom_status loom_optim_step(loom_optim *o);
void loom_optim_zero_grad(loom_optim *o);
loom_status loom_optim_set_lr(loom_optim *o, double lr);
/* A parameter group, as torch's param_groups: the optimizer's parameters for
 * which select(name, shape, ud) is true learn at lr_scale times its learning
 * rate (loom_optim_set_lr's too) with their own weight_decay. GPT-2 recipes
 * give biases and norms (fewer than 2 dims) no decay. Selecting no parameter
 * is an error. */
loom_status loom_optim_group(loom_optim *o,
                             bool (*select)(const char *name, loom_shape shape, void *ud), void *ud,
                             double lr_scale, double weight_decay);
double loom_optim_lr(const loom_optim *o);
/* Linear warmup from 0 over `warmup` steps to max_lr (max_lr * (step + 1) /
 * warmup, step 0-based), then a cosine down to min_lr at step `total`, min_lr
 * after: pass it to loom_optim_set_lr before each step (a rate is data, so
 * nothing recompiles). NAN for a negative step, warmup > total or a negative rate. */
double loom_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, double max_lr,
                             double min_lr);
void loom_optim_free(loom_optim *o);

/* ------------------------------------------------------------------ stats */

typedef struct loom_stats {
  uint64_t graphs_compiled;          /* graph -> program cache misses: graphs planned for their
                                        sizes, and lazy families made (at their second size) */
  uint64_t graph_cache_hits;         /* graph -> program cache hits, and graphs run as an
                                        instance of their family (nothing planned) */
  uint64_t kernels_compiled;         /* kernels built by a backend */
  uint64_t kernel_cache_hits;        /* in-memory kernel cache hits */
  uint64_t disk_cache_hits;          /* kernels loaded from the disk cache */
  uint64_t kernels_launched;         /* generated kernels run */
  uint64_t gemm_calls;               /* BLAS calls */
  uint64_t compile_ns;               /* time spent compiling kernels */
  uint64_t realizations;             /* programs run */
  uint64_t nodes_recorded;           /* IR nodes created */
  uint64_t bytes_live;               /* tensor buffer bytes allocated now */
  uint64_t bytes_peak;               /* most bytes_live since the last reset */
  uint64_t device_bytes_live;        /* CUDA device buffer bytes allocated now (all devices) */
  uint64_t device_bytes_peak;        /* most device_bytes_live since the last reset */
  uint64_t kernels_loaded;           /* compiled code loaded now (CPU JIT objects, CUDA modules) */
  uint64_t kernels_unloaded;         /* code unloaded: evicted from the kernel cache, run by no
                                        program (LOOM_JIT_MAX_KERNELS bounds what stays) */
  uint64_t generic_kernels_compiled; /* of kernels_compiled, shape-generic ones (they
                                        read their sizes at run time: loom_set_dynamic) */
  uint64_t generic_kernel_uses;      /* kernel steps compiled to a generic kernel (new or cached) */
  uint64_t program_sizes_planned;    /* symbolic programs planned at sizes they had not run at
                                        (loom_compile_symbolic), making and checking their plan
                                        templates included */
  uint64_t program_sizes_from_template; /* symbolic programs run at sizes they had not run at
                                           from their plan for every size, without planning */
  uint64_t in_place_updates;            /* realizations that wrote a tensor's new value into its
                                           old buffer (loom_assign(t, loom_where(mask, x, t)) where
                                           nothing else holds t's old value: a KV cache's row) */
  uint64_t collectives_run;             /* collectives across processes (loom_all_reduce, loom_ddp's
                                           buckets, ...) this process ran */
  uint64_t collectives_overlapped;      /* of them, all-reduces that ran on while later steps of
                                           their program computed */
  uint64_t collective_bytes;            /* the bytes this process put into them */
  uint64_t gemms_from_windows;          /* convolution products that read their terms from the
                                           image itself, with no im2col matrix (docs/gemm.md) */
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
/* Waits until everything queued on device has finished (work on a CUDA device
 * is asynchronous: realizing queues it, and only a value reaching the host
 * waits). The CPU has nothing to wait for. For timing device work. */
loom_status loom_synchronize(loom_device device);
/* A CUDA device's peak memory bandwidth in GB/s (from its memory clock and bus
 * width), or 0 when unknown or not a device. */
double loom_cuda_peak_bandwidth(int index);

/* Threads that run kernels and BLAS (default: LOOM_NUM_THREADS, else the cores). */
loom_status loom_set_num_threads(int n);
int loom_num_threads(void);
/* Fusion on (the default) or off: one kernel per op, for comparison and tests.
 * LOOM_NO_FUSE=1 turns it off at start. */
void loom_set_fusion(bool enabled);
bool loom_fusion_enabled(void);
/* Shape-generic kernels (CPU and CUDA): AUTO (the default) compiles a kernel met
 * again over other sizes once more, reading its sizes at run time, to serve every
 * size; ALWAYS does so at first sight; OFF specializes every kernel. A generic
 * kernel's sums may round differently, so under AUTO the sizes met first can
 * change a result's last bits; OFF does not. LOOM_DYNAMIC=auto|off|always sets it
 * at start (docs/api.md, "Shape-generic kernels"). */
typedef enum loom_dynamic { LOOM_DYNAMIC_AUTO, LOOM_DYNAMIC_OFF, LOOM_DYNAMIC_ALWAYS } loom_dynamic;
loom_status loom_set_dynamic(loom_dynamic mode);
loom_dynamic loom_dynamic_mode(void);

/* The on-disk kernel cache: LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else
 * ~/.cache/loom. NULL when it is unusable (then kernels are cached in memory
 * only, with one warning). */
const char *loom_cache_dir(void);
typedef struct loom_cache_info {
  uint64_t entries;   /* kernel objects on disk */
  uint64_t bytes;     /* their total size */
  uint64_t max_bytes; /* the cap (LOOM_CACHE_MAX_BYTES, default 1 GiB): past it the
                         entries least recently used are removed */
} loom_cache_info;
loom_status loom_cache_info_get(loom_cache_info *info);
/* Removes every kernel object from the disk cache (compiled code already
 * loaded in this process stays usable). */
loom_status loom_cache_clear(void);
/* A description of the code generator's target (LLVM version, triple, CPU,
 * features), as it enters the kernel cache keys. */
const char *loom_target_id(void);
/* The BLAS loom calls: the library's path, its version and build ("OpenBLAS 0.3.21
 * DYNAMIC_ARCH ..."), the kernels it runs ("SkylakeX") and why those ("OpenBLAS's own
 * detection", "OPENBLAS_CORETYPE=... (yours)", or that loom asked for them because
 * OpenBLAS fell back to older kernels than the CPU has). Any pointer may be NULL. */
void loom_blas_info(const char **library, const char **version, const char **core,
                    const char **reason);
/* Which GEMM runs F32 and F64 products (LOOM_GEMM): "loom" (loom's own for all),
 * "blas" (OpenBLAS for all), "auto" (loom's where it was measured faster,
 * OpenBLAS elsewhere; loom's for all when OpenBLAS runs narrower vectors than
 * the CPU has) or "invalid" (LOOM_GEMM holds something else: products fail).
 * *why (may be NULL) says which case holds. BF16 and F16 are always loom's. */
const char *loom_gemm_choice(const char **why);
/* Whether BF16 matrix products run on the CPU's AMX tiles (loom's own GEMM):
 * the CPU has AMX-BF16, Linux granted the tiles to this process and LOOM_AMX
 * is not 0. Otherwise *why_not (may be NULL) says why; NULL when they do. */
bool loom_cpu_amx(const char **why_not);
/* How BF16 matrix products of more than a few rows run on this CPU:
 * "amx" (AMX tiles, as loom_cpu_amx), "avx512-bf16" (AVX512-BF16's dot
 * products of term pairs, vdpbf16ps), or "widened" (operands widened to F32
 * as they are packed, F32 products). Every way sums in F32; the first two
 * flush denormal operands and products to zero, as the instructions do. */
const char *loom_cpu_bf16_products(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H */
