/*
 * Reading an ONNX model file: the protobuf parsed by protobuf-c from the
 * schema in io/onnx/onnx.proto, and tensors (initializers, Constant nodes'
 * values, test data) made from TensorProtos, their data inline or external.
 *
 * A model comes from outside. Before protobuf-c parses it (recursively), a
 * scan of the wire format bounds how deeply its messages nest: a graph inside
 * an attribute inside a node inside a graph... would otherwise take the stack.
 * A tensor's data must be exactly as long as its dims say; external data must
 * lie inside the model's folder.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/onnx/onnx.h"

static loom_status failf(char *why, size_t len, loom_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static loom_status failf(char *why, size_t len, loom_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return st;
}

/* ------------------------------------------------------------ nesting */

/* The messages that hold messages, and which of their fields do. */
enum {
  M_MODEL,
  M_GRAPH,
  M_NODE,
  M_ATTR,
  M_VALUE_INFO,
  M_TYPE,
  M_TYPE_TENSOR,
  M_TYPE_INNER,
  M_SHAPE,
  M_TENSOR,
  M_SPARSE,
  M_LEAF
};

static int submessage(int kind, uint32_t field) {
  switch (kind) {
  case M_MODEL: return field == 7 ? M_GRAPH : field == 8 ? M_LEAF : -1;
  case M_GRAPH:
    if (field == 1) return M_NODE;
    if (field == 5) return M_TENSOR;
    if (field == 15) return M_SPARSE;
    if (field == 11 || field == 12 || field == 13) return M_VALUE_INFO;
    return -1;
  case M_NODE: return field == 5 ? M_ATTR : -1;
  case M_ATTR:
    if (field == 5 || field == 10) return M_TENSOR;
    if (field == 6 || field == 11) return M_GRAPH;
    if (field == 22 || field == 23) return M_SPARSE;
    if (field == 14 || field == 15) return M_TYPE;
    return -1;
  case M_VALUE_INFO: return field == 2 ? M_TYPE : -1;
  case M_TYPE:
    if (field == 1) return M_TYPE_TENSOR;
    if (field == 4 || field == 9) return M_TYPE_INNER;
    if (field == 8) return M_SHAPE;
    return -1;
  case M_TYPE_INNER: return field == 1 ? M_TYPE : -1;
  case M_TYPE_TENSOR: return field == 2 ? M_SHAPE : -1;
  case M_SHAPE: return field == 1 ? M_LEAF : -1;
  case M_TENSOR: return field == 13 ? M_LEAF : -1;
  case M_SPARSE: return field == 1 || field == 2 ? M_TENSOR : -1;
  default: return -1;
  }
}

static bool read_varint(const uint8_t *p, size_t end, size_t *at, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= end) return false;
    uint8_t b = p[(*at)++];
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return true;
    }
  }
  return false;
}

/* Walks the wire format of a ModelProto without recursion, refusing messages
 * nested deeper than ONNX_MAX_NESTING and malformed framing. */
static loom_status check_nesting(const uint8_t *p, size_t size, char *why, size_t len) {
  struct frame {
    size_t end;
    int kind;
  } stack[ONNX_MAX_NESTING + 1];
  int depth = 0;
  stack[0] = (struct frame){size, M_MODEL};
  size_t at = 0;
  for (;;) {
    while (depth > 0 && at == stack[depth].end) depth--;
    if (at == stack[depth].end) return LOOM_OK; /* depth 0: the whole file */
    uint64_t tag, n = 0;
    if (!read_varint(p, stack[depth].end, &at, &tag))
      return failf(why, len, LOOM_ERR_CORRUPT, "a field's tag at byte %zu is truncated", at);
    uint32_t field = (uint32_t)(tag >> 3);
    switch (tag & 7) {
    case 0:
      if (!read_varint(p, stack[depth].end, &at, &n))
        return failf(why, len, LOOM_ERR_CORRUPT, "a varint at byte %zu is truncated", at);
      break;
    case 1:
    case 5: {
      size_t w = (tag & 7) == 1 ? 8 : 4;
      if (stack[depth].end - at < w)
        return failf(why, len, LOOM_ERR_CORRUPT, "a fixed-size field at byte %zu is truncated", at);
      at += w;
      break;
    }
    case 2: {
      if (!read_varint(p, stack[depth].end, &at, &n) || n > stack[depth].end - at)
        return failf(why, len, LOOM_ERR_CORRUPT,
                     "a field of %llu bytes at byte %zu runs past its message",
                     (unsigned long long)n, at);
      int sub = submessage(stack[depth].kind, field);
      if (sub >= 0 && sub != M_LEAF) {
        if (depth == ONNX_MAX_NESTING)
          return failf(why, len, LOOM_ERR_CORRUPT,
                       "messages nest deeper than %d levels (graphs inside attributes "
                       "inside graphs?)",
                       ONNX_MAX_NESTING);
        stack[++depth] = (struct frame){at + n, sub};
      } else {
        at += n;
      }
      break;
    }
    default:
      return failf(why, len, LOOM_ERR_CORRUPT, "wire type %u at byte %zu is not one ONNX uses",
                   (unsigned)(tag & 7), at);
    }
  }
}

