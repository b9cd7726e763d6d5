/* Every kind of bad input the API can receive, in one table: NULL handles,
 * wrong shapes, wrong dtypes, mixed devices, bad axes, negative or
 * overflowing sizes, freed handles used again, non-finite values in losses,
 * corrupt or truncated files, an unusable cache directory. Each row is one
 * call with the status and a part of the message it must get.
 *
 * The walk runs every row in its own scope and checks after each that
 * nothing crashed, that a realized tensor computed before the walk still
 * holds its values (nothing already computed is lost), and that no tensor
 * bytes stayed behind (the sanitizer build checks every other allocation).
 *
 *   test_bad_inputs             walks the table
 *   test_bad_inputs --markdown  prints it (docs/RELIABILITY.md) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "runtime/runtime.h"
#include "scratch.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* ------------------------------------------------------------ fixtures */

static loom_tensor *f23, *f4, *i3, *b3, *a234, *labels4;
static loom_params *params;
static char dir[64];
static char self[4096];

static const char *path_in(const char *name) {
  static char buf[4][256];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static void write_file(const char *name, const void *data, size_t len) {
  FILE *f = fopen(path_in(name), "wb");
  if (f) fwrite(data, 1, len, f), fclose(f);
}

/* A safetensors file: 8-byte header size, header, data. */
static void write_st(const char *name, const char *json, const void *data, size_t len) {
  unsigned char buf[1024];
  size_t n = strlen(json);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, json, n);
  if (len) memcpy(buf + 8 + n, data, len);
  write_file(name, buf, 8 + n + len);
}

/* A header that only its size makes absurd: one shape of a million dims, or
 * 300,000 tensors (each "tN":{...}), as text built here. */
static void write_big_header(const char *name, bool many_entries) {
  size_t cap = 24u << 20, n = 0;
  char *json = malloc(cap);
  if (!json) return;
  if (many_entries) {
    n += (size_t)snprintf(json + n, cap - n, "{");
    for (int t = 0; t < 300000; t++)
      n += (size_t)snprintf(json + n, cap - n,
                            "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
                            t ? "," : "", t);
    n += (size_t)snprintf(json + n, cap - n, "}");
  } else {
    n += (size_t)snprintf(json + n, cap - n, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1");
    for (int d = 1; d < 1000000; d++) n += (size_t)snprintf(json + n, cap - n, ",1");
    n += (size_t)snprintf(json + n, cap - n, "],\"data_offsets\":[0,4]}}");
  }
  FILE *f = fopen(path_in(name), "wb");
  unsigned char size[8];
  for (int i = 0; i < 8; i++) size[i] = (unsigned char)((uint64_t)(n + 4) >> (8 * i));
  if (f) {
    fwrite(size, 1, 8, f), fwrite(json, 1, n, f), fwrite("    ", 1, 4, f),
        fwrite("\0\0\0\0", 1, 4, f);
    fclose(f);
  }
  free(json);
}

static void make_fixtures(void) {
  float v6[6] = {1, 2, 3, 4, 5, 6}, v4[4] = {1, 2, 3, 4};
  int64_t l4[4] = {0, 1, 2, 1};
  f23 = loom_from_data(v6, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
  f4 = loom_from_data(v4, LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
  i3 = loom_ones(LOOM_SHAPE(3), LOOM_I32, LOOM_CPU);
  b3 = loom_ones(LOOM_SHAPE(3), LOOM_BOOL, LOOM_CPU);
  a234 = loom_ones(LOOM_SHAPE(2, 3, 4), LOOM_F32, LOOM_CPU);
  labels4 = loom_from_data(l4, LOOM_SHAPE(4), LOOM_I64, LOOM_CPU);
  params = loom_params_new();
  loom_tensor *w = loom_from_data(v6, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
  loom_params_add(params, "w", w);
  loom_free(w);
  snprintf(dir, sizeof dir, "/tmp/loom-bad-inputs-XXXXXX");
  if (!mkdtemp(dir)) fprintf(stderr, "cannot make a scratch directory\n");
  const float w6[6] = {1, 2, 3, 4, 5, 6};
  write_st("good.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", w6,
           24);
  write_file("short.st", "\x10\0\0\0", 4);
  write_st("past_end.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", w6,
           12);
  write_st("not_json.st", "{\"w\": [1, 2", NULL, 0);
  const double d6[6] = {1, 2, 3, 4, 5, 6};
  write_st("f64.st", "{\"w\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,48]}}", d6, 48);
  write_st("wrong_shape.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}}",
           w6, 24);
  write_st("other_name.st", "{\"v\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
           w6, 24);
  write_st("huge_dim.st",
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,24]}}",
           w6, 24);
  write_file("plain_file", "x", 1);
  mkdir(path_in("a_dir.st"), 0700);
  mkfifo(path_in("fifo.st"), 0600);
  write_big_header("million_dims.st", false);
  write_big_header("many_tensors.st", true);
  mkfifo(path_in("fifo.loom"), 0600);
}

/* ------------------------------------------------------------ row helpers */

typedef loom_status (*row_fn)(char *msg, size_t len);

/* The status and message of a tensor a call returned. */
static loom_status from_tensor(const loom_tensor *t, char *msg, size_t len) {
  const char *m = loom_error_message(t);
  snprintf(msg, len, "%s", m ? m : "");
  return loom_status_of(t);
}

/* The status a call returned, and the message it recorded. */
static loom_status from_status(loom_status st, char *msg, size_t len) {
  const char *m = loom_last_error();
  snprintf(msg, len, "%s", st && m ? m : "");
  return st;
}

/* For calls returning a pointer that is NULL on failure. */
static loom_status from_pointer(const void *p, char *msg, size_t len) {
  return from_status(p ? LOOM_OK : loom_last_status(), msg, len);
}

/* A realized value: "value <v>", so the table can say nan or inf. */
static loom_status from_value(loom_tensor *t, char *msg, size_t len) {
  double v = loom_item(t);
  loom_status st = loom_last_status();
  if (st) return from_status(st, msg, len);
  snprintf(msg, len, "value %g", isnan(v) ? NAN : v); /* not "-nan" */
  return LOOM_OK;
}

/* An integer result, exactly. */
static loom_status from_int(loom_tensor *t, char *msg, size_t len) {
  int64_t v = 0;
  loom_status st = loom_item_i64(t, &v);
  if (st) return from_status(st, msg, len);
  snprintf(msg, len, "value %lld", (long long)v);
  return LOOM_OK;
}

#define ROW_I(fn, expr)                                                                            \
  static loom_status fn(char *msg, size_t len) { return from_int((expr), msg, len); }
#define ROW_T(fn, expr)                                                                            \
  static loom_status fn(char *msg, size_t len) { return from_tensor((expr), msg, len); }
#define ROW_S(fn, expr)                                                                            \
  static loom_status fn(char *msg, size_t len) { return from_status((expr), msg, len); }
#define ROW_P(fn, expr)                                                                            \
  static loom_status fn(char *msg, size_t len) { return from_pointer((expr), msg, len); }
#define ROW_V(fn, expr)                                                                            \
  static loom_status fn(char *msg, size_t len) { return from_value((expr), msg, len); }

static float buf6[6];
static const int ax3[] = {3}, axm4[] = {-4}, rep[] = {0, 0, 1};

/* ------------------------------------------------------------ NULL */
ROW_T(null_add, loom_add(NULL, f23))
ROW_T(null_matmul, loom_matmul(f23, NULL))
ROW_T(null_cat_list, loom_cat(NULL, 2, 0))
ROW_T(null_in_list, loom_cat((loom_tensor *[]){f23, NULL}, 2, 0))
ROW_T(null_data, loom_from_data(NULL, LOOM_SHAPE(2), LOOM_F32, LOOM_CPU))
ROW_T(null_axes, loom_sum(f23, NULL, 1, false))
ROW_T(null_perm, loom_permute(f23, NULL, 2))
ROW_S(null_realize, loom_realize(NULL))
ROW_S(null_dst, loom_copy_to_host(f23, NULL, sizeof buf6))
ROW_S(null_backward, loom_backward(NULL))
ROW_S(null_assign, loom_assign(f23, NULL))
ROW_S(null_params_add, loom_params_add(params, "x", NULL))
ROW_S(null_path, loom_params_load(params, NULL))
ROW_P(null_sgd, loom_sgd(NULL, (loom_sgd_opts){0}))
ROW_P(null_safetensors_read, loom_safetensors_read(NULL, LOOM_CPU))
ROW_P(null_npy_read, loom_npy_read(NULL, LOOM_CPU))
ROW_S(null_step, loom_optim_step(NULL))
ROW_P(null_dataset, loom_dataset_new(NULL, f4))
ROW_S(null_grad_of, loom_grad_of(NULL, 1, &f23, 1, &(loom_tensor *){NULL}))

/* ------------------------------------------------------------ shapes */
ROW_T(shape_broadcast, loom_add(f23, f4))
ROW_T(shape_matmul, loom_matmul(f23, f23))
ROW_T(shape_reshape, loom_reshape(f23, LOOM_SHAPE(4, 2)))
ROW_T(shape_expand, loom_expand(f23, LOOM_SHAPE(2, 4)))
ROW_T(shape_cat, loom_cat((loom_tensor *[]){f23, a234}, 2, 0))
ROW_T(shape_loss, loom_cross_entropy(f23, labels4))
ROW_T(shape_conv, loom_conv2d_f(a234, a234, NULL, (loom_conv2d_opts){.groups = 1}))
static loom_tensor *conv_x(void) { return loom_ones(LOOM_SHAPE(1, 2, 5, 5), LOOM_F32, LOOM_CPU); }
static loom_tensor *conv_w(void) { return loom_ones(LOOM_SHAPE(3, 2, 3, 3), LOOM_F32, LOOM_CPU); }
ROW_T(value_conv_stride,
      loom_conv2d_f(conv_x(), conv_w(), NULL, (loom_conv2d_opts){.stride = {1, -2}}))
ROW_T(value_conv_dilation,
      loom_conv2d_f(conv_x(), conv_w(), NULL, (loom_conv2d_opts){.dilation = {-1, 1}}))
ROW_T(value_conv_groups, loom_conv2d_f(conv_x(), conv_w(), NULL, (loom_conv2d_opts){.groups = -1}))
ROW_S(shape_copy, loom_copy_to_host(f23, buf6, 5 * sizeof(float)))
ROW_S(shape_assign, loom_assign(f23, f4))
ROW_S(shape_backward, loom_backward(f23))
static loom_status shape_item(char *msg, size_t len) {
  loom_item(f23);
  return from_status(loom_last_status(), msg, len);
}

/* ------------------------------------------------------------ dtypes */
ROW_T(dtype_neg_bool, loom_neg(b3))
ROW_T(dtype_matmul_mixed, loom_matmul(loom_cast(f23, LOOM_I32), f23))
ROW_T(dtype_where, loom_where(f4, f4, f4))
ROW_T(dtype_mean_int, loom_mean_all(i3))
ROW_T(dtype_cast_unknown, loom_cast(f23, (loom_dtype)99))
ROW_T(dtype_bitcast_size, loom_bitcast(f23, LOOM_I64))
ROW_T(dtype_zeros_unknown, loom_zeros(LOOM_SHAPE(2), (loom_dtype)-1, LOOM_CPU))
ROW_T(dtype_rand_int, loom_rand_key(loom_key_new(1), LOOM_SHAPE(2), LOOM_I32, LOOM_CPU))
ROW_T(dtype_float_labels, loom_cross_entropy(loom_reshape(f4, LOOM_SHAPE(2, 2)),
                                             loom_ones(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU)))
ROW_S(dtype_requires_grad,
      loom_set_requires_grad(loom_ones(LOOM_SHAPE(2), LOOM_I64, LOOM_CPU), true))

/* ------------------------------------------------------------ devices */
/* A second device: CUDA when this build has it; otherwise a tensor whose node
 * claims cuda:0, so the mixed-device checks still run (never realized). */
static loom_tensor *elsewhere_shaped(loom_shape shape) {
  if (loom_cuda_available()) return loom_ones(shape, LOOM_F32, LOOM_CUDA(0));
  loom_tensor *t = loom_ones(shape, LOOM_F32, LOOM_CPU);
  if (!loom_status_of(t)) t->node->device = LOOM_CUDA(0);
  return t;
}
static loom_tensor *elsewhere(void) { return elsewhere_shaped(LOOM_SHAPE(4)); }
ROW_T(device_mixed_add, loom_add(f4, elsewhere()))
ROW_T(device_mixed_matmul,
      loom_matmul(loom_reshape(f4, LOOM_SHAPE(2, 2)), loom_reshape(elsewhere(), LOOM_SHAPE(2, 2))))
ROW_T(device_mixed_where,
      loom_where(loom_ones(LOOM_SHAPE(4), LOOM_BOOL, LOOM_CPU), f4, elsewhere()))
ROW_T(device_missing, loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CUDA(7)))
ROW_T(device_to_missing, loom_to(f23, LOOM_CUDA(7)))
ROW_T(device_unknown, loom_ones(LOOM_SHAPE(2), LOOM_F32, ((loom_device){(loom_device_type)9, 0})))
ROW_S(device_default, loom_set_default_device(LOOM_CUDA(7)))

