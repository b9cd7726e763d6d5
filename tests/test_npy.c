/* .npy files: NumPy 1.24's own files read (every dtype loom has, 0-d, empty,
 * 8 dims, Fortran order, big-endian, versions 2.0 and 3.0) and written back
 * byte for byte as np.save writes them; round trips of every dtype and rank on
 * the test device; and refusals of every malformed file (magic, version,
 * lengths, headers, keys, dims, sizes, every truncation, byte mutations),
 * each with its status and a message naming the file. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "scratch.h"
#include "test_device.h"

static char test_dir[256];

/* A path in the suite's own directory (four live at once). */
static const char *path_of(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", test_dir, name);
  return p;
}

static const char *fixture(const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/tests/data/npy/%s.npy", LOOM_SOURCE_DIR, name);
  return buf;
}

/* A file of the given version whose header is `header` (its length field
 * says length_field, or the header's own length when -1), then data. */
static void write_npy_raw(const char *path, int major, const char *header, long long length_field,
                          const void *data, size_t data_len) {
  size_t hlen = strlen(header), pre = major == 1 ? 10 : 12;
  uint64_t field = length_field < 0 ? hlen : (uint64_t)length_field;
  unsigned char *buf = malloc(pre + hlen + data_len + 1);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major, buf[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(field >> (8 * i));
  memcpy(buf + pre, header, hlen);
  if (data_len) memcpy(buf + pre + hlen, data, data_len);
  check_write_file(path, buf, pre + hlen + data_len);
  free(buf);
}

static void write_npy(const char *path, const char *header, const void *data, size_t data_len) {
  write_npy_raw(path, 1, header, -1, data, data_len);
}

/* Element i of a tensor's host bytes as a double (F16 through loom's rounding). */
static double element(const void *data, loom_dtype dtype, int64_t i) {
  if (dtype == LOOM_F16) return loom_f16_to_float(((const uint16_t *)data)[i]);
  return check_element(data, dtype, i);
}

/* The tensor's values (free it), checked to be shape and dtype. */
static void *host_values(loom_tensor *t, loom_shape shape, loom_dtype dtype) {
  if (!t) return NULL;
  loom_shape got = loom_shape_of(t);
  CHECK_EQ_INT(loom_dtype_of(t), dtype);
  CHECK_EQ_INT(got.ndim, shape.ndim);
  for (int d = 0; d < shape.ndim && d < got.ndim; d++) CHECK_EQ_INT(got.dim[d], shape.dim[d]);
  size_t bytes = (size_t)loom_numel(t) * loom_dtype_size(dtype);
  void *data = malloc(bytes ? bytes : 1);
  CHECK_OK(loom_copy_to_host(t, data, bytes));
  return data;
}

/* ------------------------------------------------------------ NumPy's files */

/* v(i) = i * 1.5 - 2 in dtype (tests/data/make_npy_fixtures.py). */
static double fixture_value(loom_dtype dtype, int64_t i) {
  double v = (double)i * 1.5 - 2;
  if (dtype == LOOM_BOOL) return v != 0;
  if (dtype == LOOM_U8) return (double)i * 3;
  if (dtype == LOOM_I32 || dtype == LOOM_I64 || dtype == LOOM_I8 || dtype == LOOM_I16)
    return trunc(v);
  if (dtype == LOOM_U16) return 65535 - (double)i * 3; /* the type's largest value less i * 3 */
  if (dtype == LOOM_U32) return 4294967295.0 - (double)i * 3;
  if (dtype == LOOM_U64) return 0x1p64 - (double)i * 3; /* as a double: 2^64 */
  return v;
}

static void check_fixture(const char *name, loom_shape shape, loom_dtype dtype) {
  check_set_ctx("NumPy's %s.npy", name);
  loom_clear_error();
  loom_tensor *t = loom_npy_read(fixture(name), test_device());
  CHECK_MSG(t != NULL, "read: %s", loom_last_error());
  void *data = host_values(t, shape, dtype);
  for (int64_t i = 0; data && i < loom_numel(t); i++)
    CHECK_NEAR(element(data, dtype, i), fixture_value(dtype, i), 0);
  free(data);
  loom_free(t);
  check_set_ctx("%s", "");
}

/* The files np.save wrote, written again by loom: the same bytes. */
static void check_written_like_numpy(const char *name) {
  check_set_ctx("%s.npy written again", name);
  loom_tensor *t = loom_npy_read(fixture(name), test_device());
  const char *out = path_of("again.npy");
  CHECK_OK(loom_npy_write(t, out));
  size_t want_len = 0, got_len = 0;
  unsigned char *want = check_read_file(fixture(name), &want_len),
                *got = check_read_file(out, &got_len);
  CHECK_MSG(want && got && want_len == got_len && memcmp(want, got, want_len) == 0,
            "%zu bytes written, NumPy's file has %zu, or they differ", got_len, want_len);
  free(want), free(got);
  loom_free(t);
  unlink(out);
  check_set_ctx("%s", "");
}

static void test_numpy_files(void) {
  const char *names[] = {"f4_2x3", "f8_2x3", "f2_2x3", "i4_2x3", "i8_2x3", "u1_2x3",
                         "b1_2x3", "i1_2x3", "i2_2x3", "u2_2x3", "u4_2x3", "u8_2x3"};
  const loom_dtype dtypes[] = {LOOM_F32,  LOOM_F64, LOOM_F16, LOOM_I32, LOOM_I64, LOOM_U8,
                               LOOM_BOOL, LOOM_I8,  LOOM_I16, LOOM_U16, LOOM_U32, LOOM_U64};
  for (int i = 0; i < 12; i++) {
    check_fixture(names[i], LOOM_SHAPE(2, 3), dtypes[i]);
    check_written_like_numpy(names[i]);
  }
  check_fixture("f4_8d", LOOM_SHAPE(1, 2, 1, 2, 1, 1, 2, 1), LOOM_F32);
  check_written_like_numpy("f4_8d");
  check_fixture("f4_empty", LOOM_SHAPE(0, 3), LOOM_F32);
  check_written_like_numpy("f4_empty");
  check_fixture("f4_big", LOOM_SHAPE(2, 3), LOOM_F32);
  check_fixture("i4_v2", LOOM_SHAPE(2, 3), LOOM_I32);
  check_fixture("f4_v3", LOOM_SHAPE(2, 3), LOOM_F32);
  /* u4_3 (np.arange(3, dtype=np.uint32)) was refused; it is U32 now */
  loom_tensor *u = loom_npy_read(fixture("u4_3"), test_device());
  uint32_t *uv = host_values(u, LOOM_SHAPE(3), LOOM_U32);
  CHECK(uv && uv[0] == 0 && uv[1] == 1 && uv[2] == 2);
  free(uv);
  loom_free(u);
  /* U64 bit for bit (past 2^53, which element()'s doubles round) */
  loom_tensor *big = loom_npy_read(fixture("u8_2x3"), test_device());
  uint64_t *bv = host_values(big, LOOM_SHAPE(2, 3), LOOM_U64);
  for (int i = 0; bv && i < 6; i++) CHECK(bv[i] == UINT64_MAX - (uint64_t)i * 3);
  free(bv);
  loom_free(big);

  loom_tensor *s = loom_npy_read(fixture("f8_scalar"), test_device());
  double *sv = host_values(s, LOOM_SHAPE0, LOOM_F64);
  CHECK(sv && sv[0] == 2.5);
  free(sv);
  loom_free(s);
  check_written_like_numpy("f8_scalar");

  /* Fortran order: the file holds v in C order of the array, laid out with
   * the first index fastest; loom reads the array, in C order */
  loom_tensor *f = loom_npy_read(fixture("f4_fortran"), test_device());
  float *fv = host_values(f, LOOM_SHAPE(2, 3, 4), LOOM_F32);
  for (int i = 0; fv && i < 24; i++) CHECK_NEAR(fv[i], fixture_value(LOOM_F32, i), 0);
  free(fv);
  loom_free(f);

  /* dtypes loom lacks, each named */
  static const struct {
    const char *name, *says;
  } refused[] = {{"c8_2", "'<c8' (complex64) is not a loom dtype"},
                 {"str_2", "'<U2' is not a loom dtype"},
                 {"struct_2", "structured dtype"}};
  for (int i = 0; i < 3; i++) {
    check_set_ctx("NumPy's %s.npy", refused[i].name);
    loom_clear_error();
    CHECK(loom_npy_read(fixture(refused[i].name), LOOM_CPU) == NULL);
    CHECK_EQ_INT(loom_last_status(), LOOM_ERR_DTYPE);
    CHECK_STR_CONTAINS(loom_last_error(), refused[i].says);
    CHECK_STR_CONTAINS(loom_last_error(), refused[i].name);
    if (i < 2) CHECK_STR_CONTAINS(loom_last_error(), "loom reads float32, float64, float16");
  }
  check_set_ctx("%s", "");
}

/* ------------------------------------------------------------ round trips */

static void round_trip(loom_shape shape, loom_dtype dtype) {
  check_set_ctx("round trip %s, %d dims", loom_dtype_name(dtype), shape.ndim);
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.dim[d];
  size_t bytes = (size_t)n * loom_dtype_size(dtype);
  unsigned char *data = malloc(bytes + 1);
  for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)(i * 37 + 11);
  if (dtype == LOOM_BOOL)
    for (size_t i = 0; i < bytes; i++) data[i] &= 1;
  if (dtype == LOOM_F16) /* no NaN patterns: compared as bytes */
    for (size_t i = 0; i < bytes; i += 2) data[i + 1] &= 0x3f;
  loom_tensor *t = loom_from_data(data, shape, dtype, test_device());
  const char *path = path_of("trip.npy");
  CHECK_OK(loom_npy_write(t, path));
  loom_tensor *back = loom_npy_read(path, test_device());
  CHECK_MSG(back != NULL, "read back: %s", loom_last_error());
  unsigned char *got = host_values(back, shape, dtype);
  CHECK(got && memcmp(got, data, bytes) == 0);
  size_t len = 0;
  unsigned char *file = check_read_file(path, &len);
  CHECK(file && len % 64 == bytes % 64 && (len - bytes) % 64 == 0); /* the data starts aligned */
  free(file), free(got), free(data);
  loom_free(t), loom_free(back);
  unlink(path);
}

