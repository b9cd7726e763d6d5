/* libFuzzer target: the program-file loader (loom_program_load) on any bytes.
 *
 * The bytes are a program's text file; beside it lies a fixed weights file
 * holding "w0" (f32 [64,10]) and "w1" (f32 [10]), the weights of the seed
 * programs. Whatever the text, the load must not crash or leak and must
 * either return a compiled program or NULL with a status and a message.
 * (Loaded programs are not run: a mutated shape could ask for hours of work.)
 * Seeds: tests/fuzz/corpus/program. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loom.h"

static char dir[64], text_path[96];

/* The folder with the weights file, made once per process. */
static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/loom-fuzz-program-%d", (int)getpid());
  mkdir(dir, 0700);
  snprintf(text_path, sizeof text_path, "%s/p.loom", dir);
  char weights_path[128];
  snprintf(weights_path, sizeof weights_path, "%s.safetensors", text_path);
  float w0[640], w1[10];
  for (int i = 0; i < 640; i++) w0[i] = (float)(i % 7) * 0.125f - 0.375f;
  for (int i = 0; i < 10; i++) w1[i] = (float)i * 0.1f;
  loom_params *ps = loom_params_new();
  loom_tensor *a = loom_from_data(w0, LOOM_SHAPE(64, 10), LOOM_F32, LOOM_CPU);
  loom_tensor *b = loom_from_data(w1, LOOM_SHAPE(10), LOOM_F32, LOOM_CPU);
  if (loom_params_add_buffer(ps, "w0", a) || loom_params_add_buffer(ps, "w1", b) ||
      loom_params_save(ps, weights_path)) {
    fprintf(stderr, "fuzz_program: writing %s: %s\n", weights_path, loom_last_error());
    abort();
  }
  loom_free(a);
  loom_free(b);
  loom_params_free(ps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) setup();
  FILE *f = fopen(text_path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
  loom_clear_error();
  loom_program *p = loom_program_load(text_path);
  if (!p) {
    if (loom_last_status() == LOOM_OK || !loom_last_error()) abort(); /* refused: say why */
  } else {
    loom_program_free(p);
  }
  loom_clear_error();
  return 0;
}
