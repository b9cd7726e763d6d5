/* Runs files through a fuzz target's LLVMFuzzerTestOneInput without
 * libFuzzer: the seed corpus and the inputs that once crashed it become an
 * ordinary test (ctest's fuzz_<name>_replay, in the sanitizer build too).
 *   replay_<name> DIR|FILE...   (README* and dot files are skipped) */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "replay: cannot open %s\n", path), 1;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
  size_t got = data ? fread(data, 1, (size_t)(size > 0 ? size : 0), f) : 0;
  fclose(f);
  if (!data || got != (size_t)(size > 0 ? size : 0)) return free(data), 1;
  LLVMFuzzerTestOneInput(data, got);
  free(data);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of a directory, in name order (the run is the same every time). */
static int replay_dir(const char *dir, int *count) {
  DIR *d = opendir(dir);
  if (!d) return 0; /* a target may have no regressions yet */
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' || strncmp(e->d_name, "README", 6) == 0) continue;
    if (n == cap) names = realloc(names, sizeof *names * (cap = cap ? 2 * cap : 64));
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, by_name);
  int failed = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    failed |= replay_file(path);
    free(names[i]);
    ++*count;
  }
  free(names);
  return failed;
}

int main(int argc, char **argv) {
  int failed = 0, count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
      failed |= replay_dir(argv[i], &count);
    else if (stat(argv[i], &st) == 0)
      failed |= replay_file(argv[i]), count++;
  }
  printf("%d inputs replayed\n", count);
  return failed;
}