static void test_round_trips(void) {
  static const loom_dtype dtypes[] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64, LOOM_U8,  LOOM_BOOL,
                                      LOOM_F16, LOOM_I8,  LOOM_I16, LOOM_U16, LOOM_U32, LOOM_U64};
  for (int k = 0; k < (int)(sizeof dtypes / sizeof dtypes[0]); k++) {
    round_trip(LOOM_SHAPE0, dtypes[k]);
    for (int nd = 1; nd <= LOOM_MAX_DIMS; nd++) {
      loom_shape s = {nd, {0}};
      for (int d = 0; d < nd; d++) s.dim[d] = 1 + (d + k) % 3;
      round_trip(s, dtypes[k]);
    }
    round_trip(LOOM_SHAPE(0), dtypes[k]);
    round_trip(LOOM_SHAPE(3, 0, 2), dtypes[k]);
  }
  /* a view (a transpose) is written as its values, in C order */
  const float m[6] = {1, 2, 3, 4, 5, 6};
  loom_tensor *a = loom_from_data(m, LOOM_SHAPE(2, 3), LOOM_F32, test_device());
  loom_tensor *tr = loom_transpose(a, 0, 1);
  CHECK_OK(loom_npy_write(tr, path_of("t.npy")));
  loom_tensor *back = loom_npy_read(path_of("t.npy"), LOOM_CPU);
  float *bv = host_values(back, LOOM_SHAPE(3, 2), LOOM_F32);
  const float want[6] = {1, 4, 2, 5, 3, 6};
  CHECK(bv && memcmp(bv, want, sizeof want) == 0);
  free(bv);
  loom_free(back), loom_free(tr), loom_free(a);
  check_set_ctx("%s", "");
}

