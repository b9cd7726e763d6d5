/*
 * Saving and loading a parameter collection in the safetensors format
 * (https://github.com/huggingface/safetensors):
 *
 *   8 bytes    N, the header size, unsigned little-endian
 *   N bytes    UTF-8 JSON object: name -> {"dtype", "shape", "data_offsets"},
 *              plus an optional "__metadata__" object of strings; starts with
 *              '{', may end in spaces (we pad to a multiple of 8, as the
 *              reference writer does, so the data starts aligned)
 *   the rest   the data section: each tensor's raw little-endian elements,
 *              row-major, at [begin, end) of data_offsets; the tensors cover
 *              it exactly, without gaps or overlaps
 *
 * A file comes from outside, so loading validates all of it (structure, then
 * the fit with the collection) and reads every value into new buffers before
 * it changes anything: a refused file leaves the collection as it was.
 *
 * Byte order: the data is written and read as it lies in memory, which is the
 * format's little-endian order on the hosts loom runs on (x86-64, aarch64).
 * Big-endian hosts are out of scope: there both calls refuse.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "frontend/frontend.h"
#include "frontend/params.h"

#define ST_MAX_HEADER 100000000ull /* the reference implementation's limit */
#define ST_ALIGN 8
#define ST_METADATA "__metadata__"

static bool host_is_little_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

/* ------------------------------------------------------------ dtypes */

/* Every byte-sized dtype of the format, so that a file holding one loom lacks
 * still validates (its sizes are checked) and the mismatch names it. */
typedef struct st_dtype {
  const char *name;
  size_t size;
  int loom; /* the loom_dtype, or -1 */
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"F32", 4, LOOM_F32}, {"F64", 8, LOOM_F64},   {"I32", 4, LOOM_I32}, {"I64", 8, LOOM_I64},
    {"U8", 1, LOOM_U8},   {"BOOL", 1, LOOM_BOOL}, {"F16", 2, LOOM_F16}, {"BF16", 2, LOOM_BF16},
    {"I8", 1, LOOM_I8},   {"I16", 2, LOOM_I16},   {"U16", 2, LOOM_U16}, {"U32", 4, LOOM_U32},
    {"U64", 8, LOOM_U64}, {"F8_E4M3", 1, -1},     {"F8_E5M2", 1, -1},   {"F8_E8M0", 1, -1},
    {"C64", 8, -1},
};
#define ST_NUM_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static const st_dtype *dtype_by_name(const char *name) {
  for (int i = 0; i < ST_NUM_DTYPES; i++)
    if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
  return NULL;
}

static const char *dtype_name_of(loom_dtype d) { return lm_dtype_info_of(d)->safetensors; }

/* ------------------------------------------------------------ messages */

/* Collects the problems found comparing a file with a collection, so one
 * message lists them all (as many as fit; the rest are counted). */
typedef struct problem_list {
  char text[720];
  size_t len;
  int count, hidden;
  loom_status status; /* LOOM_ERR_SHAPE wins over LOOM_ERR_DTYPE */
} problem_list;

