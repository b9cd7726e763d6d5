/* export_digits: the trained digits CNN as a standalone shared library.
 *
 *   ./train_digits --model cnn --save build/digits      (writes cnn.safetensors)
 *   ./export_digits [--weights build/digits/cnn.safetensors] [--out build/digits]
 *                   [--name digits] [--data data/digits.csv.gz]
 *
 * Loads the weights into the same model, records inference on a placeholder
 * image (normalization, the CNN in eval mode on 9 shifted copies of the
 * image, their averaged softmax and the predicted class), compiles it once into a program, and
 * exports the program as <out>/lib<name>.so + <name>.h. It also writes the test split as
 * <out>/digits_test.bin (raw floats and labels) for examples/standalone/
 * use_digits.c, which links only the library, and saves the program as
 * <out>/<name>.loom for `loom export`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits_data.h"
#include "digits_models.h"
#include "loom.h"

/* The test rows: "DIGT", int32 count, count x 64 floats in [0, 1], count
 * label bytes. */
static int write_test_split(const digits *d, const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  int32_t count = DIGITS_ROWS - DIGITS_TRAIN;
  fwrite("DIGT", 1, 4, f);
  fwrite(&count, sizeof count, 1, f);
  fwrite(d->pixels[DIGITS_TRAIN], sizeof(float) * DIGITS_PIXELS, (size_t)count, f);
  for (int i = DIGITS_TRAIN; i < DIGITS_ROWS; i++) fputc((int)d->labels[i], f);
  return fclose(f) == 0 ? 0 : 1;
}

/* Inference on one [1, 1, 8, 8] image of pixels in [0, 1], as train_digits
 * evaluates (predict: normalization, the CNN in eval mode on 9 shifted
 * copies, their softmax averaged): class probabilities [1, 10] and the
 * predicted class [1]. */
static loom_program *compile_inference(const model *m) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    LOOM_NO_GRAD {
      loom_tensor *image = loom_input("image", LOOM_SHAPE(1, 1, 8, 8), LOOM_F32, LOOM_CPU);
      loom_tensor *probs = predict(m, image);
      loom_tensor *outs[] = {probs, loom_argmax(probs, 1, false)};
      p = loom_compile(outs, 2, &image, 1);
    }
  }
  return p;
}

/* The program's accuracy on the test split, through loom_program_run. */
static double program_accuracy(const loom_program *p, const digits *d) {
  int correct = 0;
  for (int i = DIGITS_TRAIN; i < DIGITS_ROWS; i++) {
    LOOM_SCOPE {
      loom_tensor *x = loom_from_data(d->pixels[i], LOOM_SHAPE(1, 1, 8, 8), LOOM_F32, LOOM_CPU);
      loom_tensor *out[2];
      if (loom_program_run(p, &x, out) == LOOM_OK) correct += loom_item(out[1]) == d->labels[i];
    }
  }
  return (double)correct / (DIGITS_ROWS - DIGITS_TRAIN);
}

int main(int argc, char **argv) {
  const char *weights = "build/digits/cnn.safetensors", *out = "build/digits", *name = "digits",
             *data = "data/digits.csv.gz";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--weights"))
      weights = argv[i + 1];
    else if (!strcmp(argv[i], "--out"))
      out = argv[i + 1];
    else if (!strcmp(argv[i], "--name"))
      name = argv[i + 1];
    else if (!strcmp(argv[i], "--data"))
      data = argv[i + 1];
  }
  static digits d;
  if (digits_load(data, &d)) return 1;
  model m;
  build(&m, true, loom_key_new(7));
  loom_tensor *stats = loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  loom_params_add_buffer(m.ps, "input_stats", stats);
  loom_free(stats);
  if (loom_params_load(m.ps, weights) != LOOM_OK) {
    fprintf(stderr, "%s\n(train and save it first: ./train_digits --model cnn --save %s)\n",
            loom_last_error(), out);
    return 1;
  }
  loom_program *p = compile_inference(&m);
  if (!p) {
    fprintf(stderr, "compiling the CNN failed: %s\n", loom_last_error());
    return 1;
  }
  printf("export_digits: the CNN as a program, test accuracy %.2f%% (loom_program_run)\n",
         100 * program_accuracy(p, &d));
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.loom", out, name);
  int rc = loom_program_save(p, path) == LOOM_OK ? 0 : 1;
  if (!rc && loom_program_export(p, out, name) == LOOM_OK)
    printf("export_digits: wrote %s/lib%s.so, %s/%s.h and %s\n", out, name, out, name, path);
  else
    rc = 1;
  snprintf(path, sizeof path, "%s/digits_test.bin", out);
  rc |= write_test_split(&d, path);
  if (rc) fprintf(stderr, "export_digits: %s\n", loom_last_error() ? loom_last_error() : path);
  loom_program_free(p);
  loom_params_free(m.ps);
  return rc;
}
