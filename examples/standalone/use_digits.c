/* use_digits: a plain C program that uses the exported digits CNN. It
 * includes only digits.h and links only libdigits.so (no loom, no LLVM):
 *
 *   cc -O2 use_digits.c -I build/digits -L build/digits -ldigits \
 *      -Wl,-rpath,build/digits -o use_digits
 *   ./use_digits build/digits/digits_test.bin
 *
 * It classifies every image of the test split (written by export_digits)
 * one call at a time and prints the accuracy and the time per call. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digits.h"

_Static_assert(DIGITS_INPUT0_NUMEL == 64, "the model takes one 8x8 image");
_Static_assert(DIGITS_OUTPUT0_NUMEL == 10, "the model gives 10 class probabilities");

typedef struct split {
  int32_t count;
  float (*pixels)[64];
  unsigned char *labels;
} split;

static int read_split(const char *path, split *s) {
  FILE *f = fopen(path, "rb");
  char magic[4];
  if (!f || fread(magic, 1, 4, f) != 4 || memcmp(magic, "DIGT", 4) ||
      fread(&s->count, sizeof s->count, 1, f) != 1 || s->count <= 0 || s->count > 100000) {
    fprintf(stderr, "%s is not a test split written by export_digits\n", path);
    if (f) fclose(f);
    return 1;
  }
  s->pixels = malloc(sizeof *s->pixels * (size_t)s->count);
  s->labels = malloc((size_t)s->count);
  int ok = s->pixels && s->labels &&
           fread(s->pixels, sizeof *s->pixels, (size_t)s->count, f) == (size_t)s->count &&
           fread(s->labels, 1, (size_t)s->count, f) == (size_t)s->count;
  fclose(f);
  if (!ok) fprintf(stderr, "%s is truncated\n", path);
  return ok ? 0 : 1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  split s = {0};
  if (read_split(argc > 1 ? argv[1] : "build/digits/digits_test.bin", &s)) return 1;
  int correct = 0;
  double start = now();
  for (int i = 0; i < s.count; i++) {
    float probs[10];
    int64_t label;
    const void *inputs[] = {s.pixels[i]};
    void *outputs[] = {probs, &label};
    int status = digits_run(inputs, outputs);
    if (status != DIGITS_OK) {
      fprintf(stderr, "digits_run: %s\n", digits_status_string(status));
      return 1;
    }
    correct += label == s.labels[i];
  }
  double seconds = now() - start;
  printf("use_digits: libdigits.so classified %d test images: accuracy %.2f%%, %.1f us per call\n",
         s.count, 100.0 * correct / s.count, 1e6 * seconds / s.count);
  free(s.pixels);
  free(s.labels);
  return 0;
}
