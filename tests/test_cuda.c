/*
 * The CUDA runtime's driver paths, without a GPU. LOOM_CUDA_TEST_MODE says
 * which driver LOOM_LIBCUDA points at (CMakeLists.txt runs all three):
 *
 *   missing  nothing there: CUDA is unavailable, says why, and every CUDA
 *            call fails with LOOM_ERR_DEVICE naming that reason; the CPU works.
 *   stub     the toolkit's stub libcuda: cuInit fails with
 *            CUDA_ERROR_STUB_LIBRARY, and the reason says so.
 *   fake     tests/support/fake_cuda.c, a driver double over host memory. It
 *            cannot run kernels (launches are recorded, not executed), so
 *            this checks loom's host side only: device memory and its cache,
 *            copies and stream order, compiling and caching cubins (NVRTC is
 *            real), launch arguments, errors from the driver, leaks. Kernel
 *            results are checked by tests/test_cuda_gpu.c on a real GPU.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/nvrtc/nvrtc_backend.h"
#include "check.h"
#include "frontend/frontend.h"
#include "loom.h"
#include "runtime/cuda.h"
#include "runtime/runtime.h"

static bool contains(const char *s, const char *part) { return s && part && strstr(s, part); }

#define CHECK_ERROR(t, st, part)                                                                   \
  do {                                                                                             \
    CHECK_STATUS(t, st);                                                                           \
    CHECK_MSG(contains(loom_error_message(t), part), "message '%s' lacks '%s'",                    \
              loom_error_message(t) ? loom_error_message(t) : "(none)", part);                     \
  } while (0)

/* ------------------------------------------------------------------ no device */

