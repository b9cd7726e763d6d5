/* ONNX import (docs/onnx.md): the internal header, a section per file. */
#ifndef LOOM_IO_ONNX_H
#define LOOM_IO_ONNX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "loom.h"
#include "onnx.pb-c.h"

/* The newest ai.onnx opset whose semantics the op table follows, and the oldest read. */
#define ONNX_OPSET_MIN 7
#define ONNX_OPSET_MAX 27
/* Caps on what a model may ask of the importer: an absurd model is refused
 * before it allocates. */
#define ONNX_MAX_FILE_BYTES ((size_t)2 << 30) /* protobuf's own limit */
#define ONNX_MAX_NODE_IO 64
#define ONNX_MAX_NESTING 64

/* ------------------------------------------------------------ onnx_read.c */

/* A model file, parsed. */
typedef struct onnx_file {
  const char *path;
  char *dir; /* the model's folder: external data is read relative to it */
  Onnx__ModelProto *model;
  int64_t opset; /* of the ai.onnx domain */
} onnx_file;

/* Reads and parses path (LOOM_OK, or a status with the reason in why). */
loom_status onnx_file_read(onnx_file *f, const char *path, char *why, size_t why_len);
void onnx_file_close(onnx_file *f);
/* The loom dtype of an ONNX TensorProto.DataType, or -1 with its name in *name. */
int onnx_dtype_to_loom(int32_t onnx_type, const char **name);
/* A TensorProto's value as a realized CPU tensor. dir is where external data
 * lives (NULL refuses external data). NULL with the reason in why. */
loom_tensor *onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *dir, char *why,
                                    size_t why_len);

/* ------------------------------------------------------------ onnx_narrow.c */

/* TensorProto.DataType values the generated schema may not name. */
#define ONNX_UINT2 25
#define ONNX_INT2 26
/* Whether loom holds the ONNX type in a wider dtype (float8, float4, int4,
 * uint4, int2, uint2), keeping its values in the type's set. */
bool onnx_dtype_is_narrow(int32_t onnx_type);
/* The loom dtype holding an ONNX type: onnx_dtype_to_loom's, or the wider one
 * of a narrow type (F16 for the float8s and float4, I8 or U8 for the rest);
 * -1 with the name in *name when loom holds neither. */
int onnx_dtype_held(int32_t onnx_type, const char **name);
/* A narrow type's bits per element (0 for other types). */
int onnx_narrow_bits(int32_t onnx_type);
/* count elements packed as ONNX stores the type (LSB first) into the held
 * dtype's values at out; LOOM_ERR_CORRUPT when nbytes does not fit count. */
loom_status onnx_narrow_unpack(int32_t onnx_type, const uint8_t *packed, size_t nbytes,
                               int64_t count, void *out);
/* x cast to the narrow type as ONNX's Cast does (floats rounded to nearest
 * even, saturate as its attribute; integers truncated and wrapped), held in
 * its loom dtype. x itself (a new reference) when the type is not narrow. */
loom_tensor *onnx_narrow_cast(loom_tensor *x, int32_t onnx_type, bool saturate);
/* v rounded and saturated to the narrow type's range (QuantizeLinear). */
loom_tensor *onnx_narrow_saturate(loom_tensor *v, int32_t onnx_type);

/* ------------------------------------------------------------ onnx_describe.c */

/* What the file declares (inputs, outputs, ops with counts, parameters) and
 * the nodes loom cannot import, printed to out; builds nothing. */
loom_status onnx_describe(const char *path, FILE *out);

/* ------------------------------------------------------------ onnx_import.c */

/* A value of the graph while it is imported. */
typedef struct onnx_value {
  const char *name;
  loom_tensor *t; /* one reference, released when the import ends */
  /* Computed from no input of the model: its data is known at import (a
   * constant, an initializer, a shape of fixed dims); read it with onnx_ints. */
  bool known;
  /* Known only at the traced sizes of the model's symbolic dims (a Shape of a
   * tensor that follows a symbol, and what is computed from it): it may size
   * things, which loom follows symbolically, but not be data. */
  bool traced;
  /* Follows a symbolic dim of an input. */
  bool symbolic;
  /* The narrow ONNX type (onnx_narrow.c) whose values t holds in a wider
   * dtype; 0 when t's dtype is the value's ONNX type. */
  int32_t narrow;
} onnx_value;

typedef struct onnx_import onnx_import;

