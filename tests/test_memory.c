/* Memory planning: intermediates are freed after their last reader and their
 * memory reused, never while live. Run with LOOM_POISON=1 (CMake sets it):
 * freed and fresh memory is filled with garbage, so any overlap or late read
 * would change the results. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "loom.h"
#include "test_device.h"

#define N 64

/* relu(relu(x @ w1) @ w2) @ w3 with every intermediate materialized: the
 * matmul outputs, and the relus (BLAS operands). */
static void mlp_host(const float *x, const float *w, float *out) {
  float a[N * N], b[N * N];
  const float *in = x;
  for (int layer = 0; layer < 3; layer++) {
    float *dst = layer == 2 ? out : layer == 0 ? a : b;
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) {
        double s = 0;
        for (int k = 0; k < N; k++) s += (double)in[i * N + k] * w[layer * N * N + k * N + j];
        dst[i * N + j] = layer < 2 && s < 0 ? 0.0f : (float)s;
      }
    in = dst;
  }
}

static void test_chain_values(void) {
  static float x[N * N], w[3 * N * N], want[N * N], got[N * N];
  uint64_t seed = 12345;
  for (int i = 0; i < N * N; i++)
    x[i] = (float)((seed = seed * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
  for (int i = 0; i < 3 * N * N; i++)
    w[i] = (float)((seed = seed * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
  mlp_host(x, w, want);
  LOOM_SCOPE {
    loom_tensor *h = loom_from_data(x, LOOM_SHAPE(N, N), LOOM_F32, LOOM_CPU);
    for (int layer = 0; layer < 3; layer++) {
      loom_tensor *wl = loom_from_data(w + layer * N * N, LOOM_SHAPE(N, N), LOOM_F32, LOOM_CPU);
      h = loom_matmul(h, wl);
      if (layer < 2) h = loom_relu(h);
    }
    loom_reset_stats();
    CHECK_OK(loom_copy_to_host(h, got, sizeof got));
    loom_stats s = loom_get_stats();
    /* three matmuls and two relus, each N*N floats: with liveness at most
     * three are alive at once (two operands and an output), besides loom's
     * GEMM's packed panels (each thread's: B's and A's, each N x N rounded
     * up to whole slivers of at most 32) */
    uint64_t panels = (uint64_t)loom_num_threads() * (2 * N + 64) * N * sizeof(float);
    CHECK_MSG(s.bytes_peak <= (uint64_t)(3 * N * N * sizeof(float)) + panels + s.bytes_live,
              "peak %llu bytes", (unsigned long long)s.bytes_peak);
  }
  double worst = 0;
  for (int i = 0; i < N * N; i++) worst = fmax(worst, fabs(got[i] - want[i]) / (1 + fabs(want[i])));
  CHECK_MSG(worst < 1e-4, "chain differs from the host computation by %g", worst);
}

/* Several targets and intermediates of mixed sizes in one program. */
static void test_mixed_sizes(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_arange(0, 4096, 1, LOOM_F32, LOOM_CPU);
    loom_tensor *m = loom_reshape(x, LOOM_SHAPE(64, 64));
    loom_tensor *s = loom_sum(m, (int[]){1}, 1, true);        /* [64,1] */
    loom_tensor *t = loom_matmul(m, loom_transpose(m, 0, 1)); /* [64,64] */
    loom_tensor *u = loom_add(loom_div(t, loom_add_s(s, 1)), loom_sum_all(t));
    loom_tensor *outs[2] = {u, s};
    CHECK_OK(loom_eval(outs, 2));
    float row0[64];
    double total = 0;
    float tt[64 * 64], ss[64];
    for (int i = 0; i < 64; i++) {
      double acc = 0;
      for (int k = 0; k < 64; k++) acc += i * 64 + k;
      ss[i] = (float)acc;
    }
    for (int i = 0; i < 64; i++)
      for (int j = 0; j < 64; j++) {
        double acc = 0;
        for (int k = 0; k < 64; k++) acc += (double)(i * 64 + k) * (j * 64 + k);
        tt[i * 64 + j] = (float)acc;
        total += acc;
      }
    CHECK_OK(loom_copy_to_host(loom_slice(u, 0, 0, 1, 1), row0, sizeof row0));
    for (int j = 0; j < 64; j++) {
      double want = tt[j] / (ss[0] + 1) + total;
      CHECK_MSG(fabs(row0[j] - want) <= 1e-5 * fabs(want), "u[0,%d] = %g, want %g", j, row0[j],
                want);
    }
  }
}

/* ------------------------------------------------------------ updates in place */

/* On the test device (LOOM_TEST_DEVICE=cuda: memory_cuda_emulated, and on a
 * GPU, where the kernel stores only the new row). */

enum { B = 2, H = 3, L = 9, E = 4 };

static uint64_t in_place_updates(void) { return loom_get_stats().in_place_updates; }

/* cache[.., t, ..] = t + 1, as a decoder's KV cache takes its position's row:
 * loom_assign(cache, where(here, new, cache)) (kept_first: where(elsewhere,
 * cache, new)). `old` (may be NULL) gets the cache's value before the update,
 * unrealized. */
static loom_tensor *write_row(loom_tensor *cache, int64_t t, bool kept_first, loom_tensor **old) {
  loom_tensor *pos = loom_from_data(&t, LOOM_SHAPE0, LOOM_I64, test_device());
  loom_tensor *row = loom_full(LOOM_SHAPE(B, H, 1, E), (double)(t + 1), LOOM_F32, test_device());
  loom_tensor *at =
      loom_reshape(loom_arange(0, L, 1, LOOM_I64, test_device()), LOOM_SHAPE(1, 1, L, 1));
  loom_tensor *updated = kept_first ? loom_where(loom_ne(at, pos), cache, row)
                                    : loom_where(loom_eq(at, pos), row, cache);
  if (old) *old = loom_detach(cache);
  CHECK_OK(loom_assign(cache, updated));
  return updated;
}

static void check_rows(loom_tensor *cache, int written) {
  float got[B * H * L * E];
  CHECK_OK(loom_copy_to_host(cache, got, sizeof got));
  for (int i = 0; i < B * H * L * E; i++) {
    int t = i / E % L;
    CHECK_NEAR(got[i], t < written ? t + 1 : 0, 0);
  }
}

static void test_update_in_place(void) {
  loom_tensor *cache = loom_zeros(LOOM_SHAPE(B, H, L, E), LOOM_F32, test_device());
  CHECK_OK(loom_realize(cache));
  for (int t = 0; t < L; t++) {
    uint64_t before = in_place_updates();
    LOOM_SCOPE {
      loom_tensor *updated = write_row(cache, t, t % 2 == 1, NULL);
      /* read in the same program, after the update */
      double want = B * H * E * (t + 1) * (t + 2) / 2.0;
      CHECK_NEAR(loom_item(loom_sum(updated, NULL, 0, false)), want, 1e-3);
    }
    CHECK_EQ_INT(in_place_updates() - before, 1);
  }
  check_rows(cache, L);
  loom_free(cache);
}

/* Another reference to the old value: it keeps its values, and the update
 * gets a copy. */
static void test_update_not_in_place(void) {
  loom_tensor *cache = loom_zeros(LOOM_SHAPE(B, H, L, E), LOOM_F32, test_device());
  CHECK_OK(loom_realize(cache));
  loom_tensor *old = NULL;
  uint64_t before = in_place_updates();
  LOOM_SCOPE {
    CHECK_OK(loom_realize(write_row(cache, 0, false, &old)));
    loom_keep(old);
  }
  CHECK_EQ_INT(in_place_updates() - before, 0);
  check_rows(old, 0);
  check_rows(cache, 1);
  LOOM_SCOPE { /* the old value has its own buffer now; the handle on row 0's update is gone */
    CHECK_OK(loom_realize(write_row(cache, 1, false, NULL)));
  }
  CHECK_EQ_INT(in_place_updates() - before, 1);
  check_rows(old, 0);
  check_rows(cache, 2);
  loom_free(old);
  loom_free(cache);
}

/* Two rows written before one realization; and a cache that requires grad
 * (its history must keep the old value): both right, the latter copied. */
static void test_update_chains(void) {
  loom_tensor *cache = loom_zeros(LOOM_SHAPE(B, H, L, E), LOOM_F32, test_device());
  CHECK_OK(loom_realize(cache));
  LOOM_SCOPE {
    write_row(cache, 0, false, NULL);
    write_row(cache, 1, true, NULL);
    CHECK_OK(loom_realize(cache));
  }
  check_rows(cache, 2);
  loom_free(cache);
  cache = loom_zeros(LOOM_SHAPE(B, H, L, E), LOOM_F32, test_device());
  CHECK_OK(loom_realize(cache));
  CHECK_OK(loom_set_requires_grad(cache, true));
  uint64_t before = in_place_updates();
  LOOM_SCOPE { CHECK_OK(loom_realize(write_row(cache, 0, false, NULL))); }
  CHECK_EQ_INT(in_place_updates() - before, 0);
  check_rows(cache, 1);
  loom_free(cache);
}

int main(void) {
  CHECK_MSG(getenv("LOOM_POISON") != NULL, "run with LOOM_POISON=1 (ctest sets it)");
  test_chain_values();
  test_mixed_sizes();
  test_update_in_place();
  test_update_not_in_place();
  test_update_chains();
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