static void test_write_refusals(void) {
  const uint16_t h[2] = {0x3f80, 0x4000};
  loom_tensor *bf = loom_from_data(h, LOOM_SHAPE(2), LOOM_BF16, LOOM_CPU);
  const char *path = path_of("bf16.npy");
  loom_clear_error();
  CHECK_RC(loom_npy_write(bf, path), LOOM_ERR_DTYPE);
  CHECK_STR_CONTAINS(loom_last_error(), "NumPy has no bf16 dtype");
  CHECK_STR_CONTAINS(loom_last_error(), "bf16.npy");
  CHECK(access(path, F_OK) != 0); /* nothing written */
  loom_free(bf);
  CHECK_RC(loom_npy_write(NULL, path), LOOM_ERR_NULL);
  loom_tensor *one = loom_scalar(1.0, LOOM_F32, LOOM_CPU);
  CHECK_RC(loom_npy_write(one, NULL), LOOM_ERR_NULL);
  /* an error tensor: its status, naming the file */
  loom_tensor *bad = loom_matmul(one, one);
  loom_clear_error();
  CHECK_RC(loom_npy_write(bad, path), loom_status_of(bad));
  CHECK_STR_CONTAINS(loom_last_error(), "bf16.npy");
  loom_free(bad);
  /* a directory that does not exist: IO, nothing left behind */
  loom_clear_error();
  CHECK_RC(loom_npy_write(one, path_of("no/such/dir.npy")), LOOM_ERR_IO);
  CHECK_STR_CONTAINS(loom_last_error(), "no/such/dir.npy");
  /* an existing file is replaced whole */
  check_write_file(path, "old", 3);
  CHECK_OK(loom_npy_write(one, path));
  loom_tensor *back = loom_npy_read(path, LOOM_CPU);
  float *v = host_values(back, LOOM_SHAPE0, LOOM_F32);
  CHECK(v && v[0] == 1.0f);
  free(v);
  loom_free(back), loom_free(one);
  unlink(path);
}