/* ------------------------------------------------------------ the file */

static int64_t ai_onnx_opset(const Onnx__ModelProto *m) {
  int64_t v = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (!o->domain || !o->domain[0] || strcmp(o->domain, "ai.onnx") == 0)
      if (o->has_version) v = o->version;
  }
  return v;
}

loom_status onnx_file_read(onnx_file *f, const char *path, char *why, size_t len) {
  memset(f, 0, sizeof *f);
  f->path = path;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failf(why, len, LOOM_ERR_IO, "cannot open it: %s", strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return failf(why, len, LOOM_ERR_IO, "not a regular file");
  }
  if ((uint64_t)st.st_size > ONNX_MAX_FILE_BYTES) {
    close(fd);
    return failf(why, len, LOOM_ERR_SIZE,
                 "%lld bytes: a model file is at most 2 GiB (larger weights go in external "
                 "data files)",
                 (long long)st.st_size);
  }
  size_t size = (size_t)st.st_size;
  uint8_t *bytes = malloc(size ? size : 1);
  if (!bytes) {
    close(fd);
    return failf(why, len, LOOM_ERR_OOM, "out of memory for %zu bytes", size);
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, bytes + got, size - got);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      free(bytes);
      close(fd);
      return failf(why, len, LOOM_ERR_IO, "read failed after %zu of %zu bytes", got, size);
    }
    got += (size_t)r;
  }
  close(fd);
  loom_status s = check_nesting(bytes, size, why, len);
  if (s == LOOM_OK) {
    f->model = onnx__model_proto__unpack(NULL, size, bytes);
    if (!f->model)
      s = failf(why, len, LOOM_ERR_CORRUPT, "not an ONNX model (protobuf parse failed)");
  }
  free(bytes);
  if (s) return s;
  if (!f->model->graph) {
    onnx_file_close(f);
    return failf(why, len, LOOM_ERR_CORRUPT, "the model has no graph");
  }
  f->opset = ai_onnx_opset(f->model);
  if (f->opset < 0) f->opset = f->model->ir_version <= 3 ? ONNX_OPSET_MIN : -1;
  if (f->opset < ONNX_OPSET_MIN || f->opset > ONNX_OPSET_MAX) {
    int64_t v = f->opset;
    onnx_file_close(f);
    if (v < 0) return failf(why, len, LOOM_ERR_CORRUPT, "the model imports no ai.onnx opset");
    return failf(why, len, LOOM_ERR_VALUE, "ai.onnx opset %lld: loom reads opsets %d to %d",
                 (long long)v, ONNX_OPSET_MIN, ONNX_OPSET_MAX);
  }
  const char *slash = strrchr(path, '/');
  f->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
  if (!f->dir) {
    onnx_file_close(f);
    return failf(why, len, LOOM_ERR_OOM, "out of memory");
  }
  return LOOM_OK;
}

void onnx_file_close(onnx_file *f) {
  if (f->model) onnx__model_proto__free_unpacked(f->model, NULL);
  free(f->dir);
  memset(f, 0, sizeof *f);
}

/* ------------------------------------------------------------ tensors */

