/* safetensors: round trips of every dtype, the bytes the format mandates, a
 * hand-written file, and refusals of malformed or mismatching files (every
 * truncation, byte mutations, bad headers, names, shapes, dtypes, paths), each
 * with its status and message, leaving the collection's values unchanged. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "scratch.h"

/* ------------------------------------------------------------ files */

static char test_dir[256];

/* A path in the suite's own directory (four live at once). */
static const char *path_of(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", test_dir, name);
  return p;
}

static void put_u64_le(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A file with the given header size field, header text and data. */
static void write_st_sized(const char *path, uint64_t header_size, const char *json,
                           const void *data, size_t data_len) {
  size_t json_len = strlen(json);
  unsigned char *buf = malloc(8 + json_len + data_len);
  put_u64_le(buf, header_size);
  memcpy(buf + 8, json, json_len);
  if (data_len) memcpy(buf + 8 + json_len, data, data_len);
  check_write_file(path, buf, 8 + json_len + data_len);
  free(buf);
}

static void write_st(const char *path, const char *json, const void *data, size_t data_len) {
  write_st_sized(path, strlen(json), json, data, data_len);
}

static int count_dir_entries(void) {
  DIR *d = opendir(test_dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static void remove_test_dir(void) {
  DIR *d = opendir(test_dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    const char *p = path_of(e->d_name);
    if (unlink(p) != 0) rmdir(p);
  }
  if (d) closedir(d);
  rmdir(test_dir);
}

/* ------------------------------------------------------------ collections */

static void add_tensor(loom_params *ps, const char *name, const void *data, loom_shape shape,
                       loom_dtype dtype, bool trainable) {
  loom_tensor *t = loom_from_data(data, shape, dtype, LOOM_CPU);
  loom_status st = trainable ? loom_params_add(ps, name, t) : loom_params_add_buffer(ps, name, t);
  CHECK_MSG(st == LOOM_OK, "adding '%s': %s", name, loom_last_error());
  loom_free(t);
}

/* Every value of the collection, concatenated in its order (free it). */
static unsigned char *values_of(const loom_params *ps, size_t *len) {
  size_t total = 0;
  unsigned char *all = malloc(1);
  for (int i = 0; i < loom_params_count(ps); i++) {
    loom_tensor *t = loom_params_at(ps, i);
    size_t bytes = (size_t)loom_numel(t) * loom_dtype_size(loom_dtype_of(t));
    all = realloc(all, total + bytes + 1);
    CHECK_OK(loom_copy_to_host(t, all + total, bytes));
    total += bytes;
    loom_free(t);
  }
  *len = total;
  return all;
}

static bool values_equal(const loom_params *ps, const void *expected, size_t len) {
  size_t got_len;
  unsigned char *got = values_of(ps, &got_len);
  bool same = got_len == len && memcmp(got, expected, len) == 0;
  free(got);
  return same;
}

/* The suite's small collection: w F32 [2] (trainable) and n I64 [] (a buffer). */
static const float small_w[2] = {1.0f, -2.5f};
static const int64_t small_n = 7;

static loom_params *small_collection(void) {
  loom_params *ps = loom_params_new();
  add_tensor(ps, "w", small_w, LOOM_SHAPE(2), LOOM_F32, true);
  add_tensor(ps, "n", &small_n, LOOM_SHAPE0, LOOM_I64, false);
  return ps;
}

/* Data for a file fitting the small collection: w = {10, 20}, n = 42. */
static void small_file_data(unsigned char out[16]) {
  const float w[2] = {10.0f, 20.0f};
  const int64_t n = 42;
  memcpy(out, w, 8);
  memcpy(out + 8, &n, 8);
}
#define SMALL_JSON                                                                                 \
  "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"                               \
  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}"

/* Loading path into ps fails with status, its message names each of the
 * substrings (up to three, NULL ends), and ps keeps its values. */
static void expect_refusal(const char *what, loom_params *ps, const char *path, loom_status status,
                           const char *sub1, const char *sub2, const char *sub3) {
  check_set_ctx("%s", what);
  size_t before_len;
  unsigned char *before = values_of(ps, &before_len);
  loom_clear_error();
  CHECK_RC(loom_params_load(ps, path), status);
  const char *subs[3] = {sub1, sub2, sub3};
  for (int i = 0; i < 3 && subs[i]; i++) CHECK_STR_CONTAINS(loom_last_error(), subs[i]);
  CHECK_MSG(values_equal(ps, before, before_len), "values changed by a refused load");
  free(before);
  loom_clear_error();
  check_set_ctx("%s", "");
}

/* ------------------------------------------------------------ round trips */

static void test_round_trip_all_dtypes(void) {
  const float f32[6] = {1.5f, -2.25f, 3e-38f, -0.0f, INFINITY, 1e30f};
  const double f64 = 3.141592653589793;
  const int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
  const uint8_t u8[5] = {0, 1, 127, 128, 255};
  const uint8_t flags[3] = {1, 0, 1};
  const float lazy_src[3] = {1, 2, 3};
  loom_params *src = loom_params_new();
  add_tensor(src, "layer.w", f32, LOOM_SHAPE(2, 3), LOOM_F32, true);
  add_tensor(src, "scale", &f64, LOOM_SHAPE0, LOOM_F64, true);
  add_tensor(src, "ints", i32, LOOM_SHAPE(4), LOOM_I32, false);
  add_tensor(src, "empty", NULL, LOOM_SHAPE(2, 0), LOOM_I64, false);
  add_tensor(src, "bytes", u8, LOOM_SHAPE(5, 1), LOOM_U8, false);
  add_tensor(src, "mask", flags, LOOM_SHAPE(3), LOOM_BOOL, false);
  /* an unrealized value and a pending assignment are computed by the save */
  loom_tensor *x = loom_from_data(lazy_src, LOOM_SHAPE(3), LOOM_F32, LOOM_CPU);
  loom_tensor *doubled = loom_mul_s(x, 2);
  CHECK_OK(loom_params_add_buffer(src, "lazy", doubled));
  loom_tensor *w = loom_params_get(src, "layer.w");
  LOOM_NO_GRAD {
    loom_tensor *tripled = loom_mul_s(w, 3);
    CHECK_OK(loom_assign(w, tripled));
    loom_free(tripled);
  }
  const char *path = path_of("all.safetensors");
  CHECK_OK(loom_params_save(src, path));
  CHECK(loom_is_realized(w) && loom_is_realized(doubled));
  size_t expected_len;
  unsigned char *expected = values_of(src, &expected_len);
  CHECK_NEAR(((float *)expected)[0], 4.5, 0); /* 3 * 1.5 */

  /* the file's frame: header size aligned, data exactly after it */
  size_t file_len;
  unsigned char *file = check_read_file(path, &file_len);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0 && file; i--) header_size = header_size << 8 | file[i];
  CHECK_EQ_INT(header_size % 8, 0);
  CHECK_EQ_INT(file_len, 8 + header_size + expected_len);
  CHECK(file && memcmp(file + 8 + header_size, expected, expected_len) == 0);
  free(file);

  /* into a collection of zeros, through a handle the user holds */
  loom_params *dst = loom_params_new();
  const char *names[7] = {"layer.w", "scale", "ints", "empty", "bytes", "mask", "lazy"};
  for (int i = 0; i < 7; i++) {
    loom_tensor *like = loom_params_at(src, i);
    loom_tensor *zero = loom_zeros(loom_shape_of(like), loom_dtype_of(like), LOOM_CPU);
    CHECK_OK(loom_params_trainable(src, i) ? loom_params_add(dst, names[i], zero)
                                           : loom_params_add_buffer(dst, names[i], zero));
    loom_free(zero);
    loom_free(like);
  }
  loom_tensor *held = loom_params_get(dst, "layer.w");
  CHECK_OK(loom_params_load(dst, path));
  CHECK_MSG(values_equal(dst, expected, expected_len), "loaded values differ from saved ones");
  float got[6];
  CHECK_OK(loom_copy_to_host(held, got, sizeof got));
  CHECK(memcmp(got, expected, sizeof got) == 0);
  CHECK(loom_requires_grad(held));
  CHECK(loom_params_trainable(dst, 0) && !loom_params_trainable(dst, 2));

  /* the loaded parameter still takes gradients: d(sum w*w)/dw = 2w */
  loom_tensor *sq = loom_mul(held, held);
  loom_tensor *loss = loom_sum_all(sq);
  CHECK_OK(loom_backward(loss));
  loom_tensor *grad = loom_grad(held);
  float g[6] = {0};
  CHECK(grad != NULL);
  if (grad) CHECK_OK(loom_copy_to_host(grad, g, sizeof g));
  for (int i = 0; i < 6; i++) CHECK_MSG(g[i] == 2.0f * got[i], "grad %d: %g", i, g[i]);

  /* saving again over the file replaces it and leaves no temporary behind */
  int entries = count_dir_entries();
  CHECK_OK(loom_params_save(dst, path));
  CHECK_EQ_INT(count_dir_entries(), entries);
  loom_params *again = small_collection();
  expect_refusal("reload into another collection", again, path, LOOM_ERR_SHAPE, "unexpected", NULL,
                 NULL);
  loom_params_free(again);

  loom_free(grad);
  loom_free(loss);
  loom_free(sq);
  loom_free(held);
  loom_free(w);
  loom_free(doubled);
  loom_free(x);
  free(expected);
  loom_params_free(dst);
  loom_params_free(src);
}

/* I8 entries are loom's I8, both ways (they were read as I32, and an I8
 * tensor could not be saved). I16 is loom's I16 (it was widened to I32). */
static void test_i8_entries(void) {
  const char *p = path_of("i8.safetensors");
  const unsigned char data[8] = {0x80, 0xff, 0x00, 0x7f,
                                 0x00, 0x80, 0xff, 0x7f}; /* i8 x4, i16 x2 */
  write_st(p,
           "{\"q\":{\"dtype\":\"I8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
           "\"h\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
           data, sizeof data);
  loom_params *all = loom_safetensors_read(p, LOOM_CPU);
  CHECK(all != NULL);
  if (all) {
    loom_tensor *q = loom_params_get(all, "q"), *h = loom_params_get(all, "h");
    CHECK_EQ_INT(loom_dtype_of(q), LOOM_I8);
    CHECK_EQ_INT(loom_dtype_of(h), LOOM_I16);
    int8_t qv[4] = {0};
    int16_t hv[2] = {0};
    CHECK_OK(loom_copy_to_host(q, qv, sizeof qv));
    CHECK_OK(loom_copy_to_host(h, hv, sizeof hv));
    CHECK(qv[0] == -128 && qv[1] == -1 && qv[2] == 0 && qv[3] == 127);
    CHECK(hv[0] == -32768 && hv[1] == 32767);
    loom_free(q), loom_free(h);
    loom_params_free(all);
  }
  /* saved as I8, byte for byte, and loaded back into an I8 tensor only */
  const int8_t vals[5] = {-128, -1, 0, 1, 127};
  loom_params *src = loom_params_new();
  add_tensor(src, "q", vals, LOOM_SHAPE(5), LOOM_I8, false);
  CHECK_OK(loom_params_save(src, p));
  size_t len;
  unsigned char *file = check_read_file(p, &len);
  CHECK(file && len >= 5 && memcmp(file + len - 5, vals, 5) == 0);
  char header[128] = "";
  if (file && len > 8)
    memcpy(header, file + 8, len - 8 < sizeof header - 1 ? len - 8 : sizeof header - 1);
  CHECK_STR_CONTAINS(header, "\"dtype\":\"I8\"");
  free(file);
  const int8_t zeros[5] = {0};
  const int32_t wide_zeros[5] = {0};
  loom_params *dst = loom_params_new();
  add_tensor(dst, "q", zeros, LOOM_SHAPE(5), LOOM_I8, false);
  CHECK_OK(loom_params_load(dst, p));
  int8_t got[5] = {0};
  loom_tensor *q = loom_params_get(dst, "q");
  CHECK_OK(loom_copy_to_host(q, got, sizeof got));
  CHECK(memcmp(got, vals, sizeof got) == 0);
  loom_free(q);
  loom_params *wide = loom_params_new();
  add_tensor(wide, "q", wide_zeros, LOOM_SHAPE(5), LOOM_I32, false);
  CHECK_RC(loom_params_load(wide, p), LOOM_ERR_DTYPE);
  loom_clear_error();
  loom_params_free(wide);
  loom_params_free(dst);
  loom_params_free(src);
}

/* I16, U16, U32 and U64 entries read as loom's own dtypes (I16 and U16 were
 * widened to I32, U32 to I64, U64 refused), every value exact, and save as
 * themselves byte for byte. */
static void test_wide_int_entries(void) {
  const char *p = path_of("wide_ints.safetensors");
  const int16_t i16[2] = {-32768, 32767};
  const uint16_t u16[2] = {65535, 1};
  const uint32_t u32[2] = {4294967295u, 3000000000u};
  const uint64_t u64[2] = {18446744073709551615ull, 9223372036854775809ull};
  unsigned char data[32];
  memcpy(data, i16, 4), memcpy(data + 4, u16, 4), memcpy(data + 8, u32, 8);
  memcpy(data + 16, u64, 16);
  write_st(p,
           "{\"a\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[4,8]},"
           "\"c\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[8,16]},"
           "\"d\":{\"dtype\":\"U64\",\"shape\":[2],\"data_offsets\":[16,32]}}",
           data, 32);
  static const char *const names[4] = {"a", "b", "c", "d"};
  static const char *const st_names[4] = {"\"I16\"", "\"U16\"", "\"U32\"", "\"U64\""};
  const loom_dtype dts[4] = {LOOM_I16, LOOM_U16, LOOM_U32, LOOM_U64};
  const void *vals[4] = {i16, u16, u32, u64};
  const size_t sizes[4] = {4, 4, 8, 16};
  loom_params *all = loom_safetensors_read(p, LOOM_CPU);
  CHECK(all != NULL);
  for (int i = 0; all && i < 4; i++) {
    loom_tensor *t = loom_params_get(all, names[i]);
    CHECK_EQ_INT(loom_dtype_of(t), dts[i]);
    unsigned char got[16] = {0};
    CHECK_OK(loom_copy_to_host(t, got, sizes[i]));
    CHECK_MSG(memcmp(got, vals[i], sizes[i]) == 0, "%s read back", names[i]);
    loom_free(t);
  }
  const char *q = path_of("wide_ints_saved.safetensors");
  if (all) CHECK_OK(loom_params_save(all, q));
  loom_params_free(all);
  size_t len;
  unsigned char *file = check_read_file(q, &len);
  CHECK(file && len >= 32 && memcmp(file + len - 32, data, 32) == 0);
  char header[512] = "";
  if (file && len > 8)
    memcpy(header, file + 8, len - 8 < sizeof header - 1 ? len - 8 : sizeof header - 1);
  for (int i = 0; i < 4; i++) CHECK_STR_CONTAINS(header, st_names[i]);
  free(file);
}

static void test_empty_collection(void) {
  loom_params *ps = loom_params_new();
  const char *path = path_of("empty.safetensors");
  CHECK_OK(loom_params_save(ps, path));
  CHECK_OK(loom_params_load(ps, path));
  loom_params_free(ps);
}

/* ------------------------------------------------------------ the format's bytes */

static void test_exact_bytes(void) {
  loom_params *ps = loom_params_new();
  add_tensor(ps, "w", small_w, LOOM_SHAPE(2), LOOM_F32, true);
  const char *path = path_of("exact.safetensors");
  CHECK_OK(loom_params_save(ps, path));

  /* what the reference writer emits: compact JSON, metadata first, spaces up
   * to a multiple of 8, then 1.0f and -2.5f little-endian */
  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                     "\"data_offsets\":[0,8]}}";
  const unsigned char data[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0};
  size_t json_len = strlen(json), padded = (json_len + 7) / 8 * 8;
  size_t expected_len = 8 + padded + sizeof data;
  unsigned char *expected = malloc(expected_len);
  put_u64_le(expected, padded);
  memcpy(expected + 8, json, json_len);
  memset(expected + 8 + json_len, ' ', padded - json_len);
  memcpy(expected + 8 + padded, data, sizeof data);

  size_t len;
  unsigned char *got = check_read_file(path, &len);
  CHECK_EQ_INT(len, expected_len);
  /* by meaning: the same header whatever its key order, the same data */
  json_error_t err;
  json_t *want = json_loads(json, 0, &err);
  json_t *have = got && len >= 8 + padded ? json_loadb((char *)got + 8, padded, 0, &err) : NULL;
  CHECK_MSG(have && json_equal(want, have), "header differs: %s", have ? "" : err.text);
  CHECK(got && len == expected_len && memcmp(got, expected, 8) == 0);
  CHECK(got && len == expected_len && memcmp(got + 8 + padded, data, sizeof data) == 0);
  /* and byte for byte, as the reference implementation orders it */
  CHECK_MSG(got && len == expected_len && memcmp(got, expected, len) == 0,
            "saved bytes differ from the reference layout");
  json_decref(want);
  json_decref(have);
  free(got);
  free(expected);
  loom_params_free(ps);
}

static void test_hand_written_file(void) {
  /* entries in another order than the collection's, whitespace everywhere,
   * extra metadata, data of n before w's in the file */
  const char *json = "{\n  \"n\" : { \"data_offsets\" : [ 0 , 8 ], \"shape\" : [ ],"
                     " \"dtype\" : \"I64\" },\n"
                     "  \"__metadata__\" : {\"format\" : \"pt\", \"note\" : \"by hand\"},\n"
                     "\t\"w\":{\"shape\":[2] ,\"dtype\":\"F32\",\"data_offsets\":[8,16]}\n}   ";
  const int64_t n = -123456789012345;
  const float w[2] = {0.25f, -8.0f};
  unsigned char data[16];
  memcpy(data, &n, 8);
  memcpy(data + 8, w, 8);
  const char *path = path_of("hand.safetensors");
  write_st(path, json, data, sizeof data);
  loom_params *ps = small_collection();
  CHECK_OK(loom_params_load(ps, path));
  unsigned char expected[16];
  memcpy(expected, w, 8);
  memcpy(expected + 8, &n, 8);
  CHECK_MSG(values_equal(ps, expected, sizeof expected), "hand-written file loaded wrongly");
  loom_params_free(ps);

  /* BOOL bytes other than 0 and 1 become 1, as loom_from_data makes them */
  loom_params *flags = loom_params_new();
  const uint8_t zeros[3] = {0, 0, 0}, stored[3] = {2, 0, 255}, canonical[3] = {1, 0, 1};
  add_tensor(flags, "m", zeros, LOOM_SHAPE(3), LOOM_BOOL, false);
  write_st(path, "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", stored, 3);
  CHECK_OK(loom_params_load(flags, path));
  CHECK(values_equal(flags, canonical, 3));
  loom_params_free(flags);
}

/* ------------------------------------------------------------ refusals */

static void test_truncations_and_mutations(void) {
  loom_params *src = small_collection();
  const char *valid = path_of("valid.safetensors");
  CHECK_OK(loom_params_save(src, valid));
  size_t len;
  unsigned char *file = check_read_file(valid, &len);
  loom_params_free(src);
  loom_params *ps = small_collection();
  const char *cut = path_of("cut.safetensors");
  char what[64];
  for (size_t k = 0; file && k < len; k++) {
    check_write_file(cut, file, k);
    snprintf(what, sizeof what, "truncated to %zu of %zu bytes", k, len);
    expect_refusal(what, ps, cut, LOOM_ERR_CORRUPT, cut, NULL, NULL);
  }
  /* one byte too many: the tensors no longer cover the data section */
  unsigned char *longer = malloc(len + 1);
  memcpy(longer, file, len);
  longer[len] = 0;
  check_write_file(cut, longer, len + 1);
  expect_refusal("a trailing byte", ps, cut, LOOM_ERR_CORRUPT, "cover", NULL, NULL);
  free(longer);

  /* every byte replaced by a few troublesome values: an error or a good load,
   * never a crash; a failed load changes nothing */
  static const unsigned char swaps[] = {0x00, 0xff, '{', '"', '9', '-', ' ', 0x80};
  int failed = 0;
  for (size_t i = 0; file && i < len; i++) {
    for (size_t s = 0; s < sizeof swaps; s++) {
      if (file[i] == swaps[s]) continue;
      unsigned char saved = file[i];
      file[i] = swaps[s];
      check_write_file(cut, file, len);
      file[i] = saved;
      size_t before_len;
      unsigned char *before = values_of(ps, &before_len);
      loom_clear_error();
      loom_status st = loom_params_load(ps, cut);
      if (st != LOOM_OK) {
        failed++;
        CHECK_MSG(st == LOOM_ERR_CORRUPT || st == LOOM_ERR_DTYPE || st == LOOM_ERR_SHAPE,
                  "byte %zu -> 0x%02x: status %s (%s)", i, swaps[s], loom_status_name(st),
                  loom_last_error());
        CHECK_MSG(loom_last_error() != NULL, "byte %zu: no message", i);
        CHECK_MSG(values_equal(ps, before, before_len), "byte %zu: values changed", i);
      }
      free(before);
    }
  }
  CHECK(failed > 0);
  loom_clear_error();
  free(file);
  loom_params_free(ps);
}

static void test_bad_headers(void) {
  loom_params *ps = small_collection();
  unsigned char data[16];
  small_file_data(data);
  const char *p = path_of("bad.safetensors");
  CHECK_OK((write_st(p, SMALL_JSON, data, 16), loom_params_load(ps, p))); /* the template is good */
  loom_params_free(ps);
  ps = small_collection();

  struct {
    const char *what, *json;
    size_t data_len;
    loom_status status;
    const char *sub;
  } cases[] = {
      {"broken JSON", "{\"w\": {\"dtype\": ", 16, LOOM_ERR_CORRUPT, "not valid JSON"},
      {"JSON array", "[1, 2]", 16, LOOM_ERR_CORRUPT, "start with '{'"},
      {"JSON string", "\"abc\"", 16, LOOM_ERR_CORRUPT, "start with '{'"},
      {"leading space", " {}", 0, LOOM_ERR_CORRUPT, "start with '{'"},
      {"trailing garbage", "{} x", 0, LOOM_ERR_CORRUPT, "not valid JSON"},
      {"entry not an object", "{\"w\": 5}", 0, LOOM_ERR_CORRUPT, "entry 'w' is not"},
      {"no dtype", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, LOOM_ERR_CORRUPT,
       "\"dtype\""},
      {"dtype a number", "{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_CORRUPT, "\"dtype\""},
      {"unknown dtype", "{\"w\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_DTYPE, "Q7"},
      {"no shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, LOOM_ERR_CORRUPT,
       "\"shape\""},
      {"negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_CORRUPT, "shape dim 0"},
      {"fractional dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_CORRUPT, "shape dim 0"},
      {"string dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_CORRUPT, "shape dim 1"},
      {"overflowing shape",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_CORRUPT, "64 bits"},
      {"bytes overflow",
       "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
       "\"data_offsets\":[0,8]}}",
       8, LOOM_ERR_CORRUPT, "more bytes than fit"},
      {"no offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, LOOM_ERR_CORRUPT,
       "data_offsets"},
      {"one offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
       LOOM_ERR_CORRUPT, "data_offsets"},
      {"negative offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8,
       LOOM_ERR_CORRUPT, "data_offsets"},
      {"reversed offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
       LOOM_ERR_CORRUPT, "[8, 0] end before"},
      {"offsets beyond the file",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4000]}}", 8, LOOM_ERR_CORRUPT,
       "data section of 8 bytes"},
      {"huge offsets",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9223372036854775800,"
       "9223372036854775807]}}",
       8, LOOM_ERR_CORRUPT, "do not fit"},
      {"size not the shape's", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
       8, LOOM_ERR_CORRUPT, "needs 12"},
      {"overlap",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}}",
       16, LOOM_ERR_CORRUPT, "overlaps"},
      {"same offsets twice",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}",
       16, LOOM_ERR_CORRUPT, "overlaps"},
      {"gap",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[12,20]}}",
       20, LOOM_ERR_CORRUPT, "belong to no tensor"},
      {"uncovered tail", SMALL_JSON, 17, LOOM_ERR_CORRUPT, "cover 16 bytes of a 17-byte"},
      {"data without tensors", "{}", 16, LOOM_ERR_CORRUPT, "cover 0 bytes"},
      {"duplicate name",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
       16, LOOM_ERR_CORRUPT, "duplicate"},
      {"metadata not an object", "{\"__metadata__\":[1]}", 0, LOOM_ERR_CORRUPT, "__metadata__"},
      {"metadata not strings", "{\"__metadata__\":{\"format\":1}}", 0, LOOM_ERR_CORRUPT,
       "'format'"},
      {"invalid UTF-8", "{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_CORRUPT, "not valid JSON"},
      {"NUL escape in a name",
       "{\"w\\u0000\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
       LOOM_ERR_CORRUPT, "not valid JSON"},
  };
  unsigned char big[32] = {0};
  memcpy(big, data, 16);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_st(p, cases[i].json, big, cases[i].data_len);
    expect_refusal(cases[i].what, ps, p, cases[i].status, cases[i].sub, p, NULL);
  }

  /* the header size field */
  write_st_sized(p, UINT64_MAX, SMALL_JSON, data, 16);
  expect_refusal("header size 2^64-1", ps, p, LOOM_ERR_CORRUPT, "over the limit", NULL, NULL);
  write_st_sized(p, 100000001, SMALL_JSON, data, 16);
  expect_refusal("header size over 100 MB", ps, p, LOOM_ERR_CORRUPT, "100000001", NULL, NULL);
  write_st_sized(p, strlen(SMALL_JSON) + 17, SMALL_JSON, data, 16);
  expect_refusal("header past the end", ps, p, LOOM_ERR_CORRUPT, "runs past the end", NULL, NULL);
  write_st_sized(p, 0, "", NULL, 0);
  expect_refusal("header size 0", ps, p, LOOM_ERR_CORRUPT, "start with '{'", NULL, NULL);
  check_write_file(p, "\x10\0\0", 3);
  expect_refusal("3-byte file", ps, p, LOOM_ERR_CORRUPT, "too short", NULL, NULL);
  loom_params_free(ps);
}