/* ------------------------------------------------------------ refusals */

/* Reading path fails with status and a message naming the file and `says`. */
static void expect_refusal(const char *what, const char *path, loom_status status,
                           const char *says) {
  check_set_ctx("%s", what);
  loom_clear_error();
  loom_tensor *t = loom_npy_read(path, LOOM_CPU);
  CHECK(t == NULL);
  loom_free(t);
  CHECK_EQ_INT(loom_last_status(), status);
  CHECK_STR_CONTAINS(loom_last_error(), "loom_npy_read");
  CHECK_STR_CONTAINS(loom_last_error(), path);
  CHECK_STR_CONTAINS(loom_last_error(), says);
  check_set_ctx("%s", "");
}

static void refused_header(const char *what, const char *header, size_t data_len,
                           loom_status status, const char *says) {
  unsigned char data[64] = {0};
  const char *path = path_of("bad.npy");
  write_npy(path, header, data, data_len);
  expect_refusal(what, path, status, says);
}

#define F4_23 "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n"

/* Headers refused: what is wrong, the header, the bytes of data after it,
 * the status and what the message says. */
static const struct {
  const char *what, *header;
  size_t data_len;
  loom_status status;
  const char *says;
} bad_headers[] = {
    {"not a dict", "[1, 2]", 0, LOOM_ERR_CORRUPT, "not a dict literal"},
    {"no descr", "{'fortran_order': False, 'shape': (2, 3), }", 24, LOOM_ERR_CORRUPT,
     "has no 'descr'"},
    {"no fortran_order", "{'descr': '<f4', 'shape': (2, 3), }", 24, LOOM_ERR_CORRUPT,
     "has no 'fortran_order'"},
    {"no shape", "{'descr': '<f4', 'fortran_order': False}", 24, LOOM_ERR_CORRUPT,
     "has no 'shape'"},
    {"an extra key", "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", 4,
     LOOM_ERR_CORRUPT, "has the key 'x'"},
    {"a key twice", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False}", 4, LOOM_ERR_CORRUPT,
     "'descr' twice"},
    {"unterminated string", "{'descr': '<f4}", 4, LOOM_ERR_CORRUPT, "unterminated"},
    {"escaped string", "{'descr': '<f\\x34', 'fortran_order': False, 'shape': ()}", 4,
     LOOM_ERR_CORRUPT, "escaped"},
    {"fortran_order not a bool", "{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", 4,
     LOOM_ERR_CORRUPT, "not True or False"},
    {"Trueish", "{'descr': '<f4', 'fortran_order': Truex, 'shape': ()}", 4, LOOM_ERR_CORRUPT,
     "not True or False"},
    {"shape a list", "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", 24,
     LOOM_ERR_CORRUPT, "'shape' is not a tuple"},
    {"shape (n)", "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", 24, LOOM_ERR_CORRUPT,
     "(n,)"},
    {"dims without commas", "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", 24,
     LOOM_ERR_CORRUPT, "not separated"},
    {"a float dim", "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}", 24,
     LOOM_ERR_CORRUPT, "not separated"},
    {"a name dim", "{'descr': '<f4', 'fortran_order': False, 'shape': (n,)}", 24, LOOM_ERR_CORRUPT,
     "dim 0 is not an integer"},
    {"a negative dim", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", 24,
     LOOM_ERR_CORRUPT, "dim 1 is negative"},
    {"a huge dim", "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 24,
     LOOM_ERR_CORRUPT, "dim 0 is larger than a 64-bit integer holds"},
    {"dims overflowing",
     "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 24,
     LOOM_ERR_CORRUPT, "more elements than fit in 64 bits"},
    {"bytes overflowing",
     "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,)}", 24,
     LOOM_ERR_CORRUPT, "more bytes than fit in 64 bits"},
    {"a huge shape, a small file",
     "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000)}", 24,
     LOOM_ERR_CORRUPT, "truncated"},
    {"9 dims", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4,
     LOOM_ERR_SHAPE, "more than 8 dims"},
    {"data short", F4_23, 20, LOOM_ERR_CORRUPT,
     "truncated: '<f4' (2, 3) needs 24 bytes of data, the file has 20"},
    {"data long", F4_23, 28, LOOM_ERR_CORRUPT,
     "bytes past the data: '<f4' (2, 3) needs 24 bytes of data, the file has 28"},
    {"'|f4'", "{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3)}", 24, LOOM_ERR_CORRUPT,
     "no byte order"},
    {"descr of no size", "{'descr': '<f', 'fortran_order': False, 'shape': ()}", 4, LOOM_ERR_DTYPE,
     "'<f' is not a loom dtype"},
    {"descr 'f4'", "{'descr': 'f4', 'fortran_order': False, 'shape': ()}", 4, LOOM_ERR_DTYPE,
     "'f4' is not a loom dtype"},
    {"descr '<f4x'", "{'descr': '<f4x', 'fortran_order': False, 'shape': ()}", 4, LOOM_ERR_DTYPE,
     "'<f4x' is not a loom dtype"},
    {"descr not a string", "{'descr': 4, 'fortran_order': False, 'shape': ()}", 4, LOOM_ERR_CORRUPT,
     "'descr' is not a quoted string"},
    {"text after the dict", F4_23 "x", 24, LOOM_ERR_CORRUPT, "text after the dict"},
    {"no comma", "{'descr': '<f4' 'fortran_order': False, 'shape': ()}", 4, LOOM_ERR_CORRUPT,
     "no ',' or '}'"},
    {"no colon", "{'descr' '<f4', 'fortran_order': False, 'shape': ()}", 4, LOOM_ERR_CORRUPT,
     "no ':'"},
    {"empty header", "", 0, LOOM_ERR_CORRUPT, "no '{'"},
};

