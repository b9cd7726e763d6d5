/*
 * Reading and writing one tensor in NumPy's .npy format
 * (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html):
 *
 *   6 bytes    the magic string "\x93NUMPY"
 *   2 bytes    the format's version, major then minor: 1.0, 2.0 or 3.0
 *   2 or 4     N, the header's length, unsigned little-endian (4 bytes from 2.0)
 *   N bytes    a Python dict literal, {'descr': '<f4', 'fortran_order': False,
 *              'shape': (3, 4), }, padded with spaces and ended by '\n' so the
 *              data starts at a multiple of 64 (ASCII; UTF-8 from 3.0)
 *   the rest   the elements, C order (Fortran order when fortran_order is True)
 *
 * A file comes from outside: its header is parsed by a small parser of
 * exactly the literals the format uses (strings, True, False, tuples of
 * integers), never evaluated, and its sizes are checked against the file's
 * before anything the size of the data is allocated.
 *
 * Byte order: a descr's '<' and '=' (native) are read as they lie, '>' has
 * each element's bytes reversed. Big-endian hosts are out of scope, as for
 * safetensors: there both calls refuse.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "frontend/frontend.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* NumPy's own headers for any shape loom holds are under 300 bytes; version
 * 1.0's length field stops at 65535, and a longer header (2.0) only holds
 * structured dtypes, which loom does not read. */
#define NPY_MAX_HEADER 65536
/* Spaces NumPy leaves after the dict so a file can grow along its first
 * axis in place (numpy.lib.format.GROWTH_AXIS_MAX_DIGITS). */
#define NPY_GROWTH_DIGITS 21

static bool host_is_little_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

/* ------------------------------------------------------------ dtypes */

/* Every numeric dtype NumPy writes, so that a file of one loom lacks is
 * named in the refusal; a dtype loom gains is its row's `loom` filled in. */
typedef struct npy_dtype {
  char kind; /* NumPy's kind character: 'f', 'i', 'u', 'b', 'c' */
  int size;  /* bytes per element */
  int loom;  /* the loom_dtype, or -1 */
  const char *numpy;
} npy_dtype;

static const npy_dtype npy_dtypes[] = {
    {'f', 4, LOOM_F32, "float32"}, {'f', 8, LOOM_F64, "float64"}, {'f', 2, LOOM_F16, "float16"},
    {'i', 4, LOOM_I32, "int32"},   {'i', 8, LOOM_I64, "int64"},   {'u', 1, LOOM_U8, "uint8"},
    {'b', 1, LOOM_BOOL, "bool"},   {'i', 1, LOOM_I8, "int8"},     {'i', 2, LOOM_I16, "int16"},
    {'u', 2, LOOM_U16, "uint16"},  {'u', 4, LOOM_U32, "uint32"},  {'u', 8, LOOM_U64, "uint64"},
    {'f', 16, -1, "longdouble"},   {'c', 8, -1, "complex64"},     {'c', 16, -1, "complex128"},
    {'c', 32, -1, "clongdouble"},
};
#define NPY_NUM_DTYPES ((int)(sizeof npy_dtypes / sizeof npy_dtypes[0]))

static const npy_dtype *dtype_of_kind(char kind, long size) {
  for (int i = 0; i < NPY_NUM_DTYPES; i++)
    if (npy_dtypes[i].kind == kind && npy_dtypes[i].size == size) return &npy_dtypes[i];
  return NULL;
}

static const npy_dtype *dtype_of_loom(loom_dtype d) {
  for (int i = 0; i < NPY_NUM_DTYPES; i++)
    if (npy_dtypes[i].loom == (int)d) return &npy_dtypes[i];
  return NULL;
}

/* "float32, float64, ..." : the dtypes loom reads, for refusals. */
static const char *readable_dtypes(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < NPY_NUM_DTYPES && used < len; i++)
    if (npy_dtypes[i].loom >= 0)
      used +=
          (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", npy_dtypes[i].numpy);
  return buf;
}

/* ------------------------------------------------------------ reading */