/* ------------------------------------------------------------ axes */
ROW_T(axis_sum, loom_sum(a234, ax3, 1, false))
ROW_T(axis_negative, loom_mean(a234, axm4, 1, true))
ROW_T(axis_repeated, loom_max(a234, (int[]){1, -2}, 2, false))
ROW_T(axis_permute, loom_permute(a234, rep, 3))
ROW_T(axis_transpose, loom_transpose(f23, 0, 2))
ROW_T(axis_softmax, loom_softmax(a234, -4))
ROW_T(axis_argmax, loom_argmax(a234, 3, false))
ROW_T(axis_cat, loom_cat((loom_tensor *[]){f23, f23}, 2, 2))
ROW_T(axis_unsqueeze, loom_unsqueeze(f23, 4))
ROW_T(axis_flatten, loom_flatten(a234, 2, 1))
ROW_T(axis_layer_norm, loom_layer_norm(f23, 3, NULL, NULL, 1e-5))
/* Composite ops: an error from an op they run inside names them first. */
static loom_tensor *label_seven(void) {
  int64_t l[2] = {0, 7};
  return loom_from_data(l, LOOM_SHAPE(2), LOOM_I64, LOOM_CPU);
}
ROW_T(named_ce_label, loom_cross_entropy(f23, label_seven()))
ROW_T(named_layer_norm_weight, loom_layer_norm(f23, 1, f4, NULL, 1e-5))
ROW_T(named_batch_norm_weight,
      loom_batch_norm(loom_ones(LOOM_SHAPE(2, 3, 2, 2), LOOM_F32, LOOM_CPU), NULL, NULL, f4, NULL,
                      true, 0.1, 1e-5))
ROW_T(named_linear_weight,
      loom_linear_f(f23, loom_ones(LOOM_SHAPE(4, 5), LOOM_F32, LOOM_CPU), NULL))
ROW_T(named_mse_shapes, loom_mse_loss(f23, f4))
ROW_T(named_stack_shapes, loom_stack((loom_tensor *[]){f23, f4}, 2, 0))

/* attention's pieces */
static loom_tensor *f254(void) { return loom_ones(LOOM_SHAPE(2, 5, 4), LOOM_F32, LOOM_CPU); }
static loom_tensor *i4(void) { return loom_ones(LOOM_SHAPE(4), LOOM_I32, LOOM_CPU); }
static loom_tensor *pieces[4];
ROW_T(shape_sdpa,
      loom_scaled_dot_product_attention(f254(), loom_ones(LOOM_SHAPE(2, 6, 3), LOOM_F32, LOOM_CPU),
                                        loom_ones(LOOM_SHAPE(2, 6, 3), LOOM_F32, LOOM_CPU), NULL,
                                        false, 0))
ROW_T(named_sdpa_mask,
      loom_scaled_dot_product_attention(f254(), f254(), f254(),
                                        loom_ones(LOOM_SHAPE(3, 5), LOOM_BOOL, LOOM_CPU), false, 0))
ROW_T(value_sdpa_mask_causal,
      loom_scaled_dot_product_attention(f254(), f254(), f254(),
                                        loom_ones(LOOM_SHAPE(5, 5), LOOM_BOOL, LOOM_CPU), true, 0))
ROW_T(value_sdpa_scale, loom_scaled_dot_product_attention(f254(), f254(), f254(), NULL, false, -1))
ROW_T(dtype_sdpa_mask_f64,
      loom_scaled_dot_product_attention(f254(), f254(), f254(),
                                        loom_zeros(LOOM_SHAPE(5, 5), LOOM_F64, LOOM_CPU), false, 0))
ROW_T(dtype_sdpa_mask_int,
      loom_scaled_dot_product_attention(f254(), f254(), f254(),
                                        loom_ones(LOOM_SHAPE(5, 5), LOOM_I32, LOOM_CPU), false, 0))
ROW_T(dtype_sdpa_kv, loom_scaled_dot_product_attention(f254(), loom_cast(f254(), LOOM_F64), f254(),
                                                       NULL, false, 0))
static loom_tensor *heads_of(int64_t h) {
  return loom_ones(LOOM_SHAPE(1, h, 4, 8), LOOM_F32, LOOM_CPU);
}
ROW_T(shape_sdpa_heads,
      loom_scaled_dot_product_attention(heads_of(6), heads_of(4), heads_of(4), NULL, false, 0))
ROW_T(shape_sdpa_kv_heads,
      loom_scaled_dot_product_attention(heads_of(4), heads_of(2), heads_of(4), NULL, false, 0))
ROW_T(device_sdpa,
      loom_scaled_dot_product_attention(f254(), f254(), elsewhere_shaped(LOOM_SHAPE(2, 5, 4)), NULL,
                                        false, 0))
ROW_T(value_masked_fill_int,
      loom_masked_fill(i4(), loom_ones(LOOM_SHAPE(4), LOOM_BOOL, LOOM_CPU), 0.5))