static void test_bad_headers(void) {
  /* accepted: the spellings the format allows (double quotes, no trailing
   * comma, keys in any order, '=' and '|' byte orders, tabs) */
  static const char *const good[] = {
      F4_23,
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
      "{'shape': (2,3,), 'fortran_order': False, 'descr': '=f4'}   \n",
      "{\t'descr':'<f4','fortran_order':False,'shape':(2,\t3)}",
  };
  float values[6] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 4; i++) {
    check_set_ctx("header %s", good[i]);
    write_npy(path_of("good.npy"), good[i], values, sizeof values);
    loom_tensor *t = loom_npy_read(path_of("good.npy"), LOOM_CPU);
    CHECK_MSG(t != NULL, "%s", loom_last_error());
    float *v = host_values(t, LOOM_SHAPE(2, 3), LOOM_F32);
    CHECK(v && memcmp(v, values, sizeof values) == 0);
    free(v);
    loom_free(t);
  }
  for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++)
    refused_header(bad_headers[i].what, bad_headers[i].header, bad_headers[i].data_len,
                   bad_headers[i].status, bad_headers[i].says);
  /* a NUL inside the header */
  char with_nul[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
  write_npy_raw(path_of("nul.npy"), 1, with_nul, -1, "\0\0\0\0", 4);
  size_t len;
  unsigned char *bytes = check_read_file(path_of("nul.npy"), &len);
  bytes[10 + 3] = 0;
  check_write_file(path_of("nul.npy"), bytes, len);
  free(bytes);
  expect_refusal("a NUL in the header", path_of("nul.npy"), LOOM_ERR_CORRUPT, "NUL");
}

