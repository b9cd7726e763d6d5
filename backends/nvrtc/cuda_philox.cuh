/*
 * Philox 4x32-10 of the generated CUDA C (LK_RAND, ir/kernel.h): counter
 * block (lo32(c), hi32(c), stream, 0), key (k0, k1); F32: (x0 >> 8) * 2^-24;
 * F64: ((x0 >> 5) * 2^26 + (x1 >> 6)) * 2^-53. The build appends this file to
 * cuda_prelude.cuh (lm_cuda_prelude_text), which defines LM_DEV (the
 * functions' qualifiers) and lm_mulhi (__umulhi).
 *
 * Written in the common subset of C and C++, so that tests/test_nvrtc.c
 * compiles this very file as C on the host (LM_DEV "static inline", lm_mulhi
 * one 64-bit product) and checks it bit for bit against base/philox.h, the
 * reference; its constants are that file's (the test includes both, so a
 * constant that differs is a redefinition it fails to compile).
 */
#ifndef LM_CUDA_PRELUDE
#include "cuda_prelude.cuh"
#endif

#define LM_PHILOX_M0 0xD2511F53u
#define LM_PHILOX_M1 0xCD9E8D57u
#define LM_PHILOX_W0 0x9E3779B9u
#define LM_PHILOX_W1 0xBB67AE85u

LM_DEV void lm_philox_block(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3,
                            unsigned int k0, unsigned int k1, unsigned int out[4]) {
  for (int lm_i = 0; lm_i < 10; lm_i++) {
    unsigned int hi0 = lm_mulhi(LM_PHILOX_M0, c0), lo0 = LM_PHILOX_M0 * c0;
    unsigned int hi1 = lm_mulhi(LM_PHILOX_M1, c2), lo1 = LM_PHILOX_M1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += LM_PHILOX_W0;
    k1 += LM_PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

LM_DEV float lm_philox_f32(unsigned int k0, unsigned int k1, unsigned long long counter,
                           unsigned int stream) {
  unsigned int x[4];
  lm_philox_block((unsigned int)counter, (unsigned int)(counter >> 32), stream, 0u, k0, k1, x);
  return (float)(x[0] >> 8) * (1.0f / 16777216.0f);
}

LM_DEV double lm_philox_f64(unsigned int k0, unsigned int k1, unsigned long long counter,
                            unsigned int stream) {
  unsigned int x[4];
  lm_philox_block((unsigned int)counter, (unsigned int)(counter >> 32), stream, 0u, k0, k1, x);
  return ((double)(x[0] >> 5) * 67108864.0 + (double)(x[1] >> 6)) * (1.0 / 9007199254740992.0);
}