ROW_T(shape_masked_fill, loom_masked_fill(f4, loom_ones(LOOM_SHAPE(2, 4), LOOM_BOOL, LOOM_CPU), 0))
ROW_T(dtype_where_s, loom_where_s(f4, f4, 1))
ROW_T(shape_tril, loom_tril(f4, 0))
ROW_S(value_chunk, loom_chunk(f23, 0, 0, pieces, NULL))
ROW_S(value_split_room, loom_split(f23, 1, 1, pieces, 2, NULL))
ROW_S(axis_split, loom_split(f23, 1, 2, pieces, 4, NULL))

static loom_tensor *labels_2_9(void) {
  int64_t l[2] = {2, 9};
  return loom_from_data(l, LOOM_SHAPE(2), LOOM_I64, LOOM_CPU);
}
ROW_T(value_ce_label,
      loom_cross_entropy_ex(f23, labels_2_9(),
                            (loom_cross_entropy_opts){.ignore = true, .ignore_index = -1}))
ROW_T(value_ce_smoothing,
      loom_cross_entropy_ex(f23, label_seven(), (loom_cross_entropy_opts){.label_smoothing = 1.5}))
ROW_T(shape_ce_ex, loom_cross_entropy_ex(f23, i4(), (loom_cross_entropy_opts){0}))

ROW_T(value_repeat, loom_repeat(f23, (int64_t[]){2}, 1))
ROW_T(shape_gather, loom_gather(f23, 1, loom_ones(LOOM_SHAPE(3, 1), LOOM_I64, LOOM_CPU)))
/* data-dependent input (issue 41): refused at the call when its data is at
 * hand, by the run otherwise (the same message) */
static loom_tensor *i64_of(int64_t a, int64_t b, loom_shape s) {
  int64_t v[2] = {a, b};
  return loom_from_data(v, s, LOOM_I64, LOOM_CPU);
}
static loom_tensor *weights3(float middle) {
  float v[3] = {0.5f, middle, 0.6f};
  return loom_from_data(v, LOOM_SHAPE(3), LOOM_F32, LOOM_CPU);
}
static loom_tensor *i64_scalar(int64_t v) {
  return loom_from_data(&v, LOOM_SHAPE0, LOOM_I64, LOOM_CPU);
}
static loom_tensor *kv_cache(void) { return loom_zeros(LOOM_SHAPE(4, 2), LOOM_F32, LOOM_CPU); }
static loom_tensor *kv_row(void) { return loom_ones(LOOM_SHAPE(1, 2), LOOM_F32, LOOM_CPU); }
ROW_T(value_gather_past, loom_gather(f23, 1, i64_of(0, 3, LOOM_SHAPE(2, 1))))
ROW_T(value_gather_before, loom_gather(f23, 0, i64_of(-1, 0, LOOM_SHAPE(1, 2))))
ROW_T(value_index_select_past, loom_index_select(f23, 1, i64_of(2, 3, LOOM_SHAPE(2))))
ROW_T(value_index_select_before, loom_index_select(f23, 0, i64_of(-1, 0, LOOM_SHAPE(2))))
ROW_T(value_one_hot, loom_one_hot(i64_of(0, 3, LOOM_SHAPE(2)), 3))
ROW_T(value_nll_label, loom_nll_loss(f23, i64_of(0, -1, LOOM_SHAPE(2))))
ROW_T(value_multinomial_negative, loom_multinomial_key(loom_key_new(1), weights3(-0.1f), 1, true))
ROW_T(value_multinomial_nan, loom_multinomial_key(loom_key_new(1), weights3(NAN), 1, true))
static loom_tensor *zero_weights(void) {
  float v[6] = {0};
  return loom_from_data(v, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
}
ROW_T(value_multinomial_zero, loom_multinomial_key(loom_key_new(1), zero_weights(), 1, false))
ROW_T(value_slice_update_past, loom_slice_update(kv_cache(), 0, i64_scalar(4), kv_row()))
ROW_T(value_slice_update_before, loom_slice_update(kv_cache(), 0, i64_scalar(-1), kv_row()))
ROW_S(value_embedding_run,
      loom_realize(loom_embedding_f(loom_add_s(i64_of(1, 3, LOOM_SHAPE(2)), 0), f23)))
ROW_S(value_slice_update_run,
      loom_realize(loom_slice_update(kv_cache(), 0, loom_add_s(i64_scalar(1), 3), kv_row())))
ROW_T(shape_index_select,
      loom_index_select(f23, 0, loom_ones(LOOM_SHAPE(1, 1), LOOM_I64, LOOM_CPU)))
ROW_T(value_var, loom_var(f23, NULL, 0, -1, false))

/* ------------------------------------------------------------ sizes */
ROW_T(size_negative, loom_zeros(LOOM_SHAPE(-1, 2), LOOM_F32, LOOM_CPU))
ROW_T(size_expand_ndim, loom_expand(f23, ((loom_shape){9, {2, 3, 1, 1, 1, 1, 1, 1}})))
ROW_T(size_ndim, loom_zeros(((loom_shape){9, {1, 1, 1, 1, 1, 1, 1, 1}}), LOOM_F32, LOOM_CPU))
ROW_T(size_overflow, loom_zeros(LOOM_SHAPE(1LL << 40, 1LL << 40), LOOM_F32, LOOM_CPU))
ROW_T(size_expand_overflow,
      loom_expand(loom_reshape(f4, LOOM_SHAPE(4, 1, 1)), LOOM_SHAPE(4, 1LL << 40, 1LL << 40)))
ROW_T(size_reshape_overflow, loom_reshape(f23, LOOM_SHAPE(1LL << 62, 4)))
ROW_T(size_pad_max, loom_pad(f4, (int64_t[]){INT64_MAX, INT64_MAX}, 2, 0))
ROW_T(size_pad_2_62, loom_pad(f4, (int64_t[]){INT64_C(1) << 62, INT64_C(1) << 62}, 2, 0))
ROW_T(shape_pad_min, loom_pad(f4, (int64_t[]){INT64_MIN, 0}, 2, 0))
ROW_T(size_arange, loom_arange(0, 1e300, 1, LOOM_F32, LOOM_CPU))
ROW_T(size_arange_step, loom_arange(0, 5, 0, LOOM_F32, LOOM_CPU))
ROW_T(size_arange_nan, loom_arange(0, NAN, 1, LOOM_F32, LOOM_CPU))
ROW_T(size_slice_step, loom_slice(f23, 1, 0, 3, 0))
ROW_T(size_pad, loom_pad(f23, (int64_t[]){-2, -2}, 2, 0))
ROW_T(size_one_hot, loom_one_hot(labels4, 0))
ROW_T(size_index, loom_embedding_f(labels4, loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU)))
ROW_T(size_dropout, loom_dropout(f23, 1.5, loom_key_new(1), true))
ROW_T(size_bernoulli, loom_bernoulli_key(loom_key_new(1), -0.1, LOOM_SHAPE(2), LOOM_CPU))
ROW_T(size_pool, loom_max_pool2d(loom_reshape(a234, LOOM_SHAPE(1, 2, 3, 4)), 0, 1, 0))
ROW_S(size_eval, loom_eval(&f23, -1))
ROW_S(size_threads, loom_set_num_threads(0))
ROW_S(value_dynamic, loom_set_dynamic((loom_dynamic)9))
ROW_P(size_lr, loom_adam(params, (loom_adam_opts){.lr = -1}))
ROW_P(size_beta, loom_adam(params, (loom_adam_opts){.beta1 = 1.5}))
ROW_P(value_eps_nan, loom_adamw(params, (loom_adam_opts){.eps = NAN}))
ROW_P(value_dampening_nan, loom_sgd(params, (loom_sgd_opts){.dampening = NAN}))
ROW_S(value_ddp_bucket, loom_ddp(params, (loom_ddp_opts){.bucket_bytes = -1}))
ROW_T(value_layer_norm_eps, loom_layer_norm(f23, 1, NULL, NULL, NAN))
ROW_T(value_batch_norm_eps, loom_batch_norm(loom_ones(LOOM_SHAPE(2, 3, 2, 2), LOOM_F32, LOOM_CPU),
                                            NULL, NULL, NULL, NULL, true, 0.1, -1))
static loom_status size_layer(char *msg, size_t len) {
  loom_linear l = loom_linear_new(params, "bad", -3, 4, loom_key_new(1));
  return from_pointer(l.weight, msg, len);
}
static loom_status size_loader(char *msg, size_t len) {
  loom_dataset *d = loom_dataset_new(f23, loom_ones(LOOM_SHAPE(2), LOOM_I64, LOOM_CPU));
  loom_loader *l = loom_loader_new(d, 0, false, false, loom_key_new(1));
  loom_status st = from_pointer(l, msg, len);
  loom_loader_free(l);
  loom_dataset_free(d);
  return st;
}

/* ------------------------------------------------------------ freed handles */
/* A handle of this scope's, freed: its memory is not handed out again before
 * the call (nothing allocates in between). */