typedef struct npy_file {
  const char *path;
  int fd;
  uint64_t size;        /* of the file */
  uint64_t data_offset; /* where the elements start */
  /* the header's fields */
  char descr[40];
  const npy_dtype *dtype;
  bool swap; /* '>': each element's bytes reversed */
  bool fortran;
  loom_shape shape;
  bool have_descr, have_fortran, have_shape;
} npy_file;

#define NPY_READ "loom_npy_read"
#define NPY_WRITE "loom_npy_write"

static loom_status npy_fail(const char *op, const char *path, loom_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static loom_status npy_fail(const char *op, const char *path, loom_status st, const char *fmt,
                            ...) {
  char detail[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return lm_fail(st, "%s: '%s': %s", op, path, detail);
}

/* Exactly len bytes at offset (the size was checked: running short means the
 * file changed under us). */
static loom_status read_at(const npy_file *f, uint64_t offset, void *dst, uint64_t len) {
  uint64_t ended = 0;
  int got = lm_read_at(f->fd, offset, dst, len, &ended);
  if (got < 0) return npy_fail(NPY_READ, f->path, LOOM_ERR_IO, "cannot read: %s", strerror(errno));
  if (got == 0)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "the file ended at byte %llu while reading", (unsigned long long)ended);
  return LOOM_OK;
}

static loom_status open_file(npy_file *f) {
  char why[300];
  f->fd = lm_open_regular_file(f->path, &f->size, why, sizeof why);
  return f->fd < 0 ? npy_fail(NPY_READ, f->path, LOOM_ERR_IO, "%s", why) : LOOM_OK;
}

/* The parser of the header's dict: text[0..n), NUL-terminated. */
typedef struct parser {
  const npy_file *f;
  const char *text;
  size_t at, n;
} parser;

static loom_status parse_fail(const parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static loom_status parse_fail(const parser *p, const char *fmt, ...) {
  char what[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return npy_fail(NPY_READ, p->f->path, LOOM_ERR_CORRUPT,
                  "the header is not a dict literal of the format: "
                  "%s at byte %zu of the header",
                  what, p->at);
}

static void skip_space(parser *p) {
  while (p->at < p->n && strchr(" \t\r\n", p->text[p->at]) && p->text[p->at]) p->at++;
}

/* Skips spaces, then takes c if it is next. */
static bool take(parser *p, char c) {
  skip_space(p);
  if (p->at < p->n && p->text[p->at] == c) {
    p->at++;
    return true;
  }
  return false;
}

/* A quoted string without escapes, 'like this' or "like this", into buf. */
static loom_status parse_string(parser *p, char *buf, size_t len, const char *what) {
  skip_space(p);
  char quote = p->at < p->n ? p->text[p->at] : 0;
  if (quote != '\'' && quote != '"') return parse_fail(p, "%s is not a quoted string", what);
  size_t start = ++p->at;
  while (p->at < p->n && p->text[p->at] != quote && p->text[p->at] != '\\' &&
         p->text[p->at] != '\n')
    p->at++;
  if (p->at >= p->n || p->text[p->at] != quote)
    return parse_fail(p, "%s is an unterminated (or escaped) string", what);
  size_t used = p->at - start;
  p->at++;
  if (used >= len) return parse_fail(p, "%s is a string of %zu bytes, too long", what, used);
  memcpy(buf, p->text + start, used);
  buf[used] = 0;
  return LOOM_OK;
}

static bool take_word(parser *p, const char *word) {
  size_t len = strlen(word);
  skip_space(p);
  if (p->n - p->at < len || memcmp(p->text + p->at, word, len) != 0) return false;
  char next = p->at + len < p->n ? p->text[p->at + len] : 0;
  if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
      (next >= '0' && next <= '9') || next == '_')
    return false;
  p->at += len;
  return true;
}

/* A non-negative decimal integer that fits int64 (a shape's dim). */
static loom_status parse_dim(parser *p, int axis, int64_t *out) {
  skip_space(p);
  if (p->at < p->n && p->text[p->at] == '-')
    return npy_fail(NPY_READ, p->f->path, LOOM_ERR_CORRUPT, "the shape's dim %d is negative", axis);
  if (p->at >= p->n || p->text[p->at] < '0' || p->text[p->at] > '9')
    return parse_fail(p, "the shape's dim %d is not an integer", axis);
  int64_t v = 0;
  for (; p->at < p->n && p->text[p->at] >= '0' && p->text[p->at] <= '9'; p->at++) {
    int digit = p->text[p->at] - '0';
    if (v > (INT64_MAX - digit) / 10)
      return npy_fail(NPY_READ, p->f->path, LOOM_ERR_CORRUPT,
                      "the shape's dim %d is larger than a 64-bit integer holds", axis);
    v = v * 10 + digit;
  }
  *out = v;
  return LOOM_OK;
}

/* A tuple of dims: (), (3,), (3, 4) or (3, 4,). */
static loom_status parse_shape(parser *p, loom_shape *shape) {
  if (!take(p, '(')) return parse_fail(p, "'shape' is not a tuple");
  shape->ndim = 0;
  int count = 0;
  bool comma = true; /* one follows the last dim */
  while (!take(p, ')')) {
    if (!comma) return parse_fail(p, "the shape's dims are not separated by ','");
    if (count == LOOM_MAX_DIMS)
      return npy_fail(NPY_READ, p->f->path, LOOM_ERR_SHAPE,
                      "the shape has more than %d dims, loom's most", LOOM_MAX_DIMS);
    loom_status st = parse_dim(p, count, &shape->dim[count]);
    if (st) return st;
    count++;
    comma = take(p, ',');
    if (count == 1 && !comma && take(p, ')'))
      return parse_fail(p, "'shape' is (n), an integer, not a tuple (one dim is written (n,))");
  }
  shape->ndim = count;
  return LOOM_OK;
}

/* The dtype of a descr: a byte order ('<', '>', '=', '|'), a kind and a
 * size in bytes ("<f4"), or NULL. */
static const npy_dtype *dtype_of_descr(const char *d) {
  if (!d[0] || !strchr("<>=|", d[0]) || !d[1] || !d[2]) return NULL;
  long size = 0;
  for (const char *c = d + 2; *c; c++) {
    if (*c < '0' || *c > '9' || size > 1000) return NULL;
    size = size * 10 + (*c - '0');
  }
  return dtype_of_kind(d[1], size);
}

static loom_status parse_descr(parser *p, npy_file *f) {
  skip_space(p);
  if (p->at < p->n && (p->text[p->at] == '[' || p->text[p->at] == '{'))
    return npy_fail(NPY_READ, f->path, LOOM_ERR_DTYPE,
                    "a structured dtype (a list of fields): loom reads one number per element");
  loom_status st = parse_string(p, f->descr, sizeof f->descr, "'descr'");
  if (st) return st;
  f->dtype = dtype_of_descr(f->descr);
  if (!f->dtype || f->dtype->loom < 0) {
    char name[64] = "", readable[200];
    if (f->dtype) snprintf(name, sizeof name, " (%s)", f->dtype->numpy);
    return npy_fail(NPY_READ, f->path, LOOM_ERR_DTYPE,
                    "dtype '%s'%s is not a loom dtype (loom reads %s)", f->descr, name,
                    readable_dtypes(readable, sizeof readable));
  }
  if (f->descr[0] == '|' && f->dtype->size > 1)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "dtype '%s' has no byte order ('|') for elements of %d bytes", f->descr,
                    f->dtype->size);
  f->swap = f->descr[0] == '>' && f->dtype->size > 1;
  return LOOM_OK;
}

/* One key and its value. */
static loom_status parse_entry(parser *p, npy_file *f) {
  char key[32];
  loom_status st = parse_string(p, key, sizeof key, "a key");
  if (st) return st;
  if (!take(p, ':')) return parse_fail(p, "no ':' after the key '%s'", key);
  bool *seen = !strcmp(key, "descr")           ? &f->have_descr
               : !strcmp(key, "fortran_order") ? &f->have_fortran
               : !strcmp(key, "shape")         ? &f->have_shape
                                               : NULL;
  if (!seen)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "the header has the key '%s'; the format's are 'descr', 'fortran_order' and "
                    "'shape'",
                    key);
  if (*seen) return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT, "the header has '%s' twice", key);
  *seen = true;
  if (seen == &f->have_descr) return parse_descr(p, f);
  if (seen == &f->have_shape) return parse_shape(p, &f->shape);
  if (take_word(p, "True"))
    f->fortran = true;
  else if (!take_word(p, "False"))
    return parse_fail(p, "'fortran_order' is not True or False");
  return LOOM_OK;
}