static void test_bad_prefixes(void) {
  float values[6] = {0};
  check_write_file(path_of("empty.npy"), "", 0);
  expect_refusal("empty file", path_of("empty.npy"), LOOM_ERR_CORRUPT, "too short");
  check_write_file(path_of("magic.npy"), "\x93NUMPZ\x01\x00\x10\x00{}              ", 26);
  expect_refusal("bad magic", path_of("magic.npy"), LOOM_ERR_CORRUPT, "not a .npy file");
  for (int v = 0; v < 3; v++) {
    const unsigned char versions[3][2] = {{4, 0}, {1, 1}, {0, 0}};
    write_npy_raw(path_of("version.npy"), 1, F4_23, -1, values, sizeof values);
    size_t len;
    unsigned char *bytes = check_read_file(path_of("version.npy"), &len);
    bytes[6] = versions[v][0], bytes[7] = versions[v][1];
    check_write_file(path_of("version.npy"), bytes, len);
    free(bytes);
    expect_refusal("unknown version", path_of("version.npy"), LOOM_ERR_CORRUPT,
                   "loom reads 1.0, 2.0 and 3.0");
  }
  write_npy_raw(path_of("long.npy"), 1, F4_23, 60000, values, sizeof values);
  expect_refusal("header length past the file", path_of("long.npy"), LOOM_ERR_CORRUPT,
                 "runs past the end of the file");
  write_npy_raw(path_of("long2.npy"), 2, F4_23, 0xfffffff0ll, values, sizeof values);
  expect_refusal("v2 header length past the file", path_of("long2.npy"), LOOM_ERR_CORRUPT,
                 "runs past the end of the file");
  check_write_file(path_of("v2short.npy"), "\x93NUMPY\x02\x00\x10\x00", 10);
  expect_refusal("v2 without its length", path_of("v2short.npy"), LOOM_ERR_CORRUPT, "too short");
  /* a header over the limit, inside the file */
  size_t big = 70000;
  char *header = malloc(big + 1);
  memset(header, ' ', big);
  memcpy(header, F4_23, strlen(F4_23) - 1);
  header[big] = 0;
  write_npy_raw(path_of("big.npy"), 2, header, -1, values, sizeof values);
  free(header);
  expect_refusal("header over the limit", path_of("big.npy"), LOOM_ERR_CORRUPT, "over the limit");
  /* files that are not there or not files */
  expect_refusal("missing file", path_of("none.npy"), LOOM_ERR_IO, "cannot open");
  expect_refusal("a directory", test_dir, LOOM_ERR_IO, "not a regular file");
  CHECK_EQ_INT(mkfifo(path_of("fifo.npy"), 0600), 0); /* refused at once, not waited on */
  expect_refusal("a FIFO", path_of("fifo.npy"), LOOM_ERR_IO, "not a regular file");
  unlink(path_of("fifo.npy"));
  loom_clear_error();
  CHECK(loom_npy_read(NULL, LOOM_CPU) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_NULL);
  CHECK(loom_npy_read(fixture("f4_2x3"), (loom_device){7, 0}) == NULL);
  CHECK(loom_last_error() != NULL);
}