static loom_tensor *freed(void) {
  loom_tensor *t = loom_ones(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  loom_free(t);
  return t;
}
ROW_T(freed_op, loom_neg(freed()))
ROW_S(freed_realize, loom_realize(freed()))
static loom_status freed_twice(char *msg, size_t len) {
  loom_free(freed());
  return from_status(loom_last_status(), msg, len);
}
ROW_S(scope_end_unopened, loom_scope_end())
static loom_status scope_keep_foreign(char *msg, size_t len) {
  loom_keep(f23); /* the collection's tensor: no reference in this scope */
  return from_status(loom_last_status(), msg, len);
}

/* ------------------------------------------------------------ non-finite values */
/* They are values, not errors: the status is LOOM_OK and the value says what
 * IEEE arithmetic makes of them, as in PyTorch. */
static loom_tensor *with_value(double v) {
  return loom_add(f4, loom_full(LOOM_SHAPE(4), v, LOOM_F32, LOOM_CPU));
}
static loom_tensor *logits_with(double v) {
  return loom_reshape(loom_where(loom_eq_s(loom_arange(0, 4, 1, LOOM_F32, LOOM_CPU), 2),
                                 loom_full(LOOM_SHAPE(4), v, LOOM_F32, LOOM_CPU), f4),
                      LOOM_SHAPE(2, 2));
}
static loom_tensor *two_labels(void) { return loom_slice(labels4, 0, 0, 2, 1); }
ROW_V(nonfinite_mse_nan, loom_mse_loss(with_value(NAN), f4))
ROW_V(nonfinite_mse_inf, loom_mse_loss(with_value(INFINITY), f4))
ROW_V(nonfinite_ce_inf, loom_cross_entropy(logits_with(INFINITY), two_labels()))
ROW_V(nonfinite_ce_minus_inf, loom_cross_entropy(logits_with(-INFINITY), two_labels()))
ROW_V(nonfinite_bce_huge, loom_bce_with_logits(with_value(1e30), loom_ones_like(f4)))
ROW_V(nonfinite_log_zero, loom_sum_all(loom_log(loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU))))
ROW_V(nonfinite_int_nan, loom_full(LOOM_SHAPE0, NAN, LOOM_I32, LOOM_CPU))
ROW_V(nonfinite_int_huge, loom_full(LOOM_SHAPE(1), 1e30, LOOM_I64, LOOM_CPU))
ROW_I(nonfinite_int_pad, loom_sum_all(loom_pad(i3, (int64_t[]){1, 0}, 2, -INFINITY)))
/* Casts computed by a kernel (a realized input: nothing is folded). */
static loom_tensor *cast_of(double v, loom_dtype to) {
  loom_tensor *x = loom_full(LOOM_SHAPE(1), v, LOOM_F32, LOOM_CPU);
  loom_realize(x);
  return loom_sum_all(loom_cast(x, to));
}
ROW_V(nonfinite_cast_huge, cast_of(-1e30, LOOM_I64))
ROW_V(nonfinite_cast_nan, cast_of(NAN, LOOM_I32))
ROW_V(nonfinite_cast_u8, cast_of(-1, LOOM_U8))
ROW_I(nonfinite_cast_inf_i32, cast_of(INFINITY, LOOM_I32))
ROW_I(nonfinite_cast_big_i32, cast_of(3e9, LOOM_I32))
ROW_I(nonfinite_cast_big_u8, cast_of(300, LOOM_U8))
static loom_status nonfinite_backward(char *msg, size_t len) {
  loom_tensor *w = loom_ones(LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
  loom_set_requires_grad(w, true);
  loom_tensor *loss = loom_mse_loss(loom_mul(w, with_value(NAN)), f4);
  loom_status st = loom_backward(loss);
  if (st) return from_status(st, msg, len);
  return from_value(loom_sum_all(loom_grad(w)), msg, len);
}

/* ------------------------------------------------------------ files */
#define LOAD(fn, file) ROW_S(fn, loom_params_load(params, path_in(file)))
LOAD(file_missing, "missing.st")
LOAD(file_directory, "a_dir.st")
LOAD(file_short, "short.st")
LOAD(file_past_end, "past_end.st")
LOAD(file_not_json, "not_json.st")
LOAD(file_dtype, "f64.st")
LOAD(file_shape, "wrong_shape.st")
LOAD(file_name, "other_name.st")
LOAD(file_huge, "huge_dim.st")
LOAD(file_fifo, "fifo.st")
LOAD(file_million_dims, "million_dims.st")
LOAD(file_many_tensors, "many_tensors.st")
ROW_P(file_fifo_program, loom_program_load(path_in("fifo.loom")))
ROW_P(file_npy_not_npy, loom_npy_read(path_in("good.st"), LOOM_CPU))
ROW_P(file_npy_fifo, loom_npy_read(path_in("fifo.st"), LOOM_CPU))
ROW_S(file_save_under_file, loom_params_save(params, path_in("plain_file/w.st")))
/* Past the process's file size limit (ulimit -f): refused, where the write
 * would have ended the process with SIGXFSZ. */
static loom_status file_size_limit(char *msg, size_t len) {
  loom_params *big = loom_params_new();
  loom_params_add(big, "w", loom_zeros(LOOM_SHAPE(4096), LOOM_F32, LOOM_CPU));
  struct rlimit old, cap;
  getrlimit(RLIMIT_FSIZE, &old);
  cap = (struct rlimit){4096, old.rlim_max};
  setrlimit(RLIMIT_FSIZE, &cap);
  loom_status st = loom_params_save(big, path_in("big.st"));
  setrlimit(RLIMIT_FSIZE, &old);
  loom_params_free(big);
  return from_status(st, msg, len);
}
/* Every truncation of a good file: each refused as corrupt. */
static loom_status file_truncated(char *msg, size_t len) {
  FILE *f = fopen(path_in("good.st"), "rb");
  unsigned char data[512];
  size_t n = f ? fread(data, 1, sizeof data, f) : 0;
  if (f) fclose(f);
  loom_status worst = LOOM_ERR_CORRUPT;
  for (size_t cut = 0; cut < n; cut++) {
    write_file("cut.st", data, cut);
    loom_status st = loom_params_load(params, path_in("cut.st"));
    if (st != LOOM_ERR_CORRUPT) worst = st;
  }
  return from_status(worst, msg, len);
}

/* ------------------------------------------------------------ the kernel cache */
/* The cache directory is read once per process: each case runs a child. */
static int cache_child(void) {
  double v = 0;
  LOOM_SCOPE {
    v = loom_item(loom_sum_all(loom_mul_s(loom_arange(0, 64, 1, LOOM_F32, LOOM_CPU), 3)));
  }
  printf("value %g\n", v);
  return v == 3 * 63 * 64 / 2 ? 0 : 1;
}

/* Runs a child with LOOM_CACHE_DIR=dir: LOOM_OK when it computed the right
 * value anyway; the message is what it printed (its warning). */
static loom_status cache_case(const char *cache_dir, char *msg, size_t len) {
  char cmd[8600];
  snprintf(cmd, sizeof cmd, "LOOM_CACHE_DIR='%s' '%s' --cache-child 2>&1", cache_dir, self);
  FILE *p = popen(cmd, "r");
  size_t used = 0;
  msg[0] = 0;
  char line[512];
  while (p && fgets(line, sizeof line, p)) {
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "value ", 6) != 0 && used < len)
      used += (size_t)snprintf(msg + used, len - used, "%s", line);
  }
  int rc = p ? pclose(p) : -1;
  return rc == 0 ? LOOM_OK : LOOM_ERR_INTERNAL;
}
static loom_status cache_is_file(char *msg, size_t len) {
  return cache_case(path_in("plain_file"), msg, len);
}
static loom_status cache_under_file(char *msg, size_t len) {
  return cache_case(path_in("plain_file/cache"), msg, len);
}
static loom_status cache_shared(char *msg, size_t len) {
  mkdir(path_in("shared"), 0700);
  chmod(path_in("shared"), 0777); /* others could plant code in it */
  return cache_case(path_in("shared"), msg, len);
}

/* ------------------------------------------------------------ the table */

typedef struct row {
  const char *kind; /* what is wrong */
  const char *call; /* the call, as written in the table */
  row_fn run;
  loom_status want;
  const char *says; /* a part of the message */
  int flags;        /* READS_FREED, OUTSIDE */
} row;

/* READS_FREED: touches freed memory on purpose (skipped under ASan, which
 * reports it itself); OUTSIDE: runs outside the walk's scope. */
enum { READS_FREED = 1, OUTSIDE = 2 };
#define ROW(kind, call, fn, want, says)                                                            \
  { kind, call, fn, want, says, 0 }