static void add_problem(problem_list *p, loom_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_problem(problem_list *p, loom_status st, const char *fmt, ...) {
  char one[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(one, sizeof one, fmt, ap);
  va_end(ap);
  if (p->status == LOOM_OK || st == LOOM_ERR_SHAPE) p->status = st;
  p->count++;
  const char *sep = p->len ? "; " : "";
  size_t need = strlen(sep) + strlen(one);
  if (p->len + need >= sizeof p->text) {
    p->hidden++;
    return;
  }
  p->len += (size_t)snprintf(p->text + p->len, sizeof p->text - p->len, "%s%s", sep, one);
}

/* ------------------------------------------------------------ reading a file */

typedef struct st_entry {
  const char *name; /* owned by the parsed header */
  const st_dtype *dtype;
  json_t *shape;       /* the header's array of non-negative integers */
  uint64_t begin, end; /* in the data section */
  bool matched;        /* a name of the collection took it */
} st_entry;

typedef struct st_file {
  const char *op; /* the public function, for messages */
  const char *path;
  int fd;
  uint64_t size, header_size, data_size;
  json_t *header;
  st_entry *entries;
  int n;
} st_file;

static loom_status load_fail(const st_file *sf, loom_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static loom_status load_fail(const st_file *sf, loom_status st, const char *fmt, ...) {
  char detail[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return lm_fail(st, "%s: '%s': %s", sf->op, sf->path, detail);
}

/* Reads exactly len bytes at offset; the file's size was checked already, so
 * running short means it changed under us. */
static loom_status read_at(const st_file *sf, uint64_t offset, void *dst, uint64_t len) {
  uint64_t ended = 0;
  int got = lm_read_at(sf->fd, offset, dst, len, &ended);
  if (got < 0) return load_fail(sf, LOOM_ERR_IO, "cannot read: %s", strerror(errno));
  if (got == 0)
    return load_fail(sf, LOOM_ERR_CORRUPT, "the file ended at byte %llu while reading",
                     (unsigned long long)ended);
  return LOOM_OK;
}

static loom_status open_file(st_file *sf) {
  char why[300];
  sf->fd = lm_open_regular_file(sf->path, &sf->size, why, sizeof why);
  return sf->fd < 0 ? load_fail(sf, LOOM_ERR_IO, "%s", why) : LOOM_OK;
}

static uint64_t u64_from_le(const unsigned char b[8]) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

/* Beyond reason for a checkpoint's header: more tensors than any model has
 * (a large one has thousands), arrays longer than a shape, deeper nesting
 * than the format's. A header near the 100 MB limit built as a JSON tree
 * costs about 20 times its size and seconds: these are refused first. */
#define ST_MAX_ENTRIES 250000
#define ST_MAX_DEPTH 4

/* One pass over the header's text, strings skipped, before any tree is built. */
static loom_status scan_header(const st_file *sf, const char *text, size_t n) {
  int depth = 0;
  char open[ST_MAX_DEPTH];
  uint64_t entries = 0, values[ST_MAX_DEPTH]; /* of the top object; per open array */
  for (size_t i = 0; i < n; i++) {
    char c = text[i];
    if (c == '"') {
      for (i++; i < n && text[i] != '"'; i++)
        if (text[i] == '\\') i++;
      continue;
    }
    if (c == '{' || c == '[') {
      if (depth == ST_MAX_DEPTH)
        return load_fail(sf, LOOM_ERR_CORRUPT, "the header nests deeper than %d levels (byte %zu)",
                         ST_MAX_DEPTH, i);
      values[depth] = 1;
      open[depth++] = c;
    } else if (c == '}' || c == ']') {
      if (depth > 0) depth--;
    } else if (c == ',' && depth > 0 && open[depth - 1] == '[') {
      if (++values[depth - 1] > LOOM_MAX_DIMS)
        return load_fail(sf, LOOM_ERR_CORRUPT,
                         "the header has an array of more than %d values (byte %zu); a shape "
                         "has at most %d dims",
                         LOOM_MAX_DIMS, i, LOOM_MAX_DIMS);
    } else if (c == ':' && depth == 1 && ++entries > ST_MAX_ENTRIES) {
      return load_fail(sf, LOOM_ERR_CORRUPT, "the header lists more than %d tensors",
                       ST_MAX_ENTRIES);
    }
  }
  return LOOM_OK;
}

static loom_status read_header(st_file *sf) {
  if (sf->size < 8)
    return load_fail(sf, LOOM_ERR_CORRUPT, "%llu bytes, too short for the 8-byte header size",
                     (unsigned long long)sf->size);
  unsigned char size_bytes[8];
  loom_status st = read_at(sf, 0, size_bytes, 8);
  if (st) return st;
  uint64_t n = u64_from_le(size_bytes);
  if (n > ST_MAX_HEADER)
    return load_fail(sf, LOOM_ERR_CORRUPT, "header size %llu is over the limit of %llu bytes",
                     (unsigned long long)n, ST_MAX_HEADER);
  if (n > sf->size - 8)
    return load_fail(sf, LOOM_ERR_CORRUPT,
                     "header size %llu runs past the end of the file (%llu bytes)",
                     (unsigned long long)n, (unsigned long long)sf->size);
  sf->header_size = n;
  sf->data_size = sf->size - 8 - n;
  char *text = malloc(n ? n : 1);
  if (!text)
    return load_fail(sf, LOOM_ERR_OOM, "out of memory for a %llu-byte header",
                     (unsigned long long)n);
  st = read_at(sf, 8, text, n);
  if (st == LOOM_OK && (n == 0 || text[0] != '{'))
    st = load_fail(sf, LOOM_ERR_CORRUPT, "the header does not start with '{'");
  if (st == LOOM_OK) st = scan_header(sf, text, n);
  if (st == LOOM_OK) {
    json_error_t err;
    sf->header = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
    if (!sf->header)
      st = load_fail(sf, LOOM_ERR_CORRUPT, "the header is not valid JSON: %s (byte %d)", err.text,
                     err.position);
    else if (!json_is_object(sf->header))
      st = load_fail(sf, LOOM_ERR_CORRUPT, "the header is not a JSON object");
  }
  free(text);
  return st;
}

static bool json_to_u64(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
  *out = (uint64_t)json_integer_value(v);
  return true;
}

/* "[2,3]" from a validated shape array (always terminated). */
static const char *shape_text(const json_t *shape, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (size_t i = 0; i < json_array_size(shape) && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "",
                             (long long)json_integer_value(json_array_get(shape, i)));
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

/* Elements of a shape array, or an error naming what is wrong with it. */
static loom_status shape_numel(const st_file *sf, const char *name, const json_t *shape,
                               uint64_t *numel) {
  if (!json_is_array(shape))
    return load_fail(sf, LOOM_ERR_CORRUPT, "'%s': \"shape\" is missing or not an array", name);
  *numel = 1;
  for (size_t i = 0; i < json_array_size(shape); i++) {
    uint64_t d;
    if (!json_to_u64(json_array_get(shape, i), &d))
      return load_fail(sf, LOOM_ERR_CORRUPT, "'%s': shape dim %zu is not a non-negative integer",
                       name, i);
    if (d && *numel > (uint64_t)INT64_MAX / d)
      return load_fail(sf, LOOM_ERR_CORRUPT, "'%s': shape has more elements than fit in 64 bits",
                       name);
    *numel *= d;
  }
  return LOOM_OK;
}

static loom_status parse_offsets(const st_file *sf, const char *name, const json_t *offsets,
                                 st_entry *e) {
  if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
      !json_to_u64(json_array_get(offsets, 0), &e->begin) ||
      !json_to_u64(json_array_get(offsets, 1), &e->end))
    return load_fail(sf, LOOM_ERR_CORRUPT,
                     "'%s': \"data_offsets\" is missing or not two non-negative integers", name);
  if (e->begin > e->end)
    return load_fail(sf, LOOM_ERR_CORRUPT, "'%s': data_offsets [%llu, %llu] end before they begin",
                     name, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > sf->data_size)
    return load_fail(sf, LOOM_ERR_CORRUPT,
                     "'%s': data_offsets [%llu, %llu] do not fit the data section of %llu bytes",
                     name, (unsigned long long)e->begin, (unsigned long long)e->end,
                     (unsigned long long)sf->data_size);
  return LOOM_OK;
}

static loom_status parse_entry(const st_file *sf, const char *name, json_t *value, st_entry *e) {
  if (!json_is_object(value))
    return load_fail(sf, LOOM_ERR_CORRUPT, "entry '%s' is not a JSON object", name);
  json_t *dtype = json_object_get(value, "dtype");
  if (!json_is_string(dtype))
    return load_fail(sf, LOOM_ERR_CORRUPT, "'%s': \"dtype\" is missing or not a string", name);
  e->name = name;
  e->dtype = dtype_by_name(json_string_value(dtype));
  if (!e->dtype)
    return load_fail(sf, LOOM_ERR_DTYPE, "'%s': dtype \"%s\" is not one loom reads", name,
                     json_string_value(dtype));
  e->shape = json_object_get(value, "shape");
  uint64_t numel = 0;
  loom_status st = shape_numel(sf, name, e->shape, &numel);
  if (st) return st;
  if ((st = parse_offsets(sf, name, json_object_get(value, "data_offsets"), e))) return st;
  char sb[160];
  if (numel > UINT64_MAX / e->dtype->size)
    return load_fail(sf, LOOM_ERR_CORRUPT, "'%s': %s %s has more bytes than fit in 64 bits", name,
                     e->dtype->name, shape_text(e->shape, sb, sizeof sb));
  if (e->end - e->begin != numel * e->dtype->size)
    return load_fail(
        sf, LOOM_ERR_CORRUPT, "'%s': data_offsets [%llu, %llu] hold %llu bytes, %s %s needs %llu",
        name, (unsigned long long)e->begin, (unsigned long long)e->end,
        (unsigned long long)(e->end - e->begin), e->dtype->name,
        shape_text(e->shape, sb, sizeof sb), (unsigned long long)(numel * e->dtype->size));
  return LOOM_OK;
}

static loom_status check_metadata(const st_file *sf, const json_t *metadata) {
  if (!json_is_object(metadata))
    return load_fail(sf, LOOM_ERR_CORRUPT, "\"%s\" is not a JSON object", ST_METADATA);
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)metadata, key, value) {
    if (!json_is_string(value))
      return load_fail(sf, LOOM_ERR_CORRUPT, "\"%s\": the value of '%s' is not a string",
                       ST_METADATA, key);
  }
  return LOOM_OK;
}

static loom_status parse_entries(st_file *sf) {
  sf->entries = calloc(json_object_size(sf->header) + 1, sizeof *sf->entries);
  if (!sf->entries) return load_fail(sf, LOOM_ERR_OOM, "out of memory");
  const char *name;
  json_t *value;
  json_object_foreach(sf->header, name, value) {
    loom_status st = strcmp(name, ST_METADATA) == 0
                         ? check_metadata(sf, value)
                         : parse_entry(sf, name, value, &sf->entries[sf->n++]);
    if (st) return st;
  }
  return LOOM_OK;
}

static int by_offsets(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* The format asks the tensors to tile the data section: sorted by offset,
 * each begins where the previous one ended, the last ends at its end. */
static loom_status check_layout(const st_file *sf) {
  st_entry **sorted = malloc(sizeof *sorted * (size_t)(sf->n + 1));
  if (!sorted) return load_fail(sf, LOOM_ERR_OOM, "out of memory");
  for (int i = 0; i < sf->n; i++) sorted[i] = &sf->entries[i];
  qsort(sorted, (size_t)sf->n, sizeof *sorted, by_offsets);
  loom_status st = LOOM_OK;
  uint64_t covered = 0;
  for (int i = 0; i < sf->n && st == LOOM_OK; i++) {
    const st_entry *e = sorted[i];
    if (e->begin < covered)
      st = load_fail(sf, LOOM_ERR_CORRUPT, "'%s' (bytes %llu to %llu) overlaps '%s' (to %llu)",
                     e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                     sorted[i - 1]->name, (unsigned long long)covered);
    else if (e->begin > covered)
      st = load_fail(sf, LOOM_ERR_CORRUPT,
                     "bytes %llu to %llu of the data section belong to no tensor",
                     (unsigned long long)covered, (unsigned long long)e->begin);
    covered = e->end;
  }
  if (st == LOOM_OK && covered != sf->data_size)
    st = load_fail(sf, LOOM_ERR_CORRUPT, "the tensors cover %llu bytes of a %llu-byte data section",
                   (unsigned long long)covered, (unsigned long long)sf->data_size);
  free(sorted);
  return st;
}

static void close_file(st_file *sf) {
  if (sf->fd >= 0) close(sf->fd);
  json_decref(sf->header);
  free(sf->entries);
}

/* ------------------------------------------------------------ matching the collection */

static int by_name(const void *a, const void *b) {
  return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}

/* The entries sorted by name, so that matching a large model stays fast. */
static st_entry **index_by_name(const st_file *sf) {
  st_entry **sorted = malloc(sizeof *sorted * (size_t)(sf->n + 1));
  for (int i = 0; sorted && i < sf->n; i++) sorted[i] = &sf->entries[i];
  if (sorted) qsort(sorted, (size_t)sf->n, sizeof *sorted, by_name);
  return sorted;
}

static st_entry *entry_named(st_entry *const *sorted, int n, const char *name) {
  st_entry key = {.name = name}, *keyp = &key;
  st_entry **found = bsearch(&keyp, sorted, (size_t)n, sizeof *sorted, by_name);
  return found ? *found : NULL;
}

static bool shape_matches(const json_t *file_shape, const loom_shape *s) {
  if (json_array_size(file_shape) != (size_t)s->ndim) return false;
  for (int d = 0; d < s->ndim; d++)
    if (json_integer_value(json_array_get(file_shape, (size_t)d)) != s->dim[d]) return false;
  return true;
}

static bool is_float_entry(const st_dtype *d) {
  return !strcmp(d->name, "F16") || !strcmp(d->name, "BF16") || !strcmp(d->name, "F32") ||
         !strcmp(d->name, "F64");
}

/* Whether entry e can fill a parameter of dtype dt: the same dtype, or with
 * `cast` a float of another width. */
static bool dtype_fits(const st_entry *e, loom_dtype dt, bool cast) {
  return e->dtype->loom == (int)dt || (cast && is_float_entry(e->dtype) && loom_dtype_is_float(dt));
}

/* A name for the report (malloc'd), or false when out of memory. */
static bool report_name(char ***list, int *n, const char *name) {
  char **grown = realloc(*list, sizeof *grown * (size_t)(*n + 1));
  if (!grown) return false;
  *list = grown;
  return (grown[*n] = strdup(name)) && ++*n;
}

/* Pairs each parameter with its entry (chosen[i], NULL for a name missing in
 * a non-strict load) and lists every mismatch: missing and unexpected names,
 * shapes, dtypes, as torch's load_state_dict does. Strict, names and shapes
 * are the model's structure, so a missing or extra name is LOOM_ERR_SHAPE like
 * a shape; LOOM_ERR_DTYPE only when dtypes are all that differ. Non-strict,
 * missing and unexpected names go to the report instead; shapes and dtypes
 * must still fit. */
static loom_status match_collection(const st_file *sf, const loom_params *ps, st_entry **chosen,
                                    loom_load_opts opts, loom_load_report *report) {
  st_entry **sorted = index_by_name(sf);
  if (!sorted) return load_fail(sf, LOOM_ERR_OOM, "out of memory");
  problem_list problems = {.len = 0};
  char fs[160], cs[160];
  bool oom = false, castable = false; /* a mismatch opts.cast would convert */
  for (int i = 0; i < ps->count; i++) {
    const lm_node *node = ps->items[i].tensor->node;
    const char *want_dtype = dtype_name_of(node->dtype);
    lm_shape_str(&node->shape, cs, sizeof cs);
    st_entry *e = chosen[i] = entry_named(sorted, sf->n, ps->items[i].name);
    if (!e && opts.non_strict) {
      if (report) oom |= !report_name(&report->missing, &report->nmissing, ps->items[i].name);
      continue;
    }
    if (!e) {
      add_problem(&problems, LOOM_ERR_SHAPE, "missing '%s' (%s %s)", ps->items[i].name, want_dtype,
                  cs);
      continue;
    }
    e->matched = true;
    bool same_shape = shape_matches(e->shape, &node->shape);
    castable |=
        same_shape && !dtype_fits(e, node->dtype, opts.cast) && dtype_fits(e, node->dtype, true);
    if (!same_shape || !dtype_fits(e, node->dtype, opts.cast))
      add_problem(&problems, same_shape ? LOOM_ERR_DTYPE : LOOM_ERR_SHAPE,
                  "'%s' is %s %s in the file, %s %s in the collection", e->name, e->dtype->name,
                  shape_text(e->shape, fs, sizeof fs), want_dtype, cs);
  }
  free(sorted);
  for (int i = 0; i < sf->n; i++) {
    const st_entry *e = &sf->entries[i];
    if (e->matched) continue;
    if (opts.non_strict) {
      if (report) oom |= !report_name(&report->unexpected, &report->nunexpected, e->name);
      continue;
    }
    add_problem(&problems, LOOM_ERR_SHAPE, "unexpected '%s' (%s %s)", e->name, e->dtype->name,
                shape_text(e->shape, fs, sizeof fs));
  }
  if (oom) return load_fail(sf, LOOM_ERR_OOM, "out of memory for the report");
  if (!problems.count) return LOOM_OK;
  char more[48] = "";
  if (problems.hidden) snprintf(more, sizeof more, "; and %d more", problems.hidden);
  return load_fail(sf, problems.status, "does not fit the collection (%d problem%s): %s%s%s",
                   problems.count, problems.count == 1 ? "" : "s", problems.text, more,
                   castable ? " (loom_params_load_ex with (loom_load_opts){.cast = true} "
                              "converts float dtypes)"
                            : "");
}

/* ------------------------------------------------------------ converting */

/* One element of a (little-endian) float entry of dtype `from` as a double
 * (only floats are converted: loom_load_opts' cast). */
static double element(const st_dtype *from, const unsigned char *p) {
  const char *n = from->name;
  if (!strcmp(n, "F16") || !strcmp(n, "BF16")) {
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    return n[0] == 'F' ? loom_f16_to_float(h) : loom_bf16_to_float(h);
  }
  if (!strcmp(n, "F32")) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  double d; /* F64 */
  memcpy(&d, p, 8);
  return d;
}

/* raw (n elements of dtype `from`) as n elements of loom dtype `to`. */
static void convert(const st_dtype *from, const unsigned char *raw, loom_dtype to, void *out,
                    int64_t n) {
  size_t size = loom_dtype_size(to);
  for (int64_t i = 0; i < n; i++)
    lm_dtype_store_double(to, (char *)out + (size_t)i * size,
                          element(from, raw + (size_t)i * from->size));
}

/* A computed node holding entry e's values as a tensor of shape, dtype and
 * device (the entry's dtype converted when it differs). */
static loom_status read_value(const st_file *sf, const st_entry *e, loom_shape shape,
                              loom_dtype dtype, loom_device device, lm_node **out) {
  size_t raw_bytes = (size_t)(e->end - e->begin);
  int64_t n = lm_shape_numel(&shape);
  bool same = e->dtype->loom == (int)dtype;
  size_t bytes = same ? raw_bytes : (size_t)n * loom_dtype_size(dtype);
  void *data = lm_buffer_alloc(bytes), *raw = same ? data : malloc(raw_bytes ? raw_bytes : 1);
  if (!data || !raw) {
    lm_buffer_free(data, bytes);
    if (!same) free(raw);
    return load_fail(sf, LOOM_ERR_OOM, "'%s': out of memory for %zu bytes", e->name, bytes);
  }
  loom_status st = read_at(sf, 8 + sf->header_size + e->begin, raw, raw_bytes);
  if (!st && !same) convert(e->dtype, raw, dtype, data, n);
  if (!same) free(raw);
  if (dtype == LOOM_BOOL) /* loom keeps bools 0 or 1, as loom_from_data does */
    for (size_t i = 0; i < bytes; i++) ((unsigned char *)data)[i] = ((unsigned char *)data)[i] != 0;
  if (!st && device.type == LOOM_DEVICE_CUDA) /* through the host, then to its device */
    st = lm_leaf_copy(sf->op, shape, dtype, device, data, LOOM_CPU, out);
  else if (!st && !(*out = lm_node_new(LM_BUFFER, 0, NULL, shape, dtype, LOOM_CPU)))
    st = load_fail(sf, LOOM_ERR_OOM, "'%s': out of memory", e->name);
  if (!st && device.type != LOOM_DEVICE_CUDA) { /* the node owns the host buffer */
    (*out)->data = data;
    (*out)->bytes = bytes;
    (*out)->release_data = lm_data_free;
    return LOOM_OK;
  }
  lm_buffer_free(data, bytes);
  return st;
}

static loom_status read_values(const st_file *sf, const loom_params *ps, st_entry *const *chosen,
                               lm_node **values) {
  for (int i = 0; i < ps->count; i++) {
    if (!chosen[i]) continue; /* missing, in a non-strict load: left as it is */
    const lm_node *like = ps->items[i].tensor->node;
    loom_status st = read_value(sf, chosen[i], like->shape, like->dtype, like->device, &values[i]);
    if (st) return st;
  }
  return LOOM_OK;
}

/* Opens, reads and checks the file's header and layout. */
static loom_status open_checked(st_file *sf) {
  if (!host_is_little_endian())
    return lm_fail(LOOM_ERR_INTERNAL, "%s: big-endian hosts are not supported", sf->op);
  loom_status st = open_file(sf);
  if (!st) st = read_header(sf);
  if (!st) st = parse_entries(sf);
  if (!st) st = check_layout(sf);
  return st;
}

void loom_load_report_free(loom_load_report *r) {
  if (!r) return;
  for (int i = 0; i < r->nmissing; i++) free(r->missing[i]);
  for (int i = 0; i < r->nunexpected; i++) free(r->unexpected[i]);
  free(r->missing), free(r->unexpected);
  *r = (loom_load_report){0};
}

static loom_status load(const char *op, loom_params *ps, const char *path, loom_load_opts opts,
                        loom_load_report *report) {
  if (report) *report = (loom_load_report){0};
  if (!ps || !path) return lm_fail(LOOM_ERR_NULL, "%s: NULL argument", op);
  st_file sf = {.op = op, .path = path, .fd = -1};
  st_entry **chosen = calloc((size_t)ps->count + 1, sizeof *chosen);
  lm_node **values = calloc((size_t)ps->count + 1, sizeof *values);
  loom_status st = chosen && values ? LOOM_OK : lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  if (!st) st = open_checked(&sf);
  if (!st) st = match_collection(&sf, ps, chosen, opts, report);
  if (!st) st = read_values(&sf, ps, chosen, values);
  /* Everything is read: only now does the collection change. Assigning a
   * computed node cannot fail; it keeps requires_grad, and every handle a
   * user holds sees the new value. */
  for (int i = 0; i < ps->count && values; i++) {
    if (!values[i]) continue;
    if (!st)
      lm_assign_node(ps->items[i].tensor, values[i]);
    else
      lm_node_release(values[i]);
  }
  free(values);
  free(chosen);
  close_file(&sf);
  if (st) loom_load_report_free(report);
  return st;
}

loom_status loom_params_load(loom_params *ps, const char *path) {
  return load("loom_params_load", ps, path, (loom_load_opts){0}, NULL);
}

loom_status loom_params_load_ex(loom_params *ps, const char *path, loom_load_opts opts,
                                loom_load_report *report) {
  return load("loom_params_load_ex", ps, path, opts, report);
}

loom_params *loom_safetensors_read(const char *path, loom_device device) {
  const char *op = "loom_safetensors_read";
  if (!path) {
    lm_fail(LOOM_ERR_NULL, "%s: path is NULL", op);
    return NULL;
  }
  loom_tensor *bad = lm_check_device(op, device);
  if (bad) {
    loom_free(bad);
    return NULL;
  }
  st_file sf = {.op = op, .path = path, .fd = -1};
  loom_status st = open_checked(&sf);
  loom_params *ps = st ? NULL : loom_params_new();
  if (!st && !ps) st = lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  for (int i = 0; !st && i < sf.n; i++) { /* in the file's order */
    const st_entry *e = &sf.entries[i];
    int dt = e->dtype->loom;
    loom_shape shape = {(int)json_array_size(e->shape), {0}};
    if (dt < 0) {
      st = load_fail(&sf, LOOM_ERR_DTYPE, "'%s': dtype %s has no loom dtype that holds it", e->name,
                     e->dtype->name);
      break;
    }
    if (shape.ndim > LOOM_MAX_DIMS) {
      st = load_fail(&sf, LOOM_ERR_SHAPE, "'%s': %d dims, loom holds at most %d", e->name,
                     shape.ndim, LOOM_MAX_DIMS);
      break;
    }
    for (int d = 0; d < shape.ndim; d++)
      shape.dim[d] = json_integer_value(json_array_get(e->shape, (size_t)d));
    lm_node *value = NULL;
    if ((st = read_value(&sf, e, shape, (loom_dtype)dt, device, &value))) break;
    loom_tensor *t = lm_result(value);
    st = loom_status_of(t) ? loom_status_of(t) : loom_params_add_buffer(ps, e->name, t);
    loom_free(t);
  }
  close_file(&sf);
  if (st) {
    loom_params_free(ps);
    return NULL;
  }
  return ps;
}

/* ------------------------------------------------------------ saving */

static loom_status save_fail(loom_status st, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static loom_status save_fail(loom_status st, const char *path, const char *fmt, ...) {
  char detail[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return lm_fail(st, "loom_params_save: '%s': %s", path, detail);
}

static uint64_t param_bytes(const loom_tensor *t) {
  return (uint64_t)lm_shape_numel(&t->node->shape) * loom_dtype_size(t->node->dtype);
}

static json_t *entry_json(const lm_node *node, uint64_t begin, uint64_t end) {
  json_t *shape = json_array();
  for (int d = 0; shape && d < node->shape.ndim; d++)
    if (json_array_append_new(shape, json_integer(node->shape.dim[d])) != 0) {
      json_decref(shape);
      return NULL;
    }
  return json_pack("{s:s, s:o, s:[I,I]}", "dtype", dtype_name_of(node->dtype), "shape", shape,
                   "data_offsets", (json_int_t)begin, (json_int_t)end);
}

/* The JSON header, in the collection's order, offsets laid end to end. */
static loom_status build_header(const loom_params *ps, const char *path, char **text) {
  json_t *root = json_pack("{s:{s:s}}", ST_METADATA, "format", "pt");
  if (!root) return save_fail(LOOM_ERR_OOM, path, "out of memory");
  uint64_t offset = 0;
  for (int i = 0; i < ps->count; i++) {
    const char *name = ps->items[i].name;
    uint64_t bytes = param_bytes(ps->items[i].tensor);
    json_t *entry = entry_json(ps->items[i].tensor->node, offset, offset + bytes);
    if (!entry) {
      json_decref(root);
      return save_fail(LOOM_ERR_OOM, path, "out of memory");
    }
    if (json_object_set_new(root, name, entry) != 0) { /* frees entry */
      json_decref(root);
      return save_fail(LOOM_ERR_VALUE, path, "the name '%s' is not valid UTF-8", name);
    }
    offset += bytes;
  }
  *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  return *text ? LOOM_OK : save_fail(LOOM_ERR_OOM, path, "out of memory");
}

static loom_status check_names(const loom_params *ps, const char *path) {
  for (int i = 0; i < ps->count; i++)
    if (strcmp(ps->items[i].name, ST_METADATA) == 0)
      return save_fail(LOOM_ERR_VALUE, path, "the name '%s' is reserved by the format",
                       ST_METADATA);
  return LOOM_OK;
}

static loom_status realize_all(const loom_params *ps) {
  loom_tensor **ts = malloc(sizeof *ts * (size_t)(ps->count + 1));
  if (!ts) return lm_fail(LOOM_ERR_OOM, "loom_params_save: out of memory");
  for (int i = 0; i < ps->count; i++) ts[i] = ps->items[i].tensor;
  loom_status st = loom_eval(ts, ps->count);
  free(ts);
  return st;
}

static loom_status write_all(int fd, const void *data, uint64_t len, const char *path) {
  if (!lm_write_all(fd, data, (size_t)len))
    return save_fail(LOOM_ERR_IO, path, "cannot write: %s", strerror(errno));
  return LOOM_OK;
}

/* One parameter's values; a device tensor's go through a host copy. */
static loom_status write_param(int fd, const lm_node *n, uint64_t len, const char *path) {
  if (n->device.type != LOOM_DEVICE_CUDA) return write_all(fd, n->data, len, path);
  void *host = malloc(len ? (size_t)len : 1);
  if (!host)
    return save_fail(LOOM_ERR_OOM, path, "out of memory for %llu bytes", (unsigned long long)len);
  loom_status st =
      lm_data_copy("loom_params_save", LOOM_CPU, host, n->device, n->data, (size_t)len);
  if (!st) st = write_all(fd, host, len, path);
  free(host);
  return st;
}

static loom_status write_contents(int fd, const loom_params *ps, const char *header,
                                  const char *path) {
  size_t json_len = strlen(header);
  size_t padded = (json_len + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
  unsigned char size_bytes[8];
  for (int i = 0; i < 8; i++) size_bytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  static const char spaces[ST_ALIGN] = "        ";
  loom_status st = write_all(fd, size_bytes, 8, path);
  if (!st) st = write_all(fd, header, json_len, path);
  if (!st) st = write_all(fd, spaces, padded - json_len, path);
  /* A computed node's data is contiguous and row-major (what
   * loom_copy_to_host reads); host data is written in place, without a copy. */
  for (int i = 0; i < ps->count && !st; i++)
    st = write_param(fd, ps->items[i].tensor->node, param_bytes(ps->items[i].tensor), path);
  if (!st && fsync(fd) != 0) st = save_fail(LOOM_ERR_IO, path, "cannot sync: %s", strerror(errno));
  return st;
}

/* The file whole or not at all (base/atomic_file.h). */
static loom_status write_atomically(const loom_params *ps, const char *header, const char *path) {
  lm_atomic_file f;
  if (!lm_atomic_file_open(&f, path, 0666))
    return errno == ENOMEM ? save_fail(LOOM_ERR_OOM, path, "out of memory")
                           : save_fail(LOOM_ERR_IO, path, "cannot create a file beside it: %s",
                                       strerror(errno));
  loom_status st = write_contents(f.fd, ps, header, path);
  if (st) {
    lm_atomic_file_abandon(&f);
    return st;
  }
  const char *what = NULL;
  if (!lm_atomic_file_commit(&f, false, &what)) /* write_contents synced */
    return save_fail(LOOM_ERR_IO, path, "cannot %s it: %s", what, strerror(errno));
  return LOOM_OK;
}

loom_status loom_params_save(const loom_params *ps, const char *path) {
  if (!ps || !path) return lm_fail(LOOM_ERR_NULL, "loom_params_save: NULL argument");
  bool data_parallel = false; /* loom_ddp's: every rank holds the same; rank 0 writes */
  for (int i = 0; i < ps->count; i++)
    data_parallel |= ps->items[i].tensor && ps->items[i].tensor->ddp_bucket_bytes > 0;
  if (data_parallel && loom_dist_rank() != 0) return LOOM_OK;
  if (!host_is_little_endian())
    return lm_fail(LOOM_ERR_INTERNAL, "loom_params_save: big-endian hosts are not supported");
  loom_status st = check_names(ps, path);
  if (!st) st = realize_all(ps);
  char *header = NULL;
  if (!st) st = build_header(ps, path, &header);
  if (!st) st = write_atomically(ps, header, path);
  free(header);
  return st;
}