/* One node while its op builds it. */
typedef struct onnx_node {
  onnx_import *im;
  const Onnx__NodeProto *proto;
  int64_t opset;
  int nin, nout;
  onnx_value *in[ONNX_MAX_NODE_IO]; /* NULL for an omitted optional input */
  loom_tensor *out[ONNX_MAX_NODE_IO];
  /* Set by onnx_out_narrow; otherwise an output of an input's held dtype
   * takes that input's narrow type (ONNX ops keep their input's type). */
  int32_t out_narrow[ONNX_MAX_NODE_IO];
  bool out_typed[ONNX_MAX_NODE_IO];
  uint64_t data_reads; /* a bit per input read as data (onnx_in), not as numbers */
  char why[512];
} onnx_node;

/* Refuses the node: why names the reason; returns status. */
loom_status onnx_refuse(onnx_node *n, loom_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Input i as a tensor for data (NULL when omitted); refused when its value is
 * only known at traced sizes. */
loom_tensor *onnx_in(onnx_node *n, int i);
/* The device the import records on (loom_onnx_opts.device; in
 * loom_onnx_forward, its inputs'): every tensor an op makes goes there. */
loom_device onnx_device(const onnx_node *n);
loom_device onnx_import_device(const onnx_import *im);
/* 0 .. size-1 (dtype) as a tensor whose length follows the symbolic dim that
 * traces at size in this trace (derived from an input with that dim), so that
 * an arange over a symbolic size stays one; NULL when no symbol traces at size. */
loom_tensor *onnx_symbol_positions(onnx_node *n, int64_t size, loom_dtype dtype);
/* t (a realized CPU tensor, taken) realized on the import's device, NULL with
 * the import failed (naming what and name) when it cannot be. */
loom_tensor *onnx_on_device(onnx_import *im, loom_tensor *t, const char *what, const char *name);
bool onnx_has_in(const onnx_node *n, int i);
/* Whether input i's size along axis is the same in every trace: false when it
 * follows a symbolic dim of the model (an op that unrolls over it refuses). */
bool onnx_in_dim_fixed(const onnx_node *n, int i, int axis);
/* Input i's values read at import as int64 (at most cap of them); refused when
 * the input is computed from the model's inputs. */
loom_status onnx_ints(onnx_node *n, int i, int64_t *out, int cap, int *count);
loom_status onnx_doubles(onnx_node *n, int i, double *out, int cap, int *count);
/* Attributes; a default where absent. */
const Onnx__AttributeProto *onnx_attr(const onnx_node *n, const char *name);
int64_t onnx_attr_int(const onnx_node *n, const char *name, int64_t fallback);
double onnx_attr_float(const onnx_node *n, const char *name, double fallback);
/* The string attribute, or fallback, copied into buf (NUL-terminated, cut to len). */
const char *onnx_attr_string(const onnx_node *n, const char *name, const char *fallback, char *buf,
                             size_t len);
/* The ints attribute into out (at most cap); *count -1 when absent. */
loom_status onnx_attr_ints(onnx_node *n, const char *name, int64_t *out, int cap, int *count);
loom_status onnx_attr_floats(onnx_node *n, const char *name, double *out, int cap, int *count);
/* An axis attribute or value normalized for rank (negative counts from the
 * end); refused outside [-rank, rank). */
loom_status onnx_axis(onnx_node *n, int64_t axis, int rank, int *out);
/* Sets output i, taking the reference. */
void onnx_out(onnx_node *n, int i, loom_tensor *t);
/* Sets output i as onnx_out does, as a value of ONNX type narrow (0: of its
 * loom dtype). */
void onnx_out_narrow(onnx_node *n, int i, loom_tensor *t, int32_t narrow);
/* The narrow ONNX type input i holds (0 when none or omitted). */
int32_t onnx_in_narrow(const onnx_node *n, int i);

/* For onnx_control.c: values in every trace, scopes and subgraphs. */
#define ONNX_TRACES 2
typedef struct onnx_ref {
  loom_tensor *t[ONNX_TRACES];
  bool known, symbolic;
  int32_t narrow;
} onnx_ref;
int onnx_ntraces(const onnx_import *im);
/* The import holds its references outside every scope, so that dropping one
 * never removes a registration the caller's scope holds for the same tensor:
 * onnx_own takes a reference just made in the current scope out of it,
 * onnx_drop releases one so held (NULL is ignored by both). */
loom_tensor *onnx_own(loom_tensor *t);
void onnx_drop(loom_tensor *t);
/* The import's first failure, or LOOM_OK. */
loom_status onnx_status(const onnx_import *im);
loom_status onnx_fail(onnx_import *im, loom_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The value named so, its references borrowed; false when there is none. */
bool onnx_lookup(onnx_import *im, const char *name, onnx_ref *out);
/* Defines name in the current scope, taking the references ("" drops them). */
loom_status onnx_define(onnx_import *im, const char *name, onnx_ref *value);
/* Builds g in a scope of its own inside the current one, its inputs bound to
 * args (borrowed), and gives its outputs as new references. */
loom_status onnx_subgraph(onnx_import *im, const Onnx__GraphProto *g, const char *label,
                          const onnx_ref *args, int nargs, onnx_ref *outs, int nouts);

/* ------------------------------------------------------------ onnx_control.c */

/* If, Loop and Scan: their subgraphs built in every trace (onnx_control.c). */
loom_status onnx_build_control(onnx_import *im, const Onnx__NodeProto *p, const char *label,
                               int64_t opset);

/* ------------------------------------------------------------ onnx_ops*.c */

typedef loom_status (*onnx_op_fn)(onnx_node *n);
typedef struct onnx_op {
  const char *op_type;
  onnx_op_fn build;
  /* The name new nodes are recorded under (lm_node.made_by) and errors start with. */
  const char *label;
  unsigned flags;
} onnx_op;
enum {
  ONNX_RANDOM = 1,      /* its outputs are never known at import */
  ONNX_READS_SHAPE = 2, /* its outputs are its input's sizes (Shape, Size) */
  ONNX_CONTROL = 4,     /* built by onnx_build_control: its subgraphs run at import */
};
#define ONNX_OP(name, fn)                                                                          \
  { #name, fn, "onnx_" #name, 0 }
#define ONNX_OP_FLAGS(name, fn, flags)                                                             \
  { #name, fn, "onnx_" #name, flags }

/* The op table: every op the importer builds, in families. NULL when unknown. */
const onnx_op *onnx_find_op(const char *op_type);
extern const onnx_op onnx_ops_elementwise[];
extern const int onnx_ops_elementwise_count;
extern const onnx_op onnx_ops_tensor[];
extern const int onnx_ops_tensor_count;
extern const onnx_op onnx_ops_nn[];
extern const int onnx_ops_nn_count;
extern const onnx_op onnx_ops_reduce[];
extern const int onnx_ops_reduce_count;
extern const onnx_op onnx_ops_attention[];
extern const int onnx_ops_attention_count;
extern const onnx_op onnx_ops_loss[];
extern const int onnx_ops_loss_count;
extern const onnx_op onnx_ops_quant[];
extern const int onnx_ops_quant_count;
extern const onnx_op onnx_ops_resize[];
extern const int onnx_ops_resize_count;
extern const onnx_op onnx_ops_control[];
extern const int onnx_ops_control_count;
extern const onnx_op onnx_ops_indexing[];
extern const int onnx_ops_indexing_count;
extern const onnx_op onnx_ops_misc[];
extern const int onnx_ops_misc_count;
extern const onnx_op onnx_ops_sampling[];
extern const int onnx_ops_sampling_count;
extern const onnx_op onnx_ops_signal[];
extern const int onnx_ops_signal_count;
extern const onnx_op onnx_ops_rnn[];
extern const int onnx_ops_rnn_count;

/* Conv's attributes applied to x, w and b (onnx_ops_nn.c). */
loom_status onnx_conv(onnx_node *n, loom_tensor *x, loom_tensor *w, loom_tensor *b,
                      loom_tensor **out);

/* Helpers the families share (onnx_ops.c). */
/* I64 ones, one per position of x along axis: a tensor whose length follows
 * x's dim there (a symbolic one included) and that depends on no value. */
loom_tensor *onnx_ones_along(loom_tensor *x, int axis);
int onnx_rank(const loom_tensor *t);
/* CumSum's and CumProd's axis (input 1) and their exclusive and reverse attributes. */
loom_status onnx_running_axis(onnx_node *n, loom_tensor *x, int *axis, bool *exclusive,
                              bool *reverse);
/* The dims from the `axis` attribute (default -1) to the last (the norms'). */
loom_status onnx_trailing_axes(onnx_node *n, int rank, int *axes, int *count);
bool onnx_is_integer(loom_dtype dt);
bool onnx_is_float(loom_dtype dt);
/* An integer dtype's least and greatest values as doubles that convert back
 * exactly (-inf and inf for a float dtype). */
void onnx_int_range(loom_dtype dt, double *lo, double *hi);
loom_shape onnx_shape(const loom_tensor *t);
/* A 0-d tensor of dtype holding value. */
loom_tensor *onnx_scalar_like(double value, const loom_tensor *like);

#endif
