/*
 * frontend/: the public op functions. Each validates its inputs (NULL, error
 * tensors, shapes, dtypes, devices, axes) and records nodes; nothing computes.
 *
 * Inside the folder, composite ops are built from node builders (nb_*): they
 * take borrowed nodes, return a new reference, and cannot fail except for
 * running out of memory (NULL, which every builder passes on).
 */
#ifndef LOOM_FRONTEND_H
#define LOOM_FRONTEND_H

#include "ir/ir.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------ validation */
/* NULL when t is a good tensor; else a new error tensor to return (t NULL ->
 * LOOM_ERR_NULL naming the op, t an error tensor -> the same error). */
loom_tensor *lm_check(const char *op, const loom_tensor *t);
/* An error about two operands, "<op>: <a> <sep> <b>: <what>" (the shapes as
 * [2,3]): loom_matmul's "[4,2] @ [3,1]: inner dimensions 2 and 3 differ". */
loom_tensor *lm_pair_error(loom_status st, const char *op, const loom_shape *a, const char *sep,
                           const loom_shape *b, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Validates a shape given by the user (ndim, negative dims, overflowing size). */
loom_tensor *lm_check_shape(const char *op, const loom_shape *s, loom_dtype dtype);
loom_tensor *lm_check_dtype(const char *op, loom_dtype dtype);
loom_tensor *lm_check_device(const char *op, loom_device device);
loom_tensor *lm_check_same_device(const char *op, const lm_node *a, const lm_node *b);
/* Normalizes a possibly negative axis for a tensor of `ndim` dims. */
bool lm_axis(int *axis, int ndim);
/* NULL when *axis names one of ndim dims (normalized in place), else an
 * LOOM_ERR_AXIS error tensor naming op, the axis and the rank. */
loom_tensor *lm_check_axis(const char *op, int *axis, int ndim);
/* A value filling an integer tensor, as torch.full takes it: finite and in
 * the dtype's range once truncated toward zero (2.5 is 2; 300 for U8 is
 * refused, never saturated to 255). Floats and bools take any value. */
loom_tensor *lm_check_fill(const char *op, loom_dtype dtype, double value);
/* perm moves dim ax of nd last, the others in order; back (may be NULL)
 * undoes it. */
void lm_axis_last(int nd, int ax, int *perm, int *back);
/* An option's value under include/loom.h's rule: a field left zero takes
 * torch's default `fallback`, LOOM_ZERO (-0.0) is a real zero, anything else
 * is itself (the caller validates it). */
double lm_option(double value, double fallback);
/* Data-dependent input, one rule for every op (README, "Reliability"): a
 * value an op cannot take fails the call when its data is at hand (realized,
 * on any device), else the run that computes it (an LM_CHECK node), with the
 * same message naming the op the user called and the value. Each returns a
 * new reference to what the op reads instead of `values` (itself, checked;
 * or the check's node), or the error tensor. Indices (embedding rows,
 * gather positions, class labels) in [0, table's dim axis), or `ignore`
 * where has_ignore; a slice's start in [0, t's dim axis - update's]; weights
 * finite and >= 0, each row along the last dim with one above 0. */
loom_tensor *lm_checked_index(const char *op, const loom_tensor *index, const lm_node *table,
                              int axis, bool has_ignore, int64_t ignore);
loom_tensor *lm_checked_start(const char *op, const loom_tensor *start, const lm_node *t,
                              const lm_node *update, int axis);
loom_tensor *lm_checked_weights(const char *op, const loom_tensor *probs);
/* loom_embedding_f and loom_one_hot naming op (index_select, gather and the
 * sorts build on them); without `check`, for indices in range by construction
 * (a sort's positions, a clamped offset), which the rule would only cost. */
loom_tensor *lm_gather_rows(const char *op, const loom_tensor *indices, const loom_tensor *weight,
                            bool check);
loom_tensor *lm_one_hot(const char *op, const loom_tensor *labels, int64_t num_classes, bool check);
/* For calls that return a status: err's status (LOOM_OK for NULL), err
 * freed; its message stays recorded as the thread's error. */
loom_status lm_error_status(loom_tensor *err);
/* The result of a builder: a handle, or an OOM error tensor for NULL. */
loom_tensor *lm_result(lm_node *n);

/* ------------------------------------------------------------ dtypes */
loom_dtype lm_promote(loom_dtype a, loom_dtype b);
/* torch.result_type of two tensors (0-d tensors weigh less). */
loom_dtype lm_result_dtype(const lm_node *a, const lm_node *b);
/* The dtype an op with a tensor of `t` and a scalar `s` computes in. */
loom_dtype lm_scalar_promote(loom_dtype t, double s);
/* The value scalar s takes in dtype dt (lm_scalar_promote's result): itself
 * for a float dt; for an integer dt, s modulo 2^bits, as PyTorch converts a
 * Python int (U8 + 300 adds 44, U8 + -1 adds 255), or an error naming op when
 * s is outside the 64-bit integers (torch: "Overflow when unpacking long"). */
loom_tensor *lm_scalar_value(const char *op, loom_dtype dt, double s, double *value);
/* What a composite torch computes in float runs in: F32 for BF16, F16 and the
 * integers, the dtype itself for F32 and F64; and the dtype it returns in. */
static inline loom_dtype lm_compute_dtype(loom_dtype dt) {
  return dt == LOOM_F64 ? LOOM_F64 : LOOM_F32;
}
static inline loom_dtype lm_float_result(loom_dtype dt) {
  return loom_dtype_is_float(dt) ? dt : LOOM_F32;
}
bool lm_broadcast_shape(const loom_shape *a, const loom_shape *b, loom_shape *out);

/* ------------------------------------------------------------ node builders */
lm_node *nb_const(double value, loom_shape shape, loom_dtype dtype, loom_device device);
/* n (an input-free leaf) with `dims` (bit d: dim d) marked as sizes the user
 * wrote when the user called op directly, not a composite op deriving them
 * from another tensor's (lm_node.fixed_dims; lm_called_by_user); n itself. */
lm_node *nb_user_sized(lm_node *n, const char *op, uint8_t dims);
/* Every dim of shape (nb_user_sized's dims for a whole leaf). */
static inline uint8_t nb_all_dims(const loom_shape *s) { return (uint8_t)((1u << s->ndim) - 1); }
lm_node *nb_cast(lm_node *a, loom_dtype dtype);
lm_node *nb_reshape(lm_node *a, loom_shape shape);
lm_node *nb_expand(lm_node *a, loom_shape shape); /* same ndim; size-1 dims grow */
lm_node *nb_broadcast(lm_node *a, loom_shape shape);
lm_node *nb_permute(lm_node *a, const int *perm);
lm_node *nb_unary(lm_op op, lm_node *a);              /* dtype kept */
lm_node *nb_binary(lm_op op, lm_node *a, lm_node *b); /* same shape/dtype; comparisons -> BOOL */
lm_node *nb_where(lm_node *c, lm_node *a, lm_node *b);
/* Reduction keeping dims; dtype of a (ARGMAX/ARGMIN: I64). */
lm_node *nb_reduce(lm_op op, lm_node *a, uint32_t axes);
lm_node *nb_squeeze_axes(lm_node *a, uint32_t axes);
/* Per dim: out[i] = a[start + i * step], out extents given by shape. */
lm_node *nb_slice(lm_node *a, loom_shape shape, const int64_t *start, const int64_t *step);
/* a's slices along dim d in reverse: a slice from n - 1 by -1 whose start is
 * from the end, so that over a symbolic dim it follows the size (a itself
 * for n <= 1). */
lm_node *nb_reverse(lm_node *a, int d);
/* Pads (lo, hi >= 0 per dim) with value. */
lm_node *nb_pad(lm_node *a, const int64_t *lo, const int64_t *hi, double value);
/* [.., M, K] @ [.., K, N], batch dims equal, floats (LM_MATMUL). */
lm_node *nb_matmul(lm_node *a, lm_node *b);
/* Running sums of a (F32, F64 or I64) along axis, from its end if reverse (LM_SCAN). */
lm_node *nb_scan(lm_node *a, int axis, bool reverse);
/* Swaps the last two dims. */
lm_node *nb_transpose_last(lm_node *a);
/* Whether x is a transpose of its last two dims (a weight read as W^T). */
bool nb_is_transpose_last(const lm_node *x);
/* Releases up to four builder results (NULL ignored). */
void nb_drop(lm_node *a, lm_node *b, lm_node *c, lm_node *d);

/* ------------------------------------------------------------ devices */
/* n's values on `device`, computed and copied now (n itself is realized
 * first). While gradients flow through n, the copy is an LM_COPY keeping n as
 * its source, so that autograd copies the copy's gradient back to n's device. */
loom_status lm_copy_node(const char *op, lm_node *n, loom_device device, lm_node **out);

/* Defines public op `name`, whose body follows as name_impl: errors raised by
 * the ops it runs name it first (lm_called_enter). */
#define LM_PUBLIC(ret, name, params, args)                                                         \
  static ret name##_impl params;                                                                   \
  ret name params {                                                                                \
    const char *previous_ = lm_called_enter(#name);                                                \
    ret result_ = name##_impl args;                                                                \
    lm_called_leave(previous_);                                                                    \
    return result_;                                                                                \
  }                                                                                                \
  static ret name##_impl params

#endif