static loom_status parse_header(npy_file *f, const char *text, size_t n) {
  parser p = {f, text, 0, n};
  if (!take(&p, '{')) return parse_fail(&p, "no '{'");
  while (!take(&p, '}')) {
    loom_status st = parse_entry(&p, f);
    if (st) return st;
    if (!take(&p, ',')) {
      if (take(&p, '}')) break;
      return parse_fail(&p, "no ',' or '}' after a value");
    }
  }
  skip_space(&p);
  if (p.at != n) return parse_fail(&p, "text after the dict's '}'");
  const char *missing = !f->have_descr     ? "descr"
                        : !f->have_fortran ? "fortran_order"
                        : !f->have_shape   ? "shape"
                                           : NULL;
  if (missing)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT, "the header has no '%s'", missing);
  return LOOM_OK;
}

static loom_status read_header(npy_file *f) {
  unsigned char pre[12];
  if (f->size < NPY_MAGIC_LEN + 4)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT, "%llu bytes, too short for a .npy header",
                    (unsigned long long)f->size);
  loom_status st = read_at(f, 0, pre, NPY_MAGIC_LEN + 4);
  if (st) return st;
  if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "not a .npy file (no \\x93NUMPY at its start)");
  int major = pre[6], minor = pre[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "format version %d.%d; loom reads 1.0, 2.0 and 3.0", major, minor);
  uint64_t len_bytes = major == 1 ? 2 : 4, header_len = pre[8] | (uint64_t)pre[9] << 8;
  if (major > 1) {
    if (f->size < NPY_MAGIC_LEN + 2 + len_bytes)
      return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                      "%llu bytes, too short for a .npy header", (unsigned long long)f->size);
    if ((st = read_at(f, NPY_MAGIC_LEN + 2, pre + 8, 4))) return st;
    header_len = pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
  }
  uint64_t start = NPY_MAGIC_LEN + 2 + len_bytes;
  if (header_len > f->size - start)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "the header's length %llu runs past the end of the file (%llu bytes)",
                    (unsigned long long)header_len, (unsigned long long)f->size);
  if (header_len > NPY_MAX_HEADER)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "the header's length %llu is over the limit of %d bytes",
                    (unsigned long long)header_len, NPY_MAX_HEADER);
  char *text = malloc((size_t)header_len + 1);
  if (!text) return npy_fail(NPY_READ, f->path, LOOM_ERR_OOM, "out of memory");
  st = read_at(f, start, text, header_len);
  if (!st && memchr(text, 0, (size_t)header_len))
    st = npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT, "the header holds a NUL byte");
  text[header_len] = 0;
  if (!st) st = parse_header(f, text, (size_t)header_len);
  free(text);
  f->data_offset = start + header_len;
  return st;
}

