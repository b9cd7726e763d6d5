/* loom_fprint writes what PyTorch prints for the same tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "ref.h"

/* Prints t to a string (trailing newline removed); caller frees. */
static char *print_str(loom_tensor *t) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  loom_status st = loom_fprint(f, t);
  fclose(f);
  CHECK_MSG(st == LOOM_OK, "loom_fprint: %s", loom_status_name(st));
  if (len && buf[len - 1] == '\n') buf[len - 1] = 0;
  return buf;
}

static void expect(loom_tensor *t, const char *want, int line) {
  char *got = print_str(t);
  if (strcmp(got, want) == 0)
    check_passes++;
  else
    check_fail_at(__FILE__, line, "print:\n--- got:\n%s\n--- expected (torch):\n%s", got, want);
  free(got);
  loom_free(t);
}

static loom_tensor *mk(loom_shape s, loom_dtype d, const double *v) {
  ref_t *r = ref_from_values(s, d, v);
  loom_tensor *t = ref_to_loom(r);
  ref_free(r);
  return t;
}
#define V(...) ((const double[]){__VA_ARGS__})
#define EXPECT(t, want) expect((t), (want), __LINE__)

int main(void) {
  /* floats: integral values print as "1.", others with 4 decimals, right-aligned */
  EXPECT(mk(LOOM_SHAPE(3), LOOM_F32, V(1, 2, 3)), "tensor([1., 2., 3.])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(0.5, 1.25)), "tensor([0.5000, 1.2500])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(-1, 2)), "tensor([-1.,  2.])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(0.5, -1.25)), "tensor([ 0.5000, -1.2500])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(100.5, 1)), "tensor([100.5000,   1.0000])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(1.0 / 3.0, 2)), "tensor([0.3333, 2.0000])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(1, 1000)), "tensor([   1., 1000.])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(100, 200)), "tensor([100., 200.])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(1e-5, 1)), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(1e9, 1)), "tensor([1.0000e+09, 1.0000e+00])");
  EXPECT(mk(LOOM_SHAPE(3), LOOM_F32, V(1, NAN, INFINITY)), "tensor([1., nan, inf])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F32, V(-INFINITY, 0.5)), "tensor([  -inf, 0.5000])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F64, V(1, 2)), "tensor([1., 2.], dtype=torch.float64)");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_F64, V(0.25, 2)), "tensor([0.2500, 2.0000], dtype=torch.float64)");
  /* 0-d */
  EXPECT(mk(LOOM_SHAPE0, LOOM_F32, V(3)), "tensor(3.)");
  EXPECT(mk(LOOM_SHAPE0, LOOM_F32, V(0.5)), "tensor(0.5000)");
  EXPECT(mk(LOOM_SHAPE0, LOOM_I64, V(7)), "tensor(7)");
  LOOM_SCOPE { /* I64 beyond 2^53, exactly (through a double: ...808 and ...000) */
    int64_t big[2] = {INT64_MAX, INT64_C(9007199254740993)}, got = 0;
    loom_tensor *t = loom_from_data(big, LOOM_SHAPE(2), LOOM_I64, LOOM_CPU);
    char *text = print_str(t);
    CHECK_STR_EQ(text, "tensor([9223372036854775807,    9007199254740993])");
    free(text);
    CHECK_OK(loom_item_i64(loom_slice(t, 0, 0, 1, 1), &got));
    CHECK_EQ_INT(got, INT64_MAX);
    CHECK_OK(loom_item_i64(loom_reshape(loom_slice(t, 0, 1, 2, 1), LOOM_SHAPE0), &got));
    CHECK_EQ_INT(got, INT64_C(9007199254740993));
    int32_t small = -7;
    CHECK_OK(loom_item_i64(loom_from_data(&small, LOOM_SHAPE(1), LOOM_I32, LOOM_CPU), &got));
    CHECK_EQ_INT(got, -7);
    CHECK_RC(loom_item_i64(loom_ones(LOOM_SHAPE(1), LOOM_F32, LOOM_CPU), &got), LOOM_ERR_DTYPE);
    CHECK_RC(loom_item_i64(t, &got), LOOM_ERR_SHAPE);
    CHECK_RC(loom_item_i64(t, NULL), LOOM_ERR_NULL);
  }
  EXPECT(mk(LOOM_SHAPE0, LOOM_I32, V(-7)), "tensor(-7, dtype=torch.int32)");
  EXPECT(mk(LOOM_SHAPE0, LOOM_BOOL, V(1)), "tensor(True)");
  /* ints (int64 is the default), aligned */
  EXPECT(mk(LOOM_SHAPE(3), LOOM_I64, V(1, 2, 3)), "tensor([1, 2, 3])");
  EXPECT(mk(LOOM_SHAPE(3), LOOM_I32, V(1, 2, 3)), "tensor([1, 2, 3], dtype=torch.int32)");
  EXPECT(mk(LOOM_SHAPE(3), LOOM_I64, V(1, 10, -100)), "tensor([   1,   10, -100])");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_U8, V(1, 255)), "tensor([  1, 255], dtype=torch.uint8)");
  EXPECT(mk(LOOM_SHAPE(5), LOOM_I8, V(127, -128, 1, -1, 100)),
         "tensor([ 127, -128,    1,   -1,  100], dtype=torch.int8)");
  EXPECT(mk(LOOM_SHAPE(3), LOOM_I16, V(-32768, 1, 300)),
         "tensor([-32768,      1,    300], dtype=torch.int16)");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_U16, V(65535, 7)), "tensor([65535,     7], dtype=torch.uint16)");
  EXPECT(mk(LOOM_SHAPE(2), LOOM_U32, V(4294967295.0, 7)),
         "tensor([4294967295,          7], dtype=torch.uint32)");
  /* bools */
  EXPECT(mk(LOOM_SHAPE(2), LOOM_BOOL, V(1, 0)), "tensor([ True, False])");
  EXPECT(mk(LOOM_SHAPE(2, 2), LOOM_BOOL, V(1, 0, 0, 1)),
         "tensor([[ True, False],\n        [False,  True]])");
  /* 2-D and 3-D */
  EXPECT(mk(LOOM_SHAPE(2, 2), LOOM_F32, V(1, 2, 3, 4)), "tensor([[1., 2.],\n        [3., 4.]])");
  EXPECT(mk(LOOM_SHAPE(2, 2), LOOM_I64, V(1, 2, 3, 40)), "tensor([[ 1,  2],\n        [ 3, 40]])");
  EXPECT(mk(LOOM_SHAPE(2, 3), LOOM_F32, V(0.5, 1, 1.5, -2, 2.5, 3)),
         "tensor([[ 0.5000,  1.0000,  1.5000],\n        [-2.0000,  2.5000,  3.0000]])");
  EXPECT(loom_reshape(TK(loom_arange(0, 8, 1, LOOM_I64, LOOM_CPU)), LOOM_SHAPE(2, 2, 2)),
         "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])");
  EXPECT(mk(LOOM_SHAPE(1, 3), LOOM_I32, V(4, 5, 6)), "tensor([[4, 5, 6]], dtype=torch.int32)");
  /* empty */
  EXPECT(loom_zeros(LOOM_SHAPE(0), LOOM_F32, LOOM_CPU), "tensor([])");
  EXPECT(loom_zeros(LOOM_SHAPE(0), LOOM_I64, LOOM_CPU), "tensor([], dtype=torch.int64)");
  EXPECT(loom_zeros(LOOM_SHAPE(0, 3), LOOM_F32, LOOM_CPU), "tensor([], size=(0, 3))");
  /* long rows wrap at 80 columns; more than 1000 elements are summarized */
  EXPECT(loom_arange(0, 30, 1, LOOM_I64, LOOM_CPU),
         "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
         "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
  EXPECT(loom_arange(0, 2000, 1, LOOM_I64, LOOM_CPU),
         "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  /* views and lazy results print their logical values */
  loom_tensor *m = TK(mk(LOOM_SHAPE(2, 2), LOOM_F32, V(1, 2, 3, 4)));
  EXPECT(loom_transpose(m, 0, 1), "tensor([[1., 3.],\n        [2., 4.]])");
  EXPECT(loom_mul_s(m, 0.5), "tensor([[0.5000, 1.0000],\n        [1.5000, 2.0000]])");
  EXPECT(loom_gt_s(m, 2), "tensor([[False, False],\n        [ True,  True]])");
  EXPECT(loom_sum_all(m), "tensor(10.)");
  /* loom_print goes to stdout */
  printf("loom_print: ");
  fflush(stdout);
  CHECK_OK(loom_print(m));
  fflush(stdout);
  ref_release_all();
  return check_report();
}