static const struct {
  int32_t onnx;
  const char *name;
  int loom;
} dtypes[] = {
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "float", LOOM_F32},
    {ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, "uint8", LOOM_U8},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT8, "int8", LOOM_I8},
    {ONNX__TENSOR_PROTO__DATA_TYPE__UINT16, "uint16", LOOM_U16},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT16, "int16", LOOM_I16},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT32, "int32", LOOM_I32},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT64, "int64", LOOM_I64},
    {ONNX__TENSOR_PROTO__DATA_TYPE__STRING, "string", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, "bool", LOOM_BOOL},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, "float16", LOOM_F16},
    {ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, "double", LOOM_F64},
    {ONNX__TENSOR_PROTO__DATA_TYPE__UINT32, "uint32", LOOM_U32},
    {ONNX__TENSOR_PROTO__DATA_TYPE__UINT64, "uint64", LOOM_U64},
    {ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64, "complex64", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128, "complex128", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, "bfloat16", LOOM_BF16},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E4M3FN, "float8e4m3fn", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E4M3FNUZ, "float8e4m3fnuz", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E5M2, "float8e5m2", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E5M2FNUZ, "float8e5m2fnuz", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__UINT4, "uint4", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT4, "int4", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT4E2M1, "float4e2m1", -1},
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E8M0, "float8e8m0", -1},
    {ONNX_UINT2, "uint2", -1},
    {ONNX_INT2, "int2", -1},
};

int onnx_dtype_to_loom(int32_t onnx_type, const char **name) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (dtypes[i].onnx == onnx_type) {
      if (name) *name = dtypes[i].name;
      return dtypes[i].loom;
    }
  if (name) *name = "an unknown data type";
  return -1;
}

/* External data as read: mapped (large) or in a buffer; release_external. */
typedef struct external_bytes {
  void *map;
  size_t map_len;
  uint8_t *buf;
} external_bytes;

/* From this size external data is mapped, not read into a buffer: the tensor
 * copies it once from the file's pages, so a model's weights never need twice
 * their size in memory. */
#define MAP_FROM_BYTES ((size_t)1 << 20)

static void release_external(external_bytes *e) {
  if (e->map) munmap(e->map, e->map_len);
  free(e->buf);
  memset(e, 0, sizeof *e);
}

/* The external data's bytes: path relative to dir and inside it. */
static const uint8_t *read_external(const Onnx__TensorProto *tp, const char *dir, size_t want,
                                    external_bytes *out, char *why, size_t len) {
  const char *location = NULL;
  long long offset = 0, length = -1;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[i];
    if (!e->key || !e->value) continue;
    char *end;
    if (strcmp(e->key, "location") == 0) {
      location = e->value;
    } else if (strcmp(e->key, "offset") == 0 || strcmp(e->key, "length") == 0) {
      errno = 0;
      long long v = strtoll(e->value, &end, 10);
      if (errno || *end || v < 0) {
        failf(why, len, LOOM_ERR_CORRUPT, "external data %s '%.40s' is not a size", e->key,
              e->value);
        return NULL;
      }
      if (e->key[0] == 'o')
        offset = v;
      else
        length = v;
    }
  }
  if (!dir) {
    failf(why, len, LOOM_ERR_VALUE, "external data is read only for a model in a file");
    return NULL;
  }
  if (!location || !location[0]) {
    failf(why, len, LOOM_ERR_CORRUPT, "external data without a location");
    return NULL;
  }
  if (location[0] == '/' || strstr(location, "..")) {
    failf(why, len, LOOM_ERR_VALUE,
          "external data location '%.200s' is absolute or leaves the model's folder", location);
    return NULL;
  }
  if (length >= 0 && (size_t)length != want) {
    failf(why, len, LOOM_ERR_CORRUPT, "external data length %lld, but the dims need %zu bytes",
          length, want);
    return NULL;
  }
  char path[PATH_MAX], real[PATH_MAX], real_dir[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, location) >= sizeof path) {
    failf(why, len, LOOM_ERR_VALUE, "external data path too long");
    return NULL;
  }
  if (!realpath(path, real) || !realpath(dir, real_dir)) {
    failf(why, len, LOOM_ERR_IO, "external data '%.200s': %s", location, strerror(errno));
    return NULL;
  }
  size_t dl = strlen(real_dir);
  if (strncmp(real, real_dir, dl) != 0 || (real[dl] != '/' && dl > 1)) {
    failf(why, len, LOOM_ERR_VALUE, "external data '%.200s' lies outside the model's folder",
          location);
    return NULL;
  }
  int fd = open(real, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0) close(fd);
    failf(why, len, LOOM_ERR_IO, "external data '%.200s' is not a readable file", location);
    return NULL;
  }
  if ((unsigned long long)offset > (unsigned long long)st.st_size ||
      want > (size_t)st.st_size - (size_t)offset) {
    close(fd);
    failf(why, len, LOOM_ERR_CORRUPT,
          "external data '%.200s' holds %lld bytes; the tensor needs %zu from offset %lld",
          location, (long long)st.st_size, want, offset);
    return NULL;
  }
  if (want >= MAP_FROM_BYTES) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), delta = (size_t)offset % page;
    void *map =
        mmap(NULL, want + delta, PROT_READ, MAP_PRIVATE, fd, (off_t)((size_t)offset - delta));
    if (map != MAP_FAILED) {
      close(fd);
      madvise(map, want + delta, MADV_SEQUENTIAL);
      out->map = map, out->map_len = want + delta;
      return (const uint8_t *)map + delta;
    }
  }
  uint8_t *buf = malloc(want ? want : 1);
  size_t got = 0;
  while (buf && got < want) {
    ssize_t r = pread(fd, buf + got, want - got, (off_t)offset + (off_t)got);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      free(buf);
      buf = NULL;
    } else {
      got += (size_t)r;
    }
  }
  close(fd);
  if (!buf) failf(why, len, LOOM_ERR_IO, "external data '%.200s' could not be read", location);
  out->buf = buf;
  return buf;
}