static void test_collection_mismatches(void) {
  loom_params *ps = small_collection();
  const char *p = path_of("mismatch.safetensors");
  unsigned char data[64] = {0};
  small_file_data(data);

  write_st(p,
           "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
           "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[16,24]}}",
           data, 24);
  expect_refusal("wrong dtype", ps, p, LOOM_ERR_DTYPE, "'w' is F64 [2] in the file",
                 "F32 [2] in the collection", p);
  write_st(p,
           "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
           "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}}",
           data, 12);
  expect_refusal("a dtype loom lacks", ps, p, LOOM_ERR_DTYPE, "'w' is F16 [2] in the file", NULL,
                 NULL);
  write_st(p,
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
           "\"n\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[12,20]}}",
           data, 20);
  expect_refusal("wrong shapes", ps, p, LOOM_ERR_SHAPE, "'w' is F32 [3] in the file, F32 [2]",
                 "'n' is I64 [1] in the file, I64 [] in the collection", "2 problems");
  write_st(p, "{\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}", data, 8);
  expect_refusal("missing name", ps, p, LOOM_ERR_SHAPE, "missing 'w' (F32 [2])", NULL, NULL);
  write_st(p,
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]},"
           "\"extra.b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]}}",
           data, 16);
  expect_refusal("extra name", ps, p, LOOM_ERR_SHAPE, "unexpected 'extra.b' (U8 [0])", NULL, NULL);
  write_st(p,
           "{\"w\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[0,24]},"
           "\"x\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[24,25]}}",
           data, 25);
  expect_refusal("all at once", ps, p, LOOM_ERR_SHAPE, "'w' is F64 [3] in the file, F32 [2]",
                 "missing 'n'", "unexpected 'x'");
  write_st(p, "{}", NULL, 0);
  expect_refusal("empty file", ps, p, LOOM_ERR_SHAPE, "missing 'w'", "missing 'n'", NULL);
  loom_params_free(ps);

  /* more problems than fit in one message: the rest are counted */
  loom_params *many = loom_params_new();
  for (int i = 0; i < 60; i++) {
    char name[64];
    snprintf(name, sizeof name, "block%02d.some_rather_long_parameter_name", i);
    add_tensor(many, name, small_w, LOOM_SHAPE(2), LOOM_F32, true);
  }
  expect_refusal("sixty missing", many, p, LOOM_ERR_SHAPE, "60 problems", "missing 'block00",
                 "more");
  loom_params_free(many);
}

