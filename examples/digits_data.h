/* Loads the UCI optical digits set (data/digits.csv.gz: 1797 rows of 64
 * pixels 0..16 and a label) for the examples: the first 1500 rows train,
 * the last 297 test, pixels scaled to [0, 1]. */
#ifndef LOOM_EXAMPLES_DIGITS_DATA_H
#define LOOM_EXAMPLES_DIGITS_DATA_H

#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#define DIGITS_ROWS 1797
#define DIGITS_TRAIN 1500
#define DIGITS_PIXELS 64

typedef struct digits {
  float pixels[DIGITS_ROWS][DIGITS_PIXELS];
  int64_t labels[DIGITS_ROWS];
} digits;

/* Returns 0 on success; prints why not otherwise. */
static int digits_load(const char *path, digits *d) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s (run from the repository root or pass --data)\n", path);
    return 1;
  }
  char line[1024];
  int row = 0;
  while (row < DIGITS_ROWS && gzgets(f, line, sizeof line)) {
    char *p = line;
    for (int c = 0; c <= DIGITS_PIXELS; c++) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p || v < 0 || v > 16) {
        fprintf(stderr, "%s: row %d, column %d is not a value in 0..16\n", path, row + 1, c + 1);
        gzclose(f);
        return 1;
      }
      if (c < DIGITS_PIXELS)
        d->pixels[row][c] = (float)v / 16.0f;
      else
        d->labels[row] = v;
      p = end + (*end == ',');
    }
    row++;
  }
  gzclose(f);
  if (row != DIGITS_ROWS) {
    fprintf(stderr, "%s: %d rows, expected %d\n", path, row, DIGITS_ROWS);
    return 1;
  }
  return 0;
}

#endif