/* Typed fields into the dtype's bytes. The counts were checked. */
static void widen_fields(const Onnx__TensorProto *tp, loom_dtype dt, int64_t n, uint8_t *dst) {
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case LOOM_F32: ((float *)dst)[i] = tp->float_data[i]; break;
    case LOOM_F64: ((double *)dst)[i] = tp->double_data[i]; break;
    case LOOM_I64: ((int64_t *)dst)[i] = tp->int64_data[i]; break;
    case LOOM_I32: ((int32_t *)dst)[i] = tp->int32_data[i]; break;
    case LOOM_U8: dst[i] = (uint8_t)tp->int32_data[i]; break;
    case LOOM_I8: ((int8_t *)dst)[i] = (int8_t)tp->int32_data[i]; break;
    case LOOM_I16: ((int16_t *)dst)[i] = (int16_t)tp->int32_data[i]; break;
    case LOOM_U16: ((uint16_t *)dst)[i] = (uint16_t)tp->int32_data[i]; break;
    case LOOM_U32: ((uint32_t *)dst)[i] = (uint32_t)tp->uint64_data[i]; break;
    case LOOM_U64: ((uint64_t *)dst)[i] = tp->uint64_data[i]; break;
    case LOOM_BOOL: dst[i] = tp->int32_data[i] != 0; break;
    case LOOM_F16:
    case LOOM_BF16: ((uint16_t *)dst)[i] = (uint16_t)tp->int32_data[i]; break;
    default: break;
    }
  }
}

static size_t field_count(const Onnx__TensorProto *tp, loom_dtype dt) {
  switch (dt) {
  case LOOM_F32: return tp->n_float_data;
  case LOOM_F64: return tp->n_double_data;
  case LOOM_I64: return tp->n_int64_data;
  case LOOM_U32:
  case LOOM_U64: return tp->n_uint64_data;
  default: return tp->n_int32_data;
  }
}

/* The tensor's bytes from external data (held in *external until
 * release_external) or raw_data, checked to be want long; NULL with
 * *in_fields set when they are in typed fields, NULL with why set on failure. */
static const uint8_t *stored_bytes(const Onnx__TensorProto *tp, const char *dir, size_t want,
                                   int64_t numel, const char *type_name, external_bytes *external,
                                   bool *in_fields, char *why, size_t len) {
  memset(external, 0, sizeof *external);
  *in_fields = false;
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return read_external(tp, dir, want, external, why, len);
  if (!tp->has_raw_data) {
    *in_fields = true;
    return NULL;
  }
  if (tp->raw_data.len != want) {
    failf(why, len, LOOM_ERR_CORRUPT, "raw data of %zu bytes, but %lld %s values need %zu",
          tp->raw_data.len, (long long)numel, type_name, want);
    return NULL;
  }
  return tp->raw_data.data ? tp->raw_data.data : (const uint8_t *)""; /* empty */
}

/* A narrow type's elements: packed bytes in raw_data, external data, or one
 * byte per int32_data entry. */