/* F16 and BF16 bit patterns and the values they hold (IEEE half: a
 * subnormal, the largest finite, infinity; bfloat16: the top half of an F32),
 * little-endian. */
static const uint16_t f16_bits[6] = {0x3c00, 0xc100, 0x0001, 0x7bff, 0x7c00, 0x3555};
static const float f16_values[6] = {1.0f, -2.5f, 0x1p-24f, 65504.0f, INFINITY, 0.33325195f};
static const uint16_t bf16_bits[3] = {0x3f80, 0xc020, 0x4049};
static const float bf16_values[3] = {1.0f, -2.5f, 3.140625f};

static void test_non_strict_and_cast(void) {
  const char *p = path_of("hf.safetensors");
  unsigned char data[64] = {0};
  memcpy(data, f16_bits, 12);         /* w: F16 [6] at 0 */
  memcpy(data + 12, bf16_bits, 6);    /* b: BF16 [3] at 12 */
  const double d[2] = {0.125, -7.75}; /* s: F64 [2] at 18 */
  memcpy(data + 18, d, 16);
  data[34] = 9; /* lm_head: U8 [1] at 34 (unexpected) */
  write_st(p,
           "{\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
           "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[12,18]},"
           "\"s\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[18,34]},"
           "\"lm_head\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[34,35]},"
           "\"__metadata__\":{\"format\":\"pt\"}}",
           data, 35);
  float zeros[6] = {0}, kept[2] = {4, 5};
  loom_params *ps = loom_params_new();
  add_tensor(ps, "w", zeros, LOOM_SHAPE(2, 3), LOOM_F32, true);
  add_tensor(ps, "b", zeros, LOOM_SHAPE(3), LOOM_F32, true);
  add_tensor(ps, "s", zeros, LOOM_SHAPE(2), LOOM_F32, true);
  add_tensor(ps, "extra", kept, LOOM_SHAPE(2), LOOM_F32, true);
  /* strict (the default) and without casting: every problem, nothing changed */
  expect_refusal("strict", ps, p, LOOM_ERR_SHAPE, "missing 'extra'", "unexpected 'lm_head'",
                 "'w' is F16 [2,3] in the file");
  loom_load_report r;
  CHECK_RC(loom_params_load_ex(ps, p, (loom_load_opts){.non_strict = true}, &r), LOOM_ERR_DTYPE);
  CHECK_STR_CONTAINS(loom_last_error(), "loom_params_load_ex");
  CHECK_EQ_INT(r.nmissing + r.nunexpected, 0); /* empty after an error */
  CHECK_RC(loom_params_load_ex(ps, p, (loom_load_opts){.cast = true}, NULL), LOOM_ERR_SHAPE);
  loom_clear_error();
  CHECK_OK(loom_params_load_ex(ps, p, (loom_load_opts){.non_strict = true, .cast = true}, &r));
  CHECK_EQ_INT(r.nmissing, 1);
  CHECK_EQ_INT(r.nunexpected, 1);
  if (r.nmissing == 1 && r.nunexpected == 1) {
    CHECK(strcmp(r.missing[0], "extra") == 0);
    CHECK(strcmp(r.unexpected[0], "lm_head") == 0);
  }
  loom_load_report_free(&r);
  CHECK(r.missing == NULL && r.nmissing == 0);
  float got[6];
  loom_tensor *t = loom_params_get(ps, "w");
  CHECK_OK(loom_copy_to_host(t, got, sizeof got));
  for (int i = 0; i < 6; i++) CHECK(got[i] == f16_values[i]);
  loom_free(t);
  t = loom_params_get(ps, "b");
  CHECK_OK(loom_copy_to_host(t, got, 3 * sizeof(float)));
  for (int i = 0; i < 3; i++) CHECK(got[i] == bf16_values[i]);
  loom_free(t);
  t = loom_params_get(ps, "s");
  CHECK_OK(loom_copy_to_host(t, got, 2 * sizeof(float)));
  CHECK(got[0] == 0.125f && got[1] == -7.75f);
  loom_free(t);
  t = loom_params_get(ps, "extra"); /* missing from the file: kept */
  CHECK_OK(loom_copy_to_host(t, got, 2 * sizeof(float)));
  CHECK(got[0] == 4 && got[1] == 5);
  loom_free(t);
  loom_params_free(ps);

  /* the whole file into named tensors */
  loom_params *all = loom_safetensors_read(p, LOOM_CPU);
  CHECK(all != NULL);
  if (all) {
    CHECK_EQ_INT(loom_params_count(all), 4);
    const char *names[4] = {"w", "b", "s", "lm_head"};
    const loom_dtype dtypes[4] = {LOOM_F16, LOOM_BF16, LOOM_F64, LOOM_U8}; /* each its own */
    for (int i = 0; i < 4 && i < loom_params_count(all); i++) {
      CHECK(strcmp(loom_params_name(all, i), names[i]) == 0);
      CHECK(!loom_params_trainable(all, i));
      loom_tensor *e = loom_params_at(all, i);
      CHECK_EQ_INT(loom_dtype_of(e), dtypes[i]);
      loom_free(e);
    }
    t = loom_params_get(all, "w");
    CHECK_EQ_INT(loom_shape_of(t).ndim, 2);
    uint16_t bits[6];
    CHECK_OK(loom_copy_to_host(t, bits, sizeof bits));
    for (int i = 0; i < 6; i++) CHECK(loom_f16_to_float(bits[i]) == f16_values[i]);
    CHECK(bits[2] == 0x0001 && bits[4] == 0x7c00); /* 2^-24 and inf, bit for bit */
    loom_free(t);
    t = loom_params_get(all, "b");
    CHECK_OK(loom_copy_to_host(t, bits, 3 * sizeof *bits));
    for (int i = 0; i < 3; i++) CHECK(loom_bf16_to_float(bits[i]) == bf16_values[i]);
    loom_free(t);
    loom_params_free(all);
  }
  write_st(p, "{\"small\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", data, 1);
  CHECK(loom_safetensors_read(p, LOOM_CPU) == NULL);
  CHECK_STR_CONTAINS(loom_last_error(), "loom_safetensors_read");
  CHECK_STR_CONTAINS(loom_last_error(), "'small': dtype F8_E4M3 has no loom dtype");
  loom_clear_error();
  CHECK(loom_safetensors_read(path_of("absent.safetensors"), LOOM_CPU) == NULL);
  CHECK_STR_CONTAINS(loom_last_error(), "cannot open");
  CHECK(loom_safetensors_read(NULL, LOOM_CPU) == NULL);
  loom_clear_error();
}

