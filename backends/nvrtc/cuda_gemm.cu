/*
 * The GEMM kernel of LM_STEP_GEMM on CUDA: C = A @ B for every batch index
 * (the grid's z; the batch dims collapsed to at most two, each with its
 * strides), C contiguous [M, N] per batch, A [M, K] (or its transpose, stored
 * [K, M]) with leading dimension lda, B [K, N] (or [N, K]) with ldb: the
 * layouts passes/plan.c gives BLAS. cuda_gemm.c writes one kernel after this
 * text (LM_GEMM_KERNEL, below); a GEMM with its epilogue fused
 * (cuda_codegen.c) calls lm_gemm_tile and computes its epilogue at each sum
 * instead of storing it. Compiled alone with -DLM_GEMM_EVERY_KERNEL, it makes
 * every kernel loom may ask for. Uses nothing of the prelude.
 *
 * Tiled through shared memory: a block of 256 threads (LM_CUDA_BLOCK)
 * computes a 64 x 64 tile of C, stepping over K 16 at a time; thread (ty, tx)
 * of the 16 x 16 grid owns rows ty + 16 i and columns tx + 16 j (i, j < 4),
 * so a warp reads a row of the B tile without bank conflicts and one value of
 * the A tile as a broadcast. Tiles load so that neighbouring threads read
 * neighbouring addresses of A and B whichever way they are stored. Products
 * accumulate with fma (explicit: NVRTC runs with --fmad=false), in K order,
 * in blocks of 256 terms whose sums are added into a second accumulator: a
 * product passes through at most 256 + K / 256 additions rather than K, so
 * the error of a long sum does not grow with K the way one accumulator's does
 * (16 more registers; one add per output per 256 fmas). OpenBLAS promises no
 * order either; results match the CPU's to rounding.
 */

/* The parameters after C's (or the fused epilogue's slots): the operands,
 * the sizes, and batch index z's offsets: A and B of batch z start at
 * a + (z / inner) * sa0 + (z % inner) * sa1 and likewise b (elements), C at
 * c + z * M * N. runtime/cuda/cuda_exec.c passes them, 8 bytes each. */
#define LM_GEMM_PARAMS(T)                                                                          \
  const T *a, const T *b, long long M, long long N, long long K, long long lda, long long ldb,     \
      long long z0, long long inner, long long sa0, long long sa1, long long sb0, long long sb1
#define LM_GEMM_ARGS a, b, M, N, K, lda, ldb, z0, inner, sa0, sa1, sb0, sb1

/* Where a thread's sums lie: acc[i][j] is C's element (row0 + ty + 16 i,
 * col0 + tx + 16 j) of batch index z. */
struct lm_gemm_place {
  long long z, row0, col0;
  int ty, tx;
};

/* The block's tile of batch index z0 + blockIdx.z: this thread's 4 x 4 sums
 * into acc. A_TRANS: A stored [K, M]; B_TRANS: B stored [N, K]. */
template <typename T, bool A_TRANS, bool B_TRANS>
__device__ __forceinline__ lm_gemm_place lm_gemm_tile(LM_GEMM_PARAMS(T), T acc[4][4]) {
  __shared__ T As[16][64 + 1];
  __shared__ T Bs[16][64 + 1];
  const long long lm_z = z0 + blockIdx.z, lm_zo = lm_z / inner, lm_zi = lm_z % inner;
  a += lm_zo * sa0 + lm_zi * sa1;
  b += lm_zo * sb0 + lm_zi * sb1;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const long long row0 = (long long)blockIdx.y * 64, col0 = (long long)blockIdx.x * 64;
  T blocks[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = blocks[i][j] = 0;
  for (long long k0 = 0; k0 < K; k0 += 16) {
    for (int e = tid; e < 1024; e += 256) {
      /* which tile coordinate varies fastest with e: the one contiguous in memory */
      const int r = A_TRANS ? e % 64 : e / 16, kk = A_TRANS ? e / 64 : e % 16;
      const long long gr = row0 + r, gk = k0 + kk;
      As[kk][r] = gr < M && gk < K ? a[A_TRANS ? gk * lda + gr : gr * lda + gk] : (T)0;
      const int cc = B_TRANS ? e / 16 : e % 64, kb = B_TRANS ? e % 16 : e / 64;
      const long long gc = col0 + cc, gkb = k0 + kb;
      Bs[kb][cc] = gc < N && gkb < K ? b[B_TRANS ? gc * ldb + gkb : gkb * ldb + gc] : (T)0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; kk++) {
      T av[4], bv[4];
      for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
      for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
    if ((k0 & 255) == 240) { // the end of a block of 256 terms
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) blocks[i][j] += acc[i][j], acc[i][j] = 0;
    }
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] += blocks[i][j];
  return lm_gemm_place{lm_z, row0, col0, ty, tx};
}

/* The tile, stored into C. */
template <typename T, bool A_TRANS, bool B_TRANS>
__device__ __forceinline__ void lm_gemm(T *c, LM_GEMM_PARAMS(T)) {
  T acc[4][4];
  const lm_gemm_place at = lm_gemm_tile<T, A_TRANS, B_TRANS>(LM_GEMM_ARGS, acc);
  c += at.z * M * N;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      const long long r = at.row0 + at.ty + 16 * i, cl = at.col0 + at.tx + 16 * j;
      if (r < M && cl < N) c[r * N + cl] = acc[i][j];
    }
}

/* The kernel `name` ("lm_gemm_<dtype>_<n|t><n|t>"): launched with 256
 * threads and a grid of (ceil(N / 64), ceil(M / 64), batch indices). */
#define LM_GEMM_KERNEL(name, T, A_TRANS, B_TRANS)                                                  \
  extern "C" __global__ void __launch_bounds__(256) name(T *c, LM_GEMM_PARAMS(T)) {                \
    lm_gemm<T, A_TRANS, B_TRANS>(c, LM_GEMM_ARGS);                                                 \
  }

#ifdef LM_GEMM_EVERY_KERNEL
LM_GEMM_KERNEL(lm_gemm_f32_nn, float, false, false)
LM_GEMM_KERNEL(lm_gemm_f32_tn, float, true, false)
LM_GEMM_KERNEL(lm_gemm_f32_nt, float, false, true)
LM_GEMM_KERNEL(lm_gemm_f32_tt, float, true, true)
LM_GEMM_KERNEL(lm_gemm_f64_nn, double, false, false)
LM_GEMM_KERNEL(lm_gemm_f64_tn, double, true, false)
LM_GEMM_KERNEL(lm_gemm_f64_nt, double, false, true)
LM_GEMM_KERNEL(lm_gemm_f64_tt, double, true, true)
#endif