/* "(3, 4)" as NumPy writes a shape. */
static const char *shape_repr(const loom_shape *s, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < s->ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)s->dim[d]);
  if (used < len) snprintf(buf + used, len - used, s->ndim == 1 ? ",)" : ")");
  return buf;
}

/* The data's size checked against the shape's before anything is allocated. */
static loom_status check_data_size(const npy_file *f, uint64_t *bytes) {
  uint64_t numel = 1, have = f->size - f->data_offset;
  char sb[200];
  for (int d = 0; d < f->shape.ndim; d++) {
    uint64_t dim = (uint64_t)f->shape.dim[d];
    if (dim && numel > (uint64_t)INT64_MAX / dim)
      return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                      "shape %s has more elements than fit in 64 bits",
                      shape_repr(&f->shape, sb, sizeof sb));
    numel *= dim;
  }
  if (numel > (uint64_t)INT64_MAX / (uint64_t)f->dtype->size)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "'%s' %s has more bytes than fit in 64 bits", f->descr,
                    shape_repr(&f->shape, sb, sizeof sb));
  *bytes = numel * (uint64_t)f->dtype->size;
  if (have != *bytes)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_CORRUPT,
                    "%s: '%s' %s needs %llu bytes of data, the file has %llu",
                    have < *bytes ? "truncated" : "bytes past the data", f->descr,
                    shape_repr(&f->shape, sb, sizeof sb), (unsigned long long)*bytes,
                    (unsigned long long)have);
  return LOOM_OK;
}