#define NUL LOOM_ERR_NULL
static const row table[] = {
    ROW("NULL handle", "loom_add(NULL, x)", null_add, NUL, "loom_add: tensor argument is NULL"),
    ROW("NULL handle", "loom_matmul(x, NULL)", null_matmul, NUL,
        "loom_matmul: tensor argument is NULL"),
    ROW("NULL handle", "loom_cat(NULL, 2, 0)", null_cat_list, NUL, "loom_cat: tensor list is NULL"),
    ROW("NULL handle", "loom_cat({x, NULL}, 2, 0)", null_in_list, NUL,
        "loom_cat: tensor argument is NULL"),
    ROW("NULL handle", "loom_from_data(NULL, [2], f32)", null_data, NUL,
        "loom_from_data: data is NULL"),
    ROW("NULL handle", "loom_sum(x, NULL, 1, false)", null_axes, NUL,
        "loom_sum: 1 axes but the axis list is NULL"),
    ROW("NULL handle", "loom_permute(x, NULL, 2)", null_perm, NUL, "loom_permute: perm is NULL"),
    ROW("NULL handle", "loom_realize(NULL)", null_realize, NUL, "loom_realize: tensor is NULL"),
    ROW("NULL handle", "loom_copy_to_host(x, NULL, 24)", null_dst, NUL,
        "loom_copy_to_host: dst is NULL"),
    ROW("NULL handle", "loom_backward(NULL)", null_backward, NUL, "loom_backward: tensor is NULL"),
    ROW("NULL handle", "loom_assign(x, NULL)", null_assign, NUL, "loom_assign: tensor is NULL"),
    ROW("NULL handle", "loom_params_add(ps, \"x\", NULL)", null_params_add, NUL,
        "loom_params_add: NULL argument"),
    ROW("NULL handle", "loom_params_load(ps, NULL)", null_path, NUL,
        "loom_params_load: NULL argument"),
    ROW("NULL handle", "loom_safetensors_read(NULL, cpu)", null_safetensors_read, NUL,
        "loom_safetensors_read: path is NULL"),
    ROW("NULL handle", "loom_npy_read(NULL, cpu)", null_npy_read, NUL,
        "loom_npy_read: path is NULL"),
    ROW("NULL handle", "loom_sgd(NULL, opts)", null_sgd, NUL,
        "loom_sgd: the parameter collection is NULL"),
    ROW("NULL handle", "loom_optim_step(NULL)", null_step, NUL,
        "loom_optim_step: optimizer is NULL"),
    ROW("NULL handle", "loom_dataset_new(NULL, y)", null_dataset, NUL,
        "loom_dataset_new: tensor is NULL"),
    ROW("NULL handle", "loom_grad_of(NULL, 1, ins, 1, out)", null_grad_of, NUL,
        "loom_grad_of: needs outputs"),

    ROW("wrong shape", "loom_add([2,3], [4])", shape_broadcast, LOOM_ERR_SHAPE,
        "loom_add: shapes [2,3] and [4] cannot be broadcast"),
    ROW("wrong shape", "loom_matmul([2,3], [2,3])", shape_matmul, LOOM_ERR_SHAPE,
        "inner dimensions 3 and 2 differ"),
    ROW("wrong shape", "loom_reshape([2,3], [4,2])", shape_reshape, LOOM_ERR_SHAPE,
        "cannot reshape [2,3] (6 elements) to [4,2]"),
    ROW("wrong shape", "loom_expand([2,3], [2,4])", shape_expand, LOOM_ERR_SHAPE,
        "cannot expand [2,3] to [2,4]"),
    ROW("wrong shape", "loom_cat({[2,3], [2,3,4]}, 2, 0)", shape_cat, LOOM_ERR_SHAPE,
        "tensor 1 has shape [2,3,4]"),
    ROW("named", "loom_cross_entropy([2,3], label 7 of 3 classes)", named_ce_label, LOOM_ERR_VALUE,
        "loom_cross_entropy: "),
    ROW("named", "loom_layer_norm([2,3], 1 dim, weight [4])", named_layer_norm_weight,
        LOOM_ERR_SHAPE, "loom_layer_norm: "),
    ROW("named", "loom_batch_norm([2,3,2,2], weight [4])", named_batch_norm_weight, LOOM_ERR_SHAPE,
        "loom_batch_norm: "),
    ROW("named", "loom_linear_f([2,3], weight [4,5])", named_linear_weight, LOOM_ERR_SHAPE,
        "loom_linear_f: "),
    ROW("named", "loom_mse_loss([2,3], [4])", named_mse_shapes, LOOM_ERR_SHAPE, "loom_mse_loss: "),
    ROW("named", "loom_stack([2,3], [4])", named_stack_shapes, LOOM_ERR_SHAPE, "loom_stack: "),
    ROW("wrong shape", "loom_cross_entropy([2,3], labels [4])", shape_loss, LOOM_ERR_SHAPE,
        "loom_cross_entropy: needs [N, C] scores and [N] labels, got [2,3] and [4]"),
    ROW("wrong shape", "loom_conv2d_f(x [2,3,4], w [2,3,4])", shape_conv, LOOM_ERR_SHAPE,
        "input must be [N, C, H, W], got [2,3,4]"),
    ROW("bad value", "loom_conv2d_f(x, w, stride {1, -2})", value_conv_stride, LOOM_ERR_VALUE,
        "loom_conv2d_f: stride -2 and dilation 0 (dim 1): each must be at least 1"),
    ROW("bad value", "loom_conv2d_f(x, w, dilation {-1, 1})", value_conv_dilation, LOOM_ERR_VALUE,
        "loom_conv2d_f: stride 0 and dilation -1 (dim 0): each must be at least 1"),
    ROW("bad value", "loom_conv2d_f(x, w, groups -1)", value_conv_groups, LOOM_ERR_VALUE,
        "loom_conv2d_f: groups -1 must be at least 1"),
    ROW("wrong shape", "loom_scaled_dot_product_attention(q [2,5,4], k [2,6,3], v [2,6,3])",
        shape_sdpa, LOOM_ERR_SHAPE,
        "loom_scaled_dot_product_attention: q [2,5,4], k [2,6,3], v [2,6,3]: q and k need the "
        "same last dim"),
    ROW("wrong shape", "loom_scaled_dot_product_attention(q k v [2,5,4], mask [3,5])",
        named_sdpa_mask, LOOM_ERR_SHAPE,
        "loom_scaled_dot_product_attention: the mask [3,5] does not broadcast to the scores' "
        "shape [2,5,5]"),
    ROW("wrong dtype", "loom_scaled_dot_product_attention(f32 q k v, f64 mask)",
        dtype_sdpa_mask_f64, LOOM_ERR_DTYPE,
        "loom_scaled_dot_product_attention: the mask is f64 and q f32: a mask is bool"),
    ROW("wrong dtype", "loom_scaled_dot_product_attention(f32 q k v, i32 mask)",
        dtype_sdpa_mask_int, LOOM_ERR_DTYPE,
        "loom_scaled_dot_product_attention: the mask is i32 and q f32"),
    ROW("wrong dtype", "loom_scaled_dot_product_attention(f32 q, f64 k, f32 v)", dtype_sdpa_kv,
        LOOM_ERR_DTYPE,
        "loom_scaled_dot_product_attention: q is f32, k f64, v f32: q, k and v need one dtype"),
    ROW("wrong shape", "loom_scaled_dot_product_attention(6 query heads, 4 key/value heads)",
        shape_sdpa_heads, LOOM_ERR_SHAPE,
        "loom_scaled_dot_product_attention: query heads (6) must be a multiple of key/value "
        "heads (4)"),
    ROW("wrong shape", "loom_scaled_dot_product_attention(4 query heads, 2 key, 4 value heads)",
        shape_sdpa_kv_heads, LOOM_ERR_SHAPE,
        "loom_scaled_dot_product_attention: key heads (2) and value heads (4) differ"),
    ROW("mixed devices", "loom_scaled_dot_product_attention(cpu q k, cuda:0 v)", device_sdpa,
        LOOM_ERR_DEVICE, "loom_scaled_dot_product_attention: q is on cpu, v on cuda:0"),
    ROW("bad value", "loom_scaled_dot_product_attention(.., mask, causal)", value_sdpa_mask_causal,
        LOOM_ERR_VALUE, "loom_scaled_dot_product_attention: a mask and causal together"),
    ROW("bad value", "loom_scaled_dot_product_attention(.., scale -1)", value_sdpa_scale,
        LOOM_ERR_VALUE, "loom_scaled_dot_product_attention: scale -1 is not a finite value >= 0"),
    ROW("bad value", "loom_masked_fill(i32 [4], mask, 0.5)", value_masked_fill_int, LOOM_ERR_VALUE,
        "loom_masked_fill: the value 0.5 does not fit i32"),
    ROW("wrong shape", "loom_masked_fill([4], mask [2,4], 0)", shape_masked_fill, LOOM_ERR_SHAPE,
        "loom_masked_fill: the mask [2,4] does not broadcast to [4]"),
    ROW("wrong dtype", "loom_where_s(f32 condition, [4], 1)", dtype_where_s, LOOM_ERR_DTYPE,
        "loom_where_s: loom_where: condition must be bool, got f32"),
    ROW("wrong shape", "loom_tril([4], 0)", shape_tril, LOOM_ERR_SHAPE,
        "loom_tril: needs at least 2 dims, got [4]"),
    ROW("bad value", "loom_chunk([2,3], 0 chunks)", value_chunk, LOOM_ERR_VALUE,
        "loom_chunk: 0 chunks is not positive"),
    ROW("bad value", "loom_split([2,3], 1, axis 1, room for 2)", value_split_room, LOOM_ERR_VALUE,
        "loom_split: 3 pieces of 1 along axis 1 (length 3), room for 2"),
    ROW("bad axis", "loom_split([2,3], 1, axis 2)", axis_split, LOOM_ERR_AXIS,
        "loom_split: axis 2 out of range for 2 dims"),
    ROW("bad value", "loom_cross_entropy_ex([2,3], labels {2, 9}, ignore -1)", value_ce_label,
        LOOM_ERR_VALUE,
        "loom_cross_entropy_ex: index 9 at position 1 is outside [0, 3) and not the ignored "
        "index"),
    ROW("bad value", "loom_cross_entropy_ex(.., label_smoothing 1.5)", value_ce_smoothing,
        LOOM_ERR_VALUE, "loom_cross_entropy_ex: label_smoothing 1.5 is outside [0, 1]"),
    ROW("wrong shape", "loom_cross_entropy_ex([2,3], labels [4])", shape_ce_ex, LOOM_ERR_SHAPE,
        "loom_cross_entropy_ex: needs [N, C, d...] scores and [N, d...] labels (or [C] and one "
        "label), got [2,3] and [4]"),
    ROW("bad value", "loom_repeat([2,3], {2})", value_repeat, LOOM_ERR_VALUE,
        "loom_repeat: 1 repeats for 2 dims"),
    ROW("wrong shape", "loom_gather([2,3], 1, index [3,1])", shape_gather, LOOM_ERR_SHAPE,
        "loom_gather: the index [3,1] needs the rank of [2,3] and no dim larger except along axis "
        "1"),
    ROW("wrong shape", "loom_index_select([2,3], 0, index [1,1])", shape_index_select,
        LOOM_ERR_SHAPE, "loom_index_select: the index must be 1-D, got [1,1]"),
    ROW("bad data", "loom_gather([2,3], 1, index {0, 3})", value_gather_past, LOOM_ERR_VALUE,
        "loom_gather: index 3 at position 1 is outside [0, 3)"),
    ROW("bad data", "loom_gather([2,3], 0, index {-1, 0})", value_gather_before, LOOM_ERR_VALUE,
        "loom_gather: index -1 at position 0 is outside [0, 2)"),
    ROW("bad data", "loom_index_select([2,3], 1, index {2, 3})", value_index_select_past,
        LOOM_ERR_VALUE, "loom_index_select: index 3 at position 1 is outside [0, 3)"),
    ROW("bad data", "loom_index_select([2,3], 0, index {-1, 0})", value_index_select_before,
        LOOM_ERR_VALUE, "loom_index_select: index -1 at position 0 is outside [0, 2)"),
    ROW("bad data", "loom_one_hot(labels {0, 3}, 3)", value_one_hot, LOOM_ERR_VALUE,
        "loom_one_hot: index 3 at position 1 is outside [0, 3)"),
    ROW("bad data", "loom_nll_loss([2,3], labels {0, -1})", value_nll_label, LOOM_ERR_VALUE,
        "loom_nll_loss: index -1 at position 1 is outside [0, 3)"),
    ROW("bad data", "loom_multinomial_key(k, {0.5, -0.1, 0.6}, 1)", value_multinomial_negative,
        LOOM_ERR_VALUE,
        "loom_multinomial_key: weight -0.1 at position 1 of row 0 is not a finite value >= 0 (an "
        "invalid multinomial distribution)"),
    ROW("bad data", "loom_multinomial_key(k, {0.5, NaN, 0.6}, 1)", value_multinomial_nan,
        LOOM_ERR_VALUE, "loom_multinomial_key: weight nan at position 1 of row 0"),
    ROW("bad data", "loom_multinomial_key(k, zeros [2,3], 1)", value_multinomial_zero,
        LOOM_ERR_VALUE,
        "loom_multinomial_key: row 0's 3 weights sum to 0 (an invalid multinomial distribution)"),
    ROW("bad data", "loom_slice_update([4,2], 0, start 4, [1,2])", value_slice_update_past,
        LOOM_ERR_VALUE, "loom_slice_update: start 4 is outside [0, 3]"),
    ROW("bad data", "loom_slice_update([4,2], 0, start -1, [1,2])", value_slice_update_before,
        LOOM_ERR_VALUE, "loom_slice_update: start -1 is outside [0, 3]"),
    ROW("bad data", "loom_embedding_f(index {1, 3} computed by the run, [2,3]), realized",
        value_embedding_run, LOOM_ERR_VALUE,
        "loom_embedding_f: index 3 at position 1 is outside [0, 2)"),
    ROW("bad data", "loom_slice_update([4,2], 0, start 1 + 3 computed by the run, [1,2]), realized",
        value_slice_update_run, LOOM_ERR_VALUE, "loom_slice_update: start 4 is outside [0, 3]"),
    ROW("bad value", "loom_var([2,3], correction -1)", value_var, LOOM_ERR_VALUE,
        "loom_var: correction -1 is not a finite value >= 0"),
    ROW("wrong shape", "loom_copy_to_host([2,3], buf, 20)", shape_copy, LOOM_ERR_BUFFER,
        "20 bytes given, f32 [2,3] needs 24"),
    ROW("wrong shape", "loom_assign([2,3], [4])", shape_assign, LOOM_ERR_SHAPE,
        "f32 [2,3] cannot take a f32 [4] value"),
    ROW("wrong shape", "loom_backward(loss [2,3])", shape_backward, LOOM_ERR_SHAPE,
        "the loss must have one element, shape [2,3] has 6"),
    ROW("wrong shape", "loom_item([2,3])", shape_item, LOOM_ERR_SHAPE,
        "loom_item: needs exactly one element, shape [2,3] has 6"),

    ROW("wrong dtype", "loom_neg(bool)", dtype_neg_bool, LOOM_ERR_DTYPE,
        "loom_neg: not supported for bool tensors"),
    ROW("wrong dtype", "loom_matmul(i32, f32)", dtype_matmul_mixed, LOOM_ERR_DTYPE,
        "dtypes i32 and f32 differ"),
    ROW("wrong dtype", "loom_where(f32 cond, a, b)", dtype_where, LOOM_ERR_DTYPE,
        "loom_where: condition must be bool, got f32"),
    ROW("wrong dtype", "loom_mean_all(i32)", dtype_mean_int, LOOM_ERR_DTYPE,
        "loom_mean: needs a float tensor, got i32"),
    ROW("wrong dtype", "loom_cast(x, 99)", dtype_cast_unknown, LOOM_ERR_DTYPE,
        "loom_cast: unknown dtype 99"),
    ROW("wrong dtype", "loom_bitcast(f32, i64)", dtype_bitcast_size, LOOM_ERR_DTYPE,
        "loom_bitcast: f32 has 4-byte elements and i64 8-byte ones"),
    ROW("wrong dtype", "loom_zeros([2], -1)", dtype_zeros_unknown, LOOM_ERR_DTYPE,
        "loom_zeros: unknown dtype -1"),
    ROW("wrong dtype", "loom_rand_key(k, [2], i32)", dtype_rand_int, LOOM_ERR_DTYPE,
        "loom_rand_key: needs a float dtype (f32, f64, bf16, f16), got i32"),
    ROW("wrong dtype", "loom_cross_entropy(logits, f32 labels)", dtype_float_labels, LOOM_ERR_DTYPE,
        "loom_cross_entropy: indices must be integers, got f32"),
    ROW("wrong dtype", "loom_set_requires_grad(i64, true)", dtype_requires_grad, LOOM_ERR_DTYPE,
        "only float tensors have gradients, got i64"),

    ROW("mixed devices", "loom_add(cpu, cuda:0)", device_mixed_add, LOOM_ERR_DEVICE,
        "loom_add: tensors on different devices (cpu and cuda:0)"),
    ROW("mixed devices", "loom_matmul(cpu, cuda:0)", device_mixed_matmul, LOOM_ERR_DEVICE,
        "loom_matmul: tensors on different devices (cpu and cuda:0)"),
    ROW("mixed devices", "loom_where(cpu, cpu, cuda:0)", device_mixed_where, LOOM_ERR_DEVICE,
        "loom_where: tensors on different devices"),
    ROW("mixed devices", "loom_zeros([2], f32, cuda:7)", device_missing, LOOM_ERR_DEVICE, "cuda:7"),
    ROW("mixed devices", "loom_to(x, cuda:7)", device_to_missing, LOOM_ERR_DEVICE,
        "loom_to: cuda:7"),
    ROW("mixed devices", "loom_ones([2], f32, device type 9)", device_unknown, LOOM_ERR_DEVICE,
        "unknown device type 9"),
    ROW("mixed devices", "loom_set_default_device(cuda:7)", device_default, LOOM_ERR_DEVICE,
        "loom_set_default_device: cuda:7"),

    ROW("bad axis", "loom_sum([2,3,4], {3})", axis_sum, LOOM_ERR_AXIS,
        "loom_sum: axis 3 is out of range for shape [2,3,4]"),
    ROW("bad axis", "loom_mean([2,3,4], {-4})", axis_negative, LOOM_ERR_AXIS,
        "loom_mean: axis -4 is out of range"),
    ROW("bad axis", "loom_max([2,3,4], {1, -2})", axis_repeated, LOOM_ERR_AXIS,
        "loom_max: axis -2 appears twice"),
    ROW("bad axis", "loom_permute([2,3,4], {0, 0, 1})", axis_permute, LOOM_ERR_AXIS,
        "loom_permute: axis 0 is out of range or repeated"),
    ROW("bad axis", "loom_transpose([2,3], 0, 2)", axis_transpose, LOOM_ERR_AXIS,
        "loom_transpose: axes (0, 2) out of range for 2 dims"),
    ROW("bad axis", "loom_softmax([2,3,4], -4)", axis_softmax, LOOM_ERR_AXIS,
        "loom_softmax: axis -4 is out of range"),
    ROW("bad axis", "loom_argmax([2,3,4], 3)", axis_argmax, LOOM_ERR_AXIS,
        "loom_argmax: axis 3 is out of range"),
    ROW("bad axis", "loom_cat({[2,3], [2,3]}, 2, 2)", axis_cat, LOOM_ERR_AXIS,
        "loom_cat: axis 2 out of range for 2 dims"),
    ROW("bad axis", "loom_unsqueeze([2,3], 4)", axis_unsqueeze, LOOM_ERR_AXIS,
        "loom_unsqueeze: axis 4 out of range for 2 dims"),
    ROW("bad axis", "loom_flatten([2,3,4], 2, 1)", axis_flatten, LOOM_ERR_AXIS,
        "loom_flatten: axes (2, 1) invalid for 3 dims"),
    ROW("bad axis", "loom_layer_norm([2,3], 3 dims)", axis_layer_norm, LOOM_ERR_AXIS,
        "cannot normalize 3 of 2 dims"),

    ROW("bad size", "loom_zeros([-1, 2])", size_negative, LOOM_ERR_SHAPE,
        "shape [-1,2] has a negative dim"),
    ROW("bad size", "loom_expand([2,3], 9 dims)", size_expand_ndim, LOOM_ERR_SHAPE,
        "loom_expand: cannot expand [2,3] to (9 dims)"),
    ROW("bad size", "loom_zeros(9 dims)", size_ndim, LOOM_ERR_SHAPE,
        "9 dims (loom supports 0 to 8)"),
    ROW("bad size", "loom_zeros([2^40, 2^40])", size_overflow, LOOM_ERR_SIZE,
        "shape [1099511627776,1099511627776] is too large"),
    ROW("bad size", "loom_expand([4,1,1], [4, 2^40, 2^40])", size_expand_overflow, LOOM_ERR_SIZE,
        "is too large"),
    ROW("bad size", "loom_pad([4], {INT64_MAX, INT64_MAX})", size_pad_max, LOOM_ERR_SIZE,
        "loom_pad: pads (9223372036854775807, 9223372036854775807) make dim 0 too large"),
    ROW("bad size", "loom_pad([4], {2^62, 2^62})", size_pad_2_62, LOOM_ERR_SIZE,
        "loom_pad: pads (4611686018427387904, 4611686018427387904) make dim 0 too large"),
    ROW("bad size", "loom_pad([4], {INT64_MIN, 0})", shape_pad_min, LOOM_ERR_SHAPE,
        "loom_pad: pads (-9223372036854775808, 0) leave a negative size on dim 0"),
    ROW("bad size", "loom_reshape([2,3], [2^62, 4])", size_reshape_overflow, LOOM_ERR_SIZE,
        "loom_reshape: target shape [4611686018427387904,4] is too large"),
    ROW("bad size", "loom_arange(0, 1e300, 1)", size_arange, LOOM_ERR_SIZE,
        "loom_arange: 1e+300 elements is too many"),
    ROW("bad size", "loom_arange(0, 5, 0)", size_arange_step, LOOM_ERR_VALUE,
        "loom_arange: step must not be zero"),
    ROW("bad size", "loom_arange(0, NaN, 1)", size_arange_nan, LOOM_ERR_VALUE, "must be finite"),
    ROW("bad size", "loom_slice(x, 1, 0, 3, 0)", size_slice_step, LOOM_ERR_VALUE,
        "loom_slice: step must be positive, got 0"),
    ROW("bad size", "loom_pad([2,3], {-2, -2})", size_pad, LOOM_ERR_SHAPE,
        "pads (-2, -2) leave a negative size on dim 1"),
    ROW("bad size", "loom_one_hot(labels, 0)", size_one_hot, LOOM_ERR_VALUE,
        "num_classes must be positive, got 0"),
    ROW("bad size", "loom_embedding_f(index 2 of 2 rows)", size_index, LOOM_ERR_VALUE,
        "index 2 at position 2 is outside [0, 2)"),
    ROW("bad size", "loom_dropout(x, p 1.5)", size_dropout, LOOM_ERR_VALUE,
        "loom_dropout: p 1.5 is outside [0, 1]"),
    ROW("bad size", "loom_bernoulli_key(k, p -0.1)", size_bernoulli, LOOM_ERR_VALUE,
        "probability -0.1 is outside [0, 1]"),
    ROW("bad size", "loom_max_pool2d(x, kernel 0)", size_pool, LOOM_ERR_VALUE,
        "kernel 0, stride 1, padding 0 are invalid"),
    ROW("bad size", "loom_eval(ts, -1)", size_eval, LOOM_ERR_VALUE, "loom_eval: negative count -1"),
    ROW("bad size", "loom_set_num_threads(0)", size_threads, LOOM_ERR_VALUE,
        "0 is outside [1, 256]"),
    ROW("bad value", "loom_set_dynamic(9)", value_dynamic, LOOM_ERR_VALUE,
        "9 is not LOOM_DYNAMIC_AUTO, _OFF or _ALWAYS"),
    ROW("bad size", "loom_adam(ps, lr -1)", size_lr, LOOM_ERR_VALUE, "invalid lr: -1"),
    ROW("bad size", "loom_adam(ps, beta1 1.5)", size_beta, LOOM_ERR_VALUE, "invalid beta1: 1.5"),
    ROW("bad value", "loom_adamw(ps, eps NaN)", value_eps_nan, LOOM_ERR_VALUE,
        "loom_adamw: invalid eps: nan (must be >= 0)"),
    ROW("bad value", "loom_sgd(ps, dampening NaN)", value_dampening_nan, LOOM_ERR_VALUE,
        "loom_sgd: invalid dampening: nan (must be a number)"),
    ROW("bad value", "loom_ddp(ps, bucket_bytes -1)", value_ddp_bucket, LOOM_ERR_VALUE,
        "loom_ddp: bucket_bytes -1 and first_bucket_bytes 0 must be >= 0"),
    ROW("bad value", "loom_layer_norm(x, eps NaN)", value_layer_norm_eps, LOOM_ERR_VALUE,
        "loom_layer_norm: eps nan is not a finite value >= 0"),
    ROW("bad value", "loom_batch_norm(x, eps -1)", value_batch_norm_eps, LOOM_ERR_VALUE,
        "loom_batch_norm: eps -1 is not a finite value >= 0"),
    ROW("bad size", "loom_linear_new(ps, in -3)", size_layer, LOOM_ERR_VALUE,
        "sizes must be positive, got -3 and 4"),
    ROW("bad size", "loom_loader_new(d, batch 0)", size_loader, LOOM_ERR_VALUE,
        "loom_loader_new: batch size 0"),

    {"freed handle", "loom_neg(t) after loom_free(t)", freed_op, NUL,
     "loom_neg: the tensor was freed", READS_FREED},
    {"freed handle", "loom_realize(t) after loom_free(t)", freed_realize, NUL,
     "loom_realize: the tensor was freed", READS_FREED},
    {"freed handle", "loom_free(t) twice", freed_twice, NUL,
     "loom_free: the tensor was already freed", READS_FREED},
    {"scope misuse", "loom_scope_end() with no scope open", scope_end_unopened, LOOM_ERR_SCOPE,
     "loom_scope_end: no scope is open", OUTSIDE},
    ROW("scope misuse", "loom_keep(t) of another scope's tensor", scope_keep_foreign,
        LOOM_ERR_SCOPE, "holds no reference in the current scope"),

    ROW("non-finite", "loom_mse_loss(pred with NaN, y)", nonfinite_mse_nan, LOOM_OK, "value nan"),
    ROW("non-finite", "loom_mse_loss(pred with inf, y)", nonfinite_mse_inf, LOOM_OK, "value inf"),
    /* NaN, as PyTorch 1.13: the row's max is +inf, and inf - inf in x - max */
    ROW("non-finite", "loom_cross_entropy(logits with +inf, y)", nonfinite_ce_inf, LOOM_OK,
        "value nan"),
    ROW("non-finite", "loom_cross_entropy(logits with -inf, y)", nonfinite_ce_minus_inf, LOOM_OK,
        "value 0.6566"),
    ROW("non-finite", "loom_bce_with_logits(logits 1e30, 1)", nonfinite_bce_huge, LOOM_OK,
        "value 0"),
    ROW("non-finite", "loom_sum_all(loom_log(zeros))", nonfinite_log_zero, LOOM_OK, "value -inf"),
    ROW("non-finite", "loom_backward(NaN loss), then the gradient", nonfinite_backward, LOOM_OK,
        "value nan"),

    ROW("non-finite", "loom_full([], NaN, i32)", nonfinite_int_nan, LOOM_ERR_VALUE,
        "loom_full: the value nan cannot be converted to i32 without overflow"),
    ROW("non-finite", "loom_full([1], 1e30, i64)", nonfinite_int_huge, LOOM_ERR_VALUE,
        "loom_full: the value 1e+30 cannot be converted to i64 without overflow"),
    ROW("non-finite", "loom_pad(i32 ones, {1, 0}, -inf) summed", nonfinite_int_pad, LOOM_ERR_VALUE,
        "loom_pad: the value -inf cannot be converted to i32 without overflow"),

    ROW("non-finite", "loom_cast(-1e30 f32, i64) (saturates)", nonfinite_cast_huge, LOOM_OK,
        "value -9.22337e+18"),
    ROW("non-finite", "loom_cast(NaN f32, i32)", nonfinite_cast_nan, LOOM_OK, "value 0"),
    ROW("non-finite", "loom_cast(-1 f32, u8) (saturates)", nonfinite_cast_u8, LOOM_OK, "value 0"),
    ROW("non-finite", "loom_cast(+inf f32, i32) (saturates)", nonfinite_cast_inf_i32, LOOM_OK,
        "value 2147483647"),
    ROW("non-finite", "loom_cast(3e9 f32, i32) (saturates)", nonfinite_cast_big_i32, LOOM_OK,
        "value 2147483647"),
    ROW("non-finite", "loom_cast(300 f32, u8) (saturates)", nonfinite_cast_big_u8, LOOM_OK,
        "value 255"),

    ROW("bad file", "loom_params_load(ps, missing)", file_missing, LOOM_ERR_IO,
        "cannot open: No such file or directory"),
    ROW("bad file", "loom_params_load(ps, a directory)", file_directory, LOOM_ERR_IO,
        "not a regular file"),
    ROW("bad file", "loom_params_load(ps, 4 bytes)", file_short, LOOM_ERR_CORRUPT,
        "4 bytes, too short for the 8-byte header size"),
    ROW("bad file", "loom_params_load(ps, data cut short)", file_past_end, LOOM_ERR_CORRUPT,
        "do not fit the data section of 12 bytes"),
    ROW("bad file", "loom_params_load(ps, broken JSON)", file_not_json, LOOM_ERR_CORRUPT,
        "the header is not valid JSON"),
    ROW("bad file", "loom_params_load(ps, every truncation)", file_truncated, LOOM_ERR_CORRUPT, ""),
    ROW("bad file", "loom_params_load(ps, F64 for an f32)", file_dtype, LOOM_ERR_DTYPE,
        "'w' is F64 [2,3] in the file, F32 [2,3] in the collection"),
    ROW("bad file", "loom_params_load(ps, [3,2] for [2,3])", file_shape, LOOM_ERR_SHAPE,
        "'w' is F32 [3,2] in the file, F32 [2,3] in the collection"),
    ROW("bad file", "loom_params_load(ps, other names)", file_name, LOOM_ERR_SHAPE,
        "missing 'w' (F32 [2,3]); unexpected 'v' (F32 [2,3])"),
    ROW("bad file", "loom_params_load(ps, 2^64 elements)", file_huge, LOOM_ERR_CORRUPT,
        "shape has more elements than fit in 64 bits"),
    ROW("bad file", "loom_params_load(ps, a FIFO)", file_fifo, LOOM_ERR_IO, "not a regular file"),
    ROW("bad file", "loom_params_load(ps, a shape of 10^6 dims)", file_million_dims,
        LOOM_ERR_CORRUPT, "an array of more than 8 values"),
    ROW("bad file", "loom_params_load(ps, 300,000 tensors)", file_many_tensors, LOOM_ERR_CORRUPT,
        "lists more than 250000 tensors"),
    ROW("bad file", "loom_program_load(a FIFO)", file_fifo_program, LOOM_ERR_IO,
        "not a regular file"),
    ROW("bad file", "loom_npy_read(a safetensors file)", file_npy_not_npy, LOOM_ERR_CORRUPT,
        "not a .npy file"),
    ROW("bad file", "loom_npy_read(a FIFO)", file_npy_fifo, LOOM_ERR_IO, "not a regular file"),
    ROW("bad file", "loom_params_save(ps, 16 KiB past ulimit -f 4 KiB)", file_size_limit,
        LOOM_ERR_IO, "File too large"),
    ROW("bad file", "loom_params_save(ps, under a file)", file_save_under_file, LOOM_ERR_IO,
        "cannot create a file beside it: Not a directory"),

    ROW("cache directory", "LOOM_CACHE_DIR is a file", cache_is_file, LOOM_OK,
        "is not usable (not a directory); caching kernels in memory only"),
    ROW("cache directory", "LOOM_CACHE_DIR under a file", cache_under_file, LOOM_OK,
        "is not usable (Not a directory)"),
    ROW("cache directory", "LOOM_CACHE_DIR writable by others", cache_shared, LOOM_OK,
        "owned by another user or writable by group or others"),
};
#define NROWS ((int)(sizeof table / sizeof table[0]))