static loom_tensor *narrow_from_proto(const Onnx__TensorProto *tp, const char *dir,
                                      loom_shape shape, int64_t numel, char *why, size_t len) {
  const char *type_name;
  loom_dtype held = (loom_dtype)onnx_dtype_held(tp->data_type, &type_name);
  size_t want = (size_t)((numel * onnx_narrow_bits(tp->data_type) + 7) / 8);
  uint8_t *owned = NULL;
  external_bytes external;
  bool in_fields;
  const uint8_t *packed =
      stored_bytes(tp, dir, want, numel, type_name, &external, &in_fields, why, len);
  if (!packed && !in_fields) return NULL;
  if (in_fields) {
    if (tp->n_int32_data != want) {
      failf(why, len, LOOM_ERR_CORRUPT, "%zu int32_data entries, but %lld %s values need %zu",
            tp->n_int32_data, (long long)numel, type_name, want);
      return NULL;
    }
    packed = owned = malloc(want ? want : 1);
    if (!owned) {
      failf(why, len, LOOM_ERR_OOM, "out of memory for %zu bytes", want);
      return NULL;
    }
    for (size_t i = 0; i < want; i++) owned[i] = (uint8_t)tp->int32_data[i];
  }
  size_t bytes = (size_t)numel * loom_dtype_size(held);
  void *values = malloc(bytes ? bytes : 1);
  loom_tensor *t = NULL;
  if (!values)
    failf(why, len, LOOM_ERR_OOM, "out of memory for %zu bytes", bytes);
  else if (onnx_narrow_unpack(tp->data_type, packed, want, numel, values))
    failf(why, len, LOOM_ERR_CORRUPT, "%s data does not unpack", type_name);
  else
    t = loom_from_data(values, shape, held, LOOM_CPU);
  free(values);
  free(owned);
  release_external(&external);
  if (t && loom_status_of(t)) {
    failf(why, len, loom_status_of(t), "%s", loom_error_message(t));
    loom_free(t);
    return NULL;
  }
  return t;
}

loom_tensor *onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *dir, char *why,
                                    size_t len) {
  const char *type_name;
  int dt = onnx_dtype_held(tp->data_type, &type_name);
  if (dt < 0) {
    failf(why, len, LOOM_ERR_DTYPE, "data type %s (%d) is not one loom holds", type_name,
          (int)tp->data_type);
    return NULL;
  }
  if (tp->n_dims > LOOM_MAX_DIMS) {
    failf(why, len, LOOM_ERR_SHAPE, "%zu dims; loom holds at most %d", tp->n_dims, LOOM_MAX_DIMS);
    return NULL;
  }
  loom_shape shape = {.ndim = (int)tp->n_dims};
  int64_t numel = 1;
  for (size_t i = 0; i < tp->n_dims; i++) {
    int64_t d = tp->dims[i];
    if (d < 0 || (d && numel > INT64_MAX / d) || (d && numel * d > ((int64_t)1 << 40))) {
      failf(why, len, LOOM_ERR_SIZE, "dim %zu of %lld makes an absurd tensor", i, (long long)d);
      return NULL;
    }
    shape.dim[i] = d;
    numel *= d;
  }
  if (onnx_dtype_is_narrow(tp->data_type))
    return narrow_from_proto(tp, dir, shape, numel, why, len);
  size_t esize = loom_dtype_size((loom_dtype)dt);
  size_t want = (size_t)numel * esize;
  external_bytes external;
  bool in_fields;
  const uint8_t *stored =
      stored_bytes(tp, dir, want, numel, type_name, &external, &in_fields, why, len);
  if (!stored && !in_fields) return NULL;
  uint8_t *data = (uint8_t *)stored;
  bool owned = false;
  if (in_fields) {
    size_t have = field_count(tp, (loom_dtype)dt);
    if (have != (size_t)numel) {
      failf(why, len, LOOM_ERR_CORRUPT, "%zu %s values, but the dims hold %lld", have, type_name,
            (long long)numel);
      return NULL;
    }
    data = malloc(want ? want : 1);
    if (!data) {
      failf(why, len, LOOM_ERR_OOM, "out of memory for %zu bytes", want);
      return NULL;
    }
    owned = true;
    widen_fields(tp, (loom_dtype)dt, numel, data);
  }
  loom_tensor *t = loom_from_data(data, shape, (loom_dtype)dt, LOOM_CPU);
  if (owned) free(data);
  release_external(&external);
  if (loom_status_of(t)) {
    failf(why, len, loom_status_of(t), "%s", loom_error_message(t));
    loom_free(t);
    return NULL;
  }
  return t;
}