static void reverse_bytes(unsigned char *data, uint64_t numel, int size) {
  for (uint64_t i = 0; i < numel; i++)
    for (int a = 0, b = size - 1; a < b; a++, b--) {
      unsigned char t = data[i * (uint64_t)size + (uint64_t)a];
      data[i * (uint64_t)size + (uint64_t)a] = data[i * (uint64_t)size + (uint64_t)b];
      data[i * (uint64_t)size + (uint64_t)b] = t;
    }
}

/* Elements in Fortran order (the first index varies fastest) into C order. */
static void fortran_to_c(const unsigned char *from, unsigned char *to, const loom_shape *s,
                         size_t size) {
  int64_t stride[LOOM_MAX_DIMS], index[LOOM_MAX_DIMS] = {0}, numel = lm_shape_numel(s), at = 0;
  for (int d = 0; d < s->ndim; d++) stride[d] = d ? stride[d - 1] * s->dim[d - 1] : 1;
  for (int64_t i = 0; i < numel; i++) {
    memcpy(to + (size_t)i * size, from + (size_t)at * size, size);
    for (int d = s->ndim - 1; d >= 0; d--) { /* the next index in C order */
      at += stride[d];
      if (++index[d] < s->dim[d]) break;
      at -= stride[d] * s->dim[d];
      index[d] = 0;
    }
  }
}

/* The elements as loom holds them: C order, native byte order, bools 0 or 1. */
static loom_status read_elements(const npy_file *f, uint64_t bytes, unsigned char **out) {
  unsigned char *data = malloc(bytes ? (size_t)bytes : 1);
  if (!data)
    return npy_fail(NPY_READ, f->path, LOOM_ERR_OOM, "out of memory for %llu bytes",
                    (unsigned long long)bytes);
  loom_status st = read_at(f, f->data_offset, data, bytes);
  uint64_t numel = bytes / (uint64_t)f->dtype->size;
  if (!st && f->swap) reverse_bytes(data, numel, f->dtype->size);
  if (!st && f->dtype->loom == LOOM_BOOL) /* as loom_from_data keeps them */
    for (uint64_t i = 0; i < bytes; i++) data[i] = data[i] != 0;
  if (!st && f->fortran && f->shape.ndim > 1 && bytes) {
    unsigned char *c_order = malloc((size_t)bytes);
    if (c_order) fortran_to_c(data, c_order, &f->shape, (size_t)f->dtype->size);
    free(data);
    data = c_order;
    if (!data)
      st = npy_fail(NPY_READ, f->path, LOOM_ERR_OOM, "out of memory for %llu bytes",
                    (unsigned long long)bytes);
  }
  if (st) {
    free(data);
    return st;
  }
  *out = data;
  return LOOM_OK;
}

loom_tensor *loom_npy_read(const char *path, loom_device device) {
  const char *op = "loom_npy_read";
  if (!path) {
    lm_fail(LOOM_ERR_NULL, "%s: path is NULL", op);
    return NULL;
  }
  loom_tensor *bad = lm_check_device(op, device);
  if (bad) {
    loom_free(bad);
    return NULL;
  }
  if (!host_is_little_endian()) {
    lm_fail(LOOM_ERR_INTERNAL, "%s: big-endian hosts are not supported", op);
    return NULL;
  }
  npy_file f = {.path = path, .fd = -1};
  uint64_t bytes = 0;
  unsigned char *data = NULL;
  loom_status st = open_file(&f);
  if (!st) st = read_header(&f);
  if (!st) st = check_data_size(&f, &bytes);
  if (!st) st = read_elements(&f, bytes, &data);
  if (f.fd >= 0) close(f.fd);
  lm_node *node = NULL;
  if (!st) st = lm_leaf_copy(op, f.shape, (loom_dtype)f.dtype->loom, device, data, LOOM_CPU, &node);
  free(data);
  if (st) return NULL;
  loom_tensor *t = lm_result(node);
  if (loom_status_of(t) != LOOM_OK) {
    loom_free(t);
    return NULL;
  }
  return t;
}