/* Everything a user does with CUDA fails clearly; the CPU is unchanged. */
static void check_unavailable(const char *expect_reason) {
  CHECK(!loom_cuda_available());
  CHECK_EQ_INT(loom_cuda_device_count(), 0);
  const char *why = loom_cuda_unavailable_reason();
  CHECK_MSG(contains(why, expect_reason), "reason '%s' lacks '%s'", why ? why : "(null)",
            expect_reason);
  printf("SKIP (no device here): loom_cuda_unavailable_reason() = %s\n", why ? why : "(null)");
  CHECK_OK(loom_synchronize(LOOM_CPU));
  CHECK_RC(loom_synchronize(LOOM_CUDA(0)), LOOM_ERR_DEVICE);
  CHECK_MSG(contains(loom_last_error(), expect_reason), "loom_synchronize: %s", loom_last_error());
  CHECK(loom_cuda_peak_bandwidth(0) == 0);

  loom_tensor *z = loom_zeros(LOOM_SHAPE(4), LOOM_F32, LOOM_CUDA(0));
  CHECK_ERROR(z, LOOM_ERR_DEVICE, expect_reason);
  CHECK_ERROR(z, LOOM_ERR_DEVICE, "cuda:0");
  float v[4] = {1, 2, 3, 4};
  loom_tensor *d = loom_from_data(v, LOOM_SHAPE(4), LOOM_F32, LOOM_CUDA(0));
  CHECK_ERROR(d, LOOM_ERR_DEVICE, expect_reason);
  loom_tensor *r = loom_rand_key(loom_key_new(1), LOOM_SHAPE(4), LOOM_F32, LOOM_CUDA(0));
  CHECK_ERROR(r, LOOM_ERR_DEVICE, "not available");
  loom_tensor *h = loom_from_data(v, LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
  loom_tensor *moved = loom_to(h, LOOM_CUDA(0));
  CHECK_ERROR(moved, LOOM_ERR_DEVICE, expect_reason);
  loom_clear_error();
  CHECK_RC(loom_set_default_device(LOOM_CUDA(0)), LOOM_ERR_DEVICE);
  CHECK_MSG(contains(loom_last_error(), expect_reason), "set_default_device: '%s'",
            loom_last_error() ? loom_last_error() : "(none)");
  CHECK(loom_default_device().type == LOOM_DEVICE_CPU);
  /* the CPU as before */
  loom_tensor *s = loom_sum_all(loom_mul_s(h, 2));
  CHECK_NEAR(loom_item(s), 20.0, 0);
  loom_tensor *back = loom_to(h, LOOM_CPU);
  CHECK(back == h || loom_item(loom_sum_all(back)) == 10.0);
  loom_free(z), loom_free(d), loom_free(r), loom_free(h), loom_free(moved), loom_free(s),
      loom_free(back);
}

/* ------------------------------------------------------------------ the fake */

typedef struct fake_cuda_counts {
  long allocs, frees, live_allocs, syncs, launches, modules, htod, dtoh, dtod, bad_pointers;
  size_t live_bytes;
} fake_cuda_counts;

static struct {
  fake_cuda_counts (*counts)(void);
  int (*launch)(long i, char *name, size_t len, unsigned grid[3], unsigned block[3],
                unsigned long long *params, int max_params);
  void (*fail_alloc)(long n);
  void (*fail_launch)(long n);
  void (*fail_load)(long n);
  int (*is_device_pointer)(const void *ptr, size_t bytes);
} fake;

/* The same library loom opened (dlopen of the same path gives the same one). */
static bool bind_fake(void) {
  void *lib = dlopen(getenv("LOOM_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return false;
  void *syms[6] = {dlsym(lib, "fake_cuda_get_counts"),        dlsym(lib, "fake_cuda_launch"),
                   dlsym(lib, "fake_cuda_fail_alloc"),        dlsym(lib, "fake_cuda_fail_launch"),
                   dlsym(lib, "fake_cuda_is_device_pointer"), dlsym(lib, "fake_cuda_fail_load")};
  for (int i = 0; i < 6; i++)
    if (!syms[i]) return false;
  memcpy(&fake.counts, &syms[0], sizeof(void *));
  memcpy(&fake.launch, &syms[1], sizeof(void *));
  memcpy(&fake.fail_alloc, &syms[2], sizeof(void *));
  memcpy(&fake.fail_launch, &syms[3], sizeof(void *));
  memcpy(&fake.is_device_pointer, &syms[4], sizeof(void *));
  memcpy(&fake.fail_load, &syms[5], sizeof(void *));
  return true;
}

typedef struct launch_info {
  char name[80];
  unsigned grid[3], block[3];
  int nparams;
  unsigned long long params[64];
} launch_info;

/* Launch i (from the first recorded). */
static launch_info launch_at(long i) {
  launch_info l = {.nparams = -1};
  l.nparams = fake.launch(i, l.name, sizeof l.name, l.grid, l.block, l.params, 64);
  return l;
}

static launch_info last_launch(void) { return launch_at(fake.counts().launches - 1); }

static const void *data_of(const loom_tensor *t) { return t->node->data; }

/* Host data to a device and back, every dtype, bit for bit. */
static void fake_round_trip(void) {
  unsigned char bytes[8 * 37];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 37 + 11);
  for (int dt = 0; dt < LOOM_NUM_DTYPES; dt++) {
    check_set_ctx("round trip %s", loom_dtype_name(dt));
    loom_tensor *d = loom_from_data(bytes, LOOM_SHAPE(37), dt, LOOM_CUDA(0));
    CHECK_STATUS(d, LOOM_OK);
    CHECK(loom_device_of(d).type == LOOM_DEVICE_CUDA && loom_is_realized(d));
    size_t n = 37 * loom_dtype_size(dt);
    CHECK(fake.is_device_pointer(data_of(d), n));
    unsigned char back[8 * 37];
    memset(back, 0, sizeof back);
    long syncs = fake.counts().syncs;
    CHECK_OK(loom_copy_to_host(d, back, n));
    CHECK(fake.counts().syncs > syncs); /* the value reached the host: waited */
    if (dt == LOOM_BOOL)
      for (size_t i = 0; i < n; i++) CHECK_EQ_INT(back[i], bytes[i] != 0);
    else
      CHECK(memcmp(back, bytes, n) == 0);
    loom_tensor *h = loom_to(d, LOOM_CPU);
    CHECK(loom_device_of(h).type == LOOM_DEVICE_CPU);
    CHECK(dt == LOOM_BOOL || memcmp(data_of(h), bytes, n) == 0);
    loom_tensor *again = loom_to(h, LOOM_CUDA(0));
    CHECK(data_of(again) != data_of(d));
    loom_tensor *same = loom_to(d, LOOM_CUDA(0));
    CHECK(same == d || data_of(same) == data_of(d)); /* no copy onto its own device */
    loom_free(d), loom_free(h), loom_free(again), loom_free(same);
  }
  check_set_ctx("%s", "");
  /* Stream order: the copy out is queued (the fake runs it at the sync), so a
   * value read without waiting would be the fake's 0xCD fill, not this. */
  float f[1] = {-2.25f};
  loom_tensor *d = loom_from_data(f, LOOM_SHAPE(1), LOOM_F32, LOOM_CUDA(0));
  CHECK_NEAR(loom_item(d), -2.25, 0);
  loom_free(d);
  loom_tensor *z = loom_zeros(LOOM_SHAPE(3), LOOM_F32, LOOM_CUDA(0));
  CHECK(!loom_is_realized(z)); /* a constant stays lazy on the device too */
  loom_free(z);
}

/* Freed blocks come back by size class; stats count device bytes. */
static void fake_allocator(void) {
  float v[1000] = {0};
  loom_tensor *warm = loom_from_data(v, LOOM_SHAPE(1000), LOOM_F32, LOOM_CUDA(0));
  loom_free(warm);
  loom_stats before = loom_get_stats();
  fake_cuda_counts c0 = fake.counts();
  for (int i = 0; i < 100; i++) {
    loom_tensor *t = loom_from_data(v, LOOM_SHAPE(1000), LOOM_F32, LOOM_CUDA(0));
    CHECK_STATUS(t, LOOM_OK);
    loom_free(t);
  }
  fake_cuda_counts c1 = fake.counts();
  CHECK_EQ_INT(c1.allocs - c0.allocs, 0); /* every one reused the cached block */
  CHECK_EQ_INT(c1.htod - c0.htod, 100);
  loom_stats after = loom_get_stats();
  CHECK_EQ_INT(after.device_bytes_live, before.device_bytes_live);
  loom_tensor *t = loom_from_data(v, LOOM_SHAPE(1000), LOOM_F32, LOOM_CUDA(0));
  CHECK_EQ_INT(loom_get_stats().device_bytes_live, before.device_bytes_live + 4000);
  CHECK(loom_get_stats().device_bytes_peak >= before.device_bytes_live + 4000);
  CHECK_EQ_INT(loom_get_stats().bytes_live, after.bytes_live); /* nothing on the host */
  loom_free(t);
}

/* A realization on the device: one launch with the code generator's shape. */
/* Long reductions to few values split into enough parts to fill a GPU (a
 * block per partial result), not the CPU's 16: 2^22 values to one in 1024
 * parts of 4096, then one block combining them; 64 rows of 2^16 in 16 parts
 * each (parts of at least 4096 values). */
static void fake_split_reductions(void) {
  enum { N = 1 << 22 };
  float *v = calloc(N, sizeof *v);
  CHECK(v != NULL);
  if (!v) return;
  loom_tensor *x = loom_from_data(v, LOOM_SHAPE(N), LOOM_F32, LOOM_CUDA(0));
  free(v);
  struct {
    loom_tensor *sum;
    unsigned partial_blocks;
    long final_outputs;
  } cases[2] = {
      {loom_sum(x, NULL, 0, false), 1024, 1},
      {loom_sum(loom_reshape(x, LOOM_SHAPE(64, N / 64)), (int[]){1}, 1, false), 64 * 16, 64},
  };
  for (int c = 0; c < 2; c++) {
    long before = fake.counts().launches;
    CHECK_OK(loom_realize(cases[c].sum));
    CHECK_EQ_INT(fake.counts().launches - before, 2);
    launch_info partial = {.nparams = -1}, final = last_launch();
    partial.nparams = fake.launch(before, partial.name, sizeof partial.name, partial.grid,
                                  partial.block, partial.params, 64);
    CHECK_EQ_INT(partial.grid[0], cases[c].partial_blocks);
    CHECK_EQ_INT(partial.params[partial.nparams - 1], cases[c].partial_blocks); /* end */
    CHECK_EQ_INT(final.params[final.nparams - 1], cases[c].final_outputs);
    loom_free(cases[c].sum);
  }
  loom_free(x);
}

static void fake_launches(void) {
  float v[1000];
  check_fill_uniform(v, 1000, 3);
  loom_tensor *a = loom_from_data(v, LOOM_SHAPE(1000), LOOM_F32, LOOM_CUDA(0));
  loom_reset_stats();
  fake_cuda_counts c0 = fake.counts();
  loom_tensor *b = loom_add_s(loom_exp(a), 1.0);
  CHECK_OK(loom_realize(b));
  CHECK(loom_device_of(b).type == LOOM_DEVICE_CUDA);
  fake_cuda_counts c1 = fake.counts();
  CHECK_EQ_INT(c1.launches - c0.launches, 1);
  CHECK_EQ_INT(c1.syncs - c0.syncs, 0); /* nothing reached the host: nothing waited */
  launch_info l = last_launch();
  CHECK(strncmp(l.name, "lk_", 3) == 0 && strlen(l.name) == 35);
  CHECK_EQ_INT(l.block[0], LM_CUDA_BLOCK);
  CHECK_EQ_INT(l.grid[0], (1000 + LM_CUDA_BLOCK * LM_CUDA_VEC - 1) / (LM_CUDA_BLOCK * LM_CUDA_VEC));
  CHECK_EQ_INT(l.nparams, 4); /* out, a, begin, end */
  CHECK(l.params[0] == (unsigned long long)(uintptr_t)data_of(b));
  CHECK(l.params[1] == (unsigned long long)(uintptr_t)data_of(a));
  CHECK_EQ_INT(l.params[2], 0);
  CHECK_EQ_INT(l.params[3], 1000);
  loom_stats s = loom_get_stats();
  CHECK_EQ_INT(s.kernels_launched, 1);
  CHECK_EQ_INT(s.kernels_compiled + s.disk_cache_hits, 1);
  /* The same graph again: the program and the loaded function come back. */
  loom_tensor *b2 = loom_add_s(loom_exp(a), 1.0);
  CHECK_OK(loom_realize(b2));
  CHECK_EQ_INT(fake.counts().modules, c1.modules);
  CHECK_EQ_INT(fake.counts().launches, c1.launches + 1);
  CHECK_EQ_INT(loom_get_stats().graph_cache_hits, 1);
  /* A reduction: one block per output point for long rows. */
  int axes[1] = {1};
  loom_tensor *r = loom_sum(loom_reshape(a, LOOM_SHAPE(2, 500)), axes, 1, false);
  CHECK_OK(loom_realize(r));
  l = last_launch();
  CHECK_EQ_INT(l.nparams, 4);
  CHECK_EQ_INT(l.params[3], 2);
  CHECK(l.grid[0] >= 1 && l.grid[0] <= 2);
  loom_free(a), loom_free(b), loom_free(b2), loom_free(r);
  fake_split_reductions();
}

/* GEMM steps launch the tiled kernel once for all batch indices (grid z). */
static void fake_gemm(void) {
  float x[2 * 64 * 32], w[2 * 32 * 48];
  check_fill_uniform(x, 2 * 64 * 32, 1);
  check_fill_uniform(w, 2 * 32 * 48, 2);
  loom_tensor *a = loom_from_data(x, LOOM_SHAPE(64, 32), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *b = loom_from_data(w, LOOM_SHAPE(32, 48), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *c = loom_matmul(a, b);
  long before = fake.counts().launches;
  CHECK_OK(loom_realize(c));
  CHECK_EQ_INT(fake.counts().launches - before, 1);
  launch_info l = last_launch();
  CHECK(strcmp(l.name, "lm_gemm_f32_nn") == 0);
  CHECK_EQ_INT(l.nparams, 14); /* c, a, b, M, N, K, lda, ldb, the batch layout */
  CHECK(l.params[0] == (unsigned long long)(uintptr_t)data_of(c));
  CHECK(l.params[1] == (unsigned long long)(uintptr_t)data_of(a));
  CHECK(l.params[2] == (unsigned long long)(uintptr_t)data_of(b));
  CHECK_EQ_INT(l.params[3], 64);
  CHECK_EQ_INT(l.params[4], 48);
  CHECK_EQ_INT(l.params[5], 32);
  CHECK_EQ_INT(l.params[8], 0); /* z0 */
  CHECK_EQ_INT(l.params[9], 1); /* inner: no batch dims */
  CHECK_EQ_INT(l.grid[0], 1);
  CHECK_EQ_INT(l.grid[1], 1);
  CHECK_EQ_INT(l.grid[2], 1);
  CHECK_EQ_INT(l.block[0], 256);
  /* BF16 operands: widened for CUDA's F32 GEMM (cast kernels, then the GEMM with the cast
   * back as its epilogue, one lf_ kernel) */
  loom_tensor *ah = loom_cast(a, LOOM_BF16), *bh = loom_cast(b, LOOM_BF16);
  CHECK_OK(loom_realize(ah));
  CHECK_OK(loom_realize(bh));
  CHECK_OK(loom_realize(loom_matmul(ah, bh)));
  bool gemm_f32 = false;
  for (long i = before + 1; i < fake.counts().launches && !gemm_f32; i++)
    gemm_f32 = strncmp(launch_at(i).name, "lf_", 3) == 0 ||
               strcmp(launch_at(i).name, "lm_gemm_f32_nn") == 0;
  CHECK_MSG(gemm_f32, "%s", "a BF16 product on CUDA ran no F32 GEMM");
  /* a product of BF16 operands recorded as the CPU records it: refused */
  lm_node *src[2] = {ah->node, bh->node};
  loom_tensor *raw =
      lm_result(lm_node_new(LM_MATMUL, 2, src, LOOM_SHAPE(64, 48), LOOM_F32, LOOM_CUDA(0)));
  CHECK_RC(loom_realize(raw), LOOM_ERR_DTYPE);
  CHECK(strstr(loom_last_error(), "CUDA's GEMM takes F32 or F64 operands, not bf16") != NULL);
  /* transposed B, batched, with a bias + relu epilogue (F64) */
  double xd[2 * 64 * 32], wd[2 * 48 * 32], bias[48];
  for (int i = 0; i < 2 * 64 * 32; i++) xd[i] = x[i];
  for (int i = 0; i < 2 * 48 * 32; i++) wd[i] = w[i % (2 * 32 * 48)];
  for (int i = 0; i < 48; i++) bias[i] = i;
  loom_tensor *ad = loom_from_data(xd, LOOM_SHAPE(2, 64, 32), LOOM_F64, LOOM_CUDA(0));
  loom_tensor *wt = loom_from_data(wd, LOOM_SHAPE(2, 48, 32), LOOM_F64, LOOM_CUDA(0));
  loom_tensor *bd = loom_from_data(bias, LOOM_SHAPE(48), LOOM_F64, LOOM_CUDA(0));
  loom_tensor *y = loom_relu(loom_add(loom_matmul(ad, loom_transpose(wt, 1, 2)), bd));
  before = fake.counts().launches;
  CHECK_OK(loom_realize(y));
  /* one launch, a batch index per grid z: the tiled product with the epilogue
   * fused in (slots..., a, b, M, N, K, lda, ldb, z0, inner, sa0, sa1, sb0,
   * sb1); the product never goes to memory */
  CHECK_EQ_INT(fake.counts().launches - before, 1);
  launch_info li = last_launch();
  int n = li.nparams;
  CHECK_MSG(strncmp(li.name, "lf_", 3) == 0, "launched %s, not a fused GEMM", li.name);
  CHECK(n >= 16);
  if (strncmp(li.name, "lf_", 3) == 0 && n >= 16) {
    CHECK(li.params[0] == (unsigned long long)(uintptr_t)data_of(y));
    CHECK(li.params[n - 13] == (unsigned long long)(uintptr_t)data_of(ad));
    CHECK(li.params[n - 12] == (unsigned long long)(uintptr_t)data_of(wt));
    CHECK_EQ_INT(li.params[n - 11], 64);     /* M */
    CHECK_EQ_INT(li.params[n - 10], 48);     /* N */
    CHECK_EQ_INT(li.params[n - 9], 32);      /* K */
    CHECK_EQ_INT(li.params[n - 8], 32);      /* lda */
    CHECK_EQ_INT(li.params[n - 7], 32);      /* ldb of the transposed operand */
    CHECK_EQ_INT(li.params[n - 6], 0);       /* z0 */
    CHECK_EQ_INT(li.params[n - 5], 2);       /* inner: the one batch dim */
    CHECK_EQ_INT(li.params[n - 3], 64 * 32); /* A's batch stride */
    CHECK_EQ_INT(li.params[n - 1], 48 * 32); /* B's */
    CHECK_EQ_INT(li.grid[0], 1);
    CHECK_EQ_INT(li.grid[1], 1);
    CHECK_EQ_INT(li.grid[2], 2);
  }
  /* batch dims that do not collapse to two (A's permuted, read in place): a
   * launch per batch index, each at its own z0 */
  loom_tensor *a5 = loom_zeros(LOOM_SHAPE(4, 3, 2, 5, 6), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *b5 = loom_zeros(LOOM_SHAPE(2, 3, 4, 6, 7), LOOM_F32, LOOM_CUDA(0));
  CHECK_OK(loom_realize(a5));
  CHECK_OK(loom_realize(b5));
  loom_tensor *p5 = loom_matmul(loom_permute(a5, (int[]){2, 1, 0, 3, 4}, 5), b5);
  before = fake.counts().launches;
  CHECK_OK(loom_realize(p5));
  CHECK_EQ_INT(fake.counts().launches - before, 24);
  launch_info l5 = last_launch();
  CHECK_EQ_INT(l5.grid[2], 1);
  CHECK_EQ_INT(l5.params[8], 23); /* z0 of the last batch index */
  CHECK_EQ_INT(l5.params[9], 1);  /* inner: the pointers are offset on the host */
  loom_free(a), loom_free(b), loom_free(c), loom_free(ad), loom_free(wt), loom_free(bd),
      loom_free(y), loom_free(a5), loom_free(b5), loom_free(p5);
}

/* Philox keys are copied to the device and passed as a device pointer. */
static void fake_random(void) {
  loom_key key = loom_key_new(42);
  loom_tensor *r = loom_rand_key(key, LOOM_SHAPE(5000), LOOM_F32, LOOM_CUDA(0));
  CHECK_OK(loom_realize(r));
  launch_info l = last_launch();
  CHECK_EQ_INT(l.nparams, 4);
  CHECK(fake.is_device_pointer((const void *)(uintptr_t)l.params[1], 8));
  CHECK_OK(lm_cuda_sync("test", 0));
  CHECK(memcmp((const void *)(uintptr_t)l.params[1], key.k, 8) == 0);
  loom_free(r);
}

/* Driver failures come back as statuses naming the call, the device and the
 * driver's error; nothing is published and nothing leaks. */
static void fake_errors(void) {
  float v[256] = {0};
  /* out of memory, even after the cache was given back */
  fake.fail_alloc(1);
  loom_tensor *t = loom_from_data(v, LOOM_SHAPE(256, 1000), LOOM_F32, LOOM_CUDA(0));
  fake.fail_alloc(0);
  CHECK_ERROR(t, LOOM_ERR_OOM, "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_ERROR(t, LOOM_ERR_OOM, "cuda:0");
  loom_free(t);
  /* an allocation inside a realization */
  loom_tensor *a = loom_from_data(v, LOOM_SHAPE(256), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *big =
      loom_mul_s(loom_expand(loom_reshape(a, LOOM_SHAPE(1, 256)), LOOM_SHAPE(4096, 256)), 3.0);
  fake.fail_alloc(1);
  CHECK_RC(loom_realize(big), LOOM_ERR_OOM);
  fake.fail_alloc(0);
  CHECK(!loom_is_realized(big));
  CHECK_OK(loom_realize(big)); /* memory is back: the same tensor computes */
  loom_free(big);
  /* a failing launch */
  loom_tensor *b = loom_sqrt(loom_add_s(a, 7.0));
  uint64_t live = loom_get_stats().device_bytes_live;
  fake.fail_launch(1);
  loom_clear_error();
  CHECK_RC(loom_realize(b), LOOM_ERR_DEVICE);
  fake.fail_launch(0);
  CHECK_MSG(contains(loom_last_error(), "CUDA_ERROR_LAUNCH_FAILED") &&
                contains(loom_last_error(), "launching lk_"),
            "launch failure: '%s'", loom_last_error() ? loom_last_error() : "(none)");
  CHECK(!loom_is_realized(b));
  CHECK_EQ_INT(loom_get_stats().device_bytes_live, live); /* the run's buffers went back */
  CHECK_OK(loom_realize(b));
  loom_free(b);
  /* a module that does not load: the program's kernels compile on the pool's
   * threads, and the failure is reported on this one, naming the kernel */
  int threads = loom_num_threads();
  CHECK_OK(loom_set_num_threads(4));
  loom_tensor *w = loom_from_data(v, LOOM_SHAPE(16, 16), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *x16 = loom_reshape(loom_sqrt(loom_add_s(a, 11.0)), LOOM_SHAPE(16, 16));
  loom_tensor *y = loom_add_s(loom_relu(loom_matmul(loom_exp(x16), w)), 0.25);
  y = loom_div(y, loom_sum(loom_log(loom_add_s(y, 13.0)), NULL, 0, true));
  fake.fail_load(1);
  loom_clear_error();
  CHECK_RC(loom_realize(y), LOOM_ERR_DEVICE);
  fake.fail_load(0);
  CHECK_MSG(contains(loom_last_error(), "CUDA_ERROR_INVALID_IMAGE") &&
                contains(loom_last_error(), "loading l"),
            "load failure: '%s'", loom_last_error() ? loom_last_error() : "(none)");
  CHECK(!loom_is_realized(y));
  CHECK_OK(loom_realize(y)); /* loads again: the same tensor computes */
  loom_free(y), loom_free(w);
  CHECK_OK(loom_set_num_threads(threads));
  /* devices that do not mix */
  loom_tensor *h = loom_from_data(v, LOOM_SHAPE(256), LOOM_F32, LOOM_CPU);
  loom_tensor *mixed = loom_add(h, a);
  CHECK_ERROR(mixed, LOOM_ERR_DEVICE, "cpu and cuda:0");
  loom_tensor *none = loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CUDA(1));
  CHECK_ERROR(none, LOOM_ERR_DEVICE, "cuda:1 does not exist");
  /* a copy of a tensor that requires gradients keeps it as its source,
   * except under no-grad */
  loom_tensor *p = loom_from_data(v, LOOM_SHAPE(256), LOOM_F32, LOOM_CUDA(0));
  CHECK_OK(loom_set_requires_grad(p, true));
  loom_tensor *moved = loom_to(p, LOOM_CPU);
  CHECK_STATUS(moved, LOOM_OK);
  CHECK(loom_requires_grad(moved));
  loom_tensor *moved2 = NULL;
  LOOM_NO_GRAD { moved2 = loom_to(p, LOOM_CPU); }
  CHECK_STATUS(moved2, LOOM_OK);
  CHECK(!loom_requires_grad(moved2));
  /* a program runs on one device */
  loom_clear_error();
  loom_tensor *in = loom_input("x", LOOM_SHAPE(256), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *host_in = loom_input("y", LOOM_SHAPE(256), LOOM_F32, LOOM_CPU);
  loom_tensor *outs[2] = {loom_exp(in), loom_exp(host_in)};
  CHECK(loom_compile(outs, 2, (loom_tensor *[]){in, host_in}, 2) == NULL);
  CHECK_MSG(contains(loom_last_error(), "outs[1] is on cpu, outs[0] on cuda:0"), "compile: '%s'",
            loom_last_error() ? loom_last_error() : "(none)");
  loom_free(a), loom_free(h), loom_free(mixed), loom_free(none), loom_free(p), loom_free(moved),
      loom_free(moved2), loom_free(in), loom_free(host_in), loom_free(outs[0]), loom_free(outs[1]);
  loom_clear_error();
}

/* A program compiled from device tensors runs there: its kernels are compiled
 * for the device and launched on each run, inputs and outputs stay on it.
 * Outputs that are a weight or an input are copies, exact even here. */
static void fake_program(void) {
  float wv[256], xv[256], got[256];
  check_fill_uniform(wv, 256, 21);
  check_fill_uniform(xv, 256, 22);
  loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(256), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *in = loom_input("x", LOOM_SHAPE(256), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *outs[3] = {loom_add(loom_exp(in), w), w, in};
  loom_program *prog = loom_compile(outs, 3, &in, 1);
  CHECK_MSG(prog != NULL, "compile: %s", loom_last_error() ? loom_last_error() : "?");
  if (!prog) return;
  loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(256), LOOM_F32, LOOM_CUDA(0));
  for (int run = 0; run < 2; run++) {
    long launches = fake.counts().launches;
    loom_tensor *res[3] = {NULL, NULL, NULL};
    CHECK_OK(loom_program_run(prog, &x, res));
    CHECK_EQ_INT(fake.counts().launches - launches, 1); /* exp + add: one fused kernel */
    for (int i = 0; i < 3; i++) CHECK(res[i] && loom_device_of(res[i]).type == LOOM_DEVICE_CUDA);
    CHECK_OK(loom_copy_to_host(res[1], got, sizeof got));
    CHECK(memcmp(got, wv, sizeof got) == 0);
    CHECK_OK(loom_copy_to_host(res[2], got, sizeof got));
    CHECK(memcmp(got, xv, sizeof got) == 0);
    CHECK(data_of(res[1]) != data_of(w) && data_of(res[2]) != data_of(x)); /* copies */
    for (int i = 0; i < 3; i++) loom_free(res[i]);
  }
  /* inputs from elsewhere, and export (CPU code), are refused */
  loom_tensor *host = loom_from_data(xv, LOOM_SHAPE(256), LOOM_F32, LOOM_CPU);
  loom_tensor *res[3];
  CHECK_RC(loom_program_run(prog, &host, res), LOOM_ERR_DEVICE);
  CHECK_MSG(contains(loom_last_error(), "input 0 ('x') is on cpu, the program runs on cuda:0"),
            "run: '%s'", loom_last_error() ? loom_last_error() : "(none)");
  CHECK_RC(loom_program_export(prog, "/tmp", "prog"), LOOM_ERR_DEVICE);
  CHECK_MSG(contains(loom_last_error(), "the program runs on cuda:0"), "export: '%s'",
            loom_last_error() ? loom_last_error() : "(none)");
  loom_clear_error();
  /* saved, it loads on the CPU (the text names no device), with the weight */
  char path[] = "/tmp/loom-cuda-program-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_OK(loom_program_save(prog, path));
  loom_program *loaded = loom_program_load(path);
  CHECK_MSG(loaded != NULL, "load: %s", loom_last_error() ? loom_last_error() : "?");
  if (loaded) {
    CHECK_OK(loom_program_run(loaded, &host, res));
    CHECK(loom_device_of(res[0]).type == LOOM_DEVICE_CPU);
    CHECK_OK(loom_copy_to_host(res[1], got, sizeof got));
    CHECK(memcmp(got, wv, sizeof got) == 0);
    float want[256], sum[256];
    CHECK_OK(loom_copy_to_host(res[0], sum, sizeof sum));
    for (int i = 0; i < 256; i++) want[i] = expf(xv[i]) + wv[i];
    for (int i = 0; i < 256; i++) CHECK_NEAR(sum[i], want[i], 1e-5 * fabsf(want[i]) + 1e-6);
    for (int i = 0; i < 3; i++) loom_free(res[i]);
    loom_program_free(loaded);
  }
  char wpath[sizeof path + 16];
  snprintf(wpath, sizeof wpath, "%s.safetensors", path);
  unlink(path), unlink(wpath);
  loom_program_free(prog);
  loom_free(w), loom_free(in), loom_free(x), loom_free(host), loom_free(outs[0]);
}

/* x (CPU) -> cuda -> CPU: the gradient of sum(z * w) + sum(x * x) reaches x
 * through both copies, and a second derivative through them again. No
 * kernel runs on the device (the fake cannot run any): the gradient arrives
 * there as data and leaves as data, so its values are exact. */
static void fake_grad_across_devices(void) {
  enum { n = 300 };
  float xv[n], wv[n];
  check_fill_uniform(xv, n, 11);
  check_fill_uniform(wv, n, 12);
  loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(n), LOOM_F32, LOOM_CPU);
  loom_tensor *w = loom_from_data(wv, LOOM_SHAPE(n), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_set_requires_grad(x, true));
  loom_tensor *y = loom_to(x, LOOM_CUDA(0));
  loom_tensor *z = loom_to(y, LOOM_CPU);
  CHECK(loom_device_of(y).type == LOOM_DEVICE_CUDA && loom_requires_grad(y));
  CHECK(loom_device_of(z).type == LOOM_DEVICE_CPU && loom_requires_grad(z));
  loom_tensor *loss =
      loom_add(loom_sum(loom_mul(z, w), NULL, 0, false), loom_sum(loom_mul(x, x), NULL, 0, false));
  CHECK_OK(loom_backward(loss));
  loom_tensor *g = loom_grad(x);
  CHECK(g && loom_device_of(g).type == LOOM_DEVICE_CPU);
  float gv[n];
  CHECK_OK(loom_copy_to_host(g, gv, sizeof gv));
  for (int i = 0; i < n; i++) CHECK_NEAR(gv[i], wv[i] + 2 * xv[i], 1e-6);
  /* accumulates across calls, as PyTorch does */
  CHECK_OK(loom_backward(loss));
  loom_tensor *g2 = loom_grad(x);
  CHECK_OK(loom_copy_to_host(g2, gv, sizeof gv));
  for (int i = 0; i < n; i++) CHECK_NEAR(gv[i], 2 * (wv[i] + 2 * xv[i]), 1e-6);
  /* loom_grad_of: d/dx sum(z^3) = 3 x^2 crosses with its history, so its
   * own gradient, d/dx sum(3 x^2) = 6 x, crosses back again */
  loom_tensor *cube = loom_sum(loom_mul(loom_mul(z, z), z), NULL, 0, false);
  loom_tensor *d1 = NULL, *d2 = NULL;
  CHECK_OK(loom_grad_of(&cube, 1, &x, 1, &d1));
  CHECK(loom_requires_grad(d1));
  loom_tensor *s1 = loom_sum(d1, NULL, 0, false);
  CHECK_OK(loom_grad_of(&s1, 1, &x, 1, &d2));
  float d1v[n], d2v[n];
  CHECK_OK(loom_copy_to_host(d1, d1v, sizeof d1v));
  CHECK_OK(loom_copy_to_host(d2, d2v, sizeof d2v));
  for (int i = 0; i < n; i++) {
    CHECK_NEAR(d1v[i], 3 * xv[i] * xv[i], 1e-6);
    CHECK_NEAR(d2v[i], 6 * xv[i], 1e-5);
  }
  /* a copy made under no-grad cuts the history */
  loom_tensor *cut = NULL;
  LOOM_NO_GRAD { cut = loom_to(loom_to(x, LOOM_CUDA(0)), LOOM_CPU); }
  CHECK(!loom_requires_grad(cut));
}

/* The default device: layers and their optimizer state live there. */
static void fake_default_device(void) {
  CHECK_OK(loom_set_default_device(LOOM_CUDA(0)));
  loom_params *ps = loom_params_new();
  loom_linear l = loom_linear_new(ps, "fc", 8, 4, loom_key_new(1));
  CHECK(l.weight && loom_device_of(l.weight).type == LOOM_DEVICE_CUDA);
  loom_optim *opt = loom_adam(ps, LOOM_ADAM_DEFAULTS);
  float xv[16];
  check_fill_uniform(xv, 16, 5);
  loom_tensor *x = loom_from_data(xv, LOOM_SHAPE(2, 8), LOOM_F32, LOOM_CUDA(0));
  LOOM_SCOPE {
    loom_tensor *loss = loom_mean_all(loom_square(loom_linear_forward(&l, x)));
    CHECK_OK(loom_backward(loss));
    CHECK_OK(loom_optim_step(opt));
    CHECK_OK(loom_realize(l.weight)); /* the whole step on the device */
  }
  CHECK(loom_device_of(l.weight).type == LOOM_DEVICE_CUDA);
  CHECK_OK(loom_set_default_device(LOOM_CPU));
  loom_optim_free(opt);
  loom_params_free(ps);
  loom_free(x);
}

/* Cubins go to the disk cache: a new process finds them; a corrupt entry is
 * compiled again. */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static void corrupt_entries(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r+b");
    if (!f) continue;
    fseek(f, -1, SEEK_END);
    int c = fgetc(f);
    fseek(f, -1, SEEK_END);
    fputc(c ^ 0xff, f);
    fclose(f);
  }
  if (d) closedir(d);
}

/* A kernel this test alone compiles: 1.25 makes it distinct. */
static loom_stats child_realize(void) {
  float v[300];
  check_fill_uniform(v, 300, 9);
  loom_tensor *a = loom_from_data(v, LOOM_SHAPE(300), LOOM_F32, LOOM_CUDA(0));
  loom_tensor *m = loom_mul_s(a, 1.25), *b = loom_tanh(m);
  loom_reset_stats();
  loom_realize(b);
  loom_stats s = loom_get_stats();
  loom_free(a), loom_free(m), loom_free(b);
  return s;
}

static int run_child(const char *what) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "/proc/%d/exe %s", (int)getpid(), what);
  return system(cmd);
}

static void fake_disk_cache(const char *dir) {
  loom_stats s = child_realize();
  CHECK_EQ_INT(s.kernels_compiled, 1);
  CHECK(count_entries(dir) >= 1);
  CHECK_MSG(run_child("--child-disk-hit") == 0, "%s", "a new process loads the cubin from disk");
  corrupt_entries(dir);
  CHECK_MSG(run_child("--child-disk-miss") == 0, "%s", "a corrupt cubin entry is rebuilt");
  CHECK_MSG(run_child("--child-disk-hit") == 0, "%s", "the rebuilt entry is used");
}

static void fake_no_leaks(void) {
  loom_stats s = loom_get_stats();
  CHECK_EQ_INT(s.device_bytes_live, 0);
  lm_cuda_trim();
  fake_cuda_counts c = fake.counts();
  CHECK_EQ_INT(c.live_allocs, 0);
  CHECK_EQ_INT(c.bad_pointers, 0);
  printf("fake driver: %ld allocations, %ld launches, %ld modules, %ld syncs, %ld uploads, "
         "%ld downloads\n",
         c.allocs, c.launches, c.modules, c.syncs, c.htod, c.dtoh);
}

/* loom_synchronize waits for the stream (the double applies a queued copy to
 * the host at the sync); the peak bandwidth comes from the device's attributes. */
static void fake_synchronize(void) {
  CHECK_OK(loom_synchronize(LOOM_CPU));
  CHECK_OK(loom_synchronize(LOOM_CUDA(0)));
  CHECK_RC(loom_synchronize(LOOM_CUDA(3)), LOOM_ERR_DEVICE);
  CHECK(contains(loom_last_error(), "cuda:3 does not exist"));
  CHECK(loom_cuda_peak_bandwidth(0) > 0);
  CHECK(loom_cuda_peak_bandwidth(1) == 0 && loom_cuda_peak_bandwidth(-1) == 0);
  loom_tensor *x = loom_ones(LOOM_SHAPE(1000), LOOM_F32, LOOM_CUDA(0));
  CHECK_OK(loom_realize(x));
  CHECK_OK(loom_synchronize(LOOM_CUDA(0)));
  loom_free(x);
}

static void run_fake(void) {
  char why[1024];
  if (!lm_nvrtc_available(why, sizeof why)) {
    printf("SKIP: the fake driver needs NVRTC to compile kernels: %s\n", why);
    CHECK(!loom_cuda_available());
    return;
  }
  CHECK_MSG(loom_cuda_available(), "fake driver not usable: %s",
            loom_cuda_unavailable_reason() ? loom_cuda_unavailable_reason() : "?");
  if (!loom_cuda_available() || !bind_fake()) {
    CHECK_MSG(false, "%s", "cannot bind the fake driver's test functions");
    return;
  }
  CHECK_EQ_INT(loom_cuda_device_count(), 1);
  CHECK(loom_cuda_unavailable_reason() == NULL);
  printf("fake driver (kernels are NOT executed: launches are recorded only)\n");
  /* each in a scope: the temporaries of a chain of calls go at its end */
  LOOM_SCOPE { fake_round_trip(); }
  LOOM_SCOPE { fake_allocator(); }
  LOOM_SCOPE { fake_launches(); }
  LOOM_SCOPE { fake_gemm(); }
  LOOM_SCOPE { fake_random(); }
  LOOM_SCOPE { fake_errors(); }
  LOOM_SCOPE { fake_grad_across_devices(); }
  LOOM_SCOPE { fake_program(); }
  LOOM_SCOPE { fake_default_device(); }
  LOOM_SCOPE { fake_synchronize(); }
  LOOM_SCOPE { fake_disk_cache(getenv("LOOM_CACHE_DIR")); }
  fake_no_leaks();
}

int main(int argc, char **argv) {
  const char *mode = getenv("LOOM_CUDA_TEST_MODE");
  if (argc > 1) { /* a child of fake_disk_cache */
    loom_stats s = child_realize();
    bool hit = strcmp(argv[1], "--child-disk-hit") == 0;
    bool ok = hit ? s.disk_cache_hits == 1 && s.kernels_compiled == 0
                  : s.disk_cache_hits == 0 && s.kernels_compiled == 1;
    if (!ok)
      fprintf(stderr, "%s: disk hits %llu, compiled %llu\n", argv[1],
              (unsigned long long)s.disk_cache_hits, (unsigned long long)s.kernels_compiled);
    return ok ? 0 : 1;
  }
  if (!mode) mode = "";
  if (strcmp(mode, "missing") == 0) {
    LOOM_SCOPE { check_unavailable("LOOM_LIBCUDA=/nonexistent"); }
  } else if (strcmp(mode, "stub") == 0) {
    if (access(getenv("LOOM_LIBCUDA") ? getenv("LOOM_LIBCUDA") : "", R_OK) != 0)
      printf("SKIP: no stub libcuda at %s\n", getenv("LOOM_LIBCUDA"));
    else
      LOOM_SCOPE { check_unavailable("CUDA_ERROR_STUB_LIBRARY"); }
  } else if (strcmp(mode, "fake") == 0) {
    /* a fresh cache directory, so the first compile is a miss */
    char dir[] = "/tmp/loom-cuda-test-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    setenv("LOOM_CACHE_DIR", dir, 1);
    run_fake();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  } else {
    printf("SKIP: LOOM_CUDA_TEST_MODE is not missing, stub or fake\n");
  }
  return check_report();
}