/* Every prefix of a good file is refused as corrupt; every header byte
 * replaced by a few others gives a tensor or a known status with a message. */
static void test_truncations_and_mutations(void) {
  size_t len = 0;
  unsigned char *good = check_read_file(fixture("f4_fortran"), &len);
  CHECK(good && len == 224);
  for (size_t cut = 0; good && cut < len; cut++) {
    check_write_file(path_of("cut.npy"), good, cut);
    loom_clear_error();
    loom_tensor *t = loom_npy_read(path_of("cut.npy"), LOOM_CPU);
    CHECK_MSG(!t && loom_last_status() == LOOM_ERR_CORRUPT && loom_last_error() &&
                  strstr(loom_last_error(), "cut.npy"),
              "cut at %zu: %s", cut, loom_last_error() ? loom_last_error() : "no error");
    loom_free(t);
  }
  static const unsigned char replacements[] = {0, ' ', '\'', '(', ')', ',', '9', '}', 0xff};
  int accepted = 0;
  for (size_t at = 0; good && at < 128; at++)
    for (size_t r = 0; r < sizeof replacements; r++) {
      unsigned char *m = malloc(len);
      memcpy(m, good, len);
      m[at] = replacements[r];
      check_write_file(path_of("mutated.npy"), m, len);
      free(m);
      loom_clear_error();
      loom_tensor *t = loom_npy_read(path_of("mutated.npy"), LOOM_CPU);
      if (t) {
        accepted++;
        CHECK_OK(loom_realize(t));
      } else {
        loom_status st = loom_last_status();
        CHECK_MSG(st == LOOM_ERR_CORRUPT || st == LOOM_ERR_DTYPE || st == LOOM_ERR_SHAPE,
                  "byte %zu = %d: %s", at, replacements[r], loom_status_name(st));
        CHECK(loom_last_error() != NULL);
      }
      loom_free(t);
    }
  CHECK(accepted > 0); /* spaces of the padding, for one */
  free(good);
  /* bools other than 0 and 1 are read as 1, as loom_from_data keeps them */
  const unsigned char b[3] = {0, 2, 255};
  write_npy(path_of("bools.npy"), "{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}", b, 3);
  loom_tensor *t = loom_npy_read(path_of("bools.npy"), LOOM_CPU);
  unsigned char *v = host_values(t, LOOM_SHAPE(3), LOOM_BOOL);
  CHECK(v && v[0] == 0 && v[1] == 1 && v[2] == 1);
  free(v);
  loom_free(t);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(test_dir, sizeof test_dir, "%s/loom-npy-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(test_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_numpy_files();
  test_round_trips();
  test_write_refusals();
  test_bad_headers();
  test_bad_prefixes();
  test_truncations_and_mutations();
  check_remove_dir(test_dir);
  return check_report();
}