/* ------------------------------------------------------------ writing */

/* Magic, version 1.0, length and the dict as NumPy 1.24 writes them (keys
 * sorted, the growth spaces, padded with spaces and '\n' to a multiple of
 * 64): a file loom writes has the bytes np.save writes. Returns its length;
 * every header of at most LOOM_MAX_DIMS dims is under 300 bytes. */
static size_t npy_header(const npy_dtype *d, const loom_shape *s, char *buf, size_t len) {
  char sb[LOOM_MAX_DIMS * 24 + 8], first[24];
  char order = d->size == 1 ? '|' : '<';
  int dict =
      snprintf(buf + 10, len - 10, "{'descr': '%c%c%d', 'fortran_order': False, 'shape': %s, }",
               order, d->kind, d->size, shape_repr(s, sb, sizeof sb));
  if (s->ndim > 0) {
    int digits = snprintf(first, sizeof first, "%lld", (long long)s->dim[0]);
    dict +=
        snprintf(buf + 10 + dict, len - 10 - (size_t)dict, "%*s", NPY_GROWTH_DIGITS - digits, "");
  }
  size_t header_len = (size_t)dict + 1;
  size_t pad = NPY_ALIGN - (10 + header_len) % NPY_ALIGN;
  memset(buf + 10 + dict, ' ', pad);
  buf[10 + (size_t)dict + pad] = '\n';
  header_len += pad;
  memcpy(buf, NPY_MAGIC "\x01\x00", 8);
  buf[8] = (char)(header_len & 0xff);
  buf[9] = (char)(header_len >> 8);
  return 10 + header_len;
}

static loom_status write_file(const char *path, const char *header, size_t header_len,
                              const void *data, size_t bytes) {
  lm_atomic_file file;
  if (!lm_atomic_file_open(&file, path, 0666))
    return errno == ENOMEM ? npy_fail(NPY_WRITE, path, LOOM_ERR_OOM, "out of memory")
                           : npy_fail(NPY_WRITE, path, LOOM_ERR_IO,
                                      "cannot create a file beside it: %s", strerror(errno));
  if (!lm_write_all(file.fd, header, header_len) || !lm_write_all(file.fd, data, bytes)) {
    loom_status st = npy_fail(NPY_WRITE, path, LOOM_ERR_IO, "cannot write: %s", strerror(errno));
    lm_atomic_file_abandon(&file);
    return st;
  }
  const char *what = NULL;
  if (!lm_atomic_file_commit(&file, true, &what))
    return npy_fail(NPY_WRITE, path, LOOM_ERR_IO, "cannot %s it: %s", what, strerror(errno));
  return LOOM_OK;
}

loom_status loom_npy_write(loom_tensor *t, const char *path) {
  if (!t || !path)
    return lm_fail(LOOM_ERR_NULL, "loom_npy_write: %s is NULL", t ? "path" : "tensor");
  if (loom_status_of(t) != LOOM_OK)
    return npy_fail(NPY_WRITE, path, loom_status_of(t), "the tensor is an error: %s",
                    loom_error_message(t) ? loom_error_message(t) : "(no message)");
  if (!host_is_little_endian())
    return lm_fail(LOOM_ERR_INTERNAL, "loom_npy_write: big-endian hosts are not supported");
  loom_dtype dtype = loom_dtype_of(t);
  const npy_dtype *d = dtype_of_loom(dtype);
  if (!d)
    return npy_fail(NPY_WRITE, path, LOOM_ERR_DTYPE,
                    "NumPy has no %s dtype (loom_cast the tensor to LOOM_F32 first)",
                    loom_dtype_name(dtype));
  loom_shape shape = loom_shape_of(t);
  size_t bytes = (size_t)loom_numel(t) * loom_dtype_size(dtype);
  void *data = malloc(bytes ? bytes : 1);
  if (!data) return npy_fail(NPY_WRITE, path, LOOM_ERR_OOM, "out of memory for %zu bytes", bytes);
  loom_status st = loom_copy_to_host(t, data, bytes); /* its error names what failed */
  char header[512];
  if (!st) st = write_file(path, header, npy_header(d, &shape, header, sizeof header), data, bytes);
  free(data);
  return st;
}