/* ------------------------------------------------------------ the walk */

static float precious_want[4] = {2, 4, 6, 8};
static loom_tensor *precious; /* realized before the walk */

static bool nothing_lost(void) {
  float got[4] = {0}, w[6] = {0};
  bool ok = loom_is_realized(precious) && loom_copy_to_host(precious, got, sizeof got) == LOOM_OK &&
            memcmp(got, precious_want, sizeof got) == 0;
  loom_tensor *pw = loom_params_get(params, "w");
  ok = ok && loom_copy_to_host(pw, w, sizeof w) == LOOM_OK && w[0] == 1 && w[5] == 6;
  loom_free(pw);
  return ok;
}

static void md_escape(const char *s, char *out, size_t len) {
  size_t used = 0;
  for (; *s && used + 2 < len; s++) {
    if (*s == '|') out[used++] = '\\';
    out[used++] = *s;
  }
  out[used] = 0;
}

/* "loom_matmul" from "loom_matmul(x, NULL)"; false for a row that is no call. */
static bool called_function(const char *call, char *out, size_t len) {
  const char *paren = strchr(call, '(');
  if (strncmp(call, "loom_", 5) != 0 || !paren || (size_t)(paren - call) + 1 > len) return false;
  memcpy(out, call, (size_t)(paren - call));
  out[paren - call] = 0;
  return true;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--cache-child") == 0) return cache_child();
  bool markdown = argc > 1 && strcmp(argv[1], "--markdown") == 0;
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  make_fixtures();
  precious = loom_mul_s(f4, 2);
  CHECK_OK(loom_realize(precious));
  if (markdown) printf("| what is wrong | call | status | message |\n| --- | --- | --- | --- |\n");
  int skipped = 0;
  for (int i = 0; i < NROWS; i++) {
    const row *r = &table[i];
    if ((r->flags & READS_FREED) && UNDER_ASAN) { /* ASan reports the use after free itself */
      skipped++;
      continue;
    }
    char msg[1024] = "";
    uint64_t bytes = loom_get_stats().bytes_live;
    loom_clear_error();
    if (!(r->flags & OUTSIDE)) loom_scope_begin();
    loom_status st = r->run(msg, sizeof msg);
    if (!(r->flags & OUTSIDE)) loom_scope_end();
    check_set_ctx("row %d: %s", i, r->call);
    CHECK_MSG(st == r->want, "%s: got %s (%s), expected %s", r->call, loom_status_name(st), msg,
              loom_status_name(r->want));
    CHECK_MSG(strstr(msg, r->says) != NULL, "%s: message \"%s\" lacks \"%s\"", r->call, msg,
              r->says);
    if (st != LOOM_OK) CHECK_MSG(msg[0] != 0, "%s: no message", r->call);
    /* the message names the function the row calls, not one it calls inside */
    char called[64];
    if (st != LOOM_OK && called_function(r->call, called, sizeof called))
      CHECK_MSG(strncmp(msg, called, strlen(called)) == 0, "%s: message \"%s\" does not name %s",
                r->call, msg, called);
    CHECK_MSG(nothing_lost(), "%s: a computed tensor or a parameter changed", r->call);
    CHECK_MSG(loom_get_stats().bytes_live == bytes, "%s: %lld tensor bytes left behind", r->call,
              (long long)(loom_get_stats().bytes_live - bytes));
    check_ctx[0] = 0;
    if (markdown) {
      char call[256], text[1100];
      md_escape(r->call, call, sizeof call);
      md_escape(msg, text, sizeof text);
      printf("| %s | `%s` | %s | %s |\n", r->kind, call, loom_status_name(st), text);
    }
  }
  if (!markdown) printf("%d bad inputs walked (%d skipped under ASan)\n", NROWS - skipped, skipped);
  loom_free(precious);
  loom_free(f23), loom_free(f4), loom_free(i3), loom_free(b3), loom_free(a234);
  loom_free(labels4);
  loom_params_free(params);
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  check_remove_dir(path_in("shared"));
  check_remove_dir(path_in("a_dir.st"));
  check_remove_dir(dir);
  return check_report();
}