static void test_paths(void) {
  loom_params *ps = small_collection();
  const char *missing = path_of("no-such-file.safetensors");
  expect_refusal("nonexistent file", ps, missing, LOOM_ERR_IO, missing, "No such file", NULL);
  expect_refusal("a directory", ps, test_dir, LOOM_ERR_IO, "not a regular file", NULL, NULL);

  int entries = count_dir_entries();
  const char *nowhere = path_of("no-such-dir/params.safetensors");
  loom_clear_error();
  CHECK_RC(loom_params_save(ps, nowhere), LOOM_ERR_IO);
  CHECK_STR_CONTAINS(loom_last_error(), nowhere);
  CHECK_STR_CONTAINS(loom_last_error(), "No such file");
  /* a directory in the way: the rename fails and the temporary goes */
  const char *sub = path_of("a-directory");
  CHECK(mkdir(sub, 0700) == 0);
  loom_clear_error();
  CHECK_RC(loom_params_save(ps, sub), LOOM_ERR_IO);
  CHECK_STR_CONTAINS(loom_last_error(), "a-directory");
  CHECK_STR_CONTAINS(loom_last_error(), "cannot replace");
  CHECK_EQ_INT(count_dir_entries(), entries + 1);

  /* a failed save leaves the previous file as it was */
  const char *keep = path_of("kept.safetensors");
  CHECK_OK(loom_params_save(ps, keep));
  size_t before_len, after_len;
  unsigned char *before = check_read_file(keep, &before_len);
  loom_params *reserved = loom_params_new();
  loom_tensor *meta = loom_from_data(small_w, LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  loom_clear_error(); /* the name safetensors reserves cannot enter a collection */
  CHECK_RC(loom_params_add_buffer(reserved, "__metadata__", meta), LOOM_ERR_VALUE);
  CHECK_STR_CONTAINS(loom_last_error(), "__metadata__");
  loom_free(meta);
  loom_clear_error();
  CHECK_RC(loom_params_save(reserved, path_of("a-directory")), LOOM_ERR_IO);
  unsigned char *after = check_read_file(keep, &after_len);
  CHECK(before && after && before_len == after_len && memcmp(before, after, before_len) == 0);
  free(before);
  free(after);
  loom_params_free(reserved);

  loom_clear_error();
  CHECK_RC(loom_params_save(NULL, keep), LOOM_ERR_NULL);
  CHECK_RC(loom_params_save(ps, NULL), LOOM_ERR_NULL);
  CHECK_RC(loom_params_load(NULL, keep), LOOM_ERR_NULL);
  CHECK_RC(loom_params_load(ps, NULL), LOOM_ERR_NULL);
  loom_clear_error();
  loom_params_free(ps);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(test_dir, sizeof test_dir, "%s/loom-safetensors-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(test_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_round_trip_all_dtypes();
  test_i8_entries();
  test_wide_int_entries();
  test_empty_collection();
  test_exact_bytes();
  test_hand_written_file();
  test_truncations_and_mutations();
  test_bad_headers();
  test_collection_mismatches();
  test_non_strict_and_cast();
  test_paths();
  remove_test_dir();
  return check_report();
}
