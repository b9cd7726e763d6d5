/*
 * The GEMM kernel of LM_STEP_GEMM on CUDA: C = A @ B for every batch index
 * (the grid's z; the batch dims collapsed to at most two, each with its
 * strides), C contiguous [M, N] per batch, A [M, K] (or its transpose, stored
 * [K, M]) with leading dimension lda, B [K, N] (or [N, K]) with ldb: the
 * layouts passes/plan.c gives BLAS.
 *
 * Tiled through shared memory: a block of LM_CUDA_BLOCK threads computes a
 * 64 x 64 tile of C, stepping over K 16 at a time; thread (ty, tx) of the
 * 16 x 16 grid owns rows ty + 16 i and columns tx + 16 j (i, j < 4), so a
 * warp reads a row of the B tile without bank conflicts and one value of the
 * A tile as a broadcast. Tiles load so that neighbouring threads read
 * neighbouring addresses of A and B whichever way they are stored. Products
 * accumulate with fma (explicit: NVRTC runs with --fmad=false), in K order,
 * in blocks of 256 terms whose sums are added into a second accumulator: a
 * product passes through at most 256 + K / 256 additions rather than K, so
 * the error of a long sum does not grow with K the way one accumulator's does
 * (16 more registers; one add per output per 256 fmas). OpenBLAS promises no
 * order either; results match the CPU's to rounding.
 */
#include <stdio.h>
#include <stdlib.h>

#include "backends/nvrtc/nvrtc_backend.h"

/* After the signature: the tiles' loop leaving acc[i][j], the product at row
 * row0 + ty + 16 i, column col0 + tx + 16 j. */
static const char body_template[] =
    "  typedef %s T;\n"
    "  __shared__ T As[16][64 + 1];\n"
    "  __shared__ T Bs[16][64 + 1];\n"
    "  const long long lm_z = z0 + blockIdx.z, lm_zo = lm_z / inner, lm_zi = lm_z %% inner;\n"
    "  a += lm_zo * sa0 + lm_zi * sa1;\n"
    "  b += lm_zo * sb0 + lm_zi * sb1;\n"
    "  const int tid = threadIdx.x, tx = tid %% 16, ty = tid / 16;\n"
    "  const long long row0 = (long long)blockIdx.y * 64, col0 = (long long)blockIdx.x * 64;\n"
    "  T acc[4][4], blocks[4][4];\n"
    "  for (int i = 0; i < 4; i++)\n"
    "    for (int j = 0; j < 4; j++) acc[i][j] = blocks[i][j] = 0;\n"
    "  for (long long k0 = 0; k0 < K; k0 += 16) {\n"
    "    for (int e = tid; e < 1024; e += 256) {\n"
    "      const int r = %s, kk = %s;\n"
    "      const long long gr = row0 + r, gk = k0 + kk;\n"
    "      As[kk][r] = gr < M && gk < K ? a[%s] : (T)0;\n"
    "      const int cc = %s, kb = %s;\n"
    "      const long long gc = col0 + cc, gkb = k0 + kb;\n"
    "      Bs[kb][cc] = gc < N && gkb < K ? b[%s] : (T)0;\n"
    "    }\n"
    "    __syncthreads();\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < 16; kk++) {\n"
    "      T av[4], bv[4];\n"
    "      for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];\n"
    "      for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];\n"
    "      for (int i = 0; i < 4; i++)\n"
    "        for (int j = 0; j < 4; j++) acc[i][j] = fma(av[i], bv[j], acc[i][j]);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if ((k0 & 255) == 240) { // the end of a block of 256 terms\n"
    "      for (int i = 0; i < 4; i++)\n"
    "        for (int j = 0; j < 4; j++) blocks[i][j] += acc[i][j], acc[i][j] = 0;\n"
    "    }\n"
    "  }\n"
    "  for (int i = 0; i < 4; i++)\n"
    "    for (int j = 0; j < 4; j++) acc[i][j] += blocks[i][j];\n";

char *lm_cuda_gemm_body(loom_dtype dtype, bool a_trans, bool b_trans) {
  const char *t = lm_dtype_info_of(dtype)->cuda_type;
  /* Which tile coordinate varies fastest with e: the one contiguous in memory. */
  const char *ar = a_trans ? "e % 64" : "e / 16", *ak = a_trans ? "e / 64" : "e % 16";
  const char *aat = a_trans ? "gk * lda + gr" : "gr * lda + gk";
  const char *bc = b_trans ? "e / 16" : "e % 64", *bk = b_trans ? "e % 16" : "e / 64";
  const char *bat = b_trans ? "gc * ldb + gkb" : "gkb * ldb + gc";
  int n = snprintf(NULL, 0, body_template, t, ar, ak, aat, bc, bk, bat);
  char *s = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (s) snprintf(s, (size_t)n + 1, body_template, t, ar, ak, aat, bc, bk, bat);
  return s;
}

static const char gemm_template[] =
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "%s(%s *c, const %s *a, const %s *b, long long M, long long N, long long K,\n"
    "   long long lda, long long ldb, " LM_CUDA_GEMM_BATCH_PARAMS ") {\n"
    "%s"
    "  c += lm_z * M * N;\n"
    "  for (int i = 0; i < 4; i++)\n"
    "    for (int j = 0; j < 4; j++) {\n"
    "      const long long r = row0 + ty + 16 * i, cl = col0 + tx + 16 * j;\n"
    "      if (r < M && cl < N) c[r * N + cl] = acc[i][j];\n"
    "    }\n"
    "}\n";

loom_status lm_cuda_gemm_source(loom_dtype dtype, bool a_trans, bool b_trans, char **source,
                                char name[40], char *err, size_t errlen) {
  *source = NULL;
  if (dtype != LOOM_F32 && dtype != LOOM_F64) {
    snprintf(err, errlen, "CUDA GEMM: dtype %s is not F32 or F64", loom_dtype_name(dtype));
    return LOOM_ERR_DTYPE;
  }
  const char *t = lm_dtype_info_of(dtype)->cuda_type;
  snprintf(name, 40, "lm_gemm_%s_%c%c", loom_dtype_name(dtype), a_trans ? 't' : 'n',
           b_trans ? 't' : 'n');
  char *body = lm_cuda_gemm_body(dtype, a_trans, b_trans);
  int n = body ? snprintf(NULL, 0, gemm_template, name, t, t, t, body) : -1;
  char *s = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (!s) {
    free(body);
    snprintf(err, errlen, "CUDA GEMM %s: out of memory", name);
    return LOOM_ERR_OOM;
  }
  snprintf(s, (size_t)n + 1, gemm_template, name, t, t, t, body);
  free(body);
  *source = s;
  return LOOM_OK;
}
